/* profile.c: gradient profiles for the cost model at any rank count (see profile.h). */
#include "profile.h"

#include "corpus.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct prof_src {
	prof_cfg_t cfg;
	corpus_t corpus; /* kjv */
	int have_corpus;
};

static const char *const kind_names[] = {"given", "zipf", "uniform", "kjv"};

int prof_parse_kind(const char *s, prof_kind_t *kind_p)
{
	for (int k = 0; k < 4; k++)
		if (!strcmp(s, kind_names[k])) {
			*kind_p = (prof_kind_t)k;
			return 0;
		}
	return -1;
}

const char *prof_kind_name(prof_kind_t kind)
{
	return (unsigned)kind < 4 ? kind_names[kind] : "?";
}

prof_src_t *prof_open(prof_cfg_t *cfg)
{
	prof_src_t *s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "model: out of memory\n");
		return NULL;
	}
	if (cfg->kind == PROF_KJV) {
		if (corpus_load(&s->corpus, cfg->text, 1, 0, 1) < 0) {
			fprintf(stderr,
				"model: the kjv profile needs the text (Debian bible-kjv, "
				"or --text FILE)\n");
			free(s);
			return NULL;
		}
		s->have_corpus = 1;
		cfg->numel = (uint64_t)s->corpus.vocab_size * cfg->dim;
	}
	s->cfg = *cfg;
	return s;
}

void prof_close(prof_src_t *src)
{
	if (!src)
		return;
	if (src->have_corpus)
		corpus_free(&src->corpus);
	free(src);
}

/* ---- given -------------------------------------------------------------------------- */

static void given_at(const prof_cfg_t *c, uint32_t P, prof_t *p)
{
	double g;
	if (c->gamma > 0 && c->gamma_ranks > 1)
		g = pow(P, log(c->gamma) / log((double)c->gamma_ranks));
	else if (c->gamma > 0)
		g = c->gamma;
	else
		g = c->overlap + P * (1 - c->overlap);
	*p = (prof_t){.density = c->density,
		      .gamma = g < 1   ? 1
			       : g > P ? P
				       : g,
		      .overlap = c->overlap,
		      .skew = c->skew < 1   ? 1
			      : c->skew > P ? P
					    : c->skew};
}

/* ---- measured: one set of indices per rank, in rank order --------------------------- */

/*
 * The running statistics of P index sets over [0, n) fed in rank order: the union (and
 * its counts over P even ranges), a union per power-of-two block level, and the
 * neighbour overlap (the previous rank's set kept as bits).
 */
typedef struct acc {
	uint32_t P, levels; /* block levels: m = 2^1 .. 2^levels */
	uint64_t n, words;
	uint64_t *all, *prev, **lvl;
	uint64_t *range; /* [P] */
	uint64_t blk_union[32], blk_sum[32];
	double curve_sum[SCD_GAMMA_M_MAX + 1];
	uint32_t curve_n[SCD_GAMMA_M_MAX + 1];
	uint64_t sum, uni, prev_n;
	double ov_sum;
	uint32_t r;
} acc_t;

static int acc_init(acc_t *a, uint32_t P, uint64_t n)
{
	memset(a, 0, sizeof(*a));
	a->P = P, a->n = n, a->words = (n + 63) / 64;
	while ((2u << a->levels) <= P && (2u << a->levels) <= SCD_GAMMA_M_MAX)
		a->levels++;
	a->all = calloc(a->words, 8);
	a->prev = calloc(a->words, 8);
	a->range = calloc(P, 8);
	a->lvl = calloc(a->levels + 1, sizeof(*a->lvl));
	int ok = a->all && a->prev && a->range && a->lvl;
	for (uint32_t l = 1; ok && l <= a->levels; l++)
		ok = (a->lvl[l] = calloc(a->words, 8)) != NULL;
	return ok ? 0 : -1;
}

static void acc_free(acc_t *a)
{
	for (uint32_t l = 1; a->lvl && l <= a->levels; l++)
		free(a->lvl[l]);
	free(a->lvl);
	free(a->all);
	free(a->prev);
	free(a->range);
}

static int set_bit(uint64_t *b, uint64_t i)
{
	uint64_t m = 1ull << (i & 63);
	int was = (b[i >> 6] & m) != 0;
	b[i >> 6] |= m;
	return !was;
}

/* Adds the next rank's set (cnt indices, each < n, no repeats). */
static void acc_add(acc_t *a, const uint32_t *idx, uint64_t cnt)
{
	uint64_t inter = 0;
	for (uint64_t j = 0; j < cnt; j++)
		inter += (a->prev[idx[j] >> 6] >> (idx[j] & 63)) & 1;
	if (a->r > 0 && cnt && a->prev_n)
		a->ov_sum += (double)inter / (double)(cnt < a->prev_n ? cnt : a->prev_n);
	memset(a->prev, 0, a->words * 8);
	for (uint64_t j = 0; j < cnt; j++) {
		set_bit(a->prev, idx[j]);
		if (set_bit(a->all, idx[j]))
			a->uni++, a->range[(uint64_t)idx[j] * a->P / a->n]++;
	}
	a->prev_n = cnt;
	a->sum += cnt;
	for (uint32_t l = 1; l <= a->levels; l++) {
		uint32_t m = 1u << l;
		for (uint64_t j = 0; j < cnt; j++)
			a->blk_union[l] += set_bit(a->lvl[l], idx[j]);
		a->blk_sum[l] += cnt;
		if ((a->r + 1) % m == 0) {
			if (a->blk_sum[l])
				a->curve_sum[m] +=
				    (double)a->blk_union[l] * m / (double)a->blk_sum[l];
			a->curve_n[m]++;
			a->blk_union[l] = a->blk_sum[l] = 0;
			memset(a->lvl[l], 0, a->words * 8);
		}
	}
	a->r++;
}

/* Adds this step's statistics to *p (the caller divides by the steps). */
static void acc_fold(const acc_t *a, prof_t *p)
{
	double mean = (double)a->sum / a->P, rmax = 0;
	for (uint32_t q = 0; q < a->P; q++)
		rmax = fmax(rmax, (double)a->range[q]);
	p->density += mean / (double)a->n;
	p->gamma += mean > 0 ? (double)a->uni / mean : 1;
	p->overlap += a->P > 1 ? a->ov_sum / (a->P - 1) : 1;
	p->skew += a->uni ? rmax / ((double)a->uni / a->P) : 1;
	for (uint32_t m = 2; m <= SCD_GAMMA_M_MAX && m < a->P; m++)
		if (a->curve_n[m])
			p->curve[m] += a->curve_sum[m] / a->curve_n[m];
}

static void prof_scale(prof_t *p, uint32_t P, uint32_t steps)
{
	p->density /= steps, p->gamma /= steps, p->overlap /= steps, p->skew /= steps;
	for (uint32_t m = 2; m <= SCD_GAMMA_M_MAX; m++)
		if ((p->curve[m] /= steps) > 0)
			p->has_curve = 1;
	if (P <= SCD_GAMMA_M_MAX)
		p->curve[P] = p->gamma;
}

/*
 * The workload's profiles at the n sizes P[] (ascending not needed). A zipf rank's input
 * does not depend on P, so each of the largest P's ranks is generated once and fed to
 * every size it belongs to; uniform's private ids do, so it is generated per size.
 */
static int workload_at(const prof_cfg_t *c, const uint32_t *P, int n, prof_t *out)
{
	uint32_t maxP = 0;
	for (int i = 0; i < n; i++)
		maxP = P[i] > maxP ? P[i] : maxP;
	wl_cfg_t w = {.kind = c->kind == PROF_ZIPF ? WL_ZIPF : WL_UNIFORM,
		      .numel = c->numel,
		      .density = c->density,
		      .seed = c->seed,
		      .P = (int)maxP,
		      .zipf_s = c->zipf_s,
		      .overlap = c->overlap};
	if (w.kind == WL_UNIFORM && n > 1) {
		for (int i = 0; i < n; i++)
			if (workload_at(c, &P[i], 1, &out[i]) < 0)
				return -1;
		return 0;
	}
	uint64_t cap = wl_coo_cap(&w);
	uint32_t *idx = malloc(cap * 4);
	float *val = malloc(cap * 4);
	acc_t *a = calloc((size_t)n, sizeof(*a));
	wl_scratch_t scr = {0};
	int rc = idx && val && a ? 0 : -1;
	for (int i = 0; rc == 0 && i < n; i++)
		rc = acc_init(&a[i], P[i], c->numel);
	for (uint32_t r = 0; rc == 0 && r < maxP; r++) {
		int64_t k = wl_coo(&w, (int)r, 0, idx, val, cap, &scr);
		if (k < 0)
			rc = -1;
		for (int i = 0; rc == 0 && i < n; i++)
			if (r < P[i])
				acc_add(&a[i], idx, (uint64_t)k);
	}
	for (int i = 0; rc == 0 && i < n; i++) {
		out[i] = (prof_t){0};
		acc_fold(&a[i], &out[i]);
		prof_scale(&out[i], P[i], 1);
	}
	if (rc < 0)
		fprintf(stderr, "model: out of memory for the %s profile at %u ranks\n",
			prof_kind_name(c->kind), maxP);
	for (int i = 0; a && i < n; i++)
		acc_free(&a[i]);
	free(a);
	wl_scratch_free(&scr);
	free(idx);
	free(val);
	return rc;
}

static int kjv_at(const prof_src_t *src, uint32_t P, prof_t *p)
{
	const prof_cfg_t *c = &src->cfg;
	const corpus_t *cp = &src->corpus;
	uint32_t B = c->batch;
	if (cp->n_tokens / P < B) {
		fprintf(stderr,
			"model: the text's %zu tokens make shards of %zu for %u ranks, fewer "
			"than a window of %u\n",
			cp->n_tokens, cp->n_tokens / P, P, B);
		return -1;
	}
	uint64_t V = cp->vocab_size;
	uint64_t *seen = calloc((V + 63) / 64, 8);
	uint32_t *rows = malloc((size_t)B * 4);
	acc_t a = {0};
	int rc = seen && rows && acc_init(&a, P, V) == 0 ? 0 : -1;
	*p = (prof_t){0};
	for (uint32_t s = 0; rc == 0 && s < c->steps; s++) {
		if (s) { /* a fresh accumulator per step */
			acc_free(&a);
			if (acc_init(&a, P, V) < 0) {
				rc = -1;
				break;
			}
		}
		for (uint32_t r = 0; r < P; r++)
			acc_add(
			    &a, rows,
			    wl_kjv_window(cp->tokens, cp->n_tokens, P, r, s, B, seen, rows));
		acc_fold(&a, p);
	}
	if (rc == 0)
		prof_scale(p, P, c->steps);
	else
		fprintf(stderr, "model: out of memory for the kjv profile at %u ranks\n", P);
	acc_free(&a);
	free(seen);
	free(rows);
	return rc;
}

int prof_at(prof_src_t *src, const uint32_t *P, int n, prof_t *out)
{
	if (src->cfg.kind == PROF_ZIPF || src->cfg.kind == PROF_UNIFORM)
		return workload_at(&src->cfg, P, n, out);
	for (int i = 0; i < n; i++) {
		if (src->cfg.kind == PROF_KJV && kjv_at(src, P[i], &out[i]) < 0)
			return -1;
		if (src->cfg.kind == PROF_GIVEN)
			given_at(&src->cfg, P[i], &out[i]);
	}
	return 0;
}
