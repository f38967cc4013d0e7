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
 * Threshold scaling is the paper's Algorithm 5 by default: outside the band, x(1 + gamma)
 * when selected/target > beta, x(1 - gamma) when below 1/beta; inside the band (1/beta,
 * beta] x(1 + gamma/4) whatever the side (gamma = 0.005, beta = 1.1: the reference code's
 * values), which only ever raises the threshold there and parks the density at the
 * band's lower edge 1/beta. The variant fine_symmetric steps towards the target instead
 * (x(1 + gamma/4) above it, x(1 - gamma/4) below).
 *
 * The start of the threshold is taken from the data by default. The reference's start,
 * 1 / (2 sqrt(k)), assumes gradients of a certain scale: on gradients of unit scale it
 * selects nearly everything, and Algorithm 5's steps of 0.5% need about 1700 iterations
 * to climb to the right threshold (ExDyna on a dense 256 MiB gradient sent 600 MB per
 * step meanwhile). Instead, at the first iteration every rank selects exactly its share
 * k / P inside its partition (the exact k/P-th largest magnitude there, a local radix
 * select), the ranks' thresholds are gathered with the counts, and every rank adopts
 * their lower median: the same bits everywhere, from the same gathered values.
 *
 * Two more variants, off by default (Algorithm 5 alone is the paper's). The grid
 * (recal_permille, 1250 for [1/1.25, 1.25]): the threshold jumps to one taken from the
 * data when an iteration's total count (how many passed the ranks' thresholds) left
 * [1000/recal, recal/1000] x the target. Algorithm 5 follows a gradient whose scale drifts by a
 * fraction of a percent per iteration; it cannot follow a residual that grows faster, nor
 * recover from a start that suits one partition and not the others. With error feedback on
 * gradients uncorrelated from step to step (a dense top-k workload, or the first steps of a
 * training run), every unselected element grows like the square root of its age:
 * ExDyna with Algorithm 5 alone selected over 60% of a 256 MiB tensor after 15
 * iterations, against a target of 1%. So every iteration but the first also counts its
 * partition's magnitudes at a grid of 2 HALF + 1 thresholds around the shared one
 * (SCD_EXDYNA_GRID_*: the threshold's float key plus multiples of STEP, 1/32 of an
 * octave, 4 octaves either side); the counts travel with the gathered counts, and every
 * rank sums them per grid point. When the total is off target, every rank adopts the
 * grid threshold whose summed count is nearest the target, and the partitions are
 * rebalanced by the counts at it. Inside the band Algorithm 5 runs as the paper has it.
 * Integers only, from gathered values only, so every rank decides alike.
 *
 * A threshold still reacts an iteration late, and while the residual is young its tail
 * grows several-fold from one iteration to the next at the same threshold (the top-k
 * workload at 4 ranks: 2-3x in iterations 3 to 15; what a rank's partition holds depends
 * on what that rank selected there P iterations before, so the count also swings with
 * that period). The cap (cap_permille, 1250 with the grid: the band's edge): no rank
 * selects more than cap/1000 times its share: when more pass the threshold, the rank
 * keeps the largest ones (the exact
 * cap-th magnitude among those selected, ties by index) and the rest stays in its
 * residual. Algorithms 3 and 5 and the grid see how many passed the threshold (the words
 * below), not what the cap let through. A threshold that leads the growth instead was
 * tried: it undershot by the swings (an iteration with 1% of the target).
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
	uint32_t recal_permille; /* variant: jump to the grid's threshold when an iteration's
				    passed / target leaves [1000/recal, recal/1000];
				    0 (the default): no grid, Algorithm 5 alone */
	uint32_t cap_permille;	 /* variant: a rank selects at most cap/1000 x its share
				    k / P, the largest magnitudes over the threshold;
				    0 (the default): no cap */
	int fine_symmetric;	 /* variant: inside the band the fine step goes towards the
				    target; 0 (the default): x(1 + gamma/4) as Algorithm 5 */
} scd_exdyna_cfg_t;

typedef struct scd_exdyna scd_exdyna_t;

#define SCD_EXDYNA_GRID_HALF 128
#define SCD_EXDYNA_GRID_STEP (1 << 18)

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
 * residual gets). out and dis have room for in->nnz entries; *count_p as above. dis holds
 * the entries that did not pass, ascending, then the meta[0] - *count_p that passed but
 * were held back by the cap (inside this rank's partition, ascending among themselves).
 */
sc_status_t scd_exdyna_select_coo(scd_exdyna_t *ex, const scd_coo_t *in, scd_coo_t *out,
				  scd_coo_t *dis, uint64_t *count_p);
/* Whether this iteration takes the threshold's start from the data (the first, with
 * init_threshold 0), and how many iterations so far jumped to the grid's threshold. */
int scd_exdyna_calibrating(const scd_exdyna_t *ex);
uint64_t scd_exdyna_jumps(const scd_exdyna_t *ex);
/* This rank's threshold at the calibrating iteration's selection (after it). */
double scd_exdyna_proposal(const scd_exdyna_t *ex);
/* The words this iteration's update needs from every rank (valid after the selection):
 * how many passed the threshold in its partition (before the cap), then the proposal's
 * bits (calibrating) or the 2 HALF + 1 grid counts (recal_permille set). They travel
 * with the gathered counts (the metadata round). */
uint32_t scd_exdyna_meta_words(const scd_exdyna_t *ex);
const uint64_t *scd_exdyna_meta(const scd_exdyna_t *ex);
/* Alg. 3 + 5 from every rank's words (meta[r * meta_words + i]: rank r's i-th), then
 * advances the iteration. SC_ERR_INVALID when a rank's words are no count, no threshold
 * or no count function. */
sc_status_t scd_exdyna_update(scd_exdyna_t *ex, const uint64_t *meta);

float scd_exdyna_threshold(const scd_exdyna_t *ex);
uint64_t scd_exdyna_target(const scd_exdyna_t *ex);
uint64_t scd_exdyna_iteration(const scd_exdyna_t *ex);
uint32_t scd_exdyna_block_size(const scd_exdyna_t *ex);
/* A hash of the shared state (iteration, partitions, threshold bits). */
uint64_t scd_exdyna_digest(const scd_exdyna_t *ex);

#endif
