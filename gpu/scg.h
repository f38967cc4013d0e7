/*
 * scg.h: the GPU device: plain C entry points of the CUDA C++ sources in gpu/, each
 * returning sc_status_t. daemon/device/cuda.c builds the cuda device's ops table from
 * them (docs/design.md, devices).
 *
 * One source, two builds (gpu/portable.cuh): nvcc builds it for the GPU (the shared object
 * the daemon loads at run time, only when a GPU buffer is used), and the host compiler
 * builds it with Thrust's OpenMP backend, so that every machine tests the same algorithms
 * against the cpu device (tests/unit/test_gpu_*.c).
 *
 * Conventions:
 *   - every pointer argument is device memory unless its name ends in _host;
 *   - results the caller's control flow needs come back through _host output parameters
 *     (the call then waits for its work); everything else is queued on the calling
 *     thread's stream (scg_stream_set) and is final after scg_sync();
 *   - a failure returns a negative sc_status_t and leaves its text in scg_error()
 *     (CUDA's error string, with the function that saw it); nothing is logged here.
 */
#ifndef SCG_H
#define SCG_H

#include <stddef.h>
#include <stdint.h>

#include "scg_types.h"
#include "sparsecomm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The last failure's text on this thread ("" if none). */
const char *scg_error(void);
/* Which build this is: "cuda" or "host". */
const char *scg_backend(void);
/* NULL while the GPU works; once a sticky fault (an illegal address, a launch failure, a
 * device-side assert: what leaves the process's CUDA context failing every later call)
 * has been seen by any call, the first such fault's text, for good. The host build
 * injects one for tests: with $SCG_HOST_FAULT = N, its N-th scg_sync reports an illegal
 * address, and every later call that touches device memory fails with it. */
const char *scg_lost(void);

/* ---- devices, memory and streams (mem.cu) ---- */
/* The most devices one process uses. */
#define SCG_MAX_DEVICES 64
/* The devices this build serves: those the CUDA driver sees (at most SCG_MAX_DEVICES), or
 * in the host build $SCG_HOST_DEVICES emulated ones (1 when unset). */
sc_status_t scg_device_count(int *n_host);
/* Device ordinal's 16-byte UUID (cudaDeviceProp.uuid, what cuDeviceGetUuid_v2 gives any
 * process for the same GPU, whatever its CUDA_VISIBLE_DEVICES), so that processes that
 * number the node's GPUs differently can name one to each other. */
sc_status_t scg_device_uuid(int ordinal, unsigned char *uuid_host);
/* Makes ordinal this thread's current device: what follows allocates there, and queues
 * its work on the thread's stream of that device (created at the first call for it).
 * Each thread starts on device 0; a call per switch. */
sc_status_t scg_init(int ordinal);
/* Names the stream of the current device this thread queues its work on. */
sc_status_t scg_stream_set(void *stream);
sc_status_t scg_alloc(size_t bytes, void **p_host); /* zeroed, on the current device */
sc_status_t scg_free(void *p);
/* A kernel reads and writes only memory of the current device: the ops below and in the
 * sections after this one take their device memory there (the host build checks it). */
sc_status_t scg_clear(void *dst, size_t bytes);
sc_status_t scg_copy(void *dst, const void *src, size_t bytes);
/* Copies between devices (or within one), queued on the current device's stream: direct
 * where peer access is possible (enabled at the first copy between two devices), staged
 * by the driver where it is not. */
sc_status_t scg_copy_peer(void *dst, int dst_ordinal, const void *src, int src_ordinal,
			  size_t bytes);
/* Makes the current device's stream wait for what this thread queued so far on its stream
 * of device ordinal (an event of that device's, recorded there). */
sc_status_t scg_stream_follow(int ordinal);
/* The host build only: the emulated device whose allocation (scg_alloc, scg_ipc_alloc) p
 * points into, -1 for memory of no device. */
int scg_host_owner(const void *p);
sc_status_t scg_to_host(void *dst_host, const void *src, size_t bytes);
sc_status_t scg_from_host(void *dst, const void *src_host, size_t bytes);
sc_status_t scg_sync(void);
/* The calling thread's stream as an opaque handle (a cudaStream_t; NULL in the host build),
 * for a library that queues its own work behind the device's (NCCL), and whether every
 * piece of work queued on it so far has finished (*done_host), without waiting. */
sc_status_t scg_stream_get(void **stream_host);
sc_status_t scg_stream_query(int *done_host);

/* ---- memory and events shared with trainers (ipc.cu) ---- */
/* A CUDA IPC handle: cudaIpcMemHandle_t / cudaIpcEventHandle_t (64 bytes). The host build
 * stands in for CUDA IPC with POSIX shared memory (scg_host_ipc.h), so the protocol runs
 * end to end on machines without a GPU. */
#define SCG_IPC_HANDLE_BYTES 64
/* A CUDA IPC handle maps the whole driver allocation its pointer lies in, and cudaMalloc
 * carves small requests out of shared blocks of this size: every allocation exported is
 * rounded up to a multiple of it, so that it is a block of its own and a process given its
 * handle can never reach memory the daemon allocated for anything else. */
#define SCG_IPC_GRANULARITY_BYTES ((size_t)2 << 20)
/* What scg_ipc_alloc allocates for bytes: rounded up to SCG_IPC_GRANULARITY_BYTES (at
 * least one granule); 0 when that overflows. */
static inline size_t scg_ipc_bytes(size_t bytes)
{
	size_t g = SCG_IPC_GRANULARITY_BYTES;
	if (bytes > (size_t)-1 - (g - 1))
		return 0;
	return bytes ? (bytes + g - 1) / g * g : g;
}
/* bytes of zeroed device memory the daemon owns, and its handle for other processes;
 * scg_ipc_bytes(bytes) are allocated and exported */
sc_status_t scg_ipc_alloc(size_t bytes, void **p_host, void *handle_host);
sc_status_t scg_ipc_free(void *p);
/* An interprocess event (disable-timing) and its handle. */
sc_status_t scg_ipc_event_create(void **ev_host, void *handle_host);
sc_status_t scg_ipc_event_destroy(void *ev);
/* Records ev on the calling thread's stream; makes that stream wait on ev's last record
 * (the host build checks that a record happened since this process's previous wait: a
 * trainer that submitted without recording its ready event is a protocol error). */
sc_status_t scg_event_record(void *ev);
sc_status_t scg_stream_wait_event(void *ev);
/* Page-locked host memory for staging transfers (the host build: malloc). */
sc_status_t scg_host_alloc(size_t bytes, void **p_host);
sc_status_t scg_host_free(void *p_host);

/* ---- hhash.cu / sketch.cu ---- */
/* ZEN hierarchical hashing (daemon/device/hhash.h), same configuration layout as
 * scd_hh_cfg_t (threads and stage_slots are ignored here). Every input of up to nnz_cap
 * non-zeros is kept: k CAS claims on parallel slots (sentinel UINT64_MAX, index 0 safe),
 * then the partition's bounded serial memory by atomic counter, then a spill area. */
typedef struct scg_hh_cfg {
	uint64_t numel;
	uint32_t nparts;
	uint64_t nnz_cap;
	uint64_t nnz_expected; /* 0: nnz_cap */
	double r1_factor;
	double r2_ratio;
	uint32_t k; /* 1..SCG_HH_MAX_K */
	uint64_t seed;
	unsigned threads;     /* ignored */
	uint32_t stage_slots; /* ignored */
} scg_hh_cfg_t;
#define SCG_HH_MAX_K 8

typedef struct scg_hh_stats {
	uint64_t nnz, parallel, serial, spill;
	uint64_t probes; /* not counted on the GPU: 0 */
	uint64_t max_part;
	double imbalance;
} scg_hh_stats_t;

typedef struct scg_hh scg_hh_t;

/* Allocates the table, counters, spill and sort workspaces once (nothing per push). */
sc_status_t scg_hh_create(const scg_hh_cfg_t *cfg_host, scg_hh_t **hh_host);
void scg_hh_destroy(scg_hh_t *hh_host);
/* As scd_hh_push_dense / _coo: out_host's arrays are device memory (cap entries), its
 * nnz is set; partition p is out[offset_host[p] .. offset_host[p + 1]), the same SET of
 * pairs as the cpu's, sorted by index ascending within each partition. More non-zeros
 * than nnz_cap or out cap: SC_ERR_LIMIT (table left clean). stats_host may be NULL. */
sc_status_t scg_hh_push_dense(scg_hh_t *hh_host, const float *g, uint64_t numel,
			      scg_coo_t *out_host, uint64_t *offset_host,
			      scg_hh_stats_t *stats_host);
sc_status_t scg_hh_push_coo(scg_hh_t *hh_host, const scg_coo_t *in_host, scg_coo_t *out_host,
			    uint64_t *offset_host, scg_hh_stats_t *stats_host);

/* Hash bitmap (ZEN Algorithm 2), byte-identical to scd_hash_bitmap_encode / _encode_seg /
 * _decode_seg / _decode_dense_seg with the same status codes. A partition map's offsets are
 * host memory, so the caller passes what it reads there: a segment of partition p, its
 * slots [lo, hi) (the whole partition: [0, |I_p|)), is the n = hi - lo elements
 * I = list + offset[p] + lo (device). */
/* The segment's elements of the dense tensor g: element j is g[I[j]]. */
sc_status_t scg_hash_bitmap_encode(const uint32_t *I, uint64_t n, const float *g, void *buf,
				   uint64_t cap_bytes, uint64_t *bytes_host);
/* From the segment's own values, local[j] being slot lo + j. touched NULL: local[0, hi - lo)
 * is read whole (and not changed). Otherwise touched is a bitmap over the partition's
 * slots: only the marked slots of [lo, hi) are read, and each is cleared in local and in
 * touched. */
sc_status_t scg_hash_bitmap_encode_local(float *local, uint64_t *touched, uint64_t lo,
					 uint64_t hi, void *buf, uint64_t cap_bytes,
					 uint64_t *bytes_host);
/* The segment's non-zeros: global indices (ascending) and values, or dst[I[j]] = value. */
sc_status_t scg_hash_bitmap_decode(const uint32_t *I, uint64_t n, const void *buf,
				   uint64_t bytes, scg_coo_t *out_host);
sc_status_t scg_hash_bitmap_decode_dense(const uint32_t *I, uint64_t n, const void *buf,
					 uint64_t bytes, float *dst);
/* Non-zero blocks of a dense tensor, byte-identical to scd_blocks_encode_dense. */
sc_status_t scg_blocks_encode_dense(const float *g, uint64_t numel, uint32_t block, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_host);

/* S2 count sketch (daemon/device/sketch.h); the configuration is scd_sketch_cfg_t's
 * layout. Float sums are atomic here: identical to the cpu where exact. */
typedef struct scg_sketch_cfg {
	uint64_t numel;
	uint32_t rows, cols, block;
	uint64_t seed;
} scg_sketch_cfg_t;
#define SCG_SKETCH_MAX_ROWS 15
sc_status_t scg_sketch_encode(const scg_sketch_cfg_t *cfg_host, uint64_t step,
			      const scg_coo_t *src_host, float *sketch);
sc_status_t scg_sketch_decode_dense(const scg_sketch_cfg_t *cfg_host, uint64_t step,
				    const float *sketch, float *dst);

/* ---- reduce.cu / select.cu ---- */
/* Dense ops, bit-identical to the cpu device's (reduce.h, format.h, listops.h). */
sc_status_t scg_reduce_sum(float *dst, const float *src, uint64_t n); /* dst += src */
/* dst = dst op src for n elements of dtype as scd_reduce_typed (sum for SC_OP_SUM and
 * SC_OP_AVERAGE, min and max with NaN winning, product; integers wrap); an unknown dtype
 * or op does nothing */
sc_status_t scg_reduce_typed(sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src,
			     uint64_t n);
/* x /= divisor as scd_average_typed: float32 times (float)(1 / divisor), float64 divides,
 * integers divide truncating toward zero (SC_ERR_INVALID for an integer divisor of 0) */
sc_status_t scg_average_typed(sc_dtype_t dtype, void *x, uint64_t n, double divisor);
sc_status_t scg_scale(float *d, uint64_t n, float f); /* d *= f */
/* dst[idx[j]] = val[j] / += val[j]; the indices of one call must be unique */
sc_status_t scg_coo_scatter(float *dst, const uint32_t *idx, const float *val, uint64_t nnz);
sc_status_t scg_coo_scatter_add(float *dst, const uint32_t *idx, const float *val,
				uint64_t nnz);
sc_status_t scg_count_nonzero(const float *g, uint64_t n, uint64_t *count_host);
/* the non-zeros of g, indices ascending (idx, val hold up to n entries) */
sc_status_t scg_dense_to_coo(const float *g, uint64_t n, uint32_t *idx, float *val,
			     uint64_t *nnz_host);

/* Sparsifiers with error feedback (daemon/device/select.h): configuration and stats have
 * the layouts of scd_sparsifier_cfg_t and scd_select_stats_t, kinds its numbering. The
 * output (out_host's arrays: device memory, cap entries) and the residual are
 * bit-identical to scd_sparsify's for every kind (threshold, topk, dgc, natural). in may
 * be NULL (the tensor is in residual), residual may be NULL (no error feedback). */
enum { SCG_SPARSIFY_THRESHOLD = 0, SCG_SPARSIFY_TOPK, SCG_SPARSIFY_DGC, SCG_SPARSIFY_NATURAL };
typedef struct scg_sparsifier_cfg {
	uint32_t kind;
	uint64_t numel;
	double density;
	float threshold;
	uint64_t seed;
	uint32_t block; /* scd_sparsifier_cfg_t's layout; block top-K is cpu-only */
} scg_sparsifier_cfg_t;
typedef struct scg_select_stats {
	uint64_t target, qualified;
	float threshold; /* topk: the exact k-th magnitude */
	uint32_t passes; /* passes over the tensor here (not the cpu's count) */
} scg_select_stats_t;
typedef struct scg_sparsifier scg_sparsifier_t;
sc_status_t scg_sparsifier_create(const scg_sparsifier_cfg_t *cfg_host,
				  scg_sparsifier_t **sp_host);
void scg_sparsifier_destroy(scg_sparsifier_t *sp_host);
sc_status_t scg_sparsify(scg_sparsifier_t *sp_host, const float *in, float *residual,
			 uint64_t numel, scg_coo_t *out_host, scg_select_stats_t *stats_host);
/* scd_select_threshold over [0, n): selects |acc| >= threshold (scd_threshold_key), the
 * first out cap of them by index; *qualified_host: how many qualified */
sc_status_t scg_select_threshold(const float *in, float *residual, uint64_t n, float threshold,
				 scg_coo_t *out_host, uint64_t *qualified_host);
/* Bitmap format, byte-identical to scd_bitmap_encode / scd_bitmap_decode (same status
 * codes: SC_ERR_LIMIT, SC_ERR_INVALID, SC_ERR_PROTOCOL). */
sc_status_t scg_bitmap_encode(const scg_coo_t *src_host, uint64_t numel, void *buf,
			      uint64_t cap_bytes, uint64_t *bytes_host);
sc_status_t scg_bitmap_decode(const void *buf, uint64_t bytes, uint64_t numel,
			      scg_coo_t *out_host);

/* ---- listops.cu ---- */
/* Generic list ops and residual ops, bit-identical to the cpu device's (listops.h, fold.h);
 * a list is (idx, val, nnz), indices ascending where the cpu's contract says so. */
/* *pos_host: the first entry out of [0, numel) or not above the one before it; nnz if none */
sc_status_t scg_coo_check(const uint32_t *idx, uint64_t nnz, uint64_t numel,
			  uint64_t *pos_host);
/* *pos_host: the first position in ascending a[0, n) whose value is >= v */
sc_status_t scg_lower_bound(const uint32_t *a, uint64_t n, uint64_t v, uint64_t *pos_host);
/* (oi, ov) = (idx, 0.0f + val) */
sc_status_t scg_coo_copy_first(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			       uint64_t nnz);
/* (oi, ov)[j] = (idx[j], share x val[j]) (share 1: an exact copy; in place allowed) */
sc_status_t scg_coo_scale_copy(uint32_t *oi, float *ov, const uint32_t *idx, const float *val,
			       uint64_t n, float share);
/* non-zeros of g in each of P even ranges of [0, numel) into counts_host[P] */
sc_status_t scg_range_counts(const float *g, uint64_t numel, uint32_t P, uint64_t *counts_host);
/* the same for an ascending list (entries whose value is non-zero) */
sc_status_t scg_coo_range_counts(const uint32_t *idx, const float *val, uint64_t nnz,
				 uint64_t numel, uint32_t P, uint64_t *counts_host);
/* the ascending union of a and b (each strictly ascending; o distinct from both, room for
 * an + bn): a's value alone, 0.0f + b's alone, a + b on an equal index */
sc_status_t scg_merge_two(const uint32_t *ai, const float *av, uint64_t an, const uint32_t *bi,
			  const float *bv, uint64_t bn, uint32_t *oi, float *ov,
			  uint64_t *nnz_host);
/* x[i] += res[i], res[i] = 0 for n floats */
sc_status_t scg_residual_drain(float *x, float *res, uint64_t n);
/* acc[i] = x[i] + res[i] for n floats, x and res only read */
sc_status_t scg_acc_aside(float *acc, const float *x, const float *res, uint64_t n);
/* bits[(n + 63) / 64] set where res is non-zero, clear elsewhere; *count_host: bits set */
sc_status_t scg_residual_bits(const float *res, uint64_t n, uint64_t *bits,
			      uint64_t *count_host);
/* sets the bit of each of idx[0, n) (an index may repeat) */
sc_status_t scg_bits_set(uint64_t *bits, const uint32_t *idx, uint64_t n);
/* res[idx[j]] += val[j] in order; with touch, each index where res was exactly zero before
 * its addition is appended at touch[*n_touch_host] (the cpu's order), *n_touch_host
 * advanced */
sc_status_t scg_residual_add(float *res, const uint32_t *idx, const float *val, uint64_t n,
			     uint32_t *touch, uint64_t *n_touch_host);
/* dst[idx[j]] += val[j] in order for idx[j] < numel; *bad_host: the entries skipped */
/* scd_coo_fold_residual: (oi, ov) = in (ascending) with the residual at the set bits of
 * bits[(numel + 63) / 64] folded in (in + res on a shared index), zero sums left out; the
 * residual zeroed at the bits, the bits cleared; *nnz_host: the entries written */
sc_status_t scg_coo_fold_residual(const uint32_t *in_idx, const float *in_val, uint64_t in_nnz,
				  float *res, uint64_t *bits, uint64_t numel, uint32_t *oi,
				  float *ov, uint64_t *nnz_host);
sc_status_t scg_coo_add_checked(float *dst, uint64_t numel, const uint32_t *idx,
				const float *val, uint64_t nnz, uint64_t *bad_host);
/* val[j] = src[idx[j]] (src[idx[j]] = 0 after, with take); unique indices */
sc_status_t scg_gather(float *val, float *src, const uint32_t *idx, uint64_t n, int take);
/* val[j] = the value of index idx[j] in the ascending list (0 where absent), for indices in
 * any order; with take, the entries found become 0 in the list; unique indices */
sc_status_t scg_coo_gather(float *val, const uint32_t *idx, uint64_t n,
			   const uint32_t *list_idx, float *list_val, uint64_t list_nnz,
			   int take);

/* ---- part.cu ---- */
/* ZEN's partition function and lists (daemon/device/partition.h), same layouts as
 * scd_partfn_t and scd_partmap_t: offset (nparts + 1) is host memory, list and pos
 * (numel each) device arrays; fn.seed is h0's seed (scg_partition_seed(seed)). */
#define SCG_NUMEL_MAX ((uint64_t)UINT32_MAX)
typedef struct scg_partfn {
	uint64_t seed;
	uint32_t nparts;
} scg_partfn_t;
typedef struct scg_partmap {
	uint64_t numel;
	uint64_t seed;
	scg_partfn_t fn;
	uint64_t *offset; /* host */
	uint32_t *list;
	uint32_t *pos;
} scg_partmap_t;
/* The lists for (numel, nparts, seed), bit-identical to scd_partmap_acquire's, built on
 * the device at first use and cached with a reference count (thread-safe); release what
 * acquire gave (the last release frees them). SC_ERR_INVALID for nparts 0 or numel past
 * SCG_NUMEL_MAX. */
sc_status_t scg_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
				const scg_partmap_t **map_host);
void scg_partmap_release(const scg_partmap_t *map_host);
/* How many lists were built since start (cache effectiveness; for tests). */
uint64_t scg_partmap_builds(void);
/* scd_partition_coo: in split stably by partition into out, partition p at
 * out[offset_host[p] .. offset_host[p + 1]); SC_ERR_LIMIT when out's cap is below in's
 * nnz. */
sc_status_t scg_partition_coo(const scg_partfn_t *fn_host, const scg_coo_t *in_host,
			      scg_coo_t *out_host, uint64_t *offset_host);
/* scd_coo_scatter_add_part on a partition of slots slots (pos: the map's, numel entries):
 * dst[pos[idx]] += val where idx < numel and pos[idx] < slots, setting the slot's bit in
 * touched (NULL: none); *bad_host: the pairs skipped. The indices of one call must be
 * unique (an ascending list) for the cpu's sums. */
sc_status_t scg_coo_scatter_add_part(float *dst, uint64_t *touched, const uint32_t *pos,
				     uint64_t numel, uint64_t slots, const uint32_t *idx,
				     const float *val, uint64_t nnz, uint64_t *bad_host);
/* COO format, byte-identical to scd_coo_encode / scd_coo_decode (SC_ERR_LIMIT,
 * SC_ERR_PROTOCOL for a length not a multiple of 8). */
sc_status_t scg_coo_encode(const scg_coo_t *src_host, void *buf, uint64_t cap_bytes,
			   uint64_t *bytes_host);
sc_status_t scg_coo_decode(const void *buf, uint64_t bytes, scg_coo_t *out_host);

/* ---- exdyna.cu / blocks.cu / sketch.cu (decode_apply) ---- */
/* ExDyna's selection (daemon/device/exdyna.h): the object and its control state are the
 * daemon's (exdyna.c); each selection gets a plan of the iteration with the layout of
 * scd_exdyna_plan_t (daemon/device/exdyna_impl.h). CALIBRATE: the threshold is the
 * share-th largest magnitude of the partition (its key to *key_host: 0 when fewer);
 * GRID: the partition's counts at the grid's thresholds to meta_host[1 .. GRID_N];
 * always meta_host[0]: how many passed the threshold (before the cap). Outputs and
 * residual are bit-identical to scd_exdyna_select / _select_coo's. */
enum { SCG_EXDYNA_FIXED = 0, SCG_EXDYNA_CALIBRATE, SCG_EXDYNA_GRID };
#define SCG_EXDYNA_GRID_N    257 /* 2 SCD_EXDYNA_GRID_HALF + 1 */
#define SCG_EXDYNA_GRID_STEP (1 << 18)
typedef struct scg_exdyna_plan {
	uint64_t numel;
	uint64_t lo, hi;   /* this rank's partition */
	uint64_t share;	   /* CALIBRATE: the rank of the threshold's magnitude */
	uint64_t cap;	   /* at most cap selected, the largest (UINT64_MAX: no cap) */
	int64_t grid_base; /* GRID: the lowest grid threshold's key */
	uint32_t tkey;	   /* FIXED and GRID: the threshold's key */
	uint32_t mode;	   /* SCG_EXDYNA_* */
} scg_exdyna_plan_t;
typedef struct scg_exdyna scg_exdyna_t;
/* The selection's workspace (histogram, grid counts), allocated once. */
sc_status_t scg_exdyna_create(scg_exdyna_t **ws_host);
void scg_exdyna_destroy(scg_exdyna_t *ws_host);
/* in may be NULL (the tensor is in residual), residual may be NULL (no error feedback);
 * out_host's arrays: device memory (cap entries); meta_host: 1 + GRID_N words. */
sc_status_t scg_exdyna_select(scg_exdyna_t *ws_host, const scg_exdyna_plan_t *plan_host,
			      const float *in, float *residual, scg_coo_t *out_host,
			      uint64_t *meta_host, uint32_t *key_host);
/* out_host and dis_host have room for in_host->nnz entries (else SC_ERR_INVALID). */
sc_status_t scg_exdyna_select_coo(scg_exdyna_t *ws_host, const scg_exdyna_plan_t *plan_host,
				  const scg_coo_t *in_host, scg_coo_t *out_host,
				  scg_coo_t *dis_host, uint64_t *meta_host, uint32_t *key_host);
/* OmniReduce's blocks, as scd_blocks_count_dense, scd_blocks_decode and scd_blocks_apply
 * (format.h), with their status codes; apply takes records in any order (a block sent
 * twice is applied in record order, as the cpu does). */
sc_status_t scg_blocks_count_dense(const float *g, uint64_t numel, uint32_t block,
				   uint64_t *count_host);
sc_status_t scg_blocks_decode(const void *buf, uint64_t bytes, uint64_t numel, uint32_t block,
			      scg_coo_t *out_host);
sc_status_t scg_blocks_apply(const void *buf, uint64_t bytes, uint32_t block, uint64_t len,
			     float *dst, int add);
/* scd_sketch_decode_apply: one row (else SC_ERR_INVALID), bit-identical. */
sc_status_t scg_sketch_decode_apply(const scg_sketch_cfg_t *cfg_host, uint64_t step,
				    const float *sketch, const float *own, float *dst,
				    float *res);

/* ---- kernels.cu ---- */
/* The scheme layer's message bodies (daemon/device/msgops.h), its per-scheme kernels
 * (scheme_kernels.h) and the top-k of a COO list (listops.h, scd_coo_topk), each
 * bit-identical to the cpu device's. */
/* *count_host: the maximal runs of consecutive indices (idx[j] == idx[j - 1] + 1) */
sc_status_t scg_idx_count_runs(const uint32_t *idx, uint64_t n, uint64_t *count_host);
/* those runs as (start, length) u32 pairs at runs (any alignment) */
sc_status_t scg_idx_runs_encode(const uint32_t *idx, uint64_t n, void *runs);
/* clears the (span + 63) / 64 words and sets bit idx[j] - lo of each entry before the
 * first outside [lo, lo + span); *pos_host: that entry's position, n if none */
sc_status_t scg_idx_bitmap_encode(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t span,
				  uint64_t *words, uint64_t *pos_host);
/* expands nruns (start, length) u32 pairs (any alignment) into idx (room for max);
 * *n_host: the indices written, or UINT64_MAX (nothing written) when a run is empty,
 * starts below the end of the one before, ends past numel, or the sum is past max */
sc_status_t scg_runs_decode(const void *runs, uint64_t nruns, uint64_t numel, uint64_t max,
			    uint32_t *idx, uint64_t *n_host);
/* idx[j] += add (wrapping) */
sc_status_t scg_idx_add(uint32_t *idx, uint64_t n, uint32_t add);
/* pos_host[l * nv + k]: the first position of list l (a[off_host[l], off_host[l + 1]))
 * whose value is >= v_host[k], counted from the list's start */
sc_status_t scg_lower_bounds(const uint32_t *a, const uint64_t *off_host, uint32_t nlists,
			     const uint64_t *v_host, uint32_t nv, uint64_t *pos_host);
/* *pos_host: the first j with idx[j] outside [lo, hi) or not above idx[j - 1]; n if none */
sc_status_t scg_idx_check_range(const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi,
				uint64_t *pos_host);
/* the entries with a non-zero value, in order, into (oi, ov) (may be (idx, val)) */
sc_status_t scg_coo_compact_nonzero(const uint32_t *idx, const float *val, uint64_t n,
				    uint32_t *oi, float *ov, uint64_t *nnz_host);
/* the ascending union of a and b (each strictly ascending; o distinct from both, room for
 * an + bn): a value on one side as it is, av + bv on an equal index */
sc_status_t scg_coo_merge_sum(const uint32_t *ai, const float *av, uint64_t an,
			      const uint32_t *bi, const float *bv, uint64_t bn, uint32_t *oi,
			      float *ov, uint64_t *nnz_host);
/* the entries whose index is t modulo d (d > 0), in order, into (oi, ov) */
sc_status_t scg_coo_filter_mod(const uint32_t *idx, const float *val, uint64_t n, uint32_t d,
			       uint32_t t, uint32_t *oi, float *ov, uint64_t *nnz_host);
/* scd_run_t's layout: entries [lo, hi) of a list in one block */
typedef struct scg_run {
	uint32_t block;
	uint64_t lo, hi;
} scg_run_t;
/* scd_coo_block_runs: the runs (strictly ascending inside one block of the partition
 * bnd_host[nb + 1] of [0, numel)) into runs_host (room for max), *nr_host their number;
 * *bad_host: the position of an index >= numel that starts a run, n if none stopped it */
sc_status_t scg_coo_block_runs(const uint32_t *idx, uint64_t n, const uint64_t *bnd_host,
			       uint32_t nb, uint64_t numel, uint32_t max, scg_run_t *runs_host,
			       uint64_t *bad_host, uint32_t *nr_host);
/* res[i] -= x[i] * f, the product rounded first (no fused multiply-add) */
sc_status_t scg_sub_scaled(float *res, const float *x, uint64_t n, float f);
/* scd_coo_topk: the top k by magnitude of an ascending list kept in place in index order
 * (ties at the k-th magnitude to the lowest positions), the rest behind in index order
 * (tmp_*: scratch of n); *kept_host: min(k, n) */
sc_status_t scg_coo_topk(uint32_t *idx, float *val, uint64_t n, uint64_t k, uint32_t *tmp_idx,
			 float *tmp_val, uint64_t *kept_host);

#ifdef __cplusplus
}
#endif

#endif
