#!/usr/bin/env bash
# Kills tasks of an asynchronous parameter-server job with SIGKILL and checks that it survives
# or ends as docs/parameter_server.md promises
# (fault_test.sh <ps_cluster.sh> <train> <mode> <check_sanitizer_logs.sh>):
#   fault_test.sh <ps_cluster.sh> <train> workers   a worker killed at 3 different random steps
#                                                   (restarted once, and told the job finished):
#                                                   the job finishes and reaches >= 0.95 of the
#                                                   synchronous run's test accuracy
#   fault_test.sh <ps_cluster.sh> <train> ps        ps:0 killed: every task ends within 15 s
#                                                   naming it; the job resumes and finishes
#   fault_test.sh <ps_cluster.sh> <train> chief     the same for chief:0
#   fault_test.sh <ps_cluster.sh> <train> push_exit  worker:1 ends (--exit_after_push_at_step)
#                                                   right after both servers acknowledged its
#                                                   push of a random step, before its reply: the
#                                                   step is re-run on worker:0, each server drops
#                                                   the re-run's push as a duplicate and applies
#                                                   the step once; the job finishes at the accuracy
#   fault_test.sh <ps_cluster.sh> <train> plain     no kill, 2 workers and 2 servers: the job
#                                                   reaches the accuracy and writes --metrics_out
# Every job trains on Fashion-MNIST from the Debian package dataset-fashion-mnist (real data; the
# test fails if it is missing), and every server must have applied each step of a run exactly
# once, re-run steps included. No task's log of any job may hold a sanitizer report (under
# --config=asan or tsan): check_sanitizer_logs.sh names the task and quotes the report.
set -euo pipefail

cluster=$1 train=$2 mode=$3 check_logs=$4
work=${TEST_TMPDIR:-$(mktemp -d)}/ps_fault_$mode
rm -rf "$work"
mkdir -p "$work"
export PS_CLUSTER_TIMEOUT=120
steps=300
data_dir=${PS_FAULT_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# The chief waits for both workers before the first step (it stops waiting once they answer): a
# loaded host may take more than the default 10 s to start a worker and load its data.
common=(--steps=$steps --steps_per_epoch=10 --data_dir="$data_dir" --join_wait_s=60)

fail() {
  "$check_logs" "$work"/*/ >&2 || true
  echo "FAIL: $*" >&2
  for f in "$run"/*.log; do
    echo "== $f" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}

# Waits (at most 60 s) until the chief's log reports step >= $1. It logs every 10 steps, and an
# unloaded host runs about 250 steps a second: poll often, and kill no later than step 200, so that
# a kill lands while steps remain to be run (a worker killed after the last step is never missed).
wait_for_step() {
  local want=$1 end last
  end=$(($(date +%s) + 60))
  while (($(date +%s) < end)); do
    last=$(grep -o '^step [0-9]*' "$run/chief:0.log" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true)
    if [[ -n $last && $last -ge $want ]]; then return 0; fi
    sleep 0.02
  done
  fail "the chief never reached step $want in 60 s"
}

# Whether process $1 runs (a zombie, ended but not yet reaped by the launcher, does not).
# One read of /proc/PID/stat: testing it exists and then grepping it raced with the launcher
# reaping the zombie in between (grep's failure read as "running": fault_chief_test failed so).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $stat && $stat != *") Z "* ]]
}

accuracy() { grep -o '^test: accuracy [0-9.]*' "$1" | tail -n 1 | cut -d' ' -f3; }

sync_accuracy=$("$train" --sync "${common[@]}" | grep -o '^test: accuracy [0-9.]*' | cut -d' ' -f3)
[[ -n $sync_accuracy ]] || { echo "FAIL: the synchronous run on $data_dir failed" >&2; exit 1; }
echo "synchronous run: test accuracy $sync_accuracy"

# Fails unless the test accuracy in log $1 is >= 0.95 of the synchronous run's.
check_accuracy() {
  local acc
  acc=$(accuracy "$1")
  echo "$2: test accuracy $acc"
  python3 -c "import sys; sys.exit(0 if $acc >= 0.95 * $sync_accuracy else 1)" ||
    fail "$2: accuracy $acc < 0.95 * $sync_accuracy"
}

# Fails unless every server in log $1 applied each of the run's steps once: "steps applied per
# server: N N of N scheduled".
check_applied_once() {
  local line counts total n
  line=$(grep -o '^steps applied per server: [0-9 ]* of [0-9]* scheduled' "$1") ||
    fail "$2: no applied-steps line"
  counts=${line#steps applied per server: }
  total=${counts##* of }
  total=${total% scheduled}
  counts=${counts% of *}
  for n in $counts; do
    [[ $n -eq $total ]] || fail "$2: a server applied $n steps of $total (want each exactly once)"
  done
  echo "$2: $line; $(grep -o 're-run steps [0-9]*' "$1")"
}

case $mode in
  plain)
    run=$work/plain
    "$cluster" "$run" 2 2 -- "$train" "${common[@]}" --metrics_out="$work/metrics.jsonl" ||
      fail "the job failed"
    check_accuracy "$run/chief:0.log" "2 workers, 2 servers"
    check_applied_once "$run/chief:0.log" "2 workers, 2 servers"
    [[ $(wc -l <"$work/metrics.jsonl") -eq $((steps / 10)) ]] || fail "not one metrics row an epoch"
    grep -q '"examples_per_s"' "$work/metrics.jsonl" || fail "no examples_per_s in the metrics"
    ;;
  push_exit)
    run=$work/push_exit
    exit_at=$((20 + RANDOM % 240))
    "$cluster" "$run" 2 2 -- "$train" "${common[@]}" --exit_after_push_at_step=$exit_at ||
      fail "the job failed"
    line=$(grep -o '^worker:1: exiting after the push of step [0-9]*' "$run/worker:1.log") ||
      fail "worker:1 did not exit after a push at step >= $exit_at"
    echo "$line (--exit_after_push_at_step=$exit_at)"
    grep -q 'worker:1 at .* lost' "$run/chief:0.log" || fail "no lost worker:1"
    grep -q "^step $steps/$steps" "$run/chief:0.log" || fail "not finished"
    grep -q 're-run steps 1,' "$run/chief:0.log" || fail "want exactly 1 re-run step"
    # The re-run pushes to both servers again; each must answer it as a duplicate.
    grep -q 'duplicate pushes dropped 2$' "$run/chief:0.log" ||
      fail "want the re-run's 2 pushes dropped as duplicates"
    check_applied_once "$run/chief:0.log" "worker:1 lost after its push"
    check_accuracy "$run/chief:0.log" "worker:1 lost after its push"
    ;;
  workers)
    # Three different kill steps. Round 2 restarts worker:1: it is killed by step 150 and the chief
    # waits (at most 30 s) for it to rejoin before ending, so "rejoined" does not race the end.
    kill_steps=()
    while [[ ${#kill_steps[@]} -lt 3 ]]; do
      if [[ ${#kill_steps[@]} -eq 1 ]]; then k=$((20 + RANDOM % 130)); else k=$((20 + RANDOM % 180)); fi
      [[ " ${kill_steps[*]} " == *" $k "* ]] || kill_steps+=("$k")
    done
    for round in 1 2 3; do
      run=$work/run$round
      kill_at=${kill_steps[$((round - 1))]}
      extra=()
      [[ $round -eq 2 ]] && extra=(--rejoin_wait_s=30)
      "$cluster" "$run" 2 1 -- "$train" "${common[@]}" "${extra[@]}" &
      launcher=$!
      wait_for_step "$kill_at"
      sleep "0.0$((RANDOM % 10))"
      kill -9 "$(cat "$run/worker:1.pid")"
      echo "round $round: killed worker:1 after step $kill_at"
      if [[ $round -eq 2 ]]; then
        sleep 0.5
        "$cluster" --restart "$run" worker:1 -- "$train" "${common[@]}" "${extra[@]}"
      fi
      status=0
      wait "$launcher" || status=$?
      [[ $status -eq 0 ]] || fail "round $round: the job ended with status $status"
      grep -q 'worker:1 at .* lost' "$run/chief:0.log" || fail "round $round: no lost worker:1"
      grep -q "^step $steps/$steps" "$run/chief:0.log" || fail "round $round: not finished"
      if [[ $round -eq 2 ]]; then
        [[ $(grep -c 'worker:1 at .* joined' "$run/chief:0.log") -eq 2 ]] ||
          fail "round 2: the restarted worker:1 did not rejoin"
        grep -q '^worker:1: shut down by chief:0: finished' "$run/worker:1.log" ||
          fail "round 2: the restarted worker:1 was not told that the job finished"
      fi
      check_accuracy "$run/chief:0.log" "round $round"
      check_applied_once "$run/chief:0.log" "round $round"
    done
    ;;
  ps | chief)
    victim=ps:0
    [[ $mode == chief ]] && victim=chief:0
    run=$work/first
    "$cluster" "$run" 2 2 -- "$train" "${common[@]}" --checkpoint_dir="$work/ckpt" &
    launcher=$!
    wait_for_step 100
    kill -9 "$(cat "$run/$victim.pid")"
    killed=$(date +%s.%N)
    # Every task but the victim ends by itself, each saying which task it lost.
    for t in chief:0 worker:0 worker:1 ps:0 ps:1; do
      [[ $t == "$victim" ]] && continue
      pid=$(cat "$run/$t.pid")
      for ((i = 0; i < 150; i++)); do
        running "$pid" || break
        sleep 0.1
      done
      ((i < 150)) || fail "$t still runs 15 s after $victim was killed"
      grep -q "lost task $victim" "$run/$t.log" || fail "$t does not name the lost $victim"
    done
    ended=$(date +%s.%N)
    wait "$launcher" || true
    echo "every task ended $(python3 -c "print(f'{$ended - $killed:.1f}')") s after $victim was killed"
    run=$work/resumed
    "$cluster" "$run" 2 2 -- "$train" "${common[@]}" --checkpoint_dir="$work/ckpt" ||
      fail "the resumed job failed"
    grep -q "^resumed from $work/ckpt/ckpt-" "$run/chief:0.log" || fail "nothing was resumed"
    grep -q "^step $steps/$steps" "$run/chief:0.log" || fail "the resumed job did not finish"
    check_accuracy "$run/chief:0.log" "resumed job"
    check_applied_once "$run/chief:0.log" "resumed job"
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
if ! "$check_logs" "$work"/*/; then
  echo "FAIL: a task logged a sanitizer report" >&2
  exit 1
fi
echo PASS
