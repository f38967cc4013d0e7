/*
 * main.c: sparsecommd's entry point: configuration (defaults < file < environment <
 * flags), the runtime directory, the loop and its housekeeping, signals, and an orderly
 * shutdown that fails in-flight work with an error to its clients, removes shared memory
 * and sockets, and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "ctl/ctl.h"
#include "daemon.h"
#include "device/device.h"
#include "engine/engine.h"
#include "metrics/metrics.h"
#include "rundir.h"
#include "util/dirlock.h"
#include "util/log.h"
#include "util/shmreap.h"
#include "util/timeline.h"
#include "world/world.h"

/* Descriptors the daemon needs whatever the job: libzmq's context and sockets, the
 * control, metrics and runtime-directory files and the log; then 2 per node (its
 * coordinator-channel and data-plane connections) and 2 per trainer (its session and its
 * pidfd). */
#define SCD_MIN_FDS 64

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecommd [--config FILE] [--KEY VALUE]... [--notify-fd N] "
	    "[--dump-config]\n\n"
	    "The sparsecomm gradient synchronisation daemon, one per node. Every KEY below is\n"
	    "also read from the INI file and from SPARSECOMM_<KEY> in the environment\n"
	    "(precedence, lowest first: default, file, environment, flag; dashes and\n"
	    "underscores alike in a flag's KEY).\n\n"
	    "  --config FILE             the INI file (default: $SPARSECOMM_CONFIG, else "
	    "none)\n");
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		char buf[32];
		scd_config_t c;
		scd_config_init(&c);
		fprintf(out, "  --%-24s %s (default: %s)%s\n", scd_cfg_desc[k].name,
			scd_cfg_desc[k].doc, scd_config_text(&c, k, buf, sizeof(buf)),
			(scd_cfg_desc[k].runtime & SCD_CFG_OWNER) ? " [runtime, owner]"
			: (scd_cfg_desc[k].runtime & SCD_CFG_RT)  ? " [runtime]"
								  : "");
		scd_config_free(&c);
	}
	fprintf(out,
		"\n  --notify-fd N             write READY=1 to fd N once the world has "
		"formed\n  --dump-config             print the effective configuration "
		"and where each value came from\n"
		"  --version                 print the version and the protocol, and exit\n"
		"  -h, --help                this text\n");
}

/* The ctl_group key as a group id (d->ctl_gid, -1 when empty). */
static sc_status_t resolve_ctl_group(scd_daemon_t *d)
{
	const char *name = scd_cfg_str(&d->cfg, SCD_CFG_ctl_group);
	char *end, buf[4096];
	struct group gr, *found = NULL;
	d->ctl_gid = -1;
	if (!name[0])
		return SC_OK;
	errno = 0;
	unsigned long n = strtoul(name, &end, 10);
	if (!*end && !errno && n < 0x7fffffff) {
		d->ctl_gid = (long)n;
		return SC_OK;
	}
	int rc = getgrnam_r(name, &gr, buf, sizeof(buf), &found);
	if (!found) {
		scd_error(SCD_SUB_MAIN, "ctl_group '%s': %s", name,
			  rc ? strerror(rc) : "no such group");
		return SC_ERR_INVALID;
	}
	d->ctl_gid = (long)gr.gr_gid;
	return SC_OK;
}

/* Creates the runtime directory (0700, owned by us; 0750 of ctl_group when set) or checks
 * an existing one. */
static sc_status_t make_runtime_dir(scd_daemon_t *d)
{
	const char *dir = scd_cfg_str(&d->cfg, SCD_CFG_runtime_dir);
	if (dir[0])
		snprintf(d->runtime_dir, sizeof(d->runtime_dir), "%s", dir);
	else
		sc_rundir_default((unsigned)geteuid(), d->runtime_dir, sizeof(d->runtime_dir));
	for (char *p = d->runtime_dir + 1; *p; p++) { /* parents, as mkdir -p */
		if (*p != '/')
			continue;
		*p = 0;
		mkdir(d->runtime_dir, 0755);
		*p = '/';
	}
	if (mkdir(d->runtime_dir, 0700) != 0 && errno != EEXIST) {
		scd_error(SCD_SUB_MAIN, "cannot create runtime directory %s: %s",
			  d->runtime_dir, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	struct stat st;
	if (stat(d->runtime_dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		scd_error(SCD_SUB_MAIN,
			  "runtime directory %s is not a directory owned by uid %u",
			  d->runtime_dir, (unsigned)geteuid());
		return SC_ERR_SYSTEM;
	}
	if (d->ctl_gid >= 0 && chown(d->runtime_dir, (uid_t)-1, (gid_t)d->ctl_gid) != 0) {
		scd_error(SCD_SUB_MAIN, "cannot give runtime directory %s to ctl_group %ld: %s",
			  d->runtime_dir, d->ctl_gid, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	chmod(d->runtime_dir, d->ctl_gid >= 0 ? 0750 : 0700);
	char why[512];
	int lock_fd; /* held open (and locked) until the process exits */
	if (scd_dirlock_take(d->runtime_dir, &lock_fd, why, sizeof(why)) != SC_OK) {
		scd_error(SCD_SUB_MAIN, "%s", why);
		return SC_ERR_BUSY;
	}
	snprintf(d->ctl_path, sizeof(d->ctl_path), "%s/ctl.sock", d->runtime_dir);
	snprintf(d->ctl_endpoint, sizeof(d->ctl_endpoint), "ipc://%s", d->ctl_path);
	return SC_OK;
}

static void sd_notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = 0;
	const char msg[] = "READY=1\nSTATUS=world formed";
	sendto(fd, msg, sizeof(msg) - 1, 0, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
}

/* What ctl tells the world: ctl does not include world/ (ctl.h). */
static const scd_ctl_upcalls_t world_upcalls = {
    .announce = scd_world_announce,
    .abandon = scd_world_abandon,
    .fail_step = scd_world_fail_step,
    .forget = scd_world_forget,
    .node_state = scd_world_node_state,
    .pending = scd_world_pending,
    .config_propose = scd_world_config_propose,
    .status = scd_world_status,
    .fusion_stats = scd_world_fusion_stats,
    .barrier_enter = scd_world_barrier_enter,
    .node_join = scd_world_node_join,
    .node_left = scd_world_node_left,
    .node_idle = scd_world_node_idle,
    .collect = scd_world_collect,
};

static void daemon_stop(scd_daemon_t *d, int exit_code);

/* The world has formed and the data plane is up: serve trainers, and say so. */
static void daemon_world_ready(scd_daemon_t *d)
{
	if (scd_ctl_listen(d->ctl) != SC_OK) {
		daemon_stop(d, 1);
		return;
	}
	scd_info(SCD_SUB_MAIN, "ready: rank %d of %d, %d trainer(s) per node, control %s",
		 d->rank, d->world_size, d->local_size, d->ctl_endpoint);
	if (d->notify_fd >= 0) {
		const char msg[] = "READY=1\n";
		if (write(d->notify_fd, msg, sizeof(msg) - 1) < 0)
			scd_warn(SCD_SUB_MAIN, "notify fd: %s", strerror(errno));
		close(d->notify_fd);
		d->notify_fd = -1;
	}
	sd_notify_ready();
}

/* Stops the daemon (exit code as given) at the next loop turn. */
static void daemon_stop(scd_daemon_t *d, int exit_code)
{
	if (d->shutting_down)
		return;
	d->shutting_down = 1;
	d->exit_code = exit_code;
	scd_world_leave(d->world,
			exit_code ? "its daemon stopped on an error" : "its daemon stopped");
	scd_engine_fence(d->engine); /* nothing delivered, nor told, after the failure */
	scd_ctl_fail_all(d->ctl, SC_ERR_SHUTDOWN, "the daemon is shutting down", 0);
	uv_stop(d->loop);
}

static void on_signal(uv_signal_t *h, int signum)
{
	scd_daemon_t *d = h->data;
	scd_info(SCD_SUB_MAIN, "%s: shutting down", strsignal(signum));
	char why[96];
	snprintf(why, sizeof(why), "its daemon was stopped (%s)", strsignal(signum));
	scd_world_leave(d->world, why);
	daemon_stop(d, 0);
}

/* SIGHUP, which a terminal that closes sends and which operators send other daemons to
 * re-read their files, ends no job: its default action killed the daemon at once,
 * leaving its socket and shared memory behind and its peers to find it lost a
 * peer_timeout_ms later. The file is not re-read (runtime settings change on every node
 * through sparsectl config set); the log says so. */
static void on_hangup(uv_signal_t *h, int signum)
{
	scd_warn(SCD_SUB_MAIN,
		 "SIGHUP ignored: the configuration file is not re-read (sparsectl config "
		 "set changes a runtime setting on every node; SIGTERM stops the daemon)");
}

/* What the world asks of the process: world/ includes nothing of main.c (world.h). */
static const scd_world_hooks_t process_hooks = {
    .ready = daemon_world_ready,
    .stop = daemon_stop,
};

static void on_prepare(uv_prepare_t *h)
{
	scd_daemon_t *d = h->data;
	scd_world_drain(d->world);
	scd_ctl_drain(d->ctl);
}

static void on_tick(uv_timer_t *h)
{
	scd_daemon_t *d = h->data;
	scd_ctl_tick(d->ctl);
	scd_world_tick(d->world);
}

/* Parses the command line into cfg. *done_p is set when there is nothing left to do
 * (--help, --version); an error is printed here and returned. */
static sc_status_t parse_args(scd_daemon_t *d, int argc, char **argv, int *dump_p, int *done_p)
{
	char err[300];
	const char *file = getenv("SPARSECOMM_CONFIG");
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			file = argv[i + 1];
	sc_status_t st = file ? scd_config_load_file(&d->cfg, file, err, sizeof(err)) : SC_OK;
	if (st == SC_OK)
		st = scd_config_load_env(&d->cfg, err, sizeof(err));
	if (st != SC_OK) {
		fprintf(stderr, "sparsecommd: %s\n", err);
		return st;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			*done_p = 1;
			return SC_OK;
		}
		if (!strcmp(a, "--version")) {
			printf("sparsecommd %s (protocol %d)\n", SC_VERSION_STRING,
			       SC_PROTOCOL_VERSION);
			*done_p = 1;
			return SC_OK;
		}
		if (!strcmp(a, "--dump-config")) {
			*dump_p = 1;
			continue;
		}
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "sparsecommd: unexpected argument '%s' (see --help)\n",
				a);
			return SC_ERR_INVALID;
		}
		char key[64];
		const char *eq = strchr(a, '='), *val;
		size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		snprintf(key, sizeof(key), "%.*s", (int)klen, a + 2);
		if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			fprintf(stderr, "sparsecommd: %s needs a value\n", a);
			return SC_ERR_INVALID;
		}
		if (!strcmp(key, "config"))
			continue;
		if (!strcmp(key, "notify-fd") || !strcmp(key, "notify_fd")) {
			d->notify_fd = atoi(val);
			continue;
		}
		int k = scd_config_find(key);
		if (k < 0) {
			fprintf(stderr, "sparsecommd: unknown option --%s (see --help)\n", key);
			return SC_ERR_INVALID;
		}
		st = scd_config_set(&d->cfg, k, val, SCD_SRC_FLAG, err, sizeof(err));
		if (st != SC_OK) {
			fprintf(stderr, "sparsecommd: --%s: %s\n", key, err);
			return st;
		}
	}
	return SC_OK;
}

/* True when every address host resolves to is a loopback address (an empty host, or
 * "*", means every interface). */
static int host_is_loopback(const char *host)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (!host[0] || !strcmp(host, "*") || getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	int lo = 1;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		const struct sockaddr_in *v4 = (const struct sockaddr_in *)ai->ai_addr;
		const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ai->ai_addr;
		if (ai->ai_family == AF_INET)
			lo &= (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
		else if (ai->ai_family == AF_INET6)
			lo &= IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
		else
			lo = 0;
	}
	freeaddrinfo(res);
	return lo;
}

/* Loads the job secret (secret_file). Without one, a daemon runs on loopback addresses
 * only, unless insecure is set (README.md, "Security"). */
static sc_status_t load_secret(scd_daemon_t *d)
{
	const char *path = scd_cfg_str(&d->cfg, SCD_CFG_secret_file);
	char err[PATH_MAX + 160];
	if (path[0]) {
		if (scd_secret_load(path, &d->secret, err, sizeof(err)) != SC_OK) {
			scd_error(SCD_SUB_MAIN, "%s", err);
			return SC_ERR_INVALID;
		}
		scd_info(SCD_SUB_MAIN,
			 "job secret from %s: the coordinator channel (CURVE) and "
			 "the data plane's connections are authenticated",
			 path);
		return SC_OK;
	}
	const char *protect = scd_cfg_str(&d->cfg, SCD_CFG_data_protection);
	if (strcmp(protect, "none") != 0) {
		scd_error(SCD_SUB_MAIN,
			  "data_protection = %s needs secret_file: the record layer's keys "
			  "derive from the job secret (README.md, Security)",
			  protect);
		return SC_ERR_INVALID;
	}
	const char *coord = scd_cfg_str(&d->cfg, SCD_CFG_coordinator);
	const char *data = scd_cfg_str(&d->cfg, SCD_CFG_data_addr);
	char host[256];
	const char *colon = strrchr(coord, ':');
	size_t n = colon ? (size_t)(colon - coord) : strlen(coord);
	if (n >= 2 && coord[0] == '[' && coord[n - 1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(n - 2), coord + 1);
	else
		snprintf(host, sizeof(host), "%.*s", (int)n, coord);
	int local = host_is_loopback(host) && host_is_loopback(data);
	if (scd_cfg_int(&d->cfg, SCD_CFG_insecure)) {
		scd_warn(
		    SCD_SUB_MAIN,
		    "insecure = 1 and no secret_file: nothing received from the network is "
		    "authenticated (coordinator %s, data plane %s)",
		    coord, data[0] ? data : "*");
		return SC_OK;
	}
	if (!local) {
		scd_error(
		    SCD_SUB_MAIN,
		    "no secret_file, and coordinator %s or data_addr '%s' is not a loopback "
		    "address: set secret_file to the job's secret (README.md, "
		    "Security), or insecure = true to run unauthenticated",
		    coord, data);
		return SC_ERR_INVALID;
	}
	return SC_OK;
}

/*
 * Raises the descriptor limit to its hard limit (a stranger's connections, the mesh and the
 * trainers' sessions all take descriptors, and libzmq aborts the process when it cannot
 * make one), and refuses to start below what the daemon needs in any case.
 */
static int raise_fd_limit(const scd_daemon_t *d)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t was = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			rl.rlim_cur = was;
	}
	rlim_t need = SCD_MIN_FDS + 2 * (rlim_t)d->world_size + 2 * (rlim_t)d->local_size;
	if (rl.rlim_cur >= need)
		return 0;
	scd_error(SCD_SUB_MAIN,
		  "the descriptor limit is %llu (ulimit -n; hard limit %llu): a daemon of %d "
		  "nodes with %d trainers each needs at least %llu; raise it (LimitNOFILE= "
		  "under systemd)",
		  (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
		  d->world_size, d->local_size, (unsigned long long)need);
	return -1;
}

static void no_work(uv_work_t *w) {}

static void no_work_done(uv_work_t *w, int status) {}

/*
 * Starts libuv's worker threads (shared memory is prepared there, ctl/tensor.c) with the
 * asynchronous signals blocked: they inherit the mask of the thread that creates them, and
 * SIGTERM must reach the loop thread only (which blocks it for its orderly teardown) as it
 * does not reach ZeroMQ's threads. The synchronous ones stay open: a SIGBUS on a worker is
 * the shared-memory guard's (util/shmguard.h).
 */
static void start_workers(uv_loop_t *loop)
{
	static uv_work_t w;
	sigset_t all, was;
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_BLOCK, &all, &was);
	uv_queue_work(loop, &w, no_work, no_work_done);
	pthread_sigmask(SIG_SETMASK, &was, NULL);
}
/* The data plane, made from the configuration and this daemon's place in the world; its
 * jobs come back to the world (negotiation). */
static void engine_done(void *arg, scd_job_t *job)
{
	scd_world_job_done(arg, job);
}

static sc_status_t engine_start(scd_daemon_t *d)
{
	scd_engine_params_t p = {.loop = d->loop,
				 .rank = d->rank,
				 .world_size = d->world_size,
				 .local_size = d->local_size,
				 .secret = d->secret.present,
				 .done = engine_done,
				 .done_arg = d};
	scd_engine_params_from_config(&d->cfg, &p);
	return scd_engine_create(&p, &d->engine);
}

int main(int argc, char **argv)
{
	static scd_daemon_t daemon_state;
	scd_daemon_t *d = &daemon_state;
	d->notify_fd = -1;
	scd_config_init(&d->cfg);
	int dump = 0, done = 0;
	if (parse_args(d, argc, argv, &dump, &done) != SC_OK)
		return 2;
	if (done)
		return 0;
	if (dump) {
		scd_config_dump(&d->cfg, stdout);
		return 0;
	}
	d->rank = (int)scd_cfg_int(&d->cfg, SCD_CFG_rank);
	d->world_size = (int)scd_cfg_int(&d->cfg, SCD_CFG_world_size);
	d->local_size = (int)scd_cfg_int(&d->cfg, SCD_CFG_local_size);
	if (d->rank >= d->world_size) {
		fprintf(stderr, "sparsecommd: rank %d is not below world_size %d\n", d->rank,
			d->world_size);
		return 2;
	}
	scd_log_parse_level(scd_cfg_str(&d->cfg, SCD_CFG_log_level), &scd_log_level);
	char prefix[48];
	snprintf(prefix, sizeof(prefix), "sparsecommd[%d]", d->rank);
	scd_log_set_prefix(prefix);
	signal(SIGPIPE, SIG_IGN);
	if (raise_fd_limit(d) != 0)
		return 1;
	if (load_secret(d) != SC_OK)
		return 1;
	if (resolve_ctl_group(d) != SC_OK || make_runtime_dir(d) != SC_OK)
		return 1;
	scd_shmreap_hold(); /* held until the process exits (util/shmreap.h) */
	scd_shmreap_stale("/dev/shm");
	const scd_device_ops_t *gpu;
	scd_device_home_set(SCD_DEVICE_CUDA, (int)scd_cfg_int(&d->cfg, SCD_CFG_cuda_device));
	if (!strcmp(scd_cfg_str(&d->cfg, SCD_CFG_device), "cuda") &&
	    scd_device_get(SCD_DEVICE_CUDA, &gpu) != SC_OK) {
		scd_error(SCD_SUB_MAIN,
			  "device = cuda, but the GPU device is not available: %s",
			  scd_device_unavailable_reason(SCD_DEVICE_CUDA));
		return 1;
	}

	scd_tl_thread("loop");
	if (scd_cfg_str(&d->cfg, SCD_CFG_timeline_file)[0])
		scd_tl_configure(scd_cfg_str(&d->cfg, SCD_CFG_timeline_file), d->rank,
				 d->world_size);
	d->loop = uv_default_loop();
	start_workers(d->loop);
	d->start_ms = scd_now_ms();
	d->zctx = zmq_ctx_new();
	sc_status_t st = d->zctx ? SC_OK : SC_ERR_SYSTEM;
	if (st == SC_OK)
		st = scd_ctl_create(d, &world_upcalls, &d->ctl);
	if (st == SC_OK)
		st = engine_start(d);
	if (st == SC_OK)
		st = scd_world_create(d, &process_hooks, &d->world);
	if (st == SC_OK && scd_metrics_start(d) != SC_OK)
		return 1; /* logged */
	if (st != SC_OK) {
		scd_error(SCD_SUB_MAIN, "cannot initialise the daemon: %s",
			  sc_status_message(st));
		return 1;
	}
	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	uv_signal_init(d->loop, &d->sig_hup);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, on_hangup, SIGHUP);
	uv_prepare_init(d->loop, &d->drain);
	d->drain.data = d;
	uv_prepare_start(&d->drain, on_prepare);
	uv_timer_init(d->loop, &d->tick);
	d->tick.data = d;
	uv_timer_start(&d->tick, on_tick, 250, 250);

	if (scd_world_start(d->world) != SC_OK)
		d->exit_code = 1;
	else
		uv_run(d->loop, UV_RUN_DEFAULT);

	/* Orderly teardown: clients were told (daemon_stop); now release everything. A
	 * second SIGTERM must not cut it short: block them before the handlers go. */
	sigset_t quiet;
	sigemptyset(&quiet);
	sigaddset(&quiet, SIGTERM);
	sigaddset(&quiet, SIGINT);
	sigaddset(&quiet, SIGHUP);
	sigprocmask(SIG_BLOCK, &quiet, NULL);
	if (!d->shutting_down) {
		scd_engine_fence(
		    d->engine); /* nothing delivered, nor told, after the failure */
		scd_ctl_fail_all(d->ctl, SC_ERR_SHUTDOWN, "the daemon is shutting down", 0);
	}
	if (scd_engine_destroy(d->engine, 2000) != SC_OK) {
		/* the engine is blocked in a transfer: remove what others could see, and go */
		scd_warn(SCD_SUB_MAIN, "the data plane is still busy; exiting without waiting");
		scd_ctl_unlink_all(d->ctl);
		scd_tl_configure("", d->rank, d->world_size); /* the file stays valid JSON */
		_exit(d->exit_code);
	}
	/* freed once the loop runs; the teardown below runs it (the tick, a trainer's
	 * message), and what it calls finds no engine */
	d->engine = NULL;
	scd_tl_configure("", d->rank, d->world_size);
	scd_metrics_stop(d);
	scd_world_destroy(d->world);
	scd_ctl_destroy(d->ctl);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	/* closed, they gave the signals back their default action, which one still on its
	 * way (a second SIGTERM) would take on a thread that does not block it: the daemon
	 * killed by it in its teardown, its exit no longer 0 */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	uv_close((uv_handle_t *)&d->drain, NULL);
	uv_close((uv_handle_t *)&d->tick, NULL);
	uv_run(d->loop, UV_RUN_NOWAIT);
	zmq_ctx_term(d->zctx);
	scd_info(SCD_SUB_MAIN, "exit %d", d->exit_code);
	scd_config_free(&d->cfg);
	scd_secret_wipe(&d->secret);
	return d->exit_code;
}
