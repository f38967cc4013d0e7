/*
 * psview.h: the engine's views of the mesh, one per process set (docs/design.md, "Process
 * sets: the data plane"). A job of a set other than the global one (coll/job.h: pset,
 * nodes) runs among its member nodes only, over the transport's view of their ranks
 * (transport.h, subgroup); the engine keeps a small cache of them by set id, made on a
 * set's first job, made anew when a job names other nodes for its set, and destroyed
 * before the mesh they are views of (a re-formed world, the engine's end).
 *
 * Used by the engine's compute stage only; a view it destroys must not be in use by the
 * communication stage, so the caller drains that stage first when scd_psviews_evicts
 * says a view will go.
 */
#ifndef SCD_ENGINE_PSVIEW_H
#define SCD_ENGINE_PSVIEW_H

#include <pthread.h>

#include "coll/job.h"
#include "engine/gpunet.h"
#include "transport/transport.h"

/* Views kept at once (the least recently used goes beyond). */
#define SCD_PSVIEWS_MAX 16

typedef struct scd_psview {
	uint32_t pset; /* 0: a free entry */
	int n_nodes;
	int *nodes;
	scd_transport_t *t;
	/* the set's GPU transport (gpunet.h over the view: an NCCL communicator of the
	 * set's nodes), made on the set's first GPU buffer; NULL until then */
	scd_gpunet_t *gpunet;
	uint64_t last_use;
} scd_psview_t;

typedef struct scd_psviews {
	scd_psview_t v[SCD_PSVIEWS_MAX];
	uint64_t clock;
	/* guards the entries' nodes and gpunet against scd_psviews_peer_gone (any thread);
	 * the engine's compute and communication stages change them */
	pthread_mutex_t mu;
	/* the GPU transports of views the cache let go, by view serial, without their
	 * communicators: what a set decided with its other members (tcp for good, the
	 * retries, the communicators' count) must outlive a view that one node alone lets
	 * go, and comes back with the view */
	struct scd_psview_parked {
		uint64_t serial;
		scd_gpunet_t *gpunet;
	} * parked;
	int n_parked, cap_parked;
} scd_psviews_t;

/* The cached view of job's set over its nodes, or NULL when there is none yet. */
scd_transport_t *scd_psviews_find(scd_psviews_t *c, const scd_job_t *job);
/*
 * What a buffer's job runs over, in job->run.t: the mesh, or for a process set's job its
 * set's view, made on the set's first job; drain(arg) runs first when making it destroys a
 * view (the communication stage may be using it). A job the set cannot run (coll.h,
 * psets), whose set's trainers do not lie on its nodes (job.h, scd_job_set_check) or
 * without a view fails here without communicating (job->error says why): every member
 * decides alike from what they agreed on (a view fails only for want of memory, and its
 * peers then time out naming this node).
 */
sc_status_t scd_psviews_transport(scd_psviews_t *c, scd_transport_t *mesh, int local_size,
				  scd_job_t *job, void (*drain)(void *), void *arg);

/* Whether scd_psviews_make for job would destroy a view (the set's own, of other nodes,
 * or the least recently used when the cache is full). */
int scd_psviews_evicts(const scd_psviews_t *c, const scd_job_t *job);
/* Makes job's set's view of mesh and keeps it (replacing what scd_psviews_evicts said).
 * On failure, job->error says why (the transport's text). */
sc_status_t scd_psviews_make(scd_psviews_t *c, scd_transport_t *mesh, scd_job_t *job,
			     scd_transport_t **t_p);
/* Destroys every view (before their mesh goes), and every parked GPU transport. */
void scd_psviews_clear(scd_psviews_t *c);
void scd_psviews_init(scd_psviews_t *c);
void scd_psviews_destroy(scd_psviews_t *c);
/* The GPU transport of job's set (its view's, made on first use with the transport key's
 * want and whether the job has a secret), or NULL when the view is not cached or out of
 * memory. */
scd_gpunet_t *scd_psviews_gpunet(scd_psviews_t *c, const scd_job_t *job, const char *want,
				 int authenticated);
/* The world gave up mesh rank: every set's communicator with it ends its waits. */
void scd_psviews_peer_gone(scd_psviews_t *c, int rank);

#endif
