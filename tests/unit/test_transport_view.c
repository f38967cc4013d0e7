/*
 * test_transport_view.c: views of the tcp mesh for process sets (transport.h, subgroup;
 * transport/tcp_view.c) in a world of four forked ranks on loopback. Views {0, 2} and
 * {1, 3} run at the same time: allreduces of every dtype and several ops, the 16-bit
 * wire and an exchange_v on each, results exact, the views' byte counters the two-rank
 * ring's volume while the mesh's own counters do not move, and the mesh's byte streams
 * still in step afterwards (a global exchange of known bytes). A view of one rank; a
 * failure on a view fails the mesh, naming the mesh's rank; the mesh's failure reaches
 * its views; views a backend cannot make are refused.
 */
#include "unit.h"

#include <string.h>

#include "transport/transport.h"
#include "unit_mesh.h"
#include "util/log.h"

#define P      4
#define TMO_MS 20000

typedef void (*view_fn)(scd_transport_t *t, int rank);

static void view_child(unit_mesh_t *m, int rank, void *arg)
{
	scd_log_level = -1; /* the failures logged are expected */
	scd_transport_t *t = NULL;
	sc_status_t st = unit_mesh_create(m, rank, 0, TMO_MS, &t);
	CHECK_MSG(st == SC_OK, "rank %d: mesh: %s", rank, scd_transport_error());
	(*(view_fn *)arg)(t, rank);
	scd_transport_destroy(t);
}

/* Runs fn on every rank of a fresh world of P forked processes; fails unless all exit 0. */
static void run_world(view_fn fn)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, view_child, &fn);
}

/* A small integer (exact in every dtype and in 16 bits, and in products of two). */
static long long val(size_t i, int rank)
{
	return (long long)((i * 7 + (size_t)rank * 5) % 11) - 5;
}

static long long reduce2(long long a, long long b, sc_reduce_op_t op)
{
	switch (op) {
	case SC_OP_MIN:
		return a < b ? a : b;
	case SC_OP_MAX:
		return a > b ? a : b;
	case SC_OP_PRODUCT:
		return a * b;
	default:
		return a + b;
	}
}

static void put(void *buf, sc_dtype_t dt, size_t i, long long v)
{
	switch (dt) {
	case SC_FLOAT32:
		((float *)buf)[i] = (float)v;
		break;
	case SC_FLOAT64:
		((double *)buf)[i] = (double)v;
		break;
	case SC_INT32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)buf)[i] = (int64_t)v;
	}
}

static long long get(const void *buf, sc_dtype_t dt, size_t i)
{
	switch (dt) {
	case SC_FLOAT32:
		return (long long)((const float *)buf)[i];
	case SC_FLOAT64:
		return (long long)((const double *)buf)[i];
	case SC_INT32:
		return ((const int32_t *)buf)[i];
	default:
		return ((const int64_t *)buf)[i];
	}
}

/* Allreduces over view v of the mesh ranks members[0..2): every dtype, the ops, the
 * bf16 wire; results exact, and the view's counters the two-rank ring's volume. */
static void view_allreduces(scd_transport_t *v, const int *members, int rank)
{
	static const size_t sizes[] = {1, 3, 1000003};
	static const sc_reduce_op_t ops[] = {SC_OP_SUM, SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT};
	void *buf = malloc(8 * 1000003);
	CHECK_TRUE(buf != NULL);
	for (int dt = SC_FLOAT32; dt <= SC_INT64; dt++)
		for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
				size_t n = sizes[s], esz = sc_dtype_size((sc_dtype_t)dt);
				for (size_t i = 0; i < n; i++)
					put(buf, (sc_dtype_t)dt, i, val(i, rank));
				scd_transport_counters_t c0, c1;
				v->ops->counters(v, &c0);
				sc_status_t st = scd_transport_allreduce(
				    v, buf, n, (sc_dtype_t)dt, ops[o], TMO_MS);
				CHECK_MSG(st == SC_OK, "rank %d: %s %s n %zu: %s", rank,
					  sc_dtype_name((sc_dtype_t)dt),
					  sc_reduce_op_name(ops[o]), n, scd_transport_error());
				v->ops->counters(v, &c1);
				for (size_t i = 0; i < n; i++) {
					long long want = reduce2(val(i, members[0]),
								 val(i, members[1]), ops[o]);
					CHECK_MSG(get(buf, (sc_dtype_t)dt, i) == want,
						  "rank %d: %s %s n %zu element %zu: %lld, not "
						  "%lld",
						  rank, sc_dtype_name((sc_dtype_t)dt),
						  sc_reduce_op_name(ops[o]), n, i,
						  get(buf, (sc_dtype_t)dt, i), want);
				}
				/* two ranks: each sends the chunk its peer reduces, and
				 * its own reduced chunk back */
				CHECK_EQ_INT(c1.bytes_sent - c0.bytes_sent, n * esz);
			}
	float *f = buf;
	for (size_t i = 0; i < 1000; i++)
		f[i] = (float)val(i, rank);
	CHECK_TRUE(v->ops->allreduce_wire16(v, f, 1000, SC_WIRE_BF16, NULL, TMO_MS) == SC_OK);
	for (size_t i = 0; i < 1000; i++)
		CHECK_TRUE(f[i] == (float)(val(i, members[0]) + val(i, members[1])));
	free(buf);
}

/* An exchange_v with the view's peer: two framed messages each way. */
static void view_exchange(scd_transport_t *v, int rank, int peer_rank)
{
	int peer = 1 - v->rank;
	unsigned char out[2][300], in[2][400];
	size_t got[2] = {0, 0};
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < sizeof(out[k]); i++)
			out[k][i] = (unsigned char)(rank * 31 + k * 7 + (int)i);
	scd_xfer_t s[2] = {{peer, out[0], 100}, {peer, out[1], 300}};
	scd_xfer_t r[2] = {{peer, in[0], 400}, {peer, in[1], 400}};
	sc_status_t st = scd_transport_exchange_v(v, s, 2, r, 2, got, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: exchange_v on its view: %s", rank,
		  scd_transport_error());
	CHECK_EQ_INT(got[0], 100);
	CHECK_EQ_INT(got[1], 300);
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < got[k]; i++)
			CHECK_TRUE(in[k][i] ==
				   (unsigned char)(peer_rank * 31 + k * 7 + (int)i));
}

/* Every rank sends every other one 64 known bytes over the mesh: the streams are in step
 * (a stray byte of a view's operation on a connection would show here). */
static void mesh_in_step(scd_transport_t *t, int rank)
{
	unsigned char out[64], in[P][64];
	scd_xfer_t s[P], r[P];
	int k = 0;
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (unsigned char)(rank * 13 + (int)i);
	for (int q = 0; q < P; q++)
		if (q != rank) {
			s[k] = (scd_xfer_t){q, out, sizeof(out)};
			r[k++] = (scd_xfer_t){q, in[q], sizeof(in[q])};
		}
	sc_status_t st = scd_transport_exchange(t, s, k, r, k, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: mesh exchange: %s", rank, scd_transport_error());
	for (int q = 0; q < P; q++)
		for (size_t i = 0; q != rank && i < sizeof(out); i++)
			CHECK_MSG(in[q][i] == (unsigned char)(q * 13 + (int)i),
				  "rank %d: byte %zu from rank %d out of step", rank, i, q);
}

static void views_rank(scd_transport_t *t, int rank)
{
	int members[2] = {rank % 2, rank % 2 + 2};
	scd_transport_t *v = NULL;
	CHECK_MSG(scd_transport_subgroup(t, members, 2, &v) == SC_OK, "rank %d: view: %s", rank,
		  scd_transport_error());
	CHECK_EQ_INT(v->size, 2);
	CHECK_EQ_INT(v->rank, rank / 2);
	scd_transport_counters_t m0, m1, v0, v1;
	t->ops->counters(t, &m0);
	view_allreduces(v, members, rank);
	view_exchange(v, rank, members[1 - rank / 2]);
	t->ops->counters(t, &m1);
	v->ops->counters(v, &v1);
	/* the mesh moved nothing for the views' operations; the views moved it all */
	CHECK_EQ_INT(m1.bytes_sent - m0.bytes_sent, 0);
	CHECK_EQ_INT(m1.bytes_recv - m0.bytes_recv, 0);
	CHECK_TRUE(v1.bytes_sent > 0 && v1.bytes_recv > 0);
	scd_transport_destroy(v); /* closes nothing: the mesh goes on */
	mesh_in_step(t, rank);
	/* only {0, 2} runs now: ranks 1 and 3 move nothing, and 0 and 2 move it all on
	 * their view */
	t->ops->counters(t, &m0);
	if (rank % 2 == 0) {
		CHECK_TRUE(scd_transport_subgroup(t, members, 2, &v) == SC_OK);
		v->ops->counters(v, &v0);
		float x[1000];
		for (int i = 0; i < 1000; i++)
			x[i] = (float)val((size_t)i, rank);
		CHECK_TRUE(scd_transport_allreduce_f32(v, x, 1000, TMO_MS) == SC_OK);
		v->ops->counters(v, &v1);
		CHECK_EQ_INT(v1.bytes_sent - v0.bytes_sent, 1000 * sizeof(float));
		CHECK_EQ_INT(v1.bytes_recv - v0.bytes_recv, 1000 * sizeof(float));
		scd_transport_destroy(v);
	}
	mesh_in_step(t, rank);
	t->ops->counters(t, &m1);
	/* the mesh's own counters: the two checks' bytes alone, on every rank */
	CHECK_EQ_INT(m1.bytes_sent - m0.bytes_sent, (P - 1) * 64);
	CHECK_EQ_INT(m1.bytes_recv - m0.bytes_recv, (P - 1) * 64);
}

UNIT_TEST_TIMEOUT(transport_view_two_sets_at_once_exact, 240)
{
	run_world(views_rank);
}

/* A view of this rank alone: a sum is the input, an exchange with itself works, and no
 * byte moves. */
static void alone_rank(scd_transport_t *t, int rank)
{
	scd_transport_t *v = NULL;
	CHECK_TRUE(scd_transport_subgroup(t, &rank, 1, &v) == SC_OK);
	CHECK_EQ_INT(v->size, 1);
	CHECK_EQ_INT(v->rank, 0);
	double x[5] = {1, -2, 3.5, 4, 5};
	CHECK_TRUE(scd_transport_allreduce(v, x, 5, SC_FLOAT64, SC_OP_SUM, TMO_MS) == SC_OK);
	CHECK_TRUE(x[0] == 1 && x[1] == -2 && x[2] == 3.5 && x[4] == 5);
	int a = 7, b = 0;
	scd_xfer_t s = {0, &a, sizeof(a)}, r = {0, &b, sizeof(b)};
	CHECK_TRUE(scd_transport_exchange(v, &s, 1, &r, 1, TMO_MS) == SC_OK);
	CHECK_EQ_INT(b, 7);
	scd_transport_counters_t c;
	v->ops->counters(v, &c);
	CHECK_EQ_INT(c.bytes_sent + c.bytes_recv, 0);
	scd_transport_destroy(v);
	mesh_in_step(t, rank);
}

UNIT_TEST(transport_view_of_one_rank)
{
	run_world(alone_rank);
}

/* Views refused: ranks that do not ascend, are out of range or leave this rank out. */
static void refused_rank(scd_transport_t *t, int rank)
{
	scd_transport_t *v = NULL;
	int down[2] = {3, 1}, out[2] = {0, P}, other[1] = {(rank + 1) % P};
	CHECK_TRUE(scd_transport_subgroup(t, down, 2, &v) == SC_ERR_INVALID);
	CHECK_TRUE(scd_transport_subgroup(t, out, 2, &v) == SC_ERR_INVALID);
	CHECK_TRUE(scd_transport_subgroup(t, other, 1, &v) == SC_ERR_INVALID);
	CHECK_TRUE(scd_transport_subgroup(t, other, 0, &v) == SC_ERR_INVALID);
	CHECK_TRUE(v == NULL);
	mesh_in_step(t, rank);
}

UNIT_TEST(transport_view_refuses_bad_ranks)
{
	run_world(refused_rank);
}

/* Fails x on the receiving side: the receiver (x's rank recv_at) takes a 64-byte message
 * into 8 bytes from x's rank send_at (SC_ERR_LIMIT); the sender's send succeeds. */
static sc_status_t oversized(scd_transport_t *x, int recv_at, int send_at)
{
	char big[64] = {0}, small[8];
	size_t got = 0;
	scd_xfer_t s = {recv_at, big, sizeof(big)}, r = {send_at, small, sizeof(small)};
	if (x->rank == recv_at)
		return scd_transport_exchange_v(x, NULL, 0, &r, 1, &got, TMO_MS);
	return scd_transport_exchange_v(x, &s, 1, NULL, 0, NULL, TMO_MS);
}

/* After a failure naming mesh rank named on the other of view and mesh, x fails at once
 * with the same status and text, never waiting on its peers. */
static void fails_again(scd_transport_t *x, const char *named, const char *what)
{
	float f[4] = {0};
	sc_status_t st = scd_transport_allreduce_f32(x, f, 4, 60000);
	CHECK_MSG(st == SC_ERR_LIMIT && strstr(scd_transport_error(), named) &&
		      strstr(scd_transport_error(), "unusable since"),
		  "the %s after the failure: %s, '%s'", what, sc_status_name(st),
		  scd_transport_error());
}

/* A failure on view {0, 2} (rank 0 receives a message larger than its buffer) fails
 * rank 0's mesh with the same status, naming the mesh's rank 2, not the view's 1. */
static void view_fails_rank(scd_transport_t *t, int rank)
{
	int members[2] = {0, 2};
	scd_transport_t *v = NULL;
	if (rank % 2 || scd_transport_subgroup(t, members, 2, &v) != SC_OK)
		return;
	sc_status_t st = oversized(v, 0, 1);
	CHECK_MSG(st == (rank == 0 ? SC_ERR_LIMIT : SC_OK), "rank %d: %s", rank,
		  scd_transport_error());
	if (rank == 0) {
		CHECK_MSG(strstr(scd_transport_error(), "rank 2:"),
			  "the view's error does not name mesh rank 2: '%s'",
			  scd_transport_error());
		fails_again(t, "rank 2:", "mesh");
	}
	scd_transport_destroy(v);
}

UNIT_TEST(transport_view_failure_fails_the_mesh)
{
	run_world(view_fails_rank);
}

/* The mesh's failure reaches a view made before it: rank 1's mesh fails (a message
 * larger than its buffer from rank 3), and its view {1, 3} then fails at once with the
 * same text, without waiting on rank 3. */
static void mesh_fails_rank(scd_transport_t *t, int rank)
{
	int members[2] = {1, 3};
	scd_transport_t *v = NULL;
	if (rank % 2 == 0 || scd_transport_subgroup(t, members, 2, &v) != SC_OK)
		return;
	sc_status_t st = oversized(t, 1, 3);
	CHECK_MSG(st == (rank == 1 ? SC_ERR_LIMIT : SC_OK), "rank %d: %s", rank,
		  scd_transport_error());
	if (rank == 1)
		fails_again(v, "rank 3:", "view");
	scd_transport_destroy(v);
}

UNIT_TEST(transport_view_mesh_failure_reaches_views)
{
	run_world(mesh_fails_rank);
}
