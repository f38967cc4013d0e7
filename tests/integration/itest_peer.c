/*
 * itest_peer.c: a coordinator's peer socket against a rank that does not go through a
 * daemon: a raw ZeroMQ DEALER speaking PeerMsg by hand (proto/sparsecomm.proto).
 * SPARSECOMM_SOCKET names the coordinator's endpoint (tcp://HOST:PORT); run.sh starts the
 * coordinator alone (rank 0 of 2).
 *
 * join-refused: a Join of the previous daemon protocol version is refused naming both
 *   versions; a Join whose transport differs from the coordinator's is refused with a
 *   reason naming the rank and both transports; a Join with the coordinator's transport
 *   but a malformed bootstrap blob is refused naming the rank and the blob's size.
 * peer-oversize: a 192 MiB frame to the coordinator's socket is refused as its header
 *   arrives; the coordinator still answers a join afterwards (run.sh checks its peak
 *   resident memory).
 * peer-spoof: against a coordinator without a secret (loopback): a connection that has not
 *   joined proposes a configuration change; then a raw rank 1 joins and, once the world
 *   info came, reports for rank 0 (a NodeState and a ReadyList) and sends what only the
 *   coordinator sends (a Plan, a configuration change to apply); then it opens a
 *   connection to rank 0's data port and passes the hello with a wrong proof of the
 *   secret: rank 0 answers with a refusal and closes it. run.sh checks in the
 *   coordinator's log that each was dropped, naming the sender (the data-port connection
 *   by its address), and none applied.
 * peer-stranger: against a coordinator with a secret_file, two peers without the secret
 *   (a plain ZeroMQ peer, and a CurveZMQ peer that knows the coordinator's public key,
 *   $SPARSECOMM_CURVE_SERVERKEY, but has a key pair of its own) each send garbage, a Join
 *   of rank 1 and every other message type of the peer protocol: neither gets any answer
 * (run.sh then checks the coordinator's log and that the job still forms and sums).
 */
#include "itest.h"
#include "sparsecomm.pb-c.h"
#include "world_protocol.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#define PEER_REPLY_MS 10000
#define PEER_MAX_KEYS 64

/* The keys a Join must carry, with the daemon's defaults (what the coordinator run.sh
 * starts has): the lines of `sparsecommd --dump-config` marked "same on every node", a
 * decimal number written in full as a daemon's Join writes it. */
static size_t same_keys(Sparsecomm__ConfigSet *ks, Sparsecomm__ConfigSet **pk,
			char (*text)[2][256])
{
	char cmd[4200], line[1024];
	snprintf(cmd, sizeof(cmd), "'%s/sparsecommd' --dump-config", it_env.self_dir);
	FILE *f = popen(cmd, "r");
	if (!f)
		IT_FAIL("cannot run %s", cmd);
	size_t n = 0;
	while (fgets(line, sizeof(line), f) && n < PEER_MAX_KEYS) {
		char *eq = strstr(line, " = "), *hash = strstr(line, "  # ");
		if (!eq || !hash || !strstr(hash, "same on every node"))
			continue;
		*eq = *hash = 0;
		char *v = eq + 3, *end = NULL;
		double d = strtod(v, &end);
		snprintf(text[n][0], sizeof(text[n][0]), "%.255s", line);
		if (*v && end && !*end && strpbrk(v, ".e"))
			snprintf(text[n][1], sizeof(text[n][1]), "%.17g", d);
		else
			snprintf(text[n][1], sizeof(text[n][1]), "%.255s", v);
		sparsecomm__config_set__init(&ks[n]);
		ks[n].key = text[n][0], ks[n].value = text[n][1];
		pk[n] = &ks[n];
		n++;
	}
	pclose(f);
	if (!n)
		IT_FAIL("%s lists no key the same on every node", cmd);
	return n;
}

/* A Join's keys marked the same on every node, the daemon's defaults. */
static void join_keys(Sparsecomm__Join *j)
{
	static Sparsecomm__ConfigSet ks[PEER_MAX_KEYS], *pk[PEER_MAX_KEYS];
	static char text[PEER_MAX_KEYS][2][256];
	j->n_same_keys = same_keys(ks, pk, text);
	j->same_keys = pk;
}

/* Sends a Join of rank 1 of 2 and returns the refusal's reason (the caller frees it). */
static char *join_refused(void *sock, uint32_t version, const char *transport, const void *blob,
			  size_t len)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
	j.protocol_version = version;
	j.rank = 1;
	j.world_size = 2;
	j.local_size = 1;
	j.transport = (char *)transport;
	j.transport_blob.data = (uint8_t *)blob;
	j.transport_blob.len = len;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN;
	m.join = &j;
	uint8_t buf[1024];
	size_t n = sparsecomm__peer_msg__get_packed_size(&m);
	if (n > sizeof(buf))
		IT_FAIL("join of %zu bytes", n);
	sparsecomm__peer_msg__pack(&m, buf);
	if (zmq_send(sock, buf, n, 0) < 0)
		IT_FAIL("zmq_send: %s", zmq_strerror(zmq_errno()));
	double deadline = it_now_s() + PEER_REPLY_MS / 1000.0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
		int k = left > 0 ? zmq_poll(&it, 1, left) : 0;
		if (k < 0 && zmq_errno() == EINTR)
			continue;
		if (k <= 0)
			IT_FAIL("no answer to a join with transport '%s' within %d ms",
				transport, PEER_REPLY_MS);
		zmq_msg_t msg;
		zmq_msg_init(&msg);
		if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&msg);
			continue;
		}
		Sparsecomm__PeerMsg *r =
		    sparsecomm__peer_msg__unpack(NULL, zmq_msg_size(&msg), zmq_msg_data(&msg));
		zmq_msg_close(&msg);
		if (!r)
			IT_FAIL("the coordinator sent a frame that is not a PeerMsg");
		if (r->body_case != SPARSECOMM__PEER_MSG__BODY_REFUSED)
			IT_FAIL("a join with transport '%s' got message %d, not a refusal",
				transport, r->body_case);
		char *why = strdup(r->refused->reason ? r->refused->reason : "");
		sparsecomm__peer_msg__free_unpacked(r, NULL);
		return why;
	}
}

/* A DEALER connected to the coordinator ($SPARSECOMM_SOCKET). */
static void *peer_connect(void **ctx_p)
{
	void *ctx = zmq_ctx_new();
	void *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
	if (!sock)
		IT_FAIL("zmq socket: %s", zmq_strerror(zmq_errno()));
	int zero = 0;
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(sock, it_env.socket) != 0)
		IT_FAIL("zmq_connect(%s): %s", it_env.socket, zmq_strerror(zmq_errno()));
	*ctx_p = ctx;
	return sock;
}

/* A join of the previous protocol version is refused naming both versions. */
static void old_version_refused(void *sock)
{
	char *why = join_refused(sock, SCD_WORLD_PROTOCOL_VERSION - 1, "tcp", "x", 1);
	char want[96];
	snprintf(want, sizeof(want), "rank 1 speaks protocol version %d, the coordinator %d",
		 SCD_WORLD_PROTOCOL_VERSION - 1, SCD_WORLD_PROTOCOL_VERSION);
	if (!strstr(why, want))
		IT_FAIL("refusal of a join of the previous version: '%s'", why);
	it_log("other version: %s", why);
	free(why);
}

int it_peer_oversize(int argc, char **argv)
{
	const size_t frame = (size_t)192 << 20;
	void *ctx, *sock = peer_connect(&ctx);
	char *big = malloc(frame);
	if (!big)
		IT_FAIL("out of memory for a %zu-byte frame", frame);
	memset(big, 0x5a, frame);
	if (zmq_send(sock, big, frame, 0) < 0)
		IT_FAIL("zmq_send of %zu bytes: %s", frame, zmq_strerror(zmq_errno()));
	free(big);
	it_sleep_ms(1500);
	zmq_close(sock);
	sock = peer_connect(&ctx);
	old_version_refused(sock);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	it_pass();
}

/* Packs m and sends it on sock. */
static void send_msg(void *sock, const Sparsecomm__PeerMsg *m)
{
	uint8_t buf[1024];
	size_t n = sparsecomm__peer_msg__get_packed_size(m);
	if (n > sizeof(buf))
		IT_FAIL("peer message of %zu bytes", n);
	sparsecomm__peer_msg__pack(m, buf);
	if (zmq_send(sock, buf, n, 0) < 0)
		IT_FAIL("zmq_send: %s", zmq_strerror(zmq_errno()));
}

/* Waits (bounded) for a message of body case want on sock; returns it (the caller frees
 * it). */
static Sparsecomm__PeerMsg *wait_for(void *sock, int want)
{
	double deadline = it_now_s() + PEER_REPLY_MS / 1000.0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
		int k = left > 0 ? zmq_poll(&it, 1, left) : 0;
		if (k < 0 && zmq_errno() == EINTR)
			continue;
		if (k <= 0)
			IT_FAIL("no peer message %d within %d ms", want, PEER_REPLY_MS);
		zmq_msg_t msg;
		zmq_msg_init(&msg);
		if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&msg);
			continue;
		}
		Sparsecomm__PeerMsg *r =
		    sparsecomm__peer_msg__unpack(NULL, zmq_msg_size(&msg), zmq_msg_data(&msg));
		zmq_msg_close(&msg);
		int got = r ? (int)r->body_case : -1;
		if (got == want)
			return r;
		if (r)
			sparsecomm__peer_msg__free_unpacked(r, NULL);
		if (got == SPARSECOMM__PEER_MSG__BODY_REFUSED)
			IT_FAIL("refused while waiting for peer message %d", want);
	}
}

/* Reads exactly len bytes from fd (its receive timeout set); returns what recv last
 * returned, or len. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	ssize_t n = 1;
	while (got < len && (n = recv(fd, (char *)buf + got, len - got, 0)) > 0)
		got += (size_t)n;
	return got == len ? (ssize_t)got : n;
}

/* Connects to rank 0's data port (its blob in wi: port, little-endian, then address) as
 * rank 1 and passes the hello (docs/design.md, "Authentication": magic, protocol 3,
 * world id, rank, size, data_protection none, no cipher, a nonce) with a proof of no
 * secret: the answer must be a refusal, and the connection closed. */
static void wrong_proof(const Sparsecomm__WorldInfo *wi)
{
	if (!wi || wi->n_peers != 2 || wi->peers[0]->transport_blob.len < 3)
		IT_FAIL("world info without rank 0's data port");
	const uint8_t *blob = wi->peers[0]->transport_blob.data;
	size_t blen = wi->peers[0]->transport_blob.len;
	char addr[64];
	snprintf(addr, sizeof(addr), "%.*s", (int)(blen - 2), (const char *)blob + 2);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)(blob[0] | blob[1] << 8))};
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		IT_FAIL("rank 0's data address '%s'", addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		IT_FAIL("connect to rank 0's data port %s: %s", addr, strerror(errno));
	uint8_t b[96] = {0x53, 0x43, 0x44, 0x54, 3};
	uint64_t world = htole64(wi->world_id);
	memcpy(b + 8, &world, 8);
	b[16] = 1;
	b[20] = 2;
	if (getrandom(b + 32, 32, 0) != 32 || send(fd, b, 64, MSG_NOSIGNAL) != 64)
		IT_FAIL("hello to rank 0's data port: %s", strerror(errno));
	if (read_full(fd, b, 96) != 96 || b[4] != 0)
		IT_FAIL("rank 0 did not ack the hello (code %u)", b[4]);
	if (getrandom(b, 32, 0) != 32 || send(fd, b, 32, MSG_NOSIGNAL) != 32)
		IT_FAIL("proof to rank 0's data port: %s", strerror(errno));
	if (read_full(fd, b, 4) != 4 || !(b[0] | b[1] | b[2] | b[3]))
		IT_FAIL("rank 0 did not refuse a wrong proof of the secret");
	if (read_full(fd, b, 1) != 0)
		IT_FAIL("rank 0 kept the data-port connection open after a wrong proof");
	close(fd);
	it_log("data port: a wrong proof refused and the connection closed");
}

int it_peer_spoof(int argc, char **argv)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	void *ctx, *stranger = peer_connect(&ctx);
	cs.key = "log_level";
	cs.value = "debug";
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE;
	m.config_propose = &cs;
	send_msg(stranger, &m);
	/* on a busy host the connection may not be up yet: closing waits for the message */
	int linger = 5000;
	zmq_setsockopt(stranger, ZMQ_LINGER, &linger, sizeof(linger));
	it_sleep_ms(300);
	zmq_close(stranger);

	void *sock = zmq_socket(ctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (!sock || zmq_connect(sock, it_env.socket) != 0)
		IT_FAIL("zmq_connect(%s): %s", it_env.socket, zmq_strerror(zmq_errno()));
	Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
	uint8_t blob[] = {0x10, 0x27, '1', '2', '7', '.', '0', '.', '0', '.', '1'};
	j.protocol_version = SCD_WORLD_PROTOCOL_VERSION;
	j.rank = 1;
	j.world_size = 2;
	j.local_size = 1;
	j.transport = "tcp";
	j.nonfinite = "pass";
	join_keys(&j);
	j.transport_blob.data = blob;
	j.transport_blob.len = sizeof(blob);
	m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN;
	m.join = &j;
	send_msg(sock, &m);
	Sparsecomm__PeerMsg *world = wait_for(sock, SPARSECOMM__PEER_MSG__BODY_WORLD);
	it_log("joined as rank 1");

	Sparsecomm__NodeState ns = SPARSECOMM__NODE_STATE__INIT;
	ns.rank = 0;
	ns.degraded = 1;
	ns.reason = "spoofed by rank 1";
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_STATE;
	m.node_state = &ns;
	send_msg(sock, &m);
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	rl.rank = 0;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_READY;
	m.ready = &rl;
	send_msg(sock, &m);
	Sparsecomm__Plan plan = SPARSECOMM__PLAN__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PLAN;
	m.plan = &plan;
	send_msg(sock, &m);
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY;
	m.config_apply = &cs;
	send_msg(sock, &m);
	wrong_proof(world->world);
	sparsecomm__peer_msg__free_unpacked(world, NULL);
	it_sleep_ms(500);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	it_pass();
}

/* Sends sock garbage, a Join of rank 1 of 2 and then every other message type of the
 * peer protocol (each body of PeerMsg's oneof, taken from the descriptor so that a type
 * added later is sent too, with its fields at their defaults), and fails when anything
 * comes back within ms. */
#define STRANGER_MSGS 64
static void expect_silence(void *sock, const char *who, int ms)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
	uint8_t blob[] = {0x10, 0x27, '1', '2', '7', '.', '0', '.', '0', '.', '1'};
	j.protocol_version = SCD_WORLD_PROTOCOL_VERSION;
	j.rank = 1;
	j.world_size = 2;
	j.local_size = 1;
	j.transport = "tcp";
	j.nonfinite = "pass";
	join_keys(&j);
	j.transport_blob.data = blob;
	j.transport_blob.len = sizeof(blob);
	static uint8_t buf[STRANGER_MSGS][512];
	size_t len[STRANGER_MSGS];
	int n = 0;
	memset(buf[n], 0xa5, sizeof(buf[n]));
	len[n++] = sizeof(buf[0]);
	m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN;
	m.join = &j;
	len[n] = sparsecomm__peer_msg__pack(&m, buf[n]);
	n++;
	const ProtobufCMessageDescriptor *d = &sparsecomm__peer_msg__descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
		    f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (n == STRANGER_MSGS)
			IT_FAIL("PeerMsg has more than %d bodies", STRANGER_MSGS - 2);
		const ProtobufCMessageDescriptor *bd = f->descriptor;
		ProtobufCMessage *body = calloc(1, bd->sizeof_message);
		if (!body)
			IT_FAIL("out of memory");
		protobuf_c_message_init(bd, body);
		Sparsecomm__PeerMsg one = SPARSECOMM__PEER_MSG__INIT;
		*(uint32_t *)((char *)&one + f->quantifier_offset) = f->id;
		*(ProtobufCMessage **)((char *)&one + f->offset) = body;
		if (sparsecomm__peer_msg__get_packed_size(&one) > sizeof(buf[n]))
			IT_FAIL("PeerMsg body %s packs over %zu bytes", f->name,
				sizeof(buf[n]));
		len[n] = sparsecomm__peer_msg__pack(&one, buf[n]);
		n++;
		free(body);
	}
	/* PeerMsg has 17 bodies (proto/sparsecomm.proto) and may gain more */
	if (n - 1 < 17)
		IT_FAIL("%s: only %d PeerMsg bodies found in the descriptor", who, n - 1);
	it_log("%s: sending garbage and %d message types", who, n - 1);
	/* a peer whose handshake fails never has its messages taken: the send may queue
	 * them, or find no peer to queue them for */
	for (int i = 0; i < n; i++)
		if (zmq_send(sock, buf[i], len[i], ZMQ_DONTWAIT) < 0 && zmq_errno() != EAGAIN)
			IT_FAIL("%s: zmq_send: %s", who, zmq_strerror(zmq_errno()));
	zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
	double deadline = it_now_s() + ms / 1000.0;
	int left;
	while ((left = (int)((deadline - it_now_s()) * 1000.0)) > 0) {
		int k = zmq_poll(&it, 1, left);
		if (k < 0 && zmq_errno() == EINTR)
			continue;
		if (k > 0)
			IT_FAIL("%s got an answer from the coordinator", who);
		break;
	}
	it_log("%s: no answer in %d ms", who, ms);
}

int it_peer_stranger(int argc, char **argv)
{
	void *ctx, *sock = peer_connect(&ctx);
	expect_silence(sock, "a plain peer", 2000);
	zmq_close(sock);
	const char *server = getenv("SPARSECOMM_CURVE_SERVERKEY");
	if (!server || strlen(server) != 40)
		IT_FAIL("$SPARSECOMM_CURVE_SERVERKEY is not a Z85 key: '%s'",
			server ? server : "(unset)");
	char pub[41], sec[41];
	if (zmq_curve_keypair(pub, sec) != 0)
		IT_FAIL("zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
	sock = zmq_socket(ctx, ZMQ_DEALER);
	int zero = 0;
	if (!sock || zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 41) != 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 41) != 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 41) != 0 ||
	    zmq_connect(sock, it_env.socket) != 0)
		IT_FAIL("curve peer: %s", zmq_strerror(zmq_errno()));
	expect_silence(sock, "a CURVE peer with a key of its own", 2000);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	it_pass();
}

int it_join_refused(int argc, char **argv)
{
	void *ctx, *sock = peer_connect(&ctx);
	old_version_refused(sock);
	char *why;
	why = join_refused(sock, SCD_WORLD_PROTOCOL_VERSION, "nccl", "x", 1);
	if (!strstr(why, "rank 1 uses transport 'nccl', the coordinator 'tcp'"))
		IT_FAIL("refusal of a join with another transport: '%s'", why);
	it_log("other transport: %s", why);
	free(why);
	why = join_refused(sock, SCD_WORLD_PROTOCOL_VERSION, "tcp", "x", 1);
	if (!strstr(why, "rank 1 sent a malformed tcp bootstrap blob (1 bytes)"))
		IT_FAIL("refusal of a join with a malformed blob: '%s'", why);
	it_log("malformed blob: %s", why);
	free(why);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	it_pass();
}
