#!/usr/bin/python3
"""Run under sparsecomm-run: the 16-bit wire from Python.  sparsecomm.torch's
Compression.fp16 and bf16 on float32 tensors and a float16 tensor given as it is: results
right within 16-bit rounding, in the tensor's dtype, the same on every rank, and the
daemon's bytes_sent for each about half a float32 ring's of the same size (`sparsectl
stats`, which names each tensor's wire).  Prints `CHECK <name> ok|FAIL <why>`."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CTL = os.path.join(ROOT, "build", "bin", "sparsectl")
N, STEPS = 50001, 3
check = Checks()
torch.set_num_threads(1)
hvd.init()
R, P = hvd.rank(), hvd.size()


def data(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(N, generator=g)


def exact_sum(step):
    return sum(data(r, step).double() for r in range(P))


def run(name, dtype=torch.float32, **kw):
    """STEPS sums of name, each result checked against the exact sum of the ranks'
    inputs (as the tensor's dtype holds them) within rel of their magnitudes."""
    worst = 0.0
    for s in range(STEPS):
        x = data(R, s).to(dtype)
        res = hvd.allreduce(x, name=name, op=hvd.Sum, **kw)
        assert res.dtype == dtype, (name, res.dtype)
        want = sum(data(r, s).to(dtype).double() for r in range(P))
        mag = sum(data(r, s).to(dtype).double().abs() for r in range(P))
        err = ((res.double() - want).abs() / (mag + 1e-30)).max().item()
        worst = max(worst, err)
    return res, worst


def stats():
    out = subprocess.run([CTL, "--json", "stats"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return {t["name"]: t for t in json.loads(out)["tensors"]}


native, err_native = run("wire.native", scheme="dense_ring")
fp16, err_fp16 = run("wire.fp16", compression=hvd.Compression.fp16)
bf16, err_bf16 = run("wire.bf16", compression=hvd.Compression.bf16)
half, err_half = run("wire.half", dtype=torch.float16)
avg = hvd.allreduce(data(R, 0), name="wire.avg", op=hvd.Average,
                    compression=hvd.Compression.fp16)
sc.register("wire.reg", N, wire="bf16")
reg = sc.allreduce(data(R, 1), name="wire.reg", average=False)
try:
    sc.register("wire.refused", 100, sparsifier="topk", density=0.1, wire="fp16")
    refused = None
except sc.SparsecommError as e:
    refused = e
# the wire is the call's: one name with and without compression, in both orders
one = torch.full((1000,), 1.0001)  # float16 rounds it to 1.0
per_call = {}
for name, order in (("wire.g", (hvd.Compression.fp16, hvd.Compression.none)),
                    ("wire.h", (hvd.Compression.none, hvd.Compression.fp16))):
    for comp in order:
        try:
            per_call[name, comp] = hvd.allreduce(one, name=name, op=hvd.Sum,
                                                 compression=comp)[0].item()
        except sc.SparsecommError as e:
            per_call[name, comp] = e
every = hvd.allgather_object([t.double().sum().item() for t in (fp16, bf16, half, avg)])
st = stats()


@check
def compression_fp16_result():
    assert err_native < 1e-6, err_native
    # each partial sum rounded to float16 once: P - 1 roundings of 2^-11 at most
    assert err_fp16 <= P * 2.0 ** -11, err_fp16
    assert torch.equal(fp16, fp16.half().float()), "a result is not a float16 value"


@check
def compression_bf16_result():
    assert err_bf16 <= P * 2.0 ** -8, err_bf16
    assert torch.equal(bf16, bf16.bfloat16().float()), "a result is not a bfloat16 value"


@check
def float16_tensor_result():
    assert half.dtype == torch.float16
    assert err_half <= P * 2.0 ** -11, err_half


@check
def average_in_float32():
    want = exact_sum(0) / P
    assert avg.dtype == torch.float32
    assert ((avg.double() - want).abs().max().item() <=
            P * 2.0 ** -11 * sum(data(r, 0).abs().double() for r in range(P)).max().item())


@check
def register_wire_option():
    want = exact_sum(1)
    mag = sum(data(r, 1).abs().double() for r in range(P))
    assert ((reg.double() - want).abs() <= P * 2.0 ** -8 * mag).all()
    assert torch.equal(reg, reg.bfloat16().float()), "a result is not a bfloat16 value"
    assert refused is not None and "wire.refused" in str(refused), refused


@check
def compression_per_call():
    exact = torch.tensor(1.0001).item() * P
    for name in ("wire.g", "wire.h"):
        got16, got32 = per_call[name, hvd.Compression.fp16], per_call[name, hvd.Compression.none]
        assert got16 == float(P), (name, "fp16", got16)
        assert abs(got32 - exact) < 1e-5, (name, "none", got32)
    # one buffer per name, registered anew with the wire of the call (the last call of
    # "wire.g" had none, of "wire.h" fp16), as a float16 tensor's is
    assert st["wire.g"]["wire"] == "native" and st["wire.h"]["wire"] == "fp16", st
    assert not any(n.endswith("@fp16") for n in st), sorted(st)


@check
def compress_casts_as_horovod():
    x = torch.full((4,), 1.0001)
    for comp, dt in ((hvd.Compression.fp16, torch.float16),
                     (hvd.Compression.bf16, torch.bfloat16)):
        c, ctx = comp.compress(x)
        assert c.dtype == dt, (comp, c.dtype)
        back = comp.decompress(c, ctx)
        assert back.dtype == torch.float32 and torch.equal(back, x.to(dt).float()), back
    i = torch.arange(3)
    assert hvd.Compression.fp16.compress(i)[0] is i  # integers are left as they are


@check
def identical_on_every_rank():
    assert all(e == every[0] for e in every), every


@check
def wire_bytes_halved():
    # a compression's 16-bit wire is its name's buffer's, as a float16 tensor's own wire
    # is (so that a float32 tensor of that name on another rank is a dtype mismatch)
    for name, wire in (("wire.fp16", "fp16"), ("wire.bf16", "bf16"),
                       ("wire.half", "fp16"), ("wire.native", "native"),
                       ("wire.reg", "bf16")):
        assert st[name]["wire"] == wire, (name, st[name]["wire"])
    base = st["wire.native"]["bytes_sent"]
    for name in ("wire.fp16", "wire.bf16", "wire.half"):
        ratio = st[name]["bytes_sent"] / base
        print("wire %s: bytes_sent %d vs native %d (%.3f)" %
              (name, st[name]["bytes_sent"], base, ratio), flush=True)
        assert 0.49 < ratio < 0.51, (name, ratio)


@check
def wire_tail_names_are_own_tensors():
    # a name that ends as a 16-bit wire's buffer does ("w@fp16") is a tensor of its own:
    # reduced after "w" on the fp16 wire it kept that buffer's wire (its sums rounded to
    # float16), and "w" on the bf16 wire after "w@bf16" on the native one was refused
    x = torch.full((8,), 1.0 / 3.0 + R)
    exact = sum(torch.full((8,), 1.0 / 3.0 + r).double() for r in range(P)).float()
    for tail, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        half = sc.allreduce(x, name="wire.tail." + tail, op="sum", wire=tail)
        full = sc.allreduce(x, name="wire.tail.%s@%s" % (tail, tail), op="sum")
        assert torch.equal(half, half.to(dt).float()) and not torch.equal(half, exact), half
        assert torch.allclose(full, exact, rtol=1e-6, atol=0), (tail, full[0].item())
        # and "v@fp16@", registered with the fp16 wire, is not "v@fp16" either
        sc.register("wire.reg.%s@%s@" % (tail, tail), 8, wire=tail)
        half = sc.allreduce(x, name="wire.reg.%s@%s@" % (tail, tail), op="sum")
        full = sc.allreduce(x, name="wire.reg.%s@%s" % (tail, tail), op="sum")
        assert torch.equal(half, half.to(dt).float()), (tail, half[0].item())
        assert torch.allclose(full, exact, rtol=1e-6, atol=0), (tail, full[0].item())


hvd.shutdown()
sys.exit(1 if check.failed else 0)
