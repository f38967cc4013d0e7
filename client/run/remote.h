/*
 * remote.h: running a daemon or a trainer on another host through a remote-shell agent
 * (sparsecomm-run --rsh-agent CMD, ssh by default), and the tether that holds it there.
 *
 * The launcher runs `CMD HOST 'SHELL COMMAND'`: the agent's words split on blanks, the
 * host, then one argument that a POSIX shell on the host runs (ssh passes it to the
 * remote user's shell). That command changes to the launcher's working directory and
 * runs `sparsecomm-run --tether` (this program, at the same path on every host) with the
 * process to start.
 *
 * The tether starts the process in its own process group and watches its own standard
 * input, which is a pipe from the launcher through the agent's connection. When it closes
 * (the launcher stopped the process, ended, or died; the connection dropped) the tether
 * sends SIGTERM to the group (or the signal whose number was the last byte the launcher
 * wrote there: SIGINT passed on), SIGKILL after its grace period, and exits: no process
 * is left behind on the host. With --notify-fd N the process gets a pipe as fd N (the
 * daemon's --notify-fd) whose bytes the tether copies to its standard output, while the
 * process's own output goes to standard error: the launcher reads readiness from the
 * agent's stdout and the log from its stderr.
 */
#ifndef SC_RUN_REMOTE_H
#define SC_RUN_REMOTE_H

#include <stddef.h>

/* A NULL-terminated list of strings that grows. */
typedef struct run_argv {
	char **v;
	int n, cap;
} run_argv_t;

/* Appends a copy of s (printf format); exits on out of memory. */
void run_argv_add(run_argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends every word of a NULL-terminated list. */
void run_argv_add_all(run_argv_t *a, char *const *words);
void run_argv_free(run_argv_t *a);

/* CLOCK_MONOTONIC in milliseconds. */
long long run_mono_ms(void);
/* From a signal handler: writes sig to the self-pipe fd (errno kept; a full pipe already
 * holds a wake-up). */
void run_signal_to_pipe(int fd, int sig);

/* The words as one POSIX-shell command line, each quoted ('...'); malloc'd. */
char *run_shell_join(char *const *words);

/* The agent's command line that runs words on host under the tether: agent's words,
 * host, and the shell command (cd cwd, exec self --tether [--notify-fd N] [--secret-to
 * PATH] --grace G -- words...). notify_fd < 0, secret_to NULL: none. */
void run_remote_argv(run_argv_t *out, const char *agent, const char *host, const char *self,
		     const char *cwd, int notify_fd, const char *secret_to, double grace_s,
		     char *const *words);

/* The job secret as the launcher hands it to a tether (--secret-to): its 32 bytes in
 * hexadecimal and a newline, first on the tether's stdin, which then carries the stop
 * signal as before. */
#define RUN_SECRET_BYTES    32
#define RUN_SECRET_HEX_LINE (2 * RUN_SECRET_BYTES + 1)

/* sparsecomm-run --tether [--notify-fd N] [--secret-to PATH] [--grace SEC] -- CMD
 * [ARGS...]: argv after "--tether". With --secret-to, the job secret is read from stdin
 * (within 30 s) and written to PATH (mode 0600, in a directory of mode 0700 made for it)
 * before CMD starts, and removed when CMD has ended. Returns the process's exit status
 * (128 + signal when killed). */
int run_tether_main(int argc, char **argv);

#endif
