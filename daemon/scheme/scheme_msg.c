/*
 * scheme_msg.c: the sparse messages of AGsparse and Hierarchical Centralization. Lists
 * and buffers are device memory: the headers are composed and read on the host (from_host,
 * to_host), the bodies are written and read by the device's ops (msgops.h).
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

/* The list's bitmap body over its own range [lo, lo + span) (16-byte header: lo, span). */
static sc_status_t bitmap_encode(const scd_device_ops_t *dev, const scd_coo_t *src, uint64_t lo,
				 uint64_t span, uint8_t *b)
{
	uint64_t nw = scd_fmt_bitmap_words(span);
	uint8_t hdr[16];
	scd_put64(hdr, lo);
	scd_put64(hdr + 8, span);
	dev->from_host(b, hdr, 16);
	uint64_t *w = (uint64_t *)(b + 16); /* 8-aligned: the header and lo, span */
	if (dev->idx_bitmap_encode(src->idx, src->nnz, lo, span, w) < src->nnz)
		return SC_ERR_INVALID; /* not ascending */
	dev->copy(w + nw, src->val, 4 * src->nnz);
	return SC_OK;
}

static sc_status_t bitmap_decode(const scd_device_ops_t *dev, const uint8_t *b, uint64_t body,
				 uint64_t numel, uint64_t max, uint32_t *widx, float *wval,
				 scd_coo_t *out)
{
	if (body < 16)
		return SC_ERR_PROTOCOL;
	uint8_t hdr[16];
	dev->to_host(hdr, b, 16);
	uint64_t lo = scd_get64(hdr), span = scd_get64(hdr + 8),
		 words = 8 * scd_fmt_bitmap_words(span);
	if (lo > numel || span > numel - lo || body - 16 < words || (body - 16 - words) % 4)
		return SC_ERR_PROTOCOL;
	uint64_t room = (body - 16 - words) / 4;
	*out = (scd_coo_t){widx, wval, 0, room < max ? room : max};
	sc_status_t st = dev->bitmap_decode(b + 16, body - 16, span, out);
	if (st == SC_OK)
		dev->idx_add(widx, out->nnz, (uint32_t)lo);
	return st;
}

/* The runs body: their number (u64), the (start, length) pairs, the values. */
static void runs_encode(const scd_device_ops_t *dev, const scd_coo_t *src, uint64_t runs,
			uint8_t *b)
{
	uint8_t hdr[8];
	scd_put64(hdr, runs);
	dev->from_host(b, hdr, 8);
	dev->idx_runs_encode(src->idx, src->nnz, b + 8);
	dev->copy(b + 8 + 8 * runs, src->val, 4 * src->nnz);
}

static sc_status_t runs_decode(const scd_device_ops_t *dev, const uint8_t *b, uint64_t body,
			       uint64_t numel, uint64_t max, uint32_t *widx, scd_coo_t *out)
{
	if (body < 8)
		return SC_ERR_PROTOCOL;
	uint64_t runs;
	dev->to_host(&runs, b, 8);
	if (runs > (body - 8) / 8)
		return SC_ERR_PROTOCOL;
	const uint8_t *r = b + 8;
	uint64_t room = (body - 8 - 8 * runs) / 4;
	uint64_t n = dev->runs_decode(r, runs, numel, room < max ? room : max, widx);
	if (n == UINT64_MAX || 8 + 8 * runs + 4 * n != body)
		return SC_ERR_PROTOCOL;
	*out = (scd_coo_t){widx, (float *)(r + 8 * runs), n, n};
	return SC_OK;
}

/* A COO body of n pairs, viewed in place once its indices are checked: below numel and
 * strictly ascending, as the encoder sends them (the receivers write dst[idx], and
 * AGsparse's watermark needs the order). */
static sc_status_t coo_decode(const scd_device_ops_t *dev, const uint8_t *b, uint64_t n,
			      uint64_t numel, uint64_t max, scd_coo_t *out)
{
	if (n > max)
		return scd_scheme_fail(SC_ERR_PROTOCOL,
				       "sparse message: %llu COO entries, room for %llu",
				       (unsigned long long)n, (unsigned long long)max);
	const uint32_t *idx = (const uint32_t *)b;
	uint64_t k = dev->idx_check_range(idx, n, 0, numel < UINT32_MAX ? numel : UINT32_MAX);
	if (k < n) {
		uint32_t bad = 0;
		dev->to_host(&bad, idx + k, 4);
		if (bad >= numel)
			return scd_scheme_fail(SC_ERR_PROTOCOL,
					       "sparse message: COO index %u at position %llu "
					       "is past the tensor's %llu elements",
					       bad, (unsigned long long)k,
					       (unsigned long long)numel);
		return scd_scheme_fail(SC_ERR_PROTOCOL,
				       "sparse message: COO index %u at position %llu is not "
				       "above the one before it",
				       bad, (unsigned long long)k);
	}
	*out = (scd_coo_t){(uint32_t *)idx, (float *)(b + 4 * n), n, n};
	return SC_OK;
}

sc_status_t scd_scheme_msg_encode(const scd_device_ops_t *dev, const scd_coo_t *src,
				  uint64_t numel, void *buf, uint64_t cap, uint64_t *bytes_p)
{
	/* the list's first and last index: its range, and the check against numel */
	uint32_t first = 0, last = 0;
	if (src->nnz) {
		dev->to_host(&first, src->idx, 4);
		dev->to_host(&last, src->idx + src->nnz - 1, 4);
	}
	if (src->nnz && last >= numel)
		return SC_ERR_INVALID;
	uint64_t span = src->nnz ? (uint64_t)last - first + 1 : 0;
	uint64_t coo = scd_fmt_coo_bytes(src->nnz),
		 bm = 16 + scd_fmt_bitmap_bytes(span, src->nnz);
	uint64_t runs = dev->idx_count_runs(src->idx, src->nnz),
		 rb = 8 + 8 * runs + 4 * src->nnz;
	uint8_t *b = buf;
	uint64_t fmt = rb < coo && rb < bm ? MSG_RUNS : coo <= bm ? MSG_COO : MSG_BITMAP;
	uint64_t bytes = fmt == MSG_RUNS ? rb : fmt == MSG_COO ? coo : bm;
	if (cap < 8 + bytes)
		return SC_ERR_LIMIT;
	uint8_t hdr[8];
	scd_put64(hdr, fmt);
	dev->from_host(b, hdr, 8);
	sc_status_t st = SC_OK;
	if (fmt == MSG_RUNS) {
		runs_encode(dev, src, runs, b + 8);
	} else if (fmt == MSG_COO) {
		dev->copy(b + 8, src->idx, 4 * src->nnz);
		dev->copy(b + 8 + 4 * src->nnz, src->val, 4 * src->nnz);
	} else {
		st = bitmap_encode(dev, src, first, span, b + 8);
	}
	if (st == SC_OK)
		*bytes_p = 8 + bytes;
	return st;
}

sc_status_t scd_scheme_msg_decode(const scd_device_ops_t *dev, const void *buf, uint64_t bytes,
				  uint64_t numel, uint64_t max, uint32_t *widx, float *wval,
				  scd_coo_t *out)
{
	const uint8_t *b = buf;
	if (bytes < 8)
		return scd_scheme_fail(SC_ERR_PROTOCOL, "sparse message of %llu bytes",
				       (unsigned long long)bytes);
	uint64_t fmt, body = bytes - 8;
	dev->to_host(&fmt, b, 8);
	if (fmt == MSG_COO && body % 8 == 0)
		return coo_decode(dev, b + 8, body / 8, numel, max, out);
	if (fmt == MSG_RUNS && runs_decode(dev, b + 8, body, numel, max, widx, out) == SC_OK)
		return SC_OK;
	if (fmt == MSG_BITMAP &&
	    bitmap_decode(dev, b + 8, body, numel, max, widx, wval, out) == SC_OK)
		return SC_OK;
	return scd_scheme_fail(SC_ERR_PROTOCOL,
			       "malformed sparse message (format %llu, %llu "
			       "bytes)",
			       (unsigned long long)fmt, (unsigned long long)bytes);
}

sc_status_t scd_scheme_msg_append(const scd_device_ops_t *dev, const void *buf, uint64_t bytes,
				  uint64_t numel, scd_coo_t *list, uint64_t *added_p)
{
	uint32_t *wi = list->idx + list->nnz;
	float *wv = list->val + list->nnz;
	scd_coo_t d;
	sc_status_t st =
	    scd_scheme_msg_decode(dev, buf, bytes, numel, list->cap - list->nnz, wi, wv, &d);
	if (st != SC_OK)
		return st;
	if (d.idx != wi)
		dev->copy(wi, d.idx, 4 * d.nnz);
	if (d.val != wv)
		dev->copy(wv, d.val, 4 * d.nnz);
	list->nnz += d.nnz;
	*added_p = d.nnz;
	return SC_OK;
}
