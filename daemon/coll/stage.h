/*
 * stage.h: the engine's staging of a job's data between the trainers' buffers and where
 * the collectives compute and send it: host memory for a buffer the transport cannot
 * reach (a GPU's), the copies of sources on other GPUs than the engine's to the engine
 * GPU and of results back, and the GPU trainers' ready and done events. The collectives
 * (coll_*.c) and the engine's stages call it; it is the one place above device/ where a
 * job's multi-GPU copies are made.
 */
#ifndef SCD_COLL_STAGE_H
#define SCD_COLL_STAGE_H

#include <pthread.h>
#include <stddef.h>

#include "coll/job.h"
#include "device/cuda.h"
#include "device/device.h"

/*
 * The local sum of cuda sources on several GPUs runs on the engine GPU (scd_cuda_engine):
 * a kernel reads only its own GPU's memory, so a source on another GPU is first copied
 * over (scg_copy_peer: direct where peer access is possible, staged by the driver where
 * not) into this area, one source at a time on the engine GPU's stream, and the result is
 * copied back to each trainer's GPU when it is delivered.
 *
 * Each stage has an area of its own (peer_in, the compute stage's; peer_out, the
 * communication stage's, for an alltoall's blocks to trainers on other GPUs): the compute
 * stage grows its area for job i+1 while the communication stage may still be copying job
 * i's results, so one shared area would be freed under the other thread's copy. Each
 * belongs to the first thread that uses it, which scd_peer_mine asserts at every use.
 */
typedef struct scd_peer {
	const scd_cuda_ipc_t *ipc; /* NULL: every source is on the engine's device */
	int engine;		   /* the engine GPU */
	const scd_device_ops_t *dev;
	char *buf; /* on the engine GPU */
	size_t cap;
	sc_status_t st; /* the first failed copy, named in what */
	char what[200];
	int owned; /* user is the one thread that uses this area */
	pthread_t user;
} scd_peer_t;

/* The staging areas of one engine: the host staging of a device buffer (grow-only), the
 * compute stage's copies on the engine GPU of sources on other GPUs (peer_in), and the
 * communication stage's of results for them (an alltoall's, peer_out). */
typedef struct scd_stage {
	void *stage;
	size_t stage_cap;
	const scd_device_ops_t *stage_dev;
	scd_peer_t peer_in, peer_out;
} scd_stage_t;

/* Frees what the areas hold. */
void scd_stage_free(scd_stage_t *s);

/* pe, which only one thread ever uses (an internal invariant: see scd_peer_t). */
scd_peer_t *scd_peer_mine(scd_peer_t *pe);
/* Whether the engine's kernels may read src where it lies. */
int scd_peer_local(const scd_peer_t *pe, const scd_job_src_t *src);
/* bytes of src at p, copied to dst on the engine GPU; the first failure is kept. */
void scd_peer_copy_in(scd_peer_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
		      void *dst, const void *p, size_t bytes);
/* src's bytes at p where the engine's kernels may read them: p itself, or a copy in the
 * staging area from offset at (room made by scd_peer_reserve). */
const void *scd_peer_in(scd_peer_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
			const void *p, size_t bytes, size_t at);
/* Readies pe for the job: whether any source is on another GPU than the engine's, and a
 * staging area on the engine GPU for the largest of them (grow-only). */
sc_status_t scd_peer_reserve(scd_peer_t *pe, const scd_device_ops_t *dev, scd_job_t *job,
			     scd_device_kind_t kind);
/* Host memory for staging bytes of dev's buffer through the transport (grow-only). */
void *scd_stage_get(scd_stage_t *e, const scd_device_ops_t *dev, size_t bytes);
/* Averages where the item asks for it and copies the result to every local trainer's
 * buffer (to a trainer on another GPU than the engine's, from GPU to GPU). */
sc_status_t scd_stage_scatter_out(const scd_device_ops_t *dev, const scd_job_item_t *it,
				  uint32_t dtype, void *res, double divisor, char *err,
				  size_t err_len);
/* The engine's stream waits for what each GPU trainer queued before it submitted (its
 * ready event), or marks where the result is complete (its done event); rank names this
 * node in a failure, which sets job->status and job->error and is logged. */
sc_status_t scd_stage_trainers_ready(int rank, scd_job_t *job, scd_device_kind_t kind);
sc_status_t scd_stage_trainers_done(int rank, scd_job_t *job, scd_device_kind_t kind);

/* Why dev's sync failed with st: the fault that lost the GPU where there is one (the
 * device's first failure was logged where it was seen), else st's message. */
const char *scd_stage_device_why(const scd_device_ops_t *dev, sc_status_t st);
/* A job on a lost GPU fails at once; the scheme's kernels read the node's residual where
 * it lies: a cuda tensor's must be on the engine GPU (local rank 0's registration holds
 * it). job->error names rank and the tensor. */
sc_status_t scd_stage_gpu_check(int rank, scd_job_t *job, scd_device_kind_t kind);

/* The GPU the engine computes on (cuda_device), and whether a source lies where the
 * engine's kernels read it (not a cuda source on another GPU). */
int scd_stage_engine_gpu(void);
int scd_stage_src_on_engine(const scd_job_src_t *src);

#endif
