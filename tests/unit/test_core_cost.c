/*
 * test_core_cost.c: the cost model (model/cost.h) against cases worked by hand.
 * Common case: P = 4, numel U = 10^6, d = 0.01 (k = 10^4), alpha = 10 us, beta = 1 ns/B.
 */
#include "unit.h"

#include "model/cost.h"

static scd_cost_in_t base(void)
{
	return (scd_cost_in_t){.P = 4,
			       .numel = 1000000,
			       .density = 0.01,
			       .gamma_n = 2,
			       .skew = 1,
			       .alpha_s = 1e-5,
			       .beta_s_per_byte = 1e-9,
			       .format = SCD_FMT_COO};
}

UNIT_TEST(core_cost_zen_equations_by_hand)
{
	/* eq. (1): 3/4 * (2 + 1) * 2 * 4e6 B * 0.01 / 1e9 B/s = 1.8e-4 s */
	CHECK_NEAR(scd_cost_zen_eq1(4, 4e6, 0.01, 2, 1e9), 1.8e-4, 1e-12);
	/* eq. (2): (gamma^1 + gamma^2) * 2 * 4e6 * 0.01 / 1e9 = (1 + 1.5) * 8e-5 = 2e-4 s */
	double g[2] = {1, 1.5};
	CHECK_NEAR(scd_cost_zen_eq2(4, 4e6, 0.01, g, 1e9), 2e-4, 1e-12);
	/* n = 8: three stages */
	double g8[3] = {1, 1.5, 2};
	CHECK_NEAR(scd_cost_zen_eq2(8, 4e6, 0.01, g8, 1e9), 4.5 * 8e-5, 1e-12);
	CHECK_EQ_INT(scd_ceil_log2(1), 0);
	CHECK_EQ_INT(scd_ceil_log2(5), 3);
	CHECK_EQ_INT(scd_ceil_log2(64), 6);
}

UNIT_TEST(core_cost_schemes_by_hand)
{
	scd_cost_in_t in = base();
	/* dense ring: 6 rounds, 2 * 3/4 * 4e6 = 6e6 bytes, 6e-5 + 6e-3 s */
	scd_cost_t c = scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 6e6, 1e-6);
	CHECK_NEAR(c.seconds, 6.06e-3, 1e-12);
	CHECK_TRUE(c.lossless);
	/* AGsparse COO: 2 rounds, 3 * 8 * 1e4 = 240000 bytes */
	c = scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in);
	CHECK_NEAR(c.rounds, 2, 0);
	CHECK_NEAR(c.bytes, 240000, 1e-6);
	/* HC with a measured curve gamma(1) = 1, gamma(2) = 1.5: 8e4 * 2.5 = 2e5 bytes */
	double curve[5] = {0, 1, 1.5, 1.8, 2};
	in.gamma_of_m = curve;
	c = scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in);
	CHECK_NEAR(c.rounds, 2, 0);
	CHECK_NEAR(c.bytes, 2e5, 1e-6);
	in.gamma_of_m = NULL;
	/* power law with gamma_n = 4 over P = 4: gamma(2) = 2 */
	in.gamma_n = 4;
	CHECK_NEAR(scd_cost_gamma(&in, 2), 2, 1e-12);
	CHECK_NEAR(scd_cost_gamma(&in, 1), 1, 0);
	CHECK_NEAR(scd_cost_gamma(&in, 4), 4, 1e-12);
	in.gamma_n = 2;
	/* BP COO: push 3 * 8 * 2500 * imb(k) + pull 3 * 8 * 5000 * imb(2k); 6 rounds */
	c = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	double ip = 1 + sqrt(2 * 4 * log(4.0) / 1e4), iq = 1 + sqrt(2 * 4 * log(4.0) / 2e4);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 60000 * ip + 120000 * iq, 1e-6);
	/* ... and with imbalance 1 it is ZEN eq. (1) x b: 1.8e-4 s x 1e9 B/s = 180000 B */
	CHECK_NEAR(60000 + 120000, scd_cost_zen_eq1(4, 4e6, 0.01, 2, 1e9) * 1e9, 1e-6);
	/* BP hash-bitmap pull: 3 * (250000 / 8 + 4 * 5000) = 153750 */
	in.format = SCD_FMT_HASH_BITMAP;
	c = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	CHECK_NEAR(c.bytes, 60000 * ip + 153750 * iq, 1e-6);
	in.format = SCD_FMT_COO;
	/* SparDL, P = 8, no teams: 6 rounds, 4 * 4 * 1e4 * 7/8 = 140000 bytes */
	in.P = 8;
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 140000, 1e-6);
	CHECK_TRUE(!c.lossless);
	/* R-SAG with d = 2: rounds 2 * 2 + 1 = 5; 4 * 2e4 * ((16 - 4)/8 + 2/8 * 1) = 140000 */
	in.teams = 2;
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.rounds, 5, 0);
	CHECK_NEAR(c.bytes, 140000, 1e-6);
	/* B-SAG with d = 3: rounds 2 * ceil(log2 3) + 2 = 6; 4 * 2e4 * (9 + 16 - 9)/8 */
	in.teams = 3;
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 4 * 2e4 * 16 / 8, 1e-6);
	in = base();
	/* OmniReduce, B = 1 (blocks are elements): push 3 * 250000 * 0.01 * 8 = 60000, pull at
	 * density 0.02: 120000; skew 3 triples both */
	in.block = 1;
	in.skew = 3;
	c = scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in);
	CHECK_NEAR(c.bytes, 3 * 180000, 1e-6);
	/* S2: 1 row x 20000 cols + 1e6 / 256 bitmap floats (3907), ring: 1.5 * 4 * 23907 */
	in = base();
	c = scd_cost_scheme(SCD_SCHEME_S2_SKETCH, &in);
	CHECK_NEAR(c.bytes, 1.5 * 4 * (20000 + 3907), 1e-6);
	/* ExDyna, skew 1, k = 1e4 selected per rank: indices and values to the 3 others,
	 * 3 * 1e4 * 8 = 240000 bytes in 3 rounds. Skew 3 counts as ExDyna's own bound on the
	 * imbalance, 1.05. */
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 240000, 1e-6);
	CHECK_NEAR(c.rounds, 3, 0);
	in.skew = 3;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 240000 * 1.05, 1e-6);
	/* a measured imbalance replaces the assumption: the heaviest rank's selection; over 2
	 * indices and values ride the ring, 1.5 * 8 * 4e4 bytes in 6 rounds */
	in.imbalance = 1.5;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 240000 * 1.5, 1e-6);
	in.imbalance = 3.5;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 480000, 1e-6);
	CHECK_NEAR(c.rounds, 6, 0);
}

/* ZEN Fig. 17a's crossing: a COO pull equals a hash-bitmap pull at density 1/32. */
UNIT_TEST(core_cost_formats_cross_at_one_32nd)
{
	double range = 1 << 20;
	CHECK_NEAR(scd_cost_msg_bytes(SCD_FMT_COO, range / 32, range),
		   scd_cost_msg_bytes(SCD_FMT_HASH_BITMAP, range / 32, range), 1e-9);
	CHECK_TRUE(scd_cost_msg_bytes(SCD_FMT_COO, range / 16, range) >
		   scd_cost_msg_bytes(SCD_FMT_HASH_BITMAP, range / 16, range));
	CHECK_TRUE(scd_cost_msg_bytes(SCD_FMT_COO, range / 64, range) <
		   scd_cost_msg_bytes(SCD_FMT_HASH_BITMAP, range / 64, range));
}

/* The choice follows the data: dense wins at density 1, sparse schemes at low density,
 * HC over BP when the latency term dominates; ties resolve identically. */
UNIT_TEST(core_cost_choice_follows_the_data)
{
	scd_cost_in_t in = base();
	in.density = 1;
	in.gamma_n = 1;
	CHECK_EQ_INT(scd_cost_best(&in, 1, NULL), SCD_SCHEME_DENSE_RING);
	in = base();
	in.density = 1e-3;
	scd_scheme_t s = scd_cost_best(&in, 1, NULL);
	CHECK_MSG(s == SCD_SCHEME_BALANCED_PAR || s == SCD_SCHEME_HIER_CENTRAL ||
		      s == SCD_SCHEME_AGSPARSE,
		  "picked %s", scd_scheme_name(s));
	in.P = 64;
	in.alpha_s = 1e-2; /* latency-bound: few rounds win */
	in.density = 1e-5;
	s = scd_cost_best(&in, 1, NULL);
	CHECK_MSG(s == SCD_SCHEME_AGSPARSE || s == SCD_SCHEME_HIER_CENTRAL, "picked %s",
		  scd_scheme_name(s));
	/* random inputs: best is never beaten by any other scheme */
	for (int rep = 0; rep < 200; rep++) {
		scd_cost_in_t r = {.P = 2 + (uint32_t)unit_rng_below(63),
				   .numel = 1000 + unit_rng_below(100000000),
				   .density = exp(log(1e-5) * unit_rng_double()),
				   .skew = 1 + 5 * unit_rng_double(),
				   .alpha_s = 1e-6 * (1 + unit_rng_below(100)),
				   .beta_s_per_byte = 1e-10 * (1 + unit_rng_below(100)),
				   .format = (scd_format_t)(1 + unit_rng_below(3))};
		r.gamma_n = 1 + (r.P - 1) * unit_rng_double();
		scd_cost_t bc;
		scd_scheme_t b = scd_cost_best(&r, 0, &bc);
		for (int j = 0; j < SCD_SCHEME_COUNT; j++) {
			scd_cost_t c = scd_cost_scheme((scd_scheme_t)j, &r);
			CHECK_TRUE(c.seconds >= bc.seconds);
			CHECK_TRUE(c.bytes >= 0 && c.rounds >= 0);
		}
		(void)b;
	}
}
