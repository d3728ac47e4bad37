#!/usr/bin/env bash
# The CIFAR-10 CNN's training step (global batch 128 of 24x24x3 images, a fixed batch) in dtensor
# (bench/cnn_step: each mesh under float32 and mixed_bfloat16) next to the same model and step in
# PyTorch 2 (bench/peers_cnn.py --variants all: f32 and bf16 autocast, NCHW and channels_last),
# in interleaved rounds on this machine: each round runs `steps` timed steps of every setup of
# ours, then of every variant of the peer, so that a change in the load falls on all of them.
# Prints one JSON line per setup (the median over rounds of the per-round medians) and the ratio
# of our best mixed_bfloat16 examples/s to the peer's best configuration.
#   bench/compare_cnn.sh [rounds] [steps] [mesh...]     e.g. bench/compare_cnn.sh 5 10 batch=8
# AVX2=1 adds our setups again with oneDNN held to AVX2 (DNNL_MAX_CPU_ISA=AVX2: the path of an
# AVX2-only host, where bf16 convolutions and products run on f32 copies). CNN_STEP names our
# binary (default bazel-bin/bench/cnn_step; build it first) and PYTHON a Python with torch and
# numpy (default $PEERS_VENV/bin/python, PEERS_VENV defaulting to a peers-venv folder beside the
# checkout, as in the peers README). Both run on 2 threads. The whole run holds
# `flock -o ${CPU_LOCK:-/tmp/cpu.lock}` (a shared host).
set -euo pipefail
if [ -z "${COMPARE_UNDER_LOCK:-}" ]; then
  COMPARE_UNDER_LOCK=1 exec flock -o "${CPU_LOCK:-/tmp/cpu.lock}" "$0" "$@"
fi
cd "$(dirname "$0")/.."
rounds=${1:-5}
steps=${2:-10}
shift 2 || shift $# || true
meshes=("$@")
((${#meshes[@]} > 0)) || meshes=(batch=8 batch=1)
mesh_list=$(IFS=,; echo "${meshes[*]}")
ours=${CNN_STEP:-bazel-bin/bench/cnn_step}
python=${PYTHON:-${PEERS_VENV:-$(cd .. && pwd)/peers-venv}/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((r = 1; r <= rounds; r++)); do
  "$ours" --rounds=1 --steps="$steps" --meshes="$mesh_list" >>"$tmp/lines"
  if [[ "${AVX2:-0}" == 1 ]]; then
    DNNL_MAX_CPU_ISA=AVX2 "$ours" --rounds=1 --steps="$steps" --meshes="$mesh_list" >>"$tmp/lines"
  fi
  "$python" bench/peers_cnn.py step --batch 128 --threads 2 --rounds "$steps" --variants all \
    2>/dev/null >>"$tmp/lines"
  echo "compare_cnn: round $r of $rounds done" >&2
done
"$python" - "$tmp/lines" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    if r.get("bench") == "cnn_step":
        key = ("dtensor", r["mesh"], r["precision"], r["onednn_isa"])
        groups.setdefault(key, []).append(r["examples_per_s"])
    else:
        key = ("torch2", "channels_last" if r["channels_last"] else "nchw",
               "autocast_bf16" if r["autocast"] == "bf16" else "float32", r["torch"])
        groups.setdefault(key, []).append(r["examples_per_s"])
best = {}
for key, rates in groups.items():
    median = statistics.median(rates)
    peer, a, b, c = key
    fields = ({"mesh": a, "precision": b, "onednn_isa": c} if peer == "dtensor"
              else {"layout": a, "precision": b, "torch": c})
    print(json.dumps({"peer": peer, **fields, "median_examples_per_s": round(median, 1),
                      "rounds": len(rates), "per_round": [round(x, 1) for x in rates]}))
    if peer == "torch2" or (b == "mixed_bfloat16" and c == "native"):
        best[peer] = max(best.get(peer, 0), median)
if "dtensor" in best and "torch2" in best:
    print(json.dumps({"ratio": "dtensor best mixed_bfloat16 / torch2 best configuration",
                      "value": round(best["dtensor"] / best["torch2"], 2)}))
PY
