/*
 * netns.c: builds and removes the emulated cluster of sparsecomm-run --netns.
 *
 * Layout, for launcher pid P and N nodes:
 *   root namespace: bridge scPbr with 10.x.y.254/24, veth root ends scPv<i> enslaved to it;
 *   namespace scPn<i>: the other veth end, named eth0, 10.x.y.<i+1>/24, and lo up.
 * Both veth ends carry `tbf rate RATE burst max(128kb, RATE x 1 ms) latency 50ms`: the
 * burst must hold one 64 KB segment and about a millisecond of traffic, or tbf delivers
 * well under the rate. The /24 is derived from the pid and moved on while it overlaps a
 * route of the root namespace. Every object is created by name and removed by name, so a
 * failure half-way removes exactly what exists. Commands are run by fork/exec of ip(8)
 * and tc(8) with argument vectors, never through a shell.
 */
#include "netns.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD_TIMEOUT_MS 15000

void run_execvp_sbin(const char *file, char *const argv[])
{
	static const char *const dirs[] = {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"};
	char path[512];

	execvp(file, argv);
	if (strchr(file, '/'))
		return;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", dirs[i], file);
		execv(path, argv);
	}
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_argv(FILE *out, char *const argv[])
{
	for (int i = 0; argv[i]; i++)
		fprintf(out, "%s%s", i ? " " : "", argv[i]);
}

int run_cmd(char *const argv[], int timeout_ms, bool quiet)
{
	int errp[2], status = 0;
	char err[2048];
	size_t err_len = 0;
	pid_t pid;

	if (pipe2(errp, O_CLOEXEC) < 0) {
		fprintf(stderr, "sparsecomm-run: pipe: %s\n", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "sparsecomm-run: fork: %s\n", strerror(errno));
		close(errp[0]);
		close(errp[1]);
		return -1;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(errp[1], 2);
		run_execvp_sbin(argv[0], argv);
		dprintf(2, "cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	close(errp[1]);
	/* Collect stderr until EOF or the deadline, then reap. */
	long long deadline = now_ms() + timeout_ms;
	for (;;) {
		struct pollfd pfd = {.fd = errp[0], .events = POLLIN};
		long long left = deadline - now_ms();
		if (left <= 0) {
			kill(pid, SIGKILL);
			snprintf(err, sizeof(err), "timed out after %d ms", timeout_ms);
			err_len = strlen(err);
			break;
		}
		int n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			continue;
		char buf[512];
		ssize_t got = read(errp[0], buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		size_t take = (size_t)got;
		if (take > sizeof(err) - 1 - err_len)
			take = sizeof(err) - 1 - err_len;
		memcpy(err + err_len, buf, take);
		err_len += take;
	}
	close(errp[0]);
	err[err_len] = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (!quiet) {
		while (err_len && isspace((unsigned char)err[err_len - 1]))
			err[--err_len] = 0;
		fprintf(stderr, "sparsecomm-run: command failed: ");
		print_argv(stderr, argv);
		fprintf(stderr, "%s%s\n", err_len ? ": " : "", err);
	}
	return -1;
}

int run_netns_parse_rate(const char *rate, double *bits_per_s_p)
{
	static const struct {
		const char *unit;
		double mult;
	} units[] = {
	    {"", 1},
	    {"bit", 1},
	    {"kbit", 1e3},
	    {"mbit", 1e6},
	    {"gbit", 1e9},
	    {"tbit", 1e12},
	    {"kibit", 1024.0},
	    {"mibit", 1048576.0},
	    {"gibit", 1073741824.0},
	    {"bps", 8},
	    {"kbps", 8e3},
	    {"mbps", 8e6},
	    {"gbps", 8e9},
	    {"tbps", 8e12},
	    {"kibps", 8192.0},
	    {"mibps", 8388608.0},
	    {"gibps", 8589934592.0},
	};
	char *end;
	char unit[16];
	double v;

	if (!rate || !*rate)
		return -1;
	errno = 0;
	v = strtod(rate, &end);
	if (errno || end == rate || !(v > 0) || !isfinite(v) || strlen(end) >= sizeof(unit))
		return -1;
	for (size_t i = 0; end[i]; i++)
		unit[i] = (char)tolower((unsigned char)end[i]);
	unit[strlen(end)] = 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(unit, units[i].unit)) {
			*bits_per_s_p = v * units[i].mult;
			return 0;
		}
	}
	return -1;
}

/* True when 10.x.y.0/24 overlaps a route of the root namespace (/proc/net/route). */
static bool subnet_in_use(unsigned x, unsigned y)
{
	FILE *f = fopen("/proc/net/route", "r");
	char line[256];
	bool used = false;
	uint32_t net = htonl(10u << 24 | x << 16 | y << 8), mask24 = htonl(0xffffff00u);

	if (!f)
		return false;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return false;
	}
	while (!used && fgets(line, sizeof(line), f)) {
		char ifname[64];
		unsigned dest, gw, flags, refcnt, use, metric, mask;
		if (sscanf(line, "%63s %x %x %x %u %u %u %x", ifname, &dest, &gw, &flags,
			   &refcnt, &use, &metric, &mask) != 8)
			continue;
		if (mask == 0)
			continue;	    /* the default route overlaps everything */
		uint32_t m = mask & mask24; /* the shorter of the two prefixes */
		used = (dest & m) == (net & m);
	}
	fclose(f);
	return used;
}

#define CMD(...)                                                                               \
	do {                                                                                   \
		char *argv_[] = {__VA_ARGS__, NULL};                                           \
		if (verbose) {                                                                 \
			fprintf(stderr, "sparsecomm-run: + ");                                 \
			print_argv(stderr, argv_);                                             \
			fputc('\n', stderr);                                                   \
		}                                                                              \
		if (run_cmd(argv_, CMD_TIMEOUT_MS, false) < 0)                                 \
			goto err_destroy;                                                      \
	} while (0)

int run_netns_create(run_netns_t *net, int nodes, const char *rate, bool verbose)
{
	unsigned pid = (unsigned)getpid(), x = 100 + (pid >> 8) % 128, y = pid & 0xff;
	char burst[32] = "", cidr[32];
	double bits_per_s = 0;

	memset(net, 0, sizeof(*net));
	if (nodes < 1 || nodes > RUN_NETNS_MAX_NODES) {
		fprintf(stderr, "sparsecomm-run: --netns supports 1 to %d nodes, not %d\n",
			RUN_NETNS_MAX_NODES, nodes);
		return -1;
	}
	if (rate) {
		if (run_netns_parse_rate(rate, &bits_per_s) < 0) {
			fprintf(stderr,
				"sparsecomm-run: cannot parse --rate '%s' (examples: 1gbit, "
				"500mbit, 100mbps)\n",
				rate);
			return -1;
		}
		double burst_bytes = fmax(128.0 * 1024, bits_per_s / 8 / 1000);
		snprintf(burst, sizeof(burst), "%.0f", ceil(burst_bytes));
		snprintf(net->rate, sizeof(net->rate), "%s", rate);
	}
	for (int tries = 0; tries < 256 && subnet_in_use(x, y); tries++)
		y = (y + 1) & 0xff;
	net->nodes = nodes;
	snprintf(net->bridge, sizeof(net->bridge), "sc%ubr", pid);
	snprintf(net->bridge_addr, sizeof(net->bridge_addr), "10.%u.%u.254", x, y);
	snprintf(net->subnet, sizeof(net->subnet), "10.%u.%u.0/24", x, y);
	for (int i = 0; i < nodes; i++) {
		snprintf(net->ns[i], RUN_IFNAME_BYTES, "sc%un%d", pid, i);
		snprintf(net->veth[i], RUN_IFNAME_BYTES, "sc%uv%d", pid, i);
		snprintf(net->addr[i], RUN_IFNAME_BYTES, "10.%u.%u.%d", x, y, i + 1);
	}

	net->bridge_made = true;
	CMD("ip", "link", "add", "name", net->bridge, "type", "bridge");
	snprintf(cidr, sizeof(cidr), "%s/24", net->bridge_addr);
	CMD("ip", "addr", "add", cidr, "dev", net->bridge);
	CMD("ip", "link", "set", net->bridge, "up");
	for (int i = 0; i < nodes; i++) {
		net->ns_made[i] = true;
		CMD("ip", "netns", "add", net->ns[i]);
		net->veth_made[i] = true;
		CMD("ip", "link", "add", net->veth[i], "type", "veth", "peer", "name", "eth0",
		    "netns", net->ns[i]);
		CMD("ip", "link", "set", net->veth[i], "master", net->bridge);
		CMD("ip", "link", "set", net->veth[i], "up");
		snprintf(cidr, sizeof(cidr), "%s/24", net->addr[i]);
		CMD("ip", "-n", net->ns[i], "addr", "add", cidr, "dev", "eth0");
		CMD("ip", "-n", net->ns[i], "link", "set", "eth0", "up");
		CMD("ip", "-n", net->ns[i], "link", "set", "lo", "up");
		if (rate) {
			CMD("tc", "qdisc", "add", "dev", net->veth[i], "root", "tbf", "rate",
			    (char *)rate, "burst", burst, "latency", "50ms");
			CMD("tc", "-n", net->ns[i], "qdisc", "add", "dev", "eth0", "root",
			    "tbf", "rate", (char *)rate, "burst", burst, "latency", "50ms");
		}
	}
	return 0;

err_destroy:
	run_netns_destroy(net);
	return -1;
}

void run_netns_destroy(run_netns_t *net)
{
	/* Deleting a namespace destroys its veth end and so the pair. */
	for (int i = 0; i < net->nodes; i++) {
		if (net->ns_made[i]) {
			char *argv[] = {"ip", "netns", "del", net->ns[i], NULL};
			run_cmd(argv, CMD_TIMEOUT_MS, true);
			net->ns_made[i] = false;
		}
		if (net->veth_made[i]) {
			char *argv[] = {"ip", "link", "del", net->veth[i], NULL};
			run_cmd(argv, CMD_TIMEOUT_MS, true);
			net->veth_made[i] = false;
		}
	}
	if (net->bridge_made) {
		char *argv[] = {"ip", "link", "del", net->bridge, NULL};
		run_cmd(argv, CMD_TIMEOUT_MS, true);
		net->bridge_made = false;
	}
}

/* The launcher pid in a name "sc<pid><kind>..." when kind follows the digits, else 0. */
static long stale_owner(const char *name, const char *kinds)
{
	char *end;
	if (strncmp(name, "sc", 2) || !isdigit((unsigned char)name[2]))
		return 0;
	long pid = strtol(name + 2, &end, 10);
	if (!*end || !strchr(kinds, *end))
		return 0;
	if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return 0; /* its launcher still runs (or it is not ours to judge) */
	return pid;
}

int run_netns_cleanup_stale(bool verbose)
{
	static const char *const dirs[] = {"/run/netns", "/sys/class/net"};
	int removed = 0;
	for (int d = 0; d < 2; d++) {
		DIR *dir = opendir(dirs[d]);
		struct dirent *e;
		if (!dir)
			continue;
		while ((e = readdir(dir))) {
			char name[RUN_IFNAME_BYTES];
			if (strlen(e->d_name) >= sizeof(name) ||
			    !stale_owner(e->d_name, d == 0 ? "n" : "bv"))
				continue;
			snprintf(name, sizeof(name), "%s", e->d_name);
			char *ns_argv[] = {"ip", "netns", "del", name, NULL};
			char *link_argv[] = {"ip", "link", "del", name, NULL};
			if (run_cmd(d == 0 ? ns_argv : link_argv, CMD_TIMEOUT_MS, true) == 0) {
				removed++;
				if (verbose)
					fprintf(stderr, "sparsecomm-run: removed stale %s %s\n",
						d == 0 ? "namespace" : "link", name);
			}
		}
		closedir(dir);
	}
	return removed;
}
