#!/usr/bin/env bash
# One rank of a 2-process training job fails (an exception, exit() without finalising, SIGKILL,
# or a normal return while the other still trains).
# The whole job must end with a non-zero status within 10 seconds, the error printed, and no
# process left behind.
#   runtime_fault_test.sh <mpirun_test.sh> <fault_injection_main>
set -uo pipefail
launcher=$1
program=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

for mode in throw exit kill return; do
  log="$tmp/$mode.log"
  start=$(date +%s%N)
  DTENSOR_MPI_TIMEOUT=60 "$launcher" 2 "$program" --mode="$mode" --fail_rank=1 --fail_step=3 \
    >"$log" 2>&1
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "mode=$mode status=$status elapsed_ms=$elapsed_ms"
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
  sleep 0.5
  if pgrep -f "$(basename "$program") --mode=$mode" >/dev/null; then
    echo "FAIL($mode): processes were left behind:"; pgrep -af "$(basename "$program")"
    failures=$((failures + 1))
  fi
  if ((failures > 0)); then echo "--- output ($mode) ---"; cat "$log"; fi
done
exit $((failures > 0))
