/*
 * pipe.h: the peer pipe, a direct TCP connection between each node's daemon and the
 * coordinator's that carries the peer messages of a formed world, read and written by
 * the daemons' loop threads themselves.
 *
 * The coordinator channel (ZeroMQ, world.c) carries every peer message before the world
 * forms, and any message while a node's pipe is not up. A ZeroMQ message wakes three
 * threads after the sender's call (the sender's ZeroMQ I/O thread, the receiver's, the
 * receiver's loop); a message on the pipe wakes one (the receiver's loop), since the
 * sender's loop writes it on the socket itself (docs/performance.md, "A small operation's
 * round trip"). The two channels carry one ordered stream: world/stream.c numbers each
 * message of a formed world and delivers them in that order whichever way each came.
 *
 * The coordinator listens on its coordinator host, at peer_port (0: a free port), and
 * WorldInfo names the port; each node connects to it once the world has formed. The
 * connection opens with the data plane's proof of the job secret (transport/tcp_auth.h,
 * under a key of its own, so neither proof can be relayed as the other): the node's hello
 * (its rank, the world id, a nonce), the coordinator's answer (its nonce and HMAC), the
 * node's HMAC, the coordinator's verdict. With a job secret every byte after it is
 * encrypted in the data plane's records (transport/tcp_seal.h), as CurveZMQ encrypts the
 * coordinator channel; without one the handshake proves nothing and the bytes go in clear,
 * as on that channel. Each message is a 4-byte little-endian length and a PeerMsg of at
 * most SCD_PEER_MSG_MAX_BYTES. A connection that has not finished its handshake within
 * 2 s is closed, and at most SCD_PIPE_PENDING_MAX are pending at once.
 *
 * A pipe that fails (its peer exited, a malformed frame) is closed and says so
 * (scd_pipe_on_closed); what it had not written goes with it. The world keeps every
 * message until its receiver acknowledges it and sends the ones not acknowledged again on
 * the coordinator channel (world/stream.c), as it sends the messages after them, and a
 * node connects again at its next heartbeat. A reader hands out at most about
 * SCD_PIPE_TURN_BYTES per turn of the loop, so a peer that floods its pipe does not hold
 * the loop.
 */
#ifndef SCD_WORLD_PIPE_H
#define SCD_WORLD_PIPE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "sparsecomm.h"

#define SCD_PIPE_PENDING_MAX  32
#define SCD_PIPE_HANDSHAKE_MS 2000
#define SCD_PIPE_TURN_BYTES   (1u << 20)

typedef struct scd_pipe scd_pipe_t;

/* A whole message from rank's pipe (on a node, rank is 0). The callback may send and may
 * close pipes. */
typedef void (*scd_pipe_recv_fn)(void *ctx, int rank, const uint8_t *msg, size_t len);

/* Rank's pipe, up, closed (it failed, or scd_pipe_close_all): what it carried and had not
 * written is gone. Not called when the pipes close for a new world (scd_pipe_world) or
 * the end (scd_pipe_destroy). */
typedef void (*scd_pipe_closed_fn)(void *ctx, int rank);

/* A pipe end for rank me of world_size ranks, on loop, proving key (32 bytes) and
 * encrypting when encrypt is set. NULL when out of memory. */
scd_pipe_t *scd_pipe_new(uv_loop_t *loop, int me, int world_size, const uint8_t key[32],
			 int encrypt, scd_pipe_recv_fn recv, void *ctx);
/* Sets the callback told of a pipe that closed. */
void scd_pipe_on_closed(scd_pipe_t *p, scd_pipe_closed_fn closed);
/* The coordinator listens on host (numeric, or a wildcard) at port (0: a free one); *bound
 * is the port taken. err names the address and the reason on failure. */
sc_status_t scd_pipe_listen(scd_pipe_t *p, const char *host, uint16_t port, uint16_t *bound,
			    char *err, size_t err_len);
/* The world world_id formed: connections of other worlds are closed, and the coordinator
 * takes only hellos of this one. */
void scd_pipe_world(scd_pipe_t *p, uint64_t world_id);
/* A node connects to the coordinator at host:port (numeric host), unless connected or
 * connecting. */
void scd_pipe_connect(scd_pipe_t *p, const char *host, uint16_t port);
/* Sends msg (len bytes) to rank (on a node: 0) when its pipe is up: 1 when it is on its
 * way, 0 when there is no pipe up (the caller sends it another way). A pipe that fails in
 * this call is closed and tells the closed callback (scd_pipe_on_closed), after which the
 * call returns 1 (the callback's owner has msg), or 0 without a callback. */
int scd_pipe_send(scd_pipe_t *p, int rank, const uint8_t *msg, size_t len);
/* Whether rank's pipe is up. */
int scd_pipe_up(const scd_pipe_t *p, int rank);
/* Closes every connection for why (logged). */
void scd_pipe_close_all(scd_pipe_t *p, const char *why);
/* Writes what the pipes still hold, waiting at most timeout_ms in all, then closes them
 * for why (the world re-forms, the daemon leaves). */
void scd_pipe_flush(scd_pipe_t *p, int timeout_ms, const char *why);
/* Closes everything; p is freed once the loop has closed its handles. */
void scd_pipe_destroy(scd_pipe_t *p);

#endif
