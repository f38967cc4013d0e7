/*
 * stream.c: the peer messages' way out, and the numbered stream of a formed world.
 *
 * Before the world forms, and for heartbeats and refusals by identity, a PeerMsg goes on
 * the coordinator channel (ZeroMQ) as it is. In a formed world every message between a
 * node and its coordinator is numbered per direction (seq, epoch: the world id) and goes
 * on the peer pipe (world/pipe.h) when it is up, else on the coordinator channel; the
 * receiver hands the messages to the negotiation in number order, whichever way each
 * came (scd_world_deliver):
 *
 *   - a message ahead of its turn is held (at most SCD_HELD_MAX per peer);
 *   - a message that came both ways is dropped the second time;
 *   - every message carries an acknowledgement (ack): the last number its sender has
 *     delivered from the receiver. The sender keeps every numbered message until it is
 *     acknowledged (at most SCD_UNACKED_MAX_BYTES per peer), and sends the ones not
 *     acknowledged again on the coordinator channel when the pipe that carried them fails
 *     (a message wholly written to a socket whose connection then broke never reached
 *     its reader), and on its current way when one is not acknowledged a heartbeat (a
 *     quarter of peer_timeout_ms) after it went (the coordinator channel dropped what a
 *     reset connection held). Both sides send at least a heartbeat every quarter of
 *     peer_timeout_ms, which carries the acknowledgement;
 *   - a gap that nothing fills (the sender's copy was dropped over its bound, or the
 *     channel lost it again and again) holds the messages after it back, and after
 *     peer_timeout_ms its sender is given up as if not heard (SC_ERR_PEER on every rank,
 *     naming the numbers missing): going on without it could leave a node a plan behind,
 *     its jobs paired with the others' next ones.
 *
 * While the world re-forms, a message numbered in the world left is handled as it comes,
 * except on the coordinator a node's messages other than its heartbeats and goodbye: held
 * until the new world has formed (reform_hold: at most SCD_HELD_MAX per node, one more
 * gives the node up), then handled first, in order and once (scd_world_reform_replay),
 * as of the world left (a barrier's enter and a data-plane failure of that world are not
 * counted in the new one). The coordinator acknowledges none of them meanwhile, so the
 * node sends them again each heartbeat until the new world forms and it discards its
 * copies; its Join says the last number it sent in the world left, and the coordinator
 * lets it in only once every message up to that one has come (scd_world_reform_unread:
 * a reset channel lost some after they were sent again, and the world formed without a
 * failed step the node reported), giving the node up when they have not come within
 * peer_timeout_ms, as a gap in a formed world's stream does.
 *
 * WorldInfo starts the streams and is not numbered: the coordinator keeps it and sends it
 * again at each heartbeat to a node that has sent nothing numbered in its world yet
 * (scd_world_info_tick), which is how it knows the node holds it.
 */
#include "world/world_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "util/log.h"
#include "world/pipe.h"

/* Bytes of numbered messages kept per peer until acknowledged, at most: far more than a
 * heartbeat's worth of the negotiation's messages; past it the oldest copies go (a gap
 * that then opens gives the sender up: see above). A message over it is not kept. */
#define SCD_UNACKED_MAX_BYTES ((size_t)64 << 20)

/* A numbered message sent and not yet acknowledged, packed. */
typedef struct scd_sent {
	struct scd_sent *next;
	uint64_t seq;
	uint64_t sent_ms;
	size_t len;
	uint8_t data[];
} scd_sent_t;

/* ---- sending ------------------------------------------------------------------------ */

/* Room after a packed message for its numbering (three varint fields). */
#define NUMBERING_MAX 40

/* The body packed (room for its numbering after it) into stackbuf when it fits, else a
 * buffer the caller frees; NULL when out of memory. */
static uint8_t *pack_body(const Sparsecomm__PeerMsg *m, uint8_t *stackbuf, size_t cap,
			  size_t *n)
{
	*n = sparsecomm__peer_msg__get_packed_size(m);
	uint8_t *buf = *n + NUMBERING_MAX <= cap ? stackbuf : malloc(*n + NUMBERING_MAX);
	if (buf)
		sparsecomm__peer_msg__pack(m, buf);
	return buf;
}

static void zmq_out(scd_world_t *w, const uint8_t *ident, size_t ident_len, const uint8_t *buf,
		    size_t n)
{
	int rc = 0;
	if (ident)
		rc = zmq_send(w->sock, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (rc >= 0)
		rc = zmq_send(w->sock, buf, n, ZMQ_DONTWAIT);
	if (rc < 0)
		scd_warn(SCD_SUB_WORLD, "peer message of %zu bytes dropped: %s", n,
			 zmq_strerror(errno));
}

/* buf to rank on the coordinator channel (a node's: to the coordinator). */
static void chan_out(scd_world_t *w, int rank, const uint8_t *buf, size_t n)
{
	const scd_peer_t *p = &w->peers[rank];
	zmq_out(w, rank ? p->ident : NULL, rank ? p->ident_len : 0, buf, n);
}

void scd_world_send_raw(scd_world_t *w, const uint8_t *ident, size_t ident_len,
			const Sparsecomm__PeerMsg *m)
{
	uint8_t stackbuf[4096];
	size_t n;
	uint8_t *buf = pack_body(m, stackbuf, sizeof(stackbuf), &n);
	if (!buf)
		return;
	zmq_out(w, ident, ident_len, buf, n);
	if (buf != stackbuf)
		free(buf);
}

static void unacked_drop_first(scd_peer_t *p)
{
	scd_sent_t *s = p->unacked;
	p->unacked = s->next;
	if (!p->unacked)
		p->unacked_tail = NULL;
	p->unacked_bytes -= s->len;
	p->n_unacked--;
	free(s);
}

/* Keeps a copy of buf (numbered seq) until rank acknowledges it; the oldest copies go past
 * the bound. */
static void unacked_keep(scd_peer_t *p, int rank, uint64_t seq, const uint8_t *buf, size_t n)
{
	if (n > SCD_UNACKED_MAX_BYTES)
		return; /* not kept: lost only if its way fails too */
	while (p->unacked && p->unacked_bytes + n > SCD_UNACKED_MAX_BYTES) {
		scd_warn_limited(SCD_SUB_WORLD,
				 "peer message %llu to rank %d not acknowledged and dropped "
				 "from the copies kept (%zu bytes kept)",
				 (unsigned long long)p->unacked->seq, rank, p->unacked_bytes);
		unacked_drop_first(p);
	}
	scd_sent_t *s = malloc(sizeof(*s) + n);
	if (!s)
		return; /* not kept: lost only if its way fails too */
	s->next = NULL;
	s->seq = seq;
	s->sent_ms = scd_now_ms();
	s->len = n;
	memcpy(s->data, buf, n);
	if (p->unacked_tail)
		p->unacked_tail->next = s;
	else
		p->unacked = s;
	p->unacked_tail = s;
	p->unacked_bytes += n;
	p->n_unacked++;
}

/* buf to rank on the pipe when it is up, else on the coordinator channel. */
static void link_out(scd_world_t *w, int rank, const uint8_t *buf, size_t n)
{
	if (!scd_pipe_send(w->pipe, rank, buf, n))
		chan_out(w, rank, buf, n);
}

/* The packed body (n bytes, with room for its numbering) to rank: in a formed world
 * numbered, kept until acknowledged and sent on the pipe or the coordinator channel; else
 * on the coordinator channel as it is. The numbering is a second message of the three
 * fields alone after the body: a parser merges the two, as protobuf concatenation does. */
static void out_numbered(scd_world_t *w, int rank, uint8_t *buf, size_t n)
{
	scd_peer_t *p = &w->peers[rank];
	if (!(w->formed && w->world_id)) {
		chan_out(w, rank, buf, n);
		return;
	}
	Sparsecomm__PeerMsg num = SPARSECOMM__PEER_MSG__INIT;
	num.seq = ++p->tx_seq;
	num.epoch = w->world_id;
	num.ack = p->rx_next - 1;
	size_t t = sparsecomm__peer_msg__pack(&num, buf + n);
	unacked_keep(p, rank, num.seq, buf, n + t);
	link_out(w, rank, buf, n + t);
}

/* m (unnumbered: seq, epoch and ack 0) to rank (a node: to the coordinator). */
static void send_link(scd_world_t *w, int rank, const Sparsecomm__PeerMsg *m)
{
	uint8_t stackbuf[4096];
	size_t n;
	uint8_t *buf = pack_body(m, stackbuf, sizeof(stackbuf), &n);
	if (!buf)
		return;
	out_numbered(w, rank, buf, n);
	if (buf != stackbuf)
		free(buf);
}

static int reachable(const scd_world_t *w, int rank)
{
	const scd_peer_t *p = &w->peers[rank];
	return p->joined && p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED;
}

void scd_world_send_peer(scd_world_t *w, int rank, const Sparsecomm__PeerMsg *m)
{
	if (rank == w->d->rank)
		scd_world_handle(w, rank, NULL, 0, m);
	else if (reachable(w, rank))
		send_link(w, rank, m);
}

void scd_world_send_all(scd_world_t *w, const Sparsecomm__PeerMsg *m)
{
	uint8_t stackbuf[4096], *buf = NULL;
	size_t n = 0;
	for (int r = 0; r < w->d->world_size; r++) {
		if (r == w->d->rank) {
			scd_world_handle(w, r, NULL, 0, m);
			continue;
		}
		if (!reachable(w, r))
			continue;
		if (!buf && !(buf = pack_body(m, stackbuf, sizeof(stackbuf), &n)))
			return;
		out_numbered(w, r, buf, n);
	}
	if (buf != stackbuf)
		free(buf);
}

void scd_world_send_coord(scd_world_t *w, const Sparsecomm__PeerMsg *m)
{
	if (w->is_coord)
		scd_world_handle(w, 0, NULL, 0, m);
	else
		send_link(w, 0, m);
}

/* Rank's numbered messages not acknowledged, again, in order: on the coordinator channel
 * (chan 1) or their current way; each with the time of this sending. */
static void resend(scd_world_t *w, int rank, int chan, uint64_t now)
{
	scd_peer_t *p = &w->peers[rank];
	for (scd_sent_t *s = p->unacked; s; s = s->next) {
		s->sent_ms = now;
		if (chan)
			chan_out(w, rank, s->data, s->len);
		else
			link_out(w, rank, s->data, s->len);
	}
}

void scd_world_pipe_closed(scd_world_t *w, int rank)
{
	scd_peer_t *p = &w->peers[rank];
	if (!w->formed || (w->is_coord && p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED))
		return;
	if (p->n_unacked) /* the pipe's close is logged (info) with its reason */
		scd_debug(SCD_SUB_WORLD,
			  "peer messages %llu to %llu to rank %d sent again on the coordinator "
			  "channel: their pipe closed before they were acknowledged",
			  (unsigned long long)p->unacked->seq,
			  (unsigned long long)p->unacked_tail->seq, rank);
	resend(w, rank, 1, scd_now_ms());
}

/* ---- the numbered stream ------------------------------------------------------------ */

static void held_free(scd_peer_t *p)
{
	while (p->held) {
		scd_held_t *h = p->held;
		p->held = h->next;
		sparsecomm__peer_msg__free_unpacked(h->m, NULL);
		free(h);
	}
	p->n_held = 0;
}

void scd_world_stream_free(scd_peer_t *p)
{
	held_free(p);
	while (p->unacked)
		unacked_drop_first(p);
}

static int reachable(const scd_world_t *w, int rank);

void scd_world_info_send(scd_world_t *w, const uint8_t *buf, size_t n)
{
	free(w->world_info);
	w->world_info = malloc(n ? n : 1);
	w->world_info_len = w->world_info ? n : 0;
	if (w->world_info)
		memcpy(w->world_info, buf, n);
	for (int r = 1; r < w->d->world_size; r++) {
		w->peers[r].world_known = 0;
		if (reachable(w, r))
			chan_out(w, r, buf, n);
	}
}

void scd_world_info_to(scd_world_t *w, int rank)
{
	if (!w->is_coord || !w->formed || !w->world_info || !reachable(w, rank) ||
	    w->peers[rank].world_known)
		return;
	scd_warn_limited(
	    SCD_SUB_WORLD,
	    "rank %d has not shown that it holds the world's WorldInfo: sent again", rank);
	chan_out(w, rank, w->world_info, w->world_info_len);
}

void scd_world_info_tick(scd_world_t *w)
{
	for (int r = 1; r < w->d->world_size; r++)
		scd_world_info_to(w, r);
}

void scd_world_streams_reset(scd_world_t *w)
{
	for (int r = 0; r < w->d->world_size; r++) {
		scd_world_stream_free(&w->peers[r]);
		w->peers[r].tx_seq = w->peers[r].join_end_seq = 0;
		w->peers[r].rx_next = 1;
		w->peers[r].reform_gap_ms = 0;
	}
}

/* Delivers the held messages whose turn has come. */
static void deliver_held(scd_world_t *w, int from)
{
	scd_peer_t *p = &w->peers[from];
	while (p->held && p->held->m->seq <= p->rx_next) {
		scd_held_t *h = p->held;
		p->held = h->next;
		p->n_held--;
		p->held_since_ms = scd_now_ms();
		if (h->m->seq == p->rx_next) {
			p->rx_next++;
			scd_world_handle(w, from, w->is_coord ? p->ident : NULL, p->ident_len,
					 h->m);
		}
		sparsecomm__peer_msg__free_unpacked(h->m, NULL);
		free(h);
	}
}

/* Each node's count and last of the messages held while the world re-forms, from the list
 * (after some were dropped from it, or it was taken whole). */
static void reform_recount(scd_world_t *w)
{
	for (int r = 0; w->peers && r < w->d->world_size; r++) {
		w->peers[r].n_reform_held = 0;
		w->peers[r].reform_tail = NULL;
	}
	for (scd_held_t *h = w->reform_held; h; h = h->next) {
		w->peers[h->from].n_reform_held++;
		w->peers[h->from].reform_tail = h;
	}
}

/* The coordinator, while the world re-forms: a node's message numbered in the world left
 * (sent again when the Reform closed the pipes) is held, in order by rank and number and
 * once, until the new world has formed; but its heartbeats and its goodbye, which say
 * whether it is alive now. Handled now, what a ReadyList fails would go in a plan to no
 * node (none has joined the new world yet), a failed step and the node's state would be
 * read out of their order, a join's end would reach only the nodes joined again, and a
 * copy that came both ways would be handled twice (a join counted again for the next
 * one). A node holds at most SCD_HELD_MAX, as its stream does: one that cannot be held
 * gives the node up (SC_ERR_PEER on every rank, naming it), as a gap in a formed world's
 * stream does; dropped, a failed step it reported went unread, and its trainers' next
 * step paired with the others' step that failed. 1 when m is held. */
static int reform_hold(scd_world_t *w, int from, Sparsecomm__PeerMsg *m)
{
	if (!w->is_coord || m->body_case == SPARSECOMM__PEER_MSG__BODY_HEARTBEAT ||
	    m->body_case == SPARSECOMM__PEER_MSG__BODY_LEAVE)
		return 0;
	if (m->body_case == SPARSECOMM__PEER_MSG__BODY_NODE_JOIN &&
	    scd_join_ended_unread(w, from, m->ack)) {
		/* judged now, by the world left's numbers, which the new world resets */
		sparsecomm__peer_msg__free_unpacked(m, NULL);
		return 1;
	}
	scd_peer_t *p = &w->peers[from];
	scd_held_t **at = &w->reform_held;
	if (p->reform_tail && p->reform_tail->m->seq < m->seq)
		at = &p->reform_tail->next; /* after the node's last: they come in order */
	else
		while (*at &&
		       ((*at)->from < from || ((*at)->from == from && (*at)->m->seq < m->seq)))
			at = &(*at)->next;
	if (*at && (*at)->from == from && (*at)->m->seq == m->seq) {
		sparsecomm__peer_msg__free_unpacked(m, NULL); /* came both ways */
		return 1;
	}
	scd_held_t *h = p->n_reform_held < SCD_HELD_MAX ? malloc(sizeof(*h)) : NULL;
	if (!h) {
		char why[200];
		snprintf(why, sizeof(why),
			 "its peer message %llu of the world left could not be held while the "
			 "world re-forms (%d held)",
			 (unsigned long long)m->seq, p->n_reform_held);
		sparsecomm__peer_msg__free_unpacked(m, NULL);
		scd_world_reform_drop(w, from, 0);
		scd_live_lost(w, from, why);
		return 1;
	}
	h->m = m;
	h->from = from;
	h->next = *at;
	*at = h;
	p->n_reform_held++;
	if (!h->next || h->next->from != from)
		p->reform_tail = h;
	return 1;
}

void scd_world_reform_replay(scd_world_t *w)
{
	scd_held_t *h = w->reform_held;
	w->reform_held = NULL;
	reform_recount(w);
	while (h) {
		scd_held_t *next = h->next;
		const scd_peer_t *p = &w->peers[h->from];
		w->old_world = 1;
		scd_world_handle(w, h->from, p->ident, p->ident_len, h->m);
		w->old_world = 0;
		sparsecomm__peer_msg__free_unpacked(h->m, NULL);
		free(h);
		h = next;
	}
}

/* While the world re-forms: the peer's message seq of the world left has been read (on the
 * coordinator held, or handled: a heartbeat, a join its end had ended). The stream's next
 * number passes it when it is the next, and the held ones after it that follow on: every
 * message before rx_next has come, which is what a Join is checked against
 * (scd_world_reform_unread). A copy that comes again after is dropped as one that came
 * both ways. */
static void reform_read(scd_world_t *w, int from, uint64_t seq)
{
	scd_peer_t *p = &w->peers[from];
	if (seq != p->rx_next)
		return;
	p->rx_next++;
	if (p->reform_tail && p->reform_tail->m->seq >= p->rx_next) /* held ahead */
		for (scd_held_t *h = w->reform_held; h; h = h->next)
			if (h->from == from && h->m->seq == p->rx_next)
				p->rx_next++;
	/* what the formed world held ahead of a gap, now read: not a gap that never fills
	 * (scd_world_stream_tick) */
	while (p->held && p->held->m->seq < p->rx_next) {
		scd_held_t *h = p->held;
		p->held = h->next;
		p->n_held--;
		sparsecomm__peer_msg__free_unpacked(h->m, NULL);
		free(h);
	}
	p->held_since_ms = scd_now_ms();
}

int scd_world_reform_unread(scd_world_t *w, int rank, uint64_t world, uint64_t last)
{
	scd_peer_t *p = &w->peers[rank];
	if (w->formed || !world || world != w->world_id || last < p->rx_next) {
		p->reform_gap_ms = 0;
		return 0;
	}
	uint64_t now = scd_now_ms();
	uint64_t timeout = (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_peer_timeout_ms);
	if (!p->reform_gap_ms)
		p->reform_gap_ms = now;
	if (now - p->reform_gap_ms <= timeout) {
		scd_warn_limited(SCD_SUB_WORLD,
				 "rank %d joins again before its peer messages %llu to %llu of "
				 "the world left came: it is let in once they have (it sends "
				 "them again each heartbeat)",
				 rank, (unsigned long long)p->rx_next,
				 (unsigned long long)last);
		return 1;
	}
	char why[200];
	snprintf(why, sizeof(why),
		 "its peer messages %llu to %llu of the world left never came within "
		 "peer_timeout_ms (%llu ms) while the world re-formed",
		 (unsigned long long)p->rx_next, (unsigned long long)last,
		 (unsigned long long)timeout);
	p->reform_gap_ms = 0;
	scd_world_reform_drop(w, rank, 0);
	scd_live_lost(w, rank, why);
	return 1;
}

void scd_world_reform_drop(scd_world_t *w, int rank, int body_case)
{
	for (scd_held_t **pp = &w->reform_held; *pp;) {
		scd_held_t *h = *pp;
		if ((rank >= 0 && h->from != rank) ||
		    (body_case && (int)h->m->body_case != body_case)) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		sparsecomm__peer_msg__free_unpacked(h->m, NULL);
		free(h);
	}
	reform_recount(w);
}

/* The copies rank acknowledged (ack: the last number it delivered) go. */
static void acked(scd_peer_t *p, uint64_t ack)
{
	while (p->unacked && p->unacked->seq <= ack)
		unacked_drop_first(p);
}

int scd_world_deliver(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		      Sparsecomm__PeerMsg *m)
{
	int ours = m->epoch && m->epoch == w->world_id && from >= 0 && from < w->d->world_size;
	if (m->seq && !ours)
		return 0; /* numbered in another world: one this daemon left (copies of it sent
			   * again), or one it never was in (a daemon started again) */
	if (ours && m->ack && m->ack <= w->peers[from].tx_seq)
		acked(&w->peers[from], m->ack);
	if (ours && m->seq)
		w->peers[from].world_known = 1; /* it holds this world's WorldInfo */
	if (!ours || !m->seq) {
		scd_world_handle(w, from, ident, ident_len, m);
		return 0;
	}
	scd_peer_t *p = &w->peers[from];
	if (m->seq < p->rx_next)
		return 0; /* came both ways (also while the world re-forms: the pipes closed by
			   * the Reform send what was not acknowledged again) */
	if (!w->formed) {
		uint64_t seq = m->seq; /* m is the list's, or freed, once held */
		int held = reform_hold(w, from, m);
		if (!held)
			scd_world_handle(w, from, ident, ident_len, m);
		reform_read(w, from, seq);
		return held;
	}
	if (m->seq > p->rx_next) {
		scd_held_t *h = p->n_held < SCD_HELD_MAX ? malloc(sizeof(*h)) : NULL,
			   **at = &p->held;
		if (!h) {
			scd_warn_limited(
			    SCD_SUB_WORLD,
			    "peer message %llu from rank %d dropped: %d held already "
			    "behind message %llu",
			    (unsigned long long)m->seq, from, p->n_held,
			    (unsigned long long)p->rx_next);
			return 0;
		}
		while (*at && (*at)->m->seq < m->seq)
			at = &(*at)->next;
		if (*at && (*at)->m->seq == m->seq) {
			free(h);
			return 0;
		}
		if (!p->held)
			p->held_since_ms = scd_now_ms();
		h->m = m;
		h->next = *at;
		*at = h;
		p->n_held++;
		return 1;
	}
	p->rx_next++;
	scd_world_handle(w, from, ident, ident_len, m);
	deliver_held(w, from);
	return 0;
}

void scd_world_stream_tick(scd_world_t *w)
{
	uint64_t now = scd_now_ms();
	uint64_t timeout = (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_peer_timeout_ms);
	for (int r = 0; r < w->d->world_size; r++) {
		scd_peer_t *p = &w->peers[r];
		if (p->state != SPARSECOMM__PEER_STATE__PEER_CONNECTED)
			while (p->unacked) /* a peer gone: it comes back in a new world */
				unacked_drop_first(p);
		/* a pipe that is up loses nothing (one that fails says so, and what it carried
		 * goes again then): what is late was lost on the coordinator channel */
		if (p->unacked && now - p->unacked->sent_ms > timeout / 4) {
			scd_warn_limited(
			    SCD_SUB_WORLD,
			    "peer messages %llu to %llu to rank %d not acknowledged "
			    "in %llu ms: sent again on the coordinator channel",
			    (unsigned long long)p->unacked->seq,
			    (unsigned long long)p->unacked_tail->seq, r,
			    (unsigned long long)(now - p->unacked->sent_ms));
			resend(w, r, 1, now);
		}
		if (!p->held || now - p->held_since_ms <= timeout)
			continue;
		char why[200];
		snprintf(
		    why, sizeof(why),
		    "its peer messages %llu to %llu never came within peer_timeout_ms (%llu "
		    "ms), though later ones did",
		    (unsigned long long)p->rx_next, (unsigned long long)p->held->m->seq - 1,
		    (unsigned long long)timeout);
		held_free(p);
		scd_live_lost(w, r, why);
	}
	if (!w->is_coord && w->formed && w->pipe_port && !scd_pipe_up(w->pipe, 0))
		scd_pipe_connect(w->pipe, w->pipe_host, w->pipe_port);
}
