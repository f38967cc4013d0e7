/*
 * test_engine_bufctx.c: a buffer step's failures keep their own status (coll/bufctx.h).
 * A tensor whose options passed registration but from which no sparsifier can be made (a
 * hard threshold of 1e-50 is > 0 as a double, 0 in float32) fails its step with
 * SC_ERR_INVALID and a text that names the tensor and its threshold, not with
 * SC_ERR_NOMEM and "no memory"; the failure happens before the transport
 * is used, so a bare one-rank transport without ops stands in for it.
 */
#include "unit.h"

#include <string.h>

#include "coll/bufctx.h"
#include "coll/presel.h"
#include "engine/engine.h"
#include "util/log.h"

/* A table of buffer contexts with the default settings, and the cpu device. */
static scd_bufctx_table_t *cpu_table(const scd_device_ops_t **dev_p)
{
	scd_bufctx_table_t *tab = NULL;
	CHECK_TRUE(scd_bufctx_table_create(NULL, &tab) == SC_OK);
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, dev_p) == SC_OK);
	return tab;
}

UNIT_TEST(engine_bufctx_invalid_sparsifier_status)
{
	enum { N = 4096 };
	static float buf[N], res[N];
	scd_log_level = -1; /* the step logs the failure it detects: expected here */
	const scd_device_ops_t *dev = NULL;
	scd_bufctx_table_t *tab = cpu_table(&dev);
	scd_transport_t t = {.ops = NULL, .rank = 0, .size = 1};
	scd_job_item_t it = {.name = "layer.bad",
			     .numel = N,
			     .op = SC_OP_SUM,
			     .cache_id = 7,
			     .sparsifier = SC_SPARSIFY_THRESHOLD,
			     .threshold = 1e-50,
			     .residual = res};
	for (int step = 0; step < 2; step++) { /* and again: no state was kept */
		scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
				 .n_items = 1,
				 .items = &it,
				 .total_numel = N,
				 .dtype = SC_FLOAT32,
				 .average_divisor = 1,
				 .pin = -1,
				 .timeout_ms = 1000};
		sc_status_t st = scd_bufctx_step(tab, &job, dev, buf, &t, 20e-6, 1e-10, 42);
		CHECK_MSG(st == SC_ERR_INVALID, "step %d: %s (%s), expected SC_ERR_INVALID",
			  step, sc_status_name(st), job.error);
		CHECK_MSG(strstr(job.error, "layer.bad") && strstr(job.error, "threshold"),
			  "the error does not name the tensor and its threshold: '%s'",
			  job.error);
		CHECK_MSG(!strstr(job.error, "memory"), "the error speaks of memory: '%s'",
			  job.error);
	}
	scd_bufctx_table_destroy(tab);
}

/* The device of a buffer comes from where its tensors live: one device for all, else a
 * clear error naming the tensors; a device this daemon lacks (no GPU build here) too. */
UNIT_TEST(engine_job_device_per_buffer)
{
	scd_log_level = -1; /* the failures are expected here */
	scd_job_item_t it[2] = {{.name = "layer.a", .n_src = 1},
				{.name = "layer.b", .n_src = 2}};
	scd_job_t job = {.kind = SCD_JOB_ALLREDUCE, .n_items = 2, .items = it};
	scd_device_kind_t kind = SCD_DEVICE_COUNT;
	const scd_device_ops_t *dev = NULL;
	CHECK_EQ_INT(scd_engine_job_device(3, &job, &kind, &dev), SC_OK);
	CHECK_EQ_INT(kind, SCD_DEVICE_CPU);
	CHECK_TRUE(dev == &scd_device_cpu_ops);

	it[1].src[1].device = SCD_DEVICE_CUDA; /* one trainer of layer.b on a GPU */
	CHECK_EQ_INT(scd_engine_job_device(3, &job, &kind, &dev), SC_ERR_UNSUPPORTED);
	CHECK_MSG(strstr(job.error, "rank 3") && strstr(job.error, "layer.a") &&
		      strstr(job.error, "layer.b") && strstr(job.error, "cuda"),
		  "mixed devices: '%s'", job.error);

	it[1].src[0].device = SCD_DEVICE_CUDA; /* layer.b's trainers both on it */
	it[0].n_src = 0;		       /* layer.a absent from this node: zeros */
	const scd_device_ops_t *cuda = NULL;
	sc_status_t want = scd_device_get(SCD_DEVICE_CUDA, &cuda);
	job.error[0] = 0;
	sc_status_t st = scd_engine_job_device(3, &job, &kind, &dev);
	CHECK_EQ_INT(st, want);
	if (want == SC_OK)
		CHECK_TRUE(kind == SCD_DEVICE_CUDA && dev == cuda);
	else
		CHECK_MSG(strstr(job.error, "layer.b") && strstr(job.error, "cuda") &&
			      strstr(job.error, "does not have"),
			  "missing device: '%s'", job.error);
}

/* ---- a tensor's own S2 sketch settings reach its scheme ------------------------------- */

#include <sys/mman.h>

#include "scheme_world.h"

typedef struct sketch_arg {
	uint32_t rows;	/* the item's sketch_rows (0: the table's) */
	uint32_t block; /* the item's block (0: the table's sketch_block) */
	uint64_t *sent; /* [MAX_P] bytes each rank sent */
} sketch_arg_t;

static void sketch_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	enum { N = 1 << 16 };
	sketch_arg_t *a = arg;
	float *buf = calloc(N, 4), *res = calloc(N, 4);
	for (uint64_t i = (uint64_t)rank; i < N; i += 97)
		buf[i] = (float)(i % 7 + 1);
	const scd_device_ops_t *dev = NULL;
	scd_bufctx_table_t *tab = cpu_table(&dev);
	scd_job_item_t it = {.name = "emb.s2",
			     .numel = N,
			     .op = SC_OP_SUM,
			     .cache_id = 3,
			     .residual = res,
			     .sketch_rows = a->rows,
			     .block = a->block};
	scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
			 .n_items = 1,
			 .items = &it,
			 .total_numel = N,
			 .dtype = SC_FLOAT32,
			 .average_divisor = 1,
			 .pin = SCD_SCHEME_S2_SKETCH,
			 .timeout_ms = 10000};
	scd_transport_counters_t c0, c1;
	t->ops->counters(t, &c0);
	sc_status_t st = scd_bufctx_step(tab, &job, dev, buf, t, 20e-6, 1e-10, 42);
	t->ops->counters(t, &c1);
	CHECK_MSG(st == SC_OK, "rank %d: %s (%s)", rank, sc_status_name(st), job.error);
	a->sent[rank] = c1.bytes_sent - c0.bytes_sent;
	scd_bufctx_table_destroy(tab);
	free(buf), free(res);
}

/* sc_tensor_opts_t.sketch_rows travels with the job's item into the buffer's scheme: the
 * same step with 3 rows sends more than with the configuration's 1 (the sketch is 3 rows
 * of the same width; the block bitmap is the same). */
UNIT_TEST(engine_bufctx_tensor_sketch_rows)
{
	uint64_t sent[2];
	for (int k = 0; k < 2; k++) {
		sketch_arg_t a = {.rows = k ? 3 : 0};
		a.sent = shared_map(8 * MAX_P);
		run_world(2, sketch_rank, &a);
		sent[k] = a.sent[0];
		CHECK_EQ_INT(a.sent[1], a.sent[0]);
		munmap(a.sent, 8 * MAX_P);
	}
	printf("    S2 bytes sent per rank: rows 1 %llu, rows 3 %llu\n",
	       (unsigned long long)sent[0], (unsigned long long)sent[1]);
	CHECK_MSG(sent[1] > sent[0] * 3 / 2, "rows 3 sent %llu, rows 1 %llu",
		  (unsigned long long)sent[1], (unsigned long long)sent[0]);
}

/* A tensor's block (sc_tensor_opts_t.block, a row of the tensor) is S2's bitmap block for
 * its buffer: rows of 16 elements make a bitmap of 4096 entries where the configuration's
 * 256-element blocks make 256, and its ring sends the 3840 more (4 bytes each at P = 2). */
UNIT_TEST(engine_bufctx_tensor_block_is_s2_bitmap_block)
{
	uint64_t sent[2];
	for (int k = 0; k < 2; k++) {
		sketch_arg_t a = {.block = k ? 16 : 0};
		a.sent = shared_map(8 * MAX_P);
		run_world(2, sketch_rank, &a);
		sent[k] = a.sent[0];
		munmap(a.sent, 8 * MAX_P);
	}
	printf("    S2 bytes sent per rank: block 256 %llu, block 16 %llu\n",
	       (unsigned long long)sent[0], (unsigned long long)sent[1]);
	CHECK_MSG(sent[1] >= sent[0] + 4 * (4096 - 256), "block 16 sent %llu, block 256 %llu",
		  (unsigned long long)sent[1], (unsigned long long)sent[0]);
}

/* ---- a lone tensor's fusion time ------------------------------------------------------- */

typedef struct alone_arg {
	double (*tb)[4]; /* [rank][step]: the item's reported fusion time */
} alone_arg_t;

static void alone_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	enum { N = 1 << 18 };
	alone_arg_t *a = arg;
	float *buf = calloc(N, 4), *res = calloc(N, 4);
	const scd_device_ops_t *dev = NULL;
	scd_bufctx_table_t *tab = cpu_table(&dev);
	scd_job_item_t it = {.name = "fc.weight",
			     .numel = N,
			     .op = SC_OP_SUM,
			     .cache_id = 5,
			     .sparsifier = SC_SPARSIFY_TOPK,
			     .density = 0.01,
			     .residual = res};
	for (int step = 0; step < 4; step++) {
		for (uint64_t i = 0; i < N; i++)
			buf[i] = (float)((i * 2654435761u + (uint64_t)step) % 1000) - 500;
		scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
				 .n_items = 1,
				 .items = &it,
				 .total_numel = N,
				 .dtype = SC_FLOAT32,
				 .average_divisor = 1,
				 .pin = -1,
				 .timeout_ms = 10000};
		sc_status_t st = scd_bufctx_step(tab, &job, dev, buf, t, 20e-6, 1e-10, 42);
		CHECK_MSG(st == SC_OK, "rank %d step %d: %s (%s)", rank, step,
			  sc_status_name(st), job.error);
		a->tb[rank][step] = it.tb_s;
	}
	scd_bufctx_table_destroy(tab);
	free(buf), free(res);
}

/* A sparsified tensor alone in its buffer reports the time its fusion costs (clearing its
 * slice and scattering its selection), measured on its first steps alone and then kept,
 * not 0: at 0 the fusion planner took it to be free to fuse, fused it, measured it and
 * split it again, over and over. */
UNIT_TEST(engine_bufctx_lone_tensor_reports_its_fusion_time)
{
	alone_arg_t a;
	a.tb = shared_map(sizeof(*a.tb) * MAX_P);
	run_world(2, alone_rank, &a);
	for (int r = 0; r < 2; r++) {
		printf("    rank %d: fusion time alone %.1f %.1f %.1f %.1f us\n", r,
		       a.tb[r][0] * 1e6, a.tb[r][1] * 1e6, a.tb[r][2] * 1e6, a.tb[r][3] * 1e6);
		for (int s = 0; s < 4; s++)
			CHECK_MSG(a.tb[r][s] > 0,
				  "rank %d step %d: a lone tensor's fusion time 0", r, s);
		CHECK_MSG(a.tb[r][3] == a.tb[r][2], "rank %d: measured again after step 3", r);
	}
	munmap(a.tb, sizeof(*a.tb) * MAX_P);
}

/* ---- sparsifiers made at their first use ------------------------------------------------ */

/* The cpu device's sparsifier_create, counted per rank (each rank is its own process). */
static int made;
static sc_status_t counted_create(const scd_sparsifier_cfg_t *cfg, scd_sparsifier_t **sp_p)
{
	made++;
	return scd_device_cpu_ops.sparsifier_create(cfg, sp_p);
}

typedef struct made_arg {
	int (*made)[3];	 /* [rank][step]: sparsifiers made so far */
	float (*out)[2]; /* [rank][step 0/1]: the buffer's first element after the step */
} made_arg_t;

/* A buffer of two top-k tensors whose selections were made at submission makes no
 * sparsifier of its own (each holds workspaces of about numel / 8 bytes, pre-faulted); the
 * same buffer selected at the buffer makes one per tensor, once. */
static void made_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	enum { N = 8192, K = 4 };
	made_arg_t *a = arg;
	static float buf[2 * N], res[2][N];
	static uint32_t idx[2][K];
	static float val[2][K];
	scd_device_ops_t ops = scd_device_cpu_ops;
	ops.sparsifier_create = counted_create;
	scd_bufctx_table_t *tab = NULL;
	CHECK_TRUE(scd_bufctx_table_create(NULL, &tab) == SC_OK);
	scd_presel_t pre[2];
	scd_job_item_t it[2];
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < K; j++)
			idx[i][j] = (uint32_t)(j * 100 + i), val[i][j] = (float)(rank + 1);
		memset(&pre[i], 0, sizeof(pre[i]));
		pre[i].sel = (scd_coo_t){.idx = idx[i], .val = val[i], .nnz = K, .cap = K};
		it[i] = (scd_job_item_t){.name = i ? "b.weight" : "a.weight",
					 .numel = N,
					 .offset = (uint64_t)i * N,
					 .op = SC_OP_SUM,
					 .cache_id = (uint32_t)(3 + i),
					 .sparsifier = SC_SPARSIFY_TOPK,
					 .density = (double)K / N,
					 .residual = res[i]};
	}
	for (int step = 0; step < 3; step++) {
		for (int i = 0; i < 2; i++)
			it[i].presel = step == 0 ? &pre[i] : NULL;
		for (uint64_t j = 0; j < 2 * N; j++)
			buf[j] = step == 0 ? 0 : (float)((j * 2654435761u) % 1000) - 500;
		if (step > 0)
			buf[0] = -1000; /* the largest magnitude of its tensor, alone */
		scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
				 .n_items = 2,
				 .items = it,
				 .total_numel = 2 * N,
				 .dtype = SC_FLOAT32,
				 .average_divisor = 1,
				 .pin = -1,
				 .timeout_ms = 10000};
		sc_status_t st = scd_bufctx_step(tab, &job, &ops, buf, t, 20e-6, 1e-10, 42);
		CHECK_MSG(st == SC_OK, "rank %d step %d: %s (%s)", rank, step,
			  sc_status_name(st), job.error);
		a->made[rank][step] = made;
		if (step < 2)
			a->out[rank][step] = buf[0];
	}
	scd_bufctx_table_destroy(tab);
}

UNIT_TEST(engine_bufctx_sparsifiers_made_at_first_use)
{
	made_arg_t a;
	a.made = shared_map(sizeof(*a.made) * MAX_P);
	a.out = shared_map(sizeof(*a.out) * MAX_P);
	run_world(2, made_rank, &a);
	for (int r = 0; r < 2; r++) {
		CHECK_MSG(a.made[r][0] == 0,
			  "rank %d: %d sparsifiers made for selections made at submission", r,
			  a.made[r][0]);
		CHECK_MSG(
		    a.made[r][1] == 2 && a.made[r][2] == 2,
		    "rank %d: %d then %d sparsifiers for 2 tensors selected at the buffer", r,
		    a.made[r][1], a.made[r][2]);
		/* the selections given were used: element 0 is both ranks' value 1 + 2 */
		CHECK_MSG(a.out[r][0] == 3.0f, "rank %d: element 0 is %g, not 3", r,
			  (double)a.out[r][0]);
		/* selected at the buffer: element 0 (-1000 on both ranks, the largest magnitude
		 * of its tensor) is in both selections */
		CHECK_MSG(a.out[r][1] == -2000.0f, "rank %d: element 0 is %g, not -2000", r,
			  (double)a.out[r][1]);
	}
	munmap(a.made, sizeof(*a.made) * MAX_P);
	munmap(a.out, sizeof(*a.out) * MAX_P);
}
