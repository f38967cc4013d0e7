/*
 * liveness.c: which daemons of the world are still in it, on the coordinator channel.
 *
 * Once the world has formed, every node sends the coordinator a Heartbeat every quarter
 * of peer_timeout_ms, and the coordinator sends every node one carrying how long ago it
 * last heard each rank (so every node's status shows every peer's age). Any message
 * counts as heard. A node the coordinator has not heard for peer_timeout_ms is lost; a
 * daemon that stops says so first (Leave: SIGTERM, or any orderly stop). Either way the
 * coordinator marks the node degraded with the reason, so that every tensor pending or
 * announced later fails at once on every rank with SC_ERR_PEER naming the node
 * (negotiate.c: coord_emit), and tells every other node (NodeState with its state) for
 * their status and their in-flight jobs' errors. A node that loses its coordinator (not
 * heard for peer_timeout_ms, or its Leave) fails every operation submitted and every later
 * one at once, naming rank 0: nothing can be negotiated without it; twice peer_timeout_ms
 * later it exits with status SCD_EXIT_COORDINATOR_GONE (3), for a service manager to
 * start it again into the coordinator's next world.
 *
 * A job already on the data plane when its peer vanishes ends with the transport: at once
 * where the peer's connections closed (its process exited); where they stay open (a
 * stopped process), the node's connection is shut down when it is declared lost
 * (scd_engine_peer_gone), so the wait ends then rather than at op_timeout_ms. Its error
 * then names the node that went first (scd_live_cause).
 */
#include "world/world_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ctl/ctl.h"
#include "engine/engine.h"
#include "util/arena.h"
#include "util/clock.h"
#include "util/log.h"
#include "world/pipe.h"

/* A node and its trainers' ranks: "node 2 (rank 2)", "node 1 (ranks 2, 3)". */
static void node_name(const scd_world_t *w, int r, char *buf, size_t len)
{
	int L = w->d->local_size;
	int n = snprintf(buf, len, "node %d (rank%s", r, L > 1 ? "s" : "");
	for (int l = 0; l < L && n > 0 && (size_t)n < len - 16; l++)
		n += snprintf(buf + n, len - (size_t)n, "%s%d", l ? ", " : " ", r * L + l);
	if (n > 0 && (size_t)n < len - 1)
		snprintf(buf + n, len - (size_t)n, ")");
}

static int64_t peer_timeout_ms(const scd_world_t *w)
{
	return scd_cfg_int(&w->d->cfg, SCD_CFG_peer_timeout_ms);
}

static void on_orphaned(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	scd_error(SCD_SUB_WORLD, "exiting with status %d: %s", SCD_EXIT_COORDINATOR_GONE,
		  w->peers[0].gone_reason);
	scd_world_stop_daemon(w, SCD_EXIT_COORDINATOR_GONE);
}

/* Node r left (state PEER_LEFT) or was lost (PEER_LOST) for why. On the coordinator every
 * operation that needs it fails and every other node hears of it; on a node whose
 * coordinator it was, every operation fails. */
static void peer_gone(scd_world_t *w, int r, Sparsecomm__PeerState state, const char *why)
{
	scd_peer_t *p = &w->peers[r];
	if (r == w->d->rank || p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
		return;
	char who[96];
	node_name(w, r, who, sizeof(who));
	p->state = state;
	snprintf(p->gone_reason, sizeof(p->gone_reason), "%s%s %s: %s",
		 r == 0 ? "the coordinator, " : "", who,
		 state == SPARSECOMM__PEER_STATE__PEER_LEFT ? "left the world" : "was lost",
		 why);
	scd_warn(SCD_SUB_WORLD, "%s", p->gone_reason);
	scd_engine_peer_gone(w->d->engine, r);
	scd_neg_release_held(w, 1); /* a data-plane failure held back: it names r now */
	if (w->is_coord && !w->formed && p->joined) { /* the world re-forms without it now */
		p->joined = 0;
		w->n_joined--;
	}
	if (w->is_coord) {
		Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
		Sparsecomm__NodeState ns = SPARSECOMM__NODE_STATE__INIT;
		ns.rank = r;
		ns.degraded = 1;
		ns.reason = p->gone_reason;
		ns.state = state;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_STATE;
		m.node_state = &ns;
		for (int q = 1; q < w->d->world_size; q++)
			if (q != r &&
			    w->peers[q].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED)
				scd_world_send_peer(w, q, &m);
		scd_neg_on_node_state(w, &ns); /* fails what is pending, and what comes */
	} else if (r == 0) {
		/* no job writes a result, nor tells a trainer of it, after its failure. The
		 * engine is not quiesced: a transfer with another node may go on until its
		 * timeout (the node leaves the others' world only when it exits), so a
		 * registration released meanwhile stays; and no later step of a trainer here
		 * can succeed, so none can take what such a transfer writes */
		scd_engine_fence(w->d->engine);
		scd_ctl_fail_all(w->d->ctl, SC_ERR_PEER, p->gone_reason, 0);
		uv_timer_stop(&w->beat_timer); /* the coordinator then finds this node lost */
		/* nothing more can be negotiated: after a while for its trainers and its status
		 * to tell why, the daemon exits for a service manager to start it again */
		uint64_t grace = 2 * (uint64_t)peer_timeout_ms(w);
		scd_warn(
		    SCD_SUB_WORLD,
		    "without its coordinator this node serves nothing: it exits with status "
		    "%d in %llu ms (a service manager restarts it to join the next world)",
		    SCD_EXIT_COORDINATOR_GONE, (unsigned long long)grace);
		uv_timer_start(&w->orphan_timer, on_orphaned, grace, 0);
	}
}

void scd_live_lost(scd_world_t *w, int r, const char *why)
{
	peer_gone(w, r, SPARSECOMM__PEER_STATE__PEER_LOST, why);
}

/* Every quarter of peer_timeout_ms: who has been silent too long, then the heartbeats. */
static void on_beat(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	int P = w->d->world_size;
	uint64_t now = scd_now_ms();
	int64_t limit = peer_timeout_ms(w);
	char why[128];
	/* This daemon itself did not run for that long (stopped, a host that hung): the
	 * silence is its own, so it blames no one this turn; the messages waiting for it say
	 * who is still there (a node the world gave up is told so and stops). */
	int self_stalled = w->beat_ms && now - w->beat_ms > (uint64_t)limit;
	if (self_stalled)
		scd_warn(SCD_SUB_WORLD,
			 "this daemon did not run for %llu ms (peer_timeout_ms = %lld)",
			 (unsigned long long)(now - w->beat_ms), (long long)limit);
	w->beat_ms = now;
	scd_world_stream_tick(w);
	scd_world_info_tick(w);
	scd_world_join_tick(w);
	scd_world_mesh_check(w);
	for (int r = 0; r < P && !self_stalled; r++) {
		const scd_peer_t *p = &w->peers[r];
		if (r == w->d->rank || p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED ||
		    (!w->is_coord && r != 0) || now - p->heard_ms <= (uint64_t)limit)
			continue;
		snprintf(why, sizeof(why), "not heard for %llu ms (peer_timeout_ms = %lld)",
			 (unsigned long long)(now - p->heard_ms), (long long)limit);
		peer_gone(w, r, SPARSECOMM__PEER_STATE__PEER_LOST, why);
	}
	if (!w->is_coord && w->peers[0].state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
		return;
	int64_t *ago = calloc((size_t)P, sizeof(*ago));
	if (!ago)
		return; /* the next beat tries again, well within the timeout */
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Heartbeat hb = SPARSECOMM__HEARTBEAT__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_HEARTBEAT;
	m.heartbeat = &hb;
	if (w->is_coord) {
		for (int r = 0; r < P; r++)
			ago[r] = r == w->d->rank ? -1 : (int64_t)(now - w->peers[r].heard_ms);
		hb.heard_ms_ago = ago;
		hb.n_heard_ms_ago = (size_t)P;
		/* by identity: while the world re-forms, a node that has not joined again
		 * must still hear its coordinator; in a formed world each carries the
		 * acknowledgement of the node's numbered messages (world/stream.c) */
		m.epoch = w->formed ? w->world_id : 0;
		for (int r = 1; r < P; r++)
			if (w->peers[r].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED &&
			    w->peers[r].ident_len) {
				m.ack = m.epoch ? w->peers[r].rx_next - 1 : 0;
				scd_world_send_raw(w, w->peers[r].ident, w->peers[r].ident_len,
						   &m);
			}
	} else {
		scd_world_send_coord(w, &m);
	}
	free(ago);
}

void scd_live_start(scd_world_t *w)
{
	uint64_t now = scd_now_ms();
	for (int r = 0; r < w->d->world_size; r++) {
		w->peers[r].state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
		w->peers[r].heard_ms = now;
	}
	if (w->d->world_size == 1)
		return;
	uint64_t every = (uint64_t)peer_timeout_ms(w) / 4;
	w->beat_ms = now;
	uv_timer_start(&w->beat_timer, on_beat, every, every);
}

int scd_live_heard(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		   const Sparsecomm__PeerMsg *m)
{
	if (from < 0 || from >= w->d->world_size || from == w->d->rank)
		return 1;
	scd_peer_t *p = &w->peers[from];
	if (p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED) {
		p->heard_ms = scd_now_ms();
		return 1;
	}
	if (!w->is_coord || m->body_case == SPARSECOMM__PEER_MSG__BODY_LEAVE)
		return 0; /* the coordinator's word after it was given up; a second goodbye */
	/* a node given up that speaks again (a stopped process resumed): it is told and
	 * stops, since the world has gone on without it */
	char why[400];
	snprintf(why, sizeof(why), "the world gave this node up: %s", p->gone_reason);
	Sparsecomm__PeerMsg r = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__JoinRefused jr = SPARSECOMM__JOIN_REFUSED__INIT;
	jr.reason = why;
	r.body_case = SPARSECOMM__PEER_MSG__BODY_REFUSED;
	r.refused = &jr;
	scd_world_send_raw(w, ident, ident_len, &r);
	return 0;
}

void scd_live_on_heartbeat(scd_world_t *w, int from, const Sparsecomm__Heartbeat *hb)
{
	if (w->is_coord || from != 0)
		return;
	uint64_t now = scd_now_ms();
	for (size_t r = 0; r < hb->n_heard_ms_ago && r < (size_t)w->d->world_size; r++)
		if ((int)r != w->d->rank && r != 0 && hb->heard_ms_ago[r] >= 0 &&
		    (uint64_t)hb->heard_ms_ago[r] <= now)
			w->peers[r].heard_ms = now - (uint64_t)hb->heard_ms_ago[r];
}

void scd_live_on_leave(scd_world_t *w, int from, const Sparsecomm__Leave *l)
{
	/* the coordinator hears nodes; a node hears its coordinator only */
	if (from < 0 || (!w->is_coord && from != 0) || (!w->formed && !w->served))
		return;
	peer_gone(w, from, SPARSECOMM__PEER_STATE__PEER_LEFT,
		  l->reason && *l->reason ? l->reason : "no reason given");
}

void scd_live_on_node_state(scd_world_t *w, const Sparsecomm__NodeState *ns)
{
	if (ns->rank <= 0 || ns->rank >= w->d->world_size || ns->rank == w->d->rank ||
	    (ns->state != SPARSECOMM__PEER_STATE__PEER_LOST &&
	     ns->state != SPARSECOMM__PEER_STATE__PEER_LEFT))
		return;
	scd_peer_t *p = &w->peers[ns->rank];
	if (p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
		return;
	p->state = ns->state;
	snprintf(p->gone_reason, sizeof(p->gone_reason), "%s", ns->reason ? ns->reason : "");
	scd_warn(SCD_SUB_WORLD, "%s", p->gone_reason);
	scd_engine_peer_gone(w->d->engine, ns->rank);
	scd_neg_release_held(w, 1);
}

void scd_world_leave(scd_world_t *w, const char *reason)
{
	if (!w || !w->sock || (!w->formed && !w->served) || w->left || w->d->world_size == 1)
		return;
	w->left = 1;
	uv_timer_stop(&w->beat_timer);
	/* the goodbye must leave before the socket closes: the daemon's teardown waits up to
	 * this long for it (zmq_ctx_term) */
	int linger = 1000;
	zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof(linger));
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Leave l = SPARSECOMM__LEAVE__INIT;
	l.rank = w->d->rank;
	l.reason = (char *)reason;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_LEAVE;
	m.leave = &l;
	if (!w->is_coord) {
		scd_world_send_coord(w, &m);
	} else {
		for (int r = 1; r < w->d->world_size; r++)
			if (w->peers[r].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED)
				scd_world_send_peer(w, r, &m);
	}
	scd_pipe_flush(w->pipe, 1000,
		       "this daemon leaves"); /* as the coordinator channel's linger */
}

const char *scd_live_cause(const scd_world_t *w)
{
	for (int r = 0; r < w->d->world_size; r++)
		if (w->peers[r].state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
			return w->peers[r].gone_reason;
	return NULL;
}

void scd_live_status(const scd_world_t *w, int r, Sparsecomm__PeerInfo *pi, scd_arena_t *a)
{
	const scd_peer_t *p = &w->peers[r];
	pi->state = p->state;
	pi->pipe = r != w->d->rank && (w->is_coord || r == 0) && scd_pipe_up(w->pipe, r);
	pi->heard_ms_ago = -1;
	if (w->formed && r != w->d->rank && p->heard_ms) {
		uint64_t now = scd_now_ms();
		pi->heard_ms_ago = now > p->heard_ms ? (int64_t)(now - p->heard_ms) : 0;
	}
	/* a node back in the world is no longer gone, whatever the last cause was */
	pi->reason = scd_arena_strdup(
	    a, p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED ? "" : p->gone_reason);
}
