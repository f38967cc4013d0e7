/*
 * pin.h: --pin-nodes, each emulated node of this machine held to its own share of the
 * launcher's CPUs, as separate hosts would be. With N nodes over C allowed CPUs (in the
 * launcher's affinity mask, ascending): node i gets CPUs [i C / N, (i + 1) C / N) when
 * N <= C, else the one CPU i mod C (so nodes share a CPU evenly, and the threads of one node
 * wake each other on the CPU they share instead of across CPUs). The daemon and the
 * trainers of a node, and what they start, inherit the mask.
 */
#ifndef SC_RUN_PIN_H
#define SC_RUN_PIN_H

#include <sched.h>
#include <stddef.h>

typedef struct run_pin {
	int nodes;
	cpu_set_t *sets; /* one per node */
	char *list; /* "0 1 0 1": each node's CPUs (a cpulist: 0, 2-3, 0,2), in node order */
} run_pin_t;

/* The shares of nodes nodes over this process's CPUs: 0, or -1 (said on stderr). */
int run_pin_plan(run_pin_t *p, int nodes);
/* In node's forked child, before exec: its mask (a failure is said, and the node runs
 * unpinned). */
void run_pin_apply(const run_pin_t *p, int node);
void run_pin_free(run_pin_t *p);

#endif
