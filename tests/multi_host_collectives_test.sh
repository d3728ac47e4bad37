#!/usr/bin/env bash
# The MPI backend and the collectives conformance suite on network-namespace hosts (2 hosts x 2
# processes, 4 hosts x 1): the hosts are distinct (names, namespaces), all-reduces across hosts
# go through MPI over TCP while those within one host go through shared memory, the host-aware
# all-reduce gives the flat fold's bits (hosts found by MPI_Comm_split_type), and every
# conformance case passes as on one host.
#   multi_host_collectives_test.sh <netns_cluster.sh> <hosts_test_mpi> <conformance_test_mpi> \
#     <host_aware_test_mpi>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 hosts_test=$2 conformance=$3 host_aware=$4
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}
for topology in "2 2" "4 1"; do
  read -r hosts per_host <<<"$topology"
  DTENSOR_EXPECT_HOSTS=$hosts run_on_hosts "$cluster" "$tmp/hosts.log" "$hosts" "$per_host" "$hosts_test"
  grep -q "All tests passed" "$tmp/hosts.log" || { cat "$tmp/hosts.log"; exit 1; }
  run_on_hosts "$cluster" "$tmp/host_aware.log" "$hosts" "$per_host" "$host_aware"
  grep -q "All tests passed" "$tmp/host_aware.log" || { cat "$tmp/host_aware.log"; exit 1; }
  run_on_hosts "$cluster" "$tmp/conformance.log" "$hosts" "$per_host" "$conformance" "~[local]"
  grep -q "All tests passed" "$tmp/conformance.log" || { cat "$tmp/conformance.log"; exit 1; }
  grep "All tests passed" "$tmp/conformance.log" | head -1
done
echo "PASS"
