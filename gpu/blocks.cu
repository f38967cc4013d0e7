/*
 * blocks.cu: OmniReduce's non-zero blocks on the GPU device, the receiving side and the
 * count (scg.h, section blocks.cu); the cpu reference is daemon/device/format.c (format.h:
 * a record is a u32 block id and the block's values in full, the tail block padded with
 * zeros). The encoder is hhash.cu's scg_blocks_encode_dense.
 *
 * Count: one thread per block scans it for a non-zero. Decode: the records are checked
 * first (a length of whole records, ids strictly ascending and inside the tensor), then
 * the non-zeros of the carried blocks are compacted in record order, which is index order
 * since the ids ascend. The errors are the cpu's, decided as its sequential pass does:
 * SC_ERR_LIMIT when the records before the first bad one hold more non-zeros than out's
 * cap, else SC_ERR_PROTOCOL for that bad record.
 *
 * Apply: records in any order. The records before the first bad id are applied (as the
 * cpu does before it returns SC_ERR_PROTOCOL). A run of records with strictly ascending
 * ids names every element at most once, so one thread per element of the run writes
 * without conflict; runs are applied one after the other, in record order, so a block
 * sent twice is added (or assigned) in the cpu's order: the same bits. A buffer from one
 * encoder is one run.
 */
#include "portable.cuh"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>

#include <cstring>

namespace
{ /* file-local: no clash with the other sources' functors */

/* The records of a buffer: record r is words[r * (1 + block)]: the id, then the values. */
struct blk_recs {
	const uint32_t *words;
	uint32_t block;
	SCG_HD uint32_t id(uint64_t r) const
	{
		return words[r * (1 + (uint64_t)block)];
	}
	SCG_HD float val(uint64_t r, uint64_t j) const
	{
		float v;
		memcpy(&v, &words[r * (1 + (uint64_t)block) + 1 + j], 4);
		return v;
	}
};

SCG_HD inline uint64_t blk_len(uint64_t b, uint64_t numel, uint32_t block)
{
	uint64_t lo = b * block;
	return numel - lo < block ? numel - lo : block;
}

struct blk_nonzero {
	const float *g;
	uint64_t numel;
	uint32_t block;
	SCG_HD bool operator()(uint64_t b) const
	{
		uint64_t lo = b * block, hi = lo + blk_len(b, numel, block);
		for (uint64_t i = lo; i < hi; i++)
			if (g[i] != 0.0f)
				return true;
		return false;
	}
};

/* Decode: record r is bad when its block is past numel or its id does not ascend. */
struct dec_bad {
	blk_recs recs;
	uint64_t numel;
	SCG_HD bool operator()(uint64_t r) const
	{
		uint32_t id = recs.id(r);
		return (uint64_t)id * recs.block >= numel || (r && id <= recs.id(r - 1));
	}
};

/* Element e = r * block + j of the records: a non-zero inside its block. */
struct dec_nz {
	blk_recs recs;
	uint64_t numel;
	SCG_HD bool operator()(uint64_t e) const
	{
		uint64_t r = e / recs.block, j = e % recs.block;
		return j < blk_len(recs.id(r), numel, recs.block) && recs.val(r, j) != 0.0f;
	}
};

struct dec_write {
	blk_recs recs;
	uint32_t *idx;
	float *val;
	SCG_HD void operator()(uint64_t pos, uint64_t e) const
	{
		uint64_t r = e / recs.block, j = e % recs.block;
		idx[pos] = (uint32_t)((uint64_t)recs.id(r) * recs.block + j);
		val[pos] = recs.val(r, j);
	}
};

/* Apply: record r's id is past the range's nb blocks. */
struct app_bad {
	blk_recs recs;
	uint64_t nb;
	SCG_HD bool operator()(uint64_t r) const
	{
		return recs.id(r) >= nb;
	}
};

/* Record r (r > 0) starts a new run: its id does not ascend. */
struct app_descent {
	blk_recs recs;
	SCG_HD bool operator()(uint64_t r) const
	{
		return recs.id(r) <= recs.id(r - 1);
	}
};

/* Element e of the records from r0 on: dst (+)= the value. */
struct app_elem {
	blk_recs recs;
	uint64_t r0, len;
	float *dst;
	int add;
	SCG_HD void operator()(uint64_t e) const
	{
		uint64_t r = r0 + e / recs.block, j = e % recs.block;
		uint64_t id = recs.id(r);
		if (j >= blk_len(id, len, recs.block))
			return;
		float v = recs.val(r, j);
		float *d = dst + id * recs.block + j;
		*d = add ? *d + v : v;
	}
};

} // namespace

extern "C" sc_status_t scg_blocks_count_dense(const float *g, uint64_t numel, uint32_t block,
					      uint64_t *count_host)
{
	const char *what = "scg_blocks_count_dense";
	uint64_t nb = block ? (numel + block - 1) / block : 0, n = 0;
	thrust::counting_iterator<uint64_t> zero(0);
	if (nb)
		SCG_TRY(what, n = (uint64_t)thrust::count_if(SCG_POLICY, zero, zero + nb,
							     blk_nonzero{g, numel, block}));
	*count_host = n;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_blocks_decode(const void *buf, uint64_t bytes, uint64_t numel,
					 uint32_t block, scg_coo_t *out_host)
{
	const char *what = "scg_blocks_decode";
	if (block == 0)
		return scg_fail(SC_ERR_INVALID, "%s: block 0", what);
	uint64_t rec = 4 + 4 * (uint64_t)block;
	if (bytes % rec)
		return scg_fail(SC_ERR_PROTOCOL, "%s: %llu bytes: no whole number of records",
				what, (unsigned long long)bytes);
	uint64_t nrec = bytes / rec, good = nrec, nz = 0;
	blk_recs recs{(const uint32_t *)buf, block};
	thrust::counting_iterator<uint64_t> zero(0);
	if (nrec)
		SCG_TRY(what, good = (uint64_t)(thrust::find_if(SCG_POLICY, zero, zero + nrec,
								dec_bad{recs, numel}) -
						zero));
	uint64_t ne = good * block;
	if (ne)
		SCG_TRY(what, nz = (uint64_t)thrust::count_if(SCG_POLICY, zero, zero + ne,
							      dec_nz{recs, numel}));
	if (nz > out_host->cap)
		return scg_fail(SC_ERR_LIMIT, "%s: %llu non-zeros, room for %llu", what,
				(unsigned long long)nz, (unsigned long long)out_host->cap);
	if (good < nrec)
		return scg_fail(SC_ERR_PROTOCOL, "%s: record %llu: bad block id", what,
				(unsigned long long)good);
	if (nz) {
		auto o = thrust::make_tabulate_output_iterator(
		    dec_write{recs, out_host->idx, out_host->val});
		SCG_TRY(what,
			thrust::copy_if(SCG_POLICY, zero, zero + ne, o, dec_nz{recs, numel}));
	}
	out_host->nnz = nz;
	return SCG_CHECK(what);
}

extern "C" sc_status_t scg_blocks_apply(const void *buf, uint64_t bytes, uint32_t block,
					uint64_t len, float *dst, int add)
{
	const char *what = "scg_blocks_apply";
	if (block == 0)
		return scg_fail(SC_ERR_INVALID, "%s: block 0", what);
	uint64_t rec = 4 + 4 * (uint64_t)block, nb = (len + block - 1) / block;
	if (bytes % rec)
		return scg_fail(SC_ERR_PROTOCOL, "%s: %llu bytes: no whole number of records",
				what, (unsigned long long)bytes);
	uint64_t nrec = bytes / rec, good = nrec;
	blk_recs recs{(const uint32_t *)buf, block};
	thrust::counting_iterator<uint64_t> zero(0);
	if (nrec)
		SCG_TRY(what, good = (uint64_t)(thrust::find_if(SCG_POLICY, zero, zero + nrec,
								app_bad{recs, nb}) -
						zero));
	/* runs of ascending ids, in record order */
	for (uint64_t r0 = 0, r1; r0 < good; r0 = r1) {
		r1 = good;
		if (r0 + 1 < good)
			SCG_TRY(what, r1 = (uint64_t)(thrust::find_if(SCG_POLICY, zero + r0 + 1,
								      zero + good,
								      app_descent{recs}) -
						      zero));
		uint64_t ne = (r1 - r0) * block;
		SCG_TRY(what, thrust::for_each(SCG_POLICY, zero, zero + ne,
					       app_elem{recs, r0, len, dst, add}));
	}
	if (good < nrec)
		return scg_fail(SC_ERR_PROTOCOL, "%s: record %llu: block id past %llu blocks",
				what, (unsigned long long)good, (unsigned long long)nb);
	return SCG_CHECK(what);
}
