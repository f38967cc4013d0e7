#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: Horovod's reduction values and the sparse
mismatches Horovod refuses, through ``import sparsecomm.torch as hvd``.

- hvd.Average, hvd.Sum, ... are Horovod's integers (Average 0, Sum 1, Adasum 2, Min 3,
  Max 4, Product 5), and an integer, a name or the constant given as ``op`` gives that
  reduction in every call that takes one (a script stores ``op=0`` meaning Average).
- A sparse tensor that the ranks give in different dtypes, layouts or dense shapes (in
  any dimension) under one name fails at once on every rank, naming the tensor and what
  differs, and the next collective works.
- A grouped allreduce with sparse tensors reduced by allgathers among its members
  completes (they start outside the group), named or not.

Prints `CHECK <name> ok` or `CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks  # noqa: E402

torch.set_num_threads(1)
hvd.init(process_sets="dynamic")
R, P = hvd.rank(), hvd.size()
check = Checks(sys.argv[1:])

# Horovod's values (horovod/common/basics.py, the C++ ReduceOp)
HOROVOD = (("Average", 0), ("Sum", 1), ("Adasum", 2), ("Min", 3), ("Max", 4),
           ("Product", 5))
MINE = torch.tensor([R + 1.0, -(R + 1.0), 2.0])  # rank r: r+1, -(r+1), 2
RANKS = [r + 1.0 for r in range(P)]
WANT = {"Average": [sum(RANKS) / P, -sum(RANKS) / P, 2.0],
        "Sum": [sum(RANKS), -sum(RANKS), 2.0 * P],
        "Min": [1.0, -float(P), 2.0], "Max": [float(P), -1.0, 2.0],
        "Product": [float(torch.tensor(RANKS).prod()),
                    float(torch.tensor(RANKS).prod()) * (-1) ** P, 2.0 ** P]}


def still_works(tag):
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after." + tag)
    assert got.tolist() == [float(P)] * 3, (tag, got)


def forms(label):
    """The ways a script names the reduction ``label``: the constant, Horovod's integer
    (a plain int, as stored), its name as a string."""
    return (getattr(hvd, label), dict(HOROVOD)[label], label, label.lower())


@check
def horovod_reduce_op_values():
    for label, value in HOROVOD:
        got = getattr(hvd, label)
        assert got == value and int(got) == value, (label, int(got), value)
        assert hvd.ReduceOp.parse(value) is got, (label, value)
    assert hvd.Average == 0 and hvd.Sum == 1 and hvd.Adasum == 2
    # numpy's and torch's integers are integers; a float or a bool is no reduction
    assert hvd.ReduceOp.parse(np.int64(3)) is hvd.Min
    assert hvd.ReduceOp.parse(torch.tensor(4)) is hvd.Max
    for bad in (1.5, 1.0, True, False, "avg", 6, -1, None):
        try:
            got = hvd.ReduceOp.parse(bad)
        except ValueError:
            continue
        raise AssertionError("ReduceOp.parse(%r) gave %r" % (bad, got))
    x = torch.ones(2)
    for bad in (1.5, True):
        try:
            got = hvd.allreduce(x, name="ops.bad", op=bad)
        except ValueError:
            continue
        raise AssertionError("allreduce(op=%r) gave %r" % (bad, got))


@check
def integer_ops_in_allreduce():
    for label in WANT:
        for op in forms(label):
            got = hvd.allreduce(MINE, name="ops.ar", op=op)
            assert got.tolist() == WANT[label], (label, op, got.tolist())
    # Adasum: identical leaves give the vector, orthogonal ones their sum
    v = torch.tensor([0.5, -3.0, 7.25], dtype=torch.float64)
    for op in forms("Adasum"):
        assert hvd.allreduce(v, name="ops.adasum", op=op).tolist() == v.tolist(), op


@check
def integer_ops_in_grouped_allreduce():
    for label in WANT:
        for op in forms(label):
            got = hvd.grouped_allreduce([MINE, MINE * 2], name="ops.gar", op=op)
            assert got[0].tolist() == WANT[label], (label, op, got[0].tolist())


@check
def integer_ops_in_reducescatter():
    x = MINE.repeat(P, 1)  # each rank's row is MINE
    for label in ("Average", "Sum", "Min", "Max", "Product"):
        for op in forms(label):
            got = hvd.reducescatter(x, name="ops.rs", op=op)
            assert got.tolist() == [WANT[label]], (label, op, got.tolist())
            got = hvd.grouped_reducescatter([x, x], name="ops.grs", op=op)
            assert got[1].tolist() == [WANT[label]], (label, op, got[1].tolist())


@check
def integer_ops_in_sparse_allreduce():
    for dt in (torch.float32, torch.float64):
        x = torch.sparse_coo_tensor([[R % 3]], torch.tensor([R + 1.0], dtype=dt), (4,))
        dense = torch.zeros(4, dtype=torch.float64)
        for r in range(P):
            dense[r % 3] += r + 1.0
        for label, want in (("Sum", dense), ("Average", dense / P)):
            for op in forms(label):
                got = hvd.sparse_allreduce_async(x, name="ops.sp.%s" % dt, op=op)()
                assert torch.allclose(got.to_dense().double(), want), (label, op, got)
                got = hvd.allreduce(x, name="ops.spa.%s" % dt, op=op)
                assert torch.allclose(got.to_dense().double(), want), (label, op, got)


@check
def integer_ops_in_distributed_optimizer():
    for label, scale in (("Sum", 1.0), ("Average", 1.0 / P)):
        for op in forms(label):
            w = torch.nn.Parameter(torch.zeros(3))
            opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                           named_parameters=[("ops.w", w)], op=op)
            (w * MINE).sum().backward()
            opt.step()
            want = [-v * scale for v in WANT["Sum"]]
            assert torch.allclose(w.detach(), torch.tensor(want)), (label, op, w)
            assert opt.op == getattr(hvd, label), (label, op, opt.op)
    # Adasum (2): orthogonal steps add up, where an average would divide them by P
    for op in forms("Adasum"):
        w = torch.nn.Parameter(torch.zeros(P))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                       named_parameters=[("ops.wa", w)], op=op)
        (w * torch.eye(P)[R]).sum().backward()
        opt.step()
        assert w.detach().tolist() == [-1.0] * P, (op, w)


def mismatch(tag, x, whats):
    """A sparse allreduce that the ranks give differently under one name: it fails on
    every rank at once (not by a timeout) with an error naming the tensor, the ranks and
    each of ``whats`` (this rank's), and the next collective works."""
    name = "mismatch." + tag
    t0 = time.monotonic()
    err = None
    try:
        hvd.allreduce(x, name=name, op=hvd.Sum, timeout=30)
    except Exception as e:  # noqa: B902
        err = e
    took = time.monotonic() - t0
    still_works(tag)  # first, so that a rank whose check fails leaves none waiting
    assert err is not None, "%s: the mismatched allreduce returned" % tag
    text = str(err)
    print("mismatch %s (%.1f s): %s: %s" % (tag, took, type(err).__name__, text), flush=True)
    assert getattr(err, "status", None) == hvd._sc._lib.SC_ERR_MISMATCH, text
    assert took < 15, "%s: failed after %.1f s" % (tag, took)
    for w in (name, "rank 0") + whats:
        assert w in text, (tag, w, text)
    assert "rank 1 has" in text or "ranks 1, 2 have" in text, (tag, text)


def sparse(dt, n=6):
    return torch.sparse_coo_tensor([[1, 3]], torch.tensor([1.0, 2.0], dtype=dt), (n,))


def form(dt, n=6):
    return "sparse %s of size [%d]" % (str(dt).replace("torch.", ""), n)


@check
def sparse_dtypes_differ_across_ranks():
    # one rank's goes to the COO path, the other's to the allgathers
    dt = torch.float32 if R == 0 else torch.float64
    mismatch("dtype", sparse(dt), (form(dt),))
    # both to the allgathers: every rank names every rank's dtype
    dt = torch.float64 if R == 0 else torch.int64
    mismatch("dtype2", sparse(dt), (form(torch.float64), form(torch.int64)))
    dt = torch.float16 if R == 0 else torch.float32  # both COO: the daemons compare them
    mismatch("dtype3", sparse(dt), ("float16", "float32"))


@check
def sparse_on_one_rank_dense_on_another():
    x = sparse(torch.float32)
    mismatch("layout", x if R == 0 else x.to_dense(), ("COO", "dense"))
    x = sparse(torch.float64)
    mismatch("layout64", x if R == 0 else x.to_dense(),
             (form(torch.float64),) if R == 0 else ())


@check
def sparse_shapes_differ_across_ranks():
    n = 6 if R == 0 else 7
    mismatch("shape", sparse(torch.float32, n), (form(torch.float32, n),))
    mismatch("shape64", sparse(torch.float64, n), (form(torch.float64, 6),
                                                   form(torch.float64, 7)))
    # sizes that differ past the 8th dimension: the exchange carries a digest of them all
    idx = torch.zeros(9, 1, dtype=torch.int64)
    idx[8, 0] = n - 1
    x = torch.sparse_coo_tensor(idx, torch.tensor([1.0], dtype=torch.float64), (1,) * 8 + (n,))
    mismatch("shape9", x, ("digest of its size",))


@check
def sparse_forms_within_a_process_set():
    ps = hvd.add_process_set([0, 1])
    try:
        if R in (0, 1):
            x = torch.sparse_coo_tensor([[R]], torch.tensor([R + 1.0], dtype=torch.float64),
                                        (4,))
            got = hvd.allreduce(x, name="ps.sp", op=1, process_set=ps)
            assert got.to_dense().tolist() == [1.0, 2.0, 0.0, 0.0], got
            x = sparse(torch.float64, 6 + R)
            err = None
            try:
                hvd.allreduce(x, name="ps.sp.bad", op=hvd.Sum, process_set=ps, timeout=30)
            except hvd.HorovodInternalError as e:
                err = e
            assert err is not None and "rank 0 has %s" % form(torch.float64, 6) in str(err) \
                and "rank 1 has %s" % form(torch.float64, 7) in str(err), err
    finally:
        hvd.remove_process_set(ps)
    still_works("ps")



@check
def grouped_allreduce_of_allgathered_sparse():
    # a sparse tensor reduced by allgathers (float64, an integer dtype) among a grouped
    # allreduce's members: its exchanges must not hold the group open
    want = [r + 1.0 for r in range(P)] + [0.0]

    def mine(dt):
        return torch.sparse_coo_tensor([[R]], torch.tensor([R + 1], dtype=dt), (P + 1,))

    for name in ("grouped.sp", None):
        t0 = time.monotonic()
        got = hvd.grouped_allreduce([mine(torch.float64), torch.ones(3), mine(torch.int64),
                                     mine(torch.float32)], name=name, op=hvd.Sum, timeout=30)
        took = time.monotonic() - t0
        still_works("grouped.sp.%s" % name)
        assert took < 15, "%s: took %.1f s" % (name, took)
        assert [g.is_sparse for g in got] == [True, False, True, True], got
        assert got[1].tolist() == [float(P)] * 3, got[1]
        for g, dt in zip(got[::2], (torch.float64, torch.int64)):
            assert g.dtype == dt and g.to_dense().tolist() == want, (name, g)
        assert got[3].to_dense().tolist() == want, (name, got[3])


sys.exit(1 if check.failed else 0)
