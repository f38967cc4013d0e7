/*
 * test_presel.c: the table of selections made at submission (coll/presel.c): a selection
 * is taken only by its own submission (token) with the options it was made with, once;
 * the table keeps no entry for a tensor whose submission came without a selection ahead
 * (sparsify_on_submit turned off) nor across a re-formed world.
 */
#include <string.h>

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
	CHECK_TRUE(scd_presel_entry(tab, it, 7, &p) == SC_OK && p);
	for (int i = 0; i < N; i++)
		p->acc[i] = (float)(i - 32);
	it->presel_token = token;
	CHECK_TRUE(scd_presel_select(p, it) == SC_OK);
	CHECK_TRUE(p->sel.nnz == N / 8);
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
	CHECK_TRUE(scd_presel_take(tab, &it, 7) == NULL);
	it.presel_token = 11;
	CHECK_TRUE(scd_presel_take(tab, &it, 8) == NULL); /* another world's seed */
	it.density = 0.25;
	CHECK_TRUE(scd_presel_take(tab, &it, 7) == NULL);
	it.density = 0.125;
	CHECK_TRUE(scd_presel_take(tab, &it, 7) == p);
	CHECK_TRUE(scd_presel_take(tab, &it, 7) == NULL); /* once */
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
	CHECK_TRUE(scd_presel_take(tab, &a, 7) == NULL);
	CHECK_TRUE(scd_presel_count(tab) == 1);
	CHECK_TRUE(scd_presel_take(tab, &b, 7) != NULL);
	/* a re-formed world numbers cache ids anew: nothing kept */
	scd_presel_clear(tab);
	CHECK_TRUE(scd_presel_count(tab) == 0);
	CHECK_TRUE(scd_presel_take(tab, &b, 7) == NULL);
	scd_presel_table_destroy(tab);
}
