/*
 * scheme_allgather.c: the two "everyone aggregates everything" schemes of ZEN sec. 2.4.
 *
 * AGsparse: every rank sends its sparse contribution to every other rank in one
 * exchange_v (all P - 1 sends and receives progress together) and aggregates all P of
 * them at once, in rank order, so every rank computes the same sums in the same order.
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

/* Checks that rank q's decoded message holds what its metadata announced. */
static sc_status_t ag_check(const scd_scheme_ctx_t *c, int q, const scd_coo_t *r)
{
	if (r->nnz == c->nnz[q])
		return SC_OK;
	return scd_scheme_fail(SC_ERR_PROTOCOL,
			       "agsparse: rank %d sent %llu non-zeros, announced %llu", q,
			       (unsigned long long)r->nnz, (unsigned long long)c->nnz[q]);
}

/* The sparse result: every rank's list decoded side by side, then one merge in rank order
 * (the sums of the dense path, bit for bit, without touching numel elements). */
static sc_status_t ag_merge(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t others = c->total_nnz - c->nnz[me], off = 0;
	sc_status_t st;
	if ((st = scd_ws_reserve(&c->hidx, 4 * others + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * others + 4)) != SC_OK)
		return st;
	scd_coo_t lists[P];
	for (int q = 0, j = 0; q < P; q++) {
		if (q == me) {
			lists[q] = c->local;
			continue;
		}
		st = scd_scheme_msg_decode(c->recvs[j].buf, c->rbytes[j], c->cfg.numel,
					   (uint32_t *)c->hidx.p + off, (float *)c->hval.p + off,
					   &lists[q]);
		if (st != SC_OK || (st = ag_check(c, q, &lists[q])) != SC_OK)
			return st;
		off += lists[q].nnz;
		j++;
	}
	/* io->out may be the input's own arrays, which the merge still reads: merge aside,
	 * then copy */
	uint64_t total = c->total_nnz;
	if ((st = scd_ws_reserve(&c->ridx, 4 * total + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->rval, 4 * total + 4)) != SC_OK)
		return st;
	scd_coo_t m = {c->ridx.p, c->rval.p, 0, total};
	if ((st = scd_scheme_merge_result(c, lists, P, &m)) != SC_OK)
		return st;
	if (m.nnz > io->out->cap) /* only lists with repeats (malformed) can do this */
		return scd_scheme_fail(SC_ERR_PROTOCOL, "agsparse: %llu result entries over %llu",
				       (unsigned long long)m.nnz,
				       (unsigned long long)io->out->cap);
	memcpy(io->out->idx, m.idx, 4 * m.nnz);
	memcpy(io->out->val, m.val, 4 * m.nnz);
	io->out->nnz = m.nnz;
	c->res_ready = 1;
	return SC_OK;
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
	uint64_t recv_total = 0, max_other = 0;
	for (int q = 0; q < P; q++)
		if (q != me) {
			recv_total += scd_scheme_msg_bytes(numel, c->nnz[q]);
			if (c->nnz[q] > max_other)
				max_other = c->nnz[q];
		}
	uint64_t send_bytes = scd_scheme_msg_bytes(numel, c->local.nnz), sent = 0;
	if ((st = scd_ws_reserve(&c->sendbuf, send_bytes)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, recv_total + 8)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, 4 * max_other + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * max_other + 4)) != SC_OK)
		return st;
	if ((st = scd_scheme_msg_encode(&c->local, numel, c->sendbuf.p, c->sendbuf.cap,
					&sent)) != SC_OK)
		return scd_scheme_fail(st, "agsparse: encoding %llu non-zeros",
				       (unsigned long long)c->local.nnz);
	int n = 0;
	uint64_t off = 0;
	for (int q = 0; q < P; q++) {
		if (q == me)
			continue;
		uint64_t cap = scd_scheme_msg_bytes(numel, c->nnz[q]);
		c->sends[n] = (scd_xfer_t){q, c->sendbuf.p, sent};
		c->recvs[n] = (scd_xfer_t){q, (uint8_t *)c->recvbuf.p + off, cap};
		off += cap;
		n++;
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	uint64_t bound = c->total_nnz < numel ? c->total_nnz : numel;
	if (scd_scheme_sparse_out(io, bound))
		return ag_merge(c, io);
	/* One-shot aggregation, in rank order on every rank. The local COO is a copy (or
	 * io->coo), so the buffer can be cleared first. */
	memset(io->data, 0, 4 * numel);
	for (int q = 0, j = 0; q < P; q++) {
		if (q == me) {
			c->dev->coo_scatter_add(io->data, &c->local);
			continue;
		}
		scd_coo_t r;
		st = scd_scheme_msg_decode(c->recvs[j].buf, c->rbytes[j], numel, c->hidx.p,
					   c->hval.p, &r);
		if (st != SC_OK || (st = ag_check(c, q, &r)) != SC_OK)
			return st;
		c->dev->coo_scatter_add(io->data, &r);
		j++;
	}
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
