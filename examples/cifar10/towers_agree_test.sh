#!/usr/bin/env bash
# The same small synthetic run on batch=1 (one tower), batch=2 and batch=8 (towers, each on its
# slice of the batch, gradients reduced every step) gives exactly the same per-epoch metrics, to
# the 9 digits the metrics file prints: batch sums are batch-invariant (ops/expand.h,
# Stacking::chunk_rows), so towers compute one device's bits and training does not drift apart.
#   towers_agree_test.sh <train binary>
set -euo pipefail
train=$1
out="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--train_limit=128 --test_limit=64 --batch_size=32 --epochs=2 --log_every=100)
for mesh in 1 2 8; do
  "$train" "${common[@]}" --mesh=batch=$mesh --metrics_out="$out/m$mesh.json" >"$out/$mesh.log"
  cat "$out/$mesh.log"
done
# field <name> <file>: the values of one field, a line per epoch.
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
fail=0
for name in train_loss test_loss test_acc; do
  field "$name" "$out/m1.json" >"$out/$name.1"
  [[ $(wc -l <"$out/$name.1") -eq 2 ]] || { echo "expected 2 epochs of $name"; exit 1; }
  for mesh in 2 8; do
    field "$name" "$out/m$mesh.json" >"$out/$name.$mesh"
    if ! cmp -s "$out/$name.1" "$out/$name.$mesh"; then
      echo "$name per epoch differs between batch=1 and batch=$mesh:"
      paste "$out/$name.1" "$out/$name.$mesh"
      fail=1
    fi
  done
done
[[ $fail -eq 0 ]] || exit 1
echo "PASS: batch=1, batch=2 and batch=8 give the same per-epoch metrics"
