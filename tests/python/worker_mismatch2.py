#!/usr/bin/python3
"""Run under sparsecomm-run (2 ranks) with a long stall_timeout_ms (60 s): the
mismatches of Horovod's own error tests (test/parallel/test_torch.py: the type errors of
allreduce, allgather, broadcast, alltoall and reducescatter, their shape errors, the
broadcast rank error, and their grouped forms), made as Horovod makes them, unnamed, after
the ranks have already made unnamed calls of both dtypes (as a suite run has), and named,
in the global set and in a process set: each must raise Horovod's RuntimeError on every
rank at once, well before the stall timeout, naming the tensor and what each rank gave,
and the next collective must still work.
Prints `CHECK <name> ok|FAIL <why>`."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks  # noqa: E402

PROMPT_S = 10.0  # "at once": well under the 60 s stall timeout the test sets
torch.set_num_threads(1)
PSET = hvd.ProcessSet(list(range(int(os.environ["SPARSECOMM_SIZE"]))))
hvd.init(process_sets=[PSET])  # every rank, in a set numbered apart from the world
R, P = hvd.rank(), hvd.size()
SETS = (("global", None), ("pset", PSET))
NAMES = (None, "named")
hvd.barrier()
check = Checks(sys.argv[1:])  # each check runs where it is defined, in order
ODD = R % 2 == 0  # Horovod's split: even ranks give one thing, odd ranks another


def still_works(tag, ps):
    """The next collective after a failure completes with the right sum."""
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after." + tag, process_set=ps)
    assert got.tolist() == [float(P)] * 3, (tag, got)


def tag_of(what, name, where):
    return "%s.%s.%s" % (what, name or "unnamed", where)


def fails(tag, ps, call, *wants, exc=RuntimeError, status="SC_ERR_MISMATCH"):
    """call() must raise exc (Horovod's expectation) within PROMPT_S on this rank, its
    text holding every string of wants; then the next collective works."""
    t0 = time.monotonic()
    try:
        got = call()
    except exc as e:
        secs = time.monotonic() - t0
        print("%s: %.2f s: %s" % (tag, secs, e), flush=True)
        assert secs < PROMPT_S, "%s failed only after %.1f s: %s" % (tag, secs, e)
        assert getattr(e, "status_name", "") == status, (tag, str(e))
        for w in wants:
            assert w in str(e), "%s: %r not in %r" % (tag, w, str(e))
        still_works(tag, ps)
        return
    raise AssertionError("%s returned %r after %.1f s instead of failing" %
                         (tag, got, time.monotonic() - t0))


def prime(call):
    """The same unnamed calls on every rank in both dtypes first, as the tests before
    Horovod's error test have made: each rank holds unnamed buffers of either dtype."""
    for dt in (torch.int32, torch.float32):
        call(dt)
    hvd.barrier()


def type_case(what, call, prime_call=None):
    """Horovod's type error: int32 on even ranks, float32 on odd ones."""
    for where, ps in SETS:
        for name in NAMES:
            nm = name and "%s.%s.t" % (name, what)
            if name is None:
                prime(lambda dt: (prime_call or call)(torch.ones(P * 2, 3, dtype=dt), None,
                                                      ps))
            x = torch.ones(P * 2, 3, dtype=torch.int32 if ODD else torch.float32)
            fails(tag_of(what + "_type", name, where), ps, lambda: call(x, nm, ps),
                  "int32", "float32", nm or ("%s.noname" % what))


def shape_case(what, call, shape, *wants):
    """Horovod's shape error: a shape that differs by rank (on ranks 0 and 1: wants
    name them)."""
    for where, ps in SETS:
        for name in NAMES:
            nm = name and "%s.%s.s" % (name, what)
            if name is None:
                prime(lambda dt: call(torch.ones(shape(0), dtype=dt), None, ps))
            x = torch.ones(shape(R))
            fails(tag_of(what + "_shape", name, where), ps, lambda: call(x, nm, ps),
                  nm or what, *wants)


@check
def allreduce_type_error():
    type_case("allreduce", lambda x, nm, ps: hvd.allreduce(x, name=nm, op=hvd.Sum,
                                                           process_set=ps))


@check
def allreduce_shape_error():
    shape_case("allreduce", lambda x, nm, ps: hvd.allreduce(x, name=nm, process_set=ps),
               lambda r: [17 + r] * 3, "rank 0 has 4913 [17, 17, 17]",
               "rank 1 has 5832 [18, 18, 18]")


@check
def allgather_type_error():
    type_case("allgather", lambda x, nm, ps: hvd.allgather(x, name=nm, process_set=ps))


@check
def allgather_shape_error():
    # Horovod's: the dimensions after the first differ by rank
    shape_case("allgather", lambda x, nm, ps: hvd.allgather(x, name=nm, process_set=ps),
               lambda r: [17, 10 * (r + 1), 17], "rank 0 has 170 (10, 17)",
               "rank 1 has 340 (20, 17)")


@check
def broadcast_type_error():
    type_case("broadcast", lambda x, nm, ps: hvd.broadcast(x, 0, name=nm, process_set=ps))


@check
def broadcast_shape_error():
    shape_case("broadcast", lambda x, nm, ps: hvd.broadcast(x, 0, name=nm,
                                                            process_set=ps),
               lambda r: [17 + r] * 3)


@check
def broadcast_rank_error():
    # Horovod's: every rank names itself the root
    for where, ps in SETS:
        for name in NAMES:
            nm = name and "%s.bc.root" % name
            if name is None:
                prime(lambda dt: hvd.broadcast(torch.ones(17, dtype=dt), 0,
                                               process_set=ps))
            x = torch.ones(17)
            fails(tag_of("broadcast_root", name, where), ps,
                  lambda: hvd.broadcast(x, R, name=nm, process_set=ps),
                  nm or "broadcast.noname", "rank 0 has broadcast from rank 0",
                  "rank 1 has broadcast from rank 1")


@check
def alltoall_type_error():
    type_case("alltoall", lambda x, nm, ps: hvd.alltoall(x, name=nm, process_set=ps))


@check
def alltoall_shape_error():
    # Horovod's: the dimensions after the first differ by rank
    shape_case("alltoall", lambda x, nm, ps: hvd.alltoall(x, name=nm, process_set=ps),
               lambda r: [P * 2, 10 * (r + 1), 3], "rank 0 has 30 (10, 3)",
               "rank 1 has 60 (20, 3)")


@check
def alltoall_splits_error():
    # Horovod's splits errors, on rank 0 only: the splits are refused on every rank
    for where, ps in SETS:
        for name in NAMES:
            for bad, why in (([P * 4] + [0] * (P - 1), "over its"), ([1], "splits for"),
                             (torch.tensor([1.0] * P), "not integers")):
                x = torch.ones(P * 2, 3)
                sp = bad if R == 0 else [2] * P
                fails(tag_of("alltoall_splits", name, where), ps,
                      lambda: hvd.alltoall(x, sp, name=name and "named.a2a.sp",
                                           process_set=ps),
                      "splits of rank 0 are refused", *([why] if R == 0 else []),
                      exc=ValueError,
                      status="SC_ERR_INVALID")
            # Horovod's equal split length error: rows that do not split evenly, a
            # RuntimeError there
            fails(tag_of("alltoall_even", name, where), ps,
                  lambda: hvd.alltoall(torch.ones(P + 1, 3), name=name and "named.a2a.ev",
                                       process_set=ps),
                  "refused", "do not split evenly", exc=RuntimeError,
                  status="SC_ERR_INVALID")


@check
def reducescatter_type_error():
    type_case("reducescatter", lambda x, nm, ps: hvd.reducescatter(
        x, name=nm, op=hvd.Sum, process_set=ps))


@check
def reducescatter_shape_error():
    shape_case("reducescatter", lambda x, nm, ps: hvd.reducescatter(
        x, name=nm, op=hvd.Sum, process_set=ps), lambda r: [P * (17 + r), 3])


def grouped(call):
    """A group of three, its middle member the one that differs."""
    return lambda x, nm, ps: call([torch.ones(P * 2, 3), x, torch.ones(P * 2, 3)], nm, ps)


@check
def grouped_type_errors():
    type_case("allreduce", grouped(lambda xs, nm, ps: hvd.grouped_allreduce(
        xs, name=nm, op=hvd.Sum, process_set=ps)))
    type_case("allgather", grouped(lambda xs, nm, ps: hvd.grouped_allgather(
        xs, name=nm, process_set=ps)))
    type_case("reducescatter", grouped(lambda xs, nm, ps: hvd.grouped_reducescatter(
        xs, name=nm, op=hvd.Sum, process_set=ps)))


@check
def grouped_shape_errors():
    shape_case("allreduce", grouped(lambda xs, nm, ps: hvd.grouped_allreduce(
        xs, name=nm, op=hvd.Sum, process_set=ps)), lambda r: [17 + r] * 3,
        "rank 0 has 4913 [17, 17, 17]", "rank 1 has 5832 [18, 18, 18]")
    shape_case("allgather", grouped(lambda xs, nm, ps: hvd.grouped_allgather(
        xs, name=nm, process_set=ps)), lambda r: [17, 10 * (r + 1), 17],
        "rank 0 has 170 (10, 17)", "rank 1 has 340 (20, 17)")
    shape_case("reducescatter", grouped(lambda xs, nm, ps: hvd.grouped_reducescatter(
        xs, name=nm, op=hvd.Sum, process_set=ps)), lambda r: [P * (17 + r), 3],
        "rank 0 has 102 [34, 3]", "rank 1 has 108 [36, 3]")


@check
def unnamed_calls_meet_after_the_errors():
    # the unnamed calls of both dtypes in turn still meet and sum right
    for ps in (None, PSET):
        for _ in range(3):
            for dt in (torch.int32, torch.float32, torch.int64):
                got = hvd.allreduce(torch.ones(5, dtype=dt), op=hvd.Sum, process_set=ps)
                assert got.dtype == dt and got.tolist() == [P] * 5, (dt, got)


def refused_on_a_node_then_next_call():
    # two trainers of one node (run alone, 1 node x 2): the one that registers the
    # unnamed buffer second in another dtype is refused by its daemon, which releases
    # its old registration; its next call of the old form must register the buffer anew,
    # not use the released one (it raised TypeError from a buffer of None)
    for dt in (torch.int32, torch.float32):
        hvd.allreduce(torch.ones(12, dtype=dt), op=hvd.Sum)
    hvd.barrier()
    x = torch.ones(12, dtype=torch.int32 if R == 0 else torch.float32)
    try:
        hvd.allreduce(x, op=hvd.Sum)
        raise AssertionError("int32 against float32 returned")
    except hvd.HorovodInternalError as e:
        assert "int32" in str(e) and "float32" in str(e), str(e)
    hvd.barrier()
    try:  # the trainers' daemon may still refuse the name here: an error, not a crash
        got = hvd.allreduce(torch.ones(12), op=hvd.Sum)
        assert got.tolist() == [float(P)] * 12, got
    except hvd.HorovodInternalError as e:
        print("the call after: %s" % e, flush=True)


if "refused_on_a_node_then_next_call" in sys.argv[1:]:  # 1 node x 2 only, by name
    check(refused_on_a_node_then_next_call)
hvd.shutdown()
