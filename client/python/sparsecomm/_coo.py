"""The COO path's conversions (see the package's module doc, natively sparse tensors):
a coalesced torch sparse tensor's rows into the daemon's flat element indices and values
(on the CPU through numpy views of the shared COO area, on a GPU by torch ops on the
current stream), and a sparse result back into a coalesced torch sparse tensor."""

import math

import numpy as np

from . import _torch


def _coo_fill_cpu(e, x, shape, sd, dn):
    """Writes coalesced sparse x (nrows rows of dn elements) as flat element indices and
    values into a cpu tensor's COO area."""
    ind, vals = x._indices(), x._values()
    nrows = ind.shape[1]
    if nrows:
        nnz = nrows * dn
        lin = ind[0].clone() if sd == 1 else _linear(ind, shape[:sd])
        dst = e.coo_idx[:nnz].reshape(nrows, dn)
        np.add(lin.numpy()[:, None] * dn, np.arange(dn, dtype=np.int64)[None, :],
               out=dst, casting="unsafe")
        e.tval()[:nnz].view(vals.shape).copy_(vals)


def _coo_fill_cuda(e, x, shape, sd, dn):
    """The same into a cuda tensor's GPU COO area, by torch ops on the current stream."""
    ind, vals = x._indices(), x._values()
    nrows = ind.shape[1]
    if nrows:
        nnz = nrows * dn
        idx, val = e.tcoo()
        idx[:nnz].copy_(_flat_indices(ind, shape, sd, dn))
        val[:nnz].view(vals.shape).copy_(vals)


def _flat_indices(ind, shape, sd, dn):
    """The flat element indices (numel < 2**32) of every element of the rows ``ind`` (a
    sparse tensor's indices over its sd sparse dims) as int32 holding their uint32 bits,
    the type of the daemon's COO indices; computed where ind is."""
    t = _torch()
    lin = ind[0] if sd == 1 else _linear(ind, shape[:sd])
    flat = (lin[:, None] * dn + t.arange(dn, dtype=t.int64, device=ind.device)).reshape(-1)
    return t.where(flat >= 2 ** 31, flat - 2 ** 32, flat).to(t.int32)


def _sparse_from_coo(idx, val, shape, sd, dtype):
    """The coalesced sparse COO tensor of a sparse result held as torch tensors: idx, the
    flat element indices (ascending) as int32 holding uint32 bits, and val; built where
    they are (on the GPU: torch ops on the current stream).  The rows over the sparse dims
    are those holding an index (one read of their count; partial rows, which schemes that
    drop zero sums return, get zeros in their missing elements)."""
    t = _torch()
    dn = math.prod(shape[sd:])
    lin = idx.to(t.int64) & 0xFFFFFFFF
    row = lin // dn
    rows = t.unique_consecutive(row)
    first = t.ones_like(row, dtype=t.bool)
    first[1:] = row[1:] != row[:-1]
    slot = (first.cumsum(0) - 1) * dn + lin % dn
    vals = t.zeros(rows.numel() * dn, dtype=dtype, device=val.device)
    vals[slot] = val.to(dtype)
    vals = vals.view((rows.numel(),) + tuple(shape[sd:]))
    ind = rows.unsqueeze(0) if sd == 1 else t.stack(list(_unravel(rows, shape[:sd])))
    return _coalesced_coo(ind, vals, shape)


def _sparse_result(e, n, shape, sd, dtype):
    """The coalesced sparse COO tensor of a sparse result: n flat element indices
    (ascending) and values in the tensor's COO area.  The common case, whole rows (every
    element of each touched row, as an embedding's gradient has), is recognised from the
    first and last index of each row-sized block, in O(n / row); otherwise the elements
    are gathered into the rows that hold them."""
    t = _torch()
    dn = math.prod(shape[sd:])
    idx = e.coo_idx[:n]
    val = e.tval()[:n]
    first = idx[::dn] if dn > 1 else idx
    whole = n % dn == 0 and (dn == 1 or (
        not np.any(first % dn) and np.array_equal(idx[dn - 1::dn] - first,
                                                  np.full(first.size, dn - 1, first.dtype))))
    if whole:
        rows = t.from_numpy(first.astype(np.int64) // dn)
        vals = val.reshape(rows.numel(), dn).clone()
    else:
        lin = idx.astype(np.int64)
        keep = np.unique(lin // dn)
        rows = t.from_numpy(keep)
        vals = t.zeros(keep.size, dn, dtype=val.dtype)
        vals.view(-1)[t.from_numpy(np.searchsorted(keep, lin // dn) * dn + lin % dn)] = val
    vals = vals.to(dtype).view((rows.numel(),) + tuple(shape[sd:]))
    ind = rows.unsqueeze(0) if sd == 1 else t.stack(list(_unravel(rows, shape[:sd])))
    return _coalesced_coo(ind, vals, shape)


def _linear(ind, sparse_shape):
    strides = [1] * len(sparse_shape)
    for d in range(len(sparse_shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * sparse_shape[d + 1]
    t = _torch()
    return (ind * t.tensor(strides, dtype=ind.dtype, device=ind.device)[:, None]).sum(0)


def _resparsify(dense, sd, dtype):
    """A coalesced sparse COO copy of dense keeping the rows (over the sparse dims) that
    hold a non-zero."""
    t = _torch()
    shape = tuple(dense.shape)
    rows = dense.reshape(math.prod(shape[:sd]), -1)
    keep = rows.ne(0).any(1).nonzero().squeeze(1)
    vals = rows.index_select(0, keep).to(dtype).view((keep.numel(),) + shape[sd:])
    if sd == 1:
        ind = keep.unsqueeze(0)
    else:
        ind = t.stack(list(_unravel(keep, shape[:sd])))
    return _coalesced_coo(ind, vals, shape)


_COO_KW = None


def _coalesced_coo(ind, vals, shape):
    """A sparse COO tensor marked coalesced (the daemon's indices are unique and
    ascending).  Newer torch warns when invariant checking is left implicit: it is
    declared off where the keyword exists (the indices were built here, in range)."""
    global _COO_KW
    t = _torch()
    if _COO_KW is None:
        try:
            t.sparse_coo_tensor(t.zeros((1, 0), dtype=t.int64), t.zeros(0), (1,),
                                check_invariants=False)
            _COO_KW = {"check_invariants": False}
        except TypeError:
            _COO_KW = {}
    return t.sparse_coo_tensor(ind, vals, shape, **_COO_KW)._coalesced_(True)


def _unravel(lin, sparse_shape):
    out = []
    for d in reversed(sparse_shape):
        out.append(lin % d)
        lin = lin // d
    return reversed(out)
