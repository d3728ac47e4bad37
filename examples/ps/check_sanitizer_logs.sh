#!/usr/bin/env bash
# Fails when a task of a parameter-server job logged a sanitizer report. Under --config=asan or
# --config=tsan a server's or a worker's report ends only that process (or, for a leak, only its
# exit status), which the job's launcher does not look at; its log is where the report stays.
#   check_sanitizer_logs.sh <job dir>...   (tools/ps_cluster.sh's directories: <task>.log each)
# For each log that holds "ERROR: AddressSanitizer", "WARNING: ThreadSanitizer",
# "ERROR: LeakSanitizer" or UBSan's "runtime error:", prints
#   FAIL: <task> logged a sanitizer report (<log>, line <n>):
# and the report's first 10 lines, then exits 1; exits 0 when no log holds one.
set -euo pipefail

pattern='ERROR: AddressSanitizer|WARNING: ThreadSanitizer|ERROR: LeakSanitizer|runtime error:'
status=0
for dir in "$@"; do
  dir=${dir%/}
  for log in "$dir"/*.log; do
    [[ -f $log ]] || continue
    line=$(grep -a -n -m1 -E "$pattern" "$log" | cut -d: -f1) || continue
    echo "FAIL: $(basename "$log" .log) logged a sanitizer report ($log, line $line):"
    sed -n "${line},$((line + 9))p" "$log" | sed 's/^/  | /'
    status=1
  done
done
exit "$status"
