/*
 * scheme_dense.c: the dense ring allreduce (the baseline of docs/schemes.md's table):
 * ring reduce-scatter + allgather through the transport's allreduce_f32, 2(P-1) rounds
 * and 2 (P-1)/P 4 numel bytes per rank. Chosen when the data are dense enough; COO input
 * is scattered into the buffer first.
 */
#include "scheme/scheme_internal.h"

static sc_status_t scd_scheme_dense_ring(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	sc_status_t st =
	    scd_scheme_meta(c, SCD_SCHEME_DENSE_RING, scd_scheme_local_nnz(c, io), NULL, 0);
	if (st != SC_OK)
		return st;
	scd_scheme_densify(c, io);
	return scd_scheme_allreduce(c, io->data, c->cfg.numel);
}

/* ---- descriptor ---------------------------------------------------------------------- */

/* 2(P-1) rounds; 2 (P-1)/P 4U bytes (reduce-scatter + allgather), U = numel. */
static scd_cost_t dense_ring_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel;
	return scd_cost_make(in, 2 * (P - 1), 2 * (P - 1) / P * 4 * U);
}

const scd_scheme_desc_t scd_scheme_dense_ring_desc = {
    .name = "dense_ring",
    .lossless = 1,
    .run = scd_scheme_dense_ring,
    .model = dense_ring_model,
};
