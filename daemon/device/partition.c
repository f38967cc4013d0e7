/*
 * partition.c: the reference-counted cache of sorted per-partition index lists I_p that
 * ZEN's hash bitmap decodes against (Algorithm 2; "computed and sorted offline").
 *
 * Build: one counting pass (hash every index, count per partition) and one fill pass in
 * ascending index order, so each list comes out sorted without a sort. Entries live while
 * referenced; a handful of tensors share few (numel, P, seed) triples, so a list suffices.
 */
#include "device/partition.h"

#include "util/bigmem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
	scd_partmap_t map;
	int refs;
	struct entry *next;
} entry_t;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *cache;
static uint64_t builds;

static sc_status_t build(entry_t *e, uint64_t numel, uint32_t nparts, uint64_t seed)
{
	scd_partmap_t *m = &e->map;
	m->numel = numel;
	m->seed = seed;
	m->fn = scd_partfn_make(nparts, seed);
	m->offset = calloc((size_t)m->fn.nparts + 1, sizeof(uint64_t));
	m->list = scd_big_alloc((numel ? numel : 1) * sizeof(uint32_t));
	m->pos = scd_big_alloc((numel ? numel : 1) * sizeof(uint32_t));
	if (!m->offset || !m->list || !m->pos)
		return SC_ERR_NOMEM;
	for (uint64_t i = 0; i < numel; i++)
		m->offset[scd_partition_of(&m->fn, (uint32_t)i) + 1]++;
	for (uint32_t p = 0; p < m->fn.nparts; p++)
		m->offset[p + 1] += m->offset[p];
	uint64_t *cursor = malloc((size_t)m->fn.nparts * sizeof(uint64_t));
	if (!cursor)
		return SC_ERR_NOMEM;
	for (uint32_t p = 0; p < m->fn.nparts; p++)
		cursor[p] = m->offset[p];
	for (uint64_t i = 0; i < numel; i++) {
		uint32_t p = scd_partition_of(&m->fn, (uint32_t)i);
		m->pos[i] = (uint32_t)(cursor[p] - m->offset[p]);
		m->list[cursor[p]++] = (uint32_t)i;
	}
	free(cursor);
	return SC_OK;
}

sc_status_t scd_partition_coo(const scd_partfn_t *fn, const scd_coo_t *in, scd_coo_t *out,
			      uint64_t *offset)
{
	uint32_t P = fn->nparts;
	if (out->cap < in->nnz)
		return SC_ERR_LIMIT;
	/* counts, then ends: offset[p + 1] = where partition p ends */
	memset(offset, 0, ((size_t)P + 1) * sizeof(uint64_t));
	for (uint64_t i = 0; i < in->nnz; i++)
		offset[scd_partition_of(fn, in->idx[i]) + 1]++;
	for (uint32_t p = 0; p < P; p++)
		offset[p + 1] += offset[p];
	/* placed from the back, each partition fills down from its end: its order is kept,
	 * and offset[p + 1] ends at partition p's start */
	for (uint64_t i = in->nnz; i-- > 0;) {
		uint32_t idx = in->idx[i];
		uint64_t k = --offset[scd_partition_of(fn, idx) + 1];
		out->idx[k] = idx;
		out->val[k] = in->val[i];
	}
	for (uint32_t p = 0; p < P; p++)
		offset[p] = offset[p + 1];
	offset[P] = in->nnz;
	out->nnz = in->nnz;
	return SC_OK;
}

static void entry_free(entry_t *e)
{
	free(e->map.offset);
	free(e->map.list);
	free(e->map.pos);
	free(e);
}

sc_status_t scd_partmap_acquire(uint64_t numel, uint32_t nparts, uint64_t seed,
				const scd_partmap_t **map_p)
{
	if (numel > SCD_NUMEL_MAX || nparts == 0 || !map_p)
		return SC_ERR_INVALID;
	pthread_mutex_lock(&cache_lock);
	for (entry_t *e = cache; e; e = e->next)
		if (e->map.numel == numel && e->map.fn.nparts == nparts &&
		    e->map.seed == seed) {
			e->refs++;
			*map_p = &e->map;
			pthread_mutex_unlock(&cache_lock);
			return SC_OK;
		}
	/* Built under the lock: a second caller for the same triple waits instead of
	 * building it twice. */
	entry_t *e = calloc(1, sizeof(*e));
	sc_status_t st = e ? build(e, numel, nparts, seed) : SC_ERR_NOMEM;
	if (st != SC_OK) {
		if (e)
			entry_free(e);
		pthread_mutex_unlock(&cache_lock);
		return st;
	}
	e->refs = 1;
	e->next = cache;
	cache = e;
	builds++;
	*map_p = &e->map;
	pthread_mutex_unlock(&cache_lock);
	return SC_OK;
}

void scd_partmap_release(const scd_partmap_t *map)
{
	if (!map)
		return;
	pthread_mutex_lock(&cache_lock);
	for (entry_t **pp = &cache; *pp; pp = &(*pp)->next) {
		entry_t *e = *pp;
		if (&e->map != map)
			continue;
		if (--e->refs == 0) {
			*pp = e->next;
			entry_free(e);
		}
		break;
	}
	pthread_mutex_unlock(&cache_lock);
}

uint64_t scd_partmap_builds(void)
{
	pthread_mutex_lock(&cache_lock);
	uint64_t b = builds;
	pthread_mutex_unlock(&cache_lock);
	return b;
}
