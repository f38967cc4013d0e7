/*
 * select.h: the sparsifiers of the cpu device, each with error feedback.
 *
 * Error feedback keeps one residual per tensor. A step computes acc = input + residual
 * (one float addition per element), selects some elements of acc, hands them out as COO,
 * and leaves exactly the rest in the residual: for every element, selected value + new
 * residual == fl(input + old residual), bit for bit. Nothing is lost, nothing is created.
 *
 * Sparsifiers (all selection is by magnitude, |acc|):
 *   threshold  hard threshold: |acc| >= t (one fused pass).
 *   topk       exact top-k: radix select on the magnitude's bit pattern (11-bit digits),
 *              not a sort: one fused pass that also builds the first histogram, one pass
 *              collecting the boundary bucket, histogram passes over that small set, one
 *              final selection pass. Ties at the k-th value are broken by lowest index.
 *   dgc        DGC-style: the threshold comes from a ~1% sample, checked by the selection
 *              pass itself; when the count falls outside [0.7k, 1.3k] the step is undone
 *              and the threshold corrected (x1.3 / x0.7) up to 3 times (DGC, docs/schemes.md).
 *   natural    every non-zero of acc (an already sparse tensor); with a zero residual this
 *              is exactly the tensor's non-zeros.
 *   block_topk block-wise top-K (S2 Reducer's sparsifier for dense models): acc cut into
 *              blocks of cfg.block elements (the last one shorter), the K = max(1,
 *              round(density x blocks)) blocks of largest l2 norm selected whole (their
 *              non-zeros; ties by lowest block, a NaN norm above every number).
 * NaNs compare as larger than every number, so they are always selected (and surface at
 * the receiver) instead of hiding in a residual forever.
 *
 * Output indices are ascending. If out->cap is too small, elements that qualify beyond
 * the capacity stay in the residual (still conserved) and stats->qualified says how many
 * qualified. A sparsifier object owns its workspace; scd_sparsify() never allocates.
 */
#ifndef SCD_DEVICE_SELECT_H
#define SCD_DEVICE_SELECT_H

#include "device/sparse.h"

typedef enum {
	SCD_SPARSIFY_THRESHOLD = 0,
	SCD_SPARSIFY_TOPK,
	SCD_SPARSIFY_DGC,
	SCD_SPARSIFY_NATURAL,
	SCD_SPARSIFY_BLOCK_TOPK,
	SCD_SPARSIFY_COUNT
} scd_sparsify_kind_t;

typedef struct scd_sparsifier_cfg {
	scd_sparsify_kind_t kind;
	uint64_t numel;	 /* largest tensor this sparsifier will see */
	double density;	 /* topk, dgc: k = max(1, round(density * numel)) */
	float threshold; /* threshold: the hard threshold (> 0) */
	uint64_t seed;	 /* dgc: sampling seed (the step number is mixed in) */
	uint32_t block;	 /* block_topk: elements per block (0: 256) */
} scd_sparsifier_cfg_t;

typedef struct scd_select_stats {
	uint64_t target;    /* k for topk/dgc, 0 otherwise */
	uint64_t qualified; /* elements that met the final criterion */
	float threshold;    /* the magnitude threshold finally applied */
	uint32_t passes;    /* full passes over the tensor */
} scd_select_stats_t;

typedef struct scd_sparsifier scd_sparsifier_t;

const char *scd_sparsify_kind_name(scd_sparsify_kind_t kind);
int scd_sparsify_kind_parse(const char *name, scd_sparsify_kind_t *kind_p);

/* SC_OK when scd_sparsifier_create would accept cfg (what it checks before it allocates);
 * SC_ERR_INVALID otherwise. */
sc_status_t scd_sparsifier_cfg_check(const scd_sparsifier_cfg_t *cfg);
/* Creates a sparsifier and its workspace (pre-faulted); the per-step call allocates
 * nothing. */
sc_status_t scd_sparsifier_create(const scd_sparsifier_cfg_t *cfg, scd_sparsifier_t **sp_p);
void scd_sparsifier_destroy(scd_sparsifier_t *sp);

/*
 * One step over numel <= cfg.numel elements: in may be NULL when the tensor already sits in
 * residual; residual may be NULL for no error feedback (then in is only read). Writes
 * out->idx/val/nnz. stats_p may be NULL.
 */
sc_status_t scd_sparsify(scd_sparsifier_t *sp, const float *in, float *residual, uint64_t numel,
			 scd_coo_t *out, scd_select_stats_t *stats_p);

/* k for a density over numel elements, as every sparsifier computes it. */
uint64_t scd_density_to_k(double density, uint64_t numel);

/*
 * Plain threshold selection over [lo, hi) of a tensor (indices written are global): with
 * error feedback when residual != NULL (in may be NULL: the tensor is residual itself).
 * Selects |acc| >= threshold (threshold > 0). Returns the number that qualified.
 */
uint64_t scd_select_threshold(const float *in, float *residual, uint64_t lo, uint64_t hi,
			      float threshold, scd_coo_t *out);
/* Adds in[lo, hi) into residual (error feedback outside a rank's ExDyna partition). */
void scd_residual_accumulate(const float *in, float *residual, uint64_t lo, uint64_t hi);
/* Counts |x| >= threshold over x[0, n). */
uint64_t scd_count_at_least(const float *x, uint64_t n, float threshold);
/* Puts selected values back into the residual (undoes a selection). */
void scd_residual_restore(float *residual, const scd_coo_t *sel);
/* Copies a COO tensor (natural sparsity taken as is). SC_ERR_LIMIT if dst is too small. */
sc_status_t scd_coo_copy(const scd_coo_t *src, scd_coo_t *dst);

#endif
