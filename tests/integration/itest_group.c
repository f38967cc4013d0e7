/*
 * itest_group.c: grouped operations (sc_group_begin, sc_group_add, sc_group_end; the
 * coordinator's world/group.c). Run with one trainer per node, fusion_mode fixed and a
 * short stall_timeout_ms (run.sh):
 *
 *   - a group of four allreduces submitted 300 ms apart: no member completes before the
 *     last is submitted (each is polled), all four are exact, and the node ran them in
 *     one fused buffer (sparsectl stats' fused_buffers grows by one);
 *   - a group of two allgathers of per-rank counts and one of two reduce-scatters: exact;
 *   - rank 0 groups {a, b} where the others group {a, c}: every member fails on every rank
 *     with SC_ERR_MISMATCH naming a tensor and ranks 0 and 1, promptly (not at the stall
 *     timeout); then b and c alone, and a group again, are exact on every rank;
 *   - rank 0 groups two tensors where the others group the first alone: SC_ERR_MISMATCH
 *     on every rank, then exact steps;
 *   - rank 1 closes a group of two with one member: sc_group_end refuses it naming the
 *     counts, and the group fails on every rank with SC_ERR_STALLED naming the missing
 *     tensor and rank 1; then a group is exact again.
 */
#include "itest.h"

#include <stdio.h>
#include <string.h>

/* the coordinator's wait before it fails a group formed differently (world/group.c) */
#define SCD_GROUP_SETTLE_MS_IT 200
#define GR_ERR_LIMIT	       10.0 /* seconds: a mismatch is found far below the stall timeout */

static uint64_t gr_seed = 500;

/* Starts allreduce sums of the n tensors as one group (gap_ms between submissions; with
 * poll_first, checks that member 0 is still held before the last is submitted). */
static void group_start(sc_client_t *c, sc_tensor_t **t, int n, sc_handle_t *h, int gap_ms,
			int poll_first)
{
	sc_group_t g = 0;
	IT_CHECK_SC(sc_group_begin(c, n, &g), "sc_group_begin(%d)", n);
	for (int k = 0; k < n; k++) {
		it_fill(sc_tensor_data(t[k]), SC_FLOAT32, sc_tensor_numel(t[k]), gr_seed + k,
			sc_rank(c), 1);
		if (k && gap_ms)
			it_sleep_ms(gap_ms);
		if (k == n - 1 && poll_first) {
			sc_status_t st = sc_poll(c, h[0]);
			if (st != SC_IN_PROGRESS)
				IT_FAIL(
				    "group member '%s' ended (%s: %s) before member '%s' was "
				    "submitted: the group was not held",
				    sc_tensor_name(t[0]), sc_status_name(st), sc_last_error(),
				    sc_tensor_name(t[k]));
		}
		IT_CHECK_SC(sc_group_add(c, g, t[k]), "sc_group_add('%s')",
			    sc_tensor_name(t[k]));
		IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "member '%s'",
			    sc_tensor_name(t[k]));
	}
	IT_CHECK_SC(sc_group_end(c, g), "sc_group_end");
}

/* Waits for the group's n sums and checks each exact. */
static void group_exact(sc_client_t *c, sc_tensor_t **t, int n, const sc_handle_t *h,
			const char *what)
{
	char why[512];
	for (int k = 0; k < n; k++) {
		int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("%s: member '%s': %s: %s", what, sc_tensor_name(t[k]),
				it_wait_name(r), it_wait_error());
		size_t wrong =
		    it_check(sc_tensor_data(t[k]), SC_FLOAT32, sc_tensor_numel(t[k]),
			     gr_seed + k, sc_size(c), 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("%s: member '%s': %zu elements wrong: %s", what,
				sc_tensor_name(t[k]), wrong, why);
	}
	gr_seed += 16;
}

static double fused_buffers(void)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *v = s ? it_json_get(s, "fused_buffers") : NULL;
	double n = v && v->type == IT_JNUM ? v->num : -1;
	it_json_free(s);
	return n;
}

static void together(sc_client_t *c)
{
	const size_t numel[4] = {1000, 10, 500, 3};
	sc_tensor_t *t[4];
	sc_handle_t h[4];
	for (int k = 0; k < 4; k++) {
		char name[32];
		snprintf(name, sizeof(name), "group.t%d", k);
		t[k] = it_register(c, name, SC_FLOAT32, numel[k]);
	}
	for (int step = 0; step < 3; step++) {
		it_barrier(c, "together", 0);
		double before = fused_buffers();
		group_start(c, t, 4, h, 300, 1);
		group_exact(c, t, 4, h, "a group of four allreduces");
		double after = fused_buffers();
		if (before < 0 || after - before != 1)
			IT_FAIL("step %d: the group of four ran in %.0f buffers on this node "
				"(fused_buffers %.0f -> %.0f), expected one",
				step, after - before, before, after);
	}
	it_log("a group of four, submitted 300 ms apart: held, exact, one buffer");
}

/* A group after a plain allreduce: the fusion plan learns the plain tensor and the group's
 * first member as one buffer, so at the group's next step that buffer lacks its plain
 * tensor; the group still goes out whole (a member held back for its buffer's other
 * tensor was left alone and stalled). */
static void after_another(sc_client_t *c)
{
	sc_tensor_t *first = it_register(c, "group.first", SC_FLOAT32, 5), *t[4];
	sc_handle_t h[4];
	for (int k = 0; k < 4; k++) {
		char name[32];
		snprintf(name, sizeof(name), "group.u%d", k);
		t[k] = it_register(c, name, SC_FLOAT32, 5);
	}
	it_fill(sc_tensor_data(first), SC_FLOAT32, 5, gr_seed, sc_rank(c), 1);
	sc_handle_t h0;
	if (sc_allreduce_async(c, first, SC_OP_SUM, &h0) != SC_OK)
		IT_FAIL("allreduce of 'group.first' refused");
	group_exact(c, &first, 1, &h0, "the plain allreduce before the group");
	for (int step = 0; step < 3; step++) {
		group_start(c, t, 4, h, 0, 0);
		group_exact(c, t, 4, h, "a group of four after a plain allreduce");
	}
	it_log("a group of four after a plain allreduce: whole, exact, three times");
}

static void gather_scatter(sc_client_t *c)
{
	int rank = sc_rank(c), P = sc_size(c);
	size_t total = (size_t)P * (P + 1) / 2;
	sc_tensor_t *ag[2], *rs[2];
	sc_handle_t h[2];
	sc_group_t g;
	for (int k = 0; k < 2; k++) {
		char name[32];
		snprintf(name, sizeof(name), "group.ag%d", k);
		ag[k] = it_register(c, name, SC_FLOAT32, total);
		snprintf(name, sizeof(name), "group.rs%d", k);
		rs[k] = it_register(c, name, SC_FLOAT32, 2 * (size_t)P);
	}
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin");
	for (int k = 0; k < 2; k++) {
		float *d = sc_tensor_data(ag[k]);
		for (int i = 0; i <= rank; i++)
			d[i] = (float)(1000 * k + 100 * rank + i);
		IT_CHECK_SC(sc_group_add(c, g, ag[k]), "sc_group_add");
		IT_CHECK_SC(sc_allgather_async(c, ag[k], (size_t)rank + 1, &h[k]), "allgather");
	}
	IT_CHECK_SC(sc_group_end(c, g), "sc_group_end");
	for (int k = 0; k < 2; k++) {
		int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("grouped allgather %d: %s: %s", k, it_wait_name(r),
				it_wait_error());
		const float *d = sc_tensor_data(ag[k]);
		for (int q = 0, at = 0; q < P; q++)
			for (int i = 0; i <= q; i++, at++)
				if (d[at] != (float)(1000 * k + 100 * q + i))
					IT_FAIL(
					    "grouped allgather %d: element %d (rank %d's %d) "
					    "is %g",
					    k, at, q, i, d[at]);
	}
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin");
	for (int k = 0; k < 2; k++) {
		float *d = sc_tensor_data(rs[k]);
		for (int i = 0; i < 2 * P; i++)
			d[i] = (float)(rank + i + k);
		IT_CHECK_SC(sc_group_add(c, g, rs[k]), "sc_group_add");
		IT_CHECK_SC(sc_reducescatter_async(c, rs[k], SC_OP_SUM, 1, &h[k]),
			    "reducescatter");
	}
	IT_CHECK_SC(sc_group_end(c, g), "sc_group_end");
	for (int k = 0; k < 2; k++) {
		int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("grouped reducescatter %d: %s: %s", k, it_wait_name(r),
				it_wait_error());
		const float *d = sc_tensor_data(rs[k]);
		for (int i = 0; i < 2; i++) {
			int row = 2 * rank + i;
			float want = (float)(P * (P - 1) / 2 + P * (row + k));
			if (d[i] != want)
				IT_FAIL("grouped reducescatter %d: row %d is %g, expected %g",
					k, row, d[i], want);
		}
	}
	it_log("grouped allgathers and reduce-scatters exact");
}

/* Every member's wait ends with want, promptly for a mismatch, naming the group and rank 1
 * (and rank 0 for a mismatch). */
static void group_fails(sc_client_t *c, sc_tensor_t **t, int n, const sc_handle_t *h, int want,
			const char *what, double t0)
{
	for (int k = 0; k < n; k++) {
		int r = it_wait(c, h[k], IT_ERROR_TIMEOUT_MS);
		const char *msg = it_wait_error();
		double dt = it_now_s() - t0;
		if (r != want)
			IT_FAIL("%s: member '%s' ended with %s, expected %s: %s", what,
				sc_tensor_name(t[k]), it_wait_name(r), it_wait_name(want), msg);
		if (want == SC_ERR_MISMATCH && dt > GR_ERR_LIMIT)
			IT_FAIL("%s: SC_ERR_MISMATCH only after %.1f s", what, dt);
		/* a mismatch names both sides, a stall the rank that lacks the member */
		if (!strstr(msg, "group") || !it_mentions_rank(msg, 1) ||
		    (want == SC_ERR_MISMATCH && !it_mentions_rank(msg, 0)))
			IT_FAIL(
			    "%s: the error of '%s' does not name the group and rank 1%s: %s",
			    what, sc_tensor_name(t[k]),
			    want == SC_ERR_MISMATCH ? " and rank 0" : "", msg);
		if (k == 0)
			it_log("%s: %s after %.2f s: %s", what, it_wait_name(r), dt, msg);
	}
}

static void mismatched(sc_client_t *c)
{
	int rank = sc_rank(c);
	sc_tensor_t *a = it_register(c, "group.m.a", SC_FLOAT32, 64);
	sc_tensor_t *b = it_register(c, "group.m.b", SC_FLOAT32, 64);
	sc_tensor_t *x = it_register(c, "group.m.c", SC_FLOAT32, 64);
	sc_tensor_t *t[2] = {a, rank == 0 ? b : x};
	sc_handle_t h[2];
	it_barrier(c, "mismatch", 0);
	double t0 = it_now_s();
	group_start(c, t, 2, h, 0, 0);
	group_fails(c, t, 2, h, SC_ERR_MISMATCH, "groups {a, b} on rank 0, {a, c} elsewhere",
		    t0);
	if (!strstr(it_wait_error(), "'group.m.b'") && !strstr(it_wait_error(), "'group.m.c'"))
		IT_FAIL("the mismatch does not name the tensor in one group and not the "
			"other: %s",
			it_wait_error());
	/* each rank owes the step of the member it had not submitted (late.c: it might have
	 * been submitting it on its own for the step that failed): rank 0's c, the others'
	 * b, refused at once to that rank alone, naming the failure */
	sc_tensor_t *owed = rank == 0 ? x : b;
	sc_handle_t oh;
	IT_CHECK_SC(sc_allreduce_async(c, owed, SC_OP_SUM, &oh), "the owed step");
	int r = it_wait(c, oh, IT_ERROR_TIMEOUT_MS);
	if (r != SC_ERR_MISMATCH || !strstr(it_wait_error(), "submitted it late"))
		IT_FAIL("the owed step of '%s' ended with %s: %s", sc_tensor_name(owed),
			it_wait_name(r), it_wait_error());
	/* then each of them alone, and the group, exact on every rank */
	sc_tensor_t *solo[3] = {b, x, a};
	for (int k = 0; k < 3; k++) {
		sc_handle_t one;
		group_start(c, &solo[k], 1, &one, 0, 0);
		group_exact(c, &solo[k], 1, &one, "after the mismatched group");
	}
	sc_tensor_t *again[3] = {a, b, x};
	sc_handle_t h3[3];
	group_start(c, again, 3, h3, 0, 0);
	group_exact(c, again, 3, h3, "the group after the mismatch");

	/* sizes: rank 0 groups {s.a, s.b}; the others group {s.a} and submit s.b alone */
	sc_tensor_t *s[2] = {it_register(c, "group.s.a", SC_FLOAT32, 32),
			     it_register(c, "group.s.b", SC_FLOAT32, 32)};
	it_barrier(c, "sizes", 0);
	t0 = it_now_s();
	if (rank == 0) {
		group_start(c, s, 2, h, 0, 0);
	} else {
		group_start(c, s, 1, h, 0, 0);
		IT_CHECK_SC(sc_allreduce_async(c, s[1], SC_OP_SUM, &h[1]), "s.b alone");
	}
	group_fails(c, s, 2, h, SC_ERR_MISMATCH, "a group of 2 on rank 0, of 1 elsewhere", t0);
	group_start(c, s, 2, h, 0, 0);
	group_exact(c, s, 2, h, "the group after the size mismatch");
}

/* Rank 0 groups {a, b}; the others submit a, and b on its own well after the group's
 * mismatch was decided. Their b is the failed step's, so it must not pair with rank 0's
 * next b (a sum of two steps returned with SC_OK): it is refused as the late step, and
 * the next b sums exactly on every rank. */
static void ungrouped_late(sc_client_t *c)
{
	int rank = sc_rank(c);
	sc_tensor_t *t[2] = {it_register(c, "group.u.a", SC_FLOAT32, 16),
			     it_register(c, "group.u.b", SC_FLOAT32, 16)};
	sc_handle_t h[2];
	it_barrier(c, "ungrouped", 0);
	if (rank == 0) {
		group_start(c, t, 2, h, 0, 0);
	} else {
		for (int k = 0; k < 2; k++) {
			it_fill(sc_tensor_data(t[k]), SC_FLOAT32, 16, gr_seed + 7 + k, rank, 1);
			if (k)
				it_sleep_ms(4 * SCD_GROUP_SETTLE_MS_IT);
			IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "alone %d",
				    k);
		}
	}
	for (int k = 0; k < 2; k++) {
		int r = it_wait(c, h[k], IT_ERROR_TIMEOUT_MS);
		if (r == SC_OK)
			IT_FAIL("'%s' of the mismatched step succeeded", sc_tensor_name(t[k]));
	}
	sc_tensor_t *b = t[1];
	sc_handle_t hb;
	group_start(c, &b, 1, &hb, 0, 0);
	group_exact(c, &b, 1, &hb, "b after the late member");
}

/* A group closed short (sc_group_end refuses it) leaves no mark on the member not yet
 * started: it joins the next group, which completes exactly. */
static void short_group_unmarks(sc_client_t *c)
{
	sc_tensor_t *z = it_register(c, "group.z", SC_FLOAT32, 8);
	sc_group_t g;
	sc_handle_t h;
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin(2)");
	IT_CHECK_SC(sc_group_add(c, g, z), "sc_group_add");
	if (sc_group_end(c, g) != SC_ERR_INVALID)
		IT_FAIL("a group of 2 closed with 1 member: %s", sc_last_error());
	group_start(c, &z, 1, &h, 0, 0); /* adds z to a group of its own */
	group_exact(c, &z, 1, &h, "a member of a group closed short, in the next group");
}

static void stalled(sc_client_t *c)
{
	int rank = sc_rank(c);
	sc_tensor_t *t[2] = {it_register(c, "group.st.a", SC_FLOAT32, 16),
			     it_register(c, "group.st.b", SC_FLOAT32, 16)};
	sc_handle_t h[2];
	sc_group_t g;
	it_barrier(c, "stall", 0);
	double t0 = it_now_s();
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin");
	int n = rank == 1 ? 1 : 2;
	for (int k = 0; k < n; k++) {
		IT_CHECK_SC(sc_group_add(c, g, t[k]), "sc_group_add");
		IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "member %d", k);
	}
	sc_status_t st = sc_group_end(c, g);
	if (rank == 1 && (st != SC_ERR_INVALID || !strstr(sc_last_error(), "1 of its 2")))
		IT_FAIL("sc_group_end after 1 of 2 members: %s (%s), expected SC_ERR_INVALID "
			"naming the counts",
			sc_status_name(st), sc_last_error());
	if (rank != 1)
		IT_CHECK_SC(st, "sc_group_end");
	group_fails(c, t, n, h, SC_ERR_STALLED, "rank 1 left member 'group.st.b' out", t0);
	if (!strstr(it_wait_error(), "'group.st.b'"))
		IT_FAIL("the stall does not name the missing member: %s", it_wait_error());
	sc_tensor_t *u[2] = {it_register(c, "group.st.c", SC_FLOAT32, 16), t[0]};
	group_start(c, u, 2, h, 0, 0);
	group_exact(c, u, 2, h, "a group after the stalled one");
}

int it_group(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	if (sc_size(c) < 2 || sc_local_size(c) != 1)
		IT_FAIL(
		    "needs 2 or more nodes of one trainer each, the job has %d trainers, %d "
		    "per node",
		    sc_size(c), sc_local_size(c));
	if (argc > 1 && !strcmp(argv[1], "after-another")) { /* under a planned fusion */
		after_another(c);
		IT_CHECK_SC(sc_finalize(c), "sc_finalize");
		it_pass();
	}
	together(c);
	gather_scatter(c);
	mismatched(c);
	ungrouped_late(c);
	short_group_unmarks(c);
	stalled(c);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
