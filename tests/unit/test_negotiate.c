/* test_negotiate.c: plans from the network checked before they touch the response cache. */
#include <string.h>

#include "unit.h"
#include "world/world_int.h"

/* A plan of the given new entries (ids) and one allreduce response naming ids. */
typedef struct plan_fixture {
	Sparsecomm__Plan plan;
	Sparsecomm__CacheEntry ents[4], *pents[4];
	Sparsecomm__Response resp, *presp[1];
	uint32_t ids[4];
} plan_fixture_t;

static void plan_make(plan_fixture_t *f, const uint32_t *ent_ids, size_t n_ents,
		      const uint32_t *ids, size_t n_ids)
{
	static const char *names[4] = {"a", "b", "c", "d"};
	sparsecomm__plan__init(&f->plan);
	for (size_t i = 0; i < n_ents; i++) {
		sparsecomm__cache_entry__init(&f->ents[i]);
		f->ents[i].id = ent_ids[i];
		f->ents[i].name = (char *)names[i];
		f->ents[i].numel = 16;
		f->pents[i] = &f->ents[i];
	}
	sparsecomm__response__init(&f->resp);
	f->resp.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	memcpy(f->ids, ids, n_ids * sizeof(uint32_t));
	f->resp.cache_ids = f->ids;
	f->resp.n_cache_ids = n_ids;
	f->presp[0] = &f->resp;
	f->plan.cycle = 7;
	f->plan.new_entries = f->pents;
	f->plan.n_new_entries = n_ents;
	f->plan.responses = f->presp;
	f->plan.n_responses = 1;
}

UNIT_TEST(negotiate_plan_cache_ids_are_bounds_checked)
{
	scd_world_t *w = calloc(1, sizeof(*w));
	static scd_daemon_t d = {.world_size = 2, .local_size = 1};
	CHECK_TRUE(w != NULL);
	w->d = &d; /* the job's trainers, against which the plan's words are checked */
	char err[200] = "";
	plan_fixture_t f;
	/* a new entry far past the cache */
	plan_make(&f, (uint32_t[]){0x7ffffff0u}, 1, (uint32_t[]){0}, 1);
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "new cache entry 0 has id 2147483632"), "error: %s", err);
	/* a response naming an id nobody cached */
	plan_make(&f, (uint32_t[]){0, 1}, 2, (uint32_t[]){1, 0x7ffffff0u}, 2);
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "cache id 2147483632"), "error: %s", err);
	/* ids in sequence, and responses naming them: accepted and cached */
	plan_make(&f, (uint32_t[]){0, 1}, 2, (uint32_t[]){1, 0}, 2);
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_neg_plan_entries(w, &f.plan), SC_OK);
	CHECK_TRUE(w->n_cache == 2 && !strcmp(scd_cache_get(w, 1)->name, "b"));
	/* the next plan may name them, reuse an id, or add the next one; not skip one */
	plan_make(&f, (uint32_t[]){1, 2}, 2, (uint32_t[]){2, 0}, 2);
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_OK);
	plan_make(&f, (uint32_t[]){3}, 1, (uint32_t[]){0}, 1);
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "has id 3, the cache 2 entries"), "error: %s", err);
	/* a new entry whose word names no collective of the job: a reduce-scatter in rows of
	 * 0 elements, a broadcast from a root that is no rank (2 trainers) */
	uint32_t bad[] = {SCD_OP_REDUCESCATTER | 0u << 3 | SC_OP_SUM, SCD_OP_BROADCAST | 2u};
	for (int k = 0; k < 2; k++) {
		plan_make(&f, (uint32_t[]){2}, 1, (uint32_t[]){2}, 1);
		f.ents[0].op = bad[k];
		CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_ERR_PROTOCOL);
		CHECK_MSG(strstr(err, "names no collective"), "error: %s", err);
	}
	plan_make(&f, (uint32_t[]){2}, 1, (uint32_t[]){2}, 1);
	f.ents[0].op = SCD_OP_BROADCAST | 1u;
	CHECK_EQ_INT(scd_neg_plan_check(w, &f.plan, err, sizeof(err)), SC_OK);
	scd_neg_destroy(w);
	free(w);
}

/* The coordinator caches new entries when it plans, so it reached the response's ids
 * unchecked: a plan naming 0x7ffffff0 is refused before anything reads the cache. */
UNIT_TEST(negotiate_plan_on_coordinator_refuses_unknown_cache_id)
{
	scd_world_t *w = calloc(1, sizeof(*w));
	static scd_daemon_t d = {.world_size = 2, .local_size = 1};
	CHECK_TRUE(w != NULL);
	w->d = &d; /* the job's trainers, against which the plan's words are checked */
	w->is_coord = 1;
	plan_fixture_t f;
	plan_make(&f, NULL, 0, (uint32_t[]){0x7ffffff0u}, 1);
	CHECK_EQ_INT(scd_neg_on_plan(w, &f.plan), SC_ERR_PROTOCOL);
	CHECK_TRUE(w->n_cache == 0);
	scd_neg_destroy(w);
	free(w);
}
