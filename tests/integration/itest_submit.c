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
 *
 * submit-threads [ROUNDS]: THREADS_N threads of one trainer, each with its own tensors,
 *   submit and wait ROUNDS (100) times at once: every sum exact (requests of several
 *   threads interleaved on the channel, each sent in the order of its lock).
 *
 * submit-reconnect [TIMES]: sc_finalize then sc_connect again at once, TIMES (200) times:
 *   every connect succeeds (the goodbye on the old channel is served before the new hello,
 *   which reaches the daemon by another socket, so the local rank is free).
 *
 * submit-batch: sc_submit_batch holds a trainer's collectives until a flush, and sends
 *   them as one SubmitBatch (`sparsectl status`: submit_requests and submit_batches):
 *   nothing of 8 submissions under a 10 s window is served before a wait, which sends all 8
 *   as one batch, and every sum is exact; a barrier after held submissions sends them
 *   first (its sums exact); the 64th request held sends the batch, as does a submission
 *   past the window and sc_submit_batch(c, 0), each with no wait; a negative window is
 *   SC_ERR_INVALID.
 *
 * submit-poll: one trainer, its channel's send buffer at the kernel's least and the daemon
 *   stopped (SIGSTOP): a second thread's submissions under a 10 s window fill the channel
 *   (the socket's queued bytes reach its buffer), and its send of a batch waits on the full
 *   socket while it holds the channel, 64 requests held; sc_poll of an operation started
 *   before (it went in the first batch) returns SC_IN_PROGRESS within 5 s and a 200 ms
 *   sc_wait SC_ERR_TIMEOUT within 5 s (both once waited for that send, to flush what is
 *   held, up to the library's 30 s timeout); once the daemon runs again every sum is
 *   exact. A watchdog process resumes the daemon after 20 s whatever becomes of the test.
 *
 * submit-fork: a child forked after sc_connect is refused a request (naming the forked
 *   child) and its sc_finalize returns without ending the parent's session: the parent's
 *   allreduce after it is exact.
 */
#include "itest.h"

#include <dirent.h>
#include <errno.h>
#include <linux/sockios.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ORDER_K = 8, ORDER_N = 256 };

/* This trainer's entry of `sparsectl status`: whether its channel is bound, the requests
 * the daemon served from it and the SubmitBatch messages among them (batches_p: NULL). */
static int own_channel_batches(uint64_t *requests_p, uint64_t *batches_p)
{
	const char *args[] = {"status", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *cl = it_json_get(s, "clients");
	int bound = -1;
	for (size_t i = 0; cl && cl->type == IT_JARR && i < cl->n; i++) {
		const it_json_t *p = it_json_get(cl->items[i], "pid");
		const it_json_t *b = it_json_get(cl->items[i], "submit_channel");
		const it_json_t *n = it_json_get(cl->items[i], "submit_requests");
		const it_json_t *m = it_json_get(cl->items[i], "submit_batches");
		if (p && p->type == IT_JNUM && (int)p->num == (int)getpid() && b && n) {
			bound = b->type == IT_JBOOL && b->num != 0;
			*requests_p = (uint64_t)n->num;
			if (batches_p)
				*batches_p = m && m->type == IT_JNUM ? (uint64_t)m->num : 0;
		}
	}
	it_json_free(s);
	if (bound < 0)
		IT_FAIL("sparsectl status lists no client of pid %d with its submit channel",
			(int)getpid());
	return bound;
}

static int own_channel(uint64_t *requests_p)
{
	return own_channel_batches(requests_p, NULL);
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

enum { THREADS_N = 4, THREADS_K = 3, THREADS_NUMEL = 300 };

typedef struct {
	sc_client_t *c;
	sc_tensor_t *t[THREADS_K];
	int id, rounds;
} thread_arg_t;

static void *submit_thread(void *p)
{
	thread_arg_t *a = p;
	char why[512];
	for (int round = 0; round < a->rounds; round++) {
		sc_handle_t h[THREADS_K];
		uint64_t seed = (uint64_t)(a->id * 1000 + round) * THREADS_K;
		for (int k = 0; k < THREADS_K; k++) {
			it_fill(sc_tensor_data(a->t[k]), SC_FLOAT32, THREADS_NUMEL, seed + k,
				sc_rank(a->c), 1);
			IT_CHECK_SC(sc_allreduce_async(a->c, a->t[k], SC_OP_SUM, &h[k]),
				    "thread %d round %d: submit %d", a->id, round, k);
		}
		for (int k = 0; k < THREADS_K; k++) {
			IT_CHECK_SC(sc_wait(a->c, h[k], IT_OP_TIMEOUT_MS),
				    "thread %d round %d: tensor %d", a->id, round, k);
			size_t wrong =
			    it_check(sc_tensor_data(a->t[k]), SC_FLOAT32, THREADS_NUMEL,
				     seed + k, sc_size(a->c), 1, SC_OP_SUM, why, sizeof(why));
			if (wrong)
				IT_FAIL("thread %d round %d: tensor %d: %zu of %d elements "
					"wrong: %s",
					a->id, round, k, wrong, THREADS_NUMEL, why);
		}
	}
	return NULL;
}

int it_submit_threads(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100;
	sc_client_t *c = it_connect();
	thread_arg_t a[THREADS_N];
	pthread_t th[THREADS_N];
	char name[64];
	for (int i = 0; i < THREADS_N; i++) {
		a[i] = (thread_arg_t){.c = c, .id = i, .rounds = rounds};
		for (int k = 0; k < THREADS_K; k++) {
			snprintf(name, sizeof(name), "threads.%d.%d", i, k);
			a[i].t[k] = it_register(c, name, SC_FLOAT32, THREADS_NUMEL);
		}
	}
	for (int i = 0; i < THREADS_N; i++)
		if (pthread_create(&th[i], NULL, submit_thread, &a[i]) != 0)
			IT_FAIL("pthread_create failed");
	for (int i = 0; i < THREADS_N; i++)
		pthread_join(th[i], NULL);
	it_log("%d threads x %d rounds x %d tensors exact", THREADS_N, rounds, THREADS_K);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* One allreduce of t, exact, for seed. */
static void fork_round(sc_client_t *c, sc_tensor_t *t, uint64_t seed, const char *when)
{
	char why[512];
	sc_handle_t h;
	it_fill(sc_tensor_data(t), SC_FLOAT32, ORDER_N, seed, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "%s: submit", when);
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "%s: wait", when);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, ORDER_N, seed, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("%s: %zu of %d elements wrong: %s", when, wrong, ORDER_N, why);
}

/* A child's part: 0 when it went as it should. request: it makes a request (refused),
 * else it only finalizes. */
static int fork_child(sc_client_t *c, sc_tensor_t *t, int request)
{
	sc_handle_t h;
	sc_status_t st = request ? sc_allreduce_async(c, t, SC_OP_SUM, &h) : SC_ERR_INVALID;
	if (st != SC_ERR_INVALID || (request && !strstr(sc_last_error(), "forked child"))) {
		fprintf(stderr, "itest submit-fork: the forked child's allreduce: %s: %s\n",
			sc_status_name(st), sc_last_error());
		return 1;
	}
	return sc_finalize(c) == SC_OK ? 0 : 2;
}

static sc_client_t *fork_client; /* the barrier thread's */

/* Forks a child that runs fork_child, then checks the parent's allreduce (t not NULL). */
static void fork_check(sc_client_t *c, sc_tensor_t *t, int request, uint64_t seed)
{
	pid_t p = fork();
	if (p < 0)
		IT_FAIL("fork: %s", strerror(errno));
	if (p == 0)
		_exit(fork_child(c, t, request));
	int st = it_wait_child(p, 20.0, "the forked child's sc_finalize");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		IT_FAIL("the forked child failed (%s %d: 1 its request was not refused, 2 its "
			"sc_finalize failed)",
			WIFEXITED(st) ? "exit status" : "signal",
			WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	if (t)
		fork_round(c, t, seed,
			   request ? "after the child's refused request"
				   : "after the child's sc_finalize");
}

static void *barrier_thread(void *arg)
{
	sc_status_t *st = arg;
	*st = sc_barrier(fork_client, IT_OP_TIMEOUT_MS);
	return NULL;
}

int it_submit_fork(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	sc_tensor_t *t = it_register(c, "fork.t", SC_FLOAT32, ORDER_N);
	fork_round(c, t, 1, "before the fork");
	fork_check(c, t, 0, 2);
	fork_check(c, t, 1, 3);
	/* forked while another thread waits in a barrier (on the client's condition
	 * variable): the child's sc_finalize takes no lock and destroys nothing that thread
	 * was waiting on, and returns; every rank's thread is in the barrier, which then
	 * ends, and the parent's session goes on */
	pthread_t th;
	sc_status_t bst = SC_IN_PROGRESS;
	fork_client = c;
	if (pthread_create(&th, NULL, barrier_thread, &bst) != 0)
		IT_FAIL("pthread_create: %s", strerror(errno));
	it_sleep_ms(300);
	fork_check(c, NULL, 0, 0);
	pthread_join(th, NULL);
	IT_CHECK_SC(bst, "the barrier a thread waited in across the fork");
	fork_round(c, t, 4, "after a fork during a barrier");
	it_log("a forked child's request refused, its sc_finalize harmless");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

int it_submit_reconnect(int argc, char **argv)
{
	int times = argc > 1 ? atoi(argv[1]) : 200;
	sc_client_t *c = it_connect();
	for (int i = 0; i < times; i++) {
		IT_CHECK_SC(sc_finalize(c), "sc_finalize %d", i);
		c = NULL;
		IT_CHECK_SC(sc_connect(NULL, IT_CONNECT_TIMEOUT_MS, &c),
			    "sc_connect right after sc_finalize, time %d of %d", i + 1, times);
	}
	it_log("%d times sc_finalize then sc_connect at once", times);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

enum { BATCH_SMALL = 65 };

/* Waits up to 5 s until the daemon has served want requests of this trainer's channel
 * more than base; fails naming what sent them (when). */
static void served_within(uint64_t base, uint64_t want, const char *when)
{
	uint64_t now = 0;
	for (int i = 0; i < 500; i++) {
		own_channel(&now);
		if (now - base >= want)
			return;
		it_sleep_ms(10);
	}
	IT_FAIL("%s: the daemon served %llu of the %llu requests it should have been sent, "
		"with no wait",
		when, (unsigned long long)(now - base), (unsigned long long)want);
}

/* Waits for h (tensor k of the round) and checks its sum. */
static void batch_check(sc_client_t *c, sc_tensor_t *t, sc_handle_t h, size_t n, uint64_t seed,
			const char *what)
{
	char why[512];
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "%s", what);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, n, seed, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("%s: %zu of %zu elements wrong: %s", what, wrong, n, why);
}

static sc_handle_t batch_start(sc_client_t *c, sc_tensor_t *t, size_t n, uint64_t seed)
{
	sc_handle_t h;
	it_fill(sc_tensor_data(t), SC_FLOAT32, n, seed, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "submit (seed %llu)",
		    (unsigned long long)seed);
	return h;
}

int it_submit_batch(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	sc_tensor_t *t[ORDER_K], *small[BATCH_SMALL];
	sc_handle_t h[BATCH_SMALL];
	char name[64];
	uint64_t r0, r1, b0, b1;
	for (int k = 0; k < ORDER_K; k++) {
		snprintf(name, sizeof(name), "batch.%d", k);
		t[k] = it_register(c, name, SC_FLOAT32, ORDER_N);
	}
	for (int k = 0; k < BATCH_SMALL; k++) {
		snprintf(name, sizeof(name), "batch.small.%d", k);
		small[k] = it_register(c, name, SC_FLOAT32, 4);
	}
	if (!own_channel(&r0))
		IT_FAIL("the submit channel is not bound");
	if (sc_submit_batch(c, -1) != SC_ERR_INVALID)
		IT_FAIL("sc_submit_batch(c, -1) was not SC_ERR_INVALID");

	/* held until a wait, then one batch */
	IT_CHECK_SC(sc_submit_batch(c, 10 * 1000 * 1000), "sc_submit_batch 10 s");
	own_channel_batches(&r0, &b0);
	for (int k = 0; k < ORDER_K; k++)
		h[k] = batch_start(c, t[k], ORDER_N, 500 + (uint64_t)k);
	it_sleep_ms(300);
	own_channel_batches(&r1, &b1);
	if (r1 != r0)
		IT_FAIL("the daemon served %llu of %d requests held by sc_submit_batch before "
			"any wait",
			(unsigned long long)(r1 - r0), ORDER_K);
	for (int k = 0; k < ORDER_K; k++)
		batch_check(c, t[k], h[k], ORDER_N, 500 + (uint64_t)k, "held, then waited");
	own_channel_batches(&r1, &b1);
	if (r1 - r0 != ORDER_K || b1 - b0 != 1)
		IT_FAIL("the wait sent %llu requests in %llu batches, expected %d in 1",
			(unsigned long long)(r1 - r0), (unsigned long long)(b1 - b0), ORDER_K);

	/* a barrier after held submissions: they go first */
	for (int round = 0; round < 3; round++)
		order_barrier(c, t, 1000 + round);

	/* the 64th request held sends the batch */
	own_channel(&r0);
	for (int k = 0; k < BATCH_SMALL - 1; k++)
		h[k] = batch_start(c, small[k], 4, 700 + (uint64_t)k);
	served_within(r0, BATCH_SMALL - 1, "64 requests held");
	for (int k = 0; k < BATCH_SMALL - 1; k++)
		batch_check(c, small[k], h[k], 4, 700 + (uint64_t)k, "the 64th request held");

	/* a submission past the window sends what is held with it */
	IT_CHECK_SC(sc_submit_batch(c, 2000), "sc_submit_batch 2 ms");
	own_channel(&r0);
	h[0] = batch_start(c, t[0], ORDER_N, 900);
	it_sleep_ms(20);
	h[1] = batch_start(c, t[1], ORDER_N, 901);
	served_within(r0, 2, "a submission 20 ms after the first held, with a 2 ms window");
	batch_check(c, t[0], h[0], ORDER_N, 900, "past the window (first)");
	batch_check(c, t[1], h[1], ORDER_N, 901, "past the window (second)");

	/* sc_submit_batch(c, 0) sends what is held */
	IT_CHECK_SC(sc_submit_batch(c, 10 * 1000 * 1000), "sc_submit_batch 10 s");
	own_channel(&r0);
	h[0] = batch_start(c, t[2], ORDER_N, 950);
	IT_CHECK_SC(sc_submit_batch(c, 0), "sc_submit_batch 0");
	served_within(r0, 1, "sc_submit_batch(c, 0)");
	batch_check(c, t[2], h[0], ORDER_N, 950, "sent by sc_submit_batch(c, 0)");
	it_log("batched submissions: held until a flush, every sum exact");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

enum { POLL_FILL = 256 };

/* The descriptor of this process's submit channel (the one SOCK_SEQPACKET socket connected
 * to a path), -1 when there is none or more than one. */
static int submit_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int found = -1, n = 0;
	while (d && (de = readdir(d)) != NULL) {
		int fd = atoi(de->d_name), type = 0;
		socklen_t len = sizeof(type);
		struct sockaddr_un a;
		socklen_t al = sizeof(a);
		if (de->d_name[0] == '.' || fd == dirfd(d) ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
		    type != SOCK_SEQPACKET ||
		    getpeername(fd, (struct sockaddr *)&a, &al) != 0 ||
		    a.sun_family != AF_UNIX || al <= sizeof(sa_family_t) || !a.sun_path[0])
			continue;
		found = fd;
		n++;
	}
	if (d)
		closedir(d);
	return n == 1 ? found : -1;
}

typedef struct {
	sc_client_t *c;
	sc_tensor_t **t;
	sc_handle_t h[POLL_FILL];
	int done; /* atomic */
} poll_fill_t;

/* Submits every fill tensor, each a held collective: every 64th sends a batch. */
static void *poll_fill(void *arg)
{
	poll_fill_t *f = arg;
	for (int k = 0; k < POLL_FILL; k++)
		f->h[k] = batch_start(f->c, f->t[k], 4, 3000 + (uint64_t)k);
	__atomic_store_n(&f->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int it_submit_poll(int argc, char **argv)
{
	static sc_tensor_t *fill[POLL_FILL];
	static poll_fill_t f;
	char name[64];
	sc_client_t *c = it_connect();
	if (sc_size(c) != 1)
		IT_FAIL("submit-poll stops its daemon: run it on one trainer, not %d",
			sc_size(c));
	sc_tensor_t *a = it_register(c, "poll.a", SC_FLOAT32, 4);
	for (int k = 0; k < POLL_FILL; k++) {
		snprintf(name, sizeof(name), "poll.fill.%d", k);
		fill[k] = it_register(c, name, SC_FLOAT32, 4);
	}
	int fd = submit_fd(), least = 1, pid = it_daemon_pid();
	if (fd < 0)
		IT_FAIL("no single submit channel among this process's descriptors");
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &least, sizeof(least)) != 0)
		IT_FAIL("SO_SNDBUF on the submit channel: %s", strerror(errno));
	int sndbuf = 0;
	socklen_t sl = sizeof(sndbuf);
	getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
	IT_CHECK_SC(sc_submit_batch(c, 10 * 1000 * 1000), "sc_submit_batch 10 s");
	pid_t dog = fork(); /* resumes the daemon whatever becomes of this process */
	if (dog == 0) {
		sleep(20);
		kill(pid, SIGCONT);
		_exit(0);
	}
	if (dog < 0)
		IT_FAIL("cannot fork the watchdog: %s", strerror(errno));
	if (kill(pid, SIGSTOP) != 0)
		IT_FAIL("SIGSTOP to the daemon (pid %d): %s", pid, strerror(errno));
	sc_handle_t ha = batch_start(c, a, 4, 2999); /* held */
	f.c = c;
	f.t = fill;
	pthread_t th;
	if (pthread_create(&th, NULL, poll_fill, &f) != 0) {
		kill(pid, SIGCONT);
		IT_FAIL("cannot start the filling thread");
	}
	double t0 = it_now_s();
	while (!__atomic_load_n(&f.done, __ATOMIC_SEQ_CST) && it_now_s() - t0 < 5.0)
		it_sleep_ms(10);
	int queued = -1; /* the bytes the socket holds: its buffer's worth when full */
	ioctl(fd, SIOCOUTQ, &queued);
	int filled = !__atomic_load_n(&f.done, __ATOMIC_SEQ_CST) && queued >= sndbuf;
	double p0 = it_now_s();
	sc_status_t polled = sc_poll(c, ha);
	double p1 = it_now_s();
	sc_status_t waited = sc_wait(c, ha, 200);
	double p2 = it_now_s();
	kill(pid, SIGCONT);
	kill(dog, SIGKILL);
	waitpid(dog, NULL, 0);
	if (!filled)
		IT_FAIL("%d held submissions in batches of 64 did not fill the channel (%d of "
			"its %d bytes queued, the thread %s)",
			POLL_FILL, queued, sndbuf,
			__atomic_load_n(&f.done, __ATOMIC_SEQ_CST) ? "done" : "still sending");
	if (polled != SC_IN_PROGRESS || p1 - p0 > 5.0) /* blocked: until the watchdog */
		IT_FAIL("sc_poll behind a send blocked on the full channel returned %s after "
			"%.2f s (expected SC_IN_PROGRESS within 5 s)",
			sc_status_message(polled), p1 - p0);
	if (waited != SC_ERR_TIMEOUT || p2 - p1 > 5.0)
		IT_FAIL("sc_wait(200 ms) behind a send blocked on the full channel returned %s "
			"after %.2f s (expected SC_ERR_TIMEOUT within 5 s)",
			sc_status_message(waited), p2 - p1);
	pthread_join(th, NULL);
	batch_check(c, a, ha, 4, 2999, "the operation polled, after the daemon resumed");
	for (int k = 0; k < POLL_FILL; k++)
		batch_check(c, fill[k], f.h[k], 4, 3000 + (uint64_t)k,
			    "a filling submission, after the daemon resumed");
	it_log("%d of %d bytes queued; sc_poll %.3f s, sc_wait(200 ms) %.3f s behind a send "
	       "blocked on the full "
	       "channel; every sum exact once the daemon resumed",
	       queued, sndbuf, p1 - p0, p2 - p1);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
