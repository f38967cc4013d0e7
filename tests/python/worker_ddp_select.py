#!/usr/bin/python3
"""Run under sparsecomm-run: the DDP hook's selection with top-k 1%.  With the default
selection="parameter" every parameter of a bucket is selected on its own before the
bucket is exchanged (its own k, at least one element, and its own residual), so after
every step every parameter's gradient holds a non-zero; with selection="bucket" (the
whole bucket selected as one tensor) the small bias beside the large weight gets nothing
in some step, SAFusion's case against sparsification behind fusion.  The averaged
gradients agree on every rank.  Prints `CHECK <name> ok|FAIL <why>`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import sparsecomm.torch as sct  # noqa: E402
from checks import Checks  # noqa: E402

STEPS = 8
check = Checks()
torch.set_num_threads(1)
sct.init()
sct.init_process_group("gloo")
R = sct.rank()


def run(selection):
    """STEPS steps of a 2-layer model under DDP with the hook; per step the parameters
    whose averaged gradient is all zero, and a digest of every gradient."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(400, 200), torch.nn.Linear(200, 3))
    ddp = DDP(model)
    ddp.register_comm_hook(sct.DDPHookState(sparsifier="topk", density=0.01,
                                            prefix="ddp_" + selection, selection=selection),
                           sct.ddp_hook)
    g = torch.Generator().manual_seed(100 + R)
    empty, digests = [], []
    for _ in range(STEPS):
        ddp.zero_grad()
        x = 50 * torch.randn(16, 400, generator=g)  # large inputs: weights' gradients dwarf the biases'
        ddp(x).pow(2).mean().backward()
        empty.append([n for n, p in model.named_parameters() if not p.grad.abs().sum() > 0])
        digests.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().sum().item())
    return empty, digests


@check
def ddp_parameter_selection_reaches_every_parameter():
    # from the second step each parameter's start repeats the step before's
    from sparsecomm import _rerun
    taken, real = [], _rerun.start

    def counted(r, g, ctx):
        h = real(r, g, ctx)
        taken.append(h is not None)
        return h

    _rerun.start = counted
    try:
        empty, digests = run("parameter")
    finally:
        _rerun.start = real
    if taken != [True] * (4 * (STEPS - 1)):
        raise AssertionError("repeated starts: %s" % taken)
    bad = [(s, e) for s, e in enumerate(empty) if e]
    if bad:
        raise AssertionError("steps with parameters that got nothing: %s" % bad)
    t = torch.tensor(digests, dtype=torch.float64)
    t0 = t.clone()
    sct.broadcast_(t0, root_rank=0, name="digests.parameter")
    if not torch.equal(t, t0):
        raise AssertionError("gradients differ from rank 0's: %s vs %s" % (digests, t0.tolist()))


@check
def ddp_bucket_selection_starves_small_parameters():
    empty, _ = run("bucket")
    if not any(empty):
        raise AssertionError("with the whole bucket selected every parameter still got "
                             "something in every step: the case is not exercised")
    print("bucket selection: parameters with nothing per step: %s" % empty, flush=True)


sct.shutdown()
sys.exit(1 if check.failed else 0)
