/*
 * compress.c: `sparsecomm-bench compress`: throughput of the cpu device's sparsifiers,
 * hashing, encoders and sketch on one tensor, side by side with single-core memcpy measured in
 * the same run (absolute bandwidth drifts 2x between runs here; ratios do not,
 * docs/performance.md).
 *
 *   sparsecomm-bench compress --numel N --density D [--threads T] [--parts P] [--reps R]
 *                             [--json]
 *
 * bytes_per_s counts the dense input bytes an op scans (4 numel), elements_per_s numel.
 * Each op runs once untimed (warm-up: workspaces, page faults), then R times; the best
 * run is reported (the same policy as memcpy's). memcpy (4 numel bytes, one core) is
 * timed R times at the start and once more before every timed run of every op; its best
 * over the whole run is the baseline of every ratio. Sparsifiers run with error feedback on
 * a dense gradient (residual reset between runs, untimed); hashing, formats and the
 * sketch run on a naturally sparse tensor of density D. hash_bitmap_encode is the pull's
 * encode over all P partitions from their local (partition-ordered) values: what the P
 * servers do together, one pass over numel elements.
 */
#include "bench.h"

#include "compress_common.h"
#include "device/device.h"

#include <math.h>

typedef struct ctx {
	uint64_t n, k;
	double density;
	unsigned threads;
	uint32_t parts;
	float *grad, *res, *sparse, *local, *dst, *sketch;
	scd_coo_t out;
	uint64_t *offset;
	void *buf;
	uint64_t buf_bytes;
	float threshold;
	scd_sparsifier_t *sp[SCD_SPARSIFY_COUNT];
	scd_exdyna_t *ex;
	scd_hh_t *hh;
	scd_hh_stats_t hh_stats;
	const scd_partmap_t *map;
	scd_sketch_cfg_t sk;
	uint64_t step, last_nnz;
} ctx_t;

typedef struct {
	const char *name;
	void (*prep)(ctx_t *c); /* untimed, before each run */
	void (*run)(ctx_t *c);
} op_t;

static void prep_residual(ctx_t *c)
{
	memset(c->res, 0, c->n * 4);
}

static void prep_none(ctx_t *c)
{
	(void)c;
}

static void run_sparsify(ctx_t *c, scd_sparsify_kind_t kind)
{
	c->out.nnz = 0;
	if (scd_sparsify(c->sp[kind], c->grad, c->res, c->n, &c->out, NULL) != SC_OK)
		exit(1);
	c->last_nnz = c->out.nnz;
}

static void run_threshold(ctx_t *c)
{
	run_sparsify(c, SCD_SPARSIFY_THRESHOLD);
}
static void run_topk(ctx_t *c)
{
	run_sparsify(c, SCD_SPARSIFY_TOPK);
}
static void run_dgc(ctx_t *c)
{
	run_sparsify(c, SCD_SPARSIFY_DGC);
}
static void run_natural(ctx_t *c)
{
	c->out.nnz = 0;
	if (scd_sparsify(c->sp[SCD_SPARSIFY_NATURAL], c->sparse, NULL, c->n, &c->out, NULL))
		exit(1);
	c->last_nnz = c->out.nnz;
}

static void run_exdyna(ctx_t *c)
{
	uint64_t count;
	if (scd_exdyna_select(c->ex, c->grad, c->res, &c->out, &count) != SC_OK)
		exit(1);
	c->last_nnz = count;
}

static void run_hh(ctx_t *c)
{
	if (scd_hh_push_dense(c->hh, c->sparse, c->n, &c->out, c->offset, &c->hh_stats) !=
	    SC_OK)
		exit(1);
	c->last_nnz = c->out.nnz;
}

static void run_hash_bitmap(ctx_t *c)
{
	uint64_t total = 0, bytes;
	for (uint32_t p = 0; p < c->parts; p++) {
		const float *local = c->local + c->map->offset[p];
		if (scd_hash_bitmap_encode_local(c->map, p, local, c->buf, c->buf_bytes,
						 &bytes))
			exit(1);
		total += bytes;
	}
	c->last_nnz = (total - c->n / 8) / 4; /* roughly: values */
}

static void run_bitmap(ctx_t *c)
{
	uint64_t bytes;
	if (scd_bitmap_encode_dense(c->sparse, c->n, c->buf, c->buf_bytes, &bytes))
		exit(1);
	c->last_nnz = (bytes - 8 * scd_fmt_bitmap_words(c->n)) / 4;
}

static void run_blocks(ctx_t *c)
{
	uint64_t bytes;
	if (scd_blocks_encode_dense(c->sparse, c->n, 256, c->buf, c->buf_bytes, &bytes))
		exit(1);
	c->last_nnz = bytes / (4 + 4 * 256);
}

/* Natural selection of the non-zeros, then the count-sketch of them. */
static void run_sketch(ctx_t *c)
{
	run_natural(c);
	if (scd_sketch_encode(&c->sk, c->step++, &c->out, c->sketch) != SC_OK)
		exit(1);
}

static const op_t ops[] = {
    {"threshold", prep_residual, run_threshold},
    {"topk", prep_residual, run_topk},
    {"dgc", prep_residual, run_dgc},
    {"exdyna", prep_residual, run_exdyna},
    {"natural", prep_none, run_natural},
    {"hierarchical_hash", prep_none, run_hh},
    {"hash_bitmap_encode", prep_none, run_hash_bitmap},
    {"bitmap_encode", prep_none, run_bitmap},
    {"blocks_encode", prep_none, run_blocks},
    {"sketch_encode", prep_none, run_sketch},
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

static double memcpy_once(ctx_t *c)
{
	double t0 = cb_now_s();
	memcpy(c->dst, c->grad, c->n * 4);
	__asm__ volatile("" ::"r"(c->dst) : "memory");
	return cb_now_s() - t0;
}

/* Best of reps runs of op; a memcpy runs before each of them and lowers *mem_best, so the
 * baseline is sampled all through the run, next to every op, not only at its start. */
static double time_best(ctx_t *c, const op_t *op, int reps, double *mem_best)
{
	op->prep(c);
	op->run(c); /* warm-up */
	double best = INFINITY;
	for (int r = 0; r < reps; r++) {
		double m = memcpy_once(c);
		*mem_best = m < *mem_best ? m : *mem_best;
		op->prep(c);
		double t0 = cb_now_s();
		op->run(c);
		double t = cb_now_s() - t0;
		best = t < best ? t : best;
	}
	return best;
}

static double time_memcpy(ctx_t *c, int reps)
{
	memcpy(c->dst, c->grad, c->n * 4);
	double best = INFINITY;
	for (int r = 0; r < reps; r++) {
		double t = memcpy_once(c);
		best = t < best ? t : best;
	}
	return best;
}

/* Threshold that selects about density of the gradient: exact top-k's k-th magnitude. */
static void setup(ctx_t *c)
{
	uint64_t n = c->n;
	c->grad = cb_alloc(n * 4);
	c->res = cb_alloc(n * 4);
	c->sparse = cb_alloc(n * 4);
	c->local = cb_alloc(n * 4);
	c->dst = cb_alloc(n * 4);
	cb_fill_gradient(c->grad, n, 12345);
	uint64_t nnz = cb_fill_sparse(c->sparse, n, c->density, 777);
	c->k = scd_density_to_k(c->density, n);
	uint64_t cap = 2 * (c->k > nnz ? c->k : nnz) + 1024;
	c->out = (scd_coo_t){cb_alloc(cap * 4), cb_alloc(cap * 4), 0, cap};
	c->buf_bytes = 8 * n + 4096 + (n / 256 + 2) * 8;
	c->buf = cb_alloc(c->buf_bytes);
	for (int kind = 0; kind < SCD_SPARSIFY_COUNT; kind++) {
		scd_sparsifier_cfg_t cfg = {.kind = kind,
					    .numel = n,
					    .density = c->density,
					    .threshold = 1.0f,
					    .seed = 99};
		if (scd_sparsifier_create(&cfg, &c->sp[kind]) != SC_OK)
			exit(1);
	}
	scd_select_stats_t st;
	scd_sparsify(c->sp[SCD_SPARSIFY_TOPK], c->grad, NULL, n, &c->out, &st);
	c->threshold = st.threshold;
	scd_sparsifier_destroy(c->sp[SCD_SPARSIFY_THRESHOLD]);
	scd_sparsifier_cfg_t tc = {
	    .kind = SCD_SPARSIFY_THRESHOLD, .numel = n, .threshold = c->threshold};
	scd_sparsifier_create(&tc, &c->sp[SCD_SPARSIFY_THRESHOLD]);
	scd_exdyna_cfg_t ec = scd_exdyna_cfg_default(n, 4, 0, c->density);
	ec.init_threshold = c->threshold;
	scd_exdyna_create(&ec, &c->ex);
	scd_hh_cfg_t hc = scd_hh_cfg_default(n, c->parts, cap, 4242);
	hc.threads = c->threads;
	hc.nnz_expected = c->k; /* ZEN: r1 = 2 |G| d */
	if (scd_hh_create(&hc, &c->hh) != SC_OK)
		exit(1);
	c->offset = cb_alloc((c->parts + 1) * 8);
	if (scd_partmap_acquire(n, c->parts, 4242, &c->map) != SC_OK)
		exit(1);
	for (uint32_t p = 0; p < c->parts; p++)
		for (uint64_t j = c->map->offset[p]; j < c->map->offset[p + 1]; j++)
			c->local[j] = c->sparse[c->map->list[j]];
	c->sk = (scd_sketch_cfg_t){
	    .numel = n, .rows = 1, .cols = (uint32_t)(nnz + 1), .block = 256, .seed = 5};
	c->sketch = cb_alloc(scd_sketch_bytes(&c->sk));
}

static int usage(void)
{
	fprintf(stderr, "usage: sparsecomm-bench compress --numel N --density D [--threads T] "
			"[--parts P] [--reps R] [--json]\n");
	return 2;
}

BENCH_COMMAND(compress, "throughput of sparsifiers, hashing, formats vs memcpy")
{
	if (cb_flag(argc, argv, "--help"))
		return usage();
	ctx_t c = {0};
	const char *v;
	c.n = (v = cb_opt(argc, argv, "--numel")) ? strtoull(v, NULL, 0) : (1ull << 26);
	c.density = (v = cb_opt(argc, argv, "--density")) ? atof(v) : 0.01;
	c.threads = (v = cb_opt(argc, argv, "--threads")) ? (unsigned)atoi(v) : 1;
	c.parts = (v = cb_opt(argc, argv, "--parts")) ? (uint32_t)atoi(v) : 16;
	int reps = (v = cb_opt(argc, argv, "--reps")) ? atoi(v) : 5;
	int json = cb_flag(argc, argv, "--json");
	if (c.n == 0 || c.n > SCD_NUMEL_MAX || !(c.density > 0 && c.density <= 1) || reps < 1 ||
	    c.threads < 1 || c.parts < 1)
		return usage();
	setup(&c);
	double t_mem = time_memcpy(&c, reps), bytes = 4.0 * (double)c.n;
	double t[NOPS];
	uint64_t nnz[NOPS];
	for (size_t i = 0; i < NOPS; i++) {
		t[i] = time_best(&c, &ops[i], reps, &t_mem);
		nnz[i] = c.last_nnz;
	}
	if (json) {
		printf("{\"numel\":%llu,\"density\":%g,\"threads\":%u,\"parts\":%u,\"reps\":%d,"
		       "\"memcpy_bytes_per_s\":%.6g,\"ops\":[",
		       (unsigned long long)c.n, c.density, c.threads, c.parts, reps,
		       bytes / t_mem);
		for (size_t i = 0; i < NOPS; i++)
			printf("%s{\"op\":\"%s\",\"bytes_per_s\":%.6g,\"elements_per_s\":%.6g,"
			       "\"seconds\":%.6g,\"vs_memcpy\":%.4f,\"nnz\":%llu}",
			       i ? "," : "", ops[i].name, bytes / t[i], (double)c.n / t[i],
			       t[i], t_mem / t[i], (unsigned long long)nnz[i]);
		printf("],\"topk_over_threshold\":%.4f,\"hash_imbalance\":%.4f,"
		       "\"hash_serial_share\":%.6f}\n",
		       t[1] / t[0], c.hh_stats.imbalance,
		       c.hh_stats.nnz ? (double)(c.hh_stats.serial + c.hh_stats.spill) /
					    (double)c.hh_stats.nnz
				      : 0.0);
	} else {
		printf("numel %llu  density %g  threads %u  parts %u  (best of %d)\n",
		       (unsigned long long)c.n, c.density, c.threads, c.parts, reps);
		printf("%-20s %10s %12s %10s %10s\n", "op", "ms", "GB/s", "x memcpy", "nnz");
		printf("%-20s %10.2f %12.2f %10.2f\n", "memcpy", t_mem * 1e3,
		       bytes / t_mem / 1e9, 1.0);
		for (size_t i = 0; i < NOPS; i++)
			printf("%-20s %10.2f %12.2f %10.2f %10llu\n", ops[i].name, t[i] * 1e3,
			       bytes / t[i] / 1e9, t_mem / t[i], (unsigned long long)nnz[i]);
		printf("topk / threshold time: %.2f; hashing imbalance %.4f\n", t[1] / t[0],
		       c.hh_stats.imbalance);
	}
	return 0;
}
