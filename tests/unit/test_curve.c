/*
 * test_curve.c: the coordinator channel's CurveZMQ and ZAP handler (world/curve.c) over
 * real ZeroMQ sockets on loopback: a rank's client, keyed from the job secret, is admitted
 * and its messages carry its rank; a client with the coordinator's public key but a key
 * pair of its own, and a client keyed from another secret, deliver nothing.
 */
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "unit.h"
#include "util/log.h"
#include "world/curve.h"

typedef struct {
	scd_daemon_t d;
	void *sock;
	scd_curve_t *curve;
} node_t;

static void node_init(node_t *n, uv_loop_t *loop, void *zctx, const uint8_t *secret, int rank)
{
	memset(n, 0, sizeof(*n));
	n->d.loop = loop;
	n->d.zctx = zctx;
	n->d.rank = rank;
	n->d.world_size = 3;
	scd_secret_from_bytes(&n->d.secret, secret, 32);
	n->sock = zmq_socket(zctx, rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(n->sock, ZMQ_LINGER, &zero, sizeof(zero));
	CHECK_EQ_INT(scd_curve_setup(&n->d, n->sock, rank == 0, &n->curve), SC_OK);
	CHECK_TRUE((rank == 0) == (n->curve != NULL));
}

/* Serves the coordinator for ms: ZAP requests and messages; returns the rank the first
 * message came with (-2: none came). */
static int serve(node_t *c, uv_loop_t *loop, int ms)
{
	scd_zmsg_t z = {0};
	for (int i = 0; i < ms / 10; i++) {
		uv_run(loop, UV_RUN_NOWAIT);
		scd_curve_drain(c->curve);
		if (scd_zmsg_recv(c->sock, 1, &z)) {
			int r = scd_curve_rank(&z);
			scd_zmsg_done(&z);
			return r;
		}
		zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
		zmq_poll(&it, 1, 10);
	}
	return -2;
}

static void client_send(void *sock, const char *endpoint)
{
	CHECK_EQ_INT(zmq_connect(sock, endpoint), 0);
	CHECK_TRUE(zmq_send(sock, "hello", 5, ZMQ_DONTWAIT) == 5);
}

UNIT_TEST(curve_admits_ranks_by_their_keys)
{
	if (!zmq_has("curve"))
		unit_skip("this libzmq has no CURVE");
	scd_log_level = -1;
	uint8_t secret[32], other[32];
	for (int i = 0; i < 32; i++)
		secret[i] = other[i] = (uint8_t)unit_rng();
	other[0] ^= 1;
	uv_loop_t loop;
	uv_loop_init(&loop);
	void *zctx = zmq_ctx_new();
	node_t coord, r2, stranger;
	node_init(&coord, &loop, zctx, secret, 0);
	CHECK_EQ_INT(zmq_bind(coord.sock, "tcp://127.0.0.1:*"), 0);
	char endpoint[64];
	size_t len = sizeof(endpoint);
	zmq_getsockopt(coord.sock, ZMQ_LAST_ENDPOINT, endpoint, &len);

	/* rank 2, keyed from the secret: admitted, its message bound to rank 2 */
	node_init(&r2, &loop, zctx, secret, 2);
	client_send(r2.sock, endpoint);
	CHECK_EQ_INT(serve(&coord, &loop, 5000), 2);

	/* the coordinator's public key but a key pair of its own: nothing delivered */
	scd_curve_pair_t server;
	CHECK_EQ_INT(scd_secret_curve_server(&coord.d.secret, &server), SC_OK);
	char pub[41], sec[41];
	CHECK_EQ_INT(zmq_curve_keypair(pub, sec), 0);
	void *own = zmq_socket(zctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(own, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(own, ZMQ_CURVE_SERVERKEY, server.public_z85, 41);
	zmq_setsockopt(own, ZMQ_CURVE_PUBLICKEY, pub, 41);
	zmq_setsockopt(own, ZMQ_CURVE_SECRETKEY, sec, 41);
	client_send(own, endpoint);
	/* another secret: its rank 1 key and server key are not this job's */
	node_init(&stranger, &loop, zctx, other, 1);
	client_send(stranger.sock, endpoint);
	CHECK_EQ_INT(serve(&coord, &loop, 1500), -2);

	/* the real rank 2 still gets through afterwards */
	CHECK_TRUE(zmq_send(r2.sock, "again", 5, ZMQ_DONTWAIT) == 5);
	CHECK_EQ_INT(serve(&coord, &loop, 5000), 2);

	zmq_close(own);
	zmq_close(stranger.sock);
	zmq_close(r2.sock);
	zmq_close(coord.sock);
	scd_curve_destroy(coord.curve);
	uv_run(&loop, UV_RUN_NOWAIT);
	zmq_ctx_term(zctx);
	uv_loop_close(&loop);
}
