/*
 * msgops.h: the cpu device's kernels for the scheme layer's own steps (device.h's "scheme
 * infrastructure"): the bodies of the sparse messages of AGsparse and Hierarchical
 * Centralization (scheme/scheme_msg.c: COO, a bitmap over the list's own range, or runs of
 * consecutive indices). The scheme composes and reads each message's header on the host
 * from what these return; they fill and read the bodies. Every pointer is device memory.
 * Each is the loop scheme_msg.c ran inline before, so messages keep their bytes.
 */
#ifndef SCD_DEVICE_MSGOPS_H
#define SCD_DEVICE_MSGOPS_H

#include <stdint.h>

/* Maximal runs of consecutive indices (idx[j] == idx[j - 1] + 1) in idx[0, n). */
uint64_t scd_idx_count_runs(const uint32_t *idx, uint64_t n);
/* Those runs as (start, length) u32 pairs, in order, at runs (4-byte fields, no alignment
 * required). */
void scd_idx_runs_encode(const uint32_t *idx, uint64_t n, void *runs);
/* Clears the (span + 63) / 64 words of a bitmap over [lo, lo + span) and sets bit
 * idx[j] - lo of each entry; returns the position of the first entry outside the range
 * (n when none is: then every entry was set). */
uint64_t scd_idx_bitmap_encode(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t span,
			       uint64_t *words);
/* Expands nruns (start, length) u32 pairs into the indices they cover, in order, into
 * idx (room for max); returns their number, or UINT64_MAX when a run is empty, starts
 * below the end of the one before, ends past numel or would go past max. */
uint64_t scd_runs_decode(const void *runs, uint64_t nruns, uint64_t numel, uint64_t max,
			 uint32_t *idx);
/* idx[j] += add for n entries (a range's decoded offsets made indices). */
void scd_idx_add(uint32_t *idx, uint64_t n, uint32_t add);

#endif
