/*
 * scheme_select.c: choosing a scheme per fused buffer from the alpha-beta cost model
 * (model/cost.h, ZEN eq. 1 vs 2 generalised to every scheme), identically on every rank.
 *
 * Inputs and why they agree across ranks:
 *   - the profile (d_G, gamma_G^n, skew) is folded only from scheme reports, whose fields
 *     used here are computed from the gathered counts and from the summed result, which
 *     every rank holds identically; the folding is the same float arithmetic everywhere;
 *   - alpha and beta must be agreed by the caller (the engine distributes one
 *     measurement with the plan); P, numel and the block/team/sketch settings come from
 *     the context, created with the same configuration everywhere.
 * So scd_scheme_choose() returns the same scheme on every rank with no extra message.
 *
 * The costs are those of model/cost.c, with the formats the schemes really use: AGsparse
 * and Hierarchical Centralization send COO or bitmap, whichever is smaller (so the cheaper
 * of the two costs), Balanced Parallelism pulls hash bitmaps, S2 sizes its columns as
 * scheme_sketch.c does, SparDL uses the team count it will run with. Every scheme run
 * also pays the metadata round (one alpha), added to each cost for honest predictions.
 */
#include "scheme/scheme_internal.h"

#include <math.h>

void scd_scheme_profile_init(scd_scheme_profile_t *pf, double density_hint)
{
	if (!(density_hint > 0) || density_hint > 1)
		density_hint = 1;
	*pf = (scd_scheme_profile_t){
	    .density = density_hint, .gamma_n = 0 /* unknown: assume disjoint */, .skew = 1};
}

void scd_scheme_profile_update(scd_scheme_profile_t *pf, const scd_scheme_report_t *r)
{
	double w = pf->steps ? 0.5 : 1;
	pf->density = (1 - w) * pf->density + w * r->density;
	if (r->scheme != SCD_SCHEME_S2_SKETCH) {
		double g = pf->gamma_n > 0 ? pf->gamma_n : r->gamma;
		pf->gamma_n = (1 - w) * g + w * r->gamma;
		pf->skew = (1 - w) * pf->skew + w * r->skew;
	}
	if (r->scheme == SCD_SCHEME_EXDYNA)
		pf->ex_imbalance = pf->ex_imbalance > 0
				       ? 0.5 * pf->ex_imbalance + 0.5 * r->imbalance
				       : r->imbalance;
	pf->steps++;
}

scd_cost_in_t scd_scheme_cost_in(const scd_scheme_ctx_t *c, const scd_scheme_profile_t *pf,
				 double alpha_s, double beta_s_per_byte)
{
	double P = c->size;
	double g = pf->gamma_n > 0 ? pf->gamma_n : P;
	if (g < 1)
		g = 1;
	if (g > P)
		g = P;
	return (scd_cost_in_t){.P = (uint32_t)c->size,
			       .numel = c->cfg.numel,
			       .density = pf->density > 1 ? 1 : pf->density,
			       .gamma_n = g,
			       .skew = pf->skew > 1 ? pf->skew : 1,
			       .imbalance = pf->ex_imbalance,
			       .alpha_s = alpha_s,
			       .beta_s_per_byte = beta_s_per_byte,
			       .format = SCD_FMT_COO,
			       .block = c->cfg.omni_block,
			       .teams = 1,
			       .sketch_rows = c->cfg.sketch_rows};
}

/* The largest divisor of P that is <= d (1 at least). */
static uint32_t divisor_at_most(uint32_t P, uint32_t d)
{
	if (d > P)
		d = P;
	while (d > 1 && P % d)
		d--;
	return d ? d : 1;
}

static scd_cost_t spardl_cost(const scd_scheme_ctx_t *c, const scd_cost_in_t *base, uint32_t d)
{
	scd_cost_in_t in = *base;
	if (c->cfg.density > 0)
		in.density = c->cfg.density;
	in.teams = d;
	return scd_cost_scheme(SCD_SCHEME_SPARDL, &in);
}

uint32_t scd_scheme_spardl_teams(const scd_scheme_ctx_t *c, double density)
{
	uint32_t P = (uint32_t)c->size;
	if (c->cfg.spardl_teams)
		return divisor_at_most(P, c->cfg.spardl_teams);
	scd_scheme_profile_t pf = {.density = density, .gamma_n = P, .skew = 1};
	scd_cost_in_t in = scd_scheme_cost_in(c, &pf, c->alpha_s, c->beta_s);
	uint32_t best = 1;
	double bs = spardl_cost(c, &in, 1).seconds;
	for (uint32_t d = 2; d <= P; d++) {
		if (P % d)
			continue;
		double s = spardl_cost(c, &in, d).seconds;
		if (s < bs) {
			bs = s;
			best = d;
		}
	}
	return best;
}

scd_cost_t scd_scheme_cost(const scd_scheme_ctx_t *c, scd_scheme_t s,
			   const scd_scheme_profile_t *pf, double alpha_s,
			   double beta_s_per_byte)
{
	scd_cost_in_t in = scd_scheme_cost_in(c, pf, alpha_s, beta_s_per_byte);
	scd_cost_t r;
	switch (s) {
	case SCD_SCHEME_AGSPARSE:
	case SCD_SCHEME_HIER_CENTRAL: {
		r = scd_cost_scheme(s, &in);
		in.format = SCD_FMT_BITMAP;
		scd_cost_t b = scd_cost_scheme(s, &in);
		if (b.seconds < r.seconds)
			r = b;
		break;
	}
	case SCD_SCHEME_BALANCED_PAR:
		in.format = SCD_FMT_HASH_BITMAP;
		r = scd_cost_scheme(s, &in);
		break;
	case SCD_SCHEME_S2_SKETCH: {
		in.block = c->cfg.sketch_block;
		double cols = ceil(c->cfg.sketch_cols_factor * in.gamma_n * in.density *
				   (double)in.numel);
		if (cols > (double)in.numel)
			cols = (double)in.numel;
		in.sketch_cols = cols < 1 ? 1 : (uint32_t)cols;
		r = scd_cost_scheme(s, &in);
		break;
	}
	case SCD_SCHEME_SPARDL: {
		uint32_t d =
		    c->cfg.spardl_teams ? divisor_at_most(in.P, c->cfg.spardl_teams) : 0;
		if (!d) {
			d = 1;
			double bs = spardl_cost(c, &in, 1).seconds;
			for (uint32_t t = 2; t <= in.P; t++)
				if (in.P % t == 0 && spardl_cost(c, &in, t).seconds < bs) {
					bs = spardl_cost(c, &in, t).seconds;
					d = t;
				}
		}
		r = spardl_cost(c, &in, d);
		break;
	}
	default:
		r = scd_cost_scheme(s, &in);
		break;
	}
	if (c->size > 1) {
		r.rounds += 1;
		r.seconds += alpha_s;
	}
	return r;
}

scd_scheme_t scd_scheme_choose(const scd_scheme_ctx_t *c, const scd_scheme_profile_t *pf,
			       double alpha_s, double beta_s_per_byte, int lossless_only,
			       int pin, scd_cost_t *cost_p)
{
	if (pin >= 0 && pin < SCD_SCHEME_COUNT) {
		if (cost_p)
			*cost_p =
			    scd_scheme_cost(c, (scd_scheme_t)pin, pf, alpha_s, beta_s_per_byte);
		return (scd_scheme_t)pin;
	}
	scd_scheme_t best = SCD_SCHEME_DENSE_RING;
	scd_cost_t bc = scd_scheme_cost(c, best, pf, alpha_s, beta_s_per_byte);
	for (int s = 1; s < SCD_SCHEME_COUNT; s++) {
		if (s == SCD_SCHEME_EXDYNA || (lossless_only && !scd_scheme_lossless(s)))
			continue;
		scd_cost_t k =
		    scd_scheme_cost(c, (scd_scheme_t)s, pf, alpha_s, beta_s_per_byte);
		if (k.seconds < bc.seconds) { /* strict: ties keep the lower id */
			best = (scd_scheme_t)s;
			bc = k;
		}
	}
	if (cost_p)
		*cost_p = bc;
	return best;
}
