/*
 * test_world_reform.c: what the coordinator and a node send while the world re-forms, in
 * the exact order of the messages (docs/design.md, "Re-forming the world"). Each world is
 * one daemon's on its own loop; its coordinator channel is a ZeroMQ pair over inproc, so
 * the test reads what it sends, in order.
 *
 *   - The coordinator reads a node's ReadyList of the world left while it re-forms (sent
 *     again when the Reform closed the pipes): its announcement of a step the node owes
 *     (world/late.c) must not take the late record, whose refusal would go to no node:
 *     the node announces the step again in the new world, where it is refused.
 *   - Such ReadyLists and NodeStates are handled once the world has formed, in their
 *     order: a failed step a node reported before it said it was degraded again takes
 *     the step answered for it, and charges nobody.
 *   - A node whose state changes while the world re-forms tells it in its place: a
 *     trainer that failed its step after the node was degraded and whole again reports
 *     it after the NodeStates, never before (the coordinator's count of the steps
 *     answered while the node was degraded would take it). So does a job's clean end
 *     (no trainers), a trainer gone without joining, a barrier entered and a join.
 *   - A re-form fails the barrier in progress on every node: the coordinator counts it
 *     again, and takes no enter of the world left read while the world re-forms.
 *   - A node's other messages of the world left (a join) are held too, and handled once;
 *     past what a node may hold, the node is given up rather than a message dropped.
 *   - Another daemon of a node joins while the world re-forms: the old one is lost, and
 *     the join its trainers were in ends on every rank.
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "ctl/ctl.h"
#include "engine/engine.h"
#include "unit.h"
#include "unit_mesh.h"
#include "util/log.h"
#include "world/pipe.h"
#include "world/world_int.h"

static int stops;

static void on_ready(scd_daemon_t *d) {}
static void on_stop(scd_daemon_t *d, int exit_code)
{
	stops++;
}
static const scd_world_hooks_t hooks = {.ready = on_ready, .stop = on_stop};
static void up_announce(scd_world_t *w, scd_ntensor_t *nt) {}
static int forgotten; /* names the node forgot (its last registration gone) */
static void up_forget(scd_world_t *w, const char *name, uint64_t presel_key)
{
	forgotten++;
}
static const scd_ctl_upcalls_t upcalls = {.announce = up_announce, .forget = up_forget};

static void on_job_back(void *arg, scd_job_t *job)
{
	if (job->kind == SCD_JOB_MESH)
		scd_transport_boot_clear(&job->boot);
	free(job->items);
	free(job);
}

/* A daemon of rank rank of 2 with its world, its ctl, its engine and its coordinator
 * channel (a pair whose other end the test reads). */
typedef struct fixture {
	scd_daemon_t d;
	uv_loop_t loop;
	void *zctx, *peer;
} fixture_t;

static void fixture_make(fixture_t *f, int rank)
{
	memset(f, 0, sizeof(*f));
	stops = 0;
	scd_log_level = SCD_LOG_ERROR;
	CHECK_EQ_INT(uv_loop_init(&f->loop), 0);
	f->d.loop = &f->loop;
	f->d.rank = rank, f->d.world_size = 2, f->d.local_size = 1, f->d.notify_fd = -1;
	scd_config_init(&f->d.cfg);
	CHECK_EQ_INT(scd_world_create(&f->d, &hooks, &f->d.world), SC_OK);
	CHECK_EQ_INT(scd_ctl_create(&f->d, &upcalls, &f->d.ctl), SC_OK);
	scd_engine_params_t p = {.loop = &f->loop,
				 .rank = rank,
				 .world_size = 2,
				 .local_size = 1,
				 .fusion_bytes = 1u << 20,
				 .join_timeout_ms = 200,
				 .transport = "tcp",
				 .schemes = scd_scheme_cfg_default(0, 0),
				 .done = on_job_back};
	CHECK_EQ_INT(scd_engine_create(&p, &f->d.engine), SC_OK);
	char addr[64];
	snprintf(addr, sizeof(addr), "inproc://reform-%d", rank);
	f->zctx = zmq_ctx_new();
	scd_world_t *w = f->d.world;
	w->sock = zmq_socket(f->zctx, ZMQ_PAIR);
	f->peer = zmq_socket(f->zctx, ZMQ_PAIR);
	int zero = 0;
	zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(f->peer, ZMQ_LINGER, &zero, sizeof(zero));
	CHECK_EQ_INT(zmq_bind(f->peer, addr), 0);
	CHECK_EQ_INT(zmq_connect(w->sock, addr), 0);
	/* a formed world (id 100) of both ranks */
	for (int r = 0; r < 2; r++) {
		w->peers[r].joined = 1;
		w->peers[r].state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
		w->peers[r].ident_len = 2;
		memcpy(w->peers[r].ident, r ? "n1" : "n0", 2);
	}
	w->n_joined = 2;
	w->formed = 1;
	w->world_id = 100;
	scd_world_streams_reset(w);
}

static void fixture_free(fixture_t *f)
{
	CHECK_EQ_INT(scd_engine_destroy(f->d.engine, 10000), SC_OK);
	scd_world_destroy(f->d.world);
	f->d.world->sock = NULL;
	scd_ctl_destroy(f->d.ctl);
	uv_run(&f->loop, UV_RUN_NOWAIT); /* the handles closed */
	free(f->d.ctl);
	free(f->d.world->peers);
	free(f->d.world);
	scd_config_free(&f->d.cfg);
	uv_loop_close(&f->loop);
	zmq_close(f->peer);
	zmq_ctx_term(f->zctx);
}

/* The next message the daemon sent on its coordinator channel (a routing id first, where
 * it names one), or NULL when none came. */
static Sparsecomm__PeerMsg *next_sent(fixture_t *f)
{
	uint8_t buf[1 << 16];
	for (;;) {
		int n = zmq_recv(f->peer, buf, sizeof(buf), ZMQ_DONTWAIT);
		if (n < 0)
			return NULL;
		int more = 0;
		size_t ml = sizeof(more);
		zmq_getsockopt(f->peer, ZMQ_RCVMORE, &more, &ml);
		if (more)
			continue; /* the routing id */
		Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, (size_t)n, buf);
		CHECK_TRUE(m != NULL);
		if (m->body_case != SPARSECOMM__PEER_MSG__BODY_HEARTBEAT &&
		    m->body_case != SPARSECOMM__PEER_MSG__BODY_JOIN &&
		    m->body_case != SPARSECOMM__PEER_MSG__BODY_WORLD)
			return m;
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	}
}

/* The coordinator's re-form as world.c's reform does it: nothing negotiated is kept but
 * the late records, and no node has joined the new world. */
static void coord_reform(scd_world_t *w)
{
	w->formed = 0;
	w->peers[1].joined = 0;
	w->n_joined = 1;
	scd_neg_reset(w);
}

/* ... and the new world (id 200) formed, once every node joined again. */
static void coord_formed(scd_world_t *w)
{
	w->peers[1].joined = 1;
	w->n_joined = 2;
	w->formed = 1;
	w->world_id = 200;
	scd_world_streams_reset(w);
}

/* Node 1's record for name: it owes owed steps, answered were answered for it. */
static void late_record(scd_world_t *w, const char *name, int owed, int answered)
{
	scd_poison_t *l = calloc(1, sizeof(*l));
	CHECK_TRUE(l != NULL);
	l->name = strdup(name);
	l->reason = strdup("allreduce of tensor refused: node 1 submitted it late");
	l->rank = 1;
	l->owed = owed;
	l->answered = answered;
	l->status = SC_ERR_STALLED;
	l->next = w->lates;
	w->lates = l;
}

static scd_poison_t *late_find(scd_world_t *w, int rank, const char *name)
{
	scd_poison_t *l = w->lates;
	while (l && (l->rank != rank || strcmp(l->name, name)))
		l = l->next;
	return l;
}

/* Node 1's message m, numbered seq in world epoch, as the coordinator reads it. */
static void from_node(scd_world_t *w, Sparsecomm__PeerMsg *m, uint64_t seq, uint64_t epoch)
{
	m->seq = seq;
	m->epoch = epoch;
	size_t n = sparsecomm__peer_msg__get_packed_size(m);
	uint8_t *buf = malloc(n + 1);
	CHECK_TRUE(buf != NULL);
	sparsecomm__peer_msg__pack(m, buf);
	Sparsecomm__PeerMsg *heap = sparsecomm__peer_msg__unpack(NULL, n, buf);
	free(buf);
	CHECK_TRUE(heap != NULL);
	if (!scd_world_deliver(w, 1, w->peers[1].ident, w->peers[1].ident_len, heap))
		sparsecomm__peer_msg__free_unpacked(heap, NULL);
}

/* Node 1's ReadyList: an announcement of name (NULL: none), an abandon of a step of
 * abandoned (NULL: none). */
static void ready_from_node(scd_world_t *w, const char *name, const char *abandoned,
			    uint64_t seq, uint64_t epoch)
{
	Sparsecomm__TensorSig sig = SPARSECOMM__TENSOR_SIG__INIT;
	Sparsecomm__TensorRequest req = SPARSECOMM__TENSOR_REQUEST__INIT, *preq = &req;
	req.name = (char *)name;
	req.dtype = SC_FLOAT32;
	req.numel = 4;
	req.op = SC_OP_SUM;
	req.sig = &sig;
	Sparsecomm__Abandon ab = SPARSECOMM__ABANDON__INIT, *pab = &ab;
	ab.name = (char *)abandoned;
	ab.status = SC_ERR_ABORTED;
	ab.reason = "node 1's trainer failed its step";
	ab.step = 1;
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	rl.rank = 1;
	rl.requests = &preq;
	rl.n_requests = name != NULL;
	rl.abandoned = &pab;
	rl.n_abandoned = abandoned != NULL;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_READY;
	m.ready = &rl;
	from_node(w, &m, seq, epoch);
}

/* Node 1's NodeState (degraded, or whole again), numbered seq in world epoch. */
static void state_from_node(scd_world_t *w, int degraded, uint64_t seq, uint64_t epoch)
{
	Sparsecomm__NodeState ns = SPARSECOMM__NODE_STATE__INIT;
	ns.rank = 1;
	ns.degraded = degraded;
	ns.reason = degraded ? "node 1's trainer exited" : "";
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_STATE;
	m.node_state = &ns;
	from_node(w, &m, seq, epoch);
}

UNIT_TEST(world_reform_old_ready_list_takes_no_late_step)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	late_record(w, "t", 1, 0); /* node 1 owes a step of 't' */
	coord_reform(w);
	/* its announcement of that step in the world left, sent again as the pipes closed */
	ready_from_node(w, "t", NULL, 1, 100);
	scd_poison_t *l = late_find(w, 1, "t");
	CHECK_MSG(l && l->owed == 1,
		  "the late step was taken by an announcement read while the world re-formed: "
		  "its refusal reached no node");
	CHECK_TRUE(w->ehead == NULL);
	/* the node announces it again in the new world: refused there, to node 1 */
	coord_formed(w);
	ready_from_node(w, "t", NULL, 1, 200);
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_PLAN,
		  "no plan came to node 1 for its late step");
	CHECK_EQ_INT((int)m->plan->n_responses, 1);
	const Sparsecomm__Response *r = m->plan->responses[0];
	CHECK_TRUE(r->kind == SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR);
	CHECK_TRUE(r->n_ranks == 1 && r->ranks[0] == 1);
	CHECK_TRUE(r->n_names == 1 && !strcmp(r->names[0], "t"));
	CHECK_MSG(strstr(r->error, "late"), "refusal: %s", r->error);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_TRUE(late_find(w, 1, "t") == NULL);
	CHECK_TRUE(w->ehead == NULL); /* refused: not paired with anything */
	fixture_free(&f);
}

UNIT_TEST(world_reform_old_messages_handled_in_order_once_formed)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	w->peers[1].degraded = 1; /* a step of 'u' failed while node 1 was degraded */
	late_record(w, "u", 0, 1);
	coord_reform(w);
	/* node 1 reported that step (1), then said it is degraded again (2): 2 came first,
	 * and 1 came twice */
	state_from_node(w, 1, 2, 100);
	ready_from_node(w, "t", "u", 1, 100);
	ready_from_node(w, "t", "u", 1, 100);
	CHECK_TRUE(late_find(w, 1, "u") !=
		   NULL); /* nothing is handled before the world forms */
	coord_formed(w);
	scd_world_reform_replay(w);
	/* the report took the step answered, and charged nobody; the degradation came after
	 * it; the announcement of the world left was dropped */
	CHECK_TRUE(w->lates == NULL);
	CHECK_TRUE(w->ehead == NULL);
	Sparsecomm__PeerMsg *out = next_sent(&f);
	CHECK_MSG(out == NULL, "the coordinator sent message %d",
		  out ? (int)out->body_case : 0);
	fixture_free(&f);
}

/* Node 1's messages of the world left past what a node may hold while the world
 * re-forms (SCD_HELD_MAX, as its stream holds): the one that cannot be held, a failed
 * step it reported, gives node 1 up (SC_ERR_PEER on every rank, naming it). Dropped, the
 * world went on without that failed step: its trainers' next step paired with the
 * others' step that failed. Numbered from the last down, each goes first in the list. */
UNIT_TEST(world_reform_hold_past_its_bound_gives_the_node_up)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_reform(w);
	for (uint64_t seq = SCD_HELD_MAX + 1; seq > 1; seq--)
		state_from_node(w, 0, seq, 100);
	CHECK_TRUE(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED);
	ready_from_node(w, NULL, "u", 1, 100);
	CHECK_MSG(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_LOST,
		  "node 1's message past the bound was dropped, and the world went on with "
		  "node 1 (state %d)",
		  (int)w->peers[1].state);
	CHECK_TRUE(w->peers[1].degraded);
	CHECK_MSG(w->reform_held == NULL, "node 1's messages stay held, to be replayed");
	fixture_free(&f);
}

/* Node 1's message 2 came ahead of 1 in the formed world (held for its turn) as the world
 * re-formed; while it re-forms both come again and are read. Message 2 held ahead of a gap
 * in the world left is read too: kept, once peer_timeout_ms had passed since it came (a
 * Join that waits for the node's messages, scd_world_reform_unread) node 1 was given up
 * for a gap that had filled. */
UNIT_TEST(world_reform_read_frees_what_the_world_left_held_ahead)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	state_from_node(w, 0, 2, 100);
	CHECK_TRUE(w->peers[1].n_held == 1);
	coord_reform(w);
	ready_from_node(w, NULL, "u", 1, 100);
	state_from_node(w, 0, 2, 100);
	CHECK_TRUE(w->peers[1].rx_next == 3);
	w->peers[1].held_since_ms =
	    scd_now_ms() - (uint64_t)scd_cfg_int(&f.d.cfg, SCD_CFG_peer_timeout_ms) - 1;
	scd_world_stream_tick(w);
	CHECK_MSG(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED,
		  "node 1 given up for messages it sent: %s", w->peers[1].gone_reason);
	CHECK_TRUE(w->peers[1].held == NULL && w->peers[1].n_held == 0);
	fixture_free(&f);
}

/* ---- a node ------------------------------------------------------------------------- */

static void pipe_msg(void *ctx, int from, const uint8_t *data, size_t len) {}

/* Node 1 in world 100, its data plane prepared; then the Reform comes (world.c, reform). */
static void node_reforms(fixture_t *f, unit_mesh_t *mesh)
{
	scd_world_t *w = f->d.world;
	CHECK_EQ_INT(unit_mesh_prepare(mesh, "tcp", 2, 200), SC_OK);
	uint8_t key[32] = {0};
	w->pipe = scd_pipe_new(&f->loop, 1, 2, key, 0, pipe_msg, w);
	CHECK_TRUE(w->pipe != NULL);
	w->tops = mesh->ep[1]->ops;
	w->endpoint = mesh->ep[1];
	mesh->ep[1] = NULL;
	w->formed = 0;
	scd_neg_reset(w);
}

/* The new world's WorldInfo (id 200) comes to node 1: the world has formed. */
static void node_formed(fixture_t *f, unit_mesh_t *mesh)
{
	scd_world_t *w = f->d.world;
	Sparsecomm__PeerInfo pi[2] = {SPARSECOMM__PEER_INFO__INIT, SPARSECOMM__PEER_INFO__INIT};
	Sparsecomm__PeerInfo *pp[2] = {&pi[0], &pi[1]};
	for (int r = 0; r < 2; r++) {
		pi[r].rank = r;
		pi[r].connected = 1;
		const scd_transport_endpoint_t *ep = r ? w->endpoint : mesh->ep[0];
		pi[r].transport_blob.data = (uint8_t *)ep->blob;
		pi[r].transport_blob.len = ep->blob_len;
	}
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	wi.world_id = 200;
	wi.transport = (char *)w->tops->name;
	wi.peers = pp;
	wi.n_peers = 2;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD;
	m.world = &wi;
	scd_world_handle(w, 0, NULL, 0, &m);
	CHECK_EQ_INT(w->formed, 1);
	unit_mesh_release(mesh);
}

/* Checks that node 1 sent the n messages of want, in that order ("abandon NAME",
 * "degraded", "whole", "idle", "left", "barrier N", "join N"; nothing announced). */
static void check_sent(fixture_t *f, const char *const *want, int n)
{
	for (int k = 0; k < n;) {
		Sparsecomm__PeerMsg *o = next_sent(f);
		CHECK_MSG(o != NULL, "message %d (%s) never came", k, want[k]);
		char got[64] = "";
		if (o->body_case == SPARSECOMM__PEER_MSG__BODY_READY) {
			CHECK_MSG(o->ready->n_requests == 0, "a ReadyList announced a tensor");
			for (size_t i = 0; i < o->ready->n_abandoned; i++, k++) {
				snprintf(got, sizeof(got), "abandon %s",
					 o->ready->abandoned[i]->name);
				CHECK_MSG(k < n && !strcmp(got, want[k]),
					  "message %d: %s, expected %s", k, got,
					  k < n ? want[k] : "none");
			}
			sparsecomm__peer_msg__free_unpacked(o, NULL);
			continue;
		}
		const Sparsecomm__NodeState *ns = o->node_state;
		if (o->body_case == SPARSECOMM__PEER_MSG__BODY_NODE_STATE)
			snprintf(got, sizeof(got), "%s",
				 ns->no_trainers	   ? "idle"
				 : ns->left && ns->left[0] ? "left"
				 : ns->degraded		   ? "degraded"
							   : "whole");
		else if (o->body_case == SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER)
			snprintf(got, sizeof(got), "barrier %llu",
				 (unsigned long long)o->barrier_enter->seq);
		else if (o->body_case == SPARSECOMM__PEER_MSG__BODY_NODE_JOIN)
			snprintf(got, sizeof(got), "join %d", (int)o->node_join->last_rank);
		else
			snprintf(got, sizeof(got), "message %d", (int)o->body_case);
		CHECK_MSG(!strcmp(got, want[k]), "message %d: %s, expected %s", k, got,
			  want[k]);
		k++;
		sparsecomm__peer_msg__free_unpacked(o, NULL);
	}
	Sparsecomm__PeerMsg *o = next_sent(f);
	CHECK_MSG(o == NULL, "message %d sent after those expected", o ? (int)o->body_case : 0);
}

UNIT_TEST(world_reform_node_state_sent_in_its_place)
{
	fixture_t f;
	fixture_make(&f, 1);
	scd_world_t *w = f.d.world;
	unit_mesh_t mesh;
	node_reforms(&f, &mesh);
	/* meanwhile a trainer fails its step of 'v' and dies (the node is degraded), a new
	 * trainer comes (whole again) and fails its step of 'u' */
	scd_world_fail_step(w, "v", SC_ERR_ABORTED, "rank 1's trainer failed 'v'");
	scd_world_node_state(w, 1, "rank 1's trainer exited");
	scd_world_node_state(w, 0, "");
	scd_world_fail_step(w, "u", SC_ERR_ABORTED, "rank 1's new trainer failed 'u'");
	CHECK_TRUE(next_sent(&f) == NULL); /* nothing goes before the world has formed */
	node_formed(&f, &mesh);
	/* in their order: 'v' failed, degraded, whole, 'u' failed */
	const char *want[] = {"abandon v", "degraded", "whole", "abandon u"};
	check_sent(&f, want, 4);
	CHECK_TRUE(w->n_out == 0 && w->out_abandon == NULL);
	fixture_free(&f);
}

/* A job that ends cleanly while the world re-forms: its last trainer's failed step, then
 * the node without trainers (the coordinator forgets the steps the job owed, late.c); the
 * next job's trainers enter a barrier, join, and fail a step. Each is told once the world
 * has formed, in its place; dropped, the next job's first step was refused as late, and
 * its barrier and join stalled. */
UNIT_TEST(world_reform_node_idle_barrier_join_sent_in_their_place)
{
	fixture_t f;
	fixture_make(&f, 1);
	scd_world_t *w = f.d.world;
	unit_mesh_t mesh;
	node_reforms(&f, &mesh);
	scd_world_fail_step(w, "v", SC_ERR_ABORTED, "rank 1's trainer failed 'v'");
	scd_world_node_idle(w);
	scd_world_node_idle(w); /* twice in one place: once */
	scd_world_barrier_enter(w, 3);
	scd_world_fail_step(w, "u", SC_ERR_ABORTED, "rank 1's next trainer failed 'u'");
	scd_world_node_left(w, "rank 1's trainer ended its session without joining");
	scd_world_node_join(w, 1);
	CHECK_TRUE(next_sent(&f) == NULL); /* nothing goes before the world has formed */
	node_formed(&f, &mesh);
	const char *want[] = {"abandon v", "idle", "barrier 3", "abandon u", "left", "join 1"};
	check_sent(&f, want, 6);
	CHECK_TRUE(w->n_held_states == 0);
	fixture_free(&f);
}

/* ---- barriers on the coordinator ------------------------------------------------------ */

/* Node 1's BarrierEnter of barrier seq_b, numbered seq in world epoch. */
static void barrier_from_node(scd_world_t *w, uint64_t seq_b, uint64_t seq, uint64_t epoch)
{
	Sparsecomm__BarrierEnter be = SPARSECOMM__BARRIER_ENTER__INIT;
	be.rank = 1;
	be.seq = seq_b;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER;
	m.barrier_enter = &be;
	from_node(w, &m, seq, epoch);
}

/* The re-form fails the barrier in progress on every node, which enter it again in the
 * new world: the coordinator's count of it starts again, and an enter of the world left
 * read meanwhile is not counted. Else the barrier completed with node 1's trainers not in
 * it, and their next barrier paired with the others' one after. */
UNIT_TEST(world_reform_barrier_counts_again)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	barrier_from_node(w, 1, 1, 100); /* node 1 entered barrier 1 in world 100 */
	CHECK_EQ_INT(w->barrier_count, 1);
	coord_reform(w);
	CHECK_MSG(w->barrier_count == 0 && !w->peers[1].barrier_in,
		  "the barrier failed by the re-form still counts node 1 in it");
	/* another of its enters of the world left, read while the world re-forms */
	barrier_from_node(w, 1, 2, 100);
	CHECK_MSG(w->barrier_count == 0, "an enter of the world left was counted");
	coord_formed(w);
	scd_world_reform_replay(w);
	scd_world_barrier_enter(w, 1); /* the coordinator's node enters it again */
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m == NULL, "barrier 1 ended (message %d) without node 1 in it",
		  m ? (int)m->body_case : 0);
	barrier_from_node(w, 1, 1, 200); /* and node 1, in the new world */
	m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE,
		  "barrier 1 did not end");
	CHECK_TRUE(m->barrier_done->seq == 1 && m->barrier_done->status == SC_OK);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	fixture_free(&f);
}

/* Node 1 held, while the world re-formed, its enter of barrier 1, then degraded (a
 * trainer died: its node failed the barrier) and whole again (a new trainer came), all
 * read at once once the world has formed. The degradation fails the barrier on every
 * rank then: left to the next tick, the node was whole again by then, the barrier
 * completed without its trainers in it, and their next barrier paired with the others'
 * one after. */
UNIT_TEST(world_reform_barrier_fails_when_its_node_degrades)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_reform(w);
	coord_formed(w);
	barrier_from_node(w, 1, 1, 200);
	state_from_node(w, 1, 2, 200);
	state_from_node(w, 0, 3, 200);
	scd_world_barrier_enter(w, 1); /* the coordinator's node enters it */
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE,
		  "barrier 1 never ended on node 1");
	CHECK_MSG(m->barrier_done->seq == 1 && m->barrier_done->status == SC_ERR_ABORTED,
		  "barrier %d ended with status %d without node 1's trainers in it",
		  (int)m->barrier_done->seq, (int)m->barrier_done->status);
	CHECK_MSG(strstr(m->barrier_done->error, "node 1's trainer exited"), "%s",
		  m->barrier_done->error);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	fixture_free(&f);
}

/* ---- joins on the coordinator --------------------------------------------------------- */

/* Node 1's NodeJoin (its last trainer: rank 1), numbered seq in world epoch, sent when it
 * had read the coordinator's messages up to ack. */
static void join_acked_from_node(scd_world_t *w, uint64_t seq, uint64_t epoch, uint64_t ack)
{
	Sparsecomm__NodeJoin nj = SPARSECOMM__NODE_JOIN__INIT;
	nj.rank = 1;
	nj.last_rank = 1;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_NODE_JOIN;
	m.node_join = &nj;
	m.ack = ack;
	from_node(w, &m, seq, epoch);
}

static void join_from_node(scd_world_t *w, uint64_t seq, uint64_t epoch)
{
	join_acked_from_node(w, seq, epoch, 0);
}

/* The coordinator's node joined (its last trainer: rank 0). */
static void coord_node_joined(scd_world_t *w)
{
	Sparsecomm__NodeJoin own = SPARSECOMM__NODE_JOIN__INIT;
	own.rank = 0;
	own.last_rank = 0;
	scd_join_on_node(w, 0, &own, 0);
}

/* A join outlives a re-form. Node 1's NodeJoin of the world left, read while the world
 * re-forms (twice: it came both ways), is handled once the world has formed, and once:
 * handled at once, the join's end went to no node but the coordinator's (node 1 had not
 * joined the new world), and the copy counted node 1 as joined in the next join, whose
 * tensors it would then fill with zeros. */
UNIT_TEST(world_reform_old_join_ends_on_every_node_once)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_node_joined(w); /* node 0 joined already */
	CHECK_TRUE(w->join_count == 1);
	coord_reform(w);
	join_from_node(w, 1, 100);
	join_from_node(w, 1, 100);
	coord_formed(w);
	scd_world_reform_replay(w);
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE,
		  "the join's end did not reach node 1");
	CHECK_TRUE(m->join_done->status == SC_OK && m->join_done->last_rank == 1);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_MSG(w->join_count == 0 && !w->peers[1].join_seq,
		  "node 1 counted as joined in the next join (%d joined)", (int)w->join_count);
	fixture_free(&f);
}

/* Node 1's Join as its daemon sends it while the world re-forms (world.c, send_join),
 * after it sent the coordinator `sent` messages in the world left (id 100). */
static Sparsecomm__PeerMsg *node_join_sent(uint64_t sent)
{
	fixture_t nf;
	unit_mesh_t mesh;
	fixture_make(&nf, 1);
	nf.d.world->peers[0].tx_seq = sent;
	node_reforms(&nf, &mesh);
	scd_world_t *w = nf.d.world;
	memcpy(w->peers[1].blob, w->endpoint->blob, w->endpoint->blob_len);
	w->peers[1].blob_len = w->endpoint->blob_len;
	w->served = 1;
	scd_world_join_tick(w);
	uint8_t buf[1 << 16];
	int n = zmq_recv(nf.peer, buf, sizeof(buf), ZMQ_DONTWAIT);
	CHECK_MSG(n > 0, "node 1 sent no Join");
	Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, (size_t)n, buf);
	CHECK_TRUE(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN);
	unit_mesh_release(&mesh);
	fixture_free(&nf);
	return m;
}

/* Node 1's trainers joined; the world re-forms, and node 1's daemon starts again before the
 * coordinator finds the old one lost: the new daemon's Join (another routing id) comes
 * while the world re-forms. The old daemon is gone, so the join its trainers were in ends
 * on every rank once the world has formed, as when a node is found lost. Kept, the new
 * daemon's node was joined: its share zeros on every other rank while its new trainers
 * submitted steps of their own, which then paired with the others' next ones. */
/* The coordinator (fixture_make) with its data-plane endpoint and its peer pipe: a world
 * can form. */
static void coord_make(fixture_t *f, unit_mesh_t *mesh)
{
	fixture_make(f, 0);
	scd_world_t *w = f->d.world;
	CHECK_EQ_INT(unit_mesh_prepare(mesh, "tcp", 2, 300), SC_OK);
	w->tops = mesh->ep[0]->ops;
	w->endpoint = mesh->ep[0];
	mesh->ep[0] = NULL;
	memcpy(w->peers[0].blob, w->endpoint->blob, w->endpoint->blob_len);
	w->peers[0].blob_len = w->endpoint->blob_len;
	uint8_t key[32] = {0};
	w->pipe = scd_pipe_new(&f->loop, 0, 2, key, 0, pipe_msg, w);
	CHECK_TRUE(w->pipe != NULL);
}

UNIT_TEST(world_reform_another_daemon_of_a_joined_node_ends_the_join)
{
	Sparsecomm__PeerMsg *join = node_join_sent(0);
	fixture_t f;
	unit_mesh_t mesh;
	coord_make(&f, &mesh);
	scd_world_t *w = f.d.world;
	join_from_node(w, 1, 100); /* node 1's trainers joined; node 0's have not */
	CHECK_TRUE(w->join_count == 1 && w->peers[1].join_seq);
	coord_reform(w);
	scd_world_handle(w, -1, (const uint8_t *)"m1", 2, join); /* the new daemon */
	sparsecomm__peer_msg__free_unpacked(join, NULL);
	CHECK_MSG(w->formed, "the world did not form with node 1's new daemon");
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE,
		  "the join of node 1's old daemon did not end (node 1 joined: %d)",
		  (int)w->peers[1].join_seq);
	CHECK_TRUE(m->join_done->status == SC_ERR_ABORTED);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_MSG(w->join_count == 0 && !w->peers[1].join_seq,
		  "node 1's new daemon counted as joined (%d joined)", (int)w->join_count);
	CHECK_TRUE(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED &&
		   !w->peers[1].degraded);
	unit_mesh_release(&mesh);
	fixture_free(&f);
}

/* Node 1 reported a failed step of 'u' (its message 1 of the world left) and then its
 * state (2); the world re-forms, the node sends both again as its pipe closes, then its
 * Join, and the coordinator channel resets after 1 went: only 2 and the Join come. The
 * Join says node 1 sent 2 in the world left: it waits for 1, which comes again at the
 * node's next heartbeat, with its Join after it; the world forms then, and the report is
 * read. Let in at once, the world formed without it, and node 1 then discarded its copy:
 * the step went unanswered (its trainers' next step paired with the others' failed one). */
UNIT_TEST(world_reform_join_waits_for_the_old_world_messages_lost)
{
	Sparsecomm__PeerMsg *join = node_join_sent(2);
	CHECK_MSG(join->join->old_world == 100 && join->join->old_last_seq == 2,
		  "node 1's Join says world %llu, message %llu",
		  (unsigned long long)join->join->old_world,
		  (unsigned long long)join->join->old_last_seq);
	fixture_t f;
	unit_mesh_t mesh;
	coord_make(&f, &mesh);
	scd_world_t *w = f.d.world;
	w->peers[1].degraded = 1; /* a step of 'u' failed while node 1 was degraded */
	late_record(w, "u", 0, 1);
	coord_reform(w);
	state_from_node(w, 1, 2, 100);
	scd_world_handle(w, 1, w->peers[1].ident, w->peers[1].ident_len, join);
	CHECK_MSG(!w->formed, "the world formed without node 1's message 1 of the world left");
	CHECK_TRUE(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED);
	ready_from_node(w, NULL, "u", 1, 100); /* sent again at its heartbeat */
	ready_from_node(w, NULL, "u", 1, 100); /* and again: once */
	state_from_node(w, 1, 2, 100);
	scd_world_handle(w, 1, w->peers[1].ident, w->peers[1].ident_len, join);
	CHECK_MSG(w->formed, "the world did not form once node 1's messages came");
	CHECK_MSG(late_find(w, 1, "u") == NULL,
		  "node 1's report of the failed step went unread");
	sparsecomm__peer_msg__free_unpacked(join, NULL);
	unit_mesh_release(&mesh);
	fixture_free(&f);
}

/* ... and when message 1 has not come within peer_timeout_ms of the first Join that
 * lacked it (the node's copy was dropped over its bound, or the channel lost it again
 * and again), node 1 is given up, naming the numbers, as a gap in a formed world's stream
 * gives its sender up; the world does not form without it. */
UNIT_TEST(world_reform_join_old_world_gap_gives_the_node_up)
{
	Sparsecomm__PeerMsg *join = node_join_sent(2);
	fixture_t f;
	unit_mesh_t mesh;
	coord_make(&f, &mesh);
	scd_world_t *w = f.d.world;
	coord_reform(w);
	state_from_node(w, 1, 2, 100);
	scd_world_handle(w, 1, w->peers[1].ident, w->peers[1].ident_len, join);
	CHECK_TRUE(!w->formed && w->peers[1].reform_gap_ms);
	w->peers[1].reform_gap_ms =
	    scd_now_ms() - (uint64_t)scd_cfg_int(&f.d.cfg, SCD_CFG_peer_timeout_ms) - 1;
	scd_world_handle(w, 1, w->peers[1].ident, w->peers[1].ident_len, join);
	CHECK_MSG(w->peers[1].state == SPARSECOMM__PEER_STATE__PEER_LOST,
		  "node 1 kept (state %d, world formed %d)", (int)w->peers[1].state, w->formed);
	CHECK_MSG(strstr(w->peers[1].gone_reason, "messages 1 to 2"), "reason: %s",
		  w->peers[1].gone_reason);
	CHECK_TRUE(!w->formed && w->reform_held == NULL && w->n_joined == 1);
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m == NULL, "the coordinator sent message %d", m ? (int)m->body_case : 0);
	sparsecomm__peer_msg__free_unpacked(join, NULL);
	unit_mesh_release(&mesh);
	fixture_free(&f);
}

/* Node 1's and node 0's trainers joined in world 100, whose end went to node 1, and the
 * world re-forms; node 1's daemon joins again naming old_world as the world it leaves.
 * What the coordinator sends node 1 once the world has formed (NULL: nothing). */
static Sparsecomm__PeerMsg *join_end_after_rejoin(uint64_t old_world)
{
	Sparsecomm__PeerMsg *join = node_join_sent(0);
	join->join->old_world = old_world;
	fixture_t f;
	unit_mesh_t mesh;
	coord_make(&f, &mesh);
	scd_world_t *w = f.d.world;
	join_from_node(w, 1, 100);
	coord_node_joined(w);
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_TRUE(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	coord_reform(w);
	scd_world_handle(w, 1, w->peers[1].ident, w->peers[1].ident_len, join);
	sparsecomm__peer_msg__free_unpacked(join, NULL);
	CHECK_MSG(w->formed, "the world did not form with node 1");
	m = next_sent(&f);
	Sparsecomm__PeerMsg *more = next_sent(&f);
	CHECK_MSG(more == NULL, "message %d after %d", more ? (int)more->body_case : 0,
		  m ? (int)m->body_case : 0);
	unit_mesh_release(&mesh);
	fixture_free(&f);
	return m;
}

/* The coordinator channel lost world 100's WorldInfo to node 1 (a reset), and the world
 * re-formed before node 1 held it: node 1 discarded the end of its join, numbered in world
 * 100, and its Join names the world before (50). The end goes to it again once the world
 * has formed, after the WorldInfo; sent once, its trainers waited in their join for good,
 * the others' ended. A node that held world 100 (its Join names it) read the end: it is
 * not sent again, where it would end the node's next join. */
UNIT_TEST(world_reform_join_end_lost_with_a_world_sent_again)
{
	Sparsecomm__PeerMsg *m = join_end_after_rejoin(50);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE,
		  "node 1 never heard the end of its join (message %d)",
		  m ? (int)m->body_case : 0);
	CHECK_TRUE(m->join_done->status == SC_OK && m->join_done->last_rank == 0);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	m = join_end_after_rejoin(100);
	CHECK_MSG(m == NULL, "the end went again to node 1, which held the world it was in");
}

/* Node 1's data-plane failure of the world left, read while the world re-forms, is of a
 * mesh that is gone: once the world has formed it re-forms nothing. */
UNIT_TEST(world_reform_old_mesh_failure_not_counted)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_reform(w);
	Sparsecomm__MeshFailed mf = SPARSECOMM__MESH_FAILED__INIT;
	mf.rank = 1;
	mf.reason = "rank 1: tcp mesh: rank 0: connection reset";
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_MESH_FAILED;
	m.mesh_failed = &mf;
	from_node(w, &m, 1, 100);
	coord_formed(w);
	scd_world_reform_replay(w);
	CHECK_MSG(w->mesh_reform_ms == 0 && w->formed,
		  "the new world re-forms for a failure of the world left");
	fixture_free(&f);
}

/* Node 1 is lost while the world re-forms: the joins in progress end. */
static void node1_lost(scd_world_t *w)
{
	snprintf(w->peers[1].degraded_reason, sizeof(w->peers[1].degraded_reason),
		 "node 1 was lost");
	scd_join_on_degraded(w, 1);
}

/* The new world has formed: the joins' end goes to node 1, first (returned). */
static Sparsecomm__PeerMsg *formed_join_done(fixture_t *f)
{
	coord_formed(f->d.world);
	scd_world_coord_formed(f->d.world);
	Sparsecomm__PeerMsg *m = next_sent(f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE,
		  "the joins' end never reached node 1");
	CHECK_TRUE(m->join_done->status == SC_ERR_ABORTED);
	return m;
}

/* A node lost while the world re-forms ends the joins in progress: the end goes to every
 * node once the world has formed, with the joins of the world left held meanwhile
 * dropped (they are of the joins it ended), also one sent again after the end was
 * decided (the coordinator acknowledges nothing while it re-forms). Sent at once, the
 * end reached only the nodes joined again, and node 1's trainers waited in their joins;
 * counted after the end, the copy made node 1 joined in the next join (its share filled
 * with zeros on every other rank). */
UNIT_TEST(world_reform_join_ended_meanwhile_reaches_every_node)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_node_joined(w); /* node 0 joined already */
	coord_reform(w);
	join_from_node(w, 1, 100); /* node 1's join of the world left, held */
	node1_lost(w);
	join_from_node(w, 1, 100); /* sent again: held again */
	CHECK_TRUE(next_sent(&f) == NULL);
	Sparsecomm__PeerMsg *m = formed_join_done(&f);
	CHECK_MSG(strstr(m->join_done->error, "node 1 was lost"), "%s", m->join_done->error);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	m = next_sent(&f);
	CHECK_MSG(m == NULL, "message %d after the joins' end", m ? (int)m->body_case : 0);
	CHECK_MSG(w->join_count == 0 && !w->peers[1].join_seq,
		  "a join of the world left counted in the next join (%d joined)",
		  (int)w->join_count);
	fixture_free(&f);
}

/* The joins ended while the world re-forms end, once it has formed, the joins the nodes'
 * trainers entered meanwhile too (their JoinDone ends every join of a node). The
 * coordinator's own node held its NodeJoin: sent after the end it went to itself, and
 * counted the node as joined in the next join. */
UNIT_TEST(world_reform_own_join_held_ends_with_the_joins)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	join_from_node(w, 1, 100); /* node 1 joined */
	CHECK_TRUE(w->join_count == 1);
	coord_reform(w);
	scd_world_node_join(w, 0); /* node 0's trainers join meanwhile: held */
	node1_lost(w);
	Sparsecomm__PeerMsg *m = formed_join_done(&f);
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	CHECK_MSG(w->join_count == 0 && !w->peers[0].join_seq,
		  "node 0's join, ended with the joins, counted in the next join");
	CHECK_TRUE(w->n_held_states == 0);
	fixture_free(&f);
}

/* ... and a node's NodeJoin sent before it read that end (it acknowledges less than the
 * JoinDone's number: held, it went right after the WorldInfo) is of a join the end
 * ended: not counted. One sent after it is. */
UNIT_TEST(world_reform_join_sent_before_its_end_read_not_counted)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_node_joined(w); /* node 0 joined */
	coord_reform(w);
	node1_lost(w);
	Sparsecomm__PeerMsg *m = formed_join_done(&f);
	uint64_t end_seq = m->seq;
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	join_acked_from_node(w, 1, 200, end_seq - 1); /* node 1 had not read the end */
	CHECK_MSG(w->join_count == 0 && !w->peers[1].join_seq,
		  "node 1's join, ended by the JoinDone it had not read, counted in the next "
		  "join");
	join_acked_from_node(w, 2, 200, end_seq); /* its trainers join again, after it */
	CHECK_MSG(w->join_count == 1 && w->peers[1].join_seq,
		  "node 1's join after the end not counted");
	fixture_free(&f);
}

/* ... also when the end came in the world left: node 1's trainer left and the end went
 * to node 1 at once; node 1's NodeJoin sent before it read that end was still unread
 * when the world re-formed, and came again while it re-formed (held). The world's
 * numbers are reset when the new one forms, so judged when handled it was counted, and
 * node 1, training on, was joined in the next join (its share zeros on the others). */
UNIT_TEST(world_reform_join_sent_before_an_old_end_not_counted)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_node_joined(w); /* node 0 joined */
	scd_join_on_left(w, 1, "node 1's trainer left without joining");
	Sparsecomm__PeerMsg *m = next_sent(&f);
	CHECK_MSG(m && m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE,
		  "the joins' end never reached node 1");
	uint64_t end_seq = m->seq;
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	coord_reform(w);
	join_acked_from_node(w, 1, 100, end_seq - 1); /* of the world left, held */
	coord_formed(w);
	scd_world_coord_formed(w);
	CHECK_MSG(w->join_count == 0 && !w->peers[1].join_seq,
		  "node 1's join, ended by the JoinDone it had not read, counted in the new "
		  "world");
	fixture_free(&f);
}

/* ---- configuration on the coordinator ------------------------------------------------- */

/* A runtime change proposed while the world re-forms (node 1's, unnumbered) is applied on
 * every node once it has formed. Applied at once, it reached only the nodes joined again
 * (here the coordinator alone), and the others kept the old value. */
UNIT_TEST(world_reform_config_change_reaches_every_node)
{
	fixture_t f;
	fixture_make(&f, 0);
	scd_world_t *w = f.d.world;
	coord_reform(w);
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	cs.key = "stall_timeout_ms";
	cs.value = "4321";
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE;
	m.config_propose = &cs;
	from_node(w, &m, 0, 0);
	CHECK_MSG(scd_cfg_int(&f.d.cfg, SCD_CFG_stall_timeout_ms) != 4321,
		  "applied on the coordinator while node 1 had not joined the new world");
	coord_formed(w);
	scd_world_coord_formed(w);
	Sparsecomm__PeerMsg *o = next_sent(&f);
	CHECK_MSG(o && o->body_case == SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY,
		  "the change never reached node 1");
	CHECK_TRUE(!strcmp(o->config_apply->key, "stall_timeout_ms") &&
		   !strcmp(o->config_apply->value, "4321"));
	sparsecomm__peer_msg__free_unpacked(o, NULL);
	CHECK_EQ_INT((int)scd_cfg_int(&f.d.cfg, SCD_CFG_stall_timeout_ms), 4321);
	fixture_free(&f);
}

/* The announcements not sent yet when the world re-forms go with the world left, grouped
 * ones' group names too: a re-form leaked each. Measured as the bytes the heap holds
 * across many re-forms with one such announcement queued each time. */
UNIT_TEST(world_reform_frees_unsent_grouped_announcements)
{
	fixture_t f;
	fixture_make(&f, 1);
	scd_world_t *w = f.d.world;
	enum { ROUNDS = 2000, NAME_BYTES = 200 };
	char name[NAME_BYTES + 1];
	memset(name, 'g', NAME_BYTES);
	name[NAME_BYTES] = 0;
	size_t before = 0;
	for (int i = 0; i <= ROUNDS; i++) {
		if (i == 1) /* after the first: what a re-form keeps is made */
			before = mallinfo2().uordblks;
		w->out = calloc(1, sizeof(*w->out));
		CHECK_TRUE(w->out != NULL);
		w->n_out = w->cap_out = 1;
		w->out[0].name = strdup(name);
		w->out[0].gname = strdup(name);
		w->out[0].group = 1;
		w->out[0].group_size = 2;
		scd_neg_reset(w);
	}
	size_t after = mallinfo2().uordblks;
	CHECK_MSG(after < before + (size_t)ROUNDS * NAME_BYTES / 2,
		  "%zu bytes more held after %d re-forms with a grouped announcement unsent",
		  after - before, ROUNDS);
	fixture_free(&f);
}

/* A trainer that leaves while its operation runs leaves its registration to the engine
 * until the job comes back (ctl/tensor.c, zombie); a re-form fails that job, and its
 * trainer's successor registers the name again. The re-form quiesced the engine (no job
 * uses the memory), so the registration goes with the failure; it stayed for good, and
 * the successor was refused BUSY. Where a job may still use the memory (not idle), it
 * stays, mapped. */
UNIT_TEST(world_reform_frees_a_registration_its_trainer_left_mid_step)
{
	fixture_t f;
	fixture_make(&f, 1);
	scd_tensors_t *t = scd_ctl_tensors(f.d.ctl);
	scd_tensor_opts_t opts = {0};
	char err[512] = "";
	for (int idle = 0; idle < 2; idle++) {
		const char *name = idle ? "g.idle" : "g.busy";
		scd_reg_t *r = NULL;
		CHECK_EQ_INT(scd_tensors_register(t, NULL, 0, name, SC_FLOAT32, 16, &opts,
						  1 << 20, &r, err, sizeof(err)),
			     SC_OK);
		int live = (int)scd_tensors_live(t);
		scd_ntensor_t *nt = r->nt;
		nt->state = SCD_NT_RUNNING; /* its job in the engine */
		nt->submitted = 1;
		r->handle = 7;
		scd_tensors_release(t, r); /* its trainer left */
		CHECK_MSG((int)scd_tensors_live(t) == live, "released while its job ran");
		forgotten = 0;
		scd_ctl_fail_all(f.d.ctl, SC_ERR_PEER, "the world re-forms", idle);
		CHECK_EQ_INT(forgotten, idle);
		CHECK_MSG((int)scd_tensors_live(t) == live - idle,
			  "idle %d: %d registrations live after the failure, %d before", idle,
			  scd_tensors_live(t), live);
		sc_status_t st = scd_tensors_register(t, NULL, 0, name, SC_FLOAT32, 16, &opts,
						      1 << 20, &r, err, sizeof(err));
		CHECK_MSG(idle ? st == SC_OK : st == SC_ERR_BUSY,
			  "idle %d: the successor's registration: %s (%s)", idle,
			  sc_status_name(st), err);
	}
	fixture_free(&f);
}
