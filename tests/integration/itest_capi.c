/*
 * itest_capi.c: the public header's promises that a program written from sparsecomm.h
 * alone relies on, checked against real daemons (run with 2 or more trainers):
 *
 *   - sc_tensor_stats of a tensor in a process set gives that tensor's counters, not those
 *     of the tensor of the same name in the global set (a name is a name within its set),
 *     and the other way round;
 *   - sc_tensor_stats with a struct_size over this library's is SC_ERR_INVALID naming the
 *     tensor, and nothing is written;
 *   - sc_register_ex with the options of a newer sparsecomm.h (a larger struct_size): the
 *     bytes past this library's sc_tensor_opts_t at zero register the tensor with the
 *     options it knows; a non-zero one is SC_ERR_UNSUPPORTED naming the tensor, and an
 *     absurd struct_size is SC_ERR_INVALID;
 *   - sc_process_set_add that times out (every rank but 0 calls it, rank 0 never does):
 *     SC_ERR_TIMEOUT whose error text says that the other trainers did not call it in
 *     time (not that a release failed), and the client still sums exactly afterwards;
 *   - a child forked while rank 0 has an allreduce in flight: its sc_wait, sc_poll,
 *     sc_barrier and sc_group_begin on the parent's client are SC_ERR_INVALID naming the
 *     forked child at once (its wait is not a wait on a client whose I/O thread it does not
 *     have), its sc_finalize is SC_OK, and the parent's allreduce is then exact;
 *   - rank 0's sc_barrier(0) times out (the others enter 1 s later) and is abandoned: its
 *     next barrier is SC_ERR_BUSY naming the abandoned one while that has not ended, and
 *     once it has (the others entered it), the next barrier completes on every rank;
 *   - rank 0 abandons an allreduce in flight while another of its threads waits on it:
 *     its own sc_wait then is SC_ERR_INVALID at once, the waiting thread's ends with
 *     SC_ERR_INVALID when the operation ends (it read freed memory there), and the tensor's
 *     next allreduce is exact.
 */
#include "itest.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CA_N 64

/* Fills t with ones. */
static void ca_ones(sc_tensor_t *t)
{
	float *v = sc_tensor_data(t);
	for (size_t i = 0; i < CA_N; i++)
		v[i] = 1.0f;
}

/* A float32 tensor of CA_N ones. */
static sc_tensor_t *ca_ones_tensor(sc_client_t *c, const char *name)
{
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, CA_N);
	ca_ones(t);
	return t;
}

/* Checks that t holds the sum of every trainer's ones. */
static void ca_expect_sum(sc_client_t *c, sc_tensor_t *t, const char *what)
{
	float got = ((float *)sc_tensor_data(t))[CA_N - 1];
	if (got != (float)sc_size(c))
		IT_FAIL("'%s' %s: %g, expected %d", sc_tensor_name(t), what, got, sc_size(c));
}

/* Sums t over every member, steps times. */
static void ca_steps(sc_client_t *c, sc_tensor_t *t, int steps, const char *what)
{
	for (int s = 0; s < steps; s++) {
		ca_ones(t);
		IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "%s step %d", what,
			    s);
	}
}

static uint64_t ca_calls(sc_client_t *c, sc_tensor_t *t, const char *what)
{
	sc_tensor_stats_t st = {.struct_size = sizeof(st)};
	IT_CHECK_SC(sc_tensor_stats(c, t, &st), "stats of %s", what);
	return st.calls;
}

static void ca_stats_pset(sc_client_t *c)
{
	int me = sc_rank(c), zero = 0, id = -1;
	sc_tensor_t *g = it_register(c, "capi.w", SC_FLOAT32, CA_N), *s = NULL;

	IT_CHECK_SC(sc_process_set_add(c, &zero, 1, IT_OP_TIMEOUT_MS, &id), "set {0}");
	if (me == 0) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o), .process_set = id};
		IT_CHECK_SC(sc_register_ex(c, "capi.w", SC_FLOAT32, CA_N, &o, &s),
			    "'capi.w' in set %d", id);
		ca_steps(c, s, 2, "'capi.w' in the set");
	}
	ca_steps(c, g, 3, "global 'capi.w'");
	uint64_t gc = ca_calls(c, g, "the global 'capi.w'");
	if (gc != 3)
		IT_FAIL("sc_tensor_stats of the global 'capi.w' counts %llu calls, not its 3 "
			"(the set's tensor of the same name made 2)",
			(unsigned long long)gc);
	if (s) {
		uint64_t sc = ca_calls(c, s, "'capi.w' in the set");
		if (sc != 2)
			IT_FAIL("sc_tensor_stats of 'capi.w' in set %d counts %llu calls, not "
				"its 2 (the global one made 3)",
				id, (unsigned long long)sc);
	}
	/* a struct_size over this library's writes nothing */
	struct {
		sc_tensor_stats_t s;
		unsigned char more[16];
	} big;
	memset(&big, 0x5a, sizeof(big));
	big.s.struct_size = sizeof(big);
	sc_status_t st = sc_tensor_stats(c, g, &big.s);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "'capi.w'"))
		IT_FAIL("sc_tensor_stats with struct_size %zu: %s (%s), expected "
			"SC_ERR_INVALID naming the tensor",
			sizeof(big), sc_status_name(st), sc_last_error());
	if (big.s.calls != 0x5a5a5a5a5a5a5a5aULL)
		IT_FAIL("a refused sc_tensor_stats wrote the structure");
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier before removing set %d", id);
	if (s)
		IT_CHECK_SC(sc_tensor_release(c, s), "releasing 'capi.w' in set %d", id);
	IT_CHECK_SC(sc_process_set_remove(c, id, IT_OP_TIMEOUT_MS), "removing set %d", id);
	it_log("stats per process set: global 3 calls, set %d's 2", id);
}

/* A newer header's options: this library's struct followed by an option it lacks. */
typedef struct {
	sc_tensor_opts_t o;
	uint64_t future;
} ca_newer_opts_t;

static void ca_opts_newer(sc_client_t *c)
{
	ca_newer_opts_t n;
	sc_tensor_t *t = NULL;
	sc_status_t st;

	memset(&n, 0, sizeof(n));
	n.o.struct_size = sizeof(n);
	n.o.sparsifier = SC_SPARSIFY_TOPK;
	n.o.density = 0.5;
	IT_CHECK_SC(sc_register_ex(c, "capi.newer0", SC_FLOAT32, CA_N, &n.o, &t),
		    "newer opts whose unknown option is at its default");
	if (!sc_tensor_residual(t))
		IT_FAIL("'capi.newer0' registered without its top-k sparsifier (no residual)");
	n.future = 1;
	t = NULL;
	st = sc_register_ex(c, "capi.newer1", SC_FLOAT32, CA_N, &n.o, &t);
	if (st != SC_ERR_UNSUPPORTED || t || !strstr(sc_last_error(), "'capi.newer1'"))
		IT_FAIL("newer opts setting an option this library lacks: %s (%s), expected "
			"SC_ERR_UNSUPPORTED naming the tensor",
			sc_status_name(st), sc_last_error());
	n.o.struct_size = 1u << 20;
	st = sc_register_ex(c, "capi.newer2", SC_FLOAT32, CA_N, &n.o, &t);
	if (st != SC_ERR_INVALID || t)
		IT_FAIL("opts with struct_size %u: %s (%s), expected SC_ERR_INVALID",
			n.o.struct_size, sc_status_name(st), sc_last_error());
	it_log("newer opts: defaults taken, an unknown option refused (%s)", sc_last_error());
}

static void ca_pset_timeout(sc_client_t *c)
{
	int zero = 0, id = -1;

	if (sc_rank(c) == 0) {
		it_sleep_ms(1500); /* past the others' timeout */
	} else {
		double t0 = it_now_s();
		sc_status_t st = sc_process_set_add(c, &zero, 1, 300, &id);
		double dt = it_now_s() - t0;
		const char *why = sc_last_error();
		if (st != SC_ERR_TIMEOUT || id != -1 || dt > 5.0 ||
		    !strstr(why, "adding a process set") || !it_mentions_number(why, 300))
			IT_FAIL(
			    "sc_process_set_add that rank 0 never calls: %s after %.2f s, id "
			    "%d (%s), expected SC_ERR_TIMEOUT saying so",
			    sc_status_name(st), dt, id, why);
		it_log("process set add timed out: %s", why);
	}
	sc_tensor_t *t = it_register(c, "capi.after", SC_FLOAT32, CA_N);
	ca_steps(c, t, 1, "'capi.after'");
	ca_expect_sum(c, t, "after the timed-out add");
}

/* The forked child's checks: 0 when every call was refused at once, naming the child. */
static int ca_fork_child(sc_client_t *c, sc_handle_t h)
{
	sc_group_t g;
	sc_status_t st[4];
	double t0 = it_now_s();

	st[0] = sc_wait(c, h, 3000);
	st[1] = sc_poll(c, h);
	st[2] = sc_barrier(c, 3000);
	st[3] = sc_group_begin(c, 1, &g);
	for (int i = 0; i < 4; i++)
		if (st[i] != SC_ERR_INVALID) {
			fprintf(stderr, "itest capi: the forked child's call %d: %s (%s)\n", i,
				sc_status_name(st[i]), sc_last_error());
			return 1;
		}
	if (!strstr(sc_last_error(), "forked child") || it_now_s() - t0 > 2.0) { /* not 3 s */
		fprintf(stderr, "itest capi: the forked child's calls took %.2f s: %s\n",
			it_now_s() - t0, sc_last_error());
		return 2;
	}
	return sc_finalize(c) == SC_OK ? 0 : 3;
}

static void ca_fork(sc_client_t *c)
{
	sc_tensor_t *t = ca_ones_tensor(c, "capi.fork");
	sc_handle_t h = 0;

	if (sc_rank(c) == 0) {
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "'capi.fork'");
		pid_t p = fork();
		if (p < 0)
			IT_FAIL("fork failed");
		if (p == 0)
			_exit(ca_fork_child(c, h));
		int ws = it_wait_child(p, 20.0, "the forked child");
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			IT_FAIL(
			    "the forked child failed (status %d: 1 a call was not refused, 2 "
			    "not at once or not naming it, 3 its sc_finalize failed)",
			    WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
	}
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier after the fork");
	if (sc_rank(c) != 0)
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "'capi.fork'");
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "'capi.fork' after the fork");
	ca_expect_sum(c, t, "after the fork");
	it_log("a forked child's calls refused at once, the parent's allreduce exact");
}

static void ca_barrier_abandoned(sc_client_t *c)
{
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier before the abandoned one");
	if (sc_rank(c) != 0) {
		it_sleep_ms(1000); /* rank 0's barrier is in flight, abandoned */
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "rank 0's abandoned barrier");
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "the barrier after it");
		return;
	}
	sc_status_t st = sc_barrier(c, 0);
	if (st != SC_ERR_TIMEOUT)
		IT_FAIL("sc_barrier(0) alone: %s (%s), expected SC_ERR_TIMEOUT",
			sc_status_name(st), sc_last_error());
	sc_handle_t h;
	st = sc_barrier_async(c, &h);
	if (st != SC_ERR_BUSY || !strstr(sc_last_error(), "abandoned"))
		IT_FAIL("a barrier while the abandoned one is in flight: %s (%s), expected "
			"SC_ERR_BUSY naming the abandoned barrier",
			sc_status_name(st), sc_last_error());
	it_log("the barrier after an abandoned one in flight: %s", sc_last_error());
	double deadline = it_now_s() + 30.0;
	while ((st = sc_barrier_async(c, &h)) == SC_ERR_BUSY && it_now_s() < deadline)
		it_sleep_ms(20);
	IT_CHECK_SC(st, "the barrier after the abandoned one ended");
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "the barrier after the abandoned one");
}

typedef struct {
	sc_client_t *c;
	sc_handle_t h;
	sc_status_t st;
} ca_waiter_t;

static void *ca_wait_thread(void *arg)
{
	ca_waiter_t *w = arg;
	w->st = sc_wait(w->c, w->h, IT_OP_TIMEOUT_MS);
	return NULL;
}

static void ca_abandon_wait(sc_client_t *c)
{
	sc_tensor_t *t = ca_ones_tensor(c, "capi.abandon");
	sc_handle_t h = 0;

	if (sc_rank(c) == 0) {
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "'capi.abandon'");
		ca_waiter_t w = {c, h, SC_IN_PROGRESS};
		pthread_t th;
		if (pthread_create(&th, NULL, ca_wait_thread, &w) != 0)
			IT_FAIL("pthread_create failed");
		it_sleep_ms(200); /* the thread waits */
		sc_abandon(c, h);
		double t0 = it_now_s();
		sc_status_t st = sc_wait(c, h, 5000);
		if (st != SC_ERR_INVALID || it_now_s() - t0 > 1.5) /* not the wait's 5 s */
			IT_FAIL(
			    "sc_wait on the abandoned 'capi.abandon': %s after %.2f s (%s), "
			    "expected SC_ERR_INVALID at once",
			    sc_status_name(st), it_now_s() - t0, sc_last_error());
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS),
			    "barrier, 'capi.abandon' abandoned");
		pthread_join(th, NULL);
		if (w.st != SC_ERR_INVALID)
			IT_FAIL(
			    "the thread waiting on 'capi.abandon' when it was abandoned: %s, "
			    "expected SC_ERR_INVALID",
			    sc_status_name(w.st));
	} else {
		it_sleep_ms(500);
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS),
			    "barrier, 'capi.abandon' abandoned");
		IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "'capi.abandon'");
	}
	ca_ones(t);
	double deadline = it_now_s() + 30.0;
	sc_status_t st;
	while ((st = sc_allreduce_async(c, t, SC_OP_SUM, &h)) == SC_ERR_BUSY &&
	       it_now_s() < deadline)
		it_sleep_ms(10);
	IT_CHECK_SC(st, "'capi.abandon' after the abandoned step");
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "'capi.abandon' after the abandoned step");
	ca_expect_sum(c, t, "after the abandoned step");
	it_log("a wait on an abandoned handle refused, in this thread and a waiting one");
}

int it_capi(int argc, char **argv)
{
	sc_client_t *c = it_connect();

	ca_opts_newer(c);
	ca_stats_pset(c);
	ca_fork(c);
	ca_barrier_abandoned(c);
	ca_abandon_wait(c);
	ca_pset_timeout(c);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
