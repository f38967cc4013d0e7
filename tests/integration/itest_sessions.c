/*
 * itest_sessions.c: trainers that come and go between jobs on daemons that stay (a
 * Horovod-style test suite calls init() and shutdown() around every test).
 *
 * join-left: rank 0 joins while every other rank enters a barrier and then (after an
 *   allreduce among them, so that none leaves before every barrier ended) shuts down
 *   without joining. The barrier cannot complete (rank 0 enters none while joined) and the
 *   join cannot either (the others left): both fail at once, each naming why, instead of
 *   running out their timeouts; a joined trainer's own barrier is refused. Afterwards every
 *   rank (the others in fresh sessions) sums exactly.
 * join-timeout: rank 0's sc_join times out (the others have not joined yet), then every
 *   other rank joins; rank 0's next sc_join collects the join that timed out (SC_OK with
 *   the last rank to join, not "already joined"); the barrier every rank then enters
 *   completes at once, and the sums after it are exact.
 * crash: registers a tensor, submits it and kills itself (a trainer that crashes; run.sh
 *   then starts the next job on the same daemon).
 */
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* An operation expected to fail at once (within 5 s: nothing waits for a timeout). */
static void expect_prompt_failure(sc_client_t *c, sc_handle_t h, sc_status_t want,
				  const char *what, const char *text)
{
	double t0 = it_now_s();
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	double dt = it_now_s() - t0;
	if (r != (int)want)
		IT_FAIL("%s: %s after %.2f s, expected %s (%s)", what, it_wait_name(r), dt,
			sc_status_name(want), it_wait_error());
	if (dt > 5.0)
		IT_FAIL("%s failed only after %.2f s: %s", what, dt, it_wait_error());
	if (!strstr(it_wait_error(), text))
		IT_FAIL("%s: the error does not say '%s': %s", what, text, it_wait_error());
	it_log("%s: %s after %.2f s: %s", what, sc_status_name(want), dt, it_wait_error());
}

static void exact_sum(sc_client_t *c, const char *name)
{
	char why[512];
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, 1000);
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 5, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "allreduce of '%s'", name);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, 1000, 5, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("'%s': %zu of 1000 elements wrong: %s", name, wrong, why);
}

int it_join_left(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	sc_handle_t h;
	/* every rank has connected before rank 0 joins */
	it_barrier(c, "join-left.start", 0);
	if (sc_rank(c) == 0) {
		IT_CHECK_SC(sc_join_async(c, &h), "sc_join_async");
		sc_status_t st = sc_barrier(c, IT_ERROR_TIMEOUT_MS);
		if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "has joined"))
			IT_FAIL("a joined trainer's barrier: %s (%s), expected SC_ERR_INVALID "
				"saying it has joined",
				sc_status_name(st), sc_last_error());
		expect_prompt_failure(c, h, SC_ERR_ABORTED, "rank 0's join",
				      "left without joining");
	} else {
		/* rank 0 may not have joined yet: then the barrier is aborted when it does */
		IT_CHECK_SC(sc_barrier_async(c, &h), "sc_barrier_async");
		expect_prompt_failure(c, h, SC_ERR_ABORTED, "the barrier beside rank 0's join",
				      "rank 0");
		/* no rank leaves (which aborts rank 0's join) before every other rank's barrier
		 * was refused: an allreduce among them, rank 0 joined (it adds zeros), ends
		 * only once each has left its barrier */
		sc_tensor_t *sync = it_register(c, "join-left.sync", SC_FLOAT32, 4);
		IT_CHECK_SC(sc_allreduce(c, sync, SC_OP_SUM, IT_OP_TIMEOUT_MS),
			    "allreduce of 'join-left.sync' beside rank 0's join");
		IT_CHECK_SC(sc_finalize(c), "sc_finalize");
		c = it_connect(); /* the next test's session */
	}
	exact_sum(c, "join-left.after");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

int it_join_timeout(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	it_barrier(c, "join-timeout.start", 0);
	if (sc_rank(c) == 0) {
		sc_status_t st = sc_join(c, 300, NULL);
		if (st != SC_ERR_TIMEOUT)
			IT_FAIL("rank 0's join alone: %s (%s), expected SC_ERR_TIMEOUT",
				sc_status_name(st), sc_last_error());
		/* the same join, collected once the others have joined */
		int last = -1;
		IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last),
			    "rank 0's second sc_join, after the first timed out");
		if (last < 1 || last >= sc_size(c))
			IT_FAIL("rank 0's join: last rank %d, expected one of the others",
				last);
	} else {
		it_sleep_ms(800); /* after rank 0's join has timed out */
		IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, NULL), "sc_join");
	}
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "the barrier after the joins");
	exact_sum(c, "join-timeout.after");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

int it_crash(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	sc_tensor_t *t = it_register(c, "crash.t", SC_FLOAT32, 64);
	sc_handle_t h;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce of 'crash.t'");
	it_sleep_ms(200);
	it_log("crashing (pid %d)", (int)getpid());
	raise(SIGKILL);
	return 1;
}
