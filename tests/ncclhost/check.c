/*
 * check.c: build/bin/sparsecomm-ncclhost-check LIB, the checks of the NCCL stand-in
 * (build/lib/libnccl-host.so, tests/ncclhost/nccl.c). It loads LIB with dlopen, as the
 * daemon's nccl transport loads NCCL, and for P = 2, 3 and 4 forks P processes, one per
 * rank, that share one page (the unique id from rank 0, the counts of checks):
 *  1. operations: non-blocking init polled with ncclCommGetAsyncError against a deadline;
 *     all-reduce (sum and max; float32, int64, bfloat16; one in place), a grouped
 *     all-to-all of send/receive with a different size per pair (itself included),
 *     all-gather, broadcast, reduce-scatter, each compared with values computed here; a
 *     receive shorter than its send fails the receiver, naming the sender;
 *  2. SIGKILL: rank P-1 kills itself in the middle of a large all-reduce; every other rank
 *     must see an error naming rank P-1 within a bounded time;
 *  3. SIGSTOP: rank P-1 stops itself after init; the others' all-reduce stays in progress
 *     (a silent peer is no error, as in NCCL) until their own deadline, and ncclCommAbort
 *     then returns within 1 s.
 *  4. blocking comm: calls return when done; a rank that stays out of an all-reduce fails
 *     the others' call after $NCCL_HOST_TIMEOUT_MS, naming it.
 *  5. one GPU ($NCCL_HOST_SAME_GPU=1, P = 3): ranks of one host refused at set-up, as
 *     NCCL refuses them; with an NCCL_HOSTID each they form the comm.
 * Before: $NCCL_SOCKET_IFNAME naming no interface fails ncclGetUniqueId; a rank that never
 * joins fails rank 0's set-up after $NCCL_HOST_TIMEOUT_MS, and ncclCommAbort ends a set-up
 * that waits at once. The runs of operations select
 * the loopback interface by prefix (P = 2), by exact name (P = 3) and by default (P = 4).
 * Prints one line per check and "N passed, N failed"; exits 0 only when nothing failed.
 */
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define API(X)                                                                                 \
	X(ncclGetVersion)                                                                      \
	X(ncclGetErrorString)                                                                  \
	X(ncclGetLastError)                                                                    \
	X(ncclGetUniqueId)                                                                     \
	X(ncclCommInitRankConfig)                                                              \
	X(ncclCommGetAsyncError)                                                               \
	X(ncclCommCount)                                                                       \
	X(ncclCommUserRank)                                                                    \
	X(ncclCommFinalize)                                                                    \
	X(ncclCommDestroy)                                                                     \
	X(ncclCommAbort)                                                                       \
	X(ncclGroupStart)                                                                      \
	X(ncclGroupEnd)                                                                        \
	X(ncclSend)                                                                            \
	X(ncclRecv)                                                                            \
	X(ncclAllReduce)                                                                       \
	X(ncclAllGather)                                                                       \
	X(ncclBroadcast)                                                                       \
	X(ncclReduceScatter)
#define FIELD(name) typeof(&name) name;
static struct {
	API(FIELD)
} nc;

/* Shared by the ranks of a run (MAP_SHARED before fork). */
struct shared {
	atomic_int id_ready;
	ncclUniqueId id;
	atomic_int seen; /* SIGKILL run: ranks that saw the failure */
	atomic_int passed, failed;
};
static struct shared *sh;
static int P, R; /* this process's run size and rank */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", ok ? "ok  " : "FAIL");
	if (R >= 0)
		printf("P=%d rank %d: ", P, R);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	atomic_fetch_add(ok ? &sh->passed : &sh->failed, 1);
	return ok;
}

/* Polls the comm until it is not in progress or the deadline passes (then in progress). */
static ncclResult_t wait_comm(ncclComm_t comm, int ms)
{
	uint64_t deadline = now_ms() + (uint64_t)ms;
	ncclResult_t r = ncclInProgress;

	while (now_ms() < deadline) {
		if (nc.ncclCommGetAsyncError(comm, &r) != ncclSuccess)
			return ncclInternalError;
		if (r != ncclInProgress)
			return r;
		usleep(1000);
	}
	return r;
}

/* Issues an operation's result and waits for it; says whether both went well. */
static int done(ncclComm_t comm, ncclResult_t issued, const char *what)
{
	ncclResult_t r = issued == ncclSuccess ? wait_comm(comm, 30000) : issued;

	if (r != ncclSuccess)
		return check(0, "%s: %s (%s)", what, nc.ncclGetErrorString(r),
			     nc.ncclGetLastError(comm));
	return 1;
}

/* This rank's non-blocking init (rank 0 makes the id and shares it), polled until it
 * ends; NULL in comm_p when it could not even start. */
static ncclResult_t init_comm(ncclComm_t *comm_p)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	uint64_t deadline = now_ms() + 10000;
	ncclResult_t r;

	*comm_p = NULL;
	if (R == 0) {
		if (!check(nc.ncclGetUniqueId(&sh->id) == ncclSuccess, "ncclGetUniqueId"))
			return ncclSystemError;
		atomic_store(&sh->id_ready, 1);
	}
	while (!atomic_load(&sh->id_ready) && now_ms() < deadline)
		usleep(1000);
	if (!check(atomic_load(&sh->id_ready), "the unique id arrived"))
		return ncclSystemError;
	config.blocking = 0;
	r = nc.ncclCommInitRankConfig(comm_p, P, sh->id, R, &config);
	if (!check((r == ncclInProgress || r == ncclSuccess) && *comm_p,
		   "non-blocking init: %s", nc.ncclGetErrorString(r)))
		return r;
	return wait_comm(*comm_p, 20000);
}

/* The comm of this rank, or NULL (a failed check) when its init failed. */
static ncclComm_t init(void)
{
	ncclComm_t comm = NULL;
	ncclResult_t r = init_comm(&comm);
	int n = -1, me = -1;

	if (!comm)
		return NULL;
	if (!check(r == ncclSuccess, "init completes: %s (%s)", nc.ncclGetErrorString(r),
		   nc.ncclGetLastError(comm))) {
		nc.ncclCommAbort(comm);
		return NULL;
	}
	nc.ncclCommCount(comm, &n);
	nc.ncclCommUserRank(comm, &me);
	check(n == P && me == R, "count %d, rank %d", n, me);
	return comm;
}

static uint16_t to_bf16(float f) /* exact for the small integers used here */
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	return (uint16_t)(x >> 16);
}

static void check_allreduce(ncclComm_t comm)
{
	enum { N = 4099 };
	float *f = malloc(N * sizeof(float)), *fo = malloc(N * sizeof(float));
	int64_t *l = malloc(N * sizeof(int64_t));
	uint16_t *b = malloc(N * 2), *bo = malloc(N * 2);
	int bad[4] = {0};

	for (int i = 0; i < N; i++) {
		f[i] = (float)((R + 1) * (i % 1000)) * 0.25f;
		b[i] = to_bf16((float)(R + i % 8));
	}
	if (done(comm, nc.ncclAllReduce(f, fo, N, ncclFloat32, ncclSum, comm, NULL),
		 "allreduce f32 sum"))
		for (int i = 0; i < N; i++)
			bad[0] += fo[i] != (float)(P * (P + 1) / 2 * (i % 1000)) * 0.25f;
	for (int i = 0; i < N; i++)
		f[i] = (float)((i * 7 + R * 13) % 101) - 50.0f;
	if (done(comm, nc.ncclAllReduce(f, fo, N, ncclFloat32, ncclMax, comm, NULL),
		 "allreduce f32 max"))
		for (int i = 0; i < N; i++) {
			float m = -1e9f;

			for (int r = 0; r < P; r++) {
				float v = (float)((i * 7 + r * 13) % 101) - 50.0f;

				m = v > m ? v : m;
			}
			bad[1] += fo[i] != m;
		}
	for (int i = 0; i < N; i++)
		l[i] = (int64_t)(R + 1) * 1000000007LL * (i - N / 2);
	if (done(comm, nc.ncclAllReduce(l, l, N, ncclInt64, ncclSum, comm, NULL),
		 "allreduce int64 sum in place"))
		for (int i = 0; i < N; i++)
			bad[2] +=
			    l[i] != (int64_t)(P * (P + 1) / 2) * 1000000007LL * (i - N / 2);
	if (done(comm, nc.ncclAllReduce(b, bo, N, ncclBfloat16, ncclSum, comm, NULL),
		 "allreduce bf16 sum"))
		for (int i = 0; i < N; i++)
			bad[3] += bo[i] != to_bf16((float)(P * (P - 1) / 2 + P * (i % 8)));
	check(!bad[0], "allreduce f32 sum: %d wrong", bad[0]);
	check(!bad[1], "allreduce f32 max: %d wrong", bad[1]);
	check(!bad[2], "allreduce int64 sum in place: %d wrong", bad[2]);
	check(!bad[3], "allreduce bf16 sum: %d wrong", bad[3]);
	free(f);
	free(fo);
	free(l);
	free(b);
	free(bo);
}

static size_t pair_count(int s, int d)
{
	return 100 + 37 * (size_t)s + 1000 * (size_t)d;
}

static void check_alltoall(ncclComm_t comm)
{
	int32_t *out[4], *in[4];
	ncclResult_t r = nc.ncclGroupStart();
	int bad = 0;

	for (int q = 0; q < P; q++) {
		out[q] = malloc(pair_count(R, q) * sizeof(int32_t));
		in[q] = calloc(pair_count(q, R), sizeof(int32_t));
		for (size_t i = 0; i < pair_count(R, q); i++)
			out[q][i] = R * 1000000 + q * 100000 + (int32_t)i;
	}
	/* receives first on odd ranks: matching must not depend on the order of issue */
	for (int k = 0; k < 2 * P && r == ncclSuccess; k++) {
		int q = k % P, recv = (k < P) == (R % 2 == 1);

		r = recv ? nc.ncclRecv(in[q], pair_count(q, R), ncclInt32, q, comm, NULL)
			 : nc.ncclSend(out[q], pair_count(R, q), ncclInt32, q, comm, NULL);
	}
	if (r == ncclSuccess)
		r = nc.ncclGroupEnd();
	if (done(comm, r, "grouped send/recv"))
		for (int q = 0; q < P; q++)
			for (size_t i = 0; i < pair_count(q, R); i++)
				bad += in[q][i] != q * 1000000 + R * 100000 + (int32_t)i;
	check(!bad, "grouped all-to-all send/recv, sizes per pair: %d wrong", bad);
	for (int q = 0; q < P; q++) {
		free(out[q]);
		free(in[q]);
	}
}

static void check_gather_bcast(ncclComm_t comm)
{
	enum { N = 513 };
	int32_t mine[N], all[4 * N];
	double d[N];
	float rs_in[4 * N], rs_out[N];
	int bad = 0;

	for (int i = 0; i < N; i++)
		mine[i] = R * 100000 + i;
	if (done(comm, nc.ncclAllGather(mine, all, N, ncclInt32, comm, NULL), "allgather")) {
		for (int i = 0; i < P * N; i++)
			bad += all[i] != (i / N) * 100000 + i % N;
		check(!bad, "allgather: %d wrong", bad);
	}
	for (int i = 0; i < N; i++)
		d[i] = R == P - 1 ? i * 1.5 : -1.0;
	bad = 0;
	if (done(comm, nc.ncclBroadcast(d, d, N, ncclFloat64, P - 1, comm, NULL),
		 "broadcast")) {
		for (int i = 0; i < N; i++)
			bad += d[i] != i * 1.5;
		check(!bad, "broadcast from rank %d: %d wrong", P - 1, bad);
	}
	for (int i = 0; i < P * N; i++)
		rs_in[i] = (float)(R + i);
	bad = 0;
	if (done(comm, nc.ncclReduceScatter(rs_in, rs_out, N, ncclFloat32, ncclSum, comm, NULL),
		 "reduce-scatter")) {
		for (int i = 0; i < N; i++)
			bad += rs_out[i] != (float)(P * (P - 1) / 2 + P * (R * N + i));
		check(!bad, "reduce-scatter f32 sum: %d wrong", bad);
	}
}

/* Rank 1 receives fewer bytes than rank 0 sends: rank 1 fails, naming rank 0. */
static void check_mismatch(ncclComm_t comm)
{
	int32_t buf[100] = {0};
	ncclResult_t r;

	if (R > 1)
		return;
	r = R == 0 ? nc.ncclSend(buf, 100, ncclInt32, 1, comm, NULL)
		   : nc.ncclRecv(buf, 50, ncclInt32, 0, comm, NULL);
	r = r == ncclSuccess ? wait_comm(comm, 10000) : r;
	if (R == 0) { /* its frame fits in the socket's buffer */
		check(r == ncclSuccess, "a send of 100 elements completes: %s",
		      nc.ncclGetErrorString(r));
		return;
	}
	check(r != ncclSuccess && r != ncclInProgress &&
		  strstr(nc.ncclGetLastError(comm), "rank 0"),
	      "a receive of 50 where 100 were sent fails: %s (%s)", nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(comm));
}

static void run_ops(void)
{
	ncclComm_t comm = init();
	ncclResult_t r;

	if (!comm)
		return;
	r = nc.ncclAllReduce(NULL, NULL, 1, (ncclDataType_t)99, ncclSum, comm, NULL);
	check(r == ncclInvalidArgument && strstr(nc.ncclGetLastError(comm), "datatype"),
	      "a bad datatype is refused: %s (%s)", nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(comm));
	check_allreduce(comm);
	check_alltoall(comm);
	check_gather_bcast(comm);
	check_mismatch(comm);
	r = nc.ncclCommFinalize(comm);
	if (r == ncclInProgress)
		r = wait_comm(comm, 10000);
	if (R != 1) /* rank 1 failed above, for good */
		check(r == ncclSuccess, "finalize: %s", nc.ncclGetErrorString(r));
	nc.ncclCommDestroy(comm);
}

static void run_kill(void)
{
	enum { N = 2 << 20 };
	float *x = calloc(N, sizeof(float)), *y = calloc(N, sizeof(float));
	ncclComm_t comm = init();
	uint64_t t0, deadline;
	ncclResult_t r = ncclSuccess;
	char want[32];

	if (!comm || !x || !y)
		exit(1);
	if (R == P - 1) {
		nc.ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
		usleep(20000);
		raise(SIGKILL);
	}
	t0 = now_ms();
	deadline = t0 + 20000;
	/* a batch that completed before the kill is followed by another one */
	while (r == ncclSuccess && now_ms() < deadline) {
		r = nc.ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
		if (r == ncclSuccess)
			r = wait_comm(comm, 20000);
	}
	snprintf(want, sizeof(want), "rank %d", P - 1);
	check(r != ncclSuccess && r != ncclInProgress &&
		  strstr(nc.ncclGetLastError(comm), want),
	      "SIGKILLed rank %d seen after %llu ms: %s (%s)", P - 1,
	      (unsigned long long)(now_ms() - t0), nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(comm));
	/* the others keep their connections until every survivor saw the failure itself */
	atomic_fetch_add(&sh->seen, 1);
	deadline = now_ms() + 20000;
	while (atomic_load(&sh->seen) < P - 1 && now_ms() < deadline)
		usleep(1000);
	nc.ncclCommAbort(comm);
	free(x);
	free(y);
}

static void run_stop(void)
{
	float x[1024] = {0}, y[1024];
	ncclComm_t comm = init();
	ncclResult_t r;
	uint64_t t0;

	if (!comm)
		exit(1);
	if (R == P - 1)
		raise(SIGSTOP); /* the parent kills it once the others are gone */
	r = nc.ncclAllReduce(x, y, 1024, ncclFloat32, ncclSum, comm, NULL);
	if (r == ncclSuccess)
		r = wait_comm(comm, 1500);
	check(r == ncclInProgress, "all-reduce with a stopped rank %d still in progress: %s",
	      P - 1, nc.ncclGetErrorString(r));
	t0 = now_ms();
	nc.ncclCommAbort(comm);
	check(now_ms() - t0 < 1000, "ncclCommAbort with a stopped peer took %llu ms",
	      (unsigned long long)(now_ms() - t0));
}

/* Rank 1 never joins: rank 0's set-up fails once $NCCL_HOST_TIMEOUT_MS passed. */
static void run_timeout(void)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	ncclComm_t comm = NULL;
	ncclResult_t r;
	uint64_t t0 = now_ms();

	if (R != 0)
		return;
	setenv("NCCL_HOST_TIMEOUT_MS", "300", 1);
	config.blocking = 0;
	r = nc.ncclGetUniqueId(&sh->id);
	if (r == ncclSuccess)
		r = nc.ncclCommInitRankConfig(&comm, 2, sh->id, 0, &config);
	if (r == ncclInProgress)
		r = wait_comm(comm, 10000);
	check(r == ncclSystemError && now_ms() - t0 < 3000 &&
		  strstr(nc.ncclGetLastError(comm), "NCCL_HOST_TIMEOUT_MS=300"),
	      "a rank missing at set-up fails it after %llu ms: %s (%s)",
	      (unsigned long long)(now_ms() - t0), nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(comm));
	nc.ncclCommDestroy(comm);
	/* the same set-up under a long timeout, aborted while it waits */
	setenv("NCCL_HOST_TIMEOUT_MS", "60000", 1);
	comm = NULL;
	r = nc.ncclGetUniqueId(&sh->id);
	if (r == ncclSuccess)
		r = nc.ncclCommInitRankConfig(&comm, 2, sh->id, 0, &config);
	usleep(100000);
	t0 = now_ms();
	if (r == ncclInProgress)
		nc.ncclCommAbort(comm);
	check(r == ncclInProgress && now_ms() - t0 < 1000,
	      "ncclCommAbort during set-up took %llu ms: %s",
	      (unsigned long long)(now_ms() - t0), nc.ncclGetErrorString(r));
}

/* A blocking comm: its calls return when done; one whose peer never joins the operation
 * fails after $NCCL_HOST_TIMEOUT_MS, naming that peer. */
static void run_blocking(void)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER; /* blocking: NCCL's default */
	uint64_t deadline, t0;
	ncclComm_t comm = NULL;
	double x[300], y[300];
	ncclResult_t r;
	char want[32];
	int bad = 0;

	setenv("NCCL_HOST_TIMEOUT_MS", "2000", 1);
	if (R == 0) {
		nc.ncclGetUniqueId(&sh->id);
		atomic_store(&sh->id_ready, 1);
	}
	deadline = now_ms() + 10000;
	while (!atomic_load(&sh->id_ready) && now_ms() < deadline)
		usleep(1000);
	r = nc.ncclCommInitRankConfig(&comm, P, sh->id, R, &config);
	if (!check(r == ncclSuccess, "blocking init: %s (%s)", nc.ncclGetErrorString(r),
		   r == ncclSuccess ? "" : nc.ncclGetLastError(NULL)))
		return;
	for (int i = 0; i < 300; i++)
		x[i] = R * 0.5 + i;
	r = nc.ncclAllReduce(x, y, 300, ncclFloat64, ncclSum, comm, NULL);
	for (int i = 0; i < 300 && r == ncclSuccess; i++)
		bad += y[i] != P * (P - 1) * 0.25 + P * i;
	check(r == ncclSuccess && !bad, "blocking allreduce f64 sum: %s, %d wrong",
	      nc.ncclGetErrorString(r), bad);
	if (R == P - 1) { /* stays out of the next one until the others gave up */
		deadline = now_ms() + 20000;
		while (atomic_load(&sh->seen) < P - 1 && now_ms() < deadline)
			usleep(1000);
		nc.ncclCommDestroy(comm);
		return;
	}
	t0 = now_ms();
	r = nc.ncclAllReduce(x, y, 300, ncclFloat64, ncclSum, comm, NULL);
	snprintf(want, sizeof(want), "rank %d", P - 1);
	check(r == ncclSystemError && now_ms() - t0 < 5000 &&
		  strstr(nc.ncclGetLastError(comm), want),
	      "blocking allreduce without rank %d fails after %llu ms: %s (%s)", P - 1,
	      (unsigned long long)(now_ms() - t0), nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(comm));
	atomic_fetch_add(&sh->seen, 1);
	nc.ncclCommDestroy(comm);
}

/* $NCCL_HOST_SAME_GPU=1, every rank on cuda:0 of its host as on a machine of one GPU:
 * ranks of one host (no NCCL_HOSTID: one host name) are refused at set-up as NCCL refuses
 * them, naming both, and every rank's init ends within the set-up timeout; with an
 * NCCL_HOSTID each (sparsecomm-run --nccl-hostid) they form the comm and all-reduce. */
static void run_same_gpu(void)
{
	uint64_t t0 = now_ms();
	ncclComm_t comm = NULL;
	ncclResult_t r;
	char id[32];
	float x[64], y[64];
	int bad = 0;

	setenv("NCCL_HOST_SAME_GPU", "1", 1);
	setenv("NCCL_HOST_TIMEOUT_MS", "3000", 1);
	unsetenv("NCCL_HOSTID");
	r = init_comm(&comm);
	if (R == 0)
		check(r == ncclInvalidUsage &&
			  strstr(nc.ncclGetLastError(comm),
				 "Duplicate GPU detected: rank 0 and rank"),
		      "one host, one GPU: rank 0 refuses the set-up: %s (%s)",
		      nc.ncclGetErrorString(r), comm ? nc.ncclGetLastError(comm) : "");
	else
		check(r != ncclSuccess && r != ncclInProgress && now_ms() - t0 < 8000,
		      "one host, one GPU: rank %d's set-up fails after %llu ms: %s", R,
		      (unsigned long long)(now_ms() - t0), nc.ncclGetErrorString(r));
	if (comm)
		nc.ncclCommAbort(comm);
	/* every rank is done with the first id before rank 0 takes it back (seen P + 1) and
	 * makes the next one */
	atomic_fetch_add(&sh->seen, 1);
	while (atomic_load(&sh->seen) < P && now_ms() - t0 < 20000)
		usleep(1000);
	if (R == 0) {
		atomic_store(&sh->id_ready, 0);
		atomic_fetch_add(&sh->seen, 1);
	}
	while (atomic_load(&sh->seen) < P + 1 && now_ms() - t0 < 20000)
		usleep(1000);
	snprintf(id, sizeof(id), "check-node%d", R);
	setenv("NCCL_HOSTID", id, 1);
	comm = init();
	if (!comm)
		return;
	for (int i = 0; i < 64; i++)
		x[i] = (float)(R + i);
	r = nc.ncclAllReduce(x, y, 64, ncclFloat32, ncclSum, comm, NULL);
	if (done(comm, r, "one GPU, a host id each: allreduce")) {
		for (int i = 0; i < 64; i++)
			bad += y[i] != (float)(P * (P - 1) / 2 + P * i);
		check(!bad, "one GPU, a host id each: the comm forms and sums (%d wrong)", bad);
	}
	nc.ncclCommDestroy(comm);
}

/* Forks the P ranks of one run and reaps them; victim: the rank expected to die. */
static void run(int nranks, void (*fn)(void), const char *name, int victim_signal)
{
	pid_t pids[4];
	int left = nranks;
	uint64_t deadline = now_ms() + 90000;

	atomic_store(&sh->id_ready, 0);
	atomic_store(&sh->seen, 0);
	P = nranks;
	fflush(stdout);
	for (int r = 0; r < nranks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			R = r;
			alarm(80);
			fn();
			fflush(stdout);
			_exit(0);
		}
		if (pids[r] < 0) {
			perror("fork");
			exit(2);
		}
	}
	R = -1;
	while (left > 0) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG | WUNTRACED);
		int r = 0;

		if (pid <= 0) {
			if (now_ms() > deadline) {
				check(0, "%s: ranks still running after 90 s, killed", name);
				for (int i = 0; i < nranks; i++)
					if (pids[i] > 0)
						kill(pids[i], SIGKILL);
				deadline = UINT64_MAX;
			}
			usleep(2000);
			continue;
		}
		while (r < nranks && pids[r] != pid)
			r++;
		if (r == nranks)
			continue;
		if (WIFSTOPPED(st)) {
			if (!(victim_signal == SIGSTOP && r == nranks - 1))
				check(0, "%s: rank %d stopped", name, r);
			continue;
		}
		pids[r] = -1;
		left--;
		if (victim_signal && r == nranks - 1 && WIFSIGNALED(st) &&
		    WTERMSIG(st) == SIGKILL)
			continue;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			check(0, "%s: rank %d ended with status %#x", name, r, st);
		/* SIGSTOP run: once the others are gone, the stopped rank goes */
		if (victim_signal == SIGSTOP && left == 1 && pids[nranks - 1] > 0)
			kill(pids[nranks - 1], SIGKILL);
	}
}

int main(int argc, char **argv)
{
	void *lib;
	int version = 0;
	ncclResult_t r;

	if (argc != 2) {
		fprintf(stderr, "usage: %s LIBNCCL\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
#define LOAD(name)                                                                             \
	if (!(*(void **)&nc.name = dlsym(lib, #name))) {                                       \
		fprintf(stderr, "%s: %s missing\n", argv[1], #name);                           \
		return 1;                                                                      \
	}
	API(LOAD)
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	R = -1;
	if (nc.ncclGetVersion(&version) != ncclSuccess)
		version = -1;
	check(version == NCCL_VERSION_CODE, "version %d", version);
	setenv("NCCL_SOCKET_IFNAME", "=nosuchif0", 1);
	r = nc.ncclGetUniqueId(&sh->id);
	check(r == ncclSystemError && strstr(nc.ncclGetLastError(NULL), "nosuchif0"),
	      "NCCL_SOCKET_IFNAME selecting no interface: %s (%s)", nc.ncclGetErrorString(r),
	      nc.ncclGetLastError(NULL));
	unsetenv("NCCL_SOCKET_IFNAME");
	run(2, run_timeout, "set-up timeout", 0);
	for (int p = 2; p <= 4; p++) {
		/* the loopback interface by prefix, by exact name, by default */
		if (p < 4)
			setenv("NCCL_SOCKET_IFNAME", p == 2 ? "lo" : "=lo", 1);
		else
			unsetenv("NCCL_SOCKET_IFNAME");
		run(p, run_ops, "operations", 0);
		run(p, run_kill, "SIGKILL", SIGKILL);
		run(p, run_stop, "SIGSTOP", SIGSTOP);
		run(p, run_blocking, "blocking", 0);
	}
	unsetenv("NCCL_SOCKET_IFNAME");
	run(3, run_same_gpu, "one GPU", 0);
	printf("%d passed, %d failed\n", atomic_load(&sh->passed), atomic_load(&sh->failed));
	return atomic_load(&sh->failed) ? 1 : 0;
}
