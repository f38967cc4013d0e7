/*
 * seal.c: `sparsecomm-bench seal`, the cost of the tcp data plane's record layer
 * (daemon/transport/tcp_seal.h) on one core: for each cipher this CPU runs and each of
 * data_protection's sealing modes, the throughput of sealing records of a payload size and
 * of opening them again (in memory, no socket), beside a memcpy of the same bytes. Records
 * of several sizes show what the per-record cost is worth against SCD_SEAL_RECORD_BYTES.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/tcp_seal.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seals and opens records of len bytes for about secs seconds; the seconds per byte of
 * sealing and of opening go to seal_p and open_p. */
static int run(int mode, int cipher, size_t len, double secs, double *seal_p, double *open_p)
{
	uint8_t k1[SCD_SEAL_KEY_BYTES], k2[SCD_SEAL_KEY_BYTES];
	memset(k1, 1, sizeof(k1));
	memset(k2, 2, sizeof(k2));
	scd_seal_t *a = scd_seal_new(mode, cipher, k1, k2),
		   *b = scd_seal_new(mode, cipher, k2, k1);
	size_t batch = (8u << 20) / len + 1, rec_bytes = len + 64;
	unsigned char *plain = malloc(len + 1), *out = malloc(len + 1);
	unsigned char *recs = malloc(batch * rec_bytes);
	if (!a || !b || !plain || !out || !recs) {
		fprintf(stderr, "sparsecomm-bench seal: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < len; i++)
		plain[i] = (unsigned char)(i * 131);
	double t_seal = 0, t_open = 0;
	size_t bytes = 0, n[1] = {0};
	while (t_seal + t_open < secs) {
		double t0 = now_s();
		for (size_t r = 0; r < batch; r++)
			n[0] = scd_seal_record(a, plain, len, recs + r * rec_bytes);
		double t1 = now_s();
		for (size_t r = 0; r < batch; r++)
			if (scd_seal_open(b, recs + r * rec_bytes, n[0], out) != (ssize_t)len) {
				fprintf(stderr,
					"sparsecomm-bench seal: a record failed to open\n");
				return 1;
			}
		double t2 = now_s();
		t_seal += t1 - t0;
		t_open += t2 - t1;
		bytes += batch * len;
	}
	*seal_p = t_seal / (double)bytes;
	*open_p = t_open / (double)bytes;
	scd_seal_free(a);
	scd_seal_free(b);
	free(plain);
	free(out);
	free(recs);
	return 0;
}

static double copy_rate(size_t len, double secs)
{
	size_t batch = (8u << 20) / len + 1;
	unsigned char *src = malloc(batch * len), *dst = malloc(batch * len);
	if (!src || !dst)
		return 0;
	memset(src, 7, batch * len);
	memset(dst, 0, batch * len);
	double t = 0;
	size_t bytes = 0;
	while (t < secs) {
		double t0 = now_s();
		for (size_t r = 0; r < batch; r++)
			memcpy(dst + r * len, src + r * len, len);
		t += now_s() - t0;
		bytes += batch * len;
	}
	free(src);
	free(dst);
	return (double)bytes / t / 1e6;
}

BENCH_COMMAND(seal, "the data plane's record layer: seal and open throughput per core")
{
	double secs = 0.5;
	size_t sizes[8] = {1024, 4096, 16384, SCD_SEAL_RECORD_BYTES};
	int n_sizes = 4;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--secs") && i + 1 < argc) {
			secs = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--record") && i + 1 < argc) {
			sizes[0] = strtoull(argv[++i], NULL, 0);
			n_sizes = 1;
		} else {
			printf("usage: sparsecomm-bench seal [--secs S] [--record BYTES]\n"
			       "  S seconds per measurement (default 0.5); BYTES: one payload "
			       "size "
			       "(at most %u) instead of 1, 4, 16 and 64 KiB\n",
			       SCD_SEAL_RECORD_BYTES);
			return !strcmp(argv[i], "--help") ? 0 : 2;
		}
	}
	if (sizes[0] < 1 || sizes[0] > SCD_SEAL_RECORD_BYTES || !(secs > 0)) {
		fprintf(stderr, "sparsecomm-bench seal: --record must be 1..%u, --secs > 0\n",
			SCD_SEAL_RECORD_BYTES);
		return 2;
	}
	printf("%-18s %-10s %8s %12s %12s %12s\n", "cipher", "mode", "record", "seal MB/s",
	       "open MB/s", "both MB/s");
	for (int k = 0; k < n_sizes; k++)
		printf("%-18s %-10s %8zu %12s %12s %12.0f\n", "memcpy", "-", sizes[k], "-", "-",
		       copy_rate(sizes[k], secs));
	for (int cipher = SCD_SEAL_AES256GCM; cipher >= SCD_SEAL_CHACHA20; cipher--) {
		if (cipher == SCD_SEAL_AES256GCM && !scd_seal_aes_available()) {
			printf("%-18s (no AES-NI and PCLMUL on this CPU)\n",
			       scd_seal_cipher_name(cipher));
			continue;
		}
		for (int mode = SCD_SEAL_INTEGRITY; mode <= SCD_SEAL_ENCRYPT; mode++)
			for (int k = 0; k < n_sizes; k++) {
				double s, o;
				if (run(mode, cipher, sizes[k], secs, &s, &o))
					return 1;
				printf("%-18s %-10s %8zu %12.0f %12.0f %12.0f\n",
				       scd_seal_cipher_name(cipher), scd_seal_mode_name(mode),
				       sizes[k], 1e-6 / s, 1e-6 / o, 1e-6 / (s + o));
			}
	}
	return 0;
}
