/*
 * clock.h: the monotonic clock in seconds, for durations, and the calling thread's CPU
 * time (what a step cost this node, waits excluded), and the daemon's millisecond clock.
 */
#ifndef SCD_UTIL_CLOCK_H
#define SCD_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds of the monotonic clock (clock.c). */
uint64_t scd_now_ms(void);

static inline double scd_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* clock's time timeout_us from now, for pthread_cond_timedwait on a condition variable
 * of that clock. */
static inline struct timespec scd_deadline_on(clockid_t clock, int64_t timeout_us)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	ts.tv_sec += (time_t)(timeout_us / 1000000);
	ts.tv_nsec += (long)(timeout_us % 1000000) * 1000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* The CLOCK_REALTIME time timeout_ms from now, for pthread_cond_timedwait. */
static inline struct timespec scd_deadline_ts(int timeout_ms)
{
	return scd_deadline_on(CLOCK_REALTIME, (int64_t)timeout_ms * 1000);
}

static inline double scd_thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
