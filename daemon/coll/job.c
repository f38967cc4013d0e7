/*
 * job.c: what a job knows of itself (job.h): the device it runs on.
 */
#include "coll/job.h"

#include <stdio.h>

#include "util/log.h"

/* The name of an item's tensor, for errors. */
static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
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
				scd_error(SCD_SUB_ENGINE, "job %llu: %s",
					  (unsigned long long)job->seq, job->error);
				return SC_ERR_UNSUPPORTED;
			}
		}
	}
	if ((unsigned)kind >= SCD_DEVICE_COUNT || scd_device_get(kind, dev_p) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: tensor '%s' is on the %s device, which this daemon does not "
			 "have",
			 rank, first ? item_name(first) : "?", scd_device_kind_name(kind));
		scd_error(SCD_SUB_ENGINE, "job %llu: %s", (unsigned long long)job->seq,
			  job->error);
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
