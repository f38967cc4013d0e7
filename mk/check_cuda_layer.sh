#!/bin/sh
# check_cuda_layer.sh: the GPU stays below the device layer. Only daemon/device/ (the
# device registry's cuda slot and what it shares with trainers) and the nccl transport
# (daemon/transport/nccl*.c, which queues NCCL's work on the device's stream) may include
# device/cuda.h, device/cuda_free.h or the GPU library's gpu/scg.h, or name scd_cuda_*
# (or SCD_CUDA_*) or scg_*; everything above reaches the GPU through the device's ops and
# its device-level API (device.h, share.h, stage.h). Nor does anything, the device registry included, tell devices apart
# by their names (strcmp on a table's name): a table says its kind. Prints each offending
# line and exits 1 when there is one.
#
#   sh mk/check_cuda_layer.sh [ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
status=0
files=$(find daemon -name '*.[ch]' ! -path 'daemon/device/*' ! -path 'daemon/transport/nccl*' |
	sort)
[ -n "$files" ] || { echo "check_cuda_layer: no daemon sources under $root" >&2; exit 2; }
# shellcheck disable=SC2086 # the file names have no spaces
bad=$(grep -nE '#[[:space:]]*include[[:space:]]*"(device/cuda(_free)?|scg)\.h"|\b(scd|SCD)_(cuda|CUDA)_|\bscg_' \
	$files)
if [ -n "$bad" ]; then
	echo "check_cuda_layer: above daemon/device/, only daemon/transport/nccl*.c may reach" \
		"the GPU device's own interface (device/cuda.h, scd_cuda_*, scg_*):"
	echo "$bad"
	status=1
fi
# shellcheck disable=SC2046
byname=$(grep -nE 'strcmp\([^,]*->name, *"(cpu|cuda)"\)' $(find daemon -name '*.[ch]' | sort))
if [ -n "$byname" ]; then
	echo "check_cuda_layer: a device told apart by its name (the ops table's kind says it):"
	echo "$byname"
	status=1
fi
[ "$status" = 0 ] || exit 1
echo "check_cuda_layer: ok ($(echo "$files" | wc -l) files above daemon/device/)"
