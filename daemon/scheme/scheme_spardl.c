/*
 * scheme_spardl.c: SparDL (SparDL paper, sec. III): Spar-Reduce-Scatter, global residual
 * collection, Spar-All-Gather with d teams (R-SAG when d is a power of two, B-SAG with
 * Algorithm 2's h adjustment otherwise), then a Bruck all-gather inside each team.
 *
 * Teams: the P ranks form d teams of Q = P/d consecutive ranks (d divides P: cfg or the
 * cost model's best divisor); rank r is member w = r mod Q of team t = r / Q. The tensor is
 * cut into Q contiguous blocks; every block keeps L = ceil(k / Q) = dk/P values, k the
 * per-rank target (cfg.density x numel, or the mean input non-zeros).
 *
 * Spar-Reduce-Scatter (Fig. 5) inside a team, any Q: member w puts block w in its
 * preservation bag and blocks w+2^(j-1) .. w+2^j-1 (mod Q) in sending bag j, the last one
 * holding Q - 2^(l-1) blocks (l = ceil(log2 Q)). At step i = 1..l it sends bag l-i+1 to
 * w + 2^(l-i) and receives the same-numbered bag of w - 2^(l-i), whose blocks it still holds
 * (Theorem 1), adding them in. Blocks are sparsified to top-L only just before they are
 * sent (the paper's "optimization for SRS"), then the preserved block once more at the
 * end. Sent and discarded blocks are cleared, so the working copy (the output buffer
 * itself) is all zero after SRS.
 *
 * Global residual collection (Algorithm 1): every value a selection discards goes to the
 * residual of the rank that discarded it (local and end-procedure residuals land on the
 * local rank, in-procedure ones on the rank that performed the selection), so the sum
 * over ranks of the residuals plus the result is exactly the sum of the contributions.
 *
 * R-SAG: members w of the d teams run recursive doubling on their block: exchange, add
 * (both sides the same floats, a + b == b + a), keep top-L; both sides discard the same
 * values and each keeps half of them as residual, as the paper says for one pair. From
 * the second round on, 2^s pairs hold copies of the same sum, so at distance 2^s each
 * keeps 1 / 2^(s+1) (powers of two: exact in binary; one half for each would count the
 * discards 2^s times over).
 * B-SAG: each keeps its top-h, Bruck all-gathers the d sets among members w (records
 * tagged by team, summed in team order so all d members get the same bits), keeps top-L
 * of the sum; of the discarded values, index i's goes whole to the member of team
 * i mod d (the paper splits 1/d to each; giving each value to one owner keeps the
 * conservation exact and spreads the residual evenly). h follows Algorithm 2: start
 * k/P, step 0.01 k (d-1)/P; when the count N after the gather and the step point the right
 * way ((N > L) xor (step > 0)) the step doubles on the second such step in a row, else it
 * turns and halves; h += step, kept within [k/P, dk/P]. N is the same for the d members of
 * a group, so their h agree.
 *
 * Final Bruck all-gather inside each team of the blocks, as (block id, count, indices,
 * values) records; the blocks are disjoint, so the output is their scatter.
 */
#include "scheme/scheme_internal.h"

#include <math.h>
#include <string.h>

typedef struct sd {
	scd_scheme_ctx_t *c;
	float *W;   /* working copy = output buffer */
	float *res; /* residual or NULL */
	uint64_t numel, L;
	uint32_t Q, d, t, w;
} sd_t;

static uint64_t blk_lo(const sd_t *s, uint32_t b)
{
	return (uint64_t)b * s->numel / s->Q;
}

/* Takes block b out of W: its top-L non-zeros are appended to (oi, ov) (index order),
 * the rest go to the residual times frac; the block is cleared. Returns the kept count. */
static uint64_t take_block(sd_t *s, uint32_t b, uint32_t *oi, float *ov)
{
	scd_scheme_ctx_t *c = s->c;
	uint64_t lo = blk_lo(s, b), hi = blk_lo(s, b + 1), n = 0;
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	for (uint64_t i = lo; i < hi; i++)
		if (s->W[i] != 0) {
			idx[n] = (uint32_t)i;
			val[n++] = s->W[i];
		}
	memset(s->W + lo, 0, 4 * (hi - lo));
	uint64_t kept = scd_scheme_topk_coo(idx, val, n, s->L, c->hidx.p, c->hval.p);
	if (s->res)
		for (uint64_t j = kept; j < n; j++)
			s->res[idx[j]] += val[j];
	memcpy(oi, idx, 4 * kept);
	memcpy(ov, val, 4 * kept);
	return kept;
}

static int team_rank(const sd_t *s, uint32_t team, uint32_t member)
{
	return (int)(team * s->Q + member);
}

/* Spar-Reduce-Scatter; leaves this member's final block in (F idx, val), returns its size. */
static sc_status_t srs(sd_t *s, uint64_t *fn_p)
{
	scd_scheme_ctx_t *c = s->c;
	uint32_t Q = s->Q, l = scd_ceil_log2(Q), w = s->w;
	uint32_t *bi = c->lidx.p;
	float *bv = c->lval.p;
	sc_status_t st;
	for (uint32_t i = 1; i <= l; i++) {
		uint32_t dist = 1u << (l - i), bsz = i == 1 ? Q - (1u << (l - 1)) : dist;
		uint64_t n = 0;
		for (uint32_t j = 0; j < bsz; j++)
			n += take_block(s, (w + dist + j) % Q, bi + n, bv + n);
		uint8_t *sb = c->sendbuf.p;
		memcpy(sb, bi, 4 * n);
		memcpy(sb + 4 * n, bv, 4 * n);
		int to = team_rank(s, s->t, (w + dist) % Q),
		    from = team_rank(s, s->t, (w + Q - dist) % Q);
		scd_xfer_t snd = {to, sb, 8 * n}, rcv = {from, c->recvbuf.p, 8 * bsz * s->L};
		size_t got = 0;
		if ((st = scd_scheme_xchg_v(c, &snd, 1, &rcv, 1, &got)) != SC_OK)
			return st;
		uint64_t k = got / 8;
		const uint32_t *ri = c->recvbuf.p;
		const float *rv = (const float *)((const uint8_t *)c->recvbuf.p + 4 * k);
		for (uint64_t j = 0; j < k; j++) {
			if (ri[j] >= s->numel)
				return scd_scheme_fail(SC_ERR_PROTOCOL,
						       "spardl: index %u from rank %d", ri[j],
						       from);
			s->W[ri[j]] += rv[j];
		}
	}
	*fn_p = take_block(s, w, bi, bv);
	return SC_OK;
}

/* Record: u32 tag, u32 n, idx[n], val[n]. */
static uint64_t rec_put(uint8_t *p, uint32_t tag, const uint32_t *idx, const float *val,
			uint64_t n)
{
	uint32_t h[2] = {tag, (uint32_t)n};
	memcpy(p, h, 8);
	memcpy(p + 8, idx, 4 * n);
	memcpy(p + 8 + 4 * n, val, 4 * n);
	return 8 + 8 * n;
}

static sc_status_t rec_next(const uint8_t *p, uint64_t avail, uint32_t *tag, uint64_t *n,
			    const uint32_t **idx, const float **val)
{
	uint32_t h[2];
	if (avail < 8)
		return SC_ERR_PROTOCOL;
	memcpy(h, p, 8);
	if (avail < 8 + 8 * (uint64_t)h[1])
		return SC_ERR_PROTOCOL;
	*tag = h[0];
	*n = h[1];
	*idx = (const uint32_t *)(p + 8);
	*val = (const float *)(p + 8 + 4 * (uint64_t)h[1]);
	return SC_OK;
}

/* Byte length of the first cnt records of buf. */
static uint64_t recs_len(const uint8_t *buf, uint64_t used, uint32_t cnt)
{
	uint64_t off = 0;
	for (uint32_t j = 0; j < cnt && off + 8 <= used; j++) {
		uint32_t h[2];
		memcpy(h, buf + off, 8);
		off += 8 + 8 * (uint64_t)h[1];
	}
	return off;
}

/*
 * Bruck all-gather of one record per member among nm ranks (ranks[j] is member j, me is
 * mine): buf starts with my record (used bytes) and ends with all nm records, members in
 * the order me, me+1, ... (mod nm). cap bounds buf.
 */
static sc_status_t bruck(scd_scheme_ctx_t *c, const int *ranks, uint32_t nm, uint32_t me,
			 uint8_t *buf, uint64_t cap, uint64_t *used_p)
{
	uint64_t used = *used_p;
	sc_status_t st;
	for (uint32_t have = 1; have < nm; have *= 2) {
		uint32_t cnt = have < nm - have ? have : nm - have;
		uint64_t len = recs_len(buf, used, cnt);
		scd_xfer_t snd = {ranks[(me + nm - have) % nm], buf, len},
			   rcv = {ranks[(me + have) % nm], buf + used, cap - used};
		size_t got = 0;
		if ((st = scd_scheme_xchg_v(c, &snd, 1, &rcv, 1, &got)) != SC_OK)
			return st;
		used += got;
	}
	*used_p = used;
	return SC_OK;
}

/* Algorithm 2, after a gather that produced N values against the target L. */
static void h_adjust(scd_spardl_state_t *h, uint64_t N, double L, double lo, double hi)
{
	int over = (double)N > L;
	if (over ^ (h->step > 0)) {
		if (h->flag) {
			h->step *= 2;
			h->flag = 0;
		} else {
			h->flag = 1;
		}
	} else {
		h->step = -h->step / 2;
		h->flag = 0;
	}
	h->h += h->step;
	if (h->h < lo)
		h->h = lo;
	if (h->h > hi)
		h->h = hi;
}

/* R-SAG: recursive doubling among the members w of the d teams (d a power of two). */
static sc_status_t rsag(sd_t *s, uint64_t *fn_p)
{
	scd_scheme_ctx_t *c = s->c;
	uint32_t *fi = c->lidx.p, *mi = c->aidx.p;
	float *fv = c->lval.p, *mv = c->aval.p;
	uint64_t fn = *fn_p;
	sc_status_t st;
	for (uint32_t bit = 1; bit < s->d; bit <<= 1) {
		int partner = team_rank(s, s->t ^ bit, s->w);
		uint8_t *sb = c->sendbuf.p;
		memcpy(sb, fi, 4 * fn);
		memcpy(sb + 4 * fn, fv, 4 * fn);
		scd_xfer_t snd = {partner, sb, 8 * fn}, rcv = {partner, c->recvbuf.p, 8 * s->L};
		size_t got = 0;
		if ((st = scd_scheme_xchg_v(c, &snd, 1, &rcv, 1, &got)) != SC_OK)
			return st;
		uint64_t rn = got / 8, i = 0, j = 0, m = 0;
		const uint32_t *ri = c->recvbuf.p;
		const float *rv = (const float *)((const uint8_t *)c->recvbuf.p + 4 * rn);
		while (i < fn || j < rn) {
			if (j >= rn || (i < fn && fi[i] < ri[j])) {
				mi[m] = fi[i];
				mv[m++] = fv[i++];
			} else if (i >= fn || ri[j] < fi[i]) {
				mi[m] = ri[j];
				mv[m++] = rv[j++];
			} else {
				mi[m] = fi[i];
				mv[m++] = fv[i++] + rv[j++];
			}
		}
		uint64_t kept = scd_scheme_topk_coo(mi, mv, m, s->L, c->hidx.p, c->hval.p);
		/* 2 bit teams hold this same sum and discard the same values */
		float share = 1.0f / (float)(2 * bit);
		if (s->res)
			for (uint64_t k = kept; k < m; k++)
				s->res[mi[k]] += share * mv[k];
		memcpy(fi, mi, 4 * kept);
		memcpy(fv, mv, 4 * kept);
		fn = kept;
	}
	*fn_p = fn;
	return SC_OK;
}

/* B-SAG: top-h, Bruck all-gather among the members w of the d teams, top-L of the sum. */
static sc_status_t bsag(sd_t *s, uint64_t k, uint64_t *fn_p)
{
	scd_scheme_ctx_t *c = s->c;
	scd_spardl_state_t *h = &c->sd;
	double P = c->size, lo = (double)k / P, hi = (double)s->L;
	if (lo < 1)
		lo = 1;
	if (h->teams != s->d) { /* Algorithm 2, line 1 */
		h->teams = s->d;
		h->h = lo;
		h->step = 0.01 * (double)k * (s->d - 1) / P;
		h->flag = 0;
	}
	uint32_t *fi = c->lidx.p, *mi = c->aidx.p;
	float *fv = c->lval.p, *mv = c->aval.p;
	uint64_t fn = *fn_p, hk = (uint64_t)llround(h->h);
	if (hk < 1)
		hk = 1;
	uint64_t kept = scd_scheme_topk_coo(fi, fv, fn, hk, c->hidx.p, c->hval.p);
	if (s->res)
		for (uint64_t j = kept; j < fn; j++)
			s->res[fi[j]] += fv[j];
	int ranks[s->d];
	for (uint32_t g = 0; g < s->d; g++)
		ranks[g] = team_rank(s, g, s->w);
	uint8_t *buf = c->recvbuf.p;
	uint64_t used = rec_put(buf, s->t, fi, fv, kept);
	sc_status_t st = bruck(c, ranks, s->d, s->t, buf, c->recvbuf.cap, &used);
	if (st != SC_OK)
		return st;
	/* sum in team order: records arrive as t, t+1, ...; find each team's record */
	const uint8_t *rp[s->d];
	memset(rp, 0, sizeof(rp));
	for (uint64_t off = 0; off < used;) {
		uint32_t tag;
		uint64_t n;
		const uint32_t *ri;
		const float *rv;
		if (rec_next(buf + off, used - off, &tag, &n, &ri, &rv) != SC_OK || tag >= s->d)
			return scd_scheme_fail(SC_ERR_PROTOCOL, "spardl: bad B-SAG record");
		rp[tag] = buf + off;
		off += 8 + 8 * n;
	}
	uint64_t blo = blk_lo(s, s->w), bhi = blk_lo(s, s->w + 1);
	for (uint32_t g = 0; g < s->d; g++) {
		uint32_t tag;
		uint64_t n;
		const uint32_t *ri;
		const float *rv;
		if (!rp[g] || rec_next(rp[g], used - (uint64_t)(rp[g] - buf), &tag, &n, &ri,
				       &rv) != SC_OK)
			return scd_scheme_fail(SC_ERR_PROTOCOL, "spardl: B-SAG lacks team %u",
					       g);
		for (uint64_t j = 0; j < n; j++) {
			if (ri[j] < blo || ri[j] >= bhi)
				return scd_scheme_fail(SC_ERR_PROTOCOL,
						       "spardl: B-SAG index %u outside block",
						       ri[j]);
			s->W[ri[j]] += rv[j];
		}
	}
	uint64_t m = 0;
	for (uint64_t i = blo; i < bhi; i++)
		if (s->W[i] != 0) {
			mi[m] = (uint32_t)i;
			mv[m++] = s->W[i];
			s->W[i] = 0;
		}
	kept = scd_scheme_topk_coo(mi, mv, m, s->L, c->hidx.p, c->hval.p);
	if (s->res)
		for (uint64_t j = kept; j < m; j++)
			if (mi[j] % s->d == s->t)
				s->res[mi[j]] += mv[j];
	memcpy(fi, mi, 4 * kept);
	memcpy(fv, mv, 4 * kept);
	*fn_p = kept;
	h_adjust(h, m, (double)s->L, lo, hi);
	return SC_OK;
}

sc_status_t scd_scheme_spardl(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	uint32_t P = (uint32_t)c->size, me = (uint32_t)c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st =
	    scd_scheme_meta(c, SCD_SCHEME_SPARDL, scd_scheme_local_nnz(c, io), NULL, 0);
	if (st != SC_OK)
		return st;
	uint64_t k = c->cfg.density > 0 ? scd_density_to_k(c->cfg.density, numel)
					: (c->total_nnz + P - 1) / P;
	if (k < 1)
		k = 1;
	sd_t s = {.c = c, .W = io->data, .res = io->residual, .numel = numel};
	s.d = scd_scheme_spardl_teams(c, (double)k / (double)numel);
	s.Q = P / s.d;
	s.t = me / s.Q;
	s.w = me % s.Q;
	s.L = (k + s.Q - 1) / s.Q;
	c->teams_used = s.d;
	uint64_t maxblk = numel / s.Q + 2, rec = 8 + 8 * s.L;
	uint64_t bag = (uint64_t)s.Q * s.L + 2 * s.L + 2;
	uint64_t msg = (uint64_t)(s.Q > s.d ? s.Q : s.d) * rec + 8 * bag;
	if ((st = scd_ws_reserve(&c->aidx, 4 * (maxblk > bag ? maxblk : bag))) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, 4 * (maxblk > bag ? maxblk : bag))) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, 4 * (maxblk > bag ? maxblk : bag))) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * (maxblk > bag ? maxblk : bag))) != SC_OK ||
	    (st = scd_ws_reserve(&c->lidx, 4 * bag)) != SC_OK ||
	    (st = scd_ws_reserve(&c->lval, 4 * bag)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sendbuf, msg)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, msg)) != SC_OK)
		return st;
	scd_scheme_densify(c, io);
	uint64_t fn = 0;
	if ((st = srs(&s, &fn)) != SC_OK)
		return st;
	if (s.d > 1) {
		st = (s.d & (s.d - 1)) == 0 ? rsag(&s, &fn) : bsag(&s, k, &fn);
		if (st != SC_OK)
			return st;
	}
	/* Bruck all-gather of the blocks inside the team; W is all zero here */
	int ranks[s.Q];
	for (uint32_t j = 0; j < s.Q; j++)
		ranks[j] = team_rank(&s, s.t, j);
	uint8_t *buf = c->recvbuf.p;
	uint64_t used = rec_put(buf, s.w, c->lidx.p, c->lval.p, fn);
	if ((st = bruck(c, ranks, s.Q, s.w, buf, c->recvbuf.cap, &used)) != SC_OK)
		return st;
	for (uint64_t off = 0; off < used;) {
		uint32_t tag;
		uint64_t n;
		const uint32_t *ri;
		const float *rv;
		if (rec_next(buf + off, used - off, &tag, &n, &ri, &rv) != SC_OK || tag >= s.Q)
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "spardl: bad all-gather record");
		uint64_t lo = blk_lo(&s, tag), hi = blk_lo(&s, tag + 1);
		for (uint64_t j = 0; j < n; j++) {
			if (ri[j] < lo || ri[j] >= hi)
				return scd_scheme_fail(SC_ERR_PROTOCOL,
						       "spardl: index %u outside block %u",
						       ri[j], tag);
			s.W[ri[j]] = rv[j];
		}
		off += 8 + 8 * n;
	}
	return SC_OK;
}
