"""The form (dtype, layout, size) of a torch sparse tensor that the ranks reduce under one
name, checked as Horovod checks it: the ranks must give the same, or the reduction fails
on every rank alike, naming the tensor and what each rank gave.

A sparse tensor of float32, float16 or bfloat16 is reduced by the COO path, one allreduce
under its name; one of another dtype (float64, an integer) by allgathers of its indices
and values (sparsecomm.torch._sparse_async).  The allgather path therefore starts with an
exchange of every rank's form under the tensor's name itself (:func:`agree`), in place of
the shapes' allgather it had: ranks that all take it compare their dtypes and sizes there,
and a rank that gives the name to the COO path or as a dense tensor meets the exchange in
the daemons' negotiation of the name, which fails it on every rank at once (a different
element count, dtype or input), rather than each rank waiting for operations the others
never start.  :func:`explain` adds this rank's form to such a failure's message."""
import hashlib

import numpy as np
import torch

import sparsecomm as _sc
from sparsecomm import _lib

_DIMS = 8  # the dimensions an exchange carries (the size's first 8; its count in full)
# a rank's row: taken (1), dtype, dimension count, its first dimensions, and a digest of
# all of them, so that sizes differing only past the 8th differ too
_ROW = 4 + _DIMS
# the dtypes of sparse tensors the COO path carries (in float32, exactly)
COO_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _label(name):
    return "(unnamed)" if name is None else name


def describe(x):
    """A sparse tensor's form as the errors write it: "a sparse float64 of size [4, 3]"."""
    return "a sparse %s of size %s" % (str(x.dtype).replace("torch.", ""), list(x.shape))


def _code(dtype):
    return _DTYPES.index(dtype) if dtype in _DTYPES else len(_DTYPES)


def _digest(shape):
    """A 56-bit digest of a size, every dimension of it."""
    raw = np.asarray(list(shape), dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=7).digest(), "little")


def _text(row):
    """A rank's row of the exchange as describe() writes the form (a size of more than
    8 dimensions with the digest of all of them)."""
    code, ndim = int(row[1]), int(row[2])
    dt = str(_DTYPES[code]).replace("torch.", "") if code < len(_DTYPES) else "another dtype"
    dims = [int(d) for d in row[3:3 + min(ndim, _DIMS)]] + (["..."] if ndim > _DIMS else [])
    return "sparse %s of size [%s]%s" % (dt, ", ".join(str(d) for d in dims), "" if ndim <= _DIMS
                                         else " (digest of its size %014x)" % int(row[-1]))


def agree(x, name, scope, process_set=None):
    """Exchanges this rank's form of sparse tensor ``x`` with the other ranks of ``scope``
    (process_set's process_sets.Scope) by an allreduce under ``name``; returns when every
    rank gave the same dtype and size, else raises SC_ERR_MISMATCH naming the tensor and
    each rank's form (a failure of the exchange itself, explained as :func:`explain`
    does)."""
    mine = np.zeros((scope.size, _ROW), dtype=np.int64)
    dims = list(x.shape)[:_DIMS]
    mine[scope.rank, :3 + len(dims)] = [1, _code(x.dtype), x.dim()] + dims
    mine[scope.rank, -1] = _digest(x.shape)
    try:
        rows = _sc.allreduce(mine, name=name, op=_lib.ReduceOp.SUM, process_set=process_set)
    except _sc.SparsecommError as e:
        raise explain(e, name, x) from None
    if bool((rows == rows[scope.rank]).all()):
        return
    forms = {}
    for r in range(scope.size):
        forms.setdefault(_text(rows[r]), []).append(scope.ranks[r])
    raise _sc.SparsecommError(
        _lib.SC_ERR_MISMATCH, "allreduce of sparse tensor '%s' failed: its dtype or size "
        "differs across ranks: %s" % (_label(name), "; ".join(
            "rank%s %s %s %s" % ("s" if len(rs) > 1 else "", ", ".join(map(str, rs)),
                                 "have" if len(rs) > 1 else "has", form)
            for form, rs in forms.items())), name)


def explain(e, name, x):
    """The error ``e`` of the reduction of sparse tensor ``x`` under ``name`` with this
    rank's form added when the ranks' operations differed (SC_ERR_MISMATCH), else ``e``
    itself.  ``x``: the tensor, or its (describe(), dtype)."""
    if not isinstance(e, _sc.SparsecommError) or e.status != _lib.SC_ERR_MISMATCH:
        return e
    form, dtype = (describe(x), x.dtype) if torch.is_tensor(x) else x
    return _sc.SparsecommError(
        e.status, "%s (rank %d gave it as %s, which %s; every rank must give a tensor of "
        "one name the same dtype, layout and size, as Horovod requires)" %
        (e.message, _sc.rank(), form, "is reduced as COO" if dtype in COO_DTYPES
         else "is reduced by allgathers"), name)


class Handle:
    """A sparse reduction's handle whose wait() raises :func:`explain`'s error."""

    def __init__(self, handle, name, x):
        self._h, self._name = handle, name
        self._form = (describe(x), x.dtype)  # not the tensor: its values may be freed

    def __getattr__(self, attr):  # poll, done, name, stream: the reduction's
        if attr.startswith("_"):  # not set yet (a copy): never the reduction's own
            raise AttributeError(attr)
        return getattr(self._h, attr)

    def wait(self, timeout=None):
        try:
            return self._h.wait(timeout)
        except _sc.SparsecommError as e:
            raise explain(e, self._name, self._form) from None

    __call__ = wait
