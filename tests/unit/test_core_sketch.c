/*
 * test_core_sketch.c: S2 Reducer's sparse sketch (device/sketch.h): summable by plain
 * addition, cleared every step, seeds varying per step, and decoding unbiased over seeds.
 */
#include "unit.h"

#include "device/sketch.h"

#include <string.h>

static void random_coo(scd_coo_t *c, uint64_t numel, uint64_t nnz, int positive)
{
	c->nnz = 0;
	for (uint64_t i = 0; i < numel && c->nnz < nnz; i++)
		if (unit_rng_below(numel - i) < nnz - c->nnz) {
			c->idx[c->nnz] = (uint32_t)i;
			int v = (int)unit_rng_below(64) + 1;
			c->val[c->nnz++] = (float)(positive || unit_rng_below(2) ? v : -v);
		}
}

UNIT_TEST(core_sketch_sums_by_addition)
{
	scd_sketch_cfg_t cfg = {.numel = 5000 + unit_rng_below(5000),
				.rows = 1 + (uint32_t)unit_rng_below(5),
				.cols = 50 + (uint32_t)unit_rng_below(500),
				.block = 1 + (uint32_t)unit_rng_below(64),
				.seed = unit_rng()};
	uint64_t n = cfg.numel, F = scd_sketch_floats(&cfg), step = unit_rng_below(1000);
	scd_coo_t a = {malloc(n * 4), malloc(n * 4), 0, n},
		  b = {malloc(n * 4), malloc(n * 4), 0, n};
	scd_coo_t s = {malloc(n * 4), malloc(n * 4), 0, n};
	random_coo(&a, n, n / 20, 0);
	random_coo(&b, n, n / 20, 0);
	float *dense = calloc(n, 4);
	for (uint64_t i = 0; i < a.nnz; i++)
		dense[a.idx[i]] += a.val[i];
	for (uint64_t i = 0; i < b.nnz; i++)
		dense[b.idx[i]] += b.val[i];
	for (uint64_t i = 0; i < n; i++)
		if (dense[i] != 0) {
			s.idx[s.nnz] = (uint32_t)i;
			s.val[s.nnz++] = dense[i];
		}
	float *sa = malloc(F * 4), *sb = malloc(F * 4), *ss = malloc(F * 4);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &a, sa), SC_OK);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &b, sb), SC_OK);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &s, ss), SC_OK);
	uint64_t C = (uint64_t)cfg.rows * cfg.cols;
	for (uint64_t i = 0; i < C; i++) /* small integers: sums are exact */
		CHECK_MSG(sa[i] + sb[i] == ss[i], "bucket %llu: %g + %g != %g",
			  (unsigned long long)i, sa[i], sb[i], ss[i]);
	for (uint64_t i = C; i < F; i++) /* bitmap: non-zero in the sum iff in either */
		CHECK_TRUE((sa[i] + sb[i] > 0) == (ss[i] > 0) || ss[i] == 0);
	/* cleared per step: encoding a again gives the same sketch, not twice it */
	float *again = malloc(F * 4);
	memcpy(again, sa, F * 4);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &a, sa), SC_OK);
	CHECK_TRUE(memcmp(again, sa, F * 4) == 0);
	/* a new step draws new hashes */
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step + 1, &a, sa), SC_OK);
	CHECK_TRUE(a.nnz < 5 || memcmp(again, sa, C * 4) != 0);
	/* decoding covers every element of the marked blocks, ascending */
	CHECK_EQ_INT(scd_sketch_decode(&cfg, step, ss, &s), SC_OK);
	for (uint64_t j = 1; j < s.nnz; j++)
		CHECK_TRUE(s.idx[j] > s.idx[j - 1]);
	free(a.idx), free(a.val), free(b.idx), free(b.val), free(s.idx), free(s.val);
	free(dense), free(sa), free(sb), free(ss), free(again);
}

/* Unbiased over seeds: with heavy collisions (cols << nnz) and all-positive values, a
 * decoder without random signs, or with a fixed seed, is biased upwards by the colliding
 * mass; the true decoder's mean over steps converges to the value. */
UNIT_TEST(core_sketch_decode_unbiased_over_seeds)
{
	uint32_t rows = unit_rng_below(2) ? 1 : 3;
	scd_sketch_cfg_t cfg = {
	    .numel = 2000, .rows = rows, .cols = 100, .block = 1, .seed = unit_rng()};
	uint64_t n = cfg.numel, F = scd_sketch_floats(&cfg);
	scd_coo_t g = {malloc(n * 4), malloc(n * 4), 0, n},
		  out = {malloc(n * 4), malloc(n * 4), 0, n};
	random_coo(&g, n, 300, 1);
	float *sk = malloc(F * 4), *est = malloc(n * 4);
	double *mean = calloc(n, 8), *sq = calloc(n, 8);
	const int trials = 3000;
	for (int t = 0; t < trials; t++) {
		CHECK_EQ_INT(scd_sketch_encode(&cfg, (uint64_t)t, &g, sk), SC_OK);
		CHECK_EQ_INT(scd_sketch_decode_dense(&cfg, (uint64_t)t, sk, est), SC_OK);
		for (uint64_t j = 0; j < g.nnz; j++) {
			double e = est[g.idx[j]] - g.val[j];
			mean[j] += e;
			sq[j] += e * e;
		}
	}
	/* pooled z-score of the mean error over all non-zeros */
	double sum_err = 0, var = 0;
	for (uint64_t j = 0; j < g.nnz; j++) {
		sum_err += mean[j] / trials;
		var += sq[j] / trials;
	}
	double avg = sum_err / g.nnz, sd = sqrt(var / g.nnz);
	/* errors of different elements are correlated through shared buckets; a generous
	 * bound: 6 standard errors of a single element's mean */
	double se = sd / sqrt((double)trials);
	CHECK_MSG(fabs(avg) < 6 * se, "mean error %.4f vs standard error %.4f (rows %u)", avg,
		  se, rows);
	/* the positive collision mass a biased decoder would add: about nnz/cols * mean */
	double bias = 0;
	for (uint64_t j = 0; j < g.nnz; j++)
		bias += g.val[j];
	bias = bias / cfg.cols;
	CHECK_MSG(6 * se < bias / 2, "test too weak: se %.3f vs bias %.3f", se, bias);
	/* variance about ||g||^2 / cols for one row (S2 paper) */
	if (rows == 1) {
		double norm2 = 0;
		for (uint64_t j = 0; j < g.nnz; j++)
			norm2 += (double)g.val[j] * g.val[j];
		double expect = norm2 / cfg.cols;
		CHECK_MSG(var / g.nnz > 0.5 * expect && var / g.nnz < 2 * expect,
			  "variance %.1f, expected about %.1f", var / g.nnz, expect);
	}
	free(g.idx), free(g.val), free(out.idx), free(out.val), free(sk), free(est), free(mean),
	    free(sq);
}

/* One row: the fast dense decode gives the elements the general decoder estimates (and 0
 * outside the marked blocks), and decode_apply gives, in one pass, the bits of decoding
 * both sketches and subtracting the second from the residual. */
UNIT_TEST(core_sketch_decode_apply_matches_two_decodes)
{
	scd_sketch_cfg_t cfg = {.numel = 3000 + unit_rng_below(5000),
				.rows = 1,
				.cols = 50 + (uint32_t)unit_rng_below(500),
				.block = 1 + (uint32_t)unit_rng_below(64),
				.seed = unit_rng()};
	uint64_t n = cfg.numel, F = scd_sketch_floats(&cfg), step = unit_rng_below(100);
	scd_coo_t a = {malloc(n * 4), malloc(n * 4), 0, n},
		  b = {malloc(n * 4), malloc(n * 4), 0, n},
		  lst = {malloc(n * 4), malloc(n * 4), 0, n};
	random_coo(&a, n, n / 50 + 1, 0);
	random_coo(&b, n, n / 50 + 1, 0);
	float *sa = malloc(F * 4), *sb = malloc(F * 4), *d1 = malloc(n * 4),
	      *d2 = malloc(n * 4), *own = malloc(n * 4), *r1 = malloc(n * 4),
	      *r2 = malloc(n * 4);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &a, sa), SC_OK);
	CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &b, sb), SC_OK);
	for (uint64_t i = 0; i < n; i++)
		r1[i] = r2[i] = (float)unit_rng_below(100) - 50.5f;
	/* the reference: two dense decodes (own with the summed sketch's bitmap), subtract */
	memcpy(sb + cfg.cols, sa + cfg.cols, 4 * (F - cfg.cols));
	CHECK_EQ_INT(scd_sketch_decode_dense(&cfg, step, sa, d1), SC_OK);
	CHECK_EQ_INT(scd_sketch_decode_dense(&cfg, step, sb, own), SC_OK);
	for (uint64_t i = 0; i < n; i++)
		r1[i] -= own[i];
	memset(d2, 0x5a, n * 4);
	CHECK_EQ_INT(scd_sketch_decode_apply(&cfg, step, sa, sb, d2, r2), SC_OK);
	CHECK_TRUE(memcmp(d1, d2, n * 4) == 0);
	CHECK_TRUE(memcmp(r1, r2, n * 4) == 0);
	/* the dense decode against the general (list) decoder */
	CHECK_EQ_INT(scd_sketch_decode(&cfg, step, sa, &lst), SC_OK);
	float *d3 = calloc(n, 4);
	for (uint64_t j = 0; j < lst.nnz; j++)
		d3[lst.idx[j]] = lst.val[j];
	CHECK_TRUE(memcmp(d1, d3, n * 4) == 0);
	/* more than one row is not linear: refused */
	cfg.rows = 3;
	CHECK_EQ_INT(scd_sketch_decode_apply(&cfg, step, sa, sb, d2, r2), SC_ERR_INVALID);
	free(a.idx), free(a.val), free(b.idx), free(b.val), free(lst.idx), free(lst.val);
	free(sa), free(sb), free(d1), free(d2), free(d3), free(own), free(r1), free(r2);
}
