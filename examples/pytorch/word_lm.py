#!/usr/bin/python3
"""Data-parallel word model with natively sparse gradients on the King James Bible
(Debian's bible-kjv-text, read through `bible Gen1:1-Rev22:21`).

The model is CBOW with negative sampling: the mean of the input embeddings of the --window
words on each side of a position, passed through a small dense projection, scores the
centre word's output embedding against --negatives words drawn from the unigram^0.75
distribution.  Both embedding tables are nn.Embedding(sparse=True), so their gradients
are torch sparse COO tensors whose non-zero rows are the words of the step's window: they
travel through sparsecomm's COO path and are never densified in Python.  The projection's
gradient is dense.  The vocabulary is every distinct lower-case word, ordered by
frequency; rank r trains on the r-th contiguous 1/size of the text, --batch positions per
step.

    build/bin/sparsecomm-run -n 4 -- /usr/bin/python3 examples/pytorch/word_lm.py
    /usr/bin/python3 examples/pytorch/word_lm.py --backend gloo --spawn 4   # reference
    build/bin/sparsecomm-run -n 4 -- /usr/bin/python3 examples/pytorch/word_lm.py \\
        --device cuda   # sparse CUDA gradients through the COO path on the GPU

Prints `step=<n> loss=<x>` (rank 0's minibatch loss) and a summary with the mean loss of
the last 10 steps over every rank, steps/s and bytes on the wire per step (this node's
network interfaces other than lo: meaningful under `sparsecomm-run --netns`).
"""
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

_CACHE = {}


def corpus():
    """Token ids of the whole KJV text and the vocabulary (most frequent word first)."""
    if "c" not in _CACHE:
        text = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                              text=True).stdout.lower()
        words = re.findall(r"[a-z]+", text)
        freq = collections.Counter(words)
        vocab = sorted(freq, key=lambda w: (-freq[w], w))
        index = {w: i for i, w in enumerate(vocab)}
        ids = torch.tensor([index[w] for w in words], dtype=torch.int64)
        counts = torch.tensor([freq[w] for w in vocab], dtype=torch.float64)
        _CACHE["c"] = (ids, vocab, counts)
    return _CACHE["c"]


class CBOW(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim, sparse=True)
        self.out = nn.Embedding(vocab, dim, sparse=True)
        self.proj = nn.Linear(dim, dim)
        nn.init.uniform_(self.inp.weight, -0.5 / dim, 0.5 / dim)
        nn.init.uniform_(self.out.weight, -0.5 / dim, 0.5 / dim)

    def forward(self, ctx, centre, neg):
        h = self.proj(self.inp(ctx).mean(1))                      # B x D
        pos = (h * self.out(centre)).sum(1)                        # B
        negs = torch.bmm(self.out(neg), h.unsqueeze(2)).squeeze(2)  # B x K
        return -(F.logsigmoid(pos) + F.logsigmoid(-negs).sum(1)).mean()


def build(args, rank, size):
    ids, vocab, counts = corpus()
    n = ids.numel() // size
    shard = ids[rank * n:(rank + 1) * n]
    torch.manual_seed(args.seed)
    model = CBOW(len(vocab), args.dim)  # initialised on the cpu: the same on every device
    noise = counts.pow(0.75)
    return model, shard, noise / noise.sum()


def batches(args, shard, noise, rank):
    """(context, centre, negatives) for every step, deterministic per (seed, rank)."""
    g = torch.Generator().manual_seed(args.seed * 1000 + rank)
    w, B = args.window, args.batch
    span = shard.numel() - 2 * w
    offs = torch.arange(-w, w + 1)
    offs = offs[offs != 0]
    pos0 = 0
    while True:
        pos = (torch.arange(B) + pos0) % span + w
        pos0 = (pos0 + B) % span
        ctx = shard[pos.unsqueeze(1) + offs]
        neg = torch.multinomial(noise, B * args.negatives, replacement=True,
                                generator=g).view(B, args.negatives)
        yield ctx, shard[pos], neg


def train(args, sync, quiet=False):
    """Trains args.steps steps; returns the record (losses, timings, bytes)."""
    model, shard, noise = build(args, sync.rank, sync.size)
    model = model.to(sync.device)
    lr = args.lr if args.lr is not None else 2.0
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model, opt = sync.wrap(model, opt)
    data = batches(args, shard, noise, sync.rank)
    losses, t_start, b_start = [], None, None
    timer = _common.Timer()
    for step in range(1, args.steps + 1):
        if step == args.warmup + 1:  # time and count bytes after the warm-up steps
            t_start, b_start = timer.s(), _common.wire_bytes()
        ctx, centre, neg = (t.to(sync.device) for t in next(data))
        opt.zero_grad()
        loss = model(ctx, centre, neg)
        loss.backward()
        _common.maybe_fail(args, sync, step)
        opt.step()
        losses.append(loss.item())
        if not quiet and (step % args.log_every == 0 or step == args.steps):
            _common.log(sync, "step=%d loss=%.6f" % (step, loss.item()))
    if t_start is None:
        t_start, b_start = 0.0, (0, 0)
    secs = timer.s() - t_start
    b_end = _common.wire_bytes()
    measured = max(1, args.steps - args.warmup)
    tail = losses[-10:]
    return dict(backend=args.backend, size=sync.size, steps=args.steps,
                losses=losses, last10_loss=sync.all_ranks_mean(sum(tail) / len(tail)),
                steps_per_s=measured / secs if secs > 0 else 0.0,
                tx_bytes_per_step=(b_end[0] - b_start[0]) / measured,
                rx_bytes_per_step=(b_end[1] - b_start[1]) / measured,
                vocab=model.module.inp.num_embeddings if hasattr(model, "module")
                else model.inp.num_embeddings, dim=args.dim, batch=args.batch)


def main(args, sync):
    r = train(args, sync)
    _common.log(sync, "summary: backend=%s ranks=%d steps=%d vocab=%d dim=%d batch=%d "
                "last10_loss=%.6f steps_per_s=%.2f wire_tx_bytes_per_step=%.0f "
                "wire_rx_bytes_per_step=%.0f" %
                (r["backend"], r["size"], r["steps"], r["vocab"], r["dim"], r["batch"],
                 r["last10_loss"], r["steps_per_s"], r["tx_bytes_per_step"],
                 r["rx_bytes_per_step"]))
    _common.write_record(sync, args, r)


def add_args(p):
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--window", type=int, default=2)
    p.add_argument("--negatives", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)


if __name__ == "__main__":
    a = _common.parse(__doc__.splitlines()[0], add_args)
    _common.run(main, a)
