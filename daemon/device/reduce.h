/*
 * reduce.h: elementwise sum of two buffers of any dtype of the public API, shared by the
 * engine (summing a node's trainers) and the transport's ring. float32 goes through the
 * cpu device's reduce_sum; integers add as unsigned (two's-complement wrap-around, no
 * undefined overflow).
 */
#ifndef SCD_DEVICE_REDUCE_H
#define SCD_DEVICE_REDUCE_H

#include <stdint.h>

#include "sparsecomm.h"

/* dst[i] += src[i] for n elements of dtype; an unknown dtype does nothing. */
void scd_reduce_typed(sc_dtype_t dtype, void *dst, const void *src, uint64_t n);

#endif
