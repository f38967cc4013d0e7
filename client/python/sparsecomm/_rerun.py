"""A named dense allreduce started again with the same options: an optimizer's gradient,
every step.

allreduce_async() works out, on every call, the buffer a tensor goes in (its name's
registration, the options' key, the wire, the element type, the process set, the unnamed
slots and the registrations' cap): about 120 us a call on a 2-core x86 host, most of it
Python, which DistributedOptimizer paid once per parameter and step.  A Rerun keeps what
that work found for one name, and start() repeats only what can differ between calls:
the tensor's shape and dtype, the registration being still the one found (not released,
not registered anew) with the shape the daemons were last given, no operation of it in
flight, no group open, its process set still added, the context still the one it was
found in.  Where anything differs it returns None and the caller goes the full way
(allreduce_async), which raises what is wrong or registers anew.

Only what the full way would do for the same call is done here: the same claim, the same
copy into the shared buffer, the same sc_allreduce_async, and a Handle whose result is
copied into the same tensor."""

import ctypes

from . import Handle, _error, _grouping, _lib, _torch


class Rerun:
    """What an in-place allreduce of a CPU torch tensor into a kept named registration
    found (of(): None for anything else)."""

    __slots__ = ("ctx", "entry", "shape", "dims", "dtype", "view", "c_op", "lib")

    def __init__(self, ctx, entry, shape, dtype, c_op):
        self.ctx = ctx
        self.entry = entry
        self.shape = shape
        self.dims = entry.shape  # the shape the daemons were given (_give_shape's form)
        self.dtype = dtype
        self.view = entry.tdata().view(shape)
        self.c_op = c_op
        self.lib = _lib.load()


def of(handle, tensor, op):
    """The Rerun of the operation ``handle`` started by allreduce_async_(tensor, ...) with
    reduction ``op`` (a ReduceOp), or None where its start cannot be repeated this way:
    an unnamed, empty, sparse, non-CPU or not kept buffer, or one shaped otherwise."""
    e = getattr(handle, "_entry", None)
    if (type(handle) is not Handle or e is None or e.unnamed or not e.kept or e.cuda or
            handle._kind != "allreduce" or handle._stream is not None or
            tensor.is_sparse or tensor.device.type != "cpu" or tensor.numel() != e.numel):
        return None
    dims = tuple(tensor.shape)
    if e.shape != (dims if len(dims) > 1 or 0 in dims else ()):  # as _give_shape left it
        return None
    return Rerun(handle._ctx, e, tensor.shape, tensor.dtype, op.c_op)


def start(r, tensor, ctx):
    """The allreduce of ``tensor`` into itself as r's first start did, or None where
    anything that start relied on has changed (the caller then starts it the full way).
    ``ctx``: the current context (sparsecomm._ctx)."""
    c, e = r.ctx, r.entry
    if (ctx is not c or c.closed or tensor.dtype is not r.dtype or
            tensor.shape != r.shape or tensor.is_sparse or tensor.device.type != "cpu" or
            getattr(_grouping, "armed", None) is not None or
            (e.pset and e.pset not in c.psets)):
        return None
    with c.lock:  # shutdown() unmaps the buffer under it
        if (c.closed or c.entries.get(e.key) is not e or e.inflight or
                e.shape != r.dims):  # another call of the name gave another shape
            return None
        e.inflight = True
        try:
            r.view.copy_(tensor.detach() if tensor.requires_grad else tensor)
        except BaseException:
            e.inflight = False
            raise
    h = _lib.c_handle()
    try:
        st = r.lib.sc_allreduce_async(c.client, e.ptr, r.c_op, ctypes.byref(h))
    except BaseException:
        e.inflight = False
        raise
    if st != _lib.SC_OK:
        e.inflight = False
        raise _error(st, "allreduce of tensor '%s'" % e.name, e.name)
    view = r.view
    return Handle(c, e, h.value, lambda: _into(tensor, view))


def _into(out, view):
    if out.requires_grad:
        with _torch().no_grad():
            out.copy_(view)
    else:
        out.copy_(view)
    return out
