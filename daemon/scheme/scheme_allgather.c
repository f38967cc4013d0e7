/*
 * scheme_allgather.c: the two "everyone aggregates everything" schemes of ZEN sec. 2.4.
 *
 * AGsparse: every rank sends its sparse contribution to every other rank in one
 * exchange_v (all P - 1 sends and receives progress together) and aggregates all P of
 * them in rank order, so every rank computes the same sums in the same order; the
 * aggregation streams behind the receives (see "AGsparse, streamed" below).
 *
 * Hierarchical Centralization (ZEN Def. 7, SparCML's recursive doubling with incremental
 * aggregation): ranks pair at distances 1, 2, 4, ... and exchange their running aggregate,
 * which grows with the densification gamma(2^i). Any P: with P' the largest power of two
 * <= P, rank P' + j first folds its contribution into rank j, the P' ranks run the
 * doubling, and rank j hands the final aggregate back to P' + j (two more rounds). Both
 * partners of a doubling step add the same two floats (a + b == b + a), so every rank
 * ends with the same bits.
 *
 * Messages are COO or bitmap, whichever is smaller for the non-zero count (an 8-byte
 * header says which): AGsparse sends its own contribution, HC its running aggregate, whose
 * bitmap caps a message at numel / 8 + 4 numel bytes when densification makes it dense.
 * The running aggregate lives densely in io->data plus an ascending list of its indices
 * (merged with the partner's at each step), so aggregation costs O(non-zeros) per step.
 * AGsparse asked for a sparse result (scheme.h) merges the P lists in rank order instead
 * of aggregating densely, so it never touches all numel elements.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

/* ---- AGsparse, streamed ----------------------------------------------------------------
 *
 * Each rank's list goes out in K equal-count chunks (K from its count alone, so every
 * receiver knows it: one chunk per cfg.stream_chunk entries, at most AG_CHUNKS_MAX), each
 * encoded on its own (a bitmap spans only its chunk's range, so chunks cost no more). While the
 * exchange waits on the network, ag_work decodes the chunks that have arrived into one
 * contiguous list per rank and aggregates every index below the watermark W, the lowest
 * "last index received + 1" over the ranks still sending: all of every rank's entries
 * below W are in, so their sums are final. Every index is still summed in rank order (a
 * merge of the P sub-lists below W, or scatter-adds in rank order), so the result is the
 * same, bit for bit, however the slices fall. For a dense result the buffer is cleared
 * ahead of W in slices while nothing else can be done. What is left when the last byte
 * arrives is the last chunk's share.
 */

#define AG_CHUNKS_MAX 16
#define AG_CLEAR_SLICE (1u << 18) /* floats cleared per idle slice (1 MiB) */

static uint32_t ag_chunks(const scd_scheme_ctx_t *c, uint64_t nnz)
{
	uint64_t min = c->cfg.stream_chunk;
	if (nnz < 2 * min)
		return 1;
	return nnz / min > AG_CHUNKS_MAX ? AG_CHUNKS_MAX : (uint32_t)(nnz / min);
}

/* Room a chunk takes in the send and receive buffers: 8-aligned (the arrays it holds). */
static uint64_t ag_slot(uint64_t bytes)
{
	return (bytes + 7) & ~(uint64_t)7;
}

/* Entries before chunk k of a list of n entries in K chunks. */
static uint64_t ag_chunk_lo(uint64_t n, uint32_t K, uint32_t k)
{
	return n * k / K;
}

typedef struct ag_list {
	uint32_t K, got; /* chunks, chunks decoded */
	int first;	 /* its first receive */
	scd_coo_t l;	 /* decoded so far (the whole local list for this rank) */
	uint64_t pos;	 /* entries aggregated */
} ag_list_t;

typedef struct ag {
	scd_scheme_ctx_t *c;
	scd_scheme_io_t *io;
	ag_list_t *r; /* [P] */
	int sparse;
	uint64_t W, cleared, outn;
} ag_t;

static uint64_t lower_bound(const uint32_t *a, uint64_t n, uint64_t v)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Decodes rank q's chunks that have arrived, appending to its list. */
static sc_status_t ag_decode(ag_t *a, int q)
{
	scd_scheme_ctx_t *c = a->c;
	ag_list_t *r = &a->r[q];
	const scd_xfer_t *rv = c->xr.p;
	const size_t *rb = c->xb.p;
	while (r->got < r->K && rb[r->first + r->got] != SCD_XFER_PENDING) {
		int i = r->first + (int)r->got;
		uint64_t want = ag_chunk_lo(c->nnz[q], r->K, r->got + 1) -
				ag_chunk_lo(c->nnz[q], r->K, r->got);
		uint32_t *wi = r->l.idx + r->l.nnz;
		float *wv = r->l.val + r->l.nnz;
		scd_coo_t d;
		sc_status_t st =
		    scd_scheme_msg_decode(rv[i].buf, rb[i], c->cfg.numel, wi, wv, &d);
		if (st != SC_OK || d.nnz != want)
			return scd_scheme_work_fail(
			    c, SC_ERR_PROTOCOL,
			    "agsparse: rank %d sent %llu non-zeros in chunk %u of %u, announced "
			    "%llu",
			    q, st == SC_OK ? (unsigned long long)d.nnz : 0ull, r->got, r->K,
			    (unsigned long long)want);
		if (d.idx != wi)
			memcpy(wi, d.idx, 4 * d.nnz);
		if (d.val != wv)
			memcpy(wv, d.val, 4 * d.nnz);
		r->l.nnz += d.nnz;
		r->got++;
	}
	return SC_OK;
}

/* Aggregates every index in [a->W, W). */
static sc_status_t ag_slice(ag_t *a, uint64_t W)
{
	scd_scheme_ctx_t *c = a->c;
	int P = c->size;
	scd_coo_t sub[P];
	for (int q = 0; q < P; q++) {
		ag_list_t *r = &a->r[q];
		uint64_t end = r->pos + lower_bound(r->l.idx + r->pos, r->l.nnz - r->pos, W);
		sub[q] = (scd_coo_t){r->l.idx + r->pos, r->l.val + r->pos, end - r->pos,
				     end - r->pos};
		r->pos = end;
	}
	if (a->sparse) {
		scd_coo_t dst = {(uint32_t *)c->ridx.p + a->outn, (float *)c->rval.p + a->outn,
				 0, c->total_nnz - a->outn};
		sc_status_t st = scd_scheme_merge_result(c, sub, P, &dst);
		if (st != SC_OK)
			return c->work_st = st;
		a->outn += dst.nnz;
	} else {
		if (a->cleared < W) {
			memset(a->io->data + a->cleared, 0, 4 * (W - a->cleared));
			a->cleared = W;
		}
		for (int q = 0; q < P; q++)
			c->dev->coo_scatter_add(a->io->data, &sub[q]);
	}
	a->W = W;
	return SC_OK;
}

static int ag_work(void *arg)
{
	ag_t *a = arg;
	scd_scheme_ctx_t *c = a->c;
	uint64_t numel = c->cfg.numel, W = numel;
	sc_status_t st;
	for (int q = 0; q < c->size; q++) {
		ag_list_t *r = &a->r[q];
		if (q == c->rank || r->got == r->K)
			continue;
		if ((st = ag_decode(a, q)) != SC_OK)
			return st;
		if (r->got < r->K) {
			uint64_t w = r->l.nnz ? (uint64_t)r->l.idx[r->l.nnz - 1] + 1 : 0;
			W = w < W ? w : W;
		}
	}
	if (W > a->W)
		return (st = ag_slice(a, W)) != SC_OK ? st : 1;
	if (!a->sparse && a->cleared < numel) {
		uint64_t n = numel - a->cleared < AG_CLEAR_SLICE ? numel - a->cleared
								 : AG_CLEAR_SLICE;
		memset(a->io->data + a->cleared, 0, 4 * n);
		a->cleared += n;
		return 1;
	}
	return 0;
}

sc_status_t scd_scheme_agsparse(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st = scd_scheme_local_coo(c, io);
	if (st == SC_OK)
		st = scd_scheme_meta(c, SCD_SCHEME_AGSPARSE, c->local.nnz, NULL, 0);
	if (st != SC_OK)
		return st;
	ag_list_t lists[P];
	uint64_t recv_total = 0, others = 0, max_chunk = 0;
	int nr = 0;
	for (int q = 0; q < P; q++) {
		lists[q] = (ag_list_t){.K = ag_chunks(c, c->nnz[q]), .first = nr};
		if (q == me)
			continue;
		for (uint32_t k = 0; k < lists[q].K; k++) {
			uint64_t n = ag_chunk_lo(c->nnz[q], lists[q].K, k + 1) -
				     ag_chunk_lo(c->nnz[q], lists[q].K, k);
			recv_total += ag_slot(scd_scheme_msg_bytes(numel, n));
			max_chunk = n > max_chunk ? n : max_chunk;
		}
		nr += (int)lists[q].K;
		others += c->nnz[q];
	}
	uint32_t K = lists[me].K;
	uint64_t send_cap = 0;
	for (uint32_t k = 0; k < K; k++)
		send_cap += ag_slot(scd_scheme_msg_bytes(
		    numel, ag_chunk_lo(c->local.nnz, K, k + 1) - ag_chunk_lo(c->local.nnz, K, k)));
	int ns = (P - 1) * (int)K;
	uint64_t room = others + 2 * max_chunk + 1; /* a malformed chunk may run over */
	int sparse = scd_scheme_sparse_out(io, c->total_nnz < numel ? c->total_nnz : numel);
	if ((st = scd_ws_reserve(&c->sendbuf, send_cap)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, recv_total + 8)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, 4 * room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * room)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xs, sizeof(scd_xfer_t) * (size_t)(ns + 1))) != SC_OK ||
	    (st = scd_ws_reserve(&c->xr, sizeof(scd_xfer_t) * (size_t)(nr + 1))) != SC_OK ||
	    (st = scd_ws_reserve(&c->xb, sizeof(size_t) * (size_t)(nr + 1))) != SC_OK ||
	    (sparse && ((st = scd_ws_reserve(&c->ridx, 4 * c->total_nnz + 4)) != SC_OK ||
			(st = scd_ws_reserve(&c->rval, 4 * c->total_nnz + 4)) != SC_OK)))
		return st;
	/* my chunks, each encoded once, to every peer in order */
	scd_xfer_t *sends = c->xs.p, *recvs = c->xr.p;
	uint8_t *sb = c->sendbuf.p;
	uint64_t used = 0;
	for (uint32_t k = 0; k < K; k++) {
		uint64_t lo = ag_chunk_lo(c->local.nnz, K, k), hi = ag_chunk_lo(c->local.nnz, K, k + 1);
		scd_coo_t part = {c->local.idx + lo, c->local.val + lo, hi - lo, hi - lo};
		uint64_t bytes = 0;
		if ((st = scd_scheme_msg_encode(&part, numel, sb + used, send_cap - used,
						&bytes)) != SC_OK)
			return scd_scheme_fail(st, "agsparse: encoding %llu non-zeros",
					       (unsigned long long)(hi - lo));
		for (int q = 0, n = 0; q < P; q++)
			if (q != me)
				sends[(size_t)n++ * K + k] = (scd_xfer_t){q, sb + used, bytes};
		used += ag_slot(bytes);
	}
	/* every peer's chunks into their own slots; decoded lists side by side */
	uint8_t *rb = c->recvbuf.p;
	uint64_t base = 0;
	for (int q = 0; q < P; q++) {
		ag_list_t *r = &lists[q];
		if (q == me) {
			r->l = c->local;
			continue;
		}
		r->l = (scd_coo_t){(uint32_t *)c->hidx.p + base, (float *)c->hval.p + base, 0,
				   c->nnz[q]};
		base += c->nnz[q];
		for (uint32_t k = 0; k < r->K; k++) {
			uint64_t cap = scd_scheme_msg_bytes(
			    numel, ag_chunk_lo(c->nnz[q], r->K, k + 1) -
				       ag_chunk_lo(c->nnz[q], r->K, k));
			recvs[r->first + (int)k] = (scd_xfer_t){q, rb, cap};
			rb += ag_slot(cap);
		}
	}
	ag_t a = {.c = c, .io = io, .r = lists, .sparse = sparse};
	scd_xfer_work_t w = {ag_work, &a};
	if ((st = scd_scheme_xchg_vw(c, sends, ns, recvs, nr, c->xb.p, &w)) != SC_OK)
		return st;
	for (int q = 0; q < P; q++) /* what the watermark never reached was not ascending */
		if (lists[q].pos != lists[q].l.nnz)
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "agsparse: rank %d's indices are not ascending "
					       "below %llu",
					       q, (unsigned long long)numel);
	if (!sparse)
		return SC_OK;
	/* io->out may be the input's own arrays, which the merge read until the end: the
	 * union was built aside, and is copied now */
	if (a.outn > io->out->cap) /* only lists with repeats (malformed) can do this */
		return scd_scheme_fail(SC_ERR_PROTOCOL, "agsparse: %llu result entries over %llu",
				       (unsigned long long)a.outn,
				       (unsigned long long)io->out->cap);
	memcpy(io->out->idx, c->ridx.p, 4 * a.outn);
	memcpy(io->out->val, c->rval.p, 4 * a.outn);
	io->out->nnz = a.outn;
	c->res_ready = 1;
	return SC_OK;
}

/* ---- Hierarchical Centralization ----------------------------------------------------------
 */

typedef struct hc {
	scd_scheme_ctx_t *c;
	float *g;	/* the running aggregate, dense */
	uint32_t *cur;	/* its indices, ascending */
	uint64_t n;	/* how many */
	uint64_t bound; /* most indices an aggregate can have */
} hc_t;

/* Merges the ascending list r into h->cur (union), through bidx. */
static void hc_merge(hc_t *h, const uint32_t *r, uint64_t rn)
{
	uint32_t *a = h->cur, *o = h->c->bidx.p;
	uint64_t i = 0, j = 0, w = 0;
	while (i < h->n && j < rn) {
		if (a[i] < r[j])
			o[w++] = a[i++];
		else if (a[i] > r[j])
			o[w++] = r[j++];
		else
			o[w++] = a[i++], j++;
	}
	while (i < h->n)
		o[w++] = a[i++];
	while (j < rn)
		o[w++] = r[j++];
	/* swap the two lists */
	scd_ws_t t = h->c->aidx;
	h->c->aidx = h->c->bidx;
	h->c->bidx = t;
	h->cur = h->c->aidx.p;
	h->n = w;
}

/* One step: optionally sends the aggregate to `to`, optionally receives one from `from`
 * and adds it in (replace: the received aggregate is the final result). */
static sc_status_t hc_step(hc_t *h, int to, int from, int replace)
{
	scd_scheme_ctx_t *c = h->c;
	uint64_t numel = c->cfg.numel, sent = 0;
	sc_status_t st;
	int ns = 0, nr = 0;
	if (to >= 0) {
		float *v = c->aval.p;
		for (uint64_t i = 0; i < h->n; i++)
			v[i] = h->g[h->cur[i]];
		scd_coo_t src = {h->cur, v, h->n, h->n};
		st = scd_scheme_msg_encode(&src, numel, c->sendbuf.p, c->sendbuf.cap, &sent);
		if (st != SC_OK)
			return scd_scheme_fail(st, "hier_central: encoding %llu non-zeros",
					       (unsigned long long)h->n);
		c->sends[ns++] = (scd_xfer_t){to, c->sendbuf.p, sent};
	}
	if (from >= 0)
		c->recvs[nr++] = (scd_xfer_t){from, c->recvbuf.p, c->recvbuf.cap};
	if ((st = scd_scheme_xchg_v(c, c->sends, ns, c->recvs, nr, c->rbytes)) != SC_OK)
		return st;
	if (from < 0)
		return SC_OK;
	scd_coo_t r;
	st = scd_scheme_msg_decode(c->recvbuf.p, c->rbytes[0], numel, c->hidx.p, c->hval.p, &r);
	if (st != SC_OK)
		return st;
	if (r.nnz > h->bound)
		return scd_scheme_fail(SC_ERR_PROTOCOL,
				       "hier_central: rank %d sent %llu "
				       "non-zeros",
				       from, (unsigned long long)r.nnz);
	if (replace) {
		memset(h->g, 0, 4 * numel);
		h->n = 0;
	}
	c->dev->coo_scatter_add(h->g, &r);
	hc_merge(h, r.idx, r.nnz);
	return SC_OK;
}

/* A sparse result is the final aggregate's index list (the union) with its values,
 * written straight into io->out (the input was consumed at the start). */
static sc_status_t hc_result(hc_t *h, const scd_scheme_io_t *io)
{
	if (!scd_scheme_sparse_out(io, h->n))
		return SC_OK;
	memcpy(io->out->idx, h->cur, 4 * h->n);
	for (uint64_t i = 0; i < h->n; i++)
		io->out->val[i] = h->g[h->cur[i]];
	io->out->nnz = h->n;
	h->c->res_ready = 1;
	return SC_OK;
}

sc_status_t scd_scheme_hier_central(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st = scd_scheme_local_coo(c, io);
	if (st == SC_OK)
		st = scd_scheme_meta(c, SCD_SCHEME_HIER_CENTRAL, c->local.nnz, NULL, 0);
	if (st != SC_OK)
		return st;
	uint64_t bound = c->total_nnz < numel ? c->total_nnz : numel;
	uint64_t msg = scd_scheme_msg_bytes(numel, bound);
	if ((st = scd_ws_reserve(&c->aidx, 4 * bound + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->bidx, 4 * bound + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, 4 * bound + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, 4 * bound + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * bound + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sendbuf, msg)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, msg)) != SC_OK)
		return st;
	hc_t h = {.c = c, .g = io->data, .cur = c->aidx.p, .n = c->local.nnz, .bound = bound};
	memcpy(h.cur, c->local.idx, 4 * c->local.nnz);
	scd_scheme_densify(c, io);
	int Pp = 1;
	while (Pp * 2 <= P)
		Pp *= 2;
	if (me >= Pp) { /* folded rank: in first, result out last */
		if ((st = hc_step(&h, me - Pp, -1, 0)) != SC_OK ||
		    (st = hc_step(&h, -1, me - Pp, 1)) != SC_OK)
			return st;
		return hc_result(&h, io);
	}
	int extra = me + Pp < P ? me + Pp : -1;
	if (extra >= 0 && (st = hc_step(&h, -1, extra, 0)) != SC_OK)
		return st;
	for (int dist = 1; dist < Pp; dist <<= 1)
		if ((st = hc_step(&h, me ^ dist, me ^ dist, 0)) != SC_OK)
			return st;
	if (extra >= 0 && (st = hc_step(&h, extra, -1, 0)) != SC_OK)
		return st;
	return hc_result(&h, io);
}
