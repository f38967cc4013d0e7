/*
 * collective.h: a trainer's Collective request (proto/sparsecomm.proto) as the node keeps
 * it. The request's body names exactly one collective with its own arguments; decoding it
 * gives the submission's collective (coll/coll.h), COO input, count and shape, which ctl.c
 * stores in the trainer's registration (scd_reg_t) and the node tensor.
 */
#ifndef SCD_CTL_COLLECTIVE_H
#define SCD_CTL_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "coll/coll.h"
#include "ctl/tensor.h"
#include "sparsecomm.pb-c.h"

/* A submission as the node keeps it (scd_reg_t, scd_ntensor_t): its collective, with what
 * the collective's check reads (coll/coll.h), and the request's own arguments: its COO
 * input, its count, an alltoall's send counts. */
typedef struct scd_ctl_req {
	scd_coll_req_t rq;
	int sparse_result;
	uint64_t nnz;			 /* the COO entries, or an allgather's count */
	scd_shape_t shape;		 /* an allreduce's or a broadcast's shape */
	const Sparsecomm__Alltoall *a2a; /* an alltoall's body, else NULL */
} scd_ctl_req_t;

/*
 * Decodes c's body, the one collective it names, into q and checks it against r's tensor
 * in a job of trainers trainers through the collective's descriptor (its check): SC_OK,
 * or the status with err naming the trainer (global rank), the tensor and what is wrong. A
 * Collective without a body names no collective: SC_ERR_PROTOCOL. An alltoall makes room in r
 * for its counts.
 */
sc_status_t scd_ctl_collective_decode(scd_reg_t *r, int rank, int trainers,
				      const Sparsecomm__Collective *c, scd_ctl_req_t *q,
				      char *err, size_t len);

/*
 * An alltoall's send counts, checked: one per trainer, summing to at most the tensor's
 * size. Counts that are not are kept as what the trainer gave (a2a_bad), and the engine's
 * count exchange fails the operation on every rank naming this one: the other trainers
 * have submitted, or will, and would otherwise wait for it until the stall timeout.
 */
void scd_ctl_a2a_take(scd_reg_t *r, const Sparsecomm__Alltoall *a, int trainers,
		      uint64_t numel);

#endif
