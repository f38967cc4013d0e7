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

static inline double scd_thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
