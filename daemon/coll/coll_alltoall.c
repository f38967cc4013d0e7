/*
 * coll_alltoall.c: the alltoall collective (sc_alltoall_async). Every trainer
 * sends send_counts[r] elements of its buffer to trainer rank r and gets, in source rank
 * order, the blocks addressed to it. The ranks are the job's: in a process set, set ranks
 * (job.h), so a node's trainers are the consecutive set ranks scd_job_first_trainer gives,
 * as many as the set holds on it, and "a node's trainers" below means those.
 *
 * Two stages, as the engine's other jobs. The compute stage packs each local trainer's
 * send blocks, back to back in local rank order, into the job's own buffer (the trainers'
 * buffers are where the received blocks land, so what they send must be out of them
 * first). The communication stage exchanges the count matrix (each node's trainers' rows:
 * state and one count per trainer), which every node then checks alike, and sends each
 * other node, in one exchange, the blocks its trainers address to that node's trainers;
 * blocks between two trainers of one node are copied locally.
 *
 * The count matrix. Each node sends every other node its trainers' rows, T + 3 words each
 * (T trainers in the job), in set rank order: the row's state, what the trainer gave (the
 * number of counts and their sum, for a refusal's message) and its T send counts. A trainer
 * with no source on its node (it has joined, or its registration went away) has an absent row:
 * it sends nothing, and nothing is sent to it. Every node holds the same matrix once the
 * exchange is done, so the refusals and the limit below are decided, and worded, alike
 * everywhere.
 *
 * The blocks. To node p, this node sends, for each of its trainers l in rank order and
 * each of p's trainers m in rank order, the block l addresses to m, from the
 * packed buffer; from p it receives in the same order, each block straight into its place
 * in the local trainer's buffer (after the blocks of the lower source ranks). So each node
 * pair exchanges once, in one exchange for the whole job, and nothing is copied on the
 * receiving side.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/ctx.h"
#include "scheme/registry.h"
#include "util/clock.h"

/*
 * What the engine lends an alltoall: host memory for staging bytes (grow-only; NULL when
 * there is none), and the copies between a trainer's buffer and the job's, which cross
 * GPUs where the trainer's tensor lives on another one than the engine's.
 */
typedef struct scd_a2a_hooks {
	void *(*stage)(void *arg, size_t bytes);
	/* bytes of src's buffer at p to dst, in the job's buffer */
	void (*copy_in)(void *arg, const scd_job_src_t *src, void *dst, const void *p,
			size_t bytes);
	/* bytes of host memory at p to src's buffer (a device's, where it is not the host) */
	sc_status_t (*copy_out)(void *arg, const scd_job_src_t *src, const void *p,
				size_t bytes);
	void *arg;
} scd_a2a_hooks_t;

/* A row's state. A2A_FAIL: the node could not take part (its counts for another world
 * size, no host memory to stage a GPU's blocks, a device error), with the status in the
 * row's second word; it still exchanges the matrix, so every node fails alike. */
enum { A2A_OK = 0, A2A_ABSENT = 1, A2A_BAD = 2, A2A_FAIL = 3 };
#define A2A_HEAD 3 /* words ahead of a row's counts: state, counts given, their sum */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/* The packed elements of a source: its send counts' sum. */
static uint64_t src_total(const scd_job_src_t *s)
{
	uint64_t n = 0;
	for (uint32_t r = 0; r < s->a2a_n && !s->a2a_bad; r++)
		n += s->a2a[r];
	return n;
}

/* The room the job's own buffer needs for the packed blocks, in bytes. */
static size_t a2a_buffer_bytes(const scd_job_t *job)
{
	const scd_job_item_t *it = &job->items[0];
	return (size_t)(it->n_src ? it->n_src : 1) * it->numel * sc_dtype_size(job->dtype);
}

/* The compute stage: the local trainers' send blocks into buf, back to back. */
static void a2a_pack(const scd_job_t *job, void *buf, const scd_a2a_hooks_t *h)
{
	const scd_job_item_t *it = &job->items[0];
	size_t esz = sc_dtype_size(job->dtype);
	char *at = buf;
	for (int s = 0; s < it->n_src; s++) {
		size_t bytes = src_total(&it->src[s]) * esz;
		h->copy_in(h->arg, &it->src[s], at, it->src[s].dense, bytes);
		at += bytes;
	}
}

/* The job's error, as the other collectives word theirs. */
#define A2A_ERR(job, ...) snprintf((job)->error, sizeof((job)->error), __VA_ARGS__)

typedef struct a2a {
	scd_job_t *job;
	const scd_device_ops_t *dev;
	int node, P, L, T;
	size_t esz, W;
	/* the job's trainers (job.h): view rank p's are the ranks first[p] to first[p + 1] - 1
	 * ([P + 1]); rank s is local rank loc[s] of view rank at[s] ([T] each) */
	int *first, *loc, *at;
	uint64_t *M;		  /* [T][W] the count matrix */
	uint64_t *recv;		  /* [T] each trainer's receive total */
	uint64_t *pbase;	  /* [L] each local trainer's first packed element */
	char *dst[SCD_MAX_LOCAL]; /* where each local trainer's result is written */
	const scd_job_src_t *src[SCD_MAX_LOCAL];
} a2a_t;

/* Rank s's row of the count matrix. */
static uint64_t *row_of(const a2a_t *a, int s)
{
	return a->M + (size_t)s * a->W;
}

/* Rank s in errors: "rank 5", in a process set "rank 5 (set rank 2)" (job.h). */
static const char *who(const a2a_t *a, int s, char *buf, size_t len)
{
	return scd_job_trainer_name(a->job, s, a->L, buf, len);
}

/* Appends to the job's error at n (its length so far), never past its end; the new length. */
static int err_add(scd_job_t *job, int n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int err_add(scd_job_t *job, int n, const char *fmt, ...)
{
	int room = (int)sizeof(job->error) - n;
	if (n < 0 || room <= 1)
		return n;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(job->error + n, (size_t)room, fmt, ap);
	va_end(ap);
	return k < 0 ? n : k < room ? n + k : (int)sizeof(job->error) - 1;
}

/* Checks the rows view rank p sent: a state they can have, and counts that fit the
 * tensor. */
static sc_status_t rows_check(a2a_t *a, int p, uint64_t numel)
{
	scd_job_t *job = a->job;
	for (int s = a->first[p]; s < a->first[p + 1]; s++) {
		uint64_t *row = row_of(a, s), sum = 0;
		char name[64];
		for (int r = 0; r < a->T; r++)
			sum = sat_add(sum, row[A2A_HEAD + r]);
		if (row[0] > A2A_FAIL || (row[0] == A2A_OK && sum > numel) ||
		    (row[0] != A2A_OK && sum) ||
		    (row[0] == A2A_FAIL && (row[1] == 0 || row[1] > 64))) {
			A2A_ERR(
			    job,
			    "alltoall of tensor '%s': node %d sent the send counts of %s in "
			    "state %llu summing to %llu, over the tensor's %llu elements or "
			    "malformed",
			    job->items[0].name ? job->items[0].name : "?", scd_job_node(job, p),
			    who(a, s, name, sizeof(name)), (unsigned long long)row[0],
			    (unsigned long long)sum, (unsigned long long)numel);
			return SC_ERR_PROTOCOL;
		}
	}
	return SC_OK;
}

/* The status a failed node put in its rows (rows_check bounded it). */
static sc_status_t fail_status(const uint64_t *row)
{
	return (sc_status_t)(-(int)row[1]);
}

/* A node that could not take part, every rank's refused counts, or every rank's receive
 * when one is over the tensor's size: the same verdict on every node, from the same
 * matrix (and the same words, but for a failed node's own, which names the cause). */
static sc_status_t matrix_check(a2a_t *a, uint64_t numel)
{
	scd_job_t *job = a->job;
	int T = a->T;
	const char *name = job->items[0].name ? job->items[0].name : "?";
	char rn[64];
	int n = 0, bad = 0;
	for (int k = 0; k < T; k++) {
		/* this node's own rows first: its words name the cause */
		int s = (a->first[a->node] + k) % T;
		const uint64_t *row = row_of(a, s);
		if (row[0] != A2A_FAIL)
			continue;
		if (a->at[s] != a->node)
			A2A_ERR(job,
				"alltoall of tensor '%s' failed on node %d (%s): %s (its log "
				"says why)",
				name, scd_job_node(job, a->at[s]), who(a, s, rn, sizeof(rn)),
				sc_status_message(fail_status(row)));
		return fail_status(row);
	}
	for (int s = 0; s < T; s++) {
		const uint64_t *row = row_of(a, s);
		if (row[0] != A2A_BAD)
			continue;
		if (!bad++)
			n = err_add(
			    job, 0,
			    "alltoall of tensor '%s' (%llu elements, %d trainers): send "
			    "counts refused:",
			    name, (unsigned long long)numel, T);
		n = err_add(job, n, "%s %s gave %llu counts summing to %llu",
			    bad > 1 ? "," : "", who(a, s, rn, sizeof(rn)),
			    (unsigned long long)row[1], (unsigned long long)row[2]);
	}
	if (bad)
		return SC_ERR_INVALID;
	int over = -1;
	for (int q = 0; q < T; q++) {
		a->recv[q] = 0;
		for (int s = 0; s < T && row_of(a, q)[0] != A2A_ABSENT; s++)
			a->recv[q] = sat_add(a->recv[q], row_of(a, s)[A2A_HEAD + q]);
		if (a->recv[q] > numel && over < 0)
			over = q;
	}
	if (over < 0)
		return SC_OK;
	n = err_add(job, 0,
		    "alltoall of tensor '%s': %s would receive %llu elements, over its %llu "
		    "(received by rank:",
		    name, who(a, over, rn, sizeof(rn)), (unsigned long long)a->recv[over],
		    (unsigned long long)numel);
	/* the list stops short of the end, so that its close always fits */
	for (int q = 0; q < T && n < (int)sizeof(job->error) - 64; q++)
		n = err_add(job, n, "%s %s: %llu", q ? "," : "", who(a, q, rn, sizeof(rn)),
			    (unsigned long long)a->recv[q]);
	err_add(job, n < (int)sizeof(job->error) - 2 ? n : (int)sizeof(job->error) - 2, ")");
	return SC_ERR_LIMIT;
}

/* Element offset of rank s's block to rank q in s's send order. */
static uint64_t send_off(const a2a_t *a, int s, int q)
{
	const uint64_t *c = row_of(a, s) + A2A_HEAD;
	uint64_t o = 0;
	for (int r = 0; r < q; r++)
		o += c[r];
	return o;
}

/* Element offset of the block from rank s in rank q's result. */
static uint64_t recv_off(const a2a_t *a, int s, int q)
{
	uint64_t o = 0;
	for (int r = 0; r < s; r++)
		o += row_of(a, r)[A2A_HEAD + q];
	return o;
}

/* The blocks: local ones copied, the others in one exchange (x: room for every send and
 * receive, allocated before the count matrix went out). The packed sends are on the host
 * already; the local copies are waited for with the results. */
static sc_status_t blocks(a2a_t *a, const char *packed_dev, char *packed_host,
			  scd_transport_t *t, scd_xfer_t *x, size_t nx)
{
	scd_job_t *job = a->job;
	int me = a->node, P = a->P, m0 = a->first[me], m1 = a->first[me + 1];
	int ns = 0, nr = 0, host = scd_device_host_memory(a->dev);
	for (int s = m0; s < m1; s++) {
		if (!a->src[a->loc[s]])
			continue;
		for (int q = m0; q < m1; q++) { /* between two trainers of this node */
			int m = a->loc[q];
			uint64_t n = row_of(a, s)[A2A_HEAD + q];
			if (!a->src[m] || !n)
				continue;
			const char *from =
			    packed_dev + (a->pbase[a->loc[s]] + send_off(a, s, q)) * a->esz;
			char *to = a->dst[m] + recv_off(a, s, q) * a->esz;
			if (host)
				a->dev->copy(to, from, n * a->esz);
			else
				a->dev->to_host(to, from, n * a->esz);
		}
	}
	for (int p = 0; p < P; p++) {
		if (p == me)
			continue;
		for (int s = m0; s < m1; s++) /* ours to p's, in p's order */
			for (int q = a->first[p]; q < a->first[p + 1] && a->src[a->loc[s]];
			     q++) {
				uint64_t n = row_of(a, s)[A2A_HEAD + q];
				if (n && row_of(a, q)[0] != A2A_ABSENT)
					x[ns++] =
					    (scd_xfer_t){p,
							 packed_host + (a->pbase[a->loc[s]] +
									send_off(a, s, q)) *
									   a->esz,
							 n * a->esz};
			}
		for (int s = a->first[p]; s < a->first[p + 1];
		     s++) /* p's to ours, in our order */
			for (int q = m0; q < m1; q++) {
				int m = a->loc[q];
				uint64_t n = row_of(a, s)[A2A_HEAD + q];
				if (n && a->src[m])
					x[nx + (size_t)nr++] = (scd_xfer_t){
					    p, a->dst[m] + recv_off(a, s, q) * a->esz,
					    n * a->esz};
			}
	}
	sc_status_t st = scd_transport_exchange(t, x, ns, x + nx, nr, job->timeout_ms);
	if (st != SC_OK)
		A2A_ERR(job, "alltoall of tensor '%s' (%s): %s",
			job->items[0].name ? job->items[0].name : "?",
			sc_dtype_name((sc_dtype_t)job->dtype), scd_transport_error());
	return st;
}

/* The results: each local trainer's counts from every rank, and their total. */
static sc_status_t results(a2a_t *a, const scd_a2a_hooks_t *h)
{
	for (int q = a->first[a->node]; q < a->first[a->node + 1]; q++) {
		int m = a->loc[q];
		const scd_job_src_t *s = a->src[m];
		sc_status_t st;
		if (!s)
			continue;
		if (!scd_device_host_memory(a->dev) &&
		    (st = h->copy_out(h->arg, s, a->dst[m], a->recv[q] * a->esz)) != SC_OK)
			return st;
		for (int r = 0; r < a->T; r++)
			s->a2a[r] = row_of(a, r)[A2A_HEAD + q];
		*s->result_nnz = a->recv[q];
	}
	return a->dev->sync();
}

/* The job's trainers by view rank (a->first, a->loc, a->at: job.h, whose layout the engine
 * checked). */
static void a2a_layout(a2a_t *a)
{
	for (int p = 0; p <= a->P; p++)
		a->first[p] = scd_job_first_trainer(a->job, p, a->P, a->L);
	for (int p = 0; p < a->P; p++)
		for (int s = a->first[p]; s < a->first[p + 1]; s++) {
			a->at[s] = p;
			a->loc[s] = scd_job_global_rank(a->job, s, a->L) % a->L;
		}
}

/* This node's rows: its trainers' states and counts, absent where none submitted; the
 * elements its sources packed. */
static uint64_t own_rows(a2a_t *a)
{
	const scd_job_item_t *it = &a->job->items[0];
	uint64_t packed = 0;
	for (int s = a->first[a->node]; s < a->first[a->node + 1]; s++)
		row_of(a, s)[0] = A2A_ABSENT;
	for (int k = 0; k < it->n_src; k++) {
		const scd_job_src_t *src = &it->src[k];
		int l = src->local_rank, s = scd_job_set_rank(a->job, a->node, l, a->L);
		if (s < 0)
			continue; /* not a trainer of the job's (ctl gives none such) */
		uint64_t *row = row_of(a, s);
		a->src[l] = src;
		a->pbase[l] = packed;
		packed += src_total(src);
		row[0] = src->a2a_bad ? A2A_BAD : A2A_OK;
		row[1] = src->a2a_given;
		row[2] = src->a2a_sum;
		if (!src->a2a_bad)
			memcpy(row + A2A_HEAD, src->a2a, sizeof(uint64_t) * (size_t)a->T);
	}
	return packed;
}

/* The count matrix: this node's rows to every other node, theirs from each. */
static sc_status_t counts(a2a_t *a, scd_transport_t *t, scd_xfer_t *x)
{
	int ns = 0, nr = 0, me = a->node, P = a->P;
	size_t rb = a->W * sizeof(uint64_t);
	for (int p = 0; p < P; p++)
		if (p != me) {
			x[ns++] = (scd_xfer_t){p, row_of(a, a->first[me]),
					       (size_t)(a->first[me + 1] - a->first[me]) * rb};
			x[P + nr++] =
			    (scd_xfer_t){p, row_of(a, a->first[p]),
					 (size_t)(a->first[p + 1] - a->first[p]) * rb};
		}
	return scd_transport_exchange(t, x, ns, x + P, nr, a->job->timeout_ms);
}

/*
 * The communication stage on node `node` of P, L trainers a node: the count matrix, its
 * checks, the blocks. On success every local trainer's buffer holds what it received in
 * source rank order, its a2a counts what it received from each rank and its result_nnz
 * their total. Refused counts (SC_ERR_INVALID), a receive over the tensor's size
 * (SC_ERR_LIMIT) and malformed counts from a peer (SC_ERR_PROTOCOL) fail it, with
 * job->error naming the ranks, alike on every node. A buffer the transport cannot reach
 * (a GPU's) goes through host staging from h.
 */
static sc_status_t a2a_run(scd_job_t *job, const scd_device_ops_t *dev, scd_transport_t *t,
			   int node, int P, int L, void *buf, const scd_a2a_hooks_t *h)
{
	const scd_job_item_t *it = &job->items[0];
	const char *name = it->name ? it->name : "?";
	a2a_t a = {.job = job, .dev = dev, .node = node, .P = P, .L = L};
	sc_status_t mine = SC_OK; /* this node's own failure, before the matrix goes out */
	a.T = scd_job_trainers(job, P, L);
	a.esz = sc_dtype_size(job->dtype);
	a.W = (size_t)a.T + A2A_HEAD;
	for (int s = 0; s < it->n_src && mine == SC_OK; s++)
		if (it->src[s].a2a_n != (uint32_t)a.T || L > SCD_MAX_LOCAL) {
			A2A_ERR(job,
				"alltoall of tensor '%s': local rank %d gave counts for %u "
				"trainers, the job now has %d",
				name, it->src[s].local_rank, it->src[s].a2a_n, a.T);
			mine = SC_ERR_INVALID;
		}
	double t0 = scd_now_s();
	/* everything that can fail locally comes before the count matrix goes out: the
	 * matrix, the transfers' lists (nx each way for the blocks) and a GPU's staging */
	size_t nx = (size_t)(P > 1 ? P - 1 : 1) * (size_t)L * (size_t)L;
	a.M = calloc((size_t)a.T * a.W + (size_t)a.T + (size_t)L, sizeof(uint64_t));
	a.first = malloc(sizeof(int) * ((size_t)P + 1 + 2 * (size_t)a.T));
	scd_xfer_t *x = malloc(sizeof(*x) * 2 * (nx > (size_t)P ? nx : (size_t)P));
	if (!a.M || !a.first || !x) {
		/* without the matrix this node cannot even say it failed: its peers' count
		 * exchange ends at the operation's timeout, naming it */
		free(a.M);
		free(a.first);
		free(x);
		A2A_ERR(job, "alltoall of tensor '%s': out of memory", name);
		return SC_ERR_NOMEM;
	}
	a.loc = a.first + P + 1;
	a.at = a.loc + a.T;
	a.recv = a.M + (size_t)a.T * a.W;
	a.pbase = a.recv + a.T;
	a2a_layout(&a);
	uint64_t packed = mine == SC_OK ? own_rows(&a) : 0;
	/* a GPU's blocks go through host staging: the packed sends first, then room for
	 * every local trainer's result (each at most the tensor's size) */
	char *packed_host = buf, *hs = NULL;
	if (mine == SC_OK && !scd_device_host_memory(dev)) {
		size_t bytes = (packed + (uint64_t)L * it->numel) * a.esz;
		if (!(hs = h->stage(h->arg, bytes + 1))) {
			A2A_ERR(job,
				"alltoall of tensor '%s': no host memory to stage %zu bytes",
				name, bytes);
			mine = SC_ERR_NOMEM;
		} else {
			dev->to_host(hs, buf, packed * a.esz);
			packed_host = hs;
		}
	}
	if (mine == SC_OK && (mine = dev->sync()) != SC_OK)
		A2A_ERR(job,
			"alltoall of tensor '%s': the %s device failed packing the blocks: %s",
			name, dev->name, sc_status_message(mine));
	if (mine != SC_OK)
		for (int s = a.first[node]; s < a.first[node + 1]; s++) {
			uint64_t *row = row_of(&a, s);
			memset(row, 0, a.W * sizeof(uint64_t));
			row[0] = A2A_FAIL;
			row[1] = (uint64_t)(-(int)mine);
		}
	sc_status_t st = counts(&a, t, x);
	if (st != SC_OK)
		A2A_ERR(job, "alltoall of tensor '%s': counts: %s", name,
			scd_transport_error());
	for (int p = 0; p < P && st == SC_OK; p++)
		if (p != node)
			st = rows_check(&a, p, it->numel);
	if (st == SC_OK)
		st = matrix_check(&a, it->numel);
	/* where the blocks go: the trainers' buffers, or the staging after the packed sends */
	char *at = hs ? hs + packed * a.esz : NULL;
	for (int q = a.first[node]; q < a.first[node + 1] && st == SC_OK; q++) {
		int m = a.loc[q];
		if (!a.src[m])
			continue;
		a.dst[m] = hs ? at : a.src[m]->dense;
		if (hs)
			at += a.recv[q] * a.esz;
	}
	if (st == SC_OK)
		st = blocks(&a, buf, packed_host, t, x, nx);
	if (st == SC_OK && (st = results(&a, h)) != SC_OK)
		A2A_ERR(
		    job,
		    "alltoall of tensor '%s': the %s device failed delivering the blocks: %s",
		    name, dev->name, sc_status_message(st));
	job->exchange_s = scd_now_s() - t0;
	job->scheme = SCD_SCHEME_DENSE_RING;
	job->density = job->gamma = job->imbalance = 1;
	free(x);
	free(a.M);
	free(a.first);
	return st;
}

/* What an alltoall borrows from the engine : its host staging, and the
 * peer copies of a trainer's buffer on another GPU than the engine's (through the peer
 * staging area on the engine GPU, which scd_job_stage_reserve sized for a whole tensor). */
typedef struct a2a_ctx {
	scd_coll_stage_t *stage;
	const scd_device_ops_t *dev;
	const scd_job_item_t *it;
	scd_stage_t *pe; /* the calling stage's area */
} a2a_ctx_t;

static void *alltoall_stage(void *arg, size_t bytes)
{
	a2a_ctx_t *a = arg;
	return scd_job_stage_host(a->stage, a->dev, bytes);
}

static void alltoall_copy_in(void *arg, const scd_job_src_t *src, void *dst, const void *p,
			     size_t bytes)
{
	a2a_ctx_t *a = arg;
	if (!scd_job_stage_local(a->pe, src))
		scd_job_stage_copy_in(a->pe, a->it, src, dst, p, bytes);
	else
		a->dev->copy(dst, p, bytes);
}

static sc_status_t alltoall_copy_out(void *arg, const scd_job_src_t *src, const void *p,
				     size_t bytes)
{
	a2a_ctx_t *a = arg;
	return scd_stage_from_host(a->pe, scd_job_stage_src(a->it, src), src->dense, p, bytes);
}

static scd_a2a_hooks_t alltoall_hooks(a2a_ctx_t *a)
{
	return (scd_a2a_hooks_t){alltoall_stage, alltoall_copy_in, alltoall_copy_out, a};
}

static sc_status_t alltoall_gather(scd_coll_ctx_t *x, scd_job_t *job)
{
	a2a_ctx_t ac = {x->stage, x->dev, &job->items[0], x->pe};
	scd_a2a_hooks_t h = alltoall_hooks(&ac);
	a2a_pack(job, x->buf, &h);
	return SC_OK;
}

static sc_status_t alltoall_run(scd_coll_ctx_t *x, scd_job_t *job)
{
	/* the results' copies to trainers on other GPUs: this stage's own area */
	sc_status_t st = scd_job_stage_reserve(&x->stage->peer_out, x->dev, job, x->kind);
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "no room on the engine GPU cuda:%d to copy the alltoall's results to "
			 "the node's other GPUs: %s",
			 scd_device_home(x->kind), sc_status_message(st));
		return st;
	}
	a2a_ctx_t ac = {x->stage, x->dev, &job->items[0], &x->stage->peer_out};
	scd_a2a_hooks_t h = alltoall_hooks(&ac);
	return a2a_run(job, x->dev, x->mesh, x->rank, x->world_size, x->local_size, x->buf, &h);
}

/* P - 1 messages' latency and the bytes this node sent. */
static void alltoall_predict(const scd_coll_ctx_t *x, scd_job_t *job)
{
	int P = x->world_size;
	job->predicted_s =
	    P > 1 ? (P - 1) * x->alpha_s + (double)job->bytes_sent * x->beta_s_per_byte : 0;
}

static uint64_t alltoall_buffer_bytes(const scd_job_t *job)
{
	return a2a_buffer_bytes(job);
}

static void alltoall_fill_src(scd_job_src_t *s, uint64_t given, uint64_t *result_nnz)
{
	(void)given;
	s->result_nnz = result_nnz;
}

static uint32_t alltoall_pack(const scd_coll_t *c)
{
	(void)c;
	return SCD_OP_ALLTOALL;
}

static int alltoall_unpack(uint32_t word, scd_coll_t *c)
{
	(void)c;
	return word == SCD_OP_ALLTOALL;
}

static void alltoall_describe(const scd_coll_t *c, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "alltoall");
}

/* Dense input of a tensor without a sparsifier or a COO area (the counts themselves are
 * checked by ctl, which keeps them, and by every node alike, above). */
static sc_status_t alltoall_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	if (rq->coo) {
		snprintf(err, len,
			 "alltoall of tensor '%s': asked together with another collective",
			 rq->tensor);
		return SC_ERR_INVALID;
	}
	if (rq->sparsifier || rq->coo_area) {
		snprintf(err, len,
			 "alltoall of tensor '%s': a tensor with a sparsifier or COO input "
			 "takes sum and average only",
			 rq->tensor);
		return SC_ERR_UNSUPPORTED;
	}
	return SC_OK;
}

const scd_coll_desc_t scd_coll_alltoall = {
    .name = "alltoall",
    .psets = 1,
    .counts_back = 1,
    .pack = alltoall_pack,
    .unpack = alltoall_unpack,
    .describe = alltoall_describe,
    .check = alltoall_check,
    .fill_src = alltoall_fill_src,
    .buffer_bytes = alltoall_buffer_bytes,
    .gather = alltoall_gather,
    .run = alltoall_run,
    .predict = alltoall_predict,
};
