/*
 * portable.cuh: what lets one source build both for the GPU (nvcc) and for the host
 * (g++ with Thrust's OpenMP backend, SCG_HOST defined): the execution policy every
 * algorithm runs under, the function qualifiers, atomics, and error capture.
 */
#ifndef SCG_PORTABLE_CUH
#define SCG_PORTABLE_CUH

#include <thrust/execution_policy.h>

#include <cstddef>
#include <cuda/atomic>
#include <cuda/std/cstdint>

#include "scg.h"

#if defined(SCG_HOST)
#include <thrust/system/omp/execution_policy.h>
#define SCG_POLICY thrust::omp::par
#else
#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>
/* the calling thread's stream (mem.cu) */
cudaStream_t scg_stream(void);
/* Thrust's temporary storage, taken from the device's stream-ordered pool on the calling
 * thread's stream (mem.cu): Thrust's default is a cudaMalloc and a cudaFree per algorithm,
 * and cudaFree waits for the whole device. scg_init keeps the pool's memory cached, so a
 * step's algorithms reuse the previous step's storage without a call to the driver's
 * allocator. */
struct scg_temp_allocator {
	typedef char value_type;
	char *allocate(std::ptrdiff_t bytes);
	void deallocate(char *p, size_t bytes);
};
#define SCG_POLICY thrust::cuda::par_nosync(scg_temp_allocator()).on(scg_stream())
#endif

#define SCG_HD __host__ __device__

/* Records a failure's text for scg_error() and returns st. */
sc_status_t scg_fail(sc_status_t st, const char *fmt, ...);

/* Checks the last launch (CUDA build; a no-op on the host). */
#if defined(SCG_HOST)
#define SCG_CHECK(what) SC_OK
/* The emulated devices' bookkeeping (mem.cu): an allocation of bytes at p belongs to the
 * calling thread's current device until untagged; scg_host_local fails naming what when p
 * belongs to another device than the current one. */
void scg_host_tag(const void *p, size_t bytes);
void scg_host_untag(const void *p);
sc_status_t scg_host_local(const char *what, const void *p);
#define SCG_LOCAL(what, p) scg_host_local(what, p)
#else
/* A kernel on another device's memory is the driver's to refuse on the GPU. */
#define SCG_LOCAL(what, p) SC_OK
#define SCG_CHECK(what)	   scg_check_cuda(cudaGetLastError(), what)
sc_status_t scg_check_cuda(cudaError_t e, const char *what);
#endif

/* The ascending union of two strictly ascending lists (listops.cu): a + b on an equal
 * index; a value alone as it is, or, with zero_alone, b's as 0.0f + v (merge_two's rule,
 * coo_merge_sum's being the other). o distinct from a and b, room for an + bn. */
sc_status_t scg_merge_union(const char *what, const uint32_t *ai, const float *av, uint64_t an,
			    const uint32_t *bi, const float *bv, uint64_t bn, uint32_t *oi,
			    float *ov, bool zero_alone, uint64_t *nnz_host);

/* Runs a piece of work in a try block: Thrust reports failures by exception, which must
 * not cross the C boundary. */
#define SCG_TRY(label_, ...)                                                                   \
	do {                                                                                   \
		try {                                                                          \
			__VA_ARGS__;                                                           \
		} catch (const std::exception &ex_) {                                          \
			return scg_fail(SC_ERR_SYSTEM, "%s: %s", label_, ex_.what());          \
		}                                                                              \
	} while (0)

#endif
