/* test_log.c: the rate limit of log lines an outsider can multiply (util/log.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "util/log.h"

/* SCD_LOG_BURST lines a window, the rest held back and counted once the next window
 * opens. */
UNIT_TEST(log_limit_window)
{
	scd_log_limit_t l = {0};
	unsigned held, passed = 0;
	for (int i = 0; i < 100; i++) {
		passed += (unsigned)scd_log_limit(&l, 1000 + (uint64_t)i, &held);
		CHECK_EQ_INT(held, 0);
	}
	CHECK_EQ_INT(passed, SCD_LOG_BURST);
	CHECK_EQ_INT(scd_log_limit(&l, 1000 + SCD_LOG_WINDOW_MS - 1, &held), 0);
	CHECK_EQ_INT(scd_log_limit(&l, 1000 + SCD_LOG_WINDOW_MS, &held), 1);
	CHECK_EQ_INT(held, 100 - SCD_LOG_BURST + 1);
	CHECK_EQ_INT(scd_log_limit(&l, 1000 + SCD_LOG_WINDOW_MS + 1, &held), 1);
	CHECK_EQ_INT(held, 0);
}

/* A warning logged once per connection of a flood: a handful of lines reach stderr. */
UNIT_TEST(log_limited_flood)
{
	unit_stderr_t cap;
	unit_stderr_capture(&cap);
	for (int i = 0; i < 1000; i++)
		scd_warn_limited(SCD_SUB_TRANSPORT, "refused connection %d", i);
	char buf[65536];
	unit_stderr_read(&cap, buf, sizeof(buf));
	int lines = 0;
	for (char *p = buf; (p = strchr(p, '\n')); p++)
		lines++;
	CHECK_MSG(lines == SCD_LOG_BURST && strstr(buf, "refused connection 0") &&
		      !strstr(buf, "refused connection 999"),
		  "%d lines for 1000 warnings:\n%s", lines, buf);
}
