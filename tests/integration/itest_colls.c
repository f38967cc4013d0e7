/*
 * itest_colls.c: the collectives beyond sum and average, through real daemons.
 *
 * ops: MIN, MAX and PRODUCT of every dtype (1, 7 and 100003 elements; integer products
 *   that overflow, compared with the wrapped result), every element exact on every rank;
 *   twenty small float32 tensors, half MIN and half SUM, in flight together (a MIN tensor
 *   fused with a SUM one would come back summed); the integer AVERAGE's rounding (toward
 *   zero: sums 1 and -1 average to 0, 2P - 1 to 1); a tensor with a sparsifier asked for
 *   MAX refused with SC_ERR_UNSUPPORTED naming it; and, with one trainer per node, rank 1
 *   asking MAX where the others ask MIN: SC_ERR_MISMATCH naming the tensor and the ranks
 *   on every rank.
 */
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rank r's element i: small integers of both signs (products of halves stay exact in
 * float32 in any order), scaled for the integers so that their products wrap. */
static long long ops_value(int r, size_t i)
{
	return (long long)((i * 7 + (size_t)r * 13) % 11) - 5;
}

static void ops_fill(void *x, sc_dtype_t dt, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++) {
		long long v = ops_value(rank, i);
		switch (dt) {
		case SC_FLOAT32:
			((float *)x)[i] = (float)v * 0.5f;
			break;
		case SC_FLOAT64:
			((double *)x)[i] = (double)v * 0.5;
			break;
		case SC_INT32:
			((int32_t *)x)[i] = (int32_t)(v * 100003);
			break;
		case SC_INT64:
			((int64_t *)x)[i] = v * 1000000007LL;
			break;
		}
	}
}

/* The element every rank must get, as the dtype's bits widened: doubles for the floats,
 * the wrapped unsigned value for the integers. */
static int ops_ok(const void *x, sc_dtype_t dt, sc_reduce_op_t op, size_t i, int P,
		  double *got_p, double *want_p)
{
	double f = 0;
	uint64_t u = 0;
	long long m = 0;
	for (int r = 0; r < P; r++) {
		long long v = ops_value(r, i);
		uint64_t w = dt == SC_INT32 ? (uint32_t)(int32_t)(v * 100003)
					    : (uint64_t)(v * 1000000007LL);
		if (r == 0) {
			f = (double)v * 0.5, u = w, m = v;
		} else if (op == SC_OP_PRODUCT) {
			f *= (double)v * 0.5, u *= w;
		} else if ((v < m) == (op == SC_OP_MIN) && v != m) {
			m = v;
		}
	}
	if (op != SC_OP_PRODUCT) {
		f = (double)m * 0.5;
		u = dt == SC_INT32 ? (uint32_t)(int32_t)(m * 100003)
				   : (uint64_t)(m * 1000000007LL);
	}
	switch (dt) {
	case SC_FLOAT32:
		*got_p = ((const float *)x)[i], *want_p = (float)f;
		return ((const float *)x)[i] == (float)f;
	case SC_FLOAT64:
		*got_p = ((const double *)x)[i], *want_p = f;
		return ((const double *)x)[i] == f;
	case SC_INT32:
		*got_p = ((const int32_t *)x)[i], *want_p = (int32_t)(uint32_t)u;
		return (uint32_t)((const int32_t *)x)[i] == (uint32_t)u;
	default:
		*got_p = (double)((const int64_t *)x)[i], *want_p = (double)(int64_t)u;
		return (uint64_t)((const int64_t *)x)[i] == u;
	}
}

static void ops_check(sc_tensor_t *t, sc_reduce_op_t op, int P, const char *when)
{
	size_t n = sc_tensor_numel(t), wrong = 0, first = 0;
	double got = 0, want = 0;
	for (size_t i = 0; i < n; i++) {
		double g, w;
		if (!ops_ok(sc_tensor_data(t), sc_tensor_dtype(t), op, i, P, &g, &w) &&
		    !wrong++)
			first = i, got = g, want = w;
	}
	if (wrong)
		IT_FAIL("%s of '%s' (%s x %zu) over %d trainers%s: %zu wrong, first [%zu] = "
			"%.17g, expected %.17g",
			sc_reduce_op_name(op), sc_tensor_name(t),
			sc_dtype_name(sc_tensor_dtype(t)), n, P, when, wrong, first, got, want);
}

static void ops_run(sc_client_t *c, sc_tensor_t *t, sc_reduce_op_t op)
{
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, op, &h), "sc_allreduce_async('%s', %s)",
		    sc_tensor_name(t), sc_reduce_op_name(op));
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("%s of '%s': %s: %s", sc_reduce_op_name(op), sc_tensor_name(t),
			it_wait_name(r), it_wait_error());
}

/* Every op and dtype, each tensor reduced twice (the second time from the daemons'
 * cache of the announcement). */
static void ops_exact(sc_client_t *c)
{
	static const sc_dtype_t dts[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	static const sc_reduce_op_t ops[] = {SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT};
	static const size_t sizes[] = {1, 7, 100003};
	int P = sc_size(c), rank = sc_rank(c);
	for (size_t o = 0; o < 3; o++)
		for (size_t d = 0; d < 4; d++)
			for (size_t s = 0; s < 3; s++) {
				char name[96];
				snprintf(name, sizeof(name), "ops.%s.%s.%zu",
					 sc_reduce_op_name(ops[o]), sc_dtype_name(dts[d]),
					 sizes[s]);
				sc_tensor_t *t = it_register(c, name, dts[d], sizes[s]);
				for (int step = 0; step < 2; step++) {
					ops_fill(sc_tensor_data(t), dts[d], sizes[s], rank);
					ops_run(c, t, ops[o]);
					ops_check(t, ops[o], P, step ? ", second step" : "");
				}
			}
	it_log("min, max, product x float32, float64, int32, int64 x 1, 7, 100003: exact");
}

/* MIN and SUM tensors in flight together: fusion must keep them apart. */
static void ops_fused(sc_client_t *c)
{
	enum { N = 20 };
	sc_tensor_t *t[N];
	sc_handle_t h[N];
	int P = sc_size(c), rank = sc_rank(c);
	for (int k = 0; k < N; k++) {
		char name[64];
		snprintf(name, sizeof(name), "ops.fused.%02d", k);
		t[k] = it_register(c, name, SC_FLOAT32, 5 + (size_t)k * 9);
	}
	for (int step = 0; step < 3; step++) {
		for (int k = 0; k < N; k++) {
			size_t n = sc_tensor_numel(t[k]);
			if (k % 2)
				it_fill(sc_tensor_data(t[k]), SC_FLOAT32, n, (uint64_t)k, rank,
					1);
			else
				ops_fill(sc_tensor_data(t[k]), SC_FLOAT32, n, rank);
			IT_CHECK_SC(
			    sc_allreduce_async(c, t[k], k % 2 ? SC_OP_SUM : SC_OP_MIN, &h[k]),
			    "sc_allreduce_async('%s')", sc_tensor_name(t[k]));
		}
		for (int k = N - 1; k >= 0; k--) {
			int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("'%s', step %d: %s: %s", sc_tensor_name(t[k]), step,
					it_wait_name(r), it_wait_error());
		}
		char why[512];
		for (int k = 0; k < N; k++) {
			size_t n = sc_tensor_numel(t[k]);
			if (!(k % 2)) {
				ops_check(t[k], SC_OP_MIN, P, ", in flight with sum tensors");
				continue;
			}
			size_t wrong = it_check(sc_tensor_data(t[k]), SC_FLOAT32, n,
						(uint64_t)k, P, 1, SC_OP_SUM, why, sizeof(why));
			if (wrong)
				IT_FAIL("sum of '%s' in flight with min tensors: %zu wrong: %s",
					sc_tensor_name(t[k]), wrong, why);
		}
	}
	it_log("%d tensors, min and sum in flight together, 3 steps: exact", N);
}

/* The integer average divides the sum truncating toward zero. */
static void ops_int_average(sc_client_t *c)
{
	int P = sc_size(c), rank = sc_rank(c);
	sc_tensor_t *t = it_register(c, "ops.avg.int64", SC_INT64, 3);
	int64_t *x = sc_tensor_data(t);
	x[0] = rank == 0 ? 1 : 0;		   /* sum 1 */
	x[1] = rank == 0 ? -1 : 0;		   /* sum -1: floor division would give -1 */
	x[2] = rank == 0 ? 2 * (int64_t)P - 1 : 0; /* sum 2P - 1 */
	ops_run(c, t, SC_OP_AVERAGE);
	int64_t want[3] = {1 / P, -1 / P, (2 * (int64_t)P - 1) / P};
	if (P >= 2 && (want[0] != 0 || want[1] != 0 || want[2] != 1))
		IT_FAIL("internal: C division does not truncate toward zero");
	for (int i = 0; i < 3; i++)
		if (x[i] != want[i])
			IT_FAIL("int64 average over %d trainers: element %d is %lld, expected "
				"%lld (truncated toward zero)",
				P, i, (long long)x[i], (long long)want[i]);
	it_log("int64 average over %d trainers truncates toward zero: [1, -1, %d] -> [%lld, "
	       "%lld, %lld]",
	       P, 2 * P - 1, (long long)x[0], (long long)x[1], (long long)x[2]);
}

/* An operation expected to fail with want: at submission or through its completion.
 * Returns the error text. */
static const char *ops_expect(sc_client_t *c, sc_tensor_t *t, sc_reduce_op_t op,
			      sc_status_t want)
{
	static char msg[2048];
	sc_handle_t h = 0;
	sc_status_t st = sc_allreduce_async(c, t, op, &h);
	int r = st;
	if (st == SC_OK) {
		r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		snprintf(msg, sizeof(msg), "%s", it_wait_error());
	} else {
		snprintf(msg, sizeof(msg), "%s", sc_last_error());
	}
	if (r != (int)want)
		IT_FAIL("%s of '%s': expected %s, got %s ('%s')", sc_reduce_op_name(op),
			sc_tensor_name(t), sc_status_name(want), it_wait_name(r), msg);
	if (!strstr(msg, sc_tensor_name(t)))
		IT_FAIL("%s of '%s' failed with %s without naming the tensor: '%s'",
			sc_reduce_op_name(op), sc_tensor_name(t), sc_status_name(want), msg);
	return msg;
}

static void ops_refused(sc_client_t *c)
{
	sc_tensor_t *t = it_register_topk(c, "ops.topk", 1000);
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 3, sc_rank(c), 1);
	const char *msg = ops_expect(c, t, SC_OP_MAX, SC_ERR_UNSUPPORTED);
	if (!strstr(msg, "max"))
		IT_FAIL("the refusal of max on a sparsified tensor does not name the op: '%s'",
			msg);
	it_log("max of a top-k tensor refused: %s", msg);
	/* the tensor still takes a sum */
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 3, sc_rank(c), 1);
	ops_run(c, t, SC_OP_SUM);
}

static void ops_mismatch(sc_client_t *c)
{
	int rank = sc_rank(c), P = sc_size(c);
	if (P < 2 || sc_local_size(c) != 1) {
		it_log("min/max mismatch not tested: it needs 2 or more nodes of one trainer");
		return;
	}
	sc_tensor_t *t = it_register(c, "ops.mismatch", SC_INT32, 10);
	ops_fill(sc_tensor_data(t), SC_INT32, 10, rank);
	const char *msg = ops_expect(c, t, rank == 1 ? SC_OP_MAX : SC_OP_MIN, SC_ERR_MISMATCH);
	if (!it_mentions_rank(msg, 1) || !it_mentions_rank(msg, 0) || !strstr(msg, "max") ||
	    !strstr(msg, "min"))
		IT_FAIL("the reduction mismatch does not name ranks 0 and 1, min and max: '%s'",
			msg);
	it_log("reduction mismatch: %s", msg);
	/* the tensor works again once the ranks agree */
	ops_fill(sc_tensor_data(t), SC_INT32, 10, rank);
	ops_run(c, t, SC_OP_MAX);
	ops_check(t, SC_OP_MAX, P, " after a mismatch");
}

int it_ops(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	ops_exact(c);
	ops_fused(c);
	ops_int_average(c);
	ops_refused(c);
	ops_mismatch(c);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* One barrier in which rank late enters delay_s after the others: every other rank's
 * barrier must take about that long, and none may return before late has entered (half
 * of delay_s at least: the ranks leave the aligning allreduce at slightly different
 * times on a busy host; a barrier that does not wait returns in milliseconds). */
static void barrier_round(sc_client_t *c, int late, double delay_s, int round)
{
	int rank = sc_rank(c);
	it_barrier(c, "barrier.align", 0); /* start together (an allreduce) */
	double t0 = it_now_s();
	if (rank == late)
		it_sleep_ms((int)(delay_s * 1000));
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier %d (rank %d late)", round, late);
	double dt = it_now_s() - t0;
	if (rank != late && dt < delay_s * 0.5)
		IT_FAIL("barrier %d returned after %.3f s although rank %d entered it only "
			"after %.3f s",
			round, dt, late, delay_s);
	it_log("barrier %d, rank %d late by %.1f s: returned after %.3f s", round, late,
	       delay_s, dt);
}

int it_barrier_case(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c);
	for (int round = 0; round < 3; round++)
		barrier_round(c, (round * 2 + 1) % P, 2.0, round);
	/* many in a row, with an allreduce in flight meanwhile */
	sc_tensor_t *t = it_register(c, "barrier.sum", SC_FLOAT32, 1000);
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 5, rank, 1);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "sc_allreduce_async");
	double t0 = it_now_s();
	for (int k = 0; k < 50; k++)
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier %d of 50", k);
	it_log("50 barriers in %.3f s", it_now_s() - t0);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	char why[512];
	if (r != SC_OK ||
	    it_check(sc_tensor_data(t), SC_FLOAT32, 1000, 5, P, 1, SC_OP_SUM, why, sizeof(why)))
		IT_FAIL("allreduce beside the barriers: %s %s", it_wait_name(r), why);
	/* a second barrier while one is in flight */
	sc_handle_t b1 = 0, b2 = 0;
	IT_CHECK_SC(sc_barrier_async(c, &b1), "sc_barrier_async");
	sc_status_t st = sc_barrier_async(c, &b2);
	if (st == SC_OK)
		st = (sc_status_t)it_wait(c, b2, IT_ERROR_TIMEOUT_MS);
	if (st != SC_ERR_BUSY)
		IT_FAIL("a second barrier in flight: expected SC_ERR_BUSY, got %s",
			sc_status_name(st));
	IT_CHECK_SC((sc_status_t)it_wait(c, b1, IT_OP_TIMEOUT_MS), "the first barrier");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Rank 1 skips a barrier: every other rank's ends with SC_ERR_STALLED naming rank 1
 * (stall_timeout_ms short); then every rank, rank 1 included, passes the next one. */
int it_barrier_stalled(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int rank = sc_rank(c);
	if (sc_size(c) < 2)
		IT_FAIL("needs at least 2 trainers, the job has %d", sc_size(c));
	if (rank != 1) {
		double t0 = it_now_s();
		sc_status_t st = sc_barrier(c, IT_ERROR_TIMEOUT_MS);
		if (st != SC_ERR_STALLED)
			IT_FAIL(
			    "a barrier rank 1 never enters: expected SC_ERR_STALLED, got %s: "
			    "%s",
			    sc_status_name(st), sc_last_error());
		if (!it_mentions_rank(sc_last_error(), 1))
			IT_FAIL("the barrier's stall does not name rank 1: '%s'",
				sc_last_error());
		it_log("barrier without rank 1: %s after %.2f s: %s", sc_status_name(st),
		       it_now_s() - t0, sc_last_error());
	} else {
		it_sleep_ms(4000); /* past the others' stall */
	}
	/* the ranks arrive at different times: a barrier that stalls meanwhile is entered
	 * again, within a deadline */
	double deadline = it_now_s() + IT_ERROR_TIMEOUT_MS / 1000.0;
	sc_status_t st;
	do
		st = sc_barrier(c, IT_ERROR_TIMEOUT_MS);
	while (st == SC_ERR_STALLED && it_now_s() < deadline);
	IT_CHECK_SC(st, "the barrier after the stall");
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Rank r's broadcast input: distinct on every rank, of every dtype. */
static void bcast_fill(void *x, sc_dtype_t dt, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++) {
		long long v = (long long)((i * 31 + 7) % 1009) * 1000 + rank;
		switch (dt) {
		case SC_FLOAT32:
			((float *)x)[i] = (float)v * 0.25f;
			break;
		case SC_FLOAT64:
			((double *)x)[i] = (double)v * 0.125;
			break;
		case SC_INT32:
			((int32_t *)x)[i] = (int32_t)-v;
			break;
		case SC_INT64:
			((int64_t *)x)[i] = v << 30;
			break;
		}
	}
}

static void bcast_one(sc_client_t *c, sc_tensor_t *t, int root, const char *when)
{
	size_t n = sc_tensor_numel(t), es = sc_dtype_size(sc_tensor_dtype(t));
	bcast_fill(sc_tensor_data(t), sc_tensor_dtype(t), n, sc_rank(c));
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_broadcast_async(c, t, root, &h), "sc_broadcast_async('%s', root %d)",
		    sc_tensor_name(t), root);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("broadcast of '%s' from rank %d%s: %s: %s", sc_tensor_name(t), root,
			when, it_wait_name(r), it_wait_error());
	unsigned char *want = malloc(n * es);
	if (!want)
		IT_FAIL("out of memory");
	bcast_fill(want, sc_tensor_dtype(t), n, root);
	if (memcmp(want, sc_tensor_data(t), n * es)) {
		size_t i = 0;
		while (!memcmp(want + i * es, (char *)sc_tensor_data(t) + i * es, es))
			i++;
		IT_FAIL("broadcast of '%s' (%s x %zu) from rank %d%s: element %zu differs from "
			"the root's",
			sc_tensor_name(t), sc_dtype_name(sc_tensor_dtype(t)), n, root, when, i);
	}
	free(want);
}

/* Arguments refused on rank 1 alone (a broadcast's root past the last rank, an allgather's
 * count over the tensor, rows that do not divide it; each rank's operation started by
 * start): the step fails on every rank with SC_ERR_INVALID naming rank 1 and the tensor,
 * well before the stall timeout (the others do not wait for rank 1's step), and the
 * tensor's next broadcast is exact on every rank (rank 1 is not a step behind). */
static void bad_on_one(sc_client_t *c, sc_tensor_t *t, const char *what,
		       sc_status_t (*start)(sc_client_t *, sc_tensor_t *, int, sc_handle_t *))
{
	sc_handle_t h = 0;
	double t0 = it_now_s();
	int r = start(c, t, sc_rank(c) == 1, &h);
	const char *e = r == SC_OK ? "" : sc_last_error();
	if (r == SC_OK) {
		r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		e = it_wait_error();
	}
	if (r != SC_ERR_INVALID || !it_mentions_rank(e, 1) || !strstr(e, sc_tensor_name(t)) ||
	    it_now_s() - t0 > 10.0)
		IT_FAIL("%s on rank 1 alone: expected SC_ERR_INVALID naming rank 1 and '%s' "
			"within 10 s, got %s after %.1f s: '%s'",
			what, sc_tensor_name(t), it_wait_name(r), it_now_s() - t0, e);
	it_log("%s on rank 1 alone: %s", what, e);
	bcast_one(c, t, 0, " after a refusal on rank 1");
}

static sc_status_t bad_root(sc_client_t *c, sc_tensor_t *t, int bad, sc_handle_t *h)
{
	return sc_broadcast_async(c, t, bad ? sc_size(c) : 0, h);
}

static sc_status_t bad_count(sc_client_t *c, sc_tensor_t *t, int bad, sc_handle_t *h)
{
	return sc_allgather_async(c, t, bad ? sc_tensor_numel(t) + 1 : 1, h);
}

static sc_status_t bad_rows(sc_client_t *c, sc_tensor_t *t, int bad, sc_handle_t *h)
{
	return sc_reducescatter_async(c, t, SC_OP_SUM, bad ? 7 : 2, h);
}

/* The node's bytes sent and received for t so far (sc_tensor_stats). */
static void bcast_bytes(sc_client_t *c, sc_tensor_t *t, double *sent, double *recv)
{
	sc_tensor_stats_t s;
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	IT_CHECK_SC(sc_tensor_stats(c, t, &s), "sc_tensor_stats('%s')", sc_tensor_name(t));
	*sent = (double)s.bytes_sent, *recv = (double)s.bytes_received;
}

int it_broadcast(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c), L = sc_local_size(c), nodes = P / L;
	static const sc_dtype_t dts[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	static const size_t sizes[] = {1, 1000, 1000003};
	int roots[3] = {0, P - 1, P / 2};
	for (size_t d = 0; d < 4; d++)
		for (size_t s = 0; s < 3; s++) {
			char name[64];
			snprintf(name, sizeof(name), "bcast.%s.%zu", sc_dtype_name(dts[d]),
				 sizes[s]);
			sc_tensor_t *t = it_register(c, name, dts[d], sizes[s]);
			for (int k = 0; k < 3; k++)
				bcast_one(c, t, roots[k], "");
		}
	it_log("broadcasts of 4 dtypes x 1, 1000, 1000003 from ranks %d, %d, %d: exact",
	       roots[0], roots[1], roots[2]);

	/* many small broadcasts in flight together (fused by root), beside a sum */
	enum { N = 12 };
	sc_tensor_t *f[N];
	sc_handle_t h[N];
	for (int k = 0; k < N; k++) {
		char name[64];
		snprintf(name, sizeof(name), "bcast.fused.%02d", k);
		f[k] = it_register(c, name, SC_FLOAT32, 3 + (size_t)k * 17);
		bcast_fill(sc_tensor_data(f[k]), SC_FLOAT32, sc_tensor_numel(f[k]), rank);
		if (k % 3 == 2)
			IT_CHECK_SC(sc_allreduce_async(c, f[k], SC_OP_SUM, &h[k]), "sum");
		else
			IT_CHECK_SC(sc_broadcast_async(c, f[k], (k % 3) * (P - 1), &h[k]),
				    "broadcast");
	}
	for (int k = 0; k < N; k++) {
		int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("'%s': %s: %s", sc_tensor_name(f[k]), it_wait_name(r),
				it_wait_error());
		size_t n = sc_tensor_numel(f[k]);
		const float *x = sc_tensor_data(f[k]);
		for (size_t i = 0; i < n; i++) {
			float want = 0;
			if (k % 3 == 2)
				for (int q = 0; q < P; q++)
					want +=
					    (float)((long long)((i * 31 + 7) % 1009) * 1000 +
						    q) *
					    0.25f;
			else
				want = (float)((long long)((i * 31 + 7) % 1009) * 1000 +
					       (k % 3) * (P - 1)) *
				       0.25f;
			if (x[i] != want)
				IT_FAIL(
				    "'%s' in flight with other roots and a sum: [%zu] = %g, "
				    "expected %g",
				    sc_tensor_name(f[k]), i, x[i], want);
		}
	}
	it_log("%d small broadcasts from two roots and sums in flight together: exact", N);

	/* the bytes: the root's node sends the buffer once to every other node, at most half
	 * of what a sum allreduce of it (the ring's 2(P - 1) / P of it from every node, and
	 * the scheme's framing) sends over all nodes */
	sc_tensor_t *b = it_register(c, "bcast.bytes", SC_FLOAT32, 1 << 20);
	double nbytes = (double)(4u << 20), s0, r0, s1, r1, s2, r2;
	bcast_bytes(c, b, &s0, &r0);
	bcast_one(c, b, P - 1, ", measured");
	bcast_bytes(c, b, &s1, &r1);
	IT_CHECK_SC(sc_allreduce(c, b, SC_OP_SUM, IT_OP_TIMEOUT_MS), "sum of 'bcast.bytes'");
	bcast_bytes(c, b, &s2, &r2);
	int root_node = (P - 1) / L, node = rank / L;
	double want_sent = node == root_node ? (nodes - 1) * nbytes : 0;
	double want_recv = node == root_node ? 0 : nbytes;
	if (s1 - s0 != want_sent || r1 - r0 != want_recv)
		IT_FAIL("broadcast of %.0f bytes from rank %d: node %d sent %.0f and received "
			"%.0f bytes, expected %.0f and %.0f",
			nbytes, P - 1, node, s1 - s0, r1 - r0, want_sent, want_recv);
	/* over every node (one trainer per node counts its node's bytes) */
	int first = rank % L == 0;
	double bc_all = it_barrier(c, "bcast.bytes.bc", first ? s1 - s0 : 0);
	double ar_all = it_barrier(c, "bcast.bytes.ar", first ? s2 - s1 : 0);
	if (bc_all != (nodes - 1) * nbytes || ar_all < 2 * bc_all)
		IT_FAIL("a broadcast sent %.0f bytes over all nodes, a sum allreduce %.0f: "
			"expected %.0f, at most half",
			bc_all, ar_all, (nodes - 1) * nbytes);
	it_log("4 MiB broadcast: %.0f bytes sent over %d nodes, a sum allreduce %.0f", bc_all,
	       nodes, ar_all);

	/* errors: a root outside the job, a sparsified tensor, roots that differ */
	sc_handle_t bad = 0;
	sc_status_t st = sc_broadcast_async(c, b, P, &bad);
	int r = st == SC_OK ? it_wait(c, bad, IT_ERROR_TIMEOUT_MS) : (int)st;
	const char *e = st == SC_OK ? it_wait_error() : sc_last_error();
	if (r != SC_ERR_INVALID || !it_mentions_number(e, P) || !strstr(e, sc_tensor_name(b)))
		IT_FAIL("broadcast from root %d of %d trainers: expected SC_ERR_INVALID naming "
			"it and the tensor, got %s: '%s'",
			P, P, it_wait_name(r), e);
	sc_tensor_t *tk = it_register_topk(c, "bcast.topk", 100);
	st = sc_broadcast_async(c, tk, 0, &bad);
	r = st == SC_OK ? it_wait(c, bad, IT_ERROR_TIMEOUT_MS) : (int)st;
	if (r != SC_ERR_UNSUPPORTED)
		IT_FAIL("broadcast of a top-k tensor: expected SC_ERR_UNSUPPORTED, got %s",
			it_wait_name(r));
	if (P >= 2 && L == 1) {
		sc_tensor_t *m = it_register(c, "bcast.mismatch", SC_INT64, 10);
		st = sc_broadcast_async(c, m, rank == 1 ? 1 : 0, &bad);
		r = st == SC_OK ? it_wait(c, bad, IT_ERROR_TIMEOUT_MS) : (int)st;
		const char *msg = st == SC_OK ? it_wait_error() : sc_last_error();
		if (r != SC_ERR_MISMATCH || !strstr(msg, "bcast.mismatch") ||
		    !strstr(msg, "broadcast from rank 1") ||
		    !strstr(msg, "broadcast from rank 0"))
			IT_FAIL(
			    "roots that differ: expected SC_ERR_MISMATCH naming the tensor and "
			    "both roots, got %s: '%s'",
			    it_wait_name(r), msg);
		it_log("roots that differ: %s", msg);
		bcast_one(c, m, 1, " after a mismatch");
	}
	if (P >= 2) {
		sc_tensor_t *m = it_register(c, "bcast.refused", SC_INT64, 10);
		bad_on_one(c, m, "a root past the last rank", bad_root);
		bad_on_one(c, m, "an allgather's count over the tensor", bad_count);
		bad_on_one(c, m, "rows that do not divide the tensor", bad_rows);
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Rank r's count at step s of an allgather (zero for some) and its element i. */
static size_t ag_count(int r, int step)
{
	return (size_t)((r * 7 + step * 3) % 5) * 1000 + (size_t)(r == 1 ? 0 : r + step);
}

static double ag_value(int r, size_t i)
{
	return (double)r * 1000000.0 + (double)i;
}

static void ag_store(void *x, sc_dtype_t dt, size_t i, double v)
{
	switch (dt) {
	case SC_FLOAT32:
		((float *)x)[i] = (float)v;
		break;
	case SC_FLOAT64:
		((double *)x)[i] = v;
		break;
	case SC_INT32:
		((int32_t *)x)[i] = (int32_t)v;
		break;
	case SC_INT64:
		((int64_t *)x)[i] = (int64_t)v;
		break;
	}
}

int it_allgather(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c);
	static const sc_dtype_t dts[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	size_t cap = 0;
	for (int r = 0; r < P; r++)
		cap += 5000 + (size_t)r + 3;
	for (size_t d = 0; d < 4; d++) {
		char name[64];
		snprintf(name, sizeof(name), "allgather.%s", sc_dtype_name(dts[d]));
		sc_tensor_t *t = it_register(c, name, dts[d], cap);
		unsigned char *want = malloc(cap * 8);
		if (!want)
			IT_FAIL("out of memory");
		for (int step = 0; step < 3; step++) {
			size_t n = ag_count(rank, step), total = 0;
			for (size_t i = 0; i < n; i++)
				ag_store(sc_tensor_data(t), dts[d], i, ag_value(rank, i));
			for (int r = 0; r < P; r++)
				for (size_t i = 0; i < ag_count(r, step); i++)
					ag_store(want, dts[d], total++, ag_value(r, i));
			sc_handle_t h = 0;
			IT_CHECK_SC(sc_allgather_async(c, t, n, &h),
				    "sc_allgather_async('%s', %zu)", name, n);
			int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("allgather of '%s', step %d: %s: %s", name, step,
					it_wait_name(r), it_wait_error());
			if (sc_tensor_result_nnz(t) != total)
				IT_FAIL("allgather of '%s', step %d: %zu elements gathered, "
					"expected "
					"%zu",
					name, step, sc_tensor_result_nnz(t), total);
			size_t es = sc_dtype_size(dts[d]);
			if (memcmp(sc_tensor_data(t), want, total * es)) {
				size_t i = 0;
				while (!memcmp((char *)sc_tensor_data(t) + i * es,
					       want + i * es, es))
					i++;
				IT_FAIL(
				    "allgather of '%s', step %d: element %zu of %zu differs",
				    name, step, i, total);
			}
		}
		free(want);
	}
	it_log("allgathers of 4 dtypes, counts varying by rank and step (rank 1 gives none at "
	       "first): exact");

	/* more in all than the tensor holds: SC_ERR_LIMIT naming the counts, on every rank */
	sc_tensor_t *s = it_register(c, "allgather.small", SC_INT32, 10);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allgather_async(c, s, 6, &h), "sc_allgather_async(6 of 10)");
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	if (P > 1 && (r != SC_ERR_LIMIT || !strstr(it_wait_error(), "allgather.small") ||
		      !it_mentions_number(it_wait_error(), 6 * sc_local_size(c))))
		IT_FAIL(
		    "allgathers of 6 elements each into 10: expected SC_ERR_LIMIT naming the "
		    "tensor and the counts, got %s: '%s'",
		    it_wait_name(r), it_wait_error());
	it_log("over the size: %s", it_wait_error());
	r = sc_allgather_async(c, s, 11, &h);
	r = r == SC_OK ? it_wait(c, h, IT_ERROR_TIMEOUT_MS) : r;
	if (r != SC_ERR_INVALID || !strstr(it_wait_error(), "allgather.small") ||
	    !it_mentions_number(it_wait_error(), 11))
		IT_FAIL(
		    "an allgather of 11 elements of a tensor of 10: expected SC_ERR_INVALID "
		    "naming the tensor and the count, got %s: '%s'",
		    it_wait_name(r), it_wait_error());
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Uneven inputs: rank r runs 2 (r + 1) steps of a sum, then joins. At step s the sum is over
 * the ranks still running (the joined ones add zeros), nothing waits for a stall, and every
 * join returns the last rank to join, the one with the most steps. */
/* Step s of join's max, min and product: rank r gives -(r + 1) - i, r + 1 + i and -(r +
 * 2); the results are those of the ranks still running (rank r runs 2 (r + 1) steps):
 * a joined rank takes no part in them, whether its node goes on or has joined whole
 * (whose zeros made the maximum 0, the minimum 0 and the product 0). */
static void join_others(sc_client_t *c, sc_tensor_t *mx, sc_tensor_t *mn, sc_tensor_t *pr,
			int s)
{
	enum { N = 1000 };
	int P = sc_size(c), rank = sc_rank(c), first = -1;
	float *a = sc_tensor_data(mx);
	int32_t *b = sc_tensor_data(mn);
	int64_t *d = sc_tensor_data(pr);
	for (size_t i = 0; i < N; i++) {
		a[i] = -(float)(rank + 1) - (float)i;
		b[i] = rank + 1 + (int32_t)i;
		d[i] = -(int64_t)(rank + 2);
	}
	IT_CHECK_SC(sc_allreduce(c, mx, SC_OP_MAX, IT_OP_TIMEOUT_MS), "step %d: max", s);
	IT_CHECK_SC(sc_allreduce(c, mn, SC_OP_MIN, IT_OP_TIMEOUT_MS), "step %d: min", s);
	IT_CHECK_SC(sc_allreduce(c, pr, SC_OP_PRODUCT, IT_OP_TIMEOUT_MS), "step %d: product",
		    s);
	int64_t prod = 1;
	for (int r = P - 1; r >= 0; r--)
		if (2 * (r + 1) > s)
			first = r, prod *= -(int64_t)(r + 2);
	for (size_t i = 0; i < N; i++)
		if (a[i] != -(float)(first + 1) - (float)i || b[i] != first + 1 + (int32_t)i ||
		    d[i] != prod)
			IT_FAIL(
			    "step %d: [%zu]: max %g, min %d, product %lld; expected %g, %d, "
			    "%lld (the first rank still running: %d)",
			    s, i, (double)a[i], (int)b[i], (long long)d[i],
			    (double)(-(float)(first + 1) - (float)i), first + 1 + (int)i,
			    (long long)prod, first);
}

int it_join(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c), steps = 2 * (rank + 1);
	enum { N = 1000 };
	sc_tensor_t *t = it_register(c, "join.x", SC_FLOAT32, N);
	sc_tensor_t *mx = it_register(c, "join.max", SC_FLOAT32, N);
	sc_tensor_t *mn = it_register(c, "join.min", SC_INT32, N);
	sc_tensor_t *pr = it_register(c, "join.prod", SC_INT64, N);
	double t0 = it_now_s();
	for (int s = 0; s < steps; s++) {
		join_others(c, mx, mn, pr, s);
		float *x = sc_tensor_data(t);
		for (size_t i = 0; i < N; i++)
			x[i] = (float)(rank + 1) + (float)i;
		IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "step %d", s);
		float want = 0;
		int active = 0;
		for (int r = 0; r < P; r++)
			if (2 * (r + 1) > s)
				want += (float)(r + 1), active++;
		for (size_t i = 0; i < N; i++)
			if (x[i] != want + (float)active * (float)i)
				IT_FAIL(
				    "step %d: [%zu] = %g, expected %g (%d ranks still running)",
				    s, i, x[i], want + (float)active * (float)i, active);
	}
	int last = -1;
	IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last), "sc_join after %d steps", steps);
	double dt = it_now_s() - t0;
	if (last != P - 1)
		IT_FAIL("join returned %d as the last rank to join, expected %d", last, P - 1);
	if (dt > 20)
		IT_FAIL("%d steps and a join took %.1f s: something waited for a timeout",
			steps, dt);
	/* a joined rank's allreduce is refused while the others have not joined: here all
	 * have, so the job works as before */
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS),
		    "allreduce after the join");
	it_log("%d steps, joined; the last to join: rank %d (%.2f s)", steps, last, dt);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* A broadcast of t from root with rank 0 joined (not on rank 0): exact (root's values)
 * or, with want_fail, SC_ERR_INVALID naming the tensor and root 0. */
static void joined_bcast(sc_client_t *c, sc_tensor_t *t, int root, int want_fail,
			 const char *what)
{
	float *x = sc_tensor_data(t);
	for (size_t i = 0; i < sc_tensor_numel(t); i++)
		x[i] = (float)(sc_rank(c) + 1) * 10 + (float)i;
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_broadcast_async(c, t, root, &h), "%s", what);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (want_fail) {
		if (r != SC_ERR_INVALID || !strstr(it_wait_error(), sc_tensor_name(t)) ||
		    !it_mentions_rank(it_wait_error(), 0) || !strstr(it_wait_error(), "joined"))
			IT_FAIL("%s: expected SC_ERR_INVALID naming '%s' and its root, rank 0, "
				"which has joined; got %s: %s",
				what, sc_tensor_name(t), it_wait_name(r), it_wait_error());
		it_log("%s: %s", what, it_wait_error());
		return;
	}
	IT_CHECK_SC(r, "%s", what);
	for (size_t i = 0; i < sc_tensor_numel(t); i++)
		if (x[i] != (float)(root + 1) * 10 + (float)i)
			IT_FAIL("%s: [%zu] = %g, root %d's is %g", what, i, (double)x[i], root,
				(double)((float)(root + 1) * 10 + (float)i));
}

/* join-root: rank 0 joins first; the others' broadcast from rank 1 is exact, and their
 * broadcasts from rank 0 (the whole job's, and one in the process set {0, 1}) fail on
 * every rank naming the tensor and rank 0, which gave no values (they were zeros with
 * SC_OK). Then every rank joins, and a broadcast from rank 0 is exact again. */
int it_join_root(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), set = 0, pair[2] = {0, 1};
	if (sc_size(c) < 3)
		IT_FAIL("join-root needs 3 trainers or more, the job has %d", sc_size(c));
	IT_CHECK_SC(sc_process_set_add(c, pair, 2, IT_OP_TIMEOUT_MS, &set), "the set {0, 1}");
	sc_tensor_t *t = it_register(c, "jroot.b", SC_FLOAT32, 300), *ts = NULL;
	if (rank < 2) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o), .process_set = set};
		IT_CHECK_SC(sc_register_ex(c, "jroot.b", SC_FLOAT32, 300, &o, &ts),
			    "register 'jroot.b' in set %d", set);
	}
	int last = -1;
	if (rank != 0) {
		joined_bcast(c, t, 1, 0, "a broadcast from rank 1, rank 0 joined");
		joined_bcast(c, t, 0, 1, "a broadcast from rank 0, which has joined");
		if (ts)
			joined_bcast(c, ts, 0, 1, "a broadcast in {0, 1} from rank 0, joined");
		joined_bcast(c, t, 2, 0, "a broadcast from rank 2 after those");
	}
	IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last), "sc_join");
	float *x = sc_tensor_data(t);
	for (size_t i = 0; i < sc_tensor_numel(t); i++)
		x[i] = (float)(rank + 1) * 10 + (float)i;
	IT_CHECK_SC(sc_broadcast(c, t, 0, IT_OP_TIMEOUT_MS),
		    "a broadcast from 0 after the joins");
	for (size_t i = 0; i < sc_tensor_numel(t); i++)
		if (x[i] != 10 + (float)i)
			IT_FAIL("a broadcast from 0 after the joins: [%zu] = %g", i,
				(double)x[i]);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* A step of t with nnz COO entries, over its capacity: refused with SC_ERR_LIMIT. */
static void over_capacity(sc_client_t *c, sc_tensor_t *t, size_t nnz)
{
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_coo_async(c, t, nnz, SC_OP_SUM, &h),
		    "a step over the capacity");
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	if (r != SC_ERR_LIMIT)
		IT_FAIL("a step over the COO capacity: expected SC_ERR_LIMIT, got %s: %s",
			it_wait_name(r), it_wait_error());
	it_log("over the capacity: %s", it_wait_error());
}

/* join-carry (two trainers a node): local rank 1 joins while local rank 0 gives a step of
 * a COO tensor over its capacity, which fails; then local rank 0 joins too. After every
 * rank has joined, the tensor's next step is exact on every trainer: the failed step is
 * not owed by a trainer that had joined (it takes part with zeros, it submits nothing).
 * "after": local rank 1 joins only once the step has failed, owing it: a join is its
 * last submission until every rank has joined, so it owes the step no more.
 * "flush" (two nodes of one trainer, the daemons' cycle_time_ms 300, so that a node's
 * failed step reaches the coordinator with its next ReadyList, 300 ms on): rank 1 gives
 * the step over the capacity and joins 600 ms later; rank 0, 100 ms after rank 1, gives it
 * and joins at once. Every node failed the step itself, so none owes it to the others,
 * whatever the order in which the coordinator learns of the failures and the joins. */
int it_join_carry(int argc, char **argv)
{
	int after = argc > 1 && !strcmp(argv[1], "after");
	int flush = argc > 1 && !strcmp(argv[1], "flush");
	sc_client_t *c = it_connect();
	if (flush ? sc_local_size(c) != 1 || sc_size(c) != 2 : sc_local_size(c) != 2)
		IT_FAIL("needs %s, the job has %d of %d",
			flush ? "two nodes of one trainer" : "two trainers a node", sc_size(c),
			sc_local_size(c));
	enum { N = 1000, CAP = 8 };
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .coo_capacity = CAP};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, "join.carry", SC_FLOAT32, N, &o, &t), "register");
	uint32_t *idx = sc_tensor_coo_indices(t);
	float *val = sc_tensor_coo_values(t);
	int last = -1;
	if (flush) {
		if (sc_rank(c) == 0)
			it_sleep_ms(100);
		over_capacity(c, t, CAP + 1);
		if (sc_rank(c) == 1)
			it_sleep_ms(600);
		IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last), "sc_join");
	} else if (sc_local_rank(c) == 1) {
		if (after) /* local rank 0's step fails first */
			it_sleep_ms(1500);
		IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last), "sc_join of local rank 1");
	} else {
		if (!after)
			it_sleep_ms(300); /* local rank 1's join reaches the daemon first */
		over_capacity(c, t, CAP + 1);
		IT_CHECK_SC(sc_join(c, IT_OP_TIMEOUT_MS, &last), "sc_join of local rank 0");
	}
	for (int k = 0; k < CAP; k++)
		idx[k] = (uint32_t)(sc_rank(c) * 7 + 97 * k), val[k] = 1.0f;
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_coo_async(c, t, CAP, SC_OP_SUM, &h), "the step after");
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("the step after every rank joined: %s: %s", it_wait_name(r),
			it_wait_error());
	static float want[N];
	memset(want, 0, sizeof(want));
	for (int q = 0; q < sc_size(c); q++)
		for (int k = 0; k < CAP; k++)
			want[q * 7 + 97 * k] += 1.0f;
	const float *d = sc_tensor_data(t);
	for (int i = 0; i < N; i++)
		if (d[i] != want[i])
			IT_FAIL("the step after every rank joined: [%d] = %g, expected %g", i,
				(double)d[i], (double)want[i]);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/* Rank 1 dies without joining: every other rank's join ends with SC_ERR_ABORTED naming
 * it, whether it joined before or after the death. */
int it_join_killed(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int rank = sc_rank(c);
	if (sc_size(c) < 3 || sc_local_size(c) != 1)
		IT_FAIL("needs 3 or more nodes of one trainer");
	if (rank == 1) {
		it_sleep_ms(500);
		kill(getpid(), SIGKILL);
	}
	if (rank > 1)
		it_sleep_ms(1500);
	double t0 = it_now_s();
	int last = -1;
	sc_status_t st = sc_join(c, IT_ERROR_TIMEOUT_MS, &last);
	if (st != SC_ERR_ABORTED || !it_mentions_rank(sc_last_error(), 1))
		IT_FAIL("join with rank 1 dead: expected SC_ERR_ABORTED naming rank 1, got %s: "
			"'%s'",
			sc_status_name(st), sc_last_error());
	it_log("join with rank 1 dead: %s after %.2f s: %s", sc_status_name(st),
	       it_now_s() - t0, sc_last_error());
	sc_finalize(c);
	it_pass();
}

/* Reduce-scatters: rows split unevenly (a row count no trainer count divides), every
 * trainer's slice exact for sum, max and average; rows of another length on rank 1 are a
 * mismatch on every rank. */
int it_reducescatter(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c);
	const size_t row = 3, rows = (size_t)P * 5 + 2, n = rows * row;
	sc_tensor_t *t = it_register(c, "rs.x", SC_INT64, n);
	static const sc_reduce_op_t ops[] = {SC_OP_SUM, SC_OP_MAX, SC_OP_AVERAGE};
	double s0 = 0, r0 = 0, s1 = 0, r1 = 0;
	for (int k = 0; k < 3; k++) {
		if (k == 1) /* around the max */
			bcast_bytes(c, t, &s0, &r0);
		if (k == 2)
			bcast_bytes(c, t, &s1, &r1);
		int64_t *x = sc_tensor_data(t);
		for (size_t i = 0; i < n; i++) /* averages exact: sums are multiples of P */
			x[i] = ((int64_t)(i * 7 % 13) - 6) * P + rank * (rank - 1) * (int64_t)i;
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_reducescatter_async(c, t, ops[k], row, &h),
			    "sc_reducescatter_async(%s)", sc_reduce_op_name(ops[k]));
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("reducescatter (%s): %s: %s", sc_reduce_op_name(ops[k]),
				it_wait_name(r), it_wait_error());
		size_t first =
		    (size_t)rank * (rows / (size_t)P) +
		    ((size_t)rank < rows % (size_t)P ? (size_t)rank : rows % (size_t)P);
		size_t mine = rows / (size_t)P + ((size_t)rank < rows % (size_t)P);
		if (sc_tensor_result_nnz(t) != mine * row)
			IT_FAIL(
			    "reducescatter (%s): %zu elements, expected rows %zu to %zu (%zu)",
			    sc_reduce_op_name(ops[k]), sc_tensor_result_nnz(t), first,
			    first + mine, mine * row);
		for (size_t j = 0; j < mine * row; j++) {
			size_t i = first * row + j;
			int64_t sum = 0, max = INT64_MIN;
			for (int q = 0; q < P; q++) {
				int64_t v =
				    ((int64_t)(i * 7 % 13) - 6) * P + q * (q - 1) * (int64_t)i;
				sum += v, max = v > max ? v : max;
			}
			int64_t want = ops[k] == SC_OP_SUM   ? sum
				       : ops[k] == SC_OP_MAX ? max
							     : sum / P;
			if (x[j] != want)
				IT_FAIL("reducescatter (%s): element %zu of this rank's slice "
					"(%zu of "
					"the tensor) is %lld, expected %lld",
					sc_reduce_op_name(ops[k]), j, i, (long long)x[j],
					(long long)want);
		}
	}
	/* the max's bytes: this node sent the other nodes' parts of its reduction, once */
	int L = sc_local_size(c), node = rank / L;
	size_t nf = (size_t)node * L * (rows / (size_t)P) +
		    ((size_t)node * L < rows % (size_t)P ? (size_t)node * L : rows % (size_t)P);
	size_t nl = (size_t)(node + 1) * L * (rows / (size_t)P) +
		    ((size_t)(node + 1) * L < rows % (size_t)P ? (size_t)(node + 1) * L
							       : rows % (size_t)P);
	double want_sent = (double)(rows - (nl - nf)) * row * 8;
	if (s1 - s0 != want_sent)
		IT_FAIL(
		    "reducescatter of %zu bytes: node %d sent %.0f bytes, expected %.0f (the "
		    "other nodes' parts)",
		    n * 8, node, s1 - s0, want_sent);
	it_log("reducescatter of %zu rows of %zu over %d trainers: sum, max, average exact; "
	       "%.0f of %zu bytes sent by node %d",
	       rows, row, P, s1 - s0, n * 8, node);
	if (P >= 2 && sc_local_size(c) == 1) {
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_reducescatter_async(c, t, SC_OP_SUM, rank == 1 ? 1 : row, &h),
			    "sc_reducescatter_async");
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		if (r != SC_ERR_MISMATCH || !strstr(it_wait_error(), "rows of 1") ||
		    !strstr(it_wait_error(), "rows of 3") ||
		    !it_mentions_rank(it_wait_error(), 1))
			IT_FAIL(
			    "rows of another length on rank 1: expected SC_ERR_MISMATCH naming "
			    "both, got %s: '%s'",
			    it_wait_name(r), it_wait_error());
		it_log("rows that differ: %s", it_wait_error());
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
