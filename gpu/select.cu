/*
 * select.cu: the sparsifiers with error feedback (threshold, exact top-k, natural, DGC) and
 * the bitmap format of the GPU device (scg.h, section reduce.cu / select.cu); the cpu
 * reference is daemon/device/select.c, kth.c and format.c.
 *
 * Every selection is one criterion on the magnitude key (scd_abs_key: |x|'s bits as an
 * unsigned integer) and the element's index:
 *     qualifies(i) = key >= tkey && (key != tiekey || i <= tiecut)
 * and the output takes the first out->cap qualifying elements by index, as the cpu's
 * sequential pass does. select_run() applies it to acc = in (+ residual) in three
 * data-parallel passes: a count of the qualifying elements, a stream compaction of their
 * indices (stable: ascending) that writes the first cap of them, and the error-feedback
 * update (residual = acc where not taken, 0 where taken). The last taken index, read back
 * from the output, says which qualifying elements were taken, so the update is exact
 * even when the output is full.
 *
 * Threshold: tkey = scd_threshold_key(t), no tie rule. Natural: tkey = 1. DGC: select.c's
 * steps (the same hashed sample of acc, its exact r-th key, the same corrections in float).
 * Top-k: acc is formed first (in + residual into the residual), then a most-significant-
 * digit radix select over the keys, not a sort: histograms of the digits 30..20, 19..10
 * and 9..0 (kth.c's digits) over the elements whose key matches the prefix found so far
 * give the exact k-th largest key T and how many keys are larger (gt). The top k are then
 * key > T and the k - gt lowest-indexed keys equal to T; the index of the (k - gt)-th of
 * those (a compaction that records one position) is tiecut. T = 0 (fewer than k
 * non-zeros) selects every non-zero. These are the cpu's selection bits: its fast
 * (sampled bracket) and histogram paths both select exactly this set.
 *
 * The histograms: device-scope atomics through Thrust's for_each (portable, the host
 * build, or the CUDA build with -DSCG_PORTABLE_KERNELS), and beside it a kernel with
 * per-block shared-memory counts for the CUDA build. They, the digits and the pick of a
 * bucket are in scg_radix.cuh, shared with the top-k of COO lists (kernels.cu).
 */
#include "portable.cuh"
#include "scg_hash.cuh"
#include "scg_radix.cuh"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cuda/std/bit>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

typedef unsigned long long u64;

namespace
{

inline float key_to_float(uint32_t key)
{
	float f;
	memcpy(&f, &key, 4);
	return f;
}

inline uint32_t threshold_key(float t)
{
	uint32_t key = abs_key(t);
	return key ? key : 1;
}

/* Reads n values of device memory into host memory (waits for the queued work). */
template <class T> sc_status_t rd(T *dst_host, const T *src, size_t n)
{
	return scg_to_host(dst_host, src, n * sizeof(T));
}

struct crit_t {
	uint32_t tkey, tiekey;
	uint64_t tiecut;
	SCG_HD bool operator()(uint64_t i, uint32_t key) const
	{
		return key >= tkey && (key != tiekey || i <= tiecut);
	}
};

struct qualifies {
	acc_view acc;
	crit_t crit;
	SCG_HD bool operator()(uint64_t i) const
	{
		return crit(i, abs_key(acc(i)));
	}
};

/* Writes the first cap qualifying elements (pos: their rank by index). */
struct write_first {
	acc_view acc;
	uint32_t *idx;
	float *val;
	uint64_t cap;
	SCG_HD void operator()(uint64_t pos, uint64_t i) const
	{
		if (pos < cap) {
			idx[pos] = (uint32_t)i;
			val[pos] = acc(i);
		}
	}
};

/* Error feedback: taken = qualifies && i <= last (the last index taken). */
struct feedback {
	acc_view acc; /* acc.res is res */
	float *res;
	crit_t crit;
	uint64_t last; /* UINT64_MAX: every qualifying one was taken */
	SCG_HD void operator()(uint64_t i) const
	{
		float a = acc(i);
		bool taken = i <= last && crit(i, abs_key(a));
		if (acc.in)
			res[i] = taken ? 0.0f : a;
		else if (taken)
			res[i] = 0.0f;
	}
};

struct key_is {
	acc_view acc;
	uint32_t key;
	SCG_HD bool operator()(uint64_t i) const
	{
		return abs_key(acc(i)) == key;
	}
};

/* Records the index at rank want - 1. */
struct record_rank {
	u64 *dst;
	uint64_t want;
	SCG_HD void operator()(uint64_t pos, uint64_t i) const
	{
		if (pos + 1 == want)
			*dst = i;
	}
};

struct add_f32 {
	SCG_HD float operator()(float a, float b) const
	{
		return a + b;
	}
};

/*
 * The selection of crit over acc = in (+ res) (see the file comment); *passes_p counts the
 * passes over the tensor.
 */
sc_status_t select_run(const float *in, float *res, uint64_t n, crit_t crit, scg_coo_t *out,
		       uint64_t *qualified_p, uint32_t *passes_p, const char *what)
{
	acc_view acc{in, res};
	uint64_t q = 0, m = 0;
	out->nnz = 0;
	if (n) {
		thrust::counting_iterator<uint64_t> i0(0);
		SCG_TRY(what, q = (uint64_t)thrust::count_if(SCG_POLICY, i0, i0 + n,
							     qualifies{acc, crit}));
		m = q < out->cap ? q : out->cap;
		(*passes_p)++;
		if (m) {
			auto o = thrust::make_tabulate_output_iterator(
			    write_first{acc, out->idx, out->val, out->cap});
			SCG_TRY(what, thrust::copy_if(SCG_POLICY, i0, i0 + n, o,
						      qualifies{acc, crit}));
			(*passes_p)++;
		}
		if (res && m) {
			uint64_t last = UINT64_MAX; /* every qualifying one was taken */
			if (m < q) { /* the output is full: up to its last index */
				uint32_t li = 0;
				sc_status_t st = rd(&li, out->idx + (m - 1), 1);
				if (st != SC_OK)
					return st;
				last = li;
			}
			SCG_TRY(what, thrust::for_each(SCG_POLICY, i0, i0 + n,
						       feedback{acc, res, crit, last}));
			(*passes_p)++;
		} else if (res && in) { /* nothing taken: res = acc */
			SCG_TRY(what,
				thrust::transform(SCG_POLICY, in, in + n, res, res, add_f32()));
			(*passes_p)++;
		}
	}
	out->nnz = m;
	*qualified_p = q;
	return SCG_CHECK(what);
}

uint64_t density_to_k(double density, uint64_t numel)
{
	if (!(density > 0))
		return numel ? 1 : 0;
	double k = floor(density * (double)numel + 0.5);
	if (k < 1)
		k = 1;
	return k > (double)numel ? numel : (uint64_t)k;
}

} // namespace

struct scg_sparsifier {
	scg_sparsifier_cfg_t cfg;
	uint64_t k, step;
	u64 *hist;			/* device: 2048 buckets */
	u64 *scalar;			/* device: one value */
	uint32_t *sample, *sample_host; /* dgc: the sample's keys (cand_cap) */
	uint64_t cand_cap;
	u64 hist_host[1u << (31 - TOP_SHIFT)];
};

#define NB_TOP (1u << (31 - TOP_SHIFT))

/* Top-k of acc (see the file comment). */
static sc_status_t topk_step(scg_sparsifier_t *sp, const float *in, float *res, uint64_t n,
			     scg_coo_t *out, scg_select_stats_t *st)
{
	const char *what = "scg_sparsify(topk)";
	uint64_t k = sp->k < n ? sp->k : n;
	st->target = k;
	thrust::counting_iterator<uint64_t> i0(0);
	if (in && res) { /* acc into the residual */
		SCG_TRY(what, thrust::transform(SCG_POLICY, in, in + n, res, res, add_f32()));
		st->passes++;
		in = NULL;
	}
	acc_view acc{res ? NULL : in, res};
	uint64_t remaining = k, gt = 0, count_eq = 0;
	uint32_t T = 0;
	for (int shift = TOP_SHIFT; shift >= 0; shift -= DIGIT) {
		uint32_t nb = shift == TOP_SHIFT ? NB_TOP : 1u << DIGIT;
		uint32_t mask = shift == TOP_SHIFT ? 0 : ~((1u << (shift + DIGIT)) - 1);
		SCG_TRY(what, thrust::fill(SCG_POLICY, sp->hist, sp->hist + nb, 0ull));
		sc_status_t s = histogram(acc, n, sp->hist, nb, mask, T, shift, what);
		if (s != SC_OK)
			return s;
		st->passes++;
		s = rd(sp->hist_host, sp->hist, nb);
		if (s != SC_OK)
			return s;
		uint32_t b = pick(sp->hist_host, nb, &remaining, &gt);
		T |= b << shift;
		count_eq = sp->hist_host[b];
	}
	crit_t crit{T ? T : 1u, T, UINT64_MAX};
	if (!T)
		crit.tiekey = 0; /* never matches a key >= 1: every non-zero */
	else if (remaining < count_eq) {
		/* ties at T: the lowest `remaining` indices */
		auto o =
		    thrust::make_tabulate_output_iterator(record_rank{sp->scalar, remaining});
		SCG_TRY(what, thrust::copy_if(SCG_POLICY, i0, i0 + n, o, key_is{acc, T}));
		st->passes++;
		u64 cut = 0;
		sc_status_t s = rd(&cut, sp->scalar, 1);
		if (s != SC_OK)
			return s;
		crit.tiecut = cut;
	}
	sc_status_t s =
	    select_run(acc.in, res, n, crit, out, &st->qualified, &st->passes, what);
	st->threshold = key_to_float(T);
	return s;
}

/* ---- DGC: threshold from a sample, corrected (select.c's dgc_step, step for step) ---- */

namespace
{
struct sample_key {
	acc_view acc;
	uint64_t seed, stride;
	SCG_HD uint32_t operator()(uint64_t j) const
	{
		uint64_t i = j * stride + scg_hash_range(seed, (uint32_t)j, (uint32_t)stride);
		return abs_key(acc(i));
	}
};
} // namespace

static sc_status_t dgc_step(scg_sparsifier_t *sp, const float *in, float *res, uint64_t n,
			    scg_coo_t *out, scg_select_stats_t *st)
{
	const char *what = "scg_sparsify(dgc)";
	uint64_t k = sp->k < n ? sp->k : n;
	/* about 1% of acc, at least min(n, 1024), one per stride at a hashed position */
	uint64_t m = n / 100;
	if (m < 1024)
		m = n < 1024 ? n : 1024;
	if (m > sp->cand_cap - 1)
		m = sp->cand_cap - 1;
	uint64_t stride = n / m, seed = scg_seed_derive(sp->cfg.seed, sp->step);
	thrust::counting_iterator<uint64_t> j0(0);
	SCG_TRY(what, thrust::transform(SCG_POLICY, j0, j0 + m, sp->sample,
					sample_key{acc_view{in, res}, seed, stride}));
	sc_status_t s = rd(sp->sample_host, sp->sample, m);
	if (s != SC_OK)
		return s;
	/* the r-th largest sampled key (any exact selection gives kth.c's key) */
	uint64_t r = (uint64_t)((double)k * (double)m / (double)n + 0.5);
	r = r ? r : 1;
	std::nth_element(sp->sample_host, sp->sample_host + (r - 1), sp->sample_host + m,
			 std::greater<uint32_t>());
	float thr = key_to_float(sp->sample_host[r - 1]);
	st->target = k;
	uint64_t lo = (uint64_t)ceil(0.7 * (double)k), hi = (uint64_t)floor(1.3 * (double)k);
	uint64_t q = 0;
	uint32_t passes = 0;
	s = select_run(in, res, n, crit_t{threshold_key(thr), 0, UINT64_MAX}, out, &q, &passes,
		       what);
	if (s != SC_OK)
		return s;
	st->passes = 1;
	acc_view acc{res ? NULL : in, res};
	thrust::counting_iterator<uint64_t> i0(0);
	for (int fix = 0; fix < 3 && (q < lo || q > hi); fix++) {
		if (fix == 0 && res) { /* undo: acc is whole in res again */
			s = scg_coo_scatter_add(res, out->idx, out->val, out->nnz);
			if (s != SC_OK)
				return s;
		}
		out->nnz = 0;
		thr = q > hi ? thr * 1.3f : thr * 0.7f;
		crit_t crit{threshold_key(thr), 0, UINT64_MAX};
		SCG_TRY(what, q = (uint64_t)thrust::count_if(SCG_POLICY, i0, i0 + n,
							     qualifies{acc, crit}));
		st->passes++;
		if (q >= lo && q <= hi)
			break;
	}
	if (out->nnz == 0 && q > 0) {
		s = select_run(acc.in, res, n, crit_t{threshold_key(thr), 0, UINT64_MAX}, out,
			       &q, &passes, what);
		if (s != SC_OK)
			return s;
		st->passes++;
	}
	st->qualified = q;
	st->threshold = thr;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_sparsifier_create(const scg_sparsifier_cfg_t *cfg,
					     scg_sparsifier_t **sp_p)
{
	if (!cfg || !sp_p || cfg->kind > SCG_SPARSIFY_NATURAL || cfg->numel > UINT32_MAX)
		return scg_fail(SC_ERR_INVALID, "scg_sparsifier_create: bad configuration");
	if (cfg->kind == SCG_SPARSIFY_THRESHOLD && !(cfg->threshold > 0))
		return scg_fail(SC_ERR_INVALID, "scg_sparsifier_create: threshold <= 0");
	if ((cfg->kind == SCG_SPARSIFY_TOPK || cfg->kind == SCG_SPARSIFY_DGC) &&
	    !(cfg->density > 0 && cfg->density <= 1))
		return scg_fail(SC_ERR_INVALID, "scg_sparsifier_create: density not in (0, 1]");
	scg_sparsifier_t *sp = new (std::nothrow) scg_sparsifier_t();
	if (!sp)
		return scg_fail(SC_ERR_NOMEM, "scg_sparsifier_create: out of memory");
	sp->cfg = *cfg;
	sp->k = density_to_k(cfg->density, cfg->numel);
	sc_status_t st = scg_alloc(NB_TOP * sizeof(u64), (void **)&sp->hist);
	if (st == SC_OK)
		st = scg_alloc(sizeof(u64), (void **)&sp->scalar);
	if (st == SC_OK && cfg->kind == SCG_SPARSIFY_DGC) {
		sp->cand_cap = cfg->numel / 32 + 4096;
		st = scg_alloc(sp->cand_cap * sizeof(uint32_t), (void **)&sp->sample);
		sp->sample_host = (uint32_t *)malloc(sp->cand_cap * sizeof(uint32_t));
		if (st == SC_OK && !sp->sample_host)
			st = scg_fail(SC_ERR_NOMEM, "scg_sparsifier_create: out of memory");
	}
	if (st != SC_OK) {
		scg_sparsifier_destroy(sp);
		return st;
	}
	*sp_p = sp;
	return SC_OK;
}

extern "C" void scg_sparsifier_destroy(scg_sparsifier_t *sp)
{
	if (!sp)
		return;
	if (sp->hist)
		scg_free(sp->hist);
	if (sp->scalar)
		scg_free(sp->scalar);
	if (sp->sample)
		scg_free(sp->sample);
	free(sp->sample_host);
	delete sp;
}

extern "C" sc_status_t scg_sparsify(scg_sparsifier_t *sp, const float *in, float *residual,
				    uint64_t numel, scg_coo_t *out, scg_select_stats_t *stats_p)
{
	if (!sp || !out || (!in && !residual) || numel > sp->cfg.numel)
		return scg_fail(SC_ERR_INVALID, "scg_sparsify: bad arguments");
	sc_status_t local = SCG_LOCAL("scg_sparsify", in);
	if (local == SC_OK)
		local = SCG_LOCAL("scg_sparsify", residual);
	if (local != SC_OK)
		return local;
	scg_select_stats_t st = {};
	sc_status_t s = SC_OK;
	out->nnz = 0;
	switch (sp->cfg.kind) {
	case SCG_SPARSIFY_THRESHOLD:
	case SCG_SPARSIFY_NATURAL: {
		st.threshold = sp->cfg.kind == SCG_SPARSIFY_THRESHOLD ? sp->cfg.threshold
								      : key_to_float(1);
		crit_t crit{threshold_key(st.threshold), 0, UINT64_MAX};
		s = select_run(in, residual, numel, crit, out, &st.qualified, &st.passes,
			       "scg_sparsify");
		break;
	}
	case SCG_SPARSIFY_TOPK:
		if (numel)
			s = topk_step(sp, in, residual, numel, out, &st);
		break;
	case SCG_SPARSIFY_DGC:
		if (numel)
			s = dgc_step(sp, in, residual, numel, out, &st);
		break;
	default:
		return scg_fail(SC_ERR_UNSUPPORTED, "scg_sparsify: kind %u", sp->cfg.kind);
	}
	sp->step++;
	if (stats_p)
		*stats_p = st;
	return s;
}

extern "C" sc_status_t scg_select_threshold(const float *in, float *residual, uint64_t n,
					    float threshold, scg_coo_t *out,
					    uint64_t *qualified_host)
{
	uint32_t passes = 0;
	crit_t crit{threshold_key(threshold), 0, UINT64_MAX};
	return select_run(in, residual, n, crit, out, qualified_host, &passes,
			  "scg_select_threshold");
}

/* ---- bitmap -------------------------------------------------------------------------- */

namespace
{

struct coo_bad {
	const uint32_t *idx;
	uint64_t numel;
	SCG_HD bool operator()(uint64_t j) const
	{
		return idx[j] >= numel || (j && idx[j] <= idx[j - 1]);
	}
};

struct set_bit {
	const uint32_t *idx;
	u64 *words;
	SCG_HD void operator()(uint64_t j) const
	{
		uint32_t i = idx[j];
		cuda::atomic_ref<u64, cuda::thread_scope_device>(words[i >> 6])
		    .fetch_or(1ull << (i & 63), cuda::std::memory_order_relaxed);
	}
};

struct popcount_op {
	SCG_HD uint64_t operator()(u64 w) const
	{
		return (uint64_t)cuda::std::popcount(w);
	}
};

struct bit_set {
	const u64 *words;
	SCG_HD bool operator()(uint32_t i) const
	{
		return (words[i >> 6] >> (i & 63)) & 1;
	}
};

} // namespace

extern "C" sc_status_t scg_bitmap_encode(const scg_coo_t *src, uint64_t numel, void *buf,
					 uint64_t cap_bytes, uint64_t *bytes_p)
{
	const char *what = "scg_bitmap_encode";
	uint64_t nwords = (numel + 63) / 64, bytes = 8 * nwords + 4 * src->nnz;
	if (bytes > cap_bytes)
		return SC_ERR_LIMIT;
	u64 *words = (u64 *)buf;
	thrust::counting_iterator<uint64_t> j0(0);
	uint64_t bad = 0;
	if (src->nnz)
		SCG_TRY(what, bad = (uint64_t)thrust::count_if(SCG_POLICY, j0, j0 + src->nnz,
							       coo_bad{src->idx, numel}));
	if (bad)
		return SC_ERR_INVALID;
	if (nwords)
		SCG_TRY(what, thrust::fill(SCG_POLICY, words, words + nwords, 0ull));
	if (src->nnz) {
		SCG_TRY(what, thrust::for_each(SCG_POLICY, j0, j0 + src->nnz,
					       set_bit{src->idx, words}));
		SCG_TRY(what, thrust::copy(SCG_POLICY, src->val, src->val + src->nnz,
					   (float *)(words + nwords)));
	}
	*bytes_p = bytes;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_bitmap_decode(const void *buf, uint64_t bytes, uint64_t numel,
					 scg_coo_t *out)
{
	const char *what = "scg_bitmap_decode";
	uint64_t nwords = (numel + 63) / 64, nnz = 0;
	const u64 *words = (const u64 *)buf;
	if (bytes < 8 * nwords)
		return SC_ERR_PROTOCOL;
	if (numel % 64 && nwords) {
		u64 last = 0;
		sc_status_t st = rd(&last, words + nwords - 1, 1);
		if (st != SC_OK)
			return st;
		if (last >> (numel % 64))
			return SC_ERR_PROTOCOL;
	}
	if (nwords)
		SCG_TRY(what, nnz = thrust::transform_reduce(SCG_POLICY, words, words + nwords,
							     popcount_op(), (uint64_t)0,
							     thrust::plus<uint64_t>()));
	if (bytes != 8 * nwords + 4 * nnz)
		return SC_ERR_PROTOCOL;
	if (nnz > out->cap)
		return SC_ERR_LIMIT;
	if (nnz) {
		thrust::counting_iterator<uint32_t> i0(0);
		SCG_TRY(what,
			thrust::copy_if(SCG_POLICY, i0, i0 + numel, out->idx, bit_set{words}));
		const float *v = (const float *)(words + nwords);
		SCG_TRY(what, thrust::copy(SCG_POLICY, v, v + nnz, out->val));
	}
	out->nnz = nnz;
	return SCG_CHECK(what);
}
