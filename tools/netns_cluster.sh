#!/usr/bin/env bash
# Runs an MPI program on a cluster of "hosts" made of Linux network namespaces on this machine:
#   netns_cluster.sh <hosts> <processes per host> <program> [args...]
# Root only (it makes namespaces); see docs/multi_host.md.
#
# Each host is a network namespace with its own loopback, one veth link (eth0) to a bridge in a
# switch namespace, an address 10.231.7.<k+1>/24 (NETNS_CLUSTER_SUBNET=a.b.c changes the /24)
# and its own host name (a UTS namespace per process tree: gethostname, MPI_Get_processor_name).
# mpirun runs on host 0; it starts Open MPI's daemons on the others through an rsh agent that
# enters the host's namespaces. Between hosts MPI talks TCP over the veth subnet (btl tcp, oob
# tcp); within one a host's processes share memory (vader), as on real machines. Ranks are
# placed by slot: host k holds ranks [k*P, (k+1)*P).
#
# Nothing outside the namespaces made here is contacted, and nothing is left behind: every
# namespace, link, file and process of the run is removed on exit, failure or signal included; a
# leftover of a killed run (names carry its PID) is removed by the next run.
#
# Environment:
#   DTENSOR_MPI_TIMEOUT   seconds before a hung job is killed (default 240)
#   NETNS_CLUSTER_SUBNET  the first three octets of the private /24 (default 10.231.7)
#   NETNS_CLUSTER_RATE    a rate limit (tc's units: 1gbit, 500mbit) on every host's link, each
#                         direction: a token-bucket qdisc (tbf) on eth0 and on its switch port
#                         (this kernel has no netem, so no delay can be added)
#   NETNS_CLUSTER_HOOK    a command started in the background (in this machine's namespaces)
#                         once the cluster is up, with the switch namespace, the hosts'
#                         namespaces and their host names in NETNS_CLUSTER_SWITCH,
#                         NETNS_CLUSTER_NAMESPACES and NETNS_CLUSTER_HOSTNAMES (space-separated);
#                         the switch port of host k is p<k>. Failure tests use it to take a link
#                         down mid-run. It is ended (by its PID) with the run.
# A lost host ends the job within seconds (TCP keepalives and tcp_retries2=3, see
# docs/multi_host.md); after mpirun returns, processes still on the hosts get 15 s to end, then are
# killed and named ("processes left on the hosts").
# The exit status is mpirun's (124 when the job was killed for time).
set -euo pipefail

die() { echo "netns_cluster: $*" >&2; exit 2; }
[[ $# -ge 3 ]] || die "usage: netns_cluster.sh <hosts> <processes per host> <program> [args...]"
hosts=$1 per_host=$2
shift 2
[[ $hosts =~ ^[1-9][0-9]?$ && $hosts -le 64 ]] || die "hosts must be 1..64, got '$hosts'"
[[ $per_host =~ ^[1-9][0-9]?$ ]] || die "processes per host must be 1..99, got '$per_host'"
[[ $(id -u) -eq 0 ]] || die "needs root (it makes network namespaces); running as $(id -un)"
command -v ip >/dev/null || die "no 'ip' command (iproute2)"
command -v unshare >/dev/null || die "no 'unshare' command (util-linux)"
command -v mpirun >/dev/null || die "no 'mpirun' (Open MPI)"
subnet=${NETNS_CLUSTER_SUBNET:-10.231.7}
rate=${NETNS_CLUSTER_RATE:-}
[[ -z $rate || $rate =~ ^[0-9]+[kmg]?bit$ ]] || die "NETNS_CLUSTER_RATE must look like 1gbit or 500mbit, got '$rate'"
[[ $subnet =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "NETNS_CLUSTER_SUBNET must be 10.x.y"

# Names carry this run's PID: dtc<pid>-sw (the switch), dtc<pid>-h<k> (host k).
prefix="dtc$$"
switch="$prefix-sw"
work=""
hook_pid=""
job_ended=0

namespaces_of() {  # the namespaces whose names start with $1
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1" || true
}

pids_in_run() {  # the processes inside the namespaces of the run with prefix $1
  local ns
  for ns in $(namespaces_of "$1-"); do ip netns pids "$ns" 2>/dev/null || true; done
}

remove_run() {  # everything of the run with prefix $1
  local ns pid
  # Processes still inside (daemons of a killed job): started by this run, ended by PID.
  for pid in $(pids_in_run "$1"); do kill -9 "$pid" 2>/dev/null || true; done
  for ns in $(namespaces_of "$1-"); do
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "/tmp/$1.cluster" "${TMPDIR:-/tmp}/ompi.$1-host"*
}

cleanup() {
  local code=$?
  trap - EXIT INT TERM HUP
  if [[ -n $hook_pid ]]; then kill "$hook_pid" 2>/dev/null || true; wait "$hook_pid" 2>/dev/null || true; fi
  # Once mpirun has returned, a host cut off from it may still hold processes that end on their
  # own (its daemon finds its lifeline lost): up to 15 s for them, then the rest are named.
  if [[ $job_ended -eq 1 ]]; then
    local left
    for _ in $(seq 1 150); do
      left=$(pids_in_run "$prefix" | sort -n | tr '\n' ' ')
      [[ -n ${left// /} ]] || break
      sleep 0.1
    done
    if [[ -n ${left// /} ]]; then
      echo "netns_cluster: processes left on the hosts 15 s after mpirun ended, killed: $left" >&2
      ps -o pid=,args= -p "${left// /,}" 2>/dev/null | sed 's/^/netns_cluster:   /' >&2 || true
    fi
  fi
  remove_run "$prefix"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Whether process $1 is a live run of this script (a killed one may linger as a zombie where
# nothing reaps orphans, or its PID may have been reused).
run_alive() {
  [[ -r /proc/$1/stat && -r /proc/$1/cmdline ]] || return 1
  [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]] || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q netns_cluster
}

# Leftovers of runs that were killed before they could clean up (their process is gone).
for ns in $(namespaces_of 'dtc[0-9]+-'); do
  owner=${ns%%-*}
  owner=${owner#dtc}
  if ! run_alive "$owner"; then remove_run "dtc$owner"; fi
done

ip netns add "$switch" 2>/dev/null || die "cannot make a network namespace ('ip netns add' failed; root in a sandbox without /run/netns?)"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
ip -n "$switch" link set lo up

work="/tmp/$prefix.cluster"
mkdir -p "$work"
names=() spaces=()
for ((k = 0; k < hosts; k++)); do
  ns="$prefix-h$k"
  name="$prefix-host$k"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name "p$k" netns "$switch"
  ip -n "$switch" link set "p$k" master br0 up
  ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # Unacknowledged data to a host that is gone fails the connection after about 3 s (3 retries
  # from a 200 ms timeout) instead of 15 minutes; idle connections have keepalives (below).
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=3
  if [[ -n $rate ]]; then
    tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms ||
      die "cannot limit the rate of host $k's link (tc tbf)"
    tc -n "$switch" qdisc add dev "p$k" root tbf rate "$rate" burst 256kb latency 50ms
  fi
  names+=("$name")
  spaces+=("$ns")
  echo "$name slots=$per_host" >>"$work/hostfile"
  printf '%s\t%s\t%s\n' "$name" "$ns" "$subnet.$((k + 1))" >>"$work/hosts.map"
done
# Each host resolves the others' names (ip netns exec bind-mounts /etc/netns/<ns>/hosts).
{
  echo "127.0.0.1 localhost"
  awk -F'\t' '{print $3 " " $1}' "$work/hosts.map"
} >"$work/hosts"
for ns in "${spaces[@]}"; do
  mkdir -p "/etc/netns/$ns"
  cp "$work/hosts" "/etc/netns/$ns/hosts"
done

# The rsh agent: `agent [options] HOST command...` runs the command (a shell command line, as ssh
# would) in HOST's network namespace under HOST's name.
cat >"$work/agent" <<EOF
#!/usr/bin/env bash
set -euo pipefail
while [[ \$# -gt 0 && \$1 == -* ]]; do shift; done
host=\$1
shift
ns=\$(awk -F'\t' -v h="\$host" '\$1 == h {print \$2}' "$work/hosts.map")
[[ -n \$ns ]] || { echo "netns_cluster agent: unknown host '\$host'" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts /bin/sh -c 'hostname "\$0" && eval "\$1"' "\$host" "\$*"
EOF
chmod +x "$work/agent"

# Checked before MPI starts: every host's link is up at both ends (a bounded wait).
for ((k = 0; k < hosts; k++)); do
  ok=0
  for _ in $(seq 1 25); do
    if [[ $(ip netns exec "${spaces[$k]}" cat /sys/class/net/eth0/operstate) == up &&
          $(ip netns exec "$switch" cat "/sys/class/net/p$k/operstate") == up ]]; then
      ok=1
      break
    fi
    sleep 0.2
  done
  [[ $ok -eq 1 ]] || die "the link of ${names[$k]} did not come up"
done

if [[ -n ${NETNS_CLUSTER_HOOK:-} ]]; then
  NETNS_CLUSTER_SWITCH=$switch NETNS_CLUSTER_NAMESPACES="${spaces[*]}" \
    NETNS_CLUSTER_HOSTNAMES="${names[*]}" bash -c "$NETNS_CLUSTER_HOOK" &
  hook_pid=$!
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Not in a bazel test's environment (user.bazelrc empties the agent for one-host runs).
unset OMPI_MCA_plm_rsh_agent OMPI_MCA_btl
export OMPI_MCA_btl_vader_single_copy_mechanism=none
if [[ -n "${TEST_TMPDIR:-}" ]]; then
  export TMPDIR=$TEST_TMPDIR OMPI_MCA_orte_tmpdir_base=$TEST_TMPDIR \
    OMPI_MCA_btl_vader_backing_directory=$TEST_TMPDIR OMPI_MCA_osc_sm_backing_directory=$TEST_TMPDIR
fi
# A host whose link goes down is noticed within about 5 s (TCP keepalives on the daemons'
# connections, 2 s idle then 3 probes 1 s apart): mpirun ends the job naming the lost host and
# the cut-off host's daemon ends its processes, instead of both waiting forever.
export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-2}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-1}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-3}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
cidr="$subnet.0/24"
set +e
timeout --kill-after=10 "${DTENSOR_MPI_TIMEOUT:-240}" \
  ip netns exec "${spaces[0]}" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' \
  "${names[0]}" mpirun --hostfile "$work/hostfile" -np "$((hosts * per_host))" --map-by slot \
  --oversubscribe --bind-to none \
  --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self,vader --mca btl_tcp_if_include "$cidr" --mca oob_tcp_if_include "$cidr" \
  "$@"
code=$?
job_ended=1
set -e
exit "$code"
