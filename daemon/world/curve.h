/*
 * curve.h: CurveZMQ on the coordinator channel, keyed by the job secret (util/secret.h).
 * The coordinator's ROUTER is a CURVE server with the key pair every node derives from
 * the secret; rank r's DEALER is a CURVE client with rank r's derived key pair and the
 * coordinator's derived public key. The handshake encrypts and authenticates the channel;
 * the coordinator's ZAP handler then admits a connection only when its client key is the
 * key of some rank 1 .. world_size - 1, and names that rank as the connection's User-Id,
 * so a message is bound to the rank whose key it came with (curve_rank). A connection
 * with any other key is refused before any message of it is read, and logged with its
 * address. Without a secret nothing is set up and every function here does nothing.
 */
#ifndef SCD_WORLD_CURVE_H
#define SCD_WORLD_CURVE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "util/zmsg.h"

typedef struct scd_curve scd_curve_t;

/* Makes sock (the coordinator's ROUTER when coord, else a rank's DEALER) a CURVE server
 * or client, before it binds or connects; the coordinator also starts its ZAP handler in
 * d's ZeroMQ context and loop. *c_p is NULL without a secret. Failures are logged. */
sc_status_t scd_curve_setup(scd_daemon_t *d, void *sock, int coord, scd_curve_t **c_p);
/* Answers the ZAP requests waiting (the handler's socket is edge-triggered: the world
 * calls this whenever it drains its own socket). */
void scd_curve_drain(scd_curve_t *c);
/* The rank whose key the message in z came with (coordinator with a secret), or -1. */
int scd_curve_rank(scd_zmsg_t *z);
void scd_curve_destroy(scd_curve_t *c);

#endif
