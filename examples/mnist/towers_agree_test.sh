#!/usr/bin/env bash
# Towers train exactly like one device: the MNIST example on batch=1, batch=4 and batch=8 (one
# process) writes the same per-epoch metrics, loss bits included (the timings aside), because
# every sum over the batch is batch-invariant (ops/README.md, "Batch-invariant sums"). Under both
# precision policies: mixed_bfloat16's bf16 products are row-separable too.
#   towers_agree_test.sh <train>
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--epochs=2 --train_limit=640 --test_limit=256)
strip() { sed -E 's/"(wall_s|examples_per_s)":[^,}]*,?//g' "$1"; }
for precision in float32 mixed_bfloat16; do
  for mesh in 1 4 8; do
    "$train" "${flags[@]}" --precision=$precision --mesh=batch=$mesh \
      --metrics_out="$tmp/m$mesh.json" >"$tmp/m$mesh.log"
    [ "$(wc -l <"$tmp/m$mesh.json")" -eq 2 ] || { echo "batch=$mesh: expected 2 epochs"; exit 1; }
  done
  for mesh in 4 8; do
    if ! diff <(strip "$tmp/m1.json") <(strip "$tmp/m$mesh.json"); then
      echo "$precision: batch=1 and batch=$mesh metrics differ"; exit 1
    fi
  done
  echo "$precision:"
  cat "$tmp/m1.json"
done
echo "PASS: batch=1, batch=4 and batch=8 give the same bits every epoch, f32 and mixed_bfloat16"
