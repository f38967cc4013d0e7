/*
 * itest_bits.c: the bits of every result, for comparing two runs of the same job under
 * two daemon settings (here the engine's pipeline on and off: run.sh compares the files).
 *
 *   bits LOG: 12 tensors of float data (not small integers: any change in the order of
 *       the additions shows), dense ones that fuse, three top-k 5% ones with their
 *       residuals and a threshold one, submitted together for 6 steps; each step's
 *       result of each tensor is hashed (FNV-1a of its bytes) into LOG.<rank>, one line
 *       a tensor a step, with the node's residuals of the sparsified tensors after the
 *       last step. The buffers that go through the scheme layer are pinned to one
 *       scheme each, so that only the setting compared can change their bits.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BITS_TENSORS 12
#define BITS_STEPS   6

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* A deterministic float of rank, step, tensor and element, spread over many magnitudes. */
static float value(int rank, int step, int t, size_t i)
{
	uint64_t x = ((uint64_t)rank * 1000003u + (uint64_t)step * 7919u +
		      (uint64_t)t * 104729u + i * 2654435761u) *
		     0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	double u = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) */
	return (float)((u - 0.5) * (1 + (x % 7) * 10.0));
}

int it_bits(int argc, char **argv)
{
	if (argc < 2)
		IT_FAIL("usage: bits LOG");
	char path[512];
	snprintf(path, sizeof(path), "%s.%d", argv[1], it_env.rank);
	FILE *f = fopen(path, "w");
	if (!f)
		IT_FAIL("cannot write %s", path);
	sc_client_t *c = it_connect();
	sc_tensor_t *t[BITS_TENSORS];
	size_t n[BITS_TENSORS];
	for (int k = 0; k < BITS_TENSORS; k++) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o)};
		char name[32];
		snprintf(name, sizeof(name), "bits.%02d", k);
		n[k] = 3000 + 1777 * (size_t)k;
		if (k % 4 == 1) {
			o.sparsifier = SC_SPARSIFY_TOPK;
			o.density = 0.05;
		} else if (k == 10) {
			o.sparsifier = SC_SPARSIFY_THRESHOLD;
			o.threshold = 20;
		}
		/* Every buffer that goes through the scheme layer has its scheme pinned: the
		 * cost model's choice follows measured times (calibration), which differ
		 * between two runs, and two schemes add in different orders. The small dense
		 * ones (under 64 KiB) keep their own path, unpinned. */
		if (o.sparsifier != SC_SPARSIFY_NONE)
			o.scheme = "agsparse";
		else if (n[k] * sizeof(float) >= 64 * 1024)
			o.scheme = "dense_ring";
		IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, n[k], &o, &t[k]),
			    "registering %s", name);
	}
	for (int s = 0; s < BITS_STEPS; s++) {
		sc_handle_t h[BITS_TENSORS];
		for (int k = 0; k < BITS_TENSORS; k++) {
			float *x = sc_tensor_data(t[k]);
			for (size_t i = 0; i < n[k]; i++)
				x[i] = value(it_env.rank, s, k, i);
			IT_CHECK_SC(sc_allreduce_async(
					c, t[k], k % 3 ? SC_OP_SUM : SC_OP_AVERAGE, &h[k]),
				    "allreduce bits.%02d step %d", k, s);
		}
		for (int k = 0; k < BITS_TENSORS; k++) {
			IT_CHECK_SC(sc_wait(c, h[k], IT_OP_TIMEOUT_MS), "bits.%02d step %d", k,
				    s);
			fprintf(f, "step %d tensor %d %016llx\n", s, k,
				(unsigned long long)fnv(sc_tensor_data(t[k]), n[k] * 4));
		}
	}
	for (int k = 0; k < BITS_TENSORS; k++)
		if (sc_tensor_residual(t[k]))
			fprintf(f, "residual %d %016llx\n", k,
				(unsigned long long)fnv(sc_tensor_residual(t[k]), n[k] * 4));
	fclose(f);
	sc_finalize(c);
	it_pass();
}
