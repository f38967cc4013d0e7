/*
 * pset.c: the node's table of process sets (pset.h) and the trainers' requests that change
 * it (ctl_int.h).
 */
#include "ctl/pset.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl_int.h"
#include "ctl/tensor.h"
#include "util/log.h"

void scd_psets_init(scd_psets_t *t, int node, int local_size)
{
	memset(t, 0, sizeof(*t));
	t->node = node;
	t->local_size = local_size;
}

static void pset_clear(scd_pset_t *p)
{
	free(p->ranks);
	free(p->nodes);
}

void scd_psets_free(scd_psets_t *t)
{
	for (int i = 0; i < t->n; i++)
		pset_clear(&t->v[i]);
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

const scd_pset_t *scd_psets_find(const scd_psets_t *t, uint32_t id)
{
	for (int i = 0; id && i < t->n; i++)
		if (t->v[i].id == id)
			return &t->v[i];
	return NULL;
}

int scd_pset_member(const scd_pset_t *p, int rank)
{
	if (!p)
		return 1;
	for (int i = 0; i < p->n_ranks; i++)
		if (p->ranks[i] == rank)
			return 1;
	return 0;
}

static int same_ranks(const scd_pset_t *p, const int32_t *ranks, int n)
{
	if (p->n_ranks != n)
		return 0;
	for (int i = 0; i < n; i++)
		if (p->ranks[i] != ranks[i])
			return 0;
	return 1;
}

sc_status_t scd_psets_define(scd_psets_t *t, uint32_t id, const int32_t *ranks, int n,
			     int world_ranks, char *err, size_t err_len)
{
	if (!id || n < 1 || n > world_ranks) {
		snprintf(err, err_len, "process set %u with %d ranks (the job has %d)", id, n,
			 world_ranks);
		return SC_ERR_INVALID;
	}
	for (int i = 0; i < n; i++)
		if (ranks[i] < 0 || ranks[i] >= world_ranks ||
		    (i && ranks[i] <= ranks[i - 1])) {
			snprintf(err, err_len,
				 "process set %u: rank %d at position %d is out of range (0 to "
				 "%d) or not ascending",
				 id, ranks[i], i, world_ranks - 1);
			return SC_ERR_INVALID;
		}
	const scd_pset_t *old = scd_psets_find(t, id);
	if (old) {
		if (same_ranks(old, ranks, n))
			return SC_OK;
		snprintf(err, err_len,
			 "process set %u is already defined on this node with %d other ranks",
			 id, old->n_ranks);
		return SC_ERR_MISMATCH;
	}
	if (t->n == t->cap) {
		int cap = t->cap ? t->cap * 2 : 8;
		scd_pset_t *v = realloc(t->v, (size_t)cap * sizeof(*v));
		if (!v)
			goto nomem;
		t->v = v;
		t->cap = cap;
	}
	scd_pset_t p = {.id = id, .n_ranks = n};
	p.ranks = malloc(sizeof(int) * (size_t)n);
	p.nodes = malloc(sizeof(int) * (size_t)n);
	if (!p.ranks || !p.nodes) {
		pset_clear(&p);
		goto nomem;
	}
	for (int i = 0; i < n; i++) {
		int node = ranks[i] / t->local_size;
		p.ranks[i] = ranks[i];
		if (!p.n_nodes || p.nodes[p.n_nodes - 1] != node)
			p.nodes[p.n_nodes++] = node;
		if (node == t->node) {
			p.local_mask |= 1ull << (ranks[i] % t->local_size);
			p.n_local++;
		}
	}
	t->v[t->n++] = p;
	return SC_OK;
nomem:
	snprintf(err, err_len, "process set %u: out of memory", id);
	return SC_ERR_NOMEM;
}

void scd_psets_remove(scd_psets_t *t, uint32_t id)
{
	for (int i = 0; i < t->n; i++)
		if (t->v[i].id == id) {
			pset_clear(&t->v[i]);
			t->v[i] = t->v[--t->n];
			return;
		}
}

/* ---- the trainers' requests (ClientMsg.process_set) ---------------------------------- */

/* Fails the operations of set id in flight on this node, here and (through the
 * negotiation) on every rank that waits on them. */
static void fail_set_ops(scd_ctl_t *ctl, uint32_t id)
{
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors), *next; nt; nt = next) {
		next = nt->all_next;
		if (nt->pset != id ||
		    (nt->state != SCD_NT_LOCAL_WAIT && nt->state != SCD_NT_ANNOUNCED))
			continue;
		char msg[400];
		snprintf(msg, sizeof(msg),
			 "operation on tensor '%s' failed: process set %u was removed",
			 nt->name, id);
		if (nt->state == SCD_NT_ANNOUNCED)
			ctl->up->abandon(ctl->d->world, nt->name, SC_ERR_ABORTED, msg);
		scd_ctl_complete(ctl, nt, SC_ERR_ABORTED, msg);
	}
}

void scd_ctl_handle_process_set(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
				const Sparsecomm__ProcessSet *ps)
{
	char err[300];
	if (s->role != SPARSECOMM__ROLE__ROLE_TRAINER || !ps) {
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_INVALID,
				   "only trainers define process sets");
		return;
	}
	if (ps->remove) {
		if (scd_psets_find(&ctl->psets, ps->id)) {
			scd_info(SCD_SUB_CTL, "process set %u removed", ps->id);
			fail_set_ops(ctl, ps->id);
			scd_psets_remove(&ctl->psets, ps->id);
		}
		scd_ctl_send_ok(ctl, s, seq);
		return;
	}
	int known = scd_psets_find(&ctl->psets, ps->id) != NULL;
	sc_status_t st = scd_psets_define(
	    &ctl->psets, ps->id, ps->ranks, ps->n_ranks > INT32_MAX ? -1 : (int)ps->n_ranks,
	    ctl->d->world_size * ctl->d->local_size, err, sizeof(err));
	if (st != SC_OK) {
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, st, err);
		return;
	}
	if (!known)
		scd_info(SCD_SUB_CTL, "process set %u: %zu ranks", ps->id, ps->n_ranks);
	scd_ctl_send_ok(ctl, s, seq);
}
