#!/usr/bin/env bash
# MNIST (the seed MLP, synthetic digits) for 300 steps on an emulated-GPU batch=8 mesh must write
# the same per-epoch metrics as on the CPU mesh, loss bits included (the emulated kernels are the
# CPU's and the GPU collectives reduce in the CPU's order), with the captured step (the default)
# and with --eager.
#   mnist_test.sh <train>      (DTENSOR_EMULATED_GPUS set by the BUILD target)
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--mesh=batch=8 --epochs=1 --train_limit=9600 --test_limit=512 --batch_size=32)
strip() { sed -E 's/"(wall_s|examples_per_s)":[^,}]*,?//g' "$1"; }
for mode in captured eager; do
  extra=()
  [ "$mode" = eager ] && extra=(--eager)
  for device in cpu gpu; do
    if ! timeout 300 "$train" "${flags[@]}" "${extra[@]}" --device=$device \
        --metrics_out="$tmp/$mode-$device.json" >"$tmp/$mode-$device.log" 2>&1; then
      echo "$mode on $device failed:"; tail -20 "$tmp/$mode-$device.log"; exit 1
    fi
  done
  if ! diff <(strip "$tmp/$mode-cpu.json") <(strip "$tmp/$mode-gpu.json"); then
    echo "$mode: emulated GPU and CPU metrics differ"; exit 1
  fi
  echo "$mode:"; cat "$tmp/$mode-gpu.json"
done
