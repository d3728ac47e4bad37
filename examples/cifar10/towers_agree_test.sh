#!/usr/bin/env bash
# The same small synthetic run on batch=1 (one tower), batch=2 and batch=8 (towers, each on its
# slice of the batch, gradients reduced every step) gives exactly the same per-epoch metrics, to
# the 9 digits the metrics file prints (enough to tell any two f32 values apart): batch sums are
# batch-invariant (ops/expand.h, Stacking::chunk_rows), so towers compute one device's bits and
# training does not drift apart. Under both precision policies: mixed_bfloat16's bf16
# convolutions and products give each image the same bits whatever the tower's batch.
#   towers_agree_test.sh <train binary>
set -euo pipefail
train=$1
out="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--train_limit=128 --test_limit=64 --batch_size=32 --epochs=2 --log_every=100)
# field <name> <file>: the values of one field, a line per epoch.
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
fail=0
for precision in float32 mixed_bfloat16; do
  run="$out/$precision"
  mkdir -p "$run"
  for mesh in 1 2 8; do
    "$train" "${common[@]}" --precision=$precision --mesh=batch=$mesh \
      --metrics_out="$run/m$mesh.json" >"$run/$mesh.log"
    cat "$run/$mesh.log"
  done
  for name in train_loss test_loss test_acc; do
    field "$name" "$run/m1.json" >"$run/$name.1"
    [[ $(wc -l <"$run/$name.1") -eq 2 ]] || { echo "expected 2 epochs of $name"; exit 1; }
    for mesh in 2 8; do
      field "$name" "$run/m$mesh.json" >"$run/$name.$mesh"
      if ! cmp -s "$run/$name.1" "$run/$name.$mesh"; then
        echo "$precision: $name per epoch differs between batch=1 and batch=$mesh:"
        paste "$run/$name.1" "$run/$name.$mesh"
        fail=1
      fi
    done
  done
done
[[ $fail -eq 0 ]] || exit 1
echo "PASS: batch=1, batch=2 and batch=8 give the same per-epoch metrics (float32, mixed_bfloat16)"
