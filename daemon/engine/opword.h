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
 * trainer rank root as SCD_OP_BROADCAST | root, or SCD_OP_ALLGATHER. The ranks must agree
 * on the whole word: a broadcast from another root is a mismatch like another reduction.
 */
#define SCD_OP_BROADCAST 0x80000000u
/* An allgather of every trainer's first elements (scd_job_src_t.count), in rank order; it
 * runs in a buffer of its own. */
#define SCD_OP_ALLGATHER 0x40000000u

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
	else
		snprintf(buf, len, "%s", sc_reduce_op_name((sc_reduce_op_t)op));
	return buf;
}

#endif
