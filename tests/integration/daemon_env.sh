#!/bin/sh
# daemon_env.sh: records the NCCL environment sparsecomm-run gave a daemon, one line
# "RANK NCCL_HOSTID NCCL_SOCKET_IFNAME" in $SPARSECOMM_ENV_LOG.RANK, then runs sparsecommd
# ($SPARSECOMM_REAL_DAEMON) (sparsecomm-run --daemon this script).
rank=""
prev=""
for a in "$@"; do
	[ "$prev" = "--rank" ] && rank=$a
	prev=$a
done
echo "$rank ${NCCL_HOSTID:-} ${NCCL_SOCKET_IFNAME:-}" >"$SPARSECOMM_ENV_LOG.$rank"
exec "$SPARSECOMM_REAL_DAEMON" "$@"
