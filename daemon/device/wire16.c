/*
 * wire16.c: float32 <-> fp16 / bfloat16 conversions of the 16-bit wire (wire16.h). The
 * portable fp16 narrowing is the exponent rebias with round-to-nearest-even carried by an
 * integer add, and float arithmetic for the subnormal range (adding 0.5 puts the value's
 * bits at binary16's subnormal quantum, and the FPU rounds to nearest even); it quiets a
 * NaN the way F16C's VCVTPS2PH does, so the two paths agree bit for bit. The whole-buffer
 * loops go through F16C 8 values at a time where the CPU has it (AVX2 for bfloat16, whose
 * conversions are integer shifts and adds), else through the portable code.
 */
#include "device/wire16.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define WIRE16_X86 1
#endif

static inline uint32_t f32_bits(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return x;
}

static inline float bits_f32(uint32_t x)
{
	float f;
	memcpy(&f, &x, 4);
	return f;
}

uint16_t scd_f32_to_fp16(float f)
{
	uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
	if (a > 0x7f800000u) /* NaN: quiet, the top of the payload kept */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* 65520 and up round to infinity (65504 is the largest) */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: a subnormal or zero */
		float s = bits_f32(a) + 0.5f;
		return (uint16_t)(sign | (f32_bits(s) - 0x3f000000u));
	}
	uint32_t odd = (a >> 13) & 1u;
	a += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
	return (uint16_t)(sign | (a >> 13));
}

float scd_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f) /* infinity, or a NaN made quiet as F16C's VCVTPH2PS does */
		return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
	if (e == 0) { /* zero or a subnormal: m x 2^-24, exact in float32 */
		float v = (float)m * 0x1p-24f;
		return bits_f32(sign | f32_bits(v));
	}
	return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t scd_f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);
	uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	/* a NaN keeps its sign and top payload and is made quiet; rounding could carry it
	 * into the exponent (an infinity) or wrap it */
	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : r);
}

float scd_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

/* ---- whole buffers, portable -------------------------------------------------------- */

static void narrow_fp16_c(uint16_t *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = scd_f32_to_fp16(src[i]);
}

static void widen_fp16_c(float *restrict dst, const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = scd_fp16_to_f32(src[i]);
}

static void add_fp16_c(float *restrict acc, const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acc[i] += scd_fp16_to_f32(src[i]);
}

static void narrow_bf16_c(uint16_t *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = scd_f32_to_bf16(src[i]);
}

static void widen_bf16_c(float *restrict dst, const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = scd_bf16_to_f32(src[i]);
}

static void add_bf16_c(float *restrict acc, const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acc[i] += scd_bf16_to_f32(src[i]);
}

/* ---- whole buffers, F16C and AVX2 ------------------------------------------------------ */

#ifdef WIRE16_X86
#define F16C_ATTR __attribute__((target("avx,f16c")))

F16C_ATTR static void narrow_fp16_x(uint16_t *restrict dst, const float *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h =
		    _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h);
	}
	narrow_fp16_c(dst + i, src + i, n - i);
}

F16C_ATTR static void widen_fp16_x(float *restrict dst, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i,
				 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	widen_fp16_c(dst + i, src + i, n - i);
}

F16C_ATTR static void add_fp16_x(float *restrict acc, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
		_mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
	}
	add_fp16_c(acc + i, src + i, n - i);
}

#define AVX2_ATTR __attribute__((target("avx2")))

/* 8 float32 bit patterns to bfloat16 as scd_f32_to_bf16 rounds them, in the low half. */
AVX2_ATTR static inline __m128i bf16_8(__m256i x)
{
	const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
	r = _mm256_srli_epi32(r, 16);
	__m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
	__m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
	r = _mm256_blendv_epi8(r, q, nan);
	r = _mm256_packus_epi32(r, r); /* per 128-bit lane: 4 values twice */
	return _mm256_castsi256_si128(_mm256_permute4x64_epi64(r, 0x08));
}

AVX2_ATTR static void narrow_bf16_x(uint16_t *restrict dst, const float *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 bf16_8(_mm256_loadu_si256((const __m256i *)(src + i))));
	narrow_bf16_c(dst + i, src + i, n - i);
}

AVX2_ATTR static inline __m256 bf16_widen_8(const uint16_t *src)
{
	__m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
	return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

AVX2_ATTR static void widen_bf16_x(float *restrict dst, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, bf16_widen_8(src + i));
	widen_bf16_c(dst + i, src + i, n - i);
}

AVX2_ATTR static void add_bf16_x(float *restrict acc, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(
		    acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), bf16_widen_8(src + i)));
	add_bf16_c(acc + i, src + i, n - i);
}
#endif

/* ---- dispatch ------------------------------------------------------------------------- */

/* -1: not chosen yet; 0: portable; 1: F16C (and AVX2 for bfloat16). */
static atomic_int g_mode = -1;

static int cpu_has_f16c(void)
{
#ifdef WIRE16_X86
	/* AVX2 through the compiler (it checks that the OS saves the registers); F16C by
	 * CPUID leaf 1, which not every compiler's __builtin_cpu_supports names */
	unsigned a, b, c, d;
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
	       (c & bit_F16C);
#else
	return 0;
#endif
}

static int mode(void)
{
	int m = atomic_load_explicit(&g_mode, memory_order_relaxed);
	if (m < 0) {
		m = cpu_has_f16c();
		atomic_store_explicit(&g_mode, m, memory_order_relaxed);
	}
	return m;
}

int scd_wire16_use_f16c(int on)
{
	atomic_store_explicit(&g_mode, on ? cpu_has_f16c() : 0, memory_order_relaxed);
	return mode();
}

/* The loops of one path for one format. */
typedef struct {
	void (*narrow)(uint16_t *restrict dst, const float *restrict src, size_t n);
	void (*widen)(float *restrict dst, const uint16_t *restrict src, size_t n);
	void (*add)(float *restrict acc, const uint16_t *restrict src, size_t n);
} loops_t;

/* [F16C][bfloat16] */
static const loops_t g_loops[2][2] = {
    {{narrow_fp16_c, widen_fp16_c, add_fp16_c}, {narrow_bf16_c, widen_bf16_c, add_bf16_c}},
#ifdef WIRE16_X86
    {{narrow_fp16_x, widen_fp16_x, add_fp16_x}, {narrow_bf16_x, widen_bf16_x, add_bf16_x}},
#else
    {{narrow_fp16_c, widen_fp16_c, add_fp16_c}, {narrow_bf16_c, widen_bf16_c, add_bf16_c}},
#endif
};

static const loops_t *loops(uint32_t wire)
{
	return &g_loops[mode()][wire == SC_WIRE_BF16];
}

void scd_wire16_narrow(uint32_t wire, uint16_t *dst, const float *src, size_t n)
{
	loops(wire)->narrow(dst, src, n);
}

void scd_wire16_widen(uint32_t wire, float *dst, const uint16_t *src, size_t n)
{
	loops(wire)->widen(dst, src, n);
}

void scd_wire16_add(uint32_t wire, float *acc, const uint16_t *src, size_t n)
{
	loops(wire)->add(acc, src, n);
}

void scd_wire16_round(uint32_t wire, float *x, uint16_t *out, size_t n)
{
	scd_wire16_narrow(wire, out, x, n);
	scd_wire16_widen(wire, x, out, n);
}
