/* arena.c: see arena.h. Blocks of at least 16 KiB, each a separate allocation. */
#include "util/arena.h"

#include <stdlib.h>
#include <string.h>

struct scd_arena_block {
	struct scd_arena_block *next;
	size_t used, cap;
	max_align_t data[];
};

void *scd_arena_alloc(scd_arena_t *a, size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	struct scd_arena_block *b = a->head;
	if (!b || b->cap - b->used < bytes) {
		size_t cap = bytes > 16384 ? bytes : 16384;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += bytes;
	memset(p, 0, bytes);
	return p;
}

char *scd_arena_strdup(scd_arena_t *a, const char *s)
{
	return scd_arena_strndup(a, s, strlen(s));
}

char *scd_arena_strndup(scd_arena_t *a, const char *s, size_t len)
{
	char *p = scd_arena_alloc(a, len + 1); /* zeroed: terminated */
	if (p)
		memcpy(p, s, len);
	return p;
}

void scd_arena_free(scd_arena_t *a)
{
	for (struct scd_arena_block *b = a->head, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	a->head = NULL;
}
