#!/usr/bin/python3
"""A Horovod PyTorch training script whose only change is its import line: run under
sparsecomm-run (2 nodes x 2 trainers), it trains a 2-layer MLP on sklearn's digits with
uneven shards (rank r has 2 * (STEPS + r) batches) ended by hvd.join(), through
DistributedOptimizer(backward_passes_per_step=2, compression=hvd.Compression.fp16).
Prints `CHECK <name> ok|FAIL <why>`."""
import hashlib
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402  (was: import horovod.torch as hvd)
from checks import Checks  # noqa: E402

STEPS, BATCH = 12, 32
check = Checks()
torch.manual_seed(1234)
torch.set_num_threads(1)

hvd.init()
R, P = hvd.rank(), hvd.size()
layout = hvd.allgather_object((R, hvd.local_rank(), hvd.local_size()))

X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
g = torch.Generator().manual_seed(R)  # every rank its own shard order
order = torch.randint(0, len(X), (2 * (STEPS + R) * BATCH,), generator=g)
batches = [(X[i], y[i]) for i in order.split(BATCH)]

torch.manual_seed(R)  # different initial weights: broadcast_parameters must align them
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                               compression=hvd.Compression.fp16, backward_passes_per_step=2,
                               op=hvd.Average)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
config = hvd.broadcast_object({"lr": 0.1, "from": R} if R == 0 else None, root_rank=0)
gathered = hvd.allgather(torch.full((R + 1, 2), float(R)))  # a different row count per rank
handle = hvd.allreduce_async(torch.full((5,), float(R + 1)), name="async.sum", op=hvd.Sum)
while not hvd.poll(handle):
    pass
summed = hvd.synchronize(handle)
biggest = hvd.allreduce_(torch.full((3,), float(R)), name="inplace.max", op=hvd.Max)
halved = hvd.allreduce(torch.full((4,), 1.0 / 3 + R), average=True,
                       compression=hvd.Compression.fp16)
root_vals = hvd.broadcast_(torch.full((2,), float(R)), root_rank=P - 1)
scattered = hvd.reducescatter(torch.arange(2.0 * P).view(P, 2) * (R + 1), op=hvd.Sum)
# rank r sends rank q (r + q) % 2 + 1 rows of the value 10 r + q
a2a_splits = [(R + q) % 2 + 1 for q in range(P)]
exchanged, exchanged_splits = hvd.alltoall(
    torch.cat([torch.full((n, 2), 10.0 * R + q) for q, n in enumerate(a2a_splits)]),
    splits=torch.tensor(a2a_splits, dtype=torch.int32))
hvd.barrier()


def full_loss():
    with torch.no_grad():
        return F.cross_entropy(model(X), y).item()


def params_hash():
    h = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


loss_before = full_loss()
losses, averaged, grads_rounded = [], [], None
for i, (xb, yb) in enumerate(batches):
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    losses.append(loss.item())
    averaged.append(hvd.allreduce(loss.detach()).item())  # unnamed metric, every step
    if i % 2 == 1:
        if i == 1:  # the gradients as the optimizer gets them: rounded through float16
            opt.synchronize()
            grads_rounded = all(torch.equal(p.grad, p.grad.half().float())
                                for p in model.parameters())
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        opt.zero_grad()
    if i == 2 * STEPS - 1:  # every rank has made STEPS optimizer steps
        common_hash = params_hash()
last = hvd.join()
hvd.broadcast_parameters(model.state_dict(), root_rank=last)
hashes = hvd.allgather_object((common_hash, params_hash()))
all_losses = hvd.allgather_object(losses)
loss_after = full_loss()


@check
def ranks():
    assert sorted(r for r, _, _ in layout) == list(range(P)), layout
    assert all(0 <= lr < ls and ls == 2 for _, lr, ls in layout), layout
    assert hvd.is_initialized()


@check
def params_identical():
    assert len({c for c, _ in hashes}) == 1, "after %d common steps: %s" % (STEPS, hashes)
    assert len({f for _, f in hashes}) == 1, "after join and broadcast: %s" % hashes


@check
def fp16_rounded_grads():
    assert grads_rounded, "a reduced gradient is not a float16 value"


@check
def metric_allreduce_is_mean():
    for i in range(2 * STEPS):
        mean = sum(ls[i] for ls in all_losses) / P
        assert math.isclose(averaged[i], mean, rel_tol=1e-5), (i, averaged[i], mean)


@check
def allgather():
    want = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(P)])
    assert torch.equal(gathered, want), gathered


@check
def collectives():
    assert torch.equal(summed, torch.full((5,), P * (P + 1) / 2)), summed
    assert torch.equal(biggest, torch.full((3,), float(P - 1))), biggest
    # the sums travel in float16 (each node's partial sum rounded as it is sent, the
    # chunks of the ring rounded in different orders), the mean rounded to float16
    mean = torch.tensor([1.0 / 3 + r for r in range(P)]).double().sum() / P
    assert halved.dtype == torch.float32, halved.dtype
    assert torch.equal(halved, halved.half().float()), halved
    assert (halved.double() - mean).abs().max() <= 2 * 2.0 ** -10, (halved, mean)
    assert torch.equal(root_vals, torch.full((2,), float(P - 1))), root_vals
    want = torch.arange(2.0 * R, 2.0 * R + 2) * (P * (P + 1) / 2)
    assert torch.equal(scattered.flatten(), want), scattered


@check
def alltoall():
    want = torch.cat([torch.full(((r + R) % 2 + 1, 2), 10.0 * r + R) for r in range(P)])
    assert torch.equal(exchanged, want), exchanged
    assert exchanged_splits.tolist() == [(r + R) % 2 + 1 for r in range(P)], exchanged_splits


@check
def broadcast_object():
    assert config == {"lr": 0.1, "from": 0}, config


@check
def join_last_rank():
    assert last == P - 1, "join returned %d; rank %d has the most batches" % (last, P - 1)


@check
def loss_decreased():
    assert loss_after < 0.75 * loss_before, "%.4f -> %.4f" % (loss_before, loss_after)


hvd.shutdown()
sys.exit(1 if check.failed else 0)
