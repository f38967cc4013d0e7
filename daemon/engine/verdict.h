/*
 * verdict.h: one outcome on every rank for an allreduce whose input is invalid on some
 * rank. The engine finds the faults in the pass that already reads the input (the local
 * sum: a trainer's COO index out of range, and with nonfinite = error a NaN or an
 * infinity); before any byte of the job goes out, every rank tells every other one in
 * one round of 8 bytes per peer whether it found one (scd_verdict_round). A fault
 * anywhere fails the job on every rank with the same error, naming the lowest faulty
 * rank, its trainer and the tensor; the collective then does not run, so the byte streams
 * stay in step and no rank delivers a partial sum.
 *
 * Whether a job takes the round is decided from what every rank agrees on (the plan and
 * the configuration's nonfinite key, which world formation checks is the same on every
 * node: world/world.c refuses a Join whose value differs): a float32
 * job with a tensor of its own buffer (the only ones that take COO input), and every job
 * when nonfinite = error.
 */
#ifndef SCD_ENGINE_VERDICT_H
#define SCD_ENGINE_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* scd_fault_t, one rank's finding, is in engine.h (a job carries it between the engine's
 * stages). */

/* The 8 bytes a rank sends, and back. */
uint64_t scd_fault_pack(const scd_fault_t *f);
scd_fault_t scd_fault_unpack(uint64_t w);

/* Whether the job takes the round (the same answer on every rank). */
int scd_verdict_needed(const scd_job_t *job);

/* Describes rank's fault f in job (items[f->item]) as the job's error, the same text on
 * every rank: the trainer's global rank (rank * local_size + local rank), node, local rank,
 * tensor and what was wrong. */
void scd_verdict_describe(const scd_job_t *job, int rank, int local_size, const scd_fault_t *f,
			  char *msg, size_t len);

/*
 * Sends this rank's finding (mine) to every rank and receives theirs, in one exchange.
 * SC_ERR_INVALID with job->error set (the same on every
 * rank) when some rank found a fault; a transport failure returns its status with
 * job->error naming it (SC_ERR_NOMEM: no memory for the round's lists); SC_OK otherwise.
 */
sc_status_t scd_verdict_round(scd_transport_t *t, scd_job_t *job, const scd_fault_t *mine,
			      int local_size, int timeout_ms);

#endif
