/*
 * itest_submit.c: the order of a trainer's requests on the daemon's submit channel
 * (daemon/ctl/submit.h), where the library sends every request once the channel is bound.
 *
 * submit-order [STEPS]: STEPS (30) rounds, each two checks that fail where the daemon could
 *   serve a request before one issued earlier:
 *   - many tensors submitted, then a barrier at once: every sum exact;
 *   - rank r runs 1 + (r + round) % P steps of one tensor and submits its last step and
 *     a join at once (a join served first would make the others' sum miss its values, or
 *     refuse its submission): every sum exact over the ranks still running; a join refused
 *     because the submission was still in flight (SC_ERR_BUSY) is made again after it.
 *   The trainer's own status line says whether its channel is bound: it must be, unless
 *   SPARSECOMM_SUBMIT_CHANNEL=0 (then it must not be), and the daemon must have served at
 *   least every submission of the test from it.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ORDER_K = 8, ORDER_N = 256 };

/* This trainer's entry of `sparsectl status`: whether its channel is bound, and the
 * requests the daemon served from it. */
static int own_channel(uint64_t *requests_p)
{
	const char *args[] = {"status", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *cl = it_json_get(s, "clients");
	int bound = -1;
	for (size_t i = 0; cl && cl->type == IT_JARR && i < cl->n; i++) {
		const it_json_t *p = it_json_get(cl->items[i], "pid");
		const it_json_t *b = it_json_get(cl->items[i], "submit_channel");
		const it_json_t *n = it_json_get(cl->items[i], "submit_requests");
		if (p && p->type == IT_JNUM && (int)p->num == (int)getpid() && b && n) {
			bound = b->type == IT_JBOOL && b->num != 0;
			*requests_p = (uint64_t)n->num;
		}
	}
	it_json_free(s);
	if (bound < 0)
		IT_FAIL("sparsectl status lists no client of pid %d with its submit channel",
			(int)getpid());
	return bound;
}

/* Many tensors submitted, then a barrier at once; every sum exact. */
static void order_barrier(sc_client_t *c, sc_tensor_t **t, int round)
{
	char why[512];
	sc_handle_t h[ORDER_K], b;
	for (int k = 0; k < ORDER_K; k++) {
		it_fill(sc_tensor_data(t[k]), SC_FLOAT32, ORDER_N, (uint64_t)(round * 100 + k),
			sc_rank(c), 1);
		IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]),
			    "round %d: submit %d", round, k);
	}
	IT_CHECK_SC(sc_barrier_async(c, &b), "round %d: barrier", round);
	IT_CHECK_SC(sc_wait(c, b, IT_OP_TIMEOUT_MS), "round %d: barrier's wait", round);
	for (int k = 0; k < ORDER_K; k++) {
		IT_CHECK_SC(sc_wait(c, h[k], IT_OP_TIMEOUT_MS), "round %d: tensor %d", round,
			    k);
		size_t wrong = it_check(sc_tensor_data(t[k]), SC_FLOAT32, ORDER_N,
					(uint64_t)(round * 100 + k), sc_size(c), 1, SC_OP_SUM,
					why, sizeof(why));
		if (wrong)
			IT_FAIL("round %d: tensor %d submitted before a barrier: %zu of %d "
				"elements wrong: %s",
				round, k, wrong, ORDER_N, why);
	}
}

/* Rank r's steps in round: 1 + (r + round) % P; its last step and its join go at once. */
static void order_join(sc_client_t *c, sc_tensor_t *t, int round)
{
	int P = sc_size(c), rank = sc_rank(c), steps = 1 + (rank + round) % P;
	for (int s = 0; s < steps; s++) {
		float *x = sc_tensor_data(t);
		for (int i = 0; i < ORDER_N; i++)
			x[i] = (float)(rank + 1) * 1000.0f + (float)(s * ORDER_N + i);
		sc_handle_t h, j = 0;
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "round %d step %d", round,
			    s);
		if (s == steps - 1)
			IT_CHECK_SC(sc_join_async(c, &j), "round %d: join", round);
		IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "round %d step %d", round, s);
		float want = 0;
		int active = 0;
		for (int r = 0; r < P; r++)
			if (1 + (r + round) % P > s)
				want += (float)(r + 1) * 1000.0f, active++;
		for (int i = 0; i < ORDER_N; i++)
			if (x[i] != want + (float)active * (float)(s * ORDER_N + i))
				IT_FAIL(
				    "round %d step %d (submitted with a join after it on the "
				    "last): [%d] = %g, expected %g (%d ranks running)",
				    round, s, i, x[i],
				    want + (float)active * (float)(s * ORDER_N + i), active);
		if (!j)
			continue;
		int last = -1;
		sc_status_t st = sc_join_result(c, j, IT_OP_TIMEOUT_MS, &last);
		if (st == SC_ERR_BUSY) /* served after the submission, while it was in flight */
			st = sc_join(c, IT_OP_TIMEOUT_MS, &last);
		IT_CHECK_SC(st, "round %d: join after %d steps", round, steps);
	}
}

int it_submit_order(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 30;
	const char *env = getenv("SPARSECOMM_SUBMIT_CHANNEL");
	int want_bound = !(env && !strcmp(env, "0"));
	sc_client_t *c = it_connect();
	sc_tensor_t *t[ORDER_K], *j;
	char name[64];
	for (int k = 0; k < ORDER_K; k++) {
		snprintf(name, sizeof(name), "order.%d", k);
		t[k] = it_register(c, name, SC_FLOAT32, ORDER_N);
	}
	j = it_register(c, "order.join", SC_FLOAT32, ORDER_N);
	uint64_t before = 0, after = 0;
	if (own_channel(&before) != want_bound)
		IT_FAIL("the submit channel is %s, expected %s (SPARSECOMM_SUBMIT_CHANNEL=%s)",
			want_bound ? "not bound" : "bound", want_bound ? "bound" : "not bound",
			env ? env : "(unset)");
	uint64_t submitted = 0;
	for (int round = 0; round < rounds; round++) {
		order_barrier(c, t, round);
		order_join(c, j, round);
		submitted += ORDER_K + 3 + (uint64_t)(sc_rank(c) + round) % sc_size(c);
	}
	own_channel(&after);
	if (want_bound && after - before < submitted)
		IT_FAIL("the daemon served %llu requests from the submit channel, fewer than "
			"the %llu operations started",
			(unsigned long long)(after - before), (unsigned long long)submitted);
	if (!want_bound && after != 0)
		IT_FAIL("the daemon served %llu requests from a submit channel not asked for",
			(unsigned long long)after);
	it_log("%d rounds exact; %llu requests over the submit channel", rounds,
	       (unsigned long long)(after - before));
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
