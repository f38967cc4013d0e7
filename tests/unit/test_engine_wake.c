/*
 * test_engine_wake.c: what the engine's hand-offs wake (engine.c). Two forked engines of one
 * trainer each: a buffer's job on node 0 waits in its communication stage for node 1's;
 * meanwhile eight selection jobs at submission (coll/presel.h) run on node 0's compute
 * thread and ask the loop for no wake-up; once node 1 submits, the buffer's hand-back
 * wakes the loop once and brings the eight with it. Eight more with nothing else in the
 * engine wake the loop once each, and the idle communication thread not at all (it waits
 * on a condition variable of its own). Every selection succeeds and the buffer's sum is
 * exact. Small selections (engine.c, ENGINE_LAZY_NUMEL) wake the compute thread not at all:
 * they run when a larger job wakes it, ahead of that job, or when the loop's timer says
 * they have waited long enough; a GPU's small selection wakes it at once.
 */
#include "unit.h"

#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "coll/presel.h"
#include "engine/engine.h"
#include "unit_engine.h"
#include "util/log.h"

#define TMO_MS 20000
#define NSEL   8
#define SEL_N  8192 /* over ENGINE_LAZY_NUMEL: each wakes the compute thread */
#define TINY_N 256  /* at most ENGINE_LAZY_NUMEL: queued without a wake-up */
#define SUM_N  8192 /* 32 KiB: over what the compute thread communicates itself */

static int go_fds[2]; /* node 0 tells node 1 to submit its buffer */

typedef struct node {
	uv_loop_t loop;
	scd_engine_t *e;
	int rank, back;
	uint64_t may_fail_seq; /* a job that may fail (no GPU where a GPU's is asked for) */
} node_t;

static void on_done(void *arg, scd_job_t *job)
{
	node_t *n = arg;
	n->back++;
	if (job->kind == SCD_JOB_MESH)
		scd_transport_boot_clear(&job->boot);
	CHECK_MSG(job->status == SC_OK || job->seq == n->may_fail_seq,
		  "rank %d: job %llu (kind %d): %s (%s)", n->rank, (unsigned long long)job->seq,
		  job->kind, sc_status_name(job->status), job->error);
	free(job->items);
	free(job);
}

/* Runs the loop until want jobs in all have come back. */
static void wait_back(node_t *n, int want)
{
	while (n->back < want)
		uv_run(&n->loop, UV_RUN_ONCE);
}

static void node_start(unit_mesh_t *m, int rank, node_t *n)
{
	scd_log_level = SCD_LOG_WARN;
	*n = (node_t){.rank = rank};
	n->e = unit_engine_start(m, rank, 1, TMO_MS, &n->loop, on_done, n);
	wait_back(n, 1);
}

static void node_stop(node_t *n)
{
	unit_engine_stop(n->e, &n->loop);
}

/* A float32 sum of x's SUM_N elements over both nodes: a job too large to be communicated
 * on the compute thread (engine.c, comm_here_locked), which keeps that thread free for the
 * selections while the sum waits for node 1. */
static scd_job_t *sum_job(float *x)
{
	return unit_engine_sum_job("sum", x, SUM_N, 1, TMO_MS);
}

/* Tensor k's selection job at submission: top-k 1/8 of buf into res, as
 * world/presel.c builds it for a tensor the response cache knows as id 10 + k. */
static scd_job_t *sel_job_n(int k, float *buf, float *res, uint64_t numel)
{
	static uint64_t token;
	scd_job_t *job = calloc(1, sizeof(*job));
	scd_job_item_t *it = calloc(1, sizeof(*it));
	CHECK_TRUE(job && it);
	*it = (scd_job_item_t){.name = "sel",
			       .numel = numel,
			       .op = SC_OP_SUM,
			       .n_src = 1,
			       .cache_id = (uint32_t)(10 + k),
			       .presel_key = (uint64_t)(k + 1),
			       .presel_token = ++token,
			       .sparsifier = SC_SPARSIFY_TOPK,
			       .density = 0.125,
			       .residual = res};
	it->src[0] = (scd_job_src_t){.device = SCD_DEVICE_CPU, .dense = buf};
	*job = (scd_job_t){.kind = SCD_JOB_PRESELECT,
			   .seq = 100 + token,
			   .n_items = 1,
			   .items = it,
			   .total_numel = numel,
			   .dtype = SC_FLOAT32,
			   .coll = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM},
			   .pin = -1,
			   .timeout_ms = TMO_MS,
			   .world_seed = 7};
	return job;
}

static scd_job_t *sel_job(int k, float *buf, float *res)
{
	return sel_job_n(k, buf, res, SEL_N);
}

static float val(int i, int rank)
{
	return (float)((i * 5 + rank * 3) % 11 - 5);
}

static void node0(node_t *n)
{
	static float x[SUM_N], bufs[NSEL][SEL_N], res[NSEL][SEL_N];
	for (int i = 0; i < SUM_N; i++)
		x[i] = val(i, 0);
	for (int k = 0; k < NSEL; k++)
		for (int i = 0; i < SEL_N; i++)
			bufs[k][i] = (float)((i * 7 + k) % 31) - 15.0f;
	scd_engine_counts_t c0 = scd_engine_counts(n->e);
	scd_engine_submit(n->e, sum_job(x)); /* waits for node 1's */
	for (int k = 0; k < NSEL; k++)
		scd_engine_submit(n->e, sel_job(k, bufs[k], res[k]));
	/* the selections finish while the buffer waits (the loop does not run meanwhile) */
	for (int ms = 0; scd_engine_counts(n->e).handed < c0.handed + NSEL; ms++) {
		CHECK_MSG(ms < TMO_MS, "the selections did not finish in %d ms", TMO_MS);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	scd_engine_counts_t c1 = scd_engine_counts(n->e);
	CHECK_MSG(c1.handed == c0.handed + NSEL, "handed back %llu, the buffer among them",
		  (unsigned long long)(c1.handed - c0.handed));
	CHECK_MSG(c1.wakes == c0.wakes,
		  "%llu wake-ups of the loop for %d selections while a "
		  "buffer was in the engine",
		  (unsigned long long)(c1.wakes - c0.wakes), NSEL);
	CHECK_MSG(c1.comm_wakes <= c0.comm_wakes + 1,
		  "the communication thread woke %llu times for a buffer and %d selections",
		  (unsigned long long)(c1.comm_wakes - c0.comm_wakes), NSEL);
	CHECK_TRUE(write(go_fds[1], "g", 1) == 1);
	wait_back(n, 1 + 1 + NSEL);
	scd_engine_counts_t c2 = scd_engine_counts(n->e);
	CHECK_MSG(c2.wakes == c0.wakes + 1, "%llu wake-ups for the buffer and %d selections",
		  (unsigned long long)(c2.wakes - c0.wakes), NSEL);
	for (int i = 0; i < SUM_N; i++)
		CHECK_MSG(x[i] == val(i, 0) + val(i, 1), "sum, element %d: %g", i,
			  (double)x[i]);
	/* nothing else in the engine: each selection wakes the loop */
	for (int k = 0; k < NSEL; k++)
		scd_engine_submit(n->e, sel_job(k, bufs[k], res[k]));
	wait_back(n, 1 + 1 + 2 * NSEL);
	scd_engine_counts_t c3 = scd_engine_counts(n->e);
	CHECK_MSG(c3.wakes == c2.wakes + NSEL, "%llu wake-ups for %d selections alone",
		  (unsigned long long)(c3.wakes - c2.wakes), NSEL);
	CHECK_MSG(c3.comm_wakes == c2.comm_wakes,
		  "the communication thread woke %llu times for %d selections",
		  (unsigned long long)(c3.comm_wakes - c2.comm_wakes), NSEL);
}

static void node_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	node_t n;
	node_start(m, rank, &n);
	if (rank == 0) {
		node0(&n);
	} else {
		static float x[SUM_N];
		for (int i = 0; i < SUM_N; i++)
			x[i] = val(i, 1);
		struct pollfd pfd = {.fd = go_fds[0], .events = POLLIN};
		char g;
		CHECK_MSG(poll(&pfd, 1, TMO_MS) == 1 && read(go_fds[0], &g, 1) == 1,
			  "node 0 never let node 1 submit");
		scd_engine_submit(n.e, sum_job(x));
		wait_back(&n, 2);
		for (int i = 0; i < SUM_N; i++)
			CHECK_MSG(x[i] == val(i, 0) + val(i, 1), "node 1: sum, element %d: %g",
				  i, (double)x[i]);
	}
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_selections_go_back_with_the_buffer_in_flight, 120)
{
	CHECK_TRUE(pipe(go_fds) == 0);
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", 2, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, node_main, NULL);
}

static uint64_t handed(node_t *n)
{
	return scd_engine_counts(n->e).handed;
}

static void asleep(node_t *n)
{
	for (int ms = 0; !scd_engine_counts(n->e).asleep; ms++) {
		CHECK_MSG(ms < TMO_MS, "rank %d: the compute thread not asleep after %d ms",
			  n->rank, TMO_MS);
		uv_run(&n->loop, UV_RUN_NOWAIT);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
}

/* Small selections: queued unwoken, run by the timer's wake-up or ahead of a larger job. */
static void lazy_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	node_t n;
	node_start(m, rank, &n);
	static float bufs[NSEL + 1][SEL_N], res[NSEL + 1][SEL_N];
	for (int k = 0; k <= NSEL; k++)
		for (int i = 0; i < SEL_N; i++)
			bufs[k][i] = (float)((i * 7 + k) % 31) - 15.0f;
	/* the compute thread asleep, with no hand-back's deadline to wake it (engine.c,
	 * owe_locked): the world's job may have left one */
	asleep(&n);
	scd_engine_counts_t c0 = scd_engine_counts(n.e);
	for (int k = 0; k < NSEL; k++)
		scd_engine_submit(n.e, sel_job_n(k, bufs[k], res[k], TINY_N));
	/* the loop does not run, so its timer cannot fire: nothing wakes the compute thread */
	nanosleep(&(struct timespec){0, 50 * 1000000}, NULL);
	scd_engine_counts_t c1 = scd_engine_counts(n.e);
	CHECK_MSG(c1.lazy == c0.lazy + NSEL,
		  "rank %d: %llu of %d small selections queued "
		  "without a wake-up",
		  rank, (unsigned long long)(c1.lazy - c0.lazy), NSEL);
	CHECK_MSG(c1.handed == c0.handed, "rank %d: %llu small selections ran unwoken", rank,
		  (unsigned long long)(c1.handed - c0.handed));
	/* the loop's timer wakes the thread for them */
	for (int ms = 0; n.back < 1 + NSEL; ms++) {
		CHECK_MSG(ms < TMO_MS,
			  "rank %d: %d of %d small selections back with the loop "
			  "running",
			  rank, n.back - 1, NSEL);
		uv_run(&n.loop, UV_RUN_NOWAIT);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	/* small ones, then a larger one: its wake-up runs them all, in order, loop or not */
	for (int k = 0; k < NSEL; k++)
		scd_engine_submit(n.e, sel_job_n(k, bufs[k], res[k], TINY_N));
	scd_engine_submit(n.e, sel_job(NSEL, bufs[NSEL], res[NSEL]));
	for (int ms = 0; handed(&n) < c1.handed + 2 * NSEL + 1; ms++) {
		CHECK_MSG(ms < TMO_MS,
			  "rank %d: %llu of %d selections ran after a larger one "
			  "woke the thread",
			  rank, (unsigned long long)(handed(&n) - c1.handed - NSEL), NSEL + 1);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	CHECK_TRUE(scd_engine_counts(n.e).lazy == c0.lazy + 2 * NSEL);
	wait_back(&n, 1 + 2 * NSEL + 1);
	/* a GPU's small selection wakes the thread at once, the loop still: its kernels are
	 * to overlap the backward pass (it fails here, with no GPU, or runs on the host
	 * build's GPU functions: either way it comes back) */
	scd_engine_counts_t c2 = scd_engine_counts(n.e);
	scd_job_t *gj = sel_job_n(0, bufs[0], res[0], TINY_N);
	gj->items[0].src[0].device = SCD_DEVICE_CUDA;
	n.may_fail_seq = gj->seq;
	scd_engine_submit(n.e, gj);
	for (int ms = 0; handed(&n) == c2.handed; ms++) {
		CHECK_MSG(ms < TMO_MS, "rank %d: a GPU's small selection waited for a wake-up",
			  rank);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	CHECK_MSG(scd_engine_counts(n.e).lazy == c2.lazy,
		  "rank %d: a GPU's small selection queued without a wake-up", rank);
	wait_back(&n, 1 + 2 * NSEL + 2);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_small_selections_wait_for_a_wake_up, 120)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", 2, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, lazy_main, NULL);
}
