/*
 * itest_a2a.c: the alltoall collective through real daemons.
 *
 * Three steps each of float32 and int64, with counts that vary by source, destination and
 * step (zeros among them, and rank 1 sending nothing at the first step): every element of
 * every rank's result, its total and its counts per source exact, and the node's bytes
 * the count matrix plus the blocks to other nodes' trainers, each once. Then the errors,
 * on every rank alike: every rank sending rank 0 more than its size holds (SC_ERR_LIMIT
 * naming each rank's total), and rank 1 alone giving counts over its buffer
 * (SC_ERR_INVALID naming rank 1 and the tensor); an alltoall after them works; a tensor
 * with a sparsifier refuses it (SC_ERR_UNSUPPORTED). Last, rank 0
 * joins: the others' alltoall gets nothing from it and what they address to it goes
 * nowhere. With the arguments cuda LOG, the exact steps run on cuda tensors (the driver
 * stand-in's, its log LOG.<rank>; the daemons stage them through host memory).
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A2A_MAX 402 /* the largest block, so numel = P A2A_MAX holds any send or receive */

/* The elements rank s sends rank q at a step: zero for some pairs, none from rank 1 at
 * step 0. */
static size_t a2a_count(int s, int q, int step)
{
	if ((s == 1 && step == 0) || (s + 2 * q + step) % 4 == 0)
		return 0;
	return (size_t)((s * 31 + q * 17 + step * 7) % 9) * 50 + (size_t)((s + q) % 3);
}

/* Element i of the block from s to q: exact in float32 and int64. */
static double a2a_value(int s, int q, size_t i)
{
	return (double)s * 1000000.0 + (double)q * 10000.0 + (double)i;
}

static void a2a_store(void *x, sc_dtype_t dt, size_t i, double v)
{
	if (dt == SC_FLOAT32)
		((float *)x)[i] = (float)v;
	else
		((int64_t *)x)[i] = (int64_t)v;
}

static double a2a_load(const void *x, sc_dtype_t dt, size_t i)
{
	return dt == SC_FLOAT32 ? (double)((const float *)x)[i]
				: (double)((const int64_t *)x)[i];
}

static double node_sent(sc_client_t *c, sc_tensor_t *t)
{
	sc_tensor_stats_t s;
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	IT_CHECK_SC(sc_tensor_stats(c, t, &s), "sc_tensor_stats('%s')", sc_tensor_name(t));
	return (double)s.bytes_sent;
}

/* One alltoall of t at step, every rank's counts from a2a_count (absent: a joined rank,
 * which neither sends nor receives); checks everything this rank received. */
static void a2a_step(sc_client_t *c, sc_tensor_t *t, int step, int absent)
{
	int P = sc_size(c), me = sc_rank(c);
	sc_dtype_t dt = sc_tensor_dtype(t);
	size_t *sc = calloc((size_t)P, sizeof(*sc)), *rc = calloc((size_t)P, sizeof(*rc));
	if (!sc || !rc)
		IT_FAIL("out of memory");
	size_t at = 0;
	for (int q = 0; q < P; q++) {
		sc[q] = a2a_count(me, q, step);
		for (size_t i = 0; i < sc[q]; i++)
			a2a_store(sc_tensor_data(t), dt, at++, a2a_value(me, q, i));
	}
	sc_handle_t h = 0;
	int r = sc_alltoall_async(c, t, sc, &h);
	if (r != SC_OK || (r = it_wait(c, h, IT_OP_TIMEOUT_MS)) != SC_OK)
		IT_FAIL("alltoall of '%s', step %d: %s: %s", sc_tensor_name(t), step,
			it_wait_name(r), h ? it_wait_error() : sc_last_error());
	IT_CHECK_SC(sc_tensor_result_counts(t, rc, P), "sc_tensor_result_counts");
	size_t total = 0;
	for (int s = 0; s < P; s++) {
		size_t want = s == absent ? 0 : a2a_count(s, me, step);
		if (rc[s] != want)
			IT_FAIL(
			    "alltoall of '%s', step %d: %zu elements from rank %d, expected "
			    "%zu",
			    sc_tensor_name(t), step, rc[s], s, want);
		for (size_t i = 0; i < want; i++, total++) {
			double got = a2a_load(sc_tensor_data(t), dt, total);
			if (got != a2a_value(s, me, i))
				IT_FAIL("alltoall of '%s', step %d: element %zu from rank %d "
					"(%zu of the result) is %.0f, expected %.0f",
					sc_tensor_name(t), step, i, s, total, got,
					a2a_value(s, me, i));
		}
	}
	if (sc_tensor_result_nnz(t) != total)
		IT_FAIL("alltoall of '%s', step %d: result of %zu elements, expected %zu",
			sc_tensor_name(t), step, sc_tensor_result_nnz(t), total);
	free(sc);
	free(rc);
}

/* The bytes this node sends for one step: the count matrix rows of its trainers to every
 * other node, and each of its trainers' blocks to every other node's trainers. */
static double a2a_wire(int T, int L, int node, int step, size_t esz)
{
	double b = (double)(T / L - 1) * L * (T + 3) * 8;
	for (int l = 0; l < L; l++)
		for (int q = 0; q < T; q++)
			if (q / L != node)
				b += (double)a2a_count(node * L + l, q, step) * (double)esz;
	return b;
}

/* An alltoall expected to fail on every rank with st, naming the tensor and what. */
static void a2a_fails(sc_client_t *c, sc_tensor_t *t, const size_t *counts, sc_status_t st,
		      const char *what, int rank, long long number)
{
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_alltoall_async(c, t, counts, &h), "sc_alltoall_async(%s)", what);
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	const char *e = it_wait_error();
	if (r != (int)st || !strstr(e, sc_tensor_name(t)) || !it_mentions_rank(e, rank) ||
	    (number >= 0 && !it_mentions_number(e, number)))
		IT_FAIL("%s: expected %s naming the tensor, rank %d and %lld, got %s: '%s'",
			what, sc_status_name(st), rank, number, it_wait_name(r), e);
	it_log("%s: %s", what, e);
}

/* The tensors of the exact steps: cpu, or with cuda on GPU local rank % $SCG_HOST_DEVICES
 * (the driver stand-in maps them to the host, so the test writes and reads them directly,
 * and the daemons stage them through host memory). */
static sc_tensor_t *a2a_register(sc_client_t *c, const char *name, sc_dtype_t dt, size_t n,
				 int cuda)
{
	if (!cuda)
		return it_register(c, name, dt, n);
	const char *g = getenv("SCG_HOST_DEVICES");
	int gpus = g && atoi(g) > 1 ? atoi(g) : 1;
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .device = SC_DEVICE_CUDA,
			      .device_ordinal = sc_local_rank(c) % gpus};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, dt, n, &o, &t), "sc_register_ex('%s', cuda:%d)",
		    name, o.device_ordinal);
	return t;
}

int it_alltoall(int argc, char **argv)
{
	int cuda = argc > 1 && !strcmp(argv[1], "cuda");
	if (cuda)
		it_cuda_stand_in(argc - 1, argv + 1);
	sc_client_t *c = it_connect();
	int P = sc_size(c), rank = sc_rank(c), L = sc_local_size(c);
	static const sc_dtype_t dts[] = {SC_FLOAT32, SC_INT64};
	sc_tensor_t *ts[2];
	for (int d = 0; d < 2; d++) {
		char name[64];
		snprintf(name, sizeof(name), "alltoall.%s", sc_dtype_name(dts[d]));
		sc_tensor_t *t = ts[d] =
		    a2a_register(c, name, dts[d], (size_t)P * A2A_MAX, cuda);
		for (int step = 0; step < 3; step++) {
			double s0 = node_sent(c, t);
			a2a_step(c, t, step, -1);
			double sent = node_sent(c, t) - s0;
			double want = a2a_wire(P, L, rank / L, step, sc_dtype_size(dts[d]));
			if (sent != want)
				IT_FAIL("alltoall of '%s', step %d: node %d sent %.0f bytes, "
					"expected %.0f (count matrix and blocks, once each)",
					name, step, rank / L, sent, want);
		}
	}
	it_log("alltoalls of %s float32 and int64 over %d trainers, counts varying by pair "
	       "and step (rank 1 sends none at first): exact, bytes as the blocks",
	       cuda ? "cuda" : "cpu", P);

	if (P > 1) {
		size_t *counts = calloc((size_t)P, sizeof(*counts));
		if (!counts)
			IT_FAIL("out of memory");
		sc_tensor_t *s = it_register(c, "alltoall.small", SC_INT32, 10);
		counts[0] = 6; /* rank 0 would receive 6 P of 10 */
		a2a_fails(c, s, counts, SC_ERR_LIMIT, "every rank sending rank 0 6 of 10", 0,
			  6LL * P);
		counts[0] = 0;
		counts[P - 1] = rank == 1 ? 11 : 1; /* rank 1's counts sum over its 10 */
		a2a_fails(c, s, counts, SC_ERR_INVALID, "rank 1 sending 11 of 10", 1, 11);
		free(counts);
	}
	a2a_step(c, ts[0], 1, -1); /* after the errors */

	/* a tensor with a sparsifier refuses it, naming the tensor */
	sc_tensor_t *sp = it_register_topk(c, "alltoall.topk", (size_t)P * A2A_MAX);
	size_t *none = calloc((size_t)P, sizeof(*none));
	sc_handle_t hs = 0;
	if (!none)
		IT_FAIL("out of memory");
	IT_CHECK_SC(sc_alltoall_async(c, sp, none, &hs), "sc_alltoall_async(alltoall.topk)");
	int rs = it_wait(c, hs, IT_ERROR_TIMEOUT_MS);
	if (rs != SC_ERR_UNSUPPORTED || !strstr(it_wait_error(), "alltoall.topk"))
		IT_FAIL(
		    "alltoall of a top-k tensor: expected SC_ERR_UNSUPPORTED naming it, got "
		    "%s: '%s'",
		    it_wait_name(rs), it_wait_error());
	it_log("a top-k tensor: %s", it_wait_error());
	free(none);

	/* rank 0 joins: the others run an alltoall without it, then join */
	if (P > 1) {
		sc_handle_t j = 0;
		int last = -1;
		if (rank == 0)
			IT_CHECK_SC(sc_join_async(c, &j), "sc_join_async");
		else
			a2a_step(c, ts[1], 2, 0);
		if (rank != 0)
			IT_CHECK_SC(sc_join_async(c, &j), "sc_join_async");
		IT_CHECK_SC(sc_join_result(c, j, IT_OP_TIMEOUT_MS, &last), "sc_join_result");
		it_log("rank 0 joined: the others' alltoall got nothing from it");
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
