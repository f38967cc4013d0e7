/*
 * admit.c: bounds on the coordinator's unauthenticated connections (see admit.h).
 *
 * The monitor reports each accepted connection with its descriptor, and its end. The
 * table keeps one entry per open connection: the descriptor, its addresses and when it
 * was accepted. The descriptor belongs to ZeroMQ, so before acting on one the entry is
 * checked against the kernel (the same local and remote address and port: the same TCP
 * connection, not a later one that took the number) and the connection is only shut
 * down, never closed here: ZeroMQ sees the end and closes it itself. A monitor that
 * dropped events under a burst leaves entries that fail that check; they are forgotten.
 */
#include "world/admit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/tcpinfo.h"

typedef struct {
	int fd;
	struct sockaddr_storage local, peer;
	char addr[INET6_ADDRSTRLEN];
	uint64_t since_ms;
	int shut;
} conn_t;

struct scd_admit {
	scd_daemon_t *d;
	void *mon;
	uv_poll_t poll;
	uv_timer_t timer;
	conn_t *c;
	size_t n, cap;
	uint64_t shed;
	uint64_t proven_bytes;
	int failed_code; /* the last handshake failure, for the disconnection after it */
};

static int same_conn(const conn_t *c)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	memset(&l, 0, sizeof(l));
	memset(&p, 0, sizeof(p));
	return getsockname(c->fd, (struct sockaddr *)&l, &ll) == 0 &&
	       getpeername(c->fd, (struct sockaddr *)&p, &pl) == 0 &&
	       !memcmp(&l, &c->local, sizeof(l)) && !memcmp(&p, &c->peer, sizeof(p));
}

static void on_accepted(scd_admit_t *a, int fd)
{
	conn_t c = {.fd = fd, .since_ms = scd_now_ms()};
	socklen_t ll = sizeof(c.local), pl = sizeof(c.peer);
	if (getsockname(fd, (struct sockaddr *)&c.local, &ll) != 0 ||
	    getpeername(fd, (struct sockaddr *)&c.peer, &pl) != 0)
		return; /* already gone */
	const void *ip = c.peer.ss_family == AF_INET6
			     ? (const void *)&((struct sockaddr_in6 *)&c.peer)->sin6_addr
			     : (const void *)&((struct sockaddr_in *)&c.peer)->sin_addr;
	inet_ntop(c.peer.ss_family, ip, c.addr, sizeof(c.addr));
	for (size_t i = 0; i < a->n; i++)
		if (a->c[i].fd == fd) {
			a->c[i] = c; /* the end of the number's last connection was not seen */
			return;
		}
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		conn_t *n = realloc(a->c, cap * sizeof(*n));
		if (!n)
			return;
		a->c = n;
		a->cap = cap;
	}
	a->c[a->n++] = c;
}

static void on_closed(scd_admit_t *a, int fd)
{
	for (size_t i = 0; i < a->n; i++) {
		if (a->c[i].fd != fd)
			continue;
		const char *kind = a->failed_code == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
				       ? "cryptographic error"
				       : "protocol error";
		if (a->failed_code && !a->c[i].shut)
			scd_warn_limited(SCD_SUB_WORLD,
					 "a coordinator-channel handshake from %s failed (%s "
					 "%#x): a daemon with another job secret, or not a "
					 "sparsecomm daemon",
					 a->c[i].addr, kind, (unsigned)a->failed_code);
		a->c[i] = a->c[--a->n];
		break;
	}
	a->failed_code = 0;
}

static int unproven(const scd_admit_t *a, const conn_t *c)
{
	uint64_t got;
	return scd_tcp_bytes_received(c->fd, &got) == 0 && got < a->proven_bytes;
}

static void shed(scd_admit_t *a, conn_t *c)
{
	shutdown(c->fd, SHUT_RDWR);
	c->shut = 1;
	a->shed++;
	scd_warn_limited(
	    SCD_SUB_WORLD,
	    "closed an unauthenticated coordinator-channel connection from %s: over "
	    "%d waiting for their handshake in all or %d from one address",
	    c->addr, SCD_ADMIT_MAX_PENDING, SCD_ADMIT_MAX_PER_ADDR);
}

static int by_addr_age(const void *x, const void *y)
{
	const conn_t *a = *(conn_t *const *)x, *b = *(conn_t *const *)y;
	int c = strcmp(a->addr, b->addr);
	return c ? c : (a->since_ms > b->since_ms) - (a->since_ms < b->since_ms);
}

static int by_age(const void *x, const void *y)
{
	const conn_t *a = *(conn_t *const *)x, *b = *(conn_t *const *)y;
	return (a->since_ms > b->since_ms) - (a->since_ms < b->since_ms);
}

/* Shuts down the oldest unproven connections over the bounds: per address, then in all. */
static void enforce(scd_admit_t *a)
{
	for (size_t i = 0; i < a->n;) {
		if (!same_conn(&a->c[i])) {
			a->c[i] = a->c[--a->n]; /* its end was not reported */
			continue;
		}
		i++;
	}
	conn_t **u = malloc((a->n + 1) * sizeof(*u));
	if (!u)
		return;
	size_t k = 0;
	for (size_t i = 0; i < a->n; i++)
		if (!a->c[i].shut && unproven(a, &a->c[i]))
			u[k++] = &a->c[i];
	qsort(u, k, sizeof(*u), by_addr_age);
	for (size_t g = 0, e; g < k; g = e) {
		for (e = g; e < k && !strcmp(u[e]->addr, u[g]->addr);)
			e++;
		for (size_t i = g; e - i > SCD_ADMIT_MAX_PER_ADDR; i++)
			shed(a, u[i]);
	}
	size_t left = 0;
	for (size_t i = 0; i < k; i++)
		if (!u[i]->shut)
			u[left++] = u[i];
	qsort(u, left, sizeof(*u), by_age);
	for (size_t i = 0; left - i > SCD_ADMIT_MAX_PENDING; i++)
		shed(a, u[i]);
	free(u);
}

static void drain(scd_admit_t *a)
{
	int n = 0;
	for (;;) {
		zmq_msg_t ev, addr;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, a->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			break;
		}
		if (zmq_msg_more(&ev)) { /* the endpoint frame */
			zmq_msg_init(&addr);
			zmq_msg_recv(&addr, a->mon, 0);
			zmq_msg_close(&addr);
		}
		if (zmq_msg_size(&ev) == 6) {
			uint16_t event;
			uint32_t value;
			memcpy(&event, zmq_msg_data(&ev), 2);
			memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
			if (event == ZMQ_EVENT_ACCEPTED)
				on_accepted(a, (int)value);
			else if (event == ZMQ_EVENT_DISCONNECTED || event == ZMQ_EVENT_CLOSED)
				on_closed(a, (int)value);
			else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
				a->failed_code = value ? (int)value : 1;
		}
		zmq_msg_close(&ev);
		n++;
	}
	if (n)
		enforce(a);
}

static void on_monitor(uv_poll_t *h, int status, int events)
{
	drain(h->data);
}

static void on_timer(uv_timer_t *h)
{
	drain(h->data);
	enforce(h->data);
}

sc_status_t scd_admit_start(scd_daemon_t *d, void *sock, uint64_t proven_bytes,
			    scd_admit_t **a_p)
{
	char ep[64];
	int ivl = SCD_ADMIT_HANDSHAKE_MS, fd, zero = 0;
	size_t sz = sizeof(fd);
	scd_admit_t *a = calloc(1, sizeof(*a));
	if (!a)
		return SC_ERR_NOMEM;
	a->d = d;
	a->proven_bytes = proven_bytes;
	snprintf(ep, sizeof(ep), "inproc://sparsecomm.admit.%p", (void *)a);
	if (zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &ivl, sizeof(ivl)) != 0 ||
	    zmq_socket_monitor(sock, ep,
			       ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
				   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0 ||
	    !(a->mon = zmq_socket(d->zctx, ZMQ_PAIR)) ||
	    zmq_setsockopt(a->mon, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
	    zmq_setsockopt(a->mon, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
	    zmq_connect(a->mon, ep) != 0 || zmq_getsockopt(a->mon, ZMQ_FD, &fd, &sz) != 0) {
		scd_error(SCD_SUB_WORLD, "cannot watch the coordinator's connections: %s",
			  zmq_strerror(errno));
		if (a->mon)
			zmq_close(a->mon);
		free(a);
		return SC_ERR_SYSTEM;
	}
	uv_poll_init(d->loop, &a->poll, fd);
	a->poll.data = a;
	uv_poll_start(&a->poll, UV_READABLE, on_monitor);
	uv_timer_init(d->loop, &a->timer);
	a->timer.data = a;
	uv_timer_start(&a->timer, on_timer, 1000, 1000);
	*a_p = a;
	return SC_OK;
}

static void admit_free_cb(uv_handle_t *h)
{
	scd_admit_t *a = h->data;
	if (h == (uv_handle_t *)&a->timer) {
		free(a->c);
		free(a);
	}
}

void scd_admit_stop(scd_admit_t *a)
{
	if (!a)
		return;
	uv_poll_stop(&a->poll);
	zmq_close(a->mon);
	uv_close((uv_handle_t *)&a->poll, NULL);
	uv_close((uv_handle_t *)&a->timer, admit_free_cb);
}

uint64_t scd_admit_shed(const scd_admit_t *a)
{
	return a ? a->shed : 0;
}
