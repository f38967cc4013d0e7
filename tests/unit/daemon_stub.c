/*
 * daemon_stub.c: the hooks daemon/main.c gives world/ and ctl/ (daemon.h), for the unit
 * tests and the fuzz harnesses (fuzz/), which link those subsystems without a main loop:
 * a stop only marks the daemon as stopping.
 */
#include "daemon.h"

void scd_daemon_world_ready(scd_daemon_t *d)
{
	(void)d;
}

void scd_daemon_stop(scd_daemon_t *d, int exit_code)
{
	if (d->shutting_down)
		return;
	d->shutting_down = 1;
	d->exit_code = exit_code;
}
