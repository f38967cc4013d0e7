/* config.c: the settings table and its readers (file, environment, flags, runtime). */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const scd_cfg_desc_t scd_cfg_desc[SCD_CFG_COUNT] = {
#define SCD_CFG_DESC_(key, type, di, ds, mn, mx, rt, doc)                                      \
	[SCD_CFG_##key] = {#key, SCD_CFG_##type, (di), (ds), (mn), (mx), (rt), (doc)},
    SCD_CONFIG_MAP(SCD_CFG_DESC_)
#undef SCD_CFG_DESC_
};

static const char *const source_names[] = {"default", "file", "env", "flag", "runtime"};

const char *scd_config_source_name(scd_cfg_source_t src)
{
	return (unsigned)src < 5 ? source_names[src] : "?";
}

void scd_config_init(scd_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		cfg->ival[k] = scd_cfg_desc[k].def_int;
		if (scd_cfg_desc[k].type == SCD_CFG_STR)
			cfg->sval[k] = strdup(scd_cfg_desc[k].def_str);
		if (scd_cfg_desc[k].type == SCD_CFG_NUM)
			cfg->dval[k] = strtod(scd_cfg_desc[k].def_str, NULL);
	}
}

void scd_config_free(scd_config_t *cfg)
{
	for (int k = 0; k < SCD_CFG_COUNT; k++)
		free(cfg->sval[k]);
	memset(cfg, 0, sizeof(*cfg));
}

int scd_config_find(const char *name)
{
	char norm[64];
	size_t i = 0;
	for (; name[i] && i < sizeof(norm) - 1; i++)
		norm[i] = name[i] == '-' ? '_' : (char)tolower((unsigned char)name[i]);
	norm[i] = 0;
	for (int k = 0; k < SCD_CFG_COUNT; k++)
		if (!strcmp(norm, scd_cfg_desc[k].name))
			return k;
	return -1;
}

/* Parses an integer with an optional K/M/G (binary) suffix: SC_ERR_INVALID for text that
 * is no integer, SC_ERR_LIMIT for one past the range of int64_t (suffix included). */
static sc_status_t parse_int(const char *text, int64_t *v_p)
{
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 0);
	if (end == text)
		return SC_ERR_INVALID;
	if (errno)
		return SC_ERR_LIMIT;
	int shift = 0;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	default:
		break;
	}
	end += shift != 0;
	while (isspace((unsigned char)*end))
		end++;
	if (*end)
		return SC_ERR_INVALID;
	if (v > (LLONG_MAX >> shift) || v < (LLONG_MIN >> shift))
		return SC_ERR_LIMIT;
	*v_p = v * (1LL << shift);
	return SC_OK;
}

sc_status_t scd_config_set(scd_config_t *cfg, int key, const char *value, scd_cfg_source_t src,
			   char *err, size_t err_len)
{
	if (key < 0 || key >= SCD_CFG_COUNT) {
		snprintf(err, err_len, "unknown configuration key");
		return SC_ERR_NOT_FOUND;
	}
	const scd_cfg_desc_t *d = &scd_cfg_desc[key];
	if (src == SCD_SRC_RUNTIME && !(d->runtime & SCD_CFG_RT)) {
		snprintf(err, err_len, "%s cannot be changed while the daemon runs", d->name);
		return SC_ERR_INVALID;
	}
	if (d->type == SCD_CFG_INT) {
		int64_t v;
		/* a switch (a key of 0 or 1) also reads true and false */
		int sw = d->min == 0 && d->max == 1;
		sc_status_t pst = sw && !strcasecmp(value, "true")    ? (v = 1, SC_OK)
				  : sw && !strcasecmp(value, "false") ? (v = 0, SC_OK)
								      : parse_int(value, &v);
		if (pst != SC_OK) {
			snprintf(err, err_len, "%s: '%.64s' is %s", d->name, value,
				 pst == SC_ERR_LIMIT ? "out of range" : "not an integer");
			return SC_ERR_INVALID;
		}
		if (v < d->min || v > d->max) {
			snprintf(err, err_len, "%s: %lld is outside [%lld, %lld]", d->name,
				 (long long)v, (long long)d->min, (long long)d->max);
			return SC_ERR_INVALID;
		}
		cfg->ival[key] = v;
	} else if (d->type == SCD_CFG_NUM) {
		char *end;
		errno = 0;
		double v = strtod(value, &end);
		while (isspace((unsigned char)*end))
			end++;
		if (errno || end == value || *end || !isfinite(v)) {
			snprintf(err, err_len, "%s: '%s' is not a number", d->name, value);
			return SC_ERR_INVALID;
		}
		double lo = (double)d->min * 1e-6, hi = (double)d->max * 1e-6;
		if (v < lo || v > hi) {
			snprintf(err, err_len, "%s: %g is outside [%g, %g]", d->name, v, lo,
				 hi);
			return SC_ERR_INVALID;
		}
		/* a cap or a band of 0 turns it off; below 1 it would select nothing */
		if ((key == SCD_CFG_exdyna_cap || key == SCD_CFG_exdyna_grid) && v > 0 &&
		    v < 1) {
			snprintf(err, err_len, "%s: %g is neither 0 (off) nor at least 1",
				 d->name, v);
			return SC_ERR_INVALID;
		}
		cfg->dval[key] = v;
	} else {
		sc_status_t st = scd_config_check_text(key, value, err, err_len);
		if (st != SC_OK)
			return st;
		char *copy = strdup(value);
		if (!copy)
			return SC_ERR_NOMEM;
		free(cfg->sval[key]);
		cfg->sval[key] = copy;
	}
	cfg->source[key] = src;
	return SC_OK;
}

sc_status_t scd_config_probe(const char *name, const char *value, char *err, size_t err_len)
{
	int key = scd_config_find(name);
	if (key < 0) {
		snprintf(err, err_len, "unknown configuration key '%.100s'", name);
		return SC_ERR_NOT_FOUND;
	}
	scd_config_t probe;
	scd_config_init(&probe);
	sc_status_t st = scd_config_set(&probe, key, value, SCD_SRC_RUNTIME, err, err_len);
	scd_config_free(&probe);
	return st;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

sc_status_t scd_config_load_file(scd_config_t *cfg, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	sc_status_t st = scd_config_load_stream(cfg, f, path, err, err_len);
	fclose(f);
	return st;
}

sc_status_t scd_config_load_stream(scd_config_t *cfg, FILE *f, const char *name, char *err,
				   size_t err_len)
{
	char line[1024], msg[256];
	int lineno = 0, set_on[SCD_CFG_COUNT] = {0};
	sc_status_t st = SC_OK;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		size_t len = strlen(line);
		/* the rest of a longer line would be read as a line of its own */
		if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
			snprintf(err, err_len, "%s:%d: line longer than %zu bytes", name,
				 lineno, sizeof(line) - 2);
			return SC_ERR_INVALID;
		}
		char *s = trim(line);
		if (!*s || *s == '#' || *s == ';' || *s == '[')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, err_len, "%s:%d: expected key = value", name, lineno);
			return SC_ERR_INVALID;
		}
		*eq = 0;
		char *key = trim(s), *val = trim(eq + 1);
		int k = scd_config_find(key);
		if (k < 0) {
			snprintf(err, err_len, "%s:%d: unknown key '%.64s'", name, lineno, key);
			return SC_ERR_INVALID;
		}
		/* The rest of the line is the value, as it is: quotes or a comment after it
		 * would become part of it (a coordinator '"host:7700"'), refused later with a
		 * message far from this line, or not at all (a path). */
		size_t vlen = strlen(val);
		if (vlen >= 2 && (val[0] == '"' || val[0] == '\'') && val[vlen - 1] == val[0]) {
			snprintf(
			    err, err_len,
			    "%s:%d: %s: the value is in quotes; write it without them (the "
			    "rest of the line is the value)",
			    name, lineno, scd_cfg_desc[k].name);
			return SC_ERR_INVALID;
		}
		if (strstr(val, " #") || strstr(val, "\t#") || strstr(val, " ;") ||
		    strstr(val, "\t;")) {
			snprintf(
			    err, err_len,
			    "%s:%d: %s: '%.100s' holds a comment; a comment goes on a line "
			    "of its own",
			    name, lineno, scd_cfg_desc[k].name, val);
			return SC_ERR_INVALID;
		}
		/* A key given twice is a mistake either way: which one was meant is unknown. */
		if (set_on[k]) {
			snprintf(err, err_len, "%s:%d: %s is set again (first on line %d)",
				 name, lineno, scd_cfg_desc[k].name, set_on[k]);
			return SC_ERR_INVALID;
		}
		set_on[k] = lineno;
		st = scd_config_set(cfg, k, val, SCD_SRC_FILE, msg, sizeof(msg));
		if (st != SC_OK) {
			snprintf(err, err_len, "%s:%d: %s", name, lineno, msg);
			return st;
		}
	}
	return SC_OK;
}

sc_status_t scd_config_load_env(scd_config_t *cfg, char *err, size_t err_len)
{
	char name[96], msg[256];
	sc_status_t hst = scd_config_load_horovod_env(cfg, err, err_len);
	if (hst != SC_OK)
		return hst;
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		int n = snprintf(name, sizeof(name), "SPARSECOMM_%s", scd_cfg_desc[k].name);
		for (int i = 11; i < n; i++)
			name[i] = (char)toupper((unsigned char)name[i]);
		const char *v = getenv(name);
		if (!v)
			continue;
		sc_status_t st = scd_config_set(cfg, k, v, SCD_SRC_ENV, msg, sizeof(msg));
		if (st != SC_OK) {
			snprintf(err, err_len, "%s: %s", name, msg);
			return st;
		}
	}
	return SC_OK;
}

const char *scd_config_text(const scd_config_t *cfg, int key, char *buf, size_t len)
{
	if (scd_cfg_desc[key].type == SCD_CFG_STR)
		return cfg->sval[key];
	if (scd_cfg_desc[key].type == SCD_CFG_NUM)
		snprintf(buf, len, "%g", cfg->dval[key]);
	else
		snprintf(buf, len, "%lld", (long long)cfg->ival[key]);
	return buf;
}

void scd_config_dump(const scd_config_t *cfg, FILE *out)
{
	char buf[32];
	fprintf(out, "# sparsecommd effective configuration (key = value  # source)\n");
	for (int k = 0; k < SCD_CFG_COUNT; k++)
		fprintf(out, "%s = %s  # %s%s%s\n", scd_cfg_desc[k].name,
			scd_config_text(cfg, k, buf, sizeof(buf)),
			scd_config_source_name(cfg->source[k]),
			(scd_cfg_desc[k].runtime & SCD_CFG_OWNER)
			    ? ", runtime-changeable by the daemon's user or root"
			: (scd_cfg_desc[k].runtime & SCD_CFG_RT) ? ", runtime-changeable"
								 : "",
			(scd_cfg_desc[k].runtime & SCD_CFG_SAME) ? ", same on every node" : "");
}
