/*
 * jobd.c: a trainer started by a scheduler (mpirun, srun, torchrun, a Kubernetes job)
 * finds its place in the job from the scheduler's environment (proto/place.h) and, when
 * no daemon serves its node, the job's own daemon for the node (docs/deployment.md,
 * "Under a scheduler"). The node's trainer of local rank 0 starts it as
 * `sparsecomm-run --node-daemon` (the launcher's own way of starting a daemon; the
 * directory's files are listed in client/run/jobd.h), in a session of its own so that the
 * scheduler's stop of one trainer does not take it; every local trainer writes its pid
 * there and waits for the daemon's socket. The daemon stops when the node's last trainer
 * has gone. A trainer that nothing placed and no daemon serves (started alone) is a job of
 * one, with a daemon of its own the same way.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "place.h"
#include "port.h"
#include "rundir.h"

#define JOB_WAIT_MIN_MS	    130000 /* the daemon's own --ready-timeout is 120 s */
#define JOB_READY_TMO_S	    120
#define JOB_SOCKET_MAX	    100 /* sun_path holds 108 bytes */
#define JOB_FAIL_TAIL_BYTES 600

static const char *env_get(void *ctx, const char *name)
{
	(void)ctx;
	return getenv(name);
}

/* The environment with the pairs of ctx (NULL-terminated name, value, ...) over it. */
static const char *env_over(void *ctx, const char *name)
{
	for (const char *const *kv = ctx; kv[0]; kv += 2)
		if (!strcmp(kv[0], name))
			return kv[1];
	return getenv(name);
}

/* A trainer that no launcher or scheduler placed (`python3 train.py`) and no daemon
 * serves: a job of one trainer, its id this process's, its coordinator on a free loopback
 * port below the kernel's ephemeral range (proto/port.h: no connect() takes it before the
 * daemon binds it) unless SPARSECOMM_COORDINATOR or SPARSECOMM_PORT names one (as Horovod runs
 * a script started alone as a job of one; docs/deployment.md, "Started alone"). */
static int place_alone(const char *host, sc_place_t *p, char *err, size_t len)
{
	char job[64], coord[32];
	snprintf(job, sizeof(job), "alone.%ld", (long)getpid());
	snprintf(coord, sizeof(coord), "127.0.0.1:%d", sc_port_pick());
	int given = getenv("SPARSECOMM_COORDINATOR") || getenv("SPARSECOMM_PORT");
	const char *kv[] = {"SPARSECOMM_RANK",
			    "0",
			    "SPARSECOMM_SIZE",
			    "1",
			    "SPARSECOMM_LOCAL_SIZE",
			    "1",
			    "SPARSECOMM_JOB_ID",
			    job,
			    given ? NULL : "SPARSECOMM_COORDINATOR",
			    coord,
			    NULL};
	return sc_place_from_env(env_over, kv, host, p, err, len);
}

/* Whether every address host resolves to is a loopback one: then every node of the job
 * is this machine, and the daemons need no secret (they refuse none on loopback). */
static int host_is_loopback(const char *host)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	int loop = 1;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			const unsigned char *b =
			    (const unsigned char *)&((struct sockaddr_in *)a->ai_addr)
				->sin_addr;
			loop &= b[0] == 127;
		} else if (a->ai_family == AF_INET6) {
			static const unsigned char one[16] = {[15] = 1};
			loop &=
			    !memcmp(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr, one, 16);
		}
	}
	freeaddrinfo(res);
	return loop;
}

/* A directory of this user's alone (made with mode 0700 when missing). */
static sc_status_t private_dir(const char *path)
{
	struct stat st;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return scl_error(SC_ERR_SYSTEM, "cannot create the job's directory %s: %s",
				 path, strerror(errno));
	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077))
		return scl_error(SC_ERR_SYSTEM,
				 "%s is not a directory of uid %u alone (mode 0700): remove it",
				 path, (unsigned)geteuid());
	return SC_OK;
}

/* The trainer's pid in DIR/node<N>.t<L>, where the node's daemon watches it. */
static sc_status_t register_pid(const char *dir, const sc_place_t *p)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 48], line[32];
	snprintf(path, sizeof(path), "%s/node%d.t%d", dir, p->node_rank, p->local_rank);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	int n = snprintf(line, sizeof(line), "%d\n", (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) < 0 ||
	    rename(tmp, path) < 0) {
		sc_status_t st =
		    scl_error(SC_ERR_SYSTEM, "cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
		return st;
	}
	return SC_OK;
}

/* sparsecomm-run: $SPARSECOMM_RUN, else beside this library or program (or in ../bin),
 * else on PATH. */
static void find_run(char *out, size_t cap)
{
	const char *e = getenv("SPARSECOMM_RUN");
	Dl_info info;
	if (e && *e) {
		snprintf(out, cap, "%s", e);
		return;
	}
	if (dladdr((void *)find_run, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", info.dli_fname);
		*strrchr(dir, '/') = '\0';
		snprintf(out, cap, "%s/sparsecomm-run", dir);
		if (access(out, X_OK) == 0)
			return;
		snprintf(out, cap, "%s/../bin/sparsecomm-run", dir);
		if (access(out, X_OK) == 0)
			return;
	}
	snprintf(out, cap, "sparsecomm-run");
}

/* Starts sparsecomm-run --node-daemon in a session of its own, its output in
 * DIR/node<N>.run.log; returns once it is on its way (not ready). */
static sc_status_t start_node_daemon(const char *dir, const sc_place_t *p, const char *secret)
{
	char run[PATH_MAX], node[16], nodes[16], per[16], coord[SC_PLACE_HOST_BYTES + 16],
	    ready[16], log[PATH_MAX + 32], failed[PATH_MAX + 32];
	const char *argv[24];
	int n = 0;
	find_run(run, sizeof(run));
	snprintf(node, sizeof(node), "%d", p->node_rank);
	snprintf(nodes, sizeof(nodes), "%d", p->node_count);
	snprintf(per, sizeof(per), "%d", p->local_size);
	snprintf(ready, sizeof(ready), "%d", JOB_READY_TMO_S);
	snprintf(coord, sizeof(coord), strchr(p->coordinator_host, ':') ? "[%s]:%d" : "%s:%d",
		 p->coordinator_host, p->coordinator_port);
	snprintf(log, sizeof(log), "%s/node%d.run.log", dir, p->node_rank);
	snprintf(failed, sizeof(failed), "%s/node%d.failed", dir, p->node_rank);
	unlink(failed);
	argv[n++] = run;
	argv[n++] = "--node-daemon";
	argv[n++] = "--job-dir";
	argv[n++] = dir;
	argv[n++] = "--node";
	argv[n++] = node;
	argv[n++] = "--nodes";
	argv[n++] = nodes;
	argv[n++] = "--per-node";
	argv[n++] = per;
	argv[n++] = "--coordinator";
	argv[n++] = coord;
	argv[n++] = "--ready-timeout";
	argv[n++] = ready;
	if (secret) {
		argv[n++] = "--secret-file";
		argv[n++] = secret;
	}
	if (!host_is_loopback(p->coordinator_host))
		argv[n++] = "--remote";
	argv[n] = NULL;

	pid_t pid = fork();
	if (pid < 0)
		return scl_error(SC_ERR_SYSTEM, "fork: %s", strerror(errno));
	if (pid == 0) { /* only async-signal-safe calls from here */
		setsid();
		if (fork() != 0)
			_exit(0);
		int in = open("/dev/null", O_RDONLY);
		int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (in < 0 || out < 0)
			_exit(127);
		dup2(in, 0);
		dup2(out, 1);
		dup2(out, 2);
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		execvp(run, (char *const *)argv);
		int f = open(failed, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		static const char msg[] =
		    "cannot run sparsecomm-run (set SPARSECOMM_RUN or PATH)\n";
		if (f >= 0 && write(f, msg, sizeof(msg) - 1) < 0)
			_exit(127);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return SC_OK;
}

/* After a failed start nobody watches the node's files: each trainer removes its pid, and
 * the last one the failure's files, the job's directory and this user's when empty. */
static void leave_failed(const char *dir, const sc_place_t *p)
{
	char path[PATH_MAX + 32];
	struct stat st;
	snprintf(path, sizeof(path), "%s/node%d.t%d", dir, p->node_rank, p->local_rank);
	unlink(path);
	for (int k = 0; k < p->local_size; k++) {
		snprintf(path, sizeof(path), "%s/node%d.t%d", dir, p->node_rank, k);
		if (stat(path, &st) == 0)
			return;
	}
	snprintf(path, sizeof(path), "%s/node%d.failed", dir, p->node_rank);
	unlink(path);
	snprintf(path, sizeof(path), "%s/node%d.run.log", dir, p->node_rank);
	unlink(path);
	if (rmdir(dir) == 0 && strrchr(dir, '/')) {
		snprintf(path, sizeof(path), "%.*s", (int)(strrchr(dir, '/') - dir), dir);
		rmdir(path);
	}
}

/* The failure the node's daemon reported, with the last lines of what it said. */
static sc_status_t daemon_failed(const char *dir, const sc_place_t *p)
{
	char path[PATH_MAX + 32], why[256] = "", tail[JOB_FAIL_TAIL_BYTES + 1] = "";
	snprintf(path, sizeof(path), "%s/node%d.failed", dir, p->node_rank);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t m = fd >= 0 ? read(fd, why, sizeof(why) - 1) : 0;
	if (fd >= 0)
		close(fd);
	why[m > 0 ? m : 0] = '\0';
	why[strcspn(why, "\n")] = '\0';
	snprintf(path, sizeof(path), "%s/node%d.run.log", dir, p->node_rank);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		off_t size = lseek(fd, 0, SEEK_END);
		off_t from = size > JOB_FAIL_TAIL_BYTES ? size - JOB_FAIL_TAIL_BYTES : 0;
		m = pread(fd, tail, JOB_FAIL_TAIL_BYTES, from);
		tail[m > 0 ? m : 0] = '\0';
		close(fd);
	}
	leave_failed(dir, p);
	return scl_error(SC_ERR_CONNECT,
			 "rank %d: the job's daemon of node %d did not start: %s%s%s", p->rank,
			 p->node_rank, why, tail[0] ? "; it said:\n" : "", tail);
}

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for the node's daemon's socket, or its failure, within wait_ms. */
static sc_status_t wait_socket(const char *dir, const char *sock, const sc_place_t *p,
			       int wait_ms)
{
	char failed[PATH_MAX + 32];
	long long end = mono_ms() + wait_ms;
	struct stat st;
	snprintf(failed, sizeof(failed), "%s/node%d.failed", dir, p->node_rank);
	for (;;) {
		if (stat(sock, &st) == 0)
			return SC_OK;
		if (stat(failed, &st) == 0)
			return daemon_failed(dir, p);
		if (mono_ms() >= end)
			break;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return scl_error(
	    SC_ERR_TIMEOUT,
	    "rank %d: the job's daemon of node %d (started by its trainer of local "
	    "rank 0) did not open %s within %d s; the daemons of all %d nodes must "
	    "meet at the coordinator %s:%d first",
	    p->rank, p->node_rank, sock, wait_ms / 1000, p->node_count, p->coordinator_host,
	    p->coordinator_port);
}

/* The job's daemon: its secret decided, its directory made, started on local rank 0,
 * waited for; endpoint gets its socket. */
static sc_status_t job_daemon(const sc_place_t *p, int timeout_ms, char *endpoint, size_t cap)
{
	const char *secret = getenv("SPARSECOMM_SECRET_FILE");
	const char *tmp = getenv("TMPDIR");
	char base[PATH_MAX / 2], dir[PATH_MAX], sock[PATH_MAX + 32];
	sc_status_t st;

	if (!p->coordinator_host[0])
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: a job on %d nodes (%s) needs its coordinator's host: set "
		    "MASTER_ADDR to the first node's address (mpirun -x MASTER_ADDR=...) "
		    "or SPARSECOMM_COORDINATOR=HOST:PORT",
		    p->rank, p->node_count, p->source);
	if (secret && !*secret)
		secret = NULL;
	if (!secret && !host_is_loopback(p->coordinator_host))
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: a job on several hosts needs a job secret (README.md, "
		    "Security): set SPARSECOMM_SECRET_FILE to a file of 16 bytes or more, "
		    "mode 0600, the same on every host (srun --export=ALL,"
		    "SPARSECOMM_SECRET_FILE=...; mpirun -x SPARSECOMM_SECRET_FILE; a "
		    "Kubernetes Secret mounted as a file)",
		    p->rank);
	int n = snprintf(base, sizeof(base), "%s/sparsecomm-job-%u", tmp && *tmp ? tmp : "/tmp",
			 (unsigned)geteuid());
	snprintf(dir, sizeof(dir), "%s/%s", base, p->job);
	snprintf(sock, sizeof(sock), "%s/node%d/ctl.sock", dir, p->node_rank);
	if (n >= (int)sizeof(base) || strlen(sock) > JOB_SOCKET_MAX)
		return scl_error(
		    SC_ERR_INVALID,
		    "the job's daemon socket %s would be longer than %d bytes: set "
		    "TMPDIR to a shorter directory",
		    sock, JOB_SOCKET_MAX);
	if ((st = private_dir(base)) || (st = private_dir(dir)) || (st = register_pid(dir, p)))
		return st;
	struct stat sst;
	if (p->local_rank == 0 && stat(sock, &sst) < 0 &&
	    (st = start_node_daemon(dir, p, secret)))
		return st;
	st = wait_socket(dir, sock, p,
			 timeout_ms > JOB_WAIT_MIN_MS ? timeout_ms : JOB_WAIT_MIN_MS);
	if (st == SC_OK)
		snprintf(endpoint, cap, "ipc://%s", sock);
	return st;
}

sc_status_t scl_job_socket(int want_daemon, int timeout_ms, char *endpoint, size_t cap,
			   int *local_rank_p)
{
	const char *mode = getenv("SPARSECOMM_JOB_DAEMON");
	const char *own = getenv("SPARSECOMM_SOCKET");
	char host[SC_PLACE_HOST_BYTES] = "", err[512], dflt[PATH_MAX + 16];
	sc_place_t p;
	struct stat st;

	endpoint[0] = '\0';
	*local_rank_p = -1;
	if (mode && !strcmp(mode, "0")) /* the library without scheduler support */
		return SC_OK;
	gethostname(host, sizeof(host) - 1);
	int found = sc_place_from_env(env_get, NULL, host, &p, err, sizeof(err));
	if (found < 0 && !(own && *own)) /* under sparsecomm-run its own variables decide */
		return scl_error(SC_ERR_INVALID, "%s", err);
	sc_socket_default(dflt, sizeof(dflt));
	int served = stat(strncmp(dflt, "ipc://", 6) ? dflt : dflt + 6, &st) == 0;
	if (found == 0 && want_daemon && !(own && *own) && !served &&
	    (found = place_alone(host, &p, err, sizeof(err))) < 0)
		return scl_error(SC_ERR_INVALID, "%s", err);
	if (found <= 0)
		return SC_OK;
	*local_rank_p = p.local_rank;
	if (!want_daemon || (own && *own))
		return SC_OK;
	/* a daemon that serves the node (the user's own, or the system's) is used, unless
	 * SPARSECOMM_JOB_DAEMON=1 asks for the job's own */
	if (!(mode && !strcmp(mode, "1")) && served)
		return SC_OK;
	return job_daemon(&p, timeout_ms, endpoint, cap);
}
