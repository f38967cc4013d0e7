/*
 * itest_random.c: the randomised run. STEPS steps (2000 by default) of one tensor on
 * every trainer; in each step, by a choice drawn from a seed every rank shares (so all
 * know the plan), one rank may
 *   - differ in one option: submit COO where the others submit dense, or register that
 *     step's tensor with allow_lossy, a top-k sparsifier, a pinned scheme or its own
 *     sketch rows where the others do not;
 *   - submit late: sleep LATE_MS, past the daemons' stall_timeout_ms;
 *   - die and come back: its worker process exits before or right after submitting, and a
 *     new one connects, registers again and goes on with the next step;
 *   - send COO indices out of range.
 * Steps without an event are dense or COO (the same on every rank), odd ranks writing
 * their COO lists backwards. Every result must be exact (the sum of every rank's values of
 * that step) or an error; a wrong sum fails at once, naming the step and its event. At the
 * end the ranks exchange what each step gave: a step exact on one rank and an error on
 * another fails the run. Rank 0 prints the counts: "random: N steps: E exact, F failed
 * on every rank, ...".
 *
 * With several trainers a node, the trainer that registers a differing option second is
 * refused at once (the node's other trainer then stalls): its step counts as failed.
 *
 * The trainer process supervises: it forks the worker that talks to the daemon, and forks
 * a new one when that one dies; the outcomes live in shared memory. After a death every
 * rank (the new worker first) waits in a barrier, retried until every node takes part
 * again, so that the steps that follow pair up.
 *
 *   random [--steps N] [--seed S] [--rate PERMILLE] [--late-ms MS]
 * (rate: per step, the chance of each kind of event, in thousandths; default 12; late:
 * default 700 ms, for a stall_timeout_ms of 300). With RND_VERBOSE=1 in the environment
 * rank 0 also lists every event's step, rank and outcome.
 */
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RND_NUMEL  1000
#define RND_DIED   77 /* a worker's exit status when the plan says it dies */
#define RND_SYNC_S 60.0

enum { EV_NONE, EV_DIFFER, EV_LATE, EV_DIE, EV_BADCOO, EV_KINDS };
static const char *const ev_names[EV_KINDS] = {"none", "differ", "late", "die", "bad COO"};
enum { OUT_NONE = 0, OUT_EXACT = 1, OUT_ERROR = 2 };

typedef struct {
	int ev, who, variant, coo;
} rnd_step_t;

typedef struct {
	int steps, rate, late_ms;
	uint64_t seed;
	/* shared with the workers */
	volatile int next_step;
	uint8_t outcome[]; /* per step: OUT_* */
} rnd_shared_t;

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static rnd_step_t plan(const rnd_shared_t *sh, int step, int P)
{
	uint64_t h = mix(sh->seed ^ mix((uint64_t)step));
	rnd_step_t s = {.ev = EV_NONE, .coo = (int)(h >> 40 & 1)};
	int r = (int)(h % 1000);
	for (int k = 1; k < EV_KINDS; k++)
		if (r >= (k - 1) * sh->rate && r < k * sh->rate)
			s.ev = k;
	s.who = (int)((h >> 16) % (uint64_t)P);
	s.variant = (int)((h >> 24) % 5);
	if (step == 0 && s.ev == EV_DIE) /* the first step starts the world: no death */
		s.ev = EV_NONE;
	return s;
}

/* Retried until every node takes part (a dead worker's node is degraded until it is
 * replaced). */
static void sync_all(sc_client_t *c, int step)
{
	double t0 = it_now_s();
	sc_status_t st;
	while ((st = sc_barrier(c, 10000)) != SC_OK) {
		if (it_now_s() - t0 > RND_SYNC_S)
			IT_FAIL(
			    "the barrier after step %d's death still fails after %.0f s: %s",
			    step, RND_SYNC_S, sc_last_error());
		it_sleep_ms(20);
	}
}

static sc_client_t *connect_retry(void)
{
	double t0 = it_now_s();
	for (;;) {
		sc_client_t *c = NULL;
		sc_status_t st = sc_connect(NULL, IT_CONNECT_TIMEOUT_MS, &c);
		if (st == SC_OK)
			return c;
		if (it_now_s() - t0 > RND_SYNC_S)
			IT_FAIL("a new worker cannot connect within %.0f s: %s", RND_SYNC_S,
				sc_last_error());
		it_sleep_ms(50);
	}
}

/* The tensor of a step whose event is an option differing on rank who. */
static sc_tensor_t *differ_tensor(sc_client_t *c, int step, const rnd_step_t *p)
{
	char name[64];
	snprintf(name, sizeof(name), "rnd.o%d", step);
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};
	if (sc_rank(c) == p->who) {
		if (p->variant == 1)
			o.allow_lossy = 1;
		else if (p->variant == 2)
			o.sparsifier = SC_SPARSIFY_TOPK, o.density = 0.1;
		else if (p->variant == 3)
			o.scheme = "dense_ring";
		else
			o.sketch_rows = 3;
	}
	sc_tensor_t *t = NULL;
	sc_status_t st = sc_register_ex(c, name, SC_FLOAT32, RND_NUMEL, &o, &t);
	/* with several trainers a node, the second of a node to register refuses the other
	 * options at once: that trainer has no step, the node's other stalls */
	if (st == SC_ERR_MISMATCH && sc_local_size(c) > 1 && strstr(sc_last_error(), name))
		return NULL;
	IT_CHECK_SC(st, "register '%s'", name);
	return t;
}

/* Fills t with this rank's values of step and submits it, dense or as a COO list (odd
 * ranks backwards; with bad, one index past the tensor). */
static sc_status_t submit(sc_client_t *c, sc_tensor_t *t, int step, int coo, int bad,
			  sc_handle_t *h)
{
	int rank = sc_rank(c);
	float *d = sc_tensor_data(t);
	it_fill(d, SC_FLOAT32, RND_NUMEL, 5000 + (uint64_t)step, rank, 1);
	if (!coo)
		return sc_allreduce_async(c, t, SC_OP_SUM, h);
	uint32_t *idx = sc_tensor_coo_indices(t);
	float *val = sc_tensor_coo_values(t);
	for (uint32_t i = 0; i < RND_NUMEL; i++) {
		uint32_t k = rank % 2 ? RND_NUMEL - 1 - i : i;
		idx[i] = k, val[i] = d[k];
	}
	if (bad)
		idx[RND_NUMEL / 2] = RND_NUMEL + 3;
	return sc_allreduce_coo_async(c, t, RND_NUMEL, SC_OP_SUM, h);
}

/* One step; its outcome goes to the shared array. */
static void run_step(sc_client_t *c, sc_tensor_t *g, rnd_shared_t *sh, int step)
{
	int rank = sc_rank(c), me;
	rnd_step_t p = plan(sh, step, sc_size(c));
	me = p.ev != EV_NONE && p.who == rank;
	sc_tensor_t *t = g;
	int coo = p.coo;
	if (p.ev == EV_DIFFER && p.variant == 0)
		coo = !coo ? me : !me; /* the input's form differs on rank who */
	else if (p.ev == EV_DIFFER && !(t = differ_tensor(c, step, &p))) {
		sh->next_step = step + 1;
		sh->outcome[step] = OUT_ERROR;
		return;
	} else if (p.ev == EV_DIFFER)
		coo = 0;
	else if (p.ev == EV_BADCOO)
		coo = 1;
	if (p.ev == EV_LATE && me)
		it_sleep_ms(sh->late_ms);
	sh->next_step = step + 1;
	if (p.ev == EV_DIE && me)
		it_log("step %d: this worker dies %s submitting", step,
		       p.variant % 2 ? "right after" : "before");
	if (p.ev == EV_DIE && me && p.variant % 2 == 0)
		_exit(RND_DIED); /* before submitting */
	sc_handle_t h = 0;
	sc_status_t st = submit(c, t, step, coo, p.ev == EV_BADCOO && me, &h);
	if (p.ev == EV_DIE && me)
		_exit(RND_DIED); /* right after submitting */
	int r = st == SC_OK ? it_wait(c, h, IT_OP_TIMEOUT_MS) : st;
	if (r == IT_HANG)
		IT_FAIL("step %d (%s on rank %d) never ended: %s", step, ev_names[p.ev], p.who,
			it_wait_error());
	if (r != SC_OK) {
		sh->outcome[step] = OUT_ERROR;
		return;
	}
	char why[512];
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, RND_NUMEL, 5000 + (uint64_t)step,
				sc_size(c), 1, SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("step %d (%s on rank %d, %s): SC_OK with %zu of %d elements wrong: %s",
			step, ev_names[p.ev], p.who, coo ? "COO" : "dense", wrong, RND_NUMEL,
			why);
	sh->outcome[step] = OUT_EXACT;
}

/* Every rank's outcomes summed per step and kind: none of them both exact somewhere and an
 * error elsewhere. Rank 0 prints the counts. */
static void compare(sc_client_t *c, rnd_shared_t *sh)
{
	int n = sh->steps, P = sc_size(c);
	sc_tensor_t *t = it_register(c, "rnd.outcomes", SC_INT32, 2 * (size_t)n);
	int32_t *v = sc_tensor_data(t);
	sc_status_t st = SC_ERR_SYSTEM;
	for (int tries = 0; tries < 20 && st != SC_OK; tries++) {
		for (int s = 0; s < n; s++) {
			v[s] = sh->outcome[s] == OUT_EXACT;
			v[n + s] = sh->outcome[s] == OUT_ERROR;
		}
		st = sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS);
	}
	IT_CHECK_SC(st, "the exchange of the outcomes");
	int exact = 0, failed = 0, events[EV_KINDS] = {0};
	for (int s = 0; s < n; s++) {
		rnd_step_t p = plan(sh, s, P);
		events[p.ev]++;
		if (v[s] && v[n + s])
			IT_FAIL("step %d (%s on rank %d): exact on %d ranks, an error on %d", s,
				ev_names[p.ev], p.who, v[s], v[n + s]);
		exact += v[s] > 0;
		failed += v[n + s] > 0;
		if (p.ev != EV_NONE && sc_rank(c) == 0 && getenv("RND_VERBOSE"))
			it_log("step %d: %s on rank %d (variant %d): exact on %d, failed on %d",
			       s, ev_names[p.ev], p.who, p.variant, v[s], v[n + s]);
	}
	if (sc_rank(c) == 0)
		it_log("random: %d steps (seed %llu): %d exact, %d failed on every rank, %d "
		       "without a result; events: %d differ, %d late, %d die, %d bad COO",
		       n, (unsigned long long)sh->seed, exact, failed, n - exact - failed,
		       events[EV_DIFFER], events[EV_LATE], events[EV_DIE], events[EV_BADCOO]);
}

static int worker(rnd_shared_t *sh)
{
	int start = sh->next_step;
	sc_client_t *c = connect_retry();
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .coo_capacity = RND_NUMEL};
	sc_tensor_t *g = NULL;
	IT_CHECK_SC(sc_register_ex(c, "rnd.g", SC_FLOAT32, RND_NUMEL, &o, &g), "register");
	if (start > 0) /* a new worker: the others wait for it in the barrier */
		sync_all(c, start - 1);
	for (int step = start; step < sh->steps; step++) {
		run_step(c, g, sh, step);
		if (plan(sh, step, sc_size(c)).ev == EV_DIE)
			sync_all(c, step);
	}
	compare(c, sh);
	sc_finalize(c);
	return 0;
}

int it_random(int argc, char **argv)
{
	int steps = 2000, rate = 12, late_ms = 700;
	uint64_t seed = 1;
	for (int i = 1; i + 1 < argc; i += 2) { /* argv[0]: the scenario */
		if (!strcmp(argv[i], "--steps"))
			steps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--rate"))
			rate = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--late-ms"))
			late_ms = atoi(argv[i + 1]);
		else
			IT_FAIL("random: unknown argument '%s'", argv[i]);
	}
	if (steps < 1 || rate < 0 || rate * (EV_KINDS - 1) > 1000)
		IT_FAIL("random: --steps %d or --rate %d out of range", steps, rate);
	rnd_shared_t *sh = mmap(NULL, sizeof(*sh) + (size_t)steps, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		IT_FAIL("random: mmap of the shared outcomes failed");
	sh->steps = steps, sh->rate = rate, sh->late_ms = late_ms, sh->seed = seed;
	double t0 = it_now_s();
	int deaths = 0;
	for (;;) {
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			IT_FAIL("random: fork failed");
		if (pid == 0)
			_exit(worker(sh));
		int status = 0;
		while (waitpid(pid, &status, 0) < 0)
			;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != RND_DIED)
			IT_FAIL("random: a worker failed (status %d) at step %d", status,
				sh->next_step - 1);
		deaths++;
	}
	it_log("random: %d steps in %.1f s, this rank's worker died %d times", steps,
	       it_now_s() - t0, deaths);
	it_pass();
}
