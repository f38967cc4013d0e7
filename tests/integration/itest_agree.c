/*
 * itest_agree.c: everything that decides a tensor's scheme or its bytes on the wire is
 * agreed by negotiation (world/agree.h). Rank 1 reduces one tensor differently from the
 * others, one option at a time: its input's form (dense or COO), a COO area, allow_lossy,
 * the sparsifier (none, top-k, natural, ExDyna, threshold), its density or threshold, the
 * sketch's rows or columns, S2's block, a pinned scheme. Every rank's wait must end with
 * SC_ERR_MISMATCH naming the tensor, rank 1, another rank and the field, promptly (not at
 * the operation timeout); then two other tensors, a small one and one of 1 Mi elements,
 * must come back exact three times in a row on every rank: the data plane is still in
 * step. A pinned scheme the daemon does not know is refused at registration.
 */
#include "itest.h"

#include <stdlib.h>

#include <stdio.h>
#include <string.h>

#define AG_NUMEL     4096
#define AG_ERR_LIMIT 20.0 /* seconds: far below the operation and stall timeouts */

typedef struct {
	const char *what;  /* the case, for the log */
	const char *field; /* a word the error must contain */
	sc_tensor_opts_t base, other;
	int base_coo, other_coo; /* submitted as COO */
} ag_case_t;

static sc_tensor_opts_t opts(int lossy, sc_sparsifier_t sp, double density, double thr,
			     size_t coo, uint32_t rows, double cols, const char *scheme)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .allow_lossy = lossy,
			      .sparsifier = sp,
			      .density = density,
			      .threshold = thr,
			      .scheme = scheme,
			      .coo_capacity = coo,
			      .sketch_rows = rows,
			      .sketch_cols = cols};
	return o;
}

static sc_tensor_opts_t with_block(sc_tensor_opts_t o, uint32_t block)
{
	o.block = block;
	return o;
}

/* Submits t (dense, or its values as a COO list of every index) and waits for its end. */
static int submit(sc_client_t *c, sc_tensor_t *t, int coo, char *msg, size_t len)
{
	sc_handle_t h = 0;
	sc_status_t st;
	it_fill(sc_tensor_data(t), SC_FLOAT32, AG_NUMEL, 11, sc_rank(c), 1);
	if (coo) {
		uint32_t *idx = sc_tensor_coo_indices(t);
		float *val = sc_tensor_coo_values(t);
		const float *d = sc_tensor_data(t);
		for (uint32_t i = 0; i < AG_NUMEL; i++)
			idx[i] = i, val[i] = d[i];
		st = sc_allreduce_coo_async(c, t, AG_NUMEL, SC_OP_SUM, &h);
	} else {
		st = sc_allreduce_async(c, t, SC_OP_SUM, &h);
	}
	if (st != SC_OK) {
		snprintf(msg, len, "%s", sc_last_error());
		return st;
	}
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	snprintf(msg, len, "%s", it_wait_error());
	return r;
}

/* Three exact steps of a small and of a large dense tensor. */
static void exact_after(sc_client_t *c, const char *after)
{
	static sc_tensor_t *small, *big;
	const size_t ns = 3, nb = (size_t)1 << 20;
	if (!small) {
		small = it_register(c, "agree.after.small", SC_FLOAT32, ns);
		big = it_register(c, "agree.after.big", SC_FLOAT32, nb);
	}
	for (int step = 0; step < 3; step++) {
		sc_tensor_t *ts[2] = {small, big};
		size_t ns_[2] = {ns, nb};
		for (int k = 0; k < 2; k++) {
			char why[512];
			uint64_t seed = 100 + (uint64_t)step * 2 + (uint64_t)k;
			it_fill(sc_tensor_data(ts[k]), SC_FLOAT32, ns_[k], seed, sc_rank(c), 1);
			IT_CHECK_SC(sc_allreduce(c, ts[k], SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "step %d of %s after the %s mismatch", step,
				    sc_tensor_name(ts[k]), after);
			size_t wrong = it_check(sc_tensor_data(ts[k]), SC_FLOAT32, ns_[k], seed,
						sc_size(c), 1, SC_OP_SUM, why, sizeof(why));
			if (wrong)
				IT_FAIL("step %d of '%s' after the %s mismatch: %zu of %zu "
					"elements wrong: %s",
					step, sc_tensor_name(ts[k]), after, wrong, ns_[k], why);
		}
	}
}

static void run_case(sc_client_t *c, int i, const ag_case_t *k)
{
	char name[96], msg[2048];
	snprintf(name, sizeof(name), "agree.%d", i);
	int me = sc_rank(c) == 1;
	sc_tensor_t *t = NULL;
	double t0 = it_now_s();
	IT_CHECK_SC(
	    sc_register_ex(c, name, SC_FLOAT32, AG_NUMEL, me ? &k->other : &k->base, &t),
	    "sc_register_ex('%s') (%s)", name, k->what);
	int r = submit(c, t, me ? k->other_coo : k->base_coo, msg, sizeof(msg));
	double dt = it_now_s() - t0;
	if (r != SC_ERR_MISMATCH)
		IT_FAIL(
		    "'%s': %s differs on rank 1: expected SC_ERR_MISMATCH on every rank, got "
		    "%s after %.1f s: %s",
		    name, k->what, it_wait_name(r), dt, msg);
	if (dt > AG_ERR_LIMIT)
		IT_FAIL("'%s' (%s): SC_ERR_MISMATCH only after %.1f s", name, k->what, dt);
	char quoted[128];
	snprintf(quoted, sizeof(quoted), "'%s'", name);
	if (!strstr(msg, quoted) || !strstr(msg, k->field) || !it_mentions_rank(msg, 1) ||
	    !it_mentions_rank(msg, 0))
		IT_FAIL("the SC_ERR_MISMATCH of '%s' (%s) does not name the tensor, the field "
			"'%s', rank 1 and rank 0: %s",
			name, k->what, k->field, msg);
	it_log("%s: SC_ERR_MISMATCH after %.2f s: %s", k->what, dt, msg);
	exact_after(c, k->what);
}

int it_agree(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	if (sc_size(c) < 2 || sc_local_size(c) != 1)
		IT_FAIL(
		    "needs 2 or more nodes of one trainer each, the job has %d trainers, %d "
		    "per node",
		    sc_size(c), sc_local_size(c));
	const sc_sparsifier_t N = SC_SPARSIFY_NONE, T = SC_SPARSIFY_TOPK;
	const ag_case_t cases[] = {
	    {"dense on the others, COO on rank 1 (registered for it)", "input",
	     opts(0, N, 0, 0, 0, 0, 0, NULL), opts(0, N, 0, 0, AG_NUMEL, 0, 0, NULL), 0, 1},
	    {"COO input on rank 1 alone, every rank with a COO area", "input",
	     opts(0, N, 0, 0, AG_NUMEL, 0, 0, NULL), opts(0, N, 0, 0, AG_NUMEL, 0, 0, NULL), 0,
	     1},
	    {"a COO area on rank 1 alone", "COO area", opts(0, N, 0, 0, 0, 0, 0, NULL),
	     opts(0, N, 0, 0, AG_NUMEL, 0, 0, NULL), 0, 0},
	    {"allow_lossy", "allow_lossy", opts(0, N, 0, 0, 0, 0, 0, NULL),
	     opts(1, N, 0, 0, 0, 0, 0, NULL), 0, 0},
	    {"a top-k sparsifier", "sparsifier", opts(0, N, 0, 0, 0, 0, 0, NULL),
	     opts(0, T, 0.1, 0, 0, 0, 0, NULL), 0, 0},
	    {"natural", "sparsifier", opts(0, N, 0, 0, 0, 0, 0, NULL),
	     opts(0, SC_SPARSIFY_NATURAL, 0, 0, 0, 0, 0, NULL), 0, 0},
	    {"ExDyna against top-k", "sparsifier", opts(0, T, 0.1, 0, 0, 0, 0, NULL),
	     opts(0, SC_SPARSIFY_EXDYNA, 0.1, 0, 0, 0, 0, NULL), 0, 0},
	    {"DGC against top-k", "sparsifier", opts(0, T, 0.1, 0, 0, 0, 0, NULL),
	     opts(0, SC_SPARSIFY_DGC, 0.1, 0, 0, 0, 0, NULL), 0, 0},
	    {"the top-k density", "density", opts(0, T, 0.1, 0, 0, 0, 0, NULL),
	     opts(0, T, 0.2, 0, 0, 0, 0, NULL), 0, 0},
	    {"the threshold", "threshold",
	     opts(0, SC_SPARSIFY_THRESHOLD, 0, 0.5, 0, 0, 0, NULL),
	     opts(0, SC_SPARSIFY_THRESHOLD, 0, 0.25, 0, 0, 0, NULL), 0, 0},
	    {"the sketch rows", "sketch rows", opts(1, N, 0, 0, 0, 0, 0, "s2_sketch"),
	     opts(1, N, 0, 0, 0, 3, 0, "s2_sketch"), 0, 0},
	    {"the sketch columns", "sketch columns", opts(1, N, 0, 0, 0, 0, 0, "s2_sketch"),
	     opts(1, N, 0, 0, 0, 0, 4, "s2_sketch"), 0, 0},
	    {"a lossy pin", "pinned scheme", opts(1, N, 0, 0, 0, 0, 0, NULL),
	     opts(1, N, 0, 0, 0, 0, 0, "spardl"), 0, 0},
	    {"a pinned scheme", "pinned scheme", opts(0, N, 0, 0, 0, 0, 0, "agsparse"),
	     opts(0, N, 0, 0, 0, 0, 0, "dense_ring"), 0, 0},
	    {"the S2 bitmap block", "block", opts(1, N, 0, 0, 0, 0, 0, "s2_sketch"),
	     with_block(opts(1, N, 0, 0, 0, 0, 0, "s2_sketch"), 64), 0, 0},
	};
	(void)argc, (void)argv;
	exact_after(c, "(none yet)");
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		run_case(c, (int)i, &cases[i]);
	/* a pin the daemon does not know: refused where it is given, never ignored */
	sc_tensor_opts_t bad = opts(0, N, 0, 0, 0, 0, 0, "no_such_scheme");
	sc_tensor_t *t = NULL;
	sc_status_t st = sc_register_ex(c, "agree.badpin", SC_FLOAT32, 16, &bad, &t);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "no_such_scheme"))
		IT_FAIL("a tensor pinned to scheme 'no_such_scheme': %s (%s), expected "
			"SC_ERR_INVALID naming the scheme",
			sc_status_name(st), sc_last_error());
	it_log("unknown pin refused: %s", sc_last_error());
	exact_after(c, "unknown pin");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * late [SLEEP_MS] (stall_timeout_ms 1500): rank 0 submits step 1 of a tensor SLEEP_MS
 * (2500) late, as a checkpoint or an evaluation on one rank does. The others' step 1 fails
 * with SC_ERR_STALLED naming rank 0, and they go on to step 2 at once; rank 0's late step 1
 * must then fail too (SC_ERR_STALLED, saying it was late), not pair with the others' step
 * 2; and every later step, each with its own values, is exact on every rank. A sleep past
 * two stall timeouts makes rank 0 owe two failed steps (world/late.c counts them): both
 * fail on rank 0 too, and the first step that succeeds is exact. So the failed steps are
 * steps 1 .. k for some k >= 1, and every step after them is exact.
 */
int it_late(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	const size_t n = 1000;
	const int sleep_ms = argc > 1 ? atoi(argv[1]) : 2500;
	char why[512];
	sc_tensor_t *g = it_register(c, "late.g", SC_FLOAT32, n);
	int failed = 0, succeeded_after = 0;
	for (int step = 0; step < 8; step++) {
		if (step == 1 && rank == 0)
			it_sleep_ms(sleep_ms);
		it_fill(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step, rank, 1);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "step %d of 'late.g'",
			    step);
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		if (step >= 1 && !succeeded_after && r != SC_OK) {
			if (r != SC_ERR_STALLED || !it_mentions_rank(it_wait_error(), 0) ||
			    (rank == 0 && !strstr(it_wait_error(), "late")))
				IT_FAIL(
				    "step %d of 'late.g', rank 0 late: expected SC_ERR_STALLED "
				    "naming rank 0%s, got %s: %s",
				    step, rank == 0 ? " and its late submission" : "",
				    it_wait_name(r), it_wait_error());
			it_log("step %d: %s", step, it_wait_error());
			failed++;
			continue;
		}
		if (step >= 1 && !failed)
			IT_FAIL("step %d of 'late.g' succeeded, but rank 0 came %d ms late to "
				"step 1",
				step, sleep_ms);
		if (step >= 1)
			succeeded_after = 1;
		if (r != SC_OK)
			IT_FAIL("step %d of 'late.g': %s: %s", step, it_wait_name(r),
				it_wait_error());
		size_t wrong = it_check(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step,
					size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL(
			    "step %d of 'late.g' after rank 0's late step: %zu of %zu elements "
			    "wrong (another step's values paired in?): %s",
			    step, wrong, n, why);
	}
	if (!succeeded_after)
		IT_FAIL("no step of 'late.g' succeeded after rank 0's late one");
	it_log("%d step(s) failed for rank 0's lateness of %d ms", failed, sleep_ms);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * late-exit leave | again (stall_timeout_ms 1500; run.sh runs the two as two jobs, one
 * after the other, on the same daemons). leave: rank 0 sleeps 2500 ms before step 1 of
 * 'lx.g' and then ends its session cleanly without submitting it; the others' step 1 fails
 * with SC_ERR_STALLED, so rank 0's node owes that step when its last trainer goes.
 * again: a new job's trainers run steps 0-5 of 'lx.g', each exact on every rank. The
 * coordinator forgets what the old job's trainers owed when the node's last one leaves
 * cleanly (NodeState.no_trainers); before, the new job's step 0 on rank 0 was refused as
 * the old job's late step, and its step 1 paired with the others' step 0.
 */
int it_late_exit(int argc, char **argv)
{
	if (argc < 2 || (strcmp(argv[1], "leave") && strcmp(argv[1], "again")))
		IT_FAIL("usage: late-exit leave|again");
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	const size_t n = 1000;
	char why[512];
	sc_tensor_t *g = it_register(c, "lx.g", SC_FLOAT32, n);
	int leave = !strcmp(argv[1], "leave");
	for (int step = 0; step < (leave ? 2 : 6); step++) {
		if (leave && step == 1 && rank == 0) {
			it_sleep_ms(2500);
			it_log("rank 0 leaves without step 1");
			break;
		}
		it_fill(sc_tensor_data(g), SC_FLOAT32, n, 2000 + (uint64_t)step, rank, 1);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "step %d of 'lx.g'", step);
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		if (leave && step == 1) {
			if (r != SC_ERR_STALLED || !it_mentions_rank(it_wait_error(), 0))
				IT_FAIL(
				    "step 1 of 'lx.g', rank 0 gone: expected SC_ERR_STALLED "
				    "naming rank 0, got %s: %s",
				    it_wait_name(r), it_wait_error());
			break;
		}
		if (r != SC_OK)
			IT_FAIL("%s job, step %d of 'lx.g': %s: %s", argv[1], step,
				it_wait_name(r), it_wait_error());
		size_t wrong = it_check(sc_tensor_data(g), SC_FLOAT32, n, 2000 + (uint64_t)step,
					size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("%s job, step %d of 'lx.g': %zu of %zu elements wrong (another "
				"step's values paired in?): %s",
				argv[1], step, wrong, n, why);
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * late-reform (3 x 1, stall_timeout_ms 1500, run.sh resetting the data-plane connection
 * between ranks 1 and 2 meanwhile): rank 0 submits step 1 of 'lr.g' 4 s late. The
 * others' step 1 fails with SC_ERR_STALLED at 1.5 s, so rank 0's node owes that step
 * (world/late.c). Then ranks 1 and 2 run allreduces in the process set {1, 2} until one
 * fails because the world re-forms (a connection reset between them), and submit step 2
 * once rank 0 is about to wake. Rank 0's late step 1 must still fail after the re-form,
 * and its step 2 pair with the others' step 2: before, the re-form dropped what rank 0's
 * node owed, and its step 1 paired with the others' step 2 (SC_OK with wrong values).
 */
int it_late_reform(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c), set = 0, pair[2] = {1, 2};
	const size_t n = 1000;
	const int sleep_ms = 4000;
	char why[512];
	(void)argc, (void)argv;
	if (size != 3)
		IT_FAIL("late-reform runs with 3 trainers, not %d", size);
	IT_CHECK_SC(sc_process_set_add(c, pair, 2, IT_OP_TIMEOUT_MS, &set), "the set {1, 2}");
	sc_tensor_t *g = it_register(c, "lr.g", SC_FLOAT32, n), *p = NULL;
	if (rank != 0) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o), .process_set = set};
		IT_CHECK_SC(sc_register_ex(c, "lr.p", SC_FLOAT32, n, &o, &p),
			    "register 'lr.p'");
	}
	int reformed = 0;
	for (int step = 0; step < 5; step++) {
		double t0 = it_now_s();
		if (step == 1 && rank == 0)
			it_sleep_ms(sleep_ms);
		/* ranks 1 and 2, past the stall of step 1: traffic between them until the world
		 * re-forms (rank 1 tells run.sh to reset their connection: the file
		 * LATE_REFORM_MARK names), then step 2 half a second after rank 0 wakes */
		const char *mark = getenv("LATE_REFORM_MARK");
		FILE *f = step == 2 && rank == 1 && mark ? fopen(mark, "w") : NULL;
		if (f)
			fclose(f);
		for (int k = 0; step == 2 && rank != 0 && k < 40; k++) { /* alike on both */
			it_fill(sc_tensor_data(p), SC_FLOAT32, n, 5000 + (uint64_t)k, rank, 1);
			sc_status_t st = sc_allreduce(c, p, SC_OP_SUM, IT_OP_TIMEOUT_MS);
			if (st != SC_OK && strstr(sc_last_error(), "the world re-forms"))
				reformed = 1;
			else if (st != SC_OK)
				IT_FAIL("'lr.p' in the set {1, 2}: %s: %s", sc_status_name(st),
					sc_last_error());
			it_sleep_ms(30);
		}
		if (step == 2 && rank != 0) { /* one of them at least saw it */
			float *v = sc_tensor_data(p);
			for (size_t i = 0; i < n; i++)
				v[i] = (float)reformed;
			IT_CHECK_SC(sc_allreduce(c, p, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "'lr.p' after the re-form");
			if (v[0] == 0)
				IT_FAIL("the world did not re-form while rank 0 slept: no "
					"connection reset between ranks 1 and 2 (run under "
					"run.sh's \"late reform\")");
		}
		if (step == 2 && rank != 0)
			it_sleep_ms((int)((3.0 - (it_now_s() - t0)) * 1000));
		it_fill(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step, rank, 1);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "step %d of 'lr.g'", step);
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		if (step == 1 && r != SC_OK) {
			it_log("step 1: %s", it_wait_error());
			continue;
		}
		if (r != SC_OK)
			IT_FAIL("step %d of 'lr.g' after rank 0's late step 1: %s: %s", step,
				it_wait_name(r), it_wait_error());
		if (step == 1)
			IT_FAIL("step 1 of 'lr.g' succeeded, but rank 0 came %d ms late to it",
				sleep_ms);
		size_t wrong = it_check(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step,
					size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL(
			    "step %d of 'lr.g' after rank 0's late step 1 and a re-form: %zu "
			    "of %zu elements wrong (another step's values paired in?): %s",
			    step, wrong, n, why);
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * late-release (two trainers a node): every trainer registers 'lr.g' for each step and
 * releases it after, and rank 0 comes sleep_ms late to step 1. Its node's step 1 fails at
 * the stall timeout; rank 0's late submission must answer that failed step, and every
 * later step must be exact on every rank (never rank 0's step 1 paired with the other
 * trainer's step 2).
 */
int it_late_release(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	const size_t n = 1000;
	const int sleep_ms = argc > 1 ? atoi(argv[1]) : 2500;
	char why[512];
	int failed = 0;
	for (int step = 0; step < 6; step++) {
		if (step == 1 && rank == 0)
			it_sleep_ms(sleep_ms);
		sc_tensor_t *g = it_register(c, "lr.g", SC_FLOAT32, n);
		it_fill(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step, rank, 1);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "step %d of 'lr.g'", step);
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		if (r != SC_OK) {
			it_log("step %d: %s: %s", step, it_wait_name(r), it_wait_error());
			if (step != 1)
				IT_FAIL("step %d of 'lr.g' failed: %s: %s", step,
					it_wait_name(r), it_wait_error());
			failed++;
		} else {
			size_t wrong =
			    it_check(sc_tensor_data(g), SC_FLOAT32, n, 1000 + (uint64_t)step,
				     size, 1, SC_OP_SUM, why, sizeof(why));
			if (wrong)
				IT_FAIL(
				    "step %d of 'lr.g' returned SC_OK with %zu of %zu elements "
				    "wrong (another step's values paired in): %s",
				    step, wrong, n, why);
			if (step == 1)
				IT_FAIL(
				    "step 1 of 'lr.g' succeeded though rank 0 came %d ms late",
				    sleep_ms);
		}
		IT_CHECK_SC(sc_tensor_release(c, g), "releasing 'lr.g' after step %d", step);
	}
	it_log("%d step(s) failed", failed);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * coo-forms (one trainer per node): rank 1 writes its COO list unsorted, with repeated
 * indices; every rank asks for a sparse result. Every rank must get the same form, sparse,
 * exact (the engine sorts its own copy of the list). Then rank 1 gives one entry more than
 * the COO area holds: every rank's operation fails promptly with SC_ERR_LIMIT naming rank
 * 1, not only rank 1's at once and the others' at their stall timeout; a valid step is
 * then exact. "all-over" (two trainers a node): every trainer over the capacity, each
 * refused, and the next valid step still exact on every trainer (each refusal answers
 * the step its node already failed).
 */
/* Writes rank's list of step into t's COO area: indices rank*7 + 97*k (k < cap) with
 * values 1 + step; rank 1 writes them backwards, each twice (0.5 and 0.5 + step). */
static size_t coo_forms_list(sc_tensor_t *t, int rank, int step, uint32_t cap)
{
	uint32_t *idx = sc_tensor_coo_indices(t);
	float *val = sc_tensor_coo_values(t);
	size_t nnz = 0;
	for (uint32_t k = 0; k < cap; k++) {
		uint32_t i = (uint32_t)rank * 7 + 97 * (rank == 1 ? cap - 1 - k : k);
		if (rank == 1) {
			idx[nnz] = i, val[nnz++] = 0.5f;
			idx[nnz] = i, val[nnz++] = 0.5f + (float)step;
		} else {
			idx[nnz] = i, val[nnz++] = 1.0f + (float)step;
		}
	}
	return nnz;
}

int it_coo_forms(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	const uint32_t numel = 1 << 16, cap = 64;
	/* "all-over": every trainer over the capacity (a node's trainers each refused) */
	int all_over = argc > 1 && !strcmp(argv[1], "all-over");
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .coo_capacity = 2 * cap * (size_t)size};
	sc_tensor_t *t;
	IT_CHECK_SC(sc_register_ex(c, "coo.forms", SC_FLOAT32, numel, &o, &t), "register");
	static float want[1 << 16];
	for (int step = 0; step < (all_over ? 0 : 3); step++) { /* sparse: one trainer a node */
		memset(want, 0, sizeof(want));
		for (int r = 0; r < size; r++)
			for (uint32_t k = 0; k < cap; k++)
				want[(uint32_t)r * 7 + 97 * k] += 1.0f + (float)step;
		size_t nnz = coo_forms_list(t, rank, step, cap);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_coo_sparse_async(c, t, nnz, SC_OP_SUM, &h), "step %d",
			    step);
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("step %d of 'coo.forms': %s: %s", step, it_wait_name(r),
				it_wait_error());
		size_t got = sc_tensor_result_nnz(t);
		if (got == SC_RESULT_DENSE)
			IT_FAIL(
			    "step %d of 'coo.forms': a dense result on rank %d (rank 1's list "
			    "unsorted): every rank must get the same form, sparse",
			    step, rank);
		const uint32_t *idx = sc_tensor_coo_indices(t);
		const float *val = sc_tensor_coo_values(t);
		size_t listed = 0;
		for (size_t k = 0; k < got; k++) {
			if (k && idx[k] <= idx[k - 1])
				IT_FAIL("step %d: result index %u at %zu not ascending", step,
					idx[k], k);
			if (idx[k] >= numel || val[k] != want[idx[k]])
				IT_FAIL("step %d: index %u sums %g, expected %g", step, idx[k],
					(double)val[k],
					idx[k] < numel ? (double)want[idx[k]] : 0.0);
			listed += want[idx[k]] != 0;
		}
		if (listed != (size_t)size * cap)
			IT_FAIL("step %d: %zu of the %zu non-zero indices in the result", step,
				listed, (size_t)size * cap);
	}
	/* one entry over the capacity on rank 1 */
	size_t nnz = rank == 1 || all_over ? 2 * cap * (size_t)size + 1
					   : coo_forms_list(t, rank, 0, cap);
	sc_handle_t h = 0;
	double t0 = it_now_s();
	sc_status_t st = sc_allreduce_coo_async(c, t, nnz, SC_OP_SUM, &h);
	int r = st == SC_OK ? it_wait(c, h, IT_ERROR_TIMEOUT_MS) : st;
	const char *why = st == SC_OK ? it_wait_error() : sc_last_error();
	if (r != SC_ERR_LIMIT || (!all_over && !it_mentions_rank(why, 1)) ||
	    !strstr(why, "capacity"))
		IT_FAIL("rank 1 over the COO capacity: expected SC_ERR_LIMIT naming rank 1 and "
			"the capacity on every rank, got %s: %s",
			it_wait_name(r), why);
	if (it_now_s() - t0 > AG_ERR_LIMIT)
		IT_FAIL("rank 1 over the COO capacity: refused here only after %.1f s",
			it_now_s() - t0);
	it_log("over the capacity: %s", why);
	nnz = coo_forms_list(t, rank, 0, cap);
	IT_CHECK_SC(sc_allreduce_coo_async(c, t, nnz, SC_OP_SUM, &h), "valid step");
	if ((r = it_wait(c, h, IT_OP_TIMEOUT_MS)) != SC_OK)
		IT_FAIL("the step after the refusal: %s: %s", it_wait_name(r), it_wait_error());
	memset(want, 0, sizeof(want));
	for (int q = 0; q < size; q++)
		for (uint32_t k = 0; k < cap; k++)
			want[(uint32_t)q * 7 + 97 * k] += 1.0f;
	const float *d = sc_tensor_data(t);
	for (uint32_t i = 0; i < numel; i++)
		if (d[i] != want[i])
			IT_FAIL("the step after the refusal: [%u] = %g, expected %g", i,
				(double)d[i], (double)want[i]);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
