#!/usr/bin/env bash
# MNIST (the seed MLP, synthetic digits) on emulated-GPU meshes against the CPU mesh.
#  - Captured steps, one emulated GPU: the CPU batch=8 mesh, the emulated batch=1 mesh and the
#    emulated batch=8 mesh (logical devices of that GPU) print the same loss_bits every epoch,
#    bit for bit (ops/README.md, "Batch-invariant sums"), and reach a test accuracy >= 0.9.
#  - Eager steps, two emulated GPUs: batch=8 spans two physical GPUs, whose devices each run their
#    own rows (no stacking across GPUs), so the losses only agree with the CPU's to 1e-2 relative.
#   mnist_test.sh <train>
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
field() { sed -E "s/.*\"$2\":\"?([^,\"}]*).*/\1/" "$1"; }
run() {  # run <name> <gpus> <device> <mesh> <train_limit> [flags...]
  local name=$1 gpus=$2 device=$3 mesh=$4 limit=$5
  shift 5
  local out="$tmp/$name-$device-$mesh"
  if ! DTENSOR_EMULATED_GPUS=$gpus timeout 240 "$train" --mesh="$mesh" --epochs=2 \
      --train_limit="$limit" --test_limit=512 --batch_size=128 --device="$device" \
      --metrics_out="$out.json" "$@" >"$out.log" 2>&1; then
    echo "$name on $device $mesh failed:"; tail -20 "$out.log"; exit 1
  fi
  echo "$name $device $mesh: $(tr '\n' ' ' <"$out.json")"
}
close() {  # close <a> <b>: relative difference <= 1e-2 (Adam spreads last-bit differences)
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
                                   exit !(d <= 1e-2 * (m > 1 ? m : 1)) }'
}
run captured 1 cpu batch=8 3840
run captured 1 gpu batch=1 3840
run captured 1 gpu batch=8 3840
want=$(field "$tmp/captured-cpu-batch=8.json" loss_bits | tr '\n' ' ')
for mesh in batch=1 batch=8; do
  got=$(field "$tmp/captured-gpu-$mesh.json" loss_bits | tr '\n' ' ')
  if [[ "$got" != "$want" ]]; then
    echo "captured: loss_bits on emulated GPU $mesh ($got) differ from the CPU's ($want)"; exit 1
  fi
done
echo "captured: loss_bits equal on CPU batch=8 and emulated GPU batch=1 and batch=8: $want"
acc=$(field "$tmp/captured-gpu-batch=8.json" test_acc | tail -1)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || { echo "test accuracy $acc < 0.9"; exit 1; }
run eager 2 cpu batch=8 640 --eager
run eager 2 gpu batch=8 640 --eager
for key in train_loss test_loss; do
  c=$(field "$tmp/eager-cpu-batch=8.json" $key | tail -1)
  g=$(field "$tmp/eager-gpu-batch=8.json" $key | tail -1)
  close "$g" "$c" || { echo "eager: $key on two emulated GPUs $g vs CPU $c"; exit 1; }
done
