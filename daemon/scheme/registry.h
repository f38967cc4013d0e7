/*
 * registry.h: the collective schemes as plug-ins (docs/schemes.md). Each scheme is one
 * file, daemon/scheme/scheme_<name>.c, that ends with its descriptor (scd_scheme_desc_t:
 * name, properties, run function, alpha-beta cost), and SCD_SCHEMES below is the one list
 * of them. The list makes both the scheme ids (scd_scheme_t) and the table (scd_schemes[])
 * that everything else reads: the dispatch of scd_scheme_run, the names and their
 * parsing, the cost model's choices, the engine, the tests and the benchmark.
 *
 * Adding a scheme:
 *   1. write daemon/scheme/scheme_<name>.c: its run function (scheme_internal.h's
 *      helpers; its metadata round names SCD_SCHEME_<ID>), the formula of its cost, and at
 *      the end  const scd_scheme_desc_t scd_scheme_<name>_desc = {.name = "<name>", ...};
 *   2. add X(<ID>, <name>) at the end of SCD_SCHEMES.
 * Nothing else. Ids are positions in the list and travel between daemons (the metadata
 * round checks that every rank runs the same scheme) and in statistics: a new scheme goes
 * at the end, and no line ever moves.
 */
#ifndef SCD_SCHEME_REGISTRY_H
#define SCD_SCHEME_REGISTRY_H

#include "model/cost.h"
#include "sparsecomm.h"

/* X(ID, name): the id is SCD_SCHEME_<ID>, the descriptor scd_scheme_<name>_desc. */
#define SCD_SCHEMES(X)                                                                         \
	X(DENSE_RING, dense_ring)     /* scheme_dense.c */                                     \
	X(AGSPARSE, agsparse)	      /* scheme_allgather.c */                                 \
	X(HIER_CENTRAL, hier_central) /* scheme_hc.c: ZEN Def. 7, eq. (2) */                   \
	X(BALANCED_PAR, balanced_par) /* scheme_zen.c: ZEN Def. 6, eq. (1) */                  \
	X(OMNIREDUCE, omnireduce)     /* scheme_zen.c */                                       \
	X(SPARDL, spardl)	      /* scheme_spardl.c */                                    \
	X(S2_SKETCH, s2_sketch)	      /* scheme_sketch.c */                                    \
	X(EXDYNA, exdyna)	      /* scheme_exdyna.c */                                    \
	X(EXDYNA_OWNER, exdyna_owner) /* scheme_exdyna.c: each rank's own values only */       \
				      /* a new scheme: one line X(ID, name) above this one */

typedef enum {
#define SCD_SCHEME_ID_(id, name) SCD_SCHEME_##id,
	SCD_SCHEMES(SCD_SCHEME_ID_)
#undef SCD_SCHEME_ID_
	    SCD_SCHEME_COUNT
} scd_scheme_t;

typedef struct scd_scheme_ctx scd_scheme_ctx_t;
typedef struct scd_scheme_io scd_scheme_io_t;

/* Which automatic choices may pick a scheme (a pin always runs it). */
typedef enum {
	SCD_PICK_AUTO = 0, /* the cost model's (scd_scheme_choose) and the engine's */
	SCD_PICK_MODEL,	   /* scd_scheme_choose's, not the engine's: CPU work the network
			      model cannot see can cost far more than the scheme's bytes */
	SCD_PICK_PINNED,   /* only when pinned */
} scd_scheme_pick_t;

/* The profile inputs a scheme's cost reads (scd_scheme_desc_t.uses); P, numel, alpha and
 * beta every cost gets. An input a scheme does not name must not change its cost. */
#define SCD_COST_DENSITY (1u << 0) /* d_G */
#define SCD_COST_GAMMA	 (1u << 1) /* gamma_G^n (and the curve gamma_of_m) */
#define SCD_COST_SKEW	 (1u << 2) /* non-zeros' skew over P even index ranges */
/* the imbalance its own runs reported (the profile keeps one average per such scheme; 0
 * before any) */
#define SCD_COST_IMBALANCE (1u << 3)

typedef struct scd_scheme_desc {
	const char *name; /* in configuration, pins, statistics, logs */
	int lossless;	  /* returns the exact sum (else it takes a residual) */
	scd_scheme_pick_t pick;
	unsigned uses; /* SCD_COST_* */
	/* Its result's non-zeros are not the union of the contributions (a sketch decodes
	 * every element of every non-zero block): its reports leave the profile's gamma and
	 * skew alone and do not size the next sketch. */
	int sketched;
	/* Tensors with this sparsifier run this scheme, pinned: the scheme selects, with
	 * error feedback, itself (it reads the residual). SC_SPARSIFY_NONE: none. When several
	 * schemes name a sparsifier, the first in the list is its default and the others run
	 * where a pin names them. */
	sc_sparsifier_t sparsifier;
	/* Given COO input and io->out, it builds the sparse result from the lists it merges
	 * (scheme.h, "Sparse results"); the others gather it from their dense result, a pass
	 * over io->data. */
	int lists_out;
	/* Sums io over every rank (scd_scheme_run has checked the arguments, reset the
	 * counters, and builds the report from the context afterwards). */
	sc_status_t (*run)(scd_scheme_ctx_t *c, scd_scheme_io_t *io);
	/* The formula: rounds x (the exchange rounds the run counts, less the metadata
	 * round) and bytes y the busiest rank sends (scd_cost_make), for in exactly as given
	 * (its format, teams, block, sketch size); tests/unit/test_scheme_model.c holds each
	 * to its scheme's runs. Called with P >= 2 only. */
	scd_cost_t (*model)(const scd_cost_in_t *in);
	/* Optional: the cost of what the scheme really runs in context c: fills in the
	 * choices the scheme makes itself (message format, teams, sketch size, block, from
	 * c's configuration), then applies its model. NULL: model(in). P >= 2 only. */
	scd_cost_t (*cost)(const scd_scheme_ctx_t *c, const scd_cost_in_t *in);
} scd_scheme_desc_t;

#define SCD_SCHEME_DESC_(id, name) extern const scd_scheme_desc_t scd_scheme_##name##_desc;
SCD_SCHEMES(SCD_SCHEME_DESC_)
#undef SCD_SCHEME_DESC_

/* The registry: scd_schemes[SCD_SCHEME_<ID>] = &scd_scheme_<name>_desc. */
extern const scd_scheme_desc_t *const scd_schemes[SCD_SCHEME_COUNT];

/* The descriptor of s, NULL when s is no scheme. */
const scd_scheme_desc_t *scd_scheme_desc(scd_scheme_t s);
/* Its name ("unknown" when s is no scheme). */
const char *scd_scheme_name(scd_scheme_t s);
/* Whether a scheme returns the exact sum. */
int scd_scheme_lossless(scd_scheme_t s);
/* Parses a scheme name (scd_scheme_name's); 0 on success. */
int scd_scheme_parse(const char *name, scd_scheme_t *s_p);
/* The scheme that tensors with sparsifier sp are pinned to by default (the first that
 * names it), -1 if none. */
int scd_scheme_of_sparsifier(sc_sparsifier_t sp);

/* A scheme's model for in as given, 0 for P <= 1 (infinite for no scheme); lossless from
 * the descriptor. */
scd_cost_t scd_cost_scheme(scd_scheme_t s, const scd_cost_in_t *in);
/* The scheme with the cheapest model for in (every scheme, pinned-only ones included);
 * lossless_only restricts the choice; ties go to the lower id. */
scd_scheme_t scd_cost_best(const scd_cost_in_t *in, int lossless_only, scd_cost_t *cost_p);
/* For a scheme's cost: the cheaper of model with COO and with bitmap messages (what a
 * scheme that sends whichever encoding is smaller pays, scheme_msg.c). */
scd_cost_t scd_cost_coo_or_bitmap(scd_cost_t (*model)(const scd_cost_in_t *in),
				  const scd_cost_in_t *in);
/* The compute terms of AGsparse's, Balanced Parallelism's, the dense ring's and
 * OmniReduce's costs (their files), in seconds: 0 where their rates are 0. */
double scd_agsparse_work_s(const scd_cost_in_t *in);
double scd_balanced_par_work_s(const scd_cost_in_t *in);
double scd_dense_ring_work_s(const scd_cost_in_t *in);
double scd_omnireduce_work_s(const scd_cost_in_t *in);

#endif
