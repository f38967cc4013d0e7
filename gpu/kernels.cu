/*
 * kernels.cu: the GPU device's kernels for the scheme layer's messages (the cpu reference
 * is daemon/device/msgops.c), its per-scheme kernels (scheme_kernels.c) and the top-k of
 * a COO list (listops.c, scd_coo_topk); scg.h, section kernels.cu.
 *
 * Every result is the cpu device's, bit for bit: counts, positions, encodings and index
 * lists are exact, values are copied, and the one float expression (sub_scaled:
 * res - x * f) rounds the product before the subtraction, as the cpu does (x86-64-v2
 * has no fused multiply-add): __fmul_rn / __fsub_rn on the GPU, which nvcc never fuses.
 *
 * The runs of a message are found from their boundaries: a run starts where an index is
 * not the one before it plus one (uint32_t arithmetic, as the cpu's), so the k-th start
 * and the k-th end (stream compactions that report their rank) give run k; a run's length
 * is its last index minus its first plus one (mod 2^32, the cpu's (uint32_t)(j - i)).
 * Decoding checks every run at once (empty, overlapping the one before, past numel; the
 * lengths' sum against max: the cpu fails on the first run past max exactly when the sum
 * is past it), then expands by a scan of the lengths and, per output index, a binary
 * search for its run. On malformed input it writes nothing.
 *
 * coo_block_runs: position p > 0 continues the run of p - 1 exactly when idx[p] is above
 * idx[p - 1] and below the end of idx[p - 1]'s block: every index of a run lies in the
 * block of its first (bnd ascending), so this is the cpu's condition. The starts are
 * compacted with their rank (only the first max + 1 kept, with their block, or a mark for
 * an index >= numel) and the host builds the cpu's run table from them.
 *
 * coo_topk: the k-th largest magnitude key T and the number above it (gt) by select.cu's
 * radix select (scg_radix.cuh: three digit histograms over the list's values), each
 * digit's bucket picked on the device from the histogram's suffix sums, so nothing is
 * read back (the count kept is min(k, n)); then the position of the (k - gt)-th key equal
 * to T (a compaction that records one rank) and a stable partition (key > T, or == T up
 * to that position) into the scratch and a copy back: no sort. k = 0 and k >= n leave the
 * list as it is, as the cpu does.
 *
 * Scratch beyond the arguments (lower_bounds' tables, coo_block_runs' starts, runs_decode's
 * offsets, coo_topk's histogram, the rare partly aliased compaction) is Thrust's temporary
 * memory on the calling thread's policy, taken and given back within the call as Thrust's
 * own algorithms do with theirs (stream-ordered: no wait for the work that reads it).
 */
#include "portable.cuh"
#include "scg_radix.cuh"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/reverse_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/memory.h>
#include <thrust/merge.h>
#include <thrust/partition.h>
#include <thrust/remove.h>
#include <thrust/scan.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/unique.h>

#include <cstddef>
#include <cstdint>

namespace
{

/* Temporary device memory for one call (Thrust's, on the calling thread's policy). */
template <class T> class scratch
{
	typedef decltype(thrust::get_temporary_buffer<T>(SCG_POLICY, 1)) buf_t;
	buf_t buf_;
	bool held_ = false;

      public:
	T *p = nullptr;
	scratch() = default;
	scratch(const scratch &) = delete;
	scratch &operator=(const scratch &) = delete;
	sc_status_t get(uint64_t n, const char *what)
	{
		try {
			buf_ = thrust::get_temporary_buffer<T>(SCG_POLICY,
							       (std::ptrdiff_t)(n ? n : 1));
		} catch (const std::exception &ex_) {
			return scg_fail(SC_ERR_NOMEM, "%s: scratch of %llu: %s", what,
					(unsigned long long)n, ex_.what());
		}
		p = thrust::raw_pointer_cast(buf_.first);
		if (!p || (uint64_t)buf_.second < (n ? n : 1))
			return scg_fail(SC_ERR_NOMEM, "%s: scratch of %llu: out of memory",
					what, (unsigned long long)n);
		held_ = true;
		return SC_OK;
	}
	~scratch()
	{
		if (!held_)
			return;
		try {
			thrust::return_temporary_buffer(SCG_POLICY, buf_.first, buf_.second);
		} catch (const std::exception &) { /* nothing to report to */
		}
	}
};

/* A u32 field at any alignment (the runs of a message, little-endian as the host's). */
SCG_HD inline uint32_t ld32(const uint8_t *p, bool aligned)
{
	if (aligned)
		return *(const uint32_t *)p;
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

SCG_HD inline void st32(uint8_t *p, uint32_t v, bool aligned)
{
	if (aligned) {
		*(uint32_t *)p = v;
		return;
	}
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

inline bool aligned4(const void *p)
{
	return ((uintptr_t)p & 3) == 0;
}

/* ---- messages ---- */

/* i > 0 is not idx[i - 1] + 1 (uint32_t arithmetic, as the cpu's) */
struct run_break {
	const uint32_t *idx;
	SCG_HD bool operator()(uint64_t i) const
	{
		return idx[i] != idx[i - 1] + 1u;
	}
};

struct run_start {
	const uint32_t *idx;
	SCG_HD bool operator()(uint64_t i) const
	{
		return i == 0 || idx[i] != idx[i - 1] + 1u;
	}
};

struct run_end {
	const uint32_t *idx;
	uint64_t n;
	SCG_HD bool operator()(uint64_t i) const
	{
		return i + 1 == n || idx[i + 1] != idx[i] + 1u;
	}
};

/* run r's start: idx at its first position */
struct put_start {
	const uint32_t *idx;
	uint8_t *runs;
	bool aligned;
	SCG_HD void operator()(uint64_t r, uint64_t i) const
	{
		st32(runs + 8 * r, idx[i], aligned);
	}
};

/* run r's length from its last position (its start already written) */
struct put_len {
	const uint32_t *idx;
	uint8_t *runs;
	bool aligned;
	SCG_HD void operator()(uint64_t r, uint64_t i) const
	{
		uint32_t start = ld32(runs + 8 * r, aligned);
		st32(runs + 8 * r + 4, idx[i] - start + 1u, aligned);
	}
};

struct out_of_span {
	const uint32_t *idx;
	uint64_t lo, span;
	SCG_HD bool operator()(uint64_t i) const
	{
		return (uint64_t)idx[i] - lo >= span;
	}
};

struct set_bit_at {
	const uint32_t *idx;
	uint64_t lo;
	u64 *words;
	SCG_HD void operator()(uint64_t i) const
	{
		uint64_t x = (uint64_t)idx[i] - lo;
		cuda::atomic_ref<u64, cuda::thread_scope_device>(words[x >> 6])
		    .fetch_or(1ull << (x & 63), cuda::std::memory_order_relaxed);
	}
};

#define RUNS_BAD (1ull << 63) /* a malformed run, or a sum past every max */

/* run k's length, or RUNS_BAD when the cpu would reject it (max apart) */
struct run_len_checked {
	const uint8_t *runs;
	uint64_t numel;
	bool aligned;
	SCG_HD uint64_t operator()(uint64_t k) const
	{
		uint64_t start = ld32(runs + 8 * k, aligned),
			 len = ld32(runs + 8 * k + 4, aligned);
		if (!len || start + len > numel)
			return RUNS_BAD;
		if (k) {
			uint64_t ps = ld32(runs + 8 * (k - 1), aligned),
				 pl = ld32(runs + 8 * (k - 1) + 4, aligned);
			if (start < ps + pl)
				return RUNS_BAD;
		}
		return len;
	}
};

/* a + b, saturating at RUNS_BAD (associative) */
struct sum_sat {
	SCG_HD uint64_t operator()(uint64_t a, uint64_t b) const
	{
		if (a >= RUNS_BAD || b >= RUNS_BAD)
			return RUNS_BAD;
		uint64_t s = a + b;
		return s >= RUNS_BAD ? RUNS_BAD : s;
	}
};

struct run_len {
	const uint8_t *runs;
	bool aligned;
	SCG_HD uint64_t operator()(uint64_t k) const
	{
		return ld32(runs + 8 * k + 4, aligned);
	}
};

/* output j: the run whose offset is the last <= j, and its start plus the distance */
struct expand_run {
	const uint8_t *runs;
	const u64 *off;
	uint64_t nruns;
	uint32_t *idx;
	bool aligned;
	SCG_HD void operator()(uint64_t j) const
	{
		uint64_t lo = 0, hi = nruns; /* first offset > j, minus one */
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (off[mid] <= j)
				lo = mid + 1;
			else
				hi = mid;
		}
		uint64_t k = lo - 1;
		idx[j] = ld32(runs + 8 * k, aligned) + (uint32_t)(j - off[k]);
	}
};

struct add_u32 {
	uint32_t add;
	SCG_HD uint32_t operator()(uint32_t x) const
	{
		return x + add;
	}
};

/* ---- per-scheme kernels ---- */

/* pos[l * nv + k]: lower bound of v[k] in list l (tab: off[nlists + 1], v[nv]) */
struct lower_bounds_op {
	const uint32_t *a;
	const u64 *off, *v;
	uint32_t nv;
	u64 *pos;
	SCG_HD void operator()(uint64_t t) const
	{
		uint64_t l = t / nv, k = t % nv;
		const uint32_t *list = a + off[l];
		uint64_t lo = 0, hi = off[l + 1] - off[l], x = v[k];
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (list[mid] < x)
				lo = mid + 1;
			else
				hi = mid;
		}
		pos[t] = lo;
	}
};

struct range_bad {
	const uint32_t *idx;
	uint64_t lo, hi;
	SCG_HD bool operator()(uint64_t k) const
	{
		return idx[k] < lo || idx[k] >= hi || (k && idx[k] <= idx[k - 1]);
	}
};

typedef thrust::tuple<uint32_t, float> entry_t;

struct entry_nonzero {
	SCG_HD bool operator()(const entry_t &e) const
	{
		return thrust::get<1>(e) != 0;
	}
};

struct entry_zero {
	SCG_HD bool operator()(const entry_t &e) const
	{
		return !(thrust::get<1>(e) != 0);
	}
};

struct entry_mod {
	uint32_t d, t;
	bool keep;
	SCG_HD bool operator()(const entry_t &e) const
	{
		return (thrust::get<0>(e) % d == t) == keep;
	}
};

/* After a stable merge of a (first) and b, the first of an equal pair takes a + b (the
 * pair's second, which no thread writes, is dropped by unique_by_key). */
/* The block holding index i: the last b with bnd[b] <= i (scheme_kernels.c's block_of). */
SCG_HD inline uint32_t block_of(const u64 *bnd, uint32_t nb, uint32_t i)
{
	uint32_t lo = 0, hi = nb - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;
		if (bnd[mid] <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* p starts a run: p == 0, or idx[p] not above idx[p - 1] or not below the end of its
 * block (an index >= numel never continues a run: the scan stops at it) */
struct block_run_start {
	const uint32_t *idx;
	const u64 *bnd;
	uint32_t nb;
	uint64_t numel;
	SCG_HD bool operator()(uint64_t p) const
	{
		if (p == 0)
			return true;
		uint32_t prev = idx[p - 1], x = idx[p];
		if (prev >= numel || x <= prev)
			return true;
		return x >= bnd[block_of(bnd, nb, prev) + 1];
	}
};

#define BLOCK_BAD UINT32_MAX /* a run start at an index >= numel */

struct start_rec {
	u64 pos;
	uint32_t block;
};

/* the first cap starts, by rank: position and block */
struct put_block_start {
	const uint32_t *idx;
	const u64 *bnd;
	uint32_t nb;
	uint64_t numel, cap;
	start_rec *rec;
	SCG_HD void operator()(uint64_t r, uint64_t p) const
	{
		if (r >= cap)
			return;
		uint32_t x = idx[p];
		rec[r].pos = p;
		rec[r].block = x >= numel ? BLOCK_BAD : block_of(bnd, nb, x);
	}
};

/* res - x * f, the product rounded first (no fused multiply-add) */
struct sub_scaled_op {
	float f;
	SCG_HD float operator()(float res, float x) const
	{
#if defined(__CUDA_ARCH__)
		return __fsub_rn(res, __fmul_rn(x, f));
#else
		float p = x * f;
		return res - p;
#endif
	}
};

/* ---- coo_topk ---- */

/* The radix select's state, in device memory: the prefix of the k-th largest key found so
 * far (T), how many of the k are still to be found among the keys with that prefix
 * (remaining), how many keys are larger (gt), and the position of the last tie kept
 * (tiecut). */
struct topk_state {
	u64 remaining, gt, tiecut;
	uint32_t T;
};

/* kth.c's pick from the suffix sums of the histogram (suf[j]: buckets nb - 1 - j and
 * above): the bucket holding the remaining-th largest key, the first j with
 * suf[j] >= remaining (bucket 0 when none is) */
struct pick_on_device {
	const u64 *hist, *suf;
	uint32_t nb;
	int shift;
	topk_state *st;
	SCG_HD void operator()(uint64_t) const
	{
		uint64_t rem = st->remaining;
		uint32_t lo = 0, hi = nb - 1;
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			if (suf[mid] >= rem)
				hi = mid;
			else
				lo = mid + 1;
		}
		uint32_t b = nb - 1 - lo;
		uint64_t above = suf[lo] - hist[b];
		st->remaining = rem - above;
		st->gt += above;
		st->T |= b << shift;
	}
};

struct key_is_T {
	const float *val;
	const topk_state *st;
	SCG_HD bool operator()(uint64_t i) const
	{
		return abs_key(val[i]) == st->T;
	}
};

/* the position of the remaining-th key equal to T: the ties up to it are kept */
struct record_tiecut {
	topk_state *st;
	SCG_HD void operator()(uint64_t r, uint64_t i) const
	{
		if (r + 1 == st->remaining)
			st->tiecut = i;
	}
};

/* kept: key above T, or equal to it at a position up to tiecut */
struct topk_keep {
	const float *val;
	const topk_state *st;
	SCG_HD bool operator()(uint64_t i) const
	{
		uint32_t key = abs_key(val[i]), T = st->T;
		return key > T || (key == T && i <= st->tiecut);
	}
};

template <class T> sc_status_t rd(T *dst_host, const T *src, size_t n)
{
	return scg_to_host(dst_host, src, n * sizeof(T));
}

} // namespace

/* ---- messages (msgops.h) ------------------------------------------------------------ */

extern "C" sc_status_t scg_idx_count_runs(const uint32_t *idx, uint64_t n, uint64_t *count_host)
{
	const char *what = "scg_idx_count_runs";
	uint64_t c = n > 0;
	if (n > 1) {
		thrust::counting_iterator<uint64_t> i1(1);
		SCG_TRY(what, c += (uint64_t)thrust::count_if(SCG_POLICY, i1, i1 + (n - 1),
							      run_break{idx}));
	}
	*count_host = c;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_idx_runs_encode(const uint32_t *idx, uint64_t n, void *runs)
{
	const char *what = "scg_idx_runs_encode";
	if (!n)
		return SC_OK;
	uint8_t *r = (uint8_t *)runs;
	bool al = aligned4(r);
	thrust::counting_iterator<uint64_t> i0(0);
	SCG_TRY(what,
		thrust::copy_if(SCG_POLICY, i0, i0 + n,
				thrust::make_tabulate_output_iterator(put_start{idx, r, al}),
				run_start{idx}));
	SCG_TRY(what,
		thrust::copy_if(SCG_POLICY, i0, i0 + n,
				thrust::make_tabulate_output_iterator(put_len{idx, r, al}),
				run_end{idx, n}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_idx_bitmap_encode(const uint32_t *idx, uint64_t n, uint64_t lo,
					     uint64_t span, uint64_t *words, uint64_t *pos_host)
{
	const char *what = "scg_idx_bitmap_encode";
	uint64_t nw = (span + 63) / 64, pos = n;
	u64 *w = (u64 *)words;
	if (nw)
		SCG_TRY(what, thrust::fill(SCG_POLICY, w, w + nw, 0ull));
	if (n) {
		thrust::counting_iterator<uint64_t> i0(0);
		SCG_TRY(what, pos = (uint64_t)(thrust::find_if(SCG_POLICY, i0, i0 + n,
							       out_of_span{idx, lo, span}) -
					       i0));
		if (pos)
			SCG_TRY(what, thrust::for_each(SCG_POLICY, i0, i0 + pos,
						       set_bit_at{idx, lo, w}));
	}
	*pos_host = pos;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_runs_decode(const void *runs, uint64_t nruns, uint64_t numel,
				       uint64_t max, uint32_t *idx, uint64_t *n_host)
{
	const char *what = "scg_runs_decode";
	const uint8_t *r = (const uint8_t *)runs;
	bool al = aligned4(r);
	uint64_t total = 0;
	*n_host = UINT64_MAX;
	if (nruns) {
		thrust::counting_iterator<uint64_t> k0(0);
		SCG_TRY(what, total = thrust::transform_reduce(SCG_POLICY, k0, k0 + nruns,
							       run_len_checked{r, numel, al},
							       (uint64_t)0, sum_sat()));
		if (total >= RUNS_BAD ||
		    total > max) /* malformed or past max: nothing written */
			return SCG_CHECK(what);
		scratch<u64> off;
		sc_status_t st = off.get(nruns, what);
		if (st != SC_OK)
			return st;
		auto lens = thrust::make_transform_iterator(k0, run_len{r, al});
		SCG_TRY(what,
			thrust::exclusive_scan(SCG_POLICY, lens, lens + nruns, off.p, (u64)0));
		thrust::counting_iterator<uint64_t> j0(0);
		SCG_TRY(what, thrust::for_each(SCG_POLICY, j0, j0 + total,
					       expand_run{r, off.p, nruns, idx, al}));
		st = SCG_CHECK(what);
		if (st != SC_OK)
			return st;
	}
	*n_host = total;
	return SC_OK;
}

extern "C" sc_status_t scg_idx_add(uint32_t *idx, uint64_t n, uint32_t add)
{
	const char *what = "scg_idx_add";
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::transform(SCG_POLICY, idx, idx + n, idx, add_u32{add}));
	return SCG_CHECK(what);
}

/* ---- per-scheme kernels (scheme_kernels.h) ------------------------------------------ */

extern "C" sc_status_t scg_lower_bounds(const uint32_t *a, const uint64_t *off_host,
					uint32_t nlists, const uint64_t *v_host, uint32_t nv,
					uint64_t *pos_host)
{
	const char *what = "scg_lower_bounds";
	uint64_t np = (uint64_t)nlists * nv;
	if (!np)
		return SC_OK;
	/* one table: off[nlists + 1], v[nv], pos[nlists x nv] */
	scratch<u64> tab;
	sc_status_t st = tab.get(nlists + 1 + (uint64_t)nv + np, what);
	if (st != SC_OK)
		return st;
	u64 *off = tab.p, *v = off + nlists + 1, *pos = v + nv;
	st = scg_from_host(off, off_host, 8 * ((uint64_t)nlists + 1));
	if (st == SC_OK)
		st = scg_from_host(v, v_host, 8 * (uint64_t)nv);
	if (st != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> t0(0);
	SCG_TRY(what,
		thrust::for_each(SCG_POLICY, t0, t0 + np, lower_bounds_op{a, off, v, nv, pos}));
	st = SCG_CHECK(what);
	if (st != SC_OK)
		return st;
	return rd(pos_host, (const uint64_t *)pos, np);
}

extern "C" sc_status_t scg_idx_check_range(const uint32_t *idx, uint64_t n, uint64_t lo,
					   uint64_t hi, uint64_t *pos_host)
{
	const char *what = "scg_idx_check_range";
	uint64_t pos = n;
	if (n) {
		thrust::counting_iterator<uint64_t> k0(0);
		SCG_TRY(what, pos = (uint64_t)(thrust::find_if(SCG_POLICY, k0, k0 + n,
							       range_bad{idx, lo, hi}) -
					       k0));
	}
	*pos_host = pos;
	return SCG_CHECK(what);
}

/* The entries of (idx, val)[0, n) that keep says, in order, into (oi, ov): in place when
 * both are the inputs, through scratch when only one is. */
template <class Keep, class Drop>
static sc_status_t compact(const uint32_t *idx, const float *val, uint64_t n, uint32_t *oi,
			   float *ov, Keep keep, Drop drop, uint64_t *nnz_host,
			   const char *what)
{
	uint64_t w = 0;
	if (n) {
		if (oi == idx && ov == val) {
			auto z = thrust::make_zip_iterator(thrust::make_tuple(oi, ov));
			SCG_TRY(
			    what,
			    w = (uint64_t)(thrust::remove_if(SCG_POLICY, z, z + n, drop) - z));
		} else if (oi == idx || ov == val) {
			scratch<uint32_t> ti;
			scratch<float> tv;
			sc_status_t st = ti.get(n, what);
			if (st == SC_OK)
				st = tv.get(n, what);
			if (st != SC_OK)
				return st;
			auto in = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
			auto t = thrust::make_zip_iterator(thrust::make_tuple(ti.p, tv.p));
			SCG_TRY(what, w = (uint64_t)(thrust::copy_if(SCG_POLICY, in, in + n, t,
								     keep) -
						     t));
			SCG_TRY(what, thrust::copy(SCG_POLICY, t, t + w,
						   thrust::make_zip_iterator(
						       thrust::make_tuple(oi, ov))));
		} else {
			auto in = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
			auto out = thrust::make_zip_iterator(thrust::make_tuple(oi, ov));
			SCG_TRY(what, w = (uint64_t)(thrust::copy_if(SCG_POLICY, in, in + n,
								     out, keep) -
						     out));
		}
	}
	*nnz_host = w;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_compact_nonzero(const uint32_t *idx, const float *val,
					       uint64_t n, uint32_t *oi, float *ov,
					       uint64_t *nnz_host)
{
	return compact(idx, val, n, oi, ov, entry_nonzero(), entry_zero(), nnz_host,
		       "scg_coo_compact_nonzero");
}

extern "C" sc_status_t scg_coo_filter_mod(const uint32_t *idx, const float *val, uint64_t n,
					  uint32_t d, uint32_t t, uint32_t *oi, float *ov,
					  uint64_t *nnz_host)
{
	if (!d && n)
		return scg_fail(SC_ERR_INVALID, "scg_coo_filter_mod: modulus 0");
	return compact(idx, val, n, oi, ov, entry_mod{d, t, true}, entry_mod{d, t, false},
		       nnz_host, "scg_coo_filter_mod");
}

extern "C" sc_status_t scg_coo_merge_sum(const uint32_t *ai, const float *av, uint64_t an,
					 const uint32_t *bi, const float *bv, uint64_t bn,
					 uint32_t *oi, float *ov, uint64_t *nnz_host)
{
	return scg_merge_union("scg_coo_merge_sum", ai, av, an, bi, bv, bn, oi, ov, false,
			       nnz_host);
}

extern "C" sc_status_t scg_coo_block_runs(const uint32_t *idx, uint64_t n,
					  const uint64_t *bnd_host, uint32_t nb, uint64_t numel,
					  uint32_t max, scg_run_t *runs_host,
					  uint64_t *bad_host, uint32_t *nr_host)
{
	const char *what = "scg_coo_block_runs";
	*bad_host = n;
	*nr_host = 0;
	if (!n || !max)
		return SC_OK;
	if (!nb)
		return scg_fail(SC_ERR_INVALID, "%s: no blocks", what);
	/* the first max + 1 starts: max runs and the end of the last */
	uint64_t cap = (uint64_t)max + 1 < n ? (uint64_t)max + 1 : n;
	scratch<u64> bnd;
	scratch<start_rec> rec;
	sc_status_t st = bnd.get((uint64_t)nb + 1, what);
	if (st == SC_OK)
		st = rec.get(cap, what);
	if (st == SC_OK)
		st = scg_from_host(bnd.p, bnd_host, 8 * ((uint64_t)nb + 1));
	if (st != SC_OK)
		return st;
	uint64_t starts = 0;
	thrust::counting_iterator<uint64_t> p0(0);
	auto o = thrust::make_tabulate_output_iterator(
	    put_block_start{idx, bnd.p, nb, numel, cap, rec.p});
	SCG_TRY(what,
		starts = (uint64_t)(thrust::copy_if(SCG_POLICY, p0, p0 + n, o,
						    block_run_start{idx, bnd.p, nb, numel}) -
				    o));
	st = SCG_CHECK(what);
	if (st != SC_OK)
		return st;
	uint64_t m = starts < cap ? starts : cap;
	start_rec *h = (start_rec *)malloc(m * sizeof(start_rec));
	if (!h)
		return scg_fail(SC_ERR_NOMEM, "%s: out of memory", what);
	st = rd(h, (const start_rec *)rec.p, m);
	if (st != SC_OK) {
		free(h);
		return st;
	}
	uint32_t nr = 0;
	for (uint64_t r = 0; r < m && nr < max; r++) {
		if (h[r].block == BLOCK_BAD) {
			*bad_host = h[r].pos;
			break;
		}
		uint64_t end = r + 1 < starts ? h[r + 1].pos : n;
		runs_host[nr++] = scg_run_t{h[r].block, h[r].pos, end};
	}
	free(h);
	*nr_host = nr;
	return SC_OK;
}

extern "C" sc_status_t scg_sub_scaled(float *res, const float *x, uint64_t n, float f)
{
	const char *what = "scg_sub_scaled";
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::transform(SCG_POLICY, res, res + n, x, res, sub_scaled_op{f}));
	return SCG_CHECK(what);
}

/* ---- coo_topk (listops.h) ----------------------------------------------------------- */

extern "C" sc_status_t scg_coo_topk(uint32_t *idx, float *val, uint64_t n, uint64_t k,
				    uint32_t *tmp_idx, float *tmp_val, uint64_t *kept_host)
{
	const char *what = "scg_coo_topk";
	if (k >= n || !k) { /* everything kept, or nothing: the list as it is */
		*kept_host = k >= n ? n : 0;
		return SC_OK;
	}
	/* hist and its suffix sums (NB_TOP each), then the state */
	const uint32_t nb_top = 1u << (31 - TOP_SHIFT);
	const uint64_t state_words = (sizeof(topk_state) + 7) / 8;
	scratch<u64> tab;
	sc_status_t st = tab.get(2 * nb_top + state_words, what);
	if (st != SC_OK)
		return st;
	u64 *hist = tab.p, *suf = hist + nb_top;
	topk_state *ts = (topk_state *)(suf + nb_top), init = {k, 0, UINT64_MAX, 0};
	st = scg_from_host(ts, &init, sizeof init);
	if (st != SC_OK)
		return st;
	acc_view acc{val, NULL};
	thrust::counting_iterator<uint64_t> i0(0);
	for (int shift = TOP_SHIFT; shift >= 0; shift -= DIGIT) {
		uint32_t nb = shift == TOP_SHIFT ? nb_top : 1u << DIGIT;
		uint32_t mask = shift == TOP_SHIFT ? 0 : ~((1u << (shift + DIGIT)) - 1);
		SCG_TRY(what, thrust::fill(SCG_POLICY, hist, hist + nb, 0ull));
		st = histogram(acc, n, hist, nb, mask, 0, shift, what, &ts->T);
		if (st != SC_OK)
			return st;
		SCG_TRY(what, thrust::inclusive_scan(SCG_POLICY,
						     thrust::make_reverse_iterator(hist + nb),
						     thrust::make_reverse_iterator(hist), suf));
		SCG_TRY(what, thrust::for_each(SCG_POLICY, i0, i0 + 1,
					       pick_on_device{hist, suf, nb, shift, ts}));
	}
	/* the last tie kept, by position */
	auto o = thrust::make_tabulate_output_iterator(record_tiecut{ts});
	SCG_TRY(what, thrust::copy_if(SCG_POLICY, i0, i0 + n, o, key_is_T{val, ts}));
	/* kept first, the rest behind, each in index order; then back in place */
	auto in = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
	auto t = thrust::make_zip_iterator(thrust::make_tuple(tmp_idx, tmp_val));
	SCG_TRY(what, thrust::stable_partition_copy(SCG_POLICY, in, in + n, i0, t, t + k,
						    topk_keep{val, ts}));
	SCG_TRY(what, thrust::copy(SCG_POLICY, tmp_idx, tmp_idx + n, idx));
	SCG_TRY(what, thrust::copy(SCG_POLICY, tmp_val, tmp_val + n, val));
	st = SCG_CHECK(what);
	if (st != SC_OK)
		return st;
	*kept_host = k;
	return SC_OK;
}
