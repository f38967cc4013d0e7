/*
 * zmsg.h: reading one protocol message from a ZeroMQ socket that the libuv loop watches.
 * ZMQ_FD is edge-triggered, so callers drain: they call scd_zmsg_recv until it returns 0.
 * Every protocol message is one frame, after the routing identity on a ROUTER socket;
 * frames beyond that are read and dropped so that they cannot desynchronise the stream.
 */
#ifndef SCD_UTIL_ZMSG_H
#define SCD_UTIL_ZMSG_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct scd_zmsg {
	uint8_t ident[256]; /* the sender's routing identity (ROUTER sockets only) */
	size_t ident_len;
	void *data; /* the message's frame, valid until the next call or scd_zmsg_done */
	size_t len;
	zmq_msg_t frame_; /* internal */
	int held_;
} scd_zmsg_t;

/*
 * The largest frame each socket of the daemon accepts (ZMQ_MAXMSGSIZE): a peer that sends
 * a longer one is disconnected as its header arrives, before anything is buffered, so a
 * stranger cannot make the daemon hold a frame of its choosing.
 *
 * Control socket: a ClientMsg is a request of a few fixed fields and at most a tensor name
 * (255 bytes, checked at registration), a scheme name or a configuration key and value
 * (a line of the configuration file is at most 1 KiB): 64 KiB is over ten times that.
 *
 * Peer socket (coordinator and joins): the largest message is a ReadyList or a Plan naming
 * every tensor of a cycle: at most max_registrations (65536 at most) names of up to 255
 * bytes, each with fields under 64 bytes and, in a Plan's error responses, a reason under
 * 1 KiB: 65536 x (255 + 64 + 1024) bytes is 84 MiB; a WorldInfo of 4096 ranks' bootstrap
 * blobs is under 2 MiB. 128 MiB bounds both with room to spare.
 */
#define SCD_CTL_MSG_MAX_BYTES  (64LL << 10)
#define SCD_PEER_MSG_MAX_BYTES (128LL << 20)

/* Sets ZMQ_MAXMSGSIZE of sock to max_bytes; -1 (errno set) when ZeroMQ refuses it. */
int scd_zsock_bound(void *sock, int64_t max_bytes);

/* Reads the next message without blocking: 1 when one was read, 0 when none is queued.
 * router: the socket prepends the sender's identity. Messages whose identity is longer
 * than 256 bytes, or that lack a payload, are skipped. */
int scd_zmsg_recv(void *sock, int router, scd_zmsg_t *m);
/* The User-Id the socket's security handler gave the connection the last message read into
 * m came over (ZAP, world/curve.c), or NULL when there is none. */
const char *scd_zmsg_user(scd_zmsg_t *m);
/*
 * Who sent the last message read into m, as the kernel says (never as the message says):
 * on an ipc:// socket ZeroMQ reads the connection's SO_PEERCRED when it accepts it and ends
 * the connection's Peer-Address with ":UID:GID:PID" (libzmq 4.x), a property the peer
 * cannot set (the socket's own value wins over a peer's metadata of the same name). pid is
 * the peer's process in the daemon's PID namespace, 0 when the daemon cannot see it (a
 * trainer in a sibling namespace). fd is ZeroMQ's descriptor of the connection
 * (ZMQ_SRCFD), -1 when unknown. known 0: no credentials (not a Unix socket).
 */
typedef struct scd_peer_cred {
	int known;
	uint32_t uid, gid;
	int pid;
	int fd;
} scd_peer_cred_t;
void scd_zmsg_cred(scd_zmsg_t *m, scd_peer_cred_t *cred_p);
/* The same from a Peer-Address text (NULL: none). */
void scd_peer_cred_parse(const char *peer_address, scd_peer_cred_t *cred_p);

/* Releases the frame of the last message read into m. */
void scd_zmsg_done(scd_zmsg_t *m);

#endif
