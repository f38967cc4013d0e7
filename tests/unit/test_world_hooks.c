/*
 * test_world_hooks.c: world/ reaches the process only through the hooks it is created with
 * (scd_world_hooks_t, world.h): the mesh job's success calls ready once, the first mesh's
 * failure stops the daemon with status 1 (a mesh built again that fails re-forms the
 * world), and a node whose coordinator left stops with SCD_EXIT_COORDINATOR_GONE twice
 * peer_timeout_ms later. The runner links world/ without main.c and without any stand-in
 * for it.
 */
#include <stdio.h>
#include <string.h>

#include "ctl/ctl.h"
#include "engine/engine.h"
#include "unit.h"
#include "util/clock.h"
#include "world/world_int.h"

static struct {
	int ready, stops, code;
	scd_daemon_t *ready_d, *stop_d;
} seen;

static void on_ready(scd_daemon_t *d)
{
	seen.ready++;
	seen.ready_d = d;
}

static void on_stop(scd_daemon_t *d, int exit_code)
{
	seen.stops++;
	seen.code = exit_code;
	seen.stop_d = d;
}

static const scd_world_hooks_t hooks = {.ready = on_ready, .stop = on_stop};

/* Rank 1 of 2 on its own loop, its world created with the hooks above. */
static void world_make(scd_daemon_t *d, uv_loop_t *loop)
{
	memset(&seen, 0, sizeof(seen));
	memset(d, 0, sizeof(*d));
	CHECK_EQ_INT(uv_loop_init(loop), 0);
	d->loop = loop;
	d->rank = 1, d->world_size = 2, d->local_size = 1, d->notify_fd = -1;
	scd_config_init(&d->cfg);
	CHECK_EQ_INT(scd_world_create(d, &hooks, &d->world), SC_OK);
}

static void world_free(scd_daemon_t *d, uv_loop_t *loop)
{
	scd_world_destroy(d->world);
	uv_run(loop, UV_RUN_NOWAIT); /* the world's handles closed */
	free(d->world->peers);
	free(d->world);
	scd_config_free(&d->cfg);
	uv_loop_close(loop);
}

/* The mesh job of world world_id (0: none formed) comes back with status. */
static void mesh_job_back_in(scd_daemon_t *d, sc_status_t status, uint64_t world_id)
{
	scd_job_t *job = calloc(1, sizeof(*job));
	CHECK_TRUE(job != NULL);
	job->kind = SCD_JOB_MESH;
	job->status = status;
	job->boot.world_id = world_id;
	if (status != SC_OK)
		snprintf(job->error, sizeof(job->error), "rank 0: did not connect");
	scd_world_job_done(d, job);
}

static void mesh_job_back(scd_daemon_t *d, sc_status_t status)
{
	mesh_job_back_in(d, status, 0);
}

UNIT_TEST(world_hooks_ready_once_and_stop_on_mesh_failure)
{
	scd_daemon_t d;
	uv_loop_t loop;
	world_make(&d, &loop);
	mesh_job_back(&d, SC_OK);
	CHECK_EQ_INT(seen.ready, 1);
	CHECK_TRUE(seen.ready_d == &d);
	CHECK_EQ_INT(seen.stops, 0);
	mesh_job_back(&d, SC_OK); /* the world re-formed: the daemon serves already */
	CHECK_EQ_INT(seen.ready, 1);
	CHECK_EQ_INT(seen.stops, 0);
	/* a mesh built again that fails re-forms the world (here it is not formed: one of
	 * a world re-formed since, which says nothing); the daemon goes on */
	mesh_job_back(&d, SC_ERR_SYSTEM);
	CHECK_EQ_INT(seen.stops, 0);
	world_free(&d, &loop);
	/* the first mesh failing stops the daemon */
	world_make(&d, &loop);
	mesh_job_back(&d, SC_ERR_SYSTEM);
	CHECK_EQ_INT(seen.ready, 0);
	CHECK_EQ_INT(seen.stops, 1);
	CHECK_EQ_INT(seen.code, 1);
	CHECK_TRUE(seen.stop_d == &d);
	world_free(&d, &loop);
}

/* A mesh that cannot be built again after a re-form (a peer's data port unreachable for
 * good) would re-form the world for ever: three failures in a row stop the daemon, as the
 * first mesh's failure does; a mesh built in between starts the count again. */
/* The world has re-formed (a new id) and its mesh, built again, comes back with status. */
static void mesh_again(scd_daemon_t *d, sc_status_t status)
{
	d->world->formed = 1;
	d->world->world_id++;
	mesh_job_back_in(d, status, d->world->world_id);
}

UNIT_TEST(world_hooks_mesh_built_again_in_vain_stops)
{
	scd_daemon_t d;
	uv_loop_t loop;
	world_make(&d, &loop);
	mesh_job_back(&d, SC_OK);
	CHECK_EQ_INT(seen.ready, 1);
	d.world->world_id = 100;
	mesh_again(&d, SC_ERR_SYSTEM); /* each re-forms the world */
	mesh_again(&d, SC_ERR_SYSTEM);
	CHECK_EQ_INT(seen.stops, 0);
	mesh_again(&d, SC_OK); /* built: the count starts again */
	mesh_again(&d, SC_ERR_SYSTEM);
	mesh_again(&d, SC_ERR_SYSTEM);
	CHECK_EQ_INT(seen.stops, 0);
	mesh_again(&d, SC_ERR_SYSTEM);
	CHECK_EQ_INT(seen.stops, 1);
	CHECK_EQ_INT(seen.code, 1);
	world_free(&d, &loop);
}

/* A node re-forming takes no copy of the world it leaves (the coordinator sends WorldInfo
 * again until a node shows it holds it; such a copy sent before the Reform can come after
 * it on the other channel): forming it would build a mesh on the old endpoints and refuse
 * the new world's WorldInfo. */
UNIT_TEST(world_hooks_world_info_of_the_world_left_ignored)
{
	scd_daemon_t d;
	uv_loop_t loop;
	world_make(&d, &loop);
	mesh_job_back(&d, SC_OK);
	d.world->world_id = 77; /* formed, then re-forming */
	d.world->formed = 0;
	Sparsecomm__PeerInfo pi[2] = {SPARSECOMM__PEER_INFO__INIT, SPARSECOMM__PEER_INFO__INIT};
	Sparsecomm__PeerInfo *pp[2] = {&pi[0], &pi[1]};
	pi[1].rank = 1;
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	wi.world_id = 77;
	wi.transport = "tcp";
	wi.peers = pp;
	wi.n_peers = 2;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD;
	m.world = &wi;
	scd_world_handle(d.world, 0, NULL, 0, &m);
	CHECK_EQ_INT(d.world->formed, 0);
	CHECK_TRUE(d.world->world_id == 77);
	world_free(&d, &loop);
}

static void up_announce(scd_world_t *w, scd_ntensor_t *nt) {}
static const scd_ctl_upcalls_t no_upcalls = {.announce = up_announce};

UNIT_TEST(world_hooks_coordinator_gone_stops_with_its_status)
{
	scd_daemon_t d;
	uv_loop_t loop;
	char err[256];
	world_make(&d, &loop);
	CHECK_EQ_INT(scd_config_set(&d.cfg, SCD_CFG_peer_timeout_ms, "200", SCD_SRC_FLAG, err,
				    sizeof(err)),
		     SC_OK);
	CHECK_EQ_INT(scd_ctl_create(&d, &no_upcalls, &d.ctl), SC_OK);
	d.world->formed = 1;
	Sparsecomm__Leave leave = SPARSECOMM__LEAVE__INIT;
	leave.reason = "its daemon stopped";
	uint64_t t0 = scd_now_ms();
	scd_live_on_leave(d.world, 0, &leave);
	CHECK_EQ_INT(seen.stops, 0); /* not at once: its trainers and status tell why first */
	while (!seen.stops && scd_now_ms() - t0 < 10000)
		uv_run(&loop, UV_RUN_ONCE);
	uint64_t took = scd_now_ms() - t0;
	CHECK_EQ_INT(seen.stops, 1);
	CHECK_EQ_INT(seen.code, SCD_EXIT_COORDINATOR_GONE);
	CHECK_TRUE(seen.stop_d == &d);
	CHECK_MSG(took >= 390, "stopped after %llu ms, before twice peer_timeout_ms (400)",
		  (unsigned long long)took);
	CHECK_EQ_INT(seen.ready, 0);
	scd_ctl_destroy(d.ctl);
	uv_run(&loop, UV_RUN_NOWAIT);
	free(d.ctl);
	world_free(&d, &loop);
}
