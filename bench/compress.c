/*
 * compress.c: `sparsecomm-bench compress`: throughput of a device's sparsifiers, hashing,
 * encoders and sketch on one tensor, through the device's ops table (device.h), side by
 * side with a copy on the same device measured in the same run (absolute bandwidth drifts
 * 2x between runs; ratios do not, docs/performance.md).
 *
 *   sparsecomm-bench compress [--device cpu|cuda] --numel N --density D [--threads T]
 *                             [--parts P] [--reps R] [--no-torch] [--json]
 *
 * bytes_per_s counts the dense input bytes an op scans (4 numel), elements_per_s numel.
 * Each op runs once untimed (warm-up: workspaces, page faults), then R times; the best run
 * is reported (the same policy as the copy's). A timed run ends when the device has
 * finished (its sync), so a GPU's queued work is inside it. The copy (4 numel bytes; on the
 * cpu one core's memcpy) is timed R times at the start and once more before every timed run
 * of every op; its best over the whole run is the baseline of every ratio.
 *
 * Sparsifiers run with error feedback on a dense gradient (residual reset between runs,
 * untimed); topk_select is the exact top-k without error feedback (the selection alone,
 * what torch.topk computes). topk_ahead is top-k as the selection at submission runs it,
 * the tensor's residual only read (the new one goes aside, acc_aside then the selection in
 * place); topk_ahead_copies the same as it ran before, with a copy of the gradient and
 * one of the residual ahead of the fused pass. Hashing, formats and the sketch run on a
 * naturally sparse tensor of density D. hash_bitmap_encode is the pull's encode over all P
 * partitions from their local (partition-ordered) values: what the P servers do together, one
 * pass over numel elements; bitmap_encode encodes the natural tensor's COO list.
 * hierarchical_hash_coo and partition_coo split that list into the P partitions of
 * Balanced Parallelism's push: ZEN's hashing against the counting split the scheme runs.
 *
 * With --device cuda the JSON adds hbm_bytes_per_s (the device-to-device copy: 8 numel
 * bytes read and written) and, per op, bytes_moved (what the op must read and write at
 * least) and floor_s = bytes_moved / hbm_bytes_per_s; and, when python3 with torch and a
 * CUDA device is on the machine, torch.topk of the magnitudes of the same tensor, timed the
 * same way in the same run (compress_torch.c), as topk_select's peer.
 */
#include "bench.h"

#include "compress_common.h"
#include "compress_torch.h"
#include "device/device.h"

#include <math.h>

#include "device/cuda.h"
#include "device/partition.h"

typedef struct ctx {
	const scd_device_ops_t *d;
	int cuda;
	uint64_t n, k, nnz;
	double density;
	unsigned threads;
	uint32_t parts;
	/* device memory */
	float *grad, *res, *sparse, *local, *dst, *sketch;
	float *aside; /* the residual a selection at submission leaves (the tensor's kept) */
	scd_coo_t out, nat;
	void *buf;
	uint64_t buf_bytes;
	/* host memory */
	uint64_t *offset;
	float threshold;
	scd_sparsifier_t *sp[SCD_SPARSIFY_COUNT];
	scd_sparsifier_t *sp_select; /* top-k, no error feedback */
	scd_exdyna_t *ex;
	scd_hh_t *hh;
	scd_hh_stats_t hh_stats;
	const scd_partmap_t *map;
	scd_sketch_cfg_t sk;
	uint64_t step, last_nnz, last_bytes;
} ctx_t;

typedef struct {
	const char *name;
	void (*prep)(ctx_t *c); /* untimed, before each run */
	void (*run)(ctx_t *c);
	/* the least bytes the op must read and write (its last run's output) */
	double (*moved)(const ctx_t *c);
} op_t;

static void die(const char *what, sc_status_t st)
{
	fprintf(stderr, "sparsecomm-bench compress: %s failed: %s\n", what, sc_status_name(st));
	exit(1);
}

static void check(ctx_t *c, const char *what, sc_status_t st)
{
	if (st == SC_OK)
		st = c->d->sync();
	if (st != SC_OK)
		die(what, st);
}

static void prep_residual(ctx_t *c)
{
	c->d->clear(c->res, c->n * 4);
}

static void prep_none(ctx_t *c)
{
	(void)c;
}

static void run_sparsify(ctx_t *c, scd_sparsifier_t *sp, const float *in, float *res)
{
	c->out.nnz = 0;
	check(c, "sparsify", c->d->sparsify(sp, in, res, c->n, &c->out, NULL));
	c->last_nnz = c->out.nnz;
}

static void run_threshold(ctx_t *c)
{
	run_sparsify(c, c->sp[SCD_SPARSIFY_THRESHOLD], c->grad, c->res);
}
static void run_topk(ctx_t *c)
{
	run_sparsify(c, c->sp[SCD_SPARSIFY_TOPK], c->grad, c->res);
}
static void run_topk_select(ctx_t *c)
{
	run_sparsify(c, c->sp_select, c->grad, NULL);
}
/* The selection at submission (coll/presel.c) of a lone trainer's tensor, which leaves the
 * tensor's residual as it is: as it ran before, the gradient copied into the node's sum
 * (dst) and the residual into the entry's (aside), then the fused pass over both ... */
static void run_topk_ahead_copies(ctx_t *c)
{
	c->d->copy(c->dst, c->grad, c->n * 4);
	c->d->copy(c->aside, c->res, c->n * 4);
	run_sparsify(c, c->sp[SCD_SPARSIFY_TOPK], c->dst, c->aside);
}
/* ... and as it runs: gradient + residual formed aside in one pass (acc_aside), the
 * gradient read where it lies, then the selection in place there */
static void run_topk_ahead(ctx_t *c)
{
	c->d->acc_aside(c->aside, c->grad, c->res, c->n);
	run_sparsify(c, c->sp[SCD_SPARSIFY_TOPK], NULL, c->aside);
}
static void run_dgc(ctx_t *c)
{
	run_sparsify(c, c->sp[SCD_SPARSIFY_DGC], c->grad, c->res);
}
static void run_natural(ctx_t *c)
{
	run_sparsify(c, c->sp[SCD_SPARSIFY_NATURAL], c->sparse, NULL);
}

static void run_exdyna(ctx_t *c)
{
	uint64_t count;
	check(c, "exdyna_select", c->d->exdyna_select(c->ex, c->grad, c->res, &c->out, &count));
	c->last_nnz = count;
}

static void run_hh(ctx_t *c)
{
	check(c, "hh_push_dense",
	      c->d->hh_push_dense(c->hh, c->sparse, c->n, &c->out, c->offset, &c->hh_stats));
	c->last_nnz = c->out.nnz;
}

/* Balanced Parallelism's push on a COO list: ZEN's hierarchical hashing against the
 * stable counting split the scheme runs (the same partitions, h0) */
static void run_hh_coo(ctx_t *c)
{
	check(c, "hh_push_coo", c->d->hh_push_coo(c->hh, &c->nat, &c->out, c->offset, NULL));
	c->last_nnz = c->out.nnz;
}

static void run_partition_coo(ctx_t *c)
{
	scd_partfn_t fn = scd_partfn_make(c->parts, 4242);
	check(c, "partition_coo", c->d->partition_coo(&fn, &c->nat, &c->out, c->offset));
	c->last_nnz = c->out.nnz;
}

static void run_hash_bitmap(ctx_t *c)
{
	uint64_t total = 0, nnz = 0, bytes;
	for (uint32_t p = 0; p < c->parts; p++) {
		uint64_t size = scd_partmap_size(c->map, p);
		scd_hbseg_t seg = {.p = p, .lo = 0, .hi = size};
		sc_status_t st =
		    c->d->hash_bitmap_encode_seg(c->map, &seg, c->local + c->map->offset[p],
						 NULL, c->buf, c->buf_bytes, &bytes);
		if (st != SC_OK)
			die("hash_bitmap_encode_seg", st);
		total += bytes;
		nnz += (bytes - 8 * scd_fmt_bitmap_words(size)) / 4;
	}
	check(c, "hash_bitmap_encode_seg", SC_OK);
	c->last_nnz = nnz;
	c->last_bytes = total;
}

static void run_bitmap(ctx_t *c)
{
	uint64_t bytes;
	check(c, "bitmap_encode",
	      c->d->bitmap_encode(&c->nat, c->n, c->buf, c->buf_bytes, &bytes));
	c->last_nnz = (bytes - 8 * scd_fmt_bitmap_words(c->n)) / 4;
	c->last_bytes = bytes;
}

static void run_blocks(ctx_t *c)
{
	uint64_t bytes;
	check(c, "blocks_encode_dense",
	      c->d->blocks_encode_dense(c->sparse, c->n, 256, c->buf, c->buf_bytes, &bytes));
	c->last_nnz = bytes / (4 + 4 * 256);
	c->last_bytes = bytes;
}

/* Natural selection of the non-zeros, then the count-sketch of them. */
static void run_sketch(ctx_t *c)
{
	run_natural(c);
	check(c, "sketch_encode", c->d->sketch_encode(&c->sk, c->step++, &c->out, c->sketch));
}

/* ---- the least traffic of each op (floor_s) ------------------------------------------- */

static double dense_bytes(const ctx_t *c)
{
	return 4.0 * (double)c->n;
}
/* with error feedback: the gradient and the residual read, the residual written, the
 * selection written as COO */
static double moved_feedback(const ctx_t *c)
{
	return 3 * dense_bytes(c) + 8.0 * (double)c->last_nnz;
}
/* the tensor read, the selection written */
static double moved_select(const ctx_t *c)
{
	return dense_bytes(c) + 8.0 * (double)c->last_nnz;
}
/* a list read and written */
static double moved_list(const ctx_t *c)
{
	return 16.0 * (double)c->last_nnz;
}
/* the tensor read, the encoding written */
static double moved_dense_encode(const ctx_t *c)
{
	return dense_bytes(c) + (double)c->last_bytes;
}
static double moved_bitmap(const ctx_t *c)
{
	return 8.0 * (double)c->nnz + (double)c->last_bytes;
}
static double moved_sketch(const ctx_t *c)
{
	return moved_select(c) + 8.0 * (double)c->last_nnz + (double)scd_sketch_bytes(&c->sk);
}

static const op_t ops[] = {
    {"threshold", prep_residual, run_threshold, moved_feedback},
    {"topk", prep_residual, run_topk, moved_feedback},
    {"topk_select", prep_none, run_topk_select, moved_select},
    {"topk_ahead_copies", prep_residual, run_topk_ahead_copies, moved_feedback},
    {"topk_ahead", prep_residual, run_topk_ahead, moved_feedback},
    {"dgc", prep_residual, run_dgc, moved_feedback},
    {"exdyna", prep_residual, run_exdyna, moved_feedback},
    {"natural", prep_none, run_natural, moved_select},
    {"hierarchical_hash", prep_none, run_hh, moved_select},
    {"hierarchical_hash_coo", prep_none, run_hh_coo, moved_list},
    {"partition_coo", prep_none, run_partition_coo, moved_list},
    {"hash_bitmap_encode", prep_none, run_hash_bitmap, moved_dense_encode},
    {"bitmap_encode", prep_none, run_bitmap, moved_bitmap},
    {"blocks_encode", prep_none, run_blocks, moved_dense_encode},
    {"sketch_encode", prep_none, run_sketch, moved_sketch},
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))
enum { OP_THRESHOLD = 0, OP_TOPK = 1, OP_TOPK_SELECT = 2 };

static double copy_once(ctx_t *c)
{
	double t0 = cb_now_s();
	c->d->copy(c->dst, c->grad, c->n * 4);
	check(c, "copy", SC_OK);
	__asm__ volatile("" ::"r"(c->dst) : "memory");
	return cb_now_s() - t0;
}

/* Best of reps runs of op; a copy runs before each of them and lowers *copy_best, so the
 * baseline is sampled all through the run, next to every op, not only at its start. */
static double time_best(ctx_t *c, const op_t *op, int reps, double *copy_best)
{
	op->prep(c);
	op->run(c); /* warm-up */
	double best = INFINITY;
	for (int r = 0; r < reps; r++) {
		double m = copy_once(c);
		*copy_best = m < *copy_best ? m : *copy_best;
		op->prep(c);
		check(c, "prepare", SC_OK);
		double t0 = cb_now_s();
		op->run(c);
		double t = cb_now_s() - t0;
		best = t < best ? t : best;
	}
	return best;
}

static double time_copy(ctx_t *c, int reps)
{
	copy_once(c);
	double best = INFINITY;
	for (int r = 0; r < reps; r++) {
		double t = copy_once(c);
		best = t < best ? t : best;
	}
	return best;
}

/* Device memory holding a copy of host bytes. */
static void *dev_from(ctx_t *c, const void *host, size_t bytes)
{
	void *p = c->d->alloc(bytes ? bytes : 4);
	if (!p)
		die("alloc", SC_ERR_NOMEM);
	if (host)
		c->d->from_host(p, host, bytes);
	return p;
}

static void sparsifier(ctx_t *c, const scd_sparsifier_cfg_t *cfg, scd_sparsifier_t **sp_p)
{
	sc_status_t st = c->d->sparsifier_create(cfg, sp_p);
	if (st != SC_OK)
		die("sparsifier_create", st);
}

/* The tensors are made on the host (the same bytes on every device), then copied in. The
 * threshold is the one that selects about density of the gradient: exact top-k's k-th
 * magnitude. */
static void setup(ctx_t *c, float *grad_host)
{
	uint64_t n = c->n;
	float *host = cb_alloc(n * 4);
	cb_fill_gradient(grad_host, n, 12345);
	c->nnz = cb_fill_sparse(host, n, c->density, 777);
	c->k = scd_density_to_k(c->density, n);
	c->grad = dev_from(c, grad_host, n * 4);
	c->sparse = dev_from(c, host, n * 4);
	c->res = dev_from(c, NULL, n * 4);
	c->dst = dev_from(c, NULL, n * 4);
	c->aside = dev_from(c, NULL, n * 4);
	uint64_t cap = 2 * (c->k > c->nnz ? c->k : c->nnz) + 1024;
	c->out = (scd_coo_t){dev_from(c, NULL, cap * 4), dev_from(c, NULL, cap * 4), 0, cap};
	c->nat = (scd_coo_t){dev_from(c, NULL, c->nnz * 4), dev_from(c, NULL, c->nnz * 4), 0,
			     c->nnz};
	c->nat.nnz = c->d->dense_to_coo(c->sparse, n, c->nat.idx, c->nat.val);
	c->buf_bytes = 8 * n + 4096 + (n / 256 + 2) * 8;
	c->buf = dev_from(c, NULL, c->buf_bytes);
	for (int kind = 0; kind < SCD_SPARSIFY_COUNT; kind++) {
		scd_sparsifier_cfg_t cfg = {.kind = kind,
					    .numel = n,
					    .density = c->density,
					    .threshold = 1.0f,
					    .seed = 99};
		sparsifier(c, &cfg, &c->sp[kind]);
	}
	scd_sparsifier_cfg_t sc = {
	    .kind = SCD_SPARSIFY_TOPK, .numel = n, .density = c->density, .seed = 99};
	sparsifier(c, &sc, &c->sp_select);
	scd_select_stats_t st;
	check(c, "sparsify",
	      c->d->sparsify(c->sp[SCD_SPARSIFY_TOPK], c->grad, NULL, n, &c->out, &st));
	c->threshold = st.threshold;
	c->d->sparsifier_destroy(c->sp[SCD_SPARSIFY_THRESHOLD]);
	scd_sparsifier_cfg_t tc = {
	    .kind = SCD_SPARSIFY_THRESHOLD, .numel = n, .threshold = c->threshold};
	sparsifier(c, &tc, &c->sp[SCD_SPARSIFY_THRESHOLD]);
	scd_exdyna_cfg_t ec = scd_exdyna_cfg_default(n, 4, 0, c->density);
	ec.init_threshold = c->threshold;
	sc_status_t s = c->d->exdyna_create(&ec, &c->ex);
	if (s != SC_OK)
		die("exdyna_create", s);
	scd_hh_cfg_t hc = scd_hh_cfg_default(n, c->parts, cap, 4242);
	hc.threads = c->threads;
	hc.nnz_expected = c->k; /* ZEN: r1 = 2 |G| d */
	if ((s = c->d->hh_create(&hc, &c->hh)) != SC_OK)
		die("hh_create", s);
	c->offset = cb_alloc((c->parts + 1) * 8);
	if ((s = c->d->partmap_acquire(n, c->parts, 4242, &c->map)) != SC_OK)
		die("partmap_acquire", s);
	/* local: each partition's values in its list's order, built from the cpu's lists
	 * (the same lists on every device) */
	const scd_partmap_t *hmap;
	if ((s = scd_partmap_acquire(n, c->parts, 4242, &hmap)) != SC_OK)
		die("partmap_acquire", s);
	float *local = cb_alloc(n * 4);
	for (uint64_t j = 0; j < n; j++)
		local[j] = host[hmap->list[j]];
	scd_partmap_release(hmap);
	c->local = dev_from(c, local, n * 4);
	free(local);
	c->sk = (scd_sketch_cfg_t){
	    .numel = n, .rows = 1, .cols = (uint32_t)(c->nnz + 1), .block = 256, .seed = 5};
	c->sketch = dev_from(c, NULL, scd_sketch_bytes(&c->sk));
	check(c, "setup", SC_OK);
	free(host);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: sparsecomm-bench compress [--device cpu|cuda] --numel N "
		"--density D [--threads T] [--parts P] [--reps R] [--no-torch] [--json]\n");
	return 2;
}

static void print_json(const ctx_t *c, int reps, double t_copy, const double *t,
		       const uint64_t *nnz, const double *moved, const cb_torch_t *torch)
{
	double bytes = 4.0 * (double)c->n, hbm = 2 * bytes / t_copy;
	printf("{\"device\":\"%s\",\"numel\":%llu,\"density\":%g,\"threads\":%u,\"parts\":%u,"
	       "\"reps\":%d,\"memcpy_bytes_per_s\":%.6g",
	       c->d->name, (unsigned long long)c->n, c->density, c->threads, c->parts, reps,
	       bytes / t_copy);
	if (c->cuda)
		printf(",\"hbm_bytes_per_s\":%.6g", hbm);
	printf(",\"ops\":[");
	for (size_t i = 0; i < NOPS; i++) {
		printf("%s{\"op\":\"%s\",\"bytes_per_s\":%.6g,\"elements_per_s\":%.6g,"
		       "\"seconds\":%.6g,\"vs_memcpy\":%.4f,\"nnz\":%llu",
		       i ? "," : "", ops[i].name, bytes / t[i], (double)c->n / t[i], t[i],
		       t_copy / t[i], (unsigned long long)nnz[i]);
		if (c->cuda)
			printf(",\"bytes_moved\":%.6g,\"floor_s\":%.6g,\"vs_floor\":%.4f",
			       moved[i], moved[i] / hbm, t[i] / (moved[i] / hbm));
		printf("}");
	}
	printf("],\"topk_over_threshold\":%.4f,\"hash_imbalance\":%.4f,"
	       "\"hash_serial_share\":%.6f",
	       t[OP_TOPK] / t[OP_THRESHOLD], c->hh_stats.imbalance,
	       c->hh_stats.nnz
		   ? (double)(c->hh_stats.serial + c->hh_stats.spill) / (double)c->hh_stats.nnz
		   : 0.0);
	if (c->cuda) {
		if (torch->ok)
			printf(",\"torch_topk\":{\"seconds\":%.6g,\"over_topk_select\":%.4f}",
			       torch->seconds, torch->seconds / t[OP_TOPK_SELECT]);
		else
			printf(",\"torch_topk\":null,\"torch_topk_reason\":\"%s\"", torch->why);
	}
	printf("}\n");
}

static void print_text(const ctx_t *c, int reps, double t_copy, const double *t,
		       const uint64_t *nnz, const double *moved, const cb_torch_t *torch)
{
	double bytes = 4.0 * (double)c->n, hbm = 2 * bytes / t_copy;
	printf("device %s  numel %llu  density %g  threads %u  parts %u  (best of %d)\n",
	       c->d->name, (unsigned long long)c->n, c->density, c->threads, c->parts, reps);
	printf("%-20s %10s %12s %10s %10s%s\n", "op", "ms", "GB/s", "x copy", "nnz",
	       c->cuda ? "    x floor" : "");
	printf("%-20s %10.2f %12.2f %10.2f\n", "copy", t_copy * 1e3, bytes / t_copy / 1e9, 1.0);
	for (size_t i = 0; i < NOPS; i++) {
		printf("%-20s %10.2f %12.2f %10.2f %10llu", ops[i].name, t[i] * 1e3,
		       bytes / t[i] / 1e9, t_copy / t[i], (unsigned long long)nnz[i]);
		if (c->cuda)
			printf(" %10.2f", t[i] / (moved[i] / hbm));
		printf("\n");
	}
	printf("topk / threshold time: %.2f; hashing imbalance %.4f\n",
	       t[OP_TOPK] / t[OP_THRESHOLD], c->hh_stats.imbalance);
	if (c->cuda) {
		if (torch->ok)
			printf("torch.topk: %.2f ms (%.2fx topk_select)\n",
			       torch->seconds * 1e3, torch->seconds / t[OP_TOPK_SELECT]);
		else
			printf("torch.topk: not timed (%s)\n", torch->why);
	}
}

BENCH_COMMAND(compress, "throughput of sparsifiers, hashing, formats vs a copy (cpu or cuda)")
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
	const char *dev = (v = cb_opt(argc, argv, "--device")) ? v : "cpu";
	if (c.n == 0 || c.n > SCD_NUMEL_MAX || !(c.density > 0 && c.density <= 1) || reps < 1 ||
	    c.threads < 1 || c.parts < 1)
		return usage();
	scd_device_kind_t kind;
	if (!strcmp(dev, "cpu"))
		kind = SCD_DEVICE_CPU;
	else if (!strcmp(dev, "cuda"))
		kind = SCD_DEVICE_CUDA;
	else
		return usage();
	if (scd_device_get(kind, &c.d) != SC_OK) {
		fprintf(stderr, "sparsecomm-bench compress: the %s device is unavailable: %s\n",
			dev, kind == SCD_DEVICE_CUDA ? scd_cuda_unavailable_reason() : "?");
		return 1;
	}
	c.cuda = kind == SCD_DEVICE_CUDA;
	float *grad_host = cb_alloc(c.n * 4);
	setup(&c, grad_host);
	double t_copy = time_copy(&c, reps);
	double t[NOPS], moved[NOPS];
	uint64_t nnz[NOPS];
	for (size_t i = 0; i < NOPS; i++) {
		t[i] = time_best(&c, &ops[i], reps, &t_copy);
		nnz[i] = c.last_nnz;
		moved[i] = ops[i].moved(&c);
	}
	cb_torch_t torch = {0};
	if (c.cuda) {
		if (cb_flag(argc, argv, "--no-torch"))
			snprintf(torch.why, sizeof torch.why, "--no-torch");
		else
			cb_torch_topk(grad_host, c.n, c.k, reps, &torch);
	}
	free(grad_host);
	if (json)
		print_json(&c, reps, t_copy, t, nnz, moved, &torch);
	else
		print_text(&c, reps, t_copy, t, nnz, moved, &torch);
	return 0;
}
