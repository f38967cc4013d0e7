#!/usr/bin/python3
"""Run under sparsecomm-run with 4 trainers (2 nodes x 2, and 4 nodes x 1): Horovod's
process sets through the Python binding, against real daemons.  The sets, added by
init(process_sets=...) (with --dynamic-init: by add_process_set after
init(process_sets="dynamic")): A = [0, 2] and B = [1, 3] (across the nodes of 2 x 2), C = [0, 1]
(within one node of 2 x 2), D = [0, 1, 2] and E = [1, 2, 3] (overlapping).  Prints
`CHECK <name> ok` or `CHECK <name> FAIL <why>` per check on every rank (a non-member
checks that it is refused); exits 1 if any failed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks, raises  # noqa: E402

torch.set_num_threads(1)
DYN = ("HOROVOD_DYNAMIC_PROCESS_SETS", "SPARSECOMM_DYNAMIC_PROCESS_SETS")
for var in DYN:  # adding after init is refused until a check sets one
    os.environ.pop(var, None)
A, B, C = hvd.ProcessSet([2, 0]), hvd.ProcessSet([1, 3]), hvd.ProcessSet([0, 1])
D, E = hvd.ProcessSet(range(3)), hvd.ProcessSet([3, 2, 1])
SETS = [A, B, C, D, E]
if not sc._lib.has("sc_process_set_add"):
    print("SKIP psets: %s has no process sets (sc_process_set_add)" % sc._lib.library_path(),
          flush=True)
    sys.exit(0)
# --dynamic-init: init(process_sets="dynamic"), then the sets added one by one, which that
# allows without $HOROVOD_DYNAMIC_PROCESS_SETS
DYNAMIC_INIT = "--dynamic-init" in sys.argv
if DYNAMIC_INIT:
    hvd.init(timeout=60, process_sets="dynamic")
    assert [hvd.add_process_set(ps) for ps in SETS] == SETS
else:
    hvd.init(timeout=60, process_sets=SETS)
R, P = hvd.rank(), hvd.size()
assert P == 4, "worker_psets.py runs with 4 trainers, not %d" % P
check = Checks([a for a in sys.argv[1:] if a != "--dynamic-init"])


@check
def global_set_is_the_job():
    g = hvd.global_process_set
    got = hvd.allreduce(torch.full((3,), float(R)), name="g", op=hvd.Sum, process_set=g)
    assert torch.equal(got, torch.full((3,), 6.0)), got
    got = hvd.broadcast(torch.full((2,), float(R)), root_rank=3, name="gb", process_set=g)
    assert torch.equal(got, torch.full((2,), 3.0)), got
    assert hvd.allgather_object(R, process_set=g) == [0, 1, 2, 3]
    hvd.barrier(process_set=g)
    assert "g" in sc.registered() and sc.registered()["g"]["process_set"] == 0


def members(ps):
    return [ps] if ps.included() else []


def refused(fn, *what):
    """fn() must raise ProcessSetError (a ValueError) whose message holds every ``what``."""
    try:
        fn()
    except sc.ProcessSetError as e:
        assert isinstance(e, ValueError) and e.status_name == "SC_ERR_INVALID", e
        for w in what:
            assert w in str(e), (w, str(e))
        return e
    raise AssertionError("%s was not refused on rank %d" % (what, R))


def dynamic(on):
    for var in DYN:
        os.environ.pop(var, None)
    if on:
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"


@check
def set_objects():
    assert [ps.process_set_id for ps in SETS] == [1, 2, 3, 4, 5], SETS
    assert A.ranks == [0, 2] and E.ranks == [1, 2, 3], (A, E)
    g = hvd.global_process_set
    assert (g.process_set_id, g.ranks, g.size(), g.rank(), g.included()) == \
        (0, [0, 1, 2, 3], 4, R, True), g
    for ps in SETS:
        assert ps.size() == len(ps.ranks) and ps.included() == (R in ps.ranks), ps
        if R in ps.ranks:
            assert ps.rank() == ps.ranks.index(R), (ps, ps.rank())
        else:
            refused(ps.rank, "rank %d" % R, "process set %d" % ps.process_set_id)
    assert hvd.process_set_by_id(4) is D
    for bad in ("01", [0.5], 3):
        try:
            hvd.ProcessSet(bad)
            raise AssertionError("ProcessSet(%r) was accepted" % (bad,))
        except ValueError:
            pass
    fresh = hvd.ProcessSet([0, 1, 2, 3])  # never added
    assert fresh.process_set_id is None
    refused(lambda: hvd.allreduce(torch.ones(2), name="x", process_set=fresh), "not been added")


def values(r, n, dtype):
    """Rank r's input: integers of both signs, exact in every dtype."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + r * 13) % 23 - 11
    return v.to(dtype)


@check
def allreduce_sum_average_per_set():
    # one name in every set: a name is a name within its set; the global one beside them
    for rounds in range(2):  # D and E (overlapping) used in turn
        for ps in SETS + [hvd.global_process_set]:
            if not ps.included():
                continue
            for dt in (torch.float32, torch.float64, torch.int32, torch.int64):
                n = 1000 + 10 * ps.process_set_id  # a shape of its own in each set
                total = sum(values(r, n, dt) for r in ps.ranks)
                got = hvd.allreduce(values(R, n, dt), name="w.%s" % dt, op=hvd.Sum,
                                    process_set=ps)
                assert got.dtype == dt and torch.equal(got, total), (ps, dt, rounds)
                avg = hvd.allreduce(values(R, n, dt), name="a.%s" % dt, process_set=ps)
                if dt.is_floating_point:
                    want = total / ps.size()
                    ok = torch.equal(avg, want) if ps.size() in (1, 2, 4) else \
                        torch.allclose(avg, want, rtol=1e-6, atol=0)
                else:  # an integer average truncates toward zero
                    want = torch.div(total, ps.size(), rounding_mode="trunc")
                    ok = torch.equal(avg, want)
                assert ok, (ps, dt, avg[:6], want[:6])
    # numpy input, the base module
    for ps in members(B):
        got = sc.allreduce(np.full(7, float(R)), name="np", average=False, process_set=ps)
        assert np.array_equal(got, np.full(7, 4.0)), got
    reg = sc.registered()
    for ps in members(A):
        assert reg[("w.torch.float32", ps.process_set_id)]["process_set"] == 1, reg


@check
def overlapping_sets_at_the_same_time():
    # ranks 1 and 2 are in both D and E: both operations in flight at once
    hs = []
    for ps in (D, E):
        if ps.included():
            x = torch.full((5000,), float(R + 1))
            hs.append((ps, hvd.allreduce_async(x, name="both", op=hvd.Sum, process_set=ps)))
    for ps, h in hs:
        got = hvd.synchronize(h)
        assert torch.equal(got, torch.full((5000,), float(sum(r + 1 for r in ps.ranks)))), \
            (ps, got[:3])
    # unnamed calls: their buffers are numbered per set, so members agree on the names
    for ps in (D, E):
        if ps.included():
            n = 64 + ps.process_set_id
            got = hvd.allreduce(torch.ones(n), op=hvd.Sum, process_set=ps)
            assert torch.equal(got, torch.full((n,), float(ps.size()))), (ps, got[:3])


@check
def allgather_in_set_rank_order():
    for ps in SETS:
        if not ps.included():
            continue
        i = ps.rank()
        x = torch.arange((i + 1) * 2, dtype=torch.int64).view(i + 1, 2) + 100 * R
        got = hvd.allgather(x, name="ag", process_set=ps)
        want = torch.cat([torch.arange((j + 1) * 2, dtype=torch.int64).view(j + 1, 2) +
                          100 * r for j, r in enumerate(ps.ranks)])
        assert torch.equal(got, want), (ps, got, want)
        objs = hvd.allgather_object({"rank": R}, process_set=ps)
        assert objs == [{"rank": r} for r in ps.ranks], (ps, objs)


@check
def broadcast_root_is_a_global_rank():
    # Horovod's root_rank is a global rank also with a process set (it maps it to the
    # set's numbering): the set's last member, given by its global rank, is the root of
    # every broadcast form; a rank that is not a member raises ValueError on every member
    for ps in SETS:
        if not ps.included():
            continue
        src = ps.ranks[-1]  # a global rank, the set's last member
        t = values(R, 300, torch.float32)
        got = hvd.broadcast(t, root_rank=src, name="bc", process_set=ps)
        assert torch.equal(got, values(src, 300, torch.float32)), (ps, src, got[:4])
        hvd.broadcast_(t, root_rank=ps.ranks[0], name="bc_", process_set=ps)
        assert torch.equal(t, values(ps.ranks[0], 300, torch.float32)), (ps, t[:4])
        obj = hvd.broadcast_object({"from": R}, root_rank=src, process_set=ps)
        assert obj == {"from": src}, (ps, obj)
        torch.manual_seed(R)
        model = torch.nn.Linear(3, 2)
        hvd.broadcast_parameters(model.state_dict(), root_rank=src, process_set=ps)
        torch.manual_seed(src)
        ref = torch.nn.Linear(3, 2)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                     ref.state_dict().values())), ps
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * (R + 1))
        hvd.broadcast_optimizer_state(opt, root_rank=src, process_set=ps)
        assert opt.param_groups[0]["lr"] == 0.01 * (src + 1), (ps, opt.param_groups[0]["lr"])
        x = torch.full((2,), float(R), requires_grad=True)
        hvd.broadcast(x, root_rank=src, name="bc.grad", process_set=ps).sum().backward()
        want = 1.0 if R == src else 0.0  # the averaged gradient, kept on the root
        assert torch.equal(x.grad, torch.full((2,), want)), (ps, x.grad)
        outside = [r for r in range(P) if r not in ps.ranks] or [P]
        for bad in (outside[0], -1):
            for fn, args in ((hvd.broadcast, (t, bad, "bc.bad", ps)),
                             (hvd.broadcast_object, (R, bad, "bco.bad", ps)),
                             (hvd.broadcast_optimizer_state, (opt, bad, ps))):
                e = raises(ValueError, fn, *args)
                assert "process set %d" % ps.process_set_id in str(e), e


@check
def alltoall_and_reducescatter_per_set():
    for ps in SETS:
        if not ps.included():
            continue
        i, n = ps.rank(), ps.size()
        rows = 2 * n + 1
        y = torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) * (R + 1)
        total = torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) * \
            sum(r + 1 for r in ps.ranks)
        first = i * (rows // n) + min(i, rows % n)
        mine = rows // n + (i < rows % n)
        got = hvd.reducescatter(y, op=hvd.Sum, name="rs", process_set=ps)
        assert torch.equal(got, total[first:first + mine]), (ps, got.shape, first, mine)


def adasum2(a, b):
    """The Adasum operator of two vectors (float64)."""
    ab = float(a @ b)
    return (1 - ab / (2 * float(a @ a))) * a + (1 - ab / (2 * float(b @ b))) * b


@check
def adasum_in_sets():
    for ps in SETS:
        if not ps.included() or ps.size() != 2:
            continue
        g = torch.Generator().manual_seed(R)
        x = torch.randn(50, dtype=torch.float64, generator=g)
        xs = [torch.randn(50, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(r)) for r in ps.ranks]
        got = hvd.allreduce(x, name="ada", op=hvd.Adasum, process_set=ps)
        assert torch.allclose(got, adasum2(*xs), rtol=1e-12, atol=1e-12), (ps, got[:3])


@check
def barrier_per_set():
    for ps in (A, C):
        if not ps.included():
            continue
        late = ps.ranks[-1]
        hvd.allreduce(torch.zeros(1), name="align", process_set=ps)  # start together
        t0 = time.monotonic()
        if R == late:
            time.sleep(2.0)  # a barrier that does not wait returns in ms
        hvd.barrier(process_set=ps)
        dt = time.monotonic() - t0
        assert R == late or dt >= 1.0, "barrier of %s returned after %.3f s, rank %d was " \
            "2 s late" % (ps, dt, late)
    try:
        hvd.join(process_set=B)
        raise AssertionError("join in a process set was accepted")
    except (NotImplementedError, ValueError) as e:
        assert "join" in str(e), e


def every_node(ps):
    """Whether ps has a member on every node."""
    L = hvd.local_size()
    return {r // L for r in ps.ranks} == set(range(P // L))


@check
def grouped_allreduce_per_set():
    # sets with a member on every node (on 2 nodes x 2: A, B, D, E); the sets that leave
    # a node out are grouped_in_a_set_of_some_nodes'
    for ps in SETS:
        if not ps.included() or not every_node(ps):
            continue
        ts = [torch.full((10,), float(R)), torch.full((3, 3), float(R * 2))]
        got = hvd.grouped_allreduce(ts, name="grp", op=hvd.Sum, process_set=ps)
        s = float(sum(ps.ranks))
        assert torch.equal(got[0], torch.full((10,), s)) and \
            torch.equal(got[1], torch.full((3, 3), 2 * s)), (ps, got)


class Towers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(4, 3)


def tower_batch(r, step):
    g = torch.Generator().manual_seed(1000 * r + step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)


def tower_loss(layer, x, y):
    return ((layer(x) - y) ** 2).mean()


@check
def two_tower_optimizers():
    # tower a trains in A = [0, 2], tower b in B = [1, 3], each with its own
    # DistributedOptimizer; the reference averages the members' gradients by hand (two
    # members: the sum and the halving are exact, so the parameters must be equal)
    torch.manual_seed(7)
    model = Towers()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(7)
    ref = Towers()
    tower, ps = ("a", A) if A.included() else ("b", B)
    other = "b" if tower == "a" else "a"
    layer, ref_layer = getattr(model, tower), getattr(ref, tower)
    named = [(n, p) for n, p in model.named_parameters() if n.startswith(tower + ".")]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(layer.parameters(), lr=0.1),
                                   named_parameters=named, process_set=ps)
    ref_opt = torch.optim.SGD(ref_layer.parameters(), lr=0.1)
    # Horovod's: outside its set an optimizer registers no hooks and synchronizes nothing
    wrong = B if ps is A else A
    out = hvd.DistributedOptimizer(torch.optim.SGD(layer.parameters(), lr=0.1),
                                   named_parameters=named, process_set=wrong)
    assert not out._hooks, out._hooks
    out.synchronize()
    for step in range(5):
        opt.zero_grad()
        tower_loss(layer, *tower_batch(R, step)).backward()
        opt.step()
        grads = []
        for r in ps.ranks:
            ref_opt.zero_grad()
            tower_loss(ref_layer, *tower_batch(r, step)).backward()
            grads.append([p.grad.clone() for p in ref_layer.parameters()])
        for p, g0, g1 in zip(ref_layer.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        ref_opt.step()
    for (n, p), q in zip(layer.named_parameters(), ref_layer.parameters()):
        assert torch.equal(p, q), "%s.%s differs by %g after 5 steps" % (
            tower, n, (p - q).abs().max().item())
    for n, v in model.state_dict().items():
        if n.startswith(other + "."):
            assert torch.equal(v, start[n]), "the other tower's %s moved" % n
        else:
            assert not torch.equal(v, start[n]), "%s did not train" % n


@check
def dynamic_add_and_remove():
    dynamic(False)
    if not DYNAMIC_INIT:  # sets given to init do not allow adding or removing later
        refused(lambda: hvd.add_process_set([0, 3]), "HOROVOD_DYNAMIC_PROCESS_SETS")
        refused(lambda: hvd.remove_process_set(A), "HOROVOD_DYNAMIC_PROCESS_SETS")
    dynamic(True)
    ps = hvd.add_process_set([3, 0])
    assert isinstance(ps, hvd.ProcessSet) and ps.process_set_id == 6 and ps.ranks == [0, 3], ps
    for m in members(ps):
        got = hvd.allreduce(torch.full((4,), float(R)), name="dyn", op=hvd.Sum, process_set=m)
        assert torch.equal(got, torch.full((4,), 3.0)), got
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS")
    os.environ["SPARSECOMM_DYNAMIC_PROCESS_SETS"] = "1"  # sparsecomm's name works too
    q = hvd.add_process_set(hvd.ProcessSet([1, 2]))
    assert q.process_set_id == 7, q
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None and ps.ranks is None, ps
    assert not any(isinstance(k, tuple) and k[1] == 6 for k in sc.registered()), \
        sc.registered()
    assert hvd.remove_process_set(ps) is False  # no longer added
    assert hvd.remove_process_set(hvd.global_process_set) is False
    refused(lambda: hvd.allreduce(torch.ones(1), name="dyn", process_set=ps), "not been added")
    again = hvd.add_process_set([0, 3])
    assert again.process_set_id == 8, again  # ids are not reused
    for m in members(again):
        got = hvd.allreduce(torch.full((4,), float(R)), name="dyn", op=hvd.Sum, process_set=m)
        assert torch.equal(got, torch.full((4,), 3.0)), got
    assert hvd.remove_process_set(again) and hvd.remove_process_set(q)
    dynamic(False)


@check
def remove_fails_operations_in_flight():
    dynamic(True)
    ps = hvd.add_process_set([0, 3])
    h = None
    if R == 0:  # rank 3 never submits it: in flight until the set goes
        h = hvd.allreduce_async(torch.ones(8), name="pending", process_set=ps)
        time.sleep(0.5)
    assert hvd.remove_process_set(ps) is True
    if h is not None:
        try:
            h.wait(30)
            raise AssertionError("an operation of a removed set completed")
        except sc.SparsecommError as e:
            assert e.status_name == "SC_ERR_ABORTED", e
        assert "pending" not in str(sc.registered()), sc.registered()
    dynamic(False)


@check
def errors_on_every_member():
    for ps in SETS:  # a set this trainer is not in: refused here, before any submission
        if not ps.included():
            e = refused(lambda: hvd.allreduce(torch.ones(3), name="nm", process_set=ps),
                        "rank %d" % R, "process set %d" % ps.process_set_id, "nm")
            assert isinstance(e, hvd.HorovodInternalError), e
            refused(lambda: hvd.allgather(torch.ones(1, 1), process_set=ps), "rank %d" % R)
            refused(lambda: hvd.barrier(process_set=ps), "rank %d" % R)
    dynamic(True)
    cases = [([1, 2] if R == 0 else [2, 3], "SC_ERR_MISMATCH",  # rank 0 disagrees
              ("rank 0 asked to add", "[1, 2]", "rank 1 to add", "[2, 3]")),
             ([0, 7], "SC_ERR_INVALID", ("rank 7 is out of range",)),  # not in the job
             ([0, 2], "SC_ERR_INVALID", ("process set 1 has these ranks",))]  # A's
    for ranks, status, texts in cases:
        try:
            hvd.add_process_set(ranks)
            raise AssertionError("add_process_set(%s) was accepted on rank %d" % (ranks, R))
        except sc.ProcessSetError as e:
            assert isinstance(e, ValueError) and e.status_name == status and \
                all(t in e.message for t in texts), (ranks, e)
    ok = hvd.add_process_set([0, 1, 3])  # the failures left nothing behind
    for m in members(ok):
        got = hvd.allreduce(torch.ones(2), name="after", op=hvd.Sum, process_set=m)
        assert torch.equal(got, torch.full((2,), 3.0)), got
    assert hvd.remove_process_set(ok)
    dynamic(False)


# Alltoall, and grouped operations in sets that leave a node out: each starts with a
# barrier of the job, so that a rank left behind by a failure above cannot stall them.

@check
def alltoall_per_set():
    hvd.barrier()  # every rank starts here, whatever the checks above left
    for ps in SETS:
        if not ps.included():
            continue
        i, n = ps.rank(), ps.size()

        def split(a, b):  # rows set rank a sends set rank b
            return (a + b) % 2 + 1

        sp = [split(i, q) for q in range(n)]
        x = torch.arange(sum(sp) * 2, dtype=torch.float32).view(-1, 2) + 1000 * R
        got, rsp = hvd.alltoall(x, splits=sp, name="a2a", process_set=ps, timeout=20)
        want = []
        for j, r in enumerate(ps.ranks):
            src = torch.arange(sum(split(j, q) for q in range(n)) * 2,
                               dtype=torch.float32).view(-1, 2) + 1000 * r
            at = sum(split(j, q) for q in range(i))
            want.append(src[at:at + split(j, i)])
        assert torch.equal(got, torch.cat(want)), (ps, got, want)
        assert rsp.tolist() == [split(j, i) for j in range(n)], (ps, rsp)


@check
def grouped_in_a_set_of_some_nodes():
    # C = [0, 1]: node 0 alone on 2 nodes x 2, nodes 0 and 1 of 4 on 4 nodes x 1; B and E
    # too on 4 nodes x 1
    hvd.barrier()  # every rank starts here, whatever the checks above left
    for ps in SETS:
        if not ps.included() or every_node(ps):
            continue
        ts = [torch.full((10,), float(R)), torch.full((3, 3), float(R * 2))]
        got = hvd.grouped_allreduce(ts, name="grp.some", op=hvd.Sum, process_set=ps,
                                    timeout=20)
        s = float(sum(ps.ranks))
        assert torch.equal(got[0], torch.full((10,), s)) and \
            torch.equal(got[1], torch.full((3, 3), 2 * s)), (ps, got)
        x = torch.full((ps.rank() + 1, 2), float(R))
        g = hvd.grouped_allgather([x, x * 2], name="agg", process_set=ps, timeout=20)
        want = torch.cat([torch.full((j + 1, 2), float(r)) for j, r in enumerate(ps.ranks)])
        assert torch.equal(g[0], want) and torch.equal(g[1], want * 2), (ps, g)


hvd.shutdown()
assert A.process_set_id is None, A  # the session's sets end with it
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
