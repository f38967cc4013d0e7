#!/usr/bin/python3
"""Run under sparsecomm-run: cuda tensors in the Python binding without a CUDA driver.
Prints `CHECK <name> ok` or `CHECK <name> FAIL <why>` per check (torch's CUDA tensors end
to end, on a GPU: tests/python/worker_gpu.py).

argv[1]: the path $SPARSECOMM_CUDA_DRIVER is set to before anything loads the driver (a
missing file: every cuda registration must fail with SC_ERR_UNSUPPORTED naming it)."""
import os
import sys

os.environ["SPARSECOMM_CUDA_DRIVER"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
from checks import Checks  # noqa: E402

sc.init(timeout=60)
R, P = sc.rank(), sc.size()
check = Checks()


@check
def cuda_without_driver():
    try:
        sc.register("w", 1000, dtype="float32", device="cuda:0")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_UNSUPPORTED", e
        for part in ("'w'", "cuda:0 needs the CUDA driver", sys.argv[1],
                     "rank %d" % R):
            assert part in str(e), "%r not in %r" % (part, str(e))
    else:
        raise AssertionError("a cuda registration without a driver succeeded")
    assert "w" not in sc.registered(), sc.registered()


@check
def cpu_after_refusal():
    t = torch.full((10, 10), float(R + 1))
    got = sc.allreduce(t, name="after", average=False)
    assert torch.equal(got, torch.full((10, 10), P * (P + 1) / 2)), got


@check
def register_explicit():
    info = sc.register("x", 100, dtype="float64")
    assert info["device"] == "cpu" and info["numel"] == 100 and info["dtype"] == "float64", info
    got = sc.allreduce(torch.full((100,), float(R), dtype=torch.float64), name="x",
                       average=False)
    assert got.dtype == torch.float64 and got[0].item() == P * (P - 1) / 2, got
    try:
        sc.register("x", 100, dtype="float64", device="cuda:0")
    except sc.SparsecommError as e:
        assert e.status_name == "SC_ERR_INVALID" and "registered on cpu" in str(e), e
    else:
        raise AssertionError("'x' re-registered on another device")
    for bad in ("tpu", "cuda:x", "cuda:-1"):
        try:
            sc.register("bad", 10, device=bad)
        except ValueError as e:
            assert bad in str(e), e
        else:
            raise AssertionError("device %r accepted" % bad)


sc.shutdown()
sys.exit(1 if check.failed else 0)
