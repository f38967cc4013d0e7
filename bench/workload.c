/*
 * workload.c: the synthetic inputs of the collective benchmark (see workload.h).
 *
 * Randomness is counter based (splitmix64 of seed, rank, step and a counter), so a rank's
 * input never depends on the order in which inputs are generated, and ranks rebuild each
 * other's inputs exactly. Zipf ids come from the inverse CDF of the continuous law
 * x^-s on [1, V + 1) (floor, minus one): id 0 is the most frequent; the small bias against
 * the exact discrete law does not matter for a benchmark input. Distinct ids are tracked in
 * a bitmap, so the ids come out ascending and unique by a scan of the bitmap.
 */
#include "workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ZIPF_VALUE_CAP	 1000 /* counts above this are capped: sums stay small integers */
#define ZIPF_DRAWS_SLACK 64

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t key(uint64_t seed, uint64_t rank, uint64_t step, uint64_t tag)
{
	return mix(mix(mix(seed ^ 0x5c0ffee5ull) ^ rank * 0x100000001b3ull) ^ step) ^ tag;
}

static double unit(uint64_t h)
{
	return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

int wl_parse_kind(const char *s, wl_kind_t *kind_p)
{
	static const char *const names[] = {"zipf", "uniform", "topk", "kjv"};
	for (int i = 0; i < 4; i++)
		if (s && !strcasecmp(s, names[i])) {
			*kind_p = (wl_kind_t)i;
			return 0;
		}
	return -1;
}

const char *wl_kind_name(wl_kind_t kind)
{
	return kind == WL_ZIPF	    ? "zipf"
	       : kind == WL_UNIFORM ? "uniform"
	       : kind == WL_KJV	    ? "kjv"
				    : "topk";
}

int wl_is_coo(wl_kind_t kind)
{
	return kind != WL_TOPK;
}

void wl_scratch_free(wl_scratch_t *s)
{
	free(s->bits);
	free(s->draws);
	memset(s, 0, sizeof(*s));
}

uint64_t wl_coo_cap(const wl_cfg_t *cfg)
{
	if (cfg->kind == WL_KJV) /* at most a window's tokens distinct, a row each */
		return (uint64_t)(cfg->batch < cfg->vocab ? cfg->batch : cfg->vocab) * cfg->dim;
	double k = cfg->density * (double)cfg->numel * 1.1 + 64;
	return k > (double)cfg->numel ? cfg->numel : (uint64_t)k;
}

static int bits_reset(wl_scratch_t *s, uint64_t numel)
{
	size_t words = (size_t)((numel + 63) / 64);
	if (!s->bits) {
		s->bits = malloc(words * 8 + 8);
		if (!s->bits)
			return -1;
	}
	memset(s->bits, 0, words * 8);
	return 0;
}

/* Draws Zipf ids into the bitmap until k distinct ids are set; records every draw. */
static int64_t zipf_draw(const wl_cfg_t *cfg, int rank, uint64_t step, uint64_t k,
			 wl_scratch_t *s, uint64_t *ndraws_p)
{
	double V = (double)cfg->numel, e = 1 - cfg->zipf_s;
	double top = fabs(e) < 1e-9 ? log(V + 1) : pow(V + 1, e) - 1;
	uint64_t base = key(cfg->seed, (uint64_t)rank + 1, step, 0x21f);
	uint64_t distinct = 0, n = 0, limit = 64 * k + (1u << 20);
	while (distinct < k && n < limit) {
		if (n == s->cap_draws) {
			size_t cap = s->cap_draws ? s->cap_draws * 2 : k * 2 + 1024;
			uint32_t *d = realloc(s->draws, cap * sizeof(uint32_t));
			if (!d)
				return -1;
			s->draws = d;
			s->cap_draws = cap;
		}
		double u = unit(mix(base + n));
		double x = fabs(e) < 1e-9 ? exp(u * top) : pow(1 + u * top, 1 / e);
		uint64_t id = x < 1 ? 0 : (uint64_t)x - 1;
		if (id >= cfg->numel)
			id = cfg->numel - 1;
		uint64_t bit = 1ull << (id & 63);
		if (!(s->bits[id >> 6] & bit)) {
			s->bits[id >> 6] |= bit;
			distinct++;
		}
		s->draws[n++] = (uint32_t)id;
	}
	*ndraws_p = n;
	return (int64_t)distinct;
}

/* Scans the bitmap into ascending ids. */
static uint64_t bits_scan(const wl_scratch_t *s, uint64_t numel, uint32_t *idx, uint64_t cap)
{
	uint64_t n = 0, words = (numel + 63) / 64;
	for (uint64_t w = 0; w < words; w++)
		for (uint64_t b = s->bits[w]; b && n < cap; b &= b - 1)
			idx[n++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(b));
	return n;
}

static uint64_t lower_bound(const uint32_t *idx, uint64_t n, uint32_t v)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (idx[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A non-zero small integer in [-4, 4] from a hash. */
static float small_value(uint64_t h)
{
	int v = (int)(h % 8) - 4;
	return (float)(v >= 0 ? v + 1 : v);
}

static int64_t uniform_coo(const wl_cfg_t *cfg, int rank, uint64_t step, uint32_t *idx,
			   float *val, uint64_t cap)
{
	double d = cfg->density > 1 ? 1 : cfg->density;
	double o = cfg->overlap < 0 ? 0 : cfg->overlap > 1 ? 1 : cfg->overlap;
	double p_shared = o * d;
	double p_priv = (1 - o) * d * cfg->P / (1 - p_shared > 1e-12 ? 1 - p_shared : 1e-12);
	uint64_t ks = key(cfg->seed, 0, step, 0x51),
		 kp = key(cfg->seed, (uint64_t)rank + 1, step, 0x52);
	uint64_t ts = (uint64_t)(p_shared * 18446744073709551615.0);
	uint64_t tp = p_priv >= 1 ? UINT64_MAX : (uint64_t)(p_priv * 18446744073709551615.0);
	uint64_t n = 0;
	for (uint64_t i = 0; i < cfg->numel; i++) {
		uint64_t hs = mix(ks + i);
		int in = p_shared >= 1 || hs < ts;
		if (!in && i % (uint64_t)cfg->P == (uint64_t)rank)
			in = tp == UINT64_MAX || mix(kp + i) < tp;
		if (!in)
			continue;
		if (n == cap)
			return -1;
		idx[n] = (uint32_t)i;
		val[n++] = small_value(mix(kp ^ (i * 0x9e3779b97f4a7c15ull)));
	}
	return (int64_t)n;
}

/* Where rank r's window of B tokens at step s starts: its shard's start, plus s B modulo
 * the room in the shard. */
static size_t kjv_start(size_t n_tokens, uint32_t P, uint32_t r, uint64_t s, uint32_t B)
{
	size_t lo = n_tokens * r / P, len = n_tokens * (r + 1) / P - lo;
	return lo + (size_t)((s * B) % (len - B + 1));
}

uint64_t wl_kjv_window(const int32_t *tokens, size_t n_tokens, uint32_t P, uint32_t r,
		       uint64_t s, uint32_t B, uint64_t *seen, uint32_t *rows)
{
	size_t start = kjv_start(n_tokens, P, r, s, B);
	uint64_t n = 0;
	for (size_t i = start; i < start + B; i++) {
		uint32_t w = (uint32_t)tokens[i];
		uint64_t m = 1ull << (w & 63);
		if (!(seen[w >> 6] & m)) {
			seen[w >> 6] |= m;
			rows[n++] = w;
		}
	}
	for (uint64_t j = 0; j < n; j++) /* leave seen clear for the next window */
		seen[rows[j] >> 6] &= ~(1ull << (rows[j] & 63));
	return n;
}

/* The kjv workload's input (workload.h): the window's distinct words ascending (through
 * the scratch bitmap), their counts, each row's dim elements. */
static int64_t kjv_coo(const wl_cfg_t *cfg, int rank, uint64_t step, uint32_t *idx, float *val,
		       uint64_t cap, wl_scratch_t *scr)
{
	uint32_t B = cfg->batch, D = cfg->dim;
	if (!cfg->tokens || !D || !B || cfg->n_tokens / (uint64_t)cfg->P < B ||
	    bits_reset(scr, cfg->vocab) < 0)
		return -1;
	size_t start = kjv_start(cfg->n_tokens, (uint32_t)cfg->P, (uint32_t)rank, step, B);
	for (size_t i = start; i < start + B; i++)
		scr->bits[(uint32_t)cfg->tokens[i] >> 6] |= 1ull << (cfg->tokens[i] & 63);
	uint64_t n = bits_scan(scr, cfg->vocab, idx, cap); /* the rows, ascending */
	if (n * D > cap)
		return -1;
	uint32_t *count = scr->draws; /* n counts, in the draws' room */
	if (scr->cap_draws < n) {
		count = realloc(scr->draws, (size_t)B * sizeof(uint32_t));
		if (!count)
			return -1;
		scr->draws = count;
		scr->cap_draws = B;
	}
	memset(count, 0, n * sizeof(uint32_t));
	for (size_t i = start; i < start + B; i++)
		count[lower_bound(idx, n, (uint32_t)cfg->tokens[i])]++;
	for (uint64_t j = n; j-- > 0;) { /* rows to elements, from the last: in place */
		uint64_t row = idx[j];
		for (uint32_t c = D; c-- > 0;) {
			idx[j * D + c] = (uint32_t)(row * D + c);
			val[j * D + c] = (float)(count[j] * (1 + c % 3));
		}
	}
	return (int64_t)(n * D);
}

int64_t wl_coo(const wl_cfg_t *cfg, int rank, uint64_t step, uint32_t *idx, float *val,
	       uint64_t cap, wl_scratch_t *scr)
{
	if (cfg->kind == WL_UNIFORM)
		return uniform_coo(cfg, rank, step, idx, val, cap);
	if (cfg->kind == WL_KJV)
		return kjv_coo(cfg, rank, step, idx, val, cap, scr);
	if (cfg->kind != WL_ZIPF)
		return -1;
	double kd = cfg->density * (double)cfg->numel;
	uint64_t k = kd < 1 ? 1 : kd > (double)cfg->numel ? cfg->numel : (uint64_t)(kd + 0.5);
	if (k > cap || bits_reset(scr, cfg->numel) < 0)
		return -1;
	uint64_t ndraws;
	int64_t distinct = zipf_draw(cfg, rank, step, k, scr, &ndraws);
	if (distinct < 0)
		return -1;
	uint64_t n = bits_scan(scr, cfg->numel, idx, cap);
	memset(val, 0, n * sizeof(float));
	for (uint64_t j = 0; j < ndraws; j++) {
		uint64_t p = lower_bound(idx, n, scr->draws[j]);
		if (val[p] < ZIPF_VALUE_CAP)
			val[p] += 1;
	}
	return (int64_t)n;
}

/* A roughly normal integer in [-510, 510] (sum of four bytes, centred). */
static int irwin(uint64_t h)
{
	return (int)(h & 255) + (int)((h >> 8) & 255) + (int)((h >> 16) & 255) +
	       (int)((h >> 24) & 255) - 510;
}

void wl_dense(const wl_cfg_t *cfg, int rank, uint64_t step, uint64_t lo, uint64_t hi, float *x)
{
	uint64_t ks = key(cfg->seed, 0, step, 0x71),
		 kr = key(cfg->seed, (uint64_t)rank + 1, step, 0x72);
	for (uint64_t i = lo; i < hi; i++)
		x[i - lo] = (float)(irwin(mix(ks + i)) + irwin(mix(kr + i)));
}

int wl_describe(const wl_cfg_t *cfg, uint64_t step, wl_shape_t *sh)
{
	int P = cfg->P;
	uint64_t cap = wl_coo_cap(cfg);
	uint32_t **idx = calloc((size_t)P, sizeof(*idx));
	uint64_t *nnz = calloc((size_t)P, sizeof(*nnz));
	float *val = malloc(cap * sizeof(float));
	uint64_t words = (cfg->numel + 63) / 64;
	uint64_t *uni = calloc(words + 1, 8);
	wl_scratch_t scr = {0};
	int rc = -1;
	memset(sh, 0, sizeof(*sh));
	if (!idx || !nnz || !val || !uni)
		goto out;
	for (int r = 0; r < P; r++) {
		idx[r] = malloc(cap * sizeof(uint32_t));
		int64_t n = idx[r] ? wl_coo(cfg, r, step, idx[r], val, cap, &scr) : -1;
		if (n < 0)
			goto out;
		nnz[r] = (uint64_t)n;
		sh->total_nnz += nnz[r];
		if (nnz[r] > sh->max_nnz)
			sh->max_nnz = nnz[r];
		for (uint64_t j = 0; j < nnz[r]; j++)
			uni[idx[r][j] >> 6] |= 1ull << (idx[r][j] & 63);
	}
	uint64_t maxr = 0;
	for (int p = 0; p < P; p++) {
		uint64_t lo = (uint64_t)p * cfg->numel / (uint64_t)P;
		uint64_t hi = (uint64_t)(p + 1) * cfg->numel / (uint64_t)P, cnt = 0;
		for (uint64_t i = lo; i < hi; i++)
			cnt += (uni[i >> 6] >> (i & 63)) & 1;
		sh->union_nnz += cnt;
		if (cnt > maxr)
			maxr = cnt;
	}
	double mean = (double)sh->total_nnz / P;
	sh->density = mean / (double)cfg->numel;
	sh->gamma = mean > 0 ? (double)sh->union_nnz / mean : 1;
	sh->skew = sh->union_nnz ? (double)maxr * P / (double)sh->union_nnz : 1;
	double ov = 0;
	int pairs = 0;
	for (int a = 0; a < P; a++)
		for (int b = a + 1; b < P; b++) {
			uint64_t i = 0, j = 0, common = 0;
			while (i < nnz[a] && j < nnz[b]) {
				if (idx[a][i] == idx[b][j])
					common++, i++, j++;
				else if (idx[a][i] < idx[b][j])
					i++;
				else
					j++;
			}
			uint64_t m = nnz[a] < nnz[b] ? nnz[a] : nnz[b];
			ov += m ? (double)common / (double)m : 0;
			pairs++;
		}
	sh->overlap = pairs ? ov / pairs : 1;
	rc = 0;
out:
	for (int r = 0; idx && r < P; r++)
		free(idx[r]);
	free(idx);
	free(nnz);
	free(val);
	free(uni);
	wl_scratch_free(&scr);
	return rc;
}
