/*
 * params.c: what the configuration gives the engine (engine.h, scd_engine_params_t).
 */
#include <math.h>

#include "engine/engine.h"

/* See engine.h. The schemes' settings come from the configuration's scheme keys (read
 * once: they are not runtime-changeable, and every node must have the same). */
void scd_engine_params_from_config(const scd_config_t *cfg, scd_engine_params_t *p)
{
	p->pipeline = scd_cfg_int(cfg, SCD_CFG_engine_pipeline) != 0;
	p->fusion_bytes = (uint64_t)scd_cfg_int(cfg, SCD_CFG_fusion_threshold_bytes);
	p->join_timeout_ms = (int)scd_cfg_int(cfg, SCD_CFG_join_timeout_ms);
	p->transport = scd_cfg_str(cfg, SCD_CFG_transport);
	scd_scheme_cfg_t b = scd_scheme_cfg_default(0, 0);
	b.spardl_teams = (uint32_t)scd_cfg_int(cfg, SCD_CFG_spardl_teams);
	b.exdyna_blocks = (uint32_t)scd_cfg_int(cfg, SCD_CFG_exdyna_blocks);
	b.exdyna_move_blocks = (uint32_t)scd_cfg_int(cfg, SCD_CFG_exdyna_move_blocks);
	b.exdyna_alpha_permille =
	    (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_alpha));
	b.exdyna_beta_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_beta));
	b.exdyna_cap_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_cap));
	b.exdyna_grid_permille = (uint32_t)lround(1000 * scd_cfg_num(cfg, SCD_CFG_exdyna_grid));
	b.exdyna_gamma = scd_cfg_num(cfg, SCD_CFG_exdyna_gamma);
	b.exdyna_fine_symmetric = (int)scd_cfg_int(cfg, SCD_CFG_exdyna_fine_symmetric);
	b.sketch_rows = (uint32_t)scd_cfg_int(cfg, SCD_CFG_sketch_rows);
	b.sketch_cols_factor = scd_cfg_num(cfg, SCD_CFG_sketch_cols);
	p->cpu_share = scd_cfg_num(cfg, SCD_CFG_cpu_share);
	p->schemes = b;
}
