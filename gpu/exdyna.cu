/*
 * exdyna.cu: the data-parallel half of ExDyna's selection on the GPU device (scg.h,
 * section exdyna.cu); the cpu reference is daemon/device/exdyna.c. The object, its
 * partitions, threshold and update stay the daemon's (exdyna.c, called by the cuda
 * device's adapters in daemon/device/cuda.c), which hands each selection a plan
 * (scg_exdyna_plan_t: the partition, the threshold's key, what this iteration measures,
 * the cap). Here: the accumulation, the measurement (the exact share-th magnitude of the
 * partition, or its counts at the grid's thresholds), the selection, and the cap, with
 * the words the update needs coming back to the host.
 *
 * Every choice is one criterion on an element's magnitude key (abs_key) and position:
 *     taken(i) = i < bound && key >= tkey && (key != tiekey || i <= tiecut)
 * The threshold alone is (tkey, no tie rule, bound = the partition's end). When more pass
 * it than the cap, the exact cap-th largest key T among them and how many are larger (a
 * most-significant-digit radix select, kth.c's digits 30..20, 19..10, 9..0, by
 * histograms) make it (T, T, the position of the (cap - larger)-th key equal to T): the
 * largest cap, ties to the lowest positions, as exdyna.c's cap_selection keeps them. The
 * selection is then one stream compaction (ascending) and the residual one pass: what
 * the cap sends back to the residual is what is not taken, so residual = acc where not
 * taken and 0 where taken gives the cpu's bits. For a list the position is the entry's,
 * and the discarded entries go to dis as the cpu orders them: the unselected non-zeros,
 * then the ones the cap sent back.
 *
 * Histograms and grid counts: device-scope atomics through Thrust's for_each (portable:
 * the host build, or the CUDA build with -DSCG_PORTABLE_KERNELS), and beside it a kernel
 * with per-block counts in shared memory for the CUDA build. The workspace (histogram,
 * grid counts, one scalar) is allocated at create; nothing is allocated per selection but
 * Thrust's temporary storage for its compactions.
 */
#include "portable.cuh"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/transform.h>

#include <cstring>
#include <new>

typedef unsigned long long u64;

#define EX_TOP_SHIFT 20 /* kth.c's digits: bits 30..20 (2048 buckets), 19..10, 9..0 */
#define EX_DIGIT     10
#define EX_NB_TOP    (1u << (31 - EX_TOP_SHIFT))
#define EX_EXCL	     0xffffffffu /* no key: outside the domain (keys are below 2^31) */

struct scg_exdyna {
	u64 *hist;   /* device: EX_NB_TOP buckets */
	u64 *grid;   /* device: SCG_EXDYNA_GRID_N counts */
	u64 *scalar; /* device: one position */
	u64 hist_host[EX_NB_TOP];
	u64 grid_host[SCG_EXDYNA_GRID_N];
};

namespace
{ /* file-local: no clash with the other sources' functors */

template <class T> using dref = cuda::atomic_ref<T, cuda::thread_scope_device>;

SCG_HD inline uint32_t ex_abs_key(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	return u & 0x7fffffffu;
}

/* acc = in + res (exdyna.c's fused selection), res or in */
struct ex_acc {
	const float *in, *res;
	SCG_HD float operator()(uint64_t i) const
	{
		return in ? (res ? in[i] + res[i] : in[i]) : res[i];
	}
};

struct ex_crit {
	uint32_t tkey, tiekey;
	uint64_t tiecut, bound;
	SCG_HD bool operator()(uint64_t i, uint32_t key) const
	{
		return i < bound && key >= tkey && (key != tiekey || i <= tiecut);
	}
};

/* No tie rule, everything below bound at or above tkey. */
inline ex_crit ex_plain(uint32_t tkey, uint64_t bound)
{
	return ex_crit{tkey, 0, UINT64_MAX, bound};
}

/* The key of dense element i when crit takes it, else EX_EXCL. */
struct dense_key {
	ex_acc acc;
	ex_crit crit;
	SCG_HD uint32_t operator()(uint64_t i) const
	{
		uint32_t key = ex_abs_key(acc(i));
		return crit(i, key) ? key : EX_EXCL;
	}
};

/* The key of list entry j when its index is in [lo, hi) and crit takes it (by position). */
struct coo_key {
	const uint32_t *idx;
	const float *val;
	uint64_t lo, hi;
	ex_crit crit;
	SCG_HD uint32_t operator()(uint64_t j) const
	{
		uint32_t i = idx[j], key = ex_abs_key(val[j]);
		return i >= lo && i < hi && crit(j, key) ? key : EX_EXCL;
	}
};

template <class KF> struct key_in {
	KF kf;
	SCG_HD bool operator()(uint64_t i) const
	{
		return kf(i) != EX_EXCL;
	}
};

template <class KF> struct key_eq {
	KF kf;
	uint32_t key;
	SCG_HD bool operator()(uint64_t i) const
	{
		return kf(i) == key;
	}
};

/* The bins of the histograms: a digit of the keys under a prefix (the radix select), and
 * exdyna.c's grid_add (the bin between grid thresholds base + b STEP, the last one open).
 * EX_EXCL: counted nowhere. */
struct digit_bin {
	uint32_t mask, prefix, dmask;
	int shift;
	SCG_HD uint32_t operator()(uint32_t key) const
	{
		return key != EX_EXCL && (key & mask) == prefix ? (key >> shift) & dmask
								: EX_EXCL;
	}
};

struct grid_bin {
	int64_t base;
	SCG_HD uint32_t operator()(uint32_t key) const
	{
		if (key == EX_EXCL || (int64_t)key < base)
			return EX_EXCL;
		uint64_t b = (uint64_t)((int64_t)key - base) / SCG_EXDYNA_GRID_STEP;
		return (uint32_t)(b < SCG_EXDYNA_GRID_N ? b : SCG_EXDYNA_GRID_N - 1);
	}
};

#if defined(SCG_HOST) || defined(SCG_PORTABLE_KERNELS)
template <class KF, class BIN> struct bin_op {
	KF kf;
	BIN bin;
	u64 *hist;
	SCG_HD void operator()(uint64_t i) const
	{
		uint32_t b = bin(kf(i));
		if (b != EX_EXCL)
			dref<u64>(hist[b]).fetch_add(1, cuda::std::memory_order_relaxed);
	}
};
#else
/* The CUDA build's histogram: per-block counts in shared memory (a gradient's keys crowd
 * into a few bins, which global atomics would serialise), then one global add per
 * non-empty bin and block. The same counts as bin_op's (the portable version, which the
 * host build runs). A block sees at most n / EX_HIST_GRID elements: its 32-bit counts
 * cannot overflow for n < 2^32. */
#define EX_HIST_BLOCK 256
#define EX_HIST_GRID  1024

template <class KF, class BIN>
__global__ void ex_hist_kernel(KF kf, BIN bin, uint64_t lo, uint64_t hi, u64 *hist,
			       uint32_t nbins)
{
	extern __shared__ unsigned int h[];
	for (uint32_t b = threadIdx.x; b < nbins; b += blockDim.x)
		h[b] = 0;
	__syncthreads();
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = lo + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi;
	     i += stride) {
		uint32_t b = bin(kf(i));
		if (b != EX_EXCL)
			atomicAdd(&h[b], 1u);
	}
	__syncthreads();
	for (uint32_t b = threadIdx.x; b < nbins; b += blockDim.x)
		if (h[b])
			atomicAdd(&hist[b], (u64)h[b]);
}
#endif

/* Adds the histogram of bin(kf(i)) over [lo, hi) into hist (nbins, cleared by the caller). */
template <class KF, class BIN>
sc_status_t histogram(KF kf, BIN bin, uint64_t lo, uint64_t hi, u64 *hist, uint32_t nbins,
		      const char *what)
{
	if (hi <= lo)
		return SC_OK;
#if defined(SCG_HOST) || defined(SCG_PORTABLE_KERNELS)
	thrust::counting_iterator<uint64_t> i0(0);
	SCG_TRY(what,
		thrust::for_each(SCG_POLICY, i0 + lo, i0 + hi, bin_op<KF, BIN>{kf, bin, hist}));
	return SC_OK;
#else
	uint64_t blocks = (hi - lo + EX_HIST_BLOCK - 1) / EX_HIST_BLOCK;
	unsigned grid = (unsigned)(blocks < EX_HIST_GRID ? blocks : EX_HIST_GRID);
	ex_hist_kernel<KF, BIN>
	    <<<grid, EX_HIST_BLOCK, nbins * sizeof(unsigned int), scg_stream()>>>(
		kf, bin, lo, hi, hist, nbins);
	return scg_check_cuda(cudaGetLastError(), what);
#endif
}

/* Records the position at rank want - 1. */
struct record_rank {
	u64 *dst;
	uint64_t want;
	SCG_HD void operator()(uint64_t pos, uint64_t i) const
	{
		if (pos + 1 == want)
			*dst = i;
	}
};

struct write_dense {
	ex_acc acc;
	uint32_t *idx;
	float *val;
	SCG_HD void operator()(uint64_t pos, uint64_t i) const
	{
		idx[pos] = (uint32_t)i;
		val[pos] = acc(i);
	}
};

struct write_coo {
	const uint32_t *idx;
	const float *val;
	uint32_t *oi;
	float *ov;
	SCG_HD void operator()(uint64_t pos, uint64_t j) const
	{
		oi[pos] = idx[j];
		ov[pos] = val[j];
	}
};

/* Error feedback over the partition: res = acc where not taken, 0 where taken (fused:
 * written everywhere; in place: only where taken). */
struct feedback {
	ex_acc acc;
	float *res;
	ex_crit crit;
	SCG_HD void operator()(uint64_t i) const
	{
		float a = acc(i);
		bool taken = crit(i, ex_abs_key(a));
		if (acc.in)
			res[i] = taken ? 0.0f : a;
		else if (taken)
			res[i] = 0.0f;
	}
};

/* res + in (exdyna.c's scd_residual_accumulate: residual[i] += in[i]) */
struct add_res_in {
	SCG_HD float operator()(float r, float x) const
	{
		return r + x;
	}
};

/* List entry j is not selected and non-zero (what the cpu sends to dis first). */
template <class KF> struct coo_rest {
	KF sel;
	const float *val;
	SCG_HD bool operator()(uint64_t j) const
	{
		return sel(j) == EX_EXCL && val[j] != 0.0f;
	}
};

/* Selected by sel but not by keep (what the cap sends back). */
template <class KF> struct coo_capped {
	KF sel, keep;
	SCG_HD bool operator()(uint64_t j) const
	{
		return sel(j) != EX_EXCL && keep(j) == EX_EXCL;
	}
};

template <class T> sc_status_t rd(T *dst_host, const T *src, size_t n)
{
	return scg_to_host(dst_host, src, n * sizeof(T));
}

/* kth.c's pick: from the top bucket down, the one holding the remaining-th largest key. */
uint32_t pick(const u64 *hist, uint32_t nb, uint64_t *remaining, uint64_t *gt)
{
	uint32_t b = nb - 1;
	for (; b > 0 && *remaining > hist[b]; b--) {
		*remaining -= hist[b];
		*gt += hist[b];
	}
	return b;
}

/* The k-th largest key over positions [lo, hi) of kf (kth.c: 0 when fewer than k keys),
 * how many are larger (*gt_p) and how many equal it (*eq_p). */
template <class KF>
sc_status_t kth_key(scg_exdyna_t *ws, KF kf, uint64_t lo, uint64_t hi, uint64_t k,
		    uint32_t *key_p, uint64_t *gt_p, uint64_t *eq_p, const char *what)
{
	uint64_t remaining = k, gt = 0, total = 0, eq = 0;
	uint32_t T = 0;
	for (int shift = EX_TOP_SHIFT; shift >= 0; shift -= EX_DIGIT) {
		uint32_t nb = shift == EX_TOP_SHIFT ? EX_NB_TOP : 1u << EX_DIGIT;
		uint32_t mask = shift == EX_TOP_SHIFT ? 0 : ~((1u << (shift + EX_DIGIT)) - 1);
		SCG_TRY(what, thrust::fill(SCG_POLICY, ws->hist, ws->hist + nb, 0ull));
		sc_status_t st = histogram(kf, digit_bin{mask, T, nb - 1, shift}, lo, hi,
					   ws->hist, nb, what);
		if (st != SC_OK)
			return st;
		st = rd(ws->hist_host, ws->hist, nb);
		if (st != SC_OK)
			return st;
		if (shift == EX_TOP_SHIFT)
			for (uint32_t b = 0; b < nb; b++)
				total += ws->hist_host[b];
		uint32_t b = pick(ws->hist_host, nb, &remaining, &gt);
		T |= b << shift;
		eq = ws->hist_host[b];
	}
	*key_p = k > total ? 0 : T;
	*gt_p = gt;
	*eq_p = eq;
	return SC_OK;
}

/* The position of the want-th (from 1) of [lo, hi) that pred takes. */
template <class Pred>
sc_status_t nth_pos(scg_exdyna_t *ws, Pred pred, uint64_t lo, uint64_t hi, uint64_t want,
		    uint64_t *pos_p, const char *what)
{
	thrust::counting_iterator<uint64_t> i0(0);
	auto o = thrust::make_tabulate_output_iterator(record_rank{ws->scalar, want});
	SCG_TRY(what, thrust::copy_if(SCG_POLICY, i0 + lo, i0 + hi, o, pred));
	u64 pos = 0;
	sc_status_t st = rd(&pos, ws->scalar, 1);
	*pos_p = pos;
	return st;
}

/* The grid counts of kf over [lo, hi) into meta_host[1 ..]: at least each threshold
 * (exdyna.c's histogram, then its suffix sums). */
template <class KF>
sc_status_t grid_counts(scg_exdyna_t *ws, KF kf, uint64_t lo, uint64_t hi, int64_t base,
			uint64_t *meta_host, const char *what)
{
	const uint32_t N = SCG_EXDYNA_GRID_N;
	SCG_TRY(what, thrust::fill(SCG_POLICY, ws->grid, ws->grid + N, 0ull));
	sc_status_t st = histogram(kf, grid_bin{base}, lo, hi, ws->grid, N, what);
	if (st != SC_OK)
		return st;
	st = rd(ws->grid_host, ws->grid, N);
	if (st != SC_OK)
		return st;
	for (uint32_t j = 0; j < N; j++)
		meta_host[1 + j] = ws->grid_host[j];
	for (int j = (int)N - 2; j >= 0; j--)
		meta_host[1 + j] += meta_host[2 + j];
	return SC_OK;
}

/* The cap (see the file comment): the criterion that keeps the cap largest of the m that
 * sel takes (positions [lo, hi)), as mk(criterion) makes the key function. */
template <class MK>
sc_status_t cap_crit(scg_exdyna_t *ws, MK mk, ex_crit sel, uint64_t lo, uint64_t hi,
		     uint64_t cap, ex_crit *keep_p, const char *what)
{
	uint32_t T = 0;
	uint64_t gt = 0, eq = 0;
	sc_status_t st = kth_key(ws, mk(sel), lo, hi, cap, &T, &gt, &eq, what);
	if (st != SC_OK)
		return st;
	ex_crit keep = sel;
	keep.tkey = T; /* T >= sel.tkey: the key of a selected element */
	keep.tiekey = T;
	keep.tiecut = UINT64_MAX;
	uint64_t ties = cap - gt;
	if (ties < eq) {
		uint64_t pos = 0;
		st = nth_pos(ws, key_eq<decltype(mk(sel))>{mk(sel), T}, lo, hi, ties, &pos,
			     what);
		if (st != SC_OK)
			return st;
		keep.tiecut = pos;
	}
	*keep_p = keep;
	return SC_OK;
}

struct mk_dense {
	ex_acc acc;
	SCG_HD dense_key operator()(ex_crit c) const
	{
		return dense_key{acc, c};
	}
};

struct mk_coo {
	const uint32_t *idx;
	const float *val;
	uint64_t lo, hi;
	SCG_HD coo_key operator()(ex_crit c) const
	{
		return coo_key{idx, val, lo, hi, c};
	}
};

sc_status_t plan_check(const scg_exdyna_plan_t *p, const char *what)
{
	if (!p || p->lo > p->hi || p->hi > p->numel || p->share == 0 || p->cap == 0 ||
	    p->mode > SCG_EXDYNA_GRID)
		return scg_fail(SC_ERR_INVALID, "%s: bad plan", what);
	return SC_OK;
}

} // namespace

extern "C" sc_status_t scg_exdyna_create(scg_exdyna_t **ws_host)
{
	scg_exdyna_t *ws = new (std::nothrow) scg_exdyna_t();
	if (!ws)
		return scg_fail(SC_ERR_NOMEM, "scg_exdyna_create: out of memory");
	sc_status_t st = scg_alloc(EX_NB_TOP * sizeof(u64), (void **)&ws->hist);
	if (st == SC_OK)
		st = scg_alloc(SCG_EXDYNA_GRID_N * sizeof(u64), (void **)&ws->grid);
	if (st == SC_OK)
		st = scg_alloc(sizeof(u64), (void **)&ws->scalar);
	if (st != SC_OK) {
		scg_exdyna_destroy(ws);
		return st;
	}
	*ws_host = ws;
	return SC_OK;
}

extern "C" void scg_exdyna_destroy(scg_exdyna_t *ws)
{
	if (!ws)
		return;
	if (ws->hist)
		scg_free(ws->hist);
	if (ws->grid)
		scg_free(ws->grid);
	if (ws->scalar)
		scg_free(ws->scalar);
	delete ws;
}

extern "C" sc_status_t scg_exdyna_select(scg_exdyna_t *ws, const scg_exdyna_plan_t *plan,
					 const float *in, float *residual, scg_coo_t *out,
					 uint64_t *meta_host, uint32_t *key_host)
{
	const char *what = "scg_exdyna_select";
	sc_status_t st = plan_check(plan, what);
	if (st != SC_OK)
		return st;
	if (!ws || !out || (!in && !residual))
		return scg_fail(SC_ERR_INVALID, "%s: bad arguments", what);
	uint64_t lo = plan->lo, hi = plan->hi, n = plan->numel;
	thrust::counting_iterator<uint64_t> i0(0);
	if (in && residual) {
		/* calibrating or gridded: acc whole first; else outside the partition only, the
		 * selection adds inside it */
		uint64_t a0 = plan->mode == SCG_EXDYNA_FIXED ? lo : n;
		if (a0)
			SCG_TRY(what, thrust::transform(SCG_POLICY, residual, residual + a0, in,
							residual, add_res_in()));
		if (plan->mode == SCG_EXDYNA_FIXED && hi < n)
			SCG_TRY(what, thrust::transform(SCG_POLICY, residual + hi, residual + n,
							in + hi, residual + hi, add_res_in()));
		if (plan->mode != SCG_EXDYNA_FIXED)
			in = NULL;
	}
	ex_acc acc{in, residual};
	mk_dense mk{acc};
	uint32_t tkey = plan->tkey;
	if (plan->mode == SCG_EXDYNA_CALIBRATE) {
		uint32_t key = 0;
		uint64_t gt = 0, eq = 0;
		st =
		    kth_key(ws, mk(ex_plain(0, hi)), lo, hi, plan->share, &key, &gt, &eq, what);
		if (st != SC_OK)
			return st;
		*key_host = key;
		tkey = key ? key : 1;
	} else if (plan->mode == SCG_EXDYNA_GRID) {
		st = grid_counts(ws, mk(ex_plain(0, hi)), lo, hi, plan->grid_base, meta_host,
				 what);
		if (st != SC_OK)
			return st;
	}
	ex_crit sel = ex_plain(tkey, hi);
	uint64_t q = 0;
	if (hi > lo)
		SCG_TRY(what, q = (uint64_t)thrust::count_if(SCG_POLICY, i0 + lo, i0 + hi,
							     key_in<dense_key>{mk(sel)}));
	uint64_t m = q;
	if (q > out->cap) { /* the output is full: the first cap of them by index */
		m = out->cap;
		uint64_t pos = lo;
		if (m && (st = nth_pos(ws, key_in<dense_key>{mk(sel)}, lo, hi, m, &pos,
				       what)) != SC_OK)
			return st;
		sel.bound = m ? pos + 1 : lo;
	}
	meta_host[0] = m;
	ex_crit keep = sel;
	uint64_t w = m;
	if (m > plan->cap) {
		if ((st = cap_crit(ws, mk, sel, lo, hi, plan->cap, &keep, what)) != SC_OK)
			return st;
		w = plan->cap;
	}
	if (w) {
		auto o =
		    thrust::make_tabulate_output_iterator(write_dense{acc, out->idx, out->val});
		SCG_TRY(what, thrust::copy_if(SCG_POLICY, i0 + lo, i0 + hi, o,
					      key_in<dense_key>{mk(keep)}));
	}
	if (residual && hi > lo && (in || w))
		SCG_TRY(what, thrust::for_each(SCG_POLICY, i0 + lo, i0 + hi,
					       feedback{acc, residual, keep}));
	out->nnz = w;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_exdyna_select_coo(scg_exdyna_t *ws, const scg_exdyna_plan_t *plan,
					     const scg_coo_t *in, scg_coo_t *out,
					     scg_coo_t *dis, uint64_t *meta_host,
					     uint32_t *key_host)
{
	const char *what = "scg_exdyna_select_coo";
	sc_status_t st = plan_check(plan, what);
	if (st != SC_OK)
		return st;
	if (!ws || !in || !out || !dis || out->cap < in->nnz || dis->cap < in->nnz)
		return scg_fail(SC_ERR_INVALID, "%s: bad arguments", what);
	uint64_t nnz = in->nnz;
	mk_coo mk{in->idx, in->val, plan->lo, plan->hi};
	thrust::counting_iterator<uint64_t> j0(0);
	uint32_t tkey = plan->tkey;
	if (plan->mode == SCG_EXDYNA_CALIBRATE) {
		uint32_t key = 0;
		uint64_t gt = 0, eq = 0;
		st = kth_key(ws, mk(ex_plain(0, UINT64_MAX)), 0, nnz, plan->share, &key, &gt,
			     &eq, what);
		if (st != SC_OK)
			return st;
		*key_host = key;
		tkey = key ? key : 1;
	} else if (plan->mode == SCG_EXDYNA_GRID) {
		st = grid_counts(ws, mk(ex_plain(0, UINT64_MAX)), 0, nnz, plan->grid_base,
				 meta_host, what);
		if (st != SC_OK)
			return st;
	}
	ex_crit sel = ex_plain(tkey, UINT64_MAX);
	uint64_t m = 0, d = 0;
	if (nnz)
		SCG_TRY(what, m = (uint64_t)thrust::count_if(SCG_POLICY, j0, j0 + nnz,
							     key_in<coo_key>{mk(sel)}));
	meta_host[0] = m;
	ex_crit keep = sel;
	uint64_t w = m;
	if (m > plan->cap) {
		if ((st = cap_crit(ws, mk, sel, 0, nnz, plan->cap, &keep, what)) != SC_OK)
			return st;
		w = plan->cap;
	}
	if (w) {
		auto o = thrust::make_tabulate_output_iterator(
		    write_coo{in->idx, in->val, out->idx, out->val});
		SCG_TRY(what, thrust::copy_if(SCG_POLICY, j0, j0 + nnz, o,
					      key_in<coo_key>{mk(keep)}));
	}
	if (nnz) {
		coo_rest<coo_key> rest{mk(sel), in->val};
		SCG_TRY(what, d = (uint64_t)thrust::count_if(SCG_POLICY, j0, j0 + nnz, rest));
		if (d) {
			auto o = thrust::make_tabulate_output_iterator(
			    write_coo{in->idx, in->val, dis->idx, dis->val});
			SCG_TRY(what, thrust::copy_if(SCG_POLICY, j0, j0 + nnz, o, rest));
		}
	}
	if (m > w) {
		auto o = thrust::make_tabulate_output_iterator(
		    write_coo{in->idx, in->val, dis->idx + d, dis->val + d});
		SCG_TRY(what, thrust::copy_if(SCG_POLICY, j0, j0 + nnz, o,
					      coo_capped<coo_key>{mk(sel), mk(keep)}));
	}
	out->nnz = w;
	dis->nnz = d + (m - w);
	return SCG_CHECK(what);
}
