#!/usr/bin/env bash
# The deterministic mode (DTENSOR_DETERMINISTIC=1, ops/expand.h): the MNIST example on
# network-namespace hosts, 2 hosts x 2 processes and 4 hosts x 1 (mesh batch=8), prints the
# one-process run's loss bits (train and test loss as hex floats) every epoch, and so does one
# process on a batch=1 mesh. Without the switch the runs agree only to rounding
# (multi_host_mnist_test), since each process then sums its own rows before the all-reduce.
#   multi_host_deterministic_test.sh <netns_cluster.sh> <train>
set -euo pipefail
export DTENSOR_DETERMINISTIC=1  # every run below, and every process of the jobs on hosts
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 train=$2
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--epochs=2 --train_limit=1024 --test_limit=256 --batch_size=64)

one_process() {  # one_process NAME MESH
  "$train" "${flags[@]}" --mesh="$2" --metrics_out="$tmp/$1.json" >"$tmp/$1.log" 2>&1 ||
    { cat "$tmp/$1.log"; exit 1; }
}
one_process one batch=8
one_process one_device batch=1
[[ $(loss_bits "$tmp/one.json" | wc -l) -eq 2 ]] || { echo "no loss bits in:"; cat "$tmp/one.json"; exit 1; }
same_loss_bits "$tmp/one.json" "$tmp/one_device.json"
for topology in "2 2" "4 1"; do
  read -r hosts per_host <<<"$topology"
  run_on_hosts "$cluster" "$tmp/hosts$hosts.log" "$hosts" "$per_host" "$train" "${flags[@]}" \
    --mesh=batch=8 --metrics_out="$tmp/hosts$hosts.json"
  same_loss_bits "$tmp/one.json" "$tmp/hosts$hosts.json"
done
echo "PASS"
