/*
 * registry.c: the table of scheme descriptors that SCD_SCHEMES (registry.h) lists, and
 * what reads it alone: names, parsing, properties, the bare cost formulas.
 */
#include "scheme/registry.h"

#include <math.h>
#include <string.h>

const scd_scheme_desc_t *const scd_schemes[SCD_SCHEME_COUNT] = {
#define SCD_SCHEME_ENTRY_(id, name) [SCD_SCHEME_##id] = &scd_scheme_##name##_desc,
    SCD_SCHEMES(SCD_SCHEME_ENTRY_)
#undef SCD_SCHEME_ENTRY_
};

const scd_scheme_desc_t *scd_scheme_desc(scd_scheme_t s)
{
	return (unsigned)s < SCD_SCHEME_COUNT ? scd_schemes[s] : NULL;
}

const char *scd_scheme_name(scd_scheme_t s)
{
	return (unsigned)s < SCD_SCHEME_COUNT ? scd_schemes[s]->name : "unknown";
}

int scd_scheme_lossless(scd_scheme_t s)
{
	return (unsigned)s < SCD_SCHEME_COUNT && scd_schemes[s]->lossless;
}

int scd_scheme_parse(const char *name, scd_scheme_t *s_p)
{
	for (int s = 0; s < SCD_SCHEME_COUNT; s++)
		if (name && strcmp(name, scd_schemes[s]->name) == 0) {
			*s_p = (scd_scheme_t)s;
			return 0;
		}
	return -1;
}

int scd_scheme_of_sparsifier(sc_sparsifier_t sp)
{
	for (int s = 0; sp != SC_SPARSIFY_NONE && s < SCD_SCHEME_COUNT; s++)
		if (scd_schemes[s]->sparsifier == sp)
			return s;
	return -1;
}

scd_cost_t scd_cost_scheme(scd_scheme_t s, const scd_cost_in_t *in)
{
	const scd_scheme_desc_t *d = scd_scheme_desc(s);
	if (!d)
		return (scd_cost_t){.rounds = INFINITY, .bytes = INFINITY, .seconds = INFINITY};
	scd_cost_t r = in->P <= 1 ? (scd_cost_t){0} : d->model(in);
	r.lossless = d->lossless;
	return r;
}

scd_scheme_t scd_cost_best(const scd_cost_in_t *in, int lossless_only, scd_cost_t *cost_p)
{
	scd_scheme_t best = SCD_SCHEME_DENSE_RING;
	scd_cost_t bc = scd_cost_scheme(best, in);
	for (int s = 1; s < SCD_SCHEME_COUNT; s++) {
		if (lossless_only && !scd_schemes[s]->lossless)
			continue;
		scd_cost_t c = scd_cost_scheme((scd_scheme_t)s, in);
		if (c.seconds <
		    bc.seconds) { /* strict: ties keep the lower id, on every rank */
			best = (scd_scheme_t)s;
			bc = c;
		}
	}
	if (cost_p)
		*cost_p = bc;
	return best;
}

scd_cost_t scd_cost_coo_or_bitmap(scd_cost_t (*model)(const scd_cost_in_t *in),
				  const scd_cost_in_t *in)
{
	scd_cost_in_t x = *in;
	x.format = SCD_FMT_COO;
	scd_cost_t r = model(&x);
	x.format = SCD_FMT_BITMAP;
	scd_cost_t b = model(&x);
	return b.seconds < r.seconds ? b : r;
}
