/*
 * engine.c: the data-plane thread (see engine.h). The queue is a mutex and a condition
 * variable; the thread sleeps on it when idle and blocks in the transport's poll(2) while
 * transferring, so it never spins. float32 buffers take the schemes; buffers of the other
 * dtypes take the transport's dense ring directly, with the local sum and the averaging
 * done here per dtype. Every computation on tensor data is an op of the job's device
 * (scd_engine_job_device()); this file only decides what runs.
 */
#include "engine/engine.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/reduce.h"
#include "device/stage.h"
#include "engine/alltoall.h"
#include "engine/bufctx.h"
#include "engine/coo_in.h"
#include "engine/gpunet.h"
#include "engine/verdict.h"
#include "util/clock.h"
#include "util/log.h"

#define ENGINE_SCRATCH_BYTES (4u << 20)
/* Fusion buffers per device: one being filled by the compute stage while another is on
 * the network (the queue between the stages holds one job). */
#define ENGINE_SLOTS 2

/*
 * The local sum of cuda sources on several GPUs runs on the device's home, the engine GPU
 * (device/stage.h): a source on another GPU is first copied over into a staging area of
 * the stage's own (peer_in, the compute stage's; peer_out, the communication stage's, for
 * an alltoall's blocks to trainers on other GPUs), and the result is copied back to each
 * trainer's GPU when it is delivered.
 */

struct scd_engine {
	scd_daemon_t *d;
	scd_engine_done_cb done;
	pthread_t thread, comm_thread;
	int pipeline; /* the stages on two threads (else one runs both, in turn) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	scd_job_t *head, *tail;	      /* to run */
	scd_job_t *cq_head, *cq_tail; /* compute stage done, for the communication stage */
	int cq_n, comm_busy;
	scd_job_t *done_head, *done_tail;
	uv_async_t async;
	int stop, stopped, comm_stopped;
	scd_transport_t *transport; /* the mesh: tcp */
	scd_gpunet_t *gpunet;	    /* what GPU buffers take (gpunet.h) */
	scd_bufctx_table_t *bufs;
	double alpha_s, beta_s_per_byte; /* agreed by every rank */
	/* the fusion buffers of each device kind, in that device's memory (see
	 * fusion_resize), and which of them a job holds */
	void *fusion[SCD_DEVICE_COUNT][ENGINE_SLOTS];
	const scd_device_ops_t *fusion_dev[SCD_DEVICE_COUNT][ENGINE_SLOTS];
	uint64_t fusion_cap_bytes[SCD_DEVICE_COUNT][ENGINE_SLOTS], fusion_want_bytes;
	int slot_busy[SCD_DEVICE_COUNT][ENGINE_SLOTS];
	/* host staging of a GPU buffer's dense ring (the schemes stage their own) */
	scd_stage_host_t stage;
	/* the compute stage's copies on the engine GPU of sources on other GPUs (peer_in),
	 * and the communication stage's of results for them (an alltoall's) */
	scd_stage_t peer_in, peer_out;
};

static void fusion_free(scd_engine_t *e, scd_device_kind_t kind, int k)
{
	if (e->fusion[kind][k])
		e->fusion_dev[kind][k]->free(e->fusion[kind][k]);
	e->fusion[kind][k] = NULL;
	e->fusion_cap_bytes[kind][k] = 0;
}

static void slot_release(scd_engine_t *e, scd_device_kind_t kind, int k)
{
	pthread_mutex_lock(&e->mu);
	e->slot_busy[kind][k] = 0;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

/* Allocates fusion buffer slot k of device dev (of kind kind), zeroed and pre-faulted,
 * through the device; never called on the per-step path except for a device's first fused
 * jobs and after a runtime change of fusion_threshold_bytes. Returns SC_ERR_NOMEM without
 * logging: the caller reports it. */
static sc_status_t fusion_resize(scd_engine_t *e, scd_device_kind_t kind, int k,
				 const scd_device_ops_t *dev, uint64_t bytes)
{
	if (bytes <= e->fusion_cap_bytes[kind][k] && e->fusion[kind][k])
		return SC_OK;
	fusion_free(e, kind, k);
	if (bytes == 0)
		return SC_OK;
	void *p = dev->alloc(bytes);
	if (!p)
		return SC_ERR_NOMEM;
	e->fusion[kind][k] = p;
	e->fusion_dev[kind][k] = dev;
	e->fusion_cap_bytes[kind][k] = bytes;
	return SC_OK;
}

/* Logs a failure the engine itself detected, or that a device op reported (device ops do
 * not log), once, here; the loop thread only hands job->error to the trainers. Failures
 * of the transport and the schemes were logged where they were detected. */
static void log_job_error(const scd_job_t *job)
{
	scd_error(SCD_SUB_ENGINE, "job %llu: %s", (unsigned long long)job->seq, job->error);
}

/* The name of an item's tensor, for errors. */
static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

/* See engine.h. */
sc_status_t scd_engine_job_device(int rank, scd_job_t *job, scd_device_kind_t *kind_p,
				  const scd_device_ops_t **dev_p)
{
	const scd_job_item_t *first = NULL;
	scd_device_kind_t kind = SCD_DEVICE_CPU;
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		for (int s = 0; s < it->n_src; s++) {
			if (!first) {
				first = it;
				kind = it->src[s].device;
			} else if (it->src[s].device != kind) {
				const char *other = scd_device_kind_name(it->src[s].device);
				if (it == first)
					snprintf(
					    job->error, sizeof(job->error),
					    "rank %d: tensor '%s' is on the %s device for one "
					    "local trainer and on the %s device for another: "
					    "a buffer runs on one device",
					    rank, item_name(it), scd_device_kind_name(kind),
					    other);
				else
					snprintf(
					    job->error, sizeof(job->error),
					    "rank %d: tensor '%s' is on the %s device and "
					    "tensor '%s' on the %s device: a buffer runs on "
					    "one device",
					    rank, item_name(first), scd_device_kind_name(kind),
					    item_name(it), other);
				log_job_error(job);
				return SC_ERR_UNSUPPORTED;
			}
		}
	}
	if ((unsigned)kind >= SCD_DEVICE_COUNT || scd_device_get(kind, dev_p) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s' is on the %s device, which this daemon does not "
			 "have",
			 rank, first ? item_name(first) : "?", scd_device_kind_name(kind));
		log_job_error(job);
		return SC_ERR_UNSUPPORTED;
	}
	*kind_p = kind;
	return SC_OK;
}

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

/* src of it, as the staging between GPUs names it (device/stage.h). */
static scd_stage_src_t stage_src(const scd_job_item_t *it, const scd_job_src_t *src)
{
	return (scd_stage_src_t){src->device, src->ordinal, src->local_rank, item_name(it)};
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
	if (it->n_src == 0) { /* the tensor went away on this node: take part with zeros */
		dev->clear(dst, it->numel * esz);
		return;
	}
	if (it->src[0].coo && dtype == SC_FLOAT32) {
		dev->clear(dst, it->numel * sizeof(float));
		for (int s = 0; s < it->n_src; s++) {
			const scd_job_src_t *src = &it->src[s];
			size_t ib = src->coo_nnz * sizeof(uint32_t);
			const uint32_t *idx =
			    scd_stage_in(pe, stage_src(it, src), src->coo_idx, ib, 0);
			const float *val =
			    scd_stage_in(pe, stage_src(it, src), src->coo_val,
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
	if (!scd_stage_local(pe, it->src[0].device, it->src[0].ordinal))
		scd_stage_copy_in(pe, stage_src(it, &it->src[0]), dst, it->src[0].dense,
				  it->numel * esz);
	else if (dst != it->src[0].dense)
		dev->copy(dst, it->src[0].dense, it->numel * esz);
	for (int s = 1; s < it->n_src; s++)
		dev->reduce_typed((sc_dtype_t)dtype, op, dst,
				  scd_stage_in(pe, stage_src(it, &it->src[s]), it->src[s].dense,
					       it->numel * esz, 0),
				  it->numel);
	if (check_nf)
		it->nonfinite = scd_count_f32_nonfinite(dst, it->numel);
}

/* The room a staging area needs for the job's sources off the device's home (device/
 * stage.h): the largest of them (0: every source is at home). */
static size_t stage_need(const scd_job_t *job, scd_device_kind_t kind)
{
	size_t need = 0, esz = sc_dtype_size(job->dtype);
	for (int i = 0; i < job->n_items; i++)
		for (int s = 0; s < job->items[i].n_src; s++) {
			const scd_job_src_t *src = &job->items[i].src[s];
			if (scd_device_at_home(kind, src->ordinal))
				continue;
			size_t b = src->coo ? ((src->coo_nnz * 4 + 63) & ~(size_t)63) +
						  src->coo_nnz * 4
					    : job->items[i].numel * esz;
			need = b > need ? b : need;
			need = need ? need : 1; /* an empty source off home still copies */
		}
	return need;
}

/* A broadcast's local step: on the root's node, the root trainer's buffer (root_local,
 * its local rank) becomes the node's; elsewhere the buffer only receives. */
static void local_broadcast(const scd_device_ops_t *dev, scd_stage_t *pe, scd_job_item_t *it,
			    uint32_t dtype, void *dst, int root_local)
{
	if (root_local < 0)
		return;
	for (int s = 0; s < it->n_src; s++)
		if (it->src[s].local_rank == root_local) {
			size_t bytes = it->numel * sc_dtype_size(dtype);
			if (!scd_stage_local(pe, it->src[s].device, it->src[s].ordinal))
				scd_stage_copy_in(pe, stage_src(it, &it->src[s]), dst,
						  it->src[s].dense, bytes);
			else if (dst != it->src[s].dense)
				dev->copy(dst, it->src[s].dense, bytes);
			return;
		}
	dev->clear(dst, it->numel * sc_dtype_size(dtype)); /* the root's tensor went away */
}

/* The float32 sums go through the scheme layer (bufctx); the other dtypes and the other
 * reductions through the transport's typed ring. */
static int job_schemes(const scd_job_t *job)
{
	return job->dtype == SC_FLOAT32 && job->op == SC_OP_SUM && !job->wire;
}

/* Averages where the item asks for it and copies the result to every local trainer's
 * buffer (to a trainer on another GPU than the engine's, from GPU to GPU). */
static sc_status_t scatter_out(const scd_device_ops_t *dev, const scd_job_item_t *it,
			       uint32_t dtype, void *res, double divisor, char *err,
			       size_t err_len)
{
	size_t bytes = it->numel * sc_dtype_size(dtype);
	if (it->op == SC_OP_AVERAGE)
		dev->average_typed((sc_dtype_t)dtype, res, it->numel, divisor);
	for (int s = 0; s < it->n_src; s++) {
		const scd_job_src_t *src = &it->src[s];
		if (!scd_device_at_home(src->device, src->ordinal)) {
			sc_status_t st = scd_stage_out(stage_src(it, src), src->dense, res,
						       bytes, err, err_len);
			if (st != SC_OK)
				return st;
		} else if (src->dense != res)
			dev->copy(it->src[s].dense, res, bytes);
		if (it->src[s].result_nnz) /* asked for a sparse result, gets the dense one */
			*it->src[s].result_nnz = UINT64_MAX;
	}
	return SC_OK;
}

/* A buffer of a dtype other than float32, reduced by min, max or product, or summed over a
 * 16-bit wire (where the transport has one; NCCL keeps 32 bits): the dense ring, with the
 * report a dense ring gives (density 1, no densification, balanced) and the alpha-beta
 * time of 2(P - 1) rounds moving 2(P - 1)/P of the buffer's bytes on the wire. */
static sc_status_t dense_typed(scd_engine_t *e, scd_job_t *job, const scd_device_ops_t *dev,
			       scd_transport_t *t, void *buf)
{
	double P = e->d->world_size;
	size_t nbytes = job->total_numel * sc_dtype_size(job->dtype);
	double bytes = (double)nbytes;
	double t0 = scd_now_s();
	void *host = buf;
	if (!scd_device_host_memory(dev) && !t->ops->device_memory &&
	    !(host = scd_stage_host_get(&e->stage, dev, nbytes))) {
		snprintf(job->error, sizeof(job->error),
			 "dense_ring (%s): cannot stage %zu bytes through host memory",
			 sc_dtype_name((sc_dtype_t)job->dtype), nbytes);
		return SC_ERR_NOMEM;
	}
	if (host != buf)
		dev->to_host(host, buf, nbytes);
	job->wire_sent =
	    job->dtype == SC_FLOAT32 && job->op == SC_OP_SUM && t->ops->allreduce_wire16
		? job->wire
		: SC_WIRE_NATIVE;
	sc_status_t st =
	    job->wire_sent
		? t->ops->allreduce_wire16(t, host, job->total_numel, job->wire_sent, NULL,
					   job->timeout_ms)
		: scd_transport_allreduce(t, host, job->total_numel, (sc_dtype_t)job->dtype,
					  (sc_reduce_op_t)job->op, job->timeout_ms);
	if (st == SC_OK && host != buf)
		dev->from_host(buf, host, nbytes);
	job->exchange_s = scd_now_s() - t0; /* all of it */
	if (job->wire_sent)
		bytes /= 2;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "dense_ring (%s%s%s): %s",
			 sc_dtype_name((sc_dtype_t)job->dtype), job->wire_sent ? " as " : "",
			 job->wire_sent ? sc_wire_name((sc_wire_t)job->wire_sent) : "",
			 scd_transport_error());
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->predicted_s =
	    P > 1 ? 2 * (P - 1) * e->alpha_s + 2 * (P - 1) / P * bytes * e->beta_s_per_byte : 0;
	job->density = job->gamma = job->imbalance = 1;
	return st;
}

/* A broadcast: the root's node sends the buffer once to every other node, which receives
 * it (P - 1 copies leave the root, half the bytes of the ring's sum); staged through host
 * memory where the device's is not, as the dense ring. The report: one round of the whole
 * buffer per peer from the root. */
static sc_status_t broadcast_typed(scd_engine_t *e, scd_job_t *job, const scd_device_ops_t *dev,
				   void *buf)
{
	int P = e->d->world_size, me = e->d->rank;
	int root = scd_op_root(job->op) / e->d->local_size;
	size_t nbytes = job->total_numel * sc_dtype_size(job->dtype);
	double t0 = scd_now_s();
	void *host = buf;
	scd_xfer_t *x = malloc(sizeof(*x) * (size_t)P);
	if (!x || (!scd_device_host_memory(dev) &&
		   !(host = scd_stage_host_get(&e->stage, dev, nbytes)))) {
		free(x);
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
				x[n++] = (scd_xfer_t){.peer = r, .buf = host, .bytes = nbytes};
		st = scd_transport_exchange(e->transport, x, n, NULL, 0, job->timeout_ms);
	} else {
		x[0] = (scd_xfer_t){.peer = root, .buf = host, .bytes = nbytes};
		st = scd_transport_exchange(e->transport, NULL, 0, x, 1, job->timeout_ms);
		if (st == SC_OK && host != buf)
			dev->from_host(buf, host, nbytes);
	}
	free(x);
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "broadcast from node %d (%s): %s",
			 root, sc_dtype_name((sc_dtype_t)job->dtype), scd_transport_error());
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->predicted_s =
	    P > 1 ? e->alpha_s + (P - 1) * (double)nbytes * e->beta_s_per_byte : 0;
	job->density = job->gamma = job->imbalance = 1;
	return st;
}

/* Trainer t's first row of a reduce-scatter of rows rows over T trainers (the first
 * rows % T trainers get one row more). */
static uint64_t rs_first_row(uint64_t rows, uint64_t T, uint64_t t)
{
	return t * (rows / T) + (t < rows % T ? t : rows % T);
}

/*
 * A reduce-scatter (a buffer of its own, holding the node's local reduction): node n's
 * part is the rows of its trainers. Every node sends every other node its part of this
 * node's reduction and reduces the parts it receives into its own part (in node order),
 * so each node sends (P - 1) / P of the buffer; an average divides the part afterwards.
 */
static sc_status_t reducescatter_typed(scd_engine_t *e, scd_job_t *job,
				       const scd_device_ops_t *dev, void *buf)
{
	const scd_job_item_t *it = &job->items[0];
	int P = e->d->world_size, me = e->d->rank, L = e->d->local_size;
	uint64_t row = scd_op_rs_row(job->op), rows = it->numel / row;
	sc_reduce_op_t red = scd_op_reduction(job->op);
	size_t esz = sc_dtype_size(job->dtype), rb = row * esz;
	uint64_t mine0 = rs_first_row(rows, (uint64_t)P * L, (uint64_t)me * L);
	uint64_t mine = rs_first_row(rows, (uint64_t)P * L, (uint64_t)(me + 1) * L) - mine0;
	double t0 = scd_now_s();
	void *host = buf;
	char *in = malloc((size_t)(P > 1 ? P - 1 : 1) * mine * rb + 1);
	scd_xfer_t *x = malloc(sizeof(*x) * 2 * (size_t)P);
	sc_status_t st = SC_OK;
	if (!in || !x ||
	    (!scd_device_host_memory(dev) &&
	     !(host = scd_stage_host_get(&e->stage, dev, rows * rb))))
		st = SC_ERR_NOMEM;
	int ns = 0, nr = 0;
	for (int r = 0; st == SC_OK && r < P; r++) {
		if (r == me)
			continue;
		uint64_t f = rs_first_row(rows, (uint64_t)P * L, (uint64_t)r * L);
		uint64_t n = rs_first_row(rows, (uint64_t)P * L, (uint64_t)(r + 1) * L) - f;
		if (n)
			x[ns++] = (scd_xfer_t){
			    .peer = r, .buf = (char *)host + f * rb, .bytes = n * rb};
		if (mine) {
			x[P + nr] = (scd_xfer_t){
			    .peer = r, .buf = in + (size_t)nr * mine * rb, .bytes = mine * rb};
			nr++;
		}
	}
	if (st == SC_OK) {
		if (host != buf)
			dev->to_host(host, buf, rows * rb);
		st = scd_transport_exchange(e->transport, x, ns, x + P, nr, job->timeout_ms);
	}
	/* the received parts reduced into this node's, in node order (on the host) */
	char *part = (char *)host + mine0 * rb;
	for (int k = 0; st == SC_OK && k < nr; k++)
		scd_reduce_typed((sc_dtype_t)job->dtype, red, part, in + (size_t)k * mine * rb,
				 mine * row);
	if (st == SC_OK && host != buf)
		dev->from_host((char *)buf + mine0 * rb, part, mine * rb);
	if (st == SC_OK && red == SC_OP_AVERAGE)
		dev->average_typed((sc_dtype_t)job->dtype, (char *)buf + mine0 * rb, mine * row,
				   job->average_divisor);
	free(in);
	free(x);
	job->exchange_s = scd_now_s() - t0;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "reducescatter (%s): %s",
			 sc_dtype_name((sc_dtype_t)job->dtype),
			 st == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->predicted_s =
	    P > 1 ? e->alpha_s + (double)(rows - mine) * rb * e->beta_s_per_byte : 0;
	job->density = job->gamma = job->imbalance = 1;
	return st;
}

/* A reduce-scatter's result: each local trainer's rows of the node's part, at the start of
 * its buffer, and their element count in its header. */
static void reducescatter_out(scd_engine_t *e, const scd_job_t *job,
			      const scd_device_ops_t *dev, const void *buf)
{
	const scd_job_item_t *it = &job->items[0];
	uint64_t T = (uint64_t)e->d->world_size * e->d->local_size;
	uint64_t row = scd_op_rs_row(job->op), rows = it->numel / row;
	size_t rb = row * sc_dtype_size(job->dtype);
	for (int s = 0; s < it->n_src; s++) {
		uint64_t t = (uint64_t)e->d->rank * e->d->local_size + it->src[s].local_rank;
		uint64_t f = rs_first_row(rows, T, t), n = rs_first_row(rows, T, t + 1) - f;
		dev->copy(it->src[s].dense, (const char *)buf + f * rb, n * rb);
		*it->src[s].result_nnz = n * row;
	}
}

/*
 * An allgather (a buffer of its own): the nodes first exchange how many elements each
 * gives (its trainers' counts, in local rank order), then every node sends its block to
 * every other, straight to its place in the buffer (node order, which is rank order). A
 * total over the tensor's size fails on every rank alike, naming every rank's count.
 */
static sc_status_t allgather_typed(scd_engine_t *e, scd_job_t *job, const scd_device_ops_t *dev,
				   void *buf)
{
	const scd_job_item_t *it = &job->items[0];
	int P = e->d->world_size, me = e->d->rank, L = e->d->local_size;
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
	sc_status_t st =
	    scd_transport_exchange(e->transport, x, ns, x + P, nr, job->timeout_ms);
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
				      r, (unsigned long long)counts[r]);
		snprintf(job->error + n, sizeof(job->error) - (size_t)n, ")");
		free(counts);
		free(x);
		return SC_ERR_LIMIT;
	}
	void *host = buf;
	if (st == SC_OK && !scd_device_host_memory(dev) &&
	    !(host = scd_stage_host_get(&e->stage, dev, total * esz)))
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
			st = scd_transport_exchange(e->transport, x, ns, x + P, nr,
						    job->timeout_ms);
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
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->predicted_s =
	    P > 1 ? (P - 1) * e->alpha_s + (double)(total - mine) * esz * e->beta_s_per_byte
		  : 0;
	job->density = job->gamma = job->imbalance = 1;
	return st;
}

/* What an alltoall borrows from the engine (alltoall.h): its host staging, and the
 * peer copies of a trainer's buffer on another GPU than the engine's (through the peer
 * staging area on the engine GPU, which scd_stage_reserve sized for a whole tensor). */
typedef struct a2a_ctx {
	scd_engine_t *e;
	const scd_device_ops_t *dev;
	const scd_job_item_t *it;
	scd_stage_t *pe; /* the calling stage's area */
} a2a_ctx_t;

static void *alltoall_stage(void *arg, size_t bytes)
{
	a2a_ctx_t *a = arg;
	return scd_stage_host_get(&a->e->stage, a->dev, bytes);
}

static void alltoall_copy_in(void *arg, const scd_job_src_t *src, void *dst, const void *p,
			     size_t bytes)
{
	a2a_ctx_t *a = arg;
	if (!scd_stage_local(a->pe, src->device, src->ordinal))
		scd_stage_copy_in(a->pe, stage_src(a->it, src), dst, p, bytes);
	else
		a->dev->copy(dst, p, bytes);
}

static sc_status_t alltoall_copy_out(void *arg, const scd_job_src_t *src, const void *p,
				     size_t bytes)
{
	a2a_ctx_t *a = arg;
	return scd_stage_from_host(a->pe, stage_src(a->it, src), src->dense, p, bytes);
}

static scd_a2a_hooks_t alltoall_hooks(a2a_ctx_t *a)
{
	return (scd_a2a_hooks_t){alltoall_stage, alltoall_copy_in, alltoall_copy_out, a};
}

/* An alltoall (alltoall.h), timed as the blocks it sent: P - 1 messages' latency and
 * this node's bytes. */
static sc_status_t alltoall_typed(scd_engine_t *e, scd_job_t *job, const scd_device_ops_t *dev,
				  scd_device_kind_t kind, void *buf)
{
	int P = e->d->world_size;
	scd_transport_t *t = e->transport;
	scd_transport_counters_t c0, c1;
	/* the results' copies to trainers on other GPUs: this stage's own area */
	sc_status_t st = scd_stage_reserve(&e->peer_out, dev, stage_need(job, kind));
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: no room on the engine GPU cuda:%d to copy the alltoall's "
			 "results to the node's other GPUs: %s",
			 e->d->rank, scd_device_home(kind), sc_status_message(st));
		return st;
	}
	t->ops->counters(t, &c0);
	a2a_ctx_t ac = {e, dev, &job->items[0], &e->peer_out};
	scd_a2a_hooks_t h = alltoall_hooks(&ac);
	st = scd_alltoall_run(job, dev, t, e->d->rank, P, e->d->local_size, buf, &h);
	t->ops->counters(t, &c1);
	job->predicted_s =
	    P > 1 ? (P - 1) * e->alpha_s +
			(double)(c1.bytes_sent - c0.bytes_sent) * e->beta_s_per_byte
		  : 0;
	return st;
}

/*
 * Measures latency and bandwidth to every peer, then makes every rank use the same values
 * (the mean over ranks, through an allreduce whose result is bit-identical everywhere), so
 * that the cost model chooses the same scheme on every rank.
 */
static sc_status_t probe_network(scd_engine_t *e, int timeout_ms)
{
	if (e->d->world_size == 1) {
		pthread_mutex_lock(&e->mu);
		e->alpha_s = 20e-6;
		e->beta_s_per_byte = 1.0 / 10e9;
		pthread_mutex_unlock(&e->mu);
		return SC_OK;
	}
	double a = 0, b = 0;
	/* 2 MiB probes: a shaped link lets a burst through at line rate (tbf's bucket, a
	 * switch's buffer), and a probe much larger than the burst measures the rate the link
	 * sustains rather than the burst (256 KiB read 1 Gbit/s as 1.8 Gbit/s). */
	sc_status_t st = e->transport->ops->measure(e->transport, 2u << 20, &a, &b, timeout_ms);
	if (st != SC_OK)
		return st;
	float v[2] = {(float)a, (float)b};
	st = scd_transport_allreduce_f32(e->transport, v, 2, timeout_ms);
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&e->mu); /* read by the compute stage and the loop thread */
	e->alpha_s = (double)v[0] / e->d->world_size;
	e->beta_s_per_byte = (double)v[1] / e->d->world_size;
	pthread_mutex_unlock(&e->mu);
	scd_info(SCD_SUB_ENGINE, "network: alpha %.1f us, %.1f MB/s", e->alpha_s * 1e6,
		 e->beta_s_per_byte > 0 ? 1e-6 / e->beta_s_per_byte : 0.0);
	return SC_OK;
}

void scd_engine_net(scd_engine_t *e, double *alpha_s_p, double *beta_s_per_byte_p)
{
	pthread_mutex_lock(&e->mu);
	*alpha_s_p = e->alpha_s;
	*beta_s_per_byte_p = e->beta_s_per_byte;
	pthread_mutex_unlock(&e->mu);
}

/*
 * A single trainer's COO input, indices in range, that no sparsifier rewrites, goes to the
 * scheme as a list: the step then costs O(nnz) to read instead of a scatter over the whole
 * tensor. The list is the engine's own copy, sorted (engine/coo_in.h): the trainer cannot
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

/* Averages a sparse result's values and tells the trainer how many there are. */
static void sparse_out(const scd_device_ops_t *dev, const scd_job_t *job, double divisor)
{
	const scd_job_item_t *it = &job->items[0];
	if (it->op == SC_OP_AVERAGE)
		dev->average_typed(SC_FLOAT32, job->coo_out.val, job->coo_out.nnz, divisor);
	*it->src[0].result_nnz = job->coo_out.nnz;
}

/* The engine's stream waits for what each GPU trainer queued before it submitted (its ready
 * event), or marks where the result is complete (its done event). A failure names the
 * tensor and the trainer's local rank. */
static sc_status_t trainers_events(scd_engine_t *e, scd_job_t *job, int done)
{
	sc_status_t st = SC_OK;
	char why[sizeof(job->error) - 32];
	for (int i = 0; i < job->n_items && st == SC_OK; i++) {
		scd_job_item_t *it = &job->items[i];
		for (int k = 0; k < it->n_src && st == SC_OK; k++)
			st = scd_stage_event(stage_src(it, &it->src[k]),
					     done ? it->src[k].done_ev : it->src[k].ready_ev,
					     done, why, sizeof(why));
	}
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error), "rank %d: %s", e->d->rank, why);
		job->status = st;
		log_job_error(job);
	}
	return st;
}

static sc_status_t trainers_ready(scd_engine_t *e, scd_job_t *job)
{
	return trainers_events(e, job, 0);
}

static sc_status_t trainers_done(scd_engine_t *e, scd_job_t *job)
{
	return trainers_events(e, job, 1);
}

/* A COO input the scheme reads where it lies: its values checked (O(nnz)). */
static void coo_direct_nonfinite(scd_job_t *job, scd_nonfinite_t nonfinite, scd_fault_t *f)
{
	scd_job_item_t *it = &job->items[0];
	it->nonfinite = scd_count_f32_nonfinite(job->coo_in.val, job->coo_in.nnz);
	if (nonfinite == SCD_NONFINITE_ERROR)
		note_fault(f, SCD_FAULT_NONFINITE, 0, it->src[0].local_rank, it->nonfinite);
}

/* Logs what nonfinite = warn lets through; then the input check round (verdict.h), which
 * fails the job on every rank when some rank found a fault in its input or failed its
 * compute stage. The rank whose compute stage failed keeps its own account of why after
 * the error every rank shares. */
static sc_status_t input_verdict(scd_engine_t *e, scd_job_t *job, const scd_fault_t *f,
				 int *all_cuda)
{
	for (int i = 0; i < job->n_items && job->nonfinite == SCD_NONFINITE_WARN; i++)
		if (job->items[i].nonfinite)
			scd_warn(
			    SCD_SUB_ENGINE,
			    "rank %d: tensor '%s': %llu non-finite values (NaN or infinity) "
			    "in this node's input, summed as they are (nonfinite = warn)",
			    e->d->rank, item_name(&job->items[i]),
			    (unsigned long long)job->items[i].nonfinite);
	char mine[sizeof(job->error)];
	if (f->kind == SCD_FAULT_LOCAL)
		memcpy(mine, job->error, sizeof(mine));
	int faulty;
	uint32_t flags = job->run.kind == SCD_DEVICE_CUDA ? SCD_VERDICT_CUDA : 0, agreed = 0;
	sc_status_t st = scd_verdict_round(e->transport, job, f, flags, e->d->local_size,
					   job->timeout_ms, &faulty, &agreed);
	*all_cuda = (agreed & SCD_VERDICT_CUDA) != 0;
	if (st == SC_OK)
		return SC_OK;
	if (f->kind == SCD_FAULT_LOCAL) {
		mine[sizeof(mine) - 1] = 0;
		if (faulty <
		    0) { /* the round itself failed: this node's failure is the error */
			st = scd_fault_status(f);
			memcpy(job->error, mine, sizeof(mine));
		} else {
			size_t n = strlen(job->error);
			snprintf(job->error + n, sizeof(job->error) - n, "; here: %s", mine);
		}
	}
	job->status = st;
	log_job_error(job);
	return st;
}

/* Zeroes what no item of the job covers in its fusion buffer (the alignment gaps between
 * items and the tail): a slot keeps whatever an earlier buffer of another layout left
 * there, and the schemes run over the whole buffer, so that padding must read zeros. */
static void clear_padding(const scd_device_ops_t *dev, const scd_job_t *job, char *buf,
			  size_t esz)
{
	uint64_t end = 0;
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (it->offset < end) { /* not in ascending order: clear it all */
			dev->clear(buf, job->total_numel * esz);
			return;
		}
		if (it->offset > end)
			dev->clear(buf + end * esz, (it->offset - end) * esz);
		end = it->offset + it->numel;
	}
	if (job->total_numel > end)
		dev->clear(buf + end * esz, (job->total_numel - end) * esz);
}

/* Fails a job in its compute stage (job->error says why): it still takes the input check
 * round, as this node's local fault, so that every rank fails it alike and none sends
 * its bytes. A fault its input already showed is the one reported. */
static void compute_fail(scd_job_t *job, sc_status_t st)
{
	job->status = st;
	if (job->run.fault.kind == SCD_FAULT_NONE)
		job->run.fault = (scd_fault_t){
		    .kind = SCD_FAULT_LOCAL,
		    .item = job->n_items == 1 ? 0 : SCD_FAULT_ITEM_BUFFER,
		    .count = (uint64_t)(-(int64_t)(st != SC_OK ? st : SC_ERR_SYSTEM))};
}

/* A free fusion buffer slot of device kind, sized for need bytes (waits while both are in
 * the pipeline); -1 with job->error set when there is no memory for it. */
static int slot_acquire(scd_engine_t *e, scd_job_t *job, scd_device_kind_t kind,
			const scd_device_ops_t *dev, uint64_t need)
{
	pthread_mutex_lock(&e->mu);
	int k;
	for (;;) {
		for (k = 0; k < ENGINE_SLOTS && e->slot_busy[kind][k]; k++)
			;
		if (k < ENGINE_SLOTS || e->stop)
			break;
		pthread_cond_wait(&e->cv, &e->mu);
	}
	uint64_t want = e->fusion_want_bytes > need ? e->fusion_want_bytes : need;
	if (k < ENGINE_SLOTS)
		e->slot_busy[kind][k] = 1;
	pthread_mutex_unlock(&e->mu);
	if (k == ENGINE_SLOTS) {
		snprintf(job->error, sizeof(job->error), "rank %d: the engine is stopping",
			 e->d->rank);
		return -1;
	}
	if (fusion_resize(e, kind, k, dev, want) != SC_OK) {
		snprintf(
		    job->error, sizeof(job->error),
		    "rank %d: no memory on the %s device for a fusion buffer of %llu bytes",
		    e->d->rank, dev->name, (unsigned long long)want);
		log_job_error(job);
		slot_release(e, kind, k);
		return -1;
	}
	return k;
}

/* Why dev's sync failed with st: the fault that lost the GPU where there is one (the
 * device's first failure was logged where it was seen), else st's message. */
static const char *device_why(const scd_device_ops_t *dev, sc_status_t st)
{
	const char *lost = scd_device_lost(dev->kind);
	return lost ? lost : sc_status_message(st);
}

/* The scheme's kernels read the node's residual where it lies: a cuda tensor's must be on
 * the engine GPU (local rank 0's registration holds it). */
static sc_status_t engine_gpu_check(scd_engine_t *e, scd_job_t *job, scd_device_kind_t kind)
{
	const char *lost = scd_device_lost(kind);
	if (lost) { /* nothing of the GPU works any more: fail at once, the same every time */
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s': the GPU is lost (%s): GPU work fails until the "
			 "daemon restarts; cpu tensors are still served",
			 e->d->rank, item_name(&job->items[0]), lost);
		return SC_ERR_SYSTEM;
	}
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (!it->residual || scd_device_at_home(kind, it->residual_ordinal))
			continue;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s': its error-feedback residual is local rank 0's, "
			 "on cuda:%d, and this daemon's engine sums on cuda:%d (cuda_device): "
			 "local rank 0 registers it on cuda:%d",
			 e->d->rank, item_name(it), it->residual_ordinal, scd_device_home(kind),
			 scd_device_home(kind));
		log_job_error(job);
		return SC_ERR_UNSUPPORTED;
	}
	return SC_OK;
}

/*
 * The compute stage of an allreduce: the device, a fusion buffer, the GPU trainers' ready
 * events, the local sum, and the buffer's sparsification ahead (bufctx prepare). What it
 * leaves in job->run is the communication stage's to finish.
 */
static void compute_allreduce(scd_engine_t *e, scd_job_t *job)
{
	scd_job_run_t *run = &job->run;
	size_t esz = sc_dtype_size(job->dtype);
	if (!esz) {
		snprintf(job->error, sizeof(job->error), "rank %d: unknown dtype %u",
			 e->d->rank, job->dtype);
		log_job_error(job);
		compute_fail(job, SC_ERR_INVALID);
		return;
	}
	sc_status_t st = scd_engine_job_device(e->d->rank, job, &run->kind, &run->dev);
	if (st != SC_OK) {
		compute_fail(job, st);
		return;
	}
	const scd_device_ops_t *dev = run->dev;
	if ((st = engine_gpu_check(e, job, run->kind)) != SC_OK) {
		compute_fail(job, st);
		return;
	}
	/* in place, but an allgather (its result is larger than a trainer's input), a
	 * reduce-scatter (each trainer's result is another part of the buffer) or a tensor on
	 * another GPU than the engine's */
	if (job->n_items == 1 && job->items[0].n_src > 0 && job->op != SCD_OP_ALLGATHER &&
	    job->op != SCD_OP_ALLTOALL && !scd_op_is_reducescatter(job->op) &&
	    scd_device_at_home(run->kind, job->items[0].src[0].ordinal)) {
		run->buf = job->items[0].src[0].dense;
	} else {
		run->slot =
		    slot_acquire(e, job, run->kind, dev,
				 job->op == SCD_OP_ALLTOALL ? scd_alltoall_buffer_bytes(job)
							    : job->total_numel * esz);
		if (run->slot < 0) {
			compute_fail(job, SC_ERR_NOMEM);
			return;
		}
		run->buf = e->fusion[run->kind][run->slot];
		clear_padding(dev, job, run->buf, esz);
	}
	if ((st = trainers_ready(e, job)) != SC_OK) {
		compute_fail(job, st);
		return;
	}
	if ((st = scd_stage_reserve(&e->peer_in, dev, stage_need(job, run->kind))) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: no room on the engine GPU cuda:%d to copy the node's "
			 "sources on other GPUs over: %s",
			 e->d->rank, scd_device_home(run->kind), sc_status_message(st));
		log_job_error(job);
		compute_fail(job, st);
		return;
	}
	scd_nonfinite_t nonfinite =
	    run->kind == SCD_DEVICE_CPU ? job->nonfinite : SCD_NONFINITE_PASS;
	int L = e->d->local_size, root = scd_op_root(job->op);
	if (job->op == SCD_OP_ALLGATHER) /* gathered in the communication stage */
		;
	else if (job->op == SCD_OP_ALLTOALL) { /* the blocks out of the trainers' buffers */
		a2a_ctx_t ac = {e, dev, &job->items[0], &e->peer_in};
		scd_a2a_hooks_t h = alltoall_hooks(&ac);
		scd_alltoall_pack(job, run->buf, &h);
	} else if (scd_op_is_broadcast(job->op)) /* the root's values go out as they are */
		for (int i = 0; i < job->n_items; i++)
			local_broadcast(dev, &e->peer_in, &job->items[i], job->dtype,
					run->buf + job->items[i].offset * esz,
					root / L == e->d->rank ? root % L : -1);
	else if (!coo_direct(dev, job))
		for (int i = 0; i < job->n_items; i++) {
			uint64_t tl = scd_tl_begin();
			local_reduce(dev, &e->peer_in, &job->items[i], i, job->dtype,
				     scd_op_reduction(job->op),
				     run->buf + job->items[i].offset * esz, nonfinite,
				     &run->fault);
			scd_job_item_tl(&job->items[i], "local_sum", tl, job->dtype);
		}
	else if (nonfinite != SCD_NONFINITE_PASS) /* the scheme reads it in place: its values */
		coo_direct_nonfinite(job, nonfinite, &run->fault);
	if (e->peer_in.st != SC_OK) {
		dev->sync(); /* what failed behind the copy is this job's too */
		snprintf(job->error, sizeof(job->error), "rank %d: %s", e->d->rank,
			 e->peer_in.what);
		log_job_error(job);
		compute_fail(job, e->peer_in.st);
		return;
	}
	if (job_schemes(job) && (st = dev->sync()) == SC_OK) {
		double alpha, beta;
		scd_engine_net(e, &alpha, &beta);
		st = scd_bufctx_prepare(e->bufs, job, dev, (float *)run->buf, e->transport,
					alpha, beta, job->world_seed, &run->prep);
		if (st != SC_OK) {
			char why[480];
			memcpy(why, job->error, sizeof(why));
			why[sizeof(why) - 1] = 0;
			snprintf(job->error, sizeof(job->error), "rank %d: %.470s", e->d->rank,
				 why);
			compute_fail(job, st);
			return;
		}
	}
	/* the local sum and the selection are done (and any failure of them known) before
	 * the communication stage sends the buffer; a failure the sync before the selection
	 * returned (and cleared) is the job's too */
	if (st == SC_OK)
		st = dev->sync();
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: the %s device failed summing the node's trainers: %s",
			 e->d->rank, dev->name, device_why(dev, st));
		log_job_error(job);
		compute_fail(job, st);
	}
}

/* The communication stage of an allreduce: the network probe when due, the scheme (or the
 * typed ring), averaging and the copies out, the GPU trainers' done events. */
static void comm_allreduce(scd_engine_t *e, scd_job_t *job)
{
	scd_job_run_t *run = &job->run;
	const scd_device_ops_t *dev = run->dev;
	size_t esz = sc_dtype_size(job->dtype);
	sc_status_t st = job->probe ? probe_network(e, job->timeout_ms) : SC_OK;
	if (st != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error), "rank %d: network probe: %s",
			 e->d->rank, scd_transport_error());
		return;
	}
	int all_cuda = 0;
	if ((st = input_verdict(e, job, &run->fault, &all_cuda)) != SC_OK)
		return;
	scd_transport_t *t = e->transport;
	double alpha = e->alpha_s, beta = e->beta_s_per_byte;
	/* broadcast, allgather and reduce-scatter take the mesh, staged (the same for a job on
	 * every rank); the reductions of a buffer on a GPU on every rank (the verdict round
	 * says) the transport gpunet picks, with every rank */
	int mesh_only = scd_op_is_broadcast(job->op) || job->op == SCD_OP_ALLGATHER ||
			job->op == SCD_OP_ALLTOALL || scd_op_is_reducescatter(job->op);
	if (all_cuda && !mesh_only &&
	    (st = scd_gpunet_pick(e->gpunet, e->transport, job->timeout_ms, &t, &alpha, &beta,
				  job->error, sizeof(job->error))) != SC_OK) {
		char why[480];
		memcpy(why, job->error, sizeof(why));
		why[sizeof(why) - 1] = 0;
		job->status = st;
		snprintf(job->error, sizeof(job->error), "rank %d: %.470s", e->d->rank, why);
		log_job_error(job);
		return;
	}
	job->transport_name = t->ops->name;
	scd_transport_counters_t c0, c1;
	t->ops->counters(t, &c0);
	if (job_schemes(job))
		st = scd_bufctx_communicate(e->bufs, job, dev, (float *)run->buf, t, alpha,
					    beta, &run->prep);
	else if (scd_op_is_broadcast(job->op))
		st = broadcast_typed(e, job, dev, run->buf);
	else if (job->op == SCD_OP_ALLGATHER)
		st = allgather_typed(e, job, dev, run->buf);
	else if (scd_op_is_reducescatter(job->op))
		st = reducescatter_typed(e, job, dev, run->buf);
	else if (job->op == SCD_OP_ALLTOALL)
		st = alltoall_typed(e, job, dev, run->kind, run->buf);
	else
		st = dense_typed(e, job, dev, t, run->buf);
	t->ops->counters(t, &c1);
	job->bytes_sent = c1.bytes_sent - c0.bytes_sent;
	job->bytes_recv = c1.bytes_recv - c0.bytes_recv;
	if (st != SC_OK && t != e->transport)
		scd_gpunet_failed(e->gpunet);
	if (st != SC_OK) {
		char why[480];
		memcpy(why, job->error, sizeof(why));
		why[sizeof(why) - 1] = 0;
		job->status = st;
		snprintf(job->error, sizeof(job->error), "rank %d: %.470s", e->d->rank, why);
		return;
	}
	if (job->op == SCD_OP_ALLTOALL) { /* written in place by the exchange */
	} else if (job->op == SCD_OP_ALLGATHER) {
		const scd_job_item_t *it = &job->items[0];
		for (int s = 0; s < it->n_src; s++) {
			dev->copy(it->src[s].dense, run->buf, job->gathered * esz);
			*it->src[s].result_nnz = job->gathered;
		}
	} else if (scd_op_is_reducescatter(job->op)) {
		reducescatter_out(e, job, dev, run->buf);
	} else if (job->sparse_out && job->coo_out.nnz != SCD_RESULT_DENSE) {
		uint64_t tl = scd_tl_begin();
		sparse_out(dev, job, job->average_divisor);
		scd_job_item_tl(&job->items[0], "copy_out", tl, job->dtype);
	} else {
		for (int i = 0; i < job->n_items; i++) {
			uint64_t tl = scd_tl_begin();
			char why[300];
			st = scatter_out(dev, &job->items[i], job->dtype,
					 run->buf + job->items[i].offset * esz,
					 job->average_divisor, why, sizeof(why));
			scd_job_item_tl(&job->items[i], "copy_out", tl, job->dtype);
			if (st != SC_OK) {
				job->status = st;
				snprintf(job->error, sizeof(job->error), "rank %d: %s",
					 e->d->rank, why);
				log_job_error(job);
				return;
			}
		}
	}
	/* the trainers read their results once the job is back: they must be there (a GPU
	 * trainer's stream may instead wait on its done event, recorded behind them) */
	if ((st = trainers_done(e, job)) != SC_OK)
		return;
	if ((st = dev->sync()) != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: the %s device failed delivering the result: %s", e->d->rank,
			 dev->name, device_why(dev, st));
		log_job_error(job);
		return;
	}
}

static scd_scheme_cfg_t scheme_base(const scd_config_t *cfg);

/* The world re-formed: the buffers' state (scheme contexts, residuals) belongs to the old
 * mesh and its peers, so it goes with the old transport; every rank starts again from
 * none, as a daemon that joins anew does. The communication stage has drained. */
static sc_status_t drop_mesh(scd_engine_t *e)
{
	scd_scheme_cfg_t base = scheme_base(&e->d->cfg);
	scd_bufctx_table_destroy(e->bufs);
	e->bufs = NULL;
	pthread_mutex_lock(&e->mu);
	scd_transport_t *old = e->transport;
	e->transport = NULL;
	pthread_mutex_unlock(&e->mu);
	scd_transport_destroy(old);
	return scd_bufctx_table_create(&base, &e->bufs);
}

static void run_mesh(scd_engine_t *e, scd_job_t *job)
{
	int tmo = (int)scd_cfg_int(&e->d->cfg, SCD_CFG_join_timeout_ms);
	if (e->transport && drop_mesh(e) != SC_OK) {
		job->status = SC_ERR_NOMEM;
		snprintf(job->error, sizeof(job->error), "no memory for the buffers' state");
		return;
	}
	/* The backend logs a failure where it detects it; the status goes up unchanged. */
	scd_gpunet_reset(e->gpunet);
	scd_transport_t *t = NULL;
	sc_status_t st = scd_transport_create(&job->boot, ENGINE_SCRATCH_BYTES, tmo, &t);
	pthread_mutex_lock(&e->mu); /* scd_engine_peer_gone reads it from the loop thread */
	e->transport = t;
	pthread_mutex_unlock(&e->mu);
	if (st == SC_OK)
		st = probe_network(e, tmo);
	if (st != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error), "data plane mesh: %s",
			 scd_transport_error());
		return;
	}
	/* the cpu device's fusion buffers, ahead of the first job (another device gets its
	 * own at its first fused jobs) */
	sc_status_t fst = SC_OK;
	for (int k = 0; k < ENGINE_SLOTS && fst == SC_OK; k++)
		fst = fusion_resize(e, SCD_DEVICE_CPU, k, &scd_device_cpu_ops,
				    e->fusion_want_bytes);
	if (fst != SC_OK)
		scd_warn(SCD_SUB_ENGINE,
			 "no memory for a fusion buffer of %llu bytes yet: the first fused job "
			 "tries again",
			 (unsigned long long)e->fusion_want_bytes);
}

/* The timeline's event of one stage of a buffer, on the stage's thread's lane: the
 * scheme's and the exchanges' events nest inside the communication stage's. */
static void tl_buffer(const scd_job_t *job, const char *stage, uint64_t t0)
{
	if (!t0)
		return;
	scd_tl_arg_t a[] = {
	    {"job", NULL, (int64_t)job->seq},
	    {"tensors", NULL, job->n_items},
	    {"bytes", NULL, (int64_t)(job->total_numel * sc_dtype_size(job->dtype))},
	    {"scheme", job->status == SC_OK ? scd_scheme_name((scd_scheme_t)job->scheme) : "-",
	     0},
	    {"bytes_sent", NULL, (int64_t)job->bytes_sent},
	    {"status", sc_status_name(job->status), 0}};
	scd_tl_here(stage, t0, a, 6);
}

/* Hands a finished job to the loop thread (in order: only the communication stage, or
 * the single thread, finishes jobs). Called with e->mu held. */
static void finish_locked(scd_engine_t *e, scd_job_t *job)
{
	job->next = NULL;
	if (e->done_tail)
		e->done_tail->next = job;
	else
		e->done_head = job;
	e->done_tail = job;
	uv_async_send(&e->async);
}

/* The communication stage of any job (a passthrough has nothing to send), then its release
 * of what the compute stage held, and its hand-back. */
static void comm_job(scd_engine_t *e, scd_job_t *job)
{
	double cpu0 = scd_thread_cpu_s();
	if (!job->run.passthrough) {
		uint64_t tl = scd_tl_begin();
		comm_allreduce(e, job);
		tl_buffer(job, "buffer", tl);
	}
	scd_bufctx_release(&job->run.prep);
	job->time_s = scd_now_s() - job->run.t0;
	job->cpu_s = job->run.cpu_s + (scd_thread_cpu_s() - cpu0);
	if (job->run.slot >= 0)
		slot_release(e, job->run.kind, job->run.slot);
	if (job->run.coo_copy)
		job->run.coo_copy_dev->free(job->run.coo_copy);
	job->run.coo_copy = NULL;
	pthread_mutex_lock(&e->mu);
	finish_locked(e, job);
	pthread_mutex_unlock(&e->mu);
}

/* Waits (e->mu held) until the communication stage has nothing queued or running. */
static void drain_locked(scd_engine_t *e)
{
	while ((e->cq_head || e->comm_busy) && !e->comm_stopped)
		pthread_cond_wait(&e->cv, &e->mu);
}

/* The compute stage of any job. A mesh or forget job changes what every buffer uses (the
 * transport, the buffers' state), so it waits for the communication stage to drain. */
static void compute_job(scd_engine_t *e, scd_job_t *job)
{
	job->status = SC_OK;
	job->run = (scd_job_run_t){.slot = -1, .t0 = scd_now_s()};
	double cpu0 = scd_thread_cpu_s();
	if (job->kind != SCD_JOB_ALLREDUCE) {
		pthread_mutex_lock(&e->mu);
		drain_locked(e);
		pthread_mutex_unlock(&e->mu);
		job->run.passthrough = 1;
		if (job->kind == SCD_JOB_MESH)
			run_mesh(e, job);
		else
			scd_bufctx_forget(e->bufs, job->forget_cache_id);
	} else if (!e->transport) {
		snprintf(job->error, sizeof(job->error), "rank %d: the data plane never formed",
			 e->d->rank);
		scd_error(SCD_SUB_ENGINE, "job %llu: %s", (unsigned long long)job->seq,
			  job->error);
		job->status = SC_ERR_PEER;
		job->run.passthrough = 1; /* no transport to run the check round on */
	} else {
		uint64_t tl = scd_tl_begin();
		compute_allreduce(e, job);
		tl_buffer(job, "compress", tl);
	}
	job->compute_s = scd_now_s() - job->run.t0;
	job->run.cpu_s = scd_thread_cpu_s() - cpu0;
}

/* The compute thread: takes jobs in submission order, runs their compute stage, and
 * queues them for the communication stage (at most one waiting), or runs that too when
 * the engine is not pipelined. */
static void *engine_main(void *arg)
{
	scd_engine_t *e = arg;
	scd_tl_thread(e->pipeline ? "engine.compute" : "engine");
	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->head && !e->stop)
			pthread_cond_wait(&e->cv, &e->mu);
		if (e->stop)
			break;
		scd_job_t *job = e->head;
		e->head = job->next;
		if (!e->head)
			e->tail = NULL;
		pthread_mutex_unlock(&e->mu);
		compute_job(e, job);
		if (!e->pipeline) {
			comm_job(e, job);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		pthread_mutex_lock(&e->mu);
		while (e->cq_n >= 1 && !e->stop && !e->comm_stopped)
			pthread_cond_wait(&e->cv, &e->mu);
		job->next = NULL;
		if (e->cq_tail)
			e->cq_tail->next = job;
		else
			e->cq_head = job;
		e->cq_tail = job;
		e->cq_n++;
		pthread_cond_broadcast(&e->cv);
	}
	e->stopped = 1;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* The communication thread: the communication stage of each job, in order. */
static void *comm_main(void *arg)
{
	scd_engine_t *e = arg;
	scd_tl_thread("engine.comm");
	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->cq_head && !e->stop)
			pthread_cond_wait(&e->cv, &e->mu);
		if (e->stop)
			break;
		scd_job_t *job = e->cq_head;
		e->cq_head = job->next;
		if (!e->cq_head)
			e->cq_tail = NULL;
		e->cq_n--;
		e->comm_busy = 1;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		comm_job(e, job);
		pthread_mutex_lock(&e->mu);
		e->comm_busy = 0;
		pthread_cond_broadcast(&e->cv);
	}
	e->comm_stopped = 1;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* Loop thread: hands finished jobs back (async callbacks coalesce: drain the queue). */
static void on_async(uv_async_t *h)
{
	scd_engine_t *e = h->data;
	pthread_mutex_lock(&e->mu);
	scd_job_t *list = e->done_head;
	e->done_head = e->done_tail = NULL;
	pthread_mutex_unlock(&e->mu);
	while (list) {
		scd_job_t *next = list->next;
		e->done(e->d, list);
		list = next;
	}
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

/* The schemes' settings from the configuration's scheme keys (read once: they are not
 * runtime-changeable, and every node must have the same). */
static scd_scheme_cfg_t scheme_base(const scd_config_t *cfg)
{
	scd_scheme_cfg_t b = scd_scheme_cfg_default(0, 0);
	b.spardl_teams = (uint32_t)scd_cfg_int(cfg, SCD_CFG_spardl_teams);
	b.exdyna_blocks = (uint32_t)scd_cfg_int(cfg, SCD_CFG_exdyna_blocks);
	b.exdyna_move_blocks = (uint32_t)scd_cfg_int(cfg, SCD_CFG_exdyna_move_blocks);
	b.exdyna_alpha_permille =
	    (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_alpha));
	b.exdyna_beta_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_beta));
	b.exdyna_cap_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_cap));
	b.exdyna_grid_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_grid));
	b.exdyna_gamma = scd_cfg_num(cfg, SCD_CFG_exdyna_gamma);
	b.exdyna_fine_symmetric = (int)scd_cfg_int(cfg, SCD_CFG_exdyna_fine_symmetric);
	b.sketch_rows = (uint32_t)scd_cfg_int(cfg, SCD_CFG_sketch_rows);
	b.sketch_cols_factor = scd_cfg_num(cfg, SCD_CFG_sketch_cols);
	return b;
}

sc_status_t scd_engine_create(scd_daemon_t *d, scd_engine_done_cb done, scd_engine_t **e_p)
{
	scd_engine_t *e = calloc(1, sizeof(*e));
	if (!e)
		return SC_ERR_NOMEM;
	e->d = d;
	e->done = done;
	e->fusion_want_bytes = (uint64_t)scd_cfg_int(&d->cfg, SCD_CFG_fusion_threshold_bytes);
	scd_scheme_cfg_t base = scheme_base(&d->cfg);
	if (scd_gpunet_create(scd_cfg_str(&d->cfg, SCD_CFG_transport), d->secret.present,
			      &e->gpunet) != SC_OK) {
		free(e);
		return SC_ERR_NOMEM;
	}
	if (scd_bufctx_table_create(&base, &e->bufs) != SC_OK) {
		scd_gpunet_destroy(e->gpunet);
		free(e);
		return SC_ERR_NOMEM;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	uv_async_init(d->loop, &e->async, on_async);
	e->async.data = e;
	e->pipeline = scd_cfg_int(&d->cfg, SCD_CFG_engine_pipeline) != 0;
	e->comm_stopped = !e->pipeline;
	if (e->pipeline && pthread_create(&e->comm_thread, NULL, comm_main, e) != 0) {
		scd_bufctx_table_destroy(e->bufs);
		scd_gpunet_destroy(e->gpunet);
		uv_close((uv_handle_t *)&e->async, on_closed); /* frees e once closed */
		return SC_ERR_SYSTEM;
	}
	if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
		pthread_mutex_lock(&e->mu);
		e->stop = 1;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		if (e->pipeline)
			pthread_join(e->comm_thread, NULL);
		scd_bufctx_table_destroy(e->bufs);
		scd_gpunet_destroy(e->gpunet);
		uv_close((uv_handle_t *)&e->async, on_closed); /* frees e once closed */
		return SC_ERR_SYSTEM;
	}
	*e_p = e;
	return SC_OK;
}

void scd_engine_submit(scd_engine_t *e, scd_job_t *job)
{
	job->next = NULL;
	pthread_mutex_lock(&e->mu);
	if (e->tail)
		e->tail->next = job;
	else
		e->head = job;
	e->tail = job;
	pthread_cond_broadcast(&e->cv); /* both threads wait on cv */
	pthread_mutex_unlock(&e->mu);
}

scd_transport_t *scd_engine_transport(scd_engine_t *e)
{
	return e->transport;
}

void scd_engine_peer_gone(scd_engine_t *e, int rank)
{
	if (!e) /* no engine yet (or a harness without one) */
		return;
	pthread_mutex_lock(&e->mu);
	scd_transport_t *t = e->transport;
	if (t && t->ops->peer_gone)
		t->ops->peer_gone(t, rank);
	pthread_mutex_unlock(&e->mu);
	scd_gpunet_peer_gone(e->gpunet, rank);
}

void scd_engine_set_fusion_bytes(scd_engine_t *e, uint64_t bytes)
{
	pthread_mutex_lock(&e->mu);
	e->fusion_want_bytes = bytes;
	pthread_mutex_unlock(&e->mu);
}

sc_status_t scd_engine_destroy(scd_engine_t *e, int timeout_ms)
{
	if (!e)
		return SC_OK;
	struct timespec dl = scd_deadline_ts(timeout_ms);
	pthread_mutex_lock(&e->mu);
	e->stop = 1;
	pthread_cond_broadcast(&e->cv);
	while (!e->stopped || !e->comm_stopped)
		if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) != 0)
			break;
	int stopped = e->stopped && e->comm_stopped;
	pthread_mutex_unlock(&e->mu);
	if (!stopped)
		return SC_ERR_TIMEOUT;
	pthread_join(e->thread, NULL);
	if (e->pipeline)
		pthread_join(e->comm_thread, NULL);
	/* what the stop left queued (no trainer waits for it any more: the daemon stops) */
	scd_job_t *lists[] = {e->head, e->cq_head, e->done_head};
	for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++)
		for (scd_job_t *j = lists[k], *next; j; j = next) {
			next = j->next;
			if (j->kind == SCD_JOB_MESH)
				scd_transport_boot_clear(&j->boot);
			free(j->items);
			free(j);
		}
	e->head = e->cq_head = e->done_head = NULL;
	scd_bufctx_table_destroy(e->bufs);
	scd_gpunet_destroy(e->gpunet);
	scd_transport_destroy(e->transport);
	for (int k = 0; k < SCD_DEVICE_COUNT; k++)
		for (int j = 0; j < ENGINE_SLOTS; j++)
			fusion_free(e, (scd_device_kind_t)k, j);
	scd_stage_host_free(&e->stage);
	scd_stage_free(&e->peer_in);
	scd_stage_free(&e->peer_out);
	uv_close((uv_handle_t *)&e->async, on_closed); /* frees e */
	return SC_OK;
}
