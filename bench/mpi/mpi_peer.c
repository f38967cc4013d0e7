/*
 * mpi_peer.c: sparsecomm-mpi-peer, the Open MPI baseline that sparsecomm's benchmarks
 * compare against in the same run, on the same (emulated) cluster.
 *
 *   sparsecomm-mpi-peer allreduce --sizes 4M,64M,256M [--iters K] [--lat-iters N] [--json]
 *     MPI_Allreduce of float32 sums, out of place, checked against the exact result;
 *     with --lat-iters, also N back-to-back 4 KiB allreduces after 10 untimed ones, each
 *     timed on rank 0 (the median and p99 of rank 0's calls, as sparsecomm-bench
 *     allreduce times its latency loop).
 *   sparsecomm-mpi-peer allgatherv (--coo-bytes B | --coo-bytes B0,B1,.. | --coo-file F)
 *     MPI_Allgatherv of per-rank byte counts, the exchange a sparse (COO) allreduce
 *     built on allgather performs. A file holds one case per line, P counts per line.
 *
 * Buffers are allocated once for the largest size and touched before timing (first touch
 * of a page costs about 10 us per 4 KiB here); each size gets one warm-up iteration, then
 * K timed ones, each started after a barrier. An iteration's time is the slowest rank's;
 * the reported time is the median over the K iterations. Rank 0 prints one JSON object
 * (or a table without --json).
 */
#include <ctype.h>
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_CASES 256

static int rank, nranks;

static void fail(const char *fmt, const char *arg)
{
	if (rank == 0) {
		fprintf(stderr, "sparsecomm-mpi-peer: ");
		fprintf(stderr, fmt, arg);
		fputc('\n', stderr);
	}
	MPI_Finalize();
	exit(2);
}

/* A comma-separated list of byte counts; returns how many, or -1. */
static int parse_list(const char *s, size_t *out, int max)
{
	char buf[4096];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *tok = strtok(buf, ", \t\n"); tok; tok = strtok(NULL, ", \t\n")) {
		if (n == max || bench_parse_bytes(tok, &out[n]) < 0)
			return -1;
		n++;
	}
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Times K iterations of op after one warm-up; returns the median of the slowest rank. */
typedef void (*op_fn)(void *arg);
static void time_op(op_fn op, void *arg, int iters, double *median_p, double *min_p,
		    double *max_p)
{
	double *t = calloc((size_t)iters, sizeof(double));
	double *tmax = calloc((size_t)iters, sizeof(double));
	op(arg);
	for (int i = 0; i < iters; i++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		op(arg);
		t[i] = MPI_Wtime() - t0;
	}
	MPI_Allreduce(t, tmax, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	qsort(tmax, (size_t)iters, sizeof(double), cmp_double);
	*median_p = iters % 2 ? tmax[iters / 2] : (tmax[iters / 2 - 1] + tmax[iters / 2]) / 2;
	*min_p = tmax[0];
	*max_p = tmax[iters - 1];
	free(t);
	free(tmax);
}

struct ar_arg {
	float *send, *recv;
	int count;
};

static void ar_op(void *p)
{
	struct ar_arg *a = p;
	MPI_Allreduce(a->send, a->recv, a->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Prints the hosts (one per rank, to show where the ranks ran) as a JSON array. */
static void print_hosts(void)
{
	char name[MPI_MAX_PROCESSOR_NAME] = "";
	int len;
	MPI_Get_processor_name(name, &len);
	char *all = rank == 0 ? calloc((size_t)nranks, MPI_MAX_PROCESSOR_NAME) : NULL;
	MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME,
		   MPI_CHAR, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("\"hosts\":[");
		for (int i = 0; i < nranks; i++)
			printf("%s\"%s\"", i ? "," : "",
			       all + (size_t)i * MPI_MAX_PROCESSOR_NAME);
		printf("]");
	}
	free(all);
}

/* The latency loop: N back-to-back 4 KiB MPI_Allreduce calls after 10 untimed ones, no
 * barrier between them; rank 0's median and p99 (bench_percentile), as sparsecomm-bench
 * allreduce reports its own loop. */
static void lat_4k(int iters, double *med_p, double *p99_p)
{
	float send[1024], recv[1024];
	double *v = calloc((size_t)iters, sizeof(double));
	if (!v)
		fail("out of memory (%s)", "latency loop");
	for (int i = 0; i < 1024; i++)
		send[i] = (float)(((i + rank) & 7) + 1);
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = -10; i < iters; i++) {
		double t0 = MPI_Wtime();
		MPI_Allreduce(send, recv, 1024, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		if (i >= 0)
			v[i] = MPI_Wtime() - t0;
	}
	*med_p = bench_percentile(v, iters, 0.5);
	*p99_p = bench_percentile(v, iters, 0.99);
	free(v);
}

static int run_allreduce(size_t *sizes, int n_sizes, int iters, int lat_iters, int json)
{
	size_t max_bytes = 0;
	for (int i = 0; i < n_sizes; i++)
		if (sizes[i] > max_bytes)
			max_bytes = sizes[i];
	size_t max_count = max_bytes / sizeof(float);
	if (max_count > INT32_MAX)
		fail("a size is over %s elements", "2^31");
	float *send = malloc(max_count * sizeof(float) + 64);
	float *recv = malloc(max_count * sizeof(float) + 64);
	if (!send || !recv)
		fail("out of memory (%s)", "buffers");
	/* Small integers: every sum is exact in float32. */
	for (size_t i = 0; i < max_count; i++) {
		send[i] = (float)(((i + (size_t)rank) & 7) + 1);
		recv[i] = 0;
	}
	float expect[8];
	for (int m = 0; m < 8; m++) {
		expect[m] = 0;
		for (int r = 0; r < nranks; r++)
			expect[m] += (float)(((size_t)(m + r) & 7) + 1);
	}
	if (rank == 0) {
		if (json)
			printf("{\"mode\":\"allreduce\",\"P\":%d,\"iters\":%d,\"dtype\":"
			       "\"float32\","
			       "\"op\":\"sum\",",
			       nranks, iters);
		else
			printf("# MPI_Allreduce float32 sum, P=%d, median of %d\n"
			       "#%12s %12s %10s %10s %8s\n",
			       nranks, iters, "bytes", "time_ms", "algbw_GB/s", "busbw_GB/s",
			       "wrong");
	}
	if (json)
		print_hosts();
	if (rank == 0 && json)
		printf(",\"sizes\":[");
	double busbw_sum = 0;
	for (int s = 0; s < n_sizes; s++) {
		struct ar_arg a = {send, recv, (int)(sizes[s] / sizeof(float))};
		double med, mn, mx;
		time_op(ar_op, &a, iters, &med, &mn, &mx);
		long long wrong = 0, wrong_all = 0;
		for (int i = 0; i < a.count; i++)
			wrong += recv[i] != expect[i & 7];
		MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		size_t bytes = (size_t)a.count * sizeof(float);
		double algbw = med > 0 ? bytes / med : 0;
		double busbw = algbw * 2.0 * (nranks - 1) / nranks;
		busbw_sum += busbw;
		if (rank != 0)
			continue;
		if (json)
			printf("%s{\"bytes\":%zu,\"time_s\":%.6f,\"min_s\":%.6f,\"max_s\":%.6f,"
			       "\"algbw\":%.1f,\"busbw\":%.1f,\"wrong\":%lld}",
			       s ? "," : "", bytes, med, mn, mx, algbw, busbw, wrong_all);
		else
			printf(" %12zu %12.3f %10.3f %10.3f %8lld\n", bytes, med * 1e3,
			       algbw / 1e9, busbw / 1e9, wrong_all);
		fflush(stdout);
	}
	double lat_med = 0, lat_p99 = 0;
	if (lat_iters > 0)
		lat_4k(lat_iters, &lat_med, &lat_p99);
	if (rank == 0) {
		if (json) {
			printf("],\"avg_busbw\":%.1f", busbw_sum / n_sizes);
			if (lat_iters > 0)
				printf(",\"lat_4k_iters\":%d,\"lat_4k_median_s\":%.9f,"
				       "\"lat_4k_p99_s\":%.9f",
				       lat_iters, lat_med, lat_p99);
			printf("}\n");
		} else {
			printf("# avg busbw %.3f GB/s\n", busbw_sum / n_sizes / 1e9);
			if (lat_iters > 0)
				printf("# 4 KiB round trip (%d calls, rank 0): median %.1f us, "
				       "p99 %.1f us\n",
				       lat_iters, lat_med * 1e6, lat_p99 * 1e6);
		}
	}
	free(send);
	free(recv);
	return 0;
}

struct ag_arg {
	char *send, *recv;
	int *counts, *displs;
};

static void ag_op(void *p)
{
	struct ag_arg *a = p;
	MPI_Allgatherv(a->send, a->counts[rank], MPI_BYTE, a->recv, a->counts, a->displs,
		       MPI_BYTE, MPI_COMM_WORLD);
}

static int run_allgatherv(size_t cases[][64], int n_cases, int iters, int json)
{
	size_t max_send = 0, max_total = 0;
	for (int c = 0; c < n_cases; c++) {
		size_t total = 0;
		for (int r = 0; r < nranks; r++) {
			if (cases[c][r] > INT32_MAX)
				fail("a per-rank count is over %s bytes", "2^31");
			total += cases[c][r];
			if (cases[c][r] > max_send)
				max_send = cases[c][r];
		}
		if (total > INT32_MAX)
			fail("a case's total is over %s bytes", "2^31");
		if (total > max_total)
			max_total = total;
	}
	char *send = malloc(max_send + 64), *recv = malloc(max_total + 64);
	int *counts = calloc((size_t)nranks, sizeof(int)),
	    *displs = calloc((size_t)nranks, sizeof(int));
	if (!send || !recv || !counts || !displs)
		fail("out of memory (%s)", "buffers");
	memset(send, rank + 1, max_send);
	memset(recv, 0, max_total);
	if (rank == 0) {
		if (json)
			printf("{\"mode\":\"allgatherv\",\"P\":%d,\"iters\":%d,", nranks,
			       iters);
		else
			printf("# MPI_Allgatherv, P=%d, median of %d\n#%14s %12s %8s\n", nranks,
			       iters, "total_bytes", "time_ms", "wrong");
	}
	if (json)
		print_hosts();
	if (rank == 0 && json)
		printf(",\"cases\":[");
	for (int c = 0; c < n_cases; c++) {
		size_t total = 0;
		for (int r = 0; r < nranks; r++) {
			counts[r] = (int)cases[c][r];
			displs[r] = (int)total;
			total += cases[c][r];
		}
		struct ag_arg a = {send, recv, counts, displs};
		double med, mn, mx;
		time_op(ag_op, &a, iters, &med, &mn, &mx);
		long long wrong = 0, wrong_all = 0;
		for (int r = 0; r < nranks; r++)
			for (int i = 0; i < counts[r]; i++)
				wrong += recv[displs[r] + i] != (char)(r + 1);
		MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank != 0)
			continue;
		if (json) {
			printf("%s{\"bytes_per_rank\":[", c ? "," : "");
			for (int r = 0; r < nranks; r++)
				printf("%s%zu", r ? "," : "", cases[c][r]);
			printf("],\"total_bytes\":%zu,\"time_s\":%.6f,\"min_s\":%.6f,"
			       "\"max_s\":%.6f,\"wrong\":%lld}",
			       total, med, mn, mx, wrong_all);
		} else {
			printf(" %14zu %12.3f %8lld\n", total, med * 1e3, wrong_all);
		}
		fflush(stdout);
	}
	if (rank == 0 && json)
		printf("]}\n");
	free(send);
	free(recv);
	free(counts);
	free(displs);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecomm-mpi-peer allreduce --sizes 4M,64M,256M [--iters K]\n"
	    "                                     [--lat-iters N] [--json]\n"
	    "       sparsecomm-mpi-peer allgatherv (--coo-bytes B | --coo-bytes B0,B1,.. |\n"
	    "                                       --coo-file FILE) [--iters K] [--json]\n"
	    "Run under mpirun (see bench/mpi/run-peer.sh). Sizes take K, M, G (binary).\n"
	    "A --coo-file line holds one case: P byte counts, one per rank.\n");
}

int main(int argc, char **argv)
{
	static size_t cases[MAX_CASES][64];
	size_t sizes[64];
	int n_sizes = 0, iters = 5, lat_iters = 0, json = 0, n_cases = 0;
	const char *mode = argc > 1 ? argv[1] : "", *coo_bytes = NULL, *coo_file = NULL;

	if (!strcmp(mode, "--help") || !strcmp(mode, "-h")) {
		usage(stdout);
		return 0;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (strcmp(mode, "allreduce") && strcmp(mode, "allgatherv")) {
		if (rank == 0)
			usage(stderr);
		MPI_Finalize();
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--sizes") && v) {
			n_sizes = parse_list(v, sizes, 64);
			if (n_sizes <= 0)
				fail("cannot parse --sizes '%s'", v);
			i++;
		} else if (!strcmp(a, "--iters") && v) {
			iters = atoi(v);
			if (iters < 1 || iters > 100000)
				fail("--iters needs 1 to 100000, not '%s'", v);
			i++;
		} else if (!strcmp(a, "--lat-iters") && v) {
			lat_iters = atoi(v);
			if (lat_iters < 0 || lat_iters > 1000000)
				fail("--lat-iters needs 0 to 1000000, not '%s'", v);
			i++;
		} else if (!strcmp(a, "--coo-bytes") && v) {
			coo_bytes = v;
			i++;
		} else if (!strcmp(a, "--coo-file") && v) {
			coo_file = v;
			i++;
		} else {
			fail("unknown or incomplete option '%s'", a);
		}
	}
	if (nranks > 64)
		fail("at most %s ranks", "64");
	if (!strcmp(mode, "allreduce")) {
		if (!n_sizes)
			fail("allreduce needs %s", "--sizes");
		run_allreduce(sizes, n_sizes, iters, lat_iters, json);
	} else {
		if (coo_bytes) {
			int n = parse_list(coo_bytes, cases[0], 64);
			if (n == 1)
				for (int r = 1; r < nranks; r++)
					cases[0][r] = cases[0][0];
			else if (n != nranks)
				fail("--coo-bytes needs one count or one per rank: '%s'",
				     coo_bytes);
			n_cases = 1;
		} else if (coo_file) {
			FILE *f = fopen(coo_file, "r");
			char line[4096];
			if (!f)
				fail("cannot open --coo-file %s", coo_file);
			while (n_cases < MAX_CASES && fgets(line, sizeof(line), f)) {
				if (line[0] == '#' || strspn(line, " \t\r\n") == strlen(line))
					continue;
				if (parse_list(line, cases[n_cases], 64) != nranks)
					fail("a --coo-file line needs one count per rank: %s",
					     line);
				n_cases++;
			}
			fclose(f);
		}
		if (!n_cases)
			fail("allgatherv needs %s", "--coo-bytes or --coo-file");
		run_allgatherv(cases, n_cases, iters, json);
	}
	MPI_Finalize();
	return 0;
}
