/* util.c: see util.h. */
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
	const char *tries[] = {"../../bench/mpi/run-peer.sh", "../share/sparsecomm/run-peer.sh"};
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		snprintf(path, cap, "%.*s/%s", (int)(cap - 40), self, tries[i]);
		if (access(path, X_OK) == 0)
			return 0;
	}
	return -1;
}
