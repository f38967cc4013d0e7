/*
 * test_core_hash.c: ZEN hierarchical hashing (device/hhash.h) loses nothing for any
 * density and any adversarial index set, with one and several threads; each entry lands
 * in partition(idx), the same function the hash bitmap's lists use; the push imbalance
 * stays within ZEN Theorem 2's bound; and push + aggregate + hash-bitmap pull returns the
 * dense sum exactly.
 */
#include "unit.h"

#include "device/format.h"
#include "device/hhash.h"
#include "device/partition.h"

#include <string.h>

/* Checks that out (partitioned by offset) is exactly the non-zeros of g. */
static void check_lossless(const scd_hh_t *hh, const float *g, uint64_t n, const scd_coo_t *out,
			   const uint64_t *offset, uint32_t P)
{
	uint64_t want = 0;
	for (uint64_t i = 0; i < n; i++)
		want += g[i] != 0;
	CHECK_MSG(out->nnz == want, "pushed %llu of %llu non-zeros",
		  (unsigned long long)out->nnz, (unsigned long long)want);
	CHECK_EQ_INT(offset[0], 0);
	CHECK_EQ_INT(offset[P], out->nnz);
	uint8_t *seen = calloc(n, 1);
	for (uint32_t p = 0; p < P; p++)
		for (uint64_t j = offset[p]; j < offset[p + 1]; j++) {
			uint32_t i = out->idx[j];
			CHECK_MSG(i < n, "index %u out of range", i);
			CHECK_MSG(!seen[i], "index %u twice", i);
			seen[i] = 1;
			CHECK_MSG(scd_partition_of(scd_hh_partfn(hh), i) == p,
				  "index %u in partition %u", i, p);
			CHECK_MSG(out->val[j] == g[i], "index %u value %g != %g", i,
				  out->val[j], g[i]);
		}
	free(seen);
}

typedef struct {
	scd_hh_t *hh;
	scd_coo_t out;
	uint64_t *offset;
	uint32_t P;
} push_t;

static void push_setup(push_t *ps, scd_hh_cfg_t *cfg)
{
	ps->P = cfg->nparts;
	CHECK_EQ_INT(scd_hh_create(cfg, &ps->hh), SC_OK);
	ps->out = (scd_coo_t){malloc(cfg->nnz_cap * 4 + 4), malloc(cfg->nnz_cap * 4 + 4), 0,
			      cfg->nnz_cap};
	ps->offset = malloc((cfg->nparts + 1) * sizeof(uint64_t));
}

static void push_teardown(push_t *ps)
{
	scd_hh_destroy(ps->hh);
	free(ps->out.idx), free(ps->out.val), free(ps->offset);
}

/* Pushes dense g and checks; also pushes the same as COO and checks again. */
static void push_both_ways(push_t *ps, const float *g, uint64_t n, scd_hh_stats_t *st)
{
	CHECK_EQ_INT(scd_hh_push_dense(ps->hh, g, n, &ps->out, ps->offset, st), SC_OK);
	check_lossless(ps->hh, g, n, &ps->out, ps->offset, ps->P);
	scd_coo_t in = {malloc(n * 4 + 4), malloc(n * 4 + 4), 0, n};
	for (uint64_t i = 0; i < n; i++)
		if (g[i] != 0) {
			in.idx[in.nnz] = (uint32_t)i;
			in.val[in.nnz++] = g[i];
		}
	CHECK_EQ_INT(scd_hh_push_coo(ps->hh, &in, &ps->out, ps->offset, NULL), SC_OK);
	check_lossless(ps->hh, g, n, &ps->out, ps->offset, ps->P);
	free(in.idx), free(in.val);
}

UNIT_TEST(core_hh_lossless_all_densities)
{
	static const double densities[] = {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0};
	for (unsigned d = 0; d < sizeof(densities) / sizeof(densities[0]); d++) {
		uint64_t n = densities[d] < 1e-3 ? 300000 + unit_rng_below(100000)
						 : 1 + unit_rng_below(60000);
		float *g = calloc(n, 4);
		for (uint64_t i = 0; i < n; i++)
			if (unit_rng_double() < densities[d])
				g[i] = (float)(unit_rng_below(1000) + 1);
		g[0] = 7; /* index 0 (the reference code's empty marker) */
		uint32_t P = 1 + (uint32_t)unit_rng_below(64);
		scd_hh_cfg_t cfg = scd_hh_cfg_default(n, P, n, unit_rng());
		cfg.nnz_cap = 0;
		for (uint64_t i = 0; i < n; i++)
			cfg.nnz_cap += g[i] != 0;
		cfg.threads = 1 + (unsigned)unit_rng_below(3);
		cfg.k = 1 + (uint32_t)unit_rng_below(4);
		/* half the time, tiny stages: most entries are inserted during the scan */
		cfg.stage_slots = unit_rng_below(2) ? 0 : 1 + (uint32_t)unit_rng_below(64);
		push_t ps;
		push_setup(&ps, &cfg);
		scd_hh_stats_t st;
		for (int rep = 0; rep < 2; rep++) /* the table must come back clean */
			push_both_ways(&ps, g, n, &st);
		CHECK_EQ_INT(st.parallel + st.serial + st.spill, st.nnz);
		push_teardown(&ps);
		free(g);
	}
}

/* Index sets built to hurt: everything in one partition, long runs, both ends; tiny
 * parallel memory and k = 1 so serial memory overflows into the spill area. */
UNIT_TEST(core_hh_lossless_adversarial)
{
	for (int shape = 0; shape < 4; shape++) {
		uint64_t n = 1000 + unit_rng_below(200000);
		uint32_t P = 1 + (uint32_t)unit_rng_below(64);
		uint64_t seed = unit_rng();
		scd_partfn_t fn = scd_partfn_make(P, seed);
		float *g = calloc(n, 4);
		for (uint64_t i = 0; i < n; i++) {
			int on = shape == 0   ? scd_partition_of(&fn, (uint32_t)i) == 0
				 : shape == 1 ? (i / 5000) % 3 == 0
				 : shape == 2 ? i < 64 || i >= n - 64
					      : unit_rng_below(4) == 0;
			if (on)
				g[i] = (float)(i % 1000) + 1;
		}
		g[0] = 1, g[n - 1] = 2;
		uint64_t nnz = 0;
		for (uint64_t i = 0; i < n; i++)
			nnz += g[i] != 0;
		scd_hh_cfg_t cfg = scd_hh_cfg_default(n, P, nnz, seed);
		cfg.threads = 1 + (unsigned)unit_rng_below(2);
		cfg.stage_slots = unit_rng_below(2) ? 0 : 1 + (uint32_t)unit_rng_below(64);
		if (shape == 3) { /* starve the parallel memory */
			cfg.r1_factor = 0.05;
			cfg.r2_ratio = 0.1;
			cfg.k = 1;
		}
		push_t ps;
		push_setup(&ps, &cfg);
		scd_hh_stats_t st;
		push_both_ways(&ps, g, n, &st);
		if (shape == 3 && nnz > 1000)
			CHECK_MSG(st.spill > 0, "spill path not exercised (%llu serial)",
				  (unsigned long long)st.serial);
		push_teardown(&ps);
		free(g);
	}
}

/* Many threads racing for few slots: CAS claims must not lose an index. */
UNIT_TEST(core_hh_threads_never_lose)
{
	uint64_t n = 400000;
	float *g = calloc(n, 4);
	for (uint64_t i = 0; i < n; i++)
		if (unit_rng_below(3) == 0)
			g[i] = (float)(i & 1023) + 1;
	uint64_t nnz = 0;
	for (uint64_t i = 0; i < n; i++)
		nnz += g[i] != 0;
	for (unsigned run = 0; run < 6; run++) {
		unsigned threads = 2u << (run / 2);
		scd_hh_cfg_t cfg =
		    scd_hh_cfg_default(n, 1 + (uint32_t)unit_rng_below(8), nnz, unit_rng());
		cfg.threads = threads;
		cfg.r1_factor = 0.7; /* crowded: most probes collide */
		/* odd runs: stages of a few entries, so the threads insert into the shared
		 * table while scanning, racing for the same slots (the CAS path) */
		cfg.stage_slots = run & 1 ? 1 + (uint32_t)unit_rng_below(8) : 0;
		push_t ps;
		push_setup(&ps, &cfg);
		for (int rep = 0; rep < 3; rep++) {
			CHECK_EQ_INT(scd_hh_push_dense(ps.hh, g, n, &ps.out, ps.offset, NULL),
				     SC_OK);
			check_lossless(ps.hh, g, n, &ps.out, ps.offset, ps.P);
		}
		push_teardown(&ps);
	}
	free(g);
}

/* More non-zeros than reserved is an error, never a silent loss, and the table stays
 * usable. */
UNIT_TEST(core_hh_over_capacity_is_an_error)
{
	uint64_t n = 10000;
	float *g = calloc(n, 4);
	for (uint64_t i = 0; i < n; i += 2)
		g[i] = 1;
	scd_hh_cfg_t cfg = scd_hh_cfg_default(n, 4, 1000, unit_rng());
	push_t ps;
	push_setup(&ps, &cfg);
	CHECK_EQ_INT(scd_hh_push_dense(ps.hh, g, n, &ps.out, ps.offset, NULL), SC_ERR_LIMIT);
	memset(g, 0, n * 4);
	for (uint64_t i = 0; i < 900; i++)
		g[unit_rng_below(n)] = 3;
	CHECK_EQ_INT(scd_hh_push_dense(ps.hh, g, n, &ps.out, ps.offset, NULL), SC_OK);
	check_lossless(ps.hh, g, n, &ps.out, ps.offset, ps.P);
	push_teardown(&ps);
	free(g);
}

/* ZEN Theorem 2: push imbalance <= 1 + Theta(sqrt(P log P / nnz)); the constant is taken
 * as 4 (a balls-into-bins maximum sits near sqrt(2)). Inputs are skewed: all non-zeros in
 * the first eighth of the tensor, where an even range split would put them on one rank. */
UNIT_TEST(core_hh_imbalance_theorem2)
{
	static const uint32_t Ps[] = {2, 4, 8, 16, 32, 64};
	uint64_t n = 4000000;
	float *g = calloc(n, 4);
	uint64_t nnz = 0;
	for (uint64_t i = 0; i < n / 8; i++)
		if (unit_rng_below(2) == 0) {
			g[i] = 1;
			nnz++;
		}
	for (unsigned j = 0; j < sizeof(Ps) / sizeof(Ps[0]); j++) {
		uint32_t P = Ps[j];
		scd_hh_cfg_t cfg = scd_hh_cfg_default(n, P, nnz, unit_rng());
		push_t ps;
		push_setup(&ps, &cfg);
		scd_hh_stats_t st;
		CHECK_EQ_INT(scd_hh_push_dense(ps.hh, g, n, &ps.out, ps.offset, &st), SC_OK);
		double bound = 1 + 4 * sqrt(P * log((double)P) / (double)nnz);
		CHECK_MSG(st.imbalance <= bound, "P=%u nnz=%llu: imbalance %.4f > bound %.4f",
			  P, (unsigned long long)nnz, st.imbalance, bound);
		push_teardown(&ps);
	}
	free(g);
}

/* Balanced Parallelism end to end on the device: R ranks push (hashing), each server
 * aggregates its partition, encodes a hash bitmap, every rank decodes: the dense sum. */
UNIT_TEST(core_hh_push_pull_matches_dense_sum)
{
	uint32_t R = 2 + (uint32_t)unit_rng_below(6);
	uint64_t n = 1 + unit_rng_below(100000), seed = unit_rng();
	float **g = malloc(R * sizeof(float *)), *sum = calloc(n, 4), *agg = calloc(n, 4);
	float *result = calloc(n, 4);
	for (uint32_t r = 0; r < R; r++) {
		g[r] = calloc(n, 4);
		for (uint64_t i = 0; i < n; i++)
			if (unit_rng_below(20) == 0 || (i < 100 && unit_rng_below(2))) {
				g[r][i] = (float)((int)unit_rng_below(200) - 100);
				sum[i] += g[r][i];
			}
	}
	const scd_partmap_t *map;
	CHECK_EQ_INT(scd_partmap_acquire(n, R, seed, &map), SC_OK);
	scd_hh_cfg_t cfg = scd_hh_cfg_default(n, R, n, seed);
	push_t ps;
	push_setup(&ps, &cfg);
	for (uint32_t r = 0; r < R; r++) { /* push: server p receives offset[p]..[p+1] */
		CHECK_EQ_INT(scd_hh_push_dense(ps.hh, g[r], n, &ps.out, ps.offset, NULL),
			     SC_OK);
		for (uint32_t p = 0; p < R; p++)
			for (uint64_t j = ps.offset[p]; j < ps.offset[p + 1]; j++) {
				CHECK_TRUE(scd_partition_of(&map->fn, ps.out.idx[j]) == p);
				agg[ps.out.idx[j]] += ps.out.val[j];
			}
	}
	void *buf = malloc(8 * n + 64);
	for (uint32_t p = 0; p < R; p++) { /* pull */
		uint64_t bytes;
		CHECK_EQ_INT(scd_hash_bitmap_encode(map, p, agg, buf, 8 * n + 64, &bytes),
			     SC_OK);
		CHECK_EQ_INT(scd_hash_bitmap_decode_dense(map, p, buf, bytes, result), SC_OK);
	}
	for (uint64_t i = 0; i < n; i++)
		CHECK_MSG(result[i] == sum[i], "element %llu: %g != %g", (unsigned long long)i,
			  result[i], sum[i]);
	push_teardown(&ps);
	scd_partmap_release(map);
	for (uint32_t r = 0; r < R; r++)
		free(g[r]);
	free(g), free(sum), free(agg), free(result), free(buf);
}

/* The stable partition of Balanced Parallelism's push: the same partitions as h0, every
 * entry once, each partition ascending; more partitions than fit on the stack too. */
UNIT_TEST(core_partition_coo_stable)
{
	static const uint32_t parts[] = {1, 2, 3, 7, 16, 100};
	for (size_t t = 0; t < sizeof(parts) / sizeof(parts[0]); t++) {
		uint32_t P = parts[t];
		uint64_t numel = 50000 + unit_rng_below(50000), n = 0;
		scd_coo_t in = {malloc(4 * numel), malloc(4 * numel), 0, numel};
		for (uint64_t i = 0; i < numel; i++)
			if (unit_rng_below(10) == 0) {
				in.idx[n] = (uint32_t)i;
				in.val[n++] = (float)i;
			}
		in.nnz = n;
		scd_partfn_t fn = scd_partfn_make(P, unit_rng());
		scd_coo_t out = {malloc(4 * n + 4), malloc(4 * n + 4), 0, n};
		uint64_t *off = malloc(((size_t)P + 1) * sizeof(uint64_t));
		CHECK_EQ_INT(scd_partition_coo(&fn, &in, &out, off), SC_OK);
		CHECK_MSG(out.nnz == n && off[0] == 0 && off[P] == n,
			  "P %u: %llu entries, offsets %llu .. %llu, of %llu", P,
			  (unsigned long long)out.nnz, (unsigned long long)off[0],
			  (unsigned long long)off[P], (unsigned long long)n);
		unsigned char *was = calloc(numel, 1);
		for (uint64_t k = 0; k < n; k++)
			was[in.idx[k]] = 1;
		uint64_t seen = 0;
		for (uint32_t p = 0; p < P; p++)
			for (uint64_t k = off[p]; k < off[p + 1]; k++) {
				CHECK_MSG(scd_partition_of(&fn, out.idx[k]) == p,
					  "P %u: index %u in partition %u", P, out.idx[k], p);
				CHECK_MSG(k == off[p] || out.idx[k] > out.idx[k - 1],
					  "P %u: partition %u not ascending at %llu", P, p,
					  (unsigned long long)k);
				CHECK_TRUE(out.val[k] == (float)out.idx[k] && was[out.idx[k]]);
				seen++;
			}
		CHECK_TRUE(seen == n);
		free(was);
		out.cap = n ? n - 1 : 0;
		if (n)
			CHECK_EQ_INT(scd_partition_coo(&fn, &in, &out, off), SC_ERR_LIMIT);
		free(in.idx), free(in.val), free(out.idx), free(out.val), free(off);
	}
}
