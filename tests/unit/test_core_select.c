/*
 * test_core_select.c: property tests of the sparsifiers (device/select.h): error feedback
 * conserves every element bit for bit, each sparsifier selects what it promises (exact
 * top-k against a sort, DGC within its band, natural = the non-zeros), the per-step
 * path allocates nothing after warm-up, and the shared radix select (device/kth.h) agrees
 * with a sort.
 */
#include "unit.h"

#include "device/kth.h"
#include "device/select.h"

#include <malloc.h>
#include <math.h>
#include <string.h>

/* A gradient-like value: Gaussian-ish body with occasional heavy-tailed outliers. */
static float grad_value(void)
{
	double u = 0;
	for (int i = 0; i < 4; i++)
		u += unit_rng_double() - 0.5;
	if (unit_rng_below(50) == 0)
		u *= 20 * unit_rng_double();
	return (float)u;
}

static uint64_t random_numel(void)
{
	switch (unit_rng_below(4)) {
	case 0:
		return 1 + unit_rng_below(40);
	case 1:
		return 1 + unit_rng_below(5000);
	default:
		return 20000 + unit_rng_below(200000);
	}
}

typedef struct {
	uint64_t n;
	float *in, *res, *res0, *acc;
	scd_coo_t out;
} fixture_t;

static void fixture_init(fixture_t *f, uint64_t n, int ties)
{
	f->n = n;
	f->in = malloc(n * 4);
	f->res = malloc(n * 4);
	f->res0 = malloc(n * 4);
	f->acc = malloc(n * 4);
	f->out = (scd_coo_t){malloc(n * 4), malloc(n * 4), 0, n};
	for (uint64_t i = 0; i < n; i++) {
		f->in[i] = ties ? (float)((int)unit_rng_below(7) - 3) : grad_value();
		f->res[i] = ties ? (float)((int)unit_rng_below(3) - 1) : grad_value() / 4;
		if (unit_rng_below(10) == 0)
			f->in[i] = 0; /* some exact zeros */
		f->res0[i] = f->res[i];
		f->acc[i] = f->in[i] + f->res[i];
	}
}

static void fixture_free(fixture_t *f)
{
	free(f->in), free(f->res), free(f->res0), free(f->acc);
	free(f->out.idx), free(f->out.val);
}

/* Selected + new residual == acc for every element, bit for bit; indices ascending. */
static void check_conserved(const fixture_t *f)
{
	float *sum = malloc(f->n * 4);
	memcpy(sum, f->res, f->n * 4);
	for (uint64_t j = 0; j < f->out.nnz; j++) {
		uint32_t i = f->out.idx[j];
		CHECK_MSG(i < f->n, "index %u out of range", i);
		CHECK_MSG(j == 0 || i > f->out.idx[j - 1], "indices not ascending at %llu",
			  (unsigned long long)j);
		CHECK_MSG(f->res[i] == 0.0f, "selected element %u left %g in the residual", i,
			  f->res[i]);
		sum[i] += f->out.val[j];
	}
	for (uint64_t i = 0; i < f->n; i++)
		CHECK_MSG(memcmp(&sum[i], &f->acc[i], 4) == 0 ||
			      (sum[i] == 0 && f->acc[i] == 0),
			  "element %llu: selected+residual %.9g != input+residual %.9g",
			  (unsigned long long)i, sum[i], f->acc[i]);
	free(sum);
}

static void run_kind(scd_sparsify_kind_t kind, fixture_t *f, double density, float thr,
		     scd_select_stats_t *st)
{
	scd_sparsifier_cfg_t cfg = {.kind = kind,
				    .numel = f->n,
				    .density = density,
				    .threshold = thr,
				    .seed = unit_rng()};
	scd_sparsifier_t *sp;
	CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
	CHECK_EQ_INT(scd_sparsify(sp, f->in, f->res, f->n, &f->out, st), SC_OK);
	scd_sparsifier_destroy(sp);
}

UNIT_TEST(core_sparsify_conserves_every_kind)
{
	for (int rep = 0; rep < 24; rep++) {
		fixture_t f;
		fixture_init(&f, random_numel(), (int)unit_rng_below(4) == 0);
		scd_sparsify_kind_t kind = (scd_sparsify_kind_t)(rep % SCD_SPARSIFY_COUNT);
		double density = 0.001 + unit_rng_double() * 0.2;
		if (unit_rng_below(3) == 0)
			f.out.cap = unit_rng_below(f.n / 50 + 2); /* too small: rest stays */
		scd_select_stats_t st;
		run_kind(kind, &f, density, 0.3f + (float)unit_rng_double(), &st);
		check_conserved(&f);
		CHECK_TRUE(f.out.nnz <= f.out.cap);
		fixture_free(&f);
	}
}

UNIT_TEST(core_threshold_selects_exactly_above)
{
	fixture_t f;
	fixture_init(&f, random_numel(), 0);
	float thr = 0.2f + (float)unit_rng_double();
	scd_select_stats_t st;
	run_kind(SCD_SPARSIFY_THRESHOLD, &f, 0, thr, &st);
	check_conserved(&f);
	uint64_t want = 0;
	for (uint64_t i = 0; i < f.n; i++)
		want += fabsf(f.acc[i]) >= thr;
	CHECK_EQ_INT(f.out.nnz, want);
	for (uint64_t i = 0; i < f.n; i++)
		CHECK_MSG(fabsf(f.res[i]) < thr, "element %llu |%g| >= %g left behind",
			  (unsigned long long)i, f.res[i], thr);
	fixture_free(&f);
}

static int cmp_desc(const void *a, const void *b)
{
	float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Exact top-k against a full sort (the obviously right reference). */
static void check_topk(fixture_t *f, double density, int no_residual)
{
	scd_sparsifier_cfg_t cfg = {
	    .kind = SCD_SPARSIFY_TOPK, .numel = f->n, .density = density};
	scd_sparsifier_t *sp;
	CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
	scd_select_stats_t st;
	CHECK_EQ_INT(scd_sparsify(sp, f->in, no_residual ? NULL : f->res, f->n, &f->out, &st),
		     SC_OK);
	scd_sparsifier_destroy(sp);
	const float *acc = no_residual ? f->in : f->acc;
	uint64_t k = scd_density_to_k(density, f->n), nonzero = 0;
	float *sorted = malloc(f->n * 4);
	memcpy(sorted, acc, f->n * 4);
	for (uint64_t i = 0; i < f->n; i++)
		nonzero += acc[i] != 0;
	qsort(sorted, f->n, 4, cmp_desc);
	uint64_t want = k < nonzero ? k : nonzero;
	CHECK_EQ_INT(f->out.nnz, want);
	if (want) {
		float kth = fabsf(sorted[want - 1]);
		/* above the k-th value: all taken; ties at it: the lowest indices */
		uint64_t above = 0, taken_ties = 0;
		for (uint64_t i = 0; i < want; i++)
			above += fabsf(sorted[i]) > kth;
		for (uint64_t j = 0; j < f->out.nnz; j++) {
			float v = fabsf(acc[f->out.idx[j]]);
			CHECK_MSG(v >= kth, "selected %g below the k-th %g", v, kth);
			CHECK_TRUE(memcmp(&f->out.val[j], &acc[f->out.idx[j]], 4) == 0);
			taken_ties += v == kth;
		}
		CHECK_EQ_INT(taken_ties, want - above);
		uint64_t seen_ties = 0, j = 0;
		for (uint64_t i = 0; i < f->n && seen_ties < taken_ties; i++) {
			if (fabsf(acc[i]) != kth)
				continue;
			while (j < f->out.nnz && f->out.idx[j] < i)
				j++;
			CHECK_MSG(j < f->out.nnz && f->out.idx[j] == i,
				  "tie at index %llu skipped for a later one",
				  (unsigned long long)i);
			seen_ties++;
		}
	}
	if (!no_residual)
		check_conserved(f);
	free(sorted);
}

UNIT_TEST(core_topk_is_exact)
{
	for (int rep = 0; rep < 16; rep++) {
		fixture_t f;
		fixture_init(&f, random_numel(), rep % 4 == 0);
		double density = rep % 5 == 0 ? 1.0 : 0.0005 + unit_rng_double() * 0.1;
		check_topk(&f, density, rep % 3 == 0);
		fixture_free(&f);
	}
}

/* Tensors of at most 2048 elements take the quickselect path (two passes): exact on
 * inputs shaped to defeat a quickselect's pivot (sorted either way, every key equal, two
 * values, an organ pipe, a few non-zeros) as well as on gradients and ties. */
UNIT_TEST(core_topk_small_tensors_are_exact)
{
	for (int rep = 0; rep < 240; rep++) {
		fixture_t f;
		uint64_t n = rep < 40 ? 1 + (uint64_t)rep : 1 + unit_rng_below(2048);
		if (rep % 17 == 0)
			n = 2048;
		int shape = rep % 8;
		fixture_init(&f, n, shape == 1);
		for (uint64_t i = 0; shape >= 2 && i < n; i++) {
			float v = shape == 2   ? (float)i			/* ascending */
				  : shape == 3 ? (float)(n - i)			/* descending */
				  : shape == 4 ? 1.5f				/* all equal */
				  : shape == 5 ? (float)(i & 1)			/* two values */
				  : shape == 6 ? (float)(i < n / 2 ? i : n - i) /* organ pipe */
					       : (unit_rng_below(50) ? 0.0f : grad_value());
			f.in[i] = v;
			f.res[i] = f.res0[i] = 0;
			f.acc[i] = v;
		}
		double density = rep % 11 == 0 ? 1.0 : 0.001 + unit_rng_double() * 0.3;
		int no_residual = rep % 3 == 0;
		scd_sparsifier_cfg_t cfg = {
		    .kind = SCD_SPARSIFY_TOPK, .numel = n, .density = density};
		scd_sparsifier_t *sp;
		CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
		scd_select_stats_t st;
		float *res = malloc(n * 4);
		memcpy(res, f.res, n * 4);
		CHECK_EQ_INT(scd_sparsify(sp, f.in, no_residual ? NULL : res, n, &f.out, &st),
			     SC_OK);
		CHECK_MSG(st.passes == 2, "n %llu: %u passes (the small path takes 2)",
			  (unsigned long long)n, st.passes);
		scd_sparsifier_destroy(sp);
		free(res);
		f.out.nnz = 0;
		check_topk(&f, density, no_residual);
		fixture_free(&f);
	}
}

/* Tensors large enough for the sampled one-pass path (>= 8192 elements: the whole sample
 * from 2^19, a shorter one below), including inputs that defeat the sample (ties, a
 * spike the sample misses) and must fall back. */
UNIT_TEST(core_topk_fast_path_is_exact)
{
	for (int rep = 0; rep < 8; rep++) {
		fixture_t f;
		fixture_init(&f,
			     rep < 4   ? 600000 + unit_rng_below(600000)
			     : rep < 6 ? 8192 + unit_rng_below(60000)
				       : 65536 + unit_rng_below(500000),
			     rep % 4 == 3);
		if (rep % 4 == 2) /* a dense spike in one place: the sample likely misses it */
			for (uint64_t i = 1000; i < 1000 + f.n / 100; i++) {
				f.in[i] = 50.0f + (float)i;
				f.acc[i] = f.in[i] + f.res[i];
			}
		double density = rep % 4 == 1 ? 0.2 : 0.001 + unit_rng_double() * 0.03;
		check_topk(&f, density, rep % 4 == 1);
		fixture_free(&f);
	}
}

/* A layer's tensor of 2^18 elements (a 512 x 512 weight) at 1%: the sampled path, one pass
 * over the tensor (the histogram path's first pass, its refinement and its selection
 * took three or more), and exact. */
UNIT_TEST(core_topk_one_pass_on_a_layer)
{
	fixture_t f;
	fixture_init(&f, 1u << 18, 0);
	scd_sparsifier_cfg_t cfg = {.kind = SCD_SPARSIFY_TOPK, .numel = f.n, .density = 0.01};
	scd_sparsifier_t *sp;
	CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
	scd_select_stats_t st;
	float *res = malloc(f.n * 4);
	memcpy(res, f.res, f.n * 4);
	CHECK_EQ_INT(scd_sparsify(sp, f.in, res, f.n, &f.out, &st), SC_OK);
	CHECK_MSG(st.passes == 1, "%u passes over the tensor", st.passes);
	scd_sparsifier_destroy(sp);
	free(res);
	f.out.nnz = 0;
	check_topk(&f, 0.01, 0);
	fixture_free(&f);
}

/* A boundary bucket larger than the candidate buffer forces refinement passes over the
 * whole tensor: all values within a hair of each other. */
UNIT_TEST(core_topk_huge_boundary_bucket)
{
	fixture_t f;
	fixture_init(&f, 100000 + unit_rng_below(50000), 0);
	for (uint64_t i = 0; i < f.n; i++) {
		f.in[i] = 1.0f + (float)unit_rng_below(1000) * 1e-6f;
		f.res[i] = f.res0[i] = 0;
		f.acc[i] = f.in[i];
	}
	scd_select_stats_t st;
	check_topk(&f, 0.01 + unit_rng_double() * 0.05, 0);
	(void)st;
	fixture_free(&f);
}

UNIT_TEST(core_dgc_lands_in_band)
{
	fixture_t f;
	fixture_init(&f, 200000 + unit_rng_below(200000), 0);
	double density = 0.002 + unit_rng_double() * 0.05;
	scd_select_stats_t st;
	run_kind(SCD_SPARSIFY_DGC, &f, density, 0, &st);
	check_conserved(&f);
	uint64_t k = scd_density_to_k(density, f.n);
	CHECK_MSG(f.out.nnz >= 0.7 * k && f.out.nnz <= 1.3 * k,
		  "dgc selected %llu for k = %llu after %u passes",
		  (unsigned long long)f.out.nnz, (unsigned long long)k, st.passes);
	for (uint64_t j = 0; j < f.out.nnz; j++)
		CHECK_TRUE(fabsf(f.out.val[j]) >= st.threshold);
	fixture_free(&f);
}

UNIT_TEST(core_natural_takes_the_nonzeros)
{
	uint64_t n = random_numel();
	float *g = calloc(n, 4);
	scd_coo_t out = {malloc(n * 4), malloc(n * 4), 0, n};
	uint64_t want = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = unit_rng_below(20);
		g[i] = r == 0 ? grad_value() : r == 1 ? -0.0f : r == 2 ? 1e-42f : 0.0f;
		want += g[i] != 0;
	}
	g[0] = 3; /* index 0 and the last are kept */
	g[n - 1] = -2;
	want = 0;
	for (uint64_t i = 0; i < n; i++)
		want += g[i] != 0;
	scd_sparsifier_cfg_t cfg = {.kind = SCD_SPARSIFY_NATURAL, .numel = n};
	scd_sparsifier_t *sp;
	CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
	CHECK_EQ_INT(scd_sparsify(sp, g, NULL, n, &out, NULL), SC_OK);
	CHECK_EQ_INT(out.nnz, want);
	for (uint64_t j = 0; j < out.nnz; j++)
		CHECK_TRUE(g[out.idx[j]] != 0 && out.val[j] == g[out.idx[j]]);
	CHECK_EQ_INT(out.idx[0], 0);
	CHECK_EQ_INT(out.idx[out.nnz - 1], n - 1);
	scd_coo_t copy = {malloc(n * 4), malloc(n * 4), 0, n};
	CHECK_EQ_INT(scd_coo_copy(&out, &copy), SC_OK);
	CHECK_EQ_INT(copy.nnz, out.nnz);
	CHECK_TRUE(!memcmp(copy.idx, out.idx, out.nnz * 4));
	scd_sparsifier_destroy(sp);
	free(g), free(out.idx), free(out.val), free(copy.idx), free(copy.val);
}

/* Error feedback over many steps: what was sent plus what remains equals everything that
 * came in (within float rounding of the running sums; exact per step as checked above). */
UNIT_TEST(core_error_feedback_over_steps)
{
	uint64_t n = 5000 + unit_rng_below(5000);
	float *in = malloc(n * 4), *res = calloc(n, 4);
	double *sent = calloc(n, 8), *came = calloc(n, 8);
	scd_coo_t out = {malloc(n * 4), malloc(n * 4), 0, n};
	scd_sparsify_kind_t kind = (scd_sparsify_kind_t)unit_rng_below(SCD_SPARSIFY_COUNT);
	scd_sparsifier_cfg_t cfg = {
	    .kind = kind, .numel = n, .density = 0.01, .threshold = 1.0f, .seed = unit_rng()};
	scd_sparsifier_t *sp;
	CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
	for (int step = 0; step < 50; step++) {
		for (uint64_t i = 0; i < n; i++) {
			in[i] = (float)((int)unit_rng_below(9) - 4) / 8; /* exact in float */
			came[i] += in[i];
		}
		CHECK_EQ_INT(scd_sparsify(sp, in, res, n, &out, NULL), SC_OK);
		for (uint64_t j = 0; j < out.nnz; j++)
			sent[out.idx[j]] += out.val[j];
	}
	for (uint64_t i = 0; i < n; i++)
		CHECK_MSG(sent[i] + res[i] == came[i],
			  "%s: element %llu sent %g + kept %g != %g",
			  scd_sparsify_kind_name(kind), (unsigned long long)i, sent[i], res[i],
			  came[i]);
	scd_sparsifier_destroy(sp);
	free(in), free(res), free(sent), free(came), free(out.idx), free(out.val);
}

UNIT_TEST(core_sparsify_step_allocates_nothing)
{
	uint64_t n = 300000;
	fixture_t f;
	fixture_init(&f, n, 0);
	for (int kind = 0; kind < SCD_SPARSIFY_COUNT; kind++) {
		scd_sparsifier_cfg_t cfg = {.kind = kind,
					    .numel = n,
					    .density = 0.01,
					    .threshold = 1.0f,
					    .seed = unit_rng()};
		scd_sparsifier_t *sp;
		CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
		CHECK_EQ_INT(scd_sparsify(sp, f.in, f.res, n, &f.out, NULL),
			     SC_OK); /* warm-up */
		struct mallinfo2 before = mallinfo2();
		for (int step = 0; step < 5; step++)
			CHECK_EQ_INT(scd_sparsify(sp, f.in, f.res, n, &f.out, NULL), SC_OK);
		struct mallinfo2 after = mallinfo2();
		CHECK_MSG(after.uordblks == before.uordblks && after.hblkhd == before.hblkhd,
			  "%s allocated on the step path", scd_sparsify_kind_name(kind));
		scd_sparsifier_destroy(sp);
	}
	fixture_free(&f);
}

/* The shared radix select (device/kth.h) against a sort: floats and keys, with and
 * without scratch, on crowded magnitudes (many keys per digit bucket), ties, zeros and
 * both signs, every k from 1 to n; the count of larger keys with it. */
static int key_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

UNIT_TEST(core_kth_key_matches_sort)
{
	for (int rep = 0; rep < 20; rep++) {
		uint64_t n = 1 + unit_rng_below(rep < 10 ? 64 : 3000);
		float *x = malloc(4 * n);
		uint32_t *keys = malloc(4 * n), *sorted = malloc(4 * n), *scr = malloc(4 * n);
		for (uint64_t i = 0; i < n; i++) {
			/* few distinct magnitudes near 1 (crowded top digits), some ties and
			 * zeros, either sign */
			float v =
			    1.0f + (float)unit_rng_below(rep % 3 ? 7 : 100000) / 1048576.0f;
			if (unit_rng_below(10) == 0)
				v = 0;
			x[i] = unit_rng_below(2) ? -v : v;
			keys[i] = sorted[i] = scd_abs_key(x[i]);
		}
		qsort(sorted, n, 4, key_desc);
		for (uint64_t k = 1; k <= n; k += 1 + n / 97) {
			uint64_t gt_want = 0;
			while (gt_want < n && sorted[gt_want] > sorted[k - 1])
				gt_want++;
			uint64_t gt[3] = {~0ull, ~0ull, ~0ull};
			uint32_t got[3] = {scd_kth_key_f32(x, n, k, scr, &gt[0]),
					   scd_kth_key_f32(x, n, k, NULL, &gt[1]),
					   scd_kth_key_u32(keys, n, k, scr, &gt[2])};
			uint32_t plain = scd_kth_key_u32(keys, n, k, NULL, NULL);
			for (int v = 0; v < 3; v++)
				CHECK_MSG(
				    got[v] == sorted[k - 1] && gt[v] == gt_want,
				    "n %llu k %llu variant %d: key %08x (> %llu), want %08x "
				    "(> %llu)",
				    (unsigned long long)n, (unsigned long long)k, v, got[v],
				    (unsigned long long)gt[v], sorted[k - 1],
				    (unsigned long long)gt_want);
			CHECK_TRUE(plain == sorted[k - 1]);
		}
		CHECK_EQ_INT(scd_kth_key_u32(keys, n, n + 1, NULL, NULL), 0);
		free(x), free(keys), free(sorted), free(scr);
	}
}

/* Block-wise top-K (S2 Reducer): exactly the non-zeros of the K = max(1, round(density x
 * blocks)) blocks of largest l2 norm (reference: every block's norm, sorted; ties by lower
 * block), blocks of any size with a shorter last one; a block holding a NaN is selected
 * first. */
UNIT_TEST(core_block_topk_selects_whole_blocks)
{
	for (int rep = 0; rep < 30; rep++) {
		fixture_t f;
		fixture_init(&f, 1 + unit_rng_below(50000), (int)unit_rng_below(4) == 0);
		uint32_t B = 1 + (uint32_t)unit_rng_below(rep % 3 ? 300 : 4);
		uint64_t nb = (f.n + B - 1) / B;
		double density = 0.001 + unit_rng_double() * 0.3;
		uint64_t nan_block = unit_rng_below(2) ? unit_rng_below(nb) : UINT64_MAX;
		if (nan_block != UINT64_MAX) {
			f.in[nan_block * B] = NAN;
			f.acc[nan_block * B] = NAN;
		}
		scd_sparsifier_cfg_t cfg = {.kind = SCD_SPARSIFY_BLOCK_TOPK,
					    .numel = f.n,
					    .density = density,
					    .block = B};
		scd_sparsifier_t *sp;
		CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
		scd_select_stats_t st;
		CHECK_EQ_INT(scd_sparsify(sp, f.in, f.res, f.n, &f.out, &st), SC_OK);
		scd_sparsifier_destroy(sp);
		/* the reference: the K largest norms, ties by the lower block */
		uint64_t K = scd_density_to_k(density, nb);
		double *norm = malloc(nb * sizeof(double));
		uint8_t *want = calloc(nb, 1);
		for (uint64_t b = 0; b < nb; b++) {
			double s = 0;
			for (uint64_t i = b * B; i < f.n && i < (b + 1) * B; i++)
				s += (double)f.acc[i] * f.acc[i];
			norm[b] = isnan(s) ? INFINITY : s;
		}
		for (uint64_t j = 0; j < K; j++) {
			uint64_t best = UINT64_MAX;
			for (uint64_t b = 0; b < nb; b++)
				if (!want[b] && (best == UINT64_MAX || norm[b] > norm[best]))
					best = b;
			want[best] = 1;
		}
		if (nan_block != UINT64_MAX)
			CHECK_MSG(want[nan_block], "the reference left out the NaN block");
		uint64_t expect = 0;
		for (uint64_t i = 0; i < f.n; i++)
			expect += want[i / B] && (f.acc[i] != 0 || isnan(f.acc[i]));
		CHECK_MSG(f.out.nnz == expect,
			  "n %llu B %u K %llu: %llu selected, expected %llu",
			  (unsigned long long)f.n, B, (unsigned long long)K,
			  (unsigned long long)f.out.nnz, (unsigned long long)expect);
		for (uint64_t j = 0; j < f.out.nnz; j++)
			CHECK_MSG(want[f.out.idx[j] / B], "element %u of an unselected block",
				  f.out.idx[j]);
		CHECK_EQ_INT((int)st.target, (int)K);
		check_conserved(&f);
		free(norm);
		free(want);
		fixture_free(&f);
	}
}
