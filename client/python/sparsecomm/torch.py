"""sparsecomm.torch: PyTorch integration in the style of horovod.torch.

* :func:`DistributedOptimizer` wraps a torch optimizer.  A hook on every parameter's
  gradient accumulator (``register_post_accumulate_grad_hook`` where torch has it, else the
  AccumulateGrad node reached through ``p.expand_as(p).grad_fn.next_functions[0][0]``)
  submits the gradient asynchronously as soon as backward has produced it, so
  communication overlaps the rest of backward.  ``step()`` waits for every handle (one
  shared deadline), writes the averaged gradients back into ``p.grad`` and calls the
  wrapped optimizer's step.  Parameters that got no gradient in a step are submitted as
  zeros (every rank must submit the same names, otherwise the others would wait).
  Sparse gradients (nn.Embedding(sparse=True)) take the COO path and come back as sparse
  COO tensors holding the union of non-zero rows (``sparse_as_dense=True``: a dense
  result, written back sparse as Horovod's); those of a dtype the COO path does not
  carry (float64) are allgathered as Horovod's (_sparse_async).
  Per-parameter options: ``overrides`` maps a parameter name or an fnmatch pattern
  ("*.bias") to a dict of {sparsifier, density, threshold, scheme, allow_lossy, block}, or is a
  callable(name, param) returning such a dict or None.

* :func:`broadcast_parameters` makes every rank start from root_rank's values (a
  broadcast: the root's node sends them once to every other node);
  :func:`broadcast_optimizer_state` does the same for an optimizer's state (pickled by
  :func:`sparsecomm.broadcast_object`).

* :func:`ddp_hook` is a DistributedDataParallel communication hook: DDP's buckets are
  reduced by the daemons instead of the process group.  DDP itself still needs a process
  group (for its start-up broadcast and bookkeeping): :func:`init_process_group` sets up
  gloo with the rank and world size from sparsecomm (MASTER_ADDR: $MASTER_ADDR, else the
  first address of $SPARSECOMM_NETNS_ADDRS, else 127.0.0.1; the port is chosen by rank 0
  and broadcast through sparsecomm unless $MASTER_PORT is set; under --netns gloo is
  pointed at the interface holding the node's address through $GLOO_SOCKET_IFNAME).

      model = DDP(model)
      model.register_comm_hook(sparsecomm.torch.DDPHookState(), sparsecomm.torch.ddp_hook)

Horovod's names. A script written for ``import horovod.torch as hvd`` runs with ``import
sparsecomm.torch as hvd`` (or unchanged, through the alias package client/python/horovod):
init, shutdown, is_initialized, rank, size, local_rank,
local_size, cross_rank, cross_size, is_homogeneous, Sum, Average, Min, Max, Product,
Adasum (allreduce and DistributedOptimizer only), allreduce, allreduce_, allreduce_async,
allreduce_async_, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
grouped_allreduce_async_, sparse_allreduce_async, synchronize(handle), poll(handle),
allgather, allgather_async, grouped_allgather, allgather_object, alltoall,
alltoall_async, broadcast, broadcast_, broadcast_async, broadcast_async_,
broadcast_object, broadcast_parameters, broadcast_optimizer_state, reducescatter,
reducescatter_async, grouped_reducescatter, barrier, join, the build queries (mpi_built,
nccl_built, cuda_built, ...: sparsecomm._system), start_timeline, stop_timeline,
HorovodInternalError (the base of SparsecommError), SyncBatchNorm, Compression,
DistributedOptimizer and elastic (run, TorchState, ElasticSampler, ... for a job of
fixed size: sparsecomm._elastic), each with
Horovod's positional arguments in Horovod's order (horovod/torch's mpi_ops.py,
functions.py and optimizer.py); sparsecomm's extras (``timeout``, ``compression`` on the
async forms, the sparsifier options) are keyword-only.  A call before init() raises
NotInitializedError, a ValueError as Horovod's.  allreduce, grouped_allreduce,
allgather, grouped_allgather, broadcast, alltoall, reducescatter and grouped_reducescatter
are differentiable with Horovod's backward rules (sparsecomm._autograd).  Process sets (see
sparsecomm.process_sets): ProcessSet, global_process_set, add_process_set,
remove_process_set, init(process_sets=...), and ``process_set=`` on every collective,
broadcast_parameters, broadcast_optimizer_state and DistributedOptimizer; ranks given to
a collective are ranks within the set.  :class:`Compression`'s fp16 and
bf16 send 16-bit values as Horovod's do: given to an allreduce, a float32 tensor is
reduced as a float16 (bfloat16) tensor of its name is, in a float32 buffer whose sums
travel in 16 bits (the wire option of sparsecomm.register), summed in float32 on arrival;
ranks that differ in the compression fail as a dtype mismatch, as Horovod's do, so the bytes sent are halved and the result is the float32 tensor's, each
value a 16-bit one.  Their compress() and decompress() cast as Horovod's do.

CUDA parameters and gradients stay on their GPU in all three: they are CUDA tensors of
sparsecomm (see the sparsecomm module doc), their results queued on the stream that was
current when they were submitted, and a CUDA bucket's future names its device.
"""

import collections.abc
import copy
import fnmatch
import os
import queue
import re
import socket as _socket
import sys
import threading
import warnings
import weakref
from contextlib import contextmanager

import torch

import sparsecomm as _sc
from sparsecomm import _autograd, _lib, _rerun, _sparseform
from sparsecomm import _elastic as elastic  # noqa: F401  (hvd.elastic, a fixed job's)
from sparsecomm import (  # noqa: F401  (re-exported, as horovod.torch does)
    SparsecommError, HorovodInternalError, NotInitializedError, DuplicateNameError,
    SplitsError, Handle, Sparsifier,
    ReduceOp, Sum, Average, Min, Max, Product, Adasum, init, shutdown, is_initialized, rank,
    size, local_rank, local_size, cross_rank, cross_size, is_homogeneous,
    broadcast_async, broadcast_, broadcast_async_, broadcast_object,
    allgather_async, allgather_object, barrier, join, mpi_built, mpi_enabled,
    mpi_threads_supported, gloo_built, gloo_enabled, nccl_built, ccl_built, ddl_built,
    cuda_built, rocm_built, start_timeline, stop_timeline, ProcessSet, ProcessSetError,
    global_process_set, add_process_set, remove_process_set, process_set_by_id)

sys.modules[__name__ + ".elastic"] = elastic  # `import sparsecomm.torch.elastic` too
for _sub in ("sampler", "state"):  # Horovod's modules of its elastic package
    sys.modules["%s.elastic.%s" % (__name__, _sub)] = elastic
# Horovod's modules inside horovod.torch, which scripts import names from (`from
# horovod.torch.mpi_ops import allreduce_async_, synchronize`): every name is this
# module's, so each is this module under that name too
for _sub in ("mpi_ops", "functions", "optimizer", "compression", "sync_batch_norm"):
    sys.modules["%s.%s" % (__name__, _sub)] = sys.modules[__name__]
    globals()[_sub] = sys.modules[__name__]
del _sub

_OPT_KEYS = ("sparsifier", "density", "threshold", "scheme", "allow_lossy", "coo_capacity",
             "block")


# ---- Horovod's compression and collectives -------------------------------------------

class Compressor:
    """Horovod's compressor protocol: compress(tensor) -> (tensor, ctx) before the
    allreduce, decompress(tensor, ctx) -> tensor after it."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Leaves the tensor as it is."""


class _CastCompressor(Compressor):
    dtype = None
    wire = None  # the sparsecomm wire format its allreduces ask for

    @classmethod
    def compress(cls, tensor):
        # Horovod's: a floating tensor is cast to the 16-bit dtype, the dtype it had is
        # the context.  The 16-bit wire, which spares the cast, is the allreduce's own
        # (_compressed_async), so code that compresses around its own allreduce still
        # sends 16-bit values.
        if tensor.dtype.is_floating_point:
            return tensor.to(cls.dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Horovod's fp16 compression: the allreduce sends float16 values (half the bytes)
    and the result comes back in the tensor's dtype.  compress() and decompress() cast as
    Horovod's do.  Given to an allreduce or DistributedOptimizer, a float32 tensor is not
    cast: it is reduced as a float16 tensor of its name is, in the name's float32 buffer
    with the fp16 wire and the float16 element type (so that a rank without the
    compression fails at once as a dtype mismatch, as Horovod's float16 against float32
    does): each node's contribution and every partial sum is rounded to float16
    as it is sent and summed in float32 on arrival, and the result (averaged in float32)
    is rounded to float16 as Horovod's comes back in it.  Other floating dtypes are cast
    to float16 first.  With a sparsifier, allow_lossy or a pinned scheme (which refuse a
    16-bit wire) the values are rounded to float16 and travel in 32 bits."""
    dtype = torch.float16
    wire = "fp16"


class BF16Compressor(_CastCompressor):
    """As FP16Compressor, with bfloat16."""
    dtype = torch.bfloat16
    wire = "bf16"


def _compressed_async(compression, tensor, out, **kw):
    """An allreduce through ``compression``: a float32 tensor with options that allow a
    16-bit wire is reduced as a tensor of the compression's dtype (its wire and element
    type, without the cast) and its result rounded to that dtype; anything else goes
    through compress() and decompress()."""
    wire = getattr(compression, "wire", None)
    plain = (not kw.get("sparsifier") or str(kw.get("sparsifier")).lower() == "none")
    if wire and tensor.dtype == torch.float32 and plain and not kw.get("allow_lossy") \
            and kw.get("scheme") in (None, "dense_ring"):
        kw["_as_dtype"] = compression.dtype
        return _DecompressHandle(_sc.allreduce_async(tensor, **kw),
                                 lambda res: res.to(compression.dtype).to(torch.float32),
                                 out)
    compressed, ctx = compression.compress(tensor)
    return _DecompressHandle(_sc.allreduce_async(compressed, **kw),
                             lambda res: compression.decompress(res, ctx), out)


class Compression:
    """Horovod's ``hvd.Compression``: ``none``, ``fp16`` and ``bf16``."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


class _DecompressHandle:
    """The handle of a compressed allreduce: wait() decompresses the result (into
    ``out`` when given)."""

    def __init__(self, handle, decompress, out):
        self._h = handle
        self._decompress = decompress
        self._out = out
        self._result = None

    @property
    def name(self):
        return self._h.name

    @property
    def stream(self):
        return self._h.stream

    def poll(self):
        return self._h.poll()

    def done(self):
        return self._h.poll()

    def wait(self, timeout=None):
        res = self._h.wait(timeout)
        if self._result is None:
            res = self._decompress(res)
            if self._out is not None:
                with torch.no_grad():
                    self._out.copy_(res)
                res = self._out
            self._result = res
        return self._result

    __call__ = wait  # Horovod's sparse_allreduce_async handle is called


def _refuse_adasum(op, what):
    """Adasum is an allreduce's (Horovod's rule too): the other calls refuse it."""
    if op is not None and ReduceOp.parse(op) == ReduceOp.ADASUM:
        raise NotImplementedError("%s: op=hvd.Adasum is an allreduce's reduction only" % what)


def _hvd_op(average, op):
    """Horovod's rule: ``op`` (default Average) or the deprecated ``average``, not both."""
    if op is not None and average is not None:
        raise ValueError("allreduce: give op or average, not both")
    if op is not None:
        return ReduceOp.parse(op)
    return ReduceOp.SUM if average is False else ReduceOp.AVERAGE


def _scale(tensor, factor):
    """tensor x factor in its own dtype (Horovod's prescale and postscale factors); an
    integer tensor is scaled in float64 and truncated back, and a 16-bit float on the CPU
    in float32, as Horovod's (torch would round the factor to the tensor's dtype first:
    a result one ulp away from Horovod's)."""
    if factor == 1.0 or tensor is None:
        return tensor
    with torch.no_grad():
        if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex:
            return (tensor.double() * factor).to(tensor.dtype)
        if tensor.dtype in (torch.float16, torch.bfloat16) and tensor.device.type == "cpu":
            return (tensor.float() * factor).to(tensor.dtype)
        out = tensor * factor
    return out if out.dtype == tensor.dtype else out.to(tensor.dtype)


def _postscaled(handle, factor, out=None):
    """handle, its result multiplied by factor (and copied into ``out`` when given)."""
    if factor == 1.0 and out is None:
        return handle
    return _DecompressHandle(handle, lambda res: _scale(res, factor), out)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, *, compression=Compression.none,
                    **kw):
    """Horovod's allreduce_async: starts the reduction (``op``, default Average) and
    returns a handle for :func:`synchronize`.  ``prescale_factor`` multiplies the input
    before the reduction, ``postscale_factor`` the result after it (after the average's
    division), as Horovod's do.  Keyword-only, sparsecomm's: ``compression`` (Horovod's
    async form has none) and sparsecomm.allreduce_async's options (sparsifier, density,
    ...)."""
    red = _hvd_op(average, op)
    x = _scale(tensor, prescale_factor)
    kw["process_set"] = process_set
    if _sc._is_torch(x) and x.is_sparse:
        h = _sparse_async(x, name, red, **kw)
    elif compression is NoneCompressor:
        h = _sc.allreduce_async(x, name=name, op=red, **kw)
    else:
        h = _compressed_async(compression, x, None, name=name, op=red, **kw)
    return _postscaled(h, postscale_factor)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, *, compression=Compression.none,
                     **kw):
    """In place: synchronize(handle) writes the result into ``tensor`` and returns it."""
    red = _hvd_op(average, op)
    if tensor.is_sparse:
        raise TypeError("allreduce_async_: sparse tensors have no in-place form")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        return _postscaled(allreduce_async(tensor, None, name, red, prescale_factor,
                                           postscale_factor, process_set,
                                           compression=compression, **kw), 1.0, tensor)
    kw["process_set"] = process_set
    if compression is NoneCompressor:
        return _sc.allreduce_async_(tensor, name=name, op=red, **kw)
    return _compressed_async(compression, tensor, tensor, name=name, op=red, **kw)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None, *, timeout=None,
              **kw):
    """Horovod's allreduce: the reduction of ``tensor`` across every trainer, a new tensor
    (``op`` default Average; ``average=False`` is Sum).  A tensor that requires a gradient
    gets one through it (Horovod's backward: the gradient allreduced with the same op and
    factors; sparsecomm._autograd).  ``timeout``: seconds (None: init()'s default)."""
    def run(x):
        return allreduce_async(x, average, name, op, prescale_factor, postscale_factor,
                               process_set, compression=compression, **kw).wait(timeout)

    if _autograd.wanted(tensor):
        return _autograd.collective(tensor, run, lambda g: allreduce(
            g, average, None, Compression.none, op, prescale_factor, postscale_factor,
            process_set, timeout=timeout))
    return run(tensor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None, *, compression=Compression.none,
               timeout=None, **kw):
    """In-place allreduce: the result is written into ``tensor``, which is returned."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set, compression=compression, **kw).wait(timeout)


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=None, **kw):
    """Horovod's sparse_allreduce_async: a torch sparse COO tensor reduced across every
    trainer (the COO path: the union of the non-zero rows comes back as a coalesced
    sparse tensor); a handle for synchronize(), or to call as Horovod's is.  ``op``:
    Average or Sum, as a constant, Horovod's integer (0, 1) or a name.  Every rank must
    give the name the same dtype and size, sparse: otherwise it fails on every rank with
    SC_ERR_MISMATCH naming the tensor and the ranks (sparsecomm._sparseform)."""
    if not (_sc._is_torch(tensor) and tensor.is_sparse):
        raise TypeError("sparse_allreduce_async: a torch sparse COO tensor, not %s" %
                        (getattr(tensor, "layout", type(tensor).__name__),))
    return _sparse_async(tensor, name, ReduceOp.parse(op), process_set=process_set, **kw)


_COO_DTYPES = _sparseform.COO_DTYPES  # the dtypes of sparse tensors the COO path carries


def _sparse_async(tensor, name, red, *, process_set=None, sparse_as_dense=False, **kw):
    """The allreduce of a torch sparse COO tensor: the COO path (sparsecomm.allreduce_async)
    for the dtypes it carries; any other (float64, an integer dtype) as Horovod reduces
    every sparse tensor: its indices and values allgathered and summed here, in its own
    dtype (a dense allreduce under ``sparse_as_dense``), after every rank's form has been
    exchanged under the name (_sparseform.agree), so that ranks whose dtypes send them
    down different paths fail at once rather than wait for each other."""
    if tensor.dtype in _COO_DTYPES:
        return _sparseform.Handle(_sc.allreduce_async(
            tensor, name=name, op=red, process_set=process_set,
            sparse_as_dense=sparse_as_dense, **kw), name, tensor)
    if red not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        raise ValueError("allreduce of sparse tensor '%s' (%s): op must be Sum or Average, "
                         "not %s" % (name, tensor.dtype, red.name))
    if kw.get("sparsifier") not in (None, "none") or kw.get("allow_lossy"):
        raise ValueError("allreduce of sparse tensor '%s': a sparsifier or allow_lossy "
                         "needs float32, float16 or bfloat16 values, not %s" %
                         (name, tensor.dtype))
    if sparse_as_dense:
        return _sc.allreduce_async(tensor.detach().to_dense(), name=name, op=red,
                                   process_set=process_set)
    x = tensor.detach().coalesce()
    scope = _sc.process_sets_.scope(_sc._need(), process_set, "allreduce")
    size = scope.size
    # every rank's dtype and size, under the name itself: a rank that gives the name
    # another form, or to the COO path, fails there on every rank (_sparseform)
    _sparseform.agree(x, name, scope, process_set)
    parts = [x._indices().t().contiguous(), x._values().contiguous()]

    def gathered(res):
        idx, vals = res
        # integers are summed in int64 and then divided, as the dense path sums them in
        # its int32 buffer: an int8 average of 100 and 100 is 100, not a wrapped sum's
        wide = vals.dtype.is_floating_point or vals.dtype == torch.int64
        out = torch.sparse_coo_tensor(idx.t(), vals if wide else vals.to(torch.int64),
                                      x.shape).coalesce()
        if red == ReduceOp.AVERAGE:  # an integer average truncates, as a dense one
            div = out.values().div(size, rounding_mode=None if
                                   out.dtype.is_floating_point else "trunc")
            out = torch.sparse_coo_tensor(out.indices(), div, x.shape).coalesce()
        if out.dtype != x.dtype:  # a sum wraps in the tensor's dtype, as a dense one's
            out = torch.sparse_coo_tensor(out.indices(), out.values().to(x.dtype),
                                          x.shape).coalesce()
        return out

    return _DecompressHandle(_group(lambda t, n: _sc.allgather_async(t, n, process_set),
                                    parts, name), gathered, None)


_synchronized = weakref.WeakSet()  # handles synchronize() has cleared, as Horovod's


def synchronize(handle, timeout=None):
    """Waits for an operation started by an ``*_async`` call and returns its result
    (an alltoall's: the received tensor and the received splits, as Horovod's), once:
    as Horovod's, the handle is then cleared, and synchronize() of a cleared handle, or
    of anything that is not a handle, returns None.  A failed operation's error is
    raised once and clears it too; a timeout leaves it to synchronize() again."""
    if not callable(getattr(handle, "wait", None)) or _cleared(handle):
        return None
    try:
        res = handle.wait(timeout)
    except _sc.SparsecommError as e:
        if e.status != _sc._lib.SC_ERR_TIMEOUT:
            _clear(handle)
        raise
    _clear(handle)
    return res


def poll(handle):
    """True once the operation of ``handle`` has finished (synchronize() then returns at
    once).  A handle synchronize() has cleared, or anything that is not a handle, raises
    ValueError, as Horovod's ("was not created or has been cleared")."""
    if not callable(getattr(handle, "poll", None)) or _cleared(handle):
        raise ValueError("poll: handle %r was not created by an *_async call or has been "
                         "cleared by synchronize()" % (handle,))
    return handle.poll()


def _clear(handle):
    try:
        _synchronized.add(handle)
    except TypeError:  # not weakly referable: not one of the binding's handles
        pass


def _cleared(handle):
    try:
        return handle in _synchronized
    except TypeError:  # not weakly referable: none of the handles
        return False


class _AlltoallHandle:
    """An alltoall in flight, whose wait() gives Horovod's synchronize() result: the
    received tensor and the received splits (int32, on the device of the splits given,
    as Horovod's: a CUDA splits tensor gets CUDA received splits; else on the host)."""

    def __init__(self, handle, splits_device=None):
        self._h = handle
        self._splits_device = splits_device

    def poll(self):
        return self._h.poll()

    def done(self):
        return self._h.poll()

    def wait(self, timeout=None):
        out, recv = self._h.wait(timeout)
        return out, torch.as_tensor(recv, dtype=torch.int32, device=self._splits_device)

    __call__ = wait


def alltoall_async(tensor, splits=None, name=None, process_set=None, *, timeout=None):
    """Horovod's alltoall_async: a handle for synchronize(), which returns the received
    tensor and the received splits (sparsecomm.alltoall_async)."""
    return _AlltoallHandle(_sc.alltoall_async(tensor, splits, name, process_set,
                                              timeout=timeout),
                           splits.device if isinstance(splits, torch.Tensor) else None)


def alltoall(tensor, splits=None, name=None, process_set=None, *, timeout=None):
    """Horovod's alltoall: ``splits[r]`` rows of ``tensor`` go to rank r (default an even
    split, which must divide the first dimension); returns the rows received in rank
    order, and, when ``splits`` is given, also the received splits (an int32 tensor, one
    per rank), as Horovod returns them.  ``process_set``: among its members, in set-rank
    order.  Differentiable as Horovod's: the gradient goes back by an alltoall with the
    received splits."""
    def run(x):
        return alltoall_async(x, splits, name, process_set, timeout=timeout).wait(timeout)

    if _autograd.wanted(tensor):
        out, recv = _autograd.alltoall(tensor, run, lambda g, recv: alltoall(
            g, recv, None, process_set, timeout=timeout)[0])
    else:
        out, recv = run(tensor)
    return out if splits is None else (out, recv)


def allgather(tensor, name=None, process_set=None, *, timeout=None):
    """Horovod's allgather (sparsecomm.allgather), differentiable as Horovod's: the
    gradient is averaged across the ranks and each rank takes its own rows of it."""
    def run(x):
        return _sc.allgather(x, name, process_set, timeout=timeout)

    if _autograd.wanted(tensor):
        return _autograd.collective(tensor, run, lambda g: _allgather_back(
            [g], [tensor], process_set, timeout)[0])
    return run(tensor)


def _allgather_back(grads, inputs, process_set, timeout):
    """Horovod's gradients of (grouped) allgathers of ``inputs``: each gradient averaged
    across the ranks, each rank keeping the rows its input gave."""
    return _autograd.own_rows(grouped_allreduce(grads, True, None, process_set=process_set,
                                                timeout=timeout),
                              [t.shape[0] for t in inputs], process_set, timeout)


def broadcast(tensor, root_rank=0, name=None, process_set=None, *, timeout=None):
    """Horovod's broadcast (sparsecomm.broadcast), differentiable as Horovod's: the
    gradient is averaged across the ranks and kept on the root, zero elsewhere."""
    def run(x):
        return _sc.broadcast(x, root_rank, name, process_set, timeout=timeout)

    def back(g):
        g = allreduce(g, True, None, process_set=process_set, timeout=timeout)
        return g if _sc.rank() == root_rank else torch.zeros_like(g)

    if _autograd.wanted(tensor):
        return _autograd.collective(tensor, run, back)
    return run(tensor)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0, *, compression=Compression.none):
    """Horovod's reducescatter_async, its arguments in Horovod's order (the scale factors
    after the process set, as Horovod added them): a handle for synchronize() whose
    result is this rank's rows of the reduction (``op`` default Average; the scale
    factors as allreduce's).  ``compression`` (keyword-only, as on the other async
    forms): a reduce-scatter keeps the 32-bit wire, so a 16-bit compression rounds the
    values instead."""
    _refuse_adasum(op, "reducescatter")
    compressed, ctx = compression.compress(_scale(tensor, prescale_factor))
    return _DecompressHandle(_sc.reducescatter_async(compressed, op=op, name=name,
                                                     process_set=process_set),
                             lambda res: _scale(compression.decompress(res, ctx),
                                                postscale_factor), None)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=None, prescale_factor=1.0, postscale_factor=1.0, *,
                  timeout=None):
    """Horovod's argument order for sparsecomm.reducescatter (see reducescatter_async).
    Differentiable as Horovod's: the gradient (times the set's size for Sum, times the
    scale factors) is allgathered back into the rows of every rank."""
    def run(x):
        return reducescatter_async(x, name, op, process_set, prescale_factor,
                                   postscale_factor, compression=compression).wait(timeout)

    if _autograd.wanted(tensor):
        return _autograd.collective(tensor, run, lambda g: _reducescatter_back(
            [g], op, prescale_factor * postscale_factor, process_set, timeout)[0])
    return run(tensor)


def _reducescatter_back(grads, op, factor, process_set, timeout):
    """Horovod's gradients of (grouped) reduce-scatters: each gradient times the scale
    factors (and the set's size for Sum), allgathered back into every rank's rows."""
    if ReduceOp.parse(op) == ReduceOp.SUM:
        factor *= _sc.process_sets_.scope(_sc._need(), process_set, "reducescatter").size
    return grouped_allgather([_scale(g, factor) for g in grads], None, process_set,
                             timeout=timeout)


# ---- Horovod's grouped operations ----------------------------------------------------

class _GroupHandle:
    """The operations of a group (started by sparsecomm.grouped_start: the daemons hold
    them until every member is ready on every rank and fuse them together): wait() gives
    their results in order, under one deadline; the first error is raised once every
    member has finished."""

    def __init__(self, handles):
        self._hs = handles

    def poll(self):
        return all([h.poll() for h in self._hs])

    def done(self):
        return self.poll()

    def wait(self, timeout=None):
        import time
        tmo = _sc._need().timeout_s if timeout is None else float(timeout)
        deadline = time.monotonic() + tmo
        out, err = [], None
        for h in self._hs:
            try:
                out.append(h.wait(max(0.0, deadline - time.monotonic())))
            except Exception as e:  # noqa: B902  (every member is waited for first)
                out.append(None)
                err = err or e
        if err is not None:
            raise err
        return out

    __call__ = wait


def _group(start, tensors, name, alone=None):
    """Starts start(tensor, member name) for every tensor as one group
    (sparsecomm.grouped_start; member i of a named group is name.i, an unnamed group's
    members are unnamed).  A member refused at its start raises its error.  An empty
    tensor is a member as any other (its one-element stand-in submits: a rank whose
    member is not empty fails the group at once as a mismatch naming each shape).  A
    tensor for which alone(tensor) is true starts on its own after the group, keeping its
    place in the results."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("a grouped operation needs at least one tensor")
    names = [None if name is None else "%s.%d" % (name, i) for i in range(len(tensors))]
    out = [None] * len(tensors)
    grouped = [i for i, t in enumerate(tensors) if not (alone and alone(t))]
    if grouped:
        hs = _sc.grouped_start([(lambda t=tensors[i], n=names[i]: start(t, n))
                                for i in grouped])
        for i, h in zip(grouped, hs):
            out[i] = h
    for i, t in enumerate(tensors):
        if out[i] is None:
            out[i] = start(t, names[i])
    return _GroupHandle(out)


def _outside_group(kw):
    """Which tensors of a grouped allreduce (options ``kw``) start outside its group: a
    sparse one that _sparse_async reduces by allgathers (not float32, float16 or
    bfloat16, nor sparse_as_dense).  Such a tensor's exchanges, its form's and its parts'
    own group, each wait for every rank before the next starts, so as a member it held
    the group open: the exchange of its form joined the group and waited for members not
    yet submitted (SC_ERR_BUSY or a stall).  Started after the group, it keeps its place
    in the results."""
    as_dense = kw.get("sparse_as_dense", False)

    def outside(t):
        return _sc._is_torch(t) and t.is_sparse and not as_dense and t.dtype not in _COO_DTYPES
    return outside


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, *,
                            compression=Compression.none, **kw):
    """Horovod's grouped_allreduce_async: every tensor's allreduce submitted before any
    is waited for; synchronize() gives the list of results."""
    return _group(lambda t, n: allreduce_async(t, average, n, op, prescale_factor,
                                               postscale_factor, process_set,
                                               compression=compression, **kw),
                  tensors, name, _outside_group(kw))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None, *,
                             compression=Compression.none, **kw):
    """In place: synchronize() writes each result into its tensor."""
    return _group(lambda t, n: allreduce_async_(t, average, n, op, prescale_factor,
                                                postscale_factor, process_set,
                                                compression=compression, **kw),
                  tensors, name, _outside_group(kw))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None,
                      *, timeout=None, **kw):
    """Horovod's grouped_allreduce; differentiable as allreduce (the gradients go back by
    a grouped allreduce with the same op and factors)."""
    tensors = list(tensors)

    def run(xs):
        return grouped_allreduce_async(xs, average, name, op, prescale_factor,
                                       postscale_factor, process_set,
                                       compression=compression, **kw).wait(timeout)

    if any(_autograd.wanted(t) for t in tensors):
        return _autograd.grouped(tensors, run, lambda gs: grouped_allreduce(
            gs, average, None, Compression.none, op, prescale_factor, postscale_factor,
            process_set, timeout=timeout))
    return run(tensors)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None, *,
                       compression=Compression.none, timeout=None, **kw):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, compression=compression,
                                    **kw).wait(timeout)


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Horovod's grouped_allgather_async (each member's sizes are exchanged as it is
    started, its rows with the others')."""
    return _group(lambda t, n: _sc.allgather_async(t, n, process_set), tensors, name)


def grouped_allgather(tensors, name=None, process_set=None, *, timeout=None):
    """Horovod's grouped_allgather; differentiable as allgather (the gradients averaged
    by a grouped allreduce, each rank keeping its own rows)."""
    tensors = list(tensors)

    def run(xs):
        return grouped_allgather_async(xs, name, process_set).wait(timeout)

    if any(_autograd.wanted(t) for t in tensors):
        return _autograd.grouped(tensors, run, lambda gs: _allgather_back(
            gs, tensors, process_set, timeout))
    return run(tensors)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0, *,
                                compression=Compression.none):
    return _group(lambda t, n: reducescatter_async(t, n, op, process_set, prescale_factor,
                                                   postscale_factor, compression=compression),
                  tensors, name)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=None, prescale_factor=1.0, postscale_factor=1.0, *,
                          timeout=None):
    """Horovod's grouped_reducescatter; differentiable as reducescatter (the gradients,
    scaled, go back by a grouped allgather)."""
    tensors = list(tensors)

    def run(xs):
        return grouped_reducescatter_async(xs, name, op, process_set, prescale_factor,
                                           postscale_factor,
                                           compression=compression).wait(timeout)

    if any(_autograd.wanted(t) for t in tensors):
        return _autograd.grouped(tensors, run, lambda gs: _reducescatter_back(
            gs, op, prescale_factor * postscale_factor, process_set, timeout))
    return run(tensors)


# ---- Horovod's SyncBatchNorm ----------------------------------------------------------

class _AllreduceSum(torch.autograd.Function):
    """A sum allreduce that autograd differentiates: the gradient of a sum over the ranks
    is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.name = name
        return _sc.allreduce(tensor.contiguous(), name=name, op=ReduceOp.SUM)

    @staticmethod
    def backward(ctx, grad):
        return _sc.allreduce(grad.contiguous(), name=ctx.name + ".grad", op=ReduceOp.SUM), None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Horovod's SyncBatchNorm: in training, batch normalisation over the batches of every
    rank together (their batch sizes may differ).  Each rank's per-channel sum, sum of
    squares and count are summed in float64 and across the ranks in float64 (one
    allreduce, named "sync_batch_norm.<device type>.<C>" by the number of channels, as
    Horovod names its statistics by what they are rather than by module: the ranks need
    not make the same modules in the same order, only run their forward passes in the
    same order), the mean and biased variance normalise the input, and backward sums
    the statistics' gradients the same way, so the result and the gradients are those
    of one batch norm over the concatenated batch; the normalisation is computed in the
    input's dtype (float32 for 16-bit inputs, which are returned in their own dtype,
    affine or not).  The running statistics take the unbiased variance; in eval mode it
    is a plain batch norm on them."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("SyncBatchNorm: expected at least 2-D input (got %d-D)" %
                             input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training and self.track_running_stats:
            return torch.nn.functional.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, False,
                0.0, self.eps)
        C = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        # the statistics in float64 (summed from the input's float32 values at least, so
        # float16 squares do not overflow); the activation itself is never widened past
        # float32
        x = input if input.dtype in (torch.float32, torch.float64) else input.float()
        f64 = torch.float64
        local = torch.cat([x.sum(dims, dtype=f64), (x * x).sum(dims, dtype=f64),
                           torch.tensor([float(input.numel() // max(C, 1))], dtype=f64,
                                        device=input.device)])
        # one name per shape and device type of the statistics (2C + 1 values), never
        # per module: a module only some ranks make (an evaluation copy on rank 0)
        # leaves the others' names as they are; each forward and backward waits for its
        # allreduce, so two modules of one width run from one thread never have the name
        # in flight together (from several threads they could pair across ranks: README)
        tot = _AllreduceSum.apply(local, "sync_batch_norm.%s.%d" % (input.device.type, C))
        n = tot[-1]
        if float(n) == 0:
            raise ValueError("SyncBatchNorm: every rank's batch is empty")
        mean = tot[:C] / n
        var = (tot[C:2 * C] / n - mean * mean).clamp_min(0.0)
        shape = [1, C] + [1] * (input.dim() - 2)
        invstd = torch.rsqrt(var + self.eps)
        out = (x - mean.to(x.dtype).view(shape)) * invstd.to(x.dtype).view(shape)
        if self.affine:
            out = out * self.weight.to(x.dtype).view(shape) + self.bias.to(x.dtype).view(shape)
        out = out.to(input.dtype)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                     else self.momentum)
                unbiased = var * n / max(float(n) - 1.0, 1.0)
                self.running_mean.mul_(1 - m).add_(mean.to(self.running_mean.dtype) * m)
                self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var.dtype) * m)
        return out


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, o):
        super(self.__class__, self).__init__(params)
        process_set = o["process_set"]
        # Horovod's: a trainer outside the set registers no hooks, and its synchronize()
        # does nothing; a set not added is refused now, not at the first gradient
        self._included = not (isinstance(process_set, ProcessSet) and
                              process_set.included() is False)
        if self._included:
            _sc.process_sets_.scope(_sc._need(), process_set, "DistributedOptimizer")
        # Horovod's attribute: the set itself, the global one by default
        self.process_set = global_process_set if process_set is None else process_set
        self.op = o["op"]
        self.gradient_predivide_factor = o["gradient_predivide_factor"]
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if not all(isinstance(item, tuple) and len(item) == 2 and
                       isinstance(item[1], torch.Tensor) for item in named):
                # Horovod's ValueError (model.parameters() given in its place)
                raise ValueError("named_parameters should be a sequence of tuples (name, "
                                 "parameter), usually produced by "
                                 "model.named_parameters()")
        else:
            named = [("param.%d.%d" % (gi, pi), p) for gi, g in enumerate(self.param_groups)
                     for pi, p in enumerate(g["params"])]
        names = [n for n, _ in named]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError("named_parameters has duplicate names: %s" % ", ".join(dups))
        self._name = {}
        for n, p in named:
            self._name.setdefault(p, n)
        unnamed = [p for p in all_params if p not in self._name]
        if unnamed:
            raise ValueError("%d optimizer parameter(s) missing from named_parameters" %
                             len(unnamed))
        self._defaults_sc = {k: o[k] for k in ("sparsifier", "density", "threshold",
                                               "scheme", "allow_lossy")}
        self._overrides = o["overrides"]
        self._average = o["average"]
        self._timeout = o["timeout"]
        self.backward_passes_per_step = int(o["backward_passes_per_step"])
        self.sparse_as_dense = o["sparse_as_dense"]
        self._prefix = o["prefix"]
        self._compression = o["compression"]
        self._groups = o["groups"]
        self._handles = {}
        self._start = {}  # Adasum: where each parameter started its step
        self._delay = {}
        self._seen_sparse = {}  # parameter -> the sparse_dim of its sparse gradients
        self._prescaled = set()  # submitted divided by gradient_predivide_factor
        self._synchronized = False
        self._should_sync = True
        self._hooks = []
        self._hook_of = {}  # parameter -> its hook's handle
        self._grad_accs = []
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._opts = {}
        self._explicit = {}
        self._dense_opts = {}  # parameter -> its dense gradient's allreduce keywords
        self._rerun = {}  # parameter -> its last start, to repeat (sparsecomm._rerun)
        self._batch_us = o["submit_batch_us"]
        self._batching = None  # the client whose submissions the hooks batch now
        for p in self._requires_update:
            self._opts[p], self._explicit[p] = self._resolve(self._name[p], p)
        if self._included:
            self._register_hooks()

    # -- Horovod's attributes and calls --
    def set_backward_passes_per_step(self, passes):
        """Horovod's: gradients of ``passes`` backward passes accumulate before they are
        reduced, from now on (every parameter's count starts again)."""
        self.backward_passes_per_step = int(passes)
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's, after the reductions in flight are waited for (their
        results dropped) and every count starts again, as Horovod's resets them."""
        self._batch_off()
        handles, self._handles = self._handles, {}
        deadline = _sc._now() + (_sc._ctx.timeout_s if self._timeout is None
                                 else float(self._timeout))
        for h in handles.values():
            try:
                h.wait(timeout=max(deadline - _sc._now(), 0.001))
            except _sc.SparsecommError:
                pass  # dropped with its result: the state being loaded replaces it
        self._prescaled.clear()
        self._start.clear()
        self._synchronized = False
        self._should_sync = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    def _load_state_keeping_reductions(self, state):
        """The wrapped optimizer's load_state_dict() alone, for broadcast_optimizer_state:
        the reductions in flight and the backward passes counted are kept, for step() to
        apply, as Horovod's broadcast writes the root's values into the state and the
        groups and resets nothing.  (Dropped, a rank's step() would submit its gradients
        again, and those would meet the other ranks' of the next step.)"""
        return super(self.__class__, self).load_state_dict(state)

    # -- per-parameter options --
    def _resolve(self, name, p):
        o = dict(self._defaults_sc)
        ov = self._overrides
        extra = None
        if callable(ov):
            extra = ov(name, p)
        elif ov:
            if name in ov:
                extra = ov[name]
            else:
                for pat, val in ov.items():
                    if fnmatch.fnmatchcase(name, pat):
                        extra = val
                        break
        if extra:
            bad = set(extra) - set(_OPT_KEYS)
            if bad:
                raise ValueError("override for %s has unknown keys %s" % (name, sorted(bad)))
            o.update(extra)
        return o, dict(extra or {})

    def _register_hooks(self):
        for p in self._requires_update:
            self._hook(p)

    def _hook(self, p):
        self._delay[p] = self.backward_passes_per_step
        if hasattr(p, "register_post_accumulate_grad_hook"):
            h = p.register_post_accumulate_grad_hook(self._make_hook(p, post=True))
        else:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            h = acc.register_hook(self._make_hook(p))
            self._grad_accs.append(acc)  # keeps the node (and its hook) alive
        self._hooks.append(h)
        self._hook_of[p] = h

    def _follow_requires_grad(self):
        """Parameters whose requires_grad changed since the last step (a layer frozen or
        unfrozen, as every rank does alike): a frozen one is no longer reduced (its grad
        stays as the model left it, None for an optimizer to skip), one that needs a
        gradient again is reduced from this step on (submitted by synchronize() now, by
        its hook afterwards)."""
        now = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        # by identity: == between tensors compares their values
        if len(now) == len(self._requires_update) and all(
                a is b for a, b in zip(now, self._requires_update)):
            return
        keep = set(now)
        for p in self._requires_update:
            if p not in keep and p in self._hook_of:
                h = self._hook_of.pop(p)
                h.remove()
                self._hooks.remove(h)
        for p in now:
            if p not in self._hook_of:
                self._opts[p], self._explicit[p] = self._resolve(self._name[p], p)
                self._dense_opts.pop(p, None)
                self._rerun.pop(p, None)
                self._hook(p)
        self._requires_update = now

    def _make_hook(self, p, post=False):
        def hook(*_):
            if p in self._handles and self._delay[p] <= 0:
                raise AssertionError(
                    "gradient of %s computed more than backward_passes_per_step=%d times "
                    "before step(); call step() (or synchronize()) between backward passes"
                    % (self._name[p], self.backward_passes_per_step))
            self._delay[p] -= 1
            if self._delay[p] == 0 and not self._deferred(p):
                if self._batch_us and self._batching is not _sc._ctx:
                    self._batch(True)
                self._handles[p] = self._submit(p)
        return hook

    def _batch_off(self):
        if self._batching is not None:
            self._batch(False)

    def _batch(self, on):
        """Starts batching the hooks' submissions (submit_batch_us), or ends it and sends
        what is held (synchronize(), before it waits)."""
        if on:
            c = _sc._ctx
            if c is None or c.closed:
                return
            st = _lib.load().sc_submit_batch(c.client, self._batch_us)
            if st != _lib.SC_OK:
                raise _sc._error(st, "submit_batch_us")
            self._batching = c
            return
        c, self._batching = self._batching, None
        if c is not None and not c.closed:
            st = _lib.load().sc_submit_batch(c.client, 0)
            if st != _lib.SC_OK:
                raise _sc._error(st, "submit_batch_us")

    def _deferred(self, p):
        """Whether p's gradient waits for synchronize() rather than starting in its hook:
        a sparse gradient of a dtype the COO path does not carry (float64, an integer
        dtype) is reduced by allgathers whose start waits for every rank's, and backward's
        hooks fire in an order that differs between ranks that use different parameters
        (an embedding one rank did not look up this step): two ranks could each wait in
        a hook for the other.  synchronize() starts them in one order on every rank."""
        g = p.grad
        return (g is not None and g.is_sparse and g.dtype not in _COO_DTYPES and
                not self.sparse_as_dense and self._average is not ReduceOp.ADASUM)

    def _reduction(self):
        """The gradients' reduction: Average, Sum (``average``) or Adasum (``op``)."""
        if self._average is ReduceOp.ADASUM:
            return dict(op=ReduceOp.ADASUM)
        return dict(average=self._average)

    def _op_of_average(self):
        return ReduceOp.AVERAGE if self._average else ReduceOp.SUM

    def _local_step(self, p):
        """The wrapped optimizer's step on p alone (its gradient, its state), as if p were
        its only parameter."""
        stash = [g["params"] for g in self.param_groups]
        for g in self.param_groups:
            g["params"] = [p] if any(p is q for q in g["params"]) else []
        try:
            super(self.__class__, self).step()
        finally:
            for g, ps in zip(self.param_groups, stash):
                g["params"] = ps

    def _submit_adasum(self, p, name):
        """Horovod's Adasum optimizer: the local optimizer's step on p is taken alone, and
        its change (the delta from where p started) is what the trainers combine by the
        Adasum operator; p stays at its start until synchronize() adds the combined
        delta.  The delta is dense whatever the gradient, so a sparse gradient (that the
        wrapped optimizer takes, as SGD does) is stepped as it is, as Horovod's is."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        with torch.no_grad():
            start = p.detach().clone()
            self._local_step(p)
            delta = p.detach() - start
            p.copy_(start)
        self._start[p] = start
        opts = dict(name=name, op=ReduceOp.ADASUM, process_set=self.process_set)
        if self._compression is NoneCompressor:
            return _sc.allreduce_async_(delta, **opts)
        return _compressed_async(self._compression, delta, delta, **opts)

    def _submit(self, p):
        """Starts p's reduction.  Its buffer is kept registered (never released for room,
        sparsecomm's module doc): each parameter is reduced every step."""
        r = self._rerun.get(p)
        if (r is not None and self.gradient_predivide_factor == 1.0 and
                p not in self._seen_sparse):
            # the last step's start again (a dense gradient, as then), where it holds
            g = p.grad
            h = _rerun.start(r, g, _sc._ctx) if g is not None else None
            if h is not None:
                return h
        with _sc._lru.keeping():
            return self._start_reduction(p)

    def _start_reduction(self, p):
        name = "%s%s" % (self._prefix, self._name[p])
        if self._average is ReduceOp.ADASUM:
            return self._submit_adasum(p, name)
        g = p.grad
        o = self._opts[p]
        if (g is None or (g.is_sparse and g._nnz() == 0 and p in self._seen_sparse and
                          g.sparse_dim() != self._seen_sparse[p])):
            # none (a parameter this rank did not use), or one zero_grad() zeroed, which
            # makes a sparse gradient's every dimension sparse: an empty list of the
            # sparse dimensions it was reduced with
            if p in self._seen_sparse:
                sd = self._seen_sparse[p]
                g = torch.sparse_coo_tensor(
                    torch.empty((sd, 0), dtype=torch.int64, device=p.device),
                    torch.empty((0,) + tuple(p.shape[sd:]), dtype=p.dtype, device=p.device),
                    p.shape)
            else:
                p.grad = g = torch.zeros_like(p)
        elif not g.is_sparse and p in self._seen_sparse:
            # a parameter reduced sparse keeps its name's COO registration: a dense
            # gradient of it (one the model or the user made dense) travels as a list
            g = g.to_sparse(self._seen_sparse[p])
        f = self.gradient_predivide_factor
        # Horovod's: 1/f before the sum, f after the average; for a dense gradient that
        # the daemon sums as it is (a sparsifier's threshold, DGC's sample and a residual
        # are in the gradient's own scale, so a sparsified one is left as it is, as is a
        # sparse one: its result may come back dense under sparse_as_dense)
        if f != 1.0 and not g.is_sparse and o["sparsifier"] in (None, "none"):
            with torch.no_grad():
                g.mul_(1.0 / f)
            self._prescaled.add(p)
        if g.is_sparse:
            self._seen_sparse[p] = g.sparse_dim()
            # The default sparsifier is for dense gradients; a natively sparse one is
            # sparsified further only when its own override asks for it.
            sp = self._explicit[p].get("sparsifier")
            return _sparse_async(
                g, name, ReduceOp.parse(self._reduction().get("op", self._op_of_average())),
                sparsifier=sp, density=o["density"], threshold=o["threshold"],
                scheme=o["scheme"], allow_lossy=o["allow_lossy"],
                coo_capacity=o.get("coo_capacity"), sparse_as_dense=self.sparse_as_dense,
                process_set=self.process_set)
        opts = self._dense_opts.get(p)
        if opts is None:  # the same every step: built once (reset with its options)
            opts = self._dense_opts[p] = dict(
                name=name, sparsifier=o["sparsifier"], **self._reduction(),
                density=o["density"], threshold=o["threshold"], scheme=o["scheme"],
                allow_lossy=o["allow_lossy"], block=o.get("block"),
                process_set=self.process_set)
        if self._compression is not NoneCompressor:
            return _compressed_async(self._compression, g, g, **opts)
        h = _sc.allreduce_async_(g, **opts)
        # _submit repeats this start next step (with gradient_predivide_factor 1)
        try:
            self._rerun[p] = _rerun.of(h, g, _sc._op(opts.get("average", True),
                                                     opts.get("op")))
        except Exception:  # noqa: B902  (none to repeat: the next goes the full way)
            self._rerun.pop(p, None)
        return h

    # -- Horovod's optimizer protocol --
    def synchronize(self):
        """Submits what backward did not, waits for every gradient, writes them back (on
        a trainer outside the optimizer's process set: nothing, as Horovod's)."""
        if not self._included:
            self._synchronized = True
            return
        try:
            self._follow_requires_grad()
            for p in self._requires_update:
                if p not in self._handles:
                    self._handles[p] = self._submit(p)
        finally:  # what the hooks held goes before any wait, even after an error
            self._batch_off()
        deadline = _sc._now() + (_sc._ctx.timeout_s if self._timeout is None
                                 else float(self._timeout))
        handles, self._handles = self._handles, {}
        for p in self._requires_update:
            self._delay[p] = self.backward_passes_per_step
        for p, h in handles.items():
            left = max(0.0, deadline - _sc._now())
            res = h.wait(timeout=max(left, 0.001))
            if self._average is ReduceOp.ADASUM:  # the combined delta, from the start
                with torch.no_grad():
                    p.copy_(self._start.pop(p) + res)
            else:
                if res is not p.grad:  # sparse results are new tensors
                    p.grad = self._as_submitted(p, res)
                if p in self._prescaled:
                    self._prescaled.discard(p)
                    with torch.no_grad():
                        p.grad.mul_(self.gradient_predivide_factor)
        self._synchronized = True

    def _as_submitted(self, p, res):
        """The reduced gradient in the layout p's gradient had: a sparse gradient stays
        sparse, with its sparse_dim, under sparse_as_dense too (as Horovod's, so that a
        sparse optimizer such as SparseAdam takes it and the next backward accumulates
        into a sparse gradient again); a gradient made dense before it was submitted
        comes back dense."""
        sd = self._seen_sparse.get(p)
        if sd is None:
            return res
        if p.grad is not None and not p.grad.is_sparse:
            return res.to_dense() if res.is_sparse else res
        return res if res.is_sparse else res.to_sparse(sd)

    @contextmanager
    def skip_synchronize(self):
        """For `optimizer.synchronize(); clip(...); with optimizer.skip_synchronize():
        optimizer.step()`."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def step(self, closure=None):
        loss = None
        if self._average is ReduceOp.ADASUM and closure is not None:
            loss = closure()  # its backward submits the local steps' changes
        if self._should_sync:
            if self._synchronized:
                # Horovod's warning; the gradients are already reduced, so they are not
                # reduced a second time (every rank skips alike)
                warnings.warn("optimizer.step() called without optimizer."
                              "skip_synchronize() context after optimizer.synchronize(); "
                              "wrap step() in optimizer.skip_synchronize()")
            else:
                self.synchronize()
        self._synchronized = False
        if self._average is ReduceOp.ADASUM:
            # each parameter's local step was taken when its gradient was ready, and
            # synchronize() applied the combined deltas: nothing more to step
            return loss
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradients are being reduced; call "
                                 "step() or synchronize() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def remove_hooks(self):
        self._batch_off()
        for h in self._hooks:
            h.remove()
        self._hooks, self._grad_accs, self._hook_of = [], [], {}


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None, *,
                         sparsifier=None, density=0.0, threshold=0.0, scheme=None,
                         allow_lossy=False, overrides=None, average=None, timeout=None,
                         prefix="grad.", submit_batch_us=None):
    """Horovod's DistributedOptimizer, its arguments in Horovod's order: wraps
    ``optimizer`` so that gradients are averaged across every trainer before each step.
    Returns an instance of a subclass of the optimizer's own class (so LR schedulers keep
    working) sharing its param_groups, with Horovod's attributes backward_passes_per_step,
    op, gradient_predivide_factor, sparse_as_dense and process_set, and its
    set_backward_passes_per_step(), synchronize() and skip_synchronize().

    named_parameters: model.named_parameters() (names become tensor names, prefixed
    with ``prefix``); compression (Compression.none, fp16, bf16: applied to dense
    gradients, see :class:`FP16Compressor`); backward_passes_per_step: the gradients of
    that many backward passes accumulate in ``p.grad`` before they are reduced (step()
    after the last); op: Average (the default), Sum or Adasum.  With Adasum, as Horovod's
    Adasum optimizer does, each parameter takes the wrapped optimizer's step locally
    when its gradient is ready, and the trainers combine the steps' changes by the Adasum
    operator; step() then applies them (the wrapped optimizer's step is not taken again).
    gradient_predivide_factor f (op Average only, else ValueError, as Horovod's): each
    dense gradient is multiplied by 1/f before the sum and by f after the average (sparse
    gradients are reduced as they are).  groups and num_groups (Horovod's explicit
    fusion groups) are checked by Horovod's rules and otherwise change nothing here: the
    daemons fuse whichever gradients are ready together on every rank.
    sparse_as_dense: sparse gradients travel with a dense result and are written back
    sparse, as Horovod's (with their sparse_dim).  process_set: the gradients are
    averaged among its members only, so that parts of a model (the towers of a two-tower
    model, the stages of a pipeline) train in sets of their own, each with an optimizer
    of its own; on a trainer outside the set the optimizer registers no hooks and its
    synchronize() does nothing, as Horovod's.

    Keyword-only, sparsecomm's: sparsifier/density/threshold/scheme/allow_lossy:
    defaults for every dense gradient; overrides: per-parameter options (see the module
    doc); average: the older form of op (True: Average, False: Sum); timeout: seconds
    step() waits in all (None: init()'s default); prefix: of the tensor names;
    submit_batch_us (None: the environment's SPARSECOMM_SUBMIT_BATCH_US, else 0): above 0,
    the gradients whose hooks fire during a backward pass are sent to the daemon in
    batches (sparsecomm.h, sc_submit_batch: the next one window_us after the first held
    sends the batch, and synchronize() sends the rest before it waits), so that the daemon
    wakes once a batch rather than once a gradient; 0 sends each gradient as its hook
    fires, as Horovod does."""
    if op is not None and average is not None:
        raise ValueError("DistributedOptimizer: give op or average (its older form), not "
                         "both")
    red = ReduceOp.parse(Average if op is None else op)
    if average is not None:
        red = ReduceOp.AVERAGE if average else ReduceOp.SUM
    if red not in (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.ADASUM):
        raise ValueError("DistributedOptimizer: op must be Average, Sum or Adasum, not %s" %
                         red.name)
    if gradient_predivide_factor != 1.0 and red != ReduceOp.AVERAGE:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0 and groups is None:
        warnings.warn("DistributedOptimizer: num_groups has been replaced by groups (as "
                      "in Horovod)", DeprecationWarning)
        groups = num_groups
    _check_groups(groups)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    opt = cls(optimizer.param_groups, named_parameters, dict(
        sparsifier=sparsifier, density=density, threshold=threshold, scheme=scheme,
        allow_lossy=allow_lossy, overrides=overrides, timeout=timeout, prefix=prefix,
        average=red if red == ReduceOp.ADASUM else red == ReduceOp.AVERAGE, op=red,
        backward_passes_per_step=backward_passes_per_step, sparse_as_dense=sparse_as_dense,
        compression=compression, process_set=process_set, groups=groups,
        gradient_predivide_factor=float(gradient_predivide_factor),
        submit_batch_us=_batch_us(submit_batch_us)))
    opt.state = optimizer.state
    return opt


def _batch_us(us):
    """DistributedOptimizer's submit_batch_us, checked (None: the environment's)."""
    if us is None:
        env = os.environ.get("SPARSECOMM_SUBMIT_BATCH_US", "").strip()
        try:
            us = int(env) if env else 0
        except ValueError:
            raise ValueError("SPARSECOMM_SUBMIT_BATCH_US=%r is not a whole number of "
                             "microseconds" % env) from None
    if isinstance(us, bool) or not isinstance(us, int) or not 0 <= us <= 10000000:
        raise ValueError("DistributedOptimizer: submit_batch_us must be a whole number of "
                         "microseconds within 0 .. 10000000, not %r" % (us,))
    return us


def _check_groups(groups):
    """Horovod's rules for DistributedOptimizer's groups: None, a positive int, or a list
    of lists of tensors in which no tensor appears twice (ValueError otherwise)."""
    if groups is None:
        return
    if not isinstance(groups, list) and not (isinstance(groups, int) and groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))


def _named(params):
    """(name, tensor) pairs of a state_dict, an iterable of pairs, or of bare tensors (as
    Horovod's accepts): a bare tensor, or a pair named None, is named by its position.
    Anything else (the model itself, one tensor, a number) is Horovod's ValueError."""
    if isinstance(params, dict):
        items = list(params.items())
    elif isinstance(params, (torch.nn.Module, torch.Tensor)) or \
            not isinstance(params, collections.abc.Iterable):
        raise ValueError("broadcast_parameters: invalid params of type: %s (a state_dict, "
                         "named_parameters() or a list of tensors)" % type(params))
    else:
        items = list(params)
    out = []
    for i, item in enumerate(items):
        n, t = item if isinstance(item, (tuple, list)) else (None, item)
        out.append(("unnamed.%d" % i if n is None else n, t))
    return out


def broadcast_parameters(params, root_rank=0, process_set=None, *, prefix="broadcast.",
                         timeout=None):
    """Copies root_rank's values into every rank's tensors, in place.  params: a
    state_dict (name -> tensor), an iterable of (name, tensor), or of bare tensors
    (model.parameters(); a bare tensor, or one named None, is named by its position in
    ``params``, the same on every rank).  Each is broadcast under ``prefix`` + its name.
    ``process_set``: among its members, root_rank (a global rank) one of them.  The
    registrations are released once the broadcasts are done."""
    _check_process_set(process_set, "broadcast_parameters")
    items = [(n, t) for n, t in _named(params) if t is not None]
    hs = []
    try:
        with torch.no_grad():
            for n, t in items:
                hs.append(_sc.broadcast_async_(t, root_rank=root_rank, name=prefix + n,
                                               process_set=process_set))
            for h in hs:
                h.wait(timeout)
    finally:  # used once: the daemon keeps no copy of every parameter for the job
        for h in hs:
            _sc._release_done(h)


def broadcast_optimizer_state(optimizer, root_rank=0, process_set=None, *,
                              name="broadcast.optimizer_state", timeout=None, model=None):
    """Loads root_rank's optimizer state (state_dict: hyperparameters, momentum buffers,
    step counts) into ``optimizer`` on every other rank.  A rank whose optimizer has not
    stepped yet gets the root's state all the same (the whole state travels, so
    Horovod's priming step, which creates the state before its per-tensor broadcasts, is
    not needed, and torch.optim.LBFGS's state travels too).  The root's tensors travel
    from host memory: each rank's load_state_dict() puts them on its own parameters'
    devices (a CUDA state unpickled as it was would land on the root's GPU index).
    ``process_set``: among its members, root_rank (a global rank) one of them
    (Horovod's third argument; a torch.nn.Module there, as some Horovod versions take a
    ``model``, is accepted and not needed).  A root that cannot produce its state fails every rank
    with its reason, rather than leaving them waiting.  Called between backward() and
    step() (or between the passes of backward_passes_per_step), it leaves a
    DistributedOptimizer's reductions in flight and its passes counted as they are, for
    step() to apply, as Horovod's: the optimizer's own load_state_dict() would drop
    them."""
    if isinstance(process_set, torch.nn.Module):
        model, process_set = process_set, None
    _check_process_set(process_set, "broadcast_optimizer_state")
    c = _sc._need()
    root_rank = _sc.process_sets_.scope(c, process_set, "broadcast_optimizer_state").root(
        root_rank, "broadcast_optimizer_state")
    me = c.rank
    mine = None
    if me == root_rank:
        try:
            mine = _on_host(optimizer.state_dict())
        except Exception as e:  # every rank learns it through the broadcast
            mine = _RootFailed("%s: %s" % (type(e).__name__, e))
    state = _sc.broadcast_object(mine, root_rank, name=name, process_set=process_set,
                                 timeout=timeout)
    if isinstance(state, _RootFailed):
        raise _sc.SparsecommError(_sc._lib.SC_ERR_ABORTED,
                                  "broadcast_optimizer_state: the root (rank %d) could not "
                                  "take its optimizer's state: %s" % (root_rank, state.why))
    if me != root_rank:
        _load_in_place(optimizer, state)


def _load_in_place(optimizer, state):
    """optimizer.load_state_dict(state), its param_groups' dicts and its state dict kept
    (updated, not replaced), as Horovod's broadcast_optimizer_state writes into them: a
    DistributedOptimizer shares them with the optimizer it wraps, and an LR scheduler
    made on that optimizer before it was wrapped sets the learning rate in those dicts;
    replaced, the scheduler would go on setting rates no step reads on this rank."""
    groups, kept = optimizer.param_groups, optimizer.state
    getattr(optimizer, "_load_state_keeping_reductions", optimizer.load_state_dict)(state)
    for old, new in zip(groups, optimizer.param_groups):
        old.update(new)
    kept.clear()
    kept.update(optimizer.state)
    optimizer.param_groups, optimizer.state = groups, kept


class _RootFailed:
    """What the root of broadcast_optimizer_state sends when it has no state to send."""

    def __init__(self, why):
        self.why = why


def _check_process_set(process_set, what):
    """The same refusal on every rank, before anything starts, for a third positional
    argument of another kind (before Horovod's order, a name or prefix went there)."""
    if process_set is not None and not isinstance(process_set, _sc.ProcessSet):
        raise TypeError("%s: process_set must be a ProcessSet (name= and prefix= are "
                        "keyword arguments), not %r" % (what, process_set))


def _on_host(obj):
    """obj (a state_dict: dicts, lists and tuples of tensors and plain values) with every
    tensor copied to host memory."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.device.type != "cpu" else obj
    if isinstance(obj, dict):  # a copy keeps the kind (a defaultdict's factory too)
        out = copy.copy(obj)
        for k, v in obj.items():
            out[k] = _on_host(v)
        return out
    if isinstance(obj, (list, tuple)):
        vals = [_on_host(v) for v in obj]
        try:
            return type(obj)(*vals) if hasattr(obj, "_fields") else type(obj)(vals)
        except TypeError:  # a sequence type built otherwise: a plain one of its kind
            return tuple(vals) if isinstance(obj, tuple) else vals
    return obj


def broadcast_object_int(value, root_rank=0, name="broadcast.int"):
    """Broadcasts one integer from root_rank (used to agree on a port)."""
    t = torch.tensor([int(value) if _sc.rank() == root_rank else 0], dtype=torch.int64)
    _sc.broadcast_(t, root_rank=root_rank, name=name)
    return int(t.item())


def netns_addrs():
    """The node addresses exported by `sparsecomm-run --netns` (empty list otherwise)."""
    raw = os.environ.get("SPARSECOMM_NETNS_ADDRS", "")
    return [a for a in re.split(r"[,\s;]+", raw) if a]


def init_process_group(backend="gloo", timeout_s=120):
    """torch.distributed.init_process_group for the sparsecomm job (see the module doc)."""
    import datetime

    import torch.distributed as dist
    if dist.is_initialized():
        return
    addrs = netns_addrs()
    addr = os.environ.get("MASTER_ADDR") or (addrs[0] if addrs else "127.0.0.1")
    if addrs and backend == "gloo" and not os.environ.get("GLOO_SOCKET_IFNAME"):
        # gloo binds to the address the host name resolves to (loopback inside a
        # namespace): point it at the interface that holds this node's address
        ifname = _ifname_of(addrs)
        if ifname:
            os.environ["GLOO_SOCKET_IFNAME"] = ifname
    port = os.environ.get("MASTER_PORT")
    if not port:
        free = 0
        if _sc.rank() == 0:
            s = _socket.socket()
            s.bind((addr, 0))
            free = s.getsockname()[1]
            s.close()
        port = broadcast_object_int(free, name="broadcast.master_port")
    dist.init_process_group(backend, init_method="tcp://%s:%s" % (addr, port),
                            rank=_sc.rank(), world_size=_sc.size(),
                            timeout=datetime.timedelta(seconds=timeout_s))


def _ifname_of(addrs):
    import subprocess
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[3].split("/")[0] in addrs:
            return f[1].split("@")[0]
    return None


class DDPHookState:
    """Options of :func:`ddp_hook`: the sparsifier options, the wait timeout (seconds),
    a name prefix, and with a sparsifier where it selects (``selection``):

    * ``"parameter"`` (the default): SAFusion's order, as :func:`DistributedOptimizer`:
      each parameter's gradient in the bucket is its own tensor (named
      <prefix>.b<index>.p<position> after the bucket and position where it was first
      seen, so it keeps its name, k and residual when DDP rebuilds its buckets), selected
      on its own with its own k and residual, and the daemons fuse the selections;
    * ``"bucket"``: the whole bucket selected as one tensor, sparsification behind
      fusion, in which a small parameter beside large ones can get nothing.

    Without a sparsifier a bucket is one dense tensor, named <prefix>.b<index>.n<numel>
    (DDP rebuilds its buckets after the first iteration, changing their sizes)."""

    def __init__(self, sparsifier=None, density=0.0, threshold=0.0, scheme=None,
                 allow_lossy=False, timeout=None, prefix="ddp", selection="parameter"):
        if selection not in ("parameter", "bucket"):
            raise ValueError("selection %r: \"parameter\" or \"bucket\"" % (selection,))
        self.opts = dict(sparsifier=sparsifier, density=density, threshold=threshold,
                         scheme=scheme, allow_lossy=allow_lossy)
        self.timeout = timeout
        self.prefix = prefix
        self.selection = selection
        self._names = {}  # id(parameter) -> its tensor's name
        self._rerun = {}  # id(parameter) -> its last start, to repeat (sparsecomm._rerun)
        self._q = None
        self._lock = threading.Lock()

    def _per_parameter(self, bucket):
        sp = _sc.Sparsifier.parse(self.opts["sparsifier"])
        return (self.selection == "parameter" and sp != _sc.Sparsifier.NONE and
                hasattr(bucket, "gradients") and hasattr(bucket, "parameters"))

    def _param_name(self, bucket, j, p):
        return self._names.setdefault(id(p), "%s.b%d.p%d" % (self.prefix, bucket.index(), j))

    def _submit(self, item):
        with self._lock:
            if self._q is None:
                self._q = queue.Queue()
                threading.Thread(target=self._run, name="sparsecomm-ddp", daemon=True).start()
        self._q.put(item)

    def _run(self):
        while True:
            hs, buf, fut = self._q.get()
            try:
                for h in hs:
                    h.wait(self.timeout)
            except BaseException as e:  # noqa: B902 - handed to DDP through the future
                fut.set_exception(e)
            else:
                _set_result(fut, buf, hs[-1])


def _future(buf):
    """The future of a bucket: a CUDA bucket's names its device, so that DDP's streams
    wait for the stream its result is queued on (torch refuses CUDA tensors in a future
    without devices)."""
    if buf.is_cuda:
        return torch.futures.Future(devices=[buf.device])
    return torch.futures.Future()


def _set_result(fut, buf, h):
    """Completes fut with buf.  For a CUDA bucket the result's copy is queued on the
    stream the bucket was submitted from (Handle.stream): the future records its event
    there, not on this thread's current stream."""
    if h.stream is None:
        fut.set_result(buf)
        return
    with torch.cuda.device(buf.device), torch.cuda.stream(h.stream):
        fut.set_result(buf)


_default_ddp_state = None


def ddp_hook(state, bucket):
    """DDP communication hook averaging each gradient bucket through the daemons.
    state: a DDPHookState, a dict of its arguments, or None (defaults)."""
    global _default_ddp_state
    if not isinstance(state, DDPHookState):
        if state is None:
            if _default_ddp_state is None:
                _default_ddp_state = DDPHookState()
            state = _default_ddp_state
        else:
            raise TypeError("ddp_hook state must be a sparsecomm.torch.DDPHookState or None")
    buf = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    fut = _future(buf)
    try:
        with _sc._lru.keeping():  # a bucket's buffers serve every step: never released
            hs = _ddp_start(state, bucket, buf)
    except BaseException as e:  # noqa: B902
        fut.set_exception(e)
        return fut
    state._submit((hs, buf, fut))
    return fut


def _ddp_start(state, bucket, buf):
    """Starts the reductions of a DDP bucket; their handles."""
    if state._per_parameter(bucket):
        # the gradients are views into the bucket: each is reduced in place, from the
        # second step as the step before started it (DistributedOptimizer's _submit)
        hs = []
        for j, (p, g) in enumerate(zip(bucket.parameters(), bucket.gradients())):
            r = state._rerun.get(id(p))
            h = _rerun.start(r, g, _sc._ctx) if r is not None else None
            if h is None:
                h = _sc.allreduce_async_(g, name=state._param_name(bucket, j, p),
                                         average=True, **state.opts)
                try:
                    state._rerun[id(p)] = _rerun.of(h, g, ReduceOp.AVERAGE)
                except Exception:  # noqa: B902  (none to repeat: the next goes the full way)
                    state._rerun.pop(id(p), None)
            hs.append(h)
        return hs
    name = "%s.b%d.n%d" % (state.prefix, bucket.index(), buf.numel())
    return [_sc.allreduce_async_(buf, name=name, average=True, **state.opts)]
