/*
 * stage.c: a job's staging (stage.h), on the device's (device/stage.h).
 */
#include "coll/stage.h"

#include <stdio.h>

#include "util/log.h"

static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

scd_stage_src_t scd_job_stage_src(const scd_job_item_t *it, const scd_job_src_t *src)
{
	return (scd_stage_src_t){src->device, src->ordinal, src->local_rank, item_name(it)};
}

int scd_job_stage_local(const scd_stage_t *pe, const scd_job_src_t *src)
{
	return scd_stage_local(pe, src->device, src->ordinal);
}

void scd_job_stage_copy_in(scd_stage_t *pe, const scd_job_item_t *it, const scd_job_src_t *src,
			   void *dst, const void *p, size_t bytes)
{
	scd_stage_copy_in(pe, scd_job_stage_src(it, src), dst, p, bytes);
}

const void *scd_job_stage_in(scd_stage_t *pe, const scd_job_item_t *it,
			     const scd_job_src_t *src, const void *p, size_t bytes, size_t at)
{
	return scd_stage_in(pe, scd_job_stage_src(it, src), p, bytes, at);
}

sc_status_t scd_job_stage_reserve(scd_stage_t *pe, const scd_device_ops_t *dev,
				  const scd_job_t *job, scd_device_kind_t kind)
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
	return scd_stage_reserve(pe, dev, need);
}

void *scd_job_stage_host(scd_coll_stage_t *s, const scd_device_ops_t *dev, size_t bytes)
{
	return scd_stage_host_get(&s->host, dev, bytes);
}

sc_status_t scd_job_stage_scatter_out(const scd_device_ops_t *dev, const scd_job_item_t *it,
				      uint32_t dtype, void *res, double divisor, char *err,
				      size_t err_len)
{
	size_t bytes = it->numel * sc_dtype_size(dtype);
	if (it->op == SC_OP_AVERAGE)
		dev->average_typed((sc_dtype_t)dtype, res, it->numel, divisor);
	for (int s = 0; s < it->n_src; s++) {
		const scd_job_src_t *src = &it->src[s];
		if (!scd_device_at_home(src->device, src->ordinal)) {
			sc_status_t st = scd_stage_out(scd_job_stage_src(it, src), src->dense,
						       res, bytes, err, err_len);
			if (st != SC_OK)
				return st;
		} else if (src->dense != res)
			dev->copy(src->dense, res, bytes);
		if (src->result_nnz) /* asked for a sparse result, gets the dense one */
			*src->result_nnz = UINT64_MAX;
	}
	return SC_OK;
}

/* Item it's trainers' ready (done = 0) or done events (stage.h); why[len] says what
 * failed. */
static sc_status_t item_events(const scd_job_item_t *it, int done, char *why, size_t len)
{
	sc_status_t st = SC_OK;
	for (int k = 0; k < it->n_src && st == SC_OK; k++)
		st = scd_stage_event(scd_job_stage_src(it, &it->src[k]),
				     done ? it->src[k].done_ev : it->src[k].ready_ev, done, why,
				     len);
	return st;
}

sc_status_t scd_job_stage_ready_item(const scd_job_item_t *it, char *why, size_t len)
{
	return item_events(it, 0, why, len);
}

static sc_status_t trainers_events(int rank, scd_job_t *job, int done)
{
	sc_status_t st = SC_OK;
	char why[sizeof(job->error) - 32];
	for (int i = 0; i < job->n_items && st == SC_OK; i++)
		if (done || !job->items[i].ready_waited)
			st = item_events(&job->items[i], done, why, sizeof(why));
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error), "rank %d: %s", rank, why);
		job->status = st;
		scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
	}
	return st;
}

sc_status_t scd_job_stage_ready(int rank, scd_job_t *job)
{
	return trainers_events(rank, job, 0);
}

sc_status_t scd_job_stage_done(int rank, scd_job_t *job)
{
	return trainers_events(rank, job, 1);
}

const char *scd_job_stage_why(const scd_device_ops_t *dev, sc_status_t st)
{
	const char *lost = scd_device_lost(dev->kind);
	return lost ? lost : sc_status_message(st);
}

sc_status_t scd_job_stage_check(int rank, scd_job_t *job, scd_device_kind_t kind)
{
	const char *lost = scd_device_lost(kind);
	if (lost) { /* nothing of the GPU works any more: fail at once, the same every time */
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s': the GPU is lost (%s): GPU work fails until the "
			 "daemon restarts; cpu tensors are still served",
			 rank, item_name(&job->items[0]), lost);
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
			 rank, item_name(it), it->residual_ordinal, scd_device_home(kind),
			 scd_device_home(kind));
		scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
		return SC_ERR_UNSUPPORTED;
	}
	return SC_OK;
}

void scd_coll_stage_free(scd_coll_stage_t *s)
{
	scd_stage_host_free(&s->host);
	scd_stage_free(&s->peer_in);
	scd_stage_free(&s->peer_out);
}
