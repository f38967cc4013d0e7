/*
 * pool.c: fork-join worker threads (see pool.h). A generation counter under one mutex
 * starts a job; a pending counter ends it. Two condition variables, no spinning.
 */
#include "device/pool.h"

#include <pthread.h>
#include <stdlib.h>

struct scd_pool {
	pthread_mutex_t lock;
	pthread_cond_t start_cv, done_cv;
	unsigned nthreads;
	unsigned pending;
	uint64_t generation;
	int stopping;
	scd_pool_job_cb job;
	void *arg;
	pthread_t *threads;
	unsigned started;
};

typedef struct {
	scd_pool_t *pool;
	unsigned tid;
} worker_arg_t;

static void *worker_main(void *p)
{
	worker_arg_t wa = *(worker_arg_t *)p;
	free(p);
	scd_pool_t *pool = wa.pool;
	uint64_t seen = 0;
	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (pool->generation == seen && !pool->stopping)
			pthread_cond_wait(&pool->start_cv, &pool->lock);
		if (pool->stopping)
			break;
		seen = pool->generation;
		scd_pool_job_cb job = pool->job;
		void *arg = pool->arg;
		pthread_mutex_unlock(&pool->lock);
		job(arg, wa.tid, pool->nthreads);
		pthread_mutex_lock(&pool->lock);
		if (--pool->pending == 0)
			pthread_cond_signal(&pool->done_cv);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

sc_status_t scd_pool_create(unsigned nthreads, scd_pool_t **pool_p)
{
	if (nthreads == 0)
		nthreads = 1;
	scd_pool_t *pool = calloc(1, sizeof(*pool));
	if (!pool)
		return SC_ERR_NOMEM;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->start_cv, NULL);
	pthread_cond_init(&pool->done_cv, NULL);
	pool->nthreads = nthreads;
	pool->threads = calloc(nthreads, sizeof(pthread_t));
	if (!pool->threads) {
		scd_pool_destroy(pool);
		return SC_ERR_NOMEM;
	}
	for (unsigned t = 1; t < nthreads; t++) {
		worker_arg_t *wa = malloc(sizeof(*wa));
		if (wa)
			*wa = (worker_arg_t){pool, t};
		if (!wa || pthread_create(&pool->threads[t], NULL, worker_main, wa) != 0) {
			sc_status_t st = wa ? SC_ERR_SYSTEM : SC_ERR_NOMEM;
			free(wa);
			scd_pool_destroy(pool);
			return st;
		}
		pool->started++;
	}
	*pool_p = pool;
	return SC_OK;
}

void scd_pool_destroy(scd_pool_t *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->stopping = 1;
	pthread_cond_broadcast(&pool->start_cv);
	pthread_mutex_unlock(&pool->lock);
	for (unsigned t = 1; t <= pool->started; t++)
		pthread_join(pool->threads[t], NULL);
	pthread_cond_destroy(&pool->start_cv);
	pthread_cond_destroy(&pool->done_cv);
	pthread_mutex_destroy(&pool->lock);
	free(pool->threads);
	free(pool);
}

unsigned scd_pool_size(const scd_pool_t *pool)
{
	return pool ? pool->nthreads : 1;
}

void scd_pool_run(scd_pool_t *pool, scd_pool_job_cb job, void *arg)
{
	if (!pool || pool->nthreads == 1) {
		job(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&pool->lock);
	pool->job = job;
	pool->arg = arg;
	pool->pending = pool->nthreads - 1;
	pool->generation++;
	pthread_cond_broadcast(&pool->start_cv);
	pthread_mutex_unlock(&pool->lock);
	job(arg, 0, pool->nthreads);
	pthread_mutex_lock(&pool->lock);
	while (pool->pending)
		pthread_cond_wait(&pool->done_cv, &pool->lock);
	pthread_mutex_unlock(&pool->lock);
}
