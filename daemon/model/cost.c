/*
 * cost.c: the terms the schemes' alpha-beta costs share (see cost.h); each scheme's own
 * formula is in its file under daemon/scheme/, next to its descriptor.
 */
#include "model/cost.h"

#include <math.h>

scd_cost_t scd_cost_make(const scd_cost_in_t *in, double rounds, double bytes)
{
	return (scd_cost_t){.rounds = rounds,
			    .bytes = bytes,
			    .seconds = rounds * in->alpha_s + bytes * in->beta_s_per_byte};
}

double scd_cost_compute_s(const scd_cost_in_t *in, double one_core_s)
{
	return in->cpu_share > 1 ? one_core_s * in->cpu_share : one_core_s;
}

double scd_cost_nnz(const scd_cost_in_t *in)
{
	double d = in->density > 1 ? 1 : in->density;
	return d * (double)in->numel;
}

uint32_t scd_ceil_log2(uint32_t P)
{
	uint32_t l = 0;
	while (l < 32 && (1ull << l) < P)
		l++;
	return l;
}

/* gamma(M) from the measured curve: its entry, else the log-log line between the nearest
 * measured entries below and above (or gamma(1) = 1, gamma(P) = gamma_n). */
static double gamma_measured(const scd_cost_in_t *in, uint32_t M)
{
	const double *g = in->gamma_of_m;
	double top = in->gamma_n > 1 ? in->gamma_n : 1; /* gamma(P) unless measured */
	if (g[M] > 0)
		return g[M];
	if (M >= in->P)
		return top;
	uint32_t lo = M - 1, hi = M + 1;
	while (lo > 1 && !(g[lo] > 0))
		lo--;
	while (hi < in->P && !(g[hi] > 0))
		hi++;
	double glo = lo > 1 ? g[lo] : 1, ghi = g[hi] > 0 ? g[hi] : top;
	double f = log((double)M / lo) / log((double)hi / lo);
	return exp(log(glo) + f * (log(ghi) - log(glo)));
}

double scd_cost_gamma(const scd_cost_in_t *in, double m)
{
	if (m <= 1)
		return 1;
	if (m > in->P)
		m = in->P;
	if (in->gamma_of_m)
		return gamma_measured(in, (uint32_t)m);
	if (in->P <= 1 || in->gamma_n <= 1)
		return 1;
	return pow(m, log(in->gamma_n) / log((double)in->P));
}

double scd_cost_msg_bytes(scd_format_t fmt, double nnz, double range_elems)
{
	switch (fmt) {
	case SCD_FMT_DENSE:
		return 4 * range_elems;
	case SCD_FMT_BITMAP:
	case SCD_FMT_HASH_BITMAP:
		return range_elems / 8 + 4 * nnz;
	case SCD_FMT_COO:
	default:
		return 8 * nnz;
	}
}

double scd_cost_zen_eq1(uint32_t n, double M_bytes, double d, double gamma_n, double b)
{
	return (double)(n - 1) / n * (gamma_n + 1) * 2 * M_bytes * d / b;
}

double scd_cost_zen_eq2(uint32_t n, double M_bytes, double d, const double *gamma_pow2,
			double b)
{
	double s = 0;
	for (uint32_t i = 1; i <= scd_ceil_log2(n); i++)
		s += gamma_pow2[i - 1];
	return s * 2 * M_bytes * d / b;
}

double scd_cost_hash_imbalance(uint32_t P, double nnz)
{
	if (P <= 1 || nnz <= 0)
		return 1;
	double r = 1 + sqrt(2 * P * log((double)P) / nnz);
	return r < P ? r : P;
}

scd_format_t scd_cost_whole_format(scd_format_t f)
{
	return f == SCD_FMT_HASH_BITMAP ? SCD_FMT_BITMAP : f;
}
