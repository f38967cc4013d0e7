/*
 * fuzz_scheme_msg.c: the sparse messages of AGsparse and HC (scheme_msg.c) as a peer sends
 * them. Input: numel (u16, + 1), the room of the receiving list (u16), then the message.
 * A decoded list is then aggregated as AGsparse does (dst[idx] += val over numel floats)
 * and appended to a list of that room, as HC and AGsparse do.
 */
#include "fuzz.h"

#include "device/device.h"
#include "device/format.h"
#include "scheme/scheme_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	uint64_t numel = fuzz_take(&data, &size, 2) + 1, room = fuzz_take(&data, &size, 2);
	uint8_t *msg = fuzz_copy(data, size);
	uint32_t *widx = malloc(4 * room + 4);
	float *wval = malloc(4 * room + 4), *dense = calloc(numel, 4);
	scd_coo_t d;
	if (scd_scheme_msg_decode(dev, msg, size, numel, room, widx, wval, &d) == SC_OK) {
		FUZZ_REQUIRE(d.nnz <= room);
		fuzz_check_list(d.idx, d.nnz, numel);
		scd_coo_scatter_add(dense, &d);
	}
	scd_coo_t list = {widx, wval, 0, room};
	uint64_t added = 0;
	if (scd_scheme_msg_append(dev, msg, size, numel, &list, &added) == SC_OK) {
		FUZZ_REQUIRE(list.nnz == added && added <= room);
		fuzz_check_list(widx, added, numel);
	} else {
		FUZZ_REQUIRE(list.nnz == 0);
	}
	free(msg);
	free(widx);
	free(wval);
	free(dense);
	return 0;
}
