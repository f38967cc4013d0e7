/*
 * config_check.c: what the text settings may hold beyond their type: log_level's four
 * levels, device's three placements, nonfinite's and data_protection's three modes,
 * scheme's names, fusion_mode's four modes and scheme_pins' PATTERN=SCHEME list. scd_config_set
 * runs these checks for every source (file, environment, flags, a runtime change), so a value
 * the daemons would not understand is refused where it is given instead of being silently
 * ignored when a buffer is planned.
 */
#include "config/config.h"

#include <stdio.h>
#include <string.h>

#include "scheme/registry.h"
#include "transport/tcp_seal.h"
#include "world/fusion_plan.h"

int scd_config_pin_next(const char **pins, char *item, size_t len, const char **scheme_p)
{
	const char *p = *pins;
	if (!p || !*p)
		return 0;
	size_t n = strcspn(p, ",");
	*pins = p + n + (p[n] == ',');
	snprintf(item, len, "%.*s", (int)(n < len ? n : len - 1), p);
	char *eq = strrchr(item, '=');
	*scheme_p = NULL;
	if (eq) {
		*eq = 0;
		*scheme_p = eq + 1;
	}
	return n < len ? 1 : -1;
}

/* ", " separated scheme names into buf. */
static const char *scheme_names(char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (int s = 0; s < SCD_SCHEME_COUNT && used < len; s++) {
		int w = snprintf(buf + used, len - used, "%s%s", s ? ", " : "",
				 scd_schemes[s]->name);
		used += w > 0 ? (size_t)w : 0;
	}
	return buf;
}

static sc_status_t check_pins(const char *value, char *err, size_t err_len)
{
	char item[SCD_PIN_ITEM_MAX], names[256];
	const char *scheme, *p = value;
	scd_scheme_t s;
	int k, i = 0;
	while ((k = scd_config_pin_next(&p, item, sizeof(item), &scheme)) != 0) {
		i++;
		if (k < 0) {
			snprintf(err, err_len,
				 "scheme_pins: item %d of '%.100s' is longer than %d bytes", i,
				 value, SCD_PIN_ITEM_MAX - 1);
			return SC_ERR_INVALID;
		}
		if (!scheme || !item[0]) {
			snprintf(
			    err, err_len,
			    "scheme_pins: item %d ('%.60s') of '%.100s' is not PATTERN=SCHEME",
			    i, item, value);
			return SC_ERR_INVALID;
		}
		if (scd_scheme_parse(scheme, &s) != 0) {
			snprintf(
			    err, err_len,
			    "scheme_pins: item %d of '%.100s' names the unknown scheme '%.40s' "
			    "(known: %s)",
			    i, value, scheme, scheme_names(names, sizeof(names)));
			return SC_ERR_INVALID;
		}
	}
	if (*value && value[strlen(value) - 1] == ',') {
		snprintf(err, err_len, "scheme_pins: '%.100s' ends with an empty item", value);
		return SC_ERR_INVALID;
	}
	return SC_OK;
}

sc_status_t scd_config_check_text(int key, const char *value, char *err, size_t err_len)
{
	char names[256];
	scd_scheme_t s;
	if (key == SCD_CFG_log_level && strcmp(value, "error") && strcmp(value, "warn") &&
	    strcmp(value, "info") && strcmp(value, "debug")) {
		snprintf(err, err_len, "log_level: '%.100s' is not error, warn, info or debug",
			 value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_scheme && strcmp(value, "auto") != 0 &&
	    scd_scheme_parse(value, &s) != 0) {
		snprintf(err, err_len, "scheme: unknown scheme '%.100s' (auto or one of: %s)",
			 value, scheme_names(names, sizeof(names)));
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_device && strcmp(value, "cpu") && strcmp(value, "cuda") &&
	    strcmp(value, "auto")) {
		snprintf(err, err_len, "device: '%.100s' is not cpu, cuda or auto", value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_data_protection && scd_seal_mode_parse(value) < 0) {
		snprintf(err, err_len,
			 "data_protection: '%.100s' is not none, integrity or encrypt", value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_nonfinite && strcmp(value, "pass") && strcmp(value, "warn") &&
	    strcmp(value, "error")) {
		snprintf(err, err_len, "nonfinite: '%.100s' is not pass, warn or error", value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_fusion_mode && scd_fusion_mode_parse(value) < 0) {
		snprintf(err, err_len,
			 "fusion_mode: '%.100s' is not layerwise, fixed, aligned or adaptive",
			 value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_exdyna_scope && strcmp(value, "model") && strcmp(value, "tensor")) {
		snprintf(err, err_len, "exdyna_scope: '%.100s' is not model or tensor", value);
		return SC_ERR_INVALID;
	}
	if (key == SCD_CFG_scheme_pins)
		return check_pins(value, err, err_len);
	return SC_OK;
}
