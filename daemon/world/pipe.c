/* pipe.c: the peer pipe between the coordinator and each node (see pipe.h). */
#include "world/pipe.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp_auth.h"
#include "transport/tcp_seal.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/zmsg.h"

#define PIPE_MAGIC   "SCPP"
#define PIPE_VERSION 1
/* the handshake's messages: the hello, the acceptor's answer, the proof, the verdict */
#define HELLO_BYTES   (4 + 4 + 8 + 4 + 4 + SCD_TCP_AUTH_NONCE_BYTES)
#define ACK_BYTES     (4 + 4 + SCD_TCP_AUTH_NONCE_BYTES + SCD_TCP_AUTH_MAC_BYTES)
#define PROOF_BYTES   SCD_TCP_AUTH_MAC_BYTES
#define VERDICT_BYTES 4
/* the acceptor's codes */
enum {
	PIPE_OK = 0,
	PIPE_NO_WORLD = 1,
	PIPE_BAD_RANK = 2,
	PIPE_BAD_PROOF = 3,
	PIPE_BAD_HELLO = 4
};

typedef enum {
	C_CONNECTING, /* connector: connect(2) in progress */
	C_ACK,	      /* connector: waiting for the answer */
	C_VERDICT,    /* connector: waiting for the verdict */
	C_HELLO,      /* acceptor: waiting for the hello */
	C_PROOF,      /* acceptor: waiting for the proof */
	C_UP,
} conn_state_t;

typedef struct conn {
	scd_pipe_t *p;
	int fd;
	uv_poll_t poll;
	int events; /* what poll watches */
	conn_state_t state;
	int rank; /* the peer's (acceptor: once its hello named it) */
	int closing;
	uint64_t deadline_ms; /* of the handshake */
	scd_tcp_auth_conn_t auth;
	int peer_aes;
	uint8_t hs[ACK_BYTES]; /* the handshake message being read */
	size_t hs_len;
	scd_seal_t *seal;
	uint8_t *ob; /* bytes to write: [ob_off, ob_len) */
	size_t ob_off, ob_len, ob_cap;
	uint8_t *rb; /* bytes read, whole messages not yet taken: [rb_off, rb_len) */
	size_t rb_off, rb_len, rb_cap;
	struct conn *next; /* acceptor: the pending list */
} conn_t;

struct scd_pipe {
	uv_loop_t *loop;
	int me, P;
	uint8_t key[SCD_TCP_AUTH_KEY_BYTES];
	int encrypt;
	scd_pipe_recv_fn recv;
	scd_pipe_closed_fn closed;
	int quiet; /* closing for a new world or the daemon's end: no closed callback */
	void *ctx;
	uint64_t world_id;
	int lfd;
	uv_poll_t lpoll;
	uv_timer_t timer;
	conn_t **conns; /* by rank: the pipe up (on a node, [0], also while it opens) */
	conn_t *pending;
	int n_pending;
	int accept_paused; /* the listener rests until the timer's next turn (EMFILE) */
	int handles;	   /* open libuv handles; p is freed when the last closes */
	int destroyed;
};

static void conn_io(uv_poll_t *h, int status, int events);

static void pipe_maybe_free(scd_pipe_t *p)
{
	if (p->destroyed && p->handles == 0) {
		sodium_memzero(p->key, sizeof(p->key));
		free(p->conns);
		free(p);
	}
}

static void handle_closed(uv_handle_t *h)
{
	scd_pipe_t *p = h->data;
	p->handles--;
	pipe_maybe_free(p);
}

static void conn_closed(uv_handle_t *h)
{
	conn_t *c = h->data;
	scd_pipe_t *p = c->p;
	scd_seal_free(c->seal);
	free(c->ob);
	free(c->rb);
	free(c);
	p->handles--;
	pipe_maybe_free(p);
}

static void unlink_pending(scd_pipe_t *p, conn_t *c)
{
	for (conn_t **pp = &p->pending; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			p->n_pending--;
			return;
		}
}

/* Closes c (its memory goes once the loop has closed its handle). */
static void conn_close(conn_t *c, const char *why)
{
	if (c->closing)
		return;
	scd_pipe_t *p = c->p;
	c->closing = 1;
	if (c->state == C_UP || p->me != 0)
		scd_info(SCD_SUB_WORLD, "peer pipe %s rank %d closed: %s",
			 p->me == 0 ? "from" : "to", p->me == 0 ? c->rank : 0, why);
	else
		scd_warn_limited(SCD_SUB_WORLD, "peer pipe connection closed: %s", why);
	if (c->rank >= 0 && c->rank < p->P && p->conns[c->rank] == c)
		p->conns[c->rank] = NULL;
	unlink_pending(p, c);
	uv_close((uv_handle_t *)&c->poll, conn_closed); /* stops it, before the fd goes */
	close(c->fd);
	c->ob_off = c->ob_len = 0;
	if (c->state == C_UP && p->closed && !p->quiet)
		p->closed(p->ctx, p->me == 0 ? c->rank : 0);
}

static conn_t *conn_new(scd_pipe_t *p, int fd, conn_state_t state, int events)
{
	conn_t *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->p = p;
	c->fd = fd;
	c->state = state;
	c->rank = -1;
	c->deadline_ms = scd_now_ms() + SCD_PIPE_HANDSHAKE_MS;
	c->auth.world_id = p->world_id;
	if (uv_poll_init(p->loop, &c->poll, fd) != 0) {
		close(fd);
		free(c);
		return NULL;
	}
	c->poll.data = c;
	p->handles++;
	c->events = events;
	uv_poll_start(&c->poll, events, conn_io);
	return c;
}

static void watch(conn_t *c, int events)
{
	if (c->events != events && !c->closing) {
		c->events = events;
		uv_poll_start(&c->poll, events, conn_io);
	}
}

/* ---- the handshake ---------------------------------------------------------------- */

static void put32(uint8_t *b, uint32_t v)
{
	v = htole32(v);
	memcpy(b, &v, 4);
}

static uint32_t get32(const uint8_t *b)
{
	uint32_t v;
	memcpy(&v, b, 4);
	return le32toh(v);
}

/* A handshake message goes whole: the socket is fresh and its buffer empty. */
static int send_all(conn_t *c, const uint8_t *b, size_t n)
{
	return send(c->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n;
}

/* Reads toward a handshake message of want bytes: 1 when whole, 0 when more must come, -1
 * when the connection ended or failed. */
static int read_hs(conn_t *c, size_t want)
{
	while (c->hs_len < want) {
		ssize_t n = recv(c->fd, c->hs + c->hs_len, want - c->hs_len, MSG_DONTWAIT);
		if (n > 0)
			c->hs_len += (size_t)n;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		else
			return -1;
	}
	c->hs_len = 0;
	return 1;
}

static int make_seal(conn_t *c, int connector)
{
	scd_pipe_t *p = c->p;
	if (!p->encrypt)
		return 1;
	scd_seal_cipher_t cipher =
	    scd_seal_aes_available() && c->peer_aes ? SCD_SEAL_AES256GCM : SCD_SEAL_CHACHA20;
	uint8_t to_acc[SCD_SEAL_KEY_BYTES], to_conn[SCD_SEAL_KEY_BYTES];
	scd_seal_keys(p->key, &c->auth, SCD_SEAL_ENCRYPT, cipher, to_acc, to_conn);
	c->seal = scd_seal_new(SCD_SEAL_ENCRYPT, cipher, connector ? to_acc : to_conn,
			       connector ? to_conn : to_acc);
	memset(to_acc, 0, sizeof(to_acc));
	memset(to_conn, 0, sizeof(to_conn));
	return c->seal != NULL;
}

static void conn_up(conn_t *c)
{
	scd_pipe_t *p = c->p;
	unlink_pending(p, c);
	if (p->conns[c->rank] && p->conns[c->rank] != c)
		conn_close(p->conns[c->rank], "replaced by a new connection");
	p->conns[c->rank] = c;
	c->state = C_UP;
	watch(c, UV_READABLE);
	scd_debug(SCD_SUB_WORLD, "peer pipe %s rank %d up", p->me == 0 ? "from" : "to",
		  c->rank);
}

static void acceptor_refuse(conn_t *c, uint32_t code, const char *why)
{
	uint8_t ack[ACK_BYTES] = {0};
	put32(ack, code);
	send_all(c, ack, sizeof(ack));
	conn_close(c, why);
}

static void on_hello(conn_t *c)
{
	scd_pipe_t *p = c->p;
	const uint8_t *h = c->hs;
	uint64_t wid;
	memcpy(&wid, h + 8, 8);
	wid = le64toh(wid);
	uint32_t rank = get32(h + 16);
	if (memcmp(h, PIPE_MAGIC, 4) != 0 || get32(h + 4) != PIPE_VERSION) {
		acceptor_refuse(c, PIPE_BAD_HELLO, "not a peer pipe hello of this version");
		return;
	}
	if (!p->world_id || wid != p->world_id) {
		acceptor_refuse(c, PIPE_NO_WORLD, "a hello of another world");
		return;
	}
	if (rank == 0 || rank >= (uint32_t)p->P) {
		acceptor_refuse(c, PIPE_BAD_RANK, "a hello naming a rank outside the world");
		return;
	}
	c->rank = (int)rank;
	c->peer_aes = get32(h + 20) != 0;
	c->auth.world_id = p->world_id;
	c->auth.connector_rank = (int)rank;
	c->auth.acceptor_rank = p->me;
	memcpy(c->auth.connector_nonce, h + 24, SCD_TCP_AUTH_NONCE_BYTES);
	scd_tcp_auth_nonce(c->auth.acceptor_nonce);
	uint8_t ack[ACK_BYTES];
	put32(ack, PIPE_OK);
	put32(ack + 4, (uint32_t)scd_seal_aes_available());
	memcpy(ack + 8, c->auth.acceptor_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	scd_tcp_auth_mac(p->key, SCD_TCP_AUTH_ACCEPTOR, &c->auth,
			 ack + 8 + SCD_TCP_AUTH_NONCE_BYTES);
	if (!send_all(c, ack, sizeof(ack))) {
		conn_close(c, "its answer could not be sent");
		return;
	}
	c->state = C_PROOF;
}

static void on_proof(conn_t *c)
{
	scd_pipe_t *p = c->p;
	uint8_t verdict[VERDICT_BYTES];
	if (!scd_tcp_auth_check(p->key, SCD_TCP_AUTH_CONNECTOR, &c->auth, c->hs)) {
		put32(verdict, PIPE_BAD_PROOF);
		send_all(c, verdict, sizeof(verdict));
		char why[96];
		snprintf(why, sizeof(why), "rank %d's hello failed the proof of the job secret",
			 c->rank);
		c->rank = -1;
		conn_close(c, why);
		return;
	}
	put32(verdict, PIPE_OK);
	if (!send_all(c, verdict, sizeof(verdict)) || !make_seal(c, 0)) {
		conn_close(c, "its verdict could not be sent");
		return;
	}
	conn_up(c);
}

static void send_hello(conn_t *c)
{
	scd_pipe_t *p = c->p;
	uint8_t h[HELLO_BYTES];
	memcpy(h, PIPE_MAGIC, 4);
	put32(h + 4, PIPE_VERSION);
	uint64_t wid = htole64(p->world_id);
	memcpy(h + 8, &wid, 8);
	put32(h + 16, (uint32_t)p->me);
	put32(h + 20, (uint32_t)scd_seal_aes_available());
	c->auth.world_id = p->world_id;
	c->auth.connector_rank = p->me;
	c->auth.acceptor_rank = 0;
	scd_tcp_auth_nonce(c->auth.connector_nonce);
	memcpy(h + 24, c->auth.connector_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	if (!send_all(c, h, sizeof(h))) {
		conn_close(c, "its hello could not be sent");
		return;
	}
	c->state = C_ACK;
	watch(c, UV_READABLE);
}

static void on_ack(conn_t *c)
{
	scd_pipe_t *p = c->p;
	uint32_t code = get32(c->hs);
	if (code != PIPE_OK) {
		char why[96];
		snprintf(why, sizeof(why), "the coordinator refused it (code %u)", code);
		conn_close(c, why);
		return;
	}
	c->peer_aes = get32(c->hs + 4) != 0;
	memcpy(c->auth.acceptor_nonce, c->hs + 8, SCD_TCP_AUTH_NONCE_BYTES);
	if (!scd_tcp_auth_check(p->key, SCD_TCP_AUTH_ACCEPTOR, &c->auth,
				c->hs + 8 + SCD_TCP_AUTH_NONCE_BYTES)) {
		conn_close(c, "the coordinator's answer failed the proof of the job secret");
		return;
	}
	uint8_t proof[PROOF_BYTES];
	scd_tcp_auth_mac(p->key, SCD_TCP_AUTH_CONNECTOR, &c->auth, proof);
	if (!send_all(c, proof, sizeof(proof))) {
		conn_close(c, "its proof could not be sent");
		return;
	}
	c->state = C_VERDICT;
}

static void on_verdict(conn_t *c)
{
	uint32_t code = get32(c->hs);
	if (code != PIPE_OK) {
		char why[96];
		snprintf(why, sizeof(why), "the coordinator refused its proof (code %u)", code);
		conn_close(c, why);
		return;
	}
	if (!make_seal(c, 1)) {
		conn_close(c, "no memory for its records");
		return;
	}
	conn_up(c);
}

/* ---- messages ---------------------------------------------------------------------- */

/* Writes what c holds: 0, or -1 when the connection failed (closed). */
static int flush_out(conn_t *c)
{
	while (c->ob_off < c->ob_len) {
		struct iovec iov = {c->ob + c->ob_off, c->ob_len - c->ob_off};
		ssize_t n = scd_seal_send(c->seal, c->fd, &iov, 1);
		if (n > 0) {
			c->ob_off += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			watch(c, UV_READABLE | UV_WRITABLE);
			return 0;
		}
		char why[96];
		snprintf(why, sizeof(why), "send: %s", n < 0 ? strerror(errno) : "closed");
		conn_close(c, why);
		return -1;
	}
	c->ob_off = c->ob_len = 0;
	watch(c, UV_READABLE);
	return 0;
}

/* Reads what has come and hands out each whole message, at most about
 * SCD_PIPE_TURN_BYTES in one turn of the loop (the socket stays readable for the next). */
static void read_in(conn_t *c)
{
	scd_pipe_t *p = c->p;
	size_t turn = 0;
	for (;;) {
		if (c->rb_off == c->rb_len)
			c->rb_off = c->rb_len = 0;
		if (c->rb_cap - c->rb_len < 16384 && c->rb_off) {
			memmove(c->rb, c->rb + c->rb_off, c->rb_len - c->rb_off);
			c->rb_len -= c->rb_off;
			c->rb_off = 0;
		}
		if (c->rb_cap - c->rb_len < 16384) {
			size_t cap = c->rb_cap ? c->rb_cap * 2 : 65536;
			uint8_t *nb = realloc(c->rb, cap);
			if (!nb) {
				conn_close(c, "no memory for a message");
				return;
			}
			c->rb = nb;
			c->rb_cap = cap;
		}
		ssize_t n =
		    scd_seal_recv(c->seal, c->fd, c->rb + c->rb_len, c->rb_cap - c->rb_len);
		if (n == 0) {
			conn_close(c, "the peer closed it");
			return;
		}
		if (n < 0) {
			if ((errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) &&
			    !scd_seal_ready(c->seal))
				return;
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				continue;
			char why[96];
			snprintf(why, sizeof(why), "receive: %s",
				 errno == EBADMSG ? "a record failed its integrity check"
						  : strerror(errno));
			conn_close(c, why);
			return;
		}
		c->rb_len += (size_t)n;
		turn += (size_t)n;
		while (c->rb_len - c->rb_off >= 4) {
			uint32_t len = get32(c->rb + c->rb_off);
			if ((long long)len > SCD_PEER_MSG_MAX_BYTES) {
				char why[96];
				snprintf(why, sizeof(why),
					 "a message of %u bytes is over the bound", len);
				conn_close(c, why);
				return;
			}
			if (c->rb_len - c->rb_off - 4 < len) {
				if (c->rb_cap < (size_t)len + 4 + 16384) {
					size_t keep = c->rb_len - c->rb_off;
					memmove(c->rb, c->rb + c->rb_off, keep);
					c->rb_off = 0;
					c->rb_len = keep;
					uint8_t *nb = realloc(c->rb, (size_t)len + 4 + 16384);
					if (!nb) {
						conn_close(c, "no memory for a message");
						return;
					}
					c->rb = nb;
					c->rb_cap = (size_t)len + 4 + 16384;
				}
				break;
			}
			const uint8_t *msg = c->rb + c->rb_off + 4;
			c->rb_off += 4 + (size_t)len;
			p->recv(p->ctx, p->me == 0 ? c->rank : 0, msg, len);
			if (c->closing || p->destroyed)
				return;
		}
		if (turn >= SCD_PIPE_TURN_BYTES && !scd_seal_ready(c->seal))
			return;
	}
}

static void conn_io(uv_poll_t *h, int status, int events)
{
	conn_t *c = h->data;
	if (c->closing)
		return;
	if (status < 0) {
		conn_close(c, uv_strerror(status));
		return;
	}
	int r;
	switch (c->state) {
	case C_CONNECTING: {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
			conn_close(c, strerror(err ? err : errno));
			return;
		}
		send_hello(c);
		return;
	}
	case C_ACK:
		if ((r = read_hs(c, ACK_BYTES)) < 0)
			conn_close(c, "the coordinator closed it during the handshake");
		else if (r)
			on_ack(c);
		return;
	case C_VERDICT:
		if ((r = read_hs(c, VERDICT_BYTES)) < 0)
			conn_close(c, "the coordinator closed it during the handshake");
		else if (r)
			on_verdict(c);
		return;
	case C_HELLO:
		if ((r = read_hs(c, HELLO_BYTES)) < 0)
			conn_close(c, "closed during the handshake");
		else if (r)
			on_hello(c);
		return;
	case C_PROOF:
		if ((r = read_hs(c, PROOF_BYTES)) < 0)
			conn_close(c, "closed during the handshake");
		else if (r)
			on_proof(c);
		return;
	case C_UP:
		if ((events & UV_WRITABLE) && flush_out(c) < 0)
			return;
		if (events & UV_READABLE)
			read_in(c);
		return;
	}
}

/* ---- the coordinator's listener, the handshakes' deadlines -------------------------- */

static void on_accept(uv_poll_t *h, int status, int events)
{
	scd_pipe_t *p = h->data;
	for (;;) {
		int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			       errno == ENOMEM)) {
			/* the connection stays in the backlog and the listener readable: wait
			 * for the next turn of the timer rather than spin on it */
			scd_warn_limited(SCD_SUB_WORLD,
					 "peer pipe: cannot accept a connection: %s (waiting)",
					 strerror(errno));
			uv_poll_stop(&p->lpoll);
			p->accept_paused = 1;
			return;
		}
		if (fd < 0)
			return;
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (p->n_pending >= SCD_PIPE_PENDING_MAX) {
			conn_t *old = p->pending;
			while (old && old->next)
				old = old->next; /* the list is newest first */
			if (old)
				conn_close(old, "too many connections pending");
		}
		conn_t *c = conn_new(p, fd, C_HELLO, UV_READABLE);
		if (!c)
			continue;
		c->next = p->pending;
		p->pending = c;
		p->n_pending++;
	}
}

static void on_timer(uv_timer_t *t)
{
	scd_pipe_t *p = t->data;
	uint64_t now = scd_now_ms();
	if (p->accept_paused && p->lfd >= 0 && !p->destroyed) {
		p->accept_paused = 0;
		uv_poll_start(&p->lpoll, UV_READABLE, on_accept);
	}
	for (conn_t *c = p->pending, *next; c; c = next) {
		next = c->next;
		if (now > c->deadline_ms)
			conn_close(c, "its handshake took over 2 s");
	}
	conn_t *c = p->P > 0 ? p->conns[0] : NULL;
	if (p->me != 0 && c && c->state != C_UP && now > c->deadline_ms)
		conn_close(c, "its handshake took over 2 s");
}

/* ---- the interface ----------------------------------------------------------------- */

/* The socket address of numeric host (IPv6 when it has a ':') and port: 0 when host is
 * not a numeric address. */
static int sockaddr_of(const char *host, uint16_t port, struct sockaddr_storage *ss,
		       socklen_t *sl)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		*sl = sizeof(*a);
		return inet_pton(AF_INET6, host, &a->sin6_addr) == 1;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	*sl = sizeof(*a);
	return inet_pton(AF_INET, host, &a->sin_addr) == 1;
}

scd_pipe_t *scd_pipe_new(uv_loop_t *loop, int me, int world_size, const uint8_t key[32],
			 int encrypt, scd_pipe_recv_fn recv, void *ctx)
{
	scd_pipe_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->conns = calloc((size_t)world_size, sizeof(*p->conns));
	if (!p->conns) {
		free(p);
		return NULL;
	}
	p->loop = loop;
	p->me = me;
	p->P = world_size;
	memcpy(p->key, key, sizeof(p->key));
	p->encrypt = encrypt;
	p->recv = recv;
	p->ctx = ctx;
	p->lfd = -1;
	uv_timer_init(loop, &p->timer);
	p->timer.data = p;
	p->handles++;
	uv_timer_start(&p->timer, on_timer, 500, 500);
	uv_unref((uv_handle_t *)&p->timer);
	return p;
}

sc_status_t scd_pipe_listen(scd_pipe_t *p, const char *host, uint16_t port, uint16_t *bound,
			    char *err, size_t err_len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (!sockaddr_of(host, port, &ss, &sl)) {
		snprintf(err, err_len, "'%s' is not a numeric address", host);
		return SC_ERR_INVALID;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		snprintf(err, err_len, "cannot listen on %s port %u: %s", host, port,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return SC_ERR_SYSTEM;
	}
	*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						: ((struct sockaddr_in *)&ss)->sin_port);
	p->lfd = fd;
	uv_poll_init(p->loop, &p->lpoll, fd);
	p->lpoll.data = p;
	p->handles++;
	uv_poll_start(&p->lpoll, UV_READABLE, on_accept);
	return SC_OK;
}

void scd_pipe_on_closed(scd_pipe_t *p, scd_pipe_closed_fn closed)
{
	p->closed = closed;
}

void scd_pipe_world(scd_pipe_t *p, uint64_t world_id)
{
	if (p->world_id != world_id) {
		p->quiet = 1; /* the old world's messages are no one's now */
		scd_pipe_close_all(p, "a new world formed");
		p->quiet = 0;
	}
	p->world_id = world_id;
}

void scd_pipe_connect(scd_pipe_t *p, const char *host, uint16_t port)
{
	if (p->me == 0 || p->conns[0] || !p->world_id)
		return;
	struct sockaddr_storage ss;
	socklen_t sl;
	if (!sockaddr_of(host, port, &ss, &sl))
		return;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS) {
		scd_warn_limited(SCD_SUB_WORLD, "peer pipe to %s port %u: %s", host, port,
				 strerror(errno));
		close(fd);
		return;
	}
	conn_t *c = conn_new(p, fd, C_CONNECTING, UV_WRITABLE);
	if (c) {
		c->rank = 0;
		p->conns[0] = c;
	}
}

int scd_pipe_up(const scd_pipe_t *p, int rank)
{
	return p && rank >= 0 && rank < p->P && p->conns[rank] &&
	       p->conns[rank]->state == C_UP && !p->conns[rank]->closing;
}

int scd_pipe_send(scd_pipe_t *p, int rank, const uint8_t *msg, size_t len)
{
	if (!scd_pipe_up(p, rank) || (long long)len > SCD_PEER_MSG_MAX_BYTES)
		return 0;
	conn_t *c = p->conns[rank];
	size_t need = c->ob_len + 4 + len;
	if (need > c->ob_cap) {
		if (c->ob_off) {
			memmove(c->ob, c->ob + c->ob_off, c->ob_len - c->ob_off);
			c->ob_len -= c->ob_off;
			c->ob_off = 0;
			need = c->ob_len + 4 + len;
		}
		if (need > c->ob_cap) {
			size_t cap = c->ob_cap ? c->ob_cap : 16384;
			while (cap < need)
				cap *= 2;
			uint8_t *nb = realloc(c->ob, cap);
			if (!nb) {
				conn_close(c, "no memory for a message");
				return p->closed != NULL; /* the closed callback has it */
			}
			c->ob = nb;
			c->ob_cap = cap;
		}
	}
	put32(c->ob + c->ob_len, (uint32_t)len);
	memcpy(c->ob + c->ob_len + 4, msg, len);
	c->ob_len += 4 + len;
	/* a message behind others waits for the socket to take them */
	if (c->ob_len - c->ob_off == 4 + len)
		if (flush_out(c) < 0)
			return p->closed != NULL; /* the closed callback has it */
	return 1;
}

void scd_pipe_close_all(scd_pipe_t *p, const char *why)
{
	if (!p)
		return;
	for (int r = 0; r < p->P; r++)
		if (p->conns[r])
			conn_close(p->conns[r], why);
	while (p->pending)
		conn_close(p->pending, why);
}

void scd_pipe_flush(scd_pipe_t *p, int timeout_ms, const char *why)
{
	if (!p)
		return;
	uint64_t end = scd_now_ms() + (uint64_t)timeout_ms;
	for (int r = 0; r < p->P; r++) {
		conn_t *c = p->conns[r];
		while (c && !c->closing && c->state == C_UP && c->ob_off < c->ob_len) {
			uint64_t now = scd_now_ms();
			if (now >= end)
				break;
			struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
			if (poll(&pf, 1, (int)(end - now)) <= 0)
				break;
			if (flush_out(c) < 0)
				break;
		}
	}
	scd_pipe_close_all(p, why);
}

void scd_pipe_destroy(scd_pipe_t *p)
{
	if (!p || p->destroyed)
		return;
	p->quiet = 1;
	scd_pipe_close_all(p, "the daemon stops");
	p->destroyed = 1;
	uv_timer_stop(&p->timer);
	uv_close((uv_handle_t *)&p->timer, handle_closed);
	if (p->lfd >= 0) {
		uv_close((uv_handle_t *)&p->lpoll, handle_closed);
		close(p->lfd);
		p->lfd = -1;
	}
}
