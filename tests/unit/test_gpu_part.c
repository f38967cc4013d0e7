/*
 * test_gpu_part.c: ZEN's partition lists and the formats built on them on the GPU device
 * (gpu/part.cu, gpu/hhash.cu's hash bitmap), through the cuda ops table (filled from the
 * linked build: the host build in sparsecomm-unit, the CUDA build under SCG_TEST_GPU)
 * against the cpu device's table on the same inputs, compared bit for bit:
 *   - partmap_acquire / release: offsets, lists and positions identical to the cpu's for
 *     numel not a multiple of nparts, nparts 1 and above numel (empty partitions), numel
 *     0 and 1; the cache (hits, distinct keys, the last release frees, a rebuild after),
 *     also under 8 threads acquiring at once;
 *   - partition_coo: the same split, offsets and status (capacity exact and one short) on
 *     random lists, one partition, the two ends, a shuffled list;
 *   - hash_bitmap_encode / encode_seg (with and without touched marks; unmarked slots hold
 *     garbage that must not be read) / decode_seg / decode_dense_seg: identical buffers,
 *     outputs and statuses, on whole partitions, segments at word and partition edges and
 *     empty ones, and on malformed buffers and segments;
 *   - coo_scatter_add_part: identical sums (each slot gets one addition: the indices of a
 *     call are unique), touched bits and bad counts, with out-of-range pairs mixed in;
 *   - coo_encode / coo_decode: identical bytes and statuses.
 * Each device's results are appended to a log of bytes and the two logs compared; the
 * first difference names the op.
 */
#include <pthread.h>
#include <string.h>

#include "device/cuda.h"
#include "gpu_fns.h"
#include "gpu_log.h"
#include "scg.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

/* The linked build's functions for the memory ops and this file's. */
static void gpu_table(scd_device_ops_t *ops)
{
	gpu_linked_table(ops);
	CHECK_TRUE(ops->alloc && ops->partmap_acquire && ops->partmap_release &&
		   ops->partition_coo && ops->coo_scatter_add_part && ops->coo_encode &&
		   ops->coo_decode && ops->hash_bitmap_encode && ops->hash_bitmap_encode_seg &&
		   ops->hash_bitmap_decode_seg && ops->hash_bitmap_decode_dense_seg);
}

/* Random floats at a density: zeros (some -0.0), small values, ties. */
static void fill_floats(float *x, uint64_t n, double density)
{
	for (uint64_t i = 0; i < n; i++) {
		if (unit_rng_double() >= density)
			x[i] = unit_rng_below(4) ? 0.0f : -0.0f;
		else if (unit_rng_below(8) == 0)
			x[i] = (float)((int)unit_rng_below(7) - 3) * 0.25f;
		else
			x[i] =
			    (float)(unit_rng_double() - 0.5) * (float)(1 + unit_rng_below(16));
	}
}

/* A device array's FNV-1a hash into the log (a whole tensor compared many times). */
static void log_dev_hash(op_log_t *l, const scd_device_ops_t *o, const char *name,
			 const void *dev, size_t bytes)
{
	uint8_t *h = malloc(bytes + 4);
	CHECK_TRUE(h != NULL);
	if (bytes)
		o->to_host(h, dev, bytes);
	uint64_t x = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < bytes; i++)
		x = (x ^ h[i]) * 0x100000001b3ull;
	log_u64(l, name, x);
	free(h);
}

static op_log_t *log_new(void)
{
	op_log_t *l = calloc(1, sizeof(*l));
	CHECK_TRUE(l != NULL);
	return l;
}

/* The logs of the two devices are the same bytes, op by op; both are freed. */
static void logs_same(op_log_t *got, op_log_t *want, const char *what, uint64_t numel,
		      uint32_t P)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s (numel %llu, P %u)", what, (unsigned long long)numel, P);
	logs_compare(got, want, buf);
	log_free(got), log_free(want);
	free(got), free(want);
}

/* (numel, nparts) shapes: the edge cases, then random ones. */
static void shape(int k, uint64_t *numel, uint32_t *P)
{
	static const uint64_t fixed[][2] = {
	    {1, 1},  {1, 5},   {2, 1},	  {7, 3}, {10, 1},   {5, 64},	 {64, 64},
	    {65, 2}, {128, 3}, {1000, 7}, {0, 3}, {3, 1000}, {4099, 16}, {20000, 1}};
	int nf = (int)(sizeof(fixed) / sizeof(fixed[0]));
	if (k < nf) {
		*numel = fixed[k][0];
		*P = (uint32_t)fixed[k][1];
		return;
	}
	*numel = 1 + unit_rng_below(k % 2 ? 3000 : 150000);
	*P = 1 + (uint32_t)unit_rng_below(k % 3 ? 16 : 300);
}
#define NSHAPES 22

/* ---- partition maps ------------------------------------------------------------------ */

static void log_map(op_log_t *l, const scd_device_ops_t *o, const scd_partmap_t *m)
{
	log_u64(l, "numel", m->numel);
	log_u64(l, "seed", m->seed);
	log_u64(l, "fn.seed", m->fn.seed);
	log_u64(l, "fn.nparts", m->fn.nparts);
	log_put(l, "offset", m->offset, ((size_t)m->fn.nparts + 1) * 8);
	log_dev(l, o, "list", m->list, m->numel * 4);
	log_dev(l, o, "pos", m->pos, m->numel * 4);
}

UNIT_TEST_TIMEOUT(gpu_part_partmap_identical, 120)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	const scd_device_ops_t *cpu = &scd_device_cpu_ops, *devs[2] = {&ops, cpu};
	for (int k = 0; k < NSHAPES; k++) {
		uint64_t n;
		uint32_t P;
		shape(k, &n, &P);
		uint64_t seed = unit_rng();
		op_log_t *logs[2] = {log_new(), log_new()};
		for (int d = 0; d < 2; d++) {
			const scd_partmap_t *m = NULL;
			OK(devs[d]->partmap_acquire(n, P, seed, &m));
			CHECK_TRUE(m != NULL);
			log_map(logs[d], devs[d], m);
			devs[d]->partmap_release(m);
			OK(devs[d]->sync());
		}
		logs_same(logs[0], logs[1], "partmap", n, P);
	}
	/* refused as the cpu refuses */
	const scd_partmap_t *m = NULL;
	for (int d = 0; d < 2; d++) {
		CHECK_EQ_INT(devs[d]->partmap_acquire(10, 0, 1, &m), SC_ERR_INVALID);
		CHECK_EQ_INT(devs[d]->partmap_acquire((uint64_t)UINT32_MAX + 1, 4, 1, &m),
			     SC_ERR_INVALID);
	}
	OK(ops.sync());
}

/* A map's list as the cpu builds it (the GPU map is checked to hold the same). */
static void same_as_cpu(const scd_device_ops_t *o, const scd_partmap_t *m)
{
	const scd_partmap_t *c = NULL;
	OK(scd_device_cpu_ops.partmap_acquire(m->numel, m->fn.nparts, m->seed, &c));
	op_log_t *a = log_new(), *b = log_new();
	log_map(a, o, m);
	log_map(b, &scd_device_cpu_ops, c);
	logs_same(a, b, "cached partmap", m->numel, m->fn.nparts);
	scd_device_cpu_ops.partmap_release(c);
}

typedef struct {
	const scd_device_ops_t *ops;
	uint64_t numel, seed;
	uint32_t P;
	const scd_partmap_t *map;
	sc_status_t st;
} acquirer_t;

static void *acquire_thread(void *arg)
{
	acquirer_t *a = arg;
	a->st = a->ops->partmap_acquire(a->numel, a->P, a->seed, &a->map);
	return NULL;
}

UNIT_TEST_TIMEOUT(gpu_part_partmap_cache, 120)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	uint64_t n = 1000 + unit_rng_below(50000), seed = unit_rng();
	uint32_t P = 2 + (uint32_t)unit_rng_below(20);
	uint64_t b0 = scg_partmap_builds();
	const scd_partmap_t *a, *b, *c, *d, *e;
	OK(ops.partmap_acquire(n, P, seed, &a));
	CHECK_EQ_INT(scg_partmap_builds(), b0 + 1);
	OK(ops.partmap_acquire(n, P, seed, &b));
	CHECK_TRUE(a == b); /* a hit */
	CHECK_EQ_INT(scg_partmap_builds(), b0 + 1);
	/* every part of the key counts */
	OK(ops.partmap_acquire(n, P, seed + 1, &c));
	OK(ops.partmap_acquire(n, P + 1, seed, &d));
	OK(ops.partmap_acquire(n + 1, P, seed, &e));
	CHECK_TRUE(c != a && d != a && e != a && c != d && d != e && c != e);
	CHECK_EQ_INT(scg_partmap_builds(), b0 + 4);
	same_as_cpu(&ops, c), same_as_cpu(&ops, d), same_as_cpu(&ops, e);
	ops.partmap_release(c), ops.partmap_release(d), ops.partmap_release(e);
	/* one reference left: still whole */
	ops.partmap_release(a);
	same_as_cpu(&ops, b);
	OK(ops.partmap_acquire(n, P, seed, &c));
	CHECK_TRUE(c == b);
	CHECK_EQ_INT(scg_partmap_builds(), b0 + 4);
	ops.partmap_release(c);
	/* the last release frees: the next acquire builds again, the same lists */
	ops.partmap_release(b);
	ops.partmap_release(NULL);
	OK(ops.partmap_acquire(n, P, seed, &a));
	CHECK_EQ_INT(scg_partmap_builds(), b0 + 5);
	same_as_cpu(&ops, a);
	ops.partmap_release(a);
	OK(ops.sync());

	/* 8 threads at once on a new key: one build, one map, all released */
	enum { T = 8 };
	pthread_t th[T];
	acquirer_t arg[T];
	seed = unit_rng();
	uint64_t b1 = scg_partmap_builds();
	for (int t = 0; t < T; t++) {
		arg[t] = (acquirer_t){&ops, n, seed, P, NULL, SC_ERR_SYSTEM};
		CHECK_TRUE(pthread_create(&th[t], NULL, acquire_thread, &arg[t]) == 0);
	}
	for (int t = 0; t < T; t++)
		CHECK_TRUE(pthread_join(th[t], NULL) == 0);
	for (int t = 0; t < T; t++) {
		OK(arg[t].st);
		CHECK_TRUE(arg[t].map == arg[0].map);
	}
	CHECK_EQ_INT(scg_partmap_builds(), b1 + 1);
	same_as_cpu(&ops, arg[0].map);
	for (int t = 0; t < T; t++)
		ops.partmap_release(arg[t].map);
	OK(ops.partmap_acquire(n, P, seed, &a));
	CHECK_EQ_INT(scg_partmap_builds(), b1 + 2);
	ops.partmap_release(a);
	OK(ops.sync());
}

/* ---- partition_coo ------------------------------------------------------------------- */

typedef struct coo_in {
	uint64_t numel, nnz;
	uint32_t *idx;
	float *val;
} coo_in_t;

/* A list over [0, numel) of one of several kinds; ascending except kind 5. */
static void make_list(coo_in_t *in, uint64_t numel, const scd_partfn_t *fn, int kind)
{
	in->numel = numel;
	in->idx = malloc(numel * 4 + 8);
	in->val = malloc(numel * 4 + 8);
	in->nnz = 0;
	static const double dens[] = {0.0, 1e-3, 0.1, 1.0};
	uint32_t p0 = (uint32_t)unit_rng_below(fn->nparts);
	for (uint64_t i = 0; i < numel; i++) {
		int take;
		if (kind < 4)
			take = unit_rng_double() < dens[kind];
		else if (kind == 4) /* one partition's indices only */
			take = scd_partition_of(fn, (uint32_t)i) == p0;
		else if (kind == 5) /* half of them, then shuffled */
			take = unit_rng_below(2);
		else /* the two ends */
			take = i == 0 || i + 1 == numel;
		if (take)
			in->idx[in->nnz++] = (uint32_t)i;
	}
	fill_floats(in->val, in->nnz, 0.9);
	if (in->nnz) {
		uint32_t nan = 0x7fc01234u; /* a NaN's payload travels too */
		memcpy(&in->val[unit_rng_below(in->nnz)], &nan, 4);
	}
	if (kind == 5)
		for (uint64_t i = in->nnz; i > 1; i--) {
			uint64_t j = unit_rng_below(i);
			uint32_t t = in->idx[i - 1];
			in->idx[i - 1] = in->idx[j], in->idx[j] = t;
		}
}

static void run_partition(const scd_device_ops_t *o, const scd_partfn_t *fn, const coo_in_t *in,
			  op_log_t *l)
{
	uint32_t P = fn->nparts;
	uint64_t n = in->nnz, *off = malloc(((size_t)P + 1) * 8);
	scd_coo_t src = {dev_from(o, in->idx, n * 4), dev_from(o, in->val, n * 4), n, n};
	scd_coo_t out = {o->alloc(n * 4 + 4), o->alloc(n * 4 + 4), 7, n};
	CHECK_TRUE(out.idx && out.val);
	for (uint32_t p = 0; p <= P; p++)
		off[p] = 0xdeadbeef;
	if (n) { /* one short: refused, nothing written */
		out.cap = n - 1;
		log_u64(l, "partition_coo short",
			(uint64_t)o->partition_coo(fn, &src, &out, off));
		log_u64(l, "partition_coo short nnz", out.nnz);
		log_put(l, "partition_coo short offsets", off, ((size_t)P + 1) * 8);
		out.cap = n;
	}
	log_u64(l, "partition_coo", (uint64_t)o->partition_coo(fn, &src, &out, off));
	log_u64(l, "partition_coo nnz", out.nnz);
	log_put(l, "partition_coo offsets", off, ((size_t)P + 1) * 8);
	log_dev(l, o, "partition_coo idx", out.idx, n * 4);
	log_dev(l, o, "partition_coo val", out.val, n * 4);
	OK(o->sync());
	o->free(src.idx), o->free(src.val), o->free(out.idx), o->free(out.val);
	free(off);
}

UNIT_TEST_TIMEOUT(gpu_part_partition_coo, 120)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	for (int k = 0; k < NSHAPES; k++) {
		uint64_t n;
		uint32_t P;
		shape(k, &n, &P);
		scd_partfn_t fn = scd_partfn_make(P, unit_rng());
		for (int kind = 0; kind < 7; kind++) {
			coo_in_t in;
			make_list(&in, n, &fn, kind);
			op_log_t *got = log_new(), *want = log_new();
			run_partition(&ops, &fn, &in, got);
			run_partition(&scd_device_cpu_ops, &fn, &in, want);
			logs_same(got, want, "partition_coo", n, P);
			free(in.idx), free(in.val);
		}
	}
}

/* ---- hash bitmap --------------------------------------------------------------------- */

/* One segment's inputs, drawn once for both devices. */
typedef struct seg_in {
	scd_hbseg_t seg;
	float *local;	    /* the partition's slots (sz), garbage at the unmarked ones */
	uint64_t *touched;  /* over the partition's slots */
	uint64_t cap_delta; /* 0: exact capacity; 1: one byte short */
} seg_in_t;

/* Segments of partition p of size sz: empty ones, the whole, word and partition edges,
 * random ones, and invalid ones (lo > hi, hi past the partition, p past the map). */
static int make_segs(uint32_t p, uint32_t P, uint64_t sz, scd_hbseg_t *s)
{
	int k = 0;
	s[k++] = (scd_hbseg_t){p, 0, 0};
	s[k++] = (scd_hbseg_t){p, 0, sz};
	s[k++] = (scd_hbseg_t){p, sz, sz};
	s[k++] = (scd_hbseg_t){p, 0, sz < 64 ? sz : 64};
	if (sz >= 128)
		s[k++] = (scd_hbseg_t){p, 64, 128};
	if (sz > 65)
		s[k++] = (scd_hbseg_t){p, 63, sz - 1};
	for (int r = 0; r < 2; r++) {
		uint64_t lo = unit_rng_below(sz + 1), hi = lo + unit_rng_below(sz - lo + 1);
		s[k++] = (scd_hbseg_t){p, lo, r == 1 ? sz : hi};
	}
	s[k++] = (scd_hbseg_t){p, 1, 0}; /* lo > hi */
	s[k++] = (scd_hbseg_t){p, 0, sz + 1};
	s[k++] = (scd_hbseg_t){P, 0, 0};
	return k;
}

static void run_hb(const scd_device_ops_t *o, uint64_t numel, uint32_t P, uint64_t seed,
		   const float *g, uint32_t p, const seg_in_t *segs, int nsegs, op_log_t *l)
{
	const scd_partmap_t *m = NULL;
	OK(o->partmap_acquire(numel, P, seed, &m));
	uint64_t sz = p < P ? scd_partmap_size(m, p) : 0, nw = (sz + 63) / 64;
	float *dg = dev_from(o, g, numel * 4);
	uint64_t bufcap = 8 * nw + 4 * sz + 64;
	uint8_t *buf = o->alloc(bufcap), *hb = malloc(bufcap);
	CHECK_TRUE(buf && hb);
	/* the whole partition from g: capacity exact, one short */
	uint64_t bytes = 77, need = 8 * nw + 4 * sz;
	log_u64(l, "encode short",
		(uint64_t)o->hash_bitmap_encode(m, p, dg, buf, need - 1, &bytes));
	log_u64(l, "encode", (uint64_t)o->hash_bitmap_encode(m, p, dg, buf, need, &bytes));
	log_u64(l, "encode bytes", bytes);
	log_dev(l, o, "encode buf", buf, p < P ? bytes : 0);
	float *dst = o->alloc(numel * 4 + 4);
	scd_coo_t out = {o->alloc(numel * 4 + 4), o->alloc(numel * 4 + 4), 0, 0};
	uint64_t *touched = o->alloc(nw * 8 + 8);
	float *local = o->alloc(sz * 4 + 4);
	CHECK_TRUE(dst && out.idx && out.val && touched && local);
	for (int k = 0; k < nsegs; k++) {
		const seg_in_t *si = &segs[k];
		const scd_hbseg_t *seg = &si->seg;
		int valid = seg->p < P && seg->lo <= seg->hi && seg->hi <= sz;
		uint64_t lo = valid ? seg->lo : 0, n = valid ? seg->hi - seg->lo : 0;
		uint64_t cap = 8 * ((n + 63) / 64) + 4 * n - si->cap_delta;
		/* without marks: the segment is only read */
		o->from_host(local, si->local, sz * 4);
		bytes = 77;
		log_u64(l, "encode_seg",
			(uint64_t)o->hash_bitmap_encode_seg(m, seg, local + lo, NULL, buf, cap,
							    &bytes));
		log_u64(l, "encode_seg bytes", bytes);
		log_dev(l, o, "encode_seg buf", buf, bytes == 77 ? 0 : bytes);
		log_dev(l, o, "encode_seg local", local, sz * 4);
		/* with marks: only the marked slots, cleared after */
		o->from_host(touched, si->touched, nw * 8);
		bytes = 77;
		log_u64(l, "encode_seg touched",
			(uint64_t)o->hash_bitmap_encode_seg(m, seg, local + lo, touched, buf,
							    cap, &bytes));
		log_u64(l, "encode_seg touched bytes", bytes);
		uint64_t hbytes = bytes == 77 ? 0 : bytes;
		if (hbytes)
			o->to_host(hb, buf, hbytes);
		log_put(l, "encode_seg touched buf", hb, hbytes);
		log_dev(l, o, "encode_seg touched local", local, sz * 4);
		log_dev(l, o, "encode_seg touched marks", touched, nw * 8);
		if (!valid || si->cap_delta)
			continue;
		/* decode the marked encoding (host copy hb, hbytes): as is, then capacity one
		 * short, then malformed copies */
		uint64_t nnz = (hbytes - 8 * ((n + 63) / 64)) / 4, nwseg = (n + 63) / 64;
		for (int bad = 0; bad < (k % 4 < 2 ? 6 : 1); bad++) { /* malformed: half */
			uint64_t blen = hbytes, ocap = nnz;
			uint8_t *copy = malloc(hbytes + 16);
			memcpy(copy, hb, hbytes);
			memset(copy + hbytes, 0, 16);
			if (bad == 1 && nnz)
				ocap = nnz - 1; /* SC_ERR_LIMIT */
			else if (bad == 2)
				blen = hbytes + 4; /* a value too many */
			else if (bad == 3 && nnz)
				blen = hbytes - 4; /* a value short */
			else if (bad == 4 && nwseg)
				blen = 8 * nwseg - 8;  /* the bitmap cut */
			else if (bad == 5 && n % 64) { /* a bit past the segment, length fit */
				uint64_t w;
				memcpy(&w, copy + 8 * (nwseg - 1), 8);
				w |= 1ull << (n % 64);
				memcpy(copy + 8 * (nwseg - 1), &w, 8);
				blen = hbytes + 4;
			} else if (bad)
				continue;
			o->from_host(buf, copy, blen);
			out.cap = ocap;
			out.nnz = 77;
			log_u64(l, "decode_seg",
				(uint64_t)o->hash_bitmap_decode_seg(m, seg, buf, blen, &out));
			log_u64(l, "decode_seg nnz", out.nnz);
			log_dev(l, o, "decode_seg idx", out.idx,
				out.nnz == 77 ? 0 : out.nnz * 4);
			log_dev(l, o, "decode_seg val", out.val,
				out.nnz == 77 ? 0 : out.nnz * 4);
			o->from_host(dst, g, numel * 4);
			log_u64(
			    l, "decode_dense_seg",
			    (uint64_t)o->hash_bitmap_decode_dense_seg(m, seg, buf, blen, dst));
			log_dev_hash(l, o, "decode_dense_seg dst", dst, numel * 4);
			free(copy);
		}
	}
	/* invalid segments are refused by decode too */
	scd_hbseg_t badseg[3] = {{p, 1, 0}, {p, 0, sz + 1}, {P, 0, 0}};
	for (int k = 0; k < 3; k++) {
		log_u64(l, "decode_seg invalid",
			(uint64_t)o->hash_bitmap_decode_seg(m, &badseg[k], buf, 0, &out));
		log_u64(l, "decode_dense_seg invalid",
			(uint64_t)o->hash_bitmap_decode_dense_seg(m, &badseg[k], buf, 0, dst));
	}
	OK(o->sync());
	o->free(dg), o->free(buf), o->free(dst), o->free(out.idx), o->free(out.val);
	o->free(touched), o->free(local);
	free(hb);
	o->partmap_release(m);
	OK(o->sync());
}

UNIT_TEST_TIMEOUT(gpu_part_hash_bitmap, 180)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	static const double dens[] = {0.0, 0.01, 0.5, 1.0};
	for (int k = 0; k < NSHAPES; k++) {
		uint64_t n;
		uint32_t P;
		shape(k, &n, &P);
		uint64_t seed = unit_rng();
		const scd_partmap_t *cm = NULL;
		OK(scd_device_cpu_ops.partmap_acquire(n, P, seed, &cm));
		float *g = malloc(n * 4 + 4);
		fill_floats(g, n, dens[k % 4]);
		/* a few partitions (the first, the last, a random one) and one past the map */
		uint32_t parts[4] = {0, P - 1, (uint32_t)unit_rng_below(P), P};
		for (int t = 0; t < 4; t++) {
			uint32_t p = parts[t];
			uint64_t sz = p < P ? scd_partmap_size(cm, p) : 0, nw = (sz + 63) / 64;
			scd_hbseg_t s[16];
			int ns = make_segs(p, P, sz, s);
			seg_in_t segs[32];
			int nsegs = 0;
			for (int j = 0; j < ns; j++)
				for (uint64_t delta = 0; delta < 2; delta++) {
					seg_in_t *si = &segs[nsegs++];
					si->seg = s[j];
					si->cap_delta = delta;
					si->local = malloc(sz * 4 + 4);
					si->touched = malloc(nw * 8 + 8);
					double md = unit_rng_double(), vd = dens[(k + j) % 4];
					for (uint64_t i = 0; i < nw; i++)
						si->touched[i] = 0;
					for (uint64_t i = 0; i < sz; i++) {
						int mark = unit_rng_double() < md;
						if (mark)
							si->touched[i / 64] |= 1ull << (i % 64);
						/* unmarked: garbage, which must not be read */
						si->local[i] = 0.0f;
						fill_floats(&si->local[i], 1, mark ? vd : 1.0);
						if (!mark && si->local[i] == 0.0f)
							si->local[i] = 3.5f;
					}
				}
			op_log_t *got = log_new(), *want = log_new();
			run_hb(&ops, n, P, seed, g, p, segs, nsegs, got);
			run_hb(&scd_device_cpu_ops, n, P, seed, g, p, segs, nsegs, want);
			logs_same(got, want, "hash bitmap", n, P);
			for (int j = 0; j < nsegs; j++)
				free(segs[j].local), free(segs[j].touched);
		}
		free(g);
		scd_device_cpu_ops.partmap_release(cm);
	}
}

/* ---- scatter_add_part ---------------------------------------------------------------- */

static void run_scatter(const scd_device_ops_t *o, uint64_t numel, uint32_t P, uint64_t seed,
			uint32_t p, const coo_in_t *src, const float *dst0,
			const uint64_t *touched0, op_log_t *l)
{
	const scd_partmap_t *m = NULL;
	OK(o->partmap_acquire(numel, P, seed, &m));
	uint64_t sz = scd_partmap_size(m, p), nw = (sz + 63) / 64, n = src->nnz;
	float *dst = dev_from(o, dst0, sz * 4);
	uint64_t *touched = dev_from(o, touched0, nw * 8);
	scd_coo_t s = {dev_from(o, src->idx, n * 4), dev_from(o, src->val, n * 4), n, n};
	log_u64(l, "scatter_add_part bad", o->coo_scatter_add_part(dst, touched, m, p, &s));
	log_dev(l, o, "scatter_add_part dst", dst, sz * 4);
	log_dev(l, o, "scatter_add_part touched", touched, nw * 8);
	/* again without marks: the sums double, the marks stay */
	log_u64(l, "scatter_add_part again bad", o->coo_scatter_add_part(dst, NULL, m, p, &s));
	log_dev(l, o, "scatter_add_part again dst", dst, sz * 4);
	OK(o->sync());
	o->free(dst), o->free(touched), o->free(s.idx), o->free(s.val);
	o->partmap_release(m);
	OK(o->sync());
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

UNIT_TEST_TIMEOUT(gpu_part_scatter_add_part, 120)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	static const double dens[] = {0.0, 0.05, 0.5, 1.0};
	for (int k = 0; k < NSHAPES; k++) {
		uint64_t n;
		uint32_t P;
		shape(k, &n, &P);
		if (n == 0)
			continue;
		uint64_t seed = unit_rng();
		const scd_partmap_t *cm = NULL;
		OK(scd_device_cpu_ops.partmap_acquire(n, P, seed, &cm));
		for (int t = 0; t < 4; t++) {
			uint32_t p = t == 0 ? 0 : t == 1 ? P - 1 : (uint32_t)unit_rng_below(P);
			uint64_t sz = scd_partmap_size(cm, p), nw = (sz + 63) / 64;
			/* a subset of I_p, other partitions' indices whose slot is past |I_p|
			 * or unused, indices past numel; ascending */
			coo_in_t src = {n, 0, malloc((n + 8) * 4), malloc((n + 8) * 4)};
			uint8_t *used = calloc(sz + 1, 1);
			double d = dens[(k + t) % 4];
			for (uint64_t i = 0; i < n; i++) {
				uint32_t q = scd_partition_of(&cm->fn, (uint32_t)i),
					 j = cm->pos[i];
				if (q == p && unit_rng_double() < d) {
					src.idx[src.nnz++] = (uint32_t)i;
					used[j] = 1;
				}
			}
			for (uint64_t i = 0, extra = 0; i < n && extra < 4; i++) {
				uint32_t q = scd_partition_of(&cm->fn, (uint32_t)i),
					 j = cm->pos[i];
				if (q != p && (j >= sz || !used[j]) && unit_rng_below(8) == 0) {
					src.idx[src.nnz++] = (uint32_t)i;
					if (j < sz)
						used[j] = 1;
					extra++;
				}
			}
			src.idx[src.nnz++] = (uint32_t)n; /* past numel */
			if (n < UINT32_MAX)
				src.idx[src.nnz++] = UINT32_MAX;
			qsort(src.idx, src.nnz, 4, cmp_u32);
			fill_floats(src.val, src.nnz, 0.9);
			float *dst0 = malloc(sz * 4 + 4);
			fill_floats(dst0, sz, 0.5);
			/* subnormal sums (a GPU's float atomics would flush them) */
			for (uint64_t j = 0; j < src.nnz && j < 8; j++)
				src.val[j] = (float)(j + 1) * 1e-41f;
			for (uint64_t j = 0; j < sz && j < 64; j++)
				if (unit_rng_below(2))
					dst0[j] = (float)(j + 1) * -3e-42f;
			uint64_t *touched0 = malloc(nw * 8 + 8);
			for (uint64_t w = 0; w < nw; w++)
				touched0[w] = unit_rng_below(2) ? unit_rng() : 0;
			op_log_t *got = log_new(), *want = log_new();
			run_scatter(&ops, n, P, seed, p, &src, dst0, touched0, got);
			run_scatter(&scd_device_cpu_ops, n, P, seed, p, &src, dst0, touched0,
				    want);
			logs_same(got, want, "scatter_add_part", n, P);
			free(src.idx), free(src.val), free(used), free(dst0), free(touched0);
		}
		scd_device_cpu_ops.partmap_release(cm);
	}
	/* a partition past the map: nothing added, a failure for sync */
	const scd_partmap_t *m = NULL;
	OK(ops.partmap_acquire(100, 4, 1, &m));
	float *dst = ops.alloc(400);
	scd_coo_t s = {ops.alloc(4), ops.alloc(4), 0, 1};
	CHECK_EQ_INT(ops.coo_scatter_add_part(dst, NULL, m, 4, &s), 0);
	CHECK_EQ_INT(ops.sync(), SC_ERR_INVALID);
	OK(ops.sync());
	ops.free(dst), ops.free(s.idx), ops.free(s.val);
	ops.partmap_release(m);
	OK(ops.sync());
}

/* ---- COO format ---------------------------------------------------------------------- */

static void run_coo(const scd_device_ops_t *o, const coo_in_t *in, op_log_t *l)
{
	uint64_t n = in->nnz, need = 8 * n;
	scd_coo_t src = {dev_from(o, in->idx, n * 4), dev_from(o, in->val, n * 4), n, n};
	uint8_t *buf = o->alloc(need + 16);
	scd_coo_t out = {o->alloc(n * 4 + 8), o->alloc(n * 4 + 8), 77, n};
	CHECK_TRUE(buf && out.idx && out.val);
	uint64_t bytes = 77;
	if (n)
		log_u64(l, "coo_encode short",
			(uint64_t)o->coo_encode(&src, buf, need - 1, &bytes));
	log_u64(l, "coo_encode short bytes", bytes);
	log_u64(l, "coo_encode", (uint64_t)o->coo_encode(&src, buf, need, &bytes));
	log_u64(l, "coo_encode bytes", bytes);
	log_dev(l, o, "coo_encode buf", buf, need);
	log_u64(l, "coo_decode", (uint64_t)o->coo_decode(buf, need, &out));
	log_u64(l, "coo_decode nnz", out.nnz);
	log_dev(l, o, "coo_decode idx", out.idx, n * 4);
	log_dev(l, o, "coo_decode val", out.val, n * 4);
	/* lengths not a multiple of 8; one pair past the capacity */
	for (uint64_t cut = 1; cut < 8; cut++)
		if (need + 8 >= cut) {
			out.nnz = 77;
			log_u64(l, "coo_decode length",
				(uint64_t)o->coo_decode(buf, need + 8 - cut, &out));
			log_u64(l, "coo_decode length nnz", out.nnz);
		}
	out.cap = n ? n - 1 : 0;
	out.nnz = 77;
	log_u64(l, "coo_decode short", (uint64_t)o->coo_decode(buf, n ? need : 8, &out));
	log_u64(l, "coo_decode short nnz", out.nnz);
	OK(o->sync());
	o->free(src.idx), o->free(src.val), o->free(buf), o->free(out.idx), o->free(out.val);
	OK(o->sync());
}

UNIT_TEST(gpu_part_coo_format)
{
	scd_device_ops_t ops;
	gpu_table(&ops);
	for (int round = 0; round < 20; round++) {
		uint64_t numel = round == 0 ? 0 : round == 1 ? 1 : 1 + unit_rng_below(50000);
		scd_partfn_t fn = scd_partfn_make(1, 0);
		coo_in_t in;
		make_list(&in, numel, &fn, round % 7);
		op_log_t *got = log_new(), *want = log_new();
		run_coo(&ops, &in, got);
		run_coo(&scd_device_cpu_ops, &in, want);
		logs_same(got, want, "coo format", numel, 1);
		free(in.idx), free(in.val);
	}
}
