/*
 * unit.h: the unit-test runner's interface. Each tests/unit/test_*.c file defines tests
 * with UNIT_TEST(name) { ... }; they register themselves at load time, and the single
 * runner binary (build/bin/sparsecomm-unit) runs each one in a forked child with a
 * timeout, so a crash or a hang fails that test alone.
 *
 * Property tests draw inputs from unit_rng(), seeded afresh on every run (or from
 * $SC_TEST_SEED); the runner prints the seed of every failing test so it can be replayed.
 */
#ifndef SC_TESTS_UNIT_H
#define SC_TESTS_UNIT_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*unit_fn)(void);

void unit_register(const char *name, const char *file, unit_fn fn, int timeout_s);
void unit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* The seed of the running test, and a per-test xoshiro256** generator seeded with it. */
uint64_t unit_seed(void);
uint64_t unit_rng(void);
/* A uniform double in [0, 1) and a uniform integer in [0, n). */
double unit_rng_double(void);
uint64_t unit_rng_below(uint64_t n);

/* What the code under test writes to stderr (its log): unit_stderr_capture sends it into
 * a pipe (up to the pipe's 64 KiB); unit_stderr_read puts stderr back and reads what was
 * written into buf (NUL-terminated, at most len - 1 bytes), returning its length. */
typedef struct {
	int rd, wr, saved;
} unit_stderr_t;
void unit_stderr_capture(unit_stderr_t *c);
size_t unit_stderr_read(unit_stderr_t *c, char *buf, size_t len);

/* Ends the running test as skipped (exit status UNIT_SKIP_STATUS), printing why; the
 * runner counts it apart from passed and failed. */
#define UNIT_SKIP_STATUS 77
void unit_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Optional, defined by a runner that needs it (tests/unit/gpu/unit_gpu.c): why every
 * test is skipped on this machine, or NULL to run them. */
const char *unit_skip_all(void) __attribute__((weak));

#define UNIT_TEST_TIMEOUT(name, timeout_s)                                                     \
	static void unit_test_##name(void);                                                    \
	__attribute__((constructor)) static void unit_reg_##name(void)                         \
	{                                                                                      \
		unit_register(#name, __FILE__, unit_test_##name, (timeout_s));                 \
	}                                                                                      \
	static void unit_test_##name(void)
#define UNIT_TEST(name) UNIT_TEST_TIMEOUT(name, 60)

#define CHECK_TRUE(cond)                                                                       \
	do {                                                                                   \
		if (!(cond))                                                                   \
			unit_fail(__FILE__, __LINE__, "expected %s", #cond);                   \
	} while (0)
#define CHECK_MSG(cond, ...)                                                                   \
	do {                                                                                   \
		if (!(cond))                                                                   \
			unit_fail(__FILE__, __LINE__, __VA_ARGS__);                            \
	} while (0)
#define CHECK_EQ_INT(a, b)                                                                     \
	do {                                                                                   \
		long long a_ = (long long)(a), b_ = (long long)(b);                            \
		if (a_ != b_)                                                                  \
			unit_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a,   \
				  a_, #b, b_);                                                 \
	} while (0)
#define CHECK_NEAR(a, b, tol)                                                                  \
	do {                                                                                   \
		double a_ = (double)(a), b_ = (double)(b);                                     \
		if (!(fabs(a_ - b_) <= (tol)))                                                 \
			unit_fail(__FILE__, __LINE__, "%s == %.9g, expected %.9g +- %g", #a,   \
				  a_, b_, (double)(tol));                                      \
	} while (0)

#endif
