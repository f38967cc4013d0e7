/*
 * nccl.c: build/lib/libnccl-host.so, a TEST STAND-IN for NCCL (libnccl.so.2) and nothing
 * else: the entry points of NCCL's C API that the daemon's nccl transport calls, with
 * nccl.h's signatures, between processes over TCP, on host memory. Tests point
 * $SPARSECOMM_NCCL_LIB at it while the daemons' cuda device is the host build (its device
 * pointers are host pointers), so the transport runs end to end on machines without a GPU.
 * It has no GPU, no streams (the stream arguments are ignored) and no performance meaning:
 * every collective moves P times the data a ring would.
 *
 * - ncclGetUniqueId opens the root's listener (setup.c says which address) and writes its
 *   address and a random nonce into the id; rank 0's comm in the same process takes it.
 * - A comm's worker thread sets it up, then runs its batches in FIFO order (exec.c). A
 *   non-blocking comm (config->blocking == 0) returns ncclInProgress from its init and
 *   ncclSuccess from each operation once queued; ncclCommGetAsyncError says ncclInProgress
 *   while the set-up or any batch is queued or running, then ncclSuccess, or the first
 *   failure for good. A blocking comm waits for the set-up and each batch, a batch at
 *   most $NCCL_HOST_TIMEOUT_MS (then it fails the comm, naming a peer it waited for).
 * - Operations between ncclGroupStart and the outermost ncclGroupEnd are one batch, of one
 *   comm; an operation outside a group is a batch of one.
 * - ncclGetLastError names the peer rank of a failure, e.g. "rank 2: connection closed by
 *   peer". Set-up waits are bounded by $NCCL_HOST_TIMEOUT_MS (default 60000).
 * - ncclCommAbort shuts every connection down and joins the worker at once.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "host.h"

/* The last failure outside any comm (ncclGetLastError(NULL)). */
static pthread_mutex_t text_mu = PTHREAD_MUTEX_INITIALIZER;
static char global_text[NH_TEXT];

/* Operations collected between ncclGroupStart and ncclGroupEnd, per thread as in NCCL. */
static __thread int group_depth;
static __thread struct ncclComm *group_comm;
static __thread struct nh_batch *group_batch;
static __thread ncclResult_t group_error;

uint64_t nh_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void vset_text(struct ncclComm *comm, int sticky, ncclResult_t r, const char *fmt,
		      va_list ap)
{
	if (!comm) {
		pthread_mutex_lock(&text_mu);
		vsnprintf(global_text, sizeof(global_text), fmt, ap);
		pthread_mutex_unlock(&text_mu);
		return;
	}
	pthread_mutex_lock(&comm->mu);
	if (!sticky || comm->error == ncclSuccess)
		vsnprintf(comm->text, sizeof(comm->text), fmt, ap);
	if (sticky && comm->error == ncclSuccess)
		comm->error = r;
	pthread_mutex_unlock(&comm->mu);
}

void nh_set_text(struct ncclComm *comm, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_text(comm, 0, ncclSuccess, fmt, ap);
	va_end(ap);
}

/* Fails the comm for good (the first failure stays) and returns r. */
ncclResult_t nh_fail(struct ncclComm *comm, ncclResult_t r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_text(comm, 1, r, fmt, ap);
	va_end(ap);
	return r;
}

/* A refused call: the comm (or, without one, the process) keeps the reason. */
static ncclResult_t refuse(struct ncclComm *comm, ncclResult_t r, const char *what)
{
	nh_set_text(comm, "%s", what);
	return r;
}

EXPORT ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return refuse(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error";
	case ncclSystemError:
		return "unhandled system error";
	case ncclInternalError:
		return "internal error";
	case ncclInvalidArgument:
		return "invalid argument";
	case ncclInvalidUsage:
		return "invalid usage";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}

EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
	static __thread char copy[NH_TEXT];

	if (comm) {
		pthread_mutex_lock(&comm->mu);
		memcpy(copy, comm->text, sizeof(copy));
		pthread_mutex_unlock(&comm->mu);
	} else {
		pthread_mutex_lock(&text_mu);
		memcpy(copy, global_text, sizeof(copy));
		pthread_mutex_unlock(&text_mu);
	}
	return copy;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	struct nh_id id = {.magic = NH_ID_MAGIC};
	struct in_addr addr;
	char text[NH_TEXT];
	ncclResult_t r;
	int fd;

	if (!uniqueId)
		return refuse(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
	if (getrandom(&id.nonce, sizeof(id.nonce), 0) != sizeof(id.nonce)) {
		nh_set_text(NULL, "ncclGetUniqueId: getrandom: %s", strerror(errno));
		return ncclSystemError;
	}
	r = nh_pick_addr(&addr, text, sizeof(text));
	fd = r == ncclSuccess ? nh_listen(addr, &id.port, text, sizeof(text)) : -1;
	if (fd < 0) {
		nh_set_text(NULL, "ncclGetUniqueId: %s", text);
		return ncclSystemError;
	}
	if (nh_keep_listener(id.nonce, fd) != ncclSuccess) {
		close(fd);
		return refuse(NULL, ncclSystemError,
			      "ncclGetUniqueId: 64 unique ids wait for their rank 0 already");
	}
	id.addr = addr.s_addr;
	memset(uniqueId, 0, sizeof(*uniqueId));
	memcpy(uniqueId->internal, &id, sizeof(id));
	return ncclSuccess;
}

static void comm_free(struct ncclComm *comm)
{
	struct nh_batch *b, *next;

	for (int p = 0; comm->fds && p < comm->nranks; p++)
		if (comm->fds[p] >= 0)
			close(comm->fds[p]);
	if (comm->rfd >= 0)
		close(comm->rfd);
	for (b = comm->head; b; b = next) {
		next = b->next;
		nh_batch_free(b);
	}
	pthread_mutex_destroy(&comm->mu);
	pthread_cond_destroy(&comm->cv);
	free(comm->fds);
	free(comm->send_seq);
	free(comm->recv_seq);
	free(comm);
}

static struct ncclComm *comm_new(int nranks, int rank, const struct nh_id *id, int blocking)
{
	struct ncclComm *comm = calloc(1, sizeof(*comm));
	const char *env = getenv("NCCL_HOST_TIMEOUT_MS");
	pthread_condattr_t ca;
	long t = env ? strtol(env, NULL, 10) : 0;

	if (!comm)
		return NULL;
	comm->rank = rank;
	comm->nranks = nranks;
	comm->blocking = blocking;
	comm->timeout_ms = t > 0 && t <= INT_MAX ? (int)t : NH_DEFAULT_TIMEOUT;
	comm->nonce = id->nonce;
	comm->root.sin_family = AF_INET;
	comm->root.sin_addr.s_addr = id->addr;
	comm->root.sin_port = id->port;
	comm->rfd = comm->lfd = -1;
	pthread_mutex_init(&comm->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&comm->cv, &ca);
	pthread_condattr_destroy(&ca);
	comm->fds = malloc((size_t)nranks * sizeof(int));
	comm->send_seq = calloc((size_t)nranks, sizeof(uint32_t));
	comm->recv_seq = calloc((size_t)nranks, sizeof(uint32_t));
	if (!comm->fds || !comm->send_seq || !comm->recv_seq) {
		comm_free(comm);
		return NULL;
	}
	for (int p = 0; p < nranks; p++)
		comm->fds[p] = -1;
	return comm;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
					   int rank, ncclConfig_t *config)
{
	struct nh_id id;
	struct ncclComm *comm;
	int blocking = 1;
	ncclResult_t r;

	memcpy(&id, commId.internal, sizeof(id));
	if (!newcomm)
		return refuse(NULL, ncclInvalidArgument, "ncclCommInitRank: newcomm is NULL");
	*newcomm = NULL;
	if (nranks < 1 || nranks > NH_MAX_RANKS || rank < 0 || rank >= nranks) {
		nh_set_text(NULL, "ncclCommInitRank: rank %d of nranks %d (nranks 1..%d)", rank,
			    nranks, NH_MAX_RANKS);
		return ncclInvalidArgument;
	}
	if (id.magic != NH_ID_MAGIC)
		return refuse(
		    NULL, ncclInvalidArgument,
		    "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
	if (config && (config->magic != 0xcafebeef ||
		       config->size < offsetof(ncclConfig_t, blocking) + sizeof(int)))
		return refuse(
		    NULL, ncclInvalidArgument,
		    "ncclCommInitRankConfig: config not set from NCCL_CONFIG_INITIALIZER");
	if (config && config->blocking != NCCL_CONFIG_UNDEF_INT) {
		if (config->blocking != 0 && config->blocking != 1)
			return refuse(
			    NULL, ncclInvalidArgument,
			    "ncclCommInitRankConfig: config->blocking is neither 0 nor 1");
		blocking = config->blocking;
	}
	comm = comm_new(nranks, rank, &id, blocking);
	if (!comm)
		return refuse(NULL, ncclSystemError, "ncclCommInitRank: out of memory");
	if (rank == 0 && (comm->rfd = nh_take_listener(id.nonce)) < 0) {
		comm_free(comm);
		return refuse(NULL, ncclInvalidUsage,
			      "rank 0: its unique id was not made by ncclGetUniqueId in this "
			      "process, or is in use by another comm");
	}
	if ((errno = pthread_create(&comm->worker, NULL, nh_worker, comm)) != 0) {
		nh_set_text(NULL, "ncclCommInitRank: pthread_create: %s", strerror(errno));
		comm_free(comm);
		return ncclSystemError;
	}
	if (!blocking) {
		*newcomm = comm;
		return ncclInProgress;
	}
	pthread_mutex_lock(&comm->mu);
	while (!comm->ready) /* bounded: every set-up wait has NCCL_HOST_TIMEOUT_MS */
		nh_wait(comm, NH_SLICE_MS);
	r = comm->error;
	pthread_mutex_unlock(&comm->mu);
	if (r != ncclSuccess) {
		nh_set_text(NULL, "%s", ncclGetLastError(comm));
		ncclCommAbort(comm);
		return r;
	}
	*newcomm = comm;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
				     int rank)
{
	return ncclCommInitRankConfig(newcomm, nranks, commId, rank, NULL);
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm || !asyncError)
		return refuse(comm, ncclInvalidArgument,
			      "ncclCommGetAsyncError: NULL argument");
	pthread_mutex_lock(&comm->mu);
	if (!comm->ready)
		*asyncError = ncclInProgress;
	else if (comm->error != ncclSuccess)
		*asyncError = comm->error;
	else
		*asyncError = comm->head ? ncclInProgress : ncclSuccess;
	pthread_mutex_unlock(&comm->mu);
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm || !count)
		return refuse(comm, ncclInvalidArgument, "ncclCommCount: NULL argument");
	*count = comm->nranks;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm || !rank)
		return refuse(comm, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
	*rank = comm->rank;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm || !device)
		return refuse(comm, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
	*device = 0;
	return ncclSuccess;
}

/* Waits until the comm has nothing queued, at most its timeout and not after a failure;
 * says whether it has nothing queued. */
static int drain(struct ncclComm *comm)
{
	uint64_t deadline = nh_now_ms() + (uint64_t)comm->timeout_ms;
	int idle;

	pthread_mutex_lock(&comm->mu);
	while ((!comm->ready || comm->head) && comm->error == ncclSuccess &&
	       nh_now_ms() < deadline)
		nh_wait(comm, NH_SLICE_MS);
	idle = comm->ready && !comm->head;
	pthread_mutex_unlock(&comm->mu);
	return idle;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	ncclResult_t r;
	int idle;

	if (!comm)
		return refuse(NULL, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
	pthread_mutex_lock(&comm->mu);
	comm->finalized = 1;
	r = !comm->ready || comm->head ? ncclInProgress : comm->error;
	pthread_mutex_unlock(&comm->mu);
	if (r != ncclInProgress || !comm->blocking)
		return r;
	idle = drain(comm);
	pthread_mutex_lock(&comm->mu);
	r = comm->error;
	pthread_mutex_unlock(&comm->mu);
	if (r == ncclSuccess && !idle)
		r = nh_fail(comm, ncclSystemError,
			    "rank %d: operations still queued after NCCL_HOST_TIMEOUT_MS=%d",
			    comm->rank, comm->timeout_ms);
	return r;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	atomic_store(&comm->abort, 1);
	pthread_mutex_lock(&comm->mu);
	comm->stop = 1;
	for (int p = 0; p < comm->nranks; p++)
		if (comm->fds[p] >= 0)
			shutdown(comm->fds[p], SHUT_RDWR);
	pthread_cond_broadcast(&comm->cv);
	pthread_mutex_unlock(&comm->mu);
	/* The worker looks at the abort flag at least every NH_SLICE_MS. */
	pthread_join(comm->worker, NULL);
	comm_free(comm);
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	drain(comm);
	return ncclCommAbort(comm);
}

/* ---- operations ------------------------------------------------------------------------ */

static ncclResult_t check_op(struct ncclComm *comm, const struct nh_op *op, const char *name)
{
	size_t size = nh_type_size(op->type), ranks;
	int reduces = op->kind == NH_ALLREDUCE || op->kind == NH_REDUCE_SCATTER;
	int needs_send;

	if (!comm) {
		nh_set_text(NULL, "%s: comm is NULL", name);
		return ncclInvalidArgument;
	}
	/* all-reduce and reduce-scatter hold P blocks, all-gather receives P blocks */
	ranks = reduces || op->kind == NH_ALLGATHER ? (size_t)comm->nranks : 1;
	needs_send =
	    op->kind != NH_RECV && (op->kind != NH_BROADCAST || comm->rank == op->peer);
	if (!size) {
		nh_set_text(comm, "%s: datatype %d is not supported", name, (int)op->type);
		return ncclInvalidArgument;
	}
	if (reduces && ((int)op->red < 0 || op->red >= ncclNumOps)) {
		nh_set_text(comm, "%s: reduction %d is not supported", name, (int)op->red);
		return ncclInvalidArgument;
	}
	if (op->count > SIZE_MAX / size / ranks) {
		nh_set_text(comm, "%s: count %zu is too large", name, op->count);
		return ncclInvalidArgument;
	}
	if ((op->kind == NH_SEND || op->kind == NH_RECV || op->kind == NH_BROADCAST) &&
	    (op->peer < 0 || op->peer >= comm->nranks)) {
		nh_set_text(comm, "%s: rank %d is not in the comm (0..%d)", name, op->peer,
			    comm->nranks - 1);
		return ncclInvalidArgument;
	}
	if (op->count > 0 &&
	    ((needs_send && !op->sendbuff) || (op->kind != NH_SEND && !op->recvbuff))) {
		nh_set_text(comm, "%s: a buffer is NULL", name);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

static ncclResult_t batch_add(struct nh_batch *b, const struct nh_op *op)
{
	if (b->nops == b->cap) {
		int cap = b->cap ? 2 * b->cap : 8;
		struct nh_op *ops = realloc(b->ops, (size_t)cap * sizeof(*ops));

		if (!ops)
			return ncclSystemError;
		b->ops = ops;
		b->cap = cap;
	}
	b->ops[b->nops++] = *op;
	return ncclSuccess;
}

/* Checks an operation, then adds it to the thread's group or runs it as a batch of one. */
static ncclResult_t issue(struct ncclComm *comm, const struct nh_op *op, const char *name)
{
	ncclResult_t r = check_op(comm, op, name);
	struct nh_batch *b;

	if (r == ncclSuccess && group_depth > 0 && group_comm && group_comm != comm)
		r = refuse(comm, ncclInvalidUsage,
			   "a group holds operations of one comm only (stand-in limit)");
	if (r != ncclSuccess) {
		if (group_depth > 0 && group_error == ncclSuccess)
			group_error = r;
		return r;
	}
	if (group_depth > 0) {
		if (!group_batch && !(group_batch = calloc(1, sizeof(*group_batch))))
			r = ncclSystemError;
		if (r == ncclSuccess)
			r = batch_add(group_batch, op);
		if (r != ncclSuccess) {
			group_error = r;
			return refuse(comm, r, "out of memory");
		}
		group_comm = comm;
		return ncclSuccess;
	}
	b = calloc(1, sizeof(*b));
	if (!b || batch_add(b, op) != ncclSuccess) {
		nh_batch_free(b);
		return refuse(comm, ncclSystemError, "out of memory");
	}
	return nh_submit(comm, b);
}

EXPORT ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void)
{
	struct nh_batch *b = group_batch;
	struct ncclComm *comm = group_comm;
	ncclResult_t r = group_error;

	if (group_depth == 0)
		return refuse(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--group_depth > 0)
		return ncclSuccess;
	group_batch = NULL;
	group_comm = NULL;
	group_error = ncclSuccess;
	if (r != ncclSuccess || !b) {
		nh_batch_free(b);
		return r;
	}
	return nh_submit(comm, b);
}

EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
			     int peer, ncclComm_t comm, cudaStream_t stream)
{
	struct nh_op op = {.kind = NH_SEND,
			   .sendbuff = sendbuff,
			   .count = count,
			   .type = datatype,
			   .peer = peer};

	return issue(comm, &op, "ncclSend");
}

EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
			     ncclComm_t comm, cudaStream_t stream)
{
	struct nh_op op = {.kind = NH_RECV,
			   .recvbuff = recvbuff,
			   .count = count,
			   .type = datatype,
			   .peer = peer};

	return issue(comm, &op, "ncclRecv");
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				  cudaStream_t stream)
{
	struct nh_op o = {.kind = NH_ALLREDUCE,
			  .sendbuff = sendbuff,
			  .recvbuff = recvbuff,
			  .count = count,
			  .type = datatype,
			  .red = op};

	return issue(comm, &o, "ncclAllReduce");
}

EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
				      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				      cudaStream_t stream)
{
	struct nh_op o = {.kind = NH_REDUCE_SCATTER,
			  .sendbuff = sendbuff,
			  .recvbuff = recvbuff,
			  .count = recvcount,
			  .type = datatype,
			  .red = op};

	return issue(comm, &o, "ncclReduceScatter");
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct nh_op o = {.kind = NH_ALLGATHER,
			  .sendbuff = sendbuff,
			  .recvbuff = recvbuff,
			  .count = sendcount,
			  .type = datatype};

	return issue(comm, &o, "ncclAllGather");
}

EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				  ncclDataType_t datatype, int root, ncclComm_t comm,
				  cudaStream_t stream)
{
	struct nh_op o = {.kind = NH_BROADCAST,
			  .sendbuff = sendbuff,
			  .recvbuff = recvbuff,
			  .count = count,
			  .type = datatype,
			  .peer = root};

	return issue(comm, &o, "ncclBroadcast");
}

EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
			      ncclComm_t comm, cudaStream_t stream)
{
	return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
