/*
 * presel.h: sparsification ahead at submission ([SAFusion] section 3.1: each tensor is
 * compressed as the backward pass produces it). When every local trainer has submitted a
 * sparsified tensor (dense input, or a COO list), the node queues a selection job for it
 * (SCD_JOB_PRESELECT, world/presel.c): the engine's compute stage sums the node's trainers
 * into the tensor's own accumulator and runs the tensor's sparsifier there, with the
 * tensor's own k, while later tensors are still being produced. Nothing of the tensor's is
 * written: the residual the selection leaves goes to a copy of the residual. When the
 * tensor's buffer reaches the compute stage, its gather takes the ready selection (the
 * same submission, the options every rank agreed on) instead of summing and selecting
 * again, and only then is the copy made the tensor's residual: the point where the
 * selection at the buffer would have written it. A selection whose buffer never comes
 * (the plan failed the tensor, a peer went away) is dropped with the next one, and the
 * tensor's residual is as if it had never run.
 *
 * A tensor's first step comes before the response cache knows it, so before it has a
 * cache id and before the options every rank agreed on are known: its selection is then
 * speculative (SCD_PRESEL_SPEC as the item's cache id), made with the tensor's own
 * submitted options and kept apart from the cached entries, under the node tensor's key
 * (scd_job_item_t.presel_key: one registration of one name in one process set). Its
 * buffer's gather takes it by the submission's token alone, and only if the plan's options
 * are those it was made with; it then becomes the entry of the cache id the plan gave.
 * A speculative selection the plan disagrees with is freed at once; one whose buffer
 * never comes is replaced by the tensor's next one and dropped with a re-formed world.
 * DGC is never speculative: its sample is drawn from a seed that includes the cache id.
 *
 * Everything here runs on the compute thread, but for one read: a taken selection of a
 * tensor alone in its buffer is the scheme's input on the communication stage
 * (bufctx.c), so the entry must stay untouched until that buffer is done. It does: the
 * tensor's next selection job needs its next submission, which needs this one's
 * completion; forget and mesh jobs drain the communication stage first. An entry is the
 * memory of the tensor's device (the cpu's, or the engine GPU's for a cuda tensor, whose
 * selection runs through the GPU device's ops, the kernels its buffer would run, on the
 * compute thread's stream): the node's sum, a residual's copy and room for a whole
 * selection, 16 bytes per element of the tensor (on the host, the room resident only as
 * far as the selections reach), made at its first selection job and
 * dropped when the tensor is forgotten, when a submission of it comes without a selection
 * ahead (sparsify_on_submit off), and when the world re-forms; a buffer on another device
 * than its entry's never takes it, and the tensor's next selection makes it anew there.
 */
#ifndef SCD_COLL_PRESEL_H
#define SCD_COLL_PRESEL_H

#include "coll/ctx.h"
#include "coll/job.h"
#include "device/select.h"

typedef struct scd_presel_table scd_presel_table_t;

/* The cache id of a selection job's item for a tensor the response cache does not know
 * yet (its first step): a speculative selection. */
#define SCD_PRESEL_SPEC UINT32_MAX

/* One tensor's selection made at submission. */
typedef struct scd_presel {
	const scd_device_ops_t *dev; /* whose memory and sparsifier it holds */
	uint32_t cache_id;	     /* SCD_PRESEL_SPEC while speculative */
	uint64_t spec_key; /* speculative: the node tensor's key (presel_key); else 0 */
	uint64_t numel;
	uint64_t token;	 /* the submission it selected (scd_job_item_t.presel_token) */
	uint64_t waited; /* the submission whose GPU trainers' ready events it waited for */
	int ready;	 /* selected for token and not yet taken */
	scd_sparsifier_cfg_t cfg;
	scd_sparsifier_t *sp;
	float *acc; /* the node's sum of the tensor: the sparsifier's input (dev's memory),
		     * unless a lone trainer's buffer is read where it lies */
	float *res; /* the residual the selection leaves, the tensor's once taken (dev's) */
	int has_res;
	scd_coo_t sel;	   /* dev's memory */
	scd_fault_t fault; /* what the local sum found (item 0: the item of the buffer's job
			    * is set when taken) */
	uint64_t nonfinite;
	double tcp_s; /* the selection's time, the tensor's compression */
} scd_presel_t;

/* block: block top-K's elements per block for a tensor that names none (the schemes'
 * sketch_block, as a buffer's sparsifiers take it). */
sc_status_t scd_presel_table_create(uint32_t block, scd_presel_table_t **tab_p);
void scd_presel_table_destroy(scd_presel_table_t *tab);
/* Drops the entry of the tensor with this cache id. */
void scd_presel_forget(scd_presel_table_t *tab, uint32_t cache_id);
/* Drops the speculative entry of the node tensor with this presel_key (0: nothing). */
void scd_presel_forget_key(scd_presel_table_t *tab, uint64_t key);
/* Drops every entry (a re-formed world numbers its cache ids anew). */
void scd_presel_clear(scd_presel_table_t *tab);
/* The entries kept, speculative ones included. */
int scd_presel_count(const scd_presel_table_t *tab);

/* Whether an item of a buffer is selected at submission: a float32 tensor with a top-k,
 * threshold, DGC or block top-K sparsifier, dense input or every trainer's COO list
 * (summed densely, as the buffer's local sum does), every source on one device (host
 * memory, or GPUs: summed on the engine GPU, as its buffer would be). */
int scd_presel_applies(const scd_job_item_t *it);

/* The compute stage of a selection job (one item, SCD_JOB_PRESELECT) on x->dev, its
 * sources' device (the engine found it, waited for GPU trainers' ready events and made
 * room in x->pe for sources off the engine GPU): the local sum into the tensor's entry
 * (coll_allreduce.c, which sums as a buffer's gather does) and its selection; on failure
 * the entry is left not ready (the buffer then selects as before) and job->error says
 * why. A sparsifier the device cannot make (block top-K on a GPU) is no failure here:
 * nothing is made, and the buffer reports it. */
sc_status_t scd_allreduce_preselect(scd_coll_ctx_t *x, scd_presel_table_t *tab, scd_job_t *job);

/* The tensor's entry on device dev, made or remade for it's options, size and device
 * (SC_ERR_NOMEM, or what the sparsifier's creation returned); marked not ready. An item
 * whose cache id is
 * SCD_PRESEL_SPEC gets a speculative entry under it->presel_key (the tensor's earlier one
 * reused or replaced; SC_ERR_INVALID for DGC); an item with a cache id drops its tensor's
 * speculative entry, if one was left. */
sc_status_t scd_presel_entry(scd_presel_table_t *tab, const scd_job_item_t *it,
			     const scd_device_ops_t *dev, uint64_t seed, scd_presel_t **p_p);
/* The selection of it's tensor, made by scd_presel_entry: the sparsifier over in (the
 * node's sum: acc, or a lone trainer's buffer where it lies, only read) and the tensor's
 * residual, which stays as it is: in + residual goes to res in one pass (the device's
 * acc_aside) and the sparsifier selects there, leaving the new residual; then the
 * device's sync (a GPU's failure in anything queued for it fails it); marks it ready for
 * it->presel_token. */
sc_status_t scd_presel_select(scd_presel_t *p, const scd_job_item_t *it, const float *in);

/* Whether the selection job of it's submission waited for its GPU trainers' ready events
 * on the compute thread's stream (its buffer then does not wait again: each recording of
 * an event is waited for once), whether or not the selection itself succeeded. */
int scd_presel_waited(const scd_presel_table_t *tab, const scd_job_item_t *it);

/* The timeline's phase of a selection at submission begun at t0, on the tensor's lane
 * "NAME (ahead)" (its own lane's wait_ranks runs meanwhile, on the loop thread). */
void scd_presel_tl(const scd_job_item_t *it, const char *phase, uint64_t t0);

/* For a buffer's item on device dev: its tensor's ready selection of this submission
 * with the options the buffer runs it with, made on dev, taken (no longer ready), or NULL
 * (the buffer sums and selects it itself). A speculative selection of this submission is
 * taken the same way and becomes the entry of it's cache id; one made with other options
 * or on another device is freed. */
scd_presel_t *scd_presel_take(scd_presel_table_t *tab, const scd_job_item_t *it,
			      const scd_device_ops_t *dev, uint64_t seed);

#endif
