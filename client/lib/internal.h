/*
 * internal.h: what the files of libsparseclient (and sparsectl, which links the static
 * library) share and nobody else sees: the client and tensor structures, the thread-local
 * error text, the log callback and the request path to the daemon.
 *
 * Nothing here is exported from the shared library (it is built with
 * -fvisibility=hidden and none of these carry SC_API); internal functions are named
 * scl_<module>_<verb>.
 */
#ifndef SC_CLIENT_INTERNAL_H
#define SC_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "sparsecomm.h"
#include "sparsecomm.pb-c.h"

#define SCL_NAME_MAX	   255
#define SCL_RELEASED	   64 /* released names remembered (sc_client.released) */
#define SCL_PSET_LEFT	   16 /* timed-out agreements' buffers awaiting release */
#define SCL_OP_BUCKETS	   256
#define SCL_ERR_MAX	   1024
#define SCL_ENDPOINT_MAX   512
#define SCL_DEFAULT_TMO_MS 30000
#define SCL_BYE_LINGER_MS  1000	      /* how long sc_finalize's goodbye may take to flush */
#define SCL_HELD_MAX	   64	      /* requests held by sc_submit_batch at most */
#define SCL_BATCH_BYTES	   (32 << 10) /* a SubmitBatch's requests' bytes at most */

/* Log levels of sc_log_cb. */
enum { SCL_LOG_ERROR = 0, SCL_LOG_WARN = 1, SCL_LOG_INFO = 2, SCL_LOG_DEBUG = 3 };

/* A registered tensor: its mapping of the daemon's shared-memory object. */
struct sc_tensor {
	struct sc_client *client;
	struct sc_tensor *next;
	char name[SCL_NAME_MAX + 1];
	int pset; /* its process set: a name is a name within its set */
	sc_dtype_t dtype;
	size_t numel;
	uint32_t tensor_id;
	int ready; /* registration finished (the name is reserved before) */
	void *map; /* the whole object */
	size_t map_bytes;
	void *data;
	uint32_t *coo_idx; /* NULL without COO input */
	void *coo_val;
	const float *residual;
	size_t coo_cap;
	struct scl_op *busy; /* the operation in flight, NULL when none */
	sc_device_kind_t device;
	int device_ordinal;
	struct scl_cuda *cuda; /* a cuda tensor's GPU mapping (cuda.c), NULL for cpu */
	void *stream; /* a cuda tensor's stream (sc_tensor_set_stream), guarded by mu */
	/* the counts an alltoall received from each rank (a2a_cap of them allocated; a2a_n
	 * valid once one has succeeded, 0 before), guarded by mu */
	uint64_t *a2a_recv;
	int a2a_cap, a2a_n;
	/* the group its next operation is a member of (sc_group_add; 0: none) and the
	 * group's size, guarded by mu */
	uint64_t group;
	uint32_t group_size;
	/* the shape its allreduces and broadcasts give (sc_tensor_set_shape; ndim 0: none),
	 * guarded by mu */
	int ndim;
	uint64_t dims[SC_MAX_DIMS];
};

/* One allreduce started by sc_allreduce_async, kept until its result is collected. */
struct scl_op {
	struct scl_op *next; /* hash chain */
	sc_handle_t handle;
	struct sc_tensor *tensor;
	int done;
	int orphan;	/* nobody will collect the result: free it on completion */
	int64_t value;	/* a join's completion: the last rank to join */
	int tensorless; /* a barrier or a join (a tensor's operation whose tensor was
			 * released has no tensor either: scl_op_detach) */
	int join;	/* a join, not a barrier (tensorless) */
	int fast;	/* ended by the daemon's word in the tensor's header (shm_wake.h) */
	sc_status_t status;
	char *error;	  /* text of a failure, NULL on success */
	const char *kind; /* "allreduce", "broadcast", ... (a static string; NULL: allreduce) */
};

/* A queued outgoing frame (a packed ClientMsg). */
struct scl_frame {
	struct scl_frame *next;
	size_t len;
	uint8_t data[];
};

/* A synchronous request waiting for the reply with its seq. */
struct scl_req {
	struct scl_req *next;
	uint64_t seq;
	int done;
	Sparsecomm__DaemonMsg *reply; /* NULL with done: the connection failed */
};

/* A process set as the client knows it (pset.c). */
struct scl_pset {
	int id, n;
	int32_t *ranks; /* ascending */
};

struct sc_client {
	char endpoint[SCL_ENDPOINT_MAX];
	int role;
	void *zctx;
	void *sock;    /* DEALER to the daemon's ROUTER: only the I/O thread touches it */
	void *monitor; /* PAIR receiving the DEALER's connection events */
	int wake_fd;   /* eventfd: work queued for the I/O thread */
	/* the submit channel (submit.c; -1: none): once bound, every request goes over it,
	 * sent by the calling thread in the order of the tickets it took under mu, none
	 * through the I/O thread */
	int submit_fd;
	pid_t owner_pid; /* the process that connected: a forked child's requests are refused */
	/* the calls in the library on this client (scl_enter) in the low bits, sc_finalize's
	 * marks (SCL_CALLS_*) in the top ones: atomic, no lock (finalize.c) */
	uint64_t calls;
	int bye_linger_ms; /* how long the goodbye may take to flush, for whoever destroys */
	pthread_t io_thread;
	int io_started;
	pthread_mutex_t
	    send_mu; /* guards send_turn, send_failed; taken after mu, never before */
	pthread_cond_t send_cv; /* broadcast as each turn ends */
	uint64_t send_turn;	/* the ticket whose send is next */
	int send_failed;	/* a send failed: those after it send nothing */
	/* batched sends (sc_submit_batch, submit.c), under send_mu: the collective requests
	 * whose turn came and that are held, in ticket order, since held_since_us; batch_us
	 * 0: each is sent in its turn. held_n is also read without the lock (atomically: a
	 * wait with nothing held takes no lock) */
	struct scl_frame *held, **held_tail;
	int held_n;
	int64_t held_since_us;
	int batch_us;
	int submit_batchable; /* the daemon takes a SubmitBatch (its hello's reply) */
	int flush_wanted;     /* atomic, no lock: a wait or poll that found send_mu taken asks
				 its holder to send what is held as it lets go (submit.c) */

	pthread_mutex_t mu; /* guards everything below */
	pthread_cond_t cv;  /* broadcast on every reply, completion and failure */
	int stopping;	    /* the I/O thread should send what is queued and exit */
	int connected;	    /* the handshake succeeded */
	sc_status_t dead;   /* SC_OK while usable, else why not */
	char dead_msg[SCL_ERR_MAX];
	uint64_t next_id; /* seqs and handles, one counter: an allreduce's seq is its handle */
	struct scl_frame *sendq, **sendq_tail;
	uint64_t send_next; /* the submit channel's next ticket (submit.c) */
	struct scl_req *reqs;
	struct scl_op *ops[SCL_OP_BUCKETS];
	struct sc_tensor *tensors;

	int rank, size, local_rank, local_size, node_rank, node_count;
	char built[128]; /* the daemon's built-in backends, space-separated (hello) */
	/* names this client released and has not registered again (the last SCL_RELEASED of
	 * them, a ring): their next registration replaces them */
	char released[SCL_RELEASED][SCL_NAME_MAX + 1];
	int released_next;
	/* grouped operations (sc_group_begin): the last group's number, the open one's (0:
	 * none), its size and the members added so far */
	uint64_t group_seq, group_open;
	int group_n, group_added;
	/* process sets (pset.c): the agreed ones, the last id given, the set calls made */
	struct scl_pset *psets;
	int n_psets, cap_psets, pset_next_id;
	uint64_t pset_calls;
	/* the buffers of agreements that timed out, still in flight: released once they end
	 * (scl_pset_sweep); guarded by mu */
	struct sc_tensor *pset_left[SCL_PSET_LEFT];
	int n_pset_left;
};

/* ---- calls and sc_finalize (finalize.c) ---- */
#define SCL_CALLS_CLOSING (1ULL << 63) /* sc_finalize has begun: calls are refused */
#define SCL_CALLS_ORPHAN  (1ULL << 62) /* sc_finalize returned first: the last out destroys */
#define SCL_CALLS_GONE	  (1ULL << 61) /* destroyed: the structure alone is left */
#define SCL_CALLS_COUNT	  (SCL_CALLS_GONE - 1)

/* CLOCK_MONOTONIC, timeout_ms from now (client.c). */
struct timespec scl_deadline_after(int timeout_ms);
/* Stops the I/O thread, closes the sockets, frees the tensors and the operations, and
 * frees the client's structure (bury: keeps it a while, scl_client_bury) (client.c). */
void scl_client_destroy(sc_client_t *c, int linger_ms, int bury);
/* sc_finalize in a child forked after sc_connect: takes no lock, closes the child's copies
 * of the descriptors, unmaps the tensors (client.c). */
void scl_client_forget_in_child(sc_client_t *c);
/* Keeps a destroyed client's structure among the last few, freeing the oldest
 * (finalize.c). */
void scl_client_bury(sc_client_t *c);
/* The last call out of a client that sc_finalize closes (left: the count after it). */
void scl_leave_closing(sc_client_t *c, uint64_t left);

/* Counts a call on c; 1 when sc_finalize has begun (the call counts all the same, and
 * leaves with scl_leave without touching anything sc_finalize destroys). */
static inline int scl_enter(const sc_client_t *c)
{
	uint64_t *calls = (uint64_t *)&c->calls;
	return (__atomic_fetch_add(calls, 1, __ATOMIC_ACQUIRE) & SCL_CALLS_CLOSING) != 0;
}

/* Whether sc_finalize has begun on c (a call counted by scl_enter may ask). */
static inline int scl_closing(const sc_client_t *c)
{
	return (__atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) & SCL_CALLS_CLOSING) != 0;
}

/* Ends a call counted by scl_enter; after it the caller touches the client no more. */
static inline void scl_leave(const sc_client_t *c)
{
	uint64_t left = __atomic_sub_fetch((uint64_t *)&c->calls, 1, __ATOMIC_ACQ_REL);

	if (left & SCL_CALLS_CLOSING)
		scl_leave_closing((sc_client_t *)c, left);
}

/* scl_enter for a call that may touch what sc_finalize destroys: SC_OK (the call is
 * counted: scl_leave ends it), SC_ERR_INVALID for a NULL client or in a child forked after
 * sc_connect (scl_forked_refusal, no lock taken), or SC_ERR_SHUTDOWN once sc_finalize has
 * begun (what names the call; nothing stays counted). */
sc_status_t scl_enter_call(const sc_client_t *c, const char *what);

/* Returns st after scl_leave(c): the end of a call that scl_enter_call began. */
static inline sc_status_t scl_left(const sc_client_t *c, sc_status_t st)
{
	scl_leave(c);
	return st;
}

/* ---- process sets (pset.c) ---- */
/* SC_OK when this trainer may register name in process set id, else the error. */
sc_status_t scl_pset_check(const sc_client_t *c, int id, const char *name);
/* Whether trainer rank is a member of process set id. */
int scl_pset_has(const sc_client_t *c, int id, int rank);
void scl_pset_free_all(sc_client_t *c);
/* Releases the buffers of timed-out agreements (pset.c) whose operations have ended; one
 * atomic load when there are none (sc_register_ex calls it). */
void scl_pset_sweep(sc_client_t *c);

/* ---- the submit channel (submit.c) ---- */
/* Connects to the daemon's submit channel (daemon_path as the daemon sees it, found here
 * beside the control socket reached) and binds it with token (the hello's reply), within
 * left_ms for connect, token and acknowledgement together: what the hello left of
 * sc_connect's timeout_ms (one deadline for the whole handshake; timeout_ms is for the
 * error texts); sets c->submit_fd. Called before any request but the hello exists.
 * SC_ERR_TIMEOUT: the token was sent and not answered, the daemon may have bound it (the
 * control socket cannot take over); any other error: not bound, the control socket
 * carries the requests. */
sc_status_t scl_submit_open(sc_client_t *c, const char *daemon_path, const uint8_t *token,
			    size_t token_len, int left_ms, int timeout_ms);
/* Sends request f over the bound channel and frees it. Called with c->mu held, with the
 * request's state set up; releases c->mu before the send (a full socket is waited on up to
 * the library's timeout, then fails the client). */
void scl_submit_request(sc_client_t *c, struct scl_frame *f, int hold);
/* Sends the requests held by sc_submit_batch now (c->mu not held): every wait calls it
 * first, so that no caller waits for a request of its own that was never sent. wait 0:
 * where another thread holds the channel (a send waiting on a full socket), that thread
 * sends them as it lets go and this call returns at once (sc_poll and a wait do not wait
 * behind another thread's send); 1: this call waits for the channel. */
void scl_submit_flush(sc_client_t *c, int wait);
/* sc_submit_batch's window (c->mu not held); 0 sends what is held. */
void scl_submit_batch_set(sc_client_t *c, int window_us);
/* Waits until every request given a ticket has been sent (c->mu not held). */
void scl_submit_quiesce(sc_client_t *c);
/* sc_finalize's goodbye: scl_submit_request, except that when the sends before it still
 * hold the channel after wait_ms (a daemon that takes nothing from it), the channel is shut
 * down: they fail at once, and the goodbye is not sent (the daemon sees the channel hang
 * up, which ends the session as well). */
void scl_submit_goodbye(sc_client_t *c, struct scl_frame *f, int wait_ms);
/* Fails the client (client.c; c->mu held). */
void scl_client_fail(sc_client_t *c, sc_status_t status, const char *msg);

/* ---- errors and logging (client.c) ---- */
/* Sets the calling thread's error text and returns status. */
sc_status_t scl_error(sc_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void scl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether tensor t has no operation in flight, after ending the one it has when its
 * header says it succeeded (the daemon sends no message then: shm_wake.h). c->mu held. */
int scl_op_settle(sc_client_t *c, sc_tensor_t *t);
/* Cuts the tensor out of its operations that ended but were not collected yet, before it
 * is freed: a later wait or poll on such a handle returns its status without reading the
 * tensor. c->mu held, t settled (scl_op_settle). */
void scl_op_detach(sc_client_t *c, sc_tensor_t *t);

/* ---- the connection (client.c) ---- */
/* Connects and says hello with role (SPARSECOMM__ROLE__ROLE_*); sc_connect is role trainer. */
sc_status_t scl_client_open(const char *socket_path, int timeout_ms, int role,
			    sc_client_t **client_p);
/* The request plumbing collective.c shares with client.c. A request's seq (and an
 * operation's handle: one counter). */
uint64_t scl_client_next_id(sc_client_t *c);
/* msg packed as a frame to send; NULL when out of memory. */
struct scl_frame *scl_frame_pack(const Sparsecomm__ClientMsg *msg);
/* Sends f (on the submit channel in the client lock's order, or queued for the I/O
 * thread); called with c->mu held, which it releases. */
void scl_client_enqueue(sc_client_t *c, struct scl_frame *f);
/* scl_client_enqueue of a collective's request, which sc_submit_batch may hold. */
void scl_client_enqueue_op(sc_client_t *c, struct scl_frame *f);
/* Whether the client may send a request (c->mu held): SC_OK, or why not. */
sc_status_t scl_client_check(sc_client_t *c);
/* In a child forked after sc_connect, a refusal naming what (before any lock); SC_OK in
 * the process that connected. */
sc_status_t scl_forked_refusal(const sc_client_t *c, const char *what);
/* sc_wait of an operation only this call holds: given up (sc_abandon) on a timeout. */
sc_status_t scl_wait_owned(sc_client_t *client, sc_handle_t h, int timeout_ms);

/*
 * Sends msg (its seq is assigned here) and waits up to timeout_ms (<= 0: the default) for
 * the reply. An ErrorReply becomes its status and the thread's error text (what names the
 * request first unless it is NULL or empty, then the daemon's message); on SC_OK *reply_p is
 * the reply, which the caller frees with sparsecomm__daemon_msg__free_unpacked(reply, NULL).
 */
sc_status_t scl_client_call(sc_client_t *c, Sparsecomm__ClientMsg *msg, int timeout_ms,
			    const char *what, Sparsecomm__DaemonMsg **reply_p);
/* scl_client_call for a request answered with ok (the default timeout); anything else is
 * SC_ERR_PROTOCOL naming what. */
sc_status_t scl_client_call_ok(sc_client_t *c, Sparsecomm__ClientMsg *msg, const char *what);
/*
 * Under a scheduler (proto/place.h): *local_rank_p gets the trainer's local rank from its
 * environment (-1 without a scheduler); with want_daemon (no socket named) and no daemon
 * serving the node, the job's daemon for the node is started or waited for (jobd.c) and
 * endpoint gets its socket (else it stays empty). An inconsistent environment fails,
 * saying which variable and what to set.
 */
sc_status_t scl_job_socket(int want_daemon, int timeout_ms, char *endpoint, size_t cap,
			   int *local_rank_p);
/* Unmaps every tensor of a client and frees them (tensor.c, from sc_finalize). */
void scl_tensor_free_all(sc_client_t *c);
/* The same in a child forked after sc_connect, taking no lock (the child is one thread;
 * a lock held at the fork by a thread of the parent is never released in it). */
void scl_tensor_unmap_all_in_child(sc_client_t *c);

/* Marks the tensor's result dense until the daemon writes a sparse one (tensor.c owns the
 * shared header). */
void scl_tensor_result_reset(sc_tensor_t *t);

/* ---- cuda tensors (cuda.c) ---- */
#define SCL_CUDA_HANDLE_BYTES 64 /* a CUDA IPC memory or event handle */
typedef struct scl_cuda scl_cuda_t;
/* Loads the CUDA driver (once per process) and checks that GPU ordinal exists;
 * SC_ERR_UNSUPPORTED naming why not (what: who asks, e.g. "rank 0: registering tensor 'w'"). */
sc_status_t scl_cuda_check(const char *what, int ordinal);
#define SCL_CUDA_UUID_BYTES 16
/* GPU ordinal's UUID (cuDeviceGetUuid_v2): how the daemon, whose ordinals may differ from
 * this process's (CUDA_VISIBLE_DEVICES), finds the GPU. */
sc_status_t scl_cuda_uuid(const char *what, int ordinal, unsigned char *uuid);
/* Opens the daemon's allocation and its ready and done events from their IPC handles
 * (SCL_CUDA_HANDLE_BYTES each) on GPU ordinal; nothing stays open on failure. */
sc_status_t scl_cuda_open(const char *what, int ordinal, const void *mem_handle,
			  const void *ready_handle, const void *done_handle, scl_cuda_t **g_p);
/* The allocation's device address in this process. */
void *scl_cuda_base(const scl_cuda_t *g);
/* Closes the events and the allocation and releases the GPU's context; g NULL: nothing. */
void scl_cuda_close(scl_cuda_t *g);
/* Records the ready event on stream (NULL: the legacy default stream). */
sc_status_t scl_cuda_record_ready(scl_cuda_t *g, void *stream, const char *what);
/* Waits on the host until the done event's last record has happened on the GPU. */
sc_status_t scl_cuda_sync_done(scl_cuda_t *g, const char *what);
/* Makes stream wait on the done event's last record, without waiting on the host. */
sc_status_t scl_cuda_stream_wait_done(scl_cuda_t *g, void *stream, const char *what);

/* Tries a plain connection to the Unix socket at path, at once: SC_ERR_CONNECT (the error
 * text set, naming the path and the user) when the kernel refuses it for its permissions,
 * else SC_OK. */
sc_status_t scl_probe_socket(const char *path);

#endif
