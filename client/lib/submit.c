/*
 * submit.c: the library's side of the daemon's submit channel (daemon/ctl/submit.h). A
 * request on the control socket wakes four threads before the daemon's loop sees it (the
 * library's I/O thread and ZeroMQ's on both sides); on the channel the calling thread
 * writes it on a SOCK_SEQPACKET socket that the loop polls.
 *
 * Order. The channel is bound inside the hello's exchange, before any other request
 * exists; from then on every request goes over it, so the daemon reads them in the order
 * they were issued (a submission before a join that follows it). Requests are sent with
 * the client's lock held, the same lock under which each one's state (its operation, its
 * waiting request) is set up before it is sent: a reply cannot find it missing, and two
 * threads' requests reach the daemon in the order they took the lock. One send(2) of a
 * SEQPACKET message is atomic.
 *
 * Back-pressure. A full socket is waited on (poll, up to the library's timeout), never
 * dropped; a daemon that takes nothing for that long fails the client with that reason.
 * Replies, completions and the daemon's death still come through the I/O thread.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
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

int scl_submit_send(sc_client_t *c, const void *data, size_t len, int timeout_ms, char *why,
		    size_t why_len)
{
	int64_t deadline = deadline_ms_after(timeout_ms);
	for (;;) {
		ssize_t n = send(c->submit_fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n == (ssize_t)len)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && wait_fd(c->submit_fd, POLLOUT, deadline))
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

sc_status_t scl_submit_open(sc_client_t *c, const char *path, const uint8_t *token,
			    size_t token_len, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t deadline = deadline_ms_after(timeout_ms);
	uint8_t ack = 0;
	ssize_t n = -1;
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return scl_error(SC_ERR_PROTOCOL,
				 "the daemon's submit channel path is too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return scl_error(SC_ERR_SYSTEM, "submit channel: socket: %s", strerror(errno));
	do
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		do
			n = send(fd, token, token_len, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
	if (n == (ssize_t)token_len && !wait_fd(fd, POLLIN, deadline)) {
		close(fd);
		return scl_error(
		    SC_ERR_TIMEOUT,
		    "the daemon's submit channel %s did not acknowledge this client "
		    "within %d ms",
		    path, timeout_ms);
	}
	if (n == (ssize_t)token_len)
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
