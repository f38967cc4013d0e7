/*
 * scheme_kernels.h: the cpu device's kernels for the steps of Balanced Parallelism,
 * OmniReduce, SparDL, S2 and ExDyna that are not formats, sketches or sparsifiers
 * (device.h's "per-scheme kernels"; the schemes are described in docs/schemes.md). Each
 * works on a whole list or range per call, as a GPU kernel would; what the schemes' control
 * flow needs back (positions, counts, runs) is returned or written to host memory, as the
 * arguments say. Pointers not marked host are device memory.
 */
#ifndef SCD_DEVICE_SCHEME_KERNELS_H
#define SCD_DEVICE_SCHEME_KERNELS_H

#include <stdint.h>

#include "device/sparse.h"

/* A run of a list that falls in one block (scd_coo_block_runs): entries [lo, hi). */
typedef struct scd_run {
	uint32_t block;
	uint64_t lo, hi;
} scd_run_t;

/*
 * Binary searches in nlists ascending lists of a, list l being a[off[l], off[l + 1]) (off:
 * host, nlists + 1 entries): pos[l * nv + k] = the first position in list l, counted from
 * its start, whose value is >= v[k] (v: host, nv entries; pos: host, nlists x nv).
 */
void scd_lower_bounds(const uint32_t *a, const uint64_t *off, uint32_t nlists,
		      const uint64_t *v, uint32_t nv, uint64_t *pos);

/* The first position j of idx[0, n) with idx[j] outside [lo, hi) or not above idx[j - 1];
 * n when the list is strictly ascending inside the range. */
uint64_t scd_idx_check_range(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi);

/* The entries of (idx, val)[0, n) whose value is non-zero, in order, into (oi, ov), which
 * may be (idx, val) themselves; returns their number. */
uint64_t scd_coo_compact_nonzero(const uint32_t *idx, const float *val, uint64_t n,
				 uint32_t *oi, float *ov);

/* The union of two ascending lists into (oi, ov) (room for an + bn entries): a value on
 * both sides is av + bv, a value on one side is copied as it is (-0.0 stays -0.0; compare
 * merge_two, which writes b's alone as 0.0f + v). Returns the union's length. */
uint64_t scd_coo_merge_sum(const uint32_t *ai, const float *av, uint64_t an, const uint32_t *bi,
			   const float *bv, uint64_t bn, uint32_t *oi, float *ov);

/* The entries of (idx, val)[0, n) whose index is t modulo d, in order, into (oi, ov);
 * returns their number. */
uint64_t scd_coo_filter_mod(const uint32_t *idx, const float *val, uint64_t n, uint32_t d,
			    uint32_t t, uint32_t *oi, float *ov);

/*
 * Splits idx[0, n) into maximal runs that are strictly ascending inside one block of the
 * partition of [0, numel) given by bnd (host, nb + 1 ascending entries, bnd[nb] = numel;
 * block b is [bnd[b], bnd[b + 1]), blocks may be empty: an index belongs to the last b
 * with bnd[b] <= index). Writes the runs in order to runs (host, room for max) and returns
 * their number; stops after max runs, or at an index >= numel starting a run, whose
 * position goes to *bad (host; n when the scan was not stopped by one).
 */
uint32_t scd_coo_block_runs(const uint32_t *idx, uint64_t n, const uint64_t *bnd, uint32_t nb,
			    uint64_t numel, uint32_t max, scd_run_t *runs, uint64_t *bad);

/* res[i] -= x[i] * f for n floats. */
void scd_sub_scaled(float *res, const float *x, uint64_t n, float f);

#endif
