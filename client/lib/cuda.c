/*
 * cuda.c: the library's use of the CUDA driver for cuda tensors (sparsecomm.h,
 * SC_DEVICE_CUDA): mapping the daemon's GPU allocation and its two interprocess events from
 * the IPC handles of a registration reply, recording the ready event when a tensor is
 * submitted and waiting for the done event when its result is collected.
 *
 * The library must link and load without CUDA, and cpu tensors never come here: the driver
 * is dlopen()ed at the first cuda registration ($SPARSECOMM_CUDA_DRIVER, else libcuda.so.1),
 * once per process, and its entry points are resolved by their versioned symbol names. The
 * few driver types are declared here instead of including cuda.h (an IPC handle is a
 * struct of 64 bytes, passed by value). A load that fails (no driver, a missing symbol,
 * cuInit) is remembered with its reason, and every later cuda registration fails with it.
 *
 * Every driver call runs with the GPU's primary context pushed on the calling thread and
 * popped afterwards, so the caller's own current context (a framework's) is left as it was.
 * Each opened tensor holds one reference on its GPU's primary context, released when the
 * tensor is closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DRIVER_DEFAULT		 "libcuda.so.1"
#define IPC_MEM_LAZY_PEER_ACCESS 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
#define DRIVER_ERR_MAX		 512

/* The driver's types, as cuda.h declares them. */
typedef int cu_result_t; /* CUresult, 0: CUDA_SUCCESS */
typedef int cu_device_t; /* CUdevice */
typedef void *cu_context_t;
typedef void *cu_event_t;
typedef void *cu_stream_t;
typedef unsigned long long cu_deviceptr_t;
typedef struct {
	char reserved[SCL_CUDA_HANDLE_BYTES];
} cu_ipc_handle_t; /* CUipcMemHandle, CUipcEventHandle */

/* The entry points the library uses, resolved by their versioned names. */
static struct {
	cu_result_t (*init)(unsigned);
	cu_result_t (*device_count)(int *);
	cu_result_t (*device_get)(cu_device_t *, int);
	cu_result_t (*device_uuid)(void *, cu_device_t); /* CUuuid: 16 bytes */
	cu_result_t (*ctx_retain)(cu_context_t *, cu_device_t);
	cu_result_t (*ctx_release)(cu_device_t);
	cu_result_t (*ctx_push)(cu_context_t);
	cu_result_t (*ctx_pop)(cu_context_t *);
	cu_result_t (*mem_open)(cu_deviceptr_t *, cu_ipc_handle_t, unsigned);
	cu_result_t (*mem_close)(cu_deviceptr_t);
	cu_result_t (*event_open)(cu_event_t *, cu_ipc_handle_t);
	cu_result_t (*event_record)(cu_event_t, cu_stream_t);
	cu_result_t (*stream_wait)(cu_stream_t, cu_event_t, unsigned);
	cu_result_t (*event_sync)(cu_event_t);
	cu_result_t (*event_destroy)(cu_event_t);
	cu_result_t (*error_string)(cu_result_t, const char **);
} drv;

static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
#define SYM(field, name)                                                                       \
	{                                                                                      \
		name, offsetof(__typeof__(drv), field)                                         \
	}
    SYM(init, "cuInit"),
    SYM(device_count, "cuDeviceGetCount"),
    SYM(device_get, "cuDeviceGet"),
    SYM(device_uuid, "cuDeviceGetUuid_v2"),
    SYM(ctx_retain, "cuDevicePrimaryCtxRetain"),
    SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    SYM(ctx_push, "cuCtxPushCurrent_v2"),
    SYM(ctx_pop, "cuCtxPopCurrent_v2"),
    SYM(mem_open, "cuIpcOpenMemHandle_v2"),
    SYM(mem_close, "cuIpcCloseMemHandle"),
    SYM(event_open, "cuIpcOpenEventHandle"),
    SYM(event_record, "cuEventRecord"),
    SYM(stream_wait, "cuStreamWaitEvent"),
    SYM(event_sync, "cuEventSynchronize"),
    SYM(event_destroy, "cuEventDestroy_v2"),
    SYM(error_string, "cuGetErrorString"),
#undef SYM
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_ok;
static int device_count;
static char load_error[DRIVER_ERR_MAX];

/* A cuda tensor's mapping: the daemon's allocation and its two events on one GPU. */
struct scl_cuda {
	int ordinal;
	cu_device_t dev;
	cu_context_t ctx; /* the primary context, retained while the tensor lives */
	cu_deviceptr_t base;
	cu_event_t ready, done;
};

/* The driver's name and text of a result, e.g. "error 2 (out of memory)". */
static const char *result_text(cu_result_t r, char *buf, size_t len)
{
	const char *s = NULL;

	if (drv.error_string && drv.error_string(r, &s) != 0)
		s = NULL;
	snprintf(buf, len, "error %d (%s)", r, s ? s : "no description");
	return buf;
}

static void driver_load(void)
{
	const char *path = getenv("SPARSECOMM_CUDA_DRIVER");
	char why[128];
	void *h;
	cu_result_t r;

	if (!path || !*path)
		path = DRIVER_DEFAULT;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();

		snprintf(load_error, sizeof(load_error), "%s", e ? e : path);
		return;
	}
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *fn = dlsym(h, symbols[i].name);

		if (!fn) {
			snprintf(load_error, sizeof(load_error), "%s has no symbol %s", path,
				 symbols[i].name);
			memset(&drv, 0, sizeof(drv));
			dlclose(h);
			return;
		}
		memcpy((char *)&drv + symbols[i].offset, &fn, sizeof(fn));
	}
	r = drv.init(0);
	if (r == 0)
		r = drv.device_count(&device_count);
	if (r != 0) {
		snprintf(load_error, sizeof(load_error), "%s: cuInit: %s", path,
			 result_text(r, why, sizeof(why)));
		return; /* the library stays loaded: the driver keeps its state */
	}
	load_ok = 1;
}

sc_status_t scl_cuda_check(const char *what, int ordinal)
{
	pthread_once(&load_once, driver_load);
	if (!load_ok)
		return scl_error(SC_ERR_UNSUPPORTED, "%s: cuda:%d needs the CUDA driver: %s",
				 what, ordinal, load_error);
	if (ordinal >= device_count)
		return scl_error(SC_ERR_UNSUPPORTED,
				 "%s: cuda:%d does not exist: the CUDA driver sees %d GPU(s)",
				 what, ordinal, device_count);
	return SC_OK;
}

sc_status_t scl_cuda_uuid(const char *what, int ordinal, unsigned char *uuid)
{
	char why[128];
	cu_device_t dev;
	sc_status_t st = scl_cuda_check(what, ordinal);
	cu_result_t r;

	if (st != SC_OK)
		return st;
	r = drv.device_get(&dev, ordinal);
	if (r == 0)
		r = drv.device_uuid(uuid, dev);
	if (r != 0)
		return scl_error(SC_ERR_UNSUPPORTED, "%s: the UUID of cuda:%d: %s", what,
				 ordinal, result_text(r, why, sizeof(why)));
	return SC_OK;
}

/* Makes g's primary context current on this thread; pop() restores the caller's. */
static sc_status_t push(const scl_cuda_t *g, const char *what)
{
	char why[128];
	cu_result_t r = drv.ctx_push(g->ctx);

	if (r != 0)
		return scl_error(SC_ERR_SYSTEM, "%s: cannot make cuda:%d current: %s", what,
				 g->ordinal, result_text(r, why, sizeof(why)));
	return SC_OK;
}

static void pop(void)
{
	cu_context_t ctx;

	drv.ctx_pop(&ctx);
}

/* Status of a driver call made with the context pushed (then popped). */
static sc_status_t called(cu_result_t r, const char *what, const char *call, int ordinal)
{
	char why[128];

	pop();
	if (r == 0)
		return SC_OK;
	return scl_error(SC_ERR_SYSTEM, "%s: %s on cuda:%d failed: %s", what, call, ordinal,
			 result_text(r, why, sizeof(why)));
}

sc_status_t scl_cuda_open(const char *what, int ordinal, const void *mem_handle,
			  const void *ready_handle, const void *done_handle, scl_cuda_t **g_p)
{
	cu_ipc_handle_t mh, rh, dh;
	char why[128];
	sc_status_t st;
	cu_result_t r;
	scl_cuda_t *g;

	st = scl_cuda_check(what, ordinal);
	if (st != SC_OK)
		return st;
	g = calloc(1, sizeof(*g));
	if (!g)
		return scl_error(SC_ERR_NOMEM, "%s: out of memory", what);
	g->ordinal = ordinal;
	r = drv.device_get(&g->dev, ordinal);
	if (r == 0)
		r = drv.ctx_retain(&g->ctx, g->dev);
	if (r != 0) {
		free(g);
		return scl_error(SC_ERR_UNSUPPORTED, "%s: cannot use cuda:%d: %s", what,
				 ordinal, result_text(r, why, sizeof(why)));
	}
	memcpy(&mh, mem_handle, sizeof(mh));
	memcpy(&rh, ready_handle, sizeof(rh));
	memcpy(&dh, done_handle, sizeof(dh));
	st = push(g, what);
	if (st == SC_OK)
		st = called(drv.mem_open(&g->base, mh, IPC_MEM_LAZY_PEER_ACCESS), what,
			    "opening the daemon's memory (cuIpcOpenMemHandle)", ordinal);
	if (st == SC_OK && (st = push(g, what)) == SC_OK)
		st = called(drv.event_open(&g->ready, rh), what,
			    "opening the ready event (cuIpcOpenEventHandle)", ordinal);
	if (st == SC_OK && (st = push(g, what)) == SC_OK)
		st = called(drv.event_open(&g->done, dh), what,
			    "opening the done event (cuIpcOpenEventHandle)", ordinal);
	if (st != SC_OK) {
		scl_cuda_close(g);
		return st;
	}
	*g_p = g;
	return SC_OK;
}

void *scl_cuda_base(const scl_cuda_t *g)
{
	return (void *)(uintptr_t)g->base;
}

void scl_cuda_close(scl_cuda_t *g)
{
	if (!g)
		return;
	if (push(g, "closing a cuda tensor") == SC_OK) {
		if (g->done)
			drv.event_destroy(g->done);
		if (g->ready)
			drv.event_destroy(g->ready);
		if (g->base)
			drv.mem_close(g->base);
		pop();
	}
	drv.ctx_release(g->dev);
	free(g);
}

sc_status_t scl_cuda_record_ready(scl_cuda_t *g, void *stream, const char *what)
{
	sc_status_t st = push(g, what);

	if (st != SC_OK)
		return st;
	return called(drv.event_record(g->ready, stream), what,
		      "recording the ready event (cuEventRecord)", g->ordinal);
}

sc_status_t scl_cuda_sync_done(scl_cuda_t *g, const char *what)
{
	sc_status_t st = push(g, what);

	if (st != SC_OK)
		return st;
	return called(drv.event_sync(g->done), what,
		      "waiting for the done event (cuEventSynchronize)", g->ordinal);
}

sc_status_t scl_cuda_stream_wait_done(scl_cuda_t *g, void *stream, const char *what)
{
	sc_status_t st = push(g, what);

	if (st != SC_OK)
		return st;
	return called(drv.stream_wait(stream, g->done, 0), what,
		      "making the stream wait for the done event (cuStreamWaitEvent)",
		      g->ordinal);
}
