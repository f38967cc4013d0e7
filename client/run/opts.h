/*
 * opts.h: sparsecomm-run's command line (opts.c): what the job is to be (nodes, trainers,
 * network, timeouts, the daemon's arguments, the command), parsed and checked before
 * anything starts.
 */
#ifndef SC_RUN_OPTS_H
#define SC_RUN_OPTS_H

#include <stdbool.h>

#include "hosts.h"

#define MAX_TRAINERS 4096
/* trainers one node serves at most: the daemon's local_size (SCD_MAX_LOCAL) */
#define MAX_PER_NODE 64

typedef struct opts {
	int nodes, per_node;
	bool netns, keep_going, verbose, insecure, nccl_hostid, pin_nodes;
	const char *secret_file; /* --secret-file, or NULL: a fresh one */
	const char *rate;
	double timeout_s, grace_s, ready_timeout_s, kill_grace_s;
	const char *daemon_path, *log_dir;
	int port;
	char **daemon_args;
	int n_daemon_args;
	char **cmd;
	run_hosts_t hosts; /* -H, --hostfile; n == 0: every node on this machine */
	const char *rsh_agent;
} opts_t;
/* Prints "sparsecomm-run: " and the message, points at --help, and exits 2. */
void run_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* v as seconds (a decimal number, at least 0), or the usage error naming opt. */
double run_parse_seconds(const char *opt, const char *v);
/* v as an integer in [lo, hi], or the usage error naming opt. */
int run_parse_int(const char *opt, const char *v, int lo, int hi);
/* The command line into o (--help prints the usage and exits 0; an error exits 2). */
void run_parse_args(int argc, char **argv, opts_t *o);
/* Prints the same command line without --netns and --rate: the loopback fallback. */
void run_print_fallback(const opts_t *o, int argc, char **argv);

#endif
