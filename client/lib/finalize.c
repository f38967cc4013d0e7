/*
 * finalize.c: sc_finalize, which other threads' calls on the client may overlap.
 *
 * Other threads may be inside the library on this client when sc_finalize is
 * called: asleep in a wait, sending a request, mapping a tensor. Each public call that
 * touches what sc_finalize destroys counts itself in c->calls (one atomic add on entry, one
 * subtract on exit: no lock on the hot path), and sc_finalize marks the client closing in
 * the same word: later calls are refused with SC_ERR_SHUTDOWN, and client_fail ends every
 * wait and request at once. sc_finalize then waits, at most FINALIZE_WAIT_MS, for the
 * calls still counted to leave, and destroys the client; when one is still inside by then
 * (a GPU wait, a log callback that blocks), it marks the client orphaned and returns, and
 * the last call to leave destroys it. Who destroys is decided by one compare-and-swap on
 * the word, so exactly one does, and a call that has left touches nothing of the client
 * but the process-wide fin_cv that wakes sc_finalize.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/*
 * The structures of the last SCL_GRAVE_SLOTS clients destroyed after sc_finalize, kept (all
 * they held already freed, their calls marked SCL_CALLS_GONE) so that a call that began
 * before sc_finalize but had not been counted yet when the client was destroyed counts
 * itself on memory that is still there, and is refused, instead of writing freed memory.
 */
#define SCL_GRAVE_SLOTS 16
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;
static sc_client_t *grave[SCL_GRAVE_SLOTS];
static int grave_next;

void scl_client_bury(sc_client_t *c)
{
	sc_client_t *old;

	pthread_mutex_lock(&grave_mu);
	old = grave[grave_next];
	grave[grave_next] = c;
	grave_next = (grave_next + 1) % SCL_GRAVE_SLOTS;
	pthread_mutex_unlock(&grave_mu);
	free(old);
}

#define FINALIZE_WAIT_MS 2000

static pthread_mutex_t fin_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fin_cv;
static pthread_once_t fin_once = PTHREAD_ONCE_INIT;

static void fin_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fin_cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* Claims the destruction of c if its word still reads *seen (else *seen gets what it
 * reads); 1 when this thread is to destroy it. */
static int calls_claim(sc_client_t *c, uint64_t *seen)
{
	return __atomic_compare_exchange_n(&c->calls, seen, SCL_CALLS_CLOSING | SCL_CALLS_GONE,
					   0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void scl_leave_closing(sc_client_t *c, uint64_t left)
{
	if (left & SCL_CALLS_GONE)
		return;
	if ((left & SCL_CALLS_COUNT) == 0 && (left & SCL_CALLS_ORPHAN)) {
		/* sc_finalize has returned: the last call out destroys (the parent's only: a
		 * forked child's copy keeps the parent's locks and threads) */
		if (getpid() == c->owner_pid && calls_claim(c, &left))
			scl_client_destroy(c, c->bye_linger_ms, 1);
		return;
	}
	if ((left & SCL_CALLS_COUNT) <= 1) { /* sc_finalize's own count: it may wait */
		pthread_once(&fin_once, fin_init);
		pthread_mutex_lock(&fin_mu);
		pthread_cond_broadcast(&fin_cv);
		pthread_mutex_unlock(&fin_mu);
	}
}

sc_status_t scl_enter_call(const sc_client_t *c, const char *what)
{
	if (!c)
		return scl_error(SC_ERR_INVALID, "%s: NULL client", what);
	/* in a child forked after sc_connect, before any lock: one that a thread of the
	 * parent held at the fork is never released in the child */
	sc_status_t st = scl_forked_refusal(c, what);
	if (st != SC_OK)
		return st;
	if (!scl_enter(c))
		return SC_OK;
	scl_leave(c);
	return scl_error(SC_ERR_SHUTDOWN, "%s: the client was finalized (sc_finalize)", what);
}

/* Sends the goodbye (bounded: FINALIZE_WAIT_MS for the sends before it on the submit
 * channel) and fails everything that waits, so every call inside leaves. */
static void client_close(sc_client_t *c)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Empty bye = SPARSECOMM__EMPTY__INIT;
	struct scl_frame *f;

	msg.seq = scl_client_next_id(c);
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_BYE;
	msg.bye = &bye;
	f = scl_frame_pack(&msg);
	pthread_mutex_lock(&c->mu);
	c->stopping = 1; /* the I/O thread flushes what is queued, the goodbye included */
	if (c->dead != SC_OK || !f) {
		scl_client_fail(c, SC_ERR_SHUTDOWN, "the client was finalized");
		pthread_mutex_unlock(&c->mu);
		free(f);
		return;
	}
	/* failed first, under the lock the goodbye's ticket is taken under: no request of
	 * another thread follows the goodbye */
	scl_client_fail(c, SC_ERR_SHUTDOWN, "the client was finalized");
	c->bye_linger_ms = SCL_BYE_LINGER_MS;
	if (c->submit_fd >= 0)
		scl_submit_goodbye(c, f, FINALIZE_WAIT_MS); /* releases c->mu */
	else
		scl_client_enqueue(c, f); /* releases c->mu */
}

/* Waits at most FINALIZE_WAIT_MS for every call but sc_finalize's own to leave; then
 * destroys the client, or leaves that to the last call out. */
static void calls_drain(sc_client_t *c)
{
	struct timespec deadline = scl_deadline_after(FINALIZE_WAIT_MS);
	uint64_t seen;
	int rank = c->rank;

	pthread_once(&fin_once, fin_init);
	pthread_mutex_lock(&fin_mu);
	while ((__atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) & SCL_CALLS_COUNT) > 1 &&
	       pthread_cond_timedwait(&fin_cv, &fin_mu, &deadline) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&fin_mu);
	seen = __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE);
	for (;;) {
		uint64_t n = seen & SCL_CALLS_COUNT;

		if (n == 1 && calls_claim(c, &seen)) {
			scl_client_destroy(c, c->bye_linger_ms, 1);
			return;
		}
		if (n > 1 &&
		    __atomic_compare_exchange_n(&c->calls, &seen, (seen - 1) | SCL_CALLS_ORPHAN,
						0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			scl_log(
			    SCL_LOG_WARN,
			    "rank %d: sc_finalize: %llu calls still in the library after %d "
			    "ms; the last to leave frees the client",
			    rank, (unsigned long long)(n - 1), FINALIZE_WAIT_MS);
			return;
		}
	}
}

SC_API sc_status_t sc_finalize(sc_client_t *client)
{
	if (!client)
		return SC_OK;
	if (getpid() != client->owner_pid) {
		scl_client_forget_in_child(client);
		return SC_OK;
	}
	if (scl_enter(client) ||
	    (__atomic_fetch_or(&client->calls, SCL_CALLS_CLOSING, __ATOMIC_ACQ_REL) &
	     SCL_CALLS_CLOSING)) {
		scl_leave(client);
		return scl_error(SC_ERR_INVALID,
				 "sc_finalize: the client is already finalized (by another "
				 "thread, or before)");
	}
	client_close(client);
	calls_drain(client);
	return SC_OK;
}
