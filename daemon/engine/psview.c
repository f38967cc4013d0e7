/* psview.c: see psview.h. */
#include "engine/psview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/ctx.h"
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

/* Keeps g (its communicator dropped) for the view of that serial; 0 out of memory. */
static int park(scd_psviews_t *c, uint64_t serial, scd_gpunet_t *g)
{
	if (c->n_parked == c->cap_parked) {
		int cap = c->cap_parked ? 2 * c->cap_parked : 8;
		struct scd_psview_parked *p = realloc(c->parked, sizeof(*p) * (size_t)cap);
		if (!p)
			return 0;
		c->parked = p;
		c->cap_parked = cap;
	}
	scd_gpunet_drop_comm(g);
	c->parked[c->n_parked++] = (struct scd_psview_parked){serial, g};
	return 1;
}

/* Frees entry v; with keep, its GPU transport is parked for the view's return. */
static void entry_free(scd_psviews_t *c, scd_psview_t *v, int keep)
{
	pthread_mutex_lock(&c->mu);
	scd_gpunet_t *g = v->gpunet;
	int *nodes = v->nodes;
	v->gpunet = NULL;
	v->nodes = NULL;
	v->n_nodes = 0;
	pthread_mutex_unlock(&c->mu);
	/* its communicator goes before the view it was made over */
	if (g && !(keep && v->t && park(c, v->t->serial, g))) {
		if (keep) /* out of memory: the members' next round makes them all agree
			   * again only if this node says it has no communicator */
			scd_warn(SCD_SUB_ENGINE,
				 "process set %u: no memory to keep its GPU transport",
				 v->pset);
		scd_gpunet_destroy(g);
	}
	scd_transport_destroy(v->t);
	free(nodes);
	memset(v, 0, sizeof(*v));
}

/* The parked GPU transport of the view of that serial, taken out (NULL: none). */
static scd_gpunet_t *unpark(scd_psviews_t *c, uint64_t serial)
{
	for (int i = 0; i < c->n_parked; i++)
		if (c->parked[i].serial == serial) {
			scd_gpunet_t *g = c->parked[i].gpunet;
			c->parked[i] = c->parked[--c->n_parked];
			return g;
		}
	return NULL;
}

void scd_psviews_init(scd_psviews_t *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
}

void scd_psviews_destroy(scd_psviews_t *c)
{
	scd_psviews_clear(c);
	pthread_mutex_destroy(&c->mu);
}

scd_gpunet_t *scd_psviews_gpunet(scd_psviews_t *c, const scd_job_t *job, const char *want,
				 int authenticated)
{
	scd_psview_t *v = slot_of(c, job->pset);
	if (!v || !same_nodes(v, job))
		return NULL;
	if (!v->gpunet) {
		scd_gpunet_t *g = NULL;
		if (scd_gpunet_create(want, authenticated, &g) != SC_OK)
			return NULL;
		pthread_mutex_lock(&c->mu);
		v->gpunet = g;
		pthread_mutex_unlock(&c->mu);
	}
	return v->gpunet;
}

void scd_psviews_peer_gone(scd_psviews_t *c, int rank)
{
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++)
		for (int q = 0; c->v[i].gpunet && q < c->v[i].n_nodes; q++)
			if (c->v[i].nodes[q] == rank)
				scd_gpunet_peer_gone(c->v[i].gpunet, q);
	pthread_mutex_unlock(&c->mu);
}

sc_status_t scd_psviews_make(scd_psviews_t *c, scd_transport_t *mesh, scd_job_t *job,
			     scd_transport_t **t_p)
{
	scd_psview_t *v = &c->v[victim(c, job)];
	entry_free(c, v, 1);
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
	/* The serial names the set and its nodes, the same on every member: a view the
	 * cache let go and made again (on this node only) is the same place to the buffers'
	 * scheme contexts, which keep the costs every member agreed on (coll/bufctx.c);
	 * another set, or the set over other nodes, is another place. */
	t->serial = SCD_SERIAL_VIEW | (scd_job_place_hash(job) & (SCD_SERIAL_VIEW - 1));
	scd_gpunet_t *g = unpark(c, t->serial); /* what the set decided, if it was here */
	pthread_mutex_lock(&c->mu);
	*v = (scd_psview_t){.pset = job->pset,
			    .n_nodes = job->n_nodes,
			    .nodes = nodes,
			    .t = t,
			    .gpunet = g,
			    .last_use = ++c->clock};
	pthread_mutex_unlock(&c->mu);
	scd_info(SCD_SUB_ENGINE, "process set %u: its view of the mesh (%d nodes, here %d)",
		 job->pset, job->n_nodes, t->rank);
	*t_p = t;
	return SC_OK;
}

void scd_psviews_clear(scd_psviews_t *c)
{
	for (int i = 0; i < SCD_PSVIEWS_MAX; i++)
		if (c->v[i].t)
			entry_free(c, &c->v[i], 0);
	for (int i = 0; i < c->n_parked; i++)
		scd_gpunet_destroy(c->parked[i].gpunet);
	free(c->parked);
	c->parked = NULL;
	c->n_parked = c->cap_parked = 0;
}

/* See psview.h. */
sc_status_t scd_psviews_transport(scd_psviews_t *c, scd_transport_t *mesh, int local_size,
				  scd_job_t *job, void (*drain)(void *), void *arg)
{
	job->run.t = mesh;
	if (!job->nodes)
		return SC_OK;
	const scd_job_item_t *it0 = job->n_items ? &job->items[0] : NULL;
	sc_status_t st =
	    scd_coll_pset_check(job->coll.kind, job->pset, it0 ? scd_coll_item_name(it0) : NULL,
				job->error, sizeof(job->error));
	if (st == SC_OK)
		st = scd_job_set_check(job, local_size, job->error, sizeof(job->error));
	if (st == SC_OK && !(job->run.t = scd_psviews_find(c, job))) {
		if (scd_psviews_evicts(c, job))
			drain(arg);
		st = scd_psviews_make(c, mesh, job, &job->run.t);
	}
	return st;
}
