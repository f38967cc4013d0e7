/*
 * test_gpu_select.c: the GPU device's reductions, scans, sparsifiers and bitmap format
 * (gpu/reduce.cu, gpu/select.cu) against the cpu device's functions on the same inputs,
 * through the scg memory API (the host build here: Thrust's OpenMP backend). Results are
 * compared bit for bit (every one of these ops is exact); the sparsifiers also conserve
 * every element (selected + new residual == in + old residual, bit for bit). Inputs: random
 * sizes (0, 1, odd, up to ~200k), densities 1e-5..1, ties, zeros and -0.0. Inputs go to
 * device memory through scg_from_host, so the same tests run against the CUDA build (make
 * test-gpu).
 */
#include "unit.h"

#include "device/format.h"
#include "device/listops.h"
#include "device/reduce.h"
#include "device/select.h"
#include "scg.h"

#include <string.h>
#ifndef SCG_TEST_GPU
#include <omp.h>
#endif

#define SCG_OK(call)                                                                           \
	do {                                                                                   \
		sc_status_t st_ = (call);                                                      \
		CHECK_MSG(st_ == SC_OK, "%s failed: %d (%s)", #call, (int)st_, scg_error());   \
	} while (0)

/* The device on this thread; in the host build, 4 OpenMP threads on the atomics. */
static void init(void)
{
	SCG_OK(scg_init(0));
#ifndef SCG_TEST_GPU
	omp_set_num_threads(4);
#endif
}

static uint64_t random_n(void)
{
	switch (unit_rng_below(6)) {
	case 0:
		return unit_rng_below(3); /* 0, 1, 2 */
	case 1:
		return 1 + 2 * unit_rng_below(40); /* odd */
	case 2:
		return 1 + unit_rng_below(5000);
	default:
		return 10000 + unit_rng_below(200000);
	}
}

static double random_density(void)
{
	return pow(10.0, -5.0 * unit_rng_double()); /* 1e-5 .. 1 */
}

/* A value at the given density: ties (a few magnitudes), -0.0, or a gradient-like one. */
static float random_value(double density, int ties)
{
	if (unit_rng_double() >= density)
		return unit_rng_below(4) ? 0.0f : -0.0f;
	if (ties)
		return (float)((int)unit_rng_below(7) - 3) * 0.25f;
	double u = 0;
	for (int i = 0; i < 4; i++)
		u += unit_rng_double() - 0.5;
	if (unit_rng_below(50) == 0)
		u *= 20 * unit_rng_double();
	return (float)u;
}

static void fill(float *x, uint64_t n, double density, int ties)
{
	for (uint64_t i = 0; i < n; i++)
		x[i] = random_value(density, ties);
}

static void *dev_alloc(size_t bytes)
{
	void *p = NULL;
	SCG_OK(scg_alloc(bytes ? bytes : 4, &p));
	return p;
}

static void *dev_from(const void *host, size_t bytes)
{
	void *p = dev_alloc(bytes);
	if (bytes)
		SCG_OK(scg_from_host(p, host, bytes));
	return p;
}

static void to_host(void *host, const void *dev, size_t bytes)
{
	if (bytes)
		SCG_OK(scg_to_host(host, dev, bytes));
}

static void check_bits(const void *a, const void *b, size_t bytes, const char *what)
{
	if (!bytes || !memcmp(a, b, bytes))
		return;
	const unsigned char *x = a, *y = b;
	size_t i = 0;
	while (x[i] == y[i])
		i++;
	unit_fail(__FILE__, __LINE__, "%s differs from the cpu at byte %zu of %zu", what, i,
		  bytes);
}

/* ---- reductions and scans ------------------------------------------------------------ */

UNIT_TEST(gpu_reduce_typed_average_scale)
{
	init();
	for (int round = 0; round < 12; round++) {
		uint64_t n = random_n();
		for (int dt = 0; dt < 4; dt++) {
			size_t es = dt == SC_FLOAT32 || dt == SC_INT32 ? 4 : 8;
			unsigned char *a = malloc(n * es + 8), *b = malloc(n * es + 8),
				      *r = malloc(n * es + 8);
			for (uint64_t i = 0; i < n * es; i++) {
				a[i] = (unsigned char)unit_rng();
				b[i] = (unsigned char)unit_rng();
			}
			if (dt == SC_FLOAT32) /* finite values (random bits make NaNs) */
				for (uint64_t i = 0; i < n; i++) {
					((float *)a)[i] = random_value(0.7, 0);
					((float *)b)[i] = random_value(0.7, unit_rng_below(2));
				}
			if (dt == SC_FLOAT64)
				for (uint64_t i = 0; i < n; i++) {
					((double *)a)[i] = random_value(0.7, 0) * 1e3;
					((double *)b)[i] = (double)random_value(0.7, 0) / 7;
				}
			/* min, max and product first (a and b unchanged by them: on copies) */
			unsigned char *c = malloc(n * es + 8);
			for (int op = SC_OP_MIN; op <= SC_OP_PRODUCT; op++) {
				memcpy(c, a, n * es);
				void *dc = dev_from(c, n * es), *db = dev_from(b, n * es);
				SCG_OK(scg_reduce_typed((sc_dtype_t)dt, (sc_reduce_op_t)op, dc,
							db, n));
				scd_reduce_typed((sc_dtype_t)dt, (sc_reduce_op_t)op, c, b, n);
				to_host(r, dc, n * es);
				check_bits(r, c, n * es, sc_reduce_op_name((sc_reduce_op_t)op));
				scg_free(dc), scg_free(db);
			}
			free(c);
			void *da = dev_from(a, n * es), *db = dev_from(b, n * es);
			SCG_OK(scg_reduce_typed((sc_dtype_t)dt, SC_OP_SUM, da, db, n));
			scd_reduce_typed((sc_dtype_t)dt, SC_OP_SUM, a, b, n);
			to_host(r, da, n * es);
			check_bits(r, a, n * es, "reduce_typed");

			double divisor = (double)(1 + unit_rng_below(9));
			SCG_OK(scg_average_typed((sc_dtype_t)dt, da, n, divisor));
			scd_average_typed((sc_dtype_t)dt, a, n, divisor);
			to_host(r, da, n * es);
			check_bits(r, a, n * es, "average_typed");
			scg_free(da), scg_free(db);
			free(a), free(b), free(r);
		}
		/* float32: reduce_sum and scale */
		float *x = malloc(n * 4 + 4), *y = malloc(n * 4 + 4), *r = malloc(n * 4 + 4);
		fill(x, n, random_density(), unit_rng_below(2));
		fill(y, n, random_density(), unit_rng_below(2));
		float *dx = dev_from(x, n * 4), *dy = dev_from(y, n * 4);
		SCG_OK(scg_reduce_sum(dx, dy, n));
		scd_reduce_sum(x, y, n);
		to_host(r, dx, n * 4);
		check_bits(r, x, n * 4, "reduce_sum");
		float f = (float)(unit_rng_double() * 4 - 2);
		SCG_OK(scg_scale(dx, n, f));
		scd_scale_f32(x, n, f);
		to_host(r, dx, n * 4);
		check_bits(r, x, n * 4, "scale");
		scg_free(dx), scg_free(dy);
		free(x), free(y), free(r);
	}
	/* an integer divisor of 0 is refused, not a fault */
	int32_t *d = dev_alloc(16);
	CHECK_TRUE(scg_average_typed(SC_INT32, d, 4, 0.5) == SC_ERR_INVALID);
	scg_free(d);
}

UNIT_TEST(gpu_reduce_scatter_and_scans)
{
	init();
	for (int round = 0; round < 16; round++) {
		uint64_t n = random_n();
		double density = random_density();
		float *g = malloc(n * 4 + 4), *dst = malloc(n * 4 + 4), *r = malloc(n * 4 + 4);
		uint32_t *idx = malloc(n * 4 + 4), *gi = malloc(n * 4 + 4);
		float *val = malloc(n * 4 + 4), *gv = malloc(n * 4 + 4);
		fill(g, n, density, unit_rng_below(2));
		fill(dst, n, 0.5, 0);
		float *dg = dev_from(g, n * 4), *ddst = dev_from(dst, n * 4);
		uint32_t *didx = dev_alloc(n * 4);
		float *dval = dev_alloc(n * 4);

		uint64_t c = 77;
		SCG_OK(scg_count_nonzero(dg, n, &c));
		CHECK_EQ_INT(c, scd_count_nonzero(g, n));

		uint64_t nnz = 77, want = scd_dense_to_coo(g, n, idx, val);
		SCG_OK(scg_dense_to_coo(dg, n, didx, dval, &nnz));
		CHECK_EQ_INT(nnz, want);
		to_host(gi, didx, nnz * 4);
		to_host(gv, dval, nnz * 4);
		check_bits(gi, idx, nnz * 4, "dense_to_coo idx");
		check_bits(gv, val, nnz * 4, "dense_to_coo val");

		/* scatters of the list (unique indices) into another tensor */
		scd_coo_t coo = {idx, val, nnz, n};
		SCG_OK(scg_coo_scatter_add(ddst, didx, dval, nnz));
		scd_coo_scatter_add(dst, &coo);
		to_host(r, ddst, n * 4);
		check_bits(r, dst, n * 4, "coo_scatter_add");
		for (uint64_t j = 0; j < nnz; j++)
			val[j] = random_value(1.0, 0);
		SCG_OK(scg_from_host(dval, val, nnz * 4 + 0));
		SCG_OK(scg_coo_scatter(ddst, didx, dval, nnz));
		scd_coo_scatter(dst, &coo);
		to_host(r, ddst, n * 4);
		check_bits(r, dst, n * 4, "coo_scatter");

		scg_free(dg), scg_free(ddst), scg_free(didx), scg_free(dval);
		free(g), free(dst), free(r), free(idx), free(gi), free(val), free(gv);
	}
}

/* ---- sparsifiers ----------------------------------------------------------------------- */

/* One sparsifier step on the cpu and the GPU from the same inputs; mode 0: in + residual,
 * 1: in only (no error feedback), 2: residual only. Compares output, residual and stats. */
static void compare_step(scd_sparsifier_t *cpu, scg_sparsifier_t *gpu, uint64_t n, uint64_t cap,
			 double density, int ties, int mode, int topk)
{
	float *in = malloc(n * 4 + 4), *res = malloc(n * 4 + 4), *acc = malloc(n * 4 + 4);
	float *gres = malloc(n * 4 + 4), *gval = malloc(cap * 4 + 4);
	uint32_t *gidx = malloc(cap * 4 + 4);
	fill(in, n, density, ties);
	fill(res, n, density, ties);
	for (uint64_t i = 0; i < n; i++)
		acc[i] = mode == 0 ? in[i] + res[i] : mode == 1 ? in[i] : res[i];
	float *din = dev_from(in, n * 4), *dres = dev_from(res, n * 4);
	scg_coo_t gout = {dev_alloc(cap * 4), dev_alloc(cap * 4), 99, cap};
	scd_coo_t out = {malloc(cap * 4 + 4), malloc(cap * 4 + 4), 0, cap};
	scd_select_stats_t st;
	scg_select_stats_t gst;

	const float *cin = mode == 2 ? NULL : in, *gin = mode == 2 ? NULL : din;
	float *cres = mode == 1 ? NULL : res, *gr = mode == 1 ? NULL : dres;
	CHECK_TRUE(scd_sparsify(cpu, cin, cres, n, &out, &st) == SC_OK);
	SCG_OK(scg_sparsify(gpu, gin, gr, n, &gout, &gst));

	CHECK_MSG(gout.nnz == out.nnz, "nnz %llu, cpu %llu (n %llu cap %llu mode %d)",
		  (unsigned long long)gout.nnz, (unsigned long long)out.nnz,
		  (unsigned long long)n, (unsigned long long)cap, mode);
	CHECK_EQ_INT(gst.target, st.target);
	CHECK_EQ_INT(gst.qualified, st.qualified);
	if (!topk) /* top-k's threshold: its fast path may report the sample's bracket */
		check_bits(&gst.threshold, &st.threshold, 4, "stats threshold");
	to_host(gidx, gout.idx, out.nnz * 4);
	to_host(gval, gout.val, out.nnz * 4);
	check_bits(gidx, out.idx, out.nnz * 4, "sparsify idx");
	check_bits(gval, out.val, out.nnz * 4, "sparsify val");
	to_host(gres, dres, n * 4);
	check_bits(gres, res, n * 4, "sparsify residual");
	if (mode != 1) { /* conservation: selected + new residual == acc, bit for bit */
		for (uint64_t j = 0; j < out.nnz; j++) {
			uint32_t i = gidx[j];
			CHECK_MSG(gres[i] == 0.0f, "selected %u left in the residual", i);
			gres[i] += gval[j];
		}
		check_bits(gres, acc, n * 4, "selected + residual vs acc");
	}
	scg_free(din), scg_free(dres), scg_free(gout.idx), scg_free(gout.val);
	free(in), free(res), free(acc), free(gres), free(gval), free(gidx);
	free(out.idx), free(out.val);
}

static uint64_t random_cap(uint64_t n)
{
	switch (unit_rng_below(4)) {
	case 0:
		return unit_rng_below(n / 50 + 2); /* small: the output fills */
	default:
		return n;
	}
}

UNIT_TEST(gpu_select_threshold_natural)
{
	init();
	for (int round = 0; round < 24; round++) {
		uint64_t n = random_n();
		int natural = round % 3 == 0, ties = unit_rng_below(2);
		scd_sparsifier_cfg_t cfg = {
		    .kind = natural ? SCD_SPARSIFY_NATURAL : SCD_SPARSIFY_THRESHOLD,
		    .numel = n,
		    .threshold = ties ? 0.5f : (float)(unit_rng_double() * 1.5 + 1e-6)};
		scg_sparsifier_cfg_t gcfg = {cfg.kind,	    cfg.numel, cfg.density,
					     cfg.threshold, cfg.seed,  cfg.block};
		scd_sparsifier_t *cpu;
		scg_sparsifier_t *gpu;
		CHECK_TRUE(scd_sparsifier_create(&cfg, &cpu) == SC_OK);
		SCG_OK(scg_sparsifier_create(&gcfg, &gpu));
		for (int step = 0; step < 3; step++)
			compare_step(cpu, gpu, n, random_cap(n), random_density(), ties,
				     (int)unit_rng_below(3), 0);
		scd_sparsifier_destroy(cpu);
		scg_sparsifier_destroy(gpu);
	}
}

/* The plain threshold selection (scd_select_threshold, ExDyna's), every mode. */
UNIT_TEST(gpu_select_threshold_plain)
{
	init();
	for (int round = 0; round < 24; round++) {
		uint64_t n = random_n(), cap = random_cap(n);
		int mode = (int)unit_rng_below(3), ties = unit_rng_below(2);
		float t = ties ? 0.5f : (float)(unit_rng_double() * 1.5);
		float *in = malloc(n * 4 + 4), *res = malloc(n * 4 + 4), *r = malloc(n * 4 + 4);
		fill(in, n, random_density(), ties);
		fill(res, n, random_density(), ties);
		float *din = dev_from(in, n * 4), *dres = dev_from(res, n * 4);
		scg_coo_t gout = {dev_alloc(cap * 4), dev_alloc(cap * 4), 99, cap};
		scd_coo_t out = {malloc(cap * 4 + 4), malloc(cap * 4 + 4), 0, cap};
		uint64_t q = 0,
			 want = scd_select_threshold(mode == 2 ? NULL : in,
						     mode == 1 ? NULL : res, 0, n, t, &out);
		SCG_OK(scg_select_threshold(mode == 2 ? NULL : din, mode == 1 ? NULL : dres, n,
					    t, &gout, &q));
		CHECK_EQ_INT(q, want);
		CHECK_EQ_INT(gout.nnz, out.nnz);
		uint32_t *gi = malloc(cap * 4 + 4);
		to_host(gi, gout.idx, out.nnz * 4);
		check_bits(gi, out.idx, out.nnz * 4, "select_threshold idx");
		to_host(r, gout.val, out.nnz * 4);
		check_bits(r, out.val, out.nnz * 4, "select_threshold val");
		to_host(r, dres, n * 4);
		check_bits(r, res, n * 4, "select_threshold residual");
		scg_free(din), scg_free(dres), scg_free(gout.idx), scg_free(gout.val);
		free(in), free(res), free(r), free(gi), free(out.idx), free(out.val);
	}
}

UNIT_TEST_TIMEOUT(gpu_select_topk, 120)
{
	init();
	for (int round = 0; round < 24; round++) {
		uint64_t n = random_n();
		int ties = unit_rng_below(2);
		scd_sparsifier_cfg_t cfg = {
		    .kind = SCD_SPARSIFY_TOPK, .numel = n, .density = random_density()};
		scg_sparsifier_cfg_t gcfg = {cfg.kind,	    cfg.numel, cfg.density,
					     cfg.threshold, cfg.seed,  cfg.block};
		scd_sparsifier_t *cpu;
		scg_sparsifier_t *gpu;
		CHECK_TRUE(scd_sparsifier_create(&cfg, &cpu) == SC_OK);
		SCG_OK(scg_sparsifier_create(&gcfg, &gpu));
		for (int step = 0; step < 3; step++)
			compare_step(cpu, gpu, n, random_cap(n), random_density(), ties,
				     (int)unit_rng_below(3), 1);
		scd_sparsifier_destroy(cpu);
		scg_sparsifier_destroy(gpu);
	}
}

/* DGC: the same sample, threshold and corrections (several steps: the seed moves on). */
UNIT_TEST_TIMEOUT(gpu_select_dgc, 120)
{
	init();
	for (int round = 0; round < 16; round++) {
		uint64_t n = random_n();
		int ties = unit_rng_below(2);
		scd_sparsifier_cfg_t cfg = {.kind = SCD_SPARSIFY_DGC,
					    .numel = n,
					    .density = random_density(),
					    .seed = unit_rng()};
		scg_sparsifier_cfg_t gcfg = {cfg.kind,	    cfg.numel, cfg.density,
					     cfg.threshold, cfg.seed,  cfg.block};
		scd_sparsifier_t *cpu;
		scg_sparsifier_t *gpu;
		CHECK_TRUE(scd_sparsifier_create(&cfg, &cpu) == SC_OK);
		SCG_OK(scg_sparsifier_create(&gcfg, &gpu));
		for (int step = 0; step < 4; step++)
			compare_step(cpu, gpu, n, random_cap(n), random_density(), ties,
				     (int)unit_rng_below(3), 0);
		scd_sparsifier_destroy(cpu);
		scg_sparsifier_destroy(gpu);
	}
}

/* ---- bitmap ---------------------------------------------------------------------------- */

UNIT_TEST(gpu_bitmap_format)
{
	init();
	for (int round = 0; round < 24; round++) {
		uint64_t n = random_n();
		float *g = malloc(n * 4 + 4);
		uint32_t *idx = malloc(n * 4 + 4), *gi = malloc(n * 4 + 4);
		float *val = malloc(n * 4 + 4), *gv = malloc(n * 4 + 4);
		fill(g, n, random_density(), unit_rng_below(2));
		uint64_t nnz = scd_dense_to_coo(g, n, idx, val);
		uint64_t cap = scd_fmt_bitmap_bytes(n, nnz) + 8 * unit_rng_below(3);
		unsigned char *buf = malloc(cap + 8), *gbuf = malloc(cap + 8);
		scd_coo_t coo = {idx, val, nnz, n};
		scg_coo_t gcoo = {dev_from(idx, nnz * 4), dev_from(val, nnz * 4), nnz, n};
		void *dbuf = dev_alloc(cap + 8);
		uint64_t bytes = 0, gbytes = 1;
		CHECK_TRUE(scd_bitmap_encode(&coo, n, buf, cap, &bytes) == SC_OK);
		SCG_OK(scg_bitmap_encode(&gcoo, n, dbuf, cap, &gbytes));
		CHECK_EQ_INT(gbytes, bytes);
		to_host(gbuf, dbuf, bytes);
		check_bits(gbuf, buf, bytes, "bitmap_encode");
		/* too small a buffer */
		if (bytes)
			CHECK_TRUE(scg_bitmap_encode(&gcoo, n, dbuf, bytes - 1, &gbytes) ==
				   SC_ERR_LIMIT);

		/* decode (from the cpu's bytes) */
		scg_coo_t gout = {dev_alloc(n * 4), dev_alloc(n * 4), 0, n};
		SCG_OK(scg_from_host(dbuf, buf, bytes + 0));
		SCG_OK(scg_bitmap_decode(dbuf, bytes, n, &gout));
		CHECK_EQ_INT(gout.nnz, nnz);
		to_host(gi, gout.idx, nnz * 4);
		to_host(gv, gout.val, nnz * 4);
		check_bits(gi, idx, nnz * 4, "bitmap_decode idx");
		check_bits(gv, val, nnz * 4, "bitmap_decode val");
		/* the cpu's status for malformed buffers */
		scd_coo_t cout = {gi, gv, 0, n};
		CHECK_EQ_INT(scg_bitmap_decode(dbuf, bytes + 4, n, &gout),
			     scd_bitmap_decode(buf, bytes + 4, n, &cout));
		if (bytes >= 4)
			CHECK_EQ_INT(scg_bitmap_decode(dbuf, bytes - 4, n, &gout),
				     scd_bitmap_decode(buf, bytes - 4, n, &cout));
		if (n % 64) { /* a bit past numel */
			uint64_t w = (n + 63) / 64 - 1, word;
			memcpy(&word, buf + 8 * w, 8);
			word |= 1ull << 63;
			memcpy(buf + 8 * w, &word, 8);
			SCG_OK(scg_from_host(dbuf, buf, bytes));
			CHECK_EQ_INT(scg_bitmap_decode(dbuf, bytes, n, &gout),
				     scd_bitmap_decode(buf, bytes, n, &cout));
			CHECK_EQ_INT(scg_bitmap_decode(dbuf, bytes, n, &gout), SC_ERR_PROTOCOL);
		}
		if (nnz) { /* too small an output */
			scg_coo_t small = gout;
			small.cap = nnz - 1;
			SCG_OK(scg_from_host(dbuf, gbuf, bytes));
			CHECK_TRUE(scg_bitmap_decode(dbuf, bytes, n, &small) == SC_ERR_LIMIT);
		}
		if (nnz >= 2) { /* indices not ascending: invalid */
			uint32_t t = idx[0];
			idx[0] = idx[1], idx[1] = t;
			SCG_OK(scg_from_host(gcoo.idx, idx, nnz * 4));
			CHECK_EQ_INT(scg_bitmap_encode(&gcoo, n, dbuf, cap, &gbytes),
				     scd_bitmap_encode(&coo, n, buf, cap, &bytes));
			CHECK_EQ_INT(scg_bitmap_encode(&gcoo, n, dbuf, cap, &gbytes),
				     SC_ERR_INVALID);
		}
		if (nnz) { /* an index past numel: invalid */
			idx[nnz - 1] = (uint32_t)n;
			SCG_OK(scg_from_host(gcoo.idx, idx, nnz * 4));
			CHECK_TRUE(scg_bitmap_encode(&gcoo, n, dbuf, cap, &gbytes) ==
				   SC_ERR_INVALID);
		}
		scg_free(gcoo.idx), scg_free(gcoo.val), scg_free(dbuf);
		scg_free(gout.idx), scg_free(gout.val);
		free(g), free(idx), free(gi), free(val), free(gv), free(buf), free(gbuf);
	}
}
