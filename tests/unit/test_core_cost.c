/*
 * test_core_cost.c: the cost model's shared terms (model/cost.h) against cases worked by
 * hand; the schemes' own formulas are tested in test_scheme_cost.c.
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

UNIT_TEST(core_cost_shared_terms_by_hand)
{
	scd_cost_in_t in = base();
	/* k = d U; a density over 1 counts as 1 */
	CHECK_NEAR(scd_cost_nnz(&in), 1e4, 0);
	in.density = 3;
	CHECK_NEAR(scd_cost_nnz(&in), 1e6, 0);
	in = base();
	/* 6 rounds and 6e6 bytes: 6e-5 + 6e-3 s */
	scd_cost_t c = scd_cost_make(&in, 6, 6e6);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 6e6, 0);
	CHECK_NEAR(c.seconds, 6.06e-3, 1e-12);
	/* the densification curve: a measured one as given, else the power law; gamma_n = 4
	 * over P = 4 gives gamma(2) = 2 */
	double curve[5] = {0, 1, 1.5, 1.8, 2};
	in.gamma_of_m = curve;
	CHECK_NEAR(scd_cost_gamma(&in, 2), 1.5, 0);
	CHECK_NEAR(scd_cost_gamma(&in, 3), 1.8, 0);
	in.gamma_of_m = NULL;
	in.gamma_n = 4;
	CHECK_NEAR(scd_cost_gamma(&in, 2), 2, 1e-12);
	CHECK_NEAR(scd_cost_gamma(&in, 1), 1, 0);
	CHECK_NEAR(scd_cost_gamma(&in, 4), 4, 1e-12);
	/* a hash bitmap is per partition: a whole-tensor message takes the bitmap */
	CHECK_EQ_INT(scd_cost_whole_format(SCD_FMT_HASH_BITMAP), SCD_FMT_BITMAP);
	CHECK_EQ_INT(scd_cost_whole_format(SCD_FMT_COO), SCD_FMT_COO);
	/* ZEN Theorem 2's imbalance: 1 + sqrt(2 P ln P / nnz), at most P */
	CHECK_NEAR(scd_cost_hash_imbalance(4, 1e4), 1 + sqrt(2 * 4 * log(4.0) / 1e4), 1e-15);
	CHECK_NEAR(scd_cost_hash_imbalance(4, 1e-3), 4, 0);
	CHECK_NEAR(scd_cost_hash_imbalance(1, 10), 1, 0);
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
