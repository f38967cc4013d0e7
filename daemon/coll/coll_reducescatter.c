/*
 * coll_reducescatter.c: the reduce-scatter (sc_reducescatter_async): the tensor is rows of
 * row elements, reduced over every trainer of the job, and trainer t (its rank in the job's
 * set, job.h) gets its share of the rows (the first rows % T trainers one row more), at
 * the start of its buffer, with their element count in its shm header. It runs in a
 * buffer of its own, holding the node's local reduction: node n's part is the rows of its
 * trainers, which are consecutive set ranks (scd_job_first_trainer), whatever part of
 * the node's trainers the set holds. Every node sends every other node its part of this
 * node's reduction and reduces the parts it receives into its own part (in node order,
 * through the device's reduction), so each node sends (P - 1) / P of the buffer with
 * whole nodes; an average divides the part afterwards.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coll/coll.h"
#include "coll/ctx.h"
#include "util/clock.h"

/* Trainer t's first row of a reduce-scatter of rows rows over T trainers (the first
 * rows % T trainers get one row more). */
static uint64_t rs_first_row(uint64_t rows, uint64_t T, uint64_t t)
{
	return t * (rows / T) + (t < rows % T ? t : rows % T);
}

/* The rows of view rank q's trainers: the first, and how many. */
static void rs_node(const scd_coll_ctx_t *x, const scd_job_t *job, int q, uint64_t rows,
		    uint64_t *first_p, uint64_t *n_p)
{
	int P = x->world_size, L = x->local_size;
	uint64_t T = (uint64_t)scd_job_trainers(job, P, L);
	*first_p = rs_first_row(rows, T, (uint64_t)scd_job_first_trainer(job, q, P, L));
	*n_p =
	    rs_first_row(rows, T, (uint64_t)scd_job_first_trainer(job, q + 1, P, L)) - *first_p;
}

/* The node's local reduction, as an allreduce's (coll_allreduce.c) by the job's op. */
static sc_status_t reducescatter_gather(scd_coll_ctx_t *x, scd_job_t *job)
{
	return scd_coll_allreduce.gather(x, job);
}

/* The k received parts (host memory, one after the other) reduced into this node's part
 * part (n elements at buf + at, in dev's memory; the host copy at host), in node order,
 * by the device: in host memory where the device's is, else in a part of its own. */
static sc_status_t rs_reduce_in(const scd_coll_ctx_t *x, const scd_job_t *job, char *host,
				const char *in, int k, uint64_t at, uint64_t n)
{
	const scd_device_ops_t *dev = x->dev;
	size_t bytes = n * sc_dtype_size(job->dtype);
	char *part = x->buf + at;
	if (scd_device_host_memory(dev)) {
		for (int j = 0; j < k; j++)
			dev->reduce_typed((sc_dtype_t)job->dtype, job->coll.op, part,
					  in + (size_t)j * bytes, n);
		return SC_OK;
	}
	char *tmp = k ? dev->alloc(bytes ? bytes : 1) : NULL;
	if (k && !tmp)
		return SC_ERR_NOMEM;
	dev->from_host(part, host + at, bytes);
	for (int j = 0; j < k; j++) {
		dev->from_host(tmp, in + (size_t)j * bytes, bytes);
		dev->reduce_typed((sc_dtype_t)job->dtype, job->coll.op, part, tmp, n);
	}
	sc_status_t st = dev->sync();
	if (tmp)
		dev->free(tmp);
	return st;
}

static sc_status_t reducescatter_run(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_job_item_t *it = &job->items[0];
	const scd_device_ops_t *dev = x->dev;
	void *buf = x->buf;
	int P = x->world_size, me = x->rank;
	uint64_t row = job->coll.row, rows = it->numel / row;
	size_t esz = sc_dtype_size(job->dtype), rb = row * esz;
	uint64_t mine0, mine;
	rs_node(x, job, me, rows, &mine0, &mine);
	double t0 = scd_now_s();
	void *host = buf;
	char *in = malloc((size_t)(P > 1 ? P - 1 : 1) * mine * rb + 1);
	scd_xfer_t *xf = malloc(sizeof(*xf) * 2 * (size_t)P);
	sc_status_t st = SC_OK;
	if (!in || !xf ||
	    (!scd_device_host_memory(dev) &&
	     !(host = scd_job_stage_host(x->stage, dev, rows * rb))))
		st = SC_ERR_NOMEM;
	int ns = 0, nr = 0;
	for (int r = 0; st == SC_OK && r < P; r++) {
		if (r == me)
			continue;
		uint64_t f, n;
		rs_node(x, job, r, rows, &f, &n);
		if (n)
			xf[ns++] = (scd_xfer_t){
			    .peer = r, .buf = (char *)host + f * rb, .bytes = n * rb};
		if (mine) {
			xf[P + nr] = (scd_xfer_t){
			    .peer = r, .buf = in + (size_t)nr * mine * rb, .bytes = mine * rb};
			nr++;
		}
	}
	if (st == SC_OK) {
		if (host != buf)
			dev->to_host(host, buf, rows * rb);
		st = scd_transport_exchange(x->mesh, xf, ns, xf + P, nr, job->timeout_ms);
	}
	if (st == SC_OK)
		st = rs_reduce_in(x, job, host, in, nr, mine0 * rb, mine * row);
	if (st == SC_OK && job->coll.op == SC_OP_AVERAGE)
		dev->average_typed((sc_dtype_t)job->dtype, (char *)buf + mine0 * rb, mine * row,
				   job->average_divisor);
	free(in);
	free(xf);
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "reducescatter (%s): %s",
			 sc_dtype_name((sc_dtype_t)job->dtype),
			 st == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
	return st;
}

/* One round: the rows of the other nodes leave this one. */
static void reducescatter_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	uint64_t row = job->coll.row, rows = job->items[0].numel / row, mine0, mine;
	rs_node(x, job, x->rank, rows, &mine0, &mine);
	double rb = (double)(row * sc_dtype_size(job->dtype));
	scd_coll_dense_report(job, x->world_size > 1 ? x->alpha_s + (double)(rows - mine) * rb *
									x->beta_s_per_byte
						     : 0);
}

/* Each local trainer's rows of the node's part (by its set rank), at the start of its
 * buffer, and their element count in its header. */
static sc_status_t reducescatter_deliver(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_job_item_t *it = &job->items[0];
	uint64_t T = (uint64_t)scd_job_trainers(job, x->world_size, x->local_size);
	uint64_t row = job->coll.row, rows = it->numel / row;
	size_t rb = row * sc_dtype_size(job->dtype);
	for (int s = 0; s < it->n_src; s++) {
		int sr = scd_job_set_rank(job, x->rank, it->src[s].local_rank, x->local_size);
		if (sr < 0)
			continue; /* not a trainer of the set's (ctl gives none such) */
		uint64_t t = (uint64_t)sr;
		uint64_t f = rs_first_row(rows, T, t), n = rs_first_row(rows, T, t + 1) - f;
		x->dev->copy(it->src[s].dense, x->buf + f * rb, n * rb);
		*it->src[s].result_nnz = n * row;
	}
	return SC_OK;
}

static void reducescatter_fill_src(scd_job_src_t *s, uint64_t given, uint64_t *result_nnz)
{
	(void)given;
	s->result_nnz = result_nnz;
}

static uint32_t reducescatter_pack(const scd_coll_t *c)
{
	return SCD_OP_REDUCESCATTER | c->row << 3 | (uint32_t)c->op;
}

static int reducescatter_unpack(uint32_t word, scd_coll_t *c)
{
	c->row = (word & ~SCD_OP_REDUCESCATTER) >> 3;
	c->op = (sc_reduce_op_t)(word & 7u);
	return (word & (SCD_OP_BROADCAST | SCD_OP_ALLGATHER | SCD_OP_REDUCESCATTER)) ==
	       SCD_OP_REDUCESCATTER;
}

static void reducescatter_describe(const scd_coll_t *c, char *buf, size_t len)
{
	snprintf(buf, len, "reducescatter (%s, rows of %u)", sc_reduce_op_name(c->op), c->row);
}

/* Rows (the request's count) that divide the tensor, a known reduction, dense input. */
static sc_status_t reducescatter_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	const scd_coll_t *c = &rq->coll;
	if (c->op == SC_OP_ADASUM) {
		snprintf(
		    err, len,
		    "reducescatter of tensor '%s': adasum is an allreduce's reduction only",
		    rq->tensor);
		return SC_ERR_INVALID;
	}
	if (rq->coo || !rq->count || rq->count >= SCD_RS_ROW_MAX || rq->numel % rq->count ||
	    c->op > SC_OP_PRODUCT) {
		snprintf(
		    err, len,
		    "reducescatter of tensor '%s': rows of %llu elements do not divide its "
		    "%llu (1 to %u per row), or reduction %u is unknown",
		    rq->tensor, (unsigned long long)rq->count, (unsigned long long)rq->numel,
		    SCD_RS_ROW_MAX - 1, (unsigned)c->op);
		return SC_ERR_INVALID;
	}
	return scd_coll_dense_check(rq, err, len);
}

const scd_coll_desc_t scd_coll_reducescatter = {
    .name = "reducescatter",
    .psets = 1,
    .pack = reducescatter_pack,
    .unpack = reducescatter_unpack,
    .describe = reducescatter_describe,
    .check = reducescatter_check,
    .fill_src = reducescatter_fill_src,
    .gather = reducescatter_gather,
    .run = reducescatter_run,
    .deliver = reducescatter_deliver,
    .predict = reducescatter_predict,
};
