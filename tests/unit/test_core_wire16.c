/*
 * test_core_wire16.c: the 16-bit wire's conversions (device/wire16.h): every fp16 and
 * bfloat16 bit pattern round trips through float32; float32 values round to nearest even
 * (ties, overflow to infinity, subnormals, NaN) against hand-worked values and a slow
 * reference; and the F16C / AVX2 buffer loops give the same bits as the portable code.
 */
#include "unit.h"

#include "device/wire16.h"

#include <string.h>

static uint32_t bits(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return x;
}

static float from_bits(uint32_t x)
{
	float f;
	memcpy(&f, &x, 4);
	return f;
}

static int fp16_is_nan(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

static int bf16_is_nan(uint16_t h)
{
	return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
}

/* Every pattern: widening is exact (a NaN stays a NaN, quieted) and narrowing it back
 * gives the pattern again (a NaN its quiet form); the buffer loops agree, either path. */
static void round_trip_all(uint32_t wire)
{
	uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
	float *f = malloc(65536 * 4), *g = malloc(65536 * 4);
	CHECK_TRUE(h && back && f && g);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	for (int path = 0; path < 2; path++) {
		scd_wire16_use_f16c(path);
		scd_wire16_widen(wire, f, h, 65536);
		scd_wire16_narrow(wire, back, f, 65536);
		for (uint32_t i = 0; i < 65536; i++) {
			int nan = wire == SC_WIRE_FP16 ? fp16_is_nan(h[i]) : bf16_is_nan(h[i]);
			float one = wire == SC_WIRE_FP16 ? scd_fp16_to_f32(h[i])
							 : scd_bf16_to_f32(h[i]);
			CHECK_MSG(
			    bits(one) == bits(f[i]) || (nan && isnan(one) && isnan(f[i])),
			    "%s 0x%04x: widened 0x%08x by one, 0x%08x by the loop (path %d)",
			    sc_wire_name(wire), i, bits(one), bits(f[i]), path);
			if (nan) {
				CHECK_MSG(isnan(f[i]), "%s NaN 0x%04x widened to %g",
					  sc_wire_name(wire), i, f[i]);
				uint16_t quiet =
				    (uint16_t)(h[i] | (wire == SC_WIRE_FP16 ? 0x200 : 0x40));
				CHECK_MSG(back[i] == quiet, "%s NaN 0x%04x came back as 0x%04x",
					  sc_wire_name(wire), i, back[i]);
			} else {
				CHECK_MSG(back[i] == h[i], "%s 0x%04x (%g) came back as 0x%04x",
					  sc_wire_name(wire), i, f[i], back[i]);
			}
		}
		/* the fused add: 1 + widen(h) for every finite pattern, as a float32 add */
		for (uint32_t i = 0; i < 65536; i++)
			g[i] = 1.0f;
		scd_wire16_add(wire, g, h, 65536);
		for (uint32_t i = 0; i < 65536; i++) {
			float want = 1.0f + f[i];
			CHECK_MSG(bits(g[i]) == bits(want) || (isnan(g[i]) && isnan(want)),
				  "%s add 0x%04x: %g, expected %g", sc_wire_name(wire), i, g[i],
				  want);
		}
	}
	scd_wire16_use_f16c(1);
	free(h), free(back), free(f), free(g);
}

UNIT_TEST(core_wire16_fp16_round_trips_every_pattern)
{
	round_trip_all(SC_WIRE_FP16);
}

UNIT_TEST(core_wire16_bf16_round_trips_every_pattern)
{
	round_trip_all(SC_WIRE_BF16);
}

UNIT_TEST(core_wire16_fp16_rounds_to_nearest_even)
{
	static const struct {
		float in;
		uint16_t out;
	} cases[] = {
	    {1.0f, 0x3c00},
	    {1.0f + 0x1p-11f, 0x3c00},		  /* tie: to the even 1.0 */
	    {1.0f + 3 * 0x1p-11f, 0x3c02},	  /* tie: to the even mantissa 2 */
	    {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just past the tie: up */
	    {-2.0f, 0xc000},
	    {65504.0f, 0x7bff},	  /* the largest finite */
	    {65519.996f, 0x7bff}, /* below the tie with infinity */
	    {65520.0f, 0x7c00},	  /* the tie rounds to the even: infinity */
	    {1e10f, 0x7c00},
	    {-1e10f, 0xfc00},
	    {INFINITY, 0x7c00},
	    {-INFINITY, 0xfc00},
	    {0x1p-14f, 0x0400},		   /* the smallest normal */
	    {0x1p-14f - 0x1p-25f, 0x0400}, /* a tie at the top of the subnormals */
	    {0x1p-24f, 0x0001},		   /* the smallest subnormal */
	    {0x1p-25f, 0x0000},		   /* tie between 0 and it: to 0 */
	    {0x1p-25f + 0x1p-40f, 0x0001}, /* just past the tie */
	    {3 * 0x1p-25f, 0x0002},	   /* tie between 1 and 2 quanta: 2 */
	    {5 * 0x1p-25f, 0x0002},	   /* tie between 2 and 3 quanta: 2 */
	    {-0x1p-24f, 0x8001},
	    {1e-30f, 0x0000},
	    {-1e-30f, 0x8000},
	    {0.0f, 0x0000},
	    {-0.0f, 0x8000},
	    {0.1f, 0x2e66},
	    {3.14159265f, 0x4248},
	};
	for (int path = 0; path < 2; path++) {
		scd_wire16_use_f16c(path);
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			uint16_t one = scd_f32_to_fp16(cases[i].in), buf[9];
			float in[9];
			for (int k = 0; k < 9; k++) /* 8 through the vector loop, 1 after it */
				in[k] = cases[i].in;
			scd_wire16_narrow(SC_WIRE_FP16, buf, in, 9);
			CHECK_MSG(one == cases[i].out && buf[0] == one && buf[8] == one,
				  "%a: 0x%04x, loop 0x%04x/0x%04x, expected 0x%04x (path %d)",
				  (double)cases[i].in, one, buf[0], buf[8], cases[i].out, path);
		}
		/* NaNs of both signs, quiet and signalling, stay NaN */
		static const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u,
						0xff800001u, 0x7fffffffu, 0x7f802000u};
		for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
			float in[8];
			uint16_t buf[8];
			for (int k = 0; k < 8; k++)
				in[k] = from_bits(nans[i]);
			scd_wire16_narrow(SC_WIRE_FP16, buf, in, 8);
			uint16_t one = scd_f32_to_fp16(in[0]);
			CHECK_MSG(fp16_is_nan(one) && one == buf[0] &&
				      (one & 0x8000) == ((nans[i] >> 16) & 0x8000),
				  "NaN 0x%08x: 0x%04x, loop 0x%04x", nans[i], one, buf[0]);
		}
	}
	scd_wire16_use_f16c(1);
}

/* The nearest bfloat16 by the slow way: the two neighbours compared in double. */
static uint16_t bf16_reference(float f)
{
	uint32_t x = bits(f);
	if (isnan(f))
		return (uint16_t)((x >> 16) | 0x40);
	uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
	double dl = fabs((double)f - (double)from_bits(lo));
	double dh = isinf(from_bits(hi)) && !isinf(f) ? 0 : fabs((double)from_bits(hi) - f);
	if ((lo & 0x7fffffffu) == 0x7f7f0000u && !isinf(f)) { /* beyond: infinity's tie */
		double top = fabs((double)from_bits(lo)) + ldexp(1.0, 127 - 8); /* +ulp/2 */
		return (uint16_t)(fabs((double)f) >= top ? (hi >> 16) : (lo >> 16));
	}
	if (dl < dh || (dl == dh && !((lo >> 16) & 1)))
		return (uint16_t)(lo >> 16);
	return (uint16_t)(hi >> 16);
}

UNIT_TEST(core_wire16_bf16_rounds_to_nearest_even)
{
	static const struct {
		uint32_t in;
		uint16_t out;
	} cases[] = {
	    {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, /* tie: to the even */
	    {0x3f818000u, 0x3f82},			  /* tie: to the even */
	    {0x3f808001u, 0x3f81},			  /* past the tie: up */
	    {0x7f7fffffu, 0x7f80},			  /* float32's largest: infinity */
	    {0x7f7f7fffu, 0x7f7f},			  /* below the tie: the largest */
	    {0xff7fffffu, 0xff80}, {0x7f800000u, 0x7f80},
	    {0x00008000u, 0x0000}, /* subnormal tie: to even 0 */
	    {0x00018000u, 0x0002}, {0x00000001u, 0x0000},
	    {0x80000000u, 0x8000}, {0x7f800001u, 0x7fc0}, /* signalling NaN: quieted */
	    {0xff800001u, 0xffc0}, {0x7fffffffu, 0x7fff},
	};
	for (int path = 0; path < 2; path++) {
		scd_wire16_use_f16c(path);
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			float in[40];
			uint16_t buf[40];
			for (int k = 0; k < 40; k++)
				in[k] = from_bits(cases[i].in);
			scd_wire16_narrow(SC_WIRE_BF16, buf, in, 40);
			uint16_t one = scd_f32_to_bf16(in[0]);
			CHECK_MSG(one == cases[i].out && buf[0] == one && buf[39] == one,
				  "0x%08x: 0x%04x, loop 0x%04x, expected 0x%04x", cases[i].in,
				  one, buf[0], cases[i].out);
		}
	}
	scd_wire16_use_f16c(1);
	for (int i = 0; i < 1 << 22; i++) {
		uint32_t x = (uint32_t)unit_rng();
		if (i & 1) /* half of them on or next to a tie */
			x = ((x & 0xffff0000u) | 0x8000u) + (uint32_t)unit_rng_below(3) - 1u;
		uint16_t got = scd_f32_to_bf16(from_bits(x)),
			 want = bf16_reference(from_bits(x));
		CHECK_MSG(got == want, "0x%08x: 0x%04x, expected 0x%04x (seed %" PRIu64 ")", x,
			  got, want, unit_seed());
	}
	/* the buffer loop (AVX2 where the CPU has it) on random patterns and ties */
	enum { N = 1 << 16 };
	float *in = malloc(N * 4);
	uint16_t *out = malloc(N * 2);
	CHECK_TRUE(in && out);
	for (int i = 0; i < N; i++) {
		uint32_t x = (uint32_t)unit_rng();
		in[i] = from_bits(i & 1 ? (x & 0xffff0000u) | 0x8000u : x);
	}
	scd_wire16_narrow(SC_WIRE_BF16, out, in, N);
	for (int i = 0; i < N; i++)
		CHECK_MSG(out[i] == bf16_reference(in[i]),
			  "loop, 0x%08x: 0x%04x, expected 0x%04x", bits(in[i]), out[i],
			  bf16_reference(in[i]));
	free(in), free(out);
}

/* The portable fp16 narrowing gives F16C's bits for float32 patterns across the whole
 * range (every 13th one, and random ones next to a tie). */
UNIT_TEST_TIMEOUT(core_wire16_fp16_portable_matches_f16c, 120)
{
	if (!scd_wire16_use_f16c(1))
		unit_skip("this CPU has no F16C");
	enum { N = 4096 };
	float *in = malloc(N * 4);
	uint16_t *hw = malloc(N * 2);
	CHECK_TRUE(in && hw);
	uint64_t x = unit_rng_below(13);
	while (x <= UINT32_MAX) {
		int n = 0;
		for (; n < N && x <= UINT32_MAX; n++, x += 13)
			in[n] = from_bits((uint32_t)x);
		for (int k = 0; n == N && k < 512; k++) /* ties of the normal range */
			in[k] = from_bits(((uint32_t)unit_rng() & 0xffffe000u) | 0x1000u);
		scd_wire16_narrow(SC_WIRE_FP16, hw, in, (size_t)(n & ~7));
		for (int k = 0; k < (n & ~7); k++)
			CHECK_MSG(scd_f32_to_fp16(in[k]) == hw[k],
				  "0x%08x: portable 0x%04x, F16C 0x%04x", bits(in[k]),
				  scd_f32_to_fp16(in[k]), hw[k]);
	}
	free(in), free(hw);
}
