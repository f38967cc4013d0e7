/*
 * test_fast_turn.c: a fast turn (coll/job.h, scd_fast_t), the one-round sum whose exchange
 * carries every rank's readiness after its input check words (engine/verdict.h,
 * scd_fast_decide), over real tcp meshes of forked ranks.
 *
 * The one round (coll/bufctx.c): with every rank ready the sum is bitwise the planned one
 * round's (P = 2, 3, 4, fractional inputs, so the order of the additions shows); a LEAVE on
 * any one rank discards the turn on every rank, the buffer untouched; a fault fails every
 * rank alike; a LEAVE wins over a fault; words forged on one rank (its turn, epoch or
 * digest off) are SC_ERR_PROTOCOL on every rank with the mesh marked broken, the same text
 * everywhere; after a discard, a planned one round and a ring on the same mesh are exact.
 *
 * The engine (engine/engine.c), two nodes of two trainers each: a discarded turn leaves
 * both trainers' inputs byte-identical (a fast turn never sums in place into the first
 * trainer's buffer), the next turn of its epoch, queued behind it, comes back unrun with no
 * byte sent or received (the transport's counters), and a turn of a new epoch and a planned
 * job then sum exactly. Across a re-form (a second mesh job): an epoch that ended in the
 * old world does not end the new world's epoch of the same number; a turn's words refused
 * (rule 1) fail the planned job behind it unrun, with no byte sent, until the mesh job.
 */
#include "unit.h"

#include <string.h>
#include <sys/mman.h>

#include <uv.h>

#include "coll/bufctx.h"
#include "engine/engine.h"
#include "engine/verdict.h"
#include "unit_engine.h"
#include "util/log.h"

#define MAX_P  4
#define N      1000 /* 4000 bytes: the one-round path */
#define RING_N 40000
#define TMO_MS 10000

typedef enum {
	CASE_READY,	  /* every rank ready; compared with the planned one round */
	CASE_LEAVE,	  /* rank bad leaves */
	CASE_FAULT,	  /* rank bad sends a non-finite value's fault */
	CASE_LEAVE_FAULT, /* rank bad leaves, rank bad + 1 has a fault */
	CASE_FORGE_TURN,  /* rank bad's words: turn + 1 */
	CASE_FORGE_EPOCH, /* epoch + 1 */
	CASE_FORGE_DIGEST,
	CASE_STEPS_AFTER, /* a discard, then a planned one round and a ring */
} fast_case_t;

/* What each rank's child reports to the parent, in shared memory. */
typedef struct rank_out {
	int done;
	sc_status_t st;
	char error[512];
	int discarded, mesh_broken;
	int buf_untouched;   /* every element still this rank's input */
	int sum_exact;	     /* every element the sum in rank order, bitwise */
	int same_as_planned; /* bitwise the planned one round's result */
	int after_exact;     /* CASE_STEPS_AFTER: the planned one round and the ring */
} rank_out_t;

typedef struct fast_arg {
	unit_mesh_t *mesh;
	int P, bad;
	fast_case_t kind;
	uint64_t seed;
	rank_out_t *out;
} fast_arg_t;

/* Rank's element i: a fraction, so that a sum in another order shows in its bits. */
static float input(uint64_t seed, int i, int rank)
{
	uint64_t h = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rank << 40);
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	return (float)((int)(h % 20001) - 10000) / 7.0f;
}

/* The sum of element i over P ranks, in rank order (what the one round adds). */
static float rank_order_sum(uint64_t seed, int i, int P)
{
	float s = input(seed, i, 0);
	for (int q = 1; q < P; q++)
		s += input(seed, i, q);
	return s;
}

static scd_job_t small_job(scd_job_item_t *it)
{
	*it =
	    (scd_job_item_t){.name = "layer.fast", .numel = N, .op = SC_OP_SUM, .cache_id = 3};
	return (scd_job_t){.kind = SCD_JOB_ALLREDUCE,
			   .n_items = 1,
			   .items = it,
			   .total_numel = N,
			   .dtype = SC_FLOAT32,
			   .average_divisor = 1,
			   .pin = -1,
			   .timeout_ms = TMO_MS};
}

/* One one-round step of buf over t: planned (job->fast.epoch 0) or a fast turn, with this
 * rank's finding f; job's status, error and fast result as every rank decides them. */
static sc_status_t step(scd_bufctx_table_t *tab, scd_transport_t *t, scd_job_t *job,
			const scd_fault_t *f, float *buf)
{
	const scd_device_ops_t *dev = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK);
	CHECK_TRUE(scd_bufctx_one_round(job, t->size));
	scd_verdict_carry_t carry;
	if (scd_job_fast(job))
		scd_fast_carry_init(&carry, job, f, t->rank, 1);
	else
		scd_verdict_carry_init(&carry, job, f, t->rank, 1);
	scd_job_prep_t prep = {0};
	CHECK_TRUE(scd_bufctx_prepare(tab, job, dev, buf, t, 20e-6, 1e-10, 42, &prep) == SC_OK);
	prep.verdict = &carry;
	sc_status_t st = scd_bufctx_communicate(tab, job, dev, buf, t, 20e-6, 1e-10, &prep);
	if (st != SC_OK)
		scd_verdict_carry_end(&carry, job, st);
	scd_bufctx_release(&prep);
	return st;
}

static const scd_fast_t turn1 = {.epoch = 5, .turn = 1, .digest = 0x1234abcd5678ef00ull};

/* This rank's fast words for the case. */
static scd_fast_t case_fast(const fast_arg_t *a, int rank)
{
	scd_fast_t f = turn1;
	int bad = rank == a->bad;
	f.leave = bad && (a->kind == CASE_LEAVE || a->kind == CASE_LEAVE_FAULT ||
			  a->kind == CASE_STEPS_AFTER);
	if (bad && a->kind == CASE_FORGE_TURN)
		f.turn++;
	if (bad && a->kind == CASE_FORGE_EPOCH)
		f.epoch++;
	if (bad && a->kind == CASE_FORGE_DIGEST)
		f.digest ^= 1u << 7;
	return f;
}

/* CASE_STEPS_AFTER, once the turn was discarded: a planned one round of the inputs and a
 * ring of RING_N integers over the same mesh, both exact. */
static int steps_after(scd_bufctx_table_t *tab, scd_transport_t *t, const fast_arg_t *a)
{
	static float buf[N], ring[RING_N];
	for (int i = 0; i < N; i++)
		buf[i] = input(a->seed, i, t->rank);
	scd_job_item_t it;
	scd_job_t job = small_job(&it);
	scd_fault_t none = {0};
	int ok = step(tab, t, &job, &none, buf) == SC_OK;
	for (int i = 0; i < N && ok; i++)
		ok = buf[i] == rank_order_sum(a->seed, i, a->P);
	for (int i = 0; i < RING_N; i++)
		ring[i] = (float)((i + 3 * t->rank) % 101);
	ok = ok && scd_transport_allreduce_f32(t, ring, RING_N, TMO_MS) == SC_OK;
	for (int i = 0; i < RING_N && ok; i++) {
		float want = 0;
		for (int q = 0; q < a->P; q++)
			want += (float)((i + 3 * q) % 101);
		ok = ring[i] == want;
	}
	return ok;
}

static void fast_rank(const fast_arg_t *a, int rank)
{
	scd_log_level = -1; /* the failures logged are expected */
	scd_transport_t *t = NULL;
	sc_status_t st = unit_mesh_create(a->mesh, rank, 0, TMO_MS, &t);
	CHECK_MSG(st == SC_OK, "rank %d: mesh: %s", rank, scd_transport_error());
	scd_bufctx_table_t *tab = NULL;
	CHECK_TRUE(scd_bufctx_table_create(NULL, &tab) == SC_OK);
	static float buf[N], planned[N];
	rank_out_t *o = &a->out[rank];
	scd_job_item_t it;
	scd_job_t job;
	scd_fault_t none = {0};
	if (a->kind == CASE_READY) { /* the planned one round first, on the same inputs */
		for (int i = 0; i < N; i++)
			planned[i] = input(a->seed, i, rank);
		job = small_job(&it);
		CHECK_MSG(step(tab, t, &job, &none, planned) == SC_OK, "rank %d: planned: %s",
			  rank, job.error);
	}
	for (int i = 0; i < N; i++)
		buf[i] = input(a->seed, i, rank);
	job = small_job(&it);
	job.fast = case_fast(a, rank);
	scd_fault_t f = {0};
	if ((a->kind == CASE_FAULT && rank == a->bad) ||
	    (a->kind == CASE_LEAVE_FAULT && rank == (a->bad + 1) % a->P))
		f = (scd_fault_t){.kind = SCD_FAULT_NONFINITE, .item = 0, .count = 2};
	st = step(tab, t, &job, &f, buf);
	o->st = st;
	snprintf(o->error, sizeof(o->error), "%s", job.error);
	o->discarded = job.fast.discarded;
	o->mesh_broken = job.mesh_broken;
	o->buf_untouched = o->sum_exact = 1;
	o->same_as_planned = a->kind == CASE_READY && !memcmp(buf, planned, sizeof(buf));
	for (int i = 0; i < N; i++) {
		o->buf_untouched &= buf[i] == input(a->seed, i, rank);
		o->sum_exact &= buf[i] == rank_order_sum(a->seed, i, a->P);
	}
	if (a->kind == CASE_STEPS_AFTER)
		o->after_exact = steps_after(tab, t, a);
	o->done = 1;
	scd_bufctx_table_destroy(tab);
	scd_transport_destroy(t);
}

static void fast_child(unit_mesh_t *m, int rank, void *arg)
{
	(void)m;
	fast_rank(arg, rank);
}

/* Runs the P ranks of one case (bad: the rank it concerns); out[] gets what each
 * reported. */
static void run_case(int P, fast_case_t kind, int bad, rank_out_t *out)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	memset(out, 0, sizeof(rank_out_t) * MAX_P);
	fast_arg_t a = {&mesh, P, bad, kind, unit_rng(), out};
	unit_mesh_fork(&mesh, fast_child, &a);
	for (int r = 0; r < P; r++)
		CHECK_MSG(out[r].done, "rank %d did not report", r);
}

static rank_out_t *shared_out(void)
{
	rank_out_t *out = mmap(NULL, sizeof(rank_out_t) * MAX_P, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(out != MAP_FAILED);
	return out;
}

UNIT_TEST(fast_turn_all_ready_sums_exactly)
{
	rank_out_t *out = shared_out();
	for (int P = 2; P <= MAX_P; P++) {
		run_case(P, CASE_READY, -1, out);
		for (int r = 0; r < P; r++)
			CHECK_MSG(out[r].st == SC_OK && out[r].sum_exact &&
				      out[r].same_as_planned && !out[r].discarded,
				  "P %d, rank %d: %s (%s), sum exact %d, as planned %d, "
				  "discarded %d",
				  P, r, sc_status_name(out[r].st), out[r].error,
				  out[r].sum_exact, out[r].same_as_planned, out[r].discarded);
	}
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

/* Every rank discarded the turn: nothing summed, nothing delivered. */
static void check_discarded(const rank_out_t *out, int P, int leaver, const char *what)
{
	char node[32];
	snprintf(node, sizeof(node), "node %d left", leaver);
	for (int r = 0; r < P; r++) {
		CHECK_MSG(out[r].st == SC_IN_PROGRESS && out[r].discarded,
			  "%s, P %d, rank %d: %s (%s), discarded %d, expected a discard", what,
			  P, r, sc_status_name(out[r].st), out[r].error, out[r].discarded);
		CHECK_MSG(out[r].buf_untouched, "%s, P %d: rank %d's buffer changed", what, P,
			  r);
		CHECK_MSG(!out[r].mesh_broken, "%s, P %d: rank %d marked the mesh broken", what,
			  P, r);
		CHECK_MSG(strstr(out[r].error, node) && strstr(out[r].error, "'layer.fast'"),
			  "%s, P %d: rank %d's account does not name node %d and the tensor: "
			  "'%s'",
			  what, P, r, leaver, out[r].error);
	}
}

UNIT_TEST(fast_turn_leave_discards_on_every_rank)
{
	rank_out_t *out = shared_out();
	for (int P = 2; P <= MAX_P; P++) {
		int bad = (int)unit_rng_below((uint64_t)P);
		run_case(P, CASE_LEAVE, bad, out);
		check_discarded(out, P, bad, "leave");
	}
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

UNIT_TEST(fast_turn_fault_fails_every_rank_alike)
{
	rank_out_t *out = shared_out();
	int P = 3, bad = (int)unit_rng_below((uint64_t)P);
	run_case(P, CASE_FAULT, bad, out);
	char who[32];
	snprintf(who, sizeof(who), "rank %d ", bad);
	for (int r = 0; r < P; r++) {
		CHECK_MSG(out[r].st == SC_ERR_INVALID && !out[r].discarded,
			  "rank %d: %s (%s), discarded %d, expected SC_ERR_INVALID", r,
			  sc_status_name(out[r].st), out[r].error, out[r].discarded);
		CHECK_MSG(!strcmp(out[r].error, out[0].error),
			  "rank %d's error differs from rank 0's: '%s' vs '%s'", r,
			  out[r].error, out[0].error);
		CHECK_MSG(out[r].buf_untouched, "rank %d's buffer changed", r);
	}
	CHECK_MSG(strstr(out[0].error, who) && strstr(out[0].error, "non-finite"),
		  "the error does not name rank %d and the fault: '%s'", bad, out[0].error);
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

UNIT_TEST(fast_turn_leave_wins_over_fault)
{
	rank_out_t *out = shared_out();
	int P = 3, bad = (int)unit_rng_below((uint64_t)P);
	run_case(P, CASE_LEAVE_FAULT, bad, out);
	check_discarded(out, P, bad, "leave and fault");
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

UNIT_TEST(fast_turn_forged_words_are_protocol)
{
	rank_out_t *out = shared_out();
	static const fast_case_t forged[] = {CASE_FORGE_TURN, CASE_FORGE_EPOCH,
					     CASE_FORGE_DIGEST};
	static const char *what[] = {"turn", "epoch", "digest"};
	for (int k = 0; k < 3; k++) {
		int P = 2 + k, bad = (int)unit_rng_below((uint64_t)P);
		run_case(P, forged[k], bad, out);
		for (int r = 0; r < P; r++) {
			CHECK_MSG(
			    out[r].st == SC_ERR_PROTOCOL && out[r].mesh_broken &&
				!out[r].discarded,
			    "%s forged on rank %d, P %d, rank %d: %s (%s), mesh broken %d",
			    what[k], bad, P, r, sc_status_name(out[r].st), out[r].error,
			    out[r].mesh_broken);
			CHECK_MSG(out[r].buf_untouched, "%s forged: rank %d's buffer changed",
				  what[k], r);
			CHECK_MSG(
			    !strcmp(out[r].error, out[0].error),
			    "%s forged: rank %d's error differs from rank 0's: '%s' vs '%s'",
			    what[k], r, out[r].error, out[0].error);
		}
		/* the ranks name the first whose words are not rank 0's: the forger, or rank
		 * 1 when rank 0 forged */
		char node[32];
		snprintf(node, sizeof(node), "node %d is at", bad ? bad : 1);
		CHECK_MSG(strstr(out[0].error, node) && strstr(out[0].error, "'layer.fast'"),
			  "%s forged on rank %d: the error does not name node %d and the "
			  "tensor: '%s'",
			  what[k], bad, bad ? bad : 1, out[0].error);
	}
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

UNIT_TEST(fast_turn_discard_keeps_streams_in_step)
{
	rank_out_t *out = shared_out();
	for (int P = 2; P <= MAX_P; P++) {
		int bad = (int)unit_rng_below((uint64_t)P);
		run_case(P, CASE_STEPS_AFTER, bad, out);
		check_discarded(out, P, bad, "discard then steps");
		for (int r = 0; r < P; r++)
			CHECK_MSG(out[r].after_exact,
				  "P %d, rank %d: the planned one round or the ring after the "
				  "discard is not exact",
				  P, r);
	}
	munmap(out, sizeof(rank_out_t) * MAX_P);
}

/* ---- the engine: two nodes of two trainers each ------------------------------------- */

#define EP 2 /* nodes */
#define EL 2 /* trainers a node */

typedef struct node {
	uv_loop_t loop;
	scd_engine_t *e;
	int rank, done;
	scd_job_t *back[8];
} node_t;

static void on_done(void *arg, scd_job_t *job)
{
	node_t *n = arg;
	n->back[n->done++] = job;
}

/* Runs the loop until want jobs in all are back. */
static void wait_back(node_t *n, int want)
{
	while (n->done < want)
		uv_run(&n->loop, UV_RUN_ONCE);
}

/* Trainer l of node rank's element i (integers: any order sums them exactly). */
static float trainer_val(int i, int rank, int l)
{
	return (float)((i * 5 + (rank * EL + l) * 11) % 23);
}

/* A job of one tensor of N floats, trainer l's in bufs[l], fast when f is. */
static scd_job_t *engine_job(float bufs[EL][N], const scd_fast_t *f)
{
	scd_job_t *job = calloc(1, sizeof(*job));
	scd_job_item_t *it = calloc(1, sizeof(*it));
	CHECK_TRUE(job && it);
	*it = (scd_job_item_t){.name = "layer.fast", .numel = N, .op = SC_OP_SUM, .n_src = EL};
	it->cache_id = 9;
	for (int l = 0; l < EL; l++)
		it->src[l] = (scd_job_src_t){
		    .device = SCD_DEVICE_CPU, .local_rank = l, .dense = bufs[l]};
	*job = (scd_job_t){.kind = SCD_JOB_ALLREDUCE,
			   .n_items = 1,
			   .items = it,
			   .total_numel = N,
			   .dtype = SC_FLOAT32,
			   .coll = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM},
			   .average_divisor = EP * EL,
			   .pin = -1,
			   .timeout_ms = TMO_MS,
			   .world_seed = 7,
			   .lossless_only = 1};
	if (f)
		job->fast = *f;
	return job;
}

static void free_job(scd_job_t *job)
{
	free(job->items);
	free(job);
}

static void fill(float bufs[EL][N], int rank)
{
	for (int l = 0; l < EL; l++)
		for (int i = 0; i < N; i++)
			bufs[l][i] = trainer_val(i, rank, l);
}

/* Every trainer's buffer holds the sum over the world's trainers. */
static void check_sum(float bufs[EL][N], int rank, const char *what)
{
	for (int l = 0; l < EL; l++)
		for (int i = 0; i < N; i++) {
			float want = 0;
			for (int q = 0; q < EP; q++)
				for (int k = 0; k < EL; k++)
					want += trainer_val(i, q, k);
			CHECK_MSG(bufs[l][i] == want, "rank %d: %s, trainer %d, element %d: %g",
				  rank, what, l, i, (double)bufs[l][i]);
		}
}

static void node_start(unit_mesh_t *m, int rank, node_t *n)
{
	scd_log_level = -1; /* the discards are expected */
	*n = (node_t){.rank = rank};
	n->e = unit_engine_start(m, rank, EL, TMO_MS, &n->loop, on_done, n);
	wait_back(n, 1);
	scd_job_t *mesh = n->back[0];
	CHECK_MSG(mesh->status == SC_OK, "rank %d: mesh: %s", rank, mesh->error);
	scd_transport_boot_clear(&mesh->boot);
	free(mesh);
}

static void node_stop(node_t *n)
{
	unit_engine_stop(n->e, &n->loop);
}

static void engine_node(unit_mesh_t *m, int rank, void *arg)
{
	int leaver = *(const int *)arg;
	node_t n;
	node_start(m, rank, &n);
	static float a[EL][N], b[EL][N], c[EL][N];
	fill(a, rank);
	fill(b, rank);
	/* turns 1 and 2 of epoch 7 queued together; one node leaves turn 1 */
	scd_fast_t f1 = {.epoch = 7, .turn = 1, .digest = 99, .leave = rank == leaver};
	scd_fast_t f2 = {.epoch = 7, .turn = 2, .digest = 99};
	scd_transport_t *t = scd_engine_transport(n.e);
	scd_transport_counters_t c0, c2;
	t->ops->counters(t, &c0);
	scd_engine_submit(n.e, engine_job(a, &f1));
	scd_engine_submit(n.e, engine_job(b, &f2));
	wait_back(&n, 3);
	t->ops->counters(t, &c2);
	scd_job_t *j1 = n.back[1], *j2 = n.back[2];
	CHECK_MSG(j1->fast.turn == 1 && j2->fast.turn == 2, "rank %d: turns back out of order",
		  rank);
	CHECK_MSG(j1->status == SC_IN_PROGRESS && j1->fast.discarded,
		  "rank %d: turn 1: %s (%s), discarded %d", rank, sc_status_name(j1->status),
		  j1->error, j1->fast.discarded);
	CHECK_MSG(j1->bytes_sent > 0 && j1->bytes_recv > 0, "rank %d: turn 1 exchanged nothing",
		  rank);
	for (int l = 0; l < EL; l++)
		for (int i = 0; i < N; i++)
			CHECK_MSG(
			    a[l][i] == trainer_val(i, rank, l) &&
				b[l][i] == trainer_val(i, rank, l),
			    "rank %d: trainer %d's input changed at %d by a discarded turn",
			    rank, l, i);
	CHECK_MSG(j2->status == SC_IN_PROGRESS && j2->fast.discarded,
		  "rank %d: turn 2 of the dead epoch: %s (%s), discarded %d", rank,
		  sc_status_name(j2->status), j2->error, j2->fast.discarded);
	/* the mesh's counters over both turns: turn 1's exchange alone */
	CHECK_MSG(c2.bytes_sent - c0.bytes_sent == j1->bytes_sent &&
		      c2.bytes_recv - c0.bytes_recv == j1->bytes_recv,
		  "rank %d: turn 2 of the dead epoch sent %llu and received %llu bytes", rank,
		  (unsigned long long)(c2.bytes_sent - c0.bytes_sent - j1->bytes_sent),
		  (unsigned long long)(c2.bytes_recv - c0.bytes_recv - j1->bytes_recv));
	free_job(j1);
	free_job(j2);
	/* a new epoch's turn, all ready, then a planned job: exact */
	scd_fast_t f3 = {.epoch = 8, .turn = 1, .digest = 100};
	scd_engine_submit(n.e, engine_job(a, &f3));
	wait_back(&n, 4);
	CHECK_MSG(n.back[3]->status == SC_OK && !n.back[3]->fast.discarded,
		  "rank %d: epoch 8: %s (%s)", rank, sc_status_name(n.back[3]->status),
		  n.back[3]->error);
	check_sum(a, rank, "epoch 8, turn 1");
	fill(c, rank);
	scd_engine_submit(n.e, engine_job(c, NULL));
	wait_back(&n, 5);
	CHECK_MSG(n.back[4]->status == SC_OK, "rank %d: planned: %s (%s)", rank,
		  sc_status_name(n.back[4]->status), n.back[4]->error);
	check_sum(c, rank, "planned after the discards");
	free_job(n.back[3]);
	free_job(n.back[4]);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_fast_dead_epoch_sends_nothing, 90)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", EP, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	int leaver = (int)unit_rng_below(EP);
	unit_mesh_fork(&mesh, engine_node, &leaver);
}

/* ---- the engine across a re-form: a mesh job between two worlds -------------------- */

/* The second world's mesh (prepared in the parent: every child holds every blob). */
typedef struct reform_arg {
	unit_mesh_t *next;
	int leaver;
} reform_arg_t;

/* Submits the mesh job of world m on n's engine and waits for it. */
static void node_reform(node_t *n, unit_mesh_t *m)
{
	int want = n->done + 1;
	scd_engine_submit(n->e, unit_mesh_job(m, n->rank));
	wait_back(n, want);
	scd_job_t *mesh = n->back[want - 1];
	CHECK_MSG(mesh->status == SC_OK, "rank %d: second mesh: %s", n->rank, mesh->error);
	scd_transport_boot_clear(&mesh->boot);
	free(mesh);
}

/* Submits job and waits for it; the caller frees it. */
static scd_job_t *run_one(node_t *n, scd_job_t *job)
{
	int want = n->done + 1;
	scd_engine_submit(n->e, job);
	wait_back(n, want);
	return n->back[want - 1];
}

static void reform_epoch_node(unit_mesh_t *m, int rank, void *arg)
{
	const reform_arg_t *ra = arg;
	node_t n;
	node_start(m, rank, &n);
	static float a[EL][N];
	fill(a, rank);
	/* the first world's epoch 1 ends at turn 1: a node leaves it */
	scd_fast_t f1 = {.epoch = 1, .turn = 1, .digest = 5, .leave = rank == ra->leaver};
	scd_job_t *j = run_one(&n, engine_job(a, &f1));
	CHECK_MSG(j->status == SC_IN_PROGRESS && j->fast.discarded,
		  "rank %d: first world's turn: %s (%s)", rank, sc_status_name(j->status),
		  j->error);
	free_job(j);
	/* the world re-forms; the new world's epoch 1 is not the old one's */
	node_reform(&n, ra->next);
	scd_fast_t f2 = {.epoch = 1, .turn = 1, .digest = 6};
	j = run_one(&n, engine_job(a, &f2));
	CHECK_MSG(j->status == SC_OK && !j->fast.discarded,
		  "rank %d: the new world's epoch 1, turn 1: %s (%s), discarded %d", rank,
		  sc_status_name(j->status), j->error, j->fast.discarded);
	check_sum(a, rank, "the new world's epoch 1");
	free_job(j);
	node_stop(&n);
}

/* Two meshes of EP nodes, the second for the world re-formed; fn runs on each node. */
static void run_reform(void (*fn)(unit_mesh_t *m, int rank, void *arg))
{
	unit_mesh_t m1, m2;
	CHECK_MSG(unit_mesh_prepare(&m1, "tcp", EP, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	CHECK_MSG(unit_mesh_prepare(&m2, "tcp", EP, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	reform_arg_t ra = {&m2, (int)unit_rng_below(EP)};
	unit_mesh_fork(&m1, fn, &ra);
	unit_mesh_release(&m2);
}

UNIT_TEST_TIMEOUT(engine_fast_dead_epoch_is_the_worlds, 90)
{
	run_reform(reform_epoch_node);
}

/* A fast turn's words refused (rule 1) leave the transport serving: the planned job behind
 * it fails unrun on every node, with no byte sent, until the mesh job of the re-form. */
static void refused_node(unit_mesh_t *m, int rank, void *arg)
{
	const reform_arg_t *ra = arg;
	node_t n;
	node_start(m, rank, &n);
	static float a[EL][N], c[EL][N];
	fill(a, rank);
	fill(c, rank);
	scd_fast_t f = {.epoch = 1, .turn = rank == ra->leaver ? 2 : 1, .digest = 5};
	scd_job_t *j = run_one(&n, engine_job(a, &f));
	CHECK_MSG(j->status == SC_ERR_PROTOCOL && j->mesh_broken,
		  "rank %d: forged turn: %s (%s), mesh broken %d", rank,
		  sc_status_name(j->status), j->error, j->mesh_broken);
	free_job(j);
	scd_transport_t *t = scd_engine_transport(n.e);
	scd_transport_counters_t c0, c1;
	t->ops->counters(t, &c0);
	j = run_one(&n, engine_job(c, NULL));
	t->ops->counters(t, &c1);
	CHECK_MSG(j->status != SC_OK && j->mesh_broken && strstr(j->error, "out of step"),
		  "rank %d: the planned job behind the refused turn: %s (%s), mesh broken %d",
		  rank, sc_status_name(j->status), j->error, j->mesh_broken);
	CHECK_MSG(c1.bytes_sent == c0.bytes_sent && c1.bytes_recv == c0.bytes_recv,
		  "rank %d: the planned job behind the refused turn sent %llu bytes", rank,
		  (unsigned long long)(c1.bytes_sent - c0.bytes_sent));
	free_job(j);
	node_reform(&n, ra->next);
	fill(c, rank);
	j = run_one(&n, engine_job(c, NULL));
	CHECK_MSG(j->status == SC_OK, "rank %d: planned in the new world: %s (%s)", rank,
		  sc_status_name(j->status), j->error);
	check_sum(c, rank, "planned in the new world");
	free_job(j);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_fast_refused_words_stop_the_mesh, 90)
{
	run_reform(refused_node);
}

/* Logs and the timeline name a fast turn by its epoch and turn: its job->seq is the last
 * planned job's, which no plan gave it. */
UNIT_TEST(fast_turn_named_by_epoch_and_turn)
{
	scd_job_item_t it;
	scd_job_t job = small_job(&it);
	job.seq = 7;
	const char *name = SCD_JOB_NAME(&job);
	CHECK_MSG(!strcmp(name, "job 7"), "a planned job: '%s'", name);
	job.fast = (scd_fast_t){.epoch = 3, .turn = 12};
	name = SCD_JOB_NAME(&job);
	CHECK_MSG(!strcmp(name, "epoch 3 turn 12"), "a fast turn: '%s'", name);
}
