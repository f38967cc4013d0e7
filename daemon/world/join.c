/*
 * join.c: uneven inputs (sc_join_async). A trainer that has joined submits nothing more;
 * its node takes part in the other trainers' allreduces with its zeros. Within a node the
 * control socket counts a joined trainer as having submitted every tensor. Once every
 * local trainer has joined, the node sends NodeJoin to the coordinator, which from then on
 * counts the node as having announced every tensor the others announce (scd_join_fill):
 * the node runs the plan's jobs with zeros for what it never submitted. When every node
 * has joined, the coordinator sends JoinDone with the last rank to join to every rank,
 * whose joins complete, and the nodes take part in allreduces again. Once a node is
 * degraded (a trainer exited), the joins fail on every rank with SC_ERR_ABORTED.
 */
#include <stdio.h>

#include "ctl/ctl.h"
#include "util/log.h"
#include "world/world_int.h"

void scd_join_fill(scd_world_t *w, scd_centry_t *e)
{
	int P = w->d->world_size, from = -1;
	for (int r = 0; r < P && from < 0; r++)
		if (e->have[r])
			from = r;
	for (int r = 0; from >= 0 && r < P; r++)
		if (!e->have[r] && w->peers[r].join_seq) {
			e->have[r] = 2;
			e->dtype[r] = e->dtype[from];
			e->numel[r] = e->numel[from];
			e->op[r] = e->op[from];
			e->sig[r] = e->sig[from];
			if (++e->count == P)
				e->ready_ms = scd_now_ms();
		}
}

/* The end of joins (last_rank, st, error) to rank (-1: every rank, the coordinator's own
 * included), in a formed world: the first of the world is kept (scd_join_rejoined), and
 * a NodeJoin a node sent before it read this end is judged by its number. */
static void join_send_end(scd_world_t *w, int rank, int last_rank, sc_status_t st,
			  const char *error)
{
	Sparsecomm__PeerMsg msg = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__JoinDone jd = SPARSECOMM__JOIN_DONE__INIT;
	jd.last_rank = last_rank;
	jd.status = st;
	jd.error = (char *)(error ? error : "");
	msg.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN_DONE;
	msg.join_done = &jd;
	if (w->join_sent_world != w->world_id) {
		w->join_sent_world = w->world_id;
		w->join_sent_last = last_rank;
		w->join_sent_status = st;
		snprintf(w->join_sent_error, sizeof(w->join_sent_error), "%s", jd.error);
	}
	if (rank < 0)
		scd_world_send_all(w, &msg);
	else
		scd_world_send_peer(w, rank, &msg);
	for (int r = 0; r < w->d->world_size; r++)
		if (r != w->d->rank && (rank < 0 || r == rank))
			w->peers[r].join_end_seq = w->peers[r].tx_seq;
}

/* Ends the joins on every rank (the coordinator's own included) and starts anew. */
static void join_conclude(scd_world_t *w, int last_rank, sc_status_t st, const char *error)
{
	w->join_count = 0;
	for (int r = 0; r < w->d->world_size; r++)
		w->peers[r].join_seq = 0;
	if (!w->formed) {
		/* the world re-forms (a node lost meanwhile): sent now, the end would reach
		 * only the nodes joined again, and the others' trainers would wait in their
		 * joins; it goes once the world has formed (scd_join_formed). The joins of the
		 * world left held until then (stream.c) are of the joins it ends. */
		w->join_end_pending = 1;
		w->join_end_last = last_rank;
		w->join_end_status = st;
		snprintf(w->join_end_error, sizeof(w->join_end_error), "%s",
			 error ? error : "");
		scd_world_reform_drop(w, -1, SPARSECOMM__PEER_MSG__BODY_NODE_JOIN);
		return;
	}
	join_send_end(w, -1, last_rank, st, error);
}

void scd_join_rejoined(scd_world_t *w, int rank, int missed)
{
	scd_peer_t *p = &w->peers[rank];
	/* an end sent it in the world left (numbered there): the first ended its joins */
	p->join_end_owed = missed && p->join_end_seq && w->join_sent_world == w->world_id;
}

/* The ends owed to nodes that never held the world they were sent in, to each alone:
 * sent once, a node's trainers waited in their join for good, the others' having ended.
 * An end of the joins met while the world re-formed, which goes to every node, ends
 * theirs as well. */
static void join_send_owed(scd_world_t *w, int pending)
{
	char error[sizeof(w->join_sent_error)];
	snprintf(error, sizeof(error), "%s", w->join_sent_error);
	int last = w->join_sent_last;
	sc_status_t st = (sc_status_t)w->join_sent_status;
	for (int r = 0; r < w->d->world_size; r++) {
		if (!w->peers[r].join_end_owed)
			continue;
		w->peers[r].join_end_owed = 0;
		if (pending)
			continue;
		scd_info(SCD_SUB_NEGOTIATE,
			 "node %d never held the world in which its joins ended: their end "
			 "goes to it again",
			 r);
		join_send_end(w, r, last, st, error);
	}
}

void scd_join_formed(scd_world_t *w)
{
	join_send_owed(w, w->join_end_pending);
	if (!w->join_end_pending)
		return;
	char error[sizeof(w->join_end_error)];
	snprintf(error, sizeof(error), "%s", w->join_end_error);
	w->join_end_pending = 0;
	/* a node's join of the world left, sent again while the world re-formed (the
	 * coordinator acknowledges nothing then) and held again after the end was decided,
	 * is of the joins it ends: counted after it, the next join filled the node with
	 * zeros */
	scd_world_reform_drop(w, -1, SPARSECOMM__PEER_MSG__BODY_NODE_JOIN);
	join_conclude(w, w->join_end_last, (sc_status_t)w->join_end_status, error);
}

void scd_join_on_degraded(scd_world_t *w, int rank);

int scd_join_ended_unread(const scd_world_t *w, int from, uint64_t ack)
{
	if (ack >= w->peers[from].join_end_seq)
		return 0;
	/* sent before the node read the JoinDone, which ended this join too (every join of
	 * the node): counted, the node was joined in the next join */
	scd_info(SCD_SUB_NEGOTIATE,
		 "node %d's join, sent before it read the joins' end, ends with them", from);
	return 1;
}

void scd_join_on_node(scd_world_t *w, int from, const Sparsecomm__NodeJoin *m, uint64_t ack)
{
	int P = w->d->world_size;
	if (from < 0 || from >= P || m->rank != from || w->peers[from].join_seq)
		return;
	if (scd_join_ended_unread(w, from, ack))
		return;
	w->peers[from].join_seq = ++w->join_count;
	w->peers[from].join_last = m->last_rank;
	scd_fast_coord_end(w, "a node joined", 0); /* it takes part with zeros, planned */
	scd_info(SCD_SUB_NEGOTIATE, "node %d joined (its last trainer: rank %d)", from,
		 m->last_rank);
	for (int r = 0; r < P; r++)
		if (w->peers[r].degraded) {
			scd_join_on_degraded(w, r);
			return;
		}
	if (w->join_count < (uint64_t)P) {
		scd_barrier_check_joined(w); /* a barrier it never enters cannot complete */
		scd_neg_tick(w);	     /* what the others announced may be complete now */
	} else
		join_conclude(w, m->last_rank, SC_OK, NULL); /* this node's joined last */
}

void scd_join_on_degraded(scd_world_t *w, int rank)
{
	if (!w->join_count)
		return;
	char msg[400];
	snprintf(msg, sizeof(msg), "join aborted: %.360s", w->peers[rank].degraded_reason);
	join_conclude(w, -1, SC_ERR_ABORTED, msg);
}

void scd_join_on_left(scd_world_t *w, int rank, const char *reason)
{
	if (rank < 0 || rank >= w->d->world_size || !w->join_count || w->peers[rank].join_seq)
		return;
	char msg[400];
	snprintf(msg, sizeof(msg), "join aborted: %.360s", reason);
	join_conclude(w, -1, SC_ERR_ABORTED, msg);
}

void scd_join_on_done(scd_world_t *w, const Sparsecomm__JoinDone *m)
{
	sc_status_t st = (sc_status_t)m->status;
	if (st > SC_OK || st < SC_ERR_STALLED)
		st = SC_ERR_PROTOCOL;
	/* the end ends every join of this node: one held while the world re-formed too (the
	 * coordinator's own node reads its end before it sends what it held) */
	scd_world_held_drop(w, SCD_HELD_JOIN);
	scd_ctl_join_done(w->d->ctl, m->last_rank, st, m->error);
}

void scd_world_node_join(scd_world_t *w, int last_rank)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__NodeJoin nj = SPARSECOMM__NODE_JOIN__INIT;
	nj.rank = w->d->rank;
	nj.last_rank = last_rank;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_JOIN;
	m.node_join = &nj;
	if (!w->formed) { /* the world re-forms: it goes once formed, in its place (held.c) */
		scd_world_hold(w, SCD_HELD_JOIN, 0, last_rank, NULL);
		return;
	}
	/* what the node has not sent yet goes first: a step it failed before its trainers
	 * joined must reach the coordinator before the join does. Else another node's
	 * failure of that step, read meanwhile, counts this one as joined (owing nothing),
	 * and this one's failure, read after, as a step of its own that the other node has
	 * not submitted: that node's next step would be refused as late (late.c) */
	scd_neg_flush(w);
	scd_world_send_coord(w, &m);
}
