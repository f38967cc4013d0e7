/*
 * itest_finalize.c: sc_finalize while other threads of the trainer are inside the library
 * on the same client (client/lib/finalize.c).
 *
 * finalize-race [ROUNDS] [SEED], on one node of two trainers where only local rank 0
 * works (rank 1 passes at once, so rank 0's allreduces never complete: its waits sleep
 * until sc_finalize ends them). Each round rank 0 connects, registers a tensor per thread
 * and starts five threads:
 *   - two waiters: an allreduce, then sc_wait without a time limit (asleep on the tensor's
 *     word when sc_finalize comes);
 *   - a poller: an allreduce, then sc_poll and sc_process_set_size over and over;
 *   - a registrar: sc_register and sc_tensor_release of fresh names (requests answered by
 *     the daemon, in flight when sc_finalize comes);
 *   - a barrier: sc_barrier without a time limit, then again.
 * After a random pause (0 to 20 ms) the main thread calls sc_finalize. Every thread must
 * end by itself with SC_ERR_SHUTDOWN, its text naming the finalized client, and never any
 * other error; sc_finalize must return within its bound; no thread may hang (each is
 * joined with a deadline). Under the sanitizers' build any touch of freed memory fails it.
 * Then fr_orphan: a call that outlives sc_finalize's bound frees the client as it leaves.
 */
#include "itest.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FR_THREADS 5
#define FR_NUMEL   256
#define FR_FINALIZE_MAX_S                                                                      \
	5.0 /* sc_finalize's bound: 2 s for the calls, 1 s of goodbye,                         \
		 2 s for a busy host (the orphan's call blocks 6 s) */
#define FR_JOIN_TIMEOUT_MS 10000

typedef struct {
	sc_client_t *c;
	sc_tensor_t *t;
	int kind, round, idx;
	sc_status_t last;     /* the status that ended the thread */
	char last_error[256]; /* its text */
	char bad[512];	      /* an unexpected status, described */
	volatile int done;
} fr_thread_t;

enum { FR_WAITER, FR_POLLER, FR_REGISTRAR, FR_BARRIER };

/* Whether st ends the thread (the refusal or the ended wait); records it. An unexpected
 * status is recorded in bad. */
static int fr_end(fr_thread_t *a, sc_status_t st, const char *call)
{
	if (st == SC_OK || st == SC_IN_PROGRESS)
		return 0;
	a->last = st;
	snprintf(a->last_error, sizeof(a->last_error), "%s", sc_last_error());
	if (st != SC_ERR_SHUTDOWN || !strstr(a->last_error, "finalized"))
		snprintf(a->bad, sizeof(a->bad), "%s gave %s: %s", call, sc_status_name(st),
			 a->last_error);
	return 1;
}

static void *fr_main(void *p)
{
	fr_thread_t *a = p;
	sc_handle_t h = 0;
	char name[64];

	for (int i = 0;; i++) {
		sc_status_t st;

		switch (a->kind) {
		case FR_WAITER:
			if (fr_end(a, sc_allreduce_async(a->c, a->t, SC_OP_SUM, &h),
				   "allreduce"))
				goto out;
			if (fr_end(a, sc_wait(a->c, h, -1), "wait"))
				goto out;
			snprintf(a->bad, sizeof(a->bad),
				 "a wait without a limit returned SC_OK "
				 "for an allreduce no other rank submits");
			goto out;
		case FR_POLLER:
			if (i == 0 && fr_end(a, sc_allreduce_async(a->c, a->t, SC_OP_SUM, &h),
					     "allreduce"))
				goto out;
			st = sc_poll(a->c, h);
			if (st == SC_OK) {
				snprintf(a->bad, sizeof(a->bad), "a poll gave SC_OK");
				goto out;
			}
			if (fr_end(a, st, "poll"))
				goto out;
			if (sc_process_set_size(a->c, SC_PROCESS_SET_GLOBAL) < 0) {
				/* refused once sc_finalize has begun; the poll says how */
				continue;
			}
			break;
		case FR_REGISTRAR: {
			sc_tensor_t *t = NULL;

			snprintf(name, sizeof(name), "fr.%d.reg.%d", a->round, i);
			if (fr_end(a, sc_register(a->c, name, SC_FLOAT32, FR_NUMEL, &t),
				   "register"))
				goto out;
			if (fr_end(a, sc_tensor_release(a->c, t), "release"))
				goto out;
			break;
		}
		case FR_BARRIER:
			if (fr_end(a, sc_barrier(a->c, -1), "barrier"))
				goto out;
			snprintf(a->bad, sizeof(a->bad),
				 "a barrier no other rank enters gave SC_OK");
			goto out;
		}
	}
out:
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Joins a thread within FR_JOIN_TIMEOUT_MS, or fails naming it. */
static void fr_join(pthread_t th, const fr_thread_t *a)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += FR_JOIN_TIMEOUT_MS / 1000;
	if (pthread_timedjoin_np(th, NULL, &until) != 0)
		IT_FAIL("round %d: thread %d (kind %d) still inside the library %d s after "
			"sc_finalize",
			a->round, a->idx, a->kind, FR_JOIN_TIMEOUT_MS / 1000);
}

/*
 * sc_connect, after waiting (at most 10 s) for the previous round's session to give up
 * local rank 0: without the submit channel its goodbye and this hello reach the daemon by
 * two connections, in either order (with the channel the daemon reads the goodbye first).
 */
static sc_client_t *fr_connect(void)
{
	double until = it_now_s() + 10;
	sc_client_t *c = NULL;

	for (;;) {
		sc_status_t st = sc_connect(NULL, IT_CONNECT_TIMEOUT_MS, &c);

		if (st == SC_OK)
			break;
		if (st != SC_ERR_BUSY || !strstr(sc_last_error(), "already taken") ||
		    it_now_s() > until)
			IT_CHECK_SC(st, "sc_connect after the last round's sc_finalize");
		it_sleep_ms(20);
	}
	if (sc_local_rank(c) != 0)
		IT_FAIL("reconnected as local rank %d, expected 0", sc_local_rank(c));
	return c;
}

/* One round; returns how long sc_finalize took. */
static double fr_round(int round, unsigned *seed)
{
	static const int kinds[FR_THREADS] = {FR_WAITER, FR_WAITER, FR_POLLER, FR_REGISTRAR,
					      FR_BARRIER};
	fr_thread_t a[FR_THREADS];
	pthread_t th[FR_THREADS];
	sc_client_t *c = round ? fr_connect() : it_connect();
	char name[64];

	memset(a, 0, sizeof(a));
	for (int i = 0; i < FR_THREADS; i++) {
		a[i].c = c;
		a[i].kind = kinds[i];
		a[i].round = round;
		a[i].idx = i;
		snprintf(name, sizeof(name), "fr.%d.t%d", round, i);
		if (kinds[i] == FR_WAITER || kinds[i] == FR_POLLER)
			a[i].t = it_register(c, name, SC_FLOAT32, FR_NUMEL);
	}
	for (int i = 0; i < FR_THREADS; i++)
		if (pthread_create(&th[i], NULL, fr_main, &a[i]) != 0)
			IT_FAIL("pthread_create failed");
	it_sleep_ms((int)(rand_r(seed) % 21));
	double t0 = it_now_s();
	sc_status_t st = sc_finalize(c);
	double took = it_now_s() - t0;
	if (st != SC_OK)
		IT_FAIL("round %d: sc_finalize gave %s: %s", round, sc_status_name(st),
			sc_last_error());
	for (int i = 0; i < FR_THREADS; i++)
		fr_join(th[i], &a[i]);
	for (int i = 0; i < FR_THREADS; i++) {
		if (a[i].bad[0])
			IT_FAIL("round %d: thread %d (kind %d): %s", round, i, a[i].kind,
				a[i].bad);
		if (a[i].last != SC_ERR_SHUTDOWN)
			IT_FAIL("round %d: thread %d (kind %d) ended with %s, expected "
				"SC_ERR_SHUTDOWN",
				round, i, a[i].kind, sc_status_name(a[i].last));
	}
	if (took > FR_FINALIZE_MAX_S)
		IT_FAIL("round %d: sc_finalize took %.2f s with calls inside (bound %.1f s)",
			round, took, FR_FINALIZE_MAX_S);
	return took;
}

/*
 * The orphan: a call that stays inside the library past sc_finalize's bound (here a log
 * callback that blocks for 6 s, called by a sc_wait of an unknown handle after it has left
 * the client's lock). sc_finalize returns after its 2 s, the call completes with its own
 * result, and the call, the last one out, destroys the client (under the sanitizers, any
 * touch of freed memory fails the test).
 */
static __thread int fr_block_log;
static int fr_in_callback; /* the blocked call is in the callback */

static void fr_log(int level, const char *line, void *arg)
{
	(void)level, (void)arg;
	if (fr_block_log && strstr(line, "unknown handle")) {
		fr_block_log = 0;
		__atomic_store_n(&fr_in_callback, 1, __ATOMIC_RELEASE);
		it_sleep_ms(6000);
	}
}

static void *fr_blocked_main(void *p)
{
	fr_thread_t *a = p;

	fr_block_log = 1;
	a->last = sc_wait(a->c, 424242, 0);
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void fr_orphan(void)
{
	fr_thread_t a = {0};
	pthread_t th;

	a.c = fr_connect();
	sc_set_log_callback(fr_log, NULL);
	if (pthread_create(&th, NULL, fr_blocked_main, &a) != 0)
		IT_FAIL("pthread_create failed");
	double w0 = it_now_s();
	while (!__atomic_load_n(&fr_in_callback, __ATOMIC_ACQUIRE))
		if (it_now_s() - w0 > 20)
			IT_FAIL("the blocked call never reached the log callback");
		else
			it_sleep_ms(5);
	double t0 = it_now_s();
	sc_status_t st = sc_finalize(a.c);
	double took = it_now_s() - t0;
	int done_at_return = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
	fr_join(th, &a);
	sc_set_log_callback(NULL, NULL);
	if (st != SC_OK || took < 1.9 || took > FR_FINALIZE_MAX_S || done_at_return)
		IT_FAIL(
		    "a call inside the library past sc_finalize's bound: sc_finalize gave %s "
		    "after %.2f s (expected SC_OK after its 2 s bound, the call still inside: "
		    "%s)",
		    sc_status_name(st), took, done_at_return ? "it had left" : "it was");
	if (a.last != SC_ERR_INVALID)
		IT_FAIL("the call that outlived sc_finalize gave %s, expected its own "
			"SC_ERR_INVALID (an unknown handle)",
			sc_status_name(a.last));
	it_log("a call inside past the bound: sc_finalize returned after %.2f s, the call "
	       "completed, and destroyed the client as it left",
	       took);
}

int it_finalize_race(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 40;
	unsigned seed = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : (unsigned)time(NULL);
	double worst = 0, sum = 0;

	it_env.rank = it_env.env_rank >= 0 ? it_env.env_rank : 0;
	if (it_env.env_local_rank != 0) /* rank 1 never submits: rank 0's operations wait */
		it_pass();
	it_log("%d rounds, seed %u (finalize-race %d %u repeats them)", rounds, seed, rounds,
	       seed);
	for (int r = 0; r < rounds; r++) {
		double took = fr_round(r, &seed);

		sum += took;
		if (took > worst)
			worst = took;
	}
	fr_orphan();
	it_log("%d rounds: every thread inside the library ended with SC_ERR_SHUTDOWN; "
	       "sc_finalize took %.1f ms on average, %.1f ms at most",
	       rounds, sum / rounds * 1000, worst * 1000);
	it_pass();
}
