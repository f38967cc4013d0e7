/*
 * negotiate.c: Horovod-style negotiation (see world.h): every rank's announcements, and
 * the coordinator's table of announced names and the plans it makes of them. The response
 * cache is cache.c's; what every rank does with a plan, the jobs and their ends, apply.c's
 * (ctl fills a job's items from the node's shared buffers). The mesh job and the calls
 * that start or stop the daemon are world.c's: a failure here is returned to it.
 *
 * Every rank applies the same plan in the same order: a response whose tensor this node
 * no longer has (its trainer died after announcing it) still runs, with zeros, so the
 * collective calls of the ranks stay matched; its result is simply not delivered.
 *
 * A fused buffer holds tensors of one dtype only (a change of dtype starts a new group),
 * and its offsets count elements of that dtype.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/presel.h"
#include "ctl/ctl.h"
#include "ctl/pset.h"
#include "engine/engine.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/psname.h"
#include "util/timeline.h"
#include "world/world_int.h"

/* pb_entry_error's skip: no node owes the failed step (a group the ranks formed
 * differently: what a node did not announce, it never submitted in that group) */
#define SCD_LATE_NONE (-2)

/* ---- announcing (every rank) ---------------------------------------------------------- */

/* nt cannot be announced (out of memory): its trainers get the error now, and the
 * coordinator fails the step on every rank, as for a step the node failed before
 * announcing it (late.c), so that no node waits for it and this node owes it to no one:
 * its next announcement is its next step. */
static void out_fail(scd_world_t *w, scd_ntensor_t *nt)
{
	char msg[400];
	snprintf(msg, sizeof(msg),
		 "%s of tensor '%s' failed: rank %d ran out of memory announcing it",
		 scd_coll_name(&nt->coll), nt->name, w->d->rank);
	scd_world_fail_step(w, nt->name, SC_ERR_NOMEM, msg);
	scd_ctl_complete(w->d->ctl, nt, SC_ERR_NOMEM, msg);
}

/* Queues nt's announcement: by cache id id, or in full (UINT32_MAX) with the attributes
 * solo, key and sig. 0, or -1 when nt was completed with an error. */
static int out_add(scd_world_t *w, scd_ntensor_t *nt, uint32_t id, int solo, uint32_t key,
		   const scd_tsig_t *sig)
{
	if (w->n_out == w->cap_out) {
		int cap = w->cap_out ? w->cap_out * 2 : 64;
		scd_outreq_t *o = realloc(w->out, (size_t)cap * sizeof(*o));
		if (!o) {
			out_fail(w, nt);
			return -1;
		}
		w->out = o;
		w->cap_out = cap;
	}
	scd_outreq_t *o = &w->out[w->n_out++];
	memset(o, 0, sizeof(*o));
	scd_ntensor_group(nt, &o->group, &o->group_size);
	if ((o->group && !(o->gname = strdup(nt->name))) ||
	    (id == UINT32_MAX && !(o->name = strdup(nt->name)))) {
		free(o->gname);
		w->n_out--;
		out_fail(w, nt);
		return -1;
	}
	nt->announced_id = id;
	o->queued_s = scd_now_s();
	if (id != UINT32_MAX) {
		o->cached = 1;
		o->id = id;
	} else {
		o->dtype = scd_ntensor_typeword(nt);
		o->numel = nt->numel;
		o->op = scd_coll_pack(&nt->coll);
		o->solo = solo;
		o->fuse_key = key;
		o->sig = *sig;
	}
	scd_world_arm_flush(w);
	return 0;
}

/* What nt is announced with: its fusion class alone (solo), its fusion key, its
 * signature. */
static void announce_attrs(scd_world_t *w, scd_ntensor_t *nt, int *solo_p, uint32_t *key_p,
			   scd_tsig_t *sig_p)
{
	int exdyna_model = !strcmp(scd_cfg_str(&w->d->cfg, SCD_CFG_exdyna_scope), "model");
	*solo_p = scd_ntensor_solo(nt, exdyna_model);
	*key_p = scd_ntensor_fuse_key(nt, exdyna_model);
	scd_tsig_of(nt, sig_p);
}

void scd_world_announce(scd_world_t *w, scd_ntensor_t *nt)
{
	if (!w->is_coord && w->peers[0].state != SPARSECOMM__PEER_STATE__PEER_CONNECTED) {
		char msg[400]; /* nothing is negotiated without the coordinator (liveness.c) */
		snprintf(msg, sizeof(msg), "%s of tensor '%s' failed: %s",
			 scd_coll_name(&nt->coll), nt->name, w->peers[0].gone_reason);
		scd_ctl_complete(w->d->ctl, nt, SC_ERR_PEER, msg);
		return;
	}
	int solo;
	uint32_t key;
	scd_tsig_t sig;
	announce_attrs(w, nt, &solo, &key, &sig);
	uint32_t id = scd_cache_match(w, nt->name, scd_ntensor_typeword(nt), nt->numel,
				      scd_coll_pack(&nt->coll), solo, key, &sig);
	if (scd_fast_announce(w, nt, id)) /* its readiness goes in its fast turn */
		return;
	if (out_add(w, nt, id, solo, key, &sig) != 0)
		return;
	if (id != UINT32_MAX)
		scd_world_presel(w, nt, id, NULL); /* selected while the buffer is planned */
	else
		scd_world_presel(w, nt, SCD_PRESEL_SPEC, &sig); /* speculative (first step) */
}

void scd_neg_reannounce(scd_world_t *w, scd_ntensor_t *nt)
{
	for (int i = 0; i < w->n_out; i++) /* still unsent: it goes in full instead */
		if (w->out[i].cached && w->out[i].id == nt->announced_id) {
			free(w->out[i].gname);
			memmove(&w->out[i], &w->out[i + 1],
				sizeof(*w->out) * (size_t)(w->n_out - i - 1));
			w->n_out--;
			break;
		}
	scd_debug(SCD_SUB_NEGOTIATE,
		  "tensor '%s': its cache id %u was evicted before its plan came: announced "
		  "again in full",
		  nt->name, nt->announced_id);
	w->reannounced++;
	int solo;
	uint32_t key;
	scd_tsig_t sig;
	announce_attrs(w, nt, &solo, &key, &sig);
	out_add(w, nt, UINT32_MAX, solo, key, &sig);
}

static void out_abandon(scd_world_t *w, const char *name, sc_status_t status,
			const char *reason, int step)
{
	scd_poison_t *p = calloc(1, sizeof(*p));
	if (!p || !(p->name = strdup(name)) || !(p->reason = strdup(reason))) {
		if (p)
			free(p->name);
		free(p);
		scd_error(SCD_SUB_NEGOTIATE, "out of memory telling the coordinator: %s",
			  reason);
		return;
	}
	p->status = status;
	p->rank = w->d->rank;
	p->step = step;
	/* in order: a node's failed steps of one name answer its announcements in turn */
	scd_poison_t **pp = &w->out_abandon;
	while (*pp)
		pp = &(*pp)->next;
	*pp = p;
	scd_fast_on_fail(w);
	scd_world_arm_flush(w);
}

void scd_world_abandon(scd_world_t *w, const char *name, sc_status_t status, const char *reason)
{
	out_abandon(w, name, status, reason, 0);
}

void scd_world_fail_step(scd_world_t *w, const char *name, sc_status_t status,
			 const char *reason)
{
	out_abandon(w, name, status, reason, 1);
}

static void poison_free_list(scd_poison_t *p)
{
	while (p) {
		scd_poison_t *next = p->next;
		free(p->name);
		free(p->reason);
		free(p);
		p = next;
	}
}

int scd_neg_out_abandons(const scd_world_t *w)
{
	int n = 0;
	for (const scd_poison_t *p = w->out_abandon; p; p = p->next)
		n++;
	return n;
}

void scd_neg_flush(scd_world_t *w)
{
	scd_neg_flush_first(w, w->n_out, scd_neg_out_abandons(w));
}

void scd_neg_flush_first(scd_world_t *w, int n_out, int n_abandons)
{
	size_t n_ab = 0;
	scd_poison_t **rest = &w->out_abandon;
	while (*rest && (int)n_ab < n_abandons)
		rest = &(*rest)->next, n_ab++;
	n_out = n_out < 0 ? 0 : n_out < w->n_out ? n_out : w->n_out;
	if ((!n_out && !n_ab) || !w->formed)
		return;
	/* the part sent is taken out of the queue first: on the coordinator the ReadyList is
	 * handled at once, and the plan it makes may queue announcements again */
	scd_poison_t *abandons = n_ab ? w->out_abandon : NULL;
	if (n_ab) {
		w->out_abandon = *rest;
		*rest = NULL;
	}
	scd_outreq_t *part = malloc(sizeof(*part) * (size_t)n_out + 1);
	if (part) {
		if (n_out) /* w->out may be NULL: memcpy's source must not be, even for 0 */
			memcpy(part, w->out, sizeof(*part) * (size_t)n_out);
	} else {
		scd_error(SCD_SUB_NEGOTIATE, "out of memory sending %d announcements", n_out);
		for (int i = 0; i < n_out; i++) {
			free(w->out[i].name);
			free(w->out[i].gname);
		}
	}
	if (n_out < w->n_out) /* what was queued after the part sent stays, in order */
		memmove(w->out, w->out + n_out, sizeof(*w->out) * (size_t)(w->n_out - n_out));
	w->n_out -= n_out;
	Sparsecomm__Abandon *abs = calloc(n_ab + 1, sizeof(*abs));
	Sparsecomm__Abandon **abp = calloc(n_ab + 1, sizeof(*abp));
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	Sparsecomm__FastReport fr;
	Sparsecomm__TensorRequest *reqs = calloc((size_t)n_out + 1, sizeof(*reqs));
	Sparsecomm__TensorRequest **rp = calloc((size_t)n_out + 1, sizeof(*rp));
	Sparsecomm__TensorSig *sigs = calloc((size_t)n_out + 1, sizeof(*sigs));
	uint32_t *ids = calloc((size_t)n_out + 1, sizeof(*ids));
	uint32_t *held = calloc((size_t)n_out + 1, sizeof(*held));
	Sparsecomm__GroupTag *tags = calloc((size_t)n_out + 1, sizeof(*tags));
	Sparsecomm__GroupTag **tagp = calloc((size_t)n_out + 1, sizeof(*tagp));
	if (!part || !reqs || !rp || !ids || !held || !abs || !abp || !sigs || !tags || !tagp)
		goto out;
	double now = scd_now_s();
	rl.rank = w->d->rank;
	scd_fast_ready_fill(w, &rl, &fr);
	for (scd_poison_t *p = abandons; p; p = p->next) {
		Sparsecomm__Abandon *a = &abs[rl.n_abandoned];
		sparsecomm__abandon__init(a);
		a->name = p->name;
		a->status = p->status;
		a->reason = p->reason;
		a->step = p->step;
		abp[rl.n_abandoned++] = a;
	}
	rl.abandoned = abp;
	for (int i = 0; i < n_out; i++) {
		scd_outreq_t *o = &part[i];
		if (o->gname) {
			Sparsecomm__GroupTag *g = &tags[rl.n_groups];
			sparsecomm__group_tag__init(g);
			g->name = o->gname;
			g->group = o->group;
			g->size = o->group_size;
			tagp[rl.n_groups++] = g;
		}
		if (o->cached) {
			/* how long a flush kept it back (outhold.c; not the wait of a world
			 * forming), at most 60 s (the coordinator's bound) */
			double us = o->kept ? (now - o->queued_s) * 1e6 : 0;
			held[rl.n_cached_ids] = us < 0		       ? 0
						: us > SCD_HELD_US_MAX ? SCD_HELD_US_MAX
								       : (uint32_t)us;
			ids[rl.n_cached_ids++] = o->id;
			continue;
		}
		Sparsecomm__TensorRequest *r = &reqs[rl.n_requests];
		sparsecomm__tensor_request__init(r);
		r->name = o->name;
		r->dtype = o->dtype;
		r->numel = o->numel;
		r->op = o->op;
		r->solo = o->solo;
		r->fuse_key = o->fuse_key;
		r->process_set = scd_pset_of(o->name, NULL);
		scd_tsig_to_msg(&o->sig, &sigs[rl.n_requests]);
		r->sig = &sigs[rl.n_requests];
		rp[rl.n_requests++] = r;
	}
	rl.requests = rp;
	rl.cached_ids = ids;
	rl.cached_held_us = held;
	rl.n_cached_held_us = rl.n_cached_ids;
	rl.groups = tagp;
	Sparsecomm__TensorTimes **tp = calloc((size_t)w->n_times + 1, sizeof(*tp));
	for (int i = 0; tp && i < w->n_times; i++)
		tp[rl.n_times++] = &w->out_times[i];
	rl.times = tp;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_READY;
	m.ready = &rl;
	scd_world_send_coord(w, &m);
	if (rl.n_requests || rl.n_cached_ids)
		w->ready_lists++;
	free(tp);
	w->n_times = 0;
out:
	for (int i = 0; part && i < n_out; i++) {
		free(part[i].name);
		free(part[i].gname);
	}
	free(part);
	poison_free_list(abandons);
	free(abs);
	free(abp);
	free(reqs);
	free(rp);
	free(sigs);
	free(ids);
	free(held);
	free(tags);
	free(tagp);
}

/* ---- the coordinator -------------------------------------------------------------------- */

const char *scd_centry_coll_name(const scd_centry_t *e, int world_size)
{
	for (int r = 0; r < world_size; r++)
		if (e->have[r] == 1)
			return scd_coll_word_name(e->op[r]);
	return "operation";
}

void scd_centry_release(scd_centry_t *e)
{
	free(e->name);
	free(e->have);
	free(e->dtype);
	free(e->op);
	free(e->numel);
	free(e->sig);
	free(e->failed);
	scd_group_free(e);
	free(e);
}

/* Marks the nodes without a member of e's process set as never announcing it (e->count
 * counts them from the start); 0 when this node does not know the set. */
static int centry_outside(scd_world_t *w, scd_centry_t *e)
{
	if (!(e->pset = scd_pset_of(e->name, NULL)))
		return 1;
	const scd_pset_t *p = scd_ctl_pset(w->d->ctl, e->pset);
	if (!p) {
		scd_warn_limited(
		    SCD_SUB_NEGOTIATE,
		    "tensor '%s' was announced in process set %u, which the coordinator's "
		    "node does not know: ignored",
		    e->name, e->pset);
		return 0;
	}
	for (int r = 0; r < w->d->world_size; r++)
		e->have[r] = SCD_HAVE_OUTSIDE;
	for (int i = 0; i < p->n_nodes; i++)
		e->have[p->nodes[i]] = 0;
	e->count = w->d->world_size - p->n_nodes;
	return 1;
}

static scd_centry_t *centry_get(scd_world_t *w, const char *name)
{
	uint32_t b = scd_world_hash_name(name);
	for (scd_centry_t *e = w->ebucket[b]; e; e = e->hnext)
		if (!strcmp(e->name, name))
			return e;
	int P = w->d->world_size;
	scd_centry_t *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->name = strdup(name);
	e->have = calloc((size_t)P, 1);
	e->dtype = calloc((size_t)P, sizeof(uint32_t));
	e->op = calloc((size_t)P, sizeof(uint32_t));
	e->numel = calloc((size_t)P, sizeof(uint64_t));
	e->sig = calloc((size_t)P, sizeof(scd_tsig_t));
	if (!e->name || !e->have || !e->dtype || !e->op || !e->numel || !e->sig ||
	    !centry_outside(w, e)) {
		scd_centry_release(e);
		return NULL;
	}
	e->first_ms = scd_now_ms();
	e->hnext = w->ebucket[b];
	w->ebucket[b] = e;
	if (w->etail)
		w->etail->next = e;
	else
		w->ehead = e;
	w->etail = e;
	return e;
}

/* Takes e out of the lookup by name (it stays in arrival order until freed): an entry that
 * has failed, so that the name's next announcements start a new one. */
static void centry_detach(scd_world_t *w, scd_centry_t *e)
{
	scd_centry_t **pp = &w->ebucket[scd_world_hash_name(e->name)];
	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	e->hnext = NULL;
	e->detached = 1;
}

static void centry_free(scd_world_t *w, scd_centry_t *e)
{
	if (!e->detached)
		centry_detach(w, e);
	scd_centry_t *prev = NULL;
	for (scd_centry_t *x = w->ehead; x != e; x = x->next)
		prev = x;
	if (prev)
		prev->next = e->next;
	else
		w->ehead = e->next;
	if (w->etail == e)
		w->etail = prev;
	scd_centry_release(e);
}

/* rank announced name, ready there since at_ms (the coordinator's clock). */
static void coord_add(scd_world_t *w, int rank, const char *name, uint32_t dtype,
		      uint64_t numel, uint32_t op, int solo, uint32_t fuse_key,
		      const scd_tsig_t *sig, uint64_t at_ms)
{
	if (scd_late_take(w, rank, name, 1))
		return; /* the late step: refused with the next plan */
	scd_centry_t *e = centry_get(w, name);
	if (!e || e->have[rank])
		return;
	e->solo |= solo;
	if (!e->outside_filled) /* the first announcement (the set's outside not counted) */
		e->fuse_key = fuse_key;
	else if (e->fuse_key != fuse_key) /* the nodes' options differ: fuse with nothing */
		e->solo = 1;
	/* the first announcement fills the rows of the nodes outside the set */
	for (int r = 0; e->pset && !e->outside_filled && r < w->d->world_size; r++)
		if (e->have[r] == SCD_HAVE_OUTSIDE) {
			e->dtype[r] = dtype;
			e->numel[r] = numel;
			e->op[r] = op;
			e->sig[r] = *sig;
		}
	e->outside_filled = 1;
	e->have[rank] = 1;
	e->dtype[rank] = dtype;
	e->numel[rank] = numel;
	e->op[rank] = op;
	e->sig[rank] = *sig;
	if (at_ms > e->latest_ms)
		e->latest_ms = at_ms;
	if (++e->count == w->d->world_size)
		e->ready_ms = e->latest_ms;
}

typedef struct plan_builder {
	Sparsecomm__Plan plan;
	Sparsecomm__Response **resp;
	size_t cap_resp;
	Sparsecomm__CacheEntry **ents;
	size_t cap_ents;
	scd_arena_t arena;
} plan_builder_t;

/* Room for one more pointer in *v (n held, *cap allocated); 0 out of memory. */
static int pb_room(void ***v, size_t *cap, size_t n)
{
	if (n < *cap)
		return 1;
	size_t c = *cap ? *cap * 2 : 16;
	void **nv = realloc(*v, c * sizeof(**v));
	if (!nv)
		return 0;
	*v = nv;
	*cap = c;
	return 1;
}

/* A new response, or NULL out of memory (the plan then lacks it and is still whole). */
static Sparsecomm__Response *pb_response(plan_builder_t *pb)
{
	if (!pb_room((void ***)&pb->resp, &pb->cap_resp, pb->plan.n_responses))
		return NULL;
	Sparsecomm__Response *r = scd_arena_alloc(&pb->arena, sizeof(*r));
	if (r)
		sparsecomm__response__init(r);
	return r;
}

/* Adds an error response for name answering the announcements of the n node ranks in
 * ranks (late.c); SC_ERR_NOMEM (nothing added) out of memory. */
static sc_status_t pb_error(plan_builder_t *pb, const char *name, sc_status_t st,
			    const char *msg, const int32_t *ranks, size_t n)
{
	Sparsecomm__Response *r = pb_response(pb);
	char **names = scd_arena_alloc(&pb->arena, sizeof(char *));
	int32_t *rv = scd_arena_alloc(&pb->arena, sizeof(int32_t) * (n + 1));
	if (!r || !names || !rv || !(names[0] = scd_arena_strdup(&pb->arena, name)) ||
	    !(r->error = scd_arena_strdup(&pb->arena, msg)))
		return SC_ERR_NOMEM;
	r->kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR;
	r->names = names;
	r->n_names = 1;
	r->status = st;
	if (n)
		memcpy(rv, ranks, sizeof(int32_t) * n);
	r->ranks = rv;
	r->n_ranks = n;
	pb->resp[pb->plan.n_responses++] = r;
	return SC_OK;
}

/* Fails entry e on every rank: the nodes that announced it get the error, the others but
 * node skip (-1: none; SCD_LATE_NONE: none owes it) owe the step (late.c); e is freed. */
static void pb_entry_error(scd_world_t *w, plan_builder_t *pb, scd_centry_t *e, sc_status_t st,
			   const char *msg, int skip)
{
	int32_t *ranks = calloc((size_t)w->d->world_size + 1, sizeof(int32_t));
	size_t n = 0;
	for (int r = 0; ranks && r < w->d->world_size; r++)
		if (e->have[r] == 1)
			ranks[n++] = r;
	if (skip != SCD_LATE_NONE)
		scd_late_note(w, e, st, msg, skip);
	/* none announced it: nothing to answer; out of memory for the list: an empty one
	 * answers every node */
	if ((n || !ranks) && pb_error(pb, e->name, st, msg, ranks, n) != SC_OK)
		scd_error(SCD_SUB_NEGOTIATE, "out of memory failing '%s': %s", e->name, msg);
	free(ranks);
	centry_free(w, e);
}

/* The cache id for an agreed tensor: the name's id with these attributes (its newest
 * first), else a new one announced in the plan. *old_p gets the name's id that holds its
 * place in the fusion plan, whichever form that is (the form planned now takes it over:
 * a name keeps one place however its forms alternate). */
static uint32_t pb_cache_id(scd_world_t *w, plan_builder_t *pb, const scd_centry_t *e,
			    uint32_t *old_p)
{
	uint32_t id = scd_cache_lookup(w, e->name);
	*old_p = UINT32_MAX;
	/* the name's forms are the plan's: none is evicted with it (its place in the fusion
	 * plan passes from one to another) */
	scd_cache_touch(w, e->name, w->cycle + 1);
	if (id != UINT32_MAX && scd_cache_same(scd_cache_get(w, id), e->dtype[0], e->numel[0],
					       e->op[0], e->solo, e->fuse_key, &e->sig[0])) {
		if (scd_fplan_pos(&w->fplan, id) < 0) /* (the steady step: it holds it) */
			*old_p = scd_cache_plan_held(w, e->name);
		return id;
	}
	*old_p = scd_cache_plan_held(w, e->name);
	uint32_t again = scd_cache_match(w, e->name, e->dtype[0], e->numel[0], e->op[0],
					 e->solo, e->fuse_key, &e->sig[0]);
	if (again != UINT32_MAX)
		return again;
	/* the plan's room first: an id the coordinator assigns is always announced */
	if (!pb_room((void ***)&pb->ents, &pb->cap_ents, pb->plan.n_new_entries))
		return UINT32_MAX;
	Sparsecomm__CacheEntry *ce = scd_arena_alloc(&pb->arena, sizeof(*ce));
	Sparsecomm__TensorSig *sig = scd_arena_alloc(&pb->arena, sizeof(*sig));
	char *ce_name = scd_arena_strdup(&pb->arena, e->name);
	char *scheme = scd_arena_strdup(&pb->arena, e->sig[0].scheme);
	size_t kept = scd_shape_kept(&e->sig[0].shape);
	uint64_t *dims = kept ? scd_arena_alloc(&pb->arena, sizeof(*dims) * kept) : NULL;
	id = w->n_cache;
	if (!ce || !ce_name || !sig || !scheme || (kept && !dims) ||
	    scd_cache_set(w, id, e->name, e->dtype[0], e->numel[0], e->op[0], e->solo,
			  e->fuse_key, &e->sig[0]) != SC_OK)
		return UINT32_MAX;
	scd_cache_get(w, id)->used_cycle = w->cycle + 1;
	sparsecomm__cache_entry__init(ce);
	ce->id = id;
	ce->name = ce_name;
	ce->dtype = e->dtype[0];
	ce->numel = e->numel[0];
	ce->op = e->op[0];
	ce->solo = e->solo;
	ce->fuse_key = e->fuse_key;
	ce->process_set = e->pset;
	/* the scheme's text is the plan's copy: a later new entry of the same plan may move
	 * the cache (scd_cache_set grows it) before the plan is packed */
	scd_tsig_to_msg(&scd_cache_get(w, id)->sig, sig);
	sig->scheme = scheme;
	if (kept) { /* the plan's copy, as the scheme's */
		memcpy(dims, sig->dims, sizeof(*dims) * kept);
		sig->dims = dims;
	}
	ce->sig = sig;
	pb->ents[pb->plan.n_new_entries++] = ce;
	return id;
}

/* The first degraded rank, or -1. A degraded node refuses new submissions and has failed
 * what it had announced, so nothing pending can complete while it stays degraded. */
/* The degraded rank an entry waits for, or -1: the one degraded first, so that a failure
 * that spreads (a trainer that fails an operation and then leaves) is reported by its
 * cause. A node outside the entry's process set blocks nothing of it. */
static int blocking_degraded(scd_world_t *w, const scd_centry_t *e)
{
	int first = -1;
	for (int r = 0; r < w->d->world_size; r++)
		if (w->peers[r].degraded && e->have[r] != SCD_HAVE_OUTSIDE && /* in its set */
		    (first < 0 || w->peers[r].degraded_seq < w->peers[first].degraded_seq))
			first = r;
	return first;
}

static scd_poison_t **poison_find(scd_world_t *w, const char *name);
static void on_hold(uv_timer_t *t);

/* A tensor every rank announced, waiting for its buffer in coord_emit. */
typedef struct ready_ent {
	scd_centry_t *e;
	uint32_t id, old_id; /* old_id: the name's id holding its plan place, or UINT32_MAX */
	int pos;   /* in the fusion plan, -1: planned this cycle only (fixed, layerwise) */
	int fresh; /* first planned now: never held */
} ready_ent_t;

/* The scheme_pins pattern a name matches: its position from 1, 0 for none. */
static uint32_t pin_index(const scd_world_t *w, const char *name)
{
	const char *pins = scd_cfg_str(&w->d->cfg, SCD_CFG_scheme_pins);
	char item[SCD_PIN_ITEM_MAX];
	const char *want;
	uint32_t n = 1;
	while (scd_config_pin_next(&pins, item, sizeof(item), &want) != 0) {
		if (want && fnmatch(item, name, 0) == 0)
			return n;
		n++;
	}
	return 0;
}

/* The fusion key the planner sees: the tensor's class (scd_ntensor_fuse_key), its type
 * word (dtype and wire format) and the scheme_pins pattern its name matches (a buffer
 * runs one scheme). A hash: emit_buffer splits what a collision would put together. */
static uint32_t plan_key(const scd_world_t *w, const scd_centry_t *e)
{
	uint32_t k = (e->fuse_key ^ (e->dtype[0] * 0x9e3779b9u)) * 16777619u;
	uint32_t n = pin_index(w, e->name);
	return n ? k ^ (n * 0x85ebca6bu) : k;
}

/* Whether two ready tensors may share a buffer: the exact class behind plan_key. */
static int same_class(const scd_world_t *w, const scd_centry_t *a, const scd_centry_t *b)
{
	return a->pset == b->pset && a->dtype[0] == b->dtype[0] && a->fuse_key == b->fuse_key &&
	       scd_coll_fuse_word(a->op[0]) == scd_coll_fuse_word(b->op[0]) &&
	       pin_index(w, a->name) == pin_index(w, b->name);
}

static scd_fplan_cfg_t plan_cfg(const scd_world_t *w, scd_fusion_mode_t mode)
{
	const scd_config_t *cfg = &w->d->cfg;
	double alpha = 0, beta = 0;
	scd_engine_net(w->d->engine, &alpha, &beta);
	return (scd_fplan_cfg_t){.mode = mode,
				 .fixed_bytes =
				     (uint64_t)scd_cfg_int(cfg, SCD_CFG_fusion_threshold_bytes),
				 .buffers = (int)scd_cfg_int(cfg, SCD_CFG_fusion_buffers),
				 .alpha_s = SCD_FUSION_LATENCY_ROUNDS * alpha};
}

static void emit_one(scd_world_t *w, plan_builder_t *pb, ready_ent_t *r, int n);

/* The ready tensors r[0..n-1] (in buffer order) as one buffer, or as several where
 * neighbours differ in class (what a collision of plan_key would have fused). */
static void emit_buffer(scd_world_t *w, plan_builder_t *pb, ready_ent_t *r, int n)
{
	for (int i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && same_class(w, r[i].e, r[j].e); j++)
			;
		emit_one(w, pb, r + i, j - i);
	}
}

/* One response for the ready tensors r[0..n-1] (in buffer order), their entries freed;
 * out of memory, the entries stay for the next plan. */
static void emit_one(scd_world_t *w, plan_builder_t *pb, ready_ent_t *r, int n)
{
	Sparsecomm__Response *g = pb_response(pb);
	uint32_t *ids = scd_arena_alloc(&pb->arena, sizeof(uint32_t) * (size_t)n);
	if (!g || !ids) {
		scd_warn(SCD_SUB_NEGOTIATE, "out of memory planning a buffer of %d tensors", n);
		return;
	}
	pb->resp[pb->plan.n_responses++] = g;
	g->kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	g->cache_ids = ids;
	for (int i = 0; i < n; i++) {
		g->cache_ids[g->n_cache_ids++] = r[i].id;
		centry_free(w, r[i].e);
		r[i].e = NULL;
	}
}

static int by_pos(const void *a, const void *b)
{
	const ready_ent_t *x = a, *y = b;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Fixed and layer-wise fusion: the tensors ready now, in arrival order, planned alone. */
static void emit_cycle(scd_world_t *w, plan_builder_t *pb, ready_ent_t *r, int n,
		       const scd_fplan_cfg_t *cfg)
{
	scd_fplan_tensor_t *t = calloc((size_t)n + 1, sizeof(*t));
	uint8_t *start = calloc((size_t)n + 1, 1);
	for (int i = 0; t && start && i < n; i++)
		t[i] = (scd_fplan_tensor_t){
		    .bytes = r[i].e->numel[0] * sc_dtype_size(scd_tw_dtype(r[i].e->dtype[0])),
		    .key = plan_key(w, r[i].e),
		    .solo = r[i].e->solo,
		    .whole = !!(r[i].e->fuse_key & SCD_FUSE_WHOLE)};
	if (t && start)
		scd_fplan_plan(cfg, t, n, start);
	for (int i = 0, j; i < n; i = j) { /* out of memory: every tensor alone */
		for (j = i + 1; j < n && t && start && !start[j]; j++)
			;
		emit_buffer(w, pb, r + i, j - i);
	}
	free(t);
	free(start);
}

/* A buffer of positions [a, end) goes out after its wait with only r[0..n-1] (in position
 * order) ready: the plan learns from where readiness changes (scd_fplan_partial). */
static void learn_breaks(scd_fplan_state_t *fp, const ready_ent_t *r, int n, int a, int end,
			 int grouped, uint64_t last_ms)
{
	uint8_t ready[SCD_FPLAN_MAX_ITEMS];
	if (end - a > SCD_FPLAN_MAX_ITEMS) /* no buffer holds more */
		return;
	for (int k = a, i = 0; k < end; k++) {
		ready[k - a] = i < n && r[i].pos == k;
		i += ready[k - a];
	}
	scd_fplan_partial(fp, a, end, ready, grouped, last_ms);
}

/*
 * Aligned and adaptive fusion: the cached plan, learnt from the order in which tensors
 * were first planned, says each tensor's buffer. A buffer goes out when all its tensors
 * are ready, when one of them is planned for the first time (the first step runs as the
 * tensors come), or when none of its tensors has become ready for fusion_wait_ms (a
 * tensor that a step skips, or a trainer that waits for each result before it submits the
 * next tensor: the plan then learns a break where readiness changed, learn_breaks); the
 * wait of the rest is armed on the hold timer. The wait runs from the buffer's latest
 * ready tensor, not its first: tensors still coming are worth waiting for (a loaded
 * host's backward pass spread a buffer of 13 tensors over 80 ms, and a wait from the
 * first sent it in pieces of 2 or 3 tensors, each with a buffer's exchange).
 */
static void emit_planned(scd_world_t *w, plan_builder_t *pb, ready_ent_t *r, int n,
			 const scd_fplan_cfg_t *cfg, uint64_t now)
{
	scd_fplan_state_t *fp = &w->fplan;
	for (int i = 0; i < n; i++) {
		r[i].pos = scd_fplan_pos(fp, r[i].id);
		if (r[i].pos >= 0)
			continue;
		const scd_centry_t *e = r[i].e;
		r[i].fresh = 1;
		if (scd_fplan_add(
			fp, r[i].id, r[i].old_id,
			e->numel[0] * sc_dtype_size(scd_tw_dtype(e->dtype[0])), plan_key(w, e),
			(e->solo ? SCD_FPLAN_SOLO : 0) |
			    (e->fuse_key & SCD_FUSE_WHOLE ? SCD_FPLAN_WHOLE : 0)) != 0)
			r[i].pos = -1;
	}
	if (scd_fplan_update(fp, cfg) > 0)
		scd_info(SCD_SUB_NEGOTIATE,
			 "fusion plan %llu (%s, from %s): %d tensors in %d buffers",
			 (unsigned long long)fp->version, scd_fusion_mode_name(cfg->mode),
			 fp->why, fp->n, fp->n_buf);
	uint64_t wait_cfg = (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_fusion_wait_ms);
	int lead = scd_fplan_lead(fp);
	for (int i = 0; i < n; i++) { /* after the update: positions may have moved */
		if (r[i].pos >= 0 || r[i].fresh)
			r[i].pos = scd_fplan_pos(fp, r[i].id);
		scd_fplan_arrived(fp, r[i].pos, r[i].e->ready_ms, wait_cfg);
		if (r[i].pos == lead) /* a step begins: its period is the plan's step time */
			scd_fplan_step(fp, r[i].e->ready_ms);
	}
	if (n > 1)
		qsort(r, (size_t)n, sizeof(*r), by_pos);
	uint64_t wait = scd_fplan_wait_ms(fp, wait_cfg);
	uint64_t next = UINT64_MAX;
	for (int i = 0, j; i < n; i = j) {
		int b = r[i].pos >= 0 ? fp->buf[r[i].pos] : -1, fresh = r[i].fresh;
		/* a group released now (group.c) goes out whole in this plan: a member held
		 * back for its buffer's other tensors would be a group of one at the next
		 * pass, its mates gone, and stall */
		int grouped = r[i].e->gstate == SCD_GROUP_READY;
		uint64_t last = r[i].e->ready_ms;
		for (j = i + 1; b >= 0 && j < n && r[j].pos >= 0 && fp->buf[r[j].pos] == b;
		     j++) {
			fresh |= r[j].fresh;
			grouped |= r[j].e->gstate == SCD_GROUP_READY;
			if (r[j].e->ready_ms > last)
				last = r[j].e->ready_ms;
		}
		int a = r[i].pos, end = r[i].pos; /* the buffer's positions: [a, end) */
		while (b >= 0 && a > 0 && fp->buf[a - 1] == b)
			a--;
		while (b >= 0 && end < fp->n && fp->buf[end] == b)
			end++;
		if (b >= 0 && !fresh && j - i < end - a && (grouped || now >= last + wait))
			learn_breaks(fp, r + i, j - i, a, end, grouped, last);
		else if (b >= 0 && j - i == end - a)
			scd_fplan_whole(fp, a, end);
		if (b < 0 || j - i == end - a || fresh || grouped || now >= last + wait)
			emit_buffer(w, pb, r + i, j - i);
		else if (last + wait < next)
			next = last + wait;
	}
	if (next != UINT64_MAX)
		uv_timer_start(&w->hold_timer, on_hold, next - now, 0);
}

/* The fusion plan's buffers, for the ranks' statistics, when its version is new. */
static void pb_fusion(scd_world_t *w, plan_builder_t *pb)
{
	const scd_fplan_state_t *fp = &w->fplan;
	if (fp->version == w->fusion_version || !fp->n_buf)
		return;
	Sparsecomm__FusionBuffer **v =
	    scd_arena_alloc(&pb->arena, sizeof(*v) * (size_t)fp->n_buf);
	uint32_t *ids = scd_arena_alloc(&pb->arena, sizeof(uint32_t) * (size_t)fp->n);
	if (!v || !ids)
		return;
	memcpy(ids, fp->ids, sizeof(uint32_t) * (size_t)fp->n);
	pb->plan.n_fusion_buffers = 0;
	for (int k = 0; k < fp->n; k++) {
		if (k == 0 || fp->buf[k] != fp->buf[k - 1]) {
			Sparsecomm__FusionBuffer *f = scd_arena_alloc(&pb->arena, sizeof(*f));
			if (!f)
				return;
			sparsecomm__fusion_buffer__init(f);
			f->cache_ids = &ids[k];
			v[pb->plan.n_fusion_buffers++] = f;
		}
		v[pb->plan.n_fusion_buffers - 1]->n_cache_ids++;
	}
	pb->plan.fusion_buffers = v;
	pb->plan.fusion_version = fp->version;
}

/* A failure that group.c decides (scd_group_pass); arg is the plan being built. */
static void group_fail(scd_world_t *w, void *arg, scd_centry_t *e, sc_status_t st,
		       const char *msg, int late)
{
	pb_entry_error(w, arg, e, st, msg, late ? -1 : SCD_LATE_NONE);
}

/* The members of each group that goes out now next to each other, where its first member
 * is: fixed and layer-wise fusion plan the ready tensors in this order, so a group shares
 * buffers as far as the fusion threshold allows. */
static void group_together(ready_ent_t *r, int n)
{
	for (int i = 0; i < n; i++) {
		const scd_centry_t *lead = r[i].e->gleader;
		for (int j = i + 1; lead && j < n; j++)
			if (r[j].e->gleader == lead) {
				ready_ent_t x = r[j];
				memmove(&r[i + 2], &r[i + 1], sizeof(*r) * (size_t)(j - i - 1));
				r[++i] = x;
			}
	}
}

/*
 * Turns every name that all ranks announced into an error (disagreement, stall, dead
 * node) or a place in a fused buffer (by the fusion mode: emit_cycle, emit_planned), and
 * broadcasts the plan.
 */
static void coord_emit(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	int P = d->world_size;
	int mode = scd_fusion_mode_parse(scd_cfg_str(&d->cfg, SCD_CFG_fusion_mode));
	uint64_t stall_ms = (uint64_t)scd_cfg_int(&d->cfg, SCD_CFG_stall_timeout_ms);
	uint64_t now = scd_now_ms();
	plan_builder_t pb = {.plan = SPARSECOMM__PLAN__INIT};
	ready_ent_t *ready = NULL;
	int n_ready = 0, cap_ready = 0;
	char msg[1024];

	/* While the world re-forms a plan reaches no node (none has joined the new world):
	 * what would fail meanwhile fails at the first emit once it has formed. */
	if (!w->formed)
		return;

	scd_poison_t *refusals = scd_late_refusals(w);
	for (scd_poison_t *l = refusals; l; l = l->next) {
		int32_t rank = l->rank;
		if (pb_error(&pb, l->name, l->status, l->reason, &rank, 1) != SC_OK)
			scd_error(SCD_SUB_NEGOTIATE, "out of memory: %s", l->reason);
	}
	scd_group_pass(w, now, stall_ms, group_fail, &pb);
	for (scd_centry_t *e = w->ehead, *next; e; e = next) {
		next = e->next;
		scd_poison_t *poison = *poison_find(w, e->name);
		if (e->failed) { /* a node failed its step before announcing it */
			pb_entry_error(w, &pb, e, e->failed_status, e->failed, -1);
			continue;
		}
		if (poison) {
			pb_entry_error(w, &pb, e, poison->status, poison->reason, poison->rank);
			continue;
		}
		int dr = blocking_degraded(w, e);
		if (dr >= 0) {
			snprintf(msg, sizeof(msg), "%s of tensor '%s' aborted: %s",
				 scd_centry_coll_name(e, P), e->name,
				 w->peers[dr].degraded_reason);
			/* a node that left or was lost (liveness.c), or one that lost a
			 * trainer */
			pb_entry_error(w, &pb, e,
				       w->peers[dr].state !=
					       SPARSECOMM__PEER_STATE__PEER_CONNECTED
					   ? SC_ERR_PEER
					   : SC_ERR_ABORTED,
				       msg, -1);
			continue;
		}
		if (e->gstate == SCD_GROUP_HOLD) /* its group is not ready (group.c) */
			continue;
		if (e->count < P)
			scd_join_fill(w, e); /* joined nodes take part with zeros */
		if (e->count < P) {
			if (now - e->first_ms < stall_ms)
				continue;
			/* Names the trainer ranks: with one trainer per node they are the
			 * node ranks; otherwise every trainer of the missing nodes. */
			int L = d->local_size, missing = P - e->count, k = 0;
			int n = snprintf(msg, sizeof(msg), "%s of tensor '%s' stalled: %s",
					 scd_centry_coll_name(e, P), e->name,
					 L > 1	       ? "the trainers of node"
					 : missing > 1 ? "ranks"
						       : "rank");
			for (int r = 0; r < P && n < (int)sizeof(msg) - 64; r++)
				if (!e->have[r])
					n += snprintf(msg + n, sizeof(msg) - (size_t)n, "%s %d",
						      k++ ? "," : "", r);
			if (L > 1) {
				n += snprintf(msg + n, sizeof(msg) - (size_t)n, " (ranks");
				k = 0;
				const scd_pset_t *ps = scd_ctl_pset(d->ctl, e->pset);
				for (int r = 0; r < P && n < (int)sizeof(msg) - 64; r++)
					for (int l = 0; !e->have[r] && l < L; l++)
						if (scd_pset_member(ps, r * L + l))
							n += snprintf(
							    msg + n, sizeof(msg) - (size_t)n,
							    "%s %d", k++ ? "," : "", r * L + l);
				n += snprintf(msg + n, sizeof(msg) - (size_t)n, ")");
			}
			snprintf(msg + n, sizeof(msg) - (size_t)n,
				 " did not submit it within %llu ms",
				 (unsigned long long)stall_ms);
			pb_entry_error(w, &pb, e, SC_ERR_STALLED, msg, -1);
			continue;
		}
		if (scd_agree_describe(w, e, msg, sizeof(msg))) {
			pb_entry_error(w, &pb, e, SC_ERR_MISMATCH, msg, -1);
			continue;
		}
		uint32_t old = UINT32_MAX, id = pb_cache_id(w, &pb, e, &old);
		if (id == UINT32_MAX && w->n_cache == UINT32_MAX) { /* every id given out */
			snprintf(
			    msg, sizeof(msg),
			    "%s of tensor '%s' failed: the coordinator has given out every "
			    "response cache id (%u); the world must form again",
			    scd_centry_coll_name(e, P), e->name, UINT32_MAX);
			pb_entry_error(w, &pb, e, SC_ERR_LIMIT, msg, -1);
			continue;
		}
		if (id == UINT32_MAX || n_ready == INT32_MAX) { /* the tensor fails alone */
			snprintf(msg, sizeof(msg),
				 "%s of tensor '%s' failed: the coordinator ran out of "
				 "memory",
				 scd_centry_coll_name(e, P), e->name);
			pb_entry_error(w, &pb, e, SC_ERR_NOMEM, msg, -1);
			continue;
		}
		if (n_ready == cap_ready) {
			int cap = cap_ready ? 2 * cap_ready : 64;
			ready_ent_t *v = realloc(ready, sizeof(*v) * (size_t)cap);
			if (!v) { /* stays announced: the next emit plans it */
				scd_warn(SCD_SUB_NEGOTIATE, "out of memory planning '%s'",
					 e->name);
				continue;
			}
			ready = v, cap_ready = cap;
		}
		ready[n_ready++] = (ready_ent_t){.e = e, .id = id, .old_id = old, .pos = -1};
	}
	group_together(ready, n_ready);
	if (mode == SCD_FUSION_ALIGNED || mode == SCD_FUSION_ADAPTIVE) {
		scd_fplan_cfg_t cfg = plan_cfg(w, (scd_fusion_mode_t)mode);
		emit_planned(w, &pb, ready, n_ready, &cfg, now);
	} else if (n_ready) {
		/* a class that fuses whole (ExDyna over the model) follows the cached plan
		 * in every mode: its buffer, and the state keyed by it, is the same every
		 * step, whatever arrived in this cycle; the rest is planned by the cycle */
		scd_fplan_cfg_t cfg = plan_cfg(w, mode < 0 ? SCD_FUSION_FIXED : mode);
		int n_whole = 0;
		for (int i = 0; i < n_ready; i++)
			if (ready[i].e->fuse_key & SCD_FUSE_WHOLE) {
				ready_ent_t x = ready[i];
				memmove(&ready[n_whole + 1], &ready[n_whole],
					sizeof(*ready) * (size_t)(i - n_whole));
				ready[n_whole++] = x;
			}
		if (n_whole)
			emit_planned(w, &pb, ready, n_whole, &cfg, now);
		if (n_ready > n_whole)
			emit_cycle(w, &pb, ready + n_whole, n_ready - n_whole, &cfg);
	}
	free(ready);
	uint32_t *evicted = NULL;
	Sparsecomm__FastBegin fb;
	uint32_t fast_ids[SCD_FAST_CYCLE];
	if (pb.plan.n_responses) {
		pb_fusion(w, &pb);
		/* past cache_max_entries: what no node announced since, the least recently
		 * planned first (scd_cache_evict_pick); every rank drops it after the plan's
		 * responses */
		for (scd_centry_t *e = w->ehead; e; e = e->next)
			scd_cache_touch(w, e->name, w->cycle + 1);
		pb.plan.n_evicted = scd_cache_evict_pick(w, w->cycle + 1, &evicted);
		pb.plan.evicted = evicted;
		pb.plan.cycle = ++w->cycle;
		pb.plan.responses = pb.resp;
		pb.plan.new_entries = pb.ents;
		scd_fast_coord_plan(w, &pb.plan, &fb, fast_ids);
		Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_PLAN;
		m.plan = &pb.plan;
		uint64_t tl = scd_tl_begin();
		scd_world_send_all(w, &m);
		scd_tl_arg_t ta[] = {{"cycle", NULL, (int64_t)pb.plan.cycle},
				     {"responses", NULL, (int64_t)pb.plan.n_responses}};
		scd_tl_here("plan_out", tl, ta, 2);
	}
	free(evicted);
	free(pb.resp);
	free(pb.ents);
	scd_arena_free(&pb.arena);
	scd_late_free_list(refusals);
}

static void on_hold(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	if (w->formed && w->is_coord)
		coord_emit(w);
}

static scd_poison_t **poison_find(scd_world_t *w, const char *name)
{
	scd_poison_t **pp = &w->poisons;
	while (*pp && strcmp((*pp)->name, name))
		pp = &(*pp)->next;
	return pp;
}

/* Rank failed its step of a name before announcing it: that answers the step the
 * coordinator recorded it owes (late.c), or else fails the name's entry on every rank. */
static void coord_failed_step(scd_world_t *w, int rank, const Sparsecomm__Abandon *a)
{
	const char *name = a->name ? a->name : "";
	if (scd_late_take(w, rank, name, 0))
		return;
	scd_centry_t *e = centry_get(w, name);
	if (!e || e->have[rank])
		return;
	if (!e->failed) { /* the first node's reason is the step's */
		if (!(e->failed = strdup(a->reason && a->reason[0] ? a->reason : "failed")))
			return;
		e->failed_status = a->status < 0 ? a->status : SC_ERR_ABORTED;
	}
	e->have[rank] = 3; /* present, failed there: neither answered nor owing */
	e->count++;
	/* the node's next step of the name (it may come in the same ReadyList) and the
	 * others' announcements after this one go to a new entry: this one fails at the next
	 * emit, which runs before another ReadyList is read */
	centry_detach(w, e);
}

/* Records (or, status SC_OK, clears) a name rank cannot complete. */
static void coord_poison(scd_world_t *w, int rank, const Sparsecomm__Abandon *a)
{
	scd_poison_t **pp = poison_find(w, a->name ? a->name : "");
	if (*pp) {
		scd_poison_t *p = *pp;
		*pp = p->next;
		p->next = NULL;
		poison_free_list(p);
	}
	if (a->status == SC_OK || !a->name)
		return;
	scd_poison_t *p = calloc(1, sizeof(*p));
	if (!p || !(p->name = strdup(a->name)) ||
	    !(p->reason = strdup(a->reason ? a->reason : ""))) {
		if (p)
			free(p->name);
		free(p);
		return;
	}
	p->rank = rank;
	p->status = a->status;
	p->next = w->poisons;
	w->poisons = p;
	centry_get(w, a->name); /* fails at the next emit, with whatever others announced */
}

/* Whether a rank's announcement is one no rank could mean: an operation word of no
 * collective, or a process set its name does not carry (said, limited: a peer's text). */
static int request_refused(scd_world_t *w, int from, const Sparsecomm__TensorRequest *r)
{
	const char *name = r->name ? r->name : "";
	char why[96] = "";
	if (!scd_coll_word_valid(r->op, (uint32_t)(w->d->world_size * w->d->local_size)))
		snprintf(why, sizeof(why), "operation word 0x%x, which names no collective",
			 r->op);
	else if (r->process_set != scd_pset_of(name, NULL))
		snprintf(why, sizeof(why), "process set %u, which its name does not carry",
			 r->process_set);
	if (why[0])
		scd_warn_limited(SCD_SUB_NEGOTIATE,
				 "rank %d announced tensor '%s' with %s: ignored", from, name,
				 why);
	return why[0] != 0;
}

void scd_neg_ready_collect(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl)
{
	uint64_t now = scd_now_ms();
	for (size_t i = 0; i < rl->n_abandoned; i++)
		if (rl->abandoned[i]->step)
			coord_failed_step(w, from, rl->abandoned[i]);
		else
			coord_poison(w, from, rl->abandoned[i]);
	if (!w->formed || w->old_world) {
		/* A ReadyList of the world left, read while the world re-formed (sent again
		 * when the Reform closed the pipes; stream.c held it until the new world
		 * formed): its abandons are taken, its announcements are not. The node
		 * announces each of those tensors again, with its group's tag, in the new
		 * world (world.c, reform): taken here too, an announcement would take the
		 * late step it answers (late.c), and the step announced again would then be
		 * taken as a fresh one and pair with the others' next step. Its cache ids
		 * and times name the old world's cache. */
		if (rl->n_requests || rl->n_cached_ids || rl->n_groups)
			scd_debug(SCD_SUB_NEGOTIATE,
				  "rank %d's %zu announcements of the world left dropped: it "
				  "announces them again once the world has formed",
				  from, rl->n_requests + rl->n_cached_ids);
		return;
	}
	for (size_t i = 0; i < rl->n_requests; i++) {
		const Sparsecomm__TensorRequest *r = rl->requests[i];
		scd_tsig_t sig;
		if (request_refused(w, from, r))
			continue; /* left out: the tensor stalls naming this rank */
		scd_tsig_from_msg(r->sig, &sig);
		coord_add(w, from, r->name, r->dtype, r->numel, r->op, r->solo, r->fuse_key,
			  &sig, now);
	}
	for (size_t i = 0; i < rl->n_cached_ids; i++) {
		uint32_t id = rl->cached_ids[i];
		const scd_cache_ent_t *c = scd_cache_get(w, id);
		if (!c && id < w->n_cache) { /* its node announces it again, in full */
			scd_debug(SCD_SUB_NEGOTIATE,
				  "rank %d announced cache id %u, evicted since: dropped", from,
				  id);
			continue;
		}
		if (!c) {
			scd_warn(SCD_SUB_NEGOTIATE, "rank %d announced unknown cache id %u",
				 from, id);
			continue;
		}
		/* ready on its node since it was queued there (bounded: it is the node's word)
		 */
		uint64_t held_ms =
		    i < rl->n_cached_held_us
			? (rl->cached_held_us[i] < SCD_HELD_US_MAX ? rl->cached_held_us[i]
								   : SCD_HELD_US_MAX) /
			      1000
			: 0;
		coord_add(w, from, c->name, c->dtype, c->numel, c->op, c->solo, c->fuse_key,
			  &c->sig, held_ms < now ? now - held_ms : 0);
	}
	for (size_t i = 0; i < rl->n_groups; i++)
		scd_group_tag(w, from, rl->groups[i]);
	for (size_t i = 0; i < rl->n_times; i++) {
		const Sparsecomm__TensorTimes *t = rl->times[i];
		scd_fplan_report(&w->fplan, from, t->cache_id, t->tcp_s, t->tb_s, t->cm_s);
	}
}

void scd_neg_on_ready(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl)
{
	uint64_t tl = scd_tl_begin();
	if (w->formed && !w->old_world) /* before the plan it leads to */
		scd_fast_coord_ready(w, from, rl);
	scd_neg_ready_collect(w, from, rl);
	coord_emit(w);
	scd_tl_arg_t ta[] = {{"rank", NULL, from}};
	scd_tl_here("ready_in", tl, ta, 1);
}

void scd_neg_on_node_state(scd_world_t *w, const Sparsecomm__NodeState *ns)
{
	if (ns->rank < 0 || ns->rank >= w->d->world_size)
		return;
	scd_peer_t *p = &w->peers[ns->rank];
	if (p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED && !ns->degraded)
		return; /* a node that left or was lost stays given up (liveness.c) */
	if (ns->degraded && !p->degraded)
		p->degraded_seq = ++w->degraded_seq;
	if (ns->degraded) /* its next trainers start afresh: they owe no step */
		scd_late_forget_rank(w, ns->rank);
	p->degraded = ns->degraded;
	snprintf(p->degraded_reason, sizeof(p->degraded_reason), "%s",
		 ns->reason ? ns->reason : "");
	if (p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED) /* else logged as it went */
		scd_info(SCD_SUB_NEGOTIATE, "node %d is %s%s%s", ns->rank,
			 ns->degraded ? "degraded: " : "whole again",
			 ns->degraded ? p->degraded_reason : "", "");
	if (ns->degraded) {
		scd_fast_coord_end(w, "a node is degraded", 0);
		/* Everything pending fails now: the node cannot complete any of it, even what
		 * it announced before its trainer died. */
		coord_emit(w);
		scd_join_on_degraded(w, ns->rank);
		scd_barrier_on_degraded(w, ns->rank);
	}
}

void scd_neg_tick(scd_world_t *w)
{
	if (w->is_coord && w->ehead)
		coord_emit(w);
}

void scd_neg_pending(scd_world_t *w, Sparsecomm__PendingReply *r, scd_arena_t *a)
{
	int P = w->d->world_size;
	size_t n = 0;
	for (scd_centry_t *e = w->ehead; e; e = e->next)
		n++;
	r->tensors = scd_arena_alloc(a, sizeof(*r->tensors) * (n + 1));
	if (!r->tensors)
		return;
	uint64_t now = scd_now_ms();
	for (scd_centry_t *e = w->ehead; e; e = e->next) {
		Sparsecomm__PendingTensor *p = scd_arena_alloc(a, sizeof(*p));
		int32_t *ready = scd_arena_alloc(a, sizeof(int32_t) * (size_t)P);
		int32_t *missing = scd_arena_alloc(a, sizeof(int32_t) * (size_t)P);
		if (!p || !ready || !missing)
			return;
		sparsecomm__pending_tensor__init(p);
		size_t name_len;
		scd_pset_of(e->name, &name_len);
		p->name = scd_arena_strndup(a, e->name, name_len);
		p->ready_ranks = ready;
		p->missing_ranks = missing;
		p->process_set = e->pset;
		for (int i = 0; p->name && i < P; i++) {
			if (e->have[i] == SCD_HAVE_OUTSIDE)
				continue;
			if (e->have[i])
				ready[p->n_ready_ranks++] = i;
			else
				missing[p->n_missing_ranks++] = i;
		}
		p->waiting_s = (double)(now - e->first_ms) / 1000.0;
		r->tensors[r->n_tensors++] = p;
	}
}

void scd_neg_destroy(scd_world_t *w)
{
	poison_free_list(w->poisons);
	poison_free_list(w->out_abandon);
	scd_late_free_list(w->lates);
	scd_late_free_list(w->refusals);
	while (w->ehead)
		centry_free(w, w->ehead);
	scd_cache_free(w);
	for (int b = 0; b < SCD_WORLD_BUCKETS; b++)
		free(w->name_to_id[b]);
	for (int i = 0; i < w->n_out; i++) {
		free(w->out[i].name);
		free(w->out[i].gname);
	}
	free(w->out);
	free(w->out_times);
	scd_neg_fusion_free(w);
	scd_fplan_state_free(&w->fplan);
}

void scd_neg_reset(scd_world_t *w)
{
	scd_poison_t *lates = scd_late_keep(w); /* what the nodes owe outlives the world */
	/* and so do the failed steps this node has not told yet: they go once the world
	 * has formed, as the announcements made again do (scd_neg_flush) */
	scd_poison_t *abandons = w->out_abandon;
	w->out_abandon = NULL;
	scd_neg_destroy(w);
	scd_barrier_reform(w); /* failed on every node as the world re-forms */
	w->poisons = w->refusals = NULL;
	w->out_abandon = abandons;
	w->lates = lates;
	w->ehead = w->etail = NULL;
	memset(w->ebucket, 0, sizeof(w->ebucket));
	memset(w->name_to_id, 0, sizeof(w->name_to_id));
	w->out = NULL;
	w->n_out = w->cap_out = 0;
	w->out_times = NULL;
	w->n_times = w->cap_times = 0;
	w->fusion_bufs = NULL;
	w->n_fusion_bufs = 0;
	w->fusion_version = 0;
	w->cycle = 0;
	w->job_seq = 0;
	w->global_jobs = 0;
	scd_fast_reset(w);
	scd_fplan_state_init(&w->fplan, w->d->world_size);
}
