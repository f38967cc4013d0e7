/*
 * msgops.c: the cpu device's kernels for the scheme layer's messages (msgops.h).
 */
#include "device/msgops.h"

#include <string.h>

static inline void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

uint64_t scd_idx_count_runs(const uint32_t *idx, uint64_t n)
{
	uint64_t runs = n > 0;
	for (uint64_t i = 1; i < n; i++)
		runs += idx[i] != idx[i - 1] + 1;
	return runs;
}

void scd_idx_runs_encode(const uint32_t *idx, uint64_t n, void *runs)
{
	uint8_t *r = runs;
	for (uint64_t i = 0; i < n;) {
		uint64_t j = i + 1;
		while (j < n && idx[j] == idx[j - 1] + 1)
			j++;
		put32(r, idx[i]);
		put32(r + 4, (uint32_t)(j - i));
		r += 8;
		i = j;
	}
}

uint64_t scd_idx_bitmap_encode(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t span,
			       uint64_t *words)
{
	memset(words, 0, 8 * ((span + 63) / 64));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t x = (uint64_t)idx[i] - lo;
		if (x >= span)
			return i; /* not ascending */
		words[x >> 6] |= 1ull << (x & 63);
	}
	return n;
}

uint64_t scd_runs_decode(const void *runs, uint64_t nruns, uint64_t numel, uint64_t max,
			 uint32_t *idx)
{
	const uint8_t *r = runs;
	uint64_t n = 0, next = 0;
	for (uint64_t k = 0; k < nruns; k++, r += 8) {
		uint64_t start = get32(r), len = get32(r + 4);
		if (!len || start < next || start + len > numel || n + len > max)
			return UINT64_MAX;
		for (uint64_t i = 0; i < len; i++)
			idx[n++] = (uint32_t)(start + i);
		next = start + len;
	}
	return n;
}

void scd_idx_add(uint32_t *idx, uint64_t n, uint32_t add)
{
	for (uint64_t k = 0; k < n; k++)
		idx[k] += add;
}
