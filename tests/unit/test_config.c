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
