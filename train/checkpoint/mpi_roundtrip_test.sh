#!/usr/bin/env bash
# Checkpoints across real processes (see mpi_roundtrip_main.cc): saved under `mpirun -np 2` on
# batch=8 and restored in one process on batch=8, batch=2,model=4 and batch=1; saved in one
# process on batch=2,model=4 and restored under `mpirun -np 2` on batch=8 and batch=2,model=4.
# Every restore must give bit-identical values and the losses of the uninterrupted saving run.
# Last, expectations perturbed by one hex digit must make a restore fail.
#   mpi_roundtrip_test.sh <mpirun_test.sh> <mpi_roundtrip>
set -euo pipefail
launcher=$1
roundtrip=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}

echo "== 2 processes -> 1"
"$launcher" 2 "$roundtrip" --mode=save --dir="$tmp/two" --mesh=batch=8
for mesh in batch=8 batch=2,model=4 batch=1; do
  "$roundtrip" --mode=restore --dir="$tmp/two" --mesh="$mesh"
done
"$launcher" 2 "$roundtrip" --mode=restore --dir="$tmp/two" --mesh=batch=4,model=2

echo "== 1 process -> 2"
"$roundtrip" --mode=save --dir="$tmp/one" --mesh=batch=2,model=4
for mesh in batch=8 batch=2,model=4; do
  "$launcher" 2 "$roundtrip" --mode=restore --dir="$tmp/one" --mesh="$mesh"
done

# One hex digit of the first record matching `pattern`, at 1-based position `pos` of its last
# field, replaced by another digit.
perturb() {
  local pattern=$1 pos=$2 out=$3
  awk -v pattern="$pattern" -v pos="$pos" '
    !done && $0 ~ pattern {
      field = $NF; c = substr(field, pos, 1); r = (c == "0") ? "1" : "0"
      $NF = substr(field, 1, pos - 1) r substr(field, pos + 1); done = 1
    }
    { print }
    END { if (!done) { print "no record matches " pattern > "/dev/stderr"; exit 1 } }' \
    "$tmp/two/expected.txt" >"$out"
}

# The restore must fail and say what differs.
expect_mismatch() {
  local expected=$1 mesh=$2 what=$3
  if "$roundtrip" --mode=restore --dir="$tmp/two" --mesh="$mesh" --expected="$expected" \
    2>"$tmp/err.txt"; then
    echo "FAIL: a restore against perturbed expectations ($what) passed"
    exit 1
  fi
  cat "$tmp/err.txt"
  if ! grep -q "MISMATCH" "$tmp/err.txt"; then
    echo "FAIL: the restore against perturbed expectations ($what) failed for another reason"
    exit 1
  fi
}

echo "== perturbed expectations must fail"
perturb '^tensor extra/uneven ' 9 "$tmp/bad_value.txt"
expect_mismatch "$tmp/bad_value.txt" batch=1 "one value"
perturb '^tensor adam/dense_0/kernel/v ' 1 "$tmp/bad_slot.txt"
expect_mismatch "$tmp/bad_slot.txt" batch=2,model=4 "one optimizer slot"
# The third byte of a little-endian float holds its top mantissa bits: a change beyond 1e-5.
perturb '^loss ' 5 "$tmp/bad_loss.txt"
expect_mismatch "$tmp/bad_loss.txt" batch=2,model=4 "one loss"
echo "PASS"
