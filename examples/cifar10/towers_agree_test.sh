#!/usr/bin/env bash
# The same small synthetic run on batch=1 (one tower) and batch=8 (eight towers, each on its
# slice of the batch, gradients reduced every step) gives the same per-epoch metrics within 1e-4
# relative: the towers compute the one-device step, only the order of float sums differs.
#   towers_agree_test.sh <train binary>
set -euo pipefail
train=$1
out="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--train_limit=128 --test_limit=64 --batch_size=32 --epochs=2 --log_every=100)
for mesh in 1 8; do
  "$train" "${common[@]}" --mesh=batch=$mesh --metrics_out="$out/m$mesh.json" >"$out/$mesh.log"
  cat "$out/$mesh.log"
done
# field <name> <file>: the values of one field, a line per epoch.
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
fail=0
for name in train_loss test_loss test_acc; do
  paste <(field "$name" "$out/m1.json") <(field "$name" "$out/m8.json") >"$out/$name"
  [[ $(wc -l <"$out/$name") -eq 2 ]] || { echo "expected 2 epochs of $name"; exit 1; }
  if ! awk -v name="$name" '{ d = $1 - $2; if (d < 0) d = -d; m = ($1 < 0 ? -$1 : $1);
         if (d > 1e-4 * m + 1e-12) { print name " epoch " NR ": " $1 " vs " $2; bad = 1 } }
       END { exit bad }' "$out/$name"; then
    fail=1
  fi
done
[[ $fail -eq 0 ]] || exit 1
echo "PASS: batch=1 and batch=8 agree per epoch"
