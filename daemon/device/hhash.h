/*
 * hhash.h: ZEN's hierarchical hashing (Algorithm 1, sec. 3.2), the push side of Balanced
 * Parallelism: splits the non-zeros of a tensor into P partitions (one per server) by the
 * shared partition hash h0, losslessly and with balanced load (Theorem 2).
 *
 * Memory per partition: r1 parallel slots addressed by k rehash functions h1..hk (seeds
 * derived from the shared seed, independent of h0's), then r2 serial slots taken in order
 * by an atomic counter. Slots are claimed by compare-and-swap against a sentinel that is
 * never a valid index, so index 0 is kept and two threads can never overwrite each other
 * (both defects of the ZEN reference code). Serial memory is bounded; what overflows it
 * goes to a spill area sized to the reserved non-zero count, so every input within the
 * reservation is kept whatever its distribution (all in one partition included).
 *
 * Sizes: ZEN sets r1 = 2|G|d and r2 = r1/10 and describes r1 as the parallel memory for a
 * tensor of |G|d non-zeros; here r1_factor is the total parallel memory over all
 * partitions as a multiple of the non-zeros (2 = a load factor of 1/2), split evenly over
 * the P partitions, and r2 = r2_ratio * r1 per partition.
 *
 * Each slot holds (index << 32 | value bits), so extraction (Algorithm 1 lines 19-23)
 * never gathers G[idx] from a large tensor at random; it also empties the slots it reads,
 * so the table is clean for the next step without a separate clearing pass.
 *
 * Two phases, so the table is never hit at random from the whole tensor's scan: (1) each
 * thread scans a contiguous chunk of the input and appends every non-zero, by h0, to its
 * own small per-partition stage (sequential writes; a stage that fills up is inserted
 * into the table at once, by compare-and-swap); (2) each partition gets one owner thread,
 * which sweeps its r1 slots into cache, inserts every thread's stage for it in scan order
 * and extracts it while it is still cached. The placements are those of inserting the
 * non-zeros one by one in scan order (with one thread, exactly), so Fig. 16's serial
 * shares are unchanged; only the memory traffic is.
 *
 * Threads: a pool of cfg.threads (the caller included). Order within a partition depends
 * on thread timing; the set of (index, value) pairs never does.
 */
#ifndef SCD_DEVICE_HHASH_H
#define SCD_DEVICE_HHASH_H

#include "device/partition.h"

#define SCD_HH_MAX_K 8

typedef struct scd_hh_cfg {
	uint64_t numel;	       /* tensor size (indices < numel) */
	uint32_t nparts;       /* n: partitions = servers */
	uint64_t nnz_cap;      /* most non-zeros one push may carry (spill area size) */
	uint64_t nnz_expected; /* typical non-zeros, |G| d: sizes r1 (0: nnz_cap) */
	double r1_factor;      /* total parallel slots / nnz_cap (ZEN: 2) */
	double r2_ratio;       /* serial slots per partition / r1 (ZEN: 0.1) */
	uint32_t k;	       /* rehash functions, 1..SCD_HH_MAX_K (ZEN: 3) */
	uint64_t seed;	       /* shared by all ranks; h0 = scd_partfn_make(nparts, seed) */
	unsigned threads;      /* worker threads, caller included (0: 1) */
	uint32_t stage_slots;  /* staging entries per thread and partition (0: from
				* nnz_expected; small values force early inserts, for tests) */
} scd_hh_cfg_t;

typedef struct scd_hh_stats {
	uint64_t nnz;	   /* indices pushed */
	uint64_t parallel; /* placed in parallel memory */
	uint64_t serial;   /* placed in serial memory */
	uint64_t spill;	   /* serial memory full: placed in the spill area */
	uint64_t probes;   /* parallel-slot probes made */
	uint64_t max_part; /* largest partition */
	double imbalance;  /* max_part * P / nnz (ZEN Def. 8, push); 1 is perfect */
} scd_hh_stats_t;

typedef struct scd_hh scd_hh_t;

/* Fills ZEN's defaults (r1 = 2 x nnz, r2 = r1 / 10, k = 3) around the given sizes. Pushes
 * of up to nnz_cap non-zeros are lossless whatever r1 is; r1 only sets the speed. */
scd_hh_cfg_t scd_hh_cfg_default(uint64_t numel, uint32_t nparts, uint64_t nnz_cap,
				uint64_t seed);
/* Allocates and pre-faults the table, spill area and thread pool. */
sc_status_t scd_hh_create(const scd_hh_cfg_t *cfg, scd_hh_t **hh_p);
void scd_hh_destroy(scd_hh_t *hh);
const scd_partfn_t *scd_hh_partfn(const scd_hh_t *hh);
/* Per-partition sizes in slots (for reports). */
void scd_hh_geometry(const scd_hh_t *hh, uint64_t *r1_p, uint64_t *r2_p);

/*
 * Pushes the non-zeros of dense g[0, numel) (scanned here: the natural-sparsity path) or
 * of a COO tensor (unique indices < numel). On success out holds every pair, partition p
 * at out->idx/val[offset[p] .. offset[p + 1]) (offset: nparts + 1 entries). More
 * non-zeros than nnz_cap or than out->cap: SC_ERR_LIMIT (nothing is silently lost, and the
 * table is left clean). stats_p may be NULL.
 */
sc_status_t scd_hh_push_dense(scd_hh_t *hh, const float *g, uint64_t numel, scd_coo_t *out,
			      uint64_t *offset, scd_hh_stats_t *stats_p);
sc_status_t scd_hh_push_coo(scd_hh_t *hh, const scd_coo_t *in, scd_coo_t *out, uint64_t *offset,
			    scd_hh_stats_t *stats_p);

#endif
