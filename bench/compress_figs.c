/*
 * compress_figs.c: reproductions of two ZEN figures on the cpu device.
 *
 *   sparsecomm-bench compress_fig16 [--numel N] [--density D] [--parts P] [--threads T]
 *                                   [--reps R]
 *     ZEN Fig. 16: hierarchical-hashing cost per non-zero (ns) for parallel memory
 *     r1 in {|G|d, 2|G|d, 4|G|d} (k = 3) and rehash count k in {1, 2, 3, 4} (r1 = 2|G|d),
 *     r2 = r1 / 10, with the share of indices that fell to serial memory (and spill).
 *     Input: the COO non-zeros (the push's input), so the time is hashing + extraction.
 *     The configurations run round robin, R rounds (best and median reported), and the
 *     counts that drive the cost are printed too, free of timing noise: parallel probes
 *     per non-zero (hashing) and table slots per non-zero (what extraction sweeps).
 *   sparsecomm-bench compress_fig17 [--numel N] [--parts P]
 *     ZEN Fig. 17a: bytes of COO, bitmap (one tensor-wide bitmap, and ZEN's pull where
 *     each of P servers sends one), hash bitmap (P partitions; also its bitmaps alone,
 *     |G|/8 bytes in all whatever the density) and 256-blocks, normalised to the dense
 *     tensor, against the aggregated density; measured by the real encoders. COO crosses
 *     the hash bitmap at density 1/32.
 * Both print one JSON object per line with --json, else a table.
 */
#include "bench.h"

#include "compress_common.h"
#include "device/format.h"
#include "device/hhash.h"

#include <math.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef struct {
	double r1;
	uint32_t k;
	const char *panel;
} fig16_cfg_t;

static const fig16_cfg_t fig16_cfgs[] = {{1, 3, "a"}, {2, 3, "a"}, {4, 3, "a"}, {2, 1, "b"},
					 {2, 2, "b"}, {2, 3, "b"}, {2, 4, "b"}};
#define FIG16_N	       (sizeof(fig16_cfgs) / sizeof(fig16_cfgs[0]))
#define FIG16_MAX_REPS 101

BENCH_COMMAND(compress_fig16, "ZEN Fig. 16: hashing cost vs r1 and k (serial share)")
{
	const char *v;
	uint64_t n = (v = cb_opt(argc, argv, "--numel")) ? strtoull(v, NULL, 0) : (1ull << 26);
	double d = (v = cb_opt(argc, argv, "--density")) ? atof(v) : 0.01;
	uint32_t P = (v = cb_opt(argc, argv, "--parts")) ? (uint32_t)atoi(v) : 16;
	unsigned T = (v = cb_opt(argc, argv, "--threads")) ? (unsigned)atoi(v) : 1;
	int reps = (v = cb_opt(argc, argv, "--reps")) ? atoi(v) : 11;
	int json = cb_flag(argc, argv, "--json");
	if (!n || n > SCD_NUMEL_MAX || !(d > 0 && d <= 1) || !P || !T || reps < 1 ||
	    reps > FIG16_MAX_REPS) {
		fprintf(stderr,
			"usage: sparsecomm-bench compress_fig16 [--numel N] [--density D] "
			"[--parts P] [--threads T] [--reps R (1..%d)] [--json]\n",
			FIG16_MAX_REPS);
		return 2;
	}
	float *g = cb_alloc(n * 4);
	uint64_t nnz = cb_fill_sparse(g, n, d, 31);
	scd_coo_t in = {cb_alloc(nnz * 4 + 4), cb_alloc(nnz * 4 + 4), 0, nnz};
	for (uint64_t i = 0; i < n; i++)
		if (g[i] != 0) {
			in.idx[in.nnz] = (uint32_t)i;
			in.val[in.nnz++] = g[i];
		}
	free(g);
	scd_coo_t out = {cb_alloc(nnz * 4 + 4), cb_alloc(nnz * 4 + 4), 0, nnz};
	uint64_t *offset = cb_alloc((P + 1) * 8);
	scd_hh_t *hh[FIG16_N];
	scd_hh_stats_t st[FIG16_N];
	static double t[FIG16_N][FIG16_MAX_REPS];
	for (size_t i = 0; i < FIG16_N; i++) {
		scd_hh_cfg_t c = scd_hh_cfg_default(n, P, nnz, 4242);
		c.r1_factor = fig16_cfgs[i].r1;
		c.k = fig16_cfgs[i].k;
		c.threads = T;
		if (scd_hh_create(&c, &hh[i]) != SC_OK ||
		    scd_hh_push_coo(hh[i], &in, &out, offset, &st[i]) != SC_OK) /* warm-up */
			return 1;
	}
	/* round robin over the configurations, so load drifting during the run hits them
	 * all alike; each one's best and median are reported */
	for (int r = 0; r < reps; r++)
		for (size_t i = 0; i < FIG16_N; i++) {
			double t0 = cb_now_s();
			if (scd_hh_push_coo(hh[i], &in, &out, offset, &st[i]) != SC_OK)
				return 1;
			t[i][r] = cb_now_s() - t0;
		}
	if (!json)
		printf("numel %llu density %g nnz %llu parts %u threads %u (%d rounds)\n"
		       "%-5s %-6s %-3s %9s %10s %12s %12s %12s %10s\n",
		       (unsigned long long)n, d, (unsigned long long)nnz, P, T, reps, "panel",
		       "r1/nnz", "k", "best ns", "median ns", "probes/nnz", "serial share",
		       "slots/nnz", "imbalance");
	for (size_t i = 0; i < FIG16_N; i++) {
		uint64_t r1, r2;
		scd_hh_geometry(hh[i], &r1, &r2);
		qsort(t[i], (size_t)reps, sizeof(double), cmp_double);
		double best = t[i][0] * 1e9 / (double)nnz;
		double med = t[i][reps / 2] * 1e9 / (double)nnz;
		double share = (double)(st[i].serial + st[i].spill) / (double)(nnz ? nnz : 1);
		double probes = (double)st[i].probes / (double)(nnz ? nnz : 1);
		double slots = (double)((r1 + r2) * P) / (double)(nnz ? nnz : 1);
		if (json)
			printf(
			    "{\"panel\":\"%s\",\"r1_over_nnz\":%g,\"k\":%u,"
			    "\"ns_per_nonzero\":%.3f,\"ns_per_nonzero_median\":%.3f,"
			    "\"probes_per_nonzero\":%.4f,\"serial_share\":%.6f,\"spill\":%llu,"
			    "\"table_slots_per_nonzero\":%.3f,\"imbalance\":%.4f}\n",
			    fig16_cfgs[i].panel, fig16_cfgs[i].r1, fig16_cfgs[i].k, best, med,
			    probes, share, (unsigned long long)st[i].spill, slots,
			    st[i].imbalance);
		else
			printf("%-5s %-6g %-3u %9.2f %10.2f %12.4f %12.5f %12.3f %10.4f\n",
			       fig16_cfgs[i].panel, fig16_cfgs[i].r1, fig16_cfgs[i].k, best,
			       med, probes, share, slots, st[i].imbalance);
		scd_hh_destroy(hh[i]);
	}
	return 0;
}

BENCH_COMMAND(compress_fig17, "ZEN Fig. 17a: bytes per format vs aggregated density")
{
	const char *v;
	uint64_t n = (v = cb_opt(argc, argv, "--numel")) ? strtoull(v, NULL, 0) : (1ull << 22);
	uint32_t P = (v = cb_opt(argc, argv, "--parts")) ? (uint32_t)atoi(v) : 16;
	int json = cb_flag(argc, argv, "--json");
	if (!n || n > SCD_NUMEL_MAX || !P) {
		fprintf(stderr,
			"usage: sparsecomm-bench compress_fig17 [--numel N] [--parts P] "
			"[--json]\n");
		return 2;
	}
	static const double dens[] = {0.001, 0.01, 0.02, 1.0 / 32, 0.05, 0.1,
				      0.2,   0.4,  0.6,	 0.8,	   0.95, 1.0};
	float *g = cb_alloc(n * 4);
	scd_coo_t coo = {cb_alloc(n * 4), cb_alloc(n * 4), 0, n};
	uint64_t cap = 16 * n + 4096;
	void *buf = cb_alloc(cap);
	const scd_partmap_t *map;
	if (scd_partmap_acquire(n, P, 4242, &map) != SC_OK)
		return 1;
	if (!json)
		printf("numel %llu parts %u (bytes / dense bytes)\n%-10s %8s %8s %12s %12s "
		       "%12s %10s\n",
		       (unsigned long long)n, P, "density", "coo", "bitmap", "bitmap_pull",
		       "hash_bitmap", "hb_bitmaps", "blocks256");
	for (size_t i = 0; i < sizeof(dens) / sizeof(dens[0]); i++) {
		uint64_t nnz = cb_fill_sparse(g, n, dens[i], 7 + i), bytes, hb = 0;
		coo.nnz = 0;
		for (uint64_t j = 0; j < n; j++)
			if (g[j] != 0) {
				coo.idx[coo.nnz] = (uint32_t)j;
				coo.val[coo.nnz++] = g[j];
			}
		double dense = 4.0 * (double)n, b_coo, b_bm, b_blk;
		/* ZEN's plain-bitmap pull: every server's bitmap spans the whole tensor */
		double b_bmp =
		    (double)P * 8 * (double)scd_fmt_bitmap_words(n) + 4.0 * (double)nnz;
		scd_coo_encode(&coo, buf, cap, &bytes);
		b_coo = (double)bytes;
		scd_bitmap_encode(&coo, n, buf, cap, &bytes);
		b_bm = (double)bytes;
		for (uint32_t p = 0; p < P; p++) {
			scd_hash_bitmap_encode(map, p, g, buf, cap, &bytes);
			hb += bytes;
		}
		/* the bitmaps alone: |G|/8 bytes in all whatever the density */
		double hb_idx = (double)hb - 4.0 * (double)nnz;
		scd_blocks_encode(&coo, n, 256, buf, cap, &bytes);
		b_blk = (double)bytes;
		if (json)
			printf("{\"density\":%g,\"nnz\":%llu,\"coo\":%.5f,\"bitmap\":%.5f,"
			       "\"bitmap_per_server_pull\":%.5f,\"hash_bitmap\":%.5f,"
			       "\"hash_bitmap_bitmaps\":%.5f,\"blocks256\":%.5f}\n",
			       dens[i], (unsigned long long)nnz, b_coo / dense, b_bm / dense,
			       b_bmp / dense, (double)hb / dense, hb_idx / dense,
			       b_blk / dense);
		else
			printf("%-10.5f %8.4f %8.4f %12.4f %12.4f %12.4f %10.4f\n", dens[i],
			       b_coo / dense, b_bm / dense, b_bmp / dense, (double)hb / dense,
			       hb_idx / dense, b_blk / dense);
	}
	scd_partmap_release(map);
	return 0;
}
