/*
 * exdyna.h: the ExDyna sparsifier (ExDyna paper, sec. IV, Algorithms 2-5).
 *
 * The tensor is cut into n_b blocks of a multiple of 32 elements (Alg. 2); contiguous
 * blocks form P partitions; at iteration t rank r selects, by threshold, only inside
 * partition (t + r) mod P (partition-wise exclusive selection, Alg. 4), so no two ranks
 * select the same index and nothing is padded. After the counts of all ranks are
 * gathered, every rank moves blocks between neighbouring partitions whose loads differ
 * (Alg. 3) and scales the shared threshold towards the target density (Alg. 5).
 *
 * Every rank recomputes partitions and threshold itself, so the arithmetic must be
 * bit-identical everywhere: the partition update uses integers only (load ratios are
 * compared as cross-multiplied 64-bit integers against alpha and beta given in
 * thousandths), and the threshold changes only by multiplying a double by one of three
 * constants fixed at init, a correctly rounded IEEE-754 operation that gives the same bits
 * on every conforming machine. Nothing depends on local data but the gathered counts.
 * scd_exdyna_digest() hashes the shared state so ranks (and tests) can check agreement.
 *
 * Threshold scaling deviates from the paper's Algorithm 5 in one, documented way: inside
 * the band (1/beta, beta] the paper multiplies by 1 + gamma/4 whatever the side, which
 * only ever raises the threshold and parks the density at the band's lower edge 1/beta;
 * here the fine step goes towards the target (x(1 + gamma/4) above it, x(1 - gamma/4)
 * below). Outside the band: x(1 + gamma) when selected/target > beta, x(1 - gamma) when
 * below 1/beta (gamma = 0.005, beta = 1.1: the reference code's values).
 *
 * The start of the threshold is taken from the data by default. The reference's start,
 * 1 / (2 sqrt(k)), assumes gradients of a certain scale: on gradients of unit scale it
 * selects nearly everything, and Algorithm 5's steps of 0.5% need about 1700 iterations
 * to climb to the right threshold (ExDyna on a dense 256 MiB gradient sent 600 MB per
 * step meanwhile). Instead, at the first iteration every rank selects exactly its share
 * k / P inside its partition (the exact k/P-th largest magnitude there, a local radix
 * select), the ranks' thresholds are gathered with the counts, and every rank adopts
 * their lower median: the same bits everywhere, from the same gathered values.
 */
#ifndef SCD_DEVICE_EXDYNA_H
#define SCD_DEVICE_EXDYNA_H

#include "device/sparse.h"

typedef struct scd_exdyna_cfg {
	uint64_t numel;
	uint32_t nranks; /* P */
	uint32_t rank;
	double density;		 /* target: k = round(density * numel) over all ranks */
	uint32_t nblocks;	 /* n_b (ExDyna: 1024) */
	uint32_t blk_move;	 /* blocks moved per adjustment (1) */
	uint32_t alpha_permille; /* load-ratio trigger for moves (1050 = 1.05) */
	uint32_t beta_permille;	 /* threshold band (1100 = 1.1) */
	double gamma;		 /* threshold step (0.005) */
	double init_threshold;	 /* shared start; 0: from the first iteration's data (the
				    default); < 0: 1 / (2 sqrt(k)) as the reference */
} scd_exdyna_cfg_t;

typedef struct scd_exdyna scd_exdyna_t;

scd_exdyna_cfg_t scd_exdyna_cfg_default(uint64_t numel, uint32_t nranks, uint32_t rank,
					double density);
sc_status_t scd_exdyna_create(const scd_exdyna_cfg_t *cfg, scd_exdyna_t **ex_p);
void scd_exdyna_destroy(scd_exdyna_t *ex);

/* The element range [lo, hi) of partition part, and the partition rank owns now. */
void scd_exdyna_part_range(const scd_exdyna_t *ex, uint32_t part, uint64_t *lo_p,
			   uint64_t *hi_p);
uint32_t scd_exdyna_part_of_rank(const scd_exdyna_t *ex, uint32_t rank);

/*
 * Alg. 4 with error feedback: residual += in everywhere, then |acc| >= threshold inside
 * this rank's partition goes to out (ascending) and leaves the residual. in may be NULL
 * (tensor already in residual); residual may be NULL (no error feedback). *count_p is the
 * number selected: the value every rank contributes to the gathered counts.
 */
sc_status_t scd_exdyna_select(scd_exdyna_t *ex, const float *in, float *residual,
			      scd_coo_t *out, uint64_t *count_p);
/*
 * The same selection on an ascending COO list (input and residual already summed: what
 * the residual held is in the list and zero in the residual): entries inside this rank's
 * partition with |v| >= threshold go to out, every other non-zero to dis (what the
 * residual gets). out and dis have room for in->nnz entries; *count_p as above.
 */
sc_status_t scd_exdyna_select_coo(scd_exdyna_t *ex, const scd_coo_t *in, scd_coo_t *out,
				  scd_coo_t *dis, uint64_t *count_p);
/* Whether the threshold is still to be taken from the data (the first iteration with
 * init_threshold 0): the update then needs every rank's proposal, the threshold the
 * rank's selection used (scd_exdyna_proposal, after the selection). */
int scd_exdyna_calibrating(const scd_exdyna_t *ex);
double scd_exdyna_proposal(const scd_exdyna_t *ex);
/* Alg. 3 + 5 from the gathered counts (counts[r]: what rank r selected this iteration),
 * then advances the iteration. proposals[r]: rank r's proposal, needed (else
 * SC_ERR_INVALID) while calibrating, ignored otherwise (may be NULL). */
sc_status_t scd_exdyna_update(scd_exdyna_t *ex, const uint64_t *counts,
			      const double *proposals);

float scd_exdyna_threshold(const scd_exdyna_t *ex);
uint64_t scd_exdyna_target(const scd_exdyna_t *ex);
uint64_t scd_exdyna_iteration(const scd_exdyna_t *ex);
uint32_t scd_exdyna_block_size(const scd_exdyna_t *ex);
/* A hash of the shared state (iteration, partitions, threshold bits). */
uint64_t scd_exdyna_digest(const scd_exdyna_t *ex);

#endif
