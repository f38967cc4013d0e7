#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: Horovod's contract, call by call, through
``import sparsecomm.torch as hvd`` as a Horovod user writes it.  Prints `CHECK <name> ok`
or `CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks, daemon_shm, daemon_tensors  # noqa: E402

torch.set_num_threads(1)
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


sc.shutdown()
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
