/*
 * exdyna.c: ExDyna's block partitions, dynamic allocation, exclusive selection and online
 * threshold scaling (see exdyna.h; ExDyna Algorithms 2-5).
 *
 * Tail handling (the paper assumes none): blocks are floor(numel / n_b) rounded down to a
 * multiple of 32 elements (at least 32), n_b = numel / block, and the elements past the
 * last whole block belong to the last partition. A tensor of fewer than 32 elements is one
 * block. Partitions may own zero blocks only when there are fewer blocks than ranks.
 */
#include "device/exdyna.h"

#include "device/kth.h"
#include "device/select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct scd_exdyna {
	scd_exdyna_cfg_t cfg;
	uint64_t k;
	uint64_t blk_size;
	uint32_t nblocks;
	int64_t min_blk;
	int64_t *blk_part; /* blocks per partition */
	int64_t *blk_pos;  /* first block of each partition */
	int64_t *kpart;	   /* scratch: counts by partition */
	double threshold;
	double up, up_fine, down, down_fine;
	uint64_t iter;
	int calibrating; /* the threshold is still to be taken from the data */
	double proposal; /* this rank's threshold at that first selection */
};

scd_exdyna_cfg_t scd_exdyna_cfg_default(uint64_t numel, uint32_t nranks, uint32_t rank,
					double density)
{
	return (scd_exdyna_cfg_t){.numel = numel,
				  .nranks = nranks,
				  .rank = rank,
				  .density = density,
				  .nblocks = 1024,
				  .blk_move = 1,
				  .alpha_permille = 1050,
				  .beta_permille = 1100,
				  .gamma = 0.005,
				  .init_threshold = 0};
}

/* Alg. 2: equal contiguous partitions of whole blocks. */
static void initial_partitions(scd_exdyna_t *ex)
{
	uint32_t P = ex->cfg.nranks;
	uint32_t q = ex->nblocks / P, rem = ex->nblocks % P;
	for (uint32_t i = 0; i < P; i++) {
		ex->blk_part[i] = q + (i < rem);
		ex->blk_pos[i] = i ? ex->blk_pos[i - 1] + ex->blk_part[i - 1] : 0;
	}
}

sc_status_t scd_exdyna_create(const scd_exdyna_cfg_t *cfg, scd_exdyna_t **ex_p)
{
	if (!cfg || !ex_p || cfg->nranks == 0 || cfg->rank >= cfg->nranks || cfg->numel == 0 ||
	    cfg->numel > SCD_NUMEL_MAX || !(cfg->density > 0 && cfg->density <= 1) ||
	    cfg->nblocks == 0 || cfg->blk_move == 0 || cfg->alpha_permille < 1000 ||
	    cfg->beta_permille < 1000 || !(cfg->gamma > 0 && cfg->gamma < 1))
		return SC_ERR_INVALID;
	scd_exdyna_t *ex = calloc(1, sizeof(*ex));
	if (!ex)
		return SC_ERR_NOMEM;
	ex->cfg = *cfg;
	ex->blk_part = calloc(cfg->nranks, sizeof(int64_t));
	ex->blk_pos = calloc(cfg->nranks, sizeof(int64_t));
	ex->kpart = calloc(cfg->nranks, sizeof(int64_t));
	if (!ex->blk_part || !ex->blk_pos || !ex->kpart) {
		scd_exdyna_destroy(ex);
		return SC_ERR_NOMEM;
	}
	ex->k = scd_density_to_k(cfg->density, cfg->numel);
	uint64_t blk = (cfg->numel / cfg->nblocks) & ~(uint64_t)31;
	if (blk < 32)
		blk = 32;
	if (cfg->numel < 32)
		blk = cfg->numel;
	ex->blk_size = blk;
	ex->nblocks = (uint32_t)(cfg->numel / blk);
	ex->min_blk = ex->nblocks >= cfg->nranks ? ex->nblocks / (4 * (int64_t)cfg->nranks) : 0;
	if (ex->nblocks >= cfg->nranks && ex->min_blk < 1)
		ex->min_blk = 1;
	initial_partitions(ex);
	ex->threshold =
	    cfg->init_threshold > 0 ? cfg->init_threshold : 1.0 / (2.0 * sqrt((double)ex->k));
	ex->calibrating = cfg->init_threshold == 0;
	ex->up = 1.0 + cfg->gamma;
	ex->up_fine = 1.0 + cfg->gamma / 4;
	ex->down = 1.0 - cfg->gamma;
	ex->down_fine = 1.0 - cfg->gamma / 4;
	*ex_p = ex;
	return SC_OK;
}

void scd_exdyna_destroy(scd_exdyna_t *ex)
{
	if (!ex)
		return;
	free(ex->blk_part);
	free(ex->blk_pos);
	free(ex->kpart);
	free(ex);
}

uint32_t scd_exdyna_part_of_rank(const scd_exdyna_t *ex, uint32_t rank)
{
	uint32_t P = ex->cfg.nranks;
	return (uint32_t)((ex->iter % P + rank) % P);
}

void scd_exdyna_part_range(const scd_exdyna_t *ex, uint32_t part, uint64_t *lo_p,
			   uint64_t *hi_p)
{
	uint64_t lo = (uint64_t)ex->blk_pos[part] * ex->blk_size;
	uint64_t hi = (uint64_t)(ex->blk_pos[part] + ex->blk_part[part]) * ex->blk_size;
	if (part == ex->cfg.nranks - 1)
		hi = ex->cfg.numel; /* the tail past the last whole block */
	*lo_p = lo;
	*hi_p = hi;
}

/* This rank's share of the target, for the selection that calibrates the threshold. */
static uint64_t share(const scd_exdyna_t *ex)
{
	uint64_t P = ex->cfg.nranks, s = (ex->k + P / 2) / P;
	return s ? s : 1;
}

/* The threshold that selects this rank's share among keys (the exact share-th largest;
 * an exact zero never qualifies), recorded as the rank's proposal. */
static float propose(scd_exdyna_t *ex, uint32_t key)
{
	float t = scd_key_to_float(key ? key : 1);
	ex->proposal = t;
	return t;
}

sc_status_t scd_exdyna_select(scd_exdyna_t *ex, const float *in, float *residual,
			      scd_coo_t *out, uint64_t *count_p)
{
	if (!ex || !out || (!in && !residual))
		return SC_ERR_INVALID;
	uint64_t lo, hi, n = ex->cfg.numel;
	scd_exdyna_part_range(ex, scd_exdyna_part_of_rank(ex, ex->cfg.rank), &lo, &hi);
	float thr = (float)ex->threshold;
	if (ex->calibrating) { /* acc first, then the exact share-th magnitude in the part */
		if (in && residual) {
			scd_residual_accumulate(in, residual, 0, n);
			in = NULL;
		}
		const float *acc = residual ? residual : in;
		thr = propose(ex, scd_kth_key_f32(acc + lo, hi - lo, share(ex), NULL, NULL));
	} else if (in && residual) {
		scd_residual_accumulate(in, residual, 0, lo);
		scd_residual_accumulate(in, residual, hi, n);
	}
	scd_select_threshold(in, residual, lo, hi, thr, out);
	if (count_p)
		*count_p = out->nnz;
	return SC_OK;
}

sc_status_t scd_exdyna_select_coo(scd_exdyna_t *ex, const scd_coo_t *in, scd_coo_t *out,
				  scd_coo_t *dis, uint64_t *count_p)
{
	if (!ex || !in || !out || !dis || out->cap < in->nnz || dis->cap < in->nnz)
		return SC_ERR_INVALID;
	uint64_t lo, hi;
	scd_exdyna_part_range(ex, scd_exdyna_part_of_rank(ex, ex->cfg.rank), &lo, &hi);
	uint32_t tkey = scd_threshold_key((float)ex->threshold);
	if (ex->calibrating) { /* the partition's keys, in dis as scratch, before it is filled */
		uint64_t m = 0;
		for (uint64_t j = 0; j < in->nnz; j++)
			if (in->idx[j] >= lo && in->idx[j] < hi)
				dis->idx[m++] = scd_abs_key(in->val[j]);
		tkey = scd_threshold_key(propose(ex, scd_kth_key_u32(dis->idx, m, share(ex), NULL,
								     NULL)));
	}
	uint64_t n = 0, m = 0;
	for (uint64_t j = 0; j < in->nnz; j++) {
		uint32_t i = in->idx[j];
		float v = in->val[j];
		if (i >= lo && i < hi && scd_abs_key(v) >= tkey) {
			out->idx[n] = i;
			out->val[n++] = v;
		} else if (v != 0) {
			dis->idx[m] = i;
			dis->val[m++] = v;
		}
	}
	out->nnz = n;
	dis->nnz = m;
	if (count_p)
		*count_p = n;
	return SC_OK;
}

/* Alg. 3 lines 9-28 in integers: det = kpart[i] / (sum / P) > alpha becomes
 * kpart[i] * P * 1000 > sum * alpha_permille, det < 1 / alpha becomes
 * kpart[i] * P * alpha_permille < sum * 10^6 (all below 2^60 for 32-bit counts and
 * P < 2^16). k_move = blk_move * blk_size * sum / numel, rounded down. */
static int load_above(int64_t kp, int64_t P, int64_t A, int64_t sum)
{
	return kp * P * 1000 > sum * A;
}

static int load_below(int64_t kp, int64_t P, int64_t A, int64_t sum)
{
	return kp * P * A < sum * 1000000;
}

static void rebalance(scd_exdyna_t *ex, int64_t sum)
{
	int64_t P = ex->cfg.nranks, A = ex->cfg.alpha_permille, mv = ex->cfg.blk_move;
	int64_t k_move =
	    (int64_t)(((uint64_t)mv * ex->blk_size * (uint64_t)sum) / ex->cfg.numel);
	int64_t *kp = ex->kpart;
	for (int64_t i = 0; i + 1 < P; i++) {
		if (load_above(kp[i], P, A, sum) && load_below(kp[i + 1], P, A, sum)) {
			/* left overloaded: its last blocks go to the right neighbour */
			if (ex->blk_part[i] - mv < ex->min_blk)
				continue;
			ex->blk_part[i] -= mv;
			ex->blk_part[i + 1] += mv;
			ex->blk_pos[i + 1] -= mv;
			kp[i] -= k_move;
			kp[i + 1] += k_move;
		} else if (load_below(kp[i], P, A, sum) && load_above(kp[i + 1], P, A, sum)) {
			/* right overloaded: its first blocks go to the left neighbour */
			if (ex->blk_part[i + 1] - mv < ex->min_blk)
				continue;
			ex->blk_part[i] += mv;
			ex->blk_part[i + 1] -= mv;
			ex->blk_pos[i + 1] += mv;
			kp[i] += k_move;
			kp[i + 1] -= k_move;
		}
	}
}

/* Alg. 5 with integer comparisons of k' / k against beta (see exdyna.h). */
static void scale_threshold(scd_exdyna_t *ex, uint64_t actual)
{
	uint64_t k = ex->k, B = ex->cfg.beta_permille;
	if (actual * 1000 > k * B)
		ex->threshold *= ex->up;
	else if (actual * B < k * 1000)
		ex->threshold *= ex->down;
	else if (actual > k)
		ex->threshold *= ex->up_fine;
	else if (actual < k)
		ex->threshold *= ex->down_fine;
}

/* The lower median of the ranks' proposals (non-negative doubles: their bits sort as
 * integers), sorted in kpart before it holds the counts. */
static double median_proposal(scd_exdyna_t *ex, const double *proposals)
{
	uint32_t P = ex->cfg.nranks;
	int64_t *v = ex->kpart;
	for (uint32_t r = 0; r < P; r++) {
		int64_t b;
		memcpy(&b, &proposals[r], 8);
		uint32_t j = r;
		for (; j > 0 && v[j - 1] > b; j--)
			v[j] = v[j - 1];
		v[j] = b;
	}
	double t;
	memcpy(&t, &v[(P - 1) / 2], 8);
	return t;
}

int scd_exdyna_calibrating(const scd_exdyna_t *ex)
{
	return ex->calibrating;
}

double scd_exdyna_proposal(const scd_exdyna_t *ex)
{
	return ex->proposal;
}

sc_status_t scd_exdyna_update(scd_exdyna_t *ex, const uint64_t *counts,
			      const double *proposals)
{
	if (!ex || !counts || (ex->calibrating && !proposals))
		return SC_ERR_INVALID;
	uint32_t P = ex->cfg.nranks;
	if (ex->calibrating) {
		for (uint32_t r = 0; r < P; r++)
			if (!(proposals[r] > 0 && proposals[r] < INFINITY))
				return SC_ERR_INVALID; /* NaN, negative or infinite: not a threshold */
		ex->threshold = median_proposal(ex, proposals);
	}
	int64_t sum = 0;
	for (uint32_t r = 0; r < P; r++) {
		ex->kpart[scd_exdyna_part_of_rank(ex, r)] = (int64_t)counts[r];
		sum += (int64_t)counts[r];
	}
	if (sum > 0)
		rebalance(ex, sum);
	if (!ex->calibrating) /* that iteration's counts came from the ranks' own thresholds */
		scale_threshold(ex, (uint64_t)sum);
	ex->calibrating = 0;
	ex->iter++;
	return SC_OK;
}

float scd_exdyna_threshold(const scd_exdyna_t *ex)
{
	return (float)ex->threshold;
}

uint64_t scd_exdyna_target(const scd_exdyna_t *ex)
{
	return ex->k;
}

uint64_t scd_exdyna_iteration(const scd_exdyna_t *ex)
{
	return ex->iter;
}

uint32_t scd_exdyna_block_size(const scd_exdyna_t *ex)
{
	return (uint32_t)ex->blk_size;
}

uint64_t scd_exdyna_digest(const scd_exdyna_t *ex)
{
	uint64_t h = scd_fmix64(ex->iter + 1);
	uint64_t tb;
	memcpy(&tb, &ex->threshold, sizeof(tb));
	h = scd_fmix64(h ^ tb);
	for (uint32_t i = 0; i < ex->cfg.nranks; i++)
		h = scd_fmix64(h ^ (uint64_t)ex->blk_part[i] ^
			       ((uint64_t)ex->blk_pos[i] << 32));
	return h;
}
