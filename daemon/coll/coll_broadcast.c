/*
 * coll_broadcast.c: the broadcast (sc_broadcast_async): the root trainer's values to every
 * trainer. The root's node sends its buffer once to every other node, which receives it
 * (P - 1 copies leave the root, half the bytes of the ring's sum); staged through host
 * memory where the device's is not, as the dense ring. Broadcasts from one root fuse.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coll/coll.h"
#include "coll/ctx.h"
#include "util/clock.h"

/* A broadcast's local step: on the root's node, the root trainer's buffer (root_local,
 * its local rank) becomes the node's; elsewhere the buffer only receives. Returns 0, or
 * -1 when the root trainer gave no values (it has joined, or its registration went away):
 * the job must then fail on every rank, not deliver zeros as the root's values. */
static int local_broadcast(const scd_device_ops_t *dev, scd_stage_t *pe, scd_job_item_t *it,
			   uint32_t dtype, void *dst, int root_local)
{
	if (root_local < 0)
		return 0;
	for (int s = 0; s < it->n_src; s++)
		if (it->src[s].local_rank == root_local) {
			size_t bytes = it->numel * sc_dtype_size(dtype);
			if (!scd_job_stage_local(pe, &it->src[s]))
				scd_job_stage_copy_in(pe, it, &it->src[s], dst,
						      it->src[s].dense, bytes);
			else if (dst != it->src[s].dense)
				dev->copy(dst, it->src[s].dense, bytes);
			return 0;
		}
	return -1;
}

/* The root is a global trainer rank: its node is root / local_size (in a process set's
 * job, x->rank is this node's index among the set's nodes). A root that gave no values
 * is this node's input fault (SCD_FAULT_NO_ROOT), which the input check round turns into
 * the same error on every rank before any byte goes out. */
static sc_status_t broadcast_gather(scd_coll_ctx_t *x, scd_job_t *job)
{
	int L = x->local_size, root = (int)job->coll.root;
	int root_local = root / L == scd_job_node(job, x->rank) ? root % L : -1;
	size_t esz = sc_dtype_size(job->dtype);
	for (int i = 0; i < job->n_items; i++)
		if (local_broadcast(x->dev, x->pe, &job->items[i], job->dtype,
				    x->buf + job->items[i].offset * esz, root_local) &&
		    x->fault->kind == SCD_FAULT_NONE)
			*x->fault = (scd_fault_t){.kind = SCD_FAULT_NO_ROOT,
						  .item = (uint32_t)i,
						  .local_rank = root_local};
	return SC_OK;
}

static sc_status_t broadcast_run(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_device_ops_t *dev = x->dev;
	void *buf = x->buf;
	int P = x->world_size, me = x->rank;
	int node = (int)(job->coll.root / (uint32_t)x->local_size);
	int root = scd_job_view_rank(job, node); /* its place among the set's nodes */
	size_t nbytes = job->total_numel * sc_dtype_size(job->dtype);
	if (root < 0) { /* every member finds the same: none sends or waits */
		snprintf(job->error, sizeof(job->error),
			 "broadcast of tensor '%s' in process set %u: root rank %u is on node "
			 "%d, which has no trainer in the set",
			 scd_coll_item_name(&job->items[0]), job->pset, job->coll.root, node);
		return SC_ERR_INVALID;
	}
	double t0 = scd_now_s();
	void *host = buf;
	scd_xfer_t *xf = malloc(sizeof(*xf) * (size_t)P);
	if (!xf || (!scd_device_host_memory(dev) &&
		    !(host = scd_job_stage_host(x->stage, dev, nbytes)))) {
		free(xf);
		snprintf(job->error, sizeof(job->error),
			 "broadcast (%s): cannot stage %zu bytes through host memory",
			 sc_dtype_name((sc_dtype_t)job->dtype), nbytes);
		return SC_ERR_NOMEM;
	}
	int n = 0;
	sc_status_t st;
	if (me == root) {
		if (host != buf)
			dev->to_host(host, buf, nbytes);
		for (int r = 0; r < P; r++)
			if (r != me)
				xf[n++] = (scd_xfer_t){.peer = r, .buf = host, .bytes = nbytes};
		st = scd_transport_exchange(x->mesh, xf, n, NULL, 0, job->timeout_ms);
	} else {
		xf[0] = (scd_xfer_t){.peer = root, .buf = host, .bytes = nbytes};
		st = scd_transport_exchange(x->mesh, NULL, 0, xf, 1, job->timeout_ms);
		if (st == SC_OK && host != buf)
			dev->from_host(buf, host, nbytes);
	}
	free(xf);
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "broadcast from node %d (%s): %s",
			 node, sc_dtype_name((sc_dtype_t)job->dtype), scd_transport_error());
	return st;
}

/* One round of the whole buffer per peer from the root. */
static void broadcast_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	int P = x->world_size;
	double nbytes = (double)(job->total_numel * sc_dtype_size(job->dtype));
	scd_coll_dense_report(job,
			      P > 1 ? x->alpha_s + (P - 1) * nbytes * x->beta_s_per_byte : 0);
}

/* Every local trainer gets the root's values (no item averages). */
static sc_status_t broadcast_deliver(scd_coll_ctx_t *x, scd_job_t *job)
{
	size_t esz = sc_dtype_size(job->dtype);
	for (int i = 0; i < job->n_items; i++) {
		sc_status_t st = scd_job_stage_scatter_out(
		    x->dev, &job->items[i], job->dtype, x->buf + job->items[i].offset * esz,
		    job->average_divisor, job->error, sizeof(job->error));
		if (st != SC_OK)
			return st;
	}
	return SC_OK;
}

static uint32_t broadcast_pack(const scd_coll_t *c)
{
	return SCD_OP_BROADCAST | c->root;
}

static int broadcast_unpack(uint32_t word, scd_coll_t *c)
{
	c->root = word & ~SCD_OP_BROADCAST;
	return (word & SCD_OP_BROADCAST) != 0;
}

static void broadcast_describe(const scd_coll_t *c, char *buf, size_t len)
{
	snprintf(buf, len, "broadcast from rank %u", c->root);
}

/* A root that is a rank of the job; the values go as they are (no sparsifier, no COO). */
static sc_status_t broadcast_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	if (rq->coll.root >= rq->trainers) {
		snprintf(
		    err, len,
		    "broadcast of tensor '%s': root rank %d is not a rank of the job (0 to "
		    "%u)",
		    rq->tensor, (int32_t)rq->coll.root, rq->trainers - 1);
		return SC_ERR_INVALID;
	}
	return scd_coll_dense_check(rq, err, len);
}

const scd_coll_desc_t scd_coll_broadcast = {
    .name = "broadcast",
    .psets = 1,
    .fuses = 1,
    .in_place = 1,
    .pack = broadcast_pack,
    .unpack = broadcast_unpack,
    .describe = broadcast_describe,
    .check = broadcast_check,
    .gather = broadcast_gather,
    .run = broadcast_run,
    .deliver = broadcast_deliver,
    .predict = broadcast_predict,
};
