/*
 * device.h: the compute device behind the engine and the schemes: one ops table per
 * backend (cpu here; the registry's cuda slot takes a GPU device, which fills the same
 * table and is tested against the cpu one), filled with designated initializers and reached
 * through a registry indexed by scd_device_kind_t. A backend that is not built or whose init
 * failed reports SC_ERR_UNSUPPORTED from scd_device_get().
 *
 * Pointers passed to a device's ops live in that device's memory (host memory for cpu),
 * except where an argument says "host". The schemes and the engine never dereference
 * tensor or workspace memory themselves: they call these ops (and the transport's
 * exchanges, which name device buffers), reading back to the host only the few scalars
 * their control flow needs (to_host). So a device whose memory the host cannot touch (a
 * GPU) serves every scheme; tests/unit/test_device_guard.c proves it with a device whose
 * memory is inaccessible between op calls.
 *
 * Ops that cannot fail on the cpu return no status: a device whose ops can fail (a GPU's
 * launches) keeps its first failure and returns it from sync(), which the scheme layer
 * calls before every exchange and at the end of every run (a GPU device also waits there
 * for its queued work, so a transport that stages through host memory reads finished
 * data).
 *
 * Objects with workspaces (sparsifier, hierarchical hash, ExDyna, ZEN's partition map) are
 * created by the device once per tensor or buffer and reused every step; the per-step ops
 * allocate nothing. Such an object is a host structure: its control state (ExDyna's
 * partitions and threshold, a partition map's offsets) is host memory that the schemes
 * read through its accessors (exdyna.h, partition.h), and its data arrays are the
 * device's memory.
 */
#ifndef SCD_DEVICE_DEVICE_H
#define SCD_DEVICE_DEVICE_H

#include "device/exdyna.h"
#include "device/format.h"
#include "device/hhash.h"
#include "device/listops.h"
#include "device/scheme_kernels.h"
#include "device/select.h"
#include "device/sketch.h"

typedef enum { SCD_DEVICE_CPU = 0, SCD_DEVICE_CUDA, SCD_DEVICE_COUNT } scd_device_kind_t;

typedef struct scd_device_ops {
	const char *name;
	/* the registry's slot the table fills (a test's wrapper of a table keeps the wrapped
	 * one's): what the registry's device-level answers below go by */
	scd_device_kind_t kind;

	/* memory (listops.h): alloc returns zeroed memory, ready to use without page faults
	 * (NULL when out of memory); copy does not overlap; to_host / from_host move bytes
	 * between the device and host memory */
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	void (*clear)(void *dst, size_t bytes);
	void (*copy)(void *dst, const void *src, size_t bytes);
	void (*to_host)(void *host_dst, const void *src, size_t bytes);
	void (*from_host)(void *dst, const void *host_src, size_t bytes);
	/* waits for queued work; the first failure of an op since the last sync */
	sc_status_t (*sync)(void);

	/* scans and lists (listops.h) */
	uint64_t (*count_nonzero)(const float *g, uint64_t n);
	uint64_t (*dense_to_coo)(const float *g, uint64_t n, uint32_t *idx, float *val);
	void (*coo_scatter)(float *dst, const scd_coo_t *src);
	uint64_t (*coo_check)(const scd_coo_t *coo, uint64_t numel);
	uint64_t (*lower_bound)(const uint32_t *a, uint64_t n, uint64_t v);
	uint64_t (*merge_two)(const uint32_t *ai, const float *av, uint64_t an,
			      const scd_coo_t *b, uint32_t *oi, float *ov);
	void (*coo_copy_first)(uint32_t *oi, float *ov, const scd_coo_t *src);
	void (*coo_scale_copy)(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			       uint64_t n, float share);
	uint64_t (*coo_topk)(uint32_t *idx, float *val, uint64_t n, uint64_t k,
			     uint32_t *tmp_idx, float *tmp_val);
	void (*range_counts)(const float *g, uint64_t numel, uint32_t P, uint64_t *host_counts);
	void (*coo_range_counts)(const scd_coo_t *o, uint64_t numel, uint32_t P,
				 uint64_t *host_counts);
	void (*residual_add)(float *res, const uint32_t *idx, const float *val, uint64_t n,
			     uint32_t *touch, uint64_t *host_n_touch);
	void (*scale)(float *d, uint64_t n, float f);
	void (*gather)(float *val, float *src, const uint32_t *idx, uint64_t n, int take);
	void (*coo_gather)(float *val, const uint32_t *idx, uint64_t n, scd_coo_t *list,
			   int take);

	/* -- scheme infrastructure (scheme.c, messages, AGsparse, HC) -- */
	/* the bodies of the sparse messages (msgops.h); the scheme composes the headers */
	uint64_t (*idx_count_runs)(const uint32_t *idx, uint64_t n);
	void (*idx_runs_encode)(const uint32_t *idx, uint64_t n, void *runs);
	uint64_t (*idx_bitmap_encode)(const uint32_t *idx, uint64_t n, uint64_t lo,
				      uint64_t span, uint64_t *words);
	uint64_t (*runs_decode)(const void *runs, uint64_t nruns, uint64_t numel, uint64_t max,
				uint32_t *idx);
	void (*idx_add)(uint32_t *idx, uint64_t n, uint32_t add);

	/* -- per-scheme kernels (Balanced Parallelism, OmniReduce, SparDL, S2, ExDyna) -- */
	/* ZEN's partition lists (partition.h) in this device's memory, cached and shared:
	 * offset stays in host memory (the schemes' control flow reads it), list and pos are
	 * device arrays; release what acquire gave */
	sc_status_t (*partmap_acquire)(uint64_t numel, uint32_t nparts, uint64_t seed,
				       const scd_partmap_t **map_p);
	void (*partmap_release)(const scd_partmap_t *map);
	/* lists and ranges (scheme_kernels.h): off, v, pos, bnd, runs and bad are host
	 * memory */
	void (*lower_bounds)(const uint32_t *a, const uint64_t *off, uint32_t nlists,
			     const uint64_t *v, uint32_t nv, uint64_t *pos);
	uint64_t (*idx_check_range)(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi);
	uint64_t (*coo_compact_nonzero)(const uint32_t *idx, const float *val, uint64_t n,
					uint32_t *oi, float *ov);
	uint64_t (*coo_merge_sum)(const uint32_t *ai, const float *av, uint64_t an,
				  const uint32_t *bi, const float *bv, uint64_t bn,
				  uint32_t *oi, float *ov);
	uint64_t (*coo_filter_mod)(const uint32_t *idx, const float *val, uint64_t n,
				   uint32_t d, uint32_t t, uint32_t *oi, float *ov);
	uint32_t (*coo_block_runs)(const uint32_t *idx, uint64_t n, const uint64_t *bnd,
				   uint32_t nb, uint64_t numel, uint32_t max, scd_run_t *runs,
				   uint64_t *bad);
	void (*sub_scaled)(float *res, const float *x, uint64_t n, float f);
	/* OmniReduce's blocks (format.h) */
	uint64_t (*blocks_count_dense)(const float *g, uint64_t numel, uint32_t block);
	sc_status_t (*blocks_apply)(const void *buf, uint64_t bytes, uint32_t block,
				    uint64_t len, float *dst, int add);

	/* -- engine (local sums of any dtype, averaging, copies to and from trainers) -- */

	/* The engine's ops on a fused buffer and the trainers' tensors (reduce.h, fold.h);
	 * with the memory ops above (clear, copy) and sparsifier_* below, all it runs on
	 * tensor data. dtype is an sc_dtype_t; an unknown one does nothing. */
	/* dst[i] = dst[i] op src[i] for n elements of dtype (reduce.h: sum for SC_OP_SUM and
	 * SC_OP_AVERAGE, min, max, product; integers wrap around) */
	void (*reduce_typed)(sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src,
			     uint64_t n);
	/* x[i] /= divisor for n elements of dtype: float32 multiplies by the rounded
	 * 1 / divisor, float64 divides, integers divide truncating toward zero */
	void (*average_typed)(sc_dtype_t dtype, void *x, uint64_t n, double divisor);
	/* dst[idx[j]] += val[j] in order for the entries with idx[j] < numel; returns how
	 * many were skipped */
	uint64_t (*coo_add_checked)(float *dst, uint64_t numel, const uint32_t *idx,
				    const float *val, uint64_t nnz);
	/* x[i] += res[i], res[i] = 0 for n floats */
	void (*residual_drain)(float *x, float *res, uint64_t n);
	/* acc[i] = x[i] + res[i] for n floats, x and res only read */
	void (*acc_aside)(float *acc, const float *x, const float *res, uint64_t n);
	/* bits[(n + 63) / 64] set where res[0, n) is non-zero, clear elsewhere; returns the
	 * number set */
	uint64_t (*residual_bits)(const float *res, uint64_t n, uint64_t *bits);
	/* sets the bits of idx[0, n) */
	void (*bits_set)(uint64_t *bits, const uint32_t *idx, uint64_t n);
	/* (oi, ov) = in with the residual at the set bits folded in (fold.h); zeroes the
	 * residual there and clears the bits; returns the entries written */
	uint64_t (*coo_fold_residual)(const scd_coo_t *in, float *res, uint64_t *bits,
				      uint64_t numel, uint32_t *oi, float *ov);

	/* sparsifiers with error feedback (select.h) */
	sc_status_t (*sparsifier_create)(const scd_sparsifier_cfg_t *cfg,
					 scd_sparsifier_t **sp_p);
	void (*sparsifier_destroy)(scd_sparsifier_t *sp);
	sc_status_t (*sparsify)(scd_sparsifier_t *sp, const float *in, float *residual,
				uint64_t numel, scd_coo_t *out, scd_select_stats_t *stats_p);

	/* ExDyna (exdyna.h) */
	sc_status_t (*exdyna_create)(const scd_exdyna_cfg_t *cfg, scd_exdyna_t **ex_p);
	void (*exdyna_destroy)(scd_exdyna_t *ex);
	sc_status_t (*exdyna_select)(scd_exdyna_t *ex, const float *in, float *residual,
				     scd_coo_t *out, uint64_t *count_p);
	sc_status_t (*exdyna_select_coo)(scd_exdyna_t *ex, const scd_coo_t *in, scd_coo_t *out,
					 scd_coo_t *dis, uint64_t *count_p);
	sc_status_t (*exdyna_update)(scd_exdyna_t *ex, const uint64_t *meta);

	/* ZEN hierarchical hashing (hhash.h) */
	sc_status_t (*hh_create)(const scd_hh_cfg_t *cfg, scd_hh_t **hh_p);
	void (*hh_destroy)(scd_hh_t *hh);
	sc_status_t (*hh_push_dense)(scd_hh_t *hh, const float *g, uint64_t numel,
				     scd_coo_t *out, uint64_t *offset, scd_hh_stats_t *stats_p);
	sc_status_t (*hh_push_coo)(scd_hh_t *hh, const scd_coo_t *in, scd_coo_t *out,
				   uint64_t *offset, scd_hh_stats_t *stats_p);
	/* the same partitions of an ascending COO list, kept ascending (partition.h) */
	sc_status_t (*partition_coo)(const scd_partfn_t *fn, const scd_coo_t *in,
				     scd_coo_t *out, uint64_t *offset);

	/* formats (format.h) */
	sc_status_t (*coo_encode)(const scd_coo_t *src, void *buf, uint64_t cap_bytes,
				  uint64_t *bytes_p);
	sc_status_t (*coo_decode)(const void *buf, uint64_t bytes, scd_coo_t *out);
	sc_status_t (*bitmap_encode)(const scd_coo_t *src, uint64_t numel, void *buf,
				     uint64_t cap_bytes, uint64_t *bytes_p);
	sc_status_t (*bitmap_decode)(const void *buf, uint64_t bytes, uint64_t numel,
				     scd_coo_t *out);
	sc_status_t (*hash_bitmap_encode)(const scd_partmap_t *map, uint32_t p, const float *g,
					  void *buf, uint64_t cap_bytes, uint64_t *bytes_p);
	sc_status_t (*hash_bitmap_encode_seg)(const scd_partmap_t *map, const scd_hbseg_t *seg,
					      float *local, uint64_t *touched, void *buf,
					      uint64_t cap_bytes, uint64_t *bytes_p);
	sc_status_t (*hash_bitmap_decode_seg)(const scd_partmap_t *map, const scd_hbseg_t *seg,
					      const void *buf, uint64_t bytes, scd_coo_t *out);
	sc_status_t (*hash_bitmap_decode_dense_seg)(const scd_partmap_t *map,
						    const scd_hbseg_t *seg, const void *buf,
						    uint64_t bytes, float *dst);
	sc_status_t (*blocks_encode_dense)(const float *g, uint64_t numel, uint32_t block,
					   void *buf, uint64_t cap_bytes, uint64_t *bytes_p);
	sc_status_t (*blocks_decode)(const void *buf, uint64_t bytes, uint64_t numel,
				     uint32_t block, scd_coo_t *out);

	/* S2 sketch (sketch.h) */
	sc_status_t (*sketch_encode)(const scd_sketch_cfg_t *cfg, uint64_t step,
				     const scd_coo_t *src, float *sketch);
	sc_status_t (*sketch_decode_dense)(const scd_sketch_cfg_t *cfg, uint64_t step,
					   const float *sketch, float *dst);
	sc_status_t (*sketch_decode_apply)(const scd_sketch_cfg_t *cfg, uint64_t step,
					   const float *sketch, const float *own, float *dst,
					   float *res);

	/* reductions */
	void (*reduce_sum)(float *dst, const float *src, uint64_t n);
	void (*coo_scatter_add)(float *dst, const scd_coo_t *src);
	uint64_t (*coo_scatter_add_part)(float *dst, uint64_t *touched,
					 const scd_partmap_t *map, uint32_t p,
					 const scd_coo_t *src);
} scd_device_ops_t;

extern const scd_device_ops_t scd_device_cpu_ops;

const char *scd_device_kind_name(scd_device_kind_t kind);
/* The ops of a device kind, or SC_ERR_UNSUPPORTED when it is not available here. */
sc_status_t scd_device_get(scd_device_kind_t kind, const scd_device_ops_t **ops_p);

/* Whether the host reads and writes dev's memory directly (the cpu device): a transport
 * that moves host memory then needs no staging. */
int scd_device_host_memory(const scd_device_ops_t *dev);
/* Host memory to stage dev's buffers through such a transport: page-locked for the GPU
 * (so its copies run at full speed), plain otherwise. NULL when out of memory. */
void *scd_device_stage_alloc(const scd_device_ops_t *dev, size_t bytes);
void scd_device_stage_free(const scd_device_ops_t *dev, void *p);

/*
 * A device's places and state, by kind (the registry's answers; the cpu device's are
 * trivial: one place, the host, never lost). A GPU device serves every GPU of its node
 * and runs its ops on one of them, its home (the engine GPU, the cuda_device setting):
 * its kernels read only memory there, and a buffer on another GPU is copied over first
 * (stage.h). What it shares with trainers' processes is in share.h.
 */
/* Sets kind's home GPU before the first scd_device_get(kind); the cpu device ignores it. */
void scd_device_home_set(scd_device_kind_t kind, int ordinal);
/* kind's home GPU (0 for the cpu device). */
int scd_device_home(scd_device_kind_t kind);
/* Whether kind's kernels read memory on GPU ordinal where it lies: the home's (always on
 * the cpu device). */
int scd_device_at_home(scd_device_kind_t kind, int ordinal);
/* NULL while kind works (always, for the cpu device); once a sticky fault has left every
 * later call of the GPU failing, its text, for good (logged once, when first seen): GPU
 * work then fails at once with it, and cpu tensors are still served. Any thread. */
const char *scd_device_lost(scd_device_kind_t kind);
/* What built kind's library ("cuda", or "host" for the GPU device's host build; "?"
 * before it is loaded; "cpu"). */
const char *scd_device_backend(scd_device_kind_t kind);
/* Why kind is unavailable ("" when it is available, or before its first
 * scd_device_get). */
const char *scd_device_unavailable_reason(scd_device_kind_t kind);

#endif
