/*
 * transport.h: bytes between daemons (layer 2). One ops table per backend (tcp here; the
 * registry's nccl slot takes the GPU nodes' backend, which fills the same table), filled with
 * designated initializers, reached through a registry indexed by scd_transport_kind_t
 * (scd_transport_get; scd_transport_lookup for a configured name) and the inline wrappers
 * below. A backend that is not built reports SC_ERR_UNSUPPORTED. Nothing outside transport/
 * names a backend: the daemon picks one by the `transport` key and handles its endpoint and
 * bootstrap blobs as opaque values.
 *
 * Forming a transport takes two steps around world formation (docs/design.md):
 *   1. prepare, before the world forms: the backend opens this rank's endpoint (tcp: the
 *      listening socket) and describes it in an opaque bootstrap blob (tcp: address and
 *      port) of at most SCD_TRANSPORT_BLOB_MAX bytes;
 *   2. world formation carries every rank's blob, with the backend's name, to every rank
 *      (a rank whose backend differs is refused, naming it); create then builds the mesh
 *      from this rank's endpoint and every rank's blob (scd_transport_boot_t).
 *
 * A transport is a full mesh between the P daemons of a world, built once the world has
 * formed, and used by one thread at a time (the engine). Every call has a timeout and on
 * failure leaves a message in scd_transport_error() that names the peer rank and the cause
 * (e.g. "rank 2: connection reset by peer", "rank 3: no data for 30000 ms"). A backend
 * logs each failure once, where it detects it; callers pass the status up without logging
 * it again.
 *
 * Memory: the buffers an exchange or an allreduce names (scd_xfer_t.buf, data) live in the
 * memory of the buffer's device (device/device.h): host memory for the cpu device, GPU
 * memory for a cuda one. The tcp backend reads and writes host memory: it serves the cpu
 * device, and a GPU buffer reaches it staged through pinned host memory by its caller
 * (scheme.c, the engine). The nccl backend (device_memory = 1) takes the cuda device's
 * pointers as they are and queues its work on the device's stream behind the device's
 * own, so the caller need not sync the device first; the data is final when the call
 * returns, for either. Lengths (scd_xfer_t.bytes, recv_bytes_p), the work callback and
 * the probe's results are host values.
 *
 * Operations are blocking from the caller's view but never spin: the tcp backend
 * multiplexes all the sockets of one operation in poll(2), so the sends and receives of an
 * exchange progress together and a slow peer does not serialise the others behind it.
 */
#ifndef SCD_TRANSPORT_TRANSPORT_H
#define SCD_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

typedef struct scd_transport scd_transport_t;

/* One transfer of an exchange: bytes to send to / receive from peer. A receive whose
 * size the receiver does not know uses scd_transport_exchange_v. */
typedef struct scd_xfer {
	int peer;
	void *buf;
	size_t bytes;
} scd_xfer_t;

/*
 * Work that runs while an exchange_v waits on the network (computation overlapped with
 * communication). fn is called whenever no socket has anything to move and after bytes
 * arrived; it does a bounded slice (about a millisecond) and returns 1 while it has more
 * it can do now, 0 when it must wait for more receives, or a negative sc_status_t to abort
 * the exchange (its message is the caller's to record). While the exchange runs,
 * recv_bytes_p[i] of a receive that has not completed reads SCD_XFER_PENDING; a completed
 * receive's bytes are final. What is left when the exchange completes is the caller's.
 * A send whose bytes read SCD_XFER_PENDING (its buf already set, not to this rank) is
 * held back, and so are the sends after it to the same peer, until the work writes its
 * length into the caller's list: a later phase that depends on received data can share
 * the exchange with the phase it depends on. An exchange whose work waits with a send
 * held back and nothing left to receive fails (SC_ERR_INVALID).
 */
#define SCD_XFER_PENDING SIZE_MAX
typedef struct scd_xfer_work {
	int (*fn)(void *arg);
	void *arg;
} scd_xfer_work_t;

/* Byte counters since creation (the engine takes differences around an operation). */
typedef struct scd_transport_counters {
	uint64_t bytes_sent;
	uint64_t bytes_recv;
	uint64_t messages_sent;
} scd_transport_counters_t;

/* ---- backends and world formation ------------------------------------------------------ */

/* The backends, in the registry's order. */
typedef enum {
	SCD_TRANSPORT_TCP = 0,
	SCD_TRANSPORT_NCCL,
	SCD_TRANSPORT_COUNT
} scd_transport_kind_t;

/* Largest bootstrap blob of any backend (an NCCL unique id is 128 bytes). */
#define SCD_TRANSPORT_BLOB_MAX 512

/* What prepare takes from the configuration. */
typedef struct scd_transport_cfg {
	const char *addr;      /* address to bind (the data_addr key) */
	const char *advertise; /* address to announce (world/addr.h; NULL: addr) */
	uint16_t port;	       /* port to bind, 0: any free one (the data_port key) */
	int rank;	       /* this rank (nccl: rank 0's blob is the communicator's id) */
} scd_transport_cfg_t;

/* One rank's bootstrap blob, as world formation delivered it. */
typedef struct scd_transport_blob {
	const void *data;
	size_t len;
} scd_transport_blob_t;

/* This rank's endpoint, opened by prepare before the world forms. Every backend's
 * endpoint starts with this; blob is what every other rank receives. */
typedef struct scd_transport_endpoint {
	const struct scd_transport_ops *ops;
	unsigned char blob[SCD_TRANSPORT_BLOB_MAX];
	size_t blob_len;
} scd_transport_endpoint_t;

/* What create builds a mesh from: this rank's endpoint and every rank's blob (blobs[rank]
 * is this endpoint's own), gathered by world formation. scd_transport_boot_init and
 * _set_blob fill one with copies of the blobs; scd_transport_boot_clear frees it. */
typedef struct scd_transport_boot {
	scd_transport_endpoint_t *ep; /* owned; create consumes it and sets it to NULL */
	int rank, size;
	uint64_t world_id;	     /* shared by every rank of the world */
	scd_transport_blob_t *blobs; /* [size], by rank */
	/* the key each connection proves it holds (tcp: tcp_auth.h), derived from the job
	 * secret (util/secret.h); all zeros without one. Set after scd_transport_boot_init. */
	uint8_t auth_key[32];
	/* data_protection (tcp: tcp_seal.h's scd_seal_mode_t; 0, none, by default): the same
	 * on every rank, and anything but none needs a job secret */
	int protect;
} scd_transport_boot_t;

typedef struct scd_transport_ops {
	const char *name;
	/* 1: moves the cuda device's memory itself (NCCL); 0: host memory only (tcp), a GPU
	 * buffer is staged through host memory by the caller */
	int device_memory;

	/* -- world formation (no transport exists yet) -- */
	/* Opens this rank's endpoint and fills its bootstrap blob (tcp: binds cfg->addr,
	 * cfg->port and describes cfg->advertise and the bound port). */
	sc_status_t (*prepare)(const scd_transport_cfg_t *cfg, scd_transport_endpoint_t **ep_p);
	/* Builds the mesh of b->size ranks from b's endpoint and blobs within timeout_ms (the
	 * slowest rank included); scratch_bytes sizes the backend's collective scratch (0:
	 * its default). Consumes b->ep, also on failure. */
	sc_status_t (*create)(scd_transport_boot_t *b, size_t scratch_bytes, int timeout_ms,
			      scd_transport_t **t_p);
	/* Closes an endpoint that no transport was created from. */
	void (*release)(scd_transport_endpoint_t *ep);
	/* Checks a rank's blob (SC_ERR_PROTOCOL when malformed) and says where it points, for
	 * status and logs: an address into addr (unless addr_len is 0) and a port (0 where
	 * the backend has none). */
	sc_status_t (*describe)(const void *blob, size_t len, char *addr, size_t addr_len,
				uint16_t *port_p);

	/* -- a formed transport -- */
	/* Sends every sends[i] and receives every recvs[i] concurrently; returns when all are
	 * done. A peer may appear in both lists and several times (in order). */
	sc_status_t (*exchange)(scd_transport_t *t, const scd_xfer_t *sends, int n_sends,
				const scd_xfer_t *recvs, int n_recvs, int timeout_ms);
	/* Like exchange, but each message carries its length: recvs[i].buf is a buffer of
	 * capacity recvs[i].bytes and recv_bytes_p[i] gets the length received (SC_ERR_LIMIT
	 * when a message is larger than the buffer). work (optional) runs while it waits. */
	sc_status_t (*exchange_v)(scd_transport_t *t, const scd_xfer_t *sends, int n_sends,
				  const scd_xfer_t *recvs, int n_recvs, size_t *recv_bytes_p,
				  const scd_xfer_work_t *work, int timeout_ms);
	/* In-place sum allreduce of n float32 (ring reduce-scatter + allgather, pipelined in
	 * pieces through the transport's own preallocated scratch; any n, including n < P). */
	sc_status_t (*allreduce_f32)(scd_transport_t *t, float *data, size_t n, int timeout_ms);
	/* The same ring for n elements of any dtype, reduced by op: SC_OP_SUM (and
	 * SC_OP_AVERAGE, which the caller divides afterwards) sums floats in their own
	 * precision and integers with two's-complement wrap-around (no overflow trap);
	 * SC_OP_MIN, SC_OP_MAX and SC_OP_PRODUCT as sparsecomm.h defines them (device/reduce.h
	 * on the host). Every rank receives bit-identical results. An element is never split
	 * across two reductions. SC_ERR_INVALID for an unknown dtype or op. work (optional)
	 * runs while it waits, as for exchange_v (nccl leaves it to the caller: NCCL's work
	 * is queued on the device's stream, and the work's would wait behind it). */
	sc_status_t (*allreduce)(scd_transport_t *t, void *data, size_t n, sc_dtype_t dtype,
				 sc_reduce_op_t op, const scd_xfer_work_t *work,
				 int timeout_ms);
	/* The sum of n float32 over a 16-bit wire (wire SC_WIRE_FP16 or SC_WIRE_BF16,
	 * sparsecomm.h's sc_wire_t): each value travels narrowed and is summed in float32 on
	 * arrival; every rank receives the same bits, each a 16-bit value. Optional: a backend
	 * without it (nccl) keeps float32 on the wire, and its callers say so. */
	sc_status_t (*allreduce_wire16)(scd_transport_t *t, float *data, size_t n,
					uint32_t wire, const scd_xfer_work_t *work,
					int timeout_ms);
	/* Barrier-like latency and bandwidth probe with every peer: alpha (s per message)
	 * and beta (s per byte), the median over the peers of several ping-pongs of 8 B and
	 * of probe_bytes. Every rank must call it together. */
	sc_status_t (*measure)(scd_transport_t *t, size_t probe_bytes, double *alpha_s_p,
			       double *beta_s_per_byte_p, int timeout_ms);
	/* A view of the mesh for a process set: the n ranks of ranks (t's ranks, ascending,
	 * this rank among them) as a transport of their own, ranked by their index in
	 * ranks, over t's connections (shared: destroying the view closes nothing, and it
	 * must be destroyed before t). Every operation above runs on it among those ranks
	 * only, and its counters count its own traffic. A failure on a view fails t too
	 * (their byte streams are the same), and t's failure and gone peers reach the view.
	 * Optional: a backend without it (nccl) answers SC_ERR_UNSUPPORTED through
	 * scd_transport_subgroup. */
	sc_status_t (*subgroup)(scd_transport_t *t, const int *ranks, int n,
				scd_transport_t **view_p);
	void (*counters)(const scd_transport_t *t, scd_transport_counters_t *c_p);
	void (*destroy)(scd_transport_t *t);
	/* From any thread: rank has gone from the world (the coordinator channel found it
	 * lost or leaving). A call waiting on it ends as if its connection had closed, naming
	 * it, and so do later ones. Optional: without it such a call ends at its timeout. */
	void (*peer_gone)(scd_transport_t *t, int rank);
	/* From the thread that uses t: 1 once a call failed and left the byte streams out
	 * of step, so that every later call fails (a view's failure is its mesh's); only a
	 * new mesh serves again. Optional: without it, 0. */
	int (*broken)(const scd_transport_t *t);
} scd_transport_ops_t;

/* A process set's view of the mesh (the engine's, engine/psview.h) has this bit in its
 * serial, and the rest from its set and nodes: the same on every member. */
#define SCD_SERIAL_VIEW (1ull << 62)

/* Every backend's object starts with this. */
struct scd_transport {
	const scd_transport_ops_t *ops;
	int rank;
	int size;
	uint64_t serial; /* set by its owner, the same on every rank (gpunet numbers the
			  * communicators it makes); 0 by default */
};

/* The last error of this thread's transport calls ("" if none). */
const char *scd_transport_error(void);

static inline sc_status_t scd_transport_exchange(scd_transport_t *t, const scd_xfer_t *s,
						 int ns, const scd_xfer_t *r, int nr, int tmo)
{
	return t->ops->exchange(t, s, ns, r, nr, tmo);
}
static inline sc_status_t scd_transport_exchange_v(scd_transport_t *t, const scd_xfer_t *s,
						   int ns, const scd_xfer_t *r, int nr,
						   size_t *rb, int tmo)
{
	return t->ops->exchange_v(t, s, ns, r, nr, rb, NULL, tmo);
}
static inline sc_status_t scd_transport_exchange_vw(scd_transport_t *t, const scd_xfer_t *s,
						    int ns, const scd_xfer_t *r, int nr,
						    size_t *rb, const scd_xfer_work_t *w,
						    int tmo)
{
	return t->ops->exchange_v(t, s, ns, r, nr, rb, w, tmo);
}
static inline sc_status_t scd_transport_allreduce_f32(scd_transport_t *t, float *d, size_t n,
						      int tmo)
{
	return t->ops->allreduce_f32(t, d, n, tmo);
}
static inline sc_status_t scd_transport_allreduce(scd_transport_t *t, void *d, size_t n,
						  sc_dtype_t dtype, sc_reduce_op_t op, int tmo)
{
	return t->ops->allreduce(t, d, n, dtype, op, NULL, tmo);
}
static inline sc_status_t scd_transport_allreduce_w(scd_transport_t *t, void *d, size_t n,
						    sc_dtype_t dtype, sc_reduce_op_t op,
						    const scd_xfer_work_t *w, int tmo)
{
	return t->ops->allreduce(t, d, n, dtype, op, w, tmo);
}
/* t's view of the n ranks of ranks (see the ops' subgroup); SC_ERR_UNSUPPORTED, with
 * scd_transport_error() naming the backend, for a backend without views. */
sc_status_t scd_transport_subgroup(scd_transport_t *t, const int *ranks, int n,
				   scd_transport_t **view_p);
static inline int scd_transport_broken(const scd_transport_t *t)
{
	return t && t->ops->broken ? t->ops->broken(t) : 0;
}
static inline void scd_transport_destroy(scd_transport_t *t)
{
	if (t)
		t->ops->destroy(t);
}

static inline sc_status_t scd_transport_prepare(const scd_transport_ops_t *ops,
						const scd_transport_cfg_t *cfg,
						scd_transport_endpoint_t **ep_p)
{
	return ops->prepare(cfg, ep_p);
}
static inline sc_status_t scd_transport_create(scd_transport_boot_t *b, size_t scratch_bytes,
					       int timeout_ms, scd_transport_t **t_p)
{
	return b->ep->ops->create(b, scratch_bytes, timeout_ms, t_p);
}
static inline void scd_transport_release(scd_transport_endpoint_t *ep)
{
	if (ep)
		ep->ops->release(ep);
}

/* ---- the registry ------------------------------------------------------------------- */

const char *scd_transport_kind_name(scd_transport_kind_t kind);
/* The ops of a backend, or SC_ERR_UNSUPPORTED when it is not built here. */
sc_status_t scd_transport_get(scd_transport_kind_t kind, const scd_transport_ops_t **ops_p);
/* The backend a configured name selects: a backend's name, or "auto" (tcp). The mesh of
 * a world is always tcp (it carries host memory and the engine's control rounds); the
 * `transport` key chooses what GPU buffers use (engine/gpunet.h). SC_ERR_UNSUPPORTED for
 * an unknown name or a backend not built here, with scd_transport_error() naming it. */
sc_status_t scd_transport_lookup(const char *name, const scd_transport_ops_t **ops_p);

/* Sets up b for a world of size ranks around this rank's endpoint ep (taken over), with
 * blobs[rank] = ep's blob and the others empty; SC_ERR_NOMEM leaves ep with the caller. */
sc_status_t scd_transport_boot_init(scd_transport_boot_t *b, scd_transport_endpoint_t *ep,
				    int rank, int size, uint64_t world_id);
/* Stores a copy of rank's blob (SC_ERR_LIMIT above SCD_TRANSPORT_BLOB_MAX). */
sc_status_t scd_transport_boot_set_blob(scd_transport_boot_t *b, int rank, const void *data,
					size_t len);
/* Frees the copies and releases an endpoint that create did not consume. */
void scd_transport_boot_clear(scd_transport_boot_t *b);

#endif
