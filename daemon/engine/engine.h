/*
 * engine.h: the data plane's pipeline. It executes jobs (coll/job.h) strictly in submission
 * order, which is plan order, the same on every rank, so the collective calls of all ranks
 * match, in two stages on two threads (engine_pipeline; docs/design.md, threads): the
 * compute stage of a buffer (its collective's local step: local sum, sparsification ahead)
 * runs while the previous buffer is in the communication stage (the input check round,
 * the collective's exchange and its delivery to the trainers); one job waits between them.
 * What each stage does with a buffer is its collective's (coll/coll.h); the engine keeps
 * the queue, the threads, the fusion buffers, the job's device, the verdict round, the mesh
 * and forget jobs and the network probe.
 *
 * A job of a buffer is one fused buffer: the loop thread resolves its tensors to the
 * trainers' shared buffers before submitting it (and keeps them mapped until the job comes
 * back). The collective runs in place in the first trainer's buffer when the job holds one
 * tensor and the collective allows it, else in a fusion buffer of the job's device; the job
 * goes back to the loop through uv_async_send (whose callbacks coalesce, so the loop drains
 * a queue). A job that succeeded first ends its trainers' operations in their shared
 * headers where the loop would (coll/job.h, done_hdr), so a trainer does not wait for the
 * loop's turn; the loop then collects the job before it reads a trainer's next message. A
 * selection job at submission that finishes while another job is in the engine wakes nobody: it
 * goes back with that job's hand-back (scd_engine_counts counts both). The two threads wait on
 * condition variables of their own, so a job queued for one stage wakes only the thread of that
 * stage.
 *
 * A job of a process set (coll/job.h: pset, nodes) runs among the set's nodes only, over
 * the set's view of the mesh (psview.h); every node runs the jobs of the sets it belongs
 * to in plan order, so the members of a set meet its jobs in the same order.
 *
 * A fast turn (coll/job.h, scd_fast_t; docs/design.md "Fast turns") runs as the one-round
 * sum with its readiness in the same exchange, always in a fusion buffer. One that some
 * rank left comes back discarded (SC_IN_PROGRESS, nothing delivered), and so does every
 * later turn of its epoch still queued, unrun, with no byte sent.
 *
 * A job runs on one device (device.h): the one where its trainers' tensors live, each
 * source's device field, set where the job is built. Every computation on tensor data
 * (local sums, sparsification, residuals, averaging, copies to the trainers) goes through
 * that device's ops, and the fusion buffer and the buffer's workspaces are that device's
 * memory; residuals live with the tensors. A job whose sources are on different devices,
 * or on one this daemon does not have, fails with SC_ERR_UNSUPPORTED naming the tensor.
 */
#ifndef SCD_ENGINE_ENGINE_H
#define SCD_ENGINE_ENGINE_H

#include <stdint.h>

#include <uv.h>

#include "coll/job.h"
#include "config/config.h"
#include "device/device.h"
#include "scheme/scheme.h"
#include "transport/transport.h"

typedef struct scd_engine scd_engine_t;

/* Hands a finished job back, on the loop thread. */
typedef void (*scd_engine_done_cb)(void *arg, scd_job_t *job);

/* What an engine is made from. */
typedef struct scd_engine_params {
	uv_loop_t *loop; /* the loop thread's: jobs come back on it */
	int rank, world_size, local_size;
	int pipeline;		  /* the stages on two threads (else one runs both, in turn) */
	uint64_t fusion_bytes;	  /* the fusion buffers' capacity */
	int join_timeout_ms;	  /* a mesh job's */
	const char *transport;	  /* the transport key: what GPU buffers take (gpunet.h) */
	int secret;		  /* a job secret is present */
	scd_scheme_cfg_t schemes; /* every buffer's schemes' settings */
	double cpu_share;	  /* the cpu_share key (0: each mesh job's, learnt at join) */
	scd_engine_done_cb done;
	void *done_arg;
} scd_engine_params_t;

/* The params the configuration decides (pipeline, fusion, timeouts, transport, schemes);
 * the caller sets the rest. */
void scd_engine_params_from_config(const scd_config_t *cfg, scd_engine_params_t *p);
sc_status_t scd_engine_create(const scd_engine_params_t *p, scd_engine_t **e_p);
/* Every function below but destroy takes e NULL, an engine destroyed (the caller forgets
 * its pointer at scd_engine_destroy's SC_OK): it does nothing (a job submitted is freed),
 * or returns nothing measured. */
/* Loop thread: queues a job (ownership passes to the engine until done() gets it back). A
 * small selection job at submission, of host memory, is queued without a wake-up of the
 * compute thread (see scd_engine_counts_t.lazy). */
void scd_engine_submit(scd_engine_t *e, scd_job_t *job);
/* Loop thread: hands back now what the engine has finished (what its wake-up of the loop
 * does). Called before a trainer's message is read: the engine may have told a trainer
 * of its success itself (its shared header, coll/job.h done_hdr), so the trainer's next
 * message can come before that wake-up, and must find the job ended. */
void scd_engine_collect(scd_engine_t *e);
/* Stops the thread after the job it is running, waiting at most timeout_ms: SC_OK when it
 * stopped (then the engine is freed), SC_ERR_TIMEOUT while it is still blocked in a
 * transfer. */
sc_status_t scd_engine_destroy(scd_engine_t *e, int timeout_ms);
/* From the loop thread: rank has gone from the world; a transfer blocked on it ends now
 * instead of at op_timeout_ms (the transport's peer_gone, where it has one). */
void scd_engine_peer_gone(scd_engine_t *e, int rank);
/* The world re-forms (the thread that submits jobs): once this returns, no job submitted
 * before it delivers its result to its trainers' buffers (it fails instead), none is
 * delivering one, and none starts a stage that uses its trainers' memory. One whose
 * compute or communication stage is under way still may: scd_engine_quiesce waits for
 * those before its trainers are told that it failed. */
void scd_engine_fence(scd_engine_t *e);
/* After scd_engine_fence, and peer_gone for the ranks whose transfers must end (the thread
 * that submits jobs, which submits none meanwhile): waits, at most timeout_ms, until no
 * job is in its compute or communication stage, which use its trainers' memory (their
 * buffers copied in, or summed and exchanged in place; their residuals). Returns how many
 * still are: 0 when the trainers of every job submitted before the fence can be told at
 * once that it failed, and may reuse, or release, their buffers. */
int scd_engine_quiesce(scd_engine_t *e, int timeout_ms);
/* The longest a re-form waits in scd_engine_quiesce (world.c: a quarter of
 * peer_timeout_ms when that is less). */
#define SCD_ENGINE_QUIESCE_MS 5000
/* The transport once the mesh job has succeeded (NULL before). */
scd_transport_t *scd_engine_transport(scd_engine_t *e);
/* The latency (s) and inverse bandwidth (s/byte) the daemons agreed on. */
void scd_engine_net(scd_engine_t *e, double *alpha_s_p, double *beta_s_per_byte_p);
/* How many jobs ran their communication stage on the compute thread: small host jobs
 * that found that stage idle and nothing queued behind them (engine.c, comm_here_locked). */
uint64_t scd_engine_inline_jobs(scd_engine_t *e);
/* Jobs handed back to the loop, and the wake-ups of the loop (uv_async_send) they asked
 * for: a selection job at submission finished while another job is in the engine asks for
 * none, it goes back with that job (engine.c, finish_locked); the times the
 * communication thread woke to look for a job (a job for the compute stage wakes it not);
 * and the trainers' operations the engine ended in their headers itself (engine.c,
 * early_done_locked); the small selection jobs queued without waking the compute thread
 * (engine.c, ENGINE_LAZY_NUMEL: they run before the next job it wakes for, or a few
 * milliseconds later). asleep: the engine is quiet, only a wake-up can start it again:
 * the compute thread waits for a job with no deadline (no hand-back owed: owe_locked)
 * and nothing has woken it since it began to, and the communication stage has no job. */
typedef struct scd_engine_counts {
	uint64_t handed, wakes, comm_wakes, early, lazy;
	int asleep;
} scd_engine_counts_t;
scd_engine_counts_t scd_engine_counts(scd_engine_t *e);
/* Fusion buffer capacity wanted by the configuration (applied before the next job). */
void scd_engine_set_fusion_bytes(scd_engine_t *e, uint64_t bytes);
/* The device a job runs on (coll/job.h), as the engine finds it. */
static inline sc_status_t scd_engine_job_device(int rank, scd_job_t *job,
						scd_device_kind_t *kind_p,
						const scd_device_ops_t **dev_p)
{
	return scd_job_device(rank, job, kind_p, dev_p);
}

#endif
