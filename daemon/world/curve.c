/* curve.c: CurveZMQ and the ZAP handler of the coordinator channel (see curve.h). */
#include "world/curve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "util/log.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES   8 /* a CURVE request has 7 */
#define USER_PREFIX  "rank "

struct scd_curve {
	scd_daemon_t *d;
	void *zap;
	uv_poll_t poll;
	int polling;
	uint8_t (*keys)[32]; /* rank r's public key (r >= 1) */
	int n_keys;
	uint64_t refused;
};

static sc_status_t set_key(void *sock, int opt, const char *z85, const char *what)
{
	if (zmq_setsockopt(sock, opt, z85, SCD_CURVE_Z85_BYTES) == 0)
		return SC_OK;
	scd_error(SCD_SUB_WORLD, "cannot set the coordinator channel's %s: %s", what,
		  zmq_strerror(errno));
	return SC_ERR_SYSTEM;
}

static sc_status_t setup_client(scd_daemon_t *d, void *sock)
{
	scd_curve_pair_t server, mine;
	sc_status_t st = scd_secret_curve_server(&d->secret, &server);
	if (st == SC_OK)
		st = scd_secret_curve_rank(&d->secret, d->rank, &mine);
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "cannot derive the CURVE keys from the job secret");
		return st;
	}
	st = set_key(sock, ZMQ_CURVE_SERVERKEY, server.public_z85, "server key");
	if (st == SC_OK)
		st = set_key(sock, ZMQ_CURVE_PUBLICKEY, mine.public_z85, "public key");
	if (st == SC_OK)
		st = set_key(sock, ZMQ_CURVE_SECRETKEY, mine.secret_z85, "secret key");
	memset(&mine, 0, sizeof(mine));
	memset(&server, 0, sizeof(server));
	return st;
}

/* The rank whose public key is key, or -1. */
static int rank_of_key(const scd_curve_t *c, const void *key, size_t len)
{
	if (len != 32)
		return -1;
	for (int r = 1; r < c->n_keys; r++)
		if (!memcmp(c->keys[r], key, 32))
			return r;
	return -1;
}

/* Answers one ZAP request (frames f[0 .. n - 1]; RFC 27). */
static void zap_answer(scd_curve_t *c, zmq_msg_t *f, int n)
{
	char user[32] = "", addr[80] = "?";
	const char *code = "400", *text = "malformed ZAP request";
	if (n >= 7 && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3) &&
	    zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5)) {
		snprintf(addr, sizeof(addr), "%.*s", (int)zmq_msg_size(&f[3]),
			 (const char *)zmq_msg_data(&f[3]));
		int r = rank_of_key(c, zmq_msg_data(&f[6]), zmq_msg_size(&f[6]));
		if (r > 0) {
			code = "200", text = "OK";
			snprintf(user, sizeof(user), USER_PREFIX "%d", r);
		} else {
			text = "the client key is no rank's key of this job";
		}
	}
	/* logged the 1st, 2nd, 4th, 8th... time: a refused client keeps reconnecting */
	uint64_t k = code[0] != '2' ? ++c->refused : 0;
	if (k && (k & (k - 1)) == 0)
		scd_warn(SCD_SUB_WORLD,
			 "refused a coordinator-channel connection from %s: %s (it does not "
			 "hold this job's secret_file) (%llu refused so far)",
			 addr, text, (unsigned long long)c->refused);
	const char *version = "1.0";
	int ok = zmq_send(c->zap, version, 3, ZMQ_SNDMORE) >= 0;
	ok = ok && zmq_send(c->zap, n > 1 ? zmq_msg_data(&f[1]) : "",
			    n > 1 ? zmq_msg_size(&f[1]) : 0, ZMQ_SNDMORE) >= 0;
	ok = ok && zmq_send(c->zap, code, 3, ZMQ_SNDMORE) >= 0;
	ok = ok && zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE) >= 0;
	ok = ok && zmq_send(c->zap, user, strlen(user), ZMQ_SNDMORE) >= 0;
	ok = ok && zmq_send(c->zap, "", 0, 0) >= 0;
	if (!ok)
		scd_warn(SCD_SUB_WORLD, "cannot answer a ZAP request: %s", zmq_strerror(errno));
}

void scd_curve_drain(scd_curve_t *c)
{
	if (!c)
		return;
	for (;;) {
		zmq_msg_t f[ZAP_FRAMES], extra;
		int n = 0, got = 0, more = 1;
		while (more) {
			zmq_msg_t *m = n < ZAP_FRAMES ? &f[n] : &extra;
			zmq_msg_init(m);
			if (zmq_msg_recv(m, c->zap, ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(m);
				break;
			}
			got = 1;
			more = zmq_msg_more(m);
			if (m == &extra) /* frames past the last kept are dropped */
				zmq_msg_close(m);
			else
				n++;
		}
		if (!more)
			zap_answer(c, f, n);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&f[i]);
		if (!got || more)
			return;
	}
}

static void on_zap(uv_poll_t *h, int status, int events)
{
	scd_curve_drain(h->data);
}

static sc_status_t setup_server(scd_daemon_t *d, void *sock, scd_curve_t *c)
{
	scd_curve_pair_t server, kp;
	sc_status_t st = scd_secret_curve_server(&d->secret, &server);
	int one = 1;
	c->n_keys = d->world_size;
	c->keys = calloc((size_t)d->world_size, sizeof(*c->keys));
	if (!c->keys)
		st = SC_ERR_NOMEM;
	for (int r = 1; st == SC_OK && r < d->world_size; r++) {
		st = scd_secret_curve_rank(&d->secret, r, &kp);
		if (st == SC_OK && !zmq_z85_decode(c->keys[r], kp.public_z85))
			st = SC_ERR_SYSTEM;
	}
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "cannot derive the CURVE keys from the job secret");
		return st;
	}
	c->zap = zmq_socket(d->zctx, ZMQ_REP);
	int linger = 0;
	if (!c->zap || zmq_setsockopt(c->zap, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
	    zmq_bind(c->zap, ZAP_ENDPOINT) != 0) {
		scd_error(SCD_SUB_WORLD, "cannot start the coordinator's ZAP handler: %s",
			  zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
	    zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "sparsecomm", 10) != 0) {
		scd_error(SCD_SUB_WORLD,
			  "cannot make the coordinator channel a CURVE server: %s",
			  zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	st = set_key(sock, ZMQ_CURVE_SECRETKEY, server.secret_z85, "secret key");
	/* The public key is no secret: what admits a peer is its own key (ZAP). */
	scd_info(SCD_SUB_WORLD,
		 "coordinator channel: CurveZMQ server key %s; ranks 1 .. %d "
		 "are admitted with their keys only",
		 server.public_z85, d->world_size - 1);
	memset(&server, 0, sizeof(server));
	if (st != SC_OK)
		return st;
	int fd;
	size_t sz = sizeof(fd);
	zmq_getsockopt(c->zap, ZMQ_FD, &fd, &sz);
	uv_poll_init(d->loop, &c->poll, fd);
	c->poll.data = c;
	uv_poll_start(&c->poll, UV_READABLE, on_zap);
	c->polling = 1;
	return SC_OK;
}

sc_status_t scd_curve_setup(scd_daemon_t *d, void *sock, int coord, scd_curve_t **c_p)
{
	*c_p = NULL;
	if (!d->secret.present)
		return SC_OK;
	if (!zmq_has("curve")) {
		scd_error(SCD_SUB_WORLD,
			  "secret_file is set, but this libzmq has no CURVE "
			  "security to authenticate the coordinator channel with");
		return SC_ERR_INVALID;
	}
	if (!coord)
		return setup_client(d, sock);
	scd_curve_t *c = calloc(1, sizeof(*c));
	if (!c)
		return SC_ERR_NOMEM;
	c->d = d;
	sc_status_t st = setup_server(d, sock, c);
	*c_p = c;
	return st; /* the caller destroys c on failure too */
}

int scd_curve_rank(scd_zmsg_t *z)
{
	const char *user = scd_zmsg_user(z);
	size_t n = strlen(USER_PREFIX);
	if (!user || strncmp(user, USER_PREFIX, n) != 0)
		return -1;
	char *end;
	long r = strtol(user + n, &end, 10);
	return *end || r < 1 || r > 4095 ? -1 : (int)r;
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

void scd_curve_destroy(scd_curve_t *c)
{
	if (!c)
		return;
	if (c->zap)
		zmq_close(c->zap);
	free(c->keys);
	if (c->polling) {
		uv_poll_stop(&c->poll);
		uv_close((uv_handle_t *)&c->poll, on_closed);
	} else {
		free(c);
	}
}
