/*
 * unit_engine.h: an engine per forked rank for the engine tests, made the way the daemon
 * makes it: over a mesh prepared by unit_mesh.h, whose mesh job (every rank's bootstrap
 * blob, as negotiation hands it over) is the engine's first job.
 */
#ifndef SC_TESTS_UNIT_ENGINE_H
#define SC_TESTS_UNIT_ENGINE_H

#include <uv.h>

#include "engine/engine.h"
#include "unit_mesh.h"

/* In rank's child: initialises loop and makes rank's engine of a world of m->P nodes of
 * local trainers each (pipelined, 1 MiB fusion buffers, tcp, the default schemes, timeout_ms
 * for the mesh), whose jobs come back to done(arg) on loop, and submits its mesh job
 * (unit_mesh_job), which comes back through done like any other: the caller clears its
 * boot and frees it. Fails the test when the engine cannot be made. */
scd_engine_t *unit_engine_start(unit_mesh_t *m, int rank, int local, int timeout_ms,
				uv_loop_t *loop, scd_engine_done_cb done, void *arg);
/* A float32 sum of x's n elements over two nodes of one trainer each, job number seq (the
 * same on both), of one cache id (1) and one source; freed by the caller (job and items). */
scd_job_t *unit_engine_sum_job(const char *name, float *x, uint64_t n, uint64_t seq,
			       int timeout_ms);
/* Stops e (within 10 s) and closes its loop. */
void unit_engine_stop(scd_engine_t *e, uv_loop_t *loop);

#endif
