#!/usr/bin/env bash
# Failures on 2 network-namespace hosts x 2 processes, mid-way through a loop of all-reduces
# across the hosts: a process SIGKILLed while its all-reduce is in flight, a process that throws,
# and host 1's link taken down (ip link set ... down on its switch port). Each must end every
# process of the job within 15 s of the failure, with a message naming the lost rank or host (the
# throwing rank's message names both: "process 2 of 4 (host <name>-host1): ...").
#   multi_host_failure_test.sh <netns_cluster.sh> <host_failure_mpi_main>
set -euo pipefail
source "$(dirname "$0")/multi_host_lib.sh"
cluster=$1 program=$2
require_namespace_hosts
tmp=${TEST_TMPDIR:-$(mktemp -d)}

# Runs the job (expected to fail), then checks its log for each pattern and that it ended within
# 15 s of the failure, whose time is the last number of the log's first line matching $1.
expect_failure() {
  local name=$1 failed_at=$2
  shift 2
  local log="$tmp/$name.log" patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  set +e
  DTENSOR_MPI_TIMEOUT=60 "$cluster" 2 2 "$program" "$@" >"$log" 2>&1
  local code=$?
  set -e
  local ended
  ended=$(now)
  [[ $code -ne 0 ]] || { echo "FAIL $name: the job succeeded:"; cat "$log"; exit 1; }
  for p in "${patterns[@]}"; do
    grep -a -q -E "$p" "$log" || { echo "FAIL $name: no '$p' in:"; cat "$log"; exit 1; }
  done
  if grep -a -q "processes left on the hosts" "$log"; then
    echo "FAIL $name: processes outlived the job:"; cat "$log"; exit 1
  fi
  local at
  at=$(grep -a -m1 -E "$failed_at" "$log" | awk '{print $NF}')
  [[ -n $at ]] || { echo "FAIL $name: no '$failed_at' in:"; cat "$log"; exit 1; }
  local took
  took=$(awk -v a="$at" -v b="$ended" 'BEGIN{printf "%.1f", b-a}')
  if awk -v t="$took" 'BEGIN{exit !(t > 15)}'; then
    echo "FAIL $name: the job ended $took s after the failure (limit 15):"; cat "$log"; exit 1
  fi
  echo "$name: every process ended $took s after the failure (exit $code): $(grep -a -m1 -E "${patterns[0]}" "$log")"
}

expect_failure killed "process 3: step 20 reached at" \
  "process rank 3 with PID [0-9]+ on node [a-z0-9]+-host1 exited on signal 9" -- \
  --fail=kill --rank=3 --after=20
expect_failure throws "process 2: step 20 reached at" \
  "process 2 of 4 \(host [a-z0-9]+-host1\): process 2 throws at step 20" \
  "MPI_ABORT was invoked on rank 2" -- \
  --fail=throw --rank=2 --after=20
export READY="$tmp/ready"
rm -f "$READY"
# shellcheck disable=SC2016  # expanded by the hook's shell
NETNS_CLUSTER_HOOK='for _ in $(seq 1 300); do [ -e "$READY" ] && break; sleep 0.1; done
  ip -n "$NETNS_CLUSTER_SWITCH" link set p1 down
  echo "link of host 1 taken down at $(date +%s.%N)"' \
  expect_failure link_down "link of host 1 taken down at" \
  "ORTE has lost communication with a remote daemon" "Remote daemon: .* on node [a-z0-9]+-host1" -- \
  --fail=none --after=20 --steps=100000 --ready_file="$READY"
echo "PASS"
