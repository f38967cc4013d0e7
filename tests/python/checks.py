"""The CHECK lines of the Python workers (tests/python/worker_*.py), which
tests/python/run_tests.py counts: a decorator that runs a check at once and prints
`CHECK <name> ok` or `CHECK <name> FAIL <why>` (with the traceback)."""
import json
import os
import re
import subprocess
import traceback

CTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin",
                   "sparsectl")


def daemon_tensors():
    """This trainer's registrations as its daemon counts them (sparsectl status)."""
    out = subprocess.run([CTL, "--json", "status"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    me = [c for c in json.loads(out)["clients"] if c["pid"] == os.getpid()]
    assert len(me) == 1, out
    return me[0]["tensors"]


def daemon_shm():
    """The paths of the node daemon's shared-memory objects in /dev/shm (its pid from
    this process's maps), without the lock file it holds beside them."""
    with open("/proc/self/maps") as f:
        pids = set(re.findall(r"/dev/shm/sparsecomm\.(\d+)\.", f.read()))
    assert len(pids) == 1, "daemon pids in the maps: %s" % pids
    pre = "sparsecomm.%s." % pids.pop()
    return [os.path.join("/dev/shm", n) for n in os.listdir("/dev/shm")
            if n.startswith(pre) and n != pre + "lock"]


def raises(exc, fn, *args, **kw):
    """The exception fn raised, which must be an exc."""
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc.__name__))


def same_everywhere(hvd, tensors, what):
    """Every rank holds the same values as rank 0 (its tensors broadcast through ``hvd``,
    sparsecomm.torch)."""
    for i, t in enumerate(tensors):
        t = t.detach()
        root = hvd.broadcast(t, 0, name="same.%s.%d" % (what, i))
        assert t.equal(root), "%s: tensor %d differs from rank 0's by %g" % (
            what, i, (t - root).abs().max().item())


class Checks:
    def __init__(self, only=()):
        self.failed = 0
        self.only = set(only)  # names to run (empty: every one)

    def __call__(self, fn):
        if self.only and fn.__name__ not in self.only:
            return fn
        try:
            fn()
            print("CHECK %s ok" % fn.__name__, flush=True)
        except Exception as e:  # noqa: B902
            self.failed += 1
            print("CHECK %s FAIL %s: %s" % (fn.__name__, type(e).__name__, e), flush=True)
            traceback.print_exc()
        return fn
