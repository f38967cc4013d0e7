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

scd_job_t *unit_engine_sum_job(const char *name, float *x, uint64_t n, uint64_t seq,
			       int timeout_ms)
{
	scd_job_t *job = calloc(1, sizeof(*job));
	scd_job_item_t *it = calloc(1, sizeof(*it));
	CHECK_TRUE(job && it);
	*it = (scd_job_item_t){
	    .name = name, .numel = n, .op = SC_OP_SUM, .n_src = 1, .cache_id = 1};
	it->src[0] = (scd_job_src_t){.device = SCD_DEVICE_CPU, .dense = x};
	*job = (scd_job_t){.kind = SCD_JOB_ALLREDUCE,
			   .seq = seq,
			   .n_items = 1,
			   .items = it,
			   .total_numel = n,
			   .dtype = SC_FLOAT32,
			   .coll = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM},
			   .average_divisor = 2,
			   .pin = -1,
			   .timeout_ms = timeout_ms,
			   .world_seed = 7,
			   .lossless_only = 1};
	return job;
}
