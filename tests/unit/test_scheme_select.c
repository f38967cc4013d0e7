/*
 * test_scheme_select.c: the choice of scheme (scheme/scheme.h) from the cost model: dense
 * data pick the dense ring, sparse data a sparse scheme, lossless_only never returns a
 * lossy scheme, a pin always wins, ExDyna only when pinned; identical reports fold into
 * identical profiles and so into identical choices; the engine's calibrated pick
 * (measured/predicted ratios, the prior of unmeasured schemes, hysteresis). No
 * communication: the context only needs the transport's rank and size.
 */
#include "unit.h"

#include <string.h>

#include "scheme/scheme.h"

static const scd_transport_ops_t no_ops = {.name = "none"};

static scd_scheme_ctx_t *make_ctx(int P, uint64_t numel, scd_transport_t *t)
{
	*t = (scd_transport_t){.ops = &no_ops, .rank = 0, .size = P};
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(numel, 1);
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, t, NULL, &ctx), SC_OK);
	return ctx;
}

UNIT_TEST(scheme_choose_by_density)
{
	scd_transport_t t;
	const double alpha = 50e-6, beta = 8.0 / 1e9; /* 1 Gbit/s */
	for (int P = 2; P <= 8; P++) {
		scd_scheme_ctx_t *ctx = make_ctx(P, 64u << 20, &t);
		scd_scheme_profile_t pf;
		scd_scheme_profile_init(&pf, 1);
		CHECK_EQ_INT(scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, NULL),
			     SCD_SCHEME_DENSE_RING);
		pf = (scd_scheme_profile_t){
		    .density = 0.001, .gamma_n = P * 0.9, .skew = 1.5, .steps = 3};
		scd_cost_t c;
		scd_scheme_t s = scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, &c);
		CHECK_MSG(s != SCD_SCHEME_DENSE_RING && scd_scheme_lossless(s),
			  "P %d: sparse data chose %s", P, scd_scheme_name(s));
		scd_cost_t dense =
		    scd_scheme_cost(ctx, SCD_SCHEME_DENSE_RING, &pf, alpha, beta);
		CHECK_TRUE(c.seconds < dense.seconds / 10);
		/* the choice is the cheapest of the allowed schemes */
		for (int k = 0; k < SCD_SCHEME_COUNT; k++) {
			if (scd_schemes[k]->pick == SCD_PICK_PINNED || !scd_scheme_lossless(k))
				continue;
			CHECK_TRUE(
			    c.seconds <=
			    scd_scheme_cost(ctx, (scd_scheme_t)k, &pf, alpha, beta).seconds);
		}
		/* lossy allowed: never a pinned-only scheme (ExDyna) unless pinned; a pin
		 * always wins */
		for (double d = 1e-5; d <= 1; d *= 10) {
			pf.density = d;
			scd_scheme_t s0 = scd_scheme_choose(ctx, &pf, alpha, beta, 0, -1, NULL);
			CHECK_TRUE(scd_schemes[s0]->pick != SCD_PICK_PINNED);
			CHECK_TRUE(scd_scheme_lossless(
			    scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, NULL)));
			for (int k = 0; k < SCD_SCHEME_COUNT; k++)
				CHECK_EQ_INT(
				    scd_scheme_choose(ctx, &pf, alpha, beta, 1, k, NULL), k);
		}
		scd_scheme_ctx_destroy(ctx);
	}
}

UNIT_TEST(scheme_profile_identical_reports_identical_choice)
{
	scd_transport_t t;
	scd_scheme_ctx_t *ctx = make_ctx(6, 1u << 22, &t);
	scd_scheme_profile_t a, b;
	scd_scheme_profile_init(&a, 0.01);
	scd_scheme_profile_init(&b, 0.01);
	for (int i = 0; i < 50; i++) {
		scd_scheme_report_t r = {.scheme =
					     (scd_scheme_t)(unit_rng_below(SCD_SCHEME_COUNT)),
					 .density = unit_rng_double() * 0.1,
					 .gamma = 1 + 5 * unit_rng_double(),
					 .skew = 1 + unit_rng_double()};
		scd_scheme_profile_update(&a, &r);
		scd_scheme_profile_update(&b, &r);
		CHECK_TRUE(memcmp(&a, &b, sizeof(a)) == 0);
		CHECK_EQ_INT(scd_scheme_choose(ctx, &a, 30e-6, 1e-9, 0, -1, NULL),
			     scd_scheme_choose(ctx, &b, 30e-6, 1e-9, 0, -1, NULL));
	}
	CHECK_EQ_INT(a.steps, 50);
	scd_scheme_ctx_destroy(ctx);
}

UNIT_TEST(scheme_names_parse)
{
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		scd_scheme_t p;
		CHECK_EQ_INT(scd_scheme_parse(scd_scheme_name((scd_scheme_t)s), &p), 0);
		CHECK_EQ_INT(p, s);
	}
	scd_scheme_t p;
	CHECK_TRUE(scd_scheme_parse("nope", &p) != 0);
}

/* ---- the engine's calibrated pick (coll/bufctx.h) ----------------------------------------
 */

#include "coll/bufctx.h"

UNIT_TEST(scheme_calibrated_pick)
{
	enum {
		A = SCD_SCHEME_AGSPARSE,
		B = SCD_SCHEME_BALANCED_PAR,
		H = SCD_SCHEME_HIER_CENTRAL,
		R = SCD_SCHEME_DENSE_RING
	};
	double pred[SCD_SCHEME_COUNT], ratio[SCD_SCHEME_COUNT];
	uint32_t samples[SCD_SCHEME_COUNT];
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		pred[s] = -1, ratio[s] = 1, samples[s] = 0;
	/* nothing measured: the cheapest prediction; a scheme not allowed is never picked */
	pred[R] = 1.0, pred[A] = 0.3, pred[B] = 0.2, pred[H] = 0.25;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, -1, 1), B);
	pred[B] = -1;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, -1, 1), H);
	pred[B] = 0.2;
	/* B measured 4x slower than predicted (0.8 s): H (0.25 x 1.25) is tried, the ring
	 * (1.0 x 1.25) is not */
	samples[B] = 2, ratio[B] = 4;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, B, 1), H);
	/* H in its first (uncounted) run keeps the margin until it is measured */
	samples[H] = 1;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, H, 1), H);
	/* measured as slow as B: B is back, and A (0.3 x 1.25 = 0.375) gets its try */
	samples[H] = 2, ratio[H] = 4;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, H, 1), A);
	/* once SCD_EXPLORE_SCHEMES (4) schemes were tried, an unmeasured one is not, however
	 * cheap its prediction: A measured, and a fourth measured (the ring, 1.0 x 0.9) */
	samples[A] = 3, ratio[A] = 1.1;	   /* A: 0.33 */
	samples[R] = 2, ratio[R] = 0.9;	   /* R: 0.9 */
	pred[SCD_SCHEME_OMNIREDUCE] = 0.1; /* 0.125 if it could be tried */
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), A);
	samples[R] = 0; /* three tried: the fourth try goes to OmniReduce */
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), SCD_SCHEME_OMNIREDUCE);
	/* past the buffer's first steps no scheme is tried any more: A stays */
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 0), A);
	/* but one whose try began (its first, uncounted run done) is still measured */
	samples[SCD_SCHEME_OMNIREDUCE] = 1;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 0), SCD_SCHEME_OMNIREDUCE);
	samples[SCD_SCHEME_OMNIREDUCE] = 0;
	pred[SCD_SCHEME_OMNIREDUCE] = -1;
	/* hysteresis: staying on A unless another is more than 10% cheaper */
	samples[H] = 2, ratio[H] = 1.25; /* H: 0.3125, 0.95 of A */
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), A);
	ratio[H] = 1.15; /* H: 0.2875, 0.87 of A */
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), H);
	/* no allowed scheme */
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		pred[s] = -1;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), -1);
}

/* The calibration statistic: the lower median of the last SCD_CALIB_WINDOW runs, the same
 * for a scheme that was only tried and one that has run for many steps. */
UNIT_TEST(scheme_calibration_is_a_windowed_median)
{
	double w[SCD_CALIB_WINDOW];
	/* a try's two runs: the better one */
	CHECK_NEAR(scd_calib_add(w, 0, 1.4), 1.4, 0);
	CHECK_NEAR(scd_calib_add(w, 1, 0.9), 0.9, 0);
	CHECK_NEAR(scd_calib_add(w, 2, 1.0), 1.0, 0);
	/* an incumbent at 1.0 with three slow steps among its last seven keeps 1.0 */
	double inc[SCD_CALIB_WINDOW], r = 0;
	uint32_t n = 0;
	for (; n < 20; n++)
		r = scd_calib_add(inc, n, 1.0);
	for (int i = 0; i < 3; i++, n++)
		r = scd_calib_add(inc, n, 1.6);
	CHECK_NEAR(r, 1.0, 0);
	/* a fourth makes the slow steps the majority, and the median follows them */
	r = scd_calib_add(inc, n++, 1.6);
	CHECK_NEAR(r, 1.6, 0);
	/* the window forgets: seven fast runs later only they count */
	for (int i = 0; i < SCD_CALIB_WINDOW; i++, n++)
		r = scd_calib_add(inc, n, 0.8);
	CHECK_NEAR(r, 0.8, 0);

	/* Both statistics alike: an incumbent (AGsparse) measured at 1.0 with two slow steps,
	 * a tried scheme (SparDL, predicted 3% faster) whose best run matched it. AGsparse
	 * stays: its slow steps do not hand the buffer to a scheme that is not faster. */
	enum { A = SCD_SCHEME_AGSPARSE, S = SCD_SCHEME_SPARDL };
	double pred[SCD_SCHEME_COUNT], ratio[SCD_SCHEME_COUNT], wa[SCD_CALIB_WINDOW],
	    ws[SCD_CALIB_WINDOW];
	uint32_t samples[SCD_SCHEME_COUNT];
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		pred[s] = -1, ratio[s] = 1, samples[s] = 0;
	pred[A] = 0.30, pred[S] = 0.29;
	for (n = 0; n < 10; n++)
		ratio[A] = scd_calib_add(wa, n, 1.0);
	ratio[A] = scd_calib_add(wa, n++, 1.5);
	ratio[A] = scd_calib_add(wa, n++, 1.5);
	samples[A] = n + 1;
	ratio[S] = scd_calib_add(ws, 0, 1.0);
	ratio[S] = scd_calib_add(ws, 1, 1.4);
	samples[S] = 3;
	CHECK_EQ_INT(scd_bufctx_pick(pred, ratio, samples, A, 1), A);
}
