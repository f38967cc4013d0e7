/*
 * cuda.c: the cuda slot of the device registry (cuda.h): dlopen of the GPU device's
 * library at the first request, the ops table built from its scg_* functions (scg.h), and
 * the adapters between the two conventions: the GPU's functions all return a status, the
 * ops table's memory and scan ops return none (device.h), so those keep the thread's first
 * failure for sync() to return.
 */
#include "device/cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/exdyna_impl.h"
#include "util/log.h"

/* The daemon's structures pass through unchanged: same layouts. */
#define SCD_SAME_FIELD(a, b, f)                                                                \
	_Static_assert(offsetof(a, f) == offsetof(b, f) &&                                     \
			   sizeof(((a *)0)->f) == sizeof(((b *)0)->f),                         \
		       #a "." #f " differs from " #b)
_Static_assert(sizeof(scg_coo_t) == sizeof(scd_coo_t), "scg_coo_t != scd_coo_t");
SCD_SAME_FIELD(scg_coo_t, scd_coo_t, idx);
SCD_SAME_FIELD(scg_coo_t, scd_coo_t, val);
SCD_SAME_FIELD(scg_coo_t, scd_coo_t, nnz);
SCD_SAME_FIELD(scg_coo_t, scd_coo_t, cap);
_Static_assert(sizeof(scg_hh_cfg_t) == sizeof(scd_hh_cfg_t), "scg_hh_cfg_t != scd_hh_cfg_t");
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, numel);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, nparts);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, nnz_cap);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, nnz_expected);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, r1_factor);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, r2_ratio);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, k);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, seed);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, threads);
SCD_SAME_FIELD(scg_hh_cfg_t, scd_hh_cfg_t, stage_slots);
_Static_assert(sizeof(scg_hh_stats_t) == sizeof(scd_hh_stats_t), "scg_hh_stats_t differs");
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, nnz);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, parallel);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, serial);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, spill);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, probes);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, max_part);
SCD_SAME_FIELD(scg_hh_stats_t, scd_hh_stats_t, imbalance);
_Static_assert(sizeof(scg_sketch_cfg_t) == sizeof(scd_sketch_cfg_t), "sketch cfg differs");
SCD_SAME_FIELD(scg_sketch_cfg_t, scd_sketch_cfg_t, numel);
SCD_SAME_FIELD(scg_sketch_cfg_t, scd_sketch_cfg_t, rows);
SCD_SAME_FIELD(scg_sketch_cfg_t, scd_sketch_cfg_t, cols);
SCD_SAME_FIELD(scg_sketch_cfg_t, scd_sketch_cfg_t, block);
SCD_SAME_FIELD(scg_sketch_cfg_t, scd_sketch_cfg_t, seed);
_Static_assert(sizeof(scg_sparsifier_cfg_t) == sizeof(scd_sparsifier_cfg_t),
	       "sparsifier cfg differs");
SCD_SAME_FIELD(scg_sparsifier_cfg_t, scd_sparsifier_cfg_t, kind);
SCD_SAME_FIELD(scg_sparsifier_cfg_t, scd_sparsifier_cfg_t, numel);
SCD_SAME_FIELD(scg_sparsifier_cfg_t, scd_sparsifier_cfg_t, density);
SCD_SAME_FIELD(scg_sparsifier_cfg_t, scd_sparsifier_cfg_t, threshold);
SCD_SAME_FIELD(scg_sparsifier_cfg_t, scd_sparsifier_cfg_t, seed);
_Static_assert(sizeof(scg_select_stats_t) == sizeof(scd_select_stats_t), "select stats differ");
SCD_SAME_FIELD(scg_select_stats_t, scd_select_stats_t, target);
SCD_SAME_FIELD(scg_select_stats_t, scd_select_stats_t, qualified);
SCD_SAME_FIELD(scg_select_stats_t, scd_select_stats_t, threshold);
SCD_SAME_FIELD(scg_select_stats_t, scd_select_stats_t, passes);
_Static_assert((int)SCG_SPARSIFY_THRESHOLD == (int)SCD_SPARSIFY_THRESHOLD &&
		   (int)SCG_SPARSIFY_TOPK == (int)SCD_SPARSIFY_TOPK &&
		   (int)SCG_SPARSIFY_DGC == (int)SCD_SPARSIFY_DGC &&
		   (int)SCG_SPARSIFY_NATURAL == (int)SCD_SPARSIFY_NATURAL,
	       "sparsifier kinds differ");
_Static_assert(SCG_HH_MAX_K == SCD_HH_MAX_K, "SCG_HH_MAX_K != SCD_HH_MAX_K");
_Static_assert(SCG_SKETCH_MAX_ROWS == SCD_SKETCH_MAX_ROWS, "sketch rows differ");

/* Every op of scd_device_ops_t, for naming the missing ones. */
// clang-format off
#define SCD_DEVICE_OPS(X) \
	X(alloc) X(free) X(clear) X(copy) X(to_host) X(from_host) X(sync) \
	X(count_nonzero) X(dense_to_coo) X(coo_scatter) X(coo_check) X(lower_bound) \
	X(merge_two) X(coo_copy_first) X(coo_scale_copy) X(coo_topk) X(range_counts) \
	X(coo_range_counts) X(residual_add) X(scale) X(gather) X(coo_gather) X(idx_count_runs) \
	X(idx_runs_encode) X(idx_bitmap_encode) X(runs_decode) X(idx_add) \
	X(partmap_acquire) X(partmap_release) X(lower_bounds) X(idx_check_range) \
	X(coo_compact_nonzero) X(coo_merge_sum) X(coo_filter_mod) X(coo_block_runs) \
	X(sub_scaled) X(blocks_count_dense) X(blocks_apply) X(reduce_typed) \
	X(average_typed) X(coo_add_checked) X(residual_drain) X(acc_aside) X(residual_bits) \
	X(bits_set) X(coo_fold_residual) X(sparsifier_create) X(sparsifier_destroy) \
	X(sparsify) X(exdyna_create) X(exdyna_destroy) X(exdyna_select) \
	X(exdyna_select_coo) X(exdyna_update) X(hh_create) X(hh_destroy) \
	X(hh_push_dense) X(hh_push_coo) X(partition_coo) X(coo_encode) X(coo_decode) \
	X(bitmap_encode) X(bitmap_decode) X(hash_bitmap_encode) \
	X(hash_bitmap_encode_seg) X(hash_bitmap_decode_seg) \
	X(hash_bitmap_decode_dense_seg) X(blocks_encode_dense) X(blocks_decode) \
	X(sketch_encode) X(sketch_decode_dense) X(sketch_decode_apply) X(reduce_sum) \
	X(coo_scatter_add) X(coo_scatter_add_part)
// clang-format on

#define SCD_OP_COUNT_(f) +1
/* A new op in device.h must be added above (and, when the GPU has it, below). */
_Static_assert(sizeof(scd_device_ops_t) ==
		   offsetof(scd_device_ops_t, alloc) +
		       (0 SCD_DEVICE_OPS(SCD_OP_COUNT_)) * sizeof(void (*)(void)),
	       "scd_device_ops_t has ops SCD_DEVICE_OPS does not list");
_Static_assert((0 SCD_DEVICE_OPS(SCD_OP_COUNT_)) == SCD_DEVICE_OPS_COUNT,
	       "SCD_DEVICE_OPS_COUNT is stale");

/* ---- adapters ---------------------------------------------------------------------- */

static scd_cuda_fns_t fns;		 /* the functions the adapters call */
static int engine_ordinal;		 /* the GPU the ops work on */
static _Thread_local int thread_ready;	 /* this thread called fns.init */
static _Thread_local sc_status_t sticky; /* first failure since the last sync */

static const char *gpu_error(void)
{
	const char *e = fns.error ? fns.error() : NULL;
	return e && *e ? e : "no detail";
}

/* Each thread's first op makes the device usable on it (its own stream). */
static sc_status_t ready(void)
{
	if (thread_ready)
		return SC_OK;
	sc_status_t st = fns.init ? fns.init(engine_ordinal) : SC_OK;
	if (st == SC_OK)
		thread_ready = 1;
	return st;
}

/* Keeps the first failure of an op without a status, logged where detected. */
static void note(sc_status_t st, const char *op)
{
	if (st == SC_OK || sticky != SC_OK)
		return;
	sticky = st;
	scd_error(SCD_SUB_DEVICE, "cuda: %s failed: %s (%s)", op, gpu_error(),
		  sc_status_name(st));
}

/* An op with a status: its failure is the caller's to report, with this detail. */
static sc_status_t passed(sc_status_t st, const char *op)
{
	if (st != SC_OK)
		scd_debug(SCD_SUB_DEVICE, "cuda: %s: %s (%s)", op, gpu_error(),
			  sc_status_name(st));
	return st;
}

static void *cu_alloc(size_t bytes)
{
	void *p = NULL;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.alloc(bytes, &p);
	if (st != SC_OK) {
		/* out of memory is the caller's to report (NULL); anything else is sticky */
		if (st != SC_ERR_NOMEM)
			note(st, "alloc");
		return NULL;
	}
	return p;
}

static void cu_free(void *p)
{
	if (p)
		note(fns.free(p), "free");
}

static void cu_clear(void *dst, size_t bytes)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.clear(dst, bytes) : st, "clear");
}

static void cu_copy(void *dst, const void *src, size_t bytes)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.copy(dst, src, bytes) : st, "copy");
}

static void cu_to_host(void *host_dst, const void *src, size_t bytes)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.to_host(host_dst, src, bytes) : st, "to_host");
}

static void cu_from_host(void *dst, const void *host_src, size_t bytes)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.from_host(dst, host_src, bytes) : st, "from_host");
}

static sc_status_t cu_sync(void)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sync();
	note(st, "sync");
	st = sticky;
	sticky = SC_OK;
	return st;
}

static sc_status_t cu_hh_create(const scd_hh_cfg_t *cfg, scd_hh_t **hh_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hh_create((const scg_hh_cfg_t *)cfg, (scg_hh_t **)hh_p);
	return passed(st, "hh_create");
}

static void cu_hh_destroy(scd_hh_t *hh)
{
	fns.hh_destroy((scg_hh_t *)hh);
}

static sc_status_t cu_hh_push_dense(scd_hh_t *hh, const float *g, uint64_t numel,
				    scd_coo_t *out, uint64_t *offset, scd_hh_stats_t *stats_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hh_push_dense((scg_hh_t *)hh, g, numel, (scg_coo_t *)out, offset,
				       (scg_hh_stats_t *)stats_p);
	return passed(st, "hh_push_dense");
}

static sc_status_t cu_hh_push_coo(scd_hh_t *hh, const scd_coo_t *in, scd_coo_t *out,
				  uint64_t *offset, scd_hh_stats_t *stats_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hh_push_coo((scg_hh_t *)hh, (const scg_coo_t *)in, (scg_coo_t *)out,
				     offset, (scg_hh_stats_t *)stats_p);
	return passed(st, "hh_push_coo");
}

static sc_status_t cu_blocks_encode_dense(const float *g, uint64_t numel, uint32_t block,
					  void *buf, uint64_t cap_bytes, uint64_t *bytes_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.blocks_encode_dense(g, numel, block, buf, cap_bytes, bytes_p);
	return passed(st, "blocks_encode_dense");
}

static sc_status_t cu_sketch_encode(const scd_sketch_cfg_t *cfg, uint64_t step,
				    const scd_coo_t *src, float *sketch)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sketch_encode((const scg_sketch_cfg_t *)cfg, step,
				       (const scg_coo_t *)src, sketch);
	return passed(st, "sketch_encode");
}

static sc_status_t cu_sketch_decode_dense(const scd_sketch_cfg_t *cfg, uint64_t step,
					  const float *sketch, float *dst)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sketch_decode_dense((const scg_sketch_cfg_t *)cfg, step, sketch, dst);
	return passed(st, "sketch_decode_dense");
}

static void cu_reduce_sum(float *dst, const float *src, uint64_t n)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.reduce_sum(dst, src, n) : st, "reduce_sum");
}

static void cu_reduce_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src,
			    uint64_t n)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.reduce_typed(dtype, op, dst, src, n) : st, "reduce_typed");
}

static void cu_average_typed(sc_dtype_t dtype, void *x, uint64_t n, double divisor)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.average_typed(dtype, x, n, divisor) : st, "average_typed");
}

static void cu_scale(float *d, uint64_t n, float f)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.scale(d, n, f) : st, "scale");
}

static void cu_coo_scatter(float *dst, const scd_coo_t *src)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.coo_scatter(dst, src->idx, src->val, src->nnz) : st,
	     "coo_scatter");
}

static void cu_coo_scatter_add(float *dst, const scd_coo_t *src)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.coo_scatter_add(dst, src->idx, src->val, src->nnz) : st,
	     "coo_scatter_add");
}

/* A failed count is 0, the failure sticky. */
static uint64_t cu_count_nonzero(const float *g, uint64_t n)
{
	uint64_t c = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.count_nonzero(g, n, &c);
	note(st, "count_nonzero");
	return st == SC_OK ? c : 0;
}

static uint64_t cu_dense_to_coo(const float *g, uint64_t n, uint32_t *idx, float *val)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.dense_to_coo(g, n, idx, val, &w);
	note(st, "dense_to_coo");
	return st == SC_OK ? w : 0;
}

static sc_status_t cu_sparsifier_create(const scd_sparsifier_cfg_t *cfg,
					scd_sparsifier_t **sp_p)
{
	if (cfg->kind == SCD_SPARSIFY_BLOCK_TOPK)
		return SC_ERR_UNSUPPORTED; /* block top-K runs on the cpu device only */
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sparsifier_create((const scg_sparsifier_cfg_t *)cfg,
					   (scg_sparsifier_t **)sp_p);
	return passed(st, "sparsifier_create");
}

static void cu_sparsifier_destroy(scd_sparsifier_t *sp)
{
	fns.sparsifier_destroy((scg_sparsifier_t *)sp);
}

static sc_status_t cu_sparsify(scd_sparsifier_t *sp, const float *in, float *residual,
			       uint64_t numel, scd_coo_t *out, scd_select_stats_t *stats_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sparsify((scg_sparsifier_t *)sp, in, residual, numel, (scg_coo_t *)out,
				  (scg_select_stats_t *)stats_p);
	return passed(st, "sparsify");
}

static sc_status_t cu_bitmap_encode(const scd_coo_t *src, uint64_t numel, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.bitmap_encode((const scg_coo_t *)src, numel, buf, cap_bytes, bytes_p);
	return passed(st, "bitmap_encode");
}

static sc_status_t cu_bitmap_decode(const void *buf, uint64_t bytes, uint64_t numel,
				    scd_coo_t *out)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.bitmap_decode(buf, bytes, numel, (scg_coo_t *)out);
	return passed(st, "bitmap_decode");
}

/* ---- listops.cu: a failed position or count is 0 (counts all 0), the failure sticky */

static uint64_t cu_coo_check(const scd_coo_t *coo, uint64_t numel)
{
	uint64_t pos = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_check(coo->idx, coo->nnz, numel, &pos);
	note(st, "coo_check");
	return st == SC_OK ? pos : 0;
}

static uint64_t cu_lower_bound(const uint32_t *a, uint64_t n, uint64_t v)
{
	uint64_t pos = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.lower_bound(a, n, v, &pos);
	note(st, "lower_bound");
	return st == SC_OK ? pos : 0;
}

static void cu_coo_copy_first(uint32_t *oi, float *ov, const scd_coo_t *src)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.coo_copy_first(oi, ov, src->idx, src->val, src->nnz) : st,
	     "coo_copy_first");
}

static void cu_coo_scale_copy(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			      uint64_t n, float share)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.coo_scale_copy(oi, ov, idx, val, n, share) : st,
	     "coo_scale_copy");
}

static void cu_range_counts(const float *g, uint64_t numel, uint32_t P, uint64_t *counts)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.range_counts(g, numel, P, counts);
	note(st, "range_counts");
	if (st != SC_OK)
		memset(counts, 0, 8 * (size_t)P);
}

static void cu_coo_range_counts(const scd_coo_t *o, uint64_t numel, uint32_t P,
				uint64_t *counts)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_range_counts(o->idx, o->val, o->nnz, numel, P, counts);
	note(st, "coo_range_counts");
	if (st != SC_OK)
		memset(counts, 0, 8 * (size_t)P);
}

static uint64_t cu_merge_two(const uint32_t *ai, const float *av, uint64_t an,
			     const scd_coo_t *b, uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.merge_two(ai, av, an, b->idx, b->val, b->nnz, oi, ov, &w);
	note(st, "merge_two");
	return st == SC_OK ? w : 0;
}

static void cu_residual_drain(float *x, float *res, uint64_t n)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.residual_drain(x, res, n) : st, "residual_drain");
}

static void cu_acc_aside(float *acc, const float *x, const float *res, uint64_t n)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.acc_aside(acc, x, res, n) : st, "acc_aside");
}

static uint64_t cu_residual_bits(const float *res, uint64_t n, uint64_t *bits)
{
	uint64_t c = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.residual_bits(res, n, bits, &c);
	note(st, "residual_bits");
	return st == SC_OK ? c : 0;
}

static void cu_bits_set(uint64_t *bits, const uint32_t *idx, uint64_t n)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.bits_set(bits, idx, n) : st, "bits_set");
}

static void cu_residual_add(float *res, const uint32_t *idx, const float *val, uint64_t n,
			    uint32_t *touch, uint64_t *n_touch)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.residual_add(res, idx, val, n, touch, n_touch) : st,
	     "residual_add");
}

static uint64_t cu_coo_add_checked(float *dst, uint64_t numel, const uint32_t *idx,
				   const float *val, uint64_t nnz)
{
	uint64_t bad = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_add_checked(dst, numel, idx, val, nnz, &bad);
	note(st, "coo_add_checked");
	return st == SC_OK ? bad : 0;
}

static uint64_t cu_coo_fold_residual(const scd_coo_t *in, float *res, uint64_t *bits,
				     uint64_t numel, uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_fold_residual(in->idx, in->val, in->nnz, res, bits, numel, oi, ov,
					   &w);
	note(st, "coo_fold_residual");
	return st == SC_OK ? w : 0;
}

static void cu_gather(float *val, float *src, const uint32_t *idx, uint64_t n, int take)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.gather(val, src, idx, n, take) : st, "gather");
}

static void cu_coo_gather(float *val, const uint32_t *idx, uint64_t n, scd_coo_t *list,
			  int take)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.coo_gather(val, idx, n, list->idx, list->val, list->nnz, take)
			 : st,
	     "coo_gather");
}

/* ---- part.cu, and hhash.cu's hash bitmap: the partition map is a host structure (its
 * offsets host memory), so the adapters check partitions and segments against it, as the
 * cpu does, and pass the GPU the slice of the list or the slot range they name. */

_Static_assert(SCG_NUMEL_MAX == SCD_NUMEL_MAX, "SCG_NUMEL_MAX != SCD_NUMEL_MAX");
_Static_assert(sizeof(scg_partfn_t) == sizeof(scd_partfn_t), "scg_partfn_t != scd_partfn_t");
SCD_SAME_FIELD(scg_partfn_t, scd_partfn_t, seed);
SCD_SAME_FIELD(scg_partfn_t, scd_partfn_t, nparts);
_Static_assert(sizeof(scg_partmap_t) == sizeof(scd_partmap_t), "scg_partmap_t differs");
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, numel);
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, seed);
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, fn);
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, offset);
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, list);
SCD_SAME_FIELD(scg_partmap_t, scd_partmap_t, pos);

static sc_status_t cu_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
				      const scd_partmap_t **map_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.partmap_acquire(numel, nparts, seed, (const scg_partmap_t **)map_p);
	return passed(st, "partmap_acquire");
}

static void cu_partmap_release(const scd_partmap_t *map)
{
	if (!map)
		return;
	note(ready(), "partmap_release");
	fns.partmap_release((const scg_partmap_t *)map);
}

static sc_status_t cu_partition_coo(const scd_partfn_t *fn, const scd_coo_t *in, scd_coo_t *out,
				    uint64_t *offset)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.partition_coo((const scg_partfn_t *)fn, (const scg_coo_t *)in,
				       (scg_coo_t *)out, offset);
	return passed(st, "partition_coo");
}

/* A failed count is 0, the failure sticky; so is a partition past the map's. */
static uint64_t cu_coo_scatter_add_part(float *dst, uint64_t *touched, const scd_partmap_t *map,
					uint32_t p, const scd_coo_t *src)
{
	uint64_t bad = 0;
	sc_status_t st = p < map->fn.nparts ? ready() : SC_ERR_INVALID;
	if (st == SC_OK)
		st = fns.coo_scatter_add_part(dst, touched, map->pos, map->numel,
					      scd_partmap_size(map, p), src->idx, src->val,
					      src->nnz, &bad);
	note(st, "coo_scatter_add_part");
	return st == SC_OK ? bad : 0;
}

static sc_status_t cu_coo_encode(const scd_coo_t *src, void *buf, uint64_t cap_bytes,
				 uint64_t *bytes_p)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_encode((const scg_coo_t *)src, buf, cap_bytes, bytes_p);
	return passed(st, "coo_encode");
}

static sc_status_t cu_coo_decode(const void *buf, uint64_t bytes, scd_coo_t *out)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_decode(buf, bytes, (scg_coo_t *)out);
	return passed(st, "coo_decode");
}

/* The cpu's seg_ok (format.c). */
static int seg_ok(const scd_partmap_t *map, const scd_hbseg_t *seg)
{
	return seg->p < map->fn.nparts && seg->lo <= seg->hi &&
	       seg->hi <= scd_partmap_size(map, seg->p);
}

/* The segment's slice of the list (device). */
static const uint32_t *seg_list(const scd_partmap_t *map, const scd_hbseg_t *seg)
{
	return map->list + map->offset[seg->p] + seg->lo;
}

static sc_status_t cu_hash_bitmap_encode(const scd_partmap_t *map, uint32_t p, const float *g,
					 void *buf, uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (p >= map->fn.nparts)
		return SC_ERR_INVALID;
	sc_status_t st = ready();
	if (st == SC_OK)
		st =
		    fns.hash_bitmap_encode(map->list + map->offset[p], scd_partmap_size(map, p),
					   g, buf, cap_bytes, bytes_p);
	return passed(st, "hash_bitmap_encode");
}

static sc_status_t cu_hash_bitmap_encode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
					     float *local, uint64_t *touched, void *buf,
					     uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hash_bitmap_encode_local(local, touched, seg->lo, seg->hi, buf,
						  cap_bytes, bytes_p);
	return passed(st, "hash_bitmap_encode_seg");
}

static sc_status_t cu_hash_bitmap_decode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
					     const void *buf, uint64_t bytes, scd_coo_t *out)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hash_bitmap_decode(seg_list(map, seg), seg->hi - seg->lo, buf, bytes,
					    (scg_coo_t *)out);
	return passed(st, "hash_bitmap_decode_seg");
}

static sc_status_t cu_hash_bitmap_decode_dense_seg(const scd_partmap_t *map,
						   const scd_hbseg_t *seg, const void *buf,
						   uint64_t bytes, float *dst)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.hash_bitmap_decode_dense(seg_list(map, seg), seg->hi - seg->lo, buf,
						  bytes, dst);
	return passed(st, "hash_bitmap_decode_dense_seg");
}

/* ---- exdyna.cu / blocks.cu / sketch.cu (decode_apply): the ExDyna object is exdyna.c's
 * (exdyna_impl.h) with the GPU's selection workspace in dev; its control state and update
 * stay on the host, the selection runs on the GPU from the iteration's plan */
_Static_assert(sizeof(scg_exdyna_plan_t) == sizeof(scd_exdyna_plan_t), "exdyna plan differs");
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, numel);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, lo);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, hi);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, share);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, cap);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, grid_base);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, tkey);
SCD_SAME_FIELD(scg_exdyna_plan_t, scd_exdyna_plan_t, mode);
_Static_assert((int)SCG_EXDYNA_FIXED == (int)SCD_EXDYNA_FIXED &&
		   (int)SCG_EXDYNA_CALIBRATE == (int)SCD_EXDYNA_CALIBRATE &&
		   (int)SCG_EXDYNA_GRID == (int)SCD_EXDYNA_GRID,
	       "exdyna plan modes differ");
_Static_assert(SCG_EXDYNA_GRID_N == 2 * SCD_EXDYNA_GRID_HALF + 1 &&
		   SCG_EXDYNA_GRID_STEP == SCD_EXDYNA_GRID_STEP,
	       "exdyna grid differs");

static sc_status_t cu_exdyna_create(const scd_exdyna_cfg_t *cfg, scd_exdyna_t **ex_p)
{
	scd_exdyna_t *ex = NULL;
	scg_exdyna_t *ws = NULL;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = scd_exdyna_create(cfg, &ex);
	if (st != SC_OK)
		return st;
	if ((st = fns.exdyna_create(&ws)) != SC_OK) {
		scd_exdyna_destroy(ex);
		return passed(st, "exdyna_create");
	}
	ex->dev = ws;
	*ex_p = ex;
	return SC_OK;
}

static void cu_exdyna_destroy(scd_exdyna_t *ex)
{
	if (!ex)
		return;
	fns.exdyna_destroy(ex->dev);
	ex->dev = NULL;
	scd_exdyna_destroy(ex);
}

/* The words the selection measured are in ex->meta; a calibrating one's threshold is
 * recorded as exdyna.c does. */
static sc_status_t cu_exdyna_select(scd_exdyna_t *ex, const float *in, float *residual,
				    scd_coo_t *out, uint64_t *count_p)
{
	if (!ex || !out || (!in && !residual))
		return SC_ERR_INVALID;
	scd_exdyna_plan_t plan;
	scd_exdyna_plan(ex, &plan);
	uint32_t key = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.exdyna_select(ex->dev, (const scg_exdyna_plan_t *)&plan, in, residual,
				       (scg_coo_t *)out, ex->meta, &key);
	if (st != SC_OK)
		return passed(st, "exdyna_select");
	if (plan.mode == SCD_EXDYNA_CALIBRATE)
		scd_exdyna_propose_key(ex, key);
	if (count_p)
		*count_p = out->nnz;
	return SC_OK;
}

static sc_status_t cu_exdyna_select_coo(scd_exdyna_t *ex, const scd_coo_t *in, scd_coo_t *out,
					scd_coo_t *dis, uint64_t *count_p)
{
	if (!ex || !in || !out || !dis || out->cap < in->nnz || dis->cap < in->nnz)
		return SC_ERR_INVALID;
	scd_exdyna_plan_t plan;
	scd_exdyna_plan(ex, &plan);
	uint32_t key = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.exdyna_select_coo(ex->dev, (const scg_exdyna_plan_t *)&plan,
					   (const scg_coo_t *)in, (scg_coo_t *)out,
					   (scg_coo_t *)dis, ex->meta, &key);
	if (st != SC_OK)
		return passed(st, "exdyna_select_coo");
	if (plan.mode == SCD_EXDYNA_CALIBRATE)
		scd_exdyna_propose_key(ex, key);
	if (count_p)
		*count_p = out->nnz;
	return SC_OK;
}

/* A failed count is 0, the failure sticky. */
static uint64_t cu_blocks_count_dense(const float *g, uint64_t numel, uint32_t block)
{
	uint64_t c = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.blocks_count_dense(g, numel, block, &c);
	note(st, "blocks_count_dense");
	return st == SC_OK ? c : 0;
}

static sc_status_t cu_blocks_decode(const void *buf, uint64_t bytes, uint64_t numel,
				    uint32_t block, scd_coo_t *out)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.blocks_decode(buf, bytes, numel, block, (scg_coo_t *)out);
	return passed(st, "blocks_decode");
}

static sc_status_t cu_blocks_apply(const void *buf, uint64_t bytes, uint32_t block,
				   uint64_t len, float *dst, int add)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.blocks_apply(buf, bytes, block, len, dst, add);
	return passed(st, "blocks_apply");
}

static sc_status_t cu_sketch_decode_apply(const scd_sketch_cfg_t *cfg, uint64_t step,
					  const float *sketch, const float *own, float *dst,
					  float *res)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.sketch_decode_apply((const scg_sketch_cfg_t *)cfg, step, sketch, own,
					     dst, res);
	return passed(st, "sketch_decode_apply");
}

/* ---- kernels.cu: a failed count or position is 0 (runs_decode's UINT64_MAX, a failed
 * run table empty with bad 0, failed positions 0), the failure sticky */

_Static_assert(sizeof(scg_run_t) == sizeof(scd_run_t), "scg_run_t != scd_run_t");
SCD_SAME_FIELD(scg_run_t, scd_run_t, block);
SCD_SAME_FIELD(scg_run_t, scd_run_t, lo);
SCD_SAME_FIELD(scg_run_t, scd_run_t, hi);

static uint64_t cu_idx_count_runs(const uint32_t *idx, uint64_t n)
{
	uint64_t c = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.idx_count_runs(idx, n, &c);
	note(st, "idx_count_runs");
	return st == SC_OK ? c : 0;
}

static void cu_idx_runs_encode(const uint32_t *idx, uint64_t n, void *runs)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.idx_runs_encode(idx, n, runs) : st, "idx_runs_encode");
}

static uint64_t cu_idx_bitmap_encode(const uint32_t *idx, uint64_t n, uint64_t lo,
				     uint64_t span, uint64_t *words)
{
	uint64_t pos = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.idx_bitmap_encode(idx, n, lo, span, words, &pos);
	note(st, "idx_bitmap_encode");
	return st == SC_OK ? pos : 0;
}

static uint64_t cu_runs_decode(const void *runs, uint64_t nruns, uint64_t numel, uint64_t max,
			       uint32_t *idx)
{
	uint64_t n = UINT64_MAX;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.runs_decode(runs, nruns, numel, max, idx, &n);
	note(st, "runs_decode");
	return st == SC_OK ? n : UINT64_MAX;
}

static void cu_idx_add(uint32_t *idx, uint64_t n, uint32_t add)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.idx_add(idx, n, add) : st, "idx_add");
}

static void cu_lower_bounds(const uint32_t *a, const uint64_t *off, uint32_t nlists,
			    const uint64_t *v, uint32_t nv, uint64_t *pos)
{
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.lower_bounds(a, off, nlists, v, nv, pos);
	note(st, "lower_bounds");
	if (st != SC_OK)
		memset(pos, 0, 8 * (size_t)nlists * nv);
}

static uint64_t cu_idx_check_range(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi)
{
	uint64_t pos = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.idx_check_range(idx, n, lo, hi, &pos);
	note(st, "idx_check_range");
	return st == SC_OK ? pos : 0;
}

static uint64_t cu_coo_compact_nonzero(const uint32_t *idx, const float *val, uint64_t n,
				       uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_compact_nonzero(idx, val, n, oi, ov, &w);
	note(st, "coo_compact_nonzero");
	return st == SC_OK ? w : 0;
}

static uint64_t cu_coo_merge_sum(const uint32_t *ai, const float *av, uint64_t an,
				 const uint32_t *bi, const float *bv, uint64_t bn, uint32_t *oi,
				 float *ov)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_merge_sum(ai, av, an, bi, bv, bn, oi, ov, &w);
	note(st, "coo_merge_sum");
	return st == SC_OK ? w : 0;
}

static uint64_t cu_coo_filter_mod(const uint32_t *idx, const float *val, uint64_t n, uint32_t d,
				  uint32_t t, uint32_t *oi, float *ov)
{
	uint64_t w = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_filter_mod(idx, val, n, d, t, oi, ov, &w);
	note(st, "coo_filter_mod");
	return st == SC_OK ? w : 0;
}

static uint32_t cu_coo_block_runs(const uint32_t *idx, uint64_t n, const uint64_t *bnd,
				  uint32_t nb, uint64_t numel, uint32_t max, scd_run_t *runs,
				  uint64_t *bad)
{
	uint32_t nr = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_block_runs(idx, n, bnd, nb, numel, max, (scg_run_t *)runs, bad,
					&nr);
	note(st, "coo_block_runs");
	if (st != SC_OK) {
		*bad = 0;
		return 0;
	}
	return nr;
}

static void cu_sub_scaled(float *res, const float *x, uint64_t n, float f)
{
	sc_status_t st = ready();
	note(st == SC_OK ? fns.sub_scaled(res, x, n, f) : st, "sub_scaled");
}

static uint64_t cu_coo_topk(uint32_t *idx, float *val, uint64_t n, uint64_t k,
			    uint32_t *tmp_idx, float *tmp_val)
{
	uint64_t kept = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.coo_topk(idx, val, n, k, tmp_idx, tmp_val, &kept);
	note(st, "coo_topk");
	return st == SC_OK ? kept : 0;
}

unsigned scd_cuda_ops_fill(const scd_cuda_fns_t *f, scd_device_ops_t *ops, char *missing,
			   size_t cap)
{
	fns = *f;
	memset(ops, 0, sizeof *ops);
	ops->name = "cuda";
	ops->kind = SCD_DEVICE_CUDA;
	/* memory: all or nothing (sync needs the rest) */
	if (f->alloc && f->free && f->clear && f->copy && f->to_host && f->from_host &&
	    f->sync) {
		ops->alloc = cu_alloc;
		ops->free = cu_free;
		ops->clear = cu_clear;
		ops->copy = cu_copy;
		ops->to_host = cu_to_host;
		ops->from_host = cu_from_host;
		ops->sync = cu_sync;
	}
	if (f->hh_create && f->hh_destroy && f->hh_push_dense && f->hh_push_coo) {
		ops->hh_create = cu_hh_create;
		ops->hh_destroy = cu_hh_destroy;
		ops->hh_push_dense = cu_hh_push_dense;
		ops->hh_push_coo = cu_hh_push_coo;
	}
	if (f->blocks_encode_dense)
		ops->blocks_encode_dense = cu_blocks_encode_dense;
	if (f->sketch_encode)
		ops->sketch_encode = cu_sketch_encode;
	if (f->sketch_decode_dense)
		ops->sketch_decode_dense = cu_sketch_decode_dense;
	if (f->reduce_sum)
		ops->reduce_sum = cu_reduce_sum;
	if (f->reduce_typed)
		ops->reduce_typed = cu_reduce_typed;
	if (f->average_typed)
		ops->average_typed = cu_average_typed;
	if (f->scale)
		ops->scale = cu_scale;
	if (f->coo_scatter)
		ops->coo_scatter = cu_coo_scatter;
	if (f->coo_scatter_add)
		ops->coo_scatter_add = cu_coo_scatter_add;
	if (f->count_nonzero)
		ops->count_nonzero = cu_count_nonzero;
	if (f->dense_to_coo)
		ops->dense_to_coo = cu_dense_to_coo;
	if (f->sparsifier_create && f->sparsifier_destroy && f->sparsify) {
		ops->sparsifier_create = cu_sparsifier_create;
		ops->sparsifier_destroy = cu_sparsifier_destroy;
		ops->sparsify = cu_sparsify;
	}
	if (f->bitmap_encode)
		ops->bitmap_encode = cu_bitmap_encode;
	if (f->bitmap_decode)
		ops->bitmap_decode = cu_bitmap_decode;
	if (f->coo_check)
		ops->coo_check = cu_coo_check;
	if (f->lower_bound)
		ops->lower_bound = cu_lower_bound;
	if (f->coo_copy_first)
		ops->coo_copy_first = cu_coo_copy_first;
	if (f->coo_scale_copy)
		ops->coo_scale_copy = cu_coo_scale_copy;
	if (f->range_counts)
		ops->range_counts = cu_range_counts;
	if (f->coo_range_counts)
		ops->coo_range_counts = cu_coo_range_counts;
	if (f->merge_two)
		ops->merge_two = cu_merge_two;
	if (f->residual_drain)
		ops->residual_drain = cu_residual_drain;
	if (f->acc_aside)
		ops->acc_aside = cu_acc_aside;
	if (f->residual_bits)
		ops->residual_bits = cu_residual_bits;
	if (f->bits_set)
		ops->bits_set = cu_bits_set;
	if (f->residual_add)
		ops->residual_add = cu_residual_add;
	if (f->coo_add_checked)
		ops->coo_add_checked = cu_coo_add_checked;
	if (f->coo_fold_residual)
		ops->coo_fold_residual = cu_coo_fold_residual;
	if (f->gather)
		ops->gather = cu_gather;
	if (f->coo_gather)
		ops->coo_gather = cu_coo_gather;

	/* part.cu, and hhash.cu's hash bitmap */
	if (f->partmap_acquire && f->partmap_release) {
		ops->partmap_acquire = cu_partmap_acquire;
		ops->partmap_release = cu_partmap_release;
	}
	if (f->partition_coo)
		ops->partition_coo = cu_partition_coo;
	if (f->coo_scatter_add_part)
		ops->coo_scatter_add_part = cu_coo_scatter_add_part;
	if (f->coo_encode)
		ops->coo_encode = cu_coo_encode;
	if (f->coo_decode)
		ops->coo_decode = cu_coo_decode;
	if (f->hash_bitmap_encode)
		ops->hash_bitmap_encode = cu_hash_bitmap_encode;
	if (f->hash_bitmap_encode_local)
		ops->hash_bitmap_encode_seg = cu_hash_bitmap_encode_seg;
	if (f->hash_bitmap_decode)
		ops->hash_bitmap_decode_seg = cu_hash_bitmap_decode_seg;
	if (f->hash_bitmap_decode_dense)
		ops->hash_bitmap_decode_dense_seg = cu_hash_bitmap_decode_dense_seg;

	/* exdyna.cu / blocks.cu / sketch.cu (decode_apply) */
	if (f->exdyna_create && f->exdyna_destroy && f->exdyna_select && f->exdyna_select_coo) {
		ops->exdyna_create = cu_exdyna_create;
		ops->exdyna_destroy = cu_exdyna_destroy;
		ops->exdyna_select = cu_exdyna_select;
		ops->exdyna_select_coo = cu_exdyna_select_coo;
		ops->exdyna_update = scd_exdyna_update; /* host state only */
	}
	if (f->blocks_count_dense)
		ops->blocks_count_dense = cu_blocks_count_dense;
	if (f->blocks_decode)
		ops->blocks_decode = cu_blocks_decode;
	if (f->blocks_apply)
		ops->blocks_apply = cu_blocks_apply;
	if (f->sketch_decode_apply)
		ops->sketch_decode_apply = cu_sketch_decode_apply;

	/* kernels.cu */
	if (f->idx_count_runs)
		ops->idx_count_runs = cu_idx_count_runs;
	if (f->idx_runs_encode)
		ops->idx_runs_encode = cu_idx_runs_encode;
	if (f->idx_bitmap_encode)
		ops->idx_bitmap_encode = cu_idx_bitmap_encode;
	if (f->runs_decode)
		ops->runs_decode = cu_runs_decode;
	if (f->idx_add)
		ops->idx_add = cu_idx_add;
	if (f->lower_bounds)
		ops->lower_bounds = cu_lower_bounds;
	if (f->idx_check_range)
		ops->idx_check_range = cu_idx_check_range;
	if (f->coo_compact_nonzero)
		ops->coo_compact_nonzero = cu_coo_compact_nonzero;
	if (f->coo_merge_sum)
		ops->coo_merge_sum = cu_coo_merge_sum;
	if (f->coo_filter_mod)
		ops->coo_filter_mod = cu_coo_filter_mod;
	if (f->coo_block_runs)
		ops->coo_block_runs = cu_coo_block_runs;
	if (f->sub_scaled)
		ops->sub_scaled = cu_sub_scaled;
	if (f->coo_topk)
		ops->coo_topk = cu_coo_topk;

	unsigned n_missing = 0;
	size_t len = 0;
	if (missing && cap)
		missing[0] = '\0';
#define SCD_OP_MISSING_(op)                                                                    \
	if (!ops->op) {                                                                        \
		if (missing && len + 1 < cap) {                                                \
			int w = snprintf(missing + len, cap - len, "%s%s",                     \
					 n_missing ? ", " : "", #op);                          \
			len = w < 0 ? cap : len + (size_t)w;                                   \
		}                                                                              \
		n_missing++;                                                                   \
	}
	SCD_DEVICE_OPS(SCD_OP_MISSING_)
#undef SCD_OP_MISSING_
	if (missing && len >= cap && cap >= 4)
		strcpy(missing + cap - 4, "...");
	return n_missing;
}

/* ---- loading ------------------------------------------------------------------------ */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static scd_device_ops_t cuda_ops;
static sc_status_t load_status = SC_ERR_UNSUPPORTED;
static char load_reason[512];

/* The library: $SPARSECOMM_CUDA_LIB, else ../lib/ next to this executable. */
static void library_path(char *path, size_t cap)
{
	const char *env = getenv("SPARSECOMM_CUDA_LIB");
	if (env && *env) {
		snprintf(path, cap, "%s", env);
		return;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		snprintf(path, cap, "libsparsecomm-cuda.so");
		return;
	}
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, cap, "%s/../lib/libsparsecomm-cuda.so", exe);
}

void scd_cuda_fns_resolve(void *lib, scd_cuda_fns_t *f)
{
	memset(f, 0, sizeof *f);
#define SCD_SYM_(field, sym) *(void **)(&f->field) = dlsym(lib, sym)
	SCD_SYM_(error, "scg_error");
	SCD_SYM_(backend, "scg_backend");
	SCD_SYM_(lost, "scg_lost");
	SCD_SYM_(init, "scg_init");
	SCD_SYM_(device_count, "scg_device_count");
	SCD_SYM_(device_uuid, "scg_device_uuid");
	SCD_SYM_(copy_peer, "scg_copy_peer");
	SCD_SYM_(stream_follow, "scg_stream_follow");
	SCD_SYM_(stream_set, "scg_stream_set");
	SCD_SYM_(stream_get, "scg_stream_get");
	SCD_SYM_(stream_query, "scg_stream_query");
	SCD_SYM_(alloc, "scg_alloc");
	SCD_SYM_(free, "scg_free");
	SCD_SYM_(clear, "scg_clear");
	SCD_SYM_(copy, "scg_copy");
	SCD_SYM_(to_host, "scg_to_host");
	SCD_SYM_(from_host, "scg_from_host");
	SCD_SYM_(sync, "scg_sync");
	SCD_SYM_(hh_create, "scg_hh_create");
	SCD_SYM_(hh_destroy, "scg_hh_destroy");
	SCD_SYM_(hh_push_dense, "scg_hh_push_dense");
	SCD_SYM_(hh_push_coo, "scg_hh_push_coo");
	SCD_SYM_(blocks_encode_dense, "scg_blocks_encode_dense");
	SCD_SYM_(sketch_encode, "scg_sketch_encode");
	SCD_SYM_(sketch_decode_dense, "scg_sketch_decode_dense");
	SCD_SYM_(reduce_sum, "scg_reduce_sum");
	SCD_SYM_(reduce_typed, "scg_reduce_typed");
	SCD_SYM_(average_typed, "scg_average_typed");
	SCD_SYM_(scale, "scg_scale");
	SCD_SYM_(coo_scatter, "scg_coo_scatter");
	SCD_SYM_(coo_scatter_add, "scg_coo_scatter_add");
	SCD_SYM_(count_nonzero, "scg_count_nonzero");
	SCD_SYM_(dense_to_coo, "scg_dense_to_coo");
	SCD_SYM_(sparsifier_create, "scg_sparsifier_create");
	SCD_SYM_(sparsifier_destroy, "scg_sparsifier_destroy");
	SCD_SYM_(sparsify, "scg_sparsify");
	SCD_SYM_(bitmap_encode, "scg_bitmap_encode");
	SCD_SYM_(bitmap_decode, "scg_bitmap_decode");
	SCD_SYM_(coo_check, "scg_coo_check");
	SCD_SYM_(lower_bound, "scg_lower_bound");
	SCD_SYM_(coo_copy_first, "scg_coo_copy_first");
	SCD_SYM_(coo_scale_copy, "scg_coo_scale_copy");
	SCD_SYM_(range_counts, "scg_range_counts");
	SCD_SYM_(coo_range_counts, "scg_coo_range_counts");
	SCD_SYM_(merge_two, "scg_merge_two");
	SCD_SYM_(residual_drain, "scg_residual_drain");
	SCD_SYM_(acc_aside, "scg_acc_aside");
	SCD_SYM_(residual_bits, "scg_residual_bits");
	SCD_SYM_(bits_set, "scg_bits_set");
	SCD_SYM_(residual_add, "scg_residual_add");
	SCD_SYM_(coo_add_checked, "scg_coo_add_checked");
	SCD_SYM_(coo_fold_residual, "scg_coo_fold_residual");
	SCD_SYM_(gather, "scg_gather");
	SCD_SYM_(coo_gather, "scg_coo_gather");
	/* part.cu, and hhash.cu's hash bitmap */
	SCD_SYM_(partmap_acquire, "scg_partmap_acquire");
	SCD_SYM_(partmap_release, "scg_partmap_release");
	SCD_SYM_(partition_coo, "scg_partition_coo");
	SCD_SYM_(coo_scatter_add_part, "scg_coo_scatter_add_part");
	SCD_SYM_(coo_encode, "scg_coo_encode");
	SCD_SYM_(coo_decode, "scg_coo_decode");
	SCD_SYM_(hash_bitmap_encode, "scg_hash_bitmap_encode");
	SCD_SYM_(hash_bitmap_encode_local, "scg_hash_bitmap_encode_local");
	SCD_SYM_(hash_bitmap_decode, "scg_hash_bitmap_decode");
	SCD_SYM_(hash_bitmap_decode_dense, "scg_hash_bitmap_decode_dense");
	/* exdyna.cu / blocks.cu / sketch.cu (decode_apply) */
	SCD_SYM_(exdyna_create, "scg_exdyna_create");
	SCD_SYM_(exdyna_destroy, "scg_exdyna_destroy");
	SCD_SYM_(exdyna_select, "scg_exdyna_select");
	SCD_SYM_(exdyna_select_coo, "scg_exdyna_select_coo");
	SCD_SYM_(blocks_count_dense, "scg_blocks_count_dense");
	SCD_SYM_(blocks_decode, "scg_blocks_decode");
	SCD_SYM_(blocks_apply, "scg_blocks_apply");
	SCD_SYM_(sketch_decode_apply, "scg_sketch_decode_apply");
	/* kernels.cu */
	SCD_SYM_(idx_count_runs, "scg_idx_count_runs");
	SCD_SYM_(idx_runs_encode, "scg_idx_runs_encode");
	SCD_SYM_(idx_bitmap_encode, "scg_idx_bitmap_encode");
	SCD_SYM_(runs_decode, "scg_runs_decode");
	SCD_SYM_(idx_add, "scg_idx_add");
	SCD_SYM_(lower_bounds, "scg_lower_bounds");
	SCD_SYM_(idx_check_range, "scg_idx_check_range");
	SCD_SYM_(coo_compact_nonzero, "scg_coo_compact_nonzero");
	SCD_SYM_(coo_merge_sum, "scg_coo_merge_sum");
	SCD_SYM_(coo_filter_mod, "scg_coo_filter_mod");
	SCD_SYM_(coo_block_runs, "scg_coo_block_runs");
	SCD_SYM_(sub_scaled, "scg_sub_scaled");
	SCD_SYM_(coo_topk, "scg_coo_topk");
	/* ipc.cu */
	SCD_SYM_(ipc_alloc, "scg_ipc_alloc");
	SCD_SYM_(ipc_free, "scg_ipc_free");
	SCD_SYM_(ipc_event_create, "scg_ipc_event_create");
	SCD_SYM_(ipc_event_destroy, "scg_ipc_event_destroy");
	SCD_SYM_(event_record, "scg_event_record");
	SCD_SYM_(stream_wait_event, "scg_stream_wait_event");
	SCD_SYM_(host_alloc, "scg_host_alloc");
	SCD_SYM_(host_free, "scg_host_free");
#undef SCD_SYM_
}

static void load(void)
{
	char path[PATH_MAX + 64];
	library_path(path, sizeof path);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(load_reason, sizeof load_reason, "cannot load %.200s: %.280s", path,
			 e ? e : "unknown error");
		goto out;
	}
	scd_cuda_fns_t f;
	scd_cuda_fns_resolve(lib, &f);
	if (!f.error || !f.init) {
		snprintf(load_reason, sizeof load_reason, "%.400s lacks scg_error or scg_init",
			 path);
		goto out;
	}
	sc_status_t st = f.init(engine_ordinal);
	if (st != SC_OK) {
		if (engine_ordinal)
			snprintf(load_reason, sizeof load_reason,
				 "the engine GPU cuda:%d (cuda_device): %.400s", engine_ordinal,
				 f.error());
		else
			snprintf(load_reason, sizeof load_reason, "%s", f.error());
		goto out;
	}
	char missing[256];
	unsigned n = scd_cuda_ops_fill(&f, &cuda_ops, missing, sizeof missing);
	if (n) {
		snprintf(load_reason, sizeof load_reason, "%u of %u ops not built yet (%s)", n,
			 SCD_DEVICE_OPS_COUNT, missing);
		goto out;
	}
	__atomic_store_n(&load_status, SC_OK, __ATOMIC_RELEASE); /* scd_cuda_lost reads it */
	load_reason[0] = '\0';
	int gpus = 0;
	if (f.device_count && f.device_count(&gpus) == SC_OK)
		scd_info(SCD_SUB_DEVICE, "cuda: %d GPUs served, the engine on cuda:%d (%s)",
			 gpus, engine_ordinal, path);
	else
		scd_info(SCD_SUB_DEVICE, "cuda: the engine GPU cuda:%d ready (%s)",
			 engine_ordinal, path);
	return;
out:
	/* the library stays loaded: CUDA's runtime does not always unload cleanly */
	scd_debug(SCD_SUB_DEVICE, "cuda: unavailable (%s)", load_reason);
}

/* ---- sharing with trainers (cuda.h, scd_cuda_ipc_t) ---------------------------------- */

void scd_cuda_engine_set(int ordinal)
{
	engine_ordinal = ordinal;
}

int scd_cuda_engine(void)
{
	return engine_ordinal;
}

static sc_status_t ipc_devices(int *n)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.device_count(n);
}

const char *scd_cuda_uuid_text(const unsigned char *u, char *buf)
{
	snprintf(buf, SCD_CUDA_UUID_TEXT,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
		 u[12], u[13], u[14], u[15]);
	return buf;
}

/* The served GPUs' UUIDs, asked once (a GPU's UUID never changes). */
static pthread_mutex_t uuid_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char uuids[SCG_MAX_DEVICES][16];
static int uuids_n = -1;

static sc_status_t ipc_find(const unsigned char *uuid, int *ordinal)
{
	sc_status_t st = ready();
	pthread_mutex_lock(&uuid_mu);
	if (st == SC_OK && uuids_n < 0) {
		int n = 0;
		st = fns.device_count(&n);
		for (int i = 0; st == SC_OK && i < n && i < SCG_MAX_DEVICES; i++)
			st = fns.device_uuid(i, uuids[i]);
		if (st == SC_OK)
			uuids_n = n < SCG_MAX_DEVICES ? n : SCG_MAX_DEVICES;
	}
	int found = -1;
	for (int i = 0; st == SC_OK && i < uuids_n && found < 0; i++)
		if (!memcmp(uuids[i], uuid, 16))
			found = i;
	pthread_mutex_unlock(&uuid_mu);
	if (st != SC_OK)
		return st;
	if (found < 0)
		return SC_ERR_NOT_FOUND;
	*ordinal = found;
	return SC_OK;
}

/* The calling thread works on ordinal for one call, then on the engine GPU again. */
static sc_status_t on_gpu(int ordinal)
{
	sc_status_t st = ready();
	return st != SC_OK || ordinal == engine_ordinal ? st : fns.init(ordinal);
}

static sc_status_t off_gpu(int ordinal, sc_status_t st)
{
	if (ordinal == engine_ordinal)
		return st;
	sc_status_t back = fns.init(engine_ordinal);
	return st != SC_OK ? st : back;
}

static sc_status_t ipc_alloc(int ordinal, size_t bytes, void **p, void *handle)
{
	sc_status_t st = on_gpu(ordinal);
	return off_gpu(ordinal, st != SC_OK ? st : fns.ipc_alloc(bytes, p, handle));
}
static sc_status_t ipc_free(int ordinal, void *p)
{
	sc_status_t st = on_gpu(ordinal);
	return off_gpu(ordinal, st != SC_OK ? st : fns.ipc_free(p));
}
static sc_status_t ipc_event_create(int ordinal, void **ev, void *handle)
{
	sc_status_t st = on_gpu(ordinal);
	return off_gpu(ordinal, st != SC_OK ? st : fns.ipc_event_create(ev, handle));
}
static sc_status_t ipc_event_destroy(int ordinal, void *ev)
{
	sc_status_t st = on_gpu(ordinal);
	return off_gpu(ordinal, st != SC_OK ? st : fns.ipc_event_destroy(ev));
}
/* On the event's GPU, behind what the engine GPU's stream holds so far. */
static sc_status_t ipc_event_record(int ordinal, void *ev)
{
	sc_status_t st = on_gpu(ordinal);
	if (st == SC_OK && ordinal != engine_ordinal)
		st = fns.stream_follow(engine_ordinal);
	return off_gpu(ordinal, st != SC_OK ? st : fns.event_record(ev));
}
static sc_status_t ipc_stream_wait_event(void *ev)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.stream_wait_event(ev);
}
static sc_status_t ipc_copy_peer(void *dst, int dst_ordinal, const void *src, int src_ordinal,
				 size_t bytes)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.copy_peer(dst, dst_ordinal, src, src_ordinal, bytes);
}
static sc_status_t ipc_host_alloc(size_t bytes, void **p)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.host_alloc(bytes, p);
}
static sc_status_t ipc_host_free(void *p)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.host_free(p);
}

/* Through the functions the adapters call, so that staging and the table they stage
 * for always belong to the same GPU library. */
void *scd_cuda_stage_alloc(size_t bytes)
{
	void *p = NULL;
	if (fns.host_alloc && fns.host_free) {
		sc_status_t st = ready();
		if (st == SC_OK)
			st = fns.host_alloc(bytes, &p);
		if (st != SC_OK) {
			scd_warn(SCD_SUB_DEVICE, "cuda: page-locked staging of %zu bytes: %s",
				 bytes, gpu_error());
			return NULL;
		}
		return p;
	}
	return malloc(bytes ? bytes : 1);
}

void scd_cuda_stage_free(void *p)
{
	if (!p)
		return;
	if (fns.host_alloc && fns.host_free)
		fns.host_free(p);
	else
		free(p);
}

static const scd_cuda_ipc_t cuda_ipc = {
    .devices = ipc_devices,
    .find = ipc_find,
    .alloc = ipc_alloc,
    .free = ipc_free,
    .event_create = ipc_event_create,
    .event_destroy = ipc_event_destroy,
    .event_record = ipc_event_record,
    .stream_wait_event = ipc_stream_wait_event,
    .copy_peer = ipc_copy_peer,
    .host_alloc = ipc_host_alloc,
    .host_free = ipc_host_free,
    .error = gpu_error,
};

sc_status_t scd_cuda_ipc_get(const scd_cuda_ipc_t **ipc_p)
{
	const scd_device_ops_t *ops;
	sc_status_t st = scd_cuda_device_get(&ops);
	if (st != SC_OK)
		return st;
	if (!fns.ipc_alloc || !fns.ipc_free || !fns.ipc_event_create ||
	    !fns.ipc_event_destroy || !fns.event_record || !fns.stream_wait_event ||
	    !fns.host_alloc || !fns.host_free || !fns.device_count || !fns.copy_peer ||
	    !fns.stream_follow || !fns.device_uuid)
		return SC_ERR_UNSUPPORTED;
	*ipc_p = &cuda_ipc;
	return SC_OK;
}

static sc_status_t queue_stream(void **stream)
{
	sc_status_t st = ready();
	return st != SC_OK ? st : fns.stream_get(stream);
}

static sc_status_t queue_done(void)
{
	int done = 0;
	sc_status_t st = ready();
	if (st == SC_OK)
		st = fns.stream_query(&done);
	return st != SC_OK ? st : done ? SC_OK : SC_IN_PROGRESS;
}

static const scd_cuda_queue_t cuda_queue = {
    .stream = queue_stream,
    .done = queue_done,
    .error = gpu_error,
};

sc_status_t scd_cuda_queue_get(const scd_cuda_queue_t **q_p)
{
	const scd_device_ops_t *ops;
	sc_status_t st = scd_cuda_device_get(&ops);
	if (st != SC_OK)
		return st;
	if (!fns.stream_get || !fns.stream_query)
		return SC_ERR_UNSUPPORTED;
	*q_p = &cuda_queue;
	return SC_OK;
}

sc_status_t scd_cuda_device_get(const scd_device_ops_t **ops_p)
{
	pthread_once(&load_once, load);
	if (load_status != SC_OK)
		return load_status;
	*ops_p = &cuda_ops;
	return SC_OK;
}

const char *scd_cuda_backend(void)
{
	return load_status == SC_OK && fns.backend ? fns.backend() : "?";
}

const char *scd_cuda_unavailable_reason(void)
{
	return load_reason;
}

const char *scd_cuda_lost(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static int logged;
	const char *lost = __atomic_load_n(&load_status, __ATOMIC_ACQUIRE) == SC_OK && fns.lost
			       ? fns.lost()
			       : NULL;
	if (!lost)
		return NULL;
	pthread_mutex_lock(&mu);
	if (!logged)
		scd_error(SCD_SUB_DEVICE,
			  "cuda: the GPU is lost: %s; every GPU job fails from now on, cpu "
			  "tensors are still served (restart the daemon to use the GPU again)",
			  lost);
	logged = 1;
	pthread_mutex_unlock(&mu);
	return lost;
}
