/*
 * coll_adasum.c: the Adasum reduction (sc_allreduce_async with SC_OP_ADASUM; Horovod's
 * op=hvd.Adasum). The trainers' tensors are the leaves of one binary tree in trainer rank
 * order (in a process set, the set's rank order: its members' global ranks ascending,
 * job.h): neighbours are combined by the Adasum operator (device/reduce.h), then pairs of
 * those results, and so on; at a level with an odd count the last carries over unpaired,
 * so any number of trainers is accepted, and for a power of two the tree is Horovod's.
 *
 * Communication: an allgather of every trainer's tensor among the nodes (each node sends
 * its trainers' blocks, in local rank order, to every other node: consecutive set ranks,
 * scd_job_first_trainer, as many as the set holds on the node), then every node
 * computes the whole tree on the same bytes in the same order, so every rank gets the same
 * bits. That is P - 1 messages and (T - L) x the tensor's bytes received a node (T
 * trainers, L a node), against the pairwise exchange's log2(T) rounds of the tensor's
 * bytes: simple and exact, the price of sending every leaf. The tree runs on host memory
 * (the buffer itself on the cpu device, the exchange's host staging for a GPU's), its dot
 * products and norms in double, per tensor: an Adasum tensor runs in a buffer of its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coll/coll.h"
#include "coll/ctx.h"
#include "device/reduce.h"
#include "util/clock.h"

void scd_adasum_tree(sc_dtype_t dtype, void *blocks, int n, uint64_t numel)
{
	size_t bytes = numel * sc_dtype_size(dtype);
	for (int stride = 1; stride < n; stride *= 2)
		for (int i = 0; i + stride < n; i += 2 * stride)
			scd_adasum_pair_typed(dtype, (char *)blocks + (size_t)i * bytes,
					      (char *)blocks + (size_t)(i + stride) * bytes,
					      numel);
}

/* The buffer: one block of the tensor per trainer of the job, in trainer rank order. */
static uint64_t adasum_buffer_bytes(const scd_job_t *job)
{
	return (uint64_t)job->average_divisor * job->items[0].numel * sc_dtype_size(job->dtype);
}

/* The first block of view rank q's trainers, and their count. */
static int adasum_node(const scd_coll_ctx_t *x, const scd_job_t *job, int q, int *n_p)
{
	int first = scd_job_first_trainer(job, q, x->world_size, x->local_size);
	*n_p = scd_job_first_trainer(job, q + 1, x->world_size, x->local_size) - first;
	return first;
}

/* The node's trainers' tensors into their blocks (their set ranks); a trainer gone from
 * the job leaves a zero block, plain addition in the tree. */
static sc_status_t adasum_gather(scd_coll_ctx_t *x, scd_job_t *job)
{
	scd_job_item_t *it = &job->items[0];
	size_t bytes = it->numel * sc_dtype_size(job->dtype);
	int n_mine, first = adasum_node(x, job, x->rank, &n_mine);
	char *mine = x->buf + (size_t)first * bytes;
	/* NaN and infinities are counted (and with nonfinite = error fail the step on every
	 * rank) as an allreduce's are: float32 in host memory */
	int check_nf = x->nonfinite != SCD_NONFINITE_PASS && job->dtype == SC_FLOAT32 &&
		       scd_device_host_memory(x->dev);
	x->dev->clear(mine, (size_t)n_mine * bytes);
	it->nonfinite = 0;
	for (int s = 0; s < it->n_src; s++) {
		const scd_job_src_t *src = &it->src[s];
		int sr = scd_job_set_rank(job, x->rank, src->local_rank, x->local_size);
		if (sr < 0)
			continue; /* not a trainer of this node's in the set (ctl sets it) */
		uint64_t nf = check_nf ? scd_count_f32_nonfinite(src->dense, it->numel) : 0;
		it->nonfinite += nf;
		if (nf && x->nonfinite == SCD_NONFINITE_ERROR &&
		    x->fault->kind == SCD_FAULT_NONE)
			*x->fault = (scd_fault_t){SCD_FAULT_NONFINITE, 0, src->local_rank, nf};
		char *dst = x->buf + (size_t)sr * bytes;
		if (!scd_job_stage_local(x->pe, src))
			scd_job_stage_copy_in(x->pe, it, src, dst, src->dense, bytes);
		else
			x->dev->copy(dst, src->dense, bytes);
	}
	return SC_OK;
}

/* Every node's blocks (of bytes each) to every node (into host, the buffer or its
 * staging). */
static sc_status_t adasum_exchange(scd_coll_ctx_t *x, scd_job_t *job, char *host, size_t bytes)
{
	int P = x->world_size, me = x->rank, ns = 0, nr = 0, n_mine, n;
	size_t mine = (size_t)adasum_node(x, job, me, &n_mine) * bytes;
	scd_xfer_t *xf = malloc(sizeof(*xf) * 2 * (size_t)P);
	if (!xf)
		return SC_ERR_NOMEM;
	for (int r = 0; r < P; r++)
		if (r != me) {
			size_t at = (size_t)adasum_node(x, job, r, &n) * bytes;
			xf[ns++] = (scd_xfer_t){
			    .peer = r, .buf = host + mine, .bytes = (size_t)n_mine * bytes};
			xf[P + nr++] = (scd_xfer_t){
			    .peer = r, .buf = host + at, .bytes = (size_t)n * bytes};
		}
	sc_status_t st = scd_transport_exchange(x->mesh, xf, ns, xf + P, nr, job->timeout_ms);
	free(xf);
	return st;
}

static sc_status_t adasum_run(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_device_ops_t *dev = x->dev;
	sc_dtype_t dt = (sc_dtype_t)job->dtype;
	uint64_t numel = job->items[0].numel;
	size_t bytes = numel * sc_dtype_size(dt);
	int T = scd_job_trainers(job, x->world_size, x->local_size), n_mine;
	size_t mine = (size_t)adasum_node(x, job, x->rank, &n_mine) * bytes;
	double t0 = scd_now_s();
	char *host = x->buf;
	sc_status_t st = SC_OK;
	if (!scd_device_host_memory(dev)) {
		if (!(host = scd_job_stage_host(x->stage, dev, (size_t)T * bytes)))
			st = SC_ERR_NOMEM;
		else
			dev->to_host(host + mine, x->buf + mine, (size_t)n_mine * bytes);
	}
	if (st == SC_OK && (st = dev->sync()) == SC_OK)
		st = adasum_exchange(x, job, host, bytes);
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error), "adasum of tensor '%s' (%s): %s",
			 scd_coll_item_name(&job->items[0]), sc_dtype_name(dt),
			 st == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
		return st;
	}
	scd_adasum_tree(dt, host, T, numel);
	if (host != x->buf)
		dev->from_host(x->buf, host, bytes);
	return SC_OK;
}

/* P - 1 messages' latency and the other nodes' blocks received. */
static void adasum_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	int P = x->world_size, n_mine;
	adasum_node(x, job, x->rank, &n_mine);
	double others = (double)(scd_job_trainers(job, P, x->local_size) - n_mine) *
			(double)job->items[0].numel * (double)sc_dtype_size(job->dtype);
	scd_coll_dense_report(job,
			      P > 1 ? (P - 1) * x->alpha_s + others * x->beta_s_per_byte : 0);
}

/* The tree's result (the first block) to every local trainer. */
static sc_status_t adasum_deliver(scd_coll_ctx_t *x, scd_job_t *job)
{
	return scd_job_stage_scatter_out(x->dev, &job->items[0], job->dtype, x->buf, 1,
					 job->error, sizeof(job->error));
}

static uint32_t adasum_pack(const scd_coll_t *c)
{
	(void)c;
	return SCD_OP_ADASUM;
}

static int adasum_unpack(uint32_t word, scd_coll_t *c)
{
	(void)c;
	return word == SCD_OP_ADASUM;
}

static void adasum_describe(const scd_coll_t *c, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "adasum");
}

/* Floating point only (Horovod's rule: the operator divides), dense. */
static sc_status_t adasum_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	if (rq->dtype != SC_FLOAT32 && rq->dtype != SC_FLOAT64) {
		snprintf(
		    err, len,
		    "adasum of tensor '%s': %s is not a floating-point dtype (adasum takes "
		    "float32 and float64)",
		    rq->tensor, sc_dtype_name((sc_dtype_t)rq->dtype));
		return SC_ERR_UNSUPPORTED;
	}
	return scd_coll_dense_check(rq, err, len);
}

const scd_coll_desc_t scd_coll_adasum = {
    .name = "adasum",
    .psets = 1,
    .pack = adasum_pack,
    .unpack = adasum_unpack,
    .describe = adasum_describe,
    .check = adasum_check,
    .buffer_bytes = adasum_buffer_bytes,
    .gather = adasum_gather,
    .run = adasum_run,
    .deliver = adasum_deliver,
    .predict = adasum_predict,
};
