/*
 * mem.cu: the GPU device's errors, devices, streams and memory (scg.h, section mem.cu), for
 * both builds (portable.cuh). A thread works on one device at a time, its current device
 * (scg_init), with one stream per device it has used. The CUDA build allocates with
 * cudaMalloc on the current device, clears and copies asynchronously on the thread's
 * stream of it (scg_init creates one per thread and device, or scg_stream_set names the
 * caller's), and to_host waits for that stream; a CUDA failure returns SC_ERR_NOMEM
 * (allocation), SC_ERR_UNSUPPORTED (no driver or no device) or SC_ERR_SYSTEM, with
 * cudaGetErrorString's text in scg_error(). The host build (SCG_HOST) is malloc, memset and
 * memcpy; its sync has nothing to wait for. It emulates $SCG_HOST_DEVICES devices (1 when
 * unset): each allocation is tagged with the current device of the thread that made it
 * (scg_host_owner), and the entry points that run a kernel check that the memory they
 * touch is the current device's (scg_host_local), so that a kernel reading another GPU's
 * memory fails here as it would on GPUs without peer access.
 */
#include "portable.cuh"
#include "scg_host_ipc.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

/* The last failure's text, per thread. */
static thread_local char scg_error_text[256];

extern "C" const char *scg_error(void)
{
	return scg_error_text;
}

sc_status_t scg_fail(sc_status_t st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(scg_error_text, sizeof scg_error_text, fmt, ap);
	va_end(ap);
	return st;
}

/* The first sticky fault's text ("" while there is none), kept for good. */
static std::mutex scg_lost_mu;
static char scg_lost_text[256];
static std::atomic<bool> scg_is_lost;

static void scg_lost_set(const char *text)
{
	std::lock_guard<std::mutex> lk(scg_lost_mu);
	if (scg_is_lost.load())
		return;
	snprintf(scg_lost_text, sizeof scg_lost_text, "%s", text);
	scg_is_lost.store(true);
}

extern "C" const char *scg_lost(void)
{
	return scg_is_lost.load() ? scg_lost_text : NULL;
}

#if defined(SCG_HOST)

extern "C" const char *scg_backend(void)
{
	return "host";
}

/* The injected fault ($SCG_HOST_FAULT = N: the N-th scg_sync), and the failure every call
 * that touches device memory returns once it happened, as a CUDA context fails every call
 * after a sticky fault. */
static std::atomic<long> host_syncs;
static sc_status_t host_lost(const char *what)
{
	const char *lost = scg_lost();
	return lost ? scg_fail(SC_ERR_SYSTEM, "%s: %s", what, lost) : SC_OK;
}

/* The emulated devices: $SCG_HOST_DEVICES, 1 when unset, at most SCG_MAX_DEVICES. */
static int host_devices(void)
{
	static const int n = [] {
		const char *s = getenv("SCG_HOST_DEVICES");
		int v = s && *s ? atoi(s) : 1;
		return v < 1 ? 1 : v > SCG_MAX_DEVICES ? SCG_MAX_DEVICES : v;
	}();
	return n;
}

static thread_local int host_current;

/* Every live allocation of the emulated devices: its end and its device, by its start. */
struct host_span {
	uintptr_t end;
	int ordinal;
};
static std::map<uintptr_t, host_span> host_spans;
static std::mutex host_spans_mu;

void scg_host_tag(const void *p, size_t bytes)
{
	std::lock_guard<std::mutex> lk(host_spans_mu);
	host_spans[(uintptr_t)p] = host_span{(uintptr_t)p + (bytes ? bytes : 1), host_current};
}

void scg_host_untag(const void *p)
{
	std::lock_guard<std::mutex> lk(host_spans_mu);
	host_spans.erase((uintptr_t)p);
}

extern "C" int scg_host_owner(const void *p)
{
	std::lock_guard<std::mutex> lk(host_spans_mu);
	auto it = host_spans.upper_bound((uintptr_t)p);
	if (it == host_spans.begin())
		return -1;
	--it;
	return (uintptr_t)p < it->second.end ? it->second.ordinal : -1;
}

sc_status_t scg_host_local(const char *what, const void *p)
{
	sc_status_t st = host_lost(what);
	if (st != SC_OK)
		return st;
	int owner = p ? scg_host_owner(p) : -1;
	if (owner < 0 || owner == host_current)
		return SC_OK;
	return scg_fail(SC_ERR_INVALID,
			"%s: %p belongs to device %d, and this thread works on device %d: only "
			"the current device's memory and events are usable here",
			what, p, owner, host_current);
}

extern "C" sc_status_t scg_device_count(int *n_host)
{
	*n_host = host_devices();
	return SC_OK;
}

extern "C" sc_status_t scg_device_uuid(int ordinal, unsigned char *uuid_host)
{
	if (ordinal < 0 || ordinal >= host_devices())
		return scg_fail(SC_ERR_INVALID,
				"scg_device_uuid: no device %d: the host build emulates %d "
				"(SCG_HOST_DEVICES)",
				ordinal, host_devices());
	scg_host_uuid(ordinal, uuid_host);
	return SC_OK;
}

extern "C" sc_status_t scg_init(int ordinal)
{
	if (ordinal < 0 || ordinal >= host_devices())
		return scg_fail(SC_ERR_UNSUPPORTED,
				"scg_init: no device %d: the host build emulates %d "
				"(SCG_HOST_DEVICES)",
				ordinal, host_devices());
	host_current = ordinal;
	return SC_OK;
}

extern "C" sc_status_t scg_stream_follow(int ordinal)
{
	if (ordinal < 0 || ordinal >= host_devices())
		return scg_fail(SC_ERR_INVALID, "scg_stream_follow: no device %d", ordinal);
	return SC_OK; /* host work is done when its call returns */
}

extern "C" sc_status_t scg_stream_set(void *stream)
{
	(void)stream;
	return SC_OK;
}

extern "C" sc_status_t scg_alloc(size_t bytes, void **p_host)
{
	sc_status_t st = host_lost("scg_alloc");
	if (st != SC_OK) {
		*p_host = NULL;
		return st;
	}
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p) {
		*p_host = NULL;
		return scg_fail(SC_ERR_NOMEM, "scg_alloc: %zu bytes: out of memory", bytes);
	}
	scg_host_tag(p, bytes);
	*p_host = p;
	return SC_OK;
}

extern "C" sc_status_t scg_free(void *p)
{
	if (p)
		scg_host_untag(p);
	free(p);
	return SC_OK;
}

extern "C" sc_status_t scg_clear(void *dst, size_t bytes)
{
	sc_status_t st = scg_host_local("scg_clear", dst);
	if (st == SC_OK && bytes)
		memset(dst, 0, bytes);
	return st;
}

extern "C" sc_status_t scg_copy(void *dst, const void *src, size_t bytes)
{
	sc_status_t st = scg_host_local("scg_copy", dst);
	if (st == SC_OK)
		st = scg_host_local("scg_copy", src);
	if (st == SC_OK && bytes)
		memcpy(dst, src, bytes);
	return st;
}

/* Where the memory is known, it must be the device the caller says. */
static sc_status_t host_on(const char *what, const void *p, int ordinal)
{
	int owner = scg_host_owner(p);
	if (ordinal < 0 || ordinal >= host_devices())
		return scg_fail(SC_ERR_INVALID, "%s: no device %d", what, ordinal);
	if (owner >= 0 && owner != ordinal)
		return scg_fail(SC_ERR_INVALID,
				"%s: %p is memory of device %d, not of device %d", what, p,
				owner, ordinal);
	return SC_OK;
}

extern "C" sc_status_t scg_copy_peer(void *dst, int dst_ordinal, const void *src,
				     int src_ordinal, size_t bytes)
{
	sc_status_t st = host_on("scg_copy_peer (destination)", dst, dst_ordinal);
	if (st == SC_OK)
		st = host_on("scg_copy_peer (source)", src, src_ordinal);
	if (st == SC_OK && bytes)
		memcpy(dst, src, bytes);
	return st;
}

extern "C" sc_status_t scg_to_host(void *dst_host, const void *src, size_t bytes)
{
	sc_status_t st = scg_host_local("scg_to_host", src);
	if (st == SC_OK && bytes)
		memcpy(dst_host, src, bytes);
	return st;
}

extern "C" sc_status_t scg_from_host(void *dst, const void *src_host, size_t bytes)
{
	sc_status_t st = scg_host_local("scg_from_host", dst);
	if (st == SC_OK && bytes)
		memcpy(dst, src_host, bytes);
	return st;
}

extern "C" sc_status_t scg_sync(void)
{
	static const long fault_at = [] {
		const char *s = getenv("SCG_HOST_FAULT");
		return s && *s ? atol(s) : 0L;
	}();
	if (fault_at > 0 && ++host_syncs == fault_at)
		scg_lost_set(
		    "an illegal memory access was encountered (cudaErrorIllegalAddress, "
		    "injected by SCG_HOST_FAULT)");
	return host_lost("scg_sync");
}

extern "C" sc_status_t scg_stream_get(void **stream_host)
{
	*stream_host = NULL; /* the host build has no streams */
	return SC_OK;
}

extern "C" sc_status_t scg_stream_query(int *done_host)
{
	*done_host = 1;
	return SC_OK;
}

#else /* CUDA */

/* The calling thread's current device (scg_init) and its stream on each device: created
 * by scg_init, or the caller's (scg_stream_set); 0 (the default stream) before either. */
static thread_local int scg_thread_device;
static thread_local cudaStream_t scg_thread_stream[SCG_MAX_DEVICES];
static thread_local bool scg_thread_stream_owned[SCG_MAX_DEVICES];
/* an event per device, for scg_stream_follow */
static thread_local cudaEvent_t scg_thread_mark[SCG_MAX_DEVICES];

cudaStream_t scg_stream(void)
{
	return scg_thread_stream[scg_thread_device];
}

sc_status_t scg_check_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return SC_OK;
	sc_status_t st = SC_ERR_SYSTEM;
	if (e == cudaErrorMemoryAllocation)
		st = SC_ERR_NOMEM;
	else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
		 e == cudaErrorInvalidDevice || e == cudaErrorStubLibrary ||
		 e == cudaErrorInitializationError ||
		 e == cudaErrorCompatNotSupportedOnDevice ||
		 e == cudaErrorSystemDriverMismatch || e == cudaErrorNoKernelImageForDevice ||
		 e == cudaErrorUnsupportedPtxVersion)
		st = SC_ERR_UNSUPPORTED;
	/* the faults after which the context fails every call (CUDA's documentation of each
	 * says the process must be relaunched) */
	if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
	    e == cudaErrorLaunchTimeout || e == cudaErrorHardwareStackError ||
	    e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress ||
	    e == cudaErrorInvalidAddressSpace || e == cudaErrorInvalidPc ||
	    e == cudaErrorAssert || e == cudaErrorECCUncorrectable) {
		char text[200];
		snprintf(text, sizeof text, "%s (%s), seen by %s", cudaGetErrorString(e),
			 cudaGetErrorName(e), what);
		scg_lost_set(text);
	}
	return scg_fail(st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" const char *scg_backend(void)
{
	return "cuda";
}

char *scg_temp_allocator::allocate(std::ptrdiff_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaMallocAsync(&p, bytes > 0 ? (size_t)bytes : 1, scg_stream());
	if (e != cudaSuccess) {
		cudaGetLastError();
		throw thrust::system::detail::bad_alloc(cudaGetErrorString(e));
	}
	return (char *)p;
}

void scg_temp_allocator::deallocate(char *p, size_t bytes)
{
	/* a failure here is the stream's: the next check of it reports it */
	cudaFreeAsync(p, scg_stream());
}

/* The device's default pool keeps what it is given back (its default releases it at every
 * synchronisation), so temporary storage costs no driver call after the first steps. */
static sc_status_t pool_keep(int ordinal)
{
	cudaMemPool_t pool;
	sc_status_t st = scg_check_cuda(cudaDeviceGetDefaultMemPool(&pool, ordinal),
					"cudaDeviceGetDefaultMemPool");
	if (st != SC_OK)
		return st;
	uint64_t keep = UINT64_MAX;
	return scg_check_cuda(
	    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
	    "cudaMemPoolSetAttribute");
}

/* The devices the driver sees, asked once per thread. */
static sc_status_t device_count(int *n_host)
{
	static thread_local int n = -1;
	if (n < 0) {
		int c = 0;
		sc_status_t st = scg_check_cuda(cudaGetDeviceCount(&c), "cudaGetDeviceCount");
		if (st != SC_OK)
			return st;
		n = c < SCG_MAX_DEVICES ? c : SCG_MAX_DEVICES;
	}
	*n_host = n;
	return SC_OK;
}

extern "C" sc_status_t scg_device_count(int *n_host)
{
	*n_host = 0;
	return device_count(n_host);
}

extern "C" sc_status_t scg_device_uuid(int ordinal, unsigned char *uuid_host)
{
	int n = 0;
	sc_status_t st = device_count(&n);
	if (st != SC_OK)
		return st;
	if (ordinal < 0 || ordinal >= n)
		return scg_fail(SC_ERR_INVALID,
				"scg_device_uuid: no CUDA device %d (%d present)", ordinal, n);
	cudaDeviceProp prop;
	st = scg_check_cuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
	if (st == SC_OK)
		memcpy(uuid_host, prop.uuid.bytes, 16);
	return st;
}

extern "C" sc_status_t scg_init(int ordinal)
{
	int n = 0;
	sc_status_t st = device_count(&n);
	if (st != SC_OK)
		return st;
	if (ordinal < 0 || ordinal >= n)
		return scg_fail(SC_ERR_UNSUPPORTED, "scg_init: no CUDA device %d (%d present)",
				ordinal, n);
	st = scg_check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
	if (st != SC_OK)
		return st;
	scg_thread_device = ordinal;
	if (!scg_thread_stream[ordinal]) {
		if ((st = pool_keep(ordinal)) != SC_OK)
			return st;
		cudaStream_t s = 0;
		st = scg_check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
				    "cudaStreamCreateWithFlags");
		if (st != SC_OK)
			return st;
		scg_thread_stream[ordinal] = s;
		scg_thread_stream_owned[ordinal] = true;
	}
	return SC_OK;
}

extern "C" sc_status_t scg_stream_set(void *stream)
{
	int d = scg_thread_device;
	if (scg_thread_stream_owned[d] && scg_thread_stream[d] != (cudaStream_t)stream) {
		sc_status_t st = scg_check_cuda(cudaStreamSynchronize(scg_thread_stream[d]),
						"cudaStreamSynchronize");
		cudaStreamDestroy(scg_thread_stream[d]);
		scg_thread_stream_owned[d] = false;
		if (st != SC_OK) {
			scg_thread_stream[d] = (cudaStream_t)stream;
			return st;
		}
	}
	scg_thread_stream[d] = (cudaStream_t)stream;
	return SC_OK;
}

extern "C" sc_status_t scg_stream_follow(int ordinal)
{
	int n = 0, cur = scg_thread_device;
	sc_status_t st = device_count(&n);
	if (st != SC_OK)
		return st;
	if (ordinal < 0 || ordinal >= n)
		return scg_fail(SC_ERR_INVALID, "scg_stream_follow: no CUDA device %d",
				ordinal);
	if (ordinal == cur)
		return SC_OK;
	/* an event of the followed device, recorded on its stream there */
	st = scg_check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
	if (st == SC_OK && !scg_thread_mark[ordinal])
		st = scg_check_cuda(
		    cudaEventCreateWithFlags(&scg_thread_mark[ordinal], cudaEventDisableTiming),
		    "cudaEventCreateWithFlags");
	if (st == SC_OK)
		st = scg_check_cuda(
		    cudaEventRecord(scg_thread_mark[ordinal], scg_thread_stream[ordinal]),
		    "cudaEventRecord");
	sc_status_t back = scg_check_cuda(cudaSetDevice(cur), "cudaSetDevice");
	if (st == SC_OK)
		st = back;
	if (st != SC_OK)
		return st;
	return scg_check_cuda(cudaStreamWaitEvent(scg_stream(), scg_thread_mark[ordinal], 0),
			      "cudaStreamWaitEvent");
}

/* Lets the current device reach peer's memory directly where the two allow it (once per
 * pair and process); a copy between devices without it is staged by the driver. */
static void peer_enable(int cur, int peer)
{
	static std::mutex mu;
	static bool tried[SCG_MAX_DEVICES][SCG_MAX_DEVICES];
	std::lock_guard<std::mutex> lk(mu);
	if (cur == peer || tried[cur][peer])
		return;
	tried[cur][peer] = true;
	int can = 0;
	if (cudaDeviceCanAccessPeer(&can, cur, peer) == cudaSuccess && can &&
	    cudaDeviceEnablePeerAccess(peer, 0) != cudaSuccess)
		cudaGetLastError(); /* already enabled, or not possible: the copy is staged */
}

extern "C" sc_status_t scg_copy_peer(void *dst, int dst_ordinal, const void *src,
				     int src_ordinal, size_t bytes)
{
	int n = 0;
	sc_status_t st = device_count(&n);
	if (st != SC_OK)
		return st;
	if (dst_ordinal < 0 || dst_ordinal >= n || src_ordinal < 0 || src_ordinal >= n)
		return scg_fail(SC_ERR_INVALID,
				"scg_copy_peer: no CUDA device %d or %d (%d present)",
				dst_ordinal, src_ordinal, n);
	if (!bytes)
		return SC_OK;
	if (dst_ordinal == src_ordinal)
		return scg_check_cuda(
		    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, scg_stream()),
		    "cudaMemcpyAsync (device to device)");
	peer_enable(scg_thread_device,
		    dst_ordinal == scg_thread_device ? src_ordinal : dst_ordinal);
	return scg_check_cuda(
	    cudaMemcpyPeerAsync(dst, dst_ordinal, src, src_ordinal, bytes, scg_stream()),
	    "cudaMemcpyPeerAsync");
}

extern "C" sc_status_t scg_alloc(size_t bytes, void **p_host)
{
	void *p = NULL;
	*p_host = NULL;
	sc_status_t st = scg_check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
	if (st != SC_OK)
		return st;
	/* zeroed before any later work on this stream can read it; cudaMalloc's memory is
	 * usable from every stream, so wait for the clear here */
	st = scg_check_cuda(cudaMemsetAsync(p, 0, bytes, scg_stream()), "cudaMemsetAsync");
	if (st == SC_OK)
		st = scg_check_cuda(cudaStreamSynchronize(scg_stream()),
				    "cudaStreamSynchronize");
	if (st != SC_OK) {
		cudaFree(p);
		return st;
	}
	*p_host = p;
	return SC_OK;
}

extern "C" sc_status_t scg_free(void *p)
{
	if (!p)
		return SC_OK;
	return scg_check_cuda(cudaFree(p), "cudaFree");
}

extern "C" sc_status_t scg_clear(void *dst, size_t bytes)
{
	if (!bytes)
		return SC_OK;
	return scg_check_cuda(cudaMemsetAsync(dst, 0, bytes, scg_stream()), "cudaMemsetAsync");
}

extern "C" sc_status_t scg_copy(void *dst, const void *src, size_t bytes)
{
	if (!bytes)
		return SC_OK;
	return scg_check_cuda(
	    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, scg_stream()),
	    "cudaMemcpyAsync (device to device)");
}

extern "C" sc_status_t scg_to_host(void *dst_host, const void *src, size_t bytes)
{
	if (!bytes)
		return SC_OK;
	sc_status_t st = scg_check_cuda(
	    cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, scg_stream()),
	    "cudaMemcpyAsync (device to host)");
	if (st != SC_OK)
		return st;
	return scg_check_cuda(cudaStreamSynchronize(scg_stream()), "cudaStreamSynchronize");
}

extern "C" sc_status_t scg_from_host(void *dst, const void *src_host, size_t bytes)
{
	if (!bytes)
		return SC_OK;
	/* pageable host memory: the call returns once the source has been read */
	return scg_check_cuda(
	    cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, scg_stream()),
	    "cudaMemcpyAsync (host to device)");
}

extern "C" sc_status_t scg_sync(void)
{
	sc_status_t st =
	    scg_check_cuda(cudaStreamSynchronize(scg_stream()), "cudaStreamSynchronize");
	if (st != SC_OK)
		return st;
	/* a failed kernel launched earlier and not checked since */
	return scg_check_cuda(cudaGetLastError(), "scg_sync");
}

extern "C" sc_status_t scg_stream_get(void **stream_host)
{
	*stream_host = (void *)scg_stream();
	return SC_OK;
}

extern "C" sc_status_t scg_stream_query(int *done_host)
{
	cudaError_t e = cudaStreamQuery(scg_stream());
	*done_host = e == cudaSuccess;
	if (e == cudaErrorNotReady) {
		cudaGetLastError(); /* not an error: clear it */
		return SC_OK;
	}
	return scg_check_cuda(e, "cudaStreamQuery");
}

#endif
