#!/usr/bin/python3
"""Benchmark: fusion plans against sparsification behind fusion, on a deep residual MLP
(scikit-learn's digits) trained data-parallel through the daemons with top-k 1% and
error feedback.

The model: Linear(64, W), --depth residual blocks x + relu(Linear(W, W)(x)) scaled by
1/sqrt(depth), Linear(W, 10); every Linear has a bias, so 2 x (depth + 2) parameter
tensors (52 with the default --depth 24, --width 128: about 410,000 parameters).  Each
rank trains on its own shard (samples rank::size), --batch samples per step, SGD with
momentum; every rank starts from rank 0's parameters and the same seed.

Modes (one per invocation, --mode; the driver runs all four):
  layerwise   DistributedOptimizer, top-k --density per tensor (the daemon keeps each
              tensor's residual), daemons at fusion_mode=layerwise (one buffer a tensor);
  fused_topk  sparsification behind fusion, the usual Horovod + compression way: the
              script flattens every gradient into ONE tensor after backward and
              allreduces it with top-k --density (one selection over the fused buffer,
              one residual); the daemons' fusion_mode does not matter (one tensor);
  aligned     as layerwise, daemons at fusion_mode=aligned (fusion_buffers buffers of
              equal tensor counts);
  adaptive    as layerwise, daemons at fusion_mode=adaptive (SAFusion's buffers sized
              from measured times, long-tail elimination);
  dense       DistributedOptimizer without a sparsifier (the lossless dense ring),
              daemons at fusion_mode=aligned: the baseline of --compression (not in the
              driver's default --modes);
  adaptive_batched  as adaptive, with DistributedOptimizer's submit_batch_us at
              --submit-batch-us (the hooks' submissions sent in batches, one wake-up of
              the daemon a batch; not in the default --modes).
--compression fp16|bf16|none is DistributedOptimizer's (sparsecomm.torch.Compression):
fp16 and bf16 send a dense tensor's sums as 16-bit values (half the wire bytes); a
sparsified tensor keeps the 32-bit wire and has its values rounded instead.  Its wire
bytes against fp32's, and the final loss:

    build/bin/sparsecomm-run -n 4 --netns --rate 1gbit \\
        --daemon-arg --fusion_mode --daemon-arg aligned -- \\
        /usr/bin/python3 bench/pytorch_fusion.py --mode dense --compression fp16
The daemons' fusion_mode is set by the launcher (--daemon-arg --fusion_mode
--daemon-arg MODE); the script checks it with `sparsectl config get` and fails when it
differs from the mode asked for.

    # all four, one after the other, 4 nodes at 1 Gbit/s (root: network namespaces);
    # --loss-seeds: layerwise and adaptive again at each seed (loopback), mean final loss
    /usr/bin/python3 bench/pytorch_fusion.py --all --steps 300 --warmup 50 --json F \
        --loss-seeds 1,2,3,4,5
    # the single fused buffer against adaptive, interleaved four times (goals from the
    # medians, and each round's own ratio)
    /usr/bin/python3 bench/pytorch_fusion.py --all --modes fused_topk,adaptive --rounds 4
    # one mode by hand
    build/bin/sparsecomm-run -n 4 --netns --rate 1gbit \\
        --daemon-arg --fusion_mode --daemon-arg adaptive \\
        --daemon-arg --timeline_file --daemon-arg /tmp/tl-%r.json -- \\
        /usr/bin/python3 bench/pytorch_fusion.py --mode adaptive --json-out rec.json

--optimizer-cost (under sparsecomm-run, any node count) times one trainer's CPU per
step through DistributedOptimizer against the same step without it, in interleaved
blocks: what the optimizer's hooks, submissions, waits and copies cost the trainer.

Per mode, over the timed steps (after --warmup untimed ones), averaged over ranks:
steps/s; wire bytes per step as the sum of `bytes_sent` over the gradient tensors in
`sparsectl --json stats` of the rank's node (the daemon's data-plane payload; the bytes
of the node's link from /proc/net/dev are recorded too, as link_tx_per_step); buffers per
step (each buffer is one metadata round) counted from the timeline's "buffer" events on
the engine.comm lane, and the fusion plan's buffer count from stats; missing tensors per
step: parameter tensors whose synchronized gradient is all zero while this rank's local
gradient was not (mean over the timed steps and ranks, the most in any step, and the mean
over every step, warm-up included); the loss of the
final model on the whole training set (and the mean minibatch loss of the last 10 steps);
the CPU time per step of the trainer and of its node's daemon (all their threads, from
/proc: on a host whose cores the nodes share, the modes' steps/s follow their CPU), and
the daemon's wake-ups per step (its threads' voluntary context switches: a count that
the host's load moves less than it moves the CPU time); and from each node's timeline, clipped to the timed window, the share of the window the
engine.comm lane (buffer events) and the engine.compute lane (compress events) sat idle.
The timeline shares are computed by the driver once the daemons have closed their files
(run by hand, pass the files and the record to --analyze).
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tree import ROOT, program  # noqa: E402  (and the Python package on sys.path)

MODES = ["layerwise", "fused_topk", "aligned", "adaptive", "dense", "adaptive_batched"]
DAEMON_MODE = {"layerwise": "layerwise", "fused_topk": "layerwise", "aligned": "aligned",
               "adaptive": "adaptive", "dense": "aligned", "adaptive_batched": "adaptive"}


SPARSECTL = program("sparsectl")
LAUNCHER = program("sparsecomm-run")


def add_args(p):
    p.add_argument("--mode", choices=MODES, default="adaptive")
    p.add_argument("--all", action="store_true", help="driver: run every mode in turn")
    p.add_argument("--modes", default=",".join(MODES[:4]), help="driver: comma list")
    p.add_argument("--compression", choices=["none", "fp16", "bf16"], default="none",
                   help="DistributedOptimizer's compression (fp16/bf16: a 16-bit wire)")
    p.add_argument("--nodes", type=int, default=4, help="driver: nodes")
    p.add_argument("--rate", default="1gbit", help="driver: link rate (--netns)")
    p.add_argument("--no-netns", action="store_true", help="driver: run on loopback")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--depth", type=int, default=24)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--submit-batch-us", type=int, default=3000,
                   help="mode adaptive_batched: DistributedOptimizer's submit_batch_us")
    p.add_argument("--log-every", type=int, default=50, help="trainer: rank 0's loss lines")
    p.add_argument("--loss-seeds", default="",
                   help="driver: comma list of seeds for which layerwise and adaptive also "
                        "run on loopback, to compare their mean final loss (a deep net's "
                        "final loss moves by tens of percent with the order of float sums)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--json-out", default=None, help="trainer: rank 0 writes its record")
    p.add_argument("--scheme", default=None,
                   help="driver: the daemons' scheme (default: theirs, auto), to compare "
                        "the modes without the scheme choice")
    p.add_argument("--rounds", type=int, default=1,
                   help="driver: run the modes in turn this many times, interleaved (the "
                        "host's load drifts over minutes); the goals then take each "
                        "mode's median, and each round's own ratios are printed too")
    p.add_argument("--json", default=None, help="driver: write every mode's record here")
    p.add_argument("--optimizer-cost", action="store_true",
                   help="trainer: the CPU a DistributedOptimizer step (top-k --density, "
                        "every rank) costs over the same step without it, in interleaved "
                        "blocks of --steps (see optimizer_cost)")
    p.add_argument("--blocks", type=int, default=5, help="--optimizer-cost: blocks each")
    p.add_argument("--analyze", nargs="+", default=None, metavar="FILE",
                   help="RECORD TIMELINE...: add the timeline shares to a record, print")
    return p


# ---------------------------------------------------------------------------------------
# the trainer

def optimizer_cost(a):
    """This trainer's CPU time per step (and wall time) of the model's step through
    DistributedOptimizer with top-k --density, against the bare step (forward, backward
    and the wrapped SGD's step, no reduction) on the same model and batch, in --blocks
    interleaved blocks of --steps steps each after --warmup of each kind; the medians over
    the blocks, rank 0's.  The difference is what the optimizer costs the trainer: its
    hooks, the submissions, the waits and the results' copies (the daemon's work is its
    own process's)."""
    import statistics
    import torch
    import torch.nn as nn
    import sparsecomm as sc
    import sparsecomm.torch as sct
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    import _common

    _common.set_threads(1)
    sc.init(timeout=a.timeout)
    model = model_fn(a.seed, a.depth, a.width)
    base = torch.optim.SGD(model.parameters(), lr=0.0)
    opt = sct.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                   timeout=a.timeout, sparsifier="topk", density=a.density)
    g = torch.Generator().manual_seed(a.seed)
    x = torch.randn(a.batch, 64, generator=g)
    y = torch.randint(0, 10, (a.batch,), generator=g)
    lossf = nn.CrossEntropyLoss()

    def through(o):
        o.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        o.step()

    def block(step_fn):
        c0, t0 = time.process_time(), time.monotonic()
        for _ in range(a.steps):
            step_fn()
        return ((time.process_time() - c0) / a.steps * 1e3,
                (time.monotonic() - t0) / a.steps * 1e3)

    for _ in range(a.warmup):
        through(opt)
    opt.remove_hooks()
    for _ in range(a.warmup):
        through(base)
    got = {"optimizer": [], "bare": []}
    for _ in range(a.blocks):
        opt._register_hooks()
        got["optimizer"].append(block(lambda: through(opt)))
        opt.remove_hooks()
        got["bare"].append(block(lambda: through(base)))
    opt._register_hooks()
    rec = {k: {"cpu_ms": statistics.median(c for c, _ in v),
               "wall_ms": statistics.median(w for _, w in v)} for k, v in got.items()}
    rec.update(ranks=sc.size(), tensors=len(list(model.parameters())), steps=a.steps,
               blocks=a.blocks, density=a.density,
               optimizer_cost_cpu_ms=rec["optimizer"]["cpu_ms"] - rec["bare"]["cpu_ms"])
    rec.update(start_wait_alone(opt, model, a.steps))
    if sc.rank() == 0:
        print("optimizer step %.2f ms CPU (%.2f wall), bare step %.2f ms CPU (%.2f wall): "
              "the optimizer costs %.2f ms of CPU a step, %.1f us a tensor" % (
                  rec["optimizer"]["cpu_ms"], rec["optimizer"]["wall_ms"],
                  rec["bare"]["cpu_ms"], rec["bare"]["wall_ms"],
                  rec["optimizer_cost_cpu_ms"],
                  rec["optimizer_cost_cpu_ms"] * 1e3 / rec["tensors"]), flush=True)
        print("alone, on this thread: a tensor's repeated start %.1f us, the wait of one "
              "that has ended %.1f us (medians over %d rounds of %d tensors)" % (
                  rec["start_us"], rec["ended_wait_us"], a.steps, rec["tensors"]),
              flush=True)
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(rec, f, indent=1)
    sc.shutdown()

def start_wait_alone(opt, model, rounds):
    """The optimizer's per-tensor work apart from the training step, in this thread's CPU
    time: each parameter's repeated start (sparsecomm._rerun, as from its second step),
    then, once the last has ended (waited for untimed), each other's wait.  Every rank
    runs the same rounds, so the operations complete."""
    import statistics
    import sparsecomm as sc
    from sparsecomm import _rerun
    ps = [p for p in model.parameters() if p in opt._rerun and p.grad is not None]
    starts, waits = [], []
    for _ in range(rounds):
        c0 = time.thread_time()
        hs = [_rerun.start(opt._rerun[p], p.grad, sc._ctx) for p in ps]
        c1 = time.thread_time()
        if None in hs:
            sys.exit("start_wait_alone: a start could not be repeated")
        hs[-1].wait()
        c2 = time.thread_time()
        for h in hs[:-1]:
            h.wait()
        c3 = time.thread_time()
        starts.append((c1 - c0) / len(hs))
        waits.append((c3 - c2) / max(1, len(hs) - 1))
    return dict(start_us=statistics.median(starts) * 1e6,
                ended_wait_us=statistics.median(waits) * 1e6)


def _proc_cpu_s(pid):
    """User + system CPU seconds of process pid, all its threads (/proc/PID/stat)."""
    with open("/proc/%s/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_wakeups(pid):
    """The voluntary context switches of process pid, all its threads: how often its
    threads went to sleep, and so were woken (/proc/PID/task/TID/status)."""
    total = 0
    for tid in os.listdir("/proc/%s/task" % pid):
        try:
            with open("/proc/%s/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            continue
    return total


def node_cpu():
    """(this trainer's CPU seconds, the CPU seconds of the daemons in this trainer's
    network namespace, how many daemons that is, those daemons' wake-ups): under --netns
    a node's own daemon; on loopback every node's, so that their mean is one daemon's."""
    own = _proc_cpu_s("self")
    try:
        ns = os.readlink("/proc/self/ns/net")
    except OSError:
        return own, 0.0, 0, 0
    total, n, wakes = 0.0, 0, 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != "sparsecommd":
                    continue
            if os.readlink("/proc/%s/ns/net" % pid) != ns:
                continue
            total += _proc_cpu_s(pid)
            wakes += _proc_wakeups(pid)
            n += 1
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return own, total, n, wakes

def model_fn(seed, depth, width):
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(64, width)
            self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
            self.out = nn.Linear(width, 10)
            self.scale = 1.0 / math.sqrt(depth)

        def forward(self, x):
            x = torch.relu(self.inp(x))
            for b in self.blocks:
                x = x + self.scale * torch.relu(b(x))
            return self.out(x)

    torch.manual_seed(seed)
    return Net()


def sparsectl(*args):
    out = subprocess.run([SPARSECTL, "--json"] + list(args), capture_output=True, text=True,
                         timeout=30)
    return json.loads(out.stdout)


def grad_stats(prefix):
    """bytes_sent, bytes_received, calls summed over this node's tensors named prefix*,
    and the fusion plan."""
    s = sparsectl("stats")
    tx = rx = calls = 0
    for t in s["tensors"]:
        if t["name"].startswith(prefix):
            tx += t["bytes_sent"]
            rx += t["bytes_received"]
            calls += t["calls"]
    return tx, rx, calls, s.get("fusion", {}), s.get("fused_buffers", 0)


def train(a):
    import torch
    import torch.nn as nn
    import sparsecomm as sc
    import sparsecomm.torch as sct
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    import _common  # wire_bytes, digits

    _common.set_threads(1)  # torch's threads and OpenBLAS's
    sc.init(timeout=a.timeout)
    rank, size = sc.rank(), sc.size()
    cfg_mode = [e["value"] for e in sparsectl("config", "get", "fusion_mode")["config"]
                if e["key"] == "fusion_mode"][0]
    if a.mode != "fused_topk" and cfg_mode != DAEMON_MODE[a.mode]:
        sys.exit("rank %d: the daemons run fusion_mode %s, not %s (pass --daemon-arg "
                 "--fusion_mode --daemon-arg %s)" % (rank, cfg_mode, a.mode, a.mode))

    px, label = _common.digits()
    x = torch.tensor(px, dtype=torch.float32) / 16.0
    y = torch.tensor(label, dtype=torch.int64)
    xs, ys = x[rank::size], y[rank::size]
    model = model_fn(a.seed, a.depth, a.width)
    params = [(n, p) for n, p in model.named_parameters()]
    sct.broadcast_parameters(model.state_dict(), root_rank=0)
    base = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    local_nz = {}
    if a.mode == "fused_topk":
        opt = base
        numels = [p.numel() for _, p in params]
        flat = torch.zeros(sum(numels))
    else:
        comp = getattr(sct.Compression, a.compression)
        sp = dict(sparsifier="topk", density=a.density) if a.mode != "dense" else {}
        opt = sct.DistributedOptimizer(
            base, named_parameters=model.named_parameters(), timeout=a.timeout,
            compression=comp, submit_batch_us=(a.submit_batch_us
                                               if a.mode == "adaptive_batched" else 0), **sp)
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)
    lossf = nn.CrossEntropyLoss()
    barrier = torch.zeros(1)

    def sync_barrier():
        sc.allreduce_(barrier, name="bench.barrier", average=False)

    # the barrier's tensor is registered now, before the warm-up: a tensor new to the
    # daemons re-plans an adaptive plan from the start ("from tensors"), which would
    # otherwise happen at the first timed step and be re-measured inside the timed window
    sync_barrier()
    losses, missing, missing_all = [], [], []
    snap0 = None
    t0 = t1 = None
    for step in range(1, a.steps + 1):
        if step == a.warmup + 1:
            snap0 = grad_stats("grad.") + (_common.wire_bytes(),)
            sync_barrier()
            cpu0 = node_cpu()
            t0 = time.monotonic()
        idx = torch.randint(0, xs.shape[0], (a.batch,), generator=g)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xs[idx]), ys[idx])
        loss.backward()
        if a.mode == "fused_topk":
            off = 0
            for (n, p), k in zip(params, numels):
                local_nz[n] = bool(p.grad.any())
                flat[off:off + k].copy_(p.grad.reshape(-1))
                off += k
            if a.compression == "none":
                sc.allreduce_(flat, name="grad.fused", average=True, sparsifier="topk",
                              density=a.density)
            else:  # a sparsified tensor keeps 32 bits: the compression only rounds
                sct.allreduce_(flat, name="grad.fused", op=sct.Average, sparsifier="topk",
                               density=a.density,
                               compression=getattr(sct.Compression, a.compression))
            off = 0
            for (n, p), k in zip(params, numels):
                p.grad.copy_(flat[off:off + k].view_as(p))
                off += k
            miss = sum(1 for n, p in params if local_nz[n] and not bool(p.grad.any()))
            opt.step()
        else:
            # the local gradient, read as the single buffer's is: DistributedOptimizer's
            # hooks copied p.grad into the shared buffers, and synchronize() writes the
            # results back into it (a tensor hook on every parameter, as this once did,
            # cost the trainer 52 Python calls a step the single buffer does not make)
            for n, p in params:
                local_nz[n] = p.grad is not None and bool(p.grad.any())
            opt.synchronize()
            miss = sum(1 for n, p in params if local_nz.get(n) and not bool(p.grad.any()))
            with opt.skip_synchronize():
                opt.step()
        losses.append(loss.item())
        missing_all.append(miss)
        if step > a.warmup:
            missing.append(miss)
        if rank == 0 and (step % a.log_every == 0 or step == a.steps):
            print("step=%d loss=%.4f missing=%d" % (step, loss.item(), miss), flush=True)
    t1 = time.monotonic()
    cpu1 = node_cpu()
    sync_barrier()
    snap1 = grad_stats("grad.") + (_common.wire_bytes(),)
    timed = a.steps - a.warmup
    with torch.no_grad():
        full_loss = lossf(model(x), y).item()
        acc = (model(x).argmax(1) == y).float().mean().item()

    # every rank's numbers to rank 0, through the daemons (sum of a vector with one slot
    # per rank and quantity)
    q = ["steps_per_s", "bytes_sent", "bytes_received", "link_tx", "calls", "missing_mean",
         "missing_max", "missing_all_mean", "t0", "t1", "trainer_cpu", "daemon_cpu",
         "daemon_wakeups"]
    v = torch.zeros(size * len(q), dtype=torch.float64)
    mine = [timed / (t1 - t0), (snap1[0] - snap0[0]) / timed, (snap1[1] - snap0[1]) / timed,
            (snap1[5][0] - snap0[5][0]) / timed, (snap1[2] - snap0[2]) / timed,
            sum(missing) / max(1, len(missing)), max(missing) if missing else 0,
            sum(missing_all) / len(missing_all), t0, t1,
            (cpu1[0] - cpu0[0]) / timed * 1e3,
            (cpu1[1] - cpu0[1]) / max(1, cpu1[2]) / timed * 1e3,
            (cpu1[3] - cpu0[3]) / max(1, cpu1[2]) / timed]
    v[rank * len(q):(rank + 1) * len(q)] = torch.tensor(mine, dtype=torch.float64)
    sc.allreduce_(v, name="bench.gather", average=False)
    per = [dict(zip(q, v[r * len(q):(r + 1) * len(q)].tolist())) for r in range(size)]
    if rank == 0:
        mean = lambda k: sum(r[k] for r in per) / size  # noqa: E731
        fusion = snap1[3]
        rec = dict(mode=a.mode, compression=a.compression,
                   daemon_fusion_mode=fusion.get("mode"), ranks=size,
                   steps=a.steps, warmup=a.warmup, seed=a.seed, depth=a.depth,
                   width=a.width, batch=a.batch, lr=a.lr, density=a.density,
                   tensors=len(params), numel=sum(p.numel() for _, p in params),
                   steps_per_s=mean("steps_per_s"),
                   bytes_sent_per_step=mean("bytes_sent"),
                   bytes_received_per_step=mean("bytes_received"),
                   link_tx_per_step=mean("link_tx"),
                   tensor_calls_per_step=mean("calls"),
                   plan_version=fusion.get("plan_version"),
                   # buffers of the plan that hold gradients (the plan also covers the
                   # broadcast and bench.* tensors); layerwise has no plan: 0
                   plan_buffers=sum(1 for b in fusion.get("buffers", [])
                                    if any(t.startswith("grad.") for t in b["tensors"])),
                   trainer_cpu_ms_per_step=mean("trainer_cpu"),
                   daemon_cpu_ms_per_step=mean("daemon_cpu"),
                   daemon_wakeups_per_step=mean("daemon_wakeups"),
                   missing_per_step=mean("missing_mean"),
                   missing_max=max(r["missing_max"] for r in per),
                   missing_all_steps_per_step=mean("missing_all_mean"),
                   final_loss=full_loss, train_accuracy=acc,
                   last10_loss=sum(losses[-10:]) / len(losses[-10:]),
                   windows=[[r["t0"], r["t1"]] for r in per],
                   netns=bool(os.environ.get("SPARSECOMM_NETNS_ADDRS")),
                   rate=os.environ.get("SPARSECOMM_NETNS_RATE", ""))
        print("record: " + json.dumps({k: v for k, v in rec.items() if k != "windows"}),
              flush=True)
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(rec, f)
    sc.shutdown()


# ---------------------------------------------------------------------------------------
# the timeline

def read_events(path):
    """The complete events of a Chrome-trace file, one per line (a file cut short by a
    daemon that did not close it loses only its last line)."""
    ev = []
    with open(path) as f:
        for line in f:
            line = line.strip().rstrip(",")
            if line.startswith("{\"traceEvents\":["):
                line = line[len("{\"traceEvents\":["):]
            if not line.startswith("{\"name\""):
                continue
            try:
                ev.append(json.loads(line))
            except ValueError:
                continue
    return ev


def busy(intervals, lo, hi):
    """Length of the union of intervals clipped to [lo, hi]."""
    tot, end = 0.0, lo
    for s, e in sorted(intervals):
        s, e = max(s, end), min(e, hi)
        if e > s:
            tot += e - s
            end = e
    return tot


def timeline_shares(rec, files):
    """Idle shares of the engine's two lanes in each node's timed window, and the buffer
    events per step, averaged over nodes."""
    comm_idle, comp_idle, bufs, nodes = [], [], [], 0
    for path in files:
        ev = read_events(path)
        if not ev:
            continue
        pid = ev[0].get("pid", 0)
        if pid >= len(rec["windows"]):
            continue
        lo, hi = (w * 1e6 for w in rec["windows"][pid])
        # thread lanes are named "thread <name>", tensor lanes by the tensor's name
        lanes = {e["tid"]: e["args"]["name"] for e in ev
                 if e.get("ph") == "M" and e["name"] == "thread_name"}
        comm = [t for t, n in lanes.items() if n == "thread engine.comm"]
        comp = [t for t, n in lanes.items() if n in ("thread engine.compute", "thread engine")]
        xs = [e for e in ev if e.get("ph") == "X"]
        ci = [(e["ts"], e["ts"] + e["dur"]) for e in xs
              if e["tid"] in comm and e["name"] == "buffer"]
        pi = [(e["ts"], e["ts"] + e["dur"]) for e in xs
              if e["tid"] in comp and e["name"] == "compress"]
        win = hi - lo
        comm_idle.append(1 - busy(ci, lo, hi) / win)
        comp_idle.append(1 - busy(pi, lo, hi) / win)
        bufs.append(sum(1 for s, _ in ci if lo <= s < hi) / (rec["steps"] - rec["warmup"]))
        nodes += 1
    if nodes:
        rec["comm_idle_share"] = sum(comm_idle) / nodes
        rec["compute_idle_share"] = sum(comp_idle) / nodes
        rec["buffers_per_step"] = sum(bufs) / nodes
        rec["timeline_nodes"] = nodes
    return rec


# ---------------------------------------------------------------------------------------
# the driver

COLS = [("mode", "mode", "%s"), ("compression", "compression", "%s"),
        ("steps/s", "steps_per_s", "%.2f"),
        ("wire B/step (stats sent)", "bytes_sent_per_step", "%.0f"),
        ("link tx B/step", "link_tx_per_step", "%.0f"),
        ("buffers/step (timeline)", "buffers_per_step", "%.2f"),
        ("plan buffers", "plan_buffers", "%d"),
        ("missing tensors/step (max)", None, None),
        ("missing/step, all steps", "missing_all_steps_per_step", "%.2f"),
        ("final loss", "final_loss", "%.4f"), ("last10 loss", "last10_loss", "%.4f"),
        ("trainer CPU ms/step", "trainer_cpu_ms_per_step", "%.1f"),
        ("daemon CPU ms/step", "daemon_cpu_ms_per_step", "%.1f"),
        ("daemon wake-ups/step", "daemon_wakeups_per_step", "%.0f"),
        ("comm idle", "comm_idle_share", "%.2f"),
        ("compute idle", "compute_idle_share", "%.2f")]


def table(recs):
    lines = ["| " + " | ".join(c[0] for c in COLS) + " |",
             "|" + "---|" * len(COLS)]
    for r in recs:
        cells = []
        for _, k, fmt in COLS:
            if k is None:
                cells.append("%.2f (%d)" % (r.get("missing_per_step", float("nan")),
                                            r.get("missing_max", -1)))
            elif k in r and r[k] is not None:
                cells.append(fmt % r[k])
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def loss_seeds(a, seeds, work):
    """Layerwise and adaptive at every seed on loopback (the loss does not depend on the
    link): the mean final loss of each and their relative difference, with the spread
    over seeds for scale.  Fusion changes the order of float sums, not the math (the two
    modes' losses agree to the printed digit for the first tens of steps), and a deep net
    amplifies such differences: one seed's difference says little, the mean does."""
    import statistics
    final = {"layerwise": [], "adaptive": []}
    for seed in seeds:
        for mode in final:
            rec_path = os.path.join(work, "loss-%s-%d.json" % (mode, seed))
            cmd = [LAUNCHER, "-n", str(a.nodes), "--timeout", "900",
                   "--daemon-arg", "--fusion_mode", "--daemon-arg", DAEMON_MODE[mode],
                   "--", sys.executable, os.path.abspath(__file__), "--mode", mode,
                   "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(seed),
                   "--depth", str(a.depth), "--width", str(a.width), "--batch",
                   str(a.batch), "--lr", str(a.lr), "--density", str(a.density),
                   "--timeout", str(a.timeout), "--compression", a.compression,
                   "--json-out", rec_path]
            if subprocess.call(cmd, stdout=subprocess.DEVNULL) != 0 or \
                    not os.path.exists(rec_path):
                print("== loss run %s seed %d failed" % (mode, seed), flush=True)
                continue
            with open(rec_path) as f:
                final[mode].append(json.load(f)["final_loss"])
            print("loss seed %d %-9s final loss %.4f" % (seed, mode, final[mode][-1]),
                  flush=True)
    out = {}
    if len(final["layerwise"]) == len(seeds) and len(final["adaptive"]) == len(seeds):
        ml, ma = statistics.mean(final["layerwise"]), statistics.mean(final["adaptive"])
        out["loss_seeds"] = len(seeds)
        out["layerwise_mean_final_loss"] = ml
        out["adaptive_mean_final_loss"] = ma
        out["adaptive_mean_loss_rel_diff"] = abs(ma - ml) / ml
        if len(seeds) > 1:
            out["layerwise_final_loss_rel_sd"] = statistics.stdev(final["layerwise"]) / ml
    return out


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def goals_of(by):
    """The issue's goals from one record per mode (by: mode -> record)."""
    goals = {}
    if "adaptive" in by and "layerwise" in by:
        goals["adaptive_over_layerwise_steps"] = (by["adaptive"]["steps_per_s"] /
                                                  by["layerwise"]["steps_per_s"])
        goals["adaptive_loss_rel_diff"] = (abs(by["adaptive"]["final_loss"] -
                                               by["layerwise"]["final_loss"]) /
                                           by["layerwise"]["final_loss"])
    if "adaptive" in by and "aligned" in by:
        goals["adaptive_over_aligned_steps"] = (by["adaptive"]["steps_per_s"] /
                                                by["aligned"]["steps_per_s"])
    if "aligned" in by and "layerwise" in by:
        goals["aligned_over_layerwise_steps"] = (by["aligned"]["steps_per_s"] /
                                                 by["layerwise"]["steps_per_s"])
    if "adaptive" in by and "fused_topk" in by:
        goals["adaptive_over_fused_topk_steps"] = (by["adaptive"]["steps_per_s"] /
                                                   by["fused_topk"]["steps_per_s"])
    if "adaptive_batched" in by and "fused_topk" in by:
        goals["adaptive_batched_over_fused_topk_steps"] = (
            by["adaptive_batched"]["steps_per_s"] / by["fused_topk"]["steps_per_s"])
    if "adaptive_batched" in by and "adaptive" in by:
        goals["adaptive_batched_over_adaptive_steps"] = (
            by["adaptive_batched"]["steps_per_s"] / by["adaptive"]["steps_per_s"])
    return goals


def drive(a):
    recs = []
    work = tempfile.mkdtemp(prefix="sc-fusion-")
    modes = a.modes.split(",")
    runs = [(r, m) for r in range(1, max(1, a.rounds) + 1) for m in modes]
    for rnd, mode in runs:
        tag = mode if a.rounds <= 1 else "%s-r%d" % (mode, rnd)
        rec_path = os.path.join(work, tag + ".json")
        tl = os.path.join(work, tag + "-tl-%r.json")
        cmd = [LAUNCHER, "-n", str(a.nodes), "--timeout", "900"]
        if not a.no_netns:
            cmd += ["--netns", "--rate", a.rate]
        cmd += ["--daemon-arg", "--fusion_mode", "--daemon-arg", DAEMON_MODE[mode],
                "--daemon-arg", "--timeline_file", "--daemon-arg", tl]
        if a.scheme:
            cmd += ["--daemon-arg", "--scheme", "--daemon-arg", a.scheme]
        cmd += ["--", sys.executable, os.path.abspath(__file__), "--mode", mode,
                "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(a.seed),
                "--depth", str(a.depth), "--width", str(a.width), "--batch", str(a.batch),
                "--lr", str(a.lr), "--density", str(a.density), "--timeout", str(a.timeout),
                "--compression", a.compression, "--submit-batch-us", str(a.submit_batch_us),
                "--json-out", rec_path]
        load0 = loadavg()
        t = time.monotonic()
        print("== %s (load %s): %s" % (tag, load0, " ".join(cmd)), flush=True)
        rc = subprocess.call(cmd)
        if rc != 0 or not os.path.exists(rec_path):
            print("== %s failed (exit %d)" % (tag, rc), flush=True)
            continue
        with open(rec_path) as f:
            rec = json.load(f)
        rec = timeline_shares(rec, sorted(glob.glob(os.path.join(work, tag + "-tl-*.json"))))
        rec["load_before"], rec["load_after"] = load0, loadavg()
        rec["wall_s"] = time.monotonic() - t
        rec["round"] = rnd
        recs.append(rec)
    print()
    cores = len(os.sched_getaffinity(0))
    print("%d nodes%s on %d cores (%.1f trainers and daemons a core), %d steps (%d "
          "untimed), seed %d, depth %d width %d batch %d/rank, top-k density %g, %d "
          "tensors" % (
              a.nodes, "" if a.no_netns else " at " + a.rate, cores, 2.0 * a.nodes / cores,
              a.steps, a.warmup, a.seed, a.depth, a.width, a.batch, a.density,
              recs[0]["tensors"] if recs else 0))
    shown = [dict(r, mode="%s #%d" % (r["mode"], r["round"])) if a.rounds > 1 else r
             for r in recs]
    print(table(shown))
    for r in shown:
        print("%s: load %s -> %s, %.0f s wall, train accuracy %.3f" % (
            r["mode"], r["load_before"], r["load_after"], r["wall_s"], r["train_accuracy"]))
    if a.rounds > 1:
        # each round's own ratios (its modes ran minutes apart at most), then the goals
        # of each mode's median steps/s and final loss
        for rnd in range(1, a.rounds + 1):
            g = goals_of({r["mode"]: r for r in recs if r["round"] == rnd})
            print("round %d: %s" % (rnd, ", ".join("%s %.3f" % kv for kv in g.items())))
        by = {}
        for m in modes:
            mine = [r for r in recs if r["mode"] == m]
            if mine:
                by[m] = dict(steps_per_s=median([r["steps_per_s"] for r in mine]),
                             final_loss=median([r["final_loss"] for r in mine]))
                print("%s: median %.2f steps/s over %d rounds (%s)" % (
                    m, by[m]["steps_per_s"], len(mine),
                    ", ".join("%.2f" % r["steps_per_s"] for r in mine)))
    else:
        by = {r["mode"]: r for r in recs}
    goals = goals_of(by)
    seeds = [int(x) for x in a.loss_seeds.split(",") if x.strip()]
    if seeds:
        losses = loss_seeds(a, seeds, work)
        goals.update(losses)
    for k, v in goals.items():
        print("%s = %.3f" % (k, v))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(modes=recs, goals=goals, timelines=work, nodes=a.nodes,
                           cores=cores), f, indent=1)
    print("timelines and records in %s" % work)
    return 0 if len(recs) == len(runs) else 1


def main():
    a = add_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args()
    if a.analyze:
        with open(a.analyze[0]) as f:
            rec = timeline_shares(json.load(f), a.analyze[1:])
        print(table([rec]))
        return 0
    if a.all:
        return drive(a)
    if not os.environ.get("SPARSECOMM_SOCKET"):
        sys.exit("run under build/bin/sparsecomm-run (or pass --all)")
    if a.optimizer_cost:
        optimizer_cost(a)
        return 0
    train(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
