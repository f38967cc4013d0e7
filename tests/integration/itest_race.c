/*
 * itest_race.c: completions that race with the trainer's own deadlines. The library ends
 * a successful operation through the daemon's futex word in the tensor's header, with no
 * message (client/lib/client.c, proto/shm_wake.h): a wait whose deadline comes at the same
 * moment must give one answer, and an operation whose wait ran out must be freed and
 * leave the tensor usable.
 *
 *   wait-race [STEPS]: STEPS allreduces (200), each collected by waits of 1 ms repeated
 *   until one is not SC_ERR_TIMEOUT: it must be SC_OK and the sum exact. Then 40
 *   sc_allreduce calls with a 1 ms timeout, whose operations are abandoned when it runs
 *   out (the next submission finds them done in the header and frees them): each submission
 *   must be taken within 10 s (SC_ERR_BUSY before), and a last sum must be exact; after
 *   one more operation, abandoned by every rank but rank 0 (which submits it 100 ms
 *   late), the tensor's release must succeed within 10 s.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RACE_NUMEL 1024

/* Submits, retrying while the tensor's abandoned operation is still in flight (10 s). */
static sc_handle_t submit_when_free(sc_client_t *c, sc_tensor_t *t, const char *what)
{
	double t0 = it_now_s();
	sc_handle_t h;
	sc_status_t st;
	while ((st = sc_allreduce_async(c, t, SC_OP_SUM, &h)) == SC_ERR_BUSY &&
	       it_now_s() - t0 < 10)
		it_sleep_ms(1);
	if (st != SC_OK)
		IT_FAIL("%s: %s (%s)", what, sc_status_name(st), sc_last_error());
	return h;
}

int it_wait_race(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 200;
	sc_client_t *c = it_connect();
	int me = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t = it_register(c, "race.t", SC_FLOAT32, RACE_NUMEL);
	char why[512];
	long timeouts = 0;
	for (int s = 0; s < steps; s++) {
		it_fill(sc_tensor_data(t), SC_FLOAT32, RACE_NUMEL, 100 + (uint64_t)s, me, 1);
		sc_handle_t h;
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "step %d", s);
		sc_status_t st;
		double t0 = it_now_s();
		while ((st = sc_wait(c, h, 1)) == SC_ERR_TIMEOUT && it_now_s() - t0 < 60)
			timeouts++;
		if (st != SC_OK)
			IT_FAIL("step %d: %s (%s)", s, sc_status_name(st), sc_last_error());
		if (sc_wait(c, h, 0) != SC_ERR_INVALID) /* collected: the handle is gone */
			IT_FAIL("step %d: the handle is still known after its result", s);
		if (it_check(sc_tensor_data(t), SC_FLOAT32, RACE_NUMEL, 100 + (uint64_t)s, size,
			     1, SC_OP_SUM, why, sizeof(why)))
			IT_FAIL("step %d: %s", s, why);
	}
	it_log("%d steps exact, %ld waits of 1 ms ran out before theirs ended", steps,
	       timeouts);
	long abandoned = 0;
	for (int s = 0; s < 40; s++) { /* the values do not matter here */
		sc_status_t st;
		double t0 = it_now_s();
		while ((st = sc_allreduce(c, t, SC_OP_SUM, 1)) == SC_ERR_BUSY &&
		       it_now_s() - t0 < 10)
			it_sleep_ms(1); /* the last one, abandoned, is still in flight */
		if (st == SC_ERR_TIMEOUT)
			abandoned++;
		else if (st != SC_OK)
			IT_FAIL("abandoned step %d: %s (%s)", s, sc_status_name(st),
				sc_last_error());
	}
	it_log("%ld of 40 operations abandoned", abandoned);
	sc_handle_t h = submit_when_free(c, t, "settling step");
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "settling step");
	it_fill(sc_tensor_data(t), SC_FLOAT32, RACE_NUMEL, 7, me, 1);
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "last step");
	if (it_check(sc_tensor_data(t), SC_FLOAT32, RACE_NUMEL, 7, size, 1, SC_OP_SUM, why,
		     sizeof(why)))
		IT_FAIL("last step: %s", why);
	/* one more left behind (rank 0 comes 100 ms late, so the others' 1 ms runs out): the
	 * release finds it done in the header, or waits for it */
	if (me == 0)
		it_sleep_ms(100);
	sc_status_t st = sc_allreduce(c, t, SC_OP_SUM, 1);
	if (st != SC_ERR_TIMEOUT && (me == 0 ? st != SC_OK : 1))
		IT_FAIL("the step before the release: %s (%s), expected %s", sc_status_name(st),
			sc_last_error(),
			me == 0 ? "SC_OK or SC_ERR_TIMEOUT" : "SC_ERR_TIMEOUT");
	double t0 = it_now_s();
	while ((st = sc_tensor_release(c, t)) == SC_ERR_BUSY && it_now_s() - t0 < 10)
		it_sleep_ms(1);
	IT_CHECK_SC(st, "releasing 'race.t' after an abandoned step");
	sc_finalize(c);
	it_pass();
}
