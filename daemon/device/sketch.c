/*
 * sketch.c: S2 Reducer's count-sketch + block bitmap (see sketch.h; S2 Algorithm 1).
 *
 * Row j's bucket and sign come from one 64-bit hash of the index under the row's seed
 * for this step, seed_j = derive(derive(seed, step), j): high half -> bucket by
 * multiply-shift, lowest bit -> sign. The median over r <= 15 rows is an insertion sort
 * on the stack; with an even r it is the mean of the two middle values.
 */
#include "device/sketch.h"

#include <string.h>

sc_status_t scd_sketch_cfg_check(const scd_sketch_cfg_t *c)
{
	if (!c || c->rows == 0 || c->rows > SCD_SKETCH_MAX_ROWS || c->cols == 0 ||
	    c->block == 0 || c->numel > SCD_NUMEL_MAX)
		return SC_ERR_INVALID;
	return SC_OK;
}

static void row_seeds(const scd_sketch_cfg_t *c, uint64_t step, uint64_t *seeds)
{
	uint64_t s = scd_seed_derive(c->seed, step);
	for (uint32_t j = 0; j < c->rows; j++)
		seeds[j] = scd_seed_derive(s, j);
}

/* Bucket and sign of idx in a row. */
static inline uint32_t row_hash(uint64_t seed, uint32_t idx, uint32_t cols, float *sign_p)
{
	uint64_t h = scd_fmix64((uint64_t)idx ^ seed);
	*sign_p = (h & 1) ? -1.0f : 1.0f;
	return (uint32_t)(((h >> 32) * (uint64_t)cols) >> 32);
}

sc_status_t scd_sketch_encode(const scd_sketch_cfg_t *cfg, uint64_t step, const scd_coo_t *src,
			      float *sketch)
{
	sc_status_t st = scd_sketch_cfg_check(cfg);
	if (st != SC_OK)
		return st;
	uint64_t seeds[SCD_SKETCH_MAX_ROWS];
	row_seeds(cfg, step, seeds);
	memset(sketch, 0, scd_sketch_bytes(cfg)); /* never accumulate across steps */
	float *bitmap = sketch + (uint64_t)cfg->rows * cfg->cols;
	for (uint64_t i = 0; i < src->nnz; i++) {
		uint32_t idx = src->idx[i];
		if (idx >= cfg->numel)
			return SC_ERR_INVALID;
		bitmap[idx / cfg->block] = 1.0f;
		for (uint32_t j = 0; j < cfg->rows; j++) {
			float s;
			uint32_t b = row_hash(seeds[j], idx, cfg->cols, &s);
			sketch[(uint64_t)j * cfg->cols + b] += s * src->val[i];
		}
	}
	return SC_OK;
}

static float median(float *v, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		float x = v[i];
		uint32_t j = i;
		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
	return n & 1 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static float estimate(const scd_sketch_cfg_t *cfg, const uint64_t *seeds, const float *sketch,
		      uint32_t idx)
{
	float est[SCD_SKETCH_MAX_ROWS];
	est[0] = 0.0f; /* rows >= 1; silences -Wmaybe-uninitialized */
	for (uint32_t j = 0; j < cfg->rows; j++) {
		float s;
		uint32_t b = row_hash(seeds[j], idx, cfg->cols, &s);
		est[j] = s * sketch[(uint64_t)j * cfg->cols + b];
	}
	return cfg->rows == 1 ? est[0] : median(est, cfg->rows);
}

/* Calls emit(ctx, idx, estimate) for every element of every non-zero block, ascending. */
static sc_status_t decode_each(const scd_sketch_cfg_t *cfg, uint64_t step, const float *sketch,
			       int (*emit)(void *, uint32_t, float), void *ctx)
{
	sc_status_t st = scd_sketch_cfg_check(cfg);
	if (st != SC_OK)
		return st;
	uint64_t seeds[SCD_SKETCH_MAX_ROWS];
	row_seeds(cfg, step, seeds);
	const float *bitmap = sketch + (uint64_t)cfg->rows * cfg->cols;
	uint64_t nb = scd_sketch_nblocks(cfg);
	for (uint64_t b = 0; b < nb; b++) {
		if (!(bitmap[b] > 0.0f))
			continue;
		uint64_t lo = b * cfg->block, hi = lo + cfg->block;
		if (hi > cfg->numel)
			hi = cfg->numel;
		for (uint64_t i = lo; i < hi; i++)
			if (emit(ctx, (uint32_t)i, estimate(cfg, seeds, sketch, (uint32_t)i)))
				return SC_ERR_LIMIT;
	}
	return SC_OK;
}

static int emit_coo(void *ctx, uint32_t idx, float v)
{
	scd_coo_t *out = ctx;
	if (out->nnz == out->cap)
		return 1;
	out->idx[out->nnz] = idx;
	out->val[out->nnz++] = v;
	return 0;
}

static int emit_dense(void *ctx, uint32_t idx, float v)
{
	((float *)ctx)[idx] = v;
	return 0;
}

sc_status_t scd_sketch_decode(const scd_sketch_cfg_t *cfg, uint64_t step, const float *sketch,
			      scd_coo_t *out)
{
	out->nnz = 0;
	return decode_each(cfg, step, sketch, emit_coo, out);
}

/* One row, straight loops: dst over the marked blocks (zero elsewhere) and, when own is
 * given, res -= own's estimate there. */
#define DECODE_RUN 64
static void decode_row(const scd_sketch_cfg_t *cfg, uint64_t seed, const float *sketch,
		       const float *own, float *restrict dst, float *restrict res)
{
	const float *bitmap = sketch + cfg->cols;
	uint64_t nb = scd_sketch_nblocks(cfg);
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t lo = b * cfg->block, hi = lo + cfg->block;
		if (hi > cfg->numel)
			hi = cfg->numel;
		if (!(bitmap[b] > 0.0f)) {
			memset(dst + lo, 0, 4 * (hi - lo));
			continue;
		}
		/* the buckets of a run first, their lines asked for, then the reads: the
		 * sketch is megabytes, hit at random */
		for (uint64_t r = lo; r < hi; r += DECODE_RUN) {
			uint64_t e = hi - r < DECODE_RUN ? hi - r : DECODE_RUN;
			uint32_t col[DECODE_RUN];
			float sg[DECODE_RUN];
			for (uint64_t j = 0; j < e; j++) {
				col[j] = row_hash(seed, (uint32_t)(r + j), cfg->cols, &sg[j]);
				__builtin_prefetch(sketch + col[j]);
				if (own)
					__builtin_prefetch(own + col[j]);
			}
			for (uint64_t j = 0; j < e; j++) {
				dst[r + j] = sg[j] * sketch[col[j]];
				if (own)
					res[r + j] -= sg[j] * own[col[j]];
			}
		}
	}
}

sc_status_t scd_sketch_decode_dense(const scd_sketch_cfg_t *cfg, uint64_t step,
				    const float *sketch, float *dst)
{
	if (scd_sketch_cfg_check(cfg) != SC_OK)
		return SC_ERR_INVALID;
	if (cfg->rows == 1) {
		uint64_t seed;
		row_seeds(cfg, step, &seed);
		decode_row(cfg, seed, sketch, NULL, dst, NULL);
		return SC_OK;
	}
	memset(dst, 0, 4 * cfg->numel);
	return decode_each(cfg, step, sketch, emit_dense, dst);
}

sc_status_t scd_sketch_decode_apply(const scd_sketch_cfg_t *cfg, uint64_t step,
				    const float *sketch, const float *own, float *dst,
				    float *res)
{
	if (scd_sketch_cfg_check(cfg) != SC_OK || cfg->rows != 1 || !own || !res)
		return SC_ERR_INVALID;
	uint64_t seed;
	row_seeds(cfg, step, &seed);
	decode_row(cfg, seed, sketch, own, dst, res);
	return SC_OK;
}
