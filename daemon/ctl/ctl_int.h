/*
 * ctl_int.h: the state of the control socket and its sessions, shared by ctl.c (sessions,
 * requests, completions), join.c (barriers and joins), report.c (status, statistics,
 * pending, configuration) and pset.c (process sets). Not for other subsystems: they use
 * ctl.h.
 */
#ifndef SCD_CTL_CTL_INT_H
#define SCD_CTL_CTL_INT_H

#include "ctl/ctl.h"
#include "ctl/pset.h"

#define SCD_SUBMIT_TOKEN_BYTES 16   /* a submit channel's token (ctl/submit.h) */
#define SCD_CTL_BATCH_MAX      1024 /* requests of one SubmitBatch (proto/sparsecomm.proto) */

typedef struct scd_session {
	uint8_t ident[256];
	size_t ident_len;
	int role;	       /* SPARSECOMM__ROLE__ROLE_TRAINER / _CONTROL */
	int header_completion; /* its hello asked for successes in the header alone */
	int silent_accept;     /* its hello asked for no ok to an operation accepted */
	/* who it is, from the kernel (peer.h): its process (0: one the daemon cannot see) and
	 * user; declared_pid is what its hello said, kept for messages only */
	int pid, declared_pid;
	uint32_t uid;
	int local_rank;
	int pidfd;
	uv_poll_t pidpoll;
	int conn; /* a duplicate of its connection (peer.h), -1: none */
	uv_poll_t connpoll;
	int handles; /* uv handles still open: the session is freed when the last closes */
	uint64_t exited_ms;  /* when its process or connection was seen to end (0: running) */
	const char *gone;    /* how: "exited", "closed its connection", "was dropped" */
	size_t report_bytes; /* reports sent since it was last seen to have read everything */
	int dropped; /* dropped (scd_ctl_session_drop): it ends at the next tick, its control
		      * connection shut then */
	char drop_why[200]; /* why it was dropped (gone points here) */
	/* its submit channel (ctl/submit.h): offered in the hello's reply with this token, and
	 * once bound the connection every request of the session comes over (-1: none) */
	int submit_offered;
	uint8_t submit_token[SCD_SUBMIT_TOKEN_BYTES];
	int submit_fd;
	uv_poll_t submit_poll;
	uint64_t submit_requests; /* served from it */
	uint64_t submit_batches;  /* SubmitBatch messages read from it */
	int closed; /* session_close ran: its handles are closing, nothing more is served */
	scd_reg_t *regs;
	uint64_t barrier_handle; /* the trainer's barrier in progress, 0: none */
	uint64_t barrier_left;	 /* the node's event count when its last barrier ended */
	uint64_t join_handle;	 /* the trainer joined (uneven inputs), 0: not */
	uint64_t last_ms;
	struct scd_session *next;
	struct scd_ctl *ctl;
} scd_session_t;

/* Whether r's trainer takes an operation's success from the tensor's shared header alone
 * (proto/shm_wake.h; its hello asked for it), whoever writes it: the engine (coll/job.h,
 * done_hdr) or the loop (ctl.c, complete_in_header). */
static inline int scd_reg_header_tells(const scd_reg_t *r)
{
	return r->hdr && r->session && r->session->header_completion;
}

struct scd_ctl {
	scd_daemon_t *d;
	const scd_ctl_upcalls_t *up; /* the world's side (ctl.h) */
	uint64_t fail_gen;	     /* scd_ctl_fail_all's count (scd_ctl_fail_gen) */
	uint64_t
	    events; /* counts steps begun and barriers ended, to order them (ctl.c, owing) */
	void *sock;
	uv_poll_t poll;
	int polling;
	uv_idle_t more; /* requests left over by a drain (CTL_DRAIN_BUDGET) */
	scd_tensors_t *tensors;
	scd_session_t *sessions;
	scd_session_t *by_local[SCD_MAX_LOCAL];
	int n_trainers;
	uint64_t residual_seq; /* the residuals' jobs numbered (scd_job_item_t.residual_seq) */
	int degraded; /* a trainer died: submissions fail until its local rank is taken again */
	char degraded_reason[256];
	/* barriers: the last one that ended on every rank, the local trainers in the next
	 * one (since when), and whether the node entered it (world/barrier.c) */
	uint64_t barrier_seq;
	int barrier_waiting, barrier_entered;
	uint64_t barrier_since_ms;
	/* joins: the local trainers joined, and the last of them (a global rank) */
	int n_joined, join_last;
	struct pending_q {
		uint64_t id, seq, deadline_ms;
		uint8_t ident[256];
		size_t ident_len;
	} pq[16];
	uint64_t next_query;
	/* sparsectl config sets that wait for the coordinator's apply to reach this node
	 * (report.c; value NULL: a free slot) */
	struct config_wait {
		uint64_t seq, deadline_ms;
		uint8_t ident[256];
		size_t ident_len;
		int key;
		char *value;
	} cw[8];
	scd_psets_t psets; /* the job's process sets (pset.h) */
	/* the submit channel's listening socket (ctl/submit.h; -1: none), its path, the
	 * connections accepted that have not sent their token yet, and a message's buffer */
	int submit_fd;
	uv_poll_t submit_poll;
	char submit_path[108];
	struct scd_submit_conn *submit_pending;
	int submit_n_pending;
	int submit_resting; /* out of descriptors: not polled until the next tick */
	int submit_starved; /* out of descriptors, warned of, since the last accept */
	uint8_t *submit_buf;
};

/* Sends m to the client ident (ctl.c: bounded by what the client leaves unread). */
void scd_ctl_send(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len,
		  const Sparsecomm__DaemonMsg *m);
void scd_ctl_send_error(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len, uint64_t seq,
			sc_status_t st, const char *msg);
void scd_ctl_send_ok(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq);
/* A tensor's completion to s; counts (n of them, or NULL) are an alltoall's received
 * counts. */
void scd_ctl_send_completion(scd_ctl_t *ctl, scd_session_t *s, uint64_t handle, sc_status_t st,
			     const char *error, uint64_t *counts, int n);
/* A completion carrying a value (a join's last rank). */
void scd_ctl_send_completion_value(scd_ctl_t *ctl, scd_session_t *s, uint64_t handle,
				   sc_status_t st, const char *error, int64_t value);
/* A node tensor every local trainer has submitted, a joined one counting as having
 * submitted it, goes to negotiation. */
void scd_ctl_announce_if_ready(scd_ctl_t *ctl, scd_ntensor_t *nt);

/* join.c: the trainers' barriers and joins. */
void scd_ctl_handle_join(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			 const Sparsecomm__TrainerJoin *j);
void scd_ctl_handle_barrier(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			    const Sparsecomm__Barrier *b);
/* Ends every local trainer's barrier in progress. */
void scd_ctl_barrier_complete(scd_ctl_t *ctl, sc_status_t st, const char *error);

/* Serves len bytes that came over session s's bound submit channel, as scd_ctl_dispatch
 * serves a ROUTER message (one handler for both); a message that is not a request drops
 * the session. */
void scd_ctl_dispatch_submit(scd_ctl_t *ctl, scd_session_t *s, const uint8_t *buf, size_t len);
/* Drops session s (it ends at the next tick as a trainer's death would), why saying what
 * it did; warns naming its pid and uid. */
void scd_ctl_session_drop(scd_ctl_t *ctl, scd_session_t *s, const char *why);
/* The same, for what the client did wrong: it is told first (an ErrorReply with seq 0,
 * which the library takes as the end of its client, with why), then dropped. */
void scd_ctl_session_refuse(scd_ctl_t *ctl, scd_session_t *s, sc_status_t st, const char *why);

/* report.c: the requests of those names. */
void scd_ctl_handle_status(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq);
void scd_ctl_handle_stats(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq, int reset);
void scd_ctl_handle_pending(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq);
/* pset.c: a trainer's ProcessSet request. */
void scd_ctl_handle_process_set(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
				const Sparsecomm__ProcessSet *ps);
/* Answers the config sets and pending queries that wait on the coordinator and have not
 * had its answer in time (all: every one, as the daemon stops) with an error (report.c). */
void scd_ctl_report_expire(scd_ctl_t *ctl, int all);
void scd_ctl_handle_config(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			   const Sparsecomm__ClientMsg *msg);

#endif
