/*
 * allreduce.c: `sparsecomm-bench allreduce`: dense float32 allreduce through the daemons,
 * reported the way NVIDIA's nccl-tests report it, next to the ring bound of the link and
 * next to Open MPI measured in the same run on the same (emulated) cluster.
 *
 *   sparsecomm-run -n 4 --netns --rate 1gbit -- \
 *       build/bin/sparsecomm-bench allreduce --sizes 4K,4M,64M,256M --iters 5 --peer-mpi
 *
 * Every trainer registers one tensor per size, fills it with small integers (every sum
 * is exact in float32), and runs one warm-up and K timed in-place SC_OP_SUM allreduces,
 * each after a one-element allreduce that lines the ranks up; every result is checked
 * element by element. Rank 0 reports the median time, algbw = bytes / time, busbw =
 * algbw x 2(P-1)/P, and the ring bound 2(P-1)/P x bytes / goodput, where goodput is the
 * link rate (--rate, else $SPARSECOMM_NETNS_RATE from the launcher) x 0.952 for TCP/IP
 * over Ethernet framing, or --goodput-bytes-per-s. A 4 KiB allreduce repeated many times
 * gives the round-trip latency (median and p99).
 *
 * With --wire fp16 or bf16 the tensors travel as 16-bit values (sc_tensor_opts_t.wire;
 * the sums stay exact): algbw and busbw still count the tensor's float32 bytes, and the
 * ring bound is that of the 16-bit bytes on the wire.
 *
 * With --stages PREFIX (its directory made where missing, as mkdir -p) the daemons'
 * timelines run during the latency loop (PREFIX.d<rank>.json)
 * and every trainer writes its calls' times (PREFIX.client<rank>.txt); rank 0 then prints
 * where the round trip goes, stage by stage (stages.h: submit, negotiation, hand-off,
 * verdict, data, completion), median and p99 over the calls.
 *
 * With --peer-mpi rank 0 then runs bench/mpi/run-peer.sh for the same sizes (Open MPI's
 * ring MPI_Allreduce, one rank per namespace) while the other trainers wait in a
 * one-element allreduce; the table gains the MPI time and the ratio ours / MPI.
 */
#include "bench.h"
#include "sparsecomm.h"
#include "stages.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#define MAX_SIZES	   32
#define OP_TIMEOUT_MS	   600000
#define PEER_TIMEOUT_S	   1800
#define TCP_GOODPUT_FACTOR 0.952 /* 1448 payload bytes per 1538 on the wire */

typedef struct size_result {
	size_t bytes;
	double time_s, algbw, busbw, bound_s, mpi_time_s;
	long long wrong;
} size_result_t;

typedef struct ar_opts {
	size_t sizes[MAX_SIZES];
	int n_sizes, iters, warmup, lat_iters;
	bool peer_mpi;
	const char *json_out, *rate, *peer_script;
	char stages[PATH_MAX]; /* --stages: the files' prefix, absolute ("": off) */
	double goodput;	       /* bytes/s, 0: unknown */
	sc_wire_t wire;	       /* what the tensors travel as */
} ar_opts_t;

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecomm-bench allreduce [--sizes 4K,4M,64M,256M] [--iters K]\n"
	    "           [--warmup W] [--lat-iters N] [--peer-mpi] [--json-out FILE]\n"
	    "           [--rate RATE | --goodput-bytes-per-s B] [--peer-script PATH]\n"
	    "Run under sparsecomm-run (one process per trainer). Sizes take K, M, G (binary).\n"
	    "  --iters K         timed iterations per size (default 5), median reported\n"
	    "  --warmup W        untimed iterations per size first (default 1)\n"
	    "  --lat-iters N     4 KiB allreduces for the latency (default 200, 0: skip)\n"
	    "  --peer-mpi        rank 0 also runs bench/mpi/run-peer.sh (Open MPI) for the\n"
	    "                    same sizes on the same cluster, others wait; and the same\n"
	    "                    latency loop of MPI_Allreduce (median and p99 against ours)\n"
	    "  --rate RATE       link rate for the ring bound (default "
	    "$SPARSECOMM_NETNS_RATE)\n"
	    "  --goodput-bytes-per-s B   the bound's goodput directly\n"
	    "  --json-out FILE   rank 0 writes one JSON object with every number\n"
	    "  --wire FORMAT     native (default), fp16 or bf16: what the sums travel as\n"
	    "  --stages PREFIX   the latency's stages from the daemons' timelines\n"
	    "                    (PREFIX.d<rank>.json) and the trainers' clocks\n");
}

static int parse_opts(int argc, char **argv, ar_opts_t *o)
{
	const char *sizes = "4K,4M,64M,256M", *goodput = NULL;
	*o = (ar_opts_t){.iters = 5, .warmup = 1, .lat_iters = 200};
	o->rate = getenv("SPARSECOMM_NETNS_RATE");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--peer-mpi")) {
			o->peer_mpi = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "allreduce: unknown option or missing value: %s\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--sizes"))
			sizes = v;
		else if (!strcmp(a, "--iters"))
			o->iters = atoi(v);
		else if (!strcmp(a, "--warmup"))
			o->warmup = atoi(v);
		else if (!strcmp(a, "--lat-iters"))
			o->lat_iters = atoi(v);
		else if (!strcmp(a, "--json-out"))
			o->json_out = v;
		else if (!strcmp(a, "--rate"))
			o->rate = v;
		else if (!strcmp(a, "--goodput-bytes-per-s"))
			goodput = v;
		else if (!strcmp(a, "--peer-script"))
			o->peer_script = v;
		else if (!strcmp(a, "--stages")) {
			char cwd[PATH_MAX / 2] = "";
			if (v[0] != '/' && !getcwd(cwd, sizeof(cwd))) {
				fprintf(stderr, "allreduce: getcwd: %s\n", strerror(errno));
				return -1;
			}
			snprintf(o->stages, sizeof(o->stages), "%s%s%.*s", cwd,
				 cwd[0] ? "/" : "", PATH_MAX / 2 - 64, v);
			/* the prefix's directory, made where missing (every rank, on its
			 * own host, where its daemon writes its timeline) */
			if (bench_mkdir_parents(o->stages) < 0)
				return -1;
		} else if (!strcmp(a, "--wire")) {
			for (o->wire = SC_WIRE_NATIVE; o->wire <= SC_WIRE_BF16; o->wire++)
				if (!strcmp(v, sc_wire_name(o->wire)))
					break;
			if (o->wire > SC_WIRE_BF16) {
				fprintf(stderr, "allreduce: --wire %s: native, fp16 or bf16\n",
					v);
				return -1;
			}
		} else {
			fprintf(stderr, "allreduce: unknown option %s (--help)\n", a);
			return -1;
		}
	}
	if (o->iters < 1 || o->warmup < 0 || o->lat_iters < 0 || o->lat_iters > 1000000) {
		fprintf(stderr,
			"allreduce: --iters must be >= 1, --warmup >= 0 and --lat-iters "
			"0 to 1000000 (the MPI peer's bound)\n");
		return -1;
	}
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", sizes);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		size_t b;
		if (o->n_sizes == MAX_SIZES || bench_parse_bytes(tok, &b) < 0 || b < 4) {
			fprintf(stderr, "allreduce: bad size '%s' in --sizes\n", tok);
			return -1;
		}
		o->sizes[o->n_sizes++] = b / 4 * 4;
	}
	if (goodput) {
		o->goodput = strtod(goodput, NULL);
		if (!(o->goodput > 0)) {
			fprintf(stderr, "allreduce: bad --goodput-bytes-per-s '%s'\n", goodput);
			return -1;
		}
	} else if (o->rate && *o->rate) {
		double bits;
		if (bench_parse_rate(o->rate, &bits) < 0) {
			fprintf(stderr, "allreduce: cannot parse rate '%s'\n", o->rate);
			return -1;
		}
		o->goodput = bits / 8 * TCP_GOODPUT_FACTOR;
	}
	return 0;
}

/* Rank r's value at index i, and the sum over every rank (by i & 7). */
static void fill(float *x, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(((i + (size_t)rank) & 7) + 1);
}

static long long check(const float *x, size_t n, const float expect[8])
{
	long long wrong = 0;
	for (size_t i = 0; i < n; i++)
		wrong += x[i] != expect[i & 7];
	return wrong;
}

static int do_allreduce(sc_client_t *c, sc_tensor_t *t, int timeout_ms)
{
	sc_status_t st = sc_allreduce(c, t, SC_OP_SUM, timeout_ms);
	if (st != SC_OK) {
		fprintf(stderr, "allreduce of '%s' failed: %s: %s\n", sc_tensor_name(t),
			sc_status_name(st), sc_last_error());
		return -1;
	}
	return 0;
}

/*
 * Waits in a one-element allreduce for at most timeout_s, resubmitting when the daemons
 * declare it stalled (a rank busy elsewhere for longer than their stall timeout).
 */
static int barrier(sc_client_t *c, sc_tensor_t *t, double timeout_s)
{
	double end = bench_now_s() + timeout_s;
	for (;;) {
		*(float *)sc_tensor_data(t) = 1;
		double left = end - bench_now_s();
		sc_status_t st = sc_allreduce(c, t, SC_OP_SUM, (int)(left * 1000) + 1);
		if (st == SC_OK)
			return 0;
		if ((st != SC_ERR_TIMEOUT && st != SC_ERR_STALLED) || bench_now_s() >= end) {
			fprintf(stderr, "barrier failed: %s: %s\n", sc_status_name(st),
				sc_last_error());
			return -1;
		}
	}
}

/* A float32 tensor of n values travelling as wire. */
static sc_status_t reg(sc_client_t *c, const char *name, size_t n, sc_wire_t wire,
		       sc_tensor_t **t_p)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .wire = wire};
	return sc_register_ex(c, name, SC_FLOAT32, n, &o, t_p);
}

/* iters timed 4 KiB allreduces after 10 untimed: their median and p99; with stages, each
 * timed call's number (from 1), start and end go into the trainer's file. */
static int lat_4k(sc_client_t *c, int iters, sc_wire_t wire, const char *stages, double *med_p,
		  double *p99_p)
{
	sc_tensor_t *t;
	double *v = calloc((size_t)iters * 3, sizeof(double)), *t0s = v + iters,
	       *t1s = t0s + iters;
	int *calls = calloc((size_t)iters, sizeof(int)), rc = -1;
	sc_status_t st = reg(c, "bench.allreduce.lat4k", 1024, wire, &t);
	if (st != SC_OK || !v || !calls) {
		fprintf(stderr, "register of the 4 KiB tensor failed: %s\n", sc_last_error());
		goto out;
	}
	for (int i = -10; i < iters; i++) {
		fill(sc_tensor_data(t), 1024, sc_rank(c));
		double t0 = bench_now_s();
		if (do_allreduce(c, t, OP_TIMEOUT_MS) < 0)
			goto out;
		double t1 = bench_now_s();
		if (i < 0)
			continue;
		v[i] = t1 - t0;
		t0s[i] = t0;
		t1s[i] = t1;
		calls[i] = i + 11;
	}
	if (stages[0] && stages_write_client(stages, sc_rank(c), calls, t0s, t1s, iters) < 0)
		goto out;
	*med_p = bench_percentile(v, iters, 0.5);
	*p99_p = bench_percentile(v, iters, 0.99);
	rc = 0;
out:
	free(v);
	free(calls);
	return rc;
}

static int run_size(sc_client_t *c, sc_tensor_t *bar, const ar_opts_t *o, size_result_t *r)
{
	int rank = sc_rank(c), P = sc_size(c);
	size_t n = r->bytes / 4;
	char name[64];
	sc_tensor_t *t;
	float expect[8];
	double *times = calloc((size_t)o->iters, sizeof(double));

	for (int m = 0; m < 8; m++) {
		expect[m] = 0;
		for (int q = 0; q < P; q++)
			expect[m] += (float)(((size_t)(m + q) & 7) + 1);
	}
	snprintf(name, sizeof(name), "bench.allreduce.%zu", r->bytes);
	sc_status_t st = reg(c, name, n, o->wire, &t);
	if (st != SC_OK || !times) {
		fprintf(stderr, "register of '%s' (%zu bytes) failed: %s: %s\n", name, r->bytes,
			sc_status_name(st), sc_last_error());
		free(times);
		return -1;
	}
	float *x = sc_tensor_data(t);
	for (int i = -o->warmup; i < o->iters; i++) {
		fill(x, n, rank);
		if (barrier(c, bar, OP_TIMEOUT_MS / 1000.0) < 0)
			goto err;
		double t0 = bench_now_s();
		if (do_allreduce(c, t, OP_TIMEOUT_MS) < 0)
			goto err;
		double dt = bench_now_s() - t0;
		r->wrong += check(x, n, expect);
		if (i >= 0)
			times[i] = dt;
	}
	r->time_s = bench_percentile(times, o->iters, 0.5);
	r->algbw = r->bytes / r->time_s;
	r->busbw = r->algbw * 2.0 * (P - 1) / P;
	double wire_bytes = o->wire == SC_WIRE_NATIVE ? (double)r->bytes : r->bytes / 2.0;
	r->bound_s = o->goodput > 0 ? 2.0 * (P - 1) / P * wire_bytes / o->goodput : 0;
	free(times);
	return 0;
err:
	free(times);
	return -1;
}

/* The MPI peer's latency loop: the median and p99 of rank 0's back-to-back 4 KiB calls. */
typedef struct mpi_lat {
	double med_s, p99_s;
} mpi_lat_t;

/* The number after "KEY": in the peer's JSON, or 0. */
static double json_number(const char *out, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *p = strstr(out, pat);
	return p ? strtod(p + strlen(pat), NULL) : 0;
}

/* Runs the MPI peer; fills mpi_time_s from its JSON, and lat from its latency loop (the
 * same --lat-iters as ours). Returns 0 when it ran. */
static int run_peer(const ar_opts_t *o, size_result_t *res, int P, mpi_lat_t *lat)
{
	char script[PATH_MAX], sizes[MAX_SIZES * 24] = "", iters[16], np[16], lat_iters[16];
	if (bench_find_peer_script(o->peer_script, script, sizeof(script)) < 0) {
		fprintf(stderr, "allreduce: bench/mpi/run-peer.sh not found (--peer-script)\n");
		return -1;
	}
	for (int i = 0; i < o->n_sizes; i++)
		snprintf(sizes + strlen(sizes), sizeof(sizes) - strlen(sizes), "%s%zu",
			 i ? "," : "", res[i].bytes);
	snprintf(iters, sizeof(iters), "%d", o->iters);
	snprintf(np, sizeof(np), "%d", P);
	snprintf(lat_iters, sizeof(lat_iters), "%d", o->lat_iters);
	char *argv[] = {script,	       "-np",	  np,	     "allreduce",
			"--sizes",     sizes,	  "--iters", iters,
			"--lat-iters", lat_iters, "--json",  NULL};
	char *out = bench_run_capture(argv, PEER_TIMEOUT_S);
	if (!out)
		return -1;
	/* The peer's JSON lists {"bytes":B,"time_s":T,...} per size. */
	int found = 0;
	for (char *p = strstr(out, "\"bytes\":"); p; p = strstr(p + 1, "\"bytes\":")) {
		size_t b = strtoull(p + 8, NULL, 10);
		char *t = strstr(p, "\"time_s\":");
		if (!t)
			break;
		double ts = strtod(t + 9, NULL);
		for (int i = 0; i < o->n_sizes; i++)
			if (res[i].bytes == b && ts > 0) {
				res[i].mpi_time_s = ts;
				found++;
			}
	}
	if (!found)
		fprintf(stderr, "allreduce: no timings in the MPI peer's output: %s\n", out);
	lat->med_s = json_number(out, "lat_4k_median_s");
	lat->p99_s = json_number(out, "lat_4k_p99_s");
	free(out);
	return found ? 0 : -1;
}

static void print_num_or_null(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ",\"%s\":", key);
	if (v > 0)
		fprintf(f, fmt, v);
	else
		fprintf(f, "null");
}

static void report(const ar_opts_t *o, const size_result_t *res, int P, double lat_med,
		   double lat_p99, bool peer_ran, const mpi_lat_t *mlat)
{
	const char *netns = getenv("SPARSECOMM_NETNS");
	bool emulated = netns && *netns;
	const char *cpus = getenv("SPARSECOMM_NODE_CPUS"); /* sparsecomm-run --pin-nodes */
	double busbw_sum = 0;
	char where[320];

	if (emulated)
		snprintf(where, sizeof(where), "%d network namespaces, link %s", P,
			 o->rate && *o->rate ? o->rate : "unshaped");
	else
		snprintf(where, sizeof(where), "loopback (no emulated cluster)");
	if (cpus && *cpus)
		snprintf(where + strlen(where), sizeof(where) - strlen(where),
			 "; nodes pinned to CPUs %.100s", cpus);
	printf("# sparsecomm allreduce: P=%d, float32 sum (%s wire), in place, median of %d "
	       "after %d warm-up; %s\n",
	       P, sc_wire_name(o->wire), o->iters, o->warmup, where);
	if (o->goodput > 0)
		printf("# ring bound = 2(P-1)/P x bytes on the wire / goodput, goodput %.1f "
		       "MB/s\n",
		       o->goodput / 1e6);
	printf("#\n# %12s %10s %10s %10s %8s %10s %10s %10s %9s\n", "size", "time", "algbw",
	       "busbw", "#wrong", "bound", "time/bnd", "mpi_time", "ours/mpi");
	printf("# %12s %10s %10s %10s %8s %10s %10s %10s %9s\n", "(B)", "(ms)", "(MB/s)",
	       "(MB/s)", "", "(ms)", "", "(ms)", "");
	for (int i = 0; i < o->n_sizes; i++) {
		const size_result_t *r = &res[i];
		char bound[32] = "-", tb[32] = "-", mpi[32] = "-", ratio[32] = "-";
		busbw_sum += r->busbw;
		if (r->bound_s > 0) {
			snprintf(bound, sizeof(bound), "%.3f", r->bound_s * 1e3);
			snprintf(tb, sizeof(tb), "%.3f", r->time_s / r->bound_s);
		}
		if (r->mpi_time_s > 0) {
			snprintf(mpi, sizeof(mpi), "%.3f", r->mpi_time_s * 1e3);
			snprintf(ratio, sizeof(ratio), "%.3f", r->time_s / r->mpi_time_s);
		}
		printf("  %12zu %10.3f %10.2f %10.2f %8lld %10s %10s %10s %9s\n", r->bytes,
		       r->time_s * 1e3, r->algbw / 1e6, r->busbw / 1e6, r->wrong, bound, tb,
		       mpi, ratio);
	}
	printf("# Avg bus bandwidth: %.2f MB/s\n", busbw_sum / o->n_sizes / 1e6);
	if (lat_med > 0)
		printf(
		    "# 4 KiB allreduce round trip: median %.1f us, p99 %.1f us (%d iterations, "
		    "%s)\n",
		    lat_med * 1e6, lat_p99 * 1e6, o->lat_iters,
		    emulated ? "emulated cluster" : "loopback");
	if (lat_med > 0 && mlat->med_s > 0 && mlat->p99_s > 0)
		printf("# MPI_Allreduce's 4 KiB round trip, the same loop: median %.1f us, p99 "
		       "%.1f us; ours/mpi: median %.3f, p99 %.3f\n",
		       mlat->med_s * 1e6, mlat->p99_s * 1e6, lat_med / mlat->med_s,
		       lat_p99 / mlat->p99_s);
	if (o->peer_mpi && !peer_ran)
		printf("# MPI peer: did not run (see above)\n");
	fflush(stdout);

	if (!o->json_out)
		return;
	FILE *f = fopen(o->json_out, "w");
	if (!f) {
		fprintf(stderr, "allreduce: cannot write %s: %s\n", o->json_out,
			strerror(errno));
		return;
	}
	fprintf(
	    f,
	    "{\"bench\":\"allreduce\",\"P\":%d,\"iters\":%d,\"warmup\":%d,\"cluster\":\"%s\","
	    "\"wire\":\"%s\"",
	    P, o->iters, o->warmup, emulated ? "netns" : "loopback", sc_wire_name(o->wire));
	if (o->rate && *o->rate)
		fprintf(f, ",\"rate\":\"%s\"", o->rate);
	print_num_or_null(f, "goodput_bytes_per_s", o->goodput, "%.0f");
	print_num_or_null(f, "lat_4k_us", lat_med * 1e6, "%.1f");
	print_num_or_null(f, "lat_4k_p99_us", lat_p99 * 1e6, "%.1f");
	print_num_or_null(f, "mpi_lat_4k_us", mlat->med_s * 1e6, "%.1f");
	print_num_or_null(f, "mpi_lat_4k_p99_us", mlat->p99_s * 1e6, "%.1f");
	fprintf(f, ",\"avg_busbw\":%.0f,\"peer_mpi\":%s,\"sizes\":[", busbw_sum / o->n_sizes,
		peer_ran ? "true" : "false");
	for (int i = 0; i < o->n_sizes; i++) {
		const size_result_t *r = &res[i];
		fprintf(f,
			"%s{\"bytes\":%zu,\"time_s\":%.6f,\"algbw\":%.0f,\"busbw\":%.0f,"
			"\"wrong\":%lld",
			i ? "," : "", r->bytes, r->time_s, r->algbw, r->busbw, r->wrong);
		print_num_or_null(f, "bound_s", r->bound_s, "%.6f");
		print_num_or_null(f, "time_over_bound",
				  r->bound_s > 0 ? r->time_s / r->bound_s : 0, "%.4f");
		print_num_or_null(f, "mpi_time_s", r->mpi_time_s, "%.6f");
		print_num_or_null(f, "ratio_vs_mpi",
				  r->mpi_time_s > 0 ? r->time_s / r->mpi_time_s : 0, "%.4f");
		fprintf(f, "}");
	}
	fprintf(f, "]}\n");
	fclose(f);
}

BENCH_COMMAND(allreduce, "dense allreduce through the daemons vs ring bound and Open MPI")
{
	ar_opts_t o;
	size_result_t res[MAX_SIZES];
	sc_client_t *c;
	sc_tensor_t *bar, *stats;
	double lat_med = 0, lat_p99 = 0;
	int rc = 1;

	if (parse_opts(argc, argv, &o) < 0)
		return 2;
	if (!getenv("SPARSECOMM_SOCKET")) {
		fprintf(stderr, "allreduce: SPARSECOMM_SOCKET is not set: run it under "
				"sparsecomm-run, e.g.\n  sparsecomm-run -n 4 -- "
				"build/bin/sparsecomm-bench allreduce\n");
		return 2;
	}
	sc_status_t st = sc_connect(NULL, 30000, &c);
	if (st != SC_OK) {
		fprintf(stderr, "allreduce: cannot connect: %s: %s\n", sc_status_name(st),
			sc_last_error());
		return 1;
	}
	int rank = sc_rank(c), P = sc_size(c);
	memset(res, 0, sizeof(res));
	for (int i = 0; i < o.n_sizes; i++)
		res[i].bytes = o.sizes[i];
	if (sc_register(c, "bench.allreduce.barrier", SC_FLOAT32, 1, &bar) != SC_OK ||
	    sc_register(c, "bench.allreduce.wrong", SC_FLOAT32, MAX_SIZES, &stats) != SC_OK) {
		fprintf(stderr, "allreduce: register failed: %s\n", sc_last_error());
		goto out;
	}
	if (o.stages[0] && o.lat_iters > 0 && rank == 0 && stages_start(c, o.stages) < 0)
		goto out;
	if (o.lat_iters > 0 && lat_4k(c, o.lat_iters, o.wire, o.stages, &lat_med, &lat_p99) < 0)
		goto out;
	if (o.stages[0] && o.lat_iters > 0 &&
	    (barrier(c, bar, OP_TIMEOUT_MS / 1000.0) < 0 || (rank == 0 && stages_stop(c) < 0)))
		goto out;
	for (int i = 0; i < o.n_sizes; i++) {
		if (run_size(c, bar, &o, &res[i]) < 0)
			goto out;
		if (rank == 0)
			fprintf(stderr, "allreduce: %zu bytes: %.3f ms\n", res[i].bytes,
				res[i].time_s * 1e3);
	}
	/* Wrong elements over every rank (float32: exact up to 2^24, enough to tell). */
	float *w = sc_tensor_data(stats);
	for (int i = 0; i < MAX_SIZES; i++)
		w[i] = i < o.n_sizes ? (float)res[i].wrong : 0;
	if (sc_allreduce(c, stats, SC_OP_SUM, OP_TIMEOUT_MS) != SC_OK) {
		fprintf(stderr, "allreduce: sum of wrong counts failed: %s\n", sc_last_error());
		goto out;
	}
	for (int i = 0; i < o.n_sizes; i++)
		res[i].wrong = (long long)w[i];

	bool peer_ran = false;
	mpi_lat_t mpi_lat = {0, 0};
	if (o.peer_mpi) {
		if (rank == 0) {
			fprintf(stderr,
				"allreduce: running the MPI peer on the same cluster\n");
			peer_ran = run_peer(&o, res, P, &mpi_lat) == 0;
		}
		if (barrier(c, bar, PEER_TIMEOUT_S + 60) < 0)
			goto out;
	}
	if (rank == 0)
		report(&o, res, P, lat_med, lat_p99, peer_ran, &mpi_lat);
	rc = 0;
	if (rank == 0 && o.stages[0] && o.lat_iters > 0) {
		if (stages_report(o.stages, P) < 0)
			rc = 1;
		fflush(stdout);
	}
	for (int i = 0; i < o.n_sizes; i++)
		if (res[i].wrong)
			rc = 1;
out:
	sc_finalize(c);
	return rc;
}
