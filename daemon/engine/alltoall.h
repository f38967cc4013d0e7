/*
 * alltoall.h: the alltoall collective of the data plane (sc_alltoall_async). Every trainer
 * sends send_counts[r] elements of its buffer to trainer rank r and gets, in source rank
 * order, the blocks addressed to it.
 *
 * Two stages, as the engine's other jobs. The compute stage packs each local trainer's
 * send blocks, back to back in local rank order, into the job's own buffer (the trainers'
 * buffers are where the received blocks land, so what they send must be out of them
 * first). The communication stage exchanges the count matrix (each node's trainers' rows:
 * state and one count per trainer), which every node then checks alike, and sends each
 * other node, in one exchange, the blocks its trainers address to that node's trainers;
 * blocks between two trainers of one node are copied locally.
 */
#ifndef SCD_ENGINE_ALLTOALL_H
#define SCD_ENGINE_ALLTOALL_H

#include <stddef.h>

#include "device/device.h"
#include "engine/engine.h"
#include "transport/transport.h"

/*
 * What the engine lends an alltoall: host memory for staging bytes (grow-only; NULL when
 * there is none), and the copies between a trainer's buffer and the job's, which cross
 * GPUs where the trainer's tensor lives on another one than the engine's.
 */
typedef struct scd_a2a_hooks {
	void *(*stage)(void *arg, size_t bytes);
	/* bytes of src's buffer at p to dst, in the job's buffer */
	void (*copy_in)(void *arg, const scd_job_src_t *src, void *dst, const void *p,
			size_t bytes);
	/* bytes of host memory at p to src's buffer (a device's, where it is not the host) */
	sc_status_t (*copy_out)(void *arg, const scd_job_src_t *src, const void *p,
				size_t bytes);
	void *arg;
} scd_a2a_hooks_t;

/* The room the job's own buffer needs for the packed blocks, in bytes. */
size_t scd_alltoall_buffer_bytes(const scd_job_t *job);

/* The compute stage: the local trainers' send blocks into buf, back to back. */
void scd_alltoall_pack(const scd_job_t *job, void *buf, const scd_a2a_hooks_t *h);

/*
 * The communication stage on node `node` of P, L trainers a node: the count matrix, its
 * checks, the blocks. On success every local trainer's buffer holds what it received in
 * source rank order, its a2a counts what it received from each rank and its result_nnz
 * their total. Refused counts (SC_ERR_INVALID), a receive over the tensor's size
 * (SC_ERR_LIMIT) and malformed counts from a peer (SC_ERR_PROTOCOL) fail it, with
 * job->error naming the ranks, alike on every node. A buffer the transport cannot reach
 * (a GPU's) goes through host staging from h.
 */
sc_status_t scd_alltoall_run(scd_job_t *job, const scd_device_ops_t *dev, scd_transport_t *t,
			     int node, int P, int L, void *buf, const scd_a2a_hooks_t *h);

#endif
