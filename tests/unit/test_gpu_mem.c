/*
 * test_gpu_mem.c: the GPU device's memory and streams (gpu/mem.cu) and the cuda slot of
 * the device registry (daemon/device/cuda.c). In sparsecomm-unit they run on the host
 * build of gpu/ (libscgpu-host.a); in sparsecomm-unit-gpu (make test-gpu, -DSCG_TEST_GPU)
 * the same tests run on the CUDA build. Device memory is only touched through scg_* or
 * the ops table.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/cuda.h"
#include "gpu_fns.h"
#include "gpu_log.h"
#include "port.h"
#include "scg.h"
#include "scg_host_ipc.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)unit_rng();
}

UNIT_TEST(gpu_mem_backend)
{
#ifdef SCG_TEST_GPU
	CHECK_TRUE(!strcmp(scg_backend(), "cuda"));
#else
	CHECK_TRUE(!strcmp(scg_backend(), "host"));
#endif
	OK(scg_init(0));
	CHECK_EQ_INT(scg_init(-1), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(scg_error()[0] != '\0');
}

UNIT_TEST(gpu_mem_round_trip)
{
	OK(scg_init(0));
	for (int round = 0; round < 20; round++) {
		size_t n =
		    round == 0 ? 0 : (size_t)unit_rng_below(round < 10 ? 64 : 1 << 20) + 1;
		uint8_t *src = malloc(n + 1), *back = malloc(n + 1), *zero = calloc(1, n + 1);
		CHECK_TRUE(src && back && zero);
		fill_random(src, n);
		void *a = NULL, *b = NULL;
		OK(scg_alloc(n, &a));
		OK(scg_alloc(n, &b));
		CHECK_TRUE(a && b);
		/* zeroed */
		memset(back, 0xa5, n);
		OK(scg_to_host(back, a, n));
		CHECK_TRUE(memcmp(back, zero, n) == 0);
		/* host -> a -> b -> host */
		OK(scg_from_host(a, src, n));
		OK(scg_copy(b, a, n));
		OK(scg_to_host(back, b, n));
		CHECK_TRUE(memcmp(back, src, n) == 0);
		/* a cleared range of b */
		if (n) {
			size_t lo = (size_t)unit_rng_below(n),
			       len = (size_t)unit_rng_below(n - lo + 1);
			OK(scg_clear((uint8_t *)b + lo, len));
			OK(scg_sync());
			memset(src + lo, 0, len);
			OK(scg_to_host(back, b, n));
			CHECK_TRUE(memcmp(back, src, n) == 0);
		}
		OK(scg_sync());
		OK(scg_free(a));
		OK(scg_free(b));
		free(src);
		free(back);
		free(zero);
	}
	OK(scg_free(NULL));
	OK(scg_sync());
}

/* The cuda table is complete, and the same memory sequence through it and the cpu device
 * gives the same bytes. */
UNIT_TEST(gpu_mem_ops_table)
{
	scd_cuda_fns_t f = gpu_linked_fns();
	scd_device_ops_t ops;
	char missing[4096];
	unsigned n_missing = scd_cuda_ops_fill(&f, &ops, missing, sizeof missing);
	CHECK_TRUE(!strcmp(ops.name, "cuda"));
	CHECK_MSG(n_missing == 0 && missing[0] == '\0', "%u missing: %s", n_missing, missing);
	CHECK_TRUE(ops.alloc && ops.free && ops.clear && ops.copy && ops.to_host &&
		   ops.from_host && ops.sync);
	CHECK_TRUE(ops.reduce_sum && ops.reduce_typed && ops.average_typed && ops.scale &&
		   ops.coo_scatter && ops.coo_scatter_add && ops.count_nonzero &&
		   ops.dense_to_coo && ops.sparsifier_create && ops.sparsifier_destroy &&
		   ops.sparsify && ops.bitmap_encode && ops.bitmap_decode);
	CHECK_TRUE(ops.exdyna_select && ops.coo_topk && ops.coo_scatter_add_part &&
		   ops.coo_encode && ops.idx_count_runs && ops.sub_scaled);

	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	for (int round = 0; round < 10; round++) {
		size_t n = (size_t)unit_rng_below(1 << 16) + 1;
		uint8_t *src = malloc(n), *got = malloc(n), *want = malloc(n);
		CHECK_TRUE(src && got && want);
		fill_random(src, n);
		size_t lo = (size_t)unit_rng_below(n), len = (size_t)unit_rng_below(n - lo + 1);
		const scd_device_ops_t *devs[2] = {&ops, cpu};
		uint8_t *outs[2] = {got, want};
		for (int d = 0; d < 2; d++) {
			const scd_device_ops_t *o = devs[d];
			uint8_t *a = o->alloc(n), *b = o->alloc(n);
			CHECK_TRUE(a && b);
			o->from_host(a, src, n);
			o->copy(b, a, n);
			o->clear(b + lo, len);
			OK(o->sync());
			o->to_host(outs[d], b, n);
			OK(o->sync());
			o->free(a);
			o->free(b);
		}
		CHECK_TRUE(memcmp(got, want, n) == 0);
		free(src);
		free(got);
		free(want);
	}
	OK(ops.sync());
}

/* A failing op without a status: its first failure comes back from sync, once. */
static sc_status_t failing_copy(void *dst, const void *src, size_t bytes)
{
	(void)dst;
	(void)src;
	(void)bytes;
	return SC_ERR_SYSTEM;
}

UNIT_TEST(gpu_mem_ops_sticky_failure)
{
	scd_cuda_fns_t f = gpu_linked_fns();
	f.copy = failing_copy;
	scd_device_ops_t ops;
	scd_cuda_ops_fill(&f, &ops, NULL, 0);
	void *a = ops.alloc(64), *b = ops.alloc(64);
	CHECK_TRUE(a && b);
	OK(ops.sync());
	ops.copy(b, a, 64);
	ops.clear(a, 64); /* still works; the first failure is kept */
	CHECK_EQ_INT(ops.sync(), SC_ERR_SYSTEM);
	OK(ops.sync());
	/* out of memory: NULL, not a sticky failure */
	CHECK_TRUE(ops.alloc((size_t)1 << 62) == NULL);
	OK(ops.sync());
	ops.free(a);
	ops.free(b);
	OK(ops.sync());
}

/* ---- reduce.cu / select.cu through the ops table ------------------------------------ */

/* Random floats at a density: zeros (some -0.0), small gradient-like values, ties. */
static void fill_floats(float *x, uint64_t n, double density)
{
	for (uint64_t i = 0; i < n; i++) {
		if (unit_rng_double() >= density)
			x[i] = unit_rng_below(4) ? 0.0f : -0.0f;
		else if (unit_rng_below(8) == 0)
			x[i] = (float)((int)unit_rng_below(7) - 3) * 0.25f;
		else
			x[i] =
			    (float)(unit_rng_double() - 0.5) * (float)(1 + unit_rng_below(16));
	}
}

static size_t dtype_bytes(sc_dtype_t dtype)
{
	return dtype == SC_FLOAT64 || dtype == SC_INT64 ? 8 : 4;
}

/* Random elements of dtype: finite values for the float types, any bits for integers. */
static void fill_typed(sc_dtype_t dtype, void *x, uint64_t n)
{
	if (dtype == SC_FLOAT32) {
		fill_floats(x, n, 0.8);
	} else if (dtype == SC_FLOAT64) {
		for (uint64_t i = 0; i < n; i++)
			((double *)x)[i] = (unit_rng_double() - 0.5) * 1e6;
	} else {
		fill_random(x, n * dtype_bytes(dtype));
	}
}

static void back(const scd_device_ops_t *o, void *host, const void *dev, size_t bytes)
{
	if (bytes)
		o->to_host(host, dev, bytes);
}

#define SAME_BYTES(a, b, bytes, what)                                                          \
	CHECK_MSG((bytes) == 0 || memcmp((a), (b), (bytes)) == 0,                              \
		  "%s differs from the cpu (n %llu)", (what), (unsigned long long)n)

/* The outputs of one device on one round's inputs (host copies). */
typedef struct ops_run {
	float *sum, *scaled, *scatter, *scatter_add, *coo_val, *res, *sp_val, *dec_val;
	uint32_t *coo_idx, *sp_idx, *dec_idx;
	uint8_t *typed[4], *avg[4], *bitmap;
	uint64_t count, nnz, sp_nnz, bitmap_bytes, dec_nnz;
	scd_select_stats_t stats;
	sc_status_t sp_st, enc_st, dec_st;
} ops_run_t;

static const sc_dtype_t typed_dtypes[4] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};

/* Every newly wired op on device o, from the same host inputs. */
static void run_ops(const scd_device_ops_t *o, uint64_t n, const float *a, const float *b,
		    uint8_t *const ta[4], uint8_t *const tb[4], double divisor, float f,
		    const scd_sparsifier_cfg_t *cfg, uint64_t cap, ops_run_t *r)
{
	size_t fb = n * 4;
	/* reduce_sum, scale */
	float *da = dev_from(o, a, fb), *db = dev_from(o, b, fb);
	o->reduce_sum(da, db, n);
	back(o, r->sum, da, fb);
	o->scale(da, n, f);
	back(o, r->scaled, da, fb);
	/* reduce_typed, average_typed */
	for (int t = 0; t < 4; t++) {
		size_t tbytes = n * dtype_bytes(typed_dtypes[t]);
		void *x = dev_from(o, ta[t], tbytes), *y = dev_from(o, tb[t], tbytes);
		o->reduce_typed(typed_dtypes[t], SC_OP_SUM, x, y, n);
		back(o, r->typed[t], x, tbytes);
		o->average_typed(typed_dtypes[t], x, n, divisor);
		back(o, r->avg[t], x, tbytes);
		o->free(x);
		o->free(y);
	}
	/* count_nonzero, dense_to_coo of b */
	r->count = o->count_nonzero(db, n);
	uint32_t *ci = o->alloc(fb + 4);
	float *cv = o->alloc(fb + 4);
	CHECK_TRUE(ci && cv);
	r->nnz = o->dense_to_coo(db, n, ci, cv);
	CHECK_TRUE(r->nnz <= n);
	back(o, r->coo_idx, ci, r->nnz * 4);
	back(o, r->coo_val, cv, r->nnz * 4);
	/* coo_scatter / coo_scatter_add of b's non-zeros (unique, ascending) into a */
	scd_coo_t coo = {ci, cv, r->nnz, n};
	float *dst = dev_from(o, a, fb);
	o->coo_scatter(dst, &coo);
	back(o, r->scatter, dst, fb);
	o->from_host(dst, a, fb);
	o->coo_scatter_add(dst, &coo);
	back(o, r->scatter_add, dst, fb);
	/* bitmap_encode / bitmap_decode of that list */
	uint64_t cap_bytes = 8 * ((n + 63) / 64) + 4 * r->nnz;
	void *buf = o->alloc(cap_bytes + 8);
	CHECK_TRUE(buf != NULL);
	r->bitmap_bytes = 0;
	r->enc_st = o->bitmap_encode(&coo, n, buf, cap_bytes, &r->bitmap_bytes);
	if (r->enc_st == SC_OK) {
		back(o, r->bitmap, buf, r->bitmap_bytes);
		scd_coo_t dec = {o->alloc(fb + 4), o->alloc(fb + 4), 0, n};
		CHECK_TRUE(dec.idx && dec.val);
		r->dec_st = o->bitmap_decode(buf, r->bitmap_bytes, n, &dec);
		r->dec_nnz = dec.nnz;
		if (r->dec_st == SC_OK) {
			back(o, r->dec_idx, dec.idx, dec.nnz * 4);
			back(o, r->dec_val, dec.val, dec.nnz * 4);
		}
		o->free(dec.idx);
		o->free(dec.val);
	}
	/* sparsify a with b as the residual, two steps */
	scd_sparsifier_t *sp = NULL;
	OK(o->sparsifier_create(cfg, &sp));
	scd_coo_t out = {o->alloc(cap * 4 + 4), o->alloc(cap * 4 + 4), 0, cap};
	CHECK_TRUE(out.idx && out.val);
	float *din = dev_from(o, a, fb), *dres = dev_from(o, b, fb);
	r->sp_st = o->sparsify(sp, din, dres, n, &out, &r->stats);
	if (r->sp_st == SC_OK)
		r->sp_st = o->sparsify(sp, din, dres, n, &out, &r->stats);
	r->sp_nnz = out.nnz;
	if (r->sp_st == SC_OK) {
		back(o, r->sp_idx, out.idx, out.nnz * 4);
		back(o, r->sp_val, out.val, out.nnz * 4);
		back(o, r->res, dres, fb);
	}
	o->sparsifier_destroy(sp);
	OK(o->sync());
	o->free(out.idx);
	o->free(out.val);
	o->free(din);
	o->free(dres);
	o->free(buf);
	o->free(dst);
	o->free(ci);
	o->free(cv);
	o->free(da);
	o->free(db);
	OK(o->sync());
}

static void ops_run_alloc(ops_run_t *r, uint64_t n)
{
	size_t fb = n * 4 + 4;
	memset(r, 0, sizeof *r);
	r->sum = malloc(fb), r->scaled = malloc(fb), r->scatter = malloc(fb);
	r->scatter_add = malloc(fb), r->coo_val = malloc(fb), r->res = malloc(fb);
	r->sp_val = malloc(fb), r->dec_val = malloc(fb), r->coo_idx = malloc(fb);
	r->sp_idx = malloc(fb), r->dec_idx = malloc(fb);
	r->bitmap = malloc(8 * ((n + 63) / 64) + fb);
	for (int t = 0; t < 4; t++) {
		r->typed[t] = malloc(n * 8 + 8);
		r->avg[t] = malloc(n * 8 + 8);
	}
}

static void ops_run_free(ops_run_t *r)
{
	free(r->sum), free(r->scaled), free(r->scatter), free(r->scatter_add);
	free(r->coo_val), free(r->res), free(r->sp_val), free(r->dec_val);
	free(r->coo_idx), free(r->sp_idx), free(r->dec_idx), free(r->bitmap);
	for (int t = 0; t < 4; t++)
		free(r->typed[t]), free(r->avg[t]);
}

/* reduce_sum, reduce_typed, average_typed, scale, coo_scatter, coo_scatter_add,
 * count_nonzero, dense_to_coo, sparsifier_*, sparsify, bitmap_encode / _decode through the
 * cuda table give the cpu device's results bit for bit. */
UNIT_TEST_TIMEOUT(gpu_ops_table_reduce_select, 120)
{
	scd_cuda_fns_t fns = gpu_linked_fns();
	scd_device_ops_t ops;
	scd_cuda_ops_fill(&fns, &ops, NULL, 0);
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	for (int round = 0; round < 16; round++) {
		uint64_t n = round == 0	  ? 0
			     : round == 1 ? 1
			     : round < 8  ? 1 + unit_rng_below(300)
					  : 1000 + unit_rng_below(60000);
		double density = pow(10.0, -4.0 * unit_rng_double());
		float *a = malloc(n * 4 + 4), *b = malloc(n * 4 + 4);
		uint8_t *ta[4], *tb[4];
		fill_floats(a, n, 0.9);
		fill_floats(b, n, density);
		for (int t = 0; t < 4; t++) {
			ta[t] = malloc(n * 8 + 8);
			tb[t] = malloc(n * 8 + 8);
			fill_typed(typed_dtypes[t], ta[t], n);
			fill_typed(typed_dtypes[t], tb[t], n);
		}
		double divisor = (double)(1 + unit_rng_below(8));
		float f = (float)(unit_rng_double() * 4 - 2);
		scd_sparsifier_cfg_t cfg = {.kind = (scd_sparsify_kind_t)(round % 4),
					    .numel = n,
					    .density = pow(10.0, -3.0 * unit_rng_double()),
					    .threshold = (float)(unit_rng_double() + 1e-3),
					    .seed = unit_rng()};
		uint64_t cap = unit_rng_below(3) ? n : unit_rng_below(n / 20 + 2);
		ops_run_t got, want;
		ops_run_alloc(&got, n);
		ops_run_alloc(&want, n);
		run_ops(&ops, n, a, b, ta, tb, divisor, f, &cfg, cap, &got);
		run_ops(cpu, n, a, b, ta, tb, divisor, f, &cfg, cap, &want);

		size_t fb = n * 4;
		SAME_BYTES(got.sum, want.sum, fb, "reduce_sum");
		SAME_BYTES(got.scaled, want.scaled, fb, "scale");
		for (int t = 0; t < 4; t++) {
			size_t tbytes = n * dtype_bytes(typed_dtypes[t]);
			SAME_BYTES(got.typed[t], want.typed[t], tbytes, "reduce_typed");
			SAME_BYTES(got.avg[t], want.avg[t], tbytes, "average_typed");
		}
		CHECK_EQ_INT(got.count, want.count);
		CHECK_EQ_INT(got.nnz, want.nnz);
		CHECK_EQ_INT(got.nnz, want.count);
		SAME_BYTES(got.coo_idx, want.coo_idx, want.nnz * 4, "dense_to_coo idx");
		SAME_BYTES(got.coo_val, want.coo_val, want.nnz * 4, "dense_to_coo val");
		SAME_BYTES(got.scatter, want.scatter, fb, "coo_scatter");
		SAME_BYTES(got.scatter_add, want.scatter_add, fb, "coo_scatter_add");
		CHECK_EQ_INT(got.enc_st, want.enc_st);
		OK(want.enc_st);
		CHECK_EQ_INT(got.bitmap_bytes, want.bitmap_bytes);
		SAME_BYTES(got.bitmap, want.bitmap, want.bitmap_bytes, "bitmap_encode");
		CHECK_EQ_INT(got.dec_st, want.dec_st);
		OK(want.dec_st);
		CHECK_EQ_INT(got.dec_nnz, want.nnz);
		CHECK_EQ_INT(got.dec_nnz, want.dec_nnz);
		SAME_BYTES(got.dec_idx, want.dec_idx, want.dec_nnz * 4, "bitmap_decode idx");
		SAME_BYTES(got.dec_val, want.dec_val, want.dec_nnz * 4, "bitmap_decode val");
		CHECK_EQ_INT(got.sp_st, want.sp_st);
		OK(want.sp_st);
		CHECK_EQ_INT(got.sp_nnz, want.sp_nnz);
		SAME_BYTES(got.sp_idx, want.sp_idx, want.sp_nnz * 4, "sparsify idx");
		SAME_BYTES(got.sp_val, want.sp_val, want.sp_nnz * 4, "sparsify val");
		SAME_BYTES(got.res, want.res, fb, "sparsify residual");
		CHECK_EQ_INT(got.stats.target, want.stats.target);
		CHECK_EQ_INT(got.stats.qualified, want.stats.qualified);
		if (cfg.kind != SCD_SPARSIFY_TOPK) /* top-k may report the sample's bracket */
			SAME_BYTES(&got.stats.threshold, &want.stats.threshold, 4,
				   "sparsify threshold");

		ops_run_free(&got);
		ops_run_free(&want);
		for (int t = 0; t < 4; t++)
			free(ta[t]), free(tb[t]);
		free(a);
		free(b);
	}
	/* a failure of an op without a status is kept for sync: integer divisor 0 */
	int32_t *x = ops.alloc(16);
	CHECK_TRUE(x != NULL);
	ops.average_typed(SC_INT32, x, 4, 0.0);
	CHECK_EQ_INT(ops.sync(), SC_ERR_INVALID);
	OK(ops.sync());
	ops.free(x);
	OK(ops.sync());
}

/* ---- listops.cu through the ops table ----------------------------------------------- */

/* A random strictly ascending list over [0, numel) at a density (values with zeros, -0.0
 * and ties); returns its length. */
static uint64_t random_list(uint64_t numel, double density, uint32_t *idx, float *val)
{
	uint64_t w = 0;
	for (uint64_t i = 0; i < numel; i++)
		if (unit_rng_double() < density)
			idx[w++] = (uint32_t)i;
	fill_floats(val, w, 0.8);
	return w;
}

typedef struct listops_in {
	uint64_t numel, an, bn;
	uint32_t *ai, *bi, P;
	float *av, *bv, *g, *x, share;
	uint64_t bad_k, v[8]; /* drawn once: both devices see the same */
	uint32_t *rep;	      /* an indices below numel, repeating */
} listops_in_t;

static void run_listops(const scd_device_ops_t *o, const listops_in_t *in, op_log_t *l)
{
	uint64_t n = in->numel, an = in->an, bn = in->bn, m = an + bn;
	uint32_t *ai = dev_from(o, in->ai, an * 4), *bi = dev_from(o, in->bi, bn * 4);
	float *av = dev_from(o, in->av, an * 4), *bv = dev_from(o, in->bv, bn * 4);
	scd_coo_t a = {ai, av, an, an}, b = {bi, bv, bn, bn};
	/* coo_check: the list, then broken copies */
	uint64_t r = o->coo_check(&a, n);
	log_put(l, "coo_check", &r, 8);
	r = o->coo_check(&a, n ? n - 1 : 0);
	log_put(l, "coo_check numel - 1", &r, 8);
	if (an >= 2) {
		uint32_t *bad = malloc(an * 4);
		memcpy(bad, in->ai, an * 4);
		uint64_t k = in->bad_k;
		bad[k] = bad[k - 1]; /* a repeat */
		uint32_t *dbad = dev_from(o, bad, an * 4);
		scd_coo_t c = {dbad, av, an, an};
		r = o->coo_check(&c, n);
		log_put(l, "coo_check repeat", &r, 8);
		o->free(dbad);
		free(bad);
	}
	/* lower_bound at list values, between them, at the ends and above uint32_t */
	for (int t = 0; t < 8; t++) {
		r = o->lower_bound(ai, an, in->v[t]);
		log_put(l, "lower_bound", &r, 8);
	}
	/* coo_copy_first, coo_scale_copy (a share, 1, in place) */
	uint32_t *oi = o->alloc((m + n) * 4 + 4);
	float *ov = o->alloc((m + n) * 4 + 4);
	CHECK_TRUE(oi && ov);
	o->coo_copy_first(oi, ov, &a);
	log_dev(l, o, "coo_copy_first idx", oi, an * 4);
	log_dev(l, o, "coo_copy_first val", ov, an * 4);
	o->coo_scale_copy(oi, ov, bi, bv, bn, in->share);
	log_dev(l, o, "coo_scale_copy idx", oi, bn * 4);
	log_dev(l, o, "coo_scale_copy val", ov, bn * 4);
	o->coo_scale_copy(oi, ov, bi, bv, bn, 1.0f);
	log_dev(l, o, "coo_scale_copy 1 val", ov, bn * 4);
	o->coo_scale_copy(oi, ov, oi, ov, bn, in->share);
	log_dev(l, o, "coo_scale_copy in place", ov, bn * 4);
	/* merge_two */
	r = o->merge_two(ai, av, an, &b, oi, ov);
	log_put(l, "merge_two nnz", &r, 8);
	log_dev(l, o, "merge_two idx", oi, (r <= m + n ? r : 0) * 4);
	log_dev(l, o, "merge_two val", ov, (r <= m + n ? r : 0) * 4);
	/* range_counts, coo_range_counts */
	uint64_t counts[64];
	float *g = dev_from(o, in->g, n * 4);
	o->range_counts(g, n, in->P, counts);
	log_put(l, "range_counts", counts, 8 * in->P);
	o->coo_range_counts(&a, n, in->P, counts);
	log_put(l, "coo_range_counts", counts, 8 * in->P);
	/* residual_bits of g, bits_set of b (and a repeat), residual_drain of g into x */
	uint64_t nw = (n + 63) / 64;
	uint64_t *bits = o->alloc(nw * 8 + 8);
	CHECK_TRUE(bits != NULL);
	o->from_host(bits, in->g, nw * 8 < n * 4 ? nw * 8 : 0); /* stale words */
	r = o->residual_bits(g, n, bits);
	log_put(l, "residual_bits count", &r, 8);
	log_dev(l, o, "residual_bits", bits, nw * 8);
	o->bits_set(bits, bi, bn);
	o->bits_set(bits, bi, bn / 2);
	log_dev(l, o, "bits_set", bits, nw * 8);
	float *x = dev_from(o, in->x, n * 4);
	/* residual_add of a into x (a touch list already holding one entry) and of a list
	 * whose indices repeat; coo_add_checked of b against a smaller numel and repeated */
	uint32_t *touch = o->alloc(2 * n * 4 + 8);
	CHECK_TRUE(touch != NULL);
	uint64_t nt = 1;
	o->residual_add(x, ai, av, an, touch, &nt);
	log_put(l, "residual_add n_touch", &nt, 8);
	log_dev(l, o, "residual_add touch", touch, nt * 4);
	log_dev(l, o, "residual_add res", x, n * 4);
	uint32_t *rep = dev_from(o, in->rep, an * 4);
	o->residual_add(x, rep, av, an, touch, &nt);
	log_put(l, "residual_add repeats n_touch", &nt, 8);
	log_dev(l, o, "residual_add repeats touch", touch, nt * 4);
	o->residual_add(x, rep, bv, an < bn ? an : bn, NULL, &nt);
	log_dev(l, o, "residual_add repeats res", x, n * 4);
	r = o->coo_add_checked(x, n / 2 + 1, bi, bv, bn);
	log_put(l, "coo_add_checked bad", &r, 8);
	r = o->coo_add_checked(x, n, rep, av, an);
	log_put(l, "coo_add_checked repeats bad", &r, 8);
	log_dev(l, o, "coo_add_checked", x, n * 4);
	o->free(rep), o->free(touch);
	/* coo_fold_residual of a with x as the residual: bits where x is non-zero and at b */
	r = o->residual_bits(x, n, bits);
	o->bits_set(bits, bi, bn);
	r = o->coo_fold_residual(&a, x, bits, n, oi, ov);
	log_put(l, "coo_fold_residual nnz", &r, 8);
	log_dev(l, o, "coo_fold_residual idx", oi, (r <= m + n ? r : 0) * 4);
	log_dev(l, o, "coo_fold_residual val", ov, (r <= m + n ? r : 0) * 4);
	log_dev(l, o, "coo_fold_residual res", x, n * 4);
	log_dev(l, o, "coo_fold_residual bits", bits, nw * 8);
	/* gather of x at b's indices, then taking them; coo_gather from list a at b's
	 * indices (some in a, some not), taking them */
	o->from_host(x, in->x, n * 4);
	float *gv = o->alloc(n * 4 + 4);
	CHECK_TRUE(gv != NULL);
	o->gather(gv, x, bi, bn, 0);
	log_dev(l, o, "gather", gv, bn * 4);
	o->gather(gv, x, bi, bn, 1);
	log_dev(l, o, "gather take", gv, bn * 4);
	log_dev(l, o, "gather take src", x, n * 4);
	o->coo_gather(gv, bi, bn, &a, 0);
	log_dev(l, o, "coo_gather", gv, bn * 4);
	o->coo_gather(gv, bi, bn, &a, 1);
	log_dev(l, o, "coo_gather take", gv, bn * 4);
	log_dev(l, o, "coo_gather take list", av, an * 4);
	o->free(gv);
	o->from_host(x, in->x, n * 4);
	o->residual_drain(x, g, n);
	log_dev(l, o, "residual_drain x", x, n * 4);
	log_dev(l, o, "residual_drain res", g, n * 4);
	OK(o->sync());
	o->free(x), o->free(bits), o->free(g), o->free(oi), o->free(ov);
	o->free(ai), o->free(bi), o->free(av), o->free(bv);
	OK(o->sync());
}

/* coo_check, lower_bound, coo_copy_first, coo_scale_copy, merge_two, range_counts,
 * coo_range_counts, residual_bits, bits_set, residual_add (touch list in the cpu's order),
 * coo_add_checked, coo_fold_residual, gather, coo_gather, residual_drain through the partial
 * cuda table give the cpu device's results bit for bit. */
UNIT_TEST_TIMEOUT(gpu_ops_table_listops, 120)
{
	scd_cuda_fns_t fns = gpu_linked_fns();
	scd_device_ops_t ops;
	scd_cuda_ops_fill(&fns, &ops, NULL, 0);
	for (int round = 0; round < 24; round++) {
		uint64_t n = round == 0	  ? 0
			     : round == 1 ? 1
			     : round < 12 ? (1 + unit_rng_below(300)) | 1
					  : 1000 + unit_rng_below(50000);
		listops_in_t in = {.numel = n};
		in.ai = malloc(n * 4 + 4), in.bi = malloc(n * 4 + 4);
		in.av = malloc(n * 4 + 4), in.bv = malloc(n * 4 + 4);
		in.g = malloc(n * 4 + 4), in.x = malloc(n * 4 + 4);
		in.an = random_list(n, unit_rng_double(), in.ai, in.av);
		in.bn = random_list(n, unit_rng_double(), in.bi, in.bv);
		fill_floats(in.g, n, pow(10.0, -3.0 * unit_rng_double()));
		fill_floats(in.x, n, 0.9);
		in.P = (uint32_t)(1 + unit_rng_below(round % 3 ? 9 : 64));
		for (int t = 0; t < 8; t++)
			in.v[t] = t == 0	   ? 0
				  : t == 1	   ? n
				  : t == 2	   ? (uint64_t)UINT32_MAX + 5
				  : in.an && t < 5 ? in.ai[unit_rng_below(in.an)]
						   : unit_rng_below(n + 2);
		in.bad_k = in.an >= 2 ? 1 + unit_rng_below(in.an - 1) : 0;
		in.rep = malloc(n * 4 + 4);
		for (uint64_t j = 0; j < in.an; j++)
			in.rep[j] = (uint32_t)unit_rng_below(n / 8 + 1);
		in.share = round % 4 ? (float)(unit_rng_double() * 2) : -0.5f;
		op_log_t got = {0}, want = {0};
		run_listops(&ops, &in, &got);
		run_listops(&scd_device_cpu_ops, &in, &want);
		char what[64];
		snprintf(what, sizeof what, "listops n %llu", (unsigned long long)n);
		logs_compare(&got, &want, what);
		log_free(&got), log_free(&want);
		free(in.ai), free(in.bi), free(in.av), free(in.bv), free(in.g), free(in.x),
		    free(in.rep);
	}
}

#ifndef SCG_TEST_GPU
static void *host_owner_of_new(void *arg)
{
	void *p = NULL;
	(void)arg;
	if (scg_alloc(64, &p) != SC_OK)
		return (void *)(intptr_t)-2;
	intptr_t owner = scg_host_owner(p);
	scg_free(p);
	return (void *)owner;
}

/* The host build's emulated GPUs ($SCG_HOST_DEVICES, read at the first call: each test
 * runs in a process of its own): allocations tagged with the thread's current device,
 * kernels refused on another device's memory naming both, copies between devices checked
 * against the ordinals they name, exported memory freed and events recorded on their own
 * device only (an event waited on from any). */
UNIT_TEST(gpu_host_devices)
{
	enum { N = 1000 };
	float *a = NULL, *b = NULL, host[N];
	void *x = NULL, *out = NULL;
	unsigned char handle[SCG_IPC_HANDLE_BYTES];
	int n = 0;
	pthread_t th;

	setenv("SCG_HOST_DEVICES", "3", 1);
	OK(scg_device_count(&n));
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(scg_init(3), SC_ERR_UNSUPPORTED);
	CHECK_MSG(strstr(scg_error(), "no device 3") && strstr(scg_error(), "emulates 3"),
		  "scg_init(3): %s", scg_error());
	OK(scg_init(1));
	OK(scg_alloc(N * sizeof(float), (void **)&a));
	CHECK_EQ_INT(scg_host_owner(a), 1);
	CHECK_EQ_INT(scg_host_owner(a + N - 1), 1);
	CHECK_EQ_INT(scg_host_owner(host), -1);
	for (int i = 0; i < N; i++)
		host[i] = (float)i;
	OK(scg_from_host(a, host, sizeof(host)));
	/* a new thread starts on device 0 */
	CHECK_EQ_INT(pthread_create(&th, NULL, host_owner_of_new, NULL), 0);
	CHECK_EQ_INT(pthread_join(th, &out), 0);
	CHECK_EQ_INT((int)(intptr_t)out, 0);
	OK(scg_init(0));
	OK(scg_alloc(N * sizeof(float), (void **)&b));
	CHECK_EQ_INT(scg_host_owner(b), 0);
	/* a kernel on device 0 reading device 1's memory fails and leaves dst alone */
	CHECK_EQ_INT(scg_reduce_sum(b, a, N), SC_ERR_INVALID);
	CHECK_MSG(strstr(scg_error(), "scg_reduce_sum") && strstr(scg_error(), "device 1") &&
		      strstr(scg_error(), "device 0"),
		  "%s", scg_error());
	CHECK_EQ_INT(scg_reduce_typed(SC_FLOAT32, SC_OP_SUM, b, a, N), SC_ERR_INVALID);
	CHECK_EQ_INT(scg_copy(b, a, N * sizeof(float)), SC_ERR_INVALID);
	CHECK_EQ_INT(scg_coo_add_checked(b, N, (const uint32_t *)a, a, 1, &(uint64_t){0}),
		     SC_ERR_INVALID);
	OK(scg_to_host(host, b, sizeof(host)));
	for (int i = 0; i < N; i++)
		CHECK_TRUE(host[i] == 0.0f);
	/* copied over first, it is summed */
	CHECK_EQ_INT(scg_copy_peer(b, 1, a, 1, N * sizeof(float)), SC_ERR_INVALID);
	CHECK_MSG(strstr(scg_error(), "not of device 1"), "%s", scg_error());
	CHECK_EQ_INT(scg_copy_peer(b, 0, a, 2, N * sizeof(float)), SC_ERR_INVALID);
	OK(scg_copy_peer(b, 0, a, 1, N * sizeof(float)));
	OK(scg_reduce_sum(b, b, N));
	OK(scg_sync());
	OK(scg_to_host(host, b, sizeof(host)));
	for (int i = 0; i < N; i++)
		CHECK_TRUE(host[i] == 2.0f * (float)i);
	OK(scg_stream_follow(1));
	CHECK_EQ_INT(scg_stream_follow(3), SC_ERR_INVALID);
	/* an event of device 2: recorded there only, waited on from any device */
	void *ev = NULL;
	OK(scg_init(2));
	OK(scg_ipc_event_create(&ev, handle));
	CHECK_EQ_INT(scg_host_owner(ev), 2);
	OK(scg_init(0));
	CHECK_EQ_INT(scg_event_record(ev), SC_ERR_INVALID);
	CHECK_MSG(strstr(scg_error(), "scg_event_record") && strstr(scg_error(), "device 2"),
		  "%s", scg_error());
	OK(scg_init(2));
	OK(scg_event_record(ev));
	OK(scg_init(0));
	OK(scg_stream_wait_event(ev));
	OK(scg_init(2));
	OK(scg_ipc_event_destroy(ev));
	CHECK_EQ_INT(scg_host_owner(ev), -1);
	/* exported memory: on device 2, freed there only */
	OK(scg_ipc_alloc(4096, &x, handle));
	CHECK_EQ_INT(scg_host_owner(x), 2);
	OK(scg_init(0));
	CHECK_EQ_INT(scg_ipc_free(x), SC_ERR_INVALID);
	OK(scg_init(2));
	OK(scg_ipc_free(x));
	CHECK_EQ_INT(scg_host_owner(x), -1);
	OK(scg_init(1));
	OK(scg_free(a));
	CHECK_EQ_INT(scg_host_owner(a), -1);
	OK(scg_init(0));
	OK(scg_free(b));
}

/* Exported memory is whole IPC granules (a CUDA IPC handle maps the whole driver
 * allocation): the rounding, and an export of 100 bytes that is 2 MiB of the exporting
 * device's memory, the handle and its shared object saying so. */
UNIT_TEST(gpu_ipc_granularity)
{
	const size_t g = SCG_IPC_GRANULARITY_BYTES;
	unsigned char handle[SCG_IPC_HANDLE_BYTES];
	scg_host_ipc_t h;
	struct stat st;
	char *x = NULL;

	CHECK_TRUE(g == (size_t)2 << 20);
	CHECK_TRUE(scg_ipc_bytes(0) == g);
	CHECK_TRUE(scg_ipc_bytes(1) == g);
	CHECK_TRUE(scg_ipc_bytes(g) == g);
	CHECK_TRUE(scg_ipc_bytes(g + 1) == 2 * g);
	CHECK_TRUE(scg_ipc_bytes(5 * g - 7) == 5 * g);
	CHECK_TRUE(scg_ipc_bytes(SIZE_MAX) == 0);
	CHECK_TRUE(scg_ipc_bytes(SIZE_MAX - g + 2) == 0);
	setenv("SCG_HOST_DEVICES", "2", 1);
	OK(scg_init(1));
	OK(scg_ipc_alloc(100, (void **)&x, handle));
	memcpy(&h, handle, sizeof(h));
	CHECK_TRUE(h.magic == SCG_HOST_IPC_MEM && h.bytes == g);
	CHECK_EQ_INT((int)h.device, 1);
	int fd = shm_open(h.name, O_RDONLY, 0);
	CHECK_TRUE(fd >= 0);
	CHECK_EQ_INT(fstat(fd, &st), 0);
	close(fd);
	CHECK_TRUE((uint64_t)st.st_size == g);
	CHECK_EQ_INT(scg_host_owner(x + g - 1), 1);
	CHECK_EQ_INT(scg_host_owner(x + g), -1);
	OK(scg_ipc_free(x));
	/* and the UUIDs of the emulated devices, which the driver stand-in gives trainers */
	unsigned char u[16], want[16];
	char text[SCD_CUDA_UUID_TEXT];
	OK(scg_device_uuid(1, u));
	scg_host_uuid(1, want);
	CHECK_TRUE(!memcmp(u, want, 16));
	CHECK_EQ_INT(scg_device_uuid(2, u), SC_ERR_INVALID);
	CHECK_MSG(
	    !strcmp(scd_cuda_uuid_text(u, text), "GPU-53434748-0000-0000-0000-000000000001"),
	    "%s", text);
}

/* On a machine without a GPU (or without the library) the cuda slot says so, with a
 * reason, the same every time. */
UNIT_TEST(gpu_device_cuda_unavailable)
{
	const scd_device_ops_t *ops = NULL;
	sc_status_t st = scd_device_get(SCD_DEVICE_CUDA, &ops);
	const char *why = scd_cuda_unavailable_reason();
	printf("        cuda: %s\n", st == SC_OK ? "available" : why);
	if (st == SC_OK) {
		/* a machine with a GPU and every op built */
		CHECK_TRUE(ops && !strcmp(ops->name, "cuda"));
		return;
	}
	CHECK_EQ_INT(st, SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL && why[0] != '\0');
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CUDA, &ops), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL);
	OK(scd_device_get(SCD_DEVICE_CPU, &ops));
	CHECK_TRUE(ops == &scd_device_cpu_ops);
}

UNIT_TEST(gpu_device_cuda_no_library)
{
	setenv("SPARSECOMM_CUDA_LIB", "/nonexistent/libsparsecomm-cuda.so", 1);
	const scd_device_ops_t *ops = NULL;
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CUDA, &ops), SC_ERR_UNSUPPORTED);
	const char *why = scd_cuda_unavailable_reason();
	CHECK_MSG(strstr(why, "cannot load /nonexistent/libsparsecomm-cuda.so"), "reason: %s",
		  why);
}

static int bin_dir(char *dir, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
	if (n <= 0)
		return 0;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	return 1;
}

/* The GPU library built next to this runner exports every function the daemon looks up,
 * and they fill the whole table: the device the daemon loads is complete (the driver's
 * absence here stops the load only later, at scg_init). */
UNIT_TEST(gpu_library_has_every_op)
{
	char dir[4096], path[4200];
	CHECK_TRUE(bin_dir(dir, sizeof dir));
	snprintf(path, sizeof path, "%s/../lib/libsparsecomm-cuda.so", dir);
	if (access(path, R_OK) != 0)
		unit_skip("%s is not built (no nvcc)", path);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		unit_skip("cannot load %s here: %s", path, dlerror());
	scd_cuda_fns_t f;
	scd_cuda_fns_resolve(lib, &f);
	CHECK_TRUE(f.error && f.init && f.backend && !strcmp(f.backend(), "cuda"));
	/* and what sharing with trainers needs (scd_cuda_ipc_get) */
	CHECK_TRUE(f.device_uuid && f.device_count && f.ipc_alloc && f.ipc_free &&
		   f.ipc_event_create && f.event_record && f.stream_wait_event);
	scd_device_ops_t ops;
	char missing[1024];
	unsigned n = scd_cuda_ops_fill(&f, &ops, missing, sizeof missing);
	CHECK_MSG(n == 0, "%s lacks %u ops: %s", path, n, missing);
	dlclose(lib);
}

/* Nothing CUDA-related is linked into the daemon, and it starts without a GPU driver:
 * sparsecommd (next to this runner) reaches "ready" as a world of one. */

static int daemon_ready(const char *path, int *status_p);

UNIT_TEST_TIMEOUT(gpu_daemon_starts_without_cuda, 30)
{
	char dir[4096], path[4200], cmd[4300], line[512];
	CHECK_TRUE(bin_dir(dir, sizeof dir));
	snprintf(path, sizeof path, "%s/sparsecommd", dir);
	if (access(path, X_OK) != 0)
		unit_skip("%s is not built", path);
	/* its dynamic dependencies */
	snprintf(cmd, sizeof cmd, "readelf -d '%s' 2>/dev/null", path);
	FILE *p = popen(cmd, "r");
	CHECK_TRUE(p);
	int needed = 0;
	while (fgets(line, sizeof line, p)) {
		if (!strstr(line, "(NEEDED)"))
			continue;
		needed++;
		CHECK_MSG(!strstr(line, "cuda") && !strstr(line, "nvidia") &&
			      !strstr(line, "nccl"),
			  "sparsecommd needs %s", line);
	}
	pclose(p);
	if (!needed)
		printf("        (readelf unavailable: dependencies not checked)\n");

	/* it starts: READY=1 on its notify fd; a coordinator port that another process took
	 * meanwhile (exit status 1) is tried again with another */
	int ready = 0, status = 0;
	for (int attempt = 0; attempt < 3 && !ready; attempt++)
		ready = daemon_ready(path, &status);
	CHECK_MSG(ready, "sparsecommd did not report ready (status %d)", status);
}

/* Starts sparsecommd (path) alone and waits for its READY=1; *status_p its exit status. */
static int daemon_ready(const char *path, int *status_p)
{
	char rundir[] = "/tmp/sc-gpu-unit.XXXXXX", cmd[4300];
	CHECK_TRUE(mkdtemp(rundir));
	int fd[2];
	CHECK_TRUE(pipe(fd) == 0);
	int port = sc_port_pick();
	CHECK_TRUE(port > 0);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		char nfd[16], coord[64];
		snprintf(nfd, sizeof nfd, "%d", fd[1]);
		snprintf(coord, sizeof coord, "127.0.0.1:%d", port);
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		unsetenv("SPARSECOMM_CONFIG");
		setenv("CUDA_VISIBLE_DEVICES", "", 1);
		execl(path, path, "--runtime_dir", rundir, "--coordinator", coord,
		      "--notify-fd", nfd, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	struct pollfd pfd = {.fd = fd[0], .events = POLLIN};
	char got[32] = {0};
	int ready = 0;
	if (poll(&pfd, 1, 20000) == 1 && read(fd[0], got, sizeof got - 1) > 0)
		ready = strstr(got, "READY=1") != NULL;
	close(fd[0]);
	kill(pid, SIGTERM);
	while (waitpid(pid, status_p, 0) < 0 && errno == EINTR)
		;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", rundir);
	if (system(cmd) != 0)
		printf("        could not remove %s\n", rundir);
	return ready;
}
#endif
