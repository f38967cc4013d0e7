/*
 * ctl.h: the daemon's local control socket (ZeroMQ ROUTER on ipc://<runtime_dir>/ctl.sock,
 * mode 0600 in a 0700 directory) and the sessions behind it: trainers (which register
 * tensors and submit them) and sparsectl (status, stats, pending, config).
 *
 * Every message is one protobuf-c ClientMsg / DaemonMsg. A trainer may send its requests
 * over a submit channel instead (ctl/submit.h), served by the same handlers. A malformed
 * message gets an error reply and is otherwise ignored. Who a client is comes from the kernel
 * (the socket's peer credentials, ctl/peer.h), never from its hello. A trainer's death is seen
 * through a pidfd on that pid (polled by the loop; a periodic kill(pid, 0) where pidfd_open is
 * not available), and through its connection's hang-up (a trainer whose process the daemon
 * cannot see, in a PID namespace of its own): its tensors are released, and whatever the
 * other trainers were waiting on with it fails. A client that does not read its replies
 * is dropped once it has too much unread (CTL_SEND_HWM, CTL_REPORT_BACKLOG_BYTES).
 *
 * Layering: world/ calls ctl (tensors, completions, a job's view of the shared buffers);
 * ctl never includes world/. What ctl has to tell the world (a tensor is ready, a trainer
 * died, a sparsectl request) goes through the scd_ctl_upcalls_t table main.c wires to the
 * world's functions. ctl fills jobs' items (coll/job.h) and checks a trainer's request
 * through its collective's descriptor (coll/coll.h); the engine includes neither.
 */
#ifndef SCD_CTL_CTL_H
#define SCD_CTL_CTL_H

#include "ctl/tensor.h"
#include "daemon.h"
#include "sparsecomm.pb-c.h"
#include "util/zmsg.h"

struct scd_arena;
struct scd_job_item;
struct scd_ntensor;

/* What ctl asks of the world (world.h documents each); called with d->world. */
typedef struct scd_ctl_upcalls {
	void (*announce)(scd_world_t *w, scd_ntensor_t *nt);
	void (*abandon)(scd_world_t *w, const char *name, sc_status_t status,
			const char *reason);
	void (*forget)(scd_world_t *w, const char *name, uint64_t presel_key);
	void (*node_state)(scd_world_t *w, int degraded, const char *reason);
	void (*pending)(scd_world_t *w, uint64_t query_id);
	void (*config_propose)(scd_world_t *w, const char *key, const char *value);
	void (*status)(scd_world_t *w, Sparsecomm__StatusReply *r, struct scd_arena *a);
	/* the fusion plan's part of a stats reply */
	void (*fusion_stats)(scd_world_t *w, Sparsecomm__StatsReply *r, struct scd_arena *a);
	/* every local trainer entered the node's barrier number seq */
	void (*barrier_enter)(scd_world_t *w, uint64_t seq);
	/* every local trainer joined, last_rank the last of them */
	void (*node_join)(scd_world_t *w, int last_rank);
	/* the node failed its step of name before announcing it (world.h) */
	void (*fail_step)(scd_world_t *w, const char *name, sc_status_t status,
			  const char *reason);
	/* a local trainer ended its session without joining */
	void (*node_left)(scd_world_t *w, const char *reason);
	/* the node's last trainer ended its session cleanly */
	void (*node_idle)(scd_world_t *w);
	/* hand back what the engine has finished (engine.h, scd_engine_collect): before a
	 * message is read, since the engine may have told a trainer of its success itself,
	 * and the trainer's next message must find that job ended (NULL: nothing to do) */
	void (*collect)(scd_world_t *w);
} scd_ctl_upcalls_t;

/* up must outlive ctl. */
sc_status_t scd_ctl_create(scd_daemon_t *d, const scd_ctl_upcalls_t *up, scd_ctl_t **ctl_p);
/* Binds the control socket and starts serving it. */
sc_status_t scd_ctl_listen(scd_ctl_t *ctl);
/* What `sparsectl status` and `sparsectl stats` report, into r (initialised), allocated
 * from a: for the control socket and the metrics endpoint alike. */
void scd_ctl_fill_status(scd_ctl_t *ctl, Sparsecomm__StatusReply *r, struct scd_arena *a);
void scd_ctl_fill_stats(scd_ctl_t *ctl, Sparsecomm__StatsReply *r, struct scd_arena *a);
void scd_ctl_destroy(scd_ctl_t *ctl);
/* Reads every queued message (the loop calls it before it blocks). */
void scd_ctl_drain(scd_ctl_t *ctl);
/* Decodes and serves one message (len bytes of a ClientMsg) from the client whose socket
 * identity is ident and whose credentials are cred (NULL: unknown), as scd_ctl_drain does
 * with each (the fuzz harness calls it alone). */
void scd_ctl_dispatch(scd_ctl_t *ctl, const uint8_t *ident, size_t ident_len,
		      const scd_peer_cred_t *cred, const uint8_t *buf, size_t len);
/* Housekeeping: liveness of trainers without a pidfd, local stall timeouts. */
void scd_ctl_tick(scd_ctl_t *ctl);
scd_tensors_t *scd_ctl_tensors(scd_ctl_t *ctl);

/* Ends the operation in flight on every submitted slot of nt with status (and error text
 * for failures), and resets nt to idle. */
void scd_ctl_complete(scd_ctl_t *ctl, scd_ntensor_t *nt, sc_status_t status, const char *error);
/* scd_ctl_complete for a job's item (its nt), whose sources the engine may have ended in
 * their headers already (coll/job.h, woke): their trainers are not told again. */
void scd_ctl_complete_item(scd_ctl_t *ctl, const struct scd_job_item *it, sc_status_t status,
			   const char *error);
/* Hands back what the engine has finished (scd_ctl_upcalls_t, collect), as before every
 * message read from a trainer or sparsectl, and before the metrics endpoint reports. */
void scd_ctl_collect(scd_ctl_t *ctl);
/* Fails everything submitted, running or not (a re-form, a lost coordinator, a shutdown:
 * the caller fenced the engine first), and counts it (scd_ctl_fail_gen). idle: the engine
 * was quiesced too (scd_engine_quiesce returned 0), so no job uses a trainer's memory any
 * more, and a registration its trainer released while its operation ran goes now, its
 * shared memory with it; else it stays for good (its local rank's name refused BUSY),
 * since a job may still write its memory. */
void scd_ctl_fail_all(scd_ctl_t *ctl, sc_status_t status, const char *error, int idle);
/* How many times scd_ctl_fail_all ran (0 without a ctl): a job built before the last of
 * them is not its tensors' any more when it comes back. */
uint64_t scd_ctl_fail_gen(const scd_ctl_t *ctl);
/* Barrier number seq ended on every rank (world/barrier.c): the local trainers waiting in
 * it complete with status (and error text for failures). */
void scd_ctl_barrier_done(scd_ctl_t *ctl, uint64_t seq, sc_status_t status, const char *error);
/* Every trainer of the job joined (world/join.c): the local joins complete with status and,
 * on success, last_rank. */
void scd_ctl_join_done(scd_ctl_t *ctl, int last_rank, sc_status_t status, const char *error);
/* Whether every local trainer has joined (a tensor planned but not submitted here then
 * takes part with zeros, as it should). */
int scd_ctl_all_joined(const scd_ctl_t *ctl);
/* Process set id as the node's trainers defined it (ctl/pset.h; NULL: unknown, or 0, the
 * global set, which is every node; NULL too with no ctl, a world run alone as the peer
 * message fuzzer runs it). */
struct scd_pset;
const struct scd_pset *scd_ctl_pset(const scd_ctl_t *ctl, uint32_t id);
/* How many process sets besides the global one the node's trainers defined. */
int scd_ctl_pset_count(const scd_ctl_t *ctl);
/* Removes every shared-memory object and the socket file without unmapping (for an exit
 * while the engine may still be using the buffers). */
void scd_ctl_unlink_all(scd_ctl_t *ctl);
/* Answers a pending query that world/ forwarded to the coordinator. */
void scd_ctl_reply_pending(scd_ctl_t *ctl, uint64_t query_id,
			   const Sparsecomm__PendingReply *r);
/* A runtime setting the coordinator had every node apply reached this node: st SC_OK
 * when it was applied here, else why says what refused it. Answers the config sets that
 * wait for it (report.c). */
void scd_ctl_config_applied(scd_ctl_t *ctl, const char *key, const char *value, sc_status_t st,
			    const char *why);
/* Adds this node's tensors that wait for local trainers to a pending reply. */
void scd_ctl_local_pending(scd_ctl_t *ctl, Sparsecomm__PendingReply *r, struct scd_arena *a);
/* Number of trainer sessions. */
int scd_ctl_trainers(const scd_ctl_t *ctl);

/*
 * A planned tensor joins a job: when name is announced on this node with this dtype and
 * element count, fills it (the tensor, its options, its residual, and every submitted
 * trainer's buffer and COO area in shared memory) and marks the tensor running; else
 * SC_ERR_NOT_FOUND and it is left as it was (the job then runs it with zeros).
 */
sc_status_t scd_ctl_job_item(scd_ctl_t *ctl, const char *name, uint32_t dtype, uint64_t numel,
			     struct scd_job_item *it);
/* A selection job at submission (coll/presel.h) for nt, announced now: fills its item as
 * scd_ctl_job_item does, without marking the tensor running, and arms the token that the
 * tensor's job item of this submission carries. The job holds the trainers' buffers
 * mapped until scd_ctl_presel_done. */
void scd_ctl_presel_item(scd_ctl_t *ctl, struct scd_ntensor *nt, struct scd_job_item *it);
void scd_ctl_presel_done(scd_ctl_t *ctl, struct scd_ntensor *nt);
/* The node's tensor of this name, or NULL. */
struct scd_ntensor *scd_ctl_tensor(scd_ctl_t *ctl, const char *name);
/* A plan's error for name: fails the operation of the trainers that submitted it; those
 * of this node that have not yet get the error when they do. */
void scd_ctl_fail_tensor(scd_ctl_t *ctl, const char *name, sc_status_t status,
			 const char *error);

#endif
