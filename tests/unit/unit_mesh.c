/* unit_mesh.c: see unit_mesh.h. */
#include "unit_mesh.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

sc_status_t unit_mesh_prepare(unit_mesh_t *m, const char *transport, int P, uint64_t world_id)
{
	memset(m, 0, sizeof(*m));
	if (P < 1 || P > UNIT_MESH_MAX_P)
		return SC_ERR_INVALID;
	const scd_transport_ops_t *ops;
	sc_status_t st = scd_transport_lookup(transport, &ops);
	scd_transport_cfg_t cfg = {.addr = "127.0.0.1", .port = 0};
	for (int r = 0; st == SC_OK && r < P; r++, m->P = r)
		st = scd_transport_prepare(ops, &cfg, &m->ep[r]);
	if (st != SC_OK) {
		unit_mesh_release(m);
		return st;
	}
	m->world_id = world_id;
	return SC_OK;
}

sc_status_t unit_mesh_boot(unit_mesh_t *m, int rank, scd_transport_boot_t *b)
{
	sc_status_t st = scd_transport_boot_init(b, m->ep[rank], rank, m->P, m->world_id);
	if (st != SC_OK)
		return st;
	m->ep[rank] = NULL; /* b's now */
	b->protect = m->protect;
	memcpy(b->auth_key, m->key, sizeof(b->auth_key));
	for (int r = 0; st == SC_OK && r < m->P; r++)
		if (r != rank)
			st = scd_transport_boot_set_blob(b, r, m->ep[r]->blob,
							 m->ep[r]->blob_len);
	unit_mesh_release(m);
	if (st != SC_OK)
		scd_transport_boot_clear(b);
	return st;
}

sc_status_t unit_mesh_create(unit_mesh_t *m, int rank, size_t scratch_bytes, int timeout_ms,
			     scd_transport_t **t_p)
{
	scd_transport_boot_t b;
	sc_status_t st = unit_mesh_boot(m, rank, &b);
	if (st != SC_OK)
		return st;
	st = scd_transport_create(&b, scratch_bytes, timeout_ms, t_p);
	scd_transport_boot_clear(&b);
	return st;
}

scd_job_t *unit_mesh_job(unit_mesh_t *m, int rank)
{
	scd_job_t *job = calloc(1, sizeof(*job));
	CHECK_TRUE(job != NULL);
	job->kind = SCD_JOB_MESH;
	CHECK_TRUE(unit_mesh_boot(m, rank, &job->boot) == SC_OK);
	return job;
}

void unit_mesh_release(unit_mesh_t *m)
{
	for (int r = 0; r < m->P; r++) {
		scd_transport_release(m->ep[r]);
		m->ep[r] = NULL;
	}
}

void unit_mesh_fork(unit_mesh_t *m, void (*fn)(unit_mesh_t *m, int rank, void *arg), void *arg)
{
	pid_t pids[UNIT_MESH_MAX_P];
	for (int r = 0; r < m->P; r++) {
		fflush(NULL);
		pids[r] = fork();
		CHECK_TRUE(pids[r] >= 0);
		if (pids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			fn(m, r, arg);
			_exit(0);
		}
	}
	unit_mesh_release(m);
	for (int r = 0; r < m->P; r++) {
		int status = 0;
		while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR)
			;
		CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "rank %d failed (wait status 0x%x)", r, status);
	}
}
