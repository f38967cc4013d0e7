/*
 * verdict.h: one outcome on every rank for an allreduce that fails on some rank before it
 * communicates. The engine finds input faults in the pass that already reads the input
 * (the local sum: a trainer's COO index out of range, and with nonfinite = error a NaN or
 * an infinity); anything else that fails the job's compute stage on one node (a
 * sparsifier its tensor's options cannot make, no memory for the buffer, a device error)
 * is that node's local fault. Before any byte of the job goes out, every rank tells every
 * other one in one round of SCD_VERDICT_BYTES (16) per peer whether it found one
 * (scd_verdict_round), with a few flags about its buffer that every rank must agree on before
 * it communicates (whether the buffer is on a GPU: a GPU buffer takes the GPU transport only
 * when it is on a GPU on every rank). A fault anywhere fails the job on every rank with the
 * same error, naming the lowest faulty rank, its trainer (or node) and the tensor; the
 * collective then does not run, so the byte streams stay in step and no rank delivers a partial
 * sum.
 *
 * Every allreduce job takes the round, whatever its dtype and configuration: any of them
 * can fail locally, and a rank that skipped the collective alone would leave its peers
 * waiting for bytes that never come. The cost is one exchange of 16 bytes with every peer
 * per buffer (one network latency; fusion amortises it over the buffer's tensors). A small
 * buffer summed in one round (coll/bufctx.c) carries the words ahead of its data instead,
 * and every rank decides before it adds any rank's data: the same outcome without the
 * round's latency.
 */
#ifndef SCD_ENGINE_VERDICT_H
#define SCD_ENGINE_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "coll/job.h"

/* scd_fault_t, one rank's finding, is in coll/job.h (a job carries it between the engine's
 * stages). */

/* The 8 bytes a rank sends, and back. */
uint64_t scd_fault_pack(const scd_fault_t *f);
scd_fault_t scd_fault_unpack(uint64_t w);

/* Describes rank's fault f in job (items[f->item]) as the job's error, the same text on
 * every rank: the trainer's global rank (rank * local_size + local rank), node, local rank,
 * tensor and what was wrong; for a local fault, the node, its trainers' ranks, the tensor
 * (or the buffer's tensors) and the status. */
void scd_verdict_describe(const scd_job_t *job, int rank, int local_size, const scd_fault_t *f,
			  char *msg, size_t len);

/* The status every rank fails the job with for fault f: a local fault's own, else
 * SC_ERR_INVALID. */
sc_status_t scd_fault_status(const scd_fault_t *f);

/*
 * The round carried inside a collective's one exchange instead (coll/job.h,
 * scd_verdict_carry_t; coll.h, carries_verdict): v gets this rank's words (finding f, no
 * flags: such a collective runs on the mesh whatever the devices) and the decision the
 * collective calls once every rank's words are in, which fails the job exactly as the
 * round does. Logs what nonfinite = warn lets through, as scd_verdict_input does.
 */
void scd_verdict_carry_init(scd_verdict_carry_t *v, scd_job_t *job, const scd_fault_t *f,
			    int rank, int local_size);
/* After the collective that carried v failed with st: 1 when the verdict accounts for the
 * failure (job->error is the one every rank has, or, where the exchange failed before the
 * decision, this node's own compute stage's failure; or a fast turn's decision: discarded,
 * or its words refused), 0 when the failure is the exchange's own. */
int scd_verdict_carry_end(scd_verdict_carry_t *v, scd_job_t *job, sc_status_t st);

/*
 * A fast turn's words (coll/job.h, scd_fast_t), SCD_FAST_BYTES after the verdict words,
 * little-endian: the magic (16 bits), the kind (16 bits: SCD_FAST_READY or SCD_FAST_LEAVE)
 * and the buffer's bytes (32 bits), then the epoch, the turn and the digest (64 bits
 * each).
 */
#define SCD_FAST_MAGIC 0x4654u /* "TF" */
#define SCD_FAST_READY 1u
#define SCD_FAST_LEAVE 2u

/* Writes f's words for a buffer of bytes into w (SCD_FAST_BYTES). */
void scd_fast_words_put(uint8_t *w, const scd_fast_t *f, uint64_t bytes);

/*
 * The decision of a fast turn (v's decide), from every rank's words (rank q's verdict
 * words at words + q x stride, its fast words SCD_VERDICT_BYTES after them), the same on
 * every rank, before any rank's data is added:
 *  1. a rank's fast words malformed, or its epoch, turn, bytes or digest not rank 0's:
 *     SC_ERR_PROTOCOL, job->mesh_broken set (the ranks disagree on the sequence of
 *     exchanges, so the streams cannot be trusted: the engine runs no other job on the
 *     mesh, and the world re-forms);
 *  2. else some rank left: SC_IN_PROGRESS, job->fast.discarded and v->discarded set;
 *     nothing is summed, the buffer and the trainers' inputs stay as they were;
 *  3. else some rank found a fault: the job fails as the carried verdict fails it;
 *  4. else SC_OK: the collective sums in rank order.
 * job->status and job->error are set, alike on every rank, unless SC_OK.
 */
sc_status_t scd_fast_decide(scd_verdict_carry_t *v, scd_job_t *job, const uint8_t *words,
			    size_t stride, int P);

/* scd_verdict_carry_init for a fast turn (job->fast): the words are the verdict's, then
 * the turn's fast words, and decide is scd_fast_decide. A rank that leaves sends zeros
 * for its data and reads neither its buffer nor its device. */
void scd_fast_carry_init(scd_verdict_carry_t *v, scd_job_t *job, const scd_fault_t *f, int rank,
			 int local_size);

/* What a rank says of its buffer beside its finding, ANDed over the ranks by the round. */
#define SCD_VERDICT_CUDA 1u /* the buffer is on the cuda device (its GPU transport may run) */

/*
 * The rounds below run over what the job runs over: the mesh, or its process set's view,
 * whose rank q is node job->nodes[q]; the errors name nodes and global trainer ranks
 * (node x local_size + local rank) either way.
 *
 * Sends this rank's finding (mine) and flags (SCD_VERDICT_*) to every rank and receives
 * theirs, in one exchange; *flags_and gets the flags every rank set.
 * When some rank found a fault: the lowest faulty rank's status (scd_fault_status) with
 * job->error set, the same on every rank, and that rank in *faulty_p. A transport failure
 * returns its status with job->error naming it (SC_ERR_NOMEM: no memory for the round's
 * lists) and *faulty_p -1; SC_OK otherwise.
 */
sc_status_t scd_verdict_round(scd_transport_t *t, scd_job_t *job, const scd_fault_t *mine,
			      uint32_t flags, int local_size, int timeout_ms, int *faulty_p,
			      uint32_t *flags_and);

/*
 * The input check round of a job's communication stage (rank of local_size trainers a
 * node, over t): logs what nonfinite = warn lets through, then fails the job on every rank
 * (job->status and job->error set, logged) when some rank found a fault in its input or
 * failed its compute stage (f: this rank's); the rank whose compute stage failed keeps its
 * own account of why after the error every rank shares. *all_cuda: the buffer is on the
 * cuda device on every rank.
 */
sc_status_t scd_verdict_input(scd_transport_t *t, scd_job_t *job, const scd_fault_t *f,
			      int rank, int local_size, int *all_cuda);

#endif
