/*
 * tensor.c: registering a tensor with the daemon and mapping its shared buffer.
 *
 * The daemon creates one POSIX shared-memory object per tensor (shm_layout.h: a versioned
 * header, the data at a 64-byte aligned offset, then the optional COO input area) and
 * answers the registration with the object's name and size. The library maps the whole
 * object MAP_SHARED and checks the header against what it asked for (magic, layout
 * version, header size, element type and count, offsets inside the object) before
 * handing out pointers, so a library and a daemon of different builds refuse each other
 * instead of misreading memory. The name is reserved in the client's list before the
 * request goes out, so two threads registering the same name cannot both succeed.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "shm_layout.h"

#define SCHEME_NAME_MAX 63
#define OPTS_NEWER_MAX	4096 /* the largest struct_size taken from a newer sparsecomm.h */

/* Whether the caller's opts (of its own struct_size) contains field. */
#define OPTS_HAS(o, field)                                                                     \
	((o)->struct_size >= offsetof(sc_tensor_opts_t, field) + sizeof((o)->field))

static sc_status_t check_opts(const sc_client_t *c, const char *name, size_t numel,
			      const sc_tensor_opts_t *o, Sparsecomm__TensorOpts *w)
{
	if (o->struct_size < offsetof(sc_tensor_opts_t, allow_lossy) + sizeof(o->allow_lossy))
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: registering tensor '%s': opts->"
		    "struct_size %u is too small (set it to sizeof(sc_tensor_opts_t))",
		    c->rank, name, o->struct_size);
	/* a newer sparsecomm.h's options: those this library does not know must be left at
	 * their defaults (zero), else it would run the tensor without them */
	if (o->struct_size > sizeof(*o)) {
		const unsigned char *tail = (const unsigned char *)o;
		size_t at = sizeof(*o);

		if (o->struct_size > OPTS_NEWER_MAX)
			return scl_error(
			    SC_ERR_INVALID,
			    "rank %d: registering tensor '%s': opts->struct_size %u "
			    "is not the size of any sc_tensor_opts_t (set it to "
			    "sizeof(sc_tensor_opts_t))",
			    c->rank, name, o->struct_size);
		while (at < o->struct_size && !tail[at])
			at++;
		if (at < o->struct_size)
			return scl_error(
			    SC_ERR_UNSUPPORTED,
			    "rank %d: registering tensor '%s': opts of %u bytes set "
			    "byte %zu, an option this library (whose "
			    "sc_tensor_opts_t has %zu bytes) does not have",
			    c->rank, name, o->struct_size, at, sizeof(*o));
	}
	w->allow_lossy = o->allow_lossy != 0;
	if (OPTS_HAS(o, sparsifier))
		w->sparsifier = o->sparsifier;
	if (OPTS_HAS(o, density))
		w->density = o->density;
	if (OPTS_HAS(o, threshold))
		w->threshold = o->threshold;
	if (OPTS_HAS(o, scheme) && o->scheme)
		w->scheme = (char *)o->scheme;
	if (OPTS_HAS(o, coo_capacity))
		w->coo_capacity = o->coo_capacity;
	if (OPTS_HAS(o, sketch_rows))
		w->sketch_rows = o->sketch_rows;
	if (OPTS_HAS(o, sketch_cols))
		w->sketch_cols = o->sketch_cols;
	if (OPTS_HAS(o, device))
		w->device_kind = (uint32_t)o->device;
	if (OPTS_HAS(o, device_ordinal) && w->device_kind == SC_DEVICE_CUDA) {
		if (o->device_ordinal < 0)
			return scl_error(SC_ERR_INVALID,
					 "rank %d: registering tensor '%s': GPU ordinal %d is "
					 "negative",
					 c->rank, name, o->device_ordinal);
		w->device_ordinal = (uint32_t)o->device_ordinal;
	}
	if (OPTS_HAS(o, wire))
		w->wire = (uint32_t)o->wire;
	if (OPTS_HAS(o, block))
		w->block = o->block;
	if (OPTS_HAS(o, src_type))
		w->src_type = (uint32_t)o->src_type;
	if (OPTS_HAS(o, process_set)) {
		sc_status_t st = scl_pset_check(c, o->process_set, name);
		if (st != SC_OK)
			return st;
		w->process_set = (uint32_t)o->process_set;
	}
	if (w->wire > SC_WIRE_BF16)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': unknown wire format %u "
				 "(SC_WIRE_NATIVE, SC_WIRE_FP16 or SC_WIRE_BF16)",
				 c->rank, name, w->wire);
	if (w->device_kind != SC_DEVICE_CPU && w->device_kind != SC_DEVICE_CUDA)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': unknown device kind %u "
				 "(SC_DEVICE_CPU or SC_DEVICE_CUDA)",
				 c->rank, name, w->device_kind);
	if (w->sketch_rows > 15 || !(isfinite(w->sketch_cols) && w->sketch_cols >= 0))
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: registering tensor '%s': sketch rows %u (at most 15) "
		    "or columns %g (a finite value >= 0) out of range",
		    c->rank, name, w->sketch_rows, w->sketch_cols);
	if (w->sparsifier > SC_SPARSIFY_BLOCK_TOPK)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': unknown "
				 "sparsifier %u",
				 c->rank, name, w->sparsifier);
	if ((w->sparsifier == SC_SPARSIFY_TOPK || w->sparsifier == SC_SPARSIFY_DGC ||
	     w->sparsifier == SC_SPARSIFY_EXDYNA || w->sparsifier == SC_SPARSIFY_BLOCK_TOPK) &&
	    !(w->density > 0.0 && w->density <= 1.0))
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': density %g "
				 "is not in (0, 1]",
				 c->rank, name, w->density);
	if (w->sparsifier == SC_SPARSIFY_THRESHOLD &&
	    !(isfinite(w->threshold) && w->threshold >= 0.0))
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': threshold %g "
				 "is not a finite value >= 0",
				 c->rank, name, w->threshold);
	if (strlen(w->scheme) > SCHEME_NAME_MAX)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': scheme name "
				 "too long",
				 c->rank, name);
	if (w->coo_capacity && numel > (size_t)UINT32_MAX + 1)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': COO input "
				 "takes uint32 indices, numel %zu is too large",
				 c->rank, name, numel);
	if (w->coo_capacity > SIZE_MAX / 16)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': coo_capacity "
				 "%zu is too large",
				 c->rank, name, (size_t)w->coo_capacity);
	return SC_OK;
}

/* What in the header the daemon wrote differs from what this library writes and what was
 * asked, whatever the placement (NULL: nothing). */
static const char *header_mismatch(const sc_tensor_t *t, const sc_shm_header_t *h)
{
	if (h->magic != SC_SHM_MAGIC)
		return "bad magic";
	if (h->version != SC_SHM_VERSION)
		return "layout version differs";
	if (h->header_bytes != sizeof(sc_shm_header_t))
		return "header size differs";
	if (h->dtype != (uint32_t)t->dtype || h->numel != t->numel)
		return "element type or count differs from the registration";
	return NULL;
}

/* A cpu tensor's areas: inside the object, where the reply said, aligned. */
static const char *layout_cpu(const sc_tensor_t *t, const sc_shm_header_t *h, uint64_t bytes,
			      uint64_t data_offset, uint64_t coo_cap)
{
	uint64_t esz = sc_dtype_size(t->dtype);

	if (h->device_kind != SC_DEVICE_CPU)
		return "a device buffer for a cpu tensor";
	if (h->data_offset != data_offset || data_offset % 64 || data_offset < sizeof(*h) ||
	    data_offset + t->numel * esz > bytes)
		return "data offset is not where the reply said, aligned and inside the object";
	if (h->coo_cap < coo_cap)
		return "COO area smaller than asked";
	if (coo_cap && (h->coo_idx_offset % 64 || h->coo_val_offset % 64 ||
			h->coo_idx_offset + h->coo_cap * 4 > bytes ||
			h->coo_val_offset + h->coo_cap * esz > bytes))
		return "COO area outside the object or misaligned";
	return NULL;
}

/* A cuda tensor's areas: the layout of sc_shm_layout_device in one GPU allocation, whose
 * size goes to *alloc_p; the shared object holds the header page only. */
static const char *layout_cuda(const sc_tensor_t *t, const sc_shm_header_t *h, uint64_t bytes,
			       uint64_t coo_cap, uint64_t *alloc_p)
{
	sc_shm_header_t e;

	if (h->device_ordinal != (uint32_t)t->device_ordinal)
		return "the buffer is on another GPU than asked";
	if (bytes < SC_SHM_DATA_OFFSET || h->total_bytes != SC_SHM_DATA_OFFSET)
		return "the shared object is not the header page";
	if (h->coo_cap < coo_cap || h->coo_cap > t->numel)
		return "COO area smaller than asked or larger than the tensor";
	*alloc_p = sc_shm_layout_device(&e, t->numel, (uint32_t)sc_dtype_size(t->dtype),
					h->coo_cap, h->residual_offset != 0);
	if (h->data_offset != e.data_offset || h->coo_idx_offset != e.coo_idx_offset ||
	    h->coo_val_offset != e.coo_val_offset || h->residual_offset != e.residual_offset)
		return "offsets differ from the GPU allocation's layout";
	return NULL;
}

static sc_status_t header_error(const sc_client_t *c, const sc_tensor_t *t,
				const sc_shm_header_t *h, const char *why)
{
	return scl_error(SC_ERR_PROTOCOL,
			 "rank %d: tensor '%s': the daemon's shared buffer "
			 "does not match this library (%s; magic %#x version %u header %u, "
			 "expected %#x, %u, %zu)",
			 c->rank, t->name, why, h->magic, h->version, h->header_bytes,
			 SC_SHM_MAGIC, SC_SHM_VERSION, sizeof(sc_shm_header_t));
}

/* Maps the daemon's shared object (the whole buffer, or a cuda tensor's header page). */
static sc_status_t map_object(const sc_client_t *c, const sc_tensor_t *t,
			      const Sparsecomm__RegisterReply *r, void **map_p)
{
	struct stat st;
	sc_status_t status;
	void *map;
	int fd;

	if (r->shm_bytes < sizeof(sc_shm_header_t) || r->shm_bytes > SIZE_MAX)
		return scl_error(SC_ERR_PROTOCOL,
				 "rank %d: tensor '%s': the daemon gave a shared "
				 "buffer of %llu bytes",
				 c->rank, t->name, (unsigned long long)r->shm_bytes);
	do
		fd = shm_open(r->shm_name, O_RDWR | O_CLOEXEC, 0);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return scl_error(SC_ERR_SYSTEM,
				 "rank %d: tensor '%s': cannot open shared memory "
				 "'%s': %s",
				 c->rank, t->name, r->shm_name, strerror(errno));
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < r->shm_bytes) {
		status = scl_error(SC_ERR_PROTOCOL,
				   "rank %d: tensor '%s': shared memory '%s' is "
				   "smaller (%lld bytes) than the %llu the daemon announced",
				   c->rank, t->name, r->shm_name, (long long)st.st_size,
				   (unsigned long long)r->shm_bytes);
		close(fd);
		return status;
	}
	map = mmap(NULL, r->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return scl_error(SC_ERR_SYSTEM,
				 "rank %d: tensor '%s': cannot map shared memory "
				 "'%s' (%llu bytes): %s",
				 c->rank, t->name, r->shm_name,
				 (unsigned long long)r->shm_bytes, strerror(errno));
	*map_p = map;
	return SC_OK;
}

/* Opens a cuda tensor's GPU allocation and events from the reply's IPC handles; base_p:
 * the allocation's address in this process. */
static sc_status_t open_cuda(const sc_client_t *c, sc_tensor_t *t,
			     const Sparsecomm__RegisterReply *r, const sc_shm_header_t *h,
			     uint64_t coo_cap, char **base_p)
{
	char what[SCL_NAME_MAX + 64];
	const char *why;
	uint64_t alloc = 0;
	sc_status_t st;

	snprintf(what, sizeof(what), "rank %d: tensor '%s'", c->rank, t->name);
	if (h->device_kind != SC_DEVICE_CUDA)
		return scl_error(SC_ERR_UNSUPPORTED,
				 "%s: the daemon answered a cuda:%d registration with a "
				 "buffer in host memory (it does not serve GPU tensors)",
				 what, t->device_ordinal);
	why = layout_cuda(t, h, r->shm_bytes, coo_cap, &alloc);
	if (why)
		return header_error(c, t, h, why);
	if (r->mem_ipc.len != SCL_CUDA_HANDLE_BYTES ||
	    r->ready_event_ipc.len != SCL_CUDA_HANDLE_BYTES ||
	    r->done_event_ipc.len != SCL_CUDA_HANDLE_BYTES)
		return scl_error(SC_ERR_PROTOCOL,
				 "%s: the daemon's IPC handles for its GPU allocation of %llu "
				 "bytes have %zu, %zu and %zu bytes, not %d",
				 what, (unsigned long long)alloc, r->mem_ipc.len,
				 r->ready_event_ipc.len, r->done_event_ipc.len,
				 SCL_CUDA_HANDLE_BYTES);
	st = scl_cuda_open(what, t->device_ordinal, r->mem_ipc.data, r->ready_event_ipc.data,
			   r->done_event_ipc.data, &t->cuda);
	if (st != SC_OK)
		return st;
	*base_p = scl_cuda_base(t->cuda);
	return SC_OK;
}

static sc_status_t map_tensor(sc_client_t *c, sc_tensor_t *t,
			      const Sparsecomm__RegisterReply *r, uint64_t coo_cap)
{
	const sc_shm_header_t *h;
	const char *why;
	sc_status_t status;
	char *base;
	void *map = NULL;

	status = map_object(c, t, r, &map);
	if (status != SC_OK)
		return status;
	h = map;
	base = map;
	why = header_mismatch(t, h);
	if (!why && t->device == SC_DEVICE_CPU)
		why = layout_cpu(t, h, r->shm_bytes, r->data_offset, coo_cap);
	status = why ? header_error(c, t, h, why) : SC_OK;
	if (status == SC_OK && t->device == SC_DEVICE_CUDA)
		status = open_cuda(c, t, r, h, coo_cap, &base);
	if (status != SC_OK) {
		munmap(map, r->shm_bytes);
		return status;
	}
	t->map = map;
	t->map_bytes = r->shm_bytes;
	t->data = base + h->data_offset;
	if (coo_cap) {
		t->coo_cap = coo_cap;
		t->coo_idx = (uint32_t *)(base + h->coo_idx_offset);
		t->coo_val = base + h->coo_val_offset;
	}
	t->residual = h->residual_offset ? (const float *)(base + h->residual_offset) : NULL;
	t->tensor_id = r->tensor_id;
	scl_tensor_result_reset(t); /* no result count until an operation gives one */
	return SC_OK;
}

/* Removes a tensor that failed to register from the client's list and frees it. */
static void tensor_drop(sc_client_t *c, sc_tensor_t *t)
{
	sc_tensor_t **pp;

	pthread_mutex_lock(&c->mu);
	for (pp = &c->tensors; *pp && *pp != t; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = t->next;
	pthread_mutex_unlock(&c->mu);
	free(t);
}

/* Whether this client released name and has not registered it since (client->mu held);
 * take: forget it. */
static int released_name(sc_client_t *c, const char *name, int take)
{
	for (int i = 0; i < SCL_RELEASED; i++)
		if (c->released[i][0] && strcmp(c->released[i], name) == 0) {
			if (take)
				c->released[i][0] = '\0';
			return 1;
		}
	return 0;
}

/* Reserves the name in the client's list (SC_ERR_BUSY when taken). */
static sc_status_t tensor_reserve(sc_client_t *c, sc_tensor_t *t)
{
	sc_status_t st = SC_OK;

	pthread_mutex_lock(&c->mu);
	if (c->dead != SC_OK) {
		st = scl_error(c->dead, "rank %d: registering tensor '%s': %s", c->rank,
			       t->name, c->dead_msg);
		goto out;
	}
	for (sc_tensor_t *o = c->tensors; o; o = o->next)
		if (strcmp(o->name, t->name) == 0 && o->pset == t->pset) {
			st = scl_error(SC_ERR_BUSY,
				       "rank %d: tensor '%s' is already registered%s", c->rank,
				       t->name, t->pset ? " in this process set" : "");
			goto out;
		}
	t->next = c->tensors;
	c->tensors = t;
out:
	pthread_mutex_unlock(&c->mu);
	return st;
}

static sc_status_t register_in(sc_client_t *client, const char *name, sc_dtype_t dtype,
			       size_t numel, const sc_tensor_opts_t *opts,
			       sc_tensor_t **tensor_p)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__RegisterTensor reg = SPARSECOMM__REGISTER_TENSOR__INIT;
	Sparsecomm__TensorOpts wopts = SPARSECOMM__TENSOR_OPTS__INIT;
	Sparsecomm__DaemonMsg *reply = NULL;
	char what[SCL_NAME_MAX + 64];
	size_t len, esz = sc_dtype_size(dtype);
	sc_tensor_t *t;
	sc_status_t st;

	if (!client || !name || !tensor_p)
		return scl_error(SC_ERR_INVALID, "sc_register: NULL client, name or tensor_p");
	len = strlen(name);
	if (len == 0 || len > SCL_NAME_MAX)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: tensor name must be 1 to %d bytes, "
				 "'%.40s...' has %zu",
				 client->rank, SCL_NAME_MAX, name, len);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return scl_error(
			    SC_ERR_INVALID,
			    "rank %d: tensor name refused: byte %zu, after '%.*s', is "
			    "the control character 0x%02x (names are printable text)",
			    client->rank, i, (int)i, name, (unsigned char)name[i]);
	if (esz == 0)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': unknown dtype "
				 "%d",
				 client->rank, name, (int)dtype);
	if (numel == 0 || numel > SIZE_MAX / 16)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': element count "
				 "%zu is out of range",
				 client->rank, name, numel);
	if (opts) {
		st = check_opts(client, name, numel, opts, &wopts);
		if (st != SC_OK)
			return st;
		if (wopts.src_type &&
		    sc_src_type_carrier((sc_src_type_t)wopts.src_type) != (int)dtype)
			return scl_error(SC_ERR_INVALID,
					 "rank %d: registering tensor '%s': values of type %s "
					 "(src_type %u) are not carried in a %s buffer",
					 client->rank, name,
					 sc_src_type_name((sc_src_type_t)wopts.src_type, dtype),
					 wopts.src_type, sc_dtype_name(dtype));
		reg.opts = &wopts;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return scl_error(SC_ERR_NOMEM,
				 "rank %d: registering tensor '%s': out of memory",
				 client->rank, name);
	t->client = client;
	memcpy(t->name, name, len + 1);
	t->pset = (int)wopts.process_set;
	t->dtype = dtype;
	t->numel = numel;
	t->device = (sc_device_kind_t)wopts.device_kind;
	t->device_ordinal = (int)wopts.device_ordinal;
	snprintf(what, sizeof(what), "rank %d: registering tensor '%s'", client->rank, name);
	/* a GPU this process cannot use is refused before the daemon allocates for it */
	unsigned char uuid[SCL_CUDA_UUID_BYTES];
	if (t->device == SC_DEVICE_CUDA) {
		/* the daemon numbers the node's GPUs its own way: it finds this one by UUID */
		st = scl_cuda_uuid(what, t->device_ordinal, uuid);
		if (st != SC_OK) {
			free(t);
			return st;
		}
		wopts.device_uuid.data = uuid;
		wopts.device_uuid.len = sizeof(uuid);
	}
	st = tensor_reserve(client, t);
	if (st != SC_OK) {
		free(t);
		return st;
	}
	reg.name = t->name;
	reg.dtype = dtype;
	reg.numel = numel;
	pthread_mutex_lock(&client->mu);
	reg.replaces = released_name(client, t->name, 0);
	pthread_mutex_unlock(&client->mu);
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_REG;
	msg.reg = &reg;
	st = scl_client_call(client, &msg, 0, what, &reply);
	if (st != SC_OK)
		goto err_drop;
	if (reply->body_case != SPARSECOMM__DAEMON_MSG__BODY_REG) {
		st = scl_error(SC_ERR_PROTOCOL, "%s: unexpected reply (body %d)", what,
			       (int)reply->body_case);
		goto err_drop;
	}
	st = map_tensor(client, t, reply->reg, wopts.coo_capacity);
	if (st != SC_OK && scl_closing(client)) /* the goodbye took the object meanwhile */
		st = scl_error(SC_ERR_SHUTDOWN,
			       "%s: the client was finalized (sc_finalize) before its buffer "
			       "was mapped",
			       what);
	if (st != SC_OK)
		goto err_drop;
	sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	pthread_mutex_lock(&client->mu);
	t->ready = 1;
	released_name(client, t->name, 1);
	pthread_mutex_unlock(&client->mu);
	*tensor_p = t;
	return SC_OK;

err_drop:
	if (reply)
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	tensor_drop(client, t);
	return st;
}

SC_API sc_status_t sc_register_ex(sc_client_t *client, const char *name, sc_dtype_t dtype,
				  size_t numel, const sc_tensor_opts_t *opts,
				  sc_tensor_t **tensor_p)
{
	sc_status_t st = scl_enter_call(client, "sc_register");

	if (st != SC_OK)
		return st;
	scl_pset_sweep(client); /* room for it: timed-out agreements that have ended */
	return scl_left(client, register_in(client, name, dtype, numel, opts, tensor_p));
}

SC_API sc_status_t sc_register(sc_client_t *client, const char *name, sc_dtype_t dtype,
			       size_t numel, sc_tensor_t **tensor_p)
{
	return sc_register_ex(client, name, dtype, numel, NULL, tensor_p);
}

/* Unmaps a tensor taken out of the client's list and frees it. */
static void tensor_unmap_free(sc_tensor_t *t)
{
	scl_cuda_close(t->cuda);
	if (t->map)
		munmap(t->map, t->map_bytes);
	free(t->a2a_recv);
	free(t);
}

static sc_status_t release_in(sc_client_t *client, sc_tensor_t *tensor)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__ReleaseTensor rel = SPARSECOMM__RELEASE_TENSOR__INIT;
	Sparsecomm__DaemonMsg *reply = NULL;
	char what[SCL_NAME_MAX + 64];
	sc_tensor_t **pp;
	sc_status_t st = SC_OK;

	if (!client || !tensor || tensor->client != client)
		return scl_error(SC_ERR_INVALID, "sc_tensor_release: NULL client or a tensor "
						 "of another client");
	snprintf(what, sizeof(what), "rank %d: releasing tensor '%s'", client->rank,
		 tensor->name);
	pthread_mutex_lock(&client->mu);
	for (pp = &client->tensors; *pp && *pp != tensor; pp = &(*pp)->next)
		;
	if (!*pp || !tensor->ready)
		st = scl_error(SC_ERR_INVALID, "%s: not a registered tensor of this client",
			       what);
	else if (!scl_op_settle(client, tensor))
		st = scl_error(SC_ERR_BUSY, "%s: an operation is in flight", what);
	pthread_mutex_unlock(&client->mu);
	if (st != SC_OK)
		return st;
	rel.tensor_id = tensor->tensor_id;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_RELEASE;
	msg.release = &rel;
	st = scl_client_call(client, &msg, 0, what, &reply);
	if (reply)
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&client->mu);
	for (pp = &client->tensors; *pp && *pp != tensor; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = tensor->next;
	scl_op_detach(client, tensor);
	if (!released_name(client, tensor->name, 0)) {
		snprintf(client->released[client->released_next], SCL_NAME_MAX + 1, "%s",
			 tensor->name);
		client->released_next = (client->released_next + 1) % SCL_RELEASED;
	}
	pthread_mutex_unlock(&client->mu);
	tensor_unmap_free(tensor);
	return SC_OK;
}

SC_API sc_status_t sc_tensor_release(sc_client_t *client, sc_tensor_t *tensor)
{
	sc_status_t st = scl_enter_call(client, "sc_tensor_release");

	if (st != SC_OK)
		return st;
	return scl_left(client, release_in(client, tensor));
}

/* See internal.h. */
void scl_tensor_unmap_all_in_child(sc_client_t *c)
{
	sc_tensor_t *t = c->tensors, *next;

	c->tensors = NULL;
	for (; t; t = next) {
		next = t->next;
		tensor_unmap_free(t);
	}
}

void scl_tensor_free_all(sc_client_t *c)
{
	sc_tensor_t *t, *next;

	pthread_mutex_lock(&c->mu);
	t = c->tensors;
	c->tensors = NULL;
	pthread_mutex_unlock(&c->mu);
	for (; t; t = next) {
		next = t->next;
		tensor_unmap_free(t);
	}
}

SC_API void *sc_tensor_data(const sc_tensor_t *tensor)
{
	return tensor ? tensor->data : NULL;
}

SC_API const char *sc_tensor_name(const sc_tensor_t *tensor)
{
	return tensor ? tensor->name : NULL;
}

SC_API sc_dtype_t sc_tensor_dtype(const sc_tensor_t *tensor)
{
	return tensor ? tensor->dtype : (sc_dtype_t)-1;
}

SC_API size_t sc_tensor_numel(const sc_tensor_t *tensor)
{
	return tensor ? tensor->numel : 0;
}

SC_API uint32_t *sc_tensor_coo_indices(const sc_tensor_t *tensor)
{
	return tensor ? tensor->coo_idx : NULL;
}

SC_API void *sc_tensor_coo_values(const sc_tensor_t *tensor)
{
	return tensor ? tensor->coo_val : NULL;
}

void scl_tensor_result_reset(sc_tensor_t *t)
{
	((volatile sc_shm_header_t *)t->map)->result_nnz = UINT64_MAX;
}

SC_API size_t sc_tensor_result_nnz(const sc_tensor_t *tensor)
{
	if (!tensor || !tensor->map)
		return SC_RESULT_DENSE;
	/* a sparse result's entries (at most coo_cap), or an allgather's total (numel) */
	uint64_t n = ((const volatile sc_shm_header_t *)tensor->map)->result_nnz;
	return n <= (tensor->coo_cap ? tensor->coo_cap : tensor->numel) ? (size_t)n
									: SC_RESULT_DENSE;
}

SC_API sc_status_t sc_tensor_result_counts(const sc_tensor_t *tensor, size_t *counts, int n)
{
	if (!tensor || !counts)
		return scl_error(SC_ERR_INVALID,
				 "sc_tensor_result_counts: NULL tensor or counts");
	sc_client_t *c = tensor->client;
	sc_status_t st = scl_enter_call(c, "sc_tensor_result_counts");
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	int have = tensor->a2a_n;
	if (have && n == have)
		for (int r = 0; r < n; r++)
			counts[r] = (size_t)tensor->a2a_recv[r];
	pthread_mutex_unlock(&c->mu);
	/* the error's text before the call leaves: a finalize waiting for it frees the
	 * tensor */
	if (!have)
		st =
		    scl_error(SC_ERR_INVALID,
			      "tensor '%s': no alltoall has completed on it since the last one "
			      "began",
			      tensor->name);
	else if (n != have)
		st = scl_error(SC_ERR_INVALID,
			       "tensor '%s': room for %d counts, the alltoall received from %d "
			       "ranks",
			       tensor->name, n, have);
	scl_leave(c);
	return st;
}

SC_API const float *sc_tensor_residual(const sc_tensor_t *tensor)
{
	return tensor ? tensor->residual : NULL;
}

static sc_status_t stats_in(sc_client_t *client, const sc_tensor_t *tensor,
			    sc_tensor_stats_t *stats_p)
{
	/* struct_size: this header's, or an older one's (which ended before exchange_s,
	 * before cpu_s, or before wire): the fields it has are filled, nothing past it is
	 * written */
	size_t size = stats_p ? stats_p->struct_size : 0;
	if (!client || !tensor || !stats_p)
		return scl_error(SC_ERR_INVALID,
				 "sc_tensor_stats: NULL client, tensor or stats_p");
	if (size < offsetof(sc_tensor_stats_t, exchange_s) || size > sizeof(*stats_p))
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: stats of tensor '%s': struct_size %zu is not "
		    "sizeof(sc_tensor_stats_t) of this library (%zu) or of an older "
		    "sparsecomm.h (from %zu)",
		    client->rank, tensor->name, size, sizeof(*stats_p),
		    offsetof(sc_tensor_stats_t, exchange_s));
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Empty empty = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__DaemonMsg *reply = NULL;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATS;
	msg.stats = &empty;
	sc_status_t st = scl_client_call(client, &msg, 0, "stats", &reply);
	if (st != SC_OK)
		return st;
	st = SC_ERR_NOT_FOUND;
	if (reply->body_case == SPARSECOMM__DAEMON_MSG__BODY_STATS) {
		for (size_t i = 0; i < reply->stats->n_tensors; i++) {
			const Sparsecomm__TensorStats *ts = reply->stats->tensors[i];
			/* a name is a name within its process set */
			if (!ts->name || strcmp(ts->name, tensor->name) ||
			    ts->process_set != (uint32_t)tensor->pset)
				continue;
			sc_tensor_stats_t s = {.struct_size = (uint32_t)size};
			s.calls = ts->calls;
			s.errors = ts->errors;
			s.bytes_sent = ts->bytes_sent;
			s.bytes_received = ts->bytes_received;
			s.time_s = ts->time_s;
			snprintf(s.scheme, sizeof(s.scheme), "%s",
				 ts->scheme ? ts->scheme : "");
			s.predicted_s = ts->predicted_s;
			s.measured_s = ts->measured_s;
			s.density = ts->density;
			s.densification = ts->densification;
			s.imbalance = ts->imbalance;
			s.exchange_s = ts->exchange_s;
			s.cpu_s = ts->cpu_s;
			snprintf(s.wire, sizeof(s.wire), "%s", ts->wire ? ts->wire : "");
			memcpy(stats_p, &s, size);
			st = SC_OK;
			break;
		}
	}
	sparsecomm__daemon_msg__free_unpacked(reply, NULL);
	if (st != SC_OK)
		scl_error(st, "stats of tensor '%s': the daemon does not know it",
			  tensor->name);
	return st;
}

SC_API sc_status_t sc_tensor_stats(sc_client_t *client, const sc_tensor_t *tensor,
				   sc_tensor_stats_t *stats_p)
{
	sc_status_t st = scl_enter_call(client, "sc_tensor_stats");

	if (st != SC_OK)
		return st;
	return scl_left(client, stats_in(client, tensor, stats_p));
}

SC_API sc_device_kind_t sc_tensor_device(const sc_tensor_t *tensor, int *ordinal_p)
{
	sc_device_kind_t kind = tensor ? tensor->device : SC_DEVICE_CPU;

	if (ordinal_p)
		*ordinal_p = kind == SC_DEVICE_CUDA ? tensor->device_ordinal : 0;
	return kind;
}

SC_API sc_status_t sc_tensor_set_stream(sc_tensor_t *tensor, void *stream)
{
	if (!tensor || !tensor->ready)
		return scl_error(SC_ERR_INVALID, "sc_tensor_set_stream: no registered tensor");
	if (!tensor->cuda)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: tensor '%s' is a cpu tensor: it has no stream",
				 tensor->client->rank, tensor->name);
	sc_client_t *c = tensor->client;
	sc_status_t st = scl_enter_call(c, "sc_tensor_set_stream");
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	tensor->stream = stream;
	pthread_mutex_unlock(&c->mu);
	return scl_left(c, SC_OK);
}

SC_API sc_status_t sc_tensor_set_shape(sc_tensor_t *tensor, int ndim, const uint64_t *dims)
{
	if (!tensor || !tensor->ready)
		return scl_error(SC_ERR_INVALID, "sc_tensor_set_shape: no registered tensor");
	sc_client_t *c = tensor->client;
	if (ndim < 0 || ndim > SC_MAX_DIMS || (ndim && !dims))
		return scl_error(SC_ERR_INVALID,
				 "rank %d: tensor '%s': a shape of %d dimensions (0 to %d, "
				 "dims not NULL)",
				 c->rank, tensor->name, ndim, SC_MAX_DIMS);
	uint64_t prod = 1;
	int over = 0;
	for (int i = 0; i < ndim; i++) {
		over |= dims[i] && prod > UINT64_MAX / dims[i];
		prod *= dims[i];
	}
	/* an empty tensor's shape on its one-element stand-in (sparsecomm.h) */
	int empty = ndim && !over && prod == 0 && tensor->numel == 1;
	if (ndim && !empty && (over || prod != tensor->numel))
		return scl_error(SC_ERR_INVALID,
				 "rank %d: tensor '%s': a shape of %d dimensions whose product "
				 "is not its %zu elements",
				 c->rank, tensor->name, ndim, tensor->numel);
	sc_status_t st = scl_enter_call(c, "sc_tensor_set_shape");
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	tensor->ndim = ndim;
	if (ndim)
		memcpy(tensor->dims, dims, sizeof(*dims) * (size_t)ndim);
	pthread_mutex_unlock(&c->mu);
	return scl_left(c, SC_OK);
}

/* ---- grouped operations: a tensor's next operation as a member of the open group ---- */

static sc_status_t group_begin_in(sc_client_t *client, int n_members, sc_group_t *group_p)
{
	if (!client || !group_p)
		return scl_error(SC_ERR_INVALID, "sc_group_begin: NULL client or group_p");
	if (n_members < 1 || n_members > SC_GROUP_MAX)
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: a group of %d operations: from 1 to %d may be grouped",
		    client->rank, n_members, SC_GROUP_MAX);
	pthread_mutex_lock(&client->mu);
	if (client->group_open) {
		sc_group_t open = client->group_open;
		pthread_mutex_unlock(&client->mu);
		return scl_error(SC_ERR_BUSY,
				 "rank %d: group %llu is still open (sc_group_end closes it)",
				 client->rank, (unsigned long long)open);
	}
	client->group_open = ++client->group_seq;
	client->group_n = n_members;
	client->group_added = 0;
	*group_p = client->group_open;
	pthread_mutex_unlock(&client->mu);
	return SC_OK;
}

SC_API sc_status_t sc_group_begin(sc_client_t *client, int n_members, sc_group_t *group_p)
{
	sc_status_t st = scl_enter_call(client, "sc_group_begin");

	if (st != SC_OK)
		return st;
	return scl_left(client, group_begin_in(client, n_members, group_p));
}

static sc_status_t group_add_in(sc_client_t *client, sc_group_t group, sc_tensor_t *tensor)
{
	sc_status_t st = SC_OK;

	if (!client || !tensor || tensor->client != client || !tensor->ready)
		return scl_error(SC_ERR_INVALID, "sc_group_add: no tensor of this client");
	pthread_mutex_lock(&client->mu);
	if (!group || group != client->group_open)
		st = scl_error(SC_ERR_INVALID, "rank %d: tensor '%s': group %llu is not open",
			       client->rank, tensor->name, (unsigned long long)group);
	else if (client->group_added == client->group_n)
		st = scl_error(SC_ERR_INVALID,
			       "rank %d: tensor '%s': group %llu already has its %d members",
			       client->rank, tensor->name, (unsigned long long)group,
			       client->group_n);
	else if (tensor->group)
		st = scl_error(SC_ERR_BUSY,
			       "rank %d: tensor '%s' is already a member of group %llu",
			       client->rank, tensor->name, (unsigned long long)tensor->group);
	if (st == SC_OK) {
		tensor->group = group;
		tensor->group_size = (uint32_t)client->group_n;
		client->group_added++;
	}
	pthread_mutex_unlock(&client->mu);
	return st;
}

SC_API sc_status_t sc_group_add(sc_client_t *client, sc_group_t group, sc_tensor_t *tensor)
{
	sc_status_t st = scl_enter_call(client, "sc_group_add");

	if (st != SC_OK)
		return st;
	return scl_left(client, group_add_in(client, group, tensor));
}

static sc_status_t group_end_in(sc_client_t *client, sc_group_t group)
{
	sc_status_t st = SC_OK;

	if (!client)
		return scl_error(SC_ERR_INVALID, "sc_group_end: NULL client");
	pthread_mutex_lock(&client->mu);
	if (!group || group != client->group_open)
		st = scl_error(SC_ERR_INVALID, "rank %d: group %llu is not open", client->rank,
			       (unsigned long long)group);
	else if (client->group_added != client->group_n)
		st = scl_error(SC_ERR_INVALID,
			       "rank %d: group %llu closed with %d of its %d members",
			       client->rank, (unsigned long long)group, client->group_added,
			       client->group_n);
	if (group && group == client->group_open) {
		client->group_open = 0;
		/* a group closed short never completes: its members' next operations are
		 * their own again */
		for (sc_tensor_t *t = client->tensors; st != SC_OK && t; t = t->next)
			if (t->group == group)
				t->group = 0, t->group_size = 0;
	}
	pthread_mutex_unlock(&client->mu);
	return st;
}

SC_API sc_status_t sc_group_end(sc_client_t *client, sc_group_t group)
{
	sc_status_t st = scl_enter_call(client, "sc_group_end");

	if (st != SC_OK)
		return st;
	return scl_left(client, group_end_in(client, group));
}
