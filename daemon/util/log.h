/*
 * log.h: the daemon's logging. scd_log() checks the level and the subsystem mask before it
 * formats anything, so disabled debug lines cost one comparison.
 */
#ifndef SCD_LOG_H
#define SCD_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include "sparsecomm.h"

typedef enum { SCD_LOG_ERROR = 0, SCD_LOG_WARN, SCD_LOG_INFO, SCD_LOG_DEBUG } scd_log_level_t;

typedef enum {
	SCD_SUB_MAIN = 0,
	SCD_SUB_CONFIG,
	SCD_SUB_CTL,
	SCD_SUB_WORLD,
	SCD_SUB_NEGOTIATE,
	SCD_SUB_ENGINE,
	SCD_SUB_TRANSPORT,
	SCD_SUB_DEVICE,
	SCD_SUB_COUNT
} scd_log_sub_t;

extern int scd_log_level;
extern unsigned scd_log_subsystems; /* bit per scd_log_sub_t */

void scd_log_set_prefix(const char *prefix);
/* error, warn, info or debug (any case) into *level_p; SC_ERR_INVALID for anything else. */
sc_status_t scd_log_parse_level(const char *text, int *level_p);
void scd_log_emit(scd_log_level_t level, scd_log_sub_t sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define scd_log(level, sub, ...)                                                               \
	do {                                                                                   \
		if ((int)(level) <= scd_log_level && (scd_log_subsystems >> (sub)&1u))         \
			scd_log_emit((level), (sub), __VA_ARGS__);                             \
	} while (0)
/* A call site whose lines an outsider can multiply (one per connection, per message): at
 * most SCD_LOG_BURST lines in SCD_LOG_WINDOW_MS, then one line counting those held back. */
#define SCD_LOG_BURST	  5
#define SCD_LOG_WINDOW_MS 10000
typedef struct {
	uint64_t since_ms; /* the window's start */
	unsigned n, held;  /* lines logged in it, held back in it */
} scd_log_limit_t;
/* Whether the call site l may log a line now; *held_p: the lines it held back in the
 * window that ended, to be counted once (0: none). Thread-safe. */
int scd_log_limit(scd_log_limit_t *l, uint64_t now_ms, unsigned *held_p);

#define scd_log_limited(level, sub, ...)                                                       \
	do {                                                                                   \
		static scd_log_limit_t l_;                                                     \
		unsigned held_;                                                                \
		if ((int)(level) <= scd_log_level && (scd_log_subsystems >> (sub)&1u) &&       \
		    scd_log_limit(&l_, scd_log_now_ms(), &held_)) {                            \
			if (held_)                                                             \
				scd_log_emit(                                                  \
				    (level), (sub),                                            \
				    "(%u more lines like the next one were held back "         \
				    "in %d s)",                                                \
				    held_, SCD_LOG_WINDOW_MS / 1000);                          \
			scd_log_emit((level), (sub), __VA_ARGS__);                             \
		}                                                                              \
	} while (0)
uint64_t scd_log_now_ms(void);

#define scd_error(sub, ...)	   scd_log(SCD_LOG_ERROR, sub, __VA_ARGS__)
#define scd_warn(sub, ...)	   scd_log(SCD_LOG_WARN, sub, __VA_ARGS__)
#define scd_info(sub, ...)	   scd_log(SCD_LOG_INFO, sub, __VA_ARGS__)
#define scd_debug(sub, ...)	   scd_log(SCD_LOG_DEBUG, sub, __VA_ARGS__)
#define scd_warn_limited(sub, ...) scd_log_limited(SCD_LOG_WARN, sub, __VA_ARGS__)

#endif
