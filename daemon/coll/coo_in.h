/*
 * coo_in.h: a trainer's COO input, taken once. The trainer can write its shared COO area
 * at any time, also while the daemon works on it; a list the engine checked and then read
 * again could fail a later check on this rank alone and leave the others waiting. So the
 * engine copies the list into its own memory first, and everything after (the range
 * check, the scheme, its own re-check) reads the copy. A list whose indices are not
 * strictly ascending is sorted there and its repeated indices summed (in their order in
 * the list), so every rank takes the sparse path alike, whatever order its trainer wrote.
 */
#ifndef SCD_COLL_COO_IN_H
#define SCD_COLL_COO_IN_H

#include <stdint.h>

#include "device/device.h"

/*
 * Copies nnz entries (idx, val, in dev's memory) into memory of dev's that *owned_p gets
 * (free it with dev->free), sorted and summed as above, into *in_p. 1 when every index is
 * below numel; 0 otherwise, or out of memory (nothing owned: the caller takes the dense
 * path, whose local sum finds and reports the bad indices).
 */
int scd_coo_in_take(const scd_device_ops_t *dev, const uint32_t *idx, const float *val,
		    uint64_t nnz, uint64_t numel, scd_coo_t *in_p, void **owned_p);

/* Sorts n host entries by index, summing repeated ones in list order; the new count.
 * keys: room for n 64-bit keys. */
uint64_t scd_coo_sort_sum(uint32_t *idx, float *val, uint64_t n, uint64_t *keys);

#endif
