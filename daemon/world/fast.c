/*
 * fast.c: fast mode (docs/design.md "Fast mode"), behind the key fast_path. When the
 * coordinator's last plans each planned one small cached buffer alone, in a cycle of n
 * buffers that repeated (n = 1: the same buffer each time), a plan begins fast mode
 * (Plan.fast_begin): from then on every node submits the cycle's next buffer's step, as
 * soon as it is ready, as its next fast turn (coll/job.h, scd_fast_t), and sends no
 * ReadyList for it; the turn's exchange carries every rank's readiness (engine/verdict.h,
 * scd_fast_decide). Anything else a node has to announce makes it leave its next turn,
 * which is then discarded on every rank, and so is every later turn of the epoch: their
 * tensors are announced again and planned as before. The coordinator ends the epoch
 * (FastEnd) when it has to plan again: an announcement, or a node whose turn waited
 * fast_wait_ms for the others (FastWaiting) and has not come back on the coordinator's
 * node; after a short epoch it waits before it begins another (the backoff).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/bufctx.h"
#include "coll/job.h"
#include "ctl/ctl.h"
#include "engine/engine.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/timeline.h"
#include "world/world_int.h"

/* plans in a row that each planned the same cached buffer alone before fast mode begins
 * with that buffer; a cycle of n > 1 buffers must have repeated: 2n plans */
#define SCD_FAST_RUN 3

/* The backoff: an epoch that ends with fewer than SCD_FAST_LONG turns kept (on the
 * coordinator's node; every node keeps the same turns) makes the coordinator let
 * SCD_FAST_HOLD_MIN plans pass before it begins another, twice as many after each short
 * epoch in a row, at most SCD_FAST_HOLD_MAX; a longer epoch clears it. An epoch costs one
 * discarded turn, a round, at its end and saves each kept turn its negotiation, two
 * messages: one that keeps fewer than 2 turns did not pay. A workload whose cycle breaks
 * as it repeats (A, B, A, B, C, ...: the cycle A, B seen twice, then C, so the epoch's
 * first turn is left) would otherwise begin an epoch and discard a turn at every break. */
#define SCD_FAST_LONG	  2
#define SCD_FAST_HOLD_MIN 8
#define SCD_FAST_HOLD_MAX 512

static void mix(uint64_t *h, uint64_t v)
{
	for (int i = 0; i < 8; i++) { /* FNV-1a over v's little-endian bytes */
		*h ^= (v >> (8 * i)) & 0xff;
		*h *= 0x100000001b3ull;
	}
}

uint64_t scd_fast_digest(const scd_world_t *w, uint64_t epoch, const uint32_t *ids, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	mix(&h, w->world_id);
	mix(&h, epoch);
	for (size_t i = 0; i < n; i++) {
		const scd_cache_ent_t *c = scd_cache_get(w, ids[i]);
		mix(&h, ids[i]);
		mix(&h, c ? c->numel : 0);
		mix(&h, c ? c->dtype : 0);
	}
	return h;
}

/* A turn's digest: the epoch's (its whole cycle) and the turn's place in the cycle. */
static uint64_t turn_digest(uint64_t digest, uint64_t place)
{
	mix(&digest, place);
	return digest;
}

/* Whether cache id id can run as fast turns: cached, of the global set, and summed in one
 * round, which every rank decides from the agreed entry alone. Else why says why. */
static int fast_eligible(const scd_world_t *w, uint32_t id, char *why, size_t len)
{
	const scd_cache_ent_t *c = scd_cache_get(w, id);
	if (!c) {
		snprintf(why, len, "cache id %u is not cached", id);
		return 0;
	}
	if (c->pset) {
		snprintf(why, len, "tensor '%s' is of process set %u", c->name, c->pset);
		return 0;
	}
	if (strlen(c->name) >= SCD_FAST_NAME_BYTES) { /* its turns could not be named */
		snprintf(why, len, "tensor '%.64s...' has a name of over %d bytes", c->name,
			 SCD_FAST_NAME_BYTES - 1);
		return 0;
	}
	Sparsecomm__Response r = SPARSECOMM__RESPONSE__INIT;
	uint32_t ids[1] = {id};
	r.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	r.cache_ids = ids;
	r.n_cache_ids = 1;
	scd_fast_t probe = {.epoch = 1}; /* counts no job: nothing of w changes */
	scd_job_t *job = NULL;
	scd_neg_allreduce_job((scd_world_t *)w, &r, &probe, 0, &job);
	int ok = job && job->coll.kind == SCD_COLL_ALLREDUCE && job->coll.op == SC_OP_SUM &&
		 job->dtype == SC_FLOAT32 && scd_bufctx_one_round(job, w->d->world_size);
	if (job)
		scd_neg_job_free(job);
	if (!job)
		snprintf(why, len, "tensor '%s', which there is no memory to check", c->name);
	else if (!ok)
		snprintf(why, len, "tensor '%s' is not a float32 sum of one round", c->name);
	return ok;
}

/* Whether a node still owes a late step (late.c); a record of steps answered alone, which
 * may stay for the run, keeps nothing from the fast path. */
static int late_owed(const scd_world_t *w)
{
	for (const scd_poison_t *l = w->lates; l; l = l->next)
		if (l->owed > 0)
			return 1;
	return 0;
}

/* What keeps the coordinator from beginning fast mode now (NULL: nothing). */
static const char *coord_excluded(const scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	if (w->ehead || w->poisons || late_owed(w))
		return "announcements, failures or late steps pending";
	if (w->join_count)
		return "a node joined";
	for (int r = 0; r < d->world_size; r++)
		if (w->peers[r].degraded ||
		    (r != d->rank &&
		     w->peers[r].state != SPARSECOMM__PEER_STATE__PEER_CONNECTED))
			return "a node is degraded or gone";
	if (scd_ctl_pset_count(d->ctl))
		return "process sets are defined";
	if (!w->tops || !strcmp(w->tops->name, "nccl"))
		return "the transport is nccl";
	if (w->n_cfg_held)
		return "a configuration change is pending";
	return NULL;
}

/* The cycle the coordinator's last plans repeated: its length n (0: none), the smallest
 * such that the last SCD_FAST_RUN plans (n = 1) or 2n plans (n > 1), each one cached
 * buffer alone, repeat with period n. */
static size_t coord_cycle(const scd_fast_state_t *f)
{
	for (size_t n = 1; n <= SCD_FAST_CYCLE; n++) {
		size_t need = n == 1 ? SCD_FAST_RUN : 2 * n, i = n;
		if ((size_t)f->run < need)
			break;
		const uint32_t *h = f->hist + (size_t)f->run - need;
		while (i < need && h[i] == h[i - n])
			i++;
		if (i == need)
			return n;
	}
	return 0;
}

void scd_fast_coord_plan(scd_world_t *w, Sparsecomm__Plan *plan, Sparsecomm__FastBegin *fb,
			 uint32_t *ids)
{
	scd_fast_state_t *f = &w->fast;
	int one = plan->n_responses == 1 &&
		  plan->responses[0]->kind == SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE &&
		  plan->responses[0]->n_cache_ids == 1;
	if (!one) {
		f->run = 0;
	} else {
		if (f->run == SCD_FAST_HIST) /* the oldest goes */
			memmove(f->hist, f->hist + 1, sizeof(f->hist) - sizeof(f->hist[0]));
		f->hist[f->run < SCD_FAST_HIST ? f->run++ : SCD_FAST_HIST - 1] =
		    plan->responses[0]->cache_ids[0];
	}
	size_t n = one ? coord_cycle(f) : 0;
	if (f->hold && !f->coord_epoch) {
		f->hold--;
		return;
	}
	if (!scd_cfg_int(&w->d->cfg, SCD_CFG_fast_path) || f->coord_epoch || !n ||
	    plan->n_evicted || coord_excluded(w))
		return;
	/* the cycle from the plan after this one: the last n plans' buffers, in order */
	const uint32_t *cyc = f->hist + (size_t)f->run - n;
	char why[160];
	for (size_t i = 0; i < n; i++)
		if (!fast_eligible(w, cyc[i], why, sizeof(why)))
			return;
	memcpy(ids, cyc, n * sizeof(*ids));
	f->run = 0;
	sparsecomm__fast_begin__init(fb);
	fb->epoch = f->coord_epoch = ++f->epochs;
	fb->cache_ids = ids;
	fb->n_cache_ids = n;
	plan->fast_begin = fb;
	scd_debug(SCD_SUB_NEGOTIATE,
		  "fast mode %llu begins with a cycle of %zu, cache id %u first",
		  (unsigned long long)fb->epoch, n, ids[0]);
}

void scd_fast_coord_end(scd_world_t *w, const char *why, int judge)
{
	if (!w->fast.coord_epoch)
		return;
	Sparsecomm__FastEnd fe = SPARSECOMM__FAST_END__INIT;
	fe.epoch = w->fast.coord_epoch;
	w->fast.coord_epoch = 0;
	w->fast.run = 0;
	scd_fast_state_t *f = &w->fast;
	if (!judge) {
		/* ended from outside the workload (a node degraded or joined, a configuration
		 * change): the backoff stays as it was */
	} else if (f->seen == fe.epoch && f->epoch_kept >= SCD_FAST_LONG) {
		f->hold = f->hold_next = 0;
	} else {
		f->hold = f->hold_next ? f->hold_next : SCD_FAST_HOLD_MIN;
		f->hold_next =
		    f->hold * 2 > SCD_FAST_HOLD_MAX ? SCD_FAST_HOLD_MAX : f->hold * 2;
	}
	/* the cycle's buffers ran as turns, which no plan counted: the least recently used
	 * now, they would go first, though every node is about to announce them again */
	for (size_t i = 0; w->fast.seen == fe.epoch && i < w->fast.n; i++) {
		scd_cache_ent_t *c = scd_cache_get(w, w->fast.ids[i]);
		if (c)
			c->used_cycle = w->cycle + 1;
	}
	scd_debug(
	    SCD_SUB_NEGOTIATE,
	    "fast mode %llu ends after %llu turns kept here: %s; %u plans before the next",
	    (unsigned long long)fe.epoch, (unsigned long long)f->epoch_kept, why, f->hold);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_FAST_END;
	m.fast_end = &fe;
	scd_world_send_all(w, &m);
}

void scd_fast_coord_ready(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl)
{
	if (rl->fast_report)
		scd_debug(SCD_SUB_NEGOTIATE,
			  "rank %d: fast mode %llu kept %llu, discarded %llu", from,
			  (unsigned long long)rl->fast_report->epoch,
			  (unsigned long long)rl->fast_report->kept,
			  (unsigned long long)rl->fast_report->discarded);
	/* a group's member, even of one member, goes out announced with its group: its
	 * plans never count towards an epoch, which it would end at its next step */
	if (rl->n_groups)
		w->fast.run = 0;
	/* a node's fast_left of an epoch that ended already (set as a plan came) is stale */
	if (w->fast.coord_epoch &&
	    (rl->n_requests || rl->n_cached_ids || rl->n_abandoned || rl->n_groups ||
	     (rl->fast_left && rl->fast_left == w->fast.coord_epoch))) {
		char why[64];
		snprintf(why, sizeof(why), "rank %d announced", from);
		scd_fast_coord_end(w, why, 1);
	}
}

void scd_fast_coord_waiting(scd_world_t *w, int from, const Sparsecomm__FastWaiting *fw)
{
	if (fw->rank != from || fw->epoch != w->fast.coord_epoch)
		return; /* an epoch ended already */
	/* the turn came back here, so every node submitted it (done_turn): the waiting node
	 * is not waiting for the others, its turn comes back as the timer fired */
	if (fw->epoch == w->fast.seen && fw->turn <= w->fast.done_turn)
		return;
	char why[96];
	snprintf(why, sizeof(why), "rank %d's turn %llu waited for the others", from,
		 (unsigned long long)fw->turn);
	scd_fast_coord_end(w, why, 1);
}

sc_status_t scd_fast_plan_check(const scd_world_t *w, const Sparsecomm__Plan *plan, char *err,
				size_t err_len)
{
	const Sparsecomm__FastBegin *fb = plan->fast_begin;
	if (!fb)
		return SC_OK;
	char why[160] = "";
	if (!scd_cfg_int(&w->d->cfg, SCD_CFG_fast_path))
		snprintf(why, sizeof(why), "fast_path is 0 here");
	else if (fb->n_cache_ids < 1 || fb->n_cache_ids > SCD_FAST_CYCLE)
		snprintf(why, sizeof(why), "%zu cache ids, not 1 to %d", fb->n_cache_ids,
			 SCD_FAST_CYCLE);
	else if (fb->epoch <= w->fast.seen)
		snprintf(why, sizeof(why), "epoch %llu, not after %llu",
			 (unsigned long long)fb->epoch, (unsigned long long)w->fast.seen);
	for (size_t k = 0; !why[0] && k < fb->n_cache_ids; k++) {
		for (size_t i = 0; !why[0] && i < plan->n_evicted; i++)
			if (plan->evicted[i] == fb->cache_ids[k])
				snprintf(why, sizeof(why), "cache id %u, which the plan evicts",
					 fb->cache_ids[k]);
		if (!why[0])
			fast_eligible(w, fb->cache_ids[k], why, sizeof(why));
	}
	if (!why[0])
		return SC_OK;
	snprintf(err, err_len, "plan cycle %llu begins fast mode with %s",
		 (unsigned long long)plan->cycle, why);
	return SC_ERR_PROTOCOL;
}

void scd_fast_on_plan(scd_world_t *w, const Sparsecomm__Plan *plan)
{
	const Sparsecomm__FastBegin *fb = plan->fast_begin;
	if (!fb)
		return;
	w->fast.epoch = w->fast.seen = fb->epoch;
	w->fast.n = fb->n_cache_ids; /* 1 to SCD_FAST_CYCLE: scd_fast_plan_check */
	memcpy(w->fast.ids, fb->cache_ids, w->fast.n * sizeof(*w->fast.ids));
	w->fast.digest = scd_fast_digest(w, fb->epoch, fb->cache_ids, w->fast.n);
	w->fast.turn = w->fast.open_turn = 0;
	w->fast.epoch_kept = w->fast.done_turn = 0;
	w->fast.total_epochs++;
}

static void on_wait(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	scd_world_collect(w); /* a turn whose hand-back is owed is not waiting */
	if (!w->fast.epoch || !w->fast.open_turn || uv_is_active((uv_handle_t *)t))
		return; /* (active: a turn the hand-back opened, its own wait begun) */
	Sparsecomm__FastWaiting fw = SPARSECOMM__FAST_WAITING__INIT;
	fw.rank = w->d->rank;
	fw.epoch = w->fast.epoch;
	fw.turn = w->fast.open_turn;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_FAST_WAITING;
	m.fast_waiting = &fw;
	scd_world_send_coord(w, &m);
}

/* The cache id of this node's next turn: the cycle's next. */
static uint32_t next_id(const scd_world_t *w)
{
	return w->fast.ids[w->fast.turn % w->fast.n];
}

/* The job of this node's next turn (leave: one that leaves it, with no tensor): of the
 * cycle's next buffer, so every rank's exchange is of that buffer's agreed length. */
static scd_job_t *turn_job(scd_world_t *w, int leave)
{
	Sparsecomm__Response r = SPARSECOMM__RESPONSE__INIT;
	uint32_t ids[1] = {next_id(w)};
	r.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	r.cache_ids = ids;
	r.n_cache_ids = 1;
	scd_fast_t f = {.epoch = w->fast.epoch,
			.turn = w->fast.turn + 1,
			.digest = turn_digest(w->fast.digest, w->fast.turn % w->fast.n),
			.leave = leave};
	scd_job_t *job = NULL;
	scd_neg_allreduce_job(w, &r, &f, !leave, &job);
	if (!job)
		return NULL;
	w->fast.turn++;
	job->timeout_ms = scd_fast_turn_timeout_ms(&w->d->cfg, job->timeout_ms);
	return job;
}

/* A turn waits for the others' readiness too: FastWaiting, sent after fast_wait_ms, ends
 * the epoch well before this, and then the stall is named by the coordinator as before. */
int scd_fast_turn_timeout_ms(const scd_config_t *cfg, int op_timeout_ms)
{
	int64_t t = scd_cfg_int(cfg, SCD_CFG_fast_wait_ms) +
		    scd_cfg_int(cfg, SCD_CFG_stall_timeout_ms) +
		    2 * scd_cfg_int(cfg, SCD_CFG_peer_timeout_ms);
	if (t <= op_timeout_ms)
		return op_timeout_ms;
	return (int)(t < INT32_MAX ? t : INT32_MAX);
}

void scd_fast_turn_taken(scd_world_t *w, const scd_job_t *job)
{
	scd_fast_state_t *f = &w->fast;
	if (job->fast.epoch != f->last_epoch) { /* its first turn of the epoch */
		f->last_epoch = job->fast.epoch;
		f->last_turn = f->last_leave = 0;
		f->last_name[0] = '\0';
		f->last_state = SCD_FAST_DONE;
	}
	if (job->fast.leave) {
		f->last_leave = job->fast.turn;
		return;
	}
	/* cached as the turn's job was built from it; its name fits (fast_eligible) */
	const scd_cache_ent_t *c = scd_cache_get(w, f->ids[(job->fast.turn - 1) % f->n]);
	size_t len = c ? strlen(c->name) : 0;
	if (!len || len >= sizeof(f->last_name)) { /* cannot happen: as if it had none */
		f->last_turn = 0;
		f->last_name[0] = '\0';
		return;
	}
	memcpy(f->last_name, c->name, len + 1);
	f->last_turn = job->fast.turn;
	f->last_state = SCD_FAST_UNDECIDED;
	f->last_t0 = scd_tl_begin();
}

/* Submits job, this node's next turn, and records it for the re-form rule. */
static void turn_submit(scd_world_t *w, scd_job_t *job)
{
	scd_fast_turn_taken(w, job);
	scd_engine_submit(w->d->engine, job);
}

/* This node leaves its epoch: its next turn is a LEAVE, discarded on every rank. */
static void fast_leave(scd_world_t *w, int tell)
{
	scd_job_t *job = turn_job(w, 1);
	if (job)
		turn_submit(w, job);
	else /* the others' turn then fails on its exchange's timeout */
		scd_error(SCD_SUB_NEGOTIATE, "out of memory leaving fast mode %llu",
			  (unsigned long long)w->fast.epoch);
	if (tell)
		w->fast.left = w->fast.epoch;
	w->fast.epoch = w->fast.open_turn = 0;
	uv_timer_stop(&w->fast.timer);
}

void scd_fast_on_fail(scd_world_t *w)
{
	if (!w->fast.epoch)
		return;
	scd_debug(SCD_SUB_NEGOTIATE, "a step failed here: this rank leaves fast mode %llu",
		  (unsigned long long)w->fast.epoch);
	fast_leave(w, 1);
}

void scd_fast_before_plan(scd_world_t *w, const Sparsecomm__Plan *plan)
{
	if (!w->fast.epoch || (!plan->n_responses && !plan->n_evicted))
		return;
	scd_warn(SCD_SUB_NEGOTIATE,
		 "plan cycle %llu came while fast mode %llu was on: this rank leaves it first",
		 (unsigned long long)plan->cycle, (unsigned long long)w->fast.epoch);
	fast_leave(w, 1);
}

int scd_fast_announce(scd_world_t *w, scd_ntensor_t *nt, uint32_t id)
{
	if (!w->fast.epoch)
		return 0;
	/* a group's member (group.c) goes out with its group, announced: a turn of its own
	 * would leave the others held for it */
	uint64_t group = 0;
	uint32_t group_size = 0;
	scd_ntensor_group(nt, &group, &group_size);
	if (id == next_id(w) && !group && !w->n_out && !w->out_abandon && !w->fast.open_turn) {
		scd_job_t *job = turn_job(w, 0);
		if (job && job->items[0].nt == nt) {
			turn_submit(w, job);
			w->fast.open_turn = job->fast.turn;
			uv_timer_start(&w->fast.timer, on_wait,
				       (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_fast_wait_ms),
				       0);
			return 1;
		}
		if (job) { /* not filled from nt: the turn is left instead (nt stays announced)
			    */
			job->fast.leave = 1;
			job->items[0].nt = NULL;
			turn_submit(w, job);
			w->fast.left = w->fast.epoch;
			w->fast.epoch = 0;
			return 0;
		}
	}
	fast_leave(w, 1);
	return 0;
}

void scd_fast_on_end(scd_world_t *w, const Sparsecomm__FastEnd *fe)
{
	if (w->fast.epoch && fe->epoch == w->fast.epoch)
		fast_leave(w, 0);
}

int scd_fast_job_done(scd_world_t *w, scd_job_t *job)
{
	if (job->fast.epoch == w->fast.epoch && job->fast.turn == w->fast.open_turn) {
		w->fast.open_turn = 0;
		uv_timer_stop(&w->fast.timer);
	}
	int last = job->fast.epoch == w->fast.last_epoch && job->fast.turn == w->fast.last_turn;
	if (job->fast.epoch == w->fast.seen && job->fast.turn > w->fast.done_turn)
		w->fast.done_turn = job->fast.turn;
	if (job->fast.leave)
		return 1;
	if (last) {
		w->fast.last_state = job->fast.discarded ? SCD_FAST_DISCARDED : SCD_FAST_DONE;
		scd_tl_arg_t ta[] = {{"epoch", NULL, (int64_t)job->fast.epoch},
				     {"turn", NULL, (int64_t)job->fast.turn},
				     {"outcome",
				      job->fast.discarded    ? "discarded"
				      : job->status == SC_OK ? "kept"
							     : "failed",
				      0}};
		if (job->n_items > 0 && job->items[0].name)
			scd_tl_tensor(job->items[0].name, "fast_turn", w->fast.last_t0, ta, 3);
	}
	if (!job->fast.discarded) {
		w->fast.kept += job->status == SC_OK;
		w->fast.total_kept += job->status == SC_OK;
		w->fast.epoch_kept += job->status == SC_OK && job->fast.epoch == w->fast.seen;
		return 0;
	}
	w->fast.discarded++;
	w->fast.total_discarded++;
	if (job->fast.epoch == w->fast.epoch) /* the epoch ended at this turn on every rank */
		w->fast.epoch = w->fast.open_turn = 0;
	for (int i = 0; i < job->n_items; i++) {
		scd_ntensor_t *nt = job->items[i].nt;
		if (nt && nt->state == SCD_NT_RUNNING) { /* planned as before */
			nt->state = SCD_NT_ANNOUNCED;
			scd_world_announce(w, nt);
		}
	}
	return 1;
}

void scd_fast_ready_fill(scd_world_t *w, Sparsecomm__ReadyList *rl, Sparsecomm__FastReport *r)
{
	rl->fast_left = w->fast.left;
	w->fast.left = 0;
	if (!w->fast.kept && !w->fast.discarded)
		return;
	sparsecomm__fast_report__init(r);
	r->epoch = w->fast.seen;
	r->kept = w->fast.kept;
	r->discarded = w->fast.discarded;
	rl->fast_report = r;
	w->fast.kept = w->fast.discarded = 0;
}

void scd_fast_reset(scd_world_t *w)
{
	w->fast.coord_epoch = w->fast.epochs = 0;
	w->fast.run = 0;
	w->fast.hold = w->fast.hold_next = 0;
	w->fast.epoch_kept = w->fast.done_turn = 0;
	w->fast.epoch = w->fast.seen = w->fast.turn = w->fast.open_turn = w->fast.left = 0;
	w->fast.kept = w->fast.discarded = 0;
	w->fast.last_epoch = w->fast.last_turn = w->fast.last_leave = 0;
	w->fast.last_name[0] = '\0';
	w->fast.last_state = SCD_FAST_DONE;
	if (uv_is_active((uv_handle_t *)&w->fast.timer))
		uv_timer_stop(&w->fast.timer);
}

/*
 * The re-form rule (docs/design.md "Fast mode", "A re-form in the middle of a turn").
 * A re-form fails every step in the engine, fast turns too (world.c, reform_fail); a step
 * announced (a discarded turn's, or a planned one) is kept and announced again. A node
 * that had not submitted the step of a turn others submitted would submit it in the new
 * world, where it pairs with their next step. So every node's Join says what its turns
 * were (scd_fast_snap_t), and the coordinator settles the last turn M with data, of the
 * last epoch E in which any node took a turn:
 *   - M is in doubt when a node's turn M was not handed back (its exchange incomplete),
 *     or a node neither submitted M nor left at M or before (the others' turn M then
 *     waited for it). Otherwise every rank decided M alike from the same words (kept:
 *     delivered everywhere; discarded: announced again everywhere, then planned as any
 *     step), and there is nothing to settle.
 *   - In doubt, M is taken as failed on every node: a node that submitted it with data and
 *     did not discard it has it failed (by the re-form) or kept; every other node owes
 *     it, recorded as a late step (late.c), so its next announcement of the name (the
 *     step it announced again, or submits later) is refused, and its step after pairs
 *     with the others' next.
 * A node is at most one turn behind another (a turn completes only with every rank's
 * words, and a node submits its next turn only once its last came back), so one step is
 * owed at most; a record that says otherwise is dropped, not settled (coord_drop_outliers).
 * A daemon that joins afresh (another daemon of the rank) owes nothing.
 */
static void snap_set(scd_fast_snap_t *s, uint64_t world, uint64_t epoch, uint64_t turn,
		     uint64_t leave, int state, const char *name)
{
	char *n = name && name[0] ? strdup(name) : NULL;
	free(s->name);
	*s = (scd_fast_snap_t){world, epoch, turn, leave, state, n};
	if (name && name[0] && !n) /* its turns cannot be named: as if it had none */
		s->turn = 0;
}

void scd_fast_snapshot(scd_world_t *w)
{
	const scd_fast_state_t *f = &w->fast;
	snap_set(&w->fast_snap, w->world_id, f->last_epoch, f->last_turn, f->last_leave,
		 f->last_state, f->last_turn ? f->last_name : NULL);
}

void scd_fast_join_fill(scd_world_t *w, Sparsecomm__Join *j, Sparsecomm__FastState *fs)
{
	const scd_fast_snap_t *s = &w->fast_snap;
	if (s->world != w->world_id || !s->epoch)
		return;
	sparsecomm__fast_state__init(fs);
	fs->epoch = s->epoch;
	fs->turn = s->turn;
	fs->state = (uint32_t)s->state;
	fs->leave = s->leave;
	fs->name = s->name ? s->name : "";
	j->fast_state = fs;
}

void scd_fast_coord_join(scd_world_t *w, int rank, const Sparsecomm__Join *j, int same)
{
	const Sparsecomm__FastState *fs = j->fast_state;
	scd_fast_snap_t *s = &w->peers[rank].fast_rep;
	if (!same || !w->world_id || j->old_world != w->world_id) /* afresh: owes nothing */
		snap_set(s, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
	else if (!fs || !fs->epoch)
		snap_set(s, w->world_id, 0, 0, 0, SCD_FAST_DONE, NULL);
	else
		snap_set(s, w->world_id, fs->epoch, fs->name && fs->name[0] ? fs->turn : 0,
			 fs->leave,
			 fs->state <= SCD_FAST_DISCARDED ? (int)fs->state : SCD_FAST_DONE,
			 fs->name);
}

/* Whether node r's record r_snap counts (the same daemon, in the world left). */
static const scd_fast_snap_t *coord_rep(scd_world_t *w, int r)
{
	const scd_fast_snap_t *s = r == w->d->rank ? &w->fast_snap : &w->peers[r].fast_rep;
	return s->world && s->world == w->world_id ? s : NULL;
}

/* The last data turn of epoch E of the nodes' records but node skip's (-1: none), and
 * how many such records there are (*n_p). */
static uint64_t coord_last_turn(scd_world_t *w, uint64_t E, int skip, int *n_p)
{
	uint64_t M = 0;
	*n_p = 0;
	for (int r = 0; r < w->d->world_size; r++) {
		const scd_fast_snap_t *s = r != skip ? coord_rep(w, r) : NULL;
		*n_p += s != NULL;
		if (s && s->epoch == E && s->turn > M)
			M = s->turn;
	}
	return M;
}

/* Drops node r's record of epoch E (its turn is not settled: it owes nothing, and puts
 * nothing in doubt), saying why. */
static void coord_drop(scd_world_t *w, int r, uint64_t E, const char *why, uint64_t M)
{
	scd_fast_snap_t *s = r == w->d->rank ? &w->fast_snap : &w->peers[r].fast_rep;
	scd_warn(SCD_SUB_NEGOTIATE,
		 "node %d reported fast turn %llu of epoch %llu of tensor '%s', %s %llu: not "
		 "settled",
		 r, (unsigned long long)s->turn, (unsigned long long)E, s->name ? s->name : "",
		 why, (unsigned long long)M);
	snap_set(s, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
}

/* A node is at most one data turn behind another: a record of epoch E beyond the others'
 * last turn plus one (a node with no record of the epoch: turn 0; one that joined afresh
 * says nothing), or then below the last turn minus one, is no node's true state. */
static void coord_drop_outliers(scd_world_t *w, uint64_t E)
{
	int P = w->d->world_size, n;
	for (int r = 0; r < P; r++) {
		const scd_fast_snap_t *s = coord_rep(w, r);
		uint64_t others = coord_last_turn(w, E, r, &n);
		if (s && n && s->epoch == E && s->turn > others && s->turn - others > 1)
			coord_drop(w, r, E, "more than one past the others' last turn", others);
	}
	uint64_t M = coord_last_turn(w, E, -1, &n);
	for (int r = 0; r < P; r++) {
		const scd_fast_snap_t *s = coord_rep(w, r);
		if (s && s->epoch == E && s->turn < M && M - s->turn > 1)
			coord_drop(w, r, E, "more than one before the last turn", M);
	}
}

void scd_fast_coord_formed(scd_world_t *w)
{
	int P = w->d->world_size;
	uint64_t E = 0, M = 0;
	const char *name = NULL;
	for (int r = 0; r < P; r++) {
		const scd_fast_snap_t *s = coord_rep(w, r);
		if (s && s->epoch > E)
			E = s->epoch;
	}
	if (E)
		coord_drop_outliers(w, E);
	for (int r = 0; r < P; r++) {
		const scd_fast_snap_t *s = coord_rep(w, r);
		if (s && s->epoch == E && E && s->turn > M)
			M = s->turn, name = s->name;
	}
	int doubt = 0;
	for (int r = 0; r < P && M; r++) {
		const scd_fast_snap_t *s = coord_rep(w, r);
		if (!s)
			continue;
		uint64_t turn = s->epoch == E ? s->turn : 0,
			 leave = s->epoch == E ? s->leave : 0;
		if ((turn == M && s->state == SCD_FAST_UNDECIDED) ||
		    (turn < M && !(leave && leave <= M)))
			doubt = 1;
	}
	if (doubt && name) {
		char reason[1024];
		for (int r = 0; r < P; r++) {
			const scd_fast_snap_t *s = coord_rep(w, r);
			const scd_peer_t *p = &w->peers[r];
			if (!s || p->join_seq || p->degraded ||
			    (s->epoch == E && s->turn == M && s->state != SCD_FAST_DISCARDED))
				continue;
			snprintf(
			    reason, sizeof(reason),
			    "allreduce of tensor '%s' refused: node %d submitted it late, for "
			    "the step that already failed on the other ranks (the world "
			    "re-formed during its fast turn %llu)",
			    name, r, (unsigned long long)M);
			scd_warn(SCD_SUB_NEGOTIATE,
				 "node %d owes a step of '%s': the world re-formed during fast "
				 "turn %llu, which it did not take part in",
				 r, name, (unsigned long long)M);
			scd_late_owe(w, r, name, SC_ERR_PEER, reason);
		}
	}
	for (int r = 0; r < P; r++)
		snap_set(&w->peers[r].fast_rep, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
	snap_set(&w->fast_snap, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
}

void scd_fast_free(scd_world_t *w)
{
	for (int r = 0; w->peers && r < w->d->world_size; r++)
		snap_set(&w->peers[r].fast_rep, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
	snap_set(&w->fast_snap, 0, 0, 0, 0, SCD_FAST_DONE, NULL);
}
