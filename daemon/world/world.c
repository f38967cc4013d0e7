/*
 * world.c: world formation, the mesh job and its completion, and the peer control channel
 * (see world.h). The coordinator's ROUTER and the other ranks' DEALERs carry one packed
 * PeerMsg per frame; the coordinator handles its own messages by direct call instead of
 * through a socket. Formation carries the transport's bootstrap blobs without reading
 * them: the backend's describe checks a Join's blob and renders it for status and logs.
 *
 * The calls that start or stop the daemon (scd_daemon_world_ready, scd_daemon_stop) are
 * made here, not in negotiate.c: negotiation returns its failures.
 */
#include "world/world_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

#include "ctl/ctl.h"
#include "engine/engine.h"
#include "transport/transport.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/timeline.h"
#include "util/zmsg.h"
#include "world_protocol.h"

/* ---- sending ------------------------------------------------------------------------ */

static void send_raw(scd_world_t *w, const uint8_t *ident, size_t ident_len,
		     const Sparsecomm__PeerMsg *m)
{
	size_t n = sparsecomm__peer_msg__get_packed_size(m);
	uint8_t stackbuf[4096], *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
	if (!buf)
		return;
	sparsecomm__peer_msg__pack(m, buf);
	int rc = 0;
	if (ident)
		rc = zmq_send(w->sock, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (rc >= 0)
		rc = zmq_send(w->sock, buf, n, ZMQ_DONTWAIT);
	if (rc < 0)
		scd_warn(SCD_SUB_WORLD, "peer message of %zu bytes dropped: %s", n,
			 zmq_strerror(errno));
	if (buf != stackbuf)
		free(buf);
}

static void handle_peer_msg(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
			    const Sparsecomm__PeerMsg *m);

void scd_world_send_peer(scd_world_t *w, int rank, const Sparsecomm__PeerMsg *m)
{
	if (rank == w->d->rank) {
		handle_peer_msg(w, rank, NULL, 0, m);
		return;
	}
	scd_peer_t *p = &w->peers[rank];
	if (p->joined)
		send_raw(w, p->ident, p->ident_len, m);
}

void scd_world_send_coord(scd_world_t *w, const Sparsecomm__PeerMsg *m)
{
	if (w->is_coord)
		handle_peer_msg(w, 0, NULL, 0, m);
	else
		send_raw(w, NULL, 0, m);
}

/* ---- formation ---------------------------------------------------------------------- */

/* A peer's blob rendered by the backend ("127.0.0.1:40123" for tcp), for logs. */
static const char *describe_blob(const scd_world_t *w, const scd_peer_t *p, char *buf,
				 size_t len)
{
	char addr[128];
	uint16_t port = 0;
	if (!p->blob_len ||
	    w->tops->describe(p->blob, p->blob_len, addr, sizeof(addr), &port) != SC_OK)
		snprintf(buf, len, "?");
	else if (port)
		snprintf(buf, len, "%s:%u", addr, (unsigned)port);
	else
		snprintf(buf, len, "%s", addr);
	return buf;
}

/* Hands this rank's endpoint and every rank's blob to the engine, whose mesh job builds
 * the transport; the job comes back through scd_world_job_done. */
static void start_mesh(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	uv_timer_stop(&w->join_timer);
	scd_job_t *job = calloc(1, sizeof(*job));
	sc_status_t st = SC_ERR_NOMEM;
	if (job)
		st = scd_transport_boot_init(&job->boot, w->endpoint, d->rank, d->world_size,
					     w->world_id);
	if (st == SC_OK)
		w->endpoint = NULL; /* the job's now */
	for (int r = 0; st == SC_OK && r < d->world_size; r++)
		if (r != d->rank)
			st = scd_transport_boot_set_blob(&job->boot, r, w->peers[r].blob,
							 w->peers[r].blob_len);
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "cannot start the data plane: %s",
			  job ? scd_transport_error() : "out of memory");
		if (job)
			scd_transport_boot_clear(&job->boot);
		free(job);
		scd_daemon_stop(d, 1);
		return;
	}
	job->kind = SCD_JOB_MESH;
	scd_engine_submit(d->engine, job);
}

static void coord_send_world(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	Sparsecomm__PeerInfo *infos = calloc((size_t)d->world_size, sizeof(*infos));
	Sparsecomm__PeerInfo **ptrs = calloc((size_t)d->world_size, sizeof(*ptrs));
	if (!infos || !ptrs) {
		free(infos);
		free(ptrs);
		scd_error(SCD_SUB_WORLD, "no memory to announce the world of %d ranks",
			  d->world_size);
		scd_daemon_stop(d, 1);
		return;
	}
	if (getrandom(&w->world_id, sizeof(w->world_id), 0) != sizeof(w->world_id))
		w->world_id = (uint64_t)getpid() << 32 ^ scd_now_ms();
	for (int r = 0; r < d->world_size; r++) {
		sparsecomm__peer_info__init(&infos[r]);
		infos[r].rank = r;
		infos[r].connected = 1;
		infos[r].transport_blob.data = w->peers[r].blob;
		infos[r].transport_blob.len = w->peers[r].blob_len;
		ptrs[r] = &infos[r];
	}
	wi.peers = ptrs;
	wi.n_peers = (size_t)d->world_size;
	wi.world_id = w->world_id;
	wi.transport = (char *)w->tops->name;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD;
	m.world = &wi;
	for (int r = 1; r < d->world_size; r++)
		scd_world_send_peer(w, r, &m);
	free(infos);
	free(ptrs);
	scd_info(SCD_SUB_WORLD, "world of %d formed (id %016llx)", d->world_size,
		 (unsigned long long)w->world_id);
	start_mesh(w);
}

static void refuse(scd_world_t *w, const uint8_t *ident, size_t ident_len, const char *why)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__JoinRefused jr = SPARSECOMM__JOIN_REFUSED__INIT;
	jr.reason = (char *)why;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_REFUSED;
	m.refused = &jr;
	send_raw(w, ident, ident_len, &m);
	scd_warn(SCD_SUB_WORLD, "join refused: %s", why);
}

static void on_join(scd_world_t *w, const uint8_t *ident, size_t ident_len,
		    const Sparsecomm__Join *j)
{
	scd_daemon_t *d = w->d;
	char why[256];
	const char *tname = j->transport ? j->transport : "";
	const char *own_nonfinite = scd_cfg_str(&d->cfg, SCD_CFG_nonfinite);
	own_nonfinite = own_nonfinite ? own_nonfinite : "";
	uint16_t port;
	if (j->protocol_version != SCD_WORLD_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why),
			 "rank %d speaks protocol version %u, the coordinator %u", j->rank,
			 j->protocol_version, SCD_WORLD_PROTOCOL_VERSION);
	} else if (j->world_size != d->world_size) {
		snprintf(why, sizeof(why), "rank %d has world_size %d, the coordinator %d",
			 j->rank, j->world_size, d->world_size);
	} else if (j->local_size != d->local_size) {
		snprintf(why, sizeof(why), "rank %d has local_size %d, the coordinator %d",
			 j->rank, j->local_size, d->local_size);
	} else if (j->rank <= 0 || j->rank >= d->world_size) {
		snprintf(why, sizeof(why), "rank %d is outside 1 .. %d", j->rank,
			 d->world_size - 1);
	} else if (strcmp(tname, w->tops->name) != 0) {
		snprintf(why, sizeof(why),
			 "rank %d uses transport '%.40s', the coordinator '%s'", j->rank, tname,
			 w->tops->name);
	} else if (j->transport_blob.len > SCD_TRANSPORT_BLOB_MAX ||
		   w->tops->describe(j->transport_blob.data, j->transport_blob.len, NULL, 0,
				     &port) != SC_OK) {
		snprintf(why, sizeof(why),
			 "rank %d sent a malformed %s bootstrap blob (%zu bytes)", j->rank,
			 w->tops->name, j->transport_blob.len);
	} else if (strcmp(j->nonfinite ? j->nonfinite : "", own_nonfinite) != 0) {
		snprintf(why, sizeof(why),
			 "rank %d has nonfinite '%.16s', the coordinator '%s'", j->rank,
			 j->nonfinite ? j->nonfinite : "", own_nonfinite);
	} else if (w->peers[j->rank].joined || w->formed) {
		snprintf(why, sizeof(why), "rank %d has already joined", j->rank);
	} else {
		scd_peer_t *p = &w->peers[j->rank];
		p->joined = 1;
		memcpy(p->ident, ident, ident_len);
		p->ident_len = ident_len;
		memcpy(p->blob, j->transport_blob.data, j->transport_blob.len);
		p->blob_len = j->transport_blob.len;
		w->n_joined++;
		char where[160];
		scd_info(SCD_SUB_WORLD, "rank %d joined (%d of %d), data plane %s %s", j->rank,
			 w->n_joined, d->world_size, w->tops->name,
			 describe_blob(w, p, where, sizeof(where)));
		if (w->n_joined == d->world_size) {
			w->formed = 1;
			coord_send_world(w);
		}
		return;
	}
	refuse(w, ident, ident_len, why);
}

static void on_world(scd_world_t *w, const Sparsecomm__WorldInfo *wi)
{
	scd_daemon_t *d = w->d;
	if (w->formed || wi->n_peers != (size_t)d->world_size) {
		scd_error(SCD_SUB_WORLD, "unexpected world info with %zu peers", wi->n_peers);
		return;
	}
	const char *tname = wi->transport ? wi->transport : "";
	if (strcmp(tname, w->tops->name) != 0) {
		scd_error(SCD_SUB_WORLD, "the coordinator uses transport '%.40s', rank %d '%s'",
			  tname, d->rank, w->tops->name);
		scd_daemon_stop(d, 1);
		return;
	}
	for (size_t i = 0; i < wi->n_peers; i++) {
		const Sparsecomm__PeerInfo *pi = wi->peers[i];
		if (pi->rank < 0 || pi->rank >= d->world_size)
			continue;
		if (pi->transport_blob.len > SCD_TRANSPORT_BLOB_MAX) {
			scd_error(SCD_SUB_WORLD,
				  "world info: rank %d's bootstrap blob has %zu bytes",
				  pi->rank, pi->transport_blob.len);
			scd_daemon_stop(d, 1);
			return;
		}
		scd_peer_t *p = &w->peers[pi->rank];
		p->joined = 1;
		if (pi->transport_blob.len)
			memcpy(p->blob, pi->transport_blob.data, pi->transport_blob.len);
		p->blob_len = pi->transport_blob.len;
	}
	w->formed = 1;
	w->world_id = wi->world_id;
	start_mesh(w);
}

static void on_join_timeout(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	scd_daemon_t *d = w->d;
	if (!w->is_coord) {
		scd_error(SCD_SUB_WORLD,
			  "rank %d could not join the coordinator at %s within %lld ms",
			  d->rank, scd_cfg_str(&d->cfg, SCD_CFG_coordinator),
			  (long long)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms));
		scd_daemon_stop(d, 1);
		return;
	}
	char missing[512];
	int n = 0;
	missing[0] = 0;
	for (int r = 1; r < d->world_size && n < (int)sizeof(missing) - 12; r++)
		if (!w->peers[r].joined)
			n += snprintf(missing + n, sizeof(missing) - (size_t)n, "%s%d",
				      n ? ", " : "", r);
	char why[600];
	snprintf(why, sizeof(why),
		 "world formation timed out after %lld ms: rank(s) %s never joined",
		 (long long)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms), missing);
	scd_error(SCD_SUB_WORLD, "%s", why);
	for (int r = 1; r < d->world_size; r++)
		if (w->peers[r].joined)
			refuse(w, w->peers[r].ident, w->peers[r].ident_len, why);
	scd_daemon_stop(d, 1);
}

/* ---- configuration, pending, status --------------------------------------------------- */

static void apply_config(scd_world_t *w, const Sparsecomm__ConfigSet *cs)
{
	scd_daemon_t *d = w->d;
	char err[256];
	int k = scd_config_find(cs->key ? cs->key : "");
	if (scd_config_set(&d->cfg, k, cs->value ? cs->value : "", SCD_SRC_RUNTIME, err,
			   sizeof(err)) != SC_OK) {
		scd_warn(SCD_SUB_CONFIG, "runtime change refused: %s", err);
		return;
	}
	scd_info(SCD_SUB_CONFIG, "%s = %s (runtime)", cs->key, cs->value);
	if (k == SCD_CFG_log_level)
		scd_log_parse_level(cs->value, &scd_log_level);
	if (k == SCD_CFG_fusion_threshold_bytes)
		scd_engine_set_fusion_bytes(d->engine, (uint64_t)scd_cfg_int(&d->cfg, k));
	if (k == SCD_CFG_timeline_file)
		scd_tl_configure(cs->value, d->rank, d->world_size);
}

void scd_world_config_propose(scd_world_t *w, const char *key, const char *value)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	cs.key = (char *)key;
	cs.value = (char *)value;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE;
	m.config_propose = &cs;
	scd_world_send_coord(w, &m);
}

/* The coordinator checks a proposed change again (the proposing daemon has) before any
 * node applies it: a value some daemon would refuse is applied on none. */
static void coord_on_propose(scd_world_t *w, int from, const Sparsecomm__ConfigSet *cs)
{
	char err[512];
	if (scd_config_probe(cs->key ? cs->key : "", cs->value ? cs->value : "", err,
			     sizeof(err)) != SC_OK) {
		scd_error(SCD_SUB_CONFIG,
			  "config set from rank %d refused, applied nowhere: %s", from, err);
		return;
	}
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY;
	m.config_apply = (Sparsecomm__ConfigSet *)cs;
	for (int r = 0; r < w->d->world_size; r++)
		scd_world_send_peer(w, r, &m);
}

static void answer_pending(scd_world_t *w, int to, uint64_t query_id)
{
	scd_arena_t a = {0};
	Sparsecomm__PendingReply r = SPARSECOMM__PENDING_REPLY__INIT;
	scd_neg_pending(w, &r, &a);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__PendingAnswer pa = SPARSECOMM__PENDING_ANSWER__INIT;
	pa.query_id = query_id;
	pa.reply = &r;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PENDING_ANSWER;
	m.pending_answer = &pa;
	scd_world_send_peer(w, to, &m);
	scd_arena_free(&a);
}

static void on_pending_answer(scd_world_t *w, const Sparsecomm__PendingAnswer *pa)
{
	scd_arena_t a = {0};
	Sparsecomm__PendingReply r = SPARSECOMM__PENDING_REPLY__INIT;
	if (pa->reply)
		r = *pa->reply;
	scd_ctl_local_pending(w->d->ctl, &r, &a);
	scd_ctl_reply_pending(w->d->ctl, pa->query_id, &r);
	scd_arena_free(&a);
}

void scd_world_pending(scd_world_t *w, uint64_t query_id)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__PendingQuery pq = SPARSECOMM__PENDING_QUERY__INIT;
	pq.query_id = query_id;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PENDING_QUERY;
	m.pending_query = &pq;
	scd_world_send_coord(w, &m);
}

void scd_world_status(scd_world_t *w, Sparsecomm__StatusReply *r, scd_arena_t *a)
{
	int n = w->d->world_size;
	r->peers = scd_arena_alloc(a, sizeof(*r->peers) * (size_t)n);
	if (!r->peers)
		return;
	for (int i = 0; i < n; i++) {
		Sparsecomm__PeerInfo *pi = scd_arena_alloc(a, sizeof(*pi));
		if (!pi)
			return;
		sparsecomm__peer_info__init(pi);
		pi->rank = i;
		char addr[128] = "";
		uint16_t port = 0;
		const scd_peer_t *p = &w->peers[i];
		if (p->blob_len &&
		    w->tops->describe(p->blob, p->blob_len, addr, sizeof(addr), &port) != SC_OK)
			addr[0] = 0, port = 0;
		pi->addr = scd_arena_strdup(a, addr);
		pi->port = port;
		pi->connected = w->formed && scd_engine_transport(w->d->engine) != NULL;
		r->peers[r->n_peers++] = pi;
	}
}

void scd_world_node_state(scd_world_t *w, int degraded, const char *reason)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__NodeState ns = SPARSECOMM__NODE_STATE__INIT;
	ns.rank = w->d->rank;
	ns.degraded = degraded;
	ns.reason = (char *)reason;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_STATE;
	m.node_state = &ns;
	if (w->formed)
		scd_world_send_coord(w, &m);
}

/* ---- receiving ---------------------------------------------------------------------- */

static int rank_of_ident(scd_world_t *w, const uint8_t *ident, size_t len)
{
	for (int r = 1; r < w->d->world_size; r++)
		if (w->peers[r].joined && w->peers[r].ident_len == len &&
		    !memcmp(w->peers[r].ident, ident, len))
			return r;
	return -1;
}

/* What only the coordinator sends (plans, world info, refusals, configuration changes,
 * barriers' ends)
 * is taken from it alone: on the coordinator, from itself (no ident), never from a peer. */
static int coord_only(const Sparsecomm__PeerMsg *m)
{
	return m->body_case == SPARSECOMM__PEER_MSG__BODY_WORLD ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_REFUSED ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_PLAN ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE;
}

static void handle_peer_msg(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
			    const Sparsecomm__PeerMsg *m)
{
	if (w->is_coord && ident && coord_only(m)) {
		scd_warn(SCD_SUB_WORLD,
			 "peer message %d from rank %d ignored: only the coordinator sends it",
			 m->body_case, from);
		return;
	}
	switch (m->body_case) {
	case SPARSECOMM__PEER_MSG__BODY_JOIN:
		if (w->is_coord && ident)
			on_join(w, ident, ident_len, m->join);
		break;
	case SPARSECOMM__PEER_MSG__BODY_WORLD:
		if (!w->is_coord)
			on_world(w, m->world);
		break;
	case SPARSECOMM__PEER_MSG__BODY_REFUSED:
		scd_error(SCD_SUB_WORLD, "the coordinator refused this rank: %s",
			  m->refused->reason);
		scd_daemon_stop(w->d, 1);
		break;
	case SPARSECOMM__PEER_MSG__BODY_READY:
		if (w->is_coord && from >= 0)
			scd_neg_on_ready(w, from, m->ready);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PLAN:
		if (scd_neg_on_plan(w, m->plan) != SC_OK) /* logged there */
			scd_daemon_stop(w->d, 1);
		break;
	case SPARSECOMM__PEER_MSG__BODY_NODE_STATE:
		if (w->is_coord)
			scd_neg_on_node_state(w, m->node_state);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE:
		if (w->is_coord)
			coord_on_propose(w, from, m->config_propose);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY:
		apply_config(w, m->config_apply);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PENDING_QUERY:
		if (w->is_coord && from >= 0)
			answer_pending(w, from, m->pending_query->query_id);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PENDING_ANSWER:
		on_pending_answer(w, m->pending_answer);
		break;
	case SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER:
		if (w->is_coord && from >= 0)
			scd_barrier_on_enter(w, from, m->barrier_enter);
		break;
	case SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE:
		scd_barrier_on_done(w, m->barrier_done);
		break;
	case SPARSECOMM__PEER_MSG__BODY_NODE_JOIN:
		if (w->is_coord && from >= 0)
			scd_join_on_node(w, from, m->node_join);
		break;
	case SPARSECOMM__PEER_MSG__BODY_JOIN_DONE:
		scd_join_on_done(w, m->join_done);
		break;
	default:
		scd_warn(SCD_SUB_WORLD, "unexpected peer message %d from rank %d", m->body_case,
			 from);
	}
}

void scd_world_drain(scd_world_t *w)
{
	if (!w || !w->sock)
		return;
	scd_zmsg_t z = {0};
	while (scd_zmsg_recv(w->sock, w->is_coord, &z)) {
		Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, z.len, z.data);
		if (!m) {
			scd_warn(SCD_SUB_WORLD, "malformed peer message (%zu bytes) ignored",
				 z.len);
			continue;
		}
		int from = w->is_coord ? rank_of_ident(w, z.ident, z.ident_len) : 0;
		handle_peer_msg(w, from, w->is_coord ? z.ident : NULL, z.ident_len, m);
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	}
	scd_zmsg_done(&z);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	scd_world_drain(h->data);
}

static void on_flush(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	w->flush_armed = 0;
	scd_neg_flush(w);
}

void scd_world_tick(scd_world_t *w)
{
	if (w->formed) {
		scd_neg_tick(w);
		scd_barrier_tick(w);
	}
}

/* ---- lifecycle ---------------------------------------------------------------------- */

/* The mesh job came back: the daemon serves its trainers, or leaves (the transport logged
 * the failure where it found it, naming the rank). */
static void mesh_done(scd_daemon_t *d, scd_job_t *job)
{
	sc_status_t st = job->status;
	scd_transport_boot_clear(&job->boot);
	free(job);
	if (st != SC_OK)
		scd_daemon_stop(d, 1);
	else
		scd_daemon_world_ready(d);
}

void scd_world_job_done(scd_daemon_t *d, scd_job_t *job)
{
	switch (job->kind) {
	case SCD_JOB_MESH:
		mesh_done(d, job);
		break;
	case SCD_JOB_FORGET:
		free(job);
		break;
	case SCD_JOB_ALLREDUCE:
		scd_neg_job_done(d->world, job);
		break;
	}
}

sc_status_t scd_world_create(scd_daemon_t *d, scd_world_t **w_p)
{
	scd_world_t *w = calloc(1, sizeof(*w));
	if (!w || !(w->peers = calloc((size_t)d->world_size, sizeof(*w->peers)))) {
		free(w);
		return SC_ERR_NOMEM;
	}
	w->d = d;
	w->is_coord = d->rank == 0;
	uv_timer_init(d->loop, &w->join_timer);
	uv_timer_init(d->loop, &w->flush_timer);
	uv_timer_init(d->loop, &w->hold_timer);
	w->join_timer.data = w->flush_timer.data = w->hold_timer.data = w;
	scd_fplan_state_init(&w->fplan, d->world_size);
	*w_p = w;
	return SC_OK;
}

void scd_world_arm_flush(scd_world_t *w)
{
	if (w->flush_armed)
		return;
	w->flush_armed = 1;
	uv_timer_start(&w->flush_timer, on_flush,
		       (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_cycle_time_ms), 0);
}

sc_status_t scd_world_start(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	const char *coord = scd_cfg_str(&d->cfg, SCD_CFG_coordinator);
	sc_status_t st =
	    scd_transport_lookup(scd_cfg_str(&d->cfg, SCD_CFG_transport), &w->tops);
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "%s", scd_transport_error());
		return st;
	}
	scd_transport_cfg_t tc = {
	    .addr = scd_cfg_str(&d->cfg, SCD_CFG_data_addr),
	    .port = (uint16_t)scd_cfg_int(&d->cfg, SCD_CFG_data_port),
	};
	st = scd_transport_prepare(w->tops, &tc, &w->endpoint);
	if (st != SC_OK)
		return st; /* logged by the backend */
	scd_peer_t *self = &w->peers[d->rank];
	memcpy(self->blob, w->endpoint->blob, w->endpoint->blob_len);
	self->blob_len = w->endpoint->blob_len;
	self->joined = 1;
	char endpoint[300];
	snprintf(endpoint, sizeof(endpoint), "tcp://%s", coord);
	w->sock = zmq_socket(d->zctx, w->is_coord ? ZMQ_ROUTER : ZMQ_DEALER);
	int hwm = 1 << 20, linger = 0, ivl = 100;
	zmq_setsockopt(w->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(w->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(w->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
	if (scd_zsock_bound(w->sock, SCD_PEER_MSG_MAX_BYTES) != 0) {
		scd_error(SCD_SUB_WORLD,
			  "cannot bound the peer socket's messages to %lld bytes: %s",
			  SCD_PEER_MSG_MAX_BYTES, zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	if (w->is_coord) {
		if (zmq_bind(w->sock, endpoint) != 0) {
			scd_error(SCD_SUB_WORLD, "cannot listen on coordinator address %s: %s",
				  coord, zmq_strerror(errno));
			return SC_ERR_SYSTEM;
		}
		w->n_joined = 1;
	} else if (zmq_connect(w->sock, endpoint) != 0) {
		scd_error(SCD_SUB_WORLD, "bad coordinator address %s: %s", coord,
			  zmq_strerror(errno));
		return SC_ERR_INVALID;
	}
	int fd;
	size_t sz = sizeof(fd);
	zmq_getsockopt(w->sock, ZMQ_FD, &fd, &sz);
	uv_poll_init(d->loop, &w->poll, fd);
	w->poll.data = w;
	uv_poll_start(&w->poll, UV_READABLE, on_readable);
	w->polling = 1;
	uv_timer_start(&w->join_timer, on_join_timeout,
		       (uint64_t)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms), 0);
	char where[160];
	scd_info(SCD_SUB_WORLD, "rank %d of %d, %s %s, data plane %s %s", d->rank,
		 d->world_size, w->is_coord ? "coordinator on" : "joining", coord,
		 w->tops->name, describe_blob(w, self, where, sizeof(where)));
	if (d->world_size == 1) {
		w->formed = 1;
		start_mesh(w);
	} else if (!w->is_coord) {
		Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
		Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
		j.protocol_version = SCD_WORLD_PROTOCOL_VERSION;
		j.rank = d->rank;
		j.world_size = d->world_size;
		j.local_size = d->local_size;
		j.transport = (char *)w->tops->name;
		j.nonfinite = (char *)scd_cfg_str(&d->cfg, SCD_CFG_nonfinite);
		j.transport_blob.data = self->blob;
		j.transport_blob.len = self->blob_len;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN;
		m.join = &j;
		send_raw(w, NULL, 0, &m);
	}
	return SC_OK;
}

void scd_world_destroy(scd_world_t *w)
{
	if (!w)
		return;
	uv_timer_stop(&w->join_timer);
	uv_timer_stop(&w->flush_timer);
	uv_timer_stop(&w->hold_timer);
	uv_close((uv_handle_t *)&w->join_timer, NULL);
	uv_close((uv_handle_t *)&w->flush_timer, NULL);
	uv_close((uv_handle_t *)&w->hold_timer, NULL);
	if (w->polling) {
		uv_poll_stop(&w->poll);
		uv_close((uv_handle_t *)&w->poll, NULL);
	}
	if (w->sock)
		zmq_close(w->sock);
	scd_transport_release(w->endpoint); /* not handed to a mesh job */
	w->endpoint = NULL;
	scd_neg_destroy(w);
	/* w and its peers are freed once the loop has closed the handles (main.c) */
}
