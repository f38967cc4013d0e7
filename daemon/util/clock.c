/* clock.c: the daemon's millisecond clock (clock.h), apart from main.c so that the
 * subsystems that read it link without the daemon's main loop. */
#include "util/clock.h"

uint64_t scd_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
