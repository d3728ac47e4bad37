#!/usr/bin/env bash
# The MNIST example with its captured training step (the default) and with --eager must write the
# same per-epoch metrics, loss bits included (the timings aside), and print the step time.
#   capture_train_test.sh <train>
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
for mesh in batch=8 batch=2,model=4; do
  flags=(--mesh=$mesh --epochs=2 --train_limit=640 --test_limit=256 --batch_size=96)
  "$train" "${flags[@]}" --metrics_out="$tmp/captured.json" >"$tmp/captured.log"
  "$train" "${flags[@]}" --eager --metrics_out="$tmp/eager.json" >"$tmp/eager.log"
  grep -q 'step time: median .* ms per step (captured)' "$tmp/captured.log" ||
    { echo "no captured step time in:"; cat "$tmp/captured.log"; exit 1; }
  grep -q 'step time: median .* ms per step (eager)' "$tmp/eager.log" ||
    { echo "no eager step time in:"; cat "$tmp/eager.log"; exit 1; }
  # Timings differ run to run; everything else must be identical.
  strip() { sed -E 's/"(wall_s|examples_per_s)":[^,}]*,?//g' "$1"; }
  if ! diff <(strip "$tmp/eager.json") <(strip "$tmp/captured.json"); then
    echo "mesh $mesh: captured and eager metrics differ"; exit 1
  fi
  [ "$(wc -l <"$tmp/captured.json")" -eq 2 ] || { echo "expected 2 epochs"; exit 1; }
  echo "mesh $mesh:"; cat "$tmp/captured.json"
done
