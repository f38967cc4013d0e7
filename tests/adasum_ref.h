/*
 * adasum_ref.h: the Adasum operator and its tree straight from the definition, in doubles,
 * as the unit and integration tests check the daemon's against (docs/design.md, Adasum).
 */
#ifndef SC_TESTS_ADASUM_REF_H
#define SC_TESTS_ADASUM_REF_H

#include <stddef.h>

/* adasum(a, b) into a: (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a zero vector's
 * coefficient 1. */
static inline void ref_pair(double *a, const double *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;
	for (size_t i = 0; i < n; i++) {
		aa += a[i] * a[i];
		ab += a[i] * b[i];
		bb += b[i] * b[i];
	}
	double ca = aa == 0 ? 1 : 1 - ab / (2 * aa), cb = bb == 0 ? 1 : 1 - ab / (2 * bb);
	for (size_t i = 0; i < n; i++)
		a[i] = ca * a[i] + cb * b[i];
}

/* The tree of leaves [0, k) of v (k blocks of n), into v's first block: the tree of the
 * first h leaves (h the largest power of two below k) with the tree of the rest. */
static inline void ref_tree(double *v, int k, size_t n)
{
	if (k < 2)
		return;
	int h = 1;
	while (h * 2 < k)
		h *= 2;
	ref_tree(v, h, n);
	ref_tree(v + (size_t)h * n, k - h, n);
	ref_pair(v, v + (size_t)h * n, n);
}

#endif
