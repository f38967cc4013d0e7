/*
 * scg_hash.cuh: the seeded hash of daemon/device/sparse.h (scd_fmix64, scd_hash_range,
 * scd_seed_derive) and h0 (scd_partition_of, scd_partfn_make), re-expressed for device
 * code. Bit-identical to the cpu's: push, pull and sketches of both devices must agree.
 */
#ifndef SCG_HASH_CUH
#define SCG_HASH_CUH

#include "portable.cuh"

#include <exception>

SCG_HD inline uint64_t scg_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* Hash of idx under seed, reduced to [0, n) by multiply-shift. */
SCG_HD inline uint32_t scg_hash_range(uint64_t seed, uint32_t idx, uint32_t n)
{
	uint64_t h = scg_fmix64((uint64_t)idx ^ seed);
	return (uint32_t)(((h >> 32) * (uint64_t)n) >> 32);
}

SCG_HD inline uint64_t scg_seed_derive(uint64_t seed, uint64_t i)
{
	return scg_fmix64(seed + 0x9e3779b97f4a7c15ULL * (i + 1));
}

/* h0's seed from the shared seed (scd_partfn_make). */
SCG_HD inline uint64_t scg_partition_seed(uint64_t seed)
{
	return scg_seed_derive(seed, 0);
}

/* partition(idx) given h0's seed (scd_partition_of). */
SCG_HD inline uint32_t scg_partition_of(uint64_t pseed, uint32_t nparts, uint32_t idx)
{
	return scg_hash_range(pseed, idx, nparts);
}

#endif
