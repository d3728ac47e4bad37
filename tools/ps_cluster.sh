#!/usr/bin/env bash
# Starts a parameter-server job on this machine: one chief, W workers and P parameter servers,
# each a process of the same program, told its task by TF_CONFIG (train/ps/cluster_spec.h).
#
#   tools/ps_cluster.sh <dir> <workers> <ps> -- <program> [args...]
#   tools/ps_cluster.sh --restart <dir> <task> -- <program> [args...]   # task: worker:1, ps:0, chief:0
#
# Ports are free ports of 127.0.0.1 (the kernel picks them; nothing listens beyond loopback).
# In <dir>: cluster.json (the cluster), <task>.log (its stdout and stderr), <task>.pid. The first
# form waits for the chief, gives the other tasks 15 s to end after it, kills (by PID) and names
# those still running, and exits with the chief's status (124 if the job ran past
# PS_CLUSTER_TIMEOUT seconds, default 300). The second starts one task of the cluster in <dir>
# again (a restarted worker rejoins; a restarted job resumes from its checkpoints), in the
# background, appending to its log, and returns at once.
set -euo pipefail

usage() {
  echo "usage: $0 <dir> <workers> <ps> -- <program> [args...]" >&2
  echo "       $0 --restart <dir> <task> -- <program> [args...]" >&2
  exit 2
}

# TF_CONFIG of task <type>:<index> in the cluster of <dir>.
tf_config() {
  local dir=$1 type=$2 index=$3
  printf '{"cluster": %s, "task": {"type": "%s", "index": %s}}' "$(cat "$dir/cluster.json")" \
    "$type" "$index"
}

# Whether process $1 runs (a zombie, ended but not yet reaped, does not).
# One read of /proc/PID/stat: testing it exists and then grepping it raced with the launcher
# reaping the zombie in between (grep's failure read as "running": fault_chief_test failed so).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $stat && $stat != *") Z "* ]]
}

start_task() {
  local dir=$1 task=$2
  shift 2
  TF_CONFIG=$(tf_config "$dir" "${task%%:*}" "${task##*:}") "$@" >>"$dir/$task.log" 2>&1 &
  echo $! >"$dir/$task.pid"
}

if [[ ${1:-} == --restart ]]; then
  [[ $# -ge 5 && $4 == -- ]] || usage
  dir=$2 task=$3
  shift 4
  start_task "$dir" "$task" "$@"
  exit 0
fi

[[ $# -ge 5 && $4 == -- ]] || usage
dir=$1 workers=$2 ps=$3
shift 4
[[ $workers -ge 1 && $ps -ge 1 ]] || usage
mkdir -p "$dir"

# 1 + workers + ps free ports: bound to 127.0.0.1:0 together, so they differ, then released.
mapfile -t ports < <(python3 - "$((1 + workers + ps))" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
for s in socks:
    print(s.getsockname()[1])
PY
)
list() {  # "127.0.0.1:p1", ... for ports[$1 .. $1+$2)
  local out="" i
  for ((i = $1; i < $1 + $2; i++)); do out+="${out:+, }\"127.0.0.1:${ports[$i]}\""; done
  echo "$out"
}
printf '{"chief": [%s], "worker": [%s], "ps": [%s]}' "$(list 0 1)" "$(list 1 "$workers")" \
  "$(list $((1 + workers)) "$ps")" >"$dir/cluster.json"

tasks=()
for ((i = 0; i < ps; i++)); do tasks+=("ps:$i"); done
for ((i = 0; i < workers; i++)); do tasks+=("worker:$i"); done
tasks+=("chief:0")
for t in "${tasks[@]}"; do
  : >"$dir/$t.log"
  start_task "$dir" "$t" "$@"
done

timeout=${PS_CLUSTER_TIMEOUT:-300}
status=124
for ((tick = 0; tick < timeout * 10; tick++)); do
  chief=$(cat "$dir/chief:0.pid")
  if ! running "$chief"; then
    status=0
    wait "$chief" 2>/dev/null || status=$?
    break
  fi
  sleep 0.1
done

# The others end when the chief tells them to or when they notice it is gone.
left=()
for ((tick = 0; tick < 150; tick++)); do
  left=()
  for t in "${tasks[@]}"; do
    pid=$(cat "$dir/$t.pid")
    if running "$pid"; then left+=("$t"); fi
  done
  [[ ${#left[@]} -eq 0 ]] && break
  sleep 0.1
done
if [[ ${#left[@]} -gt 0 ]]; then
  echo "ps_cluster.sh: still running 15 s after the chief, killed: ${left[*]}" >&2
  for t in "${left[@]}"; do kill -9 "$(cat "$dir/$t.pid")" 2>/dev/null || true; done
fi
exit "$status"
