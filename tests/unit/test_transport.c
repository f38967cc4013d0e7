/*
 * test_transport.c: the tcp data plane (transport/transport.h) between real processes on
 * loopback. Each test forks one child per rank; the listening sockets are opened in the
 * parent before the fork, so every child knows every port. A child reports through its
 * exit status (a failed CHECK exits 1), and values to compare across ranks go through a
 * shared anonymous mapping.
 */
#include "unit.h"

#include "device/wire16.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport/tcp.h"
#include "transport/tcp_seal.h"
#include "transport/transport.h"
#include "unit_mesh.h"
#include "util/log.h"

#define MAX_P  5
#define TMO_MS 20000

typedef void (*rank_fn)(scd_transport_t *t, int rank, int size, void *arg);

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *shared_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(p != MAP_FAILED);
	return p;
}

static void open_listeners(int P, int *fds, uint16_t *ports, const char **addrs)
{
	for (int r = 0; r < P; r++) {
		sc_status_t st = scd_tcp_listen("127.0.0.1", 0, &fds[r], &ports[r]);
		CHECK_MSG(st == SC_OK, "listen: %s", scd_transport_error());
		CHECK_TRUE(ports[r] != 0);
		addrs[r] = "127.0.0.1";
	}
}

/* Forks a child that runs body(arg) and exits 0 (a failed CHECK exits 1). */
static pid_t spawn(void (*body)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		body(arg);
		_exit(0);
	}
	return pid;
}

static int reap(pid_t pid)
{
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

typedef struct {
	int rank, size;
	int *fds;
	const uint16_t *ports;
	const char **addrs;
	uint64_t world;
	rank_fn fn;
	void *arg;
} rank_ctx_t;

static void rank_body(void *p)
{
	rank_ctx_t *c = p;
	scd_log_level = SCD_LOG_WARN;
	for (int r = 0; r < c->size; r++)
		if (r != c->rank)
			close(c->fds[r]);
	scd_transport_t *t = NULL;
	sc_status_t st = scd_tcp_create(c->fds[c->rank], c->rank, c->size, c->addrs, c->ports,
					c->world, NULL, SCD_SEAL_NONE, 0, TMO_MS, &t);
	CHECK_MSG(st == SC_OK, "rank %d: create: %s", c->rank, scd_transport_error());
	CHECK_TRUE(t->rank == c->rank && t->size == c->size);
	CHECK_TRUE(strcmp(t->ops->name, "tcp") == 0);
	c->fn(t, c->rank, c->size, c->arg);
	scd_transport_destroy(t);
}

/* Runs fn on every rank of a fresh world of P processes; fails unless all exit 0. */
static void run_world(int P, rank_fn fn, void *arg)
{
	int fds[MAX_P];
	uint16_t ports[MAX_P];
	const char *addrs[MAX_P];
	pid_t pids[MAX_P];
	open_listeners(P, fds, ports, addrs);
	uint64_t world = unit_rng();
	for (int r = 0; r < P; r++) {
		rank_ctx_t c = {r, P, fds, ports, addrs, world, fn, arg};
		pids[r] = spawn(rank_body, &c);
	}
	for (int r = 0; r < P; r++)
		close(fds[r]);
	int bad = -1, bad_status = 0;
	for (int r = 0; r < P; r++) {
		int status = reap(pids[r]);
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && bad < 0)
			bad = r, bad_status = status;
	}
	CHECK_MSG(bad < 0, "P = %d: rank %d failed (wait status 0x%x)", P, bad, bad_status);
}

/* ---- allreduce ---------------------------------------------------------------------- */

static float input(size_t i, int rank)
{
	return (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

static size_t chunk_bytes(size_t n, int P, int c, size_t esize)
{
	return (n / (size_t)P + ((size_t)c < n % (size_t)P)) * esize;
}

static void allreduce_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	size_t sizes[] = {1, (size_t)(P > 1 ? P - 1 : 1), 7, 1000003, (4u << 20) + 3};
	float *x = malloc(sizeof(float) * ((4u << 20) + 3));
	CHECK_TRUE(x != NULL);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		for (size_t i = 0; i < n; i++)
			x[i] = input(i, rank);
		scd_transport_counters_t c0, c1;
		t->ops->counters(t, &c0);
		sc_status_t st = scd_transport_allreduce_f32(t, x, n, TMO_MS);
		CHECK_MSG(st == SC_OK, "rank %d, n %zu: %s", rank, n, scd_transport_error());
		t->ops->counters(t, &c1);
		size_t wrong = 0;
		for (size_t i = 0; i < n; i++) {
			float want = 0;
			for (int r = 0; r < P; r++)
				want += input(i, r);
			wrong += x[i] != want;
		}
		CHECK_MSG(wrong == 0, "rank %d of %d, n %zu: %zu wrong sums", rank, P, n,
			  wrong);
		/* Ring volume: every chunk twice but the two this rank never forwards. */
		uint64_t want_sent =
		    P == 1 ? 0
			   : 2 * n * sizeof(float) -
				 chunk_bytes(n, P, (rank + 1) % P, sizeof(float)) -
				 chunk_bytes(n, P, (rank + 2) % P, sizeof(float));
		CHECK_EQ_INT(c1.bytes_sent - c0.bytes_sent, want_sent);
	}
	free(x);
}

UNIT_TEST_TIMEOUT(transport_tcp_allreduce_exact_any_n, 240)
{
	for (int P = 1; P <= MAX_P; P++)
		run_world(P, allreduce_rank, NULL);
}

/* Inputs of the other dtypes: float64 with fractions (sums still exact), integers near
 * the top of their range, so that the sums wrap around (compared in unsigned arithmetic,
 * which is what two's-complement wrap-around is). */
static double input_f64(size_t i, int rank)
{
	return (double)input(i, rank) * 0.25 + (double)((i + (size_t)rank) % 3) * 1e9;
}

static uint32_t input_u32(size_t i, int rank)
{
	return (uint32_t)INT32_MAX - (uint32_t)((i * 5 + (size_t)rank * 11) % 23);
}

static uint64_t input_u64(size_t i, int rank)
{
	return ((uint64_t)INT64_MAX - (uint64_t)rank * 3) ^ ((uint64_t)i << 33);
}

/* Checks element i of x (dtype) against the sum over P ranks; 1 when it matches. */
static int typed_ok(const void *x, sc_dtype_t dtype, size_t i, int P)
{
	double f = 0;
	uint32_t a = 0;
	uint64_t b = 0;
	for (int r = 0; r < P; r++) {
		f += input_f64(i, r);
		a += input_u32(i, r);
		b += input_u64(i, r);
	}
	switch (dtype) {
	case SC_FLOAT64:
		return ((const double *)x)[i] == f;
	case SC_INT32:
		return (uint32_t)((const int32_t *)x)[i] == a;
	case SC_INT64:
		return (uint64_t)((const int64_t *)x)[i] == b;
	default:
		return 0;
	}
}

static void allreduce_typed_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	static const sc_dtype_t dtypes[] = {SC_FLOAT64, SC_INT32, SC_INT64};
	size_t sizes[] = {1, (size_t)(P > 1 ? P - 1 : 1), 7, 1000003, (1u << 20) + 5};
	void *x = malloc(8 * ((1u << 20) + 5));
	CHECK_TRUE(x != NULL);
	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		sc_dtype_t dt = dtypes[d];
		size_t esize = sc_dtype_size(dt);
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			size_t n = sizes[s];
			for (size_t i = 0; i < n; i++) {
				if (dt == SC_FLOAT64)
					((double *)x)[i] = input_f64(i, rank);
				else if (dt == SC_INT32)
					((int32_t *)x)[i] = (int32_t)input_u32(i, rank);
				else
					((int64_t *)x)[i] = (int64_t)input_u64(i, rank);
			}
			scd_transport_counters_t c0, c1;
			t->ops->counters(t, &c0);
			sc_status_t st =
			    scd_transport_allreduce(t, x, n, dt, SC_OP_SUM, TMO_MS);
			CHECK_MSG(st == SC_OK, "rank %d, %s x %zu: %s", rank, sc_dtype_name(dt),
				  n, scd_transport_error());
			t->ops->counters(t, &c1);
			size_t wrong = 0, first = 0;
			for (size_t i = 0; i < n; i++)
				if (!typed_ok(x, dt, i, P) && !wrong++)
					first = i;
			CHECK_MSG(wrong == 0,
				  "rank %d of %d, %s x %zu: %zu wrong sums (first %zu)", rank,
				  P, sc_dtype_name(dt), n, wrong, first);
			uint64_t want_sent =
			    P == 1 ? 0
				   : 2 * n * esize - chunk_bytes(n, P, (rank + 1) % P, esize) -
					 chunk_bytes(n, P, (rank + 2) % P, esize);
			CHECK_EQ_INT(c1.bytes_sent - c0.bytes_sent, want_sent);
		}
	}
	scd_log_level = -1;
	CHECK_EQ_INT(scd_transport_allreduce(t, x, 4, (sc_dtype_t)7, SC_OP_SUM, TMO_MS),
		     SC_ERR_INVALID);
	CHECK_EQ_INT(scd_transport_allreduce(t, x, 4, SC_INT32, (sc_reduce_op_t)9, TMO_MS),
		     SC_ERR_INVALID);
	free(x);
}

UNIT_TEST_TIMEOUT(transport_tcp_allreduce_f64_i32_i64_exact, 240)
{
	for (int P = 1; P <= MAX_P; P++)
		run_world(P, allreduce_typed_rank, NULL);
}

/* The 16-bit wires: small integers (every partial sum exact in 16 bits) must come back
 * exact; random values must come back as 16-bit values within the rounding of P - 1
 * partial sums, the same bits on every rank (the int32 MIN and MAX of the results' bit
 * patterns agree), with a NaN of one rank NaN everywhere; and half the native bytes. */
static float wire_input(size_t i, int rank, int exact)
{
	if (exact)
		return (float)((long long)((i * 7 + (size_t)rank * 3) % 17) - 8);
	if (i % 1009 == 3 && (size_t)rank == (i / 1009) % 3)
		return NAN;
	uint64_t h = (i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rank * 0xbf58476d1ce4e5b9ull);
	h ^= h >> 29;
	return (float)((double)(h % 2000001) / 1000000.0 - 1.0) * 3.0f;
}

static void allreduce_wire_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	size_t sizes[] = {1, (size_t)(P > 1 ? P - 1 : 1), 7, 1000003, (1u << 20) + 5};
	size_t cap = (1u << 20) + 5;
	float *x = malloc(4 * cap);
	int32_t *lo = malloc(4 * cap), *hi = malloc(4 * cap);
	CHECK_TRUE(x && lo && hi && t->ops->allreduce_wire16);
	for (uint32_t wire = SC_WIRE_FP16; wire <= SC_WIRE_BF16; wire++)
		for (int exact = 1; exact >= 0; exact--)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
				size_t n = sizes[s];
				for (size_t i = 0; i < n; i++)
					x[i] = wire_input(i, rank, exact);
				scd_transport_counters_t c0, c1;
				t->ops->counters(t, &c0);
				sc_status_t st =
				    t->ops->allreduce_wire16(t, x, n, wire, NULL, TMO_MS);
				CHECK_MSG(st == SC_OK, "rank %d, %s x %zu: %s", rank,
					  sc_wire_name(wire), n, scd_transport_error());
				t->ops->counters(t, &c1);
				uint64_t want_sent =
				    P == 1 ? 0
					   : 2 * n * 2 - chunk_bytes(n, P, (rank + 1) % P, 2) -
						 chunk_bytes(n, P, (rank + 2) % P, 2);
				CHECK_EQ_INT(c1.bytes_sent - c0.bytes_sent, want_sent);
				double ulp = wire == SC_WIRE_FP16 ? 0x1p-10 : 0x1p-7;
				for (size_t i = 0; i < n; i++) {
					double sum = 0, mag = 0;
					int nan = 0;
					for (int r = 0; r < P; r++) {
						float v = wire_input(i, r, exact);
						nan |= isnan(v);
						sum += v;
						mag += fabs(v);
					}
					uint16_t h[1];
					float again[1];
					scd_wire16_narrow(wire, h, &x[i], 1);
					scd_wire16_widen(wire, again, h, 1);
					CHECK_MSG(nan	  ? isnan(x[i])
						  : exact ? x[i] == (float)sum
							  : fabs(x[i] - sum) <=
								    P * (ulp * mag + 0x1p-24) &&
								memcmp(again, &x[i], 4) == 0,
						  "rank %d of %d, %s x %zu, element %zu: %.9g, "
						  "expected %.9g%s",
						  rank, P, sc_wire_name(wire), n, i, x[i], sum,
						  exact ? "" : " (within 16-bit rounding)");
				}
				memcpy(lo, x, 4 * n);
				memcpy(hi, x, 4 * n);
				CHECK_TRUE(scd_transport_allreduce(t, lo, n, SC_INT32,
								   SC_OP_MIN, TMO_MS) == SC_OK);
				CHECK_TRUE(scd_transport_allreduce(t, hi, n, SC_INT32,
								   SC_OP_MAX, TMO_MS) == SC_OK);
				for (size_t i = 0; i < n; i++)
					CHECK_MSG(lo[i] == hi[i],
						  "%s x %zu, element %zu differs across ranks: "
						  "0x%08x .. 0x%08x",
						  sc_wire_name(wire), n, i, (uint32_t)lo[i],
						  (uint32_t)hi[i]);
			}
	scd_log_level = -1;
	CHECK_EQ_INT(t->ops->allreduce_wire16(t, x, 4, 7, NULL, TMO_MS), SC_ERR_INVALID);
	free(x), free(lo), free(hi);
}

UNIT_TEST_TIMEOUT(transport_tcp_allreduce_wire16, 240)
{
	for (int P = 1; P <= MAX_P; P++)
		run_world(P, allreduce_wire_rank, NULL);
}

/* Inputs of min, max and product: halves of both signs (float products exact in any
 * order), integer products that overflow (wrap-around, compared as unsigned), and at every
 * 97th float element a NaN of one rank (it must win on every rank, whichever rank holds
 * it). */
static double op_input(size_t i, int rank)
{
	if (i % 97 == 5 && (size_t)rank == (i / 97) % 3)
		return NAN;
	return (double)((long long)((i * 7 + (size_t)rank * 13) % 11) - 5) * 0.5;
}

static void op_fill(void *x, sc_dtype_t dt, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++) {
		double v = op_input(i, rank);
		long long k = isnan(v) ? 3 : (long long)(v * 2);
		if (dt == SC_FLOAT32)
			((float *)x)[i] = (float)v;
		else if (dt == SC_FLOAT64)
			((double *)x)[i] = v;
		else if (dt == SC_INT32)
			((int32_t *)x)[i] = (int32_t)(k * 100003);
		else
			((int64_t *)x)[i] = (int64_t)(k * 1000000007LL);
	}
}

/* The expected element i (as a double for the floats, unsigned for the integers). */
static int op_ok(const void *x, sc_dtype_t dt, sc_reduce_op_t op, size_t i, int P)
{
	double f = 0;
	uint64_t u = 0;
	int nan = 0;
	for (int r = 0; r < P; r++) {
		double v = op_input(i, r);
		long long k = isnan(v) ? 3 : (long long)(v * 2);
		uint64_t w = dt == SC_INT32 ? (uint64_t)(uint32_t)(int32_t)(k * 100003)
					    : (uint64_t)(k * 1000000007LL);
		nan |= isnan(v);
		if (r == 0) {
			f = v, u = w;
			continue;
		}
		if (op == SC_OP_MIN)
			f = v < f ? v : f;
		else if (op == SC_OP_MAX)
			f = v > f ? v : f;
		else
			f *= v, u *= w;
		if (op != SC_OP_PRODUCT) {
			int less =
			    dt == SC_INT32 ? (int32_t)w < (int32_t)u : (int64_t)w < (int64_t)u;
			if (less == (op == SC_OP_MIN))
				u = w;
		}
	}
	switch (dt) {
	case SC_FLOAT32:
		return nan ? isnan(((const float *)x)[i]) : ((const float *)x)[i] == (float)f;
	case SC_FLOAT64:
		return nan ? isnan(((const double *)x)[i]) : ((const double *)x)[i] == f;
	case SC_INT32:
		return (uint32_t)((const int32_t *)x)[i] == (uint32_t)u;
	default:
		return (uint64_t)((const int64_t *)x)[i] == u;
	}
}

static void allreduce_ops_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	static const sc_dtype_t dtypes[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	static const sc_reduce_op_t ops[] = {SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT};
	size_t sizes[] = {1, 7, 100003};
	void *x = malloc(8 * 100003);
	CHECK_TRUE(x != NULL);
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
				sc_dtype_t dt = dtypes[d];
				size_t n = sizes[s], wrong = 0, first = 0;
				op_fill(x, dt, n, rank);
				sc_status_t st =
				    scd_transport_allreduce(t, x, n, dt, ops[o], TMO_MS);
				CHECK_MSG(st == SC_OK, "rank %d, %s %s x %zu: %s", rank,
					  sc_reduce_op_name(ops[o]), sc_dtype_name(dt), n,
					  scd_transport_error());
				for (size_t i = 0; i < n; i++)
					if (!op_ok(x, dt, ops[o], i, P) && !wrong++)
						first = i;
				CHECK_MSG(wrong == 0,
					  "rank %d of %d, %s %s x %zu: %zu wrong (first %zu)",
					  rank, P, sc_reduce_op_name(ops[o]), sc_dtype_name(dt),
					  n, wrong, first);
			}
	free(x);
}

UNIT_TEST_TIMEOUT(transport_tcp_allreduce_min_max_product_exact, 240)
{
	for (int P = 1; P <= MAX_P; P++)
		run_world(P, allreduce_ops_rank, NULL);
}

/* ---- exchange ----------------------------------------------------------------------- */

static size_t msg_bytes(uint64_t seed, int src, int dst, int k)
{
	static const size_t pick[] = {0, 1, 13, 4096, 100000, 3u << 20};
	uint64_t h = seed ^ ((uint64_t)src * 0x9e3779b97f4a7c15ULL) ^
		     ((uint64_t)dst * 0xc2b2ae3d27d4eb4fULL) ^
		     ((uint64_t)k * 0x165667b19e3779f9ULL);
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return pick[h % 6];
}

static unsigned char msg_byte(int src, int dst, int k, size_t i)
{
	return (unsigned char)(i * 131 + (size_t)src * 17 + (size_t)dst * 5 + (size_t)k * 3);
}

/* Two messages each way between every two ranks (and to itself), sizes 0 to 3 MiB. */
static void exchange_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	uint64_t seed = *(const uint64_t *)arg;
	for (int framed = 0; framed < 2; framed++) {
		scd_xfer_t s[2 * MAX_P], r[2 * MAX_P];
		size_t got[2 * MAX_P];
		int n = 0;
		for (int k = 0; k < 2; k++)
			for (int p = 0; p < P; p++, n++) {
				size_t sb = msg_bytes(seed, rank, p, k),
				       rb = msg_bytes(seed, p, rank, k) + (framed ? 100 : 0);
				s[n] = (scd_xfer_t){p, malloc(sb + 1), sb};
				r[n] = (scd_xfer_t){p, malloc(rb + 1), rb};
				for (size_t i = 0; i < sb; i++)
					((unsigned char *)s[n].buf)[i] =
					    msg_byte(rank, p, k, i);
				got[n] = (size_t)-1;
			}
		sc_status_t st = framed ? scd_transport_exchange_v(t, s, n, r, n, got, TMO_MS)
					: scd_transport_exchange(t, s, n, r, n, TMO_MS);
		CHECK_MSG(st == SC_OK, "rank %d (framed %d): %s", rank, framed,
			  scd_transport_error());
		for (int j = 0; j < n; j++) {
			int p = j % P, k = j / P;
			size_t want = msg_bytes(seed, p, rank, k);
			if (framed)
				CHECK_EQ_INT(got[j], want);
			for (size_t i = 0; i < want; i++)
				CHECK_MSG(((unsigned char *)r[j].buf)[i] ==
					      msg_byte(p, rank, k, i),
					  "rank %d: byte %zu of message %d from rank %d", rank,
					  i, k, p);
			free(s[j].buf);
			free(r[j].buf);
		}
	}
}

UNIT_TEST_TIMEOUT(transport_tcp_exchange_all_to_all, 120)
{
	uint64_t seed = unit_rng();
	for (int P = 1; P <= MAX_P; P++)
		run_world(P, exchange_rank, &seed);
}

/* exchange_v's work runs while receives are pending (rank 0 sends 200 ms late), sees a
 * receive as complete only when all its bytes are in, and its failure ends the exchange
 * with its status. */
typedef struct work_probe {
	const scd_xfer_t *r;
	const size_t *got;
	int n, calls, pending_calls, src_rank;
	int fail;
} work_probe_t;

static int probe_work(void *arg)
{
	work_probe_t *w = arg;
	w->calls++;
	if (w->fail)
		return SC_ERR_PROTOCOL;
	int pending = 0;
	for (int i = 0; i < w->n; i++) {
		if (w->got[i] == SCD_XFER_PENDING) {
			pending = 1;
			continue;
		}
		const unsigned char *b = w->r[i].buf;
		CHECK_MSG(w->got[i] == w->r[i].bytes - 1 &&
			      b[w->got[i] - 1] == msg_byte(w->r[i].peer, w->src_rank, i, 0),
			  "rank %d: receive %d complete with %zu bytes before its data",
			  w->src_rank, i, w->got[i]);
	}
	w->pending_calls += pending;
	return pending;
}

static void work_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	enum { BYTES = 1u << 20 };
	scd_xfer_t s[MAX_P], r[MAX_P];
	size_t got[MAX_P];
	int n = 0;
	for (int p = 0; p < P; p++) {
		if (p == rank)
			continue;
		s[n] = (scd_xfer_t){p, malloc(BYTES), BYTES};
		r[n] = (scd_xfer_t){p, malloc(BYTES + 1), BYTES + 1};
		memset(s[n].buf, 0, BYTES);
		((unsigned char *)s[n].buf)[BYTES - 1] =
		    msg_byte(rank, p, rank < p ? rank : rank - 1, 0); /* i at the receiver */
		n++;
	}
	if (rank == 0)
		usleep(200 * 1000);
	work_probe_t w = {.r = r, .got = got, .n = n, .src_rank = rank};
	scd_xfer_work_t wk = {probe_work, &w};
	sc_status_t st = scd_transport_exchange_vw(t, s, n, r, n, got, &wk, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_transport_error());
	if (rank != 0)
		CHECK_MSG(w.pending_calls > 0,
			  "rank %d: work never ran while waiting (%d calls)", rank, w.calls);
	/* a failing work ends the exchange: rank 1 waits for rank 0's late 4 KiB */
	if (rank < 2) {
		if (rank == 0)
			usleep(200 * 1000);
		w = (work_probe_t){.r = r, .got = got, .fail = 1, .src_rank = rank};
		scd_xfer_t x = {1 - rank, s[0].buf, 4096}, y = {1 - rank, r[0].buf, 4096};
		st = rank == 0
			 ? scd_transport_exchange_vw(t, &x, 1, NULL, 0, NULL, NULL, TMO_MS)
			 : scd_transport_exchange_vw(t, NULL, 0, &y, 1, got, &wk, TMO_MS);
		CHECK_EQ_INT(st, rank == 0 ? SC_OK : SC_ERR_PROTOCOL);
		CHECK_TRUE(rank == 0 || w.calls == 1);
	}
	for (int i = 0; i < n; i++)
		free(s[i].buf), free(r[i].buf);
}

UNIT_TEST(transport_tcp_exchange_v_work_overlaps)
{
	for (int P = 2; P <= 4; P++)
		run_world(P, work_rank, NULL);
}

/* Held sends: a second message to every peer is held back until the work has every
 * peer's first message and writes the second from them (its bytes depend on the
 * receives, as a pull depends on the pushes); both phases share one exchange. A send held
 * with nothing left to receive fails at once, and so does one without work. */
typedef struct held {
	scd_xfer_t *s, *r;
	size_t *got;
	int n, released;
	uint32_t sum;
} held_t;

static int held_work(void *arg)
{
	held_t *h = arg;
	if (h->released)
		return 0;
	for (int i = 0; i < h->n; i++) /* the first phase's receives */
		if (h->got[i] == SCD_XFER_PENDING)
			return 0;
	h->sum = 0;
	for (int i = 0; i < h->n; i++)
		h->sum += ((uint32_t *)h->r[i].buf)[0];
	for (int i = 0; i < h->n; i++) {
		((uint32_t *)h->s[h->n + i].buf)[0] = h->sum;
		h->s[h->n + i].bytes = 4 + 1000 * (size_t)i; /* released */
	}
	h->released = 1;
	return 1;
}

static void held_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	enum { BYTES = 1u << 20 };
	scd_xfer_t s[2 * MAX_P], r[2 * MAX_P];
	size_t got[2 * MAX_P];
	int n = 0;
	for (int p = 0; p < P; p++)
		if (p != rank) {
			s[n] = (scd_xfer_t){p, calloc(1, BYTES), BYTES};
			((uint32_t *)s[n].buf)[0] = 1000u * (uint32_t)rank + (uint32_t)p;
			r[n] = (scd_xfer_t){p, malloc(BYTES), BYTES};
			n++;
		}
	for (int i = 0; i < n; i++) {
		s[n + i] =
		    (scd_xfer_t){s[i].peer, calloc(1, 4 + 1000 * (size_t)n), SCD_XFER_PENDING};
		r[n + i] =
		    (scd_xfer_t){r[i].peer, malloc(4 + 1000 * (size_t)n), 4 + 1000 * (size_t)n};
	}
	if (rank == 0)
		usleep(100 * 1000);
	held_t h = {.s = s, .r = r, .got = got, .n = n};
	scd_xfer_work_t wk = {held_work, &h};
	sc_status_t st = scd_transport_exchange_vw(t, s, 2 * n, r, 2 * n, got, &wk, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_transport_error());
	CHECK_TRUE(h.released);
	for (int i = 0; i < n; i++) {
		int q = r[i].peer;
		/* q's second message carries the sum of what q received first */
		uint32_t want = 0;
		for (int p = 0; p < P; p++)
			if (p != q)
				want += 1000u * (uint32_t)p + (uint32_t)q;
		int at_q = rank < q ? rank : rank - 1; /* my index in q's list */
		CHECK_EQ_INT(got[n + i], 4 + 1000 * (size_t)at_q);
		CHECK_MSG(((uint32_t *)r[n + i].buf)[0] == want,
			  "rank %d: rank %d's held message carries %u, not %u", rank, q,
			  ((uint32_t *)r[n + i].buf)[0], want);
	}
	for (int i = 0; i < 2 * n; i++)
		free(s[i].buf), free(r[i].buf);
	if (P != 2)
		return;
	if (rank == 0) { /* stays connected while rank 1 fails on its own */
		usleep(300 * 1000);
		return;
	}
	/* held with no work to release it, and held with nothing left to receive */
	scd_log_level = -1;
	char b[8] = {0};
	scd_xfer_t x = {0, b, SCD_XFER_PENDING};
	CHECK_EQ_INT(scd_transport_exchange_v(t, &x, 1, NULL, 0, NULL, TMO_MS), SC_ERR_INVALID);
	h = (held_t){.released = 1};
	double t0 = now_ms();
	CHECK_EQ_INT(scd_transport_exchange_vw(t, &x, 1, NULL, 0, NULL, &wk, TMO_MS),
		     SC_ERR_INVALID);
	CHECK_MSG(now_ms() - t0 < 1000, "a held send waited %.0f ms", now_ms() - t0);
}

UNIT_TEST(transport_tcp_exchange_v_held_sends)
{
	for (int P = 2; P <= 4; P++)
		run_world(P, held_rank, NULL);
}

/* The ring's work runs while it waits (rank 0 joins 200 ms late), the sums stay exact,
 * and a failing work ends the allreduce with its status. */
static int count_work(void *arg)
{
	int *calls = arg;
	return ++*calls < 1000 ? 1 : 0;
}

static int failing_work(void *arg)
{
	(*(int *)arg)++;
	return SC_ERR_PROTOCOL;
}

static void ring_work_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	enum { N = 1 << 18 };
	int32_t *x = malloc(4 * N);
	for (size_t i = 0; i < N; i++)
		x[i] = (int32_t)input_u32(i, rank);
	if (rank == 0)
		usleep(200 * 1000);
	int calls = 0;
	scd_xfer_work_t wk = {count_work, &calls};
	sc_status_t st = scd_transport_allreduce_w(t, x, N, SC_INT32, SC_OP_SUM, &wk, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_transport_error());
	for (size_t i = 0; i < N; i++)
		CHECK_MSG(typed_ok(x, SC_INT32, i, P), "rank %d: sum %zu wrong", rank, i);
	if (rank != 0)
		CHECK_MSG(calls > 0, "rank %d: the work never ran while the ring waited", rank);
	/* every rank's work fails at its first idle poll: the allreduce ends with it */
	if (rank == 0)
		usleep(200 * 1000);
	calls = 0;
	wk = (scd_xfer_work_t){failing_work, &calls};
	st = scd_transport_allreduce_w(t, x, N, SC_INT32, SC_OP_SUM, &wk, TMO_MS);
	if (rank != 0)
		CHECK_MSG(st == SC_ERR_PROTOCOL && calls == 1, "rank %d: %s after %d calls",
			  rank, sc_status_name(st), calls);
	free(x);
}

UNIT_TEST(transport_tcp_allreduce_work_overlaps)
{
	run_world(2, ring_work_rank, NULL);
}

static void limit_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	char buf[100] = {0};
	size_t got = 0;
	if (rank == 0) {
		scd_xfer_t s = {1, buf, sizeof(buf)};
		CHECK_TRUE(scd_transport_exchange_v(t, &s, 1, NULL, 0, NULL, TMO_MS) == SC_OK);
		return;
	}
	scd_log_level = -1;
	scd_xfer_t r = {0, buf, 50};
	sc_status_t st = scd_transport_exchange_v(t, NULL, 0, &r, 1, &got, TMO_MS);
	CHECK_EQ_INT(st, SC_ERR_LIMIT);
	CHECK_MSG(strstr(scd_transport_error(), "rank 0"), "error: %s", scd_transport_error());
	/* The stream is out of step now: later calls fail at once. */
	CHECK_EQ_INT(scd_transport_allreduce_f32(t, (float *)buf, 2, TMO_MS), SC_ERR_LIMIT);
}

UNIT_TEST(transport_tcp_exchange_v_too_large)
{
	run_world(2, limit_rank, NULL);
}

/* ---- failures ----------------------------------------------------------------------- */

static void die_now(int sig)
{
	(void)sig;
	_exit(0);
}

typedef struct {
	int victim;
	int mid_allreduce; /* 0: the victim exits before joining; 1: a timer kills it */
} death_t;

static void death_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	const death_t *d = arg;
	size_t n = 16u << 20;
	float *x = calloc(n, sizeof(float));
	CHECK_TRUE(x != NULL);
	scd_log_level = -1;
	if (rank == d->victim) {
		if (!d->mid_allreduce) {
			usleep(100 * 1000);
			_exit(0);
		}
		signal(SIGALRM, die_now);
		struct itimerval it = {.it_value = {.tv_usec = 20 * 1000}};
		setitimer(ITIMER_REAL, &it, NULL);
		(void)scd_transport_allreduce_f32(t, x, n, TMO_MS);
		_exit(0);
	}
	double t0 = now_ms();
	sc_status_t st = scd_transport_allreduce_f32(t, x, n, 5000);
	double ms = now_ms() - t0;
	char want[32];
	snprintf(want, sizeof(want), "rank %d", d->victim);
	CHECK_MSG(st == SC_ERR_PEER, "rank %d: status %d (%s) after %.0f ms", rank, st,
		  scd_transport_error(), ms);
	CHECK_MSG(strstr(scd_transport_error(), want), "rank %d: error does not name %s: %s",
		  rank, want, scd_transport_error());
	CHECK_MSG(ms < 3000, "rank %d: took %.0f ms to notice", rank, ms);
	/* Stay a while, so that other survivors see the victim fail, not this rank. */
	usleep(500 * 1000);
	free(x);
}

UNIT_TEST_TIMEOUT(transport_tcp_peer_exit_names_rank, 60)
{
	death_t before = {1, 0}, during = {1, 1};
	run_world(3, death_rank, &before);
	run_world(4, death_rank, &before);
	run_world(3, death_rank, &during);
	during.victim = 2;
	run_world(4, death_rank, &during);
}

static void timeout_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	float x[4] = {1, 2, 3, 4};
	if (rank == 1) { /* silent well past the 300 ms, so a busy host's delays still fit */
		usleep(3000 * 1000);
		return;
	}
	scd_log_level = -1;
	double t0 = now_ms();
	sc_status_t st = scd_transport_allreduce_f32(t, x, 4, 300);
	double ms = now_ms() - t0;
	CHECK_EQ_INT(st, SC_ERR_TIMEOUT);
	CHECK_MSG(strstr(scd_transport_error(), "rank 1: no data for 300 ms"), "error: %s",
		  scd_transport_error());
	CHECK_MSG(ms >= 290 && ms < 2800, "timed out after %.0f ms", ms);
	scd_xfer_t s = {1, x, 4};
	CHECK_EQ_INT(scd_transport_exchange(t, &s, 1, NULL, 0, 300), SC_ERR_TIMEOUT);
}

UNIT_TEST(transport_tcp_timeout_names_rank)
{
	run_world(2, timeout_rank, NULL);
}

/* A rank that stays connected but silent (a stopped process) and is then declared gone:
 * the others' calls blocked on it end at once, naming it, not at their timeout. */
typedef struct {
	scd_transport_t *t;
	int rank;
} gone_arg_t;

static void *declare_gone(void *p)
{
	gone_arg_t *g = p;
	usleep(300 * 1000);
	g->t->ops->peer_gone(g->t, g->rank);
	return NULL;
}

static void gone_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	float x[1000] = {0};
	if (rank == P - 1) { /* silent, its connections open, until the others are done */
		usleep(3000 * 1000);
		return;
	}
	scd_log_level = -1;
	gone_arg_t g = {t, P - 1};
	pthread_t th;
	CHECK_TRUE(pthread_create(&th, NULL, declare_gone, &g) == 0);
	double t0 = now_ms();
	sc_status_t st = scd_transport_allreduce_f32(t, x, 1000, 20000);
	double ms = now_ms() - t0;
	pthread_join(th, NULL);
	char want[32];
	snprintf(want, sizeof(want), "rank %d", P - 1);
	CHECK_MSG(st == SC_ERR_PEER, "rank %d: status %d (%s) after %.0f ms", rank, st,
		  scd_transport_error(), ms);
	CHECK_MSG(strstr(scd_transport_error(), want), "rank %d: error does not name %s: %s",
		  rank, want, scd_transport_error());
	CHECK_MSG(ms < 2000, "rank %d: took %.0f ms after the peer was declared gone", rank,
		  ms);
	/* later calls fail at once, naming it again */
	t0 = now_ms();
	CHECK_TRUE(scd_transport_allreduce_f32(t, x, 1000, 20000) != SC_OK);
	CHECK_MSG(now_ms() - t0 < 1000, "a later call took %.0f ms", now_ms() - t0);
	/* Stay a while, so that the other survivors see the silent rank go, not this one. */
	usleep(1000 * 1000);
}

UNIT_TEST_TIMEOUT(transport_tcp_peer_gone_ends_waits, 60)
{
	run_world(2, gone_rank, NULL);
	run_world(3, gone_rank, NULL);
}

/* ---- building the mesh -------------------------------------------------------------- */

typedef struct {
	int rank, size, fd;
	uint16_t *ports;
	const char **addrs;
	uint64_t world;
	int delay_ms;
	int expect; /* 0: succeed and allreduce; else the status the create must fail with */
	const char *text;   /* expected in the error */
	const uint8_t *key; /* of the handshake (NULL: zeros) */
	int protect;	    /* data_protection */
} join_t;

static void join_body(void *p)
{
	join_t *j = p;
	scd_log_level = SCD_LOG_WARN;
	if (j->delay_ms) {
		usleep((useconds_t)j->delay_ms * 1000);
		if (j->fd < 0)
			CHECK_TRUE(scd_tcp_listen("127.0.0.1", j->ports[j->rank], &j->fd,
						  &j->ports[j->rank]) == SC_OK);
	}
	if (j->expect)
		scd_log_level = -1;
	scd_transport_t *t = NULL;
	sc_status_t st = scd_tcp_create(j->fd, j->rank, j->size, j->addrs, j->ports, j->world,
					j->key, j->protect, 0, j->expect ? 3000 : TMO_MS, &t);
	if (j->expect) {
		CHECK_MSG(st == j->expect, "rank %d: create gave %d (%s)", j->rank, st,
			  scd_transport_error());
		CHECK_MSG(strstr(scd_transport_error(), j->text), "error: %s",
			  scd_transport_error());
		return;
	}
	CHECK_MSG(st == SC_OK, "rank %d: create: %s", j->rank, scd_transport_error());
	float x[3] = {1, 2, 3};
	CHECK_TRUE(scd_transport_allreduce_f32(t, x, 3, TMO_MS) == SC_OK);
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(x[i], (i + 1) * j->size);
	scd_transport_destroy(t);
}

static void check_exit(pid_t pid, const char *who)
{
	int status = reap(pid);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (wait status 0x%x)",
		  who, status);
}

/* Starts rank 1 of the world rank 0 (p0, already running) waits in, and checks both. */
static void join_pair_finish(pid_t p0, int *fds, uint16_t *ports, const char **addrs,
			     uint64_t world)
{
	join_t r1 = {1, 2, fds[1], ports, addrs, world, 0, 0, NULL, NULL, 0};
	pid_t p1 = spawn(join_body, &r1);
	close(fds[0]);
	close(fds[1]);
	check_exit(p0, "rank 0");
	check_exit(p1, "rank 1");
}

UNIT_TEST(transport_tcp_refuses_other_worlds)
{
	int fds[2];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	uint64_t world = unit_rng() | 1;
	join_t r0 = {0, 2, fds[0], ports, addrs, world, 0, 0, NULL, NULL, 0};
	pid_t p0 = spawn(join_body, &r0);
	/* Strangers first: another world, then another world size; rank 0 refuses both and
	 * keeps waiting for its real rank 1. */
	join_t stranger = {
	    1, 2, -1, ports, addrs, world + 1, 0, SC_ERR_PEER, "world_id differs", NULL, 0};
	check_exit(spawn(join_body, &stranger), "the rank of another world");
	join_t wrong_size = {
	    1, 3, -1, ports, addrs, world, 0, SC_ERR_PEER, "world size differs", NULL, 0};
	const char *addrs3[3] = {"127.0.0.1", "127.0.0.1", "127.0.0.1"};
	uint16_t ports3[3] = {ports[0], ports[1], 0};
	wrong_size.ports = ports3;
	wrong_size.addrs = addrs3;
	check_exit(spawn(join_body, &wrong_size), "the rank of another world size");
	join_pair_finish(p0, fds, ports, addrs, world);
}

UNIT_TEST(transport_tcp_connect_retries_until_peer_listens)
{
	/* Rank 0 opens its port only 300 ms after rank 1 starts connecting to it. */
	int fds[2];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	close(fds[0]);
	uint64_t world = unit_rng();
	join_t r0 = {0, 2, -1, ports, addrs, world, 300, 0, NULL, NULL, 0};
	join_t r1 = {1, 2, fds[1], ports, addrs, world, 0, 0, NULL, NULL, 0};
	pid_t p1 = spawn(join_body, &r1);
	pid_t p0 = spawn(join_body, &r0);
	close(fds[1]);
	check_exit(p0, "rank 0");
	check_exit(p1, "rank 1");
	/* Nobody listening at all: the connect gives up at the timeout, naming the rank. */
	open_listeners(2, fds, ports, addrs);
	close(fds[0]);
	join_t lone = {1,	  2,	fds[1], ports, addrs, world, 0, SC_ERR_TIMEOUT,
		       "rank 0:", NULL, 0};
	double t0 = now_ms();
	check_exit(spawn(join_body, &lone), "the lone rank 1");
	CHECK_MSG(now_ms() - t0 < 4500, "gave up after %.0f ms", now_ms() - t0);
	close(fds[1]);
}

/* Idle connections to rank 0's data port before its peer joins, more than it keeps
 * pending: it closes them (the oldest first, or after 2 s without a hello) and the world
 * still forms, well before the join timeout. */
UNIT_TEST(transport_tcp_idle_connections_do_not_block_formation)
{
	enum { IDLE = 40 };
	int fds[2], idle[IDLE];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	uint64_t world = unit_rng();
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(ports[0])};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < IDLE; i++) {
		idle[i] = socket(AF_INET, SOCK_STREAM, 0);
		CHECK_TRUE(idle[i] >= 0);
		CHECK_MSG(connect(idle[i], (struct sockaddr *)&sa, sizeof(sa)) == 0,
			  "idle connection %d: %s", i, strerror(errno));
	}
	double t0 = now_ms();
	join_t r0 = {0, 2, fds[0], ports, addrs, world, 0, 0, NULL, NULL, 0};
	pid_t p0 = spawn(join_body, &r0);
	usleep(200 * 1000); /* rank 0 takes the idle connections first */
	join_pair_finish(p0, fds, ports, addrs, world);
	CHECK_MSG(now_ms() - t0 < TMO_MS / 2, "the world formed after %.0f ms", now_ms() - t0);
	for (int i = 0; i < IDLE; i++)
		close(idle[i]);
}

/* A rank holding another secret: it refuses rank 0's proof and fails at once, naming rank
 * 0; rank 0 keeps waiting, and the rank with the right secret then joins. */
UNIT_TEST(transport_tcp_refuses_other_secrets)
{
	int fds[2];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	uint64_t world = unit_rng();
	uint8_t key[32], other[32];
	for (int i = 0; i < 32; i++)
		key[i] = other[i] = (uint8_t)unit_rng();
	other[5] ^= 1;
	join_t r0 = {0, 2, fds[0], ports, addrs, world, 0, 0, NULL, key, 0};
	pid_t p0 = spawn(join_body, &r0);
	join_t impostor = {1,
			   2,
			   -1,
			   ports,
			   addrs,
			   world,
			   0,
			   SC_ERR_PEER,
			   "(rank 0) did not prove that it holds the job secret",
			   other,
			   0};
	check_exit(spawn(join_body, &impostor), "the rank of another secret");
	/* without a secret (an all-zero key) is another secret too */
	impostor.key = NULL;
	check_exit(spawn(join_body, &impostor), "the rank without a secret");
	join_t r1 = {1, 2, fds[1], ports, addrs, world, 0, 0, NULL, key, 0};
	pid_t p1 = spawn(join_body, &r1);
	close(fds[0]);
	close(fds[1]);
	check_exit(p0, "rank 0");
	check_exit(p1, "rank 1");
}

/* Reads exactly len bytes from fd within 5 s; returns what recv last returned. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t got = 0;
	ssize_t n = 1;
	while (got < len && (n = recv(fd, (char *)buf + got, len - got, 0)) > 0)
		got += (size_t)n;
	return got == len ? (ssize_t)got : n;
}

/* A connection that passes the hello with a wrong proof of the secret (a stranger who
 * knows the world id and a rank): rank 0 answers its proof with a refusal and closes it,
 * before it reads anything else; the real rank 1 then joins. */
UNIT_TEST(transport_tcp_closes_wrong_proof)
{
	int fds[2];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	uint64_t world = unit_rng();
	uint8_t key[32];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)unit_rng();
	join_t r0 = {0, 2, fds[0], ports, addrs, world, 0, 0, NULL, key, 0};
	pid_t p0 = spawn(join_body, &r0);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(ports[0])};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_TRUE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	/* the hello: magic "SCDT", protocol 3, world id, rank 1, size 2, data_protection
	 * none, no cipher, a nonce */
	uint8_t b[96] = {0x53, 0x43, 0x44, 0x54, 3};
	uint64_t w = htole64(world);
	memcpy(b + 8, &w, 8);
	b[16] = 1;
	b[20] = 2;
	for (int i = 32; i < 64; i++)
		b[i] = (uint8_t)unit_rng();
	CHECK_TRUE(send(fd, b, 64, 0) == 64);
	CHECK_TRUE(read_full(fd, b, 96) == 96);
	CHECK_MSG(b[4] == 0 && b[16] == 0, "the hello was refused (code %u)", b[4]);
	for (int i = 0; i < 32; i++) /* a proof of no secret */
		b[i] = (uint8_t)unit_rng();
	CHECK_TRUE(send(fd, b, 32, 0) == 32);
	CHECK_TRUE(read_full(fd, b, 4) == 4);
	CHECK_MSG(b[0] != 0, "a wrong proof was answered with code 0");
	CHECK_MSG(read_full(fd, b, 1) == 0, "the connection stayed open after a wrong proof");
	close(fd);
	join_t r1 = {1, 2, fds[1], ports, addrs, world, 0, 0, NULL, key, 0};
	pid_t p1 = spawn(join_body, &r1);
	close(fds[0]);
	close(fds[1]);
	check_exit(p0, "rank 0");
	check_exit(p1, "rank 1");
}

/* A connection speaking protocol 2, whose hello (56 bytes) is shorter than this
 * protocol's: rank 0 refuses it at once for its protocol (ack code 1), not after the hello
 * deadline; the real rank 1 then joins. */
UNIT_TEST(transport_tcp_refuses_older_protocol_at_once)
{
	int fds[2];
	uint16_t ports[2];
	const char *addrs[2];
	open_listeners(2, fds, ports, addrs);
	uint64_t world = unit_rng();
	join_t r0 = {0, 2, fds[0], ports, addrs, world, 0, 0, NULL, NULL, 0};
	pid_t p0 = spawn(join_body, &r0);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(ports[0])};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_TRUE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	uint8_t b[96] = {0x53, 0x43, 0x44, 0x54, 2}; /* "SCDT", protocol 2 */
	uint64_t w = htole64(world);
	memcpy(b + 8, &w, 8);
	b[16] = 1;
	b[20] = 2;
	double t0 = now_ms();
	CHECK_TRUE(send(fd, b, 56, 0) == 56);
	CHECK_TRUE(read_full(fd, b, 8) == 8);
	double dt = now_ms() - t0;
	CHECK_MSG(b[4] == 1, "an older protocol's hello got code %u, not 1 (protocol)", b[4]);
	CHECK_MSG(dt < 1000, "the refusal took %.0f ms (the hello deadline is 2 s)", dt);
	close(fd);
	join_pair_finish(p0, fds, ports, addrs, world);
}

/* ---- probe -------------------------------------------------------------------------- */

static void measure_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	double *out = arg;
	double alpha = -1, beta = -1;
	sc_status_t st = t->ops->measure(t, 1u << 20, &alpha, &beta, TMO_MS);
	CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_transport_error());
	if (P == 1) {
		CHECK_TRUE(alpha == 0 && beta == 0);
		return;
	}
	CHECK_MSG(alpha > 0 && alpha < 0.1, "alpha %g", alpha);
	CHECK_MSG(beta > 0 && beta < 1e-6, "beta %g", beta);
	out[2 * rank] = alpha;
	out[2 * rank + 1] = beta;
}

UNIT_TEST(transport_tcp_measure_agrees_on_every_rank)
{
	double *out = shared_map(sizeof(double) * 2 * MAX_P);
	run_world(1, measure_rank, out);
	for (int P = 2; P <= MAX_P; P += 3) {
		run_world(P, measure_rank, out);
		for (int r = 1; r < P; r++)
			CHECK_MSG(out[2 * r] == out[0] && out[2 * r + 1] == out[1],
				  "P = %d: rank %d measured (%g, %g), rank 0 (%g, %g)", P, r,
				  out[2 * r], out[2 * r + 1], out[0], out[1]);
	}
	munmap(out, sizeof(double) * 2 * MAX_P);
}

/* ---- the registry and the backend's world formation ----------------------------------- */

UNIT_TEST(transport_registry_lookup)
{
	const scd_transport_ops_t *ops = NULL;
	CHECK_EQ_INT(scd_transport_lookup("tcp", &ops), SC_OK);
	CHECK_TRUE(ops && !strcmp(ops->name, "tcp"));
	CHECK_TRUE(ops->prepare && ops->create && ops->release && ops->describe);
	ops = NULL;
	CHECK_EQ_INT(scd_transport_lookup("auto", &ops),
		     SC_OK); /* tcp while buffers are host */
	CHECK_TRUE(ops && !strcmp(ops->name, "tcp"));
	CHECK_EQ_INT(scd_transport_get(SCD_TRANSPORT_TCP, &ops), SC_OK);
	CHECK_TRUE(!strcmp(ops->name, scd_transport_kind_name(SCD_TRANSPORT_TCP)));
	CHECK_TRUE(!strcmp(scd_transport_kind_name(SCD_TRANSPORT_NCCL), "nccl"));
	/* unknown and unavailable names fail, naming them */
	ops = NULL;
	CHECK_EQ_INT(scd_transport_lookup("carrier-pigeon", &ops), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL);
	CHECK_MSG(strstr(scd_transport_error(), "unknown transport 'carrier-pigeon'"),
		  "error: %s", scd_transport_error());
	CHECK_EQ_INT(scd_transport_lookup("", &ops), SC_ERR_UNSUPPORTED);
	CHECK_EQ_INT(scd_transport_get(SCD_TRANSPORT_COUNT, &ops), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL);
	/* a build without NCCL (only a GPU build links scd_transport_nccl_ops) names it */
	if (scd_transport_get(SCD_TRANSPORT_NCCL, &ops) != SC_OK) {
		CHECK_EQ_INT(scd_transport_lookup("nccl", &ops), SC_ERR_UNSUPPORTED);
		CHECK_MSG(strstr(scd_transport_error(), "transport 'nccl' is not built"),
			  "error: %s", scd_transport_error());
		CHECK_TRUE(ops == NULL);
	}
}

UNIT_TEST(transport_tcp_prepare_blob)
{
	const scd_transport_ops_t *ops;
	CHECK_EQ_INT(scd_transport_lookup("tcp", &ops), SC_OK);
	scd_transport_cfg_t cfg = {.addr = "127.0.0.1", .port = 0};
	scd_transport_endpoint_t *ep = NULL;
	CHECK_EQ_INT(scd_transport_prepare(ops, &cfg, &ep), SC_OK);
	CHECK_TRUE(ep && ep->ops == ops && ep->blob_len > 0);
	char addr[64];
	uint16_t port = 0;
	CHECK_EQ_INT(ops->describe(ep->blob, ep->blob_len, addr, sizeof(addr), &port), SC_OK);
	CHECK_MSG(!strcmp(addr, "127.0.0.1") && port != 0, "blob says %s:%u", addr, port);
	/* the port is really bound: a second endpoint on it fails, naming it */
	scd_transport_cfg_t again = {.addr = "127.0.0.1", .port = port};
	scd_transport_endpoint_t *ep2 = NULL;
	scd_log_level = -1;
	CHECK_TRUE(scd_transport_prepare(ops, &again, &ep2) != SC_OK && ep2 == NULL);
	char want[32];
	snprintf(want, sizeof(want), "127.0.0.1:%u", port);
	CHECK_MSG(strstr(scd_transport_error(), want), "error: %s", scd_transport_error());
	scd_transport_release(ep);
	/* malformed blobs */
	unsigned char bad[80] = {1, 2, 'a', 0, 'b'};
	CHECK_EQ_INT(ops->describe(bad, 1, addr, sizeof(addr), &port), SC_ERR_PROTOCOL);
	CHECK_EQ_INT(ops->describe(bad, 5, addr, sizeof(addr), &port), SC_ERR_PROTOCOL);
	memset(bad + 2, 'x', sizeof(bad) - 2);
	CHECK_EQ_INT(ops->describe(bad, sizeof(bad), addr, sizeof(addr), &port),
		     SC_ERR_PROTOCOL);
	CHECK_EQ_INT(ops->describe(bad, 4, NULL, 0, &port), SC_OK);
	CHECK_EQ_INT(port, 0x0201);
}

UNIT_TEST(transport_boot_blobs)
{
	const scd_transport_ops_t *ops;
	CHECK_EQ_INT(scd_transport_lookup("tcp", &ops), SC_OK);
	scd_transport_cfg_t cfg = {.addr = "127.0.0.1"};
	scd_transport_endpoint_t *ep = NULL;
	CHECK_EQ_INT(scd_transport_prepare(ops, &cfg, &ep), SC_OK);
	scd_transport_boot_t b;
	CHECK_EQ_INT(scd_transport_boot_init(&b, ep, 3, 2, 7),
		     SC_ERR_INVALID); /* rank >= size */
	CHECK_EQ_INT(scd_transport_boot_init(&b, ep, 1, 2, 7), SC_OK);
	CHECK_TRUE(b.ep == ep && b.blobs[1].len == ep->blob_len);
	CHECK_TRUE(!memcmp(b.blobs[1].data, ep->blob, ep->blob_len) && b.blobs[0].len == 0);
	static unsigned char big[SCD_TRANSPORT_BLOB_MAX + 1];
	CHECK_EQ_INT(scd_transport_boot_set_blob(&b, 0, big, sizeof(big)), SC_ERR_LIMIT);
	CHECK_EQ_INT(scd_transport_boot_set_blob(&b, 2, big, 4), SC_ERR_INVALID);
	/* rank 0's blob is malformed: create fails naming it, and still consumes the
	 * endpoint */
	CHECK_EQ_INT(scd_transport_boot_set_blob(&b, 0, big, 1), SC_OK);
	scd_transport_t *t = NULL;
	scd_log_level = -1;
	CHECK_EQ_INT(scd_transport_create(&b, 0, 1000, &t), SC_ERR_PROTOCOL);
	CHECK_TRUE(t == NULL && b.ep == NULL);
	CHECK_MSG(strstr(scd_transport_error(), "rank 0: malformed tcp bootstrap blob"),
		  "error: %s", scd_transport_error());
	scd_transport_boot_clear(&b);
	CHECK_TRUE(b.blobs == NULL);
}

/* The daemon's way: endpoints prepared through the ops, meshes created from the blobs. */
typedef struct {
	unit_mesh_t *mesh;
	int rank;
} blob_rank_t;

static void blob_rank_body(void *p)
{
	blob_rank_t *c = p;
	scd_log_level = SCD_LOG_WARN;
	int P = c->mesh->P;
	scd_transport_t *t = NULL;
	sc_status_t st = unit_mesh_create(c->mesh, c->rank, 0, TMO_MS, &t);
	CHECK_MSG(st == SC_OK, "rank %d: create: %s", c->rank, scd_transport_error());
	CHECK_TRUE(t->rank == c->rank && t->size == P && !strcmp(t->ops->name, "tcp"));
	float x[5];
	for (int i = 0; i < 5; i++)
		x[i] = input((size_t)i, c->rank);
	CHECK_EQ_INT(scd_transport_allreduce_f32(t, x, 5, TMO_MS), SC_OK);
	for (int i = 0; i < 5; i++) {
		float want = 0;
		for (int r = 0; r < P; r++)
			want += input((size_t)i, r);
		CHECK_MSG(x[i] == want, "rank %d: x[%d] = %g, want %g", c->rank, i, x[i], want);
	}
	scd_transport_destroy(t);
}

UNIT_TEST(transport_tcp_create_from_blobs)
{
	for (int P = 1; P <= 4; P += 3) {
		unit_mesh_t mesh;
		CHECK_MSG(unit_mesh_prepare(&mesh, "auto", P, unit_rng()) == SC_OK,
			  "prepare: %s", scd_transport_error());
		pid_t pids[MAX_P];
		for (int r = 0; r < P; r++) {
			blob_rank_t c = {&mesh, r};
			pids[r] = spawn(blob_rank_body, &c);
		}
		unit_mesh_release(&mesh);
		for (int r = 0; r < P; r++) {
			char who[32];
			snprintf(who, sizeof(who), "P = %d: rank %d", P, r);
			check_exit(pids[r], who);
		}
	}
}
