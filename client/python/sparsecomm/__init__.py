"""sparsecomm: synchronise tensors across training processes through sparsecommd.

A ctypes binding of libsparseclient (client/include/sparsecomm.h); nothing is compiled
beyond the C library.  Horovod-style API::

    import sparsecomm
    sparsecomm.init()                        # $SPARSECOMM_SOCKET, set by sparsecomm-run
    avg = sparsecomm.allreduce(t, name="w")  # torch tensor or numpy array; a new result
    h = sparsecomm.allreduce_async(t, name="w", sparsifier="topk", density=0.01)
    out = h.wait(timeout=60)
    sparsecomm.shutdown()

Design.  Every name is registered with the daemon at its first use (sc_register_ex); the daemon
creates a shared-memory buffer of the tensor's size which this module wraps as a numpy
array and, when torch is in use, as a torch tensor sharing that memory (no copy).  An
allreduce copies the input into that buffer (one strided copy, converting the dtype when
needed), starts the operation, and on completion copies the result out (one copy: the
buffer is reused by the next step, so a result cannot stay a view of it).  A call that
gives a name a new shape or dtype (Horovod negotiates every call, so variable lengths are
everyday input) re-registers it on the fly: the old registration is released
(sc_tensor_release: the daemon unlinks its shared memory; the negotiation keeps the name's
earlier forms) and the name registered anew; a steady shape keeps
its buffer.  Registration options (sparsifier, density, ...) are fixed by the first call
for a name; a later call with different options is refused rather than silently ignored.
A float16 or bfloat16 torch tensor travels in the float32 buffer of its name with its own
16-bit wire; the registration names the tensor's element type (sc_src_type_t, as for int8,
uint8, int16 and bool tensors in int32 buffers), so ranks that give one name tensors of
different dtypes fail on every rank with SC_ERR_MISMATCH naming both dtypes, as Horovod's,
however one buffer dtype carries them (a register()ed name too); a call that gives a name
another dtype or wire registers it anew, as a new shape does (sparsecomm.torch's fp16 and
bf16 compression reduce a float32 tensor as a float16 or bfloat16 one: allreduce_async's
``_as_dtype``).  An allreduce asking for a 16-bit wire (``wire=``) uses a buffer of its
own, the name with "@fp16" or "@bf16" appended, unless the name itself was registered with
that wire by :func:`register`.  A name that already ends so (then any number of "@") is
registered with one "@" more (_own_name), so that it never shares that buffer.
Names have no bound here, as Horovod's have none: one past the 255 bytes a daemon takes
(or one of 252 to 255 bytes that ends as such a name does, '#' and 32 hex digits) is known
to the daemons by its first bytes, '#' and a digest of the whole name (_daemon_name),
which their messages then show.

Unnamed operations (no ``name=``, or an empty one, as Horovod code often allreduces its loss every step)
reuse buffers instead of registering a new one per call.  They are grouped in classes by
kind (allreduce, broadcast, allgather, alltoall or reducescatter; the package's own
exchanges, an allgather's sizes among them, have kinds of their own), options and COO
capacity; class C is numbered in the order its first call came.  A call takes the
lowest-numbered buffer S of its class that is free (registered anew when the call's
element count or dtype is not the buffer's: ranks whose unnamed tensors differ in shape
or dtype then meet under one name and fail at once as a mismatch, where buffers per
shape or dtype would never meet),
registering buffer ``<kind>.noname.C.S`` when none is (a named operation given such a
name is refused with SC_ERR_BUSY, whichever came first): a buffer is busy from the call
until its handle is waited for (wait() returns or raises other than on timeout) or, once
poll() has said it is done, dropped; poll() alone does not free it, since when it first
says so differs from rank to rank.  So ranks that make the same calls, and wait for them
in the same places, use the same names (a synchronous ``allreduce(loss)`` per step always gets ``allreduce.noname.0.0``),
no buffer an operation still uses is handed out, and a class holds at most as many
buffers as it ever had operations outstanding at once.  What stays registered is one
buffer per class (and per extra concurrent operation), for at most the 32 classes last
used ($SPARSECOMM_PY_UNNAMED_CLASSES): a new class past those releases the buffers of the
least recently used class with nothing in flight, so unnamed tensors of ever new shapes
keep a bounded number of registrations (handles dropped without being waited for keep
theirs; name those).

Named registrations stay bounded too.  Every distinct ``name=`` (Horovod code names calls
freely: ``allreduce(x, name=f"loss.{step}")``, an allgather's or alltoall's buffers per
capacity, grouped members) registers a buffer, and a node holds at most the daemon's
max_registrations for all its trainers together, and /dev/shm only so many bytes.  So the
names a collective registered are kept in least-recently-used order (each call of a name
moves it to the end), and the least recently used *idle* ones are released (the unnamed
classes' rule: an entry with an operation in flight, or whose last handle was neither
waited for nor dropped, is never released, nor a GPU buffer with a copy out of it still
queued):
 - past $SPARSECOMM_PY_NAMED_MAX of them (8192 by default), one for each new name: a
   model reduced name by name, a parameter a name (several thousand at most for large
   models, each used every step), stays under it, while a name per step is let go
   thousands of steps later; the node's max_registrations (16384 by default) bounds what
   every trainer of the node holds together, which the next rule covers;
 - when a registration fails for room (SC_ERR_LIMIT: the node's max_registrations or the
   kernel's mapping bound; SC_ERR_NOMEM: /dev/shm full), a batch of them, an eighth of
   those held and at least 16, then the registration is tried once more; with none to
   release, the error is raised as before, naming the tensor.
Kept, never released for room, and not counted: names registered by :func:`register`,
and the buffers of sparsecomm.torch's DistributedOptimizer and DDP hook (registered
inside ``_lru.keeping()``), since each parameter is reduced every step and releasing it
would register it again at the next; a kept name registered anew for a new shape or dtype
stays kept.  A released name used again is registered again
(one registration, as a new shape costs).  Ranks need not release alike: a name a node let
go and registers again takes up its negotiation where it was (every daemon keeps the
name's cached forms and its buffers' state, whichever nodes hold it), while nodes that
kept it go on; a trainer
that released a name which another trainer of its node kept may give it a new shape
later (the daemon remembers the release, and the registration waits for the other
trainer's, as any new shape does).  The rule's code is sparsecomm._lru.

Natively sparse torch tensors (sparse COO, e.g. the gradient of nn.Embedding(sparse=True))
take the COO path: the tensor is coalesced, its rows are expanded into flat element
indices written straight into the daemon's COO index area, its values into the COO value
area, and sc_allreduce_coo_sparse_async reduces them; nothing is densified on the Python
side.  The daemon hands the sum back sparse, in the same COO area (every index some rank
contributed, ascending), and it becomes a coalesced sparse COO tensor of the input's shape
(so optimizers that expect sparse gradients keep working) without any pass over the whole
table.  When the union does not fit coo_capacity, or the node runs several trainers of
the tensor, the sum comes back dense and is re-sparsified by its non-zero rows (a row
whose sum is exactly zero is then dropped, which changes nothing for SGD-like updates).
``sparse_as_dense=True`` returns the dense sum instead.

CUDA tensors (torch tensors whose ``device`` is cuda, or names registered with
``register(..., device="cuda:N")``) live in the daemon's GPU memory, mapped into this
process with CUDA IPC: an allreduce copies the input into that buffer on the tensor's
current stream, makes the submission wait for that stream (sc_tensor_set_stream), and the
result is queued back on the same stream (sc_stream_wait, then a copy on the stream), so
the host never waits for the GPU.  The library needs the CUDA driver for them
(libcuda.so.1, or $SPARSECOMM_CUDA_DRIVER).

Sparse CUDA tensors take the COO path on their GPU, with torch ops on the tensor's
current stream: coalesced there, their rows expanded into flat element indices (the
daemon's uint32, written through an int32 view) and copied with the values into the
daemon's GPU COO area.  A sparse result is rebuilt on the GPU from that area, on the same
stream after sc_stream_wait: the rows holding an index become the coalesced sparse
tensor, partial rows filled with zeros.  Two steps read a count back from the GPU, and so
wait for the stream: coalescing the input (torch's own) and finding the result's row
count; a dense result is re-sparsified on the GPU as on the CPU.

Errors from the library or the daemon raise :class:`SparsecommError`, carrying the
status name (``SC_ERR_PEER``, ...) and the library's error text (sc_last_error), which
names the rank(s) and tensor involved.

Process sets (Horovod's ProcessSet, init(process_sets=...), add_process_set, and
``process_set=`` on every collective) are described in sparsecomm.process_sets; the
collectives other than allreduce are in sparsecomm._colls.

Waits are bounded: every wait takes a timeout (default: the ``timeout`` given to
:func:`init`, 300 s, or $SPARSECOMM_PY_TIMEOUT_S) and is done in slices of at most half a
second so that Ctrl-C reaches Python; the library call itself blocks without holding the
GIL and returns as soon as the operation completes.
"""

import atexit
import collections
import contextlib
import ctypes
import hashlib
import math
import os
import sys
import threading
import time
import warnings

import numpy as np

from . import _lib
from ._lib import DeviceKind, DType, ReduceOp, Sparsifier, Wire, STATUS_NAMES
from ._system import (  # noqa: F401  (Horovod's build queries and timeline)
    ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rocm_built, start_timeline, stop_timeline)

# Horovod's names of the reductions (hvd.Sum, hvd.Average, ...), with its integers (ReduceOp).
Sum, Average, Min, Max, Product, Adasum = (ReduceOp.SUM, ReduceOp.AVERAGE, ReduceOp.MIN,
                                           ReduceOp.MAX, ReduceOp.PRODUCT, ReduceOp.ADASUM)

__all__ = [
    "SparsecommError", "HorovodInternalError", "Handle", "DType", "DeviceKind", "ReduceOp",
    "Sparsifier",
    "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "NotInitializedError",
    "DuplicateNameError", "SplitsError",
    "register", "ProcessSet", "ProcessSetError", "global_process_set", "add_process_set",
    "remove_process_set", "process_set_by_id",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "allreduce_coo", "allreduce_coo_async", "broadcast", "broadcast_async", "broadcast_",
    "broadcast_async_", "broadcast_object", "allgather", "allgather_object", "alltoall",
    "alltoall_async", "reducescatter", "reducescatter_async", "allgather_async", "barrier",
    "join", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
    "gloo_enabled", "nccl_built", "ccl_built", "ddl_built", "cuda_built", "rocm_built",
    "start_timeline", "stop_timeline",
    "registered", "library_path", "status_name",
]

_WAIT_SLICE_MS = 500
# unnamed classes (shapes) kept registered; past this, the least recently used goes
_UNNAMED_CLASSES = int(os.environ.get("SPARSECOMM_PY_UNNAMED_CLASSES", "32"))
# names registered by the collectives' name= kept registered; past this, the least recently
# used with nothing in flight goes (the module doc: "Named registrations stay bounded")
_NAMED_MAX = max(1, int(os.environ.get("SPARSECOMM_PY_NAMED_MAX", "8192")))
_RELEASED_KEPT = 16384  # released names remembered (a registration of one may wait)
_DEFAULT_TIMEOUT_S = float(os.environ.get("SPARSECOMM_PY_TIMEOUT_S", "300"))


class HorovodInternalError(RuntimeError):
    """Horovod's exception for a failed collective (horovod.common.exceptions), the base
    of :class:`SparsecommError`: ``except hvd.HorovodInternalError`` catches what
    Horovod's would."""


class SparsecommError(HorovodInternalError):
    """An operation failed.  ``status`` is the sc_status_t value, ``status_name`` its name
    ("SC_ERR_PEER"), ``message`` the library's text, ``tensor`` the tensor name if any."""

    def __init__(self, status, message, tensor=None):
        self.status = int(status)
        self.status_name = status_name(status)
        self.message = message
        self.tensor = tensor
        super().__init__("%s: %s" % (self.status_name, message))


class NotInitializedError(SparsecommError, ValueError):
    """A call before :func:`init` (or after :func:`shutdown`): a ValueError as Horovod's
    ("has not been initialized; use hvd.init()"), and a SparsecommError (SC_ERR_INVALID)."""

    def __init__(self):
        super().__init__(_lib.SC_ERR_INVALID, "sparsecomm has not been initialized; use "
                         "hvd.init() (sparsecomm.init())")


class DuplicateNameError(SparsecommError, ValueError):
    """A named tensor's operation started while its previous one is still in flight
    (SC_ERR_BUSY): a ValueError as Horovod's duplicate name in flight, raised where the
    call is made, before anything is submitted."""

    def __init__(self, message, tensor):
        super().__init__(_lib.SC_ERR_BUSY, message, tensor)


def status_name(status):
    """"SC_ERR_TIMEOUT" for -6; from the library when it is loaded, else from the mirror."""
    if _lib._lib is not None:
        return _lib._lib.sc_status_name(int(status)).decode()
    return STATUS_NAMES.get(int(status), "SC_UNKNOWN_STATUS")


def _error(st, what, tensor=None):
    """Builds the exception for status st right after the failing call (same thread)."""
    lib = _lib.load()
    text = (lib.sc_last_error() or b"").decode("utf-8", "replace").strip()
    if not text:
        text = "%s failed: %s" % (what, lib.sc_status_message(int(st)).decode())
    elif tensor is not None and tensor not in text:
        text = "%s: %s" % (what, text)
    return SparsecommError(st, text, tensor)


# ---- tensor kinds: torch tensors and numpy arrays -----------------------------------

def _torch():
    return sys.modules.get("torch")


def _view(make):
    """make(), a torch tensor over one of the library's buffers, made outside
    torch.inference_mode even when called inside it: the view is kept and reused by the
    calls that follow, and an inference tensor could not be written to outside that
    mode (a name first reduced in an evaluation under inference_mode would fail every
    later training step's call)."""
    mode = getattr(_torch(), "inference_mode", None)
    if mode is None:
        return make()
    with mode(False):
        return make()


def _is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


# dtype of the data -> dtype it travels as (sparsecomm carries 4 types; others convert)
_monotonic = time.monotonic
_torch_dtypes = None  # torch dtype -> DType, built at the first torch tensor


def _sc_dtype(x):
    global _torch_dtypes
    if _is_torch(x):
        table = _torch_dtypes
        if table is None:
            t = _torch()
            table = _torch_dtypes = {
                t.float32: DType.FLOAT32, t.float64: DType.FLOAT64, t.int32: DType.INT32,
                t.int64: DType.INT64, t.float16: DType.FLOAT32, t.bfloat16: DType.FLOAT32,
                t.int8: DType.INT32, t.uint8: DType.INT32, t.int16: DType.INT32,
                t.bool: DType.INT32}
        if x.dtype not in table:
            raise TypeError("sparsecomm: unsupported torch dtype %s" % x.dtype)
        return table[x.dtype]
    a = np.asarray(x)
    carrier = _NUMPY_CARRIERS.get(a.dtype.name)
    if carrier is None:
        raise TypeError("sparsecomm: unsupported numpy dtype %s (supported: %s)" %
                        (a.dtype, ", ".join(_NUMPY_CARRIERS)))
    return carrier


# numpy dtype -> the dtype it travels as: only those a carrier holds exactly, as Horovod's
# types (a long double would lose its precision in float64, and uint32 and uint64 values
# past the signed range would be averaged and compared as negative ones)
_NUMPY_CARRIERS = {"float32": DType.FLOAT32, "float64": DType.FLOAT64,
                   "int32": DType.INT32, "int64": DType.INT64, "float16": DType.FLOAT32,
                   "int8": DType.INT32, "uint8": DType.INT32, "int16": DType.INT32,
                   "uint16": DType.INT32, "bool": DType.INT32}


# dtype of the data -> its sc_src_type_t where a wider dtype carries it (0: its own), so
# that the ranks' types are compared as Horovod's are (sparsecomm.h, sc_src_type_t)
_torch_srcs = None
_NUMPY_SRCS = {"int8": 1, "uint8": 2, "int16": 3, "uint16": 4, "bool": 6, "float16": 7}


def _src_type(x, dtype=None):
    """The sc_src_type_t of ``x``'s dtype (of the torch ``dtype`` when given): 0 for the
    four dtypes the daemons carry."""
    global _torch_srcs
    if dtype is not None or _is_torch(x):
        if _torch_srcs is None:
            t = _torch()
            _torch_srcs = {t.int8: 1, t.uint8: 2, t.int16: 3, t.bool: 6, t.float16: 7,
                           t.bfloat16: 8}
        return _torch_srcs.get(x.dtype if dtype is None else dtype, 0)
    return _NUMPY_SRCS.get(np.asarray(x).dtype.name, 0)


def _with_src(key, x, dtype=None):
    """key with the element type of ``x`` (or ``dtype``: the one its values are given
    as), a key item compared as a form, not an option (_form)."""
    return key + (("src", _src_type(x, dtype)),)


def _form(key):
    """What of a key is the tensor's form rather than its options: its wire and its
    element type.  A call that changes them registers the name anew, as a new dtype does
    (Horovod's compression and dtype are the call's)."""
    d = dict(key)
    return d.get("wire", "native"), d.get("src", 0)


def _formless(key):
    """key without its form (an unnamed operation's class: the ranks' calls of one class
    meet in one buffer whatever their wire or element type, so that a difference fails as
    a mismatch)."""
    return tuple(kv for kv in key if kv[0] not in ("wire", "src"))


class _Entry:
    """A registered tensor: its C handle and zero-copy views of its shared buffers."""

    def __init__(self, name, ptr, dtype, numel, opts_key, coo_capacity, device=None, pset=0):
        lib = _lib.load()
        self.name = name
        self.pset = pset  # the process set it runs in (0: every trainer)
        self.orphan = False  # its set was removed while it was in flight: released at the end
        self.ptr = ptr
        self.dtype = dtype
        self.numel = numel
        self.opts_key = opts_key
        self.coo_capacity = coo_capacity
        self.device = device or (DeviceKind.CPU, 0)
        self.inflight = False
        self.shape = ()  # the shape its allreduces give the daemons (): none
        self.unnamed = False  # a slot of an unnamed class: free once its handle is waited
        self.kept = False  # never released for room (register(), an optimizer's gradient)
        self.fixed = False  # registered by register(): its wire is the name's
        self.open = None  # the token of its last Handle until waited for or dropped
        self.data = self.coo_idx = self.coo_val = None
        self._tdata = self._tval = self._tcoo = None
        if self.device[0] == DeviceKind.CUDA:
            return  # device pointers: only tdata() wraps them
        ct = _lib.DTYPE_CTYPES[dtype]
        self.data = np.ctypeslib.as_array((ct * numel).from_address(lib.sc_tensor_data(ptr)))
        if coo_capacity:
            ip, vp = lib.sc_tensor_coo_indices(ptr), lib.sc_tensor_coo_values(ptr)
            if not ip or not vp:
                raise SparsecommError(_lib.SC_ERR_PROTOCOL,
                                      "tensor '%s' was registered with coo_capacity=%d but "
                                      "the library gives no COO area" % (name, coo_capacity),
                                      name)
            self.coo_idx = np.ctypeslib.as_array((ctypes.c_uint32 * coo_capacity)
                                                 .from_address(ip))
            self.coo_val = np.ctypeslib.as_array((ct * coo_capacity).from_address(vp))

    @property
    def cuda(self):
        return self.device[0] == DeviceKind.CUDA

    @property
    def key(self):
        return _key(self.name, self.pset)

    def tdata(self):
        """The data buffer as a torch tensor sharing its memory (on the GPU for a cuda
        tensor)."""
        if self._tdata is None:
            if self.cuda:
                self._tdata = self._cuda_view(_lib.load().sc_tensor_data(self.ptr),
                                              self.numel, self.dtype)
            else:
                self._tdata = _view(lambda: _torch().from_numpy(self.data))
        return self._tdata

    def tcoo(self):
        """A cuda tensor's COO area as torch tensors on its GPU sharing its memory: the
        indices (uint32 in the daemon) seen as int32, and the values."""
        if self._tcoo is None:
            lib = _lib.load()
            ip, vp = lib.sc_tensor_coo_indices(self.ptr), lib.sc_tensor_coo_values(self.ptr)
            if not self.coo_capacity or not ip or not vp:
                raise SparsecommError(_lib.SC_ERR_PROTOCOL,
                                      "tensor '%s' (%s, coo_capacity=%d) has no COO area "
                                      "in the library" % (self.name,
                                                          _device_name(self.device),
                                                          self.coo_capacity), self.name)
            self._tcoo = (self._cuda_view(ip, self.coo_capacity, DType.INT32),
                          self._cuda_view(vp, self.coo_capacity, self.dtype))
        return self._tcoo

    def _cuda_view(self, ptr, numel, dtype):
        t = _torch()
        return _view(lambda: t.as_tensor(_CudaArray(ptr, numel, dtype),
                                         device=t.device("cuda", self.device[1])))

    def tval(self):
        if self._tval is None:
            self._tval = _view(lambda: _torch().from_numpy(self.coo_val))
        return self._tval


class _CudaArray:
    """A device pointer of this process as the CUDA array interface describes it, for
    torch.as_tensor to wrap without a copy.  No stream is named: the buffer's users order
    themselves (the submission waits on the writer's stream, sc_stream_wait the reader's)."""

    _TYPESTR = {DType.FLOAT32: "<f4", DType.FLOAT64: "<f8", DType.INT32: "<i4",
                DType.INT64: "<i8"}

    def __init__(self, ptr, numel, dtype):
        self.__cuda_array_interface__ = {"shape": (int(numel),), "typestr":
                                         self._TYPESTR[dtype], "data": (int(ptr), False),
                                         "strides": None, "version": 2}


class _Context:
    def __init__(self, client, timeout_s):
        lib = _lib.load()
        self.client = client
        self.rank = lib.sc_rank(client)
        self.size = lib.sc_size(client)
        self.local_rank = lib.sc_local_rank(client)
        self.local_size = lib.sc_local_size(client)
        self.timeout_s = timeout_s
        self.entries = {}
        self.lock = threading.Lock()
        self.unnamed = {}  # class (kind, dtype, numel, options, coo) -> [_Entry] (slots)
        self.unnamed_ids = {}  # class -> its number, in order of first use
        self.unnamed_next = {}  # process set -> the number of its next new class
        self.unnamed_used = {}  # class -> unnamed_calls at its last use (LRU eviction)
        self.unnamed_calls = 0
        # keys released and not registered again, oldest first (a bounded record: a
        # registration of one of them that the daemon answers SC_ERR_BUSY is retried)
        self.released = collections.OrderedDict()
        # the named registrations that may be released for room, least recently used first
        self.named = collections.OrderedDict()
        self.closed = False
        self.psets = {0: list(range(self.size))}  # added process sets: id -> global ranks
        self.dynamic = False  # init(process_sets="dynamic")


def _key(name, pset):
    """The key of a registration: its name in the global set, (name, set id) in another
    (a name is a name within its set)."""
    return name if not pset else (name, pset)


_ctx = None
_ctx_lock = threading.Lock()


def init(socket=None, timeout=None, connect_timeout=30.0, process_sets=None, comm=None):
    """Connects to the node's daemon (``socket``: its control socket path or ZeroMQ
    endpoint; default $SPARSECOMM_SOCKET, else the library's default: ctl.sock in this
    user's own daemon's runtime directory when it exists, else /run/sparsecomm/ctl.sock).
    Under mpirun, srun or torchrun with no daemon serving the node, the job's own daemon is
    started for the node (docs/deployment.md, "Under a scheduler"); a process started alone
    (``python3 train.py``) is then a job of one, as Horovod's (its "Started alone").  ``timeout`` (seconds)
    is the default bound of every wait.  ``process_sets``: Horovod's, a list of ProcessSet
    (or of rank lists) added in order once connected, every trainer giving the same list,
    or "dynamic" (sets are added later with add_process_set); see
    sparsecomm.process_sets.  A set refused there raises its error, disconnected.
    ``comm``: Horovod's (also taken as the first argument, Horovod's place for it): the
    global set is the job's every trainer, so a list of ranks must be all of them in
    order, and an mpi4py communicator must have this trainer's rank and the job's size;
    a smaller set raises ValueError, disconnected, naming process_sets as the way to run
    a collective among some ranks (see _check_comm).  Calling it again is a no-op."""
    paths = (str, bytes, os.PathLike)
    if comm is None and socket is not None and not isinstance(socket, paths):
        socket, comm = None, socket  # hvd.init([0, 1]) or hvd.init(MPI.COMM_WORLD)
    with _ctx_lock:
        if _ctx is not None:
            return
        c = _connect(socket, timeout, connect_timeout)
    try:
        _check_comm(c, comm)
        process_sets_.setup(c, process_sets)
    except BaseException:
        shutdown()
        raise


def _check_comm(c, comm):
    """Horovod's init(comm=): a list of ranks (relative to the whole job) or an mpi4py
    communicator that becomes the global set.  Here the daemons' world is the global set,
    every trainer the launcher or scheduler started, so the only such set is the whole
    job, each trainer keeping its rank: anything else raises ValueError on every trainer
    alike (each gives the same list, and each is in the job; a communicator of the job's
    size, whose ranks may differ on some trainers only, is agreed on through its
    allgather)."""
    if comm is None:
        return
    if hasattr(comm, "Get_size") and hasattr(comm, "Get_rank"):  # mpi4py's MPI.Comm
        got = (comm.Get_rank(), comm.Get_size())
        ok = got == (c.rank, c.size)
        if got[1] == c.size and hasattr(comm, "allgather"):
            # a communicator of the job's size holds every trainer, and its ranks may be
            # in another order: the trainers agree through it, so that every one refuses
            # it, not only those whose rank differs (the others would wait for them)
            ok = all(comm.allgather(ok))
        if not ok:
            raise ValueError(
                "init(comm=...): the communicator has rank %d of %d, but %s the job's "
                "%d; the global set here is the whole job (run a smaller job, or use "
                "process_sets=[ProcessSet(ranks)] and process_set= on the collectives)"
                % (got + ("this trainer is rank %d of" % c.rank if got[0] != c.rank else
                          "another trainer's differs from its rank among",
                          c.size)))
        return
    try:
        ranks = [int(r) for r in comm]
    except (TypeError, ValueError):
        raise ValueError("init(comm=...) takes a list of ranks or an mpi4py.MPI.Comm, not "
                         "%r" % (comm,)) from None
    if ranks and ranks != list(range(c.size)):
        raise ValueError(
            "init(comm=%s): a global set other than the whole job (ranks 0 to %d, in "
            "order) is not supported here: every trainer started is in it; start a job of "
            "those trainers, or use process_sets=[ProcessSet(%s)] and process_set= on the "
            "collectives" % (ranks, c.size - 1, ranks))


def _connect(socket, timeout, connect_timeout):
    """sc_connect; the new context (called holding _ctx_lock)."""
    global _ctx
    lib = _lib.load()
    cp = _lib.c_client_p()
    path = None if socket is None else os.fsencode(socket)
    st = lib.sc_connect(path, int(connect_timeout * 1000), ctypes.byref(cp))
    if st != _lib.SC_OK:
        raise _error(st, "connecting to the daemon at %s" %
                     (socket or os.environ.get("SPARSECOMM_SOCKET",
                                               "the default socket")))
    _ctx = _Context(cp, _DEFAULT_TIMEOUT_S if timeout is None else float(timeout))
    return _ctx


def _need():
    c = _ctx
    if c is None:
        raise NotInitializedError()
    return c


def is_initialized():
    return _ctx is not None


from . import process_sets as process_sets_  # noqa: E402  (it uses the names above)
from .process_sets import (  # noqa: E402,F401  (Horovod's names)
    ProcessSet, ProcessSetError, add_process_set, global_process_set, process_set_by_id,
    remove_process_set)


def shutdown():
    """Disconnects (sc_finalize).  Operations in flight are abandoned; the other ranks'
    matching operations fail with an error naming this rank."""
    global _ctx
    with _ctx_lock:
        c, _ctx = _ctx, None
        if c is None:
            return
        process_sets_.forget(c)
        with c.lock:
            c.closed = True
            for e in c.entries.values():  # the views die with the mappings
                e.data = e.coo_idx = e.coo_val = e._tdata = e._tval = e._tcoo = None
            c.entries.clear()
            c.named.clear()
        _lib.load().sc_finalize(c.client)


atexit.register(shutdown)


def rank():
    return _need().rank


def size():
    return _need().size


def local_rank():
    return _need().local_rank


def local_size():
    return _need().local_size


def cross_rank():
    """Horovod's cross_rank: the rank of this trainer's node.  Every node runs the same
    number of trainers, numbered node-major (docs/deployment.md), so it is
    rank() // local_size()."""
    c = _need()
    return c.rank // c.local_size


def cross_size():
    """Horovod's cross_size: the number of nodes, size() // local_size()."""
    c = _need()
    return c.size // c.local_size


def is_homogeneous():
    """Horovod's is_homogeneous: True, every node runs the same number of trainers."""
    _need()
    return True


def library_path():
    return _lib.library_path()


def registered():
    """Names registered so far, with their dtype, element count, options and process set
    (keyed by name in the global set, by (name, set id) in another)."""
    c = _need()
    with c.lock:
        return {n: dict(dtype=e.dtype.name.lower(), numel=e.numel,
                        coo_capacity=e.coo_capacity, device=_device_name(e.device),
                        process_set=e.pset, **dict(e.opts_key))
                for n, e in c.entries.items()}


def residual(name, process_set=None):
    """What the daemon has not yet sent of this node's part of the registered tensor
    ``name`` (its error-feedback residual, float32, of the tensor's element count), as a
    torch tensor sharing the daemon's memory (on the GPU for a cuda tensor; read it after
    the operation completed: the daemon writes it at each step), or None when the tensor
    keeps none (lossless and not sparsified).  The residual belongs to the node: local
    rank 0 reads it, the node's other trainers read zeros (sc_tensor_residual).
    ``process_set``: the set the tensor was registered in (default the job's)."""
    c = _need()
    name = _own_name(str(name))
    pset = process_sets_.scope(c, process_set, "residual", name).id
    with c.lock:
        e = c.entries.get(_key(name, pset))
    if e is None:
        raise KeyError("sparsecomm: no tensor '%s' is registered" % name)
    p = _lib.load().sc_tensor_residual(e.ptr)
    if not p:
        return None
    if e.cuda:
        return e._cuda_view(p, e.numel, DType.FLOAT32)
    return _torch().from_numpy(np.ctypeslib.as_array((ctypes.c_float * e.numel)
                                                     .from_address(p)))


def _device_name(device):
    kind, ordinal = device
    return "cuda:%d" % ordinal if kind == DeviceKind.CUDA else "cpu"



# ---- registration ------------------------------------------------------------------

def _opts_key(sparsifier, density, threshold, scheme, allow_lossy, wire=None, block=0):
    """The options of a registration as a hashable key (memoized: every submission
    computes it)."""
    args = (sparsifier, density, threshold, scheme, allow_lossy, wire, block)
    # kept by each argument's exact type and value: 1, True, 1.0 and Sparsifier.TOPK are
    # equal keys to a dict but not the same argument (the parsers refuse some of them),
    # and an object of another type (a tensor, a numpy scalar) may change or be refused
    if not all(type(a) in _MEMO_TYPES for a in args):
        return _opts_key_of(*args)
    memo = tuple((type(a), a) for a in args)
    key = _opts_keys.get(memo)
    if key is None:
        key = _opts_key_of(*args)
        if len(_opts_keys) >= 4096:
            _opts_keys.clear()
        _opts_keys[memo] = key
    return key


_MEMO_TYPES = frozenset((str, int, float, bool, type(None), Sparsifier, Wire))
_opts_keys = {}


def _opts_key_of(sparsifier, density, threshold, scheme, allow_lossy, wire, block):
    sp = Sparsifier.parse(sparsifier)
    return (("sparsifier", sp.name.lower()), ("density", float(density or 0.0)),
            ("threshold", float(threshold or 0.0)), ("scheme", scheme or None),
            ("allow_lossy", bool(allow_lossy)), ("block", int(block or 0)),
            ("wire", Wire.parse(wire).name.lower()))


def _block(x, block, sparsifier, scheme):
    """The block of a tensor's options: the one given, else, where a block is used (the
    block top-K sparsifier, a pinned S2 sketch), a 2-D tensor's rows (its last dimension:
    S2 Reducer's blocks are word vectors), else 0 (256)."""
    if block is not None:
        return int(block)
    shape = getattr(x, "shape", None)
    if (shape is not None and len(shape) == 2 and
            (Sparsifier.parse(sparsifier) == Sparsifier.BLOCK_TOPK or scheme == "s2_sketch")):
        return int(shape[-1])
    return 0


def _auto_wire(x, wire, key, kind, coo_capacity, dtype=None):
    """The wire format of a dense tensor's buffer: the one asked for, else a float16 or
    bfloat16 torch tensor's own (it is carried in a float32 buffer, and its sums travel
    in its 16 bits) where the daemons convert, that is a dense allreduce with no
    sparsifier, lossy scheme, COO input or pinned scheme other than dense_ring.
    ``dtype``: the torch dtype the values are given as, where not x's."""
    if wire is not None:
        return Wire.parse(wire)
    k = dict(key)
    if (not _is_torch(x) or kind != "allreduce" or coo_capacity or k["allow_lossy"] or
            k["sparsifier"] != "none" or k["scheme"] not in (None, "dense_ring")):
        return Wire.NATIVE
    t = _torch()
    return {t.float16: Wire.FP16, t.bfloat16: Wire.BF16}.get(
        x.dtype if dtype is None else dtype, Wire.NATIVE)


def _wire_name(c, name, wire, pset=0):
    """The buffer of ``name`` for an allreduce asking for ``wire`` (``wire=``, a
    compression): a 16-bit wire has a buffer of its own, named name + "@fp16" or "@bf16",
    so that the wire is chosen per call (Horovod's compression is) and never sticks to
    the name, unless ``name`` itself was registered with that wire (sparsecomm.register).
    A float16 tensor's own wire is its name's (allreduce_async)."""
    if name is None or wire == Wire.NATIVE:
        return name
    e = c.entries.get(_key(name, pset))
    if e is not None and dict(e.opts_key).get("wire") == wire.name.lower():
        return name
    return "%s@%s" % (name, wire.name.lower())


def _entry(c, name, dtype, numel, key, coo_capacity=0, device=None, pset=0, keep=False,
           claim=False):
    """The registered tensor for name in process set pset, registering it on first use
    (past _NAMED_MAX named registrations, the least recently used idle one goes first);
    device: (DeviceKind, ordinal), None for the cpu.  keep: never released for room
    (register(), or inside _lru.keeping()); claim: marked busy before the lock is let go,
    so that nothing releases it between."""
    device = device or (DeviceKind.CPU, 0)
    keep = keep or _lru.keeping_now()
    with c.lock:
        held = c.entries.get(_key(name, pset))
        if held is not None and held.unnamed:
            raise _reserved_error(name)
        if not keep and held is None:
            _lru.named_trim(c)
        # a kept name (register(), an optimizer's gradient) registered anew for a new
        # shape or dtype stays kept
        keep = keep or (held is not None and held.kept)
        e = _entry_locked(c, name, dtype, numel, key, coo_capacity, device, pset)
        _lru.named_use(c, e, keep)
        if claim:
            _claim_locked(e)
        return e


def _reserved_error(name):
    """A name of an unnamed operation's buffer (``<kind>.noname.C.S``) given by a named
    one: refused either way round, since the two would share (or release) one buffer."""
    return SparsecommError(_lib.SC_ERR_BUSY, "tensor name '%s' is reserved for unnamed "
                           "operations but was given explicitly" % name, name)


def _entry_locked(c, name, dtype, numel, key, coo_capacity, device=None, pset=0):
    device = device or (DeviceKind.CPU, 0)
    if c.closed:
        raise SparsecommError(_lib.SC_ERR_SHUTDOWN, "sparsecomm has been shut down")
    e = c.entries.get(_key(name, pset))  # a registered name was checked when registered
    if e is None:
        bad = [ch for ch in name if ord(ch) < 0x20 or ord(ch) == 0x7f]
        if bad:
            # the C string would end at a NUL, and the daemons refuse control bytes
            raise SparsecommError(
                _lib.SC_ERR_INVALID, "tensor name %r holds the control character %r: "
                "names are printable text" % (name, bad[0]), None)
    if (e is not None and device == e.device and
            (e.dtype != dtype or e.numel != numel or
             (key is not None and _form(key) != _form(e.opts_key)))):
        _release_locked(c, e)  # a new shape, dtype, wire or element type: registered anew
        e = None
    if e is not None:
        if key is not None and _formless(key) != _formless(e.opts_key):
            raise SparsecommError(
                _lib.SC_ERR_INVALID,
                "tensor '%s' was registered with options %s, now given %s" %
                (name, dict(e.opts_key), dict(key)), name)
        if coo_capacity and not e.coo_capacity:
            raise SparsecommError(_lib.SC_ERR_INVALID,
                                  "tensor '%s' was registered without COO input" % name,
                                  name)
        if device != e.device:
            raise SparsecommError(
                _lib.SC_ERR_INVALID, "tensor '%s' was registered on %s, now given on %s"
                % (name, _device_name(e.device), _device_name(device)), name)
        return e
    if key is None:
        key = _opts_key(None, 0, 0, None, False)
    k = dict(key)
    o = _lib.TensorOpts()
    o.struct_size = ctypes.sizeof(_lib.TensorOpts)
    o.allow_lossy = int(k["allow_lossy"])
    o.sparsifier = int(Sparsifier[k["sparsifier"].upper()])
    o.density = k["density"]
    o.threshold = k["threshold"]
    o.scheme = k["scheme"].encode() if k["scheme"] else None
    o.coo_capacity = int(coo_capacity)
    o.device, o.device_ordinal = int(device[0]), int(device[1])
    o.wire = int(Wire.parse(k.get("wire")))
    o.block = int(k.get("block", 0))
    o.process_set = int(pset)
    o.src_type = int(k.get("src", 0))
    tp = _lib.c_tensor_p()
    what = "registering tensor '%s'%s" % (name, " in process set %d" % pset if pset else "")
    st = _register_retrying(c, name, _key(name, pset), dtype, numel, o, tp)
    if st in (_lib.SC_ERR_LIMIT, _lib.SC_ERR_NOMEM):
        # no room on the node (max_registrations, the mappings, /dev/shm): a batch of the
        # least recently used named registrations goes, and the registration is tried once
        # more; with none to let go, the error stands
        err = _error(st, what, name)
        if not _lru.named_room(c):
            raise err
        st = _register_retrying(c, name, _key(name, pset), dtype, numel, o, tp)
    if st != _lib.SC_OK:
        raise _error(st, what, name)
    c.released.pop(_key(name, pset), None)
    e = _Entry(name, tp, dtype, int(numel), key, int(coo_capacity), device, pset)
    c.entries[e.key] = e
    return e


def _register_retrying(c, name, key, dtype, numel, o, tp):
    """sc_register_ex; a name whose shape changed may still be held, with its old shape,
    by another trainer of this node that has not reached the call yet (the daemon answers
    SC_ERR_BUSY to a registration that replaces a released one): that is retried until the
    other trainer releases it too, for at most the default wait.  The daemon remembers
    such a release however long ago (the node's let_go) where this process remembers the
    last _RELEASED_KEPT names it let go, so its answer that another trainer still holds
    the name is retried too."""
    lib = _lib.load()
    deadline = _now() + c.timeout_s
    pause = 0.001
    while True:
        st = lib.sc_register_ex(c.client, _daemon_name(name), int(dtype), int(numel),
                                ctypes.byref(o), ctypes.byref(tp))
        if st != _lib.SC_ERR_BUSY or _now() >= deadline:
            return st
        if key not in c.released and b"still holds it" not in (lib.sc_last_error() or b""):
            return st
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


_NAME_MAX_BYTES = 255  # a tensor name's bound in sparsecomm.h


_HEX = frozenset(b"0123456789abcdef")


def _of_digest_form(b):
    """Whether name bytes b have the form _daemon_name gives a long name: 252 to 255 bytes
    (its head loses at most a character's last 3 bytes), '#' and 32 hex digits last."""
    return (_NAME_MAX_BYTES - 3 <= len(b) <= _NAME_MAX_BYTES and b[-33:-32] == b"#" and
            all(c in _HEX for c in b[-32:]))


def _daemon_name(name):
    """The bytes the daemons know ``name`` by: its UTF-8, or, for a name past the 255
    bytes a daemon takes (Horovod's names have no bound: a deeply nested module's
    parameter, a long f-string), its first bytes, '#' and a 128-bit BLAKE2b digest of the
    whole name, the same on every rank.  A name that already has that form is digested
    too, so that it is never taken for the long name whose form it has."""
    b = name.encode()
    if len(b) <= _NAME_MAX_BYTES and not _of_digest_form(b):
        return b
    digest = hashlib.blake2b(b, digest_size=16).hexdigest().encode()
    head = b[:_NAME_MAX_BYTES - 1 - len(digest)].decode(errors="ignore").encode()
    return head + b"#" + digest


def _release_locked(c, e):
    """Releases a registration that is not in use (sc_tensor_release: the daemon unlinks
    its shared memory), so that the name can be
    registered with another shape or dtype.  Horovod negotiates every call, so a name (or
    an unnamed call) may carry a new shape or dtype at any step."""
    if e.inflight:
        raise DuplicateNameError("tensor '%s' already has an operation in flight; its "
                                 "shape or dtype cannot change before it completes" % e.name,
                                 e.name)
    e.data = e.coo_idx = e.coo_val = e._tdata = e._tval = e._tcoo = None
    st = _lib.load().sc_tensor_release(c.client, e.ptr)
    if st != _lib.SC_OK:
        raise _error(st, "releasing tensor '%s'" % e.name, e.name)
    if c.entries.get(e.key) is e:
        del c.entries[e.key]
    if c.named.get(e.key) is e:
        del c.named[e.key]
    c.released.pop(e.key, None)
    c.released[e.key] = True
    if len(c.released) > _RELEASED_KEPT:  # names used once are not remembered forever
        c.released.popitem(last=False)


def _release_done(handle):
    """Releases the registration of a completed operation's named buffer (one used once,
    as broadcast_parameters' and broadcast_object's are), so the daemon keeps no copy;
    one still in flight, unnamed, or registered anew meanwhile is left as it is."""
    c, e = handle._ctx, handle._entry
    if e is None or c.closed:
        return
    with c.lock:
        if not e.inflight and c.entries.get(e.key) is e and not e.unnamed:
            try:  # a clean-up: it must not replace the exception being raised, if any
                _release_locked(c, e)
            except SparsecommError as err:
                warnings.warn("sparsecomm: %s (the registration stays)" % err)


def _forget_set(c, pset):
    """After process set pset was removed: its registrations are released (those in
    flight when their operation ends, see Handle) and its unnamed classes forgotten."""
    with c.lock:
        for e in [e for e in c.entries.values() if e.pset == pset]:
            if e.inflight:
                e.orphan = True
                del c.entries[e.key]
                c.named.pop(e.key, None)
            else:
                _release_locked(c, e)
        for cls in [k for k in c.unnamed if k[-1] == pset]:
            del c.unnamed[cls], c.unnamed_ids[cls], c.unnamed_used[cls]
        c.unnamed_next.pop(pset, None)


def _release_orphan(c, e):
    """Releases a registration whose set was removed while it was in flight, once its
    operation has ended (its error is the operation's; a failed release is not)."""
    with c.lock:
        if e.orphan and not c.closed:
            e.orphan = False
            try:
                _release_locked(c, e)
            except SparsecommError:
                pass


def _acquire(c, name, kind, dtype, numel, key, coo_capacity, device=None, pset=0):
    """The claimed buffer of an operation in process set pset: the named tensor's
    (registered on first use), or, for name None, an unnamed one."""
    if name is None:
        return _lru.unnamed_entry(c, kind, dtype, numel, key, coo_capacity, device, pset)
    return _entry(c, name, dtype, numel, key, coo_capacity, device, pset, claim=True)


def register(name, numel, dtype="float32", device="cpu", sparsifier=None, density=0.0,
             threshold=0.0, scheme=None, allow_lossy=False, coo_capacity=0, wire=None,
             block=0, process_set=None):
    """Registers ``name`` with the daemon now instead of at its first allreduce: ``numel``
    elements of ``dtype`` ("float32", "float64", "int32", "int64" or a DType) on
    ``device`` ("cpu", "cuda", "cuda:N" or a torch.device; a cuda tensor's buffer is in
    the daemon's GPU memory).  Later allreduces of the name must agree with it.  Returns
    what registered() says of it.  A GPU the library cannot use (no CUDA driver, no such
    GPU, a daemon that does not serve GPU tensors) raises SparsecommError
    (SC_ERR_UNSUPPORTED) naming the reason.  ``wire`` ("native", "fp16", "bf16"; a
    float32 tensor without a sparsifier, allow_lossy, COO input or another pinned scheme
    than dense_ring): its sum and average allreduces travel as 16-bit values, summed in
    float32 on arrival (sparsecomm.h, sc_wire_t).  ``block``: elements per block of S2's
    bitmap (where S2 is pinned) and of the "block_topk" sparsifier; 0: 256.
    ``process_set``: the set it runs in (default the job's).  On a node of several
    trainers, register() claims this form for the node: a trainer that registers a form
    which another trainer of its node has already left (an allreduce of the name in
    another dtype or shape) is refused with SC_ERR_MISMATCH, and the name's operations
    fail on every rank; line the trainers up (a barrier) after registering when one of
    them may change the name's form at once."""
    c = _need()
    dt = DType[dtype.upper()] if isinstance(dtype, str) else DType(dtype)
    name = _own_name(str(name))
    pset = process_sets_.scope(c, process_set, "register", name).id
    e = _entry(c, name, dt, int(numel),
               _opts_key(sparsifier, density, threshold, scheme, allow_lossy, wire, block),
               int(coo_capacity or 0), DeviceKind.parse(device), pset, keep=True)
    e.fixed = True
    return registered()[_key(name, pset)]


# ---- handles -----------------------------------------------------------------------

class Handle:
    """An allreduce in flight.  wait() returns its result (or raises SparsecommError);
    poll() says whether it has finished without blocking."""

    def __init__(self, ctx, entry, hid, finish, stream=None, kind="allreduce"):
        self._ctx = ctx
        self._kind = kind  # "allreduce", "broadcast", ...: for error texts
        self._entry = entry
        self._hid = hid
        self._finish = finish  # callable() -> result, run once on success
        self._stream = stream  # a cuda tensor's torch stream: the result is queued on it
        self._done = hid == 0
        self._result = None
        self._exc = None
        self._token = None
        if entry is not None and not self._done:  # not released for room until waited
            self._token = entry.open = object()
        if self._done:
            self._result = finish()

    @property
    def name(self):
        return self._entry.name if self._entry is not None else None

    @property
    def stream(self):
        """A cuda tensor's torch stream, on which wait() queues the result (else None)."""
        return self._stream

    def _complete(self, st, waited):
        self._done = True
        try:
            if st == _lib.SC_OK:
                # the result is copied out before the buffer is free for another op
                self._result = self._finish()
            else:
                self._exc = _error(st, "%s of tensor '%s'" % (self._kind, self._entry.name),
                                   self._entry.name)
        except BaseException as e:  # keep the error for every later wait()
            self._exc = e
        finally:
            # an unnamed slot stays taken until its handle is waited for (or dropped):
            # when poll() first sees an operation done differs between ranks, so a
            # slot freed there would hand the next unnamed call another name on each
            if waited or not self._entry.unnamed:
                self._free()
            if waited:
                self._settle()

    def _free(self, release_orphan=True):
        e = self._entry
        if e is None or getattr(self, "_freed", False):
            return
        self._freed = True
        e.inflight = False
        if e.orphan and release_orphan:
            _release_orphan(self._ctx, e)

    def _settle(self):
        """The handle was waited for (or dropped): its buffer may be released for room."""
        e = self._entry
        if e is not None and self._token is not None and e.open is self._token:
            e.open = None

    def __del__(self):
        try:  # a handle dropped after poll() said it was done: its slot is free again
            self._settle()
            if self._done:
                # no lock here: the collector may run this on a thread that holds the
                # context's lock (an orphan's registration then stays until shutdown)
                self._free(release_orphan=False)
        except Exception:  # noqa: B902  (interpreter shutdown)
            pass

    def _closed(self):
        """The error of a handle used after shutdown(): its client is gone."""
        return SparsecommError(_lib.SC_ERR_SHUTDOWN, "%s: sparsecomm has been shut down" % (
            "operation of tensor '%s'" % self._entry.name if self._entry is not None
            else "operation"), self.name)

    def _out(self):
        if self._exc is not None:
            raise self._exc
        return self._result

    def poll(self):
        if not self._done:
            if self._ctx.closed:
                raise self._closed()
            st = _lib.load().sc_poll(self._ctx.client, self._hid)
            if st == _lib.SC_IN_PROGRESS:
                return False
            self._complete(st, False)
        return True

    def done(self):
        return self.poll()

    def wait(self, timeout=None):
        """Waits at most ``timeout`` seconds (None: the default given to init()).  A
        timeout raises SparsecommError(SC_ERR_TIMEOUT) and leaves the handle waitable."""
        if self._done:
            self._free()
            self._settle()
            return self._out()
        lib = _lib.load()
        tmo = self._ctx.timeout_s if timeout is None else float(timeout)
        deadline = _now() + tmo
        while True:
            if self._ctx.closed:
                raise self._closed()
            left_ms = int(max(0.0, deadline - _now()) * 1000)
            slice_ms = min(left_ms, _WAIT_SLICE_MS)
            if self._stream is not None:
                st = lib.sc_stream_wait(self._ctx.client, self._hid,
                                        self._stream.cuda_stream, slice_ms)
            else:
                st = lib.sc_wait(self._ctx.client, self._hid, slice_ms)
            if st != _lib.SC_ERR_TIMEOUT:
                self._complete(st, True)
                return self._out()
            if left_ms <= _WAIT_SLICE_MS:
                raise SparsecommError(
                    _lib.SC_ERR_TIMEOUT,
                    "%s of tensor '%s' did not complete within %.1f s (rank %d)" %
                    (self._kind, self._entry.name, tmo, self._ctx.rank), self._entry.name)

    __call__ = wait  # Horovod's sparse_allreduce_async handle is called: handle()


def _now():
    return _monotonic()


def _op(average, op):
    if op is not None:
        return op if type(op) is ReduceOp else ReduceOp.parse(op)
    return ReduceOp.AVERAGE if average else ReduceOp.SUM


# ---- grouped operations --------------------------------------------------------------

_grouping = threading.local()  # .armed: the open group the next submission joins


def _take_member():
    """The group this thread's next submission joins (grouped_start), taken once."""
    gid = getattr(_grouping, "armed", None)
    _grouping.armed = None
    return gid


def _member(c, e, gid):
    """Makes e's next operation a member of group gid (sc_group_add); None: no group."""
    if gid is None:
        return
    st = _lib.load().sc_group_add(c.client, gid, e.ptr)
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "grouped operation of tensor '%s'" % e.name, e.name)


def grouped_start(starts):
    """Starts the operations of one group (Horovod's grouped_allreduce and its siblings):
    each of ``starts`` is a callable that starts one operation (allreduce_async,
    allgather_async, reducescatter_async, broadcast_async ...) and returns its Handle.
    The daemons negotiate the members together (sc_group_begin): none runs until every
    member is ready on every rank, and they are fused together as far as their classes
    and the fusion threshold allow.  Every rank must form the same group (the same names,
    the same count), else every member fails on every rank with SC_ERR_MISMATCH naming a
    tensor and the ranks.  Returns the Handles in order; a member refused at its start
    raises its error (the members already started then fail at the daemons' stall
    timeout: wait for them before using their tensors again)."""
    starts = list(starts)
    c = _need()
    lib = _lib.load()
    g = ctypes.c_uint64()
    st = lib.sc_group_begin(c.client, len(starts), ctypes.byref(g))
    if st != _lib.SC_OK:
        raise _error(st, "grouped operation of %d tensors" % len(starts))
    hs = []
    try:
        for start in starts:
            _grouping.armed = g.value
            try:
                hs.append(start())
            finally:
                _grouping.armed = None
    finally:
        st = lib.sc_group_end(c.client, g.value)
    if st != _lib.SC_OK:
        raise _error(st, "grouped operation of %d tensors" % len(starts))
    return hs


def _give_shape(e, shape):
    """Gives the daemons e's shape with its next allreduce or broadcast
    (sc_tensor_set_shape), where it changed: shapes that differ across ranks fail the
    operation on every rank, as Horovod's do.  One dimension is no shape at all, unless
    it is 0 (an empty tensor's stand-in: _start_empty)."""
    shape = tuple(shape) if len(shape) > 1 or 0 in shape else ()
    if shape == e.shape:
        return
    st = _lib.load().sc_tensor_set_shape(e.ptr, len(shape),
                                         (ctypes.c_uint64 * len(shape))(*shape))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "shape %s of tensor '%s'" % (list(shape), e.name), e.name)
    e.shape = shape


def _empty_entry(c, x, name, kind, carrier, key, pset):
    """The claimed one-element buffer that stands for an empty tensor x (which no buffer
    holds), zeroed (a finite value, whatever the daemons' nonfinite check), on x's device:
    a cuda one on x's stream, which the submission waits for, as _allreduce_cuda's."""
    cuda = _is_torch(x) and x.device.type == "cuda"
    dev, stream = _cuda_place(x) if cuda else (None, None)
    e = _acquire(c, name, kind, carrier, 1, key, 0,
                 (DeviceKind.CUDA, dev.index) if cuda else None, pset)
    try:
        if not cuda:
            e.data[:] = 0
            return e
        with _on(dev, stream):
            _after_last_read(e, stream)
            e.tdata().zero_()
        _set_stream(e, stream, kind)
    except BaseException:
        e.inflight = False
        raise
    return e


def _start_empty(c, x, name, kind, carrier, key, op, root, pset, result):
    """An allreduce or broadcast of an empty tensor x: negotiated as any other, on a
    one-element stand-in given x's empty shape (sc_tensor_set_shape), so that ranks whose
    tensor is not empty fail it at once on every rank as a mismatch naming each rank's
    shape (where x were completed here, they would wait for it until the stall timeout);
    where every rank's is empty it completes, with result() (the stand-in's value is
    not part of it)."""
    e = _empty_entry(c, x, name, kind, carrier, key, pset)
    return Handle(c, e, _start_dense(c, e, op, root, tuple(x.shape)), result, kind=kind)


def _start_dense(c, e, op, root=None, shape=()):
    """Starts an allreduce by op, or (root given) a broadcast from trainer rank root, of a
    tensor of the given shape."""
    lib = _lib.load()
    h = _lib.c_handle()
    _give_shape(e, shape)
    _member(c, e, _take_member())
    if root is None:
        st = lib.sc_allreduce_async(c.client, e.ptr, op.c_op, ctypes.byref(h))
    else:
        st = lib.sc_broadcast_async(c.client, e.ptr, int(root), ctypes.byref(h))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "%s of tensor '%s'" % ("allreduce" if root is None else "broadcast",
                                                 e.name), e.name)
    return h.value


def _start_coo(c, e, nnz, op, sparse_result=False, shape=()):
    lib = _lib.load()
    h = _lib.c_handle()
    _give_shape(e, shape)
    start = lib.sc_allreduce_coo_sparse_async if sparse_result else lib.sc_allreduce_coo_async
    _member(c, e, _take_member())
    st = start(c.client, e.ptr, int(nnz), op.c_op, ctypes.byref(h))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "COO allreduce of tensor '%s'" % e.name, e.name)
    return h.value


def _claim_locked(e):
    """Marks the buffer busy before anything is written into it (held: the lock)."""
    if e.inflight:
        raise DuplicateNameError("tensor '%s' already has an operation in flight" %
                                 e.name, e.name)
    e.inflight = True


def _name_or_none(name):
    """None (an unnamed operation) for no name or an empty one, as Horovod's; else the
    name as the binding keys it (_own_name)."""
    return None if name is None or name == "" else _own_name(str(name))


_WIRE_TAILS = ("@fp16", "@bf16")


def _own_name(name):
    """The name a caller's ``name`` is registered under: itself, or, for a name of the
    form a 16-bit wire's buffer has (_wire_name: ending in "@fp16" or "@bf16", then any
    number of "@"), the name with one "@" more, so that a caller's "w@fp16" is never
    taken for the fp16 buffer of "w" (whose wire it would get) nor that buffer for it."""
    if name.rstrip("@").endswith(_WIRE_TAILS):
        return name + "@"
    return name


# ---- dense and COO allreduce -------------------------------------------------------

def allreduce_async(tensor, name=None, average=True, op=None, sparsifier=None, density=0.0,
                    threshold=0.0, scheme=None, allow_lossy=False, sparse_as_dense=False,
                    coo_capacity=None, out=None, wire=None, block=None, process_set=None,
                    _kind="allreduce", _root=None, _as_dtype=None):
    """Starts an allreduce of ``tensor`` (torch tensor, dense or sparse COO, or numpy
    array) across every trainer and returns a :class:`Handle` whose wait() gives the
    result as a new tensor of the same kind, shape and dtype (into ``out`` when given).
    ``average`` divides the sum by size(); ``op`` overrides it: a ReduceOp (or Horovod's
    Sum, Average, Min, Max, Product, Adasum, their integers as Horovod numbers them, 0
    Average, 1 Sum, 2 Adasum, 3 Min, 4 Max, 5 Product, or a name such as "max"); MIN, MAX, PRODUCT
    and ADASUM are dense reductions that a tensor with a sparsifier refuses (ADASUM: float
    tensors only; the Adasum operator over a binary tree of the trainers in rank order).
    The options (sparsifier: "none", "topk", "threshold", "dgc", "exdyna", "natural", "block_topk";
    density; threshold; scheme; allow_lossy; coo_capacity; wire and block, see register();
    block defaults to a 2-D tensor's last dimension where it is used) are fixed when
    ``name`` is first used.  A float16 or bfloat16 torch tensor travels in a float32
    buffer whose wire is its own 16 bits (where the tensor is dense and unsparsified; the
    result comes back in its dtype).  Without ``name`` the operation gets a buffer by the
    rule in the module doc (unnamed operations).  ``process_set``: the ProcessSet whose
    members take part (default every trainer; an average divides by its size), of which
    this trainer must be a member (sparsecomm.process_sets).  ``_as_dtype``: the torch
    dtype a float32 tensor's values are given as (Horovod's fp16 and bf16 compression,
    sparsecomm.torch): it is reduced as a tensor of that dtype is, on its name's buffer
    with that dtype's wire and element type, without the cast, so that ranks that differ
    in it fail as a dtype mismatch."""
    c = _need()
    name = _name_or_none(name)
    red = _op(average, op)
    pset = process_sets_.scope(c, process_set, _kind, name).id
    if _is_torch(tensor) and tensor.is_sparse:
        if tensor.device.type not in ("cpu", "cuda"):
            raise TypeError("sparsecomm: sparse tensor '%s' is on %s; only CPU and CUDA "
                            "tensors are supported" % (name, tensor.device))
        return _allreduce_torch_sparse(c, tensor, name, _kind, red, sparsifier, density,
                                       threshold, scheme, allow_lossy, sparse_as_dense,
                                       coo_capacity, out, pset)
    key = _opts_key(sparsifier, density, threshold, scheme, allow_lossy,
                    block=_block(tensor, block, sparsifier, scheme))
    istorch = _is_torch(tensor)
    x = tensor.detach() if istorch else np.asarray(tensor)
    carrier = _sc_dtype(x)  # an unsupported dtype is refused, even with no elements
    known = c.entries.get(_key(name, pset)) if name is not None and wire is None else None
    if known is not None and known.fixed:  # a name register()ed with a wire keeps it
        key = key[:-1] + (("wire", dict(known.opts_key).get("wire", "native")),)
    else:
        w = _auto_wire(x, wire, key, _kind, coo_capacity, _as_dtype)
        key = key[:-1] + (("wire", w.name.lower()),)
        if wire is not None:  # asked for: a buffer of its own (the tensor's is its name's)
            name = _wire_name(c, name, w, pset)
    # the element type is the tensor's whatever the name's registration says: a float16
    # tensor given a register()ed float32 name registers it anew with its element type,
    # so that ranks whose types differ fail as a dtype mismatch on every rank
    key = _with_src(key, x, _as_dtype)
    numel = int(x.numel()) if istorch else int(x.size)
    if numel == 0:
        return _start_empty(c, x, name, _kind, carrier, key, red, _root, pset,
                            lambda: _dense_result(None, x, istorch, out))
    if istorch and x.device.type == "cuda":
        return _allreduce_cuda(c, x, name, _kind, key, red, coo_capacity, out, _root, pset)
    e = _acquire(c, name, _kind, carrier, numel, key, coo_capacity or 0, None, pset)
    try:
        if istorch:
            if x.device.type != "cpu":
                raise TypeError("sparsecomm: tensor '%s' is on %s; only CPU and CUDA "
                                "tensors are supported" % (e.name, x.device))
            e.tdata().view(x.shape).copy_(x)
        else:
            np.copyto(e.data.reshape(x.shape), x, casting="unsafe")
    except BaseException:
        e.inflight = False
        raise
    hid = _start_dense(c, e, red, _root, x.shape)
    return Handle(c, e, hid, lambda: _dense_result(e, x, istorch, out), kind=_kind)


def _allreduce_cuda(c, x, name, kind, key, red, coo_capacity, out, root=None, pset=0):
    """A dense CUDA tensor: copied into the daemon's GPU buffer on the tensor's current
    stream, which the submission waits for; the Handle queues the result on that stream
    (sc_stream_wait) and copies it out there.  The host never waits for the GPU."""
    t = _torch()
    dev, stream = _cuda_place(x)
    e = _acquire(c, name, kind, _sc_dtype(x), int(x.numel()), key, coo_capacity or 0,
                 (DeviceKind.CUDA, dev.index), pset)
    try:
        with _on(dev, stream):
            _after_last_read(e, stream)
            e.tdata().view(x.shape).copy_(x)
        _set_stream(e, stream, kind)
    except BaseException:
        e.inflight = False
        raise

    def finish():
        res = out
        with _on(dev, stream):
            if res is None:
                res = t.empty(x.shape, dtype=x.dtype, device=dev)
            res.copy_(e.tdata().view(x.shape))
            _mark_last_read(e, stream)
        return res

    return Handle(c, e, _start_dense(c, e, red, root, x.shape), finish, stream, kind)


def _mark_last_read(e, stream):
    """Records where the last copy out of a cuda buffer was queued: the buffer is free once
    that stream passes it."""
    ev = _torch().cuda.Event()
    ev.record(stream)
    e.last_read = ev


def _after_last_read(e, stream):
    """Orders a new write of a cuda buffer (on ``stream``) after the last copy out of it,
    which may have been queued on another stream."""
    ev = getattr(e, "last_read", None)
    if ev is not None:
        stream.wait_event(ev)


def _cuda_place(x):
    """The torch device (with its index) of a CUDA tensor and its current stream."""
    t = _torch()
    dev = x.device if x.device.index is not None else t.device("cuda", t.cuda.current_device())
    return dev, t.cuda.current_stream(dev)


@contextlib.contextmanager
def _on(dev, stream):
    """Torch work queued on ``stream`` of ``dev``, outside autograd."""
    t = _torch()
    with t.cuda.device(dev), t.cuda.stream(stream), t.no_grad():
        yield


def _set_stream(e, stream, kind="allreduce"):
    """Names the stream that wrote a cuda tensor's buffer: its submission waits for it."""
    st = _lib.load().sc_tensor_set_stream(e.ptr, stream.cuda_stream)
    if st != _lib.SC_OK:
        raise _error(st, "%s of tensor '%s'" % (kind, e.name), e.name)


def _dense_result(e, x, istorch, out):
    if istorch:
        t = _torch()
        if out is None:
            out = t.empty(x.shape, dtype=x.dtype, device=x.device)
        if e is not None:
            if out.requires_grad:
                with t.no_grad():
                    out.copy_(e.tdata().view(x.shape))
            else:
                out.copy_(e.tdata().view(x.shape))
        return out
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    if e is not None:
        np.copyto(out, e.data.reshape(x.shape), casting="unsafe")
    return out


def allreduce(tensor, name=None, average=True, timeout=None, **kw):
    """Synchronous allreduce: allreduce_async(...).wait(timeout)."""
    return allreduce_async(tensor, name=name, average=average, **kw).wait(timeout)


def allreduce_async_(tensor, name=None, average=True, **kw):
    """In place: the handle's wait() writes the result into ``tensor`` (dense only)."""
    if _is_torch(tensor) and tensor.is_sparse:
        raise TypeError("allreduce_async_: sparse tensors have no in-place form")
    return allreduce_async(tensor, name=name, average=average, out=tensor, **kw)


def allreduce_(tensor, name=None, average=True, timeout=None, **kw):
    return allreduce_async_(tensor, name=name, average=average, **kw).wait(timeout)


def _coo_key(sparsifier, density, threshold, scheme, allow_lossy):
    return _opts_key(Sparsifier.NATURAL if sparsifier is None else sparsifier, density,
                     threshold, scheme, allow_lossy)


def allreduce_coo_async(indices, values, numel, name=None, average=True, op=None,
                        dtype=None, coo_capacity=None, sparsifier=None, density=0.0,
                        threshold=0.0, scheme=None, allow_lossy=False, process_set=None):
    """COO input as numpy arrays: ``indices`` flat element indices (0 <= i < numel, in any
    order; repeats are summed), ``values`` their values.  The Handle's wait() gives the
    dense result as a numpy array of ``numel`` elements.  coo_capacity defaults to numel.
    An index past the tensor, or one no uint32 holds (2**32 and above, negative,
    fractional), and more entries than coo_capacity, fail the step on every rank
    (SparsecommError: SC_ERR_INVALID, SC_ERR_LIMIT).  ``process_set`` as allreduce's."""
    c = _need()
    name = _name_or_none(name)
    pset = process_sets_.scope(c, process_set, "COO allreduce", name).id
    idx = np.asarray(indices).reshape(-1)
    val = np.asarray(values).reshape(-1)
    if idx.shape != val.shape:
        raise ValueError("indices and values differ in length: %d vs %d" %
                         (idx.size, val.size))
    dt = DType(dtype) if dtype is not None else _sc_dtype(val)
    e = _acquire(c, name, "allreduce", dt, int(numel),
                 _coo_key(sparsifier, density, threshold, scheme, allow_lossy),
                 int(coo_capacity or numel), None, pset)
    nnz = idx.size
    try:
        # more entries than the COO area holds: the daemon refuses the step on every rank
        # (SC_ERR_LIMIT) instead of this rank alone, which would leave the others waiting
        n = min(nnz, e.coo_capacity)
        e.coo_idx[:n] = _coo_indices(idx[:n])
        np.copyto(e.coo_val[:n], val[:n], casting="unsafe")
    except BaseException:
        e.inflight = False
        raise
    hid = _start_coo(c, e, nnz, _op(average, op))
    return Handle(c, e, hid, lambda: e.data.copy())


_NO_INDEX = 0xFFFFFFFF  # past every tensor (numel is below 2**32 - 1)


def _coo_indices(idx):
    """The indices as uint32.  One that no uint32 index holds (negative, 2**32 or above, a
    fraction, NaN, not a number at all) is never wrapped or truncated: it becomes an index
    past the tensor, so the daemons refuse the step on every rank alike (SC_ERR_INVALID
    naming this rank and the tensor), and no rank waits for this one."""
    kind = idx.dtype.kind
    if kind in "iub":
        v = idx.astype(np.int64) if kind != "u" else idx.astype(np.uint64)
        bad = (v > 0xFFFFFFFF) | ((v < 0) if kind != "u" else False)
        return np.where(bad, _NO_INDEX, v).astype(np.uint32)
    if kind == "f":
        with np.errstate(invalid="ignore"):
            v = idx.astype(np.float64)
            bad = ~np.isfinite(v) | (v != np.floor(v)) | (v < 0) | (v > 0xFFFFFFFF)
        return np.where(bad, _NO_INDEX, np.where(bad, 0, v)).astype(np.uint32)
    return np.full(idx.shape, _NO_INDEX, dtype=np.uint32)


def allreduce_coo(indices, values, numel, name=None, average=True, timeout=None, **kw):
    return allreduce_coo_async(indices, values, numel, name=name, average=average,
                               **kw).wait(timeout)


def _check_nnz(e, nnz):
    if nnz > e.coo_capacity:
        raise SparsecommError(_lib.SC_ERR_LIMIT,
                              "tensor '%s': %d non-zeros exceed its COO capacity of %d" %
                              (e.name, nnz, e.coo_capacity), e.name)


def _allreduce_torch_sparse(c, tensor, name, kind, red, sparsifier, density, threshold,
                            scheme, allow_lossy, sparse_as_dense, coo_capacity, out, pset=0):
    """The COO path for a torch sparse tensor (see the module doc): on the CPU through
    numpy views of the shared COO area, on a GPU with torch ops on the tensor's current
    stream in the daemon's GPU COO area."""
    cuda = tensor.device.type == "cuda"
    dev, stream = _cuda_place(tensor) if cuda else (None, None)
    with _on(dev, stream) if cuda else contextlib.nullcontext():
        x = tensor.detach().coalesce()
    shape = tuple(x.shape)
    numel = math.prod(shape)
    if numel >= 2 ** 32:
        raise SparsecommError(_lib.SC_ERR_LIMIT, "tensor '%s' has %d elements; COO indices "
                              "are 32-bit" % (name or "(unnamed)", numel), name)
    sd = x.sparse_dim()
    dn = math.prod(shape[sd:])
    e = _acquire(c, name, kind, _sc_dtype(x), numel,
                 _with_src(_coo_key(sparsifier, density, threshold, scheme, allow_lossy), x),
                 int(coo_capacity or numel),
                 (DeviceKind.CUDA, dev.index) if cuda else None, pset)
    nnz = x._indices().shape[1] * dn
    try:
        _check_nnz(e, nnz)
        if cuda:
            with _on(dev, stream):
                _after_last_read(e, stream)
                _coo_fill_cuda(e, x, shape, sd, dn)
            _set_stream(e, stream, kind)
        else:
            _coo_fill_cpu(e, x, shape, sd, dn)
    except BaseException:
        e.inflight = False
        raise
    hid = _start_coo(c, e, nnz, red, sparse_result=not sparse_as_dense, shape=shape)

    def result():
        if not sparse_as_dense:
            n = _lib.load().sc_tensor_result_nnz(e.ptr)
            if n != _lib.SC_RESULT_DENSE:
                if cuda:
                    idx, val = e.tcoo()
                    return _sparse_from_coo(idx[:n], val[:n], shape, sd, x.dtype)
                return _sparse_result(e, n, shape, sd, x.dtype)
        dense = e.tdata().view(shape)
        if sparse_as_dense:
            res = out
            if res is None:
                res = _torch().empty(shape, dtype=x.dtype, device=x.device)
            res.copy_(dense)
            return res
        return _resparsify(dense, sd, x.dtype)

    def finish():
        if not cuda:
            return result()
        with _on(dev, stream):
            res = result()
            _mark_last_read(e, stream)
        return res

    return Handle(c, e, hid, finish, stream, kind)


# The COO path's conversions between torch's sparse tensors and the daemon's flat
# element indices live in _coo; the collectives beyond allreduce in _colls (allgather,
# alltoall, reducescatter, join, barrier, broadcast).  Both use the names above.
from ._coo import (  # noqa: E402,F401  (_flat_indices: tests/python/worker_api.py's)
    _coo_fill_cpu, _coo_fill_cuda, _flat_indices, _resparsify, _sparse_from_coo,
    _sparse_result)
from . import _lru  # noqa: E402  (it uses the names above)
from ._colls import (  # noqa: E402,F401
    allgather, allgather_async, allgather_object, alltoall, alltoall_async, barrier,
    broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object, join,
    reducescatter, reducescatter_async, SplitsError)
