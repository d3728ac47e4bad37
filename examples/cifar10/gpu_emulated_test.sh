#!/usr/bin/env bash
# examples/cifar10:train --device=gpu on the emulated GPU (DTENSOR_EMULATED_GPUS=2: shards in
# opaque memory, so any host read of one above the kernel front crashes) against --device=cpu
# with the same flags: the same per-epoch metrics, train loss to 1e-4 relative (the in-process GPU
# collectives may sum in another order) and test accuracy exactly.
#   gpu_emulated_test.sh <train binary>     (or --skip: a --config=cuda build links no emulated GPU)
set -euo pipefail
train=$1
if [[ $train == --skip ]]; then
  echo "skipped: the emulated GPU is not linked in a --config=cuda build"
  exit 0
fi
out="${TEST_TMPDIR:-$(mktemp -d)}"
flags=(--train_limit=96 --test_limit=64 --batch_size=32 --epochs=1 --mesh=batch=2 --log_every=1)
"$train" --device=cpu "${flags[@]}" --metrics_out="$out/cpu.jsonl" >"$out/cpu.log"
DTENSOR_EMULATED_GPUS=2 "$train" --device=gpu "${flags[@]}" --metrics_out="$out/gpu.jsonl" \
  >"$out/gpu.log" || { echo "--device=gpu failed:"; cat "$out/gpu.log"; exit 1; }
field() { grep -o "\"$2\":[^,}]*" "$1" | tail -1 | cut -d: -f2; }
for f in cpu gpu; do
  [[ -n "$(field "$out/$f.jsonl" train_loss)" ]] || { echo "no metrics from $f"; exit 1; }
done
cpu_loss=$(field "$out/cpu.jsonl" train_loss) gpu_loss=$(field "$out/gpu.jsonl" train_loss)
cpu_acc=$(field "$out/cpu.jsonl" test_acc) gpu_acc=$(field "$out/gpu.jsonl" test_acc)
echo "train loss cpu $cpu_loss gpu $gpu_loss; test accuracy cpu $cpu_acc gpu $gpu_acc"
awk -v a="$cpu_loss" -v b="$gpu_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a < 0 ? -a : a)) }' ||
  { echo "train losses differ"; exit 1; }
[[ "$cpu_acc" == "$gpu_acc" ]] || { echo "test accuracies differ"; exit 1; }
grep -q "^step 3, loss = " "$out/gpu.log" || { echo "no step lines:"; cat "$out/gpu.log"; exit 1; }
