/*
 * test_adasum.c: the Adasum operator (device/reduce.h) and its tree over the trainers
 * (coll_adasum.c, coll/coll.h): the operator's cases (orthogonal vectors add, identical
 * ones give the vector, opposite ones cancel, a zero vector is plain addition), and the
 * tree against a reference written as the definition reads: for n leaves, the Adasum of
 * the tree of the first h (the largest power of two below n) and the tree of the rest.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../adasum_ref.h"
#include "coll/coll.h"
#include "device/reduce.h"
#include "unit.h"

UNIT_TEST(adasum_operator_cases)
{
	float a[4] = {1, 2, 0, 0}, b[4] = {0, 0, 3, -4};
	scd_adasum_pair_typed(SC_FLOAT32, a, b, 4); /* orthogonal: the sum */
	const float sum[4] = {1, 2, 3, -4};
	CHECK_TRUE(!memcmp(a, sum, sizeof(a)));

	double c[3] = {0.5, -1.25, 3}, d[3] = {0.5, -1.25, 3};
	scd_adasum_pair_typed(SC_FLOAT64, c, d, 3); /* identical: the vector itself */
	CHECK_TRUE(!memcmp(c, d, sizeof(c)));

	float e[3] = {1, -2, 4}, f[3] = {-1, 2, -4};
	scd_adasum_pair_typed(SC_FLOAT32, e, f, 3); /* opposite: they cancel */
	for (int i = 0; i < 3; i++)
		CHECK_TRUE(e[i] == 0);

	double z[3] = {0, 0, 0}, g[3] = {7, -8, 9};
	scd_adasum_pair_typed(SC_FLOAT64, z, g, 3); /* a zero vector: plain addition */
	CHECK_TRUE(!memcmp(z, g, sizeof(z)));
	double g2[3] = {7, -8, 9}, z2[3] = {0, 0, 0};
	scd_adasum_pair_typed(SC_FLOAT64, g2, z2, 3);
	CHECK_TRUE(!memcmp(g2, g, sizeof(g2)));
	CHECK_TRUE(isfinite(g2[0]));

	/* a parallel pair, b = 2a: (1 - 2/2) a + (1 - 2/8) 2a = 1.5 a */
	double p[2] = {3, 4}, q[2] = {6, 8};
	scd_adasum_pair_typed(SC_FLOAT64, p, q, 2);
	CHECK_NEAR(p[0], 4.5, 1e-12);
	CHECK_NEAR(p[1], 6, 1e-12);

	/* integers are not its: nothing changes */
	int32_t i1[2] = {1, 2}, i2[2] = {3, 4};
	scd_adasum_pair_typed(SC_INT32, i1, i2, 2);
	CHECK_TRUE(i1[0] == 1 && i1[1] == 2);
}

/* Orthogonal leaves (each its own coordinate) add up whatever the tree: the sum. */
UNIT_TEST(adasum_tree_of_orthogonal_leaves_is_their_sum)
{
	for (int k = 1; k <= 9; k++) {
		double v[9 * 9] = {0};
		for (int r = 0; r < k; r++)
			v[r * 9 + r] = r + 1;
		scd_adasum_tree(SC_FLOAT64, v, k, 9);
		for (int i = 0; i < 9; i++)
			CHECK_MSG(v[i] == (i < k ? i + 1 : 0), "%d leaves: element %d is %g", k,
				  i, v[i]);
	}
}

/* Random leaves of float64 and float32, 1 to 9 of them: the reference's values. */
UNIT_TEST(adasum_tree_matches_the_reference)
{
	enum { N = 37, K = 9 };
	for (int k = 1; k <= K; k++) {
		double v[N * K], ref[N * K];
		float f[N * K];
		for (int i = 0; i < N * k; i++) {
			v[i] = ref[i] = unit_rng_double() * 4 - 2;
			f[i] = (float)v[i];
		}
		if (k > 2) /* one zero leaf and one opposite pair among them */
			for (int i = 0; i < N; i++) {
				v[N + i] = ref[N + i] = f[N + i] = 0;
				v[2 * N + i] = ref[2 * N + i] = -v[i];
				f[2 * N + i] = -f[i];
			}
		scd_adasum_tree(SC_FLOAT64, v, k, N);
		ref_tree(ref, k, N);
		for (int i = 0; i < N; i++)
			CHECK_MSG(fabs(v[i] - ref[i]) <= 1e-12 * (1 + fabs(ref[i])),
				  "float64, %d leaves: element %d is %.17g, expected %.17g", k,
				  i, v[i], ref[i]);
		/* float32 leaves: the reference on their exact values, within float rounding */
		double fr[N * K];
		for (int i = 0; i < N * k; i++)
			fr[i] = f[i];
		scd_adasum_tree(SC_FLOAT32, f, k, N);
		ref_tree(fr, k, N);
		for (int i = 0; i < N; i++)
			CHECK_MSG(fabs(f[i] - fr[i]) <= 1e-5 * (1 + fabs(fr[i])),
				  "float32, %d leaves: element %d is %.9g, expected %.9g", k, i,
				  (double)f[i], fr[i]);
	}
}

/* For a power of two the tree is Horovod's: ((a0 a1) (a2 a3)), not ((a0 a1) a2) a3. */
UNIT_TEST(adasum_tree_of_four_pairs_neighbours_first)
{
	double v[4 * 2] = {1, 0, 1, 1, 0, 1, -1, 2};
	double want[4 * 2];
	memcpy(want, v, sizeof(v));
	ref_pair(want, want + 2, 2);
	ref_pair(want + 4, want + 6, 2);
	ref_pair(want, want + 4, 2);
	double chain[4 * 2];
	memcpy(chain, v, sizeof(v));
	ref_pair(chain, chain + 2, 2);
	ref_pair(chain, chain + 4, 2);
	ref_pair(chain, chain + 6, 2);
	CHECK_TRUE(fabs(chain[0] - want[0]) + fabs(chain[1] - want[1]) >
		   1e-3); /* they differ */
	scd_adasum_tree(SC_FLOAT64, v, 4, 2);
	CHECK_NEAR(v[0], want[0], 1e-15);
	CHECK_NEAR(v[1], want[1], 1e-15);
}
