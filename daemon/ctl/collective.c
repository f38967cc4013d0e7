/*
 * collective.c: a trainer's Collective request decoded and checked (collective.h). The
 * one place that reads a request's body: each collective's arguments are checked against
 * the tensor's registration here, before ctl.c's checks of the tensor's state.
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
				      const Sparsecomm__Collective *c, scd_coll_req_t *q,
				      char *err, size_t len)
{
	const scd_ntensor_t *nt = r->nt;
	const Sparsecomm__Reducescatter *rs = c->reducescatter;
	char opname[64];

	memset(q, 0, sizeof(*q));
	switch (c->body_case) {
	case SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE:
		q->opw = c->allreduce->op;
		q->coo = c->allreduce->coo;
		q->sparse_result = q->coo && c->allreduce->sparse_result;
		q->nnz = c->allreduce->nnz;
		if (q->opw > SC_OP_PRODUCT) {
			snprintf(err, len, "rank %d: tensor '%s': unknown reduction %u", rank,
				 nt->name, q->opw);
			return SC_ERR_INVALID;
		}
		break;
	case SPARSECOMM__COLLECTIVE__BODY_BROADCAST:
		q->opw = SCD_OP_BROADCAST | c->broadcast->root_rank;
		if (c->broadcast->root_rank >= (uint32_t)trainers) {
			snprintf(
			    err, len,
			    "rank %d: broadcast of tensor '%s': root rank %u is not a rank "
			    "of the job (0 to %d)",
			    rank, nt->name, c->broadcast->root_rank, trainers - 1);
			return SC_ERR_INVALID;
		}
		break;
	case SPARSECOMM__COLLECTIVE__BODY_ALLGATHER:
		q->opw = SCD_OP_ALLGATHER;
		q->nnz = c->allgather->count;
		if (q->nnz > nt->numel) {
			snprintf(err, len,
				 "rank %d: allgather of tensor '%s': %llu elements given, over "
				 "its %llu",
				 rank, nt->name, (unsigned long long)q->nnz,
				 (unsigned long long)nt->numel);
			return SC_ERR_INVALID;
		}
		break;
	case SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER:
		if (!rs->row_elems || rs->row_elems >= SCD_RS_ROW_MAX ||
		    nt->numel % rs->row_elems || rs->op > SC_OP_PRODUCT) {
			snprintf(err, len,
				 "rank %d: reducescatter of tensor '%s': rows of %llu elements "
				 "do not divide its %llu (1 to %u per row), or reduction %u is "
				 "unknown",
				 rank, nt->name, (unsigned long long)rs->row_elems,
				 (unsigned long long)nt->numel, SCD_RS_ROW_MAX - 1, rs->op);
			return SC_ERR_INVALID;
		}
		q->opw = SCD_OP_REDUCESCATTER | (uint32_t)rs->row_elems << 3 | rs->op;
		break;
	case SPARSECOMM__COLLECTIVE__BODY_ALLTOALL:
		q->opw = SCD_OP_ALLTOALL;
		q->a2a = c->alltoall;
		if (nt->opts.sparsifier != SC_SPARSIFY_NONE || nt->opts.coo_capacity) {
			snprintf(err, len,
				 "rank %d: alltoall of tensor '%s': a tensor with a sparsifier "
				 "or COO input takes sum and average only",
				 rank, nt->name);
			return SC_ERR_UNSUPPORTED;
		}
		if (a2a_counts(r, trainers) != SC_OK) {
			snprintf(
			    err, len,
			    "rank %d: alltoall of tensor '%s': out of memory for %d counts",
			    rank, nt->name, trainers);
			return SC_ERR_NOMEM;
		}
		break;
	default:
		snprintf(err, len,
			 "rank %d: tensor '%s': the request names no collective (a Collective "
			 "message without a body; control protocol version %d)",
			 rank, nt->name, SC_PROTOCOL_VERSION);
		return SC_ERR_PROTOCOL;
	}
	if (q->opw > SC_OP_AVERAGE && (q->coo || nt->opts.sparsifier != SC_SPARSIFY_NONE)) {
		/* a residual and a list's implicit zeros mean a sum */
		snprintf(err, len,
			 "rank %d: tensor '%s': %s is a dense operation: a tensor with a "
			 "sparsifier or COO input takes sum and average only",
			 rank, nt->name, scd_op_describe(q->opw, opname, sizeof(opname)));
		return SC_ERR_UNSUPPORTED;
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
