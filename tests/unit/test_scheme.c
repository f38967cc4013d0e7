/*
 * test_scheme.c: the collective schemes (scheme/scheme.h) between real processes over the
 * real tcp transport on loopback: P = 1..8 forked ranks (listening sockets opened in the
 * parent before the fork, so every child knows every port), uniform and Zipf-skewed index
 * sets, overlap from none to full, densities 1e-4 to 1, dense and COO input.
 *
 *   - lossless schemes return exactly the dense sum on small-integer inputs (0 wrong
 *     elements) and agree with it to float rounding on random floats;
 *   - lossy schemes conserve mass: sum of inputs == result + sum of residual changes;
 *   - every rank holds the identical result (bit hash compared across ranks) and the
 *     report fields marked (same) agree;
 *   - Balanced Parallelism's bytes are within 1.1x of ZEN eq. (1) with hash-bitmap pull.
 * Each rank generates every rank's input from the shared test seed (so it can compute the
 * reference itself); results that must be compared across ranks go through a shared
 * anonymous mapping and are checked by the parent once all ranks exit. The worlds and the
 * inputs are scheme_world.h's (shared with test_device_guard.c, which runs every scheme
 * through a device whose memory the host cannot touch).
 */
#include "unit.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheme/scheme.h"
#include "scheme/scheme_internal.h"
#include "scheme_world.h"
#include "unit_mesh.h"
#include "util/log.h"

/* ---- the lossless and lossy matrix ------------------------------------------------------ */

#define NCASES 18
#define NSCH   SCD_SCHEME_COUNT
#define NUMEL  24000

typedef struct slot {
	uint64_t hash;		       /* of the result */
	uint64_t union_nnz, total_nnz; /* (same) report fields */
	double gamma, skew, imbalance;
	uint64_t bytes_recv;
	int done;
} slot_t;

typedef struct matrix {
	spec_t specs[NCASES];
	int ncases;
	const scd_scheme_t *schemes;
	int nschemes;
	uint32_t teams; /* SparDL d (0: auto) */
	double density; /* cfg.density for the lossy schemes */
	int exact;	/* lossy schemes must give the exact sum too (SparDL at k = numel) */
	uint32_t stream_chunk; /* cfg.stream_chunk (0: default) */
	int rank_order; /* AGsparse's and BP's floats too must be the rank-order sum's bits */
	slot_t *slots;	/* [case][scheme][rank] */
	float *res;	/* lossy: [case][scheme][rank][numel] residual after the run */
	float *out;	/* lossy: [case][scheme][numel] rank 0's result */
} matrix_t;

static slot_t *slot_at(const matrix_t *m, int c, int s, int r)
{
	return &m->slots[((size_t)c * m->nschemes + (size_t)s) * MAX_P + (size_t)r];
}

static size_t lossy_at(const matrix_t *m, int c, int s)
{
	return (size_t)c * m->nschemes + (size_t)s;
}

static void matrix_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	matrix_t *m = arg;
	uint64_t n = m->specs[0].numel;
	float *in = malloc(4 * n), *ref = malloc(4 * n), *tmp = malloc(4 * n),
	      *buf = malloc(4 * n), *res = malloc(4 * n);
	scd_coo_t coo = {malloc(4 * n), malloc(4 * n), 0, n};
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 0x5eed);
	cfg.spardl_teams = m->teams;
	cfg.density = m->density;
	if (m->stream_chunk)
		cfg.stream_chunk = m->stream_chunk;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	for (int c = 0; c < m->ncases; c++) {
		const spec_t *sp = &m->specs[c];
		gen_case(sp, P, rank, n, tmp, ref, in);
		for (int s = 0; s < m->nschemes; s++) {
			scd_scheme_t sch = m->schemes[s];
			int lossless = scd_scheme_lossless(sch);
			memcpy(buf, in, 4 * n);
			memset(res, 0, 4 * n);
			dense_to_coo(in, n, &coo);
			/* a sparse result goes into the input's own arrays, as in the engine */
			scd_coo_t out = coo;
			out.cap = n;
			scd_scheme_io_t io = {.data = buf,
					      .coo = sp->coo ? &coo : NULL,
					      .residual = lossless ? NULL : res,
					      .out = sp->coo && sp->sparse_out ? &out : NULL};
			if (sp->coo)
				memset(buf, 0x7f, 4 * n); /* output only */
			scd_scheme_report_t rep;
			sc_status_t st = scd_scheme_run(sch, ctx, &io, &rep);
			CHECK_MSG(st == SC_OK, "rank %d case %d %s: %s: %s", rank, c,
				  scd_scheme_name(sch), sc_status_name(st), scd_scheme_error());
			if (io.out) {
				CHECK_MSG(out.nnz != SCD_RESULT_DENSE && out.nnz <= n,
					  "rank %d case %d %s: no sparse result", rank, c,
					  scd_scheme_name(sch));
				memset(buf, 0, 4 * n);
				for (uint64_t k = 0; k < out.nnz; k++) {
					CHECK_MSG(
					    out.idx[k] < n &&
						(!k || out.idx[k] > out.idx[k - 1]),
					    "rank %d case %d %s: sparse result index %llu",
					    rank, c, scd_scheme_name(sch),
					    (unsigned long long)k);
					buf[out.idx[k]] = out.val[k];
				}
			}
			if (lossless || m->exact) {
				uint64_t wrong = 0, first = 0;
				for (uint64_t i = 0; i < n; i++) {
					int bitwise =
					    m->rank_order && (sch == SCD_SCHEME_AGSPARSE ||
							      sch == SCD_SCHEME_BALANCED_PAR);
					double tol = sp->floats && !bitwise
							 ? 1e-5 * (fabs(ref[i]) + P)
							 : 0;
					if (!(fabs((double)buf[i] - ref[i]) <= tol) && !wrong++)
						first = i;
				}
				CHECK_MSG(
				    wrong == 0,
				    "P %d rank %d case %d (d %g ov %g zipf %d coo %d) %s: %llu "
				    "wrong, first %llu: %g != %g",
				    P, rank, c, sp->density, sp->overlap, sp->zipf, sp->coo,
				    scd_scheme_name(sch), (unsigned long long)wrong,
				    (unsigned long long)first, buf[first], ref[first]);
			}
			if (!lossless) {
				memcpy(m->res + lossy_at(m, c, s) * MAX_P * n +
					   (size_t)rank * n,
				       res, 4 * n);
				if (rank == 0)
					memcpy(m->out + lossy_at(m, c, s) * n, buf, 4 * n);
			}
			*slot_at(m, c, s, rank) = (slot_t){.hash = hash_bytes(buf, 4 * n),
							   .union_nnz = rep.union_nnz,
							   .total_nnz = rep.total_nnz,
							   .gamma = rep.gamma,
							   .skew = rep.skew,
							   .imbalance = rep.imbalance,
							   .bytes_recv = rep.bytes_recv,
							   .done = 1};
		}
	}
	scd_scheme_ctx_destroy(ctx);
	free(in), free(ref), free(tmp), free(buf), free(res), free(coo.idx), free(coo.val);
}

/* Cases: densities 1e-4 .. 1, overlaps none .. full, uniform and Zipf, dense and COO. */
static int make_cases(spec_t *specs, uint64_t numel, int with_floats)
{
	static const double dens[] = {1e-4, 1e-3, 1e-2, 0.1, 0.5, 1};
	static const double ovl[] = {0, 0.5, 1};
	int n = 0;
	for (int d = 0; d < 6; d++)
		for (int o = 0; o < 2; o++) {
			int k = n;
			specs[n++] = (spec_t){.numel = numel,
					      .density = dens[d],
					      .overlap = ovl[(d + o * 2) % 3],
					      .zipf = (k & 1),
					      .coo = (k >> 1) & 1,
					      .seed = unit_rng()};
		}
	for (int k = 0; k < n; k++) /* half the COO cases take a sparse result */
		specs[k].sparse_out = specs[k].coo && (k >> 2) % 2;
	if (with_floats) {
		specs[n++] = (spec_t){numel, 0.05, 0.5, 1, 0, 1, unit_rng(), 0, 0};
		specs[n++] = (spec_t){numel, 1, 0, 0, 1, 1, unit_rng(), 0, 0};
		/* embedding-like rows (runs messages), sparse result and dense result */
		specs[n++] = (spec_t){numel, 2e-3, 0.5, 1, 1, 1, unit_rng(), 1, 300};
		specs[n++] = (spec_t){numel, 1e-3, 0, 0, 1, 0, unit_rng(), 0, 64};
	}
	return n;
}

static void check_same(const matrix_t *m, int P)
{
	for (int c = 0; c < m->ncases; c++)
		for (int s = 0; s < m->nschemes; s++) {
			const slot_t *a = slot_at(m, c, s, 0);
			CHECK_TRUE(a->done);
			for (int r = 1; r < P; r++) {
				const slot_t *b = slot_at(m, c, s, r);
				CHECK_MSG(
				    b->done && b->hash == a->hash,
				    "P %d case %d %s: rank %d's result differs from rank 0's",
				    P, c, scd_scheme_name(m->schemes[s]), r);
				CHECK_MSG(b->union_nnz == a->union_nnz &&
					      b->total_nnz == a->total_nnz &&
					      b->gamma == a->gamma && b->skew == a->skew &&
					      b->imbalance == a->imbalance,
					  "P %d case %d %s: rank %d's report differs", P, c,
					  scd_scheme_name(m->schemes[s]), r);
			}
		}
}

/* The registry's lossless (lossless = 1) or lossy (0) schemes, in id order: how many. */
static int registry_schemes(int lossless, scd_scheme_t *out)
{
	int n = 0;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		if (!scd_schemes[s]->lossless == !lossless)
			out[n++] = (scd_scheme_t)s;
	return n;
}

static void lossless_world(int P)
{
	scd_scheme_t list[SCD_SCHEME_COUNT];
	matrix_t m = {.schemes = list, .nschemes = registry_schemes(1, list)};
	m.ncases = make_cases(m.specs, NUMEL, 1);
	m.slots = shared_map(sizeof(slot_t) * NCASES * NSCH * MAX_P);
	run_world(P, matrix_rank, &m);
	check_same(&m, P);
	munmap(m.slots, sizeof(slot_t) * NCASES * NSCH * MAX_P);
}

UNIT_TEST(scheme_lossless_p1_p2_p3)
{
	for (int P = 1; P <= 3; P++)
		lossless_world(P);
}
UNIT_TEST(scheme_lossless_p4_p5)
{
	lossless_world(4);
	lossless_world(5);
}
UNIT_TEST(scheme_lossless_p6_p7)
{
	lossless_world(6);
	lossless_world(7);
}
UNIT_TEST(scheme_lossless_p8)
{
	lossless_world(8);
}

/* Streaming (aggregation behind the receives, in chunks of as few as 16 entries: AGsparse,
 * HC, Balanced Parallelism) gives the exact sums, the same on every rank, and the same
 * bits as whole messages (floats included: AGsparse's and Balanced Parallelism's are the
 * bits of the sum in rank order; HC's, of its pairwise sums), at every P. Every lossless
 * scheme of the registry runs: cfg.stream_chunk must never change a result's bits. */
static void streamed_world(int P)
{
	size_t ns = sizeof(slot_t) * NCASES * NSCH * MAX_P;
	scd_scheme_t list[SCD_SCHEME_COUNT];
	matrix_t whole = {
	    .schemes = list, .nschemes = registry_schemes(1, list), .rank_order = 1};
	whole.ncases = make_cases(whole.specs, NUMEL, 1);
	matrix_t m = whole;
	m.stream_chunk = 16;
	whole.slots = shared_map(ns);
	m.slots = shared_map(ns);
	run_world(P, matrix_rank, &whole);
	run_world(P, matrix_rank, &m);
	check_same(&m, P);
	for (int c = 0; c < m.ncases; c++)
		for (int s = 0; s < m.nschemes; s++)
			CHECK_MSG(
			    slot_at(&m, c, s, 0)->hash == slot_at(&whole, c, s, 0)->hash,
			    "P %d case %d %s: streamed result differs from whole messages'", P,
			    c, scd_scheme_name(m.schemes[s]));
	munmap(whole.slots, ns);
	munmap(m.slots, ns);
}

UNIT_TEST(scheme_streamed_chunks_same_bits)
{
	for (int P = 1; P <= 8; P++)
		streamed_world(P);
}

/* ---- lossy schemes: mass conservation ------------------------------------------------------
 */

static void check_mass(const matrix_t *m, int P)
{
	uint64_t n = m->specs[0].numel;
	float *tmp = malloc(4 * n);
	double *sum = malloc(8 * n);
	for (int c = 0; c < m->ncases; c++) {
		const spec_t *sp = &m->specs[c];
		memset(sum, 0, 8 * n);
		double big = 0;
		for (int r = 0; r < P; r++) {
			gen_rank(sp, r, tmp);
			for (uint64_t i = 0; i < n; i++) {
				sum[i] += tmp[i];
				if (fabs(tmp[i]) > big)
					big = fabs(tmp[i]);
			}
		}
		for (int s = 0; s < m->nschemes; s++) {
			const float *out = m->out + lossy_at(m, c, s) * n;
			const float *res = m->res + lossy_at(m, c, s) * MAX_P * n;
			double worst = 0;
			uint64_t at = 0;
			for (uint64_t i = 0; i < n; i++) {
				double acc = out[i];
				for (int r = 0; r < P; r++)
					acc += res[(size_t)r * n + i];
				double e = fabs(acc - sum[i]);
				if (e > worst)
					worst = e, at = i;
			}
			/* Small integers: SparDL and ExDyna conserve exactly; S2's decode adds
			 * sums of integers too (exact). */
			CHECK_MSG(
			    worst <= 1e-5 * big * P,
			    "P %d case %d (d %g) %s: mass off by %g at %llu (inputs up to %g)",
			    P, c, sp->density, scd_scheme_name(m->schemes[s]), worst,
			    (unsigned long long)at, big);
		}
	}
	free(tmp), free(sum);
}

static void lossy_world(int P, uint32_t teams, double density)
{
	scd_scheme_t list[SCD_SCHEME_COUNT];
	int n = registry_schemes(0, list);
	matrix_t m = {.schemes = list, .nschemes = n, .teams = teams, .density = density};
	m.ncases = make_cases(m.specs, 8000, 0);
	for (int c = 0; c < m.ncases; c++)
		m.specs[c].numel = 8000;
	size_t ns = sizeof(slot_t) * NCASES * NSCH * MAX_P,
	       nr = 4 * (size_t)NCASES * n * MAX_P * 8000, no = 4 * (size_t)NCASES * n * 8000;
	m.slots = shared_map(ns);
	m.res = shared_map(nr);
	m.out = shared_map(no);
	run_world(P, matrix_rank, &m);
	check_same(&m, P);
	check_mass(&m, P);
	munmap(m.slots, ns), munmap(m.res, nr), munmap(m.out, no);
}

/* R-SAG (d = 2, 4), B-SAG (d = 3, and d = P for primes), SRS alone (d = 1), auto. */
UNIT_TEST(scheme_lossy_conserve_mass)
{
	lossy_world(1, 1, 0.01);
	lossy_world(2, 2, 0.01);
	lossy_world(3, 1, 0.02);
	lossy_world(4, 2, 0.01);
	lossy_world(5, 5, 0.01);
}
UNIT_TEST(scheme_lossy_conserve_mass_large_p)
{
	lossy_world(6, 3, 0.01);
	lossy_world(7, 0, 0.01);
	lossy_world(8, 4, 0.005);
	lossy_world(8, 1, 0);
}

/* SparDL keeping every value (k = numel; SRS alone or R-SAG) is the exact sum. */
UNIT_TEST(scheme_spardl_exact_at_full_density)
{
	static const scd_scheme_t only[] = {SCD_SCHEME_SPARDL};
	static const struct {
		int P;
		uint32_t teams;
	} worlds[] = {{2, 1}, {4, 2}, {5, 1}, {6, 1}, {8, 4}};
	for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
		matrix_t m = {.schemes = only,
			      .nschemes = 1,
			      .teams = worlds[w].teams,
			      .density = 1,
			      .exact = 1};
		m.ncases = make_cases(m.specs, 6000, 0);
		size_t ns = sizeof(slot_t) * NCASES * NSCH * MAX_P,
		       nr = 4 * (size_t)NCASES * MAX_P * 6000, no = 4 * (size_t)NCASES * 6000;
		m.slots = shared_map(ns);
		m.res = shared_map(nr);
		m.out = shared_map(no);
		run_world(worlds[w].P, matrix_rank, &m);
		check_same(&m, worlds[w].P);
		check_mass(&m, worlds[w].P);
		munmap(m.slots, ns), munmap(m.res, nr), munmap(m.out, no);
	}
}

/* ---- Balanced Parallelism's bytes against ZEN eq. (1) with hash-bitmap pull -------------- */

/* One scheme run twice (the second run is the steady state) on gen_rank's input, every
 * rank's report kept. */
typedef struct report_arg {
	spec_t sp;
	scd_scheme_t scheme;
	double density;		   /* cfg.density (0: the default) */
	uint32_t teams;		   /* cfg.spardl_teams */
	scd_scheme_report_t *reps; /* [rank] */
} report_arg_t;

static void report_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	report_arg_t *a = arg;
	uint64_t n = a->sp.numel;
	float *g = malloc(4 * n);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 99);
	if (a->density > 0)
		cfg.density = a->density;
	cfg.spardl_teams = a->teams;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	for (int step = 0; step < 2; step++) {
		gen_rank(&a->sp, rank, g);
		scd_scheme_io_t io = {.data = g};
		sc_status_t st = scd_scheme_run(a->scheme, ctx, &io, &a->reps[rank]);
		CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_scheme_error());
	}
	scd_scheme_ctx_destroy(ctx);
	free(g);
}

static void bytes_world(int P, double density, double overlap, int zipf)
{
	report_arg_t a = {.scheme = SCD_SCHEME_BALANCED_PAR,
			  .sp = {.numel = 1 << 18,
				 .density = density,
				 .overlap = overlap,
				 .zipf = zipf,
				 .seed = unit_rng()}};
	a.reps = shared_map(sizeof(scd_scheme_report_t) * MAX_P);
	run_world(P, report_rank, &a);
	const scd_scheme_report_t *r0 = &a.reps[0];
	double U = (double)a.sp.numel, k = (double)r0->total_nnz / P,
	       un = (double)r0->union_nnz;
	/* ZEN eq. (1), per rank: push (P-1)/P 8k (COO), pull (P-1)/P (U/8 + 4 union) */
	double eq1 = (P - 1.0) / P * 8 * k + (P - 1.0) / P * (U / 8 + 4 * un);
	scd_cost_in_t in = {.P = (uint32_t)P,
			    .numel = a.sp.numel,
			    .density = r0->density,
			    .gamma_n = r0->gamma,
			    .skew = 1,
			    .format = SCD_FMT_HASH_BITMAP};
	scd_cost_t model = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	uint64_t worst = 0;
	for (int r = 0; r < P; r++)
		if (a.reps[r].bytes_recv > worst)
			worst = a.reps[r].bytes_recv;
	printf("    P %d d %g overlap %g zipf %d: recv %llu B (max over ranks), eq. (1) %.0f B "
	       "(x%.3f), cost model %.0f B, imbalance %.3f\n",
	       P, density, overlap, zipf, (unsigned long long)worst, eq1, worst / eq1,
	       model.bytes, r0->imbalance);
	CHECK_MSG(worst <= 1.1 * eq1, "P %d: %llu bytes > 1.1 x eq. (1) %.0f", P,
		  (unsigned long long)worst, eq1);
	CHECK_MSG(worst <= 1.1 * model.bytes, "P %d: %llu bytes > 1.1 x cost model %.0f", P,
		  (unsigned long long)worst, model.bytes);
	munmap(a.reps, sizeof(scd_scheme_report_t) * MAX_P);
}

UNIT_TEST(scheme_balanced_par_bytes_eq1)
{
	bytes_world(4, 0.01, 0, 0);
	bytes_world(4, 0.01, 0.5, 1);
	bytes_world(8, 0.01, 0.5, 0);
	bytes_world(5, 0.05, 0, 1);
}

/* ---- plans that disagree fail on every rank, naming the other side ----------------------- */

static void mismatch_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	float g[64] = {1};
	scd_log_level = -1; /* the error is expected */
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(64, 1);
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	scd_scheme_io_t io = {.data = g};
	sc_status_t st = scd_scheme_run(rank ? SCD_SCHEME_HIER_CENTRAL : SCD_SCHEME_AGSPARSE,
					ctx, &io, NULL);
	CHECK_EQ_INT(st, SC_ERR_MISMATCH);
	CHECK_MSG(strstr(scd_scheme_error(), rank ? "rank 0 runs agsparse"
						  : "rank 1 runs "
						    "hier_central"),
		  "message: %s", scd_scheme_error());
	scd_scheme_ctx_destroy(ctx);
}

UNIT_TEST(scheme_mismatch_detected)
{
	run_world(2, mismatch_rank, NULL);
}

/* ---- many steps: ExDyna's shared state stays identical, mass is conserved over steps ----- */

#define STEPS 12

typedef struct steps_arg {
	spec_t sp;
	uint64_t *digest; /* [step][rank] */
	uint64_t *hash;	  /* [step][rank] */
	float *outsum;	  /* rank 0: sum of results over steps */
	float *res;	  /* [rank][numel] final residual */
	scd_scheme_t scheme;
} steps_arg_t;

static void steps_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	steps_arg_t *a = arg;
	uint64_t n = a->sp.numel;
	float *g = malloc(4 * n), *res = a->res + (size_t)rank * n;
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 7);
	cfg.density = 0.02;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	for (int s = 0; s < STEPS; s++) {
		spec_t sp = a->sp;
		sp.seed += (uint64_t)s;
		gen_rank(&sp, rank, g);
		scd_scheme_io_t io = {.data = g, .residual = res};
		sc_status_t st = scd_scheme_run(a->scheme, ctx, &io, NULL);
		CHECK_MSG(st == SC_OK, "rank %d step %d: %s", rank, s, scd_scheme_error());
		a->digest[s * MAX_P + rank] = scd_scheme_ctx_digest(ctx);
		a->hash[s * MAX_P + rank] = hash_bytes(g, 4 * n);
		if (rank == 0)
			for (uint64_t i = 0; i < n; i++)
				a->outsum[i] += g[i];
	}
	scd_scheme_ctx_destroy(ctx);
	free(g);
}

static void steps_world(int P, scd_scheme_t scheme)
{
	steps_arg_t a = {
	    .sp = {.numel = 20000, .density = 0.2, .overlap = 0.5, .seed = unit_rng()},
	    .scheme = scheme};
	a.digest = shared_map(8 * STEPS * MAX_P);
	a.hash = shared_map(8 * STEPS * MAX_P);
	a.outsum = shared_map(4 * a.sp.numel);
	a.res = shared_map(4 * a.sp.numel * MAX_P);
	run_world(P, steps_rank, &a);
	for (int s = 0; s < STEPS; s++)
		for (int r = 1; r < P; r++) {
			CHECK_MSG(a.digest[s * MAX_P + r] == a.digest[s * MAX_P],
				  "%s P %d step %d: rank %d's shared state diverged",
				  scd_scheme_name(scheme), P, s, r);
			CHECK_MSG(a.hash[s * MAX_P + r] == a.hash[s * MAX_P],
				  "%s P %d step %d: rank %d's result differs",
				  scd_scheme_name(scheme), P, s, r);
		}
	/* sum over steps and ranks of inputs == sum of results + final residuals */
	uint64_t n = a.sp.numel;
	float *g = malloc(4 * n);
	double *in = calloc(n, 8), worst = 0;
	for (int s = 0; s < STEPS; s++)
		for (int r = 0; r < P; r++) {
			spec_t sp = a.sp;
			sp.seed += (uint64_t)s;
			gen_rank(&sp, r, g);
			for (uint64_t i = 0; i < n; i++)
				in[i] += g[i];
		}
	for (uint64_t i = 0; i < n; i++) {
		double acc = a.outsum[i];
		for (int r = 0; r < P; r++)
			acc += a.res[(size_t)r * n + i];
		if (fabs(acc - in[i]) > worst)
			worst = fabs(acc - in[i]);
	}
	CHECK_MSG(worst <= 1e-4 * STEPS * P, "%s P %d: mass off by %g over %d steps",
		  scd_scheme_name(scheme), P, worst, STEPS);
	free(g), free(in);
	munmap(a.digest, 8 * STEPS * MAX_P), munmap(a.hash, 8 * STEPS * MAX_P);
	munmap(a.outsum, 4 * n), munmap(a.res, 4 * n * MAX_P);
}

UNIT_TEST(scheme_steps_shared_state_and_mass)
{
	scd_scheme_t list[SCD_SCHEME_COUNT];
	int n = registry_schemes(0, list);
	for (int s = 0; s < n; s++) /* every lossy scheme of the registry */
		steps_world(4, list[s]);
	steps_world(3, SCD_SCHEME_EXDYNA); /* rotating partitions at an odd P */
	steps_world(6, SCD_SCHEME_SPARDL); /* P not a power of two */
}

/* ---- lossy schemes on COO input with a residual kept sparse ----------------------------
 * The daemon folds a COO tensor's residual into its list and asks the scheme where it
 * adds residual (io->track_residual). Over three steps with error feedback, SparDL and
 * ExDyna on that path must give the bits of the dense path (result and residual), the
 * result as an ascending list, and name every index where the residual is non-zero. */

typedef struct {
	scd_scheme_t scheme;
	uint32_t teams;
	uint64_t seed;
} coo_path_arg_t;

static void coo_path_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	const coo_path_arg_t *a = arg;
	const uint64_t n = 20000;
	float *g = malloc(4 * n), *xd = malloc(4 * n), *rd = calloc(n, 4), *rc = calloc(n, 4),
	      *xc = malloc(4 * n);
	scd_coo_t in = {malloc(4 * n), malloc(4 * n), 0, n},
		  out = {malloc(4 * n), malloc(4 * n), 0, n};
	uint8_t *seen = malloc(n);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 11);
	cfg.density = 0.02;
	cfg.spardl_teams = a->teams;
	scd_scheme_ctx_t *cd = NULL, *cc = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &cd), SC_OK);
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &cc), SC_OK);
	for (int step = 0; step < 3; step++) {
		spec_t sp = {.numel = n,
			     .density = 0.05,
			     .overlap = 0.5,
			     .zipf = step & 1,
			     .floats = 1,
			     .seed = a->seed + (uint64_t)step};
		gen_rank(&sp, rank, g);
		/* dense path: the engine adds the residual (ExDyna's selection does it itself)
		 */
		memcpy(xd, g, 4 * n);
		if (a->scheme != SCD_SCHEME_EXDYNA)
			for (uint64_t i = 0; i < n; i++) {
				xd[i] = g[i] + rd[i];
				rd[i] = 0;
			}
		scd_scheme_io_t iod = {.data = xd, .residual = rd};
		CHECK_MSG(scd_scheme_run(a->scheme, cd, &iod, NULL) == SC_OK, "rank %d: %s",
			  rank, scd_scheme_error());
		/* COO path: the residual folded into the list, as bufctx.c does */
		in.nnz = 0;
		for (uint64_t i = 0; i < n; i++)
			if (g[i] != 0 || rc[i] != 0) {
				float v = g[i] + rc[i];
				rc[i] = 0;
				if (v != 0) {
					in.idx[in.nnz] = (uint32_t)i;
					in.val[in.nnz++] = v;
				}
			}
		memset(xc, 0x7f, 4 * n);
		scd_scheme_io_t ioc = {
		    .data = xc, .coo = &in, .residual = rc, .out = &out, .track_residual = 1};
		CHECK_MSG(scd_scheme_run(a->scheme, cc, &ioc, NULL) == SC_OK, "rank %d: %s",
			  rank, scd_scheme_error());
		CHECK_MSG(out.nnz != SCD_RESULT_DENSE, "%s rank %d step %d: no sparse result",
			  scd_scheme_name(a->scheme), rank, step);
		memset(xc, 0, 4 * n);
		for (uint64_t k = 0; k < out.nnz; k++) {
			CHECK_MSG(out.idx[k] < n && (!k || out.idx[k] > out.idx[k - 1]),
				  "%s rank %d step %d: result entry %llu out of order",
				  scd_scheme_name(a->scheme), rank, step,
				  (unsigned long long)k);
			xc[out.idx[k]] = out.val[k];
		}
		CHECK_MSG(!memcmp(xc, xd, 4 * n), "%s P %d rank %d step %d: results differ",
			  scd_scheme_name(a->scheme), P, rank, step);
		CHECK_MSG(!memcmp(rc, rd, 4 * n), "%s P %d rank %d step %d: residuals differ",
			  scd_scheme_name(a->scheme), P, rank, step);
		const uint32_t *ai;
		uint64_t an;
		CHECK_MSG(scd_scheme_residual_added(cc, &ai, &an), "%s: residual not tracked",
			  scd_scheme_name(a->scheme));
		memset(seen, 0, n);
		for (uint64_t k = 0; k < an; k++)
			seen[ai[k]] = 1;
		for (uint64_t i = 0; i < n; i++)
			CHECK_MSG(rc[i] == 0 || seen[i],
				  "%s P %d rank %d step %d: residual at %llu not reported",
				  scd_scheme_name(a->scheme), P, rank, step,
				  (unsigned long long)i);
	}
	scd_scheme_ctx_destroy(cd), scd_scheme_ctx_destroy(cc);
	free(g), free(xd), free(rd), free(rc), free(xc), free(seen);
	free(in.idx), free(in.val), free(out.idx), free(out.val);
}

UNIT_TEST(scheme_lossy_coo_residual_same_bits)
{
	static const struct {
		scd_scheme_t s;
		int P;
		uint32_t teams;
	} runs[] = {{SCD_SCHEME_SPARDL, 5, 1},
		    {SCD_SCHEME_SPARDL, 4, 2},
		    {SCD_SCHEME_SPARDL, 6, 3},
		    {SCD_SCHEME_EXDYNA, 3, 0},
		    {SCD_SCHEME_EXDYNA, 4, 0}};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		coo_path_arg_t a = {runs[i].s, runs[i].teams, unit_rng()};
		run_world(runs[i].P, coo_path_rank, &a);
	}
}

/* ---- S2: with many columns almost every value comes back exactly ---------------------------
 */

static void s2_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	spec_t *sp = arg;
	uint64_t n = sp->numel, exact = 0, support = 0;
	float *g = malloc(4 * n), *ref = calloc(n, 4), *tmp = malloc(4 * n);
	for (int r = 0; r < P; r++) {
		gen_rank(sp, r, tmp);
		for (uint64_t i = 0; i < n; i++)
			ref[i] += tmp[i];
	}
	gen_rank(sp, rank, g);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 3);
	cfg.sketch_cols_factor = 32;
	cfg.sketch_block = 16;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	scd_scheme_io_t io = {.data = g};
	CHECK_EQ_INT(scd_scheme_run(SCD_SCHEME_S2_SKETCH, ctx, &io, NULL), SC_OK);
	for (uint64_t i = 0; i < n; i++)
		if (ref[i] != 0) {
			support++;
			exact += g[i] == ref[i];
		}
	CHECK_MSG(exact >= 0.85 * support, "rank %d: %llu of %llu values exact", rank,
		  (unsigned long long)exact, (unsigned long long)support);
	scd_scheme_ctx_destroy(ctx);
	free(g), free(ref), free(tmp);
}

UNIT_TEST(scheme_s2_decodes_with_few_collisions)
{
	spec_t sp = {.numel = 50000, .density = 0.005, .overlap = 0.5, .seed = unit_rng()};
	run_world(3, s2_rank, &sp);
}

/* ---- messages: runs of consecutive indices ------------------------------------------------
 */

UNIT_TEST(scheme_msg_runs_roundtrip_and_size)
{
	enum { N = 1 << 16, ROW = 300 };
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	static uint32_t idx[N], widx[N];
	static float val[N], wval[N];
	static uint8_t buf[16 * N];
	/* 7 whole rows of an embedding-like tensor */
	uint64_t nnz = 0;
	const uint32_t rows[] = {0, 3, 4, 9, 100, 101, 200};
	for (int r = 0; r < 7; r++)
		for (uint32_t j = 0; j < ROW; j++, nnz++)
			idx[nnz] = rows[r] * ROW + j, val[nnz] = (float)(nnz + 1);
	scd_coo_t src = {idx, val, nnz, N}, dec;
	uint64_t bytes = 0, numel = 210 * ROW;
	CHECK_EQ_INT(scd_scheme_msg_encode(dev, &src, numel, buf, sizeof(buf), &bytes), SC_OK);
	/* runs: rows 3,4 and 100,101 are adjacent, so 5 runs: 8 + 8 + 5 * 8 + 4 nnz */
	CHECK_MSG(bytes == 8 + 8 + 5 * 8 + 4 * nnz, "runs message of %llu bytes",
		  (unsigned long long)bytes);
	CHECK_TRUE(bytes <= scd_scheme_msg_bytes(numel, nnz));
	CHECK_EQ_INT(scd_scheme_msg_decode(dev, buf, bytes, numel, N, widx, wval, &dec), SC_OK);
	CHECK_TRUE(dec.nnz == nnz);
	CHECK_TRUE(!memcmp(dec.idx, idx, 4 * nnz) && !memcmp(dec.val, val, 4 * nnz));
	/* scattered indices over the whole range go as COO */
	for (uint64_t i = 0; i < 1000; i++)
		idx[i] = (uint32_t)(i * 63);
	src.nnz = 1000;
	CHECK_EQ_INT(scd_scheme_msg_encode(dev, &src, numel, buf, sizeof(buf), &bytes), SC_OK);
	CHECK_TRUE(bytes == 8 + 8 * 1000);
	/* ... and as a bitmap over their own range [7000, 13993] when that is smaller */
	for (uint64_t i = 0; i < 1000; i++)
		idx[i] = (uint32_t)(7000 + i * 7);
	CHECK_EQ_INT(scd_scheme_msg_encode(dev, &src, numel, buf, sizeof(buf), &bytes), SC_OK);
	CHECK_MSG(bytes == 8 + 16 + 8 * ((6994 + 63) / 64) + 4 * 1000, "bitmap of %llu bytes",
		  (unsigned long long)bytes);
	CHECK_TRUE(bytes <= scd_scheme_msg_bytes(numel, 1000));
	CHECK_EQ_INT(scd_scheme_msg_decode(dev, buf, bytes, numel, N, widx, wval, &dec), SC_OK);
	CHECK_TRUE(dec.nnz == 1000 && !memcmp(dec.idx, idx, 4000) &&
		   !memcmp(dec.val, val, 4000));
	uint64_t lo_past = numel - 6000; /* its range would end past numel */
	memcpy(buf + 8, &lo_past, 8);
	CHECK_TRUE(scd_scheme_msg_decode(dev, buf, bytes, numel, N, widx, wval, &dec) != SC_OK);
	/* a list past numel is not encoded */
	idx[999] = (uint32_t)numel;
	CHECK_TRUE(scd_scheme_msg_encode(dev, &src, numel, buf, sizeof(buf), &bytes) != SC_OK);
	/* a run past numel, or overlapping the previous one, is refused */
	src.nnz = nnz = 2 * ROW;
	for (uint64_t i = 0; i < nnz; i++)
		idx[i] = (uint32_t)(i < ROW ? i : 5 * ROW + i);
	CHECK_EQ_INT(scd_scheme_msg_encode(dev, &src, numel, buf, sizeof(buf), &bytes), SC_OK);
	uint32_t past = (uint32_t)numel - 10;
	memcpy(buf + 8 + 8 + 8, &past, 4);
	CHECK_TRUE(scd_scheme_msg_decode(dev, buf, bytes, numel, N, widx, wval, &dec) != SC_OK);
	uint32_t back = 5;
	memcpy(buf + 8 + 8 + 8, &back, 4);
	CHECK_TRUE(scd_scheme_msg_decode(dev, buf, bytes, numel, N, widx, wval, &dec) != SC_OK);
}

/* scd_scheme_topk_coo against a reference selection (keys descending, ties to the lower
 * index): values drawn to crowd one exponent (a deep boundary bucket), with many ties,
 * zeros and both signs, for k from 0 to n. */
static int topk_ref_cmp(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

UNIT_TEST(scheme_topk_coo_matches_reference)
{
	enum { N = 5000 };
	static uint32_t idx[N], tidx[N], ref_idx[N];
	static float val[N], tval[N], orig[N];
	static uint64_t order[N];
	for (int round = 0; round < 40; round++) {
		uint64_t n = 1 + unit_rng() % N, k = unit_rng() % (n + 2);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t r = unit_rng();
			float v = (r & 7) == 0	 ? 0.0f
				  : (r & 7) == 1 ? (float)((r >> 8) % 5) /* ties */
						 : 1.0f + (float)((r >> 8) % 100000) * 1e-6f;
			orig[i] = (r >> 40) & 1 ? -v : v;
		}
		/* reference: key descending, index ascending, the first k; then index order */
		for (uint64_t i = 0; i < n; i++)
			order[i] = ((uint64_t)(0x7fffffffu - scd_abs_key(orig[i])) << 32) | i;
		qsort(order, n, sizeof(order[0]), topk_ref_cmp);
		uint64_t kk = k < n ? k : n, nref = 0;
		static uint8_t chosen[N];
		memset(chosen, 0, n);
		for (uint64_t j = 0; j < kk; j++)
			chosen[order[j] & 0xffffffffu] = 1;
		for (uint64_t i = 0; i < n; i++)
			if (chosen[i])
				ref_idx[nref++] = (uint32_t)(3 * i);
		for (uint64_t i = 0; i < n; i++)
			idx[i] = (uint32_t)(3 * i), val[i] = orig[i];
		uint64_t kept =
		    scd_scheme_topk_coo(&scd_device_cpu_ops, idx, val, n, k, tidx, tval);
		CHECK_MSG(kept == kk, "n %llu k %llu: kept %llu", (unsigned long long)n,
			  (unsigned long long)k, (unsigned long long)kept);
		CHECK_MSG(!memcmp(idx, ref_idx, 4 * kk), "n %llu k %llu: a different selection",
			  (unsigned long long)n, (unsigned long long)k);
		/* kept and discarded: each in index order, together every entry once */
		for (uint64_t i = 0; i < n; i++) {
			CHECK_TRUE(val[i] == orig[idx[i] / 3]);
			if (i && i != kept)
				CHECK_TRUE(idx[i] > idx[i - 1]);
		}
	}
}

/* SparDL's blocks hold about equal loads on skewed input: Zipf-distributed indices crowd
 * the low end, where equal-size blocks would give the first block most of the non-zeros
 * (and its member most of the selection work); the report's imbalance is the blocks'. */
UNIT_TEST(scheme_spardl_blocks_balance_skewed_load)
{
	enum { P = 4 };
	report_arg_t a = {.scheme = SCD_SCHEME_SPARDL,
			  .density = 0.01,
			  .teams = 1,
			  .sp = {.numel = 1 << 18,
				 .density = 0.05,
				 .overlap = 0.3,
				 .zipf = 1,
				 .seed = unit_rng()}};
	a.reps = shared_map(sizeof(scd_scheme_report_t) * MAX_P);
	run_world(P, report_rank, &a);
	/* what P equal-size blocks would hold (d = 1 team: Q = P blocks) */
	float *g = malloc(4 * a.sp.numel);
	uint64_t load[P] = {0}, total = 0, maxload = 0;
	for (int r = 0; r < P; r++) {
		gen_rank(&a.sp, r, g);
		for (uint64_t i = 0; i < a.sp.numel; i++)
			if (g[i] != 0)
				load[i * P / a.sp.numel]++, total++;
	}
	for (int b = 0; b < P; b++)
		maxload = load[b] > maxload ? load[b] : maxload;
	double equal = (double)maxload * P / (double)total;
	printf("    P %d zipf: block imbalance %.3f (equal-size blocks: %.3f), teams %u\n", P,
	       a.reps[0].imbalance, equal, a.reps[0].teams);
	CHECK_MSG(a.reps[0].teams == 1, "teams %u", a.reps[0].teams);
	CHECK_MSG(equal > 2, "the input is not skewed enough to tell: %.3f", equal);
	for (int r = 0; r < P; r++)
		CHECK_MSG(a.reps[r].imbalance < 1.2 &&
			      a.reps[r].imbalance == a.reps[0].imbalance,
			  "rank %d: block imbalance %.3f", r, a.reps[r].imbalance);
	free(g);
	munmap(a.reps, sizeof(scd_scheme_report_t) * MAX_P);
}

/* ExDyna's exchange follows the selection's balance: balanced counts all-gather the
 * indices (metadata, one exchange) and sum the values at the union in a ring (2(P-1)):
 * 2 + 2(P-1) rounds; one rank over twice the mean (Zipf's hot block in its partition)
 * sends its indices through a ring too: 1 + 4(P-1). Both paths' results are checked by
 * the mass-conservation tests and scheme_exdyna_sums_every_rank_at_the_union. A rank
 * selects at most twice its share (exdyna.h), so the skewed case asks for more than the
 * input holds: every partition gives all it has, and the hot one holds most of it. */
UNIT_TEST(scheme_exdyna_ring_when_selection_is_skewed)
{
	enum { P = 4 };
	for (int zipf = 0; zipf <= 1; zipf++) {
		report_arg_t a = {.scheme = SCD_SCHEME_EXDYNA,
				  .density = zipf ? 0.05 : 0.01,
				  .sp = {.numel = 1 << 18,
					 .density = zipf ? 0.01 : 0.05,
					 .zipf = zipf,
					 .seed = unit_rng()}};
		a.reps = shared_map(sizeof(scd_scheme_report_t) * MAX_P);
		run_world(P, report_rank, &a);
		const scd_scheme_report_t *r = &a.reps[0];
		printf("    zipf %d: selection imbalance %.3f, %u rounds\n", zipf, r->imbalance,
		       r->rounds);
		CHECK_MSG(zipf ? r->imbalance > 2 : r->imbalance < 2, "zipf %d: imbalance %.3f",
			  zipf, r->imbalance);
		CHECK_MSG(r->rounds == (zipf ? 1u + 4 * (P - 1) : 2u + 2 * (P - 1)),
			  "zipf %d: %u rounds", zipf, r->rounds);
		munmap(a.reps, sizeof(scd_scheme_report_t) * MAX_P);
	}
}

/* ---- ExDyna sums every rank's values at the union (Algorithm 1, lines 11-13) ---------- */

typedef struct union_arg {
	spec_t sp;
	int coo;
	float *out; /* [MAX_P][numel]: each rank's result */
} union_arg_t;

static void union_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	union_arg_t *a = arg;
	uint64_t n = a->sp.numel;
	float *in = malloc(4 * n), *res = calloc(n, 4);
	scd_coo_t coo = {malloc(4 * n + 4), malloc(4 * n + 4), 0, n};
	CHECK_TRUE(in && res && coo.idx && coo.val);
	gen_rank(&a->sp, rank, in);
	dense_to_coo(in, n, &coo);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 7);
	cfg.density = 0.01;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	float *data = a->out + (size_t)rank * n;
	if (!a->coo)
		memcpy(data, in, 4 * n);
	scd_scheme_io_t io = {.data = data, .coo = a->coo ? &coo : NULL, .residual = res};
	sc_status_t st = scd_scheme_run(SCD_SCHEME_EXDYNA, ctx, &io, NULL);
	CHECK_MSG(st == SC_OK, "P %d rank %d: %s", P, rank, scd_scheme_error());
	scd_scheme_ctx_destroy(ctx);
	free(in), free(res), free(coo.idx), free(coo.val);
}

/* On the first step (no residual yet), every index that comes back non-zero holds the
 * sum of EVERY rank's value there, exactly (small integers): a rank's values at the
 * indices the other ranks selected are summed too, not left in its residual. P = 2..8,
 * dense and COO input, uniform and overlapping indices so most selected indices are
 * non-zero on several ranks. */
UNIT_TEST_TIMEOUT(scheme_exdyna_sums_every_rank_at_the_union, 300)
{
	for (int P = 2; P <= 8; P++)
		for (int coo = 0; coo <= 1; coo++) {
			union_arg_t a = {.coo = coo,
					 .sp = {.numel = 1 << 16,
						.density = 0.05,
						.overlap = 0.7,
						.seed = unit_rng()}};
			uint64_t n = a.sp.numel;
			a.out = shared_map(4 * (size_t)MAX_P * n);
			run_world(P, union_rank, &a);
			float *ref = calloc(n, 4), *g = malloc(4 * (size_t)P * n);
			uint8_t *holders = calloc(n, 1);
			for (int r = 0; r < P; r++) {
				gen_rank(&a.sp, r, g + (size_t)r * n);
				for (uint64_t i = 0; i < n; i++) {
					ref[i] += g[(size_t)r * n + i];
					holders[i] += g[(size_t)r * n + i] != 0;
				}
			}
			uint64_t nonzero = 0, several = 0;
			for (uint64_t i = 0; i < n; i++) {
				float got = a.out[i];
				for (int r = 1; r < P; r++)
					CHECK_MSG(a.out[(size_t)r * n + i] == got,
						  "P %d coo %d: rank %d's result at %llu "
						  "differs from "
						  "rank 0's",
						  P, coo, r, (unsigned long long)i);
				if (got == 0)
					continue;
				nonzero++;
				several += holders[i] > 1;
				CHECK_MSG(
				    got == ref[i],
				    "P %d coo %d: index %llu came back %g, the sum over the "
				    "%d ranks is %g",
				    P, coo, (unsigned long long)i, got, P, ref[i]);
			}
			printf("    P %d coo %d: %llu indices came back, %llu of them held by "
			       "several ranks\n",
			       P, coo, (unsigned long long)nonzero,
			       (unsigned long long)several);
			CHECK_MSG(
			    nonzero > 0 && several * 2 > nonzero,
			    "P %d coo %d: %llu of %llu selected indices on several ranks: "
			    "the test does not tell",
			    P, coo, (unsigned long long)several, (unsigned long long)nonzero);
			free(ref), free(g), free(holders);
			munmap(a.out, 4 * (size_t)MAX_P * n);
		}
}

/* ---- messages from a peer: indices checked before anyone writes dst[idx] -------------------
 */

/* A COO message of n (index, value) pairs (8-byte header: format 1). */
static uint64_t coo_msg(uint8_t *buf, const uint32_t *idx, uint64_t n)
{
	uint64_t fmt = 1;
	memcpy(buf, &fmt, 8);
	memcpy(buf + 8, idx, 4 * n);
	for (uint64_t i = 0; i < n; i++) {
		float v = 1.0f;
		memcpy(buf + 8 + 4 * n + 4 * i, &v, 4);
	}
	return 8 + 8 * n;
}

UNIT_TEST(scheme_msg_coo_index_past_numel_is_refused)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	static uint8_t buf[256];
	static uint32_t widx[16];
	static float wval[16], dense[1000];
	uint32_t idx[3] = {5, 9, 0x7ffffff0u};
	uint64_t bytes = coo_msg(buf, idx, 3);
	scd_coo_t dec = {0};
	sc_status_t st = scd_scheme_msg_decode(dev, buf, bytes, 1000, 16, widx, wval, &dec);
	if (st == SC_OK) /* what AGsparse does with a decoded list: dst[idx] += val */
		scd_coo_scatter_add(dense, &dec);
	CHECK_EQ_INT(st, SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(scd_scheme_error(), "index 2147483632"), "error: %s",
		  scd_scheme_error());
	CHECK_MSG(strstr(scd_scheme_error(), "1000 elements"), "error: %s", scd_scheme_error());
	/* the same through append, the list untouched */
	uint32_t li[16];
	float lv[16];
	scd_coo_t list = {li, lv, 0, 16};
	uint64_t added = 99;
	CHECK_EQ_INT(scd_scheme_msg_append(dev, buf, bytes, 1000, &list, &added),
		     SC_ERR_PROTOCOL);
	CHECK_TRUE(list.nnz == 0 && added == 99);
}

UNIT_TEST(scheme_msg_coo_indices_out_of_order_are_refused)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	static uint8_t buf[256];
	static uint32_t widx[16];
	static float wval[16];
	uint32_t idx[4] = {5, 9, 9, 12};
	scd_coo_t dec = {0};
	uint64_t bytes = coo_msg(buf, idx, 4);
	CHECK_EQ_INT(scd_scheme_msg_decode(dev, buf, bytes, 100, 16, widx, wval, &dec),
		     SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(scd_scheme_error(), "index 9 at position 2 is not above"), "error: %s",
		  scd_scheme_error());
	idx[2] = 7;
	bytes = coo_msg(buf, idx, 4);
	CHECK_EQ_INT(scd_scheme_msg_decode(dev, buf, bytes, 100, 16, widx, wval, &dec),
		     SC_ERR_PROTOCOL);
	/* ascending and in range: accepted, zero-copy */
	idx[2] = 10;
	bytes = coo_msg(buf, idx, 4);
	CHECK_EQ_INT(scd_scheme_msg_decode(dev, buf, bytes, 100, 16, widx, wval, &dec), SC_OK);
	CHECK_TRUE(dec.nnz == 4 && dec.idx[3] == 12);
}

/* A message that decodes to more entries than the list has room for is refused before
 * anything is written past it (a bitmap over a short span carries many values). */
UNIT_TEST(scheme_msg_more_entries_than_room_is_refused)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	static uint8_t buf[1024];
	uint32_t idx[64];
	float val[64];
	for (int i = 0; i < 64; i++)
		idx[i] = (uint32_t)(100 + i), val[i] = 1.0f + (float)i;
	scd_coo_t src = {idx, val, 64, 64};
	uint64_t bytes = 0;
	CHECK_EQ_INT(scd_scheme_msg_encode(dev, &src, 100000, buf, sizeof(buf), &bytes), SC_OK);
	uint32_t li[64 + 8];
	float lv[64 + 8];
	for (int i = 0; i < 72; i++)
		li[i] = 0xdeadbeefu;
	scd_coo_t list = {li, lv, 0, 10};
	uint64_t added = 0;
	CHECK_EQ_INT(scd_scheme_msg_append(dev, buf, bytes, 100000, &list, &added),
		     SC_ERR_PROTOCOL);
	CHECK_TRUE(list.nnz == 0);
	CHECK_MSG(li[10] == 0xdeadbeefu, "entry 10 written past the list's room: %u", li[10]);
	list.cap = 64;
	CHECK_EQ_INT(scd_scheme_msg_append(dev, buf, bytes, 100000, &list, &added), SC_OK);
	CHECK_TRUE(added == 64 && list.nnz == 64 && li[63] == 163);
}
