#!/usr/bin/env bash
# Helpers of the multi-host tests (tests/multi_host_*_test.sh), sourced by them.

# Fails the test at once, saying why, when this machine cannot make namespace hosts: the suite
# runs as root in CI and must not pass by skipping.
require_namespace_hosts() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "FAIL: the multi-host tests make network namespaces and need root (running as $(id -un))"
    exit 1
  fi
  if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "FAIL: the multi-host tests need 'ip netns' (iproute2) and may not run in a sandbox"
    exit 1
  fi
}

# Seconds since the epoch, with fractions.
now() { date +%s.%N; }

# run_on_hosts CLUSTER LOG HOSTS PER_HOST program...: runs `CLUSTER HOSTS PER_HOST program...`
# (tools/netns_cluster.sh), output to LOG; prints the log and fails the test when the job fails.
run_on_hosts() {
  local cluster=$1 log=$2
  shift 2
  local start
  start=$(now)
  if ! "$cluster" "$@" >"$log" 2>&1; then
    echo "FAIL: netns_cluster.sh $* failed:"
    cat "$log"
    exit 1
  fi
  echo "ran on $1 hosts x $2 processes in $(awk -v a="$start" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}') s: ${3##*/}"
}

# Compares two metrics files of JSON lines ({"name":value,...} per epoch) value by value: the
# same names in the same order, numbers within TOLERANCE relative (default 1e-6), timings
# (wall_s, examples_per_s) and exact-bits fields (loss_bits) skipped.
same_metrics() {
  local a=$1 b=$2 tolerance=${3:-1e-6}
  fields() { tr -d '{}"' <"$1" | tr ',' '\n' | tr ':' ' '; }
  [[ $(wc -l <"$a") -eq $(wc -l <"$b") ]] || { echo "line counts differ: $a $b"; return 1; }
  paste <(fields "$a") <(fields "$b") | awk -v tol="$tolerance" '
    { if ($1 != $3) { print "field mismatch: " $1 " vs " $3; bad = 1; next }
      if ($1 == "wall_s" || $1 == "examples_per_s" || $1 == "loss_bits") next
      diff = $2 - $4; if (diff < 0) diff = -diff
      scale = $2 < 0 ? -$2 : $2; if (scale < 1e-30) scale = 1e-30
      if (diff / scale > tol) { print "differs: " $1 " " $2 " vs " $4; bad = 1 }
      n++ }
    END { if (n == 0) { print "no metrics"; exit 1 } print n " values within " tol; exit bad }'
}

# expect_failure LOG FAILED_AT PATTERN... -- COMMAND...: runs COMMAND, a job expected to fail
# (bounded by DTENSOR_MPI_TIMEOUT=60), output to LOG; then checks LOG for each PATTERN, that no
# process outlived the job, and that it ended within 15 s of the failure, whose time is the last
# number of LOG's first line matching FAILED_AT.
expect_failure() {
  local log=$1 failed_at=$2
  shift 2
  local name patterns=()
  name=$(basename "$log" .log)
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  set +e
  DTENSOR_MPI_TIMEOUT=60 "$@" >"$log" 2>&1
  local code=$?
  set -e
  local ended
  ended=$(now)
  [[ $code -ne 0 ]] || { echo "FAIL $name: the job succeeded:"; cat "$log"; exit 1; }
  for p in "${patterns[@]}"; do
    grep -a -q -E "$p" "$log" || { echo "FAIL $name: no '$p' in:"; cat "$log"; exit 1; }
  done
  if grep -a -q "processes left on the hosts" "$log"; then
    echo "FAIL $name: processes outlived the job:"; cat "$log"; exit 1
  fi
  local at
  at=$(grep -a -m1 -E "$failed_at" "$log" | awk '{print $NF}')
  [[ -n $at ]] || { echo "FAIL $name: no '$failed_at' in:"; cat "$log"; exit 1; }
  local took
  took=$(awk -v a="$at" -v b="$ended" 'BEGIN{printf "%.1f", b-a}')
  if awk -v t="$took" 'BEGIN{exit !(t > 15)}'; then
    echo "FAIL $name: the job ended $took s after the failure (limit 15):"; cat "$log"; exit 1
  fi
  echo "$name: every process ended $took s after the failure (exit $code): $(grep -a -m1 -E "${patterns[0]}" "$log")"
}

# The loss_bits field of each line of a metrics file, one line per epoch.
loss_bits() { sed -n 's/.*"loss_bits":"\([^"]*\)".*/\1/p' "$1"; }

# Fails the test unless two metrics files hold the same loss_bits every epoch; prints them.
same_loss_bits() {
  local a=$1 b=$2
  if ! diff <(loss_bits "$a") <(loss_bits "$b") >/dev/null || [[ -z $(loss_bits "$a") ]]; then
    echo "FAIL: loss bits differ (train/test loss per epoch):"
    paste <(loss_bits "$a") <(loss_bits "$b")
    exit 1
  fi
  echo "same loss bits every epoch: ${b##*/} = ${a##*/}: $(loss_bits "$a" | tr '\n' ' ')"
}
