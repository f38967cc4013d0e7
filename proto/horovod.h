/*
 * horovod.h: Horovod's names for what the daemons' settings say otherwise, shared by the
 * daemon (HOROVOD_* variables, daemon/config/config_horovod.c) and the launcher
 * (horovodrun's flags, client/run/hvdflags.c). Header-only, as port.h.
 */
#ifndef SC_HOROVOD_H
#define SC_HOROVOD_H

#include <stddef.h>
#include <stdlib.h>
#include <strings.h>

/* Horovod's log level (trace, debug, info, warning, error, fatal; any case) as the
 * daemon's log_level (debug, info, warn, error), or NULL. */
static inline const char *sc_horovod_log_level(const char *v)
{
	static const char *const map[][2] = {
	    {"trace", "debug"}, {"debug", "debug"}, {"info", "info"},  {"warning", "warn"},
	    {"warn", "warn"},	{"error", "error"}, {"fatal", "error"}};
	for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++)
		if (!strcasecmp(v, map[k][0]))
			return map[k][1];
	return NULL;
}

/* Whether HOROVOD_AUTOTUNE's value v turns Horovod's autotuner on (Horovod reads it as an
 * integer: any value whose leading number is above 0; 0, a negative number or text is
 * off), and why that is refused here, for the variable and horovodrun's --autotune alike
 * (README.md, "Coming from Horovod"). */
static inline int sc_horovod_autotune(const char *v)
{
	return v && strtol(v, NULL, 10) > 0;
}
#define SC_HOROVOD_NO_AUTOTUNE                                                                 \
	"there is no autotuner; fusion_mode adaptive (the default) sizes the fused buffers "   \
	"from measured times"

#endif
