/*
 * daemon.h: the state of one sparsecommd, owned by the libuv loop thread. Each subsystem
 * keeps its own state behind its own header (ctl/ for trainer sessions and tensors,
 * world/ for the peers and the negotiation, engine/ for the data plane thread); this
 * struct only ties them together. It declares no function: what a subsystem asks of the
 * process (main.c) goes through the hooks main.c gives it (scd_ctl_upcalls_t,
 * scd_world_hooks_t).
 */
#ifndef SCD_DAEMON_H
#define SCD_DAEMON_H

#include <limits.h>
#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "scheme/registry.h"
#include "util/clock.h"
#include "util/secret.h"

#define SCD_MAX_LOCAL 64

typedef struct scd_ctl scd_ctl_t;
typedef struct scd_world scd_world_t;
typedef struct scd_engine scd_engine_t;

/* What the buffers a scheme ran moved and took on this node (the metrics endpoint). */
typedef struct scd_scheme_counters {
	uint64_t buffers, errors, bytes_sent, bytes_recv;
	double time_s;
} scd_scheme_counters_t;

typedef struct scd_metrics scd_metrics_t;

typedef struct scd_daemon {
	uv_loop_t *loop;
	scd_config_t cfg;
	void *zctx; /* ZeroMQ context */
	int rank, world_size, local_size;
	scd_secret_t secret; /* the job secret (secret_file); present 0 without one */
	char runtime_dir[PATH_MAX];
	long ctl_gid; /* the ctl_group key's group id, -1: none (the user alone) */
	char ctl_path[PATH_MAX + 32];
	char ctl_endpoint[PATH_MAX + 48];
	scd_ctl_t *ctl;
	scd_world_t *world;
	scd_engine_t *engine;
	uint64_t start_ms;
	int notify_fd;
	int shutting_down;
	int exit_code;
	uint64_t stats_cycles;	/* plans applied */
	uint64_t stats_buffers; /* buffers (fused or single) run */
	scd_scheme_counters_t scheme_stats[SCD_SCHEME_COUNT]; /* by scheme, reset with them */
	scd_metrics_t *metrics; /* the metrics endpoint (metrics_addr), NULL: off */
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_prepare_t drain; /* drains ZeroMQ sockets before the loop blocks */
	uv_timer_t tick;    /* 250 ms housekeeping: stalls, liveness */
} scd_daemon_t;

/* The exit status of a node whose coordinator was lost or left: the world it served is
 * gone, and a service manager that restarts it (Restart=on-failure) has it join the next. */
#define SCD_EXIT_COORDINATOR_GONE 3

#endif
