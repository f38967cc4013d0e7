"""ctypes declarations of libsparseclient (client/include/sparsecomm.h).

This module mirrors the C header by hand: the status codes, the element types, the
reductions, the sparsifier and device enums and the layout of ``sc_tensor_opts_t``.  The test
tests/python/test_binding.py compiles a small C program against the header and checks
every value and field offset here against it, so the two cannot drift apart silently.

The shared library is found, in order, through:

1. ``$SPARSECOMM_LIB`` (a path to the .so, or a directory holding libsparseclient.so);
2. the build tree next to this package (``<repo>/build/lib/libsparseclient.so``, i.e.
   ``../../../build/lib`` from the package directory, and ``../../build/lib`` for a
   package copied to ``<prefix>/python``);
3. the library directory ``make install`` recorded in ``_install.py`` (absent in the
   source tree);
4. ``ctypes.util.find_library("sparseclient")`` (an installed library).

Nothing is loaded at import time; :func:`load` does it on first use, so the pure-Python
parts (and the documentation) work on a machine without the library.
"""

import ctypes
import ctypes.util
import enum
import operator
import os
import threading

# ---- constants mirrored from sparsecomm.h --------------------------------------------

SC_PROTOCOL_VERSION = 5

# name (without the SC_ prefix) -> value, in the order of SC_STATUS_MAP.
STATUS_VALUES = {
    "OK": 0,
    "IN_PROGRESS": 1,
    "ERR_INVALID": -1,
    "ERR_NOMEM": -2,
    "ERR_CONNECT": -3,
    "ERR_PROTOCOL": -4,
    "ERR_VERSION": -5,
    "ERR_TIMEOUT": -6,
    "ERR_MISMATCH": -7,
    "ERR_NOT_FOUND": -8,
    "ERR_BUSY": -9,
    "ERR_PEER": -10,
    "ERR_SHUTDOWN": -11,
    "ERR_SYSTEM": -12,
    "ERR_UNSUPPORTED": -13,
    "ERR_ABORTED": -14,
    "ERR_LIMIT": -15,
    "ERR_STALLED": -16,
}
STATUS_NAMES = {v: "SC_" + k for k, v in STATUS_VALUES.items()}
for _k, _v in STATUS_VALUES.items():
    globals()["SC_" + _k] = _v
del _k, _v


# sc_tensor_result_nnz's answer when the result is dense (SC_RESULT_DENSE, SIZE_MAX)
SC_RESULT_DENSE = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1


class DType(enum.IntEnum):
    FLOAT32 = 0
    FLOAT64 = 1
    INT32 = 2
    INT64 = 3


DTYPE_SIZES = {DType.FLOAT32: 4, DType.FLOAT64: 8, DType.INT32: 4, DType.INT64: 8}
DTYPE_CTYPES = {
    DType.FLOAT32: ctypes.c_float,
    DType.FLOAT64: ctypes.c_double,
    DType.INT32: ctypes.c_int32,
    DType.INT64: ctypes.c_int64,
}


class ReduceOp(enum.IntEnum):
    """The reductions, numbered as Horovod numbers them (horovod.common.basics: Average 0,
    Sum 1, Adasum 2, Min 3, Max 4, Product 5), so that a script's integer op, or one stored
    and passed back, means what it means under Horovod.  sc_reduce_op_t (sparsecomm.h)
    numbers them its own way: :attr:`c_op` is the value the library takes.  MIN, MAX and
    PRODUCT are lossless dense reductions (a tensor with a sparsifier or COO input refuses
    them); an integer AVERAGE divides the wrapped sum truncating toward zero.  ADASUM
    combines float tensors by the Adasum operator over a binary tree of the trainers (an
    allreduce's only; dense, float32 and float64)."""
    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5

    @property
    def c_op(self):
        """This reduction's sc_reduce_op_t value."""
        return SC_REDUCE_OPS[self.name]

    @classmethod
    def parse(cls, value):
        """Accepts a ReduceOp, its integer value (Horovod's: 0 Average, 1 Sum, 2 Adasum,
        3 Min, 4 Max, 5 Product) or a name ("min", "MAX", "Product").  Anything else,
        a float or a bool among them (``op=1.5`` is no Sum, ``op=True`` no ``average``),
        is refused."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().upper()
            if key not in cls.__members__:
                raise ValueError("unknown reduction %r (one of %s)" %
                                 (value, ", ".join(m.lower() for m in cls.__members__)))
            return cls[key]
        try:
            if isinstance(value, bool):
                raise TypeError("a bool")
            return cls(operator.index(value))
        except (TypeError, ValueError):
            raise ValueError("unknown reduction %r (Horovod's 0 Average, 1 Sum, 2 Adasum, "
                             "3 Min, 4 Max, 5 Product)" % (value,))


# sc_reduce_op_t (sparsecomm.h) by name: what ReduceOp.c_op gives the library
SC_REDUCE_OPS = {"SUM": 0, "AVERAGE": 1, "MIN": 2, "MAX": 3, "PRODUCT": 4, "ADASUM": 5}


class Wire(enum.IntEnum):
    """sc_wire_t: what a float32 tensor's dense sums travel as between the daemons."""
    NATIVE = 0  # the dtype's own 4 bytes
    FP16 = 1  # IEEE binary16, summed in float32 on arrival
    BF16 = 2  # bfloat16, likewise

    @classmethod
    def parse(cls, value):
        """Accepts a Wire, its integer value, a name ("fp16", "bf16", "native", "fp32"),
        or a torch dtype (torch.float16, torch.bfloat16, torch.float32)."""
        if value is None:
            return cls.NATIVE
        if isinstance(value, cls):
            return value
        if isinstance(value, int):
            return cls(value)
        key = str(value).strip().upper().replace("TORCH.", "")
        aliases = {"": "NATIVE", "FP32": "NATIVE", "FLOAT32": "NATIVE", "NONE": "NATIVE",
                   "FLOAT16": "FP16", "HALF": "FP16", "BFLOAT16": "BF16"}
        key = aliases.get(key, key)
        if key in cls.__members__:
            return cls[key]
        raise ValueError("unknown wire format %r (native, fp16 or bf16)" % (value,))


class Sparsifier(enum.IntEnum):
    NONE = 0  # send as is (lossless)
    TOPK = 1  # exact top-k by magnitude, k = density x numel
    THRESHOLD = 2  # every |x| >= threshold
    DGC = 3  # sampled threshold aiming at density
    EXDYNA = 4  # ExDyna: exclusive partitions, scaled threshold
    NATURAL = 5  # the tensor is already sparse: send its non-zeros
    BLOCK_TOPK = 6  # block-wise top-K (S2): the blocks of largest l2 norm, whole

    @classmethod
    def parse(cls, value):
        """Accepts a Sparsifier, its integer value or a name ("topk", "TOPK", "none")."""
        if value is None:
            return cls.NONE
        if isinstance(value, cls):
            return value
        if isinstance(value, int):
            return cls(value)
        if isinstance(value, str):
            key = value.strip().upper().replace("-", "_")
            aliases = {"TOP_K": "TOPK", "DENSE": "NONE", "": "NONE", "SPARSE": "NATURAL"}
            key = aliases.get(key, key)
            if key in cls.__members__:
                return cls[key]
        raise ValueError("unknown sparsifier %r (one of %s)" %
                         (value, ", ".join(m.lower() for m in cls.__members__)))


class DeviceKind(enum.IntEnum):
    """sc_device_kind_t: where a tensor's buffer lives."""
    CPU = 0  # host shared memory
    CUDA = 1  # the daemon's GPU memory, mapped by CUDA IPC

    @classmethod
    def parse(cls, device):
        """(kind, ordinal) of a device: None or "cpu"; "cuda", "cuda:N"; a torch.device;
        a DeviceKind."""
        if device is None:
            return cls.CPU, 0
        if isinstance(device, cls):
            return device, 0
        kind = getattr(device, "type", None)  # torch.device
        if kind is not None:
            index = getattr(device, "index", None)
            device = kind if index is None else "%s:%d" % (kind, index)
        text = str(device).strip().lower()
        name, _, num = text.partition(":")
        if name == "cpu" and not num:
            return cls.CPU, 0
        if name == "cuda" and (not num or (num.isdigit() and len(num) < 6)):
            return cls.CUDA, int(num or 0)
        raise ValueError("unknown device %r (\"cpu\", \"cuda\" or \"cuda:N\")" % (device,))


class TensorOpts(ctypes.Structure):
    """sc_tensor_opts_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("allow_lossy", ctypes.c_int),
        ("sparsifier", ctypes.c_int),  # sc_sparsifier_t (an int-sized enum)
        ("density", ctypes.c_double),
        ("threshold", ctypes.c_double),
        ("scheme", ctypes.c_char_p),
        ("coo_capacity", ctypes.c_size_t),
        ("sketch_rows", ctypes.c_uint32),
        ("sketch_cols", ctypes.c_double),
        ("device", ctypes.c_int),  # sc_device_kind_t
        ("device_ordinal", ctypes.c_int),
        ("wire", ctypes.c_int),  # sc_wire_t
        ("block", ctypes.c_uint32),  # S2's bitmap block, block top-K's (0: 256)
        ("process_set", ctypes.c_int),  # the set the tensor runs in (0: every trainer)
        ("src_type", ctypes.c_int),  # sc_src_type_t: the caller's element type
    ]


c_handle = ctypes.c_uint64
c_client_p = ctypes.c_void_p
c_tensor_p = ctypes.c_void_p

# (name, restype, argtypes)
_PROTOTYPES = [
    ("sc_status_name", ctypes.c_char_p, [ctypes.c_int]),
    ("sc_status_message", ctypes.c_char_p, [ctypes.c_int]),
    ("sc_dtype_size", ctypes.c_size_t, [ctypes.c_int]),
    ("sc_dtype_name", ctypes.c_char_p, [ctypes.c_int]),
    ("sc_connect", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(c_client_p)]),
    ("sc_rank", ctypes.c_int, [c_client_p]),
    ("sc_size", ctypes.c_int, [c_client_p]),
    ("sc_local_rank", ctypes.c_int, [c_client_p]),
    ("sc_local_size", ctypes.c_int, [c_client_p]),
    ("sc_daemon_built", ctypes.c_char_p, [c_client_p]),
    ("sc_built", ctypes.c_char_p, []),
    ("sc_config_set", ctypes.c_int, [c_client_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("sc_register", ctypes.c_int,
     [c_client_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(c_tensor_p)]),
    ("sc_register_ex", ctypes.c_int,
     [c_client_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(TensorOpts),
      ctypes.POINTER(c_tensor_p)]),
    ("sc_tensor_release", ctypes.c_int, [c_client_p, c_tensor_p]),
    ("sc_tensor_coo_indices", ctypes.c_void_p, [c_tensor_p]),
    ("sc_tensor_coo_values", ctypes.c_void_p, [c_tensor_p]),
    ("sc_tensor_residual", ctypes.c_void_p, [c_tensor_p]),
    ("sc_allreduce_coo_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(c_handle)]),
    ("sc_allreduce_coo_sparse_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(c_handle)]),
    ("sc_tensor_result_nnz", ctypes.c_size_t, [c_tensor_p]),
    ("sc_tensor_data", ctypes.c_void_p, [c_tensor_p]),
    ("sc_tensor_name", ctypes.c_char_p, [c_tensor_p]),
    ("sc_tensor_dtype", ctypes.c_int, [c_tensor_p]),
    ("sc_tensor_numel", ctypes.c_size_t, [c_tensor_p]),
    ("sc_tensor_device", ctypes.c_int, [c_tensor_p, ctypes.POINTER(ctypes.c_int)]),
    ("sc_tensor_set_stream", ctypes.c_int, [c_tensor_p, ctypes.c_void_p]),
    ("sc_tensor_set_shape", ctypes.c_int,
     [c_tensor_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    ("sc_stream_wait", ctypes.c_int, [c_client_p, c_handle, ctypes.c_void_p, ctypes.c_int]),
    ("sc_allreduce_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_int, ctypes.POINTER(c_handle)]),
    ("sc_poll", ctypes.c_int, [c_client_p, c_handle]),
    ("sc_wait", ctypes.c_int, [c_client_p, c_handle, ctypes.c_int]),
    ("sc_abandon", None, [c_client_p, c_handle]),
    ("sc_submit_batch", ctypes.c_int, [c_client_p, ctypes.c_int]),
    ("sc_submit_flush", ctypes.c_int, [c_client_p]),
    ("sc_allreduce", ctypes.c_int, [c_client_p, c_tensor_p, ctypes.c_int, ctypes.c_int]),
    ("sc_barrier_async", ctypes.c_int, [c_client_p, ctypes.POINTER(c_handle)]),
    ("sc_group_begin", ctypes.c_int, [c_client_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    ("sc_group_add", ctypes.c_int, [c_client_p, ctypes.c_uint64, c_tensor_p]),
    ("sc_group_end", ctypes.c_int, [c_client_p, ctypes.c_uint64]),
    ("sc_join_async", ctypes.c_int, [c_client_p, ctypes.POINTER(c_handle)]),
    ("sc_join_result", ctypes.c_int,
     [c_client_p, c_handle, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    ("sc_allgather_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_size_t, ctypes.POINTER(c_handle)]),
    ("sc_alltoall_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(c_handle)]),
    ("sc_tensor_result_counts", ctypes.c_int,
     [c_tensor_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]),
    ("sc_reducescatter_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(c_handle)]),
    ("sc_broadcast_async", ctypes.c_int,
     [c_client_p, c_tensor_p, ctypes.c_int, ctypes.POINTER(c_handle)]),
    ("sc_last_error", ctypes.c_char_p, []),
    ("sc_finalize", ctypes.c_int, [c_client_p]),
]

# Declared only where the library has them (an older libsparseclient lacks them): the
# process set calls.  has() says whether the loaded library does.
_OPTIONAL_PROTOTYPES = [
    ("sc_process_set_add", ctypes.c_int,
     [c_client_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int,
      ctypes.POINTER(ctypes.c_int)]),
    ("sc_process_set_remove", ctypes.c_int, [c_client_p, ctypes.c_int, ctypes.c_int]),
    ("sc_process_set_size", ctypes.c_int, [c_client_p, ctypes.c_int]),
    ("sc_process_set_rank", ctypes.c_int, [c_client_p, ctypes.c_int]),
    ("sc_process_set_ranks", ctypes.c_int,
     [c_client_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
]

SC_PROCESS_SET_GLOBAL = 0

_lock = threading.Lock()
_lib = None
_lib_path = None


def candidate_paths():
    """The places searched for libsparseclient.so, in order (see the module doc)."""
    out = []
    env = os.environ.get("SPARSECOMM_LIB")
    if env:
        out.append(os.path.join(env, "libsparseclient.so") if os.path.isdir(env) else env)
    pkg = os.path.dirname(os.path.abspath(__file__))
    for rel in ("../../../build/lib", "../../build/lib"):
        out.append(os.path.normpath(os.path.join(pkg, rel, "libsparseclient.so")))
    try:
        from . import _install
        out.append(os.path.join(_install.LIBDIR, "libsparseclient.so"))
    except ImportError:
        pass
    found = ctypes.util.find_library("sparseclient")
    if found:
        out.append(found)
    return out


def load():
    """Loads the library once and declares its prototypes; raises OSError when absent."""
    global _lib, _lib_path
    if _lib is not None:  # every call of the package's hot paths comes through here
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        env_set = bool(os.environ.get("SPARSECOMM_LIB"))
        for i, path in enumerate(candidate_paths()):
            is_file_path = os.sep in path
            if is_file_path and not os.path.exists(path):
                tried.append("%s (absent)" % path)
                if i == 0 and env_set:
                    raise OSError("SPARSECOMM_LIB=%s: no such file" % os.environ["SPARSECOMM_LIB"])
                continue
            try:
                lib = ctypes.CDLL(path)  # CDLL releases the GIL during every call
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            for name, restype, argtypes in _PROTOTYPES:
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            for name, restype, argtypes in _OPTIONAL_PROTOTYPES:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = restype
                    fn.argtypes = argtypes
            _lib, _lib_path = lib, path
            return lib
        raise OSError("libsparseclient.so not found; build it with `make build/lib/"
                      "libsparseclient.so` or set SPARSECOMM_LIB. Tried: " + "; ".join(tried))


def has(name):
    """Whether the loaded library exports ``name`` (the optional calls above)."""
    return hasattr(load(), name)


def library_path():
    """Path of the loaded library (None before load())."""
    return _lib_path
