/*
 * ipc.cu: memory and events the daemon shares with its trainers (scg.h, section ipc.cu),
 * and page-locked host memory for staging.
 *
 * Every exported allocation is rounded up to whole IPC granules (scg_ipc_bytes), so that a
 * handle, which maps the whole driver allocation, reaches nothing else the daemon holds.
 *
 * The CUDA build: cudaMalloc'd memory exported with cudaIpcGetMemHandle, interprocess
 * events (cudaEventInterprocess | cudaEventDisableTiming) exported with
 * cudaIpcGetEventHandle, both on the calling thread's current device (scg_init), records
 * and waits on the thread's stream of that device (a record on the event's own device, a
 * wait from any), and cudaHostAlloc for staging.
 *
 * The host build stands in for CUDA IPC with POSIX shared memory (scg_host_ipc.h): the
 * handle names an object this process created (mode 0600) and unlinks when it frees it.
 * An event is a shared counter of records; a wait checks that the counter moved since this
 * process's previous wait on that event, so a trainer that submits without recording its
 * ready event fails the operation instead of racing the daemon. Host work is synchronous,
 * so a record needs nothing more to order what came before it. Exported memory and events
 * belong to the calling thread's current emulated device (scg_host_owner), as scg_alloc's
 * memory does; an event is recorded only from its own device (a wait, from any).
 */
#include "portable.cuh"
#include "scg_host_ipc.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(SCG_HOST)

#include <atomic>
#include <cerrno>
#include <ctime>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

/* One object this process exported, found again by its mapping when it is freed. */
struct host_obj {
	void *p;
	size_t bytes;
	char name[48];
	uint64_t seen; /* events: the record count at this process's last wait */
	host_obj *next;
};
static host_obj *host_objs;
static pthread_mutex_t host_objs_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<uint64_t> host_seq;

static sc_status_t host_export(uint32_t magic, size_t bytes, void **p_host, void *handle_host)
{
	scg_host_ipc_t h;
	memset(&h, 0, sizeof h);
	h.magic = magic;
	h.bytes = bytes;
	unsigned rnd = 0;
	int fdr = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fdr >= 0) {
		if (read(fdr, &rnd, sizeof rnd) != (ssize_t)sizeof rnd)
			rnd = 0;
		close(fdr);
	}
	snprintf(h.name, sizeof h.name, "/sparsecomm-gpu.%d.%llu.%08x", (int)getpid(),
		 (unsigned long long)++host_seq, rnd);
	int fd = shm_open(h.name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return scg_fail(SC_ERR_SYSTEM, "shm_open(%s): %s", h.name, strerror(errno));
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)(bytes ? bytes : 1)) == 0)
		p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	host_obj *o = p == MAP_FAILED ? NULL : (host_obj *)calloc(1, sizeof *o);
	if (!o) {
		if (p != MAP_FAILED)
			munmap(p, bytes ? bytes : 1);
		shm_unlink(h.name);
		return scg_fail(p == MAP_FAILED ? SC_ERR_SYSTEM : SC_ERR_NOMEM,
				"exporting %zu bytes as %s: %s", bytes, h.name,
				p == MAP_FAILED ? strerror(err) : "out of memory");
	}
	o->p = p;
	o->bytes = bytes ? bytes : 1;
	memcpy(o->name, h.name, sizeof o->name);
	pthread_mutex_lock(&host_objs_mu);
	o->next = host_objs;
	host_objs = o;
	pthread_mutex_unlock(&host_objs_mu);
	*p_host = p;
	memcpy(handle_host, &h, sizeof h);
	return SC_OK;
}

static sc_status_t host_unexport(void *p, const char *what)
{
	if (!p)
		return SC_OK;
	pthread_mutex_lock(&host_objs_mu);
	host_obj **pp = &host_objs;
	while (*pp && (*pp)->p != p)
		pp = &(*pp)->next;
	host_obj *o = *pp;
	if (o)
		*pp = o->next;
	pthread_mutex_unlock(&host_objs_mu);
	if (!o)
		return scg_fail(SC_ERR_INVALID, "%s: %p was not exported by this process", what,
				p);
	munmap(o->p, o->bytes);
	shm_unlink(o->name);
	free(o);
	return SC_OK;
}

/* The exported object's device: the exporting thread's current one (its tag). */
static void host_handle_device(void *handle_host, const void *p)
{
	uint32_t d = (uint32_t)scg_host_owner(p);
	memcpy((char *)handle_host + offsetof(scg_host_ipc_t, device), &d, sizeof d);
}

extern "C" sc_status_t scg_ipc_alloc(size_t bytes, void **p_host, void *handle_host)
{
	*p_host = NULL;
	size_t alloc = scg_ipc_bytes(bytes);
	if (!alloc)
		return scg_fail(SC_ERR_NOMEM, "scg_ipc_alloc: %zu bytes: too large", bytes);
	sc_status_t st = scg_host_local("scg_ipc_alloc", NULL); /* fails once the GPU is lost */
	if (st == SC_OK)
		st = host_export(SCG_HOST_IPC_MEM, alloc, p_host, handle_host);
	if (st == SC_OK) {
		scg_host_tag(*p_host, alloc);
		host_handle_device(handle_host, *p_host);
	}
	return st;
}

extern "C" sc_status_t scg_ipc_free(void *p)
{
	/* $SCG_HOST_FREE_DELAY_MS: as long as cudaFree waits for the device's work, for
	 * tests of the callers that must not wait with it */
	static const long delay_ms = [] {
		const char *s = getenv("SCG_HOST_FREE_DELAY_MS");
		return s && *s ? atol(s) : 0L;
	}();
	if (delay_ms > 0 && p) {
		struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	/* freed on the device it was allocated on, as the CUDA build does; a lost GPU's
	 * memory goes with it (here: the object is unlinked, and the free fails) */
	const char *lost = scg_lost();
	sc_status_t st = lost ? SC_OK : scg_host_local("scg_ipc_free", p);
	if (st == SC_OK)
		st = host_unexport(p, "scg_ipc_free");
	if (st == SC_OK && p)
		scg_host_untag(p);
	if (st == SC_OK && lost)
		st = scg_fail(SC_ERR_SYSTEM, "scg_ipc_free: %s", lost);
	return st;
}

extern "C" sc_status_t scg_ipc_event_create(void **ev_host, void *handle_host)
{
	*ev_host = NULL;
	sc_status_t st =
	    host_export(SCG_HOST_IPC_EVENT, sizeof(scg_host_event_t), ev_host, handle_host);
	if (st == SC_OK) {
		scg_host_tag(*ev_host, sizeof(scg_host_event_t));
		host_handle_device(handle_host, *ev_host);
	}
	return st;
}

extern "C" sc_status_t scg_ipc_event_destroy(void *ev)
{
	sc_status_t st = host_unexport(ev, "scg_ipc_event_destroy");
	if (st == SC_OK && ev)
		scg_host_untag(ev);
	return st;
}

extern "C" sc_status_t scg_event_record(void *ev)
{
	/* an event is recorded on a stream of its own device, as CUDA requires */
	sc_status_t st = scg_host_local("scg_event_record", ev);
	if (st != SC_OK)
		return st;
	__atomic_fetch_add(&((scg_host_event_t *)ev)->records, 1, __ATOMIC_RELEASE);
	return SC_OK;
}

extern "C" sc_status_t scg_stream_wait_event(void *ev)
{
	uint64_t now = __atomic_load_n(&((scg_host_event_t *)ev)->records, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&host_objs_mu);
	host_obj *o = host_objs;
	while (o && o->p != ev)
		o = o->next;
	uint64_t seen = o ? o->seen : 0;
	if (o)
		o->seen = now;
	pthread_mutex_unlock(&host_objs_mu);
	if (!o)
		return scg_fail(SC_ERR_INVALID,
				"scg_stream_wait_event: %p is not an event of "
				"this process",
				ev);
	if (now == seen)
		return scg_fail(
		    SC_ERR_PROTOCOL,
		    "the event was not recorded since the previous wait on it (%llu "
		    "records)",
		    (unsigned long long)now);
	return SC_OK;
}

extern "C" sc_status_t scg_host_alloc(size_t bytes, void **p_host)
{
	*p_host = malloc(bytes ? bytes : 1);
	return *p_host
		   ? SC_OK
		   : scg_fail(SC_ERR_NOMEM, "scg_host_alloc: %zu bytes: out of memory", bytes);
}

extern "C" sc_status_t scg_host_free(void *p_host)
{
	free(p_host);
	return SC_OK;
}

#else /* CUDA */

extern "C" sc_status_t scg_ipc_alloc(size_t bytes, void **p_host, void *handle_host)
{
	static_assert(sizeof(cudaIpcMemHandle_t) == SCG_IPC_HANDLE_BYTES, "IPC handle size");
	size_t alloc = scg_ipc_bytes(bytes);
	*p_host = NULL;
	if (!alloc)
		return scg_fail(SC_ERR_NOMEM, "scg_ipc_alloc: %zu bytes: too large", bytes);
	sc_status_t st = scg_alloc(alloc, p_host);
	if (st != SC_OK)
		return st;
	cudaIpcMemHandle_t h;
	st = scg_check_cuda(cudaIpcGetMemHandle(&h, *p_host), "cudaIpcGetMemHandle");
	if (st != SC_OK) {
		cudaFree(*p_host);
		*p_host = NULL;
		return st;
	}
	memcpy(handle_host, &h, sizeof h);
	return SC_OK;
}

extern "C" sc_status_t scg_ipc_free(void *p)
{
	return scg_free(p);
}

extern "C" sc_status_t scg_ipc_event_create(void **ev_host, void *handle_host)
{
	static_assert(sizeof(cudaIpcEventHandle_t) == SCG_IPC_HANDLE_BYTES, "IPC handle size");
	cudaEvent_t ev = NULL;
	*ev_host = NULL;
	sc_status_t st = scg_check_cuda(
	    cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming),
	    "cudaEventCreateWithFlags (interprocess)");
	if (st != SC_OK)
		return st;
	cudaIpcEventHandle_t h;
	st = scg_check_cuda(cudaIpcGetEventHandle(&h, ev), "cudaIpcGetEventHandle");
	if (st != SC_OK) {
		cudaEventDestroy(ev);
		return st;
	}
	memcpy(handle_host, &h, sizeof h);
	*ev_host = (void *)ev;
	return SC_OK;
}

extern "C" sc_status_t scg_ipc_event_destroy(void *ev)
{
	if (!ev)
		return SC_OK;
	return scg_check_cuda(cudaEventDestroy((cudaEvent_t)ev), "cudaEventDestroy");
}

extern "C" sc_status_t scg_event_record(void *ev)
{
	return scg_check_cuda(cudaEventRecord((cudaEvent_t)ev, scg_stream()),
			      "cudaEventRecord");
}

extern "C" sc_status_t scg_stream_wait_event(void *ev)
{
	return scg_check_cuda(cudaStreamWaitEvent(scg_stream(), (cudaEvent_t)ev, 0),
			      "cudaStreamWaitEvent");
}

extern "C" sc_status_t scg_host_alloc(size_t bytes, void **p_host)
{
	*p_host = NULL;
	return scg_check_cuda(cudaHostAlloc(p_host, bytes ? bytes : 1, cudaHostAllocPortable),
			      "cudaHostAlloc");
}

extern "C" sc_status_t scg_host_free(void *p_host)
{
	if (!p_host)
		return SC_OK;
	return scg_check_cuda(cudaFreeHost(p_host), "cudaFreeHost");
}

#endif
