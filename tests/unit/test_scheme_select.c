/*
 * test_scheme_select.c: the choice of scheme (scheme/scheme.h) from the cost model: dense
 * data pick the dense ring, sparse data a sparse scheme, lossless_only never returns a
 * lossy scheme, a pin always wins, ExDyna only when pinned; identical reports fold into
 * identical profiles and so into identical choices. No communication: the context only
 * needs the transport's rank and size.
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
			if (k == SCD_SCHEME_EXDYNA || !scd_scheme_lossless(k))
				continue;
			CHECK_TRUE(
			    c.seconds <=
			    scd_scheme_cost(ctx, (scd_scheme_t)k, &pf, alpha, beta).seconds);
		}
		/* lossy allowed: never ExDyna unless pinned; a pin always wins */
		for (double d = 1e-5; d <= 1; d *= 10) {
			pf.density = d;
			CHECK_TRUE(scd_scheme_choose(ctx, &pf, alpha, beta, 0, -1, NULL) !=
				   SCD_SCHEME_EXDYNA);
			CHECK_TRUE(scd_scheme_lossless(
			    scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, NULL)));
			CHECK_EQ_INT(scd_scheme_choose(ctx, &pf, alpha, beta, 1,
						       SCD_SCHEME_EXDYNA, NULL),
				     SCD_SCHEME_EXDYNA);
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
		scd_scheme_report_t r = {.scheme = (scd_scheme_t)(unit_rng_below(8)),
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
