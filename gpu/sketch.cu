/*
 * sketch.cu: S2 Reducer's count sketch + block bitmap on the GPU device (scg.h, section
 * hhash.cu / sketch.cu); the cpu reference is daemon/device/sketch.c, whose layout,
 * seeds (seed_j = derive(derive(seed, step), j)), bucket (multiply-shift of the high
 * half) and sign (lowest bit) are reproduced bit for bit.
 *
 * Encode: one thread per non-zero adds s_j * v to each row's bucket by compare-and-swap
 * (subnormals kept, as on the cpu), so a bucket's sum is in arrival order: identical to the
 * cpu's where the sums are exact (integers of modest size), within rounding otherwise. The
 * bitmap entry is set to 1.0f (the same value from every writer). Decode: one thread per
 * element of a marked block, the median over rows by the same insertion sort (mean of the two
 * middle values for an even row count): identical to the cpu's given the same sketch.
 * Decode-apply (one row, scg.h section exdyna.cu / blocks.cu / sketch.cu): the same decode and,
 * per marked element, res -= s * own's bucket, a product by a sign (exact): the cpu's bits.
 */
#include "scg_hash.cuh"

#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

namespace
{ /* file-local: no clash with the other sources' functors */

struct sk_geom {
	uint64_t numel;
	uint32_t rows, cols, block;
	uint64_t seeds[SCG_SKETCH_MAX_ROWS];
};

SCG_HD inline uint32_t sk_row_hash(uint64_t seed, uint32_t idx, uint32_t cols, float *sign)
{
	uint64_t h = scg_fmix64((uint64_t)idx ^ seed);
	*sign = (h & 1) ? -1.0f : 1.0f;
	return (uint32_t)(((h >> 32) * (uint64_t)cols) >> 32);
}

static sc_status_t sk_geom_of(const scg_sketch_cfg_t *c, uint64_t step, sk_geom *g,
			      const char *what)
{
	if (!c || c->rows == 0 || c->rows > SCG_SKETCH_MAX_ROWS || c->cols == 0 ||
	    c->block == 0 || c->numel > UINT32_MAX)
		return scg_fail(SC_ERR_INVALID, "%s: bad configuration", what);
	g->numel = c->numel;
	g->rows = c->rows;
	g->cols = c->cols;
	g->block = c->block;
	uint64_t s = scg_seed_derive(c->seed, step);
	for (uint32_t j = 0; j < SCG_SKETCH_MAX_ROWS; j++)
		g->seeds[j] = j < c->rows ? scg_seed_derive(s, j) : 0;
	return SC_OK;
}

struct sk_insert {
	sk_geom g;
	const uint32_t *idx;
	const float *val;
	float *sketch;
	SCG_HD void operator()(uint64_t i) const
	{
		uint32_t x = idx[i];
		float v = val[i];
		float *bitmap = sketch + (uint64_t)g.rows * g.cols;
		cuda::atomic_ref<float, cuda::thread_scope_device>(bitmap[x / g.block])
		    .store(1.0f, cuda::std::memory_order_relaxed);
		for (uint32_t j = 0; j < g.rows; j++) {
			float s;
			uint32_t b = sk_row_hash(g.seeds[j], x, g.cols, &s);
			/* a compare-and-swap loop, not an atomic float add: on the GPU's global
			 * memory that add flushes subnormals to zero, which the cpu does not */
			cuda::atomic_ref<float, cuda::thread_scope_device> cell(
			    sketch[(uint64_t)j * g.cols + b]);
			float old = cell.load(cuda::std::memory_order_relaxed), add = s * v;
			while (!cell.compare_exchange_weak(old, old + add,
							   cuda::std::memory_order_relaxed))
				;
		}
	}
};

struct sk_past {
	uint64_t numel;
	SCG_HD bool operator()(uint32_t i) const
	{
		return i >= numel;
	}
};

} // namespace

extern "C" sc_status_t scg_sketch_encode(const scg_sketch_cfg_t *cfg, uint64_t step,
					 const scg_coo_t *src, float *sketch)
{
	const char *what = "scg_sketch_encode";
	sk_geom g;
	sc_status_t st = sk_geom_of(cfg, step, &g, what);
	if (st != SC_OK)
		return st;
	uint64_t nf = (uint64_t)g.rows * g.cols + (g.numel + g.block - 1) / g.block;
	uint64_t n = src->nnz, bad = 0;
	const uint32_t *idx = src->idx;
	SCG_TRY(what, {
		thrust::fill(SCG_POLICY, sketch, sketch + nf, 0.0f); /* never accumulate */
		bad = thrust::count_if(SCG_POLICY, idx, idx + n, sk_past{g.numel});
	});
	if (bad)
		return scg_fail(SC_ERR_INVALID, "%s: index past numel", what);
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, zero, zero + n,
				       sk_insert{g, idx, src->val, sketch}));
	return SCG_CHECK(what);
}

namespace
{ /* file-local: no clash with the other sources' functors */

struct sk_decode {
	sk_geom g;
	const float *sketch;
	float *dst;
	SCG_HD void operator()(uint64_t i) const
	{
		const float *bitmap = sketch + (uint64_t)g.rows * g.cols;
		if (!(bitmap[i / g.block] > 0.0f)) {
			dst[i] = 0.0f;
			return;
		}
		float est[SCG_SKETCH_MAX_ROWS];
		est[0] = 0.0f; /* rows >= 1 */
		for (uint32_t j = 0; j < g.rows; j++) {
			float s;
			uint32_t b = sk_row_hash(g.seeds[j], (uint32_t)i, g.cols, &s);
			est[j] = s * sketch[(uint64_t)j * g.cols + b];
		}
		if (g.rows == 1) {
			dst[i] = est[0];
			return;
		}
		uint32_t n = g.rows;
		for (uint32_t a = 1; a < n; a++) {
			float x = est[a];
			uint32_t k = a;
			for (; k > 0 && est[k - 1] > x; k--)
				est[k] = est[k - 1];
			est[k] = x;
		}
		dst[i] = n & 1 ? est[n / 2] : 0.5f * (est[n / 2 - 1] + est[n / 2]);
	}
};

} // namespace

extern "C" sc_status_t scg_sketch_decode_dense(const scg_sketch_cfg_t *cfg, uint64_t step,
					       const float *sketch, float *dst)
{
	const char *what = "scg_sketch_decode_dense";
	sk_geom g;
	sc_status_t st = sk_geom_of(cfg, step, &g, what);
	if (st != SC_OK)
		return st;
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what,
		thrust::for_each(SCG_POLICY, zero, zero + g.numel, sk_decode{g, sketch, dst}));
	return SCG_CHECK(what);
}

/* ---- decode_apply (one row) --------------------------------------------------------- */

namespace
{ /* file-local: no clash with the other sources' functors */

/* Element i of sketch_decode_apply: sketch.c's decode_row, one element per thread. The
 * products are by a sign (+-1), exact, so a contraction of res - s * own into a fused
 * multiply-add gives the same bits as the cpu's separate subtraction. */
struct sk_decode_apply {
	sk_geom g;
	const float *sketch, *own;
	float *dst, *res;
	SCG_HD void operator()(uint64_t i) const
	{
		const float *bitmap = sketch + g.cols;
		if (!(bitmap[i / g.block] > 0.0f)) {
			dst[i] = 0.0f;
			return;
		}
		float s;
		uint32_t b = sk_row_hash(g.seeds[0], (uint32_t)i, g.cols, &s);
		dst[i] = s * sketch[b];
		float e = s * own[b];
		res[i] = res[i] - e;
	}
};

} // namespace

extern "C" sc_status_t scg_sketch_decode_apply(const scg_sketch_cfg_t *cfg, uint64_t step,
					       const float *sketch, const float *own,
					       float *dst, float *res)
{
	const char *what = "scg_sketch_decode_apply";
	sk_geom g;
	sc_status_t st = sk_geom_of(cfg, step, &g, what);
	if (st != SC_OK)
		return st;
	if (g.rows != 1 || !own || !res)
		return scg_fail(SC_ERR_INVALID, "%s: %u rows (1 only), own and res needed",
				what, g.rows);
	thrust::counting_iterator<uint64_t> zero(0);
	SCG_TRY(what, thrust::for_each(SCG_POLICY, zero, zero + g.numel,
				       sk_decode_apply{g, sketch, own, dst, res}));
	return SCG_CHECK(what);
}
