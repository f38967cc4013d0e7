/*
 * test_core_device.c: the device registry and the cpu ops table (device/device.h): the
 * cpu device is always there with every op filled; cuda is "not supported" in a build
 * without it; an op called through the table behaves as the plain function; and no per-step
 * op (sparsifiers, ExDyna, hierarchical hashing with 1 and 2 threads, every format's encode
 * and decode, the sketch, the cached partition lists) calls the allocator after warm-up.
 *
 * Counting allocator calls: this file defines malloc, calloc, realloc, free and the aligned
 * variants for the whole runner, each forwarding to glibc's own implementation
 * (__libc_malloc etc., the documented way to wrap glibc's allocator without LD_PRELOAD),
 * and counting calls while a test has counting switched on. A net-zero malloc/free pair
 * inside a step is caught, which mallinfo2() deltas cannot see.
 */
#include "unit.h"

#include "device/device.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

/* AddressSanitizer owns malloc (its redzones and quarantine): the counter stands aside
 * in a sanitized build (make test-sanitize) and the two tests that need it skip. */
#ifdef __SANITIZE_ADDRESS__
#define SC_ALLOC_COUNTER 0
static atomic_int counting;
static atomic_ullong alloc_calls;
#else
#define SC_ALLOC_COUNTER 1
static atomic_int counting;
static atomic_ullong alloc_calls;

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

static inline void count_call(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&alloc_calls, 1, memory_order_relaxed);
}

void *malloc(size_t size)
{
	count_call();
	return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
	count_call();
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
	count_call();
	return __libc_realloc(p, size);
}

void free(void *p)
{
	__libc_free(p);
}

void *aligned_alloc(size_t align, size_t size)
{
	count_call();
	return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size)
{
	count_call();
	return __libc_memalign(align, size);
}

int posix_memalign(void **p, size_t align, size_t size)
{
	count_call();
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	void *q = __libc_memalign(align, size);
	if (!q)
		return ENOMEM;
	*p = q;
	return 0;
}

#endif

/* Allocator calls made while running the steps between count_begin() and count_end(). */
static void count_begin(void)
{
	atomic_store(&alloc_calls, 0);
	atomic_store(&counting, 1);
}

static unsigned long long count_end(void)
{
	atomic_store(&counting, 0);
	return atomic_load(&alloc_calls);
}

UNIT_TEST(core_device_registry)
{
	const scd_device_ops_t *ops = NULL;
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CPU, &ops), SC_OK);
	CHECK_TRUE(ops && !strcmp(ops->name, "cpu") && ops->kind == SCD_DEVICE_CPU);
	/* every member after the name and the kind is a function pointer, all must be set */
	size_t first = offsetof(scd_device_ops_t, alloc);
	void (*const *fns)(void) = (void (*const *)(void))((const char *)ops + first);
	size_t nfns = (sizeof(*ops) - first) / sizeof(void (*)(void));
	for (size_t i = 0; i < nfns; i++)
		CHECK_MSG(fns[i] != NULL, "cpu op #%zu is missing", i);
	const scd_device_ops_t *cuda = NULL;
	sc_status_t st = scd_device_get(SCD_DEVICE_CUDA, &cuda);
	CHECK_TRUE(st == SC_ERR_UNSUPPORTED ||
		   (st == SC_OK && cuda && cuda->kind == SCD_DEVICE_CUDA));
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_COUNT, &cuda), SC_ERR_UNSUPPORTED);
	/* through the table: a reduction and a scatter-add */
	float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 1, 1, 1, 1};
	ops->reduce_sum(a, b, 5);
	CHECK_TRUE(a[0] == 2 && a[4] == 6);
	uint32_t idx[2] = {0, 4};
	float val[2] = {10, 20};
	scd_coo_t c = {idx, val, 2, 2};
	ops->coo_scatter_add(a, &c);
	CHECK_TRUE(a[0] == 12 && a[4] == 26 && a[2] == 4);
}

/* The counter itself works: a malloc/free pair inside the window is seen. */
UNIT_TEST(core_alloc_counter_sees_calls)
{
	if (!SC_ALLOC_COUNTER)
		unit_skip("AddressSanitizer owns malloc here: the allocation counter is off");
	count_begin();
	void *volatile p = malloc(100);
	free(p);
	void *q = NULL;
	CHECK_EQ_INT(posix_memalign(&q, 64, 1 << 20), 0);
	free(q);
	CHECK_EQ_INT(count_end(), 2);
}

#define STEPS 3

#define NO_ALLOC(what, ...)                                                                    \
	do {                                                                                   \
		count_begin();                                                                 \
		for (int step_ = 0; step_ < STEPS; step_++)                                    \
			CHECK_EQ_INT(__VA_ARGS__, SC_OK);                                      \
		unsigned long long calls_ = count_end();                                       \
		CHECK_MSG(calls_ == 0, "%s: %llu allocator calls in %d steps", what, calls_,   \
			  STEPS);                                                              \
	} while (0)

/* One ExDyna iteration on this rank: every rank's words taken to be its own, except that
 * the others passed nothing. */
static sc_status_t exdyna_step(scd_exdyna_t *ex, const float *g, float *res, scd_coo_t *out,
			       uint64_t *counts, uint32_t P, uint64_t *words, int *grid_steps)
{
	sc_status_t st = scd_exdyna_select(ex, g, res, out, &counts[0]);
	uint32_t W = scd_exdyna_meta_words(ex);
	if (st != SC_OK)
		return st;
	*grid_steps += W > 2;
	for (uint32_t r = 0; r < P; r++) {
		memcpy(words + (size_t)r * W, scd_exdyna_meta(ex), 8 * (size_t)W);
		if (r) /* the others passed nothing: far under target */
			words[(size_t)r * W] = 0;
	}
	return scd_exdyna_update(ex, words);
}

/* Every per-step op, each warmed up once (workspaces, cached lists), then run a few steps
 * with allocator calls counted. */
UNIT_TEST(core_step_ops_allocate_nothing)
{
	if (!SC_ALLOC_COUNTER)
		unit_skip("AddressSanitizer owns malloc here: the allocation counter is off");
	const uint64_t n = 200000 + unit_rng_below(50000);
	const uint32_t P = 1 + (uint32_t)unit_rng_below(16);
	const uint64_t seed = unit_rng();
	float *g = malloc(n * 4), *res = calloc(n, 4), *sparse = calloc(n, 4),
	      *dense = calloc(n, 4);
	uint64_t nnz = 0;
	for (uint64_t i = 0; i < n; i++) {
		g[i] = (float)(unit_rng_double() * 2 - 1);
		if (unit_rng_below(100) == 0) {
			sparse[i] = (float)(unit_rng_below(1000) + 1);
			nnz++;
		}
	}
	scd_coo_t out = {malloc(n * 4), malloc(n * 4), 0, n};
	scd_coo_t coo = {malloc(n * 4), malloc(n * 4), 0, n};
	for (uint64_t i = 0; i < n; i++)
		if (sparse[i] != 0) {
			coo.idx[coo.nnz] = (uint32_t)i;
			coo.val[coo.nnz++] = sparse[i];
		}
	uint64_t cap = 8 * n + 4096, bytes = 0;
	void *buf = malloc(cap);

	/* sparsifiers with error feedback */
	for (int kind = 0; kind < SCD_SPARSIFY_COUNT; kind++) {
		scd_sparsifier_cfg_t cfg = {.kind = kind,
					    .numel = n,
					    .density = 0.01,
					    .threshold = 0.98f,
					    .seed = seed};
		scd_sparsifier_t *sp;
		CHECK_EQ_INT(scd_sparsifier_create(&cfg, &sp), SC_OK);
		float *r = kind == SCD_SPARSIFY_NATURAL ? NULL : res;
		const float *in = kind == SCD_SPARSIFY_NATURAL ? sparse : g;
		CHECK_EQ_INT(scd_sparsify(sp, in, r, n, &out, NULL), SC_OK);
		NO_ALLOC(scd_sparsify_kind_name(kind), scd_sparsify(sp, in, r, n, &out, NULL));
		scd_sparsifier_destroy(sp);
	}
	CHECK_EQ_INT(scd_coo_copy(&coo, &out), SC_OK);
	NO_ALLOC("coo_copy", scd_coo_copy(&coo, &out));

	/* ExDyna: select, then the update from the gathered counts */
	scd_exdyna_cfg_t ec = scd_exdyna_cfg_default(n, P, (uint32_t)unit_rng_below(P), 0.01);
	ec.recal_permille = 1250; /* the grid variant: its counting must not allocate either */
	scd_exdyna_t *ex;
	CHECK_EQ_INT(scd_exdyna_create(&ec, &ex), SC_OK);
	uint64_t *counts = calloc(P, 8);
	memset(res, 0, n * 4);
	/* the first iteration takes the threshold's start (two words: count, proposal) */
	uint64_t *words = malloc((size_t)P * (2 * SCD_EXDYNA_GRID_HALF + 2) * 8);
	int grid_steps = 0;
	CHECK_EQ_INT(scd_exdyna_meta_words(ex), 2);
	CHECK_EQ_INT(exdyna_step(ex, g, res, &out, counts, P, words, &grid_steps), SC_OK);
	/* then every step counts on the grid; with P > 1 the total is far under target, and
	 * the threshold jumps to the grid's */
	NO_ALLOC("exdyna select + update",
		 exdyna_step(ex, g, res, &out, counts, P, words, &grid_steps));
	CHECK_TRUE(grid_steps == STEPS);
	CHECK_TRUE(P == 1 || scd_exdyna_jumps(ex) > 0); /* P = 1: the count is the total */
	free(words);
	scd_exdyna_destroy(ex);
	free(counts);

	/* hierarchical hashing, dense and COO input, one and two threads */
	uint64_t *offset = malloc((P + 1) * 8);
	for (unsigned threads = 1; threads <= 2; threads++) {
		scd_hh_cfg_t hc = scd_hh_cfg_default(n, P, nnz, seed);
		hc.threads = threads;
		scd_hh_t *hh;
		CHECK_EQ_INT(scd_hh_create(&hc, &hh), SC_OK);
		CHECK_EQ_INT(scd_hh_push_dense(hh, sparse, n, &out, offset, NULL), SC_OK);
		NO_ALLOC("hh_push_dense", scd_hh_push_dense(hh, sparse, n, &out, offset, NULL));
		NO_ALLOC("hh_push_coo", scd_hh_push_coo(hh, &coo, &out, offset, NULL));
		scd_hh_destroy(hh);
	}
	scd_partfn_t fn = scd_partfn_make(P, seed);
	NO_ALLOC("partition_coo", scd_partition_coo(&fn, &coo, &out, offset));
	free(offset);

	/* formats: encode and decode each; the partition lists come from the cache */
	const scd_partmap_t *map, *again;
	CHECK_EQ_INT(scd_partmap_acquire(n, P, seed, &map), SC_OK);
	NO_ALLOC("partmap_acquire (cached)", scd_partmap_acquire(n, P, seed, &again));
	for (int i = 0; i < STEPS; i++)
		scd_partmap_release(again);
	NO_ALLOC("coo_encode", scd_coo_encode(&coo, buf, cap, &bytes));
	NO_ALLOC("coo_decode", scd_coo_decode(buf, bytes, &out));
	NO_ALLOC("bitmap_encode", scd_bitmap_encode(&coo, n, buf, cap, &bytes));
	NO_ALLOC("bitmap_encode_dense", scd_bitmap_encode_dense(sparse, n, buf, cap, &bytes));
	NO_ALLOC("bitmap_decode", scd_bitmap_decode(buf, bytes, n, &out));
	NO_ALLOC("blocks_encode", scd_blocks_encode(&coo, n, 64, buf, cap, &bytes));
	NO_ALLOC("blocks_encode_dense",
		 scd_blocks_encode_dense(sparse, n, 64, buf, cap, &bytes));
	NO_ALLOC("blocks_decode", scd_blocks_decode(buf, bytes, n, 64, &out));
	for (uint32_t p = 0; p < P; p++) {
		NO_ALLOC("hash_bitmap_encode",
			 scd_hash_bitmap_encode(map, p, sparse, buf, cap, &bytes));
		NO_ALLOC("hash_bitmap_decode",
			 scd_hash_bitmap_decode(map, p, buf, bytes, &out));
		NO_ALLOC("hash_bitmap_decode_dense",
			 scd_hash_bitmap_decode_dense(map, p, buf, bytes, dense));
	}
	count_begin();
	for (int step = 0; step < STEPS; step++) {
		scd_coo_scatter_add(dense, &coo);
		scd_reduce_sum(dense, sparse, n);
		for (int f = 0; f < SCD_FMT_COUNT; f++)
			(void)scd_fmt_bytes(f, &coo, n, map, 64);
	}
	CHECK_EQ_INT(count_end(), 0);
	scd_partmap_release(map);

	/* S2 sketch: encode, decode (to COO and dense) */
	scd_sketch_cfg_t sk = {.numel = n,
			       .rows = 1 + (uint32_t)unit_rng_below(3),
			       .cols = (uint32_t)nnz + 1,
			       .block = 32,
			       .seed = seed};
	float *sketch = malloc(scd_sketch_bytes(&sk));
	CHECK_EQ_INT(scd_sketch_encode(&sk, 0, &coo, sketch), SC_OK);
	NO_ALLOC("sketch_encode", scd_sketch_encode(&sk, 7, &coo, sketch));
	NO_ALLOC("sketch_decode", scd_sketch_decode(&sk, 7, sketch, &out));
	NO_ALLOC("sketch_decode_dense", scd_sketch_decode_dense(&sk, 7, sketch, dense));
	free(sketch);

	free(buf), free(g), free(res), free(sparse), free(dense);
	free(out.idx), free(out.val), free(coo.idx), free(coo.val);
}
