#!/usr/bin/env bash
# Elastic resume: the Keras example trains on 2 network-namespace hosts x 2 processes (4
# replicas, a checkpoint every epoch) and fails mid-run after its second epoch's checkpoint: a
# process SIGKILLed, host 1's link taken down, or every process crashing at once (the example's
# --crash_after_steps). Each job must end naming the lost rank or host, with no process left
# (within 15 s of the failure), and leave its newest complete checkpoint on disk; the job then
# restarts on one host with 2 processes and a smaller mesh (2 replicas of 32 examples: the same
# global batch) from that checkpoint, continues to the last epoch, and must end with the test
# accuracy of a one-process run that was never interrupted (within one example in 1000) and its
# test loss within 1e-3 relative.
#   multi_host_elastic_test.sh <netns_cluster.sh> <mpirun_test.sh> <train>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 mpirun=$2 train=$3
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}
common=(--epochs=12 --train_examples=720 --seed=1 --keep=2)  # 11 steps an epoch

# The final test line: "test: loss L accuracy A".
test_metrics() { awk '/^test: / { print $3, $5 }' "$1"; }

"$train" "${common[@]}" --replicas=4 --per_replica_batch=16 --checkpoint_dir="$tmp/one" \
  >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
read -r ref_loss ref_accuracy <<<"$(test_metrics "$tmp/one.log")"
[[ -n $ref_accuracy ]] || { echo "no test line in:"; cat "$tmp/one.log"; exit 1; }

# resume NAME: continues the failed job of checkpoint directory $tmp/NAME on this host.
resume() {
  local dir="$tmp/$1" log="$tmp/$1.resumed.log"
  local newest
  newest=$(find "$dir" -maxdepth 1 -name 'ckpt-*' | sed 's/.*ckpt-//' | sort -n | tail -1)
  [[ -n $newest && $newest -ge 22 ]] || { echo "FAIL $1: no checkpoint of epoch 2 or later:"; ls -l "$dir"; exit 1; }
  DTENSOR_MPI_TIMEOUT=120 "$mpirun" 2 "$train" "${common[@]}" --replicas=2 --per_replica_batch=32 \
    --checkpoint_dir="$dir" >"$log" 2>&1 || { echo "FAIL $1: the resumed job failed:"; cat "$log"; exit 1; }
  grep -q "resumed from $dir/ckpt-$newest" "$log" || { echo "FAIL $1: not resumed from ckpt-$newest:"; cat "$log"; exit 1; }
  local loss accuracy
  read -r loss accuracy <<<"$(test_metrics "$log")"
  if ! awk -v l="$loss" -v a="$accuracy" -v rl="$ref_loss" -v ra="$ref_accuracy" \
    'BEGIN { d = l - rl; if (d < 0) d = -d; e = a - ra; if (e < 0) e = -e; exit !(d <= 1e-3 * rl && e <= 0.001) }'; then
    echo "FAIL $1: resumed run ends with test loss $loss accuracy $accuracy; uninterrupted: $ref_loss $ref_accuracy"
    cat "$log"; exit 1
  fi
  echo "$1: resumed from ckpt-$newest on 1 host x 2 processes (2 replicas): test loss $loss accuracy $accuracy (uninterrupted: $ref_loss $ref_accuracy)"
}

# A hook that waits (at most 60 s) for epoch 2's checkpoint of $CKPT, then runs $1.
after_checkpoint() {
  # shellcheck disable=SC2016  # expanded by the hook's shell
  printf 'for _ in $(seq 1 1200); do [ -e "$CKPT/ckpt-22" ] && break; sleep 0.05; done\n%s' "$1"
}
job() { echo "$cluster" 2 2 "$train" "${common[@]}" --replicas=4 --per_replica_batch=16; }

# shellcheck disable=SC2016
kill_on_host1='ns=${NETNS_CLUSTER_NAMESPACES#* }; ns=${ns%% *}; victim=""
  for pid in $(ip netns pids "$ns"); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = train ] && victim=$pid
  done
  kill -9 "$victim"; echo "a process of host 1 killed at $(date +%s.%N)"'
# shellcheck disable=SC2016
link_down='ip -n "$NETNS_CLUSTER_SWITCH" link set p1 down
  echo "link of host 1 taken down at $(date +%s.%N)"'

export CKPT="$tmp/killed"
# shellcheck disable=SC2046  # job's words are paths and flags without spaces
NETNS_CLUSTER_HOOK=$(after_checkpoint "$kill_on_host1") expect_failure "$tmp/killed.log" \
  "a process of host 1 killed at" \
  "process rank [23] with PID [0-9]+ on node [a-z0-9]+-host1 exited on signal 9" -- \
  $(job) --checkpoint_dir="$CKPT"
resume killed

export CKPT="$tmp/link_down"
# shellcheck disable=SC2046
NETNS_CLUSTER_HOOK=$(after_checkpoint "$link_down") expect_failure "$tmp/link_down.log" \
  "link of host 1 taken down at" \
  "ORTE has lost communication with a remote daemon" "Remote daemon: .* on node [a-z0-9]+-host1" -- \
  $(job) --checkpoint_dir="$CKPT"
resume link_down

# Every process exits (status 3) after 25 steps, in epoch 3: mpirun names the first rank to go.
# The hook notes when the first crash message reaches the log (polled every 50 ms, at most 60 s;
# also when the clean-up stops the hook first): the job must end within 15 s of it.
export CRASH_LOG="$tmp/crashed.log"
# shellcheck disable=SC2016,SC2046  # expanded by the hook's shell; job's words have no spaces
NETNS_CLUSTER_HOOK='seen() { grep -a -q "simulated crash after" "$CRASH_LOG" 2>/dev/null; }
  trap "seen && echo \"a crash seen at \$(date +%s.%N)\"; exit" TERM
  for _ in $(seq 1 1200); do seen && break; sleep 0.05; done
  seen && echo "a crash seen at $(date +%s.%N)"' expect_failure "$CRASH_LOG" "a crash seen at" \
  "simulated crash after 25 steps" "Process name: \[\[[0-9]+,1\],[0-3]\]" "Exit code: +3" -- \
  $(job) --checkpoint_dir="$tmp/crashed" --crash_after_steps=25
resume crashed
echo "PASS"
