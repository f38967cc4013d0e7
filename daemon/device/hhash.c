/*
 * hhash.c: hierarchical hashing, ZEN Algorithm 1 (design notes in hhash.h).
 *
 * Hot loop: the scanner finds non-zeros four lanes at a time and queues them in a small
 * per-thread batch; a full batch computes each entry's partition and first slot and
 * prefetches it, then inserts the batch, so the table's cache misses overlap instead of
 * stalling the scan one by one. Inserting is: up to k CAS attempts on parallel slots, then
 * fetch-add on the partition's serial counter, then fetch-add on the spill counter.
 */
#include "device/hhash.h"

#include "device/pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define SLOT_EMPTY  UINT64_MAX /* index part SCD_IDX_NONE: never a valid index */
#define BATCH	    32	       /* ring of queued entries (a power of two) */
#define DIST	    24	       /* prefetch distance, in entries */
#define MAX_THREADS 64

typedef struct {
	_Alignas(64) _Atomic uint64_t n;
} padded_counter_t;

typedef struct {
	uint64_t parallel, serial, spill, probes, overflow;
} thread_stats_t;

struct scd_hh {
	scd_hh_cfg_t cfg;
	scd_partfn_t fn;
	uint64_t seeds[SCD_HH_MAX_K];
	uint64_t r1, r2, stride; /* stride = r1 + r2 slots per partition */
	_Atomic uint64_t *slots;
	padded_counter_t *serial; /* per partition */
	uint64_t *spill;
	padded_counter_t spill_n;
	/* per thread, each on its own cache lines (no false sharing on the hot counters):
	 * thread_stats_t then nparts counts, tstride bytes apart */
	char *tblock;
	size_t tstride;
	uint64_t *cursor; /* [partition] extraction write position */
	scd_pool_t *pool;
	unsigned nthreads;
	/* the job in flight */
	const float *g;
	const scd_coo_t *in;
	uint64_t n;
	scd_coo_t *out;
	uint64_t *offset;
};

scd_hh_cfg_t scd_hh_cfg_default(uint64_t numel, uint32_t nparts, uint64_t nnz_cap,
				uint64_t seed)
{
	return (scd_hh_cfg_t){.numel = numel,
			      .nparts = nparts,
			      .nnz_cap = nnz_cap,
			      .r1_factor = 2.0,
			      .r2_ratio = 0.1,
			      .k = 3,
			      .seed = seed,
			      .threads = 1};
}

static inline uint64_t entry_make(uint32_t idx, float v)
{
	union {
		float f;
		uint32_t u;
	} b = {.f = v};
	return (uint64_t)idx << 32 | b.u;
}

static inline uint32_t entry_idx(uint64_t e)
{
	return (uint32_t)(e >> 32);
}

static inline float entry_val(uint64_t e)
{
	union {
		uint32_t u;
		float f;
	} b = {.u = (uint32_t)e};
	return b.f;
}

static inline thread_stats_t *thread_stats(const scd_hh_t *hh, unsigned tid)
{
	return (thread_stats_t *)(hh->tblock + tid * hh->tstride);
}

static inline uint64_t *thread_counts(const scd_hh_t *hh, unsigned tid)
{
	return (uint64_t *)(hh->tblock + tid * hh->tstride + sizeof(thread_stats_t));
}

/* ---- insertion ----------------------------------------------------------------------- */

typedef struct {
	uint64_t entry[BATCH];
	uint32_t part[BATCH];
	uint32_t head, n;
} batch_t;

/*
 * Places one entry: parallel memory (k claims), serial memory, spill area. With several
 * threads a claim is a compare-and-swap; with one there is no one to race, and a plain
 * load and store do the same without the locked instruction's full fence.
 */
static inline __attribute__((always_inline)) void
insert(scd_hh_t *hh, uint64_t e, uint32_t p, uint64_t *counts, thread_stats_t *ts, int shared)
{
	uint32_t idx = entry_idx(e);
	_Atomic uint64_t *base = hh->slots + (uint64_t)p * hh->stride;
	counts[p]++;
	for (uint32_t i = 0; i < hh->cfg.k; i++) {
		uint64_t q = scd_hash_range(hh->seeds[i], idx, (uint32_t)hh->r1);
		uint64_t expect = SLOT_EMPTY;
		ts->probes++;
		if (atomic_load_explicit(&base[q], memory_order_relaxed) != SLOT_EMPTY)
			continue;
		if (!shared) {
			atomic_store_explicit(&base[q], e, memory_order_relaxed);
			ts->parallel++;
			return;
		}
		if (atomic_compare_exchange_strong_explicit(
			&base[q], &expect, e, memory_order_relaxed, memory_order_relaxed)) {
			ts->parallel++;
			return;
		}
	}
	uint64_t c;
	if (shared) {
		c = atomic_fetch_add_explicit(&hh->serial[p].n, 1, memory_order_relaxed);
	} else {
		c = atomic_load_explicit(&hh->serial[p].n, memory_order_relaxed);
		atomic_store_explicit(&hh->serial[p].n, c + 1, memory_order_relaxed);
	}
	if (c < hh->r2) {
		atomic_store_explicit(&base[hh->r1 + c], e, memory_order_relaxed);
		ts->serial++;
		return;
	}
	uint64_t s = atomic_fetch_add_explicit(&hh->spill_n.n, 1, memory_order_relaxed);
	if (s < hh->cfg.nnz_cap) {
		hh->spill[s] = e;
		ts->spill++;
	} else {
		ts->overflow++;
	}
}

/* Inserts the oldest queued entry (its slot was prefetched DIST entries ago). */
static inline void batch_pop(scd_hh_t *hh, batch_t *b, uint64_t *counts, thread_stats_t *ts)
{
	uint32_t j = b->head++ & (BATCH - 1);
	if (hh->nthreads > 1)
		insert(hh, b->entry[j], b->part[j], counts, ts, 1);
	else
		insert(hh, b->entry[j], b->part[j], counts, ts, 0);
	b->n--;
}

static void batch_flush(scd_hh_t *hh, batch_t *b, uint64_t *counts, thread_stats_t *ts)
{
	while (b->n)
		batch_pop(hh, b, counts, ts);
}

/* Queues an entry and prefetches its first slot; the entry is inserted once DIST newer
 * ones are queued, by when the line has arrived (software pipelining of the misses). */
static inline void batch_add(scd_hh_t *hh, batch_t *b, uint32_t idx, float v, uint64_t *counts,
			     thread_stats_t *ts)
{
	uint32_t p = scd_partition_of(&hh->fn, idx);
	uint64_t q = scd_hash_range(hh->seeds[0], idx, (uint32_t)hh->r1);
	__builtin_prefetch((const void *)(hh->slots + (uint64_t)p * hh->stride + q), 1);
	uint32_t j = (b->head + b->n) & (BATCH - 1);
	b->entry[j] = entry_make(idx, v);
	b->part[j] = p;
	if (++b->n == DIST)
		batch_pop(hh, b, counts, ts);
}

/* Splits [0, n) into nthreads chunks aligned to 16 elements. */
static void chunk(uint64_t n, unsigned tid, unsigned nthreads, uint64_t *lo_p, uint64_t *hi_p)
{
	uint64_t per = (n / nthreads + 15) & ~(uint64_t)15;
	uint64_t lo = per * tid, hi = lo + per;
	*lo_p = lo < n ? lo : n;
	*hi_p = hi < n && tid + 1 < nthreads ? hi : n;
}

static void scan_dense(scd_hh_t *hh, const float *g, uint64_t lo, uint64_t hi, batch_t *b,
		       uint64_t *counts, thread_stats_t *ts)
{
	uint64_t i = lo;
#ifdef __SSE2__
	for (; i < hi && ((uintptr_t)(g + i) & 15); i++)
		if (g[i] != 0.0f)
			batch_add(hh, b, (uint32_t)i, g[i], counts, ts);
	const __m128 zero = _mm_setzero_ps();
	for (; i + 8 <= hi; i += 8) {
		__m128 a0 = _mm_load_ps(g + i), a1 = _mm_load_ps(g + i + 4);
		int bits = _mm_movemask_ps(_mm_cmpneq_ps(a0, zero)) |
			   _mm_movemask_ps(_mm_cmpneq_ps(a1, zero)) << 4;
		while (__builtin_expect(bits != 0, 0)) {
			int j = __builtin_ctz((unsigned)bits);
			bits &= bits - 1;
			batch_add(hh, b, (uint32_t)(i + j), g[i + j], counts, ts);
		}
	}
#endif
	for (; i < hi; i++)
		if (g[i] != 0.0f)
			batch_add(hh, b, (uint32_t)i, g[i], counts, ts);
}

static void hash_job(void *arg, unsigned tid, unsigned nthreads)
{
	scd_hh_t *hh = arg;
	thread_stats_t *ts = thread_stats(hh, tid);
	uint64_t *counts = thread_counts(hh, tid);
	memset(counts, 0, hh->fn.nparts * sizeof(uint64_t));
	memset(ts, 0, sizeof(*ts));
	batch_t b;
	b.n = b.head = 0;
	uint64_t lo, hi;
	chunk(hh->n, tid, nthreads, &lo, &hi);
	if (hh->g) {
		scan_dense(hh, hh->g, lo, hi, &b, counts, ts);
	} else {
		for (uint64_t i = lo; i < hi; i++)
			batch_add(hh, &b, hh->in->idx[i], hh->in->val[i], counts, ts);
	}
	batch_flush(hh, &b, counts, ts);
}

/* ---- extraction ---------------------------------------------------------------------- */

/* Moves partition p's table entries to the output and empties them. */
static uint64_t extract_partition(scd_hh_t *hh, uint32_t p, scd_coo_t *out, uint64_t w)
{
	_Atomic uint64_t *base = hh->slots + (uint64_t)p * hh->stride;
	uint64_t ns = atomic_load_explicit(&hh->serial[p].n, memory_order_relaxed);
	uint64_t end = hh->r1 + (ns < hh->r2 ? ns : hh->r2);
	for (uint64_t q = 0; q < end; q++) {
		uint64_t e = atomic_load_explicit(&base[q], memory_order_relaxed);
		if (e == SLOT_EMPTY)
			continue;
		atomic_store_explicit(&base[q], SLOT_EMPTY, memory_order_relaxed);
		if (w < out->cap) {
			out->idx[w] = entry_idx(e);
			out->val[w] = entry_val(e);
		}
		w++;
	}
	atomic_store_explicit(&hh->serial[p].n, 0, memory_order_relaxed);
	return w;
}

static void extract_job(void *arg, unsigned tid, unsigned nthreads)
{
	scd_hh_t *hh = arg;
	for (uint32_t p = tid; p < hh->fn.nparts; p += nthreads)
		hh->cursor[p] = extract_partition(hh, p, hh->out, hh->offset[p]);
}

/* Appends the spill area to its partitions (serially; it is empty but for adversarial
 * inputs) and resets it. */
static void extract_spill(scd_hh_t *hh)
{
	uint64_t ns = atomic_load_explicit(&hh->spill_n.n, memory_order_relaxed);
	if (ns > hh->cfg.nnz_cap)
		ns = hh->cfg.nnz_cap;
	for (uint64_t s = 0; s < ns; s++) {
		uint64_t e = hh->spill[s];
		uint32_t p = scd_partition_of(&hh->fn, entry_idx(e));
		uint64_t w = hh->cursor[p]++;
		if (w < hh->out->cap) {
			hh->out->idx[w] = entry_idx(e);
			hh->out->val[w] = entry_val(e);
		}
	}
	atomic_store_explicit(&hh->spill_n.n, 0, memory_order_relaxed);
}

/* Sums per-thread counts into offsets and stats; returns the total inserted. */
static uint64_t gather_counts(scd_hh_t *hh, uint64_t *offset, scd_hh_stats_t *st)
{
	uint32_t P = hh->fn.nparts;
	memset(st, 0, sizeof(*st));
	offset[0] = 0;
	for (uint32_t p = 0; p < P; p++) {
		uint64_t c = 0;
		for (unsigned t = 0; t < hh->nthreads; t++)
			c += thread_counts(hh, t)[p];
		offset[p + 1] = offset[p] + c;
		if (c > st->max_part)
			st->max_part = c;
	}
	uint64_t overflow = 0;
	for (unsigned t = 0; t < hh->nthreads; t++) {
		const thread_stats_t *ts = thread_stats(hh, t);
		st->parallel += ts->parallel;
		st->serial += ts->serial;
		st->spill += ts->spill;
		st->probes += ts->probes;
		overflow += ts->overflow;
	}
	st->nnz = offset[P];
	st->imbalance = st->nnz ? (double)st->max_part * P / (double)st->nnz : 1.0;
	return overflow;
}

static sc_status_t push(scd_hh_t *hh, scd_coo_t *out, uint64_t *offset, scd_hh_stats_t *stats_p)
{
	scd_hh_stats_t st;
	hh->out = out;
	hh->offset = offset;
	scd_pool_run(hh->pool, hash_job, hh);
	uint64_t overflow = gather_counts(hh, offset, &st);
	scd_pool_run(hh->pool, extract_job, hh); /* also empties the table */
	extract_spill(hh);
	hh->g = NULL;
	hh->in = NULL;
	if (overflow || st.nnz > out->cap) {
		out->nnz = 0;
		return SC_ERR_LIMIT;
	}
	out->nnz = st.nnz;
	if (stats_p)
		*stats_p = st;
	return SC_OK;
}

sc_status_t scd_hh_push_dense(scd_hh_t *hh, const float *g, uint64_t numel, scd_coo_t *out,
			      uint64_t *offset, scd_hh_stats_t *stats_p)
{
	if (!hh || !g || !out || !offset || numel > hh->cfg.numel)
		return SC_ERR_INVALID;
	hh->g = g;
	hh->in = NULL;
	hh->n = numel;
	return push(hh, out, offset, stats_p);
}

sc_status_t scd_hh_push_coo(scd_hh_t *hh, const scd_coo_t *in, scd_coo_t *out, uint64_t *offset,
			    scd_hh_stats_t *stats_p)
{
	if (!hh || !in || !out || !offset)
		return SC_ERR_INVALID;
	if (in->nnz > hh->cfg.nnz_cap || in->nnz > out->cap)
		return SC_ERR_LIMIT;
	for (uint64_t i = 0; i < in->nnz; i++)
		if (in->idx[i] >= hh->cfg.numel)
			return SC_ERR_INVALID;
	hh->g = NULL;
	hh->in = in;
	hh->n = in->nnz;
	return push(hh, out, offset, stats_p);
}

/* ---- lifetime ------------------------------------------------------------------------ */

/* The table is hit at random: back it with huge pages where the kernel allows, or every
 * probe also misses the TLB (a nested page walk on a VM). */
static void *table_alloc(size_t bytes)
{
	const size_t huge = 2u << 20;
	void *p = NULL;
	size_t len = (bytes + huge - 1) & ~(huge - 1);
	if (posix_memalign(&p, huge, len))
		return NULL;
	(void)madvise(p, len, MADV_HUGEPAGE); /* advisory: fine if refused */
	return p;
}

sc_status_t scd_hh_create(const scd_hh_cfg_t *cfg, scd_hh_t **hh_p)
{
	if (!cfg || !hh_p || cfg->nparts == 0 || cfg->numel > SCD_NUMEL_MAX || cfg->k == 0 ||
	    cfg->k > SCD_HH_MAX_K || !(cfg->r1_factor > 0) || !(cfg->r2_ratio >= 0) ||
	    cfg->threads > MAX_THREADS)
		return SC_ERR_INVALID;
	scd_hh_t *hh = calloc(1, sizeof(*hh));
	if (!hh)
		return SC_ERR_NOMEM;
	hh->cfg = *cfg;
	hh->nthreads = cfg->threads ? cfg->threads : 1;
	hh->fn = scd_partfn_make(cfg->nparts, cfg->seed);
	for (uint32_t i = 0; i < SCD_HH_MAX_K; i++)
		hh->seeds[i] = scd_seed_derive(cfg->seed, 1000 + i); /* independent of h0's */
	uint64_t expect = cfg->nnz_expected ? cfg->nnz_expected : cfg->nnz_cap;
	double r1 = ceil(cfg->r1_factor * (double)expect / cfg->nparts);
	hh->r1 = r1 < 1 ? 1 : r1 > (double)UINT32_MAX ? UINT32_MAX : (uint64_t)r1;
	hh->r2 = (uint64_t)ceil(cfg->r2_ratio * (double)hh->r1);
	hh->stride = hh->r1 + hh->r2;
	uint64_t nslots = hh->stride * cfg->nparts;
	hh->slots = table_alloc(nslots * sizeof(uint64_t));
	hh->serial = aligned_alloc(64, cfg->nparts * sizeof(padded_counter_t));
	hh->spill = malloc((cfg->nnz_cap ? cfg->nnz_cap : 1) * sizeof(uint64_t));
	hh->tstride =
	    (sizeof(thread_stats_t) + cfg->nparts * sizeof(uint64_t) + 63) & ~(size_t)63;
	hh->tblock = aligned_alloc(64, hh->tstride * hh->nthreads);
	hh->cursor = calloc(cfg->nparts, sizeof(uint64_t));
	if (!hh->slots || !hh->serial || !hh->spill || !hh->tblock || !hh->cursor) {
		scd_hh_destroy(hh);
		return SC_ERR_NOMEM;
	}
	memset((void *)hh->slots, 0xff, nslots * sizeof(uint64_t)); /* all SLOT_EMPTY */
	memset(hh->tblock, 0, hh->tstride * hh->nthreads);
	memset(hh->spill, 0, (cfg->nnz_cap ? cfg->nnz_cap : 1) * sizeof(uint64_t));
	for (uint32_t p = 0; p < cfg->nparts; p++)
		atomic_init(&hh->serial[p].n, 0);
	atomic_init(&hh->spill_n.n, 0);
	sc_status_t st = scd_pool_create(hh->nthreads, &hh->pool);
	if (st != SC_OK) {
		scd_hh_destroy(hh);
		return st;
	}
	*hh_p = hh;
	return SC_OK;
}

void scd_hh_destroy(scd_hh_t *hh)
{
	if (!hh)
		return;
	scd_pool_destroy(hh->pool);
	free((void *)hh->slots);
	free(hh->serial);
	free(hh->spill);
	free(hh->tblock);
	free(hh->cursor);
	free(hh);
}

const scd_partfn_t *scd_hh_partfn(const scd_hh_t *hh)
{
	return &hh->fn;
}

void scd_hh_geometry(const scd_hh_t *hh, uint64_t *r1_p, uint64_t *r2_p)
{
	*r1_p = hh->r1;
	*r2_p = hh->r2;
}
