/*
 * device.c: the cpu device's ops table and the device registry (see device.h), with its
 * device-level answers by kind (home, lost, backend, host staging; trivial for the cpu
 * device). The cuda slot (cuda.c) loads the GPU device's library at run time, the first
 * time it is asked for; without it, a driver or a GPU it reports "not supported".
 */
#include "device/device.h"

#include <stdlib.h>

#include "device/cuda.h"
#include "device/fold.h"
#include "device/msgops.h"
#include "device/reduce.h"

const scd_device_ops_t scd_device_cpu_ops = {
    .name = "cpu",
    .kind = SCD_DEVICE_CPU,
    .alloc = scd_cpu_alloc,
    .free = scd_cpu_free,
    .clear = scd_cpu_clear,
    .copy = scd_cpu_copy,
    .to_host = scd_cpu_copy,
    .from_host = scd_cpu_copy,
    .sync = scd_cpu_sync,
    .count_nonzero = scd_count_nonzero,
    .dense_to_coo = scd_dense_to_coo,
    .coo_scatter = scd_coo_scatter,
    .coo_check = scd_coo_check,
    .lower_bound = scd_lower_bound_u32,
    .merge_two = scd_coo_merge_two,
    .coo_copy_first = scd_coo_copy_first,
    .coo_scale_copy = scd_coo_scale_copy,
    .gather = scd_gather,
    .coo_gather = scd_coo_gather,
    .coo_topk = scd_coo_topk,
    .range_counts = scd_range_counts,
    .coo_range_counts = scd_coo_range_counts,
    .residual_add = scd_residual_add,
    .scale = scd_scale_f32,
    /* -- scheme infrastructure -- */
    .idx_count_runs = scd_idx_count_runs,
    .idx_runs_encode = scd_idx_runs_encode,
    .idx_bitmap_encode = scd_idx_bitmap_encode,
    .runs_decode = scd_runs_decode,
    .idx_add = scd_idx_add,
    /* -- per-scheme kernels -- */
    .partmap_acquire = scd_partmap_acquire,
    .partmap_release = scd_partmap_release,
    .lower_bounds = scd_lower_bounds,
    .idx_check_range = scd_idx_check_range,
    .coo_compact_nonzero = scd_coo_compact_nonzero,
    .coo_merge_sum = scd_coo_merge_sum,
    .coo_filter_mod = scd_coo_filter_mod,
    .coo_block_runs = scd_coo_block_runs,
    .sub_scaled = scd_sub_scaled,
    .blocks_count_dense = scd_blocks_count_dense,
    .blocks_apply = scd_blocks_apply,
    /* -- engine -- */
    .reduce_typed = scd_reduce_typed,
    .average_typed = scd_average_typed,
    .coo_add_checked = scd_coo_add_checked,
    .residual_drain = scd_residual_drain,
    .acc_aside = scd_acc_aside,
    .residual_bits = scd_residual_bits,
    .bits_set = scd_bits_set,
    .coo_fold_residual = scd_coo_fold_residual,
    .sparsifier_create = scd_sparsifier_create,
    .sparsifier_destroy = scd_sparsifier_destroy,
    .sparsify = scd_sparsify,
    .exdyna_create = scd_exdyna_create,
    .exdyna_destroy = scd_exdyna_destroy,
    .exdyna_select = scd_exdyna_select,
    .exdyna_select_coo = scd_exdyna_select_coo,
    .exdyna_update = scd_exdyna_update,
    .hh_create = scd_hh_create,
    .hh_destroy = scd_hh_destroy,
    .hh_push_dense = scd_hh_push_dense,
    .hh_push_coo = scd_hh_push_coo,
    .partition_coo = scd_partition_coo,
    .coo_encode = scd_coo_encode,
    .coo_decode = scd_coo_decode,
    .bitmap_encode = scd_bitmap_encode,
    .bitmap_decode = scd_bitmap_decode,
    .hash_bitmap_encode = scd_hash_bitmap_encode,
    .hash_bitmap_encode_seg = scd_hash_bitmap_encode_seg,
    .hash_bitmap_decode_seg = scd_hash_bitmap_decode_seg,
    .hash_bitmap_decode_dense_seg = scd_hash_bitmap_decode_dense_seg,
    .blocks_encode_dense = scd_blocks_encode_dense,
    .blocks_decode = scd_blocks_decode,
    .sketch_encode = scd_sketch_encode,
    .sketch_decode_dense = scd_sketch_decode_dense,
    .sketch_decode_apply = scd_sketch_decode_apply,
    .reduce_sum = scd_reduce_sum,
    .coo_scatter_add = scd_coo_scatter_add,
    .coo_scatter_add_part = scd_coo_scatter_add_part,
};

const char *scd_device_kind_name(scd_device_kind_t kind)
{
	switch (kind) {
	case SCD_DEVICE_CPU:
		return "cpu";
	case SCD_DEVICE_CUDA:
		return "cuda";
	default:
		return "unknown";
	}
}

sc_status_t scd_device_get(scd_device_kind_t kind, const scd_device_ops_t **ops_p)
{
	if (kind == SCD_DEVICE_CPU) {
		*ops_p = &scd_device_cpu_ops;
		return SC_OK;
	}
	if (kind == SCD_DEVICE_CUDA)
		return scd_cuda_device_get(ops_p);
	return SC_ERR_UNSUPPORTED;
}

int scd_device_host_memory(const scd_device_ops_t *dev)
{
	return dev &&
	       dev->kind == SCD_DEVICE_CPU; /* a copy of its table too (tests wrap one) */
}

void *scd_device_stage_alloc(const scd_device_ops_t *dev, size_t bytes)
{
	if (dev->kind == SCD_DEVICE_CUDA)
		return scd_cuda_stage_alloc(bytes);
	return malloc(bytes ? bytes : 1);
}

void scd_device_stage_free(const scd_device_ops_t *dev, void *p)
{
	if (dev->kind == SCD_DEVICE_CUDA)
		scd_cuda_stage_free(p);
	else
		free(p);
}

void scd_device_home_set(scd_device_kind_t kind, int ordinal)
{
	if (kind == SCD_DEVICE_CUDA)
		scd_cuda_engine_set(ordinal);
}

int scd_device_home(scd_device_kind_t kind)
{
	return kind == SCD_DEVICE_CUDA ? scd_cuda_engine() : 0;
}

int scd_device_at_home(scd_device_kind_t kind, int ordinal)
{
	return kind != SCD_DEVICE_CUDA || ordinal == scd_cuda_engine();
}

const char *scd_device_lost(scd_device_kind_t kind)
{
	return kind == SCD_DEVICE_CUDA ? scd_cuda_lost() : NULL;
}

const char *scd_device_backend(scd_device_kind_t kind)
{
	return kind == SCD_DEVICE_CUDA ? scd_cuda_backend() : scd_device_kind_name(kind);
}

const char *scd_device_unavailable_reason(scd_device_kind_t kind)
{
	if (kind == SCD_DEVICE_CUDA)
		return scd_cuda_unavailable_reason();
	return kind == SCD_DEVICE_CPU ? "" : "no such device";
}
