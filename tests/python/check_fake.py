#!/usr/bin/python3
"""The binding's own logic against tests/python/fake/fake_sparseclient.c (a world of one,
no daemon): option structs reach C intact, COO expansion, dtype conversion, error paths.
Run by run_tests.py with SPARSECOMM_LIB and FAKE_SC_OPTS_LOG set.  Prints CHECK lines."""
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as sct  # noqa: E402

sc.init()
failed = 0


def check(fn):
    global failed
    try:
        fn()
        print("CHECK %s ok" % fn.__name__, flush=True)
    except Exception as e:  # noqa: B902
        failed += 1
        print("CHECK %s FAIL %s: %s" % (fn.__name__, type(e).__name__, e), flush=True)
        traceback.print_exc()


def opts_log():
    with open(os.environ["FAKE_SC_OPTS_LOG"]) as f:
        return {ln.split()[0]: ln.split()[1:] for ln in f}


@check
def options_reach_c():
    sc.allreduce(torch.ones(4), name="o1", sparsifier="threshold", threshold=0.25,
                 allow_lossy=True, scheme="dense_ring")
    sc.allreduce(torch.ones(8), name="o2", sparsifier="topk", density=0.125)
    log = opts_log()
    assert log["o1"] == ["1", "2", "0", "0.25", "dense_ring", "0"], log["o1"]
    assert log["o2"] == ["0", "1", "0.125", "0", "-", "0"], log["o2"]


@check
def dense_roundtrip_dtypes():
    for dt in (torch.float32, torch.float64, torch.int64, torch.float16, torch.bool):
        t = (torch.arange(6) % 2).to(dt).view(2, 3)
        r = sc.allreduce(t, name="rt.%s" % dt)
        assert r.dtype == dt and torch.equal(r, t), (dt, r)
    a = np.arange(5, dtype=np.int32)
    assert (sc.allreduce(a, name="rt.np") == a).all()
    assert sc.allreduce(torch.empty(0), name="rt.empty").numel() == 0


@check
def coo_expansion():
    i = torch.tensor([[0, 2, 2, 1], [1, 0, 0, 3]])  # sparse_dim 2, repeats
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    s = torch.sparse_coo_tensor(i, v, (3, 4, 2))
    r = sc.allreduce(s, name="coo.2d")
    assert r.is_sparse and torch.equal(r.to_dense(), s.to_dense())
    log = opts_log()
    assert log["coo.2d"][1] == "5" and log["coo.2d"][5] == "24", log["coo.2d"]  # natural
    e = torch.sparse_coo_tensor(torch.empty((1, 0), dtype=torch.int64), torch.empty(0, 3),
                                (5, 3))
    assert sc.allreduce(e, name="coo.empty")._nnz() == 0


@check
def errors_carry_status_and_text():
    try:
        sc.allreduce(torch.ones(3), name="fail.x")
        raise AssertionError("no exception")
    except sc.SparsecommError as ex:
        assert ex.status_name == "SC_ERR_PEER" and "rank 3 exited" in ex.message, ex
    try:
        sc.allreduce(torch.ones(3), name="unsupported.x", sparsifier="dgc", density=0.1)
        raise AssertionError("no exception")
    except sc.SparsecommError as ex:
        assert ex.status_name == "SC_ERR_UNSUPPORTED" and "sparsifier 3" in ex.message, ex
    try:
        sc.allreduce(torch.ones(4), name="o2")  # registered with other options
        raise AssertionError("no exception")
    except sc.SparsecommError as ex:
        assert ex.status_name == "SC_ERR_INVALID", ex
    h = sc.allreduce_async(torch.ones(2), name="busy")
    try:
        sc.allreduce_async(torch.ones(2), name="busy")
        raise AssertionError("no exception")
    except sc.SparsecommError as ex:
        assert ex.status_name == "SC_ERR_BUSY", ex
    h.wait()
    try:
        sc.Sparsifier.parse("bogus")
        raise AssertionError("no exception")
    except ValueError:
        pass


@check
def optimizer_overrides():
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    opt = sct.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
        sparsifier="topk", density=0.5, prefix="ov.",
        overrides={"1.weight": {"sparsifier": "dgc", "density": 0.25},
                   "*.bias": {"sparsifier": "none"}})
    assert isinstance(opt, torch.optim.SGD)
    m(torch.ones(2, 3)).sum().backward()
    opt.step()
    log = opts_log()
    assert log["ov.0.weight"][1:3] == ["1", "0.5"], log["ov.0.weight"]
    assert log["ov.1.weight"][1:3] == ["3", "0.25"], log["ov.1.weight"]
    assert log["ov.0.bias"][1] == "0" and log["ov.1.bias"][1] == "0"


sc.shutdown()
sys.exit(1 if failed else 0)
