#!/usr/bin/env bash
# The deterministic mode's cost per step: bench/transformer_fsdp --plans=meshes (the example's
# model, captured training step) on data=1, data=8, model=8 and data=2,seq=2,model=2, with
# DTENSOR_DETERMINISTIC=0 and =1 in turn (the switch is read once per process: one process per
# mode and round, each reporting its median of --rounds steps a mesh). The medians over rounds
# are printed, one JSON object per mesh and mode, then the ratio on/off per mesh:
#   {"bench":"deterministic_cost","mesh":"model=8","deterministic":1,"value":..,"unit":"ms/step"}
#
#   tools/bazel run //bench:deterministic_cost -- [rounds] [steps per round]  (defaults: 5, 3)
set -euo pipefail

bench=$1
rounds=${2:-5} steps=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((r = 1; r <= rounds; r++)); do
  echo "deterministic_cost: round $r of $rounds" >&2
  DTENSOR_DETERMINISTIC=0 "$bench" --plans=meshes --rounds="$steps" >>"$work/rows"
  DTENSOR_DETERMINISTIC=1 "$bench" --plans=meshes --rounds="$steps" >>"$work/rows"
done

python3 - "$work/rows" <<'PY'
import collections, json, statistics, sys
times = collections.defaultdict(list)
rows = [json.loads(line) for line in open(sys.argv[1])]
for row in rows:
    times[(row["mesh"], row["deterministic"])].append(row["value"])
meshes = []
for (mesh, det), t in times.items():
    if mesh not in meshes:
        meshes.append(mesh)
for mesh in meshes:
    for det in (0, 1):
        t = times[(mesh, det)]
        print(json.dumps({"bench": "deterministic_cost", "mesh": mesh, "deterministic": det,
                          "rounds": len(t), "value": round(statistics.median(t), 2),
                          "unit": "ms/step"}))
    ratio = statistics.median(times[(mesh, 1)]) / statistics.median(times[(mesh, 0)])
    print(json.dumps({"bench": "deterministic_cost", "mesh": mesh, "ratio": round(ratio, 2)}))
PY
