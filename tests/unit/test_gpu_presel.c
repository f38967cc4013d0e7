/*
 * test_gpu_presel.c: the selection at submission of a GPU tensor (coll/presel.h) through
 * the GPU device's ops table (the host build of gpu/ in sparsecomm-unit, the CUDA build in
 * sparsecomm-unit-gpu): the node's sum and the selection are made in the device's memory
 * by its ops and equal, bit for bit, the sum and selection its buffer makes with the same
 * ops; the tensor's residual is untouched until a buffer on the same device takes the
 * selection (one on another device does not), and that buffer does not wait for the
 * trainers' ready events again; an entry made on another device is made anew; block
 * top-K, which the GPU cannot make, is left to the buffer without a workspace made for
 * it. A selection the device failed under fails alone: it leaves no failure for the
 * device's next sync.
 */
#include <string.h>

#include "coll/ctx.h"
#include "coll/presel.h"
#include "gpu_fns.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

enum { PN = 5000 };

/* Distinct magnitudes, different for every salt. */
static void fill(float *x, uint32_t salt, float scale)
{
	for (uint32_t i = 0; i < PN; i++) {
		uint32_t h = (i * 2654435761u) ^ (salt * 40503u);
		h = (h ^ (h >> 15)) * 2246822519u;
		x[i] = (float)((h >> 8) % 1000003) * (h & 1 ? scale : -scale);
	}
}

/* n floats of the device's memory at d, read back. */
static void read_back(const scd_device_ops_t *dev, float *host, const void *d, size_t n)
{
	dev->to_host(host, d, n * sizeof(float));
	OK(dev->sync());
}

static int fail_alloc; /* the device's allocations fail (not for want of memory) */
static int allocs;     /* the device's allocations so far */
static sc_status_t (*real_alloc)(size_t bytes, void **p_host);

static sc_status_t alloc_or_fail(size_t bytes, void **p_host)
{
	allocs++;
	return fail_alloc ? SC_ERR_SYSTEM : real_alloc(bytes, p_host);
}

/* The host build's functions (gpu_fns.h), their allocations counted or failed. */
static void gpu_ops(scd_device_ops_t *ops)
{
	scd_cuda_fns_t f = gpu_linked_fns();
	real_alloc = f.alloc;
	f.alloc = alloc_or_fail;
	scd_cuda_ops_fill(&f, ops, NULL, 0);
}

/* A cuda tensor's item on the engine GPU: n_src trainers' dense sources src[], top-k
 * with a residual dres, for the submission token. */
static scd_job_item_t gpu_item(const char *name, uint32_t cache_id, float *dres, uint64_t token,
			       int n_src, float *const *src)
{
	scd_job_item_t it = {.name = name,
			     .numel = PN,
			     .op = SC_OP_SUM,
			     .cache_id = cache_id,
			     .sparsifier = SC_SPARSIFY_TOPK,
			     .density = 0.02,
			     .residual = dres,
			     .presel_token = token,
			     .n_src = n_src};
	for (int s = 0; s < n_src; s++)
		it.src[s] = (scd_job_src_t){.device = SCD_DEVICE_CUDA,
					    .ordinal = scd_device_home(SCD_DEVICE_CUDA),
					    .dense = src[s],
					    .local_rank = s};
	return it;
}

/* The selection job of it. */
static scd_job_t presel_job(scd_job_item_t *it)
{
	return (scd_job_t){.kind = SCD_JOB_PRESELECT,
			   .n_items = 1,
			   .items = it,
			   .total_numel = PN,
			   .dtype = SC_FLOAT32,
			   .world_seed = 7};
}

/* The compute stage's context on dev, every source on the engine GPU (pe empty). */
static scd_coll_ctx_t gpu_ctx(const scd_device_ops_t *dev, scd_presel_table_t *tab,
			      scd_stage_t *pe, scd_fault_t *fault)
{
	return (scd_coll_ctx_t){.kind = SCD_DEVICE_CUDA,
				.dev = dev,
				.pe = pe,
				.presel = tab,
				.nonfinite = SCD_NONFINITE_PASS,
				.fault = fault};
}

UNIT_TEST(gpu_presel_as_at_the_buffer)
{
	scd_device_ops_t ops;
	gpu_ops(&ops);
	const scd_device_ops_t *dev = &ops;
	static float h0[PN], h1[PN], hres[PN], got[PN], want[PN];
	static uint32_t got_i[PN], want_i[PN];
	fill(h0, 1, 1e-3f);
	fill(h1, 2, 1e-3f);
	fill(hres, 3, 1e-5f);
	size_t bytes = PN * sizeof(float);
	float *d0 = dev->alloc(bytes), *d1 = dev->alloc(bytes), *dres = dev->alloc(bytes);
	CHECK_TRUE(d0 && d1 && dres);
	dev->from_host(d0, h0, bytes);
	dev->from_host(d1, h1, bytes);
	dev->from_host(dres, hres, bytes);
	OK(dev->sync());
	scd_job_item_t it = gpu_item("gpu.w", 4, dres, 77, 2, (float *[]){d0, d1});
	CHECK_TRUE(scd_presel_applies(&it));
	scd_presel_table_t *tab = NULL;
	OK(scd_presel_table_create(256, &tab));
	/* an entry the tensor had on the cpu (it moved): made anew on the GPU */
	scd_presel_t *p = NULL;
	OK(scd_presel_entry(tab, &it, &scd_device_cpu_ops, 7, &p));
	CHECK_TRUE(p->dev == &scd_device_cpu_ops && scd_presel_count(tab) == 1);

	scd_job_t job = presel_job(&it);
	scd_stage_t pe = {0};
	scd_fault_t fault = {0};
	scd_coll_ctx_t x = gpu_ctx(dev, tab, &pe, &fault);
	sc_status_t st = scd_allreduce_preselect(&x, tab, &job);
	CHECK_MSG(st == SC_OK, "%s: %s", sc_status_name(st), job.error);
	CHECK_TRUE(scd_presel_count(tab) == 1);
	/* its buffer does not wait for the ready events again (under any cache id), another
	 * submission's does */
	scd_job_item_t plan = it;
	CHECK_TRUE(scd_presel_waited(tab, &plan));
	plan.cache_id = 9;
	CHECK_TRUE(scd_presel_waited(tab, &plan));
	plan.presel_token = 76;
	CHECK_TRUE(!scd_presel_waited(tab, &plan));
	read_back(dev, got, dres, PN);
	CHECK_MSG(!memcmp(got, hres, bytes), "the selection at submission wrote the residual");

	/* the buffer's local sum and selection, with the same ops */
	float *sum = dev->alloc(bytes), *rres = dev->alloc(bytes);
	scd_coo_t sel = {.idx = dev->alloc(PN * 4), .val = dev->alloc(bytes), .cap = PN};
	CHECK_TRUE(sum && rres && sel.idx && sel.val);
	dev->copy(sum, d0, bytes);
	dev->reduce_typed(SC_FLOAT32, SC_OP_SUM, sum, d1, PN);
	dev->copy(rres, dres, bytes);
	scd_sparsifier_cfg_t cfg = {.kind = SCD_SPARSIFY_TOPK,
				    .numel = PN,
				    .density = 0.02,
				    .seed = 7 ^ 4,
				    .block = 256};
	scd_sparsifier_t *sp = NULL;
	OK(dev->sparsifier_create(&cfg, &sp));
	OK(dev->sparsify(sp, sum, rres, PN, &sel, NULL));
	OK(dev->sync());
	CHECK_TRUE(sel.nnz == 100);

	/* a buffer on the cpu does not take it; the GPU's does, once */
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 7) == NULL);
	p = scd_presel_take(tab, &it, dev, 7);
	CHECK_TRUE(p && p->dev == dev && p->token == 77 && p->has_res);
	CHECK_TRUE(scd_presel_take(tab, &it, dev, 7) == NULL);
	CHECK_EQ_INT((int)p->sel.nnz, (int)sel.nnz);
	read_back(dev, (float *)got_i, p->sel.idx, sel.nnz);
	read_back(dev, (float *)want_i, sel.idx, sel.nnz);
	CHECK_MSG(!memcmp(got_i, want_i, sel.nnz * 4), "the selected indices differ");
	read_back(dev, got, p->sel.val, sel.nnz);
	read_back(dev, want, sel.val, sel.nnz);
	CHECK_MSG(!memcmp(got, want, sel.nnz * 4), "the selected values differ");
	read_back(dev, got, p->res, PN);
	read_back(dev, want, rres, PN);
	CHECK_MSG(!memcmp(got, want, bytes), "the residuals the selections leave differ");

	/* block top-K runs on the cpu device only: nothing made, not even for a moment (it is
	 * asked for at every submission), the buffer says why */
	scd_presel_clear(tab);
	it.sparsifier = SC_SPARSIFY_BLOCK_TOPK;
	it.presel_token = 78;
	allocs = 0;
	OK(scd_allreduce_preselect(&x, tab, &job));
	CHECK_TRUE(scd_presel_count(tab) == 0);
	CHECK_MSG(allocs == 0, "%d allocations of the device for a selection it cannot make",
		  allocs);

	dev->sparsifier_destroy(sp);
	scd_presel_table_destroy(tab);
	for (void **m = (void *[]){d0, d1, dres, sum, rres, sel.idx, sel.val, NULL}; *m; m++)
		dev->free(*m);
	OK(dev->sync());
}

/* A selection whose device failed under it (here its entry's allocation) fails with the
 * device's failure and leaves nothing behind: no entry, the residual as it was, and no
 * failure kept for the device's next sync, which is another job's. */
UNIT_TEST(gpu_presel_failure_is_its_own)
{
	scd_device_ops_t ops;
	gpu_ops(&ops);
	const scd_device_ops_t *dev = &ops;
	static float h0[PN], hres[PN], got[PN];
	fill(h0, 4, 1e-3f);
	fill(hres, 5, 1e-5f);
	size_t bytes = PN * sizeof(float);
	float *d0 = dev->alloc(bytes), *dres = dev->alloc(bytes);
	CHECK_TRUE(d0 && dres);
	dev->from_host(d0, h0, bytes);
	dev->from_host(dres, hres, bytes);
	OK(dev->sync());
	scd_job_item_t it = gpu_item("gpu.f", 5, dres, 80, 1, &d0);
	scd_job_t job = presel_job(&it);
	scd_presel_table_t *tab = NULL;
	OK(scd_presel_table_create(256, &tab));
	scd_stage_t pe = {0};
	scd_fault_t fault = {0};
	scd_coll_ctx_t x = gpu_ctx(dev, tab, &pe, &fault);
	fail_alloc = 1;
	sc_status_t st = scd_allreduce_preselect(&x, tab, &job);
	fail_alloc = 0;
	CHECK_MSG(st == SC_ERR_SYSTEM, "%s: %s", sc_status_name(st), job.error);
	CHECK_MSG(strstr(job.error, "'gpu.f'") && !strstr(job.error, "out of memory"), "%s",
		  job.error);
	CHECK_TRUE(scd_presel_count(tab) == 0 && !scd_presel_waited(tab, &it));
	st = dev->sync();
	CHECK_MSG(st == SC_OK, "the next job's sync returned the selection's failure: %s",
		  sc_status_name(st));
	read_back(dev, got, dres, PN);
	CHECK_MSG(!memcmp(got, hres, bytes), "the failed selection wrote the residual");

	/* the device works again: the next selection is made */
	OK(scd_allreduce_preselect(&x, tab, &job));
	CHECK_TRUE(scd_presel_count(tab) == 1 && scd_presel_waited(tab, &it));
	scd_presel_table_destroy(tab);
	dev->free(d0);
	dev->free(dres);
	OK(dev->sync());
}
