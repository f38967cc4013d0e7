/*
 * tcp.c: the tcp data plane. A full mesh of nonblocking TCP connections between the P
 * daemons of a world (rank r connects to every lower rank and accepts every higher one),
 * and the operations the engine runs over it: exchange (known sizes), exchange_v (each
 * message framed by a 64-bit little-endian length) and the alpha-beta probe, in
 * tcp_exchange.c, and the pipelined ring allreduce, in tcp_ring.c.
 *
 * Every operation drives all of its sockets from one poll(2) loop: it first moves what
 * the sockets accept without waiting, and sleeps in poll only when nothing can move, so
 * the sends and receives of an all-to-all progress together and never spin. The
 * timeout_ms of an operation bounds the time without progress (a large transfer on a slow
 * link is not a failure as long as bytes keep moving); negative means no limit. Mesh
 * creation instead has a deadline: peers start at different times, so connects are
 * retried with a growing pause until it passes.
 *
 * Each connection opens with a hello from the connecting side, {magic, protocol, world_id,
 * rank, size, data_protection, ciphers} and its nonce, answered by an ack of the same shape
 * whose second field is 0 or the reason for a refusal (another world, a duplicate or
 * impossible rank, another world size, another data_protection), followed by the
 * acceptor's nonce and its proof of the job secret. The connector checks that proof and
 * sends its own, and the acceptor checks it before it takes the connection and answers
 * with a last code (tcp_auth.h). A refused connector fails at once; the acceptor logs the
 * refusal, naming the peer's address, and goes on waiting for the right peer. With
 * data_protection other than none, every later byte of the connection goes through the
 * record layer (tcp_seal.h) under keys derived from both nonces; its cipher is AES-256-GCM
 * when both hellos say the CPU has it, else ChaCha20-Poly1305.
 *
 * Any failure during an operation leaves the byte streams out of step, so the transport
 * remembers it and every later call fails with the same text rather than guessing where
 * each stream stands, until the mesh is built anew (the world re-forms when a node it gave
 * up joins again: docs/design.md, "Peers that go away"). While an operation waits, the
 * sockets of the peers it does not use are watched for a hangup: a rank that dies is
 * then named by every survivor (not only by those it exchanged bytes with), and an
 * operation that stops progressing after such a hangup fails after SCD_TCP_GRACE_MS
 * instead of its full timeout.
 */
#include "transport/tcp_internal.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/tcp_auth.h"
#include "transport/transport_internal.h"
#include "util/log.h"

#define TCP_MAGIC    0x54444353u /* "SCDT" */
#define TCP_PROTOCOL 3u
/* magic, protocol or code, world_id, rank, size, data_protection, ciphers (bit 0:
 * AES-256-GCM runs here) */
#define TCP_HEAD_BYTES	     32
#define TCP_CIPHER_AES	     1u
#define TCP_HELLO_BYTES	     (TCP_HEAD_BYTES + SCD_TCP_AUTH_NONCE_BYTES)
#define TCP_ACK_BYTES	     (TCP_HELLO_BYTES + SCD_TCP_AUTH_MAC_BYTES)
#define TCP_VERDICT_BYTES    4
#define TCP_SOCKET_BUF_BYTES (4 << 20)
#define TCP_SEND_BATCH	     16 /* messages gathered into one sendmsg(2) */
#define TCP_MAX_PENDING	     32 /* accepted connections still owing a hello */
/* A real peer sends its hello as soon as it has connected; a connection that has not
 * within this time is a stranger and is closed, and when every slot is taken the oldest
 * is closed for the next connection, so idle connections never keep the peers out. */
#define TCP_HELLO_TIMEOUT_MS 2000

enum {
	TCP_ACK_OK = 0,
	TCP_REFUSE_PROTOCOL,
	TCP_REFUSE_WORLD,
	TCP_REFUSE_SIZE,
	TCP_REFUSE_RANK,
	TCP_REFUSE_DUPLICATE,
	TCP_REFUSE_AUTH,
	TCP_REFUSE_PROTECTION,
};

static const char *refusal_text(uint32_t code)
{
	switch (code) {
	case TCP_REFUSE_PROTOCOL:
		return "bad magic or protocol version";
	case TCP_REFUSE_WORLD:
		return "world_id differs";
	case TCP_REFUSE_SIZE:
		return "world size differs";
	case TCP_REFUSE_RANK:
		return "rank not expected to connect";
	case TCP_REFUSE_DUPLICATE:
		return "rank already connected";
	case TCP_REFUSE_AUTH:
		return "its proof of the job secret is wrong (the secrets differ)";
	case TCP_REFUSE_PROTECTION:
		return "data_protection differs";
	default:
		return "unknown reason";
	}
}

/* ---- helpers shared with tcp_ring.c ------------------------------------------------- */

int64_t scd_tcp_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int scd_tcp_poll_ms(int64_t last_ms, int timeout_ms)
{
	if (timeout_ms < 0)
		return -1;
	int64_t left = last_ms + timeout_ms - scd_tcp_now_ms();
	return left > 0 ? (int)left : 0;
}

/*
 * When a peer had gone before, it is named first: the failures seen after it are its
 * consequences. The connections stay open until the transport is destroyed, so that each
 * survivor of a dead rank sees that rank go (directly or through its hangup watch) rather
 * than the cascade of the survivors that noticed first.
 */
sc_status_t scd_tcp_fail(scd_tcp_t *t, sc_status_t status, const char *fmt, ...)
{
	char text[sizeof(t->failed_text)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	char self[24];
	int suspect = scd_tcp_name(t, t->suspect);
	snprintf(self, sizeof(self), "rank %d:", suspect);
	if (t->suspect >= 0 && (status == SC_ERR_PEER || status == SC_ERR_TIMEOUT) &&
	    strncmp(text, self, strlen(self)) != 0)
		snprintf(t->failed_text, sizeof(t->failed_text),
			 "rank %d: connection closed by peer; then %.180s", suspect, text);
	else
		memcpy(t->failed_text, text, sizeof(text));
	t->failed = status;
	scd_transport_set_error("%s", t->failed_text);
	scd_error(SCD_SUB_TRANSPORT, "rank %d: %s", scd_tcp_name(t, t->base.rank),
		  t->failed_text);
	if (t->parent)
		scd_tcp_view_failed(t);
	return status;
}

int scd_tcp_watch_others(scd_tcp_t *t, int n)
{
	for (int k = 0; k < n; k++)
		t->listed[t->pfd_peer[k]] = 1;
	int m = n;
	for (int p = 0; p < t->base.size; p++) {
		if (p == t->base.rank || t->listed[p] || t->gone[p])
			continue;
		t->pfds[m] = (struct pollfd){.fd = t->fds[p], .events = POLLRDHUP};
		t->pfd_peer[m++] = p;
	}
	for (int k = 0; k < n; k++)
		t->listed[t->pfd_peer[k]] = 0;
	return m;
}

int scd_tcp_note_hangups(scd_tcp_t *t, int from, int n)
{
	int any = 0;
	for (int k = from; k < n; k++) {
		if (!(t->pfds[k].revents & (POLLERR | POLLHUP | POLLRDHUP)))
			continue;
		int p = t->pfd_peer[k];
		t->gone[p] = 1;
		if (t->suspect < 0)
			t->suspect = p;
		if (t->parent)
			scd_tcp_view_gone(t, p);
		scd_debug(SCD_SUB_TRANSPORT, "rank %d: rank %d closed its connection",
			  scd_tcp_name(t, t->base.rank), scd_tcp_name(t, p));
		any = 1;
	}
	return any;
}

int scd_tcp_op_timeout(const scd_tcp_t *t, int timeout_ms)
{
	if (t->suspect < 0 || (timeout_ms >= 0 && timeout_ms < SCD_TCP_GRACE_MS))
		return timeout_ms;
	return SCD_TCP_GRACE_MS;
}

sc_status_t scd_tcp_fail_stalled(scd_tcp_t *t, int ms)
{
	return scd_tcp_fail(
	    t, SC_ERR_PEER,
	    "rank %d: connection closed by peer, and no progress for %d ms since",
	    scd_tcp_name(t, t->suspect), ms);
}

sc_status_t scd_tcp_failed_again(scd_tcp_t *t)
{
	scd_transport_set_error("%s (transport unusable since)", t->failed_text);
	return t->failed;
}

sc_status_t scd_tcp_fail_io(scd_tcp_t *t, int p, const char *what)
{
	int peer = scd_tcp_name(t, p);
	if (errno == EBADMSG)
		return scd_tcp_fail(t, SC_ERR_PEER,
				    "rank %d: data from rank %d failed its integrity check "
				    "(data_protection = %s: a record was altered, replayed, "
				    "reordered or dropped on the way)",
				    peer, peer, scd_seal_mode_name(t->protect));
	if (errno == EPROTO)
		return scd_tcp_fail(t, SC_ERR_PEER,
				    "rank %d: data from rank %d is not a record of the data "
				    "plane's record layer (its length is over %u bytes)",
				    peer, peer, SCD_SEAL_RECORD_BYTES);
	return scd_tcp_fail(t, SC_ERR_PEER, "rank %d: %s: %s", peer, what, strerror(errno));
}

sc_status_t scd_tcp_fail_hangup(scd_tcp_t *t, int p)
{
	int err = 0, peer = scd_tcp_name(t, p);
	socklen_t len = sizeof(err);
	if (getsockopt(t->fds[p], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err)
		return scd_tcp_fail(t, SC_ERR_PEER, "rank %d: %s", peer, strerror(err));
	return scd_tcp_fail(t, SC_ERR_PEER, "rank %d: connection closed by peer", peer);
}

/* ---- sockets ---------------------------------------------------------------------- */

/* Sets a socket buffer size. Above net.core.[rw]mem_max the kernel would silently clamp
 * it and switch off autotuning, so then try the privileged variant, and failing that
 * leave the kernel's autotuning alone. */
static void set_buffer(int fd, int opt, int force_opt, const char *max_path)
{
	int bytes = TCP_SOCKET_BUF_BYTES;
	if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) == 0)
		return;
	long max = 0;
	FILE *f = fopen(max_path, "r");
	if (f) {
		if (fscanf(f, "%ld", &max) != 1)
			max = 0;
		fclose(f);
	}
	if (max >= bytes)
		(void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

static void tune_socket(int fd, int receive_side)
{
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_buffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, "/proc/sys/net/core/wmem_max");
	/* The receive buffer must be set before listen/connect to get its window scale;
	 * accepted sockets inherit the listening socket's. */
	if (receive_side)
		set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, "/proc/sys/net/core/rmem_max");
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}
static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return le32toh(v);
}
static void put64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}
static uint64_t get64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

static void encode_hello(unsigned char *b, uint32_t code, const scd_tcp_t *t)
{
	put32(b, TCP_MAGIC);
	put32(b + 4, code);
	put64(b + 8, t->world_id);
	put32(b + 16, (uint32_t)t->base.rank);
	put32(b + 20, (uint32_t)t->base.size);
	put32(b + 24, (uint32_t)t->protect);
	put32(b + 28, scd_seal_aes_available() ? TCP_CIPHER_AES : 0);
}

/* The record layer of a connection that passed its handshake, its cipher agreed from both
 * hellos' cipher fields. Sets *seal_p (NULL with data_protection = none); 0 when out of
 * memory. */
static int open_seal(const scd_tcp_t *t, const scd_tcp_auth_conn_t *ac, uint32_t my_ciphers,
		     uint32_t peer_ciphers, scd_seal_t **seal_p)
{
	*seal_p = NULL;
	if (t->protect == SCD_SEAL_NONE)
		return 1;
	scd_seal_cipher_t cipher =
	    my_ciphers & peer_ciphers & TCP_CIPHER_AES ? SCD_SEAL_AES256GCM : SCD_SEAL_CHACHA20;
	uint8_t to_acceptor[SCD_SEAL_KEY_BYTES], to_connector[SCD_SEAL_KEY_BYTES];
	scd_seal_keys(t->auth_key, ac, t->protect, cipher, to_acceptor, to_connector);
	int connector = ac->connector_rank == t->base.rank;
	*seal_p = scd_seal_new(t->protect, cipher, connector ? to_acceptor : to_connector,
			       connector ? to_connector : to_acceptor);
	memset(to_acceptor, 0, sizeof(to_acceptor));
	memset(to_connector, 0, sizeof(to_connector));
	if (*seal_p)
		scd_debug(SCD_SUB_TRANSPORT, "rank %d: rank %d's connection sealed (%s, %s)",
			  t->base.rank, connector ? ac->acceptor_rank : ac->connector_rank,
			  scd_seal_mode_name(t->protect), scd_seal_cipher_name(cipher));
	return *seal_p != NULL;
}

/* Moves exactly len bytes on a nonblocking socket before deadline_ms. Returns SC_OK, or
 * SC_ERR_PEER (*err_p = 0: an orderly close by the peer), SC_ERR_TIMEOUT (*err_p =
 * ETIMEDOUT) or SC_ERR_SYSTEM (*err_p = errno). */
static sc_status_t io_full(int fd, void *buf, size_t len, int sending, int64_t deadline_ms,
			   int *err_p)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = sending ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
				    : recv(fd, (char *)buf + done, len - done, 0);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0) {
			*err_p = 0;
			return SC_ERR_PEER;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			*err_p = errno;
			return SC_ERR_SYSTEM;
		}
		int64_t left = deadline_ms - scd_tcp_now_ms();
		if (left <= 0) {
			*err_p = ETIMEDOUT;
			return SC_ERR_TIMEOUT;
		}
		struct pollfd p = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR) {
			*err_p = errno;
			return SC_ERR_SYSTEM;
		}
	}
	return SC_OK;
}

sc_status_t scd_tcp_listen(const char *bind_addr, uint16_t port, int *fd_p, uint16_t *port_p)
{
	char service[8];
	snprintf(service, sizeof(service), "%u", (unsigned)port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	const char *node = bind_addr && *bind_addr ? bind_addr : NULL;
	int rc = getaddrinfo(node, service, &hints, &res);
	if (rc != 0) {
		scd_transport_set_error("listen on %s:%u: %s", node ? node : "*",
					(unsigned)port, gai_strerror(rc));
		scd_error(SCD_SUB_TRANSPORT, "%s", scd_transport_error());
		return SC_ERR_INVALID;
	}
	int err = 0;
	const char *what = "socket";
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0) {
			err = errno, what = "socket";
			continue;
		}
		int one = 1;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		tune_socket(fd, 1);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			err = errno, what = "bind";
			close(fd);
			continue;
		}
		if (listen(fd, SOMAXCONN) < 0) {
			err = errno, what = "listen";
			close(fd);
			continue;
		}
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
			err = errno, what = "getsockname";
			close(fd);
			continue;
		}
		freeaddrinfo(res);
		*port_p =
		    ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
		*fd_p = fd;
		return SC_OK;
	}
	freeaddrinfo(res);
	scd_transport_set_error("listen on %s:%u: %s: %s", node ? node : "*", (unsigned)port,
				what, strerror(err));
	scd_error(SCD_SUB_TRANSPORT, "%s", scd_transport_error());
	return SC_ERR_SYSTEM;
}

/* ---- building the mesh ------------------------------------------------------------ */

typedef enum { CONN_OK, CONN_RETRY, CONN_FATAL } conn_try_t;

/* One attempt to connect to peer and pass the hello. CONN_RETRY for failures a later
 * attempt may not see (the peer not listening yet, or going away); the cause is in
 * why. */
static conn_try_t connect_once(scd_tcp_t *t, int peer, const struct addrinfo *ai,
			       const char *where, int64_t deadline_ms, int *fd_p, char *why,
			       size_t why_len, sc_status_t *status_p)
{
	int err = 0;
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	if (fd < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
		*status_p = SC_ERR_SYSTEM;
		return CONN_FATAL;
	}
	tune_socket(fd, 1);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS &&
	    errno != EINTR) {
		err = errno;
		goto err_close;
	}
	for (;;) {
		int64_t left = deadline_ms - scd_tcp_now_ms();
		if (left <= 0) {
			err = ETIMEDOUT;
			goto err_close;
		}
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int rc = poll(&p, 1, (int)left);
		if (rc < 0 && errno != EINTR) {
			err = errno;
			goto err_close;
		}
		if (rc > 0)
			break;
	}
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err)
		goto err_close;

	scd_tcp_auth_conn_t ac = {
	    .world_id = t->world_id, .connector_rank = t->base.rank, .acceptor_rank = peer};
	scd_tcp_auth_nonce(ac.connector_nonce);
	unsigned char b[TCP_ACK_BYTES];
	encode_hello(b, TCP_PROTOCOL, t);
	memcpy(b + TCP_HEAD_BYTES, ac.connector_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	if (io_full(fd, b, TCP_HELLO_BYTES, 1, deadline_ms, &err) != SC_OK ||
	    io_full(fd, b, TCP_ACK_BYTES, 0, deadline_ms, &err) != SC_OK) {
		if (err == 0)
			err = ECONNRESET;
		goto err_close;
	}
	uint32_t code = get32(b + 4);
	if (get32(b) != TCP_MAGIC) {
		snprintf(why, why_len, "%s answered with something other than a sparsecomm ack",
			 where);
		*status_p = SC_ERR_PROTOCOL;
		close(fd);
		return CONN_FATAL;
	}
	if (code == TCP_REFUSE_PROTECTION) {
		snprintf(why, why_len,
			 "%s (rank %d) refused the connection: data_protection differs (rank "
			 "%d: %s, this rank: %s)",
			 where, peer, peer, scd_seal_mode_name((int)get32(b + 24)),
			 scd_seal_mode_name(t->protect));
		*status_p = SC_ERR_PEER;
		close(fd);
		return CONN_FATAL;
	}
	if (code != TCP_ACK_OK) {
		snprintf(why, why_len, "%s refused the connection: %s", where,
			 refusal_text(code));
		*status_p = SC_ERR_PEER;
		close(fd);
		return CONN_FATAL;
	}
	if (get64(b + 8) != t->world_id || (int)get32(b + 16) != peer) {
		snprintf(why, why_len,
			 "%s is rank %d of world %016" PRIx64 ", not rank %d of %016" PRIx64,
			 where, (int)get32(b + 16), get64(b + 8), peer, t->world_id);
		*status_p = SC_ERR_PEER;
		close(fd);
		return CONN_FATAL;
	}
	uint32_t peer_ciphers = get32(b + 28);
	memcpy(ac.acceptor_nonce, b + TCP_HEAD_BYTES, SCD_TCP_AUTH_NONCE_BYTES);
	if (!scd_tcp_auth_check(t->auth_key, SCD_TCP_AUTH_ACCEPTOR, &ac, b + TCP_HELLO_BYTES)) {
		snprintf(why, why_len,
			 "%s (rank %d) did not prove that it holds the job secret: its secret "
			 "differs, or it is no daemon of this job",
			 where, peer);
		*status_p = SC_ERR_PEER;
		close(fd);
		return CONN_FATAL;
	}
	scd_tcp_auth_mac(t->auth_key, SCD_TCP_AUTH_CONNECTOR, &ac, b);
	if (io_full(fd, b, SCD_TCP_AUTH_MAC_BYTES, 1, deadline_ms, &err) != SC_OK ||
	    io_full(fd, b, TCP_VERDICT_BYTES, 0, deadline_ms, &err) != SC_OK) {
		if (err == 0)
			err = ECONNRESET;
		goto err_close;
	}
	if (get32(b) != TCP_ACK_OK) {
		snprintf(why, why_len, "%s (rank %d) refused this rank: %s", where, peer,
			 refusal_text(get32(b)));
		*status_p = SC_ERR_PEER;
		close(fd);
		return CONN_FATAL;
	}
	if (!open_seal(t, &ac, scd_seal_aes_available() ? TCP_CIPHER_AES : 0, peer_ciphers,
		       &t->seal[peer])) {
		snprintf(why, why_len, "%s (rank %d): out of memory for the record layer",
			 where, peer);
		*status_p = SC_ERR_NOMEM;
		close(fd);
		return CONN_FATAL;
	}
	tune_socket(fd, 0);
	*fd_p = fd;
	return CONN_OK;

err_close:
	close(fd);
	snprintf(why, why_len, "%s: %s", where, strerror(err));
	return CONN_RETRY;
}

/* Connects to a lower rank, retrying until deadline_ms. */
static sc_status_t connect_peer(scd_tcp_t *t, int peer, const char *addr, uint16_t port,
				int64_t deadline_ms)
{
	char service[8], where[128], why[384] = "";
	snprintf(service, sizeof(service), "%u", (unsigned)port);
	snprintf(where, sizeof(where), "%s:%u", addr, (unsigned)port);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(addr, service, &hints, &res);
	if (rc != 0) {
		scd_transport_set_error("rank %d: cannot resolve %s: %s", peer, where,
					gai_strerror(rc));
		return SC_ERR_INVALID;
	}
	int64_t start_ms = scd_tcp_now_ms();
	int pause_ms = 10, attempts = 0;
	sc_status_t status = SC_ERR_TIMEOUT;
	for (;;) {
		attempts++;
		conn_try_t r = connect_once(t, peer, res, where, deadline_ms, &t->fds[peer],
					    why, sizeof(why), &status);
		if (r == CONN_OK) {
			freeaddrinfo(res);
			scd_debug(SCD_SUB_TRANSPORT, "rank %d: connected to rank %d at %s",
				  t->base.rank, peer, where);
			return SC_OK;
		}
		if (r == CONN_FATAL)
			break;
		int64_t left = deadline_ms - scd_tcp_now_ms();
		if (left <= 0) {
			status = SC_ERR_TIMEOUT;
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
				 " (%d attempts in %d ms)", attempts,
				 (int)(scd_tcp_now_ms() - start_ms));
			break;
		}
		/* Not yet there: wait a little longer each time, without spinning. */
		(void)poll(NULL, 0, (int)(left < pause_ms ? left : pause_ms));
		pause_ms = pause_ms * 2 > 500 ? 500 : pause_ms * 2;
	}
	freeaddrinfo(res);
	scd_transport_set_error("rank %d: %s", peer, why);
	return status;
}

/* An accepted connection until it has passed its hello and its proof of the secret. */
typedef struct {
	int fd;
	int proving; /* the hello was acked: reading the connector's proof */
	size_t got;
	int64_t since_ms; /* accepted at */
	uint32_t ciphers; /* of its hello */
	scd_tcp_auth_conn_t auth;
	unsigned char b[TCP_HELLO_BYTES];
} pending_t;

/* The numeric address and port of fd's peer, for logs. */
static const char *peer_name(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[64], serv[8];
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		snprintf(buf, len, "an unknown address");
	else
		snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
	return buf;
}

/* The connector's proof has arrived: takes the connection as its rank, or closes it. */
static int check_proof(scd_tcp_t *t, pending_t *pc, int *accepted_p)
{
	int rank = pc->auth.connector_rank;
	int ok = scd_tcp_auth_check(t->auth_key, SCD_TCP_AUTH_CONNECTOR, &pc->auth, pc->b);
	scd_seal_t *seal = NULL;
	if (ok && !open_seal(t, &pc->auth, scd_seal_aes_available() ? TCP_CIPHER_AES : 0,
			     pc->ciphers, &seal)) {
		char from[96];
		scd_warn(SCD_SUB_TRANSPORT,
			 "rank %d: closed the connection of rank %d from %s: out of memory for "
			 "the record layer",
			 t->base.rank, rank, peer_name(pc->fd, from, sizeof(from)));
		close(pc->fd);
		return 1;
	}
	unsigned char verdict[TCP_VERDICT_BYTES];
	put32(verdict, ok ? TCP_ACK_OK : TCP_REFUSE_AUTH);
	ssize_t w = send(pc->fd, verdict, sizeof(verdict), MSG_NOSIGNAL);
	char from[96];
	if (!ok) {
		scd_warn_limited(
		    SCD_SUB_TRANSPORT,
		    "rank %d: closed a data-port connection from %s claiming rank %d: its "
		    "proof of the job secret is wrong (the peer does not hold this job's "
		    "secret)",
		    t->base.rank, peer_name(pc->fd, from, sizeof(from)), rank);
		close(pc->fd);
		return 1;
	}
	if (w != (ssize_t)sizeof(verdict)) {
		scd_warn_limited(SCD_SUB_TRANSPORT, "rank %d: cannot answer rank %d at %s: %s",
				 t->base.rank, rank, peer_name(pc->fd, from, sizeof(from)),
				 w < 0 ? strerror(errno) : "short write");
		scd_seal_free(seal);
		close(pc->fd);
		return 1;
	}
	if (t->fds[rank] >= 0) { /* another connection of that rank passed first */
		scd_warn_limited(SCD_SUB_TRANSPORT,
				 "rank %d: closed a second connection of rank %d from %s",
				 t->base.rank, rank, peer_name(pc->fd, from, sizeof(from)));
		scd_seal_free(seal);
		close(pc->fd);
		return 1;
	}
	tune_socket(pc->fd, 0);
	t->fds[rank] = pc->fd;
	t->seal[rank] = seal;
	(*accepted_p)++;
	scd_debug(SCD_SUB_TRANSPORT, "rank %d: accepted rank %d", t->base.rank, rank);
	return 1;
}

/* Reads the hello, then the proof, on a pending connection: acks or refuses the hello,
 * and takes the connection as a higher rank once its proof is right. Returns 1 when the
 * slot is done with (accepted or closed). */
static int serve_pending(scd_tcp_t *t, pending_t *pc, int *accepted_p)
{
	size_t need = pc->proving ? SCD_TCP_AUTH_MAC_BYTES : TCP_HELLO_BYTES;
	ssize_t n = recv(pc->fd, pc->b + pc->got, need - pc->got, 0);
	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0) {
		char from[96];
		scd_debug(SCD_SUB_TRANSPORT, "a connection from %s closed before its %s",
			  peer_name(pc->fd, from, sizeof(from)),
			  pc->proving ? "proof of the job secret" : "hello");
		close(pc->fd);
		return 1;
	}
	pc->got += (size_t)n;
	/* another protocol's hello may be shorter: its first 8 bytes decide */
	int foreign = !pc->proving && pc->got >= 8 &&
		      (get32(pc->b) != TCP_MAGIC || get32(pc->b + 4) != TCP_PROTOCOL);
	if (pc->got < need && !foreign)
		return 0;
	if (pc->proving)
		return check_proof(t, pc, accepted_p);
	if (pc->got < need)
		memset(pc->b + pc->got, 0, need - pc->got);
	int rank = (int)get32(pc->b + 16), size = (int)get32(pc->b + 20);
	uint64_t world = get64(pc->b + 8);
	uint32_t code = TCP_ACK_OK;
	if (get32(pc->b) != TCP_MAGIC || get32(pc->b + 4) != TCP_PROTOCOL)
		code = TCP_REFUSE_PROTOCOL;
	else if (world != t->world_id)
		code = TCP_REFUSE_WORLD;
	else if (size != t->base.size)
		code = TCP_REFUSE_SIZE;
	else if (rank <= t->base.rank || rank >= t->base.size)
		code = TCP_REFUSE_RANK;
	else if (t->fds[rank] >= 0)
		code = TCP_REFUSE_DUPLICATE;
	else if (get32(pc->b + 24) != (uint32_t)t->protect)
		code = TCP_REFUSE_PROTECTION;
	unsigned char ack[TCP_ACK_BYTES] = {0};
	encode_hello(ack, code, t);
	char from[96];
	if (code == TCP_REFUSE_PROTECTION) {
		(void)send(pc->fd, ack, sizeof(ack), MSG_NOSIGNAL);
		scd_warn_limited(
		    SCD_SUB_TRANSPORT,
		    "rank %d: refused rank %d at %s: data_protection differs (rank %d: %s, "
		    "this rank: %s)",
		    t->base.rank, rank, peer_name(pc->fd, from, sizeof(from)), rank,
		    scd_seal_mode_name((int)get32(pc->b + 24)), scd_seal_mode_name(t->protect));
		close(pc->fd);
		return 1;
	}
	if (code != TCP_ACK_OK) {
		(void)send(pc->fd, ack, sizeof(ack), MSG_NOSIGNAL);
		scd_warn_limited(
		    SCD_SUB_TRANSPORT,
		    "rank %d: refused a connection from %s claiming rank %d of world "
		    "%016" PRIx64 " (size %d): %s",
		    t->base.rank, peer_name(pc->fd, from, sizeof(from)), rank, world, size,
		    refusal_text(code));
		close(pc->fd);
		return 1;
	}
	pc->ciphers = get32(pc->b + 28);
	pc->auth = (scd_tcp_auth_conn_t){
	    .world_id = t->world_id, .connector_rank = rank, .acceptor_rank = t->base.rank};
	memcpy(pc->auth.connector_nonce, pc->b + TCP_HEAD_BYTES, SCD_TCP_AUTH_NONCE_BYTES);
	scd_tcp_auth_nonce(pc->auth.acceptor_nonce);
	memcpy(ack + TCP_HEAD_BYTES, pc->auth.acceptor_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	scd_tcp_auth_mac(t->auth_key, SCD_TCP_AUTH_ACCEPTOR, &pc->auth, ack + TCP_HELLO_BYTES);
	/* A fresh socket's send buffer takes the ack at once. */
	ssize_t w = send(pc->fd, ack, sizeof(ack), MSG_NOSIGNAL);
	if (w != (ssize_t)sizeof(ack)) {
		scd_warn_limited(SCD_SUB_TRANSPORT, "rank %d: cannot answer rank %d at %s: %s",
				 t->base.rank, rank, peer_name(pc->fd, from, sizeof(from)),
				 w < 0 ? strerror(errno) : "short write");
		close(pc->fd);
		return 1;
	}
	pc->proving = 1;
	pc->got = 0;
	return 0;
}

static void missing_ranks(const scd_tcp_t *t, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = 0;
	for (int p = t->base.rank + 1; p < t->base.size && off + 16 < len; p++)
		if (t->fds[p] < 0)
			off +=
			    (size_t)snprintf(buf + off, len - off, "%s%d", off ? ", " : "", p);
}

/* Closes pending connections that owe their hello past TCP_HELLO_TIMEOUT_MS and, with
 * make_room, the oldest one when every slot is taken. Returns the milliseconds until the
 * next one expires (-1: none pending). */
static int64_t expire_pending(const scd_tcp_t *t, pending_t *pend, int *n_pend_p, int make_room)
{
	int64_t now = scd_tcp_now_ms(), next = -1;
	for (int i = *n_pend_p - 1; i >= 0; i--) {
		if (now - pend[i].since_ms < TCP_HELLO_TIMEOUT_MS)
			continue;
		char from[96];
		scd_warn_limited(
		    SCD_SUB_TRANSPORT,
		    "rank %d: closed a data-port connection from %s that sent %zu of the "
		    "%d bytes of its %s in %d ms",
		    t->base.rank, peer_name(pend[i].fd, from, sizeof(from)), pend[i].got,
		    pend[i].proving ? SCD_TCP_AUTH_MAC_BYTES : TCP_HELLO_BYTES,
		    pend[i].proving ? "proof of the job secret" : "hello",
		    TCP_HELLO_TIMEOUT_MS);
		close(pend[i].fd);
		pend[i] = pend[--*n_pend_p];
	}
	if (make_room && *n_pend_p == TCP_MAX_PENDING) {
		int old = 0;
		for (int i = 1; i < *n_pend_p; i++)
			if (pend[i].since_ms < pend[old].since_ms)
				old = i;
		scd_warn_limited(
		    SCD_SUB_TRANSPORT,
		    "rank %d: %d data-port connections owe a hello: closed the oldest "
		    "(%lld ms) for a new one",
		    t->base.rank, TCP_MAX_PENDING, (long long)(now - pend[old].since_ms));
		close(pend[old].fd);
		pend[old] = pend[--*n_pend_p];
	}
	for (int i = 0; i < *n_pend_p; i++) {
		int64_t left = pend[i].since_ms + TCP_HELLO_TIMEOUT_MS - now;
		if (next < 0 || left < next)
			next = left;
	}
	return next;
}

/* Accepts every higher rank on listen_fd before deadline_ms. */
static sc_status_t accept_peers(scd_tcp_t *t, int listen_fd, int64_t deadline_ms)
{
	pending_t pend[TCP_MAX_PENDING];
	struct pollfd pfd[TCP_MAX_PENDING + 1];
	int n_pend = 0, accepted = 0, need = t->base.size - 1 - t->base.rank;
	sc_status_t status = SC_OK;
	while (accepted < need) {
		int np = 0;
		int64_t expiry = expire_pending(t, pend, &n_pend, 0);
		/* the listening socket is always watched: a full table makes room (below) */
		pfd[np++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
		for (int i = 0; i < n_pend; i++)
			pfd[np++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
		int64_t left = deadline_ms - scd_tcp_now_ms();
		if (left <= 0) {
			char miss[256];
			missing_ranks(t, miss, sizeof(miss));
			scd_transport_set_error("rank %s: did not connect within the timeout "
						"(waiting on rank %d's data port)",
						miss, t->base.rank);
			status = SC_ERR_TIMEOUT;
			break;
		}
		int rc =
		    poll(pfd, (nfds_t)np, (int)(expiry >= 0 && expiry < left ? expiry : left));
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			scd_transport_set_error("poll: %s", strerror(errno));
			status = SC_ERR_SYSTEM;
			break;
		}
		/* Serve the pending hellos first: their slots may make room for accepts. */
		for (int i = n_pend - 1; i >= 0; i--) {
			if (!pfd[1 + i].revents)
				continue;
			if (serve_pending(t, &pend[i], &accepted))
				pend[i] = pend[--n_pend];
		}
		if (!pfd[0].revents || accepted >= need)
			continue;
		/* the free slots, or one in place of the oldest when none is free: the hellos
		 * of those just accepted are served before any of them can be closed for room
		 */
		int room = n_pend < TCP_MAX_PENDING ? TCP_MAX_PENDING - n_pend : 1;
		for (int k = 0; k < room; k++) {
			int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0) {
				if (errno == EINTR || errno == ECONNABORTED)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					break;
				scd_transport_set_error("accept: %s", strerror(errno));
				status = SC_ERR_SYSTEM;
				goto out;
			}
			if (n_pend == TCP_MAX_PENDING)
				expire_pending(t, pend, &n_pend, 1);
			pend[n_pend++] = (pending_t){.fd = fd, .since_ms = scd_tcp_now_ms()};
		}
	}
out:
	for (int i = 0; i < n_pend; i++)
		close(pend[i].fd);
	return status;
}

/* Shuts the connection down without closing it (the descriptor stays the transport's
 * until destroy): a poll(2) waiting on it in the engine's thread wakes with a hangup. */
static void tcp_peer_gone(scd_transport_t *tr, int rank)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	if (rank >= 0 && rank < t->base.size && rank != t->base.rank && t->fds[rank] >= 0)
		shutdown(t->fds[rank], SHUT_RDWR);
}

static int tcp_broken(const scd_transport_t *tr)
{
	return ((const scd_tcp_t *)tr)->failed != SC_OK;
}

static void tcp_destroy(scd_transport_t *tr)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	if (!t)
		return;
	/* a view's connections and records are its parent's */
	for (int p = 0; !t->parent && t->fds && p < t->base.size; p++)
		if (t->fds[p] >= 0)
			close(t->fds[p]);
	for (int p = 0; !t->parent && t->seal && p < t->base.size; p++)
		scd_seal_free(t->seal[p]);
	free(t->seal);
	free(t->names);
	if (t->scratch)
		munmap(t->scratch, t->scratch_bytes);
	free(t->fds);
	free(t->wire16);
	free(t->pfds);
	free(t->pfd_peer);
	free(t->io);
	free(t->gone);
	free(t->listed);
	memset(t->auth_key, 0, sizeof(t->auth_key));
	free(t);
}

sc_status_t scd_tcp_create(int listen_fd, int rank, int size, const char *const *addrs,
			   const uint16_t *ports, uint64_t world_id, const uint8_t *auth_key,
			   int protect, size_t scratch_bytes, int timeout_ms,
			   scd_transport_t **t_p)
{
	int64_t deadline_ms = scd_tcp_now_ms() + (timeout_ms < 0 ? INT32_MAX : timeout_ms);
	sc_status_t status = SC_ERR_NOMEM;
	if (size < 1 || rank < 0 || rank >= size || (rank > 0 && (!addrs || !ports))) {
		scd_transport_set_error("tcp: invalid rank %d of size %d", rank, size);
		status = SC_ERR_INVALID;
		goto err_listen;
	}
	if (protect < SCD_SEAL_NONE || protect > SCD_SEAL_ENCRYPT) {
		scd_transport_set_error("tcp: unknown data_protection %d", protect);
		status = SC_ERR_INVALID;
		goto err_listen;
	}
	if (protect != SCD_SEAL_NONE &&
	    (!auth_key || sodium_is_zero(auth_key, SCD_TCP_AUTH_KEY_BYTES))) {
		scd_transport_set_error("tcp: data_protection = %s needs the job secret (its "
					"keys derive from it): set secret_file",
					scd_seal_mode_name(protect));
		status = SC_ERR_INVALID;
		goto err_listen;
	}
	scd_transport_set_error("tcp: out of memory");
	scd_tcp_t *t = calloc(1, sizeof(*t));
	if (!t)
		goto err_listen;
	t->base = (scd_transport_t){.ops = &scd_transport_tcp_ops, .rank = rank, .size = size};
	t->world_id = world_id;
	t->protect = (scd_seal_mode_t)protect;
	if (auth_key)
		memcpy(t->auth_key, auth_key, sizeof(t->auth_key));
	t->fds = malloc(sizeof(int) * (size_t)size);
	for (int p = 0; t->fds && p < size; p++)
		t->fds[p] = -1;
	t->pfds = calloc((size_t)size, sizeof(*t->pfds));
	t->pfd_peer = calloc((size_t)size, sizeof(int));
	t->io = calloc((size_t)size, sizeof(*t->io));
	t->gone = calloc((size_t)size, 1);
	t->listed = calloc((size_t)size, 1);
	t->seal = calloc((size_t)size, sizeof(*t->seal));
	t->suspect = -1;
	if (!t->fds || !t->pfds || !t->pfd_peer || !t->io || !t->gone || !t->listed || !t->seal)
		goto err_free;

	/* The scratch of the ring (and of the probe), faulted in now, not on first use. */
	if (scratch_bytes == 0)
		scratch_bytes = SCD_TCP_SCRATCH_DEFAULT_BYTES;
	if (scratch_bytes < SCD_TCP_SCRATCH_MIN_BYTES)
		scratch_bytes = SCD_TCP_SCRATCH_MIN_BYTES;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	scratch_bytes = (scratch_bytes + page - 1) / page * page;
	void *m = mmap(NULL, scratch_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED) {
		scd_transport_set_error("tcp: cannot map %zu bytes of scratch: %s",
					scratch_bytes, strerror(errno));
		goto err_free;
	}
	t->scratch = m;
	t->scratch_bytes = scratch_bytes;
	(void)madvise(m, scratch_bytes, MADV_HUGEPAGE);

	/* Lower ranks in order, then the higher ones in any order: rank j reaches its accept
	 * phase once ranks below it have accepted it, so the world cannot deadlock. */
	for (int p = 0; p < rank; p++) {
		status = connect_peer(t, p, addrs[p], ports[p], deadline_ms);
		if (status != SC_OK)
			goto err_free;
	}
	status = accept_peers(t, listen_fd, deadline_ms);
	if (status != SC_OK)
		goto err_free;
	if (listen_fd >= 0)
		close(listen_fd);
	scd_info(SCD_SUB_TRANSPORT,
		 "rank %d: tcp mesh of %d ranks ready (scratch %zu KiB, data_protection %s)",
		 rank, size, scratch_bytes >> 10, scd_seal_mode_name(protect));
	*t_p = &t->base;
	return SC_OK;

err_free:
	tcp_destroy(&t->base);
err_listen:
	if (listen_fd >= 0)
		close(listen_fd);
	scd_error(SCD_SUB_TRANSPORT, "rank %d: tcp mesh: %s", rank, scd_transport_error());
	return status;
}

static void tcp_counters(const scd_transport_t *tr, scd_transport_counters_t *c_p)
{
	*c_p = ((const scd_tcp_t *)tr)->ctr;
}

/* ---- the backend's world formation ----------------------------------------------------- */

/* The endpoint: the listening socket, open from prepare until create takes it over. The
 * blob is the port (16 bits, little-endian) followed by the address's bytes (no NUL). */
typedef struct tcp_endpoint {
	scd_transport_endpoint_t base;
	int fd;
} tcp_endpoint_t;

#define TCP_ADDR_MAX 64 /* bytes of an address in a blob, NUL included */

static sc_status_t tcp_describe(const void *blob, size_t len, char *addr, size_t addr_len,
				uint16_t *port_p)
{
	const unsigned char *b = blob;
	if (len < 2 || len - 2 >= TCP_ADDR_MAX || (len > 2 && memchr(b + 2, 0, len - 2)))
		return SC_ERR_PROTOCOL;
	if (addr_len)
		snprintf(addr, addr_len, "%.*s", (int)(len - 2), (const char *)b + 2);
	*port_p = (uint16_t)(b[0] | b[1] << 8);
	return SC_OK;
}

static sc_status_t tcp_prepare(const scd_transport_cfg_t *cfg, scd_transport_endpoint_t **ep_p)
{
	const char *addr = cfg->addr ? cfg->addr : "";
	const char *shown = cfg->advertise ? cfg->advertise : addr;
	size_t alen = strlen(shown);
	if (alen >= TCP_ADDR_MAX) {
		scd_transport_set_error("tcp: address '%s' is longer than %d bytes", shown,
					TCP_ADDR_MAX - 1);
		scd_error(SCD_SUB_TRANSPORT, "%s", scd_transport_error());
		return SC_ERR_INVALID;
	}
	tcp_endpoint_t *ep = calloc(1, sizeof(*ep));
	if (!ep) {
		scd_transport_set_error("tcp: out of memory");
		scd_error(SCD_SUB_TRANSPORT, "%s", scd_transport_error());
		return SC_ERR_NOMEM;
	}
	uint16_t port = 0;
	sc_status_t st = scd_tcp_listen(addr, cfg->port, &ep->fd, &port); /* logs a failure */
	if (st != SC_OK) {
		free(ep);
		return st;
	}
	ep->base.ops = &scd_transport_tcp_ops;
	ep->base.blob[0] = (unsigned char)(port & 0xff);
	ep->base.blob[1] = (unsigned char)(port >> 8);
	memcpy(ep->base.blob + 2, shown, alen);
	ep->base.blob_len = 2 + alen;
	*ep_p = &ep->base;
	return SC_OK;
}

static void tcp_release(scd_transport_endpoint_t *base)
{
	tcp_endpoint_t *ep = (tcp_endpoint_t *)base;
	if (ep->fd >= 0)
		close(ep->fd);
	free(ep);
}

static sc_status_t tcp_create_from(scd_transport_boot_t *b, size_t scratch_bytes,
				   int timeout_ms, scd_transport_t **t_p)
{
	tcp_endpoint_t *ep = (tcp_endpoint_t *)b->ep;
	int fd = ep->fd;
	ep->fd = -1;
	tcp_release(&ep->base);
	b->ep = NULL;
	/* Only the lower ranks' blobs are needed: the higher ranks connect to this one. */
	int n = b->rank > 0 ? b->rank : 1;
	char(*addrs)[TCP_ADDR_MAX] = calloc((size_t)n, TCP_ADDR_MAX);
	const char **addr_p = calloc((size_t)n, sizeof(*addr_p));
	uint16_t *ports = calloc((size_t)n, sizeof(*ports));
	sc_status_t st = SC_OK;
	if (!addrs || !addr_p || !ports) {
		scd_transport_set_error("tcp: out of memory");
		st = SC_ERR_NOMEM;
	}
	for (int r = 0; st == SC_OK && r < b->rank; r++) {
		if (tcp_describe(b->blobs[r].data, b->blobs[r].len, addrs[r], TCP_ADDR_MAX,
				 &ports[r]) != SC_OK) {
			scd_transport_set_error(
			    "rank %d: malformed tcp bootstrap blob (%zu bytes)", r,
			    b->blobs[r].len);
			st = SC_ERR_PROTOCOL;
		}
		addr_p[r] = addrs[r];
	}
	if (st == SC_OK) /* takes fd over, and logs a failure */
		st = scd_tcp_create(fd, b->rank, b->size, addr_p, ports, b->world_id,
				    b->auth_key, b->protect, scratch_bytes, timeout_ms, t_p);
	else {
		close(fd);
		scd_error(SCD_SUB_TRANSPORT, "rank %d: tcp mesh: %s", b->rank,
			  scd_transport_error());
	}
	free(addrs);
	free(addr_p);
	free(ports);
	return st;
}

const scd_transport_ops_t scd_transport_tcp_ops = {
    .name = "tcp",
    .prepare = tcp_prepare,
    .create = tcp_create_from,
    .release = tcp_release,
    .describe = tcp_describe,
    .exchange = scd_tcp_exchange,
    .exchange_v = scd_tcp_exchange_v,
    .allreduce_f32 = scd_tcp_allreduce_f32,
    .allreduce = scd_tcp_allreduce,
    .allreduce_wire16 = scd_tcp_allreduce_wire16,
    .measure = scd_tcp_measure,
    .subgroup = scd_tcp_subgroup,
    .counters = tcp_counters,
    .destroy = tcp_destroy,
    .peer_gone = tcp_peer_gone,
    .broken = tcp_broken,
};
