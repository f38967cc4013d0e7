/*
 * comm.c: registration and allreduce of the CBOW example's tensors (see comm.h). The
 * gradient matrices are started together and waited for together, so the daemons may fuse
 * or pipeline them; a failure prints sc_last_error(), which names the ranks and tensor.
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const tensor_names[COMM_NTENSORS] = {
    [COMM_IN] = "cbow.in",
    [COMM_OUT] = "cbow.out",
    [COMM_STATS] = "cbow.stats",
    [COMM_CHECK] = "cbow.check",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fail(const comm_t *cm, const char *what, const char *name, sc_status_t st)
{
	const char *detail = sc_last_error();

	fprintf(stderr, "cbow: rank %d: %s '%s' failed: %s: %s\n", cm->rank, what, name,
		sc_status_name(st), detail && *detail ? detail : sc_status_message(st));
}

static int open_local(comm_t *cm)
{
	for (int i = 0; i < COMM_NTENSORS; i++) {
		size_t bytes = (cm->numel[i] * sizeof(float) + 63) & ~(size_t)63;

		cm->buf[i] = aligned_alloc(64, bytes);
		if (!cm->buf[i]) {
			fprintf(stderr, "cbow: out of memory for '%s'\n", tensor_names[i]);
			return -1;
		}
		memset(cm->buf[i], 0, bytes);
	}
	return 0;
}

int comm_open(comm_t *cm, int local, size_t grad_numel, int timeout_ms, double exdyna)
{
	sc_status_t st;

	memset(cm, 0, sizeof(*cm));
	cm->local = local;
	cm->timeout_ms = timeout_ms;
	cm->size = 1;
	cm->numel[COMM_IN] = cm->numel[COMM_OUT] = grad_numel;
	cm->numel[COMM_STATS] = COMM_STATS_NUMEL;
	cm->numel[COMM_CHECK] = COMM_CHECK_NUMEL;
	if (local)
		return open_local(cm);
	st = sc_connect(NULL, timeout_ms, &cm->client);
	if (st != SC_OK) {
		const char *sock = getenv("SPARSECOMM_SOCKET");

		fail(cm, "connecting to the daemon at",
		     sock ? sock : "(SPARSECOMM_SOCKET unset)", st);
		fprintf(stderr, "cbow: start it under sparsecomm-run, or use --local\n");
		return -1;
	}
	cm->rank = sc_rank(cm->client);
	cm->size = sc_size(cm->client);
	for (int i = 0; i < COMM_NTENSORS; i++) {
		/* The embedding gradients are naturally sparse (only the rows of the batch's
		 * words are non-zero): say so, and the daemons send their non-zeros with the
		 * cheapest lossless scheme instead of the whole matrices. */
		sc_tensor_opts_t opts = {.struct_size = sizeof(opts),
					 .sparsifier = SC_SPARSIFY_NATURAL};
		if (exdyna > 0) {
			opts.sparsifier = SC_SPARSIFY_EXDYNA;
			opts.density = exdyna;
		}
		int grad = i == COMM_IN || i == COMM_OUT;
		st = sc_register_ex(cm->client, tensor_names[i], SC_FLOAT32, cm->numel[i],
				    grad ? &opts : NULL, &cm->tensor[i]);
		if (st != SC_OK) {
			fail(cm, "registering tensor", tensor_names[i], st);
			return -1;
		}
		cm->buf[i] = sc_tensor_data(cm->tensor[i]);
		memset(cm->buf[i], 0, cm->numel[i] * sizeof(float));
	}
	return 0;
}

int comm_allreduce(comm_t *cm, const int *which, int n, sc_reduce_op_t op)
{
	sc_handle_t handles[COMM_NTENSORS] = {0};
	double t0 = now_s();
	int rc = 0;

	for (int i = 0; i < n; i++)
		cm->synced_bytes += cm->numel[which[i]] * sizeof(float);
	if (cm->local)
		return 0;
	for (int i = 0; i < n; i++) {
		sc_status_t st =
		    sc_allreduce_async(cm->client, cm->tensor[which[i]], op, &handles[i]);

		if (st != SC_OK) {
			fail(cm, "starting the allreduce of", tensor_names[which[i]], st);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		sc_status_t st = sc_wait(cm->client, handles[i], cm->timeout_ms);

		if (st != SC_OK) {
			/* The process exits: sc_finalize abandons the other operations. */
			fail(cm, "allreduce of", tensor_names[which[i]], st);
			rc = -1;
			break;
		}
	}
	cm->wait_s += now_s() - t0;
	return rc;
}

void comm_report(comm_t *cm)
{
	if (cm->local)
		return;
	for (int i = COMM_IN; i <= COMM_OUT; i++) {
		sc_tensor_stats_t s = {.struct_size = sizeof(s)};
		if (sc_tensor_stats(cm->client, cm->tensor[i], &s) != SC_OK)
			continue;
		printf("%s: scheme=%s calls=%llu sent=%.1fMB received=%.1fMB (dense would be "
		       "%.1fMB each way) density=%.3f densification=%.2f\n",
		       tensor_names[i], s.scheme, (unsigned long long)s.calls,
		       (double)s.bytes_sent / 1e6, (double)s.bytes_received / 1e6,
		       2.0 * (cm->size - 1) / cm->size * (double)s.calls *
			   (double)(cm->numel[i] * sizeof(float)) / 1e6,
		       s.density, s.densification);
	}
}

void comm_close(comm_t *cm)
{
	if (cm->local) {
		for (int i = 0; i < COMM_NTENSORS; i++)
			free(cm->buf[i]);
	} else {
		sc_finalize(cm->client);
	}
	memset(cm, 0, sizeof(*cm));
}
