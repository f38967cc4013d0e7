/*
 * itest_adasum.c: the Adasum reduction (SC_OP_ADASUM) through real daemons.
 *
 * Every trainer's float32 and float64 tensors (1, 7 and 100003 elements, each trainer's
 * its own values) against a reference tree computed here from every trainer's values, as
 * the definition reads (the tree of the first h leaves, h the largest power of two below
 * the count, and the tree of the rest); every rank's result bit for bit the same (their
 * min and max over the ranks agree); orthogonal leaves give their sum and identical ones
 * the vector, exactly; integer, top-k and reduce-scatter requests refused naming the
 * tensor, and the next operation works. With the arguments cuda LOG, the reference steps
 * run on cuda tensors (the driver stand-in and the daemons' host GPU build, on GPU local
 * rank % $SCG_HOST_DEVICES: a source off the engine's GPU is copied over, and the blocks
 * are staged through host memory for the exchange and the tree).
 */
#include "itest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../adasum_ref.h"

/* Trainer r's element i: deterministic, both signs, different directions per trainer. */
static double ad_value(int r, size_t i)
{
	uint64_t h =
	    (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)i * 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 31;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 29;
	return (double)(h % 2001) / 500.0 - 2.0;
}

static double ad_get(const void *x, sc_dtype_t dt, size_t i)
{
	return dt == SC_FLOAT32 ? ((const float *)x)[i] : ((const double *)x)[i];
}

static void ad_set(void *x, sc_dtype_t dt, size_t i, double v)
{
	if (dt == SC_FLOAT32)
		((float *)x)[i] = (float)v;
	else
		((double *)x)[i] = v;
}

static void ad_run(sc_client_t *c, sc_tensor_t *t)
{
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_ADASUM, &h),
		    "sc_allreduce_async('%s', adasum)", sc_tensor_name(t));
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("adasum of '%s': %s: %s", sc_tensor_name(t), it_wait_name(r),
			it_wait_error());
}

/* Every rank holds the same bits: the ranks' min and max of the result (as float64, which
 * float32 widens to exactly) equal this rank's. */
static void ad_same_bits(sc_client_t *c, sc_tensor_t *t, sc_tensor_t *lo, sc_tensor_t *hi)
{
	size_t n = sc_tensor_numel(t);
	sc_dtype_t dt = sc_tensor_dtype(t);
	for (size_t i = 0; i < n; i++)
		((double *)sc_tensor_data(lo))[i] = ((double *)sc_tensor_data(hi))[i] =
		    ad_get(sc_tensor_data(t), dt, i);
	sc_handle_t h1 = 0, h2 = 0;
	IT_CHECK_SC(sc_allreduce_async(c, lo, SC_OP_MIN, &h1), "min of the results");
	IT_CHECK_SC(sc_allreduce_async(c, hi, SC_OP_MAX, &h2), "max of the results");
	if (it_wait(c, h1, IT_OP_TIMEOUT_MS) != SC_OK ||
	    it_wait(c, h2, IT_OP_TIMEOUT_MS) != SC_OK)
		IT_FAIL("min/max of the adasum results of '%s': %s", sc_tensor_name(t),
			it_wait_error());
	for (size_t i = 0; i < n; i++) {
		double me = ad_get(sc_tensor_data(t), dt, i);
		double a = ((double *)sc_tensor_data(lo))[i],
		       b = ((double *)sc_tensor_data(hi))[i];
		if (a != me || b != me)
			IT_FAIL(
			    "adasum of '%s': the ranks differ at [%zu]: min %.17g, max %.17g, "
			    "rank %d %.17g",
			    sc_tensor_name(t), i, a, b, sc_rank(c), me);
	}
}

/* A tensor of the reference steps: cpu, or cuda (the stand-in maps it to the host, so
 * the test writes and reads it directly). */
static sc_tensor_t *ad_register(sc_client_t *c, const char *name, sc_dtype_t dt, size_t n,
				int cuda)
{
	if (!cuda)
		return it_register(c, name, dt, n);
	const char *g = getenv("SCG_HOST_DEVICES");
	int gpus = g && atoi(g) > 1 ? atoi(g) : 1;
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .device = SC_DEVICE_CUDA,
			      .device_ordinal = sc_local_rank(c) % gpus};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, dt, n, &o, &t), "sc_register_ex('%s', cuda:%d)",
		    name, o.device_ordinal);
	return t;
}

/* Random-looking leaves of both float dtypes and three sizes, twice each. */
static void ad_reference(sc_client_t *c, int cuda)
{
	static const sc_dtype_t dts[] = {SC_FLOAT32, SC_FLOAT64};
	static const size_t sizes[] = {1, 7, 100003};
	int P = sc_size(c), rank = sc_rank(c);
	for (size_t d = 0; d < 2; d++)
		for (size_t s = 0; s < 3; s++) {
			size_t n = sizes[s];
			char name[64];
			snprintf(name, sizeof(name), "adasum.%s.%zu", sc_dtype_name(dts[d]), n);
			sc_tensor_t *t = ad_register(c, name, dts[d], n, cuda);
			snprintf(name, sizeof(name), "adasum.lo.%zu.%zu", d, n);
			sc_tensor_t *lo = it_register(c, name, SC_FLOAT64, n);
			snprintf(name, sizeof(name), "adasum.hi.%zu.%zu", d, n);
			sc_tensor_t *hi = it_register(c, name, SC_FLOAT64, n);
			double *ref = malloc(sizeof(double) * n * (size_t)P);
			if (!ref)
				IT_FAIL("out of memory");
			for (int r = 0; r < P; r++) /* the leaves as the trainers give them */
				for (size_t i = 0; i < n; i++) {
					float f = (float)ad_value(r, i);
					ref[(size_t)r * n + i] =
					    dts[d] == SC_FLOAT32 ? (double)f : ad_value(r, i);
				}
			ref_tree(ref, P, n);
			double tol = dts[d] == SC_FLOAT32 ? 1e-5 : 1e-12;
			for (int step = 0; step < 2; step++) {
				for (size_t i = 0; i < n; i++)
					ad_set(sc_tensor_data(t), dts[d], i, ad_value(rank, i));
				ad_run(c, t);
				for (size_t i = 0; i < n; i++) {
					double g = ad_get(sc_tensor_data(t), dts[d], i);
					if (!(fabs(g - ref[i]) <= tol * (1 + fabs(ref[i]))))
						IT_FAIL("adasum of '%s' over %d trainers, step "
							"%d: [%zu] "
							"= %.17g, expected %.17g",
							sc_tensor_name(t), P, step, i, g,
							ref[i]);
				}
				ad_same_bits(c, t, lo, hi);
			}
			free(ref);
		}
	it_log("adasum of %s float32, float64 x 1, 7, 100003 over %d trainers: the reference "
	       "tree's values, the same bits on every rank",
	       cuda ? "cuda" : "cpu", P);
}

/* Orthogonal leaves (trainer r's element r) add up; identical ones give the vector. */
static void ad_exact(sc_client_t *c)
{
	int P = sc_size(c), rank = sc_rank(c);
	sc_tensor_t *t = it_register(c, "adasum.exact", SC_FLOAT64, (size_t)P + 1);
	double *x = sc_tensor_data(t);
	memset(x, 0, sizeof(double) * ((size_t)P + 1));
	x[rank] = rank + 1.5;
	ad_run(c, t);
	for (int i = 0; i <= P; i++)
		if (x[i] != (i < P ? i + 1.5 : 0))
			IT_FAIL("adasum of orthogonal leaves: [%d] = %.17g, expected %.17g", i,
				x[i], i < P ? i + 1.5 : 0.0);
	for (int i = 0; i <= P; i++)
		x[i] = 0.25 * i - 1;
	ad_run(c, t);
	for (int i = 0; i <= P; i++)
		if (x[i] != 0.25 * i - 1)
			IT_FAIL("adasum of identical leaves: [%d] = %.17g, expected %.17g", i,
				x[i], 0.25 * i - 1);
	it_log("adasum: orthogonal leaves sum, identical leaves give the vector, exactly");
}

static void ad_expect(sc_client_t *c, sc_tensor_t *t, sc_status_t want, int rs)
{
	sc_handle_t h = 0;
	sc_status_t st = rs ? sc_reducescatter_async(c, t, SC_OP_ADASUM, 1, &h)
			    : sc_allreduce_async(c, t, SC_OP_ADASUM, &h);
	const char *msg = sc_last_error();
	int r = st;
	if (st == SC_OK) {
		r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		msg = it_wait_error();
	}
	if (r != (int)want || !strstr(msg, sc_tensor_name(t)) || !strstr(msg, "adasum"))
		IT_FAIL(
		    "adasum of '%s': expected %s naming the tensor and adasum, got %s ('%s')",
		    sc_tensor_name(t), sc_status_name(want), it_wait_name(r), msg);
	it_log("refused: %s", msg);
}

static void ad_refused(sc_client_t *c)
{
	sc_tensor_t *i = it_register(c, "adasum.int32", SC_INT32, 8);
	ad_expect(c, i, SC_ERR_UNSUPPORTED, 0);
	sc_tensor_t *k = it_register_topk(c, "adasum.topk", 1000);
	it_fill(sc_tensor_data(k), SC_FLOAT32, 1000, 3, sc_rank(c), 1);
	ad_expect(c, k, SC_ERR_UNSUPPORTED, 0);
	sc_tensor_t *f = it_register(c, "adasum.rs", SC_FLOAT32, 8);
	ad_expect(c, f, SC_ERR_INVALID, 1);
	/* the same tensors work again */
	it_fill(sc_tensor_data(k), SC_FLOAT32, 1000, 3, sc_rank(c), 1);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, k, SC_OP_SUM, &h), "sum after the refusals");
	if (it_wait(c, h, IT_OP_TIMEOUT_MS) != SC_OK)
		IT_FAIL("sum of '%s' after the refusals: %s", sc_tensor_name(k),
			it_wait_error());
	ad_run(c, f);
}

int it_adasum(int argc, char **argv)
{
	int cuda = argc > 1 && !strcmp(argv[1], "cuda");
	if (cuda)
		it_cuda_stand_in(argc - 1, argv + 1);
	sc_client_t *c = it_connect();
	ad_reference(c, cuda);
	ad_exact(c);
	ad_refused(c);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
