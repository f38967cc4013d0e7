/*
 * coll_allgather.c: the allgather (sc_allgather_async): every trainer's first elements (its
 * count), in rank order, to every trainer, with the total in its shm header. It runs in a
 * buffer of its own: its result is larger than a trainer's input.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coll/coll.h"
#include "coll/ctx.h"
#include "util/clock.h"

/* The elements this node gives: its trainers'. */
static uint64_t ag_mine(const scd_job_t *job)
{
	uint64_t mine = 0;
	for (int s = 0; s < job->items[0].n_src; s++)
		mine += job->items[0].src[s].count;
	return mine;
}

/*
 * An allgather (a buffer of its own): the nodes first exchange how many elements each
 * gives (its trainers' counts, in local rank order), then every node sends its block to
 * every other, straight to its place in the buffer (node order, which is rank order; in a
 * process set's job, the order of its nodes, which ascend, and of its member trainers on
 * each: the set's rank order). A
 * total over the tensor's size fails on every rank alike, naming every rank's count.
 */
static sc_status_t allgather_run(scd_coll_ctx_t *cx, scd_job_t *job)
{
	const scd_job_item_t *it = &job->items[0];
	const scd_device_ops_t *dev = cx->dev;
	void *buf = cx->buf;
	int P = cx->world_size, me = cx->rank, L = cx->local_size;
	size_t esz = sc_dtype_size(job->dtype);
	uint64_t mine = 0, total = 0;
	for (int s = 0; s < it->n_src; s++)
		mine += it->src[s].count;
	uint64_t *counts = calloc((size_t)P, sizeof(*counts));
	scd_xfer_t *x = malloc(sizeof(*x) * 2 * (size_t)P);
	if (!counts || !x) {
		free(counts);
		free(x);
		snprintf(job->error, sizeof(job->error), "allgather: out of memory");
		return SC_ERR_NOMEM;
	}
	double t0 = scd_now_s();
	int ns = 0, nr = 0;
	counts[me] = mine;
	for (int r = 0; r < P; r++)
		if (r != me) {
			x[ns++] = (scd_xfer_t){.peer = r, .buf = &mine, .bytes = sizeof(mine)};
			x[P + nr++] = (scd_xfer_t){.peer = r, .buf = &counts[r], .bytes = 8};
		}
	sc_status_t st = scd_transport_exchange(cx->mesh, x, ns, x + P, nr, job->timeout_ms);
	for (int r = 0; st == SC_OK && r < P; r++)
		total += counts[r] <= it->numel ? counts[r] : it->numel + 1;
	if (st == SC_OK && total > it->numel) {
		int n = snprintf(job->error, sizeof(job->error),
				 "allgather of tensor '%s': the ranks give more than its %llu "
				 "elements in all (",
				 it->name ? it->name : "?", (unsigned long long)it->numel);
		for (int r = 0; r < P && n < (int)sizeof(job->error) - 48; r++)
			n += snprintf(job->error + n, sizeof(job->error) - (size_t)n,
				      "%s%s %d: %llu", r ? ", " : "", L > 1 ? "node" : "rank",
				      scd_job_node(job, r), (unsigned long long)counts[r]);
		snprintf(job->error + n, sizeof(job->error) - (size_t)n, ")");
		free(counts);
		free(x);
		return SC_ERR_LIMIT;
	}
	void *host = buf;
	if (st == SC_OK && !scd_device_host_memory(dev) &&
	    !(host = scd_job_stage_host(cx->stage, dev, total * esz)))
		st = SC_ERR_NOMEM;
	if (st == SC_OK) {
		uint64_t off = 0, at = 0;
		for (int r = 0; r < me; r++)
			off += counts[r];
		/* this node's block, its trainers in local rank order */
		for (int s = 0; s < it->n_src; s++) {
			char *dst = (char *)host + (off + at) * esz;
			size_t bytes = it->src[s].count * esz;
			if (host == buf)
				dev->copy(dst, it->src[s].dense, bytes);
			else
				dev->to_host(dst, it->src[s].dense, bytes);
			at += it->src[s].count;
		}
		ns = nr = 0;
		uint64_t o = 0;
		for (int r = 0; r < P; r++) {
			if (r != me && mine)
				x[ns++] = (scd_xfer_t){.peer = r,
						       .buf = (char *)host + off * esz,
						       .bytes = mine * esz};
			if (r != me && counts[r])
				x[P + nr++] = (scd_xfer_t){.peer = r,
							   .buf = (char *)host + o * esz,
							   .bytes = counts[r] * esz};
			o += counts[r];
		}
		if ((st = dev->sync()) == SC_OK)
			st =
			    scd_transport_exchange(cx->mesh, x, ns, x + P, nr, job->timeout_ms);
		if (st == SC_OK && host != buf)
			dev->from_host(buf, host, total * esz);
	}
	free(counts);
	free(x);
	job->gathered = total;
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "allgather (%s): %s",
			 sc_dtype_name((sc_dtype_t)job->dtype),
			 st == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
	return st;
}

/* P - 1 messages' latency and the blocks received. */
static void allgather_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	int P = x->world_size;
	uint64_t mine = ag_mine(job);
	double rest = job->gathered > mine
			  ? (double)(job->gathered - mine) * sc_dtype_size(job->dtype)
			  : 0;
	scd_coll_dense_report(job,
			      P > 1 ? (P - 1) * x->alpha_s + rest * x->beta_s_per_byte : 0);
}

/* The gathered elements to every local trainer, and their count in its header. */
static sc_status_t allgather_deliver(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_job_item_t *it = &job->items[0];
	for (int s = 0; s < it->n_src; s++) {
		x->dev->copy(it->src[s].dense, x->buf,
			     job->gathered * sc_dtype_size(job->dtype));
		*it->src[s].result_nnz = job->gathered;
	}
	return SC_OK;
}

static void allgather_fill_src(scd_job_src_t *s, uint64_t given, uint64_t *result_nnz)
{
	s->count = given;
	s->result_nnz = result_nnz;
}

static uint32_t allgather_pack(const scd_coll_t *c)
{
	(void)c;
	return SCD_OP_ALLGATHER;
}

static int allgather_unpack(uint32_t word, scd_coll_t *c)
{
	(void)c;
	return word == SCD_OP_ALLGATHER;
}

static void allgather_describe(const scd_coll_t *c, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "allgather");
}

/* At most the tensor's elements, dense. */
static sc_status_t allgather_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	if (rq->coo || rq->count > rq->numel) {
		snprintf(
		    err, len,
		    "allgather of tensor '%s': %llu elements given, over its %llu (or with "
		    "COO input or a broadcast)",
		    rq->tensor, (unsigned long long)rq->count, (unsigned long long)rq->numel);
		return SC_ERR_INVALID;
	}
	return scd_coll_dense_check(rq, err, len);
}

const scd_coll_desc_t scd_coll_allgather = {
    .name = "allgather",
    .psets = 1,
    .pack = allgather_pack,
    .unpack = allgather_unpack,
    .describe = allgather_describe,
    .check = allgather_check,
    .fill_src = allgather_fill_src,
    .run = allgather_run,
    .deliver = allgather_deliver,
    .predict = allgather_predict,
};
