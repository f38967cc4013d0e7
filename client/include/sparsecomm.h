/*
 * sparsecomm.h: the public API of libsparseclient, the library training processes link
 * to synchronise gradients through the node's sparsecommd daemon.
 *
 * Model. A trainer connects to its node's daemon, registers each gradient tensor once by
 * name (the daemon creates a shared-memory buffer of the tensor's size and the library
 * maps it), writes the gradient into that buffer, and starts an allreduce. The daemons of
 * all nodes agree that the tensor is ready everywhere, reduce it across every trainer of
 * the job, and write the result back into the same buffer (the operation is in place).
 *
 * Example (compiled and run by tests/python/check_header.py): grad holds n floats.
 *     sc_client_t *c = NULL;
 *     sc_tensor_t *t;
 *     sc_handle_t h;
 *     sc_status_t st = sc_connect(NULL, 30000, &c); // $SPARSECOMM_SOCKET, 30 s at most
 *     if (st == SC_OK)
 *             st = sc_register(c, "layer1.weight", SC_FLOAT32, n, &t);
 *     if (st == SC_OK) {
 *             memcpy(sc_tensor_data(t), grad, n * sizeof(float));
 *             st = sc_allreduce_async(c, t, SC_OP_AVERAGE, &h);
 *     }
 *     if (st == SC_OK)
 *             st = sc_wait(c, h, 60000); // 60 s at most
 *     if (st == SC_OK)
 *             memcpy(grad, sc_tensor_data(t), n * sizeof(float)); // the average
 *     else
 *             fprintf(stderr, "%s\n", sc_last_error());
 *     sc_finalize(c);
 *
 * Every function is thread safe: one client may be shared by the threads of a process,
 * sc_finalize included (it may overlap other threads' calls: see it).
 * A client belongs to the process that connected it: in a child forked after sc_connect
 * every call that takes the client is SC_ERR_INVALID naming the child, at once and
 * whatever the parent's threads were doing at the fork, except sc_finalize, which frees
 * the child's copy and leaves the parent's session alone (the child may sc_connect anew).
 * The library prints nothing; it returns a status, and the calling thread's last error
 * text (sc_last_error) says exactly what failed, naming the rank(s) and tensor involved.
 * An optional log callback receives diagnostic lines.
 */
#ifndef SPARSECOMM_H
#define SPARSECOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SC_BUILDING_LIBRARY)
#define SC_API __attribute__((visibility("default")))
#else
#define SC_API
#endif

/* Version of the control protocol spoken between the library, the daemons and sparsectl.
 * A peer with a different major version is refused with a message naming both. */
#define SC_PROTOCOL_VERSION 5

/*
 * Status codes: 0 success, 1 still in progress, negative values errors. The single list
 * below generates the enum and the messages, so they never disagree.
 */
#define SC_STATUS_MAP(X)                                                                       \
	X(OK, 0, "success")                                                                    \
	X(IN_PROGRESS, 1, "operation in progress")                                             \
	X(ERR_INVALID, -1, "invalid argument")                                                 \
	X(ERR_NOMEM, -2, "out of memory")                                                      \
	X(ERR_CONNECT, -3, "cannot reach the daemon")                                          \
	X(ERR_PROTOCOL, -4, "malformed or unexpected message")                                 \
	X(ERR_VERSION, -5, "incompatible protocol version")                                    \
	X(ERR_TIMEOUT, -6, "timed out")                                                        \
	X(ERR_MISMATCH, -7, "tensor differs across ranks")                                     \
	X(ERR_NOT_FOUND, -8, "unknown tensor")                                                 \
	X(ERR_BUSY, -9, "tensor already registered or in flight")                              \
	X(ERR_PEER, -10, "a peer daemon failed")                                               \
	X(ERR_SHUTDOWN, -11, "the daemon is shutting down")                                    \
	X(ERR_SYSTEM, -12, "system call failed")                                               \
	X(ERR_UNSUPPORTED, -13, "not supported")                                               \
	X(ERR_ABORTED, -14, "aborted because a trainer exited")                                \
	X(ERR_LIMIT, -15, "limit exceeded")                                                    \
	X(ERR_STALLED, -16, "not completed by every rank in time")

typedef enum {
#define SC_STATUS_ENUM_(name, value, msg) SC_##name = (value),
	SC_STATUS_MAP(SC_STATUS_ENUM_)
#undef SC_STATUS_ENUM_
} sc_status_t;

/* Name ("SC_ERR_TIMEOUT") and message ("timed out") of a status; never NULL. */
SC_API const char *sc_status_name(sc_status_t status);
SC_API const char *sc_status_message(sc_status_t status);

/* Element types. */
typedef enum {
	SC_FLOAT32 = 0,
	SC_FLOAT64 = 1,
	SC_INT32 = 2,
	SC_INT64 = 3,
} sc_dtype_t;

/* Size in bytes of one element of dtype, 0 for an unknown dtype. */
SC_API size_t sc_dtype_size(sc_dtype_t dtype);
SC_API const char *sc_dtype_name(sc_dtype_t dtype);

/*
 * What a float32 tensor's values travel as between the daemons (sc_tensor_opts_t.wire).
 * SC_WIRE_FP16 and SC_WIRE_BF16 halve the bytes of its dense SUM and AVERAGE allreduces:
 * the ring sends each chunk as 16-bit values (rounded to nearest even; beyond the format's
 * range, infinity; a NaN stays NaN) and the receiver adds them into its float32 sums on
 * arrival; the reduced chunk goes round in 16 bits too, its owner rounding its own copy
 * alike, so every rank ends with the same bits, each result a 16-bit value (up to the
 * average's division). Only the dense ring converts: such a tensor refuses a sparsifier,
 * allow_lossy, COO input and a pinned scheme other than "dense_ring" at registration
 * (SC_ERR_INVALID), and its MIN, MAX, PRODUCT, broadcast, allgather and reduce-scatter
 * keep the 32-bit wire. A buffer on a GPU that goes over NCCL keeps 32 bits as well
 * (sparsectl stats says so); one staged through host memory over tcp converts. Every
 * rank must give the same (else SC_ERR_MISMATCH naming each rank's), and tensors of
 * different wire formats never share a fused buffer.
 */
typedef enum {
	SC_WIRE_NATIVE = 0, /* the dtype's own bytes (default) */
	SC_WIRE_FP16 = 1,   /* IEEE binary16: 11-bit precision, largest finite 65504 */
	SC_WIRE_BF16 = 2,   /* bfloat16: float32's range, 8-bit precision */
} sc_wire_t;

/* "native", "fp16", "bf16"; "unknown" for any other value. */
SC_API const char *sc_wire_name(sc_wire_t wire);

/*
 * The element type a caller's values have where it is not the buffer's dtype
 * (sc_tensor_opts_t.src_type): bindings that carry narrower types in a wider buffer (the
 * Python bindings' int8, uint8, int16 and bool tensors in int32 buffers, float16 and
 * bfloat16 in float32 ones) name it, so that ranks whose values differ in type fail as a
 * dtype mismatch, as in Horovod, instead of being summed as one. It takes part in the type
 * word the ranks must agree on: a difference fails the operation on every rank with
 * SC_ERR_MISMATCH naming the tensor, the ranks and each rank's type ("dtype differs
 * across ranks: rank 0 has float16; rank 1 has float32"). The library converts nothing:
 * the buffer holds the dtype's values. Each names the dtype that carries it (SC_INT32 for
 * the integers and bool, SC_FLOAT32 for the 16-bit floats, SC_INT64 for uint64); another
 * pairing is refused at registration with SC_ERR_INVALID.
 */
typedef enum {
	SC_SRC_NATIVE = 0, /* the buffer's own dtype (default) */
	SC_SRC_INT8 = 1,
	SC_SRC_UINT8 = 2,
	SC_SRC_INT16 = 3,
	SC_SRC_UINT16 = 4,
	SC_SRC_UINT32 = 5,
	SC_SRC_BOOL = 6,
	SC_SRC_FLOAT16 = 7,
	SC_SRC_BFLOAT16 = 8,
	SC_SRC_UINT64 = 9,
} sc_src_type_t;

/* The dtype that carries src (SC_INT32, ...), or -1 for SC_SRC_NATIVE or an unknown
 * value. */
SC_API int sc_src_type_carrier(sc_src_type_t src);
/* The name of the values' type: src's ("int8", "float16", ...), or dtype's for
 * SC_SRC_NATIVE; "unknown" for any other value. */
SC_API const char *sc_src_type_name(sc_src_type_t src, sc_dtype_t dtype);

/*
 * Reductions, elementwise over every trainer of the job, on every dtype.
 *
 * SC_OP_SUM adds (integers wrap around in two's complement). SC_OP_AVERAGE divides the sum
 * by the number of trainers in the job: float32 multiplies by the rounded 1 / size,
 * float64 divides, and integers divide in integer arithmetic, truncating toward zero
 * (C's division: 1 / 2 averages to 0, -1 / 2 to 0), after the sum has wrapped around.
 *
 * SC_OP_MIN, SC_OP_MAX and SC_OP_PRODUCT take the smallest, the largest or the product
 * (integers wrap around; a NaN in any trainer's element makes that element NaN, as
 * torch.minimum and torch.maximum do). They are lossless dense reductions: the buffer always
 * goes through the dense ring, whatever scheme the tensor pins or allow_lossy permits, and
 * never fuses with sum or average tensors. A tensor with a sparsifier, or COO input,
 * refuses them (SC_ERR_UNSUPPORTED naming the tensor): a sparsifier's residual and a COO
 * list's implicit zeros mean a sum.
 *
 * SC_OP_ADASUM combines the trainers' float32 or float64 tensors with the Adasum operator
 * (Horovod's op=hvd.Adasum): adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2))
 * b, a zero vector's coefficient taken as 1, the dot products and norms in double, per
 * tensor, over a binary tree of the trainers in rank order (neighbours paired, then pairs
 * of those results, ...; at a level with an odd count the last carries over unpaired), so
 * every trainer gets the same bits for any number of trainers. It is sc_allreduce_async's
 * only (not a reduce-scatter's); integer tensors, a sparsifier and COO input refuse it
 * (SC_ERR_UNSUPPORTED naming the tensor). docs/design.md, "Adasum", says how it runs.
 */
typedef enum {
	SC_OP_SUM = 0,
	SC_OP_AVERAGE = 1,
	SC_OP_MIN = 2,
	SC_OP_MAX = 3,
	SC_OP_PRODUCT = 4,
	SC_OP_ADASUM = 5,
} sc_reduce_op_t;

/* "sum", "average", "min", "max", "product", "adasum"; "unknown" for any other value. */
SC_API const char *sc_reduce_op_name(sc_reduce_op_t op);

typedef struct sc_client sc_client_t; /* a connection to the node's daemon */
typedef struct sc_tensor sc_tensor_t; /* a registered tensor and its shared buffer */
typedef uint64_t sc_handle_t;	      /* an operation in flight; 0 is never valid */

/*
 * Connects to the daemon. socket_path is the daemon's control socket (a filesystem path
 * or a ZeroMQ endpoint such as "ipc:///run/sparsecomm/ctl.sock"); NULL takes
 * $SPARSECOMM_SOCKET, else ctl.sock in the caller's own daemon's default runtime
 * directory ($XDG_RUNTIME_DIR/sparsecomm or /tmp/sparsecomm-UID; /run/sparsecomm for
 * root) when it exists, else the system daemon's /run/sparsecomm/ctl.sock. The local rank is
 * taken from $SPARSECOMM_LOCAL_RANK when set, else from the scheduler's environment (mpirun,
 * srun, torchrun), otherwise the daemon assigns the lowest free one.
 * Started by a scheduler with no socket named and neither of those daemons' sockets there,
 * the node's trainer of local rank 0 starts the job's daemon for the node and every local
 * trainer waits for it (at least 130 s; docs/deployment.md, "Under a scheduler").
 * timeout_ms (<= 0: 30000) is one deadline for the whole handshake once the socket is
 * known: the hello and the binding of the daemon's submit channel together (a channel
 * whose token is not acknowledged by then fails sc_connect with SC_ERR_TIMEOUT, naming the
 * channel and what to check; docs/design.md, "The submit channel"). A socket whose permissions
 * refuse this user fails at once with SC_ERR_CONNECT, naming the path and the uid (the daemon
 * admits its own user and the members of its ctl_group).
 */
SC_API sc_status_t sc_connect(const char *socket_path, int timeout_ms, sc_client_t **client_p);

/* This trainer's global rank, the number of trainers in the job, its rank on the node,
 * and the number of trainers per node. */
SC_API int sc_rank(const sc_client_t *client);
SC_API int sc_size(const sc_client_t *client);
SC_API int sc_local_rank(const sc_client_t *client);
SC_API int sc_local_size(const sc_client_t *client);

/* What the node's daemon has built in and usable, space-separated: its transports ("tcp",
 * "nccl") and, where it serves GPU tensors, "cuda". Valid until sc_finalize. */
SC_API const char *sc_daemon_built(const sc_client_t *client);

/* What this library's build has, space-separated, needing no daemon: "tcp"; "nccl" where
 * the daemons of the build have the nccl transport; "cuda" where its CUDA device library
 * was built. The node's daemon may use less (sc_daemon_built: its device setting, the
 * drivers it finds). */
SC_API const char *sc_built(void);

/* Sets a daemon setting on every node, as `sparsectl config set KEY VALUE` does (checked
 * first; an owner-only key such as timeline_file needs the daemon's user or root).
 * SC_ERR_NOT_FOUND for an unknown key; SC_ERR_INVALID for a value the key refuses, a key
 * fixed at start, an owner-only key from another user or a timeline_file whose directory
 * the node's daemon cannot write; the error text names the key, the value and why, and
 * nothing is applied on any node. SC_OK once the coordinator's change has been applied
 * on this node; SC_ERR_PEER when it has not been within 3 s (the coordinator lost, or it
 * refused the value), which says so. */
SC_API sc_status_t sc_config_set(sc_client_t *client, const char *key, const char *value);

/*
 * Registers a tensor: name (1 to 255 bytes of printable text, unique for this client; a
 * control byte such as a newline or an escape is SC_ERR_INVALID), element type and
 * count. The daemon creates the shared buffer; *tensor_p stays valid until sc_finalize.
 */
SC_API sc_status_t sc_register(sc_client_t *client, const char *name, sc_dtype_t dtype,
			       size_t numel, sc_tensor_t **tensor_p);

/*
 * Releases a registration: the daemon unlinks its shared memory, this process unmaps it,
 * and tensor is invalid afterwards. The name may then be registered again, with another
 * dtype, count or options (a form of the name the daemons cached before takes its cache
 * id again). SC_ERR_BUSY while an operation of the tensor
 * is in flight (wait for it first). An operation of the tensor that ended but was not
 * collected yet keeps its handle: sc_wait or sc_poll on it returns its status (the data is
 * gone with the tensor).
 */
SC_API sc_status_t sc_tensor_release(sc_client_t *client, sc_tensor_t *tensor);

/* How a dense tensor is sparsified before it is exchanged (with error feedback: what is
 * not sent stays in a per-tensor residual and is added to the next step's gradient). */
typedef enum {
	SC_SPARSIFY_NONE = 0,	   /* send as is (lossless) */
	SC_SPARSIFY_TOPK = 1,	   /* exact top-k by magnitude, k = density x numel */
	SC_SPARSIFY_THRESHOLD = 2, /* every |x| >= threshold */
	SC_SPARSIFY_DGC = 3,	   /* sampled threshold (DGC) aiming at density */
	SC_SPARSIFY_EXDYNA = 4,	   /* ExDyna: exclusive partitions, scaled threshold */
	SC_SPARSIFY_NATURAL = 5,   /* the tensor is already sparse: send its non-zeros */
	SC_SPARSIFY_BLOCK_TOPK = 6 /* block-wise top-K (S2): the K = density x blocks blocks
				      of largest l2 norm, whole (blocks of opts.block) */
} sc_sparsifier_t;

/* Where a tensor's buffer lives (sc_tensor_opts_t.device). */
typedef enum {
	SC_DEVICE_CPU = 0,  /* host shared memory */
	SC_DEVICE_CUDA = 1, /* the daemon's GPU memory, mapped by CUDA IPC (see below) */
} sc_device_kind_t;

/*
 * Per-tensor options for sc_register_ex. Zero-initialise, set struct_size to
 * sizeof(sc_tensor_opts_t), then set what differs from the defaults (dense, lossless,
 * scheme chosen by the daemons' cost model, no COO input). A program built with an older
 * sparsecomm.h (a smaller struct_size) gets the defaults of the fields it lacks; one built
 * with a newer header runs on an older library as long as the options this library lacks
 * keep their defaults (zero bytes), and otherwise fails registration with
 * SC_ERR_UNSUPPORTED naming the tensor and the first byte this library cannot honour.
 */
typedef struct sc_tensor_opts {
	uint32_t struct_size;
	int allow_lossy;	    /* lossy schemes may run: the automatic choice may pick
				       SparDL; S2's sketch runs only when pinned */
	sc_sparsifier_t sparsifier; /* default SC_SPARSIFY_NONE */
	double density;		    /* target density for TOPK, DGC, EXDYNA */
	double threshold;	    /* for THRESHOLD */
	const char *scheme;	    /* pin a scheme by name ("dense_ring", ...); NULL: auto */
	size_t coo_capacity;	    /* > 0: the tensor also takes COO input (see below) */
	/* S2's sketch for this tensor where S2 runs (it is pinned): rows (1..15; 3 or more
	 * decode by the median) and columns per expected non-zero of the union; 0: the
	 * daemons' sketch_rows and sketch_cols. Every rank must give the same. */
	uint32_t sketch_rows;
	double sketch_cols;
	/* Placement (default SC_DEVICE_CPU). SC_DEVICE_CUDA: the daemon allocates the
	 * buffer, its COO area and its residual on GPU device_ordinal of the node and the
	 * library maps them with CUDA IPC, so sc_tensor_data, sc_tensor_coo_indices,
	 * sc_tensor_coo_values and sc_tensor_residual return device pointers. The library
	 * loads the CUDA driver (libcuda.so.1, or $SPARSECOMM_CUDA_DRIVER) at the first such
	 * registration; without a driver, a GPU or a daemon that serves that GPU, it fails
	 * with SC_ERR_UNSUPPORTED naming the reason. */
	sc_device_kind_t device;
	int device_ordinal;
	sc_wire_t wire; /* float32 only; default SC_WIRE_NATIVE (see sc_wire_t) */
	/* Elements per block: S2's bitmap block where S2 runs (pinned) and the block of
	 * SC_SPARSIFY_BLOCK_TOPK; 0: 256. A row of the tensor
	 * (its last dimension for a 2-D tensor, as the Python bindings default to) makes
	 * S2's bitmap one bit per row, as S2 Reducer's blocks are word vectors. Every rank
	 * must give the same. */
	uint32_t block;
	/* The process set the tensor's operations run in (sc_process_set_add; 0, the
	 * default, is every trainer). Only members register it; a name is a name within its
	 * set, so the same name in two sets is two tensors. */
	int process_set;
	/* The caller's element type where the buffer carries a wider one (sc_src_type_t;
	 * default SC_SRC_NATIVE). Every rank must give the same (else SC_ERR_MISMATCH). */
	sc_src_type_t src_type;
} sc_tensor_opts_t;

/* sc_register with options; opts NULL is sc_register. */
SC_API sc_status_t sc_register_ex(sc_client_t *client, const char *name, sc_dtype_t dtype,
				  size_t numel, const sc_tensor_opts_t *opts,
				  sc_tensor_t **tensor_p);

/*
 * COO input (tensors registered with coo_capacity > 0): write nnz flat element indices
 * (0 <= index < numel, uint32) and their values (of the tensor's dtype) into these shared
 * arrays, then call sc_allreduce_coo_async. In any order; repeated indices are summed. The
 * daemon copies the list when the operation starts and reads only its copy. An index not
 * below numel fails the operation on every rank (SC_ERR_INVALID naming this rank), and so
 * does an nnz over coo_capacity (SC_ERR_LIMIT). The result, the dense sum over every
 * trainer, lands in sc_tensor_data. NULL for other tensors.
 */
SC_API uint32_t *sc_tensor_coo_indices(const sc_tensor_t *tensor);
SC_API void *sc_tensor_coo_values(const sc_tensor_t *tensor);
/*
 * The node's error-feedback residual of a lossy tensor (registered with a sparsifier or
 * allow_lossy): numel floats holding what the daemon has not yet sent of this node's
 * contributions; it is added to the next step's gradient. Read-only, and valid between
 * operations; only local rank 0's view is filled (the residual belongs to the node), the
 * others read zeros. Checkpoint it with the optimizer state. NULL for other tensors.
 */
SC_API const float *sc_tensor_residual(const sc_tensor_t *tensor);

SC_API sc_status_t sc_allreduce_coo_async(sc_client_t *client, sc_tensor_t *tensor, size_t nnz,
					  sc_reduce_op_t op, sc_handle_t *handle_p);

/*
 * A COO allreduce whose result may come back sparse, in the COO arrays themselves: once
 * the operation has completed successfully, sc_tensor_result_nnz() gives the number of
 * entries, indices strictly ascending (every index whose sum is non-zero; an index whose
 * sum cancelled may stay, as 0), values summed (averaged with SC_OP_AVERAGE). The contents of
 * sc_tensor_data are then unspecified. When the union of the indices does not fit the
 * tensor's coo_capacity, the node runs several trainers of the tensor, or the tensor has
 * a sparsifier (which rewrites it densely), the dense sum lands in sc_tensor_data as with
 * sc_allreduce_coo_async and sc_tensor_result_nnz() is SC_RESULT_DENSE. The sparse form
 * skips every pass over all numel elements (the AGsparse scheme merges the ranks' lists
 * directly): what a natively sparse gradient such as an embedding table's wants. A
 * tensor that allows lossy schemes keeps that property: its residual is folded into the
 * list where it is non-zero, and the result of a lossy scheme is the values it delivered.
 */
#define SC_RESULT_DENSE ((size_t)-1)
SC_API sc_status_t sc_allreduce_coo_sparse_async(sc_client_t *client, sc_tensor_t *tensor,
						 size_t nnz, sc_reduce_op_t op,
						 sc_handle_t *handle_p);
/* Also the element count of an allgather's, a reduce-scatter's or an alltoall's result
 * (and SC_RESULT_DENSE before any). */
SC_API size_t sc_tensor_result_nnz(const sc_tensor_t *tensor);

/* Where the tensor lives, and the GPU's ordinal into *ordinal_p (when not NULL; 0 for
 * SC_DEVICE_CPU). */
SC_API sc_device_kind_t sc_tensor_device(const sc_tensor_t *tensor, int *ordinal_p);

/*
 * Ordering of a cuda tensor without host synchronisation (CUDA stream semantics). stream
 * is a cudaStream_t / CUstream of the calling process (NULL: the legacy default stream);
 * the tensor's later submissions are ordered after the work queued on it so far: each
 * submission records the tensor's ready event on it, and the daemon's stream waits on
 * that event before it reads the buffer. Set it before each submission when the writer's
 * stream changes. SC_ERR_INVALID for a cpu tensor.
 */
SC_API sc_status_t sc_tensor_set_stream(sc_tensor_t *tensor, void *stream);

/*
 * The shape the tensor's later allreduces, broadcasts and reduce-scatters give: ndim
 * dimensions (at most
 * SC_MAX_DIMS) whose product is the tensor's element count; ndim 0 gives none (the
 * default). Every rank must give the same shape, as Horovod requires: shapes that differ
 * (the same element count in other dimensions: [17, 1311] on one rank, [17, 23, 57] on
 * another) fail the operation on every rank with SC_ERR_MISMATCH naming each rank's shape.
 * One dimension and none are the same shape, and a rank that gives none is compared as
 * such. Allgather and alltoall take no shape (their rows may differ) and leave it for the
 * next allreduce.
 * An empty tensor (a dimension of 0) has no buffer: a tensor of one element stands for
 * it, given the empty shape (one dimension is then a shape too: [0]). Its operation is
 * negotiated as any other, so that a rank whose tensor is empty while another's is not
 * fails it on every rank at once with SC_ERR_MISMATCH naming each rank's element count
 * and shape ("rank 0 has 0 [0]; rank 1 has 4"); where every rank gives the same empty
 * shape it completes, and the stand-in's result means nothing.
 * SC_ERR_INVALID, naming the tensor, for a product that is not the element count (nor 0
 * on a tensor of one element) or too many dimensions.
 */
#define SC_MAX_DIMS 64
SC_API sc_status_t sc_tensor_set_shape(sc_tensor_t *tensor, int ndim, const uint64_t *dims);

/*
 * Queues the completion of an operation on a cuda tensor on a stream of the caller: waits
 * on the host (at most timeout_ms, as sc_wait) until the daemon has queued the result,
 * then makes stream wait on the tensor's done event, so work queued on stream afterwards
 * (an optimizer step) runs after the result is in the buffer, with no wait for the GPU
 * on the host. Returns as sc_wait, and releases the handle likewise. For a cpu tensor it
 * is sc_wait. (sc_wait on a cuda tensor also waits for the result on the GPU.)
 */
SC_API sc_status_t sc_stream_wait(sc_client_t *client, sc_handle_t handle, void *stream,
				  int timeout_ms);

/* The tensor's shared buffer (numel elements, 64-byte aligned), its name, type, count. */
SC_API void *sc_tensor_data(const sc_tensor_t *tensor);
SC_API const char *sc_tensor_name(const sc_tensor_t *tensor);
SC_API sc_dtype_t sc_tensor_dtype(const sc_tensor_t *tensor);
SC_API size_t sc_tensor_numel(const sc_tensor_t *tensor);

/*
 * Starts an in-place allreduce of the tensor's buffer across every trainer of the job.
 * The buffer must not be touched until the operation completes. A tensor has at most one
 * operation in flight (a second one fails with SC_ERR_BUSY).
 */
SC_API sc_status_t sc_allreduce_async(sc_client_t *client, sc_tensor_t *tensor,
				      sc_reduce_op_t op, sc_handle_t *handle_p);

/*
 * Batched submissions. With window_us > 0, each collective this client starts (an
 * allreduce, broadcast, allgather, reduce-scatter or alltoall) is held in the library
 * instead of being sent at once, and the requests held go to the daemon together, in the
 * order they were started, in one system call: when the next one comes window_us or more
 * after the first held, when 64 are held, when any other request is made (a registration,
 * a barrier, sc_finalize), on sc_submit_flush, and before every sc_wait, sc_poll, sc_abandon
 * and sc_stream_wait of this client (a wait never waits for a request that was not sent;
 * where another thread of the client is sending, that thread sends them, so sc_poll and a
 * wait do not wait behind its send).
 * Nothing sends them on a timer: a rank that holds a request and then waits on anything
 * outside this client (another library's collective) must call sc_submit_flush first, or
 * the other ranks' matching operations wait for it. The daemon then wakes once a batch
 * rather than once an operation (sparsecomm.torch.DistributedOptimizer's submit_batch_us
 * scopes it to a backward pass). window_us 0 (the default) sends each request as it is
 * made, and sends what was held. Without the submit channel (a daemon reached over TCP)
 * requests go as before, one by one.
 */
SC_API sc_status_t sc_submit_batch(sc_client_t *client, int window_us);

/* Sends the collectives' requests held by sc_submit_batch now. */
SC_API sc_status_t sc_submit_flush(sc_client_t *client);

/*
 * Checks an operation without blocking: SC_IN_PROGRESS while it runs, SC_OK when the
 * result is in the buffer, or the error that ended it. Once it has returned anything but
 * SC_IN_PROGRESS the handle is released.
 */
SC_API sc_status_t sc_poll(sc_client_t *client, sc_handle_t handle);

/*
 * Waits for an operation for at most timeout_ms (< 0: wait without limit, 0: poll).
 * SC_ERR_TIMEOUT (only ever this wait running out) leaves the handle valid; any other
 * result releases it. An operation the daemons gave up on (a rank never submitted the
 * tensor within stall_timeout_ms, or a transfer made no progress for op_timeout_ms) ends
 * with SC_ERR_STALLED.
 */
SC_API sc_status_t sc_wait(sc_client_t *client, sc_handle_t handle, int timeout_ms);

/*
 * Gives up a handle that will not be collected (after a wait that timed out, or an
 * interrupted one): an operation still in flight is freed when it ends, a finished one
 * now, and neither counts as held any more (a barrier or a join the trainer abandoned does
 * not refuse its next barrier once it has ended: a barrier abandoned while still in flight
 * is this trainer's n-th barrier, and its next sc_barrier_async is SC_ERR_BUSY, saying so,
 * until that one ends). Its tensor stays busy until the operation ends. An abandoned
 * handle is nobody's: a wait or poll on it is SC_ERR_INVALID, at once, or when the
 * operation ends for a thread that was already waiting on it. An unknown handle is
 * ignored.
 */
SC_API void sc_abandon(sc_client_t *client, sc_handle_t handle);

/* Synchronous allreduce: sc_allreduce_async followed by sc_wait. */
SC_API sc_status_t sc_allreduce(sc_client_t *client, sc_tensor_t *tensor, sc_reduce_op_t op,
				int timeout_ms);

/*
 * Broadcast: once it completes, every trainer's buffer of the tensor holds what trainer
 * root_rank's held when it submitted (in place, like an allreduce; every trainer submits
 * the tensor with the same root, or each fails with SC_ERR_MISMATCH naming every rank's
 * operation). The root's node sends the buffer once to every other node, which copies it
 * to its trainers: half the bytes a sum allreduce moves. Any dtype; a tensor with a
 * sparsifier, or COO input, refuses it (SC_ERR_UNSUPPORTED). A root that is not a rank of
 * the job (or a negative one) fails the operation on every rank with SC_ERR_INVALID naming
 * this rank and the tensor, through sc_wait, as do the other collectives' arguments that
 * the daemon refuses (an allgather's count over the tensor, rows that do not divide it,
 * an unknown reduction). Wait with sc_poll / sc_wait.
 */
SC_API sc_status_t sc_broadcast_async(sc_client_t *client, sc_tensor_t *tensor, int root_rank,
				      sc_handle_t *handle_p);
/* sc_broadcast_async followed by sc_wait. */
SC_API sc_status_t sc_broadcast(sc_client_t *client, sc_tensor_t *tensor, int root_rank,
				int timeout_ms);

/*
 * Allgather with a variable first dimension: every trainer gives the first count elements
 * of its buffer (count may differ across ranks: rows x elements per row), and once it
 * completes every trainer's buffer begins with all of them, concatenated in rank order;
 * sc_tensor_result_nnz() then gives their total. Register the tensor with the size the
 * concatenation needs (every rank the same size); a total over it fails on every rank
 * with SC_ERR_LIMIT naming each rank's count. The tensor runs in a buffer of its own and
 * each node sends its trainers' elements once to every other node. Any dtype; a tensor
 * with a sparsifier refuses it (SC_ERR_UNSUPPORTED).
 */
SC_API sc_status_t sc_allgather_async(sc_client_t *client, sc_tensor_t *tensor, size_t count,
				      sc_handle_t *handle_p);

/*
 * Alltoall: send_counts holds one count per trainer rank of the job (sc_size of them):
 * this trainer sends send_counts[r] elements to trainer r, and its buffer begins with
 * those blocks, back to back in destination rank order. Once it completes, the buffer
 * begins with the blocks the trainers sent this one, back to back in source rank order;
 * sc_tensor_result_nnz() gives their total and sc_tensor_result_counts() how many came
 * from each rank. Register the tensor with room for both (every rank the same size).
 * Each node sends every other node, in one exchange, the blocks its trainers address to
 * that node's trainers; blocks between trainers of one node are copied locally. Any
 * dtype. Send counts that are not one per trainer or sum over the tensor's size fail the
 * operation on every rank with SC_ERR_INVALID naming this rank and the tensor, and a rank
 * that would receive more than the tensor's size fails it on every rank with
 * SC_ERR_LIMIT naming each rank's total. A tensor with a sparsifier, or COO input,
 * refuses it (SC_ERR_UNSUPPORTED). A trainer that has joined (sc_join) takes part
 * sending nothing and receiving nothing: what the others address to it is not sent,
 * and they receive 0 elements from it. The blocks land in place, so after a failure in
 * the transfer itself (a peer lost, a timeout) the buffer may hold part of them over the
 * blocks it was sending; after a refusal (the errors above) it is untouched.
 */
SC_API sc_status_t sc_alltoall_async(sc_client_t *client, sc_tensor_t *tensor,
				     const size_t *send_counts, sc_handle_t *handle_p);
/*
 * After an alltoall of the tensor completed successfully: counts[r] = the elements it
 * received from trainer rank r, for n = sc_size() ranks. SC_ERR_INVALID when n is not the
 * number of ranks the alltoall ran over, or before any alltoall of the tensor completed
 * (a new alltoall forgets the last one's counts when it starts).
 */
SC_API sc_status_t sc_tensor_result_counts(const sc_tensor_t *tensor, size_t *counts, int n);

/*
 * Reduce-scatter: the buffer, rows of row_elems elements, is reduced by op across every
 * trainer as by sc_allreduce_async, and each trainer gets only its slice of the result:
 * the rows are split in rank order, the first (rows % trainers) one row more than the
 * others, and trainer r's rows land at the start of its buffer; sc_tensor_result_nnz()
 * then gives their element count. Each node sends every other node that node's part of
 * its local reduction once ((P - 1) / P of the buffer, half a ring allreduce's bytes).
 * row_elems must divide the tensor's size, and every rank must give the same op and
 * row_elems (else SC_ERR_MISMATCH naming each rank's). Any dtype and any reduction but
 * SC_OP_ADASUM (SC_ERR_INVALID, as rows that do not divide the tensor); a tensor with a
 * sparsifier refuses it (SC_ERR_UNSUPPORTED).
 */
SC_API sc_status_t sc_reducescatter_async(sc_client_t *client, sc_tensor_t *tensor,
					  sc_reduce_op_t op, size_t row_elems,
					  sc_handle_t *handle_p);

/*
 * Grouped operations (Horovod's grouped_allreduce, grouped_allgather,
 * grouped_reducescatter): sc_group_begin opens a group of n_members operations and gives
 * its number; sc_group_add makes the tensor's next operation (any collective, started as
 * usual) a member of it. The daemons negotiate the members together: none of them runs
 * until every member is ready on every rank, and they reach the fusion step together, so
 * members that may share a buffer (same dtype, fusing collectives, within the fusion
 * threshold) do. Every rank must form the same group (the same tensor names, the same
 * count): a group that differs fails every member on every rank with SC_ERR_MISMATCH
 * naming a tensor and the ranks that differ; a member that a rank never submits fails the
 * group with SC_ERR_STALLED after the daemons' stall_timeout_ms, naming it. A client has
 * one open group at a time (another sc_group_begin is SC_ERR_BUSY); sc_group_end closes
 * it and is SC_ERR_INVALID, naming the counts, when fewer than n_members were added (the
 * members already started then fail at the stall timeout, and the members not yet started
 * lose their mark: their next operations are their own). A tensor's mark is taken by its
 * next operation, successful or refused. n_members is 1 to SC_GROUP_MAX.
 */
#define SC_GROUP_MAX 65536
typedef uint64_t sc_group_t;
SC_API sc_status_t sc_group_begin(sc_client_t *client, int n_members, sc_group_t *group_p);
SC_API sc_status_t sc_group_add(sc_client_t *client, sc_group_t group, sc_tensor_t *tensor);
SC_API sc_status_t sc_group_end(sc_client_t *client, sc_group_t group);

/*
 * Process sets (Horovod's process sets): collectives among a subset of the trainers. Set
 * SC_PROCESS_SET_GLOBAL (0) is every trainer of the job. A tensor registered with
 * sc_tensor_opts_t.process_set runs its operations among the set's members only: its
 * node's local step covers the members on the node, and only nodes with a member take
 * part in the exchange, over their own part of the mesh.
 *
 * In a set, the collectives' ranks are the set's: an allgather concatenates its members'
 * elements in set rank order (ascending global ranks), an alltoall takes and gives one
 * count per member (sc_process_set_size of them, in that order), a reduce-scatter gives
 * set rank k the k-th share of the rows, Adasum's tree takes the members' tensors as its
 * leaves in that order, and an average divides by the set's size; a broadcast's root_rank
 * stays a global rank, which must be a member (else SC_ERR_INVALID naming the set). Every
 * collective runs in any set, whether it holds all or only some trainers of a node (set
 * {0, 2} of 2 nodes x 2 trainers: local rank 0 of each). GPU tensors of a set take
 * the set's own NCCL communicator (made over the set's nodes on its first GPU buffer) or
 * the set's part of the tcp mesh, as the transport key decides for every GPU buffer. A
 * submission of a tensor whose set was removed fails with SC_ERR_ABORTED.
 *
 * sc_process_set_add is collective: every trainer of the job calls it, with the same
 * ranks (any order, no repeats, each 0 to sc_size - 1), in the same order of process set
 * calls. It returns the new set's id (1, 2, ... in the order of additions; ids are not
 * reused) in *id_p on every trainer, members or not. Trainers that give different ranks
 * all fail with SC_ERR_MISMATCH naming the ranks that differ and what each gave; invalid
 * ranks (out of range, repeated, none) or a NULL ranks or id_p fail it on every trainer
 * with SC_ERR_INVALID naming the trainer that gave them; a set with the same ranks as an
 * existing one is SC_ERR_INVALID naming that set. sc_process_set_remove is collective likewise:
 * the set's operations still in flight fail with SC_ERR_ABORTED naming the set, and its tensors
 * must be released (sc_tensor_release) by their trainers. The global set cannot be
 * removed. Both wait at most timeout_ms (< 0: without limit; 0 does not wait, and so
 * almost always times out) for the other trainers. SC_ERR_TIMEOUT,
 * which says so, leaves this trainer's process set calls out of step with the others' (its
 * agreement stays in flight, its buffer registered until the first sc_register after it
 * ended, which releases it; past 16 such buffers at once, until sc_finalize): the job's
 * process sets may then differ between trainers, and the job should end.
 */
#define SC_PROCESS_SET_GLOBAL 0
SC_API sc_status_t sc_process_set_add(sc_client_t *client, const int *ranks, int n_ranks,
				      int timeout_ms, int *id_p);
SC_API sc_status_t sc_process_set_remove(sc_client_t *client, int id, int timeout_ms);
/* The set's size, this trainer's rank in it (-1: not a member), and its members' global
 * ranks, ascending (up to cap of them; returns the count). -1 for an unknown set. */
SC_API int sc_process_set_size(const sc_client_t *client, int id);
SC_API int sc_process_set_rank(const sc_client_t *client, int id);
SC_API int sc_process_set_ranks(const sc_client_t *client, int id, int *ranks, int cap);

/*
 * Barrier: completes once every trainer of the job has entered the same barrier (the n-th
 * barrier of each trainer since it connected). The daemons agree through their
 * coordinator; no tensor is involved and nothing travels on the data plane. The handle is
 * waited for with sc_poll / sc_wait like an allreduce's, and a trainer holds one barrier
 * at most: until that handle is collected (sc_wait or sc_poll giving its result), even if
 * it has already completed, another sc_barrier_async fails with SC_ERR_BUSY. Ends with
 * SC_ERR_STALLED naming the ranks that did not enter within the daemons' stall_timeout_ms, and
 * with SC_ERR_ABORTED on every rank when a trainer of the job exited or, at once, when a
 * trainer that has not entered it has joined (a joined trainer's own barrier is
 * SC_ERR_INVALID: from the daemon, or at once from the library while the trainer holds a
 * join it has not collected, even one the daemons have already ended).
 */
SC_API sc_status_t sc_barrier_async(sc_client_t *client, sc_handle_t *handle_p);
/* sc_barrier_async followed by sc_wait (timeout_ms as sc_wait's); a barrier that timed
 * out is abandoned (sc_abandon). */
SC_API sc_status_t sc_barrier(sc_client_t *client, int timeout_ms);

/*
 * Join, for uneven inputs: this trainer has no more data. Until every trainer of the job
 * has joined, it submits nothing (an allreduce fails with SC_ERR_INVALID) and takes part
 * in the other trainers' operations with zeros: a sum or average lacks its share (the
 * average still divides by every trainer), an allgather gets no rows from it, a min,
 * max or product sees zeros, and a broadcast from it as root fails on every rank with
 * SC_ERR_INVALID naming it (it has no values to give). Once the last trainer has joined, every
 * join completes and sc_join_result gives the last rank to join. sc_join_result is sc_wait for
 * a join's handle (sc_wait works too, without the rank). A trainer that exits while joined ends
 * every join with SC_ERR_ABORTED through its node becoming degraded, and so, at once, does
 * a trainer that ends its session (sc_finalize, or exits) without having joined: it can
 * never join now.
 */
/* A second join before every trainer has joined is SC_ERR_BUSY ("already joined"). */
SC_API sc_status_t sc_join_async(sc_client_t *client, sc_handle_t *handle_p);
SC_API sc_status_t sc_join_result(sc_client_t *client, sc_handle_t handle, int timeout_ms,
				  int *last_rank_p);
/* sc_join_async followed by sc_join_result. A join that timed out stays outstanding (the
 * trainer is still joined): the next sc_join collects it, done or not, instead of
 * starting another, and so does sc_join while a join of sc_join_async is not collected. */
SC_API sc_status_t sc_join(sc_client_t *client, int timeout_ms, int *last_rank_p);

/* What the node's daemon measured for a tensor (sc_tensor_stats). */
typedef struct sc_tensor_stats {
	uint32_t struct_size; /* set to sizeof(sc_tensor_stats_t) before the call (an older
				 header's smaller size: only its fields are written; a
				 size over this library's is SC_ERR_INVALID) */
	uint64_t calls, errors;
	uint64_t bytes_sent, bytes_received; /* this node, all calls (fused buffers by share) */
	double time_s;			     /* data-plane time, all calls */
	char scheme[32];		     /* scheme of the last call */
	double predicted_s, measured_s;	     /* cost model vs wall time, last call */
	double density, densification, imbalance; /* last call */
	double exchange_s; /* of measured_s, inside the scheme's exchanges (on the wire or
			      waiting for peers); the rest is this node's own work */
	double cpu_s;	   /* CPU time the daemon's data plane spent on the last call (at
			      most measured_s: waits excluded) */
	char wire[24];	   /* its wire format (sc_wire_name); "fp16 as fp32 (nccl)" when the
			      last call's buffer kept 32 bits over NCCL */
} sc_tensor_stats_t;

/* Asks the daemon for the tensor's statistics (as `sparsectl stats` shows them): those of
 * this tensor, in its process set (the same name in another set is another tensor). */
SC_API sc_status_t sc_tensor_stats(sc_client_t *client, const sc_tensor_t *tensor,
				   sc_tensor_stats_t *stats_p);

/*
 * The text of the calling thread's last error, e.g. "allreduce of tensor 'fc.w' failed:
 * element count differs across ranks: rank 0 has 100, rank 2 has 99". Empty when the
 * thread has seen no error. Valid until the thread's next call into the library.
 */
SC_API const char *sc_last_error(void);

/* Optional: receive the library's diagnostic lines (level 0 error .. 3 debug). */
typedef void (*sc_log_cb)(int level, const char *line, void *arg);
SC_API void sc_set_log_callback(sc_log_cb cb, void *arg);

/*
 * Disconnects: operations still in flight are abandoned (the other trainers' matching
 * operations fail with an error naming this rank), shared buffers are unmapped, and the
 * client and its tensors are freed. NULL is accepted; SC_OK, or SC_ERR_INVALID when the
 * client is already being finalized by another thread.
 *
 * Other threads may be inside the library on the same client when sc_finalize is called
 * (in sc_wait, sc_poll, an asynchronous start, a registration, a barrier): each such call
 * either completes or returns SC_ERR_SHUTDOWN with the error text saying the client was
 * finalized, and a wait (even one without a time limit) or a request waiting for the
 * daemon ends at once. A call that begins once sc_finalize has begun is refused the same
 * way. sc_finalize's own waits are bounded: at most 2 s for requests stuck on a daemon
 * that reads nothing (the channel is then shut down, ending them), at most 2 s for the
 * calls inside to leave, at most 1 s for its goodbye to flush. A call still inside after
 * that (a GPU synchronisation, say) frees the client as it leaves. The tensors, their
 * buffers and what the tensor accessors returned are valid until sc_finalize begins: the
 * calls that take a tensor and no client (sc_tensor_*, such as sc_tensor_set_stream and
 * sc_tensor_result_nnz) must not overlap it. A log callback (sc_set_log_callback) may be
 * called with the client's lock held: it must not block, nor call into the library.
 * A call made after sc_finalize has returned uses a freed client, as after free(3): the
 * library keeps the structure of the last 16 finalized clients so that such a call is
 * refused with SC_ERR_SHUTDOWN rather than touching freed memory, but a program must not
 * rely on it.
 */
SC_API sc_status_t sc_finalize(sc_client_t *client);

#ifdef __cplusplus
}
#endif
#endif /* SPARSECOMM_H */
