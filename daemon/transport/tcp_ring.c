/*
 * tcp_ring.c: in-place allreduce (sum, min, max, product) over the tcp mesh, by the
 * bandwidth-optimal ring: P - 1 steps of reduce-scatter then P - 1 of allgather, each rank
 * sending one chunk (n / P elements, the first n % P chunks one longer) to its right neighbour
 * and receiving one from its left. Time bound 2(P-1)/P x bytes / goodput. The ring moves bytes;
 * only the reduction knows the dtype (float32, float64, int32, int64; integers wrap around) and
 * the op (device/reduce.h), and the byte streams are cut into whole elements before it. Each
 * chunk is reduced on one rank, in ring order, then copied to the others, so every rank holds
 * the same bits.
 *
 * In global step g (0 <= g < 2(P-1)) rank r sends chunk (r - g) mod P and receives chunk
 * (r - g - 1) mod P: the chunk it sends in step g + 1 is the one it received in step g.
 * So the ring is two continuous byte streams per rank, one out to the right and one in
 * from the left, and the only dependency is that a byte of step g + 1 leaves after the
 * same byte of step g has arrived and been reduced. Steps do not wait for each other:
 * the receive side takes at most SCD_TCP_PIECE_BYTES per recv(2) into the preallocated
 * scratch, reduces that piece into the data at once, and the send side forwards whatever
 * has been reduced, all from one poll(2) loop, so both directions of every link stay busy
 * and the reduction overlaps the transfers. Allgather pieces land straight in the data.
 *
 * Overwriting a chunk in the allgather cannot race its earlier send: the left neighbour
 * can only send a byte of step g after the right neighbour received that byte of step
 * g + 1 - P from this rank, and a byte is sent once send(2) has copied it.
 *
 * A 16-bit wire (float32 data, sparsecomm.h's sc_wire_t) runs the same streams over a
 * 16-bit copy of the data (two bytes an element): a rank narrows its first chunk before
 * the ring starts and each chunk as it reduces it (device/wire16.h), the receiver adds
 * each arriving piece into its float32 data at once, and the owner of a fully reduced
 * chunk rounds its own float32 copy to the 16-bit value it sends on. The allgather lands
 * in the 16-bit copy, is forwarded from there and widened into the data: every rank ends
 * with the same bits, half the bytes on the wire.
 */
#include "transport/tcp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "device/reduce.h"
#include "device/wire16.h"
#include "transport/transport_internal.h"

typedef struct {
	int P, rank, steps;
	size_t base, rem; /* chunk c has base + (c < rem) elements */
	size_t esize;	  /* bytes per element on the wire */
	sc_dtype_t dtype;
	sc_reduce_op_t op;
	uint32_t wire; /* SC_WIRE_NATIVE, or the 16-bit format float32 data travels as */
	char *data;
	char *out; /* what the sends read and the allgather writes: data, or its 16-bit copy */
	/* send side: step and bytes of its chunk sent */
	int sg;
	size_t s_off;
	/* receive side: step, bytes of its chunk received and reduced (or stored), and
	 * the bytes of an incomplete element waiting at the start of the scratch */
	int rg;
	size_t r_off, r_done, carry;
} ring_t;

/* Index of the first element of chunk c. */
static size_t chunk_elem(const ring_t *R, int c)
{
	return (size_t)c * R->base + ((size_t)c < R->rem ? (size_t)c : R->rem);
}

/* Byte offset of chunk c on the wire (in the data too, for the native wire). */
static size_t chunk_first(const ring_t *R, int c)
{
	return chunk_elem(R, c) * R->esize;
}

static size_t chunk_bytes(const ring_t *R, int c)
{
	return (R->base + ((size_t)c < R->rem)) * R->esize;
}

static int send_chunk(const ring_t *R, int g)
{
	return (R->rank + 2 * R->P - g) % R->P;
}

static int recv_chunk(const ring_t *R, int g)
{
	return (R->rank + 2 * R->P - g - 1) % R->P;
}

/* Bytes of the current send step that may leave now. */
static size_t send_limit(const ring_t *R)
{
	size_t full = chunk_bytes(R, send_chunk(R, R->sg));
	if (R->sg == 0 || R->rg >= R->sg)
		return full;
	return R->rg == R->sg - 1 ? R->r_done : 0;
}

/* Skips finished (and empty) steps. */
static void advance(ring_t *R)
{
	while (R->sg < R->steps && R->s_off == chunk_bytes(R, send_chunk(R, R->sg))) {
		R->sg++;
		R->s_off = 0;
	}
	while (R->rg < R->steps && R->r_done == chunk_bytes(R, recv_chunk(R, R->rg))) {
		R->rg++;
		R->r_off = R->r_done = 0;
	}
}

static sc_status_t ring_send(scd_tcp_t *t, ring_t *R, int fd, int right, int *moved_p)
{
	while (R->sg < R->steps) {
		size_t limit = send_limit(R);
		if (R->s_off >= limit)
			return SC_OK; /* waiting for the left neighbour */
		char *src = R->out + chunk_first(R, send_chunk(R, R->sg));
		struct iovec iov = {src + R->s_off, limit - R->s_off};
		ssize_t w = scd_seal_send(t->seal[right], fd, &iov, 1);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return SC_OK;
			return scd_tcp_fail_io(t, right, "send");
		}
		*moved_p = 1;
		t->ctr.bytes_sent += (uint64_t)w;
		R->s_off += (size_t)w;
		if (R->s_off == chunk_bytes(R, send_chunk(R, R->sg)))
			t->ctr.messages_sent++;
		advance(R);
	}
	return SC_OK;
}

/* k 16-bit values of chunk c arrived (its next ones): added into the float32 data, and the
 * sums narrowed into the 16-bit copy the next step sends; the step that completes the
 * chunk's reduction rounds the data too, as every other rank will receive it. */
static void wire_reduce(ring_t *R, int c, size_t k, const uint16_t *src)
{
	size_t e0 = chunk_elem(R, c) + R->r_done / R->esize;
	float *acc = (float *)R->data + e0;
	uint16_t *w = (uint16_t *)R->out + e0;
	scd_wire16_add(R->wire, acc, src, k);
	if (R->rg == R->P - 2)
		scd_wire16_round(R->wire, acc, w, k);
	else
		scd_wire16_narrow(R->wire, w, acc, k);
}

/* Receives one piece from the left neighbour and reduces (or stores) it. */
static sc_status_t ring_recv(scd_tcp_t *t, ring_t *R, int fd, int left, size_t piece,
			     int *moved_p)
{
	if (R->rg >= R->steps)
		return SC_OK;
	int c = recv_chunk(R, R->rg);
	size_t total = chunk_bytes(R, c), want = total - R->r_off;
	char *dst = R->out + chunk_first(R, c);
	int reduce = R->rg < R->P - 1;
	if (reduce) {
		dst = (char *)t->scratch + R->carry;
		if (want > piece - R->carry)
			want = piece - R->carry;
	} else {
		dst += R->r_off;
		if (want > piece)
			want = piece;
	}
	ssize_t n;
	do
		n = scd_seal_recv(t->seal[left], fd, dst, want);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return SC_OK;
		return scd_tcp_fail_io(t, left, "recv");
	}
	if (n == 0)
		return scd_tcp_fail(
		    t, SC_ERR_PEER,
		    "rank %d: connection closed by peer (allreduce step %d of %d, "
		    "%zu of %zu bytes received)",
		    scd_tcp_name(t, left), R->rg, R->steps, R->r_off, total);
	*moved_p = 1;
	t->ctr.bytes_recv += (uint64_t)n;
	R->r_off += (size_t)n;
	if (reduce) {
		size_t have = R->carry + (size_t)n, whole = have / R->esize * R->esize;
		if (R->wire)
			wire_reduce(R, c, whole / R->esize, (const uint16_t *)t->scratch);
		else
			scd_reduce_typed(R->dtype, R->op,
					 R->data + chunk_first(R, c) + R->r_done, t->scratch,
					 whole / R->esize);
		R->r_done += whole;
		R->carry = have - whole;
		if (R->carry)
			memmove(t->scratch, t->scratch + whole, R->carry);
	} else if (R->wire) { /* the whole elements that arrived, widened into the data */
		size_t whole = R->r_off / R->esize * R->esize, e0 = chunk_elem(R, c);
		e0 += R->r_done / R->esize;
		scd_wire16_widen(R->wire, (float *)R->data + e0, (const uint16_t *)R->out + e0,
				 (whole - R->r_done) / R->esize);
		R->r_done = whole;
	} else {
		R->r_done = R->r_off;
	}
	advance(R);
	return SC_OK;
}

/* The 16-bit copy of n elements (grow-only: a buffer of the same size finds it ready). */
static uint16_t *wire_copy(scd_tcp_t *t, size_t n)
{
	if (t->wire16_cap >= n)
		return t->wire16;
	uint16_t *w = malloc(n * sizeof(uint16_t));
	if (!w)
		return NULL;
	free(t->wire16);
	t->wire16 = w;
	t->wire16_cap = n;
	return w;
}

static sc_status_t ring_run(scd_tcp_t *t, void *data, size_t n, sc_dtype_t dtype,
			    sc_reduce_op_t op, uint32_t wire, const scd_xfer_work_t *work,
			    int timeout_ms);

sc_status_t scd_tcp_allreduce(scd_transport_t *tr, void *data, size_t n, sc_dtype_t dtype,
			      sc_reduce_op_t op, const scd_xfer_work_t *work, int timeout_ms)
{
	return ring_run((scd_tcp_t *)tr, data, n, dtype, op, SC_WIRE_NATIVE, work, timeout_ms);
}

sc_status_t scd_tcp_allreduce_wire16(scd_transport_t *tr, float *data, size_t n, uint32_t wire,
				     const scd_xfer_work_t *work, int timeout_ms)
{
	if (!scd_wire16_size(wire)) {
		scd_transport_set_error("tcp: allreduce over unknown wire format %u", wire);
		return SC_ERR_INVALID;
	}
	scd_tcp_t *t = (scd_tcp_t *)tr;
	if (tr->size == 1 && n && data &&
	    scd_tcp_begin(t) == SC_OK) { /* alone: the values still round */
		uint16_t *w = wire_copy(t, n);
		if (!w) {
			scd_transport_set_error("tcp: no memory for the %s copy of %zu values",
						sc_wire_name((sc_wire_t)wire), n);
			return SC_ERR_NOMEM;
		}
		scd_wire16_round(wire, data, w, n);
		return SC_OK;
	}
	return ring_run(t, data, n, SC_FLOAT32, SC_OP_SUM, wire, work, timeout_ms);
}

static sc_status_t ring_run(scd_tcp_t *t, void *data, size_t n, sc_dtype_t dtype,
			    sc_reduce_op_t op, uint32_t wire, const scd_xfer_work_t *work,
			    int timeout_ms)
{
	sc_status_t st0 = scd_tcp_begin(t);
	if (st0 != SC_OK)
		return st0;
	const int P = t->base.size, me = t->base.rank;
	const size_t esize = wire ? scd_wire16_size(wire) : sc_dtype_size(dtype);
	if (!esize) {
		scd_transport_set_error("tcp: allreduce of unknown dtype %d", (int)dtype);
		return SC_ERR_INVALID;
	}
	if (op < SC_OP_SUM || op > SC_OP_PRODUCT) {
		scd_transport_set_error("tcp: allreduce with unknown reduction %d", (int)op);
		return SC_ERR_INVALID;
	}
	if (P == 1 || n == 0)
		return SC_OK;
	if (!data) {
		scd_transport_set_error("tcp: allreduce of %zu %s without a buffer", n,
					sc_dtype_name(dtype));
		return SC_ERR_INVALID;
	}
	ring_t R = {.P = P,
		    .rank = me,
		    .steps = 2 * (P - 1),
		    .base = n / (size_t)P,
		    .rem = n % (size_t)P,
		    .esize = esize,
		    .dtype = dtype,
		    .op = op,
		    .wire = wire,
		    .data = data,
		    .out = data};
	if (wire) { /* the first chunk leaves as it is, narrowed */
		/* without its copy this rank cannot take part: the streams are out of step */
		if (!(R.out = (char *)wire_copy(t, n)))
			return scd_tcp_fail(t, SC_ERR_NOMEM,
					    "no memory for the %s copy of %zu values",
					    sc_wire_name((sc_wire_t)wire), n);
		int c = send_chunk(&R, 0);
		size_t e0 = chunk_elem(&R, c);
		scd_wire16_narrow(wire, (uint16_t *)R.out + e0, (const float *)data + e0,
				  chunk_bytes(&R, c) / esize);
	}
	const int left = (me + P - 1) % P, right = (me + 1) % P;
	const int lfd = t->fds[left], rfd = t->fds[right];
	size_t piece =
	    t->scratch_bytes < SCD_TCP_PIECE_BYTES ? t->scratch_bytes : SCD_TCP_PIECE_BYTES;
	advance(&R);
	int64_t last_ms = scd_tcp_now_ms();
	int more_work = work != NULL;
	sc_status_t st;
	for (;;) {
		/* Alternate: forward what is reduced, then take one piece, while either moves.
		 */
		int moved;
		do {
			moved = 0;
			if ((st = ring_send(t, &R, rfd, right, &moved)) != SC_OK ||
			    (st = ring_recv(t, &R, lfd, left, piece, &moved)) != SC_OK)
				return st;
			if (moved) {
				last_ms = scd_tcp_now_ms();
				more_work = work != NULL;
			}
		} while (moved && (R.sg < R.steps || R.rg < R.steps));
		if (R.sg == R.steps && R.rg == R.steps)
			return SC_OK;

		/* The right socket is watched for a hangup while sends are due, since a gated
		 * send would not notice it; POLLIN on the left finds a hangup by recv. */
		short rev = (short)(R.sg < R.steps ? POLLRDHUP : 0);
		if (R.sg < R.steps && R.s_off < send_limit(&R))
			rev |= POLLOUT;
		int np = 0;
		if (R.rg < R.steps) {
			t->pfds[np] = (struct pollfd){.fd = lfd, .events = POLLIN};
			t->pfd_peer[np++] = left;
		}
		if (lfd == rfd && np) {
			t->pfds[0].events |= (short)(rev & POLLOUT);
		} else if (rev) {
			t->pfds[np] = (struct pollfd){.fd = rfd, .events = rev};
			t->pfd_peer[np++] = right;
		}
		/* The other peers are watched for a hangup: a rank that dies is then named by
		 * every survivor, not only by its two neighbours. */
		int nall = scd_tcp_watch_others(t, np);
		int op_ms = scd_tcp_op_timeout(t, timeout_ms);
		int wait_ms = scd_tcp_poll_ms(last_ms, op_ms);
		if (wait_ms == 0) {
			if (t->suspect >= 0)
				return scd_tcp_fail_stalled(t, op_ms);
			if (R.rg < R.steps)
				return scd_tcp_fail(
				    t, SC_ERR_TIMEOUT,
				    "rank %d: no data for %d ms (allreduce step %d "
				    "of %d, %zu bytes received)",
				    scd_tcp_name(t, left), timeout_ms, R.rg, R.steps, R.r_off);
			return scd_tcp_fail(
			    t, SC_ERR_TIMEOUT,
			    "rank %d: not reading for %d ms (allreduce step %d of "
			    "%d)",
			    scd_tcp_name(t, right), timeout_ms, R.sg, R.steps);
		}
		/* with work to do, a poll that finds nothing ready runs a slice of it */
		/* opened plaintext waiting in the record layer is readable at once */
		int ready = R.rg < R.steps && scd_seal_ready(t->seal[left]);
		int rc = poll(t->pfds, (nfds_t)nall, more_work || ready ? 0 : wait_ms);
		if (ready)
			continue;
		if (rc == 0 && more_work) {
			int w = work->fn(work->arg);
			if (w < 0)
				return (sc_status_t)w;
			more_work = w > 0;
			continue;
		}
		if (rc < 0 && errno != EINTR)
			return scd_tcp_fail(t, SC_ERR_SYSTEM, "poll: %s", strerror(errno));
		if (rc <= 0)
			continue;
		scd_tcp_note_hangups(t, np, nall);
		for (int k = 0; k < np; k++)
			if (t->pfds[k].fd == rfd && !(t->pfds[k].events & POLLIN) &&
			    (t->pfds[k].revents & (POLLERR | POLLHUP | POLLRDHUP)))
				return scd_tcp_fail_hangup(t, right);
	}
}

sc_status_t scd_tcp_allreduce_f32(scd_transport_t *tr, float *data, size_t n, int timeout_ms)
{
	return scd_tcp_allreduce(tr, data, n, SC_FLOAT32, SC_OP_SUM, NULL, timeout_ms);
}
