/*
 * coll_allreduce.c: the allreduce (sc_allreduce_async and its COO forms), the collective the
 * schemes serve. Its local step sums the node's trainers into the buffer (by its reduction;
 * COO input scattered in, its faults found in the same pass) and, for a float32 sum, runs
 * the buffer's sparsification ahead (bufctx.h); its exchange is the scheme the cost model
 * picks (float32 sums over a 32-bit wire) or the transport's typed ring (the other dtypes,
 * min, max and product, 16-bit wires); its delivery averages where an item asks for it and
 * copies the result to every local trainer, or hands a single COO trainer its sparse result.
 *
 * A single trainer's COO input that asked for a sparse result (sc_allreduce_coo_sparse_async)
 * and has no sparsifier gets it in its own COO area, averaged there, with the entry count
 * in its shm header (a residual is folded into the list, see bufctx.c); every other form of
 * the job gets the dense result (and SC_RESULT_DENSE in that header when a sparse one was
 * asked for). Integers sum with two's-complement wrap-around, and their AVERAGE is the sum
 * divided by the trainer count in integer division (truncated toward zero); float64 divides
 * in double.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/bufctx.h"
#include "coll/coll.h"
#include "coll/coo_in.h"
#include "coll/ctx.h"
#include "coll/presel.h"
#include "device/reduce.h"
#include "util/clock.h"
#include "util/timeline.h"

/* Records a fault of kind in item by local_rank when count > 0 and none is recorded yet. */
static void note_fault(scd_fault_t *f, scd_fault_kind_t kind, int item, int local_rank,
		       uint64_t count)
{
	if (count && f->kind == SCD_FAULT_NONE)
		*f = (scd_fault_t){kind, (uint32_t)item, local_rank, count};
}

/* NaN and infinities in a float32 sum being built on the host: dst = src (first) or
 * dst += src, checked in the same pass (device/reduce.h). */
static uint64_t host_add_checked(float *dst, const float *src, uint64_t n, int first)
{
	if (!first)
		return scd_sum_f32_nonfinite(dst, src, n);
	return dst == src ? scd_count_f32_nonfinite(dst, n)
			  : scd_copy_f32_nonfinite(dst, src, n);
}

/* What a node that holds nothing of a tensor gives its reduction (numel elements of dtype
 * at dst, dev's memory): zeros for a sum or an average, as Horovod's joined ranks give,
 * and the identity of min, max and product (scd_reduce_identity_typed), so that these
 * take no part from it, as the node's own reduction takes none from a joined trainer
 * whose node goes on: zeros there would make the others' minimum, maximum or product 0
 * where it is not, and would depend on how the trainers share nodes. */
static void take_no_part(const scd_device_ops_t *dev, uint32_t dtype, sc_reduce_op_t op,
			 void *dst, uint64_t numel)
{
	size_t bytes = numel * sc_dtype_size(dtype);
	if (op != SC_OP_MIN && op != SC_OP_MAX && op != SC_OP_PRODUCT) {
		dev->clear(dst, bytes);
		return;
	}
	if (scd_device_host_memory(dev)) {
		scd_reduce_identity_typed((sc_dtype_t)dtype, op, dst, numel);
		return;
	}
	void *host = malloc(bytes ? bytes : 1);
	if (!host) { /* no room to stage it: zeros, as before, rather than no result */
		dev->clear(dst, bytes);
		return;
	}
	scd_reduce_identity_typed((sc_dtype_t)dtype, op, host, numel);
	dev->from_host(dst, host, bytes);
	free(host);
}

/* Sums the local trainers' contributions of item i into dst (numel elements of dtype;
 * COO input exists for float32 only) on device dev. The pass that reads the input finds
 * its faults: COO indices out of range (always) and, unless nonfinite is pass (the
 * caller passes pass for data that is not in host memory), NaN or infinite values, counted in
 * it->nonfinite; the first goes to *f, naming the trainer whose contribution made the node's
 * sum non-finite (a non-finite value is a fault with nonfinite = error only). nonfinite:
 * SCD_NONFINITE_PASS checks nothing. A cuda source on another GPU than the engine's is read
 * from its copy on the engine GPU (pe). */
static void local_reduce(const scd_device_ops_t *dev, scd_stage_t *pe, scd_job_item_t *it,
			 int i, uint32_t dtype, sc_reduce_op_t op, void *dst,
			 scd_nonfinite_t nonfinite, scd_fault_t *f)
{
	size_t esz = sc_dtype_size(dtype);
	int check_nf = nonfinite != SCD_NONFINITE_PASS && dtype == SC_FLOAT32;
	int nf_fault = check_nf && nonfinite == SCD_NONFINITE_ERROR;
	if (it->n_src == 0) { /* its trainers joined, or the tensor went away on this node */
		take_no_part(dev, dtype, op, dst, it->numel);
		return;
	}
	if (it->src[0].coo && dtype == SC_FLOAT32) {
		dev->clear(dst, it->numel * sizeof(float));
		for (int s = 0; s < it->n_src; s++) {
			const scd_job_src_t *src = &it->src[s];
			size_t ib = src->coo_nnz * sizeof(uint32_t);
			const uint32_t *idx =
			    scd_job_stage_in(pe, it, src, src->coo_idx, ib, 0);
			const float *val =
			    scd_job_stage_in(pe, it, src, src->coo_val,
					     src->coo_nnz * sizeof(float), (ib + 63) & ~63u);
			note_fault(
			    f, SCD_FAULT_COO_RANGE, i, src->local_rank,
			    dev->coo_add_checked(dst, it->numel, idx, val, src->coo_nnz));
			uint64_t nf = check_nf ? /* the nnz values just read, still in cache */
					  scd_count_f32_nonfinite(src->coo_val, src->coo_nnz)
					       : 0;
			if (nf_fault)
				note_fault(f, SCD_FAULT_NONFINITE, i, src->local_rank, nf);
			it->nonfinite += nf;
		}
		return;
	}
	if (check_nf && op == SC_OP_SUM) {
		for (int s = 0; s < it->n_src; s++) {
			const scd_job_src_t *src = &it->src[s];
			uint64_t nf = host_add_checked(dst, src->dense, it->numel, s == 0);
			if (nf_fault)
				note_fault(f, SCD_FAULT_NONFINITE, i, src->local_rank, nf);
			it->nonfinite = nf; /* of the sum so far: the last is the node's */
		}
		return;
	}
	/* min, max and product keep a NaN of any trainer: each input is checked as read */
	for (int s = 0; check_nf && s < it->n_src; s++) {
		uint64_t nf = scd_count_f32_nonfinite(it->src[s].dense, it->numel);
		if (nf_fault)
			note_fault(f, SCD_FAULT_NONFINITE, i, it->src[s].local_rank, nf);
	}
	if (!scd_job_stage_local(pe, &it->src[0]))
		scd_job_stage_copy_in(pe, it, &it->src[0], dst, it->src[0].dense,
				      it->numel * esz);
	else if (dst != it->src[0].dense)
		dev->copy(dst, it->src[0].dense, it->numel * esz);
	for (int s = 1; s < it->n_src; s++)
		dev->reduce_typed(
		    (sc_dtype_t)dtype, op, dst,
		    scd_job_stage_in(pe, it, &it->src[s], it->src[s].dense, it->numel * esz, 0),
		    it->numel);
	if (check_nf)
		it->nonfinite = scd_count_f32_nonfinite(dst, it->numel);
}

/* The float32 sums go through the scheme layer (bufctx); the other dtypes and the other
 * reductions through the transport's typed ring. */
static int job_schemes(const scd_job_t *job)
{
	return job->coll.kind == SCD_COLL_ALLREDUCE && job->dtype == SC_FLOAT32 &&
	       job->coll.op == SC_OP_SUM && !job->wire;
}

/*
 * A single trainer's COO input, indices in range, that no sparsifier rewrites, goes to the
 * scheme as a list: the step then costs O(nnz) to read instead of a scatter over the whole
 * tensor. The list is the engine's own copy, sorted (coll/coo_in.h): the trainer cannot
 * change it under the scheme's feet. A residual (lossy schemes allowed) is folded into the
 * list by the buffer's step, not added densely. Sets job->coo_in and returns 1 when that
 * applies.
 */
static int coo_direct(const scd_device_ops_t *dev, scd_job_t *job)
{
	job->coo_in.nnz = 0;
	job->coo_direct = 0;
	job->sparse_out = 0;
	if (job->n_items != 1 || job->dtype != SC_FLOAT32)
		return 0;
	const scd_job_item_t *it = &job->items[0];
	if (it->n_src != 1 || !it->src[0].coo ||
	    (it->sparsifier != SC_SPARSIFY_NONE && it->sparsifier != SC_SPARSIFY_NATURAL))
		return 0;
	const scd_job_src_t *s = &it->src[0];
	if (!scd_device_at_home(s->device, s->ordinal))
		return 0; /* the scheme would read another GPU's memory */
	scd_coo_t in;
	if (!scd_coo_in_take(dev, s->coo_idx, s->coo_val, s->coo_nnz, it->numel, &in,
			     &job->run.coo_copy))
		return 0;
	job->run.coo_copy_dev = dev;
	job->coo_in = in;
	job->coo_direct = 1;
	/* A sparse result lands in the trainer's COO area. */
	job->sparse_out = s->result_nnz != NULL;
	job->coo_out = (scd_coo_t){
	    .idx = (uint32_t *)s->coo_idx, .val = (float *)s->coo_val, .cap = s->coo_cap};
	return 1;
}

/* A COO input the scheme reads where it lies: its values checked (O(nnz)). */
static void coo_direct_nonfinite(scd_job_t *job, scd_nonfinite_t nonfinite, scd_fault_t *f)
{
	scd_job_item_t *it = &job->items[0];
	it->nonfinite = scd_count_f32_nonfinite(job->coo_in.val, job->coo_in.nnz);
	if (nonfinite == SCD_NONFINITE_ERROR)
		note_fault(f, SCD_FAULT_NONFINITE, 0, it->src[0].local_rank, it->nonfinite);
}

/* Averages a sparse result's values and tells the trainer how many there are. */
static void sparse_out(const scd_device_ops_t *dev, const scd_job_t *job, double divisor)
{
	const scd_job_item_t *it = &job->items[0];
	if (it->op == SC_OP_AVERAGE)
		dev->average_typed(SC_FLOAT32, job->coo_out.val, job->coo_out.nnz, divisor);
	*it->src[0].result_nnz = job->coo_out.nnz;
}

/* A buffer of a dtype other than float32, reduced by min, max or product, or summed over a
 * 16-bit wire (where the transport has one; NCCL keeps 32 bits): the dense ring, with the
 * report a dense ring gives (density 1, no densification, balanced) and the alpha-beta
 * time of 2(P - 1) rounds moving 2(P - 1)/P of the buffer's bytes on the wire. */
static sc_status_t dense_typed(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_device_ops_t *dev = x->dev;
	scd_transport_t *t = x->t;
	void *buf = x->buf;
	size_t nbytes = job->total_numel * sc_dtype_size(job->dtype);
	double t0 = scd_now_s();
	void *host = buf;
	if (!scd_device_host_memory(dev) && !t->ops->device_memory &&
	    !(host = scd_job_stage_host(x->stage, dev, nbytes))) {
		snprintf(job->error, sizeof(job->error),
			 "dense_ring (%s): cannot stage %zu bytes through host memory",
			 sc_dtype_name((sc_dtype_t)job->dtype), nbytes);
		return SC_ERR_NOMEM;
	}
	if (host != buf)
		dev->to_host(host, buf, nbytes);
	job->wire_sent =
	    job->dtype == SC_FLOAT32 && job->coll.op == SC_OP_SUM && t->ops->allreduce_wire16
		? job->wire
		: SC_WIRE_NATIVE;
	sc_status_t st =
	    job->wire_sent
		? t->ops->allreduce_wire16(t, host, job->total_numel, job->wire_sent, NULL,
					   job->timeout_ms)
		: scd_transport_allreduce(t, host, job->total_numel, (sc_dtype_t)job->dtype,
					  job->coll.op, job->timeout_ms);
	if (st == SC_OK && host != buf)
		dev->from_host(buf, host, nbytes);
	job->exchange_s = scd_now_s() - t0; /* all of it */
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "dense_ring (%s%s%s): %s",
			 sc_dtype_name((sc_dtype_t)job->dtype), job->wire_sent ? " as " : "",
			 job->wire_sent ? sc_wire_name((sc_wire_t)job->wire_sent) : "",
			 scd_transport_error());
	return st;
}

/* Whether item i's tensor was summed and selected at its submission (coll/presel.h): then
 * what that local sum found goes to the job's fault as the buffer's own sum would have
 * put it, and the buffer's sparsification ahead takes the selection. */
static int presel_taken(scd_coll_ctx_t *x, scd_job_t *job, int i)
{
	scd_job_item_t *it = &job->items[i];
	scd_presel_t *p = scd_presel_take(x->presel, it, x->dev, job->world_seed);
	if (!p)
		return 0;
	it->presel = p;
	it->nonfinite = p->nonfinite;
	note_fault(x->fault, p->fault.kind, i, p->fault.local_rank, p->fault.count);
	return 1;
}

/* Whether a selection at submission reads its item's input where it lies, with no local
 * sum: one trainer's dense float32 buffer on the engine's device, and no check of its
 * values asked for (nonfinite pass: a local sum of one source would only copy it). */
static int presel_in_place(const scd_coll_ctx_t *x, const scd_job_item_t *it)
{
	return it->n_src == 1 && !it->src[0].coo && it->src[0].dense &&
	       x->nonfinite == SCD_NONFINITE_PASS && scd_job_stage_local(x->pe, &it->src[0]);
}

sc_status_t scd_allreduce_preselect(scd_coll_ctx_t *x, scd_presel_table_t *tab, scd_job_t *job)
{
	scd_job_item_t *it = &job->items[0];
	if (job->n_items != 1 || job->dtype != SC_FLOAT32 || !scd_presel_applies(it))
		return SC_OK;
	scd_presel_t *p;
	sc_status_t st = scd_presel_entry(tab, it, x->dev, job->world_seed, &p);
	/* a sparsifier not on this device (block top-K on a GPU): its buffer says so */
	if (st == SC_ERR_UNSUPPORTED)
		return SC_OK;
	const char *why = NULL;
	char ready_why[400];
	if (st == SC_OK &&
	    (st = scd_job_stage_ready_item(it, ready_why, sizeof(ready_why))) != SC_OK)
		why = ready_why;
	if (st == SC_OK) {
		p->waited = it->presel_token; /* its buffer does not wait again */
		p->fault = (scd_fault_t){0};
		const float *in = p->acc;
		uint64_t tl = scd_tl_begin();
		if (presel_in_place(x, it)) { /* nothing to sum: a phase of no length */
			in = it->src[0].dense;
			it->nonfinite = 0;
		} else {
			local_reduce(x->dev, x->pe, it, 0, SC_FLOAT32, SC_OP_SUM, p->acc,
				     x->nonfinite, &p->fault);
		}
		scd_presel_tl(it, "local_sum", tl);
		p->nonfinite = it->nonfinite;
		if ((st = x->pe->st) != SC_OK) /* a source off the engine GPU not copied */
			why = x->pe->what;
		else
			st = scd_presel_select(p, it, in);
	}
	if (st != SC_OK) {
		/* a failure an op of this job noted (an allocation's, one queued behind a
		 * failed copy) is this job's: the device's next sync, another job's, must not
		 * return it; where nothing else says why, it is the cause */
		sc_status_t synced = x->dev->sync();
		if (!why && synced != SC_OK)
			st = synced;
		snprintf(
		    job->error, sizeof(job->error),
		    "tensor '%s': its selection at submission on the %s device failed (its "
		    "buffer selects it): %s",
		    scd_coll_item_name(it), x->dev->name,
		    why ? why : scd_job_stage_why(x->dev, st));
	}
	return st;
}

/* The local sum of every item (or a single COO trainer's list, read where it lies), then
 * a float32 sum's sparsification ahead, once the device has finished the sum. */
static sc_status_t allreduce_gather(scd_coll_ctx_t *x, scd_job_t *job)
{
	const scd_device_ops_t *dev = x->dev;
	size_t esz = sc_dtype_size(job->dtype);
	job->fused_out_ok = 1; /* allreduce_deliver takes a fused buffer's COO result */
	if (!coo_direct(dev, job))
		for (int i = 0; i < job->n_items; i++) {
			if (job_schemes(job) && presel_taken(x, job, i))
				continue;
			uint64_t tl = scd_tl_begin();
			local_reduce(dev, x->pe, &job->items[i], i, job->dtype, job->coll.op,
				     x->buf + job->items[i].offset * esz, x->nonfinite,
				     x->fault);
			scd_job_item_tl(&job->items[i], "local_sum", tl, job->dtype);
		}
	else if (x->nonfinite != SCD_NONFINITE_PASS) /* the scheme reads it in place */
		coo_direct_nonfinite(job, x->nonfinite, x->fault);
	if (x->pe->st != SC_OK || !job_schemes(job))
		return SC_OK; /* a failed copy: the engine reports it */
	sc_status_t st = dev->sync();
	if (st != SC_OK)
		return st;
	st = scd_bufctx_prepare(x->bufs, job, dev, (float *)x->buf, x->mesh, x->alpha_s,
				x->beta_s_per_byte, job->world_seed, &job->run.prep);
	if (st != SC_OK && !job->error[0])
		snprintf(job->error, sizeof(job->error), "%s", sc_status_message(st));
	return st;
}

/* A float32 sum small enough for the one-round exchange (coll/bufctx.h) carries the input
 * check round ahead of its data. */
static int allreduce_carries_verdict(const scd_job_t *job, int world_size)
{
	return job_schemes(job) && scd_bufctx_one_round(job, world_size);
}

static sc_status_t allreduce_run(scd_coll_ctx_t *x, scd_job_t *job)
{
	if (job_schemes(job))
		return scd_bufctx_communicate(x->bufs, job, x->dev, (float *)x->buf, x->t,
					      x->t_alpha_s, x->t_beta_s_per_byte,
					      &job->run.prep);
	return dense_typed(x, job);
}

/* The schemes report their own prediction; the typed ring's is the alpha-beta time of
 * 2(P - 1) rounds moving 2(P - 1)/P of the buffer's bytes (half of them on a 16-bit
 * wire). */
static void allreduce_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	if (job_schemes(job))
		return;
	double P = x->world_size;
	double bytes = (double)(job->total_numel * sc_dtype_size(job->dtype));
	if (job->wire_sent)
		bytes /= 2;
	scd_coll_dense_report(job, P > 1 ? 2 * (P - 1) * x->alpha_s +
					       2 * (P - 1) / P * bytes * x->beta_s_per_byte
					 : 0);
}

/* A buffer of several tensors whose result came back as COO (job->fused_out, host
 * memory, every trainer's buffer at home): each tensor's entries, averaged where asked,
 * written into each of its trainers' buffers after clearing them. The entries ascend, and
 * each lies in some tensor's slice (the selections' list holds no padding). */
static void fused_out(const scd_device_ops_t *dev, scd_job_t *job, double divisor)
{
	const scd_coo_t *o = &job->coo_out;
	uint64_t j = 0;
	for (int i = 0; i < job->n_items; i++) {
		uint64_t tl = scd_tl_begin();
		const scd_job_item_t *it = &job->items[i];
		while (j < o->nnz && o->idx[j] < it->offset)
			j++;
		uint64_t lo = j, end = it->offset + it->numel;
		while (j < o->nnz && o->idx[j] < end)
			j++;
		if (it->op == SC_OP_AVERAGE)
			dev->average_typed(SC_FLOAT32, o->val + lo, j - lo, divisor);
		for (int s = 0; s < it->n_src; s++) {
			const scd_job_src_t *src = &it->src[s];
			float *d = src->dense;
			dev->clear(d, it->numel * sizeof(float));
			for (uint64_t k = lo; k < j; k++)
				d[o->idx[k] - it->offset] = o->val[k];
			if (src->result_nnz) /* asked for a sparse result, gets the dense one */
				*src->result_nnz = UINT64_MAX;
		}
		scd_job_item_tl(it, "copy_out", tl, job->dtype);
	}
}

static sc_status_t allreduce_deliver(scd_coll_ctx_t *x, scd_job_t *job)
{
	size_t esz = sc_dtype_size(job->dtype);
	if (job->sparse_out && job->coo_out.nnz != SCD_RESULT_DENSE) {
		uint64_t tl = scd_tl_begin();
		sparse_out(x->dev, job, job->average_divisor);
		scd_job_item_tl(&job->items[0], "copy_out", tl, job->dtype);
		return SC_OK;
	}
	if (job->fused_out && job->coo_out.nnz != SCD_RESULT_DENSE) {
		fused_out(x->dev, job, job->average_divisor);
		return SC_OK;
	}
	for (int i = 0; i < job->n_items; i++) {
		uint64_t tl = scd_tl_begin();
		sc_status_t st = scd_job_stage_scatter_out(
		    x->dev, &job->items[i], job->dtype, x->buf + job->items[i].offset * esz,
		    job->average_divisor, job->error, sizeof(job->error));
		scd_job_item_tl(&job->items[i], "copy_out", tl, job->dtype);
		if (st != SC_OK)
			return st;
	}
	return SC_OK;
}

static uint32_t allreduce_pack(const scd_coll_t *c)
{
	return (uint32_t)c->op;
}

static int allreduce_unpack(uint32_t word, scd_coll_t *c)
{
	c->op = (sc_reduce_op_t)word;
	return word <= SC_OP_PRODUCT;
}

static void allreduce_describe(const scd_coll_t *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s", sc_reduce_op_name(c->op));
}

/* A known reduction; min, max and product are dense: a residual and a list's implicit
 * zeros mean a sum. */
static sc_status_t allreduce_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	if (rq->coll.op > SC_OP_PRODUCT) {
		snprintf(err, len, "tensor '%s': unknown reduction %u", rq->tensor,
			 (unsigned)rq->coll.op);
		return SC_ERR_INVALID;
	}
	return rq->coll.op > SC_OP_AVERAGE ? scd_coll_dense_check(rq, err, len) : SC_OK;
}

const scd_coll_desc_t scd_coll_allreduce = {
    .name = "allreduce",
    .psets = 1,
    .fuses = 1,
    .in_place = 1,
    .gpunet = 1,
    .pack = allreduce_pack,
    .unpack = allreduce_unpack,
    .describe = allreduce_describe,
    .check = allreduce_check,
    .gather = allreduce_gather,
    .carries_verdict = allreduce_carries_verdict,
    .run = allreduce_run,
    .deliver = allreduce_deliver,
    .predict = allreduce_predict,
};
