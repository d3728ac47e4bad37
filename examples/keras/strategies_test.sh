#!/usr/bin/env bash
# Runs //examples/keras:train under each --strategy and checks that strategies with the same
# replicas end with the same test metrics and weights checksum: central_storage and
# multi_worker_mirrored (one worker) against mirrored on 4 replicas, one_device against mirrored
# on 1.
#   strategies_test.sh <the train binary>
set -euo pipefail

train=$1
out="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--epochs=2 --train_examples=400 --per_replica_batch=8)

# The lines that must agree: the final test metrics and the weights checksum.
run() {
  local name=$1
  shift
  "$train" "${common[@]}" --checkpoint_dir="$out/$name" "$@" >"$out/$name.log"
  grep -E '^(test: |weights fnv1a64: )' "$out/$name.log"
}

mirrored4=$(run mirrored4 --strategy=mirrored --replicas=4)
mirrored1=$(run mirrored1 --strategy=mirrored --replicas=1)
status=0
for s in central_storage multi_worker_mirrored; do
  got=$(run "$s" --strategy="$s" --replicas=4)
  if [[ "$got" != "$mirrored4" ]]; then
    echo "--strategy=$s differs from mirrored:"; echo "$got"; echo "$mirrored4"; status=1
  fi
done
got=$(run one_device --strategy=one_device --replicas=1)
if [[ "$got" != "$mirrored1" ]]; then
  echo "--strategy=one_device differs from mirrored on 1 replica:"; echo "$got"; echo "$mirrored1"
  status=1
fi
[[ $status == 0 ]] && echo "every strategy matches mirrored: $mirrored4"
exit $status
