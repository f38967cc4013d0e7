/*
 * listops.h: the cpu device's memory operations and the generic scans and list operations
 * the schemes and the engine run on tensor data (device.h's ops table points here). They
 * are the reference a GPU device's kernels are tested against, so each is written the
 * obvious way; where the order of additions matters (merges), it is part of the contract.
 */
#ifndef SCD_DEVICE_LISTOPS_H
#define SCD_DEVICE_LISTOPS_H

#include <stddef.h>
#include <stdint.h>

#include "device/sparse.h"

/* Host memory: zeroed and pre-faulted (the first touch of a page costs about 10 us, and
 * workspaces are reused every step); 64-byte aligned, huge-page advised from 2 MiB. */
void *scd_cpu_alloc(size_t bytes);
void scd_cpu_free(void *p);
void scd_cpu_clear(void *dst, size_t bytes);
void scd_cpu_copy(void *dst, const void *src, size_t bytes);
sc_status_t scd_cpu_sync(void);

/* Non-zeros of g[0, n). */
uint64_t scd_count_nonzero(const float *g, uint64_t n);
/* The non-zeros of g[0, n) as an ascending list (idx, val); returns their number. */
uint64_t scd_dense_to_coo(const float *g, uint64_t n, uint32_t *idx, float *val);
/* dst[idx[j]] = val[j] for every entry. */
void scd_coo_scatter(float *dst, const scd_coo_t *src);
/* The position of the first entry of coo whose index is >= numel or not above the one
 * before it; coo->nnz when every index is in range and strictly ascending. */
uint64_t scd_coo_check(const scd_coo_t *coo, uint64_t numel);
/* First position in ascending a[0, n) whose value is >= v. */
uint64_t scd_lower_bound_u32(const uint32_t *a, uint64_t n, uint64_t v);
/* Merges the ascending list b into (ai, av, an): a's entries first on equal indices, so
 * sums keep list order; b's alone enter as 0.0f + v (a dense scatter-add's bits). o has
 * room for an + b->nnz entries; returns the union's length. */
uint64_t scd_coo_merge_two(const uint32_t *ai, const float *av, uint64_t an, const scd_coo_t *b,
			   uint32_t *oi, float *ov);
/* (oi, ov) = src with every value written as 0.0f + v (the first list of a merge). */
void scd_coo_copy_first(uint32_t *oi, float *ov, const scd_coo_t *src);
/* (oi, ov)[j] = (idx[j], share x val[j]) for n entries (share 1: an exact copy). */
void scd_coo_scale_copy(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			uint64_t n, float share);
/* Top-k by magnitude of a COO list (n entries, ascending indices), kept in place at the
 * front in index order; ties at the k-th magnitude go to the lowest indices, so the same
 * input gives the same selection on every rank. Returns the number kept (min(k, n)).
 * Entries that are not kept move to [kept, n), in index order (tmp_*: scratch of n). */
uint64_t scd_coo_topk(uint32_t *idx, float *val, uint64_t n, uint64_t k, uint32_t *tmp_idx,
		      float *tmp_val);
/* Non-zeros of g in each of P even ranges of [0, numel) (range p: [p numel / P,
 * (p + 1) numel / P)) into counts[P], host memory. */
void scd_range_counts(const float *g, uint64_t numel, uint32_t P, uint64_t *counts);
/* The same for an ascending list (entries whose value is non-zero). */
void scd_coo_range_counts(const scd_coo_t *o, uint64_t numel, uint32_t P, uint64_t *counts);
/* res[idx[j]] += val[j] for n entries, in order. With touch, every index at which res
 * was exactly zero before the addition is appended to touch (at *n_touch, host memory). */
void scd_residual_add(float *res, const uint32_t *idx, const float *val, uint64_t n,
		      uint32_t *touch, uint64_t *n_touch);
/* d[i] *= f for n floats. */
void scd_scale_f32(float *d, uint64_t n, float f);
/* val[j] = src[idx[j]] for n entries; with take, src[idx[j]] = 0 afterwards (the indices
 * of one call are unique). */
void scd_gather(float *val, float *src, const uint32_t *idx, uint64_t n, int take);
/* val[j] = the value of index idx[j] in the ascending list (0 where it has none), for n
 * entries in any order; with take, those entries of the list become 0 (the indices of one
 * call are unique). */
void scd_coo_gather(float *val, const uint32_t *idx, uint64_t n, scd_coo_t *list, int take);

#endif
