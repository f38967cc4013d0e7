/* zmsg.c: see zmsg.h. */
#include "util/zmsg.h"

#include <stdlib.h>
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

/* The last field of text before end (exclusive) as a decimal number below 2^32: its start,
 * or NULL when it is not one. */
static const char *last_number(const char *text, const char *end, uint32_t *v_p)
{
	const char *p = end;
	uint64_t v = 0, scale = 1;
	while (p > text && p[-1] >= '0' && p[-1] <= '9' && end - p < 10) {
		p--;
		v += (uint64_t)(*p - '0') * scale;
		scale *= 10;
	}
	if (p == end || p == text || p[-1] != ':' || v > UINT32_MAX)
		return NULL;
	*v_p = (uint32_t)v;
	return p - 1;
}

void scd_peer_cred_parse(const char *pa, scd_peer_cred_t *c)
{
	uint32_t uid, gid, pid;
	const char *p;
	c->known = 0;
	c->uid = c->gid = 0;
	c->pid = 0;
	if (!pa || !(p = last_number(pa, pa + strlen(pa), &pid)) ||
	    !(p = last_number(pa, p, &gid)) || !(p = last_number(pa, p, &uid)) ||
	    pid > INT32_MAX)
		return;
	c->known = 1;
	c->uid = uid;
	c->gid = gid;
	c->pid = (int)pid;
}

void scd_zmsg_cred(scd_zmsg_t *m, scd_peer_cred_t *c)
{
	scd_peer_cred_parse(m->held_ ? zmq_msg_gets(&m->frame_, "Peer-Address") : NULL, c);
	c->fd = m->held_ ? zmq_msg_get(&m->frame_, ZMQ_SRCFD) : -1;
}
