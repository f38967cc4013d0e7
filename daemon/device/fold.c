/*
 * fold.c: the cpu device's residual ops for the engine (fold.h).
 */
#include "device/fold.h"

#include <string.h>

void scd_residual_drain(float *x, float *res, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++) {
		x[k] += res[k];
		res[k] = 0;
	}
}

void scd_acc_aside(float *acc, const float *x, const float *res, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++)
		acc[k] = x[k] + res[k];
}

uint64_t scd_residual_bits(const float *res, uint64_t n, uint64_t *bits)
{
	uint64_t count = 0;
	memset(bits, 0, 8 * ((n + 63) / 64));
	for (uint64_t i = 0; i < n; i++)
		if (res[i] != 0) {
			bits[i / 64] |= 1ull << (i % 64);
			count++;
		}
	return count;
}

void scd_bits_set(uint64_t *bits, const uint32_t *idx, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++)
		bits[idx[k] / 64] |= 1ull << (idx[k] % 64);
}

/* Advances a walk over the set bits of bits[nw] and prefetches res at the bit found. */
static inline void prefetch_next_bit(const uint64_t *bits, uint64_t nw, uint64_t *w,
				     uint64_t *cur, const float *res)
{
	while (!*cur && ++*w < nw)
		*cur = bits[*w];
	if (*cur) {
		__builtin_prefetch(res + *w * 64 + (uint64_t)__builtin_ctzll(*cur), 1);
		*cur &= *cur - 1;
	}
}

uint64_t scd_coo_fold_residual(const scd_coo_t *in, float *res, uint64_t *bits, uint64_t numel,
			       uint32_t *oi, float *ov)
{
	uint64_t nw = (numel + 63) / 64;
	/* a second walk, SCD_PREFETCH_AHEAD bits ahead, asks for the residual's lines */
	uint64_t aw = 0, acur = nw ? bits[0] : 0;
	for (int a = 0; a < SCD_PREFETCH_AHEAD; a++)
		prefetch_next_bit(bits, nw, &aw, &acur, res);
	uint64_t j = 0, m = 0, w = 0, cur = nw ? bits[0] : 0;
	if (nw)
		bits[0] = 0;
	for (;;) {
		while (!cur && ++w < nw) {
			cur = bits[w];
			bits[w] = 0;
		}
		uint64_t r = cur ? w * 64 + (uint64_t)__builtin_ctzll(cur) : UINT64_MAX;
		if (r == UINT64_MAX && j == in->nnz)
			break;
		uint32_t i;
		float v;
		if (j < in->nnz && in->idx[j] < r) {
			i = in->idx[j];
			v = in->val[j++];
		} else {
			i = (uint32_t)r;
			cur &= cur - 1;
			prefetch_next_bit(bits, nw, &aw, &acur, res);
			v = j < in->nnz && in->idx[j] == r ? in->val[j++] + res[i] : res[i];
			res[i] = 0;
		}
		if (v != 0) {
			oi[m] = i;
			ov[m++] = v;
		}
	}
	return m;
}
