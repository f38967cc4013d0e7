/*
 * owed.c: the owed failed steps of released names (owed.h), a list by age: few names
 * have any (a trainer late past the stall timeout, then every trainer of its node letting
 * the name go), so a linear search serves.
 */
#include "ctl/owed.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct scd_owed_kept {
	char *name;
	scd_owed_t owed;
};

int scd_owed_any(const scd_owed_t *o)
{
	for (int l = 0; l < SCD_MAX_LOCAL; l++)
		if (o->count[l])
			return 1;
	return 0;
}

static void drop(scd_owed_keep_t *k, size_t i)
{
	free(k->v[i].name);
	memmove(&k->v[i], &k->v[i + 1], (k->n - i - 1) * sizeof(*k->v));
	k->n--;
}

static long find(const scd_owed_keep_t *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->v[i].name, name))
			return (long)i;
	return -1;
}

void scd_owed_put(scd_owed_keep_t *k, const char *name, const scd_owed_t *o)
{
	long i = find(k, name);
	if (i >= 0)
		drop(k, (size_t)i);
	if (!scd_owed_any(o))
		return;
	if (k->n == SCD_OWED_KEEP_MAX) {
		scd_error(
		    SCD_SUB_CTL,
		    "more than %d released names with failed steps a trainer still owes: "
		    "those of '%s' are forgotten (its late trainer's next step pairs with "
		    "the others' next)",
		    SCD_OWED_KEEP_MAX, k->v[0].name);
		drop(k, 0);
	}
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 16;
		scd_owed_kept_t *v = realloc(k->v, cap * sizeof(*v));
		if (!v)
			goto nomem;
		k->v = v;
		k->cap = cap;
	}
	if (!(k->v[k->n].name = strdup(name)))
		goto nomem;
	k->v[k->n++].owed = *o;
	return;
nomem:
	scd_error(SCD_SUB_CTL, "out of memory keeping the steps owed for released '%s'", name);
}

int scd_owed_take(scd_owed_keep_t *k, const char *name, scd_owed_t *o)
{
	long i = find(k, name);
	if (i < 0)
		return 0;
	*o = k->v[i].owed;
	drop(k, (size_t)i);
	return 1;
}

void scd_owed_forgive(scd_owed_keep_t *k, int l)
{
	for (size_t i = k->n; i-- > 0;) {
		k->v[i].owed.count[l] = 0;
		if (!scd_owed_any(&k->v[i].owed))
			drop(k, i);
	}
}

void scd_owed_clear(scd_owed_keep_t *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].name);
	free(k->v);
	*k = (scd_owed_keep_t){0};
}
