/*
 * scheme_msg.c: the sparse messages of AGsparse and Hierarchical Centralization.
 */
#include "scheme/scheme_internal.h"

#include <string.h>

/* ---- COO-or-bitmap messages ---------------------------------------------------------------
 */

/*
 * A message is one of three encodings, whichever is smallest (8-byte header: which):
 *   COO     idx[nnz], val[nnz]                          8 nnz bytes
 *   bitmap  lo, span (u64 each), device/format.h's bitmap over [lo, lo + span) (the
 *           list's first to last index), val[nnz]         16 + span / 8 + 4 nnz bytes
 *   runs    nruns (u64), (start, length) u32 pairs for each maximal run of consecutive
 *           indices, then val[nnz]                      8 + 8 nruns + 4 nnz bytes
 * Runs carry the rows of an embedding gradient (whole rows of consecutive elements) at
 * one index pair per row instead of an index per element. The bitmap spans only the
 * list's own range, so a list sent in chunks (AGsparse, HC) costs no more as bitmaps
 * than in one piece. scd_scheme_msg_bytes, the receive capacity, bounds all three (the
 * smallest is used, and the bitmap never spans more than numel).
 */
enum { MSG_COO = 1, MSG_BITMAP = 2, MSG_RUNS = 3 };

uint64_t scd_scheme_msg_bytes(uint64_t numel, uint64_t nnz)
{
	uint64_t coo = scd_fmt_coo_bytes(nnz), bm = 16 + scd_fmt_bitmap_bytes(numel, nnz);
	return 8 + (coo <= bm ? coo : bm);
}

static uint64_t span_of(const scd_coo_t *src)
{
	return src->nnz ? (uint64_t)src->idx[src->nnz - 1] - src->idx[0] + 1 : 0;
}

static sc_status_t bitmap_encode(const scd_coo_t *src, uint8_t *b)
{
	uint64_t lo = src->nnz ? src->idx[0] : 0, span = span_of(src),
		 nw = scd_fmt_bitmap_words(span);
	scd_put64(b, lo);
	scd_put64(b + 8, span);
	uint64_t *w = (uint64_t *)(b + 16); /* 8-aligned: the header and lo, span */
	memset(w, 0, 8 * nw);
	for (uint64_t i = 0; i < src->nnz; i++) {
		uint64_t x = (uint64_t)src->idx[i] - lo;
		if (x >= span)
			return SC_ERR_INVALID; /* not ascending */
		w[x >> 6] |= 1ull << (x & 63);
	}
	memcpy(w + nw, src->val, 4 * src->nnz);
	return SC_OK;
}

static sc_status_t bitmap_decode(const uint8_t *b, uint64_t body, uint64_t numel,
				 uint32_t *widx, float *wval, scd_coo_t *out)
{
	if (body < 16)
		return SC_ERR_PROTOCOL;
	uint64_t lo = scd_get64(b), span = scd_get64(b + 8), words = 8 * scd_fmt_bitmap_words(span);
	if (lo > numel || span > numel - lo || body - 16 < words || (body - 16 - words) % 4)
		return SC_ERR_PROTOCOL;
	*out = (scd_coo_t){widx, wval, 0, (body - 16 - words) / 4};
	sc_status_t st = scd_bitmap_decode(b + 16, body - 16, span, out);
	for (uint64_t k = 0; st == SC_OK && k < out->nnz; k++)
		widx[k] += (uint32_t)lo;
	return st;
}

static uint64_t count_runs(const scd_coo_t *src)
{
	uint64_t runs = src->nnz > 0;
	for (uint64_t i = 1; i < src->nnz; i++)
		runs += src->idx[i] != src->idx[i - 1] + 1;
	return runs;
}

static void runs_encode(const scd_coo_t *src, uint64_t runs, uint8_t *b)
{
	scd_put64(b, runs);
	uint8_t *r = b + 8;
	for (uint64_t i = 0; i < src->nnz;) {
		uint64_t j = i + 1;
		while (j < src->nnz && src->idx[j] == src->idx[j - 1] + 1)
			j++;
		scd_put32(r, src->idx[i]);
		scd_put32(r + 4, (uint32_t)(j - i));
		r += 8;
		i = j;
	}
	memcpy(r, src->val, 4 * src->nnz);
}

static sc_status_t runs_decode(const uint8_t *b, uint64_t body, uint64_t numel, uint32_t *widx,
			       scd_coo_t *out)
{
	if (body < 8)
		return SC_ERR_PROTOCOL;
	uint64_t runs = scd_get64(b);
	if (runs > (body - 8) / 8)
		return SC_ERR_PROTOCOL;
	const uint8_t *r = b + 8;
	uint64_t n = 0, next = 0;
	for (uint64_t k = 0; k < runs; k++, r += 8) {
		uint64_t start = scd_get32(r), len = scd_get32(r + 4);
		if (!len || start < next || start + len > numel ||
		    n + len > (body - 8 - 8 * runs) / 4)
			return SC_ERR_PROTOCOL;
		for (uint64_t i = 0; i < len; i++)
			widx[n++] = (uint32_t)(start + i);
		next = start + len;
	}
	if (8 + 8 * runs + 4 * n != body)
		return SC_ERR_PROTOCOL;
	*out = (scd_coo_t){widx, (float *)r, n, n};
	return SC_OK;
}

sc_status_t scd_scheme_msg_encode(const scd_coo_t *src, uint64_t numel, void *buf, uint64_t cap,
				  uint64_t *bytes_p)
{
	if (src->nnz && src->idx[src->nnz - 1] >= numel)
		return SC_ERR_INVALID;
	uint64_t coo = scd_fmt_coo_bytes(src->nnz), bm = 16 + scd_fmt_bitmap_bytes(span_of(src), src->nnz);
	uint64_t runs = count_runs(src), rb = 8 + 8 * runs + 4 * src->nnz;
	uint8_t *b = buf;
	uint64_t fmt = rb < coo && rb < bm ? MSG_RUNS : coo <= bm ? MSG_COO : MSG_BITMAP;
	uint64_t bytes = fmt == MSG_RUNS ? rb : fmt == MSG_COO ? coo : bm;
	if (cap < 8 + bytes)
		return SC_ERR_LIMIT;
	scd_put64(b, fmt);
	sc_status_t st = SC_OK;
	if (fmt == MSG_RUNS) {
		runs_encode(src, runs, b + 8);
	} else if (fmt == MSG_COO) {
		memcpy(b + 8, src->idx, 4 * src->nnz);
		memcpy(b + 8 + 4 * src->nnz, src->val, 4 * src->nnz);
	} else {
		st = bitmap_encode(src, b + 8);
	}
	if (st == SC_OK)
		*bytes_p = 8 + bytes;
	return st;
}

sc_status_t scd_scheme_msg_decode(const void *buf, uint64_t bytes, uint64_t numel,
				  uint32_t *widx, float *wval, scd_coo_t *out)
{
	const uint8_t *b = buf;
	if (bytes < 8)
		return scd_scheme_fail(SC_ERR_PROTOCOL, "sparse message of %llu bytes",
				       (unsigned long long)bytes);
	uint64_t fmt = scd_get64(b), body = bytes - 8;
	if (fmt == MSG_COO && body % 8 == 0) {
		uint64_t n = body / 8;
		*out = (scd_coo_t){(uint32_t *)(b + 8), (float *)(b + 8 + 4 * n), n, n};
		return SC_OK;
	}
	if (fmt == MSG_RUNS && runs_decode(b + 8, body, numel, widx, out) == SC_OK)
		return SC_OK;
	if (fmt == MSG_BITMAP && bitmap_decode(b + 8, body, numel, widx, wval, out) == SC_OK)
		return SC_OK;
	return scd_scheme_fail(SC_ERR_PROTOCOL,
			       "malformed sparse message (format %llu, %llu "
			       "bytes)",
			       (unsigned long long)fmt, (unsigned long long)bytes);
}


sc_status_t scd_scheme_msg_append(const void *buf, uint64_t bytes, uint64_t numel, scd_coo_t *list,
				  uint64_t *added_p)
{
	uint32_t *wi = list->idx + list->nnz;
	float *wv = list->val + list->nnz;
	scd_coo_t d;
	sc_status_t st = scd_scheme_msg_decode(buf, bytes, numel, wi, wv, &d);
	if (st != SC_OK)
		return st;
	if (d.idx != wi)
		memcpy(wi, d.idx, 4 * d.nnz);
	if (d.val != wv)
		memcpy(wv, d.val, 4 * d.nnz);
	list->nnz += d.nnz;
	*added_p = d.nnz;
	return SC_OK;
}
