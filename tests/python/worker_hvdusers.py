#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: training loops written as Horovod's users
and examples write them (``import sparsecomm.torch as hvd`` in place of horovod.torch),
run for several steps, so that what a single step does not show (a gradient's layout
written back, the state a second step finds) is checked.  Prints `CHECK <name> ok` or
`CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import contextlib
import copy
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm as _sc  # noqa: E402
import sparsecomm.torch as hvd  # noqa: E402
import checks  # noqa: E402
from checks import Checks, raises  # noqa: E402

torch.set_num_threads(1)
hvd.init()
R, P = hvd.rank(), hvd.size()
check = Checks(sys.argv[1:])


def same_everywhere(tensors, what):
    checks.same_everywhere(hvd, tensors, what)


class Bag(torch.nn.Module):
    """A sparse embedding bag (nn.Embedding(sparse=True)) and a dense head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 4, sparse=True)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


@check
def sparse_gradients_over_steps():
    # Horovod writes a sparse gradient back sparse, under sparse_as_dense too: SparseAdam
    # (which refuses dense gradients) steps, and the gradients of the next steps
    # accumulate into the sparse gradients the previous step left (zero_grad keeping
    # them, set_to_none=False, or from None), with one and with two backward passes
    # per step
    for sad in (False, True):
        for passes in (1, 2):
            tag = "bag.%d.%d" % (sad, passes)
            torch.manual_seed(0)
            m = Bag()
            hvd.broadcast_parameters(m.state_dict(), root_rank=0, prefix=tag + ".init.")
            opts = [torch.optim.SparseAdam([m.emb.weight], lr=0.05),
                    torch.optim.SGD(m.head.parameters(), lr=0.05)]
            dist = [hvd.DistributedOptimizer(o, named_parameters=[
                (n, p) for n, p in m.named_parameters() if any(p is q for q in
                                                                o.param_groups[0]["params"])],
                sparse_as_dense=sad, backward_passes_per_step=passes, prefix=tag + ".")
                for o in opts]
            gen = torch.Generator().manual_seed(100 + R)
            for step in range(3):
                for o in dist:  # torch 2's default (None) at step 1 only
                    o.zero_grad(set_to_none=step == 1)
                for _ in range(passes):
                    m(torch.randint(0, 50, (6, 5), generator=gen)).pow(2).mean().backward()
                for o in dist:
                    o.step()
                g = m.emb.weight.grad
                assert g.is_sparse and g.sparse_dim() == 1, (tag, step, g.layout)
                same_everywhere([g.to_dense()], "%s.grad%d" % (tag, step))
            same_everywhere(list(m.parameters()), tag)
            for o in dist:
                o.remove_hooks()


def horovod_share(n, shuffle, seed, epoch, processed_num, rank, size):
    """The reference: Horovod 0.28's ElasticSampler (horovod/torch/elastic/sampler.py)
    over n samples.  The indices 0..n-1, shuffled by random.Random(seed + epoch) when
    shuffle, less the first processed_num, are the samples left; padded with their first
    ones to a multiple of size, rank's share is every size-th from rank.  Returns (the
    samples left, the share's length, the share)."""
    order = list(range(n))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    left = order[processed_num:]
    per = -(-len(left) // size)
    padded = left + left[:per * size - len(left)]
    assert len(padded) == per * size  # Horovod's own assertion: cases it can run
    return left, per, padded[rank::size]


@contextlib.contextmanager
def world(rank, size):
    """The job as a sampler's reset() sees it (sparsecomm.rank() and size()) taken to be
    of another size: what Horovod's elastic driver gives after hosts were added or
    removed, which a job of fixed size cannot."""
    kept = _sc.rank, _sc.size
    _sc.rank, _sc.size = (lambda: rank), (lambda: size)
    try:
        yield
    finally:
        _sc.rank, _sc.size = kept


def samples(n):
    return torch.utils.data.TensorDataset(torch.arange(float(n)))


def elastic_parts(tag, seed):
    """A model whose start differs on every rank, its DistributedOptimizer and an
    ElasticSampler over 10 samples, in a TorchState with an epoch and a batch that also
    differ on every rank."""
    torch.manual_seed(seed + R)
    model = torch.nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   prefix=tag + ".")
    data = torch.utils.data.TensorDataset(torch.arange(30.).view(10, 3), torch.zeros(10))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=seed)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(R):  # a schedule that differs on every rank until synchronised
        sched.step()
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, scheduler=sched, epoch=R,
                                   batch=10 + R)
    return model, opt, data, sampler, state


@check
def elastic_run_in_a_fixed_job():
    # Horovod's elastic example as written: @hvd.elastic.run syncs the state from rank 0
    # (the model, the optimizer, the plain attributes) and runs the function once;
    # commits and set_epoch between batches; every rank ends with the same model
    model, opt, data, sampler, state = elastic_parts("el.run", 7)
    start0 = hvd.broadcast(model.weight.detach(), 0, name="el.run.start")
    seen = []
    state.register_reset_callbacks([lambda: seen.append("reset")])

    @hvd.elastic.run
    def train(state, epochs, extra=None):
        assert (state.epoch, state.batch) == (0, 10), (state.epoch, state.batch)
        assert state.scheduler.last_epoch == 0, state.scheduler.last_epoch
        assert torch.equal(state.model.weight.detach(), start0), "not rank 0's start"
        loader = torch.utils.data.DataLoader(data, batch_size=2, sampler=sampler)
        for state.epoch in range(state.epoch, epochs):
            sampler.set_epoch(state.epoch)
            for state.batch, (x, _) in enumerate(loader):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
                sampler.record_batch(state.batch, 2)
                state.commit()
            state.batch = 0
            state.commit()
        return state.epoch, extra

    assert train(state, 2, extra="x") == (1, "x")
    assert seen == [], seen  # a fixed job never resets
    same_everywhere(list(model.parameters()), "el.run")
    # the sampler: every rank's share of the 10 samples is ceil(10 / P), all of them
    # covered, and a commit keeps the samples every rank has processed
    sampler.set_epoch(5)
    mine = list(iter(sampler))
    assert len(mine) == len(sampler) == -(-10 // P), (mine, len(sampler))
    every = hvd.allgather_object(mine, name="el.run.shares")
    assert set().union(*map(set, every)) == set(range(10)), every
    # a commit keeps the count of samples every rank has processed (a batch of 2 on
    # each), restore() goes back to it and takes the samples after them
    sampler.record_batch(0, 2)
    state.commit()
    sampler.record_batch(1, 2)  # not committed: restore() forgets it
    state.restore()
    assert sampler.processed_num == 2 * P, sampler.processed_num
    left, per, share = horovod_share(10, True, 7, 5, 2 * P, R, P)
    assert sampler.remaining_indices == left, (sampler.remaining_indices, left)
    assert len(sampler) == per and list(sampler) == share, (list(sampler), share)
    opt.remove_hooks()


@check
def elastic_sampler_indices_as_horovods():
    # Horovod 0.28's indices for a seed, an epoch, this rank and the job's size: the
    # samples left (remaining_indices), this rank's share and its length, with and
    # without shuffling; record_batch counts batch_size * size samples processed
    # (processed_num) and the share changes only at a reset (reset(), set_epoch,
    # load_state_dict); state_dict() is {epoch, processed_num}
    n = 23
    for shuffle, seed, epoch in ((False, 0, 0), (True, 0, 0), (True, 5, 3)):
        what = (shuffle, seed, epoch)
        s = hvd.elastic.ElasticSampler(samples(n), shuffle=shuffle, seed=seed)
        s.set_epoch(epoch)
        left, per, share = horovod_share(n, shuffle, seed, epoch, 0, R, P)
        assert (s.num_replicas, s.rank, s.processed_num) == (P, R, 0), what
        assert s.remaining_indices == left, (what, s.remaining_indices, left)
        assert (len(s), s.num_samples, s.total_size) == (per, per, per * P), what
        assert list(s) == share, (what, list(s), share)
        assert s.get_indices(1, 3) == share[3:6], (what, s.get_indices(1, 3))
        assert s.state_dict() == {"epoch": epoch, "processed_num": 0}, s.state_dict()
        s.record_batch(0, 3)
        s.record_batch(1, 3)
        assert s.processed_num == 6 * P, (what, s.processed_num)
        assert list(s) == share and len(s) == per, what  # no reset yet
        s.reset()
        left, per, share = horovod_share(n, shuffle, seed, epoch, 6 * P, R, P)
        assert s.remaining_indices == left and len(s) == per, (what, s.remaining_indices)
        assert list(s) == share, (what, list(s), share)
        sd = s.state_dict()
        assert sd == {"epoch": epoch, "processed_num": 6 * P}, (what, sd)
        t = hvd.elastic.ElasticSampler(samples(n), shuffle=shuffle, seed=seed)
        t.load_state_dict(sd)
        assert (t.epoch, t.processed_num, list(t)) == (epoch, 6 * P, share), what
        s.set_epoch(epoch + 1)  # a new epoch: none processed
        left, per, share = horovod_share(n, shuffle, seed, epoch + 1, 0, R, P)
        assert (s.processed_num, list(s)) == (0, share), (what, list(s), share)
    # a state_dict of the sampler's earlier form (the set of indices processed) resumes
    # after as many samples
    t = hvd.elastic.ElasticSampler(samples(n), shuffle=False)
    t.load_state_dict({"epoch": 2, "processed_indices": set(range(4))})
    assert (t.epoch, t.processed_num) == (2, 4), (t.epoch, t.processed_num)
    assert t.remaining_indices == list(range(4, n)), t.remaining_indices


@check
def elastic_sampler_reset_with_another_size():
    # Horovod's reset() on a job of another size (its elastic driver's, simulated): the
    # samples left after those processed are shared anew among every rank of the new
    # size, each share Horovod's, together all of them; record_batch then counts the
    # new size's ranks; back at the job's own size the shares are the job's again
    n = 23
    s = hvd.elastic.ElasticSampler(samples(n), shuffle=True, seed=1)
    s.record_batch(0, 2)
    s.record_batch(1, 2)
    done = 4 * P
    for size in (P + 1, 1, 2 * P):
        got = []
        for r in range(size):
            with world(r, size):
                s.reset()
            left, per, share = horovod_share(n, True, 1, 0, done, r, size)
            assert (s.num_replicas, s.rank) == (size, r), (s.num_replicas, s.rank)
            assert s.remaining_indices == left, (size, r, s.remaining_indices, left)
            assert len(s) == per and list(s) == share, (size, r, list(s), share)
            got.append(share)
        assert set().union(*map(set, got)) == set(left), (size, got)
    with world(0, P + 1):
        s.reset()
        s.record_batch(2, 1)
    assert s.processed_num == done + P + 1, s.processed_num
    s.reset()
    left, per, share = horovod_share(n, True, 1, 0, done + P + 1, R, P)
    assert (s.num_replicas, s.rank, list(s)) == (P, R, share), (list(s), share)
    # fewer samples left than half the ranks (where Horovod's padding asserts): each
    # rank's share is len(sampler) samples, repeating the ones left
    s.load_state_dict({"epoch": 0, "processed_num": n - 1})
    with world(2, 3):
        s.reset()
        assert len(s) == 1 and list(s) == s.remaining_indices, list(s)


@check
def elastic_sampler_in_a_torch_state():
    # Horovod 0.28's test_elastic_sampler (test/single/test_torch_elastic.py), on every
    # rank of the job: a TorchState holding the sampler synchronises it from rank 0,
    # commit() keeps processed_num, restore() returns to it, and after sync() the
    # samples left are shared anew
    batch_size, per_rank = 2, 8
    data = samples(per_rank * P)
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True)
    sampler.set_epoch(R)  # differs on every rank until synchronised
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.sync()
    assert (state.sampler.epoch, state.sampler.processed_num) == (0, 0)
    total = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch_idx, (x,) in enumerate(loader):
            want = horovod_share(per_rank * P, True, 0, epoch, 0, R, P)[2]
            assert x.long().tolist() == want[batch_idx * 2:batch_idx * 2 + 2], (epoch, x)
            sampler.record_batch(batch_idx, batch_size)
            assert sampler.processed_num == batch_size * P * (batch_idx + 1)
            total += 1
    assert total == per_rank // batch_size * 2, total
    # no set_epoch: the same share again, processed_num kept
    assert sum(1 for _ in loader) == per_rank // batch_size
    assert sampler.processed_num == per_rank * P, sampler.processed_num
    sampler.set_epoch(2)
    assert sampler.processed_num == 0
    sampler.record_batch(0, batch_size)
    sampler.record_batch(1, batch_size)
    state.commit()
    sampler.record_batch(2, batch_size)
    sampler.record_batch(3, batch_size)
    assert sampler.processed_num == 4 * batch_size * P
    state.restore()
    assert sampler.processed_num == 2 * batch_size * P, sampler.processed_num
    sampler.record_batch(2, batch_size)
    state.commit()
    state.sync()
    assert sampler.processed_num == 3 * batch_size * P, sampler.processed_num
    assert len(sampler) == batch_size, len(sampler)
    left, per, share = horovod_share(per_rank * P, True, 0, 2, 3 * batch_size * P, R, P)
    assert [x.long().tolist() for (x,) in loader] == [share], share
    sampler.set_epoch(3)
    assert len(sampler) == per_rank and sum(1 for _ in loader) == per_rank // batch_size


@check
def elastic_failure_restores_the_commit():
    # an operation that fails on every rank (a HorovodInternalError) inside the function
    # restores the last commit (model, optimizer, attributes) and is raised again
    model, opt, data, sampler, state = elastic_parts("el.fail", 11)

    @hvd.elastic.run
    def train(state):
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        state.epoch = 3
        state.commit()
        state.committed = {k: v.clone() for k, v in model.state_dict().items()}
        state.moments = copy.deepcopy(opt.state_dict()["state"])
        state.epoch = 4
        state.scheduler.step()
        with torch.no_grad():
            model.weight.fill_(7.0)
        hvd.allreduce(torch.ones(2 + R), name="el.fail.mismatch")  # shapes differ

    e = raises(hvd.HorovodInternalError, train, state) if P > 1 else None
    if e is None:
        return
    assert state.epoch == 3, state.epoch
    assert state.scheduler.last_epoch == 0, state.scheduler.last_epoch
    for k, v in model.state_dict().items():
        assert torch.equal(v, state.committed[k]), k
    got = opt.state_dict()["state"]
    for i, want in state.moments.items():
        assert torch.equal(got[i]["momentum_buffer"], want["momentum_buffer"]), i
    opt.remove_hooks()


@check
def elastic_names():
    import sparsecomm.torch.elastic as el
    assert el is hvd.elastic
    for n in ("run", "State", "ObjectState", "TorchState", "ElasticSampler",
              "HostsUpdatedInterrupt"):
        assert hasattr(hvd.elastic, n), n
    assert not hasattr(hvd.elastic, "_private")  # AttributeError, as hasattr expects
    obj = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=R)
    obj.sync()  # nothing saved from rank 0 yet: its value at creation
    assert obj.step == 0, obj.step
    obj.step = 5 + R
    obj.restore()
    assert obj.step == 0, obj.step


@check
def evaluation_under_inference_mode_then_training():
    # a validation pass under torch.inference_mode before training (PyTorch Lightning's
    # sanity check, an evaluation before the first epoch) averages its metrics with the
    # calls training makes afterwards, of the same names and shapes: the buffers' views
    # the first call kept must take the training calls' values (an inference tensor
    # cannot be written to outside inference mode)
    def calls(v):
        x = torch.full((3,), float(v))
        emb = torch.sparse_coo_tensor([[R]], [[float(v), 1.0]], (P, 2))
        return [hvd.allreduce(x, name="inf.metric"), hvd.allreduce(x.clone()),
                hvd.allreduce_(x.clone(), op=hvd.Sum, name="inf.sum"),
                hvd.broadcast_(x.clone(), 0, name="inf.bcast"),
                hvd.allgather(x.view(1, 3), name="inf.gather"),
                hvd.grouped_allreduce([x, x[:1]], name="inf.group")[1],
                hvd.synchronize(hvd.sparse_allreduce_async(emb, name="inf.sparse",
                                                           op=hvd.Sum)).to_dense()]

    def want(v):
        mean = sum(v + r for r in range(P)) / P
        emb = torch.zeros(P, 2)
        for r in range(P):
            emb[r] = torch.tensor([v + r, 1.0])
        return [torch.full((3,), mean), torch.full((3,), mean),
                torch.full((3,), mean * P), torch.full((3,), float(v)),
                torch.cat([torch.full((1, 3), float(v + r)) for r in range(P)]),
                torch.full((1,), mean), emb]

    for epoch in range(2):
        with torch.inference_mode():
            got = calls(10 * epoch + R)
        for i, (g, w) in enumerate(zip(got, want(10 * epoch))):
            assert torch.allclose(g, w), ("eval", epoch, i, g, w)
        got = calls(10 * epoch + 5 + R)
        for i, (g, w) in enumerate(zip(got, want(10 * epoch + 5))):
            assert torch.allclose(g, w), ("train", epoch, i, g, w)
            assert not g.is_inference(), ("train", epoch, i)


@check
def elastic_handler_registry_and_sampler_type():
    # Horovod's elastic modules as scripts use them: the ElasticSampler is a torch
    # Sampler, and a handler registered for a type of the script's own (here an object
    # with a state_dict, as a GradScaler is) is what a TorchState saves, restores and
    # synchronises it with; horovod.torch.elastic's state and sampler modules hold them
    from horovod.torch.elastic import sampler, state
    from sparsecomm.torch.elastic.state import (StateHandler, get_handler_registry,
                                                set_handler_registry)
    assert state is hvd.elastic and sampler is hvd.elastic
    assert isinstance(sampler.ElasticSampler(list(range(6))), torch.utils.data.Sampler)

    class Scaler:
        def __init__(self, scale):
            self.scale = scale

        def state_dict(self):
            return {"scale": self.scale}

        def load_state_dict(self, sd):
            self.scale = sd["scale"]

    class ScalerHandler(StateHandler):
        def __init__(self, scaler):
            super().__init__(scaler)
            self.save()

        def save(self):
            self.saved = copy.deepcopy(self.value.state_dict())

        def restore(self):
            self.value.load_state_dict(self.saved)

        def sync(self):
            self.value.load_state_dict(hvd.broadcast_object(self.value.state_dict(),
                                                            name="el.scaler"))

    kept = list(get_handler_registry())
    set_handler_registry(kept + [(Scaler, ScalerHandler)])
    try:
        torch.manual_seed(R)
        model = torch.nn.Linear(3, 1)
        scaler = Scaler(2.0 ** (10 + R))
        st = state.TorchState(model, torch.optim.SGD(model.parameters(), lr=0.1),
                              scaler=scaler, epoch=R)
        st.sync()
        assert scaler.scale == 1024.0 and st.epoch == 0, (scaler.scale, st.epoch)
        same_everywhere(list(model.parameters()), "el.reg")
        scaler.scale = 8.0 + R
        st.commit()
        scaler.scale = -1.0
        st.restore()
        assert scaler.scale == 8.0 + R, scaler.scale
        st.scaler = Scaler(3.0)  # assigned anew: the new one is saved
        st.scaler.scale = 4.0
        st.restore()
        assert st.scaler.scale == 3.0, st.scaler.scale
    finally:
        set_handler_registry(kept)
    assert get_handler_registry() == kept


@check
def horovods_module_paths():
    # scripts import names from horovod.torch's modules (mpi_ops, functions, optimizer,
    # compression, sync_batch_norm): the same names under sparsecomm.torch's
    from sparsecomm.torch.mpi_ops import Sum, allreduce_async_, synchronize
    from sparsecomm.torch.functions import broadcast_object, broadcast_parameters  # noqa
    from sparsecomm.torch.optimizer import DistributedOptimizer  # noqa: F401
    from sparsecomm.torch.compression import Compression
    from sparsecomm.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
    import sparsecomm.torch.mpi_ops as mpi_ops
    assert mpi_ops.allreduce is hvd.allreduce and hvd.mpi_ops is mpi_ops
    assert Compression is hvd.Compression
    t = torch.ones(2)
    assert torch.equal(synchronize(allreduce_async_(t, name="paths", op=Sum)),
                       torch.full((2,), float(P)))
    assert broadcast_object(R) == 0


@check
def optimizer_parameters_given_unnamed():
    # model.parameters() where named_parameters belong: Horovod's ValueError, which
    # names what is expected
    m = torch.nn.Linear(3, 2)
    for bad in (m.parameters(), list(m.parameters()), [("w", m.weight, 0)]):
        e = raises(ValueError, hvd.DistributedOptimizer,
                   torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=bad)
        assert "named_parameters" in str(e), e


@check
def names_of_any_length():
    # Horovod's names have no bound: names past the daemons' 255 bytes (a long f-string,
    # multi-byte text, two that differ only past their first 300 bytes), an empty name
    # (unnamed, as Horovod's), and a model whose parameter names are that long,
    # broadcast and trained
    long_a, long_b = "m" * 300 + ".a", "m" * 300 + ".b"
    a = hvd.allreduce_async(torch.full((2,), float(R)), name=long_a, op=hvd.Sum)
    b = hvd.allreduce_async(torch.full((3,), 1.0), name=long_b, op=hvd.Sum)
    assert torch.equal(hvd.synchronize(a), torch.full((2,), float(P * (P - 1) // 2)))
    assert torch.equal(hvd.synchronize(b), torch.full((3,), float(P)))
    for n in ("x" * 5000, "\u635f\u5931" * 100, ""):
        got = hvd.allreduce(torch.ones(2), name=n, op=hvd.Sum)
        assert torch.equal(got, torch.full((2,), float(P))), (len(n), got)
    assert hvd.broadcast_object(R, 0, name="o" * 400) == 0
    # a name of 255 bytes or less that is itself of the long names' form is a name of its
    # own, not the long name's: both in flight at once, each with its own sum
    own = _sc._daemon_name(long_a).decode()
    a = hvd.allreduce_async(torch.full((2,), 1.0), name=long_a, op=hvd.Sum)
    b = hvd.allreduce_async(torch.full((2,), float(R)), name=own, op=hvd.Sum)
    assert torch.equal(hvd.synchronize(a), torch.full((2,), float(P)))
    assert torch.equal(hvd.synchronize(b), torch.full((2,), float(P * (P - 1) // 2)))

    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("block" * 60, torch.nn.Linear(2, 1))

        def forward(self, x):
            return getattr(self, "block" * 60)(x)

    torch.manual_seed(R)
    m = Deep()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    m(torch.full((1, 2), float(R))).sum().backward()
    opt.step()
    same_everywhere(list(m.parameters()), "deep")
    opt.remove_hooks()


@check
def init_comm():
    # Horovod's init(comm=...): the whole job's ranks in order (as a keyword, or as the
    # first argument, Horovod's place for it) are the global set; a smaller set is refused
    # on every rank alike, disconnected, naming process_sets; a connected trainer's next
    # init() works as before
    for kw in ({"comm": list(range(P))}, {"comm": []}):
        hvd.shutdown()
        hvd.init(**kw)
        assert (hvd.rank(), hvd.size()) == (R, P), kw
        got = hvd.allreduce(torch.ones(2), name="comm.%d" % len(kw["comm"]), op=hvd.Sum)
        assert torch.equal(got, torch.full((2,), float(P)))
    hvd.shutdown()
    hvd.init(list(range(P)))
    assert (hvd.rank(), hvd.size()) == (R, P)
    for bad in ([0], list(range(P))[::-1], "ranks"):
        hvd.shutdown()
        e = raises(ValueError, hvd.init, comm=bad)
        assert "init(comm=" in str(e) and not hvd.is_initialized(), e

    class Comm:
        # mpi4py's MPI.Comm as init(comm=) reads it, of the job's size, whose rank differs
        # from the job's on rank 1 only: every trainer refuses it, not rank 1 alone
        def Get_rank(self):
            return 0 if R == 1 else R

        def Get_size(self):
            return P

        def allgather(self, x):
            return _sc.allgather_object(x, name="test.comm")

    hvd.shutdown()
    e = raises(ValueError, hvd.init, comm=Comm())
    assert "init(comm=" in str(e) and not hvd.is_initialized(), e
    hvd.init()
    got = hvd.allreduce(torch.ones(3), name="comm.after", op=hvd.Sum)
    assert torch.equal(got, torch.full((3,), float(P)))


sys.exit(1 if check.failed else 0)
