/*
 * clock.h: the monotonic clock in seconds, for durations.
 */
#ifndef SCD_UTIL_CLOCK_H
#define SCD_UTIL_CLOCK_H

#include <time.h>

static inline double scd_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
