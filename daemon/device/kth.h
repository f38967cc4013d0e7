/*
 * kth.h: the k-th largest magnitude, by radix select on the magnitude key (scd_abs_key:
 * the float's bits without the sign, ordered as the magnitudes are). One definition for
 * every exact selection outside the sparsifier's fused tensor pass: the scheme layer's
 * top-k of COO lists, and the sparsifier's selections among samples and candidates.
 *
 * The first digit is the key's top 11 bits (the exponent and 3 mantissa bits, where
 * magnitudes spread out), then two 10-bit digits over the boundary bucket's keys only.
 * Those are copied once into scratch when one is given (n entries, not overlapping the
 * input: three passes over the input in all), else found again by a pass over the input
 * for each digit (no memory, for small inputs).
 */
#ifndef SCD_DEVICE_KTH_H
#define SCD_DEVICE_KTH_H

#include <stdint.h>

/* The k-th largest key (1 <= k <= n; 0 when k > n) of x's magnitudes, and how many keys
 * are larger (*gt_p, when not NULL). */
uint32_t scd_kth_key_f32(const float *x, uint64_t n, uint64_t k, uint32_t *scratch,
			 uint64_t *gt_p);
/* The same over keys already computed. */
uint32_t scd_kth_key_u32(const uint32_t *keys, uint64_t n, uint64_t k, uint32_t *scratch,
			 uint64_t *gt_p);

#endif
