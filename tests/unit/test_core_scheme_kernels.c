/*
 * test_core_scheme_kernels.c: the cpu device's per-scheme kernels (device/scheme_kernels.h
 * and OmniReduce's block ops in device/format.h) against plain reference loops on random
 * lists: the reference a GPU device's kernels are later held to.
 */
#include "unit.h"

#include "device/device.h"

#include <string.h>

/* An ascending list of n distinct indices below numel (n <= numel), values small integers
 * with some zeros and a -0.0. */
static void random_list(uint32_t *idx, float *val, uint64_t n, uint64_t numel)
{
	uint64_t w = 0;
	for (uint64_t i = 0; i < numel && w < n; i++)
		if (unit_rng_below(numel - i) < n - w) {
			idx[w] = (uint32_t)i;
			uint64_t r = unit_rng_below(10);
			val[w++] = r == 0   ? 0.0f
				   : r == 1 ? -0.0f
					    : (float)((int)unit_rng_below(21) - 10);
		}
}

static int same_bits(float a, float b)
{
	return memcmp(&a, &b, 4) == 0;
}

UNIT_TEST(core_kernels_lower_bounds_and_checks)
{
	const scd_device_ops_t *d = &scd_device_cpu_ops;
	for (int rep = 0; rep < 50; rep++) {
		uint64_t numel = 1 + unit_rng_below(5000), n = unit_rng_below(numel + 1);
		uint32_t *idx = malloc(4 * n + 4);
		float *val = malloc(4 * n + 4);
		random_list(idx, val, n, numel);
		/* three lists: [0, a), [a, b), [b, n) */
		uint64_t a = unit_rng_below(n + 1), b = a + unit_rng_below(n - a + 1);
		uint64_t off[4] = {0, a, b, n}, v[9], pos[27];
		for (int k = 0; k < 9; k++)
			v[k] = unit_rng_below(numel + 2);
		d->lower_bounds(idx, off, 3, v, 9, pos);
		for (int l = 0; l < 3; l++)
			for (int k = 0; k < 9; k++) {
				uint64_t e = 0;
				while (off[l] + e < off[l + 1] && idx[off[l] + e] < v[k])
					e++;
				CHECK_EQ_INT(pos[l * 9 + k], e);
			}
		/* range check: the whole list passes, a narrowed range or a swap fails where
		 * the reference says */
		CHECK_EQ_INT(d->idx_check_range(idx, n, 0, numel), n);
		if (n >= 2) {
			uint64_t lo = idx[1], hi = idx[n - 1];
			CHECK_EQ_INT(d->idx_check_range(idx, n, lo, numel), 0);
			CHECK_EQ_INT(d->idx_check_range(idx, n, 0, hi), n - 1);
			uint64_t s = unit_rng_below(n - 1);
			uint32_t t = idx[s];
			idx[s] = idx[s + 1], idx[s + 1] = t;
			CHECK_EQ_INT(d->idx_check_range(idx, n, 0, numel), s + 1);
		}
		free(idx), free(val);
	}
}

UNIT_TEST(core_kernels_list_ops_match_reference)
{
	const scd_device_ops_t *d = &scd_device_cpu_ops;
	for (int rep = 0; rep < 50; rep++) {
		uint64_t numel = 1 + unit_rng_below(3000);
		uint64_t an = unit_rng_below(numel + 1), bn = unit_rng_below(numel + 1);
		uint32_t *ai = malloc(4 * an + 4), *bi = malloc(4 * bn + 4),
			 *oi = malloc(4 * (an + bn) + 4), *ri = malloc(4 * (an + bn) + 4);
		float *av = malloc(4 * an + 4), *bv = malloc(4 * bn + 4),
		      *ov = malloc(4 * (an + bn) + 4), *rv = malloc(4 * (an + bn) + 4);
		random_list(ai, av, an, numel);
		random_list(bi, bv, bn, numel);
		/* merge_sum: union, sums on both sides, one side's values as they are */
		uint64_t m = d->coo_merge_sum(ai, av, an, bi, bv, bn, oi, ov), r = 0;
		for (uint64_t i = 0, j = 0; i < an || j < bn;) {
			if (j == bn || (i < an && ai[i] < bi[j]))
				ri[r] = ai[i], rv[r++] = av[i++];
			else if (i == an || bi[j] < ai[i])
				ri[r] = bi[j], rv[r++] = bv[j++];
			else
				ri[r] = ai[i], rv[r++] = av[i++] + bv[j++];
		}
		CHECK_EQ_INT(m, r);
		for (uint64_t k = 0; k < m; k++)
			CHECK_TRUE(oi[k] == ri[k] && same_bits(ov[k], rv[k]));
		/* compact_nonzero out of place and in place */
		uint64_t nz = 0;
		for (uint64_t k = 0; k < m; k++)
			nz += ov[k] != 0;
		CHECK_EQ_INT(d->coo_compact_nonzero(oi, ov, m, ri, rv), nz);
		CHECK_EQ_INT(d->coo_compact_nonzero(oi, ov, m, oi, ov), nz);
		for (uint64_t k = 0; k < nz; k++)
			CHECK_TRUE(oi[k] == ri[k] && same_bits(ov[k], rv[k]) && ov[k] != 0);
		/* filter_mod */
		uint32_t dd = 1 + (uint32_t)unit_rng_below(5), t = (uint32_t)unit_rng_below(dd);
		uint64_t f = d->coo_filter_mod(ai, av, an, dd, t, ri, rv), w = 0;
		for (uint64_t k = 0; k < an; k++)
			if (ai[k] % dd == t) {
				CHECK_TRUE(w < f && ri[w] == ai[k] && same_bits(rv[w], av[k]));
				w++;
			}
		CHECK_EQ_INT(f, w);
		/* sub_scaled */
		memcpy(rv, bv, 4 * bn);
		d->sub_scaled(rv, av, an < bn ? an : bn, 0.25f);
		for (uint64_t k = 0; k < (an < bn ? an : bn); k++)
			CHECK_TRUE(same_bits(rv[k], bv[k] - av[k] * 0.25f));
		free(ai), free(bi), free(oi), free(ri), free(av), free(bv), free(ov), free(rv);
	}
}

UNIT_TEST(core_kernels_block_runs)
{
	const scd_device_ops_t *d = &scd_device_cpu_ops;
	for (int rep = 0; rep < 50; rep++) {
		uint64_t numel = 16 + unit_rng_below(3000);
		uint32_t nb = 1 + (uint32_t)unit_rng_below(8);
		uint64_t bnd[9];
		bnd[0] = 0;
		for (uint32_t b = 1; b < nb; b++) /* ascending edges, some blocks empty */
			bnd[b] = bnd[b - 1] + unit_rng_below((numel - bnd[b - 1]) / 2 + 1);
		bnd[nb] = numel;
		/* a bag: a random subset of the blocks in a random order, each an ascending
		 * list inside its block */
		uint32_t order[8], used = 0;
		for (uint32_t b = 0; b < nb; b++)
			if (bnd[b + 1] > bnd[b] && unit_rng_below(3))
				order[used++] = b;
		for (uint32_t i = used; i > 1; i--) {
			uint32_t j = (uint32_t)unit_rng_below(i), t = order[i - 1];
			order[i - 1] = order[j], order[j] = t;
		}
		uint32_t *idx = malloc(4 * numel + 8);
		float *val = malloc(4 * numel + 8);
		uint64_t n = 0, lo[8], hi[8];
		for (uint32_t i = 0; i < used; i++) {
			uint32_t b = order[i];
			uint64_t len = bnd[b + 1] - bnd[b], k = 1 + unit_rng_below(len);
			lo[i] = n;
			random_list(idx + n, val + n, k, len);
			for (uint64_t j = 0; j < k; j++)
				idx[n + j] += (uint32_t)bnd[b];
			n += k;
			hi[i] = n;
		}
		scd_run_t runs[10];
		uint64_t bad;
		uint32_t nr = d->coo_block_runs(idx, n, bnd, nb, numel, nb + 1, runs, &bad);
		CHECK_EQ_INT(bad, n);
		/* adjacent blocks in ascending order may join into one run only if the later
		 * block's first index follows in the earlier block's range, which it cannot */
		CHECK_EQ_INT(nr, used);
		for (uint32_t i = 0; i < nr; i++)
			CHECK_TRUE(runs[i].block == order[i] && runs[i].lo == lo[i] &&
				   runs[i].hi == hi[i]);
		/* an index past numel stops the scan where a run would start */
		if (used) {
			idx[n] = (uint32_t)numel;
			nr = d->coo_block_runs(idx, n + 1, bnd, nb, numel, nb + 1, runs, &bad);
			CHECK_EQ_INT(bad, n);
			CHECK_EQ_INT(nr, used);
			/* max stops early */
			nr = d->coo_block_runs(idx, n + 1, bnd, nb, numel, 1, runs, &bad);
			CHECK_EQ_INT(nr, 1);
			CHECK_EQ_INT(bad, n + 1);
		}
		free(idx), free(val);
	}
}

UNIT_TEST(core_kernels_blocks_count_and_apply)
{
	const scd_device_ops_t *d = &scd_device_cpu_ops;
	for (int rep = 0; rep < 30; rep++) {
		uint64_t n = 1 + unit_rng_below(5000);
		uint32_t B = 1 + (uint32_t)unit_rng_below(300);
		uint64_t rec = 4 + 4 * (uint64_t)B, nb = (n + B - 1) / B;
		float *g = calloc(n, 4), *dst = malloc(4 * n), *acc = malloc(4 * n);
		for (uint64_t i = 0; i < n; i++)
			if (unit_rng_below(50) == 0)
				g[i] = (float)((int)unit_rng_below(21) - 10);
		void *buf = malloc(nb * rec + 8);
		uint64_t bytes = 0;
		CHECK_EQ_INT(d->blocks_encode_dense(g, n, B, buf, nb * rec + 8, &bytes), SC_OK);
		CHECK_EQ_INT(d->blocks_count_dense(g, n, B) * rec, bytes);
		/* set: the records over anything reproduce g where blocks were non-zero */
		for (uint64_t i = 0; i < n; i++)
			dst[i] = 7;
		CHECK_EQ_INT(d->blocks_apply(buf, bytes, B, n, dst, 0), SC_OK);
		for (uint64_t b = 0; b < nb; b++) {
			int nzb = 0;
			for (uint64_t i = b * B; i < n && i < (b + 1) * B; i++)
				nzb |= g[i] != 0;
			for (uint64_t i = b * B; i < n && i < (b + 1) * B; i++)
				CHECK_TRUE(dst[i] == (nzb ? g[i] : 7));
		}
		/* add */
		for (uint64_t i = 0; i < n; i++)
			acc[i] = 1;
		CHECK_EQ_INT(d->blocks_apply(buf, bytes, B, n, acc, 1), SC_OK);
		for (uint64_t i = 0; i < n; i++)
			CHECK_TRUE(acc[i] == 1 + g[i]);
		/* malformed: a partial record, a block past the range */
		if (bytes) {
			CHECK_EQ_INT(d->blocks_apply(buf, bytes - 1, B, n, acc, 1),
				     SC_ERR_PROTOCOL);
			uint32_t id = (uint32_t)nb;
			memcpy(buf, &id, 4);
			CHECK_EQ_INT(d->blocks_apply(buf, bytes, B, n, acc, 1),
				     SC_ERR_PROTOCOL);
		}
		free(g), free(dst), free(acc), free(buf);
	}
}
