/*
 * itest_random.c: the randomised run. STEPS steps (2000 by default); in each, by choices
 * drawn from a seed every rank shares (so all know the plan), every trainer runs one
 * collective: an allreduce of rnd.g (dense or COO, the same on every rank, odd ranks
 * writing their COO lists backwards), a broadcast of rnd.b from a root drawn from the
 * seed, an allgather of rnd.ag (each rank 0 to 4 rows of 5 elements, drawn from the
 * seed), a reduce-scatter of rnd.rs (rows of a width drawn from the seed), an alltoall of
 * rnd.a2a (each rank's splits drawn from the seed, 0 included) or an allreduce of rnd.ga
 * and rnd.gb grouped; with --psets 1, also a process set step: any of these collectives
 * (a broadcast from a member drawn from the seed, an alltoall's blocks and a
 * reduce-scatter's rows among the members in set rank order) in set 1 (the even ranks) or
 * set 2 (every rank but 0), each tensor registered under the same name in the global set
 * and in each set the rank is a member of, the sets added by every rank at the start; a rank
 * outside the step's set has no operation that step. A new worker does not know the sets
 * (adding one is a collective of every trainer), so the steps after the first death draw an
 * allreduce in their place;
 * --deaths 0 draws no death, for process set steps throughout. And one rank may
 *   - differ: in an allreduce, submit COO where the others submit dense, or register that
 *     step's tensor with allow_lossy, a top-k sparsifier, a pinned scheme or its own
 *     sketch rows where the others do not; in a broadcast, give the next root; in an
 *     allgather, give the whole tensor (over it in all, unless every other rank gives
 *     none); in a reduce-scatter, rows of another width; in an alltoall, send its whole
 *     tensor to the next rank (over what that one may receive, unless the others send it
 *     nothing); in a group, rnd.gc in rnd.gb's place (rnd.gb then alone);
 *   - submit late: sleep LATE_MS, past the daemons' stall_timeout_ms;
 *   - die and come back: its worker process exits before or right after submitting, and a
 *     new one connects, registers again and goes on with the next step;
 *   - give bad input: COO indices out of range to an allreduce, a root past the last rank
 *     to a broadcast (in a set, the first rank outside it), an allgather's count over the
 * tensor, rows that do not divide rnd.rs, alltoall splits that add up to more than the tensor,
 * a group of two closed with one member (rnd.gb then alone). Every result must be exact
 * (computed from the seed: the sum of every rank's values of that step, the root's values,
 * every rank's rows, this rank's slice, every rank's block) or an error naming the tensor; a
 * wrong result fails at once, naming the step, the collective and its event, and so do a
 * group's members of which some were exact and some failed. At the end the ranks exchange what
 * each step gave: a step exact on one rank and an error on another fails the run, and so does a
 * step without an event that failed when no event explains it (not among the few failed steps
 * right after a late one or a failed process set step, whose members may come late to the
 * next steps, process set steps without the late rank in between, nor before the
 * first exact step of its tensor's form after a death). Rank 0 prints the counts
 * ("random: N steps: E exact, F failed on every rank, ..."), with the events and collectives
 * drawn.
 *
 * With several trainers a node, the trainer that registers a differing option second is
 * refused at once (the node's other trainer then stalls): its step counts as failed.
 *
 * The trainer process supervises: it forks the worker that talks to the daemon, and forks
 * a new one when that one dies; the outcomes live in shared memory. After a death every
 * rank (the new worker first) waits in a barrier, retried until every node takes part
 * again, so that the steps that follow pair up.
 *
 * With --resets 1 the caller resets data-plane connections meanwhile (run.sh, "data
 * reset"): a step may then fail with the reason the world re-forms for (a data-plane
 * failure), which every rank that fails it must give alike (a hash of it is exchanged),
 * and a rank whose part was over before the connections broke may have it exact; the few
 * steps after it may fail as after a late one. Without it, such a failure fails the run.
 *
 *   random [--steps N] [--seed S] [--rate PERMILLE] [--late-ms MS] [--psets 1]
 *          [--deaths 0] [--resets 1]
 * (rate: per step, the chance of each kind of event, in thousandths; default 12; late:
 * default 1700 ms, for a stall_timeout_ms of 1000: a step late by less than the stall,
 * from a busy host's scheduling alone, must not fail). With RND_VERBOSE=1 in the environment
 * rank 0 also lists every event's step, collective, rank and outcome; with 2 every rank
 * also logs each error it gets.
 */
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RND_NUMEL      1000
#define RND_DIED       77 /* a worker's exit status when the plan says it dies */
#define RND_SYNC_S     60.0
#define RND_LATE_REACH 4  /* the steps after a late one that may fail with it */
#define AG_ROWS	       4  /* an allgather: 0 to AG_ROWS rows a rank */
#define AG_W	       5  /* elements a row */
#define A2A_MAX	       40 /* an alltoall: 0 to A2A_MAX elements from each rank to each */
#define GR_A	       300 /* the grouped allreduce's two tensors: rnd.ga and rnd.gb (or rnd.gc) */
#define GR_B	       700

enum { EV_NONE, EV_DIFFER, EV_LATE, EV_DIE, EV_BADCOO, EV_KINDS };
static const char *const ev_names[EV_KINDS] = {"none", "differ", "late", "die", "bad input"};
enum { C_ALLREDUCE, C_BCAST, C_ALLGATHER, C_RS, C_A2A, C_GROUP, C_PSET, C_KINDS };
static const char *const coll_names[C_KINDS] = {
    "allreduce", "broadcast",	      "allgather",	 "reduce-scatter",
    "alltoall",	 "grouped allreduce", "process set step"};
/* A process set step's collective, in set 1 (the even ranks) or 2 (every rank but 0). */
enum { PS_ALLREDUCE, PS_BCAST, PS_ALLGATHER, PS_RS, PS_A2A, PS_GROUP, PS_KINDS };
static const char *const ps_names[PS_KINDS] = {
    "allreduce", "broadcast", "allgather", "reduce-scatter", "alltoall", "grouped allreduce"};
#define RND_SETS 2
static const size_t rs_widths[] = {1, 2, 4, 5, 8, 10}; /* each divides RND_NUMEL */
enum { OUT_NONE = 0, OUT_EXACT = 1, OUT_ERROR = 2 };

/* The start of the reason every rank gives for what was in flight when a data-plane
 * failure re-formed the world (world/world.c). */
#define REFORM_WHY "the world re-forms: the data plane failed"

/* A hash of such a reason, in 20 bits and never 0, so that P of them add up in an int32. */
static uint32_t reform_hash(const char *why)
{
	uint32_t h = 2166136261u;
	for (; *why; why++)
		h = (h ^ (uint8_t)*why) * 16777619u;
	return (h & 0xfffff) | 1;
}

typedef struct {
	int ev, who, variant, coo, coll, root, P;
	int ps, ps_coll;       /* a process set step's set (1 or 2) and collective (PS_*) */
	size_t rs_w, rs_other; /* a reduce-scatter's row width, and another that divides too */
	uint64_t h;	       /* the step's hash: every per-rank count derives from it */
} rnd_step_t;

typedef struct {
	int steps, rate, late_ms;
	int psets;	 /* --psets: process set steps drawn too */
	int no_deaths;	 /* --deaths 0: no worker dies (a death's draw is no event) */
	int resets;	 /* --resets 1: the data plane's connections are reset meanwhile */
	int first_death; /* the first step with a death (steps: none) */
	uint64_t seed;
	/* shared with the workers */
	volatile int next_step;
	/* per step: a hash of the reason of a failure by the world re-forming after a
	 * data-plane failure (its text from "the world re-forms:" on), 0: none */
	uint32_t *reform;
	uint8_t outcome[]; /* per step: OUT_* */
} rnd_shared_t;

/* A worker's tensors, one per collective (rnd.g the allreduce's, dense or COO), and the
 * allreduce's, broadcast's and allgather's under the same names in each process set this
 * rank is a member of (index: the set, 1 or 2; NULL elsewhere). */
typedef struct {
	sc_tensor_t *g, *b, *ag, *rs, *a2a, *ga, *gb, *gc;
	sc_tensor_t *ps_g[RND_SETS + 1], *ps_b[RND_SETS + 1], *ps_ag[RND_SETS + 1];
	sc_tensor_t *ps_rs[RND_SETS + 1], *ps_a2a[RND_SETS + 1];
	sc_tensor_t *ps_ga[RND_SETS + 1], *ps_gb[RND_SETS + 1], *ps_gc[RND_SETS + 1];
	int ps_id[RND_SETS + 1];
} rnd_tensors_t;

/* A step's operations as this rank started them: up to three (a group's members, and
 * rnd.gb alone after a group without it). */
typedef struct {
	int n;
	sc_tensor_t *t[3];
	sc_handle_t h[3];
	sc_status_t st[3]; /* a refusal at submission */
	char err[3][512];
} rnd_ops_t;

static int verbose; /* RND_VERBOSE: 1 lists the events, 2 every error too */

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
	rnd_step_t s = {.ev = EV_NONE, .coo = (int)(h >> 40 & 1), .P = P, .h = h};
	int r = (int)(h % 1000);
	for (int k = 1; k < EV_KINDS; k++)
		if (r >= (k - 1) * sh->rate && r < k * sh->rate)
			s.ev = k;
	s.who = (int)((h >> 16) % (uint64_t)P);
	s.variant = (int)((h >> 24) % 5);
	s.coll = (int)((h >> 44) % (sh->psets ? C_KINDS : C_PSET));
	s.root = (int)((h >> 50) % (uint64_t)P);
	size_t nw = sizeof(rs_widths) / sizeof(rs_widths[0]), w = (size_t)(h >> 56) % nw;
	s.rs_w = rs_widths[w], s.rs_other = rs_widths[(w + 1) % nw];
	if ((step == 0 || sh->no_deaths) && s.ev == EV_DIE) /* step 0 starts the world */
		s.ev = EV_NONE;
	/* A process set step only before the first death: a new worker does not know the
	 * sets (adding one is a collective of every trainer); an allreduce after it. */
	if (s.coll == C_PSET && (step > sh->first_death || P < 2))
		s.coll = C_ALLREDUCE;
	s.ps = 1 + (int)(h >> 60 & 1);
	s.ps_coll = (int)((h >> 8) % PS_KINDS);
	return s;
}

/* Whether rank r is a member of process set k (1: the even ranks; 2: every rank but 0). */
static int ps_member(int k, int r)
{
	return k == 1 ? r % 2 == 0 : r != 0;
}

/* The set's n-th member (its set rank n), and the number of its members among P. */
static int ps_rank_at(int k, int n, int P)
{
	for (int r = 0; r < P; r++)
		if (ps_member(k, r) && n-- == 0)
			return r;
	return -1;
}

static int ps_size(int k, int P)
{
	int n = 0;
	for (int r = 0; r < P; r++)
		n += ps_member(k, r);
	return n;
}

/* A broadcast's root in a process set step: a member drawn from the seed; differing, the
 * next member. */
static int ps_root(const rnd_step_t *p, int differ)
{
	int n = ps_size(p->ps, p->P);
	return ps_rank_at(p->ps, (p->root + differ) % n, p->P);
}

/* The step's value seed: every collective fills with it_value(rnd_seed(step), ...). */
static uint64_t rnd_seed(int step)
{
	return 5000 + (uint64_t)step;
}

/* Elements rank r gives to an allgather: 0 to AG_ROWS rows; with a differing input, rank
 * who gives the whole tensor (the total is then over it unless every other gives none). */
static size_t ag_count(const rnd_step_t *p, int r)
{
	if (p->ev == EV_DIFFER && r == p->who)
		return (size_t)p->P * AG_ROWS * AG_W;
	return (size_t)(mix(p->h ^ (0xa9ull << 32) ^ (uint64_t)r) % (AG_ROWS + 1)) * AG_W;
}

/* Elements rank src sends rank dst in an alltoall; with a differing input, rank who sends
 * its whole tensor to the next rank (over what that one may receive unless the others
 * send it nothing). */
static size_t a2a_count(const rnd_step_t *p, int src, int dst)
{
	if (p->ev == EV_DIFFER && src == p->who)
		return dst == (p->who + 1) % p->P ? (size_t)p->P * A2A_MAX : 0;
	return (size_t)(mix(p->h ^ (0x2a2ull << 32) ^ ((uint64_t)src << 16) ^ (uint64_t)dst) %
			(A2A_MAX + 1));
}

static float a2a_value(int step, int src, int dst, size_t i)
{
	return (float)it_value(rnd_seed(step) + 3 * (uint64_t)dst, src, i);
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

/* The tensor of an allreduce step whose event is an option differing on rank who (in
 * process set pset). */
static sc_tensor_t *differ_tensor(sc_client_t *c, int step, const rnd_step_t *p, int pset)
{
	char name[64];
	snprintf(name, sizeof(name), "rnd.o%d", step);
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .process_set = pset};
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

/* Records one started operation (its refusal, if any, with the library's error). */
static void op_add(rnd_ops_t *ops, sc_tensor_t *t, sc_status_t st, const sc_handle_t *h)
{
	int k = ops->n++;
	ops->t[k] = t, ops->st[k] = st, ops->h[k] = st == SC_OK ? *h : 0;
	snprintf(ops->err[k], sizeof(ops->err[k]), "%s", st == SC_OK ? "" : sc_last_error());
}

/* Fills t with this rank's values of step and submits an allreduce, dense or as a COO
 * list (odd ranks backwards; with bad, one index past the tensor). */
static void start_allreduce(sc_client_t *c, sc_tensor_t *t, int step, int coo, int bad,
			    rnd_ops_t *ops)
{
	int rank = sc_rank(c);
	sc_handle_t h = 0;
	float *d = sc_tensor_data(t);
	it_fill(d, SC_FLOAT32, sc_tensor_numel(t), rnd_seed(step), rank, 1);
	if (!coo) {
		op_add(ops, t, sc_allreduce_async(c, t, SC_OP_SUM, &h), &h);
		return;
	}
	uint32_t *idx = sc_tensor_coo_indices(t);
	float *val = sc_tensor_coo_values(t);
	for (uint32_t i = 0; i < RND_NUMEL; i++) {
		uint32_t k = rank % 2 ? RND_NUMEL - 1 - i : i;
		idx[i] = k, val[i] = d[k];
	}
	if (bad)
		idx[RND_NUMEL / 2] = RND_NUMEL + 3;
	op_add(ops, t, sc_allreduce_coo_async(c, t, RND_NUMEL, SC_OP_SUM, &h), &h);
}

/* A grouped allreduce of rnd.ga and rnd.gb; differing: rnd.gc in rnd.gb's place; bad: the
 * group closed with one member (sc_group_end refuses it). Either way rnd.gb then goes
 * alone, so that this trainer still gives rnd.gb its step (a step it skipped would be
 * owed, and its next submission of rnd.gb taken as that late one). */
static void start_group(sc_client_t *c, sc_tensor_t *ga, sc_tensor_t *gb, sc_tensor_t *gc,
			int step, int differ, int bad, rnd_ops_t *ops)
{
	sc_group_t g = 0;
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin");
	sc_tensor_t *m[2] = {ga, differ ? gc : gb};
	for (int k = 0; k < (bad ? 1 : 2); k++) {
		IT_CHECK_SC(sc_group_add(c, g, m[k]), "sc_group_add");
		start_allreduce(c, m[k], step, 0, 0, ops);
	}
	sc_status_t st = sc_group_end(c, g);
	if (bad && st != SC_ERR_INVALID)
		IT_FAIL("step %d: a group of two closed with one member: %s, expected "
			"SC_ERR_INVALID",
			step, sc_status_name(st));
	if (!bad)
		IT_CHECK_SC(st, "sc_group_end");
	if (bad || differ)
		start_allreduce(c, gb, step, 0, 0, ops);
}

/* An allreduce step of t (in process set pset) on this rank (differ, bad: the event is
 * this rank's): dense or COO as the plan says; differing, the other form (variant 0) or
 * the step's own tensor with an option of its own; bad, a COO index out of range.
 * Returns 0, or -1 for a refused registration. */
static int allreduce_step(sc_client_t *c, sc_tensor_t *t, const rnd_step_t *p, int step,
			  int differ, int bad, int pset, rnd_ops_t *ops)
{
	int coo = p->coo;
	if (p->ev == EV_DIFFER && p->variant == 0)
		coo = !coo ? differ : !differ; /* the input's form differs on rank who */
	else if (p->ev == EV_DIFFER && !(t = differ_tensor(c, step, p, pset)))
		return -1;
	else if (p->ev == EV_DIFFER)
		coo = 0;
	else if (p->ev == EV_BADCOO)
		coo = 1;
	start_allreduce(c, t, step, coo, bad, ops);
	return 0;
}

/* An allgather step of t: this rank's rows; bad, more elements than t holds. */
static void allgather_step(sc_client_t *c, sc_tensor_t *t, const rnd_step_t *p, int step,
			   int bad, rnd_ops_t *ops)
{
	int rank = sc_rank(c);
	sc_handle_t h = 0;
	size_t n = bad ? sc_tensor_numel(t) + 1 : ag_count(p, rank);
	it_fill(sc_tensor_data(t), SC_FLOAT32, sc_tensor_numel(t), rnd_seed(step), rank, 1);
	op_add(ops, t, sc_allgather_async(c, t, n, &h), &h);
}

/* The ranks of process set pset (0: every rank) in set rank order into m; their number. */
static int members_of(const rnd_step_t *p, int pset, int *m)
{
	int n = 0;
	for (int r = 0; r < p->P; r++)
		if (!pset || ps_member(pset, r))
			m[n++] = r;
	return n;
}

/* A reduce-scatter step of t: rows of the step's width (differing: the next width; bad:
 * rows that do not divide the tensor). */
static void rs_step(sc_client_t *c, sc_tensor_t *t, const rnd_step_t *p, int step, int differ,
		    int bad, rnd_ops_t *ops)
{
	size_t w = differ ? p->rs_other : p->rs_w;
	sc_handle_t h = 0;
	if (bad)
		w = 3;
	it_fill(sc_tensor_data(t), SC_FLOAT32, RND_NUMEL, rnd_seed(step), sc_rank(c), 1);
	op_add(ops, t, sc_reducescatter_async(c, t, SC_OP_SUM, w, &h), &h);
}

/* An alltoall step of t among the ranks of process set pset (0: every rank): a block for
 * each, in set rank order; bad, splits that add up to more than the tensor. */
static void a2a_step(sc_client_t *c, sc_tensor_t *t, const rnd_step_t *p, int pset, int step,
		     int bad, rnd_ops_t *ops)
{
	int rank = sc_rank(c), m[64], n = members_of(p, pset, m);
	size_t counts[64], at = 0;
	sc_handle_t h = 0;
	float *d = sc_tensor_data(t);
	for (int q = 0; q < n; q++) {
		counts[q] = a2a_count(p, rank, m[q]);
		for (size_t i = 0; i < counts[q]; i++)
			d[at++] = a2a_value(step, rank, m[q], i);
	}
	if (bad)
		counts[n - 1] += sc_tensor_numel(t) + 1 - at;
	op_add(ops, t, sc_alltoall_async(c, t, counts, &h), &h);
}

/* Starts a process set step on a member: an allreduce (dense or COO; differing and bad as
 * for the global one), a broadcast (differing: the next member's root; bad: the first
 * rank outside the set as root) or an allgather (as the global one's) of the set's
 * tensor. Returns 0, or -1 for a refused registration. */
static int start_pset(sc_client_t *c, const rnd_tensors_t *ts, const rnd_step_t *p, int step,
		      int differ, int bad, rnd_ops_t *ops)
{
	int rank = sc_rank(c), k = p->ps;
	uint64_t seed = rnd_seed(step);
	sc_handle_t h = 0;
	switch (p->ps_coll) {
	case PS_ALLREDUCE:
		return allreduce_step(c, ts->ps_g[k], p, step, differ, bad, ts->ps_id[k], ops);
	case PS_BCAST: {
		int root = ps_root(p, differ);
		for (int r = 0; bad && r <= p->P; r++)
			if (r == p->P || !ps_member(k, r)) {
				root = r;
				break;
			}
		it_fill(sc_tensor_data(ts->ps_b[k]), SC_FLOAT32, RND_NUMEL, seed, rank, 1);
		op_add(ops, ts->ps_b[k], sc_broadcast_async(c, ts->ps_b[k], root, &h), &h);
		return 0;
	}
	case PS_ALLGATHER:
		allgather_step(c, ts->ps_ag[k], p, step, bad, ops);
		return 0;
	case PS_RS:
		rs_step(c, ts->ps_rs[k], p, step, differ, bad, ops);
		return 0;
	case PS_A2A:
		a2a_step(c, ts->ps_a2a[k], p, k, step, bad, ops);
		return 0;
	default:
		start_group(c, ts->ps_ga[k], ts->ps_gb[k], ts->ps_gc[k], step, differ, bad,
			    ops);
		return 0;
	}
}

/* Starts the step's collective on this rank as the plan says (me: the event is this
 * rank's). Returns 0, -1 when this rank has no operation this step (a refused
 * registration), or -2 when the step is not this rank's (a process set without it). */
static int start_step(sc_client_t *c, const rnd_tensors_t *ts, const rnd_step_t *p, int step,
		      int me, rnd_ops_t *ops)
{
	int rank = sc_rank(c), P = p->P, bad = p->ev == EV_BADCOO && me;
	int differ = p->ev == EV_DIFFER && me;
	uint64_t seed = rnd_seed(step);
	sc_handle_t h = 0;
	switch (p->coll) {
	case C_ALLREDUCE:
		return allreduce_step(c, ts->g, p, step, differ, bad, 0, ops);
	case C_BCAST: { /* differing: another root; bad: a root past the last rank */
		it_fill(sc_tensor_data(ts->b), SC_FLOAT32, RND_NUMEL, seed, rank, 1);
		int root = bad ? P : differ ? (p->root + 1) % P : p->root;
		op_add(ops, ts->b, sc_broadcast_async(c, ts->b, root, &h), &h);
		return 0;
	}
	case C_ALLGATHER: /* bad: more elements than the tensor holds */
		allgather_step(c, ts->ag, p, step, bad, ops);
		return 0;
	case C_RS: /* differing: rows of the next width; bad: rows that do not divide it */
		rs_step(c, ts->rs, p, step, differ, bad, ops);
		return 0;
	case C_A2A: /* bad: splits that add up to more than the tensor */
		a2a_step(c, ts->a2a, p, 0, step, bad, ops);
		return 0;
	case C_PSET:
		if (!ps_member(p->ps, rank))
			return -2;
		return start_pset(c, ts, p, step, differ, bad, ops);
	default:
		start_group(c, ts->ga, ts->gb, ts->gc, step, differ, bad, ops);
		return 0;
	}
}

/* Checks an allgather's result against every rank's count and values of the step, in rank
 * order (pset: the set's members only; 0: every rank). */
static int check_allgather(sc_tensor_t *t, const rnd_step_t *p, int pset, int step, char *why,
			   size_t len)
{
	const float *d = sc_tensor_data(t);
	size_t at = 0;
	for (int r = 0; r < p->P; r++)
		for (size_t i = 0; (!pset || ps_member(pset, r)) && i < ag_count(p, r);
		     i++, at++)
			if (d[at] != (float)it_value(rnd_seed(step), r, i))
				return snprintf(why, len,
						"element %zu of rank %d is %g, not %d", i, r,
						(double)d[at], it_value(rnd_seed(step), r, i)),
				       1;
	if (sc_tensor_result_nnz(t) != at)
		return snprintf(why, len, "%zu elements gathered, expected %zu",
				sc_tensor_result_nnz(t), at),
		       1;
	return 0;
}

/* The sum over the n ranks m of element i of the step's values. */
static int sum_over(int step, const int *m, int n, size_t i)
{
	int s = 0;
	for (int k = 0; k < n; k++)
		s += it_value(rnd_seed(step), m[k], i);
	return s;
}

/* Checks this rank's slice of a reduce-scatter of rows of p->rs_w among the ranks of
 * process set pset (0: every rank). */
static int check_rs(sc_tensor_t *t, const rnd_step_t *p, int pset, int rank, int step,
		    char *why, size_t len)
{
	int m[64], n = members_of(p, pset, m), q = 0;
	while (q < n && m[q] != rank)
		q++;
	size_t rows = RND_NUMEL / p->rs_w, P = (size_t)n, r = (size_t)q;
	size_t first = r * (rows / P) + (r < rows % P ? r : rows % P);
	size_t mine = rows / P + (r < rows % P);
	if (sc_tensor_result_nnz(t) != mine * p->rs_w)
		return snprintf(why, len, "%zu elements, expected rows %zu to %zu of %zu",
				sc_tensor_result_nnz(t), first, first + mine, p->rs_w),
		       1;
	const float *d = sc_tensor_data(t);
	for (size_t j = 0; j < mine * p->rs_w; j++) {
		int want = sum_over(step, m, n, first * p->rs_w + j);
		if (d[j] != (float)want)
			return snprintf(why, len, "element %zu of the slice is %g, not %d", j,
					(double)d[j], want),
			       1;
	}
	return 0;
}

/* Checks an alltoall's result among the ranks of process set pset (0: every rank): each
 * rank's block, its count and the total. */
static int check_a2a(sc_tensor_t *t, const rnd_step_t *p, int pset, int rank, int step,
		     char *why, size_t len)
{
	size_t rc[64], at = 0;
	int m[64], n = members_of(p, pset, m);
	IT_CHECK_SC(sc_tensor_result_counts(t, rc, n), "sc_tensor_result_counts");
	const float *d = sc_tensor_data(t);
	for (int q = 0; q < n; q++) {
		int s = m[q];
		size_t want = a2a_count(p, s, rank);
		if (rc[q] != want)
			return snprintf(why, len, "%zu elements from rank %d, expected %zu",
					rc[q], s, want),
			       1;
		for (size_t i = 0; i < want; i++, at++)
			if (d[at] != a2a_value(step, s, rank, i))
				return snprintf(why, len,
						"element %zu from rank %d is %g, not %g", i, s,
						(double)d[at],
						(double)a2a_value(step, s, rank, i)),
				       1;
	}
	if (sc_tensor_result_nnz(t) != at)
		return snprintf(why, len, "a result of %zu elements, expected %zu",
				sc_tensor_result_nnz(t), at),
		       1;
	return 0;
}

/* Checks a process set step's result: the sum over the set's members, the root's values,
 * the members' rows in set rank order. */
static int check_pset(sc_tensor_t *t, const rnd_step_t *p, int rank, int step, char *why,
		      size_t len)
{
	const float *d = sc_tensor_data(t);
	if (p->ps_coll == PS_ALLGATHER)
		return check_allgather(t, p, p->ps, step, why, len);
	if (p->ps_coll == PS_RS)
		return check_rs(t, p, p->ps, rank, step, why, len);
	if (p->ps_coll == PS_A2A)
		return check_a2a(t, p, p->ps, rank, step, why, len);
	int root = ps_root(p, 0), m[64], n = members_of(p, p->ps, m);
	for (size_t i = 0; i < sc_tensor_numel(t); i++) {
		int want = p->ps_coll == PS_BCAST ? it_value(rnd_seed(step), root, i)
						  : sum_over(step, m, n, i);
		if (d[i] != (float)want)
			return snprintf(why, len,
					"element %zu is %g, not %d (the %s of set %d)", i,
					(double)d[i], want,
					p->ps_coll == PS_BCAST ? "root's" : "sum", p->ps),
			       1;
	}
	return 0;
}

/* Checks one operation's SC_OK result against the values the plan gives. */
static int check_result(sc_client_t *c, sc_tensor_t *t, const rnd_step_t *p, int step,
			char *why, size_t len)
{
	int rank = sc_rank(c), P = p->P;
	const float *d = sc_tensor_data(t);
	switch (p->coll) {
	case C_BCAST:
		for (size_t i = 0; i < RND_NUMEL; i++)
			if (d[i] != (float)it_value(rnd_seed(step), p->root, i))
				return snprintf(why, len, "element %zu is %g, root %d's is %d",
						i, (double)d[i], p->root,
						it_value(rnd_seed(step), p->root, i)),
				       1;
		return 0;
	case C_ALLGATHER:
		return check_allgather(t, p, 0, step, why, len);
	case C_RS:
		return check_rs(t, p, 0, rank, step, why, len);
	case C_A2A:
		return check_a2a(t, p, 0, rank, step, why, len);
	case C_PSET:
		return check_pset(t, p, rank, step, why, len);
	default:
		return it_check(d, SC_FLOAT32, sc_tensor_numel(t), rnd_seed(step), P, 1,
				SC_OP_SUM, why, len) != 0;
	}
}

/* One step; its outcome goes to the shared array. The members of a group end alike. */
static void run_step(sc_client_t *c, const rnd_tensors_t *ts, rnd_shared_t *sh, int step)
{
	int rank = sc_rank(c), me;
	rnd_step_t p = plan(sh, step, sc_size(c));
	me = p.ev != EV_NONE && p.who == rank;
	char ps_coll[64];
	snprintf(ps_coll, sizeof(ps_coll), "%s in process set %d", ps_names[p.ps_coll], p.ps);
	const char *coll = p.coll == C_PSET ? ps_coll : coll_names[p.coll];
	if (p.ev == EV_LATE && me)
		it_sleep_ms(sh->late_ms);
	if (p.ev == EV_DIE && me)
		it_log("step %d: this worker dies %s submitting its %s", step,
		       p.variant % 2 ? "right after" : "before", coll);
	if (p.ev == EV_DIE && me && p.variant % 2 == 0) {
		sh->next_step = step + 1;
		_exit(RND_DIED); /* before submitting */
	}
	rnd_ops_t ops;
	memset(&ops, 0, sizeof(ops));
	int none = start_step(c, ts, &p, step, me, &ops);
	sh->next_step = step + 1;
	if (none == -1)
		sh->outcome[step] = OUT_ERROR;
	if (none < 0)
		return;
	if (p.ev == EV_DIE && me)
		_exit(RND_DIED); /* right after submitting */
	int ok = 0, reformed = 0;
	for (int k = 0; k < ops.n; k++) {
		int r = ops.st[k] == SC_OK ? it_wait(c, ops.h[k], IT_OP_TIMEOUT_MS) : ops.st[k];
		if (r == IT_HANG)
			IT_FAIL("step %d (%s, %s on rank %d) never ended: %s", step, coll,
				ev_names[p.ev], p.who, it_wait_error());
		if (r != SC_OK) {
			const char *e = ops.st[k] == SC_OK ? it_wait_error() : ops.err[k];
			const char *why = strstr(e, REFORM_WHY);
			if (why && !sh->reform[step])
				sh->reform[step] = reform_hash(why);
			reformed += why != NULL;
			if (verbose > 1)
				it_log("step %d (%s of '%s', %s on rank %d): %s: %s", step,
				       coll, sc_tensor_name(ops.t[k]), ev_names[p.ev], p.who,
				       it_wait_name(r), e);
			if (!strstr(e, sc_tensor_name(ops.t[k])))
				IT_FAIL("step %d (%s, %s on rank %d, variant %d): %s that does "
					"not name '%s': %s",
					step, coll, ev_names[p.ev], p.who, p.variant,
					it_wait_name(r), sc_tensor_name(ops.t[k]), e);
			continue;
		}
		char why[512];
		if (check_result(c, ops.t[k], &p, step, why, sizeof(why)))
			IT_FAIL("step %d (%s of '%s', %s on rank %d, variant %d): SC_OK with a "
				"wrong result: %s",
				step, coll, sc_tensor_name(ops.t[k]), ev_names[p.ev], p.who,
				p.variant, why);
		ok++;
	}
	/* a group's members run as buffers one after the other: those over before the
	 * connections broke keep their results (docs/design.md, Errors) */
	if (ok && ok < ops.n && !(sh->resets && ok + reformed == ops.n))
		IT_FAIL("step %d (%s, %s on rank %d): %d of its %d members exact, the others "
			"failed",
			step, coll, ev_names[p.ev], p.who, ok, ops.n);
	sh->outcome[step] = ok ? OUT_EXACT : OUT_ERROR;
}

/* The form a step's tensor runs in (its collective and the arguments that make its cache
 * entry), or -1 for a tensor of its own (an option differing: rnd.oSTEP). */
static long form_of(const rnd_step_t *p)
{
	if (p->coll == C_ALLREDUCE && p->ev == EV_DIFFER && p->variant != 0)
		return -1;
	if (p->coll == C_PSET && p->ps_coll == PS_ALLREDUCE && p->ev == EV_DIFFER &&
	    p->variant != 0)
		return -1;
	int ps = p->coll == C_PSET;
	int ps_ar = ps && p->ps_coll == PS_ALLREDUCE, ps_b = ps && p->ps_coll == PS_BCAST;
	int ps_rs = ps && p->ps_coll == PS_RS;
	return (long)p->coll | (long)((p->coll == C_ALLREDUCE || ps_ar) && p->coo) << 3 |
	       (long)(p->coll == C_RS || ps_rs ? p->rs_w : 0) << 4 |
	       (long)(p->coll == C_BCAST || ps_b ? p->root : 0) << 12 |
	       (long)(ps ? p->ps * PS_KINDS + p->ps_coll : 0) << 20;
}

/* A step without an event that failed (v: the outcomes exchanged): it may be one of the
 * few that follow a late step, each failed (the late rank, still asleep, misses the
 * others' next steps too), or one before the first exact step of its tensor's form after
 * a death (the replaced trainer's node made the tensor's state anew, the others kept
 * theirs: the first step that runs the scheme finds it and fails on every rank, and the
 * state is made anew everywhere for the next). Any other failure is one no event
 * explains. */
static void check_unexplained(const rnd_shared_t *sh, const int32_t *v, int s, int P)
{
	rnd_step_t p = plan(sh, s, P);
	long form = form_of(&p);
	for (int t = s - 1; t >= 0 && t >= s - RND_LATE_REACH; t--) {
		rnd_step_t q = plan(sh, t, P);
		/* a failed process set step may have stalled its members past the others, who
		 * went on: as late for the next steps as a late rank */
		if (q.ev == EV_LATE || (q.coll == C_PSET && v[sh->steps + t]))
			return;
		if (!v[sh->steps + t] &&
		    q.coll != C_PSET) /* a set's step may lack the late rank */
			break;
	}
	for (int t = s - 1; t >= 0; t--) {
		rnd_step_t q = plan(sh, t, P);
		if (q.ev == EV_DIE)
			return;
		if (form_of(&q) == form && v[t])
			IT_FAIL("step %d (%s, no event) failed on every rank, and no event "
				"explains it: its tensor's step %d in the same form was exact "
				"since the last death",
				s, coll_names[p.coll], t);
	}
	IT_FAIL("step %d (%s, no event) failed on every rank, with no death before it", s,
		coll_names[p.coll]);
}

/* Whether step s failed by the world re-forming after a data-plane failure, or follows
 * such a step closely (a rank whose connections broke may be a step behind the others
 * then, as after a late step). */
static int reformed_near(const int32_t *v, int n, int s)
{
	for (int t = s; t >= 0 && t >= s - RND_LATE_REACH; t--)
		if (v[2 * n + t])
			return 1;
	return 0;
}

/* Every rank's outcomes summed per step and kind: none of them both exact somewhere and an
 * error elsewhere. Rank 0 prints the counts. */
static void compare(sc_client_t *c, rnd_shared_t *sh)
{
	int n = sh->steps, P = sc_size(c);
	sc_tensor_t *t = it_register(c, "rnd.outcomes", SC_INT32, 4 * (size_t)n);
	int32_t *v = sc_tensor_data(t);
	sc_status_t st = SC_ERR_SYSTEM;
	for (int tries = 0; tries < 20 && st != SC_OK; tries++) {
		for (int s = 0; s < n; s++) {
			v[s] = sh->outcome[s] == OUT_EXACT;
			v[n + s] = sh->outcome[s] == OUT_ERROR;
			v[2 * n + s] = sh->reform[s] != 0;
			v[3 * n + s] = (int32_t)sh->reform[s];
		}
		st = sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS);
	}
	IT_CHECK_SC(st, "the exchange of the outcomes");
	int exact = 0, failed = 0, reformed = 0, split = 0, events[EV_KINDS] = {0},
	    colls[C_KINDS] = {0};
	for (int s = 0; s < n; s++) {
		rnd_step_t p = plan(sh, s, P);
		events[p.ev]++;
		colls[p.coll]++;
		if (sh->reform[s] && v[3 * n + s] != v[2 * n + s] * (int32_t)sh->reform[s])
			IT_FAIL("step %d (%s): failed by the world re-forming on %d ranks, not "
				"for the same reason on all",
				s, coll_names[p.coll], v[2 * n + s]);
		if (v[2 * n + s] && !sh->resets)
			IT_FAIL(
			    "step %d (%s): failed by the world re-forming after a data-plane "
			    "failure, and no connection was reset (--resets 0)",
			    s, coll_names[p.coll]);
		reformed += v[2 * n + s] > 0;
		/* a rank that got its result before the connections of two others broke
		 * keeps it: what the others fail with is the re-form's reason, alike */
		if (v[s] && v[n + s] && v[2 * n + s] >= v[n + s]) {
			split++;
			continue;
		}
		if (v[s] && v[n + s])
			IT_FAIL(
			    "step %d (%s, %s on rank %d, variant %d): exact on %d ranks, an "
			    "error on %d",
			    s, coll_names[p.coll], ev_names[p.ev], p.who, p.variant, v[s],
			    v[n + s]);
		if (v[n + s] && p.ev == EV_NONE && !reformed_near(v, n, s))
			check_unexplained(sh, v, s, P);
		exact += v[s] > 0;
		failed += v[n + s] > 0;
		if (p.ev != EV_NONE && sc_rank(c) == 0 && verbose)
			it_log("step %d: %s, %s on rank %d (variant %d): exact on %d, failed "
			       "on %d",
			       s, coll_names[p.coll], ev_names[p.ev], p.who, p.variant, v[s],
			       v[n + s]);
	}
	if (sc_rank(c) == 0 && sh->resets)
		it_log("random: %d steps failed by the world re-forming after a data-plane "
		       "failure (every rank that failed them with the same reason), %d of them "
		       "exact on the other ranks",
		       reformed, split);
	if (sc_rank(c) == 0)
		it_log("random: %d steps (seed %llu): %d exact, %d failed on every rank, %d "
		       "without a result; events: %d differ, %d late, %d die, %d bad input; "
		       "collectives: %d allreduce, %d broadcast, %d allgather, %d "
		       "reduce-scatter, %d alltoall, %d grouped, %d in a process set",
		       n, (unsigned long long)sh->seed, exact, failed, n - exact - failed,
		       events[EV_DIFFER], events[EV_LATE], events[EV_DIE], events[EV_BADCOO],
		       colls[C_ALLREDUCE], colls[C_BCAST], colls[C_ALLGATHER], colls[C_RS],
		       colls[C_A2A], colls[C_GROUP], colls[C_PSET]);
}

static sc_tensor_t *reg(sc_client_t *c, const char *name, size_t numel, size_t coo_cap,
			int pset)
{
	sc_tensor_opts_t o = {
	    .struct_size = sizeof(o), .coo_capacity = coo_cap, .process_set = pset};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, numel, &o, &t), "register '%s'", name);
	return t;
}

/* Adds the process sets (every rank, the first workers only) and registers their tensors
 * on their members. */
static void add_sets(sc_client_t *c, rnd_tensors_t *ts)
{
	int P = sc_size(c), ranks[64];
	size_t n = (size_t)P;
	for (int k = 1; k <= RND_SETS; k++) {
		int m = 0;
		for (int r = 0; r < P; r++)
			if (ps_member(k, r))
				ranks[m++] = r;
		IT_CHECK_SC(sc_process_set_add(c, ranks, m, IT_OP_TIMEOUT_MS, &ts->ps_id[k]),
			    "adding process set %d", k);
		if (!ps_member(k, sc_rank(c)))
			continue;
		ts->ps_g[k] = reg(c, "rnd.g", RND_NUMEL, RND_NUMEL, ts->ps_id[k]);
		ts->ps_b[k] = reg(c, "rnd.b", RND_NUMEL, 0, ts->ps_id[k]);
		ts->ps_ag[k] = reg(c, "rnd.ag", n * AG_ROWS * AG_W, 0, ts->ps_id[k]);
		ts->ps_rs[k] = reg(c, "rnd.rs", RND_NUMEL, 0, ts->ps_id[k]);
		ts->ps_a2a[k] = reg(c, "rnd.a2a", n * A2A_MAX, 0, ts->ps_id[k]);
		ts->ps_ga[k] = reg(c, "rnd.ga", GR_A, 0, ts->ps_id[k]);
		ts->ps_gb[k] = reg(c, "rnd.gb", GR_B, 0, ts->ps_id[k]);
		ts->ps_gc[k] = reg(c, "rnd.gc", GR_B, 0, ts->ps_id[k]);
	}
}

static int worker(rnd_shared_t *sh)
{
	int start = sh->next_step;
	sc_client_t *c = connect_retry();
	size_t P = (size_t)sc_size(c);
	if (P > 64)
		IT_FAIL("random: runs with at most 64 trainers, not %zu", P);
	rnd_tensors_t ts = {
	    .g = reg(c, "rnd.g", RND_NUMEL, RND_NUMEL, 0),
	    .b = reg(c, "rnd.b", RND_NUMEL, 0, 0),
	    .ag = reg(c, "rnd.ag", P * AG_ROWS * AG_W, 0, 0),
	    .rs = reg(c, "rnd.rs", RND_NUMEL, 0, 0),
	    .a2a = reg(c, "rnd.a2a", P * A2A_MAX, 0, 0),
	    .ga = reg(c, "rnd.ga", GR_A, 0, 0),
	    .gb = reg(c, "rnd.gb", GR_B, 0, 0),
	    .gc = reg(c, "rnd.gc", GR_B, 0, 0),
	};
	if (sh->psets && start == 0 && P > 1) /* the sets, their tensors under the same names */
		add_sets(c, &ts);
	if (start > 0) /* a new worker: the others wait for it in the barrier */
		sync_all(c, start - 1);
	for (int step = start; step < sh->steps; step++) {
		run_step(c, &ts, sh, step);
		if (plan(sh, step, sc_size(c)).ev == EV_DIE)
			sync_all(c, step);
	}
	compare(c, sh);
	sc_finalize(c);
	return 0;
}

int it_random(int argc, char **argv)
{
	int steps = 2000, rate = 12, late_ms = 1700, psets = 0, deaths_on = 1, resets = 0;
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
		else if (!strcmp(argv[i], "--psets"))
			psets = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--deaths"))
			deaths_on = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--resets"))
			resets = atoi(argv[i + 1]);
		else
			IT_FAIL("random: unknown argument '%s'", argv[i]);
	}
	if (steps < 1 || rate < 0 || rate * (EV_KINDS - 1) > 1000)
		IT_FAIL("random: --steps %d or --rate %d out of range", steps, rate);
	verbose = getenv("RND_VERBOSE") ? atoi(getenv("RND_VERBOSE")) : 0;
	size_t out_bytes = ((size_t)steps + 7) & ~(size_t)7;
	rnd_shared_t *sh = mmap(NULL, sizeof(*sh) + out_bytes + 4 * (size_t)steps,
				PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		IT_FAIL("random: mmap of the shared outcomes failed");
	sh->reform = (uint32_t *)(sh->outcome + out_bytes);
	sh->resets = resets != 0;
	sh->steps = steps, sh->rate = rate, sh->late_ms = late_ms, sh->seed = seed;
	sh->psets = psets != 0, sh->no_deaths = !deaths_on;
	sh->first_death = steps;
	for (int s = 0; s < steps && sh->first_death == steps; s++)
		if (plan(sh, s, 1).ev == EV_DIE) /* the events do not depend on the size */
			sh->first_death = s;
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
