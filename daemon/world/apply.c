/*
 * apply.c: what every rank does with the coordinator's plans (world_int.h): a response
 * turned into the engine's job (its items filled from the node's tensors, its buffer's
 * pinned scheme and process set), the plan's new cache entries, the fusion plan kept for
 * the statistics, and a job's end: its times recorded for the planner, its statistics,
 * and its trainers' completions. Every rank applies the same plan in the same order.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/pset.h"
#include "engine/engine.h"
#include "scheme/scheme.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/psname.h"
#include "world/world_int.h"

static void apply_error(scd_world_t *w, const Sparsecomm__Response *resp)
{
	/* a node not listed has not announced the names: what it announces next is the late
	 * step, refused when it reaches the coordinator (late.c) */
	int listed = resp->n_ranks == 0;
	for (size_t i = 0; i < resp->n_ranks && !listed; i++)
		listed = resp->ranks[i] == w->d->rank;
	if (!listed)
		return;
	for (size_t i = 0; i < resp->n_names; i++)
		scd_ctl_fail_tensor(w->d->ctl, resp->names[i], resp->status, resp->error);
	/* a failed announcement must not linger in the outgoing batch either */
}

/*
 * The scheme a buffer is pinned to, or -1 for the cost model: the scheme that is itself
 * a tensor's sparsifier (ExDyna for ExDyna tensors, or its variant exdyna_owner where the
 * pin below names it); else the tensor's own pin; else the
 * first scheme_pins pattern that matches its name; else the global scheme key. A lossy pin
 * on a tensor that does not allow lossy schemes is not honoured. Computed on the loop
 * thread when the plan arrives, so a runtime change of the keys (which reaches every rank
 * at the same place in the stream of plans) takes effect at the same buffer on every rank.
 */
static int buffer_pin(scd_world_t *w, const scd_job_t *job)
{
	const scd_config_t *cfg = &w->d->cfg;
	int own = -1;
	for (int i = 0; i < job->n_items && own < 0; i++)
		own = scd_scheme_of_sparsifier(job->items[i].sparsifier);
	scd_scheme_t s;
	int pin = -1;
	/* the agreed entry's pin: the same on a node that takes part with zeros */
	const scd_cache_ent_t *c =
	    job->n_items ? scd_cache_get(w, job->items[0].cache_id) : NULL;
	const char *name = c ? c->name : "";
	if (c && c->sig.scheme[0] && scd_scheme_parse(c->sig.scheme, &s) == 0)
		pin = (int)s;
	const char *pins = scd_cfg_str(cfg, SCD_CFG_scheme_pins);
	char item[SCD_PIN_ITEM_MAX];
	const char *want;
	while (pin < 0 && scd_config_pin_next(&pins, item, sizeof(item), &want) != 0)
		if (want && fnmatch(item, name, 0) == 0 && scd_scheme_parse(want, &s) == 0)
			pin = (int)s;
	if (pin < 0 && scd_scheme_parse(scd_cfg_str(cfg, SCD_CFG_scheme), &s) == 0)
		pin = (int)s;
	/* a sparsifier's scheme, or a variant of it that a pin names */
	if (own >= 0)
		return pin >= 0 && scd_schemes[pin]->sparsifier == scd_schemes[own]->sparsifier
			   ? pin
			   : own;
	if (pin >= 0 && job->lossless_only && !scd_scheme_lossless((scd_scheme_t)pin))
		pin = -1;
	return pin;
}

/*
 * A job item's options, from what every rank announced. Several tensors sparsified ahead
 * in one buffer: each made its own selection, which only a lossless scheme delivers whole
 * (a lossy one would select again over the concatenated index space, and the tensors of
 * small magnitudes would go missing: the loss sparsification ahead avoids); apply_allreduce
 * restricts such a buffer to lossless schemes, and one with a tensor that does not allow
 * lossy schemes.
 */
void scd_neg_item_options(scd_job_item_t *it, const scd_tsig_t *sig)
{
	it->sparsifier = sig->sparsifier;
	it->density = sig->density;
	it->threshold = sig->threshold;
	it->sketch_rows = sig->sketch_rows;
	it->sketch_cols = sig->sketch_cols;
	it->block = sig->block;
	it->allow_lossy = !!(sig->flags & SCD_TSIG_LOSSY);
	it->coo_in = !!(sig->flags & SCD_TSIG_COO);
	/* only whether there is one reaches the scheme layer (its first density guess) */
	if (!(sig->flags & SCD_TSIG_COO_AREA))
		it->coo_capacity = 0;
	else if (!it->coo_capacity)
		it->coo_capacity = 1;
}

/* Where job runs: its process set's member nodes and member trainers (none for the global
 * set). 1: the job is this node's; 0: this node has no member of the set, or no longer
 * knows it (removed); -1: out of memory (this rank leaves the world, as for the job). */
static int job_pset(scd_world_t *w, const Sparsecomm__Response *resp, scd_job_t *job)
{
	scd_daemon_t *d = w->d;
	job->average_divisor = (double)d->world_size * d->local_size;
	uint32_t pset = resp->n_cache_ids ? scd_cache_get(w, resp->cache_ids[0])->pset : 0;
	if (!pset)
		return 1;
	const scd_pset_t *p = scd_ctl_pset(d->ctl, pset);
	int in = 0;
	for (int i = 0; p && i < p->n_nodes; i++)
		in |= p->nodes[i] == d->rank;
	if (!in)
		return 0;
	job->nodes = malloc(sizeof(int) * (size_t)p->n_nodes);
	job->set_ranks = malloc(sizeof(int) * (size_t)p->n_ranks);
	if (!job->nodes || !job->set_ranks) {
		free(job->nodes);
		free(job->set_ranks);
		job->nodes = job->set_ranks = NULL;
		return -1;
	}
	memcpy(job->nodes, p->nodes, sizeof(int) * (size_t)p->n_nodes);
	memcpy(job->set_ranks, p->ranks, sizeof(int) * (size_t)p->n_ranks);
	job->pset = pset;
	job->n_nodes = p->n_nodes;
	job->n_set_ranks = p->n_ranks;
	job->average_divisor = p->n_ranks;
	return 1;
}

sc_status_t scd_neg_allreduce_job(scd_world_t *w, const Sparsecomm__Response *resp,
				  const scd_fast_t *fast, int fill, struct scd_job **job_p)
{
	scd_daemon_t *d = w->d;
	*job_p = NULL;
	scd_job_t *job = calloc(1, sizeof(*job));
	int mine = job ? job_pset(w, resp, job) : -1;
	scd_job_item_t *items = mine > 0 ? scd_job_items_new(resp->n_cache_ids) : NULL;
	if (!mine) { /* a process set without this node */
		free(job);
		return SC_OK;
	}
	if (!items) {
		/* a plan's job: this rank leaves the world; a fast turn's (or the entry rule's
		 * probe): its caller says what follows (fast.c) */
		scd_error(SCD_SUB_NEGOTIATE, "out of memory for a %s",
			  fast ? "fast turn's job" : "job: this rank leaves the world");
		if (job) {
			free(job->nodes);
			free(job->set_ranks);
		}
		free(job);
		return SC_ERR_NOMEM;
	}
	job->kind = SCD_JOB_ALLREDUCE;
	job->items = items;
	job->n_items = (int)resp->n_cache_ids;
	job->timeout_ms = (int)scd_cfg_int(&d->cfg, SCD_CFG_op_timeout_ms);
	job->world_seed = w->world_id;
	job->fail_gen = scd_ctl_fail_gen(d->ctl);
	if (fast) { /* counted by no plan: the sequence and the probe's turns stay aligned */
		job->seq = w->job_seq;
		job->fast = *fast;
	} else {
		job->seq = ++w->job_seq;
		/* the network probe runs over every node: only the global set's jobs count,
		 * which every node runs */
		int64_t probe_every = scd_cfg_int(&d->cfg, SCD_CFG_netprobe_interval_jobs);
		job->probe = !job->pset && probe_every > 0 &&
			     ++w->global_jobs % (uint64_t)probe_every == 0;
	}
	job->lossless_only = 0;
	job->nonfinite = scd_nonfinite_parse(scd_cfg_str(&d->cfg, SCD_CFG_nonfinite));
	/* Every item has the buffer's dtype and wire format (see coord_emit; the type word,
	 * coll/coll.h); items start 64-byte aligned. Every item has the buffer's collective
	 * (the fuse class keeps the others apart), and its own reduction where it averages. */
	const scd_cache_ent_t *first =
	    resp->n_cache_ids ? scd_cache_get(w, resp->cache_ids[0]) : NULL;
	uint32_t word = first ? first->dtype : SC_FLOAT32;
	scd_coll_t coll = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM};
	if (first)
		scd_coll_unpack(first->op, &coll);
	job->dtype = scd_tw_dtype(word);
	job->wire = scd_tw_wire(word);
	size_t esz = sc_dtype_size(job->dtype);
	uint64_t align = esz ? 64 / esz : 16;
	uint64_t off = 0;
	for (size_t i = 0; i < resp->n_cache_ids; i++) {
		const scd_cache_ent_t *c = scd_cache_get(w, resp->cache_ids[i]);
		scd_job_item_t *it = &items[i];
		it->numel = c->numel;
		it->op = c->op == SC_OP_AVERAGE ? SC_OP_AVERAGE : SC_OP_SUM;
		it->cache_id = resp->cache_ids[i];
		it->solo = c->solo;
		it->offset = off;
		off += (c->numel + align - 1) & ~(align - 1);
		/* ctl fills the item from the node's shared buffers and marks it running; the
		 * options that decide the scheme are the agreed ones (agree.h) */
		sc_status_t found =
		    fill ? scd_ctl_job_item(d->ctl, c->name, c->dtype, c->numel, it)
			 : SC_ERR_NOT_FOUND;
		scd_neg_item_options(it, &c->sig);
		if (!(c->sig.flags & SCD_TSIG_LOSSY) ||
		    (resp->n_cache_ids > 1 && c->sig.sparsifier != SC_SPARSIFY_NONE))
			job->lossless_only = 1;
		if (found != SC_OK && fill) {
			/* Runs with zeros, delivers nothing: what a node whose trainers all
			 * joined does (join.c). Otherwise the other ranks' sums then lack this
			 * node's share, which only the loss of a whole node explains. */
			if (!scd_ctl_all_joined(d->ctl))
				scd_error(SCD_SUB_NEGOTIATE,
					  "tensor '%s' was planned but is not ready on this "
					  "node: it takes "
					  "part with zeros",
					  c->name);
			continue;
		}
	}
	job->total_numel = job->n_items == 1 ? items[0].numel : off;
	/* Min, max and product reduce every item of a buffer (the fusion key keeps them
	 * apart); sum and average items share the sum, each averaging its own. */
	if (coll.kind == SCD_COLL_ALLREDUCE && coll.op == SC_OP_AVERAGE)
		coll.op = SC_OP_SUM;
	job->coll = coll;
	/* The schemes are float32 sums over a 32-bit wire only: the other dtypes, reductions
	 * and wire formats, and the other collectives, always take the dense ring. */
	job->pin = coll.kind == SCD_COLL_ALLREDUCE && job->dtype == SC_FLOAT32 &&
			   coll.op == SC_OP_SUM && !job->wire
		       ? buffer_pin(w, job)
		       : (int)SCD_SCHEME_DENSE_RING;
	*job_p = job;
	return SC_OK;
}

static sc_status_t apply_allreduce(scd_world_t *w, const Sparsecomm__Response *resp)
{
	scd_job_t *job;
	sc_status_t st = scd_neg_allreduce_job(w, resp, NULL, 1, &job);
	if (job)
		scd_engine_submit(w->d->engine, job);
	return st;
}

/* The ids a plan evicts: each cached before the plan (one it makes is used by it), and
 * none named by its responses (the coordinator keeps what a plan uses). */
static sc_status_t plan_check_evicted(const scd_world_t *w, const Sparsecomm__Plan *plan,
				      char *err, size_t err_len)
{
	for (size_t i = 0; i < plan->n_evicted; i++) {
		uint32_t id = plan->evicted[i];
		int used = 0;
		for (size_t k = 0; k < plan->n_responses && !used; k++) {
			const Sparsecomm__Response *r = plan->responses[k];
			for (size_t j = 0;
			     r->kind != SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR &&
			     j < r->n_cache_ids && !used;
			     j++)
				used = r->cache_ids[j] == id;
		}
		if (!scd_cache_get(w, id) || used) {
			snprintf(err, err_len, "plan cycle %llu: evicts cache id %u, %s",
				 (unsigned long long)plan->cycle, id,
				 used ? "which one of its responses names"
				      : "which the cache does not hold");
			return SC_ERR_PROTOCOL;
		}
	}
	return SC_OK;
}

/*
 * A plan comes from the network: before anything of it is applied, its cache ids are
 * checked. The coordinator assigns ids in sequence (pb_cache_id: the cache's size), so a
 * new entry's id is at most the size of the cache with the entries before it, and a
 * response's id names an entry that is cached or new in this plan; anything else would
 * index past the cache (a new entry's id also sizes it).
 */
sc_status_t scd_neg_plan_check(const scd_world_t *w, const Sparsecomm__Plan *plan, char *err,
			       size_t err_len)
{
	uint64_t n = w->n_cache;
	for (size_t i = 0; i < plan->n_new_entries; i++) {
		const Sparsecomm__CacheEntry *ce = plan->new_entries[i];
		if (ce->id > n || !ce->name) {
			snprintf(
			    err, err_len,
			    "plan cycle %llu: new cache entry %zu has id %u, the cache %llu "
			    "entries",
			    (unsigned long long)plan->cycle, i, ce->id, (unsigned long long)n);
			return SC_ERR_PROTOCOL;
		}
		if (ce->process_set != scd_pset_of(ce->name, NULL)) {
			snprintf(
			    err, err_len,
			    "plan cycle %llu: new cache entry %zu has process set %u, which "
			    "its name does not carry",
			    (unsigned long long)plan->cycle, i, ce->process_set);
			return SC_ERR_PROTOCOL;
		}
		if (!scd_coll_word_valid(ce->op,
					 (uint32_t)(w->d->world_size * w->d->local_size))) {
			snprintf(
			    err, err_len,
			    "plan cycle %llu: new cache entry %zu ('%s') has operation word "
			    "0x%x, which names no collective this daemon runs",
			    (unsigned long long)plan->cycle, i, ce->name, ce->op);
			return SC_ERR_PROTOCOL;
		}
		n += ce->id == n;
	}
	for (size_t i = 0; i < plan->n_responses; i++) {
		const Sparsecomm__Response *r = plan->responses[i];
		if (r->kind == SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR)
			continue;
		uint32_t pset = UINT32_MAX;
		for (size_t k = 0; k < r->n_cache_ids; k++) {
			uint32_t id = r->cache_ids[k];
			const scd_cache_ent_t *c = scd_cache_get(w, id);
			if (c) {
				/* a buffer runs in one process set */
				if (pset != UINT32_MAX && c->pset != pset) {
					snprintf(
					    err, err_len,
					    "plan cycle %llu: response %zu fuses tensors of "
					    "process sets %u and %u",
					    (unsigned long long)plan->cycle, i, pset, c->pset);
					return SC_ERR_PROTOCOL;
				}
				pset = c->pset;
			}
			if (id >= n || (id < w->n_cache && !c)) {
				snprintf(err, err_len,
					 "plan cycle %llu: response %zu names cache id %u, the "
					 "cache %llu entries",
					 (unsigned long long)plan->cycle, i, id,
					 (unsigned long long)n);
				return SC_ERR_PROTOCOL;
			}
		}
	}
	sc_status_t st = plan_check_evicted(w, plan, err, err_len);
	return st != SC_OK ? st : scd_fast_plan_check(w, plan, err, err_len);
}

sc_status_t scd_neg_plan_entries(scd_world_t *w, const Sparsecomm__Plan *plan)
{
	for (size_t i = 0; !w->is_coord && i < plan->n_new_entries; i++) {
		const Sparsecomm__CacheEntry *ce = plan->new_entries[i];
		scd_tsig_t sig;
		scd_tsig_from_msg(ce->sig, &sig);
		sc_status_t st = scd_cache_set(w, ce->id, ce->name, ce->dtype, ce->numel,
					       ce->op, ce->solo, ce->fuse_key, &sig);
		if (st != SC_OK) {
			/* the plans of this rank would no longer match the others' */
			scd_error(SCD_SUB_NEGOTIATE, "%s: this rank leaves the world",
				  st == SC_ERR_NOMEM
				      ? "out of memory for the response cache"
				      : "the coordinator's plan gave a tensor's cache id to "
					"another name");
			return st;
		}
	}
	return SC_OK;
}

void scd_neg_fusion_free(scd_world_t *w)
{
	for (int i = 0; i < w->n_fusion_bufs; i++)
		free(w->fusion_bufs[i]);
	free(w->fusion_bufs);
	w->fusion_bufs = NULL;
	w->n_fusion_bufs = 0;
	scd_outhold_free(w);
}

/* Keeps a new fusion plan's buffers for the statistics and for the announcements that
 * wait for their buffer (outhold.c; out of memory: they are left out, the version still
 * counts). */
static void fusion_keep(scd_world_t *w, const Sparsecomm__Plan *plan)
{
	scd_neg_fusion_free(w);
	w->fusion_version = plan->fusion_version;
	w->fusion_bufs = calloc(plan->n_fusion_buffers + 1, sizeof(uint32_t *));
	for (size_t i = 0; w->fusion_bufs && i < plan->n_fusion_buffers; i++) {
		const Sparsecomm__FusionBuffer *f = plan->fusion_buffers[i];
		uint32_t *v = malloc(sizeof(uint32_t) * (f->n_cache_ids + 1));
		if (!v || f->n_cache_ids > SCD_FPLAN_MAX_ITEMS) {
			free(v);
			break;
		}
		v[0] = (uint32_t)f->n_cache_ids;
		if (f->n_cache_ids) /* protobuf-c leaves an empty array NULL */
			memcpy(v + 1, f->cache_ids, sizeof(uint32_t) * f->n_cache_ids);
		w->fusion_bufs[w->n_fusion_bufs++] = v;
	}
	scd_outhold_plan(w);
}

void scd_world_fusion_stats(scd_world_t *w, Sparsecomm__StatsReply *r, scd_arena_t *a)
{
	r->fusion_mode = (char *)scd_cfg_str(&w->d->cfg, SCD_CFG_fusion_mode);
	r->fusion_plan_version = w->fusion_version;
	r->cache_entries = w->n_live;
	r->cache_reannounced = w->reannounced;
	r->fast_epochs = w->fast.total_epochs;
	r->fast_kept = w->fast.total_kept;
	r->ready_lists = w->ready_lists;
	r->announcements_kept = w->announcements_kept;
	r->fast_discarded = w->fast.total_discarded;
	r->fusion_buffers =
	    scd_arena_alloc(a, sizeof(*r->fusion_buffers) * ((size_t)w->n_fusion_bufs + 1));
	for (int i = 0; r->fusion_buffers && i < w->n_fusion_bufs; i++) {
		const uint32_t *v = w->fusion_bufs[i];
		Sparsecomm__FusionBufferStats *b = scd_arena_alloc(a, sizeof(*b));
		char **names = scd_arena_alloc(a, sizeof(char *) * (v[0] + 1));
		if (!b || !names)
			return;
		sparsecomm__fusion_buffer_stats__init(b);
		b->tensors = names;
		for (uint32_t k = 1; k <= v[0]; k++) {
			/* the ids were checked against the cache only when responses name them
			 */
			const scd_cache_ent_t *c = scd_cache_get(w, v[k]);
			if (!c)
				continue;
			names[b->n_tensors++] = c->name;
			b->tcp_s += c->last_tcp_s;
			if (c->last_tcm_s > b->tcm_s)
				b->tcm_s = c->last_tcm_s;
		}
		r->fusion_buffers[r->n_fusion_buffers++] = b;
	}
}

sc_status_t scd_neg_on_plan(scd_world_t *w, const Sparsecomm__Plan *plan)
{
	char err[200];
	sc_status_t st = scd_neg_plan_check(w, plan, err, sizeof(err));
	if (st != SC_OK) {
		scd_error(SCD_SUB_NEGOTIATE, "%s: this rank leaves the world", err);
		return st;
	}
	if ((st = scd_neg_plan_entries(w, plan)) != SC_OK)
		return st;
	if (plan->fusion_version > w->fusion_version)
		fusion_keep(w, plan);
	w->d->stats_cycles++;
	scd_fast_before_plan(w, plan);
	for (size_t i = 0; st == SC_OK && i < plan->n_responses; i++) {
		const Sparsecomm__Response *r = plan->responses[i];
		if (r->kind == SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR)
			apply_error(w, r);
		else
			st = apply_allreduce(w, r);
	}
	/* after the responses' jobs: the engine forgets the ids' state behind them */
	for (size_t i = 0; st == SC_OK && i < plan->n_evicted; i++)
		scd_cache_evict(w, plan->evicted[i]);
	if (st == SC_OK) /* its turns queue behind the responses' jobs */
		scd_fast_on_plan(w, plan);
	return st;
}

/*
 * A job's measured times, kept per tensor for the statistics and queued for the
 * coordinator's fusion plan (sent with the next ReadyList): each tensor's compression and
 * fusion, and its share (by elements) of the buffer's communication beyond the latency
 * the planner counts per buffer.
 */
static void record_times(scd_world_t *w, const scd_job_t *job)
{
	double alpha = 0, beta = 0;
	scd_engine_net(w->d->engine, &alpha, &beta);
	double beyond = job->tcm_s - SCD_FUSION_LATENCY_ROUNDS * alpha;
	double total = (double)(job->total_numel ? job->total_numel : 1);
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		scd_cache_ent_t *c = scd_cache_get(w, it->cache_id);
		if (!c) /* evicted since its plan: still reported, the coordinator ignores it */
			continue;
		c->last_tcp_s = it->tcp_s + it->tb_s;
		c->last_tcm_s = job->tcm_s;
		if (w->n_times == w->cap_times) {
			int cap = w->cap_times ? 2 * w->cap_times : 64;
			Sparsecomm__TensorTimes *v =
			    cap <= SCD_MAX_TIMES
				? realloc(w->out_times, sizeof(*v) * (size_t)cap)
				: NULL;
			if (!v) /* the coordinator plans from the reports it has */
				continue;
			w->out_times = v, w->cap_times = cap;
		}
		Sparsecomm__TensorTimes *t = &w->out_times[w->n_times++];
		sparsecomm__tensor_times__init(t);
		t->cache_id = it->cache_id;
		t->tcp_s = it->tcp_s;
		t->tb_s = it->tb_s;
		t->cm_s = beyond > 0 ? beyond * (double)it->numel / total : 0;
	}
}

/* What a tensor's statistics call the job's scheme: the collective's own name where it is
 * not an allreduce. */
static const char *stats_scheme(const scd_job_t *job)
{
	if (job->coll.kind != SCD_COLL_ALLREDUCE)
		return scd_coll_desc(job->coll.kind)->name;
	return scd_scheme_name((scd_scheme_t)job->scheme);
}

/* The wire format the tensor's statistics show: the registered one, and what its last
 * dense sum travelled as where a transport without 16-bit wires (nccl) kept 32 bits. */
static void stats_wire(scd_ntensor_t *nt, const scd_job_t *job)
{
	const char *name = sc_wire_name((sc_wire_t)nt->opts.wire);
	if (job->wire && !job->wire_sent && job->coll.kind == SCD_COLL_ALLREDUCE &&
	    job->coll.op == SC_OP_SUM)
		snprintf(nt->stats.wire, sizeof(nt->stats.wire), "%s as fp32 (%s)", name,
			 job->transport_name ? job->transport_name : "?");
	else
		snprintf(nt->stats.wire, sizeof(nt->stats.wire), "%s", name);
}

void scd_neg_job_free(scd_job_t *job)
{
	free(job->items);
	free(job->nodes);
	free(job->set_ranks);
	free(job);
}

void scd_neg_job_done(scd_world_t *w, scd_job_t *job)
{
	scd_daemon_t *d = w->d;
	if (!w->formed || job->world_seed != w->world_id ||
	    job->fail_gen != scd_ctl_fail_gen(d->ctl)) {
		/* planned in a world that has re-formed since, or before everything in flight
		 * failed (the coordinator lost, a shutdown): its tensors failed then, with the
		 * reason (world.c, reform; ctl.h, scd_ctl_fail_all), and may be in their next
		 * step already */
		scd_neg_job_free(job);
		return;
	}
	if (job->status != SC_OK && job->mesh_broken && !scd_live_cause(w)) {
		/* the other ranks may be waiting on this one's connections, or have failed
		 * with their own account of it: the world re-forms, and its reason, the same
		 * on every rank, fails the job's tensors (logged where it happened); held in
		 * order until then */
		scd_job_t **at = &w->mesh_held;
		while (*at)
			at = &(*at)->next;
		job->next = NULL;
		*at = job;
		scd_world_mesh_failed(w, job->error);
		return;
	}
	if (scd_job_fast(job) && scd_fast_job_done(w, job)) {
		scd_neg_job_free(job);
		return;
	}
	d->stats_buffers++;
	/* The failure was logged where it happened (transport, scheme, engine); here it only
	 * reaches the trainers. */
	if (job->status != SC_OK)
		scd_debug(SCD_SUB_ENGINE, "%s failed: %s", SCD_JOB_NAME(job), job->error);
	double total = (double)(job->total_numel ? job->total_numel : 1);
	if (job->status == SC_OK)
		record_times(w, job);
	if (job->scheme >= 0 && job->scheme < SCD_SCHEME_COUNT) {
		scd_scheme_counters_t *c = &d->scheme_stats[job->scheme];
		c->buffers++;
		c->errors += job->status != SC_OK;
		c->bytes_sent += job->bytes_sent;
		c->bytes_recv += job->bytes_recv;
		c->time_s += job->time_s;
	}
	for (int i = 0; i < job->n_items; i++) {
		scd_job_item_t *it = &job->items[i];
		scd_ntensor_t *nt = it->nt;
		if (!nt)
			continue;
		double share = (double)it->numel / total;
		nt->stats.bytes_sent += (uint64_t)((double)job->bytes_sent * share);
		nt->stats.bytes_recv += (uint64_t)((double)job->bytes_recv * share);
		nt->stats.time_s += job->time_s * share;
		/* the last call's wall time, and of it the time in exchanges and the CPU time:
		 * the same call's, failed or not (sparsecomm.h: cpu_s, exchange_s at most
		 * measured_s) */
		nt->stats.measured_s = job->time_s;
		nt->stats.exchange_s = job->exchange_s;
		nt->stats.cpu_s = job->cpu_s;
		if (job->status == SC_OK) {
			snprintf(nt->stats.scheme, sizeof(nt->stats.scheme), "%s",
				 stats_scheme(job));
			snprintf(nt->stats.transport, sizeof(nt->stats.transport), "%s",
				 job->transport_name ? job->transport_name : "");
			stats_wire(nt, job);
			nt->stats.predicted_s = job->predicted_s;
			nt->stats.density = job->density;
			nt->stats.densification = job->gamma;
			nt->stats.imbalance = job->imbalance;
		}
		nt->stats.nonfinite += it->nonfinite;
		char msg[1100];
		const char *cause = job->status != SC_OK ? scd_live_cause(w) : NULL;
		if (cause) /* the node that went away first: the data plane's error follows */
			job->status = SC_ERR_PEER;
		else if (job->status == SC_ERR_TIMEOUT) /* a transfer that stopped moving */
			job->status = SC_ERR_STALLED;
		if (job->status != SC_OK)
			snprintf(msg, sizeof(msg), "%s of tensor '%s' failed: %s%s%s",
				 scd_coll_name(&nt->coll), nt->name, cause ? cause : "",
				 cause ? "; " : "", job->error);
		scd_ctl_complete_item(d->ctl, it, job->status,
				      job->status == SC_OK ? NULL : msg);
	}
	scd_neg_job_free(job);
}

void scd_neg_release_held(scd_world_t *w, int deliver)
{
	scd_job_t *job = w->mesh_held;
	w->mesh_held = NULL;
	while (job) {
		scd_job_t *next = job->next;
		if (deliver) {
			job->mesh_broken = 0;
			scd_neg_job_done(w, job);
		} else {
			scd_neg_job_free(job);
		}
		job = next;
	}
}
