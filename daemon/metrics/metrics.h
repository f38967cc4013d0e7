/*
 * metrics.h: the Prometheus endpoint of a daemon (the metrics_addr key): GET /metrics on
 * the loop thread answers the text exposition format (version 0.0.4) of what `sparsectl
 * stats` and `sparsectl status` report, taken from the same replies (ctl/ctl.h):
 *   - per tensor: calls, errors, bytes sent and received, data-plane seconds, non-finite
 *     inputs (counters, label tensor);
 *   - per scheme: buffers run, failed, bytes sent and received, seconds (counters, label
 *     scheme; the daemon's scheme_stats);
 *   - the node: cycles and buffers run, the fusion plan's version, trainers connected,
 *     GPU bytes held, uptime;
 *   - the world: rank, size, trainers per node, whether it has formed, and per peer
 *     whether its data-plane connection is up (label rank, addr).
 * `sparsectl stats --reset` zeroes the counters, which Prometheus reads as a restart.
 */
#ifndef SCD_METRICS_METRICS_H
#define SCD_METRICS_METRICS_H

#include <stdio.h>

#include "daemon.h"

/* Starts the endpoint when metrics_addr is set (d->metrics; NULL when off). A failure is
 * logged and returned. */
sc_status_t scd_metrics_start(scd_daemon_t *d);
void scd_metrics_stop(scd_daemon_t *d);
/* The exposition text (the endpoint's body), for the tests. */
int scd_metrics_render(scd_daemon_t *d, FILE *out);

#endif
