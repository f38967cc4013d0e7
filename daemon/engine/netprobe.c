/*
 * netprobe.c: the agreed latency and bandwidth (see netprobe.h).
 */
#include "engine/netprobe.h"

#include "util/log.h"

void scd_netprobe_init(scd_netprobe_t *np)
{
	pthread_mutex_init(&np->mu, NULL);
	np->alpha_s = np->beta_s_per_byte = 0;
}

void scd_netprobe_destroy(scd_netprobe_t *np)
{
	pthread_mutex_destroy(&np->mu);
}

static void netprobe_set(scd_netprobe_t *np, double alpha_s, double beta_s_per_byte)
{
	pthread_mutex_lock(&np->mu);
	np->alpha_s = alpha_s;
	np->beta_s_per_byte = beta_s_per_byte;
	pthread_mutex_unlock(&np->mu);
}

/* The mean over the ranks goes through an allreduce whose result is bit-identical
 * everywhere, so every rank holds the same values. */
sc_status_t scd_netprobe_run(scd_netprobe_t *np, scd_transport_t *t, int world_size,
			     int timeout_ms)
{
	if (world_size == 1) {
		netprobe_set(np, 20e-6, 1.0 / 10e9);
		return SC_OK;
	}
	double a = 0, b = 0;
	/* 2 MiB probes: a shaped link lets a burst through at line rate (tbf's bucket, a
	 * switch's buffer), and a probe much larger than the burst measures the rate the link
	 * sustains rather than the burst (256 KiB read 1 Gbit/s as 1.8 Gbit/s). */
	sc_status_t st = t->ops->measure(t, 2u << 20, &a, &b, timeout_ms);
	if (st != SC_OK)
		return st;
	float v[2] = {(float)a, (float)b};
	st = scd_transport_allreduce_f32(t, v, 2, timeout_ms);
	if (st != SC_OK)
		return st;
	double alpha_s = (double)v[0] / world_size, beta = (double)v[1] / world_size;
	netprobe_set(np, alpha_s, beta);
	scd_info(SCD_SUB_ENGINE, "network: alpha %.1f us, %.1f MB/s", alpha_s * 1e6,
		 beta > 0 ? 1e-6 / beta : 0.0);
	return SC_OK;
}

void scd_netprobe_get(scd_netprobe_t *np, double *alpha_s_p, double *beta_s_per_byte_p)
{
	pthread_mutex_lock(&np->mu);
	*alpha_s_p = np->alpha_s;
	*beta_s_per_byte_p = np->beta_s_per_byte;
	pthread_mutex_unlock(&np->mu);
}
