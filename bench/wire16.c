/*
 * wire16.c: `sparsecomm-bench wire16`: the throughput of the 16-bit wire's conversions
 * (daemon/device/wire16.h), which the tcp ring runs on every byte it sends and receives,
 * with F16C / AVX2 and with the portable code, in GB/s of float32 data (the larger side).
 *
 *   build/bin/sparsecomm-bench wire16 [--numel N] [--iters K]
 *
 * narrow: float32 -> 16 bits (each chunk before it is sent); add: acc += widen(16 bits)
 * (each piece on arrival); widen: 16 bits -> float32 (the allgather); copy: memcpy of
 * the float32 bytes, for scale. The median of K passes over N values (default 16 Mi, 64
 * MiB: beyond the caches, as a fused buffer is).
 */
#include "device/wire16.h"
#include "bench.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { NARROW, ADD, WIDEN, COPY } kind_t;

static double pass_s(kind_t k, uint32_t wire, float *f, float *g, uint16_t *h, size_t n)
{
	double t0 = bench_now_s();
	if (k == NARROW)
		scd_wire16_narrow(wire, h, f, n);
	else if (k == ADD)
		scd_wire16_add(wire, f, h, n);
	else if (k == WIDEN)
		scd_wire16_widen(wire, g, h, n);
	else
		memcpy(g, f, n * 4);
	return bench_now_s() - t0;
}

BENCH_COMMAND(wire16, "fp16/bf16 wire conversions: GB/s with F16C and portable")
{
	size_t n = 16u << 20;
	int iters = 7;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--numel") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else {
			fprintf(stderr,
				"usage: sparsecomm-bench wire16 [--numel N] [--iters K]\n");
			return !strcmp(argv[i], "--help") ? 0 : 2;
		}
	}
	if (n == 0 || iters < 1 || iters > 1000) {
		fprintf(stderr, "wire16: --numel must be > 0 and --iters 1..1000\n");
		return 2;
	}
	float *f = malloc(n * 4), *g = malloc(n * 4);
	uint16_t *h = malloc(n * 2);
	double *t = malloc(sizeof(double) * (size_t)iters);
	if (!f || !g || !h || !t) {
		fprintf(stderr, "wire16: no memory for %zu values\n", n);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		f[i] = (float)((double)(i % 100003) / 1000.0 - 50.0);
	memset(g, 0, n * 4);
	memset(h, 0, n * 2);
	static const char *kinds[] = {"narrow", "add", "widen", "copy"};
	int have = scd_wire16_use_f16c(1);
	printf("# wire16: %zu values (%.0f MiB float32), median of %d; GB/s of float32 bytes\n",
	       n, n * 4 / 1048576.0, iters);
	printf("# %-6s %-6s %10s %10s %8s\n", "format", "op", have ? "f16c/avx2" : "(no f16c)",
	       "portable", "speedup");
	for (uint32_t wire = SC_WIRE_FP16; wire <= SC_WIRE_BF16; wire++)
		for (int k = NARROW; k <= COPY; k++) {
			if (k == COPY && wire != SC_WIRE_FP16)
				continue;
			double gbs[2];
			for (int path = 1; path >= 0; path--) {
				scd_wire16_use_f16c(path);
				pass_s((kind_t)k, wire, f, g, h, n); /* warm */
				for (int i = 0; i < iters; i++)
					t[i] = pass_s((kind_t)k, wire, f, g, h, n);
				qsort(t, (size_t)iters, sizeof(double), bench_cmp_double);
				gbs[path] = n * 4 / t[iters / 2] / 1e9;
			}
			printf("  %-6s %-6s %10.2f %10.2f %7.2fx\n",
			       k == COPY ? "-" : sc_wire_name((sc_wire_t)wire), kinds[k],
			       gbs[1], gbs[0], gbs[1] / gbs[0]);
		}
	scd_wire16_use_f16c(1);
	free(f), free(g), free(h), free(t);
	return 0;
}
