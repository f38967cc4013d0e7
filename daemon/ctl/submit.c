/* submit.c: see submit.h. */
#include "ctl/submit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"

/* A connection accepted that has not sent its token yet. */
typedef struct scd_submit_conn {
	int fd;
	uv_poll_t poll;
	uint64_t since_ms;
	scd_ctl_t *ctl;
	struct scd_submit_conn *next;
} scd_submit_conn_t;

static void conn_free_cb(uv_handle_t *h)
{
	free(h->data);
}

/* Unlinks c from the waiting list and closes it. */
static void conn_close(scd_ctl_t *ctl, scd_submit_conn_t *c)
{
	for (scd_submit_conn_t **pp = &ctl->submit_pending; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	ctl->submit_n_pending--;
	uv_poll_stop(&c->poll);
	close(c->fd);
	uv_close((uv_handle_t *)&c->poll, conn_free_cb);
}

/* The connection's SO_PEERCRED; -1 (pid 0, uid -1) where the kernel gives none. */
static int conn_cred(int fd, struct ucred *uc)
{
	socklen_t len = sizeof(*uc);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, uc, &len) == 0 && len == sizeof(*uc))
		return 0;
	uc->pid = 0, uc->uid = UINT32_MAX;
	return -1;
}

/* Whether a and b's n bytes are equal, in a time that does not depend on where they
 * differ. */
static int same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)(a[i] ^ b[i]);
	return diff == 0;
}

/* The session of pid and uid offered a channel and not bound yet (NULL: none). */
static scd_session_t *session_waiting(scd_ctl_t *ctl, const struct ucred *uc)
{
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		if (s->submit_offered && s->submit_fd < 0 && !s->closed && !s->dropped &&
		    s->pid == (int)uc->pid && s->uid == uc->uid)
			return s;
	return NULL;
}

static void on_submit_readable(uv_poll_t *h, int status, int events)
{
	(void)status, (void)events;
	scd_submit_read(h->data, SCD_SUBMIT_READ_BUDGET);
}

/* Binds c's connection to s: the session gets a duplicate of it (c's own closes with c),
 * and the binding is acknowledged once the loop polls it. A handle initialised belongs to
 * the session from then on (it closes with it), so a failure after that drops it. */
static void conn_bind(scd_ctl_t *ctl, scd_submit_conn_t *c, scd_session_t *s)
{
	int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0) {
		scd_warn(SCD_SUB_CTL, "submit channel of pid %d: cannot bind it: %s", s->pid,
			 strerror(errno));
		return;
	}
	int rc = uv_poll_init(ctl->d->loop, &s->submit_poll, fd);
	if (rc != 0) {
		scd_warn(SCD_SUB_CTL, "submit channel of pid %d: cannot poll it: %s", s->pid,
			 uv_strerror(rc));
		close(fd);
		return;
	}
	s->submit_fd = fd;
	s->submit_poll.data = s;
	rc = uv_poll_start(&s->submit_poll, UV_READABLE | UV_DISCONNECT, on_submit_readable);
	uint8_t ack = 1;
	if (rc != 0 || send(fd, &ack, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
		char why[128];
		snprintf(why, sizeof(why), "its submit channel could not be bound: %s",
			 rc != 0 ? uv_strerror(rc) : strerror(errno));
		scd_ctl_session_refuse(ctl, s, SC_ERR_SYSTEM, why);
		return;
	}
	scd_debug(SCD_SUB_CTL, "submit channel of pid %d bound", s->pid);
}

/* The first message of a connection: its token. */
static void on_token(uv_poll_t *h, int status, int events)
{
	(void)status, (void)events;
	scd_submit_conn_t *c = h->data;
	scd_ctl_t *ctl = c->ctl;
	uint8_t tok[SCD_SUBMIT_TOKEN_BYTES + 1];
	ssize_t n = recv(c->fd, tok, sizeof(tok), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	int err = errno;
	struct ucred uc;
	int cred = conn_cred(c->fd, &uc);
	scd_session_t *s = NULL;
	if (n == SCD_SUBMIT_TOKEN_BYTES)
		for (s = ctl->sessions; s; s = s->next)
			if (s->submit_offered && s->submit_fd < 0 && !s->closed &&
			    !s->dropped &&
			    same_bytes(s->submit_token, tok, sizeof(s->submit_token)))
				break;
	if (!s)
		scd_warn_limited(SCD_SUB_CTL, "submit channel from pid %d (uid %u) refused: %s",
				 (int)uc.pid, (unsigned)uc.uid,
				 n == 0	 ? "it closed before sending a token"
				 : n < 0 ? strerror(err)
					 : "its token is no session's");
	else if (cred != 0 || (int)uc.pid != s->pid || uc.uid != s->uid)
		scd_warn_limited(
		    SCD_SUB_CTL,
		    "submit channel from pid %d (uid %u) refused: its token is the session "
		    "of pid %d (uid %u)",
		    (int)uc.pid, (unsigned)uc.uid, s->pid, (unsigned)s->uid);
	else
		conn_bind(ctl, c, s);
	conn_close(ctl, c);
}

/* A connection accepted: it waits for its token if a session of its process was offered
 * a channel and has not bound it, else it is closed at once, not counted. */
static void conn_accept(scd_ctl_t *ctl, int fd)
{
	struct ucred uc;
	scd_submit_conn_t *c = NULL;
	if (conn_cred(fd, &uc) != 0) {
		scd_warn_limited(
		    SCD_SUB_CTL,
		    "submit channel refused: its peer's credentials are unknown: %s",
		    strerror(errno));
		close(fd);
		return;
	}
	if (!session_waiting(ctl, &uc)) {
		scd_warn_limited(
		    SCD_SUB_CTL,
		    "submit channel from pid %d (uid %u) refused: no session of that "
		    "pid and uid waits for its channel",
		    (int)uc.pid, (unsigned)uc.uid);
		close(fd);
		return;
	}
	if (ctl->submit_n_pending >= SCD_SUBMIT_MAX_PENDING || !(c = calloc(1, sizeof(*c)))) {
		scd_warn_limited(SCD_SUB_CTL,
				 "submit channel from pid %d (uid %u) refused: %d connections "
				 "already wait to send their token",
				 (int)uc.pid, (unsigned)uc.uid, ctl->submit_n_pending);
		close(fd);
		return;
	}
	int rc = uv_poll_init(ctl->d->loop, &c->poll, fd);
	if (rc != 0) {
		scd_warn_limited(SCD_SUB_CTL, "submit channel from pid %d refused: %s",
				 (int)uc.pid, uv_strerror(rc));
		close(fd);
		free(c);
		return;
	}
	c->fd = fd;
	c->ctl = ctl;
	c->since_ms = scd_now_ms();
	c->next = ctl->submit_pending;
	ctl->submit_pending = c;
	ctl->submit_n_pending++;
	c->poll.data = c;
	rc = uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_token);
	if (rc != 0) {
		scd_warn_limited(SCD_SUB_CTL, "submit channel from pid %d refused: %s",
				 (int)uc.pid, uv_strerror(rc));
		conn_close(ctl, c);
	}
}

/* At most SCD_SUBMIT_ACCEPT_BUDGET connections a turn; out of descriptors, the listener
 * rests until the next tick (its poll is level-triggered: it would fire again at once). */
static void on_accept(uv_poll_t *h, int status, int events)
{
	(void)status, (void)events;
	scd_ctl_t *ctl = h->data;
	for (int i = 0; i < SCD_SUBMIT_ACCEPT_BUDGET; i++) {
		int fd = accept4(ctl->submit_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int err = errno;
		if (fd >= 0 || err == EAGAIN) { /* descriptors again: said once */
			if (ctl->submit_starved)
				scd_info(SCD_SUB_CTL,
					 "submit channel: accepting connections again");
			ctl->submit_starved = 0;
		}
		if (fd >= 0) {
			conn_accept(ctl, fd);
			continue;
		}
		if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
			if (!ctl->submit_starved) /* once while it lasts */
				scd_warn_limited(
				    SCD_SUB_CTL,
				    "submit channel: out of descriptors (%s): no "
				    "connection accepted until there are some again",
				    strerror(err));
			ctl->submit_starved = 1;
			uv_poll_stop(&ctl->submit_poll);
			ctl->submit_resting = 1; /* polled again at the next tick */
		}
		return; /* EAGAIN, or a connection gone meanwhile */
	}
}

/* After a read of 0 bytes: whether the channel hung up (or was shut down for reading),
 * rather than carried a message of zero bytes. */
static int hung_up(int fd)
{
	struct pollfd p = {fd, POLLRDHUP, 0};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

void scd_submit_read(scd_session_t *s, int budget)
{
	scd_ctl_t *ctl = s->ctl;
	for (int i = 0; i < budget && s->submit_fd >= 0 && !s->closed && !s->dropped; i++) {
		ssize_t n = recv(s->submit_fd, ctl->submit_buf, SCD_CTL_MSG_MAX_BYTES,
				 MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n == 0 && !hung_up(s->submit_fd)) {
			scd_ctl_session_refuse(
			    ctl, s, SC_ERR_PROTOCOL,
			    "it sent a message of zero bytes over its submit "
			    "channel");
			return;
		}
		if (n <= 0) { /* the trainer closed it: as a hang-up of its connection */
			uv_poll_stop(&s->submit_poll);
			if (!s->exited_ms)
				s->exited_ms = scd_now_ms(),
				s->gone = "closed its submit channel";
			return;
		}
		if (n > SCD_CTL_MSG_MAX_BYTES) {
			char why[160];
			snprintf(
			    why, sizeof(why),
			    "it sent a message of %zd bytes over its submit channel (at most "
			    "%lld)",
			    n, SCD_CTL_MSG_MAX_BYTES);
			scd_ctl_session_refuse(ctl, s, SC_ERR_PROTOCOL, why);
			return;
		}
		scd_ctl_dispatch_submit(ctl, s, ctl->submit_buf, (size_t)n);
	}
}

void scd_submit_drain(scd_session_t *s)
{
	if (s->submit_fd < 0 || s->dropped)
		return;
	shutdown(s->submit_fd, SHUT_RD); /* what was sent is read, then a hang-up */
	scd_submit_read(s, INT_MAX);
}

void scd_submit_offer(scd_ctl_t *ctl, scd_session_t *s, Sparsecomm__HelloReply *r)
{
	if (ctl->submit_fd < 0)
		return;
	if (getrandom(s->submit_token, sizeof(s->submit_token), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(s->submit_token)) {
		scd_warn(SCD_SUB_CTL, "no submit channel for pid %d: getrandom: %s", s->pid,
			 strerror(errno));
		return;
	}
	s->submit_offered = 1;
	r->submit_batch = 1;
	r->submit_path = ctl->submit_path;
	r->submit_token = (ProtobufCBinaryData){sizeof(s->submit_token), s->submit_token};
}

void scd_submit_tick(scd_ctl_t *ctl)
{
	uint64_t now = scd_now_ms();
	if (ctl->submit_resting && ctl->submit_fd >= 0 &&
	    uv_poll_start(&ctl->submit_poll, UV_READABLE, on_accept) == 0)
		ctl->submit_resting = 0;
	for (scd_submit_conn_t *c = ctl->submit_pending, *next; c; c = next) {
		next = c->next;
		if (now - c->since_ms < SCD_SUBMIT_TOKEN_MS)
			continue;
		struct ucred uc;
		conn_cred(c->fd, &uc);
		scd_warn_limited(SCD_SUB_CTL,
				 "submit channel from pid %d (uid %u) closed: no token within "
				 "%d ms",
				 (int)uc.pid, (unsigned)uc.uid, SCD_SUBMIT_TOKEN_MS);
		conn_close(ctl, c);
	}
}

/* The listening socket, bound private, given the control socket's group and mode. */
static int submit_socket(scd_ctl_t *ctl, const struct sockaddr_un *sa)
{
	scd_daemon_t *d = ctl->d;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	unlink(sa->sun_path);
	mode_t old = umask(0077);
	int rc = bind(fd, (const struct sockaddr *)sa, sizeof(*sa));
	umask(old);
	if (rc != 0 ||
	    (d->ctl_gid >= 0 && chown(sa->sun_path, (uid_t)-1, (gid_t)d->ctl_gid) != 0) ||
	    chmod(sa->sun_path, d->ctl_gid >= 0 ? 0660 : 0600) != 0 || listen(fd, 64) != 0) {
		int err = errno;
		if (rc == 0) /* bound: the file is ours */
			unlink(sa->sun_path);
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

sc_status_t scd_submit_listen(scd_ctl_t *ctl)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n =
	    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/submit.sock", ctl->d->runtime_dir);
	ctl->submit_fd = -1;
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
		scd_info(SCD_SUB_CTL, "no submit channel: %s/submit.sock is too long a path",
			 ctl->d->runtime_dir);
		return SC_OK;
	}
	ctl->submit_buf = malloc(SCD_CTL_MSG_MAX_BYTES);
	if (!ctl->submit_buf)
		return SC_ERR_NOMEM;
	ctl->submit_fd = submit_socket(ctl, &sa);
	if (ctl->submit_fd < 0) {
		scd_error(SCD_SUB_CTL, "cannot create the submit channel %s: %s", sa.sun_path,
			  strerror(errno));
		return SC_ERR_SYSTEM;
	}
	int rc = uv_poll_init(ctl->d->loop, &ctl->submit_poll, ctl->submit_fd);
	if (rc == 0) {
		ctl->submit_poll.data = ctl;
		rc = uv_poll_start(&ctl->submit_poll, UV_READABLE, on_accept);
		if (rc != 0)
			uv_close((uv_handle_t *)&ctl->submit_poll, NULL);
	}
	if (rc != 0) {
		scd_error(SCD_SUB_CTL, "cannot poll the submit channel %s: %s", sa.sun_path,
			  uv_strerror(rc));
		close(ctl->submit_fd);
		ctl->submit_fd = -1;
		unlink(sa.sun_path);
		return SC_ERR_SYSTEM;
	}
	snprintf(ctl->submit_path, sizeof(ctl->submit_path), "%s", sa.sun_path);
	return SC_OK;
}

void scd_submit_destroy(scd_ctl_t *ctl)
{
	while (ctl->submit_pending)
		conn_close(ctl, ctl->submit_pending);
	if (ctl->submit_fd >= 0) {
		uv_poll_stop(&ctl->submit_poll);
		uv_close((uv_handle_t *)&ctl->submit_poll, NULL);
		close(ctl->submit_fd);
		ctl->submit_fd = -1;
		unlink(ctl->submit_path);
	}
	free(ctl->submit_buf);
	ctl->submit_buf = NULL;
}
