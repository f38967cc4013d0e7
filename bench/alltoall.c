/*
 * alltoall.c: `sparsecomm-bench alltoall`: an even alltoall through the daemons against
 * the bound of the link, both measured in the same run on the same (emulated) cluster.
 *
 *   sparsecomm-run -n 4 --netns --rate 1gbit -- build/bin/sparsecomm-bench alltoall
 *
 * Every trainer registers a float32 tensor of --bytes (default 64 MiB) and sends an equal
 * block of it to every trainer; each element names its source, destination and place, so
 * every received element is checked. K timed alltoalls (after a barrier each) give the
 * median time. The goodput is measured next: K broadcasts of the same size from rank 0,
 * whose node sends the buffer once to each of the N - 1 other nodes through its own link:
 * goodput = (N - 1) x bytes / time. Each node sends (N - 1) / N of its trainers' bytes in
 * an alltoall, so the bound is (N - 1) / N x bytes x L / goodput (L trainers a node), and
 * the report gives time / bound. Rank 0 also reports its node's bytes on the wire per
 * alltoall (sc_tensor_stats) against the exact count: the blocks to other nodes' trainers
 * plus the count matrix rows, (N - 1) L (T + 3) x 8 bytes.
 */
#include "bench.h"
#include "sparsecomm.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A2A_TIMEOUT_MS 600000

typedef struct a2a_opts {
	size_t bytes;
	int iters, warmup;
	const char *json_out;
} a2a_opts_t;

static int parse_opts(int argc, char **argv, a2a_opts_t *o)
{
	*o = (a2a_opts_t){.bytes = 64u << 20, .iters = 5, .warmup = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("usage: sparsecomm-bench alltoall [--bytes 64M] [--iters K] "
			       "[--warmup W] [--json-out FILE]\n"
			       "Run under sparsecomm-run. --bytes: what each trainer sends in "
			       "all (K, M, G binary); the median of K timed alltoalls (default "
			       "5) after W warm-ups (default 1).\n");
			exit(0);
		}
		if (!strcmp(a, "--bytes") && bench_parse_bytes(v, &o->bytes) == 0)
			i++;
		else if (!strcmp(a, "--iters") && (o->iters = atoi(v)) >= 1)
			i++;
		else if (!strcmp(a, "--warmup") && (o->warmup = atoi(v)) >= 0)
			i++;
		else if (!strcmp(a, "--json-out") && *v)
			o->json_out = argv[++i];
		else {
			fprintf(stderr, "alltoall: bad option or value: %s %s (--help)\n", a,
				v);
			return -1;
		}
	}
	return 0;
}

/* Element i of the block from trainer s to trainer q of T: exact in float32 for T <= 128. */
static float a2a_value(int s, int q, int T, size_t i)
{
	return (float)((size_t)(s * T + q) * 1024 + (i & 1023));
}

/* The time since t0 of the operation started as h (st: how its start went), or -1. */
static double timed(sc_client_t *c, sc_status_t st, sc_handle_t h, double t0, const char *what)
{
	if (st == SC_OK)
		st = sc_wait(c, h, A2A_TIMEOUT_MS);
	if (st != SC_OK) {
		fprintf(stderr, "alltoall: %s failed: %s: %s\n", what, sc_status_name(st),
			sc_last_error());
		return -1;
	}
	return bench_now_s() - t0;
}

/* The node's statistics of t (zeros when the daemon cannot give them). */
static sc_tensor_stats_t node_stats(sc_client_t *c, sc_tensor_t *t)
{
	sc_tensor_stats_t s;
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if (sc_tensor_stats(c, t, &s) != SC_OK)
		memset(&s, 0, sizeof(s));
	return s;
}

BENCH_COMMAND(alltoall, "even alltoall through the daemons vs (N-1)/N x bytes / goodput")
{
	a2a_opts_t o;
	sc_client_t *c;
	if (parse_opts(argc, argv, &o) < 0)
		return 2;
	sc_status_t st = sc_connect(NULL, 30000, &c);
	if (st != SC_OK) {
		fprintf(stderr, "alltoall: cannot connect (run it under sparsecomm-run): %s\n",
			sc_last_error());
		return 1;
	}
	int me = sc_rank(c), T = sc_size(c), L = sc_local_size(c), N = T / L, rc = 1;
	size_t per = o.bytes / 4 / (size_t)T, n = per * (size_t)T;
	size_t *counts = malloc(sizeof(*counts) * (size_t)T);
	double *ta = calloc((size_t)o.iters, sizeof(double));
	double *tb = calloc((size_t)o.iters, sizeof(double));
	sc_tensor_t *t = NULL, *b = NULL;
	long long wrong = 0;
	if (!counts || !ta || !tb || !per ||
	    sc_register(c, "bench.alltoall", SC_FLOAT32, n, &t) != SC_OK ||
	    sc_register(c, "bench.alltoall.bcast", SC_FLOAT32, n, &b) != SC_OK) {
		fprintf(stderr, "alltoall: setup failed (%zu elements): %s\n", n,
			sc_last_error());
		goto out;
	}
	for (int q = 0; q < T; q++)
		counts[q] = per;
	uint64_t sent0 = 0;
	for (int i = -o.warmup; i < o.iters; i++) {
		float *x = sc_tensor_data(t);
		for (int q = 0; q < T; q++)
			for (size_t k = 0; k < per; k++)
				x[(size_t)q * per + k] = a2a_value(me, q, T, k);
		if (i == 0)
			sent0 = node_stats(c, t).bytes_sent;
		sc_handle_t h = 0;
		if (sc_barrier(c, A2A_TIMEOUT_MS) != SC_OK)
			goto out;
		double t0 = bench_now_s();
		st = sc_alltoall_async(c, t, counts, &h);
		double dt = timed(c, st, h, t0, "alltoall");
		if (dt < 0)
			goto out;
		for (int s = 0; s < T; s++)
			for (size_t k = 0; k < per; k++)
				wrong += x[(size_t)s * per + k] != a2a_value(s, me, T, k);
		if (i >= 0)
			ta[i] = dt;
	}
	sc_tensor_stats_t last = node_stats(c, t);
	double sent = (double)(last.bytes_sent - sent0) / o.iters;
	for (int i = -o.warmup; i < o.iters; i++) {
		sc_handle_t h = 0;
		if (sc_barrier(c, A2A_TIMEOUT_MS) != SC_OK)
			goto out;
		double t0 = bench_now_s();
		st = sc_broadcast_async(c, b, 0, &h);
		double dt = timed(c, st, h, t0, "broadcast");
		if (dt < 0)
			goto out;
		if (i >= 0)
			tb[i] = dt;
	}
	double bytes = (double)n * 4, time_s = bench_median(ta, o.iters);
	double goodput = N > 1 ? (N - 1) * bytes / bench_median(tb, o.iters) : 0;
	double bound = goodput > 0 ? (double)(N - 1) / N * bytes * L / goodput : 0;
	double want = (double)L * (T - L) * per * 4 + (double)(N - 1) * L * (T + 3) * 8;
	rc = wrong ? 1 : 0;
	if (me != 0)
		goto out;
	const char *rate = getenv("SPARSECOMM_NETNS_RATE");
	printf("# sparsecomm alltoall: %d nodes x %d trainers, %zu bytes sent by each trainer "
	       "(%zu per destination), median of %d after %d warm-up; link %s\n",
	       N, L, n * 4, per * 4, o.iters, o.warmup, rate && *rate ? rate : "unshaped");
	printf("# goodput %.1f MB/s, measured by broadcasts of the same size from rank 0 "
	       "((N-1) x bytes / time)\n",
	       goodput / 1e6);
	printf("# bound = (N-1)/N x bytes x L / goodput\n");
	printf("# daemon (node 0, last call): %.2f ms in all, %.2f ms in the exchanges\n",
	       last.measured_s * 1e3, last.exchange_s * 1e3);
	printf("# %10s %10s %10s %12s %12s %8s\n", "time (ms)", "bound (ms)", "time/bnd",
	       "node0 sent", "exact", "#wrong");
	printf("  %10.2f %10.2f %10.3f %12.0f %12.0f %8lld\n", time_s * 1e3, bound * 1e3,
	       bound > 0 ? time_s / bound : 0, sent, want, wrong);
	if (o.json_out) {
		FILE *f = fopen(o.json_out, "w");
		if (!f) {
			fprintf(stderr, "alltoall: cannot write %s: %s\n", o.json_out,
				strerror(errno));
			goto out;
		}
		fprintf(f,
			"{\"bench\":\"alltoall\",\"nodes\":%d,\"per_node\":%d,\"bytes\":%zu,"
			"\"time_s\":%.6f,\"goodput_bytes_per_s\":%.0f,\"bound_s\":%.6f,"
			"\"node0_sent\":%.0f,\"exact_sent\":%.0f,\"wrong\":%lld}\n",
			N, L, n * 4, time_s, goodput, bound, sent, want, wrong);
		fclose(f);
	}
out:
	if (wrong)
		fprintf(stderr, "alltoall: rank %d: %lld elements wrong\n", me, wrong);
	free(counts);
	free(ta);
	free(tb);
	sc_finalize(c);
	return rc;
}
