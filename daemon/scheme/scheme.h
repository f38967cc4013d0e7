/*
 * scheme.h: the collective schemes (layer 3): one entry point that sums a fused buffer over
 * every rank with one of the schemes of the registry (scheme/registry.h, docs/schemes.md),
 * built from the device (layer 1) and the transport (layer 2), plus the choice of scheme
 * from the cost model.
 *
 * Use, per fused buffer (the engine, coll/bufctx.c, which calibrates the costs with
 * measured times before it picks; scd_scheme_choose is the uncalibrated choice):
 *
 *	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(numel, seed);
 *	scd_scheme_ctx_create(&cfg, transport, dev, &ctx);	// once, on the buffer's device
 *	scd_scheme_profile_t prof; scd_scheme_profile_init(&prof, density_hint);
 *	per step:
 *	  s = scd_scheme_choose(ctx, &prof, alpha, beta, lossless_only, pin, &cost);
 *	  io = {.data = buf, .coo = natural ? &coo : NULL, .residual = lossy ? res : NULL};
 *	  st = scd_scheme_run(s, ctx, &io, &report);	// every rank, same s, same order
 *	  scd_scheme_profile_update(&prof, &report);
 *
 * Agreement without messages: every field of the report marked (same) below is identical
 * on every rank (computed from data every rank holds: the gathered counts and the summed
 * result), so a profile fed only with reports, and scd_scheme_choose() fed with that
 * profile and with alpha/beta that the engine agreed on (every rank's probe, averaged
 * through an allreduce), gives the same scheme on every rank. Each run also starts with a small
 * metadata exchange (one round, 40 bytes per peer plus 8 per count: none, one per
 * partition, or one per partition and index range) that carries every rank's non-zero
 * count and checks that all ranks run the same scheme on the same numel at the same step
 * (SC_ERR_MISMATCH otherwise, naming the rank).
 *
 * The result: on success io->data holds, on every rank, the same numel float32 values:
 * for lossless schemes exactly the elementwise sum of the contributions (summed in rank
 * order where the order matters, so every rank gets the same bits); for lossy schemes the
 * scheme's estimate of it.
 *
 * Residuals (error feedback; lossy schemes). For every element i the scheme ADDS to
 * io->residual[i] what of this rank's contribution it did not deliver, so that
 *     sum over ranks of contribution_r[i] == result[i] + sum over ranks of delta_residual_r[i]
 * exactly in real arithmetic (to float rounding in floats; exactly on small integers for
 * SparDL R-SAG/B-SAG and ExDyna, see their files). Which rank holds a discarded value
 * is the scheme's business (SparDL keeps in-procedure discards on the rank that discarded
 * them, as its global residual collection does). The engine adds the residual into the
 * next step's contribution (its sparsifier's error feedback does exactly that). ExDyna is
 * different in one way: it is itself a sparsifier and reads the residual (acc = input +
 * residual, select, the rest stays), so the identity above holds with delta_residual =
 * new - old residual. Lossless schemes never touch io->residual. io->residual NULL for a
 * lossy scheme: the discards are dropped.
 *
 * Threads: a context is used by one thread at a time (the engine's); different contexts
 * may share a transport only if their runs are serialised.
 *
 * Memory: workspaces are sized from numel, P and the data, allocated and pre-faulted on a
 * scheme's first run and grown geometrically when the data need more; in steady state a
 * run allocates nothing. The arrays io names (data, residual, the arrays of coo and out)
 * and the indices scd_scheme_residual_added() gives are the context's device's memory
 * (host memory for the cpu device); the structs themselves are host memory. A scheme
 * touches tensor data only through the device's ops and the transport (docs/design.md).
 */
#ifndef SCD_SCHEME_SCHEME_H
#define SCD_SCHEME_SCHEME_H

#include <stdint.h>

#include "device/device.h"
#include "model/cost.h"
#include "scheme/registry.h"
#include "transport/transport.h"

/* Per-buffer configuration; scd_scheme_cfg_default fills the documented defaults. */
typedef struct scd_scheme_cfg {
	uint64_t numel;	  /* elements of the fused buffer (<= SCD_NUMEL_MAX) */
	uint64_t seed;	  /* shared by all ranks: partition hash, sketch seeds */
	int timeout_ms;	  /* every transport call (<= 0: 30000) */
	unsigned threads; /* device threads (hierarchical hashing), 0: 1 */
	/* lossy schemes */
	double density;		   /* SparDL/ExDyna target per rank: k = density numel
					    (0: SparDL uses the mean input non-zeros; ExDyna 0.01) */
	uint32_t spardl_teams;	   /* SparDL d (0: the divisor of P with the lowest cost) */
	uint32_t sketch_rows;	   /* S2 rows (1) */
	double sketch_cols_factor; /* S2 columns = factor x union non-zeros (2) */
	uint32_t sketch_block;	   /* S2 bitmap block, elements (256) */
	uint32_t omni_block;	   /* OmniReduce block, elements (256) */
	/* ExDyna (device/exdyna.h): n_b, blocks moved, alpha, beta, the cap and the grid in
	 * thousandths (0: off), gamma, the symmetric fine step; the paper's by default */
	uint32_t exdyna_blocks, exdyna_move_blocks;
	uint32_t exdyna_alpha_permille, exdyna_beta_permille;
	uint32_t exdyna_cap_permille, exdyna_grid_permille;
	double exdyna_gamma;
	int exdyna_fine_symmetric;
	/* overlap of computation with communication */
	uint32_t stream_chunk; /* fewest non-zeros per streamed chunk (AGsparse, HC; 32768);
				  Balanced Parallelism: one index range per 32 x as many
				  elements (at most 8) */
	/* the cost model's compute terms (model/cost.h): the scatter, sum and dense sum rates
	 * (SCD_COST_SCATTER_S_PER_NNZ, SCD_COST_SUM_S_PER_NNZ,
	 * SCD_COST_DENSE_SUM_S_PER_ELEM; 0: the papers' network formulas alone) and the
	 * nodes sharing each core (1; the engine's, learnt at join) */
	double scatter_s_per_nnz;
	double sum_s_per_nnz;
	double dense_sum_s_per_elem;
	double cpu_share;
} scd_scheme_cfg_t;

scd_scheme_cfg_t scd_scheme_cfg_default(uint64_t numel, uint64_t seed);

typedef struct scd_scheme_ctx scd_scheme_ctx_t;

/* Creates the context of one fused buffer over transport t (not owned) and device dev
 * (NULL: cpu). Nothing is exchanged. */
sc_status_t scd_scheme_ctx_create(const scd_scheme_cfg_t *cfg, scd_transport_t *t,
				  const scd_device_ops_t *dev, scd_scheme_ctx_t **ctx_p);
void scd_scheme_ctx_destroy(scd_scheme_ctx_t *ctx);
/* Latency and bandwidth the context uses for its own cost-based choices (SparDL's team
 * count when cfg.spardl_teams is 0). Must be identical on every rank. */
void scd_scheme_ctx_set_net(scd_scheme_ctx_t *ctx, double alpha_s, double beta_s_per_byte);
/* The transport the next runs take (a GPU buffer's moves to nccl or back to the mesh
 * between steps; every rank switches at the same step). */
void scd_scheme_ctx_set_transport(scd_scheme_ctx_t *ctx, scd_transport_t *t);
/* Runs so far (the step number the next run uses; per-step seeds derive from it). */
uint64_t scd_scheme_ctx_step(const scd_scheme_ctx_t *ctx);
const scd_scheme_cfg_t *scd_scheme_ctx_cfg(const scd_scheme_ctx_t *ctx);
/* A hash of the state carried across steps that must agree on every rank (the step,
 * ExDyna's partitions and threshold): compare across ranks to detect divergence. SparDL's
 * B-SAG h is shared only by the d ranks of one member position and is not included. */
uint64_t scd_scheme_ctx_digest(const scd_scheme_ctx_t *ctx);

/* One buffer of one step. */
typedef struct scd_scheme_io {
	float *data; /* numel floats: contribution on entry (unless coo), result on exit */
	const scd_coo_t *coo; /* optional contribution as COO (unique indices, ascending);
				 then data is output only */
	float *residual;      /* optional numel floats, lossy schemes only (see above) */
	scd_coo_t *out;	      /* optional, with coo: the result as COO (see below) */
	int track_residual;   /* record where the scheme adds to residual (see below) */
} scd_scheme_io_t;

/*
 * A residual kept sparse. With io->track_residual, a scheme records every index at which
 * it adds to io->residual, so that a caller which folded the residual's non-zeros into
 * io->coo (and zeroed them) knows where the residual is non-zero after the run without
 * reading numel floats. After a successful run, scd_scheme_residual_added() gives those
 * indices (unordered, an index possibly more than once) and returns 1; it returns 0 when
 * the run wrote the residual over the whole tensor (S2) or did not track.
 */
int scd_scheme_residual_added(const scd_scheme_ctx_t *ctx, const uint32_t **idx_p,
			      uint64_t *n_p);

/*
 * Sparse results. With io->out (capacity out->cap, which may be the same arrays as
 * io->coo: the input is consumed first) the result comes back as COO when it fits:
 * out->nnz entries, indices strictly ascending, every index whose sum is non-zero
 * (AGsparse and HC also keep an index whose sum cancelled, as 0), values bit-identical to
 * the dense result; io->data is then scratch with unspecified contents. When the union
 * exceeds out->cap the result is dense in io->data and out->nnz is SCD_RESULT_DENSE.
 * AGsparse merges the ranks' lists directly (nothing of size numel is touched), HC reads
 * its final aggregate's index list, Balanced Parallelism merges the decoded hash bitmaps;
 * the other schemes aggregate densely and the non-zeros are then gathered from io->data.
 */
#define SCD_RESULT_DENSE UINT64_MAX

/* Densification measured at intermediate group sizes (Hierarchical Centralization's
 * aggregates): at most SCD_GAMMA_PTS points per report; a profile keeps the curve for
 * group sizes up to SCD_GAMMA_M_MAX. */
#define SCD_GAMMA_PTS	32
#define SCD_GAMMA_M_MAX 256

typedef struct scd_scheme_report {
	scd_scheme_t scheme;
	int lossless;
	uint64_t step;
	uint64_t bytes_sent, bytes_recv; /* this rank, all phases (transport counters) */
	uint64_t messages;		 /* messages this rank sent */
	uint32_t rounds;		 /* sequential communication rounds */
	uint32_t teams;			 /* SparDL: d used */
	uint32_t bsag_teams;		 /* SparDL: d of the previous B-SAG run (0: none) */
	double bsag_hl;			 /* (same) its h / L, the ranks' mean */
	uint64_t local_nnz;		 /* this rank's contribution's non-zeros */
	uint64_t total_nnz;		 /* (same) sum over ranks of local_nnz */
	uint64_t max_nnz;		 /* (same) largest local_nnz */
	uint64_t union_nnz;		 /* (same) non-zeros of the result */
	double density;			 /* (same) d_G = total_nnz / (P numel) */
	double gamma;			 /* (same) union_nnz / (total_nnz / P), ZEN gamma_G^n */
	/* (same) gamma at group sizes gamma_m[i] < P of the previous run (HC): the union of
	 * an aggregate of m contributions over their mean non-zeros, the ranks' mean */
	uint32_t gamma_pts;
	uint32_t gamma_m[SCD_GAMMA_PTS];
	double gamma_at[SCD_GAMMA_PTS];
	double skew;		   /* (same) max/mean result non-zeros over P even ranges */
	double imbalance;	   /* (same) max/mean load over servers (BP, OmniReduce),
				      over blocks (SparDL) or over ranks' contributions
				      (the others) */
	double elapsed_s;	   /* this rank's wall time in scd_scheme_run */
	double xchg_s;		   /* of it, inside exchanges (waiting on, or moving, bytes) */
	double prev_elapsed_max_s; /* (same) the slowest rank's wall time in the previous
				      run of this context (0 on the first), carried by the
				      metadata round: lets every rank calibrate its cost
				      model on the same measurement */
} scd_scheme_report_t;

/*
 * Sums io over every rank with scheme (every rank calls it with the same scheme, in the
 * same order of buffers). On failure the error is in scd_scheme_error() (naming the peer
 * rank for transport failures) and io->data is unspecified; the transport may be unusable.
 */
sc_status_t scd_scheme_run(scd_scheme_t scheme, scd_scheme_ctx_t *ctx, scd_scheme_io_t *io,
			   scd_scheme_report_t *report_p);

/* The last error of this thread's scheme runs ("" if none). Names, parsing and the
 * schemes' properties: scheme/registry.h. */
const char *scd_scheme_error(void);

/* ---- selection ------------------------------------------------------------------------ */

/* What recent steps looked like, fed only from reports (identical on every rank). */
typedef struct scd_scheme_profile {
	double density; /* d_G */
	double gamma_n; /* gamma_G^n */
	double skew;
	/* per scheme whose cost uses SCD_COST_IMBALANCE: its runs' reported imbalance
	 * (ExDyna: max / mean selection over ranks), averaged; 0: not yet run */
	double imbalance[SCD_SCHEME_COUNT];
	/* SparDL's B-SAG: the h / L its runs reached at bsag_teams teams, averaged (0: none
	 * measured) */
	uint32_t bsag_teams;
	double bsag_hl;
	/* gamma after m tensors, m = 2..SCD_GAMMA_M_MAX, as the runs measured it, averaged
	 * (0: not measured; model/cost.h interpolates between measured entries) */
	double gamma_of_m[SCD_GAMMA_M_MAX + 1];
	uint64_t steps; /* reports folded in */
} scd_scheme_profile_t;

/* Starts a profile from a hint (the tensor's declared density; 1 for dense tensors). */
void scd_scheme_profile_init(scd_scheme_profile_t *pf, double density_hint);
/* Folds a report in: exponential average, weight 1/2 for the newest step (the first
 * report replaces the hint). Sketched schemes' steps (S2) leave gamma and skew alone (a
 * sketch's result is dense inside non-zero blocks, which says nothing about the real
 * union); a scheme's imbalance is folded only from its own steps. */
void scd_scheme_profile_update(scd_scheme_profile_t *pf, const scd_scheme_report_t *r);

/*
 * The scheme to run next: pin >= 0 forces that scheme; otherwise the cheapest by
 * scd_scheme_cost() of the schemes whose descriptor's pick is not SCD_PICK_PINNED (ExDyna
 * is a sparsifier: the engine pins it for SC_SPARSIFY_EXDYNA tensors). lossless_only
 * restricts the choice to the exact schemes. A pure function of its arguments, so
 * identical inputs give the same choice on every rank; ties go to the lower scheme id.
 * cost_p (optional) gets the prediction.
 */
scd_scheme_t scd_scheme_choose(const scd_scheme_ctx_t *ctx, const scd_scheme_profile_t *pf,
			       double alpha_s, double beta_s_per_byte, int lossless_only,
			       int pin, scd_cost_t *cost_p);
/* The cost model's input for a context and profile (format COO; no scheme's settings,
 * no imbalance: scd_scheme_cost adds the scheme's). */
scd_cost_in_t scd_scheme_cost_in(const scd_scheme_ctx_t *ctx, const scd_scheme_profile_t *pf,
				 double alpha_s, double beta_s_per_byte);
/* The predicted cost of one scheme: its descriptor's cost (the message formats, teams and
 * sizes it really uses, from the context) for the profile, plus the metadata round. */
scd_cost_t scd_scheme_cost(const scd_scheme_ctx_t *ctx, scd_scheme_t scheme,
			   const scd_scheme_profile_t *pf, double alpha_s,
			   double beta_s_per_byte);

#endif
