/*
 * job.h: the job contract between the layers that build a job (ctl/ fills its items from the
 * trainers' shared buffers, world/ plans it) and the engine that runs it through its
 * collective (coll/coll.h). A job is one buffer of the plan: its items (the tensors, each
 * with its sources: one per local trainer), its collective and arguments, what the step
 * measured and, once it ran, its result and report. The engine's threads own a job from
 * its submission until they hand it back (engine/engine.h).
 *
 * Every item of a job has the job's dtype and wire format (the coordinator never fuses
 * across them: negotiation's type word, coll/coll.h). A job runs on one device (device.h):
 * the one where its trainers' tensors live, each source's device field, set where the job
 * is built.
 */
#ifndef SCD_COLL_JOB_H
#define SCD_COLL_JOB_H

#include <stdint.h>

#include "coll/coll.h"
#include "daemon.h"
#include "device/device.h"
#include "transport/transport.h"
#include "util/timeline.h"

/* SCD_JOB_PRESELECT: one sparsified tensor's local sum and selection, queued when every
 * local trainer has submitted it, ahead of its buffer's job (coll/presel.h); it has no
 * communication stage and nothing comes of it but the selection its buffer takes. */
typedef enum {
	SCD_JOB_MESH = 0,
	SCD_JOB_ALLREDUCE,
	SCD_JOB_FORGET,
	SCD_JOB_PRESELECT
} scd_job_kind_t;

/* What a NaN or an infinity in a trainer's float32 input does (the nonfinite key). */
typedef enum {
	SCD_NONFINITE_PASS = 0, /* nothing checked: it reaches the sum */
	SCD_NONFINITE_WARN,	/* counted per tensor and logged; the sum goes on */
	SCD_NONFINITE_ERROR,	/* the operation fails on every rank (engine/verdict.h) */
} scd_nonfinite_t;

/* The mode the nonfinite key's text names (checked by the configuration: pass, warn or
 * error; NULL, an unset configuration, is pass). */
static inline scd_nonfinite_t scd_nonfinite_parse(const char *text)
{
	if (!text)
		return SCD_NONFINITE_PASS;
	return text[0] == 'e'	? SCD_NONFINITE_ERROR
	       : text[0] == 'w' ? SCD_NONFINITE_WARN
				: SCD_NONFINITE_PASS;
}

/* The loop thread's node tensor (ctl/tensor.h), opaque to the engine. */
struct scd_ntensor;

typedef struct scd_job_src {
	/* where this trainer's buffer and COO area live (SCD_DEVICE_CPU: shared memory;
	 * SCD_DEVICE_CUDA: the daemon's GPU memory); the engine runs a job on the device all
	 * its sources share */
	scd_device_kind_t device;
	/* cuda: the GPU they live on; the engine sums on the device's home GPU (device.h),
	 * and copies a source on another GPU over before a kernel reads it, and the result
	 * back (coll/stage.h, device/stage.h) */
	int ordinal;
	/* cuda: the trainer's ready event (recorded after it wrote the buffer: the engine's
	 * stream waits on it before reading) and its done event (the engine records it once
	 * the result is written, before the job comes back) */
	void *ready_ev, *done_ev;
	int local_rank; /* the trainer's, for errors */
	void *dense;	/* the trainer's buffer (input, and output), of the job's dtype */
	const uint32_t *coo_idx;
	const float *coo_val;
	uint64_t coo_nnz, coo_cap;
	int coo;
	uint64_t count; /* an allgather: the elements this trainer gives */
	/* an alltoall: one count per trainer of the job, the elements this trainer sends
	 * each (the engine writes the elements received from each there once it succeeds),
	 * and what the trainer gave when the counts were refused (a2a_bad: not one per
	 * trainer, or summing over the tensor's size; a2a zeros then) */
	uint64_t *a2a;
	uint32_t a2a_n; /* its entries: the job's trainers when the trainer submitted */
	int a2a_bad;
	uint64_t a2a_given, a2a_sum;
	/* the trainer asked for a sparse result: the engine writes its COO area and the
	 * entry count (or UINT64_MAX, dense) here; an allgather's or an alltoall's total,
	 * likewise */
	uint64_t *result_nnz;
	/* the operation's success told in the trainer's shared header (proto/shm_wake.h),
	 * where it needs no message: the header (NULL: the loop thread tells the trainer),
	 * the operation's handle and the mapping's guard slot (util/shmguard.h; UINT32_MAX:
	 * none). The engine writes it as soon as the result is delivered and sets woke
	 * (engine.c, early_done); the hand-back then writes it no more (ctl.h,
	 * scd_ctl_complete_item). */
	void *done_hdr;
	uint64_t done_handle;
	uint32_t done_guard;
	int woke;
} scd_job_src_t;

typedef struct scd_job_item {
	struct scd_ntensor *nt; /* NULL: gone from this node, takes part with zeros */
	const char *name;	/* the tensor's, for errors (NULL when nt is) */
	uint64_t numel;
	uint64_t offset; /* in the fused buffer, in elements of the job's dtype */
	/* the item's reduction: SC_OP_AVERAGE averages it, in a buffer that sums (SC_OP_SUM
	 * for the collectives that do not reduce) */
	uint32_t op;
	uint32_t cache_id;
	int solo;	    /* the plan's: the tensor runs in a buffer of its own */
	uint64_t nonfinite; /* result: NaN or infinite values in this node's sum of it */
	/* sparsification ahead (from the tensor's options) */
	uint32_t sparsifier; /* sc_sparsifier_t */
	double density, threshold;
	uint64_t coo_capacity; /* > 0: registered for COO input of up to this many entries */
	uint32_t sketch_rows;  /* S2 for this tensor, 0: the configuration's */
	uint32_t block;	       /* S2's bitmap block and block top-K's (0: configuration's) */
	double sketch_cols;
	int allow_lossy; /* lossy schemes allowed (the tensor has a residual on every rank) */
	int coo_in;	 /* the step's input is COO on every rank (world/agree.h) */
	float *residual; /* the node's residual (local rank 0's shared object), or NULL */
	/* the residual's job numbers on this node, unique across the node's tensors and
	 * their registrations: this job's, and the residual's job before (0: none) — a
	 * buffer's state that ran that one knows no other buffer (the tensor's other form,
	 * under another cache id) nor another registration wrote the residual meanwhile */
	uint64_t residual_seq, residual_prev;
	int residual_ordinal; /* cuda: the GPU it lives on (local rank 0's) */
	/* measured by the step (fusion plans, world/fusion_plan.h): the tensor's compression
	 * (its sparsifier, or its residual added back) and its fusion into the buffer */
	double tcp_s, tb_s;
	/* the submission's selection job (coll/presel.h), 0: none was queued; and the
	 * selection the buffer's gather took for the item (NULL: it selects here) */
	uint64_t presel_token;
	uint64_t presel_key; /* the node tensor's, unique over its registrations */
	struct scd_presel *presel;
	/* the compute thread's stream waited for this submission's GPU trainers' ready
	 * events already, in its selection job (coll/presel.h): the buffer does not again */
	int ready_waited;
	int n_src;
	scd_job_src_t src[SCD_MAX_LOCAL];
} scd_job_item_t;

typedef enum {
	SCD_FAULT_NONE = 0,
	SCD_FAULT_COO_RANGE, /* COO indices not below the tensor's numel */
	SCD_FAULT_NONFINITE, /* NaN or infinite values, with nonfinite = error */
	SCD_FAULT_LOCAL,     /* the node's compute stage failed (count: minus its status) */
	SCD_FAULT_NO_ROOT,   /* a broadcast's root trainer gave no values: it has joined, or
				its registration went away (local_rank: the root's) */
} scd_fault_kind_t;

/* The item of a fault that is the whole buffer's (no memory for it, its device failed). */
#define SCD_FAULT_ITEM_BUFFER 0xffffu

/* One rank's finding in its input (verdict.h): the first faulty item of the job. */
typedef struct scd_fault {
	scd_fault_kind_t kind;
	uint32_t item;	/* index in job->items (SCD_FAULT_ITEM_BUFFER: the whole buffer) */
	int local_rank; /* the trainer of the node that sent it (0 for SCD_FAULT_LOCAL) */
	uint64_t count; /* offending entries (saturates at UINT32_MAX on the wire) */
} scd_fault_t;

/* The bytes of one rank's words in the input check round (engine/verdict.h): its fault's
 * 8 and its flags' 4, padded so that data sent behind them stays 16-byte aligned. */
#define SCD_VERDICT_BYTES 16

/*
 * A fast turn (docs/design.md "Fast turns"): a one-round sum whose exchange also carries
 * every rank's readiness, so that no plan has to announce it. Each rank sends its
 * SCD_FAST_BYTES of fast words after its verdict words and before its buffer; every rank
 * decides from the same P words before it adds anything (engine/verdict.h,
 * scd_fast_decide). epoch 0: not a fast job. A job with leave set takes part in its turn
 * only to end the epoch: the turn is discarded on every rank, and so is every later turn
 * of its epoch still queued in the engine, which sends nothing for them.
 */
#define SCD_FAST_BYTES 32

typedef struct scd_fast {
	uint64_t epoch;	 /* agreed by the plan that began fast mode (0: not a fast job) */
	uint64_t turn;	 /* the turn's number in its epoch, from 1 */
	uint64_t digest; /* of what the epoch's buffer is (world, epoch, tensors, sizes) */
	int leave;	 /* this rank leaves: the turn is discarded everywhere */
	/* result: the turn was discarded (or never ran, its epoch ended before it): nothing
	 * was summed and nothing delivered; the job's status is SC_IN_PROGRESS */
	int discarded;
} scd_fast_t;

struct scd_job;

/*
 * The input check round carried inside a collective's one exchange (coll.h,
 * carries_verdict) instead of a round of its own before it: the collective sends mine
 * ahead of its data to every rank, and calls decide with every rank's words (rank q's at
 * words + q x stride) once they are all in, before it uses any rank's data. decide returns
 * SC_OK, or the status every rank fails the job with (job->error alike on every rank), or
 * for a fast turn that some rank left SC_IN_PROGRESS on every rank (discarded: nothing is
 * summed); a rank whose own compute stage failed (faulty) sends zeros for its data and
 * reads neither its buffer nor its device, and so does a rank that leaves a fast turn.
 */
typedef struct scd_verdict_carry {
	/* this rank's words: its verdict words, then for a fast turn its fast words */
	uint8_t mine[SCD_VERDICT_BYTES + SCD_FAST_BYTES];
	size_t words_bytes; /* of mine sent: SCD_VERDICT_BYTES, or with the fast words */
	int faulty;
	sc_status_t (*decide)(struct scd_verdict_carry *v, struct scd_job *job,
			      const uint8_t *words, size_t stride, int P);
	/* decide's own: the node's trainers, and its compute stage's fault and error text */
	int local_size, failed;
	int discarded; /* a fast turn some rank left: nothing summed (scd_fast_decide) */
	scd_fault_t fault;
	char mine_error[512];
} scd_verdict_carry_t;

/* What a job's compute stage hands its communication stage (engine.c, the collectives). */
struct scd_bufctx;
typedef struct scd_job_prep {
	struct scd_bufctx *bufctx; /* the buffer's state, held until released */
	const scd_coo_t *sel;	   /* a single sparsified tensor's selection, as COO */
	int small;		   /* a small dense buffer: straight to the transport */
	double sparsify_s;
	/* set by the communication stage: the input check round to carry in the exchange
	 * (NULL: it ran before) */
	scd_verdict_carry_t *verdict;
} scd_job_prep_t;

/* The engine's own state of a job between its stages. */
typedef struct scd_job_run {
	int passthrough; /* nothing to communicate: straight to done, in order */
	scd_device_kind_t kind;
	const scd_device_ops_t *dev;
	char *buf;
	int slot;	   /* fusion buffer slot held, -1: none (in place) */
	scd_fault_t fault; /* what the local sum found wrong in this node's input */
	scd_job_prep_t prep;
	/* what the job runs over: the mesh, or its process set's view of it (engine/psview.h),
	 * whose ranks are the indices in job->nodes */
	scd_transport_t *t;
	void *coo_copy; /* the engine's copy of a COO input (coll/coo_in.h), or NULL */
	const scd_device_ops_t *coo_copy_dev;
	double t0, cpu_s;
} scd_job_run_t;

/* The timeline's phase of one item begun at t0, on its tensor's lane (util/timeline.h),
 * with its size; nothing for a tensor gone from this node. */
static inline void scd_job_item_tl(const scd_job_item_t *it, const char *phase, uint64_t t0,
				   uint32_t dtype)
{
	if (!t0 || !it->name)
		return;
	scd_tl_arg_t a[] = {{"bytes", NULL, (int64_t)(it->numel * sc_dtype_size(dtype))}};
	scd_tl_tensor(it->name, phase, t0, a, 1);
}

typedef struct scd_job {
	scd_job_kind_t kind;
	uint64_t seq;
	/* allreduce */
	int n_items;
	scd_job_item_t *items;
	uint64_t total_numel;
	uint32_t dtype;	    /* sc_dtype_t of every item */
	uint32_t wire;	    /* sc_wire_t of every item (float32 sums travel as it) */
	uint32_t wire_sent; /* result: what the dense sum travelled as (0: 32 bits) */
	/* the buffer's collective (coll/coll.h): an allreduce by SC_OP_SUM for sum and
	 * average items (each averages its own), else every item's (min, max and product and
	 * the other collectives never fuse with another) */
	scd_coll_t coll;
	double average_divisor; /* trainers in the job */
	/* the process set the job runs in (0: every node). nodes: its member nodes, ascending,
	 * n_nodes of them, this node among them; NULL for the global set. Owned by the job.
	 * The engine runs a job with nodes over the set's view of the mesh (engine/psview.h,
	 * docs/design.md "Process sets: the data plane"), keyed by pset: nodes is what it
	 * needs, with the sources (the set's trainers on this node) and average_divisor
	 * (the set's trainers) as for any job. */
	uint32_t pset;
	int n_nodes;
	int *nodes;
	/* the set's member trainers: their global ranks (node x local_size + local rank),
	 * ascending, which is the set's rank order, n_set_ranks of them (average_divisor),
	 * each on one of nodes and every one of nodes holding one; NULL for the global set,
	 * and for a set of whole nodes (every trainer of nodes, node by node). Owned by the
	 * job. The collectives that place something per trainer (a reduce-scatter's rows,
	 * an alltoall's blocks, Adasum's leaves) go by it: scd_job_first_trainer. */
	int *set_ranks;
	int n_set_ranks;
	uint64_t gathered;   /* an allgather's result: the elements gathered */
	int pin;	     /* scheme to run, -1: the cost model chooses */
	int timeout_ms;	     /* data-plane timeout */
	int probe;	     /* measure alpha/beta before this job (same job on every rank) */
	uint64_t world_seed; /* shared by every rank */
	/* the loop's count of failures of everything in flight (ctl.h, scd_ctl_fail_gen) when
	 * the job was built: a job built before the last one comes back to tensors that
	 * failed already, and is dropped */
	uint64_t fail_gen;
	int coo_direct; /* the engine hands coo_in to the scheme (no densifying) */
	scd_coo_t coo_in;
	int sparse_out;	   /* coo_direct and the trainer asked for a sparse result */
	scd_coo_t coo_out; /* then: the trainer's COO area (coo_in is the engine's copy);
			      with fused_out, the buffer's result as COO (coll/bufctx.c) */
	/* set by a collective whose delivery takes it (allreduce): a buffer of several
	 * tensors run on their selections' list may get its result back as COO in coo_out
	 * instead of in the fused buffer (coll/bufctx.h) */
	int fused_out_ok;
	/* it did (unless coo_out.nnz is SCD_RESULT_DENSE): delivered into each trainer's
	 * buffer entry by entry instead of copied out of the fused buffer */
	int fused_out;
	int lossless_only;	   /* some tensor does not allow lossy schemes */
	scd_nonfinite_t nonfinite; /* the nonfinite key's, as the job was planned */
	/* forget: drop the state of every buffer holding this cache id (every rank at the
	 * same place in its jobs: a buffer's scheme state must stay alike on every rank), or
	 * with node_only only this node's own selections at submission of it (a tensor gone
	 * from this node, which the others may still hold: its buffers' state stays) */
	uint32_t forget_cache_id;   /* UINT32_MAX: none */
	uint64_t forget_presel_key; /* the node tensor's speculative selection's; 0: none */
	int forget_node_only;
	/* mesh: this rank's prepared endpoint and every rank's bootstrap blob, and the nodes
	 * per core of the world's busiest host, the same on every rank (world/host.h) */
	scd_transport_boot_t boot;
	double cpu_share;
	/* result */
	sc_status_t status;
	char error[512];
	/* the failure left the mesh's byte streams out of step: every later job fails until
	 * the world re-forms (world/world.c, scd_world_mesh_failed) */
	int mesh_broken;
	double time_s;
	uint64_t bytes_sent, bytes_recv;
	int scheme;		    /* the scheme that ran */
	const char *transport_name; /* the transport it ran over (static) */
	double predicted_s, density, gamma, imbalance;
	double exchange_s; /* of the scheme's time, inside exchanges */
	double tcm_s;	   /* the buffer's communication: the scheme's run (or the ring's) */
	double cpu_s;	   /* the engine threads' CPU time for the job */
	double compute_s;  /* of time_s, the compute stage's (local sum, sparsify ahead) */
	scd_fast_t fast;   /* a fast turn's (epoch 0: none) */
	uint64_t fence;	   /* the engine's fence count at submission (scd_engine_fence) */
	scd_job_run_t run; /* the engine's, between its stages */
	struct scd_job *next;
} scd_job_t;

/* Whether job is a fast turn (scd_fast_t). */
static inline int scd_job_fast(const scd_job_t *job)
{
	return job->fast.epoch != 0;
}

/* How logs, errors and the timeline name job, in buf of len bytes: "job N" (its plan's
 * sequence number), or "epoch E turn T" for a fast turn, which no plan numbers. */
const char *scd_job_name(const scd_job_t *job, char *buf, size_t len);
/* scd_job_name in a buffer of the calling block's */
#define SCD_JOB_NAME(job) scd_job_name((job), (char[48]){0}, 48)

/* The node (the mesh's rank) of rank q of what the job runs over: q itself for the global
 * set, else its q-th member node. */
static inline int scd_job_node(const scd_job_t *job, int q)
{
	return job->nodes && q >= 0 && q < job->n_nodes ? job->nodes[q] : q;
}

/* The rank of node among what the job runs over (its index in job->nodes), or -1 when it
 * is not a member of the job's set. */
static inline int scd_job_view_rank(const scd_job_t *job, int node)
{
	if (!job->nodes)
		return node;
	for (int q = 0; q < job->n_nodes; q++)
		if (job->nodes[q] == node)
			return q;
	return -1;
}

/*
 * The job's trainers in its set's rank order (docs/design.md "Process sets: the data
 * plane"), over P nodes (the view's) of L trainers: set rank s is set_ranks[s], or without
 * them every trainer of the job's nodes, node by node. Since the nodes ascend, view rank
 * q's member trainers are the set ranks scd_job_first_trainer(q) to
 * scd_job_first_trainer(q + 1) - 1, in local rank order (q = P: the job's trainer count).
 * The engine checks the layout (scd_job_set_check) before a collective relies on it.
 */
int scd_job_trainers(const scd_job_t *job, int P, int L);
int scd_job_first_trainer(const scd_job_t *job, int q, int P, int L);
/* The set rank of local rank l of view rank q, or -1 when that trainer is not a member. */
int scd_job_set_rank(const scd_job_t *job, int q, int l, int L);
/* The global rank (node x L + local rank) of set rank s. */
int scd_job_global_rank(const scd_job_t *job, int s, int L);
/* "rank 5" for a trainer of the global set, "rank 5 (set rank 2)" for a set's: the global
 * rank, which the trainer is known by, and the set rank, which its counts and slices go
 * by; in buf. */
const char *scd_job_trainer_name(const scd_job_t *job, int s, int L, char *buf, size_t len);
/* Whether the set's layout is one the collectives can rely on: set_ranks ascending, as many
 * as average_divisor, each on one of nodes and every node with one (without set_ranks,
 * average_divisor every trainer of nodes). SC_ERR_INVALID with
 * err naming the set otherwise (negotiation builds both from one table of the set's, so
 * that would be a bug, not a trainer's input). */
sc_status_t scd_job_set_check(const scd_job_t *job, int L, char *err, size_t len);

/* Zeroes what no item of the job covers in buf, its fusion buffer of esz-byte elements on
 * dev (the alignment gaps between items and the tail): a fusion slot keeps whatever an
 * earlier buffer of another layout left there, and the schemes run over the whole buffer. */
/* A hash of where job runs, its process set and the set's nodes, the same on every member
 * (the FNV-1a offset alone for the global set). */
static inline uint64_t scd_job_place_hash(const scd_job_t *job)
{
	uint64_t h = 1469598103934665603ull;
	if (job->pset)
		h = (h ^ job->pset) * 1099511628211ull;
	for (int q = 0; job->nodes && q < job->n_nodes; q++)
		h = (h ^ (uint64_t)job->nodes[q]) * 1099511628211ull;
	return h;
}

void scd_job_clear_padding(const scd_device_ops_t *dev, const scd_job_t *job, char *buf,
			   size_t esz);

/*
 * n items (at least one) for a job, each zero up to its sources: an item holds
 * SCD_MAX_LOCAL of them (about 11 KiB), a buffer of 52 tensors 570 KiB, which calloc would
 * clear (and evict the caches with) at every step for the few sources a node has. Whoever
 * adds a source clears it first (ctl/jobview.c); nothing reads a source past n_src.
 * free() frees them; NULL when out of memory.
 */
scd_job_item_t *scd_job_items_new(size_t n);

/* The timeline's event of one stage of a job, on the stage's thread's lane (the scheme's
 * and the exchanges' events nest inside the communication stage's): its tensors, bytes,
 * scheme, bytes sent and status. */
void scd_job_tl(const scd_job_t *job, const char *stage, uint64_t t0);

/*
 * The device a job of a buffer runs on: the one every source of every item lives on (an
 * item with no source takes part with zeros, in the fusion buffer, anywhere), and its ops.
 * SC_ERR_UNSUPPORTED, with job->error naming the tensor(s) and rank (this node), when two
 * sources disagree or when this daemon does not have the device (logged once, here).
 */
sc_status_t scd_job_device(int rank, scd_job_t *job, scd_device_kind_t *kind_p,
			   const scd_device_ops_t **dev_p);

#endif
