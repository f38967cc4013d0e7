/*
 * test_gpu_hash.c: the GPU device's hashing and formats (gpu/hhash.cu, gpu/sketch.cu)
 * through the host build (Thrust's OpenMP backend, 8 threads racing on the atomics)
 * against the cpu device on the same inputs:
 *   - hierarchical hashing: the same offsets and, per partition, the same set of pairs
 *     as scd_hh_push_dense / _coo (the GPU sorts each partition ascending; the cpu's
 *     order is timing-dependent, so it is sorted here before comparing); nothing lost or
 *     duplicated from density 1e-5 to 1 and on adversarial sets (one partition, index 0
 *     and numel - 1, long runs, tiny parallel memory forcing serial and spill);
 *   - hash bitmap encode / decode / decode_dense of whole partitions (each its slice of
 *     the list) and encode of a segment from its own values, and blocks encode:
 *     byte-identical;
 *   - count sketch encode (small integer values: exact sums) and decode_dense (rows 1..6,
 *     medians included): identical.
 * Inputs go to device memory and results come back through scg_from_host / scg_to_host,
 * so the same tests can run against the CUDA build (make test-gpu).
 */
#include "unit.h"

#include "device/format.h"
#include "device/hhash.h"
#include "device/partition.h"
#include "device/sketch.h"
#include "scg.h"

#include <string.h>
#ifndef SCG_TEST_GPU
#include <omp.h>
#endif

/* The device on this thread; in the host build, 8 OpenMP threads racing on 2 cores. */
static void threads8(void)
{
	CHECK_MSG(scg_init(0) == SC_OK, "scg_init: %s", scg_error());
#ifndef SCG_TEST_GPU
	omp_set_num_threads(8);
#endif
}

/* A device copy of bytes of host memory. */
static void *dev_copy(const void *h, size_t bytes)
{
	void *d = NULL;
	CHECK_MSG(scg_alloc(bytes ? bytes : 1, &d) == SC_OK, "%s", scg_error());
	if (bytes)
		CHECK_MSG(scg_from_host(d, h, bytes) == SC_OK, "%s", scg_error());
	return d;
}

/* A host copy (malloc'd) of bytes of device memory. */
static void *host_copy(const void *d, size_t bytes)
{
	void *h = malloc(bytes ? bytes : 1);
	if (bytes)
		CHECK_MSG(scg_to_host(h, d, bytes) == SC_OK, "%s", scg_error());
	return h;
}

static float rand_val(void)
{
	float v;
	do
		v = (float)(unit_rng_double() * 2.0 - 1.0) * (float)(1 + unit_rng_below(1000));
	while (v == 0.0f);
	return v;
}

/* Dense tensor of n elements at the given density (every element drawn). */
static float *rand_dense(uint64_t n, double density)
{
	float *g = calloc(n + 1, 4);
	for (uint64_t i = 0; i < n; i++)
		if (unit_rng_double() < density)
			g[i] = rand_val();
	return g;
}

static int cmp_pair(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Partition p's pairs as sorted (idx << 32 | value bits). */
static uint64_t *pairs_of(const uint32_t *idx, const float *val, uint64_t lo, uint64_t hi)
{
	uint64_t *e = malloc((hi - lo + 1) * 8);
	for (uint64_t j = lo; j < hi; j++) {
		uint32_t b;
		memcpy(&b, &val[j], 4);
		e[j - lo] = (uint64_t)idx[j] << 32 | b;
	}
	qsort(e, hi - lo, 8, cmp_pair);
	return e;
}

/* GPU output: exactly the non-zeros of g, each once, in partition(idx), ascending within
 * its partition; and the same sets as the cpu's. */
static void check_push(const float *g, uint64_t n, const scd_partfn_t *fn,
		       const scg_coo_t *gdev, const uint64_t *goff, const scd_coo_t *co,
		       const uint64_t *coff)
{
	uint32_t P = fn->nparts;
	scg_coo_t gh = {host_copy(gdev->idx, gdev->nnz * 4),
			host_copy(gdev->val, gdev->nnz * 4), gdev->nnz, gdev->nnz};
	const scg_coo_t *go = &gh;
	uint64_t want = 0;
	for (uint64_t i = 0; i < n; i++)
		want += g[i] != 0.0f;
	CHECK_MSG(go->nnz == want, "gpu pushed %llu of %llu non-zeros",
		  (unsigned long long)go->nnz, (unsigned long long)want);
	CHECK_EQ_INT(goff[0], 0);
	CHECK_EQ_INT(goff[P], go->nnz);
	uint8_t *seen = calloc(n + 1, 1);
	for (uint32_t p = 0; p < P; p++)
		for (uint64_t j = goff[p]; j < goff[p + 1]; j++) {
			uint32_t i = go->idx[j];
			CHECK_MSG(i < n, "index %u out of range", i);
			CHECK_MSG(!seen[i], "index %u twice", i);
			seen[i] = 1;
			CHECK_MSG(scd_partition_of(fn, i) == p, "index %u in partition %u", i,
				  p);
			CHECK_MSG(memcmp(&go->val[j], &g[i], 4) == 0, "index %u value %g != %g",
				  i, go->val[j], g[i]);
			CHECK_MSG(j == goff[p] || go->idx[j - 1] < i,
				  "partition %u not ascending", p);
		}
	free(seen);
	if (!co) {
		free(gh.idx), free(gh.val);
		return;
	}
	CHECK_EQ_INT(co->nnz, go->nnz);
	for (uint32_t p = 0; p <= P; p++)
		CHECK_MSG(coff[p] == goff[p], "offset %u: cpu %llu gpu %llu", p,
			  (unsigned long long)coff[p], (unsigned long long)goff[p]);
	for (uint32_t p = 0; p < P; p++) {
		uint64_t *a = pairs_of(co->idx, co->val, coff[p], coff[p + 1]);
		uint64_t *b = pairs_of(go->idx, go->val, goff[p], goff[p + 1]);
		CHECK_MSG(memcmp(a, b, (coff[p + 1] - coff[p]) * 8) == 0,
			  "partition %u: cpu and gpu sets differ", p);
		free(a), free(b);
	}
	free(gh.idx), free(gh.val);
}

typedef struct {
	scd_hh_t *cpu;
	scg_hh_t *gpu;
	scd_partfn_t fn;
	scd_coo_t co;
	scg_coo_t go;
	uint64_t *coff, *goff;
} pair_t;

static void pair_setup(pair_t *s, const scd_hh_cfg_t *cfg)
{
	scg_hh_cfg_t gcfg;
	memcpy(&gcfg, cfg, sizeof(gcfg)); /* the same layout */
	CHECK_EQ_INT(sizeof(gcfg), sizeof(*cfg));
	CHECK_EQ_INT(scd_hh_create(cfg, &s->cpu), SC_OK);
	CHECK_MSG(scg_hh_create(&gcfg, &s->gpu) == SC_OK, "%s", scg_error());
	s->fn = scd_partfn_make(cfg->nparts, cfg->seed);
	uint64_t cap = cfg->nnz_cap;
	s->co = (scd_coo_t){malloc(cap * 4 + 4), malloc(cap * 4 + 4), 0, cap};
	s->go = (scg_coo_t){NULL, NULL, 0, cap};
	CHECK_EQ_INT(scg_alloc(cap * 4 + 4, (void **)&s->go.idx), SC_OK);
	CHECK_EQ_INT(scg_alloc(cap * 4 + 4, (void **)&s->go.val), SC_OK);
	s->coff = malloc((cfg->nparts + 1) * 8);
	s->goff = malloc((cfg->nparts + 1) * 8);
}

static void pair_teardown(pair_t *s)
{
	scd_hh_destroy(s->cpu);
	scg_hh_destroy(s->gpu);
	free(s->co.idx), free(s->co.val);
	scg_free(s->go.idx), scg_free(s->go.val);
	free(s->coff), free(s->goff);
}

/* Pushes dense g through both devices, then the same as COO, and checks. */
static void push_both(pair_t *s, const float *g, uint64_t n, scg_hh_stats_t *st)
{
	CHECK_EQ_INT(scd_hh_push_dense(s->cpu, g, n, &s->co, s->coff, NULL), SC_OK);
	float *dg = dev_copy(g, n * 4);
	CHECK_MSG(scg_hh_push_dense(s->gpu, dg, n, &s->go, s->goff, st) == SC_OK, "%s",
		  scg_error());
	scg_free(dg);
	check_push(g, n, &s->fn, &s->go, s->goff, &s->co, s->coff);
	scd_coo_t in = {malloc(n * 4 + 4), malloc(n * 4 + 4), 0, n};
	for (uint64_t i = 0; i < n; i++)
		if (g[i] != 0.0f) {
			in.idx[in.nnz] = (uint32_t)i;
			in.val[in.nnz++] = g[i];
		}
	/* shuffled: the COO path must not depend on order */
	for (uint64_t i = in.nnz; i > 1; i--) {
		uint64_t j = unit_rng_below(i);
		uint32_t ti = in.idx[i - 1];
		float tv = in.val[i - 1];
		in.idx[i - 1] = in.idx[j], in.val[i - 1] = in.val[j];
		in.idx[j] = ti, in.val[j] = tv;
	}
	scg_coo_t gin = {dev_copy(in.idx, in.nnz * 4), dev_copy(in.val, in.nnz * 4), in.nnz,
			 in.cap};
	CHECK_EQ_INT(scd_hh_push_coo(s->cpu, &in, &s->co, s->coff, NULL), SC_OK);
	CHECK_MSG(scg_hh_push_coo(s->gpu, &gin, &s->go, s->goff, NULL) == SC_OK, "%s",
		  scg_error());
	check_push(g, n, &s->fn, &s->go, s->goff, &s->co, s->coff);
	free(in.idx), free(in.val);
	scg_free(gin.idx), scg_free(gin.val);
}

UNIT_TEST_TIMEOUT(gpu_hh_matches_cpu_all_densities, 120)
{
	threads8();
	static const double dens[] = {1e-5, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0};
	for (unsigned d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
		uint64_t n = 1000 + unit_rng_below(dens[d] < 1e-3 ? 400000 : 60000);
		uint32_t P = 1 + (uint32_t)unit_rng_below(16);
		scd_hh_cfg_t cfg = scd_hh_cfg_default(n, P, n, unit_rng());
		cfg.k = 1 + (uint32_t)unit_rng_below(4);
		cfg.threads = 2;
		cfg.nnz_expected = 1 + (uint64_t)(dens[d] * (double)n);
		pair_t s;
		pair_setup(&s, &cfg);
		for (int rep = 0; rep < 2; rep++) { /* the table is clean for the next push */
			float *g = rand_dense(n, dens[d]);
			push_both(&s, g, n, NULL);
			free(g);
		}
		pair_teardown(&s);
	}
}

UNIT_TEST_TIMEOUT(gpu_hh_adversarial, 120)
{
	threads8();
	for (int kind = 0; kind < 5; kind++) {
		uint64_t n = 5000 + unit_rng_below(50000);
		uint32_t P = 2 + (uint32_t)unit_rng_below(15);
		scd_hh_cfg_t cfg = scd_hh_cfg_default(n, P, n, unit_rng());
		cfg.threads = 2;
		/* parallel memory for few non-zeros: most land in serial memory or spill */
		cfg.nnz_expected = 1 + unit_rng_below(64);
		pair_t s;
		pair_setup(&s, &cfg);
		float *g = calloc(n + 1, 4);
		if (kind == 0) { /* every index of partition 0 */
			for (uint64_t i = 0; i < n; i++)
				if (scd_partition_of(&s.fn, (uint32_t)i) == 0)
					g[i] = rand_val();
		} else if (kind == 1) { /* the ends only */
			g[0] = rand_val();
			g[n - 1] = rand_val();
		} else if (kind == 2) { /* long runs */
			for (int r = 0; r < 4; r++) {
				uint64_t lo = unit_rng_below(n), len = unit_rng_below(n / 4);
				for (uint64_t i = lo; i < lo + len && i < n; i++)
					g[i] = rand_val();
			}
			g[0] = rand_val();
			g[n - 1] = rand_val();
		} else if (kind == 3) { /* all of it */
			for (uint64_t i = 0; i < n; i++)
				g[i] = rand_val();
		} /* kind 4: empty */
		scg_hh_stats_t st;
		for (int rep = 0; rep < 3; rep++)
			push_both(&s, g, n, &st);
		if (kind == 0 || kind == 3)
			CHECK_MSG(st.serial > 0 && st.spill > 0,
				  "kind %d: serial %llu spill %llu (want both used)", kind,
				  (unsigned long long)st.serial, (unsigned long long)st.spill);
		CHECK_EQ_INT(st.parallel + st.serial + st.spill, st.nnz);
		free(g);
		pair_teardown(&s);
	}
}

/* Many threads claiming few parallel slots at once: a claim that is not a true
 * compare-and-swap loses or duplicates entries here within a few pushes. */
UNIT_TEST_TIMEOUT(gpu_hh_contention, 120)
{
	threads8();
	uint64_t n = 20000 + unit_rng_below(30000);
	scd_hh_cfg_t cfg =
	    scd_hh_cfg_default(n, 1 + (uint32_t)unit_rng_below(3), n, unit_rng());
	cfg.k = 1 + (uint32_t)unit_rng_below(3);
	cfg.nnz_expected = n / 8; /* parallel memory for a quarter of the non-zeros */
	cfg.r2_ratio = 0.5;
	scg_hh_cfg_t gcfg;
	memcpy(&gcfg, &cfg, sizeof(gcfg));
	scg_hh_t *hh;
	CHECK_MSG(scg_hh_create(&gcfg, &hh) == SC_OK, "%s", scg_error());
	scd_partfn_t fn = scd_partfn_make(cfg.nparts, cfg.seed);
	scg_coo_t out = {NULL, NULL, 0, n};
	CHECK_EQ_INT(scg_alloc(n * 4, (void **)&out.idx), SC_OK);
	CHECK_EQ_INT(scg_alloc(n * 4, (void **)&out.val), SC_OK);
	uint64_t *off = malloc((cfg.nparts + 1) * 8);
	float *g = rand_dense(n, 0.5), *dg = dev_copy(g, n * 4);
	for (int rep = 0; rep < 60; rep++) {
		scg_hh_stats_t st;
		CHECK_MSG(scg_hh_push_dense(hh, dg, n, &out, off, &st) == SC_OK, "%s",
			  scg_error());
		check_push(g, n, &fn, &out, off, NULL, NULL);
		CHECK_TRUE(st.serial > 0);
	}
	free(g), free(off);
	scg_free(dg), scg_free(out.idx), scg_free(out.val);
	scg_hh_destroy(hh);
}

UNIT_TEST(gpu_hh_limit_leaves_table_clean)
{
	threads8();
	uint64_t n = 20000, cap = 500;
	scd_hh_cfg_t cfg = scd_hh_cfg_default(n, 4, cap, unit_rng());
	cfg.nnz_expected = n; /* a table with room for all: only nnz_cap can refuse */
	pair_t s;
	pair_setup(&s, &cfg);
	float *g = rand_dense(n, 0.2); /* about 4000 non-zeros: past the capacity */
	float *dg = dev_copy(g, n * 4);
	CHECK_EQ_INT(scg_hh_push_dense(s.gpu, dg, n, &s.go, s.goff, NULL), SC_ERR_LIMIT);
	CHECK_EQ_INT(s.go.nnz, 0);
	/* past nnz_cap with room in out: still refused, nothing silently dropped */
	scg_coo_t big = {dev_copy(NULL, 0), dev_copy(NULL, 0), 0, n};
	scg_free(big.idx), scg_free(big.val);
	CHECK_EQ_INT(scg_alloc(n * 4, (void **)&big.idx), SC_OK);
	CHECK_EQ_INT(scg_alloc(n * 4, (void **)&big.val), SC_OK);
	CHECK_EQ_INT(scg_hh_push_dense(s.gpu, dg, n, &big, s.goff, NULL), SC_ERR_LIMIT);
	scg_free(big.idx), scg_free(big.val);
	scg_free(dg);
	CHECK_EQ_INT(s.go.nnz, 0);
	free(g);
	g = rand_dense(n, 0.01);
	push_both(&s, g, n, NULL);
	free(g);
	pair_teardown(&s);
}

UNIT_TEST_TIMEOUT(gpu_hash_bitmap_identical, 120)
{
	threads8();
	static const double dens[] = {0.0, 1e-4, 0.01, 0.3, 1.0};
	for (unsigned d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
		uint64_t n = 1 + unit_rng_below(100000);
		uint32_t P = 1 + (uint32_t)unit_rng_below(16);
		const scd_partmap_t *map;
		CHECK_EQ_INT(scd_partmap_acquire(n, P, unit_rng(), &map), SC_OK);
		float *g = rand_dense(n, dens[d]), *dg = dev_copy(g, n * 4);
		uint32_t *list = dev_copy(map->list, n * 4);
		for (uint32_t p = 0; p < P; p++) {
			/* the whole partition: its slice of the list */
			const uint32_t *I = list + map->offset[p];
			uint64_t sz = scd_partmap_size(map, p),
				 cap = 8 * ((sz + 63) / 64) + 4 * sz;
			char *cb = calloc(cap + 8, 1), *gbd = dev_copy(cb, cap + 8);
			uint64_t cbytes = 0, gbytes = 0;
			CHECK_EQ_INT(scd_hash_bitmap_encode(map, p, g, cb, cap, &cbytes),
				     SC_OK);
			CHECK_MSG(scg_hash_bitmap_encode(I, sz, dg, gbd, cap, &gbytes) == SC_OK,
				  "%s", scg_error());
			CHECK_EQ_INT(gbytes, cbytes);
			char *gb = host_copy(gbd, cbytes);
			CHECK_MSG(memcmp(cb, gb, cbytes) == 0, "partition %u: encodings differ",
				  p);
			/* the decoders read the cpu's encoding */
			CHECK_EQ_INT(scg_from_host(gbd, cb, cap + 8), SC_OK);
			scd_coo_t c = {malloc(sz * 4 + 4), malloc(sz * 4 + 4), 0, sz};
			scg_coo_t o = {dev_copy(c.idx, sz * 4 + 4), dev_copy(c.val, sz * 4 + 4),
				       0, sz};
			CHECK_EQ_INT(scd_hash_bitmap_decode(map, p, cb, cbytes, &c), SC_OK);
			CHECK_MSG(scg_hash_bitmap_decode(I, sz, gbd, cbytes, &o) == SC_OK, "%s",
				  scg_error());
			CHECK_EQ_INT(o.nnz, c.nnz);
			uint32_t *oi = host_copy(o.idx, c.nnz * 4);
			float *ov = host_copy(o.val, c.nnz * 4);
			CHECK_TRUE(memcmp(oi, c.idx, c.nnz * 4) == 0);
			CHECK_TRUE(memcmp(ov, c.val, c.nnz * 4) == 0);
			free(oi), free(ov);
			/* decode dense */
			float *cd = calloc(n, 4), *gdd = dev_copy(cd, n * 4);
			CHECK_EQ_INT(scd_hash_bitmap_decode_dense(map, p, cb, cbytes, cd),
				     SC_OK);
			CHECK_MSG(scg_hash_bitmap_decode_dense(I, sz, gbd, cbytes, gdd) ==
				      SC_OK,
				  "%s", scg_error());
			float *gd = host_copy(gdd, n * 4);
			CHECK_TRUE(memcmp(cd, gd, n * 4) == 0);
			/* malformed lengths are refused as the cpu refuses them */
			if (cbytes >= 4) {
				CHECK_EQ_INT(scg_hash_bitmap_decode(I, sz, gbd, cbytes - 4, &o),
					     SC_ERR_PROTOCOL);
				CHECK_EQ_INT(
				    scg_hash_bitmap_decode_dense(I, sz, gbd, cbytes + 4, gdd),
				    SC_ERR_PROTOCOL);
			}
			if (sz)
				CHECK_EQ_INT(
				    scg_hash_bitmap_encode(I, sz, dg, gbd, cap - 1, &gbytes),
				    SC_ERR_LIMIT);
			/* a segment [lo, hi) of the partition, from its own values */
			uint64_t lo = unit_rng_below(sz + 1),
				 hi = lo + unit_rng_below(sz - lo + 1);
			scd_hbseg_t seg = {p, lo, hi};
			float *local = malloc((sz + 1) * 4);
			for (uint64_t j = 0; j < sz; j++)
				local[j] = g[map->list[map->offset[p] + j]];
			float *dlocal = dev_copy(local + lo, (hi - lo) * 4);
			CHECK_EQ_INT(scd_hash_bitmap_encode_seg(map, &seg, local + lo, NULL, cb,
								cap, &cbytes),
				     SC_OK);
			CHECK_MSG(scg_hash_bitmap_encode_local(dlocal, NULL, lo, hi, gbd, cap,
							       &gbytes) == SC_OK,
				  "%s", scg_error());
			CHECK_EQ_INT(gbytes, cbytes);
			free(gb);
			gb = host_copy(gbd, cbytes);
			CHECK_MSG(memcmp(cb, gb, cbytes) == 0,
				  "partition %u segment [%llu, %llu): encodings differ", p,
				  (unsigned long long)lo, (unsigned long long)hi);
			scg_free(dlocal);
			free(local);
			free(cd), free(gd), free(c.idx), free(c.val), free(cb), free(gb);
			scg_free(o.idx), scg_free(o.val), scg_free(gdd), scg_free(gbd);
		}
		free(g);
		scg_free(dg), scg_free(list);
		scd_partmap_release(map);
	}
}

UNIT_TEST(gpu_blocks_encode_identical)
{
	threads8();
	static const double dens[] = {0.0, 1e-4, 0.003, 0.05, 1.0};
	for (unsigned d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
		uint64_t n = 1 + unit_rng_below(200000);
		uint32_t block = 1 + (uint32_t)unit_rng_below(300);
		float *g = rand_dense(n, dens[d]), *dg = dev_copy(g, n * 4);
		uint64_t nb = (n + block - 1) / block, cap = nb * (4 + 4 * (uint64_t)block);
		char *cb = calloc(cap + 8, 1), *gbd = dev_copy(cb, cap + 8);
		uint64_t cbytes = 0, gbytes = 0;
		CHECK_EQ_INT(scd_blocks_encode_dense(g, n, block, cb, cap, &cbytes), SC_OK);
		CHECK_MSG(scg_blocks_encode_dense(dg, n, block, gbd, cap, &gbytes) == SC_OK,
			  "%s", scg_error());
		CHECK_EQ_INT(gbytes, cbytes);
		char *gb = host_copy(gbd, cbytes);
		CHECK_TRUE(memcmp(cb, gb, cbytes) == 0);
		if (cbytes)
			CHECK_EQ_INT(
			    scg_blocks_encode_dense(dg, n, block, gbd, cbytes - 1, &gbytes),
			    SC_ERR_LIMIT);
		free(cb), free(gb), free(g);
		scg_free(dg), scg_free(gbd);
	}
}

UNIT_TEST_TIMEOUT(gpu_sketch_identical, 120)
{
	threads8();
	for (uint32_t rows = 1; rows <= 6; rows++) {
		scd_sketch_cfg_t cfg = {.numel = 1000 + unit_rng_below(50000),
					.rows = rows,
					.cols = 16 + (uint32_t)unit_rng_below(2000),
					.block = 1 + (uint32_t)unit_rng_below(64),
					.seed = unit_rng()};
		scg_sketch_cfg_t gcfg = {cfg.numel, cfg.rows, cfg.cols, cfg.block, cfg.seed};
		CHECK_EQ_INT(sizeof(gcfg), sizeof(cfg));
		uint64_t n = cfg.numel, F = scd_sketch_floats(&cfg),
			 step = unit_rng_below(1000);
		/* small integers, so every bucket's sum is exact in any order */
		scd_coo_t c = {malloc(n * 4), malloc(n * 4), 0, n};
		double dens = unit_rng_double() * 0.2;
		for (uint64_t i = 0; i < n; i++)
			if (unit_rng_double() < dens) {
				c.idx[c.nnz] = (uint32_t)i;
				int v = (int)unit_rng_below(64) + 1;
				c.val[c.nnz++] = (float)(unit_rng_below(2) ? v : -v);
			}
		scg_coo_t gc = {dev_copy(c.idx, c.nnz * 4), dev_copy(c.val, c.nnz * 4), c.nnz,
				c.nnz};
		float *cs = malloc(F * 4), *gs = malloc(F * 4);
		for (uint64_t i = 0; i < F; i++)
			gs[i] = 7.0f; /* encode must clear */
		float *gsd = dev_copy(gs, F * 4);
		free(gs);
		CHECK_EQ_INT(scd_sketch_encode(&cfg, step, &c, cs), SC_OK);
		CHECK_MSG(scg_sketch_encode(&gcfg, step, &gc, gsd) == SC_OK, "%s", scg_error());
		gs = host_copy(gsd, F * 4);
		CHECK_MSG(memcmp(cs, gs, F * 4) == 0, "rows %u: sketches differ", rows);
		float *cd = malloc(n * 4), *gd = malloc(n * 4);
		for (uint64_t i = 0; i < n; i++)
			gd[i] = 9.0f; /* decode must zero the unmarked blocks */
		float *gdd = dev_copy(gd, n * 4);
		free(gd);
		CHECK_EQ_INT(scd_sketch_decode_dense(&cfg, step, cs, cd), SC_OK);
		CHECK_MSG(scg_sketch_decode_dense(&gcfg, step, gsd, gdd) == SC_OK, "%s",
			  scg_error());
		gd = host_copy(gdd, n * 4);
		for (uint64_t i = 0; i < n; i++)
			CHECK_MSG(memcmp(&cd[i], &gd[i], 4) == 0,
				  "rows %u element %llu: %g != %g", rows, (unsigned long long)i,
				  cd[i], gd[i]);
		/* an index past numel is refused */
		if (c.nnz) {
			c.idx[0] = (uint32_t)n;
			CHECK_EQ_INT(scg_from_host(gc.idx, c.idx, 4), SC_OK);
			CHECK_EQ_INT(scg_sketch_encode(&gcfg, step, &gc, gsd), SC_ERR_INVALID);
		}
		free(c.idx), free(c.val), free(cs), free(gs), free(cd), free(gd);
		scg_free(gc.idx), scg_free(gc.val), scg_free(gsd), scg_free(gdd);
	}
}
