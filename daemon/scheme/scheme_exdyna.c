/*
 * scheme_exdyna.c: ExDyna's exchange (ExDyna paper, sec. IV, Algorithm 1 lines 11-13): the
 * device's ExDyna sparsifier selects, with error feedback, only inside this rank's
 * exclusive partition (so the ranks' index sets are disjoint), then
 *   1. the counts are gathered (the metadata round carries them, and the words ExDyna's
 *      update needs: how many passed each rank's threshold, before the cap of 1.25 times
 *      its share, then a threshold proposal or counts at a grid of thresholds,
 *      exdyna.h),
 *   2. the indices are all-gathered in one exchange (each receive sized by its count),
 *      straight into place: the union U of K = sum of counts indices, segments in rank
 *      order,
 *   3. every rank takes ITS accumulated value at every index of U: its own selection in
 *      its own segment, and in the other segments what its accumulator holds there (the
 *      residual, or the input without error feedback, or the list's entry for COO input),
 *      zeroing it there; the K values are summed over the ranks in one ring allreduce
 *      (2 (P-1) / P x 4K bytes), so the result at U is the sum of EVERY rank's
 *      accumulated value, which then leaves every rank's accumulator,
 *   4. every rank scatters the K sums into the output,
 *   5. every rank updates partitions and threshold from the gathered counts, integer and
 *      correctly rounded arithmetic only (device/exdyna.h), so the state stays
 *      bit-identical across ranks (the metadata round checks the step; tests check the
 *      digest).
 * Per rank: 4 (P-1) k index bytes and 8 (P-1) k value bytes, k the mean count. When one
 * rank selected over twice the mean (ExDyna's partitions move whole blocks of numel / 1024
 * elements, and a Zipf-distributed embedding's hottest block alone can hold most of the
 * selection), step 2 would make that rank send its indices P - 1 times over its one link.
 * Then the indices ride a ring too: K 32-bit words, each rank's indices in its own segment
 * and zeros elsewhere, summed as integers (adding zeros moves bits exactly), which spreads
 * the hot segment over every link. (A rank selects at most 1.25 times its share,
 * exdyna.h, so this takes a selection that left the other ranks well under theirs.)
 * Conservation: what is not summed stays in the accumulator, acc = input + residual,
 * residual = acc - what this rank contributed at U. This scheme reads the residual (it is
 * the sparsifier); io->residual NULL runs it without error feedback.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

/* The gathered indices (segments in rank order) lie each in its rank's partition,
 * ascending: a segment that does not would make the gathers and the output wrong. */
static sc_status_t exdyna_check(scd_scheme_ctx_t *c, const uint32_t *idx)
{
	int P = c->size;
	uint64_t *seg = c->hoff; /* [P + 1]: segment starts */
	seg[0] = 0;
	for (int q = 0; q < P; q++) {
		seg[q + 1] = seg[q] + c->nnz[q];
		uint64_t lo, hi;
		scd_exdyna_part_range(c->ex, scd_exdyna_part_of_rank(c->ex, (uint32_t)q), &lo,
				      &hi);
		uint64_t n = seg[q + 1] - seg[q],
			 j = c->dev->idx_check_range(idx + seg[q], n, lo, hi);
		if (j < n) {
			uint32_t bad;
			c->dev->to_host(&bad, idx + seg[q] + j, 4);
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "exdyna: rank %d sent index %u outside its "
					       "partition [%llu, %llu) or out of order",
					       q, bad, (unsigned long long)lo,
					       (unsigned long long)hi);
		}
	}
	return SC_OK;
}

/* Scatters the K = total_nnz summed values at the gathered indices (exdyna_check's
 * segments) into io->data, or, for a sparse result, concatenates the segments in
 * partition order into io->out. */
static sc_status_t exdyna_output(scd_scheme_ctx_t *c, scd_scheme_io_t *io, const uint32_t *idx,
				 const float *val)
{
	int P = c->size;
	uint64_t numel = c->cfg.numel, K = c->total_nnz;
	const uint64_t *seg = c->hoff;
	if (!scd_scheme_sparse_out(io, K)) {
		c->dev->clear(io->data, 4 * numel);
		scd_coo_t all = {(uint32_t *)idx, (float *)val, K, K};
		c->dev->coo_scatter_add(io->data, &all);
		return SC_OK;
	}
	/* partitions in index order: part p covers the p-th range, rank q holds part_of_rank */
	uint64_t w = 0;
	for (uint32_t p = 0; p < (uint32_t)P; p++)
		for (int q = 0; q < P; q++)
			if (scd_exdyna_part_of_rank(c->ex, (uint32_t)q) == p) {
				uint64_t n = seg[q + 1] - seg[q];
				c->dev->copy(io->out->idx + w, idx + seg[q], 4 * n);
				c->dev->copy(io->out->val + w, val + seg[q], 4 * n);
				w += n;
			}
	io->out->nnz = w;
	c->res_ready = 1;
	return SC_OK;
}

/* The selection inside this rank's partition (sel; for COO input, the rest in dis) and the
 * metadata round that gathers the counts and ExDyna's words, for scheme id. */
static sc_status_t exdyna_select_round(scd_scheme_ctx_t *c, scd_scheme_io_t *io,
				       scd_scheme_t id, scd_coo_t *sel_p, scd_coo_t *dis_p,
				       uint64_t *count_p)
{
	int P = c->size, me = c->rank;
	uint64_t numel = c->cfg.numel;
	sc_status_t st;
	if (!c->ex) {
		double d = c->cfg.density > 0 ? c->cfg.density : 0.01;
		scd_exdyna_cfg_t ec =
		    scd_exdyna_cfg_default(numel, (uint32_t)P, (uint32_t)me, d);
		ec.nblocks = c->cfg.exdyna_blocks;
		ec.blk_move = c->cfg.exdyna_move_blocks;
		ec.alpha_permille = c->cfg.exdyna_alpha_permille;
		ec.beta_permille = c->cfg.exdyna_beta_permille;
		ec.cap_permille = c->cfg.exdyna_cap_permille;
		ec.recal_permille = c->cfg.exdyna_grid_permille;
		ec.gamma = c->cfg.exdyna_gamma;
		ec.fine_symmetric = c->cfg.exdyna_fine_symmetric;
		if ((st = c->dev->exdyna_create(&ec, &c->ex)) != SC_OK)
			return scd_scheme_fail(st, "exdyna: create over %llu elements",
					       (unsigned long long)numel);
	}
	/* The selection is at most one partition, at most numel (or the list). */
	uint64_t lo, hi;
	scd_exdyna_part_range(c->ex, scd_exdyna_part_of_rank(c->ex, (uint32_t)me), &lo, &hi);
	uint64_t cap = io->coo ? io->coo->nnz + 1 : hi - lo + 1;
	if ((st = scd_ws_reserve(&c->lidx, 4 * cap)) != SC_OK ||
	    (st = scd_ws_reserve(&c->lval, 4 * cap)) != SC_OK)
		return st;
	scd_coo_t sel = {c->lidx.p, c->lval.p, 0, cap}, dis = {0};
	uint64_t count = 0;
	if (io->coo) {
		/* the list already holds the residual's non-zeros (folded in by the caller);
		 * what is not selected (dis) goes back to it after the union took its share */
		if ((st = scd_ws_reserve(&c->hidx, 4 * cap)) != SC_OK ||
		    (st = scd_ws_reserve(&c->hval, 4 * cap)) != SC_OK)
			return st;
		dis = (scd_coo_t){c->hidx.p, c->hval.p, 0, cap};
		if ((st = c->dev->exdyna_select_coo(c->ex, io->coo, &sel, &dis, &count)) !=
		    SC_OK)
			return scd_scheme_fail(st, "exdyna: select");
	} else {
		c->rtouch_ok = 0; /* the residual is written over the whole tensor */
		if ((st = c->dev->exdyna_select(c->ex, io->data, io->residual, &sel, &count)) !=
		    SC_OK)
			return scd_scheme_fail(st, "exdyna: select");
	}
	uint32_t words = scd_exdyna_meta_words(c->ex);
	if ((st = scd_scheme_meta(c, id, sel.nnz, scd_exdyna_meta(c->ex), words)) != SC_OK)
		return st;
	*sel_p = sel;
	*dis_p = dis;
	*count_p = count;
	return SC_OK;
}

/*
 * Gathers every rank's selection into place: K = total_nnz indices (and, with values, the
 * K values) in segments in rank order, *seg_p this rank's segment's start. Balanced
 * counts travel in one exchange. A selection over twice the mean (a hot block the
 * partitions cannot split) would make its rank send it P - 1 times: then the words ride
 * an integer ring allreduce, each rank's in its own segment and zeros elsewhere, whose sum
 * is every segment exactly (a float's bits move unchanged).
 */
static sc_status_t exdyna_gather(scd_scheme_ctx_t *c, const scd_coo_t *sel, int values,
				 const char *what, uint64_t *seg_p)
{
	int P = c->size, me = c->rank;
	uint64_t K = c->total_nnz, seg = 0;
	for (int q = 0; q < me; q++)
		seg += c->nnz[q];
	*seg_p = seg;
	int ring = c->max_nnz * (uint64_t)P > 2 * K;
	sc_status_t st;
	if ((st = scd_ws_reserve(&c->aidx, 4 * (ring && values ? 2 * K : K) + 4)) != SC_OK ||
	    (st = scd_ws_reserve(&c->aval, 4 * K + 4)) != SC_OK)
		return st;
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	if (ring) {
		uint64_t words = values ? 2 * K : K;
		c->dev->clear(idx, 4 * words);
		c->dev->copy(idx + seg, sel->idx, 4 * sel->nnz);
		if (values)
			c->dev->copy(idx + K + seg, sel->val, 4 * sel->nnz);
		if ((st = scd_scheme_allreduce_typed(c, idx, words, SC_INT32)) != SC_OK)
			return st;
		if (values)
			c->dev->copy(val, idx + K, 4 * K);
		return SC_OK;
	}
	c->dev->copy(idx + seg, sel->idx, 4 * sel->nnz);
	if (values)
		c->dev->copy(val + seg, sel->val, 4 * sel->nnz);
	int n = 0;
	for (uint64_t q = 0, qs = 0; q < (uint64_t)P; qs += c->nnz[q], q++) {
		if ((int)q == me)
			continue;
		c->sends[n] = (scd_xfer_t){(int)q, sel->idx, 4 * sel->nnz};
		c->recvs[n++] = (scd_xfer_t){(int)q, idx + qs, 4 * c->nnz[q]};
		if (values) {
			c->sends[n] = (scd_xfer_t){(int)q, sel->val, 4 * sel->nnz};
			c->recvs[n++] = (scd_xfer_t){(int)q, val + qs, 4 * c->nnz[q]};
		}
	}
	if ((st = scd_scheme_xchg_v(c, c->sends, n, c->recvs, n, c->rbytes)) != SC_OK)
		return st;
	for (int j = 0; j < n; j++)
		if (c->rbytes[j] != c->recvs[j].bytes)
			return scd_scheme_fail(
			    SC_ERR_PROTOCOL, "%s: rank %d sent a wrong %s count", what,
			    c->recvs[j].peer, values && j % 2 ? "value" : "index");
	return SC_OK;
}

static sc_status_t scd_scheme_exdyna(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	int P = c->size, me = c->rank;
	scd_coo_t sel = {0}, dis = {0};
	uint64_t count = 0;
	sc_status_t st = exdyna_select_round(c, io, SCD_SCHEME_EXDYNA, &sel, &dis, &count);
	if (st != SC_OK)
		return st;
	uint64_t K = c->total_nnz, seg;
	if ((st = exdyna_gather(c, &sel, 0, "exdyna", &seg)) != SC_OK)
		return st;
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	if ((st = exdyna_check(c, idx)) != SC_OK)
		return st;
	/* this rank's accumulated value at every index of the union, taken out of its
	 * accumulator: its selection in its segment, the rest from the other segments. The
	 * other segments lie outside this rank's partition, where dis is ascending: its
	 * tail (what the cap held back, exdyna.h) is inside the partition and left out of
	 * the search. */
	scd_coo_t head = dis;
	if (io->coo)
		head.nnz = dis.nnz - (scd_exdyna_meta(c->ex)[0] - count);
	c->dev->copy(val + seg, sel.val, 4 * sel.nnz);
	for (uint64_t q = 0, qs = 0; q < (uint64_t)P; qs += c->nnz[q], q++) {
		if ((int)q == me || !c->nnz[q])
			continue;
		if (io->coo)
			c->dev->coo_gather(val + qs, idx + qs, c->nnz[q], &head, 1);
		else if (io->residual)
			c->dev->gather(val + qs, io->residual, idx + qs, c->nnz[q], 1);
		else
			c->dev->gather(val + qs, io->data, idx + qs, c->nnz[q], 0);
	}
	/* what the list held and the union did not take goes to the residual */
	if (io->coo && io->residual &&
	    (st = scd_res_queue(c, dis.idx, dis.val, dis.nnz, 1.0f)) != SC_OK)
		return st;
	if ((st = scd_scheme_allreduce(c, val, K)) != SC_OK)
		return st;
	if ((st = exdyna_output(c, io, idx, val)) != SC_OK)
		return st;
	if ((st = c->dev->exdyna_update(c->ex, c->parts)) != SC_OK)
		return scd_scheme_fail(st, "exdyna: update (a rank's words are no count, no "
					   "threshold or no count function)");
	return SC_OK;
}

/* ---- exdyna_owner: each rank's own values only ------------------------------------- */

/*
 * The variant named exdyna_owner: after the same selection and metadata round, each rank
 * all-gathers only the indices and values it selected, in one exchange (8 (P-1) k bytes
 * per rank), and every rank scatters them. The other ranks' values at those indices stay
 * in their residuals until the rotation brings that partition to them (ExDyna's
 * Algorithm 1 sums them at once: exdyna). When one rank selected over twice the mean,
 * indices and values ride an integer ring allreduce instead (2K words, each rank's in its
 * own segment). Fewer rounds than exdyna's ring of values, so fewer latencies per step:
 * measured in docs/schemes.md.
 */
static sc_status_t scd_scheme_exdyna_owner(scd_scheme_ctx_t *c, scd_scheme_io_t *io)
{
	scd_coo_t sel = {0}, dis = {0};
	uint64_t count = 0;
	sc_status_t st =
	    exdyna_select_round(c, io, SCD_SCHEME_EXDYNA_OWNER, &sel, &dis, &count);
	if (st != SC_OK)
		return st;
	if (io->coo && io->residual &&
	    (st = scd_res_queue(c, dis.idx, dis.val, dis.nnz, 1.0f)) != SC_OK)
		return st;
	uint64_t seg;
	if ((st = exdyna_gather(c, &sel, 1, "exdyna_owner", &seg)) != SC_OK)
		return st;
	uint32_t *idx = c->aidx.p;
	float *val = c->aval.p;
	if ((st = exdyna_check(c, idx)) != SC_OK ||
	    (st = exdyna_output(c, io, idx, val)) != SC_OK)
		return st;
	if ((st = c->dev->exdyna_update(c->ex, c->parts)) != SC_OK)
		return scd_scheme_fail(st, "exdyna_owner: update (a rank's words are no count, "
					   "no threshold or no count function)");
	return SC_OK;
}

/* ---- descriptor ---------------------------------------------------------------------- */

/* k is what a rank selected (its non-zeros in the report), the union K = P k (exclusive
 * partitions). Rounds: the indices all-gathered in one exchange, then the ring allreduce
 * of the K values, 1 + 2(P-1). Bytes a rank sends: its indices to each of the P-1 others,
 * (P-1) 4 imb k, imb the largest count over the mean (the measured imbalance; before any
 * measurement 1.05, the dynamic partitioning's target, or the skew if smaller:
 * block-granular partitions cannot balance an index distribution as skewed as Zipf's,
 * whose hottest block alone can hold most of the load), then the ring's 2 (P-1)/P 4K.
 * Above an imbalance of 2 the indices ride a ring allreduce of K words too, as the scheme
 * then does: 4(P-1) rounds, twice the ring's bytes. */
static scd_cost_t exdyna_model(const scd_cost_in_t *in)
{
	double P = in->P, k = scd_cost_nnz(in), K = P * k;
	double imb = in->skew < 1.05 ? (in->skew > 1 ? in->skew : 1) : 1.05;
	if (in->imbalance >= 1)
		imb = in->imbalance;
	double ring_rounds = 2 * (P - 1), ring_bytes = 2 * (P - 1) / P * 4 * K;
	if (imb > 2)
		return scd_cost_make(in, 2 * ring_rounds, 2 * ring_bytes);
	return scd_cost_make(in, 1 + ring_rounds, (P - 1) * imb * k * 4 + ring_bytes);
}

/* The same imbalance; each rank's indices and values to the P-1 others in one exchange,
 * (P-1) 8 imb k; above 2, indices and values on an integer ring, 2(P-1) rounds and
 * 2 (P-1)/P 8K bytes. */
static scd_cost_t exdyna_owner_model(const scd_cost_in_t *in)
{
	double P = in->P, k = scd_cost_nnz(in);
	double imb = in->skew < 1.05 ? (in->skew > 1 ? in->skew : 1) : 1.05;
	if (in->imbalance >= 1)
		imb = in->imbalance;
	if (imb > 2)
		return scd_cost_make(in, 2 * (P - 1), 2 * (P - 1) / P * 8 * (P * k));
	return scd_cost_make(in, 1, (P - 1) * imb * k * 8);
}

/* A sparsifier as much as a scheme: the engine pins SC_SPARSIFY_EXDYNA tensors to it (or
 * to exdyna_owner where that is pinned), and no automatic choice picks it. */
const scd_scheme_desc_t scd_scheme_exdyna_desc = {
    .name = "exdyna",
    .pick = SCD_PICK_PINNED,
    .uses = SCD_COST_DENSITY | SCD_COST_SKEW | SCD_COST_IMBALANCE,
    .sparsifier = SC_SPARSIFY_EXDYNA,
    .run = scd_scheme_exdyna,
    .model = exdyna_model,
};

/* The variant: pinned by name (a tensor's scheme, scheme_pins or the scheme key) for
 * SC_SPARSIFY_EXDYNA tensors. */
const scd_scheme_desc_t scd_scheme_exdyna_owner_desc = {
    .name = "exdyna_owner",
    .pick = SCD_PICK_PINNED,
    .uses = SCD_COST_DENSITY | SCD_COST_SKEW | SCD_COST_IMBALANCE,
    .sparsifier = SC_SPARSIFY_EXDYNA,
    .run = scd_scheme_exdyna_owner,
    .model = exdyna_owner_model,
};
