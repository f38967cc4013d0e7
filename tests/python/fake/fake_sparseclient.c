/*
 * fake_sparseclient.c: a stand-in for libsparseclient with a world of one trainer, used
 * only by tests/python to exercise the Python binding's own logic (registration, buffer
 * views, COO expansion, handles, errors) without daemons. An allreduce of one trainer is
 * the identity (SUM and AVERAGE alike); COO input is scattered (repeats summed) into the
 * dense buffer. Tensors whose name starts with "fail." complete with SC_ERR_PEER, and a
 * name starting with "unsupported." is refused at registration, so error paths are tested.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparsecomm.h"

struct sc_client {
	int dummy;
};
struct sc_tensor {
	char name[256];
	sc_dtype_t dtype;
	size_t numel, coo_cap;
	void *data, *coo_val;
	uint32_t *coo_idx;
	sc_handle_t busy;
	int fail;
	struct sc_tensor *next;
};

static __thread char last_err[512];
static struct sc_tensor *tensors;
static sc_handle_t next_handle = 1;

const char *sc_last_error(void) { return last_err; }

sc_status_t sc_connect(const char *socket_path, int timeout_ms, sc_client_t **client_p)
{
	static struct sc_client c;
	*client_p = &c;
	return SC_OK;
}
int sc_rank(const sc_client_t *c) { return 0; }
int sc_size(const sc_client_t *c) { return 1; }
int sc_local_rank(const sc_client_t *c) { return 0; }
int sc_local_size(const sc_client_t *c) { return 1; }

sc_status_t sc_register_ex(sc_client_t *client, const char *name, sc_dtype_t dtype,
			   size_t numel, const sc_tensor_opts_t *opts, sc_tensor_t **tensor_p)
{
	size_t es = sc_dtype_size(dtype);
	if (opts && opts->struct_size != sizeof(*opts)) {
		snprintf(last_err, sizeof last_err, "struct_size %u != %zu", opts->struct_size,
			 sizeof(*opts));
		return SC_ERR_INVALID;
	}
	if (!strncmp(name, "unsupported.", 12)) {
		snprintf(last_err, sizeof last_err, "tensor '%s': sparsifier %d not supported",
			 name, opts ? (int)opts->sparsifier : -1);
		return SC_ERR_UNSUPPORTED;
	}
	struct sc_tensor *t = calloc(1, sizeof(*t));
	snprintf(t->name, sizeof t->name, "%s", name);
	t->dtype = dtype;
	t->numel = numel;
	t->data = aligned_alloc(64, (numel * es + 63) / 64 * 64);
	if (opts && opts->coo_capacity) {
		t->coo_cap = opts->coo_capacity;
		t->coo_idx = calloc(t->coo_cap, 4);
		t->coo_val = calloc(t->coo_cap, es);
	}
	t->fail = !strncmp(name, "fail.", 5);
	t->next = tensors;
	tensors = t;
	*tensor_p = t;
	/* record the options so that the test can read them back */
	FILE *f = getenv("FAKE_SC_OPTS_LOG") ? fopen(getenv("FAKE_SC_OPTS_LOG"), "a") : NULL;
	if (f) {
		fprintf(f, "%s %d %d %g %g %s %zu\n", name, opts ? opts->allow_lossy : 0,
			opts ? (int)opts->sparsifier : 0, opts ? opts->density : 0,
			opts ? opts->threshold : 0, opts && opts->scheme ? opts->scheme : "-",
			opts ? opts->coo_capacity : 0);
		fclose(f);
	}
	return SC_OK;
}
sc_status_t sc_register(sc_client_t *c, const char *n, sc_dtype_t d, size_t k, sc_tensor_t **t)
{
	return sc_register_ex(c, n, d, k, NULL, t);
}
uint32_t *sc_tensor_coo_indices(const sc_tensor_t *t) { return t->coo_idx; }
void *sc_tensor_coo_values(const sc_tensor_t *t) { return t->coo_val; }
void *sc_tensor_data(const sc_tensor_t *t) { return t->data; }
const char *sc_tensor_name(const sc_tensor_t *t) { return t->name; }
sc_dtype_t sc_tensor_dtype(const sc_tensor_t *t) { return t->dtype; }
size_t sc_tensor_numel(const sc_tensor_t *t) { return t->numel; }

static sc_status_t start(sc_tensor_t *t, sc_handle_t *h)
{
	if (t->busy) {
		snprintf(last_err, sizeof last_err, "tensor '%s' busy", t->name);
		return SC_ERR_BUSY;
	}
	t->busy = *h = next_handle++;
	return SC_OK;
}
sc_status_t sc_allreduce_async(sc_client_t *c, sc_tensor_t *t, sc_reduce_op_t op,
			       sc_handle_t *h)
{
	return start(t, h);
}
sc_status_t sc_allreduce_coo_async(sc_client_t *c, sc_tensor_t *t, size_t nnz,
				   sc_reduce_op_t op, sc_handle_t *h)
{
	if (!t->coo_cap || nnz > t->coo_cap)
		return SC_ERR_INVALID;
	size_t es = sc_dtype_size(t->dtype);
	memset(t->data, 0, t->numel * es);
	for (size_t i = 0; i < nnz; i++) {
		uint32_t k = t->coo_idx[i];
		if (k >= t->numel)
			return SC_ERR_INVALID;
		if (t->dtype == SC_FLOAT32)
			((float *)t->data)[k] += ((float *)t->coo_val)[i];
		else if (t->dtype == SC_FLOAT64)
			((double *)t->data)[k] += ((double *)t->coo_val)[i];
	}
	return start(t, h);
}
static sc_tensor_t *find(sc_handle_t h)
{
	for (sc_tensor_t *t = tensors; t; t = t->next)
		if (t->busy == h)
			return t;
	return NULL;
}
sc_status_t sc_wait(sc_client_t *c, sc_handle_t h, int timeout_ms)
{
	sc_tensor_t *t = find(h);
	if (!t) {
		snprintf(last_err, sizeof last_err, "unknown handle %llu", (unsigned long long)h);
		return SC_ERR_NOT_FOUND;
	}
	t->busy = 0;
	if (t->fail) {
		snprintf(last_err, sizeof last_err,
			 "allreduce of tensor '%s' failed: rank 3 exited", t->name);
		return SC_ERR_PEER;
	}
	return SC_OK;
}
sc_status_t sc_poll(sc_client_t *c, sc_handle_t h) { return sc_wait(c, h, 0); }
sc_status_t sc_allreduce(sc_client_t *c, sc_tensor_t *t, sc_reduce_op_t op, int tmo)
{
	sc_handle_t h;
	sc_status_t st = sc_allreduce_async(c, t, op, &h);
	return st ? st : sc_wait(c, h, tmo);
}
sc_status_t sc_finalize(sc_client_t *c) { return SC_OK; }
void sc_set_log_callback(sc_log_cb cb, void *arg) {}
