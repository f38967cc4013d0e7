/* log.c: timestamped, prefixed log lines on stderr, one write(2) per line. */
#include "log.h"
#include "psname.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int scd_log_level = SCD_LOG_INFO;
unsigned scd_log_subsystems = ~0u;
static char log_prefix[64] = "sparsecommd";

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const sub_names[SCD_SUB_COUNT] = {
    "main", "config", "ctl", "world", "negotiate", "engine", "transport", "device"};

void scd_log_set_prefix(const char *prefix)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

sc_status_t scd_log_parse_level(const char *text, int *level_p)
{
	for (int i = 0; i < 4; i++) {
		if (strcasecmp(text, level_names[i]) == 0) {
			*level_p = i;
			return SC_OK;
		}
	}
	return SC_ERR_INVALID;
}

void scd_log_emit(scd_log_level_t level, scd_log_sub_t sub, const char *fmt, ...)
{
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s %s: ", tm.tm_hour,
			 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_prefix,
			 level_names[level], sub < SCD_SUB_COUNT ? sub_names[sub] : "?");
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	if (memchr(line, SCD_PSET_SEP, (size_t)n)) { /* a process set's tensor, shown */
		line[n] = 0;
		scd_pset_show(line, sizeof(line) - 1);
		n = (int)strlen(line);
	}
	line[n++] = '\n';
	ssize_t off = 0;
	while (off < n) {
		ssize_t w = write(STDERR_FILENO, line + off, (size_t)(n - off));
		if (w <= 0)
			break;
		off += w;
	}
}

uint64_t scd_log_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int scd_log_limit(scd_log_limit_t *l, uint64_t now_ms, unsigned *held_p)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	int pass;
	pthread_mutex_lock(&mu);
	*held_p = 0;
	if (!l->since_ms || now_ms - l->since_ms >= SCD_LOG_WINDOW_MS) {
		*held_p = l->held;
		l->since_ms = now_ms ? now_ms : 1;
		l->n = l->held = 0;
	}
	pass = l->n < SCD_LOG_BURST;
	if (pass)
		l->n++;
	else
		l->held++;
	pthread_mutex_unlock(&mu);
	return pass;
}
