#!/usr/bin/python3
"""Run under sparsecomm-run: cuda tensors in the Python binding.  Prints `CHECK <name> ok`
or `CHECK <name> FAIL <why>` per check and `SKIP <name>: <why>` for a check this machine
cannot run.

argv[1]: the path $SPARSECOMM_CUDA_DRIVER is set to before anything loads the driver (a
missing file: every cuda registration must fail with SC_ERR_UNSUPPORTED naming it), or
"gpu": CUDA tensors of torch end to end, where torch has a GPU and the daemons serve it."""
import os
import sys

GPU = sys.argv[1] == "gpu"
if not GPU:
    os.environ["SPARSECOMM_CUDA_DRIVER"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
from checks import Checks  # noqa: E402

sc.init(timeout=60)
R, P = sc.rank(), sc.size()
check = Checks()


def cuda_torch_allreduce():
    """A CUDA tensor's sum and average stay on its GPU, queued on its stream."""
    x = torch.full((1000,), float(R + 1), device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = sc.allreduce(x * 2, name="g", average=False)
        avg = sc.allreduce(x, name="g")
    s.synchronize()
    assert got.device == x.device and avg.device == x.device, (got.device, avg.device)
    assert torch.equal(got.cpu(), torch.full((1000,), float(P * (P + 1)))), got
    assert torch.allclose(avg.cpu(), torch.full((1000,), (P + 1) / 2)), avg
    assert sc.registered()["g"]["device"] == "cuda:%d" % x.device.index


if GPU:
    if not torch.cuda.is_available():
        print("SKIP cuda_torch_allreduce: torch has no CUDA device on this machine",
              flush=True)
    else:
        try:
            sc.register("probe", 1, device="cuda")
        except sc.SparsecommError as e:
            print("SKIP cuda_torch_allreduce: %s" % e, flush=True)
        else:
            check(cuda_torch_allreduce)
    sc.shutdown()
    sys.exit(1 if check.failed else 0)


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
