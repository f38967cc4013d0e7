/*
 * mem.cu: the GPU device's errors, streams and memory (scg.h, section mem.cu), for both
 * builds (portable.cuh). The CUDA build allocates with cudaMalloc, clears and copies
 * asynchronously on the calling thread's stream (scg_init creates one per thread, or
 * scg_stream_set names the caller's), and to_host waits for that stream; a CUDA failure
 * returns SC_ERR_NOMEM (allocation), SC_ERR_UNSUPPORTED (no driver or no device) or
 * SC_ERR_SYSTEM, with cudaGetErrorString's text in scg_error(). The host build (SCG_HOST)
 * is malloc, memset and memcpy; its sync has nothing to wait for.
 */
#include "portable.cuh"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

#if defined(SCG_HOST)

extern "C" const char *scg_backend(void)
{
	return "host";
}

extern "C" sc_status_t scg_init(int ordinal)
{
	if (ordinal != 0)
		return scg_fail(SC_ERR_UNSUPPORTED,
				"scg_init: the host build has device 0 only");
	return SC_OK;
}

extern "C" sc_status_t scg_stream_set(void *stream)
{
	(void)stream;
	return SC_OK;
}

extern "C" sc_status_t scg_alloc(size_t bytes, void **p_host)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p) {
		*p_host = NULL;
		return scg_fail(SC_ERR_NOMEM, "scg_alloc: %zu bytes: out of memory", bytes);
	}
	*p_host = p;
	return SC_OK;
}

extern "C" sc_status_t scg_free(void *p)
{
	free(p);
	return SC_OK;
}

extern "C" sc_status_t scg_clear(void *dst, size_t bytes)
{
	if (bytes)
		memset(dst, 0, bytes);
	return SC_OK;
}

extern "C" sc_status_t scg_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
	return SC_OK;
}

extern "C" sc_status_t scg_to_host(void *dst_host, const void *src, size_t bytes)
{
	return scg_copy(dst_host, src, bytes);
}

extern "C" sc_status_t scg_from_host(void *dst, const void *src_host, size_t bytes)
{
	return scg_copy(dst, src_host, bytes);
}

extern "C" sc_status_t scg_sync(void)
{
	return SC_OK;
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

/* The calling thread's stream: created by scg_init, or the caller's (scg_stream_set);
 * 0 (the default stream) before either. */
static thread_local cudaStream_t scg_thread_stream;
static thread_local bool scg_thread_stream_owned;

cudaStream_t scg_stream(void)
{
	return scg_thread_stream;
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

extern "C" sc_status_t scg_init(int ordinal)
{
	int n = 0;
	sc_status_t st = scg_check_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	if (st != SC_OK)
		return st;
	if (ordinal < 0 || ordinal >= n)
		return scg_fail(SC_ERR_UNSUPPORTED, "scg_init: no CUDA device %d (%d present)",
				ordinal, n);
	st = scg_check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
	if (st != SC_OK)
		return st;
	if (!scg_thread_stream) {
		if ((st = pool_keep(ordinal)) != SC_OK)
			return st;
		cudaStream_t s = 0;
		st = scg_check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
				    "cudaStreamCreateWithFlags");
		if (st != SC_OK)
			return st;
		scg_thread_stream = s;
		scg_thread_stream_owned = true;
	}
	return SC_OK;
}

extern "C" sc_status_t scg_stream_set(void *stream)
{
	if (scg_thread_stream_owned && scg_thread_stream != (cudaStream_t)stream) {
		sc_status_t st = scg_check_cuda(cudaStreamSynchronize(scg_thread_stream),
						"cudaStreamSynchronize");
		cudaStreamDestroy(scg_thread_stream);
		scg_thread_stream_owned = false;
		if (st != SC_OK) {
			scg_thread_stream = (cudaStream_t)stream;
			return st;
		}
	}
	scg_thread_stream = (cudaStream_t)stream;
	return SC_OK;
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
