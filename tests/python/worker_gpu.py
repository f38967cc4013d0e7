#!/usr/bin/python3
"""Run under sparsecomm-run: torch CUDA tensors through sparsecomm end to end, every trainer
on GPU local_rank modulo the GPU count.  Prints `CHECK <name> ok` or `CHECK <name> FAIL
<why>` per check; without a CUDA device in torch, or daemons that do not serve GPU tensors,
prints `SKIP gpu: <why>` once and runs nothing (`CHECK gpu FAIL <why>` and exit status 1
with SPARSECOMM_REQUIRE_GPU=1).  argv: the checks to run (default every one but
large_tensors, which runs only when named).

The CPU reference of each check is the same computation on CPU tensors through the same
daemons: dense sums are exact (small integers), sparse embedding gradients, a lossless
DistributedOptimizer run and a top-k tensor's steps (selected at submission on the GPU)
must match it to float tolerance (the last selection for selection), and the GPU memory
free after shutdown must come back to what it was before the first cuda tensor."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as sct  # noqa: E402
from checks import Checks  # noqa: E402
from forms import check_forms  # noqa: E402

torch.set_num_threads(1)
sc.init(timeout=120)
R, P = sc.rank(), sc.size()


def skip(why):
    if os.environ.get("SPARSECOMM_REQUIRE_GPU") == "1":
        print("CHECK gpu FAIL SPARSECOMM_REQUIRE_GPU=1 but torch CUDA tensors cannot go "
              "through the daemons: %s" % why, flush=True)
        sc.shutdown()
        sys.exit(1)
    print("SKIP gpu: torch CUDA tensors through the daemons (%s)" % why, flush=True)
    sc.shutdown()
    sys.exit(0)


if not torch.cuda.is_available():
    skip("torch has no CUDA device: torch %s, torch.cuda.is_available() is False" %
         torch.__version__)
DEV = torch.device("cuda", sc.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(DEV)
try:
    sc.register("probe", 1, device=DEV)
except sc.SparsecommError as e:
    skip("the daemons do not serve GPU tensors here: %s" % e)


def warm_up():
    """The kernels the checks use, loaded (lazily, by CUDA) before the memory is measured."""
    lin = torch.nn.Linear(8, 3).to(DEV)
    lin(torch.ones(4, 8, device=DEV)).sum().backward()
    sp = torch.sparse_coo_tensor(torch.tensor([[1, 0, 1]]), torch.ones(3, 2), (4, 2))
    sp = sp.to(DEV).coalesce()
    v = torch.zeros(8, device=DEV)
    v[sp._indices()[0].cumsum(0)] = torch.unique_consecutive(sp._indices()[0]).float()
    torch.cuda.synchronize()
    del lin, sp, v
    torch.cuda.empty_cache()


# every trainer's context, and every daemon's, exists before the memory is measured
warm_up()
sc.allreduce(torch.zeros(1), name="barrier.start")
FREE_BEFORE = torch.cuda.mem_get_info(DEV)[0]
SLACK = 512 << 20  # contexts growing as kernels load; a leaked 1 GiB probe is twice that
check = Checks(sys.argv[1:])


def close(a, b, tol=1e-6):
    a = torch.as_tensor(a.cpu() if torch.is_tensor(a) else a, dtype=torch.float64)
    b = torch.as_tensor(b.cpu() if torch.is_tensor(b) else b, dtype=torch.float64)
    assert a.shape == b.shape, "shape %s vs %s" % (tuple(a.shape), tuple(b.shape))
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol, "max error %g > %g" % (err, tol)


def on_gpu(t):
    assert t.device == DEV, "result on %s, not %s" % (t.device, DEV)
    return t


@check
def dense_exact_sums():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # queued on a side stream: results come back on it
        for dt in (torch.float32, torch.float64, torch.int32, torch.int64):
            x = torch.full((3000, 7), R + 1, dtype=dt, device=DEV)
            got = on_gpu(sc.allreduce(x, name="sum.%s" % dt, average=False))
            assert got.dtype == dt and torch.equal(got, torch.full_like(x, P * (P + 1) // 2)), \
                "%s: %s" % (dt, got[0, :3])
        avg = on_gpu(sc.allreduce(torch.full((1000,), float(R), device=DEV), name="avg"))
        u = torch.arange(12.0, device=DEV).view(3, 4).t() * (R + 1)  # non-contiguous
        sc.allreduce_(u, name="inplace", average=False)
    s.synchronize()
    close(avg, torch.full((1000,), (P - 1) / 2))
    close(u, torch.arange(12.0).view(3, 4).t() * P * (P + 1) / 2, 0)
    assert sc.registered()["avg"]["device"] == str(DEV), sc.registered()["avg"]


@check
def alltoall_received_splits_on_the_device_of_the_splits():
    # Horovod's test_horovod_alltoall_splits_on_gpu: splits given on the GPU give the
    # received splits on the GPU (host splits: on the host)
    x = torch.full((P * (R + 1), 2), float(R), device=DEV)
    for splits in (torch.full((P,), R + 1, dtype=torch.int32, device=DEV),
                   torch.full((P,), R + 1, dtype=torch.int32)):
        out, recv = sct.alltoall(x, splits, name="a2a.splits.%s" % splits.device.type)
        assert recv.device == splits.device and recv.dtype == torch.int32, (
            recv.device, recv.dtype)
        assert recv.tolist() == [r + 1 for r in range(P)], recv
        want = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(P)])
        assert torch.equal(on_gpu(out).cpu(), want), out


def emb_grad(rank, vocab=50, dim=4):
    """A rank's uncoalesced sparse embedding gradient (on the CPU)."""
    g = torch.Generator().manual_seed(100 + rank)
    words = torch.randint(0, vocab, (12,), generator=g)
    emb = torch.nn.Embedding(vocab, dim, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(vocab, dim, generator=torch.Generator().manual_seed(7)))
    (emb(words) * torch.randn(12, dim, generator=g)).sum().backward()
    return emb.weight.grad


@check
def sparse_embedding():
    g = emb_grad(R)
    ref = sc.allreduce(g, name="emb.cpu")  # the CPU path's answer
    res = on_gpu(sc.allreduce(g.to(DEV), name="emb.gpu"))
    assert res.is_sparse and res.is_coalesced(), "not a coalesced sparse tensor"
    close(res.to_dense(), ref.to_dense(), 1e-6)
    want = sum(emb_grad(r).to_dense() for r in range(P)) / P
    rows = want.ne(0).any(1).nonzero().squeeze(1)
    assert torch.equal(res._indices()[0].cpu(), rows), "rows are not the union"
    dense = on_gpu(sc.allreduce(g.to(DEV), name="emb.gpu.dense", sparse_as_dense=True))
    assert not dense.is_sparse
    close(dense, want, 1e-5)


@check
def sparse_result_forms():
    check_forms(close, DEV)


def train(device, prefix, steps=8):
    """Losses of a lossless DistributedOptimizer run of a sparse embedding and a dense
    head on device; every rank starts from rank 0's parameters (broadcast_parameters)."""
    torch.manual_seed(1 + R)  # different on purpose: broadcast_parameters fixes it
    m = torch.nn.Sequential(torch.nn.Embedding(40, 8, sparse=True), torch.nn.Linear(8, 3))
    m = m.to(device)
    sct.broadcast_parameters(m.state_dict(), root_rank=0, prefix=prefix + "bcast.")
    opt = sct.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5),
                                   named_parameters=m.named_parameters(),
                                   sparsifier="none", prefix=prefix)
    g = torch.Generator().manual_seed(10 + R)
    losses = []
    for _ in range(steps):
        words = torch.randint(0, 40, (16,), generator=g).to(device)
        opt.zero_grad()
        loss = m(words).pow(2).mean()
        loss.backward()
        opt.step()
        for p in m.parameters():
            assert p.device == device and p.grad.device == device, (p.device, p.grad.device)
        losses.append(loss.item())
    opt.remove_hooks()
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in m.parameters()])
    return losses, flat


@check
def optimizer_matches_cpu():
    cpu_losses, cpu_flat = train(torch.device("cpu"), "cpu.")
    gpu_losses, gpu_flat = train(DEV, "gpu.")
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(gpu_losses, cpu_losses))
    assert worst <= 1e-4, "losses differ by %.2e: gpu %s cpu %s" % (worst, gpu_losses,
                                                                   cpu_losses)
    close(gpu_flat, cpu_flat, 1e-4)
    close(sc.allreduce(gpu_flat, name="opt.same"), gpu_flat, 1e-6)  # every rank the same


def topk_steps(device, prefix, steps=4, n=20000):
    """A top-k tensor's averages over steps on device, its residual carried between them;
    each rank's values continuous random numbers (no ties in a selection)."""
    g = torch.Generator().manual_seed(50 + R)
    out = []
    for _ in range(steps):
        x = (torch.rand(n, generator=g, dtype=torch.float64) - 0.5).float().to(device)
        r = sc.allreduce(x, name=prefix + "topk", sparsifier="topk", density=0.01)
        assert r.device == x.device, "result on %s, not %s" % (r.device, x.device)
        out.append(r.cpu())
    return out


@check
def topk_selected_at_submission():
    """A top-k cuda tensor, summed and selected on the engine GPU at its submission
    (sparsify_on_submit, on by default: the trainers' ready events, the device's sum and
    selection, the residual's copy taken by its buffer), its first step speculative and the
    next ones under its cache id: every step equals the CPU path's, selection for
    selection."""
    cpu = topk_steps(torch.device("cpu"), "topk.cpu.")
    gpu = topk_steps(DEV, "topk.gpu.")
    for s, (a, b) in enumerate(zip(gpu, cpu)):
        nz = int(b.ne(0).sum())
        assert 0 < nz <= P * 200, "step %d: %d non-zeros" % (s, nz)
        assert torch.equal(a.ne(0), b.ne(0)), "step %d: the selections differ" % s
        close(a, b, 1e-6)


@check
def ddp_hook_cuda():
    from torch.nn.parallel import DistributedDataParallel as DDP
    sct.init_process_group("gloo")
    torch.manual_seed(3)
    m = DDP(torch.nn.Linear(6, 2).to(DEV), device_ids=[DEV])
    m.register_comm_hook(sct.DDPHookState(sparsifier="none", prefix="ddp.gpu"), sct.ddp_hook)
    x = torch.full((4, 6), float(R + 1), device=DEV)
    m(x).sum().backward()
    grads = [p.grad for p in m.parameters()]
    for gr in grads:
        on_gpu(gr)
    # the gradient of sum(W x + b) over 4 rows of (R + 1): W's is 4 (R + 1), b's is 4;
    # averaged over the ranks
    close(grads[0], torch.full((2, 6), 4 * (P + 1) / 2), 1e-5)
    close(grads[1], torch.full((2,), 4.0), 1e-5)
    torch.distributed.destroy_process_group()


def large_tensors():
    """Tensors of 2^30 and 2^31 + 2^20 float32 elements (4 and 8 GiB): every element's sum
    exact, including past element 2^31, where a 32-bit index would wrap. The values repeat
    with a period (65521, prime) that does not divide 2^31, so a wrapped index shows."""
    for n in (1 << 30, (1 << 31) + (1 << 20)):
        pattern = torch.empty(n, device=DEV)
        for i in range(0, n, 1 << 28):  # in pieces: a whole int64 arange is 16 GiB
            j = min(n, i + (1 << 28))
            pattern[i:j] = torch.arange(i, j, device=DEV, dtype=torch.int64) % 65521
        x = pattern + (R + 1)
        got = on_gpu(sc.allreduce(x, name="large.%d" % n, average=False))
        del x
        want = pattern.mul_(P).add_(P * (P + 1) // 2)
        assert got.numel() == n, "%d elements back, not %d" % (got.numel(), n)
        bad = (got != want).nonzero()
        assert bad.numel() == 0, "%d of %d elements wrong, first at %d: %g, want %g" % (
            bad.numel(), n, bad[0].item(), got[bad[0]].item(), want[bad[0]].item())
        del got, want, pattern, bad
        torch.cuda.empty_cache()


if "large_tensors" in sys.argv[1:]:
    check(large_tensors)


def leak_probe():
    """A cuda tensor big enough that its daemon buffer, left behind, shows in mem_get_info."""
    sc.register("leak.probe", 256 << 20, device=DEV)  # 1 GiB of float32
    held = torch.cuda.mem_get_info(DEV)[0]
    assert held < FREE_BEFORE - SLACK, "registering 1 GiB took %d MiB" % (
        (FREE_BEFORE - held) >> 20)


check(leak_probe)
torch.cuda.synchronize()
torch.cuda.empty_cache()
sc.allreduce(torch.zeros(1), name="barrier.end")  # every rank's work is done
sc.shutdown()
deadline = time.monotonic() + 30
while True:  # the daemons release the trainers' registrations as they go
    free = torch.cuda.mem_get_info(DEV)[0]
    if free >= FREE_BEFORE - SLACK or time.monotonic() > deadline:
        break
    time.sleep(0.2)
if free >= FREE_BEFORE - SLACK:
    print("CHECK no_gpu_memory_left ok", flush=True)
else:
    check.failed += 1
    print("CHECK no_gpu_memory_left FAIL %d MiB of GPU memory free before the first cuda "
          "tensor, %d MiB 30 s after shutdown" % (FREE_BEFORE >> 20, free >> 20), flush=True)
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
