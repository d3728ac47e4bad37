#!/bin/bash
# The GPU suite of a bundle made by tools/gpu_bundle.sh (copied into it as run_all.sh): every test
# binary, then every bench (and the PyTorch peer steps when torch imports), the MNIST example on a
# GPU mesh (batch=1 and batch=8 logical devices; real MNIST when the bundle has it; their
# loss_bits must be EQUAL, else the step fails), the CNN
# example (examples/cifar10) on Fashion-MNIST on a batch=1 GPU mesh, which must reach 0.90 test
# accuracy, and compute-sanitizer --tool memcheck over the tests. Logs go to ./logs, a line per step to stdout,
# and one last line "SUMMARY: PASS" or "SUMMARY: FAIL (...)".
# Under $OUT the logs are packed into one file, logs.tar.gz (the device tool brings back at most 8
# files). Each binary runs under `timeout` (GPU_STEP_TIMEOUT seconds, default 120; memcheck gets
# three times that, the CNN's training GPU_CNN_TIMEOUT, default 420), so a hang fails its step
# instead of the whole call.
#   run_all.sh [tests|benches|mnist|cnn|memcheck]...   (default: all five)
# It runs on a GPU machine, so no GPU is a failure, never a pass: nvidia-smi must list a GPU, and
# the test binaries get DTENSOR_REQUIRE_GPU=1, which makes them fail (not skip) when CUDA sees
# none (runtime/cuda/gpu_test_main.cc), e.g. after a driver mismatch.
set -uo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
LOGS=$DIR/logs
mkdir -p "$LOGS"
STEP_TIMEOUT=${GPU_STEP_TIMEOUT:-120}
bounded() { timeout -k 5 "$STEP_TIMEOUT" "$@"; }
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
# The CUDA libraries the bundle leaves out (cuBLAS, NCCL, ...) may live elsewhere on the GPU machine
# (a Python environment's nvidia/*/lib, say): find each one ldd misses and add its folder.
for lib in $(ldd "$DIR"/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
  found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
  echo "library $lib: ${found:-NOT FOUND}"
  [[ -n "$found" ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
done
export DTENSOR_REQUIRE_GPU=1
STEPS=("$@")
[[ ${#STEPS[@]} -eq 0 ]] && STEPS=(tests benches mnist cnn memcheck)
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
        if bounded "$DIR/bin/$t" $args >"$log" 2>&1 && ! grep -q "GPU tests skipped" "$log"; then
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
        bounded "$DIR/bin/$b" >"$LOGS/$b.log" 2>&1 || fail "$b"
        echo "== $b"; cat "$LOGS/$b.log"
      done <"$DIR/benches.txt"
      # Where the CNN's step spends its GPU time (DTENSOR_GPU_PROFILE, kernels/cuda/profile.h):
      # logged for reading, never a failure.
      if [[ -x "$DIR/bin/gpu_cnn_step" ]]; then
        echo "== gpu_cnn_step with DTENSOR_GPU_PROFILE=1 (log only: $LOGS/gpu_cnn_step_profile.log)"
        DTENSOR_GPU_PROFILE=1 bounded "$DIR/bin/gpu_cnn_step" >"$LOGS/gpu_cnn_step_profile.log" 2>&1 ||
          echo "(gpu_cnn_step with the profile exited $?; not counted)"
        head -40 "$LOGS/gpu_cnn_step_profile.log"
      fi
      if python3 -c "import torch" 2>/dev/null; then
        echo "== peers_gpu_step (PyTorch, same GPU)"
        bounded python3 "$DIR/peers_gpu_step.py" 2>&1 | tail -3
        echo "== peers_gpu_cnn_step (PyTorch, same GPU)"
        bounded python3 "$DIR/peers_gpu_cnn_step.py" 2>&1 | tail -3
      fi
      ;;
    mnist)
      data=()
      [[ -d "$DIR/data/mnist" ]] && data=(--data_dir="$DIR/data/mnist")
      for mesh in batch=1 batch=8; do
        bounded "$DIR/bin/train" --device=gpu --mesh=$mesh "${data[@]}" --metrics_out="$LOGS/mnist_$mesh.jsonl" \
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
    cnn)
      # The acceptance run: 8 epochs (the CPU reaches 0.9016 after 7, docs/benchmarks.md).
      log="$LOGS/cnn_fashion_mnist.log"
      if [[ ! -d "$DIR/data/fashion-mnist" ]]; then
        echo "FAIL cnn: no data/fashion-mnist in the bundle (apt-get install dataset-fashion-mnist)"
        fail "cnn"
        continue
      fi
      timeout -k 5 "${GPU_CNN_TIMEOUT:-420}" "$DIR/bin/cnn_train" --device=gpu --mesh=batch=1 \
        --dataset=fashion_mnist --data_dir="$DIR/data/fashion-mnist" --epochs=8 --log_every=100 \
        --metrics_out="$LOGS/cnn_fashion_mnist.jsonl" >"$log" 2>&1 || fail "cnn"
      accuracy=$(grep -o 'test accuracy [0-9.]*' "$log" | tail -1 | awk '{print $3}')
      if ! awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.90) }'; then fail "cnn accuracy"; fi
      echo "== cnn fashion_mnist batch=1: test accuracy ${accuracy:-none} (>= 0.90 wanted);" \
        "$(grep '^epoch' "$log" | tail -1 | cut -c1-200)"
      ;;
    memcheck)
      # --report-api-errors no: NCCL probes its kernels with cudaFuncGetAttributes and handles the
      # cudaErrorNoKernelImageForDevice it gets for other architectures (seen on an H200); our code
      # checks every CUDA call itself. Memory errors are what this step is for.
      while read -r t args; do
        log="$LOGS/$t${args//[^a-z]/_}.memcheck.log"
        timeout -k 5 $((3 * STEP_TIMEOUT)) compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 "$DIR/bin/$t" $args >"$log" 2>&1
        r=$?
        [[ $r -ne 0 ]] && fail "memcheck $t"
        echo "memcheck $t $args: exit $r; $(grep -E 'ERROR SUMMARY' "$log" | tail -1)"
      done <"$DIR/tests.txt"
      ;;
  esac
done
if [[ -n ${OUT:-} ]]; then tar czf "$OUT/logs.tar.gz" -C "$DIR" logs; fi
if [[ $status -eq 0 ]]; then
  echo "SUMMARY: PASS"
else
  echo "SUMMARY: FAIL (${failed[*]})"
fi
exit $status
