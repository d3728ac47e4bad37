#!/usr/bin/env bash
# The MNIST example under `mpirun -np 2` (4 devices per process on batch=8) must report the same
# per-epoch metrics as the one-process run on the same mesh, within 1e-5 relative; its log (output
# to a file, though Open MPI gives ranks a pty) holds no control characters.
#   mpi_train_test.sh <mpirun_test.sh> <train>
set -euo pipefail
launcher=$1
train=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--mesh=batch=8 --epochs=2 --train_limit=1024 --test_limit=256 --batch_size=64)

"$train" "${flags[@]}" --metrics_out="$tmp/one.json"
if ! "$launcher" 2 "$train" "${flags[@]}" --metrics_out="$tmp/two.json" >"$tmp/two.log" 2>&1; then
  echo "mpirun run failed:"; cat "$tmp/two.log"; exit 1
fi
# No carriage returns or escape sequences: only printable text, tabs and newlines.
if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$tmp/two.log"; then
  echo "control characters in the mpirun log:"; cat -v "$tmp/two.log"; exit 1
fi
grep -q '^Epoch 2/2 - ' "$tmp/two.log" || { echo "no epoch line in:"; cat "$tmp/two.log"; exit 1; }

# One JSON object per line with numeric fields: compare them pairwise.
fields() { tr -d '{}"' <"$1" | tr ',' '\n' | tr ':' ' '; }
paste <(fields "$tmp/one.json") <(fields "$tmp/two.json") | awk '
  { if ($1 != $3) { print "field mismatch: " $1 " vs " $3; bad = 1; next }
    if ($1 == "wall_s" || $1 == "examples_per_s") next   # timings differ run to run
    if ($1 == "loss_bits") next   # exact bits: only runs on the same devices agree on them
    diff = $2 - $4; if (diff < 0) diff = -diff
    scale = $2 < 0 ? -$2 : $2; if (scale < 1e-30) scale = 1e-30
    if (diff / scale > 1e-5) { print "differs: " $1 " " $2 " vs " $4; bad = 1 }
    n++ }
  END { if (n == 0) { print "no metrics"; exit 1 } print n " values compared"; exit bad }'
echo "one process:"; cat "$tmp/one.json"
echo "two processes:"; cat "$tmp/two.json"
