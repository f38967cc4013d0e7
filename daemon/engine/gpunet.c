/*
 * gpunet.c: the transport of GPU buffers (gpunet.h).
 */
#include "engine/gpunet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "util/log.h"

typedef enum { WANT_AUTO, WANT_TCP, WANT_NCCL } want_t;

/* GPU buffers that wait after a failed attempt to make a communicator, doubling. */
#define GPUNET_BACKOFF 8

struct scd_gpunet {
	want_t want;
	int settled_tcp;       /* the world takes tcp for good (auto) */
	int failed;	       /* the communicator failed since its last job */
	int local_ok;	       /* -1: not asked yet; 0/1: this node can run NCCL */
	scd_transport_t *nccl; /* NULL: none; set under mu (peer_gone reads it) */
	pthread_mutex_t mu;
	uint64_t serial;   /* communicators made, the same count on every rank */
	int authenticated; /* the job has a secret (said once: NCCL is not covered) */
	/* GPU buffers picked for, and after a failed attempt the count at which to try
	 * again (the wait doubling up to 1024 buffers) and why it failed */
	uint64_t picks, retry_at, backoff;
	char last_why[256];
	double alpha_s, beta_s; /* NCCL's, agreed */
};

/* Replaces the communicator (destroying the old one) where peer_gone may look. */
static void set_nccl(scd_gpunet_t *g, scd_transport_t *t)
{
	pthread_mutex_lock(&g->mu);
	scd_transport_t *old = g->nccl;
	g->nccl = t;
	pthread_mutex_unlock(&g->mu);
	scd_transport_destroy(old);
}

void scd_gpunet_peer_gone(scd_gpunet_t *g, int rank)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	if (g->nccl && g->nccl->ops->peer_gone)
		g->nccl->ops->peer_gone(g->nccl, rank);
	pthread_mutex_unlock(&g->mu);
}

sc_status_t scd_gpunet_create(const char *want, int authenticated, scd_gpunet_t **g_p)
{
	scd_gpunet_t *g = calloc(1, sizeof *g);
	if (!g)
		return SC_ERR_NOMEM;
	g->want = !want || !strcmp(want, "auto") ? WANT_AUTO
		  : !strcmp(want, "nccl")	 ? WANT_NCCL
						 : WANT_TCP;
	g->settled_tcp = g->want == WANT_TCP;
	g->local_ok = -1;
	g->authenticated = authenticated;
	g->backoff = GPUNET_BACKOFF;
	pthread_mutex_init(&g->mu, NULL);
	*g_p = g;
	return SC_OK;
}

void scd_gpunet_destroy(scd_gpunet_t *g)
{
	if (!g)
		return;
	set_nccl(g, NULL);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

int scd_gpunet_usable(char *why, size_t cap)
{
	const scd_transport_ops_t *ops;
	const scd_device_ops_t *dev;
	scd_transport_endpoint_t *ep = NULL;
	/* a prepare for a rank other than 0 makes no id: it only loads NCCL */
	scd_transport_cfg_t cfg = {.rank = 1};
	if (scd_transport_get(SCD_TRANSPORT_NCCL, &ops) != SC_OK ||
	    ops->prepare(&cfg, &ep) != SC_OK) {
		snprintf(why, cap, "%s", scd_transport_error());
		return 0;
	}
	scd_transport_release(ep);
	if (scd_device_get(SCD_DEVICE_CUDA, &dev) != SC_OK) {
		snprintf(why, cap, "the cuda device is not available");
		return 0;
	}
	return 1;
}

void scd_gpunet_failed(scd_gpunet_t *g)
{
	g->failed = 1;
}

void scd_gpunet_drop_comm(scd_gpunet_t *g)
{
	set_nccl(g, NULL);
}

void scd_gpunet_reset(scd_gpunet_t *g)
{
	set_nccl(g, NULL);
	g->failed = 0;
	g->settled_tcp = g->want == WANT_TCP;
	g->retry_at = g->picks;
	g->backoff = GPUNET_BACKOFF;
}

/* Rank 0's id to every rank, then every rank's end of the communicator, then whether
 * every rank made its end (the count of those that did not into *failed_p). */
static sc_status_t make_comm(scd_gpunet_t *g, scd_transport_t *mesh, int timeout_ms,
			     int *failed_p, char *err, size_t cap)
{
	const scd_transport_ops_t *ops;
	int me = mesh->rank, P = mesh->size;
	/* rank 0's message: [ok][length, 2 bytes LE][blob], of a fixed size */
	unsigned char msg[3 + SCD_TRANSPORT_BLOB_MAX];
	size_t len = 0;
	*failed_p = 0;
	memset(msg, 0, sizeof msg);
	scd_transport_endpoint_t *ep = NULL;
	scd_transport_cfg_t cfg = {.rank = me};
	sc_status_t st = scd_transport_get(SCD_TRANSPORT_NCCL, &ops);
	if (st == SC_OK)
		st = ops->prepare(&cfg, &ep);
	if (st != SC_OK)
		snprintf(err, cap, "rank %d: %s", me, scd_transport_error());
	if (me == 0 && st == SC_OK) {
		msg[0] = 1;
		msg[1] = (unsigned char)(ep->blob_len & 0xff);
		msg[2] = (unsigned char)(ep->blob_len >> 8);
		memcpy(msg + 3, ep->blob, ep->blob_len);
	}
	scd_xfer_t *x = calloc((size_t)P, sizeof *x);
	sc_status_t xst = x ? SC_OK : SC_ERR_NOMEM;
	int n = 0;
	if (x && me == 0) {
		for (int p = 1; p < P; p++)
			x[n++] = (scd_xfer_t){p, msg, sizeof msg};
		xst = scd_transport_exchange(mesh, x, n, NULL, 0, timeout_ms);
	} else if (x) {
		x[0] = (scd_xfer_t){0, msg, sizeof msg};
		xst = scd_transport_exchange(mesh, NULL, 0, x, 1, timeout_ms);
	}
	free(x);
	if (xst != SC_OK) {
		snprintf(err, cap, "NCCL bootstrap over the mesh: %s",
			 xst == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
		scd_transport_release(ep);
		return xst;
	}
	len = (size_t)msg[1] | (size_t)msg[2] << 8;
	if (len > SCD_TRANSPORT_BLOB_MAX)
		len = SCD_TRANSPORT_BLOB_MAX + 1; /* refused by set_blob below */
	scd_transport_t *t = NULL;
	if (st == SC_OK && !msg[0]) {
		st = SC_ERR_PEER;
		snprintf(err, cap, "rank 0 could not make an NCCL id");
	}
	if (st == SC_OK) {
		scd_transport_boot_t b;
		st = scd_transport_boot_init(&b, ep, me, P, 0);
		if (st == SC_OK) {
			ep = NULL;
			st = scd_transport_boot_set_blob(&b, 0, msg + 3, len);
			if (st == SC_OK)
				st = scd_transport_create(&b, 0, timeout_ms, &t);
			scd_transport_boot_clear(&b);
		}
		if (st != SC_OK)
			snprintf(err, cap, "%s", scd_transport_error());
	}
	scd_transport_release(ep);
	/* which ranks made their end: one slot each */
	int32_t *bad = calloc((size_t)P, sizeof(*bad));
	sc_status_t ast = bad ? SC_OK : SC_ERR_NOMEM;
	if (bad) {
		bad[me] = st != SC_OK;
		ast = scd_transport_allreduce(mesh, bad, (size_t)P, SC_INT32, SC_OP_SUM,
					      timeout_ms);
	}
	if (ast != SC_OK) {
		scd_transport_destroy(t);
		free(bad);
		snprintf(err, cap, "NCCL bootstrap over the mesh: %s",
			 ast == SC_ERR_NOMEM ? "out of memory" : scd_transport_error());
		return ast;
	}
	int first = -1, n_bad = 0;
	for (int r = 0; r < P; r++)
		if (bad[r]) {
			n_bad++;
			first = first < 0 ? r : first;
		}
	free(bad);
	*failed_p = n_bad;
	if (n_bad) {
		scd_transport_destroy(t);
		if (st == SC_OK)
			snprintf(err, cap, "rank %d (and %d more) could not make its end",
				 first, n_bad - 1);
		return SC_OK;
	}
	t->serial = ++g->serial; /* a new one even where the allocator reuses the address */
	set_nccl(g, t);
	/* NCCL's costs, averaged over the ranks as the mesh's are */
	double a = 0, b = 0;
	char why[256] = "";
	sc_status_t mst = t->ops->measure(t, 2u << 20, &a, &b, timeout_ms);
	if (mst != SC_OK)
		snprintf(why, sizeof why, "%s", scd_transport_error());
	/* every rank takes the mesh's round, a rank whose probe failed too: its third value
	 * fails the probe on every rank alike */
	float v[3] = {(float)a, (float)b, mst != SC_OK};
	if ((st = scd_transport_allreduce_f32(mesh, v, 3, timeout_ms)) != SC_OK) {
		snprintf(err, cap, "NCCL probe over the mesh: %s", scd_transport_error());
		g->failed = 1;
		return st;
	}
	if (v[2] > 0) {
		snprintf(err, cap, "NCCL probe failed on %.0f rank(s)%s%s", (double)v[2],
			 *why ? "; here: " : "", why);
		g->failed = 1;
		return SC_ERR_PEER;
	}
	g->alpha_s = (double)v[0] / P;
	g->beta_s = (double)v[1] / P;
	scd_info(SCD_SUB_ENGINE, "GPU buffers over nccl: alpha %.1f us, %.1f MB/s",
		 g->alpha_s * 1e6, g->beta_s > 0 ? 1e-6 / g->beta_s : 0.0);
	if (g->authenticated && g->serial == 1)
		scd_warn(SCD_SUB_ENGINE,
			 "GPU buffers over nccl: NCCL's connections are not covered by the job "
			 "secret nor by data_protection (transport = tcp keeps them on the "
			 "authenticated mesh)");
	return SC_OK;
}

sc_status_t scd_gpunet_pick(scd_gpunet_t *g, scd_transport_t *mesh, int timeout_ms,
			    scd_transport_t **t_p, double *alpha_s_p, double *beta_s_per_byte_p,
			    char *err, size_t err_cap)
{
	*t_p = mesh;
	if (g->settled_tcp)
		return SC_OK;
	g->picks++;
	/* after a failed attempt under nccl, the next ones wait (each makes rank 0 a new
	 * NCCL id and its listener): the same on every rank, as the failure was agreed */
	if (!g->nccl && g->picks < g->retry_at) {
		snprintf(
		    err, err_cap,
		    "transport nccl: no NCCL communicator (%s); the next attempt in %llu GPU "
		    "buffer(s)",
		    g->last_why, (unsigned long long)(g->retry_at - g->picks));
		return SC_ERR_PEER;
	}
	int P = mesh->size, me = mesh->rank;
	if (g->local_ok < 0) {
		char why[256];
		g->local_ok = scd_gpunet_usable(why, sizeof why);
		if (!g->local_ok)
			scd_debug(SCD_SUB_ENGINE, "rank %d cannot run NCCL: %s", me, why);
	}
	int32_t *v = calloc((size_t)P + 1, sizeof *v);
	if (!v) {
		snprintf(err, err_cap, "rank %d: out of memory", me);
		return SC_ERR_NOMEM;
	}
	v[0] = !g->nccl || g->failed;
	v[1 + me] = g->local_ok;
	sc_status_t st =
	    scd_transport_allreduce(mesh, v, (size_t)P + 1, SC_INT32, SC_OP_SUM, timeout_ms);
	if (st != SC_OK) {
		snprintf(err, err_cap, "choosing the GPU transport: %s", scd_transport_error());
		free(v);
		return st;
	}
	if (!v[0]) {
		free(v);
		*t_p = g->nccl;
		*alpha_s_p = g->alpha_s;
		*beta_s_per_byte_p = g->beta_s;
		return SC_OK;
	}
	set_nccl(g, NULL); /* every rank drops its end and makes a new one */
	g->failed = 0;
	int without = -1;
	for (int r = 0; r < P && without < 0; r++)
		if (!v[1 + r])
			without = r;
	free(v);
	if (without >= 0) {
		if (g->want == WANT_NCCL) {
			snprintf(err, err_cap, "transport nccl: rank %d cannot run NCCL",
				 without);
			return SC_ERR_UNSUPPORTED;
		}
		scd_info(SCD_SUB_ENGINE, "GPU buffers over tcp: rank %d cannot run NCCL",
			 without);
		g->settled_tcp = 1;
		return SC_OK;
	}
	int failed = 0;
	char why[256] = "";
	st = make_comm(g, mesh, timeout_ms, &failed, why, sizeof why);
	if (st != SC_OK || failed) {
		if (g->want == WANT_NCCL || st != SC_OK) {
			snprintf(err, err_cap, "transport nccl: %s", why);
			snprintf(g->last_why, sizeof g->last_why, "%s", why);
			g->retry_at = g->picks + g->backoff;
			g->backoff = g->backoff < 1024 ? 2 * g->backoff : 1024;
			return st != SC_OK ? st : SC_ERR_PEER;
		}
		scd_warn(SCD_SUB_ENGINE, "GPU buffers over tcp: no NCCL communicator (%s)",
			 why);
		g->settled_tcp = 1;
		return SC_OK;
	}
	g->backoff = GPUNET_BACKOFF;
	*t_p = g->nccl;
	*alpha_s_p = g->alpha_s;
	*beta_s_per_byte_p = g->beta_s;
	return SC_OK;
}
