#!/usr/bin/python3
"""Run under sparsecomm-run (4 trainers): checks of the Python binding against real
daemons.  Prints `CHECK <name> ok` or `CHECK <name> FAIL <why>` per check; exits 1 if any
failed.  tests/python/run_tests.py counts a check passed when every rank says ok."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sparsecomm as sc  # noqa: E402
import sparsecomm.torch as sct  # noqa: E402
from checks import Checks, raises  # noqa: E402
from forms import check_forms  # noqa: E402

torch.set_num_threads(1)
sc.init(timeout=60)
R, P = sc.rank(), sc.size()
# argv: the checks to run (default every one)
check = Checks(sys.argv[1:])


def close(a, b, tol=1e-6):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape, "shape %s vs %s" % (tuple(a.shape), tuple(b.shape))
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol, "max error %g > %g" % (err, tol)


@check
def world():
    assert P == int(os.environ["SPARSECOMM_SIZE"]), (P, os.environ["SPARSECOMM_SIZE"])
    assert R == int(os.environ["SPARSECOMM_RANK"])
    assert 0 <= sc.local_rank() < sc.local_size()


@check
def average_and_sum():
    t = torch.full((1000, 3), float(R + 1))
    close(sc.allreduce(t, name="avg"), torch.full((1000, 3), (P + 1) / 2))
    close(sc.allreduce(t, name="sum", average=False), torch.full((1000, 3), P * (P + 1) / 2))
    assert t[0, 0].item() == R + 1, "input modified"
    u = t.clone()
    sc.allreduce_(u, name="inplace")
    close(u, torch.full((1000, 3), (P + 1) / 2))
    nc = torch.arange(12.0).view(3, 4).t() * (R + 1)  # non-contiguous input
    close(sc.allreduce(nc, name="noncontig"), torch.arange(12.0).view(3, 4).t() * (P + 1) / 2)


@check
def numpy_and_dtypes():
    a = np.arange(7, dtype=np.float64) * (R + 1)
    close(sc.allreduce(a, name="np64", average=False), np.arange(7) * P * (P + 1) / 2)
    for dt in (torch.int32, torch.int64):
        i = torch.full((5,), R + 1, dtype=dt)
        r = sc.allreduce(i, name="int.%s" % dt, average=False)
        assert r.dtype == dt and r.tolist() == [P * (P + 1) // 2] * 5, r


@check
def async_handles():
    hs = [sc.allreduce_async(torch.full((100 * (k + 1),), float(R * k)), name="async.%d" % k)
          for k in range(6)]
    for k in reversed(range(6)):  # waited out of order
        close(hs[k].wait(), torch.full((100 * (k + 1),), k * (P - 1) / 2))
    # a timeout leaves the handle waitable: the other ranks submit late
    if R != 0:
        time.sleep(3.0)  # far past rank 0's 0.2 s wait, even on a busy host
    h = sc.allreduce_async(torch.ones(10) * R, name="late")
    if R == 0:
        try:
            h.wait(timeout=0.2)
            raise AssertionError("no timeout although the other ranks had not submitted")
        except sc.SparsecommError as e:
            assert e.status_name == "SC_ERR_TIMEOUT", e
    close(h.wait(timeout=30), torch.ones(10) * (P - 1) / 2)
    assert h.poll()


def emb_grad(rank, vocab=50, dim=4):
    g = torch.Generator().manual_seed(100 + rank)
    words = torch.randint(0, vocab, (12,), generator=g)  # repeats: an uncoalesced grad
    emb = torch.nn.Embedding(vocab, dim, sparse=True)
    torch.manual_seed(7)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(vocab, dim))
    (emb(words) * torch.randn(12, dim, generator=g)).sum().backward()
    return emb.weight.grad


@check
def sparse_embedding_coo():
    g = emb_grad(R)
    assert g.is_sparse and not g.is_coalesced()
    want = sum(emb_grad(r).to_dense() for r in range(P)) / P
    res = sc.allreduce(g, name="emb.coo")
    assert res.is_sparse and res.is_coalesced(), "result not a coalesced sparse tensor"
    close(res.to_dense(), want, 1e-5)
    rows = want.ne(0).any(1).nonzero().squeeze(1)
    assert torch.equal(res._indices()[0], rows), "rows are not the union of non-zero rows"
    dense = sc.allreduce(g, name="emb.coo.dense", sparse_as_dense=True)
    assert not dense.is_sparse
    close(dense, want, 1e-5)
    idx = np.array([R, R, 10 + R])
    out = sc.allreduce_coo(idx, np.ones(3, dtype=np.float32), 20, name="coo.np",
                           average=False)
    ref = np.zeros(20)
    for r in range(P):
        ref[r] += 2
        ref[10 + r] += 1
    close(out, ref)


@check
def coo_bad_indices():
    """Indices no uint32 holds (2**32 + 5, -1, 2.5) on rank 1 alone, then more entries
    than the COO area holds: never wrapped, truncated or dropped, but refused on every
    rank alike (promptly, not at the others' stall timeout); valid steps then exact."""
    n = 32
    ref = np.zeros(n)
    for r in range(P):
        ref[r] += 2
        ref[10 + r] += 1
    for bad, code in ((2 ** 32 + 5, sc._lib.SC_ERR_INVALID), (-1, sc._lib.SC_ERR_INVALID),
                      (2.5, sc._lib.SC_ERR_INVALID), (None, sc._lib.SC_ERR_LIMIT)):
        idx = np.array([R, R, 10 + R], dtype=np.float64 if bad == 2.5 else np.int64)
        val = np.ones(3, dtype=np.float32)
        if R == 1 and bad is not None:
            idx = np.array([R, bad, 10 + R])
        elif R == 1:  # four entries for a capacity of three
            idx, val = np.array([R, R, 10 + R, 11]), np.ones(4, dtype=np.float32)
        t0 = time.time()
        try:
            sc.allreduce_coo(idx, val, n, name="coo.bad", average=False, coo_capacity=3)
            raise AssertionError("rank 1's index %r: the step succeeded" % (bad,))
        except sc.SparsecommError as e:
            assert e.status == code, "index %r: %s, expected %d" % (bad, e, code)
            assert "rank 1" in str(e) and "coo.bad" in str(e), "index %r: %s" % (bad, e)
        assert time.time() - t0 < 20, "index %r: refused only after %.1f s" % (
            bad, time.time() - t0)
        out = sc.allreduce_coo(np.array([R, R, 10 + R]), np.ones(3, dtype=np.float32), n,
                               name="coo.bad", average=False, coo_capacity=3)
        close(out, ref)


@check
def sparse_result_forms():
    check_forms(close)
    v = torch.sparse_coo_tensor(torch.tensor([[R, 7]]), torch.tensor([1.0, 2.0]), (10,))
    res = sc.allreduce(v, name="forms.vector", average=True)
    wantv = torch.zeros(10)
    for r in range(P):
        wantv[r] += 1.0 / P
    wantv[7] += 2.0
    assert res.is_sparse
    close(res.to_dense(), wantv)


@check
def coo_torch_helpers():
    """The torch-only halves of the GPU COO path (flat uint32 indices written as int32, the
    sparse tensor rebuilt from a COO result), run here on CPU tensors."""
    # indices past 2**31: stored as the int32 of their uint32 bits
    shape, rows = (65536, 65535), torch.tensor([[3, 65535]])
    got = sc._flat_indices(rows, shape, 1, 65535)
    want = (rows[0].numpy()[:, None] * 65535 + np.arange(65535)).astype(np.uint32)
    assert got.dtype == torch.int32 and np.array_equal(got.numpy().view(np.uint32),
                                                       want.reshape(-1))
    res = sc._sparse_from_coo(got, torch.ones(got.numel()), shape, 1, torch.float32)
    assert res.is_coalesced() and torch.equal(res._indices(), rows), res._indices()
    assert res._values().shape == (2, 65535) and bool((res._values() == 1).all())
    # two sparse dims over [4, 5] with rows of 3; a partial row (its middle element
    # dropped, as schemes that drop zero sums return it) and a whole one
    flat = torch.tensor([3 * 7, 3 * 7 + 2, 3 * 18, 3 * 18 + 1, 3 * 18 + 2], dtype=torch.int32)
    val = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    res = sc._sparse_from_coo(flat, val, (4, 5, 3), 2, torch.float64)
    want = torch.zeros(60, dtype=torch.float64)
    want[flat.long()] = val.double()
    assert res.dtype == torch.float64 and res.sparse_dim() == 2 and res.is_coalesced()
    assert torch.equal(res._indices(), torch.tensor([[1, 3], [2, 3]])), res._indices()
    close(res.to_dense(), want.view(4, 5, 3), 0)
    empty = sc._sparse_from_coo(flat[:0], val[:0], (4, 5, 3), 2, torch.float32)
    assert empty._nnz() == 0 and empty.shape == (4, 5, 3)


@check
def optimizer_with_sparse_and_dense():
    torch.manual_seed(1 + R)  # different on purpose: broadcast_parameters fixes it
    m = torch.nn.Sequential(torch.nn.Embedding(30, 4, sparse=True), torch.nn.Linear(4, 2))
    sct.broadcast_parameters(m.state_dict(), root_rank=0)
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    close(sc.allreduce(flat, name="bcast.check"), flat)
    opt = sct.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5),
                                   named_parameters=m.named_parameters(), prefix="opt.")
    for step in range(3):
        opt.zero_grad()
        m(torch.tensor([R, R + 1, 7])).pow(2).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    close(sc.allreduce(flat, name="opt.check"), flat, 1e-6)


@check
def mismatch_raises_on_every_rank():
    n = 10 if R == 0 else 11
    try:
        sc.allreduce(torch.ones(n), name="mismatch", timeout=30)
        raise AssertionError("element counts differ across ranks but no error")
    except sc.SparsecommError as e:
        assert "mismatch" in e.message, e
        print("mismatch error: %s" % e, flush=True)


@check
def control_bytes_in_names_refused():
    # a NUL would cut the name the C library sees; a newline or an escape forge log lines
    for bad in ("cut\0here", "line\nforged", "esc\x1b[31mred"):
        try:
            sc.allreduce(torch.ones(4), name=bad, timeout=30)
            raise AssertionError("tensor name %r accepted" % bad)
        except sc.SparsecommError as e:
            assert e.status_name == "SC_ERR_INVALID", e
            assert "control character" in e.message, e


@check
def unnamed_buffer_names_reserved():
    # an unnamed allreduce's buffer name given explicitly is refused, whichever came
    # first: given after, it released that buffer, and the next unnamed allreduce of the
    # class wrote into the released one (a TypeError, no sum)
    first = sc.allreduce(torch.full((5,), float(R + 1)), average=False)
    assert torch.all(first == P * (P + 1) // 2), first
    names = [n for n in sc.registered() if isinstance(n, str) and ".noname." in n]
    assert names, sc.registered()
    for name in names:
        e = raises(sc.SparsecommError, sc.allreduce, torch.ones(3, dtype=torch.float64),
                   name=name, timeout=30)
        assert e.status_name == "SC_ERR_BUSY" and "reserved" in e.message, e
    again = sc.allreduce(torch.full((5,), float(R + 2)), average=False)
    assert torch.all(again == P * (P + 3) // 2), again


def own_batches():
    """This trainer's SubmitBatch messages served by its daemon (sparsectl status)."""
    import json
    import subprocess
    ctl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                       "bin", "sparsectl")
    out = subprocess.run([ctl, "--json", "status"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    for c in json.loads(out)["clients"]:
        if c["pid"] == os.getpid():
            return c["submit_batches"]
    raise AssertionError("sparsectl status lists no client of pid %d" % os.getpid())


@check
def optimizer_submit_batch():
    # the same training with the hooks' submissions batched (held until synchronize: a 10 s
    # window) as without: the same parameters to the bit, and the daemon got batches
    def train(batch_us, prefix):
        torch.manual_seed(5)
        m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
        opt = sct.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.3),
                                       named_parameters=m.named_parameters(), prefix=prefix,
                                       sparsifier="topk", density=0.5,
                                       submit_batch_us=batch_us)
        x = torch.arange(24.0).reshape(4, 6) * (R + 1) / 24
        for step in range(4):
            opt.zero_grad()
            m(x + step).pow(2).sum().backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    before = own_batches()
    alone = train(0, "sb0.")
    if own_batches() != before:
        raise AssertionError("submit_batch_us=0 sent batches")
    batched = train(10 * 1000 * 1000, "sb1.")
    got = own_batches() - before
    # every step's 4 gradients go as one batch: 3 steps after the first's registrations
    if got < 3:
        raise AssertionError("submit_batch_us=10 s: %d batches served, expected >= 3" % got)
    close(batched, alone, 1e-5)
    raises(ValueError, lambda: sct.DistributedOptimizer(
        torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), submit_batch_us=-1))


@check
def topk_sparsifier():
    t = torch.arange(1000.0) * (R + 1)
    r = sc.allreduce(t, name="topk", sparsifier="topk", density=0.01)
    assert torch.isfinite(r).all()
    # the largest elements of every rank agree: they are sent first
    assert r[-1].item() > 0, r[-10:]


sc.shutdown()
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
