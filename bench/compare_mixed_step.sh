#!/usr/bin/env bash
# The seed MLP step (batch 128) under float32 and mixed_bfloat16: ours (bench/train_step on
# batch=8, eager and captured) against PyTorch 2 (torch2_mlp.py: Adam(fused=True) in f32, and
# autocast bf16 with fused Adam, eager and torch.compile), taking turns round by round, the whole
# run under one `flock -o $CPU_LOCK` (a shared host). Prints every JSON line tagged with its round,
# then the medians over rounds.
#
#   PEERS_VENV=... bench/compare_mixed_step.sh [ROUNDS]     (default 5; from the checkout root)
#
# Environment: PEERS_VENV (venv with torch and numpy), PEERS_DIR (default ../shared/bench/peers),
# OURS_BIN (default bazel-bin/bench/train_step), CPU_LOCK (default /tmp/cpu.lock),
# PEER_ROUNDS (timed rounds inside each peer process, default 40), BASELINE_BIN (another build of
# train_step, run right before ours each round, its lines tagged "baseline": a before/after
# comparison in the same interleaved run).
set -euo pipefail
# The whole run holds the lock: re-run this script under it.
if [ -z "${COMPARE_UNDER_LOCK:-}" ]; then
  COMPARE_UNDER_LOCK=1 exec flock -o "${CPU_LOCK:-/tmp/cpu.lock}" "$0" "$@"
fi
rounds=${1:-5}
peers=${PEERS_DIR:-$(cd .. && pwd)/shared/bench/peers}
py=${PEERS_VENV:?set PEERS_VENV to a venv with torch}/bin/python
ours=${OURS_BIN:-bazel-bin/bench/train_step}
out=$(mktemp)
run_rounds() {
  for ((r = 1; r <= rounds; r++)); do
    if [ -n "${BASELINE_BIN:-}" ]; then
      "$BASELINE_BIN" --setup=batch=8 | sed "s/^{/{\"round\":$r,\"who\":\"baseline\",/"
    fi
    "$ours" --setup=batch=8 | sed "s/^{/{\"round\":$r,\"who\":\"ours\",/"
    (cd "$peers" && "$py" torch2_mlp.py --threads 2 --rounds "${PEER_ROUNDS:-40}" \
      --variant eager_fused --variant bf16_fused --variant bf16_compile 2>/dev/null) |
      sed "s/^{/{\"round\":$r,\"who\":\"torch2\",/"
  done
}
run_rounds | tee "$out"
"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
groups = {}
for d in rows:
    if d.get("bench") == "train_step_memory":
        continue
    if d["who"] in ("ours", "baseline"):
        key, ms = f"{d['who']} {d['precision']} {d['mode']}", d["value"]
    elif "median_ms" in d:
        key, ms = f"torch2 {d['variant']}", d["median_ms"]
    else:
        continue
    groups.setdefault(key, []).append(ms)
for key, v in sorted(groups.items()):
    print(f"{key:40s} median {statistics.median(v):8.3f} ms over {len(v)} rounds")
PY
