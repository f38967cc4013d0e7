/*
 * scheme_spardl.c: SparDL (SparDL paper, sec. III): Spar-Reduce-Scatter, global residual
 * collection, Spar-All-Gather with d teams (R-SAG when d is a power of two, B-SAG with
 * Algorithm 2's h adjustment otherwise), then a Bruck all-gather inside each team.
 *
 * Teams: the P ranks form d teams of Q = P/d consecutive ranks (d divides P: cfg, else the
 * paper's d = 1 until another divisor, tried when the cost model favours it, is measured
 * faster; see scd_spardl_pick_teams); rank r is member w = r mod Q of team t = r / Q. The
 * tensor is
 * cut into Q contiguous blocks; every block keeps L = ceil(k / Q) = dk/P values, k the
 * per-rank target (cfg.density x numel, or the mean input non-zeros).
 *
 * Blocks of equal load, not equal size: the metadata round carries each rank's histogram
 * of its indices over H equal ranges (numel / 256 within [16 P, 1024]), and every rank
 * cuts the summed histogram at the same range edges so that each block holds about 1/Q
 * of the non-zeros (the report's imbalance is the blocks' max / mean load). The paper's
 * equal-size blocks gave, on Zipf indices, the first block 2.9x its share: its member did
 * most of the merging and selecting while the others waited (4 nodes, 1 Gbit/s, zipf:
 * 203 -> 165 ms), and its L values were the top of a far larger set than the other
 * blocks' (top-k per block is closer to a global top-k when the blocks are equally
 * full; the sparse blocks, which sent all they had, now fill their L too). With k >=
 * numel nothing is selected away and the blocks stay equal in size (a block of more
 * than L elements could lose values).
 *
 * Spar-Reduce-Scatter (Fig. 5) inside a team, any Q: member w puts block w in its
 * preservation bag and blocks w+2^(j-1) .. w+2^j-1 (mod Q) in sending bag j, the last one
 * holding Q - 2^(l-1) blocks (l = ceil(log2 Q)). At step i = 1..l it sends bag l-i+1 to
 * w + 2^(l-i) and receives the same-numbered bag of w - 2^(l-i), whose blocks it still holds
 * (Theorem 1), adding them in. Blocks are sparsified to top-L only just before they are
 * sent (the paper's "optimization for SRS"), then the preserved block once more at the
 * end. Every block a member holds is an ascending (index, value) list: a slice of the
 * contribution, then merged with what arrives for it (held value + received value, the
 * bits of a dense W[i] += r), so nothing of size numel is read or cleared on the way.
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
 * values) records; the blocks are disjoint, so the output is their scatter, or, for a
 * sparse result, their lists in block order.
 */
#include "scheme/scheme_internal.h"

#include <math.h>
#include <string.h>

typedef struct sd {
	scd_scheme_ctx_t *c;
	float *res; /* residual or NULL */
	uint64_t numel, L;
	uint32_t Q, d, t, w;
	uint64_t *bnd; /* [Q + 1]: block b is [bnd[b], bnd[b + 1]) */
	/* the blocks this member still holds, as ascending lists in an arena (ridx/rval;
	 * sidx/sval is the other half of a ping-pong), empty once taken */
	uint64_t *boff, *blen;
	uint8_t *held;
	/* host tables (the context's ctl): a bag's runs, an all-gather's members and records */
	scd_run_t *runs; /* [Q + 1] */
	int *ranks;	 /* [max(Q, d)] */
	struct rec *rec; /* [max(Q, d)] */
} sd_t;

static uint64_t blk_lo(const sd_t *s, uint32_t b)
{
	return s->bnd[b];
}

/* How many ranges the histograms have: one per 256 elements (8 bytes of metadata per
 * 1 KiB of tensor; a small tensor's step is latency anyway), at least 16 per rank for a
 * useful cut and at most SCD_META_HIST_MAX; never more than numel. */
static uint32_t hist_ranges(uint64_t numel, uint32_t P)
{
	uint64_t H = numel / 256;
	if (H < 16 * (uint64_t)P)
		H = 16 * (uint64_t)P;
	if (H > SCD_META_HIST_MAX - 1) /* and one word of B-SAG's h / L (hl_word) */
		H = SCD_META_HIST_MAX - 1;
	return (uint32_t)(H < numel ? H : numel);
}

/* The local list's histogram over H equal index ranges into hist (host): H searches of
 * the ascending list, for the range ends (edge: host, H entries). */
static void local_hist(scd_scheme_ctx_t *c, const scd_coo_t *l, uint64_t numel, uint32_t H,
		       uint64_t *hist, uint64_t *edge)
{
	uint64_t off[2] = {0, l->nnz};
	for (uint32_t h = 0; h < H; h++)
		edge[h] = (uint64_t)(h + 1) * numel / H;
	c->dev->lower_bounds(l->idx, off, 1, edge, H, hist);
	for (uint32_t h = H; h-- > 1;)
		hist[h] -= hist[h - 1];
}

/*
 * Cuts the index space into Q blocks of about equal load at the edges of the H ranges of
 * the summed histograms (c->parts, identical on every rank); returns the blocks' load
 * imbalance (max / mean). Q equal ranges instead when nothing is selected away (k >=
 * numel: a block of more than L = k / Q elements could then lose values) or there is no
 * non-zero.
 */
/* Every rank's count in range h of the H-range histograms (c->parts; each rank's row
 * ends with its hl_word). */
static uint64_t range_load(const scd_scheme_ctx_t *c, uint32_t H, uint32_t h)
{
	(void)H;
	uint64_t n = 0;
	for (int q = 0; q < c->size; q++)
		n += c->parts[(size_t)q * c->nparts + h];
	return n;
}

static double cut_blocks(sd_t *s, uint32_t H, uint64_t k)
{
	const scd_scheme_ctx_t *c = s->c;
	uint64_t total = k < s->numel ? c->total_nnz : 0, cum = 0, load = 0, maxload = 0;
	uint32_t b = 1;
	s->bnd[0] = 0;
	for (uint32_t h = 0; h < H && b < s->Q && total; h++) {
		cum += range_load(c, H, h);
		while (b < s->Q && cum * s->Q >= (uint64_t)b * total)
			s->bnd[b++] = (uint64_t)(h + 1) * s->numel / H;
	}
	for (; b < s->Q; b++)
		s->bnd[b] = total ? s->numel : (uint64_t)b * s->numel / s->Q;
	s->bnd[s->Q] = s->numel;
	for (uint32_t h = 0, bb = 0; h < H; h++) {
		while ((uint64_t)(h + 1) * s->numel / H > s->bnd[bb + 1]) {
			maxload = load > maxload ? load : maxload;
			load = 0;
			bb++;
		}
		load += range_load(c, H, h);
	}
	maxload = load > maxload ? load : maxload;
	return c->total_nnz ? (double)maxload * s->Q / (double)c->total_nnz : 1;
}

/* Residual for the discarded entries [from, n) of (idx, val), each times share. */
static sc_status_t discard(sd_t *s, const uint32_t *idx, const float *val, uint64_t from,
			   uint64_t n, float share)
{
	if (!s->res || from >= n)
		return SC_OK;
	return scd_res_queue(s->c, idx + from, val + from, n - from, share);
}

/* Takes block b: its top-L non-zeros are appended to (oi, ov) (index order), the rest go
 * to the residual; the block is then empty. Returns the kept count (*kept_p). */
static sc_status_t take_block(sd_t *s, uint32_t b, uint32_t *oi, float *ov, uint64_t *kept_p)
{
	scd_scheme_ctx_t *c = s->c;
	const uint32_t *si = (const uint32_t *)c->ridx.p + s->boff[b];
	const float *sv = (const float *)c->rval.p + s->boff[b];
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	uint64_t n = c->dev->coo_compact_nonzero(si, sv, s->blen[b], idx, val);
	s->blen[b] = 0;
	s->held[b] = 0;
	uint64_t kept = c->dev->coo_topk(idx, val, n, s->L, c->hidx.p, c->hval.p);
	sc_status_t st = discard(s, idx, val, kept, n, 1.0f);
	c->dev->copy(oi, idx, 4 * kept);
	c->dev->copy(ov, val, 4 * kept);
	*kept_p = kept;
	return st;
}

static int team_rank(const sd_t *s, uint32_t team, uint32_t member)
{
	return (int)(team * s->Q + member);
}

/* Adds a received bag (k entries: each block's kept list, ascending, blocks in any order)
 * into the held blocks: every held block is rewritten into the other arena half, merged
 * with its segment of the bag (mine first, so the bits are W[i] += received). */
static sc_status_t add_bag(sd_t *s, const uint32_t *ri, const float *rv, uint64_t k, int from)
{
	scd_scheme_ctx_t *c = s->c;
	uint32_t Q = s->Q;
	uint64_t *seg_lo = (uint64_t *)c->xb.p, *seg_hi = seg_lo + Q, bad;
	for (uint32_t b = 0; b < Q; b++)
		seg_lo[b] = seg_hi[b] = 0;
	/* the bag's runs, each ascending inside one block; Q + 1 runs repeat a block */
	uint32_t nr = c->dev->coo_block_runs(ri, k, s->bnd, Q, s->numel, Q + 1, s->runs, &bad);
	for (uint32_t r = 0; r < nr; r++) {
		uint32_t b = s->runs[r].block;
		if (!s->held[b] || seg_hi[b] > seg_lo[b])
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "spardl: rank %d sent block %u, which this rank "
					       "does not hold or already had",
					       from, b);
		seg_lo[b] = s->runs[r].lo;
		seg_hi[b] = s->runs[r].hi;
	}
	if (bad < k) {
		uint32_t i;
		c->dev->to_host(&i, ri + bad, 4);
		return scd_scheme_fail(SC_ERR_PROTOCOL, "spardl: index %u from rank %d", i,
				       from);
	}
	uint32_t *ni = c->sidx.p;
	float *nv = c->sval.p;
	uint64_t used = 0;
	for (uint32_t b = 0; b < Q; b++) {
		if (!s->held[b])
			continue;
		const uint32_t *oi = (const uint32_t *)c->ridx.p + s->boff[b];
		const float *ov = (const float *)c->rval.p + s->boff[b];
		scd_coo_t seg = {(uint32_t *)ri + seg_lo[b], (float *)rv + seg_lo[b],
				 seg_hi[b] - seg_lo[b], 0};
		uint64_t n = c->dev->merge_two(oi, ov, s->blen[b], &seg, ni + used, nv + used);
		s->boff[b] = used;
		s->blen[b] = n;
		used += n;
	}
	scd_ws_t ti = c->ridx, tv = c->rval;
	c->ridx = c->sidx, c->rval = c->sval;
	c->sidx = ti, c->sval = tv;
	return SC_OK;
}

/* Spar-Reduce-Scatter; leaves this member's final block in (lidx, lval), returns its size. */
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
		for (uint32_t j = 0; j < bsz; j++) {
			uint64_t kept;
			if ((st = take_block(s, (w + dist + j) % Q, bi + n, bv + n, &kept)) !=
			    SC_OK)
				return st;
			n += kept;
		}
		uint8_t *sb = c->sendbuf.p;
		c->dev->copy(sb, bi, 4 * n);
		c->dev->copy(sb + 4 * n, bv, 4 * n);
		int to = team_rank(s, s->t, (w + dist) % Q),
		    from = team_rank(s, s->t, (w + Q - dist) % Q);
		scd_xfer_t snd = {to, sb, 8 * n}, rcv = {from, c->recvbuf.p, 8 * bsz * s->L};
		size_t got = 0;
		if ((st = scd_scheme_xchg_v(c, &snd, 1, &rcv, 1, &got)) != SC_OK)
			return st;
		uint64_t k = got / 8;
		const uint32_t *ri = c->recvbuf.p;
		const float *rv = (const float *)((const uint8_t *)c->recvbuf.p + 4 * k);
		if ((st = add_bag(s, ri, rv, k, from)) != SC_OK)
			return st;
	}
	return take_block(s, w, bi, bv, fn_p);
}

/* Record: u32 tag, u32 n, idx[n], val[n] (in device memory: the header goes from and
 * comes back to the host). */
static uint64_t rec_put(scd_scheme_ctx_t *c, uint8_t *p, uint32_t tag, const uint32_t *idx,
			const float *val, uint64_t n)
{
	uint32_t h[2] = {tag, (uint32_t)n};
	c->dev->from_host(p, h, 8);
	c->dev->copy(p + 8, idx, 4 * n);
	c->dev->copy(p + 8 + 4 * n, val, 4 * n);
	return 8 + 8 * n;
}

static sc_status_t rec_next(scd_scheme_ctx_t *c, const uint8_t *p, uint64_t avail,
			    uint32_t *tag, uint64_t *n, const uint32_t **idx, const float **val)
{
	uint32_t h[2];
	if (avail < 8)
		return SC_ERR_PROTOCOL;
	c->dev->to_host(h, p, 8);
	if (avail < 8 + 8 * (uint64_t)h[1])
		return SC_ERR_PROTOCOL;
	*tag = h[0];
	*n = h[1];
	*idx = (const uint32_t *)(p + 8);
	*val = (const float *)(p + 8 + 4 * (uint64_t)h[1]);
	return SC_OK;
}

/* Byte length of the first cnt records of buf (their headers read back). */
static uint64_t recs_len(scd_scheme_ctx_t *c, const uint8_t *buf, uint64_t used, uint32_t cnt)
{
	uint64_t off = 0;
	for (uint32_t j = 0; j < cnt && off + 8 <= used; j++) {
		uint32_t h[2];
		c->dev->to_host(h, buf + off, 8);
		off += 8 + 8 * (uint64_t)h[1];
	}
	return off;
}

/*
 * Indexes the nrec records of a Bruck all-gather by tag: rec[tag] gets the tag's record,
 * each tag exactly once, each record's indices strictly ascending inside block tag's range
 * (by_tag) or else inside [lo, hi). *total_p: their entries.
 */
typedef struct rec {
	uint64_t n;
	const uint32_t *idx;
	const float *val;
} rec_t;

static sc_status_t rec_index(const sd_t *s, const uint8_t *buf, uint64_t used, uint32_t nrec,
			     int by_tag, uint64_t lo, uint64_t hi, rec_t *rec,
			     uint64_t *total_p)
{
	scd_scheme_ctx_t *c = s->c;
	uint64_t total = 0, off = 0;
	for (uint32_t g = 0; g < nrec; g++)
		rec[g].idx = NULL;
	for (uint32_t j = 0; j < nrec; j++) {
		uint32_t tag;
		rec_t r;
		if (rec_next(c, buf + off, used - off, &tag, &r.n, &r.idx, &r.val) != SC_OK ||
		    tag >= nrec || rec[tag].idx)
			return scd_scheme_fail(
			    SC_ERR_PROTOCOL,
			    "spardl: all-gather record %u of %u malformed or "
			    "repeated",
			    j, nrec);
		uint64_t rlo = by_tag ? blk_lo(s, tag) : lo,
			 rhi = by_tag ? blk_lo(s, tag + 1) : hi,
			 k = c->dev->idx_check_range(r.idx, r.n, rlo, rhi);
		if (k < r.n) {
			uint32_t i;
			c->dev->to_host(&i, r.idx + k, 4);
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "spardl: record of member %u: index %u "
					       "outside [%llu, %llu) or out of order",
					       tag, i, (unsigned long long)rlo,
					       (unsigned long long)rhi);
		}
		rec[tag] = r;
		total += r.n;
		off += 8 + 8 * r.n;
	}
	*total_p = total;
	return SC_OK;
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
		uint64_t len = recs_len(c, buf, used, cnt);
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
		c->dev->copy(sb, fi, 4 * fn);
		c->dev->copy(sb + 4 * fn, fv, 4 * fn);
		scd_xfer_t snd = {partner, sb, 8 * fn}, rcv = {partner, c->recvbuf.p, 8 * s->L};
		size_t got = 0;
		if ((st = scd_scheme_xchg_v(c, &snd, 1, &rcv, 1, &got)) != SC_OK)
			return st;
		uint64_t rn = got / 8;
		const uint32_t *ri = c->recvbuf.p;
		const float *rv = (const float *)((const uint8_t *)c->recvbuf.p + 4 * rn);
		uint64_t m = c->dev->coo_merge_sum(fi, fv, fn, ri, rv, rn, mi, mv);
		uint64_t kept = c->dev->coo_topk(mi, mv, m, s->L, c->hidx.p, c->hval.p);
		/* 2 bit teams hold this same sum and discard the same values */
		if ((st = discard(s, mi, mv, kept, m, 1.0f / (float)(2 * bit))) != SC_OK)
			return st;
		c->dev->copy(fi, mi, 4 * kept);
		c->dev->copy(fv, mv, 4 * kept);
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
	h->last_hl = (double)hk / (double)s->L; /* what this run sends, for the price */
	uint64_t kept = c->dev->coo_topk(fi, fv, fn, hk, c->hidx.p, c->hval.p);
	sc_status_t st = discard(s, fi, fv, kept, fn, 1.0f);
	if (st != SC_OK)
		return st;
	int *ranks = s->ranks;
	for (uint32_t g = 0; g < s->d; g++)
		ranks[g] = team_rank(s, g, s->w);
	uint8_t *buf = c->recvbuf.p;
	uint64_t used = rec_put(c, buf, s->t, fi, fv, kept);
	if ((st = bruck(c, ranks, s->d, s->t, buf, c->recvbuf.cap, &used)) != SC_OK)
		return st;
	/* the sum in team order: ((0 + r_0) + r_1) + ..., the bits of W[i] += r_g */
	rec_t *rec = s->rec;
	uint64_t m = 0, total;
	if ((st = rec_index(s, buf, used, s->d, 0, blk_lo(s, s->w), blk_lo(s, s->w + 1), rec,
			    &total)) != SC_OK)
		return st;
	uint32_t *ti = c->sidx.p;
	float *tv = c->sval.p;
	for (uint32_t g = 0; g < s->d; g++) {
		scd_coo_t r = {(uint32_t *)rec[g].idx, (float *)rec[g].val, rec[g].n, rec[g].n};
		m = c->dev->merge_two(mi, mv, m, &r, ti, tv);
		c->dev->copy(mi, ti, 4 * m);
		c->dev->copy(mv, tv, 4 * m);
	}
	m = c->dev->coo_compact_nonzero(mi, mv, m, mi, mv);
	kept = c->dev->coo_topk(mi, mv, m, s->L, c->hidx.p, c->hval.p);
	if (s->res) {
		/* index i's discard goes to the member of team i mod d, into the queue */
		if ((st = scd_res_reserve(c, m - kept)) != SC_OK)
			return st;
		c->rq_n += c->dev->coo_filter_mod(mi + kept, mv + kept, m - kept, s->d, s->t,
						  (uint32_t *)c->rq_idx.p + c->rq_n,
						  (float *)c->rq_val.p + c->rq_n);
	}
	c->dev->copy(fi, mi, 4 * kept);
	c->dev->copy(fv, mv, 4 * kept);
	*fn_p = kept;
	h_adjust(h, m, (double)s->L, lo, hi);
	return SC_OK;
}

/* The final blocks of the team (Bruck records in buf) into io->out (ascending: blocks in
 * id order) when it fits, else into io->data. */
static sc_status_t spardl_output(sd_t *s, scd_scheme_io_t *io, const uint8_t *buf,
				 uint64_t used)
{
	scd_scheme_ctx_t *c = s->c;
	rec_t *rec = c->xb.p;
	uint64_t total;
	sc_status_t st = rec_index(s, buf, used, s->Q, 1, 0, 0, rec, &total);
	if (st != SC_OK)
		return st;
	int sparse = scd_scheme_sparse_out(io, total);
	if (!sparse)
		c->dev->clear(io->data, 4 * s->numel);
	uint64_t w = 0;
	for (uint32_t b = 0; b < s->Q; b++) {
		uint64_t n = rec[b].n;
		const uint32_t *ri = rec[b].idx;
		const float *rv = rec[b].val;
		if (sparse) {
			c->dev->copy(io->out->idx + w, ri, 4 * n);
			c->dev->copy(io->out->val + w, rv, 4 * n);
			w += n;
		} else {
			scd_coo_t r = {(uint32_t *)ri, (float *)rv, n, n};
			c->dev->coo_scatter(io->data, &r);
		}
	}
	if (sparse) {
		io->out->nnz = w;
		c->res_ready = 1;
	}
	return SC_OK;
}

/*
 * The word each rank adds to its histogram in the metadata round: the d of its previous
 * run and the h / L its B-SAG sent there, in millionths (0: the previous run was not a
 * B-SAG). Every rank reads every rank's word, so the mean (hl_agreed) is the same on all.
 */
static uint64_t hl_word(scd_spardl_state_t *sd)
{
	uint64_t w = 0;
	if (sd->prev_d && sd->last_hl > 0)
		w = (uint64_t)sd->prev_d << 32 | (uint64_t)llround(fmin(sd->last_hl, 1) * 1e6);
	sd->last_hl = 0;
	return w;
}

/* The ranks' mean h / L of the previous B-SAG at d_p (0 when none ran or the words
 * disagree on d: a rank's word is then not counted). */
static double hl_agreed(const scd_scheme_ctx_t *c, uint32_t H, uint32_t *d_p)
{
	double sum = 0;
	uint32_t n = 0, d = 0;
	for (int q = 0; q < c->size; q++) {
		uint64_t w = c->parts[(size_t)q * c->nparts + H];
		uint32_t dq = (uint32_t)(w >> 32);
		if (!dq || (d && dq != d))
			continue;
		d = dq;
		sum += (double)(w & 0xffffffffu) * 1e-6;
		n++;
	}
	*d_p = d;
	return n ? sum / n : 0;
}

static sc_status_t scd_scheme_spardl(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	uint32_t P = (uint32_t)c->size, me = (uint32_t)c->rank;
	uint64_t numel = c->cfg.numel;
	uint32_t H = hist_ranges(numel, P);
	sc_status_t st = scd_scheme_local_coo(c, io);
	if (st != SC_OK || (st = scd_ws_reserve(&c->ctl, 16 * (uint64_t)H + 8)) != SC_OK)
		return st;
	uint64_t *hist = c->ctl.p;
	local_hist(c, &c->local, numel, H, hist, hist + H);
	hist[H] = hl_word(&c->sd);
	if ((st = scd_scheme_meta(c, SCD_SCHEME_SPARDL, c->local.nnz, hist, H + 1)) != SC_OK)
		return st;
	c->bsag_hl = hl_agreed(c, H, &c->bsag_teams);
	scd_spardl_fold(&c->sd, c->prev_elapsed_max_us * 1e-6,
			c->bsag_teams == c->sd.prev_d ? c->bsag_hl : 0);
	uint64_t k = c->cfg.density > 0 ? scd_density_to_k(c->cfg.density, numel)
					: (c->total_nnz + P - 1) / P;
	if (k < 1)
		k = 1;
	sd_t s = {.c = c, .res = io->residual, .numel = numel};
	s.d = scd_scheme_spardl_teams(c, (double)k / (double)numel);
	s.Q = P / s.d;
	s.t = me / s.Q;
	s.w = me % s.Q;
	s.L = (k + s.Q - 1) / s.Q;
	c->teams_used = s.d;
	uint64_t nl = c->local.nnz, rec = 8 + 8 * s.L;
	uint64_t bag = (uint64_t)s.Q * s.L + 2 * s.L + 2;
	uint64_t held = nl + bag, list = held > s.d * s.L ? held : s.d * s.L;
	uint64_t msg = (uint64_t)(s.Q > s.d ? s.Q : s.d) * rec + 8 * bag;
	/* host tables: boff, blen, bnd, the blocks' ends, runs, records, ranks, held */
	uint64_t M = s.Q > s.d ? s.Q : s.d;
	uint64_t tabs = 8 * (4 * (uint64_t)s.Q + 1) + sizeof(scd_run_t) * (s.Q + 1) +
			(sizeof(rec_t) + sizeof(int)) * M + s.Q;
	/* the contribution's blocks: slices of its (ascending) list, copied into the arena
	 * first (the list may be lidx, which the bags use, or io->out's arrays) */
	if ((st = scd_ws_reserve(&c->ridx, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->rval, 4 * list)) != SC_OK)
		return st;
	c->dev->copy(c->ridx.p, c->local.idx, 4 * nl);
	c->dev->copy(c->rval.p, c->local.val, 4 * nl);
	if ((st = scd_ws_reserve(&c->aidx, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hidx, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sidx, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sval, 4 * list)) != SC_OK ||
	    (st = scd_ws_reserve(&c->lidx, 4 * bag)) != SC_OK ||
	    (st = scd_ws_reserve(&c->lval, 4 * bag)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sendbuf, msg)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, msg)) != SC_OK ||
	    (st = scd_ws_reserve(&c->ctl, tabs)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xb, sizeof(rec_t) * (uint64_t)(s.Q + 1))) != SC_OK)
		return st;
	s.boff = c->ctl.p;
	s.blen = s.boff + s.Q;
	s.bnd = s.blen + s.Q;
	uint64_t *bend = s.bnd + s.Q + 1;
	s.runs = (scd_run_t *)(bend + s.Q);
	s.rec = (rec_t *)(s.runs + s.Q + 1);
	s.ranks = (int *)(s.rec + M);
	s.held = (uint8_t *)(s.ranks + M);
	c->imbalance = cut_blocks(&s, H, k);
	/* the contribution's blocks: where each block's list ends */
	uint64_t whole[2] = {0, nl};
	c->dev->lower_bounds(c->ridx.p, whole, 1, s.bnd + 1, s.Q, bend);
	for (uint64_t b = 0, j = 0; b < s.Q; j = bend[b++]) {
		s.boff[b] = j;
		s.blen[b] = bend[b] - j;
		s.held[b] = 1;
	}
	uint64_t fn = 0;
	if ((st = srs(&s, &fn)) != SC_OK)
		return st;
	if (s.d > 1) {
		st = (s.d & (s.d - 1)) == 0 ? rsag(&s, &fn) : bsag(&s, k, &fn);
		if (st != SC_OK)
			return st;
	}
	/* Bruck all-gather of the blocks inside the team */
	int *ranks = s.ranks;
	for (uint32_t q = 0; q < s.Q; q++)
		ranks[q] = team_rank(&s, s.t, q);
	uint8_t *buf = c->recvbuf.p;
	uint64_t used = rec_put(c, buf, s.w, c->lidx.p, c->lval.p, fn);
	if ((st = bruck(c, ranks, s.Q, s.w, buf, c->recvbuf.cap, &used)) != SC_OK)
		return st;
	return spardl_output(&s, io, buf, used);
}

/* ---- cost and descriptor ------------------------------------------------------------- */

/*
 * k = d_G U values per rank, d teams of Q = P/d ranks, L = dk/P values per block, each
 * value 8 bytes (index and value). Rounds: Spar-Reduce-Scatter ceil(log2 Q), the SAG
 * ceil(log2 d) (R-SAG's doubling, or B-SAG's Bruck), the team's Bruck all-gather
 * ceil(log2 Q). Bytes a rank sends: the SRS sends Q-1 blocks of at most L values in all,
 * the final all-gather Q-1 records of at most L, so 16 L = 16 k (P-d)/P; R-SAG sends
 * its L values log2 d times, 8 L log2 d (SparDL eq. 7); B-SAG sends d-1 records of h values,
 * h within [k/P, L] (Algorithm 2), which steers h until the union gathered from the d
 * members holds about L values: 8 (d-1) h (eq. 8). Where h settles depends on how much the
 * members' selections overlap: near k/P when they barely do, towards L when they share
 * most indices, so h is priced from what the runs reached: each B-SAG run reports its h / L
 * (the ranks' mean, carried by the metadata round) into the profile (bsag_hl, at
 * bsag_teams), and a d with nothing measured is charged B-SAG's upper bound h = L. (Priced
 * at its lower bound k/P, d = P was the cheapest divisor whenever P is not a power of two,
 * so Spar-Reduce-Scatter never ran; in test_scheme_model.c h settled at 1.1x to 1.5x k/P
 * on Zipf indices with half of them shared, and h = L is 1.5x to 6x k/P.)
 * Without teams (d = 1) this is eq. (4): 2 ceil(log2 P) rounds, 16 k (P-1)/P bytes.
 */
static scd_cost_t spardl_model(const scd_cost_in_t *in)
{
	double P = in->P, k = scd_cost_nnz(in), d = in->teams > 1 ? in->teams : 1;
	if (d <= 1)
		return scd_cost_make(in, 2.0 * scd_ceil_log2(in->P), 4 * 4 * k * (P - 1) / P);
	uint32_t l_pd = scd_ceil_log2((uint32_t)ceil(P / d)), l_d = scd_ceil_log2((uint32_t)d);
	int pow2 = ((uint32_t)d & ((uint32_t)d - 1)) == 0;
	double L = d * k / P;
	double hl = in->bsag_teams == in->teams && in->bsag_hl > 0 ? fmin(in->bsag_hl, 1) : 1;
	double elems = pow2 ? 2 * k * ((2 * P - 2 * d) / P + d / P * log2(d))
			    : 2 * k * (2 * P - 2 * d) / P + 2 * (d - 1) * hl * L;
	return scd_cost_make(in, 2.0 * l_pd + l_d, 4 * elems);
}

/* The largest divisor of P that is <= d (1 at least). */
static uint32_t divisor_at_most(uint32_t P, uint32_t d)
{
	if (d > P)
		d = P;
	while (d > 1 && P % d)
		d--;
	return d ? d : 1;
}

/* ---- the team count: d = 1 until another d is measured faster ------------------------ */

/* A run at a d not measured yet is tried only when predicted (from the current d's
 * measured time, scaled by the model) this much faster, only in the first
 * SPARDL_EXPLORE_RUNS runs and at most SPARDL_TRIES times; a try is kept only when its
 * own measured time beats the incumbent's by SPARDL_GAIN. */
#define SPARDL_MARGIN	    1.25
#define SPARDL_GAIN	    0.9
#define SPARDL_EXPLORE_RUNS 16
#define SPARDL_TRIES	    2

static scd_spardl_slot_t *slot_of(scd_spardl_state_t *s, uint32_t d, int create)
{
	scd_spardl_slot_t *v = NULL;
	for (int i = 0; i < SCD_SPARDL_SLOTS; i++) {
		if (s->slot[i].d == d)
			return &s->slot[i];
		if (create && s->slot[i].d != s->cur_d && s->slot[i].d != s->incumbent &&
		    (!v || s->slot[i].runs < v->runs))
			v = &s->slot[i]; /* a free slot, or the least measured other one */
	}
	if (v)
		*v = (scd_spardl_slot_t){.d = d};
	return v;
}

static int measured(const scd_spardl_slot_t *x)
{
	return x && x->runs >= 2;
}

void scd_spardl_fold(scd_spardl_state_t *s, double time_s, double hl)
{
	scd_spardl_slot_t *x = s->prev_d ? slot_of(s, s->prev_d, 1) : NULL;
	if (!x)
		return;
	if (hl > 0)
		x->hl = x->hl > 0 ? 0.5 * x->hl + 0.5 * hl : hl;
	/* the first run at d pays for its workspaces: not counted */
	if (time_s > 0 && x->runs++ > 0)
		x->time_s = x->runs == 2 ? time_s : 0.5 * x->time_s + 0.5 * time_s;
}

/* The model's time at d, B-SAG priced at the h / L measured there (h = L if none). */
static double model_at(const scd_cost_in_t *base, const scd_spardl_slot_t *x, uint32_t d)
{
	scd_cost_in_t in = *base;
	in.teams = d;
	in.bsag_teams = d;
	in.bsag_hl = x ? x->hl : 0;
	return spardl_model(&in).seconds;
}

/* The divisor of P, not run yet, that the model scaled by the current d's measurement
 * favours most (0: none predicted SPARDL_MARGIN faster than the current d measured). */
static uint32_t team_to_try(scd_spardl_state_t *s, const scd_cost_in_t *in,
			    const scd_spardl_slot_t *cur)
{
	double m = model_at(in, cur, s->cur_d);
	if (!(m > 0))
		return 0;
	double ratio = cur->time_s / m, best_s = cur->time_s / SPARDL_MARGIN;
	uint32_t best = 0;
	for (uint32_t d = 1; d <= in->P; d++) {
		if (in->P % d || d == s->cur_d || slot_of(s, d, 0))
			continue;
		double t = model_at(in, NULL, d) * ratio;
		if (t < best_s)
			best_s = t, best = d;
	}
	return best;
}

uint32_t scd_spardl_pick_teams(scd_spardl_state_t *s, const scd_cost_in_t *in)
{
	s->runs++;
	if (!s->cur_d || in->P % s->cur_d)
		s->cur_d = s->incumbent = 1;
	scd_spardl_slot_t *cur = slot_of(s, s->cur_d, 0), *inc = slot_of(s, s->incumbent, 0);
	if (s->cur_d != s->incumbent) { /* a try: judged once measured */
		if (!measured(cur))
			return s->cur_d;
		if (!measured(inc) || cur->time_s < SPARDL_GAIN * inc->time_s)
			s->incumbent = s->cur_d;
		return s->cur_d = s->incumbent;
	}
	if (!measured(cur) || s->runs > SPARDL_EXPLORE_RUNS || s->tries >= SPARDL_TRIES)
		return s->cur_d;
	uint32_t d = team_to_try(s, in, cur);
	if (d) {
		s->tries++;
		s->cur_d = d;
	}
	return s->cur_d;
}

/* cfg.spardl_teams (its largest divisor of P), else the calibrated d in c->sd. */
static uint32_t spardl_teams_now(const scd_scheme_ctx_t *c, uint32_t P)
{
	if (c->cfg.spardl_teams)
		return divisor_at_most(P, c->cfg.spardl_teams);
	return c->sd.cur_d && P % c->sd.cur_d == 0 ? c->sd.cur_d : 1;
}

uint32_t scd_scheme_spardl_teams(scd_scheme_ctx_t *c, double density)
{
	if (c->cfg.spardl_teams)
		return divisor_at_most((uint32_t)c->size, c->cfg.spardl_teams);
	scd_scheme_profile_t pf = {.density = density, .gamma_n = c->size, .skew = 1};
	scd_cost_in_t in = scd_scheme_cost_in(c, &pf, c->alpha_s, c->beta_s);
	return scd_spardl_pick_teams(&c->sd, &in);
}

/* With the team count it runs with now (at the density it runs with: cfg.density, if
 * set); B-SAG priced from the profile's measured h / L. */
static scd_cost_t spardl_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *base)
{
	scd_cost_in_t in = *base;
	if (c->cfg.density > 0)
		in.density = c->cfg.density;
	in.teams = spardl_teams_now(c, in.P);
	return spardl_model(&in);
}

const scd_scheme_desc_t scd_scheme_spardl_desc = {
    .name = "spardl",
    .lists_out = 1,
    .uses = SCD_COST_DENSITY,
    .run = scd_scheme_spardl,
    .model = spardl_model,
    .cost = spardl_cost,
};
