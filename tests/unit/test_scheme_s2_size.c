/*
 * test_scheme_s2_size.c: the S2 sketch keeps its size from step to step. The sketch's
 * columns come from the union of the non-zeros (scheme_sketch.c); S2's own result is
 * dense inside every non-zero block, so its non-zeros must not count as the union, or
 * the second step's sketch grows towards numel columns and S2 moves as many bytes as a
 * dense allreduce.
 */
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "scheme/scheme.h"
#include "scheme_world.h"

#define S2_P	 3
#define S2_NUMEL 200000

typedef struct s2_shared {
	uint64_t bytes[S2_P][3];
	uint64_t seed;
} s2_shared_t;

static uint64_t s2_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Three S2 steps of a 0.5% dense input whose non-zeros are spread over every block. */
static void s2_size_rank(scd_transport_t *t, int rank, s2_shared_t *sh)
{
	float *g = malloc(4 * S2_NUMEL), *res = calloc(S2_NUMEL, 4);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(S2_NUMEL, 5);
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	for (int step = 0; step < 3; step++) {
		for (uint64_t i = 0; i < S2_NUMEL; i++) {
			uint64_t h = s2_mix(sh->seed ^ s2_mix(i * 31 + (uint64_t)rank));
			g[i] = h % 200 == 0 ? (float)(h % 7 + 1) : 0;
		}
		scd_scheme_io_t io = {.data = g, .residual = res};
		scd_scheme_report_t rep;
		CHECK_EQ_INT(scd_scheme_run(SCD_SCHEME_S2_SKETCH, ctx, &io, &rep), SC_OK);
		sh->bytes[rank][step] = rep.bytes_sent;
	}
	scd_scheme_ctx_destroy(ctx);
	free(g);
	free(res);
}

static void s2_size_world_rank(scd_transport_t *t, int rank, int size, void *arg)
{
	s2_size_rank(t, rank, arg);
}

UNIT_TEST(scheme_s2_sketch_size_stable_across_steps)
{
	s2_shared_t *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(sh != MAP_FAILED);
	sh->seed = unit_rng();
	run_world(S2_P, s2_size_world_rank, sh);
	/* dense ring of the whole tensor: 2 (P-1)/P x 4 numel bytes */
	double dense = 2.0 * (S2_P - 1) / S2_P * 4.0 * S2_NUMEL;
	for (int r = 0; r < S2_P; r++)
		for (int step = 1; step < 3; step++)
			CHECK_MSG(
			    sh->bytes[r][step] <= 1.5 * sh->bytes[r][0] &&
				sh->bytes[r][step] < 0.5 * dense,
			    "rank %d step %d sent %llu bytes, step 0 %llu, dense ring %.0f", r,
			    step, (unsigned long long)sh->bytes[r][step],
			    (unsigned long long)sh->bytes[r][0], dense);
	munmap(sh, sizeof(*sh));
}

/* ---- the median decode (rows >= 3) against one row ----------------------------------- */

typedef struct s2_err {
	uint32_t rows;
	uint64_t seed;
	float *out; /* rank 0's result (shared) */
} s2_err_t;

static void s2_input(uint64_t seed, int rank, float *g)
{
	for (uint64_t i = 0; i < S2_NUMEL; i++) {
		uint64_t h = s2_mix(seed ^ s2_mix(i * 31 + (uint64_t)rank));
		g[i] = h % 100 == 0 ? (float)((int)(h >> 40) % 2001 - 1000) / 100.0f : 0;
	}
}

static void s2_err_rank(scd_transport_t *t, int rank, int size, void *arg)
{
	s2_err_t *e = arg;
	float *g = malloc(4 * S2_NUMEL), *res = calloc(S2_NUMEL, 4);
	s2_input(e->seed, rank, g);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(S2_NUMEL, 11);
	cfg.sketch_rows = e->rows;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	scd_scheme_io_t io = {.data = g, .residual = res};
	CHECK_EQ_INT(scd_scheme_run(SCD_SCHEME_S2_SKETCH, ctx, &io, NULL), SC_OK);
	if (rank == 0)
		memcpy(e->out, g, 4 * S2_NUMEL);
	scd_scheme_ctx_destroy(ctx);
	free(g);
	free(res);
}

/* S2's error, one step, 1% random values on each of 3 ranks, the same data for every row
 * count: the relative L2 error of the decoded sum falls with the median of 3 and of 5
 * rows (each row as wide as the one-row sketch), as the S2 paper's analysis says. */
UNIT_TEST(scheme_s2_median_decode_beats_one_row)
{
	uint64_t seed = unit_rng();
	float *ref = calloc(S2_NUMEL, 4), *g = malloc(4 * S2_NUMEL);
	for (int r = 0; r < S2_P; r++) {
		s2_input(seed, r, g);
		for (uint64_t i = 0; i < S2_NUMEL; i++)
			ref[i] += g[i];
	}
	double err[3], norm = 0;
	for (uint64_t i = 0; i < S2_NUMEL; i++)
		norm += (double)ref[i] * ref[i];
	const uint32_t rows[3] = {1, 3, 5};
	for (int k = 0; k < 3; k++) {
		s2_err_t e = {.rows = rows[k], .seed = seed};
		e.out = shared_map(4 * S2_NUMEL);
		run_world(S2_P, s2_err_rank, &e);
		double d = 0;
		for (uint64_t i = 0; i < S2_NUMEL; i++)
			d += ((double)e.out[i] - ref[i]) * ((double)e.out[i] - ref[i]);
		err[k] = sqrt(d / norm);
		munmap(e.out, 4 * S2_NUMEL);
	}
	printf("    relative L2 error: rows 1 %.4f, rows 3 %.4f, rows 5 %.4f\n", err[0], err[1],
	       err[2]);
	CHECK_MSG(err[1] < err[0] && err[2] < err[1], "rows 1 %g, 3 %g, 5 %g", err[0], err[1],
		  err[2]);
	free(ref);
	free(g);
}
