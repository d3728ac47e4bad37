#!/usr/bin/env bash
# examples/sec of examples/cifar10:train's step next to the same model and step in PyTorch 2
# (bench/peers_cnn.py), on this machine in one run: ours on the synthetic set (24x24x3 after the
# crops, global batch 128) on each mesh given, then the peer; one JSON line each. Run it on a
# quiet machine: the figures mean nothing while other jobs compete for the cores.
#   bench/compare_cnn.sh [steps] [mesh...]        e.g. bench/compare_cnn.sh 30 batch=8 batch=1
# TRAIN names our binary (default bazel-bin/examples/cifar10/train; build it first) and PYTHON
# a Python with torch and numpy (default $PEERS_VENV/bin/python, PEERS_VENV defaulting to a
# peers-venv folder beside the checkout, as in the peers README).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
shift || true
meshes=("$@")
((${#meshes[@]} > 0)) || meshes=(batch=8)
train=${TRAIN:-bazel-bin/examples/cifar10/train}
python=${PYTHON:-${PEERS_VENV:-$(cd .. && pwd)/peers-venv}/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for mesh in "${meshes[@]}"; do
  # One epoch of `steps` batches; the step lines after the first (warm-up) give the rate.
  "$train" --mesh="$mesh" --train_limit=$((steps * 128)) --test_limit=128 --epochs=1 \
    --batch_size=128 --log_every=1 >"$tmp/log"
  grep '^step ' "$tmp/log" | tail -n +3 | sed -E 's/.*\(([0-9.]+) examples.*/\1/' | sort -g >"$tmp/rates"
  n=$(wc -l <"$tmp/rates")
  median=$(awk -v n="$n" '{ r[NR] = $1 } END { print (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2 }' "$tmp/rates")
  printf '{"peer": "dtensor", "model": "cifar10_cnn", "mesh": "%s", "batch": 128, "median_examples_per_s": %s, "steps": %d}\n' \
    "$mesh" "$median" "$n"
done
"$python" bench/peers_cnn.py step --batch 128 --threads 2 --rounds "$steps"
