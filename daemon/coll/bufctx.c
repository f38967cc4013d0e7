/*
 * bufctx.c: per-buffer scheme state and one step of a buffer (see bufctx.h). The table is
 * a small array searched linearly (buffers are few: the distinct fused groups of a job)
 * with the least recently used entry evicted past SCD_BUFCTX_MAX.
 */
#include "coll/bufctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/presel.h"
#include "device/select.h"
#include "util/clock.h"
#include "util/log.h"

#define SCD_BUFCTX_MAX 256
/* An unmeasured scheme is tried only when its prediction beats the best measured one by
 * this factor: near-ties are not worth a step on a scheme that may well be slower. */
#define SCD_EXPLORE_MARGIN 1.25
/* At most this many schemes are ever tried per buffer (each try costs about two steps),
 * and only in its first SCD_EXPLORE_STEPS steps: after that only measured schemes compete,
 * so the choice settles and a late try cannot stall a running job (a try's first run
 * pays for its workspaces and tables: Balanced Parallelism's first step on a 256 MiB
 * tensor at 8 nodes took 8.8 s, and a try that started after 25 steps of top-k put
 * steps of other schemes among SparDL's). */
#define SCD_EXPLORE_SCHEMES 4
#define SCD_EXPLORE_STEPS   16
/* A measured scheme replaces the current one only when predicted this much faster. */
#define SCD_SWITCH_GAIN 0.9
/* Plain dense buffers below this size are latency-bound: no sparse scheme can win there,
 * so they skip the scheme layer's metadata round and go straight to the ring. */
#define SCD_SMALL_DENSE_BYTES (64u << 10)
/* Up to this size a small buffer is summed in one round: every rank sends it whole to every
 * other rank (P - 1 messages in one exchange) and adds the P copies in rank order, so the
 * bits agree everywhere. A ring needs 2 (P - 1) rounds, and at this size rounds are all
 * that costs. */
#define SCD_ONE_ROUND_BYTES (16u << 10)
/* A rank's slot in the one-round exchange: its words (coll/job.h: the input check's, and a
 * fast turn's after them), then its buffer; the workspace holds P of the largest. */
#define ONE_ROUND_SLOT_MAX ((size_t)SCD_VERDICT_BYTES + SCD_FAST_BYTES + SCD_ONE_ROUND_BYTES)
/* A tensor alone in its buffer hands its selection to the scheme as COO, with no fusion;
 * its fusion time (what clearing its slice and scattering its selection costs, which the
 * planner weighs when it considers fusing it) is measured on its first this-many steps
 * alone, and reported from that average afterwards. */
#define SCD_ALONE_FUSE_RUNS 3

typedef struct scd_bufctx {
	uint64_t sig;
	uint64_t numel;
	const scd_device_ops_t *dev; /* of the buffer's tensors: its state lives there */
	int n_items;
	uint32_t *cache_ids;
	scd_scheme_ctx_t *sctx;
	scd_scheme_profile_t prof;
	/* calibration: measured / predicted time per scheme (see calibrate(), choose()) */
	double ratio[SCD_SCHEME_COUNT];
	uint32_t samples[SCD_SCHEME_COUNT];
	double window[SCD_SCHEME_COUNT][SCD_CALIB_WINDOW];
	uint64_t steps; /* steps this buffer ran with the cost model's choice */
	int last_scheme;
	double last_pred_s;
	int natural;	     /* some tensor is declared naturally sparse */
	double alone_tb_s;   /* a lone sparsified tensor's fusion time, averaged */
	uint32_t alone_runs; /* steps it was measured on (SCD_ALONE_FUSE_RUNS) */
	/* per item, NULL until the item is first selected at the buffer (spcfg[i].numel > 0:
	 * it is sparsified; a buffer whose tensors were all selected at submission never
	 * makes them, nor their workspaces) */
	scd_sparsifier_t **sp;
	scd_sparsifier_cfg_t *spcfg;
	scd_coo_t sel; /* selection workspace, capacity = largest sparsified item */
	scd_coo_t cat; /* the buffer's selections concatenated (host memory; fuse_as_list) */
	scd_coo_t out; /* the result of a run on cat, as COO (fused_result) */
	/* a COO tensor's residual kept sparse (fold_residual): a bit per element where it
	 * may be non-zero, valid when rknown; the input with the residual folded in */
	uint64_t *rbits;
	uint64_t rcount; /* at least the bits set */
	int rknown;
	const float *rres; /* the residual the bitmap is of */
	uint64_t rres_seq; /* and the job number then (scd_job_item_t.residual_seq) */
	scd_coo_t fold;
	/* a buffer of several tensors that lossy schemes may run on: what the scheme did not
	 * deliver, over the whole buffer, split back into each tensor's residual after it */
	float *bres;
	int bres_zero; /* bres is all zeros (a tracked run's additions were taken back) */
	uint64_t last_use;
	int inflight;		/* prepared, not yet released: never evicted meanwhile */
	int stale;		/* the ranks' states differed: made anew on its next step */
	int net_fixed;		/* the scheme context has the network costs of its first run */
	scd_transport_t *net_t; /* the transport the scheme context last ran over */
	uint64_t
	    net_serial; /* and its serial (a communicator made anew may reuse the address) */
} scd_bufctx_t;

struct scd_bufctx_table {
	scd_bufctx_t *v[SCD_BUFCTX_MAX];
	int n;
	uint64_t clock;
	/* one-round allreduces: P slots of ONE_ROUND_SLOT_MAX bytes in gather_dev's memory (the
	 * host's for a device whose memory the host cannot touch), and the transfer lists
	 * (sends then recvs, P each), grown with P */
	char *gather;
	const scd_device_ops_t *gather_dev;
	int gather_ranks;
	scd_xfer_t *xfers;
	int xfer_ranks;
	scd_scheme_cfg_t base; /* the schemes' settings (numel and seed set per buffer) */
};

sc_status_t scd_bufctx_table_create(const scd_scheme_cfg_t *base, scd_bufctx_table_t **tab_p)
{
	*tab_p = calloc(1, sizeof(**tab_p));
	if (!*tab_p)
		return SC_ERR_NOMEM;
	(*tab_p)->base = base ? *base : scd_scheme_cfg_default(0, 0);
	return SC_OK;
}

/* Frees p, in dev's memory, when there is one. */
static void dev_free(const scd_device_ops_t *dev, void *p)
{
	if (p)
		dev->free(p);
}

static void bufctx_free(scd_bufctx_t *b)
{
	if (!b)
		return;
	scd_scheme_ctx_destroy(b->sctx);
	for (int i = 0; b->sp && i < b->n_items; i++)
		if (b->sp[i])
			b->dev->sparsifier_destroy(b->sp[i]);
	free(b->sp);
	free(b->spcfg);
	free(b->cache_ids);
	dev_free(b->dev, b->sel.idx);
	dev_free(b->dev, b->sel.val);
	dev_free(b->dev, b->rbits);
	dev_free(b->dev, b->fold.idx);
	dev_free(b->dev, b->fold.val);
	dev_free(b->dev, b->bres);
	free(b->cat.idx);
	free(b->cat.val);
	free(b->out.idx);
	free(b->out.val);
	free(b);
}

void scd_bufctx_table_destroy(scd_bufctx_table_t *tab)
{
	if (!tab)
		return;
	if (tab->gather)
		tab->gather_dev->free(tab->gather);
	free(tab->xfers);
	for (int i = 0; i < tab->n; i++)
		bufctx_free(tab->v[i]);
	free(tab);
}

void scd_bufctx_forget(scd_bufctx_table_t *tab, uint32_t cache_id)
{
	for (int i = 0; i < tab->n;) {
		scd_bufctx_t *b = tab->v[i];
		int holds = 0;
		for (int k = 0; k < b->n_items && !holds; k++)
			holds = b->cache_ids[k] == cache_id;
		if (holds) {
			bufctx_free(b);
			tab->v[i] = tab->v[--tab->n];
		} else {
			i++;
		}
	}
}

/* The signature of a buffer: its process set and the set's nodes, its tensors' cache ids
 * and sizes, identical on every rank. A set's buffers are its own, and a set whose nodes
 * changed starts its buffers' state (the profile and calibration every member must hold
 * alike) afresh on every member. */
static uint64_t job_sig(const scd_job_t *job)
{
	uint64_t h = scd_job_place_hash(job);
	for (int i = 0; i < job->n_items; i++) {
		h = (h ^ job->items[i].cache_id) * 1099511628211ull;
		h = (h ^ job->items[i].numel) * 1099511628211ull;
	}
	return h;
}

/* Logs a failure detected here, or reported by a device op (device ops do not log), once,
 * here; the engine and the loop thread pass job->error on. Failures of the transport and
 * the schemes were logged where they were detected. */
static void log_step_error(const scd_job_t *job)
{
	scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
}

int scd_sparsify_kind_of(uint32_t s, scd_sparsify_kind_t *k_p)
{
	switch (s) {
	case SC_SPARSIFY_TOPK:
		*k_p = SCD_SPARSIFY_TOPK;
		return 1;
	case SC_SPARSIFY_THRESHOLD:
		*k_p = SCD_SPARSIFY_THRESHOLD;
		return 1;
	case SC_SPARSIFY_DGC:
		*k_p = SCD_SPARSIFY_DGC;
		return 1;
	case SC_SPARSIFY_BLOCK_TOPK:
		*k_p = SCD_SPARSIFY_BLOCK_TOPK;
		return 1;
	default:
		return 0; /* none, natural (sent as is), ExDyna (the scheme selects) */
	}
}

/* Says in job->error, and logs, that item it's sparsifier (settings cfg) could not be
 * made. */
static void sparsifier_failed(scd_job_t *job, const scd_job_item_t *it,
			      const scd_sparsifier_cfg_t *cfg, sc_status_t st)
{
	char what[96];
	if (cfg->kind == SCD_SPARSIFY_THRESHOLD)
		snprintf(what, sizeof(what), "threshold %g, %g as float32", it->threshold,
			 (double)cfg->threshold);
	else
		snprintf(what, sizeof(what), "density %g", it->density);
	snprintf(job->error, sizeof(job->error),
		 "tensor '%s': its %s sparsifier cannot be made (%s): %s",
		 it->name ? it->name : "?", scd_sparsify_kind_name(cfg->kind), what,
		 sc_status_message(st));
	log_step_error(job);
}

/* Item i's sparsifier, made on its first use (a buffer's items selected at submission
 * never need theirs); NULL, with job->error set, when it cannot be made. */
static sc_status_t item_sparsifier(scd_bufctx_t *b, scd_job_t *job, int i)
{
	if (b->sp[i])
		return SC_OK;
	sc_status_t st = b->dev->sparsifier_create(&b->spcfg[i], &b->sp[i]);
	if (st != SC_OK) {
		b->sp[i] = NULL;
		sparsifier_failed(job, &job->items[i], &b->spcfg[i], st);
	}
	return st;
}

/* A buffer's state on device dev. A failure keeps its own status (a sparsifier the
 * tensor's options cannot make is SC_ERR_INVALID) and says what failed in job->error. */
static sc_status_t bufctx_new(const scd_scheme_cfg_t *base, scd_job_t *job, uint64_t sig,
			      const scd_device_ops_t *dev, scd_transport_t *t, double alpha,
			      double beta, uint64_t seed, scd_bufctx_t **b_p)
{
	sc_status_t st = SC_ERR_NOMEM;
	scd_bufctx_t *b = calloc(1, sizeof(*b));
	if (!b) {
		snprintf(job->error, sizeof(job->error), "no memory for the buffer's state");
		log_step_error(job);
		return SC_ERR_NOMEM;
	}
	b->sig = sig;
	b->numel = job->total_numel;
	b->dev = dev;
	b->n_items = job->n_items;
	b->sp = calloc((size_t)job->n_items, sizeof(*b->sp));
	b->spcfg = calloc((size_t)job->n_items, sizeof(*b->spcfg));
	b->cache_ids = calloc((size_t)job->n_items, sizeof(uint32_t));
	if (!b->sp || !b->spcfg || !b->cache_ids) {
		snprintf(job->error, sizeof(job->error), "no memory for the buffer's state");
		log_step_error(job);
		goto err;
	}
	for (int i = 0; i < job->n_items; i++)
		b->cache_ids[i] = job->items[i].cache_id;
	scd_scheme_cfg_t cfg = *base;
	cfg.numel = job->total_numel;
	cfg.seed = seed ^ sig;
	/* a tensor's own sketch settings (S2 runs on a buffer of its own) */
	for (int i = 0; i < job->n_items; i++) {
		if (job->items[i].sketch_rows)
			cfg.sketch_rows = job->items[i].sketch_rows;
		if (job->items[i].sketch_cols > 0)
			cfg.sketch_cols_factor = job->items[i].sketch_cols;
		if (job->items[i].block && job->n_items == 1)
			cfg.sketch_block = job->items[i].block; /* the tensor's rows */
	}
	cfg.timeout_ms = job->timeout_ms;
	double hint = 1.0;
	uint64_t max_sp = 0; /* the largest item sparsified here */
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (it->sparsifier == SC_SPARSIFY_EXDYNA ||
		    it->sparsifier == SC_SPARSIFY_TOPK || it->sparsifier == SC_SPARSIFY_DGC ||
		    it->sparsifier == SC_SPARSIFY_BLOCK_TOPK) {
			cfg.density = it->density;
			hint = it->density;
		} else if (it->sparsifier == SC_SPARSIFY_NATURAL || it->coo_capacity > 0) {
			/* declared sparse, or registered for COO input: start from a sparse
			 * guess (the same on every rank; a first step on the dense ring cost
			 * seconds on 256 MiB tensors); the first report replaces it */
			hint = 0.01;
		}
		scd_sparsify_kind_t kind;
		if (!scd_sparsify_kind_of(it->sparsifier, &kind))
			continue;
		if (it->numel > max_sp)
			max_sp = it->numel;
		b->spcfg[i] = (scd_sparsifier_cfg_t){
		    .kind = kind,
		    .numel = it->numel ? it->numel : 1, /* > 0: sparsified here */
		    .density = it->density,
		    .threshold = (float)it->threshold,
		    .seed = seed ^ it->cache_id,
		    .block = it->block ? it->block : base->sketch_block};
		/* made at its first use (item_sparsifier); options it refuses fail now */
		if ((st = scd_sparsifier_cfg_check(&b->spcfg[i])) != SC_OK) {
			sparsifier_failed(job, it, &b->spcfg[i], st);
			goto err;
		}
		/* a device's other than the host's is made now (nothing is selected ahead
		 * there, and what it refuses fails the buffer before it is kept) */
		if (!scd_device_host_memory(dev) && (st = item_sparsifier(b, job, i)) != SC_OK)
			goto err;
	}
	if (max_sp) {
		b->sel.cap = max_sp;
		b->sel.idx = dev->alloc(max_sp * sizeof(uint32_t));
		b->sel.val = dev->alloc(max_sp * sizeof(float));
		if (!b->sel.idx || !b->sel.val) {
			st = SC_ERR_NOMEM;
			snprintf(job->error, sizeof(job->error),
				 "no memory on the %s device for a selection of %llu elements",
				 dev->name, (unsigned long long)max_sp);
			log_step_error(job);
			goto err;
		}
	}
	if ((st = scd_scheme_ctx_create(&cfg, t, dev, &b->sctx)) != SC_OK) {
		/* the scheme layer logged it */
		snprintf(job->error, sizeof(job->error),
			 "cannot create the buffer's scheme context: %s",
			 st == SC_ERR_NOMEM ? sc_status_message(st) : scd_scheme_error());
		goto err;
	}
	scd_scheme_ctx_set_net(b->sctx, alpha, beta);
	scd_scheme_profile_init(&b->prof, hint);
	b->last_scheme = -1;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		b->ratio[s] = 1.0;
	for (int i = 0; i < job->n_items; i++)
		b->natural |= job->items[i].sparsifier == SC_SPARSIFY_NATURAL;
	*b_p = b;
	return SC_OK;
err:
	bufctx_free(b);
	return st;
}

/* The state of job's buffer on device dev, made on its first step (see bufctx_new). */
static sc_status_t bufctx_get(scd_bufctx_table_t *tab, scd_job_t *job,
			      const scd_device_ops_t *dev, scd_transport_t *t, double alpha,
			      double beta, uint64_t seed, scd_bufctx_t **b_p)
{
	uint64_t sig = job_sig(job);
	for (int i = 0; i < tab->n; i++) {
		scd_bufctx_t *o = tab->v[i];
		if (o->sig != sig || o->numel != job->total_numel)
			continue;
		if (o->dev == dev && !o->stale) {
			o->last_use = ++tab->clock;
			*b_p = o;
			return SC_OK;
		}
		/* its tensors moved to another device, or the ranks' states of it differed:
		 * the state starts over */
		bufctx_free(o);
		tab->v[i] = tab->v[--tab->n];
		break;
	}
	scd_bufctx_t *b;
	sc_status_t st = bufctx_new(&tab->base, job, sig, dev, t, alpha, beta, seed, &b);
	if (st != SC_OK)
		return st;
	if (tab->n == SCD_BUFCTX_MAX) {
		int lru = -1;
		for (int i = 0; i < tab->n; i++)
			if (!tab->v[i]->inflight &&
			    (lru < 0 || tab->v[i]->last_use < tab->v[lru]->last_use))
				lru = i;
		if (lru >= 0) { /* at most one buffer is in flight: never all of them */
			bufctx_free(tab->v[lru]);
			tab->v[lru] = tab->v[--tab->n];
		}
	}
	b->last_use = ++tab->clock;
	tab->v[tab->n++] = b;
	*b_p = b;
	return SC_OK;
}

/* Appends sel's non-zeros to the buffer's list (b->cat), their indices moved by offset
 * into the buffer's index space; SC_ERR_NOMEM when the list cannot grow. The values a
 * dense buffer would hold: an entry selected as 0 (fewer non-zeros than k) is left out, as
 * the scheme's scan of a dense buffer leaves it out. */
static sc_status_t cat_append(scd_bufctx_t *b, const scd_coo_t *sel, uint64_t offset)
{
	scd_coo_t *c = &b->cat;
	if (c->nnz + sel->nnz > c->cap) {
		uint64_t cap = (c->nnz + sel->nnz) * 2 + 1024;
		uint32_t *idx = realloc(c->idx, cap * sizeof(uint32_t));
		if (idx)
			c->idx = idx;
		float *val = idx ? realloc(c->val, cap * sizeof(float)) : NULL;
		if (!val)
			return SC_ERR_NOMEM;
		c->val = val;
		c->cap = cap;
	}
	uint64_t w = c->nnz;
	for (uint64_t j = 0; j < sel->nnz; j++)
		if (sel->val[j] != 0) {
			c->idx[w] = sel->idx[j] + (uint32_t)offset;
			c->val[w++] = sel->val[j];
		}
	c->nnz = w;
	return SC_OK;
}

/*
 * The room for the result of a run on the buffer's selections' list (b->cat) as COO, when
 * its collective's delivery takes it entry by entry (job->fused_out_ok, allreduce's): a buffer
 * of several float32 tensors in host memory, every trainer's buffer at home, run by a scheme
 * that builds the result from the lists it merges (lists_out). The fused buffer is then
 * neither written with the result nor copied out of: each trainer's tensor is cleared and
 * its entries written (a dense result written, then copied into every trainer's buffer,
 * read and wrote each tensor of the buffer three times a step). The room is twice what
 * every rank's list would be at this rank's length, at most the buffer; a union past it
 * comes back dense (out->nnz SCD_RESULT_DENSE) and is copied out as before. NULL: none.
 */
static scd_coo_t *fused_result(scd_bufctx_t *b, scd_job_t *job, const scd_coo_t *in,
			       scd_scheme_t s, int P)
{
	job->fused_out = 0;
	if (!job->fused_out_ok || job->n_items < 2 || in != &b->cat ||
	    !scd_schemes[s]->lists_out || job->dtype != SC_FLOAT32 ||
	    !scd_device_host_memory(b->dev))
		return NULL;
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (it->op != SC_OP_SUM && it->op != SC_OP_AVERAGE)
			return NULL;
		for (int k = 0; k < it->n_src; k++)
			if (!scd_device_at_home(it->src[k].device, it->src[k].ordinal))
				return NULL;
	}
	uint64_t want = 2 * (uint64_t)(P > 0 ? P : 1) * in->nnz + 1024;
	if (want > b->numel)
		want = b->numel;
	scd_coo_t *o = &b->out;
	if (o->cap < want) {
		uint32_t *idx = realloc(o->idx, want * sizeof(uint32_t));
		if (idx)
			o->idx = idx;
		float *val = idx ? realloc(o->val, want * sizeof(float)) : NULL;
		if (!val)
			return NULL; /* delivered from the dense result */
		o->val = val;
		o->cap = want;
	}
	o->nnz = 0;
	job->coo_out = *o;
	job->fused_out = 1;
	return &job->coo_out;
}

/* Whether a buffer of several tensors goes to the scheme as the concatenation of their
 * selections (b->cat) instead of a dense buffer: every tensor is sparsified here, and the
 * host can read the selections (a GPU buffer is filled densely, its selections scattered
 * by the device). */
static int fuse_as_list(const scd_bufctx_t *b, const scd_job_t *job)
{
	if (job->n_items < 2 || !scd_device_host_memory(b->dev))
		return 0;
	for (int i = 0; i < job->n_items; i++)
		if (!b->spcfg[i].numel && !job->items[i].presel)
			return 0;
	return 1;
}

/* Sparsification ahead, per tensor: the rest goes to the tensor's residual. Each tensor has
 * its own sparsifier, so each keeps its own k (at least one element, scd_density_to_k)
 * whatever the other tensors' magnitudes. A tensor that allows lossy schemes but is not
 * sparsified here gets its residual (what lossy schemes left behind last step) added back
 * first. The scheme gets the selections as one COO list (*sel_p): a lone tensor's own, or
 * the buffer's tensors' concatenated in buffer order with their offsets (fuse_as_list), so
 * nothing clears and refills the buffer, nor scans it again for the non-zeros: the work is
 * the selections', not the model's. A buffer that cannot take the list (a tensor not
 * sparsified here, a GPU buffer) gets each selection scattered into its slice. Each item's
 * compression and fusion times go to its tcp_s and tb_s; a lone tensor's fusion time is
 * what its fusion costs (alone_fuse), not 0: the planner weighs it when it considers
 * fusing the tensor (reported as 0, a lone tensor looked free to fuse, was fused, measured
 * and split again, and the plan flapped). */
static double alone_fuse(scd_bufctx_t *b, float *x, uint64_t numel, const scd_coo_t *sel)
{
	if (b->alone_runs >= SCD_ALONE_FUSE_RUNS)
		return b->alone_tb_s;
	/* timed as a fused tensor's is: appended to the list, or (a GPU buffer) its slice
	 * cleared and the selection scattered in, which the scheme's COO input allows (the
	 * data is then output only, scheme.h) */
	double t0 = scd_now_s();
	b->cat.nnz = 0;
	if (!scd_device_host_memory(b->dev)) {
		b->dev->clear(x, numel * sizeof(float));
		b->dev->coo_scatter(x, sel);
	} else if (cat_append(b, sel, 0) != SC_OK) {
		return b->alone_tb_s;
	}
	double t = scd_now_s() - t0;
	b->alone_runs++;
	b->alone_tb_s += (t - b->alone_tb_s) / b->alone_runs;
	return b->alone_tb_s;
}

/* Fuses item it's selection sel (on its own: the buffer's one tensor) into what the scheme
 * gets; its fusion time goes to it->tb_s. */
static sc_status_t fuse_item(scd_bufctx_t *b, const scd_job_t *job, scd_job_item_t *it,
			     float *x, const scd_coo_t *sel, int as_list,
			     const scd_coo_t **sel_p)
{
	double t1 = scd_now_s();
	if (job->n_items == 1) {
		it->tb_s = alone_fuse(b, x, it->numel, sel);
		*sel_p = sel;
		return SC_OK;
	}
	if (as_list) {
		if (cat_append(b, sel, it->offset) != SC_OK)
			return SC_ERR_NOMEM;
		*sel_p = &b->cat;
	} else {
		b->dev->clear(x, it->numel * sizeof(float));
		b->dev->coo_scatter(x, sel);
	}
	it->tb_s = scd_now_s() - t1;
	return SC_OK;
}

static sc_status_t sparsify_items(scd_bufctx_t *b, scd_job_t *job, float *buf,
				  const scd_coo_t **sel_p)
{
	*sel_p = NULL;
	int as_list = fuse_as_list(b, job);
	b->cat.nnz = 0;
	/* the sparsifiers this step needs are made before any residual is written: one that
	 * cannot be made fails the step with every tensor's residual as it was */
	for (int i = 0; i < job->n_items; i++) {
		sc_status_t st = !job->items[i].presel && b->spcfg[i].numel
				     ? item_sparsifier(b, job, i)
				     : SC_OK;
		if (st != SC_OK)
			return st; /* job->error says which tensor */
	}
	for (int i = 0; i < job->n_items; i++) {
		scd_job_item_t *it = &job->items[i];
		float *x = buf + it->offset;
		double t0 = scd_now_s();
		it->tb_s = 0;
		if (it->presel) { /* selected at submission (coll/presel.h) */
			const scd_presel_t *p = it->presel;
			if (p->has_res) /* what the selection at the buffer writes */
				b->dev->copy(it->residual, p->res, it->numel * sizeof(float));
			it->tcp_s = p->tcp_s;
			sc_status_t st = fuse_item(b, job, it, x, &p->sel, as_list, sel_p);
			if (st != SC_OK || job->n_items == 1)
				return st;
			continue;
		}
		if (b->sp[i]) { /* sparsified here: made above */
			b->sel.nnz = 0;
			uint64_t tl = scd_tl_begin();
			sc_status_t st = b->dev->sparsify(b->sp[i], x, it->residual, it->numel,
							  &b->sel, NULL);
			scd_job_item_tl(it, "sparsify", tl, SC_FLOAT32);
			if (st != SC_OK)
				return st;
			it->tcp_s = scd_now_s() - t0;
			st = fuse_item(b, job, it, x, &b->sel, as_list, sel_p);
			if (st != SC_OK || job->n_items == 1)
				return st;
			continue;
		} else if (it->residual && it->sparsifier != SC_SPARSIFY_EXDYNA) {
			/* ExDyna reads its residual itself: alone, the tensor's; over several
			 * tensors, the buffer's (exdyna_residual) */
			b->dev->residual_drain(x, it->residual, it->numel);
		}
		it->tcp_s = scd_now_s() - t0;
	}
	return SC_OK;
}

/* Whether some tensor of the buffer keeps a residual (error feedback). */
static int any_residual(const scd_job_t *job)
{
	for (int i = 0; i < job->n_items; i++)
		if (job->items[i].residual)
			return 1;
	return 0;
}

/* The residual a lossy scheme fills for a buffer of several tensors, all zeros before the
 * run (split back by split_residual() after it); NULL when out of memory. A buffer whose
 * last run's additions were taken back index by index (split_tracked) is still all zeros:
 * only one after a run that wrote it over the whole buffer, or failed, is cleared. */
static float *buffer_residual(scd_bufctx_t *b)
{
	if (!b->bres && !(b->bres = b->dev->alloc(b->numel * sizeof(float))))
		return NULL;
	if (!b->bres_zero)
		b->dev->clear(b->bres, b->numel * sizeof(float));
	b->bres_zero = 0; /* until the run's additions are taken back */
	return b->bres;
}

/* The item whose slice holds buffer index i (items ascend by offset); NULL in padding. */
static const scd_job_item_t *item_at(const scd_job_t *job, uint64_t i)
{
	int lo = 0, hi = job->n_items - 1;
	while (lo < hi) { /* the last item starting at or before i */
		int mid = (lo + hi + 1) / 2;
		if (job->items[mid].offset <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	const scd_job_item_t *it = &job->items[lo];
	return i >= it->offset && i - it->offset < it->numel ? it : NULL;
}

/* Adds each tensor's part of the buffer's residual to the tensor's own (padding between
 * tensors holds zeros, which the scheme never discards); for ExDyna (exdyna set), which
 * read and rewrote the buffer's residual, copies it back instead. */
static void split_residual(const scd_bufctx_t *b, const scd_job_t *job, int exdyna)
{
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (it->residual && exdyna)
			b->dev->copy(it->residual, b->bres + it->offset,
				     it->numel * sizeof(float));
		else if (it->residual)
			b->dev->reduce_sum(it->residual, b->bres + it->offset, it->numel);
	}
}

/*
 * split_residual() for a run that recorded where it added to the buffer's residual (host
 * memory, io->track_residual): each such entry goes to its tensor's residual and back to
 * zero, so the work is the scheme's leftovers, not the buffer (a dense split and clear
 * read and wrote every tensor of the buffer each step: 6.3M elements of a 24-layer model
 * in buffers of several tensors cost each node tens of ms a step more than the same
 * tensors alone). An index listed twice finds its entry zero the second time. Returns 0
 * where the run did not track (S2 writes the residual over the whole buffer): the caller
 * splits it densely.
 */
static int split_tracked(scd_bufctx_t *b, const scd_job_t *job)
{
	const uint32_t *idx;
	uint64_t n;
	if (!scd_scheme_residual_added(b->sctx, &idx, &n)) /* tracked only on the host */
		return 0;
	for (uint64_t j = 0; j < n; j++) {
		uint64_t i = idx[j];
		float v = b->bres[i];
		if (v == 0)
			continue;
		b->bres[i] = 0;
		const scd_job_item_t *it = item_at(job, i);
		if (it && it->residual)
			it->residual[i - it->offset] += v;
	}
	b->bres_zero = 1;
	return 1;
}

/* ExDyna over several tensors (exdyna_scope model): the scheme is the sparsifier and reads
 * the residual as its accumulator, so the buffer's residual starts as the tensors' own,
 * side by side (the padding zeros), and goes back to them after the run (split_residual).
 * A failed run leaves the tensors' residuals as they were. */
static void exdyna_residual(const scd_bufctx_t *b, const scd_job_t *job)
{
	for (int i = 0; i < job->n_items; i++) {
		const scd_job_item_t *it = &job->items[i];
		if (it->residual)
			b->dev->copy(b->bres + it->offset, it->residual,
				     it->numel * sizeof(float));
	}
}

/*
 * A single trainer's COO input with a residual (lossy schemes allowed, no sparsifier):
 * the residual's non-zeros are folded into the list (input + residual, the bits of the
 * dense x[i] += residual[i]) and zeroed, so the scheme sees one ascending list and no
 * pass over the tensor is needed. Where the residual may be non-zero is a bitmap the
 * previous step's scheme filled (scd_scheme_residual_added); after a step that wrote the
 * residual densely, or the first, the residual is scanned once instead. Entries that
 * sum to zero are left out. The bitmap and the folded list are the device's memory, the
 * walk its op (coo_fold_residual).
 */
static sc_status_t fold_residual(scd_bufctx_t *b, const scd_coo_t *in, float *res)
{
	const scd_device_ops_t *dev = b->dev;
	uint64_t n = b->numel;
	if (!b->rbits && !(b->rbits = dev->alloc(8 * ((n + 63) / 64))))
		return SC_ERR_NOMEM;
	if (!b->rknown)
		b->rcount = dev->residual_bits(res, n, b->rbits);
	uint64_t need = in->nnz + b->rcount;
	if (need > b->fold.cap) {
		uint64_t cap = need + need / 4 + 1024;
		uint32_t *fi = dev->alloc(4 * cap);
		float *fv = dev->alloc(4 * cap);
		if (!fi || !fv) {
			dev_free(dev, fi), dev_free(dev, fv);
			return SC_ERR_NOMEM;
		}
		dev_free(dev, b->fold.idx), dev_free(dev, b->fold.val);
		b->fold = (scd_coo_t){fi, fv, 0, cap};
	}
	b->fold.nnz = dev->coo_fold_residual(in, res, b->rbits, n, b->fold.idx, b->fold.val);
	b->rknown = 1; /* all zero now: the scheme's additions are the next support */
	b->rcount = 0;
	return SC_OK;
}

/* After the step: marks where the scheme left residual, or forgets it (dense write). */
static void residual_support(scd_bufctx_t *b, int ok)
{
	const uint32_t *idx;
	uint64_t n;
	if (!ok || !scd_scheme_residual_added(b->sctx, &idx, &n)) {
		b->rknown = 0;
		return;
	}
	b->dev->bits_set(b->rbits, idx, n);
	b->rcount = n; /* an index may be listed twice: a bound */
}

/* Whether a buffer is small, dense, lossless and unpinned (see SCD_SMALL_DENSE_BYTES):
 * decided from what every rank agreed on (world/agree.h), never from this node's sources,
 * so that every rank takes the same path (a node that takes part with zeros has none). */
static int small_dense(const scd_job_t *job)
{
	if (job->pin >= 0 || job->total_numel * sizeof(float) >= SCD_SMALL_DENSE_BYTES)
		return 0;
	for (int i = 0; i < job->n_items; i++)
		if (job->items[i].sparsifier != SC_SPARSIFY_NONE || job->items[i].allow_lossy ||
		    job->items[i].coo_in)
			return 0;
	return 1;
}

/*
 * Folds the previous step's measurement into the calibration. The time is the slowest
 * rank's (carried by the scheme's metadata round, so identical everywhere) and the
 * prediction was computed from identical inputs, so every rank holds the same ratios. The
 * first run of a scheme in a buffer is not counted: it pays for the workspaces' first
 * touch, which says nothing about the steps that follow.
 */
static void calibrate(scd_bufctx_t *b, const scd_scheme_report_t *rep)
{
	int s = b->last_scheme;
	if (s < 0 || rep->prev_elapsed_max_s <= 0 || b->last_pred_s <= 0)
		return;
	double sample = rep->prev_elapsed_max_s / b->last_pred_s;
	scd_debug(SCD_SUB_ENGINE,
		  "buffer %016llx: %s took %.3f ms, predicted %.3f ms (run %u of it here)",
		  (unsigned long long)b->sig, scd_scheme_name((scd_scheme_t)s),
		  rep->prev_elapsed_max_s * 1e3, b->last_pred_s * 1e3, b->samples[s] + 1);
	if (b->samples[s]++ == 0)
		return;
	b->ratio[s] = scd_calib_add(b->window[s], b->samples[s] - 2, sample);
}

/*
 * Every scheme's ratio is the same statistic, the lower median of its last counted runs,
 * so a scheme that was only tried and the one that has run for a hundred steps are judged
 * alike. On a busy host a step can run 1.5x slow (8 daemons on 2 cores: two runs of
 * SparDL took 574 and 941 ms); the median of seven ignores three such steps, and the lower
 * median of a try's two runs is the better one. (A running average for the incumbent
 * against the best runs of a try handed steps to a scheme that was not faster: 4 nodes,
 * top-k, SparDL against AGsparse.)
 */
double scd_calib_add(double *window, uint32_t counted, double sample)
{
	window[counted % SCD_CALIB_WINDOW] = sample;
	uint32_t n = counted + 1 < SCD_CALIB_WINDOW ? counted + 1 : SCD_CALIB_WINDOW;
	double v[SCD_CALIB_WINDOW];
	for (uint32_t i = 0; i < n; i++) { /* insertion sort: at most seven values */
		uint32_t j = i;
		for (; j > 0 && v[j - 1] > window[i]; j--)
			v[j] = v[j - 1];
		v[j] = window[i];
	}
	return v[(n - 1) / 2];
}

/*
 * The scheme for this step: the pin, else the cheapest of the allowed schemes by the cost
 * model's prediction times the scheme's calibration ratio. The model counts the network
 * only; the ratio brings in what it misses (the CPU work of merging, hashing and encoding,
 * which on a busy host can outweigh the wire, and which differs a lot from scheme to
 * scheme). Until a scheme is measured its ratio is taken as SCD_EXPLORE_MARGIN: it gets
 * tried when the model favours it by that margin over what the best scheme really did,
 * and is then judged by what it did itself. Each try costs about two steps, so at most
 * SCD_EXPLORE_SCHEMES schemes are ever tried per buffer (in the order of their
 * predictions: the likeliest first), within its first SCD_EXPLORE_STEPS steps; after
 * that only measured schemes compete. (Assuming
 * every unmeasured scheme misses as badly as the best measured one did kept the choice on
 * a scheme 1.5x slower than another the model mispredicted: 8 nodes, zipf.)
 * Only schemes whose descriptor's pick is SCD_PICK_AUTO compete: ExDyna is a sparsifier
 * (pinned for ExDyna tensors, never chosen here), and the S2 sketch is only run when
 * pinned: its decode and its residual are dense over every non-zero block, CPU work the
 * network model cannot see, and one exploratory step of it cost tens of seconds on 256 MiB
 * tensors (with error feedback on a naturally sparse tensor its residual spreads over the
 * blocks step after step).
 */
int scd_bufctx_pick(const double *pred_s, const double *ratio, const uint32_t *samples,
		    int last, int explore)
{
	int best = -1, tried = explore ? 0 : SCD_EXPLORE_SCHEMES;
	double best_s = -1, last_s = -1;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		tried += pred_s[s] >= 0 && samples[s] > 0;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		if (pred_s[s] < 0)
			continue;
		/* measured; being measured (its first, uncounted run is done); or a candidate
		 * for a try while tries are left */
		double r = samples[s] >= 2 ? ratio[s] : SCD_EXPLORE_MARGIN;
		if (samples[s] == 0 && tried >= SCD_EXPLORE_SCHEMES)
			continue;
		double t = pred_s[s] * r;
		if (s == last)
			last_s = t;
		if (best_s < 0 || t < best_s)
			best = s, best_s = t;
	}
	/* Hysteresis: near-ties (measurements are noisy) do not flip the scheme back and
	 * forth; every rank holds the same numbers, so they all keep or switch together. */
	if (last_s >= 0 && best != last && best_s > SCD_SWITCH_GAIN * last_s)
		return last;
	return best;
}

static scd_scheme_t choose(scd_bufctx_t *b, const scd_job_t *job, double alpha_s,
			   double beta_s_per_byte, scd_cost_t *cost_p)
{
	if (job->pin >= 0) {
		*cost_p = scd_scheme_cost(b->sctx, (scd_scheme_t)job->pin, &b->prof, alpha_s,
					  beta_s_per_byte);
		return (scd_scheme_t)job->pin;
	}
	scd_cost_t cost[SCD_SCHEME_COUNT];
	double pred[SCD_SCHEME_COUNT];
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		pred[s] = -1;
		if (scd_schemes[s]->pick != SCD_PICK_AUTO ||
		    (job->lossless_only && !scd_schemes[s]->lossless))
			continue;
		cost[s] = scd_scheme_cost(b->sctx, (scd_scheme_t)s, &b->prof, alpha_s,
					  beta_s_per_byte);
		pred[s] = cost[s].seconds;
	}
	int s = scd_bufctx_pick(pred, b->ratio, b->samples, b->last_scheme,
				b->steps++ < SCD_EXPLORE_STEPS);
	if (s < 0) /* nothing allowed: cannot happen (the dense ring always is) */
		s = SCD_SCHEME_DENSE_RING, cost[s] = (scd_cost_t){0};
	*cost_p = cost[s];
	return (scd_scheme_t)s;
}

int scd_bufctx_one_round(const scd_job_t *job, int world_size)
{
	return world_size > 1 && small_dense(job) &&
	       job->total_numel * sizeof(float) <= SCD_ONE_ROUND_BYTES;
}

/* The one-round allreduce's workspaces for P ranks in the memory of device dev (kept
 * across steps). */
static sc_status_t one_round_ws(scd_bufctx_table_t *tab, const scd_device_ops_t *dev, int P)
{
	if (tab->gather_ranks < P || tab->gather_dev != dev) {
		char *g = dev->alloc((size_t)P * ONE_ROUND_SLOT_MAX);
		if (!g)
			return SC_ERR_NOMEM;
		if (tab->gather)
			tab->gather_dev->free(tab->gather);
		tab->gather = g;
		tab->gather_dev = dev;
		tab->gather_ranks = P;
	}
	if (tab->xfer_ranks < P) {
		scd_xfer_t *x = calloc(2 * (size_t)P, sizeof(*x));
		if (!x)
			return SC_ERR_NOMEM;
		free(tab->xfers);
		tab->xfers = x;
		tab->xfer_ranks = P;
	}
	return SC_OK;
}

/* The bytes of a rank's words ahead of its buffer in the one-round exchange: the input
 * check's (none found without v), and a fast turn's after them (v->words_bytes). */
static size_t one_round_words(const scd_verdict_carry_t *v)
{
	return v ? v->words_bytes : SCD_VERDICT_BYTES;
}

/* This rank's slot: its words (v's, or none found) and its buffer, read through dev
 * (staged to the host when the host cannot touch dev's memory); zeros for a rank whose
 * compute stage failed, or that leaves a fast turn, which reads neither. */
static void one_round_mine(char *slot, const scd_device_ops_t *ws_dev,
			   const scd_device_ops_t *dev, const float *buf, size_t bytes,
			   const scd_verdict_carry_t *v)
{
	size_t hdr = one_round_words(v);
	memset(slot, 0, hdr);
	if (v)
		memcpy(slot, v->mine, hdr);
	if (v && v->faulty)
		memset(slot + hdr, 0, bytes);
	else if (ws_dev == dev)
		dev->copy(slot + hdr, buf, bytes);
	else
		dev->to_host(slot + hdr, buf, bytes);
}

/*
 * The one-round allreduce of a small buffer (see SCD_ONE_ROUND_BYTES) of n floats on device
 * dev: every rank sends its slot (the input check's words, then its buffer) to every other
 * rank in one exchange. With v, every rank decides on every rank's words before it adds
 * anything, so a fault anywhere fails the job on every rank alike and no rank delivers a
 * sum (v->decide's status; a fast turn's words ride in the same slot after the input
 * check's, and its decision may also discard the turn, engine/verdict.h). The copies are added
 * in rank order, so the bits agree everywhere. The engine synced the device after the local sum
 * and nothing ran on it since, so buf is final when it is read (the same holds for the small
 * buffers' ring below).
 */
static sc_status_t one_round(scd_bufctx_table_t *tab, scd_job_t *job,
			     const scd_device_ops_t *dev, scd_transport_t *t, float *buf,
			     uint64_t n, scd_verdict_carry_t *v)
{
	int P = t->size, me = t->rank;
	size_t bytes = n * sizeof(float);
	const scd_device_ops_t *ws_dev =
	    !(v && v->faulty) && scd_device_host_memory(dev) ? dev : &scd_device_cpu_ops;
	if (t->ops->device_memory && ws_dev == &scd_device_cpu_ops) {
		snprintf(job->error, sizeof(job->error),
			 "the one-round allreduce stages through host memory, which the %s "
			 "transport cannot take",
			 t->ops->name);
		log_step_error(job);
		return SC_ERR_SYSTEM;
	}
	if (one_round_ws(tab, ws_dev, P) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "no memory for a one-round allreduce of %d ranks", P);
		log_step_error(job);
		return SC_ERR_NOMEM;
	}
	char *g = tab->gather;
	size_t hdr = one_round_words(v), slot = hdr + SCD_ONE_ROUND_BYTES;
	one_round_mine(g + (size_t)me * slot, ws_dev, dev, buf, bytes, v);
	scd_xfer_t *sends = tab->xfers, *recvs = tab->xfers + P;
	int k = 0;
	for (int q = 0; q < P; q++) {
		if (q == me)
			continue;
		sends[k] = (scd_xfer_t){q, g + (size_t)me * slot, hdr + bytes};
		recvs[k] = (scd_xfer_t){q, g + (size_t)q * slot, hdr + bytes};
		k++;
	}
	sc_status_t st = scd_transport_exchange(t, sends, k, recvs, k, job->timeout_ms);
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error), "dense_ring: %s",
			 scd_transport_error());
		return st;
	}
	if (v && (st = v->decide(v, job, (const uint8_t *)g, slot, P)) != SC_OK)
		return st;
	float *sum = (float *)(g + hdr); /* rank 0's, the sum on the host */
	if (ws_dev == dev) {
		dev->copy(buf, sum, bytes);
		sum = buf;
	}
	for (int q = 1; q < P; q++)
		ws_dev->reduce_sum(sum, (const float *)(g + (size_t)q * slot + hdr), n);
	if (ws_dev != dev)
		dev->from_host(buf, sum, bytes);
	return SC_OK;
}

/* A small dense buffer skips the scheme layer (see SCD_SMALL_DENSE_BYTES) where the
 * transport can read its memory, or where it is summed in one round, which stages it
 * itself; any other device's buffer that needs staging goes through the scheme layer,
 * which stages. */
static int small_direct(const scd_job_t *job, const scd_device_ops_t *dev, int world_size)
{
	return small_dense(job) &&
	       (scd_device_host_memory(dev) || scd_bufctx_one_round(job, world_size));
}

sc_status_t scd_bufctx_prepare(scd_bufctx_table_t *tab, scd_job_t *job,
			       const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
			       double alpha_s, double beta_s_per_byte, uint64_t seed,
			       scd_job_prep_t *prep)
{
	*prep = (scd_job_prep_t){0};
	if (small_direct(job, dev, t->size)) {
		prep->small = 1;
		return SC_OK;
	}
	scd_bufctx_t *b;
	sc_status_t st = bufctx_get(tab, job, dev, t, alpha_s, beta_s_per_byte, seed, &b);
	if (st != SC_OK)
		return st; /* job->error says what failed */
	const scd_coo_t *sel = NULL;
	double t0 = scd_now_s();
	st = job->coo_direct ? SC_OK : sparsify_items(b, job, buf, &sel);
	prep->sparsify_s = scd_now_s() - t0;
	if (st != SC_OK) {
		if (!job->error[0]) { /* else said and logged where it failed */
			snprintf(job->error, sizeof(job->error), "sparsification failed: %s",
				 sc_status_message(st));
			log_step_error(job);
		}
		return st;
	}
	b->inflight = 1;
	prep->bufctx = b;
	prep->sel = sel;
	return SC_OK;
}

void scd_bufctx_release(scd_job_prep_t *prep)
{
	if (prep->bufctx)
		prep->bufctx->inflight = 0;
	prep->bufctx = NULL;
}

sc_status_t scd_bufctx_communicate(scd_bufctx_table_t *tab, scd_job_t *job,
				   const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
				   double alpha_s, double beta_s_per_byte, scd_job_prep_t *prep)
{
	job->fused_out = 0; /* until fused_result gives the run a sparse result */
	/* all of it an exchange; a carried input check round is always the one round's (the
	 * rank whose compute stage failed before it prepared takes part too) */
	if (prep->small || prep->verdict) {
		int one = scd_bufctx_one_round(job, t->size);
		/* a GPU buffer over a transport of device memory (NCCL, which every rank took:
		 * the input check round found the buffer on a GPU everywhere) is summed where
		 * it lies by the transport's allreduce: the one round stages through host
		 * memory, which such a transport cannot take */
		if (one && !prep->verdict && t->ops->device_memory &&
		    !scd_device_host_memory(dev))
			one = 0;
		if (prep->verdict && !one) { /* carries_verdict says otherwise */
			snprintf(job->error, sizeof(job->error),
				 "a buffer of %llu elements cannot carry the input check round",
				 (unsigned long long)job->total_numel);
			log_step_error(job);
			return SC_ERR_SYSTEM;
		}
		double t0 = scd_now_s();
		uint64_t tl = scd_tl_begin();
		sc_status_t st =
		    one ? one_round(tab, job, dev, t, buf, job->total_numel, prep->verdict)
			: scd_transport_allreduce_f32(t, buf, job->total_numel,
						      job->timeout_ms);
		scd_tl_arg_t ta[] = {
		    {"scheme", "dense_ring", 0},
		    {"bytes", NULL, (int64_t)(job->total_numel * sizeof(float))},
		    {"one_round", NULL, one}};
		scd_tl_here("scheme", tl, ta, 3);
		if (st != SC_OK && !one)
			snprintf(job->error, sizeof(job->error), "dense_ring: %s",
				 scd_transport_error());
		job->scheme = SCD_SCHEME_DENSE_RING;
		job->predicted_s = 0;
		job->density = job->gamma = job->imbalance = 1;
		job->exchange_s = job->tcm_s = scd_now_s() - t0;
		for (int i = 0; i < job->n_items; i++)
			job->items[i].tcp_s = job->items[i].tb_s = 0;
		return st;
	}
	scd_bufctx_t *b = prep->bufctx;
	sc_status_t st;
	double cpu0 = scd_thread_cpu_s();
	/* the network costs every rank agreed on when this buffer first runs, taken here in
	 * the communication stage, after any probe before it: the compute stage that made
	 * the context may have run beside that probe */
	if (b->net_fixed && b->net_t != t && b->net_serial == t->serial &&
	    (t->serial & SCD_SERIAL_VIEW)) {
		/* a process set's view made again on this node alone (engine/psview.h): the
		 * same place, so the costs stay those every member still uses */
		scd_scheme_ctx_set_transport(b->sctx, t);
		b->net_t = t;
	} else if (!b->net_fixed || b->net_t != t || b->net_serial != t->serial) {
		scd_scheme_ctx_set_net(b->sctx, alpha_s, beta_s_per_byte);
		scd_scheme_ctx_set_transport(b->sctx, t);
		b->net_fixed = 1;
		b->net_t = t;
		b->net_serial = t->serial;
	}
	scd_cost_t cost = {0};
	scd_scheme_t s = choose(b, job, alpha_s, beta_s_per_byte, &cost);
	/* Lossy schemes keep what they did not deliver in the tensor's residual: the single
	 * tensor's own, or the buffer's, split back per tensor after the run. */
	int split = job->n_items > 1 && !scd_scheme_lossless(s) && any_residual(job);
	int exdyna = split && scd_schemes[s]->sparsifier == SC_SPARSIFY_EXDYNA;
	scd_scheme_io_t io = {.data = buf,
			      .coo = job->coo_direct ? &job->coo_in : prep->sel,
			      .residual = job->n_items == 1 ? job->items[0].residual : NULL,
			      .out = job->sparse_out ? &job->coo_out : NULL};
	if (!io.out)
		io.out = fused_result(b, job, prep->sel, s, t->size);
	if (split && !(io.residual = buffer_residual(b))) {
		snprintf(job->error, sizeof(job->error),
			 "no memory on the %s device for the residual of a buffer of %llu "
			 "elements",
			 dev->name, (unsigned long long)b->numel);
		log_step_error(job);
		return SC_ERR_NOMEM;
	}
	if (exdyna)
		exdyna_residual(b, job);
	else if (split)
		io.track_residual = scd_device_host_memory(dev); /* split_tracked */
	double t_fold = scd_now_s();
	if (job->coo_direct && io.residual) {
		/* another buffer (the tensor's other form) wrote the residual since this
		 * one's last step, or another registration's: the bitmap says nothing */
		const scd_job_item_t *it0 = &job->items[0];
		if (b->rres != it0->residual || !b->rres_seq ||
		    it0->residual_prev != b->rres_seq)
			b->rknown = 0;
		b->rres = it0->residual;
		b->rres_seq = it0->residual_seq;
		if ((st = fold_residual(b, &job->coo_in, io.residual)) != SC_OK) {
			snprintf(job->error, sizeof(job->error),
				 "no memory to fold the residual into the COO input");
			log_step_error(job);
			return st;
		}
		io.coo = &b->fold;
		io.track_residual = 1;
	} else {
		b->rknown = 0; /* a dense step rewrites the residual */
	}
	scd_scheme_report_t rep;
	t_fold = scd_now_s() - t_fold;
	st = scd_scheme_run(s, b->sctx, &io, &rep);
	if (st == SC_OK && split && (exdyna || !split_tracked(b, job)))
		split_residual(b, job, exdyna);
	double t_support = scd_now_s();
	if (io.track_residual && !split)
		residual_support(b, st == SC_OK);
	t_support = scd_now_s() - t_support;
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error), "%s: %s", scd_scheme_name(s),
			 scd_scheme_error());
		/* The metadata round found the ranks' states of this buffer apart (another
		 * scheme or step: one node made it anew after its trainers were replaced, the
		 * others kept theirs). Every rank of the buffer received every header, so each
		 * finds it and fails this step; each makes the state anew for the next, which
		 * then agrees, instead of every later step failing alike. */
		if (st == SC_ERR_MISMATCH)
			b->stale = 1;
		return st;
	}
	scd_debug(
	    SCD_SUB_ENGINE,
	    "buffer %016llx: %s ran %.3f ms here, %.3f ms of it in its %u rounds; "
	    "sparsify %.3f ms, residual fold %.3f ms, support %.3f ms; %.3f ms of CPU here",
	    (unsigned long long)b->sig, scd_scheme_name(s), rep.elapsed_s * 1e3,
	    rep.xchg_s * 1e3, rep.rounds, prep->sparsify_s * 1e3, t_fold * 1e3, t_support * 1e3,
	    (scd_thread_cpu_s() - cpu0) * 1e3);
	calibrate(b, &rep);
	if ((int)s != b->last_scheme)
		scd_info(SCD_SUB_ENGINE,
			 "buffer %016llx (%llu elements): %s, predicted %.3f ms (density %.4f, "
			 "densification %.2f)",
			 (unsigned long long)b->sig, (unsigned long long)b->numel,
			 scd_scheme_name(s), cost.seconds * 1e3, b->prof.density,
			 b->prof.gamma_n);
	b->last_scheme = s;
	b->last_pred_s = cost.seconds;
	scd_scheme_profile_update(&b->prof, &rep);
	job->scheme = s;
	job->predicted_s = cost.seconds;
	job->density = rep.density;
	job->gamma = rep.gamma;
	job->imbalance = rep.imbalance;
	job->exchange_s = rep.xchg_s;
	job->tcm_s = rep.elapsed_s;
	return SC_OK;
}

sc_status_t scd_bufctx_step(scd_bufctx_table_t *tab, scd_job_t *job,
			    const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
			    double alpha_s, double beta_s_per_byte, uint64_t seed)
{
	scd_job_prep_t prep;
	sc_status_t st =
	    scd_bufctx_prepare(tab, job, dev, buf, t, alpha_s, beta_s_per_byte, seed, &prep);
	if (st == SC_OK)
		st = scd_bufctx_communicate(tab, job, dev, buf, t, alpha_s, beta_s_per_byte,
					    &prep);
	scd_bufctx_release(&prep);
	return st;
}
