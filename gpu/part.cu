/*
 * part.cu: ZEN's partition lists on the GPU device (scg.h, section part.cu): the cached
 * per-partition index lists I_p (daemon/device/partition.c), the stable split of a COO
 * list by partition, a partition's dense aggregation (scatter_add_part) and the COO
 * format (daemon/device/format.c).
 *
 * Both splits (the lists I_p of [0, numel), and a COO list by partition) are one counting
 * sort by h0 (scg_hash.cuh, the cpu's hash): the input is cut into C chunks of S
 * consecutive elements; one thread per chunk counts its elements per partition into a
 * P x C matrix (partition-major), an exclusive scan of the matrix gives each (partition,
 * chunk) its first output position, and the same threads then place their elements in
 * input order from there. Chunks are ordered within a partition and each chunk keeps its
 * order, so the split is stable: each I_p comes out ascending, and a COO list's
 * partitions keep its order, exactly as the cpu's sequential passes place them. C is
 * chosen so the matrix stays a fraction of the input (in Thrust's temporary memory).
 *
 * The partition map is a host structure, as the cpu's: offset (nparts + 1) is host
 * memory, list and pos device arrays. Maps are cached by (numel, nparts, seed) with a
 * reference count under one mutex (built under it: a second caller waits instead of
 * building twice) and freed at the last release. The build ends with a sync, so any
 * thread's stream may use the map.
 *
 * scatter_add_part: one thread per pair; the pairs of one call have unique indices (an
 * ascending list), so their slots are distinct and each slot sees one IEEE addition, the
 * cpu's, so the sums are the cpu's bit for bit (subnormals included: the addition is a
 * compare-and-swap on the bits, not atom.add.f32, which flushes them on global memory).
 * Being atomic, a malformed push (an index of another partition whose slot collides)
 * loses nothing, in an unspecified order. touched's bits are set by atomic OR on its
 * 64-bit words.
 */
#include "scg_hash.cuh"

#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/memory.h>
#include <thrust/scan.h>

#include <cstdlib>
#include <cstring>
#include <pthread.h>

typedef unsigned long long u64;

namespace
{ /* file-local: no clash with the other sources' functors */

/* Device memory from Thrust's temporary allocator, returned when it goes out of scope. */
template <class T> struct temp_buf {
	typedef decltype(thrust::get_temporary_buffer<T>(SCG_POLICY, 0)) got_t;
	got_t got;
	T *p = nullptr;
	sc_status_t get(std::ptrdiff_t count, const char *what)
	{
		try {
			got = thrust::get_temporary_buffer<T>(SCG_POLICY, count);
			p = thrust::raw_pointer_cast(got.first);
		} catch (const std::exception &ex_) {
			p = nullptr;
			return scg_fail(SC_ERR_NOMEM, "%s: %s", what, ex_.what());
		}
		if (!p || got.second < count)
			return scg_fail(SC_ERR_NOMEM, "%s: no temporary memory for %lld", what,
					(long long)count);
		return SC_OK;
	}
	~temp_buf()
	{
		if (!p)
			return;
		try {
			thrust::return_temporary_buffer(SCG_POLICY, got.first, got.second);
		} catch (...) {
		}
	}
};

/* A stable split of n elements by partition: element e's key is idx[e] (idx NULL: e);
 * chunk c holds the elements [c * S, min(n, (c + 1) * S)). cnt is the P x C matrix,
 * cnt[p * C + c]. */
struct split_geom {
	const uint32_t *idx;
	uint64_t n, S, C, pseed;
	uint32_t P;
	u64 *cnt;
	SCG_HD uint32_t key(uint64_t e) const
	{
		return idx ? idx[e] : (uint32_t)e;
	}
	SCG_HD uint32_t part(uint64_t e) const
	{
		return scg_partition_of(pseed, P, key(e));
	}
	SCG_HD uint64_t end(uint64_t c) const
	{
		return n - c * S < S ? n : (c + 1) * S;
	}
};

struct split_count {
	split_geom g;
	SCG_HD void operator()(uint64_t c) const
	{
		for (uint64_t e = c * g.S, end = g.end(c); e < end; e++)
			g.cnt[(uint64_t)g.part(e) * g.C + c]++;
	}
};

/* offs[p]: partition p's first position (the scanned matrix's column 0), offs[P] = n */
struct split_offsets {
	split_geom g;
	u64 *offs;
	SCG_HD void operator()(uint64_t p) const
	{
		offs[p] = p < g.P ? g.cnt[p * g.C] : g.n;
	}
};

/* The lists I_p: list[k] = e, pos[e] = its slot in its partition's list. */
struct place_list {
	split_geom g;
	const u64 *offs;
	uint32_t *list, *pos;
	SCG_HD void operator()(uint64_t c) const
	{
		for (uint64_t e = c * g.S, end = g.end(c); e < end; e++) {
			uint32_t p = g.part(e);
			u64 k = g.cnt[(uint64_t)p * g.C + c]++;
			list[k] = (uint32_t)e;
			pos[e] = (uint32_t)(k - offs[p]);
		}
	}
};

/* A COO list's pairs, values copied as bits. */
struct place_coo {
	split_geom g;
	const uint32_t *val;
	uint32_t *oi, *ov;
	SCG_HD void operator()(uint64_t c) const
	{
		for (uint64_t e = c * g.S, end = g.end(c); e < end; e++) {
			u64 k = g.cnt[(uint64_t)g.part(e) * g.C + c]++;
			oi[k] = g.idx[e];
			ov[k] = val[e];
		}
	}
};

/* Chunks for n elements over P partitions: at least 32 elements each, and a matrix of at
 * most max(budget, 4096) entries. */
static void split_shape(split_geom *g, uint64_t budget)
{
	uint64_t cap = budget < 4096 ? 4096 : budget, by_mem = cap / g->P,
		 by_len = (g->n + 31) / 32;
	uint64_t C = by_mem < by_len ? by_mem : by_len;
	if (C == 0)
		C = 1;
	g->S = (g->n + C - 1) / C;
	g->C = (g->n + g->S - 1) / g->S;
}

/* Counts, scans and fills offs[P + 1] (device); the matrix is left as the cursors. */
static sc_status_t split_prepare(const split_geom &g, u64 *offs, const char *what)
{
	uint64_t m = (uint64_t)g.P * g.C;
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what, {
		thrust::fill(SCG_POLICY, g.cnt, g.cnt + m, (u64)0);
		thrust::for_each(SCG_POLICY, zero, zero + g.C, split_count{g});
		thrust::exclusive_scan(SCG_POLICY, g.cnt, g.cnt + m, g.cnt);
		thrust::for_each(SCG_POLICY, zero, zero + g.P + 1, split_offsets{g, offs});
	});
	return SCG_CHECK(what);
}

} // namespace

/* ---- the partition map cache ---------------------------------------------------------- */

namespace
{

struct entry {
	scg_partmap_t map;
	int refs;
	entry *next;
};

pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
entry *cache;
uint64_t builds;

void entry_free(entry *e)
{
	free(e->map.offset);
	if (e->map.list)
		scg_free(e->map.list);
	if (e->map.pos)
		scg_free(e->map.pos);
	free(e);
}

sc_status_t build(entry *e, uint64_t numel, uint32_t nparts, uint64_t seed)
{
	const char *what = "scg_partmap_acquire";
	scg_partmap_t *m = &e->map;
	m->numel = numel;
	m->seed = seed;
	m->fn.seed = scg_partition_seed(seed);
	m->fn.nparts = nparts;
	m->offset = (uint64_t *)calloc((size_t)nparts + 1, sizeof(uint64_t));
	if (!m->offset)
		return scg_fail(SC_ERR_NOMEM, "%s: out of host memory", what);
	sc_status_t st;
	if ((st = scg_alloc((numel ? numel : 1) * 4, (void **)&m->list)) != SC_OK ||
	    (st = scg_alloc((numel ? numel : 1) * 4, (void **)&m->pos)) != SC_OK)
		return st;
	if (numel == 0)
		return SC_OK;
	split_geom g = {NULL, numel, 0, 0, m->fn.seed, nparts, NULL};
	split_shape(&g, numel / 32); /* at most 2 bits per element */
	temp_buf<u64> cnt, offs;
	if ((st = cnt.get((std::ptrdiff_t)(g.P * g.C), what)) != SC_OK ||
	    (st = offs.get((std::ptrdiff_t)nparts + 1, what)) != SC_OK)
		return st;
	g.cnt = cnt.p;
	if ((st = split_prepare(g, offs.p, what)) != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, zero, zero + g.C,
				       place_list{g, offs.p, m->list, m->pos}));
	if ((st = SCG_CHECK(what)) != SC_OK ||
	    (st = scg_to_host(m->offset, offs.p, ((size_t)nparts + 1) * 8)) != SC_OK)
		return st;
	return scg_sync(); /* any thread's stream may use the lists now */
}

} // namespace

extern "C" sc_status_t scg_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
					   const scg_partmap_t **map_host)
{
	if (numel > SCG_NUMEL_MAX || nparts == 0 || !map_host)
		return scg_fail(SC_ERR_INVALID,
				"scg_partmap_acquire: numel %llu, %u partitions",
				(unsigned long long)numel, nparts);
	pthread_mutex_lock(&cache_lock);
	for (entry *e = cache; e; e = e->next)
		if (e->map.numel == numel && e->map.fn.nparts == nparts &&
		    e->map.seed == seed) {
			e->refs++;
			*map_host = &e->map;
			pthread_mutex_unlock(&cache_lock);
			return SC_OK;
		}
	entry *e = (entry *)calloc(1, sizeof(*e));
	sc_status_t st = e ? build(e, numel, nparts, seed)
			   : scg_fail(SC_ERR_NOMEM, "scg_partmap_acquire: out of host memory");
	if (st != SC_OK) {
		if (e)
			entry_free(e);
		pthread_mutex_unlock(&cache_lock);
		return st;
	}
	e->refs = 1;
	e->next = cache;
	cache = e;
	builds++;
	*map_host = &e->map;
	pthread_mutex_unlock(&cache_lock);
	return SC_OK;
}

extern "C" void scg_partmap_release(const scg_partmap_t *map_host)
{
	if (!map_host)
		return;
	pthread_mutex_lock(&cache_lock);
	for (entry **pp = &cache; *pp; pp = &(*pp)->next) {
		entry *e = *pp;
		if (&e->map != map_host)
			continue;
		if (--e->refs == 0) {
			*pp = e->next;
			entry_free(e);
		}
		break;
	}
	pthread_mutex_unlock(&cache_lock);
}

extern "C" uint64_t scg_partmap_builds(void)
{
	pthread_mutex_lock(&cache_lock);
	uint64_t b = builds;
	pthread_mutex_unlock(&cache_lock);
	return b;
}

/* ---- partition_coo, scatter_add_part, COO ------------------------------------------- */

extern "C" sc_status_t scg_partition_coo(const scg_partfn_t *fn_host, const scg_coo_t *in_host,
					 scg_coo_t *out_host, uint64_t *offset_host)
{
	const char *what = "scg_partition_coo";
	uint32_t P = fn_host->nparts;
	uint64_t n = in_host->nnz;
	if (P == 0)
		return scg_fail(SC_ERR_INVALID, "%s: no partitions", what);
	if (out_host->cap < n)
		return scg_fail(SC_ERR_LIMIT, "%s: %llu pairs, room for %llu", what,
				(unsigned long long)n, (unsigned long long)out_host->cap);
	if (n == 0) {
		memset(offset_host, 0, ((size_t)P + 1) * 8);
		out_host->nnz = 0;
		return SC_OK;
	}
	split_geom g = {in_host->idx, n, 0, 0, fn_host->seed, P, NULL};
	split_shape(&g, n / 2); /* at most 4 bytes per pair */
	temp_buf<u64> cnt, offs;
	sc_status_t st;
	if ((st = cnt.get((std::ptrdiff_t)(g.P * g.C), what)) != SC_OK ||
	    (st = offs.get((std::ptrdiff_t)P + 1, what)) != SC_OK)
		return st;
	g.cnt = cnt.p;
	if ((st = split_prepare(g, offs.p, what)) != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, zero, zero + g.C,
				       place_coo{g, (const uint32_t *)in_host->val,
						 out_host->idx, (uint32_t *)out_host->val}));
	if ((st = SCG_CHECK(what)) != SC_OK ||
	    (st = scg_to_host(offset_host, offs.p, ((size_t)P + 1) * 8)) != SC_OK)
		return st;
	out_host->nnz = n;
	return SC_OK;
}

namespace
{

/* The slot of pair k in the partition's list, or UINT64_MAX when it has none there. */
struct slot_of {
	const uint32_t *pos, *idx;
	uint64_t numel, slots;
	SCG_HD uint64_t operator()(uint64_t k) const
	{
		uint32_t i = idx[k];
		uint64_t j = i < numel ? pos[i] : UINT64_MAX;
		return j < slots ? j : UINT64_MAX;
	}
};

/* *dst += v as one IEEE addition, by compare-and-swap on the bits: subnormals are kept
 * (atom.add.f32 on global memory flushes them to zero, the cpu does not), and nothing is
 * lost when two pairs meet. */
SCG_HD inline void add_exact(float *dst, float v)
{
	cuda::atomic_ref<uint32_t, cuda::thread_scope_device> a(*(uint32_t *)dst);
	uint32_t old = a.load(cuda::std::memory_order_relaxed), sum;
	do {
		float f;
		memcpy(&f, &old, 4);
		f = f + v;
		memcpy(&sum, &f, 4);
	} while (!a.compare_exchange_weak(old, sum, cuda::std::memory_order_relaxed));
}

struct add_part {
	slot_of s;
	const float *val;
	float *dst;
	u64 *touched;
	SCG_HD void operator()(uint64_t k) const
	{
		uint64_t j = s(k);
		if (j == UINT64_MAX)
			return;
		add_exact(&dst[j], val[k]);
		if (touched)
			cuda::atomic_ref<u64, cuda::thread_scope_device>(touched[j >> 6])
			    .fetch_or(1ull << (j & 63), cuda::std::memory_order_relaxed);
	}
};

struct no_slot {
	slot_of s;
	SCG_HD bool operator()(uint64_t k) const
	{
		return s(k) == UINT64_MAX;
	}
};

} // namespace

extern "C" sc_status_t scg_coo_scatter_add_part(float *dst, uint64_t *touched,
						const uint32_t *pos, uint64_t numel,
						uint64_t slots, const uint32_t *idx,
						const float *val, uint64_t nnz,
						uint64_t *bad_host)
{
	const char *what = "scg_coo_scatter_add_part";
	uint64_t bad = 0;
	if (nnz) {
		slot_of s = {pos, idx, numel, slots};
		thrust::counting_iterator<uint64_t> zero(0);
		SCG_TRY(what, {
			thrust::for_each(SCG_POLICY, zero, zero + nnz,
					 add_part{s, val, dst, (u64 *)touched});
			bad = (uint64_t)thrust::count_if(SCG_POLICY, zero, zero + nnz,
							 no_slot{s});
		});
	}
	sc_status_t st = SCG_CHECK(what);
	if (st == SC_OK)
		*bad_host = bad;
	return st;
}

extern "C" sc_status_t scg_coo_encode(const scg_coo_t *src_host, void *buf, uint64_t cap_bytes,
				      uint64_t *bytes_host)
{
	uint64_t n = src_host->nnz, bytes = 8 * n;
	if (bytes > cap_bytes)
		return scg_fail(SC_ERR_LIMIT, "scg_coo_encode: %llu bytes, room for %llu",
				(unsigned long long)bytes, (unsigned long long)cap_bytes);
	sc_status_t st = SC_OK;
	if (n && ((st = scg_copy(buf, src_host->idx, 4 * n)) != SC_OK ||
		  (st = scg_copy((char *)buf + 4 * n, src_host->val, 4 * n)) != SC_OK))
		return st;
	*bytes_host = bytes;
	return SC_OK;
}

extern "C" sc_status_t scg_coo_decode(const void *buf, uint64_t bytes, scg_coo_t *out_host)
{
	if (bytes % 8)
		return scg_fail(SC_ERR_PROTOCOL, "scg_coo_decode: %llu bytes",
				(unsigned long long)bytes);
	uint64_t n = bytes / 8;
	if (n > out_host->cap)
		return scg_fail(SC_ERR_LIMIT, "scg_coo_decode: %llu pairs, room for %llu",
				(unsigned long long)n, (unsigned long long)out_host->cap);
	sc_status_t st = SC_OK;
	if (n && ((st = scg_copy(out_host->idx, buf, 4 * n)) != SC_OK ||
		  (st = scg_copy(out_host->val, (const char *)buf + 4 * n, 4 * n)) != SC_OK))
		return st;
	out_host->nnz = n;
	return SC_OK;
}
