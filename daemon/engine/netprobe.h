/*
 * netprobe.h: the network's latency and bandwidth as every rank of the world agrees on them.
 * The communication stage measures them over the mesh (at the mesh's forming and every
 * netprobe_interval_jobs buffers) and makes every rank hold the same values, so that the
 * cost model chooses the same scheme on every rank; the compute stage and the loop thread
 * read them.
 */
#ifndef SCD_ENGINE_NETPROBE_H
#define SCD_ENGINE_NETPROBE_H

#include <pthread.h>

#include "transport/transport.h"

typedef struct scd_netprobe {
	pthread_mutex_t mu;
	double alpha_s, beta_s_per_byte; /* agreed by every rank */
} scd_netprobe_t;

void scd_netprobe_init(scd_netprobe_t *np);
void scd_netprobe_destroy(scd_netprobe_t *np);
/* Measures to every peer of t (world_size ranks) and agrees on the mean over the ranks;
 * a world of one takes a loopback's values. The transport's status on failure. */
sc_status_t scd_netprobe_run(scd_netprobe_t *np, scd_transport_t *t, int world_size,
			     int timeout_ms);
void scd_netprobe_get(scd_netprobe_t *np, double *alpha_s_p, double *beta_s_per_byte_p);

#endif
