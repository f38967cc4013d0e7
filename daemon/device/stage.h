/*
 * stage.h: staging between a device's places, for the engine. A GPU device serves every
 * GPU of its node and runs its kernels on one, its home (device.h): a trainer's buffer on
 * another GPU is copied over to the home before a kernel reads it (through the sharing
 * functions' peer copy, share.h: direct where peer access is possible, staged by the
 * driver where not), one source at a time on the home's stream, and the result is copied
 * back to each trainer's GPU when it is delivered. The trainers' events order the home's
 * work behind what each trainer queued before it submitted (ready), and mark where its
 * result is complete (done). And a transport that moves host memory reads a GPU buffer
 * through host staging (page-locked for the GPU).
 *
 * On the cpu device every buffer is at home and there are no events: each call below
 * then does nothing (or dev's plain copy), so the engine calls them for every job alike.
 *
 * A staging area (scd_stage_t) belongs to one pipeline stage: the compute stage grows its
 * area for job i+1 while the communication stage may still be copying job i's results,
 * so one shared area would be freed under the other thread's copy. Each belongs to the
 * first thread that uses it, which every call that touches it asserts, until it is handed
 * over to another (scd_stage_hand_over: the communication stage of a small job may run on
 * the compute thread while the communication thread is idle, engine.c).
 */
#ifndef SCD_DEVICE_STAGE_H
#define SCD_DEVICE_STAGE_H

#include <pthread.h>
#include <stddef.h>

#include "device/device.h"
#include "device/share.h"

/* Where a trainer's buffer lies, and whose it is (named in a failure's text). */
typedef struct scd_stage_src {
	scd_device_kind_t kind;
	int ordinal; /* the GPU, for a GPU device */
	int local_rank;
	const char *tensor;
} scd_stage_src_t;

/* A stage's area on the home GPU for copies of sources on other GPUs. Zeroed is empty. */
typedef struct scd_stage {
	const scd_device_share_t *share; /* NULL: every source is at home */
	int home;			 /* the home GPU */
	const scd_device_ops_t *dev;	 /* the job's device (scd_stage_reserve) */
	const scd_device_ops_t *buf_dev; /* buf's */
	char *buf;			 /* on the home GPU */
	size_t cap;
	/* the first failed copy of the job, named in what (the caller fails the job) */
	sc_status_t st;
	char what[200];
	int owned; /* user is the one thread that uses this area */
	pthread_t user;
} scd_stage_t;

/* The next thread to use pe becomes its user. The caller orders that thread's use after
 * every use by the current user (both under one lock, as the engine's stages are). */
static inline void scd_stage_hand_over(scd_stage_t *pe)
{
	pe->owned = 0;
}

/* Readies pe for a job on device dev whose sources off dev's home need need bytes of
 * room at most (0: every source is at home): the sharing functions, and the area, grown
 * to need (never shrunk). Clears the job's failure. SC_ERR_NOMEM, or the sharing
 * functions' status, without logging: the caller reports it. */
sc_status_t scd_stage_reserve(scd_stage_t *pe, const scd_device_ops_t *dev, size_t need);
/* Whether the device's kernels may read a buffer of kind at ordinal where it lies. */
int scd_stage_local(const scd_stage_t *pe, scd_device_kind_t kind, int ordinal);
/* bytes of src's buffer at p, copied to dst on the home GPU; the first failure is kept
 * in pe->st and pe->what. */
void scd_stage_copy_in(scd_stage_t *pe, scd_stage_src_t src, void *dst, const void *p,
		       size_t bytes);
/* src's bytes at p where the device's kernels may read them: p itself, or a copy in the
 * area from offset at (room made by scd_stage_reserve). */
const void *scd_stage_in(scd_stage_t *pe, scd_stage_src_t src, const void *p, size_t bytes,
			 size_t at);
/* bytes of host memory at host into dst, src's buffer: directly at home, else through
 * the area (room for the whole buffer made by scd_stage_reserve) and a peer copy. */
sc_status_t scd_stage_from_host(scd_stage_t *pe, scd_stage_src_t src, void *dst,
				const void *host, size_t bytes);
/* Frees the area (pe is then empty). */
void scd_stage_free(scd_stage_t *pe);

/* bytes of a result at res on the home GPU copied to dst, the buffer of src on another
 * GPU; on failure, what failed and the device's text in err[err_len]. Any thread. */
sc_status_t scd_stage_out(scd_stage_src_t src, void *dst, const void *res, size_t bytes,
			  char *err, size_t err_len);
/* A trainer's event ev (NULL: none, nothing to do): done = 0, the home's stream waits for
 * it (its ready event); done = 1, it is recorded on src's GPU behind the home's work so
 * far (its done event). On failure, the tensor, the trainer and the device's text in
 * err[err_len]. */
sc_status_t scd_stage_event(scd_stage_src_t src, void *ev, int done, char *err, size_t err_len);

/* Host memory to stage a buffer of a device through a transport that moves host memory
 * (scd_device_stage_alloc), kept and grown, never shrunk. Zeroed is empty. */
typedef struct scd_stage_host {
	void *p;
	size_t cap;
	const scd_device_ops_t *dev;
} scd_stage_host_t;

/* At least bytes of host staging for dev's buffers; NULL when out of memory. */
void *scd_stage_host_get(scd_stage_host_t *h, const scd_device_ops_t *dev, size_t bytes);
void scd_stage_host_free(scd_stage_host_t *h);

#endif
