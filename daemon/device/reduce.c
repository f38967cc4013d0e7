/* reduce.c: see reduce.h. */
#include "device/reduce.h"

#include "device/device.h"

#include <math.h>
#include <string.h>

static void sum_f64(double *restrict dst, const double *restrict src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] += src[i];
}

static void sum_u32(uint32_t *restrict dst, const uint32_t *restrict src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] += src[i];
}

static void sum_u64(uint64_t *restrict dst, const uint64_t *restrict src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* MIN, MAX and PRODUCT of one dtype T (integers multiply as unsigned U: wrap-around). A
 * NaN operand wins: a NaN in dst stays (every comparison with it is false) and a NaN in
 * src replaces dst (NAN_(x), x != x for floats). */
#define SCD_NAN_F_(x) ((x) != (x))
#define SCD_NAN_I_(x) 0
#define SCD_REDUCE_OTHERS_(sfx, T, U, NAN_)                                                    \
	static void min_##sfx(T *restrict dst, const T *restrict src, uint64_t n)              \
	{                                                                                      \
		for (uint64_t i = 0; i < n; i++)                                               \
			if (src[i] < dst[i] || NAN_(src[i]))                                   \
				dst[i] = src[i];                                               \
	}                                                                                      \
	static void max_##sfx(T *restrict dst, const T *restrict src, uint64_t n)              \
	{                                                                                      \
		for (uint64_t i = 0; i < n; i++)                                               \
			if (src[i] > dst[i] || NAN_(src[i]))                                   \
				dst[i] = src[i];                                               \
	}                                                                                      \
	static void prod_##sfx(T *restrict dst, const T *restrict src, uint64_t n)             \
	{                                                                                      \
		for (uint64_t i = 0; i < n; i++)                                               \
			dst[i] = (T)((U)dst[i] * (U)src[i]);                                   \
	}
SCD_REDUCE_OTHERS_(f32, float, float, SCD_NAN_F_)
SCD_REDUCE_OTHERS_(f64, double, double, SCD_NAN_F_)
SCD_REDUCE_OTHERS_(i32, int32_t, uint32_t, SCD_NAN_I_)
SCD_REDUCE_OTHERS_(i64, int64_t, uint64_t, SCD_NAN_I_)
#undef SCD_REDUCE_OTHERS_
#undef SCD_NAN_F_
#undef SCD_NAN_I_

static void reduce_sum(sc_dtype_t dtype, void *dst, const void *src, uint64_t n)
{
	switch (dtype) {
	case SC_FLOAT32:
		scd_device_cpu_ops.reduce_sum(dst, src, n);
		break;
	case SC_FLOAT64:
		sum_f64(dst, src, n);
		break;
	case SC_INT32:
		sum_u32(dst, src, n);
		break;
	case SC_INT64:
		sum_u64(dst, src, n);
		break;
	}
}

#define SCD_REDUCE_DISPATCH_(op)                                                               \
	switch (dtype) {                                                                       \
	case SC_FLOAT32:                                                                       \
		op##_f32(dst, src, n);                                                         \
		break;                                                                         \
	case SC_FLOAT64:                                                                       \
		op##_f64(dst, src, n);                                                         \
		break;                                                                         \
	case SC_INT32:                                                                         \
		op##_i32(dst, src, n);                                                         \
		break;                                                                         \
	case SC_INT64:                                                                         \
		op##_i64(dst, src, n);                                                         \
		break;                                                                         \
	}

void scd_reduce_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src,
		      uint64_t n)
{
	switch (op) {
	case SC_OP_SUM:
	case SC_OP_AVERAGE:
		reduce_sum(dtype, dst, src, n);
		break;
	case SC_OP_MIN:
		SCD_REDUCE_DISPATCH_(min)
		break;
	case SC_OP_MAX:
		SCD_REDUCE_DISPATCH_(max)
		break;
	case SC_OP_PRODUCT:
		SCD_REDUCE_DISPATCH_(prod)
		break;
	case SC_OP_ADASUM: /* not elementwise: scd_adasum_pair_typed */
		break;
	}
}
#undef SCD_REDUCE_DISPATCH_

#define SCD_FILL_(T, v)                                                                        \
	for (uint64_t i = 0; i < n; i++)                                                       \
		((T *)x)[i] = (v);
void scd_reduce_identity_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *x, uint64_t n)
{
	int k = op == SC_OP_MIN ? 0 : op == SC_OP_MAX ? 1 : op == SC_OP_PRODUCT ? 2 : -1;
	if (k < 0 || sc_dtype_size(dtype) == 0) {
		memset(x, 0, n * sc_dtype_size(dtype));
		return;
	}
	switch (dtype) {
	case SC_FLOAT32:
		SCD_FILL_(float, k == 0 ? INFINITY : k == 1 ? -INFINITY : 1.0f)
		break;
	case SC_FLOAT64:
		SCD_FILL_(double, k == 0 ? (double)INFINITY : k == 1 ? -(double)INFINITY : 1.0)
		break;
	case SC_INT32:
		SCD_FILL_(int32_t, k == 0 ? INT32_MAX : k == 1 ? INT32_MIN : 1)
		break;
	case SC_INT64:
		SCD_FILL_(int64_t, k == 0 ? INT64_MAX : k == 1 ? INT64_MIN : 1)
		break;
	}
}
#undef SCD_FILL_

void scd_average_typed(sc_dtype_t dtype, void *x, uint64_t n, double divisor)
{
	switch (dtype) {
	case SC_FLOAT32:
		scd_scale_f32(x, n, (float)(1.0 / divisor));
		break;
	case SC_FLOAT64: {
		double *d = x;
		for (uint64_t i = 0; i < n; i++)
			d[i] /= divisor;
		break;
	}
	case SC_INT32: {
		int32_t *d = x, div = (int32_t)divisor;
		for (uint64_t i = 0; i < n; i++)
			d[i] /= div;
		break;
	}
	case SC_INT64: {
		int64_t *d = x, div = (int64_t)divisor;
		for (uint64_t i = 0; i < n; i++)
			d[i] /= div;
		break;
	}
	}
}

uint64_t scd_coo_add_checked(float *dst, uint64_t numel, const uint32_t *idx, const float *val,
			     uint64_t nnz)
{
	uint64_t bad = 0;
	for (uint64_t j = 0; j < nnz; j++) {
		if (idx[j] < numel)
			dst[idx[j]] += val[j];
		else
			bad++;
	}
	return bad;
}

/* NaN or an infinity: every exponent bit set (a branch-free test the loops vectorise). */
static inline uint64_t nonfinite_bit(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof(u));
	return (u & 0x7f800000u) == 0x7f800000u;
}

uint64_t scd_copy_f32_nonfinite(float *restrict dst, const float *restrict src, uint64_t n)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < n; i++) {
		dst[i] = src[i];
		bad += nonfinite_bit(src[i]);
	}
	return bad;
}

uint64_t scd_sum_f32_nonfinite(float *restrict dst, const float *restrict src, uint64_t n)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < n; i++) {
		float v = dst[i] + src[i];
		dst[i] = v;
		bad += nonfinite_bit(v);
	}
	return bad;
}

uint64_t scd_count_f32_nonfinite(const float *x, uint64_t n)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < n; i++)
		bad += nonfinite_bit(x[i]);
	return bad;
}

/* The Adasum coefficient of a vector of squared norm nsq against a dot product: 1 for a
 * zero vector (its term is plain addition). */
static double adasum_coeff(double dot, double nsq)
{
	return nsq != 0 ? 1.0 - dot / (2.0 * nsq) : 1.0;
}

#define ADASUM_PAIR_(T)                                                                        \
	{                                                                                      \
		T *restrict x = a;                                                             \
		const T *restrict y = b;                                                       \
		double aa = 0, ab = 0, bb = 0;                                                 \
		for (uint64_t i = 0; i < n; i++) {                                             \
			aa += (double)x[i] * x[i];                                             \
			ab += (double)x[i] * y[i];                                             \
			bb += (double)y[i] * y[i];                                             \
		}                                                                              \
		double ca = adasum_coeff(ab, aa), cb = adasum_coeff(ab, bb);                   \
		for (uint64_t i = 0; i < n; i++)                                               \
			x[i] = (T)(ca * x[i] + cb * y[i]);                                     \
	}

void scd_adasum_pair_typed(sc_dtype_t dtype, void *a, const void *b, uint64_t n)
{
	if (dtype == SC_FLOAT32)
		ADASUM_PAIR_(float)
	else if (dtype == SC_FLOAT64)
		ADASUM_PAIR_(double)
}
