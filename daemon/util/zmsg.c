/* zmsg.c: see zmsg.h. */
#include "util/zmsg.h"

#include <string.h>

/* Reads and drops the rest of a multi-frame message. */
static void drop_rest(void *sock, zmq_msg_t *last)
{
	while (zmq_msg_more(last)) {
		zmq_msg_close(last);
		zmq_msg_init(last);
		if (zmq_msg_recv(last, sock, ZMQ_DONTWAIT) < 0)
			break;
	}
}

static int readable(void *sock)
{
	int events = 0;
	size_t sz = sizeof(events);
	return zmq_getsockopt(sock, ZMQ_EVENTS, &events, &sz) == 0 && (events & ZMQ_POLLIN);
}

int scd_zmsg_recv(void *sock, int router, scd_zmsg_t *m)
{
	scd_zmsg_done(m);
	while (readable(sock)) {
		zmq_msg_t id, *body = &m->frame_;
		zmq_msg_init(&id);
		zmq_msg_init(body);
		int ok = 1;
		m->ident_len = 0;
		if (router) {
			ok = zmq_msg_recv(&id, sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
			     zmq_msg_size(&id) <= sizeof(m->ident);
			if (ok) {
				m->ident_len = zmq_msg_size(&id);
				memcpy(m->ident, zmq_msg_data(&id), m->ident_len);
			} else {
				drop_rest(sock, &id);
			}
		}
		if (ok && zmq_msg_recv(body, sock, ZMQ_DONTWAIT) < 0)
			ok = 0;
		zmq_msg_close(&id);
		if (!ok) {
			zmq_msg_close(body);
			continue;
		}
		if (zmq_msg_more(body)) { /* one frame per message is the protocol */
			zmq_msg_t rest;
			zmq_msg_init(&rest);
			if (zmq_msg_recv(&rest, sock, ZMQ_DONTWAIT) >= 0)
				drop_rest(sock, &rest);
			zmq_msg_close(&rest);
		}
		m->held_ = 1;
		m->data = zmq_msg_data(body);
		m->len = zmq_msg_size(body);
		return 1;
	}
	return 0;
}

void scd_zmsg_done(scd_zmsg_t *m)
{
	if (m->held_)
		zmq_msg_close(&m->frame_);
	m->held_ = 0;
	m->data = NULL;
	m->len = 0;
}

int scd_zsock_bound(void *sock, int64_t max_bytes)
{
	return zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_bytes, sizeof(max_bytes));
}

const char *scd_zmsg_user(scd_zmsg_t *m)
{
	return m->held_ ? zmq_msg_gets(&m->frame_, "User-Id") : NULL;
}
