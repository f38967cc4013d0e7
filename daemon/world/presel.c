/*
 * presel.c: the selection jobs at submission (coll/presel.h, docs/design.md "Fusion
 * plans"). When every local trainer has submitted a sparsified tensor, the node queues a
 * selection job for it, before the coordinator has planned its buffer: the engine sums
 * and selects the tensor while the trainers are still producing the next ones. Only what
 * the buffer's sparsification ahead would select qualifies: a float32 sum or average over
 * a 32-bit wire, with a top-k, threshold, DGC or block top-K sparsifier, dense or COO
 * input, every trainer's on one device (host memory or GPUs). A tensor the response
 * cache knows with the options it has now is selected with the cache's options under its
 * cache id; one it does not know (its first step, or its options changed) speculatively
 * with its own (coll/presel.h), but not with DGC.
 */
#include <stdlib.h>

#include "coll/bufctx.h"
#include "coll/presel.h"
#include "ctl/ctl.h"
#include "ctl/tensor.h"
#include "engine/engine.h"
#include "util/log.h"
#include "world/world_int.h"

void scd_world_presel(scd_world_t *w, scd_ntensor_t *nt, uint32_t id, const scd_tsig_t *own)
{
	scd_daemon_t *d = w->d;
	int spec = id == SCD_PRESEL_SPEC;
	const scd_cache_ent_t *c = spec ? NULL : scd_cache_get(w, id);
	uint32_t dtype = c ? c->dtype : scd_ntensor_typeword(nt);
	uint64_t numel = c ? c->numel : nt->numel;
	const scd_tsig_t *sig = c ? &c->sig : own;
	scd_sparsify_kind_t kind;
	if (!scd_cfg_int(&d->cfg, SCD_CFG_sparsify_on_submit) || !d->engine ||
	    nt->coll.kind != SCD_COLL_ALLREDUCE ||
	    (nt->coll.op != SC_OP_SUM && nt->coll.op != SC_OP_AVERAGE) ||
	    scd_tw_dtype(dtype) != SC_FLOAT32 || scd_tw_wire(dtype) ||
	    !scd_sparsify_kind_of(sig->sparsifier, &kind) || (spec && kind == SCD_SPARSIFY_DGC))
		return;
	scd_job_t *job = calloc(1, sizeof(*job));
	scd_job_item_t *it = job ? scd_job_items_new(1) : NULL;
	if (!it) { /* the buffer selects it as before */
		free(job);
		scd_warn(SCD_SUB_NEGOTIATE, "no memory to select tensor '%s' at submission",
			 nt->name);
		return;
	}
	job->kind = SCD_JOB_PRESELECT;
	job->items = it;
	job->n_items = 1;
	job->dtype = SC_FLOAT32;
	job->coll = (scd_coll_t){.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM};
	job->total_numel = numel;
	job->world_seed = w->world_id;
	job->nonfinite = scd_nonfinite_parse(scd_cfg_str(&d->cfg, SCD_CFG_nonfinite));
	job->timeout_ms = (int)scd_cfg_int(&d->cfg, SCD_CFG_op_timeout_ms);
	it->cache_id = id;
	it->op = SC_OP_SUM;
	scd_ctl_presel_item(d->ctl, nt, it);
	scd_neg_item_options(it, sig);
	if (!scd_presel_applies(it)) {
		nt->presel_armed = 0;
		scd_ctl_presel_done(d->ctl, nt); /* may free nt */
		free(it);
		free(job);
		return;
	}
	scd_engine_submit(d->engine, job);
}

void scd_world_presel_done(scd_world_t *w, scd_job_t *job)
{
	if (job->items[0].nt)
		scd_ctl_presel_done(w->d->ctl, job->items[0].nt);
	free(job->items);
	free(job);
}
