/*
 * late.c: late steps (coordinator). An announced name fails on every rank (stalled past
 * stall_timeout_ms, a node degraded, abandoned) while some node has not announced it yet.
 * That node's trainers will submit the same step later (a checkpoint or an evaluation made
 * them late); paired with the others' next step it would return a sum of two different
 * steps on every rank. So the coordinator records the failure for each such node, and the
 * node's next announcement of the name is the late step: it is refused at once, to that
 * node alone, naming the failure, and the node's following announcement pairs with the
 * others' following step. Error responses list the nodes whose announcement they answer
 * (Response.ranks); a node not listed keeps what it announced, since the refusal answers
 * that announcement when it reaches the coordinator.
 *
 * One record per node and name counts the steps it owes, so what a node that never
 * submits a name costs is bounded by the names, not by the steps the others fail.
 *
 * A node that becomes degraded (its trainers exited) or leaves loses its records: its next
 * trainers start afresh. A joined node (join.c) submits nothing and gets none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "world/world_int.h"

static void late_free(scd_poison_t *p)
{
	free(p->name);
	free(p->reason);
	free(p);
}

void scd_late_note(scd_world_t *w, const scd_centry_t *e, int status, const char *msg, int skip)
{
	for (int r = 0; r < w->d->world_size; r++) {
		const scd_peer_t *p = &w->peers[r];
		if (e->have[r] || r == skip || p->degraded || p->join_seq ||
		    p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
			continue;
		scd_poison_t *l = w->lates;
		while (l && (l->rank != r || strcmp(l->name, e->name)))
			l = l->next;
		if (l) {
			l->owed++;
			continue;
		}
		l = calloc(1, sizeof(*l));
		char reason[1400];
		snprintf(reason, sizeof(reason),
			 "%s of tensor '%s' refused: node %d submitted it late, for the "
			 "step that already failed on the other ranks (%s)",
			 scd_centry_coll_name(e, w->d->world_size), e->name, r, msg);
		if (!l || !(l->name = strdup(e->name)) || !(l->reason = strdup(reason))) {
			/* the late step would pair with the others' next one: this node leaves
			 * instead of summing two steps */
			scd_error(SCD_SUB_NEGOTIATE,
				  "out of memory recording node %d's late step of '%s'", r,
				  e->name);
			if (l)
				late_free(l);
			continue;
		}
		l->rank = r;
		l->status = status;
		l->owed = 1;
		l->next = w->lates;
		w->lates = l;
	}
}

int scd_late_take(scd_world_t *w, int rank, const char *name, int refuse)
{
	for (scd_poison_t **pp = &w->lates; *pp; pp = &(*pp)->next) {
		scd_poison_t *l = *pp;
		if (l->rank != rank || strcmp(l->name, name))
			continue;
		if (l->owed > 1 && !refuse) { /* the node failed one of them itself */
			l->owed--;
			return 1;
		}
		if (l->owed > 1) { /* it owes more: the record stays, a copy answers this one */
			scd_poison_t *c = calloc(1, sizeof(*c));
			if (c && (c->name = strdup(l->name)) &&
			    (c->reason = strdup(l->reason))) {
				c->rank = l->rank;
				c->status = l->status;
				c->next = w->refusals;
				w->refusals = c;
				scd_info(SCD_SUB_NEGOTIATE, "%s", c->reason);
				l->owed--;
				return 1;
			}
			if (c)
				late_free(c);
			scd_error(SCD_SUB_NEGOTIATE,
				  "out of memory: node %d's %d further late steps of '%s' are "
				  "forgotten",
				  rank, l->owed - 1, name);
		}
		*pp = l->next;
		if (!refuse) { /* the node failed that step itself */
			late_free(l);
			return 1;
		}
		l->next = w->refusals;
		w->refusals = l;
		scd_info(SCD_SUB_NEGOTIATE, "%s", l->reason);
		return 1;
	}
	return 0;
}

void scd_late_forget_rank(scd_world_t *w, int rank)
{
	for (scd_poison_t **pp = &w->lates; *pp;) {
		scd_poison_t *l = *pp;
		if (l->rank == rank) {
			*pp = l->next;
			late_free(l);
		} else {
			pp = &l->next;
		}
	}
}

scd_poison_t *scd_late_refusals(scd_world_t *w)
{
	scd_poison_t *l = w->refusals;
	w->refusals = NULL;
	return l;
}

void scd_late_free_list(scd_poison_t *l)
{
	while (l) {
		scd_poison_t *next = l->next;
		late_free(l);
		l = next;
	}
}
