/*
 * reduce.c: the datatypes of libnccl-host.so and their reductions. A reduction takes n
 * blocks of count elements, one per rank in rank order, and folds them from block 0 to
 * block n-1, so every rank that reduces the same blocks gets the same bits. Integers wrap
 * (computed unsigned); 16-bit floats are accumulated in float and rounded once to the
 * nearest even; ncclAvg is the sum divided by n (integers: truncated).
 */
#include <math.h>
#include <string.h>

#include "host.h"

size_t nh_type_size(ncclDataType_t type)
{
	switch (type) {
	case ncclInt8:
	case ncclUint8:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	default:
		return 0; /* the 8-bit floats are not stood in for */
	}
}

static float half_to_float(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	uint32_t bits;
	float f;

	if (e == 0x1f)
		bits = s | 0x7f800000u | (m << 13);
	else if (e)
		bits = s | ((e + 112) << 23) | (m << 13);
	else if (!m)
		bits = s;
	else /* subnormal: m units of 2^-24 */
		return s ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static uint16_t float_to_half(float f)
{
	uint32_t x, ax, s, h, rem;
	float a;

	memcpy(&x, &f, sizeof(x));
	s = (x >> 16) & 0x8000u;
	ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* NaN stays a quiet NaN */
		return (uint16_t)(s | 0x7e00u);
	if (ax >= 0x477ff000u) /* 65520 and up round to infinity */
		return (uint16_t)(s | 0x7c00u);
	if (ax < 0x38800000u) { /* below 2^-14: subnormal, exact scaling then nearest even */
		memcpy(&a, &ax, sizeof(a));
		return (uint16_t)(s | (uint32_t)rintf(a * 16777216.0f));
	}
	h = (((ax >> 23) - 112) << 10) | ((ax & 0x7fffffu) >> 13);
	rem = ax & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* a carry moves into the exponent, as it should */
	return (uint16_t)(s | h);
}

static float bf16_to_float(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

#define FOLD(acc, v, op, T, U)                                                                 \
	do {                                                                                   \
		switch (op) {                                                                  \
		case ncclProd:                                                                 \
			acc = (T)((U)(acc) * (U)(v));                                          \
			break;                                                                 \
		case ncclMax:                                                                  \
			acc = (v) > (acc) ? (v) : (acc);                                       \
			break;                                                                 \
		case ncclMin:                                                                  \
			acc = (v) < (acc) ? (v) : (acc);                                       \
			break;                                                                 \
		default: /* ncclSum, ncclAvg */                                                \
			acc = (T)((U)(acc) + (U)(v));                                          \
		}                                                                              \
	} while (0)

/* T: the element, U: what it is computed in (unsigned for integers: no overflow). */
#define REDUCE_FN(name, T, U)                                                                  \
	static void name(T *dst, const char *src, int n, size_t count, ncclRedOp_t op)         \
	{                                                                                      \
		for (size_t i = 0; i < count; i++) {                                           \
			T acc = ((const T *)src)[i];                                           \
			for (int r = 1; r < n; r++) {                                          \
				T v = ((const T *)(src + (size_t)r * count * sizeof(T)))[i];   \
				FOLD(acc, v, op, T, U);                                        \
			}                                                                      \
			if (op == ncclAvg)                                                     \
				acc = (T)(acc / (T)n);                                         \
			dst[i] = acc;                                                          \
		}                                                                              \
	}
REDUCE_FN(reduce_i8, int8_t, uint32_t)
REDUCE_FN(reduce_u8, uint8_t, uint32_t)
REDUCE_FN(reduce_i32, int32_t, uint32_t)
REDUCE_FN(reduce_u32, uint32_t, uint32_t)
REDUCE_FN(reduce_i64, int64_t, uint64_t)
REDUCE_FN(reduce_u64, uint64_t, uint64_t)
REDUCE_FN(reduce_f32, float, float)
REDUCE_FN(reduce_f64, double, double)

static void reduce_16(uint16_t *dst, const char *src, int n, size_t count, ncclRedOp_t op,
		      int bf16)
{
	for (size_t i = 0; i < count; i++) {
		uint16_t h = ((const uint16_t *)src)[i];
		float acc = bf16 ? bf16_to_float(h) : half_to_float(h);

		for (int r = 1; r < n; r++) {
			h = ((const uint16_t *)(src + (size_t)r * count * 2))[i];
			float v = bf16 ? bf16_to_float(h) : half_to_float(h);
			FOLD(acc, v, op, float, float);
		}
		if (op == ncclAvg)
			acc /= (float)n;
		dst[i] = bf16 ? float_to_bf16(acc) : float_to_half(acc);
	}
}

void nh_reduce(void *dst, const char *src, int n, size_t count, ncclDataType_t type,
	       ncclRedOp_t op)
{
	switch (type) {
	case ncclInt8:
		reduce_i8(dst, src, n, count, op);
		break;
	case ncclUint8:
		reduce_u8(dst, src, n, count, op);
		break;
	case ncclInt32:
		reduce_i32(dst, src, n, count, op);
		break;
	case ncclUint32:
		reduce_u32(dst, src, n, count, op);
		break;
	case ncclInt64:
		reduce_i64(dst, src, n, count, op);
		break;
	case ncclUint64:
		reduce_u64(dst, src, n, count, op);
		break;
	case ncclFloat32:
		reduce_f32(dst, src, n, count, op);
		break;
	case ncclFloat64:
		reduce_f64(dst, src, n, count, op);
		break;
	case ncclFloat16:
	case ncclBfloat16:
		reduce_16(dst, src, n, count, op, type == ncclBfloat16);
		break;
	default:
		break; /* refused when the operation was issued */
	}
}
