/*
 * test_gpu_kernels.c: the GPU device's message bodies, per-scheme kernels and top-k of a
 * COO list (gpu/kernels.cu) through the cuda ops table, against the cpu device: the same
 * host inputs through both tables, every result read back and compared bit for bit. In
 * sparsecomm-unit the table is built from the host build of gpu/ (libscgpu-host.a); in
 * sparsecomm-unit-gpu (-DSCG_TEST_GPU) from the CUDA build.
 */
#include <math.h>
#include <string.h>

#include "device/cuda.h"
#include "gpu_fns.h"
#include "gpu_log.h"
#include "scg.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

/* Memory and kernels.cu's functions: what these tests' cuda table is built from. */
static void kernels_table(scd_device_ops_t *ops)
{
	gpu_linked_table(ops);
	CHECK_TRUE(ops->idx_count_runs && ops->idx_runs_encode && ops->idx_bitmap_encode &&
		   ops->runs_decode && ops->idx_add && ops->lower_bounds &&
		   ops->idx_check_range && ops->coo_compact_nonzero && ops->coo_merge_sum &&
		   ops->coo_filter_mod && ops->coo_block_runs && ops->sub_scaled &&
		   ops->coo_topk);
}

/* The two logs agree byte for byte (the first difference named). */
static void same_logs(const op_log_t *got, const op_log_t *want, const char *what, uint64_t n)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s (n %llu)", what, (unsigned long long)n);
	logs_compare(got, want, buf);
}

/* Random floats: zeros (some -0.0), values from a few ties, gradient-like values. */
static void fill_floats(float *x, uint64_t n, double density, unsigned ties)
{
	for (uint64_t i = 0; i < n; i++) {
		if (unit_rng_double() >= density)
			x[i] = unit_rng_below(2) ? 0.0f : -0.0f;
		else if (ties && unit_rng_below(4) == 0)
			x[i] = (float)((int)unit_rng_below(2 * ties + 1) - (int)ties) * 0.5f;
		else
			x[i] = (float)(unit_rng_double() - 0.5) *
			       (float)ldexp(1.0, (int)unit_rng_below(20) - 10);
	}
}

/* ---- message bodies ------------------------------------------------------------------ */

/* Index lists of several shapes (n entries); returns how the list was made. */
static const char *make_list(uint32_t *idx, uint64_t n, int shape)
{
	uint32_t x = (uint32_t)unit_rng_below(1000);
	switch (shape) {
	case 0: /* all consecutive */
		for (uint64_t i = 0; i < n; i++)
			idx[i] = x + (uint32_t)i;
		return "consecutive";
	case 1: /* none consecutive */
		for (uint64_t i = 0; i < n; i++)
			idx[i] = x + 2 * (uint32_t)i;
		return "no runs";
	case 2: /* runs of random lengths with gaps */
		for (uint64_t i = 0; i < n; i++) {
			if (i && unit_rng_below(8) == 0)
				x += 1 + (uint32_t)unit_rng_below(5);
			idx[i] = x++;
		}
		return "runs";
	case 3: /* across UINT32_MAX (consecutive in uint32_t arithmetic) */
		x = UINT32_MAX - (uint32_t)(n / 2);
		for (uint64_t i = 0; i < n; i++)
			idx[i] = x + (uint32_t)i;
		return "wrap";
	default: /* any order, repeats */
		for (uint64_t i = 0; i < n; i++)
			idx[i] = (uint32_t)unit_rng_below(n / 2 + 2);
		return "random";
	}
}

/* count_runs, runs_encode (at an aligned and an unaligned address), runs_decode of the
 * encoding (max exact, one short, numel at the last index + 1 and one short), idx_add,
 * idx_bitmap_encode over the list's range, a smaller one and one that misses. */
static void run_msg(const scd_device_ops_t *o, const uint32_t *h, uint64_t n, uint32_t add,
		    op_log_t *l)
{
	uint32_t *idx = dev_from(o, h, n * 4);
	uint64_t runs = o->idx_count_runs(idx, n);
	log_u64(l, "idx_count_runs", runs);
	uint8_t *buf = o->alloc(8 * runs + 16);
	CHECK_TRUE(buf != NULL);
	for (int mis = 0; mis < 3; mis += 1) {
		uint8_t *r = buf + (mis == 2 ? 8 : mis); /* 0, 1 (unaligned), 8 */
		o->clear(buf, 8 * runs + 16);
		o->idx_runs_encode(idx, n, r);
		log_dev(l, o, "idx_runs_encode", buf, 8 * runs + 16);
		uint64_t last = 0;
		if (n) {
			uint32_t lx;
			o->to_host(&lx, idx + n - 1, 4);
			last = lx;
		}
		uint32_t *out = o->alloc(n * 4 + 8);
		CHECK_TRUE(out != NULL);
		uint64_t numels[2] = {n ? last + 1 : 0, last}, maxes[2] = {n, n ? n - 1 : 0};
		for (int a = 0; a < 2; a++)
			for (int b = 0; b < 2; b++) {
				uint64_t got =
				    o->runs_decode(r, runs, numels[a], maxes[b], out);
				log_u64(l, "runs_decode", got);
				if (got != UINT64_MAX && got <= n)
					log_dev(l, o, "runs_decode idx", out, got * 4);
			}
		o->free(out);
	}
	o->free(buf);
	/* bitmaps */
	uint32_t lo = UINT32_MAX, hi = 0;
	for (uint64_t i = 0; i < n; i++) {
		lo = h[i] < lo ? h[i] : lo;
		hi = h[i] > hi ? h[i] : hi;
	}
	uint64_t span = n ? (uint64_t)hi - lo + 1 : 0;
	if (span <= (1u << 24)) {
		uint64_t los[3] = {lo, lo, (uint64_t)lo + 1},
			 spans[3] = {span, span ? span - 1 : 0, span};
		uint64_t *w = o->alloc(8 * ((span + 63) / 64) + 8);
		CHECK_TRUE(w != NULL);
		for (int t = 0; t < 3; t++) {
			o->from_host(w, h,
				     n * 4 < 8 * ((span + 63) / 64) ? n * 4 : 0); /* stale */
			uint64_t pos = o->idx_bitmap_encode(idx, n, los[t], spans[t], w);
			log_u64(l, "idx_bitmap_encode pos", pos);
			log_dev(l, o, "idx_bitmap_encode words", w, 8 * ((spans[t] + 63) / 64));
		}
		o->free(w);
	}
	o->idx_add(idx, n, add);
	log_dev(l, o, "idx_add", idx, n * 4);
	OK(o->sync());
	o->free(idx);
	OK(o->sync());
}

UNIT_TEST_TIMEOUT(gpu_kernels_messages, 120)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 60; round++) {
		uint64_t n = round < 5	  ? 0
			     : round < 10 ? 1
			     : round < 40 ? 2 + unit_rng_below(200)
					  : 1000 + unit_rng_below(40000);
		int shape = round % 5;
		uint32_t *h = malloc(n * 4 + 4);
		const char *kind = make_list(h, n, shape);
		uint32_t add = round % 3 ? (uint32_t)unit_rng() : UINT32_MAX;
		op_log_t got = {0}, want = {0};
		run_msg(&ops, h, n, add, &got);
		run_msg(&scd_device_cpu_ops, h, n, add, &want);
		same_logs(&got, &want, kind, n);
		log_free(&got), log_free(&want);
		free(h);
	}
}

/* runs_decode of hand-made run tables, well formed and malformed. */
static uint64_t decode_on(const scd_device_ops_t *o, const uint32_t *pairs, uint64_t nruns,
			  uint64_t numel, uint64_t max, uint32_t *out_host)
{
	uint8_t *r = dev_from(o, pairs, nruns * 8);
	uint32_t *out = o->alloc(max * 4 + 4);
	CHECK_TRUE(out != NULL);
	uint64_t got = o->runs_decode(r, nruns, numel, max, out);
	if (got != UINT64_MAX && got <= max)
		o->to_host(out_host, out, got * 4);
	OK(o->sync());
	o->free(out);
	o->free(r);
	OK(o->sync());
	return got;
}

UNIT_TEST(gpu_kernels_runs_decode_malformed)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	struct {
		const char *what;
		uint32_t p[8];
		uint64_t nruns, numel, max, want;
	} c[] = {
	    {"none", {0}, 0, 10, 0, 0},
	    {"one run at 0", {0, 3}, 1, 10, 3, 3},
	    {"touching numel", {2, 3, 7, 3}, 2, 10, 6, 6},
	    {"adjacent runs", {2, 3, 5, 1}, 2, 10, 4, 4},
	    {"empty run", {2, 3, 6, 0}, 2, 10, 6, UINT64_MAX},
	    {"empty first run", {2, 0, 6, 1}, 2, 10, 6, UINT64_MAX},
	    {"overlap", {2, 3, 4, 1}, 2, 10, 6, UINT64_MAX},
	    {"descending", {6, 1, 2, 1}, 2, 10, 6, UINT64_MAX},
	    {"past numel", {2, 3, 8, 3}, 2, 10, 6, UINT64_MAX},
	    {"past numel by one", {9, 2}, 1, 10, 6, UINT64_MAX},
	    {"past max", {2, 3, 7, 3}, 2, 10, 5, UINT64_MAX},
	    {"past max early, bad later", {0, 5, 4, 0}, 2, 10, 3, UINT64_MAX},
	    {"at uint32_t's end", {UINT32_MAX - 2, 3}, 1, (uint64_t)UINT32_MAX + 1, 3, 3},
	    {"past uint32_t", {UINT32_MAX - 1, 3}, 1, (uint64_t)UINT32_MAX + 1, 3, UINT64_MAX},
	    {"max 0", {0, 1}, 1, 10, 0, UINT64_MAX},
	};
	for (size_t t = 0; t < sizeof c / sizeof c[0]; t++) {
		uint32_t got_idx[16], want_idx[16];
		uint64_t want = decode_on(&scd_device_cpu_ops, c[t].p, c[t].nruns, c[t].numel,
					  c[t].max, want_idx);
		uint64_t got =
		    decode_on(&ops, c[t].p, c[t].nruns, c[t].numel, c[t].max, got_idx);
		CHECK_MSG(want == c[t].want, "%s: the cpu says %llu", c[t].what,
			  (unsigned long long)want);
		CHECK_MSG(got == want, "%s: %llu, the cpu %llu", c[t].what,
			  (unsigned long long)got, (unsigned long long)want);
		if (want != UINT64_MAX)
			CHECK_MSG(!memcmp(got_idx, want_idx, 4 * want), "%s: indices differ",
				  c[t].what);
	}
	/* random tables, some entries broken */
	for (int round = 0; round < 200; round++) {
		uint64_t nruns = 1 + unit_rng_below(6), numel = 0;
		uint32_t p[12];
		for (uint64_t k = 0; k < nruns; k++) {
			p[2 * k] = (uint32_t)(numel + unit_rng_below(3));
			p[2 * k + 1] = (uint32_t)(1 + unit_rng_below(3));
			numel = (uint64_t)p[2 * k] + p[2 * k + 1];
		}
		int flaw = (int)unit_rng_below(4);
		uint64_t k = unit_rng_below(nruns);
		if (flaw == 1)
			p[2 * k + 1] = 0;
		else if (flaw == 2 && k)
			p[2 * k] = p[2 * k - 2] + (uint32_t)unit_rng_below(p[2 * k - 1]);
		numel -= unit_rng_below(2);
		uint64_t max = 3 * nruns - unit_rng_below(2 * nruns + 1);
		uint32_t got_idx[32], want_idx[32];
		uint64_t want = decode_on(&scd_device_cpu_ops, p, nruns, numel, max, want_idx);
		uint64_t got = decode_on(&ops, p, nruns, numel, max, got_idx);
		CHECK_MSG(got == want, "random table %d: %llu, the cpu %llu", round,
			  (unsigned long long)got, (unsigned long long)want);
		if (want != UINT64_MAX)
			CHECK_TRUE(!memcmp(got_idx, want_idx, 4 * want));
	}
}

/* A bitmap of a list with an entry outside the range: the position and the bits before. */
UNIT_TEST(gpu_kernels_bitmap_outside)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 100; round++) {
		uint64_t n = 1 + unit_rng_below(300), lo = unit_rng_below(100),
			 span = 1 + unit_rng_below(500);
		uint32_t *h = malloc(n * 4);
		for (uint64_t i = 0; i < n; i++)
			h[i] = (uint32_t)(lo + unit_rng_below(span));
		uint64_t bad = unit_rng_below(n);
		int how = (int)unit_rng_below(3);
		h[bad] = how == 0   ? (uint32_t)(lo + span)		   /* just past */
			 : how == 1 ? (uint32_t)(lo ? lo - 1 : UINT32_MAX) /* just below */
				    : UINT32_MAX;
		op_log_t got = {0}, want = {0};
		const scd_device_ops_t *devs[2] = {&ops, &scd_device_cpu_ops};
		op_log_t *logs[2] = {&got, &want};
		for (int d = 0; d < 2; d++) {
			const scd_device_ops_t *o = devs[d];
			uint32_t *idx = dev_from(o, h, n * 4);
			uint64_t *w = o->alloc(8 * ((span + 63) / 64));
			CHECK_TRUE(w != NULL);
			uint64_t pos = o->idx_bitmap_encode(idx, n, lo, span, w);
			log_u64(logs[d], "pos", pos);
			log_dev(logs[d], o, "words", w, 8 * ((span + 63) / 64));
			OK(o->sync());
			o->free(idx), o->free(w);
		}
		CHECK_TRUE(*(uint64_t *)want.buf <= bad);
		same_logs(&got, &want, "bitmap outside", n);
		log_free(&got), log_free(&want);
		free(h);
	}
}

/* ---- per-scheme kernels -------------------------------------------------------------- */

/* A strictly ascending list over [0, numel) at a density; returns its length. */
static uint64_t random_list(uint64_t numel, double density, uint32_t *idx)
{
	uint64_t w = 0;
	for (uint64_t i = 0; i < numel; i++)
		if (unit_rng_double() < density)
			idx[w++] = (uint32_t)i;
	return w;
}

typedef struct lists_in {
	uint64_t numel, an, bn;
	uint32_t *ai, *bi, d, t, nlists, nv;
	float *av, *bv;
	uint64_t off[9], v[12], lo, hi, bad_k;
} lists_in_t;

static void run_lists(const scd_device_ops_t *o, const lists_in_t *in, op_log_t *l)
{
	uint64_t an = in->an, bn = in->bn, m = an + bn;
	uint32_t *ai = dev_from(o, in->ai, an * 4), *bi = dev_from(o, in->bi, bn * 4);
	float *av = dev_from(o, in->av, an * 4), *bv = dev_from(o, in->bv, bn * 4);
	/* lower_bounds: a cut into nlists lists */
	uint64_t pos[8 * 12];
	memset(pos, 0xa5, sizeof pos);
	o->lower_bounds(ai, in->off, in->nlists, in->v, in->nv, pos);
	log_put(l, "lower_bounds", pos, 8 * (size_t)in->nlists * in->nv);
	o->lower_bounds(bi, (const uint64_t[]){0, bn}, 1, in->v, in->nv, pos);
	log_put(l, "lower_bounds one list", pos, 8 * (size_t)in->nv);
	/* idx_check_range: the list, a narrower range, a repeat */
	log_u64(l, "idx_check_range", o->idx_check_range(ai, an, 0, in->numel));
	log_u64(l, "idx_check_range narrow", o->idx_check_range(ai, an, in->lo, in->hi));
	if (an >= 2) {
		uint32_t *rep = malloc(an * 4);
		memcpy(rep, in->ai, an * 4);
		rep[in->bad_k] = rep[in->bad_k - 1];
		uint32_t *drep = dev_from(o, rep, an * 4);
		log_u64(l, "idx_check_range repeat",
			o->idx_check_range(drep, an, 0, in->numel));
		o->free(drep);
		free(rep);
	}
	uint32_t *oi = o->alloc(m * 4 + 4);
	float *ov = o->alloc(m * 4 + 4);
	CHECK_TRUE(oi && ov);
	/* coo_merge_sum of a and b */
	uint64_t r = o->coo_merge_sum(ai, av, an, bi, bv, bn, oi, ov);
	log_u64(l, "coo_merge_sum nnz", r);
	log_dev(l, o, "coo_merge_sum idx", oi, (r <= m ? r : 0) * 4);
	log_dev(l, o, "coo_merge_sum val", ov, (r <= m ? r : 0) * 4);
	/* coo_filter_mod of the union, out of place and in place */
	uint32_t *fi = o->alloc(m * 4 + 4);
	float *fv = o->alloc(m * 4 + 4);
	CHECK_TRUE(fi && fv);
	uint64_t f = o->coo_filter_mod(oi, ov, r, in->d, in->t, fi, fv);
	log_u64(l, "coo_filter_mod nnz", f);
	log_dev(l, o, "coo_filter_mod idx", fi, (f <= m ? f : 0) * 4);
	log_dev(l, o, "coo_filter_mod val", fv, (f <= m ? f : 0) * 4);
	/* coo_compact_nonzero of a: out of place, in place, idx alone in place */
	uint64_t c = o->coo_compact_nonzero(ai, av, an, fi, fv);
	log_u64(l, "coo_compact_nonzero nnz", c);
	log_dev(l, o, "coo_compact_nonzero idx", fi, (c <= m ? c : 0) * 4);
	log_dev(l, o, "coo_compact_nonzero val", fv, (c <= m ? c : 0) * 4);
	o->copy(fi, ai, an * 4);
	o->copy(fv, av, an * 4);
	c = o->coo_compact_nonzero(fi, fv, an, fi, fv);
	log_u64(l, "coo_compact_nonzero in place nnz", c);
	log_dev(l, o, "coo_compact_nonzero in place idx", fi, (c <= m ? c : 0) * 4);
	log_dev(l, o, "coo_compact_nonzero in place val", fv, (c <= m ? c : 0) * 4);
	o->copy(fi, bi, bn * 4);
	c = o->coo_compact_nonzero(fi, bv, bn, fi, ov);
	log_u64(l, "coo_compact_nonzero idx in place nnz", c);
	log_dev(l, o, "coo_compact_nonzero idx in place idx", fi, (c <= m ? c : 0) * 4);
	log_dev(l, o, "coo_compact_nonzero idx in place val", ov, (c <= m ? c : 0) * 4);
	log_dev(l, o, "coo_compact_nonzero input untouched", bv, bn * 4);
	o->copy(fi, bi, bn * 4);
	o->copy(fv, bv, bn * 4);
	f = o->coo_filter_mod(fi, fv, bn, in->d, in->t, fi, fv);
	log_u64(l, "coo_filter_mod in place nnz", f);
	log_dev(l, o, "coo_filter_mod in place idx", fi, (f <= m ? f : 0) * 4);
	log_dev(l, o, "coo_filter_mod in place val", fv, (f <= m ? f : 0) * 4);
	f = o->coo_filter_mod(bi, bv, bn, in->d, in->d + in->t, oi, ov);
	log_u64(l, "coo_filter_mod t >= d", f);
	OK(o->sync());
	o->free(fi), o->free(fv), o->free(oi), o->free(ov);
	o->free(ai), o->free(bi), o->free(av), o->free(bv);
	OK(o->sync());
}

UNIT_TEST_TIMEOUT(gpu_kernels_lists, 120)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 50; round++) {
		uint64_t n = round == 0	  ? 0
			     : round == 1 ? 1
			     : round < 40 ? 2 + unit_rng_below(300)
					  : 1000 + unit_rng_below(40000);
		lists_in_t in = {.numel = n};
		in.ai = malloc(n * 4 + 4), in.bi = malloc(n * 4 + 4);
		in.av = malloc(n * 4 + 4), in.bv = malloc(n * 4 + 4);
		double da = round % 7 == 2 ? 1.0 : unit_rng_double(),
		       db = round % 7 == 3 ? 0.0 : unit_rng_double();
		in.an = random_list(n, da, in.ai);
		in.bn = random_list(n, db, in.bi);
		fill_floats(in.av, in.an, unit_rng_double(), 3);
		fill_floats(in.bv, in.bn, unit_rng_double(), 3);
		/* nlists cuts of a (some empty) and values: 0, list values, between, numel,
		 * above uint32_t */
		in.nlists = 1 + (uint32_t)unit_rng_below(8);
		in.off[0] = 0;
		for (uint32_t k = 1; k < in.nlists; k++)
			in.off[k] = in.off[k - 1] + unit_rng_below(in.an - in.off[k - 1] + 1);
		in.off[in.nlists] = in.an;
		in.nv = 1 + (uint32_t)unit_rng_below(12);
		for (uint32_t k = 0; k < in.nv; k++) {
			uint64_t w = unit_rng_below(5);
			in.v[k] = w == 0   ? 0
				  : w == 1 ? n
				  : w == 2 ? (uint64_t)UINT32_MAX + 1 + unit_rng_below(3)
				  : w == 3 && in.an ? in.ai[unit_rng_below(in.an)]
						    : unit_rng_below(n + 2);
		}
		in.lo = unit_rng_below(n + 1);
		in.hi = in.lo + unit_rng_below(n + 2 - in.lo);
		in.bad_k = in.an >= 2 ? 1 + unit_rng_below(in.an - 1) : 0;
		in.d = 1 + (uint32_t)unit_rng_below(round % 4 ? 8 : 1);
		in.t = (uint32_t)unit_rng_below(in.d);
		op_log_t got = {0}, want = {0};
		run_lists(&ops, &in, &got);
		run_lists(&scd_device_cpu_ops, &in, &want);
		same_logs(&got, &want, "lists", n);
		log_free(&got), log_free(&want);
		free(in.ai), free(in.bi), free(in.av), free(in.bv);
	}
}

/* coo_block_runs: random partitions (empty blocks, one block, a block per index) of lists
 * of several shapes (ascending, runs that cross blocks, descents, indices >= numel), max
 * from 1 to past the runs' number. */
UNIT_TEST_TIMEOUT(gpu_kernels_block_runs, 120)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 300; round++) {
		uint64_t numel = 1 + unit_rng_below(round < 250 ? 200 : 100000);
		uint32_t nb = 1 + (uint32_t)unit_rng_below(round % 5 ? 12 : 1);
		if (round % 17 == 0 && numel < 300)
			nb = (uint32_t)numel;
		uint64_t *bnd = malloc(8 * ((uint64_t)nb + 1));
		bnd[0] = 0;
		for (uint32_t b = 1; b < nb; b++) /* ascending, repeats: empty blocks */
			bnd[b] =
			    round % 17 == 0 && nb == numel
				? b
				: bnd[b - 1] + unit_rng_below((numel - bnd[b - 1]) / 2 + 1);
		bnd[nb] = numel;
		uint64_t n = round < 3 ? (uint64_t)round : unit_rng_below(2 * numel + 2);
		uint32_t *h = malloc(n * 4 + 4);
		int shape = (int)unit_rng_below(4);
		uint64_t x = unit_rng_below(numel);
		for (uint64_t i = 0; i < n; i++) {
			if (shape == 0) /* ascending with gaps, wrapping */
				x = (x + 1 + unit_rng_below(3)) % numel;
			else if (shape == 1) /* mostly ascending, some descents */
				x = unit_rng_below(10) ? x + 1 : unit_rng_below(numel);
			else if (shape == 2) /* random */
				x = unit_rng_below(numel + 2);
			else /* ascending, some past numel */
				x = unit_rng_below(50) ? (x + 1) % numel
						       : numel + unit_rng_below(3);
			h[i] = (uint32_t)(x > UINT32_MAX ? UINT32_MAX : x);
		}
		uint32_t max = round % 3 == 0 ? 1 + (uint32_t)unit_rng_below(3)
					      : (uint32_t)(n + 1 + unit_rng_below(4));
		if (round % 11 == 0)
			max = 0;
		scd_run_t *rg = malloc(sizeof(scd_run_t) * (max + 1)),
			  *rw = malloc(sizeof(scd_run_t) * (max + 1));
		memset(rg, 0, sizeof(scd_run_t) * (max + 1));
		memset(rw, 0, sizeof(scd_run_t) * (max + 1));
		uint64_t bad_g = 7, bad_w = 9;
		const scd_device_ops_t *devs[2] = {&ops, &scd_device_cpu_ops};
		uint32_t nr[2];
		for (int d = 0; d < 2; d++) {
			uint32_t *idx = dev_from(devs[d], h, n * 4);
			nr[d] = devs[d]->coo_block_runs(idx, n, bnd, nb, numel, max,
							d ? rw : rg, d ? &bad_w : &bad_g);
			OK(devs[d]->sync());
			devs[d]->free(idx);
		}
		CHECK_MSG(
		    nr[0] == nr[1] && bad_g == bad_w,
		    "round %d (n %llu, nb %u, max %u, shape %d): %u runs bad %llu, the cpu "
		    "%u runs bad %llu",
		    round, (unsigned long long)n, nb, max, shape, nr[0],
		    (unsigned long long)bad_g, nr[1], (unsigned long long)bad_w);
		for (uint32_t r = 0; r < nr[1]; r++)
			CHECK_MSG(
			    rg[r].block == rw[r].block && rg[r].lo == rw[r].lo &&
				rg[r].hi == rw[r].hi,
			    "round %d: run %u is (%u, %llu, %llu), the cpu's (%u, %llu, %llu)",
			    round, r, rg[r].block, (unsigned long long)rg[r].lo,
			    (unsigned long long)rg[r].hi, rw[r].block,
			    (unsigned long long)rw[r].lo, (unsigned long long)rw[r].hi);
		free(rg), free(rw), free(h), free(bnd);
	}
}

/* sub_scaled: bit for bit; the inputs are ones where a fused multiply-add would round
 * differently (checked: so this test catches one). */
UNIT_TEST(gpu_kernels_sub_scaled)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 20; round++) {
		uint64_t n = round == 0 ? 0 : round == 1 ? 1 : 1 + unit_rng_below(50000);
		float *res = malloc(n * 4 + 4), *x = malloc(n * 4 + 4),
		      *got = malloc(n * 4 + 4), *want = malloc(n * 4 + 4);
		fill_floats(res, n, 0.9, 2);
		fill_floats(x, n, 0.9, 2);
		float f = round % 4 == 0 ? 0.25f : (float)(unit_rng_double() * 2 - 1);
		if (round % 5 == 1)
			f = 1.0f / 3.0f; /* S2's 1 / size */
		const scd_device_ops_t *devs[2] = {&ops, &scd_device_cpu_ops};
		float *outs[2] = {got, want};
		for (int d = 0; d < 2; d++) {
			float *dr = dev_from(devs[d], res, n * 4),
			      *dx = dev_from(devs[d], x, n * 4);
			devs[d]->sub_scaled(dr, dx, n, f);
			if (n)
				devs[d]->to_host(outs[d], dr, n * 4);
			OK(devs[d]->sync());
			devs[d]->free(dr), devs[d]->free(dx);
		}
		uint64_t fused = 0;
		for (uint64_t i = 0; i < n; i++) {
			float p = x[i] * f, sep = res[i] - p;
			CHECK_MSG(!memcmp(&want[i], &sep, 4), "the cpu's sub_scaled is fused");
			float fm = fmaf(-x[i], f, res[i]);
			fused += memcmp(&fm, &sep, 4) != 0;
		}
		if (n > 10000 && round % 4)
			CHECK_MSG(fused > 0,
				  "no input tells a fused multiply-add apart (n %llu)",
				  (unsigned long long)n);
		CHECK_MSG(n == 0 || !memcmp(got, want, n * 4),
			  "sub_scaled differs (n %llu, f %a)", (unsigned long long)n, f);
		free(res), free(x), free(got), free(want);
	}
}

/* ---- coo_topk ----------------------------------------------------------------------- */

static void run_topk(const scd_device_ops_t *o, const uint32_t *hi, const float *hv, uint64_t n,
		     uint64_t k, op_log_t *l)
{
	uint32_t *idx = dev_from(o, hi, n * 4), *ti = o->alloc(n * 4 + 4);
	float *val = dev_from(o, hv, n * 4), *tv = o->alloc(n * 4 + 4);
	CHECK_TRUE(ti && tv);
	uint64_t kept = o->coo_topk(idx, val, n, k, ti, tv);
	log_u64(l, "coo_topk kept", kept);
	log_dev(l, o, "coo_topk idx", idx, n * 4);
	log_dev(l, o, "coo_topk val", val, n * 4);
	OK(o->sync());
	o->free(idx), o->free(ti), o->free(val), o->free(tv);
	OK(o->sync());
}

UNIT_TEST_TIMEOUT(gpu_kernels_coo_topk, 120)
{
	scd_device_ops_t ops;
	kernels_table(&ops);
	for (int round = 0; round < 80; round++) {
		uint64_t n = round < 4	  ? (uint64_t)round
			     : round < 50 ? 2 + unit_rng_below(300)
					  : 1000 + unit_rng_below(60000);
		uint32_t *hi = malloc(n * 4 + 4);
		float *hv = malloc(n * 4 + 4);
		uint64_t x = unit_rng_below(10);
		for (uint64_t i = 0; i < n; i++) {
			x += 1 + unit_rng_below(3);
			hi[i] = (uint32_t)x;
		}
		int vals = round % 5;
		if (vals == 0) /* all equal magnitude, signs mixed */
			for (uint64_t i = 0; i < n; i++)
				hv[i] = unit_rng_below(2) ? 1.5f : -1.5f;
		else if (vals == 1) /* ties among few values, many (negative) zeros */
			fill_floats(hv, n, 0.3, 2);
		else if (vals == 2) /* keys differing in the last digit only */
			for (uint64_t i = 0; i < n; i++)
				hv[i] = 1.0f + (float)unit_rng_below(64) * 0x1p-23f;
		else
			fill_floats(hv, n, round % 2 ? 1.0 : 0.7, round % 3 ? 4 : 0);
		uint64_t ks[6] = {
		    0, 1, n ? n - 1 : 0, n, n + 1 + unit_rng_below(3), unit_rng_below(n + 1)};
		for (int t = 0; t < 6; t++) {
			op_log_t got = {0}, want = {0};
			run_topk(&ops, hi, hv, n, ks[t], &got);
			run_topk(&scd_device_cpu_ops, hi, hv, n, ks[t], &want);
			char what[64];
			snprintf(what, sizeof what, "values %d, k %llu", vals,
				 (unsigned long long)ks[t]);
			same_logs(&got, &want, what, n);
			CHECK_EQ_INT(*(uint64_t *)want.buf, ks[t] < n ? ks[t] : n);
			log_free(&got), log_free(&want);
		}
		free(hi), free(hv);
	}
}
