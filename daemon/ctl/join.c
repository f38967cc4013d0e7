/*
 * join.c: a node's barriers and joins (ctl_int.h): the trainers' Barrier and TrainerJoin
 * requests, their ends, and what one does to the other (a joined trainer enters no barrier
 * until every rank has joined). The world's side of both is world/barrier.c and
 * world/join.c.
 */
#include <stdio.h>

#include "ctl/ctl_int.h"
#include "ctl/tensor.h"

/* Ends every local trainer's barrier in progress. */
void scd_ctl_barrier_complete(scd_ctl_t *ctl, sc_status_t st, const char *error)
{
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		if (s->barrier_handle) {
			scd_ctl_send_completion(ctl, s, s->barrier_handle, st, error, NULL, 0);
			s->barrier_handle = 0;
			s->barrier_left = ++ctl->events;
		}
	ctl->barrier_waiting = 0;
	ctl->barrier_entered = 0;
}

void scd_ctl_barrier_done(scd_ctl_t *ctl, uint64_t seq, sc_status_t st, const char *error)
{
	if (seq <= ctl->barrier_seq) /* an end this node already took */
		return;
	ctl->barrier_seq = seq;
	scd_ctl_barrier_complete(ctl, st, error);
}

void scd_ctl_join_done(scd_ctl_t *ctl, int last_rank, sc_status_t st, const char *error)
{
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		if (s->join_handle) {
			scd_ctl_send_completion_value(ctl, s, s->join_handle, st, error,
						      last_rank);
			s->join_handle = 0;
		}
	ctl->n_joined = 0;
}

int scd_ctl_all_joined(const scd_ctl_t *ctl)
{
	return ctl->n_joined == ctl->d->local_size;
}

/* The node's barrier in progress cannot complete when every local trainer is in it or
 * joined, some joined (they enter no barrier until every rank has joined): it fails here
 * at once (on the other nodes, once the coordinator's stall timeout runs out). */
static int barrier_vs_join(scd_ctl_t *ctl)
{
	if (!ctl->barrier_waiting || !ctl->n_joined ||
	    ctl->barrier_waiting + ctl->n_joined < ctl->d->local_size)
		return 0;
	char msg[256];
	snprintf(msg, sizeof(msg),
		 "barrier %llu cannot complete: rank %d of node %d has joined (sc_join), and "
		 "enters no barrier until every rank has joined",
		 (unsigned long long)ctl->barrier_seq + 1, ctl->join_last, ctl->d->rank);
	scd_ctl_barrier_complete(ctl, SC_ERR_ABORTED, msg);
	return 1;
}

void scd_ctl_handle_join(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			 const Sparsecomm__TrainerJoin *j)
{
	char err[512] = "";
	sc_status_t st = SC_OK;
	int rank = ctl->d->rank * ctl->d->local_size + s->local_rank;
	if (s->role != SPARSECOMM__ROLE__ROLE_TRAINER) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err), "a join is for trainers, not control clients");
	} else if (!j->handle) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err), "rank %d: join: handle 0 is not valid", rank);
	} else if (s->join_handle) {
		st = SC_ERR_BUSY;
		snprintf(err, sizeof(err), "rank %d: already joined", rank);
	} else if (ctl->degraded) {
		st = SC_ERR_ABORTED;
		snprintf(err, sizeof(err), "rank %d: join refused: %s", rank,
			 ctl->degraded_reason);
	}
	for (scd_reg_t *r = s->regs; st == SC_OK && r; r = r->next_in_session)
		if (r->handle) {
			st = SC_ERR_BUSY;
			snprintf(err, sizeof(err),
				 "rank %d: join with the %s of tensor '%s' in flight", rank,
				 scd_coll_name(&r->nt->coll), r->nt->name);
		}
	if (st != SC_OK) {
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, st, err);
		return;
	}
	s->join_handle = j->handle;
	ctl->n_joined++;
	ctl->join_last = rank;
	scd_ctl_send_ok(ctl, s, seq);
	/* what the node's other trainers submitted no longer waits for this one, and a step
	 * the node failed before is not owed by it (owing): its join is its last submission
	 * until every rank has joined, and its next one is of the step after */
	scd_tensors_forgive(ctl->tensors, s->local_rank);
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors), *next; nt; nt = next) {
		next = nt->all_next;
		scd_ctl_announce_if_ready(ctl, nt);
	}
	barrier_vs_join(ctl);
	if (scd_ctl_all_joined(ctl))
		ctl->up->node_join(ctl->d->world, ctl->join_last);
}

void scd_ctl_handle_barrier(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			    const Sparsecomm__Barrier *b)
{
	char err[512] = "";
	sc_status_t st = SC_OK;
	int rank = ctl->d->rank * ctl->d->local_size + s->local_rank;
	if (s->role != SPARSECOMM__ROLE__ROLE_TRAINER) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err), "a barrier is for trainers, not control clients");
	} else if (!b->handle) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err), "rank %d: barrier: handle 0 is not valid", rank);
	} else if (s->barrier_handle) {
		st = SC_ERR_BUSY;
		snprintf(err, sizeof(err), "rank %d: already in a barrier", rank);
	} else if (s->join_handle) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err),
			 "rank %d: barrier refused: it has joined, and enters no barrier until "
			 "every rank has joined",
			 rank);
	} else if (ctl->degraded) {
		st = SC_ERR_ABORTED;
		snprintf(err, sizeof(err), "rank %d: barrier refused: %s", rank,
			 ctl->degraded_reason);
	}
	if (st != SC_OK) {
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, st, err);
		return;
	}
	s->barrier_handle = b->handle;
	scd_ctl_send_ok(ctl, s, seq);
	if (ctl->barrier_waiting++ == 0)
		ctl->barrier_since_ms = scd_now_ms();
	if (barrier_vs_join(ctl))
		return;
	if (ctl->barrier_waiting == ctl->d->local_size && !ctl->barrier_entered) {
		ctl->barrier_entered = 1;
		ctl->up->barrier_enter(ctl->d->world, ctl->barrier_seq + 1);
	}
}
