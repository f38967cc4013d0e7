/*
 * world_int.h: state shared by world.c (formation, the mesh job and its completion, peer
 * messages, status, configuration, the daemon's lifecycle calls) and negotiate.c
 * (announcements, the coordinator's table, plans and allreduce jobs). Not for other
 * subsystems: they use world.h.
 */
#ifndef SCD_WORLD_WORLD_INT_H
#define SCD_WORLD_WORLD_INT_H

#include "transport/transport.h"
#include "world/agree.h"
#include "world/curve.h"
#include "world/fusion_plan.h"
#include "world/host.h"
#include "world/world.h"

/* A data turn's outcome on one node: not handed back yet, handed back (kept or failed
 * alike on every rank), or discarded (its step announced again). */
enum { SCD_FAST_DONE = 0, SCD_FAST_UNDECIDED = 1, SCD_FAST_DISCARDED = 2 };

/* A node's fast turns as the world it leaves re-forms (fast.c, "re-form rule"): in world
 * (its id; 0: no record), the scd_fast_state_t last_* fields, and the buffer's name. */
typedef struct scd_fast_snap {
	uint64_t world, epoch, turn, leave;
	int state;
	char *name;
} scd_fast_snap_t;

typedef struct scd_peer {
	int joined;
	int degraded;
	int barrier_in; /* entered the barrier in progress (coordinator) */
	/* every trainer of the node joined (coordinator, join.c): when (the coordinator's
	 * count of joined nodes, 0: not joined) and the last of them */
	uint64_t join_seq;
	int join_last;
	/* its Join's record of its fast turns in the world left (coordinator, fast.c) */
	scd_fast_snap_t fast_rep;
	/* the number of the last JoinDone sent to it (coordinator): a NodeJoin that
	 * acknowledges less was sent before the node read that end, which ends the join */
	uint64_t join_end_seq;
	/* the daemon joined again while the world re-formed without ever holding the world
	 * left, so it read none of it: the end of its joins sent in that world is sent it
	 * again once the world has formed (coordinator, join.c: scd_join_rejoined) */
	int join_end_owed;
	uint64_t degraded_seq; /* when it became degraded (the coordinator's count) */
	char degraded_reason[256];
	uint8_t ident[256];
	size_t ident_len;
	/* the rank's transport bootstrap blob, from its Join (coordinator) or WorldInfo */
	uint8_t blob[SCD_TRANSPORT_BLOB_MAX];
	size_t blob_len;
	scd_host_t host; /* its host and cores, from its Join (coordinator) or WorldInfo */
	/* liveness.c: SPARSECOMM__PEER_STATE__*, when it was last heard (scd_now_ms; on a node
	 * other than the coordinator, as the coordinator's heartbeats report), and why it
	 * left or was lost */
	Sparsecomm__PeerState state;
	uint64_t heard_ms;
	char gone_reason[320];
	/* the numbered stream of a formed world's messages with this peer (stream.c; on a
	 * node, peers[0] only): the last number sent, the next to deliver, the messages
	 * that came ahead of it, in order, with when the first of them came, and the
	 * messages sent and not yet acknowledged, oldest first */
	uint64_t tx_seq, rx_next;
	struct scd_held *held;
	uint64_t held_since_ms;
	int n_held;
	struct scd_sent *unacked, *unacked_tail;
	size_t unacked_bytes;
	int n_unacked;
	/* the coordinator: the node has shown that it holds this world's WorldInfo (a
	 * message numbered in the world came from it); until then WorldInfo goes again at
	 * each heartbeat (scd_world_info_tick) */
	int world_known;
	/* the coordinator: the node reported the data-plane failure being acted on (it is
	 * alive after it: scd_world_mesh_check) */
	int mesh_reported;
	/* the coordinator: how many of the node's messages of the world left are held while
	 * the world re-forms (stream.c, reform_hold), and the last of them in number order */
	int n_reform_held;
	struct scd_held *reform_tail;
	/* the coordinator: when the node's daemon, joining again while the world re-forms,
	 * was first found to have sent messages of the world left that have not come (0:
	 * none missing; stream.c, scd_world_reform_unread) */
	uint64_t reform_gap_ms;
} scd_peer_t;

/* A name announced by some ranks (coordinator only), in arrival order. */
#define SCD_HAVE_OUTSIDE 4
typedef struct scd_centry {
	char *name;
	uint64_t first_ms;
	int count;
	/* 1: announced, 2: a joined node stands in (join.c), 3: failed on the node before it
	 * announced it (late.c; the entry then fails with failed, failed_status),
	 * SCD_HAVE_OUTSIDE: a node without a member of the tensor's process set, which never
	 * announces it (its row holds the first announcement's values, for comparisons) */
	uint8_t *have;
	uint32_t pset; /* the tensor's process set (0: every node) */
	int outside_filled;
	char *failed;
	int failed_status;
	int detached; /* out of the lookup by name (negotiate.c, centry_detach) */
	uint32_t *dtype, *op;
	uint64_t *numel;
	scd_tsig_t *sig;
	int solo;
	uint32_t fuse_key; /* the first announcement's; ranks that differ make it solo */
	/* when it became ready on every rank: the latest of the ranks' ready times (when an
	 * announcement came, less how long it waited on its node: outhold.c), set when count
	 * reached world size; latest_ms: the latest so far */
	uint64_t ready_ms, latest_ms;
	/* a member of a grouped operation (group.c): by rank, the group's number and size
	 * (NULL until some rank tags it); what the last pass decided (SCD_GROUP_*), the pass
	 * that collected it, and the first member of its group when it goes out */
	uint64_t *gid;
	uint32_t *gsize;
	int gstate;
	uint64_t gmark;
	int gcount;	     /* count as the last pass saw it */
	uint64_t gchange_ms; /* when a pass saw count change */
	struct scd_centry *gleader;
	struct scd_centry *next, *hnext;
} scd_centry_t;

typedef struct scd_cache_ent {
	char *name; /* NULL: a free slot of the table */
	uint32_t id;
	uint32_t dtype, op;
	uint64_t numel;
	int solo;
	uint32_t fuse_key;
	scd_tsig_t sig; /* what every rank announced (agree.h) */
	uint32_t pset;	/* its process set (0: every node) */
	/* this node's last measured times of the tensor (stats): compression plus fusion,
	 * and its buffer's communication */
	double last_tcp_s, last_tcm_s;
	int listed; /* in its name's ids (a form past a name's 64 is not: cache.c) */
	/* the coordinator's plan cycle that last planned it, or found its name pending: the
	 * least recently used go first past cache_max_entries */
	uint64_t used_cycle;
	/* its buffer in the fusion plan last received (outhold.c), valid in that version */
	int fbuf;
	uint64_t fbuf_version;
} scd_cache_ent_t;

/* The longest wait on its node an announcement reports (ReadyList.cached_held_us). */
#define SCD_HELD_US_MAX 60000000u

/* An announcement waiting for the next flush. */
typedef struct scd_outreq {
	int cached;
	uint32_t id;
	char *gname; /* a group member's name (GroupTag), NULL when not grouped */
	uint64_t group;
	uint32_t group_size;
	char *name;
	uint32_t dtype, op;
	uint64_t numel;
	int solo;
	uint32_t fuse_key;
	scd_tsig_t sig;
	double queued_s; /* when queued (scd_now_s): how long it waited goes with it */
	int kept;	 /* a flush kept it back for its buffer (outhold.c) */
} scd_outreq_t;

/* A name some rank cannot complete (coordinator), or an abandonment to send (every rank). */
typedef struct scd_poison {
	char *name;
	int rank;
	int step;     /* an abandon to send: one failed step only (Abandon.step) */
	int owed;     /* a late record (late.c): the failed steps the node still owes */
	int answered; /* and those failed while it was degraded, which its reports take */
	int status;
	char *reason;
	struct scd_poison *next;
} scd_poison_t;

#define SCD_WORLD_BUCKETS 1024

/* Messages held per peer, at most: ahead of their turn in a formed world's stream (a
 * channel's lead over the other is a few messages, those sent while a pipe came up or went
 * down), and of the world left while the world re-forms (stream.c). */
#define SCD_HELD_MAX 65536

/* A message that came ahead of its turn (stream.c). */
typedef struct scd_held {
	Sparsecomm__PeerMsg *m;
	int from; /* its sender (the messages held while the world re-forms) */
	struct scd_held *next;
} scd_held_t;

/* Fast mode (fast.c; docs/design.md "Fast mode"): a cycle has at most SCD_FAST_CYCLE
 * buffers, and the coordinator looks back SCD_FAST_HIST plans for one. */
#define SCD_FAST_CYCLE 8
#define SCD_FAST_HIST  (2 * SCD_FAST_CYCLE)
/* a fast buffer's name and its NUL: a trainer's name is 1 to 255 bytes (ctl/tensor.c), and
 * a buffer of a process set, whose qualified name is longer, never runs as fast turns */
#define SCD_FAST_NAME_BYTES 256
typedef struct scd_fast_state {
	/* the coordinator: the epoch in force (0: none), the epochs begun in this world, and
	 * the cache ids of its last plans that each planned one buffer alone, in a row, oldest
	 * first (run of them, at most SCD_FAST_HIST) */
	uint64_t coord_epoch, epochs;
	uint32_t hist[SCD_FAST_HIST];
	int run;
	/* the coordinator's backoff (fast.c, SCD_FAST_LONG): plans to let pass before it
	 * begins another epoch, and the wait after the next short epoch */
	uint32_t hold, hold_next;
	/* every node: the epoch it is in (0: none), its cycle of n buffers' cache ids (turn
	 * t carries ids[(t - 1) % n]) and digest, the last turn it submitted, the turn open
	 * (submitted, not handed back; 0: none) */
	uint64_t epoch;
	uint32_t ids[SCD_FAST_CYCLE];
	size_t n;
	uint64_t digest, turn, open_turn;
	uint64_t seen; /* the last epoch begun in this world (a plan's must come after it) */
	uint64_t left; /* the epoch this node left, to tell the coordinator (0: none) */
	/* what the node's turns did: since the last report, and in all (stats) */
	uint64_t kept, discarded, total_kept, total_discarded, total_epochs;
	uint64_t epoch_kept; /* turns kept in the epoch it is in, or was in last */
	/* the last turn of that epoch handed back here (0: none): kept, discarded, failed
	 * alike. Every node submitted it (a turn runs only with every rank's words, and one
	 * discarded unrun follows a turn discarded on every rank), so no node still waits
	 * for the others in it. */
	uint64_t done_turn;
	uv_timer_t timer; /* the open turn's fast_wait_ms */
	/* the node's turns of the last epoch it took one in (the re-form rule): that epoch,
	 * its last data turn (0: none) with its buffer's name and outcome, and the turn it
	 * left (0: none). The name is copied as the turn is submitted: fast turns keep no
	 * cache entry from eviction, so the id may be gone by the time the world re-forms. */
	uint64_t last_epoch, last_turn, last_leave;
	uint64_t last_t0; /* its last data turn's submission (timeline, fast_turn) */
	char last_name[SCD_FAST_NAME_BYTES];
	int last_state; /* SCD_FAST_UNDECIDED, SCD_FAST_DONE or SCD_FAST_DISCARDED */
} scd_fast_state_t;

struct scd_world {
	scd_daemon_t *d;
	const scd_world_hooks_t *hooks; /* the process's side (world.h) */
	void *sock;
	scd_curve_t *curve; /* the coordinator's CURVE keys and ZAP handler (secret only) */
	struct scd_admit *admit; /* the coordinator's bounds on unauthenticated peers */
	char advertise[256];	 /* the data plane's announced address (world/addr.h) */
	/* the peer pipe (world/pipe.h): the coordinator's host as an address (a node
	 * connects there), and the port WorldInfo named */
	struct scd_pipe *pipe;
	char pipe_host[64];
	uint16_t pipe_port;
	uv_poll_t poll;
	int polling;
	int is_coord;
	int formed;
	uint64_t world_id;
	/* 1 + the world id whose data-plane failure this rank reported (or, on the
	 * coordinator, acted on): once a world (scd_world_mesh_failed) */
	uint64_t mesh_failed_world;
	/* the coordinator: this world's WorldInfo, packed, for the nodes that have not shown
	 * they hold it (it is not numbered, and the coordinator channel loses what a reset
	 * connection held) */
	uint8_t *world_info;
	size_t world_info_len;
	/* jobs that found the data plane broken, their results held back until the world
	 * re-forms (its reason fails them) or a node is found gone (scd_neg_release_held) */
	struct scd_job *mesh_held;
	/* the coordinator: a data-plane failure's re-form, waiting until every node has
	 * reported it too or been heard after mesh_reform_ms (a node whose daemon died is
	 * found lost instead: the world cannot re-form with it); mesh_reform_ms 0: none */
	uint64_t mesh_reform_ms;
	char mesh_reform_why[640];
	/* meshes built again after a re-form that failed in a row (world.c, mesh_done) */
	int mesh_rebuild_failed;
	/* the data plane's backend, and this rank's endpoint until the mesh job takes it */
	const scd_transport_ops_t *tops;
	scd_transport_endpoint_t *endpoint;
	scd_peer_t *peers;
	/* the coordinator: the nodes' messages of the world left, read while the world
	 * re-forms, by rank and number (stream.c, scd_world_reform_replay; each node's
	 * count and last in its scd_peer_t); old_world: one of them is being handled */
	struct scd_held *reform_held;
	int old_world;
	uint64_t degraded_seq; /* nodes that became degraded so far (coordinator) */
	/* what this node told the coordinator while the world re-forms (its state, a barrier
	 * entered, a join), each with its place among what was queued to send: sent in that
	 * order once it has formed (held.c) */
	struct scd_held_state *held_states;
	int n_held_states, cap_held_states;
	int n_joined;
	uv_timer_t join_timer, flush_timer;
	int flush_armed;
	uint64_t flush_due_ms; /* when the armed flush timer fires (scd_now_ms) */
	/* response cache, identical on every rank (ids assigned by the coordinator, in
	 * sequence: n_cache is the next; cache.c): a table of cap_cache slots (a power of
	 * two, open addressing by id) holding n_live entries */
	scd_cache_ent_t *cache;
	uint32_t n_cache, cap_cache, n_live;
	uint64_t reannounced; /* announcements made again in full after an eviction (stats) */
	/* ReadyLists sent with announcements, and announcements a flush kept back for their
	 * planned buffer (outhold.c), since the daemon started (stats) */
	uint64_t ready_lists, announcements_kept;
	uint32_t *name_to_id[SCD_WORLD_BUCKETS]; /* small vectors: [n, id...] */
	/* announcements to send */
	scd_outreq_t *out;
	int n_out, cap_out;
	scd_poison_t *out_abandon; /* to send with the next flush */
	/* coordinator */
	scd_poison_t *poisons;
	scd_poison_t *lates, *refusals; /* late.c: failed steps nodes owe, refusals to send */
	scd_centry_t *ehead, *etail;
	scd_centry_t *ebucket[SCD_WORLD_BUCKETS];
	uint64_t cycle;
	/* the fusion plan (coordinator; docs/design.md "Fusion plans"), and the timer that
	 * ends a held buffer's wait for its missing tensors */
	scd_fplan_state_t fplan;
	uv_timer_t hold_timer;
	/* every rank: times measured since the last ReadyList, to send with it */
	Sparsecomm__TensorTimes *out_times;
	int n_times, cap_times;
	/* every rank: the fusion plan last received (stats), its buffers' cache ids as
	 * [n, id...] vectors */
	uint64_t fusion_version;
	uint32_t **fusion_bufs;
	int n_fusion_bufs;
	/* outhold.c: per buffer of that plan, a flush pass's state and latest queued time */
	uint8_t *fb_mark;
	double *fb_last;
	/* jobs */
	uint64_t job_seq;
	uint64_t global_jobs; /* of the global set: they time the network probe */
	/* liveness.c: the heartbeat timer and its last turn (scd_now_ms); this daemon said
	 * goodbye */
	uv_timer_t beat_timer;
	uv_timer_t orphan_timer; /* a node without its coordinator: when it exits */
	uint64_t beat_ms;
	int left;
	int served; /* the first mesh came up: the daemon serves its trainers */
	/* barriers (coordinator, barrier.c): the last one concluded, how many ranks entered
	 * the next one, and when the first did */
	uint64_t barrier_seq;
	int barrier_count;
	uint64_t barrier_first_ms;
	uint64_t join_count; /* nodes that joined so far (coordinator) */
	/* runtime configuration changes proposed while the world re-forms (coordinator,
	 * world.c): key and value in turn, applied on every node once it has formed */
	char **cfg_held;
	int n_cfg_held;
	/* the end of joins met while the world re-forms: sent once formed (join.c) */
	int join_end_pending, join_end_last;
	int32_t join_end_status;
	char join_end_error[512];
	/* the first end of joins sent in world join_sent_world (join.c): a node that never
	 * held that world is owed it (join_end_owed) */
	uint64_t join_sent_world;
	int join_sent_last;
	int32_t join_sent_status;
	char join_sent_error[512];
	uint64_t group_pass; /* the coordinator's passes over its groups (group.c) */
	scd_fast_state_t fast;
	scd_fast_snap_t fast_snap; /* this node's, taken as its formed world re-forms */
};

struct scd_fast;
/* fast.c: fast mode (docs/design.md "Fast mode"), behind the key fast_path */
/* The digest of an epoch's buffer, the same on every node: of the world, the epoch, and
 * each cache id with its element count and type word. */
uint64_t scd_fast_digest(const scd_world_t *w, uint64_t epoch, const uint32_t *ids, size_t n);
/* The coordinator, before it sends plan: counts plans that each plan one cached buffer
 * alone, and when the entry rule holds, adds fb (ids: room for SCD_FAST_CYCLE) to begin fast
 * mode. */
void scd_fast_coord_plan(scd_world_t *w, Sparsecomm__Plan *plan, Sparsecomm__FastBegin *fb,
			 uint32_t *ids);
/* The coordinator: ends the epoch in force (FastEnd to every node); why for the log.
 * judge: the workload ended it (an announcement, a FastWaiting), so the epoch's length
 * moves the backoff (fast.c, SCD_FAST_LONG); 0: something outside it did. */
void scd_fast_coord_end(scd_world_t *w, const char *why, int judge);
/* The coordinator, before it takes rl from rank from: an announcement ends fast mode. */
void scd_fast_coord_ready(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl);
void scd_fast_coord_waiting(scd_world_t *w, int from, const Sparsecomm__FastWaiting *fw);
/* plan's fast_begin, checked before anything of the plan is applied (its id cached and
 * not among the plan's evictions). */
sc_status_t scd_fast_plan_check(const scd_world_t *w, const Sparsecomm__Plan *plan, char *err,
				size_t err_len);
/* A node fails or abandons a step on its own (negotiate.c, out_abandon): in an epoch, it
 * leaves it, so that its turn there is a LEAVE, discarded everywhere, and never its
 * trainers' next step summed with the others' step that failed. */
void scd_fast_on_fail(scd_world_t *w);
/* Every node, before plan's responses and evictions: a node still in fast mode leaves its
 * epoch first (the coordinator ends it before it plans; its turns queue ahead of the
 * plan's jobs, and its buffer's id may be among the evictions). */
void scd_fast_before_plan(scd_world_t *w, const Sparsecomm__Plan *plan);
/* Every node, after plan's responses: enters fast mode when it begins it. */
void scd_fast_on_plan(scd_world_t *w, const Sparsecomm__Plan *plan);
/* The node hook (negotiate.c): 1 when nt's readiness became its next fast turn (nothing
 * to announce); 0 to announce it, the node having left fast mode if it was in it (also
 * for the epoch's tensor as a group's member, which goes out with its group). */
int scd_fast_announce(scd_world_t *w, scd_ntensor_t *nt, uint32_t id);
void scd_fast_on_end(scd_world_t *w, const Sparsecomm__FastEnd *fe);
/* Records job, this node's next turn (built from its cycle), for the re-form rule: the
 * last data turn's name is copied, whatever the cache holds later. */
void scd_fast_turn_taken(scd_world_t *w, const struct scd_job *job);
/* How long a fast turn's exchange waits (ms), a plan's job waiting op_timeout_ms: past
 * fast_wait_ms, after which its node tells the coordinator, and the stall naming after. */
int scd_fast_turn_timeout_ms(const scd_config_t *cfg, int op_timeout_ms);
/* A fast job handed back: 1 when done with here (a LEAVE, or a discarded turn whose
 * tensors are announced again), 0 when it completes as a planned job does. */
int scd_fast_job_done(scd_world_t *w, struct scd_job *job);
/* What the next ReadyList tells the coordinator (fast_left, fast_report). */
void scd_fast_ready_fill(scd_world_t *w, Sparsecomm__ReadyList *rl, Sparsecomm__FastReport *r);
/* The world re-forms: fast mode ends on every node. */
void scd_fast_reset(scd_world_t *w);
/* A formed world re-forms: records this node's last turns (before scd_fast_reset). */
void scd_fast_snapshot(scd_world_t *w);
/* What this node's Join says of its fast turns in the world it leaves (fs: room). */
void scd_fast_join_fill(scd_world_t *w, Sparsecomm__Join *j, Sparsecomm__FastState *fs);
/* The coordinator takes rank's Join (same: the daemon that was in the world left). */
void scd_fast_coord_join(scd_world_t *w, int rank, const Sparsecomm__Join *j, int same);
/* The coordinator, as the world forms (before WorldInfo): the turn a re-form left in
 * doubt is owed (late.c) by every node that did not take part in it. */
void scd_fast_coord_formed(scd_world_t *w);
void scd_fast_free(scd_world_t *w);
/* The job for one response (apply.c): its items from the agreed cache entries, filled
 * from this node's buffers when fill, a fast turn's when fast. *job_p NULL: not this
 * node's (a process set without it) or out of memory (SC_ERR_NOMEM). */
sc_status_t scd_neg_allreduce_job(scd_world_t *w, const Sparsecomm__Response *resp,
				  const struct scd_fast *fast, int fill,
				  struct scd_job **job_p);
void scd_neg_job_free(struct scd_job *job);

/* barrier.c */
void scd_barrier_on_enter(scd_world_t *w, int from, const Sparsecomm__BarrierEnter *m);
void scd_barrier_on_done(scd_world_t *w, const Sparsecomm__BarrierDone *m);
/* The coordinator's barrier in progress fails once a rank is degraded or missing past
 * stall_timeout_ms. */
void scd_barrier_tick(scd_world_t *w);
/* The barrier in progress fails at once on every rank when a node that has not entered it
 * has joined: its trainers wait in their joins and enter no barrier until every rank has
 * joined. */
void scd_barrier_check_joined(scd_world_t *w);
/* The world re-forms: every node failed the barrier in progress (world.c, reform_fail) and
 * its trainers enter it again, under the same number, once the world has formed; what the
 * coordinator counted of it is forgotten. */
void scd_barrier_reform(scd_world_t *w);
/* Node rank became degraded (its node failed the barrier in progress): it fails on every
 * rank now. Left to the next tick, the node could be whole again by then (a new trainer
 * came), and the barrier complete without its trainers in it. */
void scd_barrier_on_degraded(scd_world_t *w, int rank);

/* join.c */
/* Node from joined (m); ack: the last of the coordinator's messages it had read then (0
 * for a message of the world left). */
void scd_join_on_node(scd_world_t *w, int from, const Sparsecomm__NodeJoin *m, uint64_t ack);
/* Whether node from's NodeJoin acknowledging ack was sent before the node read the
 * JoinDone last sent to it (which ended that join too): then it is not counted. Judged
 * by the numbers of the world the message was sent in (a re-form resets them). */
int scd_join_ended_unread(const scd_world_t *w, int from, uint64_t ack);
void scd_join_on_done(scd_world_t *w, const Sparsecomm__JoinDone *m);
/* Node rank became degraded: joins in progress fail on every rank. */
void scd_join_on_degraded(scd_world_t *w, int rank);
/* A trainer of node rank left without joining (reason names it): joins in progress fail
 * on every rank. */
void scd_join_on_left(scd_world_t *w, int rank, const char *reason);
/* The coordinator, the world formed: the end of the joins met while it re-formed goes to
 * every rank now (a node not joined again then would never hear it). */
void scd_join_formed(scd_world_t *w);
/* The coordinator, rank's daemon joined again while the world re-forms; missed: it never
 * held the world left (its Join names an older one: the coordinator channel lost that
 * world's WorldInfo), so it discarded all of that world's messages, and an end of joins
 * sent it there is sent it again once the world has formed (scd_join_formed). */
void scd_join_rejoined(scd_world_t *w, int rank, int missed);
/* Lets joined nodes stand in for an announcement of e (coordinator): each takes the
 * attributes of a rank that announced it. */
void scd_join_fill(scd_world_t *w, scd_centry_t *e);

/* group.c: grouped operations (coordinator) */
enum { SCD_GROUP_NONE, SCD_GROUP_HOLD, SCD_GROUP_READY };
/* Rank from announced t's tensor as a member of its group number t->group of t->size. */
void scd_group_tag(scd_world_t *w, int from, const Sparsecomm__GroupTag *t);
/* Fails entry e with st and msg on every rank (late: the nodes that have not announced it
 * owe the step, late.c; else none does); e is freed. */
typedef void (*scd_group_fail_cb)(scd_world_t *w, void *arg, scd_centry_t *e, sc_status_t st,
				  const char *msg, int late);
/*
 * Decides every group among the entries: held (SCD_GROUP_HOLD: a member is not yet ready
 * on every rank), out now (SCD_GROUP_READY, gleader set: every member ready and agreed on
 * every rank), or failed through fail (the ranks formed different groups, a member
 * disagrees or failed, or a member stalled past stall_ms). Entries of no group stay
 * SCD_GROUP_NONE.
 */
void scd_group_pass(scd_world_t *w, uint64_t now, uint64_t stall_ms, scd_group_fail_cb fail,
		    void *arg);
void scd_group_free(scd_centry_t *e);

/* stream.c: sending (world/stream.c says how a formed world's messages are numbered,
 * acknowledged and sent again) */
void scd_world_send_raw(scd_world_t *w, const uint8_t *ident, size_t ident_len,
			const Sparsecomm__PeerMsg *m);
void scd_world_send_peer(scd_world_t *w, int rank, const Sparsecomm__PeerMsg *m);
void scd_world_send_coord(scd_world_t *w, const Sparsecomm__PeerMsg *m);
/* A job found the data plane broken (reason: its error): the coordinator is told, once a
 * world, and re-forms the world (world.c); every rank then fails what was in flight with
 * the coordinator's one reason. */
void scd_world_mesh_failed(scd_world_t *w, const char *reason);
/* The coordinator: the data-plane failure's re-form goes when every node has been heard
 * since it was reported (world.c); called as messages come and at each heartbeat. */
void scd_world_mesh_check(scd_world_t *w);
/* The jobs held back by a data-plane failure are delivered (deliver: a node is gone, and
 * their errors name it first) or dropped (0: the world re-forms, and its reason failed
 * their tensors) (apply.c). */
void scd_neg_release_held(scd_world_t *w, int deliver);
/* m to every rank in order (this one handles it at its turn), packed once: what
 * scd_world_send_peer to each rank does. */
void scd_world_send_all(scd_world_t *w, const Sparsecomm__PeerMsg *m);
/* Rank's pipe failed: its messages not acknowledged go again on the coordinator channel. */
void scd_world_pipe_closed(scd_world_t *w, int rank);
/* The coordinator, the world formed: the nodes' messages of the world left, read while it
 * re-formed (stream.c, reform_hold), are handled now, as they would have been in that
 * world (the announcements dropped: the nodes announce those tensors again; a barrier's
 * enter and a data-plane failure not counted), before anything of the new world. Drop
 * (rank -1: every node's; body_case 0: every kind) forgets them: a daemon that joined
 * afresh, the joins that a failure met while the world re-formed ended (join.c). */
void scd_world_reform_replay(scd_world_t *w);
/* The coordinator, the world just formed (its WorldInfo sent): what waited for it goes, in
 * order: the end of joins met meanwhile (join.c), the nodes' messages of the world left
 * (scd_world_reform_replay), the configuration changes proposed meanwhile, and what this
 * node held (held.c). */
void scd_world_coord_formed(scd_world_t *w);
void scd_world_reform_drop(scd_world_t *w, int rank, int body_case);
/* The coordinator, a node's daemon joining again while the world re-forms, which sent it
 * messages numbered up to last in world (its Join's old_world, old_last_seq): 1 when some
 * have not come, and the Join waits (the node sends them again each heartbeat, then its
 * Join), or, missing for peer_timeout_ms, the node is given up, as a gap in a formed
 * world's stream gives it up; 0 when every one came (or world is not the world left). */
int scd_world_reform_unread(scd_world_t *w, int rank, uint64_t world, uint64_t last);
/* held.c: a message of this node to the coordinator while the world re-forms, held in
 * its place among the announcements and abandons queued (degraded: a state change's;
 * arg: a barrier's number, a join's last rank; reason: a state change's, a trainer's that
 * left). Resend: the world has formed, they go in order. Free: forgotten. */
typedef enum scd_held_kind {
	SCD_HELD_STATE,	  /* NodeState: degraded or whole again */
	SCD_HELD_IDLE,	  /* NodeState.no_trainers */
	SCD_HELD_LEFT,	  /* NodeState.left */
	SCD_HELD_BARRIER, /* BarrierEnter */
	SCD_HELD_JOIN,	  /* NodeJoin */
} scd_held_kind_t;
void scd_world_hold(scd_world_t *w, scd_held_kind_t kind, int degraded, int64_t arg,
		    const char *reason);
void scd_world_held_resend(scd_world_t *w);
void scd_world_held_free(scd_world_t *w);
/* The held messages of kind are forgotten. */
void scd_world_held_drop(scd_world_t *w, scd_held_kind_t kind);
/* A new world (every rank): every stream starts again from 1, with nothing held or kept. */
void scd_world_streams_reset(scd_world_t *w);
/* The coordinator: this world's WorldInfo (packed, n bytes) goes to every joined node now,
 * and again at each heartbeat to those not yet known to hold it (a message numbered in
 * the world came from them: scd_world_deliver). A copy is kept until the next world. */
void scd_world_info_send(scd_world_t *w, const uint8_t *buf, size_t n);
void scd_world_info_tick(scd_world_t *w);
/* The same to rank alone (its Join came again), when it is not known to hold it. */
void scd_world_info_to(scd_world_t *w, int rank);
/* A node re-forming sends its Join again at each heartbeat until WorldInfo comes (the
 * coordinator channel loses what a reset connection held); the coordinator takes the same
 * daemon's Join again (its routing id) as a duplicate, and answers it with WorldInfo
 * when the world has formed (world.c). */
void scd_world_join_tick(scd_world_t *w);
/* Frees what p's stream holds and keeps. */
void scd_world_stream_free(scd_peer_t *p);
/* world.c */
/* Handles m from rank from (a node: from the coordinator; ident: the sender's identity on
 * the coordinator, NULL for its own messages), in its turn. */
void scd_world_handle(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		      const Sparsecomm__PeerMsg *m);
/* The flush timer fires at the next loop turn (cycle_time_ms later), or at due_ms
 * (scd_now_ms) unless it is armed sooner. */
void scd_world_arm_flush(scd_world_t *w);
void scd_world_arm_flush_at(scd_world_t *w, uint64_t due_ms);
/* outhold.c: the flush timer's pass (what a planned buffer's missing tensors keep back
 * stays queued), and the index of the fusion plan just received, and its end */
void scd_neg_flush_turn(scd_world_t *w);
void scd_outhold_plan(scd_world_t *w);
void scd_outhold_free(scd_world_t *w);
/* Stops the daemon with exit_code through the process's hook (scd_world_hooks_t). */
static inline void scd_world_stop_daemon(scd_world_t *w, int exit_code)
{
	w->hooks->stop(w->d, exit_code);
}
/* negotiate.c (announcements, the coordinator) and apply.c (plans applied, jobs ended) */
void scd_neg_on_ready(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl);
/* Its first step, without the plan it may emit: the announcements and abandons of rank
 * from (0 .. world_size - 1) added to what the coordinator collects (the abandons alone
 * of a ReadyList of the world left: scd_world_reform_replay). */
void scd_neg_ready_collect(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl);
/* Applies a plan; a failure (SC_ERR_PROTOCOL: a cache id the plan cannot name;
 * SC_ERR_NOMEM: this rank cannot follow the plan) is logged there and returned, and the
 * caller takes the rank out of the world. */
sc_status_t scd_neg_on_plan(scd_world_t *w, const Sparsecomm__Plan *plan);
/* Its two first steps, which touch only the cache: the check of every cache id (err
 * names the offending one), and the new entries cached (not on the coordinator, which
 * cached them when it planned). */
sc_status_t scd_neg_plan_check(const scd_world_t *w, const Sparsecomm__Plan *plan, char *err,
			       size_t err_len);
sc_status_t scd_neg_plan_entries(scd_world_t *w, const Sparsecomm__Plan *plan);
void scd_neg_on_node_state(scd_world_t *w, const Sparsecomm__NodeState *ns);
void scd_neg_flush(scd_world_t *w);
/* The same for the first n_out announcements and n_abandons abandons queued (what was
 * queued before a change of the node's state held while the world re-formed, world.c);
 * the rest stays queued, in order. */
void scd_neg_flush_first(scd_world_t *w, int n_out, int n_abandons);
/* How many abandons are queued. */
int scd_neg_out_abandons(const scd_world_t *w);
void scd_neg_tick(scd_world_t *w);
void scd_neg_pending(scd_world_t *w, Sparsecomm__PendingReply *r, struct scd_arena *a);
/* An allreduce job came back: statistics and completions. */
void scd_neg_job_done(scd_world_t *w, struct scd_job *job);
struct scd_job_item;
/* The options every rank agreed on (sig) that decide how an item of a job is sparsified
 * and exchanged. */
void scd_neg_item_options(struct scd_job_item *it, const scd_tsig_t *sig);
/* presel.c: a selection job for nt, announced now with cache id id, when it qualifies
 * (coll/presel.h); id SCD_PRESEL_SPEC: a tensor the cache does not know, selected
 * speculatively with own, its own options. And its return from the engine. */
void scd_world_presel(scd_world_t *w, struct scd_ntensor *nt, uint32_t id,
		      const scd_tsig_t *own);
void scd_world_presel_done(scd_world_t *w, struct scd_job *job);
void scd_neg_destroy(scd_world_t *w);
/* Forgets everything negotiated (the world re-forms: every rank starts again from an empty
 * response cache, plan and job count). */
void scd_neg_reset(scd_world_t *w);
/* late.c */
/* Entry e fails with status and msg: records it for every node that has not announced it
 * yet (connected, not joined) but node skip (-1: none; the node whose own failure it is):
 * a node's next announcement of the name is then the late step; a degraded node's step is
 * answered instead, which its own note of a failed step takes. */
void scd_late_note(scd_world_t *w, const scd_centry_t *e, int status, const char *msg,
		   int skip);
/* Rank's announcement of name (refuse 1), or its note that it failed its step (refuse 0):
 * 1 when it is the late step the node owes (with refuse, refused with the next plan,
 * scd_late_refusals) or, a note, a step already answered while the node was degraded; 0
 * to take it. */
int scd_late_take(scd_world_t *w, int rank, const char *name, int refuse);
/* Node r owes one more step of name, refused with status and reason. */
void scd_late_owe(scd_world_t *w, int r, const char *name, int status, const char *reason);
void scd_late_forget_rank(scd_world_t *w, int rank);
/* The world re-forms: the records, taken from w (each node still owes its late steps, and
 * still reports the steps answered for it), with each refusal not sent yet back in its
 * record (the node announces that step again in the new world). */
scd_poison_t *scd_late_keep(scd_world_t *w);
/* The refusals to send (name, rank, status, reason), the caller's to free. */
scd_poison_t *scd_late_refusals(scd_world_t *w);
void scd_late_free_list(scd_poison_t *l);
/* liveness.c */
/* The world formed: every peer is connected and heard now; the heartbeats start. */
/* stream.c: m from rank from (a node: from the coordinator), handled in its turn: now, or
 * once the messages numbered before it came (it is then held, and freed when handled); 1
 * when m was held (the caller must not free it), 0 when the caller frees it. Its
 * acknowledgement releases the copies kept of the messages it names. */
int scd_world_deliver(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		      Sparsecomm__PeerMsg *m);
/* stream.c, every heartbeat: messages not acknowledged in time sent again, the numbered
 * streams' gaps, and a node's pipe to connect. */
void scd_world_stream_tick(scd_world_t *w);
void scd_live_start(scd_world_t *w);
/* A message m came from rank from (-1: an identity the coordinator does not know): 1 to
 * handle it, 0 to drop it (its node was given up: the coordinator tells it so). */
int scd_live_heard(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		   const Sparsecomm__PeerMsg *m);
void scd_live_on_heartbeat(scd_world_t *w, int from, const Sparsecomm__Heartbeat *hb);
void scd_live_on_leave(scd_world_t *w, int from, const Sparsecomm__Leave *l);
/* Rank r is given up (lost) for why, as when it is not heard for peer_timeout_ms. */
void scd_live_lost(scd_world_t *w, int r, const char *why);
/* A node other than the coordinator hears that a node left or was lost. */
void scd_live_on_node_state(scd_world_t *w, const Sparsecomm__NodeState *ns);
/* Why the first node that left or was lost is gone, or NULL when every node is in. */
const char *scd_live_cause(const scd_world_t *w);
/* Rank r's state, last heard and reason, for a status reply. */
void scd_live_status(const scd_world_t *w, int r, Sparsecomm__PeerInfo *pi,
		     struct scd_arena *a);

/* Frees a coordinator entry that is in no list (negotiate.c). */
void scd_centry_release(scd_centry_t *e);
/* The collective e's announcements ask for, for error texts ("allreduce", "broadcast",
 * ...; "operation" before any node announced it). */
const char *scd_centry_coll_name(const scd_centry_t *e, int world_size);

/* ---- the response cache (cache.c) ------------------------------------------------------ */

/* A buffer's communication latency in the planner: its scheme's metadata round and one
 * exchange, each the agreed latency (docs/design.md, "Fusion plans"). */
#define SCD_FUSION_LATENCY_ROUNDS 2
/* At most this many tensor times wait for the next ReadyList (the latest steps' are
 * enough: the planner smooths them). */
#define SCD_MAX_TIMES 65536

/* The bucket of name in the world's tables by name (name_to_id, ebucket). */
uint32_t scd_world_hash_name(const char *s);
/* The id last cached for name, or UINT32_MAX. */
uint32_t scd_cache_lookup(scd_world_t *w, const char *name);
/* Whether cache entry c has exactly these attributes. */
int scd_cache_same(const scd_cache_ent_t *c, uint32_t dtype, uint64_t numel, uint32_t op,
		   int solo, uint32_t fuse_key, const scd_tsig_t *sig);
/* The id of name with these attributes, or UINT32_MAX. */
uint32_t scd_cache_match(scd_world_t *w, const char *name, uint32_t dtype, uint64_t numel,
			 uint32_t op, int solo, uint32_t fuse_key, const scd_tsig_t *sig);
/* Caches id for name with these attributes (a plan's new entry); SC_ERR_PROTOCOL for an id
 * another name has, SC_ERR_NOMEM. */
sc_status_t scd_cache_set(scd_world_t *w, uint32_t id, const char *name, uint32_t dtype,
			  uint64_t numel, uint32_t op, int solo, uint32_t fuse_key,
			  const scd_tsig_t *sig);
/* The id of name that has a place in the coordinator's fusion plan (the one a form that
 * has none takes over), else UINT32_MAX. */
uint32_t scd_cache_plan_held(scd_world_t *w, const char *name);
/* The entry of cache id id, or NULL (never assigned, or evicted). The pointer holds until
 * the cache next changes (scd_cache_set, scd_cache_evict). */
scd_cache_ent_t *scd_cache_get(const scd_world_t *w, uint32_t id);
/* Marks every id of name used by the plan being built (coordinator). */
void scd_cache_touch(scd_world_t *w, const char *name, uint64_t cycle);
/* The coordinator's choice, past cache_max_entries live entries, of the least recently
 * used to evict with the plan of cycle (none used by it: scd_cache_touch), down to the
 * bound less an eighth: their ids in *ids_p (the caller's to free), their count returned
 * (0: none, or out of memory: the cache stays over its bound until the next plan). */
size_t scd_cache_evict_pick(scd_world_t *w, uint64_t cycle, uint32_t **ids_p);
/* A plan evicts id (every rank, in the plan's order): the entry goes, with the engine's
 * state for it, and a tensor of this node announced by that id and not yet planned is
 * announced again in full (the coordinator drops an announcement by an evicted id). */
void scd_cache_evict(scd_world_t *w, uint32_t id);
/* Frees every entry (the world re-forms, or the daemon stops). */
void scd_cache_free(scd_world_t *w);
/* negotiate.c: announces nt again, in full (its id was evicted before a plan answered
 * it), in place of its announcement by id that may still wait for the next flush. */
void scd_neg_reannounce(scd_world_t *w, struct scd_ntensor *nt);

/* ---- plans applied (apply.c) ---------------------------------------------------------- */

/* Frees the fusion plan kept for the statistics. */
void scd_neg_fusion_free(scd_world_t *w);

#endif
