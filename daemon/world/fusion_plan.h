/*
 * fusion_plan.h: which tensors share a fused buffer (the coordinator's fusion plans,
 * docs/design.md "Fusion plans"). Pure: no I/O, no clock; the coordinator feeds it the
 * tensors in the order they were first planned (the trainers' submission order, which for
 * a backward pass is layer order from the output) and the ranks' measured times, and it
 * returns buffer boundaries. Every rank follows the coordinator's plan, so the boundaries
 * never depend on one rank's sparse sizes.
 *
 * Modes (config key fusion_mode):
 *   layerwise  every tensor its own buffer;
 *   fixed      consecutive tensors up to fusion_threshold_bytes (dense bytes);
 *   aligned    N = ceil(L / M) tensors per buffer, L tensors, M = fusion_buffers;
 *   adaptive   from the profiles: buffer 1 grows while eq. 2 holds, buffer i >= 2 while
 *              eq. 1 holds, then eq. 3 merges the long tail; aligned until every tensor
 *              has been measured, and each plan from the profiles kept only when its
 *              measured step time beats the plan's before it (SCD_FPLAN_TRIAL_STEPS).
 * In every mode a buffer holds at most SCD_FPLAN_MAX_ITEMS tensors, tensors of different
 * fusion keys never share one, a solo tensor is always alone, a tensor marked brk
 * always opens a buffer, and a tensor marked whole (ExDyna over the model: one index
 * space per buffer, whose state lasts as long as the buffer's composition) never opens
 * one after a tensor of its key: consecutive tensors of such a class are one buffer.
 *
 * The times, each the slowest rank's: tcp_s a tensor's compression (its sparsifier, or the
 * residual added back), tb_s its fusion into the buffer (the scatter of its selection;
 * measured also for a tensor alone in its buffer, coll/bufctx.c), cm_s its share (by
 * size) of its buffer's communication beyond the per-buffer latency alpha_s. A buffer's
 * sparse tensor fusion time T_cp + T_b is the sum of its tcp_s + tb_s. Its communication
 * time T_cm is interpolated by size from the buffers measured so far (scd_fplan_comm_t:
 * each measured buffer's alpha_s + the sum of its cm_s, by its bytes), as SAFusion
 * interpolates measured times; alpha_s + the sum of its cm_s until two sizes are measured.
 * (Summed per tensor, T_cm makes eq. 2's communication terms cancel but for one alpha_s
 * per tensor, so the first buffer was nearly always two tensors.)
 */
#ifndef SCD_WORLD_FUSION_PLAN_H
#define SCD_WORLD_FUSION_PLAN_H

#include <stdint.h>

typedef enum {
	SCD_FUSION_LAYERWISE = 0,
	SCD_FUSION_FIXED,
	SCD_FUSION_ALIGNED,
	SCD_FUSION_ADAPTIVE,
	SCD_FUSION_MODE_COUNT
} scd_fusion_mode_t;

/* The most tensors in one buffer (a response's cache ids). */
#define SCD_FPLAN_MAX_ITEMS 512
/* Re-planning hysteresis: a plan is rebuilt from the profiles when some tensor's time
 * moved by more than this fraction (of the larger of its planned time and
 * SCD_FPLAN_DRIFT_FLOOR_S) since the plan was made, and at least SCD_FPLAN_MIN_REPORTS
 * reports arrived since. */
#define SCD_FPLAN_DRIFT		0.25
#define SCD_FPLAN_DRIFT_FLOOR_S 200e-6
#define SCD_FPLAN_MIN_REPORTS	2
/* The rebuilt plan replaces the current one only when the next rebuild, SCD_FPLAN_MIN_REPORTS
 * reports per tensor later, gives the same boundaries again (a plan that noise proposes
 * once is not taken), and when, on the same measured times, its predicted step time
 * (scd_fplan_step_s) beats the current plan's by SCD_FPLAN_GAIN. */
#define SCD_FPLAN_GAIN 0.05
/* A plan made from measured times (the first, and each the profiles propose) replaces a
 * running one only on a measured gain: it runs on trial, its step time (the median period
 * between steps, scd_fplan_step) over SCD_FPLAN_TRIAL_STEPS steps after its first
 * SCD_FPLAN_TRIAL_SKIP (new buffers try their schemes) against the plan before it over its
 * last SCD_FPLAN_TRIAL_STEPS; slower, the plan before it comes back, the plan is refused
 * while the tensors stay (the last SCD_FPLAN_REFUSED refused), and the profiles propose
 * nothing for SCD_FPLAN_HOLD steps, doubling with every refusal in a row up to
 * SCD_FPLAN_HOLD_MAX. A plan whose step time is not measured yet is not replaced from
 * the profiles. */
#define SCD_FPLAN_TRIAL_SKIP  4
#define SCD_FPLAN_TRIAL_STEPS 8
#define SCD_FPLAN_REFUSED     8
#define SCD_FPLAN_HOLD	      32
#define SCD_FPLAN_HOLD_MAX    1024
/* Weight of a new report in a rank's smoothed time of a tensor. */
#define SCD_FPLAN_EWMA 0.5

/* The mode called name, or -1. */
int scd_fusion_mode_parse(const char *name);
const char *scd_fusion_mode_name(scd_fusion_mode_t m);

typedef struct scd_fplan_tensor {
	uint64_t bytes;		  /* dense */
	uint32_t key;		  /* fusion class: equal keys may share a buffer */
	int solo;		  /* always a buffer of its own */
	int whole;		  /* its class fuses whole: joins the buffer of the tensor
				     before it when that one has the same key */
	int brk;		  /* always opens a buffer (learnt: scd_fplan_break) */
	int misses;		  /* buffers in a row that went out without it (or with it
				     alone of the tensors before it): SCD_FPLAN_MISSES learn brk */
	int pend;		  /* went out without it; counts a miss if still missing the
				     next time (scd_fplan_partial) */
	uint64_t pend_ms;	  /* then: the latest ready time of the tensors that went */
	uint64_t seen;		  /* the plan's arrivals count at its last arrival (or when
				     it was planned) */
	uint64_t seen_ms;	  /* the ready time that arrival had (UINT64_MAX: none yet): a
				     buffer held over several passes reports its tensors again,
				     counted once */
	int idle;		  /* the steps skip it (scd_fplan_lead) until it comes again */
	int tail;		  /* moved to the end for that: it stays there */
	double tcp_s, tb_s, cm_s; /* < 0: not measured yet */
} scd_fplan_tensor_t;

/* Measured communication time of buffers by size: one point per power of two of the
 * buffer's dense bytes (its mean bytes and time, smoothed), interpolated linearly between
 * points and extrapolated from the nearest segment (never below alpha_s, never falling
 * with size). */
#define SCD_FPLAN_COMM_POINTS 48
typedef struct scd_fplan_comm {
	double bytes[SCD_FPLAN_COMM_POINTS], time_s[SCD_FPLAN_COMM_POINTS]; /* 0: none */
} scd_fplan_comm_t;

typedef struct scd_fplan_cfg {
	scd_fusion_mode_t mode;
	uint64_t fixed_bytes;	      /* fixed */
	int buffers;		      /* M, aligned (and adaptive before the profiles) */
	double alpha_s;		      /* a buffer's communication latency */
	const scd_fplan_comm_t *comm; /* measured T_cm by size, or NULL (scd_fplan_tcm) */
} scd_fplan_cfg_t;

/*
 * Plans L tensors t[0..L-1] in order: start[j] = 1 when tensor j opens a buffer (start[0]
 * = 1 when L > 0). Returns the number of buffers. Deterministic: the same inputs give the
 * same boundaries on every machine.
 */
int scd_fplan_plan(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L,
		   uint8_t *start);

/* A buffer of tensors t[a..b-1]: its estimated communication time (cfg->comm's by its
 * bytes when two sizes are measured, else alpha_s + the cm_s) and its sparse tensor fusion
 * time (the tcp_s + tb_s); unmeasured times count as 0. */
double scd_fplan_tcm(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int a, int b);
double scd_fplan_fuse(const scd_fplan_tensor_t *t, int a, int b);

/*
 * The coordinator's cached plan: the tensors (by cache id) in plan order with their sizes,
 * keys and every rank's smoothed times, the buffer of each, and the plan's version (bumped
 * whenever the boundaries change).
 */
typedef struct scd_fplan_state {
	int P;	    /* ranks reporting */
	int n, cap; /* tensors in plan order */
	uint32_t *ids;
	scd_fplan_tensor_t *t; /* times: the slowest rank's smoothed ones */
	double *rank_t;	       /* [n][P][3]: each rank's smoothed tcp, tb, cm (< 0: none) */
	double *snap;	       /* [n][3]: the times the current plan was made from */
	int *buf;	       /* buffer of each position */
	int n_buf;
	int32_t
	    *pos_of; /* by cache id, open addressing: position + 1, 0 free (fusion_plan.c) */
	uint32_t cap_pos;
	uint64_t version;
	uint64_t reports;  /* since the current plan */
	int dirty;	   /* tensors added or replaced, or the configuration changed */
	int broke;	   /* a break learnt since the last update (scd_fplan_break) */
	uint64_t arrivals; /* tensors that arrived (scd_fplan_arrived) */
	int from_times;	   /* the current plan was made from every tensor's times */
	uint64_t pending;  /* hash of a rebuilt plan waiting for confirmation, 0: none */
	scd_fplan_cfg_t cfg;
	scd_fplan_comm_t comm; /* the buffers' measured communication by size */
	uint64_t late_ms;      /* learnt wait (scd_fplan_wait_ms), 0: none */
	const char *why;       /* what made the last plan change: "tensors" (added, replaced,
				  removed, or a break learnt before a plan from times), "idle"
				  (tensors the steps skip moved to the end), "break"
				  (a break learnt: the running adaptive plan from times split
				  there), "config", "measured" (the first plan from every
				  tensor's times), "profiles", or "slower" (a plan on trial
				  measured slower: the one before it back) */
	/* step times under the current plan (scd_fplan_step): the last step's mark, the last
	 * SCD_FPLAN_TRIAL_STEPS periods (a ring), how many were measured, and how many
	 * steps are still skipped */
	uint64_t step_ms;
	double period[SCD_FPLAN_TRIAL_STEPS];
	int period_n, period_skip;
	/* the current plan on trial against prev_buf (prev_nbuf buffers), whose median
	 * period was prev_s */
	int trial;
	int *prev_buf, prev_nbuf;
	double prev_s;
	uint64_t refused[SCD_FPLAN_REFUSED]; /* plans measured slower (plan hashes) */
	int n_refused;
	int hold, hold_next; /* steps the profiles propose nothing; the next such hold */
} scd_fplan_state_t;

int scd_fplan_state_init(scd_fplan_state_t *s, int P);
void scd_fplan_state_free(scd_fplan_state_t *s);
/* The position of cache id in plan order, or -1. */
int scd_fplan_pos(const scd_fplan_state_t *s, uint32_t id);
/* Appends cache id (a tensor first planned now), or, old_id naming a planned tensor whose
 * attributes changed, puts id in its place with no times; flags are SCD_FPLAN_SOLO and
 * SCD_FPLAN_WHOLE (the fields solo and whole). -1: out of memory. */
#define SCD_FPLAN_SOLO	1
#define SCD_FPLAN_WHOLE 2
int scd_fplan_add(scd_fplan_state_t *s, uint32_t id, uint32_t old_id, uint64_t bytes,
		  uint32_t key, int flags);
/* Counts that cache id's buffer went out without it after waiting (a trainer that waits
 * for each result before it submits the next tensor, or a step that skips it); after
 * SCD_FPLAN_MISSES such buffers in a row it always opens a buffer, since the tensors
 * before it do not arrive with it. One late tensor of a loaded host is not a pattern:
 * a buffer that goes out whole resets the count (scd_fplan_whole). */
#define SCD_FPLAN_MISSES 3
void scd_fplan_break(scd_fplan_state_t *s, uint32_t id);
/*
 * The buffer of positions [a, end) went out after its wait without some of its tensors
 * (ready[k - a]: whether position k went out with it). Each position where readiness
 * changes counts a miss (scd_fplan_break) where a break may be the pattern: the buffer
 * went out with one tensor (a trainer that waits for each result before it submits the
 * next never has two pending), or it is a group released whole (grouped). A buffer that
 * went out with two or more of its tensors, not a group, shows trainers that do not wait
 * for each result: a tensor that missed the wait then came late (a loaded host's backward
 * pass can spread one buffer's tensors over more than fusion_wait_ms), which is no
 * pattern; there a miss is counted only for a tensor still missing since the last time
 * (it never arrived in between, scd_fplan_arrived: a tensor the steps skip), where it goes
 * missing and where the tensors after it come without it. A position that went out with
 * the tensor before it starts its count again.
 */
void scd_fplan_partial(scd_fplan_state_t *s, int a, int end, const uint8_t *ready, int grouped,
		       uint64_t last_ms);
/*
 * A tensor the steps skip (a barrier before the training loop, a metric reduced every few
 * epochs) is idle from the update that finds SCD_FPLAN_IDLE_STEPS steps' worth of
 * arrivals (that many times the plan's tensors) since its own last one, until it comes
 * again. That update moves idle tensors (but those of a class that fuses whole) to the
 * end of the plan order, where they stay (a tensor that comes now and then is not moved
 * again, behind or ahead of another such), each opening a buffer of its own, and
 * re-plans: the step's
 * tensors keep the plan's first position, whose arrival marks each step (scd_fplan_step),
 * and no buffer of theirs waits for one. An idle tensor's missing times hold back no plan
 * from measured times. (A barrier at the first position once left an adaptive plan with
 * no step marks, and with its times never measured, so no plan from times was made.)
 */
#define SCD_FPLAN_IDLE_STEPS 4
/* The first position whose tensor is not idle (0 when none is): its arrival begins a
 * step. */
int scd_fplan_lead(const scd_fplan_state_t *s);
/* Position pos's tensor is ready since ready_ms (reported at every pass while its buffer
 * is held: an arrival counts once per ready time; it came, if late: after a buffer that
 * went out with two or more tensors, last_ms its latest ready time, the gap teaches the
 * wait, scd_fplan_wait_ms, unless longer than the longest wait for wait_ms, the
 * configured one: then a step skipped the tensor). */
void scd_fplan_arrived(scd_fplan_state_t *s, int pos, uint64_t ready_ms, uint64_t wait_ms);
/*
 * How long a buffer waits after its latest ready tensor for the rest: fusion_wait_ms
 * (wait_ms), or longer where trainers that do not wait for each result (their buffers
 * went out with two or more tensors) handed a tensor over later than that after the one
 * before it: 5/4 of the longest such gap, at most SCD_FPLAN_WAIT_MAX times wait_ms, the
 * learnt part shrinking by a sixteenth with every buffer that goes out whole. A trainer
 * that waits for each result teaches nothing (its buffers go out with one tensor), so it
 * still pays fusion_wait_ms per break it teaches.
 */
#define SCD_FPLAN_WAIT_MAX 8
uint64_t scd_fplan_wait_ms(const scd_fplan_state_t *s, uint64_t wait_ms);
/* A step began at ms: the plan's first tensor became ready (marks of one step after the
 * first are ignored). Measures the plan's step time for the trial of plans made from
 * measured times (SCD_FPLAN_TRIAL_STEPS). */
void scd_fplan_step(scd_fplan_state_t *s, uint64_t ms);
/* The buffer of positions [a, end) went out with all its tensors. */
void scd_fplan_whole(scd_fplan_state_t *s, int a, int end);
/* Takes cache id out of the plan (its tensor was released): the plan is rebuilt at the
 * next update. */
void scd_fplan_remove(scd_fplan_state_t *s, uint32_t id);
/* Rank's measured times of cache id (ignored for an unknown id or rank). */
void scd_fplan_report(scd_fplan_state_t *s, int rank, uint32_t id, double tcp_s, double tb_s,
		      double cm_s);
/* Re-plans when tensors were added, cfg differs from the plan's, or the profiles drifted
 * (see SCD_FPLAN_DRIFT; such a plan is taken when the next rebuild confirms it and it is
 * predicted SCD_FPLAN_GAIN faster); a plan from measured times that replaces a running
 * one goes on trial, and the trial's end may bring the plan before it back
 * (SCD_FPLAN_TRIAL_STEPS); first folds the current plan's buffers into s->comm,
 * with which adaptive plans price communication (cfg->comm is ignored); returns 1 when
 * the boundaries changed (version bumped), 0 when not, -1 out of memory (the plan stays). */
int scd_fplan_update(scd_fplan_state_t *s, const scd_fplan_cfg_t *cfg);
/* The predicted step time of plan start[0..L-1]: buffer i's fusion follows buffer i-1's on
 * the compute stage, its communication starts when both its fusion and buffer i-1's
 * communication are done; the last communication's end. */
double scd_fplan_step_s(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L,
			const uint8_t *start);

#endif
