/*
 * held.c: what this node tells the coordinator while the world re-forms (docs/design.md,
 * "Re-forming the world"). No world carries a message then: the pipes are closed and the
 * coordinator has not formed the new world. A change of the node's state (degraded, whole
 * again, its last trainer gone cleanly, a trainer gone without joining), a barrier its
 * trainers entered and a join they completed are held, each in its place among the
 * announcements and abandons the node queued meanwhile, and go in that order once the
 * world has formed (scd_world_held_resend). Dropped instead, a clean end of the last
 * trainer left the steps its job owed to the next job's trainers (their first step
 * refused as late), and a barrier or a join entered then never reached the coordinator
 * (it stalled on every rank, naming this node).
 *
 * A place holds few changes: those with nothing queued between them fold (held_add), and
 * the list is bounded (SCD_HELD_STATES_MAX); past it the change takes the place of the
 * last one.
 */
#include <stdio.h>
#include <stdlib.h>

#include "util/log.h"
#include "world/world_int.h"

#define SCD_HELD_STATES_MAX 4096

/* One message held, and its place: the announcements and abandons queued before it. */
typedef struct scd_held_state {
	scd_held_kind_t kind;
	int degraded;	  /* SCD_HELD_STATE */
	int64_t arg;	  /* SCD_HELD_BARRIER: its number; SCD_HELD_JOIN: the last rank */
	char reason[256]; /* SCD_HELD_STATE, SCD_HELD_LEFT */
	int n_out, n_abandons;
} scd_held_state_t;

static const char *kind_name(scd_held_kind_t kind, int degraded)
{
	switch (kind) {
	case SCD_HELD_STATE:
		return degraded ? "degraded" : "whole";
	case SCD_HELD_IDLE:
		return "no trainers";
	case SCD_HELD_LEFT:
		return "a trainer left";
	case SCD_HELD_BARRIER:
		return "barrier entered";
	case SCD_HELD_JOIN:
		return "joined";
	}
	return "?";
}

/* The message h holds, to the coordinator now. */
static void held_send(scd_world_t *w, const scd_held_state_t *h)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__NodeState ns = SPARSECOMM__NODE_STATE__INIT;
	Sparsecomm__BarrierEnter be = SPARSECOMM__BARRIER_ENTER__INIT;
	Sparsecomm__NodeJoin nj = SPARSECOMM__NODE_JOIN__INIT;
	ns.rank = be.rank = nj.rank = w->d->rank;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_STATE;
	m.node_state = &ns;
	switch (h->kind) {
	case SCD_HELD_STATE:
		ns.degraded = h->degraded;
		ns.reason = (char *)h->reason;
		break;
	case SCD_HELD_IDLE:
		ns.no_trainers = 1;
		break;
	case SCD_HELD_LEFT:
		ns.left = (char *)h->reason;
		break;
	case SCD_HELD_BARRIER:
		be.seq = (uint64_t)h->arg;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER;
		m.barrier_enter = &be;
		break;
	case SCD_HELD_JOIN:
		nj.last_rank = (int32_t)h->arg;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_JOIN;
		m.node_join = &nj;
		break;
	}
	scd_world_send_coord(w, &m);
}

/* Whether a change of kind (degraded) at place (n_out, n_ab) adds nothing to the changes
 * held there: whole again after whole again, and the same message twice (a trainer gone
 * cleanly, a barrier's number, a join), which the coordinator takes once. */
static int held_folds(const scd_world_t *w, scd_held_kind_t kind, int degraded, int64_t arg,
		      int n_out, int n_ab)
{
	for (int i = w->n_held_states - 1; i >= 0; i--) {
		const scd_held_state_t *h = &w->held_states[i];
		if (h->n_out != n_out || h->n_abandons != n_ab)
			return 0; /* something was queued since */
		if (h->kind != kind)
			continue;
		if (kind == SCD_HELD_STATE)
			return i == w->n_held_states - 1 && !degraded && !h->degraded;
		if (kind == SCD_HELD_LEFT || h->arg == arg)
			return 1;
	}
	return 0;
}

/* Room for one more; 0 when there is none (logged: the change takes the last one's place,
 * *n_out_p and *n_ab_p, or is not told when none is held). */
static int held_room(scd_world_t *w, scd_held_kind_t kind, int degraded, int *n_out_p,
		     int *n_ab_p)
{
	if (w->n_held_states < w->cap_held_states)
		return 1;
	int cap = w->cap_held_states ? 2 * w->cap_held_states : 4;
	scd_held_state_t *v = cap <= SCD_HELD_STATES_MAX
				  ? realloc(w->held_states, sizeof(*v) * (size_t)cap)
				  : NULL;
	if (v) {
		w->held_states = v;
		w->cap_held_states = cap;
		return 1;
	}
	if (!w->n_held_states) {
		scd_error(SCD_SUB_WORLD,
			  "out of memory holding this node's message (%s) until the world has "
			  "formed: not told",
			  kind_name(kind, degraded));
		return 0;
	}
	scd_error(SCD_SUB_WORLD,
		  "%s holding this node's message (%s) until the world has formed: told in "
		  "the place of the one before it",
		  cap > SCD_HELD_STATES_MAX ? "too many held" : "out of memory",
		  kind_name(kind, degraded));
	w->n_held_states--;
	*n_out_p = w->held_states[w->n_held_states].n_out;
	*n_ab_p = w->held_states[w->n_held_states].n_abandons;
	return 1;
}

void scd_world_hold(scd_world_t *w, scd_held_kind_t kind, int degraded, int64_t arg,
		    const char *reason)
{
	int n_out = w->n_out, n_ab = scd_neg_out_abandons(w);
	if (held_folds(w, kind, degraded, arg, n_out, n_ab))
		return;
	/* a degradation takes the place of the state changes before it in its place (the
	 * coordinator drops, at a degradation, what it kept of the node's trainers:
	 * world/late.c); a node whole again after it stays after it */
	while (kind == SCD_HELD_STATE && degraded && w->n_held_states) {
		const scd_held_state_t *last = &w->held_states[w->n_held_states - 1];
		if (last->kind != SCD_HELD_STATE || last->n_out != n_out ||
		    last->n_abandons != n_ab)
			break;
		w->n_held_states--;
	}
	if (!held_room(w, kind, degraded, &n_out, &n_ab))
		return;
	scd_held_state_t *h = &w->held_states[w->n_held_states++];
	h->kind = kind;
	h->degraded = degraded;
	h->arg = arg;
	snprintf(h->reason, sizeof(h->reason), "%s", reason ? reason : "");
	h->n_out = n_out;
	h->n_abandons = n_ab;
}

/* The world has formed: the messages held while it re-formed go now, each in its place
 * among the announcements and abandons queued meanwhile (the announcements made again by
 * the re-form first), and then the rest of them. The coordinator keeps what it knew of a
 * node through a re-form (accept_join): a node degraded meanwhile says so before what its
 * next trainers did, so that the coordinator drops the steps it recorded for the node's
 * old trainers (world/late.c) and charges what the new ones failed to them; what the old
 * trainers reported before they died stays before it. */
void scd_world_held_resend(scd_world_t *w)
{
	int sent_out = 0, sent_ab = 0;
	for (int i = 0; i < w->n_held_states; i++) {
		const scd_held_state_t *h = &w->held_states[i];
		scd_neg_flush_first(w, h->n_out - sent_out, h->n_abandons - sent_ab);
		sent_out = h->n_out > sent_out ? h->n_out : sent_out;
		sent_ab = h->n_abandons > sent_ab ? h->n_abandons : sent_ab;
		held_send(w, h);
	}
	scd_world_held_free(w);
	scd_neg_flush(w);
}

void scd_world_held_drop(scd_world_t *w, scd_held_kind_t kind)
{
	int n = 0;
	for (int i = 0; i < w->n_held_states; i++)
		if (w->held_states[i].kind != kind)
			w->held_states[n++] = w->held_states[i];
	w->n_held_states = n;
}

void scd_world_held_free(scd_world_t *w)
{
	free(w->held_states);
	w->held_states = NULL;
	w->n_held_states = w->cap_held_states = 0;
}

/* What the node has not sent yet goes before m: the steps a dying trainer's node failed
 * before announcing them must reach the coordinator while the node is not degraded there
 * yet (read after, each would fail its name's next entry, and charge the other nodes a
 * step they had already failed with the degraded node); a step it failed before its
 * trainers joined, before the join (join.c); what the job's last trainer reported, before
 * its clean end (late.c). While the world re-forms, m is held in that place. */
static void held_or_send(scd_world_t *w, scd_held_kind_t kind, int degraded, int64_t arg,
			 const char *reason)
{
	if (!w->formed) {
		scd_world_hold(w, kind, degraded, arg, reason);
		return;
	}
	scd_neg_flush(w);
	scd_held_state_t h = {.kind = kind, .degraded = degraded, .arg = arg};
	snprintf(h.reason, sizeof(h.reason), "%s", reason ? reason : "");
	held_send(w, &h);
}

void scd_world_node_state(scd_world_t *w, int degraded, const char *reason)
{
	held_or_send(w, SCD_HELD_STATE, degraded, 0, reason);
}

void scd_world_node_left(scd_world_t *w, const char *reason)
{
	held_or_send(w, SCD_HELD_LEFT, 0, 0, reason);
}

void scd_world_node_idle(scd_world_t *w)
{
	held_or_send(w, SCD_HELD_IDLE, 0, 0, NULL);
}
