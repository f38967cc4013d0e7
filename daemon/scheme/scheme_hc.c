/*
 * scheme_hc.c: Hierarchical Centralization (ZEN Def. 7, SparCML's recursive doubling with
 * incremental aggregation), the second "everyone aggregates everything" scheme of ZEN
 * sec. 2.4.
 *
 * Ranks pair at distances 1, 2, 4, ... and exchange their running aggregate, which grows
 * with the densification gamma(2^i). Any P: with P' the largest power of two <= P, rank
 * P' + j first folds its contribution into rank j, the P' ranks run the doubling, and rank
 * j hands the final aggregate back to P' + j (two more rounds). Both partners of a
 * doubling step add the same two floats (a + b == b + a), so every rank ends with the
 * same bits.
 *
 * The running aggregate is an ascending COO list (values entered as 0.0f + v, a dense
 * scatter-add's bits), so a step costs O(non-zeros) and nothing of size numel is touched
 * but a dense result's buffer: send the list (scheme_msg.c's smallest encoding), merge the
 * partner's into it. The partner's list arrives in K chunks (K = scd_scheme_chunks of the
 * aggregate's bound, which both partners know); while the exchange waits on the network,
 * hc_work decodes what has arrived and merges every index below the watermark W (the last
 * index received + 1). So each step's aggregation hides behind its transfer but for the
 * last chunk's share, and a dense result's buffer is cleared in the idle time of the
 * steps. A rank that receives the final aggregate (replace) takes it whole. The lists live
 * in the device's memory: decodes, merges and clears are its ops, and each chunk's first
 * and last index are read back (to_host) for the order check and the watermark.
 */
#include "scheme/scheme_internal.h"

#include <math.h>
#include <string.h>

typedef struct hc {
	scd_scheme_ctx_t *c;
	scd_scheme_io_t *io;
	scd_coo_t cur;	/* the running aggregate (c->aidx/aval) */
	uint64_t bound; /* most indices an aggregate can have */
	uint32_t K;	/* chunks per message */
	int dense;	/* the result goes to io->data */
	uint64_t cleared;
	/* the step in flight */
	int from, replace;
	uint32_t got;		   /* chunks decoded */
	scd_coo_t r;		   /* the partner's list so far (c->hidx/hval) */
	uint64_t rend;		   /* its last index + 1 (0: none), read back from the device */
	uint64_t W, cpos, rpos, w; /* watermark; consumed of cur and r; merged (c->ridx/rval) */
} hc_t;

/* Largest chunk of an aggregate: the receive capacity of each chunk. */
static uint64_t hc_chunk_max(const hc_t *h)
{
	return (h->bound + h->K - 1) / h->K;
}

static sc_status_t hc_decode(hc_t *h)
{
	scd_scheme_ctx_t *c = h->c;
	const scd_xfer_t *rv = c->xr.p;
	const size_t *rb = c->xb.p;
	while (h->got < h->K && rb[h->got] != SCD_XFER_PENDING) {
		uint64_t last = h->rend ? h->rend - 1 : 0, got = 0;
		sc_status_t st = scd_scheme_msg_append(c->dev, rv[h->got].buf, rb[h->got],
						       c->cfg.numel, &h->r, &got);
		if (st != SC_OK)
			return c->work_st = st;
		int bad = got > hc_chunk_max(h) || h->r.nnz > h->bound;
		if (!bad && got) { /* the chunk's first and last index, read back */
			uint32_t lo = 0, hi = 0;
			c->dev->to_host(&lo, h->r.idx + h->r.nnz - got, 4);
			c->dev->to_host(&hi, h->r.idx + h->r.nnz - 1, 4);
			bad = h->r.nnz > got && lo <= last;
			h->rend = (uint64_t)hi + 1;
		}
		if (bad)
			return scd_scheme_work_fail(c, SC_ERR_PROTOCOL,
						    "hier_central: rank %d's chunk %u (%llu "
						    "non-zeros) is too long or out "
						    "of order",
						    h->from, h->got, (unsigned long long)got);
		h->got++;
	}
	return SC_OK;
}

/* Merges the aggregate's and the partner's entries below W onto the new aggregate. */
static sc_status_t hc_slice(hc_t *h, uint64_t W)
{
	scd_scheme_ctx_t *c = h->c;
	uint64_t cend =
	    h->cpos + c->dev->lower_bound(h->cur.idx + h->cpos, h->cur.nnz - h->cpos, W);
	uint64_t rend =
	    h->rpos + c->dev->lower_bound(h->r.idx + h->rpos, h->r.nnz - h->rpos, W);
	scd_coo_t add = {h->r.idx + h->rpos, h->r.val + h->rpos, rend - h->rpos,
			 rend - h->rpos};
	/* the new aggregate has room for both lists whole (2 bound), so a union that outgrew
	 * the announced counts is caught after the merge; merge_two: the aggregate's entries
	 * first on equal indices, the partner's alone as 0.0f + v */
	h->w +=
	    c->dev->merge_two(h->cur.idx + h->cpos, h->cur.val + h->cpos, cend - h->cpos, &add,
			      (uint32_t *)c->ridx.p + h->w, (float *)c->rval.p + h->w);
	h->cpos = cend;
	h->rpos = rend;
	h->W = W;
	if (h->w > h->bound)
		return scd_scheme_work_fail(
		    c, SC_ERR_PROTOCOL,
		    "hier_central: rank %d's aggregate has more indices "
		    "than all ranks announced",
		    h->from);
	return SC_OK;
}

static int hc_work(void *arg)
{
	hc_t *h = arg;
	sc_status_t st = hc_decode(h);
	if (st != SC_OK)
		return st;
	if (h->from >= 0 && !h->replace) {
		uint64_t W = h->got == h->K ? h->c->cfg.numel : h->rend;
		if (W > h->W)
			return (st = hc_slice(h, W)) != SC_OK ? st : 1;
	}
	return h->dense &&
	       scd_clear_slice(h->c->dev, h->io->data, h->c->cfg.numel, &h->cleared);
}

/* One step: optionally sends the aggregate to `to`, optionally receives one from `from`
 * and merges it in (replace: the received aggregate is the final result). */
static sc_status_t hc_step(hc_t *h, int to, int from, int replace)
{
	scd_scheme_ctx_t *c = h->c;
	uint64_t numel = c->cfg.numel;
	sc_status_t st;
	scd_xfer_t *sends = c->xs.p, *recvs = c->xr.p;
	int ns = 0, nr = 0;
	if (to >= 0) {
		uint8_t *sb = c->sendbuf.p;
		uint64_t used = 0, n = h->cur.nnz;
		for (uint32_t k = 0; k < h->K; k++) {
			uint64_t lo = scd_chunk_lo(n, h->K, k),
				 hi = scd_chunk_lo(n, h->K, k + 1);
			scd_coo_t part = {h->cur.idx + lo, h->cur.val + lo, hi - lo, hi - lo};
			uint64_t bytes = 0;
			if ((st = scd_scheme_msg_encode(c->dev, &part, numel, sb + used,
							c->sendbuf.cap - used, &bytes)) !=
			    SC_OK)
				return scd_scheme_fail(st,
						       "hier_central: encoding %llu non-zeros",
						       (unsigned long long)(hi - lo));
			sends[ns++] = (scd_xfer_t){to, sb + used, bytes};
			used += scd_slot8(bytes);
		}
	}
	if (from >= 0) {
		uint64_t cap = scd_scheme_msg_bytes(numel, hc_chunk_max(h));
		for (uint32_t k = 0; k < h->K; k++)
			recvs[nr++] = (scd_xfer_t){
			    from, (uint8_t *)c->recvbuf.p + k * scd_slot8(cap), cap};
	}
	h->from = from;
	h->replace = replace;
	h->got = from >= 0 ? 0 : h->K;
	h->r = (scd_coo_t){c->hidx.p, c->hval.p, 0, h->bound};
	h->W = h->cpos = h->rpos = h->w = h->rend = 0;
	scd_xfer_work_t w = {hc_work, h};
	if ((st = scd_scheme_xchg_vw(c, sends, ns, recvs, nr, c->xb.p, &w)) != SC_OK ||
	    from < 0)
		return st;
	if (replace) { /* the final aggregate, whole */
		c->dev->copy(h->cur.idx, h->r.idx, 4 * h->r.nnz);
		c->dev->copy(h->cur.val, h->r.val, 4 * h->r.nnz);
		h->cur.nnz = h->r.nnz;
		return SC_OK;
	}
	/* the merged list becomes the aggregate */
	scd_ws_t ti = c->aidx, tv = c->aval;
	c->aidx = c->ridx, c->aval = c->rval;
	c->ridx = ti, c->rval = tv;
	h->cur = (scd_coo_t){c->aidx.p, c->aval.p, h->w, 2 * h->bound};
	return SC_OK;
}

/* The result: the final aggregate as COO straight into io->out (the input was consumed
 * at the start), or scattered into io->data (cleared in the steps' idle time). */
static sc_status_t hc_result(hc_t *h)
{
	scd_scheme_io_t *io = h->io;
	const scd_device_ops_t *dev = h->c->dev;
	if (!h->dense) {
		dev->copy(io->out->idx, h->cur.idx, 4 * h->cur.nnz);
		dev->copy(io->out->val, h->cur.val, 4 * h->cur.nnz);
		io->out->nnz = h->cur.nnz;
		h->c->res_ready = 1;
		return SC_OK;
	}
	if (h->cleared < h->c->cfg.numel)
		dev->clear(io->data + h->cleared, 4 * (h->c->cfg.numel - h->cleared));
	dev->coo_scatter_add(io->data, &h->cur);
	return SC_OK;
}

/*
 * ZEN's densification at the group sizes the doubling reaches: after the step at distance
 * dist, a doubling rank's aggregate holds the 2 dist doubling ranks of its group and their
 * folded partners; its gamma is the aggregate's non-zeros over their mean contribution
 * (every rank's count is known from the metadata round). Each rank sends its gammas of a
 * run with the next run's metadata, one word per doubling level (m << 32 | gamma in
 * millionths, 0: none), and every rank takes the mean per group size (scheme.h, the
 * report's gamma_m and gamma_at), so the profile learns gamma(m) at every m the runs see.
 */
static void hc_gamma_here(hc_t *h, uint32_t level, int dist, int Pp)
{
	scd_scheme_ctx_t *c = h->c;
	int base = c->rank & ~(2 * dist - 1);
	double sum = 0;
	uint32_t m = 0;
	for (int r = base; r < base + 2 * dist; r++) {
		sum += (double)c->nnz[r], m++;
		if (r + Pp < c->size)
			sum += (double)c->nnz[r + Pp], m++;
	}
	if (level < SCD_GAMMA_PTS && sum > 0) {
		c->hc_m[level] = m;
		c->hc_g[level] = (double)h->cur.nnz * m / sum;
	}
}

static void hc_gamma_agree(scd_scheme_ctx_t *c, uint32_t l)
{
	for (uint32_t i = 0; i < l; i++)
		for (int q = 0; q < c->size; q++) {
			uint64_t w = c->parts[(size_t)q * l + i];
			uint32_t m = (uint32_t)(w >> 32), j = 0;
			if (!m)
				continue;
			while (j < c->gamma_pts && c->gamma_m[j] != m)
				j++;
			if (j == c->gamma_pts) { /* a new size: its mean over every rank */
				if (j == SCD_GAMMA_PTS)
					continue;
				double sum = 0;
				uint32_t n = 0;
				for (int r = 0; r < c->size; r++)
					for (uint32_t k = 0; k < l; k++) {
						uint64_t v = c->parts[(size_t)r * l + k];
						if ((uint32_t)(v >> 32) == m)
							sum += (double)(v & 0xffffffffu) * 1e-6,
							    n++;
					}
				c->gamma_m[j] = m;
				c->gamma_at[j] = sum / n;
				c->gamma_pts++;
			}
		}
}

/* The metadata round, carrying this rank's gammas of its previous run (l levels). */
static sc_status_t hc_meta(scd_scheme_ctx_t *c, const scd_scheme_io_t *io, uint32_t l)
{
	sc_status_t st = scd_scheme_local_coo(c, io);
	if (st != SC_OK)
		return st;
	uint64_t w[SCD_GAMMA_PTS] = {0};
	for (uint32_t i = 0; i < l; i++) {
		if (c->hc_m[i])
			w[i] = (uint64_t)c->hc_m[i] << 32 |
			       (uint64_t)llround(fmin(c->hc_g[i], 4096) * 1e6);
		c->hc_m[i] = 0;
	}
	if ((st = scd_scheme_meta(c, SCD_SCHEME_HIER_CENTRAL, c->local.nnz, l ? w : NULL, l)) !=
	    SC_OK)
		return st;
	hc_gamma_agree(c, l);
	return SC_OK;
}

static sc_status_t scd_scheme_hier_central(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	uint32_t l = 0;
	while ((2 << l) <= P && l < SCD_GAMMA_PTS)
		l++;
	sc_status_t st = hc_meta(c, io, l);
	if (st != SC_OK)
		return st;
	uint64_t bound = c->total_nnz < numel ? c->total_nnz : numel;
	hc_t h = {.c = c,
		  .io = io,
		  .bound = bound,
		  .K = scd_scheme_chunks(c, bound),
		  .dense = !scd_scheme_sparse_out(io, bound)};
	/* aggregates (a, r: swapped each step) hold both lists whole before the check; the
	 * partner's list, a malformed last chunk's overrun */
	uint64_t slot = scd_slot8(scd_scheme_msg_bytes(numel, hc_chunk_max(&h))),
		 room = 4 * 2 * bound + 4, in = 4 * (bound + 2 * hc_chunk_max(&h)) + 4;
	if ((st = scd_ws_reserve(&c->aidx, room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->ridx, room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->rval, room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, in)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, in)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sendbuf, h.K * slot)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, h.K * slot)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xs, sizeof(scd_xfer_t) * h.K)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xr, sizeof(scd_xfer_t) * h.K)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xb, sizeof(size_t) * h.K)) != SC_OK)
		return st;
	/* my contribution starts the aggregate (its values as a dense scatter-add's bits) */
	h.cur = (scd_coo_t){c->aidx.p, c->aval.p, c->local.nnz, 2 * bound};
	c->dev->coo_copy_first(h.cur.idx, h.cur.val, &c->local);
	int Pp = 1;
	while (Pp * 2 <= P)
		Pp *= 2;
	if (me >= Pp) { /* folded rank: in first, result out last */
		if ((st = hc_step(&h, me - Pp, -1, 0)) != SC_OK ||
		    (st = hc_step(&h, -1, me - Pp, 1)) != SC_OK)
			return st;
		return hc_result(&h);
	}
	int extra = me + Pp < P ? me + Pp : -1;
	if (extra >= 0 && (st = hc_step(&h, -1, extra, 0)) != SC_OK)
		return st;
	for (int dist = 1, level = 0; dist < Pp; dist <<= 1, level++) {
		if ((st = hc_step(&h, me ^ dist, me ^ dist, 0)) != SC_OK)
			return st;
		hc_gamma_here(&h, (uint32_t)level, dist, Pp);
	}
	if (extra >= 0 && (st = hc_step(&h, extra, -1, 0)) != SC_OK)
		return st;
	return hc_result(&h);
}

/* ---- descriptor ---------------------------------------------------------------------- */

/*
 * The busiest rank's path (rank 0), P' the largest power of two <= P, l = log2 P', e = P - P'
 * folded ranks. Rounds: l doubling steps, plus, when e > 0, the fold-in (rank j < e
 * receives rank P' + j's contribution) and the hand-back (it sends the final aggregate to
 * P' + j): l + 2. Bytes rank 0 sends: at doubling step i = 1..l its aggregate covers its
 * 2^(i-1) doubling ranks and their m_i = min(2^(i-1), e) folded partners, msg(f,
 * gamma(2^(i-1) + m_i) k, U); when e > 0, the hand-back, msg(f, gamma(P) k, U); each capped
 * at U non-zeros (ZEN eq. 2 with its rounds for P a power of two; any P). The fold-in's
 * msg(f, k, U) is received, not sent, by rank 0. cheaper: each message in the cheaper of
 * COO and bitmap, as the scheme encodes each message (scheme_msg.c), instead of in f.
 *
 * Beside ZEN's network formula, one compute term, hc_local_work_s: after its last
 * exchange every rank scatters the final aggregate, min(gamma(P) k, U) non-zeros, into
 * the dense result (hc_result), work that no transfer hides (the merges of the steps
 * and the clearing of the result run while the partner's chunks arrive). At the measured
 * scatter rate (model/cost.h) it was the 44 ms of HC's measured 158.6 ms that its
 * prediction of 114 ms missed (4 nodes, zipf 64M at 1%), enough to pick HC over
 * AGsparse's 127.7 ms. A sparse result copies the list instead, for less.
 */
static double hc_local_work_s(const scd_cost_in_t *in)
{
	double U = (double)in->numel, n = scd_cost_gamma(in, in->P) * scd_cost_nnz(in);
	return scd_cost_compute_s(in, (n < U ? n : U) * in->scatter_s_per_nnz);
}

static scd_cost_t hc_model(const scd_cost_in_t *in, int cheaper)
{
	double U = (double)in->numel, k = scd_cost_nnz(in);
	scd_format_t f = scd_cost_whole_format(in->format);
	uint32_t Pp = 1, l = 0;
	while (2 * Pp <= in->P)
		Pp *= 2, l++;
	uint32_t e = in->P - Pp;
	double bytes = 0;
	for (uint32_t i = 1; i <= l + (e > 0); i++) {
		uint32_t g = 1u << (i - 1), m = g < e ? g : e;
		double nnz = scd_cost_gamma(in, i > l ? in->P : g + m) * k;
		if (nnz > U)
			nnz = U;
		double b = scd_cost_msg_bytes(cheaper ? SCD_FMT_COO : f, nnz, U);
		if (cheaper && scd_cost_msg_bytes(SCD_FMT_BITMAP, nnz, U) < b)
			b = scd_cost_msg_bytes(SCD_FMT_BITMAP, nnz, U);
		bytes += b;
	}
	scd_cost_t r = scd_cost_make(in, e > 0 ? l + 2 : l, bytes);
	r.work_s = hc_local_work_s(in);
	r.seconds += r.work_s;
	return r;
}

static scd_cost_t hier_central_model(const scd_cost_in_t *in)
{
	return hc_model(in, 0);
}

/* It sends each message as COO or bitmap, whichever is smaller (scheme_msg.c). */
static scd_cost_t hier_central_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *in)
{
	return hc_model(in, 1);
}

const scd_scheme_desc_t scd_scheme_hier_central_desc = {
    .name = "hier_central",
    .lists_out = 1,
    .lossless = 1,
    .uses = SCD_COST_DENSITY | SCD_COST_GAMMA,
    .run = scd_scheme_hier_central,
    .model = hier_central_model,
    .cost = hier_central_cost,
};
