/*
 * cost.h: the alpha-beta cost model's inputs, result and shared terms, used to pick a
 * scheme per buffer identically on every rank (docs/schemes.md). Each scheme's own formula
 * lives next to its descriptor, in its file under daemon/scheme/ (scheme/registry.h);
 * this core keeps what they share: the densification curve, message sizes, the hash
 * imbalance, and ZEN's equations as printed.
 *
 * A cost is x alpha + y beta (SparDL sec. II): x the number of sequential message rounds
 * (the exchanges the scheme runs, as its report counts them), y the bytes the busiest rank
 * sends (its report's bytes_sent but for headers and the metadata round); time = x
 * alpha_s + y beta_s_per_byte.
 * Inputs describe one tensor: P ranks, numel float32 elements, per-rank density d_G,
 * densification gamma_G^n (non-zeros of the sum of all P tensors over one tensor's: ZEN
 * Table 4; 1 = perfect overlap, P = disjoint), skew (max / mean non-zeros over P even
 * index ranges: what a range partition suffers; 1 = uniform), and the format of sparse
 * messages where a scheme has a choice.
 *
 * ZEN eq. (1) and (2) assume P a power of two and count only bandwidth; here they carry
 * their rounds too, generalise to any P (scheme_hc.c: the ranks over the largest power of
 * two fold in first and get the result back last, two more rounds), and take the densification
 * after m tensors from gamma_of_m (a measured curve: entries of 0 are not measured, and
 * lie on the log-log line between the nearest measured ones, with gamma(1) = 1 and
 * gamma(P) = gamma_n as its ends), or else from the power law
 * gamma(m) = m^(log gamma_n / log P), which is 1 at m = 1 and gamma_n at m = P (documented
 * assumption).
 *
 * Compute terms. The papers' formulas count the network only. Where a scheme's own work
 * sits on its critical path outside its exchanges, its cost adds it as a named term,
 * from a measured rate in the inputs (0: the paper's formula alone), reported apart in
 * scd_cost_t.work_s: Hierarchical Centralization's scatter of its final aggregate into a
 * dense result (scheme_hc.c); AGsparse's sum of the P lists into the dense result
 * (scheme_allgather.c); Balanced Parallelism's servers' sum of the pushes and every
 * rank's decode of the pull into the dense result (scheme_zen.c); the dense ring's own
 * reduction, (P-1)/P numel elements added once as its reduce-scatter streams
 * (scheme_dense.c); OmniReduce's servers' sums of the non-zero blocks pushed to them
 * (scheme_zen.c). Three rates price them: a non-zero of a final aggregate written into a
 * dense result (scatter), a received non-zero added into an aggregate (sum), and an
 * element of one dense buffer added into another, streamed (dense sum);
 * `sparsecomm-bench rates` measures them on a host. A node that shares its cores with other
 * nodes (an emulated cluster: 4 daemons on 2 cores) does that work cpu_share times slower; the
 * daemons learn it at join (world/host.h).
 */
#ifndef SCD_MODEL_COST_H
#define SCD_MODEL_COST_H

#include <stdint.h>

#include "device/format.h"

typedef struct scd_cost_in {
	uint32_t P;
	uint64_t numel;
	double density;	  /* d_G per rank */
	double gamma_n;	  /* gamma_G^n in [1, P] */
	double skew;	  /* >= 1 */
	double imbalance; /* the scheme's own measured max / mean load (0: unknown) */
	double alpha_s;	  /* latency per message round, seconds */
	double beta_s_per_byte;
	scd_format_t format;	  /* sparse message format (COO, bitmap, hash bitmap) */
	const double *gamma_of_m; /* optional: gamma after m tensors, index m = 1..P (0: not
				     measured) */
	/* what some schemes' formulas take besides (see their files) */
	uint32_t block;	     /* OmniReduce's, S2's bitmap block (0: 256) */
	uint32_t teams;	     /* SparDL team count d (0 or 1: no SAG) */
	uint32_t bsag_teams; /* SparDL: the d at which bsag_hl was measured */
	double bsag_hl;	     /* B-SAG's measured h / L at bsag_teams (0: unknown, h = L) */
	uint32_t sketch_rows, sketch_cols; /* S2 (0: 1 row, cols = union non-zeros) */
	/* compute terms (see above): seconds to write one non-zero of a final aggregate into
	 * a dense result, seconds to add one received non-zero into an aggregate, seconds to
	 * add one element of a dense buffer into another (each 0: that work unpriced, the
	 * papers' and the plain formulas alone), and nodes per core (<= 1: a core each) */
	double scatter_s_per_nnz;
	double sum_s_per_nnz;
	double dense_sum_s_per_elem;
	double cpu_share;
} scd_cost_in_t;

/* The scatter rate measured on the machines of docs/performance.md: a final aggregate of
 * 1.9M non-zeros (zipf, 64M elements, 1%, 4 ranks) into a 256 MiB result took 16-26 ns per
 * non-zero on one core of a loaded 2-core host; HC's work outside its exchanges was 44 ms
 * in a 4-node run, 23 ns per non-zero. */
#define SCD_COST_SCATTER_S_PER_NNZ 20e-9
/* The sum rate, `sparsecomm-bench rates` (zipf, 64M elements, 1%, 4 and 6 ranks: every
 * rank's list scatter-added into a 256 MiB result) on the same loaded host: 7.2 to 15.2 ns
 * per non-zero over five runs, median 9. (Its scatter, 5.5 to 8.7 ns, is below what HC's
 * final scatter costs inside the daemon, whose rate above stays.) */
#define SCD_COST_SUM_S_PER_NNZ 9e-9
/* The dense sum rate, `sparsecomm-bench rates` (reduce_sum of 64M elements into 64M, 256
 * MiB each, streamed) on the same 2-core host at a load average of 2.7: 0.64 to 0.74 ns
 * per element over three runs of five, median 0.68. */
#define SCD_COST_DENSE_SUM_S_PER_ELEM 0.7e-9

typedef struct scd_cost {
	double rounds;	/* x: sequential message rounds */
	double bytes;	/* y: bytes the busiest rank sends */
	double seconds; /* x alpha + y beta + work_s */
	double work_s;	/* the compute terms (0: the network alone) */
	int lossless;	/* 1 when the scheme returns the exact sum */
} scd_cost_t;

/* x rounds and y bytes at in's alpha and beta (.lossless 0: the caller's business). */
scd_cost_t scd_cost_make(const scd_cost_in_t *in, double rounds, double bytes);
/* A compute term: seconds of one core's work, times in's cpu_share when above 1. */
double scd_cost_compute_s(const scd_cost_in_t *in, double one_core_s);
/* Non-zeros per rank, k = min(d_G, 1) numel. */
double scd_cost_nnz(const scd_cost_in_t *in);
/* ceil(log2 P) (0 for P = 1). */
uint32_t scd_ceil_log2(uint32_t P);
/* Densification after aggregating m of the P tensors (see above). */
double scd_cost_gamma(const scd_cost_in_t *in, double m);
/* Bytes of a sparse message of nnz non-zeros over a range of range_elems elements. */
double scd_cost_msg_bytes(scd_format_t fmt, double nnz, double range_elems);
/* ZEN eq. (1) and (2) exactly as printed: bandwidth-only time, M = 4 numel bytes, COO. */
double scd_cost_zen_eq1(uint32_t n, double M_bytes, double d, double gamma_n, double b);
double scd_cost_zen_eq2(uint32_t n, double M_bytes, double d, const double *gamma_pow2,
			double b);
/* The format of a whole-tensor message in format f (a hash bitmap is per partition: it
 * becomes a bitmap). */
scd_format_t scd_cost_whole_format(scd_format_t f);
/* Expected imbalance of hashing nnz balls into P bins (ZEN Theorem 2, constant sqrt 2). */
double scd_cost_hash_imbalance(uint32_t P, double nnz);

#endif
