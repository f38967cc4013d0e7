/*
 * cuda.h: the cuda slot of the device registry (device.h). The GPU device lives in
 * build/lib/libsparsecomm-cuda.so (gpu/, scg.h), which this daemon loads at run time only
 * when scd_device_get(SCD_DEVICE_CUDA) is first asked: nothing CUDA-related is linked into
 * the daemon, and a machine without the library, a driver or a GPU reports
 * SC_ERR_UNSUPPORTED (reason in scd_cuda_unavailable_reason(), logged once at debug
 * level). The table is offered only when every op is built on the GPU.
 *
 * One daemon serves every GPU of its node: a cuda tensor's memory and events live on the
 * GPU its trainer registered it on (scd_cuda_ipc_t), and the engine's work runs on one of
 * them, the engine GPU (the cuda_device setting, scd_cuda_engine_set): every op of the
 * table, and every thread's first op, works there.
 */
#ifndef SCD_DEVICE_CUDA_H
#define SCD_DEVICE_CUDA_H

#include "device/device.h"
#include "device/share.h"
#include "scg.h"

/* The GPU device's entry points (scg.h) that the ops table is built from; NULL where the
 * library does not have one (yet). */
typedef struct scd_cuda_fns {
	const char *(*error)(void);
	const char *(*backend)(void);
	const char *(*lost)(void);
	sc_status_t (*init)(int ordinal);
	sc_status_t (*device_count)(int *n_host);
	sc_status_t (*device_uuid)(int ordinal, unsigned char *uuid_host);
	sc_status_t (*copy_peer)(void *dst, int dst_ordinal, const void *src, int src_ordinal,
				 size_t bytes);
	sc_status_t (*stream_follow)(int ordinal);
	sc_status_t (*stream_set)(void *stream);
	sc_status_t (*alloc)(size_t bytes, void **p_host);
	sc_status_t (*free)(void *p);
	sc_status_t (*clear)(void *dst, size_t bytes);
	sc_status_t (*copy)(void *dst, const void *src, size_t bytes);
	sc_status_t (*to_host)(void *dst_host, const void *src, size_t bytes);
	sc_status_t (*from_host)(void *dst, const void *src_host, size_t bytes);
	sc_status_t (*sync)(void);
	/* hhash.cu / sketch.cu */
	sc_status_t (*hh_create)(const scg_hh_cfg_t *cfg_host, scg_hh_t **hh_host);
	void (*hh_destroy)(scg_hh_t *hh_host);
	sc_status_t (*hh_push_dense)(scg_hh_t *hh_host, const float *g, uint64_t numel,
				     scg_coo_t *out_host, uint64_t *offset_host,
				     scg_hh_stats_t *stats_host);
	sc_status_t (*hh_push_coo)(scg_hh_t *hh_host, const scg_coo_t *in_host,
				   scg_coo_t *out_host, uint64_t *offset_host,
				   scg_hh_stats_t *stats_host);
	sc_status_t (*blocks_encode_dense)(const float *g, uint64_t numel, uint32_t block,
					   void *buf, uint64_t cap_bytes, uint64_t *bytes_host);
	sc_status_t (*sketch_encode)(const scg_sketch_cfg_t *cfg_host, uint64_t step,
				     const scg_coo_t *src_host, float *sketch);
	sc_status_t (*sketch_decode_dense)(const scg_sketch_cfg_t *cfg_host, uint64_t step,
					   const float *sketch, float *dst);
	/* reduce.cu / select.cu */
	sc_status_t (*reduce_sum)(float *dst, const float *src, uint64_t n);
	sc_status_t (*reduce_typed)(sc_dtype_t dtype, sc_reduce_op_t op, void *dst,
				    const void *src, uint64_t n);
	sc_status_t (*average_typed)(sc_dtype_t dtype, void *x, uint64_t n, double divisor);
	sc_status_t (*scale)(float *d, uint64_t n, float f);
	sc_status_t (*coo_scatter)(float *dst, const uint32_t *idx, const float *val,
				   uint64_t nnz);
	sc_status_t (*coo_scatter_add)(float *dst, const uint32_t *idx, const float *val,
				       uint64_t nnz);
	sc_status_t (*count_nonzero)(const float *g, uint64_t n, uint64_t *count_host);
	sc_status_t (*dense_to_coo)(const float *g, uint64_t n, uint32_t *idx, float *val,
				    uint64_t *nnz_host);
	sc_status_t (*sparsifier_create)(const scg_sparsifier_cfg_t *cfg_host,
					 scg_sparsifier_t **sp_host);
	void (*sparsifier_destroy)(scg_sparsifier_t *sp_host);
	sc_status_t (*sparsify)(scg_sparsifier_t *sp_host, const float *in, float *residual,
				uint64_t numel, scg_coo_t *out_host,
				scg_select_stats_t *stats_host);
	sc_status_t (*bitmap_encode)(const scg_coo_t *src_host, uint64_t numel, void *buf,
				     uint64_t cap_bytes, uint64_t *bytes_host);
	sc_status_t (*bitmap_decode)(const void *buf, uint64_t bytes, uint64_t numel,
				     scg_coo_t *out_host);
	/* listops.cu */
	sc_status_t (*coo_check)(const uint32_t *idx, uint64_t nnz, uint64_t numel,
				 uint64_t *pos_host);
	sc_status_t (*lower_bound)(const uint32_t *a, uint64_t n, uint64_t v,
				   uint64_t *pos_host);
	sc_status_t (*coo_copy_first)(uint32_t *oi, float *ov, const uint32_t *idx,
				      const float *val, uint64_t nnz);
	sc_status_t (*coo_scale_copy)(uint32_t *oi, float *ov, const uint32_t *idx,
				      const float *val, uint64_t n, float share);
	sc_status_t (*range_counts)(const float *g, uint64_t numel, uint32_t P,
				    uint64_t *counts_host);
	sc_status_t (*coo_range_counts)(const uint32_t *idx, const float *val, uint64_t nnz,
					uint64_t numel, uint32_t P, uint64_t *counts_host);
	sc_status_t (*merge_two)(const uint32_t *ai, const float *av, uint64_t an,
				 const uint32_t *bi, const float *bv, uint64_t bn, uint32_t *oi,
				 float *ov, uint64_t *nnz_host);
	sc_status_t (*residual_drain)(float *x, float *res, uint64_t n);
	sc_status_t (*acc_aside)(float *acc, const float *x, const float *res, uint64_t n);
	sc_status_t (*residual_bits)(const float *res, uint64_t n, uint64_t *bits,
				     uint64_t *count_host);
	sc_status_t (*bits_set)(uint64_t *bits, const uint32_t *idx, uint64_t n);
	sc_status_t (*residual_add)(float *res, const uint32_t *idx, const float *val,
				    uint64_t n, uint32_t *touch, uint64_t *n_touch_host);
	sc_status_t (*coo_add_checked)(float *dst, uint64_t numel, const uint32_t *idx,
				       const float *val, uint64_t nnz, uint64_t *bad_host);
	sc_status_t (*coo_fold_residual)(const uint32_t *in_idx, const float *in_val,
					 uint64_t in_nnz, float *res, uint64_t *bits,
					 uint64_t numel, uint32_t *oi, float *ov,
					 uint64_t *nnz_host);
	sc_status_t (*gather)(float *val, float *src, const uint32_t *idx, uint64_t n,
			      int take);
	sc_status_t (*coo_gather)(float *val, const uint32_t *idx, uint64_t n,
				  const uint32_t *list_idx, float *list_val, uint64_t list_nnz,
				  int take);
	/* part.cu, and hhash.cu's hash bitmap */
	sc_status_t (*partmap_acquire)(uint64_t numel, uint32_t nparts, uint64_t seed,
				       const scg_partmap_t **map_host);
	void (*partmap_release)(const scg_partmap_t *map_host);
	sc_status_t (*partition_coo)(const scg_partfn_t *fn_host, const scg_coo_t *in_host,
				     scg_coo_t *out_host, uint64_t *offset_host);
	sc_status_t (*coo_scatter_add_part)(float *dst, uint64_t *touched, const uint32_t *pos,
					    uint64_t numel, uint64_t slots, const uint32_t *idx,
					    const float *val, uint64_t nnz, uint64_t *bad_host);
	sc_status_t (*coo_encode)(const scg_coo_t *src_host, void *buf, uint64_t cap_bytes,
				  uint64_t *bytes_host);
	sc_status_t (*coo_decode)(const void *buf, uint64_t bytes, scg_coo_t *out_host);
	sc_status_t (*hash_bitmap_encode)(const uint32_t *I, uint64_t n, const float *g,
					  void *buf, uint64_t cap_bytes, uint64_t *bytes_host);
	sc_status_t (*hash_bitmap_encode_local)(float *local, uint64_t *touched, uint64_t lo,
						uint64_t hi, void *buf, uint64_t cap_bytes,
						uint64_t *bytes_host);
	sc_status_t (*hash_bitmap_decode)(const uint32_t *I, uint64_t n, const void *buf,
					  uint64_t bytes, scg_coo_t *out_host);
	sc_status_t (*hash_bitmap_decode_dense)(const uint32_t *I, uint64_t n, const void *buf,
						uint64_t bytes, float *dst);
	/* exdyna.cu / blocks.cu / sketch.cu (decode_apply) */
	sc_status_t (*exdyna_create)(scg_exdyna_t **ws_host);
	void (*exdyna_destroy)(scg_exdyna_t *ws_host);
	sc_status_t (*exdyna_select)(scg_exdyna_t *ws_host, const scg_exdyna_plan_t *plan_host,
				     const float *in, float *residual, scg_coo_t *out_host,
				     uint64_t *meta_host, uint32_t *key_host);
	sc_status_t (*exdyna_select_coo)(scg_exdyna_t *ws_host,
					 const scg_exdyna_plan_t *plan_host,
					 const scg_coo_t *in_host, scg_coo_t *out_host,
					 scg_coo_t *dis_host, uint64_t *meta_host,
					 uint32_t *key_host);
	sc_status_t (*blocks_count_dense)(const float *g, uint64_t numel, uint32_t block,
					  uint64_t *count_host);
	sc_status_t (*blocks_decode)(const void *buf, uint64_t bytes, uint64_t numel,
				     uint32_t block, scg_coo_t *out_host);
	sc_status_t (*blocks_apply)(const void *buf, uint64_t bytes, uint32_t block,
				    uint64_t len, float *dst, int add);
	sc_status_t (*sketch_decode_apply)(const scg_sketch_cfg_t *cfg_host, uint64_t step,
					   const float *sketch, const float *own, float *dst,
					   float *res);
	/* kernels.cu */
	sc_status_t (*idx_count_runs)(const uint32_t *idx, uint64_t n, uint64_t *count_host);
	sc_status_t (*idx_runs_encode)(const uint32_t *idx, uint64_t n, void *runs);
	sc_status_t (*idx_bitmap_encode)(const uint32_t *idx, uint64_t n, uint64_t lo,
					 uint64_t span, uint64_t *words, uint64_t *pos_host);
	sc_status_t (*runs_decode)(const void *runs, uint64_t nruns, uint64_t numel,
				   uint64_t max, uint32_t *idx, uint64_t *n_host);
	sc_status_t (*idx_add)(uint32_t *idx, uint64_t n, uint32_t add);
	sc_status_t (*lower_bounds)(const uint32_t *a, const uint64_t *off_host,
				    uint32_t nlists, const uint64_t *v_host, uint32_t nv,
				    uint64_t *pos_host);
	sc_status_t (*idx_check_range)(const uint32_t *idx, uint64_t n, uint64_t lo,
				       uint64_t hi, uint64_t *pos_host);
	sc_status_t (*coo_compact_nonzero)(const uint32_t *idx, const float *val, uint64_t n,
					   uint32_t *oi, float *ov, uint64_t *nnz_host);
	sc_status_t (*coo_merge_sum)(const uint32_t *ai, const float *av, uint64_t an,
				     const uint32_t *bi, const float *bv, uint64_t bn,
				     uint32_t *oi, float *ov, uint64_t *nnz_host);
	sc_status_t (*coo_filter_mod)(const uint32_t *idx, const float *val, uint64_t n,
				      uint32_t d, uint32_t t, uint32_t *oi, float *ov,
				      uint64_t *nnz_host);
	sc_status_t (*coo_block_runs)(const uint32_t *idx, uint64_t n, const uint64_t *bnd_host,
				      uint32_t nb, uint64_t numel, uint32_t max,
				      scg_run_t *runs_host, uint64_t *bad_host,
				      uint32_t *nr_host);
	sc_status_t (*sub_scaled)(float *res, const float *x, uint64_t n, float f);
	sc_status_t (*coo_topk)(uint32_t *idx, float *val, uint64_t n, uint64_t k,
				uint32_t *tmp_idx, float *tmp_val, uint64_t *kept_host);
	/* ipc.cu (not ops of the table: scd_cuda_ipc_t) */
	sc_status_t (*ipc_alloc)(size_t bytes, void **p_host, void *handle_host);
	sc_status_t (*ipc_free)(void *p);
	sc_status_t (*ipc_event_create)(void **ev_host, void *handle_host);
	sc_status_t (*ipc_event_destroy)(void *ev);
	sc_status_t (*event_record)(void *ev);
	sc_status_t (*stream_wait_event)(void *ev);
	sc_status_t (*host_alloc)(size_t bytes, void **p_host);
	sc_status_t (*host_free)(void *p_host);
	/* mem.cu (not ops of the table: scd_cuda_queue_t) */
	sc_status_t (*stream_get)(void **stream_host);
	sc_status_t (*stream_query)(int *done_host);
} scd_cuda_fns_t;

/* What the daemon shares with trainers on the GPU (gpu/ipc.cu): the device-level table
 * (share.h), which this slot fills. */
typedef scd_device_share_t scd_cuda_ipc_t;

/* The GPU device's sharing functions, once scd_device_get(SCD_DEVICE_CUDA) has succeeded
 * (SC_ERR_UNSUPPORTED before, or when the library lacks them; the reason in
 * scd_cuda_unavailable_reason()). */
sc_status_t scd_cuda_ipc_get(const scd_cuda_ipc_t **ipc_p);

/*
 * The calling thread's stream, for a library that queues its own work behind the
 * device's and waits for it by polling (the nccl transport): stream gives the native
 * handle (NULL where the GPU library has no streams), done says without waiting whether
 * everything queued on it has finished (SC_IN_PROGRESS while not, a failure's status
 * with the text in error()). Each makes the device usable on the calling thread first.
 */
typedef struct scd_cuda_queue {
	sc_status_t (*stream)(void **stream);
	sc_status_t (*done)(void);
	const char *(*error)(void);
} scd_cuda_queue_t;

/* The queue functions, once scd_device_get(SCD_DEVICE_CUDA) has succeeded
 * (SC_ERR_UNSUPPORTED before, or when the library lacks them). */
sc_status_t scd_cuda_queue_get(const scd_cuda_queue_t **q_p);
/* Staging memory for the table the adapters call (scd_device_stage_alloc): page-locked
 * where the GPU device has it, else malloc; NULL when out of memory. */
void *scd_cuda_stage_alloc(size_t bytes);
void scd_cuda_stage_free(void *p);

/* A GPU's UUID as nvidia-smi spells it, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", in
 * buf[SCD_CUDA_UUID_TEXT]. */
#define SCD_CUDA_UUID_TEXT SCD_DEVICE_UUID_TEXT
const char *scd_cuda_uuid_text(const unsigned char *uuid, char *buf);

/* The number of ops in scd_device_ops_t. */
#define SCD_DEVICE_OPS_COUNT 75u

/* Fills *ops (name "cuda") from fns, with adapters: ops without a status keep the
 * calling thread's first failure, logged once with the GPU device's text, and sync()
 * returns and clears it; each thread's first op calls fns->init on the engine GPU. Ops fns
 * cannot serve stay NULL. Returns how many are missing, naming them (comma-separated,
 * truncated) in missing[cap] when missing is not NULL. The adapters call through one set of
 * functions per process: the last one given here. For tests (the host build's functions wired
 * into a table) and for scd_device_get. */
unsigned scd_cuda_ops_fill(const scd_cuda_fns_t *fns, scd_device_ops_t *ops, char *missing,
			   size_t cap);

/* The GPU device's functions in lib (a dlopen handle of libsparsecomm-cuda.so) by their
 * scg_* names; a field stays NULL where lib lacks the function. */
void scd_cuda_fns_resolve(void *lib, scd_cuda_fns_t *fns);

/* The engine GPU: the ordinal every op and every thread's first op works on (0 unless
 * set), before the first scd_device_get(SCD_DEVICE_CUDA); and the one in use. */
void scd_cuda_engine_set(int ordinal);
int scd_cuda_engine(void);

/* The registry's cuda slot (device.c): loads and checks the GPU device once. */
sc_status_t scd_cuda_device_get(const scd_device_ops_t **ops_p);
/* The loaded GPU library's build ("cuda", or "host" for the host build), "?" before. */
const char *scd_cuda_backend(void);
/* Why the cuda device is unavailable ("" before the first scd_device_get or when it is
 * available). */
const char *scd_cuda_unavailable_reason(void);
/* NULL while the GPU works (or was never loaded); once a sticky CUDA fault (scg_lost) has
 * left every later GPU call failing, its text, for good: the daemon fails GPU work at once
 * with it and keeps serving cpu tensors (logged once, when first seen). Any thread. */
const char *scd_cuda_lost(void);

#endif
