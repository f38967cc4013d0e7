/*
 * itest_main.c: entry point of sparsecomm-itest (one subcommand per scenario) and the
 * helpers every scenario shares: reporting, bounded waits, barriers, and the exact test
 * pattern (small integers whose sums are exact in every dtype, so a lossless allreduce
 * must reproduce them bit for bit).
 *
 * Usage (normally under the launcher, which sets SPARSECOMM_*):
 *   sparsecomm-itest SCENARIO [options]
 */
#include "itest.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

it_env_t it_env;

static char wait_err[2048];

static int env_int(const char *name)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return -1;
	char *end;
	long x = strtol(v, &end, 10);
	return *end ? -1 : (int)x;
}

static void vreport(FILE *f, const char *prefix, const char *fmt, va_list ap)
{
	char line[8192];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(f, "itest %s: rank %d: %s%s\n", it_env.scenario ? it_env.scenario : "?",
		it_env.rank, prefix, line);
	fflush(f);
}

void it_fail_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	char where[256];
	snprintf(where, sizeof(where), "FAIL (%s:%d): ", file, line);
	va_start(ap, fmt);
	vreport(stderr, where, fmt, ap);
	va_end(ap);
	fflush(NULL);
	_exit(1);
}

void it_fail_sc(const char *file, int line, sc_status_t st, const char *fmt, ...)
{
	char what[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	it_fail_at(file, line, "%s: %s (%s)", what, sc_status_name(st), sc_last_error());
}

void it_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(stdout, "", fmt, ap);
	va_end(ap);
}

void it_pass(void)
{
	printf("itest %s: rank %d passed\n", it_env.scenario, it_env.rank);
	fflush(NULL);
	exit(0);
}

double it_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void it_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int it_wait_child(pid_t pid, double timeout_s, const char *what)
{
	int st = 0;
	double deadline = it_now_s() + timeout_s;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (it_now_s() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			IT_FAIL("%s did not end within %.0f s", what, timeout_s);
		}
		it_sleep_ms(20);
	}
	return st;
}

sc_client_t *it_connect(void)
{
	sc_client_t *c = NULL;
	IT_CHECK_SC(sc_connect(NULL, IT_CONNECT_TIMEOUT_MS, &c), "sc_connect(%s)",
		    it_env.socket ? it_env.socket : "(SPARSECOMM_SOCKET unset)");
	int rank = sc_rank(c), size = sc_size(c);
	if (it_env.env_rank >= 0 && rank != it_env.env_rank)
		IT_FAIL("sc_rank() = %d but SPARSECOMM_RANK = %d", rank, it_env.env_rank);
	if (it_env.env_size >= 0 && size != it_env.env_size)
		IT_FAIL("sc_size() = %d but SPARSECOMM_SIZE = %d", size, it_env.env_size);
	if (it_env.env_local_rank >= 0 && sc_local_rank(c) != it_env.env_local_rank)
		IT_FAIL("sc_local_rank() = %d but SPARSECOMM_LOCAL_RANK = %d", sc_local_rank(c),
			it_env.env_local_rank);
	if (it_env.env_local_size >= 0 && sc_local_size(c) != it_env.env_local_size)
		IT_FAIL("sc_local_size() = %d but SPARSECOMM_LOCAL_SIZE = %d", sc_local_size(c),
			it_env.env_local_size);
	if (size < 1 || rank < 0 || rank >= size)
		IT_FAIL("bad identity from the daemon: rank %d of %d", rank, size);
	it_env.rank = rank;
	it_env.size = size;
	return c;
}

sc_tensor_t *it_register(sc_client_t *c, const char *name, sc_dtype_t dtype, size_t numel)
{
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register(c, name, dtype, numel, &t), "sc_register('%s', %s, %zu)", name,
		    sc_dtype_name(dtype), numel);
	if (!t || sc_tensor_numel(t) != numel || sc_tensor_dtype(t) != dtype ||
	    strcmp(sc_tensor_name(t), name) != 0)
		IT_FAIL("sc_register('%s') returned a tensor with other attributes", name);
	if (((uintptr_t)sc_tensor_data(t) & 63u) != 0)
		IT_FAIL("tensor '%s' data %p is not 64-byte aligned", name, sc_tensor_data(t));
	return t;
}

sc_tensor_t *it_register_topk(sc_client_t *c, const char *name, size_t numel)
{
	sc_tensor_opts_t o;
	memset(&o, 0, sizeof(o));
	o.struct_size = sizeof(o);
	o.sparsifier = SC_SPARSIFY_TOPK;
	o.density = 0.1;
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, numel, &o, &t),
		    "sc_register_ex('%s', top-k)", name);
	return t;
}

int it_wait(sc_client_t *c, sc_handle_t h, int timeout_ms)
{
	sc_status_t st = sc_wait(c, h, timeout_ms);
	snprintf(wait_err, sizeof(wait_err), "%s", sc_last_error());
	if (st != SC_ERR_TIMEOUT)
		return st;
	/* A daemon-side timeout releases the handle; a wait that ran out leaves it valid. */
	sc_status_t p = sc_poll(c, h);
	if (p == SC_IN_PROGRESS) {
		snprintf(wait_err, sizeof(wait_err),
			 "no completion within %d ms (the operation is still pending)",
			 timeout_ms);
		return IT_HANG;
	}
	if (p == SC_OK || p == SC_ERR_INVALID || p == SC_ERR_NOT_FOUND)
		return p == SC_OK ? SC_OK : SC_ERR_TIMEOUT;
	snprintf(wait_err, sizeof(wait_err), "%s", sc_last_error());
	return p;
}

const char *it_wait_name(int r)
{
	return r == IT_HANG ? "HANG (wait ran out)" : sc_status_name((sc_status_t)r);
}

const char *it_wait_error(void)
{
	return wait_err;
}

#define IT_MAX_BARRIERS 32
static struct {
	char tag[64];
	sc_client_t *c;
	sc_tensor_t *t;
} barriers[IT_MAX_BARRIERS];

double it_barrier(sc_client_t *c, const char *tag, double contrib)
{
	sc_tensor_t *t = NULL;
	int i;
	for (i = 0; i < IT_MAX_BARRIERS && barriers[i].t; i++)
		if (barriers[i].c == c && strcmp(barriers[i].tag, tag) == 0)
			break;
	if (i == IT_MAX_BARRIERS)
		IT_FAIL("too many barrier tags");
	if (!barriers[i].t) {
		char name[128];
		snprintf(name, sizeof(name), "itest.barrier.%s", tag);
		snprintf(barriers[i].tag, sizeof(barriers[i].tag), "%s", tag);
		barriers[i].c = c;
		barriers[i].t = it_register(c, name, SC_FLOAT32, 1);
	}
	t = barriers[i].t;
	*(float *)sc_tensor_data(t) = (float)contrib;
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "barrier '%s'", tag);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("barrier '%s': %s (%s)", tag, it_wait_name(r), it_wait_error());
	return *(float *)sc_tensor_data(t);
}

void it_fill(void *data, sc_dtype_t dtype, size_t n, uint64_t seed, int rank, int scale)
{
	for (size_t i = 0; i < n; i++) {
		int v = scale * it_value(seed, rank, i);
		switch (dtype) {
		case SC_FLOAT32:
			((float *)data)[i] = (float)v;
			break;
		case SC_FLOAT64:
			((double *)data)[i] = (double)v;
			break;
		case SC_INT32:
			((int32_t *)data)[i] = v;
			break;
		case SC_INT64:
			((int64_t *)data)[i] = v;
			break;
		}
	}
}

static double get_elem(const void *data, sc_dtype_t dtype, size_t i)
{
	switch (dtype) {
	case SC_FLOAT32:
		return ((const float *)data)[i];
	case SC_FLOAT64:
		return ((const double *)data)[i];
	case SC_INT32:
		return ((const int32_t *)data)[i];
	case SC_INT64:
		return (double)((const int64_t *)data)[i];
	}
	return NAN;
}

/* The allowed error for one element: exact for SUM and integers, one ulp of the expected
 * value for a floating-point AVERAGE (the single rounding of sum / size). */
static double expected_elem(sc_dtype_t dtype, long long sum, int size, sc_reduce_op_t op,
			    double *tol_p)
{
	*tol_p = 0;
	if (op == SC_OP_SUM)
		return (double)sum;
	double e = (double)sum / size;
	switch (dtype) {
	case SC_FLOAT32: {
		float ef = (float)e;
		*tol_p = nextafterf(fabsf(ef), INFINITY) - fabsf(ef);
		return ef;
	}
	case SC_FLOAT64:
		*tol_p = nextafter(fabs(e), INFINITY) - fabs(e);
		return e;
	default:
		return (double)(sum / size); /* callers make sum a multiple of size */
	}
}

size_t it_check(const void *data, sc_dtype_t dtype, size_t n, uint64_t seed, int size,
		int scale, sc_reduce_op_t op, char *why, size_t why_len)
{
	size_t wrong = 0, used = 0;
	if (why_len)
		why[0] = 0;
	for (size_t i = 0; i < n; i++) {
		long long sum = (long long)scale * it_value_sum(seed, size, i);
		double tol, e = expected_elem(dtype, sum, size, op, &tol);
		double got = get_elem(data, dtype, i);
		if (fabs(got - e) <= tol)
			continue;
		if (wrong < 4 && used < why_len) {
			int k = snprintf(why + used, why_len - used,
					 "%s[%zu] = %.9g, expected %.9g", wrong ? "; " : "", i,
					 got, e);
			if (k > 0)
				used += (size_t)k;
		}
		wrong++;
	}
	return wrong;
}

int it_mentions_rank(const char *msg, int r)
{
	for (const char *p = msg; (p = strstr(p, "rank")) != NULL;) {
		p += 4;
		if (*p == 's')
			p++;
		for (int guard = 0; *p && guard < 32; guard++) {
			if (isdigit((unsigned char)*p)) {
				char *end;
				long v = strtol(p, &end, 10), to = v;
				if (*end == '-' && isdigit((unsigned char)end[1])) /* "2-5" */
					to = strtol(end + 1, &end, 10);
				if (v <= r && r <= to)
					return 1;
				p = end;
			} else if (strchr(" ,:=[]()#{}", *p)) {
				p++;
			} else if (strncmp(p, "and ", 4) == 0) {
				p += 4;
			} else {
				break;
			}
		}
	}
	return 0;
}

int it_daemon_pid(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4400];
	int pid = -1;
	while (f && pid < 0 && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "/dev/shm/sparsecomm.");
		if (p)
			pid = atoi(p + strlen("/dev/shm/sparsecomm."));
	}
	if (f)
		fclose(f);
	if (pid <= 0)
		IT_FAIL("no /dev/shm/sparsecomm.<pid> object in /proc/self/maps");
	return pid;
}

int it_mentions_number(const char *msg, long long v)
{
	char num[32];
	int len = snprintf(num, sizeof(num), "%lld", v);
	for (const char *p = msg; (p = strstr(p, num)) != NULL; p++) {
		int before = p > msg && (isdigit((unsigned char)p[-1]) || p[-1] == '-');
		int after = isdigit((unsigned char)p[len]);
		if (!before && !after)
			return 1;
	}
	return 0;
}

int it_sparse(int argc, char **argv); /* itest_sparse.c */

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *doc;
} scenarios[] = {
    {"sums", it_sums, "[--big] [--iters N]: exact SUM/AVERAGE of many sizes and dtypes"},
    {"sums-small", it_sums, "sums of sizes 1, 3 or P-1, 1000 only"},
    {"fusion", it_fusion, "[--tensors N] [--steps N]: many small async tensors"},
    {"ops", it_ops, "min, max, product of every dtype exact; refusals and mismatches"},
    {"broadcast", it_broadcast, "broadcasts of every dtype exact, their bytes, errors"},
    {"allgather", it_allgather, "allgathers of varying counts exact; over the size refused"},
    {"reducescatter", it_reducescatter, "uneven row splits exact; rows that differ"},
    {"adasum", it_adasum, "adasum of float32/float64 against a reference tree; refusals"},
    {"alltoall", it_alltoall, "alltoalls of varying counts exact; over the size; bad counts"},
    {"join", it_join,
     "uneven steps: joined ranks add zeros, take no part in min, max, product"},
    {"join-carry", it_join_carry, "a step fails while a node's other trainer has joined"},
    {"join-root", it_join_root, "a broadcast from a joined root fails on every rank (n >= 3)"},
    {"join-killed", it_join_killed, "rank 1 dies: every join fails naming it (n >= 3)"},
    {"barrier", it_barrier_case, "barriers with a late rank wait for it; 50 in a row; busy"},
    {"barrier-stalled", it_barrier_stalled, "rank 1 skips a barrier: SC_ERR_STALLED"},
    {"mismatch", it_mismatch, "numel and dtype disagreeing on rank 1 (P >= 2)"},
    {"random", it_random,
     "[--steps N] [--seed S]: seeded faults, exact or an error everywhere"},
    {"coo-forms", it_coo_forms, "unsorted COO: a sparse result everywhere; over capacity"},
    {"late-release", it_late_release, "register/release per step, rank 0 late at step 1"},
    {"late", it_late, "rank 0 submits a step past stall_timeout_ms: it fails there too"},
    {"late-exit", it_late_exit,
     "leave|again: a job whose rank 0 leaves owing a late step, then a new job of the name"},
    {"late-reform", it_late_reform, "3 x 1: rank 0 late past a re-form (run.sh resets)"},
    {"group", it_group, "grouped operations: held and fused together; mismatch; stall"},
    {"many-names", it_many_names, "600 tensors submitted at once, twice: exact"},
    {"psets", it_psets, "process sets of 4 trainers: per-set sums, errors, removal, bytes"},
    {"capi", it_capi, "the header's promises: stats per process set, newer struct_size"},
    {"psets-killed", it_psets_killed, "4 x 1, rank 3 dies: its sets fail, {0, 1} goes on"},
    {"psets-timeout", it_psets_timeout,
     "2 x 1, rank 0's add times out: its agreement's buffer is released once it ends"},
    {"shapes", it_shapes, "shapes that differ across ranks: MISMATCH; changed: exact"},
    {"fast", it_fast, "STEPS|shape|stall: fast mode (fast_path 1), exact"},
    {"evict", it_evict, "BOUND unique|rotation: the response cache's bound, exact"},
    {"agree", it_agree, "each option that decides the scheme differs on rank 1: MISMATCH"},
    {"busy", it_busy, "duplicate allreduce and duplicate registration (P >= 2)"},
    {"release", it_release, "a name released and registered again: new counts and dtypes"},
    {"release-one", it_release_one, "a name released and registered again on one node: exact"},
    {"badopts", it_badopts, "a sparsifier the daemon cannot make: SC_ERR_INVALID"},
    {"killed", it_killed, "rank 1 dies between two submissions (P >= 2)"},
    {"killed-late", it_killed_late, "2 x 2: rank 2 dies in a step rank 3 submits late"},
    {"killed-first", it_killed_first, "2 x 2: rank 3 dies before a step node 0 submits late"},
    {"killed-twice", it_killed_twice, "2 x 2: node 1 degraded twice around one step"},
    {"killed-refused", it_killed_refused,
     "2 x 2: a degraded node refuses a step, then fails the next"},
    {"killed-afresh", it_killed_afresh, "2 x 2: a degraded node's trainers all replaced"},
    {"killed-barrier", it_killed_barrier,
     "2 x 2: a successor in the barrier while its node-mate's step stalls"},
    {"stalled", it_stalled, "rank 1 never submits a tensor (short stall_timeout_ms)"},
    {"unknown", it_unknown, "raw allreduce of an unregistered id, garbage bytes"},
    {"version", it_version, "raw hello with protocol_version 999 and the previous one"},
    {"bodyless", it_bodyless, "raw Collective requests without a body (and version 3's)"},
    {"silent-accept", it_silent_accept, "raw trainers with and without silent_accept's ok"},
    {"oversize", it_oversize, "a 192 MiB control frame, the daemon's memory bounded"},
    {"false-pid", it_false_pid, "a trainer declaring a false pid, tracked by its real one"},
    {"ctl-flood", it_ctl_flood, "control clients that never read, dropped"},
    {"submit-channel", it_submit_channel,
     "the submit channel: tokens, pids, order rule, bounds"},
    {"submit-order", it_submit_order, "[STEPS]: submissions then a barrier or a join at once"},
    {"submit-threads", it_submit_threads, "[ROUNDS]: 4 threads of a trainer submit at once"},
    {"submit-batch", it_submit_batch, ": sc_submit_batch holds collectives until a flush"},
    {"submit-poll", it_submit_poll,
     ": sc_poll and a short sc_wait return behind a send blocked on a full channel"},
    {"submit-reconnect", it_submit_reconnect, "[TIMES]: sc_finalize then sc_connect at once"},
    {"submit-open", it_submit_open, "binding the channel against a scripted daemon"},
    {"finalize-race", it_finalize_race,
     "[ROUNDS] [SEED]: sc_finalize while threads wait, poll, register and enter barriers"},
    {"submit-emfile", it_submit_emfile, "the daemon out of descriptors: no spin"},
    {"submit-fork", it_submit_fork, "a forked child's requests refused, its finalize harmless"},
    {"join-left", it_join_left, "a join beside a barrier and a rank that leaves: at once"},
    {"join-timeout", it_join_timeout, "a join that timed out holds no later barrier"},
    {"crash", it_crash, "submits a tensor and kills itself"},
    {"peer-oversize", it_peer_oversize, "a 192 MiB frame to the coordinator"},
    {"badinput", it_badinput, "one rank's invalid input fails the operation on every rank"},
    {"ctl", it_ctl, "sparsectl status/stats/config while a job runs"},
    {"timeline", it_timeline, "DIR: sparsectl timeline start/stop around steps, files checked"},
    {"presel", it_presel,
     "DIR [cuda LOG]: selection at submission: bit-identical, early, failed step"},
    {"fplan", it_fplan, "[--bench N | --late]: 40 fused top-k/threshold tensors, fusion plans"},
    {"exdyna", it_exdyna, "[model|tensor]: 6 ExDyna tensors, one buffer or one each"},
    {"join-refused", it_join_refused, "raw joins to a lone coordinator: other transport"},
    {"peer-spoof", it_peer_spoof,
     "a raw rank 1 speaks for rank 0 and as the coordinator: nothing taken"},
    {"peer-stranger", it_peer_stranger,
     "peers without the job secret send garbage, a join and a plan: no answer"},
    {"gone", it_live_gone, "VICTIM WORD LIMIT_MS [rejoin]: a peer daemon goes away"},
    {"rejoin", it_live_rejoin, "a restarted node's trainer: an allreduce once whole"},
    {"gone-busy", it_live_busy, "VICTIM LIMIT_MS: a peer daemon killed while buffers move"},
    {"own", it_live_own, "VICTIM LIMIT_MS: a trainer waits while its own daemon is killed"},
    {"wait-race", it_wait_race, "[STEPS]: waits of 1 ms racing completions; abandoned ones"},
    {"bigreg", it_live_bigreg, "MIB: one rank registers MIB MiB while the others sum"},
    {"sparse", it_sparse, "[--numel N] [--scheme S]: every scheme pinned and auto, exact"},
    {"bits", it_bits, "LOG: every result's bits, to compare two daemon settings"},
    {"wire", it_wire16, "fp16/bf16 wires: exact, bit-identical, half the bytes, mismatch"},
    {"cuda-refused", it_cuda_refused, "DRIVER EXPECT [ORDINAL]: a cuda tensor refused"},
    {"cuda-sums", it_cuda_sums, "LOG: cuda tensors end to end (driver stand-in)"},
    {"cuda-psets", it_cuda_psets, "LOG [TRANSPORT]: cuda tensors in process sets, 3 x 1"},
    {"cuda-schemes", it_cuda_schemes,
     "LOG TRANSPORT: every scheme pinned on cuda tensors, exact or conserving"},
    {"cuda-killed", it_cuda_killed, "LOG: cuda tensors, rank 1 dies (P >= 2)"},
    {"cuda-visible", it_cuda_visible, "LOG: one GPU visible per trainer, found by UUID"},
    {"cuda-lost", it_cuda_lost, "LOG METRICS: a sticky GPU fault ($SCG_HOST_FAULT)"},
    {"cuda-driver", it_cuda_driver, "DRIVER LOG: the library's CUDA IPC plumbing alone"},
    {"cuda-fake", it_cuda_fake, "DRIVER LOG: cuda tensors against a fake daemon"},
    {"metrics", it_metrics, "HOST:PORT...: the metrics endpoint around allreduces"},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sparsecomm-itest SCENARIO [options]\n"
		"Runs one trainer-side integration scenario; start it under sparsecomm-run.\n");
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		fprintf(f, "  %-11s %s\n", scenarios[i].name, scenarios[i].doc);
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	it_env.socket = getenv("SPARSECOMM_SOCKET");
	it_env.env_rank = env_int("SPARSECOMM_RANK");
	it_env.env_size = env_int("SPARSECOMM_SIZE");
	it_env.env_local_rank = env_int("SPARSECOMM_LOCAL_RANK");
	it_env.env_local_size = env_int("SPARSECOMM_LOCAL_SIZE");
	it_env.env_node_rank = env_int("SPARSECOMM_NODE_RANK");
	it_env.env_node_count = env_int("SPARSECOMM_NODE_COUNT");
	it_env.rank = it_env.env_rank;
	it_env.size = it_env.env_size;
	char exe[4096];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (k > 0) {
		exe[k] = 0;
		snprintf(it_env.self_dir, sizeof(it_env.self_dir), "%s", dirname(exe));
	}
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (strcmp(argv[1], scenarios[i].name) != 0)
			continue;
		it_env.scenario = scenarios[i].name;
		if (!it_env.socket)
			IT_FAIL("SPARSECOMM_SOCKET is not set: run under sparsecomm-run");
		return scenarios[i].fn(argc - 1, argv + 1);
	}
	fprintf(stderr, "sparsecomm-itest: unknown scenario '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
