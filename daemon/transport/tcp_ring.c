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
 */
#include "transport/tcp_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "device/reduce.h"
#include "transport/transport_internal.h"

typedef struct {
	int P, rank, steps;
	size_t base, rem; /* chunk c has base + (c < rem) elements */
	size_t esize;	  /* bytes per element */
	sc_dtype_t dtype;
	sc_reduce_op_t op;
	char *data;
	/* send side: step and bytes of its chunk sent */
	int sg;
	size_t s_off;
	/* receive side: step, bytes of its chunk received and reduced (or stored), and
	 * the bytes of an incomplete element waiting at the start of the scratch */
	int rg;
	size_t r_off, r_done, carry;
} ring_t;

/* Byte offset of chunk c in the data. */
static size_t chunk_first(const ring_t *R, int c)
{
	return ((size_t)c * R->base + ((size_t)c < R->rem ? (size_t)c : R->rem)) * R->esize;
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
		char *src = R->data + chunk_first(R, send_chunk(R, R->sg));
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

/* Receives one piece from the left neighbour and reduces (or stores) it. */
static sc_status_t ring_recv(scd_tcp_t *t, ring_t *R, int fd, int left, size_t piece,
			     int *moved_p)
{
	if (R->rg >= R->steps)
		return SC_OK;
	int c = recv_chunk(R, R->rg);
	size_t total = chunk_bytes(R, c), want = total - R->r_off;
	char *dst = R->data + chunk_first(R, c);
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
		    left, R->rg, R->steps, R->r_off, total);
	*moved_p = 1;
	t->ctr.bytes_recv += (uint64_t)n;
	R->r_off += (size_t)n;
	if (reduce) {
		size_t have = R->carry + (size_t)n, whole = have / R->esize * R->esize;
		scd_reduce_typed(R->dtype, R->op, R->data + chunk_first(R, c) + R->r_done,
				 t->scratch, whole / R->esize);
		R->r_done += whole;
		R->carry = have - whole;
		if (R->carry)
			memmove(t->scratch, t->scratch + whole, R->carry);
	} else {
		R->r_done = R->r_off;
	}
	advance(R);
	return SC_OK;
}

sc_status_t scd_tcp_allreduce(scd_transport_t *tr, void *data, size_t n, sc_dtype_t dtype,
			      sc_reduce_op_t op, const scd_xfer_work_t *work, int timeout_ms)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	if (t->failed)
		return scd_tcp_failed_again(t);
	const int P = t->base.size, me = t->base.rank;
	const size_t esize = sc_dtype_size(dtype);
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
		    .data = data};
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
				    left, timeout_ms, R.rg, R.steps, R.r_off);
			return scd_tcp_fail(
			    t, SC_ERR_TIMEOUT,
			    "rank %d: not reading for %d ms (allreduce step %d of "
			    "%d)",
			    right, timeout_ms, R.sg, R.steps);
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
