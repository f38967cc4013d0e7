/*
 * listops.c: the cpu device's memory operations and generic list operations (listops.h).
 */
#include "device/listops.h"

#include <stdlib.h>
#include <string.h>

#include "device/kth.h"
#include "util/bigmem.h"

void *scd_cpu_alloc(size_t bytes)
{
	void *p = scd_big_alloc(bytes ? bytes : 1);
	if (p)
		memset(p, 0, bytes); /* pre-fault: the first touch of a page is slow */
	return p;
}

void scd_cpu_free(void *p)
{
	free(p);
}

void scd_cpu_clear(void *dst, size_t bytes)
{
	memset(dst, 0, bytes);
}

void scd_cpu_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
}

sc_status_t scd_cpu_sync(void)
{
	return SC_OK; /* every cpu op has completed when it returns, and none fails */
}

uint64_t scd_count_nonzero(const float *g, uint64_t n)
{
	uint64_t c = 0;
	for (uint64_t i = 0; i < n; i++)
		c += g[i] != 0;
	return c;
}

uint64_t scd_dense_to_coo(const float *g, uint64_t n, uint32_t *idx, float *val)
{
	uint64_t w = 0;
	for (uint64_t i = 0; i < n; i++)
		if (g[i] != 0) {
			idx[w] = (uint32_t)i;
			val[w++] = g[i];
		}
	return w;
}

void scd_coo_scatter(float *dst, const scd_coo_t *src)
{
	for (uint64_t j = 0; j < src->nnz; j++)
		dst[src->idx[j]] = src->val[j];
}

uint64_t scd_coo_check(const scd_coo_t *coo, uint64_t numel)
{
	for (uint64_t i = 0; i < coo->nnz; i++)
		if (coo->idx[i] >= numel || (i && coo->idx[i] <= coo->idx[i - 1]))
			return i;
	return coo->nnz;
}

uint64_t scd_lower_bound_u32(const uint32_t *a, uint64_t n, uint64_t v)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t scd_coo_merge_two(const uint32_t *ai, const float *av, uint64_t an, const scd_coo_t *b,
			   uint32_t *oi, float *ov)
{
	const uint32_t *bi = b->idx;
	const float *bv = b->val;
	uint64_t i = 0, j = 0, w = 0, bn = b->nnz;
	while (i < an && j < bn) {
		uint32_t x = ai[i], y = bi[j];
		if (x < y)
			oi[w] = x, ov[w++] = av[i++];
		else if (x > y)
			oi[w] = y, ov[w++] = 0.0f + bv[j++];
		else
			oi[w] = x, ov[w++] = av[i++] + bv[j++];
	}
	memcpy(oi + w, ai + i, 4 * (an - i));
	memcpy(ov + w, av + i, 4 * (an - i));
	w += an - i;
	for (; j < bn; j++)
		oi[w] = bi[j], ov[w++] = 0.0f + bv[j];
	return w;
}

void scd_coo_copy_first(uint32_t *oi, float *ov, const scd_coo_t *src)
{
	memcpy(oi, src->idx, 4 * src->nnz);
	for (uint64_t k = 0; k < src->nnz; k++)
		ov[k] = 0.0f + src->val[k];
}

void scd_coo_scale_copy(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			uint64_t n, float share)
{
	if (!n)
		return; /* the lists may be NULL then */
	if (oi != idx)
		memcpy(oi, idx, 4 * n);
	if (share == 1.0f) {
		if (ov != val)
			memcpy(ov, val, 4 * n);
		return;
	}
	for (uint64_t j = 0; j < n; j++)
		ov[j] = share * val[j];
}

uint64_t scd_coo_topk(uint32_t *idx, float *val, uint64_t n, uint64_t k, uint32_t *tmp_idx,
		      float *tmp_val)
{
	if (k >= n)
		return n;
	uint64_t gt = 0;
	uint32_t T = k ? scd_kth_key_f32(val, n, k, tmp_idx, &gt) : UINT32_MAX;
	uint64_t ties = k > gt ? k - gt : 0, w = 0, r = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t key = scd_abs_key(val[i]);
		int keep = k && (key > T || (key == T && ties > 0));
		if (keep && key == T)
			ties--;
		if (keep) {
			idx[w] = idx[i];
			val[w++] = val[i];
		} else {
			tmp_idx[r] = idx[i];
			tmp_val[r++] = val[i];
		}
	}
	memcpy(idx + w, tmp_idx, 4 * r);
	memcpy(val + w, tmp_val, 4 * r);
	return w;
}

void scd_range_counts(const float *g, uint64_t numel, uint32_t P, uint64_t *counts)
{
	for (uint64_t p = 0; p < P; p++) {
		uint64_t lo = p * numel / P, hi = (p + 1) * numel / P, cnt = 0;
		for (uint64_t i = lo; i < hi; i++)
			cnt += g[i] != 0;
		counts[p] = cnt;
	}
}

void scd_coo_range_counts(const scd_coo_t *o, uint64_t numel, uint32_t P, uint64_t *counts)
{
	uint64_t k = 0;
	for (uint64_t p = 0; p < P; p++) {
		uint64_t hi = (p + 1) * numel / P, cnt = 0;
		for (; k < o->nnz && o->idx[k] < hi; k++)
			cnt += o->val[k] != 0;
		counts[p] = cnt;
	}
}

void scd_residual_add(float *res, const uint32_t *idx, const float *val, uint64_t n,
		      uint32_t *touch, uint64_t *n_touch)
{
	uint64_t t = touch ? *n_touch : 0;
	for (uint64_t j = 0; j < n; j++) {
		uint32_t i = idx[j];
		if (j + SCD_PREFETCH_AHEAD < n) /* scattered lines: ask for them early */
			__builtin_prefetch(res + idx[j + SCD_PREFETCH_AHEAD], 1);
		if (touch && res[i] == 0)
			touch[t++] = i;
		res[i] += val[j];
	}
	if (touch)
		*n_touch = t;
}

void scd_scale_f32(float *d, uint64_t n, float f)
{
	for (uint64_t i = 0; i < n; i++)
		d[i] *= f;
}

void scd_gather(float *val, float *src, const uint32_t *idx, uint64_t n, int take)
{
	for (uint64_t j = 0; j < n; j++) {
		val[j] = src[idx[j]];
		if (take)
			src[idx[j]] = 0;
	}
}

void scd_coo_gather(float *val, const uint32_t *idx, uint64_t n, scd_coo_t *list, int take)
{
	for (uint64_t j = 0; j < n; j++) {
		uint64_t at = scd_lower_bound_u32(list->idx, list->nnz, idx[j]);
		int found = at < list->nnz && list->idx[at] == idx[j];
		val[j] = found ? list->val[at] : 0.0f;
		if (found && take)
			list->val[at] = 0;
	}
}
