/* stats_keep.c: statistics of released tensors, kept until reset (stats_keep.h). */
#include "ctl/stats_keep.h"

#include <stdlib.h>
#include <string.h>

static void drop(scd_stats_keep_t *k, size_t i)
{
	free(k->v[i].name);
	memmove(&k->v[i], &k->v[i + 1], (k->n - i - 1) * sizeof(*k->v));
	k->n--;
}

void scd_stats_keep_put(scd_stats_keep_t *k, const char *name, uint32_t dtype, uint64_t numel,
			const scd_tensor_stats_t *s)
{
	if (s->calls == 0 && s->errors == 0)
		return;
	if (k->n == SCD_STATS_KEEP_MAX)
		drop(k, 0);
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 16;
		scd_kept_stats_t *v = realloc(k->v, cap * sizeof(*v));
		if (!v)
			return;
		k->v = v;
		k->cap = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return;
	k->v[k->n++] = (scd_kept_stats_t){copy, dtype, numel, *s};
}

int scd_stats_keep_take(scd_stats_keep_t *k, const char *name, uint32_t dtype, uint64_t numel,
			scd_tensor_stats_t *s)
{
	for (size_t i = 0; i < k->n; i++) {
		if (strcmp(k->v[i].name, name) != 0)
			continue;
		int same = k->v[i].dtype == dtype && k->v[i].numel == numel;
		if (same)
			*s = k->v[i].stats;
		drop(k, i);
		return same;
	}
	return 0;
}

void scd_stats_keep_clear(scd_stats_keep_t *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].name);
	free(k->v);
	*k = (scd_stats_keep_t){0};
}
