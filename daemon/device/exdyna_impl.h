/*
 * exdyna_impl.h: the ExDyna object's layout and the plan of a selection, shared by the
 * devices (exdyna.h). The object is host memory on every device: exdyna.c keeps its
 * control state (partitions, threshold, the words of the update) and its update; a device
 * that selects elsewhere (the cuda device, daemon/device/cuda.c) takes the iteration's
 * plan from scd_exdyna_plan, writes the words (meta) the selection measures, records the
 * calibrating threshold with scd_exdyna_propose_key, and keeps its workspace in dev.
 */
#ifndef SCD_DEVICE_EXDYNA_IMPL_H
#define SCD_DEVICE_EXDYNA_IMPL_H

#include "device/exdyna.h"

struct scd_exdyna {
	scd_exdyna_cfg_t cfg;
	uint64_t k;
	uint64_t blk_size;
	uint32_t nblocks;
	int64_t min_blk;
	int64_t *blk_part; /* blocks per partition */
	int64_t *blk_pos;  /* first block of each partition */
	int64_t *kpart;	   /* scratch: counts by partition */
	double threshold;
	double up, up_fine, down, down_fine;
	uint64_t iter;
	int calibrating;   /* the threshold's start is still to be taken from the data */
	double proposal;   /* this rank's threshold at that selection */
	uint64_t *meta;	   /* [1 + 2 HALF + 1], meta_words used: what the update needs
			      from this rank: how many passed the threshold, then the
			      proposal or the grid counts */
	uint64_t *totals;  /* [2 HALF + 1]: the ranks' grid counts summed */
	uint32_t grid_key; /* the grid's centre: the shared threshold's key */
	uint64_t jumps;	   /* iterations whose threshold came from the grid */
	void *dev;	   /* the device's selection workspace (NULL on the cpu) */
};

/* What this iteration's selection does. */
enum {
	SCD_EXDYNA_FIXED = 0, /* select at the threshold */
	SCD_EXDYNA_CALIBRATE, /* the threshold is the share-th largest magnitude first */
	SCD_EXDYNA_GRID	      /* count at the grid's thresholds first */
};
typedef struct scd_exdyna_plan {
	uint64_t numel;
	uint64_t lo, hi;   /* this rank's partition */
	uint64_t share;	   /* CALIBRATE: the rank of the threshold's magnitude (>= 1) */
	uint64_t cap;	   /* at most cap selected, the largest (UINT64_MAX: no cap) */
	int64_t grid_base; /* GRID: the lowest grid threshold's key (grid_key - HALF STEP) */
	uint32_t tkey;	   /* FIXED and GRID: the threshold's key */
	uint32_t mode;	   /* SCD_EXDYNA_* */
} scd_exdyna_plan_t;

void scd_exdyna_plan(const scd_exdyna_t *ex, scd_exdyna_plan_t *plan_p);
/* Records the calibrating selection's threshold from the share-th largest key (0: fewer
 * magnitudes than the share): the proposal and its word. */
void scd_exdyna_propose_key(scd_exdyna_t *ex, uint32_t key);

#endif
