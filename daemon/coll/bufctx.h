/*
 * bufctx.h: what the allreduce (coll_allreduce.c) keeps per fused buffer from one step to
 * the next, in a table the engine owns (it drops it with the mesh): the scheme context
 * (workspaces, step counter, shared seed), the profile of recent steps (density,
 * densification, skew, fed only from scheme reports, which are identical on every rank),
 * and a sparsifier per tensor that asked for one. A buffer is identified by the cache ids
 * of its tensors, which the coordinator assigns, so every rank finds the same context.
 *
 * One step of a buffer (scd_bufctx_step), after the node's trainers have been summed into
 * it: sparsify ahead, per tensor (SAFusion: before the scheme, with error feedback into
 * the tensor's residual); choose the scheme (a pin, or the cost model with the measured
 * alpha/beta and the profile); run it; fold its report into the profile.
 */
#ifndef SCD_COLL_BUFCTX_H
#define SCD_COLL_BUFCTX_H

#include "coll/job.h"
#include "device/select.h"
#include "scheme/scheme.h"

typedef struct scd_bufctx_table scd_bufctx_table_t;

/* The sparsifier a tensor's sc_sparsifier_t s makes ahead of the schemes: 1 and *k_p for
 * top-k, threshold, DGC and block top-K; 0 for none, natural (sent as is) and ExDyna (the
 * scheme selects). */
int scd_sparsify_kind_of(uint32_t s, scd_sparsify_kind_t *k_p);

/* base: the schemes' settings for every buffer (NULL: scd_scheme_cfg_default's); each
 * buffer's context takes them with its own numel and seed. */
sc_status_t scd_bufctx_table_create(const scd_scheme_cfg_t *base, scd_bufctx_table_t **tab_p);
void scd_bufctx_table_destroy(scd_bufctx_table_t *tab);

/* Frees the state of every buffer that holds the tensor with this cache id. */
void scd_bufctx_forget(scd_bufctx_table_t *tab, uint32_t cache_id);

/* Runs of a scheme that its calibration ratio is taken over (see scd_calib_add). */
#define SCD_CALIB_WINDOW 7

/* Records the measured / predicted ratio of a scheme's counted run number counted (from 0)
 * in window[SCD_CALIB_WINDOW] (oldest overwritten); returns the scheme's ratio: the lower
 * median of the last min(counted + 1, SCD_CALIB_WINDOW) runs. */
double scd_calib_add(double *window, uint32_t counted, double sample);

/*
 * The calibrated choice among schemes (pure; the engine calls it with every rank's same
 * numbers): pred_s[s] the cost model's prediction in seconds (< 0: not allowed), ratio[s]
 * the measured / predicted time learnt for s once samples[s] >= 2, last the scheme of the
 * previous step (-1: none). Each allowed scheme counts as pred_s x its ratio; one not yet
 * measured as pred_s x 1.25, while explore is set (a buffer's first 16 steps) and fewer
 * than four schemes have been tried. The cheapest wins, unless the previous scheme is
 * within 10% of it. Returns -1 when none is allowed.
 */
int scd_bufctx_pick(const double *pred_s, const double *ratio, const uint32_t *samples,
		    int last, int explore);

/*
 * A step in two stages (the engine's pipeline, engine/engine.h): prepare, on the compute stage,
 * finds the buffer's state and sparsifies ahead (per tensor, into the tensors' residuals);
 * communicate, on the communication stage, chooses and runs the scheme and folds its
 * report into the profile; release ends the step's hold on the buffer's state (which is
 * never evicted while held). Same arguments as scd_bufctx_step, which is the three in a
 * row. The result is in buf, but where job->fused_out_ok lets communicate give a buffer
 * of several tensors, run on their selections' list, its result as COO: then
 * job->fused_out is set and the result is job->coo_out (buf is scratch), unless
 * job->coo_out.nnz is SCD_RESULT_DENSE (the union outgrew its room: the result is in buf).
 * The list stays valid until release.
 */
sc_status_t scd_bufctx_prepare(scd_bufctx_table_t *tab, scd_job_t *job,
			       const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
			       double alpha_s, double beta_s_per_byte, uint64_t seed,
			       scd_job_prep_t *prep);
sc_status_t scd_bufctx_communicate(scd_bufctx_table_t *tab, scd_job_t *job,
				   const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
				   double alpha_s, double beta_s_per_byte,
				   scd_job_prep_t *prep);
void scd_bufctx_release(scd_job_prep_t *prep);

/* Whether job's buffer is summed in one round (a small, dense, lossless, unpinned float32
 * sum of at most 16 KiB, in a world of several nodes): every rank sends it whole to every
 * other rank, after the input check round's words when prep->verdict carries them
 * (coll/job.h), and for a fast turn (coll/job.h, scd_fast_t) its fast words after those:
 * its decision may discard the turn (SC_IN_PROGRESS, nothing summed). Decided from what every
 * rank agreed on, as every path here is. */
int scd_bufctx_one_round(const scd_job_t *job, int world_size);

/* Runs one step of job's buffer buf (total_numel floats, in dev's memory, as are the
 * job's tensors and residuals) over transport t, every computation on the data through
 * dev's ops; the buffer's state (scheme context, sparsifiers, workspaces) belongs to dev,
 * and a buffer whose tensors move to another device starts over there. alpha/beta are the
 * agreed network costs; seed the world's shared seed. Fills job's report fields and, on
 * failure, job->error; the status is the failure's own (SC_ERR_INVALID for a sparsifier
 * the tensor's options cannot make, SC_ERR_NOMEM only when memory ran out). */
sc_status_t scd_bufctx_step(scd_bufctx_table_t *tab, scd_job_t *job,
			    const scd_device_ops_t *dev, float *buf, scd_transport_t *t,
			    double alpha_s, double beta_s_per_byte, uint64_t seed);

#endif
