/*
 * sparse.h: the plain types the cpu device (and, later, the cuda device) share: a COO
 * sparse tensor, the index sentinel, and the seeded hash every hashed structure uses.
 *
 * Indices are 32-bit (ZEN's COO layout: 4-byte index + 4-byte value), so a tensor holds at
 * most SCD_NUMEL_MAX elements and SCD_IDX_NONE (0xffffffff) is never a valid index: it marks
 * empty hash slots (the ZEN reference code used 0 and silently dropped gradient index 0).
 *
 * The hash is MurmurHash3's 64-bit finaliser over (index xor seed): a bijection on 64 bits,
 * so distinct indices never collide before range reduction, and the range reduction is the
 * multiply-shift map ((h >> 32) * n) >> 32, exact for every n (no modulus, no power-of-two
 * assumption), which is what lets one function define partition(idx) for push and pull.
 */
#ifndef SCD_DEVICE_SPARSE_H
#define SCD_DEVICE_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

#define SCD_IDX_NONE  UINT32_MAX
#define SCD_NUMEL_MAX ((uint64_t)UINT32_MAX) /* indices 0 .. 2^32-2 */

/* A sparse tensor in coordinate form: nnz (index, value) pairs in caller-owned arrays of
 * capacity cap. Producers in this device write indices in ascending order unless a
 * function says otherwise. */
typedef struct scd_coo {
	uint32_t *idx;
	float *val;
	uint64_t nnz;
	uint64_t cap;
} scd_coo_t;

/* MurmurHash3 fmix64: a fast bijective mixer with full avalanche. */
static inline uint64_t scd_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* Hash of idx under seed, reduced to [0, n) by multiply-shift. */
static inline uint32_t scd_hash_range(uint64_t seed, uint32_t idx, uint32_t n)
{
	uint64_t h = scd_fmix64((uint64_t)idx ^ seed);
	return (uint32_t)(((h >> 32) * (uint64_t)n) >> 32);
}

/* Derives the i-th sub-seed of a seed (per hash function, per step, per row). */
static inline uint64_t scd_seed_derive(uint64_t seed, uint64_t i)
{
	return scd_fmix64(seed + 0x9e3779b97f4a7c15ULL * (i + 1));
}

/* How far ahead a walk over scattered indices of a tensor-sized array (a residual) asks
 * for their cache lines (__builtin_prefetch): enough misses in flight to cover the
 * latency, few enough to stay in the line fill buffers. */
#define SCD_PREFETCH_AHEAD 16

/* The key that orders floats by magnitude: |x|'s bit pattern as an unsigned integer.
 * For every non-NaN x, |a| < |b| iff key(a) < key(b); NaNs rank above infinity. */
static inline uint32_t scd_abs_key(float x)
{
	union {
		float f;
		uint32_t u;
	} v = {.f = x};
	return v.u & 0x7fffffffu;
}

/* The smallest key a threshold selects: |x| >= threshold, never an exact zero. */
static inline uint32_t scd_threshold_key(float threshold)
{
	uint32_t key = scd_abs_key(threshold);
	return key ? key : 1;
}

static inline float scd_key_to_float(uint32_t key)
{
	union {
		uint32_t u;
		float f;
	} v = {.u = key};
	return v.f;
}

#endif
