/*
 * ctl.h: the daemon's local control socket (ZeroMQ ROUTER on ipc://<runtime_dir>/ctl.sock,
 * mode 0600 in a 0700 directory) and the sessions behind it: trainers (which register
 * tensors and submit them) and sparsectl (status, stats, pending, config).
 *
 * Every message is one protobuf-c ClientMsg / DaemonMsg. A malformed message gets an error
 * reply and is otherwise ignored. A trainer's death is seen through a pidfd on its pid
 * (polled by the loop; a periodic kill(pid, 0) where pidfd_open is not available): its
 * tensors are released, and whatever the other trainers were waiting on with it fails.
 */
#ifndef SCD_CTL_CTL_H
#define SCD_CTL_CTL_H

#include "ctl/tensor.h"
#include "daemon.h"
#include "sparsecomm.pb-c.h"

sc_status_t scd_ctl_create(scd_daemon_t *d, scd_ctl_t **ctl_p);
/* Binds the control socket and starts serving it. */
sc_status_t scd_ctl_listen(scd_ctl_t *ctl);
void scd_ctl_destroy(scd_ctl_t *ctl);
/* Reads every queued message (the loop calls it before it blocks). */
void scd_ctl_drain(scd_ctl_t *ctl);
/* Housekeeping: liveness of trainers without a pidfd, local stall timeouts. */
void scd_ctl_tick(scd_ctl_t *ctl);
scd_tensors_t *scd_ctl_tensors(scd_ctl_t *ctl);

/* Ends the operation in flight on every submitted slot of nt with status (and error text
 * for failures), and resets nt to idle. */
void scd_ctl_complete(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t status, const char *error);
/* Fails everything submitted and not running (shutdown). */
void scd_ctl_fail_all(scd_ctl_t *ctl, sc_status_t status, const char *error);
/* Removes every shared-memory object and the socket file without unmapping (for an exit
 * while the engine may still be using the buffers). */
void scd_ctl_unlink_all(scd_ctl_t *ctl);
/* Answers a pending query that world/ forwarded to the coordinator. */
void scd_ctl_reply_pending(scd_ctl_t *ctl, uint64_t query_id, const Sparsecomm__PendingReply *r);
/* Adds this node's tensors that wait for local trainers to a pending reply. */
struct scd_arena;
void scd_ctl_local_pending(scd_ctl_t *ctl, Sparsecomm__PendingReply *r, struct scd_arena *a);
/* Number of trainer sessions. */
int scd_ctl_trainers(const scd_ctl_t *ctl);

#endif
