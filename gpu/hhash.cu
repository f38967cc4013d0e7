/*
 * hhash.cu: ZEN hierarchical hashing (Algorithm 1), the hash bitmap (Algorithm 2) and
 * non-zero blocks on the GPU device (scg.h, section hhash.cu / sketch.cu), the cpu
 * reference being daemon/device/hhash.c and format.c.
 *
 * Push: one thread per input element inserts its non-zero into partition(idx)'s memory:
 * up to k compare-and-swap claims on parallel slots h1..hk (empty = UINT64_MAX, never a
 * valid entry since index UINT32_MAX is never valid: index 0 is safe), then the
 * partition's serial memory by fetch-add on its counter (bounded to r2 slots), then a
 * spill area of nnz_cap entries by fetch-add: nothing is lost or overwritten under any
 * contention (the spill is the only fetch-add every thread may hit, and only when a
 * partition's serial memory is full). Then the table's occupied slots and the spill are
 * gathered (stream compaction, no per-entry counter) with sort keys (partition << 32 |
 * index), sorted, and each partition's offset found by binary search in the keys (the
 * offsets come back to the host: the caller sends by them). So each partition's output is
 * ascending by index: the same SET of pairs as the cpu's, whose own order within a
 * partition is timing-dependent. The table is clean after every push, failed ones
 * included. More than nnz_cap (or out's cap) non-zeros: SC_ERR_LIMIT, as hhash.h says.
 * Workspaces: the table, the spill and the keys (nnz_cap each) are allocated by create;
 * Thrust's sort and compaction take their temporary storage from its allocator.
 */
#include "scg_hash.cuh"

#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/permutation_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

typedef unsigned long long u64;
#define SLOT_EMPTY (~0ull)

template <class T> using dref = cuda::atomic_ref<T, cuda::thread_scope_device>;

struct scg_hh {
	scg_hh_cfg_t cfg;
	uint64_t pseed;
	uint64_t seeds[SCG_HH_MAX_K];
	uint64_t r1, r2, stride;
	u64 *slots; /* nparts * stride */
	/* ctr: serial[P], spill_n, overflow, then offsets[P + 1] (lower_bound's output) */
	u64 *ctr;
	u64 *spill; /* nnz_cap */
	u64 *keys;  /* nnz_cap: sort keys (partition << 32 | index) */
	u64 *ctr_host;
};

namespace
{ /* file-local: no clash with the other sources' functors */

/* What one insert needs, by value into the kernel. */
struct hh_view {
	u64 *slots, *serial, *spill_n, *overflow, *spill;
	uint64_t pseed, seeds[SCG_HH_MAX_K];
	uint64_t r1, r2, stride, nnz_cap;
	uint32_t nparts, k;

	SCG_HD void insert(uint32_t idx, float v) const
	{
		uint32_t bits;
		memcpy(&bits, &v, 4);
		u64 e = (u64)idx << 32 | bits;
		uint32_t p = scg_partition_of(pseed, nparts, idx);
		u64 *base = slots + (uint64_t)p * stride;
		for (uint32_t i = 0; i < k; i++) {
			uint64_t q = scg_hash_range(seeds[i], idx, (uint32_t)r1);
			dref<u64> s(base[q]);
			if (s.load(cuda::std::memory_order_relaxed) != SLOT_EMPTY)
				continue;
			u64 expect = SLOT_EMPTY;
			if (s.compare_exchange_strong(expect, e,
						      cuda::std::memory_order_relaxed))
				return;
		}
		u64 c = dref<u64>(serial[p]).fetch_add(1, cuda::std::memory_order_relaxed);
		if (c < r2) {
			dref<u64>(base[r1 + c]).store(e, cuda::std::memory_order_relaxed);
			return;
		}
		u64 sp = dref<u64>(*spill_n).fetch_add(1, cuda::std::memory_order_relaxed);
		if (sp < nnz_cap)
			spill[sp] = e;
		else
			dref<u64>(*overflow).fetch_add(1, cuda::std::memory_order_relaxed);
	}
};

struct insert_dense {
	hh_view h;
	const float *g;
	SCG_HD void operator()(uint64_t i) const
	{
		float v = g[i];
		if (v != 0.0f)
			h.insert((uint32_t)i, v);
	}
};

struct insert_coo {
	hh_view h;
	const uint32_t *idx;
	const float *val;
	SCG_HD void operator()(uint64_t i) const
	{
		h.insert(idx[i], val[i]);
	}
};

struct slot_full {
	SCG_HD bool operator()(u64 e) const
	{
		return e != SLOT_EMPTY;
	}
};

/* The k-th entry gathered (from the table, then the spill) goes to position base + k:
 * its value to out, its sort key (partition << 32 | index) to keys. Positions past cap
 * are dropped (the push then fails). */
struct put_at {
	u64 *keys;
	float *ov;
	uint64_t base, cap, pseed;
	uint32_t nparts;
	SCG_HD void operator()(uint64_t k, u64 e) const
	{
		uint64_t w = base + k;
		if (w >= cap)
			return;
		uint32_t idx = (uint32_t)(e >> 32), bits = (uint32_t)e;
		keys[w] = (u64)scg_partition_of(pseed, nparts, idx) << 32 | idx;
		memcpy(&ov[w], &bits, 4);
	}
};

/* The first sort key of partition p. */
struct part_key {
	SCG_HD u64 operator()(uint64_t p) const
	{
		return (u64)p << 32;
	}
};

struct key_to_idx {
	const u64 *keys;
	uint32_t *oi;
	SCG_HD void operator()(uint64_t j) const
	{
		oi[j] = (uint32_t)keys[j];
	}
};

struct idx_past {
	uint64_t numel;
	SCG_HD bool operator()(uint32_t i) const
	{
		return i >= numel;
	}
};

} // namespace

extern "C" sc_status_t scg_hh_create(const scg_hh_cfg_t *cfg, scg_hh_t **hh_p)
{
	if (!cfg || !hh_p || cfg->nparts == 0 || cfg->numel > UINT32_MAX || cfg->k == 0 ||
	    cfg->k > SCG_HH_MAX_K || !(cfg->r1_factor > 0) || !(cfg->r2_ratio >= 0))
		return scg_fail(SC_ERR_INVALID, "scg_hh_create: bad configuration");
	scg_hh_t *hh = (scg_hh_t *)calloc(1, sizeof(*hh));
	if (!hh)
		return scg_fail(SC_ERR_NOMEM, "scg_hh_create: out of host memory");
	hh->cfg = *cfg;
	hh->pseed = scg_partition_seed(cfg->seed);
	for (uint32_t i = 0; i < SCG_HH_MAX_K; i++)
		hh->seeds[i] = scg_seed_derive(cfg->seed, 1000 + i); /* as the cpu's */
	uint64_t expect = cfg->nnz_expected ? cfg->nnz_expected : cfg->nnz_cap;
	double r1 = ceil(cfg->r1_factor * (double)expect / cfg->nparts);
	hh->r1 = r1 < 1 ? 1 : r1 > (double)UINT32_MAX ? UINT32_MAX : (uint64_t)r1;
	hh->r2 = (uint64_t)ceil(cfg->r2_ratio * (double)hh->r1);
	hh->stride = hh->r1 + hh->r2;
	uint64_t nslots = hh->stride * cfg->nparts, cap = cfg->nnz_cap ? cfg->nnz_cap : 1;
	uint64_t nctr = 3 * (uint64_t)cfg->nparts + 3;
	sc_status_t st;
	hh->ctr_host = (u64 *)calloc(nctr, sizeof(u64));
	if (!hh->ctr_host) {
		free(hh);
		return scg_fail(SC_ERR_NOMEM, "scg_hh_create: out of host memory");
	}
	if ((st = scg_alloc(nslots * 8, (void **)&hh->slots)) != SC_OK ||
	    (st = scg_alloc(nctr * 8, (void **)&hh->ctr)) != SC_OK ||
	    (st = scg_alloc(cap * 8, (void **)&hh->spill)) != SC_OK ||
	    (st = scg_alloc(cap * 8, (void **)&hh->keys)) != SC_OK) {
		scg_hh_destroy(hh);
		return st;
	}
	u64 *slots = hh->slots;
	SCG_TRY("scg_hh_create", thrust::fill(SCG_POLICY, slots, slots + nslots, SLOT_EMPTY));
	if ((st = SCG_CHECK("scg_hh_create")) != SC_OK || (st = scg_sync()) != SC_OK) {
		scg_hh_destroy(hh);
		return st;
	}
	*hh_p = hh;
	return SC_OK;
}

extern "C" void scg_hh_destroy(scg_hh_t *hh)
{
	if (!hh)
		return;
	if (hh->slots)
		scg_free(hh->slots);
	if (hh->ctr)
		scg_free(hh->ctr);
	if (hh->spill)
		scg_free(hh->spill);
	if (hh->keys)
		scg_free(hh->keys);
	free(hh->ctr_host);
	free(hh);
}

static hh_view view_of(const scg_hh_t *hh)
{
	hh_view v;
	uint32_t P = hh->cfg.nparts;
	v.slots = hh->slots;
	v.serial = hh->ctr;
	v.spill_n = hh->ctr + P;
	v.overflow = v.spill_n + 1;
	v.spill = hh->spill;
	v.pseed = hh->pseed;
	for (uint32_t i = 0; i < SCG_HH_MAX_K; i++)
		v.seeds[i] = hh->seeds[i];
	v.r1 = hh->r1;
	v.r2 = hh->r2;
	v.stride = hh->stride;
	v.nnz_cap = hh->cfg.nnz_cap;
	v.nparts = P;
	v.k = hh->cfg.k;
	return v;
}

/* After the inserts: gathers the table and the spill (emptying both), sorts by
 * (partition, index) and finds the partitions' offsets in the sorted keys. No counter is
 * touched per entry but for serial memory and the spill: the offsets come from the sort. */
static sc_status_t finish(scg_hh_t *hh, scg_coo_t *out, uint64_t *offset, scg_hh_stats_t *stats)
{
	uint32_t P = hh->cfg.nparts;
	uint64_t nctr = 2 * (uint64_t)P + 2;
	sc_status_t st = SCG_CHECK("scg_hh_push: insert");
	if (st != SC_OK)
		return st;
	if ((st = scg_to_host(hh->ctr_host, hh->ctr, nctr * 8)) != SC_OK)
		return st;
	const u64 *serial = hh->ctr_host, *spill_n = serial + P, *overflow = spill_n + 1;
	scg_hh_stats_t s;
	memset(&s, 0, sizeof(s));
	for (uint32_t p = 0; p < P; p++)
		s.serial += serial[p] < hh->r2 ? serial[p] : hh->r2;
	s.spill = *spill_n < hh->cfg.nnz_cap ? *spill_n : hh->cfg.nnz_cap;
	uint64_t lost = *overflow;
	u64 *slots = hh->slots, *ctr = hh->ctr, *keys = hh->keys, *spill = hh->spill;
	u64 *offs = ctr + nctr;
	uint32_t *oi = out->idx;
	float *ov = out->val;
	uint64_t nslots = hh->stride * P,
		 cap = out->cap < hh->cfg.nnz_cap ? out->cap : hh->cfg.nnz_cap;
	put_at put = {keys, ov, 0, cap, hh->pseed, P};
	uint64_t m = 0;
	SCG_TRY("scg_hh_push: gather", {
		auto o = thrust::make_tabulate_output_iterator(put);
		m = (uint64_t)(thrust::copy_if(SCG_POLICY, slots, slots + nslots, o,
					       slot_full{}) -
			       o);
		put.base = m;
		thrust::copy(SCG_POLICY, spill, spill + s.spill,
			     thrust::make_tabulate_output_iterator(put));
		thrust::fill(SCG_POLICY, slots, slots + nslots, SLOT_EMPTY);
		thrust::fill(SCG_POLICY, ctr, ctr + nctr, 0ull);
	});
	if ((st = SCG_CHECK("scg_hh_push: gather")) != SC_OK)
		return st;
	s.nnz = m + s.spill + lost;
	s.parallel = m - s.serial;
	if (lost || s.nnz > cap) {
		out->nnz = 0;
		if ((st = scg_sync()) != SC_OK)
			return st;
		return scg_fail(SC_ERR_LIMIT,
				"scg_hh_push: %llu non-zeros, room for %llu (nnz_cap %llu)",
				(unsigned long long)s.nnz, (unsigned long long)cap,
				(unsigned long long)hh->cfg.nnz_cap);
	}
	uint64_t nnz = s.nnz;
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY("scg_hh_push: sort", {
		if (nnz) {
			thrust::sort_by_key(SCG_POLICY, keys, keys + nnz, ov);
			thrust::for_each(SCG_POLICY, zero, zero + nnz, key_to_idx{keys, oi});
		}
		auto pk = thrust::make_transform_iterator(zero, part_key{});
		thrust::lower_bound(SCG_POLICY, keys, keys + nnz, pk, pk + P + 1, offs);
	});
	if ((st = SCG_CHECK("scg_hh_push: sort")) != SC_OK ||
	    (st = scg_to_host(offset, offs, (P + 1) * 8)) != SC_OK)
		return st;
	for (uint32_t p = 0; p < P; p++)
		if (offset[p + 1] - offset[p] > s.max_part)
			s.max_part = offset[p + 1] - offset[p];
	s.imbalance = s.nnz ? (double)s.max_part * P / (double)s.nnz : 1.0;
	out->nnz = s.nnz;
	if (stats)
		*stats = s;
	return SC_OK;
}

extern "C" sc_status_t scg_hh_push_dense(scg_hh_t *hh, const float *g, uint64_t numel,
					 scg_coo_t *out, uint64_t *offset,
					 scg_hh_stats_t *stats)
{
	if (!hh || !g || !out || !offset || numel > hh->cfg.numel)
		return scg_fail(SC_ERR_INVALID, "scg_hh_push_dense: bad arguments");
	insert_dense f = {view_of(hh), g};
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY("scg_hh_push_dense", thrust::for_each(SCG_POLICY, zero, zero + numel, f));
	return finish(hh, out, offset, stats);
}

extern "C" sc_status_t scg_hh_push_coo(scg_hh_t *hh, const scg_coo_t *in, scg_coo_t *out,
				       uint64_t *offset, scg_hh_stats_t *stats)
{
	if (!hh || !in || !out || !offset)
		return scg_fail(SC_ERR_INVALID, "scg_hh_push_coo: bad arguments");
	if (in->nnz > hh->cfg.nnz_cap || in->nnz > out->cap)
		return scg_fail(SC_ERR_LIMIT,
				"scg_hh_push_coo: %llu non-zeros past the capacity",
				(unsigned long long)in->nnz);
	uint64_t n = in->nnz, bad = 0;
	const uint32_t *idx = in->idx;
	SCG_TRY("scg_hh_push_coo",
		bad = thrust::count_if(SCG_POLICY, idx, idx + n, idx_past{hh->cfg.numel}));
	if (bad)
		return scg_fail(SC_ERR_INVALID, "scg_hh_push_coo: index past numel");
	insert_coo f = {view_of(hh), idx, in->val};
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY("scg_hh_push_coo", thrust::for_each(SCG_POLICY, zero, zero + n, f));
	return finish(hh, out, offset, stats);
}

/* ---- hash bitmap (Algorithm 2) -------------------------------------------------------- */

/* One implementation for the whole partition and its segments: the caller (which holds
 * the partition map's host offsets) passes the segment's slice of the list or its slot
 * range. Encoding builds the bitmap a word per thread, then the values by a stable
 * compaction over the set bits; a touched bitmap confines both to the marked slots (the
 * others are not read), which are then cleared in local and in touched, as the cpu's. */

namespace
{ /* file-local: no clash with the other sources' functors */

static inline uint64_t bitmap_words(uint64_t n)
{
	return (n + 63) / 64;
}

/* Element j of a segment: g[I[j]] (I not NULL), else x[j]; with touched, only the slots
 * marked there (slot lo + j) are elements at all. */
struct hb_src {
	const uint32_t *I;
	const float *x;
	const u64 *touched;
	uint64_t lo, n;
	/* the marks of the segment's word w (all of its elements without touched) */
	SCG_HD u64 marks(uint64_t w) const
	{
		uint64_t base = w * 64, end = n - base < 64 ? n - base : 64;
		u64 m = end == 64 ? ~0ull : (1ull << end) - 1;
		if (!touched)
			return m;
		uint64_t s0 = lo + base, tw = s0 >> 6, sh = s0 & 63;
		u64 t = touched[tw] >> sh;
		if (sh && ((s0 + end - 1) >> 6) > tw)
			t |= touched[tw + 1] << (64 - sh);
		return t & m;
	}
	SCG_HD float value(uint64_t j) const
	{
		return I ? x[I[j]] : x[j];
	}
};

/* Word w of the bitmap: the marked elements that are non-zero. */
struct hb_words {
	hb_src s;
	u64 *words;
	SCG_HD void operator()(uint64_t w) const
	{
		u64 bits = 0;
		for (u64 m = s.marks(w); m; m &= m - 1) {
#if defined(__CUDA_ARCH__)
			int b = __ffsll((long long)m) - 1;
#else
			int b = __builtin_ctzll(m);
#endif
			if (s.value(w * 64 + (uint64_t)b) != 0.0f)
				bits |= 1ull << b;
		}
		words[w] = bits;
	}
};

struct bit_set {
	const u64 *words;
	SCG_HD bool operator()(uint64_t j) const
	{
		return (words[j >> 6] >> (j & 63)) & 1;
	}
};

/* vals[k] = the k-th set element's value, as bits (every non-zero, NaN included, travels
 * unchanged). */
struct put_val {
	hb_src s;
	float *vals;
	SCG_HD void operator()(uint64_t k, uint64_t j) const
	{
		float v = s.value(j);
		uint32_t b;
		memcpy(&b, &v, 4);
		memcpy(&vals[k], &b, 4);
	}
};

/* local[j] = 0 at the marked slots of the segment's word w. */
struct clear_marked {
	hb_src s;
	float *local;
	SCG_HD void operator()(uint64_t w) const
	{
		for (u64 m = s.marks(w); m; m &= m - 1) {
#if defined(__CUDA_ARCH__)
			int b = __ffsll((long long)m) - 1;
#else
			int b = __builtin_ctzll(m);
#endif
			local[w * 64 + (uint64_t)b] = 0.0f;
		}
	}
};

/* Clears the bits of slots [lo, hi) in touched word tw (a neighbour's bits kept). */
struct clear_touched {
	u64 *touched;
	uint64_t lo, hi;
	SCG_HD void operator()(uint64_t tw) const
	{
		uint64_t base = tw * 64;
		u64 mask = ~0ull;
		if (base < lo)
			mask <<= lo - base;
		if (hi - base < 64)
			mask &= (1ull << (hi - base)) - 1;
		cuda::atomic_ref<u64, cuda::thread_scope_device>(touched[tw])
		    .fetch_and(~mask, cuda::std::memory_order_relaxed);
	}
};

/* The hash bitmap of s into buf; with s.touched, the marked slots are then cleared in
 * local and in touched. */
static sc_status_t hb_encode(const hb_src &s, float *local, u64 *touched, void *buf,
			     uint64_t cap_bytes, uint64_t *bytes_host, const char *what)
{
	uint64_t n = s.n, nwords = bitmap_words(n);
	if (8 * nwords + 4 * n > cap_bytes)
		return scg_fail(SC_ERR_LIMIT, "%s: %llu bytes for %llu elements", what,
				(unsigned long long)cap_bytes, (unsigned long long)n);
	u64 *words = (u64 *)buf;
	float *vals = (float *)(words + nwords);
	uint64_t nnz = 0;
	if (n) {
		thrust::counting_iterator<uint64_t> zero(0);
		auto out = thrust::make_tabulate_output_iterator(put_val{s, vals});
		SCG_TRY(what, {
			thrust::for_each(SCG_POLICY, zero, zero + nwords, hb_words{s, words});
			nnz = (uint64_t)(thrust::copy_if(SCG_POLICY, zero, zero + n, zero, out,
							 bit_set{words}) -
					 out);
			if (touched) {
				uint64_t lo = s.lo, hi = s.lo + n;
				thrust::for_each(SCG_POLICY, zero, zero + nwords,
						 clear_marked{s, local});
				thrust::for_each(SCG_POLICY, zero + lo / 64,
						 zero + (hi + 63) / 64,
						 clear_touched{touched, lo, hi});
			}
		});
	}
	sc_status_t st = SCG_CHECK(what);
	if (st != SC_OK)
		return st;
	*bytes_host = 8 * nwords + 4 * nnz;
	return SC_OK;
}

} // namespace

extern "C" sc_status_t scg_hash_bitmap_encode(const uint32_t *I, uint64_t n, const float *g,
					      void *buf, uint64_t cap_bytes,
					      uint64_t *bytes_host)
{
	hb_src s = {I, g, NULL, 0, n};
	return hb_encode(s, NULL, NULL, buf, cap_bytes, bytes_host, "scg_hash_bitmap_encode");
}

extern "C" sc_status_t scg_hash_bitmap_encode_local(float *local, uint64_t *touched,
						    uint64_t lo, uint64_t hi, void *buf,
						    uint64_t cap_bytes, uint64_t *bytes_host)
{
	const char *what = "scg_hash_bitmap_encode_local";
	if (hi < lo)
		return scg_fail(SC_ERR_INVALID, "%s: slots [%llu, %llu)", what,
				(unsigned long long)lo, (unsigned long long)hi);
	hb_src s = {NULL, local, (const u64 *)touched, lo, hi - lo};
	return hb_encode(s, local, (u64 *)touched, buf, cap_bytes, bytes_host, what);
}

namespace
{ /* file-local: no clash with the other sources' functors */

struct popc {
	SCG_HD uint64_t operator()(u64 w) const
	{
#if defined(__CUDA_ARCH__)
		return (uint64_t)__popcll(w);
#else
		return (uint64_t)__builtin_popcountll(w);
#endif
	}
};

/* Checks a bitmap over n positions as the cpu's bitmap_check: length, no bit past n. */
static sc_status_t hb_check(const void *buf, uint64_t bytes, uint64_t n, uint64_t *nnz_p,
			    const char *what)
{
	uint64_t nwords = bitmap_words(n);
	if (bytes < 8 * nwords)
		return scg_fail(SC_ERR_PROTOCOL, "%s: %llu bytes", what,
				(unsigned long long)bytes);
	const u64 *words = (const u64 *)buf;
	if (n % 64 && nwords) {
		u64 last;
		sc_status_t st = scg_to_host(&last, words + nwords - 1, 8);
		if (st != SC_OK)
			return st;
		if (last >> (n % 64))
			return scg_fail(SC_ERR_PROTOCOL, "%s: bit past the segment", what);
	}
	uint64_t nnz = 0;
	if (nwords)
		SCG_TRY(what, nnz = thrust::transform_reduce(SCG_POLICY, words, words + nwords,
							     popc{}, (uint64_t)0,
							     thrust::plus<uint64_t>()));
	if (bytes != 8 * nwords + 4 * nnz)
		return scg_fail(SC_ERR_PROTOCOL, "%s: %llu bytes for %llu values", what,
				(unsigned long long)bytes, (unsigned long long)nnz);
	*nnz_p = nnz;
	return SC_OK;
}

/* dst[I[j]] = vals[k] for the k-th set bit j. */
struct scatter_val {
	const uint32_t *vals;
	uint32_t *dst;
	SCG_HD void operator()(uint64_t k, uint32_t idx) const
	{
		dst[idx] = vals[k];
	}
};

} // namespace

extern "C" sc_status_t scg_hash_bitmap_decode(const uint32_t *I, uint64_t n, const void *buf,
					      uint64_t bytes, scg_coo_t *out_host)
{
	const char *what = "scg_hash_bitmap_decode";
	uint64_t nnz = 0;
	sc_status_t st = hb_check(buf, bytes, n, &nnz, what);
	if (st != SC_OK)
		return st;
	if (nnz > out_host->cap)
		return scg_fail(SC_ERR_LIMIT, "%s: %llu values, room for %llu", what,
				(unsigned long long)nnz, (unsigned long long)out_host->cap);
	const u64 *words = (const u64 *)buf;
	const uint32_t *vals = (const uint32_t *)(words + bitmap_words(n));
	uint32_t *oi = out_host->idx;
	if (nnz) {
		thrust::counting_iterator<uint64_t> zero(0);
		SCG_TRY(what, {
			thrust::copy_if(SCG_POLICY, thrust::make_permutation_iterator(I, zero),
					thrust::make_permutation_iterator(I, zero + n), zero,
					oi, bit_set{words});
			thrust::copy(SCG_POLICY, vals, vals + nnz, (uint32_t *)out_host->val);
		});
	}
	if ((st = SCG_CHECK(what)) != SC_OK)
		return st;
	out_host->nnz = nnz;
	return SC_OK;
}

extern "C" sc_status_t scg_hash_bitmap_decode_dense(const uint32_t *I, uint64_t n,
						    const void *buf, uint64_t bytes, float *dst)
{
	const char *what = "scg_hash_bitmap_decode_dense";
	uint64_t nnz = 0;
	sc_status_t st = hb_check(buf, bytes, n, &nnz, what);
	if (st != SC_OK)
		return st;
	const u64 *words = (const u64 *)buf;
	const uint32_t *vals = (const uint32_t *)(words + bitmap_words(n));
	if (nnz) {
		thrust::counting_iterator<uint64_t> zero(0);
		SCG_TRY(what,
			thrust::copy_if(SCG_POLICY, thrust::make_permutation_iterator(I, zero),
					thrust::make_permutation_iterator(I, zero + n), zero,
					thrust::make_tabulate_output_iterator(
					    scatter_val{vals, (uint32_t *)dst}),
					bit_set{words}));
	}
	return SCG_CHECK(what);
}

/* ---- non-zero blocks ---------------------------------------------------------------- */

namespace
{ /* file-local: no clash with the other sources' functors */

struct block_nz {
	const float *g;
	uint64_t numel;
	uint32_t block;
	SCG_HD bool operator()(uint64_t b) const
	{
		uint64_t lo = b * block, hi = numel - lo < block ? numel : lo + block;
		for (uint64_t i = lo; i < hi; i++)
			if (g[i] != 0.0f)
				return true;
		return false;
	}
};

/* Record k: block b's id, values, zero padding. */
struct block_rec {
	const uint32_t *g;
	uint32_t *buf;
	uint64_t numel;
	uint32_t block;
	SCG_HD void operator()(uint64_t k, uint64_t b) const
	{
		uint32_t *r = buf + k * (1 + (uint64_t)block);
		uint64_t lo = b * block, len = numel - lo < block ? numel - lo : block;
		r[0] = (uint32_t)b;
		for (uint64_t j = 0; j < len; j++)
			r[1 + j] = g[lo + j];
		for (uint64_t j = len; j < block; j++)
			r[1 + j] = 0;
	}
};

} // namespace

extern "C" sc_status_t scg_blocks_encode_dense(const float *g, uint64_t numel, uint32_t block,
					       void *buf, uint64_t cap_bytes,
					       uint64_t *bytes_host)
{
	const char *what = "scg_blocks_encode_dense";
	if (block == 0)
		return scg_fail(SC_ERR_INVALID, "%s: block 0", what);
	uint64_t rec = 4 + 4 * (uint64_t)block, nb = (numel + block - 1) / block, nz = 0;
	thrust::counting_iterator<uint64_t> zero(0);
	block_nz pred = {g, numel, block};
	SCG_TRY(what, nz = thrust::count_if(SCG_POLICY, zero, zero + nb, pred));
	if (nz * rec > cap_bytes)
		return scg_fail(SC_ERR_LIMIT, "%s: %llu blocks", what, (unsigned long long)nz);
	SCG_TRY(what, thrust::copy_if(SCG_POLICY, zero, zero + nb,
				      thrust::make_tabulate_output_iterator(block_rec{
					  (const uint32_t *)g, (uint32_t *)buf, numel, block}),
				      pred));
	sc_status_t st = SCG_CHECK(what);
	if (st != SC_OK)
		return st;
	*bytes_host = nz * rec;
	return SC_OK;
}
