#!/bin/sh
# mpirun_agent.sh: a remote-shell agent for mpirun (--mca plm_rsh_agent) in the tests. Called
# as `mpirun_agent.sh [OPTIONS] HOST COMMAND...` (like ssh), it runs COMMAND with sh inside
# the network namespace that $SC_AGENT_HOSTS maps HOST to ("ADDRESS=NAMESPACE ..." pairs,
# as tests/integration/netns_agent.sh reads them), or here when HOST is not mapped: so
# `mpirun -H a:2,b:2` sees two hosts of two slots either way.
set -u
while [ $# -gt 0 ]; do
	case $1 in -*) shift ;; *) break ;; esac
done
[ $# -ge 2 ] || { echo "mpirun_agent.sh: usage: mpirun_agent.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift
for pair in ${SC_AGENT_HOSTS:-}; do
	if [ "${pair%%=*}" = "$host" ]; then
		exec ip netns exec "${pair#*=}" sh -c "$*"
	fi
done
exec sh -c "$*"
