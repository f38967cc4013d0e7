/*
 * tensor.h: the node's tensors. A name registered by the trainers of this node is one
 * scd_ntensor_t; each trainer's registration of it is an scd_reg_t with its own POSIX
 * shared-memory object (created here, mode 0600, sized and pre-faulted at registration so
 * the per-step path touches no new page). The node tensor is ready when every local
 * trainer has submitted it; it then goes through the negotiation and the engine.
 */
#ifndef SCD_CTL_TENSOR_H
#define SCD_CTL_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "coll/coll.h"
#include "ctl/owed.h"
#include "ctl/stats_keep.h"
#include "daemon.h"
#include "shm_layout.h"
#include "sparsecomm.h"
#include "util/shape.h"

struct scd_session;

typedef enum {
	SCD_NT_IDLE = 0,   /* nothing submitted */
	SCD_NT_LOCAL_WAIT, /* some local trainers submitted */
	SCD_NT_ANNOUNCED,  /* every local trainer submitted; the coordinator knows */
	SCD_NT_RUNNING,	   /* in the engine */
} scd_nt_state_t;

typedef struct scd_tensor_opts {
	int allow_lossy;
	uint32_t sparsifier;
	double density, threshold;
	char scheme[32];
	uint64_t coo_capacity;
	uint32_t sketch_rows; /* S2 for this tensor (0: the configuration's) */
	double sketch_cols;
	uint32_t device_kind;	 /* sc_device_kind_t of the trainer's buffer */
	uint32_t device_ordinal; /* with cuda: the GPU, as the trainer numbers it */
	uint32_t wire;		 /* sc_wire_t: what its dense sums travel as */
	/* with cuda: the GPU's UUID (device_uuid_len bytes given, 16 expected), which
	 * registration maps to this daemon's ordinal (scd_reg_t.device_ordinal) */
	unsigned char device_uuid[16];
	uint32_t device_uuid_len;
	uint32_t block;	   /* S2's bitmap block, block top-K's (0: the configuration's) */
	uint32_t src_type; /* sc_src_type_t: the trainer's element type (0: the dtype's) */
} scd_tensor_opts_t;

typedef struct scd_reg {
	uint32_t id; /* the tensor_id the trainer uses */
	struct scd_session *session;
	struct scd_ntensor *nt;
	int local_rank;
	char shm_name[64];
	void *map;
	size_t map_bytes;
	uint32_t guard; /* the mapping's slot in util/shmguard.h */
	sc_shm_header_t *hdr;
	void *data;
	uint64_t data_offset; /* of data in the object (or the GPU allocation): the daemon's */
	float *residual;      /* error-feedback residual area, NULL when the tensor has none */
	/* the COO area, from the daemon's own layout (the trainer may write the header) */
	uint32_t *coo_idx;
	float *coo_val;
	uint64_t coo_cap;
	/* a cuda tensor: the areas above are one GPU allocation of gpu_bytes (gpu_mem),
	 * exported to the trainer with the two interprocess events (handles in *_ipc) */
	uint32_t device_kind;
	uint32_t device_ordinal; /* the GPU they live on: this daemon's ordinal of it */
	unsigned char uuid[16];	 /* and its UUID */
	void *gpu_mem;
	uint64_t gpu_bytes;
	void *ready_ev, *done_ev;
	unsigned char mem_ipc[64], ready_ipc[64], done_ipc[64];
	/* the operation in flight (handle 0: none) */
	uint64_t handle;
	uint64_t submits; /* submissions of it accepted (ctl.c, owing) */
	scd_coll_t coll;
	int coo;
	int sparse_result; /* with coo: the result may come back in the COO area */
	uint64_t nnz;
	/* an alltoall: one count per trainer of the job (a2a_cap of them allocated), the
	 * send counts while it runs, the counts received once it has succeeded; a2a_given
	 * and a2a_sum are what the trainer gave when it was refused (a2a_bad) */
	uint64_t *a2a;
	uint32_t a2a_cap, a2a_n; /* allocated, in use (the trainers at submission) */
	int a2a_bad;
	uint64_t a2a_given, a2a_sum;
	/* the operation's group (Collective.group, group_size; 0: not grouped) */
	uint64_t group;
	uint32_t group_size;
	int zombie;    /* the session went away while the engine held this buffer */
	int preparing; /* its memory is being reserved (scd_tensors_register_async) */
	struct scd_reg *next_in_session;
} scd_reg_t;

typedef struct scd_ntensor {
	char *name;
	uint32_t dtype;
	uint64_t numel;
	scd_tensor_opts_t opts;
	scd_reg_t *slot[SCD_MAX_LOCAL]; /* by local rank */
	int n_regs;
	/* local ranks (bits) that released it while another trainer of the node still held
	 * it, and have not registered it again: their next registration replaces theirs */
	uint64_t let_go;
	int submitted;
	scd_coll_t coll;   /* the step's collective (coll/coll.h) */
	int coo;	   /* the step's input is the COO area (every local trainer's alike) */
	scd_shape_t shape; /* the step's shape (every local trainer's alike) */
	uint64_t residual_last; /* its residual's last job (scd_job_item_t.residual_seq) */
	uint32_t pset;		/* its process set (0: every trainer; name is then qualified) */
	scd_nt_state_t state;
	uint64_t state_since_ms;
	/* the node's event count (scd_ctl_t.events) when its first local submission of the
	 * step came: a trainer in a barrier since then is past the step (ctl.c, owing) */
	uint64_t began_event;
	uint64_t tl_announced; /* the timeline's clock when announced (0: off) */
	/* the response cache id its announcement named (world/cache.c), UINT32_MAX when it
	 * was announced in full: an eviction of that id before the plan answered it has the
	 * node announce it again in full */
	uint32_t announced_id;
	/* selections at submission (coll/presel.h): the last one's token, whether it is this
	 * submission's (for its job item), and the selection jobs in the engine, which read
	 * the trainers' buffers: a registration released meanwhile stays mapped */
	uint64_t presel_token;
	uint64_t presel_key; /* keys its speculative selections (first step); 0: none yet */
	int presel_armed, presel_refs;
	/* the node's trainers disagree on the tensor: every submission fails with this */
	int poisoned;
	char poison_msg[384];
	/* an error that ended a step before every local trainer had submitted: those that
	 * had not get it when they do, instead of waiting alone. Counted by local rank: a
	 * trainer late past several failed steps owes each of them, so that its submission
	 * after them pairs with the others' step of the same number, never an earlier one;
	 * kept past the node tensor's end (owed.h) */
	scd_owed_t carry;
	scd_tensor_stats_t stats;
	struct scd_ntensor *hnext;
	struct scd_ntensor *all_next;
} scd_ntensor_t;

/*
 * Whether the tensor runs in a buffer of its own: ExDyna with exdyna_model 0 (the
 * configuration's exdyna_scope tensor: partitions, threshold and exchange per tensor; in
 * the default scope model the ExDyna tensors fuse, see scd_ntensor_fuse_key), COO input (the
 * engine hands a single tensor's list to the scheme directly), a tensor with its own S2 sketch
 * settings (the buffer's sketch is made from them), and a collective that does not fuse
 * (coll.h: an allgather, whose buffer's layout depends on every rank's count, a reduce-scatter,
 * whose trainers each get another slice of the buffer, an alltoall, whose blocks go to other
 * trainers).
 */
static inline int scd_ntensor_solo(const scd_ntensor_t *nt, int exdyna_model)
{
	return (nt->opts.sparsifier == SC_SPARSIFY_EXDYNA && !exdyna_model) ||
	       nt->opts.coo_capacity > 0 || nt->opts.sketch_rows || nt->opts.sketch_cols > 0 ||
	       (nt->opts.block && !strcmp(nt->opts.scheme, "s2_sketch")) ||
	       scd_coll_solo(&nt->coll);
}

/*
 * The tensor's fusion class (docs/design.md, "Fusion plans"): tensors share a buffer only
 * with tensors of the same class, that is the same lossless-or-lossy class (a lossless
 * tensor restricts its buffer to lossless schemes, and lossy schemes need every tensor's
 * error feedback), the same sparse-ahead-or-dense class (a dense tensor in a buffer of
 * sparsified ones would make the whole buffer dense), the same pinned scheme (a buffer
 * runs one) and, for min, max, product and broadcasts, the same operation word (a buffer
 * reduces by one op or comes from one root; sum and average share buffers, each item
 * averaging its own). Sparsifiers may
 * differ: each tensor keeps its own selection and residual. ExDyna tensors fused over the
 * model (exdyna_model, the scope model) are a class of their own per density and pinned
 * scheme: the buffer is ExDyna's one index space (its partitions and threshold run over
 * the concatenation, with one target density), and the class carries SCD_FUSE_WHOLE so the
 * planner keeps its tensors together in every fusion mode. The coordinator adds the dtype
 * and the scheme_pins pattern a name matches.
 */
#define SCD_FUSE_WHOLE 4u
static inline uint32_t scd_ntensor_fuse_key(const scd_ntensor_t *nt, int exdyna_model)
{
	uint32_t h = 2166136261u;
	for (const char *c = nt->opts.scheme; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	uint32_t word = scd_coll_fuse_word(scd_coll_pack(&nt->coll));
	if (word)
		h = (h ^ (word * 0x9e3779b9u)) * 16777619u;
	int whole = nt->opts.sparsifier == SC_SPARSIFY_EXDYNA && exdyna_model;
	if (whole) {
		uint64_t bits;
		memcpy(&bits, &nt->opts.density, sizeof(bits));
		h = (h ^ (uint32_t)(bits ^ bits >> 32) ^ 0x45584459u) * 16777619u;
	}
	if (nt->pset) /* a buffer runs in one process set */
		h = (h ^ (nt->pset * 0x85ebca6bu) ^ 0x50534554u) * 16777619u;
	return (h & ~7u) | (nt->opts.allow_lossy ? 1u : 0u) |
	       (nt->opts.sparsifier != SC_SPARSIFY_NONE ? 2u : 0u) |
	       (whole ? SCD_FUSE_WHOLE : 0u);
}

/* The bits of a node's group number that hold the local rank of the trainer whose number
 * it is (scd_ntensor_group); a trainer's own numbers must fit in the rest. */
#define SCD_GROUP_LOCAL_BITS 6
_Static_assert(SCD_MAX_LOCAL <= 1 << SCD_GROUP_LOCAL_BITS, "a local rank in a group number");
#define SCD_GROUP_NUM_MAX (UINT64_MAX >> SCD_GROUP_LOCAL_BITS)

/* The group the step is a member of (world/group.c): its lowest local trainer's number,
 * with that trainer's local rank in the low bits, so that every member of a node's group
 * carries one number, and two trainers' groups (each trainer numbers its own from 1:
 * groups in two process sets, one trainer in each, may be in flight together) never share
 * one (0, 0: not grouped). */
static inline void scd_ntensor_group(const scd_ntensor_t *nt, uint64_t *group_p,
				     uint32_t *size_p)
{
	*group_p = 0;
	*size_p = 0;
	for (int l = 0; l < SCD_MAX_LOCAL; l++)
		if (nt->slot[l] && nt->slot[l]->handle) {
			uint64_t g = nt->slot[l]->group;
			*group_p = g ? (g << SCD_GROUP_LOCAL_BITS) | (uint64_t)l : 0;
			*size_p = nt->slot[l]->group_size;
			return;
		}
}

/* What negotiation announces as the tensor's dtype: its type word (coll/coll.h). */
static inline uint32_t scd_ntensor_typeword(const scd_ntensor_t *nt)
{
	return scd_typeword(nt->dtype, nt->opts.wire, nt->opts.src_type);
}

typedef struct scd_tensors scd_tensors_t;

/* on_free (optional) is called with the name of every node tensor as it is freed, and its
 * presel_key (0: none). */
typedef void (*scd_tensor_free_cb)(void *arg, const char *name, uint64_t presel_key);
sc_status_t scd_tensors_create(int local_size, scd_tensor_free_cb on_free, void *arg,
			       scd_tensors_t **t_p);
/* The group of every shared-memory object created from now on (mode 0660; the ctl_group
 * key), or -1 for none (mode 0600, the default). */
void scd_tensors_set_shm_group(scd_tensors_t *t, long gid);
void scd_tensors_destroy(scd_tensors_t *t);    /* unlinks and unmaps every shm object */
void scd_tensors_unlink_all(scd_tensors_t *t); /* unlinks only */

scd_ntensor_t *scd_tensors_find(scd_tensors_t *t, const char *name);
scd_reg_t *scd_tensors_reg(scd_tensors_t *t, uint32_t id);
/* The first node tensor (iterate with ->all_next). */
scd_ntensor_t *scd_tensors_first(scd_tensors_t *t);
/* Statistics of the node tensors already released (stats_keep.h). */
scd_stats_keep_t *scd_tensors_kept(scd_tensors_t *t);
/* Zeroes every node tensor's statistics and forgets the kept ones. */
void scd_tensors_reset_stats(scd_tensors_t *t);

/*
 * Registers name for the trainer at local_rank: checks the attributes against the other
 * local trainers' registrations (a difference is SC_ERR_MISMATCH naming both local
 * ranks), creates the shared buffer. err gets the reason on failure.
 */
sc_status_t scd_tensors_register(scd_tensors_t *t, struct scd_session *s, int local_rank,
				 const char *name, uint32_t dtype, uint64_t numel,
				 const scd_tensor_opts_t *opts, uint64_t max_bytes,
				 scd_reg_t **reg_p, char *err, size_t err_len);
/* A registration prepared (scd_tensors_register_async): reg on success, NULL with the
 * error otherwise (it is released); s is NULL when the session ended meanwhile (see
 * scd_tensors_forget_session), and then there is nobody to answer. */
typedef void (*scd_reg_ready_cb)(void *arg, struct scd_session *s, uint64_t seq, scd_reg_t *reg,
				 sc_status_t st, const char *err);
/* scd_tensors_register, with the slow part of a large registration (allocating and mapping
 * in the pages of the shared object, seconds for gigabytes) on a worker thread of loop, so
 * the loop keeps serving heartbeats. Fails now; or is done now (SC_OK, *reg_p: a small
 * object); or returns SC_IN_PROGRESS and calls cb later with seq, and until then the
 * registration holds its name and local rank but is not found by id. */
sc_status_t scd_tensors_register_async(scd_tensors_t *t, uv_loop_t *loop, struct scd_session *s,
				       int local_rank, const char *name, uint32_t dtype,
				       uint64_t numel, const scd_tensor_opts_t *opts,
				       uint64_t max_bytes, uint64_t seq, scd_reg_ready_cb cb,
				       void *arg, scd_reg_t **reg_p, char *err, size_t err_len);
/* The session s has ended: its registrations still being prepared are released when
 * they are ready, and their callback gets no session. */
void scd_tensors_forget_session(scd_tensors_t *t, struct scd_session *s);
/* Local rank l owes no failed step any more, of any tensor, held or released (owed.h): its
 * trainer ended or joined. */
void scd_tensors_forgive(scd_tensors_t *t, int l);
/* What cuda registrations may use: served at all (the daemon's device setting), and the
 * GPU memory all of them may hold (0: no limit). */
void scd_tensors_gpu_policy(scd_tensors_t *t, int served, uint64_t limit_bytes);
/* The most registrations the node's trainers may hold at once (0: no limit): each is a
 * shared-memory mapping, and the kernel's vm.max_map_count bounds a process's mappings. */
void scd_tensors_reg_limit(scd_tensors_t *t, uint32_t max_regs);
/* The registrations held now. */
uint32_t scd_tensors_live(const scd_tensors_t *t);
/* The GPU memory the node's cuda tensors hold. */
uint64_t scd_tensors_gpu_bytes(const scd_tensors_t *t);

/* Whether the registration's shared memory was lost (the trainer shrank it, or its pages
 * could not be allocated): the daemon no longer shares it with the trainer. Writes what
 * happened, naming the tensor and the local rank, to err. */
int scd_tensors_mem_lost(const scd_reg_t *reg, char *err, size_t err_len);

/* Releases a registration (unmaps and unlinks its buffer); the node tensor is freed with
 * its last registration when it is idle. */
void scd_tensors_release(scd_tensors_t *t, scd_reg_t *reg);

#endif
