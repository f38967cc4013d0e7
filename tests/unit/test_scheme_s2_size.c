/*
 * test_scheme_s2_size.c: the S2 sketch keeps its size from step to step. The sketch's
 * columns come from the union of the non-zeros (scheme_sketch.c); S2's own result is
 * dense inside every non-zero block, so its non-zeros must not count as the union, or
 * the second step's sketch grows towards numel columns and S2 moves as many bytes as a
 * dense allreduce.
 */
#include "unit.h"

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
