#!/usr/bin/env bash
# The captured seed step (bench/overlap: MLP 784-700-500-10, global batch 128, mesh batch=8) on
# 2 network-namespace hosts x 2 processes (tools/netns_cluster.sh, as root), per gradient bucket
# size, with overlap off and on, and with the deterministic mode (DTENSOR_DETERMINISTIC) off and
# on. Rounds interleave every setting (one job each, its own median of --rounds steps a mode);
# the medians over rounds are printed, one JSON object per setting:
#   {"bench":"overlap_sweep","bucket_cap_mb":4,"deterministic":0,"overlap":1,"value":..,"unit":"ms/step"}
#
#   tools/bazel run //bench:overlap_sweep -- [rounds] [bucket sizes in MB] [deterministic modes]
#   (as root; defaults: 3 rounds, "0.25 1 4 25", "0 1"; NETNS_CLUSTER_RATE=1gbit limits the links)
set -euo pipefail

cluster=$1 overlap=$2
rounds=${3:-3} sizes=${4:-0.25 1 4 25} modes=${5:-0 1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((r = 0; r < rounds; r++)); do
  for size in $sizes; do
    for det in $modes; do
      log=$work/r$r-$size-$det.log
      DTENSOR_DETERMINISTIC=$det "$cluster" 2 2 "$overlap" --bucket_cap_mb="$size" --rounds=8 \
        >"$log" 2>&1 || { echo "overlap_sweep: the job failed:" >&2; cat "$log" >&2; exit 1; }
      # The captured step's two lines: overlap off and on.
      sed -n 's/.*"step":"captured","overlap":\([01]\).*"value":\([0-9.e+-]*\).*/\1 \2/p' "$log" |
        while read -r on ms; do echo "$size $det $on $ms"; done >>"$work/rows"
    done
  done
  echo "overlap_sweep: round $((r + 1)) of $rounds done" >&2
done

python3 - "$work/rows" <<'PY'
import collections, json, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    size, det, on, ms = line.split()
    times[(float(size), int(det), int(on))].append(float(ms))
for (size, det, on), t in sorted(times.items()):
    print(json.dumps({"bench": "overlap_sweep", "hosts": 2, "processes_per_host": 2,
                      "bucket_cap_mb": size, "deterministic": det, "overlap": on,
                      "rounds": len(t), "value": round(statistics.median(t), 3),
                      "unit": "ms/step"}))
PY
