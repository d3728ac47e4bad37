#!/usr/bin/env bash
# A few steps of //examples/cifar10:train on the synthetic set: --help lists the flags, the step
# line has the tutorial's exact form, the metrics file has one JSON object per epoch with its
# fields, and a second run with the same --checkpoint_dir resumes after the last epoch.
#   smoke_test.sh <train binary>
set -euo pipefail
train=$1
out="${TEST_TMPDIR:-$(mktemp -d)}"

help=$("$train" --help)
for flag in --dataset --data_dir --mesh --epochs --batch_size --lr --seed --log_every \
  --metrics_out --checkpoint_dir --weight_decay --ema_decay; do
  grep -q -- "$flag" <<<"$help" || { echo "--help does not list $flag:"; echo "$help"; exit 1; }
done
grep -q -- '--mesh TEXT=batch=8' <<<"$help" || { echo "no default batch=8 in --help"; exit 1; }
grep -q -- '--batch_size INT=128' <<<"$help" || { echo "no default 128 in --help"; exit 1; }

# Flag mistakes exit 2 with an exact message before any work.
expect_error() {
  local want=$1 err code
  shift
  set +e
  "$train" "$@" >"$out/err.out" 2>"$out/err.log"
  code=$?
  set -e
  err=$(head -n 1 "$out/err.log")
  [[ $code -eq 2 && "$err" == "$want" && ! -s "$out/err.out" ]] ||
    { echo "$*: exit $code, stderr '$err', expected 2 and '$want'"; exit 1; }
}
expect_error "train: --mesh: expected one mesh dim 'batch' (the towers), got 'batch=2,model=4'" \
  --mesh=batch=2,model=4
expect_error "train: --dataset: expected cifar10 or fashion_mnist, got 'mnist'" --dataset=mnist
expect_error "train: --weight_decay: must be at least 0, got -0.5" --weight_decay=-0.5
expect_error "train: --ema_decay: must be in [0, 1], got 1.5" --ema_decay=1.5
expect_error "train: --epochs: must be at least 1, got 0" --epochs=0

common=(--train_limit=96 --test_limit=40 --batch_size=16 --log_every=2)
"$train" "${common[@]}" --epochs=1 --mesh=batch=4 --metrics_out="$out/m.json" --checkpoint_dir="$out/ckpt" \
  >"$out/a.log"
cat "$out/a.log"
# 96 examples in batches of 16: 6 steps, a line after steps 2, 4 and 6.
step_re='^step [0-9]+, loss = [0-9]+\.[0-9]{2} \([0-9]+\.[0-9] examples/sec; [0-9]+\.[0-9]{3} sec/batch\)$'
[[ $(grep -cE "$step_re" "$out/a.log") -eq 3 ]] || { echo "expected 3 step lines"; exit 1; }
grep -qE '^step 6, loss = ' "$out/a.log" || { echo "no line for step 6"; exit 1; }
[[ $(grep -c '^step ' "$out/a.log") -eq 3 ]] || { echo "malformed step lines"; exit 1; }
[[ $(wc -l <"$out/m.json") -eq 1 ]] || { echo "expected one metrics line"; cat "$out/m.json"; exit 1; }
for key in '"epoch":1' '"step":6' '"train_loss":' '"test_loss":' '"test_acc":' '"lr":0.1' \
  '"wall_s":' '"examples_per_s":'; do
  grep -q "$key" "$out/m.json" || { echo "metrics lack $key: $(cat "$out/m.json")"; exit 1; }
done

# Resume on another mesh: epoch 2 only, its line appended to the metrics.
"$train" "${common[@]}" --epochs=2 --mesh=batch=2 --metrics_out="$out/m.json" \
  --checkpoint_dir="$out/ckpt" >"$out/b.log"
cat "$out/b.log"
grep -q "^resumed from $out/ckpt/ckpt-6: 1 epochs done$" "$out/b.log" || { echo "no resume"; exit 1; }
grep -qE '^step 12, loss = ' "$out/b.log" || { echo "no line for step 12"; exit 1; }
[[ $(wc -l <"$out/m.json") -eq 2 ]] || { echo "expected two metrics lines"; exit 1; }
grep -q '"epoch":2,"step":12,' "$out/m.json" || { echo "bad second epoch: $(cat "$out/m.json")"; exit 1; }
# And it ends where an uninterrupted two-epoch run ends (within float reordering: other mesh).
"$train" "${common[@]}" --epochs=2 --mesh=batch=4 --metrics_out="$out/u.json" >"$out/u.log"
field() { tail -n 1 "$2" | grep -o "\"$1\":[^,}]*" | cut -d: -f2; }
for name in train_loss test_loss test_acc; do
  a=$(field "$name" "$out/u.json")
  b=$(field "$name" "$out/m.json")
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    exit !(d <= 1e-4 * m + 1e-12) }' || { echo "resumed $name $b, uninterrupted $a"; exit 1; }
done
echo "PASS"
