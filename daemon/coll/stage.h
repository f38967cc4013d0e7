/*
 * stage.h: a job's staging, for the engine and the collectives, on the device's staging
 * (device/stage.h), which knows buffers and GPUs but not jobs: host memory for a buffer the
 * transport cannot reach (a GPU's), the copies of sources on other GPUs than the device's
 * home to the home and of results back, and the GPU trainers' ready and done events. This
 * file maps a job's items and sources onto those calls and names the tensor and the
 * trainer in what fails; nothing here calls a GPU itself.
 *
 * Each pipeline stage has a peer area of its own (peer_in, the compute stage's; peer_out,
 * the communication stage's, for an alltoall's blocks to trainers on other GPUs): the
 * compute stage grows its area for job i+1 while the communication stage may still be
 * copying job i's results (device/stage.h asserts that one thread uses each).
 */
#ifndef SCD_COLL_STAGE_H
#define SCD_COLL_STAGE_H

#include <stddef.h>

#include "coll/job.h"
#include "device/device.h"
#include "device/stage.h"

/* The staging areas of one engine: the host staging of a device buffer (grow-only), and
 * the compute and communication stages' peer areas. Zeroed is empty. */
typedef struct scd_coll_stage {
	scd_stage_host_t host;
	scd_stage_t peer_in, peer_out;
} scd_coll_stage_t;

/* Frees what the areas hold. */
void scd_coll_stage_free(scd_coll_stage_t *s);

/* Where src, a source of it, lies and whose it is, for the device's staging. */
scd_stage_src_t scd_job_stage_src(const scd_job_item_t *it, const scd_job_src_t *src);
/* Whether the device's kernels may read src where it lies. */
int scd_job_stage_local(const scd_stage_t *pe, const scd_job_src_t *src);
/* bytes of src at p, copied to dst on the home GPU; the first failure is kept in pe. */
void scd_job_stage_copy_in(scd_stage_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
			   void *dst, const void *p, size_t bytes);
/* src's bytes at p where the device's kernels may read them: p itself, or a copy in the
 * area from offset at (room made by scd_job_stage_reserve). */
const void *scd_job_stage_in(scd_stage_t *pe, const scd_job_item_t *it,
			     const scd_job_src_t *src, const void *p, size_t bytes, size_t at);
/* Readies pe for the job on device dev of kind: room on the home for the largest source
 * off it (COO sources: their indices and values). */
sc_status_t scd_job_stage_reserve(scd_stage_t *pe, const scd_device_ops_t *dev,
				  const scd_job_t *job, scd_device_kind_t kind);
/* Host memory for staging bytes of dev's buffer through the transport (grow-only). */
void *scd_job_stage_host(scd_coll_stage_t *s, const scd_device_ops_t *dev, size_t bytes);
/* Averages where the item asks for it and copies the result to every local trainer's
 * buffer (to a trainer on another GPU than the home, from GPU to GPU). */
sc_status_t scd_job_stage_scatter_out(const scd_device_ops_t *dev, const scd_job_item_t *it,
				      uint32_t dtype, void *res, double divisor, char *err,
				      size_t err_len);
/* The home's stream waits for what each GPU trainer queued before it submitted (its
 * ready event; not for an item whose ready_waited says that the calling thread's stream
 * waited for it already), or marks where the result is complete (its done event); rank
 * names this node in a failure, which sets job->status and job->error and is logged. */
sc_status_t scd_job_stage_ready(int rank, scd_job_t *job);
sc_status_t scd_job_stage_done(int rank, scd_job_t *job);
/* The same wait for one item's trainers alone, a selection job's at submission (its
 * buffer's job then skips it: each recording of an event is waited for once); on failure
 * what failed (the tensor, the trainer, the device's text) in why[len], nothing logged. */
sc_status_t scd_job_stage_ready_item(const scd_job_item_t *it, char *why, size_t len);

/* Why dev's sync failed with st: the fault that lost the device where there is one (its
 * first failure was logged where it was seen), else st's message. */
const char *scd_job_stage_why(const scd_device_ops_t *dev, sc_status_t st);
/* A job on a lost GPU fails at once; the scheme's kernels read the node's residual where
 * it lies: a GPU tensor's must be on the home (local rank 0's registration holds it).
 * job->error names rank and the tensor. */
sc_status_t scd_job_stage_check(int rank, scd_job_t *job, scd_device_kind_t kind);

#endif
