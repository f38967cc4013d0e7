/*
 * compress_torch.h: the peer of `sparsecomm-bench compress --device cuda`'s exact top-k:
 * torch.topk of the magnitudes of the same tensor on the same GPU, timed in the same run
 * (compress.c), when python3 with torch and a CUDA device is on the machine.
 */
#ifndef SC_BENCH_COMPRESS_TORCH_H
#define SC_BENCH_COMPRESS_TORCH_H

#include <stdint.h>

typedef struct cb_torch {
	int ok;
	double seconds; /* the best of the runs */
	char why[320];	/* when not ok: why it was not timed */
} cb_torch_t;

/* Times torch.topk(g.abs(), k, sorted=False) on g = grad_host[0, n) copied to the GPU:
 * one warm-up, then the best of reps runs, each ended by torch.cuda.synchronize() (the
 * bench's own ops end with the device's sync). */
void cb_torch_topk(const float *grad_host, uint64_t n, uint64_t k, int reps, cb_torch_t *out);

#endif
