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
 *         its slot in I_p), so nothing of size numel is cleared or scanned.
 *   pull: server p sends its partition as a hash bitmap (Algorithm 2: a bitmap over I_p,
 *         the partition's indices in ascending order, then the non-zero values), |I_p|/8 +
 *         4 nnz_p bytes, and every rank decodes every partition into the output.
 * Both all-to-all phases are one exchange_v each, so all peers progress together and a
 * slow peer holds back only its own transfers. The push and pull maps are the same
 * function (device/partition.h), so they cannot disagree for any numel and P. The
 * metadata round carries each rank's per-partition counts, which size every receive
 * exactly and give every rank the servers' loads, hence the same imbalance ratio
 * (ZEN Def. 8: max load x P / total).
 *
 * OmniReduce-style blocks (ZEN sec. 2.4): the same push/aggregate/pull over P contiguous
 * ranges of whole blocks of cfg.omni_block elements; only non-zero blocks travel, as
 * (u32 block id, block values) records (device/format.h). Range partitions suffer the
 * skew of the index distribution, which the cost model charges.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

/* The partition lists (shared, built once per numel, P and seed) and room for a push of
 * nnz entries. */
static sc_status_t bp_ensure(scd_scheme_ctx_t *c, uint64_t nnz)
{
	sc_status_t st;
	if (!c->map &&
	    (st = scd_partmap_acquire(c->cfg.numel, (uint32_t)c->size, c->cfg.seed, &c->map)) !=
		SC_OK)
		return scd_scheme_fail(st, "balanced_par: partition lists for %llu elements",
				       (unsigned long long)c->cfg.numel);
	if ((st = scd_ws_reserve(&c->hidx, 4 * nnz + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->hval, 4 * nnz + 4)) != SC_OK)
		return st;
	return SC_OK;
}

/* max / mean of the servers' loads, loads[p] = sum over q of parts[q][p]. */
static double server_imbalance(const scd_scheme_ctx_t *c, uint64_t *load)
{
	int P = c->size;
	uint64_t total = 0, max = 0;
	for (int p = 0; p < P; p++) {
		load[p] = 0;
		for (int q = 0; q < P; q++)
			load[p] += c->parts[(size_t)q * P + p];
		total += load[p];
		if (load[p] > max)
			max = load[p];
	}
	return total ? (double)max * P / (double)total : 1;
}

/*
 * Overlap. Both exchanges run work in their idle time (scd_scheme_xchg_vw), in slices:
 *   push: clear the aggregate L, then aggregate each rank's push as soon as it and every
 *         lower rank's are in (rank order: the bits do not depend on arrival), then clear
 *         io->data for a dense result (the input was consumed by the push);
 *   pull: decode each server's hash bitmap as it arrives: into io->data (disjoint
 *         partitions, any order), or for a sparse result into its list, merged in server
 *         order into io->out as soon as it and every lower server's are in.
 * What is left when the last byte arrives is the last rank's share.
 */
#define BP_CLEAR_SLICE (1u << 18) /* floats cleared per slice (1 MiB) */

typedef struct bp {
	scd_scheme_ctx_t *c;
	scd_scheme_io_t *io;
	const scd_coo_t *out; /* my push, partitioned (c->hoff) */
	float *L;	      /* my partition's aggregate, |I_me| floats */
	uint64_t mysize, lclr, clr;
	int next; /* the next rank to aggregate / server to merge */
	int sparse;
	uint64_t own_bytes; /* pull: my hash bitmap, in c->sendbuf */
	uint64_t uni, off;  /* pull, sparse: room and use of the decoded lists */
	scd_merge_t mg;
} bp_t;

static int bp_recv(const bp_t *b, int q)
{
	return q < b->c->rank ? q : q - 1;
}

/* Clears n floats of a buffer of len in a slice; 1 if it did. */
static int clear_slice(float *p, uint64_t len, uint64_t *done)
{
	if (*done >= len)
		return 0;
	uint64_t n = len - *done < BP_CLEAR_SLICE ? len - *done : BP_CLEAR_SLICE;
	memset(p + *done, 0, 4 * n);
	*done += n;
	return 1;
}

static sc_status_t bp_aggregate(bp_t *b, int q)
{
	scd_scheme_ctx_t *c = b->c;
	int P = c->size, me = c->rank;
	scd_coo_t r;
	if (q == me) {
		uint64_t k = c->hoff[me + 1] - c->hoff[me];
		r = (scd_coo_t){b->out->idx + c->hoff[me], b->out->val + c->hoff[me], k, k};
	} else {
		int j = bp_recv(b, q);
		uint64_t k = c->rbytes[j] / 8;
		if (c->rbytes[j] != 8 * c->parts[(size_t)q * P + me])
			return scd_scheme_work_fail(
			    c, SC_ERR_PROTOCOL,
			    "balanced_par: rank %d pushed %zu bytes, announced %llu non-zeros", q,
			    c->rbytes[j], (unsigned long long)c->parts[(size_t)q * P + me]);
		const uint8_t *p = c->recvs[j].buf;
		r = (scd_coo_t){(uint32_t *)p, (float *)(p + 4 * k), k, k};
	}
	uint64_t bad = c->dev->coo_scatter_add_part(b->L, c->map, (uint32_t)me, &r);
	if (bad)
		return scd_scheme_work_fail(c, SC_ERR_PROTOCOL,
					    "balanced_par: rank %d pushed %llu indices that are "
					    "not in partition %d",
					    q, (unsigned long long)bad, me);
	return SC_OK;
}

static int bp_push_work(void *arg)
{
	bp_t *b = arg;
	scd_scheme_ctx_t *c = b->c;
	if (clear_slice(b->L, b->mysize, &b->lclr))
		return 1;
	if (b->next < c->size &&
	    (b->next == c->rank || c->rbytes[bp_recv(b, b->next)] != SCD_XFER_PENDING)) {
		sc_status_t st = bp_aggregate(b, b->next++);
		return st != SC_OK ? st : 1;
	}
	if (!b->sparse && clear_slice(b->io->data, b->c->cfg.numel, &b->clr))
		return 1;
	return 0;
}

static sc_status_t bp_decode(bp_t *b, int p)
{
	scd_scheme_ctx_t *c = b->c;
	int me = c->rank;
	const void *buf = p == me ? c->sendbuf.p : c->recvs[bp_recv(b, p)].buf;
	uint64_t len = p == me ? b->own_bytes : c->rbytes[bp_recv(b, p)];
	sc_status_t st;
	if (b->sparse) {
		scd_coo_t l = {(uint32_t *)c->aidx.p + b->off, (float *)c->aval.p + b->off, 0,
			       b->uni - b->off};
		st = c->dev->hash_bitmap_decode(c->map, (uint32_t)p, buf, len, &l);
		if (st == SC_OK) {
			b->off += l.nnz;
			if ((st = scd_scheme_merge_add(&b->mg, &l)) != SC_OK)
				return c->work_st = st;
		}
	} else {
		st = c->dev->hash_bitmap_decode_dense(c->map, (uint32_t)p, buf, len, b->io->data);
	}
	if (st != SC_OK)
		return scd_scheme_work_fail(c, st, "balanced_par: bad hash bitmap from rank %d", p);
	return SC_OK;
}

static int bp_pull_work(void *arg)
{
	bp_t *b = arg;
	scd_scheme_ctx_t *c = b->c;
	if (!b->sparse && clear_slice(b->io->data, c->cfg.numel, &b->clr))
		return 1;
	if (b->next < c->size &&
	    (b->next == c->rank || c->rbytes[bp_recv(b, b->next)] != SCD_XFER_PENDING)) {
		sc_status_t st = bp_decode(b, b->next++);
		return st != SC_OK ? st : 1;
	}
	return 0;
}

sc_status_t scd_scheme_balanced_par(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
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
		memset(io->data, 0, 4 * numel);
		c->dev->coo_scatter_add(io->data, &own);
		return SC_OK;
	}
	scd_coo_t out = {c->hidx.p, c->hval.p, 0, c->local.nnz};
	uint64_t *off = c->hoff;
	if ((st = c->dev->partition_coo(&c->map->fn, &c->local, &out, off)) != SC_OK)
		return scd_scheme_fail(st, "balanced_par: push of %llu non-zeros",
				       (unsigned long long)c->local.nnz);
	/* per-partition counts; the metadata round spreads them */
	uint64_t parts[P];
	for (int p = 0; p < P; p++)
		parts[p] = off[p + 1] - off[p];
	if ((st = scd_scheme_meta(c, SCD_SCHEME_BALANCED_PAR, out.nnz, parts, (uint32_t)P)) !=
	    SC_OK)
		return st;
	uint64_t load[P];
	c->imbalance = server_imbalance(c, load);

	/* push: partition p to server p, COO */
	uint64_t send_total = 8 * (out.nnz - parts[me]), recv_total = 0;
	for (int q = 0; q < P; q++)
		if (q != me)
			recv_total += 8 * c->parts[(size_t)q * P + me];
	uint64_t mysize = scd_partmap_size(c->map, (uint32_t)me);
	uint64_t pull_send = scd_fmt_hash_bitmap_bytes(mysize, mysize), pull_recv = 0, uni = 0;
	for (int p = 0; p < P; p++) {
		uint64_t sz = scd_partmap_size(c->map, (uint32_t)p);
		uni += load[p] < sz ? load[p] : sz;
		if (p != me)
			pull_recv += scd_fmt_hash_bitmap_bytes(sz, load[p] < sz ? load[p] : sz);
	}
	if ((st = scd_ws_reserve(&c->sendbuf,
				 send_total > pull_send ? send_total : pull_send)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, recv_total > pull_recv ? recv_total + 8
								     : pull_recv + 8)) != SC_OK ||
	    (st = scd_ws_reserve(&c->fscratch, 4 * mysize + 4)) != SC_OK)
		return st;
	int n = 0;
	uint8_t *sb = c->sendbuf.p, *rb = c->recvbuf.p;
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		uint64_t k = parts[p], bytes = 0;
		scd_coo_t part = {out.idx + off[p], out.val + off[p], k, k};
		if ((st = c->dev->coo_encode(&part, sb, 8 * k, &bytes)) != SC_OK)
			return scd_scheme_fail(st, "balanced_par: encoding partition %d", p);
		c->sends[n] = (scd_xfer_t){p, sb, bytes};
		uint64_t cap = 8 * c->parts[(size_t)p * P + me];
		c->recvs[n] = (scd_xfer_t){p, rb, cap};
		sb += bytes;
		rb += cap;
		n++;
	}
	/* aggregate partition me behind the receives, in rank order, over I_me only
	 * (|I_me| = numel / P floats, indexed by the slot of each index in I_me), so neither
	 * the aggregation nor the hash bitmap's encoding touches the other partitions */
	bp_t b = {.c = c,
		  .io = io,
		  .out = &out,
		  .L = c->fscratch.p,
		  .mysize = mysize,
		  .sparse = scd_scheme_sparse_out(io, uni),
		  .uni = uni};
	scd_xfer_work_t w = {bp_push_work, &b};
	if ((st = scd_scheme_xchg_vw(c, c->sends, n, c->recvs, n, c->rbytes, &w)) != SC_OK)
		return st;

	/* pull: my partition as a hash bitmap to everyone, everyone's into the output */
	if ((st = c->dev->hash_bitmap_encode_local(c->map, (uint32_t)me, b.L, c->sendbuf.p,
						   c->sendbuf.cap, &b.own_bytes)) != SC_OK)
		return scd_scheme_fail(st, "balanced_par: hash bitmap of partition %d", me);
	n = 0;
	rb = c->recvbuf.p;
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		uint64_t sz = scd_partmap_size(c->map, (uint32_t)p);
		uint64_t cap = scd_fmt_hash_bitmap_bytes(sz, load[p] < sz ? load[p] : sz);
		c->sends[n] = (scd_xfer_t){p, c->sendbuf.p, b.own_bytes};
		c->recvs[n] = (scd_xfer_t){p, rb, cap};
		rb += cap;
		n++;
	}
	/* the sparse result: the servers' lists decoded side by side, merged (disjoint) in
	 * server order straight into io->out (the input was consumed by the push) */
	if (b.sparse && ((st = scd_ws_reserve(&c->aidx, 4 * uni + 4)) != SC_OK ||
			 (st = scd_ws_reserve(&c->aval, 4 * uni + 4)) != SC_OK ||
			 (st = scd_scheme_merge_begin(c, &b.mg, io->out, P, uni)) != SC_OK))
		return st;
	b.next = 0;
	w.fn = bp_pull_work;
	if ((st = scd_scheme_xchg_vw(c, c->sends, n, c->recvs, n, c->rbytes, &w)) != SC_OK)
		return st;
	c->res_ready = b.sparse;
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

/* Applies block records over a range of len elements: dst += (add) or dst = records. */
static sc_status_t omni_apply(const void *buf, uint64_t bytes, uint32_t B, uint64_t len,
			      float *dst, int add)
{
	uint64_t rec = 4 + 4 * (uint64_t)B, nb = (len + B - 1) / B;
	if (bytes % rec)
		return SC_ERR_PROTOCOL;
	const uint8_t *p = buf;
	for (uint64_t r = 0; r < bytes / rec; r++, p += rec) {
		uint32_t id;
		memcpy(&id, p, 4);
		if (id >= nb)
			return SC_ERR_PROTOCOL;
		uint64_t lo = (uint64_t)id * B, n = len - lo < B ? len - lo : B;
		const float *v = (const float *)(p + 4);
		float *d = dst + lo;
		if (add)
			for (uint64_t i = 0; i < n; i++)
				d[i] += v[i];
		else
			memcpy(d, v, 4 * n);
	}
	return SC_OK;
}

sc_status_t scd_scheme_omnireduce(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	omni_t o = {.numel = c->cfg.numel, .B = c->cfg.omni_block, .P = P};
	o.nb = (o.numel + o.B - 1) / o.B;
	uint64_t rec = 4 + 4 * (uint64_t)o.B, nnz = scd_scheme_local_nnz(c, io);
	sc_status_t st;
	scd_scheme_densify(c, io);
	uint64_t lo, hi, mylo, myhi;
	omni_range(&o, me, &mylo, &myhi);
	uint64_t mylen = myhi - mylo, myblocks = (mylen + o.B - 1) / o.B;
	if ((st = scd_ws_reserve(&c->sendbuf, (o.nb + P) * rec)) != SC_OK ||
	    (st = scd_ws_reserve(&c->fscratch, 4 * mylen + 4)) != SC_OK)
		return st;
	/* encode every other range's non-zero blocks, back to back */
	uint64_t parts[P], soff[P + 1], used = 0;
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
	{
		const float *g = io->data + mylo;
		for (uint64_t b = 0; b < myblocks; b++) {
			uint64_t n = mylen - b * o.B < o.B ? mylen - b * o.B : o.B;
			for (uint64_t i = 0; i < n; i++)
				if (g[b * o.B + i] != 0) {
					parts[me]++;
					break;
				}
		}
	}
	if ((st = scd_scheme_meta(c, SCD_SCHEME_OMNIREDUCE, nnz, parts, (uint32_t)P)) != SC_OK)
		return st;
	uint64_t load[P];
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
	memset(R, 0, 4 * mylen);
	for (int q = 0, j = 0; q < P; q++) {
		if (q == me) {
			c->dev->reduce_sum(R, io->data + mylo, mylen);
			continue;
		}
		if ((st = omni_apply(c->recvs[j].buf, c->rbytes[j], o.B, mylen, R, 1)) != SC_OK)
			return scd_scheme_fail(st, "omnireduce: bad blocks from rank %d", q);
		j++;
	}
	memcpy(io->data + mylo, R, 4 * mylen);
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
		memset(io->data + lo, 0, 4 * (hi - lo));
		if ((st = omni_apply(c->recvs[j].buf, c->rbytes[j], o.B, hi - lo, io->data + lo,
				     0)) != SC_OK)
			return scd_scheme_fail(st, "omnireduce: bad aggregate from rank %d", p);
		j++;
	}
	return SC_OK;
}
