/*
 * test_device_guard.c: the proof that the schemes touch tensor data only through the
 * device's ops and the transport (scheme_internal.h; docs/design.md, layers). The guard
 * device is the cpu device whose memory the host cannot touch between op calls:
 *
 *   - its alloc maps every allocation on its own pages (mmap), tracked in a list, and
 *     every other op of its table (a copy of scd_device_cpu_ops with every function pointer
 *     wrapped) opens all tracked regions (mprotect read and write), runs the cpu op and
 *     closes them again (PROT_NONE); a depth counter keeps nested use open;
 *   - the transport moves those buffers too: the guard transport wraps the tcp one, each op
 *     opening the memory around the inner op. The work an exchange runs while it waits is
 *     the scheme's own host code, so it runs with the memory closed again (the ops it calls
 *     open it for themselves), and a stray access there is caught as well.
 *
 * A host dereference of device memory anywhere in a scheme then dies with SIGSEGV in its
 * rank, and the test fails naming the signal. Every scheme of the registry runs its
 * exactness test through this device (one test each, device_guard_<name>): lossless ones
 * must return the exact sum on small integers, lossy ones conserve mass (result plus
 * residual changes equal the inputs) and report every index where they added residual;
 * dense and COO input, sparse results, whole and streamed messages, P = 2..4. The test's
 * own inputs and outputs are written and read with the guard explicitly open.
 */
#include "unit.h"

#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "device_guard.h"
#include "scheme/scheme.h"
#include "scheme_world.h"

/* ---- the guard device ---------------------------------------------------------------- */

typedef struct region {
	void *p;
	size_t len;
} region_t;

static region_t *regions; /* every live allocation of the guard device (this process) */
static size_t nregions, regions_cap;
static int depth; /* > 0: the device's memory is open to the host */

static void protect_all(int prot)
{
	for (size_t i = 0; i < nregions; i++)
		if (mprotect(regions[i].p, regions[i].len, prot) != 0)
			unit_fail(__FILE__, __LINE__, "mprotect: %s", strerror(errno));
}

/* Opens the device's memory to the host; the outermost close protects it again. */
static void guard_open(void)
{
	if (depth++ == 0)
		protect_all(PROT_READ | PROT_WRITE);
}

static void guard_close(void)
{
	if (--depth == 0)
		protect_all(PROT_NONE);
}

static void *guard_alloc(size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = ((bytes ? bytes : 1) + page - 1) / page * page;
	if (nregions == regions_cap) {
		size_t cap = regions_cap ? 2 * regions_cap : 64;
		region_t *r = realloc(regions, cap * sizeof(*r));
		if (!r)
			return NULL;
		regions = r, regions_cap = cap;
	}
	/* zeroed, as the cpu device's alloc; closed unless an op is running */
	void *p = mmap(NULL, len, depth ? PROT_READ | PROT_WRITE : PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	regions[nregions++] = (region_t){p, len};
	return p;
}

static void guard_free(void *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < nregions; i++)
		if (regions[i].p == p) {
			munmap(p, regions[i].len);
			regions[i] = regions[--nregions];
			return;
		}
	unit_fail(__FILE__, __LINE__, "the guard device frees %p, which it did not allocate",
		  p);
}

/*
 * The partition map of Balanced Parallelism: the cpu device's cached map, with its list
 * and pos arrays copied into guarded memory (offset, which the schemes read on the host,
 * stays host memory). A scheme that read the arrays directly would fault.
 */
typedef struct guard_map {
	scd_partmap_t map;
	const scd_partmap_t *cpu;
	struct guard_map *next;
} guard_map_t;
static guard_map_t *guard_maps;

/* The device the guard wraps: the cpu device, or another whose memory is host memory (the
 * host build of the GPU device, test_gpu_schemes.c). */
static const scd_device_ops_t *guard_base = &scd_device_cpu_ops;

static sc_status_t guard_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
					 const scd_partmap_t **map_p)
{
	const scd_partmap_t *cpu;
	sc_status_t st = guard_base->partmap_acquire(numel, nparts, seed, &cpu);
	if (st != SC_OK)
		return st;
	guard_map_t *g = calloc(1, sizeof(*g));
	if (!g || !(g->map.list = guard_alloc(4 * numel + 4)) ||
	    !(g->map.pos = guard_alloc(4 * numel + 4))) {
		if (g)
			guard_free(g->map.list);
		free(g);
		guard_base->partmap_release(cpu);
		return SC_ERR_NOMEM;
	}
	g->map.numel = cpu->numel, g->map.seed = cpu->seed, g->map.fn = cpu->fn;
	g->map.offset = cpu->offset;
	guard_open();
	memcpy(g->map.list, cpu->list, 4 * numel);
	memcpy(g->map.pos, cpu->pos, 4 * numel);
	guard_close();
	g->cpu = cpu;
	g->next = guard_maps, guard_maps = g;
	*map_p = &g->map;
	return SC_OK;
}

static void guard_partmap_release(const scd_partmap_t *map)
{
	for (guard_map_t **pg = &guard_maps; *pg; pg = &(*pg)->next)
		if (&(*pg)->map == map) {
			guard_map_t *g = *pg;
			*pg = g->next;
			guard_free(g->map.list);
			guard_free(g->map.pos);
			guard_base->partmap_release(g->cpu);
			free(g);
			return;
		}
	unit_fail(__FILE__, __LINE__, "the guard device releases a map it did not make");
}

/*
 * Every op of device.h but alloc, free and the partition map's: R(return type, name,
 * parameters, arguments) or V(name, parameters, arguments) for the void ones. An op added to
 * device.h needs its line here (device_guard_wraps_every_op fails until it has one).
 */
#define GUARD_OPS(R, V)                                                                        \
	V(clear, (void *dst, size_t bytes), (dst, bytes))                                      \
	V(copy, (void *dst, const void *src, size_t bytes), (dst, src, bytes))                 \
	V(to_host, (void *host_dst, const void *src, size_t bytes), (host_dst, src, bytes))    \
	V(from_host, (void *dst, const void *host_src, size_t bytes), (dst, host_src, bytes))  \
	R(sc_status_t, sync, (void), ())                                                       \
	R(uint64_t, count_nonzero, (const float *g, uint64_t n), (g, n))                       \
	R(uint64_t, dense_to_coo, (const float *g, uint64_t n, uint32_t *idx, float *val),     \
	  (g, n, idx, val))                                                                    \
	V(coo_scatter, (float *dst, const scd_coo_t *src), (dst, src))                         \
	R(uint64_t, coo_check, (const scd_coo_t *coo, uint64_t numel), (coo, numel))           \
	R(uint64_t, lower_bound, (const uint32_t *a, uint64_t n, uint64_t v), (a, n, v))       \
	R(uint64_t, merge_two,                                                                 \
	  (const uint32_t *ai, const float *av, uint64_t an, const scd_coo_t *b, uint32_t *oi, \
	   float *ov),                                                                         \
	  (ai, av, an, b, oi, ov))                                                             \
	V(coo_copy_first, (uint32_t * oi, float *ov, const scd_coo_t *src), (oi, ov, src))     \
	V(coo_scale_copy,                                                                      \
	  (uint32_t * oi, float *ov, const uint32_t *idx, const float *val, uint64_t n,        \
	   float share),                                                                       \
	  (oi, ov, idx, val, n, share))                                                        \
	R(uint64_t, coo_topk,                                                                  \
	  (uint32_t * idx, float *val, uint64_t n, uint64_t k, uint32_t *tmp_idx,              \
	   float *tmp_val),                                                                    \
	  (idx, val, n, k, tmp_idx, tmp_val))                                                  \
	V(range_counts, (const float *g, uint64_t numel, uint32_t P, uint64_t *host_counts),   \
	  (g, numel, P, host_counts))                                                          \
	V(coo_range_counts,                                                                    \
	  (const scd_coo_t *o, uint64_t numel, uint32_t P, uint64_t *host_counts),             \
	  (o, numel, P, host_counts))                                                          \
	V(residual_add,                                                                        \
	  (float *res, const uint32_t *idx, const float *val, uint64_t n, uint32_t *touch,     \
	   uint64_t *host_n_touch),                                                            \
	  (res, idx, val, n, touch, host_n_touch))                                             \
	V(scale, (float *d, uint64_t n, float f), (d, n, f))                                   \
	V(gather, (float *val, float *src, const uint32_t *idx, uint64_t n, int take),         \
	  (val, src, idx, n, take))                                                            \
	V(coo_gather,                                                                          \
	  (float *val, const uint32_t *idx, uint64_t n, scd_coo_t *list, int take),            \
	  (val, idx, n, list, take))                                                           \
	R(uint64_t, idx_count_runs, (const uint32_t *idx, uint64_t n), (idx, n))               \
	V(idx_runs_encode, (const uint32_t *idx, uint64_t n, void *runs), (idx, n, runs))      \
	R(uint64_t, idx_bitmap_encode,                                                         \
	  (const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t span, uint64_t *words),      \
	  (idx, n, lo, span, words))                                                           \
	R(uint64_t, runs_decode,                                                               \
	  (const void *runs, uint64_t nruns, uint64_t numel, uint64_t max, uint32_t *idx),     \
	  (runs, nruns, numel, max, idx))                                                      \
	V(idx_add, (uint32_t * idx, uint64_t n, uint32_t add), (idx, n, add))                  \
	V(lower_bounds,                                                                        \
	  (const uint32_t *a, const uint64_t *off, uint32_t nlists, const uint64_t *v,         \
	   uint32_t nv, uint64_t *pos),                                                        \
	  (a, off, nlists, v, nv, pos))                                                        \
	R(uint64_t, idx_check_range,                                                           \
	  (const uint32_t *idx, uint64_t n, uint64_t lo, uint64_t hi), (idx, n, lo, hi))       \
	R(uint64_t, coo_compact_nonzero,                                                       \
	  (const uint32_t *idx, const float *val, uint64_t n, uint32_t *oi, float *ov),        \
	  (idx, val, n, oi, ov))                                                               \
	R(uint64_t, coo_merge_sum,                                                             \
	  (const uint32_t *ai, const float *av, uint64_t an, const uint32_t *bi,               \
	   const float *bv, uint64_t bn, uint32_t *oi, float *ov),                             \
	  (ai, av, an, bi, bv, bn, oi, ov))                                                    \
	R(uint64_t, coo_filter_mod,                                                            \
	  (const uint32_t *idx, const float *val, uint64_t n, uint32_t d, uint32_t t,          \
	   uint32_t *oi, float *ov),                                                           \
	  (idx, val, n, d, t, oi, ov))                                                         \
	R(uint32_t, coo_block_runs,                                                            \
	  (const uint32_t *idx, uint64_t n, const uint64_t *bnd, uint32_t nb, uint64_t numel,  \
	   uint32_t max, scd_run_t *runs, uint64_t *bad),                                      \
	  (idx, n, bnd, nb, numel, max, runs, bad))                                            \
	V(sub_scaled, (float *res, const float *x, uint64_t n, float f), (res, x, n, f))       \
	R(uint64_t, blocks_count_dense, (const float *g, uint64_t numel, uint32_t block),      \
	  (g, numel, block))                                                                   \
	R(sc_status_t, blocks_apply,                                                           \
	  (const void *buf, uint64_t bytes, uint32_t block, uint64_t len, float *dst,          \
	   int add),                                                                           \
	  (buf, bytes, block, len, dst, add))                                                  \
	V(reduce_typed,                                                                        \
	  (sc_dtype_t dtype, sc_reduce_op_t op, void *dst, const void *src, uint64_t n),       \
	  (dtype, op, dst, src, n))                                                            \
	V(average_typed, (sc_dtype_t dtype, void *x, uint64_t n, double divisor),              \
	  (dtype, x, n, divisor))                                                              \
	R(uint64_t, coo_add_checked,                                                           \
	  (float *dst, uint64_t numel, const uint32_t *idx, const float *val, uint64_t nnz),   \
	  (dst, numel, idx, val, nnz))                                                         \
	V(residual_drain, (float *x, float *res, uint64_t n), (x, res, n))                     \
	V(acc_aside, (float *acc, const float *x, const float *res, uint64_t n),               \
	  (acc, x, res, n))                                                                    \
	R(uint64_t, residual_bits, (const float *res, uint64_t n, uint64_t *bits),             \
	  (res, n, bits))                                                                      \
	V(bits_set, (uint64_t * bits, const uint32_t *idx, uint64_t n), (bits, idx, n))        \
	R(uint64_t, coo_fold_residual,                                                         \
	  (const scd_coo_t *in, float *res, uint64_t *bits, uint64_t numel, uint32_t *oi,      \
	   float *ov),                                                                         \
	  (in, res, bits, numel, oi, ov))                                                      \
	R(sc_status_t, sparsifier_create,                                                      \
	  (const scd_sparsifier_cfg_t *cfg, scd_sparsifier_t **sp_p), (cfg, sp_p))             \
	V(sparsifier_destroy, (scd_sparsifier_t * sp), (sp))                                   \
	R(sc_status_t, sparsify,                                                               \
	  (scd_sparsifier_t * sp, const float *in, float *residual, uint64_t numel,            \
	   scd_coo_t *out, scd_select_stats_t *stats_p),                                       \
	  (sp, in, residual, numel, out, stats_p))                                             \
	R(sc_status_t, exdyna_create, (const scd_exdyna_cfg_t *cfg, scd_exdyna_t **ex_p),      \
	  (cfg, ex_p))                                                                         \
	V(exdyna_destroy, (scd_exdyna_t * ex), (ex))                                           \
	R(sc_status_t, exdyna_select,                                                          \
	  (scd_exdyna_t * ex, const float *in, float *residual, scd_coo_t *out,                \
	   uint64_t *count_p),                                                                 \
	  (ex, in, residual, out, count_p))                                                    \
	R(sc_status_t, exdyna_select_coo,                                                      \
	  (scd_exdyna_t * ex, const scd_coo_t *in, scd_coo_t *out, scd_coo_t *dis,             \
	   uint64_t *count_p),                                                                 \
	  (ex, in, out, dis, count_p))                                                         \
	R(sc_status_t, exdyna_update, (scd_exdyna_t * ex, const uint64_t *meta), (ex, meta))   \
	R(sc_status_t, hh_create, (const scd_hh_cfg_t *cfg, scd_hh_t **hh_p), (cfg, hh_p))     \
	V(hh_destroy, (scd_hh_t * hh), (hh))                                                   \
	R(sc_status_t, hh_push_dense,                                                          \
	  (scd_hh_t * hh, const float *g, uint64_t numel, scd_coo_t *out, uint64_t *offset,    \
	   scd_hh_stats_t *stats_p),                                                           \
	  (hh, g, numel, out, offset, stats_p))                                                \
	R(sc_status_t, hh_push_coo,                                                            \
	  (scd_hh_t * hh, const scd_coo_t *in, scd_coo_t *out, uint64_t *offset,               \
	   scd_hh_stats_t *stats_p),                                                           \
	  (hh, in, out, offset, stats_p))                                                      \
	R(sc_status_t, partition_coo,                                                          \
	  (const scd_partfn_t *fn, const scd_coo_t *in, scd_coo_t *out, uint64_t *offset),     \
	  (fn, in, out, offset))                                                               \
	R(sc_status_t, coo_encode,                                                             \
	  (const scd_coo_t *src, void *buf, uint64_t cap_bytes, uint64_t *bytes_p),            \
	  (src, buf, cap_bytes, bytes_p))                                                      \
	R(sc_status_t, coo_decode, (const void *buf, uint64_t bytes, scd_coo_t *out),          \
	  (buf, bytes, out))                                                                   \
	R(sc_status_t, bitmap_encode,                                                          \
	  (const scd_coo_t *src, uint64_t numel, void *buf, uint64_t cap_bytes,                \
	   uint64_t *bytes_p),                                                                 \
	  (src, numel, buf, cap_bytes, bytes_p))                                               \
	R(sc_status_t, bitmap_decode,                                                          \
	  (const void *buf, uint64_t bytes, uint64_t numel, scd_coo_t *out),                   \
	  (buf, bytes, numel, out))                                                            \
	R(sc_status_t, hash_bitmap_encode,                                                     \
	  (const scd_partmap_t *map, uint32_t p, const float *g, void *buf,                    \
	   uint64_t cap_bytes, uint64_t *bytes_p),                                             \
	  (map, p, g, buf, cap_bytes, bytes_p))                                                \
	R(sc_status_t, hash_bitmap_encode_seg,                                                 \
	  (const scd_partmap_t *map, const scd_hbseg_t *seg, float *local, uint64_t *touched,  \
	   void *buf, uint64_t cap_bytes, uint64_t *bytes_p),                                  \
	  (map, seg, local, touched, buf, cap_bytes, bytes_p))                                 \
	R(sc_status_t, hash_bitmap_decode_seg,                                                 \
	  (const scd_partmap_t *map, const scd_hbseg_t *seg, const void *buf, uint64_t bytes,  \
	   scd_coo_t *out),                                                                    \
	  (map, seg, buf, bytes, out))                                                         \
	R(sc_status_t, hash_bitmap_decode_dense_seg,                                           \
	  (const scd_partmap_t *map, const scd_hbseg_t *seg, const void *buf, uint64_t bytes,  \
	   float *dst),                                                                        \
	  (map, seg, buf, bytes, dst))                                                         \
	R(sc_status_t, blocks_encode_dense,                                                    \
	  (const float *g, uint64_t numel, uint32_t block, void *buf, uint64_t cap_bytes,      \
	   uint64_t *bytes_p),                                                                 \
	  (g, numel, block, buf, cap_bytes, bytes_p))                                          \
	R(sc_status_t, blocks_decode,                                                          \
	  (const void *buf, uint64_t bytes, uint64_t numel, uint32_t block, scd_coo_t *out),   \
	  (buf, bytes, numel, block, out))                                                     \
	R(sc_status_t, sketch_encode,                                                          \
	  (const scd_sketch_cfg_t *cfg, uint64_t step, const scd_coo_t *src, float *sketch),   \
	  (cfg, step, src, sketch))                                                            \
	R(sc_status_t, sketch_decode_dense,                                                    \
	  (const scd_sketch_cfg_t *cfg, uint64_t step, const float *sketch, float *dst),       \
	  (cfg, step, sketch, dst))                                                            \
	R(sc_status_t, sketch_decode_apply,                                                    \
	  (const scd_sketch_cfg_t *cfg, uint64_t step, const float *sketch, const float *own,  \
	   float *dst, float *res),                                                            \
	  (cfg, step, sketch, own, dst, res))                                                  \
	V(reduce_sum, (float *dst, const float *src, uint64_t n), (dst, src, n))               \
	V(coo_scatter_add, (float *dst, const scd_coo_t *src), (dst, src))                     \
	R(uint64_t, coo_scatter_add_part,                                                      \
	  (float *dst, uint64_t *touched, const scd_partmap_t *map, uint32_t p,                \
	   const scd_coo_t *src),                                                              \
	  (dst, touched, map, p, src))

#define GUARD_R(ret, op, params, args)                                                         \
	static ret guard_##op params                                                           \
	{                                                                                      \
		guard_open();                                                                  \
		ret r_ = guard_base->op args;                                                  \
		guard_close();                                                                 \
		return r_;                                                                     \
	}
#define GUARD_V(op, params, args)                                                              \
	static void guard_##op params                                                          \
	{                                                                                      \
		guard_open();                                                                  \
		guard_base->op args;                                                           \
		guard_close();                                                                 \
	}
GUARD_OPS(GUARD_R, GUARD_V)

static scd_device_ops_t guard_ops;

static const scd_device_ops_t *guard_device(void)
{
	guard_ops = *guard_base;
	guard_ops.name = "guard";
	guard_ops.alloc = guard_alloc;
	guard_ops.free = guard_free;
	guard_ops.partmap_acquire = guard_partmap_acquire;
	guard_ops.partmap_release = guard_partmap_release;
#define GUARD_SET_R(ret, op, params, args) guard_ops.op = guard_##op;
#define GUARD_SET_V(op, params, args)	   guard_ops.op = guard_##op;
	GUARD_OPS(GUARD_SET_R, GUARD_SET_V)
	return &guard_ops;
}

/* The ops table after its name is function pointers only: each slot of the guard's must be
 * set and differ from the cpu device's (else an op would run with the memory closed, or a
 * wrapper would be missing). Returns the first unwrapped slot, or the number of slots. */
typedef void (*op_slot_t)(void);
static size_t first_unwrapped(const scd_device_ops_t *g, size_t *nslots_p)
{
	size_t first = offsetof(scd_device_ops_t, alloc);
	size_t n = (sizeof(scd_device_ops_t) - first) / sizeof(op_slot_t);
	*nslots_p = n;
	for (size_t i = 0; i < n; i++) {
		op_slot_t a, b;
		memcpy(&a, (const char *)g + first + i * sizeof(a), sizeof(a));
		memcpy(&b, (const char *)guard_base + first + i * sizeof(b), sizeof(b));
		if (!a || a == b)
			return i;
	}
	return n;
}

/* ---- the guard transport ------------------------------------------------------------- */

typedef struct guard_xport {
	scd_transport_t base;
	scd_transport_t *inner; /* the world's tcp transport (not owned) */
} guard_xport_t;

static scd_transport_t *inner_of(scd_transport_t *t)
{
	return ((guard_xport_t *)t)->inner;
}

/* An exchange's work: the scheme's host code, run with the memory closed again. */
static int guard_work(void *arg)
{
	const scd_xfer_work_t *w = arg;
	int saved = depth;
	depth = 0;
	protect_all(PROT_NONE);
	int k = w->fn(w->arg);
	depth = saved;
	if (depth)
		protect_all(PROT_READ | PROT_WRITE);
	return k;
}

static sc_status_t gx_exchange(scd_transport_t *t, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, int tmo)
{
	scd_transport_t *in = inner_of(t);
	guard_open();
	sc_status_t st = in->ops->exchange(in, s, ns, r, nr, tmo);
	guard_close();
	return st;
}

static sc_status_t gx_exchange_v(scd_transport_t *t, const scd_xfer_t *s, int ns,
				 const scd_xfer_t *r, int nr, size_t *rb,
				 const scd_xfer_work_t *w, int tmo)
{
	scd_transport_t *in = inner_of(t);
	scd_xfer_work_t gw = {guard_work, (void *)w};
	guard_open();
	sc_status_t st = in->ops->exchange_v(in, s, ns, r, nr, rb, w ? &gw : NULL, tmo);
	guard_close();
	return st;
}

static sc_status_t gx_allreduce_f32(scd_transport_t *t, float *data, size_t n, int tmo)
{
	scd_transport_t *in = inner_of(t);
	guard_open();
	sc_status_t st = in->ops->allreduce_f32(in, data, n, tmo);
	guard_close();
	return st;
}

static sc_status_t gx_allreduce(scd_transport_t *t, void *data, size_t n, sc_dtype_t dtype,
				sc_reduce_op_t op, const scd_xfer_work_t *w, int tmo)
{
	scd_transport_t *in = inner_of(t);
	scd_xfer_work_t gw = {guard_work, (void *)w};
	guard_open();
	sc_status_t st = in->ops->allreduce(in, data, n, dtype, op, w ? &gw : NULL, tmo);
	guard_close();
	return st;
}

static sc_status_t gx_measure(scd_transport_t *t, size_t probe_bytes, double *alpha_p,
			      double *beta_p, int tmo)
{
	scd_transport_t *in = inner_of(t);
	return in->ops->measure(in, probe_bytes, alpha_p, beta_p, tmo);
}

static void gx_counters(const scd_transport_t *t, scd_transport_counters_t *c_p)
{
	const scd_transport_t *in = ((const guard_xport_t *)t)->inner;
	in->ops->counters(in, c_p);
}

static void gx_destroy(scd_transport_t *t)
{
	(void)t; /* the inner transport is the world's */
}

static const scd_transport_ops_t guard_xport_ops = {
    .name = "guard",
    .exchange = gx_exchange,
    .exchange_v = gx_exchange_v,
    .allreduce_f32 = gx_allreduce_f32,
    .allreduce = gx_allreduce,
    .measure = gx_measure,
    .counters = gx_counters,
    .destroy = gx_destroy,
};

/* ---- every scheme through the guard --------------------------------------------------- */

#define GNUMEL	 6000
#define GCASES	 9
#define GDENSITY 0.02 /* cfg.density: the lossy schemes' k */

typedef struct guard_run {
	scd_scheme_t scheme;
	int lossless;
	spec_t specs[GCASES];
	int ncases;
	uint32_t stream_chunk; /* cfg.stream_chunk (0: the default) */
	uint32_t teams;	       /* cfg.spardl_teams (0: the cost model's) */
	uint64_t *hash;	       /* [case][MAX_P]: each rank's result */
	float *out;	       /* [case][GNUMEL]: rank 0's result (lossy) */
	float *res;	       /* [case][MAX_P][GNUMEL]: each rank's residual after the run */
} guard_run_t;

/* Densities from a few entries to dense, overlap none to full, uniform and Zipf, dense and
 * COO input, sparse results, rows (runs messages): COO, bitmap and runs messages all
 * occur, as do dense and sparse aggregation. */
static int guard_cases(spec_t *sp)
{
	static const struct {
		double d, ov;
		int zipf, coo, sparse_out;
		uint32_t rows;
	} t[GCASES] = {
	    {1e-3, 0, 0, 0, 0, 0},    {0.02, 0.5, 1, 1, 1, 0}, {0.02, 0.5, 0, 1, 0, 0},
	    {0.3, 0.5, 0, 0, 0, 0},   {0.3, 1, 1, 1, 1, 0},    {1, 0, 0, 1, 1, 0},
	    {2e-3, 0.5, 1, 1, 1, 64}, {0.01, 0, 0, 0, 0, 32},  {0.1, 0.5, 1, 0, 0, 0},
	};
	for (int c = 0; c < GCASES; c++)
		sp[c] = (spec_t){.numel = GNUMEL,
				 .density = t[c].d,
				 .overlap = t[c].ov,
				 .zipf = t[c].zipf,
				 .coo = t[c].coo,
				 .sparse_out = t[c].sparse_out,
				 .rows = t[c].rows,
				 .seed = unit_rng()};
	return GCASES;
}

static void guard_rank(scd_transport_t *tcp, int rank, int P, void *arg)
{
	guard_run_t *g = arg;
	const scd_device_ops_t *dev = guard_device();
	guard_xport_t gx = {
	    .base = {.ops = &guard_xport_ops, .rank = tcp->rank, .size = tcp->size},
	    .inner = tcp};
	const uint64_t n = GNUMEL;
	/* the test's own host memory */
	float *in = malloc(4 * n), *ref = calloc(n, 4), *tmp = malloc(4 * n),
	      *got = malloc(4 * n);
	uint8_t *seen = malloc(n);
	/* the device's: the arrays io names */
	float *data = dev->alloc(4 * n), *res = dev->alloc(4 * n);
	scd_coo_t coo = {dev->alloc(4 * n), dev->alloc(4 * n), 0, n};
	CHECK_TRUE(in && ref && tmp && got && seen && data && res && coo.idx && coo.val);
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(n, 0x5eed);
	cfg.density = GDENSITY;
	if (g->stream_chunk)
		cfg.stream_chunk = g->stream_chunk;
	cfg.spardl_teams = g->teams;
	scd_scheme_ctx_t *ctx = NULL;
	CHECK_EQ_INT(scd_scheme_ctx_create(&cfg, &gx.base, dev, &ctx), SC_OK);
	for (int c = 0; c < g->ncases; c++) {
		const spec_t *sp = &g->specs[c];
		gen_case(sp, P, rank, n, tmp, ref, in);
		guard_open(); /* the inputs, written by the test */
		memcpy(data, in, 4 * n);
		memset(res, 0, 4 * n);
		dense_to_coo(in, n, &coo);
		if (sp->coo)
			memset(data, 0x7f, 4 * n); /* output only */
		guard_close();
		scd_coo_t out =
		    coo; /* a sparse result into the input's arrays, as the engine */
		out.cap = n;
		scd_scheme_io_t io = {.data = data,
				      .coo = sp->coo ? &coo : NULL,
				      .residual = g->lossless ? NULL : res,
				      .out = sp->coo && sp->sparse_out ? &out : NULL,
				      .track_residual = !g->lossless && sp->coo};
		sc_status_t st = scd_scheme_run(g->scheme, ctx, &io, NULL);
		CHECK_MSG(st == SC_OK, "rank %d case %d %s: %s: %s", rank, c,
			  scd_scheme_name(g->scheme), sc_status_name(st), scd_scheme_error());
		CHECK_MSG(depth == 0, "rank %d case %d: the run left the guard open", rank, c);
		guard_open(); /* the outputs, read by the test */
		if (io.out) {
			CHECK_MSG(out.nnz != SCD_RESULT_DENSE && out.nnz <= n,
				  "rank %d case %d %s: no sparse result", rank, c,
				  scd_scheme_name(g->scheme));
			memset(got, 0, 4 * n);
			for (uint64_t k = 0; k < out.nnz; k++) {
				CHECK_MSG(out.idx[k] < n && (!k || out.idx[k] > out.idx[k - 1]),
					  "rank %d case %d %s: sparse result entry %llu", rank,
					  c, scd_scheme_name(g->scheme), (unsigned long long)k);
				got[out.idx[k]] = out.val[k];
			}
		} else {
			memcpy(got, data, 4 * n);
		}
		memcpy(tmp, res, 4 * n);
		const uint32_t *ai = NULL;
		uint64_t an = 0;
		int tracked = io.track_residual && scd_scheme_residual_added(ctx, &ai, &an);
		memset(seen, 0, n);
		for (uint64_t k = 0; tracked && k < an; k++)
			if (ai[k] < n)
				seen[ai[k]] = 1;
		guard_close();
		for (uint64_t i = 0; tracked && i < n; i++)
			CHECK_MSG(tmp[i] == 0 || seen[i],
				  "rank %d case %d %s: residual at %llu not reported", rank, c,
				  scd_scheme_name(g->scheme), (unsigned long long)i);
		if (g->lossless) {
			uint64_t wrong = 0, first = 0;
			for (uint64_t i = 0; i < n; i++)
				if (got[i] != ref[i] && !wrong++)
					first = i;
			CHECK_MSG(
			    wrong == 0,
			    "P %d rank %d case %d (d %g coo %d sparse %d) %s: %llu wrong, "
			    "first %llu: %g != %g",
			    P, rank, c, sp->density, sp->coo, sp->sparse_out,
			    scd_scheme_name(g->scheme), (unsigned long long)wrong,
			    (unsigned long long)first, got[first], ref[first]);
		} else {
			memcpy(g->res + ((size_t)c * MAX_P + (size_t)rank) * n, tmp, 4 * n);
			if (rank == 0)
				memcpy(g->out + (size_t)c * n, got, 4 * n);
		}
		g->hash[c * MAX_P + rank] = hash_bytes(got, 4 * n);
	}
	scd_scheme_ctx_destroy(ctx);
	dev->free(data), dev->free(res), dev->free(coo.idx), dev->free(coo.val);
	CHECK_MSG(nregions == 0, "rank %d: %zu allocations of the guard device left", rank,
		  nregions);
	free(in), free(ref), free(tmp), free(got), free(seen);
}

/* Every rank's result identical; lossy: inputs == result + residuals (small integers). */
static void guard_check(const guard_run_t *g, int P)
{
	const uint64_t n = GNUMEL;
	for (int c = 0; c < g->ncases; c++)
		for (int r = 1; r < P; r++)
			CHECK_MSG(g->hash[c * MAX_P + r] == g->hash[c * MAX_P],
				  "P %d case %d %s: rank %d's result differs from rank 0's", P,
				  c, scd_scheme_name(g->scheme), r);
	if (g->lossless)
		return;
	float *tmp = malloc(4 * n);
	double *sum = malloc(8 * n);
	for (int c = 0; c < g->ncases; c++) {
		double big = 0, worst = 0;
		uint64_t at = 0;
		memset(sum, 0, 8 * n);
		for (int r = 0; r < P; r++) {
			gen_rank(&g->specs[c], r, tmp);
			for (uint64_t i = 0; i < n; i++) {
				sum[i] += tmp[i];
				big = fabs(tmp[i]) > big ? fabs(tmp[i]) : big;
			}
		}
		for (uint64_t i = 0; i < n; i++) {
			double acc = g->out[(size_t)c * n + i];
			for (int r = 0; r < P; r++)
				acc += g->res[((size_t)c * MAX_P + (size_t)r) * n + i];
			if (fabs(acc - sum[i]) > worst)
				worst = fabs(acc - sum[i]), at = i;
		}
		CHECK_MSG(worst <= 1e-5 * big * P,
			  "P %d case %d (d %g) %s: mass off by %g at %llu (inputs up to %g)", P,
			  c, g->specs[c].density, scd_scheme_name(g->scheme), worst,
			  (unsigned long long)at, big);
	}
	free(tmp), free(sum);
}

static void guard_maps_open(guard_run_t *g)
{
	g->hash = shared_map(8 * (size_t)GCASES * MAX_P);
	g->out = shared_map(4 * (size_t)GCASES * GNUMEL);
	g->res = shared_map(4 * (size_t)GCASES * MAX_P * GNUMEL);
}

static void guard_maps_close(guard_run_t *g)
{
	munmap(g->hash, 8 * (size_t)GCASES * MAX_P);
	munmap(g->out, 4 * (size_t)GCASES * GNUMEL);
	munmap(g->res, 4 * (size_t)GCASES * MAX_P * GNUMEL);
}

/* The same cases through the guard over base; checked for exactness (lossless) or mass. */
static void guard_world(const scd_device_ops_t *base, guard_run_t *g, int P)
{
	guard_base = base;
	size_t nslots, bad = first_unwrapped(guard_device(), &nslots);
	CHECK_MSG(bad == nslots, "the guard device's op %zu of %zu is not wrapped", bad,
		  nslots);
	run_world(P, guard_rank, g);
	guard_base = &scd_device_cpu_ops;
	guard_check(g, P);
}

/* The other device gave what the cpu device gave: every rank's result, and (lossy) rank
 * 0's result and every rank's residual, bit for bit. */
static void guard_same(const guard_run_t *cpu, const guard_run_t *o, const char *dev, int P)
{
	const uint64_t n = GNUMEL;
	for (int c = 0; c < cpu->ncases; c++) {
		const char *what = scd_scheme_name(cpu->scheme);
		for (int r = 0; r < P; r++)
			CHECK_MSG(
			    o->hash[c * MAX_P + r] == cpu->hash[c * MAX_P + r],
			    "P %d case %d (d %g coo %d sparse %d) %s: rank %d's result on "
			    "%s differs from the cpu device's",
			    P, c, cpu->specs[c].density, cpu->specs[c].coo,
			    cpu->specs[c].sparse_out, what, r, dev);
		if (cpu->lossless)
			continue;
		CHECK_MSG(!memcmp(o->out + (size_t)c * n, cpu->out + (size_t)c * n, 4 * n),
			  "P %d case %d %s: rank 0's result on %s differs", P, c, what, dev);
		for (int r = 0; r < P; r++) {
			size_t at = ((size_t)c * MAX_P + (size_t)r) * n;
			CHECK_MSG(!memcmp(o->res + at, cpu->res + at, 4 * n),
				  "P %d case %d %s: rank %d's residual on %s differs", P, c,
				  what, r, dev);
		}
	}
}

/* Scheme s's cases through the guard over the cpu device, for P = 2..4, whole and
 * streamed; with other, the same cases again over it, compared with the cpu's. */
static void guard_scheme_on(scd_scheme_t s, const scd_device_ops_t *other)
{
	for (int P = 2; P <= 4; P++)
		for (int streamed = 0; streamed <= 1; streamed++) {
			guard_run_t g = {.scheme = s,
					 .lossless = scd_schemes[s]->lossless,
					 .stream_chunk = streamed ? 16 : 0,
					 /* SparDL: one team (Spar-Reduce-Scatter over
					  * all P), two teams at P = 4 (R-SAG); not the
					  * calibrated choice, which follows measured
					  * times and may differ between two devices' runs */
					 .teams = P == 4 && !streamed ? 2 : 1};
			g.ncases = guard_cases(g.specs);
			guard_maps_open(&g);
			guard_world(&scd_device_cpu_ops, &g, P);
			if (other) {
				guard_run_t o = g;
				guard_maps_open(&o);
				guard_world(other, &o, P);
				guard_same(&g, &o, other->name, P);
				guard_maps_close(&o);
			}
			guard_maps_close(&g);
		}
}

static void guard_scheme(scd_scheme_t s)
{
	guard_scheme_on(s, NULL);
}

void device_guard_compare(scd_scheme_t s, const scd_device_ops_t *dev)
{
	guard_scheme_on(s, dev);
}

/* One test per scheme of the registry: device_guard_dense_ring, device_guard_agsparse, ... */
#define GUARD_SCHEME_TEST_(id, name)                                                           \
	UNIT_TEST_TIMEOUT(device_guard_##name, 300)                                            \
	{                                                                                      \
		guard_scheme(SCD_SCHEME_##id);                                                 \
	}
SCD_SCHEMES(GUARD_SCHEME_TEST_)

/* ---- the guard itself ----------------------------------------------------------------- */

UNIT_TEST(device_guard_wraps_every_op)
{
	size_t nslots, bad = first_unwrapped(guard_device(), &nslots);
	CHECK_MSG(bad == nslots,
		  "the guard device's op %zu of %zu is not wrapped: add device.h's new op to "
		  "GUARD_OPS",
		  bad, nslots);
}

static int touch_work(void *arg)
{
	return (int)(*(volatile float *)arg != 0); /* a host read of device memory */
}

static int op_work(void *arg)
{
	return (int)guard_ops.count_nonzero(arg, 4) - 1; /* through an op: allowed */
}

/* Forks a child running what (0: read, 1: write, 2: work reading, 3: work calling an op) on
 * guarded memory p; returns its wait status. */
static int child_status(int what, float *p)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		volatile float *v = p;
		scd_xfer_work_t w = {what == 2 ? touch_work : op_work, p};
		if (what == 0)
			_exit(v[0] == 7.0f ? 0 : 3);
		if (what == 1)
			v[1] = 1.0f;
		if (what >= 2) { /* as inside an exchange: open, the work closes it again */
			guard_open();
			int k = guard_work(&w);
			guard_close();
			_exit(k == 0 ? 0 : 3);
		}
		_exit(0);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/* The guard works: the host cannot read or write the device's memory outside op calls
 * (nor from an exchange's work), ops and open sections can, and nesting keeps it open. */
UNIT_TEST(device_guard_traps_host_access)
{
	const scd_device_ops_t *dev = guard_device();
	float *p = dev->alloc(2 * 4096);
	CHECK_TRUE(p != NULL && depth == 0);
	guard_open();
	p[0] = 7.0f;
	guard_open(); /* nested */
	dev->clear(p + 1, 4);
	guard_close();
	p[2] = 0.0f; /* still open */
	guard_close();
	CHECK_EQ_INT(dev->count_nonzero(p, 4), 1); /* an op, with the memory closed */
	float back = 0;
	dev->to_host(&back, p, 4);
	CHECK_TRUE(back == 7.0f && depth == 0);
	for (int what = 0; what <= 2; what++) {
		int status = child_status(what, p);
		CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
			  "a host %s of guarded memory was not trapped (wait status 0x%x)",
			  what == 0   ? "read"
			  : what == 1 ? "write"
				      : "read in an exchange's work",
			  status);
	}
	int status = child_status(3, p);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "an op called from an exchange's work failed (wait status 0x%x)", status);
	dev->free(p);
	CHECK_EQ_INT(nregions, 0);
}
