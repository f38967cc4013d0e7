/*
 * scheme_zen.c: the two schemes where each rank serves one partition of the tensor (ZEN
 * sec. 3, "Balanced Parallelism"), differing in how partitions are drawn and encoded.
 *
 * Balanced Parallelism (ZEN Def. 6, eq. 1): push, then pull.
 *   push: this rank's non-zeros are split into P partitions by the shared hash
 *         h0 = partition(idx), the first level of hierarchical hashing (Algorithm 1);
 *         partition p goes to server p as COO. Hashing balances the servers' loads
 *         whatever the index distribution (Theorem 2). The input is ascending here (the
 *         engine's COO, or the scan of a dense buffer), so a stable counting partition
 *         (device partition_coo) places every entry in two sequential passes, and each
 *         push stays ascending: the server's slot lookups and the pull's writes then walk
 *         memory in order. Algorithm 1's second level (rehashing into per-partition
 *         slots, device hh_push_*) exists for unordered input filled by many threads; on
 *         ordered input it only made every later access random (4 nodes, 1 Gbit/s, zipf:
 *         283 -> 253 ms with a sparse result, 357 -> 242 ms dense).
 *   aggregate: server p sums what it received, in rank order, into a dense array over
 *         its own partition's indices I_p only (|I_p| = numel / P floats, each index at
 *         its slot in I_p), kept zero between steps: the slots added to are marked, and
 *         only they are read and cleared again (bp_aggregate_room).
 *   pull: server p sends its partition as a hash bitmap (Algorithm 2: a bitmap over I_p,
 *         the partition's indices in ascending order, then the non-zero values), |I_p|/8 +
 *         4 nnz_p bytes, and every rank decodes every partition into the output.
 * Both all-to-all phases share one exchange_v (K messages per peer and phase, one per
 * index range: "Streaming" below), so all peers progress together, a slow peer holds back
 * only its own transfers, and the pull of a range leaves while later ranges are pushed. The
 * push and pull maps are the same function (device/partition.h), so they cannot disagree for
 * any numel and P. The metadata round carries each rank's counts per partition and range, which
 * size every receive exactly and give every rank the servers' loads, hence the same imbalance
 * ratio (ZEN Def. 8: max load x P / total).
 *
 * OmniReduce-style blocks (ZEN sec. 2.4): the same push/aggregate/pull over P contiguous
 * ranges of whole blocks of cfg.omni_block elements; only non-zero blocks travel, as
 * (u32 block id, block values) records (device/format.h). Range partitions suffer the
 * skew of the index distribution, which the cost model charges.
 */
#include "scheme/scheme_internal.h"

#include <math.h>
#include <string.h>

/* The partition lists (shared, built once per numel, P and seed) and room for a push of
 * nnz entries. */
static sc_status_t bp_ensure(scd_scheme_ctx_t *c, uint64_t nnz)
{
	sc_status_t st;
	if (!c->map && (st = c->dev->partmap_acquire(c->cfg.numel, (uint32_t)c->size,
						     c->cfg.seed, &c->map)) != SC_OK)
		return scd_scheme_fail(st, "balanced_par: partition lists for %llu elements",
				       (unsigned long long)c->cfg.numel);
	if ((st = scd_ws_reserve(&c->hidx, 4 * nnz + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * nnz + 4)) != SC_OK)
		return st;
	return SC_OK;
}

/* max / mean of the servers' loads, load[p] = what every rank has for partition p (the
 * metadata's counts: per partition, or per partition and chunk). */
static double server_imbalance(const scd_scheme_ctx_t *c, uint64_t *load)
{
	int P = c->size;
	uint32_t K = c->nparts / (uint32_t)P;
	uint64_t total = 0, max = 0;
	for (int p = 0; p < P; p++) {
		load[p] = 0;
		for (int q = 0; q < P; q++)
			for (uint32_t k = 0; k < K; k++)
				load[p] += c->parts[(size_t)q * c->nparts + (size_t)p * K + k];
		total += load[p];
		if (load[p] > max)
			max = load[p];
	}
	return total ? (double)max * P / (double)total : 1;
}

/*
 * Streaming. The index space is cut into K ranges [B_k, B_k+1), B_k = numel k / K, the same
 * on every rank; every push and every pull travels as K messages, one per range (each
 * partition is ascending, so a range is a contiguous piece of it: of a push list, or of
 * I_p, a segment of the hash bitmap). The metadata round carries each rank's counts per
 * partition and range, which size every receive. The pull's sends follow the pushes on
 * every link, each held by the transport until its range is encoded. The exchange runs
 * work in its idle time (bp_work), in slices, range by range:
 *   push: aggregate range k of each rank's push, in rank order (the bits do not depend
 *         on arrival), once every rank's range k is in; encode range k of my hash bitmap
 *         as soon as it is summed and release it to every rank; then clear io->data for a
 *         dense result (the input was consumed by the push);
 *   pull: once every server's range k is in, decode the servers' segments into io->data
 *         (disjoint partitions), or for a sparse result into lists merged (disjoint, in
 *         server order) onto the end of io->out: the ranges follow each other, so the
 *         result is their concatenation.
 * What is left when the last byte arrives is the last range's share.
 */
#define BP_CHUNKS_MAX 8

/*
 * The server's aggregate of its partition: |I_me| floats and a bit per slot, both zero
 * between steps. The pushes are scattered into it and mark their slots; each range's
 * hash bitmap is then built from the marked slots alone, which it clears again. A step
 * touches what it holds (about 4% of the slots on embedding gradients), where clearing
 * and scanning the whole array cost two passes over numel / P floats. A run that failed
 * half-way leaves marks behind: the next clears everything first.
 */
static sc_status_t bp_aggregate_room(scd_scheme_ctx_t *c, uint64_t mysize)
{
	sc_status_t st;
	if ((st = scd_ws_reserve(&c->bp_agg, 4 * mysize + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->bp_touch, 8 * scd_fmt_bitmap_words(mysize) + 8)) != SC_OK)
		return st;
	if (c->bp_dirty) {
		c->dev->clear(c->bp_agg.p, c->bp_agg.cap);
		c->dev->clear(c->bp_touch.p, c->bp_touch.cap);
		c->bp_dirty = 0;
	}
	return SC_OK;
}

/* Ranges: one per 32 cfg.stream_chunk elements of the tensor, 1..BP_CHUNKS_MAX. */
static uint32_t bp_chunks(const scd_scheme_ctx_t *c)
{
	uint64_t k = c->cfg.numel / (32ull * c->cfg.stream_chunk);
	return k < 1 ? 1 : k > BP_CHUNKS_MAX ? BP_CHUNKS_MAX : (uint32_t)k;
}

typedef struct bp {
	scd_scheme_ctx_t *c;
	scd_scheme_io_t *io;
	uint32_t K;
	const scd_coo_t *out; /* my push, partitioned (c->hoff) */
	uint64_t *cut;	 /* [P][K + 1]: range k of my push list p: [cut[p][k], cut[p][k+1]) */
	uint64_t *seg;	 /* [P][K + 1]: range k of I_p: slots [seg[p][k], seg[p][k+1]) */
	float *L;	 /* my partition's aggregate, |I_me| floats, zero between steps */
	uint64_t *touch; /* L's slots added to this step (a bit per slot) */
	uint64_t mysize, clr;
	uint32_t k;	   /* push: the range in the works */
	int q;		   /* push: the next rank to aggregate in range k */
	uint32_t kp;	   /* pull: the next range to decode */
	int nx;		   /* the push's messages; the pull's follow them in the lists */
	scd_xfer_t *sends; /* the pull's sends are held until their range is encoded */
	int sparse;
	uint8_t *pull;	    /* my hash bitmap's segments, 8-aligned (c->sendbuf2) */
	uint64_t *pull_off; /* [K + 1] */
	uint64_t *pull_len; /* [K] */
	uint64_t uni, outn; /* sparse: room and use of io->out */
	scd_coo_t *lists;   /* [P]: a range's decoded segments (sparse) */
} bp_t;

static uint64_t *bp_at(const bp_t *b, uint64_t *a, int p)
{
	return a + (size_t)p * (b->K + 1);
}

/* The push's receive (or send) of (rank q, range k) in the lists; the pull's is nx after. */
static int bp_recv(const bp_t *b, int q, uint32_t k)
{
	return (q < b->c->rank ? q : q - 1) * (int)b->K + (int)k;
}

/* What rank q announced for (partition p, range k). */
static uint64_t bp_count(const scd_scheme_ctx_t *c, int q, int p, uint32_t k, uint32_t K)
{
	return c->parts[(size_t)q * c->nparts + (size_t)p * K + k];
}

/* Whether (rank q, range k) of the push (pull: the pull's) has arrived. */
static int bp_ready(const bp_t *b, int pull, int q, uint32_t k)
{
	const size_t *rb = b->c->xb.p;
	return q == b->c->rank || rb[(pull ? b->nx : 0) + bp_recv(b, q, k)] != SCD_XFER_PENDING;
}

static sc_status_t bp_aggregate(bp_t *b, int q, uint32_t k)
{
	scd_scheme_ctx_t *c = b->c;
	int me = c->rank;
	scd_coo_t r;
	if (q == me) {
		uint64_t lo = bp_at(b, b->cut, me)[k], hi = bp_at(b, b->cut, me)[k + 1];
		r = (scd_coo_t){b->out->idx + lo, b->out->val + lo, hi - lo, hi - lo};
	} else {
		int j = bp_recv(b, q, k);
		const size_t *rb = c->xb.p;
		const scd_xfer_t *rv = c->xr.p;
		uint64_t want = bp_count(c, q, me, k, b->K), n = rb[j] / 8;
		if (rb[j] != 8 * want)
			return scd_scheme_work_fail(
			    c, SC_ERR_PROTOCOL,
			    "balanced_par: rank %d pushed %zu bytes in range "
			    "%u, announced %llu non-zeros",
			    q, rb[j], k, (unsigned long long)want);
		const uint8_t *p = rv[j].buf;
		r = (scd_coo_t){(uint32_t *)p, (float *)(p + 4 * n), n, n};
	}
	uint64_t bad = c->dev->coo_scatter_add_part(b->L, b->touch, c->map, (uint32_t)me, &r);
	if (bad)
		return scd_scheme_work_fail(
		    c, SC_ERR_PROTOCOL,
		    "balanced_par: rank %d pushed %llu indices that are "
		    "not in partition %d",
		    q, (unsigned long long)bad, me);
	return SC_OK;
}

/* Range k of my partition is summed: its hash bitmap segment, for the pull. */
static sc_status_t bp_encode(bp_t *b, uint32_t k)
{
	scd_scheme_ctx_t *c = b->c;
	int me = c->rank;
	scd_hbseg_t sg = {(uint32_t)me, bp_at(b, b->seg, me)[k], bp_at(b, b->seg, me)[k + 1]};
	uint64_t bytes = 0;
	sc_status_t st = c->dev->hash_bitmap_encode_seg(
	    c->map, &sg, b->L + sg.lo, b->touch, b->pull + b->pull_off[k],
	    b->pull_off[k + 1] - b->pull_off[k], &bytes);
	if (st != SC_OK)
		return scd_scheme_work_fail(c, st, "balanced_par: hash bitmap of partition %d",
					    me);
	/* the transport reads the segment once it is released: the device's work is done */
	if ((st = c->dev->sync()) != SC_OK)
		return scd_scheme_work_fail(c, st, "balanced_par: %s device failed in range %u",
					    c->dev->name, k);
	b->pull_len[k] = bytes;
	for (int p = 0; p < c->size; p++) /* release the range to every other rank */
		if (p != me)
			b->sends[b->nx + bp_recv(b, p, k)].bytes = bytes;
	return SC_OK;
}

static sc_status_t bp_decode(bp_t *b, uint32_t k);

/*
 * The work behind the one exchange of push and pull: the pushes of range k are summed in
 * rank order as they arrive, and the range's hash bitmap segment then released to every
 * rank; the dense output is cleared (when the result is dense); the pulled segments of
 * range k are decoded once every server's has arrived.
 */
static int bp_work(void *arg)
{
	bp_t *b = arg;
	scd_scheme_ctx_t *c = b->c;
	sc_status_t st;
	if (b->k < b->K && bp_ready(b, 0, b->q, b->k)) {
		if ((st = bp_aggregate(b, b->q, b->k)) != SC_OK)
			return st;
		if (++b->q == c->size) {
			if ((st = bp_encode(b, b->k)) != SC_OK)
				return st;
			b->q = 0;
			b->k++;
		}
		return 1;
	}
	if (!b->sparse && scd_clear_slice(c->dev, b->io->data, c->cfg.numel, &b->clr))
		return 1;
	if (b->kp == b->K)
		return 0;
	for (int p = 0; p < c->size; p++)
		if (!bp_ready(b, 1, p, b->kp) || (p == c->rank && b->kp >= b->k))
			return 0;
	st = bp_decode(b, b->kp++);
	return st != SC_OK ? st : 1;
}

/* Every server's segment of range k, decoded (into io->data, or merged onto io->out). */
static sc_status_t bp_decode(bp_t *b, uint32_t k)
{
	scd_scheme_ctx_t *c = b->c;
	int P = c->size, me = c->rank;
	const size_t *rb = c->xb.p;
	const scd_xfer_t *rv = c->xr.p;
	scd_coo_t *lists = b->lists;
	uint64_t off = 0;
	sc_status_t st = SC_OK;
	for (int p = 0; p < P && st == SC_OK; p++) {
		scd_hbseg_t sg = {(uint32_t)p, bp_at(b, b->seg, p)[k],
				  bp_at(b, b->seg, p)[k + 1]};
		const void *buf = p == me ? (const void *)(b->pull + b->pull_off[k])
					  : rv[b->nx + bp_recv(b, p, k)].buf;
		uint64_t len = p == me ? b->pull_len[k] : rb[b->nx + bp_recv(b, p, k)];
		if (b->sparse) {
			lists[p] = (scd_coo_t){(uint32_t *)c->aidx.p + off,
					       (float *)c->aval.p + off, 0, b->uni - off};
			st = c->dev->hash_bitmap_decode_seg(c->map, &sg, buf, len, &lists[p]);
			off += lists[p].nnz;
		} else {
			st = c->dev->hash_bitmap_decode_dense_seg(c->map, &sg, buf, len,
								  b->io->data);
		}
		if (st != SC_OK)
			return scd_scheme_work_fail(
			    c, st, "balanced_par: bad hash bitmap from rank %d (range %u)", p,
			    k);
	}
	if (!b->sparse)
		return SC_OK;
	scd_coo_t dst = {b->io->out->idx + b->outn, b->io->out->val + b->outn, 0,
			 b->io->out->cap - b->outn};
	if ((st = scd_scheme_merge_result(c, lists, P, &dst)) != SC_OK)
		return c->work_st = st;
	b->outn += dst.nnz;
	return SC_OK;
}

static sc_status_t scd_scheme_balanced_par(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	/* push: my non-zeros (ascending) split by h0, each partition still ascending */
	sc_status_t st = scd_scheme_local_coo(c, io);
	if (st == SC_OK && P > 1)
		st = bp_ensure(c, c->local.nnz);
	if (st != SC_OK)
		return st;
	if (P == 1) { /* my partition is everything: aggregate into the output */
		if ((st = scd_scheme_meta(c, SCD_SCHEME_BALANCED_PAR, c->local.nnz,
					  &c->local.nnz, 1)) != SC_OK)
			return st;
		c->imbalance = 1;
		scd_coo_t own = c->local;
		c->dev->clear(io->data, 4 * numel);
		c->dev->coo_scatter_add(io->data, &own);
		return SC_OK;
	}
	scd_coo_t out = {c->hidx.p, c->hval.p, 0, c->local.nnz};
	uint64_t *off = c->hoff;
	if ((st = c->dev->partition_coo(&c->map->fn, &c->local, &out, off)) != SC_OK)
		return scd_scheme_fail(st, "balanced_par: push of %llu non-zeros",
				       (unsigned long long)c->local.nnz);
	/* ranges: of every push list and of every I_p; counts per partition and range (the
	 * run's tables, host memory: the context's ctl) */
	uint32_t K = bp_chunks(c);
	size_t PK1 = (size_t)P * (K + 1), PK = (size_t)P * K;
	if ((st = scd_ws_reserve(&c->ctl,
				 8 * (2 * PK1 + 2 * PK + (size_t)P + 3 * (size_t)K + 2) +
				     sizeof(scd_coo_t) * (size_t)P)) != SC_OK)
		return st;
	uint64_t *cut = c->ctl.p, *seg = cut + PK1, *parts = seg + PK1, *pullmax = parts + PK,
		 *load = pullmax + PK, *pull_off = load + P, *pull_len = pull_off + K + 1,
		 *edge = pull_len + K;
	bp_t b = {.c = c,
		  .io = io,
		  .K = K,
		  .out = &out,
		  .cut = cut,
		  .seg = seg,
		  .lists = (scd_coo_t *)(edge + K + 1)};
	for (uint32_t k = 0; k <= K; k++)
		edge[k] = numel * k / K;
	/* the range edges' positions in every I_p and in every push list */
	c->dev->lower_bounds(c->map->list, c->map->offset, (uint32_t)P, edge, K + 1, seg);
	c->dev->lower_bounds(out.idx, off, (uint32_t)P, edge, K + 1, cut);
	for (int p = 0; p < P; p++) {
		for (uint32_t k = 0; k <= K; k++)
			bp_at(&b, cut, p)[k] += off[p];
		for (uint32_t k = 0; k < K; k++)
			parts[(size_t)p * K + k] =
			    bp_at(&b, cut, p)[k + 1] - bp_at(&b, cut, p)[k];
	}
	if ((st = scd_scheme_meta(c, SCD_SCHEME_BALANCED_PAR, out.nnz, parts,
				  (uint32_t)(P * K))) != SC_OK)
		return st;
	c->imbalance = server_imbalance(c, load);

	/* sizes: the push's receives, my hash bitmap's segments, the pull's receives */
	uint64_t recv_push = 0, recv_pull = 0, uni = 0;
	pull_off[0] = 0;
	for (uint32_t k = 0; k < K; k++) {
		uint64_t sz = bp_at(&b, seg, me)[k + 1] - bp_at(&b, seg, me)[k];
		pull_off[k + 1] = pull_off[k] + scd_slot8(scd_fmt_hash_bitmap_bytes(sz, sz));
	}
	/* pullmax[p][k]: the most non-zeros server p's segment k can hold (its load there,
	 * capped by the segment's slots), which sizes its receive */
	for (int p = 0; p < P; p++)
		for (uint32_t k = 0; k < K; k++) {
			uint64_t sz = bp_at(&b, seg, p)[k + 1] - bp_at(&b, seg, p)[k], l = 0;
			for (int q = 0; q < P; q++)
				l += bp_count(c, q, p, k, K);
			pullmax[(size_t)p * K + k] = l < sz ? l : sz;
			uni += pullmax[(size_t)p * K + k];
			if (p != me) {
				recv_push += scd_slot8(8 * bp_count(c, p, me, k, K));
				recv_pull += scd_slot8(
				    scd_fmt_hash_bitmap_bytes(sz, pullmax[(size_t)p * K + k]));
			}
		}
	uint64_t mysize = scd_partmap_size(c->map, (uint32_t)me);
	size_t nx = (size_t)(P - 1) * K;
	if ((st = scd_ws_reserve(&c->sendbuf, 8 * (out.nnz - (off[me + 1] - off[me])) + 8)) !=
		SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, recv_push + recv_pull + 8)) != SC_OK ||
	    (st = scd_ws_reserve(&c->sendbuf2, pull_off[K] + 8)) != SC_OK ||
	    (st = bp_aggregate_room(c, mysize)) != SC_OK ||
	    (st = scd_ws_reserve(&c->xs, sizeof(scd_xfer_t) * (2 * nx + 1))) != SC_OK ||
	    (st = scd_ws_reserve(&c->xr, sizeof(scd_xfer_t) * (2 * nx + 1))) != SC_OK ||
	    (st = scd_ws_reserve(&c->xb, sizeof(size_t) * (2 * nx + 1))) != SC_OK)
		return st;
	b.L = c->bp_agg.p;
	b.touch = c->bp_touch.p;
	b.mysize = mysize;
	b.sparse = scd_scheme_sparse_out(io, uni);
	b.uni = uni;
	b.pull = c->sendbuf2.p;
	b.pull_off = pull_off;
	b.pull_len = pull_len;
	if (b.sparse && ((st = scd_ws_reserve(&c->aidx, 4 * uni + 4)) != SC_OK ||
			 (st = scd_ws_reserve(&c->aval, 4 * uni + 4)) != SC_OK))
		return st;

	/* push: range k of partition p to server p, COO; the aggregation and the hash
	 * bitmap's segments behind the receives */
	scd_xfer_t *sends = c->xs.p, *recvs = c->xr.p;
	uint8_t *sb = c->sendbuf.p, *rb = c->recvbuf.p;
	int n = 0;
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		for (uint32_t k = 0; k < K; k++, n++) {
			uint64_t lo = bp_at(&b, cut, p)[k], m = bp_at(&b, cut, p)[k + 1] - lo,
				 bytes = 0;
			scd_coo_t part = {out.idx + lo, out.val + lo, m, m};
			if ((st = c->dev->coo_encode(&part, sb, 8 * m, &bytes)) != SC_OK)
				return scd_scheme_fail(
				    st, "balanced_par: encoding partition %d", p);
			sends[n] = (scd_xfer_t){p, sb, bytes};
			uint64_t cap = 8 * bp_count(c, p, me, k, K);
			recvs[n] = (scd_xfer_t){p, rb, cap};
			sb += scd_slot8(bytes);
			rb += scd_slot8(cap);
		}
	}
	/* pull: my segments to everyone (each held until it is encoded), everyone's into the
	 * output; in the same exchange, behind the pushes on every link */
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		for (uint32_t k = 0; k < K; k++, n++) {
			uint64_t sz = bp_at(&b, seg, p)[k + 1] - bp_at(&b, seg, p)[k];
			uint64_t cap =
			    scd_fmt_hash_bitmap_bytes(sz, pullmax[(size_t)p * K + k]);
			sends[n] = (scd_xfer_t){p, b.pull + pull_off[k], SCD_XFER_PENDING};
			recvs[n] = (scd_xfer_t){p, rb, cap};
			rb += scd_slot8(cap);
		}
	}
	b.nx = (int)nx;
	b.sends = sends;
	scd_xfer_work_t w = {bp_work, &b};
	c->bp_dirty = 1;
	if ((st = scd_scheme_xchg_vw(c, sends, n, recvs, n, c->xb.p, &w)) != SC_OK)
		return st;
	c->rounds++; /* the pull waited on the push: two sequential rounds in one exchange */
	c->bp_dirty = 0; /* every range encoded: the aggregate and its marks are zero again */
	if (b.sparse) {
		io->out->nnz = b.outn;
		c->res_ready = 1;
	}
	return SC_OK;
}

/* ---- OmniReduce-style blocks ---------------------------------------------------------- */

typedef struct omni {
	uint64_t numel, nb;
	uint32_t B;
	int P;
} omni_t;

static void omni_range(const omni_t *o, int p, uint64_t *lo, uint64_t *hi)
{
	uint64_t b0 = (uint64_t)p * o->nb / (uint64_t)o->P,
		 b1 = (uint64_t)(p + 1) * o->nb / (uint64_t)o->P;
	*lo = b0 * o->B;
	*hi = b1 * o->B < o->numel ? b1 * o->B : o->numel;
}

static sc_status_t scd_scheme_omnireduce(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	omni_t o = {.numel = c->cfg.numel, .B = c->cfg.omni_block, .P = P};
	o.nb = (o.numel + o.B - 1) / o.B;
	uint64_t rec = 4 + 4 * (uint64_t)o.B, nnz = scd_scheme_local_nnz(c, io);
	sc_status_t st;
	scd_scheme_densify(c, io);
	uint64_t lo, hi, mylo, myhi;
	omni_range(&o, me, &mylo, &myhi);
	uint64_t mylen = myhi - mylo;
	if ((st = scd_ws_reserve(&c->sendbuf, (o.nb + P) * rec)) != SC_OK ||
	    (st = scd_ws_reserve(&c->fscratch, 4 * mylen + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->ctl, 8 * (3 * (size_t)P + 1))) != SC_OK)
		return st;
	/* encode every other range's non-zero blocks, back to back (counts and offsets: host
	 * tables in the context's ctl) */
	uint64_t *parts = c->ctl.p, *soff = parts + P, *load = soff + P + 1, used = 0;
	for (int p = 0; p < P; p++) {
		soff[p] = used;
		parts[p] = 0;
		if (p == me)
			continue;
		omni_range(&o, p, &lo, &hi);
		uint64_t bytes = 0;
		st = c->dev->blocks_encode_dense(io->data + lo, hi - lo, o.B,
						 (uint8_t *)c->sendbuf.p + used,
						 c->sendbuf.cap - used, &bytes);
		if (st != SC_OK)
			return scd_scheme_fail(st, "omnireduce: encoding range %d", p);
		parts[p] = bytes / rec;
		used += bytes;
	}
	soff[P] = used;
	/* my own range's block count (for the servers' loads) */
	parts[me] = c->dev->blocks_count_dense(io->data + mylo, mylen, o.B);
	if ((st = scd_scheme_meta(c, SCD_SCHEME_OMNIREDUCE, nnz, parts, (uint32_t)P)) != SC_OK)
		return st;
	c->imbalance = server_imbalance(c, load);
	uint64_t recv_push = 0, recv_pull = 0;
	for (int q = 0; q < P; q++) {
		if (q == me)
			continue;
		recv_push += c->parts[(size_t)q * P + me] * rec;
		omni_range(&o, q, &lo, &hi);
		uint64_t qb = (hi - lo + o.B - 1) / o.B;
		recv_pull += (load[q] < qb ? load[q] : qb) * rec;
	}
	if ((st = scd_ws_reserve(&c->recvbuf,
				 (recv_push > recv_pull ? recv_push : recv_pull) + 8)) != SC_OK)
		return st;
	int n = 0;
	uint8_t *rb = c->recvbuf.p;
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		uint64_t cap = c->parts[(size_t)p * P + me] * rec;
		c->sends[n] =
		    (scd_xfer_t){p, (uint8_t *)c->sendbuf.p + soff[p], soff[p + 1] - soff[p]};
		c->recvs[n] = (scd_xfer_t){p, rb, cap};
		rb += cap;
		n++;
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	/* aggregate my range in rank order */
	float *R = c->fscratch.p;
	c->dev->clear(R, 4 * mylen);
	for (int q = 0, j = 0; q < P; q++) {
		if (q == me) {
			c->dev->reduce_sum(R, io->data + mylo, mylen);
			continue;
		}
		if ((st = c->dev->blocks_apply(c->recvs[j].buf, c->rbytes[j], o.B, mylen, R,
					       1)) != SC_OK)
			return scd_scheme_fail(st, "omnireduce: bad blocks from rank %d", q);
		j++;
	}
	c->dev->copy(io->data + mylo, R, 4 * mylen);
	if (P == 1)
		return SC_OK;
	/* pull: my aggregated range to everyone */
	uint64_t bytes = 0;
	if ((st = c->dev->blocks_encode_dense(R, mylen, o.B, c->sendbuf.p, c->sendbuf.cap,
					      &bytes)) != SC_OK)
		return scd_scheme_fail(st, "omnireduce: encoding the aggregate");
	n = 0;
	rb = c->recvbuf.p;
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		omni_range(&o, p, &lo, &hi);
		uint64_t pb = (hi - lo + o.B - 1) / o.B;
		uint64_t cap = (load[p] < pb ? load[p] : pb) * rec;
		c->sends[n] = (scd_xfer_t){p, c->sendbuf.p, bytes};
		c->recvs[n] = (scd_xfer_t){p, rb, cap};
		rb += cap;
		n++;
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	for (int p = 0, j = 0; p < P; p++) {
		if (p == me)
			continue;
		omni_range(&o, p, &lo, &hi);
		c->dev->clear(io->data + lo, 4 * (hi - lo));
		if ((st = c->dev->blocks_apply(c->recvs[j].buf, c->rbytes[j], o.B, hi - lo,
					       io->data + lo, 0)) != SC_OK)
			return scd_scheme_fail(st, "omnireduce: bad aggregate from rank %d", p);
		j++;
	}
	return SC_OK;
}

/* ---- descriptors --------------------------------------------------------------------- */

/*
 * Beside ZEN's network formula, two compute terms (model/cost.h): the busiest server adds
 * what every rank pushed to it, its partition's share of the P lists (i k non-zeros, i the
 * hash imbalance on the pushes), at the sum rate (bp_aggregate); and every rank decodes
 * every server's pull into its dense result, the union's min(gamma_n k, U) non-zeros, at
 * the scatter rate, as Hierarchical Centralization's final scatter (bp_decode). The
 * partition of its own list (two sequential passes) and the pull's encoding (over the
 * marked slots) are not priced.
 */
double scd_balanced_par_work_s(const scd_cost_in_t *in)
{
	double U = (double)in->numel, k = scd_cost_nnz(in), union_nnz = in->gamma_n * k;
	if (union_nnz > U)
		union_nnz = U;
	double pushed = k * scd_cost_hash_imbalance(in->P, k);
	return scd_cost_compute_s(in, pushed * in->sum_s_per_nnz +
					  union_nnz * in->scatter_s_per_nnz);
}

/*
 * 2 rounds: the push, then the pull, which waits on it (the code runs both in one
 * exchange_v, and counts the two). Bytes the busiest server sends: its push, (P-1)
 * msg(COO, k/P, U/P), its k = d_G U non-zeros less its own partition's share; and its pull,
 * its partition of the union (gamma_n k non-zeros over U/P elements) to each of the P-1
 * others, (P-1) msg(f, i gamma_n k/P, U/P), i the hash imbalance of Theorem 2 on the
 * union (the busiest partition); a bitmap pull is a hash bitmap. Balanced (i = 1) and
 * summed as sent and received, this is ZEN eq. (1).
 */
static scd_cost_t balanced_par_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel, k = scd_cost_nnz(in),
	       union_nnz = in->gamma_n * k;
	if (union_nnz > U)
		union_nnz = U;
	double push = (P - 1) * scd_cost_msg_bytes(SCD_FMT_COO, k / P, U / P);
	scd_format_t pf = in->format == SCD_FMT_BITMAP ? SCD_FMT_HASH_BITMAP : in->format;
	double part = union_nnz / P * scd_cost_hash_imbalance(in->P, union_nnz);
	double pull = (P - 1) * scd_cost_msg_bytes(pf, part > U / P ? U / P : part, U / P);
	scd_cost_t r = scd_cost_make(in, 2, push + pull);
	r.work_s = scd_balanced_par_work_s(in);
	r.seconds += r.work_s;
	return r;
}

/* It pulls hash bitmaps. */
static scd_cost_t balanced_par_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *in)
{
	scd_cost_in_t x = *in;
	x.format = SCD_FMT_HASH_BITMAP;
	return balanced_par_model(&x);
}

const scd_scheme_desc_t scd_scheme_balanced_par_desc = {
    .name = "balanced_par",
    .lists_out = 1,
    .lossless = 1,
    .uses = SCD_COST_DENSITY | SCD_COST_GAMMA,
    .run = scd_scheme_balanced_par,
    .model = balanced_par_model,
    .cost = balanced_par_cost,
};

/* The fraction of blocks of B elements with a non-zero at density dens (placed
 * independently): 1 - (1 - dens)^B. */
static double omni_block_fraction(double dens, uint32_t B)
{
	if (dens >= 1)
		return 1;
	return 1 - pow(1 - dens, B);
}

/*
 * Beside the network formula, one compute term (model/cost.h): the busiest server adds
 * the non-zero blocks the P-1 others pushed into its range, (P-1) (U/PB) f(d s) blocks
 * of B elements, d s the density in the busiest range (the skew s, its load over the
 * mean, at most 1), each element at the dense sum rate (a block is added densely,
 * blocks_apply). Its own range's dense add, the encodings and the pull's decode (block
 * copies) are not priced.
 */
double scd_omnireduce_work_s(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel, d = in->density * in->skew;
	double B = in->block ? in->block : 256;
	double elems = (P - 1) * U / P * omni_block_fraction(d > 1 ? 1 : d, (uint32_t)B);
	return scd_cost_compute_s(in, elems * in->dense_sum_s_per_elem);
}

/*
 * 2 rounds: the push exchange, then the pull exchange. Range partitions of U/(PB) blocks
 * of B elements, a block travelling as a (4 + 4B)-byte record when it holds a non-zero:
 * a rank pushes its non-zero blocks of the P-1 other ranges, (P-1) (U/PB) f(d) (4 + 4B);
 * the busiest server pulls its range's non-zero blocks of the sum to the P-1 others,
 * (P-1) (U/PB) f(gamma_n d) (4 + 4B) times the skew (its range's load over the mean); f
 * the block fraction.
 */
static scd_cost_t omnireduce_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel, d = in->density > 1 ? 1 : in->density;
	double B = in->block ? in->block : 256;
	double gd = in->gamma_n * d > 1 ? 1 : in->gamma_n * d;
	double per_block = 4 + 4 * B, blocks = U / (P * B);
	double push = (P - 1) * blocks * omni_block_fraction(d, (uint32_t)B) * per_block;
	double pull =
	    (P - 1) * blocks * omni_block_fraction(gd, (uint32_t)B) * per_block * in->skew;
	scd_cost_t r = scd_cost_make(in, 2, push + pull);
	r.work_s = scd_omnireduce_work_s(in);
	r.seconds += r.work_s;
	return r;
}

/* Its blocks are cfg.omni_block elements. */
static scd_cost_t omnireduce_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *in)
{
	scd_cost_in_t x = *in;
	x.block = c->cfg.omni_block;
	return omnireduce_model(&x);
}

const scd_scheme_desc_t scd_scheme_omnireduce_desc = {
    .name = "omnireduce",
    .lossless = 1,
    .uses = SCD_COST_DENSITY | SCD_COST_GAMMA | SCD_COST_SKEW,
    .run = scd_scheme_omnireduce,
    .model = omnireduce_model,
    .cost = omnireduce_cost,
};
