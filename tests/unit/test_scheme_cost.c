/*
 * test_scheme_cost.c: the registry (scheme/registry.h) and the schemes' alpha-beta costs,
 * each scheme's formula against cases worked by hand, and, for every scheme in the
 * registry, that its descriptor is complete, that its cost reads no profile input it does
 * not declare, and that the cost in context makes the choices the scheme really runs with.
 * Common case: P = 4, numel U = 10^6, d = 0.01 (k = 10^4), alpha = 10 us, beta = 1 ns/B.
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "scheme/scheme.h"
#include "scheme/scheme_internal.h"

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

UNIT_TEST(scheme_cost_formulas_by_hand)
{
	scd_cost_in_t in = base();
	/* dense ring: 6 rounds, 2 * 3/4 * 4e6 = 6e6 bytes, 6e-5 + 6e-3 s */
	scd_cost_t c = scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 6e6, 1e-6);
	CHECK_NEAR(c.seconds, 6.06e-3, 1e-12);
	CHECK_TRUE(c.lossless);
	/* AGsparse COO: 1 round (one exchange), 3 * 8 * 1e4 = 240000 bytes */
	c = scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in);
	CHECK_NEAR(c.rounds, 1, 0);
	CHECK_NEAR(c.bytes, 240000, 1e-6);
	/* HC with a measured curve gamma(1) = 1, gamma(2) = 1.5: 8e4 * 2.5 = 2e5 bytes */
	double curve[5] = {0, 1, 1.5, 1.8, 2};
	in.gamma_of_m = curve;
	c = scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in);
	CHECK_NEAR(c.rounds, 2, 0);
	CHECK_NEAR(c.bytes, 2e5, 1e-6);
	/* HC, P = 5 (one folded rank, P' = 4) with gamma(1..5) = 1, 1.5, 1.8, 2, 2.2: rank 0
	 * sends its aggregate of ranks {0, 4} (gamma(2) k = 15000 non-zeros, 120000 B), then
	 * of {0, 1, 4} (gamma(3) k = 18000, 144000 B), then hands back gamma(5) k = 22000
	 * (176000 B): 440000 B in 2 + 2 rounds */
	double curve5[6] = {0, 1, 1.5, 1.8, 2, 2.2};
	in.P = 5;
	in.gamma_of_m = curve5;
	c = scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in);
	CHECK_NEAR(c.rounds, 4, 0);
	CHECK_NEAR(c.bytes, 440000, 1e-6);
	in.P = 4;
	in.gamma_of_m = NULL;
	/* BP COO: push 3 * 8 * 2500 (a rank's own non-zeros, 3/4 of them) + pull 3 * 8 *
	 * 5000 imb(2k) (the busiest server's partition of the union); 2 rounds */
	c = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	double iq = 1 + sqrt(2 * 4 * log(4.0) / 2e4);
	CHECK_NEAR(c.rounds, 2, 0);
	CHECK_NEAR(c.bytes, 60000 + 120000 * iq, 1e-6);
	/* ... and with imbalance 1 it is ZEN eq. (1) x b: 1.8e-4 s x 1e9 B/s = 180000 B */
	CHECK_NEAR(60000 + 120000, scd_cost_zen_eq1(4, 4e6, 0.01, 2, 1e9) * 1e9, 1e-6);
	/* BP hash-bitmap pull: 3 * (250000 / 8 + 4 * 5000 imb(2k)) */
	in.format = SCD_FMT_HASH_BITMAP;
	c = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	CHECK_NEAR(c.bytes, 60000 + 93750 + 60000 * iq, 1e-6);
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
	/* B-SAG with d = 3: rounds 2 * ceil(log2 3) + 2 = 6; SRS and the final all-gather
	 * 4 * 2e4 * (16 - 6)/8, B-SAG 8 (d - 1) h: with nothing measured h = L = dk/P = 3750
	 * (its upper bound), measured h / L = 1/3 is h = k/P (eq. 8's lower bound) */
	in.teams = 3;
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.rounds, 6, 0);
	CHECK_NEAR(c.bytes, 4 * 2e4 * 10 / 8 + 8 * 2 * 3750, 1e-6);
	in.bsag_teams = 3;
	in.bsag_hl = 1.0 / 3;
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.bytes, 4 * 2e4 * 12 / 8, 1e-6);
	in.bsag_teams = 6; /* measured at another d: not this d's price */
	c = scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
	CHECK_NEAR(c.bytes, 4 * 2e4 * 10 / 8 + 8 * 2 * 3750, 1e-6);
	in = base();
	/* OmniReduce, B = 1 (blocks are elements): push 3 * 250000 * 0.01 * 8 = 60000, pull at
	 * density 0.02: 120000, which skew 3 (the busiest server's range) triples; 2 rounds */
	in.block = 1;
	in.skew = 3;
	c = scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in);
	CHECK_NEAR(c.rounds, 2, 0);
	CHECK_NEAR(c.bytes, 60000 + 3 * 120000, 1e-6);
	/* S2: 1 row x 20000 cols + 1e6 / 256 bitmap floats (3907), ring: 1.5 * 4 * 23907 */
	in = base();
	c = scd_cost_scheme(SCD_SCHEME_S2_SKETCH, &in);
	CHECK_NEAR(c.bytes, 1.5 * 4 * (20000 + 3907), 1e-6);
	/* ExDyna, skew 1, k = 1e4 selected per rank: its indices to the 3 others,
	 * 3 * 1e4 * 4 = 120000 bytes in 1 round, then the ring sum of the K = 4e4 values,
	 * 2 * 3/4 * 4 * 4e4 = 240000 bytes in 6 rounds. Skew 3 counts as ExDyna's own bound on
	 * the imbalance, 1.05, which scales the index gather. */
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 360000, 1e-6);
	CHECK_NEAR(c.rounds, 7, 0);
	in.skew = 3;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 120000 * 1.05 + 240000, 1e-6);
	/* a measured imbalance replaces the assumption: the heaviest rank's selection; over 2
	 * the indices ride a ring too, 2 * 240000 bytes in 12 rounds */
	in.imbalance = 1.5;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 120000 * 1.5 + 240000, 1e-6);
	in.imbalance = 3.5;
	c = scd_cost_scheme(SCD_SCHEME_EXDYNA, &in);
	CHECK_NEAR(c.bytes, 480000, 1e-6);
	CHECK_NEAR(c.rounds, 12, 0);
	/* one rank: nothing moves, whatever the scheme */
	in.P = 1;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		c = scd_cost_scheme((scd_scheme_t)s, &in);
		CHECK_TRUE(c.rounds == 0 && c.bytes == 0 && c.seconds == 0);
		CHECK_EQ_INT(c.lossless, scd_scheme_lossless((scd_scheme_t)s));
	}
}

/* The choice follows the data: at density 1 the dense ring when bandwidth dominates (it
 * moves the fewest bytes) and OmniReduce's two direct rounds when latency does (the same
 * bytes but for its 4-byte block ids: at alpha 10 us its 4 rounds fewer than the ring's 6
 * save 40 us, its 3 * 976.5625 * 2 block ids of 4 bytes cost 23 us), sparse schemes at low
 * density, HC over BP when the latency term dominates; ties resolve identically. */
UNIT_TEST(scheme_cost_choice_follows_the_data)
{
	scd_cost_in_t in = base();
	in.density = 1;
	in.gamma_n = 1;
	CHECK_EQ_INT(scd_cost_best(&in, 1, NULL), SCD_SCHEME_OMNIREDUCE);
	in.alpha_s = 1e-6;
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
	/* random inputs: best is never beaten by any scheme of the registry */
	for (int rep = 0; rep < 200; rep++) {
		scd_cost_in_t r = {.P = 2 + (uint32_t)unit_rng_below(63),
				   .numel = 1000 + unit_rng_below(100000000),
				   .density = exp(log(1e-5) * unit_rng_double()),
				   .skew = 1 + 5 * unit_rng_double(),
				   .alpha_s = 1e-6 * (1 + unit_rng_below(100)),
				   .beta_s_per_byte = 1e-10 * (1 + unit_rng_below(100)),
				   .format = (scd_format_t)(1 + unit_rng_below(3))};
		r.gamma_n = 1 + (r.P - 1) * unit_rng_double();
		int lossless_only = (int)unit_rng_below(2);
		scd_cost_t bc;
		scd_scheme_t b = scd_cost_best(&r, lossless_only, &bc);
		CHECK_TRUE(!lossless_only || scd_scheme_lossless(b));
		for (int j = 0; j < SCD_SCHEME_COUNT; j++) {
			scd_cost_t c = scd_cost_scheme((scd_scheme_t)j, &r);
			CHECK_MSG(c.bytes >= 0 && c.rounds >= 0 && isfinite(c.seconds),
				  "%s: %g rounds, %g bytes", scd_scheme_name(j), c.rounds,
				  c.bytes);
			if (!lossless_only || scd_scheme_lossless(j))
				CHECK_TRUE(c.seconds >= bc.seconds);
		}
	}
}

/* Every descriptor is complete, names are unique, ids parse back; the dense ring, which
 * the engine falls back to, is lossless and open to every choice. */
UNIT_TEST(scheme_registry_descriptors)
{
	CHECK_EQ_INT(SCD_SCHEME_DENSE_RING, 0);
	CHECK_TRUE(scd_schemes[SCD_SCHEME_DENSE_RING]->lossless &&
		   scd_schemes[SCD_SCHEME_DENSE_RING]->pick == SCD_PICK_AUTO);
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		const scd_scheme_desc_t *d = scd_scheme_desc((scd_scheme_t)s);
		CHECK_MSG(d && d == scd_schemes[s] && d->name && *d->name && d->run && d->model,
			  "scheme %d: incomplete descriptor", s);
		CHECK_MSG(strlen(d->name) < 32, "%s: name too long for the statistics",
			  d->name);
		CHECK_TRUE(d->pick >= SCD_PICK_AUTO && d->pick <= SCD_PICK_PINNED);
		CHECK_TRUE((d->uses & ~(SCD_COST_DENSITY | SCD_COST_GAMMA | SCD_COST_SKEW |
					SCD_COST_IMBALANCE)) == 0);
		CHECK_TRUE(!(d->lossless && d->sketched));
		scd_scheme_t p;
		CHECK_EQ_INT(scd_scheme_parse(d->name, &p), 0);
		CHECK_EQ_INT(p, s);
		CHECK_TRUE(!strcmp(scd_scheme_name((scd_scheme_t)s), d->name));
		CHECK_EQ_INT(scd_scheme_lossless((scd_scheme_t)s), d->lossless);
		/* a sparsifier's default scheme is the first that names it */
		if (d->sparsifier != SC_SPARSIFY_NONE)
			CHECK_TRUE(
			    scd_scheme_of_sparsifier(d->sparsifier) <= s &&
			    scd_schemes[scd_scheme_of_sparsifier(d->sparsifier)]->sparsifier ==
				d->sparsifier);
		for (int t = 0; t < s; t++)
			CHECK_MSG(strcmp(scd_schemes[t]->name, d->name) != 0, "%s twice",
				  d->name);
	}
	CHECK_TRUE(scd_scheme_desc(SCD_SCHEME_COUNT) == NULL);
	CHECK_TRUE(!strcmp(scd_scheme_name(SCD_SCHEME_COUNT), "unknown"));
	CHECK_TRUE(!scd_scheme_lossless(SCD_SCHEME_COUNT));
	CHECK_EQ_INT(scd_scheme_of_sparsifier(SC_SPARSIFY_NONE), -1);
	CHECK_EQ_INT(scd_scheme_of_sparsifier(SC_SPARSIFY_TOPK), -1);
	CHECK_EQ_INT(scd_scheme_of_sparsifier(SC_SPARSIFY_EXDYNA), SCD_SCHEME_EXDYNA);
}

/* ---- costs in context ------------------------------------------------------------------ */

static const scd_transport_ops_t no_ops = {.name = "none"};

static scd_scheme_ctx_t *make_ctx(const scd_scheme_cfg_t *cfg, int P, scd_transport_t *t)
{
	*t = (scd_transport_t){.ops = &no_ops, .rank = 0, .size = P};
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(cfg, t, NULL, &ctx), SC_OK);
	return ctx;
}

static scd_scheme_profile_t random_profile(int P)
{
	scd_scheme_profile_t pf = {.density = exp(log(1e-5) * unit_rng_double()),
				   .gamma_n = 1 + (P - 1) * unit_rng_double(),
				   .skew = 1 + 5 * unit_rng_double(),
				   .steps = 3};
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		pf.imbalance[s] = unit_rng_below(2) ? 0 : 1 + 2 * unit_rng_double();
	pf.bsag_teams = unit_rng_below(2) ? 0 : 1 + (uint32_t)unit_rng_below((uint64_t)P);
	pf.bsag_hl = unit_rng_double();
	return pf;
}

static int same_cost(scd_cost_t a, scd_cost_t b)
{
	return a.rounds == b.rounds && a.bytes == b.bytes && a.seconds == b.seconds &&
	       a.lossless == b.lossless;
}

/* A scheme's cost changes with no profile input it does not declare in .uses (and the
 * imbalance it reads is its own), in context and bare. */
UNIT_TEST(scheme_cost_reads_only_declared_inputs)
{
	for (int rep = 0; rep < 100; rep++) {
		int P = 2 + (int)unit_rng_below(15);
		scd_scheme_cfg_t cfg =
		    scd_scheme_cfg_default(1000 + unit_rng_below(10000000), unit_rng());
		if (unit_rng_below(2))
			cfg.density = 1e-3;
		scd_transport_t t;
		scd_scheme_ctx_t *ctx = make_ctx(&cfg, P, &t);
		double alpha = 1e-6 * (1 + unit_rng_below(100)),
		       beta = 1e-10 * (1 + unit_rng_below(100));
		scd_scheme_profile_t pf = random_profile(P);
		for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
			const scd_scheme_desc_t *d = scd_schemes[s];
			scd_cost_t c0 = scd_scheme_cost(ctx, (scd_scheme_t)s, &pf, alpha, beta);
			CHECK_MSG(isfinite(c0.seconds) && c0.seconds > 0, "%s: %g s", d->name,
				  c0.seconds);
			scd_scheme_profile_t q = pf;
			if (!(d->uses & SCD_COST_DENSITY))
				q.density = exp(log(1e-5) * unit_rng_double());
			if (!(d->uses & SCD_COST_GAMMA))
				q.gamma_n = 1 + (P - 1) * unit_rng_double();
			if (!(d->uses & SCD_COST_SKEW))
				q.skew = 1 + 5 * unit_rng_double();
			for (int o = 0; o < SCD_SCHEME_COUNT; o++)
				if (o != s || !(d->uses & SCD_COST_IMBALANCE))
					q.imbalance[o] = 1 + 3 * unit_rng_double();
			scd_cost_t c1 = scd_scheme_cost(ctx, (scd_scheme_t)s, &q, alpha, beta);
			CHECK_MSG(same_cost(c0, c1), "%s: its cost reads an undeclared input",
				  d->name);
			/* bare */
			scd_cost_in_t in = scd_scheme_cost_in(ctx, &pf, alpha, beta);
			in.imbalance = pf.imbalance[s];
			scd_cost_in_t jn = in;
			if (!(d->uses & SCD_COST_DENSITY))
				jn.density = exp(log(1e-5) * unit_rng_double());
			if (!(d->uses & SCD_COST_GAMMA))
				jn.gamma_n = 1 + (P - 1) * unit_rng_double();
			if (!(d->uses & SCD_COST_SKEW))
				jn.skew = 1 + 5 * unit_rng_double();
			if (!(d->uses & SCD_COST_IMBALANCE))
				jn.imbalance = 1 + 3 * unit_rng_double();
			CHECK_MSG(same_cost(scd_cost_scheme((scd_scheme_t)s, &in),
					    scd_cost_scheme((scd_scheme_t)s, &jn)),
				  "%s: its model reads an undeclared input", d->name);
		}
		scd_scheme_ctx_destroy(ctx);
	}
}

/* In context, each scheme is costed as it runs: AGsparse and HC with the cheaper of COO
 * and bitmap, BP with its hash-bitmap pull, OmniReduce with cfg's block, S2 with cfg's
 * rows and block and cols_factor x the union columns, SparDL with its best team count at
 * cfg's density; schemes without choices of their own (no .cost) as the bare model; plus
 * the metadata round's alpha. */
/* HC as it runs: each message (its doubling steps' aggregates, then the hand-back when P
 * is not a power of two) in the cheaper of COO and bitmap. */
static scd_cost_t hc_each_cheaper(const scd_cost_in_t *x)
{
	double U = (double)x->numel, k = scd_cost_nnz(x), bytes = 0, rounds = 0;
	uint32_t Pp = 1;
	while (2 * Pp <= x->P)
		Pp *= 2;
	uint32_t e = x->P - Pp;
	for (uint32_t g = 1; g <= Pp; g *= 2) {
		if (g == Pp && !e)
			break;
		double n = k * scd_cost_gamma(x, g == Pp ? x->P : g + (g < e ? g : e));
		n = n < U ? n : U;
		bytes += 8 * n < U / 8 + 4 * n ? 8 * n : U / 8 + 4 * n;
		rounds += g < Pp ? 1 : 2;
	}
	scd_cost_t c = scd_cost_make(x, rounds, bytes);
	/* and its local work: the final aggregate scattered into the dense result */
	double n = k * scd_cost_gamma(x, x->P);
	c.work_s =
	    (n < U ? n : U) * x->scatter_s_per_nnz * (x->cpu_share > 1 ? x->cpu_share : 1);
	c.seconds += c.work_s;
	c.lossless = 1;
	return c;
}

UNIT_TEST(scheme_cost_in_context_matches_the_run)
{
	for (int rep = 0; rep < 100; rep++) {
		int P = 2 + (int)unit_rng_below(15);
		scd_scheme_cfg_t cfg =
		    scd_scheme_cfg_default(1000 + unit_rng_below(10000000), unit_rng());
		cfg.omni_block = 1 + (uint32_t)unit_rng_below(1024);
		cfg.sketch_block = 1 + (uint32_t)unit_rng_below(1024);
		cfg.sketch_rows = 1 + (uint32_t)unit_rng_below(3);
		cfg.sketch_cols_factor = 0.5 + 3 * unit_rng_double();
		cfg.density = unit_rng_below(2) ? 0 : 1e-3;
		cfg.spardl_teams = unit_rng_below(2) ? 0 : 1 + (uint32_t)unit_rng_below(P);
		cfg.scatter_s_per_nnz = unit_rng_below(2) ? 0 : 1e-8 * unit_rng_double();
		cfg.sum_s_per_nnz = unit_rng_below(2) ? 0 : 1e-8 * unit_rng_double();
		cfg.dense_sum_s_per_elem = unit_rng_below(2) ? 0 : 1e-9 * unit_rng_double();
		cfg.cpu_share = unit_rng_below(2) ? 1 : 4 * unit_rng_double();
		scd_transport_t t;
		scd_scheme_ctx_t *ctx = make_ctx(&cfg, P, &t);
		double alpha = 1e-6 * (1 + unit_rng_below(100)),
		       beta = 1e-10 * (1 + unit_rng_below(100));
		scd_scheme_profile_t pf = random_profile(P);
		scd_cost_in_t in = scd_scheme_cost_in(ctx, &pf, alpha, beta);
		CHECK_TRUE(in.scatter_s_per_nnz == cfg.scatter_s_per_nnz &&
			   in.sum_s_per_nnz == cfg.sum_s_per_nnz &&
			   in.dense_sum_s_per_elem == cfg.dense_sum_s_per_elem &&
			   in.cpu_share == cfg.cpu_share);
		for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
			scd_cost_in_t x = in;
			x.imbalance =
			    scd_schemes[s]->uses & SCD_COST_IMBALANCE ? pf.imbalance[s] : 0;
			scd_cost_t want;
			if (s == SCD_SCHEME_HIER_CENTRAL) {
				want = hc_each_cheaper(&x);
			} else if (s == SCD_SCHEME_AGSPARSE) {
				want = scd_cost_scheme((scd_scheme_t)s, &x);
				x.format = SCD_FMT_BITMAP;
				scd_cost_t b = scd_cost_scheme((scd_scheme_t)s, &x);
				if (b.seconds < want.seconds)
					want = b;
			} else if (s == SCD_SCHEME_BALANCED_PAR) {
				x.format = SCD_FMT_HASH_BITMAP;
				want = scd_cost_scheme((scd_scheme_t)s, &x);
			} else if (s == SCD_SCHEME_OMNIREDUCE) {
				x.block = cfg.omni_block;
				want = scd_cost_scheme((scd_scheme_t)s, &x);
			} else if (s == SCD_SCHEME_S2_SKETCH) {
				x.block = cfg.sketch_block;
				x.sketch_rows = cfg.sketch_rows;
				double cols = ceil(cfg.sketch_cols_factor * x.gamma_n *
						   x.density * (double)x.numel);
				if (cols > (double)x.numel)
					cols = (double)x.numel;
				x.sketch_cols = cols < 1 ? 1 : (uint32_t)cols;
				want = scd_cost_scheme((scd_scheme_t)s, &x);
			} else if (s == SCD_SCHEME_SPARDL) {
				if (cfg.density > 0)
					x.density = cfg.density;
				/* cfg's largest divisor, else d = 1: nothing measured */
				want = (scd_cost_t){.seconds = INFINITY};
				for (uint32_t d = 1; d <= (uint32_t)P; d++) {
					if (P % d)
						continue;
					x.teams = d;
					scd_cost_t k = scd_cost_scheme((scd_scheme_t)s, &x);
					if (cfg.spardl_teams ? d <= cfg.spardl_teams : d == 1)
						want = k;
				}
			} else if (!scd_schemes[s]->cost) {
				want = scd_cost_scheme((scd_scheme_t)s, &x);
			} else {
				continue; /* a scheme with choices of its own not listed here */
			}
			want.rounds += 1;
			want.seconds += alpha;
			scd_cost_t got =
			    scd_scheme_cost(ctx, (scd_scheme_t)s, &pf, alpha, beta);
			CHECK_MSG(same_cost(got, want),
				  "%s P %d: %g s, %g B in context, expected %g s, %g B",
				  scd_scheme_name(s), P, got.seconds, got.bytes, want.seconds,
				  want.bytes);
		}
		scd_scheme_ctx_destroy(ctx);
	}
}

/* What a report teaches the profile follows the descriptor: a sketched scheme's steps
 * leave gamma and skew alone; a scheme's imbalance is folded from its own steps only, and
 * only when its cost reads it. */
UNIT_TEST(scheme_profile_follows_descriptors)
{
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		const scd_scheme_desc_t *d = scd_schemes[s];
		int imb = (d->uses & SCD_COST_IMBALANCE) != 0;
		scd_scheme_profile_t pf;
		scd_scheme_profile_init(&pf, 0.01);
		scd_scheme_report_t r = {.scheme = (scd_scheme_t)s,
					 .density = 0.02,
					 .gamma = 3,
					 .skew = 2,
					 .imbalance = 1.5};
		scd_scheme_profile_update(&pf, &r);
		CHECK_NEAR(pf.density, 0.02, 0);
		CHECK_NEAR(pf.gamma_n, d->sketched ? 0 : 3, 0);
		CHECK_NEAR(pf.skew, d->sketched ? 1 : 2, 0);
		r.imbalance = 2.5;
		scd_scheme_profile_update(&pf, &r);
		for (int o = 0; o < SCD_SCHEME_COUNT; o++)
			CHECK_MSG(pf.imbalance[o] == (o == s && imb ? 2.0 : 0),
				  "%s: imbalance of %s %g", d->name, scd_scheme_name(o),
				  pf.imbalance[o]);
		CHECK_EQ_INT(pf.steps, 2);
	}
}

/* ---- SparDL's team count: d = 1 until another d is measured faster ---------------------- */

/* Runs the team calibration for steps steps on recorded times (time_ms[d], 0: d never
 * measured here) and h / L (hl[d]); returns the d of each step in d_p and how often the
 * team count changed. */
static int spardl_teams_run(const scd_cost_in_t *in, const double *time_ms, const double *hl,
			    int steps, uint32_t *d_p)
{
	scd_spardl_state_t s = {0};
	int changes = 0;
	for (int i = 0; i < steps; i++) {
		uint32_t d = scd_spardl_pick_teams(&s, in);
		d_p[i] = d;
		changes += i > 0 && d != d_p[i - 1];
		s.prev_d = d; /* the run, then the next run's metadata round folds it */
		scd_spardl_fold(&s, time_ms[d] * 1e-3, hl[d]);
	}
	return changes;
}

UNIT_TEST(scheme_spardl_teams_move_only_on_measured_time)
{
	/* P = 6, latency-bound (alpha 1 ms, 1000 values per rank): the model favours d = 6
	 * (3 rounds against d = 1's 6), priced at h = L since nothing is measured there */
	scd_cost_in_t in = {.P = 6,
			    .numel = 100000,
			    .density = 0.01,
			    .gamma_n = 6,
			    .skew = 1,
			    .alpha_s = 1e-3,
			    .beta_s_per_byte = 1e-10,
			    .teams = 1};
	enum { N = 200 };
	uint32_t d[N];
	double hl[7] = {0, 0, 0, 0.5, 0, 0, 0.4};
	/* d = 6 measured 2x slower than d = 1: tried once, then back to 1 for good */
	double slow6[7] = {0, 6, 7, 5.5, 0, 0, 12};
	int ch = spardl_teams_run(&in, slow6, hl, N, d);
	CHECK_MSG(d[0] == 1 && d[1] == 1, "first runs at d = %u, %u: the paper's d = 1", d[0],
		  d[1]);
	CHECK_MSG(d[N - 1] == 1, "settled at d = %u, measured slower than d = 1", d[N - 1]);
	CHECK_MSG(ch <= 4, "team count changed %d times in %d steps", ch, N);
	for (int i = 2; i < N; i++) /* a try runs twice (the first run is not counted) */
		if (d[i] != d[i - 1] && d[i - 1] != 1)
			CHECK_MSG(d[i - 2] == d[i - 1],
				  "step %d: left d = %u after one run of it", i, d[i - 1]);
	/* d = 6 measured 2x faster: kept */
	double fast6[7] = {0, 6, 7, 5.5, 0, 0, 3};
	ch = spardl_teams_run(&in, fast6, hl, N, d);
	CHECK_MSG(d[N - 1] == 6, "settled at d = %u, d = 6 measured 2x faster", d[N - 1]);
	CHECK_MSG(ch <= 2, "team count changed %d times in %d steps", ch, N);
	/* d = 6 measured only 5% faster: not worth a change (hysteresis) */
	double near6[7] = {0, 6, 7, 5.5, 0, 0, 5.7};
	ch = spardl_teams_run(&in, near6, hl, N, d);
	CHECK_MSG(d[N - 1] == 1, "settled at d = %u on a 5%% gain", d[N - 1]);
	/* bandwidth-bound (beta 1 ns/B, 10^5 values per rank): no d is predicted faster than
	 * d = 1 at h = L, so nothing is tried */
	in.numel = 10000000;
	in.alpha_s = 1e-5;
	in.beta_s_per_byte = 1e-9;
	double any[7] = {0, 6, 1, 1, 0, 0, 1};
	ch = spardl_teams_run(&in, any, hl, N, d);
	CHECK_MSG(ch == 0 && d[N - 1] == 1, "bandwidth-bound: %d changes, d = %u", ch,
		  d[N - 1]);
}

/*
 * Hierarchical Centralization's compute term: ZEN's formula (eq. 2 with its rounds) is
 * the cost when no scatter rate is given, and the named term adds exactly the final
 * aggregate's scatter, min(gamma(P) k, U) non-zeros at the rate, times the nodes sharing a
 * core (never less than one core's time), with rounds and bytes untouched. In context the
 * daemon's default rate makes the choice that a 4-node zipf run measured (64M elements at
 * 1%, gamma 2.87, 1 Gbit/s): AGsparse took 127.7 ms, HC 158.6 ms, of which 44 ms of
 * scatter the network formula did not hold, so it picked HC.
 */
UNIT_TEST(scheme_cost_hc_local_work)
{
	scd_cost_in_t in = base(); /* k = 10^4, gamma 2: 2 x 10^4 in the final aggregate */
	scd_cost_t paper = scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in);
	CHECK_NEAR(paper.work_s, 0, 0);
	CHECK_NEAR(paper.seconds, paper.rounds * in.alpha_s + paper.bytes * in.beta_s_per_byte,
		   1e-15);
	in.scatter_s_per_nnz = 20e-9;
	scd_cost_t c = scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in);
	CHECK_NEAR(c.work_s, 2e4 * 20e-9, 1e-15);
	CHECK_NEAR(c.seconds, paper.seconds + 4e-4, 1e-15);
	CHECK_TRUE(c.rounds == paper.rounds && c.bytes == paper.bytes);
	in.cpu_share = 2; /* 4 nodes on 2 cores */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in).work_s, 8e-4, 1e-15);
	in.cpu_share = 0.5; /* more cores than nodes: still one core's work */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in).work_s, 4e-4, 1e-15);
	in.cpu_share = 1;
	in.density = 0.9; /* the union capped at U */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in).work_s, 1e6 * 20e-9, 1e-15);
	/* no scheme but the three of the allgather and partition families, the dense ring
	 * and OmniReduce has a compute term (scheme_cost_ag_bp_local_work and
	 * scheme_cost_ring_omni_sums below) */
	in.sum_s_per_nnz = 9e-9;
	in.dense_sum_s_per_elem = 0.7e-9;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		if (s != SCD_SCHEME_HIER_CENTRAL && s != SCD_SCHEME_AGSPARSE &&
		    s != SCD_SCHEME_BALANCED_PAR && s != SCD_SCHEME_DENSE_RING &&
		    s != SCD_SCHEME_OMNIREDUCE)
			CHECK_NEAR(scd_cost_scheme((scd_scheme_t)s, &in).work_s, 0, 0);
	in.sum_s_per_nnz = 0;
	in.dense_sum_s_per_elem = 0;

	/* the daemon's choice in the measured case, with and without the term */
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(1u << 26, 1);
	CHECK_NEAR(cfg.scatter_s_per_nnz, SCD_COST_SCATTER_S_PER_NNZ, 0);
	cfg.sum_s_per_nnz = 0; /* HC's term alone here; all of them below */
	scd_transport_t t;
	scd_scheme_profile_t pf = {.density = 0.01, .gamma_n = 2.87, .skew = 3.34, .steps = 3};
	double alpha = 50e-6, beta = 1 / (1e9 / 8 * 0.952);
	scd_scheme_ctx_t *ctx = make_ctx(&cfg, 4, &t);
	scd_cost_t hc = scd_scheme_cost(ctx, SCD_SCHEME_HIER_CENTRAL, &pf, alpha, beta),
		   ag = scd_scheme_cost(ctx, SCD_SCHEME_AGSPARSE, &pf, alpha, beta);
	CHECK_MSG(hc.work_s > 0.03 && hc.work_s < 0.05, "HC's scatter %g s", hc.work_s);
	CHECK_MSG(hc.seconds > ag.seconds, "HC %g s, AGsparse %g s", hc.seconds, ag.seconds);
	scd_scheme_t with = scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, NULL);
	CHECK_MSG(with != SCD_SCHEME_HIER_CENTRAL, "chose %s", scd_scheme_name(with));
	scd_scheme_ctx_destroy(ctx);
	cfg.scatter_s_per_nnz = 0; /* the network formulas alone: HC, as measured */
	ctx = make_ctx(&cfg, 4, &t);
	CHECK_EQ_INT(scd_scheme_choose(ctx, &pf, alpha, beta, 1, -1, NULL),
		     SCD_SCHEME_HIER_CENTRAL);
	scd_scheme_ctx_destroy(ctx);
}

/*
 * AGsparse's and Balanced Parallelism's compute terms (model/cost.h): with both rates at 0
 * each cost is the network formula alone; with them, AGsparse adds its P lists of k
 * non-zeros at the sum rate, and Balanced Parallelism its busiest server's pushes (k times
 * the hash imbalance) at the sum rate plus the union's min(gamma_n k, U) non-zeros decoded
 * at the scatter rate; times the nodes per core, rounds and bytes untouched.
 */
UNIT_TEST(scheme_cost_ag_bp_local_work)
{
	scd_cost_in_t in = base(); /* P 4, k = 10^4, gamma 2 */
	scd_cost_t ag0 = scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in),
		   bp0 = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	CHECK_NEAR(ag0.work_s, 0, 0);
	CHECK_NEAR(bp0.work_s, 0, 0);
	CHECK_NEAR(ag0.seconds, ag0.rounds * in.alpha_s + ag0.bytes * in.beta_s_per_byte,
		   1e-15);
	CHECK_NEAR(bp0.seconds, bp0.rounds * in.alpha_s + bp0.bytes * in.beta_s_per_byte,
		   1e-15);
	in.sum_s_per_nnz = 9e-9;
	in.scatter_s_per_nnz = 20e-9;
	double imb = 1 + sqrt(2 * 4 * log(4.0) / 1e4); /* ZEN Theorem 2 on k = 10^4 */
	double ag_w = 4 * 1e4 * 9e-9, bp_w = 1e4 * imb * 9e-9 + 2e4 * 20e-9;
	scd_cost_t ag = scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in),
		   bp = scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in);
	CHECK_NEAR(ag.work_s, ag_w, 1e-15);
	CHECK_NEAR(bp.work_s, bp_w, 1e-15);
	CHECK_NEAR(scd_agsparse_work_s(&in), ag_w, 1e-15);
	CHECK_NEAR(scd_balanced_par_work_s(&in), bp_w, 1e-15);
	CHECK_NEAR(ag.seconds, ag0.seconds + ag_w, 1e-15);
	CHECK_NEAR(bp.seconds, bp0.seconds + bp_w, 1e-15);
	CHECK_TRUE(ag.rounds == ag0.rounds && ag.bytes == ag0.bytes);
	CHECK_TRUE(bp.rounds == bp0.rounds && bp.bytes == bp0.bytes);
	/* each rate alone prices its own part only */
	in.scatter_s_per_nnz = 0;
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in).work_s, ag_w, 1e-15);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in).work_s, 1e4 * imb * 9e-9,
		   1e-15);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in).work_s, 0, 0);
	in.scatter_s_per_nnz = 20e-9;
	in.cpu_share = 2; /* 4 nodes on 2 cores */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in).work_s, 2 * ag_w, 1e-15);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in).work_s, 2 * bp_w, 1e-15);
	in.cpu_share = 1;
	in.density = 0.9; /* k 9 x 10^5: the union capped at U */
	imb = 1 + sqrt(2 * 4 * log(4.0) / 9e5);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in).work_s,
		   9e5 * imb * 9e-9 + 1e6 * 20e-9, 1e-12);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in).work_s, 4 * 9e5 * 9e-9, 1e-12);
}

/*
 * The dense ring's and OmniReduce's compute terms (model/cost.h): with the dense sum rate
 * at 0 each cost is the network formula alone (and the other rates leave it so); with it,
 * the ring adds (P-1)/P U elements at the rate, and OmniReduce its busiest server's sums
 * of the pushed non-zero blocks, (P-1) U/P (1 - (1 - d s)^B) elements, s the skew; times
 * the nodes per core, rounds and bytes untouched.
 */
UNIT_TEST(scheme_cost_ring_omni_sums)
{
	scd_cost_in_t in = base(); /* P 4, U = 10^6, d 0.01, skew 1 */
	in.sum_s_per_nnz = 9e-9;
	in.scatter_s_per_nnz = 20e-9;
	scd_cost_t ring0 = scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in),
		   omni0 = scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in);
	CHECK_NEAR(ring0.work_s, 0, 0);
	CHECK_NEAR(omni0.work_s, 0, 0);
	CHECK_NEAR(ring0.seconds, ring0.rounds * in.alpha_s + ring0.bytes * in.beta_s_per_byte,
		   1e-15);
	CHECK_NEAR(omni0.seconds, omni0.rounds * in.alpha_s + omni0.bytes * in.beta_s_per_byte,
		   1e-15);
	in.dense_sum_s_per_elem = 0.7e-9;
	double ring_w = 3.0 / 4 * 1e6 * 0.7e-9;
	double f = 1 - pow(1 - 0.01, 256); /* blocks of 256 with a non-zero */
	double omni_w = 3 * 1e6 / 4 * f * 0.7e-9;
	scd_cost_t ring = scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in),
		   omni = scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in);
	CHECK_NEAR(ring.work_s, ring_w, 1e-15);
	CHECK_NEAR(omni.work_s, omni_w, 1e-15);
	CHECK_NEAR(scd_dense_ring_work_s(&in), ring_w, 1e-15);
	CHECK_NEAR(scd_omnireduce_work_s(&in), omni_w, 1e-15);
	CHECK_NEAR(ring.seconds, ring0.seconds + ring_w, 1e-15);
	CHECK_NEAR(omni.seconds, omni0.seconds + omni_w, 1e-15);
	CHECK_TRUE(ring.rounds == ring0.rounds && ring.bytes == ring0.bytes);
	CHECK_TRUE(omni.rounds == omni0.rounds && omni.bytes == omni0.bytes);
	/* the dense rate prices nothing of the sparse schemes' terms */
	in.sum_s_per_nnz = in.scatter_s_per_nnz = 0;
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_AGSPARSE, &in).work_s, 0, 0);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_BALANCED_PAR, &in).work_s, 0, 0);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_HIER_CENTRAL, &in).work_s, 0, 0);
	in.cpu_share = 2; /* 4 nodes on 2 cores */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in).work_s, 2 * ring_w, 1e-15);
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in).work_s, 2 * omni_w, 1e-15);
	in.cpu_share = 1;
	in.skew = 3; /* the busiest range: 3% dense */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in).work_s,
		   3 * 1e6 / 4 * (1 - pow(1 - 0.03, 256)) * 0.7e-9, 1e-15);
	in.skew = 200; /* never more than the range */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in).work_s, 3 * 1e6 / 4 * 0.7e-9,
		   1e-15);
	in.skew = 1;
	in.P = 8; /* (P-1)/P */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_DENSE_RING, &in).work_s, 7.0 / 8 * 1e6 * 0.7e-9,
		   1e-15);
	in.density = 1; /* every block: (P-1)/P U, the ring's */
	CHECK_NEAR(scd_cost_scheme(SCD_SCHEME_OMNIREDUCE, &in).work_s, 7.0 / 8 * 1e6 * 0.7e-9,
		   1e-15);
	/* in context: the default rate, and the block size the context sets */
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(1000000, 1);
	CHECK_NEAR(cfg.dense_sum_s_per_elem, SCD_COST_DENSE_SUM_S_PER_ELEM, 0);
	cfg.omni_block = 16;
	scd_transport_t t;
	scd_scheme_ctx_t *ctx = make_ctx(&cfg, 4, &t);
	scd_scheme_profile_t pf = {.density = 0.01, .gamma_n = 2, .skew = 1, .steps = 3};
	scd_cost_t r = scd_scheme_cost(ctx, SCD_SCHEME_DENSE_RING, &pf, 1e-5, 1e-9),
		   o = scd_scheme_cost(ctx, SCD_SCHEME_OMNIREDUCE, &pf, 1e-5, 1e-9);
	CHECK_NEAR(r.work_s, 3.0 / 4 * 1e6 * SCD_COST_DENSE_SUM_S_PER_ELEM, 1e-15);
	CHECK_NEAR(o.work_s,
		   3 * 1e6 / 4 * (1 - pow(1 - 0.01, 16)) * SCD_COST_DENSE_SUM_S_PER_ELEM,
		   1e-15);
	scd_scheme_ctx_destroy(ctx);
}
