/*
 * format.c: encoders and decoders of the lossless sparse formats (see format.h).
 *
 * Bitmaps are built 64 bits at a time from SSE compares (four lanes -> movemask) when the
 * source is dense, so the dense encoders are a single streaming pass. Decoders check the
 * byte length against the content (a bitmap's popcount fixes the value count) and reject
 * a malformed buffer with SC_ERR_PROTOCOL instead of reading past it.
 */
#include "device/format.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static const char *const format_names[SCD_FMT_COUNT] = {
    [SCD_FMT_DENSE] = "dense",	 [SCD_FMT_COO] = "coo",
    [SCD_FMT_BITMAP] = "bitmap", [SCD_FMT_HASH_BITMAP] = "hash_bitmap",
    [SCD_FMT_BLOCKS] = "blocks",
};

const char *scd_format_name(scd_format_t fmt)
{
	return (unsigned)fmt < SCD_FMT_COUNT ? format_names[fmt] : "unknown";
}

uint64_t scd_fmt_blocks_count(const scd_coo_t *src, uint32_t block)
{
	uint64_t n = 0, last = UINT64_MAX;
	for (uint64_t i = 0; i < src->nnz; i++) {
		uint64_t b = src->idx[i] / block;
		n += b != last;
		last = b;
	}
	return n;
}

uint64_t scd_fmt_bytes(scd_format_t fmt, const scd_coo_t *src, uint64_t numel,
		       const scd_partmap_t *map, uint32_t block)
{
	switch (fmt) {
	case SCD_FMT_DENSE:
		return scd_fmt_dense_bytes(numel);
	case SCD_FMT_COO:
		return scd_fmt_coo_bytes(src->nnz);
	case SCD_FMT_BITMAP:
		return scd_fmt_bitmap_bytes(numel, src->nnz);
	case SCD_FMT_HASH_BITMAP: {
		uint64_t b = 0;
		for (uint32_t p = 0; p < map->fn.nparts; p++)
			b += 8 * scd_fmt_bitmap_words(scd_partmap_size(map, p));
		return b + 4 * src->nnz;
	}
	case SCD_FMT_BLOCKS:
		return scd_fmt_blocks_bytes(scd_fmt_blocks_count(src, block), block);
	default:
		return 0;
	}
}

/* ---- COO ----------------------------------------------------------------------------- */

sc_status_t scd_coo_encode(const scd_coo_t *src, void *buf, uint64_t cap_bytes,
			   uint64_t *bytes_p)
{
	uint64_t bytes = scd_fmt_coo_bytes(src->nnz);
	if (bytes > cap_bytes)
		return SC_ERR_LIMIT;
	memcpy(buf, src->idx, 4 * src->nnz);
	memcpy((char *)buf + 4 * src->nnz, src->val, 4 * src->nnz);
	*bytes_p = bytes;
	return SC_OK;
}

sc_status_t scd_coo_decode(const void *buf, uint64_t bytes, scd_coo_t *out)
{
	if (bytes % 8)
		return SC_ERR_PROTOCOL;
	uint64_t nnz = bytes / 8;
	if (nnz > out->cap)
		return SC_ERR_LIMIT;
	memcpy(out->idx, buf, 4 * nnz);
	memcpy(out->val, (const char *)buf + 4 * nnz, 4 * nnz);
	out->nnz = nnz;
	return SC_OK;
}

/* ---- bitmap core, shared with the hash bitmap ---------------------------------------- */

/* Bitmap of the non-zeros of x[0, n) into words, values into vals; returns the count. */
static uint64_t bitmap_from_dense(const float *x, uint64_t n, uint64_t *words, float *vals)
{
	uint64_t nnz = 0, w = 0;
	uint64_t i = 0;
#ifdef __SSE2__
	const __m128 zero = _mm_setzero_ps();
	for (; i + 64 <= n; i += 64, w++) {
		uint64_t bits = 0;
		for (int j = 0; j < 64; j += 8) {
			__m128 a0 = _mm_loadu_ps(x + i + j), a1 = _mm_loadu_ps(x + i + j + 4);
			uint64_t m = (uint64_t)(_mm_movemask_ps(_mm_cmpneq_ps(a0, zero)) |
						_mm_movemask_ps(_mm_cmpneq_ps(a1, zero)) << 4);
			bits |= m << j;
		}
		words[w] = bits;
		for (uint64_t b = bits; b; b &= b - 1)
			vals[nnz++] = x[i + __builtin_ctzll(b)];
	}
#endif
	for (; i < n; i += 64, w++) {
		uint64_t bits = 0, end = n - i < 64 ? n - i : 64;
		for (uint64_t j = 0; j < end; j++)
			if (x[i + j] != 0.0f) {
				bits |= 1ULL << j;
				vals[nnz++] = x[i + j];
			}
		words[w] = bits;
	}
	return nnz;
}

static uint64_t popcount_words(const uint64_t *words, uint64_t nwords)
{
	uint64_t c = 0;
	for (uint64_t w = 0; w < nwords; w++)
		c += (uint64_t)__builtin_popcountll(words[w]);
	return c;
}

/* Checks a bitmap buffer over n positions: length, and no bit set past n. */
static sc_status_t bitmap_check(const void *buf, uint64_t bytes, uint64_t n, uint64_t *nnz_p)
{
	uint64_t nwords = scd_fmt_bitmap_words(n);
	if (bytes < 8 * nwords)
		return SC_ERR_PROTOCOL;
	const uint64_t *words = buf;
	if (n % 64 && nwords && (words[nwords - 1] >> (n % 64)))
		return SC_ERR_PROTOCOL;
	uint64_t nnz = popcount_words(words, nwords);
	if (bytes != scd_fmt_bitmap_bytes(n, nnz))
		return SC_ERR_PROTOCOL;
	*nnz_p = nnz;
	return SC_OK;
}

/* ---- bitmap -------------------------------------------------------------------------- */

sc_status_t scd_bitmap_encode(const scd_coo_t *src, uint64_t numel, void *buf,
			      uint64_t cap_bytes, uint64_t *bytes_p)
{
	uint64_t bytes = scd_fmt_bitmap_bytes(numel, src->nnz),
		 nwords = scd_fmt_bitmap_words(numel);
	if (bytes > cap_bytes)
		return SC_ERR_LIMIT;
	uint64_t *words = buf;
	memset(words, 0, 8 * nwords);
	for (uint64_t i = 0; i < src->nnz; i++) {
		uint32_t idx = src->idx[i];
		if (idx >= numel || (i && idx <= src->idx[i - 1]))
			return SC_ERR_INVALID;
		words[idx >> 6] |= 1ULL << (idx & 63);
	}
	memcpy(words + nwords, src->val, 4 * src->nnz);
	*bytes_p = bytes;
	return SC_OK;
}

sc_status_t scd_bitmap_encode_dense(const float *g, uint64_t numel, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_p)
{
	/* The value count is known only after the scan: the caller's capacity must cover
	 * the worst case (dense), which is what a preallocated send buffer holds anyway. */
	if (scd_fmt_bitmap_bytes(numel, numel) > cap_bytes)
		return SC_ERR_LIMIT;
	uint64_t nwords = scd_fmt_bitmap_words(numel);
	uint64_t nnz = bitmap_from_dense(g, numel, buf, (float *)((uint64_t *)buf + nwords));
	*bytes_p = scd_fmt_bitmap_bytes(numel, nnz);
	return SC_OK;
}

sc_status_t scd_bitmap_decode(const void *buf, uint64_t bytes, uint64_t numel, scd_coo_t *out)
{
	uint64_t nnz;
	sc_status_t st = bitmap_check(buf, bytes, numel, &nnz);
	if (st != SC_OK)
		return st;
	if (nnz > out->cap)
		return SC_ERR_LIMIT;
	const uint64_t *words = buf;
	uint64_t nwords = scd_fmt_bitmap_words(numel), k = 0;
	for (uint64_t w = 0; w < nwords; w++)
		for (uint64_t b = words[w]; b; b &= b - 1)
			out->idx[k++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(b));
	memcpy(out->val, words + nwords, 4 * nnz);
	out->nnz = nnz;
	return SC_OK;
}

/* ---- hash bitmap (ZEN Algorithm 2) ---------------------------------------------------- */

sc_status_t scd_hash_bitmap_encode(const scd_partmap_t *map, uint32_t p, const float *g,
				   void *buf, uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (p >= map->fn.nparts)
		return SC_ERR_INVALID;
	uint64_t n = scd_partmap_size(map, p), nwords = scd_fmt_bitmap_words(n);
	if (scd_fmt_bitmap_bytes(n, n) > cap_bytes)
		return SC_ERR_LIMIT;
	const uint32_t *I = map->list + map->offset[p];
	uint64_t *words = buf;
	float *vals = (float *)(words + nwords);
	uint64_t nnz = 0;
	/* local_gradients = G[I_p]; hash_bitmap = bitmap_encode(local_gradients) */
	for (uint64_t w = 0; w < nwords; w++) {
		uint64_t bits = 0, base = w * 64, end = n - base < 64 ? n - base : 64;
		for (uint64_t j = 0; j < end; j++) {
			float v = g[I[base + j]];
			if (v != 0.0f) {
				bits |= 1ULL << j;
				vals[nnz++] = v;
			}
		}
		words[w] = bits;
	}
	*bytes_p = scd_fmt_bitmap_bytes(n, nnz);
	return SC_OK;
}

static int seg_ok(const scd_partmap_t *map, const scd_hbseg_t *seg)
{
	return seg->p < map->fn.nparts && seg->lo <= seg->hi &&
	       seg->hi <= scd_partmap_size(map, seg->p);
}

/* The marked slots of [lo, hi) (bits of touched over the partition's slots): each one's
 * value is taken (non-zeros into words/vals, segment-relative) and cleared, and so is its
 * mark. */
static uint64_t bitmap_from_marked(float *local, uint64_t *touched, uint64_t lo, uint64_t hi,
				   uint64_t *words, float *vals)
{
	uint64_t nnz = 0;
	memset(words, 0, 8 * scd_fmt_bitmap_words(hi - lo));
	for (uint64_t tw = lo / 64; tw * 64 < hi; tw++) {
		uint64_t base = tw * 64, mask = ~0ull;
		if (base < lo)
			mask <<= lo - base;
		if (hi - base < 64)
			mask &= (1ull << (hi - base)) - 1;
		uint64_t bits = touched[tw] & mask;
		touched[tw] &= ~mask;
		for (; bits; bits &= bits - 1) {
			uint64_t j = base + (uint64_t)__builtin_ctzll(bits) - lo;
			float v = local[j];
			local[j] = 0.0f;
			if (v != 0.0f) {
				words[j / 64] |= 1ull << (j % 64);
				vals[nnz++] = v;
			}
		}
	}
	return nnz;
}

sc_status_t scd_hash_bitmap_encode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
				       float *local, uint64_t *touched, void *buf,
				       uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	uint64_t n = seg->hi - seg->lo, nwords = scd_fmt_bitmap_words(n);
	if (scd_fmt_bitmap_bytes(n, n) > cap_bytes)
		return SC_ERR_LIMIT;
	float *vals = (float *)((uint64_t *)buf + nwords);
	uint64_t nnz = touched ? bitmap_from_marked(local, touched, seg->lo, seg->hi, buf, vals)
			       : bitmap_from_dense(local, n, buf, vals);
	*bytes_p = scd_fmt_bitmap_bytes(n, nnz);
	return SC_OK;
}

sc_status_t scd_hash_bitmap_decode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
				       const void *buf, uint64_t bytes, scd_coo_t *out)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	uint64_t n = seg->hi - seg->lo, nnz;
	sc_status_t st = bitmap_check(buf, bytes, n, &nnz);
	if (st != SC_OK)
		return st;
	if (nnz > out->cap)
		return SC_ERR_LIMIT;
	const uint32_t *I = map->list + map->offset[seg->p] + seg->lo;
	const uint64_t *words = buf;
	uint64_t nwords = scd_fmt_bitmap_words(n), k = 0;
	for (uint64_t w = 0; w < nwords; w++)
		for (uint64_t b = words[w]; b; b &= b - 1)
			out->idx[k++] = I[w * 64 + (uint64_t)__builtin_ctzll(b)];
	memcpy(out->val, words + nwords, 4 * nnz);
	out->nnz = nnz;
	return SC_OK;
}

sc_status_t scd_hash_bitmap_decode_dense_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
					     const void *buf, uint64_t bytes, float *dst)
{
	if (!seg_ok(map, seg))
		return SC_ERR_INVALID;
	uint64_t n = seg->hi - seg->lo, nnz;
	sc_status_t st = bitmap_check(buf, bytes, n, &nnz);
	if (st != SC_OK)
		return st;
	const uint32_t *I = map->list + map->offset[seg->p] + seg->lo;
	const uint64_t *words = buf;
	uint64_t nwords = scd_fmt_bitmap_words(n), k = 0;
	const float *vals = (const float *)(words + nwords);
	for (uint64_t w = 0; w < nwords; w++)
		for (uint64_t b = words[w]; b; b &= b - 1)
			dst[I[w * 64 + (uint64_t)__builtin_ctzll(b)]] = vals[k++];
	return SC_OK;
}

static scd_hbseg_t whole(const scd_partmap_t *map, uint32_t p)
{
	return (scd_hbseg_t){p, 0, p < map->fn.nparts ? scd_partmap_size(map, p) : 0};
}

sc_status_t scd_hash_bitmap_encode_local(const scd_partmap_t *map, uint32_t p,
					 const float *local, void *buf, uint64_t cap_bytes,
					 uint64_t *bytes_p)
{
	scd_hbseg_t seg = whole(map, p);
	/* without marks the segment is only read */
	return scd_hash_bitmap_encode_seg(map, &seg, (float *)local, NULL, buf, cap_bytes,
					  bytes_p);
}

sc_status_t scd_hash_bitmap_decode(const scd_partmap_t *map, uint32_t p, const void *buf,
				   uint64_t bytes, scd_coo_t *out)
{
	scd_hbseg_t seg = whole(map, p);
	return scd_hash_bitmap_decode_seg(map, &seg, buf, bytes, out);
}

sc_status_t scd_hash_bitmap_decode_dense(const scd_partmap_t *map, uint32_t p, const void *buf,
					 uint64_t bytes, float *dst)
{
	scd_hbseg_t seg = whole(map, p);
	return scd_hash_bitmap_decode_dense_seg(map, &seg, buf, bytes, dst);
}

/* ---- blocks (OmniReduce) ------------------------------------------------------------- */

static inline uint64_t block_len(uint64_t b, uint64_t numel, uint32_t block)
{
	uint64_t lo = b * block;
	return numel - lo < block ? numel - lo : block;
}

sc_status_t scd_blocks_encode(const scd_coo_t *src, uint64_t numel, uint32_t block, void *buf,
			      uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (block == 0)
		return SC_ERR_INVALID;
	uint64_t rec = 4 + 4 * (uint64_t)block;
	uint64_t bytes = scd_fmt_blocks_bytes(scd_fmt_blocks_count(src, block), block);
	if (bytes > cap_bytes)
		return SC_ERR_LIMIT;
	char *w = (char *)buf - rec;
	uint64_t last = UINT64_MAX;
	for (uint64_t i = 0; i < src->nnz; i++) {
		uint32_t idx = src->idx[i];
		if (idx >= numel || (i && idx <= src->idx[i - 1]))
			return SC_ERR_INVALID;
		uint64_t b = idx / block;
		if (b != last) {
			w += rec;
			uint32_t id = (uint32_t)b;
			memcpy(w, &id, 4);
			memset(w + 4, 0, 4 * (uint64_t)block);
			last = b;
		}
		memcpy(w + 4 + 4 * (idx - b * block), &src->val[i], 4);
	}
	*bytes_p = bytes;
	return SC_OK;
}

static int block_nonzero(const float *x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (x[i] != 0.0f)
			return 1;
	return 0;
}

sc_status_t scd_blocks_encode_dense(const float *g, uint64_t numel, uint32_t block, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_p)
{
	if (block == 0)
		return SC_ERR_INVALID;
	uint64_t rec = 4 + 4 * (uint64_t)block, nb = (numel + block - 1) / block;
	char *w = buf, *end = (char *)buf + cap_bytes;
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t len = block_len(b, numel, block);
		const float *x = g + b * block;
		if (!block_nonzero(x, len))
			continue;
		if ((uint64_t)(end - w) < rec)
			return SC_ERR_LIMIT;
		uint32_t id = (uint32_t)b;
		memcpy(w, &id, 4);
		memcpy(w + 4, x, 4 * len);
		memset(w + 4 + 4 * len, 0, 4 * (block - len));
		w += rec;
	}
	*bytes_p = (uint64_t)(w - (char *)buf);
	return SC_OK;
}

sc_status_t scd_blocks_decode(const void *buf, uint64_t bytes, uint64_t numel, uint32_t block,
			      scd_coo_t *out)
{
	if (block == 0)
		return SC_ERR_INVALID;
	uint64_t rec = 4 + 4 * (uint64_t)block;
	if (bytes % rec)
		return SC_ERR_PROTOCOL;
	uint64_t nb = bytes / rec, k = 0, prev = UINT64_MAX;
	const char *r = buf;
	for (uint64_t i = 0; i < nb; i++, r += rec) {
		uint32_t id;
		memcpy(&id, r, 4);
		if ((uint64_t)id * block >= numel || (prev != UINT64_MAX && id <= prev))
			return SC_ERR_PROTOCOL;
		prev = id;
		uint64_t len = block_len(id, numel, block);
		for (uint64_t j = 0; j < len; j++) {
			float v;
			memcpy(&v, r + 4 + 4 * j, 4);
			if (v == 0.0f)
				continue;
			if (k == out->cap)
				return SC_ERR_LIMIT;
			out->idx[k] = (uint32_t)(id * (uint64_t)block + j);
			out->val[k++] = v;
		}
	}
	out->nnz = k;
	return SC_OK;
}

uint64_t scd_blocks_count_dense(const float *g, uint64_t numel, uint32_t block)
{
	uint64_t nb = block ? (numel + block - 1) / block : 0, n = 0;
	for (uint64_t b = 0; b < nb; b++)
		n += block_nonzero(g + b * block, block_len(b, numel, block));
	return n;
}

sc_status_t scd_blocks_apply(const void *buf, uint64_t bytes, uint32_t block, uint64_t len,
			     float *dst, int add)
{
	if (block == 0)
		return SC_ERR_INVALID;
	uint64_t rec = 4 + 4 * (uint64_t)block, nb = (len + block - 1) / block;
	if (bytes % rec)
		return SC_ERR_PROTOCOL;
	const uint8_t *p = buf;
	for (uint64_t r = 0; r < bytes / rec; r++, p += rec) {
		uint32_t id;
		memcpy(&id, p, 4);
		if (id >= nb)
			return SC_ERR_PROTOCOL;
		uint64_t lo = (uint64_t)id * block, n = block_len(id, len, block);
		const float *v = (const float *)(p + 4);
		float *d = dst + lo;
		if (add)
			for (uint64_t i = 0; i < n; i++)
				d[i] += v[i];
		else
			memcpy(d, v, 4 * n);
	}
	return SC_OK;
}

/* ---- dense helpers ------------------------------------------------------------------- */

void scd_coo_scatter_add(float *dst, const scd_coo_t *src)
{
	for (uint64_t i = 0; i < src->nnz; i++)
		dst[src->idx[i]] += src->val[i];
}

void scd_reduce_sum(float *dst, const float *src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] += src[i];
}

uint64_t scd_coo_scatter_add_part(float *dst, uint64_t *touched, const scd_partmap_t *map,
				  uint32_t p, const scd_coo_t *src)
{
	uint64_t bad = 0, n = scd_partmap_size(map, p), A = SCD_PREFETCH_AHEAD;
	for (uint64_t k = 0; k < src->nnz; k++) {
		/* both reads land on scattered lines: ask for the map's line 2A entries ahead
		 * and for the slot A ahead, whose map entry was asked for A iterations ago */
		if (k + 2 * A < src->nnz && src->idx[k + 2 * A] < map->numel)
			__builtin_prefetch(map->pos + src->idx[k + 2 * A]);
		if (k + A < src->nnz && src->idx[k + A] < map->numel) {
			uint32_t ja = map->pos[src->idx[k + A]];
			if (ja < n)
				__builtin_prefetch(dst + ja, 1);
		}
		uint32_t i = src->idx[k], j = i < map->numel ? map->pos[i] : UINT32_MAX;
		if (j < n) {
			dst[j] += src->val[k];
			if (touched)
				touched[j / 64] |= 1ull << (j % 64);
		} else {
			bad++;
		}
	}
	return bad;
}
