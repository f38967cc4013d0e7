/*
 * host.h: the insides of build/lib/libnccl-host.so, a TEST STAND-IN for NCCL (nccl.c says
 * what it is for). Three parts share this header:
 *  - nccl.c: the NCCL API entry points (arguments, groups, the comm's life);
 *  - setup.c: the sockets: addresses, the unique id's listener, the rendezvous at rank 0
 *    and the full mesh of TCP connections;
 *  - exec.c: the comm's worker thread, which sets the comm up and then runs the batches
 *    of operations in FIFO order, every transfer of a batch progressing under poll();
 *  - reduce.c: datatypes and reductions.
 */
#ifndef NCCL_HOST_H
#define NCCL_HOST_H

#include <nccl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

#define NH_ID_MAGIC	   0x4e434831u /* "NCH1": in a unique id */
#define NH_HELLO_MAGIC	   0x4e434848u /* "NCHH": set-up messages */
#define NH_FRAME_MAGIC	   0x4e434846u /* "NCHF": every frame of an operation */
#define NH_MAX_RANKS	   1024
#define NH_TEXT		   256
#define NH_SLICE_MS	   50	/* the longest a wait goes without looking at the abort flag */
#define NH_DRAIN_MS	   2000 /* after a peer failed a batch: the others' messages go on */
#define NH_DEFAULT_TIMEOUT 60000

/* The unique id's contents (the rest of its 128 bytes are zero). */
struct nh_id {
	uint32_t magic;
	uint32_t addr; /* the root's IPv4 address, network order */
	uint16_t port; /* network order */
	uint16_t pad[3];
	uint64_t nonce;
};

/* One operation as the caller issued it. */
enum nh_kind { NH_SEND, NH_RECV, NH_ALLREDUCE, NH_ALLGATHER, NH_BROADCAST, NH_REDUCE_SCATTER };
struct nh_op {
	enum nh_kind kind;
	const void *sendbuff;
	void *recvbuff;
	size_t count; /* of datatype: per rank for allgather and reduce-scatter */
	ncclDataType_t type;
	ncclRedOp_t red;
	int peer; /* send and receive: the peer; broadcast: the root */
};

/* The operations handed to the worker at once (a group, or one call outside a group). */
struct nh_batch {
	struct nh_batch *next;
	struct nh_op *ops;
	int nops, cap;
	int done; /* blocking comms: the caller waits for it, then frees the batch */
	ncclResult_t result;
};

struct ncclComm {
	int rank, nranks;
	int blocking;
	int timeout_ms; /* $NCCL_HOST_TIMEOUT_MS: set-up, and each call of a blocking comm */
	uint64_t nonce;
	struct sockaddr_in root;
	int rfd;		       /* rank 0: the unique id's listener */
	int lfd;		       /* this rank's mesh listener (set-up only) */
	int *fds;		       /* per peer rank, -1 for this rank */
	uint32_t *send_seq, *recv_seq; /* per peer: the next frame's sequence number */
	pthread_t worker;
	atomic_int abort;
	atomic_int cancel; /* a blocking call waited NCCL_HOST_TIMEOUT_MS: fail the batch */

	/* under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct nh_batch *head, *tail; /* the head runs; it leaves the queue when done */
	int ready;		      /* set-up finished (successfully or not) */
	int stop;		      /* the worker leaves once the queue is empty */
	int finalized;
	ncclResult_t error; /* sticky */
	char text[NH_TEXT]; /* the last failure */
};

/* nccl.c */
void nh_set_text(struct ncclComm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
ncclResult_t nh_fail(struct ncclComm *comm, ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
uint64_t nh_now_ms(void);

/* setup.c */
ncclResult_t nh_pick_addr(struct in_addr *addr, char *text, size_t len);
int nh_listen(struct in_addr addr, uint16_t *port, char *text, size_t len);
ncclResult_t nh_keep_listener(uint64_t nonce, int fd);
int nh_take_listener(uint64_t nonce);
ncclResult_t nh_setup(struct ncclComm *comm);

/* exec.c */
void nh_wait(struct ncclComm *comm, int ms); /* on comm->cv, mu held, at most ms */
void *nh_worker(void *arg);
ncclResult_t nh_submit(struct ncclComm *comm, struct nh_batch *b);
void nh_batch_free(struct nh_batch *b);

/* reduce.c */
size_t nh_type_size(ncclDataType_t type);
void nh_reduce(void *dst, const char *src, int n, size_t count, ncclDataType_t type,
	       ncclRedOp_t op);

#endif
