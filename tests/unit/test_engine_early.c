/*
 * test_engine_early.c: a job that succeeds ends its trainers' operations in their shared
 * headers from the engine itself (engine.c, early_done_locked), before the loop runs; one
 * that fails, or that a fence overtook, leaves the header alone. Two forked engines of one
 * trainer each, a 4 KiB float32 sum per round:
 *   1. both succeed: each header holds its handle while the loop has not run, the job comes
 *      back marked woke, and the sum is exact; node 0 collects the hand-back and its
 *      loop is not woken for it after that, node 1 does not and its loop is woken once,
 *      later (engine.c, owe_locked);
 *   2. a NaN on node 1 with nonfinite = error: both fail, neither header is written;
 *   3. node 0 fences after submitting (the world re-formed): its job fails unwritten; one
 *      whose exchange had not started runs nothing more (its trainer may be writing its
 *      next step into the buffer the job sums in place), so node 1's fails too, unwritten,
 *      else node 1's succeeds and is written.
 * And after a fence, scd_engine_quiesce waits for the exchange of a job run in place in its
 * trainer's buffer (it writes that buffer until the transfer ends), so that a re-form tells
 * the trainers only once nothing of the old world writes there (world.c, reform): node 0
 * submits a sum that waits in its exchange for node 1, who never submits; fenced, quiesce
 * waits its whole timeout and reports the exchange under way; once peer_gone(1) ends the
 * transfer it returns 0 well within its timeout, the job failed without writing its
 * buffer or its trainer's header.
 */
#include "unit.h"

#include <math.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "engine/engine.h"
#include "shm_wake.h"
#include "unit_engine.h"
#include "util/clock.h"
#include "util/log.h"

#define TMO_MS 20000
#define N      1024 /* 4 KiB: communicated on the compute thread */

static int go_fds[2];	/* node 0 lets node 1 submit round 3 */
static int done_fds[2]; /* quiesce: node 0 lets node 1 stop */

typedef struct node {
	uv_loop_t loop;
	scd_engine_t *e;
	int rank, back;
	sc_status_t status; /* the last buffer job's */
	int woke;	    /* and its source's mark */
} node_t;

static void on_done(void *arg, scd_job_t *job)
{
	node_t *n = arg;
	n->back++;
	if (job->kind == SCD_JOB_MESH) {
		scd_transport_boot_clear(&job->boot);
		CHECK_MSG(job->status == SC_OK, "rank %d: mesh: %s", n->rank, job->error);
	} else {
		n->status = job->status;
		n->woke = job->items[0].src[0].woke;
	}
	free(job->items);
	free(job);
}

static void wait_back(node_t *n, int want)
{
	while (n->back < want)
		uv_run(&n->loop, UV_RUN_ONCE);
}

static scd_job_t *sum_job(float *x, sc_shm_header_t *hdr, uint64_t handle, uint64_t seq)
{
	scd_job_t *job = unit_engine_sum_job("early", x, N, seq, TMO_MS);
	scd_job_src_t *s = &job->items[0].src[0];
	s->done_hdr = hdr;
	s->done_handle = handle;
	s->done_guard = UINT32_MAX;
	return job;
}

static float val(int i, int rank)
{
	return (float)((i * 5 + rank * 3) % 11 - 5);
}

static void fill(float *x, int rank)
{
	for (int i = 0; i < N; i++)
		x[i] = val(i, rank);
}

/* Waits, without running the loop, until hdr holds handle. */
static void wait_header(int rank, sc_shm_header_t *hdr, uint64_t handle)
{
	for (int ms = 0; !sc_shm_is_done(hdr, handle); ms++) {
		CHECK_MSG(ms < TMO_MS, "rank %d: handle %llu never reached the header", rank,
			  (unsigned long long)handle);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
}

static void node_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	static float x[N];
	static sc_shm_header_t hdr;
	node_t n = {.rank = rank};
	scd_log_level = SCD_LOG_ERROR;
	n.e = unit_engine_start(m, rank, 1, TMO_MS, &n.loop, on_done, &n);
	wait_back(&n, 1);

	/* 1: success, told before the loop ran */
	fill(x, rank);
	uint64_t early0 = scd_engine_counts(n.e).early, wakes0 = scd_engine_counts(n.e).wakes;
	uint32_t seq0 = sc_shm_done_seq(&hdr);
	scd_engine_submit(n.e, sum_job(x, &hdr, 40 + (uint64_t)rank, 1));
	wait_header(rank, &hdr, 40 + (uint64_t)rank);
	/* the handle is stored before the word is bumped (sc_shm_done), so the bump may
	 * still be on its way when the handle is seen: it must come, and soon */
	for (int ms = 0; sc_shm_done_seq(&hdr) == seq0; ms++) {
		CHECK_MSG(ms < TMO_MS, "rank %d: the header's word was not bumped", rank);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	CHECK_MSG(n.back == 1, "rank %d: the loop ran before the header was read", rank);
	CHECK_MSG(scd_engine_counts(n.e).early == early0 + 1, "rank %d: %llu ended early", rank,
		  (unsigned long long)(scd_engine_counts(n.e).early - early0));
	if (rank == 0) {
		/* collected (a trainer's next message): the loop is not woken for it after that
		 * (before it, only where the owed time ran out first) */
		scd_engine_collect(n.e);
		CHECK_TRUE(n.back == 2);
		uint64_t wakes1 = scd_engine_counts(n.e).wakes;
		CHECK_TRUE(wakes1 <= wakes0 + 1);
		nanosleep(&(struct timespec){0, 20000000}, NULL);
		CHECK_MSG(scd_engine_counts(n.e).wakes == wakes1,
			  "rank 0: the loop was woken for a hand-back it had collected");
	} else {
		/* not collected: the engine wakes the loop for it after a while */
		wait_back(&n, 2);
		CHECK_MSG(scd_engine_counts(n.e).wakes == wakes0 + 1,
			  "rank 1: %llu wake-ups of the loop for one owed hand-back",
			  (unsigned long long)(scd_engine_counts(n.e).wakes - wakes0));
	}
	CHECK_MSG(n.status == SC_OK && n.woke == 1, "rank %d: round 1: %s, woke %d", rank,
		  sc_status_name(n.status), n.woke);
	for (int i = 0; i < N; i++)
		CHECK_MSG(x[i] == val(i, 0) + val(i, 1), "rank %d: element %d: %g", rank, i,
			  (double)x[i]);

	/* 2: a NaN on node 1 fails the job on both: no header written */
	fill(x, rank);
	if (rank == 1)
		x[17] = NAN;
	scd_job_t *job = sum_job(x, &hdr, 50 + (uint64_t)rank, 2);
	job->nonfinite = SCD_NONFINITE_ERROR;
	scd_engine_submit(n.e, job);
	wait_back(&n, 3);
	CHECK_MSG(n.status != SC_OK && !n.woke, "rank %d: round 2: %s, woke %d", rank,
		  sc_status_name(n.status), n.woke);
	CHECK_MSG(sc_shm_is_done(&hdr, 40 + (uint64_t)rank),
		  "rank %d: a failed job wrote its handle to the header", rank);
	CHECK_TRUE(scd_engine_counts(n.e).early == early0 + 1);

	/* 3: node 0 fences while its job waits for node 1's */
	fill(x, rank);
	if (rank == 0) {
		scd_engine_submit(n.e, sum_job(x, &hdr, 60, 3));
		scd_engine_fence(n.e);
		CHECK_TRUE(write(go_fds[1], "g", 1) == 1);
		wait_back(&n, 4);
		CHECK_MSG(n.status != SC_OK && !n.woke, "rank 0: round 3 (fenced): %s, woke %d",
			  sc_status_name(n.status), n.woke);
		CHECK_MSG(!sc_shm_is_done(&hdr, 60), "rank 0: a fenced job told its trainer");
	} else {
		struct pollfd pfd = {.fd = go_fds[0], .events = POLLIN};
		char g;
		CHECK_MSG(poll(&pfd, 1, TMO_MS) == 1 && read(go_fds[0], &g, 1) == 1,
			  "node 0 never let node 1 submit");
		scd_engine_submit(n.e, sum_job(x, &hdr, 61, 3));
		wait_back(&n, 4);
		int told = sc_shm_is_done(&hdr, 61);
		CHECK_MSG(n.status == SC_OK ? n.woke && told : !n.woke && !told,
			  "rank 1: round 3: %s, woke %d, told %d", sc_status_name(n.status),
			  n.woke, told);
	}
	unit_engine_stop(n.e, &n.loop);
}

UNIT_TEST_TIMEOUT(engine_ends_successes_in_the_header_itself, 120)
{
	CHECK_TRUE(pipe(go_fds) == 0);
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", 2, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, node_main, NULL);
}

static void quiesce_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	static float x[N];
	static sc_shm_header_t hdr;
	node_t n = {.rank = rank};
	scd_log_level = SCD_LOG_ERROR;
	scd_engine_t *e = n.e = unit_engine_start(m, rank, 1, TMO_MS, &n.loop, on_done, &n);
	while (n.back < 1)
		uv_run(&n.loop, UV_RUN_ONCE);
	if (rank == 1) {
		struct pollfd pfd = {.fd = done_fds[0], .events = POLLIN};
		char g;
		CHECK_MSG(poll(&pfd, 1, 3 * TMO_MS) == 1 && read(done_fds[0], &g, 1) == 1,
			  "node 0 never finished");
		unit_engine_stop(e, &n.loop);
		return;
	}
	for (int i = 0; i < N; i++)
		x[i] = (float)(i % 7);
	scd_job_t *job = unit_engine_sum_job("quiesce", x, N, 1, TMO_MS);
	scd_job_src_t *s = &job->items[0].src[0];
	s->done_hdr = &hdr;
	s->done_handle = 70;
	s->done_guard = UINT32_MAX;
	scd_engine_submit(e, job);
	nanosleep(&(struct timespec){1, 0}, NULL); /* into its exchange, even on a busy host */
	CHECK_MSG(n.back == 1, "the job ended without node 1");

	/* 1: fenced, its exchange still waits for node 1 */
	scd_engine_fence(e);
	double t0 = scd_now_s();
	int left = scd_engine_quiesce(e, 300);
	double waited = scd_now_s() - t0;
	CHECK_MSG(left == 1, "quiesce found %d jobs using their buffers, not the exchange",
		  left);
	CHECK_MSG(waited >= 0.25, "quiesce returned after %.3f s of its 0.3", waited);

	/* 2: the peer gone, the transfer ends and quiesce returns */
	scd_engine_peer_gone(e, 1);
	t0 = scd_now_s();
	left = scd_engine_quiesce(e, TMO_MS);
	waited = scd_now_s() - t0;
	CHECK_MSG(left == 0, "quiesce: %d jobs still use their buffers", left);
	CHECK_MSG(waited < 5, "quiesce waited %.3f s after peer_gone", waited);
	for (int i = 0; i < N; i++)
		CHECK_MSG(x[i] == (float)(i % 7), "element %d written: %g", i, (double)x[i]);
	CHECK_MSG(!sc_shm_is_done(&hdr, 70), "the fenced job told its trainer");
	while (n.back < 2)
		uv_run(&n.loop, UV_RUN_ONCE);
	CHECK_MSG(n.status != SC_OK, "the fenced job came back %s", sc_status_name(n.status));
	CHECK_TRUE(write(done_fds[1], "d", 1) == 1);
	unit_engine_stop(e, &n.loop);
}

UNIT_TEST_TIMEOUT(engine_quiesce_waits_for_an_exchange_in_place, 120)
{
	CHECK_TRUE(pipe(done_fds) == 0);
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", 2, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, quiesce_main, NULL);
}
