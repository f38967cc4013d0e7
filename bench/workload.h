/*
 * workload.h: deterministic synthetic gradients for the collective benchmark. Every
 * rank's input is a pure function of (seed, rank, step), so any rank can rebuild every
 * other rank's input and compute the exact reference sum itself. All values are small
 * integers held in float32, so every sum the benchmark forms is exact and a lossless
 * scheme must reproduce it bit for bit.
 *
 * Workloads:
 *   zipf     embedding-like natural sparsity (COO input): each rank draws a window of
 *            token ids from a Zipf law over the vocabulary [0, numel) (id 0 the most
 *            frequent) until it holds density x numel distinct ids; an id's value is its
 *            count in the window (capped), like the rows of an embedding gradient. Shared
 *            frequent ids give partial overlap, and the frequency order gives skew
 *            (docs/performance.md: gamma about 3-5 at P 4-8, skew 3-6).
 *   uniform  COO input, uniform index sets with a chosen overlap: a fraction `overlap` of
 *            the ids is common to every rank, the rest private (disjoint across ranks).
 *   topk     a dense gradient (shared component plus a rank-specific one, integer valued,
 *            roughly normal), to be top-k sparsified by the daemon.
 *   kjv      the embedding gradient of a word-level model on the KJV text (the CBOW
 *            example's corpus, as the cost model's kjv profile, bench/profile.h): a
 *            vocab x dim table; rank r of P reads, at step s, a window of batch tokens of
 *            its own shard (the P even shards of the text, the window at offset s batch
 *            modulo the room in the shard: wl_kjv_window, which the profile uses too),
 *            and each distinct word w gives its row w dim .. w dim + dim - 1 the value
 *            count(w) x (1 + column mod 3) (COO input).
 */
#ifndef SC_BENCH_WORKLOAD_H
#define SC_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef enum { WL_ZIPF = 0, WL_UNIFORM = 1, WL_TOPK = 2, WL_KJV = 3 } wl_kind_t;

typedef struct wl_cfg {
	wl_kind_t kind;
	uint64_t numel; /* elements of the tensor (< 2^32) */
	double density; /* target non-zeros per rank / numel (COO workloads) */
	uint64_t seed;	/* shared by every rank */
	int P;		/* ranks */
	double zipf_s;	/* Zipf exponent (zipf), default 1.2 */
	double overlap; /* common fraction of ids (uniform), default 0.3 */
	/* kjv: the text as word ids (not owned), the vocabulary (numel = vocab x dim), the
	 * window of tokens per rank and step */
	const int32_t *tokens;
	size_t n_tokens;
	uint32_t vocab, dim, batch;
} wl_cfg_t;

/* Parses "zipf", "uniform", "topk", "kjv"; 0 on success. */
int wl_parse_kind(const char *s, wl_kind_t *kind_p);
const char *wl_kind_name(wl_kind_t kind);
/* Whether the workload is COO input (zipf, uniform, kjv) rather than dense (topk). */
int wl_is_coo(wl_kind_t kind);

/* Scratch reused across calls (one per thread); wl_scratch_free releases it. */
typedef struct wl_scratch {
	uint64_t *bits;	 /* numel bits */
	uint32_t *draws; /* zipf draws */
	size_t cap_draws;
} wl_scratch_t;
void wl_scratch_free(wl_scratch_t *s);

/*
 * The COO input of rank at step: unique ascending indices and their values; at most cap
 * entries (density x numel x 1.1 + 64 is enough). Returns the number of non-zeros, or -1
 * (out of memory or cap too small).
 */
int64_t wl_coo(const wl_cfg_t *cfg, int rank, uint64_t step, uint32_t *idx, float *val,
	       uint64_t cap, wl_scratch_t *scr);
/* The capacity wl_coo needs. */
uint64_t wl_coo_cap(const wl_cfg_t *cfg);

/* The distinct words of rank r's window of B tokens at step s (see kjv above), in the
 * order of their first occurrence, into rows[0 .. B); returns how many. seen: a clear
 * bitmap of the vocabulary, left clear. The text must hold B tokens a shard. */
uint64_t wl_kjv_window(const int32_t *tokens, size_t n_tokens, uint32_t P, uint32_t r,
		       uint64_t s, uint32_t B, uint64_t *seen, uint32_t *rows);

/* The dense input (topk) of rank at step, elements [lo, hi) into x[0 .. hi-lo). */
void wl_dense(const wl_cfg_t *cfg, int rank, uint64_t step, uint64_t lo, uint64_t hi, float *x);

/* What the P inputs look like together (the characteristics docs/performance.md describes). */
typedef struct wl_shape {
	double density; /* mean non-zeros per rank / numel */
	double gamma;	/* union non-zeros / mean per-rank non-zeros */
	double overlap; /* mean pairwise |A and B| / min(|A|, |B|) over rank pairs */
	double skew;	/* max / mean union non-zeros over P even index ranges */
	uint64_t union_nnz, max_nnz, total_nnz;
} wl_shape_t;

/* Computes the shape of the P COO inputs at step (union through a bitmap). */
int wl_describe(const wl_cfg_t *cfg, uint64_t step, wl_shape_t *shape_p);

#endif
