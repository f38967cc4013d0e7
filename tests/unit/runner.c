/*
 * runner.c: runs every registered unit test in a forked child with a timeout and prints
 * "N passed, N failed". Arguments filter tests by substring of their names.
 */
#include "unit.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UNIT_MAX_TESTS 1024

typedef struct {
	const char *name;
	const char *file;
	unit_fn fn;
	int timeout_s;
} unit_case_t;

static unit_case_t cases[UNIT_MAX_TESTS];
static int n_cases;
static uint64_t current_seed;
static uint64_t rng_state[4];

void unit_register(const char *name, const char *file, unit_fn fn, int timeout_s)
{
	if (n_cases == UNIT_MAX_TESTS) {
		fprintf(stderr, "unit: too many tests (max %d)\n", UNIT_MAX_TESTS);
		exit(2);
	}
	cases[n_cases++] = (unit_case_t){name, file, fn, timeout_s};
}

void unit_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "    %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(stderr);
	_exit(1);
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void seed_rng(uint64_t seed)
{
	uint64_t x = seed;
	current_seed = seed;
	for (int i = 0; i < 4; i++)
		rng_state[i] = splitmix64(&x);
}

void unit_stderr_capture(unit_stderr_t *c)
{
	int fds[2];
	fflush(stderr);
	if (pipe(fds) != 0)
		unit_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
	c->rd = fds[0];
	c->wr = fds[1];
	c->saved = dup(STDERR_FILENO);
	dup2(c->wr, STDERR_FILENO);
}

size_t unit_stderr_read(unit_stderr_t *c, char *buf, size_t len)
{
	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	close(c->wr);
	size_t total = 0;
	ssize_t n;
	while (total + 1 < len && (n = read(c->rd, buf + total, len - 1 - total)) > 0)
		total += (size_t)n;
	buf[total] = 0;
	close(c->rd);
	return total;
}

uint64_t unit_seed(void)
{
	return current_seed;
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t unit_rng(void)
{
	uint64_t *s = rng_state;
	uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double unit_rng_double(void)
{
	return (double)(unit_rng() >> 11) * 0x1.0p-53;
}

uint64_t unit_rng_below(uint64_t n)
{
	return n ? unit_rng() % n : 0;
}

static int matches(const char *name, int argc, char **argv)
{
	if (argc <= 1)
		return 1;
	for (int i = 1; i < argc; i++)
		if (strstr(name, argv[i]))
			return 1;
	return 0;
}

void unit_skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("        skipped: ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(NULL);
	_exit(UNIT_SKIP_STATUS);
}

/* Runs one test in a child; returns 1 when it passed, 0 when it failed, -1 when it was
 * skipped. */
static int run_case(const unit_case_t *c, uint64_t seed)
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("unit: fork");
		return 0;
	}
	if (pid == 0) {
		seed_rng(seed);
		alarm((unsigned)c->timeout_s);
		c->fn();
		fflush(NULL);
		_exit(0);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == UNIT_SKIP_STATUS) {
		printf("  skip  %s\n", c->name);
		fflush(stdout);
		return -1;
	}
	if (ok) {
		printf("  ok    %-48s %8.1f ms\n", c->name, ms);
	} else {
		if (WIFSIGNALED(status))
			printf("  FAIL  %-48s killed by signal %d%s (seed %" PRIu64 ")\n",
			       c->name, WTERMSIG(status),
			       WTERMSIG(status) == SIGALRM ? " (timeout)" : "", seed);
		else
			printf("  FAIL  %-48s (%s, seed %" PRIu64
			       ", replay with SC_TEST_SEED=%" PRIu64 ")\n",
			       c->name, c->file, seed, seed);
	}
	fflush(stdout);
	return ok;
}

int main(int argc, char **argv)
{
	/* The host build of the GPU device runs on OpenMP, whose idle threads spin by default:
	 * with the several processes of a scheme test on few cores, spinning threads starve the
	 * working ones (20x slower here). OpenMP reads the policy when it loads, so it is set
	 * for a fresh image of this runner. */
	if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
		execv("/proc/self/exe", argv);
	const char *env = getenv("SC_TEST_SEED");
	uint64_t base;
	if (env && *env) {
		base = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x =
		    (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
		base = splitmix64(&x);
	}
	printf("unit tests (base seed %" PRIu64 ")\n", base);
	int passed = 0, failed = 0, skipped = 0;
	/* SPARSECOMM_REQUIRE_GPU=1 (tests/gpu/device_check.sh): a machine that should run
	 * everything counts every skip as a failure */
	const char *req = getenv("SPARSECOMM_REQUIRE_GPU");
	int require = req && !strcmp(req, "1");
	const char *skip_all = unit_skip_all ? unit_skip_all() : NULL;
	if (skip_all)
		printf("every test skipped: %s\n", skip_all);
	if (require)
		printf("SPARSECOMM_REQUIRE_GPU=1: every skipped test counts as failed\n");
	for (int i = 0; i < n_cases; i++) {
		if (!matches(cases[i].name, argc, argv))
			continue;
		if (skip_all) {
			printf("  skip  %s\n", cases[i].name);
			skipped++;
			continue;
		}
		/* With SC_TEST_SEED every test replays that exact seed. */
		uint64_t x = base + (uint64_t)i;
		uint64_t seed = (env && *env) ? base : splitmix64(&x);
		int r = run_case(&cases[i], seed);
		if (r > 0)
			passed++;
		else if (r < 0)
			skipped++;
		else
			failed++;
	}
	if (require)
		failed += skipped;
	/* the last line stays "N passed, N failed" (tests/run.sh adds these up) */
	if (skipped)
		printf("%d skipped\n", skipped);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
