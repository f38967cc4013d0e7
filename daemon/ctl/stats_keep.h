/*
 * stats_keep.h: what the daemon measured for each tensor, and the statistics it keeps
 * once the node's trainers have released a tensor, so that `sparsectl stats` still shows
 * a finished job until `sparsectl stats --reset`. A tensor registered again under the same
 * name, dtype and element count takes its kept statistics back and goes on counting. At
 * most SCD_STATS_KEEP_MAX tensors are kept; past that the oldest is forgotten.
 */
#ifndef SCD_CTL_STATS_KEEP_H
#define SCD_CTL_STATS_KEEP_H

#include <stddef.h>
#include <stdint.h>

#define SCD_STATS_KEEP_MAX 4096

typedef struct scd_tensor_stats {
	uint64_t calls, errors, bytes_sent, bytes_recv;
	uint64_t nonfinite; /* NaN or infinite input values seen (nonfinite = warn or error) */
	double time_s;
	char scheme[32];
	char transport[8]; /* of the last call's buffer */
	double predicted_s, measured_s, density, densification, imbalance;
	double exchange_s;    /* of measured_s, inside the scheme's exchanges */
	double cpu_s;	      /* the data plane's CPU time, last call */
	uint32_t device_kind; /* where the tensor lives (sc_device_kind_t) */
	char wire[24];	      /* its wire format (sc_wire_name), or what the last call kept */
} scd_tensor_stats_t;

typedef struct scd_kept_stats {
	char *name;
	uint32_t dtype;
	uint64_t numel;
	scd_tensor_stats_t stats;
} scd_kept_stats_t;

/* Zero-initialised it is empty. */
typedef struct scd_stats_keep {
	scd_kept_stats_t *v; /* oldest first */
	size_t n, cap;
} scd_stats_keep_t;

/* Keeps a released tensor's statistics (nothing for one that never ran); a copy failing
 * for want of memory loses them, which costs only the statistics. */
void scd_stats_keep_put(scd_stats_keep_t *k, const char *name, uint32_t dtype, uint64_t numel,
			const scd_tensor_stats_t *s);
/* Takes back what is kept for name (forgetting it): 1 with *s filled when it was kept
 * with this dtype and count, else 0 (statistics of a different tensor are dropped). */
int scd_stats_keep_take(scd_stats_keep_t *k, const char *name, uint32_t dtype, uint64_t numel,
			scd_tensor_stats_t *s);
/* Forgets everything (stats --reset, and the daemon's exit). */
void scd_stats_keep_clear(scd_stats_keep_t *k);

#endif
