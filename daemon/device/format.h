/*
 * format.h: the lossless wire formats of sparse tensors, each with encode, decode and an
 * exact byte count (the encoders write exactly what the *_bytes functions return, and the
 * cost model uses the same functions). ZEN sec. 3.3 compares them; Fig. 17a plots them.
 *
 *   COO          idx[nnz] (u32) then val[nnz] (f32): 8 bytes per non-zero.
 *   bitmap       ceil(numel/64) u64 words (bit i: element i is non-zero), then the
 *                non-zero values in index order: numel/8 + 4 nnz bytes.
 *   hash bitmap  ZEN Algorithm 2, per partition p: a bitmap over I_p (the partition's
 *                indices in ascending order; bit j: element I_p[j] is non-zero), then the
 *                values: |I_p|/8 + 4 nnz_p bytes, so the P partitions' bitmaps together
 *                cost |G|/8 bytes whatever the density.
 *   blocks       OmniReduce-style: one record per non-zero block of `block` elements,
 *                (u32 block id, the block's values in full, the tail block padded with
 *                zeros), blocks ascending: nblocks_nz * (4 + 4 block) bytes.
 *   dense        numel f32 values.
 * Every buffer is little-endian host order, 8-byte aligned by the caller, no header: the
 * decoder is told the byte length, as a receiver is.
 *
 * Input COO for the encoders must have unique indices in ascending order (what the
 * sparsifiers produce); decoders produce ascending indices.
 */
#ifndef SCD_DEVICE_FORMAT_H
#define SCD_DEVICE_FORMAT_H

#include "device/partition.h"

typedef enum {
	SCD_FMT_DENSE = 0,
	SCD_FMT_COO,
	SCD_FMT_BITMAP,
	SCD_FMT_HASH_BITMAP,
	SCD_FMT_BLOCKS,
	SCD_FMT_COUNT
} scd_format_t;

const char *scd_format_name(scd_format_t fmt);

/* ---- exact sizes --------------------------------------------------------------------- */
static inline uint64_t scd_fmt_bitmap_words(uint64_t numel)
{
	return (numel + 63) / 64;
}
static inline uint64_t scd_fmt_dense_bytes(uint64_t numel)
{
	return 4 * numel;
}
static inline uint64_t scd_fmt_coo_bytes(uint64_t nnz)
{
	return 8 * nnz;
}
static inline uint64_t scd_fmt_bitmap_bytes(uint64_t numel, uint64_t nnz)
{
	return 8 * scd_fmt_bitmap_words(numel) + 4 * nnz;
}
/* Partition p of size |I_p| holding nnz_p non-zeros. */
static inline uint64_t scd_fmt_hash_bitmap_bytes(uint64_t part_size, uint64_t nnz_p)
{
	return scd_fmt_bitmap_bytes(part_size, nnz_p);
}
static inline uint64_t scd_fmt_blocks_bytes(uint64_t nblocks_nz, uint32_t block)
{
	return nblocks_nz * (4 + 4 * (uint64_t)block);
}
/* Non-zero blocks of an ascending COO tensor. */
uint64_t scd_fmt_blocks_count(const scd_coo_t *src, uint32_t block);
/* Exact encoded size of src (ascending COO over numel elements) in fmt; for the hash
 * bitmap, the sum over the partitions of map. block is used by SCD_FMT_BLOCKS. */
uint64_t scd_fmt_bytes(scd_format_t fmt, const scd_coo_t *src, uint64_t numel,
		       const scd_partmap_t *map, uint32_t block);

/* ---- COO ----------------------------------------------------------------------------- */
sc_status_t scd_coo_encode(const scd_coo_t *src, void *buf, uint64_t cap_bytes,
			   uint64_t *bytes_p);
sc_status_t scd_coo_decode(const void *buf, uint64_t bytes, scd_coo_t *out);

/* ---- bitmap -------------------------------------------------------------------------- */
sc_status_t scd_bitmap_encode(const scd_coo_t *src, uint64_t numel, void *buf,
			      uint64_t cap_bytes, uint64_t *bytes_p);
/* The non-zeros of a dense tensor, scanned here. */
sc_status_t scd_bitmap_encode_dense(const float *g, uint64_t numel, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_p);
sc_status_t scd_bitmap_decode(const void *buf, uint64_t bytes, uint64_t numel, scd_coo_t *out);

/* ---- hash bitmap (ZEN Algorithm 2) ---------------------------------------------------- */
/* hash_bitmap_encode(G, I_p): g is the dense (aggregated) tensor over map->numel. */
sc_status_t scd_hash_bitmap_encode(const scd_partmap_t *map, uint32_t p, const float *g,
				   void *buf, uint64_t cap_bytes, uint64_t *bytes_p);
/* The same from the partition's own values: local[j] is element I_p[j] (a server that
 * aggregates its partition densely in I_p order). */
sc_status_t scd_hash_bitmap_encode_local(const scd_partmap_t *map, uint32_t p,
					 const float *local, void *buf, uint64_t cap_bytes,
					 uint64_t *bytes_p);
/* hash_bitmap_decode(I_p, bitmap): global indices (ascending) and values. */
sc_status_t scd_hash_bitmap_decode(const scd_partmap_t *map, uint32_t p, const void *buf,
				   uint64_t bytes, scd_coo_t *out);
/* Decodes straight into a dense tensor (dst[idx] = value); the pull's last step. */
sc_status_t scd_hash_bitmap_decode_dense(const scd_partmap_t *map, uint32_t p, const void *buf,
					 uint64_t bytes, float *dst);
/* The same three over a segment of partition p: its slots [lo, hi), i.e. the elements
 * I_p[lo .. hi), with a hash bitmap of its own (hi - lo bits); local[j] is element
 * I_p[lo + j]. A partition sent in segments (by index range: I_p is ascending) costs what
 * it costs whole, plus a word's rounding per segment. */
typedef struct scd_hbseg {
	uint32_t p;
	uint64_t lo, hi;
} scd_hbseg_t;
/* encode_seg reads local[0, hi - lo) whole when touched is NULL. Otherwise touched is a
 * bitmap over the partition's slots (bit s: slot s may be non-zero, as scatter_add_part
 * marks them) and only the marked slots of the segment are read; each is then cleared in
 * local and in touched, so an aggregate kept zero between steps costs what it holds, not
 * its size. */
sc_status_t scd_hash_bitmap_encode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
				       float *local, uint64_t *touched, void *buf,
				       uint64_t cap_bytes, uint64_t *bytes_p);
sc_status_t scd_hash_bitmap_decode_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
				       const void *buf, uint64_t bytes, scd_coo_t *out);
sc_status_t scd_hash_bitmap_decode_dense_seg(const scd_partmap_t *map, const scd_hbseg_t *seg,
					     const void *buf, uint64_t bytes, float *dst);

/* ---- blocks (OmniReduce) ------------------------------------------------------------- */
sc_status_t scd_blocks_encode(const scd_coo_t *src, uint64_t numel, uint32_t block, void *buf,
			      uint64_t cap_bytes, uint64_t *bytes_p);
sc_status_t scd_blocks_encode_dense(const float *g, uint64_t numel, uint32_t block, void *buf,
				    uint64_t cap_bytes, uint64_t *bytes_p);
/* Decodes to COO: every non-zero of the carried blocks (zeros inside blocks dropped). */
sc_status_t scd_blocks_decode(const void *buf, uint64_t bytes, uint64_t numel, uint32_t block,
			      scd_coo_t *out);
/* Non-zero blocks of a dense tensor of numel elements (what blocks_encode_dense would send
 * of it, counted without encoding). */
uint64_t scd_blocks_count_dense(const float *g, uint64_t numel, uint32_t block);
/* Applies block records (any order, SC_ERR_PROTOCOL for a length that is no whole number
 * of records or a block id past the range) to a dense range of len elements: dst += the
 * records' values (add), or dst = them (the other elements untouched). */
sc_status_t scd_blocks_apply(const void *buf, uint64_t bytes, uint32_t block, uint64_t len,
			     float *dst, int add);

/* ---- dense helpers ------------------------------------------------------------------- */
/* dst[idx] += val for every pair (aggregation of a received COO). */
void scd_coo_scatter_add(float *dst, const scd_coo_t *src);
/* Partition p's aggregate over its own index list I_p: dst[pos[idx]] += val (dst holds
 * |I_p| floats). Pairs whose index is past numel or whose slot is past |I_p| are skipped
 * and counted (a malformed push); an index of another partition whose slot happens to
 * fit is not detected (checking costs a random read per pair: the pushes come from the
 * same partition function on every rank). touched (NULL: none) gets bit j set for every
 * slot j added to. */
uint64_t scd_coo_scatter_add_part(float *dst, uint64_t *touched, const scd_partmap_t *map,
				  uint32_t p, const scd_coo_t *src);
/* dst[i] += src[i] (the dense reduction). */
void scd_reduce_sum(float *dst, const float *src, uint64_t n);

#endif
