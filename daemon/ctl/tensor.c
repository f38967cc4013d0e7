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
#include <sys/statvfs.h>
#include <unistd.h>

#include "device/share.h"
#include "device/sketch.h"
#include "scheme/registry.h"
#include "util/log.h"
#include "util/psname.h"
#include "util/shmguard.h"

#define NT_BUCKETS 1024
/* Objects up to this size are prepared on the loop (tens of microseconds). */
#define SCD_PREP_INLINE_BYTES (1u << 20)
/* Mappings of vm.max_map_count left to the rest of the daemon. */
#define SCD_MAP_HEADROOM 4096

/* A registration being prepared on a worker thread (scd_tensors_register_async). */
typedef struct scd_prep {
	uv_work_t work;
	scd_tensors_t *t;
	scd_reg_t *r;
	sc_shm_header_t h;
	int fd;
	uint64_t seq;
	sc_status_t st;
	char err[512];
	scd_reg_ready_cb cb;
	void *arg;
	struct scd_prep *next;
} scd_prep_t;

/* Released objects whose unmapping and unlinking is left to a worker (reg_bury): a trainer
 * that exits with tens of thousands of registrations costs the loop no more than a list. */
typedef struct {
	void *map;
	size_t bytes;
	char name[64];
} scd_grave_t;

typedef struct scd_burial {
	uv_work_t work;
	scd_tensors_t *t;
	scd_grave_t *g;
	size_t n;
} scd_burial_t;

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
	int map_cap;		   /* max_live is the kernel's bound, below max_registrations */
	uint64_t shm_seq;
	long shm_gid; /* group of the shared memory (mode 0660), -1: none (0600) */
	scd_stats_keep_t kept;
	scd_owed_keep_t owed;	      /* steps owed for names no trainer holds (owed.h) */
	int gpu_served;		      /* cuda registrations allowed (device setting) */
	uint64_t gpu_limit, gpu_held; /* bytes of GPU memory: the limit (0: none), held */
	struct scd_prep *preps;	      /* registrations being prepared on workers */
	scd_grave_t *grave;	      /* released objects for the next burial */
	size_t n_grave, cap_grave;
	scd_burial_t *burying; /* the burial on a worker now, NULL: none */
	uv_loop_t *loop;       /* theirs */
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
	if (scd_shmguard_install() != SC_OK) {
		scd_error(SCD_SUB_CTL, "cannot install the SIGBUS handler of shared memory: %s",
			  strerror(errno));
		return SC_ERR_SYSTEM;
	}
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

/* The kernel's bound on this process's mappings (vm.max_map_count), 0 when unknown. */
static uint32_t max_map_count(void)
{
	static uint32_t n;
	if (!n) {
		FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
		unsigned long v = 0;
		if (f && fscanf(f, "%lu", &v) == 1 && v > 0 && v < UINT32_MAX)
			n = (uint32_t)v;
		if (f)
			fclose(f);
	}
	return n;
}

void scd_tensors_reg_limit(scd_tensors_t *t, uint32_t max_regs)
{
	/* each registration is one mapping (shmguard.h keeps it one); the rest of the
	 * process (libraries, thread stacks, arenas) keeps the headroom */
	uint32_t maps = max_map_count();
	uint32_t cap = maps > 2 * SCD_MAP_HEADROOM ? maps - SCD_MAP_HEADROOM : 0;
	t->map_cap = cap && (!max_regs || max_regs > cap);
	t->max_live = t->map_cap ? cap : max_regs;
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
 * freed by gpu_release. theirs: the trainer's own ordinal, for messages (the header that
 * carries it is written only once the registration is ready). */
static sc_status_t gpu_alloc(scd_tensors_t *t, scd_reg_t *r, const char *name, uint64_t bytes,
			     int theirs, char *err, size_t err_len)
{
	const scd_device_share_t *ipc;
	int gpu = -1, n = 0;
	char uuid[SCD_DEVICE_UUID_TEXT];
	scd_device_uuid_text(r->uuid, uuid);
	if (scd_device_share_get(SCD_DEVICE_CUDA, &ipc) != SC_OK) {
		const char *why = scd_device_unavailable_reason(SCD_DEVICE_CUDA);
		snprintf(err, err_len,
			 "tensor '%s': cuda:%d (%s) is not available on this node: %s", name,
			 theirs, uuid, *why ? why : "the GPU library lacks CUDA IPC");
		return SC_ERR_UNSUPPORTED;
	}
	const char *lost = scd_device_lost(SCD_DEVICE_CUDA);
	if (lost) {
		snprintf(err, err_len,
			 "tensor '%s': the node's GPU is lost (%s): cuda tensors are refused "
			 "until the daemon restarts",
			 name, lost);
		return SC_ERR_SYSTEM;
	}
	/* the trainer's ordinal is its own (CUDA_VISIBLE_DEVICES): the UUID names the GPU */
	sc_status_t st = ipc->devices(&n);
	if (st == SC_OK)
		st = ipc->find(r->uuid, &gpu);
	if (st != SC_OK) {
		snprintf(
		    err, err_len,
		    "tensor '%s' (local rank %d): its GPU %s (the trainer's cuda:%d) is not "
		    "one this daemon serves: it sees %d GPU%s%s%s",
		    name, r->local_rank, uuid, theirs, n, n == 1 ? "" : "s",
		    st != SC_ERR_NOT_FOUND ? ": " : "",
		    st != SC_ERR_NOT_FOUND ? ipc->error() : "");
		return SC_ERR_UNSUPPORTED;
	}
	r->device_ordinal = (uint32_t)gpu;
	if (gpu != theirs)
		scd_debug(SCD_SUB_CTL,
			  "tensor '%s', local rank %d: the trainer's cuda:%d is this daemon's "
			  "cuda:%d (%s)",
			  name, r->local_rank, theirs, gpu, uuid);
	/* what the allocation really takes: exported memory is rounded up to whole IPC
	 * granules (scd_device_share_bytes), so that its handle reaches nothing else */
	uint64_t asked = bytes;
	bytes = scd_device_share_bytes(bytes);
	if (!bytes) {
		snprintf(err, err_len, "tensor '%s': %llu bytes of GPU memory is too large",
			 name, (unsigned long long)asked);
		return SC_ERR_LIMIT;
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
		if (r->gpu_mem || r->ready_ev) /* off this thread, as gpu_release does */
			scd_device_share_free_async(ipc, gpu, r->gpu_mem, r->ready_ev, NULL,
						    err);
		r->gpu_mem = r->ready_ev = NULL;
		return st;
	}
	r->gpu_bytes = bytes;
	t->gpu_held += bytes;
	return SC_OK;
}

/* Off this (the loop) thread: a GPU's free waits for the whole device (share.h). */
static void gpu_release(scd_tensors_t *t, scd_reg_t *r)
{
	const scd_device_share_t *ipc;
	char what[320];
	if (!r->gpu_mem || scd_device_share_get(SCD_DEVICE_CUDA, &ipc) != SC_OK)
		return;
	snprintf(what, sizeof(what), "tensor '%s', local rank %d", r->hdr ? r->hdr->name : "?",
		 r->local_rank);
	scd_device_share_free_async(ipc, (int)r->device_ordinal, r->gpu_mem, r->ready_ev,
				    r->done_ev, what);
	t->gpu_held -= r->gpu_bytes;
	r->gpu_mem = r->ready_ev = r->done_ev = NULL;
}

static void reg_unmap(scd_reg_t *r)
{
	if (r->map) {
		scd_shmguard_remove(r->guard);
		munmap(r->map, r->map_bytes);
	}
	if (r->shm_name[0])
		shm_unlink(r->shm_name);
	r->map = NULL;
	r->shm_name[0] = 0;
}

static void bury_work(uv_work_t *w)
{
	scd_burial_t *b = w->data;
	for (size_t i = 0; i < b->n; i++) {
		munmap(b->g[i].map, b->g[i].bytes);
		shm_unlink(b->g[i].name);
	}
}

static void bury_start(scd_tensors_t *t);

static void bury_done(uv_work_t *w, int status)
{
	scd_burial_t *b = w->data;
	scd_tensors_t *t = b->t;
	if (status == UV_ECANCELED)
		bury_work(w);
	t->burying = NULL;
	free(b->g);
	free(b);
	if (t->n_grave)
		bury_start(t);
}

/* Hands the released objects to a worker (when it cannot, unmaps them here). */
static void bury_start(scd_tensors_t *t)
{
	scd_burial_t *b = calloc(1, sizeof(*b));
	if (b) {
		*b = (scd_burial_t){.t = t, .g = t->grave, .n = t->n_grave};
		b->work.data = b;
		t->grave = NULL;
		t->n_grave = t->cap_grave = 0;
		if (uv_queue_work(t->loop, &b->work, bury_work, bury_done) == 0) {
			t->burying = b;
			return;
		}
		t->grave = b->g, t->n_grave = t->cap_grave = b->n;
		free(b);
	}
	scd_burial_t now = {.g = t->grave, .n = t->n_grave};
	now.work.data = &now;
	bury_work(&now.work);
	free(t->grave);
	t->grave = NULL;
	t->n_grave = t->cap_grave = 0;
}

/* Unmaps and unlinks a released registration's object, on a worker when there is a loop. */
static void reg_bury(scd_tensors_t *t, scd_reg_t *r)
{
	if (!t->loop || !r->map || !r->shm_name[0]) {
		reg_unmap(r);
		return;
	}
	if (t->n_grave == t->cap_grave) {
		size_t cap = t->cap_grave ? t->cap_grave * 2 : 256;
		scd_grave_t *g = realloc(t->grave, cap * sizeof(*g));
		if (!g) {
			reg_unmap(r);
			return;
		}
		t->grave = g;
		t->cap_grave = cap;
	}
	scd_shmguard_remove(r->guard);
	scd_grave_t *g = &t->grave[t->n_grave++];
	*g = (scd_grave_t){.map = r->map, .bytes = r->map_bytes};
	snprintf(g->name, sizeof(g->name), "%s", r->shm_name);
	r->map = NULL;
	r->shm_name[0] = 0;
	if (!t->burying)
		bury_start(t);
}

void scd_tensors_destroy(scd_tensors_t *t)
{
	if (!t)
		return;
	/* registrations still being prepared: their workers end before the memory goes */
	for (scd_prep_t *p = t->preps; p; p = p->next) {
		p->r->session = NULL;
		uv_cancel((uv_req_t *)&p->work);
	}
	while (t->preps || t->burying)
		uv_run(t->loop, UV_RUN_ONCE);
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
	scd_owed_clear(&t->owed);
	free(t->regs);
	free(t);
	/* nothing exported outlives the daemon */
	scd_device_share_drain(10000);
}

void scd_tensors_unlink_all(scd_tensors_t *t)
{
	for (size_t i = 0; i < t->n_grave; i++)
		shm_unlink(t->grave[i].name);
	for (size_t i = 0; t->burying && i < t->burying->n; i++)
		shm_unlink(t->burying->g[i].name);
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
	return r && !r->zombie && !r->preparing ? r : NULL;
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

/*
 * Sizes the shared object and allocates its pages now (tmpfs takes an ftruncate past its
 * free space, and the first touch of a page it cannot allocate raises SIGBUS): a /dev/shm
 * too small is SC_ERR_NOMEM naming it and the sizes.
 */
static sc_status_t reserve(int fd, const char *name, uint64_t bytes, char *err, size_t err_len)
{
	int e;
	do
		e = posix_fallocate(fd, 0, (off_t)bytes);
	while (e == EINTR);
	if (e == 0)
		return SC_OK;
	struct statvfs vfs;
	if ((e == ENOSPC || e == ENOMEM) && statvfs("/dev/shm", &vfs) == 0) {
		snprintf(
		    err, err_len,
		    "tensor '%s': /dev/shm has no room for its %llu bytes of shared memory "
		    "(%llu of %llu bytes free): enlarge /dev/shm (docker run --shm-size) "
		    "or register less",
		    name, (unsigned long long)bytes,
		    (unsigned long long)vfs.f_bavail * vfs.f_frsize,
		    (unsigned long long)vfs.f_blocks * vfs.f_frsize);
		return SC_ERR_NOMEM;
	}
	snprintf(err, err_len, "tensor '%s': cannot allocate %llu bytes of shared memory: %s",
		 name, (unsigned long long)bytes, strerror(e));
	return e == ENOSPC || e == ENOMEM ? SC_ERR_NOMEM : SC_ERR_SYSTEM;
}

/* Creates, sizes, maps and pre-faults the shared object of a registration. */
static sc_status_t reg_map(scd_tensors_t *t, scd_reg_t *r, const char *name, uint32_t dtype,
			   uint64_t numel, uint64_t coo_cap, int residual,
			   const scd_tensor_opts_t *opts, sc_shm_header_t *h_p, int *fd_p,
			   char *err, size_t err_len)
{
	sc_shm_header_t h = {0};
	uint64_t gpu_bytes = 0;
	sc_status_t st = SC_OK;
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
		snprintf(err, err_len, "tensor '%s': shm_open(%s): %s", name, r->shm_name,
			 strerror(errno));
		r->shm_name[0] = 0;
		return SC_ERR_SYSTEM;
	}
	/* widened only once it has the group: never readable by others in between */
	if (t->shm_gid >= 0 &&
	    (fchown(fd, (uid_t)-1, (gid_t)t->shm_gid) != 0 || fchmod(fd, 0660) != 0)) {
		snprintf(err, err_len, "shared memory %s for ctl_group %ld: %s", r->shm_name,
			 t->shm_gid, strerror(errno));
		st = SC_ERR_SYSTEM;
		goto err_unlink;
	}
	if (ftruncate(fd, (off_t)h.total_bytes) != 0) {
		snprintf(err, err_len,
			 "tensor '%s': cannot size shared memory of %llu bytes: %s", name,
			 (unsigned long long)h.total_bytes, strerror(errno));
		st = SC_ERR_SYSTEM;
		goto err_unlink;
	}
	void *map = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		snprintf(err, err_len, "tensor '%s': mmap of %llu bytes: %s%s", name,
			 (unsigned long long)h.total_bytes, strerror(errno),
			 errno == ENOMEM ? " (the process may be at vm.max_map_count mappings)"
					 : "");
		st = SC_ERR_NOMEM;
		goto err_unlink;
	}
	if (scd_shmguard_add(map, h.total_bytes, &r->guard) != SC_OK) {
		munmap(map, h.total_bytes);
		snprintf(err, err_len, "tensor '%s': the table of shared mappings is full",
			 name);
		st = SC_ERR_LIMIT;
		goto err_unlink;
	}
	h.magic = SC_SHM_MAGIC;
	h.version = SC_SHM_VERSION;
	h.header_bytes = sizeof(h);
	h.dtype = dtype;
	h.numel = numel;
	h.device_kind = opts->device_kind;
	h.device_ordinal = opts->device_ordinal;
	snprintf(h.name, sizeof(h.name), "%s", name);
	r->map = map;
	r->map_bytes = h.total_bytes;
	r->hdr = map;
	*h_p = h;
	*fd_p = fd;
	r->device_kind = opts->device_kind;
	r->device_ordinal = 0; /* a cuda tensor's: gpu_alloc finds it from the UUID */
	memcpy(r->uuid, opts->device_uuid, sizeof(r->uuid));
	char *base = map;
	if (gpu_bytes) {
		st = gpu_alloc(t, r, name, gpu_bytes, (int)opts->device_ordinal, err, err_len);
		if (st != SC_OK) {
			close(fd);
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
	return st;
}

/* The slow part of a registration, on a worker thread when it has a loop: its pages
 * allocated (reserve) and mapped in (prefault). Touches the registration's own object
 * only, which nobody else knows yet. */
static sc_status_t reg_fill(int fd, scd_reg_t *r, const char *name, char *err, size_t err_len)
{
	sc_status_t st = reserve(fd, name, r->map_bytes, err, err_len);
	if (st == SC_OK)
		prefault(r->map, r->map_bytes);
	return st;
}

/* Ends a registration's preparation on the loop: the header goes in last, over reserved
 * pages (the trainer checks it when it maps the object). */
static void reg_ready(scd_reg_t *r, const sc_shm_header_t *h, int fd)
{
	close(fd);
	memcpy(r->map, h, sizeof(*h));
	r->preparing = 0;
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
	nt->pset = scd_pset_of(name, NULL);
	scd_stats_keep_take(&t->kept, name, dtype, numel, &nt->stats);
	scd_owed_take(&t->owed, name, &nt->carry);
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
		t->on_free(t->on_free_arg, nt->name, nt->presel_key);
	scd_stats_keep_put(&t->kept, nt->name, nt->dtype, nt->numel, &nt->stats);
	scd_owed_put(&t->owed, nt->name, &nt->carry);
	free(nt->name);
	free(nt);
}

/* The first option (other than the wire and the device, told apart by the caller) in which
 * two registrations of one name differ, or NULL: the node's trainers share the tensor's
 * sum, its scheme and its residual. */
static const char *opts_differ(const scd_tensor_opts_t *a, const scd_tensor_opts_t *b)
{
	if (!a->allow_lossy != !b->allow_lossy)
		return "allow_lossy";
	if (a->sparsifier != b->sparsifier)
		return "sparsifier";
	if (a->density != b->density || a->threshold != b->threshold)
		return "density or threshold";
	if (a->coo_capacity != b->coo_capacity)
		return "coo_capacity";
	if (a->sketch_rows != b->sketch_rows || a->sketch_cols != b->sketch_cols)
		return "sketch rows or columns";
	if (strcmp(a->scheme, b->scheme))
		return "pinned scheme";
	if (a->block != b->block)
		return "block";
	return NULL;
}

/* Checks a registration, creates and maps its object (not yet reserved nor filled in) and
 * enters it in the tables, preparing: *h_p is its header to write and *fd_p its object's
 * descriptor, both for reg_fill and reg_ready. */
static sc_status_t reg_begin(scd_tensors_t *t, struct scd_session *s, int local_rank,
			     const char *name, uint32_t dtype, uint64_t numel,
			     const scd_tensor_opts_t *opts, uint64_t max_bytes,
			     scd_reg_t **reg_p, sc_shm_header_t *h_p, int *fd_p, char *err,
			     size_t err_len)
{
	size_t esz = sc_dtype_size(dtype), name_len;
	scd_pset_of(name, &name_len); /* the trainer's name, without its process set */
	if (!name_len || name_len > 255) {
		snprintf(err, err_len, "tensor name must be 1 to 255 bytes");
		return SC_ERR_INVALID;
	}
	for (size_t i = 0; i < name_len; i++)
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
	if (opts->src_type &&
	    sc_src_type_carrier((sc_src_type_t)opts->src_type) != (int)dtype) {
		snprintf(err, err_len,
			 "tensor '%s': values of type %s (src_type %u) are not "
			 "carried in a %s buffer",
			 name,
			 sc_src_type_name((sc_src_type_t)opts->src_type, (sc_dtype_t)dtype),
			 opts->src_type, sc_dtype_name(dtype));
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
	if (opts->block > numel && numel > 0) {
		snprintf(err, err_len, "tensor '%s': block %u exceeds numel %llu", name,
			 opts->block, (unsigned long long)numel);
		return SC_ERR_INVALID;
	}
	if (opts->sparsifier > SC_SPARSIFY_BLOCK_TOPK ||
	    ((opts->sparsifier == SC_SPARSIFY_TOPK || opts->sparsifier == SC_SPARSIFY_DGC ||
	      opts->sparsifier == SC_SPARSIFY_EXDYNA ||
	      opts->sparsifier == SC_SPARSIFY_BLOCK_TOPK) &&
	     !(opts->density > 0 && opts->density <= 1)) ||
	    (opts->sparsifier == SC_SPARSIFY_THRESHOLD && !(opts->threshold > 0))) {
		snprintf(err, err_len,
			 "tensor '%s': sparsifier %u needs a density in (0, 1] (top-k, DGC, "
			 "ExDyna, block top-K) or a threshold > 0 (threshold)",
			 name, opts->sparsifier);
		return SC_ERR_INVALID;
	}
	scd_scheme_t pinned;
	if (opts->scheme[0] && strcmp(opts->scheme, "auto") &&
	    scd_scheme_parse(opts->scheme, &pinned) != 0) {
		snprintf(err, err_len,
			 "tensor '%s': unknown scheme '%s' (sparsectl config get scheme lists "
			 "them; empty or auto: the cost model chooses)",
			 name, opts->scheme);
		return SC_ERR_INVALID;
	}
	if (opts->device_kind > SC_DEVICE_CUDA) {
		snprintf(err, err_len, "tensor '%s': unknown device kind %u", name,
			 opts->device_kind);
		return SC_ERR_INVALID;
	}
	if (opts->device_kind == SC_DEVICE_CUDA &&
	    opts->device_uuid_len != sizeof(opts->device_uuid)) {
		snprintf(
		    err, err_len,
		    "tensor '%s' (local rank %d): a cuda registration names its GPU by its "
		    "%zu-byte UUID, %u bytes given",
		    name, local_rank, sizeof(opts->device_uuid), opts->device_uuid_len);
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
		const char *field = opts_differ(&nt->opts, opts);
		if (field) {
			snprintf(
			    err, err_len,
			    "tensor '%s' differs between trainers of this node: local rank "
			    "%d registers it with another %s",
			    name, local_rank, field);
			return SC_ERR_MISMATCH;
		}
		if (nt->dtype != dtype || nt->numel != numel ||
		    nt->opts.src_type != opts->src_type) {
			int other = 0;
			while (other < SCD_MAX_LOCAL && !nt->slot[other])
				other++;
			snprintf(
			    err, err_len,
			    "tensor '%s' differs between trainers of this node: local rank %d "
			    "registered %s x %llu, local rank %d %s x %llu",
			    name, other,
			    sc_src_type_name((sc_src_type_t)nt->opts.src_type, nt->dtype),
			    (unsigned long long)nt->numel, local_rank,
			    sc_src_type_name((sc_src_type_t)opts->src_type, dtype),
			    (unsigned long long)numel);
			return SC_ERR_MISMATCH;
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
	}
	if (t->max_live && t->live >= t->max_live) {
		snprintf(
		    err, err_len,
		    "tensor '%s' (local rank %d): this node already holds %u registrations, "
		    "the most %s allows",
		    name, local_rank, t->live,
		    t->map_cap ? "the kernel's vm.max_map_count (less headroom for the "
				 "daemon's other mappings)"
			       : "max_registrations");
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
	r->local_rank = local_rank; /* named by reg_map's errors */
	sc_status_t st = reg_map(t, r, name, dtype, numel, opts->coo_capacity, residual, opts,
				 h_p, fd_p, err, err_len);
	if (st != SC_OK) {
		free(r);
		return st;
	}
	if (!nt && !(nt = nt_new(t, name, dtype, numel, opts))) {
		close(*fd_p);
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
	r->preparing = 1;
	nt->slot[local_rank] = r;
	nt->n_regs++;
	nt->let_go &= ~(1ULL << local_rank);
	*reg_p = r;
	return SC_OK;
}

sc_status_t scd_tensors_register(scd_tensors_t *t, struct scd_session *s, int local_rank,
				 const char *name, uint32_t dtype, uint64_t numel,
				 const scd_tensor_opts_t *opts, uint64_t max_bytes,
				 scd_reg_t **reg_p, char *err, size_t err_len)
{
	sc_shm_header_t h;
	scd_reg_t *r;
	int fd;
	sc_status_t st = reg_begin(t, s, local_rank, name, dtype, numel, opts, max_bytes, &r,
				   &h, &fd, err, err_len);
	if (st == SC_OK && (st = reg_fill(fd, r, name, err, err_len)) != SC_OK) {
		close(fd);
		scd_tensors_release(t, r);
	} else if (st == SC_OK) {
		reg_ready(r, &h, fd);
		*reg_p = r;
	}
	return st;
}

static void prep_work(uv_work_t *w)
{
	scd_prep_t *p = w->data;
	p->st = reg_fill(p->fd, p->r, p->h.name, p->err, sizeof(p->err));
}

static void prep_done(uv_work_t *w, int status)
{
	scd_prep_t *p = w->data, **pp = &p->t->preps;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	struct scd_session *s = p->r->session;
	if (status == UV_ECANCELED && p->st == SC_OK) {
		p->st = SC_ERR_SHUTDOWN;
		snprintf(p->err, sizeof(p->err), "tensor '%s': the daemon is shutting down",
			 p->h.name);
	}
	scd_reg_t *r = p->r;
	if (p->st != SC_OK || !s) {
		close(p->fd);
		scd_tensors_release(p->t, r);
		r = NULL;
	} else {
		reg_ready(r, &p->h, p->fd);
	}
	p->cb(p->arg, s, p->seq, r, p->st, p->err);
	free(p);
}

sc_status_t scd_tensors_register_async(scd_tensors_t *t, uv_loop_t *loop, struct scd_session *s,
				       int local_rank, const char *name, uint32_t dtype,
				       uint64_t numel, const scd_tensor_opts_t *opts,
				       uint64_t max_bytes, uint64_t seq, scd_reg_ready_cb cb,
				       void *arg, scd_reg_t **reg_p, char *err, size_t err_len)
{
	scd_prep_t *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, err_len, "tensor '%s': out of memory for its registration", name);
		return SC_ERR_NOMEM;
	}
	sc_status_t st = reg_begin(t, s, local_rank, name, dtype, numel, opts, max_bytes, &p->r,
				   &p->h, &p->fd, err, err_len);
	if (st == SC_OK && p->r->map_bytes <= SCD_PREP_INLINE_BYTES) {
		/* small: done at once, cheaper than the trip to a worker and back */
		if ((st = reg_fill(p->fd, p->r, name, err, err_len)) != SC_OK) {
			close(p->fd);
			scd_tensors_release(t, p->r);
		} else {
			reg_ready(p->r, &p->h, p->fd);
			*reg_p = p->r;
		}
	}
	if (st != SC_OK || !p->r->preparing) {
		free(p);
		return st;
	}
	*p = (scd_prep_t){.t = t,
			  .r = p->r,
			  .h = p->h,
			  .fd = p->fd,
			  .seq = seq,
			  .cb = cb,
			  .arg = arg,
			  .next = t->preps};
	p->work.data = p;
	t->loop = loop;
	if (uv_queue_work(loop, &p->work, prep_work, prep_done) != 0) {
		close(p->fd);
		scd_tensors_release(t, p->r);
		free(p);
		snprintf(err, err_len, "tensor '%s': cannot queue its preparation", name);
		return SC_ERR_SYSTEM;
	}
	t->preps = p;
	return SC_IN_PROGRESS;
}

void scd_tensors_forget_session(scd_tensors_t *t, struct scd_session *s)
{
	for (scd_prep_t *p = t->preps; p; p = p->next)
		if (p->r->session == s)
			p->r->session = NULL;
}

void scd_tensors_forgive(scd_tensors_t *t, int l)
{
	for (scd_ntensor_t *nt = t->all; nt; nt = nt->all_next)
		nt->carry.count[l] = 0;
	scd_owed_forgive(&t->owed, l);
}

void scd_tensors_release(scd_tensors_t *t, scd_reg_t *r)
{
	scd_ntensor_t *nt = r->nt;
	if (nt &&
	    (((nt->state == SCD_NT_RUNNING || nt->state == SCD_NT_ANNOUNCED) && r->handle) ||
	     nt->presel_refs > 0)) {
		r->zombie = 1; /* the engine still reads this buffer; freed when it is done */
		r->session = NULL;
		return;
	}
	if (nt) {
		if (nt->slot[r->local_rank] == r) {
			nt->slot[r->local_rank] = NULL;
			nt->n_regs--;
			if (nt->n_regs > 0)
				nt->let_go |= 1ULL << r->local_rank;
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
	reg_bury(t, r);
	free(r->a2a);
	free(r);
}

int scd_tensors_mem_lost(const scd_reg_t *r, char *err, size_t err_len)
{
	uint64_t at;
	if (!r->map || !scd_shmguard_lost(r->guard, &at))
		return 0;
	snprintf(err, err_len,
		 "tensor '%s' (local rank %d): its shared memory lost its pages from byte %llu "
		 "of %llu (the trainer truncated it, or /dev/shm ran out): the daemon no "
		 "longer shares it with the trainer; register the tensor again",
		 r->nt ? r->nt->name : r->hdr->name, r->local_rank, (unsigned long long)at,
		 (unsigned long long)r->map_bytes);
	return 1;
}
