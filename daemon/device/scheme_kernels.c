/*
 * scheme_kernels.c: the cpu device's per-scheme kernels (scheme_kernels.h). Each is the
 * loop the scheme ran inline before, moved here unchanged, so results keep their bits.
 */
#include "device/scheme_kernels.h"

#include "device/listops.h"

void scd_lower_bounds(const uint32_t *a, const uint64_t *off, uint32_t nlists,
		      const uint64_t *v, uint32_t nv, uint64_t *pos)
{
	for (uint32_t l = 0; l < nlists; l++) {
		const uint32_t *list = a + off[l];
		uint64_t n = off[l + 1] - off[l];
		for (uint32_t k = 0; k < nv; k++)
			pos[(uint64_t)l * nv + k] = scd_lower_bound_u32(list, n, v[k]);
	}
}

uint64_t scd_idx_check_range(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi)
{
	for (uint64_t k = 0; k < n; k++)
		if (idx[k] < lo || idx[k] >= hi || (k && idx[k] <= idx[k - 1]))
			return k;
	return n;
}

uint64_t scd_coo_compact_nonzero(const uint32_t *idx, const float *val, uint64_t n,
				 uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	for (uint64_t j = 0; j < n; j++)
		if (val[j] != 0) {
			oi[w] = idx[j];
			ov[w++] = val[j];
		}
	return w;
}

uint64_t scd_coo_merge_sum(const uint32_t *ai, const float *av, uint64_t an, const uint32_t *bi,
			   const float *bv, uint64_t bn, uint32_t *oi, float *ov)
{
	uint64_t i = 0, j = 0, m = 0;
	while (i < an || j < bn) {
		if (j >= bn || (i < an && ai[i] < bi[j])) {
			oi[m] = ai[i];
			ov[m++] = av[i++];
		} else if (i >= an || bi[j] < ai[i]) {
			oi[m] = bi[j];
			ov[m++] = bv[j++];
		} else {
			oi[m] = ai[i];
			ov[m++] = av[i++] + bv[j++];
		}
	}
	return m;
}

uint64_t scd_coo_filter_mod(const uint32_t *idx, const float *val, uint64_t n, uint32_t d,
			    uint32_t t, uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	for (uint64_t j = 0; j < n; j++)
		if (idx[j] % d == t) {
			oi[w] = idx[j];
			ov[w++] = val[j];
		}
	return w;
}

/* The block holding index i: the last b with bnd[b] <= i. */
static uint32_t block_of(const uint64_t *bnd, uint32_t nb, uint32_t i)
{
	uint32_t lo = 0, hi = nb - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;
		if (bnd[mid] <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

uint32_t scd_coo_block_runs(const uint32_t *idx, uint64_t n, const uint64_t *bnd, uint32_t nb,
			    uint64_t numel, uint32_t max, scd_run_t *runs, uint64_t *bad)
{
	uint32_t nr = 0;
	*bad = n;
	for (uint64_t p = 0; p < n && nr < max;) {
		if (idx[p] >= numel) {
			*bad = p;
			break;
		}
		uint32_t b = block_of(bnd, nb, idx[p]);
		uint64_t hi = bnd[b + 1], e = p + 1;
		while (e < n && idx[e] > idx[e - 1] && idx[e] < hi)
			e++;
		runs[nr++] = (scd_run_t){b, p, e};
		p = e;
	}
	return nr;
}

void scd_sub_scaled(float *res, const float *x, uint64_t n, float f)
{
	for (uint64_t i = 0; i < n; i++)
		res[i] -= x[i] * f;
}
