/*
 * cost.c: alpha-beta costs of the synchronisation schemes (see cost.h).
 *
 * Per scheme, what a rank receives on its critical path (U = numel, k = d_G U non-zeros
 * per rank, E = 4-byte values, msg(f, nnz, range) = the exact format size):
 *   dense ring      2(P-1) rounds; 2 (P-1)/P 4U bytes (reduce-scatter + allgather).
 *   AGsparse        ceil(log2 P) rounds (Bruck); (P-1) msg(f, k, U): one-shot aggregation.
 *   Hier. Central.  l = ceil(log2 P) rounds; sum_i msg(f, gamma(2^(i-1)) k, U)  (ZEN eq. 2).
 *   Balanced Par.   2(P-1) rounds; push (P-1) msg(COO, k/P) + pull (P-1) msg(f, gamma_n k/P,
 *                   U/P), each times the hash imbalance of Theorem 2       (ZEN eq. 1).
 *   OmniReduce      2(P-1) rounds; range partitions (times skew), non-zero blocks of B:
 *                   push (P-1) (U/PB) f(d) (4 + 4B), pull the same at f(gamma_n d), with
 *                   f(x) = 1 - (1-x)^B (non-zeros placed independently).
 *   SparDL          2 ceil(log2 P) rounds; 4 (P-1)/P k elements of 4 bytes (SparDL eq. 4);
 *                   teams d > 1: R-SAG eq. (7) (d a power of two) or B-SAG eq. (10) upper
 *                   bound.
 *   S2 sketch       ring allreduce of r c + ceil(U/B) floats (c default: gamma_n k).
 *   ExDyna          k is what a rank selected (ExDyna reports it as its non-zeros), the
 *                   union K = P k (exclusive partitions): allgather of indices and
 *                   values, the largest count the measured imbalance times the mean
 *                   (before any measurement: alpha = 1.05, the dynamic partitioning's
 *                   target, or the skew if smaller; block-granular partitions cannot
 *                   balance an index distribution as skewed as Zipf's, whose hottest
 *                   block alone can hold most of the load); above an imbalance of 2,
 *                   indices and values ride a ring allreduce instead (2K words: 16 (P-1) k
 *                   bytes), as the scheme then does.
 */
#include "model/cost.h"

#include <math.h>

static const char *const scheme_names[SCD_SCHEME_COUNT] = {
    [SCD_SCHEME_DENSE_RING] = "dense_ring",	[SCD_SCHEME_AGSPARSE] = "agsparse",
    [SCD_SCHEME_HIER_CENTRAL] = "hier_central", [SCD_SCHEME_BALANCED_PAR] = "balanced_par",
    [SCD_SCHEME_OMNIREDUCE] = "omnireduce",	[SCD_SCHEME_SPARDL] = "spardl",
    [SCD_SCHEME_S2_SKETCH] = "s2_sketch",	[SCD_SCHEME_EXDYNA] = "exdyna",
};

const char *scd_scheme_name(scd_scheme_t s)
{
	return (unsigned)s < SCD_SCHEME_COUNT ? scheme_names[s] : "unknown";
}

uint32_t scd_ceil_log2(uint32_t P)
{
	uint32_t l = 0;
	while (l < 32 && (1ull << l) < P)
		l++;
	return l;
}

double scd_cost_gamma(const scd_cost_in_t *in, double m)
{
	if (m <= 1)
		return 1;
	if (m > in->P)
		m = in->P;
	if (in->gamma_of_m)
		return in->gamma_of_m[(uint32_t)m];
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

static scd_cost_t make(double rounds, double bytes, int lossless, const scd_cost_in_t *in)
{
	return (scd_cost_t){.rounds = rounds,
			    .bytes = bytes,
			    .seconds = rounds * in->alpha_s + bytes * in->beta_s_per_byte,
			    .lossless = lossless};
}

/* A format that makes sense for a whole-tensor message (hash bitmap is per partition). */
static scd_format_t whole_fmt(scd_format_t f)
{
	return f == SCD_FMT_HASH_BITMAP ? SCD_FMT_BITMAP : f;
}

static scd_cost_t cost_hier_central(const scd_cost_in_t *in, double k, double U)
{
	uint32_t l = scd_ceil_log2(in->P);
	double bytes = 0;
	for (uint32_t i = 1; i <= l; i++) {
		double nnz = scd_cost_gamma(in, ldexp(1, (int)i - 1)) * k;
		bytes += scd_cost_msg_bytes(whole_fmt(in->format), nnz > U ? U : nnz, U);
	}
	return make(l, bytes, 1, in);
}

static scd_cost_t cost_balanced_par(const scd_cost_in_t *in, double k, double U)
{
	double P = in->P, union_nnz = in->gamma_n * k;
	if (union_nnz > U)
		union_nnz = U;
	double push = (P - 1) * scd_cost_msg_bytes(SCD_FMT_COO, k / P, U / P) *
		      scd_cost_hash_imbalance(in->P, k);
	scd_format_t pf = in->format == SCD_FMT_BITMAP ? SCD_FMT_HASH_BITMAP : in->format;
	double pull = (P - 1) * scd_cost_msg_bytes(pf, union_nnz / P, U / P) *
		      scd_cost_hash_imbalance(in->P, union_nnz);
	return make(2 * (P - 1), push + pull, 1, in);
}

static double block_fraction(double dens, uint32_t B)
{
	if (dens >= 1)
		return 1;
	return 1 - pow(1 - dens, B);
}

static scd_cost_t cost_omnireduce(const scd_cost_in_t *in, double d, double U)
{
	double P = in->P, B = in->block ? in->block : 256;
	double gd = in->gamma_n * d > 1 ? 1 : in->gamma_n * d;
	double per_block = 4 + 4 * B, blocks = U / (P * B);
	double push = (P - 1) * blocks * block_fraction(d, (uint32_t)B) * per_block * in->skew;
	double pull = (P - 1) * blocks * block_fraction(gd, (uint32_t)B) * per_block * in->skew;
	return make(2 * (P - 1), push + pull, 1, in);
}

static scd_cost_t cost_spardl(const scd_cost_in_t *in, double k)
{
	double P = in->P, d = in->teams > 1 ? in->teams : 1;
	if (d <= 1)
		return make(2.0 * scd_ceil_log2(in->P), 4 * 4 * k * (P - 1) / P, 0, in);
	uint32_t l_pd = scd_ceil_log2((uint32_t)ceil(P / d)), l_d = scd_ceil_log2((uint32_t)d);
	int pow2 = ((uint32_t)d & ((uint32_t)d - 1)) == 0;
	double elems = pow2 ? 2 * k * ((2 * P - 2 * d) / P + d / P * log2(d))
			    : 2 * k * (d * d + 2 * P - 3 * d) / P;
	return make(2.0 * l_pd + l_d, 4 * elems, 0, in);
}

static scd_cost_t cost_s2(const scd_cost_in_t *in, double k, double U)
{
	double P = in->P, B = in->block ? in->block : 256;
	double rows = in->sketch_rows ? in->sketch_rows : 1;
	double cols = in->sketch_cols ? in->sketch_cols : ceil(in->gamma_n * k);
	double floats = rows * cols + ceil(U / B);
	return make(2 * (P - 1), 2 * (P - 1) / P * 4 * floats, 0, in);
}

static scd_cost_t cost_exdyna(const scd_cost_in_t *in, double k)
{
	double P = in->P, imb = in->skew < 1.05 ? (in->skew > 1 ? in->skew : 1) : 1.05;
	if (in->imbalance >= 1)
		imb = in->imbalance;
	if (imb > 2)
		return make(2 * (P - 1), 2 * (P - 1) / P * 8 * (P * k), 0, in);
	return make(P - 1, (P - 1) * imb * k * 8, 0, in);
}

scd_cost_t scd_cost_scheme(scd_scheme_t s, const scd_cost_in_t *in)
{
	double U = (double)in->numel, d = in->density > 1 ? 1 : in->density, k = d * U;
	double P = in->P ? in->P : 1;
	if (P <= 1)
		return make(0, 0, s != SCD_SCHEME_S2_SKETCH, in);
	switch (s) {
	case SCD_SCHEME_DENSE_RING:
		return make(2 * (P - 1), 2 * (P - 1) / P * 4 * U, 1, in);
	case SCD_SCHEME_AGSPARSE:
		return make(scd_ceil_log2(in->P),
			    (P - 1) * scd_cost_msg_bytes(whole_fmt(in->format), k, U), 1, in);
	case SCD_SCHEME_HIER_CENTRAL:
		return cost_hier_central(in, k, U);
	case SCD_SCHEME_BALANCED_PAR:
		return cost_balanced_par(in, k, U);
	case SCD_SCHEME_OMNIREDUCE:
		return cost_omnireduce(in, d, U);
	case SCD_SCHEME_SPARDL:
		return cost_spardl(in, k);
	case SCD_SCHEME_S2_SKETCH:
		return cost_s2(in, k, U);
	case SCD_SCHEME_EXDYNA:
		return cost_exdyna(in, k);
	default:
		return make(INFINITY, INFINITY, 0, in);
	}
}

scd_scheme_t scd_cost_best(const scd_cost_in_t *in, int lossless_only, scd_cost_t *cost_p)
{
	scd_scheme_t best = SCD_SCHEME_DENSE_RING;
	scd_cost_t bc = scd_cost_scheme(best, in);
	for (int s = 1; s < SCD_SCHEME_COUNT; s++) {
		scd_cost_t c = scd_cost_scheme((scd_scheme_t)s, in);
		if (lossless_only && !c.lossless)
			continue;
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
