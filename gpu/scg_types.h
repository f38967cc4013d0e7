/*
 * scg_types.h: the plain C structures the GPU device's kernels share with the daemon. Each
 * has the layout of the daemon's own structure of the same role (daemon/device/cuda.c
 * checks it at compile time), so the daemon passes its structures through unchanged.
 */
#ifndef SCG_TYPES_H
#define SCG_TYPES_H

#include <stdint.h>

/* A sparse tensor in coordinate form (scd_coo_t): nnz (index, value) pairs. */
typedef struct scg_coo {
	uint32_t *idx;
	float *val;
	uint64_t nnz;
	uint64_t cap;
} scg_coo_t;

#endif
