/*
 * nccl.c: the nccl backend of the transport layer (transport.h): NCCL between the GPUs of
 * the daemons, for buffers that live on the cuda device. NCCL is loaded at run time
 * (nccl_lib.h); the device's queue (device/cuda.h, scd_cuda_queue_t) gives the stream
 * every operation is queued on, behind the device's own work, so nothing waits for the
 * device before an exchange starts.
 *
 * Bootstrap: rank 0's endpoint holds an ncclUniqueId (prepare), the other ranks' are
 * empty; create makes the communicator non-blocking (ncclConfig_t.blocking = 0) and polls
 * its state until it is ready or the deadline passes.
 *
 * No hang, ever: NCCL waits forever for a peer that died, so no call here waits inside
 * NCCL. Each operation is queued, then polled: ncclCommGetAsyncError until the launch is
 * done, then the stream until the work has finished, against the call's timeout. On a
 * timeout or an error the communicator is aborted (ncclCommAbort), the call fails with a
 * message naming the ranks it was waiting for, and every later call fails at once: the
 * engine makes a new communicator for the next job (engine/gpunet.c).
 *
 * Exchanges: sizes known to both sides are one group of ncclSend / ncclRecv. exchange_v,
 * where a receiver does not know the length, goes in rounds: each rank announces to
 * every peer it still sends to the lengths of its next messages (up to NCCL_HDR_MSGS;
 * sends held back by the caller's work, SCD_XFER_PENDING, are not announced yet), then
 * the announced messages move as one group; the caller's work runs between rounds,
 * never while NCCL has work queued (its device work would queue behind NCCL's). Messages
 * to this rank itself are copied on the device.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda.h"
#include "device/device.h"
#include "transport/nccl_lib.h"
#include "transport/transport_internal.h"
#include "util/clock.h"
#include "util/log.h"

/* Messages announced per peer and round in exchange_v. */
#define NCCL_HDR_MSGS  16
#define NCCL_HDR_WORDS (1 + NCCL_HDR_MSGS)
/* Polling: from this many microseconds, doubling to a millisecond. */
#define NCCL_POLL_MIN_US 10
#define NCCL_POLL_MAX_US 1000
/* How long a healthy communicator may take to finalize before it is aborted. */
#define NCCL_FINALIZE_MS 5000

typedef struct scd_nccl {
	scd_transport_t base;
	const scd_nccl_api_t *api;
	const scd_device_ops_t *dev;
	const scd_cuda_queue_t *q;
	ncclComm_t comm; /* NULL once aborted */
	cudaStream_t stream;
	char broken[256];  /* why the communicator was aborted ("" while usable) */
	atomic_int gone;   /* 1 + a rank the world gave up (peer_gone), 0: none */
	int in_group;	   /* between group_start and group_end */
	char pending[256]; /* a failure inside the open group */
	uint64_t *dhdr;	   /* device: [2][size][NCCL_HDR_WORDS] headers, out then in */
	uint64_t *hhdr;	   /* host copy of the same */
	scd_transport_counters_t ctr;
} scd_nccl_t;

/* ---- waiting without hanging -------------------------------------------------------- */

static void nap(int *us)
{
	struct timespec ts = {0, (long)*us * 1000};
	nanosleep(&ts, NULL);
	if (*us < NCCL_POLL_MAX_US)
		*us *= 2;
}

/* Lists the ranks of an operation ("ranks 1, 3") for its error. */
static void peers_text(const scd_nccl_t *t, const scd_xfer_t *s, int ns, const scd_xfer_t *r,
		       int nr, char *out, size_t cap)
{
	size_t used = 0;
	int n = 0;
	out[0] = '\0';
	for (int p = 0; p < t->base.size && used < cap; p++) {
		int in = 0;
		for (int i = 0; i < ns && !in; i++)
			in = s[i].peer == p;
		for (int i = 0; i < nr && !in; i++)
			in = r[i].peer == p;
		if (!s && !r)
			in = p != t->base.rank;
		if (!in || p == t->base.rank)
			continue;
		int w = snprintf(out + used, cap - used, "%s%d", n ? ", " : "", p);
		if (w < 0)
			break;
		used += (size_t)w;
		n++;
	}
	if (!n)
		snprintf(out, cap, "none");
}

/* Aborts the communicator (a later call fails at once) and records why. */
static void nccl_break(scd_nccl_t *t, const char *why)
{
	if (t->comm) {
		t->api->CommAbort(t->comm);
		t->comm = NULL;
	}
	if (!t->broken[0])
		snprintf(t->broken, sizeof t->broken, "%s", why);
}

static sc_status_t usable(scd_nccl_t *t)
{
	int gone = atomic_load(&t->gone);
	if (gone && t->comm) {
		char why[64];
		snprintf(why, sizeof why, "rank %d is gone from the world", gone - 1);
		nccl_break(t, why);
	}
	if (t->comm)
		return SC_OK;
	scd_transport_set_error("rank %d: NCCL communicator aborted earlier (%s)", t->base.rank,
				t->broken);
	return SC_ERR_PEER;
}

/*
 * Waits for what was just queued: the launch (the communicator's state) and then the
 * stream. what names the operation, peers its ranks; on failure the communicator is
 * aborted and the error says which ranks the operation waited for.
 */
static sc_status_t nccl_wait(scd_nccl_t *t, const char *what, const char *peers, int timeout_ms)
{
	const scd_nccl_api_t *a = t->api;
	double deadline = scd_now_s() + (timeout_ms > 0 ? timeout_ms : 30000) / 1e3;
	int us = NCCL_POLL_MIN_US;
	char why[256];
	for (;;) {
		int gone = atomic_load(&t->gone);
		if (gone) { /* NCCL would wait for it forever */
			snprintf(why, sizeof why, "%s: rank %d is gone from the world", what,
				 gone - 1);
			break;
		}
		ncclResult_t state = ncclSuccess;
		ncclResult_t r = a->CommGetAsyncError(t->comm, &state);
		if (r != ncclSuccess)
			state = r;
		if (state != ncclSuccess && state != ncclInProgress) {
			const char *last = a->GetLastError(t->comm);
			snprintf(why, sizeof why, "%s: %s%s%s", what, a->GetErrorString(state),
				 last && *last ? ": " : "", last ? last : "");
			break;
		}
		if (state == ncclSuccess) {
			sc_status_t st = t->q->done();
			if (st == SC_OK)
				return SC_OK;
			if (st != SC_IN_PROGRESS) {
				snprintf(why, sizeof why, "%s: the GPU failed: %s", what,
					 t->q->error());
				break;
			}
		}
		if (scd_now_s() > deadline) {
			snprintf(why, sizeof why,
				 "%s not complete after %d ms (waiting for ranks %s)", what,
				 timeout_ms, peers);
			break;
		}
		nap(&us);
	}
	nccl_break(t, why);
	scd_transport_set_error("rank %d: NCCL %s", t->base.rank, why);
	scd_error(SCD_SUB_TRANSPORT, "rank %d: NCCL %s; communicator aborted", t->base.rank,
		  why);
	return SC_ERR_PEER;
}

/* The status of a queuing call; a failure aborts, as a failed wait does. */
static sc_status_t queued(scd_nccl_t *t, ncclResult_t r, const char *what)
{
	if (r == ncclSuccess || r == ncclInProgress)
		return SC_OK;
	char why[256];
	const char *last = t->comm ? t->api->GetLastError(t->comm) : "";
	snprintf(why, sizeof why, "%s: %s%s%s", what, t->api->GetErrorString(r),
		 last && *last ? ": " : "", last ? last : "");
	if (t->in_group) /* aborted once the group is closed (group_end) */
		snprintf(t->pending, sizeof t->pending, "%s", why);
	else
		nccl_break(t, why);
	scd_transport_set_error("rank %d: NCCL %s", t->base.rank, why);
	scd_error(SCD_SUB_TRANSPORT, "rank %d: NCCL %s; communicator aborted", t->base.rank,
		  why);
	return SC_ERR_PEER;
}

/* A group of sends and receives: NCCL's group may not outlive its communicator, so a
 * failure inside it aborts the communicator only once the group is closed. */
static void group_start(scd_nccl_t *t)
{
	t->in_group = 1;
	t->pending[0] = '\0';
	t->api->GroupStart();
}

static sc_status_t group_end(scd_nccl_t *t, sc_status_t st)
{
	ncclResult_t r = t->api->GroupEnd();
	t->in_group = 0;
	if (st != SC_OK) {
		nccl_break(t, t->pending);
		return st;
	}
	return queued(t, r, "ncclGroupEnd");
}

/* ---- world formation ---------------------------------------------------------------- */

static sc_status_t nccl_prepare(const scd_transport_cfg_t *cfg, scd_transport_endpoint_t **ep_p)
{
	const scd_nccl_api_t *a;
	if (scd_nccl_api_get(&a) != SC_OK) {
		scd_transport_set_error("%s", scd_nccl_unavailable_reason());
		return SC_ERR_UNSUPPORTED;
	}
	scd_transport_endpoint_t *ep = calloc(1, sizeof *ep);
	if (!ep) {
		scd_transport_set_error("out of memory for an NCCL endpoint");
		return SC_ERR_NOMEM;
	}
	ep->ops = &scd_transport_nccl_ops;
	if (cfg->rank == 0) { /* the others' endpoints are empty */
		ncclUniqueId id;
		ncclResult_t r = a->GetUniqueId(&id);
		if (r != ncclSuccess) {
			scd_transport_set_error("ncclGetUniqueId: %s", a->GetErrorString(r));
			free(ep);
			return SC_ERR_SYSTEM;
		}
		_Static_assert(sizeof(id) <= SCD_TRANSPORT_BLOB_MAX, "blob too small");
		memcpy(ep->blob, &id, sizeof id);
		ep->blob_len = sizeof id;
	}
	*ep_p = ep;
	return SC_OK;
}

static void nccl_release(scd_transport_endpoint_t *ep)
{
	free(ep);
}

static sc_status_t nccl_describe(const void *blob, size_t len, char *addr, size_t addr_len,
				 uint16_t *port_p)
{
	if (len != 0 && len != sizeof(ncclUniqueId)) {
		scd_transport_set_error("NCCL bootstrap blob of %zu bytes (0 or %zu)", len,
					sizeof(ncclUniqueId));
		return SC_ERR_PROTOCOL;
	}
	if (addr_len)
		snprintf(addr, addr_len, "%s", len ? "nccl root" : "nccl");
	if (port_p)
		*port_p = 0;
	return SC_OK;
}

static void nccl_destroy(scd_transport_t *base);

static sc_status_t nccl_create(scd_transport_boot_t *b, size_t scratch_bytes, int timeout_ms,
			       scd_transport_t **t_p)
{
	(void)scratch_bytes;
	scd_transport_release(b->ep);
	b->ep = NULL;
	if (b->blobs[0].len != sizeof(ncclUniqueId)) {
		scd_transport_set_error("rank 0 sent no NCCL unique id (%zu bytes)",
					b->blobs[0].len);
		return SC_ERR_PROTOCOL;
	}
	scd_nccl_t *t = calloc(1, sizeof *t);
	if (!t) {
		scd_transport_set_error("rank %d: out of memory for the NCCL transport",
					b->rank);
		return SC_ERR_NOMEM;
	}
	t->base.ops = &scd_transport_nccl_ops;
	t->base.rank = b->rank;
	t->base.size = b->size;
	snprintf(t->broken, sizeof t->broken, "never created");
	sc_status_t st = SC_ERR_UNSUPPORTED;
	if (scd_nccl_api_get(&t->api) != SC_OK) {
		scd_transport_set_error("%s", scd_nccl_unavailable_reason());
		goto fail;
	}
	if (scd_device_get(SCD_DEVICE_CUDA, &t->dev) != SC_OK ||
	    scd_cuda_queue_get(&t->q) != SC_OK) {
		scd_transport_set_error("rank %d: the cuda device is not available: %s",
					b->rank, scd_cuda_unavailable_reason());
		goto fail;
	}
	void *stream = NULL;
	if ((st = t->q->stream(&stream)) != SC_OK) { /* also makes the GPU current */
		scd_transport_set_error("the cuda device's stream: %s", t->q->error());
		goto fail;
	}
	t->stream = (cudaStream_t)stream;
	size_t hdr = 2 * (size_t)b->size * NCCL_HDR_WORDS * sizeof(uint64_t);
	t->hhdr = calloc(1, hdr);
	t->dhdr = t->dev->alloc(hdr);
	if (!t->hhdr || !t->dhdr) {
		scd_transport_set_error("rank %d: out of memory for %zu bytes of NCCL headers",
					b->rank, hdr);
		st = SC_ERR_NOMEM;
		goto fail;
	}
	ncclUniqueId id;
	memcpy(&id, b->blobs[0].data, sizeof id);
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	ncclComm_t comm = NULL;
	ncclResult_t r = t->api->CommInitRankConfig(&comm, b->size, id, b->rank, &cfg);
	t->comm = comm;
	if (r != ncclSuccess && r != ncclInProgress) {
		scd_transport_set_error("rank %d: ncclCommInitRankConfig: %s", b->rank,
					t->api->GetErrorString(r));
		if (comm)
			t->api->CommAbort(comm);
		t->comm = NULL;
		st = SC_ERR_SYSTEM;
		goto fail;
	}
	double deadline = scd_now_s() + (timeout_ms > 0 ? timeout_ms : 30000) / 1e3;
	int us = NCCL_POLL_MIN_US;
	for (;;) {
		ncclResult_t state = ncclSuccess;
		r = t->api->CommGetAsyncError(comm, &state);
		if (r != ncclSuccess)
			state = r;
		if (state == ncclSuccess)
			break;
		if (state != ncclInProgress || scd_now_s() > deadline) {
			const char *last = t->api->GetLastError(comm);
			scd_transport_set_error(
			    "rank %d: NCCL communicator of %d ranks not made: %s%s%s", b->rank,
			    b->size,
			    state == ncclInProgress ? "not every rank joined in time"
						    : t->api->GetErrorString(state),
			    last && *last ? ": " : "", last ? last : "");
			t->api->CommAbort(comm);
			t->comm = NULL;
			st = state == ncclInProgress ? SC_ERR_TIMEOUT : SC_ERR_PEER;
			goto fail;
		}
		nap(&us);
	}
	t->broken[0] = '\0';
	scd_info(SCD_SUB_TRANSPORT, "rank %d: NCCL communicator of %d ranks ready (%s)",
		 b->rank, b->size, t->api->path);
	*t_p = &t->base;
	return SC_OK;
fail:
	nccl_destroy(&t->base);
	return st;
}

static void nccl_destroy(scd_transport_t *base)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	if (!t)
		return;
	if (t->comm) {
		/* a healthy communicator is finalized (its queued work flushed), within a
		 * bound: one that does not finish is aborted */
		ncclResult_t r = t->api->CommFinalize(t->comm);
		double deadline = scd_now_s() + NCCL_FINALIZE_MS / 1e3;
		int us = NCCL_POLL_MIN_US;
		ncclResult_t state = r;
		while (r == ncclSuccess || r == ncclInProgress) {
			if (t->api->CommGetAsyncError(t->comm, &state) != ncclSuccess ||
			    state != ncclInProgress || scd_now_s() > deadline)
				break;
			nap(&us);
		}
		if (state == ncclSuccess)
			t->api->CommDestroy(t->comm);
		else
			t->api->CommAbort(t->comm);
	}
	if (t->dev && t->dhdr)
		t->dev->free(t->dhdr);
	free(t->hhdr);
	free(t);
}

/* ---- exchanges ---------------------------------------------------------------------- */

static sc_status_t check_peers(const scd_nccl_t *t, const scd_xfer_t *x, int n,
			       const char *what)
{
	for (int i = 0; i < n; i++)
		if (x[i].peer < 0 || x[i].peer >= t->base.size) {
			scd_transport_set_error("rank %d: %s %d names rank %d of %d",
						t->base.rank, what, i, x[i].peer, t->base.size);
			return SC_ERR_INVALID;
		}
	return SC_OK;
}

/* Whether an exchange can start: a communicator, and every peer a rank of it. */
static sc_status_t usable_for(scd_nccl_t *t, const scd_xfer_t *sends, int n_sends,
			      const scd_xfer_t *recvs, int n_recvs)
{
	sc_status_t st = usable(t);
	if (st == SC_OK)
		st = check_peers(t, sends, n_sends, "send");
	if (st == SC_OK)
		st = check_peers(t, recvs, n_recvs, "receive");
	return st;
}

static sc_status_t nccl_exchange(scd_transport_t *base, const scd_xfer_t *sends, int n_sends,
				 const scd_xfer_t *recvs, int n_recvs, int timeout_ms)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	const scd_nccl_api_t *a = t->api;
	int me = t->base.rank;
	sc_status_t st = usable_for(t, sends, n_sends, recvs, n_recvs);
	if (st != SC_OK)
		return st;
	/* to this rank itself: the k-th send into the k-th receive */
	int ks = 0, kr = 0;
	for (;;) {
		while (ks < n_sends && sends[ks].peer != me)
			ks++;
		while (kr < n_recvs && recvs[kr].peer != me)
			kr++;
		if (ks == n_sends || kr == n_recvs)
			break;
		if (sends[ks].bytes != recvs[kr].bytes) {
			scd_transport_set_error(
			    "rank %d: a message of %zu bytes to itself where "
			    "%zu are expected",
			    me, sends[ks].bytes, recvs[kr].bytes);
			return SC_ERR_INVALID;
		}
		t->dev->copy(recvs[kr].buf, sends[ks].buf, sends[ks].bytes);
		ks++;
		kr++;
	}
	int ops = 0;
	group_start(t);
	for (int i = 0; i < n_sends && st == SC_OK; i++)
		if (sends[i].peer != me && sends[i].bytes) {
			st = queued(t,
				    a->Send(sends[i].buf, sends[i].bytes, ncclUint8,
					    sends[i].peer, t->comm, t->stream),
				    "ncclSend");
			t->ctr.bytes_sent += sends[i].bytes;
			t->ctr.messages_sent++;
			ops++;
		}
	for (int i = 0; i < n_recvs && st == SC_OK; i++)
		if (recvs[i].peer != me && recvs[i].bytes) {
			st = queued(t,
				    a->Recv(recvs[i].buf, recvs[i].bytes, ncclUint8,
					    recvs[i].peer, t->comm, t->stream),
				    "ncclRecv");
			t->ctr.bytes_recv += recvs[i].bytes;
			ops++;
		}
	if ((st = group_end(t, st)) != SC_OK)
		return st;
	char peers[128];
	peers_text(t, sends, n_sends, recvs, n_recvs, peers, sizeof peers);
	return ops ? nccl_wait(t, "exchange", peers, timeout_ms) : t->dev->sync();
}

/* The state of an exchange_v between rounds. */
typedef struct xv {
	scd_nccl_t *t;
	const scd_xfer_t *s, *r;
	int ns, nr;
	size_t *rb;
	uint8_t *sdone, *rdone; /* per message: 1 once moved */
	int *snext, *rnext;	/* per peer: the first message not moved yet */
} xv_t;

static int next_of(const scd_xfer_t *x, const uint8_t *done, int n, int from, int peer)
{
	for (int i = from; i < n; i++)
		if (x[i].peer == peer && !done[i])
			return i;
	return n;
}

/* Messages to this rank itself whose lengths are known: copied. */
static sc_status_t xv_self(xv_t *v, int *moved)
{
	scd_nccl_t *t = v->t;
	int me = t->base.rank;
	for (;;) {
		int i = v->snext[me] = next_of(v->s, v->sdone, v->ns, v->snext[me], me);
		int j = v->rnext[me] = next_of(v->r, v->rdone, v->nr, v->rnext[me], me);
		if (i == v->ns || j == v->nr || v->s[i].bytes == SCD_XFER_PENDING)
			return SC_OK;
		if (v->s[i].bytes > v->r[j].bytes) {
			scd_transport_set_error(
			    "rank %d: a message of %zu bytes to itself does "
			    "not fit its %zu-byte receive",
			    me, v->s[i].bytes, v->r[j].bytes);
			return SC_ERR_LIMIT;
		}
		t->dev->copy(v->r[j].buf, v->s[i].buf, v->s[i].bytes);
		v->rb[j] = v->s[i].bytes;
		v->sdone[i] = v->rdone[j] = 1;
		(*moved)++;
	}
}

/* One round: headers, then the announced messages. *left: messages still to move. */
static sc_status_t xv_round(xv_t *v, int *moved, int *left, int timeout_ms)
{
	scd_nccl_t *t = v->t;
	const scd_nccl_api_t *a = t->api;
	int P = t->base.size, me = t->base.rank;
	uint64_t *hout = t->hhdr, *hin = t->hhdr + (size_t)P * NCCL_HDR_WORDS;
	uint64_t *dout = t->dhdr, *din = t->dhdr + (size_t)P * NCCL_HDR_WORDS;
	uint8_t talk_to[P], hear_from[P];
	*left = 0;
	for (int p = 0; p < P; p++) {
		uint64_t *h = hout + (size_t)p * NCCL_HDR_WORDS;
		h[0] = 0;
		talk_to[p] = hear_from[p] = 0;
		if (p == me)
			continue;
		v->snext[p] = next_of(v->s, v->sdone, v->ns, v->snext[p], p);
		v->rnext[p] = next_of(v->r, v->rdone, v->nr, v->rnext[p], p);
		talk_to[p] = v->snext[p] < v->ns;
		hear_from[p] = v->rnext[p] < v->nr;
		for (int i = v->snext[p]; i < v->ns && h[0] < NCCL_HDR_MSGS; i++) {
			if (v->s[i].peer != p || v->sdone[i])
				continue;
			if (v->s[i].bytes == SCD_XFER_PENDING)
				break; /* it and what follows wait for the work */
			h[1 + h[0]++] = v->s[i].bytes;
		}
	}
	for (int i = 0; i < v->ns; i++)
		*left += !v->sdone[i];
	for (int i = 0; i < v->nr; i++)
		*left += !v->rdone[i];
	int any = 0;
	for (int p = 0; p < P; p++)
		any |= talk_to[p] | hear_from[p];
	if (!any)
		return SC_OK;
	size_t hb = NCCL_HDR_WORDS * sizeof(uint64_t);
	t->dev->from_host(dout, hout, (size_t)P * hb);
	sc_status_t st = SC_OK;
	group_start(t);
	for (int p = 0; p < P && st == SC_OK; p++) {
		if (talk_to[p])
			st = queued(t,
				    a->Send(dout + (size_t)p * NCCL_HDR_WORDS, hb, ncclUint8, p,
					    t->comm, t->stream),
				    "ncclSend (lengths)");
		if (hear_from[p] && st == SC_OK)
			st = queued(t,
				    a->Recv(din + (size_t)p * NCCL_HDR_WORDS, hb, ncclUint8, p,
					    t->comm, t->stream),
				    "ncclRecv (lengths)");
	}
	st = group_end(t, st);
	char peers[128];
	peers_text(t, v->s, v->ns, v->r, v->nr, peers, sizeof peers);
	if (st == SC_OK)
		st = nccl_wait(t, "exchange (lengths)", peers, timeout_ms);
	if (st != SC_OK)
		return st;
	t->dev->to_host(hin, din, (size_t)P * hb);
	if ((st = t->dev->sync()) != SC_OK) {
		scd_transport_set_error("rank %d: reading the NCCL lengths: %s", me,
					t->q->error());
		return st;
	}
	/* the announced messages, checked against what this rank posted */
	for (int p = 0; p < P; p++) {
		if (!hear_from[p])
			continue;
		uint64_t *h = hin + (size_t)p * NCCL_HDR_WORDS;
		uint64_t n = h[0], k = 0;
		for (int i = v->rnext[p]; i < v->nr && k < n; i++)
			if (v->r[i].peer == p && !v->rdone[i])
				k++;
		if (n > NCCL_HDR_MSGS || k < n) {
			char why[160];
			snprintf(why, sizeof why,
				 "rank %d announced %llu messages, %llu expected", p,
				 (unsigned long long)n, (unsigned long long)k);
			nccl_break(t, why);
			scd_transport_set_error("rank %d: NCCL exchange: %s", me, why);
			return SC_ERR_PROTOCOL;
		}
		k = 0;
		for (int i = v->rnext[p]; i < v->nr && k < n; i++) {
			if (v->r[i].peer != p || v->rdone[i])
				continue;
			if (h[1 + k] > v->r[i].bytes) {
				char why[160];
				snprintf(why, sizeof why,
					 "rank %d sends %llu bytes to a %zu-byte receive", p,
					 (unsigned long long)h[1 + k], v->r[i].bytes);
				nccl_break(t, why);
				scd_transport_set_error("rank %d: NCCL exchange: %s", me, why);
				return SC_ERR_LIMIT;
			}
			k++;
		}
	}
	int ops = 0;
	group_start(t);
	for (int p = 0; p < P && st == SC_OK; p++) {
		if (p == me)
			continue;
		uint64_t *h = hout + (size_t)p * NCCL_HDR_WORDS;
		for (int i = v->snext[p], k = 0; i < v->ns && k < (int)h[0] && st == SC_OK;
		     i++) {
			if (v->s[i].peer != p || v->sdone[i])
				continue;
			if (v->s[i].bytes)
				st = queued(t,
					    a->Send(v->s[i].buf, v->s[i].bytes, ncclUint8, p,
						    t->comm, t->stream),
					    "ncclSend");
			t->ctr.bytes_sent += v->s[i].bytes;
			t->ctr.messages_sent++;
			v->sdone[i] = 1;
			ops += v->s[i].bytes > 0;
			(*moved)++;
			k++;
		}
		if (!hear_from[p])
			continue;
		h = hin + (size_t)p * NCCL_HDR_WORDS;
		for (int i = v->rnext[p], k = 0; i < v->nr && k < (int)h[0] && st == SC_OK;
		     i++) {
			if (v->r[i].peer != p || v->rdone[i])
				continue;
			if (h[1 + k])
				st = queued(t,
					    a->Recv(v->r[i].buf, h[1 + k], ncclUint8, p,
						    t->comm, t->stream),
					    "ncclRecv");
			t->ctr.bytes_recv += h[1 + k];
			v->rb[i] = h[1 + k];
			v->rdone[i] = 1;
			ops += h[1 + k] > 0;
			(*moved)++;
			k++;
		}
	}
	st = group_end(t, st);
	if (st == SC_OK && ops)
		st = nccl_wait(t, "exchange", peers, timeout_ms);
	return st;
}

static sc_status_t nccl_exchange_v(scd_transport_t *base, const scd_xfer_t *sends, int n_sends,
				   const scd_xfer_t *recvs, int n_recvs, size_t *recv_bytes_p,
				   const scd_xfer_work_t *work, int timeout_ms)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	int P = t->base.size;
	sc_status_t st = usable_for(t, sends, n_sends, recvs, n_recvs);
	if (st != SC_OK)
		return st;
	for (int i = 0; i < n_recvs; i++)
		recv_bytes_p[i] = SCD_XFER_PENDING;
	xv_t v = {
	    .t = t, .s = sends, .r = recvs, .ns = n_sends, .nr = n_recvs, .rb = recv_bytes_p};
	v.sdone = calloc((size_t)n_sends + 1, 1);
	v.rdone = calloc((size_t)n_recvs + 1, 1);
	v.snext = calloc((size_t)P, sizeof(int));
	v.rnext = calloc((size_t)P, sizeof(int));
	if (!v.sdone || !v.rdone || !v.snext || !v.rnext) {
		scd_transport_set_error("rank %d: out of memory for an exchange", t->base.rank);
		st = SC_ERR_NOMEM;
		goto out;
	}
	/* a round in which nothing moves and the work has nothing to do is waiting for a
	 * peer's work; such rounds go on until the timeout */
	double idle_since = scd_now_s();
	int us = NCCL_POLL_MIN_US;
	for (;;) {
		int moved = 0, left = 0;
		if ((st = xv_self(&v, &moved)) != SC_OK)
			goto out;
		if ((st = xv_round(&v, &moved, &left, timeout_ms)) != SC_OK)
			goto out;
		int worked = 0;
		if (work) {
			int rc;
			while ((rc = work->fn(work->arg)) > 0)
				worked = 1;
			if (rc < 0) {
				st = (sc_status_t)rc;
				goto out;
			}
		}
		left = 0;
		for (int i = 0; i < n_sends; i++)
			left += !v.sdone[i];
		for (int i = 0; i < n_recvs; i++)
			left += !v.rdone[i];
		if (!left)
			break;
		int rleft = 0, sready = 0;
		for (int i = 0; i < n_recvs; i++)
			rleft += !v.rdone[i];
		for (int i = 0; i < n_sends; i++)
			sready += !v.sdone[i] && sends[i].bytes != SCD_XFER_PENDING;
		if (!rleft && !sready && !moved && !worked) {
			scd_transport_set_error(
			    "rank %d: the exchange's work holds a send back "
			    "with nothing left to receive",
			    t->base.rank);
			st = SC_ERR_INVALID;
			goto out;
		}
		if (moved || worked) {
			idle_since = scd_now_s();
			us = NCCL_POLL_MIN_US;
		} else if ((scd_now_s() - idle_since) * 1e3 >
			   (timeout_ms > 0 ? timeout_ms : 30000)) {
			char peers[128];
			peers_text(t, sends, n_sends, recvs, n_recvs, peers, sizeof peers);
			scd_transport_set_error("rank %d: NCCL exchange: no message for %d ms "
						"(waiting for ranks %s)",
						t->base.rank, timeout_ms, peers);
			nccl_break(t, "an exchange made no progress");
			st = SC_ERR_TIMEOUT;
			goto out;
		} else {
			nap(&us);
		}
	}
	if ((st = t->dev->sync()) != SC_OK)
		scd_transport_set_error("rank %d: the GPU failed after an NCCL exchange: %s",
					t->base.rank, t->q->error());
out:
	/* a rank that gives up mid-exchange leaves its peers in NCCL: its communicator is
	 * done with (they end at their own timeout, or when the world gives it up) */
	if (st != SC_OK && t->comm)
		nccl_break(t, "an exchange failed on this rank");
	free(v.sdone);
	free(v.rdone);
	free(v.snext);
	free(v.rnext);
	return st;
}

/* ---- collectives -------------------------------------------------------------------- */

static int nccl_dtype(sc_dtype_t dtype, ncclDataType_t *out)
{
	switch (dtype) {
	case SC_FLOAT32:
		*out = ncclFloat32;
		return 1;
	case SC_FLOAT64:
		*out = ncclFloat64;
		return 1;
	case SC_INT32:
		*out = ncclInt32;
		return 1;
	case SC_INT64:
		*out = ncclInt64;
		return 1;
	default:
		return 0;
	}
}

/* SUM and AVERAGE sum (the engine divides), the others as named. */
static int nccl_op(sc_reduce_op_t op, ncclRedOp_t *out)
{
	switch (op) {
	case SC_OP_SUM:
	case SC_OP_AVERAGE:
		*out = ncclSum;
		return 1;
	case SC_OP_MIN:
		*out = ncclMin;
		return 1;
	case SC_OP_MAX:
		*out = ncclMax;
		return 1;
	case SC_OP_PRODUCT:
		*out = ncclProd;
		return 1;
	default:
		return 0;
	}
}

static sc_status_t nccl_allreduce(scd_transport_t *base, void *data, size_t n, sc_dtype_t dtype,
				  sc_reduce_op_t op, const scd_xfer_work_t *work,
				  int timeout_ms)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	(void)work; /* never run beside NCCL's queued work (see the top); the caller's */
	ncclDataType_t nt;
	ncclRedOp_t nop;
	sc_status_t st = usable(t);
	if (st != SC_OK)
		return st;
	if (!nccl_dtype(dtype, &nt) || !nccl_op(op, &nop)) {
		scd_transport_set_error("rank %d: NCCL allreduce of dtype %d, op %d",
					t->base.rank, (int)dtype, (int)op);
		return SC_ERR_INVALID;
	}
	if (!n || t->base.size == 1)
		return t->dev->sync();
	st = queued(t, t->api->AllReduce(data, data, n, nt, nop, t->comm, t->stream),
		    "ncclAllReduce");
	size_t bytes = n * sc_dtype_size(dtype);
	double P = t->base.size;
	t->ctr.bytes_sent += (uint64_t)(2 * (P - 1) / P * (double)bytes);
	t->ctr.bytes_recv += (uint64_t)(2 * (P - 1) / P * (double)bytes);
	t->ctr.messages_sent += 2 * (uint64_t)(t->base.size - 1);
	if (st != SC_OK)
		return st;
	char peers[128];
	peers_text(t, NULL, 0, NULL, 0, peers, sizeof peers);
	return nccl_wait(t, "allreduce", peers, timeout_ms);
}

static sc_status_t nccl_allreduce_f32(scd_transport_t *t, float *data, size_t n, int timeout_ms)
{
	return nccl_allreduce(t, data, n, SC_FLOAT32, SC_OP_SUM, NULL, timeout_ms);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median time of reps allreduces of n floats at buf. */
static sc_status_t timed(scd_transport_t *t, float *buf, size_t n, int reps, double *s_p,
			 int timeout_ms)
{
	double v[8];
	for (int i = 0; i < reps && i < 8; i++) {
		double t0 = scd_now_s();
		sc_status_t st = nccl_allreduce_f32(t, buf, n, timeout_ms);
		if (st != SC_OK)
			return st;
		v[i] = scd_now_s() - t0;
	}
	qsort(v, (size_t)reps, sizeof v[0], cmp_double);
	*s_p = v[reps / 2];
	return SC_OK;
}

/*
 * NCCL's alpha and beta, fitted to its ring allreduce (2(P - 1) steps moving 2(P - 1)/P of
 * the buffer): a small allreduce gives alpha, a probe_bytes one the rest. Every rank calls
 * it together; the values go through the engine's agreement like tcp's.
 */
static sc_status_t nccl_measure(scd_transport_t *base, size_t probe_bytes, double *alpha_s_p,
				double *beta_s_per_byte_p, int timeout_ms)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	double P = t->base.size;
	*alpha_s_p = 0;
	*beta_s_per_byte_p = 0;
	if (t->base.size == 1)
		return SC_OK;
	sc_status_t st = usable(t);
	if (st != SC_OK)
		return st;
	size_t n = probe_bytes / sizeof(float);
	if (n < 1024)
		n = 1024;
	float *buf = t->dev->alloc(n * sizeof(float));
	if (!buf) {
		scd_transport_set_error("rank %d: no GPU memory for a %zu-byte NCCL probe",
					t->base.rank, n * sizeof(float));
		return SC_ERR_NOMEM;
	}
	double small = 0, large = 0;
	st = timed(base, buf, 2, 1, &small, timeout_ms); /* warm-up */
	if (st == SC_OK)
		st = timed(base, buf, 2, 7, &small, timeout_ms);
	if (st == SC_OK)
		st = timed(base, buf, n, 1, &large, timeout_ms); /* warm-up */
	if (st == SC_OK)
		st = timed(base, buf, n, 5, &large, timeout_ms);
	t->dev->free(buf);
	if (st != SC_OK)
		return st;
	double steps = 2 * (P - 1), frac = 2 * (P - 1) / P;
	*alpha_s_p = small / steps;
	double rest = large - small;
	*beta_s_per_byte_p = rest > 0 ? rest / (frac * (double)(n * sizeof(float))) : 1e-12;
	return SC_OK;
}

/* From the daemon's loop thread, while the engine may be waiting: its wait (and every later
 * call) ends at the next poll with the communicator aborted, naming the rank. */
static void nccl_peer_gone(scd_transport_t *base, int rank)
{
	scd_nccl_t *t = (scd_nccl_t *)base;
	int none = 0;
	atomic_compare_exchange_strong(&t->gone, &none, rank + 1);
}

static void nccl_counters(const scd_transport_t *base, scd_transport_counters_t *c_p)
{
	*c_p = ((const scd_nccl_t *)base)->ctr;
}

const scd_transport_ops_t scd_transport_nccl_ops = {
    .name = "nccl",
    .device_memory = 1,
    .prepare = nccl_prepare,
    .create = nccl_create,
    .release = nccl_release,
    .describe = nccl_describe,
    .exchange = nccl_exchange,
    .exchange_v = nccl_exchange_v,
    .allreduce_f32 = nccl_allreduce_f32,
    .allreduce = nccl_allreduce,
    .measure = nccl_measure,
    .counters = nccl_counters,
    .destroy = nccl_destroy,
    .peer_gone = nccl_peer_gone,
};
