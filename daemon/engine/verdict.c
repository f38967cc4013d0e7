/* verdict.c: see verdict.h. */
#include "engine/verdict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Wire form, little-endian: bits 0-31 the count (saturated), 32-47 the item, 48-55 the
 * local rank, 56-63 the kind (0: no fault). */
uint64_t scd_fault_pack(const scd_fault_t *f)
{
	if (f->kind == SCD_FAULT_NONE)
		return 0;
	uint64_t count = f->count < UINT32_MAX ? f->count : UINT32_MAX;
	return (uint64_t)f->kind << 56 | (uint64_t)(f->local_rank & 0xff) << 48 |
	       (uint64_t)(f->item & 0xffff) << 32 | count;
}

scd_fault_t scd_fault_unpack(uint64_t w)
{
	scd_fault_t f = {.kind = (scd_fault_kind_t)(w >> 56),
			 .local_rank = (int)(w >> 48 & 0xff),
			 .item = (uint32_t)(w >> 32 & 0xffff),
			 .count = w & 0xffffffffu};
	return f;
}

sc_status_t scd_fault_status(const scd_fault_t *f)
{
	if (f->kind != SCD_FAULT_LOCAL)
		return SC_ERR_INVALID;
	/* an error status this build knows; anything else is a failure all the same */
	sc_status_t st = f->count <= 0xffff ? (sc_status_t)(-(int)f->count) : SC_ERR_SYSTEM;
	if (st == SC_OK || !strcmp(sc_status_name(st), "SC_UNKNOWN_STATUS"))
		return SC_ERR_SYSTEM;
	return st;
}

/* What a local fault failed on: the item's tensor, or every tensor of the buffer. */
static void local_what(const scd_job_t *job, const scd_fault_t *f, char *buf, size_t len)
{
	if (f->item < (uint32_t)job->n_items) {
		const scd_job_item_t *it = &job->items[f->item];
		snprintf(buf, len, "tensor '%s'", it->name ? it->name : "?");
		return;
	}
	int n =
	    snprintf(buf, len, "the buffer of %s", job->n_items == 1 ? "tensor" : "tensors");
	for (int i = 0; i < job->n_items && n > 0 && (size_t)n < len - 32; i++)
		n += snprintf(buf + n, len - (size_t)n, "%s'%s'", i ? ", " : " ",
			      job->items[i].name ? job->items[i].name : "?");
	if (job->n_items == 0)
		snprintf(buf, len, "the buffer");
}

/* A local fault: the node and its trainers' ranks, the tensor and the status. */
static void describe_local(const scd_job_t *job, int rank, int local_size, const scd_fault_t *f,
			   char *msg, size_t len)
{
	char what[300], ranks[96];
	local_what(job, f, what, sizeof(what));
	/* its trainers in the job: in a process set, the set's members on it (job.h) */
	int q = scd_job_view_rank(job, rank), k = 0, n = 0, mine[SCD_MAX_LOCAL];
	for (int l = 0; l < local_size && l < SCD_MAX_LOCAL; l++)
		if (!job->nodes || (q >= 0 && scd_job_set_rank(job, q, l, local_size) >= 0))
			mine[k++] = rank * local_size + l;
	n = snprintf(ranks, sizeof(ranks), "rank%s", k > 1 ? "s" : "");
	for (int i = 0; i < k && (size_t)n < sizeof(ranks) - 16; i++)
		n += snprintf(ranks + n, sizeof(ranks) - (size_t)n, "%s%d", i ? ", " : " ",
			      mine[i]);
	if (job->nodes && (size_t)n < sizeof(ranks) - 24)
		snprintf(ranks + n, sizeof(ranks) - (size_t)n, " of process set %u", job->pset);
	sc_status_t st = scd_fault_status(f);
	snprintf(msg, len,
		 "node %d (%s) failed preparing %s for the exchange (%s: %s): the operation "
		 "fails on every rank; that node's log says why",
		 rank, ranks, what, sc_status_name(st), sc_status_message(st));
}

void scd_verdict_describe(const scd_job_t *job, int rank, int local_size, const scd_fault_t *f,
			  char *msg, size_t len)
{
	if (f->kind == SCD_FAULT_LOCAL) {
		describe_local(job, rank, local_size, f, msg, len);
		return;
	}
	const scd_job_item_t *it =
	    f->item < (uint32_t)job->n_items ? &job->items[f->item] : NULL;
	char tensor[300];
	if (it && it->name)
		snprintf(tensor, sizeof(tensor), "tensor '%s'", it->name);
	else
		snprintf(tensor, sizeof(tensor), "item %u of the buffer", f->item);
	int trainer = rank * local_size + f->local_rank;
	if (f->kind == SCD_FAULT_NO_ROOT)
		snprintf(msg, len,
			 "broadcast of %s: its root, rank %d (node %d, local rank %d), gave no "
			 "values (it has joined, or no longer holds the tensor): the operation "
			 "fails on every rank",
			 tensor, trainer, rank, f->local_rank);
	else if (f->kind == SCD_FAULT_COO_RANGE)
		snprintf(msg, len,
			 "rank %d (node %d, local rank %d) sent %llu COO indices out of range "
			 "for %s of %llu elements: the operation fails on every rank",
			 trainer, rank, f->local_rank, (unsigned long long)f->count, tensor,
			 (unsigned long long)(it ? it->numel : 0));
	else
		snprintf(
		    msg, len,
		    "rank %d (node %d, local rank %d) sent %llu non-finite values (NaN or "
		    "infinity) in %s (nonfinite = error): the operation fails on every rank",
		    trainer, rank, f->local_rank, (unsigned long long)f->count, tensor);
}

/* Rank's words: the fault's 8 bytes, then the flags' 4, little-endian. */
static void words_put(uint8_t *w, const scd_fault_t *f, uint32_t flags)
{
	uint64_t v = scd_fault_pack(f);
	memset(w, 0, SCD_VERDICT_BYTES);
	for (int b = 0; b < 8; b++)
		w[b] = (uint8_t)(v >> (8 * b));
	for (int b = 0; b < 4; b++)
		w[8 + b] = (uint8_t)(flags >> (8 * b));
}

/* Every rank's words (rank q's at words + q x stride) decided alike on every rank: the
 * lowest faulty rank's status with job->error describing it and that rank in *faulty_p,
 * else SC_OK; *flags_and gets the flags every rank set. */
static sc_status_t words_decide(scd_job_t *job, const uint8_t *words, size_t stride, int P,
				int local_size, int *faulty_p, uint32_t *flags_and)
{
	sc_status_t st = SC_OK;
	*faulty_p = -1;
	for (int q = 0; q < P && st == SC_OK; q++) {
		const uint8_t *w = words + (size_t)q * stride;
		uint64_t v = 0;
		uint32_t fl = 0;
		for (int b = 0; b < 8; b++)
			v |= (uint64_t)w[b] << (8 * b);
		for (int b = 0; b < 4; b++)
			fl |= (uint32_t)w[8 + b] << (8 * b);
		*flags_and &= fl;
		scd_fault_t f = scd_fault_unpack(v);
		if (f.kind == SCD_FAULT_NONE)
			continue;
		/* a process set's view ranks its nodes by their index in job->nodes */
		scd_verdict_describe(job, scd_job_node(job, q), local_size, &f, job->error,
				     sizeof(job->error));
		st = scd_fault_status(&f);
		*faulty_p = q;
	}
	return st;
}

sc_status_t scd_verdict_round(scd_transport_t *t, scd_job_t *job, const scd_fault_t *mine,
			      uint32_t flags, int local_size, int timeout_ms, int *faulty_p,
			      uint32_t *flags_and)
{
	enum { W = SCD_VERDICT_BYTES };
	*faulty_p = -1;
	*flags_and = flags;
	int P = t->size, me = t->rank;
	uint8_t *in = malloc((size_t)P * W);
	scd_xfer_t *x = malloc(sizeof(*x) * 2 * (size_t)P);
	if (!in || !x) {
		free(in);
		free(x);
		snprintf(job->error, sizeof(job->error),
			 "no memory for the input check round of %d ranks", P);
		return SC_ERR_NOMEM;
	}
	words_put(in + (size_t)me * W, mine, flags);
	scd_xfer_t *sends = x, *recvs = x + P;
	int k = 0;
	for (int q = 0; q < P; q++) {
		if (q == me)
			continue;
		/* 12 bytes on the wire, as before the words were padded */
		sends[k] = (scd_xfer_t){q, in + (size_t)me * W, 12};
		recvs[k] = (scd_xfer_t){q, in + (size_t)q * W, 12};
		k++;
	}
	sc_status_t st = k ? scd_transport_exchange(t, sends, k, recvs, k, timeout_ms) : SC_OK;
	if (st != SC_OK)
		snprintf(job->error, sizeof(job->error), "the input check round: %s",
			 scd_transport_error());
	else
		st = words_decide(job, in, W, P, local_size, faulty_p, flags_and);
	free(in);
	free(x);
	return st;
}

/* The name of an item's tensor, for errors. */
static const char *item_name(const scd_job_item_t *it)
{
	return it->name ? it->name : "?";
}

/* What nonfinite = warn lets through, in the log. */
static void warn_nonfinite(const scd_job_t *job, int rank)
{
	for (int i = 0; i < job->n_items && job->nonfinite == SCD_NONFINITE_WARN; i++)
		if (job->items[i].nonfinite)
			scd_warn(
			    SCD_SUB_ENGINE,
			    "rank %d: tensor '%s': %llu non-finite values (NaN or infinity) "
			    "in this node's input, summed as they are (nonfinite = warn)",
			    rank, item_name(&job->items[i]),
			    (unsigned long long)job->items[i].nonfinite);
}

_Static_assert(sizeof(((scd_verdict_carry_t *)0)->mine_error) ==
		   sizeof(((scd_job_t *)0)->error),
	       "a carried verdict keeps the job's whole error text");

/* A failed check (st; faulty the rank it names, < 0: the exchange itself failed): the
 * rank whose compute stage failed (f, its error text mine) keeps its own account of why
 * after the error every rank shares, or has it as the error when the exchange failed. */
static sc_status_t verdict_fail(scd_job_t *job, const scd_fault_t *f, sc_status_t st,
				int faulty, char *mine)
{
	if (f->kind == SCD_FAULT_LOCAL) {
		mine[sizeof(job->error) - 1] = 0;
		if (faulty < 0) { /* the exchange failed: this node's failure is the error */
			st = scd_fault_status(f);
			memcpy(job->error, mine, sizeof(job->error));
		} else {
			size_t n = strlen(job->error);
			snprintf(job->error + n, sizeof(job->error) - n, "; here: %s", mine);
		}
	}
	job->status = st;
	scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
	return st;
}

/* See verdict.h. Logs what nonfinite = warn lets through; then the input check round, which
 * fails the job on every rank when some rank found a fault in its input or failed its
 * compute stage. */
sc_status_t scd_verdict_input(scd_transport_t *t, scd_job_t *job, const scd_fault_t *f,
			      int rank, int local_size, int *all_cuda)
{
	warn_nonfinite(job, rank);
	char mine[sizeof(job->error)];
	if (f->kind == SCD_FAULT_LOCAL)
		memcpy(mine, job->error, sizeof(mine));
	int faulty;
	uint32_t flags = job->run.kind == SCD_DEVICE_CUDA ? SCD_VERDICT_CUDA : 0, agreed = 0;
	sc_status_t st =
	    scd_verdict_round(t, job, f, flags, local_size, job->timeout_ms, &faulty, &agreed);
	*all_cuda = (agreed & SCD_VERDICT_CUDA) != 0;
	if (st == SC_OK)
		return SC_OK;
	return verdict_fail(job, f, st, faulty, mine);
}

static sc_status_t carry_decide(scd_verdict_carry_t *v, scd_job_t *job, const uint8_t *words,
				size_t stride, int P)
{
	int faulty;
	uint32_t flags = 0;
	sc_status_t st = words_decide(job, words, stride, P, v->local_size, &faulty, &flags);
	if (st == SC_OK)
		return SC_OK;
	v->failed = 1;
	return verdict_fail(job, &v->fault, st, faulty, v->mine_error);
}

void scd_verdict_carry_init(scd_verdict_carry_t *v, scd_job_t *job, const scd_fault_t *f,
			    int rank, int local_size)
{
	warn_nonfinite(job, rank);
	*v = (scd_verdict_carry_t){.faulty = f->kind != SCD_FAULT_NONE,
				   .decide = carry_decide,
				   .local_size = local_size,
				   .fault = *f};
	if (f->kind == SCD_FAULT_LOCAL)
		memcpy(v->mine_error, job->error, sizeof(v->mine_error));
	words_put(v->mine, f, 0);
	v->words_bytes = SCD_VERDICT_BYTES;
}

int scd_verdict_carry_end(scd_verdict_carry_t *v, scd_job_t *job, sc_status_t st)
{
	if (v->failed || v->discarded)
		return 1;
	if (v->fault.kind != SCD_FAULT_LOCAL)
		return 0;
	verdict_fail(job, &v->fault, st, -1, v->mine_error);
	return 1;
}

static void put_le(uint8_t *w, uint64_t v, int n)
{
	for (int b = 0; b < n; b++)
		w[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t get_le(const uint8_t *w, int n)
{
	uint64_t v = 0;
	for (int b = 0; b < n; b++)
		v |= (uint64_t)w[b] << (8 * b);
	return v;
}

void scd_fast_words_put(uint8_t *w, const scd_fast_t *f, uint64_t bytes)
{
	put_le(w, SCD_FAST_MAGIC, 2);
	put_le(w + 2, f->leave ? SCD_FAST_LEAVE : SCD_FAST_READY, 2);
	put_le(w + 4, bytes < UINT32_MAX ? bytes : UINT32_MAX, 4);
	put_le(w + 8, f->epoch, 8);
	put_le(w + 16, f->turn, 8);
	put_le(w + 24, f->digest, 8);
}

/* One rank's fast words, read back. */
typedef struct fast_words {
	uint32_t magic, kind, bytes;
	uint64_t epoch, turn, digest;
} fast_words_t;

static fast_words_t fast_words_get(const uint8_t *w)
{
	return (fast_words_t){.magic = (uint32_t)get_le(w, 2),
			      .kind = (uint32_t)get_le(w + 2, 2),
			      .bytes = (uint32_t)get_le(w + 4, 4),
			      .epoch = get_le(w + 8, 8),
			      .turn = get_le(w + 16, 8),
			      .digest = get_le(w + 24, 8)};
}

/* The tensor a fast turn's errors name (a fast buffer holds its epoch's tensors). */
static const char *fast_name(const scd_job_t *job)
{
	return job->n_items > 0 ? item_name(&job->items[0]) : "?";
}

/* Rule 1 of scd_fast_decide: the lowest rank whose words are malformed or not rank 0's
 * (what every rank compares against, so that every rank names the same one), described
 * in job->error; -1 when every rank's agree. */
static int fast_disagree(scd_job_t *job, const uint8_t *words, size_t stride, int P)
{
	fast_words_t w0 = fast_words_get(words + SCD_VERDICT_BYTES);
	for (int q = 0; q < P; q++) {
		fast_words_t w = fast_words_get(words + (size_t)q * stride + SCD_VERDICT_BYTES);
		int node = scd_job_node(job, q);
		if (w.magic != SCD_FAST_MAGIC ||
		    (w.kind != SCD_FAST_READY && w.kind != SCD_FAST_LEAVE)) {
			snprintf(job->error, sizeof(job->error),
				 "fast turn of tensor '%s': node %d sent malformed fast words "
				 "(magic %04x, kind %u): the mesh's streams cannot be trusted",
				 fast_name(job), node, w.magic, w.kind);
			return q;
		}
		if (w.epoch != w0.epoch || w.turn != w0.turn || w.bytes != w0.bytes ||
		    w.digest != w0.digest) {
			snprintf(
			    job->error, sizeof(job->error),
			    "fast turn of tensor '%s': node %d is at epoch %llu turn %llu "
			    "(%u bytes, digest %016llx), node %d at epoch %llu turn %llu (%u "
			    "bytes, digest %016llx): the nodes disagree on the turn, and the "
			    "mesh's streams cannot be trusted",
			    fast_name(job), node, (unsigned long long)w.epoch,
			    (unsigned long long)w.turn, w.bytes, (unsigned long long)w.digest,
			    scd_job_node(job, 0), (unsigned long long)w0.epoch,
			    (unsigned long long)w0.turn, w0.bytes,
			    (unsigned long long)w0.digest);
			return q;
		}
	}
	return -1;
}

sc_status_t scd_fast_decide(scd_verdict_carry_t *v, scd_job_t *job, const uint8_t *words,
			    size_t stride, int P)
{
	if (fast_disagree(job, words, stride, P) >= 0) {
		v->failed = 1;
		job->mesh_broken = 1;
		job->status = SC_ERR_PROTOCOL;
		scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
		return SC_ERR_PROTOCOL;
	}
	for (int q = 0; q < P; q++) {
		fast_words_t w = fast_words_get(words + (size_t)q * stride + SCD_VERDICT_BYTES);
		if (w.kind != SCD_FAST_LEAVE)
			continue;
		v->discarded = job->fast.discarded = 1;
		job->status = SC_IN_PROGRESS;
		snprintf(
		    job->error, sizeof(job->error),
		    "fast turn %llu of epoch %llu (tensor '%s') discarded: node %d left it",
		    (unsigned long long)w.turn, (unsigned long long)w.epoch, fast_name(job),
		    scd_job_node(job, q));
		scd_debug(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
		return SC_IN_PROGRESS;
	}
	return carry_decide(v, job, words, stride, P);
}

void scd_fast_carry_init(scd_verdict_carry_t *v, scd_job_t *job, const scd_fault_t *f, int rank,
			 int local_size)
{
	scd_verdict_carry_init(v, job, f, rank, local_size);
	scd_fast_words_put(v->mine + SCD_VERDICT_BYTES, &job->fast,
			   job->total_numel * sizeof(float));
	v->words_bytes = SCD_VERDICT_BYTES + SCD_FAST_BYTES;
	v->decide = scd_fast_decide;
	v->faulty |= job->fast.leave;
}
