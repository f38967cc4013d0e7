/*
 * world.h: the daemons of a job and what they agree on.
 *
 * Formation: every rank first prepares its data-plane endpoint with the backend the
 * `transport` key selects (transport/transport.h), which yields an opaque bootstrap blob.
 * Rank 0 (the coordinator) binds a ZeroMQ ROUTER on the coordinator address; every other
 * rank connects a DEALER and sends Join (protocol version, rank, world size, trainers per
 * node, the transport's name and blob). When every rank has joined, the coordinator sends
 * WorldInfo (the transport's name, every rank's blob and a random world id), and on every
 * rank the engine's mesh job builds the transport from them. A Join with another protocol
 * version, world size, trainer count or transport, a malformed blob, or a duplicate rank
 * (not a node given up: see Liveness), is refused with a reason naming the rank and both
 * values; a rank missing after join_timeout_ms fails formation with the list of the ranks that
 * never came. The world never looks inside a blob except through the backend's describe
 * (status, logs).
 *
 * Liveness (liveness.c): heartbeats on the same channel find a node that died or froze
 * within peer_timeout_ms, and a daemon that stops says so (Leave); every operation that
 * needs a node gone then fails at once on every rank, naming it. A daemon started again
 * with a given-up node's rank is accepted: the coordinator has every node re-form (Reform,
 * then Join and WorldInfo again) and the engines rebuild the mesh.
 *
 * Negotiation (Horovod's, with its response cache): when every local trainer has submitted
 * a tensor, the node announces it to the coordinator in a ReadyList: the full request the
 * first time, afterwards only its cache id, so the steady state is one small message per
 * cycle each way. The coordinator collects announcements by name; when every rank has
 * announced a name it checks that dtype, element count and operation agree (otherwise an
 * error response names the tensor and the ranks that disagree) and appends it to the plan,
 * fusing consecutive small tensors up to fusion_threshold_bytes. Every rank executes the
 * plan's responses in order, so their collectives match.
 */
#ifndef SCD_WORLD_WORLD_H
#define SCD_WORLD_WORLD_H

#include "ctl/tensor.h"
#include "daemon.h"
#include "sparsecomm.pb-c.h"

struct scd_arena;
struct scd_job;

/* What the world asks of the process, which main.c wires (as it wires ctl's upcalls, ctl.h):
 * world/ calls nothing of main.c. Both are called on the loop thread with the daemon. */
typedef struct scd_world_hooks {
	/* the world has formed and the data plane is up, the first time: serve trainers */
	void (*ready)(scd_daemon_t *d);
	/* stop the daemon at the next loop turn with exit_code (1: an error; liveness.c's
	 * SCD_EXIT_COORDINATOR_GONE); a second call changes nothing */
	void (*stop)(scd_daemon_t *d, int exit_code);
} scd_world_hooks_t;

/* hooks must outlive the world. */
sc_status_t scd_world_create(scd_daemon_t *d, const scd_world_hooks_t *hooks,
			     scd_world_t **w_p);
/* Prepares the data plane's endpoint, opens the coordinator socket, and joins. A failure
 * (an unknown or unavailable transport included) is logged here and returned. */
sc_status_t scd_world_start(scd_world_t *w);
void scd_world_destroy(scd_world_t *w);
/* The daemon stops: tells the coordinator (or, on the coordinator, every node) why, so that
 * the others fail what needs it at once (world/liveness.c). */
void scd_world_leave(scd_world_t *w, const char *reason);
void scd_world_drain(scd_world_t *w);
void scd_world_tick(scd_world_t *w);

/* The node tensor is ready on this node (every local trainer submitted it). */
void scd_world_announce(scd_world_t *w, scd_ntensor_t *nt);
/* The tensor can never complete on this node (its trainers disagree on it): every rank's
 * operation on it fails with status and reason until this node clears it (status SC_OK,
 * sent when the tensor is released). */
/* This node failed its step of name before announcing it (a local trainer stalled or was
 * refused): the step fails on every rank with status and reason (world/late.c). */
void scd_world_fail_step(scd_world_t *w, const char *name, sc_status_t status,
			 const char *reason);
void scd_world_abandon(scd_world_t *w, const char *name, sc_status_t status,
		       const char *reason);
/* The tensor is gone from this node: frees the engine's state for buffers holding it. */
void scd_world_forget(scd_world_t *w, const char *name, uint64_t presel_key);
/* This node lost a trainer (degraded) or has a full set again. While the world re-forms,
 * this and the four below are held and go once it has formed, each in its place among
 * the announcements and abandons the node queued (held.c). */
void scd_world_node_state(scd_world_t *w, int degraded, const char *reason);
/* Every local trainer entered this node's barrier number seq (barrier.c); how it ends on
 * every rank comes back to scd_ctl_barrier_done. */
void scd_world_barrier_enter(scd_world_t *w, uint64_t seq);
/* Every local trainer joined (uneven inputs); last_rank is the last of them. */
void scd_world_node_join(scd_world_t *w, int last_rank);
/* A local trainer ended its session without joining (reason names it): the joins in
 * progress can never complete, and fail on every rank (join.c). */
void scd_world_node_left(scd_world_t *w, const char *reason);
/* The node's last trainer ended its session cleanly: the coordinator forgets the late
 * steps it kept for the node's trainers (world/late.c), as the next ones start afresh. */
void scd_world_node_idle(scd_world_t *w);
/* Hands back what the engine has finished, now (engine.h, scd_engine_collect). */
void scd_world_collect(scd_world_t *w);
/* Asks the coordinator what is pending; the answer goes to scd_ctl_reply_pending. */
void scd_world_pending(scd_world_t *w, uint64_t query_id);
/* Proposes a runtime configuration change, applied on every node. */
void scd_world_config_propose(scd_world_t *w, const char *key, const char *value);
/* Fills the fusion plan of a stats reply: the mode, the plan's version and its buffers
 * with this node's last measured times. */
void scd_world_fusion_stats(scd_world_t *w, Sparsecomm__StatsReply *r, struct scd_arena *a);
/* Fills the peers of a status reply. */
void scd_world_status(scd_world_t *w, Sparsecomm__StatusReply *r, struct scd_arena *a);
/* The engine's completion callback (on the loop thread): the mesh job (the daemon is
 * ready, or stops), allreduce jobs (to negotiation), forget jobs. */
void scd_world_job_done(scd_daemon_t *d, struct scd_job *job);

#endif
