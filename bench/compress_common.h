/*
 * compress_common.h: helpers shared by the compress benchmarks (bench/compress*.c):
 * option parsing, a monotonic clock, pre-faulted buffers, and synthetic tensors shaped
 * like real gradients (docs/performance.md: heavy tails; skewed non-zero placement).
 */
#ifndef SC_BENCH_COMPRESS_COMMON_H
#define SC_BENCH_COMPRESS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/sparse.h"

static inline double cb_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A buffer touched once, so timing never includes first-touch page faults. */
static inline void *cb_alloc(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes ? bytes : 64)) {
		fprintf(stderr, "sparsecomm-bench: cannot allocate %zu bytes\n", bytes);
		exit(1);
	}
	memset(p, 0, bytes);
	return p;
}

/* splitmix64: a fast deterministic generator for synthetic data. */
static inline uint64_t cb_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline double cb_unit(uint64_t *s)
{
	return (double)(cb_rand(s) >> 11) * 0x1.0p-53;
}

/* A dense gradient: roughly Gaussian body with a heavy tail; no exact zeros. */
static inline void cb_fill_gradient(float *g, uint64_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = cb_rand(&s);
		/* sum of four 16-bit uniforms: a cheap bell curve */
		double u = (double)((r & 0xffff) + (r >> 16 & 0xffff) + (r >> 32 & 0xffff) +
				    (r >> 48)) /
			       65536.0 -
			   2.0;
		if ((r & 0x3f) == 0)
			u *= 8;
		g[i] = (float)(u == 0 ? 1e-3 : u);
	}
}

/* A naturally sparse tensor of the given density (uniform placement). */
static inline uint64_t cb_fill_sparse(float *g, uint64_t n, double density, uint64_t seed)
{
	uint64_t s = seed, nnz = 0;
	uint64_t cut = (uint64_t)(density * 18446744073709551615.0);
	for (uint64_t i = 0; i < n; i++) {
		if (density >= 1 || cb_rand(&s) < cut) {
			g[i] = (float)(cb_unit(&s) * 2 - 1) + 1e-3f;
			nnz++;
		} else {
			g[i] = 0;
		}
	}
	return nnz;
}

/* --name VALUE options: returns the value or NULL. */
static inline const char *cb_opt(int argc, char **argv, const char *name)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return NULL;
}

static inline int cb_flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

#endif
