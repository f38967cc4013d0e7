/*
 * slots.h: the engine's fusion buffers. Each device kind has SCD_SLOTS of them, in that
 * device's memory: one being filled by the compute stage while another is on the network
 * (the queue between the stages holds one job). A buffer is allocated at a kind's first
 * fused jobs (the cpu device's ahead of the first job, scd_slots_prepare) and grown, never
 * on the per-step path, to the larger of the job's need and fusion_threshold_bytes.
 *
 * The compute stage acquires a slot (waiting while every slot of the kind is in the
 * pipeline), the communication stage releases it; scd_slots_stop wakes a waiter for good.
 */
#ifndef SCD_ENGINE_SLOTS_H
#define SCD_ENGINE_SLOTS_H

#include <pthread.h>
#include <stdint.h>

#include "device/device.h"

#define SCD_SLOTS 2

typedef struct scd_slots {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	uint64_t want_bytes; /* fusion_threshold_bytes, changed at run time */
	void *buf[SCD_DEVICE_COUNT][SCD_SLOTS];
	const scd_device_ops_t *dev[SCD_DEVICE_COUNT][SCD_SLOTS];
	uint64_t cap_bytes[SCD_DEVICE_COUNT][SCD_SLOTS];
	int busy[SCD_DEVICE_COUNT][SCD_SLOTS];
} scd_slots_t;

void scd_slots_init(scd_slots_t *s, uint64_t want_bytes);
/* Frees every buffer; no stage may hold a slot any more. */
void scd_slots_destroy(scd_slots_t *s);
void scd_slots_set_want(scd_slots_t *s, uint64_t bytes);
/* Wakes whoever waits for a slot, and refuses slots from now on. */
void scd_slots_stop(scd_slots_t *s);

/* Allocates the cpu device's buffers at the wanted size; SC_ERR_NOMEM if it cannot (the
 * first fused job tries again). */
sc_status_t scd_slots_prepare(scd_slots_t *s);

/* A free slot of device kind kind, its buffer of at least need bytes on dev in *buf_p.
 * Returns the slot; -1 when stopped; -2 when no memory for the buffer, *want_p saying how
 * many bytes it wanted. */
int scd_slots_acquire(scd_slots_t *s, scd_device_kind_t kind, const scd_device_ops_t *dev,
		      uint64_t need, void **buf_p, uint64_t *want_p);
void scd_slots_release(scd_slots_t *s, scd_device_kind_t kind, int k);

#endif
