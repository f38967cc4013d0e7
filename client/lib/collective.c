/*
 * collective.c: a trainer's collectives: the request sent (collective_start: the operation
 * entered in the table and the tensor marked busy under the client's lock, then sent in the
 * lock's order), and the public calls, asynchronous and blocking, of allreduce (dense and
 * COO), broadcast, allgather, alltoall and reduce-scatter. The request's arguments are the
 * daemon's to check (ctl/collective.c), so that one refused on one rank fails its step on
 * every rank alike. Waiting and collecting are client.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- allreduce ----------------------------------------------------------------------- */

/* The trainers an alltoall of t exchanges with: the job's, or its process set's. */
static int a2a_peers(const sc_client_t *c, const sc_tensor_t *t)
{
	return t->pset ? sc_process_set_size(c, t->pset) : c->size;
}

/* The collective q's body names, for error texts. */
static const char *body_kind(const Sparsecomm__Collective *q)
{
	switch (q->body_case) {
	case SPARSECOMM__COLLECTIVE__BODY_BROADCAST:
		return "broadcast";
	case SPARSECOMM__COLLECTIVE__BODY_ALLGATHER:
		return "allgather";
	case SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER:
		return "reducescatter";
	case SPARSECOMM__COLLECTIVE__BODY_ALLTOALL:
		return "alltoall";
	default:
		return q->allreduce && q->allreduce->op == SC_OP_ADASUM ? "adasum"
									: "allreduce";
	}
}

/*
 * Starts the operation that q's body names on t, after the checks that need the client
 * (q's tensor id and handle are set here). An alltoall's body takes send_counts, one per
 * trainer of the job, as they are: the daemons check them (summing to at most the
 * tensor's size) and fail the operation on every rank.
 */
static sc_status_t collective_run(sc_client_t *c, sc_tensor_t *t, Sparsecomm__Collective *q,
				  const size_t *send_counts, sc_handle_t *handle_p)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	int a2a = q->body_case == SPARSECOMM__COLLECTIVE__BODY_ALLTOALL;
	struct scl_frame *f;
	struct scl_op *o, **slot;
	sc_handle_t h;
	sc_status_t st;
	const char *kind = body_kind(q);

	if (!c || !t || !handle_p)
		return scl_error(SC_ERR_INVALID, "%s: NULL client, tensor or handle_p", kind);
	if (t->client != c || !t->ready)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: tensor '%s' is not registered with "
				 "this client",
				 c->rank, t->name);
	if ((st = scl_forked_refusal(c, kind)) != SC_OK)
		return st;
	/* the mark of sc_group_add is taken by this operation, whether it starts or not */
	uint64_t dims[SC_MAX_DIMS];
	int shaped = q->body_case == SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE ||
		     q->body_case == SPARSECOMM__COLLECTIVE__BODY_BROADCAST ||
		     q->body_case == SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER;
	pthread_mutex_lock(&c->mu);
	q->group = t->group;
	q->group_size = t->group_size;
	t->group = 0;
	t->group_size = 0;
	if (shaped && t->ndim) {
		memcpy(dims, t->dims, sizeof(*dims) * (size_t)t->ndim);
		q->shape = dims;
		q->n_shape = (size_t)t->ndim;
	}
	pthread_mutex_unlock(&c->mu);
	if (a2a && !send_counts)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: alltoall of tensor '%s': NULL send_counts", c->rank,
				 t->name);
	/* the arguments go to the daemon as they are, whatever they hold (a root that is
	 * no rank of the job or of the tensor's process set, rows that do not divide the
	 * tensor, an allgather's count over it, an unknown reduction, COO input without a COO
	 * area or with more entries than it holds): it refuses them, naming this rank and
	 * the tensor, and fails the step on every rank at once, where a refusal here alone
	 * would leave the others waiting for this one until their stall timeout, and this
	 * one's next step paired with the others' step that failed */
	h = scl_client_next_id(c);
	q->tensor_id = t->tensor_id;
	q->handle = h;
	uint64_t *counts = NULL;
	int peers = a2a_peers(c, t); /* one count each */
	if (a2a && peers > 0 && !(counts = malloc(sizeof(*counts) * (size_t)peers)))
		return scl_error(SC_ERR_NOMEM,
				 "rank %d: alltoall of tensor '%s': out of memory", c->rank,
				 t->name);
	for (int r = 0; counts && r < peers; r++)
		counts[r] = send_counts[r];
	if (a2a) {
		q->alltoall->send_counts = counts;
		q->alltoall->n_send_counts = counts ? (size_t)peers : 0;
	}
	msg.seq = h;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE;
	msg.collective = q;
	o = calloc(1, sizeof(*o));
	f = scl_frame_pack(&msg);
	free(counts);
	if (!o || !f) {
		free(o);
		free(f);
		return scl_error(SC_ERR_NOMEM, "rank %d: %s of tensor '%s': out of memory",
				 c->rank, kind, t->name);
	}
	o->handle = h;
	o->tensor = t;
	o->kind = kind;
	o->status = SC_IN_PROGRESS;
	pthread_mutex_lock(&c->mu);
	if (scl_client_check(c) != SC_OK) {
		st = scl_error(c->dead, "rank %d: %s of tensor '%s': %s", c->rank, kind,
			       t->name, c->dead_msg);
		goto err_unlock;
	}
	if (t->busy && !scl_op_settle(c, t)) {
		st = scl_error(SC_ERR_BUSY,
			       "rank %d: tensor '%s' already has an operation in "
			       "flight (handle %llu)",
			       c->rank, t->name, (unsigned long long)t->busy->handle);
		goto err_unlock;
	}
	/* the daemon's stream reads the buffer after the writes queued on the tensor's
	 * stream so far (the driver call only queues the record) */
	if (t->cuda) {
		char what[SCL_NAME_MAX + 64];

		snprintf(what, sizeof(what), "rank %d: %s of tensor '%s'", c->rank, kind,
			 t->name);
		st = scl_cuda_record_ready(t->cuda, t->stream, what);
		if (st != SC_OK)
			goto err_unlock;
	}
	/* a sparse result's count, an allgather's, a reduce-scatter's or an alltoall's */
	if (q->body_case != SPARSECOMM__COLLECTIVE__BODY_BROADCAST &&
	    (q->body_case != SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE || q->allreduce->coo))
		scl_tensor_result_reset(t);
	if (a2a && t->a2a_cap != peers) {
		uint64_t *a =
		    realloc(t->a2a_recv, sizeof(*a) * (size_t)(peers > 0 ? peers : 1));
		if (!a) {
			st = scl_error(SC_ERR_NOMEM,
				       "rank %d: alltoall of tensor '%s': out of memory",
				       c->rank, t->name);
			goto err_unlock;
		}
		t->a2a_recv = a;
		t->a2a_cap = peers;
	}
	t->a2a_n = 0;
	slot = &c->ops[h % SCL_OP_BUCKETS];
	o->next = *slot;
	*slot = o;
	t->busy = o;
	scl_client_enqueue_op(c, f); /* releases c->mu */
	*handle_p = h;
	return SC_OK;

err_unlock:
	pthread_mutex_unlock(&c->mu);
	free(o);
	free(f);
	return st;
}

/* collective_run as a call on c (finalize.c): refused once sc_finalize has
 * begun, before t is read. */
static sc_status_t collective_start(sc_client_t *c, sc_tensor_t *t, Sparsecomm__Collective *q,
				    const size_t *send_counts, sc_handle_t *handle_p)
{
	sc_status_t st = scl_enter_call(c, "allreduce");

	return st != SC_OK ? st : scl_left(c, collective_run(c, t, q, send_counts, handle_p));
}

/* Starts an allreduce by op of t's buffer (coo 0), or of its COO area's nnz entries with
 * a dense (coo 1) or sparse (coo 2) result. */
static sc_status_t allreduce_start(sc_client_t *c, sc_tensor_t *t, sc_reduce_op_t op, int coo,
				   size_t nnz, sc_handle_t *handle_p)
{
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	Sparsecomm__Collective q = SPARSECOMM__COLLECTIVE__INIT;

	ar.op = (uint32_t)op;
	ar.coo = coo != 0;
	ar.nnz = coo ? nnz : 0;
	ar.sparse_result = coo == 2;
	q.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE;
	q.allreduce = &ar;
	return collective_start(c, t, &q, NULL, handle_p);
}

SC_API sc_status_t sc_allreduce_async(sc_client_t *client, sc_tensor_t *tensor,
				      sc_reduce_op_t op, sc_handle_t *handle_p)
{
	return allreduce_start(client, tensor, op, 0, 0, handle_p);
}

SC_API sc_status_t sc_allreduce_coo_async(sc_client_t *client, sc_tensor_t *tensor, size_t nnz,
					  sc_reduce_op_t op, sc_handle_t *handle_p)
{
	return allreduce_start(client, tensor, op, 1, nnz, handle_p);
}

SC_API sc_status_t sc_allreduce_coo_sparse_async(sc_client_t *client, sc_tensor_t *tensor,
						 size_t nnz, sc_reduce_op_t op,
						 sc_handle_t *handle_p)
{
	return allreduce_start(client, tensor, op, 2, nnz, handle_p);
}

SC_API sc_status_t sc_allreduce(sc_client_t *client, sc_tensor_t *tensor, sc_reduce_op_t op,
				int timeout_ms)
{
	sc_handle_t h;
	sc_status_t st = scl_enter_call(client, "allreduce");

	if (st != SC_OK)
		return st;
	st = sc_allreduce_async(client, tensor, op, &h);
	if (st == SC_OK)
		st = scl_wait_owned(client, h, timeout_ms);
	return scl_left(client, st);
}

SC_API sc_status_t sc_broadcast_async(sc_client_t *client, sc_tensor_t *tensor, int root_rank,
				      sc_handle_t *handle_p)
{
	Sparsecomm__Broadcast b = SPARSECOMM__BROADCAST__INIT;
	Sparsecomm__Collective q = SPARSECOMM__COLLECTIVE__INIT;

	b.root_rank = (uint32_t)root_rank; /* a negative one: over every rank, refused */
	q.body_case = SPARSECOMM__COLLECTIVE__BODY_BROADCAST;
	q.broadcast = &b;
	return collective_start(client, tensor, &q, NULL, handle_p);
}

SC_API sc_status_t sc_allgather_async(sc_client_t *client, sc_tensor_t *tensor, size_t count,
				      sc_handle_t *handle_p)
{
	Sparsecomm__Allgather g = SPARSECOMM__ALLGATHER__INIT;
	Sparsecomm__Collective q = SPARSECOMM__COLLECTIVE__INIT;

	g.count = count;
	q.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLGATHER;
	q.allgather = &g;
	return collective_start(client, tensor, &q, NULL, handle_p);
}

SC_API sc_status_t sc_alltoall_async(sc_client_t *client, sc_tensor_t *tensor,
				     const size_t *send_counts, sc_handle_t *handle_p)
{
	Sparsecomm__Alltoall a = SPARSECOMM__ALLTOALL__INIT;
	Sparsecomm__Collective q = SPARSECOMM__COLLECTIVE__INIT;

	q.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLTOALL;
	q.alltoall = &a;
	return collective_start(client, tensor, &q, send_counts, handle_p);
}

SC_API sc_status_t sc_reducescatter_async(sc_client_t *client, sc_tensor_t *tensor,
					  sc_reduce_op_t op, size_t row_elems,
					  sc_handle_t *handle_p)
{
	Sparsecomm__Reducescatter rs = SPARSECOMM__REDUCESCATTER__INIT;
	Sparsecomm__Collective q = SPARSECOMM__COLLECTIVE__INIT;

	rs.op = (uint32_t)op;
	rs.row_elems = row_elems;
	q.body_case = SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER;
	q.reducescatter = &rs;
	return collective_start(client, tensor, &q, NULL, handle_p);
}

SC_API sc_status_t sc_broadcast(sc_client_t *client, sc_tensor_t *tensor, int root_rank,
				int timeout_ms)
{
	sc_handle_t h;
	sc_status_t st = scl_enter_call(client, "broadcast");

	if (st != SC_OK)
		return st;
	st = sc_broadcast_async(client, tensor, root_rank, &h);
	if (st == SC_OK)
		st = scl_wait_owned(client, h, timeout_ms);
	return scl_left(client, st);
}
