#!/usr/bin/env bash
# The command lines of both examples and every benchmark: --help exits 0 with usage; every flag
# mistake exits 2 with an exact message before any work (nothing on stdout, no output file);
# relative output paths land in the directory `bazel run` started in (BUILD_WORKING_DIRECTORY).
#   flags_test.sh <mnist train> <keras train> <bench binary>...
set -uo pipefail
mnist=$1
keras=$2
shift 2
benches=("$@")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error <expected stderr first line> <program> [args...]
expect_error() {
  local want=$1
  shift
  local out err code
  out=$("$@" 2>"$tmp/err")
  code=$?
  err=$(head -n 1 "$tmp/err")
  [[ $code -eq 2 ]] || fail "$* exited $code, expected 2"
  [[ "$err" == "$want" ]] || fail "$*: stderr '$err', expected '$want'"
  [[ -z "$out" ]] || fail "$*: printed on stdout before the error: $out"
}

expect_help() {
  local out code
  out=$("$@" --help 2>&1)
  code=$?
  [[ $code -eq 0 ]] || fail "$* --help exited $code"
  grep -q '^Usage: ' <<<"$out" || fail "$* --help printed no usage: $out"
}

for program in "$mnist" "$keras" "${benches[@]}"; do expect_help "$program"; done
# Defaults are shown.
"$mnist" --help | grep -q -- '--epochs INT=3' || fail "mnist --help shows no default for --epochs"

for program in "$mnist" "$keras"; do
  expect_error "train: --epochs: expected an integer, got '1e2'" "$program" --epochs=1e2
  expect_error "train: --epochs: expected an integer, got '1e2'" "$program" --epochs 1e2
  expect_error "train: --seed: expected a non-negative integer, got '1.5'" "$program" --seed=1.5
  expect_error "train: --seed: expected a non-negative integer, got '-1'" "$program" --seed=-1
  expect_error "train: --lr: expected a number, got 'abc'" "$program" --lr=abc
  expect_error "train: --lr: must be greater than 0, got 0" "$program" --lr=0
  expect_error "train: --epochs: must be at least 1, got 0" "$program" --epochs=0
  expect_error "train: --epochs: must be at least 1, got -1" "$program" --epochs=-1
  expect_error "train: --epochs: integer '99999999999999999999' is out of range" "$program" \
    --epochs=99999999999999999999
  expect_error "train: The following argument was not expected: --bogus=1" "$program" --bogus=1
  expect_error "train: The following argument was not expected: stray" "$program" stray
  expect_error "train: --data_dir: no folder '$tmp/missing'" "$program" --data_dir "$tmp/missing"
  # An output whose folder cannot be created: a plain file stands where the folder should be.
  touch "$tmp/file"
  expect_error "train: --metrics_out: cannot create folder '$tmp/file/sub': Not a directory" \
    "$program" --metrics_out="$tmp/file/sub/m.json"
  expect_error "train: --metrics_out: '$tmp' is a folder, expected a file name" \
    "$program" --metrics_out="$tmp"
  expect_error "train: --metrics_out: cannot write '/proc/m.json': No such file or directory" \
    "$program" --metrics_out=/proc/m.json
  [[ ! -e "$tmp/file/sub" ]] || fail "a folder was made under a file"
done
expect_error "train: --mesh: unknown mesh dim 'foo' in 'batch=2,foo=4' (known: batch, model)" \
  "$mnist" --mesh=batch=2,foo=4
expect_error "train: --mesh: the first mesh dim must be 'batch', got 'model=8'" "$mnist" \
  --mesh=model=8
expect_error "train: --plot: cannot write '/proc/p.png': No such file or directory" "$mnist" \
  --plot /proc/p.png
expect_error "train: --tensorboard_dir: cannot create folder '$tmp/file/tb': Not a directory" "$mnist" \
  --tensorboard_dir="$tmp/file/tb"
expect_error "train: --checkpoint_dir: cannot create folder '$tmp/file/c': Not a directory" \
  "$keras" --checkpoint_dir="$tmp/file/c"
expect_error "train_step: The following argument was not expected: batch=8" \
  "$(printf '%s\n' "${benches[@]}" | grep '/train_step$')" batch=8

# Relative outputs land where the user ran the command, with their folders created.
mkdir -p "$tmp/user"
BUILD_WORKING_DIRECTORY="$tmp/user" "$mnist" --epochs=1 --train_limit=256 --test_limit=64 \
  --batch_size=64 --mesh=batch=2 --metrics_out=out/m.json --plot=out/p.png >"$tmp/run.log" 2>&1 ||
  fail "mnist run with relative outputs failed: $(cat "$tmp/run.log")"
[[ -s "$tmp/user/out/m.json" ]] || fail "relative --metrics_out not in the working directory"
[[ -s "$tmp/user/out/p.png" ]] || fail "relative --plot not in the working directory"
grep -q "plot: $tmp/user/out/p.png" "$tmp/run.log" || fail "the log names not the absolute plot path"
BUILD_WORKING_DIRECTORY="$tmp/user" "$keras" --epochs=1 --train_examples=256 --replicas=2 \
  --checkpoint_dir=ckpt --metrics_out=out/k.json >"$tmp/keras.log" 2>&1 ||
  fail "keras run with relative outputs failed: $(cat "$tmp/keras.log")"
[[ -d "$tmp/user/ckpt" ]] || fail "relative --checkpoint_dir not in the working directory"
# The per-epoch JSON carries the step, learning rate, wall time and throughput with the metrics.
for key in '"epoch":0' '"loss":' '"val_accuracy":' '"step":' '"lr":' '"wall_s":' '"examples_per_s":'; do
  grep -q "$key" "$tmp/user/out/k.json" || fail "keras --metrics_out lacks $key: $(cat "$tmp/user/out/k.json")"
done

if ((failures > 0)); then
  echo "$failures failures"
  exit 1
fi
echo "all flag checks passed"
