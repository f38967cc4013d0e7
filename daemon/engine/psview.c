/* psview.c: see psview.h. */
#include "engine/psview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static int same_nodes(const scd_psview_t *v, const scd_job_t *job)
{
	return v->n_nodes == job->n_nodes &&
	       !memcmp(v->nodes, job->nodes, sizeof(int) * (size_t)job->n_nodes);
}

static scd_psview_t *slot_of(scd_psviews_t *c, uint32_t pset)
{
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++)
		if (c->v[i].pset == pset && c->v[i].t)
			return &c->v[i];
	return NULL;
}

scd_transport_t *scd_psviews_find(scd_psviews_t *c, const scd_job_t *job)
{
	scd_psview_t *v = slot_of(c, job->pset);
	if (!v || !same_nodes(v, job))
		return NULL;
	v->last_use = ++c->clock;
	return v->t;
}

/* Where job's set's view goes: its set's old entry, a free one, or the least recently
 * used. */
static int victim(const scd_psviews_t *c, const scd_job_t *job)
{
	int lru = 0;
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++)
		if (c->v[i].t && c->v[i].pset == job->pset)
			return i;
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++) {
		if (!c->v[i].t)
			return i;
		if (c->v[i].last_use < c->v[lru].last_use)
			lru = i;
	}
	return lru;
}

int scd_psviews_evicts(const scd_psviews_t *c, const scd_job_t *job)
{
	return c->v[victim(c, job)].t != NULL;
}

static void entry_free(scd_psview_t *v)
{
	scd_transport_destroy(v->t);
	free(v->nodes);
	memset(v, 0, sizeof(*v));
}

sc_status_t scd_psviews_make(scd_psviews_t *c, scd_transport_t *mesh, scd_job_t *job,
			     scd_transport_t **t_p)
{
	scd_psview_t *v = &c->v[victim(c, job)];
	entry_free(v);
	int *nodes = malloc(sizeof(int) * (size_t)(job->n_nodes > 0 ? job->n_nodes : 1));
	scd_transport_t *t = NULL;
	sc_status_t st =
	    nodes ? scd_transport_subgroup(mesh, job->nodes, job->n_nodes, &t) : SC_ERR_NOMEM;
	if (st != SC_OK) {
		free(nodes);
		snprintf(job->error, sizeof(job->error),
			 "process set %u: no view of the mesh for its %d nodes: %s", job->pset,
			 job->n_nodes, nodes ? scd_transport_error() : "out of memory");
		return st;
	}
	memcpy(nodes, job->nodes, sizeof(int) * (size_t)job->n_nodes);
	/* a view made anew may reuse an old one's address: the buffers' scheme contexts
	 * tell them apart by serial (coll/bufctx.c) */
	t->serial = ++c->serial | 1ull << 62;
	*v = (scd_psview_t){.pset = job->pset,
			    .n_nodes = job->n_nodes,
			    .nodes = nodes,
			    .t = t,
			    .last_use = ++c->clock};
	scd_info(SCD_SUB_ENGINE, "process set %u: its view of the mesh (%d nodes, here %d)",
		 job->pset, job->n_nodes, t->rank);
	*t_p = t;
	return SC_OK;
}

void scd_psviews_clear(scd_psviews_t *c)
{
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++)
		if (c->v[i].t)
			entry_free(&c->v[i]);
}
