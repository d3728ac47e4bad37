#!/usr/bin/env bash
# check_sanitizer_logs.sh on planted reports of each sanitizer, and fault_test.sh failing on one:
# a job of a stand-in program (no training: each task prints what fault_test.sh reads and ends)
# passes, and fails with the report quoted once ps:1 logs a UBSan report.
#   check_sanitizer_logs_test.sh <check_sanitizer_logs.sh> <fault_test.sh> <ps_cluster.sh>
set -euo pipefail

check=$1 fault_test=$2 cluster=$3
tmp=${TEST_TMPDIR:-$(mktemp -d)}/sanitizer_logs
rm -rf "$tmp"
mkdir -p "$tmp"

fail() {
  echo "FAIL: $*"
  exit 1
}

# A job directory with a clean log per task ("error" in lower case is no report).
clean_job() {
  mkdir -p "$1"
  for t in chief:0 worker:0 worker:1 ps:0; do
    printf 'data: fashion-mnist\nstep 10/300 loss 0.9 (no error)\n' >"$1/$t.log"
  done
}

# expect_report NAME LINE: LINE, 2 lines into worker:1's log and followed by 12 frames, must be
# reported with the report's first 10 lines, and nothing else.
expect_report() {
  local name=$1 line=$2 dir=$tmp/$1 clean=$tmp/$1_clean out status=0
  clean_job "$dir"
  clean_job "$clean"
  for ((i = 0; i < 12; i++)); do echo "    #$i 0x4f00 in frame_$i"; done >"$tmp/frames"
  { echo "$line"; cat "$tmp/frames"; } >>"$dir/worker:1.log"
  out=$("$check" "$clean" "$dir/") || status=$?
  [[ $status -eq 1 ]] || fail "$name: check_sanitizer_logs.sh exited $status, want 1"
  local want
  want=$(
    echo "FAIL: worker:1 logged a sanitizer report ($dir/worker:1.log, line 3):"
    { echo "$line"; head -n 9 "$tmp/frames"; } | sed 's/^/  | /'
  )
  [[ $out == "$want" ]] || fail "$name: got
$out
want
$want"
  echo "$name: reported"
}

out=$("$check" "$tmp/none" && clean_job "$tmp/clean" && "$check" "$tmp/clean") ||
  fail "clean logs: check_sanitizer_logs.sh failed: $out"
[[ -z $out ]] || fail "clean logs: unexpected output: $out"
expect_report asan "==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010"
expect_report tsan "WARNING: ThreadSanitizer: data race (pid=4242)"
expect_report lsan "==4242==ERROR: LeakSanitizer: detected memory leaks"
expect_report ubsan "train/ps/rpc.cc:57:12: runtime error: signed integer overflow: 2147483647 + 1 cannot be represented in type 'int'"

# The stand-in: prints what fault_test.sh's plain mode reads (as the chief), and PLANT_LINE on
# stderr as task PLANT_TASK.
fake=$tmp/fake_train.sh
cat >"$fake" <<'FAKE'
#!/usr/bin/env bash
metrics=
for a in "$@"; do
  case $a in
    --sync) echo "test: accuracy 0.8"; exit 0 ;;
    --metrics_out=*) metrics=${a#--metrics_out=} ;;
  esac
done
task=$(sed -n 's/.*"task": {"type": "\([a-z]*\)", "index": \([0-9]*\)}.*/\1:\2/p' <<<"$TF_CONFIG")
if [[ $task == "${PLANT_TASK:-}" ]]; then echo "$PLANT_LINE" >&2; fi
if [[ $task == chief:0 ]]; then
  for ((i = 0; i < 30; i++)); do echo '{"loss":0.5,"examples_per_s":100}'; done >"$metrics"
  echo "step 300/300 loss 0.5"
  echo "per step: rpc 1.000 ms, compute 1.000 ms; re-run steps 0, workers lost 0"
  echo "steps applied per server: 300 300 of 300 scheduled; duplicate pushes dropped 0"
  echo "test: accuracy 0.8"
fi
FAKE
chmod +x "$fake"

out=$(TEST_TMPDIR=$tmp/job_clean "$fault_test" "$cluster" "$fake" plain "$check" 2>&1) ||
  fail "fault_test.sh on a clean stand-in job failed:
$out"
[[ $out == *PASS ]] || fail "fault_test.sh on a clean stand-in job: no PASS in
$out"
echo "fault_test.sh passes a clean stand-in job"

report="train/ps/worker.cc:88:3: runtime error: load of value 7, which is not a valid value for type 'bool'"
status=0
out=$(TEST_TMPDIR=$tmp/job_report PLANT_TASK=ps:1 PLANT_LINE=$report \
  "$fault_test" "$cluster" "$fake" plain "$check" 2>&1) || status=$?
[[ $status -eq 1 ]] || fail "fault_test.sh with ps:1's report exited $status, want 1:
$out"
log=$tmp/job_report/ps_fault_plain/plain/ps:1.log
for want in "FAIL: ps:1 logged a sanitizer report ($log, line 1):" "  | $report" \
  "FAIL: a task logged a sanitizer report"; do
  grep -qxF "$want" <<<"$out" || fail "fault_test.sh with ps:1's report: no line '$want' in
$out"
done
echo "fault_test.sh fails naming ps:1 and quoting its report"
echo PASS
