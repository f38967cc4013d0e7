/*
 * netns.h: the emulated cluster of sparsecomm-run --netns. One network namespace per node,
 * joined by a bridge in the root namespace through a veth pair each, both ends of every
 * veth shaped by a token bucket, so that a single machine behaves like a network-bound
 * cluster. Everything is created and removed by name with fork/exec of ip(8) and tc(8).
 */
#ifndef SC_RUN_NETNS_H
#define SC_RUN_NETNS_H

#include <stdbool.h>

#define RUN_NETNS_MAX_NODES 253
#define RUN_IFNAME_BYTES    16

typedef struct run_netns {
	int nodes;
	char ns[RUN_NETNS_MAX_NODES][RUN_IFNAME_BYTES];	  /* sc<pid>n<i> */
	char veth[RUN_NETNS_MAX_NODES][RUN_IFNAME_BYTES]; /* root end, sc<pid>v<i> */
	char addr[RUN_NETNS_MAX_NODES][RUN_IFNAME_BYTES]; /* 10.x.y.<i+1> */
	char bridge[RUN_IFNAME_BYTES];			  /* sc<pid>br */
	char bridge_addr[RUN_IFNAME_BYTES];		  /* 10.x.y.254 */
	char subnet[24];				  /* 10.x.y.0/24 */
	char rate[32];					  /* as given, "" for no shaping */
	bool ns_made[RUN_NETNS_MAX_NODES], veth_made[RUN_NETNS_MAX_NODES], bridge_made;
} run_netns_t;

/* Parses a tc rate ("1gbit", "500mbit", "100mbps", "1e9bit") into bits per second. */
int run_netns_parse_rate(const char *rate, double *bits_per_s_p);

/*
 * Creates the cluster: nodes namespaces, bridge, veths, addresses, and the tbf qdiscs when
 * rate is not NULL. On failure prints the failing command and its output, removes what was
 * created, and returns -1.
 */
int run_netns_create(run_netns_t *net, int nodes, const char *rate, bool verbose);

/* Removes everything run_netns_create made, by name; safe to call more than once. */
void run_netns_destroy(run_netns_t *net);

/*
 * Removes namespaces (sc<pid>n<i>) and links (sc<pid>br, sc<pid>v<i>) left by launchers
 * that no longer run (killed with SIGKILL, say). Returns how many objects it removed.
 */
int run_netns_cleanup_stale(bool verbose);

/*
 * Runs argv (argv[0] found on PATH or in /usr/sbin, /sbin) with stdin from /dev/null,
 * waits at most timeout_ms, and returns 0 when it exited 0. Otherwise prints the command
 * line and what it wrote to stderr, unless quiet, and returns -1.
 */
int run_cmd(char *const argv[], int timeout_ms, bool quiet);

/* execvp() that also looks in /usr/sbin and /sbin (root's tools when PATH lacks them). */
void run_execvp_sbin(const char *file, char *const argv[]);

#endif
