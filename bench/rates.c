/*
 * rates.c: `sparsecomm-bench rates`: the rates of the cost model's compute terms
 * (model/cost.h) on this host, measured with the daemons' own cpu device ops on the zipf
 * workload's lists (the collective benchmark's inputs, bench/workload.h):
 *   scatter  coo_scatter of the union of the P ranks' lists into a dense result: a
 *            non-zero of a final aggregate written into the dense result (Hierarchical
 *            Centralization's last step, Balanced Parallelism's decode of the pull);
 *   sum      coo_scatter_add of every rank's list, in rank order, into a dense result:
 *            a received non-zero added into an aggregate (AGsparse's sum of the P lists,
 *            Balanced Parallelism's servers' sum of the pushes);
 *   dense    reduce_sum of one dense buffer of --numel elements into another, streamed: an
 *            element added by the dense ring's reduce-scatter (the transport's ring sums
 *            through the same op, device/reduce.h) or an element of a block OmniReduce's
 *            server adds.
 * Each is the median over --reps runs of one core's time per non-zero (dense: per
 * element), the result cleared (and not timed) before each run. The daemons' defaults
 * (SCD_COST_SCATTER_S_PER_NNZ, SCD_COST_SUM_S_PER_NNZ, SCD_COST_DENSE_SUM_S_PER_ELEM) were
 * taken from this on the machines of docs/performance.md.
 *
 *   sparsecomm-bench rates [--numel N] [--density D] [--ranks P] [--reps R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "device/device.h"
#include "util.h"
#include "util/clock.h"
#include "workload.h"

typedef struct rates_opts {
	uint64_t numel;
	double density;
	int P, reps;
} rates_opts_t;

static int rates_usage(void)
{
	fprintf(stderr, "usage: sparsecomm-bench rates [--numel N] [--density D] [--ranks P] "
			"[--reps R]\n"
			"  defaults: 67108864 elements, 0.01, 4 ranks, 5 runs\n");
	return 2;
}

static int rates_parse(int argc, char **argv, rates_opts_t *o)
{
	*o = (rates_opts_t){.numel = 1ull << 26, .density = 0.01, .P = 4, .reps = 5};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return -1;
		if (!strcmp(a, "--numel"))
			o->numel = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--density"))
			o->density = strtod(v, NULL);
		else if (!strcmp(a, "--ranks"))
			o->P = atoi(v);
		else if (!strcmp(a, "--reps"))
			o->reps = atoi(v);
		else
			return -1;
		i++;
	}
	int ok = o->numel >= 1024 && o->numel < (1ull << 32) && o->density > 0 &&
		 o->density <= 0.5 && o->P >= 1 && o->P <= 64 && o->reps >= 1 && o->reps <= 101;
	return ok ? 0 : -1;
}

/* The median of the reps' seconds per non-zero of op on the lists, dst cleared before
 * each run. */
static double rates_time(const rates_opts_t *o, float *dst, const scd_coo_t *lists, int n,
			 void (*op)(float *, const scd_coo_t *))
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	double *t = calloc((size_t)o->reps, sizeof(*t));
	uint64_t nnz = 0;
	for (int q = 0; q < n; q++)
		nnz += lists[q].nnz;
	if (!t || !nnz) {
		free(t);
		return -1;
	}
	for (int r = 0; r < o->reps; r++) {
		dev->clear(dst, 4 * o->numel);
		double t0 = scd_now_s();
		for (int q = 0; q < n; q++)
			op(dst, &lists[q]);
		t[r] = (scd_now_s() - t0) / (double)nnz;
	}
	qsort(t, (size_t)o->reps, sizeof(*t), bench_cmp_double);
	double med = t[o->reps / 2];
	free(t);
	return med;
}

/* The median of the reps' seconds per element of a dense sum of numel elements, dst +=
 * src (src: the first rank's list scattered, so that both are touched as the ring's are). */
static double rates_dense(const rates_opts_t *o, float *dst, const scd_coo_t *list)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	double *t = calloc((size_t)o->reps, sizeof(*t));
	float *src = malloc(4 * o->numel);
	double med = -1;
	if (t && src) {
		dev->clear(src, 4 * o->numel);
		dev->coo_scatter(src, list);
		for (int r = 0; r < o->reps; r++) {
			dev->clear(dst, 4 * o->numel);
			double t0 = scd_now_s();
			dev->reduce_sum(dst, src, o->numel);
			t[r] = (scd_now_s() - t0) / (double)o->numel;
		}
		qsort(t, (size_t)o->reps, sizeof(*t), bench_cmp_double);
		med = t[o->reps / 2];
	}
	free(t);
	free(src);
	return med;
}

/* The union of the P lists, from their sum (dst, dense): its non-zeros ascending. */
static int rates_union(const rates_opts_t *o, float *dst, const scd_coo_t *lists, scd_coo_t *u)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	dev->clear(dst, 4 * o->numel);
	uint64_t cap = 0;
	for (int q = 0; q < o->P; q++) {
		for (uint64_t i = 0; i < lists[q].nnz;
		     i++) /* only the indices: no cancelling */
			dst[lists[q].idx[i]] = 1;
		cap += lists[q].nnz;
	}
	u->idx = malloc(4 * cap + 4);
	u->val = malloc(4 * cap + 4);
	if (!u->idx || !u->val)
		return -1;
	u->nnz = dev->dense_to_coo(dst, o->numel, u->idx, u->val);
	u->cap = cap;
	return 0;
}

BENCH_COMMAND(rates, "the cost model's compute rates on this host (scatter, sum, dense sum)")
{
	rates_opts_t o;
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
		return rates_usage(), 0;
	if (rates_parse(argc, argv, &o) != 0)
		return rates_usage();
	wl_cfg_t w = {.kind = WL_ZIPF,
		      .numel = o.numel,
		      .density = o.density,
		      .seed = 1,
		      .P = o.P,
		      .zipf_s = 1.2,
		      .overlap = 0.3};
	uint64_t cap = wl_coo_cap(&w);
	scd_coo_t *lists = calloc((size_t)o.P, sizeof(*lists)), u = {0};
	float *dst = malloc(4 * o.numel);
	wl_scratch_t scr = {0};
	int rc = 1;
	if (!lists || !dst)
		goto out;
	for (int q = 0; q < o.P; q++) {
		lists[q].idx = malloc(4 * cap);
		lists[q].val = malloc(4 * cap);
		int64_t k = lists[q].idx && lists[q].val
				? wl_coo(&w, q, 0, lists[q].idx, lists[q].val, cap, &scr)
				: -1;
		if (k < 0)
			goto out;
		lists[q].nnz = lists[q].cap = (uint64_t)k;
	}
	if (rates_union(&o, dst, lists, &u) != 0)
		goto out;
	double sum = rates_time(&o, dst, lists, o.P, scd_device_cpu_ops.coo_scatter_add);
	double scatter = rates_time(&o, dst, &u, 1, scd_device_cpu_ops.coo_scatter);
	double dense = rates_dense(&o, dst, &lists[0]);
	if (sum < 0 || scatter < 0 || dense < 0)
		goto out;
	printf("# zipf, %llu elements, density %g, %d ranks: %llu non-zeros a rank, union "
	       "%llu; median of %d runs, one core\n",
	       (unsigned long long)o.numel, o.density, o.P, (unsigned long long)lists[0].nnz,
	       (unsigned long long)u.nnz, o.reps);
	printf("scatter_ns %.2f\nsum_ns %.2f\ndense_sum_ns %.3f\n", scatter * 1e9, sum * 1e9,
	       dense * 1e9);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "sparsecomm-bench rates: out of memory\n");
	for (int q = 0; lists && q < o.P; q++) {
		free(lists[q].idx);
		free(lists[q].val);
	}
	free(lists);
	free(u.idx);
	free(u.val);
	free(dst);
	wl_scratch_free(&scr);
	return rc;
}
