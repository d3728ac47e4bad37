#!/usr/bin/env bash
# The MNIST example under `mpirun -np 2` (4 devices per process on batch=8) must report the same
# per-epoch metrics as the one-process run on the same mesh, within 1e-5 relative.
#   mpi_train_test.sh <mpirun_test.sh> <train>
set -euo pipefail
launcher=$1
train=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
flags=(--mesh=batch=8 --epochs=2 --train_limit=1024 --test_limit=256 --batch_size=64)

"$train" "${flags[@]}" --metrics_out="$tmp/one.json"
"$launcher" 2 "$train" "${flags[@]}" --metrics_out="$tmp/two.json"

# One JSON object per line with numeric fields: compare them pairwise.
fields() { tr -d '{}"' <"$1" | tr ',' '\n' | tr ':' ' '; }
paste <(fields "$tmp/one.json") <(fields "$tmp/two.json") | awk '
  { if ($1 != $3) { print "field mismatch: " $1 " vs " $3; bad = 1; next }
    diff = $2 - $4; if (diff < 0) diff = -diff
    scale = $2 < 0 ? -$2 : $2; if (scale < 1e-30) scale = 1e-30
    if (diff / scale > 1e-5) { print "differs: " $1 " " $2 " vs " $4; bad = 1 }
    n++ }
  END { if (n == 0) { print "no metrics"; exit 1 } print n " values compared"; exit bad }'
echo "one process:"; cat "$tmp/one.json"
echo "two processes:"; cat "$tmp/two.json"
