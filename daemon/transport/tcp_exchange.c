/*
 * tcp_exchange.c: the point-to-point operations of the tcp backend. exchange and
 * exchange_v drive every socket of an all-to-all from one poll(2) loop: per peer, the
 * sends (gathered several messages to a sendmsg(2)) and the receives each follow the
 * caller's list order, and a peer whose socket is full or empty simply waits for its next
 * poll event while the others go on. exchange_v frames each message with its length as a
 * 64-bit little-endian header. Messages to this rank itself are copied. exchange_v's
 * optional work runs in the loop's idle time: a poll that finds nothing ready returns at
 * once and a slice of the work runs before the next, so the kernel's socket buffers keep
 * the links busy while the CPU computes.
 *
 * measure pairs every two ranks once in a round-robin schedule for ping-pongs of 8 bytes
 * and of probe_bytes, and shares the results so every rank returns the same alpha and
 * beta.
 */
#include "transport/tcp_internal.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "transport/transport_internal.h"
#include "util/log.h"

#define TCP_SEND_BATCH 16 /* messages gathered into one sendmsg(2) */

static void put64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

/* ---- exchange ----------------------------------------------------------------------- */

/* The first message at or after from with peer p (skipping empty ones when the
 * exchange is unframed: nothing goes on the wire for them), or -1. */
static int next_msg(const scd_xfer_t *x, int n, int from, int p, int framed)
{
	for (int i = from; i < n; i++)
		if (x[i].peer == p && (framed || x[i].bytes))
			return i;
	return -1;
}

static sc_status_t check_list(const scd_tcp_t *t, const scd_xfer_t *x, int n, const char *what,
			      int may_wait)
{
	if (n < 0 || (n > 0 && !x)) {
		scd_transport_set_error("tcp: invalid %s list", what);
		return SC_ERR_INVALID;
	}
	for (int i = 0; i < n; i++) {
		if (x[i].bytes == SCD_XFER_PENDING &&
		    (!may_wait || !x[i].buf || x[i].peer == t->base.rank)) {
			scd_transport_set_error("tcp: %s[%d] is held back, but %s", what, i,
						!may_wait   ? "no work can release it"
						: !x[i].buf ? "has no buffer"
							    : "is to this rank itself");
			return SC_ERR_INVALID;
		}
		if (x[i].peer < 0 || x[i].peer >= t->base.size || (x[i].bytes && !x[i].buf)) {
			scd_transport_set_error(
			    "tcp: %s[%d] names rank %d of %d or has no buffer", what, i,
			    x[i].peer, t->base.size);
			return SC_ERR_INVALID;
		}
	}
	return SC_OK;
}

/* Messages to this rank itself: the k-th send is copied into the k-th receive. */
static sc_status_t exchange_self(scd_tcp_t *t, const scd_xfer_t *sends, int ns,
				 const scd_xfer_t *recvs, int nr, size_t *recv_bytes_p,
				 int framed)
{
	int me = t->base.rank, s = next_msg(sends, ns, 0, me, 1),
	    r = next_msg(recvs, nr, 0, me, 1);
	for (; s >= 0 && r >= 0;
	     s = next_msg(sends, ns, s + 1, me, 1), r = next_msg(recvs, nr, r + 1, me, 1)) {
		size_t len = sends[s].bytes;
		if (framed ? len > recvs[r].bytes : len != recvs[r].bytes) {
			scd_transport_set_error(
			    "rank %d: message of %zu bytes to itself does not fit "
			    "a receive of %zu bytes",
			    scd_tcp_name(t, me), len, recvs[r].bytes);
			return framed ? SC_ERR_LIMIT : SC_ERR_INVALID;
		}
		if (len)
			memmove(recvs[r].buf, sends[s].buf, len);
		if (framed)
			recv_bytes_p[r] = len;
	}
	if (s >= 0 || r >= 0) {
		scd_transport_set_error(
		    "rank %d: sends to itself and receives from itself do not "
		    "pair up",
		    scd_tcp_name(t, me));
		return SC_ERR_INVALID;
	}
	return SC_OK;
}

/* Sends what peer p's socket accepts now, gathering several queued messages (and their
 * length headers when framed) into each sendmsg(2). */
static sc_status_t send_some(scd_tcp_t *t, int p, const scd_xfer_t *sends, int ns, int framed,
			     int *moved_p)
{
	scd_tcp_io_t *io = &t->io[p];
	const size_t hb = framed ? 8 : 0;
	while (io->s_idx >= 0 && sends[io->s_idx].bytes != SCD_XFER_PENDING) {
		struct iovec iov[2 * TCP_SEND_BATCH];
		unsigned char hdr[TCP_SEND_BATCH][8];
		size_t total = 0, off = io->s_off;
		int niov = 0;
		for (int k = 0, i = io->s_idx;
		     k < TCP_SEND_BATCH && i >= 0 && sends[i].bytes != SCD_XFER_PENDING;
		     k++, off = 0, i = next_msg(sends, ns, i + 1, p, framed)) {
			if (off < hb) {
				put64(hdr[k], sends[i].bytes);
				iov[niov++] = (struct iovec){hdr[k] + off, hb - off};
			}
			size_t poff = off > hb ? off - hb : 0;
			if (sends[i].bytes > poff)
				iov[niov++] = (struct iovec){(char *)sends[i].buf + poff,
							     sends[i].bytes - poff};
		}
		for (int k = 0; k < niov; k++)
			total += iov[k].iov_len;
		ssize_t w = scd_seal_send(t->seal[p], t->fds[p], iov, niov);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return SC_OK;
			return scd_tcp_fail_io(t, p, "send");
		}
		*moved_p = 1;
		t->ctr.bytes_sent += (uint64_t)w;
		size_t left = (size_t)w;
		while (io->s_idx >= 0 && sends[io->s_idx].bytes != SCD_XFER_PENDING) {
			size_t rem = hb + sends[io->s_idx].bytes - io->s_off;
			if (left < rem) {
				io->s_off += left;
				break;
			}
			left -= rem;
			t->ctr.messages_sent++;
			io->s_idx = next_msg(sends, ns, io->s_idx + 1, p, framed);
			io->s_off = 0;
		}
		if ((size_t)w < total)
			return SC_OK; /* the socket is full */
	}
	return SC_OK;
}

/* Receives what peer p has delivered, message by message (header first when framed). */
static sc_status_t recv_some(scd_tcp_t *t, int p, const scd_xfer_t *recvs, int nr,
			     size_t *recv_bytes_p, int framed, int *moved_p)
{
	scd_tcp_io_t *io = &t->io[p];
	const size_t hb = framed ? 8 : 0;
	while (io->r_idx >= 0) {
		const scd_xfer_t *x = &recvs[io->r_idx];
		void *dst;
		size_t want;
		if (io->r_off < hb) {
			dst = io->r_hdr + io->r_off;
			want = hb - io->r_off;
		} else {
			dst = (char *)x->buf + (io->r_off - hb);
			want = io->r_len - (io->r_off - hb);
		}
		if (want) {
			ssize_t n = scd_seal_recv(t->seal[p], t->fds[p], dst, want);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return SC_OK;
				return scd_tcp_fail_io(t, p, "recv");
			}
			if (n == 0)
				return scd_tcp_fail(
				    t, SC_ERR_PEER,
				    "rank %d: connection closed by peer (message "
				    "%d: %zu of %zu bytes received)",
				    scd_tcp_name(t, p), io->r_idx, io->r_off,
				    hb + (io->r_off >= hb ? io->r_len : 0));
			*moved_p = 1;
			t->ctr.bytes_recv += (uint64_t)n;
			io->r_off += (size_t)n;
			if (framed && io->r_off == hb) {
				io->r_len = get64(io->r_hdr);
				if (io->r_len > x->bytes)
					return scd_tcp_fail(t, SC_ERR_LIMIT,
							    "rank %d: message of %" PRIu64
							    " bytes exceeds the receive buffer "
							    "of %zu bytes",
							    scd_tcp_name(t, p), io->r_len,
							    x->bytes);
			}
		}
		if (io->r_off < hb || io->r_off - hb < io->r_len)
			continue;
		if (framed)
			recv_bytes_p[io->r_idx] = io->r_len;
		io->r_idx = next_msg(recvs, nr, io->r_idx + 1, p, framed);
		io->r_off = 0;
		io->r_len = (!framed && io->r_idx >= 0) ? recvs[io->r_idx].bytes : 0;
	}
	return SC_OK;
}

static sc_status_t exchange_timeout(scd_tcp_t *t, int timeout_ms)
{
	for (int p = 0; p < t->base.size; p++)
		if (p != t->base.rank && t->io[p].r_idx >= 0)
			return scd_tcp_fail(t, SC_ERR_TIMEOUT,
					    "rank %d: no data for %d ms (message %d: %zu bytes "
					    "received)",
					    scd_tcp_name(t, p), timeout_ms, t->io[p].r_idx,
					    t->io[p].r_off);
	for (int p = 0; p < t->base.size; p++)
		if (p != t->base.rank && t->io[p].s_idx >= 0)
			return scd_tcp_fail(
			    t, SC_ERR_TIMEOUT,
			    "rank %d: not reading for %d ms (message %d: %zu bytes "
			    "sent)",
			    scd_tcp_name(t, p), timeout_ms, t->io[p].s_idx, t->io[p].s_off);
	return scd_tcp_fail(t, SC_ERR_TIMEOUT, "timed out after %d ms", timeout_ms);
}

static sc_status_t tcp_exchange_any(scd_transport_t *tr, const scd_xfer_t *sends, int ns,
				    const scd_xfer_t *recvs, int nr, size_t *recv_bytes_p,
				    const scd_xfer_work_t *work, int timeout_ms, int framed)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	sc_status_t st0 = scd_tcp_begin(t);
	if (st0 != SC_OK)
		return st0;
	sc_status_t st = check_list(t, sends, ns, "sends", framed && work);
	if (st == SC_OK)
		st = check_list(t, recvs, nr, "recvs", 0);
	if (st == SC_OK && framed && nr > 0 && !recv_bytes_p) {
		scd_transport_set_error("tcp: exchange_v without recv_bytes_p");
		st = SC_ERR_INVALID;
	}
	if (st == SC_OK && framed)
		for (int i = 0; i < nr; i++)
			recv_bytes_p[i] = SCD_XFER_PENDING;
	if (st == SC_OK)
		st = exchange_self(t, sends, ns, recvs, nr, recv_bytes_p, framed);
	if (st != SC_OK)
		return st;

	const int P = t->base.size, me = t->base.rank;
	for (int p = 0; p < P; p++) {
		scd_tcp_io_t *io = &t->io[p];
		*io = (scd_tcp_io_t){.s_idx = -1, .r_idx = -1};
		if (p == me)
			continue;
		io->s_idx = next_msg(sends, ns, 0, p, framed);
		io->r_idx = next_msg(recvs, nr, 0, p, framed);
		io->r_len = (!framed && io->r_idx >= 0) ? recvs[io->r_idx].bytes : 0;
	}
	int64_t last_ms = scd_tcp_now_ms();
	int npfd = 0, more_work = work != NULL;
	for (int first = 1;; first = 0) {
		/* Move bytes on every socket that may take or give some, then wait for more. */
		int moved = 0;
		for (int k = 0; k < (first ? P : npfd); k++) {
			int p = first ? k : t->pfd_peer[k];
			short rev = first ? POLLIN | POLLOUT : t->pfds[k].revents;
			if (p == me || !rev)
				continue;
			if (t->io[p].s_idx >= 0 &&
			    (st = send_some(t, p, sends, ns, framed, &moved)) != SC_OK)
				return st;
			if (t->io[p].r_idx >= 0 &&
			    (st = recv_some(t, p, recvs, nr, recv_bytes_p, framed, &moved)) !=
				SC_OK)
				return st;
			/* Sending only: a hangup cannot show up in a recv, so catch it here. */
			if (!first && t->io[p].r_idx < 0 && t->io[p].s_idx >= 0 &&
			    (rev & (POLLERR | POLLHUP | POLLRDHUP)))
				return scd_tcp_fail_hangup(t, p);
		}
		if (moved) {
			last_ms = scd_tcp_now_ms();
			more_work = work != NULL;
		}
		npfd = 0;
		int held = -1, live = 0; /* a send the work has not released; any other I/O */
		for (int p = 0; p < P; p++) {
			const scd_tcp_io_t *io = &t->io[p];
			if (io->s_idx < 0 && io->r_idx < 0)
				continue;
			short ev = io->r_idx >= 0 ? POLLIN : POLLRDHUP;
			if (io->s_idx >= 0 && sends[io->s_idx].bytes == SCD_XFER_PENDING)
				held = io->s_idx;
			else if (io->s_idx >= 0)
				ev |= POLLOUT;
			live |= ev != POLLRDHUP;
			t->pfds[npfd] = (struct pollfd){.fd = t->fds[p], .events = ev};
			t->pfd_peer[npfd++] = p;
		}
		if (npfd == 0)
			return SC_OK;
		if (held >= 0 && !live && !more_work)
			return scd_tcp_fail(t, SC_ERR_INVALID,
					    "rank %d: send %d is still held back, and the work "
					    "waits for nothing left to receive",
					    scd_tcp_name(t, sends[held].peer), held);
		/* The peers not in this exchange are watched for a hangup, to blame the right
		 * rank when the world breaks. */
		int nall = scd_tcp_watch_others(t, npfd);
		int op_ms = scd_tcp_op_timeout(t, timeout_ms);
		int wait_ms = scd_tcp_poll_ms(last_ms, op_ms);
		if (wait_ms == 0)
			return t->suspect >= 0 ? scd_tcp_fail_stalled(t, op_ms)
					       : exchange_timeout(t, timeout_ms);
		/* Plaintext the record layer opened but the receive did not take yet is
		 * readable now, whatever the socket says. */
		int ready = 0;
		for (int k = 0; k < npfd; k++)
			ready |= (t->pfds[k].events & POLLIN) &&
				 scd_seal_ready(t->seal[t->pfd_peer[k]]);
		int rc = poll(t->pfds, (nfds_t)nall, more_work || ready ? 0 : wait_ms);
		for (int k = 0; ready && k < npfd; k++)
			if ((t->pfds[k].events & POLLIN) &&
			    scd_seal_ready(t->seal[t->pfd_peer[k]]))
				t->pfds[k].revents |= POLLIN, rc = rc > 0 ? rc : 1;
		if (rc == 0 && more_work) { /* nothing to move: a slice of the work */
			int w = work->fn(work->arg);
			if (w < 0)
				return (sc_status_t)w;
			more_work = w > 0;
		}
		if (rc < 0 && errno != EINTR)
			return scd_tcp_fail(t, SC_ERR_SYSTEM, "poll: %s", strerror(errno));
		if (rc <= 0)
			for (int k = 0; k < npfd; k++)
				t->pfds[k].revents = 0;
		else
			scd_tcp_note_hangups(t, npfd, nall);
	}
}

sc_status_t scd_tcp_exchange(scd_transport_t *tr, const scd_xfer_t *sends, int ns,
			     const scd_xfer_t *recvs, int nr, int timeout_ms)
{
	return tcp_exchange_any(tr, sends, ns, recvs, nr, NULL, NULL, timeout_ms, 0);
}

sc_status_t scd_tcp_exchange_v(scd_transport_t *tr, const scd_xfer_t *sends, int ns,
			       const scd_xfer_t *recvs, int nr, size_t *recv_bytes_p,
			       const scd_xfer_work_t *work, int timeout_ms)
{
	return tcp_exchange_any(tr, sends, ns, recvs, nr, recv_bytes_p, work, timeout_ms, 1);
}

/* ---- probe ------------------------------------------------------------------------ */

#define PROBE_REPS 5

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median round trip of bytes with peer: the lower rank of the pair pings, the higher one
 * echoes (and gets no timing). */
static sc_status_t ping_pong(scd_tcp_t *t, int peer, size_t bytes, double *rtt_s_p,
			     int timeout_ms)
{
	unsigned char *out = t->scratch, *in = t->scratch + t->scratch_bytes / 2;
	scd_xfer_t s = {peer, out, bytes}, r = {peer, in, bytes}, echo = {peer, in, bytes};
	double rtt[PROBE_REPS];
	sc_status_t st;
	for (int i = -1; i < PROBE_REPS; i++) { /* one round to warm up */
		if (t->base.rank < peer) {
			struct timespec a, b;
			clock_gettime(CLOCK_MONOTONIC, &a);
			if ((st = scd_tcp_exchange(&t->base, &s, 1, &r, 1, timeout_ms)) !=
			    SC_OK)
				return st;
			clock_gettime(CLOCK_MONOTONIC, &b);
			if (i >= 0)
				rtt[i] = (double)(b.tv_sec - a.tv_sec) +
					 (b.tv_nsec - a.tv_nsec) * 1e-9;
		} else {
			if ((st = scd_tcp_exchange(&t->base, NULL, 0, &r, 1, timeout_ms)) !=
				SC_OK ||
			    (st = scd_tcp_exchange(&t->base, &echo, 1, NULL, 0, timeout_ms)) !=
				SC_OK)
				return st;
		}
	}
	*rtt_s_p = t->base.rank < peer ? median(rtt, PROBE_REPS) : 0;
	return SC_OK;
}

/*
 * Pairs every two ranks once, in the rounds of a round-robin tournament (the circle
 * method: in round k, rank r < m - 1 meets (2k - r) mod (m - 1), where m is P rounded up
 * to even, and the rank left over meets m - 1; a partner >= P is a bye), so all ranks can
 * run it together without deadlock. The pinger of each pair fills its row of a P x P table
 * that one allreduce then gives to everybody, so every rank returns the same medians and
 * takes the same decisions from them.
 */
sc_status_t scd_tcp_measure(scd_transport_t *tr, size_t probe_bytes, double *alpha_s_p,
			    double *beta_s_per_byte_p, int timeout_ms)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	sc_status_t st0 = scd_tcp_begin(t);
	if (st0 != SC_OK)
		return st0;
	const int P = t->base.size, me = t->base.rank;
	if (P == 1) {
		*alpha_s_p = 0;
		*beta_s_per_byte_p = 0;
		return SC_OK;
	}
	size_t big = probe_bytes ? probe_bytes : (1u << 20);
	if (big > t->scratch_bytes / 2)
		big = t->scratch_bytes / 2;
	if (big <= 8)
		big = 16;
	size_t cells = (size_t)P * (size_t)P * 2;
	float *table = calloc(cells, sizeof(float));
	double *alpha = malloc(sizeof(double) * (size_t)P * (size_t)P);
	double *beta = malloc(sizeof(double) * (size_t)P * (size_t)P);
	sc_status_t st = SC_ERR_NOMEM;
	if (!table || !alpha || !beta) {
		scd_transport_set_error("tcp: out of memory for the probe");
		goto out;
	}
	memset(t->scratch, 0xa5, big);
	int m = P % 2 ? P + 1 : P;
	for (int k = 0; k < m - 1; k++) {
		int peer = me == m - 1 ? k : ((2 * k - me) % (m - 1) + (m - 1)) % (m - 1);
		if (peer == me)
			peer = m - 1;
		if (peer >= P)
			continue;
		double small_rtt, big_rtt;
		if ((st = ping_pong(t, peer, 8, &small_rtt, timeout_ms)) != SC_OK ||
		    (st = ping_pong(t, peer, big, &big_rtt, timeout_ms)) != SC_OK)
			goto out;
		if (me < peer) {
			double a = small_rtt / 2, b = (big_rtt / 2 - a) / (double)(big - 8);
			/* A noisy small round trip (a loaded host) can exceed the large one's
			 * latency share; then take the large transfer's time per byte whole. */
			if (!(b > 0))
				b = big_rtt / 2 / (double)big;
			table[2 * ((size_t)me * P + peer)] = (float)a;
			table[2 * ((size_t)me * P + peer) + 1] = (float)b;
		}
	}
	if ((st = scd_tcp_allreduce_f32(tr, table, cells, timeout_ms)) != SC_OK)
		goto out;
	int n = 0;
	for (int i = 0; i < P; i++)
		for (int j = i + 1; j < P; j++, n++) {
			alpha[n] = table[2 * ((size_t)i * P + j)];
			beta[n] = table[2 * ((size_t)i * P + j) + 1];
		}
	*alpha_s_p = median(alpha, n);
	*beta_s_per_byte_p = median(beta, n);
	scd_debug(SCD_SUB_TRANSPORT, "rank %d: alpha %.3g s, beta %.3g s/B (%.3g Gbit/s)", me,
		  *alpha_s_p, *beta_s_per_byte_p,
		  *beta_s_per_byte_p > 0 ? 8e-9 / *beta_s_per_byte_p : 0.0);
out:
	free(table);
	free(alpha);
	free(beta);
	return st;
}
