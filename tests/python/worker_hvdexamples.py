#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: the calls and idioms of Horovod's PyTorch
examples (examples/pytorch: the MNIST, synthetic benchmark and ImageNet ResNet-50 scripts
and their elastic variants) and of its documentation's snippets (PyTorch, Elastic,
Process Sets, Adasum, Timeline, Troubleshooting), scaled down to tiny models on
synthetic data, a few steps each, through ``import sparsecomm.torch as hvd``.  Prints
`CHECK <name> ok` or `CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import math
import os
import sys
import tempfile
import timeit
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.data.distributed  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
import checks  # noqa: E402
from checks import Checks  # noqa: E402

hvd.init()
R, P = hvd.rank(), hvd.size()
# the examples' CPU thread limit, from the node's trainer count
torch.set_num_threads(max(1, 2 // hvd.local_size()))
check = Checks(sys.argv[1:])
TMP = os.environ.get("SPARSECOMM_TEST_TMP") or tempfile.gettempdir()


def same_everywhere(tensors, what):
    checks.same_everywhere(hvd, tensors, what)


class Net(torch.nn.Module):
    """MNIST's network, shrunk: a convolution, dropout, two linear layers, log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 3, kernel_size=3)
        self.drop = torch.nn.Dropout2d()
        self.fc1 = torch.nn.Linear(3 * 3 * 3, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.drop(self.conv1(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 27)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(n, 1, 8, 8, generator=g),
                                          torch.randint(0, 4, (n,), generator=g))


def metric_average(val, name):
    # pytorch_mnist.py's helper: a Python float (or a 0-dim tensor) made a tensor and
    # averaged; .item() of the result
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


class Metric:
    # pytorch_imagenet_resnet50.py's running metric: a 0-dim sum and count, each update
    # the allreduce (Average) of a detached 0-dim value under the metric's name
    def __init__(self, name):
        self.name = name
        self.sum = torch.tensor(0.)
        self.n = torch.tensor(0.)

    def update(self, val):
        self.sum += hvd.allreduce(val.detach().cpu(), name=self.name)
        self.n += 1

    @property
    def avg(self):
        return self.sum / self.n


def accuracy(output, target):
    pred = output.max(1, keepdim=True)[1]
    return pred.eq(target.view_as(pred)).cpu().float().mean()


@check
def mnist_example():
    # pytorch_mnist.py: DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank()),
    # lr scaled by hvd.size(), parameters and optimizer state broadcast, the optimizer
    # wrapped with named_parameters, compression and op, set_epoch, a test pass whose
    # float sums and 0-dim tensor sums are averaged by metric_average
    torch.manual_seed(42)
    train_ds, test_ds = dataset(40, 1), dataset(21, 2)
    kwargs = {}
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_ds, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_ds, batch_size=4,
                                               sampler=train_sampler, **kwargs)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_ds, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_ds, batch_size=5, sampler=test_sampler)
    model = Net()
    lr_scaler = hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler, momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for compression, op in ((hvd.Compression.none, hvd.Average),
                            (hvd.Compression.fp16, hvd.Average),
                            (hvd.Compression.none, hvd.Adasum)):
        dist = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        compression=compression, op=op,
                                        gradient_predivide_factor=1.0)
        for epoch in range(1, 3):
            model.train()
            train_sampler.set_epoch(epoch)
            for batch_idx, (data, target) in enumerate(train_loader):
                dist.zero_grad()
                output = model(data)
                loss = F.nll_loss(output, target)
                loss.backward()
                dist.step()
                if batch_idx % 2 == 0 and hvd.rank() == 0:
                    "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                        epoch, batch_idx * len(data), len(train_sampler),
                        100. * batch_idx / len(train_loader), loss.item())
        dist.remove_hooks()
        same_everywhere(list(model.parameters()), "mnist.%s" % op)
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    n = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).cpu().float().sum()
            n += len(data)
    assert isinstance(test_loss, float) and torch.is_tensor(test_accuracy)
    assert test_accuracy.dim() == 0, test_accuracy.shape
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.tensor(a tensor) warns: copy-construct
        loss_avg = metric_average(test_loss, "avg_loss")
        acc_avg = metric_average(test_accuracy, "avg_accuracy")
    every = hvd.allgather_object((test_loss, test_accuracy.item()))
    assert isinstance(loss_avg, float) and isinstance(acc_avg, float)
    assert math.isclose(loss_avg, sum(e[0] for e in every) / P, rel_tol=1e-5), every
    assert math.isclose(acc_avg, sum(e[1] for e in every) / P, rel_tol=1e-5), every


@check
def synthetic_benchmark():
    # pytorch_synthetic_benchmark.py: fixed data, timeit of a step function, img/sec
    # averaged by nothing but printed on rank 0; the Adasum lr rule (hvd.nccl_built)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 10))
    for use_adasum in (False, True):
        lr_scaler = hvd.size() if not use_adasum else 1
        if use_adasum and hvd.nccl_built():
            lr_scaler = hvd.local_size()
        assert isinstance(hvd.nccl_built(), (bool, int)), hvd.nccl_built()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=hvd.Compression.none,
            op=hvd.Adasum if use_adasum else hvd.Average)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        data = torch.randn(2, 3, 6, 6)
        target = torch.LongTensor(2).random_() % 10

        def benchmark_step():
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
            optimizer.step()

        timeit.timeit(benchmark_step, number=2)
        img_secs = []
        for _ in range(2):
            t = timeit.timeit(benchmark_step, number=3)
            img_secs.append(2 * 3 / t)
        optimizer.remove_hooks()
        same_everywhere(list(model.parameters()), "bench.%d" % use_adasum)


@check
def imagenet_example():
    # pytorch_imagenet_resnet50.py: resume_from_epoch found on rank 0 and broadcast as a
    # 0-dim int64 tensor; batches_per_allreduce sub-batches (backward_passes_per_step),
    # Metric updates with the loss itself (requires grad) then loss.div_ in place,
    # adjust_learning_rate over optimizer.param_groups every batch, a checkpoint of the
    # model and DistributedOptimizer's state_dict saved on rank 0, loaded on rank 0 and
    # broadcast; validation under no_grad
    ckpt = os.path.join(TMP, "hvdex-ckpt-{epoch}.pth.tar")
    batch_size, batches_per_allreduce, base_lr, warmup = 2, 2, 0.0125, 1
    allreduce_batch_size = batch_size * batches_per_allreduce
    for start in range(2):  # a first run, then a run that resumes from its checkpoint
        torch.manual_seed(42)
        resume_from_epoch = 0
        if hvd.rank() == 0:
            for try_epoch in range(3, 0, -1):
                if os.path.exists(ckpt.format(epoch=try_epoch)):
                    resume_from_epoch = try_epoch
                    break
        got = hvd.broadcast(torch.tensor(resume_from_epoch), root_rank=0,
                            name="resume_from_epoch")
        assert got.dtype == torch.int64 and got.dim() == 0, (got.dtype, got.shape)
        resume_from_epoch = got.item()
        assert resume_from_epoch == (0 if start == 0 else 2), resume_from_epoch
        verbose = 1 if hvd.rank() == 0 else 0
        train_ds, val_ds = dataset(24, 3), dataset(10, 4)
        train_sampler = torch.utils.data.distributed.DistributedSampler(
            train_ds, num_replicas=hvd.size(), rank=hvd.rank())
        train_loader = torch.utils.data.DataLoader(train_ds, batch_size=allreduce_batch_size,
                                                   sampler=train_sampler)
        val_sampler = torch.utils.data.distributed.DistributedSampler(
            val_ds, num_replicas=hvd.size(), rank=hvd.rank())
        val_loader = torch.utils.data.DataLoader(val_ds, batch_size=3, sampler=val_sampler)
        model = Net()
        lr_scaler = batches_per_allreduce * hvd.size()
        optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * lr_scaler,
                                    momentum=0.9, weight_decay=5e-5)
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=hvd.Compression.none, backward_passes_per_step=batches_per_allreduce,
            op=hvd.Average, gradient_predivide_factor=1.0)
        if resume_from_epoch > 0 and hvd.rank() == 0:
            checkpoint = torch.load(ckpt.format(epoch=resume_from_epoch))
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        if resume_from_epoch > 0:
            assert len(optimizer.state_dict()["state"]) == len(list(model.parameters()))

        def adjust_learning_rate(epoch, batch_idx):
            if epoch < warmup:
                epoch += float(batch_idx + 1) / len(train_loader)
                lr_adj = 1. / hvd.size() * (epoch * (hvd.size() - 1) / warmup + 1)
            else:
                lr_adj = 0.1
            for param_group in optimizer.param_groups:
                param_group["lr"] = base_lr * hvd.size() * batches_per_allreduce * lr_adj

        for epoch in range(resume_from_epoch, 2 + start):
            model.train()
            train_sampler.set_epoch(epoch)
            train_loss = Metric("train_loss")
            train_accuracy = Metric("train_accuracy")
            for batch_idx, (data, target) in enumerate(train_loader):
                adjust_learning_rate(epoch, batch_idx)
                optimizer.zero_grad()
                for i in range(0, len(data), batch_size):
                    data_batch = data[i:i + batch_size]
                    target_batch = target[i:i + batch_size]
                    output = model(data_batch)
                    train_accuracy.update(accuracy(output, target_batch))
                    loss = F.cross_entropy(output, target_batch)
                    train_loss.update(loss)
                    loss.div_(math.ceil(float(len(data)) / batch_size))
                    loss.backward()
                optimizer.step()
                if verbose:
                    {"loss": train_loss.avg.item(),
                     "accuracy": 100. * train_accuracy.avg.item()}
            assert train_loss.avg.dim() == 0 and train_loss.avg.dtype == torch.float32
            same_everywhere([train_loss.avg, train_accuracy.avg], "imnet.metrics")
            model.eval()
            val_loss, val_accuracy = Metric("val_loss"), Metric("val_accuracy")
            with torch.no_grad():
                for data, target in val_loader:
                    output = model(data)
                    val_loss.update(F.cross_entropy(output, target))
                    val_accuracy.update(accuracy(output, target))
            same_everywhere([val_loss.avg, val_accuracy.avg], "imnet.val")
            if hvd.rank() == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                           ckpt.format(epoch=epoch + 1))
            hvd.barrier()
        same_everywhere(list(model.parameters()), "imnet.%d" % start)
        optimizer.remove_hooks()
    hvd.barrier()
    if hvd.rank() == 0:
        for e in range(1, 4):
            if os.path.exists(ckpt.format(epoch=e)):
                os.unlink(ckpt.format(epoch=e))


@check
def checkpoint_epoch_by_broadcast_object():
    # a checkpoint loaded on rank 0 and its epoch (and a dict of counters) sent to the
    # others with broadcast_object; the lr scaled by local_size as the Adasum docs say
    state = {"epoch": 3, "best": 0.25} if R == 0 else None
    got = hvd.broadcast_object(state, root_rank=0)
    assert got == {"epoch": 3, "best": 0.25}, got
    epoch = hvd.broadcast_object(7 if R == 0 else 0, 0, name="resume.epoch")
    assert epoch == 7 and isinstance(epoch, int), epoch
    lr = 0.1 * hvd.local_size()
    assert lr > 0 and hvd.local_size() >= 1 and 0 <= hvd.local_rank() < hvd.local_size()


@check
def param_groups_and_clipping():
    # optimizer param groups (no weight decay on biases), gradient clipping as the
    # Troubleshooting page writes it: synchronize(), clip_grad_norm_, then step() inside
    # skip_synchronize(); and with a GradScaler (disabled on CPU) as the mixed-precision
    # MNIST example steps it
    torch.manual_seed(R)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=0.01)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    assert len(opt.param_groups) == 2
    gen = torch.Generator().manual_seed(10 + R)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    for step in range(4):
        opt.zero_grad()
        loss = model(torch.randn(5, 4, generator=gen)).pow(2).mean()
        if step % 2 == 0:
            loss.backward()
            opt.synchronize()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            same_everywhere([norm.reshape(1)], "clip.norm%d" % step)
            with opt.skip_synchronize():
                opt.step()
        else:
            scaler.scale(loss).backward()
            opt.synchronize()
            scaler.unscale_(opt)
            with opt.skip_synchronize():
                scaler.step(opt)
            scaler.update()
    same_everywhere(list(model.parameters()), "clip")
    opt.remove_hooks()


@check
def allreduce_of_odd_tensors():
    # 0-dim, non-contiguous (a transpose, a strided slice), int, float64, bool-made,
    # requires-grad and expanded tensors; in-place forms on views write through to the
    # base tensor
    for t, want in ((torch.tensor(float(R)), None),
                    (torch.tensor(R + 1), None),
                    (torch.arange(6, dtype=torch.float64).view(2, 3).t() * (R + 1), None),
                    (torch.arange(10.)[::3] + R, None),
                    (torch.ones(3, dtype=torch.int32) * (R + 2), None),
                    (torch.ones(1, 3).expand(4, 3) * 1.0, None),
                    (torch.full((2,), float(R), requires_grad=True), None)):
        every = hvd.allgather(t.detach().reshape(1, -1))
        s = hvd.allreduce(t, op=hvd.Sum)
        assert s.shape == t.shape and s.dtype == t.dtype, (s.shape, s.dtype, t.shape)
        assert torch.equal(s.detach().reshape(-1), every.sum(0).to(t.dtype)), (s, every)
        a = hvd.allreduce(t)
        ref = every.double().mean(0)
        if not t.dtype.is_floating_point:
            ref = ref.trunc()
        assert a.dtype == t.dtype and a.shape == t.shape
        assert torch.allclose(a.detach().double().reshape(-1), ref), (a, ref)
    assert hvd.allreduce(torch.tensor(float(R)), name="zerodim").dim() == 0
    base = torch.zeros(4, 4)
    base[:, 1] = R + 1.0
    col = base[:, 1]  # a non-contiguous view: allreduce_ writes through to base
    out = hvd.allreduce_(col, op=hvd.Sum, name="view.col")
    assert out is col and torch.equal(base[:, 1], torch.full((4,), P * (P + 1) / 2)), base
    assert torch.equal(base[:, 0], torch.zeros(4))
    row = base[2]
    hvd.broadcast_(row.fill_(R + 5.0), root_rank=P - 1, name="view.row")
    assert torch.equal(base[2], torch.full((4,), P + 4.0)), base
    h = hvd.allreduce_async_(base.t()[0:2], op=hvd.Max, name="view.async")
    hvd.synchronize(h)
    assert torch.equal(base[0:2, 1], torch.full((2,), P * (P + 1) / 2)), base
    x = torch.ones(3, requires_grad=True)
    y = x * (R + 1)
    z = hvd.allreduce(y, op=hvd.Sum, name="grad.input")
    assert z.requires_grad and z.grad_fn is not None
    z.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), float(P * (R + 1)))), x.grad


@check
def join_at_the_end_of_uneven_epochs():
    # uneven shards: rank r trains r + 1 + epoch batches, then hvd.join(); the ranks still
    # training average with the zeros of those that joined (a gradient of 2 on every rank
    # still in, divided by the whole job's size), and every rank gets the same last rank
    # to join
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for epoch in range(2):
        for step in range(1 + R + epoch):
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
            active = P - step + epoch if step > epoch else P
            assert torch.allclose(model.bias.grad, torch.full((1,), 2.0 * active / P)), (
                epoch, step, model.bias.grad)
        last = hvd.join()
        assert isinstance(last, int) and last == P - 1, last
        hvd.broadcast_parameters(model.state_dict(), root_rank=P - 1)
        same_everywhere(list(model.parameters()), "join%d" % epoch)
    opt.remove_hooks()


@check
def timeline_start_stop():
    # the Timeline page: hvd.start_timeline(path) / hvd.stop_timeline() around steps,
    # mark_cycles given as False; after the stop, rank 0's node holds the file at the path
    # given, as Horovod's (with several daemons, each other node's file has `.<node rank>`
    # before `.json`)
    path = os.path.join(TMP, "hvdex-timeline-%d.json" % os.getpid()) if R == 0 else None
    path = hvd.broadcast_object(path)
    hvd.start_timeline(path, mark_cycles=False)
    for i in range(3):
        hvd.allreduce(torch.ones(4), name="tl.%d" % i)
    hvd.stop_timeline()
    hvd.barrier()
    if R == 0:
        assert os.path.getsize(path) > 0, path
    hvd.barrier()
    if hvd.local_rank() == 0:
        node = path if hvd.cross_rank() == 0 else "%s.%d.json" % (path[:-5], hvd.cross_rank())
        os.unlink(node)


@check
def process_sets_as_the_docs_write_them():
    # the Process Sets page: sets given to init(), included(), rank(), size(),
    # process_set_id, allreduce and broadcast_parameters in a set; then sets added and
    # removed at run time under init(process_sets="dynamic")
    even_set = hvd.ProcessSet([r for r in range(P) if r % 2 == 0])
    odd_set = hvd.ProcessSet([r for r in range(P) if r % 2 == 1])
    hvd.shutdown()
    hvd.init(process_sets=[even_set, odd_set])
    mine, other = (even_set, odd_set) if R % 2 == 0 else (odd_set, even_set)
    assert mine.included() and not other.included()
    assert mine.rank() == R // 2 and mine.size() == len(mine.ranks), (mine.rank(), mine.ranks)
    assert isinstance(mine.process_set_id, int) and mine.process_set_id > 0
    got = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=mine)
    assert got.item() == float(sum(mine.ranks)), got
    m = torch.nn.Linear(2, 2)
    hvd.broadcast_parameters(m.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    assert hvd.global_process_set.size() == P and hvd.global_process_set.rank() == R
    hvd.shutdown()
    hvd.init(process_sets="dynamic")
    first = hvd.add_process_set([r for r in range(P) if r != 1])
    if first.included():
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=first, name="ps.first")
        assert got.item() == P - 1, got
    hvd.remove_process_set(first)
    hvd.shutdown()
    hvd.init()


@check
def elastic_mnist_as_written():
    # pytorch_mnist_elastic.py: an ElasticSampler given to TorchState as train_sampler=,
    # a reset callback scaling the lr by hvd.size(), commits every few batches,
    # check_host_updates between them, state.batch resumed inside the epoch
    torch.manual_seed(R)
    model = Net()
    lr = 0.01
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    train_ds = dataset(30, 5)
    train_sampler = hvd.elastic.ElasticSampler(train_ds, shuffle=True)
    train_loader = torch.utils.data.DataLoader(train_ds, batch_size=4, sampler=train_sampler)

    def on_state_reset():
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr * hvd.size()

    batches = []

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 3):
            state.model.train()
            state.train_sampler.set_epoch(state.epoch)
            batches.append(0)
            for state.batch, (data, target) in enumerate(train_loader):
                batches[-1] += 1
                state.optimizer.zero_grad()
                loss = F.nll_loss(state.model(data), target)
                loss.backward()
                state.optimizer.step()
                state.train_sampler.record_batch(state.batch, 4)
                if state.batch % 2 == 0:
                    state.commit()
                else:
                    state.check_host_updates()
            state.batch = 0
            state.commit()
        return state.epoch

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer,
                                   train_sampler=train_sampler, epoch=R, batch=0)
    state.register_reset_callbacks([on_state_reset])
    assert train(state) == 2
    # rank 0's epoch (0) for every rank; set_epoch makes each epoch a whole one
    assert batches == [math.ceil(math.ceil(30 / P) / 4)] * 3, batches
    same_everywhere(list(model.parameters()), "elastic.mnist")
    optimizer.remove_hooks()


@check
def elastic_benchmark_as_written():
    # pytorch_synthetic_benchmark_elastic.py: TorchState(model, optimizer, batch=0),
    # a step function that counts state.batch and commits every few
    torch.manual_seed(R)
    model = torch.nn.Linear(5, 3)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    data, target = torch.randn(4, 5), torch.LongTensor(4).random_() % 3

    def benchmark_step(state):
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()
        state.batch += 1
        if state.batch % 2 == 0:
            state.commit()

    @hvd.elastic.run
    def run_benchmark(state):
        for state.iter in range(state.iter, 3):
            timeit.timeit(lambda: benchmark_step(state), number=2)
            state.commit()
        return state.batch

    state = hvd.elastic.TorchState(model, optimizer, batch=0, iter=0)
    assert run_benchmark(state) == 6
    same_everywhere(list(model.parameters()), "elastic.bench")
    optimizer.remove_hooks()


@check
def elastic_imagenet_end_epoch():
    # pytorch_imagenet_resnet50_elastic.py: train and val ElasticSamplers in the state,
    # end_epoch advancing state.epoch and resetting state.batch, the resume epoch sent
    # with hvd.broadcast of a 0-dim tensor before the state exists
    resume = hvd.broadcast(torch.tensor(0), root_rank=0, name="resume_from_epoch").item()
    torch.manual_seed(R)
    model = torch.nn.Linear(4, 2)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         backward_passes_per_step=2)
    train_ds, val_ds = dataset(12, 6), dataset(6, 7)
    train_sampler = hvd.elastic.ElasticSampler(train_ds)
    val_sampler = hvd.elastic.ElasticSampler(val_ds)

    def end_epoch(state):
        state.epoch += 1
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch)
        state.commit()

    @hvd.elastic.run
    def full_train(state):
        while state.epoch < 2:
            loader = torch.utils.data.DataLoader(train_ds, batch_size=4,
                                                 sampler=state.train_sampler)
            for idx, (data, target) in enumerate(loader):
                state.batch = idx
                optimizer.zero_grad()
                for i in range(0, len(data), 2):  # two sub-batches, one step
                    x = data[i:i + 2].view(len(data[i:i + 2]), -1)[:, :4]
                    model(x).pow(2).mean().backward()
                optimizer.step()
                state.train_sampler.record_batch(idx, 4)
            end_epoch(state)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer,
                                   train_sampler=train_sampler, val_sampler=val_sampler,
                                   epoch=resume, batch=0)
    full_train(state)
    assert state.epoch == 2 and state.batch == 0
    same_everywhere(list(model.parameters()), "elastic.imnet")
    optimizer.remove_hooks()


@check
def dataloader_workers_after_init():
    # the examples' DataLoader with worker processes (num_workers > 0, forked after
    # hvd.init()) over two epochs: the workers load batches and end, and the trainer's
    # collectives go on
    ds = dataset(16, 8)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        n = 0
        for data, _ in loader:
            n += len(data)
            hvd.allreduce(data.sum(), name="dl.sum")
        assert n == len(sampler), (n, len(sampler))
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="dl.after")
    assert torch.equal(got, torch.full((2,), float(P)))


@check
def lightning_strategy_calls():
    # how PyTorch Lightning's Horovod strategy drives hvd: the lr and the scheduler's
    # base_lrs scaled by hvd.size(), named_parameters filtered to the optimizer's own,
    # skip_synchronize() entered once for the whole fit, and each step an
    # optimizer.step(closure) whose closure runs zero_grad, forward, backward and
    # optimizer.synchronize(); join() before every reduce, allgather and barrier;
    # broadcast_object(obj, src); join() at teardown
    import contextlib
    torch.manual_seed(R)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    frozen = torch.nn.Linear(1, 1)  # a module whose parameters no optimizer holds
    base = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(base, step_size=2)
    for group in base.param_groups:
        group["lr"] *= hvd.size()
    sched.base_lrs = [lr * hvd.size() for lr in sched.base_lrs]
    mine = {p for group in base.param_groups for p in group.get("params", [])}
    named = [(n, p) for n, p in list(model.named_parameters()) + list(
        frozen.named_parameters()) if p in mine]
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(base, root_rank=0)
    opt = hvd.DistributedOptimizer(base, named_parameters=named, backward_passes_per_step=1)
    stack = contextlib.ExitStack()
    stack.__enter__()
    stack.enter_context(opt.skip_synchronize())
    gen = torch.Generator().manual_seed(20 + R)
    losses = []
    for step in range(4):
        x = torch.randn(4, 3, generator=gen)

        def closure():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.synchronize()
            return loss

        losses.append(opt.step(closure=closure).detach())
        sched.step()
        hvd.join()
        avg = hvd.allreduce(losses[-1], op=hvd.Average)
        assert avg.dim() == 0, avg.shape
        hvd.join()
        every = hvd.allgather(losses[-1].reshape(1))
        assert torch.allclose(every.mean(), avg), (every, avg)
    stack.__exit__(None, None, None)
    assert hvd.broadcast_object({"best": R}, 0) == {"best": 0}
    same_everywhere(list(model.parameters()), "lightning")
    hvd.join()
    opt.remove_hooks()


@check
def one_optimizer_per_parameter():
    # Pyro's HorovodOptimizer: a DistributedOptimizer for each parameter (named after
    # it), each stepped in turn after one backward pass
    torch.manual_seed(R)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opts = {n: hvd.DistributedOptimizer(torch.optim.Adam([p], lr=0.01),
                                        named_parameters=[(n, p)])
            for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(30 + R)
    for _ in range(3):
        for o in opts.values():
            o.zero_grad()
        model(torch.randn(2, 3, generator=gen)).sum().backward()
        for o in opts.values():
            o.step()
    same_everywhere(list(model.parameters()), "per_param")
    for o in opts.values():
        o.remove_hooks()


@check
def ignite_backend_calls():
    # how PyTorch-Ignite's Horovod backend drives hvd: its barrier an allreduce of a 0-dim
    # int64 zero named "barrier" (next to hvd.barrier()), MIN and MAX as an allgather of
    # the tensor unsqueezed then reduced locally, a 0-dim tensor gathered as one row,
    # broadcast(tensor, root_rank=src) from every rank in turn
    for _ in range(3):
        assert hvd.allreduce(torch.tensor(0), name="barrier").item() == 0
        hvd.barrier()
    x = torch.tensor([float(R), float(-R)])
    got = hvd.allgather(x.unsqueeze(0))
    assert got.shape == (P, 2), got.shape
    assert torch.equal(torch.min(got, dim=0)[0], torch.tensor([0.0, float(1 - P)]))
    assert torch.equal(torch.max(got, dim=0)[0], torch.tensor([float(P - 1), 0.0]))
    assert hvd.allgather(torch.tensor(float(R)).unsqueeze(0)).tolist() == list(range(P))
    for src in range(P):
        got = hvd.broadcast(torch.tensor([R, 2 * R]), root_rank=src)
        assert got.tolist() == [src, 2 * src], got


@check
def horovod_torch_alias():
    # `import horovod.torch as hvd` scripts as written: the alias is sparsecomm.torch,
    # with Horovod's module paths under it and the exceptions its elastic scripts catch
    import horovod.torch as alias
    import horovod.torch.elastic
    from horovod.torch.mpi_ops import allreduce_async_, synchronize
    from horovod.torch.elastic.sampler import ElasticSampler
    from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
    assert alias is hvd and horovod.torch.elastic is hvd.elastic
    # scripts and libraries gate calls on Horovod's version (process sets: 0.23)
    version = tuple(int(v) for v in horovod.__version__.split(".")[:2])
    assert version >= (0, 28), horovod.__version__
    assert ElasticSampler is hvd.elastic.ElasticSampler
    assert HorovodInternalError is hvd.HorovodInternalError
    assert HostsUpdatedInterrupt is hvd.elastic.HostsUpdatedInterrupt
    s = alias.allreduce(torch.ones(2), average=False, name="alias.sum")
    assert torch.equal(s, torch.full((2,), float(P)))
    t = torch.full((2,), float(R))
    synchronize(allreduce_async_(t, average=True, name="alias.avg"))
    assert torch.allclose(t, torch.full((2,), (P - 1) / 2.0)), t


@check
def horovodrun_environment():
    # what horovodrun sets for each process, read by scripts before init (a device per
    # HOROVOD_LOCAL_RANK) and by Horovod's test suite, whose rank and size tests compare
    # hvd.rank() and hvd.size() with HOROVOD_RANK and HOROVOD_SIZE (without them, with
    # the MPI variables, which default to rank 0 of 1)
    env = {k: os.environ.get("HOROVOD_" + k) for k in
           ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")}
    want = {"RANK": hvd.rank(), "SIZE": hvd.size(), "LOCAL_RANK": hvd.local_rank(),
            "LOCAL_SIZE": hvd.local_size(), "CROSS_RANK": hvd.cross_rank(),
            "CROSS_SIZE": hvd.cross_size()}
    got = {k: None if v is None else int(v) for k, v in env.items()}
    assert got == want, "HOROVOD_* %s, not %s" % (got, want)
    assert os.environ.get("HOROVOD_HOSTNAME"), "HOROVOD_HOSTNAME unset"


sys.exit(1 if check.failed else 0)
