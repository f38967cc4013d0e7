/*
 * ctl.c: the control socket, trainer and sparsectl sessions, and the request handlers.
 *
 * ZeroMQ's descriptor (ZMQ_FD) is edge-triggered: the uv_poll callback and the loop's
 * prepare hook both drain the socket while ZMQ_EVENTS says it is readable, so a message
 * that arrived during a send is never left waiting for the next edge.
 */
#include "ctl/ctl.h"
#include "ctl/collective.h"
#include "ctl/ctl_int.h"
#include "ctl/submit.h"
#include "ctl_notice.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "coll/job.h"
#include "ctl/peer.h"
#include "ctl_notice.h"
#include "device/device.h"
#include "shm_wake.h"
#include "transport/transport.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/timeline.h"
#include "util/zmsg.h"

#define CTL_MAX_CONTROL 64 /* sparsectl sessions kept; the oldest is dropped first */
/* Requests handled in one go: the rest wait for the next turn of the loop, so a burst
 * (thousands of registrations) never keeps the heartbeats' timers waiting. */
#define CTL_DRAIN_BUDGET 64
/* How long after a trainer's process ended its last messages may still arrive. */
#define CTL_EXIT_GRACE_MS 100
/*
 * What one client may have queued and unread. Messages (ZMQ_SNDHWM of each connection,
 * with ZMQ_ROUTER_MANDATORY so that a full queue is an error, not a silent drop): a
 * trainer's unsolicited messages are at most one completion per registration (65536 at
 * most) and its barrier and join, and the library reads them as they come; every other
 * message answers a request. Reports (status, stats, configuration, pending: the replies
 * that can be large): CTL_REPORT_BACKLOG_BYTES sent since the client was last seen to
 * have read everything. A client over either is dropped (see session_overflow).
 */
#define CTL_SEND_HWM		 (65536 + 1024)
#define CTL_REPORT_BACKLOG_BYTES (16u << 20)

/* ---- sending ------------------------------------------------------------------------ */

static scd_session_t *session_find(scd_ctl_t *ctl, const uint8_t *ident, size_t len);
static void session_overflow(scd_ctl_t *ctl, scd_session_t *s, const char *what);

static int is_report(const Sparsecomm__DaemonMsg *m)
{
	return m->body_case == SPARSECOMM__DAEMON_MSG__BODY_STATUS ||
	       m->body_case == SPARSECOMM__DAEMON_MSG__BODY_STATS ||
	       m->body_case == SPARSECOMM__DAEMON_MSG__BODY_CONFIG ||
	       m->body_case == SPARSECOMM__DAEMON_MSG__BODY_PENDING;
}

/* Sends m to the client ident. A session's client that has too much unread (a full queue,
 * or reports over CTL_REPORT_BACKLOG_BYTES) is dropped instead; one whose connection is
 * gone ends as if it had exited. */
static void send_to(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len,
		    const Sparsecomm__DaemonMsg *m)
{
	if (!ctl->sock)
		return;
	scd_session_t *s = session_find(ctl, ident, ident_len);
	if (s && s->dropped)
		return; /* ending at the next tick */
	size_t n = sparsecomm__daemon_msg__get_packed_size(m);
	if (s && is_report(m)) {
		if (s->report_bytes && s->report_bytes + n > CTL_REPORT_BACKLOG_BYTES) {
			session_overflow(ctl, s, "reports");
			return;
		}
		s->report_bytes += n;
	}
	uint8_t stackbuf[4096], *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
	if (!buf)
		return;
	sparsecomm__daemon_msg__pack(m, buf);
	int rc = zmq_send(ctl->sock, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (rc >= 0)
		rc = zmq_send(ctl->sock, buf, n, ZMQ_DONTWAIT);
	int err = errno;
	if (buf != stackbuf)
		free(buf);
	if (rc >= 0)
		return;
	if (s && err == EAGAIN) {
		session_overflow(ctl, s, "messages");
	} else if (s && err == EHOSTUNREACH) {
		if (!s->exited_ms) /* its connection is gone: it ends at the next tick */
			s->exited_ms = scd_now_ms(), s->gone = "closed its connection";
	} else {
		scd_debug(SCD_SUB_CTL, "reply of %zu bytes dropped: %s", n, zmq_strerror(err));
	}
}

/* Text for a trainer: msg, or a copy in buf with its process sets' qualified names shown
 * (util/psname.h). */
static char *shown(const char *msg, char *buf, size_t cap)
{
	if (!msg || !strchr(msg, SCD_PSET_SEP))
		return (char *)(msg ? msg : "");
	snprintf(buf, cap, "%s", msg);
	scd_pset_show(buf, cap);
	return buf;
}

static void send_error(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len, uint64_t seq,
		       sc_status_t st, const char *msg)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__ErrorReply e = SPARSECOMM__ERROR_REPLY__INIT;
	char text[1024];
	e.status = st;
	e.message = shown(msg, text, sizeof(text));
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_ERROR;
	m.error = &e;
	send_to(ctl, ident, ident_len, &m);
}

static void send_ok(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__Empty e = SPARSECOMM__EMPTY__INIT;
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_OK;
	m.ok = &e;
	send_to(ctl, s->ident, s->ident_len, &m);
}

/* A completion carrying a value (a join's last rank). */
void scd_ctl_send_completion_value(scd_ctl_t *ctl, scd_session_t *s, uint64_t handle,
				   sc_status_t st, const char *error, int64_t value)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__Completion c = SPARSECOMM__COMPLETION__INIT;
	char text[1024];
	c.handle = handle;
	c.status = st;
	c.error = shown(error, text, sizeof(text));
	c.value = value;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_COMPLETION;
	m.completion = &c;
	send_to(ctl, s->ident, s->ident_len, &m);
}

/* A tensor's completion; counts (n of them, or NULL) are an alltoall's received counts. */
void scd_ctl_send_completion(scd_ctl_t *ctl, scd_session_t *s, uint64_t handle, sc_status_t st,
			     const char *error, uint64_t *counts, int n)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__Completion c = SPARSECOMM__COMPLETION__INIT;
	char text[1024];
	c.handle = handle;
	c.status = st;
	c.error = shown(error, text, sizeof(text));
	c.counts = counts;
	c.n_counts = counts ? (size_t)n : 0;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_COMPLETION;
	m.completion = &c;
	send_to(ctl, s->ident, s->ident_len, &m);
}

void scd_ctl_send(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len,
		  const Sparsecomm__DaemonMsg *m)
{
	send_to(ctl, ident, ident_len, m);
}

void scd_ctl_send_error(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len, uint64_t seq,
			sc_status_t st, const char *msg)
{
	send_error(ctl, ident, ident_len, seq, st, msg);
}

void scd_ctl_send_ok(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq)
{
	send_ok(ctl, s, seq);
}

/* ---- completions -------------------------------------------------------------------- */

/*
 * A success with no counts to return, to a trainer whose hello asked for it: the handle
 * goes into the tensor's header and the trainer's waiting thread is woken now
 * (proto/shm_wake.h), and no Completion message follows. Returns 1 when that was done; 0
 * when there is no header or the trainer reads messages only (the message tells);
 * -1 when the header's page was lost meanwhile (lost says how: the operation then
 * completes with that error, as one during which the loss happened does).
 */
static int complete_in_header(scd_reg_t *r, char *lost, size_t len)
{
	if (!scd_reg_header_tells(r))
		return 0;
	sc_shm_done(r->hdr, r->handle);
	return scd_tensors_mem_lost(r, lost, len) ? -1 : 1;
}

static void complete(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t st, const char *error,
		     uint64_t woke);

void scd_ctl_complete(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t st, const char *error)
{
	complete(ctl, nt, st, error, 0);
}

void scd_ctl_complete_item(scd_ctl_t *ctl, const scd_job_item_t *it, sc_status_t st,
			   const char *error)
{
	scd_ntensor_t *nt = it->nt;
	uint64_t woke = 0; /* by local rank: the operation the engine ended in its header */
	for (int k = 0; k < it->n_src; k++) {
		const scd_job_src_t *s = &it->src[k];
		int l = s->local_rank;
		if (s->woke && l >= 0 && l < SCD_MAX_LOCAL && nt->slot[l] &&
		    nt->slot[l]->handle == s->done_handle)
			woke |= UINT64_C(1) << l;
	}
	complete(ctl, nt, st, error, woke);
}

void scd_ctl_collect(scd_ctl_t *ctl)
{
	if (ctl && ctl->up->collect)
		ctl->up->collect(ctl->d->world);
}

/* Whether r's operation in flight was ended in its header already: the engine told the
 * trainer of its success as the job delivered (engine.h), and the job's hand-back has not
 * come yet (a world that re-formed meanwhile fails the job). The word is the trainer's to
 * write too, so a trainer can only make this true for itself. */
static int told_in_header(const scd_reg_t *r)
{
	return scd_reg_header_tells(r) && sc_shm_is_done(r->hdr, r->handle);
}

/* scd_ctl_complete; woke: the local ranks whose operation (the one in flight) the engine
 * ended already in its header, a success (engine.h): nothing more is told them, unless
 * their memory was lost meanwhile (the header's wake may have gone to the lost pages). A
 * failure finds the same in the header of an operation whose success the engine told
 * before the failure came (a re-form, a lost coordinator, a shutdown: each fences the
 * engine first, so none is told after): that trainer keeps its success. */
static void complete(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t st, const char *error,
		     uint64_t woke)
{
	scd_reg_t *zombies[SCD_MAX_LOCAL];
	int nz = 0, lost_n = 0; /* trainers told their memory was lost: an error for them */
	int failed_n = 0,
	    told_n = 0; /* trainers told st, a failure; told their success before */
	for (int l = 0; l < SCD_MAX_LOCAL; l++) {
		scd_reg_t *r = nt->slot[l];
		if (!r || !r->handle)
			continue;
		char lost[400];
		int told =
		    r->session && (st == SC_OK ? (int)(woke >> l & 1) : told_in_header(r));
		if (told && scd_tensors_mem_lost(r, lost, sizeof(lost))) {
			scd_ctl_send_completion(ctl, r->session, r->handle, SC_ERR_INVALID,
						lost, NULL, 0);
			lost_n++;
		} else if (told)
			; /* ended in its header, a success */
		else if (r->session && st == SC_OK &&
			 scd_tensors_mem_lost(r, lost, sizeof(lost))) {
			scd_ctl_send_completion(ctl, r->session, r->handle, SC_ERR_INVALID,
						lost, NULL, 0);
			lost_n++;
		} else if (r->session) {
			int counts = st == SC_OK && scd_coll_desc(r->coll.kind)->counts_back;
			int hdr = st != SC_OK || counts
				      ? 0
				      : complete_in_header(r, lost, sizeof(lost));
			if (hdr < 0) {
				scd_ctl_send_completion(ctl, r->session, r->handle,
							SC_ERR_INVALID, lost, NULL, 0);
				lost_n++;
			} else if (hdr == 0)
				scd_ctl_send_completion(ctl, r->session, r->handle, st, error,
							counts ? r->a2a : NULL, (int)r->a2a_n);
		}
		failed_n += !told && st != SC_OK;
		told_n += told;
		r->handle = 0;
		if (r->zombie)
			zombies[nz++] = r;
	}
	nt->submitted = 0;
	nt->state = SCD_NT_IDLE;
	nt->state_since_ms = scd_now_ms();
	nt->stats.calls++;
	if ((st != SC_OK && (failed_n || !told_n)) || lost_n)
		nt->stats.errors++;
	for (int i = 0; i < nz; i++)
		scd_tensors_release(ctl->tensors, zombies[i]); /* may free nt */
}

const scd_pset_t *scd_ctl_pset(const scd_ctl_t *ctl, uint32_t id)
{
	return ctl ? scd_psets_find(&ctl->psets, id) : NULL; /* none: a world alone */
}

int scd_ctl_pset_count(const scd_ctl_t *ctl)
{
	return ctl ? ctl->psets.n : 0;
}

/* The local submissions a node tensor waits for: every trainer of the node, a joined one
 * counting as having submitted; in a process set, its members on this node, likewise. */
static int local_members(const scd_ctl_t *ctl, const scd_ntensor_t *nt)
{
	if (!nt->pset)
		return ctl->d->local_size - ctl->n_joined;
	const scd_pset_t *p = scd_psets_find(&ctl->psets, nt->pset);
	if (!p)
		return ctl->d->local_size;
	int n = p->n_local;
	for (const scd_session_t *s = ctl->n_joined ? ctl->sessions : NULL; s; s = s->next)
		n -= s->join_handle && s->local_rank >= 0 &&
		     (p->local_mask >> s->local_rank & 1);
	return n;
}

/* A node tensor every local trainer has submitted, a joined one counting as having
 * submitted it, goes to negotiation. */
void scd_ctl_announce_if_ready(scd_ctl_t *ctl, scd_ntensor_t *nt)
{
	if (nt->state != SCD_NT_LOCAL_WAIT || nt->submitted < local_members(ctl, nt))
		return;
	nt->state = SCD_NT_ANNOUNCED;
	nt->state_since_ms = scd_now_ms();
	nt->tl_announced = scd_tl_begin();
	nt->presel_armed = 0; /* armed again by this submission's selection job, if any */
	ctl->up->announce(ctl->d->world, nt);
}

uint64_t scd_ctl_fail_gen(const scd_ctl_t *ctl)
{
	return ctl ? ctl->fail_gen : 0;
}

void scd_ctl_fail_all(scd_ctl_t *ctl, sc_status_t st, const char *error, int idle)
{
	ctl->fail_gen++;
	if (ctl->barrier_waiting) {
		char msg[512];
		snprintf(msg, sizeof(msg), "barrier %llu failed on node %d: %s",
			 (unsigned long long)ctl->barrier_seq + 1, ctl->d->rank, error);
		scd_ctl_barrier_complete(ctl, st, msg);
	}
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors), *next; nt; nt = next) {
		next = nt->all_next;
		if (nt->state != SCD_NT_IDLE) {
			/* running ones too: the engine's result will never be delivered. A
			 * registration released meanwhile goes with the completion, unless a
			 * job may still use its memory: then it is kept */
			for (int l = 0; l < SCD_MAX_LOCAL && !idle; l++)
				if (nt->slot[l])
					nt->slot[l]->zombie = 0;
			char msg[512];
			snprintf(msg, sizeof(msg), "%s of tensor '%s' failed on node %d: %s",
				 scd_coll_name(&nt->coll), nt->name, ctl->d->rank, error);
			scd_ctl_complete(ctl, nt, st, msg);
		}
	}
}

void scd_ctl_unlink_all(scd_ctl_t *ctl)
{
	scd_tensors_unlink_all(ctl->tensors);
	unlink(ctl->d->ctl_path);
	if (ctl->submit_path[0])
		unlink(ctl->submit_path);
}

/*
 * The local trainers that owe nt's failing step: those that have not submitted it, but
 * except (-1: none), those that have joined (they take part with zeros and submit nothing
 * until every rank has joined) and those that have never submitted the name and have been
 * in a barrier since the step began on this node. Every trainer submits the same steps in
 * the same order, barriers among them, so a trainer in a barrier while others submit a
 * step has passed that step: a dead trainer's successor waits in the barrier after the
 * step its predecessor died in (retried while the survivors' submissions of that step
 * wait for it), and its next submission of the name is a later step, which must not be
 * refused as this one. A trainer that has submitted the name before still owes it (one
 * late past a barrier that failed, whose next submission is this step).
 */
static uint64_t owing(const scd_ctl_t *ctl, const scd_ntensor_t *nt, int except)
{
	uint64_t m = 0, began = nt->state == SCD_NT_LOCAL_WAIT ? nt->began_event : UINT64_MAX;
	for (int l = 0; l < ctl->d->local_size; l++) {
		const scd_session_t *s = ctl->by_local[l];
		if (s && (!nt->slot[l] || !nt->slot[l]->submits) &&
		    (s->barrier_handle || s->barrier_left > began))
			continue;
		if (l != except && (!nt->slot[l] || !nt->slot[l]->handle))
			m |= 1ull << l;
	}
	for (const scd_session_t *s = ctl->n_joined ? ctl->sessions : NULL; s; s = s->next)
		if (s->join_handle && s->local_rank >= 0)
			m &= ~(1ull << s->local_rank);
	return m;
}

/* One more failed step of nt owed by the local trainers in mask; the error they get. */
static void carry_add(scd_ntensor_t *nt, uint64_t mask, sc_status_t st)
{
	for (int l = 0; l < SCD_MAX_LOCAL; l++)
		if (mask >> l & 1 && nt->carry.count[l] < UINT16_MAX)
			nt->carry.count[l]++;
	nt->carry.status = st;
}

/* Whether local rank l owes a failed step of nt; if so this submission is it. */
static int carry_take(scd_ntensor_t *nt, int l)
{
	if (!nt->carry.count[l])
		return 0;
	nt->carry.count[l]--;
	return 1;
}

scd_ntensor_t *scd_ctl_tensor(scd_ctl_t *ctl, const char *name)
{
	return scd_tensors_find(ctl->tensors, name);
}

void scd_ctl_fail_tensor(scd_ctl_t *ctl, const char *name, sc_status_t st, const char *error)
{
	scd_ntensor_t *nt = scd_tensors_find(ctl->tensors, name);
	if (!nt)
		return;
	if (nt->state == SCD_NT_LOCAL_WAIT) {
		carry_add(nt, owing(ctl, nt, -1), st);
		snprintf(nt->carry.msg, sizeof(nt->carry.msg), "%s", error);
	}
	if (nt->state == SCD_NT_ANNOUNCED || nt->state == SCD_NT_LOCAL_WAIT)
		scd_ctl_complete(ctl, nt, st, error);
}

/* ---- sessions ----------------------------------------------------------------------- */

static scd_session_t *session_find(scd_ctl_t *ctl, const uint8_t *ident, size_t len)
{
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		if (s->ident_len == len && !memcmp(s->ident, ident, len))
			return s;
	return NULL;
}

static void session_free_cb(uv_handle_t *h)
{
	scd_session_t *s = h->data;
	if (--s->handles == 0)
		free(s);
}

/* Closes what watches the session's process and connection, then frees it. */
static void session_close(scd_session_t *s)
{
	s->closed = 1;
	s->handles++; /* held until all are closing */
	if (s->pidfd >= 0) {
		uv_poll_stop(&s->pidpoll);
		close(s->pidfd);
		s->handles++;
		uv_close((uv_handle_t *)&s->pidpoll, session_free_cb);
	}
	if (s->conn >= 0) {
		uv_poll_stop(&s->connpoll);
		s->handles++;
		uv_close((uv_handle_t *)&s->connpoll, session_free_cb);
		if (s->dropped) /* shut now: its last reply has had the grace to go out */
			shutdown(s->conn, SHUT_RDWR);
		close(s->conn);
	}
	if (s->submit_fd >= 0) {
		uv_poll_stop(&s->submit_poll);
		s->handles++;
		uv_close((uv_handle_t *)&s->submit_poll, session_free_cb);
		close(s->submit_fd);
		s->submit_fd = -1;
	}
	if (--s->handles == 0)
		free(s);
}

/*
 * Drops a session: its submit channel is shut down at once, its control connection when
 * the session ends, at the next tick after CTL_EXIT_GRACE_MS (ZeroMQ then closes it and
 * frees what was queued for it), so that the error reply sent just before the drop, which
 * ZeroMQ's I/O thread writes a moment later, reaches the client rather than being cut off;
 * the session ends as a trainer's death would (its node's operations in flight fail,
 * naming it). Nothing more is read from it meanwhile.
 */
void scd_ctl_session_drop(scd_ctl_t *ctl, scd_session_t *s, const char *why)
{
	char pid[96];
	if (s->dropped)
		return;
	s->dropped = 1;
	snprintf(s->drop_why, sizeof(s->drop_why), "was dropped: %s", why);
	s->gone = s->drop_why;
	s->exited_ms = scd_now_ms();
	scd_warn(SCD_SUB_CTL, "%s client %s (uid %u) dropped: %s",
		 s->role == SPARSECOMM__ROLE__ROLE_TRAINER ? "trainer" : "control",
		 scd_peer_pid_text(s->pid, s->declared_pid, pid, sizeof(pid)), s->uid, why);
	if (s->conn >= 0)
		uv_poll_stop(&s->connpoll);
	if (s->submit_fd >= 0) {
		uv_poll_stop(&s->submit_poll);
		shutdown(s->submit_fd, SHUT_RDWR);
	}
}

void scd_ctl_session_refuse(scd_ctl_t *ctl, scd_session_t *s, sc_status_t st, const char *why)
{
	char msg[320];
	if (s->dropped)
		return;
	snprintf(msg, sizeof(msg), "%s%s", SC_CTL_DROP_NOTICE, why);
	send_error(ctl, s->ident, s->ident_len, 0, st, msg);
	scd_ctl_session_drop(ctl, s, why);
}

/* A client that does not read what the daemon sends it is dropped. */
static void session_overflow(scd_ctl_t *ctl, scd_session_t *s, const char *what)
{
	char why[160];
	snprintf(why, sizeof(why), "it does not read its replies (%s over the bound of %s)",
		 !strcmp(what, "messages") ? "queued messages" : "unread reports",
		 !strcmp(what, "messages") ? "65536 + 1024 messages" : "16 MiB");
	scd_ctl_session_drop(ctl, s, why);
}

/* A trainer ended its session cleanly without joining: a join in progress can never
 * complete, here (the node's joined trainers) or anywhere (the coordinator hears it). */
static void trainer_left(scd_ctl_t *ctl, scd_session_t *s)
{
	char why[256], pid[96];
	snprintf(why, sizeof(why),
		 "trainer rank %d (node %d, local rank %d, %s) left without joining",
		 ctl->d->rank * ctl->d->local_size + s->local_rank, ctl->d->rank, s->local_rank,
		 scd_peer_pid_text(s->pid, s->declared_pid, pid, sizeof(pid)));
	if (ctl->n_joined) {
		char msg[300];
		snprintf(msg, sizeof(msg), "join aborted: %s", why);
		scd_ctl_join_done(ctl, -1, SC_ERR_ABORTED, msg);
	}
	if (ctl->d->world && !ctl->d->shutting_down)
		ctl->up->node_left(ctl->d->world, why);
}

/* Releases one registration (already out of its session's list); a disagreeing tensor that
 * no trainer of the node holds any more is abandoned, so the other nodes stop waiting. */
static void release_reg(scd_ctl_t *ctl, scd_reg_t *r)
{
	char cleared[256] = "";
	if (r->nt && r->nt->poisoned && r->nt->n_regs == 1)
		snprintf(cleared, sizeof(cleared), "%s", r->nt->name);
	scd_tensors_release(ctl->tensors, r);
	if (cleared[0]) /* the disagreeing tensor is gone from this node */
		ctl->up->abandon(ctl->d->world, cleared, SC_OK, "");
}

/* Ends a session. A trainer that leaves with operations in flight (or dies) takes its
 * node's matching operations down with it, and the node becomes degraded. */
static void session_end(scd_ctl_t *ctl, scd_session_t *s, int died)
{
	char why[256] = "";
	int inflight = 0;
	for (scd_reg_t *r = s->regs; r; r = r->next_in_session)
		inflight += r->handle != 0;
	inflight += s->barrier_handle != 0 || s->join_handle != 0;
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER && (died || inflight)) {
		char pid[96];
		snprintf(why, sizeof(why), "trainer rank %d (node %d, local rank %d, %s) %s",
			 ctl->d->rank * ctl->d->local_size + s->local_rank, ctl->d->rank,
			 s->local_rank,
			 scd_peer_pid_text(s->pid, s->declared_pid, pid, sizeof(pid)),
			 died ? (s->gone ? s->gone : "exited")
			      : "disconnected with operations in flight");
		scd_warn(SCD_SUB_CTL, "%s", why);
		ctl->degraded = 1;
		snprintf(ctl->degraded_reason, sizeof(ctl->degraded_reason), "%s", why);
	}
	/* A join or a barrier cannot complete without the trainer: the node's waiters fail
	 * now (and the coordinator ends it on every rank once it learns the node is
	 * degraded). */
	if (why[0] && ctl->n_joined) {
		char msg[512];
		snprintf(msg, sizeof(msg), "join aborted: %s", why);
		if (s->join_handle)
			ctl->n_joined--, s->join_handle = 0;
		scd_ctl_join_done(ctl, -1, SC_ERR_ABORTED, msg);
	}
	if (!why[0] && s->role == SPARSECOMM__ROLE__ROLE_TRAINER && !s->join_handle)
		trainer_left(ctl, s);
	if (why[0] && ctl->barrier_waiting) {
		char msg[512];
		snprintf(msg, sizeof(msg), "barrier %llu aborted: %s",
			 (unsigned long long)ctl->barrier_seq + 1, why);
		scd_ctl_barrier_complete(ctl, SC_ERR_ABORTED, msg);
	}
	/* Operations of the node that can no longer complete fail now: every one still
	 * waiting for the node's trainers, the other trainers' too (a tensor the dead one
	 * never registered waits for it as well). One that every local trainer had submitted
	 * (announced, or running) still runs with the data the dead trainer left in its
	 * buffer, which stays mapped until then: the coordinator may already have planned it,
	 * and every rank must then compute the same full sum. */
	for (scd_session_t *o = why[0] ? ctl->sessions : NULL; o; o = o->next)
		for (scd_reg_t *r = o->regs; r; r = r->next_in_session) {
			scd_ntensor_t *nt = r->nt;
			if (nt->state == SCD_NT_LOCAL_WAIT) {
				char msg[512];
				snprintf(msg, sizeof(msg), "%s of tensor '%s' aborted: %s",
					 scd_coll_name(&nt->coll), nt->name, why);
				/* the other trainers that had not submitted this step yet owe
				 * it: their next submission of the name is this step, late,
				 * and gets its error (the dead one's successor starts afresh)
				 */
				carry_add(nt, owing(ctl, nt, s->local_rank), SC_ERR_ABORTED);
				size_t n = strnlen(msg, sizeof(nt->carry.msg) - 1);
				memcpy(nt->carry.msg, msg, n);
				nt->carry.msg[n] = 0;
				/* and the node failed it before announcing it: the coordinator
				 * fails it on every rank, charging the nodes that had not
				 * announced it yet (a step the node announces later than its
				 * recovery would else stall, and charge this node a step its
				 * trainers never submit: world/late.c) */
				ctl->up->fail_step(ctl->d->world, nt->name, SC_ERR_ABORTED,
						   msg);
				scd_ctl_complete(ctl, nt, SC_ERR_ABORTED, msg);
			}
		}
	/* the node's state after those failed steps (the world sends what it holds first), so
	 * that the coordinator reads them while the node is not degraded there yet: a step it
	 * fails for the degraded node is not failed a second time */
	if (why[0])
		ctl->up->node_state(ctl->d->world, 1, why);
	for (scd_reg_t *r = s->regs, *next; r; r = next) {
		next = r->next_in_session;
		release_reg(ctl, r);
	}
	s->regs = NULL;
	scd_tensors_forget_session(ctl->tensors, s);
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER) /* its successor starts afresh */
		scd_tensors_forgive(ctl->tensors, s->local_rank);
	for (scd_session_t **pp = &ctl->sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	if (s->join_handle)
		ctl->n_joined--;
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER) {
		ctl->by_local[s->local_rank] = NULL;
		/* the job's last trainer here, gone cleanly: what the coordinator keeps for
		 * the node's trainers (the steps they owe) is not the next job's */
		if (!--ctl->n_trainers && !why[0] && ctl->d->world && !ctl->d->shutting_down)
			ctl->up->node_idle(ctl->d->world);
	}
	session_close(s);
}

/* A trainer's process ended. What it sent before it exited (its goodbye after sc_finalize,
 * which a loaded host may deliver after the exit is seen) is handled first: the session
 * ends as died at the next tick at least CTL_EXIT_GRACE_MS later (scd_ctl_tick), unless
 * its goodbye has ended it cleanly by then. */
static void on_pid_exit(uv_poll_t *h, int status, int events)
{
	scd_session_t *s = h->data;
	uv_poll_stop(&s->pidpoll);
	if (!s->exited_ms)
		s->exited_ms = scd_now_ms(), s->gone = "exited";
}

/* The client's end of its connection closed (every process holding it exited or closed
 * it): as on_pid_exit. */
static void on_conn_hangup(uv_poll_t *h, int status, int events)
{
	scd_session_t *s = h->data;
	uv_poll_stop(&s->connpoll);
	if (!s->exited_ms)
		s->exited_ms = scd_now_ms(), s->gone = "closed its connection";
}

/* Watches the session's process (a pidfd of the kernel's pid) and its connection. */
static void session_watch(scd_ctl_t *ctl, scd_session_t *s, const scd_peer_cred_t *cred)
{
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER && s->pid > 0 &&
	    (s->pidfd = scd_peer_pidfd(s->pid)) >= 0) {
		uv_poll_init(ctl->d->loop, &s->pidpoll, s->pidfd);
		s->pidpoll.data = s;
		uv_poll_start(&s->pidpoll, UV_READABLE, on_pid_exit);
	}
	if ((s->conn = scd_peer_conn_dup(cred)) >= 0) {
		uv_poll_init(ctl->d->loop, &s->connpoll, s->conn);
		s->connpoll.data = s;
		uv_poll_start(&s->connpoll, UV_DISCONNECT, on_conn_hangup);
	}
}

/* ---- handlers ----------------------------------------------------------------------- */

/* What this daemon has built in and usable, for the hello's reply: every transport the
 * registry has, and each device beyond the cpu where GPU tensors are served (device is not
 * cpu) and its library loads. */
static size_t built_list(scd_ctl_t *ctl, char **out)
{
	size_t n = 0;
	const scd_transport_ops_t *tops;
	const scd_device_ops_t *dops;
	for (int k = 0; k < SCD_TRANSPORT_COUNT; k++)
		if (scd_transport_get((scd_transport_kind_t)k, &tops) == SC_OK)
			out[n++] = (char *)scd_transport_kind_name((scd_transport_kind_t)k);
	if (strcmp(scd_cfg_str(&ctl->d->cfg, SCD_CFG_device), "cpu") != 0)
		for (int k = SCD_DEVICE_CPU + 1; k < SCD_DEVICE_COUNT; k++)
			if (scd_device_get((scd_device_kind_t)k, &dops) == SC_OK)
				out[n++] = (char *)scd_device_kind_name((scd_device_kind_t)k);
	return n;
}

static void handle_hello(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len, uint64_t seq,
			 const scd_peer_cred_t *cred, const Sparsecomm__Hello *h)
{
	scd_daemon_t *d = ctl->d;
	char msg[256];
	if (h->protocol_version != SC_PROTOCOL_VERSION) {
		snprintf(msg, sizeof(msg),
			 "incompatible protocol version: the client speaks %u, this daemon %u",
			 h->protocol_version, SC_PROTOCOL_VERSION);
		send_error(ctl, ident, ident_len, seq, SC_ERR_VERSION, msg);
		return;
	}
	if (session_find(ctl, ident, ident_len)) {
		send_error(ctl, ident, ident_len, seq, SC_ERR_PROTOCOL, "hello sent twice");
		return;
	}
	/* What this process sent over an earlier session's submit channel (its goodbye, say)
	 * came before this hello, which reaches the loop by another socket: served first,
	 * all of it (the socket's buffer bounds it; many submissions may precede the
	 * goodbye). */
	for (scd_session_t *o = ctl->sessions, *next; cred && cred->known && o; o = next) {
		next = o->next;
		if (o->pid == cred->pid && o->submit_fd >= 0)
			scd_submit_read(o, SCD_SUBMIT_HELLO_BUDGET);
	}
	int lr = -1;
	if (h->role == SPARSECOMM__ROLE__ROLE_TRAINER) {
		if (h->local_rank >= 0) {
			if (h->local_rank >= d->local_size) {
				snprintf(msg, sizeof(msg),
					 "local rank %d is out of range: this node runs %d "
					 "trainer(s)",
					 h->local_rank, d->local_size);
				send_error(ctl, ident, ident_len, seq, SC_ERR_INVALID, msg);
				return;
			}
			if (ctl->by_local[h->local_rank]) {
				char pid[96];
				scd_session_t *o = ctl->by_local[h->local_rank];
				snprintf(msg, sizeof(msg),
					 "local rank %d is already taken by %s", h->local_rank,
					 scd_peer_pid_text(o->pid, o->declared_pid, pid,
							   sizeof(pid)));
				send_error(ctl, ident, ident_len, seq, SC_ERR_BUSY, msg);
				return;
			}
			lr = h->local_rank;
		} else {
			for (int l = 0; l < d->local_size && lr < 0; l++)
				if (!ctl->by_local[l])
					lr = l;
			if (lr < 0) {
				snprintf(msg, sizeof(msg),
					 "every local rank of this node (%d) is taken",
					 d->local_size);
				send_error(ctl, ident, ident_len, seq, SC_ERR_LIMIT, msg);
				return;
			}
		}
	} else {
		int n_control = 0;
		scd_session_t *oldest = NULL;
		for (scd_session_t *s = ctl->sessions; s; s = s->next)
			if (s->role == SPARSECOMM__ROLE__ROLE_CONTROL) {
				n_control++;
				if (!oldest || s->last_ms < oldest->last_ms)
					oldest = s;
			}
		if (n_control >= CTL_MAX_CONTROL)
			session_end(ctl, oldest, 0);
	}
	scd_session_t *s = calloc(1, sizeof(*s));
	if (!s) {
		send_error(ctl, ident, ident_len, seq, SC_ERR_NOMEM, "out of memory");
		return;
	}
	memcpy(s->ident, ident, ident_len);
	s->ident_len = ident_len;
	s->role = h->role;
	s->header_completion = h->header_completion;
	s->silent_accept = h->silent_accept;
	/* the kernel's word, not the hello's: a trainer in a PID namespace of its own says 1 */
	s->pid = cred && cred->known ? cred->pid : 0;
	s->uid = cred && cred->known ? cred->uid : UINT32_MAX;
	s->declared_pid = h->pid;
	s->local_rank = lr;
	s->pidfd = s->conn = s->submit_fd = -1;
	s->ctl = ctl;
	s->last_ms = scd_now_ms();
	session_watch(ctl, s, cred);
	if (s->pid != h->pid && s->role == SPARSECOMM__ROLE__ROLE_TRAINER)
		scd_info(SCD_SUB_CTL,
			 "client says it is pid %d, the kernel says %d%s: the kernel's is used",
			 h->pid, s->pid, s->pid ? "" : " (a process this daemon cannot see)");
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER && !ctl->n_trainers && ctl->degraded) {
		/* every trainer of the job that lost one has gone: this one starts a new job */
		scd_info(SCD_SUB_CTL,
			 "a trainer connects to a node without trainers: the "
			 "previous job's failure (%s) is over",
			 ctl->degraded_reason);
		/* no trainer of the node lived through its failure: told once more that it
		 * is degraded, the coordinator forgets the steps it answered for the node's
		 * trainers (world/late.c), which start afresh; then that it is whole */
		ctl->up->node_state(d->world, 1, ctl->degraded_reason);
		ctl->degraded = 0;
		ctl->up->node_state(d->world, 0, "");
	}
	if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER) {
		ctl->by_local[lr] = s;
		ctl->n_trainers++;
		if (ctl->degraded && ctl->n_trainers == d->local_size) {
			ctl->degraded = 0;
			ctl->up->node_state(d->world, 0, "");
		}
	}
	s->next = ctl->sessions;
	ctl->sessions = s;

	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__HelloReply r = SPARSECOMM__HELLO_REPLY__INIT;
	char *built[SCD_TRANSPORT_COUNT + SCD_DEVICE_COUNT];
	r.built = built;
	r.n_built = built_list(ctl, built);
	r.protocol_version = SC_PROTOCOL_VERSION;
	r.local_rank = lr;
	r.local_size = d->local_size;
	r.node_rank = d->rank;
	r.node_count = d->world_size;
	r.rank = lr >= 0 ? d->rank * d->local_size + lr : -1;
	r.size = d->world_size * d->local_size;
	if (h->submit_channel && s->role == SPARSECOMM__ROLE__ROLE_TRAINER)
		scd_submit_offer(ctl, s, &r);
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_HELLO;
	m.hello = &r;
	send_to(ctl, ident, ident_len, &m);
}

static void registered(void *arg, scd_session_t *s, uint64_t seq, scd_reg_t *reg,
		       sc_status_t st, const char *err);

/* sc_tensor_release: one of the session's registrations goes (its shared memory is
 * unlinked, and the negotiation forgets the name once the node holds it no more), so that
 * the name can be registered again with another shape, dtype or options. */
static void handle_release(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			   const Sparsecomm__ReleaseTensor *rq)
{
	char err[512];
	scd_reg_t *r = scd_tensors_reg(ctl->tensors, rq->tensor_id);
	if (!r || r->session != s) {
		snprintf(err, sizeof(err),
			 "releasing a tensor: id %u is not registered by this client",
			 rq->tensor_id);
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_NOT_FOUND, err);
		return;
	}
	if (r->handle) {
		snprintf(err, sizeof(err),
			 "tensor '%s' has an operation in flight: it is released once that "
			 "completes",
			 r->nt ? r->nt->name : "?");
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_BUSY, err);
		return;
	}
	for (scd_reg_t **pp = &s->regs; *pp; pp = &(*pp)->next_in_session)
		if (*pp == r) {
			*pp = r->next_in_session;
			break;
		}
	release_reg(ctl, r);
	send_ok(ctl, s, seq);
}

/* Whether the registration's process set admits the trainer: the set is known on this node
 * and the trainer is a member. key gets the tensor's qualified name; err says what was
 * wrong. */
static int pset_admits(scd_ctl_t *ctl, const scd_session_t *s,
		       const Sparsecomm__RegisterTensor *rq, char *key, size_t key_len,
		       char *err, size_t err_len)
{
	const char *name = rq->name ? rq->name : "";
	uint32_t id = rq->opts ? rq->opts->process_set : 0;
	int rank = ctl->d->rank * ctl->d->local_size + s->local_rank;
	const scd_pset_t *p = scd_psets_find(&ctl->psets, id);
	if (id && !p) {
		snprintf(err, err_len,
			 "rank %d: registering tensor '%.255s': process set %u is not defined "
			 "(sc_process_set_add)",
			 rank, name, id);
		return 0;
	}
	if (id && !scd_pset_member(p, rank)) {
		snprintf(err, err_len,
			 "rank %d: registering tensor '%.255s': rank %d is not a member of "
			 "process set %u (%d ranks, from %d)",
			 rank, name, rank, id, p->n_ranks, p->ranks[0]);
		return 0;
	}
	if (strchr(name, SCD_PSET_SEP) || scd_pset_key(name, id, key, key_len) != SC_OK) {
		snprintf(err, err_len, "rank %d: registering a tensor: invalid name", rank);
		return 0;
	}
	return 1;
}

static void handle_register(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			    const Sparsecomm__RegisterTensor *rq)
{
	char err[512];
	if (s->role != SPARSECOMM__ROLE__ROLE_TRAINER) {
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_INVALID,
			   "only trainer sessions register tensors");
		return;
	}
	scd_tensor_opts_t opts = {0};
	if (rq->opts) {
		opts.allow_lossy = rq->opts->allow_lossy;
		opts.sparsifier = rq->opts->sparsifier;
		opts.density = rq->opts->density;
		opts.threshold = rq->opts->threshold;
		opts.coo_capacity = rq->opts->coo_capacity;
		opts.sketch_rows = rq->opts->sketch_rows;
		opts.sketch_cols = rq->opts->sketch_cols;
		opts.device_kind = rq->opts->device_kind;
		opts.device_ordinal = rq->opts->device_ordinal;
		opts.device_uuid_len = (uint32_t)rq->opts->device_uuid.len;
		if (opts.device_uuid_len == sizeof(opts.device_uuid))
			memcpy(opts.device_uuid, rq->opts->device_uuid.data,
			       sizeof(opts.device_uuid));
		opts.wire = rq->opts->wire;
		opts.block = rq->opts->block;
		opts.src_type = rq->opts->src_type;
		snprintf(opts.scheme, sizeof(opts.scheme), "%s",
			 rq->opts->scheme ? rq->opts->scheme : "");
	}
	/* a tensor of a process set is known by its qualified name (util/psname.h) */
	char key[320];
	if (!pset_admits(ctl, s, rq, key, sizeof(key), err, sizeof(err))) {
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_INVALID, err);
		return;
	}
	const char *name = key;
	scd_reg_t *reg;
	scd_tensors_gpu_policy(
	    ctl->tensors, strcmp(scd_cfg_str(&ctl->d->cfg, SCD_CFG_device), "cpu") != 0,
	    (uint64_t)scd_cfg_int(&ctl->d->cfg, SCD_CFG_gpu_mem_limit_bytes));
	scd_tensors_reg_limit(ctl->tensors,
			      (uint32_t)scd_cfg_int(&ctl->d->cfg, SCD_CFG_max_registrations));
	sc_status_t st = scd_tensors_register_async(
	    ctl->tensors, ctl->d->loop, s, s->local_rank, name, rq->dtype, rq->numel, &opts,
	    (uint64_t)scd_cfg_int(&ctl->d->cfg, SCD_CFG_max_tensor_bytes), seq, registered, ctl,
	    &reg, err, sizeof(err));
	scd_ntensor_t *held =
	    st == SC_ERR_MISMATCH ? scd_tensors_find(ctl->tensors, name) : NULL;
	if (held && (rq->replaces || (held->let_go >> s->local_rank & 1)) &&
	    held->state == SCD_NT_IDLE &&
	    (held->dtype != rq->dtype || held->numel != rq->numel ||
	     held->opts.src_type != opts.src_type || held->opts.wire != opts.wire)) {
		/* A new shape (dtype, element type or wire) on its way: the node's other
		 * trainers have not released the old one yet, and none waits on it. The trainer
		 * retries; nothing fails. Either the trainer says it released the name
		 * (replaces: one of the last names its library let go), or the node remembers
		 * that it did (let_go: however long ago, while the others kept it). */
		st = SC_ERR_BUSY;
		snprintf(
		    err, sizeof(err),
		    "tensor '%s': another trainer of this node still holds it as %s x %llu; "
		    "register %s x %llu again once it has released it",
		    name,
		    sc_src_type_name((sc_src_type_t)held->opts.src_type,
				     (sc_dtype_t)held->dtype),
		    (unsigned long long)held->numel,
		    sc_src_type_name((sc_src_type_t)opts.src_type, (sc_dtype_t)rq->dtype),
		    (unsigned long long)rq->numel);
	}
	if (st == SC_ERR_MISMATCH) {
		/* The node's trainers disagree: the tensor can never complete here, so it fails
		 * now for the trainers of this node that wait on it, and on every rank. */
		scd_ntensor_t *nt = scd_tensors_find(ctl->tensors, name);
		char msg[380];
		snprintf(msg, sizeof(msg),
			 "operations of tensor '%.80s' failed on node %d: %.250s", name,
			 ctl->d->rank, err);
		if (nt) {
			nt->poisoned = 1;
			snprintf(nt->poison_msg, sizeof(nt->poison_msg), "%s", msg);
			if (nt->state == SCD_NT_LOCAL_WAIT || nt->state == SCD_NT_ANNOUNCED)
				scd_ctl_complete(ctl, nt, SC_ERR_MISMATCH, msg);
		}
		ctl->up->abandon(ctl->d->world, name, SC_ERR_MISMATCH, msg);
	}
	if (st == SC_OK)
		registered(ctl, s, seq, reg, st, "");
	else if (st != SC_IN_PROGRESS)
		send_error(ctl, s->ident, s->ident_len, seq, st, err);
}

/* A registration's memory is ready (or could not be had): the trainer's answer. */
static void registered(void *arg, scd_session_t *s, uint64_t seq, scd_reg_t *reg,
		       sc_status_t st, const char *err)
{
	scd_ctl_t *ctl = arg;
	if (!s)
		return; /* the trainer went away meanwhile */
	if (st != SC_OK) {
		send_error(ctl, s->ident, s->ident_len, seq, st, err);
		return;
	}
	reg->next_in_session = s->regs;
	s->regs = reg;
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__RegisterReply r = SPARSECOMM__REGISTER_REPLY__INIT;
	r.tensor_id = reg->id;
	r.shm_name = reg->shm_name;
	r.shm_bytes = reg->map_bytes;
	r.data_offset = reg->data_offset;
	if (reg->gpu_mem) {
		r.mem_ipc = (ProtobufCBinaryData){sizeof(reg->mem_ipc), reg->mem_ipc};
		r.ready_event_ipc =
		    (ProtobufCBinaryData){sizeof(reg->ready_ipc), reg->ready_ipc};
		r.done_event_ipc = (ProtobufCBinaryData){sizeof(reg->done_ipc), reg->done_ipc};
	}
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_REG;
	m.reg = &r;
	send_to(ctl, s->ident, s->ident_len, &m);
}

/*
 * The node fails its step of nt before announcing it (a local trainer stalled, was refused,
 * or the trainers disagree): the local trainers that submitted get status and msg now, the
 * others but local rank except (-1: none; it got its own refusal) when they submit the
 * step late, and the coordinator fails the step on every rank (world/late.c).
 */
static void step_fail(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t st, const char *msg,
		      int except)
{
	carry_add(nt, owing(ctl, nt, except), st);
	snprintf(nt->carry.msg, sizeof(nt->carry.msg),
		 "%s of tensor '%s' refused: submitted late, for the step that failed "
		 "(%.250s)",
		 scd_coll_name(&nt->coll), nt->name, msg);
	ctl->up->fail_step(ctl->d->world, nt->name, st, msg);
	if (nt->state == SCD_NT_LOCAL_WAIT)
		scd_ctl_complete(ctl, nt, st, msg);
}

/* A submission refused on this node alone (its COO over capacity, its memory lost): the
 * step fails on every rank at once, not at the others' stall, unless the tensor's step is
 * already under way or already failed here. */
static void refuse_step(scd_ctl_t *ctl, scd_session_t *s, scd_ntensor_t *nt, scd_reg_t *r,
			sc_status_t st, const char *err)
{
	if (carry_take(nt, r->local_rank))
		return; /* the step already failed on this node: this refusal is r's submission
			 * of it, so r's next one is of the next step */
	if (!nt->poisoned && !ctl->degraded && !s->join_handle && nt->state != SCD_NT_RUNNING &&
	    nt->state != SCD_NT_ANNOUNCED)
		step_fail(ctl, nt, st, err, r->local_rank);
}

/* A submission refused because the node is degraded (err): the node fails that step
 * before announcing it. Its other connected trainers that have not submitted it owe it (a
 * dead trainer's successor starts afresh), and the node tells the coordinator, which
 * takes it as the step it answered while the node was degraded or else fails it on every
 * rank (world/late.c): a later report of the name's next step must not be taken for it. */
static void degraded_refuse(scd_ctl_t *ctl, scd_session_t *s, scd_ntensor_t *nt, scd_reg_t *r,
			    const char *err)
{
	if (s->join_handle || nt->state == SCD_NT_RUNNING || nt->state == SCD_NT_ANNOUNCED)
		return;
	uint64_t live = 0;
	for (int l = 0; l < ctl->d->local_size; l++)
		live |= (uint64_t)(ctl->by_local[l] != NULL) << l;
	carry_add(nt, owing(ctl, nt, r->local_rank) & live, SC_ERR_ABORTED);
	size_t n = strnlen(err, sizeof(nt->carry.msg) - 1);
	memcpy(nt->carry.msg, err, n);
	nt->carry.msg[n] = 0;
	ctl->up->fail_step(ctl->d->world, nt->name, SC_ERR_ABORTED, err);
}

/* Another local trainer's submission of nt's step than r, or NULL: r's grouping must be
 * its (the members' names are checked across the nodes by the coordinator, world/group.c). */
static const scd_reg_t *other_submission(const scd_ntensor_t *nt, const scd_reg_t *r)
{
	for (int l = 0; l < SCD_MAX_LOCAL; l++)
		if (nt->slot[l] && nt->slot[l] != r && nt->slot[l]->handle)
			return nt->slot[l];
	return NULL;
}

static void handle_collective(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			      const Sparsecomm__Collective *a)
{
	char err[512];
	scd_reg_t *r = scd_tensors_reg(ctl->tensors, a->tensor_id);
	if (!r || r->session != s) {
		snprintf(err, sizeof(err),
			 "unknown tensor: id %u is not registered by this client",
			 a->tensor_id);
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_NOT_FOUND, err);
		return;
	}
	scd_ntensor_t *nt = r->nt;
	int trainers = ctl->d->world_size * ctl->d->local_size;
	int rank = ctl->d->rank * ctl->d->local_size + r->local_rank;
	/* a process set's tensor: its set, and the trainers an alltoall of it addresses */
	const scd_pset_t *ps = nt->pset ? scd_psets_find(&ctl->psets, nt->pset) : NULL;
	int peers = ps ? ps->n_ranks : trainers;
	scd_ctl_req_t q = {0};
	sc_status_t st = SC_OK;
	const scd_reg_t *peer;
	char opname[64];
	if (!a->handle) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err), "tensor '%s': handle 0 is not valid", nt->name);
	} else if (r->handle) {
		st = SC_ERR_BUSY;
		snprintf(err, sizeof(err), "tensor '%s' already has an operation in flight",
			 nt->name);
	} else if (nt->pset && !ps) {
		st = SC_ERR_ABORTED;
		snprintf(err, sizeof(err),
			 "operation on tensor '%s' refused: process set %u was removed",
			 nt->name, nt->pset);
	} else if ((st = scd_ctl_collective_decode(r, rank, trainers, a, &q, err,
						   sizeof(err))) != SC_OK) {
		/* a request the library would not send (no body, a shape that does not hold
		 * the tensor, arguments its own checks refuse): the others would wait for
		 * this one's step */
		refuse_step(ctl, s, nt, r, st, err);
	} else if (ps && q.rq.coll.kind == SCD_COLL_BROADCAST &&
		   !scd_pset_member(ps, (int)q.rq.coll.root)) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err),
			 "broadcast of tensor '%s': rank %d gave root rank %u, which is not a "
			 "member of process set %u",
			 nt->name, rank, q.rq.coll.root, nt->pset);
		refuse_step(ctl, s, nt, r, st, err);
	} else if (!a->group != !a->group_size || a->group_size > SC_GROUP_MAX ||
		   a->group > SCD_GROUP_NUM_MAX) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err),
			 "tensor '%s': rank %d gave group %llu of %u members (group 1 to %llu "
			 "of 1 to %d members, both or neither)",
			 nt->name, rank, (unsigned long long)a->group, a->group_size,
			 (unsigned long long)SCD_GROUP_NUM_MAX, SC_GROUP_MAX);
		refuse_step(ctl, s, nt, r, st, err);
	} else if (q.rq.coo && (!nt->opts.coo_capacity || q.nnz > nt->opts.coo_capacity)) {
		st = nt->opts.coo_capacity ? SC_ERR_LIMIT : SC_ERR_INVALID;
		snprintf(err, sizeof(err),
			 "%s of tensor '%s': rank %d gave %llu COO entries, over its "
			 "capacity %llu",
			 scd_coll_name(&q.rq.coll), nt->name, rank, (unsigned long long)q.nnz,
			 (unsigned long long)nt->opts.coo_capacity);
		refuse_step(ctl, s, nt, r, st, err);
	} else if (scd_tensors_mem_lost(r, err, sizeof(err))) {
		st = SC_ERR_INVALID;
		refuse_step(ctl, s, nt, r, st, err);
	} else if (nt->poisoned) {
		st = SC_ERR_MISMATCH;
		snprintf(err, sizeof(err), "%s", nt->poison_msg);
	} else if (carry_take(nt, r->local_rank)) {
		st = nt->carry.status;
		snprintf(err, sizeof(err), "%s", nt->carry.msg);
	} else if (ctl->degraded) {
		st = SC_ERR_ABORTED;
		snprintf(err, sizeof(err), "%s of tensor '%s' refused: %s",
			 scd_coll_name(&q.rq.coll), nt->name, ctl->degraded_reason);
		degraded_refuse(ctl, s, nt, r, err);
	} else if (s->join_handle) {
		st = SC_ERR_INVALID;
		snprintf(err, sizeof(err),
			 "%s of tensor '%s' refused: rank %d has joined (it takes part "
			 "with zeros until every rank has joined)",
			 scd_coll_name(&q.rq.coll), nt->name,
			 ctl->d->rank * ctl->d->local_size + s->local_rank);
	} else if (nt->state == SCD_NT_RUNNING || nt->state == SCD_NT_ANNOUNCED) {
		st = SC_ERR_BUSY;
		snprintf(err, sizeof(err),
			 "tensor '%s': the previous step's operation is still running",
			 nt->name);
	}
	if (st != SC_OK) {
		send_error(ctl, s->ident, s->ident_len, seq, st, err);
		return;
	}
	r->handle = a->handle;
	r->submits++;
	r->coll = q.rq.coll;
	r->coo = q.rq.coo;
	r->sparse_result = q.sparse_result;
	r->nnz = q.nnz; /* or an allgather's count */
	r->group = a->group;
	r->group_size = a->group_size;
	if (q.a2a)
		scd_ctl_a2a_take(r, q.a2a, peers, nt->numel);
	/* a message to the trainer per step, which every one of its node's announcements
	 * would wait behind on two busy cores: sent only to a client that reads it */
	if (!s->silent_accept)
		send_ok(ctl, s, seq);
	if (nt->submitted++ == 0) {
		nt->coll = q.rq.coll;
		nt->coo = q.rq.coo;
		nt->shape = q.shape;
		nt->state = SCD_NT_LOCAL_WAIT;
		nt->state_since_ms = scd_now_ms();
		nt->began_event = ++ctl->events;
	} else if (!nt->coo != !q.rq.coo) {
		snprintf(err, sizeof(err),
			 "%s of tensor '%s': the trainers of node %d give different "
			 "input (dense and COO)",
			 scd_coll_name(&nt->coll), nt->name, ctl->d->rank);
		step_fail(ctl, nt, SC_ERR_MISMATCH, err, -1);
		return;
	} else if ((peer = other_submission(nt, r)) && peer->group_size != r->group_size) {
		snprintf(err, sizeof(err),
			 "%s of tensor '%s': the trainers of node %d put it in groups of "
			 "different sizes (%u and %u; 0: not grouped)",
			 scd_coll_name(&nt->coll), nt->name, ctl->d->rank, peer->group_size,
			 r->group_size);
		step_fail(ctl, nt, SC_ERR_MISMATCH, err, -1);
		return;
	} else if (scd_coll_pack(&nt->coll) != scd_coll_pack(&q.rq.coll)) {
		char other[64];
		snprintf(err, sizeof(err),
			 "tensor '%s': the trainers of node %d ask for different "
			 "operations (%s and %s)",
			 nt->name, ctl->d->rank,
			 scd_coll_describe(&nt->coll, opname, sizeof(opname)),
			 scd_coll_describe(&q.rq.coll, other, sizeof(other)));
		step_fail(ctl, nt, SC_ERR_MISMATCH, err, -1);
		return;
	} else if (!scd_shape_equal(&nt->shape, &q.shape)) {
		char mine[96], other[96];
		scd_shape_text(&nt->shape, nt->numel, mine, sizeof(mine));
		scd_shape_text(&q.shape, nt->numel, other, sizeof(other));
		snprintf(err, sizeof(err),
			 "%s of tensor '%s': the trainers of node %d give different "
			 "shapes (%s and %s)",
			 scd_coll_name(&nt->coll), nt->name, ctl->d->rank, mine, other);
		step_fail(ctl, nt, SC_ERR_MISMATCH, err, -1);
		return;
	}
	scd_ctl_announce_if_ready(ctl, nt);
}

/* Serves a request of session s, from the control socket or its submit channel alike. */
static void serve(scd_ctl_t *ctl, scd_session_t *s, const Sparsecomm__ClientMsg *msg)
{
	uint64_t seq = msg->seq;
	s->last_ms = scd_now_ms();
	switch (msg->body_case) {
	case SPARSECOMM__CLIENT_MSG__BODY_REG:
		handle_register(ctl, s, seq, msg->reg);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE:
		handle_collective(ctl, s, seq, msg->collective);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_RELEASE:
		handle_release(ctl, s, seq, msg->release);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_STATUS:
		scd_ctl_handle_status(ctl, s, seq);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_STATS:
		scd_ctl_handle_stats(ctl, s, seq, 0);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_STATS_RESET:
		scd_ctl_handle_stats(ctl, s, seq, 1);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_PENDING:
		scd_ctl_handle_pending(ctl, s, seq);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_BARRIER:
		scd_ctl_handle_barrier(ctl, s, seq, msg->barrier);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_TRAINER_JOIN:
		scd_ctl_handle_join(ctl, s, seq, msg->trainer_join);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_PROCESS_SET:
		scd_ctl_handle_process_set(ctl, s, seq, msg->process_set);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_CONFIG_GET:
	case SPARSECOMM__CLIENT_MSG__BODY_CONFIG_SET:
		scd_ctl_handle_config(ctl, s, seq, msg);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_BYE:
		send_ok(ctl, s, seq);
		session_end(ctl, s, 0);
		break;
	case SPARSECOMM__CLIENT_MSG__BODY_BATCH: /* the submit channel's (serve_batch) */
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_PROTOCOL,
			   "a SubmitBatch goes over the submit channel only: none of its "
			   "requests was served");
		break;
	default:
		send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_PROTOCOL,
			   "unknown request");
		break;
	}
}

void scd_ctl_dispatch(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len,
		      const scd_peer_cred_t *cred, const uint8_t *buf, size_t len)
{
	Sparsecomm__ClientMsg *msg = sparsecomm__client_msg__unpack(NULL, len, buf);
	scd_ctl_collect(ctl); /* what the engine ended before this was sent (ctl.h) */
	if (!msg) {
		char err[128];
		snprintf(err, sizeof(err),
			 "malformed control message (%zu bytes): not a ClientMsg", len);
		scd_warn(SCD_SUB_CTL, "%s", err);
		send_error(ctl, ident, ident_len, 0, SC_ERR_PROTOCOL, err);
		return;
	}
	uint64_t seq = msg->seq;
	char err[200], pid[96];
	if (msg->body_case == SPARSECOMM__CLIENT_MSG__BODY_HELLO) {
		handle_hello(ctl, ident, ident_len, seq, cred, msg->hello);
		goto out;
	}
	scd_session_t *s = session_find(ctl, ident, ident_len);
	if (!s) {
		send_error(ctl, ident, ident_len, seq, SC_ERR_PROTOCOL,
			   "no session: send hello first");
		goto out;
	}
	if (s->dropped) /* ending at the next tick: nothing more of it is served */
		goto out;
	if (cred && cred->known && (cred->pid != s->pid || cred->uid != s->uid)) {
		/* another connection with this one's routing identity */
		snprintf(err, sizeof(err),
			 "this session belongs to pid %d (uid %u), not to pid %d (uid %u)",
			 s->pid, s->uid, cred->pid, cred->uid);
		send_error(ctl, ident, ident_len, seq, SC_ERR_PROTOCOL, err);
		goto out;
	}
	if (s->submit_fd >= 0) {
		/* its requests come over its submit channel: one over this socket could be
		 * served out of the order it was issued in */
		snprintf(
		    err, sizeof(err),
		    "%s sent a request (body %d) over the control socket after binding its "
		    "submit channel",
		    scd_peer_pid_text(s->pid, s->declared_pid, pid, sizeof(pid)),
		    (int)msg->body_case);
		send_error(ctl, ident, ident_len, seq, SC_ERR_PROTOCOL, err);
		scd_ctl_session_drop(ctl, s, err);
		goto out;
	}
	serve(ctl, s, msg);
out:
	sparsecomm__client_msg__free_unpacked(msg, NULL);
}

/* The requests of a SubmitBatch, served in their order as if each had come alone; the
 * first that is not a collective's ClientMsg drops the session, naming it (those before it
 * were served, none after it is). */
static void serve_batch(scd_ctl_t *ctl, scd_session_t *s, const Sparsecomm__SubmitBatch *b)
{
	char why[200];
	if (b->n_requests > SCD_CTL_BATCH_MAX) {
		snprintf(why, sizeof(why),
			 "it sent a batch of %zu requests over its submit channel (at most %d)",
			 b->n_requests, SCD_CTL_BATCH_MAX);
		scd_ctl_session_refuse(ctl, s, SC_ERR_PROTOCOL, why);
		return;
	}
	for (size_t i = 0; i < b->n_requests && !s->closed && !s->dropped; i++) {
		const ProtobufCBinaryData *r = &b->requests[i];
		Sparsecomm__ClientMsg *m =
		    sparsecomm__client_msg__unpack(NULL, r->len, r->data);
		if (!m || m->body_case != SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE) {
			snprintf(why, sizeof(why),
				 "request %zu of %zu of a batch on its submit channel is %s",
				 i + 1, b->n_requests,
				 m ? "not a collective" : "not a ClientMsg");
			if (m)
				sparsecomm__client_msg__free_unpacked(m, NULL);
			scd_ctl_session_refuse(ctl, s, SC_ERR_PROTOCOL, why);
			return;
		}
		s->submit_requests++;
		serve(ctl, s, m);
		sparsecomm__client_msg__free_unpacked(m, NULL);
	}
}

void scd_ctl_dispatch_submit(scd_ctl_t *ctl, scd_session_t *s, const uint8_t *buf, size_t len)
{
	Sparsecomm__ClientMsg *msg = sparsecomm__client_msg__unpack(NULL, len, buf);
	scd_ctl_collect(ctl); /* what the engine ended before this was sent (ctl.h) */
	char why[160];
	if (!msg || msg->body_case == SPARSECOMM__CLIENT_MSG__BODY_HELLO) {
		snprintf(why, sizeof(why), "it sent %s over its submit channel",
			 msg ? "a hello" : "a message that is not a ClientMsg");
		scd_ctl_session_refuse(ctl, s, SC_ERR_PROTOCOL, why);
	} else if (msg->body_case == SPARSECOMM__CLIENT_MSG__BODY_BATCH) {
		s->submit_batches++;
		serve_batch(ctl, s, msg->batch);
	} else {
		s->submit_requests++;
		serve(ctl, s, msg);
	}
	if (msg)
		sparsecomm__client_msg__free_unpacked(msg, NULL);
}

static void on_more(uv_idle_t *h)
{
	scd_ctl_drain(h->data);
}

void scd_ctl_drain(scd_ctl_t *ctl)
{
	if (!ctl || !ctl->sock)
		return;
	scd_zmsg_t m = {0};
	scd_peer_cred_t cred;
	int n = 0;
	while (n < CTL_DRAIN_BUDGET && scd_zmsg_recv(ctl->sock, 1, &m)) {
		scd_zmsg_cred(&m, &cred);
		scd_ctl_dispatch(ctl, m.ident, m.ident_len, &cred, m.data, m.len);
		n++;
	}
	scd_zmsg_done(&m);
	/* more may be queued: ZMQ_FD will not say so again, the idle handle comes back */
	if (n == CTL_DRAIN_BUDGET)
		uv_idle_start(&ctl->more, on_more);
	else
		uv_idle_stop(&ctl->more);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	scd_ctl_drain(h->data);
}

void scd_ctl_tick(scd_ctl_t *ctl)
{
	scd_ctl_collect(ctl); /* the operations ended already: not in flight */
	uint64_t now = scd_now_ms();
	/* Trainers whose process ended: what they sent first (on_pid_exit), then the end. */
	int exited = 0;
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		exited |= s->exited_ms && now - s->exited_ms >= CTL_EXIT_GRACE_MS;
	while (exited && (scd_ctl_drain(ctl), uv_is_active((uv_handle_t *)&ctl->more)))
		; /* all of it: what an exited trainer sent comes before its end */
	for (scd_session_t *s = ctl->sessions, *next; s; s = next) {
		next = s->next;
		if (!s->exited_ms || now - s->exited_ms < CTL_EXIT_GRACE_MS)
			continue;
		scd_submit_drain(s); /* what it sent over its submit channel, all of it first */
		if (s->closed)	     /* its goodbye was there */
			continue;
		struct pollfd pfd = {s->pidfd, POLLIN, 0};
		if (!s->dropped && s->pidfd >= 0 && poll(&pfd, 1, 0) == 1)
			s->gone = "exited"; /* its connection closed as it exited */
		session_end(ctl, s, 1);
	}
	scd_submit_tick(ctl);
	scd_ctl_report_expire(ctl, 0);
	/* Reports a client has read: nothing it was sent is left unread. */
	for (scd_session_t *s = ctl->sessions; s; s = s->next)
		if (s->report_bytes && scd_peer_conn_unread(s->conn) <= 0)
			s->report_bytes = 0;
	/* Trainers without a pidfd: check that the process still exists. */
	for (scd_session_t *s = ctl->sessions, *next; s; s = next) {
		next = s->next;
		if (s->role == SPARSECOMM__ROLE__ROLE_TRAINER && s->pidfd < 0 && s->pid > 0 &&
		    kill(s->pid, 0) != 0 && errno == ESRCH) {
			scd_submit_drain(s); /* what it sent, first */
			if (!s->closed)
				session_end(ctl, s, 1);
		}
	}
	/* Tensors some local trainers submitted and others never did. */
	now = scd_now_ms();
	uint64_t stall = (uint64_t)scd_cfg_int(&ctl->d->cfg, SCD_CFG_stall_timeout_ms);
	if (ctl->barrier_waiting && !ctl->barrier_entered &&
	    now - ctl->barrier_since_ms >= stall) {
		char msg[512];
		int n = snprintf(
		    msg, sizeof(msg), "barrier %llu stalled for %llu ms on node %d: local rank",
		    (unsigned long long)ctl->barrier_seq + 1,
		    (unsigned long long)(now - ctl->barrier_since_ms), ctl->d->rank);
		for (int l = 0; l < ctl->d->local_size && n < (int)sizeof(msg) - 32; l++)
			if (!ctl->by_local[l] || !ctl->by_local[l]->barrier_handle)
				n += snprintf(msg + n, sizeof(msg) - (size_t)n, " %d (rank %d)",
					      l, ctl->d->rank * ctl->d->local_size + l);
		snprintf(msg + n, sizeof(msg) - (size_t)n, " never entered it");
		scd_ctl_barrier_complete(ctl, SC_ERR_STALLED, msg);
	}
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors), *next; nt; nt = next) {
		next = nt->all_next;
		if (nt->state != SCD_NT_LOCAL_WAIT || now - nt->state_since_ms < stall)
			continue;
		char msg[512];
		int n = snprintf(msg, sizeof(msg),
				 "%s of tensor '%s' stalled for %llu ms on node %d: local "
				 "rank",
				 scd_coll_name(&nt->coll), nt->name,
				 (unsigned long long)(now - nt->state_since_ms), ctl->d->rank);
		for (int l = 0; l < ctl->d->local_size && n < (int)sizeof(msg) - 16; l++)
			if (!nt->slot[l] || !nt->slot[l]->handle)
				n += snprintf(msg + n, sizeof(msg) - (size_t)n, " %d (rank %d)",
					      l, ctl->d->rank * ctl->d->local_size + l);
		/* (one "local rank L (rank R)" per trainer that did not submit) */
		snprintf(msg + n, sizeof(msg) - (size_t)n, " never submitted it");
		step_fail(ctl, nt, SC_ERR_STALLED, msg, -1);
	}
}

scd_tensors_t *scd_ctl_tensors(scd_ctl_t *ctl)
{
	return ctl->tensors;
}

int scd_ctl_trainers(const scd_ctl_t *ctl)
{
	return ctl->n_trainers;
}

/* A tensor is gone from this node: the engine may drop the scheme state of its buffers. */
static void on_tensor_free(void *arg, const char *name, uint64_t presel_key)
{
	scd_ctl_t *ctl = arg;
	if (ctl->d->world && !ctl->d->shutting_down)
		ctl->up->forget(ctl->d->world, name, presel_key);
}

sc_status_t scd_ctl_create(scd_daemon_t *d, const scd_ctl_upcalls_t *up, scd_ctl_t **ctl_p)
{
	scd_ctl_t *ctl = calloc(1, sizeof(*ctl));
	if (!ctl)
		return SC_ERR_NOMEM;
	ctl->d = d;
	ctl->up = up;
	scd_psets_init(&ctl->psets, d->rank, d->local_size);
	sc_status_t st = scd_tensors_create(d->local_size, on_tensor_free, ctl, &ctl->tensors);
	if (st == SC_OK)
		scd_tensors_set_shm_group(ctl->tensors, d->ctl_gid);
	if (st != SC_OK) {
		free(ctl);
		return st;
	}
	uv_idle_init(d->loop, &ctl->more);
	ctl->more.data = ctl;
	ctl->submit_fd = -1;
	*ctl_p = ctl;
	return SC_OK;
}

sc_status_t scd_ctl_listen(scd_ctl_t *ctl)
{
	scd_daemon_t *d = ctl->d;
	ctl->sock = zmq_socket(d->zctx, ZMQ_ROUTER);
	int hwm = 1 << 20, sndhwm = CTL_SEND_HWM, linger = 0, mandatory = 1;
	zmq_setsockopt(ctl->sock, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm));
	zmq_setsockopt(ctl->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(ctl->sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(ctl->sock, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));
	if (scd_zsock_bound(ctl->sock, SCD_CTL_MSG_MAX_BYTES) != 0) {
		scd_error(SCD_SUB_CTL,
			  "cannot bound the control socket's messages to %lld bytes: %s",
			  SCD_CTL_MSG_MAX_BYTES, zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	unlink(d->ctl_path);
	/* bound private, given its group, and only then opened to it: never wider between */
	mode_t old = umask(0077);
	int rc = zmq_bind(ctl->sock, d->ctl_endpoint);
	umask(old);
	if (rc != 0) {
		scd_error(SCD_SUB_CTL, "cannot bind the control socket %s: %s", d->ctl_endpoint,
			  zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	if (d->ctl_gid >= 0 && chown(d->ctl_path, (uid_t)-1, (gid_t)d->ctl_gid) != 0) {
		scd_error(SCD_SUB_CTL, "cannot give %s to ctl_group %ld: %s", d->ctl_path,
			  d->ctl_gid, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	chmod(d->ctl_path, d->ctl_gid >= 0 ? 0660 : 0600);
	int fd;
	size_t sz = sizeof(fd);
	zmq_getsockopt(ctl->sock, ZMQ_FD, &fd, &sz);
	uv_poll_init(d->loop, &ctl->poll, fd);
	ctl->poll.data = ctl;
	uv_poll_start(&ctl->poll, UV_READABLE, on_readable);
	ctl->polling = 1;
	scd_info(SCD_SUB_CTL, "control socket %s", d->ctl_endpoint);
	return scd_submit_listen(ctl);
}

void scd_ctl_destroy(scd_ctl_t *ctl)
{
	if (!ctl)
		return;
	scd_ctl_report_expire(ctl, 1);
	while (ctl->sessions) {
		scd_session_t *s = ctl->sessions;
		for (scd_reg_t *r = s->regs; r; r = r->next_in_session)
			r->zombie = 0, r->handle = 0;
		session_end(ctl, s, 0);
	}
	scd_tensors_destroy(ctl->tensors);
	scd_psets_free(&ctl->psets);
	uv_close((uv_handle_t *)&ctl->more, NULL);
	if (ctl->polling) {
		uv_poll_stop(&ctl->poll);
		uv_close((uv_handle_t *)&ctl->poll, NULL);
	}
	if (ctl->sock)
		zmq_close(ctl->sock);
	unlink(ctl->d->ctl_path);
	scd_submit_destroy(ctl);
	/* ctl is freed after the loop has closed its handles */
}
