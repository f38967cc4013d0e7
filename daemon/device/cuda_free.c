/*
 * cuda_free.c: one thread that frees what registrations shared with trainers on the GPU,
 * off the loop thread (cuda_free.h). Releases run in the order queued; the thread starts
 * at the first release and sleeps on a condition variable between them.
 */
#include "device/cuda_free.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

typedef struct release {
	struct release *next;
	const scd_cuda_ipc_t *ipc;
	int ordinal;
	void *mem, *ready, *done;
	char what[160];
} release_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;	  /* queued */
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER; /* done */
static release_t *head, *tail;
static int started;
static uint64_t n_queued, n_done;

/* Frees one release's events and memory on its GPU; a failure is logged (the memory of a
 * lost GPU is gone with its context anyway). */
static void release_run(const release_t *r)
{
	const scd_cuda_ipc_t *ipc = r->ipc;
	if (r->done)
		ipc->event_destroy(r->ordinal, r->done);
	if (r->ready)
		ipc->event_destroy(r->ordinal, r->ready);
	if (r->mem && ipc->free(r->ordinal, r->mem) != SC_OK)
		scd_warn(SCD_SUB_DEVICE, "%s: freeing its GPU memory on cuda:%d: %s", r->what,
			 r->ordinal, ipc->error());
}

static void *release_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "cuda.free");
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!head)
			pthread_cond_wait(&cv, &mu);
		release_t *r = head;
		head = r->next;
		if (!head)
			tail = NULL;
		pthread_mutex_unlock(&mu);
		release_run(r);
		free(r);
		pthread_mutex_lock(&mu);
		n_done++;
		pthread_cond_broadcast(&idle_cv);
	}
	return NULL;
}

/* Starts the thread once; 0 when it runs. Called with mu held. */
static int start_locked(void)
{
	if (started)
		return 0;
	pthread_t th;
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* signals are the loop's (libuv's handlers; the default action once they are gone
	 * at shutdown): the thread starts with every one blocked */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&th, &attr, release_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		scd_warn(SCD_SUB_DEVICE,
			 "cuda: no thread to free GPU memory on (%s): freeing on the caller's",
			 strerror(rc));
		return -1;
	}
	started = 1;
	return 0;
}

void scd_cuda_free_async(const scd_cuda_ipc_t *ipc, int ordinal, void *mem, void *ready,
			 void *done, const char *what)
{
	release_t *r = calloc(1, sizeof(*r));
	if (r) {
		*r = (release_t){
		    .ipc = ipc, .ordinal = ordinal, .mem = mem, .ready = ready, .done = done};
		snprintf(r->what, sizeof(r->what), "%s", what);
	}
	pthread_mutex_lock(&mu);
	n_queued++;
	if (r && start_locked() == 0) {
		if (tail)
			tail->next = r;
		else
			head = r;
		tail = r;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
		return;
	}
	pthread_mutex_unlock(&mu);
	/* no memory or no thread: here, in order behind nothing (the queue is empty or the
	 * thread never ran) */
	release_t here = {
	    .ipc = ipc, .ordinal = ordinal, .mem = mem, .ready = ready, .done = done};
	snprintf(here.what, sizeof(here.what), "%s", what);
	release_run(&here);
	free(r);
	pthread_mutex_lock(&mu);
	n_done++;
	pthread_cond_broadcast(&idle_cv);
	pthread_mutex_unlock(&mu);
}

int scd_cuda_free_drain(int timeout_ms)
{
	struct timespec until = scd_deadline_ts(timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&mu);
	uint64_t want = n_queued;
	while (n_done < want && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&idle_cv, &mu, &until);
	uint64_t left = want - (n_done < want ? n_done : want);
	pthread_mutex_unlock(&mu);
	if (left) {
		scd_warn(SCD_SUB_DEVICE,
			 "cuda: %llu release(s) of GPU memory still pending after %d ms",
			 (unsigned long long)left, timeout_ms);
		return -1;
	}
	return 0;
}

void scd_cuda_free_counts(uint64_t *queued, uint64_t *done)
{
	pthread_mutex_lock(&mu);
	*queued = n_queued;
	*done = n_done;
	pthread_mutex_unlock(&mu);
}
