#!/usr/bin/env bash
# The transformer example runs a few steps on data=2,seq=2,model=2, prints its collective budget,
# draws its loss plot and saves a checkpoint, then resumes from it on data=8 and on one device.
#   train_test.sh <train>
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
small=(--layers=1 --dim=32 --heads=2 --context=16 --batch=8 --eval_every=2 --eval_batches=1
       --loss_bound=100)
"$train" "${small[@]}" --steps=2 --checkpoint="$tmp/ckpt" --plot="$tmp/loss.png" >"$tmp/first.log"
grep -q '^collectives per step:' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
grep -q 'reduce_scatter over data' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
grep -q 'final: step 2 ' "$tmp/first.log" || { cat "$tmp/first.log"; exit 1; }
# The plot: a PNG of 600x450 pixels.
[ "$(head -c 8 "$tmp/loss.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || exit 1
[ "$(od -An -tu1 -j16 -N8 "$tmp/loss.png" | tr -s ' ')" = " 0 0 2 88 0 0 1 194" ] || exit 1
for mesh in data=8 data=1; do
  "$train" "${small[@]}" --mesh=$mesh --steps=4 --resume="$tmp/ckpt" >"$tmp/$mesh.log"
  grep -q 'resumed at step 2' "$tmp/$mesh.log" || { cat "$tmp/$mesh.log"; exit 1; }
  grep -q 'final: step 4 ' "$tmp/$mesh.log" || { cat "$tmp/$mesh.log"; exit 1; }
done
cat "$tmp/first.log" "$tmp/data=8.log"
