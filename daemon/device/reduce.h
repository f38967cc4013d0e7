/*
 * reduce.h: elementwise reduction (sum, min, max, product) of two buffers of any dtype
 * of the public API, shared by the engine (reducing a node's trainers) and the transport's
 * ring. A float32 sum goes through the cpu device's reduce_sum; integers add and multiply
 * as unsigned (two's-complement wrap-around, no undefined overflow). Also the cpu device's
 * other engine ops on whole buffers: averaging of any dtype and the sum of a trainer's COO
 * input (device.h, "-- engine --").
 */
#ifndef SCD_DEVICE_REDUCE_H
#define SCD_DEVICE_REDUCE_H

#include <stdint.h>

#include "sparsecomm.h"

/* dst[i] = dst[i] op src[i] for n elements of dtype: SC_OP_SUM and SC_OP_AVERAGE add (the
 * average divides afterwards, scd_average_typed), SC_OP_MIN, SC_OP_MAX and SC_OP_PRODUCT
 * as sparsecomm.h defines them (a NaN operand makes the element NaN; integer products
 * wrap around). An unknown dtype or op does nothing. */
void scd_reduce_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src,
		      uint64_t n);

/* Fills x with n copies of op's identity for dtype, what a node that holds nothing of a
 * tensor (its trainers joined, or the tensor went away) gives the reduction: +infinity
 * (an integer's largest value) for SC_OP_MIN, -infinity (its smallest) for SC_OP_MAX, 1
 * for SC_OP_PRODUCT, and zeros for a sum, an average and anything else. Host memory. */
void scd_reduce_identity_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *x, uint64_t n);

/* A sum turned into an average, x[i] = x[i] / divisor for n elements of dtype: float32
 * multiplies by the rounded 1 / divisor, float64 divides in double, integers divide in
 * integer arithmetic (truncated toward zero); an unknown dtype does nothing. */
void scd_average_typed(sc_dtype_t dtype, void *x, uint64_t n, double divisor);

/* dst[idx[j]] += val[j] for the nnz entries, in order, skipping those whose index is not
 * below numel (a trainer's COO input, which nothing has checked); returns how many it
 * skipped. */
uint64_t scd_coo_add_checked(float *dst, uint64_t numel, const uint32_t *idx, const float *val,
			     uint64_t nnz);

/*
 * The Adasum operator on two host vectors of n elements of dtype (float32 or float64; any
 * other does nothing): a = (1 - a.b / (2 a.a)) a + (1 - a.b / (2 b.b)) b, the three dot
 * products summed in double in element order, a zero vector's coefficient 1 (its term is
 * plain addition), each element computed in double and rounded to dtype once.
 */
void scd_adasum_pair_typed(sc_dtype_t dtype, void *a, const void *b, uint64_t n);

/*
 * The local sum with the non-finite check folded into it (host memory, float32): each
 * writes dst and returns how many of the values it wrote are NaN or infinite, in the same
 * pass. copy: dst = src; sum: dst += src (a NaN or infinity in either input, or a sum that
 * overflows, gives one); count: reads x only, for a sum that had nothing to add (a node of
 * one trainer whose buffer is summed in place).
 */
uint64_t scd_copy_f32_nonfinite(float *restrict dst, const float *restrict src, uint64_t n);
uint64_t scd_sum_f32_nonfinite(float *restrict dst, const float *restrict src, uint64_t n);
uint64_t scd_count_f32_nonfinite(const float *x, uint64_t n);

#endif
