#!/usr/bin/env bash
# Failures on 2 network-namespace hosts x 2 processes, mid-way through a loop of all-reduces
# across the hosts: a process SIGKILLed while its all-reduce is in flight, a process that throws,
# and host 1's link taken down (ip link set ... down on its switch port). Each must end every
# process of the job within 15 s of the failure, with a message naming the lost rank or host (the
# throwing rank's message names both: "process 2 of 4 (host <name>-host1): ...").
#   multi_host_failure_test.sh <netns_cluster.sh> <host_failure_mpi_main>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 program=$2
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}

job=("$cluster" 2 2 "$program")
expect_failure "$tmp/killed.log" "process 3: step 20 reached at" \
  "process rank 3 with PID [0-9]+ on node [a-z0-9]+-host1 exited on signal 9" -- \
  "${job[@]}" --fail=kill --rank=3 --after=20
expect_failure "$tmp/throws.log" "process 2: step 20 reached at" \
  "process 2 of 4 \(host [a-z0-9]+-host1\): process 2 throws at step 20" \
  "MPI_ABORT was invoked on rank 2" -- \
  "${job[@]}" --fail=throw --rank=2 --after=20
export READY="$tmp/ready"
rm -f "$READY"
# shellcheck disable=SC2016  # expanded by the hook's shell
NETNS_CLUSTER_HOOK='for _ in $(seq 1 300); do [ -e "$READY" ] && break; sleep 0.1; done
  ip -n "$NETNS_CLUSTER_SWITCH" link set p1 down
  echo "link of host 1 taken down at $(date +%s.%N)"' \
  expect_failure "$tmp/link_down.log" "link of host 1 taken down at" \
  "ORTE has lost communication with a remote daemon" "Remote daemon: .* on node [a-z0-9]+-host1" -- \
  "${job[@]}" --fail=none --after=20 --steps=100000 --ready_file="$READY"
echo "PASS"
