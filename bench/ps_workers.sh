#!/usr/bin/env bash
# Asynchronous parameter-server training (examples/ps:train, on its default data: Fashion-MNIST
# when the Debian package is installed) with 1, 2 and 3 workers and one server on this machine: examples/s, staleness of the pushes (server steps between a worker's
# pull and its push) and the workers' time in RPCs against computing, per step. Rounds
# interleave the worker counts; medians over rounds are printed.
#
#   tools/bazel run //bench:ps_workers -- [rounds] [steps]      # defaults: 5 rounds, 400 steps
#
# Every task is a process; on a 2-core machine W workers, a server and the chief share the two
# cores, so more workers add staleness and contention, not compute.
set -euo pipefail

cluster=$1 train=$2
rounds=${3:-5} steps=${4:-400}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((r = 0; r < rounds; r++)); do
  for w in 1 2 3; do
    "$cluster" "$work/r$r-w$w" "$w" 1 -- "$train" --steps="$steps" --steps_per_epoch=100 >/dev/null
    log=$work/r$r-w$w/chief:0.log
    eps=$(grep -o 'servers): [0-9.]* examples/s' "$log" | grep -o '[0-9.]*' | head -n 1)
    stale=$(grep -o 'median [0-9.]* max [0-9.]*' "$log" | cut -d' ' -f2,4)
    rpc=$(grep -o 'rpc [0-9.]* ms, compute [0-9.]* ms' "$log" | cut -d' ' -f2,5)
    echo "$w $eps $stale $rpc" >>"$work/rows"
  done
done

data=$(grep -o '^data: .*' "$work/r0-w1/chief:0.log" | head -n 1)
python3 - "$work/rows" "$rounds" "$steps" "$data" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print(f"examples/ps:train, batch 64, {sys.argv[3]} steps, 1 server; medians of {sys.argv[2]} "
      f"interleaved rounds; {sys.argv[4]}")
print("workers  examples/s  staleness median  staleness max  rpc ms/step  compute ms/step")
for w in ("1", "2", "3"):
    mine = [[float(x) for x in r[1:]] for r in rows if r[0] == w]
    med = [statistics.median(col) for col in zip(*mine)]
    print(f"{w:>7}  {med[0]:10.0f}  {med[1]:16.1f}  {med[2]:13.0f}  {med[3]:11.2f}  {med[4]:15.2f}")
PY
