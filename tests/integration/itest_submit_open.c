/*
 * itest_submit_open.c: the library's side of binding the submit channel
 * (client/lib/submit.c), against a scripted daemon: a ROUTER that answers the hello with an
 * offer naming the channel at a path that does not exist here (as for a trainer whose
 * runtime directory is mounted elsewhere), and a SOCK_SEQPACKET listener named like it
 * beside the ROUTER's socket that never answers. The real daemon is not used.
 *
 * submit-open: four connects.
 *   - The listener never accepts, so the token waits unread in its backlog: sc_connect
 *     fails with SC_ERR_TIMEOUT within its timeout, naming the channel, saying the token
 *     was never read and what to check (the daemon might still bind it: the control
 *     socket cannot take over). This also shows the channel was found beside the control
 *     socket, not at the offered path (there, the connect would fail and fall back).
 *   - The same with the hello answered only after two thirds of the timeout: one deadline
 *     covers the hello and the channel, so sc_connect still fails within its timeout (not
 *     the hello's wait plus a whole timeout more for the channel).
 *   - The channel bound, then never read: sc_finalize with four threads' requests stuck
 *     on it returns within its bound, each request ending with SC_ERR_SHUTDOWN.
 *   - The listener's backlog is full: the connect is refused at once and sc_connect
 *     succeeds on the control socket, well within its timeout (a blocking connect would
 *     wait for ever).
 */
#include "itest.h"
#include "sparsecomm.pb-c.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#define FAKE_OFFERED_PATH "/nonexistent/sparsecomm-elsewhere/fake-submit.sock"

typedef struct {
	char dir[32], ctl[80], sub[80];
	void *ctx, *router;
	int listen_fd, fill[256], n_fill;
	volatile int stop;
	volatile int hello_delay_ms; /* the hello is answered after this long */
	int bind_channel; /* accept the channel, acknowledge its token, read no more */
	int chan_fd;
	pthread_t thread;
} fake_t;

/* Answers a hello with an offer of the channel at FAKE_OFFERED_PATH; ignores the rest. */
static void fake_answer(fake_t *f, zmq_msg_t *id, const Sparsecomm__ClientMsg *m)
{
	static uint8_t token[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	Sparsecomm__HelloReply hr = SPARSECOMM__HELLO_REPLY__INIT;
	Sparsecomm__DaemonMsg d = SPARSECOMM__DAEMON_MSG__INIT;
	uint8_t buf[1024];
	if (m->body_case != SPARSECOMM__CLIENT_MSG__BODY_HELLO)
		return;
	if (f->hello_delay_ms > 0)
		it_sleep_ms(f->hello_delay_ms);
	hr.protocol_version = SC_PROTOCOL_VERSION;
	hr.rank = hr.local_rank = hr.node_rank = 0;
	hr.size = hr.local_size = hr.node_count = 1;
	hr.submit_path = FAKE_OFFERED_PATH;
	hr.submit_token = (ProtobufCBinaryData){sizeof(token), token};
	d.seq = m->seq;
	d.body_case = SPARSECOMM__DAEMON_MSG__BODY_HELLO;
	d.hello = &hr;
	size_t len = sparsecomm__daemon_msg__pack(&d, buf);
	zmq_msg_send(id, f->router, ZMQ_SNDMORE);
	zmq_send(f->router, buf, len, 0);
}

static void *fake_main(void *p)
{
	fake_t *f = p;
	while (!f->stop) {
		zmq_pollitem_t its[2] = {{f->router, 0, ZMQ_POLLIN, 0},
					 {NULL, f->listen_fd, ZMQ_POLLIN, 0}};
		if (zmq_poll(its, f->bind_channel && f->chan_fd < 0 ? 2 : 1, 50) <= 0)
			continue;
		if (its[1].revents & ZMQ_POLLIN) {
			uint8_t tok[64], ack = 1;
			f->chan_fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (f->chan_fd >= 0 && recv(f->chan_fd, tok, sizeof(tok), 0) > 0)
				send(f->chan_fd, &ack, 1, MSG_NOSIGNAL);
		}
		if (!(its[0].revents & ZMQ_POLLIN))
			continue;
		zmq_msg_t id, body;
		zmq_msg_init(&id);
		zmq_msg_init(&body);
		if (zmq_msg_recv(&id, f->router, 0) >= 0 && zmq_msg_more(&id) &&
		    zmq_msg_recv(&body, f->router, 0) >= 0) {
			Sparsecomm__ClientMsg *m = sparsecomm__client_msg__unpack(
			    NULL, zmq_msg_size(&body), zmq_msg_data(&body));
			if (m)
				fake_answer(f, &id, m);
			sparsecomm__client_msg__free_unpacked(m, NULL);
		}
		zmq_msg_close(&id);
		zmq_msg_close(&body);
	}
	return NULL;
}

/* A scripted daemon in a fresh directory; backlog: the listener's listen(2) backlog. */
static void fake_start(fake_t *f, int backlog)
{
	memset(f, 0, sizeof(*f));
	f->chan_fd = -1;
	snprintf(f->dir, sizeof(f->dir), "%s", "/tmp/sc-subopen.XXXXXX");
	if (!mkdtemp(f->dir))
		IT_FAIL("mkdtemp: %s", strerror(errno));
	snprintf(f->ctl, sizeof(f->ctl), "%s/ctl.sock", f->dir);
	snprintf(f->sub, sizeof(f->sub), "%s/fake-submit.sock", f->dir);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sub);
	f->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (f->listen_fd < 0 || bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(f->listen_fd, backlog) != 0)
		IT_FAIL("the scripted channel's listener %s: %s", f->sub, strerror(errno));
	char ep[160];
	snprintf(ep, sizeof(ep), "ipc://%s", f->ctl);
	int zero = 0;
	f->ctx = zmq_ctx_new();
	f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
	zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_bind(f->router, ep) != 0)
		IT_FAIL("zmq_bind(%s): %s", ep, zmq_strerror(zmq_errno()));
	if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
		IT_FAIL("pthread_create failed");
}

/* Fills the listener's backlog with connections never accepted. */
static void fake_fill(fake_t *f)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sub);
	while (f->n_fill < (int)(sizeof(f->fill) / sizeof(f->fill[0]))) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			IT_FAIL("socket: %s", strerror(errno));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			close(fd);
			if (errno == EAGAIN)
				return;
			IT_FAIL("filling the listener's backlog: %s", strerror(errno));
		}
		f->fill[f->n_fill++] = fd;
	}
	IT_FAIL("the listener's backlog took %d connections without filling", f->n_fill);
}

static void fake_stop(fake_t *f)
{
	f->stop = 1;
	pthread_join(f->thread, NULL);
	zmq_close(f->router);
	zmq_ctx_term(f->ctx);
	for (int i = 0; i < f->n_fill; i++)
		close(f->fill[i]);
	if (f->chan_fd >= 0)
		close(f->chan_fd);
	close(f->listen_fd);
	unlink(f->sub);
	unlink(f->ctl);
	rmdir(f->dir);
}

/* sc_connect against a channel that never accepts, its hello answered after delay_ms:
 * SC_ERR_TIMEOUT within timeout_ms (and a margin for a loaded host), naming the channel,
 * its token unread, and what to check. */
static void unanswered(int timeout_ms, int delay_ms)
{
	/* a busy host's scheduling; a second deadline for the channel would add timeout_ms */
	const double margin_s = 1.5;
	sc_client_t *c = NULL;
	fake_t f;
	fake_start(&f, 16);
	f.hello_delay_ms = delay_ms;
	double t0 = it_now_s();
	sc_status_t st = sc_connect(f.ctl, timeout_ms, &c);
	double took = it_now_s() - t0;
	const char *e = sc_last_error();
	if (st != SC_ERR_TIMEOUT || !strstr(e, f.sub) || !strstr(e, "token was never read") ||
	    !strstr(e, "backlog") || !strstr(e, "SPARSECOMM_SUBMIT_CHANNEL=0"))
		IT_FAIL(
		    "a channel that never accepts, the hello answered after %d ms: sc_connect "
		    "gave %s (%s), expected SC_ERR_TIMEOUT naming %s, its token unread in the "
		    "backlog, and SPARSECOMM_SUBMIT_CHANNEL=0",
		    delay_ms, sc_status_name(st), st == SC_OK ? "bound, or fell back" : e,
		    f.sub);
	if (took > timeout_ms / 1000.0 + margin_s || took < timeout_ms / 1000.0 - 0.05)
		IT_FAIL(
		    "the hello answered after %d ms: sc_connect gave up after %.2f s with a "
		    "timeout of %d ms (one deadline for the hello and the channel: expected "
		    "%.1f to %.1f s)",
		    delay_ms, took, timeout_ms, timeout_ms / 1000.0 - 0.05,
		    timeout_ms / 1000.0 + margin_s);
	it_log("a token unanswered, the hello after %d ms: %s after %.2f s: %s", delay_ms,
	       sc_status_name(st), took, e);
	fake_stop(&f);
}

/* A thread's sc_config_set with a large value, on a channel the daemon never reads. */
typedef struct {
	sc_client_t *c;
	const char *value;
	sc_status_t st;
	char error[160];
} stuck_t;

static void *stuck_main(void *p)
{
	stuck_t *s = p;
	s->st = sc_config_set(s->c, "stuck", s->value);
	snprintf(s->error, sizeof(s->error), "%s", sc_last_error());
	return NULL;
}

/*
 * sc_finalize with sends stuck on a full channel: the daemon binds the channel and reads
 * nothing more, four threads each send a request of 100 KB (the first ones fill the
 * socket, the next waits on it, up to the library's 30 s timeout, the last for its turn).
 * sc_finalize must return within its bound (its goodbye waits 2 s for its turn, then
 * shuts the channel down, which ends the stuck send), every thread with SC_ERR_SHUTDOWN.
 */
static void stuck_sends(int timeout_ms)
{
	enum { N = 4 };
	static char value[100 * 1024];
	stuck_t s[N];
	pthread_t th[N];
	sc_client_t *c = NULL;
	fake_t f;
	memset(value, 'v', sizeof(value) - 1);
	fake_start(&f, 16);
	f.bind_channel = 1;
	IT_CHECK_SC(sc_connect(f.ctl, timeout_ms, &c), "sc_connect, the channel bound");
	for (int i = 0; i < N; i++) {
		s[i] = (stuck_t){.c = c, .value = value};
		if (pthread_create(&th[i], NULL, stuck_main, &s[i]) != 0)
			IT_FAIL("pthread_create failed");
	}
	it_sleep_ms(500); /* the sends are stuck by now */
	double t0 = it_now_s();
	sc_status_t st = sc_finalize(c);
	double took = it_now_s() - t0;
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	if (st != SC_OK || took > 6.0) /* stuck sends would hold it for the library's 30 s */
		IT_FAIL("sc_finalize with sends stuck on a full submit channel gave %s after "
			"%.2f s (2 s for its goodbye's turn, 1 s to flush, 3 s to spare)",
			sc_status_name(st), took);
	for (int i = 0; i < N; i++)
		if (s[i].st != SC_ERR_SHUTDOWN)
			IT_FAIL("thread %d's request on a full channel ended with %s (%s), "
				"expected SC_ERR_SHUTDOWN",
				i, sc_status_name(s[i].st), s[i].error);
	it_log("sends stuck on a full channel: sc_finalize returned after %.2f s, every "
	       "request ended with SC_ERR_SHUTDOWN",
	       took);
	fake_stop(&f);
}

int it_submit_open(int argc, char **argv)
{
	(void)argc, (void)argv;
	const int timeout_ms = 4000; /* over the margins of unanswered() */
	sc_client_t *c = NULL;
	fake_t f;
	it_env.rank = it_env.env_rank >= 0 ? it_env.env_rank : 0;
	unanswered(timeout_ms, 0);
	unanswered(timeout_ms, timeout_ms * 2 / 3);
	stuck_sends(timeout_ms);

	fake_start(&f, 0);
	fake_fill(&f);
	double t0 = it_now_s();
	sc_status_t st = sc_connect(f.ctl, timeout_ms, &c);
	double took = it_now_s() - t0;
	if (st != SC_OK)
		IT_FAIL(
		    "a channel whose backlog is full: sc_connect gave %s: %s, expected SC_OK "
		    "on the control socket",
		    sc_status_name(st), sc_last_error());
	if (took > timeout_ms / 1000.0)
		IT_FAIL("a channel whose backlog is full: sc_connect took %.1f s", took);
	it_log("a full backlog: refused at once (%d connections filled it), sc_connect in "
	       "%.2f s on the control socket",
	       f.n_fill, took);
	sc_finalize(c);
	fake_stop(&f);
	it_pass();
}
