/*
 * shm_layout.h: the layout of a tensor's POSIX shared-memory object, shared by the daemon
 * (which creates it at registration, mode 0600, sized, pre-faulted) and libsparseclient
 * (which maps it). Not installed: only the daemon and the library read it.
 *
 *   offset 0                 sc_shm_header_t (magic, version, its own size, attributes)
 *   data_offset (4096)       numel elements of dtype: the gradient in, the result out
 *   coo_offset (if coo_cap)  coo_cap uint32 indices, then (64-aligned) coo_cap values
 *   residual_offset (if any) numel floats: the node's error-feedback residual, written by
 *                            the daemon (local rank 0's object only; zeros elsewhere)
 *
 * A cuda tensor's object holds the header only (total_bytes 4096): its offsets are into the
 * daemon's GPU allocation of the same layout less the header page (data_offset 0), which
 * the trainer maps from the registration reply's CUDA IPC handle.
 *
 * The header carries a version and its size so that a library and a daemon of different
 * builds detect a mismatch instead of misreading each other's memory.
 */
#ifndef SC_SHM_LAYOUT_H
#define SC_SHM_LAYOUT_H

#include <stdint.h>

#define SC_SHM_MAGIC	   0x53434f4dU /* "SCOM" */
#define SC_SHM_VERSION	   4U
#define SC_SHM_DATA_OFFSET 4096U
#define SC_SHM_NAME_MAX	   256

typedef struct sc_shm_header {
	uint32_t magic;
	uint32_t version;
	uint32_t header_bytes; /* sizeof(sc_shm_header_t) of the writer */
	uint32_t dtype;	       /* sc_dtype_t */
	uint64_t numel;
	uint64_t data_offset;
	uint64_t coo_cap;	 /* capacity of the COO input area, 0 when none */
	uint64_t coo_idx_offset; /* uint32 indices */
	uint64_t coo_val_offset; /* values of dtype */
	uint64_t total_bytes;
	uint64_t residual_offset; /* numel floats of error-feedback residual, 0 when none */
	/* the daemon's answer to a COO allreduce that asked for a sparse result, written
	 * before its completion is sent: the number of result entries in the COO area, or
	 * UINT64_MAX when the result is dense in the data area */
	uint64_t result_nnz;
	uint32_t device_kind;	 /* sc_device_kind_t: where data, COO area and residual live */
	uint32_t device_ordinal; /* with cuda: the GPU */
	char name[SC_SHM_NAME_MAX];
	/* the completion's shortcut (proto/shm_wake.h): the daemon writes the handle of an
	 * operation that succeeded here, then bumps done_seq and wakes the futex waiters on
	 * it; the library bumps done_seq too when it ends an operation of the tensor itself
	 * (a Completion message, a lost daemon), so one word wakes the waiting thread */
	uint64_t done_handle;
	uint32_t done_seq;
	uint32_t done_pad;
} sc_shm_header_t;

static inline uint64_t sc_shm_align64(uint64_t x)
{
	return (x + 63u) & ~(uint64_t)63u;
}

/* Fills the offsets and the total size of an object for numel elements of elem_bytes,
 * a COO area of coo_cap entries and, if residual, a float residual of numel entries; the total
 * is rounded up to whole 4 KiB pages. */
static inline void sc_shm_layout(sc_shm_header_t *h, uint64_t numel, uint32_t elem_bytes,
				 uint64_t coo_cap, int residual)
{
	uint64_t end = SC_SHM_DATA_OFFSET + sc_shm_align64(numel * elem_bytes);
	h->data_offset = SC_SHM_DATA_OFFSET;
	h->coo_cap = coo_cap;
	h->coo_idx_offset = coo_cap ? end : 0;
	if (coo_cap)
		end = sc_shm_align64(end + coo_cap * 4u);
	h->coo_val_offset = coo_cap ? end : 0;
	if (coo_cap)
		end = sc_shm_align64(end + coo_cap * elem_bytes);
	h->residual_offset = residual ? end : 0;
	if (residual)
		end = sc_shm_align64(end + numel * 4u);
	h->total_bytes = (end + 4095u) & ~(uint64_t)4095u;
}

/* The same layout for a cuda tensor: the areas in one GPU allocation (data at 0), whose
 * size is returned; the shared object holds the header page only. */
static inline uint64_t sc_shm_layout_device(sc_shm_header_t *h, uint64_t numel,
					    uint32_t elem_bytes, uint64_t coo_cap, int residual)
{
	sc_shm_layout(h, numel, elem_bytes, coo_cap, residual);
	uint64_t bytes = h->total_bytes - SC_SHM_DATA_OFFSET;
	h->data_offset = 0;
	if (h->coo_cap) {
		h->coo_idx_offset -= SC_SHM_DATA_OFFSET;
		h->coo_val_offset -= SC_SHM_DATA_OFFSET;
	}
	if (h->residual_offset)
		h->residual_offset -= SC_SHM_DATA_OFFSET;
	h->total_bytes = SC_SHM_DATA_OFFSET;
	return bytes;
}

#endif
