/*
 * remote.c: the agent's command line and the tether (see remote.h).
 */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "sparsecomm-run: out of memory\n");
		exit(1);
	}
	return p;
}

void run_argv_add(run_argv_t *a, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		fprintf(stderr, "sparsecomm-run: out of memory\n");
		exit(1);
	}
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 16;
		a->v = xrealloc(a->v, (size_t)a->cap * sizeof(char *));
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

void run_argv_add_all(run_argv_t *a, char *const *words)
{
	for (; words && *words; words++)
		run_argv_add(a, "%s", *words);
}

void run_argv_free(run_argv_t *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	*a = (run_argv_t){0};
}

char *run_shell_join(char *const *words)
{
	size_t len = 1;
	for (char *const *w = words; *w; w++)
		len += strlen(*w) * 4 + 3;
	char *out = xrealloc(NULL, len), *p = out;
	for (char *const *w = words; *w; w++) {
		if (w != words)
			*p++ = ' ';
		*p++ = '\'';
		for (const char *c = *w; *c; c++) {
			if (*c == '\'') { /* close, escaped quote, reopen */
				memcpy(p, "'\\''", 4);
				p += 4;
			} else {
				*p++ = *c;
			}
		}
		*p++ = '\'';
	}
	*p = 0;
	return out;
}

void run_remote_argv(run_argv_t *out, const char *agent, const char *host, const char *self,
		     const char *cwd, int notify_fd, const char *secret_to, double grace_s,
		     char *const *words)
{
	char *copy = xrealloc(NULL, strlen(agent) + 1), *save = NULL;
	strcpy(copy, agent);
	for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
		run_argv_add(out, "%s", w);
	free(copy);
	run_argv_add(out, "%s", host);

	run_argv_t tether = {0};
	run_argv_add(&tether, "%s", self);
	run_argv_add(&tether, "--tether");
	if (notify_fd >= 0) {
		run_argv_add(&tether, "--notify-fd");
		run_argv_add(&tether, "%d", notify_fd);
	}
	if (secret_to) {
		run_argv_add(&tether, "--secret-to");
		run_argv_add(&tether, "%s", secret_to);
	}
	run_argv_add(&tether, "--grace");
	run_argv_add(&tether, "%g", grace_s);
	run_argv_add(&tether, "--");
	run_argv_add_all(&tether, words);
	char *dir_words[] = {(char *)cwd, NULL};
	char *dir = run_shell_join(dir_words), *cmd = run_shell_join(tether.v);
	run_argv_add(out, "cd %s && exec %s", dir, cmd);
	free(dir);
	free(cmd);
	run_argv_free(&tether);
}

long long run_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void run_signal_to_pipe(int fd, int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	if (write(fd, &b, 1) < 0) {
		/* the pipe is full: a wake-up is already pending */
	}
	errno = saved;
}

/* ---- the tether ---------------------------------------------------------------------- */

static int tether_sig_pipe[2] = {-1, -1};

static void tether_on_signal(int sig)
{
	run_signal_to_pipe(tether_sig_pipe[1], sig);
}

static int tether_usage(const char *why)
{
	fprintf(stderr,
		"sparsecomm-run --tether: %s\nusage: sparsecomm-run --tether [--notify-fd N] "
		"[--grace SEC] -- CMD [ARGS...]\n",
		why);
	return 2;
}

static int hex_val(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The secret line from stdin (bounded in time and size) into path, mode 0600, in a
 * directory of mode 0700 made for it when missing; 0 or -1 (said why). */
static int tether_secret(const char *path)
{
	char line[RUN_SECRET_HEX_LINE];
	size_t got = 0;
	long long deadline = run_mono_ms() + 30000;
	while (got < sizeof(line)) {
		struct pollfd p = {.fd = 0, .events = POLLIN};
		long long left = deadline - run_mono_ms();
		if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
			fprintf(stderr,
				"sparsecomm-run --tether: no job secret on stdin in 30 s\n");
			return -1;
		}
		ssize_t m = read(0, line + got, sizeof(line) - got);
		if (m <= 0) {
			fprintf(stderr, "sparsecomm-run --tether: stdin closed before the job "
					"secret\n");
			return -1;
		}
		got += (size_t)m;
	}
	unsigned char key[RUN_SECRET_BYTES];
	int bad = line[sizeof(line) - 1] != '\n';
	for (int k = 0; k < RUN_SECRET_BYTES && !bad; k++) {
		int hi = hex_val(line[2 * k]), lo = hex_val(line[2 * k + 1]);
		bad = hi < 0 || lo < 0;
		key[k] = (unsigned char)(hi << 4 | (lo & 15));
	}
	explicit_bzero(line, sizeof(line));
	if (bad) {
		fprintf(stderr, "sparsecomm-run --tether: malformed job secret on stdin\n");
		return -1;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			fprintf(stderr, "sparsecomm-run --tether: cannot create %s: %s\n", dir,
				strerror(errno));
			return -1;
		}
		/* one that was there already must be this user's own, private directory (in a
		 * shared /tmp another user could have made it to swap the secret) */
		struct stat st;
		if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
		    (st.st_mode & 077)) {
			fprintf(
			    stderr,
			    "sparsecomm-run --tether: %s is not a private directory of this "
			    "user (mode 0700): the job secret is not written there\n",
			    dir);
			return -1;
		}
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	ssize_t w = fd >= 0 ? write(fd, key, sizeof(key)) : -1;
	int err = errno;
	explicit_bzero(key, sizeof(key));
	if (fd >= 0)
		close(fd);
	if (w != (ssize_t)sizeof(key)) {
		fprintf(stderr, "sparsecomm-run --tether: cannot write the job secret %s: %s\n",
			path, w < 0 ? strerror(err) : "short write");
		if (fd >= 0)
			unlink(path);
		return -1;
	}
	return 0;
}

int run_tether_main(int argc, char **argv)
{
	const char *secret_to = NULL;
	int notify_fd = -1, i;
	double grace_s = 5;
	for (i = 0; i < argc && strcmp(argv[i], "--"); i++) {
		char *end;
		if (!strcmp(argv[i], "--notify-fd") && i + 1 < argc) {
			long v = strtol(argv[++i], &end, 10);
			if (*end || v < 3 || v > 255)
				return tether_usage(
				    "--notify-fd needs a descriptor from 3 to 255");
			notify_fd = (int)v;
		} else if (!strcmp(argv[i], "--secret-to") && i + 1 < argc) {
			secret_to = argv[++i];
		} else if (!strcmp(argv[i], "--grace") && i + 1 < argc) {
			grace_s = strtod(argv[++i], &end);
			if (*end || !(grace_s >= 0) || grace_s > 3600)
				return tether_usage("--grace needs 0 to 3600 seconds");
		} else {
			return tether_usage("unknown option");
		}
	}
	if (i + 1 >= argc)
		return tether_usage("no command after '--'");
	char **cmd = argv + i + 1;
	int secret_gone = 0;
	if (secret_to && tether_secret(secret_to) < 0)
		return 1;

	struct sigaction sa = {.sa_handler = tether_on_signal};
	int notify[2] = {-1, -1};
	if (pipe2(tether_sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0 ||
	    (notify_fd >= 0 && pipe2(notify, O_CLOEXEC) < 0)) {
		fprintf(stderr, "sparsecomm-run --tether: pipe: %s\n", strerror(errno));
		return 1;
	}
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	pid_t self = getpid(), pid = fork();
	if (pid < 0) {
		fprintf(stderr, "sparsecomm-run --tether: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		sigset_t none;
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0) {
			dup2(devnull, 0);
			close(devnull);
		}
		if (notify_fd >= 0) {
			dup2(2, 1); /* stdout carries the notifications alone */
			dup2(notify[1], notify_fd);
		}
		execvp(cmd[0], cmd);
		fprintf(stderr, "sparsecomm-run --tether: cannot run %s: %s\n", cmd[0],
			strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	if (notify_fd >= 0)
		close(notify[1]);

	int status = 0;
	long long kill_at = 0;
	int in_open = 1, stop_sig = SIGTERM;
	for (;;) {
		siginfo_t info = {0};
		if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    info.si_pid == pid)
			break; /* exited, not reaped yet: its group id is still ours */
		struct pollfd pfd[3];
		int n = 0;
		pfd[n++] = (struct pollfd){.fd = tether_sig_pipe[0], .events = POLLIN};
		if (in_open)
			pfd[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
		if (notify[0] >= 0)
			pfd[n++] = (struct pollfd){.fd = notify[0], .events = POLLIN};
		long long wait_ms = 1000;
		if (kill_at) {
			wait_ms = kill_at - run_mono_ms();
			if (wait_ms <= 0) {
				kill(-pid, SIGKILL);
				kill_at = 0;
				wait_ms = 1000;
			}
		}
		if (poll(pfd, (nfds_t)n, (int)wait_ms) <= 0)
			continue;
		bool stop = false;
		for (int k = 0; k < n; k++) {
			if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char buf[4096];
			ssize_t m = read(pfd[k].fd, buf, sizeof(buf));
			if (pfd[k].fd == tether_sig_pipe[0]) {
				for (ssize_t j = 0; j < m; j++)
					stop |= buf[j] != SIGCHLD;
			} else if (pfd[k].fd == 0) {
				if (m == 0 || (m < 0 && errno != EINTR && errno != EAGAIN)) {
					in_open = 0; /* the launcher or its connection went */
					stop = true;
				}
				for (ssize_t j = 0; j < m; j++) { /* the signal to stop with */
					if (buf[j] > 0 && buf[j] < NSIG && buf[j] != SIGKILL)
						stop_sig = buf[j];
				}
			} else if (m > 0) {
				/* the daemon is ready: it has read the secret, which goes */
				if (secret_to && !secret_gone)
					secret_gone = unlink(secret_to) == 0 || errno == ENOENT;
				if (write(1, buf, (size_t)m) < 0) {
					/* the launcher stopped listening: it closes stdin next
					 */
				}
			} else if (m == 0 || errno != EINTR) {
				close(notify[0]);
				notify[0] = -1;
			}
		}
		if (stop && !kill_at) {
			kill(-pid, stop_sig);
			kill_at = run_mono_ms() + (long long)(grace_s * 1000);
		}
	}
	kill(-pid, SIGKILL); /* whatever the process left in its group */
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (secret_to) {
		if (!secret_gone)
			unlink(secret_to);
		char dir[4096];
		snprintf(dir, sizeof(dir), "%s", secret_to);
		char *slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = 0;
			rmdir(dir); /* when nothing else is left in it */
		}
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
