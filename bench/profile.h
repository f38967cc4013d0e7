/*
 * profile.h: what a gradient looks like to the cost model (model/cost.h's inputs), for
 * any number of ranks: the per-rank density d_G, the densification gamma (union
 * non-zeros over the mean per rank, ZEN's gamma_G^n), the pairwise overlap, the skew (max
 * / mean union non-zeros over P even index ranges) and gamma after m contributions at the
 * group sizes Hierarchical Centralization's aggregates reach (the curve its runs teach
 * the daemon's profile, scheme.h). `sparsecomm-bench model` prices every scheme from it.
 *
 * Sources:
 *   given    the numbers themselves: d_G, and gamma as a value (capped at P), as gamma_0
 *            at P_0 ranks (the power law gamma(P) = P^(log gamma_0 / log P_0), model/cost.h's
 *            assumption between sizes), or from an overlap o (a fraction o common to
 *            every rank, the rest private: gamma = o + P (1 - o), the uniform workload's
 *            construction); a skew (capped at P).
 *   zipf, uniform  the benchmark's workloads (workload.h), generated for P ranks and
 *            measured (step 0: the step the collective benchmark feeds every time).
 *   kjv      the embedding gradient of a word-level model on the King James Bible text
 *            (`bible`, the corpus of examples/cbow/): the vocabulary ordered by
 *            frequency, each rank a window of B tokens of its own shard per step, the
 *            non-zero rows the distinct words of the window; averages over the steps.
 *
 * Measured profiles take the overlap over neighbouring ranks (r, r + 1), a sample that
 * stays cheap at 1024 ranks, and the curve at the powers of two m <= P (the mean over the
 * P/m blocks of m consecutive ranks, HC's groups) and at m = P.
 */
#ifndef SC_BENCH_PROFILE_H
#define SC_BENCH_PROFILE_H

#include <stdint.h>

#include "scheme/scheme.h"
#include "workload.h"

typedef enum { PROF_GIVEN = 0, PROF_ZIPF, PROF_UNIFORM, PROF_KJV } prof_kind_t;

typedef struct prof_cfg {
	prof_kind_t kind;
	uint64_t numel; /* given, zipf, uniform; kjv: vocabulary x dim (set by prof_open) */
	double density; /* given, zipf, uniform */
	double gamma;	/* given: gamma at gamma_ranks (0: from overlap) */
	uint32_t gamma_ranks;	    /* 0: gamma is the value at every P (capped at P) */
	double overlap;		    /* given (when gamma is 0), uniform */
	double skew;		    /* given */
	double zipf_s;		    /* zipf */
	uint64_t seed;		    /* zipf, uniform */
	uint32_t batch, dim, steps; /* kjv: window B, embedding width, steps averaged */
	const char *text;	    /* kjv: a text file instead of `bible`'s output */
} prof_cfg_t;

typedef struct prof {
	double density, gamma, overlap, skew;
	/* gamma after m contributions, m = 2..SCD_GAMMA_M_MAX (0: not measured) */
	double curve[SCD_GAMMA_M_MAX + 1];
	int has_curve;
} prof_t;

typedef struct prof_src prof_src_t;

/* Parses "given", "zipf", "uniform", "kjv"; 0 on success. */
int prof_parse_kind(const char *s, prof_kind_t *kind_p);
const char *prof_kind_name(prof_kind_t kind);
/* Prepares a source (loads the text for kjv and sets cfg->numel); NULL after printing
 * why. */
prof_src_t *prof_open(prof_cfg_t *cfg);
void prof_close(prof_src_t *src);
/* The profiles at the n rank counts P[] into out[]; 0, or -1 after printing why (no
 * memory, a text too short for P windows). */
int prof_at(prof_src_t *src, const uint32_t *P, int n, prof_t *out);

#endif
