/*
 * stages.h: where a small allreduce's round trip goes (`sparsecomm-bench allreduce
 * --stages PREFIX`), from the daemons' timelines (docs/design.md, "Timeline") and the
 * trainers' own clocks, all CLOCK_MONOTONIC of one host (the emulated cluster's nodes are
 * namespaces of one machine).
 *
 * Per operation (one call of the latency tensor, matched across the ranks by the
 * timeline's step), with "last" the latest rank's time:
 *   submit       trainer's call to its daemon holding the tensor ready (each rank's)
 *   negotiation  last ready to last plan applied (announcement, coordinator, plan), in
 *                three parts where the daemons write the loop's events: to coord (last
 *                ready to the coordinator reading that rank's announcement, ready_in),
 *                coord (to the plan sent to every rank, the end of plan_out), plan back
 *                (to the last plan applied)
 *                (0 for a fast turn, docs/design.md "Fast mode": no announcement of
 *                the step reached the coordinator before its wait ended; its readiness
 *                went in the exchange, and hand-off counts from the last ready)
 *   hand-off     last plan to the last engine's communication stage starting the job
 *   verdict      that start to the last rank entering the data exchange (the input check
 *                round, where it runs on its own)
 *   data         the data exchange, last entry to last exit
 *   completion   the engine done to the trainer holding the result (each rank's)
 * and the whole round trip of rank 0's trainer. The stages of the slowest rank overlap
 * the others' waiting, so they need not add up to the round trip: the rest is the ranks'
 * skew. The table's header counts the planned steps and the fast turns among the calls.
 */
#ifndef SC_BENCH_STAGES_H
#define SC_BENCH_STAGES_H

#include "sparsecomm.h"

/* Rank 0 turns every daemon's timeline on into PREFIX.d<rank>.json (PREFIX absolute). */
int stages_start(sc_client_t *c, const char *prefix);
/* Rank 0 turns the timelines off. */
int stages_stop(sc_client_t *c);
/* Every rank writes its trainer's times: call number (from 1), start and end (ns). */
int stages_write_client(const char *prefix, int rank, const int *call, const double *t0_s,
			const double *t1_s, int n);
/* Rank 0, once every rank wrote and the timelines stopped: prints the stages' median and
 * p99 over the calls every rank recorded in full. */
int stages_report(const char *prefix, int P);

#endif
