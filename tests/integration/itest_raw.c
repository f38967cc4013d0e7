/*
 * itest_raw.c: the daemon's control socket against clients that do not go through
 * libsparseclient: a raw ZeroMQ DEALER speaking the protocol by hand (proto/sparsecomm.proto)
 * to send what the library never would.
 *
 * unknown: an allreduce of a tensor id never registered is answered with an error that
 *   names the id; frames that are not protobuf at all get an error or are dropped, but the
 *   daemon stays up; afterwards the library works normally.
 * version: a hello with protocol_version 999, or the library's previous version, is
 *   refused with an error naming both versions, for trainers and for control clients.
 * bodyless: a Collective request without a body, and one as the previous version
 *   encoded it, are refused naming the trainer and the tensor (it_bodyless).
 * oversize: a 192 MiB frame on the control socket is refused as its header arrives: the
 *   daemon stays up, its peak resident memory (VmHWM) grows by less than 32 MiB, and the
 *   library works normally afterwards.
 * silent-accept: a trainer whose hello says silent_accept gets no ok for an allreduce
 *   accepted, only its completion, and the error of one refused; others get the ok.
 * false-pid: a trainer whose hello declares another pid is tracked by its real one.
 * ctl-flood: control clients that never read their replies are dropped, the daemon's
 *   memory bounded.
 */
#include "ctl_notice.h"
#include "itest.h"
#include "sparsecomm.pb-c.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define RAW_REPLY_MS 10000 /* a request the daemon must answer */
#define RAW_QUIET_MS 2000  /* how long to listen for an optional answer */

typedef struct {
	void *ctx, *sock;
	uint64_t seq;
} raw_t;

static void raw_open(raw_t *r)
{
	char ep[4200];
	const char *s = it_env.socket;
	if (strstr(s, "://"))
		snprintf(ep, sizeof(ep), "%s", s);
	else
		snprintf(ep, sizeof(ep), "ipc://%s", s);
	r->seq = 0;
	r->ctx = zmq_ctx_new();
	if (!r->ctx)
		IT_FAIL("zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(r->sock, ep) != 0)
		IT_FAIL("zmq_connect(%s): %s", ep, zmq_strerror(zmq_errno()));
}

static void raw_close(raw_t *r)
{
	zmq_close(r->sock);
	zmq_ctx_term(r->ctx);
}

static void raw_send_bytes(raw_t *r, const void *buf, size_t len)
{
	if (zmq_send(r->sock, buf, len, 0) < 0)
		IT_FAIL("zmq_send: %s", zmq_strerror(zmq_errno()));
}

/* Packs m with the next seq and sends it; returns the seq. */
static uint64_t raw_send(raw_t *r, Sparsecomm__ClientMsg *m)
{
	m->seq = ++r->seq;
	size_t len = sparsecomm__client_msg__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		IT_FAIL("out of memory");
	sparsecomm__client_msg__pack(m, buf);
	raw_send_bytes(r, buf, len);
	free(buf);
	return m->seq;
}

/* Receives one DaemonMsg within timeout_ms; NULL when none came. */
static Sparsecomm__DaemonMsg *raw_recv(raw_t *r, int timeout_ms)
{
	double deadline = it_now_s() + timeout_ms / 1000.0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		if (left < 0)
			return NULL;
		zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
		int n = zmq_poll(&it, 1, left);
		if (n < 0 && zmq_errno() == EINTR)
			continue;
		if (n < 0)
			IT_FAIL("zmq_poll: %s", zmq_strerror(zmq_errno()));
		if (n == 0)
			return NULL;
		zmq_msg_t msg;
		zmq_msg_init(&msg);
		if (zmq_msg_recv(&msg, r->sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&msg);
			continue;
		}
		int more = zmq_msg_more(&msg);
		Sparsecomm__DaemonMsg *d = sparsecomm__daemon_msg__unpack(
		    NULL, zmq_msg_size(&msg), zmq_msg_data(&msg));
		size_t size = zmq_msg_size(&msg);
		zmq_msg_close(&msg);
		if (more)
			IT_FAIL(
			    "the daemon sent a multi-part message (the protocol is one frame)");
		if (!d)
			IT_FAIL("the daemon sent a %zu-byte frame that is not a DaemonMsg",
				size);
		return d;
	}
}

static const char *body_name(const Sparsecomm__DaemonMsg *d)
{
	switch (d->body_case) {
	case SPARSECOMM__DAEMON_MSG__BODY_HELLO:
		return "hello";
	case SPARSECOMM__DAEMON_MSG__BODY_REG:
		return "reg";
	case SPARSECOMM__DAEMON_MSG__BODY_COMPLETION:
		return "completion";
	case SPARSECOMM__DAEMON_MSG__BODY_STATUS:
		return "status";
	case SPARSECOMM__DAEMON_MSG__BODY_STATS:
		return "stats";
	case SPARSECOMM__DAEMON_MSG__BODY_PENDING:
		return "pending";
	case SPARSECOMM__DAEMON_MSG__BODY_CONFIG:
		return "config";
	case SPARSECOMM__DAEMON_MSG__BODY_ERROR:
		return "error";
	case SPARSECOMM__DAEMON_MSG__BODY_OK:
		return "ok";
	default:
		return "(no body)";
	}
}

/* Waits for the reply to seq, ignoring unrelated unsolicited messages. */
static Sparsecomm__DaemonMsg *raw_reply(raw_t *r, uint64_t seq, int timeout_ms)
{
	double deadline = it_now_s() + timeout_ms / 1000.0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		Sparsecomm__DaemonMsg *d = raw_recv(r, left > 0 ? left : 0);
		if (!d || d->seq == seq)
			return d;
		if (d->seq != 0)
			IT_FAIL("reply with seq %llu while waiting for seq %llu",
				(unsigned long long)d->seq, (unsigned long long)seq);
		sparsecomm__daemon_msg__free_unpacked(d, NULL);
	}
}

/* What a hello asks for (raw_hello_as's flags). */
#define RAW_SUBMIT 1 /* the submit channel */
#define RAW_SILENT 2 /* no ok for an operation accepted (silent_accept) */

/* A hello asking for what flags say (RAW_SUBMIT, RAW_SILENT). Returns its seq. */
static uint64_t raw_hello_as(raw_t *r, uint32_t version, Sparsecomm__Role role, int local_rank,
			     int flags)
{
	Sparsecomm__Hello h = SPARSECOMM__HELLO__INIT;
	h.protocol_version = version;
	h.pid = (int32_t)getpid();
	h.local_rank = local_rank;
	h.role = role;
	h.submit_channel = (flags & RAW_SUBMIT) != 0;
	h.silent_accept = (flags & RAW_SILENT) != 0;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO;
	m.hello = &h;
	return raw_send(r, &m);
}

static uint64_t raw_hello(raw_t *r, uint32_t version, Sparsecomm__Role role, int local_rank)
{
	return raw_hello_as(r, version, role, local_rank, 0);
}

/* A hello the daemon accepts, asking for what flags say (raw_hello_as); returns the
 * trainer's global rank (-1 for control). */
static int raw_hello_ok_as(raw_t *r, Sparsecomm__Role role, int local_rank, int flags)
{
	uint64_t s = raw_hello_as(r, SC_PROTOCOL_VERSION, role, local_rank, flags);
	Sparsecomm__DaemonMsg *d = raw_reply(r, s, RAW_REPLY_MS);
	if (!d)
		IT_FAIL("no reply to a valid hello (role %d, local rank %d) within %d ms", role,
			local_rank, RAW_REPLY_MS);
	if (d->body_case != SPARSECOMM__DAEMON_MSG__BODY_HELLO)
		IT_FAIL("valid hello (role %d, local rank %d) answered with %s%s%s", role,
			local_rank, body_name(d),
			d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? ": " : "",
			d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? d->error->message
									   : "");
	int rank = role == SPARSECOMM__ROLE__ROLE_TRAINER ? d->hello->rank : -1;
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
	return rank;
}

static int raw_hello_ok(raw_t *r, Sparsecomm__Role role, int local_rank)
{
	return raw_hello_ok_as(r, role, local_rank, 0);
}

/* An allreduce of an id never registered must be refused, naming the id: either as the
 * request's error reply or as an error completion of the handle. */
static void unknown_allreduce(raw_t *r, uint32_t id, uint64_t handle)
{
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	ar.op = SC_OP_SUM;
	Sparsecomm__Collective a = SPARSECOMM__COLLECTIVE__INIT;
	a.tensor_id = id;
	a.handle = handle;
	a.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE;
	a.allreduce = &ar;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE;
	m.collective = &a;
	uint64_t s = raw_send(r, &m);
	double deadline = it_now_s() + RAW_REPLY_MS / 1000.0;
	int accepted = 0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		Sparsecomm__DaemonMsg *d = raw_recv(r, left > 0 ? left : 0);
		if (!d)
			IT_FAIL("allreduce of unregistered tensor id %u: no %s within %d ms",
				id, accepted ? "completion after the ok" : "reply",
				RAW_REPLY_MS);
		int status = 0;
		const char *text = NULL;
		if (d->seq == s && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_OK) {
			accepted = 1;
		} else if (d->seq == s && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR) {
			status = d->error->status;
			text = d->error->message;
		} else if (d->seq == 0 &&
			   d->body_case == SPARSECOMM__DAEMON_MSG__BODY_COMPLETION &&
			   d->completion->handle == handle) {
			status = d->completion->status;
			text = d->completion->error;
			if (status == SC_OK)
				IT_FAIL("allreduce of unregistered tensor id %u completed with "
					"SC_OK",
					id);
		} else if (d->seq == s) {
			IT_FAIL("allreduce of unregistered tensor id %u answered with %s", id,
				body_name(d));
		}
		if (text) {
			if (status >= 0)
				IT_FAIL("allreduce of unregistered tensor id %u: error with "
					"non-error status %d ('%s')",
					id, status, text);
			if (!it_mentions_number(text, id))
				IT_FAIL(
				    "error for unregistered tensor id %u does not name the id: "
				    "%s '%s'",
				    id, sc_status_name((sc_status_t)status), text);
			it_log("allreduce of unregistered id %u: %s %s: %s", id,
			       accepted ? "completion" : "error reply",
			       sc_status_name((sc_status_t)status), text);
			sparsecomm__daemon_msg__free_unpacked(d, NULL);
			return;
		}
		sparsecomm__daemon_msg__free_unpacked(d, NULL);
	}
}

/* Sends frames that are not protobuf; the daemon may answer with an error or drop them.
 * Returns a description of what happened. */
static void garbage(raw_t *r, const char *when)
{
	/* 0xff is field 31 with wire type 7, which does not exist: never a valid message. */
	static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 'n', 'o', 't', ' ',  'p',
				       'r',  'o',  't',	 'o',  'b', 'u', 'f', 0x00, 0x07};
	raw_send_bytes(r, junk, sizeof(junk));
	raw_send_bytes(r, "", 0);
	Sparsecomm__DaemonMsg *d = raw_recv(r, RAW_QUIET_MS);
	if (!d) {
		it_log("garbage frames %s: no reply (dropped)", when);
		return;
	}
	if (d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR)
		it_log("garbage frames %s: error reply %s: %s", when,
		       sc_status_name((sc_status_t)d->error->status), d->error->message);
	else
		IT_FAIL("garbage frames %s answered with %s instead of an error", when,
			body_name(d));
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
}

/* The daemon still answers a fresh control client's status request. */
static void daemon_alive(const char *after)
{
	raw_t r;
	raw_open(&r);
	raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	Sparsecomm__Empty e = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATUS;
	m.status = &e;
	uint64_t s = raw_send(&r, &m);
	Sparsecomm__DaemonMsg *d = raw_reply(&r, s, RAW_REPLY_MS);
	if (!d)
		IT_FAIL("after %s the daemon no longer answers a status request", after);
	if (d->body_case != SPARSECOMM__DAEMON_MSG__BODY_STATUS)
		IT_FAIL("after %s a status request is answered with %s", after, body_name(d));
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
	raw_close(&r);
}

static void raw_bye(raw_t *r)
{
	Sparsecomm__Empty e = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_BYE;
	m.bye = &e;
	uint64_t s = raw_send(r, &m);
	Sparsecomm__DaemonMsg *d = raw_reply(r, s, RAW_REPLY_MS);
	if (!d)
		IT_FAIL("no reply to bye within %d ms", RAW_REPLY_MS);
	if (d->body_case != SPARSECOMM__DAEMON_MSG__BODY_OK)
		IT_FAIL("bye answered with %s%s%s", body_name(d),
			d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? ": " : "",
			d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? d->error->message
									   : "");
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
}

/* The library path after the raw abuse: a normal allreduce across the job is exact. */
static void library_still_works(const char *name)
{
	char why[512];
	sc_client_t *c = it_connect();
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, 1000);
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 9, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "allreduce of '%s'", name);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, 1000, 9, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("'%s': %zu of 1000 elements wrong: %s", name, wrong, why);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
}

int it_unknown(int argc, char **argv)
{
	raw_t junk;
	raw_open(&junk);
	garbage(&junk, "before any hello");
	raw_close(&junk);
	daemon_alive("garbage before hello");

	raw_t r;
	raw_open(&r);
	raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_TRAINER, it_env.env_local_rank);
	unknown_allreduce(&r, 987654321u, 4242);
	unknown_allreduce(&r, 0, 4243);
	raw_bye(&r);
	raw_close(&r);

	raw_t ctl;
	raw_open(&ctl);
	raw_hello_ok(&ctl, SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	garbage(&ctl, "after a control hello");
	raw_close(&ctl);
	daemon_alive("garbage after hello");

	library_still_works("unknown.after");
	it_pass();
}

/* A hello of another protocol version is refused with SC_ERR_VERSION naming both. */
static void refused_version(uint32_t version, Sparsecomm__Role role, int local_rank)
{
	raw_t r;
	raw_open(&r);
	uint64_t s = raw_hello(&r, version, role, local_rank);
	Sparsecomm__DaemonMsg *d = raw_reply(&r, s, RAW_REPLY_MS);
	const char *who = role == SPARSECOMM__ROLE__ROLE_TRAINER ? "trainer" : "control";
	if (!d)
		IT_FAIL("%s hello with protocol_version %u: no reply within %d ms", who,
			version, RAW_REPLY_MS);
	if (d->body_case != SPARSECOMM__DAEMON_MSG__BODY_ERROR)
		IT_FAIL("%s hello with protocol_version %u answered with %s, expected an error",
			who, version, body_name(d));
	const char *msg = d->error->message;
	if (d->error->status != SC_ERR_VERSION)
		IT_FAIL("%s hello with protocol_version %u: status %s, expected "
			"SC_ERR_VERSION ('%s')",
			who, version, sc_status_name((sc_status_t)d->error->status), msg);
	if (!it_mentions_number(msg, version) || !it_mentions_number(msg, SC_PROTOCOL_VERSION))
		IT_FAIL("%s hello with protocol_version %u: the error does not name both "
			"versions (%u and %d): '%s'",
			who, version, version, SC_PROTOCOL_VERSION, msg);
	it_log("%s hello with protocol_version %u refused: %s", who, version, msg);
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
	raw_close(&r);
}

int it_version(int argc, char **argv)
{
	/* a version from nowhere, and the library's previous one (its Allreduce request) */
	const uint32_t versions[] = {999, SC_PROTOCOL_VERSION - 1};
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		refused_version(versions[i], SPARSECOMM__ROLE__ROLE_TRAINER,
				it_env.env_local_rank);
		refused_version(versions[i], SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	}
	daemon_alive("a refused hello");
	library_still_works("version.after");
	it_pass();
}

/* Registers a float32 tensor of numel elements on the raw trainer session r; returns its id. */
static uint32_t raw_register(raw_t *r, const char *name, uint64_t numel)
{
	Sparsecomm__RegisterTensor rt = SPARSECOMM__REGISTER_TENSOR__INIT;
	rt.name = (char *)name;
	rt.dtype = SC_FLOAT32;
	rt.numel = numel;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_REG;
	m.reg = &rt;
	uint64_t s = raw_send(r, &m);
	Sparsecomm__DaemonMsg *d = raw_reply(r, s, RAW_REPLY_MS);
	if (!d || d->body_case != SPARSECOMM__DAEMON_MSG__BODY_REG)
		IT_FAIL("registration of '%s': %s%s%s", name, d ? body_name(d) : "no reply",
			d && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? ": " : "",
			d && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR
			    ? d->error->message
			    : "");
	uint32_t id = d->reg->tensor_id;
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
	return id;
}

/*
 * What became of request seq, an operation with handle: its error reply, or after its ok
 * the completion of handle, within timeout_ms. Returns the status (SC_OK: completed)
 * with the error's text in why.
 */
static int raw_outcome(raw_t *r, uint64_t seq, uint64_t handle, int timeout_ms, char *why,
		       size_t len)
{
	double deadline = it_now_s() + timeout_ms / 1000.0;
	snprintf(why, len, "(no error)");
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		Sparsecomm__DaemonMsg *d = raw_recv(r, left > 0 ? left : 0);
		if (!d)
			IT_FAIL("operation %llu: no reply or completion within %d ms",
				(unsigned long long)handle, timeout_ms);
		int status = 1;
		if (d->seq == seq && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR) {
			status = d->error->status;
			snprintf(why, len, "%s", d->error->message);
		} else if (d->seq == 0 &&
			   d->body_case == SPARSECOMM__DAEMON_MSG__BODY_COMPLETION &&
			   d->completion->handle == handle) {
			status = d->completion->status;
			snprintf(why, len, "%s", d->completion->error);
		} else if (d->seq == seq && d->body_case != SPARSECOMM__DAEMON_MSG__BODY_OK) {
			IT_FAIL("operation %llu answered with %s", (unsigned long long)handle,
				body_name(d));
		}
		sparsecomm__daemon_msg__free_unpacked(d, NULL);
		if (status != 1)
			return status;
	}
}

/* Sends a Collective request for tensor id with handle: a sum allreduce, or with
 * bodyless no body at all. Returns its seq. */
static uint64_t raw_collective(raw_t *r, uint32_t id, uint64_t handle, int bodyless)
{
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	Sparsecomm__Collective c = SPARSECOMM__COLLECTIVE__INIT;
	c.tensor_id = id;
	c.handle = handle;
	if (!bodyless) {
		c.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE;
		c.allreduce = &ar;
	}
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE;
	m.collective = &c;
	return raw_send(r, &m);
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	for (; v >= 0x80; v >>= 7)
		p[n++] = (uint8_t)(v | 0x80);
	p[n++] = (uint8_t)v;
	return n;
}

/* Sends what a library of protocol version 3 sent for sc_broadcast_async from root 0:
 * ClientMsg{seq, Allreduce (field 4){tensor_id, handle, broadcast = true (field 7)}},
 * encoded by hand since the field's message has changed. Returns its seq. */
static uint64_t raw_v3_broadcast(raw_t *r, uint32_t id, uint64_t handle)
{
	uint8_t in[32], out[64];
	size_t ni = 0, no = 0;
	in[ni++] = 0x08; /* field 1, varint: tensor_id */
	ni += put_varint(in + ni, id);
	in[ni++] = 0x10; /* field 2, varint: handle */
	ni += put_varint(in + ni, handle);
	in[ni++] = 0x38; /* field 7, varint: broadcast */
	in[ni++] = 1;
	uint64_t seq = ++r->seq;
	out[no++] = 0x08; /* ClientMsg field 1, varint: seq */
	no += put_varint(out + no, seq);
	out[no++] = 0x22; /* field 4, length-delimited */
	no += put_varint(out + no, ni);
	memcpy(out + no, in, ni);
	raw_send_bytes(r, out, no + ni);
	return seq;
}

/* A refusal of a request that names no collective: SC_ERR_PROTOCOL naming rank and name. */
static void check_bodyless(const char *what, int status, const char *why, int rank,
			   const char *name)
{
	if (status != SC_ERR_PROTOCOL || !it_mentions_rank(why, rank) || !strstr(why, name))
		IT_FAIL("%s: expected SC_ERR_PROTOCOL naming rank %d and tensor '%s', got %s: "
			"%s",
			what, rank, name, sc_status_name((sc_status_t)status), why);
	it_log("%s refused: %s", what, why);
}

/*
 * bodyless: a Collective request without a body is refused with SC_ERR_PROTOCOL naming the
 * trainer and the tensor. Rank 0 sends one while every other rank asks for a valid
 * allreduce of the same tensor: the others' operations fail naming rank 0, well before
 * the stall timeout, and the tensor's next step succeeds on every rank. A request as a
 * library of protocol version 3 encoded it (a broadcast) is refused likewise on every
 * rank, and the daemon then serves the library normally.
 */
int it_bodyless(int argc, char **argv)
{
	char why[1024];
	raw_t r;
	raw_open(&r);
	int rank = raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_TRAINER, it_env.env_local_rank);
	uint32_t id = raw_register(&r, "bodyless.step", 16);
	uint32_t v3 = raw_register(&r, "bodyless.v3", 16);

	double t0 = it_now_s();
	uint64_t s = raw_collective(&r, id, 101, rank == 0);
	int st = raw_outcome(&r, s, 101, IT_ERROR_TIMEOUT_MS, why, sizeof(why));
	if (rank == 0)
		check_bodyless("rank 0's request without a body", st, why, 0, "bodyless.step");
	else if (st >= 0 || !it_mentions_rank(why, 0) || !strstr(why, "bodyless.step"))
		IT_FAIL(
		    "rank %d's allreduce of 'bodyless.step' beside rank 0's request without "
		    "a body: expected an error naming rank 0 and the tensor, got %s: %s",
		    rank, sc_status_name((sc_status_t)st), why);
	else if (it_now_s() - t0 > 20.0)
		IT_FAIL("rank %d: the step rank 0 gave no collective failed only after %.1f s",
			rank, it_now_s() - t0);
	else
		it_log("rank %d's allreduce beside it: %s: %s", rank,
		       sc_status_name((sc_status_t)st), why);

	s = raw_collective(&r, id, 102, 0);
	if ((st = raw_outcome(&r, s, 102, IT_OP_TIMEOUT_MS, why, sizeof(why))) != SC_OK)
		IT_FAIL("rank %d: the step after the refusal: %s: %s", rank,
			sc_status_name((sc_status_t)st), why);

	s = raw_v3_broadcast(&r, v3, 103);
	st = raw_outcome(&r, s, 103, IT_ERROR_TIMEOUT_MS, why, sizeof(why));
	check_bodyless("a protocol version 3 broadcast request", st, why, rank, "bodyless.v3");
	raw_bye(&r);
	raw_close(&r);
	library_still_works("bodyless.after");
	it_pass();
}

/*
 * silent-accept: a trainer whose hello says silent_accept gets no ok for an allreduce the
 * daemon accepts, only its completion, and still the error of one it refuses (an id never
 * registered); a trainer whose hello does not say it gets the ok, then the completion.
 * Trainers of even rank say it, those of odd rank do not, side by side in one world.
 */
int it_silent_accept(int argc, char **argv)
{
	raw_t r;
	raw_open(&r);
	int silent = it_env.env_rank % 2 == 0;
	int rank = raw_hello_ok_as(&r, SPARSECOMM__ROLE__ROLE_TRAINER, it_env.env_local_rank,
				   silent ? RAW_SILENT : 0);
	uint32_t id = raw_register(&r, "silent.step", 256);
	for (uint64_t handle = 201; handle <= 203; handle++) {
		uint64_t s = raw_collective(&r, id, handle, 0);
		int oks = 0;
		for (;;) {
			Sparsecomm__DaemonMsg *d = raw_recv(&r, IT_OP_TIMEOUT_MS);
			if (!d)
				IT_FAIL("rank %d: step %llu: no completion within %d ms", rank,
					(unsigned long long)handle, IT_OP_TIMEOUT_MS);
			int done = d->seq == 0 &&
				   d->body_case == SPARSECOMM__DAEMON_MSG__BODY_COMPLETION &&
				   d->completion->handle == handle;
			if (done && d->completion->status != SC_OK)
				IT_FAIL("rank %d: step %llu failed: %s: %s", rank,
					(unsigned long long)handle,
					sc_status_name((sc_status_t)d->completion->status),
					d->completion->error);
			if (d->seq == s && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_OK)
				oks++;
			else if (d->seq == s)
				IT_FAIL("rank %d: step %llu answered with %s", rank,
					(unsigned long long)handle, body_name(d));
			sparsecomm__daemon_msg__free_unpacked(d, NULL);
			if (done)
				break;
		}
		if (oks != !silent)
			IT_FAIL("rank %d (silent_accept %d): step %llu got %d ok before its "
				"completion, expected %d",
				rank, silent, (unsigned long long)handle, oks, !silent);
	}
	it_log("rank %d (silent_accept %d): three steps completed with %s", rank, silent,
	       silent ? "no ok" : "an ok each");
	if (silent)
		unknown_allreduce(&r, 987654321u, 204);
	raw_bye(&r);
	raw_close(&r);
	it_pass();
}

/* A process's peak resident memory in KiB (VmHWM of /proc/PID/status). */
static long vm_hwm_kib(int pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		IT_FAIL("cannot read %s: %s", path, strerror(errno));
	long kib = -1;
	while (kib < 0 && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = atol(line + 6);
	fclose(f);
	if (kib < 0)
		IT_FAIL("%s has no VmHWM line", path);
	return kib;
}

/* The daemon pid's CPU time in clock ticks (utime + stime of /proc/PID/stat), -1 when
 * unreadable. */
static long cpu_ticks(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* past the command, which may hold spaces */
	unsigned long ut = 0, st = 0;
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* Waits, at most max_s, until the daemon pid has used under 3 clock ticks of CPU in half a
 * second: it has read what the clients sent (its periodic tick costs less). */
static void wait_daemon_idle(int pid, double max_s)
{
	double t0 = it_now_s();
	long last = cpu_ticks(pid);
	while (last >= 0 && it_now_s() - t0 < max_s) {
		it_sleep_ms(500);
		long now = cpu_ticks(pid);
		if (now < 0 || now - last < 3)
			return;
		last = now;
	}
}

int it_oversize(int argc, char **argv)
{
	const size_t frame = (size_t)192 << 20;
	sc_client_t *c = it_connect();
	it_register(c, "oversize.probe", SC_FLOAT32, 16);
	int pid = it_daemon_pid();
	long before = vm_hwm_kib(pid);
	raw_t r;
	raw_open(&r);
	raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	char *big = malloc(frame);
	if (!big)
		IT_FAIL("out of memory for a %zu-byte frame", frame);
	memset(big, 0x5a, frame);
	raw_send_bytes(&r, big, frame);
	free(big);
	/* the frame has left this process once the daemon's answer to a later one could come:
	 * wait for the socket to flush it, then for the daemon to still answer */
	it_sleep_ms(1500);
	raw_close(&r);
	daemon_alive("a 192 MiB control frame");
	long after = vm_hwm_kib(pid);
	it_log("daemon pid %d: VmHWM %ld KiB before the 192 MiB frame, %ld KiB after", pid,
	       before, after);
	if (after - before >= 32 << 10)
		IT_FAIL(
		    "the daemon (pid %d) buffered the %zu-byte frame: its peak resident memory "
		    "grew from %ld to %ld KiB",
		    pid, frame, before, after);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	library_still_works("oversize.after");
	it_pass();
}

/* The pid `sparsectl status` lists for local rank lr on this node, 0 when none is listed. */
static int status_pid_of(int lr)
{
	const char *args[] = {"status", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *cl = it_json_get(s, "clients");
	int pid = 0;
	for (size_t i = 0; cl && cl->type == IT_JARR && i < cl->n; i++) {
		const it_json_t *l = it_json_get(cl->items[i], "local_rank");
		const it_json_t *p = it_json_get(cl->items[i], "pid");
		if (l && p && l->type == IT_JNUM && p->type == IT_JNUM && (int)l->num == lr)
			pid = (int)p->num;
	}
	it_json_free(s);
	return pid;
}

/* A pid no process has: a child's, once reaped. */
static int vanished_pid(void)
{
	pid_t p = fork();
	if (p < 0)
		IT_FAIL("fork: %s", strerror(errno));
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (int)p;
}

/* A child that takes local rank lr as a raw trainer whose hello declares pid declared, then
 * waits to be killed; returns its pid once its hello was accepted. */
static pid_t false_pid_trainer(int lr, int declared)
{
	int fds[2];
	if (pipe(fds) != 0)
		IT_FAIL("pipe: %s", strerror(errno));
	pid_t p = fork();
	if (p < 0)
		IT_FAIL("fork: %s", strerror(errno));
	if (p == 0) {
		close(fds[0]);
		raw_t r;
		raw_open(&r);
		Sparsecomm__Hello h = SPARSECOMM__HELLO__INIT;
		h.protocol_version = SC_PROTOCOL_VERSION;
		h.pid = declared;
		h.local_rank = lr;
		h.role = SPARSECOMM__ROLE__ROLE_TRAINER;
		Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
		m.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO;
		m.hello = &h;
		Sparsecomm__DaemonMsg *d = raw_reply(&r, raw_send(&r, &m), RAW_REPLY_MS);
		if (!d || d->body_case != SPARSECOMM__DAEMON_MSG__BODY_HELLO)
			IT_FAIL("hello declaring pid %d for local rank %d: %s %s", declared, lr,
				d ? body_name(d) : "no reply",
				d && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR
				    ? d->error->message
				    : "");
		if (write(fds[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	char c;
	ssize_t n = read(fds[0], &c, 1);
	close(fds[0]);
	if (n != 1)
		IT_FAIL("the trainer declaring pid %d never got its hello accepted", declared);
	return p;
}

/*
 * false-pid MODE: local rank 1 is taken by a raw trainer whose hello declares pid 1 (MODE
 * "init": a trainer in a PID namespace of its own) or a pid no process has (MODE
 * "invisible"). The daemon must track it by its real pid (the kernel's): listed with it,
 * kept while it lives, and on its death noticed (local rank 1 freed, for a new trainer to
 * take). MODE "foreign": the daemon runs in a PID namespace of its own, so it cannot see
 * the trainer's process at all (it lists the declared pid 1): its death must still be
 * noticed, by its connection's hang-up. Run on one node of two trainers; local rank 1's
 * own trainer only passes.
 */
int it_false_pid(int argc, char **argv)
{
	if (it_env.env_local_rank != 0)
		it_pass();
	int invisible = argc > 1 && !strcmp(argv[1], "invisible");
	int foreign = argc > 1 && !strcmp(argv[1], "foreign");
	int declared = invisible ? vanished_pid() : 1;
	pid_t child = false_pid_trainer(1, declared);
	it_sleep_ms(1200); /* several ticks of the daemon's liveness checks */
	int listed = status_pid_of(1);
	if (listed != (foreign ? declared : (int)child))
		IT_FAIL("local rank 1 (pid %d, declaring pid %d) is listed with pid %d after "
			"1.2 s",
			(int)child, declared, listed);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	double t0 = it_now_s();
	while ((listed = status_pid_of(1)) != 0 && it_now_s() - t0 < 10)
		it_sleep_ms(100);
	if (listed)
		IT_FAIL("local rank 1 is still held by pid %d 10 s after its trainer (pid %d, "
			"declaring %d) was killed",
			listed, (int)child, declared);
	it_log("pid %d declaring pid %d: listed by its real pid, freed %.2f s after its death",
	       (int)child, declared, it_now_s() - t0);
	raw_t r;
	raw_open(&r);
	raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_TRAINER, 1);
	raw_bye(&r);
	raw_close(&r);
	it_pass();
}

/* Sends m count times without reading a reply, or until the socket takes nothing for 3 s
 * (the daemon shut the connection, and ZeroMQ, its receive queue full, does not see it);
 * returns the number sent. */
static int flood(raw_t *r, Sparsecomm__ClientMsg *m, int count)
{
	size_t len = sparsecomm__client_msg__get_packed_size(m);
	uint8_t buf[256];
	if (len > sizeof(buf))
		IT_FAIL("flood message of %zu bytes", len);
	sparsecomm__client_msg__pack(m, buf);
	double t0 = it_now_s();
	int i = 0;
	while (i < count) {
		if (zmq_send(r->sock, buf, len, ZMQ_DONTWAIT) >= 0) {
			i++;
			t0 = it_now_s();
			continue;
		}
		if (zmq_errno() != EAGAIN)
			IT_FAIL("zmq_send: %s", zmq_strerror(zmq_errno()));
		if (it_now_s() - t0 > 3)
			break;
		it_sleep_ms(1);
	}
	it_log("flood: %d of %d requests sent", i, count);
	return i;
}

/*
 * ctl-flood: control clients that never read their replies. One sends 40000 requests for
 * the whole configuration (each reply is kilobytes), another 100000 allreduces of an
 * unknown id (each answered by a small error). The daemon must drop each (its log says so:
 * run.sh checks), its peak resident memory must grow by less than 64 MiB, and it must go
 * on serving.
 */
int it_ctl_flood(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	it_register(c, "flood.probe", SC_FLOAT32, 16);
	int pid = it_daemon_pid();
	long before = vm_hwm_kib(pid);

	raw_t r;
	raw_open(&r);
	raw_hello_ok(&r, SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	Sparsecomm__ConfigGet g = SPARSECOMM__CONFIG_GET__INIT;
	g.key = "";
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_GET;
	m.config_get = &g;
	m.seq = 7;
	flood(&r, &m, 40000);

	raw_t s;
	raw_open(&s);
	raw_hello_ok(&s, SPARSECOMM__ROLE__ROLE_CONTROL, -1);
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	Sparsecomm__Collective a = SPARSECOMM__COLLECTIVE__INIT;
	a.tensor_id = 987654321u;
	a.handle = 5;
	a.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE;
	a.allreduce = &ar;
	Sparsecomm__ClientMsg m2 = SPARSECOMM__CLIENT_MSG__INIT;
	m2.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE;
	m2.collective = &a;
	m2.seq = 8;
	flood(&s, &m2, 100000);

	/* until the daemon has read both floods (a sanitizer build on a loaded host read the
	 * second's 66560 messages, the bound, only after the client had gone, and its drop
	 * was never logged) */
	it_sleep_ms(1500);
	wait_daemon_idle(pid, 60);
	daemon_alive("two control clients that never read");
	long after = vm_hwm_kib(pid);
	it_log("daemon pid %d: VmHWM %ld KiB before the floods, %ld KiB after", pid, before,
	       after);
	/* 64 MiB; under AddressSanitizer (make test-sanitize), whose allocator keeps freed
	 * memory in quarantine (256 MiB by default) and adds its shadow, 320 MiB: the
	 * unbounded queue grew the plain build by 324 MiB here, the sanitized one by more */
#if defined(__SANITIZE_ADDRESS__)
	const long bound_kib = 320 << 10;
#else
	const long bound_kib = 64 << 10;
#endif
	if (after - before >= bound_kib)
		IT_FAIL(
		    "the daemon (pid %d) kept what its clients never read: its peak resident "
		    "memory grew from %ld to %ld KiB",
		    pid, before, after);
	raw_close(&r);
	raw_close(&s);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	/* the daemon may still be reading the floods when the goodbye comes */
	double t0 = it_now_s();
	while (status_pid_of(it_env.env_local_rank > 0 ? it_env.env_local_rank : 0) &&
	       it_now_s() - t0 < 20)
		it_sleep_ms(100);
	library_still_works("flood.after");
	it_pass();
}

/* ---- the submit channel ------------------------------------------------------------- */

typedef struct {
	char path[108];
	uint8_t token[64];
	size_t token_len;
} raw_offer_t;

/* A trainer's hello that asks for the submit channel (local rank -1: the daemon's choice,
 * retried while the node's ranks are taken by a session ending); returns the offer. */
static raw_offer_t raw_hello_submit(raw_t *r)
{
	raw_offer_t o;
	memset(&o, 0, sizeof(o));
	double deadline = it_now_s() + 10.0;
	for (;;) {
		uint64_t s = raw_hello_as(r, SC_PROTOCOL_VERSION,
					  SPARSECOMM__ROLE__ROLE_TRAINER, -1, RAW_SUBMIT);
		Sparsecomm__DaemonMsg *d = raw_reply(r, s, RAW_REPLY_MS);
		if (!d)
			IT_FAIL("no reply to a hello asking for the submit channel");
		if (d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR &&
		    d->error->status == SC_ERR_LIMIT && it_now_s() < deadline) {
			sparsecomm__daemon_msg__free_unpacked(d, NULL);
			it_sleep_ms(100); /* a dropped session ends at the daemon's next tick */
			continue;
		}
		if (d->body_case != SPARSECOMM__DAEMON_MSG__BODY_HELLO)
			IT_FAIL("hello asking for the submit channel answered with %s%s%s",
				body_name(d),
				d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? ": " : "",
				d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR
				    ? d->error->message
				    : "");
		const Sparsecomm__HelloReply *hr = d->hello;
		if (!hr->submit_path || !*hr->submit_path || hr->submit_token.len < 8 ||
		    hr->submit_token.len > sizeof(o.token) ||
		    strlen(hr->submit_path) >= sizeof(o.path))
			IT_FAIL(
			    "the hello's reply offers no submit channel (path '%s', a token "
			    "of %zu bytes; at least 8 expected)",
			    hr->submit_path ? hr->submit_path : "", hr->submit_token.len);
		snprintf(o.path, sizeof(o.path), "%s", hr->submit_path);
		memcpy(o.token, hr->submit_token.data, hr->submit_token.len);
		o.token_len = hr->submit_token.len;
		sparsecomm__daemon_msg__free_unpacked(d, NULL);
		return o;
	}
}

/* A connection to the submit channel that has sent len bytes of tok (none when NULL); one
 * the daemon closed at once (refused at its accept) reads as closed to submit_answer. */
static int submit_connect(const raw_offer_t *o, const void *tok, size_t len)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", o->path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		IT_FAIL("connecting to the submit channel %s: %s", o->path, strerror(errno));
	ssize_t n = tok ? send(fd, tok, len, MSG_NOSIGNAL) : (ssize_t)len;
	if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
		return fd;
	if (n != (ssize_t)len)
		IT_FAIL("sending a token on the submit channel: %s", strerror(errno));
	return fd;
}

/* What the daemon sends on fd within timeout_ms: 1 its acknowledgement, 0 the connection
 * closed, -1 nothing. */
static int submit_answer(int fd, int timeout_ms)
{
	struct pollfd p = {fd, POLLIN, 0};
	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	uint8_t b = 0;
	ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
	if (n == 1 && b == 1)
		return 1;
	if (n <= 0)
		return 0;
	IT_FAIL("the submit channel sent an unexpected byte %u", b);
}

/* A connection from a child process with o's right token: 0 when it was refused. */
static int submit_from_child(const raw_offer_t *o)
{
	pid_t p = fork();
	if (p < 0)
		IT_FAIL("fork: %s", strerror(errno));
	if (p == 0) {
		int fd = submit_connect(o, o->token, o->token_len);
		_exit(submit_answer(fd, RAW_REPLY_MS) == 0 ? 0 : 1);
	}
	int st = 0;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

/* Sends m packed on the channel fd, with seq. */
static void submit_send(int fd, Sparsecomm__ClientMsg *m, uint64_t seq)
{
	m->seq = seq;
	uint8_t buf[4096];
	size_t len = sparsecomm__client_msg__get_packed_size(m);
	if (len > sizeof(buf))
		IT_FAIL("request of %zu bytes", len);
	sparsecomm__client_msg__pack(m, buf);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		IT_FAIL("sending on the submit channel: %s", strerror(errno));
}

/* A raw trainer session with a bound channel: its DEALER and the channel's descriptor. */
static int raw_bound(raw_t *r, uint32_t *id_p, const char *name)
{
	raw_open(r);
	raw_offer_t o = raw_hello_submit(r);
	if (id_p)
		*id_p = raw_register(r, name, 16);
	int fd = submit_connect(&o, o.token, o.token_len);
	if (submit_answer(fd, RAW_REPLY_MS) != 1)
		IT_FAIL("the submit channel refused the session's own token");
	return fd;
}

/* A bound session whose channel carries what the library never sends (what): the daemon
 * closes the channel (the session dropped) and lives on. */
static void submit_abuse(const char *what, const void *buf, size_t len)
{
	raw_t r;
	int fd = raw_bound(&r, NULL, NULL);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		IT_FAIL("%s: send: %s", what, strerror(errno));
	if (submit_answer(fd, RAW_REPLY_MS) != 0)
		IT_FAIL("%s on the submit channel: the daemon did not close it within %d ms",
			what, RAW_REPLY_MS);
	/* told why over the control socket first: an ErrorReply with seq 0, the notice */
	Sparsecomm__DaemonMsg *m = raw_recv(&r, RAW_REPLY_MS);
	if (!m || m->seq != 0 || m->body_case != SPARSECOMM__DAEMON_MSG__BODY_ERROR ||
	    !m->error->message ||
	    strncmp(m->error->message, SC_CTL_DROP_NOTICE, strlen(SC_CTL_DROP_NOTICE)))
		IT_FAIL(
		    "%s on the submit channel: no drop notice on the control socket (%s)", what,
		    m ? (m->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? m->error->message
									    : "another message")
		      : "nothing");
	it_log("%s: told '%s'", what, m->error->message);
	sparsecomm__daemon_msg__free_unpacked(m, NULL);
	close(fd);
	raw_close(&r);
	daemon_alive(what);
	double deadline = it_now_s() + 10.0; /* it ends at the daemon's next tick */
	while (status_pid_of(0) != 0 && it_now_s() < deadline)
		it_sleep_ms(100);
	if (status_pid_of(0) != 0)
		IT_FAIL("%s: the dropped session still holds local rank 0 after 10 s", what);
	it_log("%s: the session dropped, the daemon alive", what);
}

/*
 * submit-channel (one node, one trainer): a wrong token, the right one from another
 * process, and a connection that sends nothing are closed while the session goes on; its
 * own token binds it (a second connection with it is closed) and an allreduce sent over
 * the channel completes; a request over the control socket after that drops the session
 * with an error naming its pid; garbage, a message of zero bytes and an oversize message
 * on the channel drop only their session; the library works afterwards.
 */
int it_submit_channel(int argc, char **argv)
{
	(void)argc, (void)argv;
	char why[1024];
	raw_t r;
	raw_open(&r);
	raw_offer_t o = raw_hello_submit(&r);
	uint8_t wrong[64];
	memcpy(wrong, o.token, o.token_len);
	wrong[0] ^= 0x5a;
	int fd = submit_connect(&o, wrong, o.token_len);
	if (submit_answer(fd, RAW_REPLY_MS) != 0)
		IT_FAIL("a wrong token was not refused (the connection stayed open)");
	close(fd);
	if (submit_from_child(&o) != 0)
		IT_FAIL("the right token from another process (pid) was not refused");
	double t0 = it_now_s();
	fd = submit_connect(&o, NULL, 0);
	if (submit_answer(fd, RAW_REPLY_MS) != 0)
		IT_FAIL("a connection that sent no token was not closed within %d ms",
			RAW_REPLY_MS);
	it_log("a silent connection closed after %.1f s", it_now_s() - t0);
	close(fd);
	/* the session is unaffected: it registers over the control socket, then binds */
	uint32_t id = raw_register(&r, "submit.x", 16);
	fd = submit_connect(&o, o.token, o.token_len);
	if (submit_answer(fd, RAW_REPLY_MS) != 1)
		IT_FAIL("after the refusals the session's own token was not acknowledged");
	int again = submit_connect(&o, o.token, o.token_len);
	if (submit_answer(again, RAW_REPLY_MS) != 0)
		IT_FAIL(
		    "a second connection with the token of a bound channel was not refused");
	close(again);
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	Sparsecomm__Collective c = SPARSECOMM__COLLECTIVE__INIT;
	c.tensor_id = id;
	c.handle = 7001;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE;
	c.allreduce = &ar;
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE;
	m.collective = &c;
	submit_send(fd, &m, 7001);
	int st = raw_outcome(&r, 7001, 7001, IT_OP_TIMEOUT_MS, why, sizeof(why));
	if (st != SC_OK)
		IT_FAIL("an allreduce over the bound channel: %s: %s",
			sc_status_name((sc_status_t)st), why);
	/* a request over the control socket now: refused naming the pid, session dropped */
	c.handle = 7002;
	uint64_t s = raw_send(&r, &m);
	Sparsecomm__DaemonMsg *d = raw_reply(&r, s, RAW_REPLY_MS);
	char pid[32];
	snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
	if (!d || d->body_case != SPARSECOMM__DAEMON_MSG__BODY_ERROR ||
	    !strstr(d->error->message, pid) || !strstr(d->error->message, "submit channel"))
		IT_FAIL("a request over the control socket after binding: expected an error "
			"naming %s and the submit channel, got %s%s%s",
			pid, d ? body_name(d) : "no reply",
			d && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR ? ": " : "",
			d && d->body_case == SPARSECOMM__DAEMON_MSG__BODY_ERROR
			    ? d->error->message
			    : "");
	it_log("over the control socket after binding: %s", d->error->message);
	sparsecomm__daemon_msg__free_unpacked(d, NULL);
	if (submit_answer(fd, RAW_REPLY_MS) != 0)
		IT_FAIL("the session was not dropped (its channel stayed open)");
	close(fd);
	raw_close(&r);
	daemon_alive("a request over the control socket after binding");
	static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 'n', 'o', 't', 0x07};
	submit_abuse("garbage", junk, sizeof(junk));
	submit_abuse("a message of zero bytes", junk, 0);
	size_t big = (size_t)(64 << 10) + 4096;
	uint8_t *buf = calloc(1, big);
	if (!buf)
		IT_FAIL("out of memory");
	submit_abuse("an oversize message", buf, big);
	free(buf);
	library_still_works("submit.after");
	it_pass();
}

/* The daemon's CPU time (user + system) in seconds, from /proc/pid/stat. */
static double proc_cpu_s(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		IT_FAIL("reading %s: %s", path, strerror(errno));
	fclose(f);
	const char *p = strrchr(buf, ')'); /* fields after the command's name */
	unsigned long long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		IT_FAIL("cannot parse %s", path);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * submit-emfile (one node, one trainer): the daemon out of descriptors (its RLIMIT_NOFILE
 * lowered to those it has open, with prlimit(2)) while a connection waits on the submit
 * channel's listener: it stops polling the listener until its next tick instead of spinning on
 * it (at most 0.3 s of CPU in 1.5 s), then, its limit restored, goes on; the library works
 * afterwards.
 */
int it_submit_emfile(int argc, char **argv)
{
	(void)argc, (void)argv;
	raw_offer_t o; /* the channel beside the control socket */
	const char *ctl = it_env.socket, *slash;
	if (!strncmp(ctl, "ipc://", 6))
		ctl += 6;
	slash = strrchr(ctl, '/');
	snprintf(o.path, sizeof(o.path), "%.*s/submit.sock", slash ? (int)(slash - ctl) : 1,
		 slash ? ctl : ".");
	int probe = submit_connect(&o, NULL, 0);
	struct ucred uc;
	socklen_t len = sizeof(uc);
	if (getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0 || uc.pid <= 0)
		IT_FAIL("the daemon's pid from SO_PEERCRED: %s", strerror(errno));
	close(probe);
	struct rlimit old, none;
	if (prlimit(uc.pid, RLIMIT_NOFILE, NULL, &old) != 0) {
		printf("itest submit-emfile: skipped: prlimit on the daemon (pid %d): %s\n",
		       (int)uc.pid, strerror(errno));
		it_pass();
	}
	/* the limit at its lowest free descriptor, so that no new one can be made (poll(2) with
	 * more descriptors than the limit fails, so 0 would break the daemon's ZeroMQ). The
	 * daemon may close one of its descriptors between the listing and the limit (a lower
	 * one is then free and the connection is accepted, and refused at once): tried again
	 * until a connection stays in the backlog. */
	int fd = -1;
	for (int attempt = 0; fd < 0 && attempt < 10; attempt++) {
		char fddir[64], used[1024] = {0};
		snprintf(fddir, sizeof(fddir), "/proc/%d/fd", (int)uc.pid);
		DIR *dir = opendir(fddir);
		if (!dir)
			IT_FAIL("opendir %s: %s", fddir, strerror(errno));
		for (struct dirent *e; (e = readdir(dir));)
			if (e->d_name[0] != '.' && atoi(e->d_name) < (int)sizeof(used))
				used[atoi(e->d_name)] = 1;
		closedir(dir);
		int lowest = 0;
		while (lowest < (int)sizeof(used) && used[lowest])
			lowest++;
		none = old;
		none.rlim_cur = (rlim_t)lowest;
		if (prlimit(uc.pid, RLIMIT_NOFILE, &none, NULL) != 0)
			IT_FAIL("lowering the daemon's RLIMIT_NOFILE: %s", strerror(errno));
		fd =
		    submit_connect(&o, NULL, 0); /* waits in the backlog: accept4 gets EMFILE */
		struct pollfd p = {fd, POLLIN, 0};
		char b;
		if (poll(&p, 1, 300) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0) {
			close(fd); /* accepted (and refused): a descriptor was free after all */
			fd = -1;
			if (prlimit(uc.pid, RLIMIT_NOFILE, &old, NULL) != 0)
				IT_FAIL("restoring the daemon's RLIMIT_NOFILE: %s",
					strerror(errno));
		}
	}
	if (fd < 0)
		IT_FAIL("the daemon kept accepting under a lowered RLIMIT_NOFILE");
	double cpu0 = proc_cpu_s(uc.pid), t0 = it_now_s();
	it_sleep_ms(1500);
	double cpu = proc_cpu_s(uc.pid) - cpu0, wall = it_now_s() - t0;
	if (prlimit(uc.pid, RLIMIT_NOFILE, &old, NULL) != 0)
		IT_FAIL("restoring the daemon's RLIMIT_NOFILE: %s", strerror(errno));
	close(fd);
	if (cpu > 0.3)
		IT_FAIL("out of descriptors with a connection waiting, the daemon spent %.2f s "
			"of CPU in %.2f s (it spins on its listener)",
			cpu, wall);
	it_log("out of descriptors: %.2f s of the daemon's CPU in %.2f s", cpu, wall);
	daemon_alive("running out of descriptors");
	library_still_works("emfile.after");
	it_pass();
}
