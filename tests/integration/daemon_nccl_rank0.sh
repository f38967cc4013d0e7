#!/bin/sh
# daemon_nccl_rank0.sh: runs sparsecommd ($SPARSECOMM_REAL_DAEMON) with the NCCL library
# $NCCL_RANK0_LIB on rank 0 only and none on the others: a world whose nodes disagree on
# whether NCCL loads (sparsecomm-run --daemon this script).
rank=""
prev=""
for a in "$@"; do
	[ "$prev" = "--rank" ] && rank=$a
	prev=$a
done
if [ "$rank" = "0" ]; then
	export SPARSECOMM_NCCL_LIB="$NCCL_RANK0_LIB"
else
	export SPARSECOMM_NCCL_LIB=/nonexistent/libnccl.so.2
fi
exec "$SPARSECOMM_REAL_DAEMON" "$@"
