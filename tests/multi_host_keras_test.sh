#!/usr/bin/env bash
# The Keras example on network-namespace hosts: 2 hosts x 2 processes and 4 hosts x 1 (4
# replicas) report the epoch metrics and test metrics of the one-process run within 1e-6
# relative; a run on 2 hosts x 2 processes that crashes after its first epoch's checkpoint
# (written by processes on both hosts) is resumed by one process on this machine, and ends with
# the metrics of the uninterrupted run within 1e-6.
#   multi_host_keras_test.sh <netns_cluster.sh> <train>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 train=$2
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}
common=(--replicas=4 --epochs=3 --train_examples=720 --per_replica_batch=16)

# The final test line as JSON, for same_metrics.
test_line() {
  awk '/^test: / { printf "{\"loss\":%s,\"accuracy\":%s}\n", $3, $5 }' "$1" >"$1.test.json"
  [[ -s "$1.test.json" ]] || { echo "no test line in:"; cat "$1"; exit 1; }
}

"$train" "${common[@]}" --checkpoint_dir="$tmp/one" --metrics_out="$tmp/one.json" >"$tmp/one.log" 2>&1 ||
  { cat "$tmp/one.log"; exit 1; }
test_line "$tmp/one.log"
for topology in "2 2" "4 1"; do
  read -r hosts per_host <<<"$topology"
  run_on_hosts "$cluster" "$tmp/hosts$hosts.log" "$hosts" "$per_host" "$train" "${common[@]}" \
    --checkpoint_dir="$tmp/hosts$hosts" --metrics_out="$tmp/hosts$hosts.json"
  test_line "$tmp/hosts$hosts.log"
  same_metrics "$tmp/one.json" "$tmp/hosts$hosts.json" 1e-6 || { cat "$tmp/one.json" "$tmp/hosts$hosts.json"; exit 1; }
  same_metrics "$tmp/one.log.test.json" "$tmp/hosts$hosts.log.test.json" 1e-6
done

# Crash on 2 x 2 in epoch 1 (global step 13; epoch 0's checkpoint, ckpt-11, is on disk), resume
# in one process.
set +e
"$cluster" 2 2 "$train" "${common[@]}" --checkpoint_dir="$tmp/moved" --metrics_out="$tmp/moved.json" \
  --crash_after_steps=13 >"$tmp/crash.log" 2>&1
code=$?
set -e
[[ $code -ne 0 ]] || { echo "the crashing run succeeded:"; cat "$tmp/crash.log"; exit 1; }
grep -q "simulated crash after 13 steps" "$tmp/crash.log" || { cat "$tmp/crash.log"; exit 1; }
[[ -e "$tmp/moved/ckpt-11" ]] || { echo "no ckpt-11 saved on the hosts:"; ls -l "$tmp/moved"; exit 1; }
"$train" "${common[@]}" --checkpoint_dir="$tmp/moved" --metrics_out="$tmp/moved.json" >"$tmp/resumed.log" 2>&1 ||
  { cat "$tmp/resumed.log"; exit 1; }
grep -q "resumed from $tmp/moved/ckpt-11: epoch 2, step 0 of it" "$tmp/resumed.log" || { cat "$tmp/resumed.log"; exit 1; }
test_line "$tmp/resumed.log"
same_metrics "$tmp/one.log.test.json" "$tmp/resumed.log.test.json" 1e-6
same_metrics "$tmp/one.json" "$tmp/moved.json" 1e-6 || { cat "$tmp/one.json" "$tmp/moved.json"; exit 1; }
if diff <(grep '^weights fnv1a64' "$tmp/one.log") <(grep '^weights fnv1a64' "$tmp/resumed.log") >/dev/null; then
  echo "resumed on one process: the uninterrupted run's weights, bit for bit"
else
  echo "resumed on one process: weights differ in their bits (metrics agree within 1e-6)"
fi
echo "PASS"
