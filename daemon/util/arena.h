/*
 * arena.h: a bump allocator for building one reply (protobuf-c messages with repeated
 * fields point into it); everything is freed at once after the reply is sent.
 */
#ifndef SCD_UTIL_ARENA_H
#define SCD_UTIL_ARENA_H

#include <stddef.h>

typedef struct scd_arena {
	struct scd_arena_block *head;
} scd_arena_t;

/* Zeroed memory that lives until scd_arena_free; NULL when out of memory. */
void *scd_arena_alloc(scd_arena_t *a, size_t bytes);
char *scd_arena_strdup(scd_arena_t *a, const char *s);
/* The first len bytes of s, terminated. */
char *scd_arena_strndup(scd_arena_t *a, const char *s, size_t len);
void scd_arena_free(scd_arena_t *a);

#endif
