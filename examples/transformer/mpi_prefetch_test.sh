#!/usr/bin/env bash
# Under mpirun -np 2, FSDP with prefetch (which gathers at its start on the calling thread when the
# mesh spans processes) trains with the loss bits of FSDP without it, 10 steps on data=8.
#   mpi_prefetch_test.sh <mpirun_test.sh> <train>
set -euo pipefail
mpirun=$1
train=$2
small=(--mesh=data=8 --layers=2 --dim=32 --heads=2 --context=16 --batch=8 --eval_every=10
       --eval_batches=1 --loss_bound=100 --steps=10)
bits() { grep -a '^final: ' | sed 's/.*loss bits //'; }
plain=$("$mpirun" 2 "$train" "${small[@]}" | bits)
prefetched=$("$mpirun" 2 "$train" "${small[@]}" --prefetch --reshard_after_forward | bits)
echo "fsdp: $plain; fsdp + reshard + prefetch: $prefetched"
[[ -n "$plain" && "$plain" == "$prefetched" ]]
