#!/usr/bin/python3
"""Run under sparsecomm-run: 10,000 unnamed synchronous allreduces (and unnamed async
groups and broadcasts) must reuse their buffers: the trainer's registrations, its daemon's
registrations and shared memory, and the trainer's RSS stay flat after warm-up, and every
result is the right sum.  Prints `CHECK <name> ok|FAIL <why>`."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
from checks import daemon_shm, daemon_tensors  # noqa: E402

STEPS = 10000
BIG = 65536  # float32 elements: 256 KiB

torch.set_num_threads(1)
sc.init(timeout=60)
R, P = sc.rank(), sc.size()
TRI = P * (P + 1) // 2


def rss_kib():
    with open("/proc/self/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def shm_bytes():
    """Bytes of /dev/shm the daemon's buffers occupy."""
    return sum(os.stat(p).st_blocks * 512 for p in daemon_shm())


def measure():
    return dict(local=len(sc.registered()), daemon=daemon_tensors(), shm=shm_bytes(),
                rss_kib=rss_kib())


def step(i):
    v = float(R + 1 + i % 5)
    got = sc.allreduce(torch.full((100,), v), average=False)
    want = TRI + P * (i % 5)
    assert torch.all(got == want), "step %d: small sum %s, want %s" % (i, got[:3], want)
    if i % 10 == 0:
        got = sc.allreduce(np.full(BIG, v, dtype=np.float32), average=False)
        assert got.shape == (BIG,) and np.all(got == want), "step %d: 256 KiB sum" % i
    if i % 100 == 0:  # three outstanding at once, waited out of order
        hs = [sc.allreduce_async(torch.full((100,), float(k * (R + 1))), average=False)
              for k in range(3)]
        names = {h.name for h in hs}
        assert len(names) == 3, "outstanding unnamed operations share a buffer: %s" % names
        for k in (2, 0, 1):
            assert torch.all(hs[k].wait() == k * TRI), "step %d: async %d" % (i, k)
        b = torch.full((7,), float(R))
        sc.broadcast_(b, root_rank=1 % P)
        assert torch.all(b == float(1 % P)), "step %d: broadcast gave %s" % (i, b)


failed = 0
try:
    for i in range(200):
        step(i)
    base = measure()
    for i in range(200, STEPS):
        step(i)
    end = measure()
    names = sorted(sc.registered())
    print("unnamed: base %s end %s names %s" % (base, end, names), flush=True)
    # the 256 KiB allreduce is of the small one's class (a class is not a shape): it
    # takes buffer 0.0, registered anew for its element count, as the next small one does
    want_names = ["allreduce.noname.0.0", "allreduce.noname.0.1", "allreduce.noname.0.2",
                  "broadcast.noname.1.0"]
    assert names == want_names, "registered %s, want %s" % (names, want_names)
    assert end["local"] == base["local"] == len(want_names), (base, end)
    assert end["daemon"] == base["daemon"] == len(want_names), (base, end)
    assert end["shm"] == base["shm"], "daemon shm %d -> %d bytes" % (base["shm"], end["shm"])
    grow = (end["rss_kib"] - base["rss_kib"]) / 1024.0
    assert grow < 20, "trainer RSS grew %.1f MiB over %d steps" % (grow, STEPS - 200)
    print("CHECK unnamed_bounded ok", flush=True)
except Exception as e:  # noqa: B902
    failed = 1
    print("CHECK unnamed_bounded FAIL %s: %s" % (type(e).__name__, e), flush=True)
sc.shutdown()
sys.exit(failed)
