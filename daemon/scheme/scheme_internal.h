/*
 * scheme_internal.h: what the scheme files share: the context, growable pre-faulted
 * workspaces, the metadata round, transport wrappers that count rounds and record errors,
 * and the helpers every scheme uses (contribution as COO or dense, result statistics).
 *
 * Tensor data (io's arrays) and every workspace with dev set are the device's memory
 * (docs/design.md, layers): the helpers here and the schemes never dereference them; they
 * call c->dev's ops and the transport's exchanges, compose message headers on the host and
 * move them with from_host, and read back with to_host only the few scalars their control
 * flow needs. Host workspaces hold control data only (transfer lists, counts, tables).
 */
#ifndef SCD_SCHEME_INTERNAL_H
#define SCD_SCHEME_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "scheme/scheme.h"

/* Fields of scheme messages, unaligned, in host order (the arrays travel as they are in
 * memory: the daemons of a world share one byte order). */
static inline void scd_put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}
static inline void scd_put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}
static inline uint32_t scd_get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static inline uint64_t scd_get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* A buffer that only grows (geometrically), pre-faulted when it does. With dev set it
 * lives in that device's memory (allocated, copied and freed through its ops): the
 * workspaces that hold tensor data or travel through the transport. Without, host memory:
 * control data (transfer lists, counts). */
typedef struct scd_ws {
	void *p;
	size_t cap;
	const scd_device_ops_t *dev;
} scd_ws_t;

sc_status_t scd_ws_reserve(scd_ws_t *w, size_t bytes);
/* The same, keeping the first keep bytes' contents when it grows. */
sc_status_t scd_ws_reserve_keep(scd_ws_t *w, size_t bytes, size_t keep);
void scd_ws_free(scd_ws_t *w);

/* Host memory for staged sends whose size is known only once released (scheme.c). */
#define SCD_STAGE_CHUNKS 24
typedef struct scd_stage_chunk {
	void *p;
	size_t cap, used;
} scd_stage_chunk_t;

/* SparDL's team counts that have run in a context, with their measurements (identical on
 * every rank: the slowest rank's time and the ranks' mean h / L, from metadata rounds). */
#define SCD_SPARDL_SLOTS 4
typedef struct scd_spardl_slot {
	uint32_t d;    /* 0: free */
	uint32_t runs; /* runs at d measured (the first is not counted) */
	double time_s; /* the slowest rank's time per run at d, averaged */
	double hl;     /* B-SAG's h / L at d, averaged over ranks and runs (0: none) */
} scd_spardl_slot_t;

/* SparDL's state that lives across steps: Algorithm 2's h controller, and the team count's
 * calibration (scd_spardl_fold, scd_spardl_pick_teams). */
typedef struct scd_spardl_state {
	uint32_t teams; /* d the state belongs to (0: none yet) */
	double h, step; /* top-h and its step */
	int flag;
	double last_hl;	    /* this rank's h / L in its last B-SAG (0: none since) */
	uint32_t prev_d;    /* d of the context's previous run if it was SparDL, else 0 */
	uint32_t cur_d;	    /* d to run (0: none chosen yet, which is d = 1) */
	uint32_t incumbent; /* d a try returns to unless measured faster */
	uint32_t runs, tries;
	scd_spardl_slot_t slot[SCD_SPARDL_SLOTS];
} scd_spardl_state_t;

/* Folds the previous run (at s->prev_d, when it was SparDL) into its slot: the slowest
 * rank's time and the ranks' mean B-SAG h / L (0: none). */
void scd_spardl_fold(scd_spardl_state_t *s, double time_s, double hl);
/* The team count for the next run (see scheme_spardl.c): d = 1 until something is
 * measured; another d only when tried and measured faster. in: the cost model's input
 * (P, density, network) with which the untried divisors are priced. */
uint32_t scd_spardl_pick_teams(scd_spardl_state_t *s, const scd_cost_in_t *in);

struct scd_scheme_ctx {
	scd_scheme_cfg_t cfg;
	scd_transport_t *t;
	const scd_device_ops_t *dev;
	int rank, size;
	uint64_t step;
	double alpha_s, beta_s;

	/* metadata round: per rank nnz and an optional per-partition vector; the messages
	 * travel in device memory (meta_send, meta_recv) and are composed and read on the
	 * host (meta_host, P + 1 slots) */
	scd_ws_t meta_send, meta_recv, meta_host;
	uint64_t *nnz;	 /* [P] */
	uint64_t *parts; /* [P][nparts]: parts[q * nparts + i] = rank q's i-th count */
	uint32_t nparts;
	uint64_t parts_cap;
	uint64_t total_nnz, max_nnz;
	uint32_t last_elapsed_us;     /* this rank's previous run */
	uint32_t prev_elapsed_max_us; /* (same) the slowest rank's previous run */
	/* [P], host: the result's non-zeros per even range (its statistics) */
	uint64_t *rcount;

	/* per-operation transfer lists */
	scd_xfer_t *sends, *recvs; /* [2P] each */
	size_t *rbytes;		   /* [2P] */
	scd_ws_t xs, xr, xb;	   /* longer lists (streamed chunks) */
	scd_ws_t ctl; /* host: a scheme's per-run tables sized by P (BP's ranges and counts,
			 OmniReduce's counts, SparDL's blocks, histogram and records) */
	/* host: AGsparse's per-rank list states and slice views */
	scd_ws_t htab;
	uint32_t rounds;
	double xchg_s;	     /* this run's time inside exchanges */
	sc_status_t work_st; /* the failure of work overlapped with an exchange */

	/* shared workspaces (device memory: scd_scheme_ctx_create sets their dev) */
	scd_ws_t lidx, lval; /* the local contribution as COO */
	scd_ws_t sendbuf, recvbuf;
	scd_ws_t sendbuf2; /* a next phase's messages, built while sendbuf is on the wire */
	scd_ws_t aidx, aval, bidx; /* merge lists, selections */
	scd_ws_t fscratch;	   /* small per-run tables (SparDL), OmniReduce's aggregate */
	scd_coo_t local;	   /* view of lidx/lval or io->coo */
	/* sparse results: AGsparse's merge target (its input may be io->out's arrays), the
	 * merge's scratch, and whether the scheme filled io->out itself */
	scd_ws_t ridx, rval, sidx, sval;
	int res_ready;
	/* the last dense result's statistics (sampled, see result_stats) */
	uint64_t stat_union;
	double stat_skew;

	/* Balanced Parallelism */
	const scd_partmap_t *map;
	scd_ws_t hidx, hval;
	uint64_t *hoff; /* [P + 1] */
	scd_ws_t bp_agg,
	    bp_touch; /* the server's aggregate and its marks (zero between runs) */
	int bp_dirty; /* a run stopped before clearing them */
	/* ExDyna */
	scd_exdyna_t *ex;
	/* SparDL */
	scd_spardl_state_t sd;
	/* residual tracking (io->track_residual): indices added to, and whether complete */
	scd_ws_t rtouch;
	uint64_t n_rtouch;
	int rtrack, rtouch_ok;
	/* residual additions queued this run (rq_idx/rq_val), the first rq_done written */
	float *rq_res;
	scd_ws_t rq_idx, rq_val;
	uint64_t rq_n, rq_done;
	/* staging through host memory, for a device whose memory the transport cannot
	 * touch (scd_device_host_memory): the bytes of one exchange or allreduce, and the
	 * staged transfer lists */
	void *stage;
	size_t stage_cap;
	scd_ws_t stx;
	scd_stage_chunk_t late[SCD_STAGE_CHUNKS]; /* sends held back until released */
	int n_late;
	/* S2 */
	uint64_t last_union;
	uint32_t teams_used;
	uint32_t bsag_teams; /* SparDL's report of the previous B-SAG run (scheme.h) */
	double bsag_hl;
	/* HC: this rank's gamma at each doubling level of its last run (hc_m[i] tensors in
	 * its aggregate, 0: none), and the ranks' means from the metadata round (report) */
	uint32_t hc_m[SCD_GAMMA_PTS];
	double hc_g[SCD_GAMMA_PTS];
	uint32_t gamma_pts;
	uint32_t gamma_m[SCD_GAMMA_PTS];
	double gamma_at[SCD_GAMMA_PTS];
	double imbalance;
};

/*
 * A lossy scheme's residual additions (residual[i] += v for what a selection discarded)
 * are queued, not written at once: they are random accesses into a tensor-sized array,
 * about as slow per value as the wire, and need not be done before anything is sent. The
 * queue is written, in the order it was filled (so the sums have the bits of immediate
 * writes), while the scheme's next scd_scheme_xchg_v waits on the network, and whatever
 * is left when the scheme returns. The queue lives in the device's memory and grows by
 * whole lists: scd_res_reserve makes room for n more entries (a scheme that appends them
 * with its own op advances c->rq_n), scd_res_queue appends a list, each value times share.
 */
sc_status_t scd_res_reserve(scd_scheme_ctx_t *c, uint64_t n);
sc_status_t scd_res_queue(scd_scheme_ctx_t *c, const uint32_t *idx, const float *val,
			  uint64_t n, float share);

/* Records an error message for scd_scheme_error() and logs it; returns st. */
sc_status_t scd_scheme_fail(sc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Transport wrappers: sync the device (its failure is the call's), count a round, record
 * the transport's error. Zero transfers: no-op. */
sc_status_t scd_scheme_xchg(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			    const scd_xfer_t *r, int nr);
sc_status_t scd_scheme_xchg_v(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			      const scd_xfer_t *r, int nr, size_t *rb);
sc_status_t scd_scheme_allreduce(scd_scheme_ctx_t *c, float *data, size_t n);
/* The same ring for any dtype (integers wrap around: adding zeros moves bits exactly). */
sc_status_t scd_scheme_allreduce_typed(scd_scheme_ctx_t *c, void *data, size_t n,
				       sc_dtype_t dtype);
/* exchange_v with w's work overlapped (transport.h), then what is left of the work. The
 * work reports its failures through scd_scheme_work_fail, which this returns as is. */
sc_status_t scd_scheme_xchg_vw(scd_scheme_ctx_t *c, const scd_xfer_t *s, int ns,
			       const scd_xfer_t *r, int nr, size_t *rb,
			       const scd_xfer_work_t *w);
/* scd_scheme_fail for overlapped work: also remembers st for scd_scheme_xchg_vw. */
sc_status_t scd_scheme_work_fail(scd_scheme_ctx_t *c, sc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * The metadata round: sends (scheme, numel, step, nnz, parts[nparts]) to every peer and
 * receives theirs; fills c->nnz, c->total_nnz, c->max_nnz, c->parts and c->nparts
 * (nparts <= P x SCD_CHUNKS_MAX: per partition, or per partition and chunk; or up to
 * SCD_META_HIST_MAX: a histogram of the indices).
 */
#define SCD_META_HIST_MAX 1024
sc_status_t scd_scheme_meta(scd_scheme_ctx_t *c, scd_scheme_t s, uint64_t nnz,
			    const uint64_t *parts, uint32_t nparts);

/* The contribution as COO in c->local (io->coo itself, or the scan of io->data). */
sc_status_t scd_scheme_local_coo(scd_scheme_ctx_t *c, const scd_scheme_io_t *io);
/* Both of the above for a scheme whose metadata is the non-zero count alone. */
sc_status_t scd_scheme_local_meta(scd_scheme_ctx_t *c, const scd_scheme_io_t *io,
				  scd_scheme_t s);
/* Non-zeros of the contribution (counts io->data when there is no COO). */
uint64_t scd_scheme_local_nnz(const scd_scheme_ctx_t *c, const scd_scheme_io_t *io);
/* Makes io->data hold the contribution densely (scatters io->coo into it). */
void scd_scheme_densify(scd_scheme_ctx_t *c, const scd_scheme_io_t *io);

/* Whether the result can be built as COO of up to `bound` entries (io->out fits it). */
static inline int scd_scheme_sparse_out(const scd_scheme_io_t *io, uint64_t bound)
{
	return io->out && io->coo && bound <= io->out->cap;
}
/* Merges n ascending COO lists into dst (which must not overlap them, and must have room
 * for their total length): the union of the indices, each value summed over the lists in
 * list order (rank order: the bits of a dense scatter-add in that order). Lists that are
 * not ascending give a wrong but bounded result. */
sc_status_t scd_scheme_merge_result(scd_scheme_ctx_t *c, const scd_coo_t *lists, int n,
				    scd_coo_t *dst);
/* The same merge a list at a time (as lists arrive): begin with the number of lists n and
 * their total length, then add each in order; dst->nnz is set by the n-th add. Uses
 * c->sidx/sval as scratch, so one merge at a time per context. */
typedef struct scd_merge {
	const scd_device_ops_t *dev;
	scd_coo_t *dst;
	uint32_t *ai, *bi;
	float *av, *bv;
	uint64_t m, total;
	int left, first_done;
} scd_merge_t;
sc_status_t scd_scheme_merge_begin(scd_scheme_ctx_t *c, scd_merge_t *mg, scd_coo_t *dst, int n,
				   uint64_t total);
sc_status_t scd_scheme_merge_add(scd_merge_t *mg, const scd_coo_t *l);

/* Top-k by magnitude of a COO list (n entries, ascending indices), kept in place at the
 * front in index order; ties at the k-th magnitude go to the lowest indices, so the same
 * input gives the same selection on every rank. Returns the number kept (min(k, n)).
 * Entries that are not kept move to [kept, n), in index order (tmp_*: scratch of n). */
uint64_t scd_scheme_topk_coo(const scd_device_ops_t *dev, uint32_t *idx, float *val, uint64_t n,
			     uint64_t k, uint32_t *tmp_idx, float *tmp_val);

/* Sparse messages of AGsparse and HC: COO, bitmap or runs, whichever is smallest, 8-byte
 * header. src, buf and the decoded lists are dev's memory. */
uint64_t scd_scheme_msg_bytes(uint64_t numel, uint64_t nnz);
sc_status_t scd_scheme_msg_encode(const scd_device_ops_t *dev, const scd_coo_t *src,
				  uint64_t numel, void *buf, uint64_t cap, uint64_t *bytes_p);
/* Decodes a message from a peer to a COO view: zero-copy for COO messages, into (widx,
 * wval) for bitmaps and runs. SC_ERR_PROTOCOL (scd_scheme_error names the cause) for a
 * malformed message: an index at or past numel, indices not strictly ascending, more than
 * max entries (the room in widx and wval), or a length the format does not fit. */
sc_status_t scd_scheme_msg_decode(const scd_device_ops_t *dev, const void *buf, uint64_t bytes,
				  uint64_t numel, uint64_t max, uint32_t *widx, float *wval,
				  scd_coo_t *out);

/* ---- streamed lists (AGsparse, HC) ---- */
#define SCD_CHUNKS_MAX 16
/* Chunks a list of up to n entries travels in: one per cfg.stream_chunk, 1..16. */
static inline uint32_t scd_scheme_chunks(const scd_scheme_ctx_t *c, uint64_t n)
{
	uint64_t min = c->cfg.stream_chunk;
	if (n < 2 * min)
		return 1;
	return n / min > SCD_CHUNKS_MAX ? SCD_CHUNKS_MAX : (uint32_t)(n / min);
}
/* Entries before chunk k of a list of n entries in K chunks. */
static inline uint64_t scd_chunk_lo(uint64_t n, uint32_t K, uint32_t k)
{
	return n * k / K;
}
/* Room a message takes in a send or receive buffer: 8-aligned (the arrays it holds). */
static inline uint64_t scd_slot8(uint64_t bytes)
{
	return (bytes + 7) & ~(uint64_t)7;
}
/* Work overlapped with an exchange clears a dense result ahead in slices of this many
 * floats (1 MiB), through the device: *done grows towards len; 1 if it cleared a slice. */
#define SCD_CLEAR_SLICE (1u << 18)
static inline int scd_clear_slice(const scd_device_ops_t *dev, float *p, uint64_t len,
				  uint64_t *done)
{
	if (*done >= len)
		return 0;
	uint64_t n = len - *done < SCD_CLEAR_SLICE ? len - *done : SCD_CLEAR_SLICE;
	dev->clear(p + *done, 4 * n);
	*done += n;
	return 1;
}

/* Decodes a message onto the end of list, within its room (list->cap); *added_p: its
 * entries. A message that does not fit, or is malformed, leaves list as it was. */
sc_status_t scd_scheme_msg_append(const scd_device_ops_t *dev, const void *buf, uint64_t bytes,
				  uint64_t numel, scd_coo_t *list, uint64_t *added_p);

/* The schemes themselves are their files' descriptors (scheme/registry.h). */

/* SparDL's team count for this run (cfg, else scd_spardl_pick_teams on the context's
 * measurements); call once per run. */
uint32_t scd_scheme_spardl_teams(scd_scheme_ctx_t *c, double density);

#endif
