#!/usr/bin/python3
"""Run under sparsecomm-run: the collectives of the Python binding beyond sum and
average, against real daemons.  Prints `CHECK <name> ok` or `CHECK <name> FAIL <why>` per
check; exits 1 if any failed.  tests/python/run_tests.py counts a check passed when every
rank says ok."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as sct  # noqa: E402
from checks import Checks  # noqa: E402

torch.set_num_threads(1)
sc.init(timeout=60)
R, P = sc.rank(), sc.size()
check = Checks(sys.argv[1:])


def rank_values(r, n, dtype):
    """Rank r's input: values of both signs, different on every rank."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + r * 13) % 11 - 5
    if dtype.is_floating_point:
        return v.to(dtype) * 1.5  # products exact in any order
    return (v * 100003).to(dtype)  # integer products wrap


@check
def min_max_product_every_dtype():
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64):
        x = rank_values(R, 1001, dt)
        every = torch.stack([rank_values(r, 1001, dt) for r in range(P)])
        want = {"min": every.min(0).values, "max": every.max(0).values,
                "product": every.prod(0, dtype=dt)}
        for op, horovod in (("min", sc.Min), ("max", sct.Max), ("product", sc.Product)):
            got = sc.allreduce(x, name="ops.%s.%s" % (op, dt), op=horovod)
            assert got.dtype == dt, (op, dt, got.dtype)
            assert torch.equal(got, want[op]), "%s of %s: %s vs %s" % (
                op, dt, got[:8].tolist(), want[op][:8].tolist())
            # the name of the op selects the same reduction
            again = sc.allreduce(x, name="ops.%s.%s" % (op, dt), op=op)
            assert torch.equal(again, want[op]), (op, dt)
    # numpy arrays too
    a = np.full(5, R - 1.5)
    assert np.array_equal(sc.allreduce(a, name="ops.np", op=sc.ReduceOp.MAX),
                          np.full(5, P - 2.5))


@check
def int_average_truncates_toward_zero():
    x = torch.tensor([1, -1, 2 * P - 1], dtype=torch.int64) * (R == 0)
    got = sc.allreduce(x, name="ops.intavg", op=sc.Average)
    assert got.tolist() == [0, 0, 1], got


@check
def sparsified_tensor_refuses_max():
    try:
        sc.allreduce(torch.ones(100), name="ops.topk", op=sc.Max, sparsifier="topk",
                     density=0.1)
        raise AssertionError("max of a top-k tensor was accepted")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_UNSUPPORTED" and "ops.topk" in e.message, e


@check
def unknown_op_refused():
    try:
        sc.allreduce(torch.ones(3), name="ops.bad", op="median")
        raise AssertionError("op 'median' was accepted")
    except ValueError as e:
        assert "median" in str(e), e


@check
def barrier_waits_for_the_last_rank():
    import time
    for late in (0, P - 1):
        sc.allreduce(torch.zeros(1), name="barrier.align")  # start together
        t0 = time.monotonic()
        if R == late:
            time.sleep(2.0)  # a barrier that does not wait returns in ms
        sct.barrier()
        dt = time.monotonic() - t0
        assert R == late or dt >= 1.0, "barrier returned after %.3f s, rank %d was 2 s " \
            "late" % (dt, late)
    for _ in range(20):
        sc.barrier(timeout=30)


@check
def broadcast_every_form():
    root = P - 1
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64):
        t = (torch.arange(1000, dtype=torch.int64) * 7 + R).to(dt)
        want = (torch.arange(1000, dtype=torch.int64) * 7 + root).to(dt)
        got = sc.broadcast(t, root_rank=root, name="bc.%s" % dt)
        assert torch.equal(got, want) and torch.equal(t, (torch.arange(1000) * 7 + R).to(dt))
        sct.broadcast_(t, root_rank=root, name="bc_.%s" % dt)
        assert torch.equal(t, want), (dt, t[:4])
    a = np.full((3, 4), float(R))
    assert np.array_equal(sc.broadcast(a, root_rank=1 % P, name="bc.np"), np.full((3, 4), 1.0 % P))
    try:
        sc.broadcast(torch.ones(2), root_rank=P, name="bc.bad")
        raise AssertionError("a root outside the job was accepted")
    except ValueError as e:
        assert str(P) in str(e), e


@check
def broadcast_object_and_optimizer_state():
    obj = {"rank": R, "blob": bytes(range(256)) * (R + 1), "list": list(range(R + 5))}
    got = sc.broadcast_object(obj, root_rank=1 % P)
    assert got == {"rank": 1 % P, "blob": bytes(range(256)) * (1 % P + 1),
                   "list": list(range(1 % P + 5))}, got["rank"]
    torch.manual_seed(R)
    model = torch.nn.Linear(5, 3)
    sct.broadcast_parameters(model.state_dict(), root_rank=0)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(sc.broadcast(flat, root_rank=0, name="bc.check"), flat)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
    if R == 0:  # only the root has stepped: momentum buffers exist there alone
        model(torch.ones(2, 5)).sum().backward()
        opt.step()
    sct.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.1, opt.param_groups[0]["lr"]
    buf = opt.state[model.weight]["momentum_buffer"]
    assert torch.equal(sc.broadcast(buf, root_rank=0, name="bc.momentum"), buf)


@check
def allgather_variable_first_dimension():
    for dt in (torch.float32, torch.int64):
        x = torch.arange((R + 1) * 3 * 2, dtype=dt).view(R + 1, 3, 2) + 100 * R
        got = sct.allgather(x, name="ag.%s" % dt)
        want = torch.cat([torch.arange((r + 1) * 6, dtype=dt).view(r + 1, 3, 2) + 100 * r
                          for r in range(P)])
        assert got.dtype == dt and torch.equal(got, want), (got.shape, want.shape)
    # a rank with no rows, numpy
    a = np.full((0 if R == 0 else R, 2), float(R))
    got = sc.allgather(a, name="ag.np")
    assert np.array_equal(got, np.concatenate([np.full((0 if r == 0 else r, 2), float(r))
                                               for r in range(P)]))
    objs = sc.allgather_object({"rank": R, "pad": "x" * (R * 37)})
    assert objs == [{"rank": r, "pad": "x" * (r * 37)} for r in range(P)], objs
    try:  # rows of different lengths
        sc.allgather(torch.zeros(2, 3 + (R == 1)), name="ag.bad")
        raise AssertionError("rows of different lengths were accepted")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_MISMATCH" and "rank 1 has 4" in e.message, e


@check
def alltoall_splits_every_dtype():
    # rank r sends rank q (r + 2 q) % 3 rows (zeros among them; rank 1 sends nothing),
    # rows past the splits' sum stay home
    def split(r, q):
        return 0 if r == 1 else (r + 2 * q) % 3

    for dt in (torch.float32, torch.int64):
        sp = [split(R, q) for q in range(P)]
        rows = sum(sp) + 1
        x = torch.arange(rows * 3, dtype=dt).view(rows, 3) + 1000 * R
        got, rsp = sct.alltoall(x, splits=sp, name="a2a.%s" % dt)
        want = torch.cat([(torch.arange(rows_r * 3, dtype=dt).view(rows_r, 3) + 1000 * r)[
            sum(split(r, q) for q in range(R)):][:split(r, R)]
            for r in range(P) for rows_r in [sum(split(r, q) for q in range(P)) + 1]])
        assert got.dtype == dt and torch.equal(got, want), (got, want)
        assert rsp.dtype == torch.int32 and rsp.tolist() == [split(r, R) for r in range(P)], rsp
    # the even split (numpy, through the base module): (received, received splits)
    a = np.arange(2 * P, dtype=np.float64) + 100 * R
    got, rsp = sc.alltoall(a, name="a2a.even")
    assert np.array_equal(got, np.array([100 * r + 2 * R + k for r in range(P) for k in (0, 1)],
                                        dtype=np.float64)), got
    assert list(rsp) == [2] * P, rsp
    # Horovod's alltoall without splits returns the tensor alone; synchronize() of its
    # async form returns the tensor and the received splits, as Horovod's
    got = sct.alltoall(torch.full((P, 2), float(R)), name="a2a.plain")
    assert torch.equal(got, torch.arange(float(P)).repeat_interleave(2).view(P, 2)), got
    h = sct.alltoall_async(torch.full((P, 2), float(R)), name="a2a.async")
    got, rsp = sct.synchronize(h)
    assert torch.equal(got, torch.arange(float(P)).repeat_interleave(2).view(P, 2)), got
    assert rsp.dtype == torch.int32 and rsp.tolist() == [1] * P, rsp
    try:  # splits refused on rank 1 alone (too few): every rank fails naming it
        sct.alltoall(torch.zeros(P, 2), splits=[1] * (P - (R == 1)), name="a2a.bad")
        raise AssertionError("a wrong number of splits was accepted")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_INVALID" and "rank 1" in e.message, e
    try:  # rows that no even split divides, on every rank
        sct.alltoall(torch.zeros(P + 1, 2), name="a2a.uneven")
        raise AssertionError("an uneven default split was accepted")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_INVALID" and "evenly" in e.message, e


@check
def reducescatter_rows_in_rank_order():
    rows = 2 * P + 1  # uneven: the first rank gets one row more
    x = torch.arange(rows * 4, dtype=torch.float64).view(rows, 4) * (R + 1)
    total = torch.arange(rows * 4, dtype=torch.float64).view(rows, 4) * (P * (P + 1) / 2)
    first = R * (rows // P) + min(R, rows % P)
    mine = rows // P + (R < rows % P)
    got = sct.reducescatter(x, op=sc.Sum, name="rs.sum")
    assert torch.equal(got, total[first:first + mine]), (got.shape, first, mine)
    got = sc.reducescatter(x, name="rs.avg")  # Horovod's default: the average
    assert torch.allclose(got, total[first:first + mine] / P), got


@check
def join_uneven_steps():
    # rank r trains 2 (r + 1) steps; the joined ranks add zeros to the others' sums
    steps = 2 * (R + 1)
    for s in range(steps):
        got = sc.allreduce(torch.full((10,), float(R + 1)), name="join.grad", average=False)
        want = sum(r + 1 for r in range(P) if 2 * (r + 1) > s)
        assert torch.equal(got, torch.full((10,), float(want))), (s, got[0].item(), want)
    assert sct.join() == P - 1


if "alltoall_with_a_joined_rank" in check.only:  # a job of its own: it joins every rank
    @check
    def alltoall_with_a_joined_rank():
        # rank 0 joins; the others alltoall with splits, rank 0 taking part with zeros:
        # nothing comes from it, and nothing sent to it is lost to the others
        def split(r, q):
            return 1 + (r + q) % 2

        if R == 0:
            assert 1 <= sct.join() < P  # the others join after their alltoalls
            return
        for step in range(2):
            sp = [split(R, q) for q in range(P)]
            x = torch.arange(sum(sp) * 2, dtype=torch.float32).view(-1, 2) + 1000 * R + step
            got, rsp = sct.alltoall(x, splits=sp, name="a2a.joined")
            assert rsp.tolist() == [0] + [split(r, R) for r in range(1, P)], rsp
            want = torch.cat([(torch.arange(sum(split(r, q) for q in range(P)) * 2,
                                            dtype=torch.float32).view(-1, 2) + 1000 * r +
                               step)[sum(split(r, q) for q in range(R)):][:split(r, R)]
                              for r in range(1, P)])
            assert torch.equal(got, want), (got, want)
        assert 1 <= sct.join() < P


sc.shutdown()
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
