/*
 * bigmem.c: see bigmem.h.
 */
#include "util/bigmem.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_BYTES ((size_t)2 << 20)

void *scd_big_alloc(size_t bytes)
{
	void *p = NULL;
	if (bytes < HUGE_BYTES)
		return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	size_t len = (bytes + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
	if (posix_memalign(&p, HUGE_BYTES, len))
		return NULL;
	(void)madvise(p, len, MADV_HUGEPAGE); /* advisory: fine if refused */
	return p;
}
