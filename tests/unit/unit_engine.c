/* unit_engine.c: see unit_engine.h. */
#include "unit_engine.h"

#include "unit.h"

scd_engine_t *unit_engine_start(unit_mesh_t *m, int rank, int local, int timeout_ms,
				uv_loop_t *loop, scd_engine_done_cb done, void *arg)
{
	CHECK_TRUE(uv_loop_init(loop) == 0);
	scd_engine_params_t p = {.loop = loop,
				 .rank = rank,
				 .world_size = m->P,
				 .local_size = local,
				 .pipeline = 1,
				 .fusion_bytes = 1u << 20,
				 .join_timeout_ms = timeout_ms,
				 .transport = "tcp",
				 .schemes = scd_scheme_cfg_default(0, 0),
				 .done = done,
				 .done_arg = arg};
	scd_engine_t *e = NULL;
	CHECK_TRUE(scd_engine_create(&p, &e) == SC_OK);
	scd_engine_submit(e, unit_mesh_job(m, rank));
	return e;
}

void unit_engine_stop(scd_engine_t *e, uv_loop_t *loop)
{
	CHECK_TRUE(scd_engine_destroy(e, 10000) == SC_OK);
	uv_run(loop, UV_RUN_DEFAULT); /* the engine's handle closes */
	uv_loop_close(loop);
}
