/* test_config.c: the settings table, its readers, and the shipped example file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "unit.h"

UNIT_TEST(config_precedence_and_sources)
{
	scd_config_t c;
	char err[256];
	scd_config_init(&c);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_world_size), 1);
	CHECK_EQ_INT(c.source[SCD_CFG_world_size], SCD_SRC_DEFAULT);
	char path[] = "/tmp/sc-config-XXXXXX";
	int fd = mkstemp(path);
	const char text[] = "[s]\nworld_size = 4\n# comment\nfusion_threshold_bytes = 2M\n";
	CHECK_TRUE(write(fd, text, sizeof(text) - 1) == (ssize_t)sizeof(text) - 1);
	close(fd);
	CHECK_EQ_INT(scd_config_load_file(&c, path, err, sizeof(err)), SC_OK);
	unlink(path);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_world_size), 4);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_fusion_threshold_bytes), 2 << 20);
	CHECK_EQ_INT(c.source[SCD_CFG_world_size], SCD_SRC_FILE);
	setenv("SPARSECOMM_WORLD_SIZE", "6", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_OK);
	unsetenv("SPARSECOMM_WORLD_SIZE");
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_world_size), 6);
	CHECK_EQ_INT(c.source[SCD_CFG_world_size], SCD_SRC_ENV);
	CHECK_EQ_INT(scd_config_set(&c, scd_config_find("world-size"), "8", SCD_SRC_FLAG, err,
				    sizeof(err)),
		     SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_world_size), 8);
	scd_config_free(&c);
}

/* A Horovod user's variables set the settings of the same meaning, in the table's units;
 * the SPARSECOMM_ name wins when both are set, and a bad value names the variable. */
UNIT_TEST(config_horovod_env)
{
	scd_config_t c;
	char err[256];
	scd_config_init(&c);
	setenv("HOROVOD_FUSION_THRESHOLD", "33554432", 1);
	setenv("HOROVOD_CYCLE_TIME", "3.5", 1);
	setenv("HOROVOD_TIMELINE", "/tmp/tl.json", 1);
	setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "30", 1);
	setenv("HOROVOD_LOG_LEVEL", "WARNING", 1);
	setenv("HOROVOD_CACHE_CAPACITY", "4096", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_cache_max_entries), 4096);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_fusion_threshold_bytes), 32 << 20);
	CHECK_TRUE(!strcmp(c.sval[SCD_CFG_fusion_mode], "fixed"));
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_cycle_time_ms), 4);
	CHECK_TRUE(!strcmp(c.sval[SCD_CFG_timeline_file], "/tmp/tl.json"));
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_stall_timeout_ms), 30000);
	CHECK_TRUE(!strcmp(c.sval[SCD_CFG_log_level], "warn"));
	CHECK_EQ_INT(c.source[SCD_CFG_cycle_time_ms], SCD_SRC_ENV);
	/* the SPARSECOMM_ names win; Horovod's "never" and DYNAMIC keep the defaults */
	scd_config_free(&c);
	scd_config_init(&c);
	setenv("SPARSECOMM_CYCLE_TIME_MS", "7", 1);
	setenv("SPARSECOMM_FUSION_MODE", "adaptive", 1);
	setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0", 1);
	setenv("HOROVOD_TIMELINE", "DYNAMIC", 1);
	setenv("HOROVOD_CACHE_CAPACITY", "0", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_cache_max_entries), 16384);
	unsetenv("SPARSECOMM_CYCLE_TIME_MS");
	unsetenv("SPARSECOMM_FUSION_MODE");
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_cycle_time_ms), 7);
	CHECK_TRUE(!strcmp(c.sval[SCD_CFG_fusion_mode], "adaptive"));
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_stall_timeout_ms), 60000);
	CHECK_TRUE(!strcmp(c.sval[SCD_CFG_timeline_file], ""));
	setenv("HOROVOD_CYCLE_TIME", "soon", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "HOROVOD_CYCLE_TIME: 'soon'") != NULL, "error: %s", err);
	setenv("HOROVOD_CYCLE_TIME", "5000", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "HOROVOD_CYCLE_TIME: cycle_time_ms") != NULL, "error: %s", err);
	unsetenv("HOROVOD_CYCLE_TIME");
	setenv("HOROVOD_LOG_LEVEL", "loud", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "HOROVOD_LOG_LEVEL") != NULL, "error: %s", err);
	unsetenv("HOROVOD_FUSION_THRESHOLD");
	unsetenv("HOROVOD_TIMELINE");
	unsetenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS");
	unsetenv("HOROVOD_LOG_LEVEL");
	unsetenv("HOROVOD_CACHE_CAPACITY");
	scd_config_free(&c);
}

UNIT_TEST(config_rejects_bad_values)
{
	scd_config_t c;
	char err[256];
	scd_config_init(&c);
	CHECK_EQ_INT(
	    scd_config_set(&c, SCD_CFG_world_size, "0", SCD_SRC_FLAG, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "world_size") != NULL, "error names the key: %s", err);
	CHECK_EQ_INT(
	    scd_config_set(&c, SCD_CFG_cycle_time_ms, "abc", SCD_SRC_FLAG, err, sizeof(err)),
	    SC_ERR_INVALID);
	/* not changeable while running */
	CHECK_EQ_INT(scd_config_set(&c, SCD_CFG_rank, "1", SCD_SRC_RUNTIME, err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_EQ_INT(
	    scd_config_set(&c, SCD_CFG_log_level, "loud", SCD_SRC_FLAG, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_EQ_INT(
	    scd_config_set(&c, SCD_CFG_data_protection, "mac", SCD_SRC_FLAG, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "data_protection: 'mac' is not none, integrity or encrypt"),
		  "error: %s", err);
	CHECK_EQ_INT(scd_config_set(&c, SCD_CFG_data_protection, "encrypt", SCD_SRC_FLAG, err,
				    sizeof(err)),
		     SC_OK);
	CHECK_EQ_INT(scd_config_find("no_such_key"), -1);
	scd_config_free(&c);
}

/* The documented example holds every key of the table with its default value, and
 * nothing else, so the two cannot drift apart. */
UNIT_TEST(config_example_file_matches_table)
{
	scd_config_t def, file;
	char err[256], a[32], b[32];
	scd_config_init(&def);
	scd_config_init(&file);
	const char *path = "config/sparsecommd.conf";
	if (access(path, R_OK) != 0)
		path = "../config/sparsecommd.conf";
	CHECK_EQ_INT(scd_config_load_file(&file, path, err, sizeof(err)), SC_OK);
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		CHECK_MSG(file.source[k] == SCD_SRC_FILE, "%s is missing from %s",
			  scd_cfg_desc[k].name, path);
		if (k == SCD_CFG_runtime_dir)
			continue;
		CHECK_MSG(!strcmp(scd_config_text(&def, k, a, sizeof(a)),
				  scd_config_text(&file, k, b, sizeof(b))),
			  "%s: example has %s, default is %s", scd_cfg_desc[k].name, b, a);
	}
	scd_config_free(&def);
	scd_config_free(&file);
}

/* README.md from the repository's root or from build/ (where the runner may start). */
static const char *readme_path(void)
{
	return access("README.md", R_OK) == 0 ? "README.md" : "../README.md";
}

/* The README's settings table lists every key of the table once, with its default (as the
 * daemon reads it: "16M" is 16777216) and whether it changes at runtime; a key whose
 * default is empty says "(empty)" or "see below". */
UNIT_TEST(config_readme_table_matches_table)
{
	const char *path = readme_path();
	FILE *f = fopen(path, "r");
	CHECK_MSG(f != NULL, "cannot open %s", path);
	char line[1024], err[256], a[32], b[32];
	int in_section = 0, rows = 0, seen[SCD_CFG_COUNT] = {0};
	scd_config_t def, doc;
	scd_config_init(&def);
	scd_config_init(&doc);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "## ", 3)) {
			in_section = !strncmp(line, "## Configuration", 16);
			continue;
		}
		if (!in_section || strncmp(line, "| ", 2) || !strncmp(line, "| key ", 6))
			continue;
		/* | keys | defaults | runtime | meaning | */
		char *cell[4], *save = NULL, *p = line + 1;
		int nc = 0;
		for (char *t = strtok_r(p, "|", &save); t && nc < 4;
		     t = strtok_r(NULL, "|", &save))
			cell[nc++] = t;
		CHECK_MSG(nc == 4, "%s: a settings row without four cells", path);
		for (int c = 0; c < 3; c++) { /* trim */
			while (*cell[c] == ' ')
				cell[c]++;
			char *e = cell[c] + strlen(cell[c]);
			while (e > cell[c] && e[-1] == ' ')
				*--e = '\0';
		}
		rows++;
		char *ks = NULL, *ds = NULL;
		char *key = strtok_r(cell[0], ",", &ks), *dv = strtok_r(cell[1], ",", &ds);
		for (; key; key = strtok_r(NULL, ",", &ks), dv = strtok_r(NULL, ",", &ds)) {
			while (*key == ' ')
				key++;
			while (dv && *dv == ' ')
				dv++;
			int k = scd_config_find(key);
			CHECK_MSG(k >= 0, "%s lists '%s', which is no key", path, key);
			CHECK_MSG(!seen[k], "%s lists %s twice", path, key);
			seen[k] = 1;
			CHECK_MSG(dv != NULL, "%s: %s has no default", path, key);
			CHECK_MSG(
			    !strcmp(cell[2], (scd_cfg_desc[k].runtime & SCD_CFG_OWNER) ? "owner"
					     : (scd_cfg_desc[k].runtime & SCD_CFG_RT)  ? "yes"
										       : "no"),
			    "%s: %s says runtime '%s'", path, key, cell[2]);
			const char *want = scd_config_text(&def, k, a, sizeof(a));
			if (!*want) {
				CHECK_MSG(!strcmp(dv, "(empty)") || !strcmp(dv, "see below"),
					  "%s: %s's default is empty, the README says '%s'",
					  path, key, dv);
				continue;
			}
			CHECK_MSG(scd_config_set(&doc, k, dv, SCD_SRC_FILE, err, sizeof(err)) ==
				      SC_OK,
				  "%s: %s's default '%s': %s", path, key, dv, err);
			CHECK_MSG(!strcmp(want, scd_config_text(&doc, k, b, sizeof(b))),
				  "%s: %s's default is %s, the README says %s", path, key, want,
				  dv);
		}
	}
	fclose(f);
	CHECK_MSG(rows > 0, "%s has no settings table under ## Configuration", path);
	for (int k = 0; k < SCD_CFG_COUNT; k++)
		CHECK_MSG(seen[k], "%s's settings table lacks %s", path, scd_cfg_desc[k].name);
	scd_config_free(&def);
	scd_config_free(&doc);
}

/* The README's sentence on the keys compared at a node's join ("Every key a buffer's scheme
 * ... is compared when a node joins") names exactly the keys the table marks the same on
 * every node: each one in backquotes, or a scheme key (spardl_, exdyna_, sketch_) under
 * "the scheme keys". */
UNIT_TEST(config_readme_names_the_keys_compared_at_join)
{
	const char *path = readme_path();
	FILE *f = fopen(path, "r");
	CHECK_MSG(f != NULL, "cannot open %s", path);
	static char text[1 << 20];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	char *start = strstr(text, "Every key a buffer's scheme");
	CHECK_MSG(start != NULL, "%s: no sentence 'Every key a buffer's scheme ...'", path);
	char *end = strstr(start, "is compared when a node");
	CHECK_MSG(end != NULL, "%s: the sentence does not end in 'is compared when a node'",
		  path);
	*end = '\0';
	int scheme_keys = strstr(start, "the scheme keys") != NULL;
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		const char *name = scd_cfg_desc[k].name;
		char quoted[64];
		snprintf(quoted, sizeof(quoted), "`%s`", name);
		int named = strstr(start, quoted) != NULL;
		int scheme = !strncmp(name, "spardl_", 7) || !strncmp(name, "exdyna_", 7) ||
			     !strncmp(name, "sketch_", 7);
		int same = (scd_cfg_desc[k].runtime & SCD_CFG_SAME) != 0;
		CHECK_MSG(!named || same,
			  "%s names %s among the keys compared at a join; it is not", path,
			  name);
		CHECK_MSG(!same || named || (scheme && scheme_keys),
			  "%s: %s is compared at a join, and the README's sentence omits it",
			  path, name);
	}
}

/* scheme and scheme_pins: only values the daemons understand, refused with the key and
 * the value named; what is refused leaves the old value. */
UNIT_TEST(config_scheme_and_pins_checked)
{
	scd_config_t c;
	char err[512];
	scd_config_init(&c);
	const char *good[][2] = {{"scheme", "auto"},
				 {"scheme", "dense_ring"},
				 {"scheme_pins", ""},
				 {"scheme_pins", "emb.*=balanced_par"},
				 {"scheme_pins", "a=agsparse,b*=dense_ring"}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_EQ_INT(scd_config_probe(good[i][0], good[i][1], err, sizeof(err)), SC_OK);
		CHECK_EQ_INT(scd_config_set(&c, scd_config_find(good[i][0]), good[i][1],
					    SCD_SRC_RUNTIME, err, sizeof(err)),
			     SC_OK);
	}
	const char *bad[][2] = {
	    {"scheme", "nosuch"},	    {"scheme", ""},
	    {"scheme_pins", "garbage"},	    {"scheme_pins", "=dense_ring"},
	    {"scheme_pins", "a=nosuch"},    {"scheme_pins", "a=auto"},
	    {"scheme_pins", "a=agsparse,"}, {"scheme_pins", "a=agsparse,,b=agsparse"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		CHECK_EQ_INT(scd_config_probe(bad[i][0], bad[i][1], err, sizeof(err)),
			     SC_ERR_INVALID);
		CHECK_TRUE(strstr(err, bad[i][0]) != NULL);
		CHECK_TRUE(strstr(err, bad[i][1]) != NULL);
		CHECK_EQ_INT(scd_config_set(&c, scd_config_find(bad[i][0]), bad[i][1],
					    SCD_SRC_RUNTIME, err, sizeof(err)),
			     SC_ERR_INVALID);
	}
	CHECK_TRUE(strcmp(scd_cfg_str(&c, SCD_CFG_scheme), "dense_ring") == 0);
	CHECK_TRUE(strcmp(scd_cfg_str(&c, SCD_CFG_scheme_pins), "a=agsparse,b*=dense_ring") ==
		   0);
	CHECK_EQ_INT(scd_config_probe("no_such_key", "1", err, sizeof(err)), SC_ERR_NOT_FOUND);
	/* the list reader buffer_pin uses */
	const char *p = "x*=dense_ring,y", *scheme;
	char item[SCD_PIN_ITEM_MAX];
	CHECK_EQ_INT(scd_config_pin_next(&p, item, sizeof(item), &scheme), 1);
	CHECK_TRUE(strcmp(item, "x*") == 0 && scheme && strcmp(scheme, "dense_ring") == 0);
	CHECK_EQ_INT(scd_config_pin_next(&p, item, sizeof(item), &scheme), 1);
	CHECK_TRUE(strcmp(item, "y") == 0 && scheme == NULL);
	CHECK_EQ_INT(scd_config_pin_next(&p, item, sizeof(item), &scheme), 0);
	scd_config_free(&c);
}

/* A line longer than the reader's buffer is refused, naming the line: its tail must not
 * be read as a line of its own (here a comment whose tail says rank = 5). */
UNIT_TEST(config_refuses_a_line_too_long)
{
	scd_config_t c;
	char err[256] = "";
	static char text[1100];
	text[0] = '#';
	memset(text + 1, ' ', 1022);
	strcpy(text + 1023, "rank = 5\n");
	scd_config_init(&c);
	FILE *f = fmemopen(text, strlen(text), "r");
	CHECK_TRUE(f != NULL);
	CHECK_EQ_INT(scd_config_load_stream(&c, f, "long.conf", err, sizeof(err)),
		     SC_ERR_INVALID);
	fclose(f);
	CHECK_MSG(strstr(err, "long.conf:1: line longer than 1022 bytes"), "error: %s", err);
	CHECK_EQ_INT(scd_cfg_int(&c, SCD_CFG_rank), 0);
	/* a line of 1022 bytes and its newline still fits */
	text[1021] = '\n';
	text[1022] = 0;
	f = fmemopen(text, strlen(text), "r");
	CHECK_EQ_INT(scd_config_load_stream(&c, f, "long.conf", err, sizeof(err)), SC_OK);
	fclose(f);
	scd_config_free(&c);
}

/* A key set twice in the file is refused, naming both lines: the last one used to win
 * silently (rank = 0, then rank = 1 in another section, ran as rank 1). */
UNIT_TEST(config_refuses_a_key_set_twice)
{
	scd_config_t c;
	char err[256] = "";
	static char text[] = "[world]\nrank = 0\nworld_size = 2\n[paths]\nrank = 1\n";
	scd_config_init(&c);
	FILE *f = fmemopen(text, strlen(text), "r");
	CHECK_TRUE(f != NULL);
	CHECK_EQ_INT(scd_config_load_stream(&c, f, "dup.conf", err, sizeof(err)),
		     SC_ERR_INVALID);
	fclose(f);
	CHECK_MSG(strstr(err, "dup.conf:5: rank is set again (first on line 2)"), "error: %s",
		  err);
	scd_config_free(&c);
}

/* A value in quotes, or followed by a comment, is refused at its line: both became part
 * of the value (coordinator = "127.0.0.1:7700" was read with its quotes, and failed at
 * start naming neither the file nor the line). */
UNIT_TEST(config_refuses_quotes_and_trailing_comments)
{
	const char *bad[][2] = {
	    {"coordinator = \"127.0.0.1:7700\"\n",
	     "q.conf:1: coordinator: the value is in quotes"},
	    {"secret_file = '/etc/s'\n", "q.conf:1: secret_file: the value is in quotes"},
	    {"data_addr = 10.0.0.1 # eth1\n",
	     "q.conf:1: data_addr: '10.0.0.1 # eth1' holds a comment"},
	    {"scheme = auto\t; the default\n",
	     "q.conf:1: scheme: 'auto\t; the default' holds a comment"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		scd_config_t c;
		char err[256] = "", text[128];
		snprintf(text, sizeof(text), "%s", bad[i][0]);
		scd_config_init(&c);
		FILE *f = fmemopen(text, strlen(text), "r");
		CHECK_TRUE(f != NULL);
		CHECK_EQ_INT(scd_config_load_stream(&c, f, "q.conf", err, sizeof(err)),
			     SC_ERR_INVALID);
		fclose(f);
		CHECK_MSG(strstr(err, bad[i][1]), "%s: error: %s", bad[i][0], err);
		scd_config_free(&c);
	}
	/* a '#' inside a value, not after a blank, stays part of it */
	scd_config_t c;
	char err[256] = "", text[] = "timeline_file = /tmp/run#3.json\n";
	scd_config_init(&c);
	FILE *f = fmemopen(text, strlen(text), "r");
	CHECK_EQ_INT(scd_config_load_stream(&c, f, "q.conf", err, sizeof(err)), SC_OK);
	fclose(f);
	CHECK_TRUE(strcmp(scd_cfg_str(&c, SCD_CFG_timeline_file), "/tmp/run#3.json") == 0);
	scd_config_free(&c);
}

/* An integer whose suffix takes it past int64_t is refused, named: it used to wrap, here
 * (2^44 + 1) MiB to 1 MiB, a value in range. */
UNIT_TEST(config_refuses_an_integer_past_its_range)
{
	scd_config_t c;
	char err[256] = "";
	scd_config_init(&c);
	int k = SCD_CFG_fusion_threshold_bytes;
	int64_t before = scd_cfg_int(&c, k);
	CHECK_EQ_INT(scd_config_set(&c, k, "17592186044417M", SCD_SRC_FILE, err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "fusion_threshold_bytes: '17592186044417M' is out of range"),
		  "error: %s", err);
	CHECK_EQ_INT(scd_cfg_int(&c, k), before);
	CHECK_EQ_INT(
	    scd_config_set(&c, k, "99999999999999999999", SCD_SRC_FILE, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "out of range"), "error: %s", err);
	CHECK_EQ_INT(
	    scd_config_set(&c, k, "-3333333333333333G", SCD_SRC_FILE, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "out of range"), "error: %s", err);
	CHECK_EQ_INT(scd_config_set(&c, k, "12x", SCD_SRC_FILE, err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "'12x' is not an integer"), "error: %s", err);
	CHECK_EQ_INT(scd_config_set(&c, k, "3M", SCD_SRC_FILE, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, k), 3 << 20);
	scd_config_free(&c);
}

/* A switch (a key of 0 or 1) reads true and false too; other keys and words do not. */
UNIT_TEST(config_switch_reads_true_and_false)
{
	scd_config_t c;
	char err[256] = "";
	scd_config_init(&c);
	int k = SCD_CFG_insecure;
	CHECK_EQ_INT(scd_cfg_int(&c, k), 0);
	CHECK_EQ_INT(scd_config_set(&c, k, "TRUE", SCD_SRC_FLAG, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, k), 1);
	CHECK_EQ_INT(scd_config_set(&c, k, "false", SCD_SRC_FLAG, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_cfg_int(&c, k), 0);
	CHECK_EQ_INT(scd_config_set(&c, k, "yes", SCD_SRC_FLAG, err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "insecure: 'yes' is not an integer"), "error: %s", err);
	CHECK_EQ_INT(
	    scd_config_set(&c, SCD_CFG_fusion_buffers, "true", SCD_SRC_FLAG, err, sizeof(err)),
	    SC_ERR_INVALID);
	scd_config_free(&c);
}

/* HOROVOD_AUTOTUNE turned on stops the daemon naming the variable (as horovodrun's
 * --autotune is refused by the launcher); 0, a negative number, text and unset are
 * Horovod's "off" (it turns the autotuner on for a number above 0). */
UNIT_TEST(config_horovod_autotune_refused)
{
	scd_config_t c;
	char err[256] = "";
	scd_config_init(&c);
	setenv("HOROVOD_AUTOTUNE", "1", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "HOROVOD_AUTOTUNE=1") && strstr(err, "no autotuner"), "error: %s",
		  err);
	setenv("HOROVOD_AUTOTUNE", "0", 1);
	CHECK_EQ_INT(scd_config_load_env(&c, err, sizeof(err)), SC_OK);
	/* Horovod turns it on for a number above 0 only: a negative one or text is off */
	setenv("HOROVOD_AUTOTUNE", "-1", 1);
	CHECK_MSG(scd_config_load_env(&c, err, sizeof(err)) == SC_OK, "-1 refused: %s", err);
	setenv("HOROVOD_AUTOTUNE", "off", 1);
	CHECK_MSG(scd_config_load_env(&c, err, sizeof(err)) == SC_OK, "off refused: %s", err);
	unsetenv("HOROVOD_AUTOTUNE");
	scd_config_free(&c);
}
