/*
 * listops.cu: the GPU device's generic list operations and residual ops (scg.h, section
 * listops.cu); the cpu reference is daemon/device/listops.c and fold.c.
 *
 * Every result is bit-identical to the cpu device's: each output element sees the same
 * single IEEE operation as on the cpu (0.0f + v for a value entering a merge alone, a + b
 * for a sum, share * v for a scaled copy), and counts and positions are exact.
 *
 * residual_add and coo_add_checked run in parallel on a strictly ascending list (no index
 * repeats, so no two additions meet), the touch list by a stable compaction: the same
 * order as the cpu's on both builds. A list whose indices do not ascend strictly runs the
 * cpu's loop on one thread (correct, slow; the engine's lists ascend).
 */
#include "portable.cuh"

#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/permutation_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/merge.h>
#include <thrust/remove.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/unique.h>

#include <cuda/std/bit>

namespace
{

typedef unsigned long long u64;

/* the first entry out of range or not above the one before it */
struct coo_bad {
	const uint32_t *idx;
	uint64_t numel;
	SCG_HD bool operator()(uint64_t i) const
	{
		return idx[i] >= numel || (i && idx[i] <= idx[i - 1]);
	}
};

struct plus_zero {
	SCG_HD float operator()(float v) const
	{
		return 0.0f + v;
	}
};

struct times_share {
	float share;
	SCG_HD float operator()(float v) const
	{
		return share * v;
	}
};

struct nonzero {
	SCG_HD bool operator()(float x) const
	{
		return x != 0.0f;
	}
};

/* After a stable merge of a (first) and b: the first of an equal pair takes a + b, a value
 * alone from b takes 0.0f + v; the pair's second entry is left for unique_by_key to drop
 * (no thread writes it, so the pair's first may read it). */
struct merge_fix {
	const uint32_t *oi;
	float *ov;
	uint64_t m;
	const uint32_t *ai;
	uint64_t an;
	bool zero_alone; /* 0.0f + v for b's alone (merge_two), else values as they are */
	SCG_HD void operator()(uint64_t k) const
	{
		uint32_t key = oi[k];
		if (k + 1 < m && oi[k + 1] == key) {
			ov[k] = ov[k] + ov[k + 1];
			return;
		}
		if (!zero_alone || (k && oi[k - 1] == key))
			return;
		uint64_t lo = 0, hi = an; /* alone: from b unless a has the index */
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (ai[mid] < key)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == an || ai[lo] != key)
			ov[k] = 0.0f + ov[k];
	}
};

struct aside_op {
	float *acc;
	const float *x, *res;
	SCG_HD void operator()(uint64_t k) const
	{
		acc[k] = x[k] + res[k];
	}
};

struct drain_op {
	float *x, *res;
	SCG_HD void operator()(uint64_t k) const
	{
		x[k] += res[k];
		res[k] = 0;
	}
};

struct bits_word {
	const float *res;
	uint64_t n;
	SCG_HD u64 operator()(uint64_t w) const
	{
		u64 word = 0;
		uint64_t base = w * 64, end = n - base < 64 ? n - base : 64;
		for (uint64_t b = 0; b < end; b++)
			if (res[base + b] != 0)
				word |= 1ull << b;
		return word;
	}
};

struct popcount_op {
	SCG_HD uint64_t operator()(u64 w) const
	{
		return (uint64_t)cuda::std::popcount(w);
	}
};

struct bit_or {
	u64 *words;
	SCG_HD void operator()(uint32_t i) const
	{
		cuda::atomic_ref<u64, cuda::thread_scope_device>(words[i >> 6])
		    .fetch_or(1ull << (i & 63), cuda::std::memory_order_relaxed);
	}
};

/* res[idx[j]] was exactly zero (before this call's additions: indices unique) */
struct res_zero_at {
	const float *res;
	const uint32_t *idx;
	SCG_HD bool operator()(uint64_t j) const
	{
		return res[idx[j]] == 0;
	}
};

struct add_at {
	float *dst;
	const uint32_t *idx;
	const float *val;
	SCG_HD void operator()(uint64_t j) const
	{
		dst[idx[j]] += val[j];
	}
};

struct add_at_checked {
	float *dst;
	uint64_t numel;
	const uint32_t *idx;
	const float *val;
	SCG_HD void operator()(uint64_t j) const
	{
		if (idx[j] < numel)
			dst[idx[j]] += val[j];
	}
};

struct at_or_above {
	uint64_t numel;
	SCG_HD bool operator()(uint32_t i) const
	{
		return i >= numel;
	}
};

/* The cpu's loop, by one thread, for lists whose indices repeat (in order, so the sums and
 * the touch list are the cpu's); returns the touch list's new length or the skipped
 * count. */
struct serial_residual_add {
	float *res;
	const uint32_t *idx;
	const float *val;
	uint64_t n;
	uint32_t *touch;
	uint64_t t;
	SCG_HD uint64_t operator()(uint64_t) const
	{
		uint64_t w = t;
		for (uint64_t j = 0; j < n; j++) {
			uint32_t i = idx[j];
			if (touch && res[i] == 0)
				touch[w++] = i;
			res[i] += val[j];
		}
		return w;
	}
};

struct serial_add_checked {
	float *dst;
	uint64_t numel;
	const uint32_t *idx;
	const float *val;
	uint64_t n;
	SCG_HD uint64_t operator()(uint64_t) const
	{
		uint64_t bad = 0;
		for (uint64_t j = 0; j < n; j++) {
			if (idx[j] < numel)
				dst[idx[j]] += val[j];
			else
				bad++;
		}
		return bad;
	}
};

/* After a stable merge of in (first) and the residual's entries: the first of an equal pair
 * takes in + res (the pair's second is left for unique_by_key to drop). */
struct fold_fix {
	const uint32_t *oi;
	float *ov;
	uint64_t m;
	SCG_HD void operator()(uint64_t k) const
	{
		if (k + 1 < m && oi[k + 1] == oi[k])
			ov[k] = ov[k] + ov[k + 1];
	}
};

struct bit_is_set {
	const u64 *words;
	SCG_HD bool operator()(uint32_t i) const
	{
		return (words[i >> 6] >> (i & 63)) & 1;
	}
};

struct zero_entry {
	SCG_HD bool operator()(thrust::tuple<uint32_t, float> e) const
	{
		return thrust::get<1>(e) == 0;
	}
};

struct zero_at {
	float *res;
	SCG_HD void operator()(uint32_t i) const
	{
		res[i] = 0;
	}
};

/* val[j] = src[idx[j]], src[idx[j]] = 0 with take (unique indices: no two threads meet) */
struct gather_at {
	float *val, *src;
	const uint32_t *idx;
	int take;
	SCG_HD void operator()(uint64_t j) const
	{
		val[j] = src[idx[j]];
		if (take)
			src[idx[j]] = 0.0f;
	}
};

/* val[j] = the list's value at idx[j] (binary search; 0 where absent), taken with take */
struct coo_gather_at {
	float *val;
	const uint32_t *idx;
	const uint32_t *li;
	float *lv;
	uint64_t ln;
	int take;
	SCG_HD void operator()(uint64_t j) const
	{
		uint32_t v = idx[j];
		uint64_t lo = 0, hi = ln;
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (li[mid] < v)
				lo = mid + 1;
			else
				hi = mid;
		}
		int found = lo < ln && li[lo] == v;
		val[j] = found ? lv[lo] : 0.0f;
		if (found && take)
			lv[lo] = 0.0f;
	}
};

} // namespace

extern "C" sc_status_t scg_coo_check(const uint32_t *idx, uint64_t nnz, uint64_t numel,
				     uint64_t *pos_host)
{
	const char *what = "scg_coo_check"; /* SCG_TRY needs a variable named what */
	uint64_t pos = nnz;
	if (nnz) {
		thrust::counting_iterator<uint64_t> first(0);
		SCG_TRY(what, pos = (uint64_t)(thrust::find_if(SCG_POLICY, first, first + nnz,
							       coo_bad{idx, numel}) -
					       first));
	}
	*pos_host = pos;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_lower_bound(const uint32_t *a, uint64_t n, uint64_t v,
				       uint64_t *pos_host)
{
	const char *what = "scg_lower_bound";
	uint64_t pos = n;
	if (n && v <= UINT32_MAX) /* above every uint32_t: n */
		SCG_TRY(what, pos = (uint64_t)(thrust::lower_bound(SCG_POLICY, a, a + n,
								   (uint32_t)v) -
					       a));
	*pos_host = pos;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_copy_first(uint32_t *oi, float *ov, const uint32_t *idx,
					  const float *val, uint64_t nnz)
{
	const char *what = "scg_coo_copy_first";
	if (!nnz)
		return SC_OK;
	SCG_TRY(what, thrust::copy(SCG_POLICY, idx, idx + nnz, oi));
	SCG_TRY(what, thrust::transform(SCG_POLICY, val, val + nnz, ov, plus_zero()));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_scale_copy(uint32_t *oi, float *ov, const uint32_t *idx,
					  const float *val, uint64_t n, float share)
{
	const char *what = "scg_coo_scale_copy";
	if (!n)
		return SC_OK;
	if (oi != idx)
		SCG_TRY(what, thrust::copy(SCG_POLICY, idx, idx + n, oi));
	if (share == 1.0f) {
		if (ov != val)
			SCG_TRY(what, thrust::copy(SCG_POLICY, val, val + n, ov));
	} else {
		SCG_TRY(what,
			thrust::transform(SCG_POLICY, val, val + n, ov, times_share{share}));
	}
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_range_counts(const float *g, uint64_t numel, uint32_t P,
					uint64_t *counts_host)
{
	const char *what = "scg_range_counts";
	for (uint64_t p = 0; p < P; p++) {
		uint64_t lo = p * numel / P, hi = (p + 1) * numel / P, c = 0;
		if (hi > lo)
			SCG_TRY(what, c = (uint64_t)thrust::count_if(SCG_POLICY, g + lo, g + hi,
								     nonzero()));
		counts_host[p] = c;
	}
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_range_counts(const uint32_t *idx, const float *val, uint64_t nnz,
					    uint64_t numel, uint32_t P, uint64_t *counts_host)
{
	const char *what = "scg_coo_range_counts";
	uint64_t k = 0;
	for (uint64_t p = 0; p < P; p++) {
		/* the entries below range p's end, past the ones counted (indices ascend) */
		uint64_t hi = (p + 1) * numel / P, end = k, c = 0;
		if (k < nnz && hi <= UINT32_MAX)
			SCG_TRY(what,
				end = (uint64_t)(thrust::lower_bound(SCG_POLICY, idx + k,
								     idx + nnz, (uint32_t)hi) -
						 idx));
		else if (k < nnz)
			end = nnz;
		if (end > k)
			SCG_TRY(what, c = (uint64_t)thrust::count_if(SCG_POLICY, val + k,
								     val + end, nonzero()));
		counts_host[p] = c;
		k = end;
	}
	return SCG_CHECK(what);
}

sc_status_t scg_merge_union(const char *what, const uint32_t *ai, const float *av, uint64_t an,
			    const uint32_t *bi, const float *bv, uint64_t bn, uint32_t *oi,
			    float *ov, bool zero_alone, uint64_t *nnz_host)
{
	uint64_t m = an + bn, w = 0;
	if (m) {
		/* stable: a's entry first on an equal index */
		SCG_TRY(what, thrust::merge_by_key(SCG_POLICY, ai, ai + an, bi, bi + bn, av, bv,
						   oi, ov));
		thrust::counting_iterator<uint64_t> first(0);
		SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + m,
					       merge_fix{oi, ov, m, ai, an, zero_alone}));
		SCG_TRY(what,
			w = (uint64_t)(thrust::unique_by_key(SCG_POLICY, oi, oi + m, ov).first -
				       oi));
	}
	*nnz_host = w;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_merge_two(const uint32_t *ai, const float *av, uint64_t an,
				     const uint32_t *bi, const float *bv, uint64_t bn,
				     uint32_t *oi, float *ov, uint64_t *nnz_host)
{
	return scg_merge_union("scg_merge_two", ai, av, an, bi, bv, bn, oi, ov, true, nnz_host);
}

extern "C" sc_status_t scg_residual_drain(float *x, float *res, uint64_t n)
{
	const char *what = "scg_residual_drain";
	if (!n)
		return SC_OK;
	sc_status_t st = SCG_LOCAL(what, x);
	if (st == SC_OK)
		st = SCG_LOCAL(what, res);
	if (st != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> first(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + n, drain_op{x, res}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_acc_aside(float *acc, const float *x, const float *res, uint64_t n)
{
	const char *what = "scg_acc_aside";
	if (!n)
		return SC_OK;
	sc_status_t st = SCG_LOCAL(what, acc);
	if (st == SC_OK)
		st = SCG_LOCAL(what, x);
	if (st == SC_OK)
		st = SCG_LOCAL(what, res);
	if (st != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> first(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + n, aside_op{acc, x, res}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_residual_bits(const float *res, uint64_t n, uint64_t *bits,
					 uint64_t *count_host)
{
	const char *what = "scg_residual_bits";
	uint64_t nw = (n + 63) / 64, c = 0;
	if (nw) {
		u64 *words = (u64 *)bits;
		thrust::counting_iterator<uint64_t> first(0);
		SCG_TRY(what, thrust::transform(SCG_POLICY, first, first + nw, words,
						bits_word{res, n}));
		SCG_TRY(what, c = thrust::transform_reduce(SCG_POLICY, words, words + nw,
							   popcount_op(), (uint64_t)0,
							   thrust::plus<uint64_t>()));
	}
	*count_host = c;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_bits_set(uint64_t *bits, const uint32_t *idx, uint64_t n)
{
	const char *what = "scg_bits_set";
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::for_each(SCG_POLICY, idx, idx + n, bit_or{(u64 *)bits}));
	return SCG_CHECK(what);
}

/* Whether idx[0, n) is strictly ascending (so no index repeats). */
static sc_status_t ascending(const uint32_t *idx, uint64_t n, bool *yes, const char *what)
{
	uint64_t pos = n;
	thrust::counting_iterator<uint64_t> first(0);
	SCG_TRY(what, pos = (uint64_t)(thrust::find_if(SCG_POLICY, first, first + n,
						       coo_bad{idx, UINT64_MAX}) -
				       first));
	*yes = pos == n;
	return SC_OK;
}

extern "C" sc_status_t scg_residual_add(float *res, const uint32_t *idx, const float *val,
					uint64_t n, uint32_t *touch, uint64_t *n_touch_host)
{
	const char *what = "scg_residual_add";
	if (!n)
		return SC_OK;
	bool uniq = false;
	sc_status_t st = ascending(idx, n, &uniq, what);
	if (st != SC_OK)
		return st;
	uint64_t t = touch ? *n_touch_host : 0;
	thrust::counting_iterator<uint64_t> first(0);
	if (uniq) {
		/* the touched indices, in list order (a stable compaction: the cpu's order) */
		if (touch)
			SCG_TRY(what, t += (uint64_t)(thrust::copy_if(SCG_POLICY, idx, idx + n,
								      first, touch + t,
								      res_zero_at{res, idx}) -
						      (touch + t)));
		SCG_TRY(what,
			thrust::for_each(SCG_POLICY, first, first + n, add_at{res, idx, val}));
	} else {
		SCG_TRY(what, t = thrust::transform_reduce(
				  SCG_POLICY, first, first + 1,
				  serial_residual_add{res, idx, val, n, touch, t}, (uint64_t)0,
				  thrust::plus<uint64_t>()));
	}
	if (touch)
		*n_touch_host = t;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_add_checked(float *dst, uint64_t numel, const uint32_t *idx,
					   const float *val, uint64_t nnz, uint64_t *bad_host)
{
	const char *what = "scg_coo_add_checked";
	uint64_t bad = 0;
	sc_status_t lst = SCG_LOCAL(what, dst);
	if (lst == SC_OK)
		lst = SCG_LOCAL(what, idx);
	if (lst == SC_OK)
		lst = SCG_LOCAL(what, val);
	if (lst != SC_OK)
		return lst;
	if (nnz) {
		bool uniq = false;
		sc_status_t st = ascending(idx, nnz, &uniq, what);
		if (st != SC_OK)
			return st;
		thrust::counting_iterator<uint64_t> first(0);
		if (uniq) {
			SCG_TRY(what, bad = (uint64_t)thrust::count_if(
					  SCG_POLICY, idx, idx + nnz, at_or_above{numel}));
			SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + nnz,
						       add_at_checked{dst, numel, idx, val}));
		} else {
			SCG_TRY(what, bad = thrust::transform_reduce(
					  SCG_POLICY, first, first + 1,
					  serial_add_checked{dst, numel, idx, val, nnz},
					  (uint64_t)0, thrust::plus<uint64_t>()));
		}
	}
	*bad_host = bad;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_fold_residual(const uint32_t *in_idx, const float *in_val,
					     uint64_t in_nnz, float *res, uint64_t *bits,
					     uint64_t numel, uint32_t *oi, float *ov,
					     uint64_t *nnz_host)
{
	const char *what = "scg_coo_fold_residual";
	uint64_t nw = (numel + 63) / 64, nb = 0, m = 0;
	u64 *words = (u64 *)bits;
	if (nw)
		SCG_TRY(what, nb = thrust::transform_reduce(SCG_POLICY, words, words + nw,
							    popcount_op(), (uint64_t)0,
							    thrust::plus<uint64_t>()));
	uint32_t *ridx = NULL;
	sc_status_t st = scg_alloc((nb ? nb : 1) * 4, (void **)&ridx);
	if (st != SC_OK)
		return st;
	try {
		thrust::counting_iterator<uint32_t> all(0);
		if (nb) /* the residual's indices, ascending */
			thrust::copy_if(SCG_POLICY, all, all + numel, ridx, bit_is_set{words});
		uint64_t t = in_nnz + nb;
		if (t) {
			auto rval = thrust::make_permutation_iterator(res, ridx);
			thrust::merge_by_key(SCG_POLICY, in_idx, in_idx + in_nnz, ridx,
					     ridx + nb, in_val, rval, oi, ov);
			thrust::counting_iterator<uint64_t> first(0);
			thrust::for_each(SCG_POLICY, first, first + t, fold_fix{oi, ov, t});
			m = (uint64_t)(thrust::unique_by_key(SCG_POLICY, oi, oi + t, ov).first -
				       oi);
			auto z = thrust::make_zip_iterator(thrust::make_tuple(oi, ov));
			m = (uint64_t)(thrust::remove_if(SCG_POLICY, z, z + m, zero_entry()) -
				       z);
		}
		if (nb)
			thrust::for_each(SCG_POLICY, ridx, ridx + nb, zero_at{res});
		if (nw)
			thrust::fill(SCG_POLICY, words, words + nw, (u64)0);
	} catch (const std::exception &ex_) {
		scg_free(ridx);
		return scg_fail(SC_ERR_SYSTEM, "%s: %s", what, ex_.what());
	}
	st = SCG_CHECK(what);
	sc_status_t st2 = scg_free(ridx);
	*nnz_host = m;
	return st != SC_OK ? st : st2;
}

extern "C" sc_status_t scg_gather(float *val, float *src, const uint32_t *idx, uint64_t n,
				  int take)
{
	const char *what = "scg_gather";
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::for_each_n(SCG_POLICY, thrust::counting_iterator<uint64_t>(0), n,
					 gather_at{val, src, idx, take}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_gather(float *val, const uint32_t *idx, uint64_t n,
				      const uint32_t *list_idx, float *list_val,
				      uint64_t list_nnz, int take)
{
	const char *what = "scg_coo_gather";
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::for_each_n(
			  SCG_POLICY, thrust::counting_iterator<uint64_t>(0), n,
			  coo_gather_at{val, idx, list_idx, list_val, list_nnz, take}));
	return SCG_CHECK(what);
}
