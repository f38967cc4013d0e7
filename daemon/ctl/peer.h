/*
 * peer.h: the kernel's view of a control client, never the client's own word: who it is
 * (the Unix socket's peer credentials, util/zmsg.h), whether it may change the daemon's
 * privileged settings, and its connection. ZeroMQ owns the connection's descriptor and
 * offers no call to watch or drop one peer of a ROUTER, so each session holds a duplicate
 * of it: through the duplicate the daemon sees the client hang up, reads how much of what
 * it sent the client has not read yet, and can shut the connection down, which makes
 * ZeroMQ close it and free what it had queued for it.
 */
#ifndef SCD_CTL_PEER_H
#define SCD_CTL_PEER_H

#include "util/zmsg.h"

/* A duplicate (close-on-exec) of the connection the credentials came with, checked to be
 * that connection still (its SO_PEERCRED are cred's: ZeroMQ may have closed the
 * descriptor, and a new connection taken its number, since the message arrived); -1 when
 * it cannot be had. */
int scd_peer_conn_dup(const scd_peer_cred_t *cred);
/* Bytes the daemon wrote to the connection that the client has not read yet (SIOCOUTQ),
 * -1 when unknown. */
long scd_peer_conn_unread(int conn);
/* Shuts the connection down in both directions (ZeroMQ then closes it) and closes conn. */
void scd_peer_conn_kick(int conn);
/* A pidfd of pid, -1 (errno set) where it cannot be had. */
int scd_peer_pidfd(int pid);
/* Whether a client of user uid runs as the daemon's own (effective) user or as root: what
 * the settings marked SCD_CFG_RT_OWNER require. */
int scd_peer_is_owner(uint32_t uid);
/* "pid P" or, when the daemon cannot see the process, "pid unknown (P in its own PID
 * namespace)", with declared the pid the client gave in its hello. */
const char *scd_peer_pid_text(int pid, int declared, char *buf, size_t len);

#endif
