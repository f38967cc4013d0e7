/*
 * config_horovod.c: Horovod's environment variables for the settings this daemon has too
 * (config.h, scd_config_load_horovod_env): a Horovod user's HOROVOD_FUSION_THRESHOLD,
 * HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS,
 * HOROVOD_LOG_LEVEL and HOROVOD_CACHE_CAPACITY, converted to the table's units and applied as
 * the environment's; the SPARSECOMM_<KEY> variables, applied after them, win (README.md,
 * "Coming from Horovod"). HOROVOD_AUTOTUNE turned on stops the daemon at start, as
 * horovodrun's --autotune is refused by the launcher.
 */
#include "config/config.h"
#include "horovod.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HVD_SAME: a number in the key's unit (bytes, milliseconds); HVD_SECONDS: for an _ms key;
 * HVD_ENTRIES: a count, 0 (Horovod's "off") keeping the key's default. */
typedef enum { HVD_SAME, HVD_SECONDS, HVD_TIMELINE, HVD_LOG_LEVEL, HVD_ENTRIES } hvd_unit_t;

static const struct {
	const char *env;
	int key;
	hvd_unit_t unit;
} hvd_env[] = {
    {"HOROVOD_FUSION_THRESHOLD", SCD_CFG_fusion_threshold_bytes, HVD_SAME},
    {"HOROVOD_CYCLE_TIME", SCD_CFG_cycle_time_ms, HVD_SAME},
    {"HOROVOD_TIMELINE", SCD_CFG_timeline_file, HVD_TIMELINE},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", SCD_CFG_stall_timeout_ms, HVD_SECONDS},
    {"HOROVOD_LOG_LEVEL", SCD_CFG_log_level, HVD_LOG_LEVEL},
    {"HOROVOD_CACHE_CAPACITY", SCD_CFG_cache_max_entries, HVD_ENTRIES},
};

/* A decimal number v (at least 0) times scale, rounded, as text in buf; NULL if v is not
 * one. */
static const char *scaled(const char *v, double scale, char *buf, size_t len)
{
	char *end;
	double x = strtod(v, &end);
	if (end == v || *end || !(x >= 0) || x * scale > 1e15)
		return NULL;
	snprintf(buf, len, "%lld", (long long)llround(x * scale));
	return buf;
}

/* The value of Horovod's variable k in the key's units; *skip_p when it asks for what
 * is this daemon's default (HOROVOD_TIMELINE=DYNAMIC: no file until one is started;
 * HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=0: Horovod's "never" has no equivalent, so
 * stall_timeout_ms stays; HOROVOD_CACHE_CAPACITY=0: the response cache cannot be turned
 * off, and is only a speed-up, so cache_max_entries stays). NULL: not a value of that variable.
 */
static const char *convert(size_t k, const char *v, char *buf, size_t len, int *skip_p)
{
	*skip_p = 0;
	switch (hvd_env[k].unit) {
	case HVD_SAME:
		return scaled(v, 1, buf, len);
	case HVD_SECONDS:
	case HVD_ENTRIES: {
		const char *n = scaled(v, hvd_env[k].unit == HVD_SECONDS ? 1000 : 1, buf, len);
		*skip_p = n && !strcmp(n, "0");
		return n;
	}
	case HVD_TIMELINE:
		*skip_p = !strcmp(v, "DYNAMIC") || !*v;
		return v;
	case HVD_LOG_LEVEL:
		return sc_horovod_log_level(v);
	}
	return NULL;
}

sc_status_t scd_config_load_horovod_env(scd_config_t *cfg, char *err, size_t err_len)
{
	char buf[32], msg[256];
	const char *tune = getenv("HOROVOD_AUTOTUNE"); /* refused, as horovodrun's --autotune */
	if (sc_horovod_autotune(tune)) {
		snprintf(err, err_len,
			 "HOROVOD_AUTOTUNE=%.32s asks for Horovod's autotuner, which has no "
			 "equivalent here: " SC_HOROVOD_NO_AUTOTUNE "; unset it",
			 tune);
		return SC_ERR_INVALID;
	}
	for (size_t k = 0; k < sizeof(hvd_env) / sizeof(hvd_env[0]); k++) {
		const char *v = getenv(hvd_env[k].env);
		if (!v)
			continue;
		int skip;
		const char *val = convert(k, v, buf, sizeof(buf), &skip);
		if (!val) {
			snprintf(err, err_len, "%s: '%.64s' is not %s", hvd_env[k].env, v,
				 hvd_env[k].unit == HVD_LOG_LEVEL
				     ? "trace, debug, info, warning, error or fatal"
				     : "a number at least 0");
			return SC_ERR_INVALID;
		}
		if (skip)
			continue;
		sc_status_t st =
		    scd_config_set(cfg, hvd_env[k].key, val, SCD_SRC_ENV, msg, sizeof(msg));
		/* Horovod fuses every ready tensor up to the threshold: fusion_mode fixed */
		if (st == SC_OK && hvd_env[k].key == SCD_CFG_fusion_threshold_bytes)
			st = scd_config_set(cfg, SCD_CFG_fusion_mode, "fixed", SCD_SRC_ENV, msg,
					    sizeof(msg));
		if (st != SC_OK) {
			snprintf(err, err_len, "%s: %s", hvd_env[k].env, msg);
			return st;
		}
	}
	return SC_OK;
}
