/*
 * presel.c: the selections made at submission (see presel.h). The table is an array of
 * entries, one per sparsified tensor of the node, with an open-addressing index by cache
 * id beside it (linear probing, at most half full), since every buffer looks each of its
 * items up. The index is rebuilt when an entry goes, which only a forgotten tensor, a
 * changed option or a re-formed world causes. Speculative entries (a tensor's first step,
 * presel.h) are a short list apart, searched linearly: only first steps in flight. An
 * entry's memory and sparsifier are its device's (the cpu's, or the GPU's for a cuda
 * tensor), made and freed through that device's ops.
 */
#include "coll/presel.h"

#include <stdio.h>
#include <stdlib.h>

#include "coll/bufctx.h"
#include "util/clock.h"

struct scd_presel_table {
	scd_presel_t **v;
	int n, cap;
	int32_t *slot;	/* the index: a position in v, or -1 */
	uint32_t nslot; /* a power of two, at least 2 * cap; 0 before the first entry */
	uint32_t block;
	scd_presel_t **spec; /* the speculative entries */
	int n_spec, cap_spec;
};

static uint32_t slot_home(const scd_presel_table_t *tab, uint32_t cache_id)
{
	return (cache_id * 2654435761u) & (tab->nslot - 1);
}

static void index_put(scd_presel_table_t *tab, int i)
{
	uint32_t s = slot_home(tab, tab->v[i]->cache_id);
	while (tab->slot[s] >= 0)
		s = (s + 1) & (tab->nslot - 1);
	tab->slot[s] = i;
}

static void index_rebuild(scd_presel_table_t *tab)
{
	for (uint32_t s = 0; s < tab->nslot; s++)
		tab->slot[s] = -1;
	for (int i = 0; i < tab->n; i++)
		index_put(tab, i);
}

sc_status_t scd_presel_table_create(uint32_t block, scd_presel_table_t **tab_p)
{
	*tab_p = calloc(1, sizeof(**tab_p));
	if (!*tab_p)
		return SC_ERR_NOMEM;
	(*tab_p)->block = block;
	return SC_OK;
}

/* Frees x, the memory of device dev, when there is one. */
static void dev_free(const scd_device_ops_t *dev, void *x)
{
	if (x)
		dev->free(x);
}

/* bytes of dev's memory for the room of a whole selection, of which a selection writes
 * only its entries (a 1% top-k, 1% of it): on the host left to fault in as far as the
 * selections reach (plain malloc), where the cpu device's alloc would make every page
 * resident at once, 8 bytes per element of every sparsified tensor; a GPU's, dev's. */
static void *room_alloc(const scd_device_ops_t *dev, size_t bytes)
{
	return scd_device_host_memory(dev) ? malloc(bytes) : dev->alloc(bytes);
}

static void room_free(const scd_device_ops_t *dev, void *x)
{
	if (scd_device_host_memory(dev))
		free(x);
	else
		dev_free(dev, x);
}

static void entry_free(scd_presel_t *p)
{
	if (!p)
		return;
	if (p->sp)
		p->dev->sparsifier_destroy(p->sp);
	dev_free(p->dev, p->acc);
	dev_free(p->dev, p->res);
	room_free(p->dev, p->sel.idx);
	room_free(p->dev, p->sel.val);
	free(p);
}

void scd_presel_table_destroy(scd_presel_table_t *tab)
{
	if (!tab)
		return;
	for (int i = 0; i < tab->n; i++)
		entry_free(tab->v[i]);
	for (int i = 0; i < tab->n_spec; i++)
		entry_free(tab->spec[i]);
	free(tab->v);
	free(tab->slot);
	free(tab->spec);
	free(tab);
}

static int entry_find(const scd_presel_table_t *tab, uint32_t cache_id)
{
	if (!tab->nslot)
		return -1;
	for (uint32_t s = slot_home(tab, cache_id);; s = (s + 1) & (tab->nslot - 1)) {
		int32_t i = tab->slot[s];
		if (i < 0 || tab->v[i]->cache_id == cache_id)
			return i;
	}
}

/* Frees entry i and moves the last one into its place. */
static void entry_remove(scd_presel_table_t *tab, int i)
{
	entry_free(tab->v[i]);
	tab->v[i] = tab->v[--tab->n];
	index_rebuild(tab);
}

void scd_presel_forget(scd_presel_table_t *tab, uint32_t cache_id)
{
	int i = tab ? entry_find(tab, cache_id) : -1;
	if (i >= 0)
		entry_remove(tab, i);
}

/* The speculative entry i, out of the list (not freed). */
static scd_presel_t *spec_unlink(scd_presel_table_t *tab, int i)
{
	scd_presel_t *p = tab->spec[i];
	tab->spec[i] = tab->spec[--tab->n_spec];
	return p;
}

/* The speculative entry of the tensor with this key, or -1. */
static int spec_find(const scd_presel_table_t *tab, uint64_t key)
{
	for (int i = 0; key && i < tab->n_spec; i++)
		if (tab->spec[i]->spec_key == key)
			return i;
	return -1;
}

/* Frees the tensor's speculative entry, if it has one. */
static void spec_forget(scd_presel_table_t *tab, uint64_t key)
{
	int i = spec_find(tab, key);
	if (i >= 0)
		entry_free(spec_unlink(tab, i));
}

void scd_presel_forget_key(scd_presel_table_t *tab, uint64_t key)
{
	if (tab && key)
		spec_forget(tab, key);
}

int scd_presel_count(const scd_presel_table_t *tab)
{
	return tab ? tab->n + tab->n_spec : 0;
}

void scd_presel_clear(scd_presel_table_t *tab)
{
	if (!tab)
		return;
	for (int i = 0; i < tab->n; i++)
		entry_free(tab->v[i]);
	while (tab->n_spec > 0)
		entry_free(spec_unlink(tab, tab->n_spec - 1));
	tab->n = 0;
	index_rebuild(tab);
}

int scd_presel_applies(const scd_job_item_t *it)
{
	scd_sparsify_kind_t kind;
	if (!scd_sparsify_kind_of(it->sparsifier, &kind) || it->n_src == 0)
		return 0;
	for (int s = 0; s < it->n_src; s++) /* COO input: every trainer's (local_reduce) */
		if (it->src[s].device != it->src[0].device ||
		    !it->src[s].coo != !it->src[0].coo)
			return 0;
	return 1;
}

/* The sparsifier's settings for it, as a buffer's sparsifier takes them (bufctx.c). */
static int item_cfg(const scd_presel_table_t *tab, const scd_job_item_t *it, uint64_t seed,
		    scd_sparsifier_cfg_t *cfg)
{
	scd_sparsify_kind_t kind;
	if (!scd_sparsify_kind_of(it->sparsifier, &kind))
		return 0;
	*cfg = (scd_sparsifier_cfg_t){.kind = kind,
				      .numel = it->numel,
				      .density = it->density,
				      .threshold = (float)it->threshold,
				      .seed = seed ^ it->cache_id,
				      .block = it->block ? it->block : tab->block};
	return 1;
}

static int cfg_equal(const scd_sparsifier_cfg_t *a, const scd_sparsifier_cfg_t *b)
{
	return a->kind == b->kind && a->numel == b->numel && a->density == b->density &&
	       a->threshold == b->threshold && a->seed == b->seed && a->block == b->block;
}

/* A new entry for it on device dev with cfg's sparsifier and its workspaces there; NULL
 * when dev cannot make the sparsifier or when out of memory (*st_p: why). The sparsifier
 * comes first: one the device does not have (block top-K on a GPU), asked for at every
 * submission of the tensor, then costs no workspace made and freed each time (a GPU's
 * free waits for the whole device). */
static scd_presel_t *entry_new(const scd_job_item_t *it, const scd_device_ops_t *dev,
			       const scd_sparsifier_cfg_t *cfg, sc_status_t *st_p)
{
	scd_presel_t *p = calloc(1, sizeof(*p));
	*st_p = SC_ERR_NOMEM;
	if (!p)
		return NULL;
	if ((*st_p = dev->sparsifier_create(cfg, &p->sp)) != SC_OK) {
		free(p);
		return NULL;
	}
	*st_p = SC_ERR_NOMEM;
	size_t bytes = (it->numel ? it->numel : 1) * sizeof(float);
	p->dev = dev;
	p->cache_id = it->cache_id;
	p->numel = it->numel;
	p->cfg = *cfg;
	p->acc = dev->alloc(bytes);
	p->res = dev->alloc(bytes);
	p->sel.idx = room_alloc(dev, bytes);
	p->sel.val = room_alloc(dev, bytes);
	p->sel.cap = it->numel;
	if (!p->acc || !p->res || !p->sel.idx || !p->sel.val) {
		entry_free(p);
		return NULL;
	}
	return p;
}

/* Room for twice the entries, and an index at most half full. */
static sc_status_t table_grow(scd_presel_table_t *tab)
{
	int cap = tab->cap ? 2 * tab->cap : 16;
	uint32_t nslot = 2 * (uint32_t)cap;
	scd_presel_t **v = realloc(tab->v, (size_t)cap * sizeof(*v));
	if (!v)
		return SC_ERR_NOMEM;
	tab->v = v;
	int32_t *slot = malloc(nslot * sizeof(*slot));
	if (!slot)
		return SC_ERR_NOMEM;
	free(tab->slot);
	tab->slot = slot;
	tab->nslot = nslot;
	tab->cap = cap;
	index_rebuild(tab);
	return SC_OK;
}

/* Whether entry p was made on dev with cfg's options (else it is made anew). */
static int entry_fits(const scd_presel_t *p, const scd_device_ops_t *dev,
		      const scd_sparsifier_cfg_t *cfg)
{
	return p->dev == dev && cfg_equal(&p->cfg, cfg);
}

/* A speculative entry for it (the tensor's earlier one reused when its device and options
 * are the same, else replaced). */
static sc_status_t spec_entry(scd_presel_table_t *tab, const scd_job_item_t *it,
			      const scd_device_ops_t *dev, const scd_sparsifier_cfg_t *cfg,
			      scd_presel_t **p_p)
{
	if (cfg->kind == SCD_SPARSIFY_DGC || !it->presel_key)
		return SC_ERR_INVALID; /* its sample's seed needs the cache id */
	int i = spec_find(tab, it->presel_key);
	if (i >= 0 && entry_fits(tab->spec[i], dev, cfg)) {
		tab->spec[i]->ready = 0;
		*p_p = tab->spec[i];
		return SC_OK;
	}
	if (i >= 0)
		entry_free(spec_unlink(tab, i));
	if (tab->n_spec == tab->cap_spec) {
		int cap = tab->cap_spec ? 2 * tab->cap_spec : 8;
		scd_presel_t **v = realloc(tab->spec, (size_t)cap * sizeof(*v));
		if (!v)
			return SC_ERR_NOMEM;
		tab->spec = v;
		tab->cap_spec = cap;
	}
	sc_status_t st;
	scd_presel_t *p = entry_new(it, dev, cfg, &st);
	if (!p)
		return st;
	p->spec_key = it->presel_key;
	tab->spec[tab->n_spec++] = p;
	*p_p = p;
	return SC_OK;
}

sc_status_t scd_presel_entry(scd_presel_table_t *tab, const scd_job_item_t *it,
			     const scd_device_ops_t *dev, uint64_t seed, scd_presel_t **p_p)
{
	scd_sparsifier_cfg_t cfg;
	if (!item_cfg(tab, it, seed, &cfg))
		return SC_ERR_INVALID;
	if (it->cache_id == SCD_PRESEL_SPEC)
		return spec_entry(tab, it, dev, &cfg, p_p);
	spec_forget(tab, it->presel_key); /* a first step's, never taken */
	int i = entry_find(tab, it->cache_id);
	if (i >= 0 && entry_fits(tab->v[i], dev, &cfg)) {
		tab->v[i]->ready = 0;
		*p_p = tab->v[i];
		return SC_OK;
	}
	if (i >= 0) /* the tensor's options, size or device changed: made anew */
		entry_remove(tab, i);
	if (tab->n == tab->cap && table_grow(tab) != SC_OK)
		return SC_ERR_NOMEM;
	sc_status_t st;
	scd_presel_t *p = entry_new(it, dev, &cfg, &st);
	if (!p)
		return st;
	tab->v[tab->n++] = p;
	index_put(tab, tab->n - 1);
	*p_p = p;
	return SC_OK;
}

sc_status_t scd_presel_select(scd_presel_t *p, const scd_job_item_t *it, const float *in)
{
	double t0 = scd_now_s();
	p->ready = 0;
	p->has_res = it->residual != NULL;
	if (p->has_res) { /* in + residual, then selected where it lies */
		p->dev->acc_aside(p->res, in, it->residual, it->numel);
		in = NULL;
	}
	p->sel.nnz = 0;
	uint64_t tl = scd_tl_begin();
	sc_status_t st =
	    p->dev->sparsify(p->sp, in, p->has_res ? p->res : NULL, it->numel, &p->sel, NULL);
	/* every op queued for it (the local sum, the copy, the selection) has run: a GPU's
	 * failure among them is this selection's */
	sc_status_t synced = p->dev->sync();
	scd_presel_tl(it, "sparsify", tl);
	if (st == SC_OK)
		st = synced;
	if (st != SC_OK)
		return st;
	p->tcp_s = scd_now_s() - t0;
	p->token = it->presel_token;
	p->ready = 1;
	return SC_OK;
}

int scd_presel_waited(const scd_presel_table_t *tab, const scd_job_item_t *it)
{
	if (!tab || !it->presel_token) /* tokens are unique over the node's submissions */
		return 0;
	int i = entry_find(tab, it->cache_id);
	if (i >= 0 && tab->v[i]->waited == it->presel_token)
		return 1;
	for (int j = 0; j < tab->n_spec; j++)
		if (tab->spec[j]->waited == it->presel_token)
			return 1;
	/* selected under another cache id than the plan's (rare: the cache changed) */
	for (int j = 0; j < tab->n; j++)
		if (tab->v[j]->waited == it->presel_token)
			return 1;
	return 0;
}

void scd_presel_tl(const scd_job_item_t *it, const char *phase, uint64_t t0)
{
	if (!t0 || !it->name)
		return;
	char lane[320];
	snprintf(lane, sizeof(lane), "%.300s (ahead)", it->name);
	scd_tl_arg_t a[] = {{"bytes", NULL, (int64_t)(it->numel * sizeof(float))}};
	scd_tl_tensor(lane, phase, t0, a, 1);
}

/* The speculative selection of it's submission, if one was made: taken when the plan's
 * options (cfg, the seed aside: a speculative selection's has no cache id) are those it
 * was made with, and then made the entry of it's cache id (replacing an earlier entry of
 * that id); freed otherwise. NULL: none taken. */
static scd_presel_t *spec_take(scd_presel_table_t *tab, const scd_job_item_t *it,
			       const scd_device_ops_t *dev, const scd_sparsifier_cfg_t *cfg,
			       uint64_t seed)
{
	int j = -1;
	for (int i = 0; j < 0 && i < tab->n_spec; i++)
		if (tab->spec[i]->token == it->presel_token)
			j = i;
	if (j < 0)
		return NULL;
	scd_presel_t *p = spec_unlink(tab, j);
	scd_sparsifier_cfg_t made = *cfg;
	made.seed = seed ^ SCD_PRESEL_SPEC;
	if (!p->ready || p->spec_key != it->presel_key || !entry_fits(p, dev, &made) ||
	    p->has_res != (it->residual != NULL) || !scd_presel_applies(it) ||
	    (tab->n == tab->cap && table_grow(tab) != SC_OK)) {
		entry_free(p); /* the plan disagrees: nothing of it is used */
		return NULL;
	}
	scd_presel_forget(tab, it->cache_id);
	p->cache_id = it->cache_id;
	p->spec_key = 0;
	p->cfg = *cfg; /* its sparsifier keeps the other seed, which only DGC reads */
	tab->v[tab->n++] = p;
	index_put(tab, tab->n - 1);
	return p;
}

scd_presel_t *scd_presel_take(scd_presel_table_t *tab, const scd_job_item_t *it,
			      const scd_device_ops_t *dev, uint64_t seed)
{
	scd_sparsifier_cfg_t cfg;
	if (tab && !it->presel_token) {
		/* not selected ahead (the key off): none kept; but a node taking part with
		 * zeros (its trainers joined) keeps its entry, which the tensor's previous
		 * buffer may still be reading on the communication stage */
		if (it->n_src) {
			scd_presel_forget(tab, it->cache_id);
			spec_forget(tab, it->presel_key);
		}
		return NULL;
	}
	if (!tab || !item_cfg(tab, it, seed, &cfg))
		return NULL;
	int i = entry_find(tab, it->cache_id);
	scd_presel_t *p = i >= 0 ? tab->v[i] : NULL;
	if (!p || p->token != it->presel_token)
		p = spec_take(tab, it, dev, &cfg, seed);
	else if (!p->ready || !entry_fits(p, dev, &cfg) ||
		 p->has_res != (it->residual != NULL) || !scd_presel_applies(it))
		p = NULL;
	if (p)
		p->ready = 0;
	return p;
}
