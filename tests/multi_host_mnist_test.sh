#!/usr/bin/env bash
# The MNIST example on network-namespace hosts (2 hosts x 2 processes, 4 hosts x 1, mesh batch=8)
# reports the per-epoch metrics of the one-process run within 1e-6 relative.
#   multi_host_mnist_test.sh <netns_cluster.sh> <train>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 train=$2
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--mesh=batch=8 --epochs=2 --train_limit=1024 --test_limit=256 --batch_size=64)

"$train" "${flags[@]}" --metrics_out="$tmp/one.json" >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
for topology in "2 2" "4 1"; do
  read -r hosts per_host <<<"$topology"
  out="$tmp/hosts$hosts.json"
  run_on_hosts "$cluster" "$tmp/hosts$hosts.log" "$hosts" "$per_host" "$train" "${flags[@]}" --metrics_out="$out"
  grep -q '^Epoch 2/2 - ' "$tmp/hosts$hosts.log" || { echo "no epoch line in:"; cat "$tmp/hosts$hosts.log"; exit 1; }
  same_metrics "$tmp/one.json" "$out" 1e-6 || { echo "one process:"; cat "$tmp/one.json"; echo "$topology:"; cat "$out"; exit 1; }
done
echo "PASS"
