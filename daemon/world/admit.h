/*
 * admit.h: what unauthenticated peers may hold of the coordinator's channel.
 *
 * ZeroMQ accepts every TCP connection to the coordinator's port and keeps it until its
 * CurveZMQ handshake ends. A stranger that opens connections and sends nothing would hold
 * a descriptor each until the handshake timeout, and at the descriptor limit libzmq spins
 * on accept and aborts the process at its next socket. The coordinator therefore bounds
 * the handshake (SCD_ADMIT_HANDSHAKE_MS), watches its socket's connections through a
 * ZeroMQ monitor, and closes the oldest connections that have not yet proven anything
 * (fewer bytes received than a CurveZMQ handshake takes) past SCD_ADMIT_MAX_PENDING in
 * all or SCD_ADMIT_MAX_PER_ADDR from one address. It also logs handshakes that fail,
 * naming the address: a daemon with another job secret fails there, before ZAP.
 */
#ifndef SCD_WORLD_ADMIT_H
#define SCD_WORLD_ADMIT_H

#include "daemon.h"

#define SCD_ADMIT_HANDSHAKE_MS 10000
#define SCD_ADMIT_MAX_PENDING  128
#define SCD_ADMIT_MAX_PER_ADDR 32
/* A CurveZMQ client sends its greeting (64), HELLO (202) and INITIATE (over 250) bytes:
 * a connection that has received fewer has not passed a handshake. Without a secret
 * (ZeroMQ's NULL mechanism) a client sends its greeting and a READY of some 40 bytes. */
#define SCD_ADMIT_PROVEN_BYTES	    512
#define SCD_ADMIT_PROVEN_BYTES_NULL 100

typedef struct scd_admit scd_admit_t;

/* Sets the handshake timeout on sock (the coordinator's ROUTER, not yet bound) and starts
 * watching its connections; proven_bytes: what a connection has received once it passed
 * its handshake (SCD_ADMIT_PROVEN_BYTES with CurveZMQ, else ..._NULL). */
sc_status_t scd_admit_start(scd_daemon_t *d, void *sock, uint64_t proven_bytes,
			    scd_admit_t **a_p);
/* Stops watching (before sock is closed). */
void scd_admit_stop(scd_admit_t *a);
/* Connections closed for being over a bound since the start. */
uint64_t scd_admit_shed(const scd_admit_t *a);

#endif
