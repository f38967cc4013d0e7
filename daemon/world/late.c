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
 * trainers start afresh. So does a node whose last trainer ended its session cleanly
 * (NodeState.no_trainers): a daemon that serves one job after another must not hand the
 * next job's trainers the steps the last job's owed. A joined node (join.c) submits
 * nothing and gets none.
 *
 * A step that fails while a node is degraded is answered for that node too: it owes
 * nothing, but its record counts the step as answered. A trainer of the node that
 * submits the step once the node is whole again, and fails it there (it dies waiting for
 * a node-mate), makes the node report it (Abandon.step); that report takes the answered
 * step and charges nobody, where it would otherwise fail the name's next entry and charge
 * the other nodes a second time for a step they already failed (their next step refused,
 * the one after paired with the node's previous one). A submission the degraded node
 * refuses is reported the same way (ctl.c), so that what is answered is taken by the
 * report of that step, never by one of a later step. The node's next announcement of
 * the name drops what is answered: its trainers started afresh. So does its becoming
 * degraded again, which it also says when it comes back with none of the trainers that
 * lived through its failure (ctl.c).
 *
 * The records outlive a re-form of the world (scd_late_keep): the nodes rejoin with the
 * same daemons and trainers, which still owe their late steps and still report the steps
 * answered for them; a refusal not sent yet goes back to its record, since the node
 * announces that step again in the new world. A node given up, or another daemon of the
 * rank, joins afresh (world.c, accept_join).
 */
#include <limits.h>
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

/* Sets l's refusal text and status: the failure of entry e (status, msg) that it owes. */
static int late_reason(scd_world_t *w, scd_poison_t *l, const scd_centry_t *e, int status,
		       const char *msg)
{
	char reason[1400];
	snprintf(reason, sizeof(reason),
		 "%s of tensor '%s' refused: node %d submitted it late, for the step that "
		 "already failed on the other ranks (%s)",
		 scd_centry_coll_name(e, w->d->world_size), e->name, l->rank, msg);
	char *r = strdup(reason);
	if (!r)
		return 0;
	free(l->reason);
	l->reason = r;
	l->status = status;
	return 1;
}

/* Node r's record of name, a new empty one if it has none, or NULL out of memory. */
static scd_poison_t *late_get(scd_world_t *w, int r, const char *name)
{
	scd_poison_t *l = w->lates;
	while (l && (l->rank != r || strcmp(l->name, name)))
		l = l->next;
	if (l)
		return l;
	if (!(l = calloc(1, sizeof(*l))) || !(l->name = strdup(name))) {
		free(l);
		return NULL;
	}
	l->rank = r;
	l->next = w->lates;
	w->lates = l;
	return l;
}

/* Unlinks l from the records. */
static void late_unlink(scd_world_t *w, scd_poison_t *l)
{
	scd_poison_t **pp = &w->lates;
	while (*pp != l)
		pp = &(*pp)->next;
	*pp = l->next;
	l->next = NULL;
}

void scd_late_note(scd_world_t *w, const scd_centry_t *e, int status, const char *msg, int skip)
{
	for (int r = 0; r < w->d->world_size; r++) {
		const scd_peer_t *p = &w->peers[r];
		if (e->have[r] || r == skip || p->join_seq ||
		    p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
			continue;
		scd_poison_t *l = late_get(w, r, e->name);
		if (l && p->degraded) { /* answered for it: it owes nothing */
			l->answered += l->answered < INT_MAX;
			continue;
		}
		if (l && (l->owed || late_reason(w, l, e, status, msg))) {
			l->owed++;
			continue;
		}
		/* the late step would pair with the others' next one: this node leaves
		 * instead of summing two steps; a degraded node's report of the step would
		 * charge the others a step they already failed */
		scd_error(SCD_SUB_NEGOTIATE,
			  "out of memory recording node %d's %s step of '%s'", r,
			  p->degraded ? "answered" : "late", e->name);
		if (l && !l->owed && !l->answered) {
			late_unlink(w, l);
			late_free(l);
		}
	}
}

void scd_late_owe(scd_world_t *w, int r, const char *name, int status, const char *reason)
{
	scd_poison_t *l = late_get(w, r, name);
	char *t = l && !l->owed ? strdup(reason) : NULL;
	if (l && (l->owed || t)) {
		if (t) {
			free(l->reason);
			l->reason = t;
			l->status = status;
		}
		l->owed++;
		return;
	}
	scd_error(SCD_SUB_NEGOTIATE, "out of memory recording node %d's late step of '%s'", r,
		  name);
	if (l && !l->owed && !l->answered) {
		late_unlink(w, l);
		late_free(l);
	}
}

int scd_late_take(scd_world_t *w, int rank, const char *name, int refuse)
{
	scd_poison_t *l = w->lates;
	while (l && (l->rank != rank || strcmp(l->name, name)))
		l = l->next;
	if (!l)
		return 0;
	if (l->answered && !refuse) { /* the node's report of a step already answered */
		l->answered--;
		scd_info(SCD_SUB_NEGOTIATE,
			 "node %d failed a step of '%s' that had already failed on every rank "
			 "while it was degraded: nobody owes it",
			 rank, name);
		if (!l->answered && !l->owed) {
			late_unlink(w, l);
			late_free(l);
		}
		return 1;
	}
	l->answered = 0; /* an announcement: its trainers started afresh */
	if (!l->owed) {
		late_unlink(w, l);
		late_free(l);
		return 0;
	}
	if (l->owed > 1 && !refuse) { /* the node failed one of them itself */
		l->owed--;
		return 1;
	}
	if (l->owed > 1) { /* it owes more: the record stays, a copy answers this one */
		scd_poison_t *c = calloc(1, sizeof(*c));
		if (c && (c->name = strdup(l->name)) && (c->reason = strdup(l->reason))) {
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
		scd_error(
		    SCD_SUB_NEGOTIATE,
		    "out of memory: node %d's %d further late steps of '%s' are forgotten",
		    rank, l->owed - 1, name);
	}
	late_unlink(w, l);
	if (!refuse) { /* the node failed that step itself */
		late_free(l);
		return 1;
	}
	l->next = w->refusals;
	w->refusals = l;
	scd_info(SCD_SUB_NEGOTIATE, "%s", l->reason);
	return 1;
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

scd_poison_t *scd_late_keep(scd_world_t *w)
{
	scd_poison_t *r = scd_late_refusals(w);
	while (r) {
		scd_poison_t *next = r->next, *l = w->lates;
		while (l && (l->rank != r->rank || strcmp(l->name, r->name)))
			l = l->next;
		if (l) { /* it owes this step before those: a step more */
			l->owed += l->owed < INT_MAX;
			late_free(r);
		} else {
			r->owed = 1, r->answered = 0;
			r->next = w->lates;
			w->lates = r;
		}
		r = next;
	}
	scd_poison_t *kept = w->lates;
	w->lates = NULL;
	return kept;
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
