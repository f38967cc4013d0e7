/*
 * test_core_format.c: round trips and exact byte counts of every lossless format
 * (device/format.h), the partition lists behind the hash bitmap (device/partition.h), and
 * rejection of malformed buffers.
 */
#include "unit.h"

#include "device/format.h"

#include <string.h>

typedef struct {
	uint64_t numel;
	float *dense;
	scd_coo_t coo;
} tensor_t;

/* A random sparse tensor; density drawn log-uniformly from 1e-4..1 unless given. */
static void tensor_make(tensor_t *t, uint64_t numel, double density)
{
	if (density < 0)
		density = exp(log(1e-4) * unit_rng_double());
	t->numel = numel;
	t->dense = calloc(numel ? numel : 1, 4);
	t->coo = (scd_coo_t){malloc(numel * 4 + 4), malloc(numel * 4 + 4), 0, numel};
	for (uint64_t i = 0; i < numel; i++)
		if (unit_rng_double() < density) {
			t->dense[i] = (float)((int64_t)unit_rng_below(2001) - 1000) / 16;
			if (t->dense[i] == 0)
				t->dense[i] = 1;
			t->coo.idx[t->coo.nnz] = (uint32_t)i;
			t->coo.val[t->coo.nnz++] = t->dense[i];
		}
}

static void tensor_free(tensor_t *t)
{
	free(t->dense), free(t->coo.idx), free(t->coo.val);
}

static uint64_t random_numel(void)
{
	static const uint64_t edge[] = {1, 2, 63, 64, 65, 127, 128, 1000};
	return unit_rng_below(3) == 0 ? edge[unit_rng_below(8)] : 1 + unit_rng_below(100000);
}

static void check_same_coo(const scd_coo_t *a, const scd_coo_t *b)
{
	CHECK_EQ_INT(a->nnz, b->nnz);
	for (uint64_t i = 0; i < a->nnz; i++) {
		CHECK_MSG(a->idx[i] == b->idx[i], "entry %llu: index %u != %u",
			  (unsigned long long)i, a->idx[i], b->idx[i]);
		CHECK_MSG(a->val[i] == b->val[i], "entry %llu: value %g != %g",
			  (unsigned long long)i, a->val[i], b->val[i]);
	}
}

UNIT_TEST(core_format_round_trips)
{
	for (int rep = 0; rep < 30; rep++) {
		tensor_t t;
		uint64_t n = random_numel();
		tensor_make(&t, n, rep % 10 == 0 ? 1.0 : rep % 10 == 1 ? 0.0 : -1);
		uint32_t block = 1 + (uint32_t)unit_rng_below(300);
		uint64_t cap = 16 * n + 64 + (n / block + 2) * (4 + 4 * (uint64_t)block);
		void *buf = malloc(cap);
		scd_coo_t back = {malloc(n * 4 + 4), malloc(n * 4 + 4), 0, n};
		uint64_t bytes, bytes2;

		CHECK_EQ_INT(scd_coo_encode(&t.coo, buf, cap, &bytes), SC_OK);
		CHECK_EQ_INT(bytes, scd_fmt_bytes(SCD_FMT_COO, &t.coo, n, NULL, 0));
		CHECK_EQ_INT(scd_coo_decode(buf, bytes, &back), SC_OK);
		check_same_coo(&t.coo, &back);

		CHECK_EQ_INT(scd_bitmap_encode(&t.coo, n, buf, cap, &bytes), SC_OK);
		CHECK_EQ_INT(bytes, scd_fmt_bytes(SCD_FMT_BITMAP, &t.coo, n, NULL, 0));
		CHECK_EQ_INT(scd_bitmap_decode(buf, bytes, n, &back), SC_OK);
		check_same_coo(&t.coo, &back);
		CHECK_EQ_INT(scd_bitmap_encode_dense(t.dense, n, buf, cap, &bytes2), SC_OK);
		CHECK_EQ_INT(bytes2, bytes);
		CHECK_EQ_INT(scd_bitmap_decode(buf, bytes2, n, &back), SC_OK);
		check_same_coo(&t.coo, &back);

		CHECK_EQ_INT(scd_blocks_encode(&t.coo, n, block, buf, cap, &bytes), SC_OK);
		CHECK_EQ_INT(bytes, scd_fmt_bytes(SCD_FMT_BLOCKS, &t.coo, n, NULL, block));
		CHECK_EQ_INT(scd_blocks_decode(buf, bytes, n, block, &back), SC_OK);
		check_same_coo(&t.coo, &back);
		CHECK_EQ_INT(scd_blocks_encode_dense(t.dense, n, block, buf, cap, &bytes2),
			     SC_OK);
		CHECK_EQ_INT(bytes2, bytes);
		CHECK_EQ_INT(scd_blocks_decode(buf, bytes2, n, block, &back), SC_OK);
		check_same_coo(&t.coo, &back);

		free(buf), free(back.idx), free(back.val);
		tensor_free(&t);
	}
}

UNIT_TEST(core_hash_bitmap_round_trip)
{
	for (int rep = 0; rep < 12; rep++) {
		tensor_t t;
		uint64_t n = random_numel();
		uint32_t P = 1 + (uint32_t)unit_rng_below(64);
		tensor_make(&t, n, rep == 0 ? 1.0 : -1);
		const scd_partmap_t *map;
		CHECK_EQ_INT(scd_partmap_acquire(n, P, unit_rng(), &map), SC_OK);
		uint64_t cap = 8 * n + 64, total = 0, bytes;
		void *buf = malloc(cap);
		float *local = malloc(n * 4 + 4), *back_dense = calloc(n, 4);
		scd_coo_t back = {malloc(n * 4 + 4), malloc(n * 4 + 4), 0, n};
		uint64_t seen = 0;
		for (uint32_t p = 0; p < P; p++) {
			uint64_t sz = scd_partmap_size(map, p);
			const uint32_t *I = map->list + map->offset[p];
			CHECK_EQ_INT(scd_hash_bitmap_encode(map, p, t.dense, buf, cap, &bytes),
				     SC_OK);
			total += bytes;
			CHECK_EQ_INT(scd_hash_bitmap_decode(map, p, buf, bytes, &back), SC_OK);
			for (uint64_t j = 0; j < back.nnz; j++) {
				CHECK_TRUE(scd_partition_of(&map->fn, back.idx[j]) == p);
				CHECK_TRUE(j == 0 || back.idx[j] > back.idx[j - 1]);
				CHECK_TRUE(back.val[j] == t.dense[back.idx[j]]);
			}
			seen += back.nnz;
			CHECK_EQ_INT(
			    scd_hash_bitmap_decode_dense(map, p, buf, bytes, back_dense),
			    SC_OK);
			for (uint64_t j = 0; j < sz; j++)
				local[j] = t.dense[I[j]];
			uint64_t bytes_local;
			void *buf2 = malloc(cap);
			CHECK_EQ_INT(scd_hash_bitmap_encode_local(map, p, local, buf2, cap,
								  &bytes_local),
				     SC_OK);
			CHECK_EQ_INT(bytes_local, bytes);
			CHECK_TRUE(memcmp(buf, buf2, bytes) == 0);
			free(buf2);
		}
		CHECK_EQ_INT(seen, t.coo.nnz);
		CHECK_EQ_INT(total, scd_fmt_bytes(SCD_FMT_HASH_BITMAP, &t.coo, n, map, 0));
		CHECK_TRUE(memcmp(back_dense, t.dense, n * 4) == 0);
		scd_partmap_release(map);
		free(buf), free(local), free(back_dense), free(back.idx), free(back.val);
		tensor_free(&t);
	}
}

/* A server's aggregate kept zero between steps: the pushes scattered with marks, each
 * segment encoded from its marked slots gives the bytes of the full scan (zero sums left
 * out), and leaves the aggregate and the marks zero again, the neighbours' included. */
UNIT_TEST(core_hash_bitmap_marked_segments)
{
	for (int rep = 0; rep < 12; rep++) {
		uint64_t n = random_numel();
		uint32_t P = 1 + (uint32_t)unit_rng_below(8), p = (uint32_t)unit_rng_below(P);
		const scd_partmap_t *map;
		CHECK_EQ_INT(scd_partmap_acquire(n, P, unit_rng(), &map), SC_OK);
		uint64_t sz = scd_partmap_size(map, p), nw = scd_fmt_bitmap_words(sz) + 1;
		float *L = calloc(sz + 1, 4), *D = calloc(sz + 1, 4);
		uint64_t *touch = calloc(nw, 8);
		/* three pushes of the partition's members; some values cancel to zero */
		for (int q = 0; q < 3; q++) {
			tensor_t t;
			tensor_make(&t, n, -1);
			scd_coo_t mine = {t.coo.idx, t.coo.val, 0, t.coo.nnz};
			for (uint64_t j = 0; j < t.coo.nnz; j++)
				if (scd_partition_of(&map->fn, t.coo.idx[j]) == p) {
					mine.idx[mine.nnz] = t.coo.idx[j];
					mine.val[mine.nnz++] = q == 2 && j % 3 == 0
								   ? -L[map->pos[t.coo.idx[j]]]
								   : t.coo.val[j];
				}
			CHECK_EQ_INT(scd_coo_scatter_add_part(L, touch, map, p, &mine), 0);
			CHECK_EQ_INT(scd_coo_scatter_add_part(D, NULL, map, p, &mine), 0);
			tensor_free(&t);
		}
		uint64_t cap = 8 * sz + 64, K = 1 + unit_rng_below(5);
		void *a = malloc(cap), *b = malloc(cap);
		for (uint64_t k = 0; k < K; k++) {
			scd_hbseg_t sg = {p, sz * k / K, sz * (k + 1) / K};
			uint64_t ba = 0, bb = 0;
			memset(a, 0xa5, cap), memset(b, 0x5a, cap);
			CHECK_EQ_INT(
			    scd_hash_bitmap_encode_seg(map, &sg, D + sg.lo, NULL, a, cap, &ba),
			    SC_OK);
			CHECK_EQ_INT(
			    scd_hash_bitmap_encode_seg(map, &sg, L + sg.lo, touch, b, cap, &bb),
			    SC_OK);
			CHECK_EQ_INT(bb, ba);
			CHECK_TRUE(memcmp(a, b, ba) == 0);
		}
		for (uint64_t j = 0; j < sz; j++)
			CHECK_MSG(L[j] == 0 && !(touch[j / 64] >> (j % 64) & 1),
				  "slot %llu left %g, marked %d", (unsigned long long)j, L[j],
				  (int)(touch[j / 64] >> (j % 64) & 1));
		free(a), free(b), free(L), free(D), free(touch);
		scd_partmap_release(map);
	}
}

UNIT_TEST(core_partition_lists_cover_and_cache)
{
	uint64_t n = random_numel() + unit_rng_below(300000);
	uint32_t P = 1 + (uint32_t)unit_rng_below(64);
	uint64_t seed = unit_rng(), builds0 = scd_partmap_builds();
	const scd_partmap_t *a, *b, *c;
	CHECK_EQ_INT(scd_partmap_acquire(n, P, seed, &a), SC_OK);
	CHECK_EQ_INT(scd_partmap_acquire(n, P, seed, &b), SC_OK);
	CHECK_TRUE(a == b);
	CHECK_EQ_INT(scd_partmap_builds(), builds0 + 1);
	CHECK_EQ_INT(scd_partmap_acquire(n, P, seed + 1, &c), SC_OK);
	CHECK_TRUE(c != a);
	CHECK_EQ_INT(a->offset[P], n);
	uint8_t *seen = calloc(n, 1);
	for (uint32_t p = 0; p < P; p++)
		for (uint64_t j = a->offset[p]; j < a->offset[p + 1]; j++) {
			uint32_t i = a->list[j];
			CHECK_TRUE(i < n && !seen[i]);
			seen[i] = 1;
			CHECK_TRUE(scd_partition_of(&a->fn, i) == p);
			CHECK_TRUE(j == a->offset[p] || i > a->list[j - 1]);
			CHECK_TRUE(a->pos[i] == j - a->offset[p]); /* the inverse */
		}
	/* aggregation over a partition's own list: members land at their slot, an index past
	 * numel is refused and counted (P >= 2; the third entry is another partition's
	 * index, refused only when its slot is past |I_p|) */
	uint32_t p0 = 1;
	uint64_t sz = P > 1 ? scd_partmap_size(a, p0) : 0;
	float *L = calloc(sz + 1, sizeof(float));
	uint32_t idx[4] = {0, 0, 0, (uint32_t)n};
	float val[4] = {1, 2, 3, 4};
	int k = 0;
	for (uint64_t i = 0; P > 1 && i < n && k < 3; i++)
		if ((scd_partition_of(&a->fn, (uint32_t)i) == p0) == (k < 2))
			idx[k++] = (uint32_t)i;
	if (k == 3) { /* two members, one outsider, one past the end */
		scd_coo_t in = {idx, val, 4, 4};
		uint64_t bad = scd_coo_scatter_add_part(L, NULL, a, p0, &in);
		CHECK_EQ_INT(bad, a->pos[idx[2]] < sz ? 1 : 2);
		CHECK_TRUE(L[a->pos[idx[0]]] == 1 + (a->pos[idx[2]] == a->pos[idx[0]] ? 3 : 0));
		CHECK_TRUE(L[a->pos[idx[1]]] == 2 + (a->pos[idx[2]] == a->pos[idx[1]] ? 3 : 0));
	}
	free(L);
	scd_partmap_release(a);
	scd_partmap_release(b);
	scd_partmap_release(c);
	free(seen);
}

/* Hand-computed sizes (ZEN sec. 3.3): numel 1000, 10 non-zeros in 3 blocks of 256. */
UNIT_TEST(core_format_bytes_by_hand)
{
	/* 0..4 in block 0, 300 and 301 in block 1, 996..999 in block 3: 3 blocks */
	uint32_t idx[10] = {0, 1, 2, 3, 4, 300, 301, 996, 997, 999};
	float val[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	scd_coo_t c = {idx, val, 10, 10};
	CHECK_EQ_INT(scd_fmt_bytes(SCD_FMT_DENSE, &c, 1000, NULL, 0), 4000);
	CHECK_EQ_INT(scd_fmt_bytes(SCD_FMT_COO, &c, 1000, NULL, 0), 80);
	CHECK_EQ_INT(scd_fmt_bytes(SCD_FMT_BITMAP, &c, 1000, NULL, 0), 16 * 8 + 40);
	CHECK_EQ_INT(scd_fmt_blocks_count(&c, 256), 3);
	CHECK_EQ_INT(scd_fmt_bytes(SCD_FMT_BLOCKS, &c, 1000, NULL, 256), 3 * (4 + 1024));
	CHECK_EQ_INT(scd_fmt_hash_bitmap_bytes(65, 2), 16 + 8);
}

UNIT_TEST(core_format_rejects_malformed)
{
	tensor_t t;
	uint64_t n = 1000 + unit_rng_below(1000);
	tensor_make(&t, n, 0.05);
	uint64_t cap = 16 * n, bytes;
	void *buf = malloc(cap);
	scd_coo_t back = {malloc(n * 4), malloc(n * 4), 0, n};
	CHECK_EQ_INT(scd_coo_decode(buf, 12, &back), SC_ERR_PROTOCOL);
	CHECK_EQ_INT(scd_bitmap_encode(&t.coo, n, buf, cap, &bytes), SC_OK);
	CHECK_EQ_INT(scd_bitmap_decode(buf, bytes - 4, n, &back), SC_ERR_PROTOCOL);
	((uint64_t *)buf)[scd_fmt_bitmap_words(n) - 1] |= 1ULL << 63; /* bit past numel... */
	if (n % 64)
		CHECK_EQ_INT(scd_bitmap_decode(buf, bytes + 4, n, &back), SC_ERR_PROTOCOL);
	CHECK_EQ_INT(scd_blocks_encode(&t.coo, n, 100, buf, cap, &bytes), SC_OK);
	CHECK_EQ_INT(scd_blocks_decode(buf, bytes - 1, n, 100, &back), SC_ERR_PROTOCOL);
	back.cap = 0;
	if (t.coo.nnz)
		CHECK_EQ_INT(scd_blocks_decode(buf, bytes, n, 100, &back), SC_ERR_LIMIT);
	CHECK_EQ_INT(scd_coo_encode(&t.coo, buf, t.coo.nnz * 8 - (t.coo.nnz ? 1 : 0), &bytes),
		     t.coo.nnz ? SC_ERR_LIMIT : SC_OK);
	free(buf), free(back.idx), free(back.val);
	tensor_free(&t);
}
