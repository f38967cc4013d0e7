/*
 * test_pipe.c: the peer pipe (world/pipe.h) and the numbered stream of peer messages
 * (world.c, scd_world_deliver).
 *
 * The pipe: a coordinator end and two node ends on one loop, over loopback. Messages of
 * every size up to a megabyte go both ways, in order and intact, sealed and in clear. A
 * node with another key, or of another world, is never up; a stranger's bytes, and more
 * than SCD_PIPE_PENDING_MAX silent connections, are closed; a message over the bound
 * closes its pipe and no other; a pipe whose peer fails says so, once.
 *
 * The stream (world/stream.c): a node's messages from the coordinator numbered 1, 2, 3
 * handled in that order whatever order they come in, a number seen twice handled once, one
 * numbered in another world dropped, and a gap never skipped; the node's
 * own messages kept until acknowledged, and sent again when their pipe closes or their
 * acknowledgement is late. The coordinator's WorldInfo (unnumbered) sent again at each
 * heartbeat until the node sends a message numbered in that world.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "transport/tcp_auth.h"
#include "unit.h"
#include "util/clock.h"
#include "world/pipe.h"
#include "world/world_int.h"

/* ---- the pipe ----------------------------------------------------------------------- */

#define MAXMSG 512

typedef struct {
	int n;
	int from[MAXMSG];
	size_t len[MAXMSG];
	uint32_t tag[MAXMSG];	 /* the message's first word */
	int bad;		 /* a message whose bytes are not its pattern */
	int closed, closed_rank; /* the closed callback's calls, and its last rank */
} got_t;

static void on_closed(void *ctx, int rank)
{
	got_t *g = ctx;
	g->closed++;
	g->closed_rank = rank;
}

static void fill(uint8_t *b, size_t len, uint32_t tag)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(tag * 31 + i * 7);
	if (len >= 4)
		memcpy(b, &tag, 4);
}

static void on_msg(void *ctx, int rank, const uint8_t *msg, size_t len)
{
	got_t *g = ctx;
	if (g->n >= MAXMSG)
		return;
	uint32_t tag = 0;
	if (len >= 4)
		memcpy(&tag, msg, 4);
	for (size_t i = 4; i < len; i++)
		if (msg[i] != (uint8_t)(tag * 31 + i * 7))
			g->bad++;
	g->from[g->n] = rank;
	g->len[g->n] = len;
	g->tag[g->n] = tag;
	g->n++;
}

static void spin(uv_loop_t *loop, int ms, int (*done)(void *), void *arg)
{
	uint64_t end = scd_now_ms() + (uint64_t)ms;
	while (scd_now_ms() < end && !(done && done(arg))) {
		uv_run(loop, UV_RUN_NOWAIT);
		usleep(200);
	}
}

typedef struct {
	scd_pipe_t *coord, *node[3];
	int n;
} ends_t;

static int all_up(void *arg)
{
	ends_t *e = arg;
	for (int i = 1; i <= e->n; i++)
		if (!scd_pipe_up(e->coord, i) || !scd_pipe_up(e->node[i], 0))
			return 0;
	return 1;
}

static uint16_t listen_coord(ends_t *e, uv_loop_t *loop, const uint8_t *key, int encrypt,
			     got_t *g)
{
	e->coord = scd_pipe_new(loop, 0, 3, key, encrypt, on_msg, g);
	CHECK_TRUE(e->coord != NULL);
	uint16_t port = 0;
	char err[200];
	CHECK_EQ_INT(scd_pipe_listen(e->coord, "127.0.0.1", 0, &port, err, sizeof(err)), SC_OK);
	CHECK_TRUE(port != 0);
	scd_pipe_world(e->coord, 0x1234);
	return port;
}

static void ends_free(ends_t *e, uv_loop_t *loop)
{
	scd_pipe_destroy(e->coord);
	for (int i = 1; i <= 2; i++)
		scd_pipe_destroy(e->node[i]);
	uv_run(loop, UV_RUN_NOWAIT);
	uv_run(loop, UV_RUN_NOWAIT);
	CHECK_EQ_INT(uv_loop_close(loop), 0);
}

static void both_ways(int encrypt)
{
	uv_loop_t loop;
	CHECK_EQ_INT(uv_loop_init(&loop), 0);
	uint8_t key[32];
	memset(key, 7, sizeof(key));
	got_t gc = {0}, gn[3] = {{0}};
	ends_t e = {.n = 2};
	uint16_t port = listen_coord(&e, &loop, key, encrypt, &gc);
	for (int i = 1; i <= 2; i++) {
		e.node[i] = scd_pipe_new(&loop, i, 3, key, encrypt, on_msg, &gn[i]);
		CHECK_TRUE(e.node[i] != NULL);
		CHECK_EQ_INT(scd_pipe_send(e.node[i], 0, (const uint8_t *)"x", 1),
			     0); /* no world */
		scd_pipe_world(e.node[i], 0x1234);
		scd_pipe_connect(e.node[i], "127.0.0.1", port);
	}
	spin(&loop, 5000, all_up, &e);
	CHECK_TRUE(all_up(&e));
	/* sizes 4 B to 1 MiB, interleaved both ways */
	static uint8_t buf[1 << 20];
	size_t sizes[] = {4, 5, 100, 4096, 65536, 65537, 300000, 1 << 20};
	int per = 0;
	for (uint32_t t = 0; t < 120; t++) {
		size_t len = sizes[t % (sizeof(sizes) / sizeof(sizes[0]))];
		int node = 1 + (int)(t % 2);
		fill(buf, len, t);
		CHECK_EQ_INT(scd_pipe_send(e.node[node], 0, buf, len), 1);
		CHECK_EQ_INT(scd_pipe_send(e.coord, node, buf, len), 1);
		per++;
	}
	int want = per;
	for (int s = 0; s < 400 && (gc.n < want || gn[1].n + gn[2].n < want); s++)
		spin(&loop, 50, NULL, NULL);
	CHECK_EQ_INT(gc.n, want);
	CHECK_EQ_INT(gn[1].n + gn[2].n, want);
	CHECK_EQ_INT(gc.bad + gn[1].bad + gn[2].bad, 0);
	/* each sender's messages in its order: node i sent the tags of parity i - 1 */
	uint32_t next[3] = {0, 0, 1};
	for (int k = 0; k < gc.n; k++) {
		int from = gc.from[k];
		CHECK_TRUE(from == 1 || from == 2);
		CHECK_EQ_INT(gc.tag[k], next[from]);
		next[from] += 2;
	}
	for (int i = 1; i <= 2; i++)
		for (int k = 0; k < gn[i].n; k++) {
			CHECK_EQ_INT(gn[i].from[k], 0);
			CHECK_EQ_INT(gn[i].tag[k], (uint32_t)(i - 1 + 2 * k));
		}
	ends_free(&e, &loop);
}

UNIT_TEST(pipe_carries_messages_in_order_both_ways_sealed)
{
	both_ways(1);
}

UNIT_TEST(pipe_carries_messages_in_order_both_ways_in_clear)
{
	both_ways(0);
}

/* A pipe whose peer fails while it still has more to write than the sockets hold says so
 * once, and takes nothing more. */
static void fails_and_says_so(int encrypt)
{
	uv_loop_t loop;
	CHECK_EQ_INT(uv_loop_init(&loop), 0);
	uint8_t key[32];
	memset(key, 7, sizeof(key));
	got_t gc = {0}, gn = {0};
	ends_t e = {.n = 1};
	uint16_t port = listen_coord(&e, &loop, key, encrypt, &gc);
	e.node[1] = scd_pipe_new(&loop, 1, 3, key, encrypt, on_msg, &gn);
	scd_pipe_on_closed(e.node[1], on_closed);
	scd_pipe_world(e.node[1], 0x1234);
	scd_pipe_connect(e.node[1], "127.0.0.1", port);
	spin(&loop, 5000, all_up, &e);
	CHECK_TRUE(all_up(&e));
	static uint8_t buf[1 << 20];
	for (uint32_t t = 0; t < 40; t++) { /* 40 MiB: more than two sockets' buffers */
		fill(buf, sizeof(buf), t);
		CHECK_EQ_INT(scd_pipe_send(e.node[1], 0, buf, sizeof(buf)), 1);
	}
	CHECK_EQ_INT(gn.closed, 0);
	scd_pipe_close_all(e.coord, "test: the coordinator's end fails");
	for (int s = 0; s < 100 && scd_pipe_up(e.node[1], 0); s++)
		spin(&loop, 50, NULL, NULL);
	CHECK_TRUE(!scd_pipe_up(e.node[1], 0));
	CHECK_EQ_INT(gc.n, 0);
	CHECK_EQ_INT(gn.closed, 1);
	CHECK_EQ_INT(gn.closed_rank, 0);
	CHECK_EQ_INT(scd_pipe_send(e.node[1], 0, buf, 64), 0);
	ends_free(&e, &loop);
	CHECK_EQ_INT(gn.closed, 1);
}

UNIT_TEST(pipe_that_fails_says_so_once_sealed)
{
	fails_and_says_so(1);
}

UNIT_TEST(pipe_that_fails_says_so_once_in_clear)
{
	fails_and_says_so(0);
}

/* A node with another key, or of another world, is never up, and nothing of it reaches
 * the coordinator. */
UNIT_TEST(pipe_refuses_another_key_and_another_world)
{
	for (int wrong_world = 0; wrong_world < 2; wrong_world++) {
		uv_loop_t loop;
		CHECK_EQ_INT(uv_loop_init(&loop), 0);
		uint8_t key[32], other[32];
		memset(key, 7, sizeof(key));
		memset(other, 7, sizeof(other));
		if (!wrong_world)
			other[31] ^= 1;
		got_t gc = {0}, gn = {0};
		ends_t e = {.n = 1};
		uint16_t port = listen_coord(&e, &loop, key, 1, &gc);
		e.node[1] = scd_pipe_new(&loop, 1, 3, other, 1, on_msg, &gn);
		scd_pipe_world(e.node[1], wrong_world ? 0x9999 : 0x1234);
		scd_pipe_connect(e.node[1], "127.0.0.1", port);
		spin(&loop, 1500, all_up, &e);
		CHECK_TRUE(!scd_pipe_up(e.coord, 1));
		CHECK_TRUE(!scd_pipe_up(e.node[1], 0));
		CHECK_EQ_INT(scd_pipe_send(e.node[1], 0, (const uint8_t *)"abcd", 4), 0);
		CHECK_EQ_INT(gc.n, 0);
		ends_free(&e, &loop);
	}
}

static int raw_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	CHECK_EQ_INT(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* 1 when the coordinator closed fd (end of stream or reset), draining what it sent. */
static int closed_by_peer(uv_loop_t *loop, int fd, int ms)
{
	uint64_t end = scd_now_ms() + (uint64_t)ms;
	while (scd_now_ms() < end) {
		uv_run(loop, UV_RUN_NOWAIT);
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 5) == 1) {
			char b[256];
			ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
			if (n <= 0)
				return 1;
		}
	}
	return 0;
}

/* Reads n bytes of fd while the loop runs (2 s at most): 1 when they came. */
static int recv_exact(uv_loop_t *loop, int fd, uint8_t *b, size_t n)
{
	size_t got = 0;
	uint64_t end = scd_now_ms() + 2000;
	while (got < n && scd_now_ms() < end) {
		uv_run(loop, UV_RUN_NOWAIT);
		ssize_t r = recv(fd, b + got, n - got, MSG_DONTWAIT);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0)
			return 0;
		else
			usleep(200);
	}
	return got == n;
}

/* A stranger's hello that is not one is answered with a refusal and closed; silent
 * connections past SCD_PIPE_PENDING_MAX close the oldest; a node's pipe that announces a
 * message over the bound is closed, and the others stay up. */
UNIT_TEST_TIMEOUT(pipe_closes_strangers_and_oversized_messages, 60)
{
	uv_loop_t loop;
	CHECK_EQ_INT(uv_loop_init(&loop), 0);
	uint8_t key[32];
	memset(key, 7, sizeof(key));
	got_t gc = {0}, gn[3] = {{0}};
	ends_t e = {.n = 2};
	uint16_t port = listen_coord(&e, &loop, key, 0, &gc);
	/* garbage of a hello's size */
	int fd = raw_connect(port);
	char junk[56];
	memset(junk, 'J', sizeof(junk));
	CHECK_EQ_INT(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	CHECK_TRUE(closed_by_peer(&loop, fd, 2000));
	close(fd);
	/* silent connections: the first ones go once more than the bound wait */
	int fds[SCD_PIPE_PENDING_MAX + 4];
	for (int i = 0; i < SCD_PIPE_PENDING_MAX + 4; i++) {
		fds[i] = raw_connect(port);
		spin(&loop, 5, NULL, NULL);
	}
	spin(&loop, 200, NULL, NULL);
	for (int i = 0; i < 4; i++)
		CHECK_MSG(closed_by_peer(&loop, fds[i], 1000),
			  "silent connection %d still open", i);
	CHECK_TRUE(!closed_by_peer(&loop, fds[SCD_PIPE_PENDING_MAX + 3], 100));
	/* and each is closed after the handshake's 2 s */
	CHECK_TRUE(closed_by_peer(&loop, fds[SCD_PIPE_PENDING_MAX + 3], 3500));
	for (int i = 0; i < SCD_PIPE_PENDING_MAX + 4; i++)
		close(fds[i]);
	/* a real node, and one made here by hand that proves the key, then announces a
	 * message over the bound: that one is closed, the real one stays up */
	e.n = 1;
	e.node[1] = scd_pipe_new(&loop, 1, 3, key, 0, on_msg, &gn[1]);
	scd_pipe_world(e.node[1], 0x1234);
	scd_pipe_connect(e.node[1], "127.0.0.1", port);
	spin(&loop, 5000, all_up, &e);
	CHECK_TRUE(all_up(&e));
	fd = raw_connect(port);
	scd_tcp_auth_conn_t ac = {.world_id = 0x1234, .connector_rank = 2, .acceptor_rank = 0};
	uint8_t hello[56] = "SCPP";
	uint32_t v = 1, rank = 2, aes = 0;
	uint64_t wid = 0x1234;
	memcpy(hello + 4, &v, 4);
	memcpy(hello + 8, &wid, 8);
	memcpy(hello + 16, &rank, 4);
	memcpy(hello + 20, &aes, 4);
	scd_tcp_auth_nonce(ac.connector_nonce);
	memcpy(hello + 24, ac.connector_nonce, 32);
	CHECK_EQ_INT(send(fd, hello, sizeof(hello), 0), (ssize_t)sizeof(hello));
	uint8_t ack[72];
	CHECK_TRUE(recv_exact(&loop, fd, ack, sizeof(ack)));
	CHECK_EQ_INT(ack[0], 0);
	memcpy(ac.acceptor_nonce, ack + 8, 32);
	CHECK_TRUE(scd_tcp_auth_check(key, SCD_TCP_AUTH_ACCEPTOR, &ac, ack + 40));
	uint8_t proof[32], verdict[4];
	scd_tcp_auth_mac(key, SCD_TCP_AUTH_CONNECTOR, &ac, proof);
	CHECK_EQ_INT(send(fd, proof, sizeof(proof), 0), (ssize_t)sizeof(proof));
	CHECK_TRUE(recv_exact(&loop, fd, verdict, sizeof(verdict)));
	CHECK_EQ_INT(verdict[0], 0);
	spin(&loop, 50, NULL, NULL);
	CHECK_TRUE(scd_pipe_up(e.coord, 2));
	uint8_t big[8];
	uint32_t huge = (uint32_t)(SCD_PEER_MSG_MAX_BYTES + 1);
	memcpy(big, &huge, 4);
	memcpy(big + 4, "abcd", 4);
	CHECK_EQ_INT(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
	CHECK_TRUE(closed_by_peer(&loop, fd, 2000));
	close(fd);
	CHECK_TRUE(!scd_pipe_up(e.coord, 2));
	CHECK_TRUE(scd_pipe_up(e.coord, 1));
	CHECK_EQ_INT(gc.n, 0);
	ends_free(&e, &loop);
}

/* ---- the numbered stream ------------------------------------------------------------ */

/* A ConfigSet of cycle_time_ms = value from the coordinator, numbered seq in epoch. */
static Sparsecomm__PeerMsg *config_msg(int value, uint64_t seq, uint64_t epoch)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	char v[16];
	snprintf(v, sizeof(v), "%d", value);
	cs.key = "cycle_time_ms";
	cs.value = v;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY;
	m.config_apply = &cs;
	m.seq = seq;
	m.epoch = epoch;
	uint8_t buf[256];
	size_t n = sparsecomm__peer_msg__pack(&m, buf);
	return sparsecomm__peer_msg__unpack(NULL, n, buf);
}

static void give(scd_world_t *w, int value, uint64_t seq, uint64_t epoch)
{
	Sparsecomm__PeerMsg *m = config_msg(value, seq, epoch);
	CHECK_TRUE(m != NULL);
	if (!scd_world_deliver(w, 0, NULL, 0, m))
		sparsecomm__peer_msg__free_unpacked(m, NULL);
}

static int64_t cycle(scd_daemon_t *d)
{
	return scd_cfg_int(&d->cfg, SCD_CFG_cycle_time_ms);
}

/* Rank 1 of 2, its world formed (id 77) with no channel, peer_timeout_ms timeout_ms. */
static scd_world_t *node_world(scd_daemon_t *d, uv_loop_t *loop, const char *timeout_ms)
{
	static const scd_world_hooks_t hooks = {0};
	memset(d, 0, sizeof(*d));
	CHECK_EQ_INT(uv_loop_init(loop), 0);
	d->loop = loop;
	d->rank = 1, d->world_size = 2, d->local_size = 1, d->notify_fd = -1;
	scd_config_init(&d->cfg);
	char err[200];
	CHECK_EQ_INT(scd_config_set(&d->cfg, SCD_CFG_peer_timeout_ms, timeout_ms, SCD_SRC_FLAG,
				    err, sizeof(err)),
		     SC_OK);
	CHECK_EQ_INT(scd_world_create(d, &hooks, &d->world), SC_OK);
	scd_world_t *w = d->world;
	w->formed = 1;
	w->world_id = 77;
	scd_world_streams_reset(w);
	return w;
}

static void node_world_free(scd_daemon_t *d, uv_loop_t *loop)
{
	scd_world_t *w = d->world;
	scd_world_destroy(w);
	uv_run(loop, UV_RUN_NOWAIT);
	free(w->peers);
	free(w);
	scd_config_free(&d->cfg);
	uv_loop_close(loop);
}

UNIT_TEST(peer_stream_delivers_in_number_order)
{
	scd_daemon_t d;
	uv_loop_t loop;
	scd_world_t *w = node_world(&d, &loop, "10000");
	give(w, 13, 3, 77); /* ahead: held */
	give(w, 12, 2, 77);
	CHECK_EQ_INT(cycle(&d), 0);
	CHECK_EQ_INT(w->peers[0].n_held, 2);
	give(w, 11, 1, 77); /* 1, then 2 and 3 */
	CHECK_EQ_INT(cycle(&d), 13);
	CHECK_EQ_INT(w->peers[0].n_held, 0);
	give(w, 50, 2, 77); /* came both ways: already handled */
	CHECK_EQ_INT(cycle(&d), 13);
	give(w, 40, 9,
	     5); /* numbered in another world (one left, copies sent again): dropped */
	CHECK_EQ_INT(cycle(&d), 13);
	CHECK_EQ_INT(w->peers[0].n_held, 0);
	give(w, 41, 0, 0); /* unnumbered: at once */
	CHECK_EQ_INT(cycle(&d), 41);
	/* a gap: 5 held behind the missing 4 until it comes (sent again) */
	give(w, 15, 5, 77);
	CHECK_EQ_INT(cycle(&d), 41);
	scd_world_stream_tick(w);
	CHECK_EQ_INT(cycle(&d), 41);
	give(w, 14, 4, 77);
	CHECK_EQ_INT(cycle(&d), 15);
	CHECK_EQ_INT(w->peers[0].rx_next, 6);
	give(w, 16, 6, 77);
	CHECK_EQ_INT(cycle(&d), 16);
	/* one that never comes: 8 is never handled without 7; past peer_timeout_ms the
	 * sender is given up (here already gone, so nothing else happens) */
	w->peers[0].state = SPARSECOMM__PEER_STATE__PEER_LEFT;
	give(w, 18, 8, 77);
	w->peers[0].held_since_ms =
	    scd_now_ms() - (uint64_t)scd_cfg_int(&d.cfg, SCD_CFG_peer_timeout_ms) - 1;
	scd_world_stream_tick(w);
	CHECK_EQ_INT(cycle(&d), 16);
	CHECK_EQ_INT(w->peers[0].n_held, 0);
	CHECK_EQ_INT(w->peers[0].rx_next, 7);
	give(w, 19, 9, 77); /* held when the world goes: freed with it */
	node_world_free(&d, &loop);
}

/* The next PeerMsg sock has (a ROUTER's: after its sender's identity), or NULL when none
 * came within its receive timeout. */
static Sparsecomm__PeerMsg *sock_msg(void *sock, int routed)
{
	uint8_t ident[256], body[4096];
	if (routed && zmq_recv(sock, ident, sizeof(ident), 0) < 0)
		return NULL;
	int n = zmq_recv(sock, body, sizeof(body), 0);
	return n < 0 ? NULL : sparsecomm__peer_msg__unpack(NULL, (size_t)n, body);
}

/* The next message the coordinator's socket has: its number and acknowledgement; 0 when
 * none came within a second. */
static int coord_got(void *router, uint64_t *seq, uint64_t *ack)
{
	Sparsecomm__PeerMsg *m = sock_msg(router, 1);
	if (!m)
		return 0;
	*seq = m->seq;
	*ack = m->ack;
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	return 1;
}

static void node_says(scd_world_t *w, int value)
{
	Sparsecomm__PeerMsg *m = config_msg(value, 0, 0);
	CHECK_TRUE(m != NULL);
	m->body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE; /* the oneof's same member */
	scd_world_send_coord(w, m);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
}

/* A node's numbered messages (no pipe up: on the coordinator channel) are kept until the
 * coordinator acknowledges them; the rest go again when a pipe closes and when their
 * acknowledgement is late. */
UNIT_TEST(peer_stream_keeps_messages_until_acknowledged)
{
	scd_daemon_t d;
	uv_loop_t loop;
	scd_world_t *w = node_world(&d, &loop, "2000");
	void *zctx = zmq_ctx_new();
	void *router = zmq_socket(zctx, ZMQ_ROUTER);
	int linger = 0, wait_ms = 1000;
	zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(router, ZMQ_RCVTIMEO, &wait_ms, sizeof(wait_ms));
	CHECK_EQ_INT(zmq_bind(router, "inproc://stream-ack"), 0);
	w->sock = zmq_socket(zctx, ZMQ_DEALER);
	zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK_EQ_INT(zmq_connect(w->sock, "inproc://stream-ack"), 0);
	uint64_t seq = 0, ack = 9;
	for (int k = 1; k <= 3; k++) {
		node_says(w, k);
		CHECK_TRUE(coord_got(router, &seq, &ack));
		CHECK_EQ_INT(seq, k);
		CHECK_EQ_INT(ack, 0);
	}
	CHECK_EQ_INT(w->peers[0].n_unacked, 3);
	/* an acknowledgement of another world releases nothing */
	Sparsecomm__PeerMsg *m = config_msg(5, 1, 76);
	m->ack = 3;
	if (!scd_world_deliver(w, 0, NULL, 0, m))
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_EQ_INT(w->peers[0].n_unacked, 3);
	/* the coordinator's message 1 acknowledges the node's 1 and 2 */
	m = config_msg(5, 1, 77);
	m->ack = 2;
	if (!scd_world_deliver(w, 0, NULL, 0, m))
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_EQ_INT(w->peers[0].n_unacked, 1);
	node_says(w, 4); /* acknowledges the coordinator's 1 */
	CHECK_TRUE(coord_got(router, &seq, &ack));
	CHECK_EQ_INT(seq, 4);
	CHECK_EQ_INT(ack, 1);
	/* its pipe closed: 3 and 4, again, in order */
	scd_world_pipe_closed(w, 0);
	CHECK_TRUE(coord_got(router, &seq, &ack));
	CHECK_EQ_INT(seq, 3);
	CHECK_TRUE(coord_got(router, &seq, &ack));
	CHECK_EQ_INT(seq, 4);
	/* not acknowledged within half of peer_timeout_ms: again at the next heartbeat, and
	 * not before */
	scd_world_stream_tick(w);
	zmq_setsockopt(router, ZMQ_RCVTIMEO, &(int){50}, sizeof(int));
	CHECK_TRUE(!coord_got(router, &seq, &ack));
	usleep(1100 * 1000);
	scd_world_stream_tick(w);
	CHECK_TRUE(coord_got(router, &seq, &ack));
	CHECK_EQ_INT(seq, 3);
	CHECK_TRUE(coord_got(router, &seq, &ack));
	CHECK_EQ_INT(seq, 4);
	/* acknowledged by the coordinator's heartbeat (unnumbered): nothing kept */
	m = config_msg(5, 0, 77);
	m->ack = 4;
	if (!scd_world_deliver(w, 0, NULL, 0, m))
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_EQ_INT(w->peers[0].n_unacked, 0);
	CHECK_EQ_INT(w->peers[0].unacked_bytes, 0);
	node_says(w, 6); /* kept, and freed with the world */
	CHECK_TRUE(coord_got(router, &seq, &ack));
	zmq_close(router);
	node_world_free(&d, &loop);
	zmq_ctx_term(zctx);
}

/* The next message a node's socket has, its world id in *world_id_p when it is WorldInfo;
 * 0 when none came within wait_ms. */
static int node_got_world(void *dealer, int wait_ms, uint64_t *world_id_p)
{
	zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &wait_ms, sizeof(wait_ms));
	Sparsecomm__PeerMsg *m = sock_msg(dealer, 0);
	if (!m)
		return 0;
	*world_id_p = m->body_case == SPARSECOMM__PEER_MSG__BODY_WORLD ? m->world->world_id : 0;
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	return 1;
}

/* A heartbeat from rank 1 to the coordinator, numbered seq in epoch (0, 0: unnumbered). */
static void node_beat(scd_world_t *w, uint64_t seq, uint64_t epoch)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Heartbeat hb = SPARSECOMM__HEARTBEAT__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_HEARTBEAT;
	m.heartbeat = &hb;
	m.seq = seq;
	m.epoch = epoch;
	uint8_t buf[64];
	size_t n = sparsecomm__peer_msg__pack(&m, buf);
	Sparsecomm__PeerMsg *u = sparsecomm__peer_msg__unpack(NULL, n, buf);
	CHECK_TRUE(u != NULL);
	if (!scd_world_deliver(w, 1, w->peers[1].ident, w->peers[1].ident_len, u))
		sparsecomm__peer_msg__free_unpacked(u, NULL);
}

/* WorldInfo is not numbered, and a reset coordinator channel loses what it held: the
 * coordinator sends it again at each heartbeat to a node that has sent nothing numbered
 * in that world (an unnumbered message, or one of another world, says nothing), and no
 * more once it has. */
UNIT_TEST(world_info_sent_again_until_the_node_holds_it)
{
	static const scd_world_hooks_t hooks = {0};
	scd_daemon_t d;
	uv_loop_t loop;
	memset(&d, 0, sizeof(d));
	CHECK_EQ_INT(uv_loop_init(&loop), 0);
	d.loop = &loop;
	d.rank = 0, d.world_size = 2, d.local_size = 1, d.notify_fd = -1;
	scd_config_init(&d.cfg);
	CHECK_EQ_INT(scd_world_create(&d, &hooks, &d.world), SC_OK);
	scd_world_t *w = d.world;
	void *zctx = zmq_ctx_new();
	int linger = 0;
	w->sock = zmq_socket(zctx, ZMQ_ROUTER);
	zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK_EQ_INT(zmq_bind(w->sock, "inproc://world-info"), 0);
	void *node = zmq_socket(zctx, ZMQ_DEALER);
	zmq_setsockopt(node, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(node, ZMQ_ROUTING_ID, "n1", 2);
	CHECK_EQ_INT(zmq_connect(node, "inproc://world-info"), 0);
	memcpy(w->peers[1].ident, "n1", 2);
	w->peers[1].ident_len = 2;
	w->peers[1].joined = 1;
	w->peers[1].state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
	w->is_coord = 1;
	w->formed = 1;
	w->world_id = 77;
	scd_world_streams_reset(w);

	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	wi.world_id = 77;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD;
	m.world = &wi;
	uint8_t buf[256];
	size_t n = sparsecomm__peer_msg__pack(&m, buf);
	uint64_t id = 0;
	scd_world_info_send(w, buf, n);
	CHECK_TRUE(node_got_world(node, 1000, &id)); /* lost on the way, say */
	CHECK_EQ_INT(id, 77);
	scd_world_info_tick(w); /* the next heartbeat: again */
	CHECK_TRUE(node_got_world(node, 1000, &id));
	CHECK_EQ_INT(id, 77);
	node_beat(w, 0, 0);  /* unnumbered: says nothing */
	node_beat(w, 4, 76); /* numbered in another world: neither */
	scd_world_info_tick(w);
	CHECK_TRUE(node_got_world(node, 1000, &id));
	CHECK_EQ_INT(id, 77);
	node_beat(w, 1, 77); /* it holds it: no more */
	scd_world_info_tick(w);
	CHECK_TRUE(!node_got_world(node, 100, &id));

	zmq_close(node);
	scd_world_destroy(w);
	w->sock = NULL;
	uv_run(&loop, UV_RUN_NOWAIT);
	free(w->peers);
	free(w);
	scd_config_free(&d.cfg);
	uv_loop_close(&loop);
	zmq_ctx_term(zctx);
}
