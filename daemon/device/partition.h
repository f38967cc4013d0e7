/*
 * partition.h: ZEN's partition hash h0 and the sorted per-partition index lists
 * (ZEN sec. 3.2, Algorithm 1 line 5; sec. 3.3.2, Algorithm 2).
 *
 * scd_partition_of() is the one definition of partition(idx): the hierarchical-hashing
 * push and the hash-bitmap pull both call it, and the lists I_p below are built from it,
 * so push and pull cannot disagree (the ZEN reference code used two different moduli and
 * broke whenever numel was not a multiple of P). It is a seeded hash, the same on every
 * rank given the shared seed, reduced to [0, P) by multiply-shift (exact for any P).
 *
 * The hash bitmap needs I_p = {idx < numel : partition(idx) = p} in ascending order. That
 * costs a pass over the whole index space, so it is computed once per (numel, P, seed)
 * (with its inverse, 8 bytes per element in all) and shared through a reference-counted
 * cache.
 */
#ifndef SCD_DEVICE_PARTITION_H
#define SCD_DEVICE_PARTITION_H

#include "device/sparse.h"

typedef struct scd_partfn {
	uint64_t seed; /* h0's seed, shared by all ranks */
	uint32_t nparts;
} scd_partfn_t;

static inline scd_partfn_t scd_partfn_make(uint32_t nparts, uint64_t seed)
{
	return (scd_partfn_t){.seed = scd_seed_derive(seed, 0), .nparts = nparts ? nparts : 1};
}

/* partition(idx): the partition (server) that owns index idx. */
static inline uint32_t scd_partition_of(const scd_partfn_t *fn, uint32_t idx)
{
	return scd_hash_range(fn->seed, idx, fn->nparts);
}

/* I_0 .. I_{P-1}, each ascending, back to back: I_p = list[offset[p] .. offset[p + 1]).
 * pos is the inverse: list[offset[partition(i)] + pos[i]] == i, the slot of index i in
 * its partition's list (a server aggregates its partition in a dense array of |I_p|
 * floats indexed by pos, instead of one of numel). */
typedef struct scd_partmap {
	uint64_t numel;
	uint64_t seed; /* the seed given to scd_partmap_acquire */
	scd_partfn_t fn;
	uint64_t *offset; /* nparts + 1 */
	uint32_t *list;	  /* numel */
	uint32_t *pos;	  /* numel */
} scd_partmap_t;

/*
 * Splits an ascending COO list by partition(idx), stably: partition p lands at
 * out->idx/val[offset[p] .. offset[p + 1]) (offset: nparts + 1 entries), still ascending.
 * Two sequential passes (count, then place), so the pushes of Balanced Parallelism leave
 * in index order and the servers' aggregation and the pull walk memory in order; the
 * partitions are those of hierarchical hashing (same h0). SC_ERR_LIMIT if out->cap is
 * smaller than in->nnz.
 */
sc_status_t scd_partition_coo(const scd_partfn_t *fn, const scd_coo_t *in, scd_coo_t *out,
			      uint64_t *offset);

/* Returns the cached lists for (numel, nparts, seed), building them on first use. */
sc_status_t scd_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
				const scd_partmap_t **map_p);
void scd_partmap_release(const scd_partmap_t *map);
/* How many lists were built since start (cache effectiveness; for tests). */
uint64_t scd_partmap_builds(void);

static inline uint64_t scd_partmap_size(const scd_partmap_t *m, uint32_t p)
{
	return m->offset[p + 1] - m->offset[p];
}

#endif
