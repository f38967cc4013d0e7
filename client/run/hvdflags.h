/*
 * hvdflags.h: horovodrun's flags on sparsecomm-run's command line (hvdflags.c): the ones
 * with an equivalent here become that setting, the others are refused naming the flag and
 * why, so that no flag that would change a Horovod job's behaviour is silently ignored.
 */
#ifndef SC_RUN_HVDFLAGS_H
#define SC_RUN_HVDFLAGS_H

#include <stdbool.h>

#include "opts.h"

/* horovodrun's variables for the launcher: HOROVOD_START_TIMEOUT as --ready-timeout's
 * default (a flag given after wins). */
void run_hvd_env(opts_t *o);
/* Whether name (an option, its value in *val_p or, when *val_p is NULL, in argv[*i_p + 1])
 * is one of horovodrun's; a mapped one is applied to o (daemon settings appended to
 * o->daemon_args), a refused one is a usage error naming it. */
bool run_hvd_flag(opts_t *o, const char *name, const char **val_p, int argc, char **argv,
		  int *i_p);

#endif
