/*
 * test_gpu_exdyna.c: ExDyna on the GPU device (gpu/exdyna.cu, through the cuda ops table
 * that daemon/device/cuda.c fills) against the cpu device, over simulated worlds of P = 1..8
 * ranks and 24+ iterations with the residual carried: every rank's selection (indices and
 * value bits), residual bits, count, the words of the update (counts, proposals, grid
 * counts) and, after the update from the gathered words, threshold, partitions and digest
 * are the cpu's, for the dense and the list selection, on random and adversarial inputs
 * (values from a few magnitudes: ties at the cap; all zeros; one element; a tensor of fewer
 * than 32 elements; huge and tiny values), in every configuration the scheme can run
 * (calibrated start, fixed start, the grid and cap off, no error feedback, the tensor
 * already in the residual). Exact everywhere: each element sees the cpu's single IEEE add.
 */
#include <string.h>

#include "device/cuda.h"
#include "device/exdyna.h"
#include "gpu_fns.h"
#include "scg.h"
#include "unit.h"

static scd_device_ops_t gpu_table(void)
{
	scd_device_ops_t ops;
	gpu_linked_table(&ops);
	return ops;
}

static void dget(const scd_device_ops_t *d, void *host, const void *p, size_t bytes)
{
	if (bytes)
		d->to_host(host, p, bytes);
}

/* The kinds of gradient a step draws. */
enum { G_GAUSS, G_FEW_VALUES, G_SPARSE, G_ZERO, G_WIDE, G_KINDS };

static float draw(int kind)
{
	double u = unit_rng_double();
	switch (kind) {
	case G_FEW_VALUES: { /* a few magnitudes: many equal keys, ties at the cap */
		static const float v[] = {0.0f, 1.0f, -1.0f, 0.5f, -2.0f, 0.25f, -0.0f};
		return v[unit_rng_below(7)];
	}
	case G_SPARSE:
		return u < 0.97 ? 0.0f : (float)(unit_rng_double() * 2 - 1);
	case G_ZERO:
		return 0.0f;
	case G_WIDE: /* magnitudes across many octaves, denormals and huge ones included */
		return (float)((u - 0.5) * pow(2.0, (double)unit_rng_below(260) - 140));
	default: {
		double z = -6;
		for (int j = 0; j < 12; j++)
			z += unit_rng_double();
		return (float)z;
	}
	}
}

static void fill(float *g, uint64_t n, int kind)
{
	int region = unit_rng_below(3) == 0; /* a dense region: the partitions move */
	for (uint64_t i = 0; i < n; i++) {
		float x = draw(kind);
		g[i] = region && i < n / 4 ? x * 8 : x;
	}
}

static int same_bits(const void *a, const void *b, size_t bytes)
{
	return bytes == 0 || memcmp(a, b, bytes) == 0;
}

/* The configurations the simulation runs. */
enum { C_DEFAULT, C_FIXED_START, C_PAPER, C_REFERENCE_START, C_TIGHT_CAP, C_KINDS };

static scd_exdyna_cfg_t config(int c, uint64_t n, uint32_t P, uint32_t r, double density)
{
	scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(n, P, r, density);
	if (c == C_FIXED_START)
		cfg.init_threshold = 1.5;
	else if (c == C_PAPER)
		cfg.recal_permille = cfg.cap_permille = 0;
	else if (c == C_REFERENCE_START)
		cfg.init_threshold = -1;
	else if (c == C_TIGHT_CAP)
		cfg.cap_permille = 1000;
	if (n < 4096)
		cfg.nblocks = 1 + (uint32_t)unit_rng_below(64);
	return cfg;
}

/* Both devices' objects are in the same state. */
static void check_state(scd_exdyna_t *a, scd_exdyna_t *b, const char *what, int step)
{
	CHECK_MSG(scd_exdyna_digest(a) == scd_exdyna_digest(b) &&
		      scd_exdyna_iteration(a) == scd_exdyna_iteration(b) &&
		      scd_exdyna_calibrating(a) == scd_exdyna_calibrating(b) &&
		      scd_exdyna_jumps(a) == scd_exdyna_jumps(b),
		  "%s, step %d: the state differs from the cpu's", what, step);
	float ta = scd_exdyna_threshold(a), tb = scd_exdyna_threshold(b);
	CHECK_MSG(same_bits(&ta, &tb, 4), "%s, step %d: threshold %.9g, cpu %.9g", what, step,
		  tb, ta);
}

/* mode: 0 in and residual, 1 the tensor already in the residual, 2 no error feedback;
 * coo: the list selection (the residual folded into the list first, dis back into it). */
static void run_world(const scd_device_ops_t *gpu, uint32_t P, uint64_t n, double density,
		      int c, int mode, int coo, int steps)
{
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	char what[160];
	snprintf(what, sizeof what, "P %u, numel %llu, density %g, config %d, mode %d, %s", P,
		 (unsigned long long)n, density, c, mode, coo ? "list" : "dense");
	scd_exdyna_t **ce = calloc(P, sizeof *ce), **ge = calloc(P, sizeof *ge);
	float **res = calloc(P, sizeof *res);	/* the cpu's residuals (host) */
	float **gres = calloc(P, sizeof *gres); /* the GPU's (device) */
	float *g = malloc(4 * n), *back = malloc(4 * n);
	uint32_t *ci = malloc(4 * n + 4), *gi = malloc(4 * n + 4), *li = malloc(4 * n + 4);
	float *cv = malloc(4 * n + 4), *gv = malloc(4 * n + 4), *lv = malloc(4 * n + 4);
	uint32_t *di = malloc(4 * n + 4), *gdi = malloc(4 * n + 4);
	float *dv = malloc(4 * n + 4), *gdv = malloc(4 * n + 4);
	const uint32_t W_MAX = 1 + 2 * SCD_EXDYNA_GRID_HALF + 1;
	uint64_t *meta = malloc(8 * (size_t)P * W_MAX);
	/* device buffers: input, output, dis, list */
	float *dg = gpu->alloc(4 * n);
	uint32_t *doi = gpu->alloc(4 * n + 4), *ddi = gpu->alloc(4 * n + 4),
		 *dli = gpu->alloc(4 * n + 4);
	float *dov = gpu->alloc(4 * n + 4), *ddv = gpu->alloc(4 * n + 4),
	      *dlv = gpu->alloc(4 * n + 4);
	CHECK_TRUE(dg && doi && ddi && dli && dov && ddv && dlv);
	for (uint32_t r = 0; r < P; r++) {
		scd_exdyna_cfg_t cfg = config(c, n, P, r, density);
		CHECK_EQ_INT(cpu->exdyna_create(&cfg, &ce[r]), SC_OK);
		CHECK_EQ_INT(gpu->exdyna_create(&cfg, &ge[r]), SC_OK);
		res[r] = calloc(n, 4);
		gres[r] = gpu->alloc(4 * n);
		CHECK_TRUE(gres[r] != NULL);
	}
	int kind = (int)unit_rng_below(G_KINDS);
	for (int step = 0; step < steps; step++) {
		if (unit_rng_below(4) == 0)
			kind = (int)unit_rng_below(G_KINDS);
		uint32_t W = scd_exdyna_meta_words(ce[0]);
		for (uint32_t r = 0; r < P; r++) {
			fill(g, n, kind);
			uint64_t ccount = 0, gcount = 0;
			scd_coo_t cout = {ci, cv, 0, n + 1}, gout = {doi, dov, 0, n + 1};
			if (!coo && unit_rng_below(4) == 0) /* an output that fills up */
				cout.cap = gout.cap = unit_rng_below(n / P + 2);
			if (!coo) {
				float *cin = g, *gin = dg, *cres = res[r], *gr = gres[r];
				if (mode == 1) { /* the caller put the tensor in the residual */
					for (uint64_t i = 0; i < n; i++)
						res[r][i] += g[i];
					gpu->from_host(gres[r], res[r], 4 * n);
					cin = NULL, gin = NULL;
				} else {
					gpu->from_host(dg, g, 4 * n);
					if (mode == 2)
						cres = NULL, gr = NULL;
				}
				CHECK_EQ_INT(
				    cpu->exdyna_select(ce[r], cin, cres, &cout, &ccount),
				    SC_OK);
				CHECK_MSG(gpu->exdyna_select(ge[r], gin, gr, &gout, &gcount) ==
					      SC_OK,
					  "%s: %s", what, scg_error());
				if (mode != 2) {
					dget(gpu, back, gres[r], 4 * n);
					CHECK_MSG(same_bits(back, res[r], 4 * n),
						  "%s, step %d, rank %u: residual differs",
						  what, step, r);
				}
			} else {
				/* the list: acc's non-zeros, the residual emptied into it */
				uint64_t m = 0;
				for (uint64_t i = 0; i < n; i++) {
					float a = g[i] + res[r][i];
					res[r][i] = 0.0f;
					if (a != 0.0f)
						li[m] = (uint32_t)i, lv[m++] = a;
				}
				scd_coo_t cl = {li, lv, m, m}, gl = {dli, dlv, m, m};
				gpu->from_host(dli, li, 4 * m);
				gpu->from_host(dlv, lv, 4 * m);
				scd_coo_t cdis = {di, dv, 0, m}, gdis = {ddi, ddv, 0, m};
				cout.cap = gout.cap = m;
				CHECK_EQ_INT(
				    cpu->exdyna_select_coo(ce[r], &cl, &cout, &cdis, &ccount),
				    SC_OK);
				CHECK_MSG(gpu->exdyna_select_coo(ge[r], &gl, &gout, &gdis,
								 &gcount) == SC_OK,
					  "%s: %s", what, scg_error());
				CHECK_MSG(gdis.nnz == cdis.nnz,
					  "%s, step %d, rank %u: dis %llu, cpu %llu", what,
					  step, r, (unsigned long long)gdis.nnz,
					  (unsigned long long)cdis.nnz);
				dget(gpu, gdi, ddi, 4 * cdis.nnz);
				dget(gpu, gdv, ddv, 4 * cdis.nnz);
				CHECK_MSG(same_bits(gdi, di, 4 * cdis.nnz) &&
					      same_bits(gdv, dv, 4 * cdis.nnz),
					  "%s, step %d, rank %u: dis differs", what, step, r);
				if (mode != 2)
					for (uint64_t j = 0; j < cdis.nnz; j++)
						res[r][di[j]] += dv[j];
			}
			CHECK_MSG(gout.nnz == cout.nnz && gcount == ccount,
				  "%s, step %d, rank %u: %llu selected, cpu %llu", what, step,
				  r, (unsigned long long)gout.nnz,
				  (unsigned long long)cout.nnz);
			dget(gpu, gi, doi, 4 * cout.nnz);
			dget(gpu, gv, dov, 4 * cout.nnz);
			CHECK_MSG(same_bits(gi, ci, 4 * cout.nnz) &&
				      same_bits(gv, cv, 4 * cout.nnz),
				  "%s, step %d, rank %u: selection differs", what, step, r);
			CHECK_EQ_INT(scd_exdyna_meta_words(ge[r]), W);
			CHECK_MSG(
			    same_bits(scd_exdyna_meta(ge[r]), scd_exdyna_meta(ce[r]), 8 * W),
			    "%s, step %d, rank %u: the update's words differ", what, step, r);
			memcpy(meta + (size_t)r * W, scd_exdyna_meta(ce[r]), 8 * W);
			double pc = scd_exdyna_proposal(ce[r]), pg = scd_exdyna_proposal(ge[r]);
			CHECK_MSG(same_bits(&pc, &pg, 8), "%s, step %d: proposal differs", what,
				  step);
		}
		for (uint32_t r = 0; r < P; r++) {
			CHECK_EQ_INT(cpu->exdyna_update(ce[r], meta), SC_OK);
			CHECK_EQ_INT(gpu->exdyna_update(ge[r], meta), SC_OK);
			check_state(ce[r], ge[r], what, step);
		}
	}
	for (uint32_t r = 0; r < P; r++) {
		cpu->exdyna_destroy(ce[r]);
		gpu->exdyna_destroy(ge[r]);
		free(res[r]);
		gpu->free(gres[r]);
	}
	gpu->free(dg), gpu->free(doi), gpu->free(ddi), gpu->free(dli), gpu->free(dov),
	    gpu->free(ddv), gpu->free(dlv);
	CHECK_EQ_INT(gpu->sync(), SC_OK);
	free(ce), free(ge), free(res), free(gres), free(g), free(back), free(ci), free(gi),
	    free(li), free(cv), free(gv), free(lv), free(di), free(gdi), free(dv), free(gdv),
	    free(meta);
}

static uint64_t pick_numel(int round)
{
	switch (round % 6) {
	case 0:
		return 1 + unit_rng_below(40); /* fewer than 32: one block; n = 1 too */
	case 1:
		return 32 * (1 + unit_rng_below(20)) + unit_rng_below(32);
	case 2:
		return 1000 + unit_rng_below(4000);
	default:
		return 4096 + unit_rng_below(12000);
	}
}

static double pick_density(void)
{
	static const double d[] = {0.001, 0.01, 0.05, 0.2, 1.0};
	return d[unit_rng_below(5)];
}

UNIT_TEST_TIMEOUT(gpu_ops_table_exdyna_dense, 300)
{
	scd_device_ops_t gpu = gpu_table();
	for (int round = 0; round < 18; round++) {
		uint32_t P = 1 + (uint32_t)(round % 8);
		uint64_t n = pick_numel(round);
		int c = (int)unit_rng_below(C_KINDS), mode = (int)unit_rng_below(3);
		run_world(&gpu, P, n, pick_density(), c, mode, 0, 24);
	}
}

UNIT_TEST_TIMEOUT(gpu_ops_table_exdyna_coo, 300)
{
	scd_device_ops_t gpu = gpu_table();
	for (int round = 0; round < 18; round++) {
		uint32_t P = 1 + (uint32_t)((round + 3) % 8);
		uint64_t n = pick_numel(round);
		int c = (int)unit_rng_below(C_KINDS), mode = unit_rng_below(4) ? 0 : 2;
		run_world(&gpu, P, n, pick_density(), c, mode, 1, 24);
	}
}

/* The checks of the arguments: the cpu's status codes. */
UNIT_TEST(gpu_ops_table_exdyna_invalid)
{
	scd_device_ops_t gpu = gpu_table();
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(1000, 4, 1, 0.01);
	scd_exdyna_t *ex = NULL, *cx = NULL;
	scd_exdyna_cfg_t bad = cfg;
	bad.rank = 4;
	CHECK_EQ_INT(gpu.exdyna_create(&bad, &ex), SC_ERR_INVALID);
	bad = cfg;
	bad.density = 0;
	CHECK_EQ_INT(gpu.exdyna_create(&bad, &ex), SC_ERR_INVALID);
	CHECK_EQ_INT(gpu.exdyna_create(&cfg, &ex), SC_OK);
	CHECK_EQ_INT(cpu->exdyna_create(&cfg, &cx), SC_OK);
	uint32_t *idx = gpu.alloc(4 * 1000);
	float *val = gpu.alloc(4 * 1000);
	scd_coo_t out = {idx, val, 0, 1000};
	scd_coo_t in = {idx, val, 10, 10}, small = {idx, val, 0, 9};
	uint64_t count = 0;
	CHECK_EQ_INT(gpu.exdyna_select(ex, NULL, NULL, &out, &count), SC_ERR_INVALID);
	CHECK_EQ_INT(gpu.exdyna_select(ex, val, NULL, NULL, &count), SC_ERR_INVALID);
	CHECK_EQ_INT(gpu.exdyna_select_coo(ex, &in, &small, &out, &count), SC_ERR_INVALID);
	CHECK_EQ_INT(gpu.exdyna_select_coo(ex, &in, &out, &small, &count), SC_ERR_INVALID);
	/* a rank's words that are no count: the update refuses them, as the cpu's */
	uint64_t meta[4 * 2] = {0};
	meta[0] = 1001;
	CHECK_EQ_INT(gpu.exdyna_update(ex, meta), SC_ERR_INVALID);
	CHECK_EQ_INT(cpu->exdyna_update(cx, meta), SC_ERR_INVALID);
	gpu.exdyna_destroy(ex);
	cpu->exdyna_destroy(cx);
	gpu.exdyna_destroy(NULL);
	gpu.free(idx), gpu.free(val);
	CHECK_EQ_INT(gpu.sync(), SC_OK);
}
