/*
 * test_nccl.c: the nccl transport (transport/nccl.c) and the choice of GPU buffers'
 * transport (engine/gpunet.c) between real processes. NCCL is stood in by
 * build/lib/libnccl-host.so (tests/ncclhost/), the cuda device by the host build of the
 * GPU library (build/lib/libsparsecomm-cuda-host.so), whose device memory is host memory;
 * tests that need either skip, saying why, where it was not built. Each rank is a forked
 * child with a tcp mesh (tests/unit/unit_mesh.h), as the daemon has, and takes its nccl
 * transport from scd_gpunet_pick.
 */
#include "unit.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/gpunet.h"
#include "transport/transport.h"
#include "unit_mesh.h"
#include "util/log.h"

#define NCCL_P_MAX 4
#define NCCL_TMO   20000

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* build/lib/NAME next to this runner, or NULL when it does not exist. */
static const char *lib_path(const char *name)
{
	static char paths[2][PATH_MAX];
	static int k;
	char exe[PATH_MAX - 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	char *p = paths[k++ & 1];
	snprintf(p, PATH_MAX, "%s/../lib/%s", exe, name);
	return access(p, R_OK) == 0 ? p : NULL;
}

/* Points the daemon's loaders at the stand-ins, or skips. */
static void use_stand_ins(void)
{
	const char *nccl = lib_path("libnccl-host.so");
	const char *cuda = lib_path("libsparsecomm-cuda-host.so");
	if (!nccl)
		unit_skip("build/lib/libnccl-host.so is not built (needs the CUDA toolkit's "
			  "nccl.h)");
	if (!cuda)
		unit_skip("build/lib/libsparsecomm-cuda-host.so is not built (needs CCCL)");
	setenv("SPARSECOMM_NCCL_LIB", nccl, 1);
	setenv("SPARSECOMM_CUDA_LIB", cuda, 1);
	setenv("NCCL_HOST_TIMEOUT_MS", "20000", 1);
}

typedef void (*nccl_fn)(scd_transport_t *mesh, scd_transport_t *t, int rank, int P,
			void *shared);

/* Runs fn on P forked ranks, each with its tcp mesh and the transport gpunet picks for
 * want; returns the ranks' wait statuses in st[]. */
static void run_ranks(int P, const char *want, nccl_fn fn, void *shared, int *st)
{
	unit_mesh_t mesh;
	pid_t pid[NCCL_P_MAX];
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	fflush(NULL);
	for (int r = 0; r < P; r++) {
		pid[r] = fork();
		CHECK_TRUE(pid[r] >= 0);
		if (pid[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			scd_log_level = SCD_LOG_WARN;
			scd_transport_t *m = NULL;
			sc_status_t s = unit_mesh_create(&mesh, r, 0, NCCL_TMO, &m);
			CHECK_MSG(s == SC_OK, "rank %d: mesh: %s", r, scd_transport_error());
			scd_gpunet_t *g = NULL;
			CHECK_TRUE(scd_gpunet_create(want, 0, &g) == SC_OK);
			scd_transport_t *t = NULL;
			double a = 0, b = 0;
			char err[512] = "";
			s = scd_gpunet_pick(g, m, NCCL_TMO, &t, &a, &b, err, sizeof(err));
			CHECK_MSG(s == SC_OK, "rank %d: pick: %s", r, err);
			fn(m, t, r, P, shared);
			scd_gpunet_destroy(g);
			scd_transport_destroy(m);
			_exit(0);
		}
	}
	unit_mesh_release(&mesh);
	for (int r = 0; r < P; r++)
		while (waitpid(pid[r], &st[r], 0) < 0 && errno == EINTR)
			;
}

static void all_ok(int P, const int *st)
{
	for (int r = 0; r < P; r++)
		CHECK_MSG(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
			  "rank %d ended with wait status 0x%x", r, st[r]);
}

/* ---- without NCCL ------------------------------------------------------------------ */

/* No NCCL on this node: gpunet says why, the debug log says it once, and GPU buffers of a
 * world with such a node take the mesh (tcp) on every rank. */
UNIT_TEST(nccl_missing_says_why_and_settles_on_tcp)
{
	setenv("SPARSECOMM_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	char log[] = "/tmp/sc-unit-nccl-XXXXXX";
	int fd = mkstemp(log);
	CHECK_TRUE(fd >= 0);
	int saved = dup(2);
	fflush(stderr);
	dup2(fd, 2);
	scd_log_level = SCD_LOG_DEBUG;
	char why[256] = "";
	int ok = scd_gpunet_usable(why, sizeof(why));
	scd_log_level = SCD_LOG_WARN;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char text[4096] = "";
	ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	unlink(log);
	text[n > 0 ? n : 0] = 0;
	CHECK_MSG(!ok, "NCCL usable from /nonexistent");
	CHECK_MSG(strstr(why, "/nonexistent/libnccl.so.2"), "why: '%s'", why);
	CHECK_MSG(strstr(text, "nccl: unavailable") &&
		      strstr(text, "/nonexistent/libnccl.so.2"),
		  "debug log: '%s'", text);
}

static void expect_mesh(scd_transport_t *mesh, scd_transport_t *t, int rank, int P,
			void *shared)
{
	(void)shared;
	CHECK_MSG(t == mesh, "rank %d: GPU buffers take %s, not the mesh", rank, t->ops->name);
}

UNIT_TEST(nccl_world_without_nccl_takes_tcp)
{
	const char *cuda = lib_path("libsparsecomm-cuda-host.so");
	if (!cuda)
		unit_skip("build/lib/libsparsecomm-cuda-host.so is not built (needs CCCL)");
	setenv("SPARSECOMM_CUDA_LIB", cuda, 1);
	setenv("SPARSECOMM_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	int st[NCCL_P_MAX];
	run_ranks(3, "auto", expect_mesh, NULL, st);
	all_ok(3, st);
	run_ranks(2, "tcp", expect_mesh, NULL, st);
	all_ok(2, st);
}

/* ---- the bootstrap blob ------------------------------------------------------------- */

UNIT_TEST(nccl_bootstrap_blob_round_trips)
{
	use_stand_ins();
	const scd_transport_ops_t *ops;
	CHECK_TRUE(scd_transport_lookup("nccl", &ops) == SC_OK);
	CHECK_TRUE(ops->device_memory == 1);
	scd_transport_endpoint_t *root = NULL, *other = NULL;
	scd_transport_cfg_t c0 = {.rank = 0}, c1 = {.rank = 1};
	CHECK_MSG(ops->prepare(&c0, &root) == SC_OK, "%s", scd_transport_error());
	CHECK_MSG(ops->prepare(&c1, &other) == SC_OK, "%s", scd_transport_error());
	CHECK_EQ_INT(root->blob_len, 128); /* an ncclUniqueId */
	CHECK_EQ_INT(other->blob_len, 0);
	char addr[64];
	uint16_t port = 1;
	CHECK_EQ_INT(ops->describe(root->blob, root->blob_len, addr, sizeof(addr), &port),
		     SC_OK);
	CHECK_EQ_INT(port, 0);
	CHECK_EQ_INT(ops->describe(root->blob, 100, NULL, 0, NULL), SC_ERR_PROTOCOL);
	/* through the bootstrap record, as the engine hands it to create */
	scd_transport_boot_t b;
	unsigned char id[128];
	memcpy(id, root->blob, sizeof(id));
	CHECK_EQ_INT(scd_transport_boot_init(&b, other, 1, 2, 7), SC_OK);
	CHECK_EQ_INT(scd_transport_boot_set_blob(&b, 0, root->blob, root->blob_len), SC_OK);
	CHECK_EQ_INT(b.blobs[0].len, 128);
	CHECK_TRUE(memcmp(b.blobs[0].data, id, sizeof(id)) == 0);
	CHECK_EQ_INT(b.blobs[1].len, 0);
	scd_transport_boot_clear(&b);
	scd_transport_release(root);
}

/* ---- a formed nccl transport --------------------------------------------------------- */

static uint32_t val(int rank, int i)
{
	return (uint32_t)(rank * 1000003u + (uint32_t)i * 2654435761u);
}

/* Rank r sends to every peer p (itself included) (r + 3p) * 97 bytes; exchange with the
 * sizes known, then exchange_v with them unknown to the receivers. */
static void exchange_rank(scd_transport_t *mesh, scd_transport_t *t, int rank, int P,
			  void *shared)
{
	(void)shared;
	CHECK_MSG(t != mesh && !strcmp(t->ops->name, "nccl"), "rank %d: took %s", rank,
		  t->ops->name);
	scd_xfer_t s[NCCL_P_MAX] = {{0}}, r[NCCL_P_MAX] = {{0}};
	uint8_t *sb[NCCL_P_MAX], *rb[NCCL_P_MAX];
	size_t got[NCCL_P_MAX];
	for (int p = 0; p < P; p++) {
		size_t out = (size_t)(rank + 3 * p) * 97 + 1,
		       in = (size_t)(p + 3 * rank) * 97 + 1;
		sb[p] = malloc(out);
		rb[p] = calloc(1, in + 64);
		for (size_t i = 0; i < out; i++)
			sb[p][i] = (uint8_t)val(rank * 16 + p, (int)i);
		s[p] = (scd_xfer_t){p, sb[p], out};
		r[p] = (scd_xfer_t){p, rb[p], in};
	}
	CHECK_MSG(scd_transport_exchange(t, s, P, r, P, NCCL_TMO) == SC_OK, "rank %d: %s", rank,
		  scd_transport_error());
	for (int p = 0; p < P; p++)
		for (size_t i = 0; i < r[p].bytes; i++)
			CHECK_MSG(rb[p][i] == (uint8_t)val(p * 16 + rank, (int)i),
				  "rank %d: byte %zu from %d", rank, i, p);
	for (int p = 0; p < P; p++) {
		memset(rb[p], 0, r[p].bytes + 64);
		r[p].bytes += 64; /* capacity, not length */
	}
	CHECK_MSG(scd_transport_exchange_v(t, s, P, r, P, got, NCCL_TMO) == SC_OK,
		  "rank %d: %s", rank, scd_transport_error());
	for (int p = 0; p < P; p++) {
		CHECK_EQ_INT(got[p], r[p].bytes - 64);
		for (size_t i = 0; i < got[p]; i++)
			CHECK_MSG(rb[p][i] == (uint8_t)val(p * 16 + rank, (int)i),
				  "rank %d: exchange_v byte %zu from %d", rank, i, p);
	}
	/* a message larger than its receive: SC_ERR_LIMIT, and the communicator is gone */
	s[(rank + 1) % P].bytes = r[(rank + 1) % P].bytes + 1000;
	if (P > 1) {
		sc_status_t st = scd_transport_exchange_v(t, s, P, r, P, got, NCCL_TMO);
		CHECK_MSG(st == SC_ERR_LIMIT || st == SC_ERR_PEER || st == SC_ERR_TIMEOUT,
			  "rank %d: %s", rank, sc_status_name(st));
		CHECK_EQ_INT(scd_transport_exchange(t, s, 0, r, 0, NCCL_TMO), SC_ERR_PEER);
		CHECK_MSG(strstr(scd_transport_error(), "aborted"), "rank %d: '%s'", rank,
			  scd_transport_error());
	}
	for (int p = 0; p < P; p++) {
		free(sb[p]);
		free(rb[p]);
	}
}

UNIT_TEST_TIMEOUT(nccl_exchange_sizes_known_and_not, 120)
{
	use_stand_ins();
	int st[NCCL_P_MAX];
	for (int P = 2; P <= NCCL_P_MAX; P++) {
		run_ranks(P, "nccl", exchange_rank, NULL, st);
		all_ok(P, st);
	}
}

/* exchange_v with every send held back until the work releases it, after the receives it
 * depends on arrived (as a scheme's later phase shares the exchange with its first): rank
 * r's first message to p is its rank; the second, held, is the sum of what it got. */
typedef struct held {
	scd_transport_t *t;
	scd_xfer_t *s, *r;
	size_t *got;
	int P, rank;
	int64_t first[NCCL_P_MAX], second[NCCL_P_MAX], sum;
	int released;
} held_t;

static int held_work(void *arg)
{
	held_t *h = arg;
	if (h->released)
		return 0;
	for (int p = 0; p < h->P; p++)
		if (h->got[p] == SCD_XFER_PENDING)
			return 0; /* not all first messages are in */
	h->sum = 0;
	for (int p = 0; p < h->P; p++)
		h->sum += h->first[p];
	for (int p = 0; p < h->P; p++)
		h->s[h->P + p].bytes = sizeof(int64_t);
	h->released = 1;
	return 1;
}

static void held_rank(scd_transport_t *mesh, scd_transport_t *t, int rank, int P, void *shared)
{
	(void)mesh;
	(void)shared;
	static held_t h;
	scd_xfer_t s[2 * NCCL_P_MAX] = {{0}}, r[2 * NCCL_P_MAX] = {{0}};
	size_t got[2 * NCCL_P_MAX];
	int64_t mine = rank + 1;
	h = (held_t){.t = t, .s = s, .r = r, .got = got, .P = P, .rank = rank};
	for (int p = 0; p < P; p++) {
		s[p] = (scd_xfer_t){p, &mine, sizeof(mine)};
		s[P + p] = (scd_xfer_t){p, &h.sum, SCD_XFER_PENDING};
		r[p] = (scd_xfer_t){p, &h.first[p], sizeof(int64_t)};
		r[P + p] = (scd_xfer_t){p, &h.second[p], sizeof(int64_t)};
	}
	scd_xfer_work_t w = {held_work, &h};
	sc_status_t st = scd_transport_exchange_vw(t, s, 2 * P, r, 2 * P, got, &w, NCCL_TMO);
	CHECK_MSG(st == SC_OK, "rank %d: %s", rank, scd_transport_error());
	int64_t want = (int64_t)P * (P + 1) / 2;
	for (int p = 0; p < P; p++)
		CHECK_MSG(h.first[p] == p + 1 && h.second[p] == want,
			  "rank %d: from %d got %lld then %lld, expected %d then %lld", rank, p,
			  (long long)h.first[p], (long long)h.second[p], p + 1,
			  (long long)want);
	/* held back with nothing to receive: refused at once */
	scd_xfer_t x = {(rank + 1) % P, &mine, SCD_XFER_PENDING};
	h.released = 1;
	double t0 = now_ms();
	CHECK_EQ_INT(scd_transport_exchange_vw(t, &x, 1, NULL, 0, NULL, &w, NCCL_TMO),
		     SC_ERR_INVALID);
	CHECK_MSG(now_ms() - t0 < 2000, "a held send waited %.0f ms", now_ms() - t0);
}

UNIT_TEST_TIMEOUT(nccl_exchange_v_held_sends, 120)
{
	use_stand_ins();
	int st[NCCL_P_MAX];
	for (int P = 2; P <= NCCL_P_MAX; P++) {
		run_ranks(P, "auto", held_rank, NULL, st);
		all_ok(P, st);
	}
}

/* Typed sums, bit-identical on every rank (compared through shared memory). */
static void allreduce_rank(scd_transport_t *mesh, scd_transport_t *t, int rank, int P,
			   void *shared)
{
	(void)mesh;
	enum { N = 100003 };
	double *d = malloc(N * sizeof(double));
	int64_t *q = malloc(N * sizeof(int64_t));
	float *f = malloc(N * sizeof(float));
	for (int i = 0; i < N; i++) {
		d[i] = (double)val(rank, i) / 7.0;
		q[i] = (int64_t)val(rank, i) * 4099 - (1ll << 40);
		f[i] = (float)(val(rank, i) % 1000) - 500.0f;
	}
	CHECK_MSG(scd_transport_allreduce(t, d, N, SC_FLOAT64, SC_OP_SUM, NCCL_TMO) == SC_OK,
		  "%s", scd_transport_error());
	CHECK_MSG(scd_transport_allreduce(t, q, N, SC_INT64, SC_OP_SUM, NCCL_TMO) == SC_OK,
		  "%s", scd_transport_error());
	CHECK_MSG(scd_transport_allreduce_f32(t, f, N, NCCL_TMO) == SC_OK, "%s",
		  scd_transport_error());
	for (int i = 0; i < N; i++) {
		int64_t wq = 0;
		float wf = 0;
		for (int p = 0; p < P; p++) {
			wq += (int64_t)val(p, i) * 4099 - (1ll << 40);
			wf += (float)(val(p, i) % 1000) - 500.0f; /* small integers: exact */
		}
		CHECK_MSG(q[i] == wq && f[i] == wf, "rank %d: element %d", rank, i);
	}
	/* the other reductions: max of int32, min of float64 */
	int32_t *m = malloc(N * sizeof(int32_t));
	for (int i = 0; i < N; i++) {
		m[i] = (int32_t)(val(rank, i) % 1000) - 500;
		d[i] = (double)m[i] / 3.0;
	}
	CHECK_MSG(scd_transport_allreduce(t, m, N, SC_INT32, SC_OP_MAX, NCCL_TMO) == SC_OK,
		  "%s", scd_transport_error());
	double *lo = malloc(N * sizeof(double));
	memcpy(lo, d, N * sizeof(double));
	CHECK_MSG(scd_transport_allreduce(t, lo, N, SC_FLOAT64, SC_OP_MIN, NCCL_TMO) == SC_OK,
		  "%s", scd_transport_error());
	for (int i = 0; i < N; i++) {
		int32_t wm = INT32_MIN;
		double wl = INFINITY;
		for (int p = 0; p < P; p++) {
			int32_t v = (int32_t)(val(p, i) % 1000) - 500;
			wm = v > wm ? v : wm;
			wl = (double)v / 3.0 < wl ? (double)v / 3.0 : wl;
		}
		CHECK_MSG(m[i] == wm && lo[i] == wl, "rank %d: max/min element %d", rank, i);
	}
	free(m);
	free(lo);
	for (int i = 0; i < N; i++)
		d[i] = (double)val(rank, i) / 7.0;
	CHECK_MSG(scd_transport_allreduce(t, d, N, SC_FLOAT64, SC_OP_SUM, NCCL_TMO) == SC_OK,
		  "%s", scd_transport_error());
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < N; i++) {
		uint64_t b;
		memcpy(&b, &d[i], sizeof(b));
		h = (h ^ b) * 1099511628211ull;
	}
	((uint64_t *)shared)[rank] = h;
	scd_transport_counters_t c;
	t->ops->counters(t, &c);
	CHECK_MSG(c.bytes_sent > 0 && c.bytes_recv > 0, "rank %d: counters not kept", rank);
	free(d);
	free(q);
	free(f);
}

UNIT_TEST_TIMEOUT(nccl_allreduce_typed_identical, 120)
{
	use_stand_ins();
	uint64_t *h =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(h != MAP_FAILED);
	int st[NCCL_P_MAX];
	for (int P = 2; P <= NCCL_P_MAX; P++) {
		memset(h, 0, 4096);
		run_ranks(P, "nccl", allreduce_rank, h, st);
		all_ok(P, st);
		for (int r = 1; r < P; r++)
			CHECK_MSG(h[r] == h[0],
				  "P=%d: rank %d's float64 sums differ from rank 0's", P, r);
	}
	munmap(h, 4096);
}

/* A rank that stops (SIGSTOP, as a paused or wedged node) mid-allreduce: the others give
 * up within the call's timeout, naming the ranks they waited for, abort the communicator
 * at once, and every later call fails at once; a rank that dies (SIGKILL) likewise. */
/* The world gives up rank 2 (peer_gone, as the daemon's loop thread does) 300 ms into a
 * wait of 20 s. */
static void *give_up(void *arg)
{
	scd_transport_t *t = arg;
	usleep(300 * 1000);
	t->ops->peer_gone(t, 2);
	return NULL;
}

static void stuck_rank(scd_transport_t *mesh, scd_transport_t *t, int rank, int P, void *shared)
{
	(void)mesh;
	int how = *(int *)shared, told = how < 0;
	if (told)
		how = -how;
	enum { N = 1 << 16 };
	float *f = calloc(N, sizeof(float));
	CHECK_TRUE(scd_transport_allreduce_f32(t, f, N, NCCL_TMO) == SC_OK);
	if (rank == P - 1) {
		raise(how);
		_exit(0); /* resumed (SIGCONT): the others have given up on it */
	}
	pthread_t th;
	if (told)
		CHECK_TRUE(pthread_create(&th, NULL, give_up, t) == 0);
	double t0 = now_ms();
	sc_status_t st = scd_transport_allreduce_f32(t, f, N, told ? 20000 : 1500);
	double dt = now_ms() - t0;
	if (told) {
		pthread_join(th, NULL);
		CHECK_MSG(strstr(scd_transport_error(), "rank 2 is gone"), "rank %d: %s", rank,
			  scd_transport_error());
	}
	CHECK_MSG(st != SC_OK, "rank %d: allreduce with rank %d stopped succeeded", rank,
		  P - 1);
	CHECK_MSG(dt < 1500 + 2000, "rank %d: gave up after %.0f ms (timeout %d)", rank, dt,
		  told ? 20000 : 1500);
	char want[32];
	snprintf(want, sizeof(want), "%d", P - 1);
	const char *e = scd_transport_error(), *list = strstr(e, "ranks ");
	CHECK_MSG((list && strstr(list, want)) || strstr(e, "rank 2:") ||
		      strstr(e, "rank 2 is gone"),
		  "rank %d: error does not name rank %d: %s", rank, P - 1, e);
	t0 = now_ms();
	CHECK_EQ_INT(scd_transport_allreduce_f32(t, f, N, NCCL_TMO), SC_ERR_PEER);
	CHECK_MSG(now_ms() - t0 < 1000, "rank %d: a call after the abort took %.0f ms", rank,
		  now_ms() - t0);
	free(f);
	t0 = now_ms();
	scd_transport_destroy(t);
	CHECK_MSG(now_ms() - t0 < 2000, "rank %d: destroy took %.0f ms", rank, now_ms() - t0);
	_exit(0);
}

UNIT_TEST_TIMEOUT(nccl_stopped_or_killed_peer_no_hang, 120)
{
	use_stand_ins();
	int *how = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(how != MAP_FAILED);
	int sigs[] = {SIGSTOP, SIGKILL, -SIGSTOP}; /* the last: the world gives the rank up */
	for (int k = 0; k < 3; k++) {
		int P = 3, st[NCCL_P_MAX];
		*how = sigs[k];
		/* a watcher runs the ranks and judges the survivors; the stopped rank is let
		 * go on (SIGCONT) once they had time to give up */
		pid_t watcher = fork();
		CHECK_TRUE(watcher >= 0);
		if (watcher == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			run_ranks(P, "nccl", stuck_rank, how, st);
			for (int r = 0; r < P - 1; r++)
				if (!WIFEXITED(st[r]) || WEXITSTATUS(st[r]) != 0)
					_exit(1);
			_exit(0);
		}
		/* run_ranks waits for every rank, the stopped one included: release it */
		double t0 = now_ms();
		int ws = 0;
		while (waitpid(watcher, &ws, WNOHANG) == 0 && now_ms() - t0 < 60000) {
			usleep(200 * 1000);
			if (sigs[k] != SIGKILL && now_ms() - t0 > 8000)
				kill(0, SIGCONT);
		}
		CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
			  "%s: a survivor failed (wait status 0x%x)",
			  sigs[k] == SIGSTOP   ? "SIGSTOP"
			  : sigs[k] == SIGKILL ? "SIGKILL"
					       : "peer_gone",
			  ws);
	}
	munmap(how, 4096);
}
