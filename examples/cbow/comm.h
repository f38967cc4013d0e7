/*
 * comm.h: the CBOW example's use of sparsecomm. Four float32 tensors are registered once:
 * the two gradient matrices ("cbow.in", "cbow.out", V x D each), a small statistics vector
 * ("cbow.stats", averaged for the progress lines) and a digest vector ("cbow.check",
 * summed to verify that every rank holds the same weights). In local mode the buffers are
 * ordinary memory and every allreduce is the identity of a one-rank job.
 */
#ifndef CBOW_COMM_H
#define CBOW_COMM_H

#include "sparsecomm.h"

#include <stddef.h>
#include <stdint.h>

enum { COMM_IN, COMM_OUT, COMM_STATS, COMM_CHECK, COMM_NTENSORS };
#define COMM_STATS_NUMEL 4
#define COMM_CHECK_NUMEL 4

typedef struct comm {
	int local;
	int rank, size;
	int timeout_ms;
	sc_client_t *client;
	sc_tensor_t *tensor[COMM_NTENSORS];
	float *buf[COMM_NTENSORS]; /* the tensors' buffers (shared with the daemon) */
	size_t numel[COMM_NTENSORS];
	uint64_t synced_bytes; /* payload of every allreduce so far */
	double wait_s;	       /* time spent in allreduces */
} comm_t;

/* Connects (unless local) and registers the tensors; 0, or -1 after printing why. With
 * exdyna > 0 the gradient matrices are sparsified by the daemon with ExDyna at that density
 * (lossy, with error feedback), else their non-zeros are sent exactly. */
int comm_open(comm_t *cm, int local, size_t grad_numel, int timeout_ms, double exdyna);

/*
 * Starts an allreduce of each listed tensor, then waits for all of them (each wait
 * bounded by the timeout). 0, or -1 after printing the library's error.
 */
int comm_allreduce(comm_t *cm, const int *which, int n, sc_reduce_op_t op);

/* Prints what the node's daemon measured for the gradient tensors (scheme, bytes). */
void comm_report(comm_t *cm);

void comm_close(comm_t *cm);

#endif /* CBOW_COMM_H */
