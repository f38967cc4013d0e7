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

/* Reads the next message without blocking: 1 when one was read, 0 when none is queued.
 * router: the socket prepends the sender's identity. Messages whose identity is longer
 * than 256 bytes, or that lack a payload, are skipped. */
int scd_zmsg_recv(void *sock, int router, scd_zmsg_t *m);
/* Releases the frame of the last message read into m. */
void scd_zmsg_done(scd_zmsg_t *m);

#endif
