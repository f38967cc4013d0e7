#!/bin/sh
# daemon_hostid.sh: runs sparsecommd ($SPARSECOMM_REAL_DAEMON) as a host of its own to
# NCCL (NCCL_HOSTID per rank, sockets over loopback), so that several daemons on one
# machine and one GPU form an NCCL communicator (sparsecomm-run --daemon this script).
rank=0
prev=""
for a in "$@"; do
	[ "$prev" = "--rank" ] && rank=$a
	prev=$a
done
export NCCL_HOSTID="sparsecomm-test-node$rank" NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
exec "$SPARSECOMM_REAL_DAEMON" "$@"
