/*
 * exdyna.c: ExDyna's block partitions, dynamic allocation, exclusive selection and online
 * threshold scaling (see exdyna.h; ExDyna Algorithms 2-5).
 *
 * Tail handling (the paper assumes none): blocks are floor(numel / n_b) rounded down to a
 * multiple of 32 elements (at least 32), n_b = numel / block, and the elements past the
 * last whole block belong to the last partition. A tensor of fewer than 32 elements is one
 * block. Partitions may own zero blocks only when there are fewer blocks than ranks.
 */
#include "device/exdyna_impl.h"

#include "device/kth.h"
#include "device/select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The grid counts (exdyna.h) travel with every iteration's counts but the first. */
#define GRID_N (2 * SCD_EXDYNA_GRID_HALF + 1)

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
				  .init_threshold = 0,
				  .recal_permille = 0,
				  .cap_permille = 0,
				  .fine_symmetric = 0};
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
	    cfg->beta_permille < 1000 || !(cfg->gamma > 0 && cfg->gamma < 1) ||
	    (cfg->recal_permille &&
	     (cfg->recal_permille < 1000 || cfg->recal_permille > 1000000)) ||
	    (cfg->cap_permille && (cfg->cap_permille < 1000 || cfg->cap_permille > 1000000)))
		return SC_ERR_INVALID;
	scd_exdyna_t *ex = calloc(1, sizeof(*ex));
	if (!ex)
		return SC_ERR_NOMEM;
	ex->cfg = *cfg;
	ex->blk_part = calloc(cfg->nranks, sizeof(int64_t));
	ex->blk_pos = calloc(cfg->nranks, sizeof(int64_t));
	ex->kpart = calloc(cfg->nranks, sizeof(int64_t));
	ex->meta = calloc(1 + GRID_N, sizeof(uint64_t));
	ex->totals = calloc(GRID_N, sizeof(uint64_t));
	if (!ex->blk_part || !ex->blk_pos || !ex->kpart || !ex->meta || !ex->totals) {
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
	ex->grid_key = scd_threshold_key((float)ex->threshold);
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
	free(ex->meta);
	free(ex->totals);
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

/* Whether this iteration counts its partition at the grid's thresholds. */
static int gridded(const scd_exdyna_t *ex)
{
	return ex->cfg.recal_permille && !ex->calibrating;
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
	memcpy(&ex->meta[1], &ex->proposal, 8);
	return t;
}

void scd_exdyna_propose_key(scd_exdyna_t *ex, uint32_t key)
{
	propose(ex, key);
}

void scd_exdyna_plan(const scd_exdyna_t *ex, scd_exdyna_plan_t *plan_p)
{
	scd_exdyna_plan_t p = {.numel = ex->cfg.numel, .share = share(ex)};
	scd_exdyna_part_range(ex, scd_exdyna_part_of_rank(ex, ex->cfg.rank), &p.lo, &p.hi);
	uint64_t cap = ex->cfg.cap_permille * p.share / 1000; /* as cap_selection */
	p.cap = !ex->cfg.cap_permille ? UINT64_MAX : cap ? cap : 1;
	p.grid_base =
	    (int64_t)ex->grid_key - (int64_t)SCD_EXDYNA_GRID_HALF * SCD_EXDYNA_GRID_STEP;
	p.tkey = scd_threshold_key((float)ex->threshold);
	p.mode = ex->calibrating ? SCD_EXDYNA_CALIBRATE
		 : gridded(ex)	 ? SCD_EXDYNA_GRID
				 : SCD_EXDYNA_FIXED;
	*plan_p = p;
}

/* Grid counts: meta[1 + j] = how many of the partition's magnitudes are at least
 * the j-th grid threshold, grid_key + (j - HALF) STEP: a histogram over the bins between
 * thresholds (grid_add; a key under the lowest threshold counts nowhere, one over the
 * highest in the last bin), then suffix sums (grid_finish). */
static inline void grid_add(uint64_t *h, int64_t base, uint32_t key)
{
	int64_t d = (int64_t)key - base;
	if (d >= 0) {
		uint64_t b = (uint64_t)d / SCD_EXDYNA_GRID_STEP;
		h[b < GRID_N ? b : GRID_N - 1]++;
	}
}

static int64_t grid_base(scd_exdyna_t *ex)
{
	memset(ex->meta + 1, 0, GRID_N * sizeof(uint64_t));
	return (int64_t)ex->grid_key - (int64_t)SCD_EXDYNA_GRID_HALF * SCD_EXDYNA_GRID_STEP;
}

static void grid_finish(scd_exdyna_t *ex)
{
	for (int j = GRID_N - 2; j >= 0; j--)
		ex->meta[1 + j] += ex->meta[2 + j];
}

static void grid_count_f32(scd_exdyna_t *ex, const float *x, uint64_t n)
{
	int64_t base = grid_base(ex);
	for (uint64_t i = 0; i < n; i++)
		grid_add(ex->meta + 1, base, scd_abs_key(x[i]));
	grid_finish(ex);
}

static void grid_count_keys(scd_exdyna_t *ex, const uint32_t *keys, uint64_t n)
{
	int64_t base = grid_base(ex);
	for (uint64_t i = 0; i < n; i++)
		grid_add(ex->meta + 1, base, keys[i]);
	grid_finish(ex);
}

/* Records how many passed the threshold (meta[0]), then the cap (cfg.cap_permille): when
 * out holds more than cap x share entries, keeps the largest magnitudes (ties: the lowest
 * indices), in order, and hands the others back: into residual (where the selection left
 * zeros) when not NULL, else appended to dis when not NULL. */
static void cap_selection(scd_exdyna_t *ex, scd_coo_t *out, float *residual, scd_coo_t *dis)
{
	uint64_t cap = ex->cfg.cap_permille * share(ex) / 1000, gt;
	ex->meta[0] = out->nnz;
	if (!ex->cfg.cap_permille || out->nnz <= cap)
		return;
	cap = cap ? cap : 1;
	uint32_t t = scd_kth_key_f32(out->val, out->nnz, cap, NULL, &gt);
	uint64_t ties = cap - gt, w = 0;
	for (uint64_t j = 0; j < out->nnz; j++) {
		uint32_t i = out->idx[j], key = scd_abs_key(out->val[j]);
		float v = out->val[j];
		if (key > t || (key == t && ties && ties--)) {
			out->idx[w] = i;
			out->val[w++] = v;
		} else if (residual) {
			residual[i] = v;
		} else if (dis) {
			dis->idx[dis->nnz] = i;
			dis->val[dis->nnz++] = v;
		}
	}
	out->nnz = w;
}

sc_status_t scd_exdyna_select(scd_exdyna_t *ex, const float *in, float *residual,
			      scd_coo_t *out, uint64_t *count_p)
{
	if (!ex || !out || (!in && !residual))
		return SC_ERR_INVALID;
	uint64_t lo, hi, n = ex->cfg.numel;
	scd_exdyna_part_range(ex, scd_exdyna_part_of_rank(ex, ex->cfg.rank), &lo, &hi);
	float thr = (float)ex->threshold;
	if (ex->calibrating || gridded(ex)) { /* acc first, then its magnitudes in the part */
		if (in && residual) {
			scd_residual_accumulate(in, residual, 0, n);
			in = NULL;
		}
		const float *acc = (residual ? residual : in) + lo;
		if (ex->calibrating) /* the exact share-th magnitude */
			thr = propose(ex, scd_kth_key_f32(acc, hi - lo, share(ex), NULL, NULL));
		else
			grid_count_f32(ex, acc, hi - lo);
	} else if (in && residual) {
		scd_residual_accumulate(in, residual, 0, lo);
		scd_residual_accumulate(in, residual, hi, n);
	}
	scd_select_threshold(in, residual, lo, hi, thr, out);
	cap_selection(ex, out, residual, NULL);
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
	if (ex->calibrating || gridded(ex)) { /* the partition's keys, in dis as scratch */
		uint64_t m = 0;
		for (uint64_t j = 0; j < in->nnz; j++)
			if (in->idx[j] >= lo && in->idx[j] < hi)
				dis->idx[m++] = scd_abs_key(in->val[j]);
		if (ex->calibrating)
			tkey = scd_threshold_key(
			    propose(ex, scd_kth_key_u32(dis->idx, m, share(ex), NULL, NULL)));
		else
			grid_count_keys(ex, dis->idx, m);
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
	cap_selection(ex, out, NULL, dis);
	if (count_p)
		*count_p = out->nnz;
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
	else if (!ex->cfg.fine_symmetric || actual > k)
		ex->threshold *= ex->up_fine; /* Alg. 5: inside the band, whatever the side */
	else if (actual < k)
		ex->threshold *= ex->down_fine;
}

/* The lower median of the ranks' proposals (non-negative doubles: their bits sort as
 * integers; meta[2 r + 1] holds rank r's), sorted in kpart before it holds the counts. */
static double median_proposal(scd_exdyna_t *ex, const uint64_t *meta)
{
	uint32_t P = ex->cfg.nranks;
	int64_t *v = ex->kpart;
	for (uint32_t r = 0; r < P; r++) {
		int64_t b = (int64_t)meta[2 * r + 1];
		uint32_t j = r;
		for (; j > 0 && v[j - 1] > b; j--)
			v[j] = v[j - 1];
		v[j] = b;
	}
	double t;
	memcpy(&t, &v[(P - 1) / 2], 8);
	return t;
}

/* Whether a total of actual selected is outside [1/R, R] x k (R = recal_permille / 1000). */
static int off_target(const scd_exdyna_t *ex, uint64_t actual)
{
	uint64_t k = ex->k, R = ex->cfg.recal_permille;
	return R && (actual * 1000 > k * R || actual * R < k * 1000);
}

/* The grid threshold whose summed count is nearest the target (by ratio: between the last
 * count above k, A, and the first at or below it, B, A wins when A B < k^2), from the
 * ranks' grid counts (meta[r (1 + GRID_N) + 1 + j]); its index, or -1 when a rank's counts are
 * not a count function (rising, or over numel). Integers only. */
static int grid_pick(scd_exdyna_t *ex, const uint64_t *meta)
{
	uint32_t P = ex->cfg.nranks;
	uint64_t *tot = ex->totals, k = ex->k;
	memset(tot, 0, GRID_N * sizeof(uint64_t));
	for (uint32_t r = 0; r < P; r++) {
		const uint64_t *m = meta + (size_t)r * (1 + GRID_N) + 1;
		if (m[0] > ex->cfg.numel)
			return -1;
		for (int j = 0; j < GRID_N; j++) {
			if (j && m[j] > m[j - 1])
				return -1;
			tot[j] += m[j];
		}
	}
	int j = 0;
	while (j < GRID_N && tot[j] > k)
		j++;
	if (j == GRID_N)
		return GRID_N - 1;
	if (j > 0 && (unsigned __int128)tot[j - 1] * tot[j] < (unsigned __int128)k * k)
		j--;
	return j;
}

int scd_exdyna_calibrating(const scd_exdyna_t *ex)
{
	return ex->calibrating;
}

uint64_t scd_exdyna_jumps(const scd_exdyna_t *ex)
{
	return ex->jumps;
}

double scd_exdyna_proposal(const scd_exdyna_t *ex)
{
	return ex->proposal;
}

uint32_t scd_exdyna_meta_words(const scd_exdyna_t *ex)
{
	return 1 + (gridded(ex) ? GRID_N : ex->calibrating ? 1 : 0);
}

const uint64_t *scd_exdyna_meta(const scd_exdyna_t *ex)
{
	return ex->meta;
}

sc_status_t scd_exdyna_update(scd_exdyna_t *ex, const uint64_t *meta)
{
	if (!ex || !meta)
		return SC_ERR_INVALID;
	uint32_t P = ex->cfg.nranks, W = scd_exdyna_meta_words(ex);
	int pick = -1;
	uint64_t passed = 0; /* how many passed the ranks' thresholds (before the cap) */
	for (uint32_t r = 0; r < P; r++) {
		if (meta[(size_t)r * W] > ex->cfg.numel)
			return SC_ERR_INVALID;
		passed += meta[(size_t)r * W];
	}
	if (ex->calibrating) {
		for (uint32_t r = 0; r < P; r++) {
			double t;
			memcpy(&t, &meta[2 * r + 1], 8);
			if (!(t > 0 && t < INFINITY))
				return SC_ERR_INVALID; /* NaN, negative, infinite */
		}
		ex->threshold = median_proposal(ex, meta);
	} else if (gridded(ex)) {
		if ((pick = grid_pick(ex, meta)) < 0)
			return SC_ERR_INVALID;
	}
	int jump = pick >= 0 && off_target(ex, passed);
	/* the loads: what passed each partition's threshold, or, when the threshold jumps to
	 * the grid's, what would have passed that one */
	uint32_t col = jump ? 1 + (uint32_t)pick : 0;
	int64_t load = 0;
	for (uint32_t r = 0; r < P; r++) {
		int64_t c = (int64_t)meta[(size_t)r * W + col];
		ex->kpart[scd_exdyna_part_of_rank(ex, r)] = c;
		load += c;
	}
	if (load > 0)
		rebalance(ex, load);
	if (jump) {
		int64_t key = (int64_t)ex->grid_key +
			      ((int64_t)pick - SCD_EXDYNA_GRID_HALF) * SCD_EXDYNA_GRID_STEP;
		key = key < 1 ? 1 : key > 0x7f7fffff ? 0x7f7fffff : key;
		ex->threshold = scd_key_to_float((uint32_t)key);
		ex->jumps++;
	} else if (!ex->calibrating) { /* the start's counts came from the ranks' own */
		scale_threshold(ex, passed);
	}
	ex->calibrating = 0;
	ex->grid_key = scd_threshold_key((float)ex->threshold);
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
