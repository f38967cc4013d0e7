/*
 * test_cache_evict.c: the response cache's bound (world/cache.c). The coordinator picks
 * the least recently used entries past cache_max_entries, never one its plan uses or a
 * pending name holds; a plan's evictions are checked, and every rank drops them: the ids
 * never come back, and the name takes a new id. An announcement by an evicted id is
 * dropped by the coordinator (its node announces again in full), one by an id never
 * assigned is not taken either.
 */
#include <string.h>

#include "unit.h"
#include "world/world_int.h"

static scd_tsig_t sig0;

/* A world of 2 nodes (coordinator or not) with cache_max_entries max and n entries
 * "t<i>" of ids 0 .. n - 1, entry i last used at cycle i + 1. */
static scd_world_t *world_with(scd_daemon_t *d, int coord, int64_t max, uint32_t n)
{
	memset(d, 0, sizeof(*d));
	d->world_size = 2, d->local_size = 1;
	scd_config_init(&d->cfg);
	d->cfg.ival[SCD_CFG_cache_max_entries] = max;
	scd_world_t *w = calloc(1, sizeof(*w));
	CHECK_TRUE(w != NULL);
	w->d = d;
	w->is_coord = coord;
	scd_fplan_state_init(&w->fplan, d->world_size);
	for (uint32_t i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "t%u", i);
		CHECK_EQ_INT(scd_cache_set(w, i, name, SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
			     SC_OK);
		scd_cache_get(w, i)->used_cycle = i + 1;
	}
	return w;
}

static void world_free(scd_daemon_t *d, scd_world_t *w)
{
	scd_neg_destroy(w);
	free(w);
	scd_config_free(&d->cfg);
}

static int has(const uint32_t *ids, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return 1;
	return 0;
}

UNIT_TEST(cache_evict_picks_least_recently_used_not_in_use)
{
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 1, 8, 8);
	uint32_t *ids = NULL;
	/* at the bound: nothing goes */
	CHECK_EQ_INT((int)scd_cache_evict_pick(w, 20, &ids), 0);
	CHECK_TRUE(ids == NULL);
	CHECK_EQ_INT(scd_cache_set(w, 8, "t8", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0), SC_OK);
	CHECK_EQ_INT(scd_cache_set(w, 9, "t9", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0), SC_OK);
	CHECK_EQ_INT((int)w->n_live, 10);
	/* the plan of cycle 20 uses t9 and t2; t0 is pending (touched); t8 is new in it */
	scd_cache_get(w, 9)->used_cycle = 20;
	scd_cache_get(w, 8)->used_cycle = 20;
	scd_cache_get(w, 2)->used_cycle = 20;
	scd_cache_touch(w, "t0", 20);
	size_t n = scd_cache_evict_pick(w, 20, &ids);
	/* down to 8 less an eighth: 3 of 10, the least recently used of the others */
	CHECK_EQ_INT((int)n, 3);
	CHECK_MSG(has(ids, n, 1) && has(ids, n, 3) && has(ids, n, 4), "picked %u %u %u", ids[0],
		  ids[1], ids[2]);
	free(ids);
	world_free(&d, w);
}

UNIT_TEST(cache_evict_pick_of_a_large_table)
{
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 1, 1000, 1500);
	uint32_t *ids = NULL;
	size_t n = scd_cache_evict_pick(w, 5000, &ids);
	CHECK_EQ_INT((int)n, 1500 - (1000 - 125));
	for (size_t i = 0; i < n; i++) /* the oldest, in order */
		CHECK_EQ_INT((int)ids[i], (int)i);
	free(ids);
	world_free(&d, w);
}

/* A plan evicting ids: checked, then every rank drops them after the responses; an id
 * never comes back, and the name takes the next one. */
UNIT_TEST(cache_evict_plan_on_a_node)
{
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 0, 4, 6);
	char err[200] = "";
	uint32_t resp_ids[] = {5}, evicted[] = {1, 3};
	Sparsecomm__Response resp = SPARSECOMM__RESPONSE__INIT, *presp[] = {&resp};
	resp.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	resp.cache_ids = resp_ids;
	resp.n_cache_ids = 1;
	Sparsecomm__Plan plan = SPARSECOMM__PLAN__INIT;
	plan.cycle = 9;
	plan.responses = presp;
	plan.n_responses = 1;
	plan.evicted = evicted;
	plan.n_evicted = 2;
	/* an id its own response names, or one the cache does not hold: refused */
	evicted[1] = 5;
	CHECK_EQ_INT(scd_neg_plan_check(w, &plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "evicts cache id 5, which one of its responses names"), "%s",
		  err);
	evicted[1] = 6;
	CHECK_EQ_INT(scd_neg_plan_check(w, &plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "evicts cache id 6, which the cache does not hold"), "%s", err);
	evicted[1] = 3;
	CHECK_EQ_INT(scd_neg_plan_check(w, &plan, err, sizeof(err)), SC_OK);
	for (size_t i = 0; i < plan.n_evicted; i++)
		scd_cache_evict(w, plan.evicted[i]);
	CHECK_EQ_INT((int)w->n_live, 4);
	CHECK_TRUE(!scd_cache_get(w, 1) && !scd_cache_get(w, 3));
	CHECK_TRUE(scd_cache_get(w, 0) && scd_cache_get(w, 2) && scd_cache_get(w, 4) &&
		   scd_cache_get(w, 5));
	CHECK_EQ_INT((int)scd_cache_lookup(w, "t1"), (int)UINT32_MAX);
	CHECK_EQ_INT((int)scd_cache_match(w, "t3", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
		     (int)UINT32_MAX);
	/* the form comes back: a new id; its old one is never given again, to any name */
	CHECK_EQ_INT(scd_cache_set(w, 1, "t1", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
		     SC_ERR_PROTOCOL);
	CHECK_EQ_INT(scd_cache_set(w, 6, "t1", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0), SC_OK);
	CHECK_EQ_INT((int)scd_cache_lookup(w, "t1"), 6);
	/* a response naming an evicted id is refused */
	resp_ids[0] = 3;
	plan.n_evicted = 0;
	CHECK_EQ_INT(scd_neg_plan_check(w, &plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	/* the table stays whole through evictions that shift its runs: every id found */
	for (uint32_t id = 7; id < 300; id++) {
		char name[16];
		snprintf(name, sizeof(name), "u%u", id);
		CHECK_EQ_INT(scd_cache_set(w, id, name, SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
			     SC_OK);
		if (id % 3)
			scd_cache_evict(w, id - 1);
	}
	for (uint32_t id = 7; id < 300; id++) {
		int kept = !((id + 1) % 3) || id == 299;
		CHECK_MSG(!!scd_cache_get(w, id) == kept, "id %u %s", id,
			  kept ? "lost" : "still there");
		if (kept)
			CHECK_EQ_INT((int)scd_cache_get(w, id)->id, (int)id);
	}
	world_free(&d, w);
}

/* The coordinator drops an announcement by an id it evicted (its node announces the
 * tensor again in full) and takes the full one. */
UNIT_TEST(cache_evict_announcement_by_evicted_id_dropped)
{
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 1, 4, 3);
	w->formed = 1; /* (while the world re-forms it takes no announcement at all) */
	scd_cache_evict(w, 1);
	uint32_t ids[] = {1};
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	rl.rank = 1;
	rl.cached_ids = ids;
	rl.n_cached_ids = 1;
	scd_neg_ready_collect(w, 1, &rl);
	CHECK_TRUE(w->ehead == NULL);
	Sparsecomm__TensorSig msig = SPARSECOMM__TENSOR_SIG__INIT;
	scd_tsig_to_msg(&sig0, &msig);
	Sparsecomm__TensorRequest req = SPARSECOMM__TENSOR_REQUEST__INIT, *preq[] = {&req};
	req.name = "t1";
	req.dtype = SC_FLOAT32;
	req.numel = 16;
	req.op = SC_OP_SUM;
	req.sig = &msig;
	rl.n_cached_ids = 0;
	rl.requests = preq;
	rl.n_requests = 1;
	scd_neg_ready_collect(w, 1, &rl);
	CHECK_TRUE(w->ehead && !strcmp(w->ehead->name, "t1") && w->ehead->have[1] == 1);
	world_free(&d, w);
}

/* The table by id against a plain list: ids made in sequence, evicted at random (runs that
 * wrap past the table's end, growth while entries are gone), every id found or not as the
 * list says, with its name, after every change. */
UNIT_TEST(cache_table_random_evictions_match_a_list)
{
	enum { N = 3000 };
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 0, 1 << 20, 0);
	static uint8_t live[N];
	memset(live, 0, sizeof(live));
	uint32_t next = 0, n_live = 0, seed = 12345;
	for (int step = 0; step < 4 * N && next < N; step++) {
		seed = seed * 1103515245u + 12345u;
		if ((seed >> 16) % 3 || !n_live) { /* a new id */
			char name[16];
			snprintf(name, sizeof(name), "r%u", next);
			CHECK_EQ_INT(scd_cache_set(w, next, name, SC_FLOAT32, 16, SC_OP_SUM, 0,
						   0, &sig0),
				     SC_OK);
			live[next++] = 1;
			n_live++;
		} else { /* one of the live ones, at random */
			uint32_t id = (seed >> 8) % next;
			while (!live[id])
				id = (id + 1) % next;
			scd_cache_evict(w, id);
			live[id] = 0;
			n_live--;
		}
		CHECK_EQ_INT((int)w->n_live, (int)n_live);
		if (step % 97 && next < N)
			continue;
		for (uint32_t id = 0; id < next; id++) {
			const scd_cache_ent_t *c = scd_cache_get(w, id);
			CHECK_MSG(!!c == live[id], "step %d: id %u %s", step, id,
				  live[id] ? "lost" : "still there");
			if (c) {
				char name[16];
				snprintf(name, sizeof(name), "r%u", id);
				CHECK_MSG(c->id == id && !strcmp(c->name, name),
					  "step %d: id %u holds %u '%s'", step, id, c->id,
					  c->name);
				CHECK_EQ_INT((int)scd_cache_lookup(w, name), (int)id);
			}
		}
	}
	world_free(&d, w);
}

/* Ids are never given again: the last one, UINT32_MAX, means none, so the cache refuses
 * it rather than start again from 0 (which the ids of evicted entries would then name). */
UNIT_TEST(cache_ids_never_wrap)
{
	scd_daemon_t d;
	scd_world_t *w = world_with(&d, 0, 4, 1);
	scd_cache_evict(w, 0);
	w->n_cache = UINT32_MAX - 1;
	CHECK_EQ_INT(
	    scd_cache_set(w, UINT32_MAX - 1, "a", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
	    SC_OK);
	CHECK_EQ_INT((int)(w->n_cache == UINT32_MAX), 1);
	CHECK_TRUE(scd_cache_set(w, UINT32_MAX, "b", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0) !=
		   SC_OK);
	CHECK_EQ_INT((int)(w->n_cache == UINT32_MAX), 1);
	CHECK_TRUE(!scd_cache_get(w, UINT32_MAX));
	/* an evicted id stays refused */
	CHECK_EQ_INT(scd_cache_set(w, 0, "b", SC_FLOAT32, 16, SC_OP_SUM, 0, 0, &sig0),
		     SC_ERR_PROTOCOL);
	world_free(&d, w);
}
