/*
 * bigmem.h: allocations for large arrays read or written at random (hash tables, the
 * partition maps, the schemes' workspaces). From 2 MiB up they are 2 MiB aligned and
 * advised onto transparent huge pages, where the kernel allows (THP "madvise" mode is
 * Debian's default): with 4 KiB pages every random access to a 256 MiB array also misses
 * the TLB, a page walk that costs more than the access (more still in a VM). Free with
 * free().
 */
#ifndef SCD_UTIL_BIGMEM_H
#define SCD_UTIL_BIGMEM_H

#include <stddef.h>

/* 64-byte aligned; huge-page advised from 2 MiB. NULL when out of memory. */
void *scd_big_alloc(size_t bytes);

#endif
