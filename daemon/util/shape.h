/*
 * shape.h: a submission's dimensions as the daemons compare them (docs/design.md,
 * "Errors"). A trainer may give its tensor's shape with an allreduce or a broadcast
 * (sc_tensor_set_shape); every rank must give the same one, as Horovod requires, or the
 * operation fails on every rank naming each rank's shape. The compared form is small and
 * fixed: one dimension, or none given, is no shape at all (the element count, compared
 * anyway, says it all); up to SCD_SHAPE_KEPT dimensions are kept as they are, and with
 * more the first SCD_SHAPE_KEPT - 1 are, the last word holding a hash of the rest.
 *
 * An empty tensor (a dimension of 0) has no buffer to submit: a trainer submits a
 * one-element stand-in with the empty shape, kept whatever its dimensions (one too), so
 * that negotiation compares it with the other ranks' tensors as Horovod compares an empty
 * tensor's shape, and a rank whose tensor is empty while another's is not fails at once.
 */
#ifndef SCD_UTIL_SHAPE_H
#define SCD_UTIL_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#define SCD_SHAPE_MAX_DIMS 64 /* the dimensions a submission may give (SC_MAX_DIMS) */
#define SCD_SHAPE_KEPT	   8

typedef struct scd_shape {
	uint32_t ndim; /* 0 (one dimension or none given), or 2 to SCD_SHAPE_MAX_DIMS (1 too
			* for an empty tensor's) */
	uint64_t dim[SCD_SHAPE_KEPT];
} scd_shape_t;

/* s from the n dimensions dims of a tensor of numel elements (a product of 0 with numel
 * 1: an empty tensor's stand-in): 0, or -1 with err saying what is wrong (too many
 * dimensions, a product that is not numel). */
int scd_shape_make(scd_shape_t *s, const uint64_t *dims, size_t n, uint64_t numel, char *err,
		   size_t len);
/* s from a peer daemon's compared form (ndim, n kept words), bounded; never fails. */
void scd_shape_from_kept(scd_shape_t *s, uint32_t ndim, const uint64_t *kept, size_t n);
/* The words of s's compared form (0 to SCD_SHAPE_KEPT). */
size_t scd_shape_kept(const scd_shape_t *s);
int scd_shape_equal(const scd_shape_t *a, const scd_shape_t *b);
/* Whether s is an empty tensor's shape: the submission stands for no elements. */
int scd_shape_empty(const scd_shape_t *s);
/* s as text, "[17, 23, 57]" (numel: the one dimension of ndim 0), into buf. */
void scd_shape_text(const scd_shape_t *s, uint64_t numel, char *buf, size_t len);

#endif
