/*
 * itest_fast.c: fast mode (fast_path 1, docs/design.md "Fast mode"). Run with
 * --daemon-arg --fast_path --daemon-arg 1.
 *
 * fast STEPS: STEPS exact allreduces of one 4 KiB tensor; this node's sparsectl stats must
 *   show at least 90% of them as kept fast turns.
 * fast shape [ROUNDS]: ROUNDS times (1 unless given): exact steps until fast mode has
 *   begun, then the last rank gives the tensor another shape: every rank's step fails with
 *   SC_ERR_MISMATCH naming both shapes; then exact steps again at once. With per-node=2
 *   the last node's two trainers disagree: that node fails the step on its own.
 * fast stall: exact steps until fast mode has begun, then rank 1 skips a step: every other
 *   rank's step fails with SC_ERR_STALLED naming rank 1, rank 1's late step is refused
 *   (never paired with the others' next step); then exact steps again. Run with
 *   stall_timeout_ms 3000.
 * fast group: exact steps until fast mode has begun, then a grouped allreduce whose first
 *   member is that tensor, its second member submitted 300 ms later: both members exact
 *   (the tensor leaves the epoch and is announced with its group); then exact steps again.
 *   Run with stall_timeout_ms 3000.
 * fast cycle K STEPS: STEPS steps of a cycle of K (2 or 3) tensors of different sizes, an
 *   exact allreduce of each in turn: at least 80% of them kept fast turns (a cycle of K
 *   cached buffers); then 100 steps of the cycle in the other order, exact, in a new
 *   epoch.
 * fast reset STEPS: STEPS steps of one 4 KiB tensor, the last rank a little behind the
 *   others (1 ms before each), while run.sh resets data-plane connections (the world
 *   re-forms in the middle of fast turns): every step is exact or fails, never SC_OK with
 *   other values (a step paired with another rank's next); some are kept fast turns.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAST_NUMEL 1024 /* 4 KiB of float32 */

/* One allreduce of t (numel elements) with the pattern of seed: its status, its error in
 * msg. */
static sc_status_t step_n(sc_client_t *c, sc_tensor_t *t, size_t numel, uint64_t seed,
			  char *msg, size_t len)
{
	it_fill(sc_tensor_data(t), SC_FLOAT32, numel, seed, sc_rank(c), 1);
	sc_status_t st = sc_allreduce(c, t, SC_OP_SUM, IT_ERROR_TIMEOUT_MS);
	snprintf(msg, len, "%s", st == SC_OK ? "" : sc_last_error());
	return st;
}

static sc_status_t step(sc_client_t *c, sc_tensor_t *t, uint64_t seed, char *msg, size_t len)
{
	return step_n(c, t, FAST_NUMEL, seed, msg, len);
}

static void exact_step_n(sc_client_t *c, sc_tensor_t *t, size_t numel, uint64_t seed)
{
	char msg[1024], why[256];
	sc_status_t st = step_n(c, t, numel, seed, msg, sizeof(msg));
	if (st != SC_OK)
		IT_FAIL("step %llu: %s: %s", (unsigned long long)seed, sc_status_name(st), msg);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, numel, seed, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("step %llu: %zu elements wrong: %s", (unsigned long long)seed, wrong,
			why);
}

static void exact_step(sc_client_t *c, sc_tensor_t *t, uint64_t seed)
{
	exact_step_n(c, t, FAST_NUMEL, seed);
}

/* Exact steps from *seed until this node has kept 3 fast turns (it is in fast mode, and
 * the coordinator's node has kept at least 2 of the epoch, which it needs before it ends
 * the epoch, else it holds the next off: world/fast.c, SCD_FAST_LONG). The bound outlasts
 * the longest backoff (512 plans) after short epochs that a loaded host's waits can end
 * on their own. The count is read every UNTIL_FAST_EVERY steps, at the same steps on
 * every rank (every node keeps the same turns): each read runs sparsectl, and one after
 * every step (a process start, tens of ms on a loaded host or a sanitizer's build) kept
 * the ranks from stepping together, so their turns waited fast_wait_ms, the epochs ended
 * and the backoff grew, and 2000 steps outlasted the case's timeout. */
#define UNTIL_FAST_EVERY 8
static void until_fast(sc_client_t *c, sc_tensor_t *t, uint64_t *seed)
{
	double k0 = it_node_stat("fast_kept");
	for (int i = 1; i <= 2000; i++) {
		exact_step(c, t, (*seed)++);
		if (i % UNTIL_FAST_EVERY == 0 && it_node_stat("fast_kept") >= k0 + 3)
			return;
	}
	IT_FAIL("not 3 fast turns kept in 2000 steps");
}

/* Every rank at the same point: an exact step of another tensor. */
static void sync_point(sc_client_t *c, sc_tensor_t *s, uint64_t seed)
{
	exact_step(c, s, seed);
}

static int fast_steps(sc_client_t *c, int steps)
{
	sc_tensor_t *t = it_register(c, "fast.x", SC_FLOAT32, FAST_NUMEL);
	double k0 = it_node_stat("fast_kept");
	double t0 = it_now_s();
	for (int i = 0; i < steps; i++)
		exact_step(c, t, 1000 + (uint64_t)i);
	double dt = it_now_s() - t0;
	double kept = it_node_stat("fast_kept") - k0;
	it_log("%d exact steps in %.2f s (%.0f us a step): %.0f kept fast turns, %.0f "
	       "discarded, %.0f epochs",
	       steps, dt, dt * 1e6 / steps, kept, it_node_stat("fast_discarded"),
	       it_node_stat("fast_epochs"));
	if (kept < 0.9 * steps)
		IT_FAIL("only %.0f of %d steps were kept fast turns", kept, steps);
	return 0;
}

/* STEPS exact steps of a cycle of k tensors of different sizes (1, 1024, 256 elements),
 * each step one allreduce of each in turn: at least 80% kept fast turns. */
static int fast_cycle(sc_client_t *c, int k, int steps)
{
	static const size_t numel[] = {1, FAST_NUMEL, 256};
	static const char *names[] = {"fast.c0", "fast.c1", "fast.c2"};
	if (k < 2 || k > 3)
		IT_FAIL("fast cycle: %d tensors, not 2 or 3", k);
	sc_tensor_t *t[3];
	for (int j = 0; j < k; j++)
		t[j] = it_register(c, names[j], SC_FLOAT32, numel[j]);
	double k0 = it_node_stat("fast_kept"), t0 = it_now_s();
	for (int i = 0; i < steps; i++)
		for (int j = 0; j < k; j++)
			exact_step_n(c, t[j], numel[j], 1000 + (uint64_t)(i * k + j));
	double dt = it_now_s() - t0, kept = it_node_stat("fast_kept") - k0;
	int calls = steps * k;
	it_log("cycle of %d: %d exact allreduces in %.2f s (%.0f us each): %.0f kept fast "
	       "turns, %.0f discarded, %.0f epochs",
	       k, calls, dt, dt * 1e6 / calls, kept, it_node_stat("fast_discarded"),
	       it_node_stat("fast_epochs"));
	if (kept < 0.8 * calls)
		IT_FAIL("only %.0f of %d allreduces were kept fast turns", kept, calls);
	/* the cycle in the other order: a tensor not the next turn's leaves the epoch, is
	 * planned, and a new epoch begins with the new cycle; every step exact */
	double e0 = it_node_stat("fast_epochs");
	k0 = it_node_stat("fast_kept");
	for (int i = 0; i < 100; i++)
		for (int j = k - 1; j >= 0; j--)
			exact_step_n(c, t[j], numel[j], 500000 + (uint64_t)(i * k + j));
	it_log("the other order: 100 steps exact, %.0f kept fast turns, %.0f epochs more",
	       it_node_stat("fast_kept") - k0, it_node_stat("fast_epochs") - e0);
	if (it_node_stat("fast_epochs") <= e0 || it_node_stat("fast_kept") - k0 < 0.5 * 100 * k)
		IT_FAIL("the cycle in the other order began no new epoch or kept few turns");
	return 0;
}

static int fast_shape(sc_client_t *c, int rounds)
{
	int rank = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t = it_register(c, "fast.shape", SC_FLOAT32, FAST_NUMEL);
	sc_tensor_t *s = it_register(c, "fast.sync", SC_FLOAT32, FAST_NUMEL);
	uint64_t seed = 1;
	for (int k = 0; k < rounds; k++) {
		until_fast(c, t, &seed);
		sync_point(c, s, 500 + (uint64_t)k);
		until_fast(c, t, &seed);
		static const uint64_t a[] = {32, 32}, b[] = {16, 64};
		IT_CHECK_SC(sc_tensor_set_shape(t, 2, rank == size - 1 ? b : a),
			    "set the shape");
		char msg[1024];
		sc_status_t st = step(c, t, seed++, msg, sizeof(msg));
		if (st != SC_ERR_MISMATCH)
			IT_FAIL("round %d, the step of two shapes: expected SC_ERR_MISMATCH, "
				"got %s: %s",
				k, sc_status_name(st), msg);
		if (!strstr(msg, "[32, 32]") || !strstr(msg, "[16, 64]"))
			IT_FAIL("the mismatch does not name both shapes: '%s'", msg);
		if (!k)
			it_log("mismatch: %s", msg);
		IT_CHECK_SC(sc_tensor_set_shape(t, 2, a), "set the shape back");
		/* at once: a node that failed the step on its own submits the next one
		 * before the coordinator's FastEnd can reach it */
		for (int i = 0; i < 20; i++)
			exact_step(c, t, seed++);
	}
	return 0;
}

static int fast_stall(sc_client_t *c)
{
	int rank = sc_rank(c);
	sc_tensor_t *t = it_register(c, "fast.stall", SC_FLOAT32, FAST_NUMEL);
	uint64_t seed = 1;
	until_fast(c, t, &seed);
	/* every rank past until_fast's last step, and in fast mode again */
	sc_tensor_t *s = it_register(c, "fast.sync", SC_FLOAT32, FAST_NUMEL);
	sync_point(c, s, 500);
	until_fast(c, t, &seed);
	char msg[1024];
	if (rank != 1) {
		sc_status_t st = step(c, t, seed, msg, sizeof(msg));
		if (st != SC_ERR_STALLED)
			IT_FAIL("the step rank 1 skips: expected SC_ERR_STALLED, got %s: %s",
				sc_status_name(st), msg);
		if (!it_mentions_rank(msg, 1))
			IT_FAIL("the stall error does not name rank 1: '%s'", msg);
		it_log("stalled: %s", msg);
	} else { /* the step it skipped, late (past stall_timeout_ms, 3 s): refused, never
		  * paired with the others' next step, which it then makes in time */
		it_sleep_ms(4500);
		sc_status_t st = step(c, t, seed, msg, sizeof(msg));
		if (st == SC_OK)
			IT_FAIL("rank 1's late step completed");
		it_log("late step: %s: %s", sc_status_name(st), msg);
	}
	seed++;
	for (int i = 0; i < 50; i++)
		exact_step(c, t, seed++);
	return 0;
}

static int fast_reset(sc_client_t *c, int steps)
{
	int rank = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t = it_register(c, "fast.reset", SC_FLOAT32, FAST_NUMEL);
	double k0 = it_node_stat("fast_kept");
	int failed = 0;
	for (int i = 0; i < steps; i++) {
		char msg[1024], why[256];
		if (rank == size - 1) /* the others' turns wait for it: a re-form finds them
				       * submitted and its own not */
			it_sleep_ms(1);
		uint64_t seed = 1000 + (uint64_t)i;
		sc_status_t st = step(c, t, seed, msg, sizeof(msg));
		if (st != SC_OK) {
			if (failed++ < 8)
				it_log("step %d: %s: %s", i, sc_status_name(st), msg);
			continue;
		}
		size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, FAST_NUMEL, seed, size,
					1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL(
			    "step %d: SC_OK with %zu elements wrong (another step's sum): %s",
			    i, wrong, why);
	}
	double kept = it_node_stat("fast_kept") - k0;
	it_log("%d steps: %d failed, the others exact; %.0f kept fast turns", steps, failed,
	       kept);
	if (kept < 1)
		IT_FAIL("no fast turn kept");
	return 0;
}

/* A grouped allreduce whose first member is the tensor in fast mode, then its steps alone
 * again: every member exact, none held (the group's other member waited forever for one
 * run as a fast turn on its own, then failed SC_ERR_STALLED). */
static int fast_group(sc_client_t *c)
{
	int rank = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t[2] = {it_register(c, "fast.g", SC_FLOAT32, FAST_NUMEL),
			     it_register(c, "fast.g2", SC_FLOAT32, FAST_NUMEL)};
	sc_tensor_t *s = it_register(c, "fast.sync", SC_FLOAT32, FAST_NUMEL);
	uint64_t seed = 1;
	until_fast(c, t[0], &seed);
	sync_point(c, s, 500);
	until_fast(c, t[0], &seed);
	sc_group_t g = 0;
	sc_handle_t h[2];
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin(2)");
	for (int k = 0; k < 2; k++) {
		it_fill(sc_tensor_data(t[k]), SC_FLOAT32, FAST_NUMEL, seed + (uint64_t)k, rank,
			1);
		if (k) /* every node's first member submitted well before the second */
			it_sleep_ms(300);
		IT_CHECK_SC(sc_group_add(c, g, t[k]), "sc_group_add('%s')",
			    sc_tensor_name(t[k]));
		IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "member '%s'",
			    sc_tensor_name(t[k]));
	}
	IT_CHECK_SC(sc_group_end(c, g), "sc_group_end");
	for (int k = 0; k < 2; k++) {
		char why[256];
		int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("group member '%s': %s: %s", sc_tensor_name(t[k]),
				it_wait_name(r), it_wait_error());
		size_t wrong =
		    it_check(sc_tensor_data(t[k]), SC_FLOAT32, FAST_NUMEL, seed + (uint64_t)k,
			     size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("group member '%s': %zu elements wrong: %s",
				sc_tensor_name(t[k]), wrong, why);
	}
	seed += 2;
	for (int i = 0; i < 50; i++)
		exact_step(c, t[0], seed++);
	return 0;
}

int it_fast(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	if (sc_size(c) < 2)
		IT_FAIL("needs at least 2 trainers, the job has %d", sc_size(c));
	const char *what = argc > 1 ? argv[1] : "2000";
	if (!strcmp(what, "shape"))
		fast_shape(c, argc > 2 ? atoi(argv[2]) : 1);
	else if (!strcmp(what, "stall"))
		fast_stall(c);
	else if (!strcmp(what, "group"))
		fast_group(c);
	else if (!strcmp(what, "cycle"))
		fast_cycle(c, argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 500);
	else if (!strcmp(what, "reset"))
		fast_reset(c, argc > 2 ? atoi(argv[2]) : 4000);
	else
		fast_steps(c, atoi(what));
	sc_finalize(c);
	it_pass();
}
