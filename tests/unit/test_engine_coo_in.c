/*
 * test_engine_coo_in.c: a trainer's COO input is taken once, into the engine's own memory
 * (coll/coo_in.h). The copy does not change when the trainer rewrites its list
 * afterwards; an unsorted list with repeated indices comes out strictly ascending with the
 * repeats summed in list order (a reference sum over a dense array must match bit for
 * bit); an index past numel is refused; seeded random lists against the reference.
 */
#include "unit.h"

#include <stdlib.h>
#include <string.h>

#include "coll/coo_in.h"

UNIT_TEST(engine_coo_in_copy_sorted_and_private)
{
	const scd_device_ops_t *dev = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK);
	uint32_t idx[6] = {9, 2, 9, 0, 5, 2};
	float val[6] = {1, 2, 3, 4, 5, 6};
	scd_coo_t in;
	void *owned = NULL;
	CHECK_TRUE(scd_coo_in_take(dev, idx, val, 6, 10, &in, &owned) == 1);
	CHECK_TRUE(owned != NULL && (void *)in.idx != (void *)idx);
	/* the trainer rewrites its list while the operation runs: the copy stays */
	for (int i = 0; i < 6; i++)
		idx[i] = 1000 + (uint32_t)i, val[i] = -1;
	const uint32_t want_i[4] = {0, 2, 5, 9};
	const float want_v[4] = {4, 8, 5, 4};
	CHECK_MSG(in.nnz == 4, "%llu entries, expected 4", (unsigned long long)in.nnz);
	for (int i = 0; i < 4; i++)
		CHECK_MSG(in.idx[i] == want_i[i] && in.val[i] == want_v[i],
			  "entry %d: (%u, %g), expected (%u, %g)", i, in.idx[i], in.val[i],
			  want_i[i], want_v[i]);
	dev->free(owned);
	uint32_t bad[3] = {1, 10, 3};
	CHECK_TRUE(scd_coo_in_take(dev, bad, val, 3, 10, &in, &owned) == 0);
	CHECK_TRUE(owned == NULL);
}

UNIT_TEST(engine_coo_in_random_against_dense)
{
	const scd_device_ops_t *dev = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK);
	uint64_t seed = unit_rng();
	srand((unsigned)seed);
	for (int round = 0; round < 50; round++) {
		uint64_t numel = 1 + (uint64_t)(rand() % 500), n = (uint64_t)(rand() % 700);
		uint32_t *idx = malloc(n * 4 + 4);
		float *val = malloc(n * 4 + 4), *dense = calloc(numel, sizeof(float));
		int ascending = rand() % 4 == 0;
		for (uint64_t i = 0; i < n; i++) {
			idx[i] = ascending ? (uint32_t)(i * numel / (n ? n : 1))
					   : (uint32_t)(rand() % (int)numel);
			val[i] = (float)(rand() % 9 - 4) * 0.25f;
			dense[idx[i]] += val[i]; /* in list order, as the sort must sum */
		}
		scd_coo_t in;
		void *owned = NULL;
		CHECK_MSG(scd_coo_in_take(dev, idx, val, n, numel, &in, &owned) == 1,
			  "seed %llu round %d refused", (unsigned long long)seed, round);
		for (uint64_t i = 0; i < in.nnz; i++) {
			CHECK_MSG(i == 0 || in.idx[i] > in.idx[i - 1],
				  "seed %llu round %d: not strictly ascending at %llu",
				  (unsigned long long)seed, round, (unsigned long long)i);
			CHECK_MSG(memcmp(&in.val[i], &dense[in.idx[i]], 4) == 0,
				  "seed %llu round %d: index %u sums %g, the reference %g",
				  (unsigned long long)seed, round, in.idx[i], in.val[i],
				  dense[in.idx[i]]);
			dense[in.idx[i]] = 0;
		}
		for (uint64_t i = 0; i < numel; i++) /* every index listed went into the copy */
			CHECK_MSG(dense[i] == 0, "seed %llu round %d: index %llu missing",
				  (unsigned long long)seed, round, (unsigned long long)i);
		if (owned)
			dev->free(owned);
		free(idx), free(val), free(dense);
	}
}
