/*
 * scheme.c: the scheme context, the dispatch of scd_scheme_run with its report, and the
 * helpers the scheme files share (workspaces, the metadata round, transport wrappers,
 * deterministic top-k, the COO-or-bitmap sparse message).
 *
 * Every run starts with the metadata round: one message to and from every peer carrying
 * (scheme, numel, step, non-zeros, optional per-partition counts). It costs one latency
 * and 40 + 8 P bytes per peer, and buys three things: every receive buffer can be sized
 * exactly before data move (no worst-case P x numel buffers), a mismatch of plan between
 * ranks is caught before it corrupts data, and d_G is known identically on every rank.
 */
#include "scheme/scheme_internal.h"
#include "util/bigmem.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/timeline.h"

#define META_MAGIC     0x314d4353u /* "SCM1" */
#define META_HDR_BYTES 40

static __thread char scheme_err[512];

const char *scd_scheme_error(void)
{
	return scheme_err;
}

sc_status_t scd_scheme_fail(sc_status_t st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(scheme_err, sizeof(scheme_err), fmt, ap);
	va_end(ap);
	scd_error(SCD_SUB_ENGINE, "scheme: %s (%s)", scheme_err, sc_status_name(st));
	return st;
}

/* ---- workspaces ------------------------------------------------------------------------ */

sc_status_t scd_ws_reserve(scd_ws_t *w, size_t bytes)
{
	return scd_ws_reserve_keep(w, bytes, 0);
}

sc_status_t scd_ws_reserve_keep(scd_ws_t *w, size_t bytes, size_t keep)
{
	if (bytes <= w->cap)
		return SC_OK;
	/* geometric growth; the first reservation gets a quarter more than asked, since
	 * sizes follow the data and the next step's is often a little larger (a regrowth
	 * pre-faults the whole workspace again, which made a scheme's second run look slow
	 * to the calibration) */
	size_t cap = w->cap ? w->cap + w->cap / 2 : bytes + bytes / 4;
	if (cap < bytes)
		cap = bytes;
	cap = (cap + 4095) & ~(size_t)4095;
	/* pre-faulted, huge-page advised: merges, scatters and slots hit them at random */
	void *p = w->dev ? w->dev->alloc(cap) : scd_cpu_alloc(cap);
	if (!p)
		return scd_scheme_fail(SC_ERR_NOMEM, "cannot allocate %zu bytes", cap);
	if (keep && w->p) {
		size_t n = keep < w->cap ? keep : w->cap;
		if (w->dev)
			w->dev->copy(p, w->p, n);
		else
			memcpy(p, w->p, n);
	}
	if (w->dev)
		w->dev->free(w->p);
	else
		free(w->p);
	w->p = p;
	w->cap = cap;
	return SC_OK;
}

void scd_ws_free(scd_ws_t *w)
{
	if (w->dev)
		w->dev->free(w->p);
	else
		free(w->p);
	w->p = NULL;
	w->cap = 0;
}

/* ---- context --------------------------------------------------------------------------- */

scd_scheme_cfg_t scd_scheme_cfg_default(uint64_t numel, uint64_t seed)
{
	scd_exdyna_cfg_t ex = scd_exdyna_cfg_default(numel, 1, 0, 0.01);
	return (scd_scheme_cfg_t){.numel = numel,
				  .seed = seed,
				  .timeout_ms = 30000,
				  .threads = 1,
				  .density = 0,
				  .spardl_teams = 0,
				  .sketch_rows = 1,
				  .sketch_cols_factor = 2,
				  .sketch_block = 256,
				  .omni_block = 256,
				  .exdyna_blocks = ex.nblocks,
				  .exdyna_move_blocks = ex.blk_move,
				  .exdyna_alpha_permille = ex.alpha_permille,
				  .exdyna_beta_permille = ex.beta_permille,
				  .exdyna_cap_permille = ex.cap_permille,
				  .exdyna_grid_permille = ex.recal_permille,
				  .exdyna_gamma = ex.gamma,
				  .exdyna_fine_symmetric = ex.fine_symmetric,
				  .stream_chunk = 32768,
				  .scatter_s_per_nnz = SCD_COST_SCATTER_S_PER_NNZ,
				  .sum_s_per_nnz = SCD_COST_SUM_S_PER_NNZ,
				  .dense_sum_s_per_elem = SCD_COST_DENSE_SUM_S_PER_ELEM,
				  .cpu_share = 1};
}

sc_status_t scd_scheme_ctx_create(const scd_scheme_cfg_t *cfg, scd_transport_t *t,
				  const scd_device_ops_t *dev, scd_scheme_ctx_t **ctx_p)
{
	if (!cfg || !t || !ctx_p || cfg->numel > SCD_NUMEL_MAX || t->size < 1 || t->rank < 0 ||
	    t->rank >= t->size)
		return scd_scheme_fail(SC_ERR_INVALID, "bad scheme context arguments");
	scd_scheme_ctx_t *c = calloc(1, sizeof(*c));
	if (!c)
		return scd_scheme_fail(SC_ERR_NOMEM, "no memory for a scheme context");
	c->cfg = *cfg;
	if (c->cfg.timeout_ms <= 0)
		c->cfg.timeout_ms = 30000;
	if (!c->cfg.sketch_rows)
		c->cfg.sketch_rows = 1;
	if (c->cfg.sketch_rows > SCD_SKETCH_MAX_ROWS)
		c->cfg.sketch_rows = SCD_SKETCH_MAX_ROWS;
	if (!(c->cfg.sketch_cols_factor > 0))
		c->cfg.sketch_cols_factor = 2;
	if (!c->cfg.sketch_block)
		c->cfg.sketch_block = 256;
	if (!c->cfg.omni_block)
		c->cfg.omni_block = 256;
	if (!c->cfg.stream_chunk)
		c->cfg.stream_chunk = 32768;
	c->t = t;
	c->dev = dev ? dev : &scd_device_cpu_ops;
	/* Every workspace that holds tensor data or travels through the transport lives in
	 * the device's memory; the transfer lists (xs, xr, xb), the
	 * control tables (ctl, htab, meta_host) and the counts stay on the host. */
	scd_ws_t *dws[] = {&c->meta_send, &c->meta_recv, &c->lidx,   &c->lval,	 &c->sendbuf,
			   &c->sendbuf2,  &c->recvbuf,	 &c->aidx,   &c->aval,	 &c->bidx,
			   &c->ridx,	  &c->rval,	 &c->sidx,   &c->sval,	 &c->hidx,
			   &c->hval,	  &c->rtouch,	 &c->rq_idx, &c->rq_val, &c->bp_agg,
			   &c->bp_touch,  &c->fscratch};
	for (size_t i = 0; i < sizeof(dws) / sizeof(dws[0]); i++)
		dws[i]->dev = c->dev;
	c->rank = t->rank;
	c->size = t->size;
	c->alpha_s = 30e-6;
	c->beta_s = 8.0 / 1e9;
	size_t P = (size_t)c->size;
	c->nnz = calloc(P, sizeof(uint64_t));
	c->parts = calloc(P * P, sizeof(uint64_t));
	c->parts_cap = P * P;
	c->sends = calloc(2 * P, sizeof(scd_xfer_t));
	c->recvs = calloc(2 * P, sizeof(scd_xfer_t));
	c->rbytes = calloc(2 * P, sizeof(size_t));
	c->hoff = calloc(P + 1, sizeof(uint64_t));
	c->rcount = calloc(P, sizeof(uint64_t));
	if (!c->nnz || !c->parts || !c->sends || !c->recvs || !c->rbytes || !c->hoff ||
	    !c->rcount || scd_ws_reserve(&c->meta_send, META_HDR_BYTES + 8 * P) != SC_OK ||
	    scd_ws_reserve(&c->meta_recv, P * (META_HDR_BYTES + 8 * P)) != SC_OK ||
	    scd_ws_reserve(&c->meta_host, (P + 1) * (META_HDR_BYTES + 8 * P)) != SC_OK) {
		scd_scheme_ctx_destroy(c);
		return scd_scheme_fail(SC_ERR_NOMEM,
				       "no memory for a scheme context of %zu ranks", P);
	}
	*ctx_p = c;
	return SC_OK;
}

void scd_scheme_ctx_destroy(scd_scheme_ctx_t *c)
{
	if (!c)
		return;
	scd_ws_t *ws[] = {&c->meta_send, &c->meta_recv, &c->lidx,   &c->lval,	&c->sendbuf,
			  &c->recvbuf,	 &c->aidx,	&c->aval,   &c->bidx,	&c->fscratch,
			  &c->hidx,	 &c->hval,	&c->ridx,   &c->rval,	&c->sidx,
			  &c->sval,	 &c->xs,	&c->xr,	    &c->xb,	&c->sendbuf2,
			  &c->rtouch,	 &c->rq_idx,	&c->rq_val, &c->bp_agg, &c->bp_touch,
			  &c->ctl,	 &c->meta_host, &c->htab,   &c->stx};
	for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		scd_ws_free(ws[i]);
	if (c->map)
		c->dev->partmap_release(c->map);
	if (c->ex)
		c->dev->exdyna_destroy(c->ex);
	free(c->nnz), free(c->parts), free(c->sends), free(c->recvs), free(c->rbytes);
	free(c->hoff), free(c->rcount);
	scd_device_stage_free(c->dev, c->stage);
	for (int i = 0; i < c->n_late; i++)
		scd_device_stage_free(c->dev, c->late[i].p);
	free(c);
}

void scd_scheme_ctx_set_net(scd_scheme_ctx_t *c, double alpha_s, double beta_s_per_byte)
{
	c->alpha_s = alpha_s;
	c->beta_s = beta_s_per_byte;
}

void scd_scheme_ctx_set_transport(scd_scheme_ctx_t *c, scd_transport_t *t)
{
	c->t = t;
}

uint64_t scd_scheme_ctx_step(const scd_scheme_ctx_t *c)
{
	return c->step;
}

const scd_scheme_cfg_t *scd_scheme_ctx_cfg(const scd_scheme_ctx_t *c)
{
	return &c->cfg;
}

uint64_t scd_scheme_ctx_digest(const scd_scheme_ctx_t *c)
{
	uint64_t h = scd_fmix64(c->step + 1);
	if (c->ex)
		h = scd_fmix64(h ^ scd_exdyna_digest(c->ex));
	return h;
}

/* Writes up to max queued residual additions; returns whether some are left. */
#define SCD_RES_SLICE 8192 /* random read-modify-writes: about a millisecond */
static int res_write(scd_scheme_ctx_t *c, uint64_t max)
{
	if (!c->rq_res) /* nothing is kept without a residual */
		c->rq_done = c->rq_n;
	uint64_t end = c->rq_n - c->rq_done > max ? c->rq_done + max : c->rq_n;
	if (end > c->rq_done) /* in queue order; the indices where it was zero go to rtouch */
		c->dev->residual_add(c->rq_res, (const uint32_t *)c->rq_idx.p + c->rq_done,
				     (const float *)c->rq_val.p + c->rq_done, end - c->rq_done,
				     c->rtrack ? c->rtouch.p : NULL, &c->n_rtouch);
	c->rq_done = end;
	return end < c->rq_n;
}

static int res_work(void *arg)
{
	return res_write(arg, SCD_RES_SLICE);
}

/* ---- transport wrappers ------------------------------------------------------------------ */

/* A transport failure: the transport logged it where it was detected, so it is only
 * recorded here (with the step), for scd_scheme_error(). */
static sc_status_t xport_fail(scd_scheme_ctx_t *c, sc_status_t st, const char *what)
{
	snprintf(scheme_err, sizeof(scheme_err), "rank %d: %s at step %llu: %s", c->rank, what,
		 (unsigned long long)c->step, scd_transport_error());
	scd_debug(SCD_SUB_ENGINE, "scheme: %s (%s)", scheme_err, sc_status_name(st));
	return st;
}

/* The device's queued work done (the buffers an exchange names are final) and its first
 * failure since the last sync. */
static sc_status_t dev_sync(scd_scheme_ctx_t *c, const char *before)
{
	sc_status_t st = c->dev->sync();
	if (st != SC_OK)
		return scd_scheme_fail(st, "rank %d: %s device failed before %s at step %llu",
				       c->rank, c->dev->name, before,
				       (unsigned long long)c->step);
	return SC_OK;
}

/*
 * Staging (docs/design.md, the GPU device): a transport that moves host memory cannot read
 * a GPU's buffers, so an exchange of a device without host memory goes through c->stage:
 * each send is copied to the host first (to_host waits for it), the transport moves host
 * bytes, and each receive is copied back (what arrived of it) before anything reads it.
 * Work overlapped with a staged exchange still overlaps it: each receive is copied back as
 * it completes, before the work runs, and a send the work releases (held back until a
 * later phase has encoded it) is staged before the transport sees its length.
 */
static int staged(const scd_scheme_ctx_t *c)
{
	return !scd_device_host_memory(c->dev) && !c->t->ops->device_memory;
}

static sc_status_t stage_reserve(scd_scheme_ctx_t *c, size_t bytes)
{
	if (bytes <= c->stage_cap)
		return SC_OK;
	size_t cap = c->stage_cap ? c->stage_cap : 1u << 16;
	while (cap < bytes)
		cap *= 2;
	void *p = scd_device_stage_alloc(c->dev, cap);
	if (!p)
		return scd_scheme_fail(SC_ERR_NOMEM,
				       "rank %d: cannot stage %zu bytes through host memory",
				       c->rank, bytes);
	scd_device_stage_free(c->dev, c->stage);
	c->stage = p;
	c->stage_cap = cap;
	return SC_OK;
}

/* Host room for a send held back until the work writes its length (only then is its size
 * known): from chunks that are never moved while an exchange runs, reused by the next. */
static void *stage_late(scd_scheme_ctx_t *c, size_t bytes)
{
	bytes = scd_slot8(bytes);
	for (int i = 0; i < c->n_late; i++) {
		scd_stage_chunk_t *k = &c->late[i];
		if (k->cap - k->used >= bytes) {
			void *p = (uint8_t *)k->p + k->used;
			k->used += bytes;
			return p;
		}
	}
	if (c->n_late == SCD_STAGE_CHUNKS)
		return NULL;
	size_t cap = c->n_late ? 2 * c->late[c->n_late - 1].cap : c->stage_cap;
	if (cap < bytes)
		cap = bytes;
	void *p = scd_device_stage_alloc(c->dev, cap);
	if (!p)
		return NULL;
	c->late[c->n_late++] = (scd_stage_chunk_t){p, cap, bytes};
	return p;
}

/* The transfers' host copies: sends filled (those held back are staged by the work when
 * released), receives to be copied back as they complete. */
static sc_status_t stage_lists(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, scd_xfer_t **hs_p,
			       scd_xfer_t **hr_p)
{
	size_t bytes = 0;
	for (int i = 0; i < ns; i++)
		if (s[i].bytes != SCD_XFER_PENDING)
			bytes += scd_slot8(s[i].bytes);
	for (int i = 0; i < nr; i++)
		bytes += scd_slot8(r[i].bytes);
	sc_status_t st = stage_reserve(c, bytes);
	if (st == SC_OK)
		st = scd_ws_reserve(&c->stx,
				    sizeof(scd_xfer_t) * (size_t)(ns + nr) + (size_t)nr + 8);
	if (st != SC_OK)
		return st;
	for (int i = 0; i < c->n_late; i++)
		c->late[i].used = 0;
	scd_xfer_t *hs = c->stx.p, *hr = hs + ns;
	memset(hr + nr, 0, (size_t)nr); /* receives copied back */
	uint8_t *p = c->stage;
	for (int i = 0; i < ns; i++) {
		hs[i] = (scd_xfer_t){s[i].peer, p, s[i].bytes};
		if (s[i].bytes == SCD_XFER_PENDING)
			continue;
		c->dev->to_host(p, s[i].buf, s[i].bytes);
		p += scd_slot8(s[i].bytes);
	}
	for (int i = 0; i < nr; i++) {
		hr[i] = (scd_xfer_t){r[i].peer, p, r[i].bytes};
		p += scd_slot8(r[i].bytes);
	}
	*hs_p = hs;
	*hr_p = hr;
	return dev_sync(c, "an exchange");
}

typedef struct stage_run {
	scd_scheme_ctx_t *c;
	const scd_xfer_t *s, *r;
	scd_xfer_t *hs, *hr;
	int ns, nr;
	size_t *rb;
	const scd_xfer_work_t *inner;
} stage_run_t;

/* The receives that completed (rb[i] of each, or all of it), once each, back into the
 * device's buffers. */
static void stage_back(stage_run_t *sr)
{
	uint8_t *done = (uint8_t *)(sr->hr + sr->nr);
	for (int i = 0; i < sr->nr; i++) {
		size_t got = sr->rb ? sr->rb[i] : sr->r[i].bytes;
		if (done[i] || got == SCD_XFER_PENDING)
			continue;
		sr->c->dev->from_host(sr->r[i].buf, sr->hr[i].buf, got);
		done[i] = 1;
	}
}

/* The sends the work released: staged (once per buffer: a segment sent to several peers
 * is copied once), then released in the transport's list. */
static sc_status_t stage_release(stage_run_t *sr)
{
	for (int i = 0; i < sr->ns; i++) {
		scd_xfer_t *h = &sr->hs[i];
		size_t bytes = sr->s[i].bytes;
		if (h->bytes != SCD_XFER_PENDING || bytes == SCD_XFER_PENDING)
			continue;
		void *host = NULL;
		for (int j = 0; j < i && !host; j++)
			if (sr->s[j].buf == sr->s[i].buf && sr->hs[j].bytes == bytes &&
			    sr->s[j].bytes == bytes && sr->hs[j].buf != NULL)
				host = sr->hs[j].buf;
		if (!host) {
			if (!(host = stage_late(sr->c, bytes)))
				return scd_scheme_fail(SC_ERR_NOMEM,
						       "rank %d: cannot stage a %zu-byte send "
						       "through host memory",
						       sr->c->rank, bytes);
			sr->c->dev->to_host(host, sr->s[i].buf, bytes);
		}
		h->buf = host;
		h->bytes = bytes;
	}
	return SC_OK;
}

/* The scheme's work over a staged exchange: it reads receives once they are back in
 * device memory, and its released sends are staged before the transport sees them. */
static int stage_work(void *arg)
{
	stage_run_t *sr = arg;
	stage_back(sr);
	int k = sr->inner->fn(sr->inner->arg);
	if (k < 0)
		return k;
	sc_status_t st = stage_release(sr);
	return st != SC_OK ? (int)st : k;
}

/* The timeline's event of one exchange round begun at t0 (util/timeline.h): on the
 * calling thread's lane, inside the scheme's event, with what this rank sent. */
static void tl_round(const scd_scheme_ctx_t *c, const char *what, uint64_t t0,
		     const scd_xfer_t *s, int ns, int nr, size_t send_bytes)
{
	if (!t0)
		return;
	for (int i = 0; i < ns; i++)
		send_bytes += s[i].bytes;
	scd_tl_arg_t a[] = {{"round", NULL, c->rounds},
			    {"send_bytes", NULL, (int64_t)send_bytes},
			    {"sends", NULL, ns},
			    {"recvs", NULL, nr},
			    {"transport", c->t->ops->name, 0}};
	scd_tl_here(what, t0, a, 5);
}

static sc_status_t xchg_staged(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, size_t *rb,
			       const scd_xfer_work_t *inner_w);

/* One exchange through the transport, staged where the device needs it; inner_w is the
 * work that may overlap it. */
static sc_status_t xchg_any(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			    const scd_xfer_t *r, int nr, size_t *rb,
			    const scd_xfer_work_t *inner_w)
{
	uint64_t tl = scd_tl_begin();
	sc_status_t st = xchg_staged(c, s, ns, r, nr, rb, inner_w);
	tl_round(c, "xchg", tl, s, ns, nr, 0);
	return st;
}

static sc_status_t xchg_staged(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, size_t *rb,
			       const scd_xfer_work_t *inner_w)
{
	sc_status_t st;
	if (!staged(c)) {
		if (!rb && !inner_w)
			return scd_transport_exchange(c->t, s, ns, r, nr, c->cfg.timeout_ms);
		return scd_transport_exchange_vw(c->t, s, ns, r, nr, rb, inner_w,
						 c->cfg.timeout_ms);
	}
	stage_run_t sr = {c, s, r, NULL, NULL, ns, nr, rb, inner_w};
	if ((st = stage_lists(c, s, ns, r, nr, &sr.hs, &sr.hr)) != SC_OK)
		return st;
	scd_xfer_work_t w = {stage_work, &sr};
	if (!rb && !inner_w)
		st = scd_transport_exchange(c->t, sr.hs, ns, sr.hr, nr, c->cfg.timeout_ms);
	else
		st = scd_transport_exchange_vw(c->t, sr.hs, ns, sr.hr, nr, rb,
					       inner_w ? &w : NULL, c->cfg.timeout_ms);
	if (st == SC_OK)
		stage_back(&sr);
	return st;
}

sc_status_t scd_scheme_xchg(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			    const scd_xfer_t *r, int nr)
{
	if (ns == 0 && nr == 0)
		return SC_OK;
	sc_status_t st = dev_sync(c, "an exchange");
	if (st != SC_OK)
		return st;
	c->rounds++;
	double t0 = scd_now_s();
	st = xchg_any(c, s, ns, r, nr, NULL, NULL);
	c->xchg_s += scd_now_s() - t0;
	return st == SC_OK ? st : xport_fail(c, st, "exchange");
}

sc_status_t scd_scheme_xchg_v(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			      const scd_xfer_t *r, int nr, size_t *rb)
{
	if (ns == 0 && nr == 0)
		return SC_OK;
	sc_status_t st = dev_sync(c, "an exchange");
	if (st != SC_OK)
		return st;
	c->rounds++;
	double t0 = scd_now_s();
	scd_xfer_work_t w = {res_work, c}; /* queued residual additions, if any */
	st = xchg_any(c, s, ns, r, nr, rb, c->rq_done < c->rq_n ? &w : NULL);
	c->xchg_s += scd_now_s() - t0;
	return st == SC_OK ? st : xport_fail(c, st, "exchange");
}

sc_status_t scd_scheme_xchg_vw(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, size_t *rb,
			       const scd_xfer_work_t *w)
{
	sc_status_t st = SC_OK;
	c->work_st = SC_OK;
	res_write(c, UINT64_MAX); /* one work at a time: w's */
	if (ns || nr) {
		if ((st = dev_sync(c, "an exchange")) != SC_OK)
			return st;
		c->rounds++;
		double t0 = scd_now_s();
		st = xchg_any(c, s, ns, r, nr, rb, w);
		c->xchg_s += scd_now_s() - t0;
		if (st != SC_OK)
			return c->work_st != SC_OK ? c->work_st : xport_fail(c, st, "exchange");
	}
	int k;
	while ((k = w->fn(w->arg)) > 0)
		;
	return k < 0 ? (sc_status_t)k : SC_OK;
}

sc_status_t scd_scheme_work_fail(scd_scheme_ctx_t *c, sc_status_t st, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return c->work_st = scd_scheme_fail(st, "%s", msg);
}

sc_status_t scd_scheme_allreduce_typed(scd_scheme_ctx_t *c, void *data, size_t n,
				       sc_dtype_t dtype)
{
	if (c->size <= 1 || n == 0)
		return SC_OK;
	sc_status_t st = dev_sync(c, "an allreduce");
	if (st != SC_OK)
		return st;
	c->rounds += 2 * (uint32_t)(c->size - 1);
	double t0 = scd_now_s();
	uint64_t tl = scd_tl_begin();
	scd_xfer_work_t w = {res_work, c}; /* queued residual additions, if any */
	void *buf = data;
	size_t bytes = n * sc_dtype_size(dtype);
	if (staged(c)) { /* the ring sums on the host: the whole buffer goes there and back */
		if ((st = stage_reserve(c, bytes)) != SC_OK)
			return st;
		c->dev->to_host(c->stage, data, bytes);
		buf = c->stage;
	}
	st = scd_transport_allreduce_w(c->t, buf, n, dtype, SC_OP_SUM,
				       c->rq_done < c->rq_n ? &w : NULL, c->cfg.timeout_ms);
	if (st == SC_OK && buf != data)
		c->dev->from_host(data, buf, bytes);
	/* the ring's own additions, pipelined with its transfers, count as exchange time */
	c->xchg_s += scd_now_s() - t0;
	tl_round(c, "allreduce", tl, NULL, 0, 0, bytes);
	return st == SC_OK ? st : xport_fail(c, st, "allreduce");
}

sc_status_t scd_scheme_allreduce(scd_scheme_ctx_t *c, float *data, size_t n)
{
	return scd_scheme_allreduce_typed(c, data, n, SC_FLOAT32);
}

/* ---- metadata round ---------------------------------------------------------------------- */

static sc_status_t meta_round(scd_scheme_ctx_t *c, scd_scheme_t s, uint64_t nnz,
			      const uint64_t *parts, uint32_t nparts);

/* The metadata round, an event of the timeline around its exchange. */
sc_status_t scd_scheme_meta(scd_scheme_ctx_t *c, scd_scheme_t s, uint64_t nnz,
			    const uint64_t *parts, uint32_t nparts)
{
	uint64_t tl = scd_tl_begin();
	sc_status_t st = meta_round(c, s, nnz, parts, nparts);
	if (tl) {
		scd_tl_arg_t a[] = {{"nnz", NULL, (int64_t)nnz}, {"parts", NULL, nparts}};
		scd_tl_here("meta", tl, a, 2);
	}
	return st;
}

static sc_status_t meta_round(scd_scheme_ctx_t *c, scd_scheme_t s, uint64_t nnz,
			      const uint64_t *parts, uint32_t nparts)
{
	int P = c->size, me = c->rank;
	size_t slot =
	    META_HDR_BYTES + 8 * (size_t)(nparts > (uint32_t)P ? nparts : (uint32_t)P);
	if (nparts > (uint32_t)P * SCD_CHUNKS_MAX && nparts > SCD_META_HIST_MAX)
		return scd_scheme_fail(SC_ERR_INVALID, "metadata of %u counts", nparts);
	if ((uint64_t)P * nparts > c->parts_cap) {
		uint64_t *np = realloc(c->parts, (size_t)P * nparts * sizeof(uint64_t));
		if (!np)
			return scd_scheme_fail(SC_ERR_NOMEM, "metadata of %u counts", nparts);
		c->parts = np;
		c->parts_cap = (uint64_t)P * nparts;
	}
	sc_status_t st;
	if ((st = scd_ws_reserve(&c->meta_send, slot)) != SC_OK ||
	    (st = scd_ws_reserve(&c->meta_recv, (size_t)P * slot)) != SC_OK ||
	    (st = scd_ws_reserve(&c->meta_host, (size_t)(P + 1) * slot)) != SC_OK)
		return st;
	c->nparts = nparts;
	/* composed on the host (meta_host's last slot), then moved to the device's send
	 * buffer; what arrives is read back whole (P small slots) */
	uint8_t *h = c->meta_host.p, *m = h + (size_t)P * slot;
	scd_put32(m, META_MAGIC);
	scd_put32(m + 4, (uint32_t)s);
	scd_put64(m + 8, c->cfg.numel);
	scd_put64(m + 16, c->step);
	scd_put64(m + 24, nnz);
	scd_put32(m + 32, nparts);
	scd_put32(m + 36, c->last_elapsed_us);
	for (uint32_t p = 0; p < nparts; p++)
		scd_put64(m + META_HDR_BYTES + 8 * p, parts[p]);
	size_t len = META_HDR_BYTES + 8 * (size_t)nparts;
	c->dev->from_host(c->meta_send.p, m, len);
	int n = 0;
	for (int q = 0; q < P; q++) {
		if (q == me)
			continue;
		c->sends[n] = (scd_xfer_t){q, c->meta_send.p, len};
		c->recvs[n] = (scd_xfer_t){q, (uint8_t *)c->meta_recv.p + slot * q, slot};
		n++;
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	c->dev->to_host(h, c->meta_recv.p, (size_t)P * slot);
	memcpy(h + slot * me, m, len);
	c->total_nnz = c->max_nnz = 0;
	c->prev_elapsed_max_us = 0;
	for (int q = 0; q < P; q++) {
		const uint8_t *r = h + slot * q;
		if (scd_get32(r + 36) > c->prev_elapsed_max_us)
			c->prev_elapsed_max_us = scd_get32(r + 36);
		if (scd_get32(r) != META_MAGIC || scd_get32(r + 4) != (uint32_t)s ||
		    scd_get64(r + 8) != c->cfg.numel || scd_get64(r + 16) != c->step ||
		    scd_get32(r + 32) != nparts)
			return scd_scheme_fail(
			    SC_ERR_MISMATCH,
			    "rank %d runs %s over %llu elements at step %llu, rank %d runs %s "
			    "over %llu at step %llu",
			    me, scd_scheme_name(s), (unsigned long long)c->cfg.numel,
			    (unsigned long long)c->step, q, scd_scheme_name(scd_get32(r + 4)),
			    (unsigned long long)scd_get64(r + 8),
			    (unsigned long long)scd_get64(r + 16));
		c->nnz[q] = scd_get64(r + 24);
		c->total_nnz += c->nnz[q];
		if (c->nnz[q] > c->max_nnz)
			c->max_nnz = c->nnz[q];
		for (uint32_t p = 0; p < nparts; p++)
			c->parts[(size_t)q * nparts + p] =
			    scd_get64(r + META_HDR_BYTES + 8 * p);
	}
	return SC_OK;
}

/* ---- the contribution ----------------------------------------------------------------------
 */

uint64_t scd_scheme_local_nnz(const scd_scheme_ctx_t *c, const scd_scheme_io_t *io)
{
	return io->coo ? io->coo->nnz : c->dev->count_nonzero(io->data, c->cfg.numel);
}

sc_status_t scd_scheme_local_coo(scd_scheme_ctx_t *c, const scd_scheme_io_t *io)
{
	if (io->coo) {
		c->local = *io->coo;
		return SC_OK;
	}
	uint64_t nnz = scd_scheme_local_nnz(c, io);
	sc_status_t st = scd_ws_reserve(&c->lidx, 4 * nnz + 4);
	if (st == SC_OK)
		st = scd_ws_reserve(&c->lval, 4 * nnz + 4);
	if (st != SC_OK)
		return st;
	uint32_t *idx = c->lidx.p;
	float *val = c->lval.p;
	uint64_t w = c->dev->dense_to_coo(io->data, c->cfg.numel, idx, val);
	c->local = (scd_coo_t){idx, val, w, nnz + 1};
	return SC_OK;
}

sc_status_t scd_scheme_local_meta(scd_scheme_ctx_t *c, const scd_scheme_io_t *io,
				  scd_scheme_t s)
{
	sc_status_t st = scd_scheme_local_coo(c, io);
	return st == SC_OK ? scd_scheme_meta(c, s, c->local.nnz, NULL, 0) : st;
}

void scd_scheme_densify(scd_scheme_ctx_t *c, const scd_scheme_io_t *io)
{
	if (!io->coo)
		return;
	c->dev->clear(io->data, 4 * c->cfg.numel);
	c->dev->coo_scatter_add(io->data, io->coo);
}

sc_status_t scd_res_reserve(scd_scheme_ctx_t *c, uint64_t n)
{
	sc_status_t st;
	uint64_t need = c->rq_n + n;
	if ((st = scd_ws_reserve_keep(&c->rq_idx, 4 * need, 4 * c->rq_n)) != SC_OK ||
	    (st = scd_ws_reserve_keep(&c->rq_val, 4 * need, 4 * c->rq_n)) != SC_OK)
		return st;
	/* every entry written records at most one index */
	return c->rtrack ? scd_ws_reserve_keep(&c->rtouch, 4 * need, 4 * c->n_rtouch) : SC_OK;
}

sc_status_t scd_res_queue(scd_scheme_ctx_t *c, const uint32_t *idx, const float *val,
			  uint64_t n, float share)
{
	sc_status_t st = scd_res_reserve(c, n);
	if (st != SC_OK)
		return st;
	c->dev->coo_scale_copy((uint32_t *)c->rq_idx.p + c->rq_n,
			       (float *)c->rq_val.p + c->rq_n, idx, val, n, share);
	c->rq_n += n;
	return SC_OK;
}

int scd_scheme_residual_added(const scd_scheme_ctx_t *c, const uint32_t **idx_p, uint64_t *n_p)
{
	*idx_p = c->rtouch.p;
	*n_p = c->n_rtouch;
	return c->rtouch_ok;
}

/* ---- sparse results ----------------------------------------------------------------- */

/*
 * One two-way merge per list, in list order: ((l0 + l1) + l2) + ..., so every sum is
 * formed in rank order, as the dense path's scatter-adds into a cleared buffer form it
 * (0.0f + v: its bits for a first value, -0.0 included). Sequential two-way merges move
 * more entries than a P-way heap but without its branchy sift: about twice as fast at
 * P = 4 and 8 on embedding-like lists.
 */
sc_status_t scd_scheme_merge_begin(scd_scheme_ctx_t *c, scd_merge_t *mg, scd_coo_t *dst, int n,
				   uint64_t total)
{
	if (total > dst->cap) /* the lists' union can be as long as they are together */
		return scd_scheme_fail(SC_ERR_LIMIT, "merge: %llu entries for room of %llu",
				       (unsigned long long)total, (unsigned long long)dst->cap);
	sc_status_t st;
	if ((st = scd_ws_reserve(&c->sidx, 4 * total + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sval, 4 * total + 4)) != SC_OK)
		return st;
	/* n writes (a copy, then n - 1 merges) alternate between dst and the scratch,
	 * starting where the last one lands in dst */
	*mg = (scd_merge_t){.dev = c->dev, .dst = dst, .total = total, .left = n};
	mg->ai = dst->idx, mg->av = dst->val, mg->bi = c->sidx.p, mg->bv = c->sval.p;
	if (n % 2 == 0) {
		uint32_t *ti = mg->ai;
		float *tv = mg->av;
		mg->ai = mg->bi, mg->av = mg->bv, mg->bi = ti, mg->bv = tv;
	}
	dst->nnz = 0;
	return SC_OK;
}

sc_status_t scd_scheme_merge_add(scd_merge_t *mg, const scd_coo_t *l)
{
	if (mg->left <= 0 || mg->m + l->nnz > mg->total)
		return scd_scheme_fail(SC_ERR_LIMIT, "merge: list of %llu entries over %llu",
				       (unsigned long long)l->nnz,
				       (unsigned long long)mg->total);
	if (mg->first_done) { /* device.h's merge_two: a's first on equal indices */
		mg->m = mg->dev->merge_two(mg->ai, mg->av, mg->m, l, mg->bi, mg->bv);
		uint32_t *ti = mg->ai;
		float *tv = mg->av;
		mg->ai = mg->bi, mg->av = mg->bv, mg->bi = ti, mg->bv = tv;
	} else {
		mg->dev->coo_copy_first(mg->ai, mg->av, l);
		mg->m = l->nnz;
		mg->first_done = 1;
	}
	if (--mg->left == 0)
		mg->dst->nnz = mg->m;
	return SC_OK;
}

sc_status_t scd_scheme_merge_result(scd_scheme_ctx_t *c, const scd_coo_t *lists, int n,
				    scd_coo_t *dst)
{
	uint64_t total = 0;
	for (int i = 0; i < n; i++)
		total += lists[i].nnz;
	scd_merge_t mg;
	sc_status_t st = scd_scheme_merge_begin(c, &mg, dst, n, total);
	for (int i = 0; i < n && st == SC_OK; i++)
		st = scd_scheme_merge_add(&mg, &lists[i]);
	return st;
}

/* A scheme that did not fill io->out itself (c->res_ready): the non-zeros of io->data
 * when they fit, else the result is marked dense. */
static sc_status_t sparse_result(scd_scheme_ctx_t *c, const scd_scheme_io_t *io)
{
	scd_coo_t *o = io->out;
	if (c->res_ready)
		return SC_OK;
	if (c->dev->count_nonzero(io->data, c->cfg.numel) > o->cap) {
		o->nnz = SCD_RESULT_DENSE;
		return SC_OK;
	}
	o->nnz = c->dev->dense_to_coo(io->data, c->cfg.numel, o->idx, o->val);
	return SC_OK;
}

/* Checks an input COO: indices ascending, unique, in range. */
static sc_status_t coo_check(const scd_scheme_ctx_t *c, const scd_coo_t *coo)
{
	uint64_t i = c->dev->coo_check(coo, c->cfg.numel);
	if (i >= coo->nnz)
		return SC_OK;
	uint32_t bad = 0;
	c->dev->to_host(&bad, coo->idx + i, 4);
	return scd_scheme_fail(SC_ERR_INVALID,
			       "COO input: index %u at %llu is out of range or not ascending",
			       bad, (unsigned long long)i);
}

/* ---- deterministic top-k --------------------------------------------------------------------
 */

uint64_t scd_scheme_topk_coo(const scd_device_ops_t *dev, uint32_t *idx, float *val, uint64_t n,
			     uint64_t k, uint32_t *tmp_idx, float *tmp_val)
{
	return dev->coo_topk(idx, val, n, k, tmp_idx, tmp_val);
}

/* ---- dispatch
 * -------------------------------------------------------------------------------- */

/* Statistics of a dense result, identical on every rank: non-zeros and range skew. A pass
 * over the whole buffer, so buffers over SCD_STATS_FULL_NUMEL elements are counted every
 * SCD_STATS_EVERY steps (the same steps on every rank) and report the last count between:
 * the profile they feed is an average over steps anyway. */
#define SCD_STATS_FULL_NUMEL (1u << 20)
#define SCD_STATS_EVERY	     4
static void result_stats(scd_scheme_ctx_t *c, const float *g, scd_scheme_report_t *r)
{
	uint64_t n = c->cfg.numel, P = (uint64_t)c->size, total = 0, maxr = 0;
	if (n > SCD_STATS_FULL_NUMEL && c->step % SCD_STATS_EVERY && c->stat_union) {
		r->union_nnz = c->stat_union;
		r->skew = c->stat_skew;
		return;
	}
	c->dev->range_counts(g, n, (uint32_t)P, c->rcount);
	for (uint64_t p = 0; p < P; p++) {
		total += c->rcount[p];
		if (c->rcount[p] > maxr)
			maxr = c->rcount[p];
	}
	r->union_nnz = c->stat_union = total;
	r->skew = c->stat_skew = total ? (double)maxr * (double)P / (double)total : 1;
}

/* The same statistics from a sparse result (ascending indices): O(nnz + P). */
static void result_stats_coo(const scd_scheme_ctx_t *c, const scd_coo_t *o,
			     scd_scheme_report_t *r)
{
	uint64_t P = (uint64_t)c->size, total = 0, maxr = 0;
	c->dev->coo_range_counts(o, c->cfg.numel, (uint32_t)P, c->rcount);
	for (uint64_t p = 0; p < P; p++) {
		total += c->rcount[p];
		if (c->rcount[p] > maxr)
			maxr = c->rcount[p];
	}
	r->union_nnz = total;
	r->skew = total ? (double)maxr * (double)P / (double)total : 1;
}

static sc_status_t scheme_run(scd_scheme_t s, scd_scheme_ctx_t *c, scd_scheme_io_t *io,
			      scd_scheme_report_t *report_p);

/* One run, an event of the timeline (on the calling thread's lane, around the run's
 * exchange rounds) named "scheme" with the scheme's name and the buffer's size. */
sc_status_t scd_scheme_run(scd_scheme_t s, scd_scheme_ctx_t *c, scd_scheme_io_t *io,
			   scd_scheme_report_t *report_p)
{
	if ((unsigned)s >= SCD_SCHEME_COUNT || !c || !io || !io->data)
		return scd_scheme_fail(SC_ERR_INVALID, "bad scheme run arguments");
	uint64_t tl = scd_tl_begin();
	sc_status_t st = scheme_run(s, c, io, report_p);
	if (tl) {
		scd_tl_arg_t a[] = {{"scheme", scd_scheme_name(s), 0},
				    {"bytes", NULL, (int64_t)(c->cfg.numel * sizeof(float))},
				    {"rounds", NULL, c->rounds},
				    {"status", sc_status_name(st), 0}};
		scd_tl_here("scheme", tl, a, 4);
	}
	return st;
}

static sc_status_t scheme_run(scd_scheme_t s, scd_scheme_ctx_t *c, scd_scheme_io_t *io,
			      scd_scheme_report_t *report_p)
{
	scheme_err[0] = 0;
	double t0 = scd_now_s();
	scd_transport_counters_t k0, k1;
	c->t->ops->counters(c->t, &k0);
	c->rounds = 0;
	c->xchg_s = 0;
	c->imbalance = 0;
	c->teams_used = 0;
	c->bsag_teams = 0;
	c->bsag_hl = 0;
	c->gamma_pts = 0;
	c->res_ready = 0;
	c->rtrack = c->rtouch_ok = io->track_residual && io->residual;
	c->n_rtouch = 0;
	c->rq_res = io->residual;
	c->rq_n = c->rq_done = 0;
	sc_status_t st = SC_OK;
	if (io->out && !io->coo)
		return scd_scheme_fail(SC_ERR_INVALID, "a sparse result needs COO input");
	if (io->coo)
		st = coo_check(c, io->coo);
	if (st == SC_OK && c->cfg.numel > 0)
		st = scd_schemes[s]->run(c, io);
	res_write(c, UINT64_MAX); /* what no exchange overlapped, also after a failure */
	c->sd.prev_d = st == SC_OK ? c->teams_used : 0; /* whose time the next run folds */
	if (st != SC_OK) {
		c->dev->sync(); /* a failed run's device failure, if any, goes with it */
		return st;
	}
	if (io->out && (st = sparse_result(c, io)) != SC_OK)
		return st;
	c->t->ops->counters(c->t, &k1);
	scd_scheme_report_t r = {.scheme = s,
				 .lossless = scd_schemes[s]->lossless,
				 .step = c->step,
				 .bytes_sent = k1.bytes_sent - k0.bytes_sent,
				 .bytes_recv = k1.bytes_recv - k0.bytes_recv,
				 .messages = k1.messages_sent - k0.messages_sent,
				 .rounds = c->rounds,
				 .teams = c->teams_used,
				 .bsag_teams = c->bsag_teams,
				 .bsag_hl = c->bsag_hl,
				 .gamma_pts = c->gamma_pts,
				 .local_nnz = c->nnz[c->rank],
				 .total_nnz = c->total_nnz,
				 .max_nnz = c->max_nnz};
	if (io->out && io->out->nnz != SCD_RESULT_DENSE)
		result_stats_coo(c, io->out, &r);
	else
		result_stats(c, io->data, &r);
	/* the run's device work done: its results are final, its failure is the run's */
	if ((st = dev_sync(c, "the end of the run")) != SC_OK)
		return st;
	double P = c->size, mean = (double)c->total_nnz / P;
	r.density = c->cfg.numel ? mean / (double)c->cfg.numel : 0;
	r.gamma = mean > 0 ? (double)r.union_nnz / mean : 1;
	r.imbalance = c->imbalance > 0 ? c->imbalance
		      : mean > 0       ? (double)c->max_nnz / mean
				       : 1;
	/* A sketch's result (S2) is dense inside every non-zero block: its non-zeros are not
	 * the union, and sizing the next sketch from them would make it (nearly) dense. */
	if (!scd_schemes[s]->sketched)
		c->last_union = r.union_nnz;
	c->step++;
	r.elapsed_s = scd_now_s() - t0;
	r.xchg_s = c->xchg_s;
	r.prev_elapsed_max_s = c->prev_elapsed_max_us * 1e-6;
	memcpy(r.gamma_m, c->gamma_m, sizeof(r.gamma_m));
	memcpy(r.gamma_at, c->gamma_at, sizeof(r.gamma_at));
	c->last_elapsed_us = r.elapsed_s < 4000.0 ? (uint32_t)(r.elapsed_s * 1e6) : UINT32_MAX;
	if (report_p)
		*report_p = r;
	return SC_OK;
}
