#!/usr/bin/env bash
# Runs //examples/keras:train uninterrupted, then crashed (twice) and resumed in another checkpoint
# directory, and checks that both end with the same weights checksum and test metrics.
#   resume_test.sh <command that runs train...>   (the train binary, or a launcher and it)
set -euo pipefail

train=("$@")
out="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--replicas=4 --epochs=3 --train_examples=720 --per_replica_batch=16)

# The lines that must agree: the final test metrics and the weights checksum.
final() { grep -E '^(test: |weights fnv1a64: )' "$1"; }

"${train[@]}" "${common[@]}" --checkpoint_dir="$out/a" --metrics_out="$out/a.csv" >"$out/a.log"
final "$out/a.log" >"$out/a.final"
[[ $(wc -l <"$out/a.final") -eq 2 ]] || { echo "no final lines in:"; cat "$out/a.log"; exit 1; }

# 11 steps per epoch (648 examples in global batches of 64, the last one of 8). Crash in epoch 1
# (global step 13; the next run restores epoch 0's checkpoint, ckpt-11), then in epoch 2 (global
# step 11 + 12 = 23; restores ckpt-22), then finish.
for crash in 13 12; do
  set +e
  "${train[@]}" "${common[@]}" --checkpoint_dir="$out/b" --metrics_out="$out/b.csv" \
    --crash_after_steps="$crash" >"$out/b.crash$crash.log"
  code=$?
  set -e
  if [[ $code -ne 3 ]]; then
    echo "expected the simulated crash (exit 3), got $code:"
    cat "$out/b.crash$crash.log"
    exit 1
  fi
  grep -q "simulated crash after $crash steps" "$out/b.crash$crash.log"
done
"${train[@]}" "${common[@]}" --checkpoint_dir="$out/b" --metrics_out="$out/b.csv" >"$out/b.log"
grep -q "resumed from $out/b/ckpt-22: epoch 3, step 0 of it" "$out/b.log" || { cat "$out/b.log"; exit 1; }
final "$out/b.log" >"$out/b.final"
if ! diff "$out/a.final" "$out/b.final"; then
  echo "resumed run differs from the uninterrupted one"
  exit 1
fi
# The epoch log has no duplicated or missing rows either, and the same values but for the timings.
untimed() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i != "wall_s" && $i != "examples_per_s" }
    { row = ""; for (i = 1; i <= NF; i++) if (keep[i]) row = row $i ","; print row }' "$1"
}
head -1 "$out/a.csv" | grep -q wall_s || { echo "no wall_s column in the epoch log"; exit 1; }
diff <(untimed "$out/a.csv") <(untimed "$out/b.csv")

# Running the finished job again restores the final state and trains nothing.
"${train[@]}" "${common[@]}" --checkpoint_dir="$out/b" --metrics_out="$out/b.csv" >"$out/c.log"
grep -q "restored $out/b/ckpt-33: training was complete" "$out/c.log"
grep -q "trained 0 epochs in this run; global step 33" "$out/c.log" || { cat "$out/c.log"; exit 1; }
final "$out/c.log" | diff "$out/a.final" -
echo "PASS: resumed training matches the uninterrupted run: $(tail -1 "$out/a.final")"
