/*
 * gpunet.h: the transport a GPU buffer takes, by the `transport` key (docs/design.md,
 * transports): tcp (the mesh, staged through host memory), nccl (required), or auto (nccl
 * where every node of the world can run it, else tcp). The choice is made with every
 * rank over the mesh, at the communication stage of each GPU buffer, so that every rank
 * takes the same transport for the same job:
 *
 *   - every rank contributes whether its NCCL communicator is missing or failed since the
 *     last job, and whether it can run NCCL at all (an int32 sum over the mesh: one small
 *     round per GPU buffer while nccl is in use, none once the world settled on tcp);
 *   - when one is missing or failed, every rank drops its own, and the ranks make a new
 *     one: rank 0's ncclUniqueId travels over the mesh, each rank creates its end with a
 *     deadline, and they agree on the outcome; then NCCL's alpha and beta are probed and
 *     averaged as the mesh's are (engine.c);
 *   - under auto, a world with a node that cannot run NCCL, or whose communicator cannot
 *     be made, settles on tcp for good (logged once, naming the rank); under nccl the job
 *     fails instead, naming the rank, and the next GPU buffer tries again.
 *
 * A job that fails on nccl marks the communicator failed (scd_gpunet_failed): NCCL's
 * state after an error is not trusted, and the next GPU buffer makes a new one.
 */
#ifndef SCD_ENGINE_GPUNET_H
#define SCD_ENGINE_GPUNET_H

#include <stddef.h>

#include "transport/transport.h"

typedef struct scd_gpunet scd_gpunet_t;

/* want: the `transport` key's value (auto, tcp, nccl); authenticated: the job has a
 * secret (NCCL's own connections are not covered by it, which is said once). */
sc_status_t scd_gpunet_create(const char *want, int authenticated, scd_gpunet_t **g_p);
void scd_gpunet_destroy(scd_gpunet_t *g);

/* Whether this node can run NCCL between GPU buffers (the backend is built, NCCL loads,
 * the cuda device works); when not, why says why. */
int scd_gpunet_usable(char *why, size_t cap);

/* The transport of a GPU buffer's job (mesh or the nccl communicator), and the network
 * costs the cost model takes for it. Every rank calls it for the same job (it rounds over
 * the mesh). On failure, err says why, naming the rank. */
sc_status_t scd_gpunet_pick(scd_gpunet_t *g, scd_transport_t *mesh, int timeout_ms,
			    scd_transport_t **t_p, double *alpha_s_p, double *beta_s_per_byte_p,
			    char *err, size_t err_cap);

/* A job on the nccl communicator failed: the next GPU buffer makes a new one. */
void scd_gpunet_failed(scd_gpunet_t *g);
/* This node lets its communicator go and keeps everything else it decided with the other
 * ranks: at the next GPU buffer it says it has none, and every rank makes a new one. */
void scd_gpunet_drop_comm(scd_gpunet_t *g);
/* The world gave up rank (lost or left): a wait of the communicator on it ends now (from
 * any thread). */
void scd_gpunet_peer_gone(scd_gpunet_t *g, int rank);
/* The mesh was made anew: everything is decided again. */
void scd_gpunet_reset(scd_gpunet_t *g);

#endif
