"""The collectives of the sparsecomm binding beyond allreduce: allgather, alltoall,
reduce-scatter, join, barrier and broadcast (re-exported by the package; see its module
doc for the design).  Each takes ``process_set=`` (sparsecomm.process_sets): the sizes'
exchanges and results are over the set's members in set-rank order, and ranks given
(a broadcast's root) are ranks within the set."""

import ctypes
import math
import numbers
import operator

import numpy as np

from . import _lib
from . import process_sets as process_sets_
from . import (Handle, ReduceOp, SparsecommError, _WAIT_SLICE_MS, _acquire, _empty_entry,
               _error, _give_shape,
               _is_torch, _member, _name_or_none, _need, _release_done, _now, _opts_key, _sc_dtype,
               _take_member, _with_src,
               _torch, allreduce, allreduce_async)


# ---- allgather ---------------------------------------------------------------------

class ScalarRowsError(SparsecommError, ValueError):
    """A scalar (0-d tensor) given to a collective in rows (allgather, alltoall,
    reduce-scatter), which has no first dimension to exchange (SC_ERR_INVALID): a
    HorovodInternalError (a RuntimeError), as Horovod's torch ops raise for it ("tried to
    gather a rank-zero tensor"), and a ValueError, as its other frameworks' do."""

    def __init__(self, message, tensor):
        super().__init__(_lib.SC_ERR_INVALID, message, tensor)


def _rows_in(tensor, what, name):
    """A collective's input in rows (its first dimension): (is torch, the tensor on the
    host, its torch device or None, its shape)."""
    istorch = _is_torch(tensor)
    if istorch and tensor.is_sparse:  # Horovod's collectives in rows take dense tensors
        raise TypeError("%s of '%s': a sparse tensor has no rows to exchange; give "
                        "tensor.to_dense(), or use sparse_allreduce_async" % (what, name))
    x = tensor.detach() if istorch else np.asarray(tensor)
    dev = x.device if istorch else None
    if istorch and dev.type != "cpu":
        x = x.cpu()
    if not x.shape:
        raise ScalarRowsError("%s of '%s': a scalar has no first dimension; give "
                              "tensor.reshape(1)" % (what, name), name)
    _sc_dtype(x)  # an unsupported dtype is refused before any exchange
    return istorch, x, dev, tuple(x.shape)


_TRAIL = 8  # a row's shape as the sizes' exchange carries it: its rank and 7 dimensions


def _trail(shape):
    """The dimensions after the first, as compared across ranks (Horovod requires them
    alike): their count, then the first 7 of them (zeros past the last)."""
    t = np.zeros(_TRAIL, dtype=np.int64)
    t[0] = len(shape) - 1
    rest = shape[1:_TRAIL]
    t[1:1 + len(rest)] = rest
    return t


def _row_text(t):
    """A rank's row shape (the dimensions after the first) from its _trail: "(10, 17)"."""
    return "(%s)" % ", ".join(str(int(v)) for v in t[1:1 + min(int(t[0]), _TRAIL - 1)])


def _row_refusal(what, coll, ps, rowlens, trails, live, name):
    """SC_ERR_MISMATCH naming every live rank's elements per row and row shape when the
    elements per row differ, or the row shapes do."""
    if np.any(live & (rowlens != rowlens[np.argmax(live)])):
        raise SparsecommError(_lib.SC_ERR_MISMATCH, "%s of '%s': the elements per row differ "
                              "across ranks: %s" % (coll, what, ", ".join(
                                  "rank %d has %d %s" % (ps.ranks[r], rowlens[r],
                                                         _row_text(trails[r]))
                                  for r in range(ps.size) if live[r])), name)
    ref = trails[np.argmax(live)]
    if not np.any(live & np.any(trails != ref, axis=1)):
        return
    raise SparsecommError(_lib.SC_ERR_MISMATCH, "%s of '%s': the dimensions after the first "
                          "differ across ranks: %s" % (coll, what, ", ".join(
                              "rank %d has %s" % (ps.ranks[r], _row_text(trails[r]))
                              for r in range(ps.size) if live[r])), name)


def _rows_out(e, n, shape, dtype, dev):
    """The first n elements of e's buffer as a new tensor of shape: torch on dev (dev not
    None), else numpy."""
    if dev is not None:
        res = _torch().empty(shape, dtype=dtype)
        res.copy_(e.tdata()[:n].view(shape))
        return res.to(dev) if dev.type != "cpu" else res
    return np.array(e.data[:n].reshape(shape), dtype=dtype)


def _empty_rows(shape, x, istorch, dev):
    """A new tensor of shape with no elements, of x's kind and dtype (on dev for torch)."""
    if istorch:
        return _torch().empty(shape, dtype=x.dtype, device=dev)
    return np.empty(shape, dtype=x.dtype)


def _allgather_async(tensor, name, timeout, process_set=None, kind="allgather"):
    """Starts an allgather; returns (Handle, every rank's row count, in set-rank order).
    ``name`` None: the sizes and the rows take unnamed buffers (the module doc's rule for
    unnamed operations), so unnamed allgathers in flight together do not collide; the
    sizes' of kind + ".sizes", the rows' of ``kind`` (an allgather the package makes of
    its own gets a kind of its own, so that its int64 rows do not take the buffer of the
    user's unnamed allgathers in another dtype, registering it anew at each call)."""
    c = _need()
    what = "allgather" if name is None else name
    ps = process_sets_.scope(c, process_set, "allgather", name)
    gid = _take_member()  # the rows below, not the sizes' allreduce, join a group
    istorch, x, dev, shape = _rows_in(tensor, "allgather", what)
    row = math.prod(shape[1:])
    # the sizes first: every rank's rows and elements per row
    meta = np.zeros((ps.size, 2 + _TRAIL), dtype=np.int64)
    meta[ps.rank, :2] = shape[0], row
    meta[ps.rank, 2:] = _trail(shape)
    meta = allreduce(meta, name=None if name is None else name + ".sizes", average=False,
                     timeout=timeout, process_set=process_set, _kind=kind + ".sizes")
    rows = meta[:, 0]
    _row_refusal(what, "allgather", ps, meta[:, 1], meta[:, 2:], np.ones(ps.size, dtype=bool),
                 name)
    total = int(rows.sum()) * row
    cap = 1 << max(total - 1, 0).bit_length()  # sizes rounded up: few registrations
    e = _acquire(c, None if name is None else "%s.%d" % (name, cap), kind,
                 _sc_dtype(x), cap,
                 _with_src(_opts_key(None, 0.0, 0.0, None, False), x), 0, None, ps.id)
    n = math.prod(shape)
    try:
        if istorch:
            e.tdata()[:n].view(shape).copy_(x)
        else:
            np.copyto(e.data[:n].reshape(shape), x, casting="unsafe")
    except BaseException:
        e.inflight = False
        raise
    lib = _lib.load()
    h = _lib.c_handle()
    _member(c, e, gid)
    st = lib.sc_allgather_async(c.client, e.ptr, n, ctypes.byref(h))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "allgather of tensor '%s'" % e.name, e.name)
    out_shape = (int(rows.sum()),) + shape[1:]

    def finish():
        return _rows_out(e, total, out_shape, x.dtype, dev)

    return Handle(c, e, h.value, finish, kind="allgather"), rows


def allgather_async(tensor, name=None, process_set=None, *, timeout=None):
    """Starts an allgather (see :func:`allgather`); the Handle's wait() gives the result.
    Only the rows' exchange is asynchronous: the sizes' exchange completes before this
    returns (bounded by ``timeout``)."""
    return _allgather_async(tensor, _name_or_none(name), timeout, process_set)[0]


def allgather(tensor, name=None, process_set=None, *, timeout=None, _kind="allgather"):
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order (the
    first dimension may differ across ranks, the others must not).  The sizes are gathered
    first (an int64 sum allreduce), then the rows (sc_allgather_async: each node sends its
    rows once to every other node).  Every rank must call it with the same name and
    dtype; without a name the sizes and the rows take unnamed buffers (the module doc's
    rule), the sizes' named allgather.sizes.noname.C.S, the rows' allgather.noname.C.S
    by their capacity (a power of two).
    ``process_set``: among its members only, in set-rank order."""
    h, _ = _allgather_async(tensor, _name_or_none(name), timeout, process_set, _kind)
    return h.wait(timeout)


def _pickler():
    """cloudpickle where it is installed (Horovod's: lambdas and local classes travel
    too), else the standard pickle."""
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        import pickle
        return pickle


def _dumps(obj):
    """(payload, None), or (None, the reason) when ``obj`` cannot be pickled."""
    try:
        return _pickler().dumps(obj), None
    except Exception as e:  # noqa: B902  (any error of a __reduce__ is the object's)
        return None, "%s: %s" % (type(e).__name__, e)


def allgather_object(obj, name=None, process_set=None, *, timeout=None):
    """The list of every rank's ``obj``, in rank order (pickled, by cloudpickle where it
    is installed, gathered as bytes packed four to an int32 element); with
    ``process_set``, its members' in set-rank order.  An object that a rank cannot pickle
    fails every rank (pickle.PicklingError naming the ranks) instead of leaving the
    others waiting."""
    import pickle
    c = _need()
    ps = process_sets_.scope(c, process_set, "allgather_object", name)
    name = "allgather.object" if name is None else str(name)
    payload, why = _dumps(obj)
    lens = np.zeros(ps.size, dtype=np.int64)
    lens[ps.rank] = -1 if payload is None else len(payload)
    lens = allreduce(lens, name=name + ".len", average=False, timeout=timeout,
                     process_set=process_set)
    if np.any(lens < 0):
        bad = [ps.ranks[r] for r in range(ps.size) if lens[r] < 0]
        raise pickle.PicklingError("allgather_object '%s': rank %s could not pickle its "
                                   "object%s" % (name, ", ".join(map(str, bad)),
                                                 " (here: %s)" % why if why else ""))
    words = np.zeros((len(payload) + 3) // 4, dtype=np.int32)
    words.view(np.uint8)[:len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    h, rows = _allgather_async(words, name, timeout, process_set)
    flat = h.wait(timeout)
    out, at = [], 0
    for r in range(ps.size):
        chunk = flat[at:at + int(rows[r])].view(np.uint8)[:int(lens[r])]
        out.append(_pickler().loads(chunk.tobytes()))
        at += int(rows[r])
    return out


# ---- alltoall ----------------------------------------------------------------------

class SplitsError(SparsecommError, ValueError):
    """An alltoall whose splits some rank's rows refuse (SC_ERR_INVALID), raised on every
    rank alike: a ValueError as Horovod's."""

    def __init__(self, message, tensor):
        super().__init__(_lib.SC_ERR_INVALID, message, tensor)


def _splits_refusal(splits, rows, size):
    """This rank's splits of ``rows`` rows over ``size`` ranks, and why they are refused
    ("" when they are not): Horovod's rules, splits=None an even split."""
    if splits is None:
        if rows % size:
            return None, "%d rows do not split evenly over %d ranks" % (rows, size)
        return [rows // size] * size, ""
    if _is_torch(splits):
        splits = splits.detach().cpu()
    arr = np.asarray(splits)
    if arr.dtype.kind not in "iu":  # Horovod's splits are integers (int32)
        return None, "splits of dtype %s, not integers" % arr.dtype
    sp = [int(v) for v in arr.reshape(-1)]
    if len(sp) != size:
        return None, "%d splits for %d ranks" % (len(sp), size)
    if min(sp) < 0:
        return None, "a negative split (%d)" % min(sp)
    if sum(sp) > rows:
        return None, "splits summing to %d rows, over its %d" % (sum(sp), rows)
    return sp, ""


def alltoall_async(tensor, splits=None, name=None, process_set=None, *, timeout=None):
    """Starts an alltoall (see :func:`alltoall`); the Handle's wait() returns
    (received, received_splits).  Only the rows' exchange is asynchronous: the splits'
    exchange (the ``.sizes`` allreduce of a P x (P + 3) int64 matrix) completes before
    this returns, so the call blocks until every rank has reached it.

    The rows' buffer is registered as name + "." + its capacity in elements (a power of
    two): each new capacity registers another shared buffer, which stays registered until
    the package releases it as a least recently used name (the module doc, "Named
    registrations stay bounded").  With ``process_set``, splits and results are over its
    members in set-rank order."""
    c = _need()
    name = _name_or_none(name)  # None: unnamed buffers (the module doc's rule)
    what = "alltoall" if name is None else name
    ps = process_sets_.scope(c, process_set, "alltoall", name)
    istorch, x, dev, shape = _rows_in(tensor, "alltoall", what)
    P, me, row = ps.size, ps.rank, math.prod(shape[1:])
    sp, why = _splits_refusal(splits, shape[0], P)
    # the sizes first, every rank's alike: present (1: a joined rank, which takes part in
    # this allreduce with zeros, leaves its row all zeros and sends nothing), its refusal,
    # elements per row and splits (a rank whose splits are refused fails every rank
    # instead of leaving them waiting)
    meta = np.zeros((P, P + 3 + _TRAIL), dtype=np.int64)
    meta[me, :3] = 1, int(bool(why)), row
    meta[me, P + 3:] = _trail(shape)
    if not why:
        meta[me, 3:P + 3] = sp
    gid = _take_member()  # the blocks, not the sizes' allreduce, join a group
    meta = allreduce(meta, name=None if name is None else name + ".sizes", average=False,
                     timeout=timeout, process_set=process_set, _kind="alltoall.sizes")
    live = meta[:, 0] != 0
    bad = [ps.ranks[r] for r in range(P) if meta[r, 1]]
    if bad:
        raise SplitsError("alltoall of '%s': the splits of rank %s are refused%s" % (
            what, ", ".join(map(str, bad)), " (here: %s)" % why if why else ""), name)
    _row_refusal(what, "alltoall", ps, meta[:, 2], meta[:, P + 3:], live, name)
    S = meta[:, 3:P + 3]  # S[s, q]: the rows rank s sends rank q (none from a joined rank)
    rows_cap = int(max(S.sum(axis=1).max(), S.sum(axis=0).max()))
    cap = 1 << max(rows_cap * row - 1, 0).bit_length()  # sizes rounded up: few registrations
    e = _acquire(c, None if name is None else "%s.%d" % (name, cap), "alltoall",
                 _sc_dtype(x), cap,
                 _with_src(_opts_key(None, 0.0, 0.0, None, False), x), 0, None, ps.id)
    n = int(S[me].sum()) * row
    try:
        if istorch:
            e.tdata()[:n].copy_(x.reshape(-1)[:n])
        else:
            np.copyto(e.data[:n], x.reshape(-1)[:n], casting="unsafe")
    except BaseException:
        e.inflight = False
        raise
    lib = _lib.load()
    h = _lib.c_handle()
    # one count per rank the alltoall runs over: the job's, or the set's members in set
    # rank order (sparsecomm.h, "Process sets")
    counts = (ctypes.c_size_t * P)(*(int(v) * row for v in S[me]))
    _member(c, e, gid)
    st = lib.sc_alltoall_async(c.client, e.ptr, counts, ctypes.byref(h))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "alltoall of tensor '%s'" % e.name, e.name)

    def finish():
        got = (ctypes.c_size_t * P)()  # from each rank the alltoall ran over, in order
        st = lib.sc_tensor_result_counts(e.ptr, got, P)
        if st != _lib.SC_OK:
            raise _error(st, "alltoall of tensor '%s'" % e.name, e.name)
        # what the daemons delivered, in rows: the splits every rank announced
        recv = np.array([v // row if row else S[r, me] for r, v in enumerate(got)],
                        dtype=np.int64)
        total = int(recv.sum())
        return _rows_out(e, total * row, (total,) + shape[1:], x.dtype, dev), recv

    return Handle(c, e, h.value, finish, kind="alltoall")


def alltoall(tensor, splits=None, name=None, process_set=None, *, timeout=None):
    """Scatters ``tensor``'s rows to every rank and gathers what every rank sends this
    one: ``splits[r]`` rows (along the first dimension, in rank order) go to rank r
    (default: an even split, which must divide the rows; rows past the splits' sum are
    not sent), and the result is the rows received, in source rank order, with the number
    from each rank: (received, received_splits).  The splits are exchanged first (an
    int64 sum allreduce named name + ".sizes": splits refused on one rank fail every rank
    naming it), then the rows (sc_alltoall_async: each node sends every other node its
    trainers' rows for that node's trainers, once).  Every rank must use the same name
    (without one: unnamed buffers, as allgather's), dtype and elements per row.
    ``process_set``: among its members, ``splits[i]`` going to set rank i."""
    return alltoall_async(tensor, splits, name, process_set, timeout=timeout).wait(timeout)


# ---- reducescatter -----------------------------------------------------------------

def reducescatter(tensor, op=ReduceOp.AVERAGE, name=None, process_set=None, *, timeout=None):
    """See :func:`reducescatter_async`: its result."""
    return reducescatter_async(tensor, op, name, process_set).wait(timeout)


def reducescatter_async(tensor, op=ReduceOp.AVERAGE, name=None, process_set=None):
    """Starts a reduce-scatter; the Handle's wait() gives ``tensor`` reduced by ``op``
    across every rank (default: average, as Horovod's), of which this rank gets its rows:
    the first dimension is split in rank order, the first (rows % size) ranks one row more
    (sc_reducescatter_async: each node sends every other node its part once).  Every rank
    must give the same shape, dtype, op and name (without one: an unnamed buffer, as
    allreduce's).  A tensor without elements (0 rows, or rows of none) gives this rank
    its share of none, as an empty allreduce does, once every rank has given it empty
    too (a rank whose tensor is not empty fails it at once on every rank).
    ``process_set``: among its members, the rows split in set-rank order."""
    c = _need()
    name = _name_or_none(name)
    what = "reducescatter" if name is None else name
    ps = process_sets_.scope(c, process_set, "reducescatter", name)
    pset = ps.id
    red = ReduceOp.parse(op)
    istorch, x, dev, shape = _rows_in(tensor, "reducescatter", what)
    row, n = math.prod(shape[1:]), math.prod(shape)
    carrier = _sc_dtype(x)
    key = _with_src(_opts_key(None, 0.0, 0.0, None, False), x)
    if not n:
        # no elements: this rank's rows of nothing, as Horovod's (and allreduce's), after
        # a reduce-scatter of a one-element stand-in given the empty shape, so that ranks
        # whose tensor is not empty fail at once as a mismatch (as _start_empty)
        e = _empty_entry(c, x, name, "reducescatter", carrier, key, pset)
        row = 1
    else:
        e = _acquire(c, name, "reducescatter", carrier, n, key, 0, None, pset)
        try:
            if istorch:
                e.tdata().view(shape).copy_(x)
            else:
                np.copyto(e.data.reshape(shape), x, casting="unsafe")
        except BaseException:
            e.inflight = False
            raise
    lib = _lib.load()
    h = _lib.c_handle()
    _give_shape(e, shape)
    _member(c, e, _take_member())
    st = lib.sc_reducescatter_async(c.client, e.ptr, red.c_op, row, ctypes.byref(h))
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "reducescatter of tensor '%s'" % e.name, e.name)

    def finish():
        if not n:  # the stand-in's row is not this rank's: its rows of nothing
            rows = shape[0] // ps.size + (ps.rank < shape[0] % ps.size)
            return _empty_rows((rows,) + shape[1:], x, istorch, dev)
        got = lib.sc_tensor_result_nnz(e.ptr)
        return _rows_out(e, got, (got // row,) + shape[1:], x.dtype, dev)

    return Handle(c, e, h.value, finish, kind="reducescatter")


# ---- join --------------------------------------------------------------------------

def _timeout_s(c, timeout, what):
    """A wait's seconds (None: init()'s default), checked before anything is started."""
    if timeout is None:
        return c.timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError("%s: timeout must be a number of seconds, not %r" % (what, timeout))
    return float(timeout)


def join(device=-1, *, timeout=None, process_set=None):
    """Uneven inputs: this rank has no more data.  Until every rank has joined, it takes
    part in the others' allreduces with zeros (and may start none itself); returns the
    last rank to join once all have (Horovod's join).  ``device``: Horovod's (the GPU
    its zeros would be on); ignored, the daemons hold the zeros.  ``timeout`` as
    barrier's.  Join is the whole job's: a ``process_set`` other than the global one
    raises NotImplementedError."""
    c = _need()
    try:  # an int, or int-like (a numpy integer), as Horovod's takes
        dev = operator.index(device) if not isinstance(device, bool) else None
    except TypeError:
        dev = None
    if dev is None:
        raise TypeError("join: device must be an int (Horovod's device id), not %r" %
                        (device,))
    if process_sets_.scope(c, process_set, "join").id != 0:
        raise NotImplementedError("join: process_set=%s; join is the whole job's "
                                  "(process_set=global_process_set)" % (process_set,))
    tmo = _timeout_s(c, timeout, "join")
    lib = _lib.load()
    h = _lib.c_handle()
    st = lib.sc_join_async(c.client, ctypes.byref(h))
    if st != _lib.SC_OK:
        raise _error(st, "join")
    last = ctypes.c_int(-1)
    deadline = _now() + tmo
    try:
        while True:  # in slices, so that Ctrl-C reaches Python
            left_ms = int(max(0.0, deadline - _now()) * 1000)
            st = lib.sc_join_result(c.client, h.value, min(left_ms, _WAIT_SLICE_MS),
                                    ctypes.byref(last))
            if st == _lib.SC_OK:
                return last.value
            if st != _lib.SC_ERR_TIMEOUT:
                raise _error(st, "join")
            if left_ms <= _WAIT_SLICE_MS:
                raise SparsecommError(_lib.SC_ERR_TIMEOUT, "join did not complete within "
                                      "%.1f s (rank %d)" % (tmo, c.rank))
    finally:  # a join given up (timeout, Ctrl-C) is held no more: later barriers run
        lib.sc_abandon(c.client, h.value)


# ---- barrier -----------------------------------------------------------------------

def barrier(process_set=None, *, timeout=None):
    """Returns once every trainer of the job has called barrier() (sc_barrier_async: the
    daemons agree through their coordinator; no tensor is involved).  Raises
    SparsecommError: SC_ERR_STALLED naming the ranks that did not arrive within the
    daemons' stall_timeout_ms, SC_ERR_ABORTED when a trainer exited, SC_ERR_TIMEOUT after
    ``timeout`` seconds (None: the default given to init()).  With a ``process_set`` other
    than the global one: once every member of it has called barrier(process_set=...), by
    a one-element int32 sum allreduce among them named "barrier" (the library's barrier is
    the whole job's); its errors are that allreduce's."""
    c = _need()
    # the arguments are checked before the barrier starts: a wrong one leaves nothing
    # started that the daemons would wait for
    tmo = _timeout_s(c, timeout, "barrier")
    if process_sets_.scope(c, process_set, "barrier").id != 0:
        allreduce(np.ones(1, dtype=np.int32), name="barrier", op=ReduceOp.SUM,
                  timeout=tmo, process_set=process_set)
        return
    lib = _lib.load()
    h = _lib.c_handle()
    st = lib.sc_barrier_async(c.client, ctypes.byref(h))
    if st != _lib.SC_OK:
        raise _error(st, "barrier")
    deadline = _now() + tmo
    try:
        while True:  # in slices, so that Ctrl-C reaches Python
            left_ms = int(max(0.0, deadline - _now()) * 1000)
            st = lib.sc_wait(c.client, h.value, min(left_ms, _WAIT_SLICE_MS))
            if st == _lib.SC_OK:
                return
            if st != _lib.SC_ERR_TIMEOUT:
                raise _error(st, "barrier")
            if left_ms <= _WAIT_SLICE_MS:
                raise SparsecommError(_lib.SC_ERR_TIMEOUT, "barrier did not complete "
                                      "within %.1f s (rank %d)" % (tmo, c.rank))
    finally:  # a barrier given up is held no more: the next one is not refused as busy
        lib.sc_abandon(c.client, h.value)


# ---- broadcast ---------------------------------------------------------------------

def _broadcast_root(root_rank, name, process_set):
    """The global rank of a broadcast's root: root_rank, a global rank (as Horovod's,
    also with a process set), checked to be a member of process_set."""
    c = _need()
    return process_sets_.scope(c, process_set, "broadcast", name).root(root_rank,
                                                                       "broadcast")


def broadcast_async_(tensor, root_rank=0, name=None, process_set=None):
    """In-place broadcast from root_rank (sc_broadcast_async): the handle's wait() writes
    root_rank's values into ``tensor`` on every rank.  The root's node sends them once to
    every other node.  ``process_set``: among its members, root_rank (a global rank) one
    of them."""
    root = _broadcast_root(root_rank, name, process_set)
    return allreduce_async(tensor, name=name, op=ReduceOp.SUM, out=tensor, _kind="broadcast",
                           _root=root, process_set=process_set)


def broadcast_async(tensor, root_rank=0, name=None, process_set=None):
    """Broadcast from root_rank into a new tensor (the input is left as it is)."""
    root = _broadcast_root(root_rank, name, process_set)
    return allreduce_async(tensor, name=name, op=ReduceOp.SUM, _kind="broadcast", _root=root,
                           process_set=process_set)


def broadcast(tensor, root_rank=0, name=None, process_set=None, *, timeout=None):
    return broadcast_async(tensor, root_rank, name, process_set).wait(timeout)


def broadcast_object(obj, root_rank=0, name=None, process_set=None, *, timeout=None):
    """Returns root_rank's ``obj`` on every rank: pickled on the root (by cloudpickle
    where it is installed), its length broadcast first (int64), then its bytes packed
    four to an int32 element (the daemons' smallest dtype), so the payload travels once
    from the root's node.  An object the root cannot pickle fails every rank alike
    (pickle.PicklingError with the root's reason: the length broadcast is then the
    reason's, negated, and the reason travels instead).  Every rank must call it with
    the same name (default "broadcast.object").  ``process_set``: among its members,
    root_rank (a global rank) one of them.  The payload's buffer is released
    afterwards."""
    import pickle
    c = _need()
    name = "broadcast.object" if name is None else str(name)
    root_rank = process_sets_.scope(c, process_set, "broadcast_object", name).root(
        root_rank, "broadcast_object")
    me = c.rank
    payload, why = _dumps(obj) if me == root_rank else (b"", None)
    if why is not None:
        payload = why.encode()
    n = np.array([len(payload) * (-1 if why is not None else 1)], dtype=np.int64)
    n = int(broadcast(n, root_rank, name + ".len", process_set, timeout=timeout)[0])
    words = np.zeros((abs(n) + 3) // 4 or 1, dtype=np.int32)
    if me == root_rank:
        words.view(np.uint8)[:abs(n)] = np.frombuffer(payload, dtype=np.uint8)
    h = broadcast_async(words, root_rank, "%s.%d" % (name, words.size), process_set)
    try:
        words = h.wait(timeout)
    finally:
        _release_done(h)  # a buffer per payload size would stay registered
    if n < 0:
        raise pickle.PicklingError("broadcast_object '%s': the root (rank %d) could not "
                                   "pickle its object: %s" % (name, root_rank, bytes(
                                       words.view(np.uint8)[:-n]).decode(errors="replace")))
    return obj if me == root_rank else _pickler().loads(words.view(np.uint8)[:n].tobytes())


def broadcast_(tensor, root_rank=0, name=None, process_set=None, *, timeout=None):
    return broadcast_async_(tensor, root_rank, name, process_set).wait(timeout)
