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
 */
#include "itest.h"
#include "sparsecomm.pb-c.h"
#include "world_protocol.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define PEER_REPLY_MS 10000

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
