/*
 * host.h: which daemons of a world share a machine, and so its cores. Daemons in network
 * namespaces of one machine (an emulated cluster: sparsecomm-run --netns) each look like
 * a node of their own, yet their work outside the exchanges runs on the same cores, as
 * many times slower as there are daemons per core. Each daemon says at join where it runs
 * (a hash of the kernel's boot id and the machine id, which every network namespace of one
 * machine shares) and how many cores it may use (its affinity); the coordinator passes
 * every rank's pair on in the world's announcement, and every rank derives the same nodes
 * per core from the same list (the cost model's cpu_share, model/cost.h), so the schemes'
 * choice, which depends on it, stays the same on every rank.
 */
#ifndef SCD_WORLD_HOST_H
#define SCD_WORLD_HOST_H

#include <stddef.h>
#include <stdint.h>

typedef struct scd_host {
	uint64_t id;	/* 0: not known (then the daemon counts as a host of its own) */
	uint32_t cores; /* 0: not known (then one core a daemon) */
} scd_host_t;

/* This process's host and cores (an identity of 0 where neither file can be read). */
scd_host_t scd_host_self(void);

/* Nodes per core of the busiest host among the n daemons' hosts: for each host, its
 * daemons over the most cores any of them may use, at least 1. Daemon i's host is at
 * i x stride bytes from hosts (sizeof(scd_host_t) for an array; a member of a larger
 * struct is read in place, without a copy that could fail). */
double scd_host_cpu_share(const scd_host_t *hosts, size_t stride, int n);

#endif
