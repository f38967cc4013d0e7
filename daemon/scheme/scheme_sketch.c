/*
 * scheme_sketch.c: S2 Reducer's sparse-sketch allreduce (S2 paper, Algorithm 1).
 *
 * Each rank encodes its non-zeros into a count-sketch of r rows x c columns plus a block
 * bitmap (device/sketch.h), the sketches are summed by the dense ring allreduce (they are
 * linear), and every rank decodes the same estimate of every element of every non-zero
 * block into the output. Lossy and unbiased over the seeds.
 *
 * Sizes and seeds, identical on every rank without extra messages: c = cols_factor x the
 * previous step's union non-zeros (a field of the last report, the same everywhere), or
 * x the sum of this step's non-zeros (from the metadata round) on the first step, capped
 * at numel. The hash and sign seeds derive from the shared seed and the step number, and
 * the sketch is cleared by every encode (the two defects of the reference code).
 *
 * Residual, precisely: with one row the decode is linear, result = sum over ranks of
 * decode(S_r) restricted to the summed bitmap's non-zero blocks, so rank r's share of the
 * result is applied_r = decode([S_r | summed bitmap]) and it adds contribution_r -
 * applied_r to its residual (its own collision error: zero where its non-zeros did not
 * collide). With r > 1 rows the median is not linear; then applied_r = result / P.
 * Either way sum_r (contribution_r - applied_r) = sum of contributions - result: mass is
 * conserved.
 */
#include "scheme/scheme_internal.h"

#include <math.h>
#include <string.h>

static sc_status_t scd_scheme_s2(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	uint64_t numel = c->cfg.numel;
	sc_status_t st = scd_scheme_local_meta(c, io, SCD_SCHEME_S2_SKETCH);
	if (st != SC_OK)
		return st;
	double base = c->last_union ? (double)c->last_union : (double)c->total_nnz;
	double cols = ceil(c->cfg.sketch_cols_factor * base);
	if (cols > (double)numel)
		cols = (double)numel;
	if (cols < 1)
		cols = 1;
	scd_sketch_cfg_t kc = {.numel = numel,
			       .rows = c->cfg.sketch_rows,
			       .cols = (uint32_t)cols,
			       .block = c->cfg.sketch_block,
			       .seed = scd_seed_derive(c->cfg.seed, 0x5332)};
	if ((st = scd_sketch_cfg_check(&kc)) != SC_OK)
		return scd_scheme_fail(st, "s2: bad sketch geometry");
	uint64_t nf = scd_sketch_floats(&kc), rc = (uint64_t)kc.rows * kc.cols;
	if ((st = scd_ws_reserve(&c->sendbuf, 4 * nf)) != SC_OK ||
	    (st = scd_ws_reserve(&c->recvbuf, 4 * nf)) != SC_OK)
		return st;
	float *S = c->sendbuf.p, *own = c->recvbuf.p;
	if ((st = c->dev->sketch_encode(&kc, c->step, &c->local, S)) != SC_OK)
		return scd_scheme_fail(st, "s2: sketch encode");
	int linear = kc.rows == 1 && io->residual;
	if (linear)
		c->dev->copy(own, S, 4 * rc);
	if ((st = scd_scheme_allreduce(c, S, nf)) != SC_OK)
		return st;
	/* The local COO is a copy of the input (or io->coo): the output may go in now. With
	 * one row, the result and this rank's own share (its residual's part) are decoded in
	 * one pass: one hash per element. */
	float *res = io->residual;
	if (res) {
		c->rtouch_ok = 0; /* written over the whole tensor below */
		c->dev->coo_scatter_add(res, &c->local);
	}
	if (linear) {
		if ((st = c->dev->sketch_decode_apply(&kc, c->step, S, own, io->data, res)) !=
		    SC_OK)
			return scd_scheme_fail(st, "s2: sketch decode");
		return SC_OK;
	}
	if ((st = c->dev->sketch_decode_dense(&kc, c->step, S, io->data)) != SC_OK)
		return scd_scheme_fail(st, "s2: sketch decode");
	if (res)
		c->dev->sub_scaled(res, io->data, numel, 1.0f / (float)c->size);
	return SC_OK;
}

/* ---- descriptor ---------------------------------------------------------------------- */

/* A ring allreduce of r c + ceil(U/B) floats: 2(P-1) rounds, 2 (P-1)/P 4 floats bytes
 * (c default: gamma_n k, the union's non-zeros). */
static scd_cost_t s2_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel, k = scd_cost_nnz(in);
	double B = in->block ? in->block : 256;
	double rows = in->sketch_rows ? in->sketch_rows : 1;
	double cols = in->sketch_cols ? in->sketch_cols : ceil(in->gamma_n * k);
	double floats = rows * cols + ceil(U / B);
	return scd_cost_make(in, 2 * (P - 1), 2 * (P - 1) / P * 4 * floats);
}

/* Sized as the run sizes it: cfg's rows and block, cols_factor x the union (gamma_n d_G
 * numel, the profile's estimate of the last union) columns, 1 to numel. */
static scd_cost_t s2_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *in)
{
	scd_cost_in_t x = *in;
	x.block = c->cfg.sketch_block;
	x.sketch_rows = c->cfg.sketch_rows;
	double cols = ceil(c->cfg.sketch_cols_factor * x.gamma_n * x.density * (double)x.numel);
	if (cols > (double)x.numel)
		cols = (double)x.numel;
	x.sketch_cols = cols < 1 ? 1 : (uint32_t)cols;
	return s2_model(&x);
}

/* Never the engine's own choice: its decode and its residual are dense over every
 * non-zero block, CPU work the network model cannot see (one exploratory step cost tens
 * of seconds on 256 MiB tensors). */
const scd_scheme_desc_t scd_scheme_s2_sketch_desc = {
    .name = "s2_sketch",
    .pick = SCD_PICK_MODEL,
    .uses = SCD_COST_DENSITY | SCD_COST_GAMMA,
    .sketched = 1,
    .run = scd_scheme_s2,
    .model = s2_model,
    .cost = s2_cost,
};
