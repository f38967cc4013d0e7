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

/*
 * Beside the ring's network formula, one compute term (model/cost.h): its reduce-scatter
 * adds every chunk it receives into the rank's own, (P-1)/P U elements in all, each once,
 * streamed at the dense sum rate. The transport pipelines the additions with the
 * transfers, but a node that shares its cores with others has no idle core to hide them
 * on, as the sparse schemes' sums; the allgather half only copies.
 */
double scd_dense_ring_work_s(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel;
	return scd_cost_compute_s(in, (P - 1) / P * U * in->dense_sum_s_per_elem);
}

/* 2(P-1) rounds; 2 (P-1)/P 4U bytes (reduce-scatter + allgather), U = numel. */
static scd_cost_t dense_ring_model(const scd_cost_in_t *in)
{
	double P = in->P, U = (double)in->numel;
	scd_cost_t r = scd_cost_make(in, 2 * (P - 1), 2 * (P - 1) / P * 4 * U);
	r.work_s = scd_dense_ring_work_s(in);
	r.seconds += r.work_s;
	return r;
}

const scd_scheme_desc_t scd_scheme_dense_ring_desc = {
    .name = "dense_ring",
    .lossless = 1,
    .run = scd_scheme_dense_ring,
    .model = dense_ring_model,
};
