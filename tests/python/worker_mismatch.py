#!/usr/bin/python3
"""Run under sparsecomm-run (2 ranks or more) with a long stall_timeout_ms (60 s): calls
whose tensors differ across ranks must fail at once on every rank, well before the stall
timeout, with SC_ERR_MISMATCH naming the tensor and each rank's element count or shape,
and the next collective must still work.  Covered: an empty tensor on rank 0 only
(allreduce, broadcast, reduce-scatter, named and unnamed), an unnamed allreduce whose
shape differs after ranks had made the same calls, an empty member of a grouped allreduce
on rank 0 only, and what must still complete: an empty allreduce, broadcast or
reduce-scatter on every rank, an allgather or alltoall whose rows are none on one rank.
Prints `CHECK <name> ok|FAIL <why>`."""
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402

PROMPT_S = 10.0  # "at once": well under the 60 s stall timeout the test sets
torch.set_num_threads(1)
sc.init(timeout=90)
R, P = sc.rank(), sc.size()
sc.barrier()  # every rank started: the times below are the calls' own
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def still_works(tag):
    """The next collective after a failure completes with the right sum."""
    got = sc.allreduce(torch.full((3,), float(R + 1)), name="after." + tag, average=False)
    assert got.tolist() == [P * (P + 1) / 2.0] * 3, (tag, got)


def fails(tag, call, *wants):
    """call() must raise SC_ERR_MISMATCH within PROMPT_S, its text holding every string of
    wants; then the next collective works."""
    t0 = time.monotonic()
    try:
        got = call()
    except sc.SparsecommError as e:
        secs = time.monotonic() - t0
        print("%s: %.2f s: %s" % (tag, secs, e), flush=True)
        assert e.status == sc._lib.SC_ERR_MISMATCH, (tag, e.status_name, str(e))
        assert secs < PROMPT_S, "%s failed only after %.1f s: %s" % (tag, secs, e)
        for w in wants:
            assert w in str(e), "%s: %r not in %r" % (tag, w, str(e))
        still_works(tag)
        return
    raise AssertionError("%s returned %r after %.1f s instead of failing" %
                         (tag, got, time.monotonic() - t0))


def empty_on_rank0(shape, full):
    return torch.zeros(shape) if R == 0 else torch.ones(full)


@check
def empty_allreduce_on_one_rank_fails_at_once():
    fails("ar_named", lambda: sc.allreduce(empty_on_rank0((0,), (4,)), name="ar.empty",
                                           average=False),
          "'ar.empty'", "rank 0 has 0 [0]", "rank 1 has 4")
    # a tensor of 0 rows of 3 against 2 rows of 3 (the shape is named)
    fails("ar_rows", lambda: sc.allreduce(empty_on_rank0((0, 3), (2, 3)), name="ar.rows",
                                          average=False),
          "'ar.rows'", "rank 0 has 0 [0, 3]", "rank 1 has 6 [2, 3]")
    fails("ar_unnamed", lambda: sc.allreduce(empty_on_rank0((0,), (5,)), average=False),
          "allreduce.noname", "rank 0 has 0 [0]", "rank 1 has 5")
    # the name, given empty and then not, works on every rank again
    x = sc.allreduce(torch.ones(4), name="ar.empty", average=False)
    assert x.tolist() == [float(P)] * 4, x


@check
def empty_broadcast_and_reducescatter_on_one_rank_fail_at_once():
    fails("bc", lambda: sc.broadcast(empty_on_rank0((0,), (4,)), root_rank=1, name="bc.e"),
          "'bc.e'", "rank 0 has 0 [0]", "rank 1 has 4")
    fails("rs", lambda: sc.reducescatter(empty_on_rank0((0, 2), (4, 2)), name="rs.e",
                                         op=sc.ReduceOp.SUM),
          "'rs.e'", "rank 0 has 0 [0, 2]", "rank 1 has 8 [4, 2]")


@check
def empty_everywhere_completes():
    t0 = time.monotonic()
    for i in range(3):
        got = sc.allreduce(torch.zeros((0, 3)), name="all.empty", average=False)
        assert tuple(got.shape) == (0, 3), got.shape
        got = sc.allreduce(np.zeros(0, dtype=np.float32), average=True)
        assert got.shape == (0,), got.shape
        b = torch.zeros(0)
        sc.broadcast_(b, root_rank=P - 1)
        got = sc.reducescatter(torch.zeros((0, 4)), op=sc.ReduceOp.SUM)
        assert tuple(got.shape) == (0, 4), got.shape
    secs = time.monotonic() - t0
    assert secs < PROMPT_S, "empty collectives on every rank took %.1f s" % secs
    still_works("empty_everywhere")


@check
def grouped_empty_member_on_one_rank_fails_at_once():
    import sparsecomm.torch as hvd
    xs = [torch.ones(3), torch.zeros(0) if R == 0 else torch.ones(2)]
    fails("grouped", lambda: hvd.grouped_allreduce(xs, name="grp", op=hvd.Sum), "'grp.1'",
          "rank 0 has 0 [0]", "rank 1 has 2")
    got = hvd.grouped_allreduce([torch.ones(3), torch.zeros(0)], name="grp.e", op=hvd.Sum)
    assert got[0].tolist() == [float(P)] * 3 and tuple(got[1].shape) == (0,), got


@check
def allgather_and_alltoall_of_no_rows_on_one_rank_work():
    for name in ("ag.rows", None):
        x = torch.zeros((0, 2)) if R == 0 else torch.full((R, 2), float(R))
        got = sc.allgather(x, name=name)
        want = torch.cat([torch.full((r, 2), float(r)) for r in range(P)])
        assert torch.equal(got, want), (name, got)
    got = sc.allgather(torch.zeros((0, 2)), name="ag.none")
    assert tuple(got.shape) == (0, 2), got.shape
    # an alltoall from a rank of no rows: legal in Horovod too (splits of 0)
    for name in ("a2a.rows", None):
        x = torch.zeros((0, 2)) if R == 0 else torch.full((P, 2), float(R))
        got, splits = sc.alltoall(x, torch.tensor([0] * P if R == 0 else [1] * P), name=name)
        assert splits.tolist() == [0] + [1] * (P - 1), (name, splits)
        assert got[:, 0].tolist() == [float(r) for r in range(1, P)], (name, got)


@check
def unnamed_shape_mismatch_fails_at_once():
    # the same unnamed calls on every rank first, then rank 0 gives another shape
    for _ in range(2):
        assert sc.allreduce(torch.ones(4), average=False).tolist() == [float(P)] * 4
    fails("unnamed", lambda: sc.allreduce(torch.ones(4 if R else 6), average=False),
          "allreduce.noname", "rank 0 has 6", "rank 1 has 4")
    fails("unnamed_2d", lambda: sc.allreduce(torch.ones((2, 3) if R else (3, 2)),
                                             average=False),
          "allreduce.noname", "rank 0 has [3, 2]", "rank 1 has [2, 3]")
    # and the unnamed calls go on
    for n in (4, 6, 4):
        assert sc.allreduce(torch.ones(n), average=False).tolist() == [float(P)] * n


sel = sys.argv[1:] or list(CHECKS)
for name in sel:
    try:
        CHECKS[name]()
        print("CHECK %s ok" % name, flush=True)
    except Exception as e:  # noqa: B902
        traceback.print_exc()
        print("CHECK %s FAIL %s" % (name, str(e).replace("\n", " ")[:400]), flush=True)
sc.shutdown()
