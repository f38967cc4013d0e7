/*
 * stage.c: staging between a device's places (stage.h), through the device's sharing
 * functions (share.h) and its ops.
 */
#include "device/stage.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

/* pe, which only one thread ever uses (an internal invariant: see stage.h). */
static scd_stage_t *mine(scd_stage_t *pe)
{
	if (!pe->owned) {
		pe->user = pthread_self();
		pe->owned = 1;
	}
	assert(pthread_equal(pe->user, pthread_self()));
	return pe;
}

sc_status_t scd_stage_reserve(scd_stage_t *pe, const scd_device_ops_t *dev, size_t need)
{
	mine(pe)->share = NULL;
	pe->dev = dev;
	pe->st = SC_OK;
	pe->what[0] = 0;
	pe->home = scd_device_home(dev->kind);
	if (!need || dev->kind == SCD_DEVICE_CPU)
		return SC_OK;
	sc_status_t st = scd_device_share_get(dev->kind, &pe->share);
	if (st != SC_OK) {
		pe->share = NULL;
		return st;
	}
	if (pe->cap >= need && pe->buf_dev == dev)
		return SC_OK;
	if (pe->buf)
		pe->buf_dev->free(pe->buf);
	pe->buf_dev = dev;
	pe->buf = dev->alloc(need);
	pe->cap = pe->buf ? need : 0;
	return pe->buf ? SC_OK : SC_ERR_NOMEM;
}

int scd_stage_local(const scd_stage_t *pe, scd_device_kind_t kind, int ordinal)
{
	return !pe->share || kind != SCD_DEVICE_CUDA || ordinal == pe->home;
}

void scd_stage_copy_in(scd_stage_t *pe, scd_stage_src_t src, void *dst, const void *p,
		       size_t bytes)
{
	sc_status_t st = mine(pe)->share->copy_peer(dst, pe->home, p, src.ordinal, bytes);
	if (st != SC_OK && pe->st == SC_OK) {
		pe->st = st;
		snprintf(pe->what, sizeof(pe->what),
			 "tensor '%s', local rank %d: copying its %zu bytes from cuda:%d to "
			 "the engine GPU cuda:%d: %s",
			 src.tensor, src.local_rank, bytes, src.ordinal, pe->home,
			 pe->share->error());
	}
}

const void *scd_stage_in(scd_stage_t *pe, scd_stage_src_t src, const void *p, size_t bytes,
			 size_t at)
{
	if (scd_stage_local(pe, src.kind, src.ordinal))
		return p;
	scd_stage_copy_in(pe, src, pe->buf + at, p, bytes);
	return pe->buf + at;
}

sc_status_t scd_stage_from_host(scd_stage_t *pe, scd_stage_src_t src, void *dst,
				const void *host, size_t bytes)
{
	if (scd_stage_local(mine(pe), src.kind, src.ordinal)) {
		pe->dev->from_host(dst, host, bytes);
		return SC_OK;
	}
	pe->dev->from_host(pe->buf, host, bytes);
	return pe->share->copy_peer(dst, src.ordinal, pe->buf, pe->home, bytes);
}

void scd_stage_free(scd_stage_t *pe)
{
	if (pe->buf)
		pe->buf_dev->free(pe->buf);
	pe->buf = NULL;
	pe->buf_dev = NULL;
	pe->cap = 0;
	pe->share = NULL;
}

sc_status_t scd_stage_out(scd_stage_src_t src, void *dst, const void *res, size_t bytes,
			  char *err, size_t err_len)
{
	const scd_device_share_t *share = NULL;
	sc_status_t st = scd_device_share_get(src.kind, &share);
	if (st == SC_OK)
		st = share->copy_peer(dst, src.ordinal, res, scd_device_home(src.kind), bytes);
	if (st != SC_OK)
		snprintf(err, err_len,
			 "tensor '%s', local rank %d: copying the result to its cuda:%d: %s",
			 src.tensor, src.local_rank, src.ordinal,
			 share ? share->error() : sc_status_message(st));
	return st;
}

sc_status_t scd_stage_event(scd_stage_src_t src, void *ev, int done, char *err, size_t err_len)
{
	const scd_device_share_t *share = NULL;
	if (!ev || src.kind == SCD_DEVICE_CPU)
		return SC_OK;
	sc_status_t st = scd_device_share_get(src.kind, &share);
	if (st == SC_OK)
		st = done ? share->event_record(src.ordinal, ev) : share->stream_wait_event(ev);
	if (st != SC_OK)
		snprintf(err, err_len, "tensor '%s', local rank %d: its %s event: %s",
			 src.tensor, src.local_rank, done ? "done" : "ready",
			 share ? share->error() : sc_status_message(st));
	return st;
}

void *scd_stage_host_get(scd_stage_host_t *h, const scd_device_ops_t *dev, size_t bytes)
{
	if (h->p && h->dev == dev && h->cap >= bytes)
		return h->p;
	scd_stage_host_free(h);
	h->p = scd_device_stage_alloc(dev, bytes);
	h->dev = dev;
	h->cap = h->p ? bytes : 0;
	return h->p;
}

void scd_stage_host_free(scd_stage_host_t *h)
{
	if (h->p)
		scd_device_stage_free(h->dev, h->p);
	h->p = NULL;
	h->cap = 0;
}
