/*
 * exec.c: the worker thread of a libnccl-host.so comm. It sets the comm up (setup.c), then
 * runs the batches handed to it in FIFO order. A batch is lowered into messages between
 * pairs of ranks plus local work:
 *  - send / receive: one message; to itself: matched with this rank's receive from itself
 *    in issue order and copied;
 *  - all-reduce: every rank sends its whole buffer to every other rank and reduces the P
 *    buffers in rank order (reduce.c), so all ranks compute the same bits;
 *  - reduce-scatter: block q of the send buffer goes to rank q, which reduces the P blocks
 *    it got in rank order;
 *  - all-gather: every rank sends its buffer to every other rank;
 *  - broadcast: the root sends its buffer to every other rank.
 * Messages between a pair are matched in issue order, as NCCL matches them. All messages
 * of a batch progress together under poll(), so a send to p and a receive from p in the
 * same batch never wait for each other. Every message is a frame: a header (magic, the
 * pair's sequence number, byte length), checked on receipt against what this rank posted,
 * then the bytes. A closed connection, a socket error or a header that does not match
 * fails the comm, naming the peer (the batch's messages with the other peers still go on
 * for up to NH_DRAIN_MS: a survivor waiting for this rank's part then sees the failed peer
 * itself); a peer that sends nothing is waited for (as NCCL waits), until ncclCommAbort, or
 * for a blocking comm's call until NCCL_HOST_TIMEOUT_MS passed.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "host.h"

#define NH_STEP_BYTES (8u << 20) /* the most one peer moves per turn of the poll loop */

struct nh_frame {
	uint32_t magic, seq; /* network order */
	uint64_t bytes;	     /* big-endian */
};

struct xfer {
	struct xfer *next;
	char *buf;
	size_t bytes;
	size_t done; /* the header's bytes included */
	uint32_t seq;
	struct nh_frame hdr; /* sends: what goes out; receives: what came in */
};

/* One batch, lowered. */
struct plan {
	struct xfer *x;
	int nx, left;
	struct xfer **sq, ***sq_tail, **rq, ***rq_tail; /* per peer, in issue order */
	struct xfer *self_send, *self_recv; /* this rank to itself, in issue order */
	struct xfer **self_send_tail, **self_recv_tail;
	char **tmp; /* per operation: the P blocks to reduce */
	struct pollfd *pfd;
	int *who;
};

void nh_wait(struct ncclComm *comm, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&comm->cv, &comm->mu, &ts);
}

void nh_batch_free(struct nh_batch *b)
{
	if (b) {
		free(b->ops);
		free(b);
	}
}

static void add_xfer(struct ncclComm *comm, struct plan *pl, int peer, int send,
		     const void *buf, size_t bytes)
{
	struct xfer *x = &pl->x[pl->nx++];

	x->buf = (char *)buf;
	x->bytes = bytes;
	if (peer == comm->rank) {
		*(send ? pl->self_send_tail : pl->self_recv_tail) = x;
		if (send)
			pl->self_send_tail = &x->next;
		else
			pl->self_recv_tail = &x->next;
		return;
	}
	if (send) {
		x->seq = comm->send_seq[peer]++;
		x->hdr.magic = htonl(NH_FRAME_MAGIC);
		x->hdr.seq = htonl(x->seq);
		x->hdr.bytes = htobe64(bytes);
		*pl->sq_tail[peer] = x;
		pl->sq_tail[peer] = &x->next;
	} else {
		x->seq = comm->recv_seq[peer]++;
		*pl->rq_tail[peer] = x;
		pl->rq_tail[peer] = &x->next;
	}
	pl->left++;
}

/* Lowers operation i; the reductions' own block is copied here, before anything moves, so
 * that an in-place operation reads what the caller passed. */
static ncclResult_t lower(struct ncclComm *comm, struct plan *pl, int i, const struct nh_op *op)
{
	int P = comm->nranks, me = comm->rank;
	size_t bytes = op->count * nh_type_size(op->type);
	const char *sb = op->sendbuff;
	char *rb = op->recvbuff;

	switch (op->kind) {
	case NH_SEND:
	case NH_RECV:
		add_xfer(comm, pl, op->peer, op->kind == NH_SEND,
			 op->kind == NH_SEND ? (const void *)sb : rb, bytes);
		break;
	case NH_ALLREDUCE:
	case NH_REDUCE_SCATTER:
		pl->tmp[i] = malloc(bytes * (size_t)P + 1);
		if (!pl->tmp[i])
			return nh_fail(comm, ncclSystemError,
				       "rank %d: out of memory (%zu bytes)", me,
				       bytes * (size_t)P);
		memcpy(pl->tmp[i] + (size_t)me * bytes,
		       op->kind == NH_ALLREDUCE ? sb : sb + (size_t)me * bytes, bytes);
		for (int q = 0; q < P; q++) {
			if (q == me)
				continue;
			add_xfer(comm, pl, q, 1,
				 op->kind == NH_ALLREDUCE ? sb : sb + (size_t)q * bytes, bytes);
			add_xfer(comm, pl, q, 0, pl->tmp[i] + (size_t)q * bytes, bytes);
		}
		break;
	case NH_ALLGATHER:
		for (int q = 0; q < P; q++) {
			if (q == me)
				continue;
			add_xfer(comm, pl, q, 1, sb, bytes);
			add_xfer(comm, pl, q, 0, rb + (size_t)q * bytes, bytes);
		}
		break;
	case NH_BROADCAST:
		for (int q = 0; q < P && me == op->peer; q++)
			if (q != me)
				add_xfer(comm, pl, q, 1, sb, bytes);
		if (me != op->peer)
			add_xfer(comm, pl, op->peer, 0, rb, bytes);
		break;
	}
	return ncclSuccess;
}

/* The local work once every message moved. */
static ncclResult_t finish(struct ncclComm *comm, struct plan *pl, const struct nh_batch *b)
{
	struct xfer *s = pl->self_send, *r = pl->self_recv;

	for (; s && r; s = s->next, r = r->next) {
		if (s->bytes != r->bytes)
			return nh_fail(
			    comm, ncclInvalidUsage,
			    "rank %d: sent %zu bytes to itself where it receives %zu",
			    comm->rank, s->bytes, r->bytes);
		memmove(r->buf, s->buf, s->bytes);
	}
	if (s || r)
		return nh_fail(comm, ncclInvalidUsage,
			       "rank %d: a send to itself without its receive (or the reverse)",
			       comm->rank);
	for (int i = 0; i < b->nops; i++) {
		const struct nh_op *op = &b->ops[i];
		size_t bytes = op->count * nh_type_size(op->type);
		char *rb = op->recvbuff;

		if (op->kind == NH_ALLREDUCE || op->kind == NH_REDUCE_SCATTER)
			nh_reduce(rb, pl->tmp[i], comm->nranks, op->count, op->type, op->red);
		else if (op->kind == NH_ALLGATHER &&
			 rb + (size_t)comm->rank * bytes != op->sendbuff)
			memmove(rb + (size_t)comm->rank * bytes, op->sendbuff, bytes);
		else if (op->kind == NH_BROADCAST && comm->rank == op->peer &&
			 rb != op->sendbuff)
			memmove(rb, op->sendbuff, bytes);
	}
	return ncclSuccess;
}

static ncclResult_t peer_error(struct ncclComm *comm, int p, ssize_t n)
{
	if (n == 0 || errno == EPIPE || errno == ECONNRESET)
		return nh_fail(comm, ncclRemoteError, "rank %d: connection closed by peer", p);
	return nh_fail(comm, ncclSystemError, "rank %d: %s", p, strerror(errno));
}

static ncclResult_t recv_some(struct ncclComm *comm, struct plan *pl, int p)
{
	const size_t H = sizeof(struct nh_frame);
	size_t moved = 0;

	while (pl->rq[p] && moved < NH_STEP_BYTES) {
		struct xfer *x = pl->rq[p];
		ssize_t n;

		if (x->done < H)
			n = recv(comm->fds[p], (char *)&x->hdr + x->done, H - x->done, 0);
		else
			n = recv(comm->fds[p], x->buf + (x->done - H), x->bytes - (x->done - H),
				 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return ncclSuccess;
		if (n <= 0)
			return peer_error(comm, p, n);
		x->done += (size_t)n;
		moved += (size_t)n;
		if (x->done == H) {
			uint64_t got = be64toh(x->hdr.bytes);

			if (ntohl(x->hdr.magic) != NH_FRAME_MAGIC ||
			    ntohl(x->hdr.seq) != x->seq)
				return nh_fail(
				    comm, ncclRemoteError,
				    "rank %d: malformed frame (magic %#x, sequence %u "
				    "where %u was next)",
				    p, ntohl(x->hdr.magic), ntohl(x->hdr.seq), x->seq);
			if (got != x->bytes)
				return nh_fail(
				    comm, ncclInvalidUsage,
				    "rank %d: sent %llu bytes where this rank receives "
				    "%zu (frame %u)",
				    p, (unsigned long long)got, x->bytes, x->seq);
		}
		if (x->done == H + x->bytes) {
			pl->rq[p] = x->next;
			pl->left--;
		}
	}
	return ncclSuccess;
}

static ncclResult_t send_some(struct ncclComm *comm, struct plan *pl, int p)
{
	const size_t H = sizeof(struct nh_frame);
	size_t moved = 0;

	while (pl->sq[p] && moved < NH_STEP_BYTES) {
		struct xfer *x = pl->sq[p];
		struct iovec iov[2];
		struct msghdr m = {.msg_iov = iov};
		ssize_t n;

		if (x->done < H)
			iov[m.msg_iovlen++] =
			    (struct iovec){(char *)&x->hdr + x->done, H - x->done};
		if (x->bytes > 0)
			iov[m.msg_iovlen++] =
			    (struct iovec){x->buf + (x->done < H ? 0 : x->done - H),
					   x->bytes - (x->done < H ? 0 : x->done - H)};
		n = sendmsg(comm->fds[p], &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return ncclSuccess;
		if (n < 0)
			return peer_error(comm, p, n);
		x->done += (size_t)n;
		moved += (size_t)n;
		if (x->done == H + x->bytes) {
			pl->sq[p] = x->next;
			pl->left--;
		}
	}
	return ncclSuccess;
}

/* A blocking call gave up on the batch: the failure names the first peer still owing. */
static ncclResult_t timed_out(struct ncclComm *comm, const struct plan *pl)
{
	int p = 0;

	while (p < comm->nranks - 1 && !pl->sq[p] && !pl->rq[p])
		p++;
	return nh_fail(comm, ncclSystemError,
		       "rank %d: no progress within NCCL_HOST_TIMEOUT_MS=%d (a blocking comm's "
		       "call), waiting for rank %d",
		       comm->rank, comm->timeout_ms, p);
}

/* Drops what is left of the batch with peer p (it failed). */
static void drop_peer(struct plan *pl, int p)
{
	for (struct xfer *x = pl->sq[p]; x; x = x->next)
		pl->left--;
	for (struct xfer *x = pl->rq[p]; x; x = x->next)
		pl->left--;
	pl->sq[p] = pl->rq[p] = NULL;
}

/*
 * Moves the batch's messages until none is left. A peer that fails (its connection closed,
 * a bad frame) fails the batch, and the comm at once (nh_fail: the async error says so);
 * the messages with the other peers still go on for up to NH_DRAIN_MS, so that a rank
 * waiting for this one's part of the batch gets it, finishes the batch and sees the failed
 * peer itself at its next one, rather than waiting on this rank for good.
 */
static ncclResult_t progress(struct ncclComm *comm, struct plan *pl)
{
	ncclResult_t failed = ncclSuccess;
	uint64_t drain_end = 0;

	while (pl->left > 0) {
		int n = 0, k;

		if (atomic_load(&comm->abort))
			return failed != ncclSuccess ? failed
						     : nh_fail(comm, ncclSystemError,
							       "rank %d: aborted", comm->rank);
		if (failed != ncclSuccess && nh_now_ms() >= drain_end)
			return failed;
		if (atomic_load(&comm->cancel))
			return failed != ncclSuccess ? failed : timed_out(comm, pl);
		for (int p = 0; p < comm->nranks; p++) {
			short ev =
			    (short)((pl->sq[p] ? POLLOUT : 0) | (pl->rq[p] ? POLLIN : 0));

			if (!ev)
				continue;
			pl->pfd[n] = (struct pollfd){.fd = comm->fds[p], .events = ev};
			pl->who[n++] = p;
		}
		k = poll(pl->pfd, (nfds_t)n, NH_SLICE_MS);
		if (k < 0 && errno != EINTR)
			return nh_fail(comm, ncclSystemError, "rank %d: poll: %s", comm->rank,
				       strerror(errno));
		for (int i = 0; i < n && k > 0; i++) {
			short rev = pl->pfd[i].revents;
			int p = pl->who[i];
			ncclResult_t r = ncclSuccess;

			if (pl->rq[p] && (rev & (POLLIN | POLLERR | POLLHUP)))
				r = recv_some(comm, pl, p);
			if (r == ncclSuccess && pl->sq[p] &&
			    (rev & (POLLOUT | POLLERR | POLLHUP)))
				r = send_some(comm, pl, p);
			if (r == ncclSuccess)
				continue;
			if (failed == ncclSuccess) {
				failed = r;
				drain_end = nh_now_ms() + NH_DRAIN_MS;
			}
			drop_peer(pl, p);
		}
	}
	return failed;
}

static ncclResult_t run_batch(struct ncclComm *comm, const struct nh_batch *b)
{
	int P = comm->nranks, nx = 0;
	struct plan pl = {0};
	ncclResult_t r = ncclSuccess;

	for (int i = 0; i < b->nops; i++)
		nx += 2 * P;
	pl.x = calloc((size_t)nx, sizeof(*pl.x));
	pl.sq = calloc((size_t)P * 2, sizeof(*pl.sq));
	pl.sq_tail = calloc((size_t)P * 2, sizeof(*pl.sq_tail));
	pl.tmp = calloc((size_t)b->nops, sizeof(*pl.tmp));
	pl.pfd = calloc((size_t)P, sizeof(*pl.pfd));
	pl.who = calloc((size_t)P, sizeof(*pl.who));
	if (!pl.x || !pl.sq || !pl.sq_tail || !pl.tmp || !pl.pfd || !pl.who) {
		r = nh_fail(comm, ncclSystemError, "rank %d: out of memory", comm->rank);
		goto out;
	}
	pl.rq = pl.sq + P;
	pl.rq_tail = pl.sq_tail + P;
	for (int p = 0; p < P; p++) {
		pl.sq_tail[p] = &pl.sq[p];
		pl.rq_tail[p] = &pl.rq[p];
	}
	pl.self_send_tail = &pl.self_send;
	pl.self_recv_tail = &pl.self_recv;
	for (int i = 0; i < b->nops && r == ncclSuccess; i++)
		r = lower(comm, &pl, i, &b->ops[i]);
	if (r == ncclSuccess)
		r = progress(comm, &pl);
	if (r == ncclSuccess)
		r = finish(comm, &pl, b);
out:
	for (int i = 0; pl.tmp && i < b->nops; i++)
		free(pl.tmp[i]);
	free(pl.x);
	free(pl.sq);
	free(pl.sq_tail);
	free(pl.tmp);
	free(pl.pfd);
	free(pl.who);
	return r;
}

void *nh_worker(void *arg)
{
	struct ncclComm *comm = arg;
	ncclResult_t r = nh_setup(comm);

	pthread_mutex_lock(&comm->mu);
	comm->ready = 1;
	if (r != ncclSuccess && comm->error == ncclSuccess)
		comm->error = r;
	pthread_cond_broadcast(&comm->cv);
	for (;;) {
		struct nh_batch *b;

		while (!comm->head && !comm->stop)
			nh_wait(comm, NH_SLICE_MS);
		if (!comm->head || atomic_load(&comm->abort))
			break;
		b = comm->head;
		r = comm->error;
		pthread_mutex_unlock(&comm->mu);
		if (r == ncclSuccess)
			r = run_batch(comm, b);
		pthread_mutex_lock(&comm->mu);
		comm->head = b->next;
		if (!comm->head)
			comm->tail = NULL;
		b->result = r;
		b->done = 1;
		if (!comm->blocking)
			nh_batch_free(b);
		pthread_cond_broadcast(&comm->cv);
	}
	pthread_mutex_unlock(&comm->mu);
	return NULL;
}

ncclResult_t nh_submit(struct ncclComm *comm, struct nh_batch *b)
{
	uint64_t deadline;
	ncclResult_t r;

	pthread_mutex_lock(&comm->mu);
	r = comm->finalized ? ncclInvalidUsage : comm->error;
	if (r != ncclSuccess) {
		if (comm->finalized)
			snprintf(comm->text, sizeof(comm->text),
				 "rank %d: an operation after ncclCommFinalize", comm->rank);
		pthread_mutex_unlock(&comm->mu);
		nh_batch_free(b);
		return r;
	}
	b->next = NULL;
	if (comm->tail)
		comm->tail->next = b;
	else
		comm->head = b;
	comm->tail = b;
	pthread_cond_broadcast(&comm->cv);
	if (!comm->blocking) {
		pthread_mutex_unlock(&comm->mu);
		return ncclSuccess;
	}
	/* A blocking call waits for its batch at most NCCL_HOST_TIMEOUT_MS, then fails the
	 * batch (and so the comm) and waits for the worker to let go of the caller's buffers,
	 * which takes at most NH_SLICE_MS. A non-blocking comm waits for a silent peer as NCCL
	 * does, until the caller aborts. */
	deadline = nh_now_ms() + (uint64_t)comm->timeout_ms;
	while (!b->done) {
		if (nh_now_ms() >= deadline)
			atomic_store(&comm->cancel, 1);
		nh_wait(comm, NH_SLICE_MS);
	}
	r = b->result;
	pthread_mutex_unlock(&comm->mu);
	nh_batch_free(b);
	return r;
}
