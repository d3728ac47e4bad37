#!/usr/bin/env bash
# The transformer example runs a few steps on data=2,seq=2,model=2, prints its collective budget
# and saves a checkpoint, then resumes from it on data=8 and on one device.
#   train_test.sh <train>
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
small=(--layers=1 --dim=32 --heads=2 --context=16 --batch=8 --eval_every=2 --eval_batches=1
       --loss_bound=100)
"$train" "${small[@]}" --steps=2 --checkpoint="$tmp/ckpt" >"$tmp/first.log"
grep -q '^collectives per step:' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
grep -q 'reduce_scatter over data' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
grep -q 'final: step 2 ' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
for mesh in data=8 data=1; do
  "$train" "${small[@]}" --mesh=$mesh --steps=4 --resume="$tmp/ckpt" >"$tmp/$mesh.log"
  grep -q 'resumed at step 2' "$tmp/$mesh.log" || { cat "$tmp/$mesh.log"; exit 1; }
  grep -q 'final: step 4 ' "$tmp/$mesh.log" || { cat "$tmp/$mesh.log"; exit 1; }
done
cat "$tmp/first.log" "$tmp/data=8.log"
