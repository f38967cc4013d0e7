/*
 * test_core_msgops.c: the cpu device's kernels for the scheme layer's messages
 * (device/msgops.h), against plain references: runs of consecutive indices counted,
 * encoded and expanded back (malformed runs refused), the bitmap over a list's own range
 * with the position of the first entry outside it, and the offset added to decoded
 * indices.
 */
#include "unit.h"

#include <string.h>

#include "device/device.h"
#include "device/msgops.h"

UNIT_TEST(core_msgops_runs_roundtrip)
{
	enum { N = 4000 };
	static uint32_t idx[N], back[N];
	static uint8_t runs[8 * N];
	for (int round = 0; round < 50; round++) {
		uint64_t n = 0, ref_runs = 0;
		uint32_t i = (uint32_t)unit_rng_below(10);
		while (n < 1 + unit_rng_below(N)) {
			uint64_t len = 1 + unit_rng_below(8);
			ref_runs++;
			for (uint64_t k = 0; k < len && n < N; k++)
				idx[n++] = i++;
			i += 1 + (uint32_t)unit_rng_below(5); /* a gap: the run ends */
		}
		uint64_t nr = scd_device_cpu_ops.idx_count_runs(idx, n);
		CHECK_MSG(nr <= ref_runs, "%llu runs, at most %llu", (unsigned long long)nr,
			  (unsigned long long)ref_runs);
		scd_device_cpu_ops.idx_runs_encode(idx, n, runs);
		uint64_t total = 0;
		for (uint64_t r = 0; r < nr; r++) {
			uint32_t start, len;
			memcpy(&start, runs + 8 * r, 4);
			memcpy(&len, runs + 8 * r + 4, 4);
			CHECK_TRUE(len > 0 && start == idx[total]);
			total += len;
		}
		CHECK_TRUE(total == n);
		CHECK_TRUE(scd_device_cpu_ops.runs_decode(runs, nr, i, n, back) == n);
		CHECK_TRUE(!memcmp(back, idx, 4 * n));
		/* past numel, past the room, overlapping or empty: refused */
		CHECK_TRUE(scd_device_cpu_ops.runs_decode(runs, nr, idx[n - 1], n, back) ==
			   UINT64_MAX);
		CHECK_TRUE(scd_device_cpu_ops.runs_decode(runs, nr, i, n - 1, back) ==
			   UINT64_MAX);
		if (nr > 1) {
			memcpy(runs + 8, runs, 4); /* run 1 starts where run 0 does */
			CHECK_TRUE(scd_device_cpu_ops.runs_decode(runs, nr, i, n, back) ==
				   UINT64_MAX);
		}
		memset(runs + 4, 0, 4);
		CHECK_TRUE(scd_device_cpu_ops.runs_decode(runs, nr, i, n, back) == UINT64_MAX);
	}
	CHECK_TRUE(scd_idx_count_runs(idx, 0) == 0);
}

UNIT_TEST(core_msgops_bitmap_and_offset)
{
	enum { N = 3000 };
	static uint32_t idx[N];
	static uint64_t words[3 * N / 64 + 2]; /* the span is below 3 N */
	uint64_t n = 0;
	for (uint32_t i = 100; n < N && i < 100 + 3 * N; i += 1 + (uint32_t)unit_rng_below(3))
		idx[n++] = i;
	uint64_t lo = idx[0], span = idx[n - 1] - lo + 1;
	memset(words, 0xff, sizeof(words));
	CHECK_TRUE(scd_device_cpu_ops.idx_bitmap_encode(idx, n, lo, span, words) == n);
	uint64_t set = 0;
	for (uint64_t w = 0; w < (span + 63) / 64; w++)
		set += (uint64_t)__builtin_popcountll(words[w]);
	CHECK_TRUE(set == n);
	for (uint64_t k = 0; k < n; k++)
		CHECK_TRUE(words[(idx[k] - lo) >> 6] >> ((idx[k] - lo) & 63) & 1);
	/* an entry below the range (not ascending) is where the encoding stops */
	uint32_t keep = idx[n / 2];
	idx[n / 2] = (uint32_t)lo - 1;
	CHECK_TRUE(scd_device_cpu_ops.idx_bitmap_encode(idx, n, lo, span, words) == n / 2);
	idx[n / 2] = keep;
	scd_device_cpu_ops.idx_add(idx, n, 7);
	CHECK_TRUE(idx[0] == lo + 7 && idx[n / 2] == keep + 7);
}
