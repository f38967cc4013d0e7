/*
 * main.c: sparsecomm-run, the launcher of a job (like horovodrun or mpirun), on one machine
 * or on several hosts (-H, --hostfile; hosts.h) through a remote-shell agent (remote.h).
 *
 * It starts N sparsecommd daemons ("nodes"), waits until each has written READY=1 on its
 * notify pipe (a remote daemon's arrives on its agent's stdout, through the tether), runs the
 * training command once per trainer (N x per-node processes) with the SPARSECOMM_* environment,
 * relays every trainer's output line by line with a "[rank] " prefix, and tears everything down
 * by pid when the trainers have ended, on a failure after a grace period, on --timeout, or on
 * SIGINT/SIGTERM (forwarded to the trainers first, the daemons after). With --netns the nodes
 * are network namespaces joined by a shaped bridge (netns.c), so one machine behaves like a
 * network-bound cluster.
 *
 * One thread and one poll() loop do everything: signals arrive through a self-pipe, child
 * exits are reaped by pid, and every wait in the loop has a deadline. Each child runs in
 * its own process group, so a trainer that is a script is stopped together with what it
 * started. The exit status is the first non-zero trainer status (a signal counts as
 * 128 + signal), 124 on --timeout, 1 when a daemon failed while every trainer succeeded.
 */
#include "hosts.h"
#include "janitor.h"
#include "jobd.h"
#include "netns.h"
#include "opts.h"
#include "pin.h"
#include "port.h"
#include "remote.h"
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT_NETNS 29500
#define LOG_TAIL_LINES	   30

typedef struct proc {
	pid_t pid; /* 0: never started */
	bool alive;
	bool reported; /* its exit has been handled */
	int status;    /* wait status */
	int rank;      /* trainer rank or node index */
	int node;      /* its node (host) */
	int in_fd;     /* remote: the agent's stdin, which the tether watches; -1 */
	bool remote;   /* runs through the agent */
	stream_t out, err;
} proc_t;

typedef struct daemon {
	proc_t p;
	int notify_fd;
	bool ready;
	bool shown; /* its failure and log tail have been printed */
	char notify[64];
	size_t notify_len;
	char log_path[PATH_MAX + 32];
} daemon_t;

typedef struct run {
	opts_t o;
	char dir[PATH_MAX];			  /* private directory */
	char secret[PATH_MAX + 16];		  /* the job secret, in dir */
	char secret_hex[RUN_SECRET_HEX_LINE + 1]; /* the same, as handed to remote tethers */
	char daemon_exe[PATH_MAX + 16];
	char coordinator[RUN_HOST_NAME_BYTES + 16];
	char self_exe[PATH_MAX]; /* this program, the remote tether */
	char cwd[PATH_MAX];	 /* where remote commands start */
	bool remote;		 /* some node runs through the agent */
	run_netns_t *net;
	run_pin_t pin; /* --pin-nodes: each node's CPUs (pin.h) */
	daemon_t *daemons;
	proc_t *trainers;
	int n_trainers;
	int last_signal, signal_count;
	bool new_signal;
} run_t;

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	run_signal_to_pipe(sig_pipe[1], sig);
}

/* ---- children ------------------------------------------------------------------------ */

static void describe_status(int status, char *buf, size_t n)
{
	if (WIFEXITED(status))
		snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, n, "ended (wait status %#x)", status);
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static void reap(proc_t *p)
{
	int st;
	if (!p->alive)
		return;
	pid_t r = waitpid(p->pid, &st, WNOHANG);
	if (r == p->pid) {
		p->alive = false;
		p->status = st;
	}
}

static void reap_all(run_t *r)
{
	for (int i = 0; i < r->o.nodes; i++)
		reap(&r->daemons[i].p);
	for (int i = 0; i < r->n_trainers; i++)
		reap(&r->trainers[i]);
}

/* Sends sig to a child's process group (and to the pid, in case it left the group). A
 * remote process is stopped by closing its agent's stdin: its tether then sends SIGTERM
 * there, SIGKILL after the grace period, and exits, which ends the agent; only SIGKILL
 * goes to the agent itself. The tether sends the signal whose number the launcher wrote
 * there before closing (remote.h). */
static void signal_proc(proc_t *p, int sig, bool group)
{
	if (p->pid <= 0)
		return;
	if (p->remote && sig != SIGKILL) {
		unsigned char b = (unsigned char)sig;
		if (p->in_fd >= 0 && write(p->in_fd, &b, 1) < 0) {
			/* the agent has gone: closing is all there is to do */
		}
		if (p->in_fd >= 0)
			close(p->in_fd);
		p->in_fd = -1;
		return;
	}
	/* a child leads its own group (child_setup): the group's signal reaches it, once; a
	 * second one sent to it could come after its handler was gone */
	if (group && kill(-p->pid, sig) == 0)
		return;
	if (p->alive)
		kill(p->pid, sig);
}

/*
 * With --netns each node is a host of its own to NCCL too (the daemons' nccl transport
 * and the trainers' own NCCL, e.g. torch.distributed): NCCL takes a host's identity from
 * NCCL_HOSTID, and would otherwise refuse two ranks on one GPU of one host, and its
 * sockets go over the namespace's link (eth0), which --rate shapes. --nccl-hostid does
 * the same without namespaces: the nodes share this machine's loopback, unless the caller
 * chose NCCL's interface. Writes the variables as NAME=VALUE into the two buffers; returns
 * 0 when the node gets none (either empty).
 */
static int nccl_vars(const run_t *r, int node, pid_t launcher, char *id, size_t id_cap,
		     char *ifname, size_t if_cap)
{
	id[0] = ifname[0] = '\0';
	if (r->net) {
		snprintf(id, id_cap, "NCCL_HOSTID=%s-node%d", r->net->ns[node], node);
		snprintf(ifname, if_cap, "NCCL_SOCKET_IFNAME==eth0");
		return 1;
	}
	if (!r->o.nccl_hostid)
		return 0;
	/* the launcher's pid: two jobs on one machine never share an identity */
	snprintf(id, id_cap, "NCCL_HOSTID=sparsecomm-run%d-node%d", (int)launcher, node);
	const char *set = getenv("NCCL_SOCKET_IFNAME");
	if (!set || !*set)
		snprintf(ifname, if_cap, "NCCL_SOCKET_IFNAME=lo");
	return 1;
}

/* In node's forked daemon child, before exec. */
static void nccl_env(const run_t *r, int node, pid_t launcher)
{
	char id[96], ifname[48];
	if (!nccl_vars(r, node, launcher, id, sizeof id, ifname, sizeof ifname))
		return;
	setenv("NCCL_HOSTID", strchr(id, '=') + 1, 1);
	if (ifname[0])
		setenv("NCCL_SOCKET_IFNAME", strchr(ifname, '=') + 1, 1);
}

/* In a forked child: detaches from the launcher's signal handling before exec; stdin
 * becomes in_fd (an agent's pipe), or /dev/null when it is -1. */
static void child_setup(pid_t launcher, int in_fd)
{
	sigset_t none;
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != launcher)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	unsetenv("NOTIFY_SOCKET");
	if (in_fd >= 0) {
		dup2(in_fd, 0);
		return;
	}
	int devnull = open("/dev/null", O_RDONLY);
	if (devnull >= 0 && devnull != 0) {
		dup2(devnull, 0);
		close(devnull);
	}
}

/* Where node i's daemon reads the job secret the launcher made: its file here, or on a
 * remote host the file its tether writes from what the launcher hands it. */
static const char *secret_path(const run_t *r, int i, char *buf, size_t cap);
static bool node_remote(const run_t *r, int node);

/* The daemon of node i's command line: every option of a node's daemon is added here,
 * for a local and a remote daemon alike; then the --daemon-arg options. */
static void daemon_cmdline(const run_t *r, int i, int notify_fd, run_argv_t *av)
{
	const char *addr = r->net ? r->net->addr[i] : r->remote ? "0.0.0.0" : "127.0.0.1";
	run_argv_add(av, "%s", r->daemon_exe);
	run_argv_add(av, "--rank");
	run_argv_add(av, "%d", i);
	run_argv_add(av, "--world-size");
	run_argv_add(av, "%d", r->o.nodes);
	run_argv_add(av, "--local-size");
	run_argv_add(av, "%d", r->o.per_node);
	run_argv_add(av, "--coordinator");
	run_argv_add(av, "%s", r->coordinator);
	run_argv_add(av, "--data-addr");
	run_argv_add(av, "%s", addr);
	run_argv_add(av, "--runtime-dir");
	run_argv_add(av, "%s/node%d", r->dir, i);
	run_argv_add(av, "--notify-fd");
	run_argv_add(av, "%d", notify_fd);
	if (r->o.insecure) {
		run_argv_add(av, "--insecure");
		run_argv_add(av, "true");
	} else if (r->o.secret_file) {
		run_argv_add(av, "--secret-file");
		run_argv_add(av, "%s", r->o.secret_file);
	} else if (r->secret[0] || node_remote(r, i)) { /* --node-daemon: none on loopback */
		char to[PATH_MAX + 32];
		run_argv_add(av, "--secret-file");
		run_argv_add(av, "%s", secret_path(r, i, to, sizeof(to)));
	}
	for (int k = 0; k < r->o.n_daemon_args; k++)
		run_argv_add(av, "%s", r->o.daemon_args[k]);
}

/* Where node's processes run: "this machine", or the host's name. */
static const char *node_host(const run_t *r, int node)
{
	return r->o.hosts.n ? r->o.hosts.h[node].name : "this machine";
}

static bool node_remote(const run_t *r, int node)
{
	return r->o.hosts.n && !r->o.hosts.h[node].local;
}

static const char *secret_path(const run_t *r, int i, char *buf, size_t cap)
{
	if (!node_remote(r, i))
		return r->secret;
	snprintf(buf, cap, "%s/node%d.secret", r->dir, i);
	return buf;
}

/* The argv that runs words for node: through the agent and the tether on a remote host,
 * under "ip netns exec NS" with --netns, else as they are. */
static void node_argv(const run_t *r, int node, char *const *words, int notify_fd,
		      run_argv_t *out)
{
	if (node_remote(r, node)) {
		/* a daemon's tether writes the job secret the launcher hands it */
		char to[PATH_MAX + 32];
		const char *secret_to = notify_fd >= 0 && !r->o.insecure && !r->o.secret_file
					    ? secret_path(r, node, to, sizeof(to))
					    : NULL;
		run_remote_argv(out, r->o.rsh_agent, r->o.hosts.h[node].name, r->self_exe,
				r->cwd, notify_fd, secret_to, r->o.kill_grace_s, words);
		return;
	}
	if (r->net) {
		run_argv_add(out, "ip");
		run_argv_add(out, "netns");
		run_argv_add(out, "exec");
		run_argv_add(out, "%s", r->net->ns[node]);
	}
	run_argv_add_all(out, words);
}

/* A pipe for a remote process's stdin (the launcher keeps the write end), or -1s. */
static int stdin_pipe(bool remote, int in[2])
{
	in[0] = in[1] = -1;
	if (!remote)
		return 0;
	if (pipe2(in, O_CLOEXEC) < 0) {
		fprintf(stderr, "sparsecomm-run: pipe: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* A fresh job secret (32 random bytes) in the run's directory, readable by this user
 * alone; every daemon of the job reads it (--secret-file). */
static int write_secret(run_t *r)
{
	unsigned char key[32];
	snprintf(r->secret, sizeof(r->secret), "%s/secret", r->dir);
	if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
		fprintf(stderr, "sparsecomm-run: cannot draw a job secret: %s\n",
			strerror(errno));
		return -1;
	}
	int fd = open(r->secret, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ssize_t w = fd >= 0 ? write(fd, key, sizeof(key)) : -1;
	int err = errno;
	for (size_t k = 0; k < sizeof(key); k++)
		snprintf(r->secret_hex + 2 * k, 3, "%02x", key[k]);
	r->secret_hex[2 * sizeof(key)] = '\n';
	explicit_bzero(key, sizeof(key));
	if (fd >= 0)
		close(fd);
	if (w != (ssize_t)sizeof(key)) {
		fprintf(stderr, "sparsecomm-run: cannot write the job secret %s: %s\n",
			r->secret, w < 0 ? strerror(err) : "short write");
		return -1;
	}
	return 0;
}

static int spawn_daemon(run_t *r, int i)
{
	daemon_t *d = &r->daemons[i];
	bool remote = node_remote(r, i);
	int notify[2], outp[2], in[2];
	char rdir[PATH_MAX + 16], prefix[24];

	snprintf(d->log_path, sizeof(d->log_path), "%s/daemon%d.log",
		 r->o.log_dir ? r->o.log_dir : r->dir, i);
	int log_fd = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log_fd < 0) {
		fprintf(stderr, "sparsecomm-run: cannot create %s: %s\n", d->log_path,
			strerror(errno));
		return -1;
	}
	snprintf(rdir, sizeof(rdir), "%s/node%d", r->dir, i);
	if (!remote && mkdir(rdir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "sparsecomm-run: cannot create %s: %s\n", rdir,
			strerror(errno));
		close(log_fd);
		return -1;
	}
	if (pipe2(notify, O_CLOEXEC) < 0 || pipe2(outp, O_CLOEXEC) < 0 ||
	    stdin_pipe(remote, in) < 0) {
		fprintf(stderr, "sparsecomm-run: pipe: %s\n", strerror(errno));
		close(log_fd);
		return -1;
	}
	/* remote: the tether hands the daemon fd 3 and copies it to the agent's stdout */
	run_argv_t words = {0}, argv = {0};
	daemon_cmdline(r, i, remote ? 3 : notify[1], &words);
	node_argv(r, i, words.v, 3, &argv);
	pid_t launcher = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "sparsecomm-run: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		child_setup(launcher, in[0]);
		nccl_env(r, i, launcher);
		run_pin_apply(&r->pin, i);
		if (remote) {
			dup2(notify[1], 1);
			dup2(outp[1], 2);
		} else {
			fcntl(notify[1], F_SETFD, 0);
			dup2(outp[1], 1);
			dup2(outp[1], 2);
		}
		run_execvp_sbin(argv.v[0], argv.v);
		dprintf(2, "sparsecomm-run: cannot run %s: %s\n", argv.v[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	run_argv_free(&words);
	run_argv_free(&argv);
	close(notify[1]);
	close(outp[1]);
	if (in[0] >= 0)
		close(in[0]);
	/* the remote daemon's tether reads the job secret first (a pipe's buffer holds it) */
	if (remote && !r->o.insecure && !r->o.secret_file &&
	    write(in[1], r->secret_hex, RUN_SECRET_HEX_LINE) != RUN_SECRET_HEX_LINE)
		fprintf(stderr, "sparsecomm-run: cannot hand node %d the job secret: %s\n", i,
			strerror(errno));
	d->p = (proc_t){
	    .pid = pid, .alive = true, .rank = i, .node = i, .in_fd = in[1], .remote = remote};
	d->p.err.fd = -1;
	d->notify_fd = notify[0];
	snprintf(prefix, sizeof(prefix), "[d%d] ", i);
	run_stream_init(&d->p.out, outp[0], r->o.verbose ? 2 : -1, log_fd, prefix);
	if (r->o.verbose) {
		fprintf(stderr, "sparsecomm-run: daemon %d on %s: pid %d%s, log %s\n", i,
			node_host(r, i), (int)pid, remote ? " (agent)" : "", d->log_path);
	}
	return 0;
}

/* The SPARSECOMM_* (and HOROVOD_*) environment of a trainer, as NAME=VALUE words. */
static void trainer_env(const run_t *r, int node, int local, run_argv_t *env)
{
	run_argv_add(env, "SPARSECOMM_SOCKET=ipc://%s/node%d/ctl.sock", r->dir, node);
	/* SPARSECOMM_*, and horovodrun's (Gloo mode) names of the same values, which scripts
	 * read before hvd.init() (a device per local rank) and Horovod's test suite compares
	 * with hvd.rank() and hvd.size(); the cross rank is the node's, as every node runs
	 * the same number of trainers */
	static const char *const prefixes[] = {"SPARSECOMM", "HOROVOD"};
	for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++) {
		run_argv_add(env, "%s_RANK=%d", prefixes[k], node * r->o.per_node + local);
		run_argv_add(env, "%s_SIZE=%d", prefixes[k], r->o.nodes * r->o.per_node);
		run_argv_add(env, "%s_LOCAL_RANK=%d", prefixes[k], local);
		run_argv_add(env, "%s_LOCAL_SIZE=%d", prefixes[k], r->o.per_node);
	}
	run_argv_add(env, "SPARSECOMM_NODE_RANK=%d", node);
	run_argv_add(env, "SPARSECOMM_NODE_COUNT=%d", r->o.nodes);
	if (r->pin.list)
		run_argv_add(env, "SPARSECOMM_NODE_CPUS=%s", r->pin.list);
	run_argv_add(env, "HOROVOD_CROSS_RANK=%d", node);
	run_argv_add(env, "HOROVOD_CROSS_SIZE=%d", r->o.nodes);
	run_argv_add(env, "HOROVOD_HOSTNAME=%s",
		     r->o.hosts.n ? node_host(r, node) : "localhost");
	if (r->net) {
		size_t cap = (size_t)r->o.nodes * RUN_IFNAME_BYTES + 1;
		char *names = calloc(1, cap), *addrs = calloc(1, cap);
		for (int i = 0; names && addrs && i < r->o.nodes; i++) {
			strcat(names, i ? " " : "");
			strcat(names, r->net->ns[i]);
			strcat(addrs, i ? " " : "");
			strcat(addrs, r->net->addr[i]);
		}
		run_argv_add(env, "SPARSECOMM_NETNS=%s", names ? names : "");
		run_argv_add(env, "SPARSECOMM_NETNS_ADDRS=%s", addrs ? addrs : "");
		run_argv_add(env, "SPARSECOMM_BRIDGE_ADDR=%s", r->net->bridge_addr);
		run_argv_add(env, "SPARSECOMM_NETNS_SUBNET=%s", r->net->subnet);
		run_argv_add(env, "SPARSECOMM_NETNS_RATE=%s", r->net->rate);
		free(names);
		free(addrs);
	}
	char id[96], ifname[48]; /* see nccl_vars */
	if (nccl_vars(r, node, getpid(), id, sizeof id, ifname, sizeof ifname)) {
		run_argv_add(env, "%s", id);
		if (ifname[0])
			run_argv_add(env, "%s", ifname);
	}
}

/* In a local trainer's child: the environment set, stale --netns variables removed. */
static void apply_env(const run_argv_t *env)
{
	static const char *const netns_vars[] = {
	    "SPARSECOMM_NETNS",	       "SPARSECOMM_NETNS_ADDRS", "SPARSECOMM_BRIDGE_ADDR",
	    "SPARSECOMM_NETNS_SUBNET", "SPARSECOMM_NETNS_RATE",	 "SPARSECOMM_NODE_CPUS"};
	for (size_t k = 0; k < sizeof(netns_vars) / sizeof(netns_vars[0]); k++)
		unsetenv(netns_vars[k]);
	for (int k = 0; k < env->n; k++)
		putenv(env->v[k]);
}

static int spawn_trainer(run_t *r, int node, int local)
{
	int rank = node * r->o.per_node + local;
	proc_t *t = &r->trainers[rank];
	bool remote = node_remote(r, node);
	int outp[2], errp[2], in[2];
	char prefix[24];

	if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
	    stdin_pipe(remote, in) < 0) {
		fprintf(stderr, "sparsecomm-run: pipe: %s\n", strerror(errno));
		return -1;
	}
	run_argv_t env = {0}, words = {0}, argv = {0};
	trainer_env(r, node, local, &env);
	if (remote) { /* the environment travels on the command line */
		run_argv_add(&words, "env");
		run_argv_add_all(&words, env.v);
	}
	run_argv_add_all(&words, r->o.cmd);
	node_argv(r, node, words.v, -1, &argv);
	pid_t launcher = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "sparsecomm-run: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		child_setup(launcher, in[0]);
		if (!remote)
			apply_env(&env);
		run_pin_apply(&r->pin, node);
		dup2(outp[1], 1);
		dup2(errp[1], 2);
		run_execvp_sbin(argv.v[0], argv.v);
		dprintf(2, "cannot run %s: %s\n", argv.v[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	run_argv_free(&env);
	run_argv_free(&words);
	run_argv_free(&argv);
	close(outp[1]);
	close(errp[1]);
	if (in[0] >= 0)
		close(in[0]);
	*t = (proc_t){.pid = pid,
		      .alive = true,
		      .rank = rank,
		      .node = node,
		      .in_fd = in[1],
		      .remote = remote};
	snprintf(prefix, sizeof(prefix), "[%d] ", rank);
	run_stream_init(&t->out, outp[0], 1, -1, prefix);
	run_stream_init(&t->err, errp[0], 2, -1, prefix);
	return 0;
}

/* ---- the poll loop ------------------------------------------------------------------- */

enum { SRC_SIGNAL, SRC_NOTIFY, SRC_STREAM };

/* Waits at most timeout_ms for output, signals or child exits, and handles them. */
static void pump(run_t *r, long long timeout_ms)
{
	int cap = 1 + r->o.nodes * 2 + r->n_trainers * 2;
	struct pollfd *pfd = calloc((size_t)cap, sizeof(*pfd));
	void **what = calloc((size_t)cap, sizeof(void *));
	int *kind = calloc((size_t)cap, sizeof(int));
	int n = 0;

	if (!pfd || !what || !kind) {
		fprintf(stderr, "sparsecomm-run: out of memory\n");
		exit(1);
	}
#define ADD(fd_, kind_, ptr_)                                                                  \
	do {                                                                                   \
		pfd[n] = (struct pollfd){.fd = (fd_), .events = POLLIN};                       \
		kind[n] = (kind_);                                                             \
		what[n++] = (ptr_);                                                            \
	} while (0)
	ADD(sig_pipe[0], SRC_SIGNAL, NULL);
	for (int i = 0; i < r->o.nodes; i++) {
		daemon_t *d = &r->daemons[i];
		if (d->notify_fd >= 0)
			ADD(d->notify_fd, SRC_NOTIFY, d);
		if (d->p.out.fd >= 0)
			ADD(d->p.out.fd, SRC_STREAM, &d->p.out);
	}
	for (int i = 0; i < r->n_trainers; i++) {
		if (r->trainers[i].out.fd >= 0)
			ADD(r->trainers[i].out.fd, SRC_STREAM, &r->trainers[i].out);
		if (r->trainers[i].err.fd >= 0)
			ADD(r->trainers[i].err.fd, SRC_STREAM, &r->trainers[i].err);
	}
#undef ADD
	if (timeout_ms < 0)
		timeout_ms = 0;
	if (timeout_ms > 1000)
		timeout_ms = 1000;
	int got = poll(pfd, (nfds_t)n, (int)timeout_ms);
	for (int k = 0; got > 0 && k < n; k++) {
		if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (kind[k] == SRC_SIGNAL) {
			unsigned char sigs[64];
			ssize_t m = read(sig_pipe[0], sigs, sizeof(sigs));
			for (ssize_t j = 0; j < m; j++) {
				if (sigs[j] == SIGCHLD)
					continue;
				r->last_signal = sigs[j];
				r->signal_count++;
				r->new_signal = true;
			}
		} else if (kind[k] == SRC_NOTIFY) {
			daemon_t *d = what[k];
			ssize_t m = read(d->notify_fd, d->notify + d->notify_len,
					 sizeof(d->notify) - 1 - d->notify_len);
			if (m > 0) {
				d->notify_len += (size_t)m;
				d->notify[d->notify_len] = 0;
				if (strstr(d->notify, "READY=1"))
					d->ready = true;
			}
			if (m == 0 || (m < 0 && errno != EINTR && errno != EAGAIN) ||
			    d->ready || d->notify_len == sizeof(d->notify) - 1) {
				close(d->notify_fd);
				d->notify_fd = -1;
			}
		} else {
			run_stream_read(what[k]);
		}
	}
	free(pfd);
	free(what);
	free(kind);
	reap_all(r);
}

/* Prints the last lines of a daemon's log with its "[d<i>] " prefix. */
static void print_log_tail(run_t *r, int i)
{
	daemon_t *d = &r->daemons[i];
	long long until = run_mono_ms() + 1000;
	/* Collect what the daemon wrote before it went, if it has gone. */
	while (d->p.out.fd >= 0 && !d->p.alive && run_mono_ms() < until)
		pump(r, until - run_mono_ms());
	if (r->o.verbose)
		return; /* its output was shown as it came */
	int fd = open(d->log_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	static char buf[16384];
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
	close(fd);
	if (n <= 0) {
		fprintf(stderr, "sparsecomm-run: daemon %d wrote nothing (log %s)\n", i,
			d->log_path);
		return;
	}
	buf[n] = 0;
	int lines = 0;
	char *p = buf + n;
	if (p > buf && p[-1] == '\n')
		p--;
	while (p > buf && lines < LOG_TAIL_LINES) {
		p--;
		if (*p == '\n')
			lines++;
	}
	if (*p == '\n')
		p++;
	fprintf(stderr, "sparsecomm-run: last lines of daemon %d's log (%s%s):\n", i,
		d->log_path, r->o.log_dir ? "" : ", removed at exit: --log-dir DIR keeps it");
	for (char *line = p; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		fprintf(stderr, "[d%d] %.*s\n", i, (int)len, line);
		line += len + (nl ? 1 : 0);
	}
}

/* ---- phases -------------------------------------------------------------------------- */

static int wait_ready(run_t *r)
{
	long long deadline = run_mono_ms() + (long long)(r->o.ready_timeout_s * 1000);
	int shown = 0;
	for (;;) {
		int ready = 0;
		for (int i = 0; i < r->o.nodes; i++) {
			daemon_t *d = &r->daemons[i];
			char how[96];
			if (d->ready) {
				ready++;
				continue;
			}
			if (d->p.alive && d->notify_fd >= 0)
				continue;
			if (d->p.alive) { /* closed the pipe without READY: give it 2 s to exit
					   */
				long long until = run_mono_ms() + 2000;
				while (d->p.alive && run_mono_ms() < until)
					pump(r, until - run_mono_ms());
			}
			if (d->p.alive)
				snprintf(how, sizeof(how),
					 "closed its notify pipe without READY=1");
			else
				describe_status(d->p.status, how, sizeof(how));
			fprintf(stderr,
				"sparsecomm-run: daemon rank %d (%s) %s before it was ready\n",
				i, node_host(r, i), how);
			print_log_tail(r, i);
			d->shown = true;
			return -1;
		}
		if (ready != shown && (r->o.hosts.n || r->o.verbose)) {
			fprintf(stderr, "sparsecomm-run: daemons up %d/%d\n", ready,
				r->o.nodes);
			shown = ready;
		}
		if (ready == r->o.nodes)
			return 0;
		if (r->new_signal) {
			fprintf(stderr,
				"sparsecomm-run: interrupted by signal %d while starting the "
				"daemons\n",
				r->last_signal);
			return -1;
		}
		if (run_mono_ms() >= deadline) {
			for (int i = 0; i < r->o.nodes; i++) {
				if (r->daemons[i].ready)
					continue;
				fprintf(
				    stderr,
				    "sparsecomm-run: daemon rank %d (%s) not ready after %g "
				    "s (--ready-timeout)\n",
				    i, node_host(r, i), r->o.ready_timeout_s);
				print_log_tail(r, i);
			}
			return -1;
		}
		pump(r, deadline - run_mono_ms());
	}
}

typedef struct job_state {
	int code; /* first non-zero trainer exit code */
	bool timed_out;
	bool daemon_failed;
	bool stopping;	   /* the launcher has signalled the trainers */
	long long stop_at; /* SIGTERM the remaining trainers then (0: not set) */
	long long kill_at; /* SIGKILL them then */
} job_state_t;

static void stop_trainers(run_t *r, job_state_t *js, int sig)
{
	if (js)
		js->stopping = true;
	for (int i = 0; i < r->n_trainers; i++)
		if (r->trainers[i].alive)
			signal_proc(&r->trainers[i], sig, true);
}

/* Notes trainers and daemons that ended since the last call; sets the stop deadline. */
static void check_exits(run_t *r, job_state_t *js)
{
	long long now = run_mono_ms();
	for (int i = 0; i < r->n_trainers; i++) {
		proc_t *t = &r->trainers[i];
		char how[96];
		if (t->alive || t->reported)
			continue;
		t->reported = true;
		int c = exit_code(t->status);
		if (c == 0)
			continue;
		describe_status(t->status, how, sizeof(how));
		fprintf(stderr, "sparsecomm-run: rank %d (%s) %s%s\n", t->rank,
			node_host(r, t->node), how, js->stopping ? " (stopped)" : "");
		if (!js->code)
			js->code = c;
		if (!r->o.keep_going && !js->stop_at && !js->stopping) {
			js->stop_at = now + (long long)(r->o.grace_s * 1000);
			fprintf(stderr,
				"sparsecomm-run: stopping the other trainers in %g s (--grace; "
				"--keep-going lets them finish)\n",
				r->o.grace_s);
		}
	}
	for (int i = 0; i < r->o.nodes; i++) {
		proc_t *d = &r->daemons[i].p;
		char how[96];
		if (d->alive || d->reported)
			continue;
		d->reported = true;
		js->daemon_failed = true;
		describe_status(d->status, how, sizeof(how));
		fprintf(stderr,
			"sparsecomm-run: daemon rank %d (%s) %s while the trainers ran\n", i,
			node_host(r, i), how);
		print_log_tail(r, i);
		r->daemons[i].shown = true;
		if (!r->o.keep_going && !js->stop_at && !js->stopping) {
			js->stop_at = now + (long long)(r->o.grace_s * 1000);
			fprintf(stderr, "sparsecomm-run: stopping the trainers in %g s\n",
				r->o.grace_s);
		}
	}
}

static int alive_trainers(const run_t *r)
{
	int n = 0;
	for (int i = 0; i < r->n_trainers; i++)
		n += r->trainers[i].alive;
	return n;
}

static void run_job(run_t *r, job_state_t *js)
{
	long long job_end =
	    r->o.timeout_s > 0 ? run_mono_ms() + (long long)(r->o.timeout_s * 1000) : 0;
	long long kill_ms = (long long)(r->o.kill_grace_s * 1000);

	while (alive_trainers(r) > 0) {
		long long now = run_mono_ms(), next = now + 1000;
		check_exits(r, js);
		if (r->new_signal) {
			r->new_signal = false;
			if (r->signal_count == 1) {
				fprintf(
				    stderr,
				    "sparsecomm-run: got signal %d: passing it to the trainers "
				    "(again to kill everything)\n",
				    r->last_signal);
				stop_trainers(r, js, r->last_signal);
				js->stop_at = 0;
				js->kill_at = now + kill_ms;
			} else {
				stop_trainers(r, js, SIGKILL);
			}
		}
		if (job_end && now >= job_end && !js->timed_out) {
			js->timed_out = true;
			fprintf(stderr,
				"sparsecomm-run: job timed out after %g s; stopping it\n",
				r->o.timeout_s);
			stop_trainers(r, js, SIGTERM);
			js->stop_at = 0;
			js->kill_at = now + kill_ms;
		}
		if (js->stop_at && now >= js->stop_at) {
			stop_trainers(r, js, SIGTERM);
			js->stop_at = 0;
			js->kill_at = now + kill_ms;
		}
		if (js->kill_at && now >= js->kill_at) {
			stop_trainers(r, js, SIGKILL);
			js->kill_at = 0;
		}
		if (job_end && !js->timed_out && job_end < next)
			next = job_end;
		if (js->stop_at && js->stop_at < next)
			next = js->stop_at;
		if (js->kill_at && js->kill_at < next)
			next = js->kill_at;
		pump(r, next - now);
	}
	check_exits(r, js);
	/* Output still in the pipes, as long as no grandchild keeps them open. */
	long long until = run_mono_ms() + 1000;
	for (;;) {
		bool open = false;
		for (int i = 0; i < r->n_trainers; i++)
			open |= r->trainers[i].out.fd >= 0 || r->trainers[i].err.fd >= 0;
		if (!open || run_mono_ms() >= until)
			break;
		pump(r, until - run_mono_ms());
	}
}

/* Stops every child still running by pid: trainers first, then daemons. */
static void teardown(run_t *r, job_state_t *js)
{
	/* a remote tether takes the grace period itself before its SIGKILL */
	long long grace = (long long)(r->o.kill_grace_s * 1000) + (r->remote ? 3000 : 0);
	for (int pass = 0; pass < 2; pass++) {
		bool daemons = pass == 1;
		int count = daemons ? r->o.nodes : r->n_trainers;
		for (int i = 0; i < count; i++) {
			proc_t *p = daemons ? &r->daemons[i].p : &r->trainers[i];
			p->reported = true; /* exits from here on are ours */
			signal_proc(p, SIGTERM, !daemons || p->alive);
		}
		long long until = run_mono_ms() + grace;
		for (;;) {
			int alive = 0;
			for (int i = 0; i < count; i++)
				alive += daemons ? r->daemons[i].p.alive : r->trainers[i].alive;
			if (!alive || run_mono_ms() >= until)
				break;
			pump(r, until - run_mono_ms());
		}
		for (int i = 0; i < count; i++) {
			proc_t *p = daemons ? &r->daemons[i].p : &r->trainers[i];
			if (!p->alive)
				continue;
			fprintf(stderr, "sparsecomm-run: %s %d (%s, pid %d) %s; killing it\n",
				daemons ? "daemon" : "rank", p->rank, node_host(r, p->node),
				(int)p->pid,
				p->remote ? "did not stop with its agent's input closed"
					  : "ignored SIGTERM");
			signal_proc(p, SIGKILL, true);
			int st;
			while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
				;
			p->alive = false;
			p->status = st;
			if (daemons)
				js->daemon_failed = true;
		}
	}
	/* Daemons exit 0 on SIGTERM; anything else is worth showing. */
	for (int i = 0; i < r->o.nodes; i++) {
		daemon_t *d = &r->daemons[i];
		char how[96];
		if (d->p.pid <= 0 || (WIFEXITED(d->p.status) && WEXITSTATUS(d->p.status) == 0))
			continue;
		js->daemon_failed = true;
		if (d->shown)
			continue;
		describe_status(d->p.status, how, sizeof(how));
		fprintf(stderr, "sparsecomm-run: daemon rank %d %s%s\n", i, how,
			r->n_trainers && r->trainers[0].pid ? " on shutdown" : "");
		print_log_tail(r, i);
	}
	long long until = run_mono_ms() + 500;
	for (;;) {
		bool open = false;
		for (int i = 0; i < r->o.nodes; i++)
			open |= r->daemons[i].p.out.fd >= 0;
		if (!open || run_mono_ms() >= until)
			break;
		pump(r, until - run_mono_ms());
	}
	for (int i = 0; i < r->o.nodes; i++) {
		run_stream_close(&r->daemons[i].p.out);
		if (r->daemons[i].notify_fd >= 0)
			close(r->daemons[i].notify_fd);
	}
	for (int i = 0; i < r->n_trainers; i++) {
		run_stream_close(&r->trainers[i].out);
		run_stream_close(&r->trainers[i].err);
	}
}

/* ---- setup --------------------------------------------------------------------------- */

static int find_daemon(run_t *r)
{
	char self[PATH_MAX];
	const char *env = getenv("SPARSECOMM_DAEMON");
	if (r->o.daemon_path) {
		snprintf(r->daemon_exe, sizeof(r->daemon_exe), "%s", r->o.daemon_path);
		if (strchr(r->daemon_exe, '/') && access(r->daemon_exe, X_OK) < 0) {
			fprintf(stderr, "sparsecomm-run: --daemon %s: %s\n", r->daemon_exe,
				strerror(errno));
			return -1;
		}
		return 0;
	}
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			snprintf(r->daemon_exe, sizeof(r->daemon_exe), "%s/sparsecommd", self);
			if (access(r->daemon_exe, X_OK) == 0)
				return 0;
		}
	}
	if (env && *env) {
		snprintf(r->daemon_exe, sizeof(r->daemon_exe), "%s", env);
		return 0;
	}
	snprintf(r->daemon_exe, sizeof(r->daemon_exe), "sparsecommd");
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

/* What remote nodes need: this program's path (the tether) and the working directory. */
static int prepare_remote(run_t *r)
{
	ssize_t n = readlink("/proc/self/exe", r->self_exe, sizeof(r->self_exe) - 1);
	if (n <= 0 || !getcwd(r->cwd, sizeof(r->cwd))) {
		fprintf(stderr,
			"sparsecomm-run: cannot find this program or the working "
			"directory: %s\n",
			strerror(errno));
		return -1;
	}
	r->self_exe[n] = 0;
	if (r->daemon_exe[0] != '/') {
		fprintf(stderr,
			"sparsecomm-run: remote hosts need the daemon's absolute path (found "
			"'%s'): give --daemon PATH\n",
			r->daemon_exe);
		return -1;
	}
	return 0;
}

/* The coordinator's host:port: node 0's host as named, or loopback when every node is on
 * this machine; the host of --netns's first namespace. */
static void coordinator_addr(run_t *r, int port)
{
	char self[RUN_HOST_NAME_BYTES] = "localhost";
	const char *host = "127.0.0.1";
	if (r->net) {
		host = r->net->addr[0];
	} else if (r->remote) {
		host = r->o.hosts.h[0].name;
		if (r->o.hosts.h[0].local && gethostname(self, sizeof(self)) == 0) {
			self[sizeof(self) - 1] = 0;
			host = self; /* the others cannot reach "localhost" */
		}
	}
	snprintf(r->coordinator, sizeof(r->coordinator),
		 strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	if (r->remote && run_host_is_loopback(host))
		fprintf(stderr,
			"sparsecomm-run: warning: the coordinator's host %s resolves to a "
			"loopback address here, which the other hosts cannot reach; name the "
			"first host by an address or name they reach\n",
			host);
}

static int install_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* ---- the node's daemon of a job under a scheduler (jobd.h) ---------------------------- */

/* Tells node's waiting trainers that its daemon did not start (why: one line). */
static void node_failed(const char *dir, int node, const char *why)
{
	char path[PATH_MAX + 32];
	int fd =
	    (size_t)snprintf(path, sizeof(path), "%s/node%d.failed", dir, node) < sizeof(path)
		? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
		: -1;
	if (fd >= 0) {
		dprintf(fd, "%s\n", why);
		close(fd);
	}
	fprintf(stderr, "sparsecomm-run: %s\n", why);
}

static void node_daemon_args(int argc, char **argv, run_t *r, int *node_p)
{
	opts_t *o = &r->o;
	const char *dir = NULL, *coord = NULL;
	int node = -1;
	*o = (opts_t){.per_node = 1, .ready_timeout_s = 120, .kill_grace_s = 5};
	o->daemon_args = calloc((size_t)argc + 1, sizeof(char *));
	for (int i = 0; i < argc; i++) {
		char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--remote")) {
			r->remote = true;
			continue;
		}
		if (!v)
			run_die_usage("--node-daemon: %s needs a value", a);
		i++;
		if (!strcmp(a, "--job-dir"))
			dir = v;
		else if (!strcmp(a, "--node"))
			node = run_parse_int(a, v, 0, MAX_TRAINERS - 1);
		else if (!strcmp(a, "--nodes"))
			o->nodes = run_parse_int(a, v, 1, MAX_TRAINERS);
		else if (!strcmp(a, "--per-node"))
			o->per_node = run_parse_int(a, v, 1, MAX_TRAINERS);
		else if (!strcmp(a, "--coordinator"))
			coord = v;
		else if (!strcmp(a, "--secret-file"))
			o->secret_file = v;
		else if (!strcmp(a, "--ready-timeout"))
			o->ready_timeout_s = run_parse_seconds(a, v);
		else if (!strcmp(a, "--daemon"))
			o->daemon_path = v;
		else if (!strcmp(a, "--daemon-arg"))
			o->daemon_args[o->n_daemon_args++] = v;
		else
			run_die_usage("--node-daemon: unknown option '%s'", a);
	}
	if (!dir || !coord || node < 0 || node >= o->nodes || !o->daemon_args)
		run_die_usage(
		    "--node-daemon needs --job-dir, --coordinator, --nodes and --node "
		    "below --nodes");
	if (strlen(dir) >= sizeof(r->dir) - 64 || strlen(coord) >= sizeof(r->coordinator))
		run_die_usage("--node-daemon: --job-dir or --coordinator is too long");
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	snprintf(r->coordinator, sizeof(r->coordinator), "%s", coord);
	*node_p = node;
}

/* Whether node's daemon has failed to start (said once, to the trainers too). */
static bool node_start_failed(run_t *r, int node, long long deadline)
{
	daemon_t *d = &r->daemons[node];
	char why[256], how[96];
	if (d->ready || (d->p.alive && d->notify_fd >= 0 && run_mono_ms() < deadline))
		return false;
	if (!d->p.alive)
		describe_status(d->p.status, how, sizeof(how));
	else
		snprintf(how, sizeof(how), "%s",
			 d->notify_fd >= 0 ? "was not ready in time (--ready-timeout)"
					   : "closed its notify pipe without READY=1");
	snprintf(why, sizeof(why), "the daemon of node %d %s", node, how);
	node_failed(r->dir, node, why);
	print_log_tail(r, node);
	return true;
}

/*
 * sparsecomm-run --node-daemon (jobd.h): starts the node's daemon as a launcher starts
 * each of its own, then watches the node's trainers, and stops the daemon and removes the
 * node's files when every trainer that registered has gone (or none came in
 * --ready-timeout). Returns 0, or 1 when the daemon did not start or failed.
 */
static int node_daemon_main(int argc, char **argv)
{
	static run_t run;
	run_t *r = &run;
	job_state_t js = {0};
	run_watch_t w = {0};
	int node, registered = 0;
	bool started = false, failed = false;
	long long quiet_since = 0, start = run_mono_ms();

	node_daemon_args(argc, argv, r, &node);
	long long deadline = start + (long long)(r->o.ready_timeout_s * 1000);
	r->daemons = calloc((size_t)r->o.nodes, sizeof(daemon_t));
	if (install_signals() < 0 || find_daemon(r) < 0 || !r->daemons ||
	    run_watch_init(&w, r->o.per_node) < 0) {
		node_failed(r->dir, node, "cannot start sparsecomm-run --node-daemon");
		return 1;
	}
	for (int i = 0; i < r->o.nodes; i++) {
		r->daemons[i].notify_fd = -1;
		r->daemons[i].p.out.fd = r->daemons[i].p.err.fd = -1;
		r->daemons[i].p.out.log_fd = r->daemons[i].p.err.log_fd = -1;
		r->daemons[i].p.in_fd = -1;
	}
	if (spawn_daemon(r, node) < 0) {
		node_failed(r->dir, node, "cannot start the node's daemon (see its run.log)");
		failed = true;
	}
	while (!r->new_signal) {
		long long now = run_mono_ms();
		int alive = run_watch_scan(&w, r->dir, node, &registered);
		if (!started && !failed)
			failed = node_start_failed(r, node, deadline);
		started |= r->daemons[node].ready;
		if (registered && !alive) { /* a late trainer gets a second to register */
			if (!quiet_since)
				quiet_since = now;
			else if (now - quiet_since >= 1000)
				break;
		} else {
			quiet_since = 0;
		}
		if (!registered && now >= deadline)
			break;
		pump(r, 200);
	}
	teardown(r, &js);
	run_watch_free(&w);
	run_node_files_remove(r->dir, node);
	return failed || js.daemon_failed;
}

int main(int argc, char **argv)
{
	static run_t run;
	run_t *r = &run;
	job_state_t js = {0};
	int code = 1;

	if (argc > 1 && !strcmp(argv[1], "--tether"))
		return run_tether_main(argc - 2, argv + 2);
	if (argc > 1 && !strcmp(argv[1], "--node-daemon"))
		return node_daemon_main(argc - 2, argv + 2);
	run_parse_args(argc, argv, &r->o);
	if (r->o.netns && geteuid() != 0) {
		fprintf(stderr,
			"sparsecomm-run: --netns needs root: it creates network namespaces, a "
			"bridge and tc qdiscs.\n");
		run_print_fallback(&r->o, argc, argv);
		return 1;
	}
	if (install_signals() < 0 || find_daemon(r) < 0)
		return 1;
	const char *tmp = getenv("TMPDIR");
	snprintf(r->dir, sizeof(r->dir), "%s/sparsecomm-run.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(r->dir)) {
		fprintf(stderr, "sparsecomm-run: cannot create a directory in %s: %s\n",
			tmp && *tmp ? tmp : "/tmp", strerror(errno));
		return 1;
	}
	if (r->o.log_dir && mkdir(r->o.log_dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "sparsecomm-run: cannot create --log-dir %s: %s\n",
			r->o.log_dir, strerror(errno));
		goto out_rmdir;
	}
	r->n_trainers = r->o.nodes * r->o.per_node;
	for (int h = 0; h < r->o.hosts.n; h++)
		r->remote |= !r->o.hosts.h[h].local;
	if (!r->o.insecure && !r->o.secret_file && write_secret(r) < 0)
		goto out_rmdir;
	if (r->secret[0] && run_janitor_start(r->secret) < 0) {
		fprintf(stderr, "sparsecomm-run: cannot start the job secret's janitor: %s\n",
			strerror(errno));
		goto out_rmdir;
	}
	r->daemons = calloc((size_t)r->o.nodes, sizeof(daemon_t));
	r->trainers = calloc((size_t)r->n_trainers, sizeof(proc_t));
	if (!r->daemons || !r->trainers) {
		fprintf(stderr, "sparsecomm-run: out of memory\n");
		goto out_rmdir;
	}
	for (int i = 0; i < r->o.nodes; i++) {
		r->daemons[i].notify_fd = -1;
		r->daemons[i].p.out.fd = r->daemons[i].p.err.fd = -1;
		r->daemons[i].p.out.log_fd = r->daemons[i].p.err.log_fd = -1;
		r->daemons[i].p.in_fd = -1;
	}
	for (int i = 0; i < r->n_trainers; i++) {
		r->trainers[i].out.fd = r->trainers[i].err.fd = -1;
		r->trainers[i].out.log_fd = r->trainers[i].err.log_fd = -1;
		r->trainers[i].in_fd = -1;
	}

	if (r->o.netns) {
		r->net = calloc(1, sizeof(run_netns_t));
		if (!r->net ||
		    run_netns_create(r->net, r->o.nodes, r->o.rate, r->o.verbose) < 0) {
			fprintf(stderr, "sparsecomm-run: cannot build the emulated cluster.\n");
			run_print_fallback(&r->o, argc, argv);
			free(r->net);
			r->net = NULL;
			goto out_rmdir;
		}
		fprintf(
		    stderr,
		    "sparsecomm-run: %d nodes in namespaces %s..%s, %s, bridge %s, link %s\n",
		    r->o.nodes, r->net->ns[0], r->net->ns[r->o.nodes - 1], r->net->subnet,
		    r->net->bridge_addr, r->o.rate ? r->o.rate : "unshaped");
	}
	if (r->o.pin_nodes) {
		if (run_pin_plan(&r->pin, r->o.nodes) < 0)
			goto out_netns;
		fprintf(stderr, "sparsecomm-run: nodes pinned to CPUs %s (node 0 first)\n",
			r->pin.list);
	}
	if (r->remote && prepare_remote(r) < 0)
		goto out_netns;
	int port = r->o.port		 ? r->o.port
		   : r->net || r->remote ? DEFAULT_PORT_NETNS
					 : sc_port_pick();
	if (port <= 0) {
		fprintf(stderr, "sparsecomm-run: cannot find a free port on 127.0.0.1\n");
		goto out_netns;
	}
	coordinator_addr(r, port);

	for (int i = 0; i < r->o.nodes; i++)
		if (spawn_daemon(r, i) < 0)
			goto out_teardown;
	if (wait_ready(r) < 0)
		goto out_teardown;
	if (r->secret[0]) /* every daemon has read it */
		unlink(r->secret);
	if (r->o.verbose || r->o.hosts.n)
		fprintf(
		    stderr,
		    "sparsecomm-run: %d daemons ready; starting %d trainers on %d host(s)\n",
		    r->o.nodes, r->n_trainers, r->o.hosts.n ? r->o.hosts.n : 1);
	for (int node = 0; node < r->o.nodes; node++)
		for (int local = 0; local < r->o.per_node; local++)
			if (spawn_trainer(r, node, local) < 0) {
				js.code = 1;
				stop_trainers(r, &js, SIGTERM);
				goto out_job;
			}
out_job:
	run_job(r, &js);
	code = js.code;
	if (!code && r->signal_count)
		code = 128 + r->last_signal;
	if (js.timed_out)
		code = 124;
out_teardown:
	teardown(r, &js);
	if (!code && js.daemon_failed)
		code = 1;
out_netns:
	run_pin_free(&r->pin);
	if (r->net) {
		run_netns_destroy(r->net);
		free(r->net);
	}
out_rmdir:
	explicit_bzero(r->secret_hex, sizeof(r->secret_hex));
	nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return code;
}
