/*
 * collective.c: a trainer's Collective request decoded and checked (collective.h). The
 * one place that reads a request's body: each collective's arguments are checked against
 * the tensor's registration by its descriptor (coll/coll.h), before ctl.c's checks of the
 * tensor's state.
 */
#include "ctl/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room in r for an alltoall's count per trainer. */
static sc_status_t a2a_counts(scd_reg_t *r, int trainers)
{
	if (r->a2a_cap >= (uint32_t)trainers)
		return SC_OK;
	uint64_t *a = realloc(r->a2a, sizeof(*a) * (size_t)trainers);
	if (!a)
		return SC_ERR_NOMEM;
	r->a2a = a;
	r->a2a_cap = (uint32_t)trainers;
	return SC_OK;
}

sc_status_t scd_ctl_collective_decode(scd_reg_t *r, int rank, int trainers,
				      const Sparsecomm__Collective *c, scd_ctl_req_t *q,
				      char *err, size_t len)
{
	const scd_ntensor_t *nt = r->nt;
	scd_coll_req_t *rq = &q->rq;
	char why[448];

	memset(q, 0, sizeof(*q));
	*rq = (scd_coll_req_t){.tensor = nt->name,
			       .numel = nt->numel,
			       .sparsifier = nt->opts.sparsifier != SC_SPARSIFY_NONE,
			       .coo_area = nt->opts.coo_capacity > 0,
			       .trainers = (uint32_t)trainers,
			       .dtype = nt->dtype};
	switch (c->body_case) {
	case SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE:
		rq->coll = (scd_coll_t){.kind = SCD_COLL_ALLREDUCE,
					.op = (sc_reduce_op_t)c->allreduce->op};
		if (c->allreduce->op == SC_OP_ADASUM) /* a collective of its own */
			rq->coll = (scd_coll_t){.kind = SCD_COLL_ADASUM};
		rq->coo = c->allreduce->coo;
		q->sparse_result = rq->coo && c->allreduce->sparse_result;
		q->nnz = c->allreduce->nnz;
		break;
	case SPARSECOMM__COLLECTIVE__BODY_BROADCAST:
		rq->coll =
		    (scd_coll_t){.kind = SCD_COLL_BROADCAST, .root = c->broadcast->root_rank};
		break;
	case SPARSECOMM__COLLECTIVE__BODY_ALLGATHER:
		rq->coll = (scd_coll_t){.kind = SCD_COLL_ALLGATHER};
		rq->count = q->nnz = c->allgather->count;
		break;
	case SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER: {
		uint64_t row = c->reducescatter->row_elems;
		rq->coll = (scd_coll_t){.kind = SCD_COLL_REDUCESCATTER,
					.op = (sc_reduce_op_t)c->reducescatter->op,
					.row = row < SCD_RS_ROW_MAX ? (uint32_t)row : 0};
		rq->count = row;
		break;
	}
	case SPARSECOMM__COLLECTIVE__BODY_ALLTOALL:
		rq->coll = (scd_coll_t){.kind = SCD_COLL_ALLTOALL};
		q->a2a = c->alltoall;
		break;
	default:
		snprintf(err, len,
			 "rank %d: tensor '%s': the request names no collective (a Collective "
			 "message without a body; control protocol version %d)",
			 rank, nt->name, SC_PROTOCOL_VERSION);
		return SC_ERR_PROTOCOL;
	}
	if (c->n_shape && c->body_case != SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE &&
	    c->body_case != SPARSECOMM__COLLECTIVE__BODY_BROADCAST &&
	    c->body_case != SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER) {
		snprintf(err, len,
			 "rank %d: tensor '%s': a shape was given with a collective other than "
			 "allreduce, broadcast and reduce-scatter",
			 rank, nt->name);
		return SC_ERR_INVALID;
	}
	if (scd_shape_make(&q->shape, c->shape, c->n_shape, nt->numel, why, sizeof(why))) {
		snprintf(err, len, "rank %d: tensor '%s': %s", rank, nt->name, why);
		return SC_ERR_INVALID;
	}
	sc_status_t st = scd_coll_desc(rq->coll.kind)->check(rq, why, sizeof(why));
	if (st != SC_OK) {
		snprintf(err, len, "rank %d: %s", rank, why);
		return st;
	}
	if (q->a2a && a2a_counts(r, trainers) != SC_OK) {
		snprintf(err, len,
			 "rank %d: alltoall of tensor '%s': out of memory for %d counts", rank,
			 nt->name, trainers);
		return SC_ERR_NOMEM;
	}
	return SC_OK;
}

void scd_ctl_a2a_take(scd_reg_t *r, const Sparsecomm__Alltoall *a, int trainers, uint64_t numel)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < a->n_send_counts; i++)
		sum =
		    a->send_counts[i] > UINT64_MAX - sum ? UINT64_MAX : sum + a->send_counts[i];
	r->a2a_bad = a->n_send_counts != (size_t)trainers || sum > numel;
	r->a2a_n = (uint32_t)trainers;
	r->a2a_given = a->n_send_counts;
	r->a2a_sum = sum;
	for (int i = 0; i < trainers; i++)
		r->a2a[i] = r->a2a_bad ? 0 : a->send_counts[i];
}
