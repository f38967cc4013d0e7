/* shape.c: see shape.h. */
#include "util/shape.h"

#include <stdio.h>
#include <string.h>

/* FNV-1a over the dimensions past the kept ones but the last word. */
static uint64_t tail_hash(const uint64_t *dims, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 64; b += 8) {
			h ^= dims[i] >> b & 0xff;
			h *= 0x100000001b3ull;
		}
	return h;
}

int scd_shape_make(scd_shape_t *s, const uint64_t *dims, size_t n, uint64_t numel, char *err,
		   size_t len)
{
	memset(s, 0, sizeof(*s));
	if (n > SCD_SHAPE_MAX_DIMS) {
		snprintf(err, len, "a shape of %zu dimensions (at most %d)", n,
			 SCD_SHAPE_MAX_DIMS);
		return -1;
	}
	uint64_t prod = 1;
	int over = 0;
	for (size_t i = 0; i < n; i++) {
		if (dims[i] && prod > UINT64_MAX / dims[i])
			over = 1;
		prod *= dims[i];
	}
	/* an empty tensor's shape (a dimension of 0) on its one-element stand-in */
	int empty = n && !over && prod == 0 && numel == 1;
	if (n && !empty && (over || prod != numel)) {
		char text[96];
		scd_shape_t given = {.ndim = (uint32_t)n};
		for (size_t i = 0; i < n && i < SCD_SHAPE_KEPT; i++)
			given.dim[i] = dims[i];
		scd_shape_text(&given, 0, text, sizeof(text));
		snprintf(err, len, "shape %s%s does not hold its %llu elements", text,
			 over ? " (its product overflows)" : "", (unsigned long long)numel);
		return -1;
	}
	if (n <= 1 && !empty)
		return 0;
	s->ndim = (uint32_t)n;
	for (size_t i = 0; i < n && i < SCD_SHAPE_KEPT; i++)
		s->dim[i] = dims[i];
	if (n > SCD_SHAPE_KEPT) {
		/* the hashed rest: 0 when it holds a dimension of 0 (scd_shape_empty) */
		uint64_t h = tail_hash(dims + SCD_SHAPE_KEPT - 1, n - (SCD_SHAPE_KEPT - 1));
		int zero = 0;
		for (size_t i = SCD_SHAPE_KEPT - 1; i < n; i++)
			zero |= !dims[i];
		s->dim[SCD_SHAPE_KEPT - 1] = zero ? 0 : h ? h : 1;
	}
	return 0;
}

int scd_shape_empty(const scd_shape_t *s)
{
	for (size_t i = 0; i < scd_shape_kept(s); i++)
		if (!s->dim[i])
			return 1;
	return 0;
}

void scd_shape_from_kept(scd_shape_t *s, uint32_t ndim, const uint64_t *kept, size_t n)
{
	memset(s, 0, sizeof(*s));
	if (ndim < 1) /* 1: an empty tensor's one dimension */
		return;
	s->ndim = ndim;
	for (size_t i = 0; i < n && i < SCD_SHAPE_KEPT; i++)
		s->dim[i] = kept[i];
}

size_t scd_shape_kept(const scd_shape_t *s)
{
	return s->ndim < SCD_SHAPE_KEPT ? s->ndim : SCD_SHAPE_KEPT;
}

int scd_shape_equal(const scd_shape_t *a, const scd_shape_t *b)
{
	return a->ndim == b->ndim &&
	       !memcmp(a->dim, b->dim, sizeof(*a->dim) * scd_shape_kept(a));
}

void scd_shape_text(const scd_shape_t *s, uint64_t numel, char *buf, size_t len)
{
	if (!s->ndim) {
		snprintf(buf, len, "[%llu]", (unsigned long long)numel);
		return;
	}
	size_t n = 0, shown = s->ndim > SCD_SHAPE_KEPT ? SCD_SHAPE_KEPT - 1 : s->ndim;
	n += (size_t)snprintf(buf, len, "[");
	for (size_t i = 0; i < shown && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
				      (unsigned long long)s->dim[i]);
	if (n < len && s->ndim > SCD_SHAPE_KEPT) /* the rest as the hash that compares them */
		n += (size_t)snprintf(buf + n, len - n, ", %u more (hash %08llx)",
				      s->ndim - (uint32_t)shown,
				      (unsigned long long)(s->dim[SCD_SHAPE_KEPT - 1] >> 32));
	if (n < len)
		snprintf(buf + n, len - n, "]");
}
