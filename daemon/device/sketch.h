/*
 * sketch.h: S2 Reducer's sparse sketch (S2 paper, Algorithm 1): a count-sketch of r rows
 * x c columns holding the non-zero values, plus a block bitmap saying which blocks of the
 * tensor hold non-zeros. Both are float32 in one array, so the sketches of all ranks are
 * summed by a plain dense allreduce (the bitmap entries become contributor counts; > 0
 * means non-zero). Decoding estimates every element of a non-zero block as the median
 * over rows of s_j(i) S[j][h_j(i)], which is unbiased over the hash seeds.
 *
 * Two defects of the S2 reference code are designed out here: the sketch is cleared by
 * every encode (it never accumulates across steps), and the hash and sign seeds are
 * derived per step from the shared seed (a fixed seed turns the collision error into a
 * fixed bias). Decoding writes the estimates out (COO or dense).
 *
 * Layout: S[0][0..c), ..., S[r-1][0..c), then bitmap[nblocks], nblocks = ceil(numel/block).
 */
#ifndef SCD_DEVICE_SKETCH_H
#define SCD_DEVICE_SKETCH_H

#include "device/sparse.h"

#define SCD_SKETCH_MAX_ROWS 15

typedef struct scd_sketch_cfg {
	uint64_t numel;
	uint32_t rows;	/* r, 1..SCD_SKETCH_MAX_ROWS (S2: 1 is typical) */
	uint32_t cols;	/* c >= 1, sized from the non-zero count */
	uint32_t block; /* elements per bitmap entry (1: exact element bitmap) */
	uint64_t seed;	/* shared by all ranks */
} scd_sketch_cfg_t;

static inline uint64_t scd_sketch_nblocks(const scd_sketch_cfg_t *c)
{
	return (c->numel + c->block - 1) / c->block;
}
/* Floats (and bytes) of the whole sketch: what the allreduce carries. */
static inline uint64_t scd_sketch_floats(const scd_sketch_cfg_t *c)
{
	return (uint64_t)c->rows * c->cols + scd_sketch_nblocks(c);
}
static inline uint64_t scd_sketch_bytes(const scd_sketch_cfg_t *c)
{
	return 4 * scd_sketch_floats(c);
}

sc_status_t scd_sketch_cfg_check(const scd_sketch_cfg_t *cfg);
/* Clears sketch (scd_sketch_floats floats) and inserts src for the given step. */
sc_status_t scd_sketch_encode(const scd_sketch_cfg_t *cfg, uint64_t step, const scd_coo_t *src,
			      float *sketch);
/* Estimates every element of every non-zero block (indices ascending). */
sc_status_t scd_sketch_decode(const scd_sketch_cfg_t *cfg, uint64_t step, const float *sketch,
			      scd_coo_t *out);
/* The same into a dense tensor: dst is zeroed, then estimated elements are written. */
sc_status_t scd_sketch_decode_dense(const scd_sketch_cfg_t *cfg, uint64_t step,
				    const float *sketch, float *dst);
/*
 * One row (rows == 1, else SC_ERR_INVALID): the dense decode of sketch into dst, and in
 * the same pass res[i] -= the estimate of i from own (another sketch of the same
 * geometry and step) for every element i that sketch's bitmap marks; elsewhere dst is 0
 * and res unchanged. The bits of a decode_dense of each followed by res -= the second,
 * with one hash per element and no second tensor-sized array (S2's residual: the
 * result, and what this rank's own sketch contributed to it).
 */
sc_status_t scd_sketch_decode_apply(const scd_sketch_cfg_t *cfg, uint64_t step,
				    const float *sketch, const float *own, float *dst,
				    float *res);

#endif
