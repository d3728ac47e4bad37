#!/usr/bin/env bash
# The transformer example on a mesh spanning `mpirun -np 2` processes (4 virtual devices each)
# trains as one process does on that mesh: every step's loss within 1e-6 relative, and bit for
# bit in the deterministic mode (DTENSOR_DETERMINISTIC=1), where one device (data=1) prints the
# same bits as well. Meshes: data=2,seq=2,model=2 (the processes split data: batch sums span
# them) and model=8 (they split model: the contractions over model span them).
#   mpi_train_test.sh <mpirun_test.sh> <train>
set -euo pipefail
launcher=$1
train=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
small=(--layers=1 --dim=32 --heads=2 --context=16 --batch=8 --steps=6 --eval_every=6
       --eval_batches=1 --loss_bound=100)

# run <log> <processes> <mesh>: the per-step losses in <log>.
run() {
  local out=$tmp/$1.out
  if [[ $2 == 1 ]]; then
    "$train" "${small[@]}" --mesh="$3" --loss_log="$tmp/$1" >"$out" 2>&1 || { cat "$out"; exit 1; }
  else
    "$launcher" "$2" "$train" "${small[@]}" --mesh="$3" --loss_log="$tmp/$1" >"$out" 2>&1 ||
      { echo "mpirun run failed:"; cat "$out"; exit 1; }
  fi
}

# same <a> <b> <tolerance>: the logs have the same lines (6 steps, then the weights' digest),
# and values equal within the relative tolerance (0: the same bits).
same() {
  paste -d' ' "$tmp/$1" "$tmp/$2" | awk -v tol="$3" -v what="$1 vs $2" '
    { if (NF != 6 || $1 != $4) { print what ": lines differ: " $0; bad = 1; next }
      if (tol == 0) { if ($2 != $5) { print what ": " $1 " bits " $2 " vs " $5; bad = 1 } }
      else { d = $3 - $6; if (d < 0) d = -d; s = $3 < 0 ? -$3 : $3
             if (d > tol * s) { print what ": " $1 " value " $3 " vs " $6; bad = 1 } }
      n++ }
    END { if (n != 7) { print what ": " n " lines"; bad = 1 } exit bad }'
}

for mesh in data=2,seq=2,model=2 model=8; do
  run "one_$mesh" 1 "$mesh"
  run "two_$mesh" 2 "$mesh"
  same "one_$mesh" "two_$mesh" 1e-6
done

export DTENSOR_DETERMINISTIC=1
run det_data=1 1 data=1
for mesh in data=2,seq=2,model=2 model=8; do
  run "det_two_$mesh" 2 "$mesh"
  same det_data=1 "det_two_$mesh" 0
done
echo "one process vs two, mode off (1e-6) and deterministic (bits):"
cat "$tmp/one_data=2,seq=2,model=2" "$tmp/det_data=1"
