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

/* The CLOCK_REALTIME time timeout_ms from now, for pthread_cond_timedwait. */
static inline struct timespec scd_deadline_ts(int timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static inline double scd_thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
