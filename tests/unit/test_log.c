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
	int fds[2];
	CHECK_EQ_INT(pipe(fds), 0);
	int saved = dup(STDERR_FILENO);
	dup2(fds[1], STDERR_FILENO);
	for (int i = 0; i < 1000; i++)
		scd_warn_limited(SCD_SUB_TRANSPORT, "refused connection %d", i);
	dup2(saved, STDERR_FILENO);
	close(fds[1]);
	char buf[65536];
	ssize_t n, total = 0;
	while ((n = read(fds[0], buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
		total += n;
	buf[total] = 0;
	close(fds[0]);
	int lines = 0;
	for (char *p = buf; (p = strchr(p, '\n')); p++)
		lines++;
	CHECK_MSG(lines == SCD_LOG_BURST && strstr(buf, "refused connection 0") &&
		      !strstr(buf, "refused connection 999"),
		  "%d lines for 1000 warnings:\n%s", lines, buf);
}
