/*
 * slots.c: the engine's fusion buffers (see slots.h).
 */
#include "engine/slots.h"

#include <string.h>

void scd_slots_init(scd_slots_t *s, uint64_t want_bytes)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->want_bytes = want_bytes;
}

static void slot_free(scd_slots_t *s, int kind, int k)
{
	if (s->buf[kind][k])
		s->dev[kind][k]->free(s->buf[kind][k]);
	s->buf[kind][k] = NULL;
	s->cap_bytes[kind][k] = 0;
}

void scd_slots_destroy(scd_slots_t *s)
{
	for (int kind = 0; kind < SCD_DEVICE_COUNT; kind++)
		for (int k = 0; k < SCD_SLOTS; k++)
			slot_free(s, kind, k);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
}

void scd_slots_set_want(scd_slots_t *s, uint64_t bytes)
{
	pthread_mutex_lock(&s->mu);
	s->want_bytes = bytes;
	pthread_mutex_unlock(&s->mu);
}

void scd_slots_stop(scd_slots_t *s)
{
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Slot k of kind at bytes or more on dev, zeroed and pre-faulted by the device's alloc;
 * held by the caller (or by nobody yet), so its fields are the caller's alone. */
static sc_status_t slot_resize(scd_slots_t *s, int kind, int k, const scd_device_ops_t *dev,
			       uint64_t bytes)
{
	if (bytes <= s->cap_bytes[kind][k] && s->buf[kind][k])
		return SC_OK;
	slot_free(s, kind, k);
	if (bytes == 0)
		return SC_OK;
	void *p = dev->alloc(bytes);
	if (!p)
		return SC_ERR_NOMEM;
	s->buf[kind][k] = p;
	s->dev[kind][k] = dev;
	s->cap_bytes[kind][k] = bytes;
	return SC_OK;
}

sc_status_t scd_slots_prepare(scd_slots_t *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t want = s->want_bytes;
	pthread_mutex_unlock(&s->mu);
	sc_status_t st = SC_OK;
	for (int k = 0; k < SCD_SLOTS && st == SC_OK; k++)
		st = slot_resize(s, SCD_DEVICE_CPU, k, &scd_device_cpu_ops, want);
	return st;
}

int scd_slots_acquire(scd_slots_t *s, scd_device_kind_t kind, const scd_device_ops_t *dev,
		      uint64_t need, void **buf_p, uint64_t *want_p)
{
	pthread_mutex_lock(&s->mu);
	int k;
	for (;;) {
		for (k = 0; k < SCD_SLOTS && s->busy[kind][k]; k++)
			;
		if (k < SCD_SLOTS || s->stop)
			break;
		pthread_cond_wait(&s->cv, &s->mu);
	}
	uint64_t want = s->want_bytes > need ? s->want_bytes : need;
	if (k < SCD_SLOTS)
		s->busy[kind][k] = 1;
	pthread_mutex_unlock(&s->mu);
	*want_p = want;
	if (k == SCD_SLOTS)
		return -1;
	if (slot_resize(s, kind, k, dev, want) != SC_OK) {
		scd_slots_release(s, kind, k);
		return -2;
	}
	*buf_p = s->buf[kind][k];
	return k;
}

void scd_slots_release(scd_slots_t *s, scd_device_kind_t kind, int k)
{
	pthread_mutex_lock(&s->mu);
	s->busy[kind][k] = 0;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}
