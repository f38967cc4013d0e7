#!/bin/sh
# run-peer.sh: runs the Open MPI baseline (sparsecomm-mpi-peer) on the emulated cluster of
# `sparsecomm-run --netns`, one rank per namespace, or on loopback when there is none.
#
#   bench/mpi/run-peer.sh [-np N] [--peer PATH] [--timeout SEC] MODE ARGS...
#   e.g. bench/mpi/run-peer.sh allreduce --sizes 4M,64M,256M --iters 5 --json
#
# The cluster comes from the launcher's environment: SPARSECOMM_NETNS (namespace names),
# SPARSECOMM_NETNS_ADDRS (their addresses, same order), SPARSECOMM_NETNS_SUBNET (else the
# /24 of the first address). mpirun gets a hostfile of the addresses (one slot each) and an
# rsh agent that maps an address to its namespace and runs the command there under its own
# UTS namespace with hostname nodeN, so each namespace looks like its own host. TCP only,
# on the subnet; ring allreduce (tuned algorithm 4, dynamic rules); ranks yield when idle
# and are not bound by mpirun (more ranks than cores), but where the launcher pinned its
# nodes (sparsecomm-run --pin-nodes: SPARSECOMM_NODE_CPUS, each node's CPUs in node order)
# the rank of namespace i runs on node i's CPUs, as the node's daemon and trainers do; glibc
# keeps freed memory (MALLOC_*), so big buffers are not faulted in again. The peer's JSON
# goes to stdout, notes to stderr.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
peer=""
np=""
limit=1800
while [ $# -gt 0 ]; do
	case "$1" in
	-np | -n) np=$2; shift 2 ;;
	--peer) peer=$2; shift 2 ;;
	--timeout) limit=$2; shift 2 ;;
	-h | --help)
		sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
		exit 0 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "run-peer.sh: give the peer's mode and arguments (--help)" >&2; exit 2; }
if [ -z "$peer" ]; then
	for p in "$here/../../build/bin/sparsecomm-mpi-peer" "$(dirname "$here")/bin/sparsecomm-mpi-peer" \
		"$(command -v sparsecomm-mpi-peer || true)"; do
		[ -n "$p" ] && [ -x "$p" ] && { peer=$p; break; }
	done
fi
[ -n "$peer" ] && [ -x "$peer" ] || {
	echo "run-peer.sh: sparsecomm-mpi-peer not found (make build/bin/sparsecomm-mpi-peer)" >&2
	exit 2
}
peer=$(cd "$(dirname "$peer")" && pwd)/$(basename "$peer")
command -v mpirun >/dev/null || { echo "run-peer.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }

export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296
common="--allow-run-as-root --bind-to none
	--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
	--mca mpi_yield_when_idle 1 --mca btl_base_warn_component_unused 0
	-x MALLOC_MMAP_MAX_ -x MALLOC_TRIM_THRESHOLD_"

names=${SPARSECOMM_NETNS:-}
addrs=${SPARSECOMM_NETNS_ADDRS:-}
if [ -z "$names" ] || [ -z "$addrs" ]; then
	np=${np:-${SPARSECOMM_NODE_COUNT:-4}}
	echo "run-peer.sh: no emulated cluster (SPARSECOMM_NETNS unset): $np ranks on loopback," \
		"TCP over lo, no link shaping${SPARSECOMM_NODE_CPUS:+; ranks not pinned (only a namespace's are)}" >&2
	# shellcheck disable=SC2086
	exec timeout -k 10 "$limit" mpirun $common -np "$np" --oversubscribe \
		--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
		"$peer" "$@"
fi

set -- "$@"
nn=$(echo "$names" | wc -w)
na=$(echo "$addrs" | wc -w)
[ "$nn" -eq "$na" ] || { echo "run-peer.sh: $nn namespaces but $na addresses" >&2; exit 2; }
np=${np:-$nn}
subnet=${SPARSECOMM_NETNS_SUBNET:-$(echo "$addrs" | awk '{split($1, a, "."); print a[1] "." a[2] "." a[3] ".0/24"}')}
[ "$(id -u)" -eq 0 ] || { echo "run-peer.sh: running in namespaces needs root" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-peer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
: >"$tmp/hostfile"
{
	echo '#!/bin/sh'
	echo '# rsh agent for mpirun: runs the command in the namespace of the host address.'
	echo 'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done'
	echo 'host=$1; shift'
	echo 'case "$host" in'
} >"$tmp/agent"
cpus_all=${SPARSECOMM_NODE_CPUS:-}
i=0
set -f
for a in $addrs; do
	ns=$(echo "$names" | awk -v k=$((i + 1)) '{print $k}')
	cpus=$(echo "$cpus_all" | awk -v k=$((i + 1)) '{print $k}')
	case "$cpus" in *[!0-9,-]*) cpus="" ;; esac
	echo "$a slots=1" >>"$tmp/hostfile"
	echo "$a) ns=$ns; node=node$i; cpus=$cpus ;;" >>"$tmp/agent"
	i=$((i + 1))
done
set +f
{
	echo '*) echo "agent: unknown host $host" >&2; exit 255 ;;'
	echo 'esac'
	echo 'pin=""; [ -n "$cpus" ] && pin="taskset -c $cpus"'
	echo 'exec ip netns exec "$ns" unshare --uts $pin sh -c "hostname $node; $*"'
} >>"$tmp/agent"
chmod +x "$tmp/agent"

here_ns=$(ip netns identify $$ 2>/dev/null || true)
echo "run-peer.sh: $np ranks, one per namespace ($names) on $subnet; mpirun in" \
	"${here_ns:-the root namespace}${cpus_all:+; ranks pinned to CPUs $cpus_all}" >&2
# shellcheck disable=SC2086
timeout -k 10 "$limit" mpirun $common -np "$np" --hostfile "$tmp/hostfile" \
	--mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
	--mca oob_tcp_if_include "$subnet" --mca btl self,tcp --mca btl_tcp_if_include "$subnet" \
	"$peer" "$@"
