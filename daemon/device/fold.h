/*
 * fold.h: the cpu device's ops on a tensor's error-feedback residual that the engine runs
 * before a step (device.h, "-- engine --"): the residual added back into a dense
 * contribution, and, for a single trainer's COO input, folded into the list instead, with
 * a bitmap of where the residual may be non-zero so that no pass over the tensor is needed
 * (docs/design.md, "Sparsify ahead"). Every sum is the dense x[i] += residual[i], so the
 * bits do not depend on which path ran.
 */
#ifndef SCD_DEVICE_FOLD_H
#define SCD_DEVICE_FOLD_H

#include <stdint.h>

#include "device/sparse.h"

/* x[i] += res[i], then res[i] = 0, for n floats. */
void scd_residual_drain(float *x, float *res, uint64_t n);

/* acc[i] = x[i] + res[i] for n floats: error feedback's accumulation written aside, x and
 * res only read (the sum fl(x + res) that a sparsifier's fused pass forms). */
void scd_acc_aside(float *acc, const float *x, const float *res, uint64_t n);

/* bits[(n + 63) / 64]: a bit set where res[0, n) is non-zero, clear elsewhere; returns the
 * number set. */
uint64_t scd_residual_bits(const float *res, uint64_t n, uint64_t *bits);

/* Sets the bit of each of idx[0, n) in bits (an index may be listed twice). */
void scd_bits_set(uint64_t *bits, const uint32_t *idx, uint64_t n);

/*
 * (oi, ov) = the ascending union of in (ascending, indices < numel) and the residual's
 * entries at the set bits of bits[(numel + 63) / 64]: in's value + res[i] where both have
 * index i, either alone elsewhere; entries that sum to zero are left out. The residual is
 * zeroed at every set bit, and every bit cleared. (oi, ov) has room for in->nnz plus the
 * bits set; returns the entries written. Every non-zero of res must have its bit set.
 */
uint64_t scd_coo_fold_residual(const scd_coo_t *in, float *res, uint64_t *bits, uint64_t numel,
			       uint32_t *oi, float *ov);

#endif
