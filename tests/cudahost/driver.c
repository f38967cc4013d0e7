/*
 * driver.c: build/lib/libcuda-host.so, a TEST STAND-IN for the CUDA driver (libcuda.so.1)
 * and nothing else: it exports the driver API entry points that libsparseclient loads for
 * cuda tensors (client/lib/cuda.c), with the driver's signatures, over the host build's
 * stand-in IPC handles (gpu/scg_host_ipc.h) that the daemon's GPU library hands out when
 * it is built for the host. Tests point $SPARSECOMM_CUDA_DRIVER at it, so the library's
 * cuda path runs end to end on machines without a GPU.
 *
 * - A memory handle names a POSIX shared-memory object of `bytes` bytes: opening it maps
 *   it (the "device pointer" is a host address), closing it unmaps it; an unknown pointer
 *   or a wrong magic is an error.
 * - An event handle names an object holding a scg_host_event_t: recording increments its
 *   counter atomically; cuStreamWaitEvent and cuEventSynchronize check that the counter
 *   advanced since this process's last wait on that event, and fail otherwise (the daemon
 *   must record done before it sends a completion).
 * - Contexts and streams are tokens: no work is ever queued, everything happens at once.
 * - cuDeviceGetCount says $SCG_HOST_DEVICES, 1 when unset: the devices the host build of
 *   the GPU library emulates for the daemon (gpu/mem.cu), so both sides see the same GPUs.
 *   $SC_CUDA_HOST_VISIBLE plays CUDA_VISIBLE_DEVICES: a comma-separated list of the
 *   node's (the daemon's) device numbers this process sees, its ordinal i being the list's
 *   i-th ("1": this process's cuda:0 is the daemon's cuda:1; a number past the daemon's
 *   devices is a GPU the daemon does not see). cuDeviceGetUuid_v2 gives each its UUID,
 *   scg_host_uuid of its node number, as the host build gives the daemon's.
 * - Opening a memory or event handle checks that its object belongs to the device of the
 *   current context (scg_host_ipc_t.device): real CUDA would quietly map another GPU's
 *   memory through peer access, which here fails with CUDA_ERROR_INVALID_DEVICE, so a
 *   tensor allocated on the wrong GPU shows in a test.
 * - $SC_CUDA_HOST_LOG names a file that gets one line per open and close, prefixed with
 *   the process id ("PID mem_open NAME", "PID mem_close NAME", "PID event_open NAME",
 *   "PID event_destroy NAME", "PID ctx_retain N", "PID ctx_release N"), so tests check
 *   that every handle is opened once and closed on every path.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scg_host_ipc.h"

#define EXPORT __attribute__((visibility("default")))

/* The driver's results this stand-in returns (cuda.h's values). */
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_NOT_FOUND = 500,
};

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct host_event *CUevent;
typedef struct {
	char reserved[64];
} CUipcMemHandle, CUipcEventHandle;
typedef struct {
	char bytes[16];
} CUuuid;

/* An opened event: its mapped counter and the count this process last waited for. */
struct host_event {
	scg_host_event_t *ev;
	uint64_t seen;
	char name[sizeof(((scg_host_ipc_t *)0)->name)];
};

/* An opened memory handle. */
struct host_mem {
	struct host_mem *next;
	void *p;
	size_t bytes;
	char name[sizeof(((scg_host_ipc_t *)0)->name)];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct host_mem *mems;
static int initialized;
static int contexts[64]; /* retain counts per device */
static __thread int ctx_depth;
/* the devices of the contexts pushed on this thread (the deepest ones kept) */
static __thread int ctx_dev[16];
/* The primary contexts: their address is their device's token. */
static char ctx_tokens[64];

static void host_log(const char *what, const char *arg)
{
	const char *path = getenv("SC_CUDA_HOST_LOG");
	char line[128];
	int fd, n;

	if (!path || !*path)
		return;
	n = snprintf(line, sizeof(line), "%d %s %s\n", (int)getpid(), what, arg);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) < 0) /* one write: lines of processes do not mix */
		perror("libcuda-host: log");
	close(fd);
}

/* This process's ordinals' node device numbers ($SC_CUDA_HOST_VISIBLE, else all of
 * $SCG_HOST_DEVICES in order) into node[64]; returns how many. */
static int visible(int *node)
{
	const char *s = getenv("SC_CUDA_HOST_VISIBLE");
	int n = 0;

	if (!s) {
		const char *d = getenv("SCG_HOST_DEVICES");

		n = d && *d ? atoi(d) : 1;
		n = n < 0 ? 0 : n > 64 ? 64 : n;
		for (int i = 0; i < n; i++)
			node[i] = i;
		return n;
	}
	while (*s && n < 64) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < 0 || v > 255)
			break; /* the rest is not a device number: the driver stops there too */
		node[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end != ',')
			break;
	}
	return n;
}

static int device_count(void)
{
	int node[64];

	return visible(node);
}

/* The node's number of this process's device dev. */
static int node_device(int dev)
{
	int node[64];

	return dev >= 0 && dev < visible(node) ? node[dev] : -1;
}

/* Checks a handle's magic and name; maps its object of bytes (0: the handle's). */
static CUresult map_handle(const void *handle, uint32_t magic, size_t bytes, void **p_p,
			   size_t *bytes_p, char *name)
{
	scg_host_ipc_t h;
	struct stat st;
	void *p;
	int fd;

	memcpy(&h, handle, sizeof(h));
	if (h.magic != magic || !memchr(h.name, 0, sizeof(h.name)) || h.name[0] != '/')
		return CUDA_ERROR_INVALID_HANDLE;
	/* the object must be on the current context's GPU (the caller checked there is one) */
	if ((int)h.device != node_device(ctx_dev[(ctx_depth < 16 ? ctx_depth : 16) - 1])) {
		char arg[96];

		snprintf(arg, sizeof(arg), "%s device %u, context on node device %d", h.name,
			 h.device, node_device(ctx_dev[(ctx_depth < 16 ? ctx_depth : 16) - 1]));
		host_log("wrong_device", arg);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	if (!bytes)
		bytes = (size_t)h.bytes;
	if (bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	fd = shm_open(h.name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return errno == ENOENT ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_HANDLE;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < bytes) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p_p = p;
	*bytes_p = bytes;
	memcpy(name, h.name, sizeof(h.name));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

static int ready(void)
{
	return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE);
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (!ready())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = device_count();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!ready())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev || ordinal < 0 || ordinal >= device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	int node = node_device(dev);

	if (!ready())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	if (node < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	scg_host_uuid(node, (unsigned char *)uuid->bytes);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
	char arg[16];

	if (!ready())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx || dev < 0 || dev >= device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	contexts[dev]++;
	pthread_mutex_unlock(&mu);
	*ctx = &ctx_tokens[dev];
	snprintf(arg, sizeof(arg), "%d", dev);
	host_log("ctx_retain", arg);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = CUDA_SUCCESS;
	char arg[16];

	if (dev < 0 || dev >= device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	if (contexts[dev] > 0)
		contexts[dev]--;
	else
		r = CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
	pthread_mutex_unlock(&mu);
	snprintf(arg, sizeof(arg), "%d", dev);
	host_log(r == CUDA_SUCCESS ? "ctx_release" : "ctx_release_unbalanced", arg);
	return r;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	char *c = ctx;

	if (c < ctx_tokens || c >= ctx_tokens + sizeof(ctx_tokens))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth < 16)
		ctx_dev[ctx_depth] = (int)(c - ctx_tokens);
	ctx_depth++;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (ctx)
		*ctx = NULL;
	return CUDA_SUCCESS;
}

/* The driver wants a current context for everything below. */
static CUresult current(void)
{
	return ctx_depth > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle,
				      unsigned int flags)
{
	struct host_mem *m;
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	if (!dptr || flags != 1) /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = map_handle(&handle, SCG_HOST_IPC_MEM, 0, &m->p, &m->bytes, m->name);
	if (r != CUDA_SUCCESS) {
		free(m);
		return r;
	}
	pthread_mutex_lock(&mu);
	m->next = mems;
	mems = m;
	pthread_mutex_unlock(&mu);
	*dptr = (CUdeviceptr)(uintptr_t)m->p;
	host_log("mem_open", m->name);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	struct host_mem **pp, *m;
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&mu);
	for (pp = &mems; *pp && (uintptr_t)(*pp)->p != dptr; pp = &(*pp)->next)
		;
	m = *pp;
	if (m)
		*pp = m->next;
	pthread_mutex_unlock(&mu);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	munmap(m->p, m->bytes);
	host_log("mem_close", m->name);
	free(m);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
	struct host_event *e;
	size_t bytes;
	void *p;
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	if (!event)
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = map_handle(&handle, SCG_HOST_IPC_EVENT, sizeof(scg_host_event_t), &p, &bytes,
		       e->name);
	if (r != CUDA_SUCCESS) {
		free(e);
		return r;
	}
	e->ev = p;
	e->seen = __atomic_load_n(&e->ev->records, __ATOMIC_ACQUIRE);
	*event = e;
	host_log("event_open", e->name);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	__atomic_add_fetch(&event->ev->records, 1, __ATOMIC_ACQ_REL);
	return CUDA_SUCCESS;
}

/* A wait on event: it must have been recorded since this process's last wait. */
static CUresult waited(CUevent event)
{
	uint64_t n;
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	n = __atomic_load_n(&event->ev->records, __ATOMIC_ACQUIRE);
	if (n == event->seen)
		return CUDA_ERROR_ILLEGAL_STATE;
	event->seen = n;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
	return flags ? CUDA_ERROR_INVALID_VALUE : waited(event);
}

EXPORT CUresult cuEventSynchronize(CUevent event)
{
	return waited(event);
}

EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
	CUresult r = current();

	if (r != CUDA_SUCCESS)
		return r;
	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	munmap(event->ev, sizeof(*event->ev));
	host_log("event_destroy", event->name);
	free(event);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
	static const struct {
		CUresult r;
		const char *s;
	} names[] = {
	    {CUDA_SUCCESS, "no error"},
	    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
	    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
	    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
	    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
	    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
	    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle (not a host stand-in handle)"},
	    {CUDA_ERROR_ILLEGAL_STATE,
	     "the event was not recorded since this process last waited on it"},
	    {CUDA_ERROR_NOT_FOUND, "named symbol not found (the handle's object is gone)"},
	};

	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].r == error) {
			*str = names[i].s;
			return CUDA_SUCCESS;
		}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}
