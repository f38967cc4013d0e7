/*
 * barrier.c: barriers between the daemons (sc_barrier_async). A node whose trainers have
 * all entered its barrier number seq sends BarrierEnter to the coordinator; when every
 * rank has entered, the coordinator sends BarrierDone (SC_OK) to every rank, whose
 * control socket completes its trainers' barriers. A barrier that cannot complete ends
 * on every rank alike: at once with SC_ERR_ABORTED when a node is degraded (a trainer
 * exited), with SC_ERR_STALLED naming the missing ranks once the first rank has waited
 * stall_timeout_ms. No data moves on the data plane: the barrier is the coordinator's
 * count of the ranks' messages, which are in order with their negotiation. A re-form of
 * the world fails the barrier in progress on every node, and the coordinator's count of it
 * starts again (scd_barrier_reform): the nodes enter it again in the new world.
 */
#include <stdio.h>

#include "ctl/ctl.h"
#include "util/log.h"
#include "world/world_int.h"

/* Sends how barrier seq ended to every rank (the coordinator's own included) and starts
 * counting the next one. */
static void barrier_conclude(scd_world_t *w, uint64_t seq, sc_status_t st, const char *error)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__BarrierDone bd = SPARSECOMM__BARRIER_DONE__INIT;
	bd.seq = seq;
	bd.status = st;
	bd.error = (char *)(error ? error : "");
	m.body_case = SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE;
	m.barrier_done = &bd;
	if (seq == w->barrier_seq + 1) {
		w->barrier_seq = seq;
		w->barrier_count = 0;
		for (int r = 0; r < w->d->world_size; r++)
			w->peers[r].barrier_in = 0;
	}
	if (st != SC_OK)
		scd_warn(SCD_SUB_NEGOTIATE, "%s", error);
	scd_world_send_all(w, &m);
}

/* The first degraded node, or -1. */
static int barrier_degraded(const scd_world_t *w)
{
	for (int r = 0; r < w->d->world_size; r++)
		if (w->peers[r].degraded)
			return r;
	return -1;
}

/*
 * Rank from entered barrier seq, not the coordinator's next one (want): its daemon started
 * again since the job's barriers began (behind), or the coordinator did (ahead). Ignored,
 * its trainers would wait until their own timeouts with nothing in flight anywhere: the
 * barrier fails at once, and the counts meet again. Behind: the rank alone gets the end
 * of barrier want - 1, which its node takes as its count. Ahead: the coordinator takes
 * seq as its count and ends it on every rank (the others' barrier in progress fails too).
 */
static void barrier_resync(scd_world_t *w, int from, uint64_t seq)
{
	uint64_t want = w->barrier_seq + 1;
	char msg[400];
	snprintf(
	    msg, sizeof(msg),
	    "barrier %llu of rank %d is not the job's barrier %llu (a daemon started again "
	    "since the job's barriers began): it fails, and the barriers count on from %llu",
	    (unsigned long long)seq, from, (unsigned long long)want,
	    (unsigned long long)(seq < want ? want : seq + 1));
	scd_warn(SCD_SUB_NEGOTIATE, "%s", msg);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__BarrierDone bd = SPARSECOMM__BARRIER_DONE__INIT;
	bd.status = SC_ERR_ABORTED;
	bd.error = msg;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE;
	m.barrier_done = &bd;
	if (seq < want) {
		bd.seq = want - 1;
		scd_world_send_peer(w, from, &m);
		return;
	}
	w->barrier_seq = seq;
	w->barrier_count = 0;
	for (int r = 0; r < w->d->world_size; r++)
		w->peers[r].barrier_in = 0;
	bd.seq = seq;
	for (int r = 0; r < w->d->world_size; r++)
		scd_world_send_peer(w, r, &m);
}

/* The barrier in progress fails on every rank: node dr is degraded. */
static void barrier_abort_degraded(scd_world_t *w, int dr)
{
	char msg[512];
	snprintf(msg, sizeof(msg), "barrier %llu aborted: %.400s",
		 (unsigned long long)w->barrier_seq + 1, w->peers[dr].degraded_reason);
	barrier_conclude(w, w->barrier_seq + 1, SC_ERR_ABORTED, msg);
}

void scd_barrier_on_degraded(scd_world_t *w, int rank)
{
	if (w->is_coord && w->barrier_count)
		barrier_abort_degraded(w, rank);
}

void scd_barrier_reform(scd_world_t *w)
{
	w->barrier_count = 0;
	for (int r = 0; r < w->d->world_size; r++)
		w->peers[r].barrier_in = 0;
}

void scd_barrier_on_enter(scd_world_t *w, int from, const Sparsecomm__BarrierEnter *m)
{
	uint64_t want = w->barrier_seq + 1;
	if (from < 0 || from >= w->d->world_size || m->rank != from)
		return;
	if (!w->formed || w->old_world) {
		/* of the world left (sent again when the Reform closed the pipes): its node
		 * failed that barrier at the re-form, and enters it again once the world has
		 * formed (a node holds what it enters meanwhile, held.c). Counted, the barrier
		 * would complete without the node's trainers in it, and their next barrier
		 * pair with the others' one after. */
		scd_debug(SCD_SUB_NEGOTIATE,
			  "rank %d's barrier %llu of the world left ignored: it failed there",
			  from, (unsigned long long)m->seq);
		return;
	}
	if (m->seq != want) {
		barrier_resync(w, from, m->seq);
		return;
	}
	if (w->peers[from].barrier_in) {
		scd_warn(SCD_SUB_NEGOTIATE, "rank %d entered barrier %llu twice: ignored", from,
			 (unsigned long long)m->seq);
		return;
	}
	if (!w->barrier_count)
		w->barrier_first_ms = scd_now_ms();
	w->peers[from].barrier_in = 1;
	w->barrier_count++;
	int dr = barrier_degraded(w);
	if (dr >= 0)
		barrier_abort_degraded(w, dr);
	else if (w->barrier_count == w->d->world_size)
		barrier_conclude(w, want, SC_OK, NULL);
	else
		scd_barrier_check_joined(w);
}

void scd_barrier_check_joined(scd_world_t *w)
{
	if (!w->is_coord || !w->barrier_count)
		return;
	for (int r = 0; r < w->d->world_size; r++)
		if (w->peers[r].join_seq && !w->peers[r].barrier_in) {
			char msg[256];
			snprintf(msg, sizeof(msg),
				 "barrier %llu cannot complete: %s %d %s joined (sc_join), and "
				 "enter%s no barrier until every rank has joined",
				 (unsigned long long)w->barrier_seq + 1,
				 w->d->local_size > 1 ? "the trainers of node" : "rank", r,
				 w->d->local_size > 1 ? "have" : "has",
				 w->d->local_size > 1 ? "" : "s");
			barrier_conclude(w, w->barrier_seq + 1, SC_ERR_ABORTED, msg);
			return;
		}
}

void scd_barrier_tick(scd_world_t *w)
{
	if (!w->is_coord || !w->barrier_count)
		return;
	uint64_t want = w->barrier_seq + 1;
	char msg[1024];
	int dr = barrier_degraded(w);
	if (dr >= 0) {
		barrier_abort_degraded(w, dr);
		return;
	}
	uint64_t stall_ms = (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_stall_timeout_ms);
	if (scd_now_ms() - w->barrier_first_ms < stall_ms)
		return;
	/* Names the nodes that never entered and their trainer ranks (a node enters once all
	 * its trainers have; which of them did not, its own trainers learn from it). */
	int L = w->d->local_size, missing = w->d->world_size - w->barrier_count, k = 0;
	int n =
	    snprintf(msg, sizeof(msg), "barrier %llu stalled: %s", (unsigned long long)want,
		     L > 1 ? (missing > 1 ? "the trainers of nodes" : "the trainers of node")
			   : (missing > 1 ? "ranks" : "rank"));
	for (int r = 0; r < w->d->world_size && n < (int)sizeof(msg) - 96; r++)
		if (!w->peers[r].barrier_in)
			n += snprintf(msg + n, sizeof(msg) - (size_t)n, "%s %d", k++ ? "," : "",
				      r);
	if (L > 1) {
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " (ranks");
		k = 0;
		for (int r = 0; r < w->d->world_size && n < (int)sizeof(msg) - 96; r++)
			for (int l = 0; !w->peers[r].barrier_in && l < L; l++)
				n += snprintf(msg + n, sizeof(msg) - (size_t)n, "%s %d",
					      k++ ? "," : "", r * L + l);
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, ") did not all");
	} else {
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " did not");
	}
	snprintf(msg + n, sizeof(msg) - (size_t)n, " enter it within %llu ms",
		 (unsigned long long)stall_ms);
	barrier_conclude(w, want, SC_ERR_STALLED, msg);
}

void scd_barrier_on_done(scd_world_t *w, const Sparsecomm__BarrierDone *m)
{
	sc_status_t st = (sc_status_t)m->status;
	if (st > SC_OK || st < SC_ERR_STALLED)
		st = SC_ERR_PROTOCOL;
	scd_ctl_barrier_done(w->d->ctl, m->seq, st, m->error);
}

void scd_world_barrier_enter(scd_world_t *w, uint64_t seq)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__BarrierEnter be = SPARSECOMM__BARRIER_ENTER__INIT;
	be.rank = w->d->rank;
	be.seq = seq;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER;
	m.barrier_enter = &be;
	if (w->formed)
		scd_world_send_coord(w, &m);
	else /* the world re-forms: it goes once formed (held.c) */
		scd_world_hold(w, SCD_HELD_BARRIER, 0, (int64_t)seq, NULL);
}
