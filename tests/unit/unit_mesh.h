/*
 * unit_mesh.h: meshes for tests that fork one process per rank, built the way the daemon
 * builds them: through the transport registry (prepare, then create from every rank's
 * bootstrap blob). The parent prepares every rank's endpoint before it forks, so every
 * child holds every blob; each child then builds its rank's mesh.
 */
#ifndef SC_TESTS_UNIT_MESH_H
#define SC_TESTS_UNIT_MESH_H

#include "coll/job.h"
#include "transport/transport.h"

#define UNIT_MESH_MAX_P 16

typedef struct unit_mesh {
	int P;
	uint64_t world_id;
	scd_transport_endpoint_t *ep[UNIT_MESH_MAX_P];
	/* the boot's data_protection and key (both 0 after prepare); a child may set them */
	int protect;
	uint8_t key[32];
} unit_mesh_t;

/* Prepares P endpoints of the named backend ("tcp") on 127.0.0.1, any free port. */
sc_status_t unit_mesh_prepare(unit_mesh_t *m, const char *transport, int P, uint64_t world_id);
/* In rank's child: rank's bootstrap (its endpoint and every other rank's blob, as
 * negotiation hands them to the engine), and releases the other ranks' endpoints; b is
 * the caller's to clear on success. */
sc_status_t unit_mesh_boot(unit_mesh_t *m, int rank, scd_transport_boot_t *b);
/* In rank's child: releases the other ranks' endpoints and builds rank's mesh. */
sc_status_t unit_mesh_create(unit_mesh_t *m, int rank, size_t scratch_bytes, int timeout_ms,
			     scd_transport_t **t_p);
/* In rank's child: a mesh job of rank's bootstrap (unit_mesh_boot) for an engine, calloc'd
 * (fails the test when it cannot be made); the caller clears its boot and frees it once
 * it is back. */
scd_job_t *unit_mesh_job(unit_mesh_t *m, int rank);
/* Releases the endpoints still held (the parent, once its children have forked). */
void unit_mesh_release(unit_mesh_t *m);
/* Forks one child per rank of m (prepared), which runs fn(m, rank, arg) and exits 0 (a
 * failed CHECK exits 1); releases the parent's endpoints and fails the test unless every
 * child exits 0, naming the first that did not. */
void unit_mesh_fork(unit_mesh_t *m, void (*fn)(unit_mesh_t *m, int rank, void *arg), void *arg);

#endif
