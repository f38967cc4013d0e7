/*
 * cache.c: the response cache (world_int.h): every rank's table of the tensors it has
 * agreed on, by cache id, and each name's ids, one per form the name has had. A node
 * announces a tensor of a known form by its id alone; the coordinator gives a new form
 * a new id in its plan, and every rank lists the new ids in the plans' order, so that
 * every rank lets the same id go at the same place. Past cache_max_entries entries the
 * coordinator evicts the least recently planned in its plan (scd_cache_evict_pick), and
 * every rank drops them where the plan says (scd_cache_evict): ids grow without reuse, so
 * the entries live in a table by id, not an array indexed by it (docs/design.md,
 * "What every rank agrees on", "The cache's bound").
 */
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/tensor.h"
#include "engine/engine.h"
#include "util/log.h"
#include "util/psname.h"
#include "world/world_int.h"

uint32_t scd_world_hash_name(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h % SCD_WORLD_BUCKETS;
}

/* ---- the table by id ------------------------------------------------------------------ */

static uint32_t slot_home(const scd_world_t *w, uint32_t id)
{
	return (id * 2654435761u) & (w->cap_cache - 1);
}

scd_cache_ent_t *scd_cache_get(const scd_world_t *w, uint32_t id)
{
	if (!w->cap_cache)
		return NULL;
	for (uint32_t s = slot_home(w, id);; s = (s + 1) & (w->cap_cache - 1)) {
		scd_cache_ent_t *e = &w->cache[s];
		if (!e->name)
			return NULL;
		if (e->id == id)
			return e;
	}
}

/* A free slot for a new id (the table at most half full), or NULL out of memory. */
static scd_cache_ent_t *slot_new(scd_world_t *w, uint32_t id)
{
	if (2 * ((uint64_t)w->n_live + 1) > w->cap_cache) {
		uint32_t cap = w->cap_cache ? 2 * w->cap_cache : 256;
		scd_cache_ent_t *old = w->cache, *c = calloc(cap, sizeof(*c));
		if (!c)
			return NULL;
		uint32_t old_cap = w->cap_cache;
		w->cache = c;
		w->cap_cache = cap;
		for (uint32_t i = 0; i < old_cap; i++) {
			if (!old[i].name)
				continue;
			uint32_t s = slot_home(w, old[i].id);
			while (c[s].name)
				s = (s + 1) & (cap - 1);
			c[s] = old[i];
		}
		free(old);
	}
	uint32_t s = slot_home(w, id);
	while (w->cache[s].name)
		s = (s + 1) & (w->cap_cache - 1);
	memset(&w->cache[s], 0, sizeof(w->cache[s]));
	w->cache[s].id = id;
	return &w->cache[s];
}

/* Frees entry e and closes the gap it leaves in its run of slots (backward shift). */
static void slot_free(scd_world_t *w, scd_cache_ent_t *e)
{
	uint32_t mask = w->cap_cache - 1, i = (uint32_t)(e - w->cache);
	free(e->name);
	e->name = NULL;
	w->n_live--;
	for (uint32_t j = (i + 1) & mask; w->cache[j].name; j = (j + 1) & mask) {
		uint32_t k = slot_home(w, w->cache[j].id);
		/* the entry at j may move to i when its home is not in (i, j] */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		w->cache[i] = w->cache[j];
		w->cache[j].name = NULL;
		i = j;
	}
}

void scd_cache_free(scd_world_t *w)
{
	for (uint32_t i = 0; i < w->cap_cache; i++)
		free(w->cache[i].name);
	free(w->cache);
	w->cache = NULL;
	w->n_cache = w->cap_cache = w->n_live = 0;
}

/* ---- the response cache --------------------------------------------------------------- */

/*
 * A name keeps one cache id per set of attributes it has had (its options, its shape,
 * its operation ...): a tensor whose shape or operation alternates from step to step
 * takes its earlier ids again, so the cache holds as many ids for it as it has forms, not
 * one per change. The bucket's vector lists a name's ids in the order they were made,
 * which is the order of the plans' new entries, the same on every rank; so when a name
 * has SCD_CACHE_FORMS ids, every rank lets the same one go (its oldest) when a new form
 * comes, and forgets what the engine keeps for it. Every rank finds a name's ids by their
 * attributes (scd_cache_match).
 */
#define SCD_CACHE_FORMS 64

static void forget_job(scd_world_t *w, uint32_t id, uint64_t presel_key, int node_only);

/* The id last cached for name, or UINT32_MAX. */
uint32_t scd_cache_lookup(scd_world_t *w, const char *name)
{
	uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	if (!v)
		return UINT32_MAX;
	for (uint32_t i = v[0]; i >= 1; i--)
		if (!strcmp(scd_cache_get(w, v[i])->name, name))
			return v[i];
	return UINT32_MAX;
}

/* Whether cache entry c has exactly these attributes. */
int scd_cache_same(const scd_cache_ent_t *c, uint32_t dtype, uint64_t numel, uint32_t op,
		   int solo, uint32_t fuse_key, const scd_tsig_t *sig)
{
	return c->dtype == dtype && c->numel == numel && c->op == op && c->solo == solo &&
	       c->fuse_key == fuse_key && scd_tsig_equal(&c->sig, sig);
}

/* The id of name with these attributes, or UINT32_MAX. */
uint32_t scd_cache_match(scd_world_t *w, const char *name, uint32_t dtype, uint64_t numel,
			 uint32_t op, int solo, uint32_t fuse_key, const scd_tsig_t *sig)
{
	uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	for (uint32_t i = v ? v[0] : 0; i >= 1; i--) {
		const scd_cache_ent_t *c = scd_cache_get(w, v[i]);
		if (!strcmp(c->name, name) &&
		    scd_cache_same(c, dtype, numel, op, solo, fuse_key, sig))
			return v[i];
	}
	return UINT32_MAX;
}

/* Lists id, a new id of name, last in its bucket's vector; a name with SCD_CACHE_FORMS ids
 * lets its oldest go first (its cache entry stays, as a plan in flight may name it: a
 * form that comes back after it went is announced in full and takes a new id). */
static sc_status_t cache_list(scd_world_t *w, const char *name, uint32_t id)
{
	uint32_t **slot = &w->name_to_id[scd_world_hash_name(name)];
	uint32_t n = *slot ? (*slot)[0] : 0, forms = 0, oldest = 0;
	for (uint32_t i = 1; i <= n; i++) {
		if ((*slot)[i] == id)
			return SC_OK;
		if (!strcmp(scd_cache_get(w, (*slot)[i])->name, name) && !forms++)
			oldest = i;
	}
	if (forms >= SCD_CACHE_FORMS) { /* id takes the oldest's place, at the end */
		uint32_t gone = (*slot)[oldest];
		memmove(&(*slot)[oldest], &(*slot)[oldest + 1],
			sizeof(uint32_t) * (n - oldest));
		(*slot)[n] = id;
		scd_cache_get(w, gone)->listed =
		    0; /* (the least recently used: it goes next) */
		forget_job(w, gone, 0, 0);
		return SC_OK;
	}
	uint32_t *v = realloc(*slot, (n + 2) * sizeof(uint32_t));
	if (!v)
		return SC_ERR_NOMEM;
	v[0] = n + 1;
	v[n + 1] = id;
	*slot = v;
	return SC_OK;
}

sc_status_t scd_cache_set(scd_world_t *w, uint32_t id, const char *name, uint32_t dtype,
			  uint64_t numel, uint32_t op, int solo, uint32_t fuse_key,
			  const scd_tsig_t *sig)
{
	if (id == UINT32_MAX) /* none: ids never start again from 0 (evicted ones stay gone) */
		return SC_ERR_LIMIT;
	scd_cache_ent_t *e = scd_cache_get(w, id);
	if (e && strcmp(e->name, name))
		return SC_ERR_PROTOCOL; /* an id is never given to another name */
	if (!e && id < w->n_cache)
		return SC_ERR_PROTOCOL; /* nor given again once evicted */
	int named = !e;
	char *copy = named ? strdup(name) : NULL;
	if (named && (!copy || !(e = slot_new(w, id)))) {
		free(copy);
		return SC_ERR_NOMEM;
	}
	if (named) {
		e->name = copy;
		w->n_live++;
	}
	if (cache_list(w, name, id) != SC_OK) {
		if (named) /* as it was: the id is not taken */
			slot_free(w, e);
		return SC_ERR_NOMEM;
	}
	e->listed = 1;
	e->dtype = dtype;
	e->numel = numel;
	e->op = op;
	e->solo = solo;
	e->fuse_key = fuse_key;
	e->sig = *sig;
	e->pset = scd_pset_of(name, NULL);
	e->last_tcp_s = e->last_tcm_s = 0;
	if (id >= w->n_cache)
		w->n_cache = id + 1;
	return SC_OK;
}

/* The id of name that has a place in the coordinator's fusion plan (the one a form that
 * has none takes over), else UINT32_MAX. */
uint32_t scd_cache_plan_held(scd_world_t *w, const char *name)
{
	const uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	for (uint32_t i = v ? v[0] : 0; i >= 1; i--)
		if (!strcmp(scd_cache_get(w, v[i])->name, name) &&
		    scd_fplan_pos(&w->fplan, v[i]) >= 0)
			return v[i];
	return UINT32_MAX;
}

/* A forget job for cache id id (UINT32_MAX: none) and presel_key (0: none); node_only:
 * of this node's selections at submission alone (scd_job_t.forget_node_only). */
static void forget_job(scd_world_t *w, uint32_t id, uint64_t presel_key, int node_only)
{
	if (id != UINT32_MAX && w->is_coord) /* its buffer mates no longer wait for it */
		scd_fplan_remove(&w->fplan, id);
	if (!w->d->engine)
		return;
	scd_job_t *job = calloc(1, sizeof(*job));
	if (!job)
		return;
	job->kind = SCD_JOB_FORGET;
	job->forget_cache_id = id;
	job->forget_presel_key = presel_key; /* a first step's selection never taken */
	job->forget_node_only = node_only;
	scd_engine_submit(w->d->engine, job);
}

/*
 * A name gone from this node: its selections at submission go (they are this node's), but
 * not its buffers' scheme state, which every rank must hold alike (the scheme's step, its
 * calibration, ExDyna's partitions): another node may still hold the name, and this one
 * register it again, both then running its buffers at the same step. That state goes
 * when every rank lets it go at the same place: the name's form evicted (cache_list), the
 * least recently used buffer past the engine's table (coll/bufctx.c), a re-formed world.
 */
void scd_world_forget(scd_world_t *w, const char *name, uint64_t presel_key)
{
	const uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	int any = 0;
	for (uint32_t i = 1; v && i <= v[0]; i++) /* every form the name has had */
		if (!strcmp(scd_cache_get(w, v[i])->name, name)) {
			forget_job(w, v[i], any++ ? 0 : presel_key, 1);
			v = w->name_to_id[scd_world_hash_name(
			    name)]; /* (not moved; read again) */
		}
	if (!any && presel_key)
		forget_job(w, UINT32_MAX, presel_key, 1);
}

/* ---- eviction past cache_max_entries ---------------------------------------------------- */

/* Takes id out of its name's ids. */
static void cache_unlist(scd_world_t *w, const char *name, uint32_t id)
{
	uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	for (uint32_t i = 1; v && i <= v[0]; i++)
		if (v[i] == id) {
			memmove(&v[i], &v[i + 1], sizeof(uint32_t) * (v[0] - i));
			v[0]--;
			return;
		}
}

void scd_cache_touch(scd_world_t *w, const char *name, uint64_t cycle)
{
	const uint32_t *v = w->name_to_id[scd_world_hash_name(name)];
	for (uint32_t i = 1; v && i <= v[0]; i++) {
		scd_cache_ent_t *c = scd_cache_get(w, v[i]);
		if (!strcmp(c->name, name))
			c->used_cycle = cycle;
	}
}

typedef struct {
	uint64_t used;
	uint32_t id;
} evict_cand_t;

static int by_use(const void *a, const void *b)
{
	const evict_cand_t *x = a, *y = b;
	if (x->used != y->used)
		return x->used < y->used ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/*
 * The least recently used first, oldest id first among equals; what the plan being built
 * uses, or a name some node announced that is still pending (scd_cache_touch with its
 * cycle), never: a node's announcement the coordinator already holds names no evicted id,
 * and one on its way is dropped and made again in full (scd_cache_evict). Down to an
 * eighth below the bound, so that a job naming a tensor anew every step sorts the table
 * once every bound / 8 plans, not at every one.
 */
size_t scd_cache_evict_pick(scd_world_t *w, uint64_t cycle, uint32_t **ids_p)
{
	uint64_t max = (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_cache_max_entries);
	*ids_p = NULL;
	if (w->n_live <= max)
		return 0;
	size_t want = w->n_live - (max - max / 8), n = 0;
	evict_cand_t *c = malloc(sizeof(*c) * w->n_live);
	if (!c) {
		scd_warn(SCD_SUB_NEGOTIATE,
			 "out of memory choosing response cache entries to evict: %u entries, "
			 "cache_max_entries %llu",
			 w->n_live, (unsigned long long)max);
		return 0;
	}
	for (uint32_t i = 0; i < w->cap_cache; i++)
		if (w->cache[i].name && w->cache[i].used_cycle != cycle)
			c[n++] = (evict_cand_t){.used = w->cache[i].used_cycle,
						.id = w->cache[i].id};
	qsort(c, n, sizeof(*c), by_use);
	if (n > want)
		n = want;
	uint32_t *ids = n ? malloc(sizeof(*ids) * n) : NULL;
	for (size_t i = 0; ids && i < n; i++)
		ids[i] = c[i].id;
	free(c);
	if (!ids)
		return 0;
	*ids_p = ids;
	return n;
}

void scd_cache_evict(scd_world_t *w, uint32_t id)
{
	scd_cache_ent_t *e = scd_cache_get(w, id);
	if (!e)
		return;
	scd_debug(SCD_SUB_NEGOTIATE, "cache id %u of tensor '%s' evicted (cache_max_entries)",
		  id, e->name);
	if (e->listed) { /* (else its engine state went when it left its name's ids) */
		cache_unlist(w, e->name, id);
		forget_job(w, id, 0, 0);
	}
	/* this node announced the tensor by this id, and no plan answered it yet: the
	 * coordinator drops that announcement (it no longer knows the id) */
	scd_ntensor_t *nt = w->d->ctl ? scd_ctl_tensor(w->d->ctl, e->name) : NULL;
	if (nt && nt->state == SCD_NT_ANNOUNCED && nt->announced_id == id)
		scd_neg_reannounce(w, nt);
	slot_free(w, scd_cache_get(w, id));
}
