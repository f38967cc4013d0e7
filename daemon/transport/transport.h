/*
 * transport.h: bytes between daemons (layer 2). One ops table per backend (tcp here; nccl
 * on GPU nodes, a later issue), reached through the inline wrappers below.
 *
 * A transport is a full mesh between the P daemons of a world, built once the world has
 * formed, and used by one thread at a time (the engine). Every call has a timeout and on
 * failure leaves a message in scd_transport_error() that names the peer rank and the cause
 * (e.g. "rank 2: connection reset by peer", "rank 3: no data for 30000 ms").
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

typedef struct scd_transport_ops {
	const char *name;
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
	/* The same ring for n elements of any dtype: floats are summed in their own precision,
	 * integers with two's-complement wrap-around (no overflow trap). An element is never
	 * split across two reductions. SC_ERR_INVALID for an unknown dtype. work (optional)
	 * runs while it waits, as for exchange_v. */
	sc_status_t (*allreduce)(scd_transport_t *t, void *data, size_t n, sc_dtype_t dtype,
				 const scd_xfer_work_t *work, int timeout_ms);
	/* Barrier-like latency and bandwidth probe with every peer: alpha (s per message)
	 * and beta (s per byte), the median over the peers of several ping-pongs of 8 B and
	 * of probe_bytes. Every rank must call it together. */
	sc_status_t (*measure)(scd_transport_t *t, size_t probe_bytes, double *alpha_s_p,
			       double *beta_s_per_byte_p, int timeout_ms);
	void (*counters)(const scd_transport_t *t, scd_transport_counters_t *c_p);
	void (*destroy)(scd_transport_t *t);
} scd_transport_ops_t;

/* Every backend's object starts with this. */
struct scd_transport {
	const scd_transport_ops_t *ops;
	int rank;
	int size;
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
						  sc_dtype_t dtype, int tmo)
{
	return t->ops->allreduce(t, d, n, dtype, NULL, tmo);
}
static inline sc_status_t scd_transport_allreduce_w(scd_transport_t *t, void *d, size_t n,
						    sc_dtype_t dtype,
						    const scd_xfer_work_t *w, int tmo)
{
	return t->ops->allreduce(t, d, n, dtype, w, tmo);
}
static inline void scd_transport_destroy(scd_transport_t *t)
{
	if (t)
		t->ops->destroy(t);
}

/* ---- tcp backend ------------------------------------------------------------------- */

/* Opens the data-plane listening socket before the world forms, so that its port can be
 * announced in Join. port 0 picks a free port; *port_p gets the bound port. */
sc_status_t scd_tcp_listen(const char *bind_addr, uint16_t port, int *fd_p, uint16_t *port_p);

/*
 * Builds the mesh: connects to every lower rank (addrs[r], ports[r]) and accepts every
 * higher rank on listen_fd (each connection opens with a hello of (world_id, rank), and a
 * connection with another world_id or a duplicate rank is refused). TCP_NODELAY, large
 * socket buffers, and a scratch of scratch_bytes preallocated and pre-faulted for the
 * ring. Takes ownership of listen_fd (closed once the mesh is complete).
 */
sc_status_t scd_tcp_create(int listen_fd, int rank, int size, const char *const *addrs,
			   const uint16_t *ports, uint64_t world_id, size_t scratch_bytes,
			   int timeout_ms, scd_transport_t **t_p);

#endif
