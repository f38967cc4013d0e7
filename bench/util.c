/* util.c: see util.h. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_percentile(double *v, int n, double p)
{
	if (p == 0.5)
		return bench_median(v, n);
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	double x = p * n;
	int k = (int)x; /* ceil(x) - 1, without libm (the MPI peer links none) */
	k += (double)k < x;
	k -= 1;
	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

int bench_parse_rate(const char *rate, double *bits_p)
{
	static const struct {
		const char *unit;
		double mult;
	} units[] = {{"", 1},	     {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9},
		     {"tbit", 1e12}, {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}};
	char *end;
	double v = strtod(rate, &end);
	if (end == rate || !(v > 0))
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcasecmp(end, units[i].unit)) {
			*bits_p = v * units[i].mult;
			return 0;
		}
	return -1;
}

int bench_find_peer_script(const char *explicit_path, char *path, size_t cap)
{
	char self[PATH_MAX];
	const char *env = getenv("SPARSECOMM_RUN_PEER");
	if (explicit_path || (env && *env)) {
		snprintf(path, cap, "%s", explicit_path ? explicit_path : env);
		return access(path, X_OK);
	}
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = 0;
	const char *tries[] = {"../../bench/mpi/run-peer.sh",
			       "../share/sparsecomm/run-peer.sh"};
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		snprintf(path, cap, "%.*s/%s", (int)(cap - 40), self, tries[i]);
		if (access(path, X_OK) == 0)
			return 0;
	}
	return -1;
}

char *bench_run_capture(char *const argv[], int timeout_s)
{
	int outp[2];
	if (pipe2(outp, O_CLOEXEC) < 0)
		return NULL;
	pid_t pid = fork();
	if (pid < 0) {
		close(outp[0]);
		close(outp[1]);
		return NULL;
	}
	if (pid == 0) {
		dup2(outp[1], 1);
		execv(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(outp[1]);
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	double end = bench_now_s() + timeout_s;
	while (out) {
		struct pollfd pfd = {.fd = outp[0], .events = POLLIN};
		double left = end - bench_now_s();
		if (left <= 0) {
			fprintf(stderr, "bench: %s ran over %d s; stopping it\n", argv[0],
				timeout_s);
			kill(pid, SIGTERM);
			break;
		}
		int k = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (k <= 0)
			continue;
		if (len + 1 == cap) {
			char *grown = realloc(out, cap * 2);
			if (!grown)
				break;
			out = grown;
			cap *= 2;
		}
		ssize_t got = read(outp[0], out + len, cap - 1 - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	close(outp[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!out)
		return NULL;
	out[len] = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "bench: %s failed (wait status %#x); its output: %s\n", argv[0],
			status, out);
		free(out);
		return NULL;
	}
	return out;
}

int bench_parse_bytes(const char *s, size_t *out_p)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	double mult = 1;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		mult = 1024.0;
		end++;
		break;
	case 'M':
		mult = 1048576.0;
		end++;
		break;
	case 'G':
		mult = 1073741824.0;
		end++;
		break;
	default:
		break;
	}
	if (!strcasecmp(end, "iB") || !strcasecmp(end, "B"))
		end += strlen(end);
	if (*end)
		return -1;
	*out_p = (size_t)(v * mult);
	return 0;
}

int bench_mkdir_parents(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return 0;
	if ((size_t)(slash - path) >= sizeof(dir)) {
		fprintf(stderr, "bench: directory of '%.64s...' is too long\n", path);
		return -1;
	}
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	/* each component in turn, the existing ones (EEXIST) passed over */
	for (char *p = dir + 1;; p++) {
		int end = *p == '\0';
		if (*p != '/' && !end)
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			fprintf(stderr, "bench: cannot create directory %s: %s\n", dir,
				strerror(errno));
			return -1;
		}
		if (end)
			return 0;
		*p = '/';
	}
}
