/*
 * kth.c: radix select of the k-th largest magnitude key (see kth.h).
 */
#include "device/kth.h"

#include <string.h>

#include "device/sparse.h"

#define TOP_SHIFT 20 /* first digit: key bits 30..20 (2048 buckets) */
#define DIGIT	  10 /* then bits 19..10 and 9..0 */

/* From the top bucket down: the one holding the remaining-th largest key; the keys of
 * the buckets above it are counted in *gt and taken off *remaining. */
static uint32_t pick(const uint64_t *hist, uint32_t nb, uint64_t *remaining, uint64_t *gt)
{
	uint32_t b = nb - 1;
	for (; b > 0 && *remaining > hist[b]; b--) {
		*remaining -= hist[b];
		*gt += hist[b];
	}
	return b;
}

static inline __attribute__((always_inline)) uint32_t key_at(const float *x,
							     const uint32_t *keys, uint64_t i)
{
	return x ? scd_abs_key(x[i]) : keys[i];
}

static inline __attribute__((always_inline)) uint32_t kth(const float *x, const uint32_t *keys,
							  uint64_t n, uint64_t k,
							  uint32_t *scratch, uint64_t *gt_p)
{
	uint64_t hist[1u << (31 - TOP_SHIFT)] = {0}, remaining = k, gt = 0;
	for (uint64_t i = 0; i < n; i++)
		hist[key_at(x, keys, i) >> TOP_SHIFT]++;
	uint32_t T = pick(hist, 1u << (31 - TOP_SHIFT), &remaining, &gt) << TOP_SHIFT;
	/* the boundary bucket's keys: copied once, or found again per digit */
	uint64_t m = 0;
	if (scratch)
		for (uint64_t i = 0; i < n; i++) {
			uint32_t key = key_at(x, keys, i);
			scratch[m] = key;
			m += key >> TOP_SHIFT == T >> TOP_SHIFT;
		}
	for (int shift = TOP_SHIFT - DIGIT; shift >= 0; shift -= DIGIT) {
		uint32_t mask = ~((1u << (shift + DIGIT)) - 1);
		memset(hist, 0, sizeof(uint64_t) << DIGIT);
		if (scratch) {
			for (uint64_t i = 0; i < m; i++)
				hist[(scratch[i] >> shift) & ((1u << DIGIT) - 1)]++;
		} else {
			for (uint64_t i = 0; i < n; i++) {
				uint32_t key = key_at(x, keys, i);
				if ((key & mask) == T)
					hist[(key >> shift) & ((1u << DIGIT) - 1)]++;
			}
		}
		uint32_t d = pick(hist, 1u << DIGIT, &remaining, &gt);
		T |= d << shift;
		if (scratch && shift) { /* keep the keys of the new boundary bucket */
			uint64_t w = 0;
			for (uint64_t i = 0; i < m; i++)
				if (((scratch[i] >> shift) & ((1u << DIGIT) - 1)) == d)
					scratch[w++] = scratch[i];
			m = w;
		}
	}
	if (gt_p)
		*gt_p = gt;
	return k > n ? 0 : T;
}

uint32_t scd_kth_key_f32(const float *x, uint64_t n, uint64_t k, uint32_t *scratch,
			 uint64_t *gt_p)
{
	return kth(x, NULL, n, k, scratch, gt_p);
}

uint32_t scd_kth_key_u32(const uint32_t *keys, uint64_t n, uint64_t k, uint32_t *scratch,
			 uint64_t *gt_p)
{
	return kth(NULL, keys, n, k, scratch, gt_p);
}
