/*
 * client.c: the connection of a trainer (or of sparsectl) to its node's daemon, and the
 * life of an allreduce from sc_allreduce_async to the sc_wait that collects it.
 *
 * Design. A ZeroMQ socket may be used by one thread at a time, but one client is shared by
 * every thread of a trainer, and completions arrive unsolicited at any moment. So each
 * client runs one I/O thread that alone owns the DEALER socket. API calls pack their
 * ClientMsg themselves, append the frame to a mutex-protected queue and wake the I/O
 * thread through an eventfd (written only when the queue goes from empty to non-empty).
 * The I/O thread sleeps in zmq_poll on three things: the DEALER, the eventfd, and a PAIR
 * that receives the DEALER's monitor events. It sends what is queued and dispatches what
 * arrives: replies to the synchronous request with the same seq, completions (seq 0) to
 * the operation with their handle. A trainer whose daemon offers a submit channel binds it
 * in its hello (submit.c): from then on client_enqueue writes every request there itself,
 * and the I/O thread only reads. Callers sleep on one condition variable
 * (CLOCK_MONOTONIC, always with a deadline unless the caller asked for none) that is
 * broadcast on every reply, completion and failure. Nothing spins.
 *
 * The completion's shortcut. A thread waiting for a tensor's operation sleeps instead on
 * a futex word in the tensor's shared header (proto/shm_wake.h). When the operation
 * succeeds (and has no counts to return), the daemon's loop thread writes its handle there
 * and wakes that thread at once, and sends no Completion message: one wake-up instead of
 * four (ZeroMQ's I/O thread on each side, this library's I/O thread, then the condition
 * variable), and the I/O threads stay free for the next submission. So the header, not
 * only the I/O thread, ends operations: a wait or a poll reads it, and a submission or a
 * release that finds the tensor busy reads it before refusing (scl_op_settle), which also
 * frees an operation whose wait ran out. Everything else (an error, an alltoall's counts,
 * a lost daemon) comes as before through the I/O thread, which bumps the word too, so the
 * sleeper wakes either way. The header is probed before it is read, so a trainer that
 * truncated its object gets errors, not SIGBUS.
 *
 * The alternative, one mutex-protected socket that waiting threads take turns polling,
 * needs a leader/follower hand-off to let two threads wait for different handles, and
 * still needs a queue for sends made while another thread sits in zmq_poll; the I/O
 * thread is simpler and keeps the per-call cost to a lock, a memcpy and an eventfd write.
 *
 * Seqs and handles come from one counter, and an allreduce is sent with seq = handle, so
 * an error reply to an allreduce (refused by the daemon) completes that very operation
 * without a second table. sc_allreduce_async does not wait for the daemon's acceptance.
 *
 * Daemon death. ZMTP heartbeats (ping every 1 s, give up after 5 s without traffic) make
 * ZeroMQ drop a connection to a daemon that is gone or frozen; a crash closes the IPC
 * socket at once. Either way the monitor reports ZMQ_EVENT_DISCONNECTED; the I/O thread
 * then fails every waiting request and every operation in flight with SC_ERR_CONNECT and
 * the client refuses further work (a restarted daemon knows nothing of this session).
 *
 * Errors. Each status comes with the calling thread's error text (thread-local), naming
 * the rank and the tensor; a daemon's Completion.error is passed through verbatim. The log
 * callback may run on any thread, the I/O thread included, with the client's lock held: it
 * must not call back into the library.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "ctl_notice.h"
#include "internal.h"
#include "rundir.h"
#include "shm_wake.h"

#define HEARTBEAT_IVL_MS     1000
#define HEARTBEAT_TIMEOUT_MS 5000
#define MONITOR_ENDPOINT     "inproc://sparsecomm-monitor"

static __thread char tls_error[SCL_ERR_MAX];

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static sc_log_cb log_cb;
static void *log_arg;

/* ---- errors and logging -------------------------------------------------------------- */

sc_status_t scl_error(sc_status_t status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tls_error, sizeof(tls_error), fmt, ap);
	va_end(ap);
	scl_log(SCL_LOG_DEBUG, "%s: %s", sc_status_name(status), tls_error);
	return status;
}

SC_API const char *sc_last_error(void)
{
	return tls_error;
}

SC_API void sc_set_log_callback(sc_log_cb cb, void *arg)
{
	pthread_mutex_lock(&log_mu);
	log_cb = cb;
	log_arg = arg;
	pthread_mutex_unlock(&log_mu);
}

void scl_log(int level, const char *fmt, ...)
{
	char line[SCL_ERR_MAX + 64];
	sc_log_cb cb;
	void *arg;
	va_list ap;

	pthread_mutex_lock(&log_mu);
	cb = log_cb;
	arg = log_arg;
	pthread_mutex_unlock(&log_mu);
	if (!cb)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cb(level, line, arg);
}

/* A status received from the daemon, or SC_ERR_PROTOCOL when it is not one of ours. */
static sc_status_t status_from_wire(int32_t s)
{
	/* the status map decides, so a status added to it is accepted here too */
	if (!strcmp(sc_status_name((sc_status_t)s), "SC_UNKNOWN_STATUS"))
		return SC_ERR_PROTOCOL;
	return (sc_status_t)s;
}

/* ---- time ---------------------------------------------------------------------------- */

struct timespec scl_deadline_after(int timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Waits on the client's condition variable until the deadline (NULL: none). Returns 0, or
 * ETIMEDOUT once the deadline has passed. Called with c->mu held. */
static int client_sleep(sc_client_t *c, const struct timespec *deadline)
{
	int rc;

	if (!deadline) {
		pthread_cond_wait(&c->cv, &c->mu);
		return 0;
	}
	rc = pthread_cond_timedwait(&c->cv, &c->mu, deadline);
	return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* ---- operations table (c->mu held) --------------------------------------------------- */

static struct scl_op **op_slot(sc_client_t *c, sc_handle_t handle)
{
	struct scl_op **pp = &c->ops[handle % SCL_OP_BUCKETS];

	while (*pp && (*pp)->handle != handle)
		pp = &(*pp)->next;
	return pp;
}

static struct scl_op *op_find(sc_client_t *c, sc_handle_t handle)
{
	return *op_slot(c, handle);
}

/* op_find for a caller that collects it: an abandoned operation (orphan) is nobody's, and
 * may be freed by whoever sees it end, so it is not found. */
static struct scl_op *op_find_held(sc_client_t *c, sc_handle_t handle)
{
	struct scl_op *o = op_find(c, handle);

	return o && !o->orphan ? o : NULL;
}

static void op_free(struct scl_op *op)
{
	free(op->error);
	free(op);
}

/* Unlinks an operation from the table and frees it. */
static void op_release(sc_client_t *c, struct scl_op *op)
{
	struct scl_op **pp = op_slot(c, op->handle);

	if (*pp == op)
		*pp = op->next;
	if (op->tensor && op->tensor->busy == op)
		op->tensor->busy = NULL;
	op_free(op);
}

/* What an operation is, for error texts: "allreduce of tensor 'x'", "broadcast of tensor
 * 'x'", "barrier" or "join". */
static const char *op_what(const struct scl_op *op, char *buf, size_t len)
{
	const char *kind = op->kind ? op->kind : "allreduce";
	if (op->tensorless)
		return op->join ? "join" : "barrier";
	if (!op->tensor)
		snprintf(buf, len, "%s of a released tensor", kind);
	else
		snprintf(buf, len, "%s of tensor '%s'", kind, op->tensor->name);
	return buf;
}

/* Ends an operation with status; error is the text to report (NULL: composed here). */
/* An alltoall's received counts, kept with its tensor (one per trainer, or none). Called
 * with c->mu held. */
static void op_counts(struct scl_op *op, sc_status_t st, const Sparsecomm__Completion *cp)
{
	sc_tensor_t *t = op->tensor;
	if (st == SC_OK && t && cp->n_counts && cp->n_counts == (size_t)t->a2a_cap) {
		memcpy(t->a2a_recv, cp->counts, sizeof(uint64_t) * cp->n_counts);
		t->a2a_n = t->a2a_cap;
	}
}

static void op_complete(sc_client_t *c, struct scl_op *op, sc_status_t status,
			const char *error)
{
	char buf[SCL_ERR_MAX], what[SCL_NAME_MAX + 32];

	if (op->done)
		return;
	op->done = 1;
	op->status = status;
	if (status != SC_OK) {
		if (!error || !*error) {
			snprintf(buf, sizeof(buf), "%s on rank %d failed: %s",
				 op_what(op, what, sizeof(what)), c->rank,
				 sc_status_message(status));
			error = buf;
		}
		op->error = strdup(error);
	}
	if (op->tensor && op->tensor->busy == op)
		op->tensor->busy = NULL;
	if (op->tensor && op->tensor->map && !op->fast) /* a waiter sleeps on its word */
		sc_shm_wake(op->tensor->map);
	if (op->orphan)
		op_release(c, op);
	pthread_cond_broadcast(&c->cv);
}

/* The tensor's shared header when a waiter for op may sleep on its word, else NULL. */
static sc_shm_header_t *op_header(const struct scl_op *op)
{
	return op->tensor && op->tensor->map ? op->tensor->map : NULL;
}

/*
 * Looks at op's tensor's header: returns 0 where there is none to read (no tensor, or its
 * page gone); else 1 with *seen_p (if not NULL) the word's value, and op ended here when
 * the daemon's word says it succeeded (its Completion message, which follows, then finds
 * it done). Called with c->mu held.
 */
static int op_fast(sc_client_t *c, struct scl_op *op, uint32_t *seen_p)
{
	sc_shm_header_t *h = op_header(op);
	uint32_t seen;

	if (!h || !sc_shm_alive(h))
		return 0;
	seen = sc_shm_done_seq(h);
	if (seen_p)
		*seen_p = seen;
	if (!op->done && sc_shm_is_done(h, op->handle)) {
		op->fast = 1;
		op_complete(c, op, SC_OK, NULL);
	}
	return 1;
}

/*
 * Sleeps until something may have changed for op: on its tensor's word where it has one
 * (woken by the daemon, or by op_complete here), else on the client's condition variable.
 * Returns 0 or ETIMEDOUT once the deadline (NULL: none) has passed. Called with c->mu held.
 */
static int op_sleep(sc_client_t *c, struct scl_op *op, const struct timespec *deadline)
{
	sc_shm_header_t *h = op_header(op);
	struct timespec now;
	uint32_t seen;
	int rc;

	if (!op_fast(c, op, &seen))
		return client_sleep(c, deadline);
	if (op->done)
		return 0;
	pthread_mutex_unlock(&c->mu);
	rc = sc_shm_wait(h, seen, deadline);
	pthread_mutex_lock(&c->mu);
	if (rc == 0 && deadline) { /* a wake may come at the deadline's edge */
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > deadline->tv_sec ||
		    (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec))
			rc = ETIMEDOUT;
	}
	return rc;
}

/* See internal.h. */
int scl_op_settle(sc_client_t *c, sc_tensor_t *t)
{
	if (t->busy)
		op_fast(c, t->busy, NULL);
	return t->busy == NULL;
}

/* See internal.h. */
void scl_op_detach(sc_client_t *c, sc_tensor_t *t)
{
	for (int b = 0; b < SCL_OP_BUCKETS; b++)
		for (struct scl_op *op = c->ops[b]; op; op = op->next)
			if (op->tensor == t)
				op->tensor = NULL;
}

/*
 * Marks the client unusable and fails everything that waits on it: synchronous requests
 * see a NULL reply, operations in flight end with status. Called with c->mu held.
 */
static void client_fail(sc_client_t *c, sc_status_t status, const char *msg)
{
	char buf[SCL_ERR_MAX], what[SCL_NAME_MAX + 32];

	if (c->dead != SC_OK)
		return;
	c->dead = status;
	snprintf(c->dead_msg, sizeof(c->dead_msg), "%s", msg);
	if (status != SC_ERR_SHUTDOWN)
		scl_log(SCL_LOG_ERROR, "rank %d: %s", c->rank, msg);
	for (struct scl_req *r = c->reqs; r; r = r->next)
		r->done = 1;
	/* a send waiting on a full submit channel (the daemon gone or stuck) ends at once,
	 * and the tickets behind it with it; the descriptor is closed only after every turn
	 * is done (scl_submit_quiesce) */
	if (status != SC_ERR_SHUTDOWN && c->submit_fd >= 0)
		shutdown(c->submit_fd, SHUT_RDWR);
	for (int b = 0; b < SCL_OP_BUCKETS; b++) {
		struct scl_op *op = c->ops[b], *next;

		for (; op; op = next) {
			next = op->next;
			if (op->done)
				continue;
			snprintf(buf, sizeof(buf), "%s on rank %d failed: %s",
				 op_what(op, what, sizeof(what)), c->rank, msg);
			op_complete(c, op, status, buf);
		}
	}
	pthread_cond_broadcast(&c->cv);
}

void scl_client_fail(sc_client_t *c, sc_status_t status, const char *msg)
{
	client_fail(c, status, msg);
}

/* Whether the client may send a request (c->mu held): SC_OK, or why not (c->dead). In a
 * child forked after sc_connect it fails: its requests would be the parent's session's
 * (the channel's descriptor is inherited), and the child has no I/O thread. */
sc_status_t scl_client_check(sc_client_t *c)
{
	char msg[160];

	if (c->dead == SC_OK && getpid() != c->owner_pid) {
		snprintf(msg, sizeof(msg),
			 "this client belongs to pid %d: a forked child (pid %d) cannot use it",
			 (int)c->owner_pid, (int)getpid());
		client_fail(c, SC_ERR_INVALID, msg);
	}
	return c->dead;
}

/* In a child forked after sc_connect, a request is refused before any of the client's
 * locks is taken: a lock some thread of the parent held at the fork stays held in the
 * child for ever. SC_OK in the process that connected. */
sc_status_t scl_forked_refusal(const sc_client_t *c, const char *what)
{
	if (getpid() == c->owner_pid)
		return SC_OK;
	return scl_error(
	    SC_ERR_INVALID,
	    "%s: this client belongs to pid %d: a forked child (pid %d) cannot use "
	    "it (only sc_finalize, which leaves the parent's session alone)",
	    what, (int)c->owner_pid, (int)getpid());
}

/* ---- outgoing frames ----------------------------------------------------------------- */

struct scl_frame *scl_frame_pack(const Sparsecomm__ClientMsg *msg)
{
	size_t len = sparsecomm__client_msg__get_packed_size(msg);
	struct scl_frame *f = malloc(sizeof(*f) + len);

	if (!f)
		return NULL;
	f->next = NULL;
	f->len = sparsecomm__client_msg__pack(msg, f->data);
	return f;
}

static void frames_free(struct scl_frame *f)
{
	while (f) {
		struct scl_frame *next = f->next;

		free(f);
		f = next;
	}
}

/* Queues a frame for the I/O thread, or sends it on the submit channel once that is bound
 * (submit.c); a channel that fails fails the client, and with it this request's operation
 * or call. Called with c->mu held and the request's state set up; releases c->mu. */
static void enqueue(sc_client_t *c, struct scl_frame *f, int hold)
{
	int was_empty = c->sendq == NULL;
	uint64_t one = 1;

	if (c->submit_fd >= 0) {
		scl_submit_request(c, f, hold);
		return;
	}
	*c->sendq_tail = f;
	c->sendq_tail = &f->next;
	pthread_mutex_unlock(&c->mu);
	if (was_empty && write(c->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		scl_log(SCL_LOG_WARN, "cannot wake the I/O thread: %s", strerror(errno));
}

void scl_client_enqueue(sc_client_t *c, struct scl_frame *f)
{
	enqueue(c, f, 0);
}

void scl_client_enqueue_op(sc_client_t *c, struct scl_frame *f)
{
	enqueue(c, f, 1);
}

/* ---- the I/O thread ------------------------------------------------------------------ */

/* Hands one received frame to whoever waits for it. */
static void io_dispatch(sc_client_t *c, const void *data, size_t len)
{
	Sparsecomm__DaemonMsg *m = sparsecomm__daemon_msg__unpack(NULL, len, data);
	struct scl_req *r;
	struct scl_op *op;

	if (!m) {
		scl_log(SCL_LOG_WARN,
			"rank %d: dropped a malformed message of %zu bytes from "
			"the daemon",
			c->rank, len);
		return;
	}
	pthread_mutex_lock(&c->mu);
	if (m->seq == 0) {
		if (m->body_case == SPARSECOMM__DAEMON_MSG__BODY_COMPLETION) {
			Sparsecomm__Completion *cp = m->completion;
			sc_status_t st = status_from_wire(cp->status);

			op = op_find(c, cp->handle);
			if (st == SC_IN_PROGRESS)
				st = SC_ERR_PROTOCOL;
			if (op) {
				op->value = cp->value;
				op_counts(op, st, cp);
				op_complete(c, op, st, cp->error);
			} else
				scl_log(SCL_LOG_DEBUG, "completion for unknown handle %llu",
					(unsigned long long)cp->handle);
		} else if (m->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR && m->error &&
			   m->error->message &&
			   !strncmp(m->error->message, SC_CTL_DROP_NOTICE,
				    strlen(SC_CTL_DROP_NOTICE))) {
			/* the daemon dropped this client, saying why: the client ends with it
			 */
			sc_status_t st = status_from_wire(m->error->status);
			client_fail(c,
				    st == SC_OK || st == SC_IN_PROGRESS ? SC_ERR_PROTOCOL : st,
				    m->error->message);
		} else {
			scl_log(SCL_LOG_WARN, "unexpected unsolicited message (body %d)",
				(int)m->body_case);
		}
		goto out_free;
	}
	for (r = c->reqs; r && r->seq != m->seq; r = r->next)
		;
	if (r && !r->done) {
		r->reply = m;
		r->done = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		return;
	}
	op = op_find(c, m->seq);
	if (op && !op->done && m->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR) {
		sc_status_t st = status_from_wire(m->error->status);
		char buf[SCL_ERR_MAX], what[SCL_NAME_MAX + 32];

		if (st >= SC_OK)
			st = SC_ERR_PROTOCOL;
		snprintf(buf, sizeof(buf), "rank %d: the daemon refused the %s: %s", c->rank,
			 op_what(op, what, sizeof(what)), m->error->message);
		op_complete(c, op, st, buf);
	}
out_free:
	pthread_mutex_unlock(&c->mu);
	sparsecomm__daemon_msg__free_unpacked(m, NULL);
}

static void io_recv_all(sc_client_t *c)
{
	zmq_msg_t msg;

	for (;;) {
		zmq_msg_init(&msg);
		if (zmq_msg_recv(&msg, c->sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&msg);
			return;
		}
		io_dispatch(c, zmq_msg_data(&msg), zmq_msg_size(&msg));
		zmq_msg_close(&msg);
	}
}

/* Reads the monitor's events; returns 1 when the connection to the daemon was lost. */
static int io_monitor(sc_client_t *c)
{
	int lost = 0;

	for (;;) {
		zmq_msg_t ev, addr;
		uint16_t event = 0;

		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, c->monitor, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return lost;
		}
		if (zmq_msg_size(&ev) >= 2)
			memcpy(&event, zmq_msg_data(&ev), 2);
		zmq_msg_close(&ev);
		zmq_msg_init(&addr); /* the second frame: the endpoint */
		zmq_msg_recv(&addr, c->monitor, 0);
		zmq_msg_close(&addr);
		if (event == ZMQ_EVENT_DISCONNECTED)
			lost = 1;
	}
}

/* Sends queued frames until done or the socket would block; returns -1 on a hard error. */
static int io_send(sc_client_t *c, struct scl_frame **pending)
{
	while (*pending) {
		struct scl_frame *f = *pending;

		if (zmq_send(c->sock, f->data, f->len, ZMQ_DONTWAIT) < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -1;
		}
		*pending = f->next;
		free(f);
	}
	return 0;
}

static void *io_main(void *arg)
{
	sc_client_t *c = arg;
	struct scl_frame *pending = NULL, **pending_tail = &pending;
	struct timespec stop_deadline = {0};
	int stopping = 0;

	for (;;) {
		zmq_pollitem_t items[3] = {
		    {c->sock, 0, ZMQ_POLLIN | (pending ? ZMQ_POLLOUT : 0), 0},
		    {c->monitor, 0, ZMQ_POLLIN, 0},
		    {NULL, c->wake_fd, ZMQ_POLLIN, 0},
		};
		long tmo = -1;
		uint64_t n;

		if (stopping) {
			/* Flush the goodbye for at most SCL_BYE_LINGER_MS, then leave. */
			struct timespec now;

			clock_gettime(CLOCK_MONOTONIC, &now);
			tmo = (stop_deadline.tv_sec - now.tv_sec) * 1000 +
			      (stop_deadline.tv_nsec - now.tv_nsec) / 1000000;
			if (!pending || tmo <= 0)
				break;
		}
		if (zmq_poll(items, 3, tmo) < 0) {
			if (errno == EINTR)
				continue;
			pthread_mutex_lock(&c->mu);
			client_fail(c, SC_ERR_SYSTEM,
				    "the client's I/O thread failed in zmq_poll");
			pthread_mutex_unlock(&c->mu);
			break;
		}
		if (items[2].revents & ZMQ_POLLIN) {
			if (read(c->wake_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
				scl_log(SCL_LOG_WARN, "eventfd read: %s", strerror(errno));
			pthread_mutex_lock(&c->mu);
			if (c->sendq) {
				*pending_tail = c->sendq;
				pending_tail = c->sendq_tail;
				c->sendq = NULL;
				c->sendq_tail = &c->sendq;
			}
			if (c->stopping && !stopping) {
				stopping = 1;
				stop_deadline = scl_deadline_after(SCL_BYE_LINGER_MS);
			}
			if (c->dead != SC_OK && !c->stopping) {
				/* Nobody will read what is left: the connection is gone. */
				frames_free(pending);
				pending = NULL;
				pending_tail = &pending;
			}
			pthread_mutex_unlock(&c->mu);
		}
		if (items[0].revents & ZMQ_POLLIN)
			io_recv_all(c);
		if (items[1].revents & ZMQ_POLLIN && io_monitor(c)) {
			char msg[SCL_ERR_MAX];

			snprintf(msg, sizeof(msg),
				 "lost the connection to the daemon at %s (it "
				 "exited or stopped answering heartbeats)",
				 c->endpoint);
			zmq_disconnect(c->sock, c->endpoint); /* no reconnection */
			pthread_mutex_lock(&c->mu);
			client_fail(c, SC_ERR_CONNECT, msg);
			pthread_mutex_unlock(&c->mu);
			frames_free(pending);
			pending = NULL;
		}
		if (io_send(c, &pending) < 0) {
			char msg[SCL_ERR_MAX];

			snprintf(msg, sizeof(msg), "cannot send to the daemon at %s: %s",
				 c->endpoint, zmq_strerror(zmq_errno()));
			pthread_mutex_lock(&c->mu);
			client_fail(c, SC_ERR_CONNECT, msg);
			pthread_mutex_unlock(&c->mu);
			frames_free(pending);
			pending = NULL;
		}
		if (!pending)
			pending_tail = &pending; /* else it still points into the last frame */
	}
	frames_free(pending);
	return NULL;
}

/* ---- requests ------------------------------------------------------------------------ */

uint64_t scl_client_next_id(sc_client_t *c)
{
	return __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
}

sc_status_t scl_client_call(sc_client_t *c, Sparsecomm__ClientMsg *msg, int timeout_ms,
			    const char *what, Sparsecomm__DaemonMsg **reply_p)
{
	struct scl_req req = {0}, **pp;
	struct scl_frame *f;
	struct timespec deadline;
	Sparsecomm__DaemonMsg *reply;
	const char *sep = what && *what ? ": " : "";
	sc_status_t st;

	if (!what)
		what = "";
	if ((st = scl_forked_refusal(c, what)) != SC_OK)
		return st;
	if (timeout_ms <= 0)
		timeout_ms = SCL_DEFAULT_TMO_MS;
	req.seq = msg->seq = scl_client_next_id(c);
	f = scl_frame_pack(msg);
	if (!f)
		return scl_error(SC_ERR_NOMEM, "%s%sout of memory", what, sep);
	deadline = scl_deadline_after(timeout_ms);
	pthread_mutex_lock(&c->mu);
	if (scl_client_check(c) != SC_OK) {
		st = c->dead;
		pthread_mutex_unlock(&c->mu);
		free(f);
		return scl_error(st, "%s%s%s", what, sep, c->dead_msg);
	}
	req.next = c->reqs;
	c->reqs = &req;
	scl_client_enqueue(c, f);
	pthread_mutex_lock(&c->mu);
	while (!req.done && client_sleep(c, &deadline) != ETIMEDOUT)
		;
	for (pp = &c->reqs; *pp != &req; pp = &(*pp)->next)
		;
	*pp = req.next;
	st = c->dead;
	if (!req.done || !req.reply) {
		char dead_msg[SCL_ERR_MAX];

		memcpy(dead_msg, c->dead_msg, sizeof(dead_msg));
		pthread_mutex_unlock(&c->mu);
		if (!req.done)
			return scl_error(SC_ERR_TIMEOUT,
					 "%s%sno reply from the daemon at %s within %d ms",
					 what, sep, c->endpoint, timeout_ms);
		return scl_error(st, "%s%s%s", what, sep, dead_msg);
	}
	pthread_mutex_unlock(&c->mu);
	reply = req.reply;
	if (reply->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR) {
		st = status_from_wire(reply->error->status);
		if (st >= SC_OK)
			st = SC_ERR_PROTOCOL;
		scl_error(st, "%s%s%s", what, sep, reply->error->message);
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
		return st;
	}
	*reply_p = reply;
	return SC_OK;
}

/* ---- connecting ---------------------------------------------------------------------- */

/* "ipc://" + path for a filesystem path, the string itself for a ZeroMQ endpoint. */
static sc_status_t endpoint_of(const char *path, char *out, size_t out_len)
{
	int n;

	if (!path || !*path)
		return scl_error(SC_ERR_INVALID,
				 "no daemon socket: pass one to sc_connect or set "
				 "$SPARSECOMM_SOCKET");
	n = strstr(path, "://") ? snprintf(out, out_len, "%s", path)
				: snprintf(out, out_len, "ipc://%s", path);
	if (n < 0 || (size_t)n >= out_len)
		return scl_error(SC_ERR_INVALID, "daemon socket path too long: %s", path);
	return SC_OK;
}

static sc_status_t local_rank_from_env(int *local_rank_p)
{
	const char *s = getenv("SPARSECOMM_LOCAL_RANK");
	char *end;
	long v;

	*local_rank_p = -1;
	if (!s || !*s)
		return SC_OK;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > INT_MAX)
		return scl_error(SC_ERR_INVALID, "$SPARSECOMM_LOCAL_RANK is not a rank: '%s'",
				 s);
	*local_rank_p = (int)v;
	return SC_OK;
}

/*
 * sc_finalize in a child forked after sc_connect: the child has none of the parent's
 * threads, and a lock or condition variable a thread of the parent held or waited on at
 * the fork stays so in the child for ever. So it takes no lock and destroys none (glibc's
 * pthread_cond_destroy waits for waiters that will never leave), leaves ZeroMQ's sockets
 * alone (closing them waits for the threads), sends no goodbye (it would end the parent's
 * session), closes its own copies of the descriptors and unmaps the tensors; the client's
 * memory is left, a copy of the parent's that no one uses.
 */
void scl_client_forget_in_child(sc_client_t *c)
{
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	if (c->submit_fd >= 0)
		close(c->submit_fd);
	c->wake_fd = c->submit_fd = -1;
	scl_tensor_unmap_all_in_child(c);
}

/* See internal.h. */
void scl_client_destroy(sc_client_t *c, int linger_ms, int bury)
{
	if (c->submit_fd >= 0)
		scl_submit_quiesce(c); /* no send in flight on it */
	if (c->io_started) {
		uint64_t one = 1;

		pthread_mutex_lock(&c->mu);
		c->stopping = 1;
		pthread_mutex_unlock(&c->mu);
		if (write(c->wake_fd, &one, sizeof(one)) < 0)
			scl_log(SCL_LOG_WARN, "cannot wake the I/O thread: %s",
				strerror(errno));
		pthread_join(c->io_thread, NULL);
	}
	scl_tensor_free_all(c);
	scl_pset_free_all(c);
	if (c->sock) {
		zmq_setsockopt(c->sock, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
		zmq_socket_monitor(c->sock, NULL, 0);
		zmq_close(c->sock);
	}
	if (c->monitor)
		zmq_close(c->monitor);
	if (c->zctx)
		while (zmq_ctx_term(c->zctx) < 0 && errno == EINTR)
			;
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	if (c->submit_fd >= 0)
		close(c->submit_fd);
	frames_free(c->sendq);
	frames_free(c->held); /* a channel that failed, or a forked child's */
	for (int b = 0; b < SCL_OP_BUCKETS; b++) {
		struct scl_op *op = c->ops[b], *next;

		for (; op; op = next) {
			next = op->next;
			op_free(op);
		}
	}
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->send_cv);
	pthread_mutex_destroy(&c->send_mu);
	if (bury)
		scl_client_bury(c);
	else
		free(c);
}

/* Creates the context, the DEALER and its monitor, and connects. */
static sc_status_t client_sockets(sc_client_t *c)
{
	int zero = 0, hb_ivl = HEARTBEAT_IVL_MS, hb_tmo = HEARTBEAT_TIMEOUT_MS;

	c->zctx = zmq_ctx_new();
	if (!c->zctx)
		return scl_error(SC_ERR_SYSTEM, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
	c->sock = zmq_socket(c->zctx, ZMQ_DEALER);
	c->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
	if (!c->sock || !c->monitor)
		return scl_error(SC_ERR_SYSTEM, "zmq_socket: %s", zmq_strerror(zmq_errno()));
	zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(c->sock, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(c->sock, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof(hb_ivl));
	zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_tmo, sizeof(hb_tmo));
	zmq_setsockopt(c->monitor, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_socket_monitor(c->sock, MONITOR_ENDPOINT, ZMQ_EVENT_DISCONNECTED) < 0 ||
	    zmq_connect(c->monitor, MONITOR_ENDPOINT) < 0)
		return scl_error(SC_ERR_SYSTEM, "cannot monitor the daemon connection: %s",
				 zmq_strerror(zmq_errno()));
	if (zmq_connect(c->sock, c->endpoint) < 0)
		return scl_error(SC_ERR_CONNECT, "cannot connect to the daemon at %s: %s",
				 c->endpoint, zmq_strerror(zmq_errno()));
	return SC_OK;
}

/*
 * A connection to the socket file path, tried without waiting: 0 when the listener's queue
 * took it, else the errno (ECONNREFUSED: nothing listens; EAGAIN: its queue of connections
 * not yet accepted is full, as a frozen daemon's becomes; EACCES, ENOENT, ...); -1 when it
 * cannot be tried (a path too long for a socket address: ZeroMQ says what it makes of it).
 * A blocking connect() would wait for as long as such a queue stays full, without limit.
 */
static int try_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	do
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (rc < 0 && errno == EINTR);
	err = errno;
	close(fd);
	return rc == 0 ? 0 : err;
}

sc_status_t scl_probe_socket(const char *path)
{
	int err = try_connect(path);

	if (err == EACCES || err == EPERM)
		return scl_error(
		    SC_ERR_CONNECT,
		    "cannot reach the daemon at %s: %s for uid %u (the daemon admits "
		    "its own user and the members of its ctl_group, through its "
		    "runtime directory's and its socket's permissions)",
		    path, strerror(err), (unsigned)geteuid());
	/* no socket yet, or a stale one: a daemon starting may bind it within the handshake's
	 * wait, which then says what it found */
	return SC_OK;
}

/* Why a handshake went unanswered, as best we can tell. */
static sc_status_t explain_no_answer(const sc_client_t *c, int timeout_ms)
{
	const char *path = strncmp(c->endpoint, "ipc://", 6) == 0 ? c->endpoint + 6 : NULL;
	struct stat st;

	if (path && stat(path, &st) < 0)
		return scl_error(SC_ERR_CONNECT,
				 "cannot reach the daemon: no socket at %s (%s); "
				 "is sparsecommd running?",
				 path, strerror(errno));
	if (path && try_connect(path) == ECONNREFUSED) /* a hung daemon's queue takes it */
		return scl_error(SC_ERR_CONNECT,
				 "no daemon listens at %s (connection refused): the socket "
				 "file is left from a daemon that stopped; is sparsecommd "
				 "running?",
				 path);
	return scl_error(SC_ERR_TIMEOUT,
			 "the daemon at %s did not answer the handshake within "
			 "%d ms",
			 c->endpoint, timeout_ms);
}

SC_API sc_status_t sc_config_set(sc_client_t *client, const char *key, const char *value)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__ConfigSet set = SPARSECOMM__CONFIG_SET__INIT;
	char what[300];

	if (!client || !key || !value)
		return scl_error(SC_ERR_INVALID, "sc_config_set: NULL client, key or value");
	snprintf(what, sizeof(what), "rank %d: config set %.100s %.100s", client->rank, key,
		 value);
	set.key = (char *)key;
	set.value = (char *)value;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_SET;
	msg.config_set = &set;
	sc_status_t st = scl_enter_call(client, what);
	if (st != SC_OK)
		return st;
	return scl_left(client, scl_client_call_ok(client, &msg, what));
}

sc_status_t scl_client_call_ok(sc_client_t *c, Sparsecomm__ClientMsg *msg, const char *what)
{
	Sparsecomm__DaemonMsg *reply = NULL;
	sc_status_t st = scl_client_call(c, msg, 0, what, &reply);
	if (st == SC_OK && reply->body_case != SPARSECOMM__DAEMON_MSG__BODY_OK)
		st = scl_error(SC_ERR_PROTOCOL, "%s: unexpected reply (body %d)", what,
			       (int)reply->body_case);
	if (reply)
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	return st;
}

SC_API const char *sc_daemon_built(const sc_client_t *client)
{
	return client ? client->built : "";
}

#ifndef SC_BUILT_FEATURES
#define SC_BUILT_FEATURES "tcp"
#endif

SC_API const char *sc_built(void)
{
	return SC_BUILT_FEATURES;
}

/* Milliseconds from now to deadline (scl_deadline_after's), at least 0. */
static int ms_until(const struct timespec *deadline)
{
	struct timespec now;
	long long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long)(deadline->tv_sec - now.tv_sec) * 1000 +
	     (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms > 0 ? (ms < INT_MAX ? (int)ms : INT_MAX) : 0;
}

/* The hello, then the submit channel's binding, both by deadline: sc_connect's timeout_ms
 * is one deadline for the whole handshake. */
static sc_status_t client_hello(sc_client_t *c, const struct timespec *deadline, int timeout_ms,
				int local_rank)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Hello hello = SPARSECOMM__HELLO__INIT;
	Sparsecomm__DaemonMsg *reply = NULL;
	Sparsecomm__HelloReply *hr;
	char what[SCL_ERR_MAX];
	sc_status_t st;

	hello.protocol_version = SC_PROTOCOL_VERSION;
	hello.pid = getpid();
	hello.local_rank = local_rank;
	hello.role = c->role;
	hello.header_completion = 1; /* op_fast: a success read from the header */
	/* an operation's acceptance is not read (io_dispatch): only a refusal is answered */
	hello.silent_accept = 1;
	/* a trainer's requests on the submit channel (submit.c), unless told not to */
	hello.submit_channel = c->role == SPARSECOMM__ROLE__ROLE_TRAINER &&
			       !(getenv("SPARSECOMM_SUBMIT_CHANNEL") &&
				 !strcmp(getenv("SPARSECOMM_SUBMIT_CHANNEL"), "0"));
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO;
	msg.hello = &hello;
	snprintf(what, sizeof(what), "handshake with the daemon at %s", c->endpoint);
	st = scl_client_call(c, &msg, ms_until(deadline) > 0 ? ms_until(deadline) : 1, what,
			     &reply);
	if (st == SC_ERR_TIMEOUT)
		return explain_no_answer(c, timeout_ms);
	if (st != SC_OK)
		return st;
	if (reply->body_case != SPARSECOMM__DAEMON_MSG__BODY_HELLO) {
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
		return scl_error(SC_ERR_PROTOCOL, "%s: unexpected reply (body %d)", what,
				 (int)reply->body_case);
	}
	hr = reply->hello;
	if (hr->protocol_version != SC_PROTOCOL_VERSION) {
		scl_error(SC_ERR_VERSION,
			  "%s: the daemon speaks protocol version %u, this library "
			  "version %d",
			  what, hr->protocol_version, SC_PROTOCOL_VERSION);
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
		return SC_ERR_VERSION;
	}
	pthread_mutex_lock(&c->mu);
	c->rank = hr->rank;
	c->size = hr->size;
	c->local_rank = hr->local_rank;
	c->local_size = hr->local_size;
	c->node_rank = hr->node_rank;
	c->node_count = hr->node_count;
	c->built[0] = '\0';
	for (size_t i = 0; i < hr->n_built; i++) {
		size_t at = strlen(c->built);
		snprintf(c->built + at, sizeof(c->built) - at, "%s%.31s", at ? " " : "",
			 hr->built[i]);
	}
	c->connected = 1;
	pthread_mutex_unlock(&c->mu);
	/* bound here, before any other request exists: every one after the hello then goes
	 * over the channel (submit.c); one the daemon refuses leaves the control socket's */
	st = SC_OK;
	c->submit_batchable = hr->submit_batch;
	if (hello.submit_channel && hr->submit_path && *hr->submit_path && hr->submit_token.len)
		st = scl_submit_open(c, hr->submit_path, hr->submit_token.data,
				     hr->submit_token.len, ms_until(deadline), timeout_ms);
	if (st != SC_OK && st != SC_ERR_TIMEOUT) {
		scl_log(SCL_LOG_WARN, "rank %d: %s; requests go over the control socket",
			c->rank, sc_last_error());
		st = SC_OK;
	}
	sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	return st; /* a token sent and not answered: the daemon may have bound it */
}

sc_status_t scl_client_open(const char *socket_path, int timeout_ms, int role,
			    sc_client_t **client_p)
{
	pthread_condattr_t ca;
	sc_client_t *c;
	int local_rank = -1;
	sc_status_t st;
	char fallback[PATH_MAX + 16], job_socket[PATH_MAX * 2 + 16];
	struct timespec deadline;

	if (!client_p)
		return scl_error(SC_ERR_INVALID, "sc_connect: client_p is NULL");
	if (timeout_ms <= 0)
		timeout_ms = SCL_DEFAULT_TMO_MS;
	if (role == SPARSECOMM__ROLE__ROLE_TRAINER) {
		int sched_local;
		if ((st = local_rank_from_env(&local_rank)) ||
		    (st = scl_job_socket(!socket_path, timeout_ms, job_socket,
					 sizeof(job_socket), &sched_local)))
			return st;
		if (job_socket[0])
			socket_path = job_socket;
		if (local_rank < 0)
			local_rank =
			    sched_local; /* the scheduler's, unless SPARSECOMM_LOCAL_RANK */
	}
	if (!socket_path)
		socket_path = sc_socket_default(fallback, sizeof(fallback));
	/* the handshake's one deadline (a job's daemon was waited for above, apart) */
	deadline = scl_deadline_after(timeout_ms);
	c = calloc(1, sizeof(*c));
	if (!c)
		return scl_error(SC_ERR_NOMEM, "sc_connect: out of memory");
	c->wake_fd = c->submit_fd = -1;
	c->role = role;
	c->rank = c->size = c->local_rank = c->local_size = -1;
	c->node_rank = c->node_count = -1;
	c->sendq_tail = &c->sendq;
	c->held_tail = &c->held;
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_cond_init(&c->send_cv, &ca); /* submit.c's goodbye waits with a deadline */
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->send_mu, NULL);
	c->owner_pid = getpid();
	st = endpoint_of(socket_path, c->endpoint, sizeof(c->endpoint));
	if (st != SC_OK)
		goto err_destroy;
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0) {
		st = scl_error(SC_ERR_SYSTEM, "eventfd: %s", strerror(errno));
		goto err_destroy;
	}
	/* ZeroMQ retries an ipc connection that fails, silently: a refusal would take the
	 * whole handshake timeout to show, and then without its reason */
	if (strncmp(c->endpoint, "ipc://", 6) == 0 &&
	    (st = scl_probe_socket(c->endpoint + 6)) != SC_OK)
		goto err_destroy;
	st = client_sockets(c);
	if (st != SC_OK)
		goto err_destroy;
	if (pthread_create(&c->io_thread, NULL, io_main, c) != 0) {
		st = scl_error(SC_ERR_SYSTEM, "cannot start the client's I/O thread");
		goto err_destroy;
	}
	c->io_started = 1;
	st = client_hello(c, &deadline, timeout_ms, local_rank);
	if (st != SC_OK)
		goto err_destroy;
	scl_log(SCL_LOG_INFO, "rank %d of %d (local %d of %d) connected to %s", c->rank,
		c->size, c->local_rank, c->local_size, c->endpoint);
	*client_p = c;
	return SC_OK;

err_destroy:
	scl_client_destroy(c, 0, 0);
	return st;
}

SC_API sc_status_t sc_connect(const char *socket_path, int timeout_ms, sc_client_t **client_p)
{
	return scl_client_open(socket_path, timeout_ms, SPARSECOMM__ROLE__ROLE_TRAINER,
			       client_p);
}

SC_API int sc_rank(const sc_client_t *client)
{
	return client ? client->rank : -1;
}

SC_API int sc_size(const sc_client_t *client)
{
	return client ? client->size : -1;
}

SC_API int sc_local_rank(const sc_client_t *client)
{
	return client ? client->local_rank : -1;
}

SC_API int sc_local_size(const sc_client_t *client)
{
	return client ? client->local_size : -1;
}

/* ---- collecting an operation ----------------------------------------------------- */

/* How a collected operation of a cuda tensor that succeeded waits for the GPU. */
typedef enum {
	GPU_SYNC,	 /* on the host, for the done event (sc_wait, sc_poll) */
	GPU_STREAM_WAIT, /* by making a stream of the caller wait on it (sc_stream_wait) */
} gpu_wait_t;

/*
 * Collects an operation: waits for it up to timeout_ms (< 0: no limit, 0: not at all)
 * and releases it once it has ended. not_done is what to return while it still runs. A
 * cuda tensor's result is in its buffer once the daemon's done event has happened on the
 * GPU: gw says how that is waited for (the driver is called without the client's lock).
 */
static sc_status_t op_collect(sc_client_t *c, sc_handle_t h, int timeout_ms,
			      sc_status_t not_done, gpu_wait_t gw, void *stream, int *value_p)
{
	struct timespec deadline;
	struct scl_op *o;
	sc_tensor_t *t;
	sc_status_t st;
	char what[SCL_NAME_MAX + 64];

	if (!c)
		return scl_error(SC_ERR_INVALID, "wait: NULL client");
	/* a request held (sc_submit_batch) is sent before its wait; where another thread's
	 * send holds the channel, that thread sends it (a poll or a short wait does not
	 * block behind a full socket) */
	scl_submit_flush(c, 0);
	if (timeout_ms > 0)
		deadline = scl_deadline_after(timeout_ms);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		o = op_find_held(c, h);
		if (!o || o->done)
			break;
		if (timeout_ms == 0) {
			op_fast(c, o, NULL);
			break;
		}
		if (op_sleep(c, o, timeout_ms > 0 ? &deadline : NULL) == ETIMEDOUT) {
			o = op_find_held(c, h);
			if (o && !o->done)
				op_fast(c, o, NULL);
			break;
		}
	}
	if (!o) {
		pthread_mutex_unlock(&c->mu);
		return scl_error(SC_ERR_INVALID,
				 "rank %d: unknown handle %llu (never "
				 "issued, already collected, or abandoned)",
				 c->rank, (unsigned long long)h);
	}
	if (!o->done) {
		if (not_done == SC_ERR_TIMEOUT)
			scl_error(SC_ERR_TIMEOUT, "rank %d: %s still in progress after %d ms",
				  c->rank, op_what(o, what, sizeof(what)), timeout_ms);
		pthread_mutex_unlock(&c->mu);
		return not_done;
	}
	st = o->status;
	t = o->tensor;
	const char *kind = o->kind ? o->kind : "allreduce";
	if (value_p && st == SC_OK)
		*value_p = (int)o->value;
	if (st != SC_OK)
		scl_error(st, "%s", o->error ? o->error : sc_status_message(st));
	op_release(c, o);
	pthread_mutex_unlock(&c->mu);
	if (st != SC_OK || !t || !t->cuda) /* a barrier has no tensor */
		return st;
	/* the tensor lives until it is released (which cuts it out of its ended operations
	 * first, scl_op_detach, and which a wait may not overlap) or the client is destroyed,
	 * which waits for this call to leave (finalize.c) */
	snprintf(what, sizeof(what), "rank %d: result of the %s of tensor '%s'", c->rank, kind,
		 t->name);
	if (gw == GPU_STREAM_WAIT)
		return scl_cuda_stream_wait_done(t->cuda, stream, what);
	return scl_cuda_sync_done(t->cuda, what);
}

SC_API sc_status_t sc_poll(sc_client_t *client, sc_handle_t handle)
{
	sc_status_t st = scl_enter_call(client, "poll");

	if (st != SC_OK)
		return st;
	return scl_left(client,
			op_collect(client, handle, 0, SC_IN_PROGRESS, GPU_SYNC, NULL, NULL));
}

SC_API sc_status_t sc_wait(sc_client_t *client, sc_handle_t handle, int timeout_ms)
{
	sc_status_t st = scl_enter_call(client, "wait");

	if (st != SC_OK)
		return st;
	return scl_left(client, op_collect(client, handle, timeout_ms, SC_ERR_TIMEOUT, GPU_SYNC,
					   NULL, NULL));
}

SC_API sc_status_t sc_stream_wait(sc_client_t *client, sc_handle_t handle, void *stream,
				  int timeout_ms)
{
	sc_status_t st = scl_enter_call(client, "stream wait");

	if (st != SC_OK)
		return st;
	return scl_left(client, op_collect(client, handle, timeout_ms, SC_ERR_TIMEOUT,
					   GPU_STREAM_WAIT, stream, NULL));
}

/* sc_wait for an operation whose handle nobody else holds: on a timeout its completion
 * frees it. */
SC_API void sc_abandon(sc_client_t *client, sc_handle_t handle)
{
	struct scl_op *o;

	if (scl_enter_call(client, "abandon") != SC_OK)
		return;		     /* sc_finalize frees every operation */
	scl_submit_flush(client, 0); /* a request held (sc_submit_batch) still goes */
	pthread_mutex_lock(&client->mu);
	o = op_find(client, handle);
	if (o && o->done)
		op_release(client, o);
	else if (o)
		o->orphan = 1;
	pthread_mutex_unlock(&client->mu);
	scl_leave(client);
}

sc_status_t scl_wait_owned(sc_client_t *client, sc_handle_t h, int timeout_ms)
{
	sc_status_t st = sc_wait(client, h, timeout_ms);

	if (st == SC_ERR_TIMEOUT)
		sc_abandon(client, h);
	return st;
}

/* ---- barrier ------------------------------------------------------------------------- */

/* The trainer's barrier (or join) that it has not collected yet (sc_wait / sc_poll), done
 * or not, else (orphan) one it abandoned that has not ended yet (an abandoned one is freed
 * as it ends); NULL when neither. Called with c->mu held. */
static const struct scl_op *tensorless_outstanding(const sc_client_t *c, int join, int orphan)
{
	for (int b = 0; b < SCL_OP_BUCKETS; b++)
		for (const struct scl_op *o = c->ops[b]; o; o = o->next)
			if (o->tensorless && o->join == join && !o->orphan == !orphan)
				return o;
	return NULL;
}

/* Why the trainer may not start a barrier now (its error text set), or SC_OK. c->mu held. */
static sc_status_t barrier_refusal(sc_client_t *c)
{
	const struct scl_op *gone;

	if (scl_client_check(c) != SC_OK)
		return scl_error(c->dead, "rank %d: barrier: %s", c->rank, c->dead_msg);
	/* the daemons may already have ended the join (a rank left without joining); until
	 * the trainer collects it, it is a joined trainer still */
	if (tensorless_outstanding(c, 1, 0))
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: barrier refused: it has joined (a join not yet "
		    "collected), and enters no barrier until every rank has joined",
		    c->rank);
	/* the daemon may already have completed the first one (every other rank had entered
	 * it), so only this side can say that the trainer still holds it */
	if (tensorless_outstanding(c, 0, 0))
		return scl_error(SC_ERR_BUSY,
				 "rank %d: barrier: a barrier is in flight (wait for it first)",
				 c->rank);
	/* the daemon holds one barrier per trainer: an abandoned one until it ends */
	if ((gone = tensorless_outstanding(c, 0, 1)))
		return scl_error(
		    SC_ERR_BUSY,
		    "rank %d: barrier: the barrier abandoned before (handle %llu) has not "
		    "ended "
		    "yet (it ends once every rank has entered it, or at the daemons' stall "
		    "timeout); retry then",
		    c->rank, (unsigned long long)gone->handle);
	return SC_OK;
}

/* Starts a barrier or (join) a join: an operation without a tensor. */
static sc_status_t tensorless_start(sc_client_t *c, int join, sc_handle_t *handle_p)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Barrier b = SPARSECOMM__BARRIER__INIT;
	Sparsecomm__TrainerJoin j = SPARSECOMM__TRAINER_JOIN__INIT;
	const char *what = join ? "join" : "barrier";
	struct scl_op *o, **slot;
	struct scl_frame *f;
	sc_status_t st;
	sc_handle_t h;

	if (!c || !handle_p)
		return scl_error(SC_ERR_INVALID, "%s: NULL client or handle_p", what);
	if ((st = scl_forked_refusal(c, what)) != SC_OK)
		return st;
	h = scl_client_next_id(c);
	msg.seq = h;
	if (join) {
		j.handle = h;
		msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_TRAINER_JOIN;
		msg.trainer_join = &j;
	} else {
		b.handle = h;
		msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_BARRIER;
		msg.barrier = &b;
	}
	o = calloc(1, sizeof(*o));
	f = scl_frame_pack(&msg);
	if (!o || !f) {
		free(o);
		free(f);
		return scl_error(SC_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
	}
	o->handle = h;
	o->tensorless = 1;
	o->join = join;
	o->status = SC_IN_PROGRESS;
	pthread_mutex_lock(&c->mu);
	st = join ? scl_client_check(c) : barrier_refusal(c);
	if (st != SC_OK) {
		if (join)
			st = scl_error(c->dead, "rank %d: %s: %s", c->rank, what, c->dead_msg);
		pthread_mutex_unlock(&c->mu);
		free(o);
		free(f);
		return st;
	}
	slot = &c->ops[h % SCL_OP_BUCKETS];
	o->next = *slot;
	*slot = o;
	scl_client_enqueue(c, f); /* releases c->mu */
	*handle_p = h;
	return SC_OK;
}

SC_API sc_status_t sc_barrier_async(sc_client_t *client, sc_handle_t *handle_p)
{
	sc_status_t st = scl_enter_call(client, "barrier");

	return st != SC_OK ? st : scl_left(client, tensorless_start(client, 0, handle_p));
}

SC_API sc_status_t sc_join_async(sc_client_t *client, sc_handle_t *handle_p)
{
	sc_status_t st = scl_enter_call(client, "join");

	return st != SC_OK ? st : scl_left(client, tensorless_start(client, 1, handle_p));
}

SC_API sc_status_t sc_join_result(sc_client_t *client, sc_handle_t handle, int timeout_ms,
				  int *last_rank_p)
{
	sc_status_t st = scl_enter_call(client, "join");

	if (st != SC_OK)
		return st;
	return scl_left(client, op_collect(client, handle, timeout_ms, SC_ERR_TIMEOUT, GPU_SYNC,
					   NULL, last_rank_p));
}

/* A join that timed out stays the trainer's, not abandoned: the trainer is joined on the
 * daemons whatever it waits for, so the next sc_join collects that join (done or not)
 * rather than starting a second one, which would be refused as "already joined". */
SC_API sc_status_t sc_join(sc_client_t *client, int timeout_ms, int *last_rank_p)
{
	sc_handle_t h = 0;
	const struct scl_op *held;
	sc_status_t st = scl_enter_call(client, "join");

	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&client->mu);
	if ((held = tensorless_outstanding(client, 1, 0)))
		h = held->handle;
	pthread_mutex_unlock(&client->mu);
	if (!h)
		st = sc_join_async(client, &h);
	if (st == SC_OK)
		st = sc_join_result(client, h, timeout_ms, last_rank_p);
	return scl_left(client, st);
}

SC_API sc_status_t sc_barrier(sc_client_t *client, int timeout_ms)
{
	sc_handle_t h;
	sc_status_t st = scl_enter_call(client, "barrier");

	if (st != SC_OK)
		return st;
	st = sc_barrier_async(client, &h);
	if (st == SC_OK)
		st = scl_wait_owned(client, h, timeout_ms);
	return scl_left(client, st);
}
