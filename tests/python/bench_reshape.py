#!/usr/bin/python3
"""Run under sparsecomm-run (not part of the suite): what a new shape under a name costs.
Times allreduces of one name at a fixed shape, then with the shape changing every call
(each call re-registers the buffer: sc_tensor_release, then sc_register_ex), and prints
the calls per second of both and the difference per call, on rank 0.  Then a Horovod
training loop whose batches have a variable length (each step allreduces the per-sample
losses and allgathers the predictions, shapes that follow the batch), against the same
loop with a fixed length: steps per second of both."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402

torch.set_num_threads(1)
hvd.init()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
BASE = int(sys.argv[2]) if len(sys.argv) > 2 else 4096


def run(shape_of):
    hvd.allreduce(torch.ones(shape_of(0)), name="bench.warm", op=hvd.Sum)
    hvd.barrier()
    t0 = time.perf_counter()
    for i in range(N):
        hvd.allreduce(torch.ones(shape_of(i)), name="bench", op=hvd.Sum)
    return (time.perf_counter() - t0) / N


fixed = run(lambda i: BASE)
varying = run(lambda i: BASE + (i % 2) * 64)  # a new shape every call


def train(length_of, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        n = length_of(i)
        x, y = torch.randn(n, 64), torch.randn(n, 1)
        opt.zero_grad()
        pred = model(x)
        per_sample = ((pred - y) ** 2).squeeze(1)
        per_sample.mean().backward()
        opt.step()
        hvd.allreduce(per_sample.detach(), name="per_sample_loss")
        hvd.allgather(pred.detach(), name="predictions")
    dt = (time.perf_counter() - t0) / steps
    opt.remove_hooks()
    return dt


fixed_step = train(lambda i: 48, N)
varying_step = train(lambda i: 32 + (i * 7919) % 33, N)  # 32 to 64, a new length each step
if hvd.rank() == 0:
    print("training: fixed batch length %.2f ms/step (%.0f steps/s), variable length "
          "%.2f ms/step (%.0f steps/s)" % (fixed_step * 1e3, 1 / fixed_step,
                                           varying_step * 1e3, 1 / varying_step), flush=True)
    print("reshape: %d floats, fixed shape %.1f us/call (%.0f calls/s), shape changing "
          "every call %.1f us/call (%.0f calls/s): one re-registration costs %.1f us" %
          (BASE, fixed * 1e6, 1 / fixed, varying * 1e6, 1 / varying,
           (varying - fixed) * 1e6), flush=True)
hvd.shutdown()
