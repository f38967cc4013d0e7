#!/usr/bin/python3
"""Data-parallel MLP on the handwritten digits that scikit-learn ships (8x8 images,
1,797 samples, load_digits() works offline), with dense gradients sparsified by the
daemons: top-k with error feedback on the weight matrices (--sparsifier topk --density
0.01) while the small bias vectors travel dense (a per-parameter override).

    build/bin/sparsecomm-run -n 4 -- /usr/bin/python3 examples/pytorch/digits_mlp.py
    build/bin/sparsecomm-run -n 4 -- /usr/bin/python3 examples/pytorch/digits_mlp.py \\
        --sparsifier none                      # lossless, comparable with --backend gloo
    /usr/bin/python3 examples/pytorch/digits_mlp.py --backend gloo --spawn 4  # reference
    build/bin/sparsecomm-run -n 4 -- /usr/bin/python3 examples/pytorch/digits_mlp.py \\
        --device cuda                          # model, data and gradients on the GPU
    build/bin/sparsecomm-run -n 4 --nccl-hostid -- /usr/bin/python3 \\
        examples/pytorch/digits_mlp.py --device cuda --backend torchddp  # torch's DDP, NCCL

Each rank trains on its own shard (samples rank::size), batches of --batch samples per
step; `step=<n> loss=<x>` is rank 0's minibatch loss; the summary gives the loss and
accuracy of the final model on the whole data set (identical on every rank).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (also puts client/python on sys.path)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def data():
    px, label = _common.digits()
    x = torch.tensor(px, dtype=torch.float32) / 16.0
    y = torch.tensor(label, dtype=torch.int64)
    return x, y


def model_fn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def main(args, sync):
    x, y = data()
    n_train = 1500  # the rest is held out: the summary's test loss
    xt, yt = x[n_train:], y[n_train:]
    x, y = x[:n_train], y[:n_train]
    dev = sync.device
    x, y, xt, yt = x.to(dev), y.to(dev), xt.to(dev), yt.to(dev)
    xs, ys = x[sync.rank::sync.size], y[sync.rank::sync.size]
    model = model_fn(args.seed).to(dev)
    lr = args.lr if args.lr is not None else 0.1
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                          weight_decay=args.weight_decay)
    overrides = {"*.bias": {"sparsifier": "none"}}
    model, opt = sync.wrap(model, opt, overrides=overrides)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt.opt if hasattr(opt, "opt") else opt,
        lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    g = torch.Generator().manual_seed(args.seed * 1000 + sync.rank)
    lossf = nn.CrossEntropyLoss()
    losses = []
    timer = _common.Timer()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, xs.shape[0], (args.batch,), generator=g).to(dev)
        opt.zero_grad()
        loss = lossf(model(xs[idx]), ys[idx])
        loss.backward()
        _common.maybe_fail(args, sync, step)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps:
            _common.log(sync, "step=%d loss=%.6f" % (step, loss.item()))
    elapsed = timer.s()
    with torch.no_grad():
        full_loss = lossf(model(x), y).item()
        out = model(xt)
        test_loss = lossf(out, yt).item()
        acc = (out.argmax(1) == yt).float().mean().item()
    _common.log(sync, "summary: backend=%s device=%s ranks=%d steps=%d sparsifier=%s "
                "density=%g final_loss=%.6f test_loss=%.6f test_accuracy=%.4f "
                "steps_per_s=%.1f" % (args.backend, dev, sync.size, args.steps, args.sparsifier or args.sim_sparsifier
                 or "none", args.density, full_loss, test_loss, acc, args.steps / elapsed))
    _common.write_record(sync, args, dict(losses=losses, final_loss=full_loss, test_loss=test_loss,
                                          accuracy=acc,
                                          steps=args.steps, size=sync.size,
                                          backend=args.backend, seconds=elapsed))


if __name__ == "__main__":
    def extra(p):
        p.add_argument("--batch", type=int, default=32)
        p.add_argument("--weight-decay", type=float, default=1e-3)
    a = _common.parse(__doc__.splitlines()[0], extra)
    if (a.sparsifier is None and a.backend not in ("gloo", "torchddp") and
            "--sparsifier" not in sys.argv):
        a.sparsifier = "topk"
    _common.run(main, a)
