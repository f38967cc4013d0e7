/*
 * gpu_fns.h: the GPU device's functions as linked into a test runner: the host build's
 * (libscgpu-host.a) in sparsecomm-unit, the CUDA build's under SCG_TEST_GPU
 * (sparsecomm-unit-gpu), for scd_cuda_ops_fill (daemon/device/cuda.h). A function built
 * on the GPU gets its line here.
 */
#ifndef SC_UNIT_GPU_FNS_H
#define SC_UNIT_GPU_FNS_H

#include "device/cuda.h"
#include "scg.h"
#include "unit.h"

/* The host build's (or, under SCG_TEST_GPU, the CUDA build's) functions. */
static inline scd_cuda_fns_t gpu_linked_fns(void)
{
	scd_cuda_fns_t f = {
	    .error = scg_error,
	    .backend = scg_backend,
	    .init = scg_init,
	    .stream_set = scg_stream_set,
	    .alloc = scg_alloc,
	    .free = scg_free,
	    .clear = scg_clear,
	    .copy = scg_copy,
	    .to_host = scg_to_host,
	    .from_host = scg_from_host,
	    .sync = scg_sync,
	    .reduce_sum = scg_reduce_sum,
	    .reduce_typed = scg_reduce_typed,
	    .average_typed = scg_average_typed,
	    .scale = scg_scale,
	    .coo_scatter = scg_coo_scatter,
	    .coo_scatter_add = scg_coo_scatter_add,
	    .count_nonzero = scg_count_nonzero,
	    .dense_to_coo = scg_dense_to_coo,
	    .sparsifier_create = scg_sparsifier_create,
	    .sparsifier_destroy = scg_sparsifier_destroy,
	    .sparsify = scg_sparsify,
	    .bitmap_encode = scg_bitmap_encode,
	    .bitmap_decode = scg_bitmap_decode,
	    .coo_check = scg_coo_check,
	    .lower_bound = scg_lower_bound,
	    .coo_copy_first = scg_coo_copy_first,
	    .coo_scale_copy = scg_coo_scale_copy,
	    .range_counts = scg_range_counts,
	    .coo_range_counts = scg_coo_range_counts,
	    .merge_two = scg_merge_two,
	    .residual_drain = scg_residual_drain,
	    .acc_aside = scg_acc_aside,
	    .residual_bits = scg_residual_bits,
	    .bits_set = scg_bits_set,
	    .residual_add = scg_residual_add,
	    .coo_add_checked = scg_coo_add_checked,
	    .coo_fold_residual = scg_coo_fold_residual,
	    .gather = scg_gather,
	    .coo_gather = scg_coo_gather,
	    .hh_create = scg_hh_create,
	    .hh_destroy = scg_hh_destroy,
	    .hh_push_dense = scg_hh_push_dense,
	    .hh_push_coo = scg_hh_push_coo,
	    .blocks_encode_dense = scg_blocks_encode_dense,
	    .sketch_encode = scg_sketch_encode,
	    .sketch_decode_dense = scg_sketch_decode_dense,
	    /* part.cu, and hhash.cu's hash bitmap */
	    .partmap_acquire = scg_partmap_acquire,
	    .partmap_release = scg_partmap_release,
	    .partition_coo = scg_partition_coo,
	    .coo_scatter_add_part = scg_coo_scatter_add_part,
	    .coo_encode = scg_coo_encode,
	    .coo_decode = scg_coo_decode,
	    .hash_bitmap_encode = scg_hash_bitmap_encode,
	    .hash_bitmap_encode_local = scg_hash_bitmap_encode_local,
	    .hash_bitmap_decode = scg_hash_bitmap_decode,
	    .hash_bitmap_decode_dense = scg_hash_bitmap_decode_dense,
	    /* exdyna.cu / blocks.cu / sketch.cu (decode_apply) */
	    .exdyna_create = scg_exdyna_create,
	    .exdyna_destroy = scg_exdyna_destroy,
	    .exdyna_select = scg_exdyna_select,
	    .exdyna_select_coo = scg_exdyna_select_coo,
	    .blocks_count_dense = scg_blocks_count_dense,
	    .blocks_decode = scg_blocks_decode,
	    .blocks_apply = scg_blocks_apply,
	    .sketch_decode_apply = scg_sketch_decode_apply,
	    /* kernels.cu */
	    .idx_count_runs = scg_idx_count_runs,
	    .idx_runs_encode = scg_idx_runs_encode,
	    .idx_bitmap_encode = scg_idx_bitmap_encode,
	    .runs_decode = scg_runs_decode,
	    .idx_add = scg_idx_add,
	    .lower_bounds = scg_lower_bounds,
	    .idx_check_range = scg_idx_check_range,
	    .coo_compact_nonzero = scg_coo_compact_nonzero,
	    .coo_merge_sum = scg_coo_merge_sum,
	    .coo_filter_mod = scg_coo_filter_mod,
	    .coo_block_runs = scg_coo_block_runs,
	    .sub_scaled = scg_sub_scaled,
	    .coo_topk = scg_coo_topk,
	};
	return f;
}

/* The cuda table of the linked build, complete (the test fails naming what is missing). */
static inline void gpu_linked_table(scd_device_ops_t *ops)
{
	scd_cuda_fns_t f = gpu_linked_fns();
	char missing[1024];
	unsigned n = scd_cuda_ops_fill(&f, ops, missing, sizeof missing);
	CHECK_MSG(n == 0, "%u ops of the GPU device are missing: %s", n, missing);
}

#endif
