/*
 * select.c: threshold, exact top-k, DGC-sampled and natural sparsifiers with error
 * feedback (design notes in select.h).
 *
 * Everything funnels into one selection kernel, sel_range(), instantiated in three modes:
 *   FUSED    acc = in + res; res = selected ? 0 : acc   (one pass: error feedback + select)
 *   INPLACE  acc = res;      res[i] = 0 where selected  (acc already in the residual)
 *   READONLY acc = in;       nothing written            (no error feedback)
 * It works on the magnitude key (the float's bits without the sign) with 32-bit integer
 * compares, four lanes at a time (SSE2); only lanes that qualify take the scalar slow path,
 * so at low density the kernel runs at memory speed.
 *
 * Top-k is a most-significant-digit radix select on the same key: 1024-bucket histogram of
 * key >> 21 (fused with the error-feedback pass), then 11-bit digits over the boundary
 * bucket only, first over the full tensor if the bucket is too big for the candidate
 * buffer, else over a copy of the bucket's keys. The result is the exact k-th key T and a
 * quota of ties at T, applied in index order by the final pass. Selections among a
 * sample's or the bracket's candidate keys use the shared radix select (device/kth.h).
 */
#include "device/select.h"

#include "device/kth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define HIST_TOP_SHIFT 21 /* first digit: key bits 30..21 (1024 buckets) */
#define HIST_DIGIT     11 /* later digits: 11 bits */
#define HIST_COPIES    4  /* interleaved histograms, against store-to-load stalls */
#define DGC_MAX_FIXES  3
#define DGC_LO	       0.7
#define DGC_HI	       1.3

enum { MODE_FUSED, MODE_INPLACE, MODE_READONLY };

struct scd_sparsifier {
	scd_sparsifier_cfg_t cfg;
	uint64_t k;
	uint64_t step;
	uint32_t *cand; /* topk: boundary-bucket keys; dgc: sample keys */
	uint64_t cand_cap;
	/* topk fast path: bracket candidates (index, key, value) and the chunk sample */
	uint32_t *br_idx, *br_key;
	float *br_val;
	uint32_t *sample;
	uint32_t hist[HIST_COPIES][1u << HIST_DIGIT];
	/* block_topk: per block its squared norm, the select's scratch, whether selected */
	float *bnorm;
	uint32_t *border;
	uint8_t *bsel;
};

static const char *const kind_names[SCD_SPARSIFY_COUNT] = {
    [SCD_SPARSIFY_THRESHOLD] = "threshold",
    [SCD_SPARSIFY_TOPK] = "topk",
    [SCD_SPARSIFY_DGC] = "dgc",
    [SCD_SPARSIFY_NATURAL] = "natural",
    [SCD_SPARSIFY_BLOCK_TOPK] = "block_topk",
};

const char *scd_sparsify_kind_name(scd_sparsify_kind_t kind)
{
	return (unsigned)kind < SCD_SPARSIFY_COUNT ? kind_names[kind] : "unknown";
}

int scd_sparsify_kind_parse(const char *name, scd_sparsify_kind_t *kind_p)
{
	for (int i = 0; i < SCD_SPARSIFY_COUNT; i++)
		if (!strcmp(name, kind_names[i])) {
			*kind_p = (scd_sparsify_kind_t)i;
			return 0;
		}
	return -1;
}

uint64_t scd_density_to_k(double density, uint64_t numel)
{
	if (!(density > 0))
		return numel ? 1 : 0;
	double k = floor(density * (double)numel + 0.5);
	if (k < 1)
		k = 1;
	return k > (double)numel ? numel : (uint64_t)k;
}

/* ---- the selection kernel ------------------------------------------------------------ */

/* Selection state threaded through the slow path. */
typedef struct {
	scd_coo_t *out;
	uint32_t tkey;	/* select key >= tkey (tkey >= 1) */
	uint64_t quota; /* how many keys == tkey may still be taken (UINT64_MAX: all) */
	uint64_t qualified;
} sel_t;

/* Handles one qualifying element; returns 1 when it was taken (goes out, not residual). */
static inline int sel_take(sel_t *s, uint64_t i, float a, uint32_t key)
{
	if (key == s->tkey && s->quota != UINT64_MAX) {
		if (s->quota == 0)
			return 0;
		s->quota--;
	}
	s->qualified++;
	scd_coo_t *o = s->out;
	if (o->nnz == o->cap)
		return 0;
	o->idx[o->nnz] = (uint32_t)i;
	o->val[o->nnz] = a;
	o->nnz++;
	return 1;
}

/* Scalar kernel for the head/tail of a range (and the whole range without SSE2). */
static inline __attribute__((always_inline)) void
sel_scalar(const float *in, float *res, int mode, uint64_t lo, uint64_t hi, sel_t *s)
{
	for (uint64_t i = lo; i < hi; i++) {
		float a = mode == MODE_FUSED	 ? in[i] + res[i]
			  : mode == MODE_INPLACE ? res[i]
						 : in[i];
		uint32_t key = scd_abs_key(a);
		int taken = key >= s->tkey && sel_take(s, i, a, key);
		if (mode == MODE_FUSED)
			res[i] = taken ? 0.0f : a;
		else if (mode == MODE_INPLACE && taken)
			res[i] = 0.0f;
	}
}

static inline __attribute__((always_inline)) void
sel_range(const float *in, float *res, int mode, uint64_t lo, uint64_t hi, sel_t *s)
{
#ifdef __SSE2__
	/* Scalar head up to 16-byte alignment of the array that is written or read. */
	const float *base = mode == MODE_READONLY ? in : res;
	uint64_t head = lo;
	while (head < hi && ((uintptr_t)(base + head) & 15))
		head++;
	sel_scalar(in, res, mode, lo, head, s);
	const __m128i absmask = _mm_set1_epi32(0x7fffffff);
	const __m128i tm1 = _mm_set1_epi32((int)(s->tkey - 1));
	uint64_t i = head;
	for (; i + 8 <= hi; i += 8) {
		__m128 a0, a1;
		if (mode == MODE_FUSED) {
			a0 = _mm_add_ps(_mm_loadu_ps(in + i), _mm_load_ps(res + i));
			a1 = _mm_add_ps(_mm_loadu_ps(in + i + 4), _mm_load_ps(res + i + 4));
		} else if (mode == MODE_INPLACE) {
			a0 = _mm_load_ps(res + i);
			a1 = _mm_load_ps(res + i + 4);
		} else {
			a0 = _mm_load_ps(in + i);
			a1 = _mm_load_ps(in + i + 4);
		}
		__m128i k0 = _mm_and_si128(_mm_castps_si128(a0), absmask);
		__m128i k1 = _mm_and_si128(_mm_castps_si128(a1), absmask);
		__m128i m0 = _mm_cmpgt_epi32(k0, tm1);
		__m128i m1 = _mm_cmpgt_epi32(k1, tm1);
		int bits = _mm_movemask_ps(_mm_castsi128_ps(m0)) |
			   _mm_movemask_ps(_mm_castsi128_ps(m1)) << 4;
		if (mode == MODE_FUSED) {
			_mm_store_ps(res + i, a0);
			_mm_store_ps(res + i + 4, a1);
		}
		if (__builtin_expect(bits != 0, 0)) {
			float lane[8];
			_mm_storeu_ps(lane, a0);
			_mm_storeu_ps(lane + 4, a1);
			while (bits) {
				int j = __builtin_ctz((unsigned)bits);
				bits &= bits - 1;
				if (sel_take(s, i + j, lane[j], scd_abs_key(lane[j])) &&
				    mode != MODE_READONLY)
					res[i + j] = 0.0f;
			}
		}
	}
	sel_scalar(in, res, mode, i, hi, s);
#else
	sel_scalar(in, res, mode, lo, hi, s);
#endif
}

/* Runs the kernel in the mode the pointers call for. */
static void sel_dispatch(const float *in, float *res, uint64_t lo, uint64_t hi, sel_t *s)
{
	if (in && res)
		sel_range(in, res, MODE_FUSED, lo, hi, s);
	else if (res)
		sel_range(NULL, res, MODE_INPLACE, lo, hi, s);
	else
		sel_range(in, NULL, MODE_READONLY, lo, hi, s);
}

uint64_t scd_select_threshold(const float *in, float *residual, uint64_t lo, uint64_t hi,
			      float threshold, scd_coo_t *out)
{
	sel_t s = {.out = out, .tkey = scd_threshold_key(threshold), .quota = UINT64_MAX};
	out->nnz = 0;
	sel_dispatch(in, residual, lo, hi, &s);
	return s.qualified;
}

void scd_residual_accumulate(const float *in, float *residual, uint64_t lo, uint64_t hi)
{
	for (uint64_t i = lo; i < hi; i++)
		residual[i] += in[i];
}

uint64_t scd_count_at_least(const float *x, uint64_t n, float threshold)
{
	uint32_t tkey = scd_threshold_key(threshold);
	uint64_t c = 0;
	for (uint64_t i = 0; i < n; i++)
		c += scd_abs_key(x[i]) >= tkey;
	return c;
}

void scd_residual_restore(float *residual, const scd_coo_t *sel)
{
	for (uint64_t i = 0; i < sel->nnz; i++)
		residual[sel->idx[i]] += sel->val[i];
}

sc_status_t scd_coo_copy(const scd_coo_t *src, scd_coo_t *dst)
{
	if (src->nnz > dst->cap)
		return SC_ERR_LIMIT;
	memmove(dst->idx, src->idx, src->nnz * sizeof(uint32_t));
	memmove(dst->val, src->val, src->nnz * sizeof(float));
	dst->nnz = src->nnz;
	return SC_OK;
}

/* ---- top-k: radix select on magnitude keys ------------------------------------------- */

/* Pass 1: acc = in (+ residual, written back), histogram of key >> HIST_TOP_SHIFT. */
static void topk_first_pass(scd_sparsifier_t *sp, const float *in, float *res, uint64_t n)
{
	uint32_t(*h)[1u << HIST_DIGIT] = sp->hist;
	memset(sp->hist, 0, sizeof(sp->hist));
	uint64_t i = 0;
	const float *src = in ? in : res;
	if (in && res) {
		for (; i + 4 <= n; i += 4) {
			float a0 = in[i] + res[i], a1 = in[i + 1] + res[i + 1];
			float a2 = in[i + 2] + res[i + 2], a3 = in[i + 3] + res[i + 3];
			res[i] = a0, res[i + 1] = a1, res[i + 2] = a2, res[i + 3] = a3;
			h[0][scd_abs_key(a0) >> HIST_TOP_SHIFT]++;
			h[1][scd_abs_key(a1) >> HIST_TOP_SHIFT]++;
			h[2][scd_abs_key(a2) >> HIST_TOP_SHIFT]++;
			h[3][scd_abs_key(a3) >> HIST_TOP_SHIFT]++;
		}
		for (; i < n; i++) {
			res[i] += in[i];
			h[0][scd_abs_key(res[i]) >> HIST_TOP_SHIFT]++;
		}
		return;
	}
	for (; i + 4 <= n; i += 4) {
		h[0][scd_abs_key(src[i]) >> HIST_TOP_SHIFT]++;
		h[1][scd_abs_key(src[i + 1]) >> HIST_TOP_SHIFT]++;
		h[2][scd_abs_key(src[i + 2]) >> HIST_TOP_SHIFT]++;
		h[3][scd_abs_key(src[i + 3]) >> HIST_TOP_SHIFT]++;
	}
	for (; i < n; i++)
		h[0][scd_abs_key(src[i]) >> HIST_TOP_SHIFT]++;
}

/* Folds the interleaved histograms and finds the bucket holding the need-th largest key.
 * On return *need_p is the rank within that bucket and the bucket's size is returned. */
static uint32_t hist_pick(scd_sparsifier_t *sp, uint32_t nbins, uint64_t *need_p,
			  uint64_t *count_p)
{
	uint64_t need = *need_p;
	for (uint32_t b = nbins; b-- > 0;) {
		uint64_t c = 0;
		for (int j = 0; j < HIST_COPIES; j++)
			c += sp->hist[j][b];
		if (c >= need || b == 0) {
			*need_p = need;
			*count_p = c;
			return b;
		}
		need -= c;
	}
	return 0; /* not reached */
}

/* Histogram of the next digit over keys whose top bits equal prefix (key >> pshift). */
static void hist_refine(scd_sparsifier_t *sp, const uint32_t *keys, const float *x, uint64_t n,
			uint32_t prefix, int pshift, int nshift)
{
	uint32_t mask = (1u << (pshift - nshift)) - 1;
	memset(sp->hist, 0, sizeof(sp->hist));
	for (uint64_t i = 0; i < n; i++) {
		uint32_t key = keys ? keys[i] : scd_abs_key(x[i]);
		if ((key >> pshift) == prefix)
			sp->hist[i & (HIST_COPIES - 1)][(key >> nshift) & mask]++;
	}
}

/* Copies the keys of the boundary bucket into the candidate buffer. */
static uint64_t collect_bucket(scd_sparsifier_t *sp, const float *x, uint64_t n,
			       uint32_t prefix, int pshift)
{
	uint64_t m = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t key = scd_abs_key(x[i]);
		sp->cand[m] = key;
		m += (key >> pshift) == prefix;
	}
	return m;
}

/*
 * Finds the exact k-th largest key of x[0, n) (x already holds acc), given the top-digit
 * histogram. Sets *tkey_p and *quota_p (how many keys equal to it are taken).
 */
static uint32_t topk_find(scd_sparsifier_t *sp, const float *x, uint64_t n, uint64_t k,
			  uint64_t *quota_p, uint32_t *passes_p)
{
	uint64_t need = k, count;
	uint32_t prefix = hist_pick(sp, 1u << (31 - HIST_TOP_SHIFT), &need, &count);
	int pshift = HIST_TOP_SHIFT;
	const uint32_t *keys = NULL;
	uint64_t nkeys = n;
	while (pshift > 0) {
		if (!keys && count < sp->cand_cap) {
			/* cand holds one slot of slack: collect_bucket stores before it tests.
			 */
			nkeys = collect_bucket(sp, x, n, prefix, pshift);
			keys = sp->cand;
			(*passes_p)++;
			continue;
		}
		int nshift = pshift > HIST_DIGIT ? pshift - HIST_DIGIT : 0;
		hist_refine(sp, keys, x, nkeys, prefix, pshift, nshift);
		if (!keys)
			(*passes_p)++;
		uint32_t b = hist_pick(sp, 1u << (pshift - nshift), &need, &count);
		prefix = (prefix << (pshift - nshift)) | b;
		pshift = nshift;
	}
	*quota_p = need;
	return prefix;
}

/* ---- top-k fast path: sampled bracket, one pass ------------------------------------- */

/*
 * A sample of SAMPLE_CHUNKS runs of SAMPLE_RUN consecutive elements brackets the k-th
 * magnitude: keys >= hi are certainly in the top k, keys in [lo, hi) are candidates. One
 * fused pass (the threshold kernel with a second, lower compare) takes the certain ones
 * straight to the output and records the candidates; a radix select over the candidates
 * finds the exact k-th key, and the winners are merged into the output in index order.
 * When the bracket misses (probability well below 1e-4 by the 4-sigma margin), the pass
 * is undone and the histogram path runs instead, so the result is always exact.
 */
#define SAMPLE_CHUNKS	 256
#define SAMPLE_RUN	 256 /* elements a run, at most: an eighth of the tensor in all */
#define SAMPLE_RUN_MIN	 4
#define SAMPLE_SIZE	 (SAMPLE_CHUNKS * SAMPLE_RUN)
#define SAMPLE_MIN_NUMEL (8 * (uint64_t)SAMPLE_CHUNKS * SAMPLE_RUN_MIN) /* 8192 */

/* The sample's run length for a tensor of n elements: the sample is at most an eighth of
 * it; 0 when that leaves runs shorter than SAMPLE_RUN_MIN (the histogram path then). */
static uint32_t sample_run(uint64_t n)
{
	uint64_t run = n / (8 * (uint64_t)SAMPLE_CHUNKS);
	return run < SAMPLE_RUN_MIN ? 0 : run > SAMPLE_RUN ? SAMPLE_RUN : (uint32_t)run;
}

typedef struct {
	sel_t s;     /* certain: key >= s.tkey (hi) */
	uint32_t lo; /* candidate: lo <= key < hi */
	uint32_t *ci, *ck;
	float *cv;
	uint64_t nc, ccap;
	int overflow;
} bracket_t;

static inline __attribute__((always_inline)) int br_one(bracket_t *b, uint64_t i, float a,
							uint32_t key)
{
	if (key >= b->s.tkey)
		return sel_take(&b->s, i, a, key);
	if (b->nc == b->ccap) {
		b->overflow = 1;
		return 0;
	}
	b->ci[b->nc] = (uint32_t)i;
	b->ck[b->nc] = key;
	b->cv[b->nc++] = a;
	return 0;
}

static inline __attribute__((always_inline)) void
br_scalar(const float *in, float *res, int mode, uint64_t lo, uint64_t hi, bracket_t *b)
{
	for (uint64_t i = lo; i < hi; i++) {
		float a = mode == MODE_FUSED	 ? in[i] + res[i]
			  : mode == MODE_INPLACE ? res[i]
						 : in[i];
		uint32_t key = scd_abs_key(a);
		int taken = key >= b->lo && br_one(b, i, a, key);
		if (mode == MODE_FUSED)
			res[i] = taken ? 0.0f : a;
		else if (mode == MODE_INPLACE && taken)
			res[i] = 0.0f;
	}
}

static inline __attribute__((always_inline)) void br_range(const float *in, float *res,
							   int mode, uint64_t n, bracket_t *b)
{
	uint64_t i = 0;
#ifdef __SSE2__
	const float *base = mode == MODE_READONLY ? in : res;
	while (i < n && ((uintptr_t)(base + i) & 15))
		i++;
	br_scalar(in, res, mode, 0, i, b);
	const __m128i absmask = _mm_set1_epi32(0x7fffffff);
	const __m128i tm1 = _mm_set1_epi32((int)(b->lo - 1));
	for (; i + 8 <= n; i += 8) {
		__m128 a0, a1;
		if (mode == MODE_FUSED) {
			a0 = _mm_add_ps(_mm_loadu_ps(in + i), _mm_load_ps(res + i));
			a1 = _mm_add_ps(_mm_loadu_ps(in + i + 4), _mm_load_ps(res + i + 4));
		} else if (mode == MODE_INPLACE) {
			a0 = _mm_load_ps(res + i);
			a1 = _mm_load_ps(res + i + 4);
		} else {
			a0 = _mm_load_ps(in + i);
			a1 = _mm_load_ps(in + i + 4);
		}
		__m128i k0 = _mm_and_si128(_mm_castps_si128(a0), absmask);
		__m128i k1 = _mm_and_si128(_mm_castps_si128(a1), absmask);
		int bits = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k0, tm1))) |
			   _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k1, tm1))) << 4;
		if (mode == MODE_FUSED) {
			_mm_store_ps(res + i, a0);
			_mm_store_ps(res + i + 4, a1);
		}
		if (__builtin_expect(bits != 0, 0)) {
			float lane[8];
			_mm_storeu_ps(lane, a0);
			_mm_storeu_ps(lane + 4, a1);
			while (bits) {
				int j = __builtin_ctz((unsigned)bits);
				bits &= bits - 1;
				if (br_one(b, i + j, lane[j], scd_abs_key(lane[j])) &&
				    mode != MODE_READONLY)
					res[i + j] = 0.0f;
			}
		}
	}
#endif
	br_scalar(in, res, mode, i, n, b);
}

/* Keys of acc = in (+ res) at SAMPLE_CHUNKS runs of run elements spread over the tensor. */
static void topk_sample(scd_sparsifier_t *sp, const float *in, const float *res, uint64_t n,
			uint32_t run)
{
	uint64_t span = n / SAMPLE_CHUNKS,
		 seed = scd_seed_derive(sp->cfg.seed ^ 0x70b, sp->step);
	for (uint32_t c = 0; c < SAMPLE_CHUNKS; c++) {
		uint64_t lo = c * span + scd_hash_range(seed, c, (uint32_t)(span - run + 1));
		uint32_t *o = sp->sample + (uint64_t)c * run;
		for (uint32_t j = 0; j < run; j++) {
			uint64_t i = lo + j;
			o[j] = scd_abs_key((in ? in[i] : 0.0f) + (res ? res[i] : 0.0f));
		}
	}
}

/* Back-merges the winners (ascending, in ci/cv[0, w)) into out[0, a) -> out[0, a + w). */
static void merge_winners(scd_coo_t *out, const uint32_t *ci, const float *cv, uint64_t w)
{
	uint64_t a = out->nnz, d = a + w;
	while (w) {
		if (a && out->idx[a - 1] > ci[w - 1]) {
			a--, d--;
			out->idx[d] = out->idx[a];
			out->val[d] = out->val[a];
		} else {
			w--, d--;
			out->idx[d] = ci[w];
			out->val[d] = cv[w];
		}
	}
}

/* Returns 1 when it selected the exact top k; 0 after undoing its pass (residual then
 * holds acc whole when there is one). */
static int topk_fast(scd_sparsifier_t *sp, const float *in, float *res, uint64_t n, uint64_t k,
		     scd_coo_t *out, scd_select_stats_t *st)
{
	uint32_t run = sample_run(n);
	if (!sp->sample || !run || out->cap < k)
		return 0;
	topk_sample(sp, in, res, n, run);
	uint64_t m = (uint64_t)SAMPLE_CHUNKS * run; /* the sample's size */
	double r = (double)k * (double)m / (double)n;
	double margin = 4 * sqrt(r * (1 - r / (double)m)) + 8;
	uint32_t hi = r - margin < 1
			  ? 0x80000000u
			  : scd_kth_key_u32(sp->sample, m, (uint64_t)(r - margin), NULL, NULL);
	uint32_t lo =
	    r + margin > (double)m - 1
		? 1
		: scd_kth_key_u32(sp->sample, m, (uint64_t)(r + margin) + 1, NULL, NULL);
	if (lo == 0)
		lo = 1;
	if (hi <= lo)
		return 0;
	bracket_t b = {.s = {.out = out, .tkey = hi, .quota = UINT64_MAX},
		       .lo = lo,
		       .ci = sp->br_idx,
		       .ck = sp->br_key,
		       .cv = sp->br_val,
		       .ccap = sp->cand_cap};
	out->nnz = 0;
	if (in && res)
		br_range(in, res, MODE_FUSED, n, &b);
	else if (res)
		br_range(NULL, res, MODE_INPLACE, n, &b);
	else
		br_range(in, NULL, MODE_READONLY, n, &b);
	st->passes = 1;
	uint64_t certain = out->nnz;
	if (b.overflow || certain > k || certain + b.nc < k || b.s.qualified != certain) {
		if (res)
			scd_residual_restore(res, out); /* undo */
		out->nnz = 0;
		return 0;
	}
	uint64_t need = k - certain, w = 0;
	uint32_t tkey = need ? scd_kth_key_u32(b.ck, b.nc, need, NULL, NULL) : hi;
	uint64_t quota = 0;
	for (uint64_t j = 0; j < b.nc && need; j++)
		quota += b.ck[j] > tkey;
	quota = need - quota; /* ties at tkey still to take, lowest index first */
	for (uint64_t j = 0; j < b.nc && w < need; j++) {
		uint32_t key = b.ck[j];
		if (key > tkey || (key == tkey && quota && quota--)) {
			b.ci[w] = b.ci[j];
			b.cv[w++] = b.cv[j];
			if (res)
				res[b.ci[j]] = 0.0f;
		}
	}
	merge_winners(out, b.ci, b.cv, w);
	out->nnz = certain + w;
	st->qualified = out->nnz;
	st->threshold = scd_key_to_float(need ? tkey : hi);
	return 1;
}

/* ---- top-k of a small tensor: quickselect over its keys ------------------------------ */

/*
 * Below SMALL_NUMEL elements the histogram path's fixed costs (clearing 32 KiB of
 * histograms per digit, folding them) outweigh the tensor: a model's biases and norms,
 * a few hundred elements each, cost several microseconds apiece. Here the keys go to
 * cand, a copy of them is partitioned around the k-th largest (Hoare's quickselect, the
 * median of three as pivot; past SMALL_ROUNDS rounds, an input that defeats it, the radix
 * select), and the selection kernel takes keys above it and the lowest-indexed ties, as
 * the histogram path does: the same elements, bit for bit.
 */
#define SMALL_NUMEL  2048 /* cand holds 4096 + n / 32 keys: both copies fit */
#define SMALL_ROUNDS 64

/* The k-th largest (1 <= k <= n) of v[0, n), v reordered. */
static uint32_t small_kth(uint32_t *v, uint64_t n, uint64_t k)
{
	int64_t lo = 0, hi = (int64_t)n - 1, want = (int64_t)k - 1; /* descending order */
	for (int round = 0; lo < hi; round++) {
		if (round == SMALL_ROUNDS)
			return scd_kth_key_u32(v + lo, (uint64_t)(hi - lo + 1),
					       (uint64_t)(want - lo + 1), NULL, NULL);
		uint32_t a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
		uint32_t pivot = a < b ? (b < c	  ? b
					  : a < c ? c
						  : a)
				       : (a < c	  ? a
					  : b < c ? c
						  : b);
		int64_t i = lo, j = hi;
		while (i <= j) { /* larger keys to the left */
			while (v[i] > pivot)
				i++;
			while (v[j] < pivot)
				j--;
			if (i <= j) {
				uint32_t t = v[i];
				v[i++] = v[j];
				v[j--] = t;
			}
		}
		/* [lo, j] >= pivot >= [i, hi]; between them, keys equal to the pivot */
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			return pivot;
	}
	return v[want];
}

static void topk_small(scd_sparsifier_t *sp, const float *in, const float *res, uint64_t n,
		       uint64_t k, uint32_t *tkey_p, uint64_t *quota_p)
{
	uint32_t *key = sp->cand, *v = sp->cand + n;
	for (uint64_t i = 0; i < n; i++)
		key[i] = v[i] = scd_abs_key((in ? in[i] : 0.0f) + (res ? res[i] : 0.0f));
	uint32_t tkey = small_kth(v, n, k);
	uint64_t gt = 0;
	for (uint64_t i = 0; i < n; i++)
		gt += key[i] > tkey;
	*tkey_p = tkey;
	*quota_p = k - gt;
}

static void topk_step(scd_sparsifier_t *sp, const float *in, float *res, uint64_t n,
		      scd_coo_t *out, scd_select_stats_t *st)
{
	uint64_t k = sp->k < n ? sp->k : n;
	st->target = k;
	if (n <= SMALL_NUMEL && k) {
		uint32_t tkey;
		uint64_t quota;
		topk_small(sp, in, res, n, k, &tkey, &quota);
		sel_t s = {
		    .out = out, .tkey = tkey ? tkey : 1, .quota = tkey ? quota : UINT64_MAX};
		out->nnz = 0;
		sel_dispatch(in, res, 0, n, &s);
		st->passes = 2;
		st->qualified = s.qualified;
		st->threshold = scd_key_to_float(tkey);
		return;
	}
	if (topk_fast(sp, in, res, n, k, out, st))
		return;
	if (st->passes && res)
		in = NULL; /* the undone fast pass left acc in the residual */
	topk_first_pass(sp, in, res, n);
	st->passes++;
	const float *acc = res ? res : in;
	uint64_t quota = 0;
	uint32_t tkey = topk_find(sp, acc, n, k, &quota, &st->passes);
	/* Key 0 is an exact zero: never selected (fewer than k non-zeros: take them all). */
	sel_t s = {.out = out, .tkey = tkey ? tkey : 1, .quota = tkey ? quota : UINT64_MAX};
	out->nnz = 0;
	sel_dispatch(res ? NULL : in, res, 0, n, &s);
	st->passes++;
	st->qualified = s.qualified;
	st->threshold = scd_key_to_float(tkey);
}

/* ---- DGC: threshold from a sample, corrected ----------------------------------------- */

/* Takes about 1% of acc = in + res (at least min(n, 1024) elements), one per stride, at a
 * position within the stride drawn from the step's seed; returns the sample size. */
static uint64_t dgc_sample(scd_sparsifier_t *sp, const float *in, const float *res, uint64_t n)
{
	uint64_t m = n / 100;
	if (m < 1024)
		m = n < 1024 ? n : 1024;
	if (m > sp->cand_cap - 1)
		m = sp->cand_cap - 1;
	uint64_t stride = n / m, seed = scd_seed_derive(sp->cfg.seed, sp->step);
	for (uint64_t j = 0; j < m; j++) {
		uint64_t i = j * stride + scd_hash_range(seed, (uint32_t)j, (uint32_t)stride);
		float a = (in ? in[i] : 0.0f) + (res ? res[i] : 0.0f);
		sp->cand[j] = scd_abs_key(a);
	}
	return m;
}

static void dgc_step(scd_sparsifier_t *sp, const float *in, float *res, uint64_t n,
		     scd_coo_t *out, scd_select_stats_t *st)
{
	uint64_t k = sp->k < n ? sp->k : n;
	uint64_t m = dgc_sample(sp, in, res, n);
	uint64_t r = (uint64_t)((double)k * (double)m / (double)n + 0.5);
	float thr = scd_key_to_float(scd_kth_key_u32(sp->cand, m, r ? r : 1, NULL, NULL));
	st->target = k;
	uint64_t lo = (uint64_t)ceil(DGC_LO * (double)k),
		 hi = (uint64_t)floor(DGC_HI * (double)k);
	/* Optimistic: select with the sampled threshold; usually that is the whole step. */
	uint64_t q = scd_select_threshold(in, res, 0, n, thr, out);
	st->passes = 1;
	const float *acc = res ? res : in;
	for (int fix = 0; fix < DGC_MAX_FIXES && (q < lo || q > hi); fix++) {
		if (fix == 0 && res)
			scd_residual_restore(res, out); /* undo: acc is whole in res again */
		out->nnz = 0;
		thr = q > hi ? thr * 1.3f : thr * 0.7f;
		q = scd_count_at_least(acc, n, thr);
		st->passes++;
		if (q >= lo && q <= hi)
			break;
	}
	if (out->nnz == 0 && q > 0) {
		q = scd_select_threshold(res ? NULL : in, res, 0, n, thr, out);
		st->passes++;
	}
	st->qualified = q;
	st->threshold = thr;
}

/* ---- block-wise top-K ------------------------------------------------------------------ */

static uint64_t block_of(const scd_sparsifier_t *sp)
{
	return sp->cfg.block ? sp->cfg.block : 256;
}

/* acc at i: fl(in + residual), the tensor itself, or the residual alone. */
static inline float acc_at(const float *in, const float *res, uint64_t i)
{
	return in ? (res ? in[i] + res[i] : in[i]) : res[i];
}

/* S2 Reducer's block-wise top-K: the squared l2 norm of each block of acc (a NaN makes
 * it infinite), the K blocks of largest norm (equal norms: the lower blocks first), whose
 * non-zeros go out; everything else stays in the residual. The K-th norm comes from the
 * radix select (kth.h) over the norms as floats, with border as its scratch: no sort and
 * no allocation per step. */
static void block_topk_step(scd_sparsifier_t *sp, const float *in, float *res, uint64_t n,
			    scd_coo_t *out, scd_select_stats_t *st)
{
	uint64_t B = block_of(sp), nb = (n + B - 1) / B;
	uint64_t K = scd_density_to_k(sp->cfg.density, nb);
	for (uint64_t b = 0; b < nb; b++) {
		double s = 0;
		for (uint64_t i = b * B, e = i + B < n ? i + B : n; i < e; i++) {
			double a = acc_at(in, res, i);
			s += a * a;
		}
		sp->bnorm[b] = s == s ? (float)s : INFINITY;
	}
	uint64_t gt = 0;
	uint32_t kth = K ? scd_kth_key_f32(sp->bnorm, nb, K, sp->border, &gt) : UINT32_MAX;
	uint64_t ties = K > gt ? K - gt : 0;
	for (uint64_t b = 0; b < nb; b++) {
		uint32_t key = scd_abs_key(sp->bnorm[b]);
		sp->bsel[b] = key > kth || (K && key == kth && ties && ties--);
	}
	uint64_t q = 0;
	for (uint64_t b = 0; b < nb; b++)
		for (uint64_t i = b * B, e = i + B < n ? i + B : n; i < e; i++) {
			float a = acc_at(in, res, i);
			int take = sp->bsel[b] && a != 0.0f && out->nnz < out->cap;
			q += sp->bsel[b] && a != 0.0f;
			if (take) {
				out->idx[out->nnz] = (uint32_t)i;
				out->val[out->nnz++] = a;
			}
			if (res)
				res[i] = take ? 0.0f : a;
		}
	st->target = K;
	st->qualified = q;
	st->passes = 2;
}

/* ---- object -------------------------------------------------------------------------- */

sc_status_t scd_sparsifier_cfg_check(const scd_sparsifier_cfg_t *cfg)
{
	if (!cfg || (unsigned)cfg->kind >= SCD_SPARSIFY_COUNT || cfg->numel > SCD_NUMEL_MAX)
		return SC_ERR_INVALID;
	if (cfg->kind == SCD_SPARSIFY_THRESHOLD && !(cfg->threshold > 0))
		return SC_ERR_INVALID;
	if ((cfg->kind == SCD_SPARSIFY_TOPK || cfg->kind == SCD_SPARSIFY_DGC ||
	     cfg->kind == SCD_SPARSIFY_BLOCK_TOPK) &&
	    !(cfg->density > 0 && cfg->density <= 1))
		return SC_ERR_INVALID;
	return SC_OK;
}

sc_status_t scd_sparsifier_create(const scd_sparsifier_cfg_t *cfg, scd_sparsifier_t **sp_p)
{
	if (!sp_p || scd_sparsifier_cfg_check(cfg) != SC_OK)
		return SC_ERR_INVALID;
	scd_sparsifier_t *sp = calloc(1, sizeof(*sp));
	if (!sp)
		return SC_ERR_NOMEM;
	sp->cfg = *cfg;
	if (cfg->kind == SCD_SPARSIFY_BLOCK_TOPK) {
		uint64_t nb = (cfg->numel + block_of(sp) - 1) / block_of(sp) + 1;
		sp->bnorm = calloc(nb, sizeof(float));
		sp->border = calloc(nb, sizeof(uint32_t));
		sp->bsel = calloc(nb, 1);
		if (!sp->bnorm || !sp->border || !sp->bsel) {
			scd_sparsifier_destroy(sp);
			return SC_ERR_NOMEM;
		}
	}
	sp->k = scd_density_to_k(cfg->density, cfg->numel);
	if (cfg->kind == SCD_SPARSIFY_TOPK || cfg->kind == SCD_SPARSIFY_DGC) {
		/* topk: boundary buckets up to numel/32 are collected, larger ones refined by
		 * another pass; dgc: the ~1% sample. */
		sp->cand_cap = cfg->numel / 32 + 4096;
		sp->cand = malloc(sp->cand_cap * sizeof(uint32_t));
		if (!sp->cand) {
			free(sp);
			return SC_ERR_NOMEM;
		}
		memset(sp->cand, 0, sp->cand_cap * sizeof(uint32_t)); /* pre-fault */
	}
	if (cfg->kind == SCD_SPARSIFY_TOPK && cfg->numel >= SAMPLE_MIN_NUMEL) {
		sp->sample = calloc(SAMPLE_SIZE, sizeof(uint32_t));
		sp->br_idx = calloc(sp->cand_cap, sizeof(uint32_t));
		sp->br_key = calloc(sp->cand_cap, sizeof(uint32_t));
		sp->br_val = calloc(sp->cand_cap, sizeof(float));
		if (!sp->sample || !sp->br_idx || !sp->br_key || !sp->br_val) {
			scd_sparsifier_destroy(sp);
			return SC_ERR_NOMEM;
		}
		memset(sp->br_idx, 0, sp->cand_cap * sizeof(uint32_t)); /* pre-fault */
		memset(sp->br_key, 0, sp->cand_cap * sizeof(uint32_t));
		memset(sp->br_val, 0, sp->cand_cap * sizeof(float));
	}
	*sp_p = sp;
	return SC_OK;
}

void scd_sparsifier_destroy(scd_sparsifier_t *sp)
{
	if (!sp)
		return;
	free(sp->cand);
	free(sp->sample);
	free(sp->br_idx);
	free(sp->br_key);
	free(sp->br_val);
	free(sp->bnorm);
	free(sp->border);
	free(sp->bsel);
	free(sp);
}

sc_status_t scd_sparsify(scd_sparsifier_t *sp, const float *in, float *residual, uint64_t numel,
			 scd_coo_t *out, scd_select_stats_t *stats_p)
{
	if (!sp || !out || (!in && !residual) || numel > sp->cfg.numel)
		return SC_ERR_INVALID;
	scd_select_stats_t st = {0};
	out->nnz = 0;
	switch (sp->cfg.kind) {
	case SCD_SPARSIFY_THRESHOLD:
		st.threshold = sp->cfg.threshold;
		st.qualified = scd_select_threshold(in, residual, 0, numel, st.threshold, out);
		st.passes = 1;
		break;
	case SCD_SPARSIFY_NATURAL:
		st.threshold = scd_key_to_float(1);
		st.qualified = scd_select_threshold(in, residual, 0, numel, st.threshold, out);
		st.passes = 1;
		break;
	case SCD_SPARSIFY_TOPK:
		if (numel)
			topk_step(sp, in, residual, numel, out, &st);
		break;
	case SCD_SPARSIFY_DGC:
		if (numel)
			dgc_step(sp, in, residual, numel, out, &st);
		break;
	case SCD_SPARSIFY_BLOCK_TOPK:
		if (numel)
			block_topk_step(sp, in, residual, numel, out, &st);
		break;
	default:
		return SC_ERR_INVALID;
	}
	sp->step++;
	if (stats_p)
		*stats_p = st;
	return SC_OK;
}
