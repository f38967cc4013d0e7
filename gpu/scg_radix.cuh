/*
 * scg_radix.cuh: the pieces of the GPU device's radix select over magnitude keys that
 * select.cu's exact top-k and kernels.cu's top-k of COO lists share: the magnitude key
 * (scd_abs_key: |x|'s bits), kth.c's digits (bits 30..20, then 19..10 and 9..0), the
 * histogram of one digit over the keys that match the prefix found so far, and the pick
 * of the bucket that holds the remaining-th largest key. select.cu's file comment
 * describes the method.
 */
#ifndef SCG_RADIX_CUH
#define SCG_RADIX_CUH

#include "portable.cuh"

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstring>

typedef unsigned long long u64;

namespace
{

#define TOP_SHIFT 20 /* first digit: key bits 30..20 (2048 buckets), then 19..10, 9..0 */
#define DIGIT	  10

SCG_HD inline uint32_t abs_key(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	return u & 0x7fffffffu;
}

/* acc = in + res, res or in, whichever the pointers call for */
struct acc_view {
	const float *in;
	const float *res;
	SCG_HD float operator()(uint64_t i) const
	{
		return in ? (res ? in[i] + res[i] : in[i]) : res[i];
	}
};

#if defined(SCG_HOST) || defined(SCG_PORTABLE_KERNELS)
struct hist_op {
	acc_view acc;
	u64 *hist;
	uint32_t mask, prefix, dmask;
	int shift;
	const uint32_t *prefix_dev; /* the prefix in device memory, or NULL: prefix */
	SCG_HD void operator()(uint64_t i) const
	{
		uint32_t key = abs_key(acc(i));
		if ((key & mask) == (prefix_dev ? *prefix_dev : prefix))
			cuda::atomic_ref<u64, cuda::thread_scope_device>(
			    hist[(key >> shift) & dmask])
			    .fetch_add(1, cuda::std::memory_order_relaxed);
	}
};
#endif

#if !defined(SCG_HOST) && !defined(SCG_PORTABLE_KERNELS)
/* The CUDA build's histogram: per-block counts in shared memory (the keys of a gradient
 * crowd into a few buckets, which global atomics would serialise), then one global add
 * per non-empty bucket and block. Same counts as hist_op's (the portable version, which
 * the host build runs). A block sees at most n / HIST_GRID elements: its 32-bit counts
 * cannot overflow for n < 2^32. */
#define HIST_BLOCK 256
#define HIST_GRID  2048

template <uint32_t NB>
__global__ void hist_kernel(acc_view acc, uint64_t n, u64 *hist, uint32_t mask, uint32_t prefix,
			    int shift, const uint32_t *prefix_dev)
{
	__shared__ unsigned int h[NB];
	if (prefix_dev)
		prefix = *prefix_dev;
	for (uint32_t b = threadIdx.x; b < NB; b += blockDim.x)
		h[b] = 0;
	__syncthreads();
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		uint32_t key = abs_key(acc(i));
		if ((key & mask) == prefix)
			atomicAdd(&h[(key >> shift) & (NB - 1)], 1u);
	}
	__syncthreads();
	for (uint32_t b = threadIdx.x; b < NB; b += blockDim.x)
		if (h[b])
			atomicAdd(&hist[b], (u64)h[b]);
}
#endif

/* Adds the histogram of digit (key >> shift) & (nb - 1) over the keys whose masked bits
 * equal prefix (or *prefix_dev, device memory, when not NULL: a prefix the device picked)
 * into hist (nb buckets, cleared by the caller). */
inline sc_status_t histogram(acc_view acc, uint64_t n, u64 *hist, uint32_t nb, uint32_t mask,
			     uint32_t prefix, int shift, const char *what,
			     const uint32_t *prefix_dev = nullptr)
{
#if defined(SCG_HOST) || defined(SCG_PORTABLE_KERNELS)
	thrust::counting_iterator<uint64_t> i0(0);
	SCG_TRY(what,
		thrust::for_each(SCG_POLICY, i0, i0 + n,
				 hist_op{acc, hist, mask, prefix, nb - 1, shift, prefix_dev}));
	return SC_OK;
#else
	uint64_t blocks = (n + HIST_BLOCK - 1) / HIST_BLOCK;
	unsigned grid = (unsigned)(blocks < HIST_GRID ? blocks : HIST_GRID);
	if (nb == 2048)
		hist_kernel<2048><<<grid, HIST_BLOCK, 0, scg_stream()>>>(
		    acc, n, hist, mask, prefix, shift, prefix_dev);
	else
		hist_kernel<1024><<<grid, HIST_BLOCK, 0, scg_stream()>>>(
		    acc, n, hist, mask, prefix, shift, prefix_dev);
	return scg_check_cuda(cudaGetLastError(), what);
#endif
}

/* From the top bucket down: the one holding the remaining-th largest key (kth.c). */
inline uint32_t pick(const u64 *hist, uint32_t nb, uint64_t *remaining, uint64_t *gt)
{
	uint32_t b = nb - 1;
	for (; b > 0 && *remaining > hist[b]; b--) {
		*remaining -= hist[b];
		*gt += hist[b];
	}
	return b;
}

} // namespace

#endif
