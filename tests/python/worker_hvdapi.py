#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: Horovod's calling contract through
``import sparsecomm.torch as hvd``: signatures in Horovod's positional order (read from
horovod/torch/mpi_ops.py, functions.py and optimizer.py), join(device), the node queries,
broadcast_parameters of bare tensors, DistributedOptimizer's keywords and
attributes, callable handles, unnamed collectives in flight together, and gradients
through the collectives (Horovod's backward rules).  Prints `CHECK <name> ok` or
`CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import inspect
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks, raises  # noqa: E402

torch.set_num_threads(1)
check = Checks(sys.argv[1:])


@check
def value_error_before_init():
    # Horovod raises ValueError before hvd.init(); so does sparsecomm (also its own error)
    for fn in (hvd.rank, hvd.size, hvd.local_rank, hvd.cross_rank, hvd.is_homogeneous):
        e = raises(ValueError, fn)
        assert isinstance(e, hvd.SparsecommError) and "init()" in str(e), e
    raises(ValueError, hvd.allreduce, torch.ones(2))


hvd.init(process_sets="dynamic")
R, P = hvd.rank(), hvd.size()
# every trainer but the last is in this set: the last is outside it
ALL_BUT_LAST = hvd.add_process_set(list(range(P - 1)))


def positional(fn):
    """fn's parameters that can be given by position, in order."""
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


# Horovod's positional order (horovod/torch/mpi_ops.py, functions.py, optimizer.py)
HOROVOD = {
    "allreduce": "tensor average name compression op prescale_factor postscale_factor "
                 "process_set",
    "allreduce_async": "tensor average name op prescale_factor postscale_factor process_set",
    "allreduce_": "tensor average name op prescale_factor postscale_factor process_set",
    "allreduce_async_": "tensor average name op prescale_factor postscale_factor process_set",
    "grouped_allreduce": "tensors average name compression op prescale_factor "
                         "postscale_factor process_set",
    "grouped_allreduce_async": "tensors average name op prescale_factor postscale_factor "
                               "process_set",
    "grouped_allreduce_": "tensors average name op prescale_factor postscale_factor "
                          "process_set",
    "grouped_allreduce_async_": "tensors average name op prescale_factor postscale_factor "
                                "process_set",
    "sparse_allreduce_async": "tensor name op process_set",
    "allgather": "tensor name process_set",
    "allgather_async": "tensor name process_set",
    "broadcast": "tensor root_rank name process_set",
    "broadcast_async": "tensor root_rank name process_set",
    "broadcast_": "tensor root_rank name process_set",
    "broadcast_async_": "tensor root_rank name process_set",
    "reducescatter": "tensor name compression op process_set prescale_factor "
                     "postscale_factor",
    "reducescatter_async": "tensor name op process_set prescale_factor postscale_factor",
    "grouped_reducescatter": "tensors name compression op process_set prescale_factor "
                             "postscale_factor",
    "grouped_reducescatter_async": "tensors name op process_set prescale_factor "
                                   "postscale_factor",
    "grouped_allgather": "tensors name process_set",
    "grouped_allgather_async": "tensors name process_set",
    "alltoall": "tensor splits name process_set",
    "alltoall_async": "tensor splits name process_set",
    "broadcast_object": "obj root_rank name process_set",
    "allgather_object": "obj name process_set",
    "barrier": "process_set",
    "join": "device",
    "broadcast_parameters": "params root_rank process_set",
    "broadcast_optimizer_state": "optimizer root_rank process_set",
    "DistributedOptimizer": "optimizer named_parameters compression "
                            "backward_passes_per_step op gradient_predivide_factor "
                            "num_groups groups sparse_as_dense process_set",
}


@check
def signatures_in_horovods_order():
    bad = {n: positional(getattr(hvd, n)) for n, want in HOROVOD.items()
           if positional(getattr(hvd, n)) != want.split()}
    assert not bad, bad


@check
def reducescatter_arguments_by_position():
    # Horovod's positional order: the async forms' third argument is the op (no
    # compression there), and the process set comes before the scale factors
    x = torch.ones(P, 2) * (R + 1)
    total = float(sum(r + 1 for r in range(P)))
    got = hvd.synchronize(hvd.reducescatter_async(x, "rs.pos.async", hvd.Sum))
    assert got.tolist() == [[total] * 2], got
    got = hvd.reducescatter(x, "rs.pos", hvd.Compression.none, hvd.Sum,
                            hvd.global_process_set, 2.0, 0.5)
    assert got.tolist() == [[total] * 2], got
    got = hvd.synchronize(hvd.grouped_reducescatter_async([x], "rs.pos.g", hvd.Sum,
                                                          hvd.global_process_set, 3.0))
    assert got[0].tolist() == [[3 * total] * 2], got
    got = hvd.grouped_reducescatter([x], "rs.pos.gs", hvd.Compression.none, hvd.Average,
                                    hvd.global_process_set)
    assert got[0].tolist() == [[total / P] * 2], got


@check
def barrier_and_join_as_horovod_calls_them():
    hvd.barrier(hvd.global_process_set)  # Horovod's positional process set
    # a wrong argument is refused before anything starts: the next barrier is not held
    raises(TypeError, hvd.barrier, "ps")
    raises(hvd.ProcessSetError, hvd.barrier, 5)  # no set 5 (a ValueError too)
    raises(TypeError, hvd.barrier, None, timeout="soon")
    hvd.barrier(timeout=30)
    # Lightning's hvd.join(self.local_rank): the device, not a timeout of 0 s
    last = hvd.join(hvd.local_rank())
    assert 0 <= last < P, last
    assert hvd.join(device=-1) in range(P)
    import numpy as np
    assert hvd.join(np.int64(0)) in range(P)  # int-like, as Horovod takes it


@check
def node_queries():
    assert hvd.cross_size() * hvd.local_size() == P, (hvd.cross_size(), hvd.local_size())
    assert hvd.cross_rank() == R // hvd.local_size(), hvd.cross_rank()
    assert hvd.is_homogeneous() is True
    nodes = hvd.allgather_object((hvd.cross_rank(), hvd.local_rank()))
    assert sorted(nodes) == sorted(set(nodes)), nodes  # (node, local rank) unique


@check
def broadcast_parameters_of_bare_tensors():
    ts = [torch.full((3,), float(R)), torch.full((2, 2), float(R) + 0.5)]
    hvd.broadcast_parameters(ts, root_rank=P - 1)
    assert ts[0].tolist() == [float(P - 1)] * 3 and ts[1].sum().item() == 4 * (P - 0.5), ts
    m = torch.nn.Linear(3, 2)
    with torch.no_grad():
        m.weight.fill_(R)
        m.bias.fill_(R)
    hvd.broadcast_parameters(list(m.parameters()), 0)  # Horovod's model.parameters()
    assert m.weight.abs().sum().item() == 0 and m.bias.abs().sum().item() == 0
    pairs = [(None, torch.full((4,), float(R))), ("named", torch.full((1,), float(R)))]
    hvd.broadcast_parameters(pairs, root_rank=1)
    assert pairs[0][1].tolist() == [1.0] * 4 and pairs[1][1].tolist() == [1.0], pairs
    # what is neither a state_dict nor an iterable of tensors or pairs (the model itself,
    # a number): Horovod's ValueError "invalid params of type", on every rank
    for bad in (m, 5, None):
        err = raises(ValueError, hvd.broadcast_parameters, bad, 0)
        assert "invalid params of type" in str(err), err


_made = [0]


def grads_of(opt_kw, steps=1, values=None):
    """A Linear(4, 1) trained `steps` steps by SGD(lr=0) under DistributedOptimizer(**opt_kw)
    with rank-dependent data: its weight's gradient after the reduction."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1, bias=False)
    _made[0] += 1  # a name of its own, the same on every rank
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0),
                                   named_parameters=[("w.%d" % _made[0], m.weight)],
                                   **opt_kw)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.full((1, 4), float(R + 1) if values is None else values)
        m(x).sum().backward()
        opt.step()
    return m.weight.grad.clone(), opt


@check
def optimizer_horovods_keywords():
    mean = sum(r + 1 for r in range(P)) / P
    g, opt = grads_of(dict(gradient_predivide_factor=4.0))
    assert torch.allclose(g, torch.full((1, 4), mean)), g  # 1/f before, f after: the mean
    assert opt.gradient_predivide_factor == 4.0 and opt.op == hvd.Average
    e = raises(ValueError, hvd.DistributedOptimizer, torch.optim.SGD([torch.ones(1)], lr=1),
               op=hvd.Sum, gradient_predivide_factor=2.0)
    assert "gradient_predivide_factor" in str(e), e
    w = torch.nn.Parameter(torch.ones(2))
    for bad in (-1, [[w, w]], [[1.0]]):
        raises(ValueError, hvd.DistributedOptimizer, torch.optim.SGD([w], lr=1), groups=bad)
    g, _ = grads_of(dict(groups=2))
    assert torch.allclose(g, torch.full((1, 4), mean)), g
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g, _ = grads_of(dict(num_groups=1, op=hvd.Sum))
    assert torch.allclose(g, torch.full((1, 4), mean * P)), g
    # a sparse gradient that comes back dense (sparse_as_dense) is not multiplied by f
    # without having been divided by it; nor is a top-k sparsified one (its residual and
    # selection are in the gradient's own scale)
    _made[0] += 1
    emb = torch.nn.Embedding(6, 2, sparse=True)
    torch.nn.init.zeros_(emb.weight)
    eo = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.0),
                                  named_parameters=[("emb.%d" % _made[0], emb.weight)],
                                  gradient_predivide_factor=4.0, sparse_as_dense=True)
    eo.zero_grad()
    emb(torch.tensor([R])).sum().backward()  # row R: ones, on rank R only
    eo.step()
    want = torch.zeros(6, 2)
    want[:P] = 1.0 / P
    assert torch.allclose(emb.weight.grad.to_dense(), want), emb.weight.grad
    g, _ = grads_of(dict(gradient_predivide_factor=4.0, sparsifier="topk", density=1.0))
    assert torch.allclose(g, torch.full((1, 4), mean)), g
    raises(ValueError, hvd.DistributedOptimizer, torch.optim.SGD([w], lr=1), op=hvd.Sum,
           average=True)
    # Horovod's third positional argument is compression
    g, opt = grads_of(dict())
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.0)
    o = hvd.DistributedOptimizer(sgd, None, hvd.Compression.fp16, 1, hvd.Average)
    assert o._compression is hvd.Compression.fp16, o._compression


@check
def optimizer_attributes_and_passes():
    g, opt = grads_of(dict(backward_passes_per_step=1, sparse_as_dense=True))
    # Horovod's process_set attribute is the set itself, the global one by default
    assert (opt.backward_passes_per_step, opt.sparse_as_dense, opt.process_set) == \
        (1, True, hvd.global_process_set), vars(opt)
    assert opt.process_set.size() == P and opt.process_set.included(), opt.process_set
    # set_backward_passes_per_step(2): two backward passes accumulate before the step
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    m = [p for grp in opt.param_groups for p in grp["params"]][0]
    opt.zero_grad()
    for _ in range(2):
        (torch.full((1, 4), float(R + 1)) @ m.t()).sum().backward()
    opt.step()
    want = 2 * sum(r + 1 for r in range(P)) / P
    assert torch.allclose(m.grad, torch.full((1, 4), want)), m.grad
    # load_state_dict starts the counts again
    opt.zero_grad()
    (torch.ones(1, 4) @ m.t()).sum().backward()  # one of two passes, then a reload
    opt.load_state_dict(opt.state_dict())
    opt.zero_grad()
    for _ in range(2):
        (torch.ones(1, 4) @ m.t()).sum().backward()
    opt.step()
    assert torch.allclose(m.grad, torch.full((1, 4), 2.0)), m.grad


@check
def optimizer_freeze_one_unfreeze_another():
    # a parameter frozen and another unfrozen in the same step: the lists are compared by
    # identity (== between the tensors raised)
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(3))
    a.requires_grad_(False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a, b], lr=0.0),
                                   named_parameters=[("fz.a", a), ("fz.b", b)])
    (b * (R + 1)).sum().backward()
    opt.step()
    assert torch.allclose(b.grad, torch.full((3,), sum(r + 1 for r in range(P)) / P))
    a.requires_grad_(True)
    b.requires_grad_(False)
    opt.zero_grad()
    (a * (R + 1)).sum().backward()
    opt.step()
    assert torch.allclose(a.grad, torch.full((3,), sum(r + 1 for r in range(P)) / P))


@check
def optimizer_outside_its_process_set():
    # the last rank is outside the set: no hooks there, and synchronize() does nothing
    ps = ALL_BUT_LAST
    w = torch.nn.Parameter(torch.ones(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.0), named_parameters=[("ps.w", w)],
                                   process_set=ps)
    (w * (R + 1)).sum().backward()
    opt.step()
    if R < P - 1:
        mean = sum(r + 1 for r in range(P - 1)) / (P - 1)
        assert torch.allclose(w.grad, torch.full((2,), mean)), w.grad
    else:  # its own gradient, untouched
        assert ps.included() is False and w.grad.tolist() == [float(P)] * 2, w.grad


@check
def handles_are_callable_and_alltoall_synchronizes_to_a_pair():
    sp = torch.sparse_coo_tensor([[R % 4]], [[1.0, 2.0]], (4, 2))
    h = hvd.sparse_allreduce_async(sp, "sp.call", hvd.Sum)
    got = h().to_dense()  # Horovod's sparse handle is called
    want = torch.zeros(4, 2)
    for r in range(P):
        want[r % 4] += torch.tensor([1.0, 2.0])
    assert torch.equal(got, want), got
    assert hvd.allreduce_async(torch.ones(2), name="call.dense")().tolist() == [1.0, 1.0]
    out, rsp = hvd.synchronize(hvd.alltoall_async(torch.full((P, 1), float(R))))
    assert out.view(-1).tolist() == [float(r) for r in range(P)] and rsp.tolist() == [1] * P


@check
def unnamed_collectives_in_flight_together():
    # two unnamed allgathers, alltoalls and reduce-scatters outstanding at once: each gets
    # a buffer of its own (the names "allgather", ... collided before)
    ags = [hvd.allgather_async(torch.full((R + 1, 2), float(10 * k + R))) for k in range(2)]
    a2as = [hvd.alltoall_async(torch.full((P, 3), float(10 * k + R))) for k in range(2)]
    rss = [hvd.reducescatter_async(torch.full((P, 2), float(k + 1)), op=hvd.Sum)
           for k in range(2)]
    for k, h in enumerate(ags):
        want = torch.cat([torch.full((r + 1, 2), float(10 * k + r)) for r in range(P)])
        assert torch.equal(hvd.synchronize(h), want), (k, h)
    for k, h in enumerate(a2as):
        out, _ = hvd.synchronize(h)
        want = torch.tensor([[float(10 * k + r)] * 3 for r in range(P)])
        assert torch.equal(out, want), (k, out)
    for k, h in enumerate(rss):
        assert torch.equal(hvd.synchronize(h), torch.full((1, 2), float((k + 1) * P)))
    # and unnamed groups of them
    gs = [hvd.grouped_allgather_async([torch.full((1, 2), float(10 * k + R))] * 2)
          for k in range(2)]
    rgs = [hvd.grouped_reducescatter_async([torch.full((P, 1), float(k + 1))], op=hvd.Sum)
           for k in range(2)]
    for k, h in enumerate(gs):
        want = torch.cat([torch.full((1, 2), float(10 * k + r)) for r in range(P)])
        assert all(torch.equal(g, want) for g in hvd.synchronize(h)), (k, h)
    for k, h in enumerate(rgs):
        assert torch.equal(hvd.synchronize(h)[0], torch.full((1, 1), float((k + 1) * P)))


@check
def synchronize_and_poll_of_cleared_handles_and_others():
    # Horovod's: synchronize() clears the handle, so a second one returns None, as does
    # synchronize() of something that is not a handle; poll() of either raises ValueError
    h = hvd.allreduce_async(torch.ones(2), name="sync.twice", op=hvd.Sum)
    assert hvd.synchronize(h).tolist() == [float(P)] * 2
    assert hvd.synchronize(h) is None
    e = raises(ValueError, hvd.poll, h)
    assert "cleared" in str(e), e
    for other in (7, None, "h", torch.ones(1)):
        assert hvd.synchronize(other) is None, other
        raises(ValueError, hvd.poll, other)
    out, rsp = hvd.synchronize(hvd.alltoall_async(torch.ones(P, 1), name="sync.a2a"))
    assert out.tolist() == [[1.0]] * P and rsp.tolist() == [1] * P
    g = hvd.grouped_allreduce_async([torch.ones(1)], name="sync.grp", op=hvd.Sum)
    assert hvd.poll(g) in (True, False)
    assert [t.tolist() for t in hvd.synchronize(g)] == [[float(P)]]
    assert hvd.synchronize(g) is None


@check
def allgather_of_a_sparse_tensor_says_so():
    # allgather, alltoall and reducescatter take dense tensors: a sparse one is refused
    # with a TypeError naming it, before anything is exchanged (an obscure copy error)
    sp = torch.sparse_coo_tensor([[0]], [1.0], (4,))
    for fn in (hvd.allgather, hvd.allgather_async, hvd.alltoall, hvd.reducescatter):
        e = raises(TypeError, fn, sp, name="sparse.rows")
        assert "sparse" in str(e) and "sparse.rows" in str(e), e
    assert hvd.allgather(torch.ones(1), name="sparse.rows.after").tolist() == [1.0] * P


@check
def numpy_dtypes_without_an_exact_carrier_are_refused():
    # a long double, uint32 and uint64 (past the signed range), complex and object arrays:
    # a TypeError naming the dtype (a long double was reduced in float32), even empty;
    # the 16-bit and small types a carrier holds exactly keep working
    import numpy as np
    import sparsecomm as sc
    bad = [np.uint32, np.uint64, np.complex64, np.complex128, object]
    if np.dtype(np.longdouble).itemsize > 8:
        bad.append(np.longdouble)
    for dt in bad:
        for n in (3, 0):
            a = np.ones(n, dtype=dt)
            e = raises(TypeError, sc.allreduce, a, name="np.bad", average=False)
            assert np.dtype(dt).name in str(e), e
        for fn in (sc.allgather, sc.reducescatter, lambda a, name: sc.broadcast(a, 0, name)):
            e = raises(TypeError, fn, np.ones(P, dtype=dt), name="np.bad.c")
            assert np.dtype(dt).name in str(e), e
    for dt in (np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64,
               np.float32, np.float64):
        got = sc.allreduce(np.full(3, 2, dtype=dt), name="np.ok", average=False)
        assert got.dtype == dt and got.tolist() == [2 * P] * 3, (dt, got)


@check
def broadcasts_third_argument_is_the_process_set():
    t = torch.full((2,), float(R))
    hvd.broadcast_parameters([t], 0, hvd.global_process_set)
    assert torch.equal(t, torch.zeros(2)), t
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(opt, 0, hvd.global_process_set)
    hvd.broadcast_optimizer_state(opt, 0, torch.nn.Linear(1, 1))  # a model there: accepted
    # a name where the process set goes is refused on every rank before anything starts
    raises(TypeError, hvd.broadcast_parameters, [t], 0, "prefix.")
    raises(TypeError, hvd.broadcast_optimizer_state, opt, 0, "name")
    hvd.barrier()


class _DefaultState(torch.optim.SGD):
    """An optimizer whose state_dict holds a defaultdict (a factory that copying by
    type(obj)(items) loses)."""

    def state_dict(self):
        import collections
        sd = super().state_dict()
        sd["extra"] = collections.defaultdict(list, {"a": [torch.ones(1)]})
        return sd

    def load_state_dict(self, sd):
        assert sd["extra"]["a"][0].item() == 1.0 and sd["extra"]["b"] == [], sd
        super().load_state_dict({k: v for k, v in sd.items() if k != "extra"})


class _NoState(torch.optim.SGD):
    def state_dict(self):
        raise RuntimeError("state on a closed file")


@check
def optimizer_state_a_root_cannot_take_fails_every_rank():
    w = torch.nn.Parameter(torch.ones(2))
    hvd.broadcast_optimizer_state(_DefaultState([w], lr=0.1), 0)
    opt = (_NoState if R == 0 else torch.optim.SGD)([w], lr=0.1)
    e = raises(hvd.SparsecommError, hvd.broadcast_optimizer_state, opt, 0)
    assert "closed file" in str(e) and "rank 0" in str(e), e


@check
def optimizer_state_of_lbfgs_and_a_fresh_optimizer():
    # the whole state travels: LBFGS's nested state (which Horovod refuses) and a root
    # that has stepped against ranks that have not
    w = torch.nn.Parameter(torch.full((3,), float(R + 1)))
    opt = torch.optim.LBFGS([w], lr=0.5, max_iter=3)
    if R == 0:
        opt.step(lambda: (opt.zero_grad(), (w * w).sum().backward(),
                          (w * w).sum().detach())[2])
    hvd.broadcast_optimizer_state(opt, 0, name="bos.lbfgs")
    st = opt.state_dict()["state"][0]
    assert st["n_iter"] >= 1 and st["d"].shape == (3,) and st["d"].device == w.device, st
    assert hvd.allgather_object(float(st["d"].sum())) == [float(st["d"].sum())] * P


class Unpicklable:
    def __reduce__(self):
        raise TypeError("holds a socket")


@check
def object_pickling_failures_reach_every_rank():
    import pickle
    root = P - 1
    obj = Unpicklable() if R == root else None
    e = raises(pickle.PicklingError, hvd.broadcast_object, obj, root, "bo.bad")
    assert "rank %d" % root in str(e) and "holds a socket" in str(e), e
    assert hvd.broadcast_object({"ok": R}, root, "bo.bad") == {"ok": root}  # works again
    e = raises(pickle.PicklingError, hvd.allgather_object, Unpicklable() if R == 0 else R)
    assert "rank 0 " in str(e), e
    assert hvd.allgather_object(R) == list(range(P))


@check
def broadcast_registrations_released():
    import sparsecomm as sc
    from checks import daemon_tensors
    m = torch.nn.Linear(5, 3)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0, prefix="rel.")
    for size in (10, 1000, 100000):
        hvd.broadcast_object("x" * size, 0, "rel.obj")
    held = [n for n in sc.registered() if str(n).startswith("rel.")]
    assert held == ["rel.obj.len"], held  # the lengths' one buffer only
    assert daemon_tensors() == len(sc.registered()), (daemon_tensors(), sc.registered())


@check
def sync_batch_norm_keeps_the_input_dtype():
    # a 16-bit input, affine: the result in the input's dtype (it came back float32),
    # equal to the float32 computation up to the 16-bit rounding; gradients flow
    for dt in (torch.float16, torch.bfloat16):
        bn, ref = hvd.SyncBatchNorm(3), hvd.SyncBatchNorm(3)
        with torch.no_grad():
            for m in (bn, ref):
                m.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
                m.bias.copy_(torch.tensor([0.0, -1.0, 3.0]))
        g = torch.Generator().manual_seed(5 + R)
        x = (torch.randn(4 + R, 3, 5, generator=g) * (R + 1) + R).to(dt)
        out = bn(x.requires_grad_(True))
        want = ref(x.detach().float())
        assert out.dtype == dt, (dt, out.dtype)
        tol = 0.02 if dt == torch.float16 else 0.1
        assert torch.allclose(out.float(), want, atol=tol), (dt, (out.float() - want).abs().max())
        out.float().sum().backward()
        assert x.grad is not None and x.grad.dtype == dt, x.grad


def coef(r, shape):
    """Rank r's loss weights: distinct per rank and element."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(float(n)) + 100 * r).view(shape)


@check
def gradients_through_allreduce():
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / P)):
        x = torch.full((2, 3), float(R + 1), requires_grad=True)
        y = hvd.allreduce(x, op=op)
        assert torch.allclose(y, torch.full((2, 3), sum(r + 1 for r in range(P)) * scale))
        (y * coef(R, y.shape)).sum().backward()
        want = sum(coef(r, (2, 3)) for r in range(P)) * scale  # allreduce of the gradient
        assert torch.allclose(x.grad, want), (op, x.grad, want)
    # the loss allreduced, then backward: Horovod's hvd.allreduce(loss).backward()
    w = torch.tensor([float(R + 1)], requires_grad=True)
    loss = hvd.allreduce((w * w).sum(), name="loss")
    loss.backward()
    assert torch.allclose(w.grad, torch.tensor([2.0 * (R + 1)])), w.grad
    xs = [torch.full((2,), float(R), requires_grad=True) for _ in range(2)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    (ys[0].sum() + 2 * ys[1].sum()).backward()
    assert xs[0].grad.tolist() == [float(P)] * 2 and xs[1].grad.tolist() == [2.0 * P] * 2


@check
def gradients_through_allgather_broadcast_alltoall():
    x = torch.full((R + 1, 2), float(R), requires_grad=True)
    y = hvd.allgather(x)
    assert y.shape == (P * (P + 1) // 2, 2), y.shape
    (y * coef(R, y.shape)).sum().backward()
    at = sum(r + 1 for r in range(R))
    want = (sum(coef(r, y.shape) for r in range(P)) / P)[at:at + R + 1]
    assert torch.allclose(x.grad, want), (x.grad, want)
    root = P - 1
    x = torch.full((3,), float(R), requires_grad=True)
    y = hvd.broadcast(x, root)
    assert y.tolist() == [float(root)] * 3
    (y * coef(R, (3,))).sum().backward()
    want = sum(coef(r, (3,)) for r in range(P)) / P if R == root else torch.zeros(3)
    assert torch.allclose(x.grad, want), (x.grad, want)
    # alltoall: row q goes to rank q; rank q weighs the row from rank s by 10 q + s, so
    # the gradient of this rank's row q is 10 q + R
    x = torch.full((P, 1), float(R), requires_grad=True)
    y, rsp = hvd.alltoall(x, splits=[1] * P)
    assert rsp.tolist() == [1] * P and not rsp.requires_grad
    (y.view(-1) * torch.tensor([10.0 * R + s for s in range(P)])).sum().backward()
    assert x.grad.view(-1).tolist() == [10.0 * q + R for q in range(P)], x.grad
    # reducescatter: rank r gets rows 2r and 2r + 1 of the sum; the gradient of every
    # rank's input is Horovod's: each rank's weights times P, allgathered
    for op, k in ((hvd.Sum, P), (hvd.Average, 1)):
        x = torch.full((2 * P, 1), float(R + 1), requires_grad=True)
        y = hvd.reducescatter(x, op=op)
        assert y.shape == (2, 1), y.shape
        (y * coef(R, y.shape)).sum().backward()
        want = torch.cat([coef(r, (2, 1)) * k for r in range(P)])
        assert torch.allclose(x.grad, want), (op, x.grad, want)


hvd.shutdown()
print("worker done: %d check(s) failed" % check.failed, flush=True)
sys.exit(1 if check.failed else 0)
