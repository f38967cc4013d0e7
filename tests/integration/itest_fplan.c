/*
 * itest_fplan.c: fusion plans end to end (docs/design.md, "Fusion plans"). One trainer per
 * node. Every trainer registers 40 sparse tensors, magnitudes spread over 8 decades (even:
 * top-k 1%; odd: a hard threshold that selects a different count on every rank, so the
 * ranks' sparse sizes differ), and 6 small dense lossless tensors, and runs steps under
 * the daemons' default fusion (adaptive). Checks:
 *  - every sparse tensor receives elements at every step (no tensor goes missing), and
 *    each conserves its values: sum over ranks of input + residual before = result + sum
 *    of residual after, per tensor;
 *  - every node's `sparsectl stats --json` shows the same plan version and buffers, each
 *    of the 46 tensors in exactly one buffer, sparse and dense never together;
 *  - the dense tensors' fused results are bit-identical to the same step run with
 *    fusion_mode layerwise (every tensor alone).
 * --late and --whole: one planned buffer whose tensors come apart (late_steps,
 * whole_steps).
 */
#include "itest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NS = 40, ND = 6, STEPS = 8 };

static uint64_t s_numel(int l)
{
	return 1000 + 37 * (uint64_t)l;
}

static double s_scale(int l)
{
	return pow(10.0, -8.0 * l / (NS - 1));
}

static void fill_sparse(float *x, int l, int rank, int step)
{
	for (uint64_t i = 0; i < s_numel(l); i++) {
		uint64_t h = (i * 2654435761u + (uint64_t)rank * 7919 +
			      (uint64_t)step * 104729 + (uint64_t)l) %
			     100003;
		double v = s_scale(l) * (1.0 + (double)h / 1000.0) * (1 + rank);
		x[i] = (float)(h & 1 ? v : -v);
	}
}

static void fill_dense(float *x, int d, int rank, int step)
{
	for (uint64_t i = 0; i < 100 + 50 * (uint64_t)d; i++)
		x[i] =
		    sinf((float)i * 0.37f + (float)rank * 1.3f + (float)step) * 1000.0f / 3.0f;
}

/* Submits every tensor in ts[0..n-1] and waits for them all. */
static void step_all(sc_client_t *c, sc_tensor_t **ts, int n, const char *what)
{
	sc_handle_t h[NS + ND];
	for (int i = 0; i < n; i++)
		IT_CHECK_SC(sc_allreduce_async(c, ts[i], SC_OP_SUM, &h[i]), "%s: tensor %d",
			    what, i);
	for (int i = 0; i < n; i++) {
		int r = it_wait(c, h[i], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("%s: tensor %d: %s (%s)", what, i, it_wait_name(r),
				it_wait_error());
	}
}

/* The plan in stats: checks every fp. tensor is in one buffer and classes do not mix;
 * returns a hash of the version and the buffers (the same on every node). */
static uint32_t check_plan(const char *sock, int *version_p, int *buffers_p)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(sock, args);
	const it_json_t *f = it_json_get(s, "fusion");
	const it_json_t *v = f ? it_json_get(f, "plan_version") : NULL;
	const it_json_t *bs = f ? it_json_get(f, "buffers") : NULL;
	if (!v || v->type != IT_JNUM || !bs || bs->type != IT_JARR)
		IT_FAIL("stats --json has no fusion plan");
	if (!(v->num >= 1))
		IT_FAIL("stats --json: fusion plan version %g after %d steps", v->num, STEPS);
	uint32_t h = 2166136261u ^ (uint32_t)v->num;
	int seen[NS + ND] = {0};
	for (size_t b = 0; b < bs->n; b++) {
		const it_json_t *ts = it_json_get(bs->items[b], "tensors");
		if (!ts || ts->type != IT_JARR)
			IT_FAIL("stats --json: fusion buffer %zu has no tensors", b);
		int sparse = 0, dense = 0;
		for (size_t k = 0; k < ts->n; k++) {
			const char *nm = ts->items[k]->str;
			for (const char *p = nm; p && *p; p++)
				h = (h ^ (uint8_t)*p) * 16777619u;
			h = (h ^ (uint32_t)b) * 16777619u;
			int i;
			if (nm && sscanf(nm, "fp.s.%d", &i) == 1 && i >= 0 && i < NS)
				seen[i]++, sparse = 1;
			else if (nm && sscanf(nm, "fp.d.%d", &i) == 1 && i >= 0 && i < ND)
				seen[NS + i]++, dense = 1;
		}
		if (sparse && dense)
			IT_FAIL(
			    "stats --json: fusion buffer %zu holds sparse and dense tensors",
			    b);
	}
	for (int i = 0; i < NS + ND; i++)
		if (seen[i] != 1)
			IT_FAIL("stats --json: tensor %d is in %d fusion buffers", i, seen[i]);
	*version_p = (int)v->num;
	*buffers_p = (int)bs->n;
	it_json_free(s);
	return h % 65521;
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* fplan --bench N: N timed steps of the 46 tensors, no checks; rank 0 prints the median
 * and the mean step time (the fusion mode is the daemons', e.g. --daemon-arg
 * --fusion_mode --daemon-arg fixed). */
static void bench_steps(sc_client_t *c, sc_tensor_t **ts, int rank, int steps)
{
	double *t = calloc((size_t)steps + 1, sizeof(double)), sum = 0;
	if (!t)
		IT_FAIL("no memory for %d step times", steps);
	for (int step = 0; step < steps + 3; step++) { /* 3 untimed: the plan settles */
		for (int l = 0; l < NS; l++)
			fill_sparse(sc_tensor_data(ts[l]), l, rank, step);
		for (int d = 0; d < ND; d++)
			fill_dense(sc_tensor_data(ts[NS + d]), d, rank, step);
		it_barrier(c, "fplan.bench", 1);
		double t0 = it_now_s();
		step_all(c, ts, NS + ND, "bench step");
		if (step >= 3)
			sum += t[step - 3] = it_now_s() - t0;
	}
	qsort(t, (size_t)steps, sizeof(double), by_double);
	if (rank == 0)
		printf("fplan bench: %d steps, median %.3f ms, mean %.3f ms\n", steps,
		       t[steps / 2] * 1e3, sum / steps * 1e3);
	free(t);
}

/*
 * fplan --late: the trainers submit 8 tensors of one aligned buffer (the daemons at
 * fusion_buffers 1, fusion_wait_ms 500) 100 ms apart (a gap far under the wait, so that a
 * busy host's scheduling does not stretch one past it), as a slow backward pass hands them
 * over, and wait for them all, for 8 steps: each step's buffer waits while its tensors
 * keep coming (the wait runs from the latest, docs/design.md "Holding"), so the plan
 * stays one buffer of 8 tensors. (A wait from the first sent each step's buffer in two
 * pieces, and the plan learnt a break from them.)
 */
static void late_steps(sc_client_t *c)
{
	enum { NL = 8, LSTEPS = 8, GAP_MS = 100 };
	sc_tensor_t *ts[NL];
	char name[64];
	for (int l = 0; l < NL; l++) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o),
				      .allow_lossy = 1,
				      .sparsifier = SC_SPARSIFY_TOPK,
				      .density = 0.01};
		snprintf(name, sizeof(name), "fp.late.%d", l);
		IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, s_numel(l), &o, &ts[l]),
			    "register %s", name);
	}
	for (int step = 0; step < LSTEPS; step++) {
		sc_handle_t h[NL];
		for (int l = 0; l < NL; l++) {
			fill_sparse(sc_tensor_data(ts[l]), l, sc_rank(c), step);
			if (l > 0)
				it_sleep_ms(GAP_MS);
			IT_CHECK_SC(sc_allreduce_async(c, ts[l], SC_OP_SUM, &h[l]),
				    "step %d: tensor %d", step, l);
		}
		for (int l = 0; l < NL; l++) {
			int r = it_wait(c, h[l], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("step %d: tensor %d: %s (%s)", step, l, it_wait_name(r),
					it_wait_error());
		}
	}
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *f = it_json_get(s, "fusion");
	const it_json_t *bs = f ? it_json_get(f, "buffers") : NULL;
	const it_json_t *ts0 = bs && bs->type == IT_JARR && bs->n == 1
				   ? it_json_get(bs->items[0], "tensors")
				   : NULL;
	if (!ts0 || ts0->type != IT_JARR || ts0->n != NL)
		IT_FAIL(
		    "after %d steps of tensors %d ms apart the plan is %zu buffers, not one "
		    "of %d tensors",
		    LSTEPS, GAP_MS, bs && bs->type == IT_JARR ? bs->n : 0, NL);
	it_json_free(s);
	it_log("%d steps of %d tensors %d ms apart: the plan is still one buffer", LSTEPS, NL,
	       GAP_MS);
}

/*
 * fplan --whole (aligned, fusion_buffers 1): a planned buffer's announcements go together
 * (docs/design.md, "Announcing a planned buffer whole"). NW dense tensors handed over
 * GAP_MS apart, every step exact; once the plan holds them in one buffer, this node sends
 * at most 2 ReadyLists a step (each tensor alone would take NW) and kept back at least NW
 * - 2 announcements a step, also once the last tensor has a new form (a new cache id in
 * the old one's plan place). Then steps whose trainers wait for the first NW - 1 results
 * before they hand over the last tensor: the kept announcements go fusion_wait_ms after
 * the latest (run.sh gives 500 ms, far over GAP_MS, so that a busy host's scheduling
 * does not stretch a gap past it), each such step completes, exact, within 10 s (nothing waits
 * for a tensor that comes only after the results).
 */
static void whole_step(sc_client_t *c, sc_tensor_t **ts, int n, uint64_t seed, int split)
{
	enum { GAP_MS = 3 };
	sc_handle_t h[16];
	int rank = sc_rank(c), size = sc_size(c);
	double t0 = it_now_s();
	for (int l = 0; l < n; l++) {
		size_t numel = 256 + 64 * (size_t)l;
		it_fill(sc_tensor_data(ts[l]), SC_FLOAT32, numel, seed * 64 + (uint64_t)l, rank,
			1);
		if (l == n - 1 && split) /* the results of the others first */
			for (int k = 0; k < l; k++) {
				int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
				if (r != SC_OK)
					IT_FAIL("step %llu: tensor %d: %s (%s)",
						(unsigned long long)seed, k, it_wait_name(r),
						it_wait_error());
			}
		else if (l > 0)
			it_sleep_ms(GAP_MS);
		IT_CHECK_SC(sc_allreduce_async(c, ts[l], SC_OP_SUM, &h[l]),
			    "step %llu: tensor %d", (unsigned long long)seed, l);
	}
	for (int l = split ? n - 1 : 0; l < n; l++) {
		int r = it_wait(c, h[l], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("step %llu: tensor %d: %s (%s)", (unsigned long long)seed, l,
				it_wait_name(r), it_wait_error());
	}
	for (int l = 0; l < n; l++) {
		char why[256];
		size_t numel = 256 + 64 * (size_t)l;
		size_t wrong =
		    it_check(sc_tensor_data(ts[l]), SC_FLOAT32, numel, seed * 64 + (uint64_t)l,
			     size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("step %llu: tensor %d: %zu elements wrong: %s",
				(unsigned long long)seed, l, wrong, why);
	}
	if (split && it_now_s() - t0 > 10)
		IT_FAIL(
		    "step %llu, its last tensor handed over after the others' results, took "
		    "%.1f s",
		    (unsigned long long)seed, it_now_s() - t0);
}

static void whole_steps(sc_client_t *c)
{
	enum { NW = 8, WARM = 10, TIMED = 20, SPLIT = 3 };
	sc_tensor_t *ts[NW];
	char name[64];
	for (int l = 0; l < NW; l++) {
		snprintf(name, sizeof(name), "fp.whole.%d", l);
		ts[l] = it_register(c, name, SC_FLOAT32, 256 + 64 * (size_t)l);
	}
	uint64_t seed = 1;
	for (int i = 0; i < WARM; i++)
		whole_step(c, ts, NW, seed++, 0);
	double rl0 = it_node_stat("ready_lists"), kept0 = it_node_stat("announcements_kept");
	for (int i = 0; i < TIMED; i++)
		whole_step(c, ts, NW, seed++, 0);
	double rl = it_node_stat("ready_lists") - rl0;
	double kept = it_node_stat("announcements_kept") - kept0;
	it_log("%d steps of %d tensors: %.0f ReadyLists sent, %.0f announcements kept back",
	       TIMED, NW, rl, kept);
	if (rl > 2.0 * TIMED)
		IT_FAIL("%.0f ReadyLists in %d steps of one planned buffer of %d tensors: more "
			"than 2 a step",
			rl, TIMED, NW);
	if (kept < (NW - 2.0) * TIMED)
		IT_FAIL("%.0f announcements kept back in %d steps of %d tensors: fewer than %d "
			"a step",
			kept, TIMED, NW, NW - 2);
	/* the buffer's last tensor in a new form (a 2-D shape): it takes its old form's
	 * place in the plan, which the nodes' copy still names by the old id; the others
	 * go with it, one ReadyList a step, not fusion_wait_ms after it */
	static const uint64_t dims[2] = {22, 32}; /* 256 + 64 * 7 elements */
	IT_CHECK_SC(sc_tensor_set_shape(ts[NW - 1], 2, dims), "set the last tensor's shape");
	for (int i = 0; i < 3; i++)
		whole_step(c, ts, NW, seed++, 0);
	rl0 = it_node_stat("ready_lists");
	for (int i = 0; i < 10; i++)
		whole_step(c, ts, NW, seed++, 0);
	rl = it_node_stat("ready_lists") - rl0;
	it_log("10 steps with the last tensor in a new form: %.0f ReadyLists", rl);
	if (rl > 13)
		IT_FAIL("%.0f ReadyLists in 10 steps after the last tensor's form changed: its "
			"buffer's others were kept back for its old form",
			rl);
	for (int i = 0; i < SPLIT; i++)
		whole_step(c, ts, NW, seed++, 1);
	for (int i = 0; i < 5; i++) /* and whole steps again */
		whole_step(c, ts, NW, seed++, 0);
	it_log("%d steps whose last tensor came after the others' results: exact", SPLIT);
}

int it_fplan(int argc, char **argv)
{
	int bench = argc > 2 && !strcmp(argv[1], "--bench") ? atoi(argv[2]) : 0;
	sc_client_t *c = it_connect();
	if (argc > 1 && !strcmp(argv[1], "--whole")) {
		whole_steps(c);
		IT_CHECK_SC(sc_finalize(c), "sc_finalize");
		it_pass();
	}
	if (argc > 1 && !strcmp(argv[1], "--late")) {
		late_steps(c);
		IT_CHECK_SC(sc_finalize(c), "sc_finalize");
		it_pass();
	}
	int rank = sc_rank(c), size = sc_size(c);
	if (it_env.env_local_size > 1)
		IT_FAIL("fplan runs with one trainer per node");
	sc_tensor_t *ts[NS + ND], *cons;
	char name[64];
	for (int l = 0; l < NS; l++) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o), .allow_lossy = 1};
		if (l % 2 == 0) {
			o.sparsifier = SC_SPARSIFY_TOPK;
			o.density = 0.01;
		} else {
			o.sparsifier = SC_SPARSIFY_THRESHOLD;
			o.threshold = s_scale(l) * 50;
		}
		snprintf(name, sizeof(name), "fp.s.%02d", l);
		IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, s_numel(l), &o, &ts[l]),
			    "register %s", name);
	}
	for (int d = 0; d < ND; d++) {
		snprintf(name, sizeof(name), "fp.d.%d", d);
		ts[NS + d] = it_register(c, name, SC_FLOAT32, 100 + 50 * (size_t)d);
	}
	if (bench > 0) {
		bench_steps(c, ts, rank, bench);
		IT_CHECK_SC(sc_finalize(c), "sc_finalize");
		it_pass();
	}
	cons = it_register(c, "fp.conservation", SC_FLOAT64, NS);
	static float before[NS][3000];
	static float dense_fused[ND][400];
	for (int step = 0; step < STEPS; step++) {
		double *local = sc_tensor_data(cons);
		for (int l = 0; l < NS; l++) {
			float *x = sc_tensor_data(ts[l]);
			fill_sparse(x, l, rank, step);
			const float *res = sc_tensor_residual(ts[l]);
			local[l] = 0;
			for (uint64_t i = 0; i < s_numel(l); i++) {
				before[l][i] = res ? res[i] : 0;
				local[l] += (double)x[i] + before[l][i];
			}
		}
		for (int d = 0; d < ND; d++)
			fill_dense(sc_tensor_data(ts[NS + d]), d, rank, step);
		step_all(c, ts, NS + ND, "adaptive step");
		/* conservation: what went in = result + what stayed behind, per tensor */
		for (int l = 0; l < NS; l++) {
			const float *res = sc_tensor_residual(ts[l]);
			for (uint64_t i = 0; i < s_numel(l); i++)
				local[l] -= res ? res[i] : 0;
		}
		sc_handle_t h;
		IT_CHECK_SC(sc_allreduce_async(c, cons, SC_OP_SUM, &h), "conservation");
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("conservation: %s (%s)", it_wait_name(r), it_wait_error());
		for (int l = 0; l < NS; l++) {
			const float *x = sc_tensor_data(ts[l]);
			double got = 0, mag = 0;
			uint64_t nz = 0;
			for (uint64_t i = 0; i < s_numel(l); i++) {
				got += x[i];
				mag += fabs(x[i]);
				nz += x[i] != 0;
			}
			if (!nz)
				IT_FAIL("step %d: tensor fp.s.%02d received nothing", step, l);
			double want = ((double *)sc_tensor_data(cons))[l];
			double tol = 1e-4 * (mag + fabs(want)) + 1e-30;
			if (fabs(got - want) > tol)
				IT_FAIL(
				    "step %d: tensor fp.s.%02d: result sums to %g, inputs and "
				    "residuals to %g",
				    step, l, got, want);
		}
	}
	for (int d = 0; d < ND; d++)
		memcpy(dense_fused[d], sc_tensor_data(ts[NS + d]), (100 + 50 * (size_t)d) * 4);

	int version = 0, buffers = 0;
	uint32_t ph = check_plan(it_env.socket, &version, &buffers);
	double sum = it_barrier(c, "fplan", (double)ph);
	if (sum != (double)ph * size)
		IT_FAIL("the nodes' fusion plans differ (hash %u here, sum %g over %d ranks)",
			ph, sum, size);
	it_log("fusion plan version %d, %d buffers, the same on all %d ranks", version, buffers,
	       size);

	/* the last step's dense tensors again, each alone: bit-identical sums */
	if (rank == 0)
		it_ctl_config_set(it_env.socket, "fusion_mode", "layerwise");
	it_barrier(c, "fplan.layerwise", 1);
	for (int d = 0; d < ND; d++)
		fill_dense(sc_tensor_data(ts[NS + d]), d, rank, STEPS - 1);
	step_all(c, ts + NS, ND, "layerwise step");
	for (int d = 0; d < ND; d++)
		if (memcmp(dense_fused[d], sc_tensor_data(ts[NS + d]),
			   (100 + 50 * (size_t)d) * 4))
			IT_FAIL("tensor fp.d.%d: the fused sum differs from the layer-wise one",
				d);
	it_log("%d steps of %d fused tensors: none missing, each conserved; dense sums "
	       "bit-identical to layer-wise",
	       STEPS, NS + ND);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
