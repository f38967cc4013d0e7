/*
 * test_gpu_blocks.c: OmniReduce's blocks (gpu/blocks.cu) and the one-row sketch decode
 * with its residual update (gpu/sketch.cu) through the cuda ops table that
 * daemon/device/cuda.c fills, against the cpu device: the same counts, the same decoded
 * lists (zeros inside blocks dropped, ascending), the same tensors after applying records
 * in any order (a block sent twice included, added or assigned in record order), and the
 * same status codes on malformed buffers (a length of no whole number of records, a block
 * id past the range or out of order, a list one entry short), bit for bit. The sketch
 * decode is exact: each element sees the cpu's one product and one subtraction.
 */
#include <string.h>

#include "device/cuda.h"
#include "device/format.h"
#include "device/sketch.h"
#include "gpu_fns.h"
#include "scg.h"
#include "unit.h"

static scd_device_ops_t gpu_table(void)
{
	scd_device_ops_t ops;
	gpu_linked_table(&ops);
	return ops;
}

static void *dput(const scd_device_ops_t *d, const void *host, size_t bytes)
{
	void *p = d->alloc(bytes ? bytes : 4);
	CHECK_TRUE(p != NULL);
	if (bytes)
		d->from_host(p, host, bytes);
	return p;
}

static void dget(const scd_device_ops_t *d, void *host, const void *p, size_t bytes)
{
	if (bytes)
		d->to_host(host, p, bytes);
}

static int same_bits(const void *a, const void *b, size_t bytes)
{
	return bytes == 0 || memcmp(a, b, bytes) == 0;
}

/* A value: mostly zero (density), else random, sometimes -0.0 (a zero to drop). */
static float value(double density)
{
	if (unit_rng_double() >= density)
		return unit_rng_below(8) ? 0.0f : -0.0f;
	return (float)(unit_rng_double() * 4 - 2);
}

/* Blocks of zeros and of values: runs of whole empty blocks. */
static void fill_runs(float *g, uint64_t n, double density)
{
	uint64_t i = 0;
	while (i < n) {
		uint64_t run = 1 + unit_rng_below(200);
		int on = unit_rng_below(2);
		for (uint64_t j = 0; j < run && i < n; j++, i++)
			g[i] = on ? value(density) : 0.0f;
	}
}

static uint32_t pick_block(uint64_t n)
{
	static const uint32_t b[] = {1, 2, 3, 7, 32, 64, 256};
	return unit_rng_below(8) ? b[unit_rng_below(7)] : (uint32_t)(n + 1 + unit_rng_below(4));
}

static uint64_t pick_numel(int round)
{
	return round == 0   ? 0
	       : round == 1 ? 1
	       : round < 10 ? 1 + unit_rng_below(300)
			    : 1000 + unit_rng_below(40000);
}

UNIT_TEST(gpu_ops_table_blocks_count_dense)
{
	scd_device_ops_t gpu = gpu_table();
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	for (int round = 0; round < 40; round++) {
		uint64_t n = pick_numel(round);
		uint32_t block = round == 2 ? 0 : pick_block(n);
		float *g = malloc(4 * n + 4);
		if (round % 2)
			fill_runs(g, n, unit_rng_double());
		else
			for (uint64_t i = 0; i < n; i++)
				g[i] = value(pow(10, -4 * unit_rng_double()));
		if (n && round % 5 == 0) /* only the last element, or only the first */
			for (uint64_t i = 0; i < n; i++)
				g[i] = (round % 10 ? i == n - 1 : i == 0) ? 1.0f : 0.0f;
		float *dg = dput(&gpu, g, 4 * n);
		uint64_t want = cpu->blocks_count_dense(g, n, block);
		uint64_t got = gpu.blocks_count_dense(dg, n, block);
		CHECK_MSG(got == want, "numel %llu, block %u: %llu blocks, cpu %llu",
			  (unsigned long long)n, block, (unsigned long long)got,
			  (unsigned long long)want);
		gpu.free(dg);
		free(g);
	}
	CHECK_EQ_INT(gpu.sync(), SC_OK);
}

/* A buffer of nrec records over nb blocks: ids ascending from an encoder (order 0), or in
 * any order with repeats (order 1). Words: id, then block values. */
static uint32_t *records(uint64_t nrec, uint64_t nb, uint32_t block, int order, double density)
{
	uint32_t *w = malloc(4 * (nrec * (1 + (uint64_t)block) + 1));
	uint64_t id = 0;
	for (uint64_t r = 0; r < nrec; r++) {
		uint32_t *rec = w + r * (1 + (uint64_t)block);
		if (order == 0)
			id = r == 0 ? unit_rng_below(nb - nrec + 1)
				    : id + 1 + unit_rng_below(nb - id - (nrec - r) + 0);
		else
			id = unit_rng_below(unit_rng_below(3) ? nb : 1 + nb / 8 + 1);
		if (id >= nb)
			id = nb - 1;
		rec[0] = (uint32_t)id;
		for (uint32_t j = 0; j < block; j++) {
			float v = value(density);
			memcpy(&rec[1 + j], &v, 4);
		}
	}
	return w;
}

/* Decodes buf (bytes) on both devices with room for cap entries; same status, same list. */
static void decode_both(const scd_device_ops_t *gpu, const void *buf, uint64_t bytes,
			uint64_t n, uint32_t block, uint64_t cap, const char *what)
{
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	uint32_t *ci = malloc(4 * cap + 4), *gi = malloc(4 * cap + 4);
	float *cv = malloc(4 * cap + 4), *gv = malloc(4 * cap + 4);
	scd_coo_t c = {ci, cv, 0, cap};
	sc_status_t cs = cpu->blocks_decode(buf, bytes, n, block, &c);
	void *db = dput(gpu, buf, bytes);
	uint32_t *di = gpu->alloc(4 * cap + 4);
	float *dv = gpu->alloc(4 * cap + 4);
	scd_coo_t g = {di, dv, 0, cap};
	sc_status_t gs = gpu->blocks_decode(db, bytes, n, block, &g);
	CHECK_MSG(gs == cs, "%s (numel %llu, block %u, %llu bytes, cap %llu): %s, cpu %s", what,
		  (unsigned long long)n, block, (unsigned long long)bytes,
		  (unsigned long long)cap, sc_status_name(gs), sc_status_name(cs));
	if (cs == SC_OK) {
		CHECK_MSG(g.nnz == c.nnz, "%s: %llu entries, cpu %llu", what,
			  (unsigned long long)g.nnz, (unsigned long long)c.nnz);
		dget(gpu, gi, di, 4 * c.nnz);
		dget(gpu, gv, dv, 4 * c.nnz);
		CHECK_MSG(same_bits(gi, ci, 4 * c.nnz) && same_bits(gv, cv, 4 * c.nnz),
			  "%s: the list differs from the cpu's", what);
	}
	gpu->free(db), gpu->free(di), gpu->free(dv);
	free(ci), free(gi), free(cv), free(gv);
}

UNIT_TEST_TIMEOUT(gpu_ops_table_blocks_decode, 120)
{
	scd_device_ops_t gpu = gpu_table();
	for (int round = 0; round < 40; round++) {
		uint64_t n = pick_numel(round) + (round == 0);
		uint32_t block = pick_block(n);
		uint64_t rec = 4 + 4 * (uint64_t)block, nb = (n + block - 1) / block;
		float *g = malloc(4 * n);
		fill_runs(g, n, unit_rng_double());
		uint64_t nz = scd_blocks_count_dense(g, n, block), bytes = 0, nnz = 0;
		for (uint64_t i = 0; i < n; i++)
			nnz += g[i] != 0.0f;
		uint8_t *buf = malloc(nz * rec + 2 * rec);
		CHECK_EQ_INT(scd_blocks_encode_dense(g, n, block, buf, nz * rec, &bytes),
			     SC_OK);
		/* well formed: room for all, exactly enough, one short, none */
		decode_both(&gpu, buf, bytes, n, block, nnz + 3, "encoded");
		decode_both(&gpu, buf, bytes, n, block, nnz, "exactly enough");
		if (nnz)
			decode_both(&gpu, buf, bytes, n, block, nnz - 1, "one short");
		decode_both(&gpu, buf, 0, n, block, 0, "empty");
		decode_both(&gpu, buf, bytes, n, 0, nnz, "block 0");
		/* a length of no whole number of records */
		if (bytes)
			decode_both(&gpu, buf, bytes - 1 - unit_rng_below(rec - 1), n, block,
				    nnz, "cut");
		uint64_t nrec = bytes / rec;
		if (nrec) {
			/* a record's id past the tensor, out of order or repeated; with room
			 * before it for less than what precedes it (the cpu's SC_ERR_LIMIT) */
			uint64_t r = unit_rng_below(nrec);
			uint32_t *id = (uint32_t *)(buf + r * rec), keep = *id;
			*id = (uint32_t)(nb + unit_rng_below(3));
			decode_both(&gpu, buf, bytes, n, block, nnz, "id past the tensor");
			decode_both(&gpu, buf, bytes, n, block, nnz / 2,
				    "id past, little room");
			*id = UINT32_MAX;
			decode_both(&gpu, buf, bytes, n, block, nnz, "id UINT32_MAX");
			if (r) {
				*id = *(uint32_t *)(buf + (r - 1) * rec);
				decode_both(&gpu, buf, bytes, n, block, nnz, "id repeated");
				*id = 0;
				decode_both(&gpu, buf, bytes, n, block, nnz, "id descending");
			}
			*id = keep;
		}
		free(g), free(buf);
	}
	CHECK_EQ_INT(gpu.sync(), SC_OK);
}

/* Applies buf to a copy of dst0 on both devices: same status, same tensor. */
static void apply_both(const scd_device_ops_t *gpu, const void *buf, uint64_t bytes,
		       uint32_t block, uint64_t len, const float *dst0, int add,
		       const char *what)
{
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	float *c = malloc(4 * len + 4), *back = malloc(4 * len + 4);
	memcpy(c, dst0, 4 * len);
	sc_status_t cs = cpu->blocks_apply(buf, bytes, block, len, c, add);
	void *db = dput(gpu, buf, bytes);
	float *dd = dput(gpu, dst0, 4 * len);
	sc_status_t gs = gpu->blocks_apply(db, bytes, block, len, dd, add);
	CHECK_MSG(gs == cs, "%s (len %llu, block %u, %llu bytes, %s): %s, cpu %s", what,
		  (unsigned long long)len, block, (unsigned long long)bytes,
		  add ? "add" : "assign", sc_status_name(gs), sc_status_name(cs));
	dget(gpu, back, dd, 4 * len);
	CHECK_MSG(same_bits(back, c, 4 * len),
		  "%s (len %llu, block %u, %s): the tensor differs", what,
		  (unsigned long long)len, block, add ? "add" : "assign");
	gpu->free(db), gpu->free(dd);
	free(c), free(back);
}

UNIT_TEST_TIMEOUT(gpu_ops_table_blocks_apply, 120)
{
	scd_device_ops_t gpu = gpu_table();
	for (int round = 0; round < 40; round++) {
		uint64_t len = pick_numel(round) + (round == 0);
		uint32_t block = pick_block(len);
		uint64_t rec = 4 + 4 * (uint64_t)block, nb = (len + block - 1) / block;
		float *dst0 = malloc(4 * len);
		for (uint64_t i = 0; i < len; i++)
			dst0[i] = unit_rng_below(3) ? (float)(unit_rng_double() - 0.5) : 0.0f;
		int order = round % 3 == 0; /* any order, repeats */
		/* any order: a run of ascending ids per launch, so a few hundred records */
		uint64_t nrec = order ? unit_rng_below(2 * nb + 2 < 400 ? 2 * nb + 2 : 400)
				      : unit_rng_below(nb + 1);
		uint32_t *buf = records(nrec, nb, block, order, unit_rng_double());
		uint64_t bytes = nrec * rec;
		for (int add = 0; add < 2; add++) {
			apply_both(&gpu, buf, bytes, block, len, dst0, add,
				   order ? "any order" : "ascending");
			apply_both(&gpu, buf, 0, block, len, dst0, add, "empty");
			apply_both(&gpu, buf, bytes, 0, len, dst0, add, "block 0");
			if (bytes)
				apply_both(&gpu, buf, bytes - 1 - unit_rng_below(rec - 1),
					   block, len, dst0, add, "cut");
			if (nrec) { /* an id past the range: what precedes it is applied */
				uint64_t r = unit_rng_below(nrec);
				uint32_t *id = buf + r * (1 + (uint64_t)block), keep = *id;
				*id = unit_rng_below(2) ? (uint32_t)nb : UINT32_MAX;
				apply_both(&gpu, buf, bytes, block, len, dst0, add, "id past");
				*id = keep;
			}
		}
		/* every block twice, the second pass in reverse: sums and the last write win */
		if (nb && nb < 5000) {
			uint64_t m = 2 * nb;
			uint32_t *twice = malloc(4 * m * (1 + (uint64_t)block));
			for (uint64_t r = 0; r < m; r++) {
				uint32_t *w = twice + r * (1 + (uint64_t)block);
				w[0] = (uint32_t)(r < nb ? r : m - 1 - r);
				for (uint32_t j = 0; j < block; j++) {
					float v = (float)(unit_rng_double() * 3 - 1.5);
					memcpy(&w[1 + j], &v, 4);
				}
			}
			for (int add = 0; add < 2; add++)
				apply_both(&gpu, twice, m * rec, block, len, dst0, add,
					   "twice");
			free(twice);
		}
		free(dst0), free(buf);
	}
	CHECK_EQ_INT(gpu.sync(), SC_OK);
}

UNIT_TEST_TIMEOUT(gpu_ops_table_sketch_decode_apply, 120)
{
	scd_device_ops_t gpu = gpu_table();
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	for (int round = 0; round < 24; round++) {
		uint64_t n = pick_numel(round);
		scd_sketch_cfg_t cfg = {
		    .numel = n,
		    .rows = 1,
		    .cols = 1 + (uint32_t)unit_rng_below(round < 10 ? 50 : 5000),
		    .block = pick_block(n),
		    .seed = unit_rng()};
		uint64_t step = unit_rng_below(100), F = scd_sketch_floats(&cfg);
		uint64_t nb = scd_sketch_nblocks(&cfg);
		float *S = malloc(4 * F + 4), *own = malloc(4 * F + 4);
		for (uint64_t i = 0; i < F; i++) {
			S[i] = (float)(unit_rng_double() * 10 - 5);
			own[i] = (float)(unit_rng_double() * 10 - 5);
		}
		for (uint64_t b = 0; b < nb; b++) /* contributor counts: 0, 1, 2; some -0 */
			S[cfg.cols + b] = unit_rng_below(5) ? (float)unit_rng_below(3) : -0.0f;
		float *dst = malloc(4 * n + 4), *res = malloc(4 * n + 4);
		float *gdst = malloc(4 * n + 4), *gres = malloc(4 * n + 4);
		for (uint64_t i = 0; i < n; i++) {
			dst[i] = 7.0f; /* overwritten everywhere */
			res[i] = (float)(unit_rng_double() * 2 - 1);
		}
		float *dS = dput(&gpu, S, 4 * F), *down = dput(&gpu, own, 4 * F);
		float *ddst = dput(&gpu, dst, 4 * n), *dres = dput(&gpu, res, 4 * n);
		CHECK_EQ_INT(cpu->sketch_decode_apply(&cfg, step, S, own, dst, res), SC_OK);
		CHECK_MSG(gpu.sketch_decode_apply(&cfg, step, dS, down, ddst, dres) == SC_OK,
			  "%s", scg_error());
		dget(&gpu, gdst, ddst, 4 * n);
		dget(&gpu, gres, dres, 4 * n);
		CHECK_MSG(same_bits(gdst, dst, 4 * n) && same_bits(gres, res, 4 * n),
			  "numel %llu, cols %u, block %u: decode or residual differs",
			  (unsigned long long)n, cfg.cols, cfg.block);
		/* the cpu's refusals: more than one row, no own sketch or residual, no block */
		scd_sketch_cfg_t bad = cfg;
		bad.rows = 2;
		CHECK_EQ_INT(gpu.sketch_decode_apply(&bad, step, dS, down, ddst, dres),
			     SC_ERR_INVALID);
		CHECK_EQ_INT(gpu.sketch_decode_apply(&cfg, step, dS, NULL, ddst, dres),
			     SC_ERR_INVALID);
		CHECK_EQ_INT(gpu.sketch_decode_apply(&cfg, step, dS, down, ddst, NULL),
			     SC_ERR_INVALID);
		bad = cfg;
		bad.block = 0;
		CHECK_EQ_INT(gpu.sketch_decode_apply(&bad, step, dS, down, ddst, dres),
			     SC_ERR_INVALID);
		gpu.free(dS), gpu.free(down), gpu.free(ddst), gpu.free(dres);
		free(S), free(own), free(dst), free(res), free(gdst), free(gres);
	}
	CHECK_EQ_INT(gpu.sync(), SC_OK);
}
