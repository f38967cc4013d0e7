/*
 * test_presel.c: the table of selections made at submission (coll/presel.c): a selection
 * is taken only by its own submission (token) with the options it was made with, once;
 * the table keeps no entry for a tensor whose submission came without a selection ahead
 * (sparsify_on_submit turned off) nor across a re-formed world; a first step's
 * speculative selection is taken only by its own plan; on the host, the room for a whole
 * selection is resident only as far as the selections reach.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coll/presel.h"
#include "unit.h"

#define N 64

static void item_init(scd_job_item_t *it, uint32_t cache_id, float *buf, float *res)
{
	memset(it, 0, sizeof(*it));
	it->cache_id = cache_id;
	it->numel = N;
	it->sparsifier = SC_SPARSIFY_TOPK;
	it->density = 0.125;
	it->residual = res;
	it->src[0] = (scd_job_src_t){.device = SCD_DEVICE_CPU, .dense = buf};
	it->n_src = 1;
}

/* An entry for it selected for token over x[i] = i - 32 (top-k keeps the largest
 * magnitudes). */
static scd_presel_t *selected(scd_presel_table_t *tab, scd_job_item_t *it, uint64_t token)
{
	scd_presel_t *p = NULL;
	CHECK_TRUE(scd_presel_entry(tab, it, &scd_device_cpu_ops, 7, &p) == SC_OK && p);
	for (int i = 0; i < N; i++)
		p->acc[i] = (float)(i - 32);
	it->presel_token = token;
	CHECK_TRUE(scd_presel_select(p, it, p->acc) == SC_OK);
	CHECK_TRUE(p->sel.nnz == (uint64_t)(it->density * N));
	return p;
}

UNIT_TEST(presel_taken_once_by_its_own_submission)
{
	scd_presel_table_t *tab = NULL;
	CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
	float buf[N] = {0}, res[N] = {0};
	scd_job_item_t it;
	item_init(&it, 3, buf, res);
	CHECK_TRUE(scd_presel_applies(&it));
	scd_presel_t *p = selected(tab, &it, 11);
	/* another submission's token, or other options: not taken */
	it.presel_token = 12;
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 7) == NULL);
	it.presel_token = 11;
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 8) ==
		   NULL); /* another world's seed */
	it.density = 0.25;
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 7) == NULL);
	it.density = 0.125;
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 7) == p);
	CHECK_TRUE(scd_presel_take(tab, &it, &scd_device_cpu_ops, 7) == NULL); /* once */
	scd_presel_table_destroy(tab);
}

UNIT_TEST(presel_keeps_no_entry_without_selection_ahead)
{
	scd_presel_table_t *tab = NULL;
	CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
	float buf[N] = {0}, res[N] = {0};
	scd_job_item_t a, b;
	item_init(&a, 1, buf, res);
	item_init(&b, 2, buf, res);
	selected(tab, &a, 21);
	selected(tab, &b, 22);
	CHECK_TRUE(scd_presel_count(tab) == 2);
	/* a's next submission came without a selection ahead (the key turned off): its
	 * buffer selects it itself, and its entry (8 bytes an element) goes */
	a.presel_token = 0;
	CHECK_TRUE(scd_presel_take(tab, &a, &scd_device_cpu_ops, 7) == NULL);
	CHECK_TRUE(scd_presel_count(tab) == 1);
	CHECK_TRUE(scd_presel_take(tab, &b, &scd_device_cpu_ops, 7) != NULL);
	/* a re-formed world numbers cache ids anew: nothing kept */
	scd_presel_clear(tab);
	CHECK_TRUE(scd_presel_count(tab) == 0);
	CHECK_TRUE(scd_presel_take(tab, &b, &scd_device_cpu_ops, 7) == NULL);
	scd_presel_table_destroy(tab);
}

/* The index by cache id: 200 tensors, ids chosen to collide in a small index (multiples
 * of 64) and spread; each found as its own after the table grew, after entries went from
 * the middle, and after an entry was made anew for new options. */
UNIT_TEST(presel_index_finds_each_tensor_its_own_entry)
{
	enum { T = 200 };
	scd_presel_table_t *tab = NULL;
	CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
	static float buf[N], res[T][N];
	static scd_job_item_t it[T];
	scd_presel_t *p[T];
	for (int t = 0; t < T; t++) {
		item_init(&it[t], t % 2 ? (uint32_t)t * 64 : (uint32_t)t * 7919 + 5, buf,
			  res[t]);
		p[t] = selected(tab, &it[t], 1000 + (uint64_t)t);
	}
	CHECK_TRUE(scd_presel_count(tab) == T);
	for (int t = 0; t < T; t += 3)
		scd_presel_forget(tab, it[t].cache_id);
	it[1].density = 0.25; /* made anew: another entry for the same id */
	scd_presel_t *q = selected(tab, &it[1], 1001);
	CHECK_TRUE(scd_presel_count(tab) == T - (T + 2) / 3);
	for (int t = 0; t < T; t++) {
		scd_presel_t *got = scd_presel_take(tab, &it[t], &scd_device_cpu_ops, 7);
		if (t % 3 == 0) {
			CHECK_TRUE(got == NULL);
			continue;
		}
		CHECK_TRUE(got == (t == 1 ? q : p[t]));
		CHECK_TRUE(got && got->cache_id == it[t].cache_id &&
			   got->token == 1000 + (uint64_t)t);
	}
	scd_presel_table_destroy(tab);
}

/* A tensor's first step (coll/presel.h): selected speculatively (no cache id) under its
 * node tensor's key, taken by its submission's buffer only with the options it was made
 * with, then the entry of the plan's cache id (its next step's selection reuses it); one
 * the plan disagrees with is freed, one never taken is replaced by the tensor's next,
 * dropped by a selection of the tensor under its cache id, and by a re-formed world. DGC
 * is never speculative. */
UNIT_TEST(presel_first_step_speculative_taken_only_by_its_plan)
{
	scd_presel_table_t *tab = NULL;
	CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
	float buf[N] = {0}, res[N] = {0};
	scd_job_item_t sub, plan;
	item_init(&sub, SCD_PRESEL_SPEC, buf, res);
	sub.presel_key = 5;
	scd_presel_t *p = selected(tab, &sub, 31);
	CHECK_TRUE(p->cache_id == SCD_PRESEL_SPEC && scd_presel_count(tab) == 1);
	/* the buffer's item: the plan's cache id, the same submission and options */
	plan = sub;
	plan.cache_id = 9;
	plan.presel_token = 32; /* another submission's: not taken, kept */
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == NULL &&
		   scd_presel_count(tab) == 1);
	plan.presel_token = 31;
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == p);
	CHECK_TRUE(p->cache_id == 9 && p->spec_key == 0 && scd_presel_count(tab) == 1);
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == NULL); /* once */
	scd_presel_t *q = selected(tab, &plan, 33); /* its next step: the same entry */
	CHECK_TRUE(q == p && scd_presel_count(tab) == 1);

	/* the plan agreed on other options, or it is another world's: freed, not taken */
	sub.presel_key = 6;
	selected(tab, &sub, 41);
	plan = sub;
	plan.cache_id = 10;
	plan.presel_token = 41;
	plan.density = 0.25;
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == NULL &&
		   scd_presel_count(tab) == 1);
	selected(tab, &sub, 42);
	plan.presel_token = 42;
	plan.density = sub.density;
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 8) == NULL &&
		   scd_presel_count(tab) == 1);

	/* never taken (the step failed): the tensor's next one replaces it, a selection
	 * under its cache id drops it */
	sub.presel_key = 7;
	selected(tab, &sub, 51);
	selected(tab, &sub, 52);
	CHECK_TRUE(scd_presel_count(tab) == 2);
	plan = sub;
	plan.cache_id = 11;
	selected(tab, &plan, 53);
	CHECK_TRUE(scd_presel_count(tab) == 2); /* 9's and 11's */
	plan.presel_token = 52;
	plan.cache_id = 12;
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == NULL);

	/* never taken, and the tensor released: its forget drops it by its key alone */
	sub.presel_key = 9;
	selected(tab, &sub, 55);
	CHECK_TRUE(scd_presel_count(tab) == 3);
	scd_presel_forget_key(tab, 0);	/* none */
	scd_presel_forget_key(tab, 10); /* another tensor's */
	CHECK_TRUE(scd_presel_count(tab) == 3);
	scd_presel_forget_key(tab, 9);
	CHECK_TRUE(scd_presel_count(tab) == 2);

	sub.presel_key = 8;
	selected(tab, &sub, 61);
	CHECK_TRUE(scd_presel_count(tab) == 3);
	scd_presel_clear(tab); /* a re-formed world */
	CHECK_TRUE(scd_presel_count(tab) == 0);
	plan = sub;
	plan.cache_id = 13;
	plan.presel_token = 61;
	CHECK_TRUE(scd_presel_take(tab, &plan, &scd_device_cpu_ops, 7) == NULL);

	sub.sparsifier = SC_SPARSIFY_DGC; /* its sample's seed needs the cache id */
	CHECK_TRUE(scd_presel_entry(tab, &sub, &scd_device_cpu_ops, 7, &p) == SC_ERR_INVALID);
	scd_presel_table_destroy(tab);
}

/* The share of the pages of [p, p + bytes) resident in memory. */
static double resident(const void *p, size_t bytes)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(pg - 1);
	size_t n = ((uintptr_t)p + bytes - lo + pg - 1) / pg;
	unsigned char *v = malloc(n);
	CHECK_TRUE(v && mincore((void *)lo, n * pg, v) == 0);
	size_t in = 0;
	for (size_t i = 0; i < n; i++)
		in += v[i] & 1;
	free(v);
	return (double)in / (double)n;
}

/* A host tensor's entry: the node's sum is written whole, the room for its selection only
 * as far as a 1% top-k reaches, so that most of that room never becomes resident memory
 * (8 bytes per element of every sparsified tensor, allocated, not used). */
UNIT_TEST(presel_host_room_resident_as_far_as_used)
{
	enum { BIG = 1 << 24 }; /* 64 MiB arrays: past malloc's largest mmap threshold */
	scd_presel_table_t *tab = NULL;
	CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
	scd_job_item_t it;
	item_init(&it, 5, NULL, NULL);
	it.numel = BIG;
	it.density = 0.01;
	scd_presel_t *p = NULL;
	CHECK_TRUE(scd_presel_entry(tab, &it, &scd_device_cpu_ops, 7, &p) == SC_OK && p);
	for (uint32_t i = 0; i < BIG; i++) /* distinct magnitudes, the largest last */
		p->acc[i] = (float)i * (i & 1 ? 1.0f : -1.0f);
	it.presel_token = 21;
	CHECK_TRUE(scd_presel_select(p, &it, p->acc) == SC_OK);
	CHECK_TRUE(p->sel.nnz > 0 && p->sel.nnz <= BIG / 50);
	CHECK_TRUE(p->sel.idx[p->sel.nnz - 1] == BIG - 1);
	double ri = resident(p->sel.idx, (size_t)BIG * 4),
	       rv = resident(p->sel.val, (size_t)BIG * 4);
	CHECK_MSG(ri < 0.25 && rv < 0.25,
		  "%.0f%% and %.0f%% of the room for the selection's indices and values are "
		  "resident after a 1%% selection",
		  ri * 100, rv * 100);
	scd_presel_table_destroy(tab);
}

/* A selection over a trainer's buffer read where it lies, and its residual: both stay as
 * they were (a step that fails leaves the residual whole), and the selection and the
 * residual it leaves are bit for bit those of the sparsifier's fused pass over copies of
 * them (acc = fl(input + residual), selected, the rest the new residual), for each kind. */
UNIT_TEST(presel_reads_input_and_residual_in_place_bit_exact)
{
	enum { M = 5000 };
	static float g[M], r[M], g0[M], r0[M], res_ref[M];
	static uint32_t idx_ref[M];
	static float val_ref[M];
	uint64_t s = 42;
	for (int i = 0; i < M; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		g[i] = (float)((int64_t)(s >> 33) % 2001 - 1000) / 317.0f;
		r[i] = i % 3 ? (float)((int64_t)(s >> 13) % 201 - 100) / 1013.0f : 0.0f;
	}
	g[7] = -0.0f, r[7] = -0.0f; /* a negative zero sum: never selected, kept as is */
	memcpy(g0, g, sizeof(g));
	memcpy(r0, r, sizeof(r));
	const sc_sparsifier_t kinds[] = {SC_SPARSIFY_TOPK, SC_SPARSIFY_THRESHOLD,
					 SC_SPARSIFY_DGC, SC_SPARSIFY_BLOCK_TOPK};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		scd_presel_table_t *tab = NULL;
		CHECK_TRUE(scd_presel_table_create(256, &tab) == SC_OK);
		scd_job_item_t it;
		item_init(&it, 9, g, r);
		it.numel = M;
		it.sparsifier = kinds[k];
		it.density = 0.02;
		it.threshold = 2.5;
		scd_presel_t *p = NULL;
		CHECK_TRUE(scd_presel_entry(tab, &it, &scd_device_cpu_ops, 7, &p) == SC_OK &&
			   p);
		/* the reference: the fused pass over copies, by a sparsifier of the same
		 * options (the same DGC sample) */
		scd_sparsifier_t *sp = NULL;
		CHECK_TRUE(scd_sparsifier_create(&p->cfg, &sp) == SC_OK);
		memcpy(res_ref, r, sizeof(r));
		scd_coo_t ref = {.idx = idx_ref, .val = val_ref, .cap = M};
		CHECK_TRUE(scd_sparsify(sp, g, res_ref, M, &ref, NULL) == SC_OK);
		scd_sparsifier_destroy(sp);
		it.presel_token = 30 + k;
		CHECK_TRUE(scd_presel_select(p, &it, g) == SC_OK);
		CHECK_MSG(!memcmp(g, g0, sizeof(g)) && !memcmp(r, r0, sizeof(r)),
			  "kind %zu: the selection wrote the trainer's buffer or residual", k);
		CHECK_MSG(ref.nnz > 0 && p->sel.nnz == ref.nnz &&
			      !memcmp(p->sel.idx, ref.idx, ref.nnz * sizeof(uint32_t)) &&
			      !memcmp(p->sel.val, ref.val, ref.nnz * sizeof(float)),
			  "kind %zu: %llu selected, the fused pass %llu (or other entries)", k,
			  (unsigned long long)p->sel.nnz, (unsigned long long)ref.nnz);
		CHECK_MSG(!memcmp(p->res, res_ref, sizeof(res_ref)),
			  "kind %zu: the residual left differs from the fused pass's", k);
		scd_presel_table_destroy(tab);
	}
}
