/*
 * transport.c: the parts of the transport layer common to every backend: the registry of
 * backends (see transport.h), the bootstrap record that world formation fills for create,
 * and the error text: one buffer per thread, so that the engine thread's last failure
 * stays readable after the call returns without any locking (the transport is used by one
 * thread at a time, but a daemon may run tests or probes on others).
 *
 * The nccl backend (nccl.c) is built where the CUDA toolkit's nccl.h is found
 * (SCD_HAVE_NCCL); a build without it reports "not built".
 */
#include "transport/transport.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport_internal.h"

#ifdef SCD_HAVE_NCCL
#define NCCL_OPS (&scd_transport_nccl_ops)
#else
#define NCCL_OPS NULL
#endif

static const char *const kind_names[SCD_TRANSPORT_COUNT] = {
    [SCD_TRANSPORT_TCP] = "tcp",
    [SCD_TRANSPORT_NCCL] = "nccl",
};

static __thread char transport_error_text[512];

const char *scd_transport_error(void)
{
	return transport_error_text;
}

void scd_transport_set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(transport_error_text, sizeof(transport_error_text), fmt, ap);
	va_end(ap);
}

/* ---- the registry ------------------------------------------------------------------- */

const char *scd_transport_kind_name(scd_transport_kind_t kind)
{
	return (unsigned)kind < SCD_TRANSPORT_COUNT ? kind_names[kind] : "unknown";
}

sc_status_t scd_transport_get(scd_transport_kind_t kind, const scd_transport_ops_t **ops_p)
{
	const scd_transport_ops_t *ops = NULL;
	if (kind == SCD_TRANSPORT_TCP)
		ops = &scd_transport_tcp_ops;
	else if (kind == SCD_TRANSPORT_NCCL)
		ops = NCCL_OPS;
	if (!ops) {
		scd_transport_set_error("transport '%s' is not built into this daemon",
					scd_transport_kind_name(kind));
		return SC_ERR_UNSUPPORTED;
	}
	*ops_p = ops;
	return SC_OK;
}

/*
 * "auto" resolves to tcp: every buffer the engine holds lives in host memory. Whatever
 * "auto" resolves to on a rank, world formation refuses a rank whose backend differs from
 * the coordinator's, naming the rank.
 */
sc_status_t scd_transport_lookup(const char *name, const scd_transport_ops_t **ops_p)
{
	if (!name || !strcmp(name, "auto"))
		return scd_transport_get(SCD_TRANSPORT_TCP, ops_p);
	for (int k = 0; k < SCD_TRANSPORT_COUNT; k++)
		if (!strcmp(name, kind_names[k]))
			return scd_transport_get((scd_transport_kind_t)k, ops_p);
	scd_transport_set_error("unknown transport '%s' (known: auto, tcp, nccl)", name);
	return SC_ERR_UNSUPPORTED;
}

/* ---- bootstrap ---------------------------------------------------------------------- */

sc_status_t scd_transport_boot_init(scd_transport_boot_t *b, scd_transport_endpoint_t *ep,
				    int rank, int size, uint64_t world_id)
{
	memset(b, 0, sizeof(*b));
	if (size < 1 || rank < 0 || rank >= size) {
		scd_transport_set_error("invalid rank %d of size %d", rank, size);
		return SC_ERR_INVALID;
	}
	b->blobs = calloc((size_t)size, sizeof(*b->blobs));
	if (!b->blobs) {
		scd_transport_set_error("out of memory for %d bootstrap blobs", size);
		return SC_ERR_NOMEM;
	}
	b->rank = rank;
	b->size = size;
	b->world_id = world_id;
	sc_status_t st = scd_transport_boot_set_blob(b, rank, ep->blob, ep->blob_len);
	if (st != SC_OK) {
		scd_transport_boot_clear(b);
		return st;
	}
	b->ep = ep;
	return SC_OK;
}

sc_status_t scd_transport_boot_set_blob(scd_transport_boot_t *b, int rank, const void *data,
					size_t len)
{
	if (rank < 0 || rank >= b->size) {
		scd_transport_set_error("rank %d: no such rank in a world of %d", rank,
					b->size);
		return SC_ERR_INVALID;
	}
	if (len > SCD_TRANSPORT_BLOB_MAX) {
		scd_transport_set_error("rank %d: bootstrap blob of %zu bytes (at most %d)",
					rank, len, SCD_TRANSPORT_BLOB_MAX);
		return SC_ERR_LIMIT;
	}
	void *copy = malloc(len ? len : 1);
	if (!copy) {
		scd_transport_set_error("out of memory for rank %d's bootstrap blob", rank);
		return SC_ERR_NOMEM;
	}
	if (len)
		memcpy(copy, data, len);
	free((void *)b->blobs[rank].data);
	b->blobs[rank] = (scd_transport_blob_t){.data = copy, .len = len};
	return SC_OK;
}

void scd_transport_boot_clear(scd_transport_boot_t *b)
{
	scd_transport_release(b->ep);
	for (int r = 0; b->blobs && r < b->size; r++)
		free((void *)b->blobs[r].data);
	free(b->blobs);
	memset(b, 0, sizeof(*b)); /* the key included */
}

sc_status_t scd_transport_subgroup(scd_transport_t *t, const int *ranks, int n,
				   scd_transport_t **view_p)
{
	if (!t->ops->subgroup) {
		scd_transport_set_error("%s: no views of the mesh (process sets run over tcp)",
					t->ops->name);
		return SC_ERR_UNSUPPORTED;
	}
	return t->ops->subgroup(t, ranks, n, view_p);
}
