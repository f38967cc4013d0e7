/* reduce.c: see reduce.h. */
#include "device/reduce.h"

#include "device/device.h"

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

void scd_reduce_typed(sc_dtype_t dtype, void *dst, const void *src, uint64_t n)
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
