/*
 * pool.h: a fixed set of worker threads that run one function on every thread and
 * return when all are done (fork-join). Workers sleep on a condition variable between
 * jobs; nothing spins (two-core machines, see docs/performance.md). The caller is thread 0.
 */
#ifndef SCD_DEVICE_POOL_H
#define SCD_DEVICE_POOL_H

#include "sparsecomm.h"

typedef void (*scd_pool_job_cb)(void *arg, unsigned tid, unsigned nthreads);
typedef struct scd_pool scd_pool_t;

sc_status_t scd_pool_create(unsigned nthreads, scd_pool_t **pool_p);
void scd_pool_destroy(scd_pool_t *pool);
unsigned scd_pool_size(const scd_pool_t *pool);
/* Runs job(arg, tid, n) for tid = 0 .. n-1 (0 on the calling thread) and waits. */
void scd_pool_run(scd_pool_t *pool, scd_pool_job_cb job, void *arg);

#endif
