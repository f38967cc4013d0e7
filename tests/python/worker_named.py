#!/usr/bin/python3
"""Run under sparsecomm-run with 4 trainers (2 nodes x 2): named registrations stay
bounded.  Every distinct ``name=`` registers a shared buffer with the node's daemon; the
package releases the least recently used idle ones past $SPARSECOMM_PY_NAMED_MAX and when
the node has no room (sparsecomm's module doc, "Named registrations stay bounded").

With the daemons' max_registrations at 64 (run_tests.py passes it): uniquely named
allreduces, allgathers, broadcasts and alltoalls, every result exact, registrations
bounded; a DistributedOptimizer's buffers and a register()ed name kept throughout; and,
last, a node filled with kept names refuses the next one naming it.  With the default
limit: ranks that let names go at different times (a cap of their own each, names used
in different orders, shapes changing meanwhile), in the job and in process sets, reduce
exactly.  Prints `CHECK <name> ok` or `CHECK <name> FAIL <why>`; exits 1 if any failed."""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks, daemon_tensors  # noqa: E402

torch.set_num_threads(1)
A, B = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3])
hvd.init(timeout=60, process_sets=[A, B])
R, P, L = sc.rank(), sc.size(), sc.local_rank()
assert P == 4 and sc.local_size() == 2, "worker_named.py runs on 2 nodes x 2 trainers"
TRI = P * (P + 1) // 2
LIMIT = 64  # the daemons' max_registrations in the limited run
check = Checks(sys.argv[1:])
DEFAULT_CAP = sc._NAMED_MAX


def named():
    """This trainer's registrations that may be released for room (the library's count)."""
    return len(sc._ctx.named)


def exact(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and np.array_equal(got, want), (
        "%s: got %s, want %s" % (what, got.reshape(-1)[:6], want.reshape(-1)[:6]))


def flood_step(i):
    """One step of uniquely named collectives, each result checked."""
    got = sc.allreduce(np.full(5 + i % 3, float(R + 1 + i % 7), np.float32),
                       name="loss.%d" % i, average=False)
    exact(got, np.full(5 + i % 3, TRI + P * (i % 7), np.float32), "allreduce loss.%d" % i)
    if i % 3 == 0:  # rows that differ across ranks
        rows = 1 + (R + i) % 3
        mine = np.full((rows, 2), R * 100 + i, np.int32)
        want = np.concatenate([np.full((1 + (r + i) % 3, 2), r * 100 + i, np.int32)
                               for r in range(P)])
        exact(sc.allgather(mine, name="gather.%d" % i), want, "allgather gather.%d" % i)
    if i % 5 == 0:
        root = i % P
        got = sc.broadcast(np.full(4, R * 10 + i, np.int64), root_rank=root,
                           name="bcast.%d" % i)
        exact(got, np.full(4, root * 10 + i, np.int64), "broadcast bcast.%d" % i)
    if i % 11 == 0:  # one row to each rank: row q of rank s is s * 1000 + q * 10 + i
        mine = np.array([[R * 1000 + q * 10 + i] for q in range(P)], np.float64)
        got = sc.alltoall(mine, splits=[1] * P, name="a2a.%d" % i)[0]
        exact(got, np.array([[s * 1000 + R * 10 + i] for s in range(P)], np.float64),
              "alltoall a2a.%d" % i)


@check
def flood_exact_and_bounded():
    # on a node of 64 registrations for its two trainers, without the package letting
    # names go the 33rd or so unique name fails with SC_ERR_LIMIT
    kept = sc.register("kept.w", 16)
    kept_e = sc._ctx.entries["kept.w"]
    # a register()ed name given a new dtype is registered anew, and stays kept
    sc.register("kept.d", 16)
    # (an allreduce lines the node's two trainers up: both hold the float32 form before
    # one leaves it, see register())
    sc.allreduce(np.zeros(16, np.float32), name="kept.w")
    got = sc.allreduce(np.full(16, 1.0, np.float64), name="kept.d", average=False)
    exact(got, np.full(16, float(P), np.float64), "allreduce of kept.d as float64")
    kept_d = sc._ctx.entries["kept.d"]
    assert kept_d.dtype != kept_e.dtype and kept_d.kept, "kept.d: not kept as float64"
    most = 0
    for i in range(240):
        flood_step(i)
        if i % 20 == 0:
            got = sc.allreduce(np.full(16, float(R), np.float32), name="kept.w", average=False)
            exact(got, np.full(16, TRI - P, np.float32), "allreduce kept.w")
        most = max(most, len(sc.registered()))
        assert most <= LIMIT, "%d registrations held" % most
    assert sc._ctx.entries.get("kept.w") is kept_e, "the register()ed name was released"
    assert sc._ctx.entries.get("kept.d") is kept_d, "kept.d, registered anew, was released"
    assert kept["numel"] == 16
    held = daemon_tensors()
    assert held <= LIMIT, "the daemon counts %d registrations of this trainer" % held
    print("flood: at most %d registrations, %d at the end, %d named" %
          (most, held, named()), flush=True)


def grads_of(model, x):
    m = copy.deepcopy(model)
    m(x).sum().backward()
    return [p.grad.clone() for p in m.parameters()]


def make_x(r, step):
    return torch.tensor([[(r + k + step) % 5 for k in range(4)] for _ in range(3)],
                        dtype=torch.float32)


@check
def optimizer_buffers_kept():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False),
                                torch.nn.Linear(3, 2, bias=False))
    with torch.no_grad():  # small integers: every gradient and its average exact
        for j, p in enumerate(model.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).view(p.shape) % 3 + j)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    first = None
    for step in range(8):
        want = [sum(g) / P for g in zip(*(grads_of(model, make_x(r, step))
                                          for r in range(P)))]
        opt.zero_grad()
        model(make_x(R, step)).sum().backward()
        opt.synchronize()
        for p, w in zip(model.parameters(), want):
            exact(p.grad.numpy(), w.numpy(), "step %d gradient" % step)
        with opt.skip_synchronize():
            opt.step()
        bufs = {k: e for k, e in sc._ctx.entries.items()
                if isinstance(k, str) and k.startswith("grad.")}
        assert len(bufs) == 2 and all(e.kept for e in bufs.values()), bufs
        if first is None:
            first = bufs
        assert all(bufs[k] is first[k] for k in first), \
            "step %d: a gradient's buffer was registered again" % step
        for i in range(1000 + 40 * step, 1040 + 40 * step):  # a node's room, used up
            flood_step(i)


@check
def asymmetric_eviction_exact():
    # each rank its own cap: they let names go at different times, names come back with
    # another shape meanwhile, and two names are started in an order of each rank's own
    cap = (5, 40, 12, 1000)[R]
    sc._NAMED_MAX = cap
    try:
        rng = np.random.RandomState(7)  # the same picks on every rank
        for i in range(300):
            k = rng.randint(30)
            n = 3 + ((i // 60) + k) % 3 if k % 4 == 0 else 3
            got = sc.allreduce(np.full(n, float(R + 1 + i % 5), np.float32),
                               name="pool.%d" % k, average=False)
            exact(got, np.full(n, TRI + P * (i % 5), np.float32), "pool.%d step %d" % (k, i))
            if i % 25 == 0:
                a, b = "pair.%d" % rng.randint(6), "pair.x%d" % rng.randint(6)
                order = (a, b) if R % 2 else (b, a)
                hs = {nm: sc.allreduce_async(np.full(2, float(R + i), np.float32), name=nm,
                                             average=False) for nm in order}
                for nm in (a, b):
                    exact(hs[nm].wait(), np.full(2, TRI - P + P * i, np.float32), nm)
            assert named() <= cap, "%d named registrations past the cap %d" % (named(), cap)
    finally:
        sc._NAMED_MAX = DEFAULT_CAP


@check
def shape_change_after_long_eviction():
    # local rank 0 lets 'long.x' go and a hundred names after it; local rank 1 keeps it.
    # Both then give it a new shape: the node must take local rank 0's new registration
    # as a replacement (however long ago it let go), not as its trainers disagreeing
    sc._NAMED_MAX = 8 if L == 0 else 100000
    try:
        got = sc.allreduce(np.full(4, float(R), np.float32), name="long.x", average=False)
        exact(got, np.full(4, TRI - P, np.float32), "long.x")
        for i in range(100):
            got = sc.allreduce(np.full(2, float(R + i), np.float32), name="long.churn.%d" % i,
                               average=False)
            exact(got, np.full(2, TRI - P + P * i, np.float32), "long.churn.%d" % i)
        assert (("long.x" in sc._ctx.entries) == (L == 1)), "local rank %d: %s" % (
            L, "long.x" in sc._ctx.entries)
        for k in range(2):
            got = sc.allreduce(np.full(6, float(R + k), np.float32), name="long.x",
                               average=False)
            exact(got, np.full(6, TRI - P + P * k, np.float32), "long.x, new shape")
    finally:
        sc._NAMED_MAX = DEFAULT_CAP


@check
def process_set_names_evicted_apart():
    ps = A if A.included() else B
    sc._NAMED_MAX = (4, 30, 30, 4)[R]  # set A: 4 and 30; set B: 30 and 4
    try:
        rng = np.random.RandomState(11)
        base = sum(r + 1 for r in ps.ranks)
        for i in range(150):
            k = rng.randint(15)
            n = 2 + (i // 50 + k) % 2
            got = sc.allreduce(np.full(n, float(R + 1 + i % 3), np.float32), name="ps.%d" % k,
                               average=False, process_set=ps)
            exact(got, np.full(n, base + 2 * (i % 3), np.float32), "ps.%d in its set" % k)
            if i % 10 == 0:  # the same name in the job: another tensor
                got = sc.allreduce(np.full(3, float(R), np.float32), name="ps.%d" % k,
                                   average=False)
                exact(got, np.full(3, TRI - P, np.float32), "ps.%d in the job" % k)
    finally:
        sc._NAMED_MAX = DEFAULT_CAP


@check
def nothing_to_release_raises():
    # kept names until the node has no room: the named ones go first, then the refusal
    # is raised as before, naming the tensor (run last: the node stays full)
    for i in range(2 * LIMIT):
        try:
            sc.register("full.%d" % i, 8)
        except sc.SparsecommError as e:
            assert e.status_name == "SC_ERR_LIMIT" and "'full.%d'" % i in str(e), e
            if named() == 0:  # (the node's other trainer may have taken the room freed)
                return
    raise AssertionError("%d kept names registered on a node of %d" % (2 * LIMIT, LIMIT))


sc.shutdown()
sys.exit(1 if check.failed else 0)
