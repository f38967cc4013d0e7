/*
 * fuzz_formats.c: the lossless wire formats of device/format.h and the runs of msgops.h,
 * decoded from what a peer sent. Input: the decoder (u8), numel (u16, + 1), a parameter
 * (u8: the block size, or the partition count and which partition), then the buffer.
 * A successful decode must give indices below numel, ascending, within the room given.
 */
#include "fuzz.h"

#include "device/format.h"
#include "device/msgops.h"
#include "device/partition.h"

enum { ROOM = 4096 };

static void hash_bitmap(uint64_t numel, uint8_t param, int dense_out, const void *buf,
			uint64_t bytes, scd_coo_t *out, float *dense)
{
	uint32_t nparts = 1 + param % 8, p = (uint32_t)(param >> 3) % nparts;
	const scd_partmap_t *map;
	if (scd_partmap_acquire(numel, nparts, 7, &map) != SC_OK)
		return;
	if (dense_out) {
		scd_hash_bitmap_decode_dense(map, p, buf, bytes, dense);
	} else if (scd_hash_bitmap_decode(map, p, buf, bytes, out) == SC_OK) {
		FUZZ_REQUIRE(out->nnz <= out->cap);
		for (uint64_t i = 0; i < out->nnz; i++) /* I_p's members, ascending */
			FUZZ_REQUIRE(out->idx[i] < numel &&
				     scd_partition_of(&map->fn, out->idx[i]) == p);
	}
	scd_partmap_release(map);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	unsigned which = (unsigned)fuzz_take(&data, &size, 1) % 7;
	uint64_t numel = fuzz_take(&data, &size, 2) + 1;
	uint8_t param = (uint8_t)fuzz_take(&data, &size, 1);
	void *buf = fuzz_copy(data, size);
	uint32_t *idx = malloc(4 * ROOM);
	float *val = malloc(4 * ROOM), *dense = calloc(numel, 4);
	scd_coo_t out = {idx, val, 0, ROOM};
	uint32_t block = 1 + param % 64;
	switch (which) {
	case 0:
		if (scd_coo_decode(buf, size, &out) == SC_OK)
			FUZZ_REQUIRE(out.nnz <= ROOM && 8 * out.nnz == size);
		break;
	case 1:
		if (scd_bitmap_decode(buf, size, numel, &out) == SC_OK)
			fuzz_check_list(idx, out.nnz, numel);
		break;
	case 2:
	case 3:
		hash_bitmap(numel, param, which == 3, buf, size, &out, dense);
		break;
	case 4:
		if (scd_blocks_decode(buf, size, numel, block, &out) == SC_OK)
			fuzz_check_list(idx, out.nnz, numel);
		break;
	case 5:
		scd_blocks_apply(buf, size, block, numel, dense, param & 1);
		break;
	default: {
		uint64_t n = scd_runs_decode(buf, size / 8, numel, ROOM, idx);
		if (n != UINT64_MAX) {
			FUZZ_REQUIRE(n <= ROOM);
			fuzz_check_list(idx, n, numel);
		}
	}
	}
	free(buf);
	free(idx);
	free(val);
	free(dense);
	return 0;
}
