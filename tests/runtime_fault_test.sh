#!/usr/bin/env bash
# One rank of a 2-process training job fails (an exception, exit() without finalising, SIGKILL,
# or a normal return while the other still trains).
# The whole job must end with a non-zero status within 10 seconds of the failure (the failing
# rank prints its time: the job's start-up, slow on a loaded host, is not counted), the error
# printed, and no process left behind (waited for up to 5 s after the launcher returns).
#   runtime_fault_test.sh <mpirun_test.sh> <fault_injection_main>
set -uo pipefail
launcher=$1
program=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
# Marks this run's processes, so that the leftover check below does not see those of a copy of
# this test running beside it (bazel test --runs_per_test).
tag="runtime_fault_test_$$"

for mode in throw exit kill return; do
  log="$tmp/$mode.log"
  DTENSOR_MPI_TIMEOUT=60 "$launcher" 2 "$program" --mode="$mode" --fail_rank=1 --fail_step=3 \
    --run_tag="$tag" >"$log" 2>&1
  status=$?
  ended=$(date +%s.%N)
  failed_at=$(grep -a -m1 -o "failing at step 3 (${mode}) at [0-9.]*" "$log" | awk '{print $NF}')
  elapsed_ms=$(awk -v a="${failed_at:-0}" -v b="$ended" 'BEGIN{printf "%d", (b - a) * 1000}')
  echo "mode=$mode status=$status elapsed_ms=$elapsed_ms (from the failure to the job's end)"
  if [[ $status -eq 0 ]]; then
    echo "FAIL($mode): the job exited with status 0"; failures=$((failures + 1))
  fi
  if ((elapsed_ms > 10000)); then
    echo "FAIL($mode): the job took ${elapsed_ms} ms to end (limit 10000)"; failures=$((failures + 1))
  fi
  if ! grep -q "failing at step 3 (${mode})" "$log"; then
    echo "FAIL($mode): the failing rank's message is missing"; failures=$((failures + 1))
  fi
  if [[ $mode == throw ]] && ! grep -q "process 1 of 2 (host $(hostname)): \[train\] injected failure at step 3 on process 1" "$log"; then
    echo "FAIL(throw): the exception was not printed with its rank"; failures=$((failures + 1))
  fi
  if [[ $mode == return ]] && ! grep -q "process 0 of 2 (host $(hostname)): \[[a-z_]*\] process 1 has finished its program (its runtime shut down) while process 0 (this one) waits for it in " "$log"; then
    echo "FAIL(return): the waiting rank did not say that process 1 had finished"; failures=$((failures + 1))
  fi
  left="--mode=$mode --fail_rank=1 --fail_step=3 --run_tag=$tag"
  for ((i = 0; i < 50; i++)); do
    pgrep -f -- "$left" >/dev/null || break
    sleep 0.1
  done
  if pgrep -f -- "$left" >/dev/null; then
    echo "FAIL($mode): processes were left behind:"; pgrep -af -- "$left"
    failures=$((failures + 1))
  fi
  if ((failures > 0)); then echo "--- output ($mode) ---"; cat "$log"; fi
done
exit $((failures > 0))
