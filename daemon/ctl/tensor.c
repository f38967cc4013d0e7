/*
 * tensor.c: the node tensor table (a chained hash on the name), registrations indexed by
 * id, and the shared-memory objects behind them. Tensors are float32, float64, int32 or
 * int64; COO input, sparsifiers and lossy schemes are float32 only (the other dtypes
 * always take the lossless dense ring).
 */
#include "ctl/tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "device/cuda.h"
#include "device/sketch.h"
#include "util/log.h"

#define NT_BUCKETS 1024

struct scd_tensors {
	int local_size;
	scd_tensor_free_cb on_free;
	void *on_free_arg;
	scd_ntensor_t *bucket[NT_BUCKETS];
	scd_ntensor_t *all;
	scd_reg_t **regs;	   /* by id - 1 */
	uint32_t n_regs, cap_regs; /* slots used (ids 1..n_regs), allocated */
	uint32_t free_from;	   /* no free slot below this one */
	uint32_t live, max_live;   /* registrations held, and the most allowed (0: no limit) */
	uint64_t shm_seq;
	long shm_gid; /* group of the shared memory (mode 0660), -1: none (0600) */
	scd_stats_keep_t kept;
	int gpu_served;		      /* cuda registrations allowed (device setting) */
	uint64_t gpu_limit, gpu_held; /* bytes of GPU memory: the limit (0: none), held */
};

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

sc_status_t scd_tensors_create(int local_size, scd_tensor_free_cb on_free, void *arg,
			       scd_tensors_t **t_p)
{
	scd_tensors_t *t = calloc(1, sizeof(*t));
	if (!t)
		return SC_ERR_NOMEM;
	t->local_size = local_size;
	t->on_free = on_free;
	t->on_free_arg = arg;
	t->shm_gid = -1;
	*t_p = t;
	return SC_OK;
}

void scd_tensors_set_shm_group(scd_tensors_t *t, long gid)
{
	t->shm_gid = gid;
}

void scd_tensors_gpu_policy(scd_tensors_t *t, int served, uint64_t limit_bytes)
{
	t->gpu_served = served;
	t->gpu_limit = limit_bytes;
}

void scd_tensors_reg_limit(scd_tensors_t *t, uint32_t max_regs)
{
	t->max_live = max_regs;
}

uint32_t scd_tensors_live(const scd_tensors_t *t)
{
	return t->live;
}

uint64_t scd_tensors_gpu_bytes(const scd_tensors_t *t)
{
	return t->gpu_held;
}

/* A cuda registration's GPU memory and events on the trainer's GPU, and their handles;
 * freed by gpu_release. */
static sc_status_t gpu_alloc(scd_tensors_t *t, scd_reg_t *r, const char *name, uint64_t bytes,
			     char *err, size_t err_len)
{
	const scd_cuda_ipc_t *ipc;
	int gpu = (int)r->device_ordinal, n = 0;
	if (scd_cuda_ipc_get(&ipc) != SC_OK) {
		const char *why = scd_cuda_unavailable_reason();
		snprintf(err, err_len, "tensor '%s': cuda:%d is not available on this node: %s",
			 name, gpu, *why ? why : "the GPU library lacks CUDA IPC");
		return SC_ERR_UNSUPPORTED;
	}
	sc_status_t st = ipc->devices(&n);
	if (st != SC_OK || gpu >= n) {
		snprintf(err, err_len,
			 "tensor '%s': cuda:%d is not served on this node: the daemon sees %d "
			 "GPU%s%s%s",
			 name, gpu, n, n == 1 ? "" : "s", st != SC_OK ? ": " : "",
			 st != SC_OK ? ipc->error() : "");
		return SC_ERR_UNSUPPORTED;
	}
	if (t->gpu_limit && t->gpu_held + bytes > t->gpu_limit) {
		snprintf(
		    err, err_len,
		    "tensor '%s': %llu bytes of GPU memory would exceed gpu_mem_limit_bytes "
		    "(%llu held of %llu)",
		    name, (unsigned long long)bytes, (unsigned long long)t->gpu_held,
		    (unsigned long long)t->gpu_limit);
		return SC_ERR_LIMIT;
	}
	st = ipc->alloc(gpu, bytes, &r->gpu_mem, r->mem_ipc);
	if (st == SC_OK && (st = ipc->event_create(gpu, &r->ready_ev, r->ready_ipc)) == SC_OK)
		st = ipc->event_create(gpu, &r->done_ev, r->done_ipc);
	if (st != SC_OK) {
		snprintf(err, err_len,
			 "tensor '%s': %llu bytes of GPU memory on cuda:%d and its events: %s",
			 name, (unsigned long long)bytes, gpu, ipc->error());
		ipc->event_destroy(gpu, r->ready_ev);
		ipc->free(gpu, r->gpu_mem);
		r->gpu_mem = r->ready_ev = NULL;
		return st;
	}
	r->gpu_bytes = bytes;
	t->gpu_held += bytes;
	return SC_OK;
}

static void gpu_release(scd_tensors_t *t, scd_reg_t *r)
{
	const scd_cuda_ipc_t *ipc;
	if (!r->gpu_mem || scd_cuda_ipc_get(&ipc) != SC_OK)
		return;
	int gpu = (int)r->device_ordinal;
	ipc->event_destroy(gpu, r->done_ev);
	ipc->event_destroy(gpu, r->ready_ev);
	if (ipc->free(gpu, r->gpu_mem) != SC_OK)
		scd_warn(SCD_SUB_CTL,
			 "tensor '%s', local rank %d: freeing its GPU memory on cuda:%d: %s",
			 r->hdr ? r->hdr->name : "?", r->local_rank, gpu, ipc->error());
	t->gpu_held -= r->gpu_bytes;
	r->gpu_mem = r->ready_ev = r->done_ev = NULL;
}

static void reg_unmap(scd_reg_t *r)
{
	if (r->map)
		munmap(r->map, r->map_bytes);
	if (r->shm_name[0])
		shm_unlink(r->shm_name);
	r->map = NULL;
	r->shm_name[0] = 0;
}

void scd_tensors_destroy(scd_tensors_t *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n_regs; i++) {
		if (t->regs[i]) {
			gpu_release(t, t->regs[i]);
			reg_unmap(t->regs[i]);
			free(t->regs[i]->a2a);
			free(t->regs[i]);
		}
	}
	for (scd_ntensor_t *nt = t->all, *next; nt; nt = next) {
		next = nt->all_next;
		free(nt->name);
		free(nt);
	}
	scd_stats_keep_clear(&t->kept);
	free(t->regs);
	free(t);
}

void scd_tensors_unlink_all(scd_tensors_t *t)
{
	for (uint32_t i = 0; i < t->n_regs; i++)
		if (t->regs[i] && t->regs[i]->shm_name[0])
			shm_unlink(t->regs[i]->shm_name);
}

scd_ntensor_t *scd_tensors_find(scd_tensors_t *t, const char *name)
{
	for (scd_ntensor_t *nt = t->bucket[name_hash(name) % NT_BUCKETS]; nt; nt = nt->hnext)
		if (!strcmp(nt->name, name))
			return nt;
	return NULL;
}

scd_reg_t *scd_tensors_reg(scd_tensors_t *t, uint32_t id)
{
	if (id == 0 || id > t->n_regs)
		return NULL;
	scd_reg_t *r = t->regs[id - 1];
	return r && !r->zombie ? r : NULL;
}

scd_ntensor_t *scd_tensors_first(scd_tensors_t *t)
{
	return t->all;
}

/* Faults every page in now, so that no step pays for first touches (about 10 us a page).
 * Chunk by chunk rather than with MAP_POPULATE, which holds the process's mmap lock for the
 * whole range and stalls the other threads (ZeroMQ's I/O thread among them) meanwhile. */
static void prefault(void *map, size_t bytes)
{
	const size_t chunk = 8u << 20;
	for (size_t off = 0; off < bytes; off += chunk) {
		size_t n = bytes - off < chunk ? bytes - off : chunk;
#ifdef MADV_POPULATE_WRITE
		if (madvise((char *)map + off, n, MADV_POPULATE_WRITE) == 0)
			continue;
#endif
		for (size_t p = 0; p < n; p += 4096)
			((volatile char *)map)[off + p] = 0;
	}
}

/* Creates, sizes, maps and pre-faults the shared object of a registration. */
static sc_status_t reg_map(scd_tensors_t *t, scd_reg_t *r, const char *name, uint32_t dtype,
			   uint64_t numel, uint64_t coo_cap, int residual,
			   const scd_tensor_opts_t *opts, char *err, size_t err_len)
{
	sc_shm_header_t h = {0};
	uint64_t gpu_bytes = 0;
	if (opts->device_kind == SC_DEVICE_CUDA)
		gpu_bytes = sc_shm_layout_device(&h, numel, (uint32_t)sc_dtype_size(dtype),
						 coo_cap, residual);
	else
		sc_shm_layout(&h, numel, (uint32_t)sc_dtype_size(dtype), coo_cap, residual);
	/* the pid leads (a later daemon removes the objects of one that died), a random part
	 * makes the name unguessable to anything but the trainer the reply goes to */
	uint64_t nonce;
	if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
		snprintf(err, err_len, "tensor '%s': getrandom for its shared memory name: %s",
			 name, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	snprintf(r->shm_name, sizeof(r->shm_name), "/sparsecomm.%d.%llu.%016llx", (int)getpid(),
		 (unsigned long long)++t->shm_seq, (unsigned long long)nonce);
	int fd = shm_open(r->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		snprintf(err, err_len, "shm_open(%s): %s", r->shm_name, strerror(errno));
		r->shm_name[0] = 0;
		return SC_ERR_SYSTEM;
	}
	/* widened only once it has the group: never readable by others in between */
	if (t->shm_gid >= 0 &&
	    (fchown(fd, (uid_t)-1, (gid_t)t->shm_gid) != 0 || fchmod(fd, 0660) != 0)) {
		snprintf(err, err_len, "shared memory %s for ctl_group %ld: %s", r->shm_name,
			 t->shm_gid, strerror(errno));
		goto err_unlink;
	}
	if (ftruncate(fd, (off_t)h.total_bytes) != 0) {
		snprintf(err, err_len, "cannot size shared memory of %llu bytes: %s",
			 (unsigned long long)h.total_bytes, strerror(errno));
		goto err_unlink;
	}
	void *map = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		snprintf(err, err_len, "mmap of %llu bytes: %s",
			 (unsigned long long)h.total_bytes, strerror(errno));
		goto err_unlink;
	}
	close(fd);
	prefault(map, h.total_bytes);
	h.magic = SC_SHM_MAGIC;
	h.version = SC_SHM_VERSION;
	h.header_bytes = sizeof(h);
	h.dtype = dtype;
	h.numel = numel;
	h.device_kind = opts->device_kind;
	h.device_ordinal = opts->device_ordinal;
	snprintf(h.name, sizeof(h.name), "%s", name);
	memcpy(map, &h, sizeof(h));
	r->map = map;
	r->map_bytes = h.total_bytes;
	r->hdr = map;
	r->device_kind = opts->device_kind;
	r->device_ordinal = opts->device_kind == SC_DEVICE_CUDA ? opts->device_ordinal : 0;
	char *base = map;
	if (gpu_bytes) {
		sc_status_t st = gpu_alloc(t, r, name, gpu_bytes, err, err_len);
		if (st != SC_OK) {
			reg_unmap(r);
			return st;
		}
		base = r->gpu_mem;
	}
	r->data = base + h.data_offset;
	r->data_offset = h.data_offset;
	r->residual = h.residual_offset ? (float *)(base + h.residual_offset) : NULL;
	r->coo_cap = h.coo_cap;
	r->coo_idx = h.coo_cap ? (uint32_t *)(base + h.coo_idx_offset) : NULL;
	r->coo_val = h.coo_cap ? (float *)(base + h.coo_val_offset) : NULL;
	return SC_OK;
err_unlink:
	close(fd);
	shm_unlink(r->shm_name);
	r->shm_name[0] = 0;
	return SC_ERR_SYSTEM;
}

static scd_ntensor_t *nt_new(scd_tensors_t *t, const char *name, uint32_t dtype, uint64_t numel,
			     const scd_tensor_opts_t *opts)
{
	scd_ntensor_t *nt = calloc(1, sizeof(*nt));
	if (!nt || !(nt->name = strdup(name))) {
		free(nt);
		return NULL;
	}
	nt->dtype = dtype;
	nt->numel = numel;
	nt->opts = *opts;
	scd_stats_keep_take(&t->kept, name, dtype, numel, &nt->stats);
	nt->stats.device_kind = opts->device_kind;
	snprintf(nt->stats.wire, sizeof(nt->stats.wire), "%s",
		 sc_wire_name((sc_wire_t)opts->wire));
	uint32_t b = name_hash(name) % NT_BUCKETS;
	nt->hnext = t->bucket[b];
	t->bucket[b] = nt;
	nt->all_next = t->all;
	t->all = nt;
	return nt;
}

scd_stats_keep_t *scd_tensors_kept(scd_tensors_t *t)
{
	return &t->kept;
}

void scd_tensors_reset_stats(scd_tensors_t *t)
{
	for (scd_ntensor_t *nt = t->all; nt; nt = nt->all_next)
		nt->stats = (scd_tensor_stats_t){.device_kind = nt->opts.device_kind};
	scd_stats_keep_clear(&t->kept);
}

static void nt_free(scd_tensors_t *t, scd_ntensor_t *nt)
{
	scd_ntensor_t **pp = &t->bucket[name_hash(nt->name) % NT_BUCKETS];
	while (*pp != nt)
		pp = &(*pp)->hnext;
	*pp = nt->hnext;
	for (pp = &t->all; *pp != nt;)
		pp = &(*pp)->all_next;
	*pp = nt->all_next;
	if (t->on_free)
		t->on_free(t->on_free_arg, nt->name);
	scd_stats_keep_put(&t->kept, nt->name, nt->dtype, nt->numel, &nt->stats);
	free(nt->name);
	free(nt);
}

sc_status_t scd_tensors_register(scd_tensors_t *t, struct scd_session *s, int local_rank,
				 const char *name, uint32_t dtype, uint64_t numel,
				 const scd_tensor_opts_t *opts, uint64_t max_bytes,
				 scd_reg_t **reg_p, char *err, size_t err_len)
{
	size_t esz = sc_dtype_size(dtype);
	if (!name[0] || strlen(name) > 255) {
		snprintf(err, err_len, "tensor name must be 1 to 255 bytes");
		return SC_ERR_INVALID;
	}
	for (size_t i = 0; name[i]; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
			/* never printed raw: a newline or an escape would forge log lines */
			snprintf(err, err_len,
				 "tensor name refused: byte %zu, after '%.*s', is the control "
				 "character 0x%02x (names are printable text)",
				 i, (int)i, name, (unsigned char)name[i]);
			return SC_ERR_INVALID;
		}
	if (!esz) {
		snprintf(err, err_len, "tensor '%s': unknown dtype %u", name, dtype);
		return SC_ERR_INVALID;
	}
	if (dtype != SC_FLOAT32 && (opts->coo_capacity > 0 || opts->allow_lossy ||
				    opts->sparsifier != SC_SPARSIFY_NONE)) {
		snprintf(err, err_len,
			 "tensor '%s': %s tensors take dense input and the lossless dense ring "
			 "only (COO input, sparsifiers and allow_lossy need float32)",
			 name, sc_dtype_name(dtype));
		return SC_ERR_UNSUPPORTED;
	}
	if (opts->wire > SC_WIRE_BF16) {
		snprintf(err, err_len, "tensor '%s': unknown wire format %u", name, opts->wire);
		return SC_ERR_INVALID;
	}
	/* Only the dense ring converts to 16 bits: a tensor that asks for it cannot also
	 * ask for what the other schemes do (sparsecomm.h, sc_wire_t). */
	if (opts->wire != SC_WIRE_NATIVE &&
	    (dtype != SC_FLOAT32 || opts->sparsifier != SC_SPARSIFY_NONE || opts->allow_lossy ||
	     opts->coo_capacity > 0 ||
	     (opts->scheme[0] && strcmp(opts->scheme, "dense_ring")))) {
		snprintf(
		    err, err_len,
		    "tensor '%s': a %s wire is for dense float32 tensors on the dense ring "
		    "(%s%s%s%s%s given)",
		    name, sc_wire_name((sc_wire_t)opts->wire),
		    dtype != SC_FLOAT32 ? sc_dtype_name(dtype) : "",
		    opts->sparsifier != SC_SPARSIFY_NONE ? " a sparsifier" : "",
		    opts->allow_lossy ? " allow_lossy" : "",
		    opts->coo_capacity > 0 ? " COO input" : "",
		    opts->scheme[0] && strcmp(opts->scheme, "dense_ring") ? " a pinned scheme"
									  : "");
		return SC_ERR_INVALID;
	}
	if (numel == 0 || numel > UINT32_MAX - 1 || numel * esz > max_bytes) {
		snprintf(err, err_len,
			 "tensor '%s': %llu elements is outside 1 .. %llu (max_tensor_bytes)",
			 name, (unsigned long long)numel,
			 (unsigned long long)(max_bytes / esz < UINT32_MAX - 1
						  ? max_bytes / esz
						  : UINT32_MAX - 1));
		return SC_ERR_INVALID;
	}
	if (opts->sketch_rows > SCD_SKETCH_MAX_ROWS ||
	    !(isfinite(opts->sketch_cols) && opts->sketch_cols >= 0 &&
	      opts->sketch_cols <= 1e6)) {
		snprintf(
		    err, err_len,
		    "tensor '%s': sketch rows %u (at most %d) or columns %g (0 to 1e6) out "
		    "of range",
		    name, opts->sketch_rows, SCD_SKETCH_MAX_ROWS, opts->sketch_cols);
		return SC_ERR_INVALID;
	}
	if (opts->coo_capacity > numel) {
		snprintf(err, err_len, "tensor '%s': coo_capacity %llu exceeds numel %llu",
			 name, (unsigned long long)opts->coo_capacity,
			 (unsigned long long)numel);
		return SC_ERR_INVALID;
	}
	if (opts->sparsifier > SC_SPARSIFY_NATURAL ||
	    ((opts->sparsifier == SC_SPARSIFY_TOPK || opts->sparsifier == SC_SPARSIFY_DGC ||
	      opts->sparsifier == SC_SPARSIFY_EXDYNA) &&
	     !(opts->density > 0 && opts->density <= 1)) ||
	    (opts->sparsifier == SC_SPARSIFY_THRESHOLD && !(opts->threshold > 0))) {
		snprintf(err, err_len,
			 "tensor '%s': sparsifier %u needs a density in (0, 1] (top-k, DGC, "
			 "ExDyna) or a threshold > 0 (threshold)",
			 name, opts->sparsifier);
		return SC_ERR_INVALID;
	}
	if (opts->device_kind > SC_DEVICE_CUDA) {
		snprintf(err, err_len, "tensor '%s': unknown device kind %u", name,
			 opts->device_kind);
		return SC_ERR_INVALID;
	}
	if (opts->device_kind == SC_DEVICE_CUDA && !t->gpu_served) {
		snprintf(err, err_len,
			 "tensor '%s': this daemon serves cpu tensors only (device = cpu)",
			 name);
		return SC_ERR_UNSUPPORTED;
	}
	scd_ntensor_t *nt = scd_tensors_find(t, name);
	if (nt && nt->opts.device_kind != opts->device_kind) {
		snprintf(err, err_len,
			 "tensor '%s' differs between trainers of this node: registered on %s "
			 "before, on %s by local rank %d",
			 name, nt->opts.device_kind ? "cuda" : "cpu",
			 opts->device_kind ? "cuda" : "cpu", local_rank);
		return SC_ERR_MISMATCH;
	}
	if (nt) {
		if (nt->slot[local_rank]) {
			snprintf(err, err_len,
				 "tensor '%s' is already registered by local rank %d", name,
				 local_rank);
			return SC_ERR_BUSY;
		}
		if (nt->opts.wire != opts->wire) {
			snprintf(
			    err, err_len,
			    "tensor '%s' differs between trainers of this node: wire format "
			    "%s before, %s by local rank %d",
			    name, sc_wire_name((sc_wire_t)nt->opts.wire),
			    sc_wire_name((sc_wire_t)opts->wire), local_rank);
			return SC_ERR_MISMATCH;
		}
		if (nt->dtype != dtype || nt->numel != numel) {
			int other = 0;
			while (other < SCD_MAX_LOCAL && !nt->slot[other])
				other++;
			snprintf(
			    err, err_len,
			    "tensor '%s' differs between trainers of this node: local rank %d "
			    "registered %s x %llu, local rank %d %s x %llu",
			    name, other, sc_dtype_name(nt->dtype),
			    (unsigned long long)nt->numel, local_rank, sc_dtype_name(dtype),
			    (unsigned long long)numel);
			return SC_ERR_MISMATCH;
		}
	}
	if (t->max_live && t->live >= t->max_live) {
		snprintf(
		    err, err_len,
		    "tensor '%s' (local rank %d): this node already holds %u registrations, "
		    "the most max_registrations allows",
		    name, local_rank, t->live);
		return SC_ERR_LIMIT;
	}
	/* a released registration's slot (and id) is taken again: the table never grows
	 * past the most registrations held at once */
	uint32_t slot = t->free_from;
	while (slot < t->n_regs && t->regs[slot])
		slot++;
	if (slot == UINT32_MAX - 1) {
		snprintf(err, err_len, "tensor '%s': registration ids exhausted (%u)", name,
			 slot);
		return SC_ERR_LIMIT;
	}
	scd_reg_t *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, err_len, "tensor '%s': out of memory for its registration", name);
		return SC_ERR_NOMEM;
	}
	if (slot == t->cap_regs) {
		uint32_t cap = t->cap_regs ? t->cap_regs * 2 : 256;
		scd_reg_t **regs =
		    cap > t->cap_regs ? realloc(t->regs, (size_t)cap * sizeof(*regs)) : NULL;
		if (!regs) {
			free(r);
			snprintf(err, err_len,
				 "tensor '%s': out of memory for the table of %u registrations",
				 name, cap);
			return SC_ERR_NOMEM;
		}
		t->regs = regs;
		t->cap_regs = cap;
	}
	int residual = opts->allow_lossy || (opts->sparsifier != SC_SPARSIFY_NONE &&
					     opts->sparsifier != SC_SPARSIFY_NATURAL);
	sc_status_t st =
	    reg_map(t, r, name, dtype, numel, opts->coo_capacity, residual, opts, err, err_len);
	if (st != SC_OK) {
		free(r);
		return st;
	}
	if (!nt && !(nt = nt_new(t, name, dtype, numel, opts))) {
		gpu_release(t, r);
		reg_unmap(r);
		free(r);
		snprintf(err, err_len, "tensor '%s': out of memory for the node tensor", name);
		return SC_ERR_NOMEM;
	}
	t->live++;
	t->regs[slot] = r;
	t->n_regs = slot == t->n_regs ? slot + 1 : t->n_regs;
	t->free_from = slot + 1;
	r->id = slot + 1;
	r->session = s;
	r->nt = nt;
	r->local_rank = local_rank;
	nt->slot[local_rank] = r;
	nt->n_regs++;
	*reg_p = r;
	return SC_OK;
}

void scd_tensors_release(scd_tensors_t *t, scd_reg_t *r)
{
	scd_ntensor_t *nt = r->nt;
	if (nt && (nt->state == SCD_NT_RUNNING || nt->state == SCD_NT_ANNOUNCED) && r->handle) {
		r->zombie = 1; /* the engine still reads this buffer; freed when it is done */
		r->session = NULL;
		return;
	}
	if (nt) {
		if (nt->slot[r->local_rank] == r) {
			nt->slot[r->local_rank] = NULL;
			nt->n_regs--;
		}
		if (r->handle && nt->submitted > 0)
			nt->submitted--;
		if (nt->n_regs == 0 && nt->state != SCD_NT_RUNNING)
			nt_free(t, nt);
	}
	t->regs[r->id - 1] = NULL;
	if (r->id - 1 < t->free_from)
		t->free_from = r->id - 1;
	t->live--;
	gpu_release(t, r);
	reg_unmap(r);
	free(r->a2a);
	free(r);
}
