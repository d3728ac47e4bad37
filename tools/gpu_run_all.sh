#!/bin/bash
# The GPU suite of a bundle made by tools/gpu_bundle.sh (copied into it as run_all.sh): every test
# binary, then every bench (and the PyTorch peer step when torch imports), the MNIST example on a
# GPU mesh (batch=1 and batch=8 logical devices; real MNIST when the bundle has it; their
# loss_bits must be EQUAL, else the step fails), and compute-sanitizer --tool memcheck over the
# tests. Logs go to $OUT (the device tool's folder) or ./logs, a line per step to stdout, and one
# last line "SUMMARY: PASS" or "SUMMARY: FAIL (...)".
#   run_all.sh [tests|benches|mnist|memcheck]...   (default: all four)
# It runs on a GPU machine, so no GPU is a failure, never a pass: nvidia-smi must list a GPU, and
# the test binaries get DTENSOR_REQUIRE_GPU=1, which makes them fail (not skip) when CUDA sees
# none (runtime/cuda/gpu_test_main.cc), e.g. after a driver mismatch.
set -uo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
LOGS=${OUT:-$DIR/logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
export DTENSOR_REQUIRE_GPU=1
STEPS=("$@")
[[ ${#STEPS[@]} -eq 0 ]] && STEPS=(tests benches mnist memcheck)
status=0
failed=()
fail() {
  status=1
  failed+=("$1")
}
if gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) &&
  [[ -n "$gpus" ]]; then
  echo "$gpus" | head -2
else
  echo "FAIL no GPU: nvidia-smi: $(echo "$gpus" | head -1 | cut -c1-200)"
  fail "no GPU"
fi
for step in "${STEPS[@]}"; do
  case "$step" in
    tests)
      while read -r t args; do
        log="$LOGS/$t${args//[^a-z]/_}.log"
        start=$(date +%s)
        # A binary that skipped its GPU tests did not test anything here.
        if "$DIR/bin/$t" $args >"$log" 2>&1 && ! grep -q "GPU tests skipped" "$log"; then
          r=PASS
        else
          r=FAIL
          fail "$t"
        fi
        echo "$r $t $args ($(( $(date +%s) - start ))s): $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200)"
      done <"$DIR/tests.txt"
      ;;
    benches)
      while read -r b; do
        "$DIR/bin/$b" >"$LOGS/$b.log" 2>&1 || fail "$b"
        echo "== $b"; cat "$LOGS/$b.log"
      done <"$DIR/benches.txt"
      if python3 -c "import torch" 2>/dev/null; then
        echo "== peers_gpu_step (PyTorch, same GPU)"
        python3 "$DIR/peers_gpu_step.py" 2>&1 | tail -3
      fi
      ;;
    mnist)
      data=()
      [[ -d "$DIR/data/mnist" ]] && data=(--data_dir="$DIR/data/mnist")
      for mesh in batch=1 batch=8; do
        "$DIR/bin/train" --device=gpu --mesh=$mesh "${data[@]}" --metrics_out="$LOGS/mnist_$mesh.jsonl" \
          >"$LOGS/mnist_$mesh.log" 2>&1 || fail "mnist $mesh"
        echo "== mnist $mesh: $(tail -1 "$LOGS/mnist_$mesh.log" | cut -c1-300)"
      done
      # The same bits on every mesh: batch=8 logical devices of one GPU print batch=1's loss_bits
      # every epoch (ops/README.md, "Batch-invariant sums").
      bits() {
        sed -nE 's/.*"loss_bits":"([^"]*)".*/\1/p' "$LOGS/mnist_$1.jsonl" 2>/dev/null | tr '\n' ' '
      }
      one=$(bits batch=1) eight=$(bits batch=8)
      if [[ -n "$one" && "$one" == "$eight" ]]; then
        echo "mnist loss_bits batch=1 vs batch=8: EQUAL ($one)"
      else
        echo "mnist loss_bits batch=1 vs batch=8: DIFFER" \
          "(batch=1: ${one:-none}; batch=8: ${eight:-none})"
        fail "mnist bits"
      fi
      ;;
    memcheck)
      while read -r t args; do
        log="$LOGS/$t${args//[^a-z]/_}.memcheck.log"
        compute-sanitizer --tool memcheck --error-exitcode 3 "$DIR/bin/$t" $args >"$log" 2>&1
        r=$?
        [[ $r -ne 0 ]] && fail "memcheck $t"
        echo "memcheck $t $args: exit $r; $(grep -E 'ERROR SUMMARY' "$log" | tail -1)"
      done <"$DIR/tests.txt"
      ;;
  esac
done
if [[ $status -eq 0 ]]; then
  echo "SUMMARY: PASS"
else
  echo "SUMMARY: FAIL (${failed[*]})"
fi
exit $status
