/*
 * share.h: what a device shares with the trainers' processes (the GPU device's memory and
 * interprocess events, exported as CUDA IPC handles, gpu/ipc.cu), by device kind: the
 * control layer's registrations of cuda tensors allocate and free through it, and the
 * staging between GPUs (stage.h) copies and waits through it. The cpu device shares
 * nothing here (a cpu tensor is POSIX shared memory the control layer maps itself):
 * scd_device_share_get reports SC_ERR_UNSUPPORTED for it.
 */
#ifndef SCD_DEVICE_SHARE_H
#define SCD_DEVICE_SHARE_H

#include <stddef.h>

#include "device/device.h"

/*
 * Memory and interprocess events on a trainer's GPU (ordinal: the calling thread switches
 * to it for the call and back to the device's home, device.h), records of an event on its
 * GPU behind the home's work so far, waits of the home's stream on an event of any GPU,
 * copies between GPUs on the home's stream, and page-locked host memory for staging. Each
 * makes the device usable on the calling thread first, as the ops do. On failure, the
 * device's text is in error().
 */
typedef struct scd_device_share {
	sc_status_t (*devices)(int *n); /* the GPUs served: ordinals 0 .. n - 1 */
	/* The ordinal of the GPU whose 16-byte UUID is uuid (SC_ERR_NOT_FOUND: none served
	 * has it); trainers name their GPU so, since their ordinals follow their own
	 * CUDA_VISIBLE_DEVICES. */
	sc_status_t (*find)(const unsigned char *uuid, int *ordinal);
	sc_status_t (*alloc)(int ordinal, size_t bytes, void **p, void *handle);
	sc_status_t (*free)(int ordinal, void *p);
	sc_status_t (*event_create)(int ordinal, void **ev, void *handle);
	sc_status_t (*event_destroy)(int ordinal, void *ev);
	sc_status_t (*event_record)(int ordinal, void *ev);
	sc_status_t (*stream_wait_event)(void *ev);
	sc_status_t (*copy_peer)(void *dst, int dst_ordinal, const void *src, int src_ordinal,
				 size_t bytes);
	sc_status_t (*host_alloc)(size_t bytes, void **p);
	sc_status_t (*host_free)(void *p);
	const char *(*error)(void);
} scd_device_share_t;

/* kind's sharing functions, once scd_device_get(kind) has succeeded (SC_ERR_UNSUPPORTED
 * before, for the cpu device, or when the GPU library lacks them; the reason in
 * scd_device_unavailable_reason()). */
sc_status_t scd_device_share_get(scd_device_kind_t kind, const scd_device_share_t **share_p);

/* What an allocation of bytes really takes once exported: rounded up to whole IPC
 * granules, so that its handle reaches nothing else (0: too large). */
size_t scd_device_share_bytes(size_t bytes);

/* A GPU's UUID as nvidia-smi spells it, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", in
 * buf[SCD_DEVICE_UUID_TEXT]. */
#define SCD_DEVICE_UUID_TEXT 41
const char *scd_device_uuid_text(const unsigned char *uuid, char *buf);

/* Frees mem (of share->alloc) and the events ready and done (of share->event_create;
 * NULL: none) on GPU ordinal off the calling thread, in the order given (cuda_free.h: a
 * GPU's free waits for the whole device); what names them in a warning if freeing fails.
 * Returns at once. */
void scd_device_share_free_async(const scd_device_share_t *share, int ordinal, void *mem,
				 void *ready, void *done, const char *what);
/* Waits until everything queued so far is freed, at most timeout_ms; 0 when it is, -1 on
 * timeout (logged). For shutdown, which must leave no exported memory behind. */
int scd_device_share_drain(int timeout_ms);

#endif
