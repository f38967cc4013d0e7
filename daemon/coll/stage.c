/*
 * stage.c: the engine's staging (stage.h): host staging, copies between GPUs, and the GPU
 * trainers' events.
 */
#include "coll/stage.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"

/* The name of an item's tensor, for errors. */
static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

/* pe, which only one thread ever uses (an internal invariant: see scd_peer_t). */
scd_peer_t *scd_peer_mine(scd_peer_t *pe)
{
	if (!pe->owned) {
		pe->user = pthread_self();
		pe->owned = 1;
	}
	assert(pthread_equal(pe->user, pthread_self()));
	return pe;
}

/* Whether the engine's kernels may read src where it lies. */
int scd_peer_local(const scd_peer_t *pe, const scd_job_src_t *src)
{
	return !pe->ipc || src->device != SCD_DEVICE_CUDA || src->ordinal == pe->engine;
}

/* bytes of src at p, copied to dst on the engine GPU; the first failure is kept. */
void scd_peer_copy_in(scd_peer_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
		      void *dst, const void *p, size_t bytes)
{
	sc_status_t st =
	    scd_peer_mine(pe)->ipc->copy_peer(dst, pe->engine, p, src->ordinal, bytes);
	if (st != SC_OK && pe->st == SC_OK) {
		pe->st = st;
		snprintf(
		    pe->what, sizeof(pe->what),
		    "tensor '%s', local rank %d: copying its %zu bytes from cuda:%d to the "
		    "engine GPU cuda:%d: %s",
		    item_name(it), src->local_rank, bytes, src->ordinal, pe->engine,
		    pe->ipc->error());
	}
}

/* src's bytes at p where the engine's kernels may read them: p itself, or a copy in the
 * staging area from offset at (room made by peer_reserve). */
const void *scd_peer_in(scd_peer_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
			const void *p, size_t bytes, size_t at)
{
	if (scd_peer_local(pe, src))
		return p;
	scd_peer_copy_in(pe, it, src, pe->buf + at, p, bytes);
	return pe->buf + at;
}

/* Readies pe for the job: whether any source is on another GPU than the engine's, and a
 * staging area on the engine GPU for the largest of them (grow-only). */
sc_status_t scd_peer_reserve(scd_peer_t *pe, const scd_device_ops_t *dev, scd_job_t *job,
			     scd_device_kind_t kind)
{
	size_t need = 0, esz = sc_dtype_size(job->dtype);
	int off = 0;
	scd_peer_mine(pe)->ipc = NULL;
	pe->st = SC_OK;
	if (kind != SCD_DEVICE_CUDA)
		return SC_OK;
	pe->engine = scd_cuda_engine();
	for (int i = 0; i < job->n_items; i++)
		for (int s = 0; s < job->items[i].n_src; s++) {
			const scd_job_src_t *src = &job->items[i].src[s];
			if (src->ordinal == pe->engine)
				continue;
			size_t b = src->coo ? ((src->coo_nnz * 4 + 63) & ~(size_t)63) +
						  src->coo_nnz * 4
					    : job->items[i].numel * esz;
			need = b > need ? b : need;
			off = 1;
		}
	if (!off)
		return SC_OK;
	sc_status_t st = scd_cuda_ipc_get(&pe->ipc);
	if (st != SC_OK)
		return st;
	if (pe->cap >= need && pe->dev == dev)
		return SC_OK;
	if (pe->buf)
		pe->dev->free(pe->buf);
	pe->dev = dev;
	pe->buf = dev->alloc(need);
	pe->cap = pe->buf ? need : 0;
	return pe->buf ? SC_OK : SC_ERR_NOMEM;
}

/* Host memory for staging bytes of dev's buffer through the transport (grow-only). */
void *scd_stage_get(scd_stage_t *e, const scd_device_ops_t *dev, size_t bytes)
{
	if (e->stage && e->stage_dev == dev && e->stage_cap >= bytes)
		return e->stage;
	if (e->stage)
		scd_device_stage_free(e->stage_dev, e->stage);
	e->stage = scd_device_stage_alloc(dev, bytes);
	e->stage_dev = dev;
	e->stage_cap = e->stage ? bytes : 0;
	return e->stage;
}

/* Averages where the item asks for it and copies the result to every local trainer's
 * buffer (to a trainer on another GPU than the engine's, from GPU to GPU). */
sc_status_t scd_stage_scatter_out(const scd_device_ops_t *dev, const scd_job_item_t *it,
				  uint32_t dtype, void *res, double divisor, char *err,
				  size_t err_len)
{
	const scd_cuda_ipc_t *ipc = NULL;
	size_t bytes = it->numel * sc_dtype_size(dtype);
	if (it->op == SC_OP_AVERAGE)
		dev->average_typed((sc_dtype_t)dtype, res, it->numel, divisor);
	for (int s = 0; s < it->n_src; s++) {
		const scd_job_src_t *src = &it->src[s];
		sc_status_t st = SC_OK;
		if (src->device == SCD_DEVICE_CUDA && src->ordinal != scd_cuda_engine()) {
			if (!ipc)
				st = scd_cuda_ipc_get(&ipc);
			if (st == SC_OK)
				st = ipc->copy_peer(src->dense, src->ordinal, res,
						    scd_cuda_engine(), bytes);
			if (st != SC_OK) {
				snprintf(
				    err, err_len,
				    "tensor '%s', local rank %d: copying the result to its "
				    "cuda:%d: %s",
				    item_name(it), src->local_rank, src->ordinal,
				    ipc ? ipc->error() : sc_status_message(st));
				return st;
			}
		} else if (src->dense != res)
			dev->copy(it->src[s].dense, res, bytes);
		if (it->src[s].result_nnz) /* asked for a sparse result, gets the dense one */
			*it->src[s].result_nnz = UINT64_MAX;
	}
	return SC_OK;
}

/* The engine's stream waits for what each GPU trainer queued before it submitted (its ready
 * event), or marks where the result is complete (its done event). A failure names the
 * tensor and the trainer's local rank. */
static sc_status_t trainers_events(int rank, scd_job_t *job, scd_device_kind_t kind, int done)
{
	const scd_cuda_ipc_t *ipc;
	if (kind != SCD_DEVICE_CUDA)
		return SC_OK;
	sc_status_t st = scd_cuda_ipc_get(&ipc);
	for (int i = 0; i < job->n_items && st == SC_OK; i++) {
		scd_job_item_t *it = &job->items[i];
		for (int k = 0; k < it->n_src && st == SC_OK; k++) {
			void *ev = done ? it->src[k].done_ev : it->src[k].ready_ev;
			if (!ev)
				continue;
			st = done ? ipc->event_record(it->src[k].ordinal, ev)
				  : ipc->stream_wait_event(ev);
			if (st != SC_OK)
				snprintf(job->error, sizeof(job->error),
					 "rank %d: tensor '%s', local rank %d: its %s event: "
					 "%s",
					 rank, it->name ? it->name : "?", it->src[k].local_rank,
					 done ? "done" : "ready", ipc->error());
		}
	}
	if (st != SC_OK) {
		job->status = st;
		scd_error(SCD_SUB_ENGINE, "job %llu: %s", (unsigned long long)job->seq,
			  job->error);
	}
	return st;
}

sc_status_t scd_stage_trainers_ready(int rank, scd_job_t *job, scd_device_kind_t kind)
{
	return trainers_events(rank, job, kind, 0);
}

sc_status_t scd_stage_trainers_done(int rank, scd_job_t *job, scd_device_kind_t kind)
{
	return trainers_events(rank, job, kind, 1);
}

/* Why dev's sync failed with st: the fault that lost the GPU where there is one (the
 * device's first failure was logged where it was seen), else st's message. */
const char *scd_stage_device_why(const scd_device_ops_t *dev, sc_status_t st)
{
	const char *lost = strcmp(dev->name, "cuda") ? NULL : scd_cuda_lost();
	return lost ? lost : sc_status_message(st);
}

/* The scheme's kernels read the node's residual where it lies: a cuda tensor's must be on
 * the engine GPU (local rank 0's registration holds it). */
sc_status_t scd_stage_gpu_check(int rank, scd_job_t *job, scd_device_kind_t kind)
{
	const char *lost = kind == SCD_DEVICE_CUDA ? scd_cuda_lost() : NULL;
	if (lost) { /* nothing of the GPU works any more: fail at once, the same every time */
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s': the GPU is lost (%s): GPU work fails until the "
			 "daemon restarts; cpu tensors are still served",
			 rank, item_name(&job->items[0]), lost);
		return SC_ERR_SYSTEM;
	}
	for (int i = 0; i < job->n_items && kind == SCD_DEVICE_CUDA; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (!it->residual || it->residual_ordinal == scd_cuda_engine())
			continue;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s': its error-feedback residual is local rank 0's, "
			 "on cuda:%d, and this daemon's engine sums on cuda:%d (cuda_device): "
			 "local rank 0 registers it on cuda:%d",
			 rank, item_name(it), it->residual_ordinal, scd_cuda_engine(),
			 scd_cuda_engine());
		scd_error(SCD_SUB_ENGINE, "job %llu: %s", (unsigned long long)job->seq,
			  job->error);
		return SC_ERR_UNSUPPORTED;
	}
	return SC_OK;
}

int scd_stage_engine_gpu(void)
{
	return scd_cuda_engine();
}

int scd_stage_src_on_engine(const scd_job_src_t *src)
{
	return src->device != SCD_DEVICE_CUDA || src->ordinal == scd_cuda_engine();
}

void scd_stage_free(scd_stage_t *s)
{
	if (s->stage)
		scd_device_stage_free(s->stage_dev, s->stage);
	if (s->peer_in.buf)
		s->peer_in.dev->free(s->peer_in.buf);
	if (s->peer_out.buf)
		s->peer_out.dev->free(s->peer_out.buf);
	*s = (scd_stage_t){0};
}
