/*
 * itest_sums.c: correctness of the lossless dense path through real daemons.
 *
 * sums: tensors of 1, a count not divisible by the number of trainers, 1000, 1000003 and
 * (--big) 16M float32 elements (64 MiB), plus float64 and int32 where the daemon takes
 * them, are reduced with SUM and AVERAGE over several iterations that reuse the same
 * registrations; every element is compared with the exact result.
 * fusion: hundreds of small tensors registered and submitted in a rank-dependent order,
 * mixing SUM and AVERAGE, so the daemons must agree on readiness and fusion boundaries
 * by name rather than by arrival order.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUMS_MAX_SIZES 8

/* Integers can only be averaged exactly when the sum is a multiple of the trainer
 * count, so their AVERAGE input is scaled by it; floats test a real division. */
static int avg_scale(sc_dtype_t dtype, int size)
{
	return (dtype == SC_INT32 || dtype == SC_INT64) ? size : 1;
}

/* Waits for every handle in hs (ignoring results): used to drain before skipping. */
static void drain(sc_client_t *c, sc_handle_t *hs, int n)
{
	for (int i = 0; i < n; i++)
		if (hs[i])
			(void)it_wait(c, hs[i], IT_ERROR_TIMEOUT_MS);
}

/* Runs the SUM/AVERAGE iterations of one dtype over the given sizes. Returns 0 when the
 * daemon does not support the dtype (only allowed for dtypes other than float32). */
static int sums_dtype(sc_client_t *c, sc_dtype_t dtype, const size_t *sizes, int n_sizes,
		      int iters)
{
	sc_tensor_t *t[SUMS_MAX_SIZES];
	sc_handle_t h[SUMS_MAX_SIZES];
	int size = sc_size(c), rank = sc_rank(c);
	char name[128], why[1024];
	for (int s = 0; s < n_sizes; s++) {
		snprintf(name, sizeof(name), "sums.%s.%zu", sc_dtype_name(dtype), sizes[s]);
		sc_status_t st = sc_register(c, name, dtype, sizes[s], &t[s]);
		if (st == SC_ERR_UNSUPPORTED && dtype != SC_FLOAT32) {
			it_log("%s is not supported by the daemon (register: %s); skipped",
			       sc_dtype_name(dtype), sc_last_error());
			return 0;
		}
		IT_CHECK_SC(st, "sc_register('%s', %s, %zu)", name, sc_dtype_name(dtype),
			    sizes[s]);
		if (sc_tensor_numel(t[s]) != sizes[s])
			IT_FAIL("tensor '%s' has numel %zu, registered %zu", name,
				sc_tensor_numel(t[s]), sizes[s]);
	}
	double t0 = it_now_s(), bytes = 0;
	for (int it = 0; it < iters; it++) {
		for (int pass = 0; pass < 2; pass++) {
			sc_reduce_op_t op = pass ? SC_OP_AVERAGE : SC_OP_SUM;
			int scale = pass ? avg_scale(dtype, size) : 1;
			uint64_t seed = (uint64_t)it * 2 + (uint64_t)pass + 1;
			memset(h, 0, sizeof(h));
			for (int s = 0; s < n_sizes; s++) {
				it_fill(sc_tensor_data(t[s]), dtype, sizes[s], seed, rank,
					scale);
				sc_status_t st = sc_allreduce_async(c, t[s], op, &h[s]);
				if (st == SC_ERR_UNSUPPORTED && dtype != SC_FLOAT32) {
					it_log("%s is not supported by the daemon (allreduce: "
					       "%s); "
					       "skipped",
					       sc_dtype_name(dtype), sc_last_error());
					drain(c, h, s);
					return 0;
				}
				IT_CHECK_SC(st, "sc_allreduce_async('%s', %s), iteration %d",
					    sc_tensor_name(t[s]), pass ? "AVERAGE" : "SUM", it);
				if (h[s] == 0)
					IT_FAIL("sc_allreduce_async('%s') returned handle 0",
						sc_tensor_name(t[s]));
			}
			for (int s = 0; s < n_sizes; s++) {
				int r = it_wait(c, h[s], IT_OP_TIMEOUT_MS);
				h[s] = 0;
				if (r == SC_ERR_UNSUPPORTED && dtype != SC_FLOAT32) {
					it_log("%s is not supported by the daemon (completion: "
					       "%s); "
					       "skipped",
					       sc_dtype_name(dtype), it_wait_error());
					drain(c, h, n_sizes);
					return 0;
				}
				if (r != SC_OK)
					IT_FAIL("allreduce %s of '%s' (%zu elements), "
						"iteration %d: "
						"%s: %s",
						pass ? "AVERAGE" : "SUM", sc_tensor_name(t[s]),
						sizes[s], it, it_wait_name(r), it_wait_error());
			}
			for (int s = 0; s < n_sizes; s++) {
				size_t wrong =
				    it_check(sc_tensor_data(t[s]), dtype, sizes[s], seed, size,
					     scale, op, why, sizeof(why));
				if (wrong)
					IT_FAIL(
					    "%s of '%s' over %d trainers, iteration %d: %zu of "
					    "%zu elements wrong: %s",
					    pass ? "AVERAGE" : "SUM", sc_tensor_name(t[s]),
					    size, it, wrong, sizes[s], why);
				bytes += (double)sizes[s] * (double)sc_dtype_size(dtype);
			}
		}
	}
	double dt = it_now_s() - t0;
	it_log("%s: %d sizes x %d iterations x {SUM, AVERAGE} exact (%.1f MB in %.2f s)",
	       sc_dtype_name(dtype), n_sizes, iters, bytes / 1e6, dt);
	return 1;
}

int it_sums(int argc, char **argv)
{
	int small = strcmp(argv[0], "sums-small") == 0, big = 0, iters = 3;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--big") == 0)
			big = 1;
		else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
			iters = atoi(argv[++i]);
		else
			IT_FAIL("unknown option '%s'", argv[i]);
	}
	sc_client_t *c = it_connect();
	int size = sc_size(c);
	/* A count no trainer count divides evenly: P - 1 when that is at least 2, else 3. */
	size_t odd = size >= 3 ? (size_t)size - 1 : 3;
	size_t sizes[SUMS_MAX_SIZES] = {1, odd, 1000};
	int n = 3;
	if (!small)
		sizes[n++] = 1000003;
	if (big)
		sizes[n++] = (size_t)16 << 20; /* 64 MiB of float32 */
	sums_dtype(c, SC_FLOAT32, sizes, n, big ? 2 : iters);
	/* The other dtypes skip the 64 MiB case: it adds time, not coverage. */
	int n_other = big ? n - 1 : n;
	int ok64 = sums_dtype(c, SC_FLOAT64, sizes, n_other, iters);
	int ok32 = sums_dtype(c, SC_INT32, sizes, n_other, iters);
	it_log("float32 exact%s%s", ok64 ? ", float64 exact" : ", float64 unsupported",
	       ok32 ? ", int32 exact" : ", int32 unsupported");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Element count of fusion tensor k: mostly small and varied, some single elements, a
 * few larger ones that cross typical fusion thresholds. */
static size_t fusion_numel(int k)
{
	if (k % 10 == 0)
		return 1;
	if (k % 50 == 7)
		return 20000 + (size_t)k;
	return 1 + ((size_t)k * 7919u) % 3000u;
}

/* The rank-dependent position -> tensor order: a stride coprime to n and an offset. */
static int fusion_order(int pos, int n, int rank)
{
	static const int strides[] = {1, 7, 11, 13, 17, 19, 23, 29};
	int stride = strides[rank % 8];
	int a = n, b = stride;
	while (b) {
		int r = a % b;
		a = b;
		b = r;
	}
	if (a != 1)
		stride = 1;
	int k = (int)(((long)pos * stride + (long)rank * 101) % n);
	return rank % 2 ? n - 1 - k : k;
}

int it_fusion(int argc, char **argv)
{
	int n = 300, steps = 4;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--tensors") == 0 && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else
			IT_FAIL("unknown option '%s'", argv[i]);
	}
	if (n < 1 || steps < 1)
		IT_FAIL("--tensors and --steps must be positive");
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	sc_tensor_t **t = calloc((size_t)n, sizeof(*t));
	sc_handle_t *h = calloc((size_t)n, sizeof(*h));
	int *order = calloc((size_t)n, sizeof(*order));
	char *seen = calloc((size_t)n, 1);
	if (!t || !h || !order || !seen)
		IT_FAIL("out of memory");
	for (int pos = 0; pos < n; pos++) {
		order[pos] = fusion_order(pos, n, rank);
		if (seen[order[pos]]++)
			IT_FAIL("internal: fusion order is not a permutation");
	}
	/* Registration too happens in the rank's own order. */
	for (int pos = 0; pos < n; pos++) {
		int k = order[pos];
		char name[64];
		snprintf(name, sizeof(name), "fusion.%03d", k);
		t[k] = it_register(c, name, SC_FLOAT32, fusion_numel(k));
	}
	double t0 = it_now_s();
	char why[1024];
	for (int step = 0; step < steps; step++) {
		for (int pos = 0; pos < n; pos++) {
			int k = order[pos];
			sc_reduce_op_t op = k % 3 == 0 ? SC_OP_AVERAGE : SC_OP_SUM;
			int scale = op == SC_OP_AVERAGE ? size : 1;
			it_fill(sc_tensor_data(t[k]), SC_FLOAT32, fusion_numel(k),
				(uint64_t)step * 1000u + (uint64_t)k, rank, scale);
			IT_CHECK_SC(sc_allreduce_async(c, t[k], op, &h[k]),
				    "step %d: sc_allreduce_async('%s')", step,
				    sc_tensor_name(t[k]));
		}
		for (int pos = n - 1; pos >= 0; pos--) {
			int k = order[pos];
			int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("step %d: allreduce of '%s' (%zu elements): %s: %s",
					step, sc_tensor_name(t[k]), fusion_numel(k),
					it_wait_name(r), it_wait_error());
		}
		for (int k = 0; k < n; k++) {
			sc_reduce_op_t op = k % 3 == 0 ? SC_OP_AVERAGE : SC_OP_SUM;
			int scale = op == SC_OP_AVERAGE ? size : 1;
			/* Scaled AVERAGE inputs make the average an exact integer. */
			size_t wrong =
			    it_check(sc_tensor_data(t[k]), SC_FLOAT32, fusion_numel(k),
				     (uint64_t)step * 1000u + (uint64_t)k, size, scale, op, why,
				     sizeof(why));
			if (wrong)
				IT_FAIL(
				    "step %d: %s of '%s' over %d trainers: %zu of %zu elements "
				    "wrong: %s",
				    step, op == SC_OP_SUM ? "SUM" : "AVERAGE",
				    sc_tensor_name(t[k]), size, wrong, fusion_numel(k), why);
		}
	}
	it_log("%d tensors x %d steps exact in %.2f s", n, steps, it_now_s() - t0);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	free(t);
	free(h);
	free(order);
	free(seen);
	it_pass();
}

/*
 * many-names: 600 tensors submitted at once, twice: the coordinator's first plans carry
 * hundreds of new cache entries, so the response cache grows (and may move) while a plan
 * is built; every sum exact. (A plan once pointed into the cache it was growing.)
 */
int it_many_names(int argc, char **argv)
{
	enum { N = 600, E = 4 };
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	static sc_tensor_t *t[N];
	static sc_handle_t h[N];
	char name[32], why[256];
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "many.%03d", k);
		t[k] = it_register(c, name, SC_FLOAT32, E);
	}
	for (int step = 0; step < 2; step++) {
		for (int k = 0; k < N; k++) {
			it_fill(sc_tensor_data(t[k]), SC_FLOAT32, E, (uint64_t)(k + step), rank,
				1);
			IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "many.%03d",
				    k);
		}
		for (int k = 0; k < N; k++) {
			int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("many.%03d step %d: %s: %s", k, step, it_wait_name(r),
					it_wait_error());
			if (it_check(sc_tensor_data(t[k]), SC_FLOAT32, E, (uint64_t)(k + step),
				     size, 1, SC_OP_SUM, why, sizeof(why)))
				IT_FAIL("many.%03d step %d: wrong sum: %s", k, step, why);
		}
	}
	it_log("%d tensors submitted at once, twice: exact", N);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
