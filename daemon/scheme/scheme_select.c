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
 * The costs are the schemes' descriptors' (scheme/registry.h), each in its scheme's file,
 * with the formats the schemes really use: AGsparse and Hierarchical Centralization send
 * COO or bitmap, whichever is smaller (so the cheaper of the two costs), Balanced
 * Parallelism pulls hash bitmaps, S2 sizes its columns as scheme_sketch.c does, SparDL
 * uses the team count it will run with. Every scheme run also pays the metadata round
 * (one alpha), added to each cost for honest predictions. Which schemes a choice may
 * pick, and what a report may teach the profile, are descriptor fields too.
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
	const scd_scheme_desc_t *d = scd_scheme_desc(r->scheme);
	pf->density = (1 - w) * pf->density + w * r->density;
	if (!d || !d->sketched) {
		double g = pf->gamma_n > 0 ? pf->gamma_n : r->gamma;
		pf->gamma_n = (1 - w) * g + w * r->gamma;
		pf->skew = (1 - w) * pf->skew + w * r->skew;
	}
	for (uint32_t i = 0; i < r->gamma_pts && i < SCD_GAMMA_PTS; i++) {
		if (r->gamma_m[i] < 2 || r->gamma_m[i] > SCD_GAMMA_M_MAX ||
		    !(r->gamma_at[i] > 0))
			continue;
		double *g = &pf->gamma_of_m[r->gamma_m[i]];
		*g = *g > 0 ? 0.5 * *g + 0.5 * r->gamma_at[i] : r->gamma_at[i];
	}
	if (r->bsag_teams) {
		int same = pf->bsag_teams == r->bsag_teams && pf->bsag_hl > 0;
		pf->bsag_hl = same ? 0.5 * pf->bsag_hl + 0.5 * r->bsag_hl : r->bsag_hl;
		pf->bsag_teams = r->bsag_teams;
	}
	if (d && (d->uses & SCD_COST_IMBALANCE)) {
		double *imb = &pf->imbalance[r->scheme];
		*imb = *imb > 0 ? 0.5 * *imb + 0.5 * r->imbalance : r->imbalance;
	}
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
	int curve = 0; /* some intermediate size measured */
	for (int m = 2; m <= c->size && m <= SCD_GAMMA_M_MAX && !curve; m++)
		curve = pf->gamma_of_m[m] > 0;
	return (scd_cost_in_t){.gamma_of_m =
				   curve && c->size <= SCD_GAMMA_M_MAX ? pf->gamma_of_m : NULL,
			       .P = (uint32_t)c->size,
			       .numel = c->cfg.numel,
			       .density = pf->density > 1 ? 1 : pf->density,
			       .gamma_n = g,
			       .skew = pf->skew > 1 ? pf->skew : 1,
			       .alpha_s = alpha_s,
			       .beta_s_per_byte = beta_s_per_byte,
			       .format = SCD_FMT_COO,
			       .teams = 1,
			       .bsag_teams = pf->bsag_teams,
			       .bsag_hl = pf->bsag_hl,
			       .scatter_s_per_nnz = c->cfg.scatter_s_per_nnz,
			       .sum_s_per_nnz = c->cfg.sum_s_per_nnz,
			       .dense_sum_s_per_elem = c->cfg.dense_sum_s_per_elem,
			       .cpu_share = c->cfg.cpu_share};
}

scd_cost_t scd_scheme_cost(const scd_scheme_ctx_t *c, scd_scheme_t s,
			   const scd_scheme_profile_t *pf, double alpha_s,
			   double beta_s_per_byte)
{
	const scd_scheme_desc_t *d = scd_scheme_desc(s);
	scd_cost_in_t in = scd_scheme_cost_in(c, pf, alpha_s, beta_s_per_byte);
	if (!d)
		return scd_cost_scheme(s, &in);
	if (d->uses & SCD_COST_IMBALANCE)
		in.imbalance = pf->imbalance[s];
	scd_cost_t r = {0};
	if (in.P > 1)
		r = d->cost ? d->cost(c, &in) : d->model(&in);
	r.lossless = d->lossless;
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
	scd_scheme_t best = SCD_SCHEME_DENSE_RING; /* always allowed: lossless, any pick */
	scd_cost_t bc = scd_scheme_cost(c, best, pf, alpha_s, beta_s_per_byte);
	for (int s = 1; s < SCD_SCHEME_COUNT; s++) {
		if (scd_schemes[s]->pick == SCD_PICK_PINNED ||
		    (lossless_only && !scd_schemes[s]->lossless))
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
