/*
 * fuzz_config.c: the configuration's readers (config/config.h): the input as an INI file
 * (scd_config_load_stream), then its first line as a runtime change of the key its first
 * byte picks (scd_config_set, what a peer's ConfigSet and sparsectl's config set reach),
 * then every setting read back as text.
 */
#include "fuzz.h"

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	scd_config_t cfg;
	char err[256], text[256];
	scd_config_init(&cfg);
	FILE *f = fmemopen((void *)data, size, "r");
	if (f) {
		scd_config_load_stream(&cfg, f, "fuzz.conf", err, sizeof(err));
		fclose(f);
	}
	if (size) {
		char *value = strndup((const char *)data + 1, size - 1);
		if (value) {
			value[strcspn(value, "\n")] = 0;
			scd_config_set(&cfg, data[0] % (SCD_CFG_COUNT + 1), value,
				       SCD_SRC_RUNTIME, err, sizeof(err));
			free(value);
		}
	}
	for (int k = 0; k < SCD_CFG_COUNT; k++)
		FUZZ_REQUIRE(scd_config_text(&cfg, k, text, sizeof(text)) != NULL);
	scd_config_free(&cfg);
	return 0;
}
