#!/bin/bash
# No GPU never passes for a GPU: gpu_test_main.cc and tools/gpu_run_all.sh on this machine.
# Without a GPU (CI), a GPU test binary runs its [host] tests and passes, fails once told it is on
# a GPU machine (DTENSOR_REQUIRE_GPU=1), and run_all.sh reports FAIL and exits 1. With a GPU,
# all three pass.
#   gpu_required_test.sh <a GPU test binary> <tools/gpu_run_all.sh>
set -uo pipefail
bin=$1
run_all=$2
name=$(basename "$bin")
errors=0
expect() {  # expect <what> <status of the check>
  if [[ $2 -ne 0 ]]; then
    echo "FAILED: $1"
    errors=$((errors + 1))
  fi
}
exits() {  # exits <status> <wanted> <what>
  [[ $1 -eq $2 ]]
  expect "$3 (exit $1, wanted $2)" $?
}
has() {  # has <output> <text> <what>
  grep -qF -- "$2" <<<"$1"
  expect "$3: $1" $?
}
ends_with() {  # ends_with <output> <last line> <what>
  [[ "$(tail -1 <<<"$1")" == "$2" ]]
  expect "$3: $1" $?
}

if nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; else has_gpu=0; fi

out=$(DTENSOR_REQUIRE_GPU=0 "$bin" 2>&1)
exits $? 0 "$name passes: $out"
if [[ $has_gpu -eq 0 && ! -e /dev/nvidia0 ]]; then
  has "$out" "GPU tests skipped: no GPU visible (cudaGetDeviceCount: " "$name says it skipped"
  has "$out" "; running the [host] tests" "$name runs its [host] tests"
fi

out=$(DTENSOR_REQUIRE_GPU=1 "$bin" 2>&1)
rc=$?
if [[ $has_gpu -eq 1 ]]; then
  exits $rc 0 "$name with DTENSOR_REQUIRE_GPU=1 on a GPU: $out"
else
  exits $rc 1 "$name with DTENSOR_REQUIRE_GPU=1 without a GPU"
  has "$out" "GPU tests FAILED: no GPU visible (cudaGetDeviceCount: " "$name names the failure"
  has "$out" ") on a GPU machine (DTENSOR_REQUIRE_GPU=1)" "$name says why a GPU was required"
fi

# A bundle of that one test, as tools/gpu_bundle.sh lays it out.
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
mkdir -p "$bundle/bin"
cp "$bin" "$bundle/bin/$name"
cp "$run_all" "$bundle/run_all.sh"
echo "$name" >"$bundle/tests.txt"
out=$(OUT="$bundle/logs" bash "$bundle/run_all.sh" tests 2>&1)
rc=$?
if [[ $has_gpu -eq 1 ]]; then
  exits $rc 0 "run_all.sh tests on a GPU: $out"
  ends_with "$out" "SUMMARY: PASS" "run_all.sh ends with its summary"
else
  exits $rc 1 "run_all.sh without a GPU: $out"
  has "$out" "FAIL no GPU: nvidia-smi: " "run_all.sh reports no GPU"
  has "$out" "FAIL $name " "run_all.sh reports the test as failed"
  ends_with "$out" "SUMMARY: FAIL (no GPU $name)" "run_all.sh ends with the failures"
fi

[[ $errors -eq 0 ]] && echo "PASSED"
exit $((errors > 0))
