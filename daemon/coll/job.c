/*
 * job.c: what a job knows of itself (job.h): the device it runs on, and its process set's
 * trainers in set rank order.
 */
#include "coll/job.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheme/registry.h"
#include "util/log.h"
#include "util/timeline.h"

/* The name of an item's tensor, for errors. */
static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

scd_job_item_t *scd_job_items_new(size_t n)
{
	if (!n)
		n = 1;
	if (n > SIZE_MAX / sizeof(scd_job_item_t))
		return NULL;
	scd_job_item_t *it = malloc(n * sizeof(*it));
	for (size_t i = 0; it && i < n; i++)
		memset(&it[i], 0, offsetof(scd_job_item_t, src));
	return it;
}

/* See job.h. */
sc_status_t scd_job_device(int rank, scd_job_t *job, scd_device_kind_t *kind_p,
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
				scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job),
					  job->error);
				return SC_ERR_UNSUPPORTED;
			}
		}
	}
	if ((unsigned)kind >= SCD_DEVICE_COUNT || scd_device_get(kind, dev_p) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s' is on the %s device, which this daemon does not "
			 "have",
			 rank, first ? item_name(first) : "?", scd_device_kind_name(kind));
		scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
		return SC_ERR_UNSUPPORTED;
	}
	*kind_p = kind;
	return SC_OK;
}

/* Zeroes what no item of the job covers in its fusion buffer (the alignment gaps between
 * items and the tail): a slot keeps whatever an earlier buffer of another layout left
 * there, and the schemes run over the whole buffer, so that padding must read zeros. */
void scd_job_clear_padding(const scd_device_ops_t *dev, const scd_job_t *job, char *buf,
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

/* See job.h. */
int scd_job_trainers(const scd_job_t *job, int P, int L)
{
	return job->set_ranks ? job->n_set_ranks : P * L;
}

/* See job.h. The set ranks below view rank q's node's first trainer. */
int scd_job_first_trainer(const scd_job_t *job, int q, int P, int L)
{
	if (!job->set_ranks)
		return q * L;
	if (q >= P)
		return job->n_set_ranks;
	int below = scd_job_node(job, q) * L, lo = 0, hi = job->n_set_ranks;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (job->set_ranks[mid] < below)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* See job.h. */
int scd_job_set_rank(const scd_job_t *job, int q, int l, int L)
{
	if (l < 0 || l >= L)
		return -1;
	if (!job->set_ranks)
		return q * L + l;
	int g = scd_job_node(job, q) * L + l;
	for (int s = scd_job_first_trainer(job, q, job->n_nodes, L);
	     s < job->n_set_ranks && job->set_ranks[s] <= g; s++)
		if (job->set_ranks[s] == g)
			return s;
	return -1;
}

/* See job.h. */
int scd_job_global_rank(const scd_job_t *job, int s, int L)
{
	if (job->set_ranks)
		return s >= 0 && s < job->n_set_ranks ? job->set_ranks[s] : -1;
	return scd_job_node(job, s / L) * L + s % L;
}

/* See job.h. */
const char *scd_job_trainer_name(const scd_job_t *job, int s, int L, char *buf, size_t len)
{
	if (!job->nodes)
		snprintf(buf, len, "rank %d", s);
	else
		snprintf(buf, len, "rank %d (set rank %d)", scd_job_global_rank(job, s, L), s);
	return buf;
}

/* See job.h. */
sc_status_t scd_job_set_check(const scd_job_t *job, int L, char *err, size_t len)
{
	if (!job->set_ranks && (!job->nodes || job->average_divisor == job->n_nodes * L))
		return SC_OK;
	int ok = job->set_ranks && job->nodes && job->n_nodes > 0 && job->n_set_ranks > 0 &&
		 job->n_set_ranks == (int)job->average_divisor && L > 0;
	for (int s = 0, q = 0; ok && s < job->n_set_ranks; s++) {
		int g = job->set_ranks[s];
		ok = g >= 0 && (!s || g > job->set_ranks[s - 1]);
		/* every node holds a member: the next member is on this node or the next */
		if (ok && g / L != job->nodes[q])
			ok = s && ++q < job->n_nodes && g / L == job->nodes[q];
		ok = ok && (s < job->n_set_ranks - 1 || q == job->n_nodes - 1);
	}
	if (ok)
		return SC_OK;
	snprintf(err, len,
		 "process set %u: its %d trainers do not lie on its %d nodes, %d trainers a "
		 "node, one or more each",
		 job->pset, (int)job->average_divisor, job->n_nodes, L);
	return SC_ERR_INVALID;
}

/* See job.h. */
const char *scd_job_name(const scd_job_t *job, char *buf, size_t len)
{
	if (scd_job_fast(job))
		snprintf(buf, len, "epoch %llu turn %llu", (unsigned long long)job->fast.epoch,
			 (unsigned long long)job->fast.turn);
	else
		snprintf(buf, len, "job %llu", (unsigned long long)job->seq);
	return buf;
}

/* See job.h. */
void scd_job_tl(const scd_job_t *job, const char *stage, uint64_t t0)
{
	if (!t0)
		return;
	scd_tl_arg_t a[] = {
	    /* a fast turn's name (no plan numbers it) */
	    {"job", scd_job_fast(job) ? SCD_JOB_NAME(job) : NULL, (int64_t)job->seq},
	    {"tensors", NULL, job->n_items},
	    {"bytes", NULL, (int64_t)(job->total_numel * sc_dtype_size(job->dtype))},
	    {"scheme", job->status == SC_OK ? scd_scheme_name((scd_scheme_t)job->scheme) : "-",
	     0},
	    {"bytes_sent", NULL, (int64_t)job->bytes_sent},
	    {"status", sc_status_name(job->status), 0}};
	scd_tl_here(stage, t0, a, 6);
}
