/*
 * scheme_exdyna.c: ExDyna's exchange (ExDyna paper, sec. IV): the device's ExDyna
 * sparsifier selects, with error feedback, only inside this rank's exclusive partition
 * (so the ranks' index sets are disjoint), then
 *   1. the counts are gathered (the metadata round carries them),
 *   2. the indices are all-gathered (one exchange_v; each receive sized by its count),
 *   3. the values are reduced at the union: a vector of K = sum of counts floats, this
 *      rank's values in its own segment (segments in rank order) and zeros elsewhere, is
 *      summed by the ring allreduce, and every rank scatters the K values into the output,
 *   4. every rank updates partitions and threshold from the gathered counts, integer and
 *      correctly rounded arithmetic only (device/exdyna.h), so the state stays
 *      bit-identical across ranks (the metadata round checks the step; tests check the
 *      digest).
 * A value is added to zeros only, so the output holds the selected values exactly, and
 * what was not selected stays in the residual: acc = input + residual, residual = acc -
 * selected. This scheme reads the residual (it is the sparsifier); io->residual NULL runs
 * it without error feedback.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

sc_status_t scd_scheme_exdyna(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st;
	if (!c->ex) {
		double d = c->cfg.density > 0 ? c->cfg.density : 0.01;
		scd_exdyna_cfg_t ec =
		    scd_exdyna_cfg_default(numel, (uint32_t)P, (uint32_t)me, d);
		if ((st = c->dev->exdyna_create(&ec, &c->ex)) != SC_OK)
			return scd_scheme_fail(st, "exdyna: create over %llu elements",
					       (unsigned long long)numel);
	}
	scd_scheme_densify(c, io);
	/* The selection is at most one partition, at most numel. */
	uint64_t lo, hi;
	scd_exdyna_part_range(c->ex, scd_exdyna_part_of_rank(c->ex, (uint32_t)me), &lo, &hi);
	if ((st = scd_ws_reserve(&c->lidx, 4 * (hi - lo) + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->lval, 4 * (hi - lo) + 4)) != SC_OK)
		return st;
	scd_coo_t sel = {c->lidx.p, c->lval.p, 0, hi - lo + 1};
	uint64_t count = 0;
	if ((st = c->dev->exdyna_select(c->ex, io->data, io->residual, &sel, &count)) != SC_OK)
		return scd_scheme_fail(st, "exdyna: select");
	if ((st = scd_scheme_meta(c, SCD_SCHEME_EXDYNA, sel.nnz, NULL, 0)) != SC_OK)
		return st;
	uint64_t K = c->total_nnz, seg = 0;
	for (int q = 0; q < me; q++)
		seg += c->nnz[q];
	if ((st = scd_ws_reserve(&c->aidx, 4 * K + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, 4 * K + 4)) != SC_OK)
		return st;
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	/* indices: all-gather straight into place, segments in rank order */
	memcpy(idx + seg, sel.idx, 4 * sel.nnz);
	int n = 0;
	for (uint64_t q = 0, qs = 0; q < (uint64_t)P; qs += c->nnz[q], q++) {
		if ((int)q == me)
			continue;
		c->sends[n] = (scd_xfer_t){(int)q, sel.idx, 4 * sel.nnz};
		c->recvs[n] = (scd_xfer_t){(int)q, idx + qs, 4 * c->nnz[q]};
		n++;
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	for (int q = 0, j = 0; q < P; q++)
		if (q != me && c->rbytes[j++] != 4 * c->nnz[q])
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "exdyna: rank %d sent a wrong index count", q);
	/* values: reduced at the union */
	memset(val, 0, 4 * K);
	memcpy(val + seg, sel.val, 4 * sel.nnz);
	if ((st = scd_scheme_allreduce(c, val, K)) != SC_OK)
		return st;
	memset(io->data, 0, 4 * numel);
	for (uint64_t i = 0; i < K; i++) {
		if (idx[i] >= numel)
			return scd_scheme_fail(SC_ERR_PROTOCOL, "exdyna: index %u out of range",
					       idx[i]);
		io->data[idx[i]] += val[i];
	}
	if ((st = c->dev->exdyna_update(c->ex, c->nnz)) != SC_OK)
		return scd_scheme_fail(st, "exdyna: update");
	return SC_OK;
}
