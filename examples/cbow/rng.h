/*
 * rng.h: a small deterministic generator (splitmix64) shared by the CBOW example's
 * modules. Seeded streams make every run, and every rank's view of shared state
 * (initial weights, subsampling), reproducible.
 */
#ifndef CBOW_RNG_H
#define CBOW_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_uniform(uint64_t *state)
{
	return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* A seed for an independent stream derived from seed and a stream number. */
static inline uint64_t rng_derive(uint64_t seed, uint64_t stream)
{
	uint64_t s = seed ^ (stream * 0xd1b54a32d192ed03ull);

	return rng_next(&s);
}

#endif /* CBOW_RNG_H */
