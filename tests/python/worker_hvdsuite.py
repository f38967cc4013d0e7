#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: the behaviour Horovod's own PyTorch test
suite asserts of horovod.torch, checked through ``import sparsecomm.torch as hvd`` with
Horovod's expected results: exact values (its threshold is 0 at up to 3 ranks) for every
dtype it tests, 1 to 3 dimensions, the sync, in-place, async and grouped forms, the
gradients, the errors every rank must raise, join, the optimizer's cases and the optimizer
state broadcast for every torch optimizer.  Prints `CHECK <name> ok` or
`CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import inspect
import itertools
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks  # noqa: E402

torch.set_num_threads(1)
hvd.init(process_sets="dynamic")
R, P = hvd.rank(), hvd.size()
check = Checks(sys.argv[1:])

REDUCIBLE = (torch.int32, torch.int64, torch.float16, torch.float32, torch.float64)
EVERY = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
         torch.float32, torch.float64)
INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
DIMS = (1, 2, 3)


def rand17(dim, dtype, seed=1234):
    """The same values on every rank: integers in [-100, 100) in a 17^dim tensor."""
    torch.manual_seed(seed)
    return torch.empty([17] * dim).random_(-100, 100).to(dtype)


def same(got, want, what, rtol=0.0):
    """got equals want (Horovod's allclose with its threshold as rtol), as float64."""
    assert got.dtype == want.dtype, "%s: dtype %s, not %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, not %s" % (what, got.shape, want.shape)
    g, w = got.double(), want.double()
    assert torch.allclose(g, w, rtol=rtol, atol=1e-8), "%s: max error %g" % (
        what, (g - w).abs().max().item())


def raises_everywhere(exc, fn, what):
    """fn raises exc on this rank (every rank runs the same check)."""
    try:
        fn()
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s on rank %d" % (what, exc.__name__, R))


def still_works(tag):
    """After an error, the next collective of every rank still gives the right sum."""
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after." + tag)
    same(got, torch.full((3,), float(P)), "allreduce after " + tag)


# ---- allreduce --------------------------------------------------------------------

@check
def allreduce_sum_every_dtype():
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        x = rand17(dim, dt)
        same(hvd.allreduce(x, average=False), x * P if dt != torch.float16 else
             (x.float() * P).half(), "sum %s %dd" % (dt, dim))


@check
def allreduce_average_every_dtype():
    # identical inputs: the average is the input exactly (integers too)
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        x = rand17(dim, dt)
        same(hvd.allreduce(x, average=True), x, "average %s %dd" % (dt, dim))
        same(hvd.allreduce(x, op=hvd.Average), x, "op=Average %s %dd" % (dt, dim))


@check
def allreduce_min_max_product():
    for dt in (torch.int32, torch.int64, torch.float32, torch.float64):
        x = (torch.arange(6) % 4 + R).to(dt)  # rank-dependent, positive
        every = torch.stack([(torch.arange(6) % 4 + r).to(dt) for r in range(P)])
        same(hvd.allreduce(x, op=hvd.Min), every.min(0).values, "min %s" % dt)
        same(hvd.allreduce(x, op=hvd.Max), every.max(0).values, "max %s" % dt)
        same(hvd.allreduce(x, op=hvd.Product), every.prod(0).to(dt), "product %s" % dt)


@check
def allreduce_in_place():
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        x = rand17(dim, dt)
        want = (x.double() * P).to(dt)
        out = hvd.allreduce_(x, average=False)
        assert out is x or out.data_ptr() == x.data_ptr(), "allreduce_ returned a copy"
        same(x, want, "in place %s %dd" % (dt, dim))


@check
def allreduce_async_many_in_flight():
    # every dtype and dimension started before any is waited for; poll() is False for
    # at least one of them (the calls are asynchronous)
    started, pending = [], False
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        x = rand17(dim, dt)
        h = hvd.allreduce_async(x, average=False)
        pending |= not hvd.poll(h)
        started.append((h, (x.double() * P).to(dt), "%s %dd" % (dt, dim)))
    assert pending, "poll() was True at once for every call"
    for h, want, what in started:
        same(hvd.synchronize(h), want, "async " + what)


def scaled(x, factor):
    """Horovod's scaling on the CPU: integers in float64, float16 in float32, others in
    their own dtype, the product cast back to the dtype."""
    dt = x.dtype
    work = torch.float64 if dt in INTS else torch.float32 if dt == torch.float16 else dt
    return (x.to(work) * torch.tensor(factor, dtype=torch.float64).to(work)).to(dt)


@check
def allreduce_prescale_postscale():
    factor = 0.1915194503788923  # Horovod's seed 1234's uniform draw
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        x = rand17(dim, dt)
        # exact on 2 ranks, as Horovod's threshold 0 for size <= 3 asks: float16 scales in
        # float32 on the CPU (not with the factor rounded to float16); a float16 sum of
        # three or more rounds: 2 ulps
        tol = 2e-3 if dt == torch.float16 and P > 2 else 0.0
        pre = hvd.allreduce(x, average=False, prescale_factor=factor)
        w = scaled(x, factor)  # times the size in the dtype (float16: in float32)
        same(pre.float() if dt == torch.float16 else pre,
             w.float() * P if dt == torch.float16 else w * P,
             "prescale %s %dd" % (dt, dim), tol)
        post = hvd.allreduce(x, average=False, postscale_factor=factor)
        want = scaled((x.double() * P).to(dt) if dt != torch.float16 else
                      (x.float() * P).half(), factor)
        same(post, want, "postscale %s %dd" % (dt, dim), tol)


@check
def allreduce_mismatches_raise_on_every_rank():
    # another shape on each rank, another dtype: a RuntimeError on every rank, and the
    # next call works
    cases = (("shape", torch.ones([17 + R] * 3)),
             ("dtype", torch.ones([17] * 3, dtype=torch.int32 if R % 2 == 0 else
                                  torch.float32)))
    for what, x in cases:
        raises_everywhere(RuntimeError, lambda: hvd.allreduce(x, name="mm." + what),
                          "allreduce of another " + what)
        still_works("allreduce." + what)


# every pair of dtypes that one buffer dtype carries (the 16-bit floats in float32, the
# small integers and bool in int32): Horovod refuses them as a dtype mismatch
CARRIED = ((torch.float16, torch.float32), (torch.bfloat16, torch.float32),
           (torch.float16, torch.bfloat16), (torch.int8, torch.int32),
           (torch.uint8, torch.int32), (torch.int16, torch.int32), (torch.bool, torch.int32),
           (torch.int8, torch.uint8), (torch.int8, torch.int16), (torch.uint8, torch.bool))


@check
def carried_dtype_mismatches_raise_on_every_rank():
    # rank 0 gives one dtype of each pair, the others the other, named and unnamed: every
    # rank raises at once (not at the stall timeout) naming the tensor and both dtypes,
    # and the name then works with one dtype everywhere
    import time
    for i, (a, b) in enumerate(CARRIED):
        dt = a if R == 0 else b
        x = torch.ones(17, dtype=dt)
        # unnamed too where each node has one trainer (an unnamed buffer two trainers of
        # a node registered in different dtypes stays disagreeing for the next pair)
        for name in ("cdt.%d" % i, None) if hvd.local_size() == 1 else ("cdt.%d" % i,):
            t0 = time.monotonic()
            err = raises_everywhere(
                RuntimeError, lambda: hvd.allreduce(x, op=hvd.Sum, name=name),
                "allreduce of %s against %s" % (a, b))
            took = time.monotonic() - t0
            assert took < 10, "the %s/%s mismatch took %.1f s" % (a, b, took)
            text = str(err)
            for want in (str(a).split(".")[1], str(b).split(".")[1], "rank 0"):
                assert want in text, "%r not in %r" % (want, text)
            if name:
                assert name in text, text
            assert getattr(err, "status_name", "") == "SC_ERR_MISMATCH", text
        # the name again with one dtype everywhere (between the nodes; two trainers of
        # one node that disagreed may still hold the name in the other dtype, which
        # their daemon refuses as a new disagreement: another name there)
        again = "cdt.%d" % i if hvd.local_size() == 1 else "cdt.%d.again" % i
        for want_dt in (a, b):
            y = torch.ones(17, dtype=want_dt)
            got = hvd.allreduce(y, op=hvd.Sum, name=again)
            assert got.dtype == want_dt, got.dtype
            want = torch.full((17,), P).to(want_dt) if want_dt != torch.bool else y
            if want_dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.float16,
                           torch.bfloat16, torch.float32):
                same(got, want, "sum of %s after the mismatch" % want_dt)
    still_works("carried_dtype")


@check
def compression_on_some_ranks_raises_on_every_rank():
    # Compression.fp16 (or bf16) on rank 0 only: Horovod's rank 0 gives a float16 tensor,
    # the others float32, a dtype mismatch raised at once on every rank naming both
    # dtypes; a compressed rank and one that gives float16 itself meet, as in Horovod
    import time
    for i, (comp, low) in enumerate(((hvd.Compression.fp16, "float16"),
                                     (hvd.Compression.bf16, "bfloat16"))):
        c = comp if R == 0 else hvd.Compression.none
        name = "cmp.%d" % i
        t0 = time.monotonic()
        err = raises_everywhere(RuntimeError, lambda: hvd.allreduce(
            torch.ones(17), name=name, compression=c), "%s on rank 0 only" % low)
        took = time.monotonic() - t0
        assert took < 10, "the mismatch took %.1f s" % took
        for want in (low, "float32", name):
            assert want in str(err), "%r not in %r" % (want, str(err))
        # the name again (another name where two trainers of one node disagreed: their
        # daemon refuses the name while one of them still holds it the other way)
        name = name if hvd.local_size() == 1 else name + ".again"
        got = hvd.allreduce(torch.ones(17), name=name, compression=comp, op=hvd.Sum)
        same(got, torch.full((17,), float(P)), "%s everywhere after the mismatch" % low)
        x = torch.ones(17) if R == 0 else torch.ones(17, dtype=comp.dtype)
        got = hvd.allreduce(x, name=name, compression=c, op=hvd.Sum)
        same(got, torch.full((17,), float(P), dtype=x.dtype),
             "%s compressed on rank 0, given elsewhere" % low)
    still_works("compression")


@check
def carried_dtype_mismatches_in_other_collectives():
    # allgather, alltoall, reducescatter and broadcast of int8 on rank 0 against int32
    # (and float16 against float32) elsewhere: a mismatch on every rank, as Horovod's
    for a, b in ((torch.int8, torch.int32), (torch.float16, torch.float32)):
        x = torch.ones(P * 2, 3, dtype=a if R == 0 else b)
        for what, call in (("allgather", lambda: hvd.allgather(x, name="cdo.ag")),
                           ("alltoall", lambda: hvd.alltoall(x, name="cdo.a2a")),
                           ("reducescatter", lambda: hvd.reducescatter(x, name="cdo.rs")),
                           ("broadcast", lambda: hvd.broadcast(x, 0, name="cdo.bc"))):
            err = raises_everywhere(RuntimeError, call, "%s of %s against %s" % (what, a, b))
            for want in (str(a).split(".")[1], str(b).split(".")[1]):
                assert want in str(err), "%s: %r not in %r" % (what, want, str(err))
    still_works("carried_other")


@check
def registered_name_dtype_mismatch_raises_on_every_rank():
    # a name set up with sparsecomm.register() as float32, given float16 on rank 0 and
    # float32 elsewhere: Horovod's dtype mismatch on every rank naming both dtypes (it
    # was summed into the float32 buffer), and float16 everywhere then works
    import sparsecomm as sc
    name = "regdt" if hvd.local_size() == 1 else "regdt.%d" % hvd.cross_rank()
    sc.register(name, 17, "float32")
    hvd.barrier()  # as below: every trainer holds the float32 form before one leaves it
    x = torch.ones(17, dtype=torch.float16 if R == 0 else torch.float32)
    err = raises_everywhere(RuntimeError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum),
                            "float16 against float32 on a registered name")
    for want in ("float16", "float32", name):
        assert want in str(err), "%r not in %r" % (want, str(err))
    again = name + ".again"
    sc.register(again, 17, "float32")
    # every trainer holds the float32 registration before one moves the name to float16:
    # a trainer of a node that register()s a form another trainer of its node has
    # already left is refused (SC_ERR_MISMATCH), since register() claims that form
    hvd.barrier()
    got = hvd.allreduce(torch.ones(17, dtype=torch.float16), name=again, op=hvd.Sum)
    same(got, torch.full((17,), float(P), dtype=torch.float16), "float16 everywhere")
    still_works("registered_dtype")


@check
def grouped_allreduce_mismatches_raise_on_every_rank():
    # Horovod's grouped type and shape errors: one member of another dtype (int32
    # against float32, int8 against int32) or shape on rank 0 fails the group on every
    # rank; the next group works
    for what, odd in (("dtype", torch.ones(17, dtype=torch.int32 if R == 0 else
                                                 torch.float32)),
                      ("carried dtype", torch.ones(17, dtype=torch.int8 if R == 0 else
                                                         torch.int32)),
                      ("shape", torch.ones(17 + (R == 0)))):
        xs = [torch.ones(5), odd, torch.ones(3)]
        raises_everywhere(RuntimeError, lambda: hvd.grouped_allreduce(
            xs, op=hvd.Sum, name="gm." + what.replace(" ", "_")),
            "a group with a member of another " + what)
    got = hvd.grouped_allreduce([torch.ones(5), torch.ones(3)], op=hvd.Sum, name="gm.ok")
    same(got[0], torch.full((5,), float(P)), "the group after the mismatches")
    still_works("grouped")


@check
def same_count_other_dimensions_raise_on_every_rank():
    # Horovod's "same number of elements, different rank": [17, 1311] on rank 0, [17, 23,
    # 57] on the others, raises on every rank for allreduce and broadcast, naming both
    # shapes; the names work again with one shape everywhere, and a shape may change from
    # one call to the next
    shape = [17, 23 * 57] if R == 0 else [17, 23, 57]
    x = torch.arange(17 * 23 * 57, dtype=torch.float32).reshape(shape)
    for what, call in (("allreduce", lambda: hvd.allreduce(x, op=hvd.Sum, name="mm.ndim")),
                       ("broadcast", lambda: hvd.broadcast(x, 0, name="bcm.ndim"))):
        err = raises_everywhere(RuntimeError, call,
                                "%s of the same count in other dimensions" % what)
        assert "[17, 1311]" in str(err) and "[17, 23, 57]" in str(err), str(err)
        # the error names the operation that failed, not another
        assert "%s of tensor" % what in str(err), str(err)
    for shape in ([17, 23, 57], [1311, 17], [17 * 23 * 57]):
        x = torch.arange(17 * 23 * 57, dtype=torch.float32).reshape(shape)
        got = hvd.allreduce(x, op=hvd.Sum, name="mm.ndim")
        assert list(got.shape) == shape, got.shape
        same(got, x * P, "allreduce of shape %s after the mismatch" % shape)
        same(hvd.broadcast(x * (R + 1), 0, name="bcm.ndim"), x,
             "broadcast of shape %s after the mismatch" % shape)
    # allgather, alltoall, reducescatter: [6, 2, 3] against [6, 3, 2]
    y = torch.ones([6, 2, 3] if R == 0 else [6, 3, 2])
    for what, call in (("allgather", lambda: hvd.allgather(y, name="agm.ndim")),
                       ("alltoall", lambda: hvd.alltoall(y, name="a2m.ndim")),
                       ("reducescatter", lambda: hvd.reducescatter(y, name="rsm.ndim"))):
        err = raises_everywhere(RuntimeError, call,
                                "%s of the same row count in other dimensions" % what)
        assert "(2, 3)" in str(err) or "[6, 2, 3]" in str(err), str(err)
    still_works("same_count")


@check
def duplicate_names_in_flight_raise_value_error():
    x = torch.ones([17] * 3)
    for what, start in (("allreduce", lambda: hvd.allreduce_async(x, name="dup.ar")),
                        ("allgather", lambda: hvd.allgather_async(x, name="dup.ag")),
                        ("broadcast", lambda: hvd.broadcast_async(x, 0, name="dup.bc"))):
        h = start()
        raises_everywhere(ValueError, lambda: [start() for _ in range(10)],
                          "a second %s under a name in flight" % what)
        hvd.synchronize(h)
    still_works("duplicate")


@check
def allreduce_gradients():
    for dt, dim, avg in itertools.product((torch.float32, torch.float64), DIMS,
                                          (False, True)):
        x = rand17(dim, dt).requires_grad_()
        hvd.allreduce(x, average=avg).backward(torch.ones([17] * dim, dtype=dt))
        same(x.grad, torch.full([17] * dim, 1.0 if avg else float(P), dtype=dt),
             "grad average=%s %s %dd" % (avg, dt, dim))


# ---- grouped allreduce --------------------------------------------------------------

@check
def grouped_allreduce_sum_average_in_place():
    for dt, dim in itertools.product(REDUCIBLE, DIMS):
        xs = [rand17(dim, dt, seed=1234 + i) for i in range(5)]
        want = [(x.double() * P).to(dt) if dt != torch.float16 else (x.float() * P).half()
                for x in xs]
        for g, w in zip(hvd.grouped_allreduce(xs, average=False), want):
            same(g, w, "grouped sum %s %dd" % (dt, dim))
        for g, x in zip(hvd.grouped_allreduce(xs, average=True), xs):
            same(g, x, "grouped average %s %dd" % (dt, dim))
        hvd.grouped_allreduce_(xs, average=False)
        for x, w in zip(xs, want):
            same(x, w, "grouped in place %s %dd" % (dt, dim))


@check
def grouped_allreduce_with_empty_members():
    # an empty tensor in a group (a layer with no elements), or only empty ones: reduced
    # as an allreduce of it is (an empty result), the others summed, named and unnamed,
    # out of place and in place, as Horovod's
    for name in (None, "gempty"):
        xs = [torch.ones(0), torch.full((3,), float(R)), torch.ones(2, 0)]
        got = hvd.grouped_allreduce(xs, op=hvd.Sum, name=name)
        assert [g.shape for g in got] == [x.shape for x in xs], [g.shape for g in got]
        same(got[1], torch.full((3,), float(sum(range(P)))), "the non-empty member")
        hvd.grouped_allreduce_(xs, op=hvd.Sum, name=None if name is None else name + "_")
        same(xs[1], torch.full((3,), float(sum(range(P)))), "in place")
        got = hvd.grouped_allreduce([torch.ones(0, 2)], name=name and name + ".only")
        assert got[0].shape == (0, 2), got[0].shape
    still_works("grouped_empty")


@check
def grouped_allreduce_of_a_second_class_twice():
    # unnamed groups of one class, then two groups of another: each group's sum (the
    # pattern of grouped_allreduce_gradients' second dimension, without autograd)
    for n, times in ((17, 1), (289, 2)):
        for _ in range(times):
            xs = [torch.full((n,), float(R + i)) for i in range(5)]
            for i, g in enumerate(hvd.grouped_allreduce(xs, op=hvd.Sum)):
                same(g, torch.full((n,), float(sum(range(P)) + P * i)),
                     "group of %d x %d, member %d" % (5, n, i))


@check
def grouped_allreduce_gradients():
    for dt, dim, avg in itertools.product((torch.float32, torch.float64), DIMS,
                                          (False, True)):
        xs = [rand17(dim, dt, 1234 + i).requires_grad_() for i in range(5)]
        for s in hvd.grouped_allreduce(xs, average=avg):
            s.backward(torch.ones([17] * dim, dtype=dt))
        for x in xs:
            same(x.grad, torch.full([17] * dim, 1.0 if avg else float(P), dtype=dt),
                 "grouped grad average=%s %s %dd" % (avg, dt, dim))


# ---- allgather ----------------------------------------------------------------------

SIZES = [17, 32, 81, 12, 15, 23, 22]


@check
def allgather_every_dtype_and_variable_rows():
    for dt, dim in itertools.product(EVERY, DIMS):
        for rows in ([17] * P, SIZES[:P]):
            x = torch.ones([rows[R]] + [17] * (dim - 1)).mul_(R).to(dt)
            g = hvd.allgather(x)
            assert list(g.shape) == [sum(rows)] + [17] * (dim - 1), (dt, dim, g.shape)
            assert g.dtype == dt, (g.dtype, dt)
            for r in range(P):
                part = g[sum(rows[:r]):sum(rows[:r + 1])].double()
                assert part.min() == r and part.max() == r, (dt, dim, r)


@check
def allgather_async_many_in_flight():
    started, pending = [], False
    for dt, dim in itertools.product(EVERY, DIMS):
        h = hvd.allgather_async(torch.ones([17] * dim).mul_(R).to(dt))
        pending |= not hvd.poll(h)
        started.append((h, dim))
    assert pending, "poll() was True at once for every allgather"
    for h, dim in started:
        g = hvd.synchronize(h).double()
        for r in range(P):
            assert g[r * 17:(r + 1) * 17].min() == r == g[r * 17:(r + 1) * 17].max()


@check
def allgather_mismatches_raise_on_every_rank():
    shape = [17] * 3
    shape[1] = 10 * (R + 1)
    raises_everywhere(RuntimeError, lambda: hvd.allgather(torch.ones(shape), name="agm.s"),
                      "allgather of another row shape")
    still_works("allgather.shape")
    x = torch.ones([17] * 3, dtype=torch.int32 if R % 2 == 0 else torch.float32)
    raises_everywhere(RuntimeError, lambda: hvd.allgather(x, name="agm.t"),
                      "allgather of another dtype")
    still_works("allgather.dtype")


@check
def allgather_gradients():
    sizes = [3, 2, 7, 4, 6, 8, 10][:P]
    for dt, dim in itertools.product((torch.float32, torch.float64), DIMS):
        x = torch.ones([sizes[R]] + [17] * (dim - 1), dtype=dt).mul_(R).requires_grad_()
        dy = torch.cat([torch.ones([s] + [17] * (dim - 1), dtype=dt) * r
                        for r, s in enumerate(sizes)])
        hvd.allgather(x).backward(dy)
        # current Horovod averages the gradient before each rank takes its rows (its
        # releases before 0.21 summed: R * P)
        same(x.grad, torch.ones_like(x) * R, "allgather grad %s %dd" % (dt, dim))


# ---- broadcast ----------------------------------------------------------------------

@check
def broadcast_every_dtype_root_and_in_place():
    for dt, dim, root in itertools.product(EVERY, DIMS, range(P)):
        x = torch.ones([17] * dim).mul_(R).to(dt)
        want = torch.ones([17] * dim).mul_(root).to(dt)
        got = hvd.broadcast(x, root)
        same(got, want, "broadcast %s %dd root %d" % (dt, dim, root))
        if R != root:
            assert not torch.equal(x, want), "broadcast changed its input"
        out = hvd.broadcast_(x, root)
        same(x, want, "broadcast_ %s %dd root %d" % (dt, dim, root))
        assert out.data_ptr() == x.data_ptr(), "broadcast_ returned a copy"


@check
def broadcast_errors_on_every_rank():
    shape = [17] * 3
    shape[1] = 10 * (R + 1)
    raises_everywhere(RuntimeError, lambda: hvd.broadcast(torch.ones(shape), 0,
                                                          name="bcm.s"),
                      "broadcast of another shape")
    still_works("broadcast.shape")
    x = torch.ones([17] * 3, dtype=torch.int32 if R % 2 == 0 else torch.float32)
    raises_everywhere(RuntimeError, lambda: hvd.broadcast(x, 0, name="bcm.t"),
                      "broadcast of another dtype")
    still_works("broadcast.dtype")
    raises_everywhere(RuntimeError, lambda: hvd.broadcast(torch.ones(17), R, name="bcm.r"),
                      "broadcast with another root on each rank")
    still_works("broadcast.root")
    # a root that is no rank at all: refused on every rank before anything starts
    for bad in (-1, P):
        raises_everywhere((RuntimeError, ValueError),
                          lambda: hvd.broadcast(torch.ones(3), bad, name="bcm.o"),
                          "broadcast from root %d" % bad)
    still_works("broadcast.out_of_range")


@check
def broadcast_gradients():
    for dt, dim, root in itertools.product((torch.float32, torch.float64), DIMS, range(P)):
        x = torch.ones([17] * dim, dtype=dt).mul_(R).requires_grad_()
        hvd.broadcast(x, root).backward(torch.ones([17] * dim, dtype=dt))
        # averaged, kept on the root (current Horovod; before 0.21 summed: P on the root)
        same(x.grad, torch.full([17] * dim, float(1 if R == root else 0), dtype=dt),
             "broadcast grad %s %dd root %d" % (dt, dim, root))


# ---- alltoall -----------------------------------------------------------------------

def a2a_input(dim, dt):
    """rank+1 rows of value i for every rank i, widened to dim dimensions (2 columns
    each)."""
    t = torch.tensor([float(i) for i in range(P) for _ in range(R + 1)])
    for _ in range(dim - 1):
        t = t.unsqueeze(1)
        t = torch.cat((t, t), dim=1)
    return t.to(dt)


@check
def alltoall_with_and_without_splits():
    for dt, dim in itertools.product(EVERY, DIMS):
        x = a2a_input(dim, dt)
        splits = torch.tensor([R + 1] * P, dtype=torch.int32)
        out, recv = hvd.alltoall(x, splits)
        assert out.dtype == dt
        assert out.double().min() == R and out.double().max() == R, (dt, dim)
        assert out.numel() == P * (P + 1) // 2 * 2 ** (dim - 1), (dt, dim, out.shape)
        assert recv.tolist() == [r + 1 for r in range(P)], recv
        even = hvd.alltoall(x)  # no splits: an even split, the tensor alone returned
        assert isinstance(even, torch.Tensor), type(even)
        assert even.double().min() == R and even.double().max() == R, (dt, dim)
        assert even.numel() == out.numel(), (even.shape, out.shape)


@check
def alltoall_errors():
    x = torch.empty(P, dtype=torch.int32 if R % 2 else torch.float32)
    raises_everywhere(RuntimeError, lambda: hvd.alltoall(x, name="a2m.t"),
                      "alltoall of another dtype")
    still_works("alltoall.dtype")
    shape = [2 * P] * 3
    shape[1] = 10 * (R + 1)
    raises_everywhere(RuntimeError, lambda: hvd.alltoall(torch.ones(shape), name="a2m.s"),
                      "alltoall of another row shape")
    still_works("alltoall.shape")
    # refused where they are given, before anything starts
    raises_everywhere(ValueError, lambda: hvd.alltoall(torch.empty(P + 1)),
                      "an even split of rows not a multiple of the size")
    raises_everywhere(ValueError, lambda: hvd.alltoall(
        torch.empty(P - 1), torch.ones(P, dtype=torch.int32)), "splits past the rows")
    raises_everywhere(ValueError, lambda: hvd.alltoall(
        torch.empty(P), torch.empty(P, dtype=torch.float32)), "float32 splits")
    still_works("alltoall.refused")


@check
def collectives_in_rows_of_a_scalar_raise():
    # Horovod's suite: reducescatter of a 0-d tensor raises (torch.FatalError,
    # RuntimeError, HorovodInternalError); allgather's "tried to gather a rank-zero
    # tensor" is a HorovodInternalError too; its other frameworks expect a ValueError
    scalar = torch.tensor(float(R))
    calls = (("allgather", lambda: hvd.allgather(scalar)),
             ("alltoall", lambda: hvd.alltoall(scalar)),
             ("reducescatter", lambda: hvd.reducescatter(scalar, op=hvd.Average)),
             ("grouped_allgather", lambda: hvd.grouped_allgather([scalar])),
             ("grouped_reducescatter", lambda: hvd.grouped_reducescatter([scalar])))
    for what, call in calls:
        err = raises_everywhere(RuntimeError, call, what + " of a scalar")
        assert isinstance(err, hvd.HorovodInternalError) and isinstance(err, ValueError), (
            what, type(err).__mro__)
        assert "scalar" in str(err), err
    still_works("scalar rows")


@check
def alltoall_gradients():
    for dt, dim, with_splits in itertools.product((torch.float32, torch.float64), DIMS,
                                                  (True, False)):
        x = a2a_input(dim, dt).requires_grad_()
        if with_splits:
            out = hvd.alltoall(x, torch.tensor([R + 1] * P, dtype=torch.int32))[0]
        else:
            out = hvd.alltoall(x)
        out.backward(torch.ones(out.shape, dtype=dt))
        same(x.grad, torch.ones_like(x), "alltoall grad %s %dd splits=%s" %
             (dt, dim, with_splits))


# ---- reducescatter, barrier, join -------------------------------------------------

@check
def reducescatter_sum_average_every_dtype():
    for dt, dim in itertools.product((torch.int32, torch.int64, torch.float32,
                                      torch.float64), DIMS):
        torch.manual_seed(1234)
        x = torch.empty([P * 4] + [17] * (dim - 1)).random_(-100, 100).to(dt)
        mine = x[R * 4:(R + 1) * 4]
        same(hvd.reducescatter(x, op=hvd.Sum), (mine.double() * P).to(dt),
             "reducescatter sum %s %dd" % (dt, dim))
        same(hvd.reducescatter(x, op=hvd.Average), mine, "reducescatter average %s %dd" %
             (dt, dim))
    # rows that do not divide: the first rows % size ranks get one more
    x = torch.arange(P * 2 + 1, dtype=torch.float32)
    lo = R * 2 + min(R, 1)
    n = 3 if R < 1 else 2
    same(hvd.reducescatter(x, op=hvd.Sum), x[lo:lo + n] * P, "reducescatter uneven")
    # no rows, or rows of no elements: each rank's share of nothing, as Horovod's
    for shape in ((0,), (0, 3), (P + 1, 0)):
        rows = shape[0] // P + (R < shape[0] % P)
        for call in (lambda: hvd.reducescatter(torch.ones(shape), op=hvd.Sum),
                     lambda: hvd.grouped_reducescatter([torch.ones(shape)])[0]):
            same(call(), torch.ones((rows,) + shape[1:]), "reducescatter of %s" % (shape,))


@check
def grouped_allgather_and_reducescatter_gradients():
    # Horovod's test_horovod_grouped_allgather_grad and _grouped_reducescatter_grad:
    # each output of the group differentiated alone (the others' gradients are zeros)
    sizes = [3, 2, 7, 4, 6, 8, 10][:P]
    for dt, dim in itertools.product((torch.float32, torch.float64), DIMS):
        xs = [torch.ones([sizes[R]] + [17] * (dim - 1), dtype=dt).mul_(R).requires_grad_()
              for _ in range(5)]
        dy = torch.cat([torch.ones([s] + [17] * (dim - 1), dtype=dt) * r
                        for r, s in enumerate(sizes)])
        for g in hvd.grouped_allgather(xs):
            g.backward(dy)
        for i, x in enumerate(xs):
            same(x.grad, torch.ones_like(x) * R, "grouped_allgather grad %d %s %dd" %
                 (i, dt, dim))
        for op, k in ((hvd.Sum, P), (hvd.Average, 1)):
            xs = [torch.empty([P * 4] + [17] * (dim - 1), dtype=dt).random_(-100, 100)
                  .requires_grad_() for _ in range(5)]
            outs = hvd.grouped_reducescatter(xs, op=op, prescale_factor=2.0)
            for out in outs:
                out.backward(torch.ones_like(out))
            for i, x in enumerate(xs):
                same(x.grad, torch.ones_like(x) * k * 2, "grouped_reducescatter grad %d "
                     "%s %s %dd" % (i, op, dt, dim))
    # members of mixed dtypes and rows, one not requiring a gradient: each gradient in
    # its own member's dtype
    a = torch.ones(R + 1, 2, dtype=torch.float64).requires_grad_()
    b = torch.full((2,), float(R)).requires_grad_()
    c = torch.arange(3, dtype=torch.int32)
    ga, gb, gc = hvd.grouped_allgather([a, b, c])
    (ga.sum() + (gb * torch.arange(2.0 * P)).sum()).backward()
    same(a.grad, torch.ones_like(a), "grouped_allgather mixed a")
    same(b.grad, torch.arange(2.0 * R, 2.0 * R + 2), "grouped_allgather mixed b")
    assert a.grad.dtype == torch.float64 and c.grad is None
    same(gc, torch.arange(3, dtype=torch.int32).repeat(P), "grouped_allgather mixed c")


@check
def barrier_returns_on_every_rank():
    for _ in range(3):
        assert hvd.barrier() is None


@check
def join_with_outstanding_allreduces():
    # the joined rank adds zeros: the others' average is tensor * (size - 1) / size
    # (integers truncated, as Horovod's scaling casts back); join returns the last rank
    # to join, the same on every rank
    for dt, first in itertools.product((torch.int32, torch.int64, torch.float32,
                                        torch.float64), (0, 1)):
        torch.manual_seed(1234)
        a = torch.empty([5] * 2).random_(-100, 100).to(dt)
        b = torch.empty([17] * 2).random_(-100, 100).to(dt)
        if R == first:
            last = hvd.join()
        else:
            ha = hvd.allreduce_async(a, name="join.a", average=True)
            hb = hvd.allreduce_async(b, name="join.b", average=True)
            ga, gb = hvd.synchronize(ha), hvd.synchronize(hb)
            last = hvd.join()
            for g, x in ((ga, a), (gb, b)):
                want = (x.double() * (P - 1) / P)
                want = want.trunc().to(dt) if dt in INTS else want.to(dt)
                same(g, want, "joined average %s first %d" % (dt, first),
                     1e-6 if dt == torch.float32 else 0.0)
        assert isinstance(last, int), type(last)
        lasts = hvd.allgather_object(last)
        assert len(set(lasts)) == 1 and lasts[0] != first, (lasts, first)


@check
def join_then_allgather_raises_broadcast_runs():
    # with a rank joined, the others' allgather fails (RuntimeError) as Horovod's; their
    # broadcast from a root that has not joined runs (sparsecomm's difference, README: the
    # joined rank takes part with zeros and the root's values reach every rank that has not
    # joined; Horovod raises; one from a joined root fails, itest join-root)
    if R == 0:
        hvd.join()
    else:
        raises_everywhere(RuntimeError, lambda: hvd.allgather(torch.ones(17, 3),
                                                              name="join.ag"),
                          "allgather with rank 0 joined")
        hvd.join()
    still_works("join.allgather")
    if R == 0:
        hvd.join()
    else:
        got = hvd.broadcast(torch.full((17, 3), float(R)), 1, name="join.bc")
        same(got, torch.full((17, 3), 1.0), "broadcast from rank 1 with rank 0 joined")
        hvd.join()
    still_works("join.broadcast")


# ---- objects, compression -----------------------------------------------------------

@check
def broadcast_and_allgather_objects():
    want = {"hello": 123, 0: [1, 2]}
    assert hvd.broadcast_object(want if R == 0 else {}, root_rank=0) == want
    d = {"metric_val_1": R}
    if R == 1:
        d["metric_val_2"] = 42
    got = hvd.allgather_object(d)
    exp = [{"metric_val_1": i} for i in range(P)]
    exp[1] = {"metric_val_1": 1, "metric_val_2": 42}
    assert got == exp, got


@check
def compression_fp16_casts():
    for dt in (torch.float32, torch.float64):
        c, ctx = hvd.Compression.fp16.compress(torch.ones([5] * 3, dtype=dt))
        assert c.dtype == torch.float16
        d = hvd.Compression.fp16.decompress(c, ctx)
        assert d.dtype == dt and torch.equal(d, torch.ones([5] * 3, dtype=dt))
    for dt in INTS:
        c, ctx = hvd.Compression.fp16.compress(torch.ones([5] * 3, dtype=dt))
        assert c.dtype == dt
        d = hvd.Compression.fp16.decompress(c, ctx)
        assert d.dtype == dt and torch.equal(d, torch.ones([5] * 3, dtype=dt))


# ---- the optimizer --------------------------------------------------------------------

N, D_IN, H, D_OUT = 64, 100, 10, 10


def optimizer_classes():
    """Every torch optimizer Horovod's suite tests, sorted by name (LBFGS and SparseAdam
    aside)."""
    out = [c for c in torch.optim.Optimizer.__subclasses__()
           if c.__module__.startswith("torch.optim") and
           c not in (torch.optim.LBFGS, torch.optim.SparseAdam)]
    return sorted(out, key=lambda c: c.__name__)


def new_optimizer(cls, params, model):
    args = inspect.signature(cls.__init__).parameters
    return cls(model.parameters(), **{k: v for k, v in params.items() if k in args})


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(D_IN, H), torch.nn.ReLU(),
                               torch.nn.Linear(H, D_OUT))


def xy(seed=0):
    g = torch.Generator().manual_seed(seed + R)
    return torch.randn(N, D_IN, generator=g), torch.randn(N, D_OUT, generator=g)


def opt_values(opt):
    sd = opt.state_dict()
    out = []
    for group in sd["param_groups"]:
        for pid in group["params"]:
            for k, v in sorted(sd["state"].get(pid, {}).items()):
                out.append((k, v.clone() if torch.is_tensor(v) else v))
    return out


@check
def broadcast_optimizer_state_every_optimizer():
    x, y = xy()
    for cls, params in itertools.product(optimizer_classes(), (
            dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2))):
        model = mlp()
        opt = hvd.DistributedOptimizer(new_optimizer(cls, params, model),
                                       named_parameters=model.named_parameters())
        opt.zero_grad()
        F.mse_loss(model(x), y, reduction="sum").backward()
        opt.step()
        root_model = [hvd.broadcast(v, 0) for _, v in sorted(model.state_dict().items())]
        root_opt = [(k, hvd.broadcast_object(v, 0)) for k, v in opt_values(opt)]
        # a fresh model and optimizer everywhere; rank 0 loads what it had
        saved = (model.state_dict(), opt.state_dict()) if R == 0 else None
        model = mlp()
        opt = hvd.DistributedOptimizer(new_optimizer(cls, params, model),
                                       named_parameters=model.named_parameters())
        if R == 0:
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for want, (_, got) in zip(root_model, sorted(model.state_dict().items())):
            assert torch.equal(want, got), cls.__name__
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        # SGD without momentum keeps no tensor state (torch 1.13 records
        # momentum_buffer=None; older torch nothing), every other optimizer 4 entries
        held = [pid for pid, st in opt.state_dict()["state"].items()
                if any(torch.is_tensor(v) for v in st.values())]
        n = 0 if cls is torch.optim.SGD and "momentum" not in params else 4
        assert len(held) == n, (cls.__name__, params, len(held))
        after = opt_values(opt)
        assert [k for k, _ in after] == [k for k, _ in root_opt], cls.__name__
        for (k, want), (_, got) in zip(root_opt, after):
            assert type(want) == type(got), (cls.__name__, k, type(want), type(got))
            assert (torch.equal(want, got) if torch.is_tensor(want) else want == got), (
                cls.__name__, k)


@check
def broadcast_optimizer_state_options():
    # rank 0's hyperparameters reach every rank, of the same Python types, and the
    # optimizer steps with them afterwards
    p0 = dict(lr=0.1, momentum=0.8, weight_decay=0.2, nesterov=True, betas=(0.9, 0.999),
              etas=(0.8, 2.4), step_sizes=(1e-5, 100))
    p1 = dict(lr=0.2, momentum=0.9, weight_decay=0.1, nesterov=False, betas=(0.8, 0.9),
              etas=(0.25, 1.75), step_sizes=(1e-7, 5))
    x, y = xy()
    for cls in optimizer_classes():
        model = mlp()
        opt = hvd.DistributedOptimizer(new_optimizer(cls, p0 if R == 0 else p1, model),
                                       named_parameters=model.named_parameters())
        for _ in range(2):
            opt.zero_grad()
            F.mse_loss(model(x), y, reduction="sum").backward()
            opt.step()
            if _ == 0:
                hvd.broadcast_optimizer_state(opt, root_rank=0)
                args = inspect.signature(cls.__init__).parameters
                for k, v in p0.items():
                    if k not in args:
                        continue
                    got = opt.param_groups[0][k]
                    vs, gs = (v, got) if isinstance(v, tuple) else ((v,), (got,))
                    for a, b in zip(vs, gs):
                        assert type(a) == type(b) and abs(a - b) <= 1e-5, (
                            cls.__name__, k, got, v)


@check
def broadcast_optimizer_state_keeps_a_wrapped_schedulers_groups():
    # an LR scheduler made on the optimizer before DistributedOptimizer wraps it, the
    # wrapper's state then broadcast: every rank's steps take the scheduler's rates, and
    # the wrapped optimizer and the wrapper still share their groups and state
    torch.manual_seed(5)
    model = torch.nn.Linear(3, 1)
    inner = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(inner, 1, gamma=0.5)
    opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters(),
                                   prefix="sched.")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "scheduler stepped before optimizer"
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
            sched.step()
            rates.append(opt.param_groups[0]["lr"])
    assert rates == [0.05, 0.025, 0.0125], rates
    assert opt.param_groups[0] is inner.param_groups[0] and opt.state is inner.state
    assert len(inner.state) == 2, len(inner.state)
    same(hvd.broadcast(model.weight.detach(), 0, name="sched.w"), model.weight.detach(),
         "weights after the scheduled steps")


def _steps_with_a_broadcast_in_flight(tag, between, passes=1, at=0, lr_of_rank=False):
    """Three steps of a DistributedOptimizer (SGD with momentum; with ``lr_of_rank`` each
    rank its own learning rate, which only rank 0's broadcast state makes 0.1) in which
    ``between`` runs after backward pass ``at`` (from 0) of ``passes``: between two
    passes, or after the last one while its reductions are in flight.  Every step must
    apply the average of every rank's gradients, as a plain SGD given that average does
    (the first step's optimizer has no state yet)."""
    torch.manual_seed(17)
    model = torch.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1 if lr_of_rank else 1),
                        momentum=0.9),
        named_parameters=model.named_parameters(), backward_passes_per_step=passes,
        prefix=tag + ".", timeout=30)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)

    def loss(m, r, k):
        x = torch.arange(6, dtype=torch.float32).view(2, 3) * (r + 1) + k
        return (m(x) ** 2).sum()

    for step in range(3):
        opt.zero_grad()
        ref_opt.zero_grad()
        for k in range(passes):
            loss(model, R, k).backward()
            if k == at:
                between(model, opt)
        for r in range(P):  # what every rank's passes add to the average
            for k in range(passes):
                (loss(ref, r, k) / P).backward()
        opt.step()
        ref_opt.step()
        for (n, got), want in zip(model.named_parameters(), ref.parameters()):
            same(got.detach(), want.detach(), "%s: %s after step %d" % (tag, n, step),
                 rtol=1e-5)
    assert opt.param_groups[0]["lr"] == 0.1, opt.param_groups[0]["lr"]


@check
def broadcast_optimizer_state_between_backward_and_step():
    # Horovod's broadcast_optimizer_state leaves the reductions in flight and the passes
    # counted as they are: step() applies them, on every rank, with or without state;
    # with backward_passes_per_step=2, between the passes and after the last one
    def bos(model, opt):
        hvd.broadcast_optimizer_state(opt, root_rank=0, name="bos.inflight")

    _steps_with_a_broadcast_in_flight("bos1", bos, lr_of_rank=True)
    _steps_with_a_broadcast_in_flight("bos2", bos, passes=2, lr_of_rank=True)
    _steps_with_a_broadcast_in_flight("bos2last", bos, passes=2, at=1, lr_of_rank=True)


@check
def broadcast_optimizer_state_between_backward_and_adasum_step():
    # Adasum's local steps taken in backward are combined and applied by step() as they
    # are without the broadcast: two like optimizers, one broadcast in between, step alike
    # (without momentum: under Adasum each rank's momentum is its own, which the root's
    # state replaces)
    torch.manual_seed(23)
    models = [torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
        op=hvd.Adasum, prefix="adasum%d." % i,
        timeout=30) for i, m in enumerate(models)]
    x = torch.arange(6, dtype=torch.float32).view(2, 3) * (R + 1)
    for step in range(3):
        for m, opt in zip(models, opts):
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
        hvd.broadcast_optimizer_state(opts[0], root_rank=0, name="adasum.inflight")
        for opt in opts:
            opt.step()
        for (n, got), want in zip(models[0].named_parameters(), models[1].parameters()):
            same(got.detach(), want.detach(), "Adasum: %s after step %d" % (n, step),
                 rtol=1e-6)


@check
def broadcast_parameters_between_backward_and_step():
    # the parameters' broadcast does not touch the gradients being reduced
    def params(model, opt):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0, prefix="bp.inflight.")

    _steps_with_a_broadcast_in_flight("bp1", params)
    _steps_with_a_broadcast_in_flight("bp2", params, passes=2)
    _steps_with_a_broadcast_in_flight("bp2last", params, passes=2, at=1)


@check
def broadcast_state_with_a_parameter_without_gradient():
    class NoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32),
                                        requires_grad=False)
            self.b = torch.nn.Parameter(torch.rand(4))

    model = NoGrad()
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                          nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["params"][0].grad is None
    assert torch.equal(model.b, hvd.broadcast(model.b.detach(), 0))


@check
def every_gradient_reduced_when_ranks_use_different_outputs():
    # rank 0's loss reaches fc1 and fc2, the others' fc1, fc2 and fc3: step() must not
    # hang, and fc3's gradient is the average with rank 0's zeros
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(D_IN, H)
            self.fc2 = torch.nn.Linear(H, D_OUT)
            self.fc3 = torch.nn.Linear(D_OUT, D_OUT)

        def forward(self, x):
            x1 = self.fc2(F.relu(self.fc1(x)))
            return x1, self.fc3(F.relu(x1))

    x, y = xy()
    for cls, params in itertools.product(optimizer_classes(), (
            dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2))):
        model = Net()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(new_optimizer(cls, params, model),
                                       named_parameters=model.named_parameters())
        y1, y2 = model(x)
        loss = F.mse_loss(y1 if R == 0 else y2, y, reduction="sum")
        opt.zero_grad()
        loss.backward()
        opt.step()
    # the models stayed equal on every rank
    for name, v in model.state_dict().items():
        assert torch.equal(v, hvd.broadcast(v, 0, name="fa." + name)), name


@check
def optimizer_named_parameters_duplicates_and_missing():
    n1, n2 = torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1)
    opt = torch.optim.SGD(itertools.chain(n1.parameters(), n2.parameters()), lr=0.1)
    raises_everywhere(ValueError, lambda: hvd.DistributedOptimizer(
        opt, named_parameters=itertools.chain(n1.named_parameters(),
                                              n2.named_parameters())),
        "duplicate parameter names")
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 100, 1), torch.nn.Conv2d(100, 1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    raises_everywhere(ValueError, lambda: hvd.DistributedOptimizer(
        opt, named_parameters=list(model.named_parameters())[0:1]),
        "named_parameters missing parameters")
    # none given: it steps
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    opt.zero_grad()
    model(torch.rand([1, 1, 100, 100])).sum().backward()
    opt.step()


@check
def optimizer_requires_grad_switched_per_step():
    gen, disc = torch.nn.Conv2d(1, 10, 1), torch.nn.Conv2d(10, 1, 1)
    hvd.broadcast_parameters(gen.state_dict(), 0, prefix="gen.")
    hvd.broadcast_parameters(disc.state_dict(), 0, prefix="disc.")
    inp = torch.rand([1, 1, 100, 100])
    g_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1),
                                     named_parameters=gen.named_parameters(), prefix="g.")
    d_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                     named_parameters=disc.named_parameters(), prefix="d.")
    for _ in range(5):
        for train_gen in (True, False):
            for p in gen.parameters():
                p.requires_grad_(train_gen)
            for p in disc.parameters():
                p.requires_grad_(not train_gen)
            g_opt.zero_grad()
            d_opt.zero_grad()
            disc(gen(inp)).sum().backward()
            for p in gen.parameters():
                assert train_gen == bool(p.grad is not None and p.grad.abs().max() > 0)
            for p in disc.parameters():
                assert (not train_gen) == bool(p.grad is not None and
                                               p.grad.abs().max() > 0)
            (g_opt if train_gen else d_opt).step()


@check
def optimizer_synchronize_clip_and_skip_synchronize():
    model = torch.nn.Linear(1, 1)
    model.weight = torch.nn.Parameter(torch.zeros(1, 1) + 0.5)
    model.bias = torch.nn.Parameter(torch.zeros(1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   prefix="clip.")
    F.mse_loss(model(torch.ones(1, 1)), torch.ones(1, 1)).backward()
    opt.synchronize()
    prior = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert abs(prior) > abs(model.weight.grad.item())
    with opt.skip_synchronize():
        opt.step()
    # synchronize() then step() without skip_synchronize(): Horovod's one warning
    opt.zero_grad()
    F.mse_loss(model(torch.zeros(1, 1)), torch.ones(1, 1)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        opt.step()
    msgs = [str(w.message) for w in ws]
    assert len(msgs) == 1 and "optimizer.step() called without " \
        "optimizer.skip_synchronize()" in msgs[0], msgs


@check
def optimizer_backward_passes_per_step():
    # two backward passes a step: the gradient reduced is their sum, averaged across ranks
    model = torch.nn.Linear(4, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2, prefix="bpps.")
    opt.zero_grad()
    for k in (1.0, 2.0):
        (model(torch.full((1, 4), k * (R + 1))).sum()).backward()
    opt.step()
    # the gradient of each pass is its input: (1 + 2) * mean(rank + 1)
    want = -3.0 * (P + 1) / 2
    assert torch.allclose(model.weight, torch.full((1, 4), want)), (model.weight, want)


@check
def optimizer_sparse_gradients_and_sparse_as_dense():
    first, rest = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]), \
        torch.tensor([[0, 2, 6, 6], [7, 3, 1, 1]])
    inp = first if R == 0 else rest
    for sad in (False, True):
        emb = torch.nn.Embedding(10, 3, sparse=True)
        hvd.broadcast_parameters(emb.state_dict(), 0, prefix="emb%d." % sad)
        before = emb.weight.detach().clone()
        opt = torch.optim.SparseAdam(list(emb.parameters()), lr=0.1) if not sad else \
            torch.optim.SGD(emb.parameters(), lr=0.1)
        opt = hvd.DistributedOptimizer(opt, named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sad, prefix="sp%d." % sad)
        opt.zero_grad()
        emb(inp).sum().backward()
        opt.step()
        w = emb.weight.detach()
        assert torch.equal(w, hvd.broadcast(w, 0, name="sp.check%d" % sad)), sad
        assert not torch.equal(w, before), sad
        if sad:  # SGD: the step is lr x the average count of each row's uses
            counts = torch.bincount(first.flatten(), minlength=10).float() + \
                (P - 1) * torch.bincount(rest.flatten(), minlength=10).float()
            want = before - 0.1 * (counts / P).unsqueeze(1).expand(10, 3)
            assert torch.allclose(w, want, atol=1e-6), (w - want).abs().max()


@check
def sparse_tensors_of_every_dtype():
    # Horovod reduces a sparse tensor of any dtype (its indices and values allgathered):
    # float64 and integer ones too, in their own dtype, with 1, 2 and 3 sparse dims, by
    # sparse_allreduce_async (its handle called, as Horovod's) and allreduce
    for dt, sd, op in itertools.product((torch.float64, torch.int64, torch.int32),
                                        (1, 2, 3), (hvd.Sum, hvd.Average)):
        g = torch.Generator().manual_seed(10 * R + sd)
        dense = (torch.rand(5, 4, 2, generator=g) > 0.6) * \
            torch.randint(-50, 50, (5, 4, 2), generator=g)
        dense = dense.to(dt)
        want = hvd.allreduce(dense, op=op, name="spdt.want")
        tag = "spdt.%s.%d.%s" % (dt, sd, op)
        for got in (hvd.sparse_allreduce_async(dense.to_sparse(sd), tag, op)(),
                    hvd.allreduce(dense.to_sparse(sd), op=op)):
            assert got.is_sparse and got.sparse_dim() == sd, (tag, got.layout)
            same(got.to_dense(), want, tag)
    # small integer dtypes are summed wide, as the dense path's int32 buffer sums them: an
    # average of 100 on every rank is 100 (it wrapped in int8 before the division), and a
    # sum wraps in the tensor's dtype as the dense one does
    for dt in (torch.int8, torch.uint8, torch.int16):
        dense = torch.zeros(6, dtype=dt)
        dense[1] = dense[4] = 100
        for op in (hvd.Average, hvd.Sum):
            want = hvd.allreduce(dense, op=op, name="spdt.small.want")
            got = hvd.allreduce(dense.to_sparse(), op=op, name="spdt.small.%s.%s" % (dt, op))
            same(got.to_dense(), want, "sparse %s %s" % (dt, op))
    # shapes that differ fail every rank alike (Horovod's error for a mismatch, as the
    # COO path's), and the next call works
    bad = torch.eye(3 + R, dtype=torch.float64).to_sparse()
    raises_everywhere(hvd.HorovodInternalError, lambda: hvd.allreduce(bad, name="spdt.bad"),
                      "sparse shapes that differ")
    still_works("spdt.after")
    # a float64 nn.Embedding(sparse=True) trains under DistributedOptimizer, with and
    # without sparse_as_dense, as the same embedding with dense gradients does
    idx = torch.tensor([[R, 5], [R + 1, 7]])
    got = {}
    for sparse, sad in ((False, False), (True, False), (True, True)):
        torch.manual_seed(3)
        emb = torch.nn.Embedding(10, 3, sparse=sparse).double()
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(emb.parameters(), lr=0.5), named_parameters=emb.named_parameters(),
            sparse_as_dense=sad, prefix="spdt.emb.%d%d." % (sparse, sad))
        for _ in range(2):
            opt.zero_grad()
            emb(idx).pow(2).sum().backward()
            opt.step()
        assert emb.weight.grad.is_sparse == sparse, (sparse, sad)
        got[sparse, sad] = emb.weight.detach()
    for k, w in got.items():
        assert torch.allclose(w, got[False, False], rtol=1e-12, atol=0), k
    # two float64 sparse embeddings, the first looked up on rank 0 only in the second
    # step: their hooks fire in another order on each rank, and a reduction started in a
    # hook waited for the other ranks' start of it (each rank waited on the other until
    # the stall timeout); the sums are those of the same embeddings with dense gradients
    import time
    got = {}
    for sparse in (False, True):
        torch.manual_seed(5)
        e1 = torch.nn.Embedding(10, 3, sparse=sparse).double()
        e2 = torch.nn.Embedding(10, 3, sparse=sparse).double()
        params = [("e1.weight", e1.weight), ("e2.weight", e2.weight)]
        opt = hvd.DistributedOptimizer(torch.optim.SGD([e1.weight, e2.weight], lr=0.5),
                                       named_parameters=params,
                                       prefix="spdt.order.%d." % sparse)
        t0 = time.monotonic()
        for step in range(2):
            opt.zero_grad()
            loss = e2(idx).sum()
            if step == 0 or R == 0:
                loss = loss + e1(idx).pow(2).sum()
            loss.backward()
            opt.step()
        took = time.monotonic() - t0
        assert took < 20, "two steps took %.1f s" % took
        got[sparse] = (e1.weight.detach().clone(), e2.weight.detach().clone())
    for a, b in zip(got[True], got[False]):
        assert torch.allclose(a, b, rtol=1e-12, atol=0), "sparse against dense gradients"


@check
def optimizer_adasum_with_sparse_gradients():
    # Horovod's Adasum optimizer combines the local steps' parameter changes, which are
    # dense whatever the gradient: an nn.Embedding(sparse=True) under SGD (with and
    # without sparse_as_dense) takes the same steps as the same embedding with dense
    # gradients, on every rank alike
    idx = torch.tensor([[R, 5], [R + 1, 7]])
    got = {}
    for sparse, sad in ((False, False), (True, False), (True, True)):
        torch.manual_seed(3)
        emb = torch.nn.Embedding(10, 3, sparse=sparse)
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(emb.parameters(), lr=0.5), named_parameters=emb.named_parameters(),
            op=hvd.Adasum, sparse_as_dense=sad, prefix="ads.%d%d." % (sparse, sad))
        for _ in range(2):
            opt.zero_grad()
            (emb(idx) * (R + 1)).sum().backward()
            opt.step()
        got[sparse, sad] = emb.weight.detach().clone()
    dense = got[False, False]
    same_everywhere_ = hvd.broadcast(dense, 0, name="ads.check")
    assert torch.equal(dense, same_everywhere_), "Adasum steps differ across ranks"
    for key in ((True, False), (True, True)):
        assert torch.allclose(got[key], dense, atol=1e-6), (key, (got[key] - dense).abs().max())


@check
def optimizer_model_parallel_layer_outside_it():
    # a layer kept out of the optimizer (another rank's shard of a model-parallel model):
    # its gradient is left alone, the optimizer's parameters step
    shared, local = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(shared.state_dict(), 0, prefix="mp.")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(shared.parameters(), lr=0.1),
                                   named_parameters=shared.named_parameters(),
                                   prefix="mpo.")
    opt.zero_grad()
    local(shared(torch.full((2, 3), float(R)))).sum().backward()
    mine = local.weight.grad.clone()
    opt.step()
    assert torch.equal(local.weight.grad, mine), "the local layer's gradient changed"
    for n, v in shared.state_dict().items():
        assert torch.equal(v, hvd.broadcast(v, 0, name="mpc." + n)), n


# ---- SyncBatchNorm --------------------------------------------------------------------

@check
def sync_batch_norm_matches_batch_norm_of_the_whole_batch():
    batches = [
        torch.stack([torch.tensor([[r, r + 1], [r * 2, r * 2 + 1], [r * 3, r * 3 + 1],
                                   [r * 4, r * 4 + 1]]) for r in range(P)]),
        torch.stack([torch.tensor([[r + 1], [r * 2 + 1], [r * 3 + 1], [r * 4 + 1]])
                     for r in range(P)])]
    for i, ts in enumerate(batches):
        sync_bn, bn = hvd.SyncBatchNorm(num_features=4), torch.nn.BatchNorm1d(4)
        ts = ts.float()
        ts1, ts2 = ts.clone().requires_grad_(), ts.clone().requires_grad_()
        out = sync_bn(ts1[R].unsqueeze(0))
        ref = bn(ts2)
        # Horovod's rtol 1e-6, and an atol of 1e-6 for outputs that are 0 up to
        # BatchNorm1d's own rounding (-6e-8 where the exact value is 0)
        assert torch.allclose(out, ref[R].unsqueeze(0), 1e-6, 1e-6), (
            i, out.flatten().tolist(), ref[R].flatten().tolist())
        assert torch.allclose(sync_bn.running_mean, bn.running_mean, 1e-6, 1e-6), i
        assert torch.allclose(sync_bn.running_var, bn.running_var, 1e-6, 1e-6), i
        out.sum().backward()
        ref.mean(dim=0).sum().backward()
        for mine, want, n in ((sync_bn.weight.grad, bn.weight.grad, "w"),
                              (sync_bn.bias.grad, bn.bias.grad, "b"),
                              (ts1.grad, ts2.grad, "x")):
            got = hvd.allreduce(mine, name="sbn.%d.%s" % (i, n))
            assert torch.allclose(got, want, 1e-6, 1e-6), (i, n, got, want)


@check
def sync_batch_norm_of_modules_only_some_ranks_made():
    # rank 0 alone makes more SyncBatchNorm modules first (an evaluation copy of its
    # own): Horovod's statistics go by what they are, not by module, so the modules every
    # rank uses still meet (they stalled), and match BatchNorm1d over the whole batch
    if R == 0:
        hvd.SyncBatchNorm(3), hvd.SyncBatchNorm(5)
    sync_bn, bn = hvd.SyncBatchNorm(3), torch.nn.BatchNorm1d(3)
    every = torch.stack([torch.arange(6.).reshape(2, 3) * (r + 1) for r in range(P)])
    out = sync_bn(every[R])
    ref = bn(every.reshape(-1, 3))
    assert torch.allclose(out, ref.reshape(P, 2, 3)[R], 1e-6, 1e-6), (out, ref)
    assert torch.allclose(sync_bn.running_var, bn.running_var, 1e-6, 1e-6)


# ---- process sets ---------------------------------------------------------------------

@check
def process_sets_added_and_removed_at_run_time():
    evens = hvd.add_process_set([r for r in range(P) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(P) if r % 2 == 1])
    mine = evens if R % 2 == 0 else odds
    members = mine.ranks
    got = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=mine,
                        name="ps.sum")
    assert got.item() == sum(members), (got, members)
    g = hvd.allgather(torch.tensor([R]), process_set=mine, name="ps.ag")
    assert g.tolist() == members, (g, members)
    # a root is a global rank, which Horovod maps to the set's numbering
    for root in members:
        b = hvd.broadcast(torch.tensor([R]), root, process_set=mine, name="ps.bc")
        assert b.item() == root, (b, members)
        assert hvd.broadcast_object(R, root, process_set=mine) == root
    hvd.barrier(process_set=mine)
    # a set this rank is not in is refused (ValueError), and a removed set too
    other = odds if mine is evens else evens
    if other.ranks:
        raises_everywhere(ValueError, lambda: hvd.allreduce(torch.ones(1),
                                                            process_set=other),
                          "an allreduce in a set without this rank")
    hvd.remove_process_set(odds)
    hvd.remove_process_set(evens)
    raises_everywhere(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=evens),
                      "an allreduce in a removed set")
    still_works("process_sets")


@check
def shutdown_then_init_again():
    # last: init -> shutdown -> init keeps rank and size, is_initialized follows, and
    # collectives work after it
    assert hvd.is_initialized()
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    # a handle still running at shutdown() is refused, not waited on a freed client
    import sparsecomm as sc

    class Gone:
        closed, timeout_s, rank = True, 1.0, R
    h = sc.Handle(Gone(), None, 7, lambda: None)
    for call in (h.poll, h.wait):
        try:
            call()
            raise AssertionError("%s of a handle after shutdown() returned" % call.__name__)
        except sc.SparsecommError as e:
            assert e.status_name == "SC_ERR_SHUTDOWN", e
    hvd.init()
    assert hvd.is_initialized() and (hvd.rank(), hvd.size()) == (R, P)
    still_works("reinit")


sys.exit(1 if check.failed else 0)
