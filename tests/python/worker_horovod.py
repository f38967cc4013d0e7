#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: Horovod's contract, call by call, through
``import sparsecomm.torch as hvd`` as a Horovod user writes it.  Prints `CHECK <name> ok`
or `CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks, daemon_shm, daemon_tensors, raises  # noqa: E402

torch.set_num_threads(1)
# before init(), as Horovod's: what the build has (the daemon's symbols, run_tests.py)
PRE_INIT_BUILT = (hvd.nccl_built(), hvd.cuda_built())
hvd.init()
sc.init(timeout=60)
R, P = hvd.rank(), hvd.size()
TRI = P * (P + 1) // 2  # the sum of rank + 1 over the ranks
check = Checks(sys.argv[1:])


def held_everywhere(want):
    """The registrations held here and by the daemon equal want, and the daemon's shm
    objects want per trainer of the node (the daemon unlinks a released object on a
    worker thread: waited for, 10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        got = (len(sc.registered()), daemon_tensors(), len(daemon_shm()) // hvd.local_size())
        if got == (want,) * 3 or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@check
def new_shape_or_dtype_under_a_name():
    # Horovod negotiates every call: the same name may carry another shape or dtype
    for n, dt in ((10, torch.float32), (1, torch.float32), (25, torch.int32),
                  (5, torch.int32), (64, torch.int64), (10, torch.float32)):
        x = torch.full((n,), R + 1, dtype=dt)
        got = hvd.allreduce(x, name="grad.bias", op=hvd.Sum)
        assert got.dtype == dt and got.shape == (n,), (got.dtype, got.shape, n, dt)
        assert torch.equal(got, torch.full((n,), TRI, dtype=dt)), (n, dt, got[:3])
    info = sc.registered()["grad.bias"]
    assert info["numel"] == 10 and info["dtype"] == "float32", info
    # the old buffers were released: one registration and one shm object for the name
    n = len(sc.registered())
    assert held_everywhere(n) == (n, n, n), held_everywhere(n)
    # allgather of per-rank sizes of a new dtype under the same name
    for dt in (torch.int32, torch.int64):
        g = hvd.allgather(torch.full((R + 1, 2), R, dtype=dt), name="sizes")
        want = torch.cat([torch.full((r + 1, 2), r, dtype=dt) for r in range(P)])
        assert torch.equal(g, want), (dt, g)


@check
def unnamed_calls_of_ever_new_shapes_stay_bounded():
    before = sum(1 for n in sc.registered() if ".noname." in n)
    for n in range(1, 3 * sc._UNNAMED_CLASSES):
        got = hvd.allreduce(torch.full((n,), float(R + 1)), op=hvd.Sum)
        assert torch.equal(got, torch.full((n,), float(TRI))), (n, got[:3])
    held = sum(1 for n in sc.registered() if ".noname." in n)
    assert held <= sc._UNNAMED_CLASSES + before, "%d unnamed buffers held" % held
    n = len(sc.registered())
    assert held_everywhere(n) == (n, n, n), held_everywhere(n)


@check
def next_calls_work_after_a_reshape():
    for step in range(3):  # variable-length batches: a new length every step
        n = 3 + 2 * step
        got = hvd.allreduce(torch.arange(n, dtype=torch.float64) * (R + 1), name="seq",
                            op=hvd.Average)
        assert torch.allclose(got, torch.arange(n, dtype=torch.float64) * TRI / P), got


@check
def grouped_operations():
    xs = [torch.full((n,), float(R + 1)) for n in (3, 1000, 17)]
    got = hvd.grouped_allreduce(xs, name="grp", op=hvd.Sum)
    assert [g.tolist() for g in got] == [[float(TRI)] * n for n in (3, 1000, 17)], got
    h = hvd.grouped_allreduce_async(xs, op=hvd.Average)  # unnamed members
    avg = hvd.synchronize(h)
    assert all(torch.allclose(a, torch.full_like(a, TRI / P)) for a in avg), avg
    ys = [x.clone() for x in xs]
    assert hvd.grouped_allreduce_(ys, name="grp_", op=hvd.Sum) is not None
    assert all(torch.equal(y, torch.full_like(y, float(TRI))) for y in ys), ys
    h = hvd.grouped_allreduce_async_(ys, name="grp_", op=hvd.Max)
    hvd.synchronize(h)
    assert all(torch.equal(y, torch.full_like(y, float(TRI))) for y in ys), ys
    ga = hvd.grouped_allgather([torch.full((R + 1,), R), torch.full((1, 2), R * 1.0)])
    assert ga[0].tolist() == sum([[r] * (r + 1) for r in range(P)], []), ga[0]
    assert ga[1].tolist() == [[float(r)] * 2 for r in range(P)], ga[1]
    rows = torch.arange(2 * P, dtype=torch.float32).view(P, 2) * (R + 1)
    rs = hvd.grouped_reducescatter([rows, rows + 1], op=hvd.Sum)
    assert rs[0].tolist() == [[(2 * R) * TRI, (2 * R + 1) * TRI]], rs[0]
    assert rs[1].tolist() == [[(2 * R) * TRI + P, (2 * R + 1) * TRI + P]], rs[1]


@check
def grouped_members_held_until_all_ready():
    # the daemons hold a group's members until the last is ready on every rank: the
    # first member, started 0.3 s before the last, is still running when the last starts
    xs = [torch.full((n,), float(R + 1)) for n in (5, 700, 9)]
    first, polled = [], []

    def start(i):
        def f():
            if i == len(xs) - 1:
                time.sleep(0.3)
                polled.append(first[0].poll())
            h = hvd.allreduce_async(xs[i], name="held.%d" % i, op=hvd.Sum)
            first.append(h)
            return h
        return f

    for step in range(2):
        first.clear(), polled.clear()
        hs = sc.grouped_start([start(i) for i in range(len(xs))])
        assert polled == [False], "the first member ended before the group was whole"
        got = [hvd.synchronize(h) for h in hs]
        assert all(torch.equal(g, torch.full_like(g, float(TRI))) for g in got), got


@check
def async_calls():
    h = hvd.allgather_async(torch.full((2,), R, dtype=torch.int64), name="ag.async")
    assert hvd.synchronize(h).tolist() == sum([[r, r] for r in range(P)], []), h
    root = P - 1
    h = hvd.broadcast_async(torch.full((4,), float(R)), root_rank=root, name="bc.async")
    assert hvd.synchronize(h).tolist() == [float(root)] * 4
    t = torch.full((4,), float(R))
    hvd.synchronize(hvd.broadcast_async_(t, root_rank=root, name="bc.async_"))
    assert t.tolist() == [float(root)] * 4, t
    rows = torch.ones(P, 3) * (R + 1)
    h = hvd.reducescatter_async(rows, name="rs.async", op=hvd.Sum)
    assert hvd.synchronize(h).tolist() == [[float(TRI)] * 3], h
    sp = torch.sparse_coo_tensor([[R, P]], [float(R + 1), 1.0], (P + 1, )).coalesce()
    got = hvd.synchronize(hvd.sparse_allreduce_async(sp, name="sparse.async", op=hvd.Sum))
    assert got.is_sparse, got
    want = [float(r + 1) for r in range(P)] + [float(P)]
    assert got.to_dense().tolist() == want, got.to_dense()
    try:
        hvd.sparse_allreduce_async(torch.ones(3), name="sparse.dense")
        raise AssertionError("a dense tensor was taken by sparse_allreduce_async")
    except TypeError:
        pass


@check
def scale_factors():
    x = torch.full((5,), float(R + 1))
    got = hvd.allreduce(x, name="scaled", op=hvd.Sum, prescale_factor=2.0,
                        postscale_factor=0.5)
    assert got.tolist() == [float(TRI)] * 5, got
    got = hvd.allreduce(x, name="scaled", op=hvd.Average, postscale_factor=3.0)
    assert torch.allclose(got, torch.full((5,), 3.0 * TRI / P)), got
    y = x.clone()
    hvd.allreduce_(y, name="scaled_", op=hvd.Sum, prescale_factor=10.0)
    assert y.tolist() == [10.0 * TRI] * 5, y
    assert x.tolist() == [float(R + 1)] * 5  # the input of the out-of-place call
    rows = torch.ones(P, 2) * (R + 1)
    rs = hvd.reducescatter(rows, name="rs.scaled", op=hvd.Sum, prescale_factor=4.0,
                           postscale_factor=0.25)
    assert rs.tolist() == [[float(TRI)] * 2], rs


@check
def capability_queries():
    built = (sc._lib.load().sc_daemon_built(sc._need().client) or b"").decode().split()
    assert "tcp" in built, built
    # nccl_built() is Horovod's int: NCCL's version code (2.19.3: 21903), 0 without it;
    # a daemon without the nccl transport answers 0, one with it the version of the
    # libnccl.so.2 it would load (0 where none loads)
    nccl = hvd.nccl_built()
    assert type(nccl) is int and type(PRE_INIT_BUILT[0]) is int, (nccl, PRE_INIT_BUILT)
    assert nccl == 0 or ("nccl" in built and nccl >= 2000), (nccl, built)
    assert hvd.cuda_built() == ("cuda" in built)
    want_nccl = os.environ.get("SPARSECOMM_EXPECT_NCCL_BUILT")
    if want_nccl == "0":  # run_tests.py: from the build's configuration
        assert nccl == 0 and PRE_INIT_BUILT[0] == 0, (nccl, PRE_INIT_BUILT)
    assert isinstance(PRE_INIT_BUILT[1], bool), PRE_INIT_BUILT
    for q in (hvd.mpi_built, hvd.mpi_enabled, hvd.gloo_built, hvd.gloo_enabled,
              hvd.ccl_built, hvd.ddl_built, hvd.rocm_built):
        assert q() is False, q.__name__
    # Horovod's raises ValueError where MPI is not enabled, as here
    try:
        hvd.mpi_threads_supported()
        raise AssertionError("mpi_threads_supported() did not raise ValueError")
    except ValueError as e:
        assert "MPI" in str(e), e


@check
def timeline_start_stop():
    path = os.path.join(os.environ.get("SPARSECOMM_TEST_TMP", "/tmp"),
                        "hvd-tl-%d.json" % os.getppid())
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(8), name="tl.grad")
    hvd.barrier()
    hvd.stop_timeline()
    hvd.barrier()
    if R == 0:  # the daemon of node 0 writes path, as Horovod's rank 0
        cands = [path]
        deadline = time.monotonic() + 10
        while not any(os.path.exists(p) and os.path.getsize(p) for p in cands):
            assert time.monotonic() < deadline, "no timeline at %s" % cands
            time.sleep(0.05)
        tl = next(p for p in cands if os.path.exists(p))
        deadline = time.monotonic() + 10
        while True:  # closed (its trailer written) once stopped
            with open(tl) as f:
                text = f.read()
            if "tl.grad" in text and text.rstrip().endswith("}"):
                break
            assert time.monotonic() < deadline, "timeline %s: %r" % (tl, text[-200:])
            time.sleep(0.05)
    try:
        hvd.start_timeline(path, mark_cycles=True)
        raise AssertionError("mark_cycles was accepted")
    except NotImplementedError:
        pass


def still_works(tag):
    """The next operations work after an error: named, unnamed, grouped."""
    got = hvd.allreduce(torch.full((4,), float(R + 1)), name="after." + tag, op=hvd.Sum)
    assert got.tolist() == [float(TRI)] * 4, (tag, got)
    got = hvd.allreduce(torch.full((2,), float(R + 1)), op=hvd.Sum)
    assert got.tolist() == [float(TRI)] * 2, (tag, got)
    hvd.barrier()


@check
def grouped_mismatch_raises_everywhere():
    # rank 0 groups two tensors where the others group three: every rank raises
    # Horovod's error naming the group's tensors and ranks; then everything works
    n = 2 if R == 0 else 3
    e = raises(hvd.HorovodInternalError, hvd.grouped_allreduce,
               [torch.full((4,), float(R + 1)) for _ in range(n)], name="gmis", op=hvd.Sum)
    text = str(e)
    print("grouped mismatch: %s" % text, flush=True)
    assert "group" in text and "gmis." in text and "rank 0" in text, text
    if R == 0:  # it owes the step of the member it did not submit (refused at once)
        e = raises(hvd.HorovodInternalError, hvd.allreduce, torch.ones(4), name="gmis.2",
                   op=hvd.Sum)
        assert "submitted it late" in str(e), e
    still_works("group")
    got = hvd.grouped_allreduce([torch.full((4,), float(R + 1))] * 3, name="gmis", op=hvd.Sum)
    assert all(g.tolist() == [float(TRI)] * 4 for g in got), got


@check
def broadcast_root_not_a_rank():
    for root in (P, -1, 100):
        raises(ValueError, hvd.broadcast, torch.ones(3), root_rank=root, name="bc.bad")
        raises(ValueError, hvd.broadcast_async_, torch.ones(3), root_rank=root)
    still_works("badroot")


@check
def same_name_twice_in_flight():
    h = hvd.allreduce_async(torch.ones(6), name="twice", op=hvd.Sum)
    e = raises(hvd.HorovodInternalError, hvd.allreduce_async, torch.ones(6), name="twice")
    assert "twice" in str(e) and "in flight" in str(e), e
    # the first one completes, and the name works again
    assert hvd.synchronize(h).tolist() == [float(P)] * 6
    # a new shape while the name is in flight is refused the same way
    h = hvd.allreduce_async(torch.ones(6), name="twice", op=hvd.Sum)
    raises(hvd.HorovodInternalError, hvd.allreduce_async, torch.ones(9), name="twice")
    assert hvd.synchronize(h).tolist() == [float(P)] * 6
    still_works("twice")


def mismatch(tag, x, op, what, mine, theirs):
    """An allreduce that rank 0 gives differently from the others: it fails on every rank
    with an error naming each value once with every rank that gave it."""
    e = raises(hvd.HorovodInternalError, hvd.allreduce, x, name="mismatch." + tag, op=op)
    text = str(e)
    print("mismatch %s: %s" % (tag, text), flush=True)
    others = ("rank 1 has" if P == 2 else "ranks 1, 2 have" if P == 3 else
              "ranks 1-%d have" % (P - 1))
    want = "%s differs across ranks: rank 0 has %s; %s %s" % (what, mine, others, theirs)
    assert want in text and "mismatch." + tag in text, (tag, text, want)
    still_works(tag)


@check
def mismatches_across_ranks_raise_everywhere():
    mismatch("shape", torch.ones(5 if R == 0 else 6), hvd.Sum, "element count", 5, 6)
    dt = torch.float32 if R == 0 else torch.int32
    mismatch("dtype", torch.ones(4, dtype=dt), hvd.Sum, "dtype", "float32", "int32")
    mismatch("op", torch.ones(4), hvd.Sum if R == 0 else hvd.Max, "operation", "sum", "max")


def adasum_ref(leaves):
    """Adasum's tree over leaves (NumPy float64), as the definition reads: the tree of the
    first h leaves (h the largest power of two below their count) and of the rest."""
    if len(leaves) == 1:
        return leaves[0]
    h = 1
    while h * 2 < len(leaves):
        h *= 2
    a, b = adasum_ref(leaves[:h]), adasum_ref(leaves[h:])
    ab, aa, bb = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    ca = 1 - ab / (2 * aa) if aa else 1.0
    cb = 1 - ab / (2 * bb) if bb else 1.0
    return ca * a + cb * b


def rank_values(r, n, seed):
    return np.random.default_rng(seed * 1000 + r).uniform(-2, 2, n)


@check
def adasum_allreduce_matches_numpy():
    for dt, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.float16, 2e-3)):
        for n, seed in ((1, 1), (9, 2), (1000, 3)):
            mine = torch.from_numpy(rank_values(R, n, seed)).to(dt)
            leaves = [torch.from_numpy(rank_values(r, n, seed)).to(dt).double().numpy()
                      for r in range(P)]
            want = adasum_ref(leaves)
            got = hvd.allreduce(mine, name="adasum.%s.%d" % (dt, n), op=hvd.Adasum)
            assert got.dtype == dt and got.shape == mine.shape, (got.dtype, got.shape)
            err = np.abs(got.double().numpy() - want).max()
            assert err <= tol * (1 + np.abs(want).max()), (dt, n, err)
            # every rank holds the same values
            lo = hvd.allreduce(got.double(), name="adasum.lo", op=hvd.Min)
            hi = hvd.allreduce(got.double(), name="adasum.hi", op=hvd.Max)
            assert torch.equal(lo, hi) and torch.equal(lo, got.double()), (dt, n)
    # orthogonal leaves add up, identical ones give the vector (exactly)
    x = torch.zeros(P, dtype=torch.float64)
    x[R] = R + 1.0
    assert hvd.allreduce(x, op=hvd.Adasum).tolist() == [r + 1.0 for r in range(P)]
    v = torch.tensor([0.5, -3.0, 7.25], dtype=torch.float64)
    assert torch.equal(hvd.allreduce(v, name="adasum.same", op=hvd.Adasum), v)
    # a group: each member its own tree (the operator is per tensor, never over a group)
    mine = [torch.from_numpy(rank_values(R, n, 7 + n)) for n in (3, 5)]
    got = hvd.grouped_allreduce(mine, name="adasum.group", op=hvd.Adasum)
    for n, g in zip((3, 5), got):
        want = adasum_ref([rank_values(r, n, 7 + n) for r in range(P)])
        assert np.abs(g.numpy() - want).max() < 1e-12, (n, g, want)
    # bfloat16: computed in float32, rounded back
    b = torch.from_numpy(rank_values(R, 6, 11)).to(torch.bfloat16)
    want = adasum_ref([torch.from_numpy(rank_values(r, 6, 11)).to(torch.bfloat16).double()
                       .numpy() for r in range(P)])
    got = hvd.allreduce(b, name="adasum.bf16", op=hvd.Adasum)
    assert got.dtype == torch.bfloat16 and np.abs(got.double().numpy() - want).max() < 2e-2


@check
def adasum_refusals():
    e = raises(hvd.HorovodInternalError, hvd.allreduce, torch.ones(3, dtype=torch.int32),
               name="adasum.int", op=hvd.Adasum)
    assert "adasum.int" in str(e) and "int32" in str(e), e
    e = raises(hvd.HorovodInternalError, hvd.allreduce, torch.ones(100), name="adasum.topk",
               op=hvd.Adasum, sparsifier="topk", density=0.1)
    assert "adasum.topk" in str(e) and "dense" in str(e), e
    e = raises(NotImplementedError, hvd.reducescatter, torch.ones(4), op=hvd.Adasum)
    assert "Adasum" in str(e), e
    still_works("adasum")


@check
def adasum_distributed_optimizer():
    """Horovod's Adasum optimizer: each rank's local step (Adam here, whose change is not
    a multiple of the gradient) from the same start, its change combined by Adasum."""
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, prefix="adasum.")

    def batch(r, step):
        g = torch.Generator().manual_seed(100 + 10 * step + r)
        return torch.randn(5, 4, generator=g), torch.randn(5, 3, generator=g)

    # every rank's replica, stepped here: each its own Adam state, the same start
    reps = []
    for r in range(P):
        m = torch.nn.Linear(4, 3)
        with torch.no_grad():
            for q, s0 in zip(m.parameters(), start):
                q.copy_(s0)
        reps.append((m, torch.optim.Adam(m.parameters(), lr=0.1)))
    want = [s0.double().flatten().numpy() for s0 in start]
    for step in range(2):
        deltas = []
        for r, (m, o) in enumerate(reps):
            with torch.no_grad():
                for q, w in zip(m.parameters(), want):
                    q.copy_(torch.from_numpy(w).view_as(q))
            before = [q.detach().double().flatten().numpy().copy() for q in m.parameters()]
            o.zero_grad()
            xb, yb = batch(r, step)
            torch.nn.functional.mse_loss(m(xb), yb).backward()
            o.step()
            deltas.append([q.detach().double().flatten().numpy() - b0
                           for q, b0 in zip(m.parameters(), before)])
        want = [w + adasum_ref([d[i] for d in deltas]) for i, w in enumerate(want)]
        xb, yb = batch(R, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
        for i, p in enumerate(model.parameters()):
            err = np.abs(p.detach().double().flatten().numpy() - want[i]).max()
            assert err < 1e-5, (step, i, err)
    # the same on every rank
    for i, p in enumerate(model.parameters()):
        lo = hvd.allreduce(p.detach(), name="adasum.opt.lo.%d" % i, op=hvd.Min)
        assert torch.equal(lo, p.detach()), i


@check
def optimizer_named_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    part = [(n, p) for n, p in model.named_parameters() if n.startswith("0.")]
    e = raises(ValueError, hvd.DistributedOptimizer,
               torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=part)
    assert "named_parameters" in str(e), e
    # none at all: names are generated, the same on every rank
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0))
    for p in model.parameters():
        p.grad = torch.full_like(p, float(R + 1))
    opt.synchronize()
    for p in model.parameters():
        assert torch.allclose(p.grad, torch.full_like(p, TRI / P)), p.grad
    # step() after synchronize() without skip_synchronize(): Horovod's warning
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.step()
    assert any("skip_synchronize" in str(x.message) for x in w), [str(x.message) for x in w]
    for p in model.parameters():  # not reduced a second time
        assert torch.allclose(p.grad, torch.full_like(p, TRI / P)), p.grad
    opt.remove_hooks()


@check
def broadcast_optimizer_state_plain_values():
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(R))
    # SGD without momentum keeps None momentum buffers; its options are plain numbers,
    # bools and None, different on every rank
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.0,
                          dampening=0.0, weight_decay=0.0, nesterov=False)
    opt.param_groups[0]["custom"] = None if R == 0 else R
    opt.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    adam = torch.optim.Adam(model.parameters(), lr=0.01 * (R + 1), amsgrad=bool(R % 2))
    if R == 0:  # only the root has stepped: the others get its state all the same
        model(torch.ones(1, 3)).sum().backward()
        adam.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    g = opt.param_groups[0]
    assert g["lr"] == 0.1 and g["custom"] is None and g["momentum"] == 0.0, g
    for p in model.parameters():
        assert opt.state[p].get("momentum_buffer") is None, opt.state[p]
    a = adam.param_groups[0]
    assert a["lr"] == 0.01 and a["amsgrad"] is False, a
    sts = [adam.state[p] for p in model.parameters()]
    assert all("exp_avg" in st and float(st["step"]) == 1 for st in sts), sts


@check
def requires_grad_changes_between_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   prefix="rg.")
    x = torch.ones(2, 4) * (R + 1)

    def step(frozen):
        for i, layer in enumerate(model):
            for p in layer.parameters():
                p.requires_grad_(i not in frozen)
                p.grad = None
        model(x).sum().backward()
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
        return [p.grad for p in model.parameters()]

    def want(frozen):
        """The average over the ranks of each trainable parameter's gradient."""
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
        m.load_state_dict(model.state_dict())
        out = None
        for r in range(P):
            m.zero_grad()
            m(torch.ones(2, 4) * (r + 1)).sum().backward()
            gs = [p.grad.clone() for p in m.parameters()]
            out = gs if out is None else [a + b for a, b in zip(out, gs)]
        return [None if i // 2 in frozen else g / P for i, g in enumerate(out)]

    for frozen in ((), (0,), (0,), (), (1,), ()):
        got = step(frozen)
        for g, w in zip(got, want(frozen)):
            if w is None:
                assert g is None, (frozen, g)
            else:
                assert g is not None and torch.allclose(g, w, atol=1e-5), (frozen, g, w)
    opt.remove_hooks()


@check
def optimizer_repeats_its_starts():
    """From its second step a parameter's dense gradient starts as the step before did
    (sparsecomm._rerun) and gives the same averages; a gradient of another dtype, or of a
    name another call gave another shape, goes the full way again, and is repeated from
    the step after."""
    from sparsecomm import _rerun
    taken = []
    real = _rerun.start

    def counted(r, g, ctx):
        h = real(r, g, ctx)
        taken.append(h is not None)
        return h

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   prefix="rr.")
    _rerun.start = counted
    try:
        for step, dtype in enumerate((torch.float32,) * 3 + (torch.float64,) * 2):
            model.to(dtype)
            for i, p in enumerate(model.parameters()):
                p.grad = None
                # rank r's gradient: (r + 1) * (step + 1) * (i + 1) in every element
                p.grad = torch.full(p.shape, float((R + 1) * (step + 1) * (i + 1)),
                                    dtype=dtype)
            # as backward's hooks would: each parameter's start, then the waits
            for p in model.parameters():
                opt._handles[p] = opt._submit(p)
            opt.synchronize()
            for i, p in enumerate(model.parameters()):
                want = TRI / P * (step + 1) * (i + 1)
                assert p.grad.dtype == dtype and torch.all(p.grad == want), (step, p.grad)
            with opt.skip_synchronize():
                opt.step()
            if step == 1:  # the first weight's name given another shape by another call
                w = next(model.parameters())
                flat = hvd.allreduce(torch.ones(w.numel()), name="rr.0.weight", op=hvd.Sum)
                assert torch.all(flat == P), flat
        # step 0: nothing to repeat yet; 1: all four; 2: all but the reshaped weight;
        # 3: a new dtype, none; 4: all four
        assert taken == [True] * 4 + [False] + [True] * 3 + [False] * 4 + [True] * 4, taken
    finally:
        _rerun.start = real
        opt.remove_hooks()


@check
def sparse_as_dense():
    emb = torch.nn.Embedding(10, 3, sparse=True)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.0),
                                   named_parameters=emb.named_parameters(),
                                   prefix="sad.", sparse_as_dense=True)
    emb(torch.tensor([R, 9])).sum().backward()
    opt.synchronize()
    g = emb.weight.grad
    assert g.is_sparse and g.sparse_dim() == 1, g  # written back sparse, as Horovod's
    want = torch.zeros(10, 3)
    for r in range(P):
        want[r] += 1.0 / P
    want[9] += 1.0
    assert torch.allclose(g.to_dense(), want), g
    opt.remove_hooks()


@check
def sync_batch_norm():
    torch.manual_seed(0)
    bn = hvd.SyncBatchNorm(3, momentum=0.3)
    ref = torch.nn.BatchNorm1d(3, momentum=0.3)
    with torch.no_grad():
        for m in (bn, ref):
            m.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
            m.bias.copy_(torch.tensor([0.1, 0.0, 0.3]))

    def batch(r, step):  # rank r's batch: r + 2 rows, different on every rank and step
        g = torch.Generator().manual_seed(100 * step + r)
        return torch.randn(r + 2, 3, 4, generator=g) * (r + 1) + r

    for step in range(2):
        xs = [batch(r, step).requires_grad_(True) for r in range(P)]
        coef = [torch.randn(x.shape, generator=torch.Generator().manual_seed(7 + r))
                for r, x in enumerate(xs)]
        ref.zero_grad()
        want = ref(torch.cat(xs))
        (want * torch.cat(coef)).sum().backward()
        mine = xs[R].detach().clone().requires_grad_(True)
        bn.zero_grad()
        got = bn(mine)
        (got * coef[R]).sum().backward()
        at = sum(x.shape[0] for x in xs[:R])
        assert torch.allclose(got, want[at:at + mine.shape[0]], atol=1e-5), (step, got)
        assert torch.allclose(mine.grad, xs[R].grad, atol=1e-5), (step, mine.grad)
        wg = hvd.allreduce(bn.weight.grad, name="syncbn.test.wg", op=hvd.Sum)
        bg = hvd.allreduce(bn.bias.grad, name="syncbn.test.bg", op=hvd.Sum)
        assert torch.allclose(wg, ref.weight.grad, atol=1e-4), (wg, ref.weight.grad)
        assert torch.allclose(bg, ref.bias.grad, atol=1e-4), (bg, ref.bias.grad)
        assert torch.allclose(bn.running_mean, ref.running_mean, atol=1e-5)
        assert torch.allclose(bn.running_var, ref.running_var, atol=1e-5)
    bn.eval()
    ref.eval()
    x = batch(R, 9)
    assert torch.allclose(bn(x), ref(x), atol=1e-5)


sc.shutdown()
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
