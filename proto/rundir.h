/*
 * rundir.h: where a daemon's control socket is when nobody names it, shared by the daemon
 * (its runtime_dir default) and the clients (sc_connect(NULL, ...), sparsectl).
 */
#ifndef SC_PROTO_RUNDIR_H
#define SC_PROTO_RUNDIR_H

#include <stddef.h>

/* The system daemon's runtime directory (systemd/sparsecommd.service). */
#define SC_RUNDIR_SYSTEM "/run/sparsecomm"

/* The runtime directory a daemon running as uid takes when runtime_dir is empty:
 * SC_RUNDIR_SYSTEM for root, else $XDG_RUNTIME_DIR/sparsecomm, else /tmp/sparsecomm-UID.
 * Returns buf. */
char *sc_rundir_default(unsigned uid, char *buf, size_t len);

/* The control socket a client reaches when none is named: $SPARSECOMM_SOCKET when set;
 * else ctl.sock in the caller's own default directory when it exists; else the system
 * daemon's SC_RUNDIR_SYSTEM/ctl.sock. Returns buf. */
char *sc_socket_default(char *buf, size_t len);

#endif
