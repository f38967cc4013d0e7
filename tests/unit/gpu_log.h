/*
 * gpu_log.h: what the GPU device's tests share to compare it with the cpu device: device
 * arrays made from host bytes, and a log of one device's results (bytes appended in
 * order, each op's start named) that is compared byte for byte with the other device's.
 */
#ifndef SC_UNIT_GPU_LOG_H
#define SC_UNIT_GPU_LOG_H

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "unit.h"

/* A device array holding bytes of host (at least 4 bytes allocated). */
static inline void *dev_from(const scd_device_ops_t *o, const void *host, size_t bytes)
{
	void *p = o->alloc(bytes ? bytes : 4);
	CHECK_TRUE(p != NULL);
	if (bytes)
		o->from_host(p, host, bytes);
	return p;
}

typedef struct op_log {
	uint8_t *buf;
	size_t len, cap;
	const char **name; /* name[k]: the op whose bytes start at at[k] */
	size_t *at;
	int nnames, names_cap;
} op_log_t;

static inline void log_put(op_log_t *l, const char *name, const void *p, size_t bytes)
{
	if (l->nnames == l->names_cap) {
		l->names_cap = l->names_cap ? 2 * l->names_cap : 64;
		l->name = realloc(l->name, (size_t)l->names_cap * sizeof(*l->name));
		l->at = realloc(l->at, (size_t)l->names_cap * sizeof(*l->at));
		CHECK_TRUE(l->name && l->at);
	}
	l->name[l->nnames] = name;
	l->at[l->nnames++] = l->len;
	if (l->len + bytes > l->cap) {
		l->cap = (l->len + bytes) * 2 + 64;
		l->buf = realloc(l->buf, l->cap);
		CHECK_TRUE(l->buf != NULL);
	}
	if (bytes)
		memcpy(l->buf + l->len, p, bytes);
	l->len += bytes;
}

static inline void log_u64(op_log_t *l, const char *name, uint64_t v)
{
	log_put(l, name, &v, 8);
}

/* A device array's bytes into the log. */
static inline void log_dev(op_log_t *l, const scd_device_ops_t *o, const char *name,
			   const void *dev, size_t bytes)
{
	void *h = malloc(bytes + 4);
	CHECK_TRUE(h != NULL);
	if (bytes)
		o->to_host(h, dev, bytes);
	log_put(l, name, h, bytes);
	free(h);
}

static inline void log_free(op_log_t *l)
{
	free(l->buf);
	free(l->name);
	free(l->at);
	memset(l, 0, sizeof(*l));
}

/* The two devices' logs are the same bytes, op by op; a difference names its op and the
 * case (what). */
static inline void logs_compare(const op_log_t *got, const op_log_t *want, const char *what)
{
	size_t len = got->len < want->len ? got->len : want->len;
	for (size_t k = 0; k < len; k++)
		if (got->buf[k] != want->buf[k]) {
			const char *name = "?";
			for (int t = 0; t < want->nnames; t++)
				if (want->at[t] <= k)
					name = want->name[t];
			CHECK_MSG(0, "%s: %s differs from the cpu device (byte %zu)", what,
				  name, k);
		}
	CHECK_EQ_INT(got->nnames, want->nnames);
	CHECK_EQ_INT(got->len, want->len);
}

#endif
