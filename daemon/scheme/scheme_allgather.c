/*
 * scheme_allgather.c: AGsparse, the first "everyone aggregates everything" scheme of ZEN
 * sec. 2.4 (the second, Hierarchical Centralization, is in scheme_hc.c).
 *
 * Every rank sends its sparse contribution (scheme_msg.c's smallest encoding) to every
 * other rank in one exchange_v (all P - 1 sends and receives progress together) and
 * aggregates all P of them in rank order, so every rank computes the same sums in the
 * same order; the aggregation streams behind the receives (below). Asked for a sparse
 * result (scheme.h) it merges the P lists in rank order instead of aggregating densely,
 * so it never touches all numel elements. The lists live in the device's memory: decodes,
 * merges, scatter-adds and clears are its ops, and the watermark's input (each list's last
 * index) is read back (to_host) once per call of the work.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

/*
 * Streaming. Each rank's list goes out in K equal-count chunks (K = scd_scheme_chunks of
 * its count, so every receiver knows it), each encoded on its own (a bitmap spans only its
 * chunk's range, so chunks cost no more). While the exchange waits on the network, ag_work
 * decodes the chunks that have arrived into one contiguous list per rank and aggregates every
 * index below the watermark W, the lowest "last index received + 1" over the ranks still
 * sending: all of every rank's entries below W are in, so their sums are final. Every index is
 * still summed in rank order (a merge of the P sub-lists below W, or scatter-adds in rank
 * order), so the result is the same, bit for bit, however the slices fall. For a dense result
 * the buffer is cleared ahead of W in slices while nothing else can be done. What is left when
 * the last byte arrives is the last chunk's share.
 */

typedef struct ag_list {
	uint32_t K, got; /* chunks, chunks decoded */
	int first;	 /* its first receive */
	scd_coo_t l;	 /* decoded so far (the whole local list for this rank) */
	uint64_t pos;	 /* entries aggregated */
	uint64_t end;	 /* its last index decoded + 1 (0: none), read back from the device */
} ag_list_t;

typedef struct ag {
	scd_scheme_ctx_t *c;
	scd_scheme_io_t *io;
	ag_list_t *r;	/* [P] (c->htab) */
	scd_coo_t *sub; /* [P] (c->htab): the slice's views of the lists */
	int sparse;
	uint64_t W, cleared, outn;
} ag_t;

/* Decodes rank q's chunks that have arrived, appending to its list. */
static sc_status_t ag_decode(ag_t *a, int q)
{
	scd_scheme_ctx_t *c = a->c;
	ag_list_t *r = &a->r[q];
	const scd_xfer_t *rv = c->xr.p;
	const size_t *rb = c->xb.p;
	uint64_t nnz0 = r->l.nnz;
	while (r->got < r->K && rb[r->first + r->got] != SCD_XFER_PENDING) {
		int i = r->first + (int)r->got;
		uint64_t want = scd_chunk_lo(c->nnz[q], r->K, r->got + 1) -
				scd_chunk_lo(c->nnz[q], r->K, r->got);
		uint64_t got = 0;
		sc_status_t st =
		    scd_scheme_msg_append(c->dev, rv[i].buf, rb[i], c->cfg.numel, &r->l, &got);
		if (st != SC_OK || got != want)
			return scd_scheme_work_fail(c, SC_ERR_PROTOCOL,
						    "agsparse: rank %d sent %llu non-zeros in "
						    "chunk %u of %u, announced "
						    "%llu",
						    q, (unsigned long long)got, r->got, r->K,
						    (unsigned long long)want);
		r->got++;
	}
	if (r->l.nnz > nnz0) { /* the watermark's input: one index read back per call */
		uint32_t last = 0;
		c->dev->to_host(&last, r->l.idx + r->l.nnz - 1, 4);
		r->end = (uint64_t)last + 1;
	}
	return SC_OK;
}

/* Aggregates every index in [a->W, W). */
static sc_status_t ag_slice(ag_t *a, uint64_t W)
{
	scd_scheme_ctx_t *c = a->c;
	int P = c->size;
	scd_coo_t *sub = a->sub;
	for (int q = 0; q < P; q++) {
		ag_list_t *r = &a->r[q];
		uint64_t end =
		    r->pos + c->dev->lower_bound(r->l.idx + r->pos, r->l.nnz - r->pos, W);
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
			c->dev->clear(a->io->data + a->cleared, 4 * (W - a->cleared));
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
		if (r->got < r->K)
			W = r->end < W ? r->end : W;
	}
	if (W > a->W)
		return (st = ag_slice(a, W)) != SC_OK ? st : 1;
	return !a->sparse && scd_clear_slice(c->dev, a->io->data, numel, &a->cleared);
}

static sc_status_t scd_scheme_agsparse(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st = scd_scheme_local_meta(c, io, SCD_SCHEME_AGSPARSE);
	if (st != SC_OK)
		return st;
	/* per-rank states and slice views: host tables of the context (nothing sized by P on
	 * the stack) */
	if ((st = scd_ws_reserve(&c->htab,
				 (size_t)P * (sizeof(ag_list_t) + sizeof(scd_coo_t)))) != SC_OK)
		return st;
	ag_list_t *lists = c->htab.p;
	scd_coo_t *sub = (scd_coo_t *)(lists + P);
	uint64_t recv_total = 0, others = 0, max_chunk = 0;
	int nr = 0;
	for (int q = 0; q < P; q++) {
		lists[q] = (ag_list_t){.K = scd_scheme_chunks(c, c->nnz[q]), .first = nr};
		if (q == me)
			continue;
		for (uint32_t k = 0; k < lists[q].K; k++) {
			uint64_t n = scd_chunk_lo(c->nnz[q], lists[q].K, k + 1) -
				     scd_chunk_lo(c->nnz[q], lists[q].K, k);
			recv_total += scd_slot8(scd_scheme_msg_bytes(numel, n));
			max_chunk = n > max_chunk ? n : max_chunk;
		}
		nr += (int)lists[q].K;
		others += c->nnz[q];
	}
	uint32_t K = lists[me].K;
	uint64_t send_cap = 0;
	for (uint32_t k = 0; k < K; k++)
		send_cap += scd_slot8(
		    scd_scheme_msg_bytes(numel, scd_chunk_lo(c->local.nnz, K, k + 1) -
						    scd_chunk_lo(c->local.nnz, K, k)));
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
		uint64_t lo = scd_chunk_lo(c->local.nnz, K, k),
			 hi = scd_chunk_lo(c->local.nnz, K, k + 1);
		scd_coo_t part = {c->local.idx + lo, c->local.val + lo, hi - lo, hi - lo};
		uint64_t bytes = 0;
		if ((st = scd_scheme_msg_encode(c->dev, &part, numel, sb + used,
						send_cap - used, &bytes)) != SC_OK)
			return scd_scheme_fail(st, "agsparse: encoding %llu non-zeros",
					       (unsigned long long)(hi - lo));
		for (int q = 0, n = 0; q < P; q++)
			if (q != me)
				sends[(size_t)n++ * K + k] = (scd_xfer_t){q, sb + used, bytes};
		used += scd_slot8(bytes);
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
			uint64_t cap =
			    scd_scheme_msg_bytes(numel, scd_chunk_lo(c->nnz[q], r->K, k + 1) -
							    scd_chunk_lo(c->nnz[q], r->K, k));
			recvs[r->first + (int)k] = (scd_xfer_t){q, rb, cap};
			rb += scd_slot8(cap);
		}
	}
	ag_t a = {.c = c, .io = io, .r = lists, .sub = sub, .sparse = sparse};
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
		return scd_scheme_fail(
		    SC_ERR_PROTOCOL, "agsparse: %llu result entries over %llu",
		    (unsigned long long)a.outn, (unsigned long long)io->out->cap);
	c->dev->copy(io->out->idx, c->ridx.p, 4 * a.outn);
	c->dev->copy(io->out->val, c->rval.p, 4 * a.outn);
	io->out->nnz = a.outn;
	c->res_ready = 1;
	return SC_OK;
}

/* ---- descriptor ---------------------------------------------------------------------- */

/*
 * Beside the allgather's network formula, one compute term (model/cost.h): every rank adds
 * all P lists, its own included, P k non-zeros, into its result, each a scatter-add at the
 * sum rate. The code streams it behind the receives (ag_work), but a node that shares its
 * cores with others has no idle core to hide it on, and at 1 Gbit/s (4 nodes, zipf 64M at
 * 1%) the work outside the exchanges was of the order of the exchange itself
 * (docs/performance.md). A sparse result merges the lists instead, at about the same
 * cost per entry.
 */
double scd_agsparse_work_s(const scd_cost_in_t *in)
{
	return scd_cost_compute_s(in, in->P * scd_cost_nnz(in) * in->sum_s_per_nnz);
}

/* 1 round: the one exchange_v in which every rank sends its list to the P - 1 others (all
 * transfers progress together; the chunks of a streamed list travel in that same
 * exchange). Bytes: (P-1) msg(f, k, U), a rank's k = d_G U non-zeros sent to each peer, msg
 * the size of a message in format f (model/cost.h; the code's bitmap spans only the list's
 * own range, and its messages add an 8-byte header). */
static scd_cost_t agsparse_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel, k = scd_cost_nnz(in);
	scd_cost_t r = scd_cost_make(
	    in, 1, (P - 1) * scd_cost_msg_bytes(scd_cost_whole_format(in->format), k, U));
	r.work_s = scd_agsparse_work_s(in);
	r.seconds += r.work_s;
	return r;
}

/* It sends COO or bitmap, whichever is smaller (scheme_msg.c). */
static scd_cost_t agsparse_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *in)
{
	return scd_cost_coo_or_bitmap(agsparse_model, in);
}

const scd_scheme_desc_t scd_scheme_agsparse_desc = {
    .name = "agsparse",
    .lists_out = 1,
    .lossless = 1,
    .uses = SCD_COST_DENSITY,
    .run = scd_scheme_agsparse,
    .model = agsparse_model,
    .cost = agsparse_cost,
};
