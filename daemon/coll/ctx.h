/*
 * ctx.h: what the engine lends a collective's stages (coll.h's gather, run, deliver and
 * predict): the node's place in the world, the transports, the agreed network costs, the
 * job's device and buffer, the staging areas (stage.h) and the buffers' state of the
 * schemes (bufctx.h). The collectives include it; the layers above them do not.
 */
#ifndef SCD_COLL_CTX_H
#define SCD_COLL_CTX_H

#include "coll/coll.h"
#include "coll/job.h"
#include "coll/stage.h"

struct scd_bufctx_table;
struct scd_presel_table;

typedef struct scd_coll_ctx {
	int rank, world_size, local_size; /* this node, the nodes, trainers a node */
	scd_transport_t *mesh;		  /* the data plane mesh */
	/* communication stage: what the job runs over (the mesh, or the GPU transport
	 * gpunet picked for a descriptor that takes it) and its costs */
	scd_transport_t *t;
	double t_alpha_s, t_beta_s_per_byte;
	double alpha_s, beta_s_per_byte; /* the mesh's, agreed by every rank */
	scd_device_kind_t kind;
	const scd_device_ops_t *dev;
	char *buf; /* the job's buffer, in dev's memory */
	scd_coll_stage_t *stage;
	scd_stage_t *pe; /* the calling stage's peer area (stage.h) */
	struct scd_bufctx_table *bufs;
	struct scd_presel_table *presel; /* the selections made at submission */
	/* compute stage: what the local step checks in the input, and where its first fault
	 * goes (job.h) */
	scd_nonfinite_t nonfinite;
	scd_fault_t *fault;
} scd_coll_ctx_t;

/* The name of an item's tensor, for errors. */
static inline const char *scd_coll_item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

/* The report of a dense exchange (density 1, no densification, balanced) predicted to take
 * predicted_s. */
static inline void scd_coll_dense_report(scd_job_t *job, double predicted_s)
{
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->predicted_s = predicted_s;
	job->density = job->gamma = job->imbalance = 1;
}

#endif
