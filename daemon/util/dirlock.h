/*
 * dirlock.h: one daemon per runtime directory. The daemon holds an exclusive flock on
 * "<dir>/sparsecommd.lock" for its whole life, with its pid written inside; a second daemon
 * started on the same directory fails at start naming the directory and the holder's pid
 * (two daemons there would unlink each other's control socket). The kernel drops the lock
 * when the holder exits, however it exits, so a stale file never blocks a restart.
 */
#ifndef SCD_UTIL_DIRLOCK_H
#define SCD_UTIL_DIRLOCK_H

#include <stddef.h>

#include "sparsecomm.h"

/* Takes the lock of dir; *fd_p gets the descriptor to keep open (closed on exit). On
 * failure err names the directory and, when another daemon holds it, that daemon's pid:
 * SC_ERR_BUSY then, SC_ERR_SYSTEM when the file cannot be opened or locked. */
sc_status_t scd_dirlock_take(const char *dir, int *fd_p, char *err, size_t err_len);

#endif
