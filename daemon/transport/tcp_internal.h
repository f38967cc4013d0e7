/*
 * tcp_internal.h: the tcp backend's object, shared by tcp.c (mesh), tcp_exchange.c
 * (exchange, probe) and tcp_ring.c (the pipelined ring allreduce). Not seen outside
 * daemon/transport/.
 */
#ifndef SCD_TRANSPORT_TCP_INTERNAL_H
#define SCD_TRANSPORT_TCP_INTERNAL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/tcp.h"
#include "transport/tcp_auth.h"
#include "transport/tcp_seal.h"
#include "transport/transport.h"

/* The ring receives at most this many bytes per recv(2) before it reduces them, so the
 * reduced data reaches the next send quickly and the scratch stays in cache. */
#define SCD_TCP_PIECE_BYTES (256u << 10)
/* Scratch size when the caller passes 0, and the smallest one used. */
#define SCD_TCP_SCRATCH_DEFAULT_BYTES (4u << 20)
#define SCD_TCP_SCRATCH_MIN_BYTES     (64u << 10)
/* How long an operation waits without progress once some peer has closed its connection
 * (at most its own timeout): a peer that left breaks the world, so there is no point in
 * waiting out a long timeout for the ranks that depend on it. */
#define SCD_TCP_GRACE_MS 1000

/* Per-peer progress of one exchange: the current message in the caller's lists (-1 when
 * nothing is left for that peer) and the bytes of it moved, the 8-byte length header of
 * exchange_v included. */
typedef struct scd_tcp_io {
	int s_idx;
	int r_idx;
	size_t s_off;
	size_t r_off;
	uint64_t r_len;
	unsigned char r_hdr[8];
} scd_tcp_io_t;

typedef struct scd_tcp {
	scd_transport_t base;
	int *fds; /* socket per rank, -1 for this rank */
	uint64_t world_id;
	uint8_t auth_key[SCD_TCP_AUTH_KEY_BYTES]; /* of the handshake (tcp_auth.h) */
	/* data_protection, and the record layer of each peer's connection (tcp_seal.h):
	 * NULL for this rank and with data_protection = none */
	scd_seal_mode_t protect;
	scd_seal_t **seal;
	unsigned char *scratch; /* mmap'd and pre-faulted at creation */
	size_t scratch_bytes;
	scd_transport_counters_t ctr;
	/* Preallocated per-call state, one entry per rank: no allocation on the data path. */
	struct pollfd *pfds;
	int *pfd_peer;
	scd_tcp_io_t *io;
	/* Peers whose connection closed (seen by a hangup watch), the first of them, and
	 * when: an operation that then stops progressing blames it after
	 * SCD_TCP_GRACE_MS, instead of waiting for its full timeout. */
	unsigned char *gone;
	unsigned char *listed; /* scratch marks of scd_tcp_watch_others */
	int suspect;
	/* The first failure of an operation leaves the byte streams out of step: every later
	 * call fails at once with this status and text. */
	sc_status_t failed;
	char failed_text[256];
	/* the ring's 16-bit copy of a buffer that travels as 16 bits (tcp_ring.c) */
	uint16_t *wire16;
	size_t wire16_cap;
	/* A view (tcp_view.c): the mesh whose connections it uses (fds and seal are the
	 * parent's, not owned), and the parent's rank of each of its ranks, which its errors
	 * name; both NULL for a mesh. */
	struct scd_tcp *parent;
	int *names;
} scd_tcp_t;

/* The rank that errors name for peer p of t: the mesh's rank, also on a view. */
static inline int scd_tcp_name(const scd_tcp_t *t, int p)
{
	return t->names && p >= 0 ? t->names[p] : p;
}

/* At the start of an operation: a view takes the failure and the gone peers its parent
 * has seen (its byte streams are the parent's). Returns the status of an earlier failure
 * (then scd_transport_error() repeats it), or SC_OK. */
sc_status_t scd_tcp_begin(scd_tcp_t *t);

/* Monotonic clock in milliseconds. */
int64_t scd_tcp_now_ms(void);
/* The poll(2) timeout left when the last progress was at last_ms: -1 for no timeout
 * (timeout_ms < 0), 0 once it has run out. */
int scd_tcp_poll_ms(int64_t last_ms, int timeout_ms);
/* Records a failure of an operation: sets the error text, logs it and marks the transport
 * unusable. Returns status. */
sc_status_t scd_tcp_fail(scd_tcp_t *t, sc_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The status and text of an earlier failure, repeated for a later call. */
sc_status_t scd_tcp_failed_again(scd_tcp_t *t);
/* Fails for the send or recv (what) on peer's connection that returned -1 with errno: a
 * record that failed its check names the peer as the source of bad data. */
sc_status_t scd_tcp_fail_io(scd_tcp_t *t, int peer, const char *what);
/* Fails for an error condition reported by poll(2) on peer's socket (SO_ERROR, or an
 * orderly close when there is none). */
sc_status_t scd_tcp_fail_hangup(scd_tcp_t *t, int peer);

/* Appends to t->pfds / t->pfd_peer (whose first n entries the operation filled) a
 * hangup watch on every other peer that has not gone; returns the new count. */
int scd_tcp_watch_others(scd_tcp_t *t, int n);
/* Marks as gone the peers whose watch entries in [from, n) report a hangup (the first
 * becomes the suspect) and returns 1 when there was any. */
int scd_tcp_note_hangups(scd_tcp_t *t, int from, int n);
/* The inactivity timeout of an operation: timeout_ms, cut to SCD_TCP_GRACE_MS once a
 * peer has gone. */
int scd_tcp_op_timeout(const scd_tcp_t *t, int timeout_ms);
/* Fails an operation that stopped progressing after a peer had gone. */
sc_status_t scd_tcp_fail_stalled(scd_tcp_t *t, int ms);

sc_status_t scd_tcp_exchange(scd_transport_t *tr, const scd_xfer_t *sends, int ns,
			     const scd_xfer_t *recvs, int nr, int timeout_ms);
sc_status_t scd_tcp_exchange_v(scd_transport_t *tr, const scd_xfer_t *sends, int ns,
			       const scd_xfer_t *recvs, int nr, size_t *recv_bytes_p,
			       const scd_xfer_work_t *work, int timeout_ms);
sc_status_t scd_tcp_measure(scd_transport_t *tr, size_t probe_bytes, double *alpha_s_p,
			    double *beta_s_per_byte_p, int timeout_ms);
sc_status_t scd_tcp_allreduce_f32(scd_transport_t *tr, float *data, size_t n, int timeout_ms);
sc_status_t scd_tcp_allreduce_wire16(scd_transport_t *tr, float *data, size_t n, uint32_t wire,
				     const scd_xfer_work_t *work, int timeout_ms);
sc_status_t scd_tcp_allreduce(scd_transport_t *tr, void *data, size_t n, sc_dtype_t dtype,
			      sc_reduce_op_t op, const scd_xfer_work_t *work, int timeout_ms);
sc_status_t scd_tcp_subgroup(scd_transport_t *tr, const int *ranks, int n,
			     scd_transport_t **view_p);
/* A view's part of a failure: the parent is marked failed with the same text (the byte
 * streams it shares are out of step). */
void scd_tcp_view_failed(scd_tcp_t *t);
/* A view's part of a hangup: the parent marks the peer gone too. */
void scd_tcp_view_gone(scd_tcp_t *t, int p);

#endif
