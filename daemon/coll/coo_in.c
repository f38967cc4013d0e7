/* coo_in.c: see coo_in.h. */
#include "coll/coo_in.h"

#include <stdlib.h>
#include <string.h>

static int by_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

uint64_t scd_coo_sort_sum(uint32_t *idx, float *val, uint64_t n, uint64_t *keys)
{
	/* the position breaks ties: the sort is stable, and each sum in list order */
	for (uint64_t i = 0; i < n; i++)
		keys[i] = (uint64_t)idx[i] << 32 | (i & 0xffffffffu);
	qsort(keys, n, sizeof(*keys), by_key);
	float *v = (float *)(keys + n); /* the caller's room after the keys: n floats */
	for (uint64_t i = 0; i < n; i++)
		v[i] = val[keys[i] & 0xffffffffu];
	uint64_t m = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t k = (uint32_t)(keys[i] >> 32);
		if (m && idx[m - 1] == k) {
			val[m - 1] += v[i];
			continue;
		}
		idx[m] = k;
		val[m++] = v[i];
	}
	return m;
}

/* Sorts and sums the list in dev's memory at (idx, val) through host memory; its new count,
 * or UINT64_MAX out of memory. */
static uint64_t sort_via_host(const scd_device_ops_t *dev, uint32_t *idx, float *val,
			      uint64_t n)
{
	int host = scd_device_host_memory(dev);
	uint32_t *hi = host ? idx : malloc(n * sizeof(uint32_t) + 1);
	float *hv = host ? val : malloc(n * sizeof(float) + 1);
	uint64_t *keys = malloc(n * (sizeof(uint64_t) + sizeof(float)) + 1);
	uint64_t m = UINT64_MAX;
	if (hi && hv && keys) {
		if (!host) {
			dev->to_host(hi, idx, n * sizeof(uint32_t));
			dev->to_host(hv, val, n * sizeof(float));
		}
		m = scd_coo_sort_sum(hi, hv, n, keys);
		if (!host) {
			dev->from_host(idx, hi, m * sizeof(uint32_t));
			dev->from_host(val, hv, m * sizeof(float));
		}
	}
	if (!host) {
		free(hi);
		free(hv);
	}
	free(keys);
	return m;
}

int scd_coo_in_take(const scd_device_ops_t *dev, const uint32_t *idx, const float *val,
		    uint64_t nnz, uint64_t numel, scd_coo_t *in_p, void **owned_p)
{
	*owned_p = NULL;
	size_t ib = ((nnz * sizeof(uint32_t)) + 63) & ~(size_t)63;
	char *mem = dev->alloc(ib + nnz * sizeof(float) + 64);
	if (!mem)
		return 0;
	scd_coo_t in = {
	    .idx = (uint32_t *)mem, .val = (float *)(mem + ib), .nnz = nnz, .cap = nnz};
	dev->copy(in.idx, idx, nnz * sizeof(uint32_t));
	dev->copy(in.val, val, nnz * sizeof(float));
	if (dev->coo_check(&in, numel) != in.nnz) {
		/* not strictly ascending, or out of range: sorted, then checked for range */
		uint64_t m = sort_via_host(dev, in.idx, in.val, nnz);
		in.nnz = m == UINT64_MAX ? 0 : m;
		if (m == UINT64_MAX || dev->coo_check(&in, numel) != in.nnz) {
			dev->free(mem);
			return 0;
		}
	}
	*in_p = in;
	*owned_p = mem;
	return 1;
}
