/*
 * reduce.cu: dense reductions, scaling, averaging, COO scatters and the natural-sparsity
 * scans of the GPU device (scg.h, section reduce.cu / select.cu); the cpu reference is
 * daemon/device/reduce.c, format.c (scd_reduce_sum, scd_coo_scatter_add) and listops.c.
 *
 * Every result is exact and bit-identical to the cpu device's: each element sees the same
 * single IEEE operation (float addition, float multiplication by the same rounded factor,
 * double division, integer addition and multiplication as unsigned, integer division
 * truncating toward zero, min and max with the same NaN rule).
 * The scatters write disjoint elements (unique indices, as the cpu device's callers use
 * them), so they need no atomics and no order.
 */
#include "portable.cuh"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/transform.h>

namespace
{

template <class T> struct add_op {
	SCG_HD T operator()(T a, T b) const
	{
		return a + b;
	}
};

/* MIN, MAX and PRODUCT as the cpu device's (reduce.c): a NaN operand wins, integers
 * multiply as unsigned U (wrap-around). */
template <class T> SCG_HD bool is_nan(T x)
{
	return x != x; /* false for the integers */
}

template <class T> struct min_op {
	SCG_HD T operator()(T a, T b) const
	{
		return b < a || is_nan(b) ? b : a;
	}
};

template <class T> struct max_op {
	SCG_HD T operator()(T a, T b) const
	{
		return b > a || is_nan(b) ? b : a;
	}
};

template <class T, class U> struct prod_op {
	SCG_HD T operator()(T a, T b) const
	{
		return (T)((U)a * (U)b);
	}
};

template <class T> struct mul_op {
	T f;
	SCG_HD T operator()(T a) const
	{
		return a * f;
	}
};

template <class T> struct div_op {
	T d;
	SCG_HD T operator()(T a) const
	{
		return a / d;
	}
};

template <class T, class Op>
sc_status_t apply(T *dst, const T *src, uint64_t n, Op op, const char *what)
{
	if (!n)
		return SC_OK;
	sc_status_t st = SCG_LOCAL(what, dst);
	if (st == SC_OK)
		st = SCG_LOCAL(what, src);
	if (st != SC_OK)
		return st;
	SCG_TRY(what, thrust::transform(SCG_POLICY, dst, dst + n, src, dst, op));
	return SCG_CHECK(what);
}

template <class T> sc_status_t sum(T *dst, const T *src, uint64_t n, const char *what)
{
	return apply(dst, src, n, add_op<T>(), what);
}

/* dst = dst op src for one dtype T (U: T's unsigned twin for products). */
template <class T, class U>
sc_status_t reduce(sc_reduce_op_t op, T *dst, const T *src, uint64_t n, const char *what)
{
	switch (op) {
	case SC_OP_SUM:
	case SC_OP_AVERAGE: /* integers add as unsigned: wrap around */
		return sum((U *)dst, (const U *)src, n, what);
	case SC_OP_MIN:
		return apply(dst, src, n, min_op<T>(), what);
	case SC_OP_MAX:
		return apply(dst, src, n, max_op<T>(), what);
	case SC_OP_PRODUCT:
		return apply(dst, src, n, prod_op<T, U>(), what);
	case SC_OP_ADASUM: /* not elementwise: the daemon's coll_adasum.c, on the host */
		break;
	}
	return SC_OK; /* an unknown op does nothing, as on the cpu */
}

struct scatter_set {
	float *dst;
	SCG_HD void operator()(thrust::tuple<uint32_t, float> e) const
	{
		dst[thrust::get<0>(e)] = thrust::get<1>(e);
	}
};

struct scatter_add {
	float *dst;
	SCG_HD void operator()(thrust::tuple<uint32_t, float> e) const
	{
		dst[thrust::get<0>(e)] += thrust::get<1>(e);
	}
};

struct nonzero {
	SCG_HD bool operator()(float x) const
	{
		return x != 0.0f;
	}
};

} // namespace

extern "C" sc_status_t scg_reduce_sum(float *dst, const float *src, uint64_t n)
{
	return sum(dst, src, n, "scg_reduce_sum");
}

extern "C" sc_status_t scg_reduce_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *dst,
					const void *src, uint64_t n)
{
	const char *what = "scg_reduce_typed";
	switch (dtype) {
	case SC_FLOAT32:
		return reduce<float, float>(op, (float *)dst, (const float *)src, n, what);
	case SC_FLOAT64:
		return reduce<double, double>(op, (double *)dst, (const double *)src, n, what);
	case SC_INT32:
		return reduce<int32_t, uint32_t>(op, (int32_t *)dst, (const int32_t *)src, n,
						 what);
	case SC_INT64:
		return reduce<int64_t, uint64_t>(op, (int64_t *)dst, (const int64_t *)src, n,
						 what);
	}
	return SC_OK; /* an unknown dtype does nothing, as on the cpu */
}

extern "C" sc_status_t scg_scale(float *d, uint64_t n, float f)
{
	const char *what = "scg_scale"; /* SCG_TRY needs a variable named what */
	if (!n)
		return SC_OK;
	SCG_TRY(what, thrust::transform(SCG_POLICY, d, d + n, d, mul_op<float>{f}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_average_typed(sc_dtype_t dtype, void *x, uint64_t n, double divisor)
{
	const char *what = "scg_average_typed";
	sc_status_t st = SCG_LOCAL(what, x);
	if (st != SC_OK)
		return st;
	switch (dtype) {
	case SC_FLOAT32: /* multiplies by the rounded 1 / divisor, as the cpu device */
		return scg_scale((float *)x, n, (float)(1.0 / divisor));
	case SC_FLOAT64: {
		double *d = (double *)x;
		if (n)
			SCG_TRY(what, thrust::transform(SCG_POLICY, d, d + n, d,
							div_op<double>{divisor}));
		return SCG_CHECK(what);
	}
	case SC_INT32: {
		int32_t *d = (int32_t *)x, div = (int32_t)divisor;
		if (!div)
			return scg_fail(SC_ERR_INVALID, "%s: integer divisor 0", what);
		if (n)
			SCG_TRY(what, thrust::transform(SCG_POLICY, d, d + n, d,
							div_op<int32_t>{div}));
		return SCG_CHECK(what);
	}
	case SC_INT64: {
		int64_t *d = (int64_t *)x, div = (int64_t)divisor;
		if (!div)
			return scg_fail(SC_ERR_INVALID, "%s: integer divisor 0", what);
		if (n)
			SCG_TRY(what, thrust::transform(SCG_POLICY, d, d + n, d,
							div_op<int64_t>{div}));
		return SCG_CHECK(what);
	}
	}
	return SC_OK;
}

extern "C" sc_status_t scg_coo_scatter(float *dst, const uint32_t *idx, const float *val,
				       uint64_t nnz)
{
	const char *what = "scg_coo_scatter"; /* SCG_TRY needs a variable named what */
	if (!nnz)
		return SC_OK;
	auto first = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
	SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + nnz, scatter_set{dst}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_coo_scatter_add(float *dst, const uint32_t *idx, const float *val,
					   uint64_t nnz)
{
	const char *what = "scg_coo_scatter_add"; /* SCG_TRY needs a variable named what */
	if (!nnz)
		return SC_OK;
	auto first = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
	SCG_TRY(what, thrust::for_each(SCG_POLICY, first, first + nnz, scatter_add{dst}));
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_count_nonzero(const float *g, uint64_t n, uint64_t *count_host)
{
	const char *what = "scg_count_nonzero"; /* SCG_TRY needs a variable named what */
	uint64_t c = 0;
	if (n)
		SCG_TRY(what, c = (uint64_t)thrust::count_if(SCG_POLICY, g, g + n, nonzero()));
	*count_host = c;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_dense_to_coo(const float *g, uint64_t n, uint32_t *idx, float *val,
					uint64_t *nnz_host)
{
	const char *what = "scg_dense_to_coo"; /* SCG_TRY needs a variable named what */
	uint64_t w = 0;
	if (n) {
		/* stream compaction of (i, g[i]) by g[i] != 0: stable, so indices ascend */
		auto in = thrust::make_zip_iterator(
		    thrust::make_tuple(thrust::counting_iterator<uint32_t>(0), g));
		auto out = thrust::make_zip_iterator(thrust::make_tuple(idx, val));
		SCG_TRY(what, w = (uint64_t)(thrust::copy_if(SCG_POLICY, in, in + n, g, out,
							     nonzero()) -
					     out));
	}
	*nnz_host = w;
	return SCG_CHECK(what);
}
