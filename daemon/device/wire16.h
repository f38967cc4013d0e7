/*
 * wire16.h: the 16-bit wire formats of float32 tensors (sc_wire_t, sparsecomm.h): the
 * conversions between float32 and IEEE binary16 (fp16) or bfloat16 that the tcp ring runs
 * on every piece it sends and receives. Narrowing rounds to nearest, ties to even; values
 * beyond the format's range become infinities; a NaN stays a NaN (quieted, its sign and
 * the top of its payload kept). Widening is exact.
 *
 * The fp16 conversions use the CPU's F16C instructions where it has them (chosen once, at
 * the first call) and portable code elsewhere; both give the same bits for every input
 * (tests/unit checks it), so ranks on different CPUs still end bit-identical.
 */
#ifndef SCD_DEVICE_WIRE16_H
#define SCD_DEVICE_WIRE16_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

/* Bytes one element takes on the wire: 2 for SC_WIRE_FP16 and SC_WIRE_BF16, 0 otherwise
 * (native: the dtype's own size). */
static inline size_t scd_wire16_size(uint32_t wire)
{
	return wire == SC_WIRE_FP16 || wire == SC_WIRE_BF16 ? 2 : 0;
}

/* One value (portable code, the reference of the vector paths). */
uint16_t scd_f32_to_fp16(float f);
float scd_fp16_to_f32(uint16_t h);
uint16_t scd_f32_to_bf16(float f);
float scd_bf16_to_f32(uint16_t h);

/* dst[i] = narrow(src[i]) for n elements, wire SC_WIRE_FP16 or SC_WIRE_BF16. */
void scd_wire16_narrow(uint32_t wire, uint16_t *dst, const float *src, size_t n);
/* dst[i] = widen(src[i]). */
void scd_wire16_widen(uint32_t wire, float *dst, const uint16_t *src, size_t n);
/* acc[i] += widen(src[i]): a received piece summed into the float32 accumulator. */
void scd_wire16_add(uint32_t wire, float *acc, const uint16_t *src, size_t n);
/* x[i] = widen(narrow(x[i])), and wire[i] = narrow(x[i]): the owner of a reduced chunk
 * rounds its own copy as the others will receive it. */
void scd_wire16_round(uint32_t wire, float *x, uint16_t *out, size_t n);

/* 0: the portable code only (tests and benchmarks compare the two paths); 1: F16C where
 * the CPU has it (the default). Returns whether F16C is in use afterwards. */
int scd_wire16_use_f16c(int on);

#endif
