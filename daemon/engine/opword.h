/*
 * opword.h: the operation word of a tensor's step, shared by the control socket (which
 * sets it from the trainers' requests), negotiation (which carries it and checks that the
 * ranks agree) and the engine (which runs it).
 */
#ifndef SCD_ENGINE_OPWORD_H
#define SCD_ENGINE_OPWORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparsecomm.h"

/*
 * The operation word of a node tensor's step, as negotiation carries it (nt->op, the
 * announcements' and the response cache's op): an sc_reduce_op_t, a broadcast from
 * trainer rank root as SCD_OP_BROADCAST | root, SCD_OP_ALLGATHER, SCD_OP_ALLTOALL, or a
 * reduce-scatter (below). The ranks must agree on the whole word: a broadcast from another
 * root, or a reduce-scatter in rows of another length, is a mismatch like another reduction.
 */
#define SCD_OP_BROADCAST 0x80000000u
/* An allgather of every trainer's first elements (scd_job_src_t.count), in rank order; it
 * runs in a buffer of its own. */
#define SCD_OP_ALLGATHER 0x40000000u
/* A reduce-scatter by reduction op in rows of row elements: SCD_OP_REDUCESCATTER |
 * row << 3 | op (row below SCD_RS_ROW_MAX); it runs in a buffer of its own. */
#define SCD_OP_REDUCESCATTER 0x20000000u
#define SCD_RS_ROW_MAX	     (1u << 26)
/* An alltoall of blocks by send counts (scd_job_src_t.a2a); it runs in a buffer of its own
 * (engine/alltoall.h). */
#define SCD_OP_ALLTOALL 0x10000000u

/*
 * The type word of a tensor, as negotiation carries it in the dtype fields (announcements,
 * the response cache, the plans): the sc_dtype_t in the low byte and the sc_wire_t of its
 * dense sums above it. The ranks must agree on the whole word (a rank that registered
 * another wire format is a mismatch naming it), and tensors whose words differ never
 * share a fused buffer.
 */
static inline uint32_t scd_typeword(uint32_t dtype, uint32_t wire)
{
	return dtype | wire << 8;
}
static inline uint32_t scd_tw_dtype(uint32_t word)
{
	return word & 0xffu;
}
static inline uint32_t scd_tw_wire(uint32_t word)
{
	return word >> 8;
}

static inline int scd_op_is_reducescatter(uint32_t op)
{
	return (op & (SCD_OP_BROADCAST | SCD_OP_ALLGATHER | SCD_OP_REDUCESCATTER)) ==
	       SCD_OP_REDUCESCATTER;
}

static inline uint32_t scd_op_rs_row(uint32_t op)
{
	return (op & ~SCD_OP_REDUCESCATTER) >> 3;
}

/* The reduction an operation word applies: its own, or a reduce-scatter's. */
static inline sc_reduce_op_t scd_op_reduction(uint32_t op)
{
	return scd_op_is_reducescatter(op) ? (sc_reduce_op_t)(op & 7u) : (sc_reduce_op_t)op;
}

static inline int scd_op_is_broadcast(uint32_t op)
{
	return (op & SCD_OP_BROADCAST) != 0;
}

static inline int scd_op_root(uint32_t op)
{
	return (int)(op & ~SCD_OP_BROADCAST);
}

/* "sum", "max", ... or "broadcast from rank 3", in buf. */
static inline const char *scd_op_describe(uint32_t op, char *buf, size_t len)
{
	if (scd_op_is_broadcast(op))
		snprintf(buf, len, "broadcast from rank %d", scd_op_root(op));
	else if (op == SCD_OP_ALLGATHER)
		snprintf(buf, len, "allgather");
	else if (op == SCD_OP_ALLTOALL)
		snprintf(buf, len, "alltoall");
	else if (scd_op_is_reducescatter(op))
		snprintf(buf, len, "reducescatter (%s, rows of %u)",
			 sc_reduce_op_name(scd_op_reduction(op)), scd_op_rs_row(op));
	else
		snprintf(buf, len, "%s", sc_reduce_op_name((sc_reduce_op_t)op));
	return buf;
}

#endif
