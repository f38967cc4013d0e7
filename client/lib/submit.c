/*
 * submit.c: the library's side of the daemon's submit channel (daemon/ctl/submit.h). A
 * request on the control socket wakes four threads before the daemon's loop sees it (the
 * library's I/O thread and ZeroMQ's on both sides); on the channel the calling thread
 * writes it on a SOCK_SEQPACKET socket that the loop polls.
 *
 * Order. The channel is bound inside the hello's exchange, before any other request
 * exists; from then on every request goes over it, so the daemon reads them in the order
 * they were issued (a submission before a join that follows it). Each request's state (its
 * operation, its waiting call) is set up under the client's lock, and under that same lock
 * it takes a ticket (c->send_next); it then releases the client's lock and sends when its
 * ticket's turn comes (c->send_turn, under c->send_mu). So two threads' requests reach the
 * daemon in the order they held the client's lock, a reply cannot find a request's state
 * missing, and no thread holds the client's lock while it sends: a full socket's wait
 * blocks neither the I/O thread's dispatch nor other threads' waits, which keep their own
 * timeouts. Locks are taken in one order, mu then send_mu, and send_mu is never held while
 * mu is taken: a failed send releases send_mu, then takes mu to fail the client
 * (client_fail). A turn waits only for the sends before it, each bounded by the library's
 * timeout; one that failed makes those after it send nothing (the client's failure ends
 * their operations). sc_finalize sends its goodbye the same way, then waits until every
 * ticket's turn has ended before the channel is closed. One send(2) of a SEQPACKET message
 * is atomic.
 *
 * Batches (sc_submit_batch). A collective's request may be held at its turn, behind those
 * held before it (c->held, under send_mu); they go out as one SubmitBatch message (one
 * wake-up of the daemon's loop) when a request comes past the window, when SCL_HELD_MAX
 * are held, when a request that may not be held comes (it goes after them, alone), on
 * sc_submit_flush, and before every wait (client.c, op_collect). Held requests have had
 * their turn, so order stays the tickets'. A wait or a poll never blocks on send_mu: one
 * that finds it taken (another thread's send waiting on a full socket, up to the library's
 * timeout) sets flush_wanted and returns; whoever holds send_mu sends what is held as it
 * lets go, then looks at flush_wanted again once it has let go and takes send_mu back if
 * it is set and free (send_unlock). Either the asker's second try takes send_mu, or the
 * holder let go after the asker set the flag and sees it: no request stays held. (A wait
 * that takes send_mu sends what is held itself, and that send waits on a full socket as
 * any does; so may a thread that takes send_mu back for a flag.)
 *
 * Back-pressure. A full socket is waited on (poll, up to the library's timeout), never
 * dropped; a daemon that takes nothing for that long fails the client with that reason.
 * Replies, completions and the daemon's death still come through the I/O thread.
 *
 * Binding. The hello's reply names the channel's path as the daemon sees it; a trainer
 * whose runtime directory is mounted elsewhere (a container) would miss it or reach
 * another daemon's, so the library connects to the file of that name in the directory of
 * the control socket it reached itself (that socket's target, where it is a link). The
 * connect is non-blocking (a listener whose backlog is full refuses at once), and what
 * the hello left of sc_connect's one deadline covers the connect, the token and the
 * daemon's acknowledgement. Before the token is sent any failure leaves the control socket
 * in use; after it, no answer in time fails sc_connect (token_unanswered says why no fall
 * back is safe, and the error what to check).
 *
 * sc_finalize. Its goodbye takes the last ticket; when the sends before it still hold the
 * channel after sc_finalize's bound (a daemon that takes nothing), the channel is shut
 * down so they end at once (scl_submit_goodbye).
 *
 * fork(2). A child inherits the channel's descriptor, and a request or a goodbye it sent
 * there would be its parent's session's. The client remembers the pid that connected; in
 * any other process its requests are refused (SC_ERR_INVALID, naming the forked child),
 * sc_finalize sends no goodbye and leaves ZeroMQ's sockets alone (their threads were not
 * forked), closing only the child's copies of the descriptors.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Milliseconds left until deadline_ms (CLOCK_MONOTONIC), at least 0. */
static int ms_left(int64_t deadline_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t left = deadline_ms - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	return left > 0 ? (int)left : 0;
}

static int64_t deadline_ms_after(int timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

/* Waits for events on fd until deadline_ms; 1 when they came, 0 on the deadline. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = {fd, events, 0};
		int n = poll(&p, 1, ms_left(deadline_ms));
		if (n < 0 && errno == EINTR)
			continue;
		return n > 0;
	}
}

/* Sends one packed request on fd, waiting up to timeout_ms while the socket is full; 0, or
 * -1 with the reason in why. */
static int submit_send(int fd, const void *data, size_t len, int timeout_ms, char *why,
		       size_t why_len)
{
	int64_t deadline = deadline_ms_after(timeout_ms);
	for (;;) {
		ssize_t n = send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n == (ssize_t)len)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, deadline))
			continue;
		if (n < 0 && errno == EAGAIN)
			snprintf(
			    why, why_len,
			    "the daemon took no request from its submit channel within %d ms",
			    timeout_ms);
		else
			snprintf(why, why_len, "cannot send to the daemon's submit channel: %s",
				 n < 0 ? strerror(errno) : "a short send");
		return -1;
	}
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The requests from *f on, as many as one SubmitBatch of at most SCL_BATCH_BYTES takes
 * (at least one), packed in one frame; *f moves past them. NULL when out of memory. */
static struct scl_frame *batch_pack(struct scl_frame **f)
{
	ProtobufCBinaryData req[SCL_HELD_MAX];
	size_t n = 0, bytes = 0;
	struct scl_frame *g = *f;
	for (; g && n < SCL_HELD_MAX && (n == 0 || bytes + g->len + 8 <= SCL_BATCH_BYTES);
	     g = g->next) {
		req[n++] = (ProtobufCBinaryData){g->len, g->data};
		bytes += g->len + 8;
	}
	Sparsecomm__SubmitBatch b = SPARSECOMM__SUBMIT_BATCH__INIT;
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	b.requests = req;
	b.n_requests = n;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_BATCH;
	msg.batch = &b;
	struct scl_frame *out = scl_frame_pack(&msg);
	if (out)
		*f = g;
	return out;
}

/* Sends the list from f on: two or more as SubmitBatch frames where the daemon takes
 * them (one message, one wake-up of its loop, per batch), else each as it is (sendmmsg(2)
 * would not save the wake-ups: the loop reads the first before the second arrives). */
static int held_send_list(sc_client_t *c, struct scl_frame *f, char *why, size_t why_len)
{
	for (; f && (!c->submit_batchable || !f->next); f = f->next)
		if (submit_send(c->submit_fd, f->data, f->len, SCL_DEFAULT_TMO_MS, why,
				why_len))
			return -1;
	while (f) {
		struct scl_frame *b = batch_pack(&f);
		if (!b) {
			snprintf(why, why_len, "out of memory for a batch of requests");
			return -1;
		}
		int rc = submit_send(c->submit_fd, b->data, b->len, SCL_DEFAULT_TMO_MS, why,
				     why_len);
		free(b);
		if (rc)
			return rc;
	}
	return 0;
}

/* Sends and frees the requests held (send_mu held); 0, or -1 with the reason in why (the
 * client fails, and with it their operations). */
static int held_send(sc_client_t *c, char *why, size_t why_len)
{
	struct scl_frame *f = c->held;
	int rc = c->send_failed || !f ? 0 : held_send_list(c, f, why, why_len);
	while (f) {
		struct scl_frame *next = f->next;
		free(f);
		f = next;
	}
	c->held = NULL;
	c->held_tail = &c->held;
	__atomic_store_n(&c->held_n, 0, __ATOMIC_SEQ_CST);
	return rc;
}

/* Releases send_mu, first sending what is held where flush_wanted asks for it; after
 * the release, a flag set meanwhile is served by taking send_mu back when it is free
 * (else its holder serves it as it lets go). failed: a send of the caller's failed (why
 * says why); returns whether any send failed, the reason in why. */
static int send_unlock(sc_client_t *c, int failed, char *why, size_t why_len)
{
	for (;;) {
		if (__atomic_exchange_n(&c->flush_wanted, 0, __ATOMIC_SEQ_CST) && c->held &&
		    held_send(c, why, why_len) != 0)
			failed = c->send_failed = 1;
		pthread_mutex_unlock(&c->send_mu);
		/* a full fence between the release and the flag's load, against the asker's
		 * store and trylock (POSIX does not make a mutex operation one) */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&c->flush_wanted, __ATOMIC_SEQ_CST) ||
		    pthread_mutex_trylock(&c->send_mu) != 0)
			return failed;
	}
}

/* A send of the channel failed: the client fails with why (c->mu not held). */
static void send_failed(sc_client_t *c, const char *why)
{
	pthread_mutex_lock(&c->mu);
	scl_client_fail(c, SC_ERR_CONNECT, why);
	pthread_mutex_unlock(&c->mu);
}

/* Sends f in its ticket's turn, or holds it there (hold: a collective's request, under
 * sc_submit_batch) behind the others held; the first request that may not wait, a full
 * batch or one past its window sends every request held, itself last. wait_ms >= 0 bounds
 * the wait for the turn: past it the channel is shut down, so the send that holds it
 * (waiting on a full socket) fails at once and so do those after it, this one included. */
static void submit_in_turn(sc_client_t *c, struct scl_frame *f, int wait_ms, int hold)
{
	char why[SCL_ERR_MAX - 64];
	uint64_t ticket = c->send_next++;
	int fd = c->submit_fd, failed = 0;
	int64_t deadline = deadline_ms_after(wait_ms > 0 ? wait_ms : 0);
	struct timespec until = {deadline / 1000, (long)(deadline % 1000) * 1000000L};

	pthread_mutex_unlock(&c->mu);
	/* a send in progress holds send_mu while it waits on a full socket */
	if (wait_ms < 0 || pthread_mutex_clocklock(&c->send_mu, CLOCK_MONOTONIC, &until) != 0) {
		if (wait_ms >= 0) {
			shutdown(fd, SHUT_RDWR); /* that send fails at once, and lets go */
			wait_ms = -1;
		}
		pthread_mutex_lock(&c->send_mu);
	}
	while (c->send_turn != ticket) { /* bounded: each turn before ends within its timeout */
		if (wait_ms < 0)
			pthread_cond_wait(&c->send_cv, &c->send_mu);
		else if (pthread_cond_timedwait(&c->send_cv, &c->send_mu, &until) ==
			 ETIMEDOUT) {
			shutdown(fd, SHUT_RDWR);
			wait_ms = -1;
		}
	}
	if (c->send_failed) { /* the failure fails this request's operation too */
		free(f);
	} else if (!hold || !(c->held || c->batch_us > 0)) {
		/* what is held goes first: only collectives go in a batch */
		failed = c->send_failed =
		    held_send(c, why, sizeof(why)) != 0 ||
		    submit_send(fd, f->data, f->len, SCL_DEFAULT_TMO_MS, why, sizeof(why)) != 0;
		free(f);
	} else {
		int64_t now = now_us();
		*c->held_tail = f;
		c->held_tail = &f->next;
		if (__atomic_add_fetch(&c->held_n, 1, __ATOMIC_SEQ_CST) == 1)
			c->held_since_us = now;
		if (c->batch_us <= 0 || c->held_n >= SCL_HELD_MAX ||
		    now - c->held_since_us >= c->batch_us)
			failed = c->send_failed = held_send(c, why, sizeof(why)) != 0;
	}
	c->send_turn++;
	pthread_cond_broadcast(&c->send_cv);
	if (send_unlock(c, failed, why, sizeof(why)))
		send_failed(c, why);
}

void scl_submit_request(sc_client_t *c, struct scl_frame *f, int hold)
{
	submit_in_turn(c, f, -1, hold);
}

void scl_submit_goodbye(sc_client_t *c, struct scl_frame *f, int wait_ms)
{
	submit_in_turn(c, f, wait_ms, 0);
}

void scl_submit_flush(sc_client_t *c, int wait)
{
	char why[SCL_ERR_MAX - 64];

	if (!c || !__atomic_load_n(&c->held_n, __ATOMIC_RELAXED))
		return;
	if (wait)
		pthread_mutex_lock(&c->send_mu);
	else if (pthread_mutex_trylock(&c->send_mu) != 0) {
		__atomic_store_n(&c->flush_wanted, 1, __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* see send_unlock */
		if (pthread_mutex_trylock(&c->send_mu) != 0)
			return; /* its holder sends them as it lets go (send_unlock) */
	}
	__atomic_store_n(&c->flush_wanted, 1, __ATOMIC_SEQ_CST); /* send_unlock sends them */
	if (send_unlock(c, 0, why, sizeof(why)))
		send_failed(c, why);
}

void scl_submit_batch_set(sc_client_t *c, int window_us)
{
	char why[SCL_ERR_MAX - 64];

	pthread_mutex_lock(&c->send_mu);
	c->batch_us = window_us;
	if (window_us <= 0) /* what is held goes now */
		__atomic_store_n(&c->flush_wanted, 1,
				 __ATOMIC_SEQ_CST); /* send_unlock sends them */
	if (send_unlock(c, 0, why, sizeof(why)))
		send_failed(c, why);
}

void scl_submit_quiesce(sc_client_t *c)
{
	pthread_mutex_lock(&c->mu);
	uint64_t issued = c->send_next;
	pthread_mutex_unlock(&c->mu);
	char why[SCL_ERR_MAX - 64];

	pthread_mutex_lock(&c->send_mu);
	while (c->send_turn != issued)
		pthread_cond_wait(&c->send_cv, &c->send_mu);
	if (send_unlock(c, 0, why, sizeof(why)))
		send_failed(c, why);
}

/* The channel's path as this process sees it (out, cap bytes): the directory of the
 * control socket it reached (its target where that is a link) joined with the file name
 * of daemon_path, the path as the daemon sees it. -1 where it would not fit. */
static int path_here(const sc_client_t *c, const char *daemon_path, char *out, size_t cap)
{
	const char *name = strrchr(daemon_path, '/');
	char ctl[PATH_MAX];
	name = name ? name + 1 : daemon_path;
	if (strncmp(c->endpoint, "ipc://", 6) != 0)
		return snprintf(out, cap, "%s", daemon_path) < (int)cap ? 0 : -1;
	if (!realpath(c->endpoint + 6, ctl))
		snprintf(ctl, sizeof(ctl), "%s", c->endpoint + 6);
	const char *slash = strrchr(ctl, '/');
	int n = slash ? snprintf(out, cap, "%.*s/%s", (int)(slash - ctl), ctl, name)
		      : snprintf(out, cap, "%s", name);
	return n >= 0 && (size_t)n < cap ? 0 : -1;
}

/*
 * The token went out and no acknowledgement came by the deadline. No fall back is safe:
 * the daemon may still accept the connection and read the token (it stays queued there
 * even once this end is closed) and bind the channel, and would then drop the session at
 * its first request on the control socket, as a trainer that died. What the kernel still
 * holds of the token (TIOCOUTQ: bytes sent and not yet read) tells a connection never
 * accepted from a daemon that read the token and did not answer.
 */
static sc_status_t token_unanswered(int fd, const char *path, int left_ms, int timeout_ms)
{
	int unread = -1;
	const char *what =
	    ioctl(fd, TIOCOUTQ, &unread) == 0 && unread > 0
		? "the token was never read (the connection waits in the listener's backlog, "
		  "not accepted)"
		: "the daemon read the token and sent no acknowledgement";

	return scl_error(
	    SC_ERR_TIMEOUT,
	    "the daemon's submit channel %s did not acknowledge this client's token within "
	    "sc_connect's timeout of %d ms (%d ms of it left after the hello): %s. The "
	    "control socket cannot take over once the token is sent (the daemon may still "
	    "bind the channel, and would then drop the session at its first request there). "
	    "Check that the daemon behind %s is the one that answered the hello and is not "
	    "stalled (its log), or give sc_connect a longer timeout; "
	    "SPARSECOMM_SUBMIT_CHANNEL=0 keeps every request on the control socket",
	    path, timeout_ms, left_ms, what, path);
}

sc_status_t scl_submit_open(sc_client_t *c, const char *daemon_path, const uint8_t *token,
			    size_t token_len, int left_ms, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t deadline = deadline_ms_after(left_ms); /* connect, token and ack alike */
	char path[sizeof(sa.sun_path)];
	uint8_t ack = 0;
	ssize_t n = -1;
	int fd, rc;

	if (path_here(c, daemon_path, path, sizeof(path)) != 0)
		return scl_error(SC_ERR_CONNECT,
				 "the daemon's submit channel %s: its path here is too long",
				 daemon_path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	/* nothing sent yet: the control socket carries the requests. Too little time left
	 * to bind the channel would fail sc_connect once the token is sent, where the
	 * control socket works */
	int least = timeout_ms / 4 < 500 ? timeout_ms / 4 : 500;
	if (left_ms <= 0 || left_ms < least)
		return scl_error(SC_ERR_CONNECT,
				 "the daemon's submit channel %s: the hello left %d of "
				 "sc_connect's %d ms, fewer than the %d it takes to bind it",
				 path, left_ms > 0 ? left_ms : 0, timeout_ms, least);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return scl_error(SC_ERR_SYSTEM, "submit channel: socket: %s", strerror(errno));
	/* non-blocking: a listener whose backlog is full refuses (EAGAIN) at once */
	do
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		do
			n = send(fd, token, token_len, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
	if (n != (ssize_t)token_len) {
		int err = errno;

		close(fd);
		return scl_error(SC_ERR_CONNECT,
				 "cannot reach the daemon's submit channel %s: %s", path,
				 rc != 0 ? strerror(err)
				 : n < 0 ? strerror(err)
					 : "a short send of its token");
	}
	/* The token is sent: from now on the daemon may bind the channel, after which a
	 * request on the control socket drops the session. No answer in time is an error, not
	 * a fall back. */
	if (!wait_fd(fd, POLLIN, deadline)) {
		sc_status_t st = token_unanswered(fd, path, left_ms, timeout_ms);

		close(fd);
		return st;
	}
	do
		n = recv(fd, &ack, 1, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n != 1 || ack != 1) {
		int err = errno;

		close(fd);
		return scl_error(SC_ERR_CONNECT,
				 "the daemon's submit channel %s refused this client (%s)",
				 path,
				 n == 0	 ? "it closed the connection: see the daemon's log"
				 : n < 0 ? strerror(err)
					 : "an unexpected acknowledgement");
	}
	pthread_mutex_lock(&c->mu);
	c->submit_fd = fd;
	pthread_mutex_unlock(&c->mu);
	return SC_OK;
}

/* SC_OK while c can send, else its error (the calls below, after their work). */
static sc_status_t client_state(sc_client_t *c, const char *what)
{
	pthread_mutex_lock(&c->mu);
	sc_status_t st = scl_client_check(c);
	if (st != SC_OK)
		st = scl_error(st, "rank %d: %s: %s", c->rank, what, c->dead_msg);
	pthread_mutex_unlock(&c->mu);
	return st;
}

SC_API sc_status_t sc_submit_batch(sc_client_t *client, int window_us)
{
	sc_status_t st = scl_enter_call(client, "submit batch");

	if (st != SC_OK)
		return st;
	if (window_us < 0 || window_us > 10 * 1000 * 1000)
		return scl_left(client,
				scl_error(SC_ERR_INVALID,
					  "sc_submit_batch: window_us %d is not within 0 "
					  ".. 10000000",
					  window_us));
	scl_submit_batch_set(client, window_us);
	return scl_left(client, client_state(client, "sc_submit_batch"));
}

SC_API sc_status_t sc_submit_flush(sc_client_t *client)
{
	sc_status_t st = scl_enter_call(client, "submit flush");

	if (st != SC_OK)
		return st;
	scl_submit_flush(client, 1);
	return scl_left(client, client_state(client, "sc_submit_flush"));
}
