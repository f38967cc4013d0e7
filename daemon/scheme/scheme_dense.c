/*
 * scheme_dense.c: the dense ring allreduce (the baseline of ARCHITECTURE.md's table):
 * ring reduce-scatter + allgather through the transport's allreduce_f32, 2(P-1) rounds
 * and 2 (P-1)/P 4 numel bytes per rank. Chosen when the data are dense enough; COO input
 * is scattered into the buffer first.
 */
#include "scheme/scheme_internal.h"

sc_status_t scd_scheme_dense_ring(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	sc_status_t st =
	    scd_scheme_meta(c, SCD_SCHEME_DENSE_RING, scd_scheme_local_nnz(c, io), NULL, 0);
	if (st != SC_OK)
		return st;
	scd_scheme_densify(c, io);
	return scd_scheme_allreduce(c, io->data, c->cfg.numel);
}
