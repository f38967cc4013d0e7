/*
 * test_transport_seal.c: the tcp data plane's record layer (transport/tcp_seal.h). Records
 * sealed and opened in memory for each mode and cipher, tampered records refused; then
 * real meshes of forked processes on loopback (tests/unit/unit_mesh.h) with
 * data_protection = integrity and encrypt: exchange, exchange_v and the ring allreduce
 * exact across record boundaries, a flipped byte, a dropped record and a replayed record
 * written straight onto a connection each failing the receiver with the sender's rank
 * named, and a mesh whose ranks disagree on data_protection refused.
 */
#include "unit.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/tcp_internal.h"
#include "transport/tcp_seal.h"
#include "unit_mesh.h"
#include "util/log.h"

#define TMO_MS 20000
#define REC    SCD_SEAL_RECORD_BYTES

static const size_t sizes[] = {0, 1, 7, REC - 1, REC, REC + 1, 3 * REC + 5, (1u << 20) + 3};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static unsigned char byte_of(size_t i, int from, int to)
{
	return (unsigned char)(i * 131 + (size_t)from * 7 + (size_t)to * 29 + (i >> 9));
}

/* ---- records in memory -------------------------------------------------------------- */

static void pair(int mode, int cipher, scd_seal_t **a, scd_seal_t **b)
{
	uint8_t k1[32], k2[32];
	for (int i = 0; i < 32; i++)
		k1[i] = (uint8_t)unit_rng(), k2[i] = (uint8_t)unit_rng();
	*a = scd_seal_new(mode, cipher, k1, k2);
	*b = scd_seal_new(mode, cipher, k2, k1);
	CHECK_TRUE(*a && *b);
}

/* The k-th (0..3) of the sealing modes and ciphers; 0 when this CPU cannot run it. */
static int combo(int k, int *mode, int *cipher)
{
	*cipher = k / 2;
	*mode = SCD_SEAL_INTEGRITY + k % 2;
	return *cipher != SCD_SEAL_AES256GCM || scd_seal_aes_available();
}

UNIT_TEST(transport_seal_records)
{
	static unsigned char plain[REC], rec[2][REC + 64], out[REC];
	for (size_t i = 0; i < REC; i++)
		plain[i] = byte_of(i, 1, 2);
	for (int c = 0, mode, cipher; c < 4; c++) {
		if (!combo(c, &mode, &cipher))
			continue;
		scd_seal_t *a, *b;
		pair(mode, cipher, &a, &b);
		const size_t lens[] = {0, 1, 100, REC - 1, REC};
		for (size_t k = 0; k < 5; k++) {
			size_t len = lens[k], n = scd_seal_record(a, plain, len, rec[0]);
			CHECK_EQ_INT(n, len + SCD_SEAL_HEAD_BYTES + SCD_SEAL_TAG_BYTES);
			/* integrity leaves the payload readable, encrypt does not */
			if (len >= 100)
				CHECK_TRUE((memcmp(rec[0] + SCD_SEAL_HEAD_BYTES, plain, len) ==
					    0) == (mode == SCD_SEAL_INTEGRITY));
			CHECK_EQ_INT(scd_seal_open(b, rec[0], n, out), (ssize_t)len);
			CHECK_TRUE(memcmp(out, plain, len) == 0);
		}
		/* altered (header, payload, tag), replayed, reordered, cut short */
		size_t n = scd_seal_record(a, plain, 1000, rec[0]);
		const size_t flips[] = {0, SCD_SEAL_HEAD_BYTES + 500, n - 1};
		for (int f = 0; f < 3; f++) {
			memcpy(rec[1], rec[0], n);
			rec[1][flips[f]] ^= 0x10;
			CHECK_MSG(scd_seal_open(b, rec[1], n, out) < 0,
				  "%s/%s: flipped byte %zu passed", scd_seal_mode_name(mode),
				  scd_seal_cipher_name(cipher), flips[f]);
		}
		CHECK_TRUE(scd_seal_open(b, rec[0], n - 1, out) < 0);
		memcpy(rec[1], rec[0], n);
		CHECK_EQ_INT(scd_seal_open(b, rec[0], n, out), 1000);
		CHECK_TRUE(scd_seal_open(b, rec[1], n, out) < 0); /* replayed */
		size_t n1 = scd_seal_record(a, plain, 10, rec[0]);
		size_t n2 = scd_seal_record(a, plain, 10, rec[1]);
		CHECK_TRUE(scd_seal_open(b, rec[1], n2, out) < 0); /* reordered */
		CHECK_EQ_INT(scd_seal_open(b, rec[0], n1, out), 10);
		CHECK_EQ_INT(scd_seal_open(b, rec[1], n2, out), 10);
		scd_seal_free(a);
		scd_seal_free(b);
	}
}

/* ---- meshes ----------------------------------------------------------------------------- */

typedef void (*rank_fn)(scd_transport_t *t, int rank, int P, void *arg);

typedef struct {
	unit_mesh_t *m;
	int rank, protect;
	const uint8_t *key;
	rank_fn fn;
	void *arg;
} child_t;

static pid_t spawn(const child_t *c)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	scd_log_level = -1;
	c->m->protect = c->protect;
	if (c->key)
		memcpy(c->m->key, c->key, 32);
	scd_transport_t *t = NULL;
	sc_status_t st = unit_mesh_create(c->m, c->rank, 0, TMO_MS, &t);
	c->fn(st == SC_OK ? t : NULL, c->rank, c->m->P, c->arg);
	if (t)
		scd_transport_destroy(t);
	_exit(0);
}

static void check_exit(pid_t pid, const char *what)
{
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status 0x%x)",
		  what, status);
}

/* Runs fn on every rank of a fresh P-rank mesh with data_protection protect[rank]. */
static void run_mesh(int P, const int *protect, rank_fn fn, void *arg)
{
	unit_mesh_t m;
	uint8_t key[32];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)unit_rng() | 1;
	CHECK_TRUE(unit_mesh_prepare(&m, "tcp", P, unit_rng()) == SC_OK);
	pid_t pids[UNIT_MESH_MAX_P];
	for (int r = 0; r < P; r++) {
		child_t c = {&m, r, protect[r], key, fn, arg};
		pids[r] = spawn(&c);
	}
	unit_mesh_release(&m);
	char what[32];
	for (int r = 0; r < P; r++) {
		snprintf(what, sizeof(what), "rank %d", r);
		check_exit(pids[r], what);
	}
}

static void created(scd_transport_t *t, int rank)
{
	CHECK_MSG(t, "rank %d: create: %s", rank, scd_transport_error());
}

/* Every rank sends every size to every other rank, in one exchange and in one
 * exchange_v, and checks each byte; then allreduces float vectors around the ring's
 * chunks and records. */
static void round_trip(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)arg;
	created(t, rank);
	int n = (int)N_SIZES * P;
	scd_xfer_t *s = calloc((size_t)n, sizeof(*s)), *r = calloc((size_t)n, sizeof(*r));
	size_t *got = calloc((size_t)n, sizeof(size_t));
	CHECK_TRUE(s && r && got);
	for (int framed = 0; framed < 2; framed++) {
		int ns = 0;
		for (int p = 0; p < P; p++)
			for (size_t k = 0; k < N_SIZES && p != rank; k++, ns++) {
				unsigned char *b = malloc(sizes[k] + 1),
					      *c = malloc(sizes[k] + 9);
				for (size_t i = 0; i < sizes[k]; i++)
					b[i] = byte_of(i + k, rank, p);
				s[ns] = (scd_xfer_t){p, b, sizes[k]};
				r[ns] = (scd_xfer_t){p, c, sizes[k] + (framed ? 9 : 0)};
			}
		sc_status_t st = framed ? scd_transport_exchange_v(t, s, ns, r, ns, got, TMO_MS)
					: scd_transport_exchange(t, s, ns, r, ns, TMO_MS);
		CHECK_MSG(st == SC_OK, "rank %d: exchange%s: %s", rank, framed ? "_v" : "",
			  scd_transport_error());
		for (int i = 0; i < ns; i++) {
			size_t len = s[i].bytes; /* the same sizes, in the same order */
			if (framed)
				CHECK_EQ_INT(got[i], len);
			const unsigned char *c = r[i].buf;
			for (size_t j = 0; j < len; j++)
				if (c[j] !=
				    byte_of(j + (size_t)(i % (int)N_SIZES), r[i].peer, rank))
					CHECK_MSG(0,
						  "rank %d: byte %zu of %zu from rank %d wrong",
						  rank, j, len, r[i].peer);
			free(s[i].buf);
			free(r[i].buf);
		}
	}
	const size_t ns_f[] = {0,
			       1,
			       (size_t)P,
			       REC / 4 - 1,
			       REC / 4,
			       REC / 4 + 1,
			       (REC / 4) * (size_t)P + 1,
			       (1u << 18) + 3};
	for (size_t k = 0; k < sizeof(ns_f) / sizeof(ns_f[0]); k++) {
		size_t len = ns_f[k];
		float *x = malloc(len * sizeof(float) + 4);
		for (size_t i = 0; i < len; i++)
			x[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
		CHECK_MSG(scd_transport_allreduce_f32(t, x, len, TMO_MS) == SC_OK,
			  "rank %d: allreduce of %zu: %s", rank, len, scd_transport_error());
		for (size_t i = 0; i < len; i++) {
			float want = 0;
			for (int q = 0; q < P; q++)
				want += (float)((int)((i * 7 + (size_t)q * 13) % 17) - 8);
			if (x[i] != want)
				CHECK_MSG(0, "rank %d: allreduce of %zu: [%zu] = %g, not %g",
					  rank, len, i, x[i], want);
		}
		/* the same sums over a 16-bit wire: the ring's 16-bit copy goes through the
		 * records too (small integers are exact in fp16 and bf16) */
		for (uint32_t wire = SC_WIRE_FP16; wire <= SC_WIRE_BF16 && len; wire++) {
			for (size_t i = 0; i < len; i++)
				x[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
			CHECK_MSG(t->ops->allreduce_wire16(t, x, len, wire, NULL, TMO_MS) ==
				      SC_OK,
				  "rank %d: %s allreduce of %zu: %s", rank, sc_wire_name(wire),
				  len, scd_transport_error());
			for (size_t i = 0; i < len; i++) {
				float want = 0;
				for (int q = 0; q < P; q++)
					want +=
					    (float)((int)((i * 7 + (size_t)q * 13) % 17) - 8);
				if (x[i] != want)
					CHECK_MSG(
					    0,
					    "rank %d: %s allreduce of %zu: [%zu] = %g, not %g",
					    rank, sc_wire_name(wire), len, i, x[i], want);
			}
		}
		free(x);
	}
	free(s);
	free(r);
	free(got);
}

UNIT_TEST_TIMEOUT(transport_seal_round_trip, 240)
{
	for (int mode = SCD_SEAL_INTEGRITY; mode <= SCD_SEAL_ENCRYPT; mode++)
		for (int P = 2; P <= 3; P++) {
			int protect[3] = {mode, mode, mode};
			run_mesh(P, protect, round_trip, NULL);
		}
}

/* What rank 0 writes onto its connection to rank 1 beside the record layer. */
enum { FLIP, DROP, REPLAY, OVERSIZE };

static void tamper(scd_transport_t *tr, int rank, int P, void *arg)
{
	(void)P;
	created(tr, rank);
	int how = *(int *)arg;
	scd_tcp_t *t = (scd_tcp_t *)tr;
	unsigned char msg[100], rec[200];
	memset(msg, 0x5a, sizeof(msg));
	scd_xfer_t x = {1 - rank, msg, sizeof(msg)};
	if (rank == 0) {
		size_t n = scd_seal_record(t->seal[1], msg, sizeof(msg), rec);
		if (how == FLIP)
			rec[SCD_SEAL_HEAD_BYTES + 17] ^= 4;
		if (how == OVERSIZE) /* a length over the limit: refused before buffering */
			memset(rec, 0xff, SCD_SEAL_HEAD_BYTES);
		if (how != DROP)
			CHECK_TRUE(send(t->fds[1], rec, n, 0) == (ssize_t)n);
		if (how == REPLAY)
			CHECK_TRUE(send(t->fds[1], rec, n, 0) == (ssize_t)n);
		if (how == DROP) /* the next record goes out with the next number */
			CHECK_TRUE(scd_transport_exchange(tr, &x, 1, NULL, 0, TMO_MS) == SC_OK);
		/* stay until rank 1 has judged and closed */
		struct pollfd pf = {.fd = t->fds[1], .events = POLLRDHUP};
		(void)poll(&pf, 1, TMO_MS);
		return;
	}
	sc_status_t st = scd_transport_exchange(tr, NULL, 0, &x, 1, TMO_MS);
	if (how == REPLAY) { /* the first copy is a good record */
		CHECK_MSG(st == SC_OK, "the original record failed: %s", scd_transport_error());
		st = scd_transport_exchange(tr, NULL, 0, &x, 1, TMO_MS);
	}
	CHECK_MSG(st == SC_ERR_PEER, "rank 1 got %d (%s)", st, scd_transport_error());
	CHECK_MSG(strstr(scd_transport_error(),
			 how == OVERSIZE ? "data from rank 0 is not a record"
					 : "data from rank 0 failed its integrity check"),
		  "error: %s", scd_transport_error());
	/* the transport stays failed */
	CHECK_TRUE(scd_transport_exchange(tr, NULL, 0, &x, 1, TMO_MS) == SC_ERR_PEER);
	CHECK_MSG(strstr(scd_transport_error(), "transport unusable since"), "error: %s",
		  scd_transport_error());
}

UNIT_TEST(transport_seal_tampering_names_rank)
{
	for (int mode = SCD_SEAL_INTEGRITY; mode <= SCD_SEAL_ENCRYPT; mode++)
		for (int how = FLIP; how <= OVERSIZE; how++) {
			int protect[2] = {mode, mode};
			run_mesh(2, protect, tamper, &how);
		}
}

/* Rank 1 of encrypt connects to rank 0 of integrity: refused, and it says why. */
static void mismatch(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)P, (void)arg, (void)rank;
	CHECK_TRUE(!t);
	CHECK_MSG(strstr(scd_transport_error(),
			 "data_protection differs (rank 0: integrity, this rank: encrypt)"),
		  "error: %s", scd_transport_error());
}

UNIT_TEST(transport_seal_mode_mismatch_refused)
{
	unit_mesh_t m;
	CHECK_TRUE(unit_mesh_prepare(&m, "tcp", 2, unit_rng()) == SC_OK);
	uint8_t key[32];
	memset(key, 7, sizeof(key));
	/* rank 0, with a short timeout: it refuses rank 1 and keeps waiting for the right
	 * peer until then */
	pid_t p0 = fork();
	CHECK_TRUE(p0 >= 0);
	if (p0 == 0) {
		scd_log_level = -1;
		m.protect = SCD_SEAL_INTEGRITY;
		memcpy(m.key, key, 32);
		scd_transport_t *t = NULL;
		sc_status_t st = unit_mesh_create(&m, 0, 0, 2000, &t);
		CHECK_MSG(st == SC_ERR_TIMEOUT, "rank 0: %d (%s)", st, scd_transport_error());
		_exit(0);
	}
	child_t c1 = {&m, 1, SCD_SEAL_ENCRYPT, key, mismatch, NULL};
	pid_t p1 = spawn(&c1);
	unit_mesh_release(&m);
	check_exit(p1, "rank 1");
	check_exit(p0, "rank 0");
}

static void no_secret(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)P, (void)arg, (void)rank;
	CHECK_TRUE(!t);
	CHECK_MSG(strstr(scd_transport_error(), "needs the job secret"), "error: %s",
		  scd_transport_error());
}

UNIT_TEST(transport_seal_needs_secret)
{
	unit_mesh_t m;
	CHECK_TRUE(unit_mesh_prepare(&m, "tcp", 1, unit_rng()) == SC_OK);
	child_t c = {&m, 0, SCD_SEAL_ENCRYPT, NULL, no_secret, NULL}; /* an all-zero key */
	pid_t p = spawn(&c);
	unit_mesh_release(&m);
	check_exit(p, "rank 0");
	CHECK_EQ_INT(scd_seal_mode_parse("integrity"), SCD_SEAL_INTEGRITY);
	CHECK_EQ_INT(scd_seal_mode_parse("Encrypt"), -1);
}

/* One exchange sends ten messages, gathered into one record; the receiver takes them in
 * two exchanges, so the second finds its bytes opened and waiting in the record layer with
 * nothing more on the socket: it must finish at once, not wait for a poll event. */
static void split(scd_transport_t *t, int rank, int P, void *arg)
{
	(void)P, (void)arg;
	created(t, rank);
	unsigned char b[10][100];
	scd_xfer_t x[10];
	for (int i = 0; i < 10; i++) {
		memset(b[i], rank ? 0 : i + 1, sizeof(b[i]));
		x[i] = (scd_xfer_t){1 - rank, b[i], sizeof(b[i])};
	}
	if (rank == 0) {
		CHECK_TRUE(scd_transport_exchange(t, x, 10, NULL, 0, TMO_MS) == SC_OK);
		CHECK_TRUE(scd_transport_exchange(t, NULL, 0, x, 1, TMO_MS) == SC_OK);
		return;
	}
	CHECK_TRUE(scd_transport_exchange(t, NULL, 0, x, 3, TMO_MS) == SC_OK);
	CHECK_TRUE(scd_transport_exchange(t, NULL, 0, x + 3, 7, 1000) == SC_OK);
	for (int i = 0; i < 10; i++)
		CHECK_MSG(b[i][0] == i + 1 && b[i][99] == i + 1, "message %d: %u", i, b[i][0]);
	CHECK_TRUE(scd_transport_exchange(t, x, 1, NULL, 0, TMO_MS) == SC_OK);
}

UNIT_TEST(transport_seal_split_receives)
{
	int protect[2] = {SCD_SEAL_ENCRYPT, SCD_SEAL_ENCRYPT};
	run_mesh(2, protect, split, NULL);
}

/* The socket path with each cipher: a stream of records over a socket pair, sent in
 * uneven pieces by a sender that re-offers what a full socket did not take, received in
 * other uneven pieces, arrives whole and in order. */
UNIT_TEST(transport_seal_stream_each_cipher)
{
	const size_t total = 3u << 20;
	unsigned char *src = malloc(total), *dst = malloc(total);
	CHECK_TRUE(src && dst);
	for (size_t i = 0; i < total; i++)
		src[i] = byte_of(i, 3, 4);
	for (int c = 0, mode, cipher; c < 4; c++) {
		if (!combo(c, &mode, &cipher))
			continue;
		int sp[2];
		CHECK_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
		scd_seal_t *a, *b;
		pair(mode, cipher, &a, &b);
		memset(dst, 0, total);
		size_t sent = 0, got = 0;
		while (got < total) {
			size_t piece = 1 + unit_rng_below(200000);
			if (sent < total) {
				struct iovec iov[2] = {{src + sent, (total - sent) / 2},
						       {src + sent + (total - sent) / 2,
							total - sent - (total - sent) / 2}};
				ssize_t w = scd_seal_send(a, sp[0], iov, 2);
				CHECK_MSG(w >= 0 || errno == EAGAIN, "send: %s",
					  strerror(errno));
				sent += w > 0 ? (size_t)w : 0;
			}
			if (piece > total - got)
				piece = total - got;
			ssize_t n = scd_seal_recv(b, sp[1], dst + got, piece);
			CHECK_MSG(n > 0 || (n < 0 && errno == EAGAIN), "recv: %zd %s", n,
				  strerror(errno));
			got += n > 0 ? (size_t)n : 0;
		}
		CHECK_MSG(memcmp(src, dst, total) == 0, "%s/%s: the stream differs",
			  scd_seal_mode_name(mode), scd_seal_cipher_name(cipher));
		CHECK_EQ_INT(scd_seal_ready(b), 0);
		scd_seal_free(a);
		scd_seal_free(b);
		close(sp[0]);
		close(sp[1]);
	}
	free(src);
	free(dst);
}
