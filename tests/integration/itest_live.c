/*
 * itest_live.c: a peer daemon that goes away while the others wait on it
 * (tests/integration/liveness.sh starts the daemons by hand and stops the victim's).
 *
 *   gone VICTIM WORD LIMIT_MS [rejoin]: every trainer takes part in one exact allreduce;
 *   the victim node's trainers then finalize and exit; every other trainer submits
 *   another and prints "waiting" (the script then stops the victim's daemon). That
 *   operation must fail with SC_ERR_PEER, naming the victim node's rank and WORD ("left",
 *   "lost"), within LIMIT_MS of its submission; a later submission fails at once the same
 *   way. With rejoin, each then prints "rejoin-ready" (the script starts the victim's
 *   daemon again, and its trainer with the rejoin scenario) and submits again until the
 *   world is whole: the sum must then be exact on every rank. With rejoin, every trainer
 *   also takes part in a barrier before the victim leaves, and in one once the world is
 *   whole again.
 *   rejoin: the restarted node's trainer: the same allreduce until it succeeds, exact;
 *   then a barrier, which its new daemon numbers 1 while the job is at 2: it must fail at
 *   once saying so, and the next one complete with the others'.
 *   gone-busy VICTIM LIMIT_MS: every trainer runs allreduces of 16 MiB back to back and prints
 *   "busy" after the first (the script then kills the victim's daemon, most likely while
 *   the data plane moves a buffer). The others' first failure must be SC_ERR_PEER naming
 *   the victim node's rank, within LIMIT_MS of their "busy"; the victim's own trainer
 *   just ends.
 *   bigreg MIB: the last rank registers a tensor of MIB MiB (seconds to reserve and map in)
 *   while the others sum; every rank then sums again, exact: with peer_timeout_ms below
 *   the registration's time, a daemon that prepared it on its loop would miss its
 *   heartbeats and be declared lost.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIVE_NUMEL 1000

/* The operation h must fail with SC_ERR_PEER naming rank bad and word, within limit_ms of
 * t0. */
static void expect_gone(sc_client_t *c, sc_handle_t h, const char *what, int bad,
			const char *word, double t0, int limit_ms)
{
	int r = it_wait(c, h, limit_ms + IT_ERROR_TIMEOUT_MS);
	double took = it_now_s() - t0;
	const char *why = it_wait_error();
	if (r != SC_ERR_PEER)
		IT_FAIL("%s: %s (%s), expected SC_ERR_PEER naming rank %d", what,
			it_wait_name(r), why, bad);
	if (!it_mentions_rank(why, bad) || !strstr(why, word))
		IT_FAIL("%s: the error names neither rank %d nor '%s': %s", what, bad, word,
			why);
	if (took * 1000 > limit_ms)
		IT_FAIL("%s failed only after %.2f s (limit %d ms): %s", what, took, limit_ms,
			why);
	it_log("%s failed after %.2f s: %s", what, took, why);
}

/* Submits 'live.c' until the world is whole again (a submission fails while the node is
 * away or the world re-forms), within 60 s; the sum must then be exact. */
static void until_whole(sc_client_t *c)
{
	int me = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t = it_register(c, "live.c", SC_FLOAT32, LIVE_NUMEL);
	double t0 = it_now_s();
	sc_status_t st;
	int tries = 0;
	do {
		if (tries++)
			usleep(100 * 1000);
		it_fill(sc_tensor_data(t), SC_FLOAT32, LIVE_NUMEL, 13, me, 1);
		st = sc_allreduce(c, t, SC_OP_SUM, IT_ERROR_TIMEOUT_MS);
	} while (st != SC_OK && (st == SC_ERR_PEER || st == SC_ERR_STALLED) &&
		 it_now_s() - t0 < 60);
	IT_CHECK_SC(st, "allreduce of 'live.c' once the node is back (%d tries)", tries);
	char why[512];
	if (it_check(sc_tensor_data(t), SC_FLOAT32, LIVE_NUMEL, 13, size, 1, SC_OP_SUM, why,
		     sizeof(why)))
		IT_FAIL("'live.c' with the node back: %s", why);
	it_log("'live.c' exact on the whole world after %.2f s and %d tries", it_now_s() - t0,
	       tries);
}

int it_live_rejoin(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	until_whole(c);
	double t0 = it_now_s();
	sc_status_t st = sc_barrier(c, IT_ERROR_TIMEOUT_MS);
	double took = it_now_s() - t0;
	if (st != SC_ERR_ABORTED || !strstr(sc_last_error(), "is not the job's barrier 2") ||
	    took > 5)
		IT_FAIL("the restarted node's first barrier: %s after %.2f s (%s), expected "
			"SC_ERR_ABORTED at once saying it is not the job's barrier 2",
			sc_status_name(st), took, sc_last_error());
	it_log("the restarted node's first barrier failed after %.2f s: %s", took,
	       sc_last_error());
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "the restarted node's second barrier");
	sc_finalize(c);
	it_pass();
}

int it_live_busy(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: gone-busy VICTIM LIMIT_MS");
	int victim = atoi(argv[1]), limit_ms = atoi(argv[2]);
	sc_client_t *c = it_connect();
	int me = sc_rank(c), L = it_env.env_local_size;
	size_t n = 4u << 20;
	sc_tensor_t *t = it_register(c, "live.busy", SC_FLOAT32, n);
	double t0 = 0;
	sc_status_t st;
	int steps = 0;
	do {
		it_fill(sc_tensor_data(t), SC_FLOAT32, n, 17, me, 1);
		st = sc_allreduce(c, t, SC_OP_SUM, limit_ms + IT_ERROR_TIMEOUT_MS);
		if (st == SC_OK && steps++ == 0) {
			t0 = it_now_s();
			printf("itest gone-busy: rank %d busy\n", me);
			fflush(stdout);
		}
	} while (st == SC_OK && it_now_s() - t0 < 60);
	if (it_env.env_node_rank == victim) { /* its daemon went: whatever it says */
		it_log("the victim's trainer ends after %d steps: %s", steps, sc_last_error());
		it_pass();
	}
	const char *why = sc_last_error();
	double took = it_now_s() - t0;
	if (st != SC_ERR_PEER || !it_mentions_rank(why, victim * L))
		IT_FAIL("after %d steps: %s (%s), expected SC_ERR_PEER naming rank %d", steps,
			sc_status_name(st), why, victim * L);
	if (took * 1000 > limit_ms)
		IT_FAIL("failed only %.2f s after it was busy (limit %d ms): %s", took,
			limit_ms, why);
	it_log("failed after %d steps, %.2f s after it was busy: %s", steps, took, why);
	sc_finalize(c);
	it_pass();
}

/* Every trainer's exact allreduce of 'live.a' while the world is whole; returns it. */
static sc_tensor_t *first_step(sc_client_t *c)
{
	sc_tensor_t *a = it_register(c, "live.a", SC_FLOAT32, LIVE_NUMEL);
	char why[512];
	it_fill(sc_tensor_data(a), SC_FLOAT32, LIVE_NUMEL, 11, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce(c, a, SC_OP_SUM, IT_OP_TIMEOUT_MS), "allreduce of 'live.a'");
	if (it_check(sc_tensor_data(a), SC_FLOAT32, LIVE_NUMEL, 11, sc_size(c), 1, SC_OP_SUM,
		     why, sizeof(why)))
		IT_FAIL("'live.a' before any daemon went away: %s", why);
	return a;
}

int it_live_gone(int argc, char **argv)
{
	if (argc < 4)
		IT_FAIL("usage: gone VICTIM WORD LIMIT_MS");
	int victim = atoi(argv[1]), limit_ms = atoi(argv[3]);
	const char *word = argv[2];
	sc_client_t *c = it_connect();
	int me = sc_rank(c), L = it_env.env_local_size;
	int bad = victim * L; /* the victim node's first trainer */
	sc_tensor_t *a = first_step(c);
	int rejoin = argc > 4 && !strcmp(argv[4], "rejoin");
	if (rejoin)
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier before node %d goes",
			    victim);
	if (it_env.env_node_rank == victim) {
		sc_finalize(c);
		it_pass();
	}
	sc_tensor_t *b = it_register(c, "live.b", SC_FLOAT32, LIVE_NUMEL);
	sc_handle_t h;
	double t0 = it_now_s();
	IT_CHECK_SC(sc_allreduce_async(c, b, SC_OP_SUM, &h), "allreduce of 'live.b'");
	printf("itest gone: rank %d waiting\n", me);
	fflush(stdout);
	expect_gone(c, h, "'live.b'", bad, word, t0, limit_ms);
	/* the world stays without the node: the next operation fails at once */
	t0 = it_now_s();
	IT_CHECK_SC(sc_allreduce_async(c, a, SC_OP_SUM, &h), "allreduce of 'live.a' again");
	expect_gone(c, h, "'live.a' after it", bad, word, t0, 3000);
	if (rejoin) {
		printf("itest gone: rank %d rejoin-ready\n", me);
		fflush(stdout);
		until_whole(c);
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier with node %d back",
			    victim);
	}
	sc_finalize(c);
	it_pass();
}

int it_live_bigreg(int argc, char **argv)
{
	if (argc < 2)
		IT_FAIL("bigreg: MIB missing");
	uint64_t mib = strtoull(argv[1], NULL, 10);
	sc_client_t *c = it_connect();
	sc_tensor_t *t = it_register(c, "live.bigreg.small", SC_FLOAT32, LIVE_NUMEL);
	char why[512];
	for (int step = 0; step < 2; step++) {
		if (step == 1 && sc_rank(c) == sc_size(c) - 1) {
			sc_tensor_t *big;
			double t0 = it_now_s();
			IT_CHECK_SC(sc_register(c, "live.bigreg.big", SC_FLOAT32,
						(size_t)(mib << 18), &big),
				    "register %llu MiB", (unsigned long long)mib);
			it_log("registered %llu MiB in %.2f s", (unsigned long long)mib,
			       it_now_s() - t0);
		}
		for (int k = 0; k < 5; k++) {
			it_fill(sc_tensor_data(t), SC_FLOAT32, LIVE_NUMEL, (uint64_t)k,
				sc_rank(c), 1);
			IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "step %d.%d beside a large registration", step, k);
			if (it_check(sc_tensor_data(t), SC_FLOAT32, LIVE_NUMEL, (uint64_t)k,
				     sc_size(c), 1, SC_OP_SUM, why, sizeof(why)))
				IT_FAIL("step %d.%d: %s", step, k, why);
			it_sleep_ms(100);
		}
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * own VICTIM LIMIT_MS: every trainer takes part in one exact allreduce; the victim node's
 * trainer then submits 'live.own', which nobody else submits, prints "waiting" and waits
 * up to a minute (the script then kills its own daemon). The wait must end within
 * LIMIT_MS with SC_ERR_CONNECT naming the rank and the tensor: the library's waiter,
 * asleep on the tensor's futex (proto/shm_wake.h), is woken by the lost connection, not
 * by its timeout. The other trainers idle until the script stops them.
 */
int it_live_own(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: own VICTIM LIMIT_MS");
	int victim = atoi(argv[1]), limit_ms = atoi(argv[2]);
	sc_client_t *c = it_connect();
	int me = sc_rank(c);
	first_step(c);
	if (it_env.env_node_rank != victim) {
		printf("itest own: rank %d idle\n", me);
		fflush(stdout);
		it_sleep_ms(60000);
		IT_FAIL("never stopped by the script");
	}
	sc_tensor_t *b = it_register(c, "live.own", SC_FLOAT32, LIVE_NUMEL);
	sc_handle_t h;
	IT_CHECK_SC(sc_allreduce_async(c, b, SC_OP_SUM, &h), "allreduce of 'live.own'");
	double t0 = it_now_s();
	printf("itest own: rank %d waiting\n", me);
	fflush(stdout);
	int r = it_wait(c, h, 60000);
	double took = it_now_s() - t0;
	const char *err = it_wait_error();
	if (r != SC_ERR_CONNECT || !it_mentions_rank(err, me) || !strstr(err, "'live.own'"))
		IT_FAIL("'live.own' with its daemon killed: %s (%s), expected SC_ERR_CONNECT "
			"naming rank %d and the tensor",
			it_wait_name(r), err, me);
	if (took * 1000 > limit_ms)
		IT_FAIL("'live.own' ended only %.2f s after it waited (limit %d ms): %s", took,
			limit_ms, err);
	it_log("'live.own' ended %.2f s after it waited: %s", took, err);
	it_pass();
}
