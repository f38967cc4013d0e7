/*
 * cache.c: the response cache (world_int.h): every rank's table of the tensors it has
 * agreed on, by cache id, and each name's ids, one per form the name has had. A node
 * announces a tensor of a known form by its id alone; the coordinator gives a new form
 * a new id in its plan, and every rank lists the new ids in the plans' order, so that
 * every rank lets the same id go at the same place.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/psname.h"
#include "world/world_int.h"

uint32_t scd_world_hash_name(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h % SCD_WORLD_BUCKETS;
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
		if (!strcmp(w->cache[v[i]].name, name))
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
		const scd_cache_ent_t *c = &w->cache[v[i]];
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
		if (!strcmp(w->cache[(*slot)[i]].name, name) && !forms++)
			oldest = i;
	}
	if (forms >= SCD_CACHE_FORMS) { /* id takes the oldest's place, at the end */
		uint32_t gone = (*slot)[oldest];
		memmove(&(*slot)[oldest], &(*slot)[oldest + 1],
			sizeof(uint32_t) * (n - oldest));
		(*slot)[n] = id;
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
	if (id >= w->cap_cache) {
		uint32_t cap = w->cap_cache ? w->cap_cache : 256;
		while (cap <= id)
			cap *= 2;
		scd_cache_ent_t *c = realloc(w->cache, cap * sizeof(*c));
		if (!c)
			return SC_ERR_NOMEM;
		memset(c + w->cap_cache, 0, (cap - w->cap_cache) * sizeof(*c));
		w->cache = c;
		w->cap_cache = cap;
	}
	if (w->cache[id].name && strcmp(w->cache[id].name, name))
		return SC_ERR_PROTOCOL; /* an id is never given to another name */
	scd_cache_ent_t *e = &w->cache[id];
	int named = !e->name;
	if (named && !(e->name = strdup(name)))
		return SC_ERR_NOMEM;
	if (cache_list(w, name, id) != SC_OK) {
		if (named) { /* as it was: the id is not taken */
			free(e->name);
			e->name = NULL;
		}
		return SC_ERR_NOMEM;
	}
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
		if (!strcmp(w->cache[v[i]].name, name) && scd_fplan_pos(&w->fplan, v[i]) >= 0)
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
		if (!strcmp(w->cache[v[i]].name, name)) {
			forget_job(w, v[i], any++ ? 0 : presel_key, 1);
			v = w->name_to_id[scd_world_hash_name(
			    name)]; /* (not moved; read again) */
		}
	if (!any && presel_key)
		forget_job(w, UINT32_MAX, presel_key, 1);
}
