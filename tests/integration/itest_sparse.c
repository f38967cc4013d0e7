/*
 * itest_sparse.c: the "sparse" scenario: every collective scheme of the daemons, pinned
 * one at a time through sc_tensor_opts_t.scheme, and the cost model's own choice ("auto"),
 * on real daemons, checked element by element.
 *
 * Inputs are small integers held in float32, a pure function of (seed, rank, index), so
 * every trainer rebuilds every other trainer's input and the exact sum itself:
 *   - uniform index sets with overlap none (disjoint: residue classes of the rank),
 *     half, and full (every rank the same ids), submitted as COO;
 *   - Zipf-skewed index sets (id i present with probability min(1, A / (i + 1)^1.1), A set
 *     for the density: frequent ids shared by every rank, rare ones mostly private, the
 *     union crowded at low ids), submitted as COO;
 *   - a dense input top-k sparsified by the daemon (SC_SPARSIFY_TOPK, error feedback);
 * at densities from 1e-4 to 1. For each case and scheme, over two steps:
 *   - lossless schemes on COO input: the result is exactly the dense sum (0 wrong);
 *   - tensors with a residual (lossy schemes allowed, or a sparsifier): every trainer
 *     sends the change of its node's residual through a plain float32 tensor, and
 *     sum of inputs == result + sum of residual changes (mass conservation), exactly for
 *     the lossless schemes and ExDyna/SparDL (small integers), to float rounding for S2;
 *   - auto: sc_tensor_stats names a real scheme, and the result is checked as above;
 *   - sc_tensor_stats: the time inside exchanges and the CPU time are within the
 *     measured time (the first not 0 with peers, the second never 0); struct_sizes from
 *     before exchange_s and before cpu_s are served, nothing written past;
 *   - COO input takes the dense result at step 0 and a sparse one at step 1
 *     (sc_allreduce_coo_sparse_async): indices strictly ascending and in range, expanded
 *     and checked as above; it must come back sparse with one trainer per node (the
 *     capacity is numel; a residual is folded into the list), dense with several;
 *   - every trainer ends with the same bits (hash of every result, gathered at the end).
 * Failures are collected and the scenario fails at the end, naming case, scheme, element,
 * expected and observed values, so one run reports every broken scheme.
 */
#include "itest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_MAX_FAIL_LINES 40

static const char *const schemes[] = {
    "dense_ring", "agsparse",  "hier_central", "balanced_par", "omnireduce",
    "spardl",	  "s2_sketch", "exdyna",       "exdyna_owner", "auto"};
#define N_SCHEMES ((int)(sizeof(schemes) / sizeof(schemes[0])))

typedef enum { SET_UNIFORM, SET_ZIPF, SET_TOPK } set_kind_t;

typedef struct sp_case {
	set_kind_t kind;
	double overlap; /* uniform */
	double density;
	const char *label;
} sp_case_t;

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double unit(uint64_t h)
{
	return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* The Zipf law's scale A with sum over i of min(1, A / (i + 1)^1.1) = density x n. */
static double zipf_scale(uint64_t n, double density)
{
	double lo = 0, hi = (double)n * 4, want = density * (double)n;
	for (int it = 0; it < 60; it++) {
		double A = (lo + hi) / 2, s = 0;
		for (uint64_t i = 0; i < n; i++) {
			double p = A / pow((double)(i + 1), 1.1);
			s += p > 1 ? 1 : p;
		}
		if (s < want)
			lo = A;
		else
			hi = A;
	}
	return (lo + hi) / 2;
}

/* Rank r's value at element i for the case (0: not in r's index set). */
static float sp_value(const sp_case_t *k, double zipf_A, int P, uint64_t seed, int r,
		      uint64_t i, int step)
{
	uint64_t hr = mix(seed ^ mix((uint64_t)r * 7919 + 1) ^ mix(i) ^ (uint64_t)step << 40);
	int v = (int)(hr >> 60) % 4 + 1; /* 1..4 */
	if (hr & 1)
		v = -v;
	switch (k->kind) {
	case SET_UNIFORM: {
		double hs = unit(mix(seed ^ 0xabcdefull ^ mix(i)));
		double p_priv = (1 - k->overlap) * k->density * P;
		int in = hs < k->overlap * k->density ||
			 ((int)(i % (uint64_t)P) == r && unit(mix(hr ^ 0x1234)) < p_priv);
		return in ? (float)v : 0;
	}
	case SET_ZIPF: {
		double p = zipf_A / pow((double)(i + 1), 1.1);
		return unit(mix(hr ^ 0x77)) < p ? (float)(v < 0 ? -v : v) : 0;
	}
	default: /* dense, to be top-k sparsified: integers in [-40, 40] */
		return (float)((int)(mix(hr ^ 0x99) % 81) - 40);
	}
}

typedef struct sp_state {
	int rank, P;
	uint64_t numel, seed;
	float *ref[2];	/* per step: the exact sum over ranks */
	float *mine[2]; /* per step: this rank's input */
	int n_fail;
	uint64_t hash;
} sp_state_t;

static void sp_failf(sp_state_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sp_failf(sp_state_t *s, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (s->n_fail++ < SP_MAX_FAIL_LINES)
		it_log("MISMATCH: %s", line);
}

static int lossy_name(const char *s)
{
	return !strcmp(s, "spardl") || !strcmp(s, "s2_sketch") || !strcmp(s, "exdyna") ||
	       !strcmp(s, "exdyna_owner");
}

static int known_scheme(const char *s)
{
	for (int i = 0; i < N_SCHEMES - 1; i++)
		if (!strcmp(s, schemes[i]))
			return 1;
	return 0;
}

static void hash_in(sp_state_t *s, const float *x, uint64_t n)
{
	const uint32_t *u = (const uint32_t *)x;
	for (uint64_t i = 0; i < n; i++)
		s->hash = (s->hash ^ u[i]) * 1099511628211ull;
}

/* One case x one scheme: registers, runs two steps, checks each. */
/* Checks a sparse result's form and expands it into x (the data area is scratch then). */
static void expand_sparse(sp_state_t *s, const sp_case_t *k, const char *scheme, sc_client_t *c,
			  const sc_tensor_t *t, float *x)
{
	size_t rn = sc_tensor_result_nnz(t);
	/* dense by contract with several trainers per node; sparse with one, a residual
	 * (lossy allowed, no sparsifier) included, since the case's union fits */
	int dense = sc_local_size(c) > 1;
	if (dense || rn == SC_RESULT_DENSE) {
		if (dense != (rn == SC_RESULT_DENSE))
			sp_failf(
			    s, "%s %s: the result came back %s (%d trainer(s) per node, %s)",
			    k->label, scheme, rn == SC_RESULT_DENSE ? "dense" : "sparse",
			    sc_local_size(c), sc_tensor_residual(t) ? "lossy" : "lossless");
		return;
	}
	const uint32_t *ri = sc_tensor_coo_indices(t);
	const float *rv = sc_tensor_coo_values(t);
	memset(x, 0, s->numel * sizeof(float));
	for (size_t j = 0; j < rn; j++) {
		if (ri[j] >= s->numel || (j && ri[j] <= ri[j - 1])) {
			sp_failf(s,
				 "%s %s: sparse result entry %zu (index %u) out of order or "
				 "range",
				 k->label, scheme, j, ri[j]);
			return;
		}
		x[ri[j]] = rv[j];
	}
}

static void run_one(sc_client_t *c, sp_state_t *s, const sp_case_t *k, int ci,
		    const char *scheme)
{
	uint64_t n = s->numel;
	int coo = k->kind != SET_TOPK, lossy = lossy_name(scheme),
	    is_auto = !strcmp(scheme, "auto");
	char name[160];
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};
	o.scheme = is_auto ? NULL : scheme;
	o.density = k->density;
	if (coo) {
		o.coo_capacity = n;
		o.allow_lossy = lossy;
	} else {
		o.allow_lossy = 1;
		o.sparsifier = SC_SPARSIFY_TOPK;
	}
	snprintf(name, sizeof(name), "itest.sparse.%d.%s", ci, scheme);
	sc_tensor_t *t = NULL, *d = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, n, &o, &t), "register '%s'", name);
	snprintf(name, sizeof(name), "itest.sparse.%d.%s.delta", ci, scheme);
	for (int step = 0; step < 2; step++) {
		/* input (the case's, computed once for every scheme) */
		const float *ref = s->ref[step], *mine = s->mine[step];
		size_t nnz = 0;
		uint32_t *idx = coo ? sc_tensor_coo_indices(t) : NULL;
		float *val = coo ? sc_tensor_coo_values(t) : NULL, *x = sc_tensor_data(t);
		for (uint64_t i = 0; i < n; i++) {
			if (!coo)
				x[i] = mine[i];
			else if (mine[i] != 0) {
				idx[nnz] = (uint32_t)i;
				val[nnz++] = mine[i];
			}
		}
		const float *res = sc_tensor_residual(t);
		if (res && !d)
			d = it_register(c, name, SC_FLOAT32, n);
		if (res)
			memcpy(sc_tensor_data(d), res, n * sizeof(float));
		sc_handle_t h = 0;
		int sparse_out = coo && step == 1;
		sc_status_t st = !coo ? sc_allreduce_async(c, t, SC_OP_SUM, &h)
				 : sparse_out
				     ? sc_allreduce_coo_sparse_async(c, t, nnz, SC_OP_SUM, &h)
				     : sc_allreduce_coo_async(c, t, nnz, SC_OP_SUM, &h);
		IT_CHECK_SC(st, "%s %s step %d: submit", k->label, scheme, step);
		int w = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (w != SC_OK)
			IT_FAIL("%s scheme %s step %d: %s (%s)", k->label, scheme, step,
				it_wait_name(w), it_wait_error());
		const float *rsum = NULL;
		if (res) {
			float *dd = sc_tensor_data(d);
			for (uint64_t i = 0; i < n; i++)
				dd[i] = res[i] - dd[i];
			IT_CHECK_SC(sc_allreduce(c, d, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "%s %s step %d: residual changes", k->label, scheme, step);
			rsum = dd;
		}
		sc_tensor_stats_t ts = {.struct_size = sizeof(ts)};
		IT_CHECK_SC(sc_tensor_stats(c, t, &ts), "stats of %s", sc_tensor_name(t));
		const char *ran = ts.scheme;
		if (!known_scheme(ran))
			sp_failf(s, "%s %s step %d: sc_tensor_stats names scheme '%s'",
				 k->label, scheme, step, ran);
		else if (!is_auto && strcmp(ran, scheme))
			sp_failf(s, "%s %s step %d: pinned %s but the daemon ran %s", k->label,
				 scheme, step, scheme, ran);
		/* the time inside exchanges is part of the measured time, and there is some
		 * whenever there are peers to exchange with */
		if (!(ts.exchange_s >= 0 && ts.exchange_s <= ts.measured_s) ||
		    (s->P > 1 && !(ts.exchange_s > 0)))
			sp_failf(s, "%s %s step %d: %.6f s inside exchanges of %.6f s measured",
				 k->label, scheme, step, ts.exchange_s, ts.measured_s);
		/* the engine thread's CPU time: some, and no more than the call's wall time */
		if (!(ts.cpu_s > 0 && ts.cpu_s <= ts.measured_s * 1.01 + 1e-4))
			sp_failf(s, "%s %s step %d: %.6f s of CPU in %.6f s measured", k->label,
				 scheme, step, ts.cpu_s, ts.measured_s);
		for (int v = 0; step == 0 && v < 2;
		     v++) { /* callers built with older headers */
			sc_tensor_stats_t os;
			size_t old = v ? offsetof(sc_tensor_stats_t, cpu_s)
				       : offsetof(sc_tensor_stats_t, exchange_s);
			memset(&os, 0xa5, sizeof(os));
			os.struct_size = (uint32_t)old;
			IT_CHECK_SC(sc_tensor_stats(c, t, &os),
				    "stats of %s, older struct_size", sc_tensor_name(t));
			const unsigned char *tail = (const unsigned char *)&os + old;
			for (size_t b = 0; b < sizeof(os) - old; b++)
				if (tail[b] != 0xa5)
					sp_failf(s,
						 "sc_tensor_stats wrote past struct_size %zu",
						 old);
			if (os.calls != ts.calls || strcmp(os.scheme, ts.scheme))
				sp_failf(
				    s,
				    "sc_tensor_stats, older struct_size: calls %llu, scheme "
				    "'%s' (full: %llu, '%s')",
				    (unsigned long long)os.calls, os.scheme,
				    (unsigned long long)ts.calls, ts.scheme);
		}
		/* exact for everything but the sketch (its estimate is not integer) */
		int exact = strcmp(ran, "s2_sketch") != 0;
		double maxref = 1;
		for (uint64_t i = 0; i < n; i++)
			maxref = fmax(maxref, fabs(ref[i]));
		double tol = exact ? 0 : 1e-4 * maxref * s->P;
		uint64_t wrong = 0;
		double maxerr = 0;
		uint64_t first = 0;
		x = sc_tensor_data(t);
		if (sparse_out)
			expand_sparse(s, k, scheme, c, t, x);
		for (uint64_t i = 0; i < n; i++) {
			double e = (double)ref[i] - ((double)x[i] + (rsum ? rsum[i] : 0));
			if (fabs(e) > tol) {
				if (!wrong)
					first = i;
				wrong++;
				maxerr = fmax(maxerr, fabs(e));
			}
		}
		if (wrong)
			sp_failf(
			    s,
			    "%s scheme %s (ran %s, %s) step %d: %llu of %llu elements wrong, "
			    "largest error %g; first [%llu]: expected %g, got %g%s%g",
			    k->label, scheme, ran,
			    rsum ? "result + residual changes" : "exact sum", step,
			    (unsigned long long)wrong, (unsigned long long)n, maxerr,
			    (unsigned long long)first, (double)ref[first], (double)x[first],
			    rsum ? " + " : " (no residual) ", rsum ? (double)rsum[first] : 0.0);
		if (!res && (lossy || !coo))
			sp_failf(s, "%s %s: the tensor has no residual", k->label, scheme);
		hash_in(s, x, n);
	}
}

int it_sparse(int argc, char **argv)
{
	sp_state_t s = {.numel = 100003, .seed = 977, .hash = 1469598103934665603ull};
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--numel") && i + 1 < argc)
			s.numel = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--scheme") && i + 1 < argc)
			only = argv[++i];
		else
			IT_FAIL("unknown option '%s' (sparse [--numel N] [--scheme S])",
				argv[i]);
	}
	sc_client_t *c = it_connect();
	s.rank = sc_rank(c);
	s.P = sc_size(c);
	for (int st = 0; st < 2; st++) {
		s.ref[st] = malloc(s.numel * sizeof(float));
		s.mine[st] = malloc(s.numel * sizeof(float));
		if (!s.ref[st] || !s.mine[st])
			IT_FAIL("out of memory");
	}
	static const sp_case_t cases[] = {
	    {SET_UNIFORM, 0.0, 1e-4, "uniform overlap=none d=1e-4"},
	    {SET_UNIFORM, 0.0, 0.01, "uniform overlap=none d=0.01"},
	    {SET_UNIFORM, 0.5, 0.01, "uniform overlap=half d=0.01"},
	    {SET_UNIFORM, 1.0, 0.01, "uniform overlap=full d=0.01"},
	    {SET_UNIFORM, 0.5, 0.2, "uniform overlap=half d=0.2"},
	    {SET_UNIFORM, 1.0, 1.0, "uniform overlap=full d=1"},
	    {SET_UNIFORM, 0.0, 1.0, "uniform overlap=none d=1/P"},
	    {SET_ZIPF, 0, 1e-4, "zipf d=1e-4"},
	    {SET_ZIPF, 0, 1e-3, "zipf d=1e-3"},
	    {SET_ZIPF, 0, 0.03, "zipf d=0.03"},
	    {SET_ZIPF, 0, 0.3, "zipf d=0.3"},
	    {SET_ZIPF, 0, 1.0, "zipf d=1"},
	    {SET_TOPK, 0, 1e-3, "dense top-k d=1e-3"},
	    {SET_TOPK, 0, 0.01, "dense top-k d=0.01"},
	    {SET_TOPK, 0, 0.3, "dense top-k d=0.3"},
	};
	int n_cases = (int)(sizeof(cases) / sizeof(cases[0]));
	double t0 = it_now_s();
	for (int ci = 0; ci < n_cases; ci++) {
		const sp_case_t *k = &cases[ci];
		double A = k->kind == SET_ZIPF ? zipf_scale(s.numel, k->density) : 0;
		for (int st = 0; st < 2; st++) {
			memset(s.ref[st], 0, s.numel * sizeof(float));
			for (int r = 0; r < s.P; r++)
				for (uint64_t i = 0; i < s.numel; i++) {
					float v = sp_value(k, A, s.P, s.seed + (uint64_t)ci, r,
							   i, st);
					s.ref[st][i] += v;
					if (r == s.rank)
						s.mine[st][i] = v;
				}
		}
		for (int j = 0; j < N_SCHEMES; j++)
			if (!only || !strcmp(only, schemes[j]))
				run_one(c, &s, k, ci, schemes[j]);
	}
	/* every trainer's bits must agree: gather the hashes (three 22-bit pieces each) */
	sc_tensor_t *g = it_register(c, "itest.sparse.hashes", SC_FLOAT32, (size_t)s.P * 3);
	float *gv = sc_tensor_data(g);
	memset(gv, 0, sizeof(float) * (size_t)s.P * 3);
	for (int j = 0; j < 3; j++)
		gv[s.rank * 3 + j] = (float)((s.hash >> (22 * j)) & 0x3fffff);
	IT_CHECK_SC(sc_allreduce(c, g, SC_OP_SUM, IT_OP_TIMEOUT_MS), "hash gather");
	for (int r = 1; r < s.P; r++)
		for (int j = 0; j < 3; j++)
			if (gv[r * 3 + j] != gv[j])
				sp_failf(
				    &s,
				    "rank %d's results differ from rank 0's (hash piece %d)", r,
				    j);
	double fails = it_barrier(c, "sparse.fails", s.n_fail);
	it_log("%d cases x %d schemes over %llu elements in %.1f s; %d mismatch(es) here, %g "
	       "over all ranks",
	       n_cases, only ? 1 : N_SCHEMES, (unsigned long long)s.numel, it_now_s() - t0,
	       s.n_fail, fails);
	for (int st = 0; st < 2; st++) {
		free(s.ref[st]);
		free(s.mine[st]);
	}
	if (s.n_fail)
		IT_FAIL("%d mismatch(es), listed above", s.n_fail);
	sc_finalize(c);
	it_pass();
}
