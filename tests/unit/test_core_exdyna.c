/*
 * test_core_exdyna.c: ExDyna (device/exdyna.h) over several simulated ranks: partitions
 * stay disjoint and cover the tensor, every rank reaches bit-identical state from the
 * gathered counts, error feedback conserves, blocks move towards the light partitions, and
 * the actual density tracks the target within [0.9, 1.1] after warm-up on a heavy-tailed,
 * drifting gradient stream.
 */
#include "unit.h"

#include "device/exdyna.h"
#include "device/select.h"

#include <math.h>
#include <string.h>

/* Heavy-tailed samples (Student-t-like: a sum of uniforms over the root of a chi-square
 * of three uniforms), drawn once; each step reads them from a random offset and stride, so
 * a long stream costs one rng call per step, not six per element. */
#define POOL (1u << 20)
static float *pool;

static void pool_fill(void)
{
	pool = malloc(POOL * 4);
	for (uint32_t i = 0; i < POOL; i++) {
		double z = 0, c = 0;
		for (int j = 0; j < 3; j++) {
			double u = unit_rng_double() - 0.5, v = unit_rng_double() * 2 - 1;
			z += u;
			c += v * v;
		}
		pool[i] = (float)(z / sqrt(c / 3 + 1e-3));
	}
}

/* Fills g with a step's gradient: some regions far denser than others (skew). */
static void heavy_fill(float *g, uint64_t n, double drift)
{
	uint64_t start = unit_rng_below(POOL), stride = 1 + 2 * unit_rng_below(POOL / 2 - 1);
	for (uint64_t i = 0; i < n; i++) {
		double region = i < n / 5 ? 4.0 : i < n / 2 ? 1.0 : 0.5;
		g[i] = (float)(pool[(start + i * stride) & (POOL - 1)] * region * drift);
	}
}

/* gauss_fill: the same reading of a pool of light-tailed samples (Irwin-Hall: a sum of
 * twelve uniforms), the regions' scales 2, 1 and 0.5 */
static float *gpool;

static void gpool_fill(void)
{
	gpool = malloc(POOL * 4);
	for (uint32_t i = 0; i < POOL; i++) {
		double z = -6;
		for (int j = 0; j < 12; j++)
			z += unit_rng_double();
		gpool[i] = (float)z;
	}
}

static int gauss_stream;

static void gauss_fill(float *g, uint64_t n)
{
	uint64_t start = unit_rng_below(POOL), stride = 1 + 2 * unit_rng_below(POOL / 2 - 1);
	for (uint64_t i = 0; i < n; i++) {
		double region = i < n / 5 ? 2.0 : i < n / 2 ? 1.0 : 0.5;
		g[i] = (float)(gpool[(start + i * stride) & (POOL - 1)] * region);
	}
}

typedef struct {
	uint32_t P;
	uint64_t n;
	scd_exdyna_t **ex;
	float **res, *grad;
	scd_coo_t out;
	double *props_out;  /* sim_step_props: where the ranks' proposals go */
	uint64_t qualified; /* the last step's: how many passed the ranks' thresholds */
	uint64_t *counts;
} sim_t;

/* variants: the grid, the cap (both 1250) and the symmetric fine step on; else the
 * defaults, Algorithm 5 alone as the paper has it */
static void sim_init_cfg(sim_t *s, uint32_t P, uint64_t n, double density, double init,
			 int variants)
{
	memset(s, 0, sizeof(*s)); /* props_out NULL: sim_step_props sets it */
	s->P = P;
	s->n = n;
	s->ex = calloc(P, sizeof(*s->ex));
	s->res = calloc(P, sizeof(float *));
	s->grad = malloc(n * 4);
	s->out = (scd_coo_t){malloc(n * 4), malloc(n * 4), 0, n};
	s->counts = calloc(P, 8);
	for (uint32_t r = 0; r < P; r++) {
		scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(n, P, r, density);
		cfg.init_threshold = init;
		if (variants) {
			cfg.recal_permille = cfg.cap_permille = 1250;
			cfg.fine_symmetric = 1;
		}
		CHECK_EQ_INT(scd_exdyna_create(&cfg, &s->ex[r]), SC_OK);
		s->res[r] = calloc(n, 4);
	}
}

static void sim_init(sim_t *s, uint32_t P, uint64_t n, double density, double init)
{
	sim_init_cfg(s, P, n, density, init, 1);
}

static void sim_free(sim_t *s)
{
	for (uint32_t r = 0; r < s->P; r++) {
		scd_exdyna_destroy(s->ex[r]);
		free(s->res[r]);
	}
	free(s->ex), free(s->res), free(s->grad), free(s->out.idx), free(s->out.val),
	    free(s->counts);
}

/* Checks the partitions at this iteration: disjoint, covering, one per rank. */
static void check_partitions(const sim_t *s)
{
	uint64_t covered = 0;
	uint8_t *owner = calloc(s->P, 1);
	for (uint32_t r = 0; r < s->P; r++) {
		uint32_t p = scd_exdyna_part_of_rank(s->ex[0], r);
		CHECK_TRUE(p < s->P && !owner[p]);
		owner[p] = 1;
	}
	uint64_t prev_hi = 0;
	for (uint32_t p = 0; p < s->P; p++) {
		uint64_t lo, hi;
		scd_exdyna_part_range(s->ex[0], p, &lo, &hi);
		CHECK_MSG(lo == prev_hi && hi >= lo, "partition %u is [%llu, %llu)", p,
			  (unsigned long long)lo, (unsigned long long)hi);
		covered += hi - lo;
		prev_hi = hi;
	}
	CHECK_EQ_INT(covered, s->n);
	free(owner);
}

static uint64_t sim_step_props(sim_t *s, double drift, double *props_out);

/* One iteration on every rank; returns the total selected. */
static uint64_t sim_step(sim_t *s, double drift, int check)
{
	uint64_t total = 0;
	for (uint32_t r = 0; r < s->P; r++) {
		if (gauss_stream)
			gauss_fill(s->grad, s->n);
		else
			heavy_fill(s->grad, s->n, drift);
		float *before = NULL;
		if (check) {
			before = malloc(s->n * 4);
			for (uint64_t i = 0; i < s->n; i++)
				before[i] = s->grad[i] + s->res[r][i];
		}
		CHECK_EQ_INT(
		    scd_exdyna_select(s->ex[r], s->grad, s->res[r], &s->out, &s->counts[r]),
		    SC_OK);
		if (check) {
			uint64_t lo, hi;
			scd_exdyna_part_range(s->ex[r], scd_exdyna_part_of_rank(s->ex[r], r),
					      &lo, &hi);
			for (uint64_t j = 0; j < s->out.nnz; j++) {
				uint32_t i = s->out.idx[j];
				CHECK_MSG(i >= lo && i < hi,
					  "rank %u selected %u outside [%llu, %llu)", r, i,
					  (unsigned long long)lo, (unsigned long long)hi);
				CHECK_TRUE(s->out.val[j] == before[i]);
				s->res[r][i] +=
				    s->out.val[j]; /* add back to compare everything */
			}
			for (uint64_t i = 0; i < s->n; i++)
				CHECK_TRUE(s->res[r][i] == before[i]);
			for (uint64_t j = 0; j < s->out.nnz; j++)
				s->res[r][s->out.idx[j]] = 0;
			free(before);
		}
		total += s->counts[r];
	}
	/* what the metadata round gathers with the counts while calibrating */
	uint32_t W = scd_exdyna_meta_words(s->ex[0]);
	uint64_t *meta = calloc((size_t)s->P * W, 8);
	for (uint32_t r = 0; r < s->P; r++) {
		CHECK_EQ_INT(scd_exdyna_meta_words(s->ex[r]), W);
		memcpy(meta + (size_t)r * W, scd_exdyna_meta(s->ex[r]), 8 * (size_t)W);
		if (s->props_out)
			s->props_out[r] = scd_exdyna_proposal(s->ex[r]);
	}
	s->qualified = 0;
	for (uint32_t r = 0; r < s->P; r++)
		s->qualified += meta[(size_t)r * W];
	for (uint32_t r = 0; r < s->P; r++)
		CHECK_EQ_INT(scd_exdyna_update(s->ex[r], meta), SC_OK);
	free(meta);
	uint64_t d0 = scd_exdyna_digest(s->ex[0]);
	for (uint32_t r = 1; r < s->P; r++)
		CHECK_MSG(scd_exdyna_digest(s->ex[r]) == d0,
			  "rank %u diverged at iteration %llu", r,
			  (unsigned long long)scd_exdyna_iteration(s->ex[0]));
	return total;
}

/* sim_step, checked, also giving the ranks' proposals (props_out: P entries). */
static uint64_t sim_step_props(sim_t *s, double drift, double *props_out)
{
	s->props_out = props_out;
	uint64_t total = sim_step(s, drift, 1);
	s->props_out = NULL;
	return total;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

UNIT_TEST(core_exdyna_ranks_agree_and_conserve)
{
	uint32_t P = 1 + (uint32_t)unit_rng_below(8);
	uint64_t n = 1 + unit_rng_below(200000);
	sim_t s;
	pool_fill();
	sim_init(&s, P, n, 0.01 + unit_rng_double() * 0.05, 0.5 + unit_rng_double());
	for (int it = 0; it < 20; it++) {
		check_partitions(&s);
		sim_step(&s, 1.0, 1);
	}
	sim_free(&s);
}

/* Hand case: P = 2, all selections in partition 0: blocks must move from 0 to 1, and the
 * threshold must rise (far too many selected) by exactly x1.005 (Algorithm 5 alone: no
 * calibration from the data when far off target). */
UNIT_TEST(core_exdyna_moves_blocks_to_light_partition)
{
	uint64_t n = 1024 * 64;
	scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(n, 2, 0, 0.001);
	cfg.init_threshold = 1.0;
	cfg.recal_permille = cfg.cap_permille = 0;
	scd_exdyna_t *ex;
	CHECK_EQ_INT(scd_exdyna_create(&cfg, &ex), SC_OK);
	CHECK_EQ_INT(scd_exdyna_block_size(ex), 64);
	uint64_t lo0, hi0, lo1, hi1;
	scd_exdyna_part_range(ex, 0, &lo0, &hi0);
	CHECK_EQ_INT(hi0, n / 2);
	/* iteration 0: rank 0 owns partition 0 */
	uint64_t counts[2] = {1000, 0};
	CHECK_EQ_INT(scd_exdyna_meta_words(ex), 1); /* how many passed, per rank */
	CHECK_EQ_INT(scd_exdyna_update(ex, counts), SC_OK);
	scd_exdyna_part_range(ex, 0, &lo0, &hi0);
	scd_exdyna_part_range(ex, 1, &lo1, &hi1);
	CHECK_EQ_INT(hi0, n / 2 - 64);
	CHECK_EQ_INT(lo1, hi0);
	CHECK_EQ_INT(hi1, n);
	CHECK_TRUE(scd_exdyna_threshold(ex) == (float)(1.0 * 1.005));
	/* iteration 1: rank 0 owns partition 1; in-band just below target: Algorithm 5's
	 * x(1 + 0.005/4), whatever the side */
	uint64_t k = scd_exdyna_target(ex);
	uint64_t counts2[2] = {k / 2, k / 2 - 1};
	double thr = 1.0 * 1.005;
	CHECK_EQ_INT(scd_exdyna_update(ex, counts2), SC_OK);
	CHECK_TRUE(scd_exdyna_threshold(ex) == (float)(thr * (1 + 0.005 / 4)));
	scd_exdyna_destroy(ex);
}

/* The defaults are the paper's Algorithm 5 alone: no grid, no cap, and inside the band
 * (1/beta, beta] the fine step x(1 + gamma/4) on both sides of the target; the named
 * variant exdyna_fine_symmetric steps down below the target instead. */
UNIT_TEST(core_exdyna_defaults_are_algorithm_5)
{
	uint64_t n = 1024 * 64;
	scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(n, 2, 0, 0.01);
	CHECK_EQ_INT(cfg.recal_permille, 0);
	CHECK_EQ_INT(cfg.cap_permille, 0);
	CHECK_EQ_INT(cfg.fine_symmetric, 0);
	cfg.init_threshold = 1.0;
	for (int sym = 0; sym < 2; sym++) {
		cfg.fine_symmetric = sym;
		scd_exdyna_t *ex;
		CHECK_EQ_INT(scd_exdyna_create(&cfg, &ex), SC_OK);
		uint64_t k = scd_exdyna_target(ex);
		uint64_t below[2] = {k / 2, k / 2 - k / 50}; /* 0.98 k: inside the band */
		CHECK_EQ_INT(scd_exdyna_update(ex, below), SC_OK);
		float want = (float)(sym ? 1 - 0.005 / 4 : 1 + 0.005 / 4);
		CHECK_MSG(scd_exdyna_threshold(ex) == want,
			  "fine_symmetric %d: %.7f, expected %.7f", sym,
			  (double)scd_exdyna_threshold(ex), (double)want);
		scd_exdyna_destroy(ex);
	}
}

UNIT_TEST_TIMEOUT(core_exdyna_density_tracks_target, 120)
{
	uint32_t P = 2 + (uint32_t)unit_rng_below(4);
	uint64_t n = 120000 + unit_rng_below(40000);
	double density = 0.02 + unit_rng_double() * 0.02;
	/* the shared start: rank 0's first gradient's quantile (bisection on the count), as
	 * a coordinator would broadcast it */
	pool_fill();
	float *probe = malloc(n * 4);
	heavy_fill(probe, n, 1.0);
	float a = 0, b = 100;
	for (int j = 0; j < 40; j++) {
		float m = (a + b) / 2;
		if (scd_count_at_least(probe, n, m) > density * n)
			a = m;
		else
			b = m;
	}
	float t0 = b;
	free(probe);
	sim_t s;
	sim_init(&s, P, n, density, t0);
	uint64_t k = scd_exdyna_target(s.ex[0]);
	double drift = 1.0, worst_lo = 10, worst_hi = 0;
	for (int it = 0; it < 900; it++) {
		drift *= 1.0005; /* the gradient scale drifts slowly */
		sim_step(&s, drift, 0);
		double ratio = (double)s.qualified / (double)k; /* what the threshold passed */
		if (it >= 600) {
			worst_lo = ratio < worst_lo ? ratio : worst_lo;
			worst_hi = ratio > worst_hi ? ratio : worst_hi;
		}
	}
	/* Algorithm 5 keeps the count in its band [1/1.1, 1.1] by reacting to a step that left
	 * it, so one step can overshoot the band by the count's step-to-step noise (1.102
	 * seen with SC_TEST_SEED=6999264830184164972): the bounds allow 2% of it. */
	CHECK_MSG(worst_lo >= 0.89 && worst_hi <= 1.12,
		  "actual/target density ranged %.3f..%.3f after warm-up (P=%u, k=%llu)",
		  worst_lo, worst_hi, P, (unsigned long long)k);
	sim_free(&s);
}

/* The threshold's start from the data (init_threshold 0): at the first iteration each
 * rank selects its share k / P inside its partition, whatever the gradient's scale, and
 * the ranks then hold the lower median of their thresholds (sim_step checks that they
 * agree). The reference's start, 1 / (2 sqrt k), depends on the scale: on gradients
 * thousand times smaller it selects almost nothing, on ones a thousand times larger
 * nearly everything, and Algorithm 5's 0.5% steps take hundreds of iterations to
 * recover. */
UNIT_TEST(core_exdyna_threshold_starts_from_data)
{
	pool_fill();
	uint32_t P = 2 + (uint32_t)unit_rng_below(4);
	uint64_t n = 100000 + unit_rng_below(40000);
	double density = 0.01 + unit_rng_double() * 0.02;
	for (int v = 0; v < 4; v++) {
		double scale = v % 2 ? 1e4 : 1e-5;
		int data = v < 2;
		sim_t s;
		sim_init_cfg(&s, P, n, density, data ? 0 : -1, data);
		uint64_t k = scd_exdyna_target(s.ex[0]);
		CHECK_TRUE(scd_exdyna_calibrating(s.ex[0]) == data);
		double props[8];
		uint64_t first = sim_step_props(&s, scale, props);
		if (data) {
			/* every rank took its share exactly (ties aside): k within rounding */
			CHECK_MSG(first + P >= k && first <= k + P + k / 100,
				  "scale %g: the first iteration selected %llu of %llu", scale,
				  (unsigned long long)first, (unsigned long long)k);
			qsort(props, P, sizeof(double), cmp_double);
			CHECK_TRUE(scd_exdyna_threshold(s.ex[0]) == (float)props[(P - 1) / 2]);
			CHECK_TRUE(!scd_exdyna_calibrating(s.ex[0]));
		} else {
			CHECK_MSG(first < k / 10 || first > 10 * k,
				  "scale %g: the reference start selected %llu of %llu", scale,
				  (unsigned long long)first, (unsigned long long)k);
		}
		sim_free(&s);
	}
	free(pool);
}

/* Error feedback on gradients uncorrelated from step to step (light-tailed, as a dense
 * gradient's, with partitions of different scales): what no rank selects stays in its
 * residual and grows like the square root of its age, far faster than Algorithm 5's steps
 * of 0.5% can follow. With Algorithm 5 alone the count runs away (checked, so the case is
 * the hard one); with the grid calibration whenever an iteration's count left
 * [1/1.25, 1.25] x k, the count stays near the target, and the ranks still agree
 * (sim_step checks their digests at every iteration). */
UNIT_TEST_TIMEOUT(core_exdyna_follows_a_growing_residual, 120)
{
	gpool_fill();
	gauss_stream = 1;
	uint32_t P = 2 + (uint32_t)unit_rng_below(7);
	uint64_t n = 100000 + unit_rng_below(40000);
	double density = 0.01 + unit_rng_double() * 0.02;
	const int iters = 40, from = 10;
	double mean[2];
	for (int v = 0; v < 2; v++) {
		int recal = v == 1;
		sim_t s;
		sim_init_cfg(&s, P, n, density, 0, recal);
		uint64_t k = scd_exdyna_target(s.ex[0]);
		double sum = 0, hi = 0, last = 0;
		int recals = 0;
		for (int it = 0; it < iters; it++) {
			double sent = (double)sim_step(&s, 1.0, it % 8 == 0) / (double)k;
			last = (double)s.qualified / (double)k;
			/* the cap: 1.25 x a share of k / P (rounded) per rank */
			CHECK_MSG(!recal ||
				      sent * k <= P * (1250 * ((k + P / 2) / P) / 1000) + 0.5,
				  "iteration %d sent %.3f k", it, sent);
			if (it >= from) {
				sum += last;
				hi = last > hi ? last : hi;
			}
		}
		mean[v] = sum / (iters - from);
		recals = (int)scd_exdyna_jumps(s.ex[0]);
		if (!recal) {
			CHECK_MSG(last > 4.0, "Algorithm 5 alone ended at %.2f x k (P=%u)",
				  last, P);
		} else {
			/* the count reacts two iterations late (the next iteration counts the
			 * grid, the one after uses it): under a growing residual it rides the
			 * band's upper edge and overshoots it by one iteration's growth */
			CHECK_MSG(
			    mean[1] >= 0.85 && mean[1] <= 1.25 && hi <= 2.0,
			    "count/target after warm-up: mean %.3f, max %.3f (P=%u, k=%llu, "
			    "%d calibrations; Algorithm 5 alone: mean %.2f)",
			    mean[1], hi, P, (unsigned long long)k, recals, mean[0]);
			CHECK_TRUE(recals > 0);
		}
		sim_free(&s);
	}
	gauss_stream = 0;
	free(gpool);
}

/* The cap: with a threshold far too low (Algorithm 5 alone, a fixed start), a rank keeps
 * exactly its cap (1.25 x its share), the largest magnitudes of its partition, and
 * everything else stays in its residual (dense input) or goes to dis (COO input). */
UNIT_TEST(core_exdyna_caps_a_rank_near_its_share)
{
	uint32_t P = 2 + (uint32_t)unit_rng_below(5), me = (uint32_t)unit_rng_below(P);
	uint64_t n = 50000 + unit_rng_below(50000);
	scd_exdyna_cfg_t cfg = scd_exdyna_cfg_default(n, P, me, 0.01);
	cfg.init_threshold = 1e-6;
	cfg.cap_permille = 1250; /* the variant */
	float *g = malloc(n * 4), *res = calloc(n, 4);
	for (uint64_t i = 0; i < n; i++)
		g[i] = (float)(unit_rng_double() - 0.5) * (i % 7 ? 1.0f : 9.0f);
	for (int coo = 0; coo < 2; coo++) {
		scd_exdyna_t *ex;
		CHECK_EQ_INT(scd_exdyna_create(&cfg, &ex), SC_OK);
		uint64_t k = scd_exdyna_target(ex), share = (k + P / 2) / P, lo, hi, count;
		uint64_t cap = cfg.cap_permille * share / 1000;
		CHECK_EQ_INT(cfg.cap_permille, 1250);
		scd_exdyna_part_range(ex, scd_exdyna_part_of_rank(ex, me), &lo, &hi);
		scd_coo_t out = {malloc(n * 4), malloc(n * 4), 0, n};
		scd_coo_t dis = {malloc(n * 4), malloc(n * 4), 0, n};
		memset(res, 0, n * 4);
		if (coo) {
			scd_coo_t in = {malloc(n * 4), malloc(n * 4), n, n};
			for (uint64_t i = 0; i < n; i++)
				in.idx[i] = (uint32_t)i, in.val[i] = g[i];
			CHECK_EQ_INT(scd_exdyna_select_coo(ex, &in, &out, &dis, &count), SC_OK);
			CHECK_EQ_INT(out.nnz + dis.nnz, n); /* every value went one way */
			for (uint64_t j = 0; j < dis.nnz; j++)
				res[dis.idx[j]] = dis.val[j];
			free(in.idx), free(in.val);
		} else {
			CHECK_EQ_INT(scd_exdyna_select(ex, g, res, &out, &count), SC_OK);
		}
		CHECK_EQ_INT(count, cap);
		CHECK_EQ_INT(out.nnz, cap);
		float kept_min = INFINITY, left_max = 0;
		char *picked = calloc(n, 1);
		for (uint64_t j = 0; j < out.nnz; j++) {
			uint32_t i = out.idx[j];
			CHECK_TRUE(i >= lo && i < hi && (j == 0 || i > out.idx[j - 1]));
			CHECK_TRUE(out.val[j] == g[i] && res[i] == 0);
			kept_min = fminf(kept_min, fabsf(g[i]));
			res[i] = g[i];
			picked[i] = 1;
		}
		for (uint64_t i = 0; i < n; i++) {
			CHECK_TRUE(res[i] == g[i]); /* conserved */
			if (i >= lo && i < hi && !picked[i])
				left_max = fmaxf(left_max, fabsf(g[i]));
		}
		free(picked);
		CHECK_MSG(kept_min >= left_max, "kept down to %g, left %g behind", kept_min,
			  left_max);
		free(out.idx), free(out.val), free(dis.idx), free(dis.val);
		scd_exdyna_destroy(ex);
	}
	free(g), free(res);
}
