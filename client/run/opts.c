/*
 * opts.c: sparsecomm-run's command line (opts.h): the usage text, the parse, and the checks
 * of what the options ask for together.
 */
#include "opts.h"

#include "hvdflags.h"
#include "netns.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void run_die_usage(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "sparsecomm-run: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(sparsecomm-run --help for usage)\n");
	exit(2);
}

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecomm-run -n N [OPTIONS] [--] CMD [ARGS...]\n"
	    "       sparsecomm-run -H HOST:SLOTS,... | --hostfile FILE [OPTIONS] [--] CMD "
	    "[ARGS...]\n"
	    "\n"
	    "Starts N sparsecommd daemons (nodes) on this machine, waits until they are "
	    "ready,\n"
	    "runs CMD once per trainer (N x M processes) with SPARSECOMM_SOCKET, _RANK, "
	    "_SIZE,\n"
	    "_LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK, _NODE_COUNT set (and horovodrun's\n"
	    "HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE,\n"
	    "_HOSTNAME), prefixes each output line with \"[rank] \", and stops everything\n"
	    "when the trainers have ended.\n"
	    "\n"
	    "options:\n"
	    "  -n, --nodes N          number of nodes (daemons), required without -H\n"
	    "  --per-node M           trainers per node (default 1, at most 64)\n"
	    "  -np, --num-proc P      P trainers in all, as horovodrun's: alone, one node\n"
	    "                         of P (horovodrun's localhost:P: local ranks 0 to\n"
	    "                         P-1); P / M nodes with --per-node M, P / N per node\n"
	    "                         with -n N, or the first hosts' slots with -H\n"
	    "  -H, --hosts LIST       one node per host, HOST:SLOTS trainers each (SLOTS\n"
	    "                         the same on every host), e.g. -H a:4,b:4\n"
	    "  --hostfile FILE        the hosts, one a line: 'HOST slots=N', 'HOST:N' or\n"
	    "                         'HOST'; '#' starts a comment\n"
	    "  --rsh-agent CMD        how to run a command on a host that is not this\n"
	    "                         machine: CMD HOST 'SHELL COMMAND' (default ssh);\n"
	    "                         sparsecomm-run and sparsecommd must be at the same\n"
	    "                         paths there\n"
	    "  --netns                run each node in its own network namespace, joined by a\n"
	    "                         bridge (root only); exports SPARSECOMM_NETNS,\n"
	    "                         SPARSECOMM_NETNS_ADDRS, SPARSECOMM_BRIDGE_ADDR,\n"
	    "                         SPARSECOMM_NETNS_SUBNET, SPARSECOMM_NETNS_RATE;\n"
	    "                         every node's processes get NCCL_HOSTID (a host of\n"
	    "                         its own to NCCL) and NCCL_SOCKET_IFNAME=\"=eth0\"\n"
	    "  --nccl-hostid          give every node's daemon and trainers a host of their\n"
	    "                         own to NCCL (NCCL_HOSTID; NCCL_SOCKET_IFNAME=lo unless\n"
	    "                         set), so that several nodes on one GPU form NCCL\n"
	    "                         communicators without --netns\n"
	    "  --rate RATE            with --netns: shape every node's link to RATE with tbf\n"
	    "                         (tc syntax: 1gbit, 500mbit, 100mbps)\n"
	    "  --pin-nodes            hold each node's daemon and trainers to a share of\n"
	    "                         this machine's CPUs, as separate hosts: N nodes over C\n"
	    "                         CPUs get C/N each, or CPU i mod C when N > C; exports\n"
	    "                         SPARSECOMM_NODE_CPUS (each node's, in node order)\n"
	    "  --cleanup              remove the namespaces, bridge and veths that a killed\n"
	    "                         --netns launcher left behind, then exit (root only)\n"
	    "  --timeout SEC          bound the whole job; on expiry stop it and exit 124\n"
	    "  --keep-going           when a trainer fails, let the others finish\n"
	    "  --grace SEC            after a trainer failed, stop the others after SEC\n"
	    "                         (default 10)\n"
	    "  --kill-grace SEC       on stop, SIGKILL a trainer or daemon SEC after its\n"
	    "                         SIGTERM (default 5)\n"
	    "  --ready-timeout SEC    wait at most SEC for the daemons to be ready (default "
	    "60)\n"
	    "  --daemon-arg ARG       pass ARG to every daemon (repeatable), e.g.\n"
	    "                         --daemon-arg --log-level --daemon-arg debug\n"
	    "  --daemon PATH          the sparsecommd to run (default: next to "
	    "sparsecomm-run,\n"
	    "                         else $SPARSECOMM_DAEMON, else found on PATH)\n"
	    "  --port PORT            coordinator port (default: a free one; 29500 with "
	    "--netns\n"
	    "                         or remote hosts)\n"
	    "  --log-dir DIR          keep the daemons' logs as DIR/daemon<i>.log\n"
	    "  --insecure             no job secret: the daemons run with insecure = true and\n"
	    "                         authenticate nothing (by default a fresh secret is\n"
	    "                         written to the run's private directory for them)\n"
	    "  --secret-file FILE     the job secret the daemons read instead (mode 0600; at\n"
	    "                         the same path on every host of a job on several hosts)\n"
	    "  -v, --verbose          show the daemons' output as \"[d<i>] \" lines and the\n"
	    "                         commands that build the namespaces\n"
	    "  -h, --help             this text\n"
	    "\n"
	    "horovodrun's --start-timeout, --fusion-threshold-mb, --cycle-time-ms,\n"
	    "--timeline-filename, --log-level, --stall-check-shutdown-time-seconds,\n"
	    "--cache-capacity and --disable-cache are accepted and set the daemons' settings "
	    "of the same meaning;\n"
	    "its other flags are refused with what to use instead (README.md, Coming from\n"
	    "Horovod).\n"
	    "\n"
	    "sparsecomm-run --node-daemon is how a trainer started by mpirun, srun or "
	    "torchrun\n"
	    "starts its node's daemon for the job (docs/deployment.md, Under a scheduler).\n"
	    "\n"
	    "Exit status: the first non-zero trainer status (killed by a signal: 128 + "
	    "signal),\n"
	    "124 on --timeout, 1 when a daemon failed or could not start, 2 on a usage error.\n"
	    "\n"
	    "example:\n"
	    "  sparsecomm-run -n 4 --netns --rate 1gbit -- build/bin/sparsecomm-bench "
	    "allreduce\n");
}

double run_parse_seconds(const char *opt, const char *v)
{
	char *end;
	errno = 0;
	double s = strtod(v, &end);
	if (errno || end == v || *end || !(s > 0) || s > 1e7)
		run_die_usage("%s needs a positive number of seconds, not '%s'", opt, v);
	return s;
}

int run_parse_int(const char *opt, const char *v, int lo, int hi)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi)
		run_die_usage("%s needs an integer from %d to %d, not '%s'", opt, lo, hi, v);
	return (int)n;
}

/* -np P without -H: P trainers in all; alone, one node of P (horovodrun's -np P is
 * localhost:P, one host of P slots), or --per-node M each, or -n N nodes. */
static void np_to_nodes(opts_t *o, bool per_node_given, int np)
{
	if (o->nodes && !per_node_given) {
		if (np % o->nodes)
			run_die_usage("-np %d trainers do not divide among -n %d nodes", np,
				      o->nodes);
		o->per_node = np / o->nodes;
	} else if (o->nodes) {
		if (o->nodes * o->per_node != np)
			run_die_usage("-np %d but -n %d x --per-node %d is %d trainers", np,
				      o->nodes, o->per_node, o->nodes * o->per_node);
	} else if (!per_node_given) {
		if (o->netns)
			run_die_usage(
			    "-np %d alone is one node of %d trainers (horovodrun's "
			    "localhost:%d), and --netns emulates a node per namespace: "
			    "give -n N too (-n %d -np %d: %d nodes of one)",
			    np, np, np, np, np, np);
		if (np > MAX_PER_NODE)
			run_die_usage("-np %d alone is one node of %d trainers (horovodrun's "
				      "localhost:%d), and a node serves at most %d: give -n N "
				      "too, to spread them over N nodes",
				      np, np, np, MAX_PER_NODE);
		o->nodes = 1;
		o->per_node = np;
	} else {
		if (np % o->per_node)
			run_die_usage("-np %d trainers do not fill nodes of --per-node %d", np,
				      o->per_node);
		o->nodes = np / o->per_node;
	}
}

/* -np P with -H / --hostfile: as horovodrun, the first hosts' slots in order; here every
 * node runs the same number of trainers, so P is at most one host's slots (that host,
 * P trainers) or whole hosts. */
static void np_of_hosts(run_hosts_t *hs, int np)
{
	int slots = hs->h[0].slots;
	if (np <= slots) {
		hs->n = 1;
		hs->h[0].slots = np;
	} else if (np % slots == 0 && np / slots <= hs->n) {
		hs->n = np / slots;
	} else {
		run_die_usage("-np %d with %d host(s) of %d slot(s): give at most one host's "
			      "slots or whole hosts (every node runs the same number of "
			      "trainers)",
			      np, hs->n, slots);
	}
}

/* -H / --hostfile: one node per host, the hosts' slots trainers each. */
static void hosts_to_nodes(opts_t *o, bool per_node_given, int np)
{
	run_hosts_t *hs = &o->hosts;
	if (o->netns)
		run_die_usage(
		    "--netns makes its own nodes on this machine; it does not go with "
		    "-H or --hostfile");
	if (o->nodes && o->nodes != hs->n)
		run_die_usage("-n %d but %d host(s) given: one node runs per host", o->nodes,
			      hs->n);
	if (np)
		np_of_hosts(hs, np);
	for (int h = 1; h < hs->n; h++)
		if (hs->h[h].slots != hs->h[0].slots)
			run_die_usage(
			    "host %s has %d slot(s) but %s has %d: every node runs the "
			    "same number of trainers",
			    hs->h[h].name, hs->h[h].slots, hs->h[0].name, hs->h[0].slots);
	if (per_node_given && o->per_node != hs->h[0].slots)
		run_die_usage("--per-node %d but the hosts have %d slot(s) each", o->per_node,
			      hs->h[0].slots);
	o->nodes = hs->n;
	o->per_node = hs->h[0].slots;
	run_hosts_classify(&o->hosts);
}

void run_parse_args(int argc, char **argv, opts_t *o)
{
	*o = (opts_t){.per_node = 1,
		      .grace_s = 10,
		      .ready_timeout_s = 60,
		      .kill_grace_s = 5,
		      .rsh_agent = "ssh"};
	bool per_node_given = false;
	run_hvd_env(o);
	/* four daemon arguments per word at most: one word of horovodrun's
	 * (--fusion-threshold-mb=N) sets two settings, each "--KEY VALUE" (hvdflags.c) */
	o->daemon_args = calloc(4 * (size_t)argc + 1, sizeof(char *));
	if (!o->daemon_args)
		run_die_usage("out of memory");
	int i, np = 0;
	bool dashdash = false;
	for (i = 1; i < argc; i++) {
		char *a = argv[i], *val = NULL, name[64];
		if (!strcmp(a, "--")) {
			dashdash = true;
			break;
		}
		if (a[0] != '-' || !a[1])
			break; /* the command, as horovodrun's, without '--' */
		/* --opt=value */
		char *eq = strchr(a, '=');
		if (!strncmp(a, "--", 2) && eq && eq - a < (long)sizeof(name)) {
			memcpy(name, a, (size_t)(eq - a));
			name[eq - a] = 0;
			val = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", a);
		}
#define NEED_VAL()                                                                             \
	do {                                                                                   \
		if (!val) {                                                                    \
			if (i + 1 >= argc)                                                     \
				run_die_usage("%s needs a value", name);                       \
			val = argv[++i];                                                       \
		}                                                                              \
	} while (0)
		if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(name, "-n") || !strcmp(name, "--nodes")) {
			NEED_VAL();
			o->nodes = run_parse_int(name, val, 1, MAX_TRAINERS);
		} else if (!strcmp(name, "-np") || !strcmp(name, "--num-proc")) {
			NEED_VAL();
			np = run_parse_int(name, val, 1, MAX_TRAINERS);
		} else if (!strcmp(name, "--per-node")) {
			NEED_VAL();
			o->per_node = run_parse_int(name, val, 1, MAX_TRAINERS);
			per_node_given = true;
		} else if (!strcmp(name, "-H") || !strcmp(name, "--hosts") ||
			   !strcmp(name, "--hostfile")) {
			char err[512];
			NEED_VAL();
			if ((!strcmp(name, "--hostfile")
				 ? run_hosts_parse_file(&o->hosts, val, err, sizeof(err))
				 : run_hosts_parse_list(&o->hosts, val, err, sizeof(err))) < 0)
				run_die_usage("%s", err);
		} else if (!strcmp(name, "--rsh-agent")) {
			NEED_VAL();
			if (!val[strspn(val, " \t")])
				run_die_usage("--rsh-agent needs a command, e.g. ssh");
			o->rsh_agent = val;
		} else if (!strcmp(name, "--netns")) {
			o->netns = true;
		} else if (!strcmp(name, "--pin-nodes")) {
			o->pin_nodes = true;
		} else if (!strcmp(name, "--nccl-hostid")) {
			o->nccl_hostid = true;
		} else if (!strcmp(name, "--rate")) {
			NEED_VAL();
			o->rate = val;
		} else if (!strcmp(name, "--timeout")) {
			NEED_VAL();
			o->timeout_s = run_parse_seconds(name, val);
		} else if (!strcmp(name, "--grace")) {
			NEED_VAL();
			o->grace_s = run_parse_seconds(name, val);
		} else if (!strcmp(name, "--kill-grace")) {
			NEED_VAL();
			o->kill_grace_s = run_parse_seconds(name, val);
		} else if (!strcmp(name, "--ready-timeout")) {
			NEED_VAL();
			o->ready_timeout_s = run_parse_seconds(name, val);
		} else if (!strcmp(name, "--cleanup")) {
			if (geteuid() != 0) {
				fprintf(stderr, "sparsecomm-run: --cleanup needs root\n");
				exit(1);
			}
			int n = run_netns_cleanup_stale(true);
			fprintf(stderr, "sparsecomm-run: removed %d stale object(s)\n", n);
			exit(0);
		} else if (!strcmp(name, "--keep-going")) {
			o->keep_going = true;
		} else if (!strcmp(name, "--insecure")) {
			o->insecure = true;
		} else if (!strcmp(name, "--secret-file")) {
			NEED_VAL();
			o->secret_file = val;
		} else if (!strcmp(name, "--daemon-arg")) {
			NEED_VAL();
			o->daemon_args[o->n_daemon_args++] = val;
		} else if (!strcmp(name, "--daemon")) {
			NEED_VAL();
			o->daemon_path = val;
		} else if (!strcmp(name, "--port")) {
			NEED_VAL();
			o->port = run_parse_int(name, val, 1, 65535);
		} else if (!strcmp(name, "--log-dir")) {
			NEED_VAL();
			o->log_dir = val;
		} else if (!strcmp(name, "-v") || !strcmp(name, "--verbose")) {
			o->verbose = true;
		} else if (!run_hvd_flag(o, name, (const char **)&val, argc, argv, &i)) {
			run_die_usage("unknown option '%s'", a);
		}
#undef NEED_VAL
	}
	if (i + dashdash >= argc)
		run_die_usage("no command: give it after the options, e.g. sparsecomm-run -n 2 "
			      "-- ./train");
	o->cmd = argv + i + dashdash;
	if (o->hosts.n)
		hosts_to_nodes(o, per_node_given, np);
	else if (np)
		np_to_nodes(o, per_node_given, np);
	if (!o->nodes)
		run_die_usage("-n N (the number of nodes) or -H HOST:SLOTS,... is required");
	if ((long)o->nodes * o->per_node > MAX_TRAINERS)
		run_die_usage("%d nodes x %d per node is more than %d trainers", o->nodes,
			      o->per_node, MAX_TRAINERS);
	if (o->per_node > MAX_PER_NODE)
		run_die_usage("%d trainers per node: a node serves at most %d", o->per_node,
			      MAX_PER_NODE);
	if (o->pin_nodes && o->hosts.n)
		run_die_usage("--pin-nodes shares this machine's CPUs among nodes it runs; -H "
			      "runs one node per host");
	if (o->rate && !o->netns)
		run_die_usage("--rate shapes the links of --netns; add --netns (root only)");
	if (o->nccl_hostid && (o->netns || o->hosts.n))
		run_die_usage(
		    "--nccl-hostid makes the nodes of this machine hosts of their own to "
		    "NCCL; %s",
		    o->netns ? "--netns does that already" : "-H runs one node per host");
	if (o->netns) {
		double bps;
		if (o->rate && run_netns_parse_rate(o->rate, &bps) < 0)
			run_die_usage(
			    "cannot parse --rate '%s' (examples: 1gbit, 500mbit, 100mbps)",
			    o->rate);
		if (o->nodes > RUN_NETNS_MAX_NODES)
			run_die_usage("--netns supports at most %d nodes", RUN_NETNS_MAX_NODES);
	}
}

/* Prints the same command line without --netns and --rate: the loopback fallback. */
void run_print_fallback(const opts_t *o, int argc, char **argv)
{
	fprintf(stderr, "  Without root, run the same job on loopback (no shaping):\n   ");
	for (int i = 0; i < argc; i++) {
		bool cmd = argv + i >= o->cmd; /* the command's own words stay */
		if (!cmd && (!strcmp(argv[i], "--netns") || !strncmp(argv[i], "--rate=", 7)))
			continue;
		if (!cmd && !strcmp(argv[i], "--rate")) {
			i++;
			continue;
		}
		fprintf(stderr, " %s", argv[i]);
	}
	fputc('\n', stderr);
}
