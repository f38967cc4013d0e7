/*
 * jobview.c: the engine's view of a node's shared buffers (ctl.h): a planned tensor's job
 * item filled from every submitted trainer's registration, and a selection job's at
 * submission (coll/presel.h).
 */
#include "ctl/ctl.h"
#include "ctl/ctl_int.h"

#include <string.h>

#include "coll/job.h"
#include "util/timeline.h"

static void fill_srcs(scd_ctl_t *ctl, scd_ntensor_t *nt, scd_job_item_t *it);

sc_status_t scd_ctl_job_item(scd_ctl_t *ctl, const char *name, uint32_t dtype, uint64_t numel,
			     scd_job_item_t *it)
{
	scd_ntensor_t *nt = scd_tensors_find(ctl->tensors, name);
	if (!nt || nt->state != SCD_NT_ANNOUNCED || nt->numel != numel ||
	    scd_ntensor_typeword(nt) != dtype)
		return SC_ERR_NOT_FOUND;
	it->presel_token = nt->presel_armed ? nt->presel_token : 0;
	nt->presel_armed = 0;
	fill_srcs(ctl, nt, it);
	nt->state = SCD_NT_RUNNING;
	nt->state_since_ms = scd_now_ms();
	/* the timeline's wait for the other ranks: announced until planned here */
	scd_tl_arg_t ta[] = {{"step", NULL, (int64_t)nt->stats.calls + 1},
			     {"numel", NULL, (int64_t)numel}};
	scd_tl_tensor(nt->name, "wait_ranks", nt->tl_announced, ta, 2);
	nt->tl_announced = 0;
	return SC_OK;
}

void scd_ctl_presel_item(scd_ctl_t *ctl, scd_ntensor_t *nt, scd_job_item_t *it)
{
	/* unique over the node's tensors, those registered again included: a selection
	 * left in the engine by an earlier registration of the name never matches */
	static uint64_t seq, keys;
	if (!nt->presel_key)
		nt->presel_key = ++keys;
	nt->presel_armed = 1;
	nt->presel_refs++;
	it->presel_token = nt->presel_token = ++seq;
	fill_srcs(ctl, nt, it);
}

void scd_ctl_presel_done(scd_ctl_t *ctl, scd_ntensor_t *nt)
{
	if (--nt->presel_refs > 0)
		return;
	/* registrations released while the selection read them, and that no operation in
	 * flight holds either (those go with its completion) */
	scd_reg_t *gone[SCD_MAX_LOCAL];
	int n = 0;
	for (int l = 0; l < SCD_MAX_LOCAL; l++)
		if (nt->slot[l] && nt->slot[l]->zombie && !nt->slot[l]->handle)
			gone[n++] = nt->slot[l];
	for (int i = 0; i < n; i++)
		scd_tensors_release(ctl->tensors, gone[i]); /* may free nt */
}

/* The item's tensor, options and every submitted trainer's buffer and COO area. */
static void fill_srcs(scd_ctl_t *ctl, scd_ntensor_t *nt, scd_job_item_t *it)
{
	const scd_coll_desc_t *coll = scd_coll_desc(nt->coll.kind);
	it->nt = nt;
	it->name = nt->name;
	it->presel_key = nt->presel_key;
	it->sparsifier = nt->opts.sparsifier;
	it->density = nt->opts.density;
	it->threshold = nt->opts.threshold;
	it->sketch_rows = nt->opts.sketch_rows;
	it->sketch_cols = nt->opts.sketch_cols;
	it->block = nt->opts.block;
	it->coo_capacity = nt->opts.coo_capacity;
	it->residual = nt->slot[0] ? nt->slot[0]->residual : NULL;
	/* numbered across the node's tensors: a new registration's first job follows no
	 * buffer's state */
	if (it->residual) {
		it->residual_prev = nt->residual_last;
		it->residual_seq = nt->residual_last = ++ctl->residual_seq;
	}
	it->residual_ordinal = nt->slot[0] ? (int)nt->slot[0]->device_ordinal : 0;
	it->numel = nt->numel;
	for (int l = 0; l < ctl->d->local_size; l++) {
		scd_reg_t *r = nt->slot[l];
		if (!r || !r->handle)
			continue;
		scd_job_src_t *s = &it->src[it->n_src++];
		*s = (scd_job_src_t){0}; /* the items' sources come uncleared (coll/job.h) */
		/* shared memory, or the daemon's GPU memory the trainer maps by CUDA IPC */
		s->device = r->device_kind == SC_DEVICE_CUDA ? SCD_DEVICE_CUDA : SCD_DEVICE_CPU;
		s->ready_ev = r->ready_ev;
		s->done_ev = r->done_ev;
		s->ordinal = (int)r->device_ordinal;
		s->local_rank = l;
		s->dense = r->data;
		s->coo = r->coo;
		/* an alltoall's counts, as the trainer gave them (a2a_n 0: none) */
		s->a2a = r->a2a;
		s->a2a_n = r->a2a_n;
		s->a2a_bad = r->a2a_bad;
		s->a2a_given = r->a2a_given;
		s->a2a_sum = r->a2a_sum;
		if (coll->fill_src)
			coll->fill_src(s, r->nnz, &r->hdr->result_nnz);
		/* a success the header can tell (ctl.c, complete_in_header) */
		if (scd_reg_header_tells(r) && !coll->counts_back) {
			s->done_hdr = r->hdr;
			s->done_handle = r->handle;
			s->done_guard = r->map ? r->guard : UINT32_MAX;
		}
		if (r->coo) {
			/* the daemon's own layout: the trainer can write the header */
			s->coo_idx = r->coo_idx;
			s->coo_val = r->coo_val;
			s->coo_nnz = r->nnz;
			s->coo_cap = r->coo_cap;
			s->result_nnz = r->sparse_result ? &r->hdr->result_nnz : NULL;
		}
	}
}
