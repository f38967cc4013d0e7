/*
 * coll.h: the collectives, as plug-ins (docs/design.md, "Collectives"), the way the schemes
 * are (scheme/registry.h). A tensor's step names a collective: a kind and a small typed
 * argument struct (scd_coll_t). Each kind has a descriptor (scd_coll_desc_t) of hooks, in
 * a file of its own (coll_<name>.c), listed once in SCD_COLLS; the layers above ask the
 * descriptor instead of testing the kind: ctl/ checks a trainer's request and fills a
 * job's sources through it, world/ names the collective, agrees on it and fuses by it, and
 * the engine runs a job's stages through it (its local step, its exchange, its delivery
 * and its predicted time).
 *
 * Negotiation carries a tensor's collective as one 32-bit word (nt->op, the announcements'
 * and the response cache's op), each descriptor packing its own: an sc_reduce_op_t for an
 * allreduce, SCD_OP_BROADCAST | root for a broadcast from trainer rank root, and so on
 * (below). The ranks must agree on the whole word: a broadcast from another root, or a
 * reduce-scatter in rows of another length, is a mismatch like another reduction.
 */
#ifndef SCD_COLL_COLL_H
#define SCD_COLL_COLL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparsecomm.h"

/* The collectives, each {KIND, name}: coll_<name>.c defines scd_coll_<name>. */
#define SCD_COLLS(X)                                                                           \
	X(ALLREDUCE, allreduce)                                                                \
	X(BROADCAST, broadcast)                                                                \
	X(ALLGATHER, allgather)                                                                \
	X(REDUCESCATTER, reducescatter)                                                        \
	X(ALLTOALL, alltoall)                                                                  \
	X(ADASUM, adasum)

typedef enum {
#define SCD_COLL_ENUM_(K, n) SCD_COLL_##K,
	SCD_COLLS(SCD_COLL_ENUM_)
#undef SCD_COLL_ENUM_
	    SCD_COLL_COUNT
} scd_coll_kind_t;

/* A collective and its arguments (the fields a kind does not use are 0). */
typedef struct scd_coll {
	scd_coll_kind_t kind;
	sc_reduce_op_t op; /* allreduce, reducescatter: the reduction */
	uint32_t root;	   /* broadcast: the root's trainer rank */
	uint32_t row;	   /* reducescatter: the elements of a row (below SCD_RS_ROW_MAX) */
} scd_coll_t;

/* The words of the collectives that are not an allreduce (whose word is its op): a
 * broadcast's SCD_OP_BROADCAST | root, a reduce-scatter's SCD_OP_REDUCESCATTER | row << 3 |
 * op, an allgather's, an alltoall's and Adasum's their bit alone. */
#define SCD_OP_BROADCAST     0x80000000u
#define SCD_OP_ALLGATHER     0x40000000u
#define SCD_OP_REDUCESCATTER 0x20000000u
#define SCD_RS_ROW_MAX	     (1u << 26)
#define SCD_OP_ALLTOALL	     0x10000000u
#define SCD_OP_ADASUM	     0x08000000u

/* What a trainer's request gives a collective's check (ctl.c decodes the request). */
typedef struct scd_coll_req {
	scd_coll_t coll;
	const char *tensor; /* its name, for errors */
	uint64_t numel;	    /* the tensor's */
	uint64_t count;	   /* an allgather: the elements this trainer gives; a reduce-scatter: a
			      row's */
	int coo;	   /* the input is COO */
	int sparsifier;	   /* the tensor has a sparsifier */
	int coo_area;	   /* the tensor is registered for COO input */
	uint32_t trainers; /* the job's */
	uint32_t dtype;	   /* the tensor's sc_dtype_t */
} scd_coll_req_t;

struct scd_job;
struct scd_job_src;
struct scd_coll_ctx; /* what the engine lends a job's stages (coll/ctx.h) */

/*
 * A collective's descriptor. Every hook but the stages' may be NULL where the kind has
 * nothing to do there. The stages run on the engine's threads with the job's device and
 * buffer (engine/engine.h); they set job->error when they fail (the engine adds the rank).
 */
typedef struct scd_coll_desc {
	const char *name;
	/* may share a fused buffer with tensors of the same fuse class (scd_coll_fuse_word);
	 * 0: runs in a buffer of its own, sized by buffer_bytes */
	int fuses;
	/* may run in place, in the trainer's own buffer, when the job holds one tensor */
	int in_place;
	/* the reductions of a buffer on a GPU on every rank take the transport gpunet picks
	 * (engine/gpunet.h); 0: the mesh, staged */
	int gpunet;
	/* the completion hands the trainer its alltoall counts back (ctl.c) */
	int counts_back;
	/* runs in a process set other than the global one, any set, among the set's nodes
	 * over their view of the mesh (coll/job.h: nodes; ctx.h), whatever part of each
	 * node's trainers the set holds (what goes per trainer goes in set rank order:
	 * job.h, scd_job_first_trainer); 0: nowhere but the global set
	 * (scd_coll_pset_check) */
	int psets;
	/* negotiation's word of c, and the collective of a word (0: not this kind's) */
	uint32_t (*pack)(const scd_coll_t *c);
	int (*unpack)(uint32_t word, scd_coll_t *c_p);
	/* "sum", "broadcast from rank 3", ... */
	void (*describe)(const scd_coll_t *c, char *buf, size_t len);
	/* ctl: the trainer's request refused (its status, err naming the tensor), or SC_OK */
	sc_status_t (*check)(const scd_coll_req_t *rq, char *err, size_t len);
	/* ctl: what a source takes from the trainer's request (given: an allgather's count)
	 * and where its result's element count goes (the trainer's shm header) */
	void (*fill_src)(struct scd_job_src *s, uint64_t given, uint64_t *result_nnz);
	/* the bytes of the job's own buffer (NULL: its elements of its dtype) */
	uint64_t (*buffer_bytes)(const struct scd_job *job);
	/* compute stage: the node's local step into the job's buffer (local sum, the root's
	 * values, packing) and what goes ahead of the exchange (sparsification) */
	sc_status_t (*gather)(struct scd_coll_ctx *x, struct scd_job *job);
	/* whether the job's run carries the input check round (job.h, scd_verdict_carry_t)
	 * in its one exchange, over the mesh, so the engine skips the round: decided from
	 * what every rank agreed on only (NULL: never) */
	int (*carries_verdict)(const struct scd_job *job, int world_size);
	/* communication stage: the exchange between the nodes */
	sc_status_t (*run)(struct scd_coll_ctx *x, struct scd_job *job);
	/* communication stage: the results to the local trainers */
	sc_status_t (*deliver)(struct scd_coll_ctx *x, struct scd_job *job);
	/* the report of a successful or failed run: job->predicted_s by the alpha-beta model,
	 * and the scheme, density, densification and imbalance a dense exchange reports */
	void (*predict)(const struct scd_coll_ctx *x, struct scd_job *job);
} scd_coll_desc_t;

#define SCD_COLL_DECL_(K, n) extern const scd_coll_desc_t scd_coll_##n;
SCD_COLLS(SCD_COLL_DECL_)
#undef SCD_COLL_DECL_

/* The descriptor of kind (a valid one: the kinds come from scd_coll_unpack or ctl). */
const scd_coll_desc_t *scd_coll_desc(scd_coll_kind_t kind);

/* The collective's name in error texts: "allreduce", "broadcast", ... */
static inline const char *scd_coll_name(const scd_coll_t *c)
{
	return scd_coll_desc(c->kind)->name;
}
/* The name of the collective a negotiation word names ("operation" for a word none does). */
const char *scd_coll_word_name(uint32_t word);

/* Negotiation's word of c. */
uint32_t scd_coll_pack(const scd_coll_t *c);
/* The collective a word names; 0 when none does (a peer's word, in a description). */
int scd_coll_unpack(uint32_t word, scd_coll_t *c_p);
/* Whether a word from another daemon names a collective whose arguments its check accepts
 * in a job of trainers trainers (a reduce-scatter's row not 0, a broadcast's root a rank):
 * words from the network are checked before a plan or a job is built from them. */
int scd_coll_word_valid(uint32_t word, uint32_t trainers);
/* Whether a collective of kind runs in process set pset (0, the global set: every kind
 * does): SC_OK, or SC_ERR_UNSUPPORTED with err naming the collective, the tensor and the
 * set ("reducescatter of tensor 'x' in process set 2 is not supported ..."). The engine
 * refuses such a job with it on every member alike, before any byte moves; ctl may refuse
 * the trainer's request with it first. */
sc_status_t scd_coll_pset_check(scd_coll_kind_t kind, uint32_t pset, const char *tensor,
				char *err, size_t len);
/* "sum", "max", ... or "broadcast from rank 3", in buf; "operation 0x..." for a word no
 * collective has. */
const char *scd_coll_describe_word(uint32_t word, char *buf, size_t len);
const char *scd_coll_describe(const scd_coll_t *c, char *buf, size_t len);

/* A check's refusal of sparse input (a sparsifier or COO input: a residual and a list's
 * implicit zeros mean a sum) for a dense collective: SC_ERR_UNSUPPORTED naming it. */
sc_status_t scd_coll_dense_check(const scd_coll_req_t *rq, char *err, size_t len);

/* Adasum's tree (coll_adasum.c) over n blocks of numel elements of dtype (float32 or
 * float64), back to back in host memory: the result in the first block. */
void scd_adasum_tree(sc_dtype_t dtype, void *blocks, int n, uint64_t numel);

/* A tensor's fuse class by its collective: tensors share a buffer only within one (0 for
 * sum and average, which share buffers, each item averaging its own; the word itself for
 * min, max, product and broadcasts: one reduction, one root). The collectives that do not
 * fuse run alone anyway (scd_coll_solo). */
static inline uint32_t scd_coll_fuse_word(uint32_t word)
{
	return word > SC_OP_AVERAGE ? word : 0;
}

/* Whether a tensor of this collective runs in a buffer of its own. */
static inline int scd_coll_solo(const scd_coll_t *c)
{
	return !scd_coll_desc(c->kind)->fuses;
}

/*
 * The type word of a tensor, as negotiation carries it in the dtype fields (announcements,
 * the response cache, the plans): the sc_dtype_t in the low byte, the sc_wire_t of its
 * dense sums in the next and the trainer's element type (sc_src_type_t) in the third.
 * The ranks must agree on the whole word (a rank that registered another dtype, element
 * type or wire format is a mismatch naming it), and tensors whose words differ never
 * share a fused buffer.
 */
static inline uint32_t scd_typeword(uint32_t dtype, uint32_t wire, uint32_t src)
{
	return dtype | (wire & 0xffu) << 8 | (src & 0xffu) << 16;
}
static inline uint32_t scd_tw_dtype(uint32_t word)
{
	return word & 0xffu;
}
static inline uint32_t scd_tw_wire(uint32_t word)
{
	return (word >> 8) & 0xffu;
}
/* The element type the word's values have: its dtype and the trainer's type over it
 * (equal for ranks whose values are of one type), and that type's name. */
static inline uint32_t scd_tw_values(uint32_t word)
{
	return word & 0xff00ffu;
}
static inline const char *scd_tw_values_name(uint32_t word)
{
	return sc_src_type_name((sc_src_type_t)(word >> 16 & 0xffu),
				(sc_dtype_t)scd_tw_dtype(word));
}

#endif
