"""Shared plumbing of the PyTorch examples: one training loop, three ways to synchronise.

backend "sparsecomm": sparsecomm.torch.DistributedOptimizer (gradients submitted from
backward hooks, reduced by the daemons).  backend "gloo": torch.distributed's gloo
allreduce of every gradient after backward (sparse gradients densified, or sent with
gloo's own sparse allreduce with --gloo-sparse), the reference the tests compare with.
backend "ddp": DistributedDataParallel with sparsecomm.torch.ddp_hook (dense models).
backend "torchddp": torch's own DistributedDataParallel, no hook: its buckets allreduced by
torch.distributed over NCCL for --device cuda, over gloo on the cpu (the peer a GPU job
would otherwise run; dense models).
--device cuda puts the model and the data on a GPU (each trainer's local rank modulo the
GPU count), so sparsecomm reduces CUDA gradients; without CUDA in torch it exits with a
message saying so.

Under `sparsecomm-run` the rank and size come from the launcher; gloo finds its peers
through sparsecomm (sparsecomm.torch.init_process_group).  Without the launcher,
`--spawn N` starts N local processes with torch.multiprocessing and a gloo rendezvous on
127.0.0.1, so the gloo reference can run with no daemon at all.
"""

import argparse
import json
import os
import socket
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(_HERE, "..", "..", "client", "python")))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def add_common_args(p):
    p.add_argument("--backend", choices=["sparsecomm", "gloo", "ddp", "torchddp"],
                   default="sparsecomm")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--sparsifier", default=None,
                   help="sparsifier of dense gradients: none, topk, threshold, dgc, exdyna")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--ddp-selection", choices=["parameter", "bucket"], default="parameter",
                   help="ddp: the hook selects each parameter (default) or the whole bucket")
    p.add_argument("--sim-sparsifier", default=None,
                   help="gloo only: simulate top-k with error feedback before gloo")
    p.add_argument("--gloo-sparse", action="store_true",
                   help="gloo only: sparse gradients with gloo's sparse allreduce")
    p.add_argument("--spawn", type=int, default=0,
                   help="start this many local gloo processes (no launcher needed)")
    p.add_argument("--json-out", default=None, help="rank 0 writes its record here")
    p.add_argument("--fail-at-step", type=int, default=-1,
                   help="test hook: rank --fail-rank raises at this step")
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a step waits for its gradients")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model, the data and the gradients live (cuda: the "
                   "trainer's local rank modulo the node's GPU count; the node's daemon "
                   "serves every GPU and sparsecomm reduces CUDA tensors on them)")
    return p


def check_device(args):
    """Exits with a clear message when --device cuda cannot be served by this torch."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("%s: --device cuda: torch %s has no CUDA device here "
                 "(torch.cuda.is_available() is False); use --device cpu" %
                 (os.path.basename(sys.argv[0]), torch.__version__))


def pick_device(args, local_rank):
    """The torch device of a trainer: the cpu, or GPU local_rank modulo the node's GPU
    count (the node's daemon serves every GPU of the node)."""
    if args.device != "cuda":
        return torch.device("cpu")
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def wire_bytes():
    """Bytes sent and received by this network namespace's interfaces other than lo
    (under `sparsecomm-run --netns` that is this node's traffic on the wire)."""
    tx = rx = 0
    try:
        with open("/proc/net/dev") as f:
            for line in f.readlines()[2:]:
                name, data = line.split(":", 1)
                if name.strip() == "lo":
                    continue
                v = data.split()
                rx += int(v[0])
                tx += int(v[8])
    except OSError:
        pass
    return tx, rx


class Sync:
    """Rank, size and gradient synchronisation for one backend."""

    def __init__(self, args, rank=None, size=None, port=None):
        self.args = args
        self.backend = args.backend
        self.sc = None
        check_device(args)
        if rank is not None:  # a --spawn child: plain gloo on loopback
            self.rank, self.size = rank, size
            self.device = pick_device(args, rank)
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                    rank=rank, world_size=size)
            return
        import sparsecomm
        import sparsecomm.torch as sct
        self.sc, self.sct = sparsecomm, sct
        sparsecomm.init(timeout=args.timeout)
        self.rank, self.size = sparsecomm.rank(), sparsecomm.size()
        self.device = pick_device(args, sparsecomm.local_rank())
        if self.backend in ("gloo", "ddp"):
            sct.init_process_group("gloo")
        elif self.backend == "torchddp":
            sct.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    # -- per backend --
    def wrap(self, model, optimizer, overrides=None):
        a = self.args
        if self.backend == "sparsecomm":
            self.sct.broadcast_parameters(model.state_dict(), root_rank=0)
            return model, self.sct.DistributedOptimizer(
                optimizer, named_parameters=model.named_parameters(),
                sparsifier=a.sparsifier, density=a.density, overrides=overrides,
                timeout=a.timeout)
        if self.backend == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            m = DDP(model, device_ids=[self.device] if self.device.type == "cuda" else None)
            m.register_comm_hook(self.sct.DDPHookState(sparsifier=a.sparsifier,
                                                       density=a.density,
                                                       timeout=a.timeout,
                                                       selection=a.ddp_selection),
                                 self.sct.ddp_hook)
            return m, optimizer
        if self.backend == "torchddp":  # DDP broadcasts rank 0's parameters itself
            from torch.nn.parallel import DistributedDataParallel as DDP
            return DDP(model, device_ids=[self.device] if self.device.type == "cuda"
                       else None), optimizer
        for t in model.state_dict().values():
            dist.broadcast(t, 0)
        self._residual = {}
        return model, _GlooOptimizer(optimizer, model, self)

    def reduce_gloo(self, model):
        a = self.args
        works = []
        for name, p in model.named_parameters():
            g = p.grad
            if g is None:
                p.grad = g = torch.zeros_like(p)
            if g.is_sparse:
                if a.gloo_sparse:
                    g = g.coalesce()
                    works.append((p, g, dist.all_reduce(g, async_op=True), True))
                    continue
                g = p.grad = g.to_dense()
            if a.sim_sparsifier and a.sim_sparsifier != "none" and not name.endswith("bias"):
                g = self._sim_topk(name, g)
                p.grad = g
            works.append((p, g, dist.all_reduce(g, async_op=True), False))
        for p, g, w, sparse in works:
            w.wait()
            if sparse:
                p.grad = g / self.size
            else:
                g.div_(self.size)

    def _sim_topk(self, name, g):
        """Exact top-k with error feedback on this rank, as the daemon's TOPK does."""
        acc = g + self._residual.get(name, 0)
        k = max(1, int(round(self.args.density * acc.numel())))
        flat = acc.reshape(-1)
        idx = flat.abs().topk(k).indices
        sent = torch.zeros_like(flat)
        sent[idx] = flat[idx]
        self._residual[name] = (flat - sent).view_as(g)
        return sent.view_as(g)

    def all_ranks_mean(self, value):
        """Mean of a float over ranks (for the summary only)."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        if self.sc is not None and self.backend == "sparsecomm":
            return float(self.sc.allreduce(t, name="summary.mean", average=True)[0])
        dist.all_reduce(t)
        return float(t[0]) / self.size

    def finish(self):
        if dist.is_initialized():
            dist.destroy_process_group()
        if self.sc is not None:
            self.sc.shutdown()


class _GlooOptimizer:
    """Reduces gradients with gloo, then steps the wrapped optimizer."""

    def __init__(self, opt, model, sync):
        self.opt, self.model, self.sync = opt, model, sync

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.sync.reduce_gloo(self.model)
        self.opt.step()


def digits():
    """scikit-learn's handwritten digits (1,797 8x8 images): (x, y), x the 64 pixel values
    (0..16) of each image as float64 and y its label, as load_digits() gives data and
    target.  From scikit-learn where it is installed, else from digits.csv.gz beside this
    file: the package `make dist` builds carries scikit-learn's copy of that file, for a
    machine whose python has torch but not scikit-learn."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        load_digits = None
    if load_digits is not None:
        d = load_digits()
        return d.data, d.target
    path = os.path.join(_HERE, "digits.csv.gz")
    if not os.path.exists(path):
        raise SystemExit("the digits data: this python has no scikit-learn (sklearn) and "
                         "there is no %s (make dist puts it in the package)" % path)
    import gzip
    import numpy as np
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    if rows.ndim != 2 or rows.shape[1] != 65:
        raise SystemExit("%s: expected rows of 64 pixels and a label, found shape %s" %
                         (path, rows.shape))
    return rows[:, :-1], rows[:, -1].astype(int)


def set_threads(n):
    """At most n compute threads in this trainer: torch's pool, and the OpenBLAS pool that
    Debian's torch multiplies with, which torch.set_num_threads leaves at the core count
    (its idle workers spin in sched_yield, taking the cores from the other trainers and
    the daemons when several trainers share a host)."""
    import ctypes
    n = max(1, int(n))
    torch.set_num_threads(n)
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.rstrip("\n").split(None, 5)
                path = fields[5] if len(fields) == 6 else ""
                if path.endswith(" (deleted)"):
                    continue
                # Debian's libopenblas*.so, its openblas-pthread/libblas.so.3, wheels'
                # libscipy_openblas
                if "openblas" in path.lower():
                    libs.add(path)
    except OSError:
        return
    for path in libs:
        try:
            ctypes.CDLL(path).openblas_set_num_threads(n)
        except (OSError, AttributeError):
            pass


def run(main_fn, args):
    """Runs main_fn(args, sync) once per rank: under the launcher, or --spawn N."""
    set_threads(args.threads)
    check_device(args)
    if args.spawn:
        if args.backend != "gloo":
            sys.exit("--spawn runs the gloo backend only")
        import torch.multiprocessing as mp
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        mp.spawn(_spawned, args=(main_fn, args, port), nprocs=args.spawn, join=True)
        return
    sync = Sync(args)
    try:
        main_fn(args, sync)
    finally:
        sync.finish()


def _spawned(rank, main_fn, args, port):
    set_threads(args.threads)
    sync = Sync(args, rank=rank, size=args.spawn, port=port)
    try:
        main_fn(args, sync)
    finally:
        sync.finish()


def log(sync, msg):
    """Progress lines: rank 0 only (every rank with $SC_LOG_ALL=1)."""
    if sync.rank == 0 or os.environ.get("SC_LOG_ALL") == "1":
        print(msg, flush=True)


def write_record(sync, args, record):
    if sync.rank == 0 and args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(record, f)


def maybe_fail(args, sync, step):
    if step == args.fail_at_step and sync.rank == args.fail_rank:
        raise RuntimeError("rank %d: injected failure at step %d" % (sync.rank, step))


class Timer:
    def __init__(self):
        self.t0 = time.perf_counter()

    def s(self):
        return time.perf_counter() - self.t0


def parse(desc, extra=None):
    p = add_common_args(argparse.ArgumentParser(description=desc))
    if extra:
        extra(p)
    return p.parse_args()
