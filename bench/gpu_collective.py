#!/usr/bin/python3
"""Benchmark: the daemons' collective schemes on GPU tensors, each pinned in turn and the
cost model's own choice ("auto"), against torch.distributed in the same run on the same
(emulated) cluster: its dense allreduce of the tensor and its all_gather of every rank's
COO data.  Run under sparsecomm-run, one trainer per node:

    sparsecomm-run -n 4 --netns --rate 1gbit --daemon-arg --transport --daemon-arg nccl \\
        -- /usr/bin/python3 bench/gpu_collective.py --workload zipf --numel 67108864 \\
        --density 0.01 --scheme all --check --json-out /tmp/gpu-zipf.json

or let the driver run every combination (both workloads, the daemons' GPU buffers over
nccl and over tcp, which stages them through host memory) and print one table:

    /usr/bin/python3 bench/gpu_collective.py --all --nodes 4 --rate 1gbit \\
        --numel 67108864 --json-out /tmp/gpu-all.json

The peers use NCCL on a GPU (gloo with --device cpu, which runs the same script on
machines without one, at small sizes, to check the script itself).  sparsecomm-run
--netns gives every node's processes NCCL_HOSTID and NCCL_SOCKET_IFNAME, so the daemons'
NCCL and torch's see four hosts on one GPU, talking over the shaped links.

Workloads (every value a small integer, so every sum is exact in any order):
  zipf  each rank's gradient is COO: density x numel distinct ids drawn from a Zipf law
        (exponent 1.2) over [0, numel) with a per-rank seed, each id's value its count
        (capped at 8); submitted as a sparse torch tensor (the COO path).  Lossless
        schemes must give the exact sum (--check).
  topk  a dense integer gradient (a shared part plus a per-rank part), top-k sparsified
        by the daemon at --density with error feedback; lossless schemes then move the
        selected values exactly, so --check verifies that the result plus the change of
        every node's residual equals the sum of the inputs (conservation); lossy schemes
        are reported with their largest relative error.

Per scheme: W warm-up and K timed steps, each after a barrier (a one-element allreduce
through the daemons); a step's time is the slowest rank's; the median over steps is
reported, with the bytes this node's daemon sent per step (`sparsectl stats`,
bytes_sent), the alpha-beta bound of the busiest rank's bytes at the link's rate
(--rate, 95.2% goodput) and the measured alpha (the median one-element allreduce), and
the ratios against torch's dense allreduce and all_gather of the COO (indices and values,
padded to the largest rank's count after an all_gather of the counts).
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tree import program  # noqa: E402  (and the Python package on sys.path)

SCHEMES = ["dense_ring", "agsparse", "hier_central", "balanced_par", "omnireduce", "spardl",
           "exdyna", "s2_sketch", "auto"]
LOSSY = {"spardl", "exdyna", "exdyna_owner", "s2_sketch"}


def parse_rate(text):
    """tc rate syntax (1gbit, 500mbit, 100mbps) in bytes per second."""
    t = text.lower()
    for suffix, mult in (("gbit", 1e9 / 8), ("mbit", 1e6 / 8), ("kbit", 1e3 / 8),
                         ("gbps", 1e9), ("mbps", 1e6), ("kbps", 1e3), ("bit", 1 / 8)):
        if t.endswith(suffix):
            return float(t[:-len(suffix)]) * mult
    return float(t) / 8


def zipf_coo(np, numel, density, rank, step, seed):
    """Rank's COO (ascending unique int64 ids, float32 counts) at step."""
    rng = np.random.default_rng([seed, rank, step])
    want = max(1, int(density * numel))
    ids = np.empty(0, dtype=np.int64)
    draws = want
    while ids.size < want:
        d = rng.zipf(1.2, size=draws * 2) - 1
        d = d[d < numel]
        ids = np.concatenate([ids, d])
        u, c = np.unique(ids, return_counts=True)
        if u.size >= want:
            keep = rng.permutation(u.size)[:want] if u.size > want else slice(None)
            u, c = u[keep], c[keep]
            order = np.argsort(u)
            return u[order], np.minimum(c[order], 8).astype(np.float32)
        ids = u.repeat(np.minimum(c, 8))
        draws *= 2
    u, c = np.unique(ids, return_counts=True)
    return u, np.minimum(c, 8).astype(np.float32)


def topk_dense(torch, numel, rank, step, seed, device):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed * 1000003 + step)
    shared = torch.randint(-8, 9, (numel,), generator=g, dtype=torch.int32)
    g.manual_seed(seed * 1000003 + step + 7919 * (rank + 1))
    own = torch.randint(-4, 5, (numel,), generator=g, dtype=torch.int32)
    return (shared + own).to(torch.float32).to(device)


class Bench:
    def __init__(self, a):
        import numpy as np
        import torch
        import torch.distributed as dist

        import sparsecomm as sc
        import sparsecomm.torch as sct
        self.a, self.np, self.torch, self.dist, self.sc = a, np, torch, dist, sc
        sc.init(timeout=a.timeout)
        self.rank, self.size = sc.rank(), sc.size()
        if a.device == "cuda":
            if not torch.cuda.is_available():
                print("SKIP gpu_collective: torch has no CUDA device", flush=True)
                sc.shutdown()
                sys.exit(0)
            self.dev = torch.device("cuda", sc.local_rank() % torch.cuda.device_count())
            torch.cuda.set_device(self.dev)
            sct.init_process_group("nccl")
        else:
            self.dev = torch.device("cpu")
            sct.init_process_group("gloo")
        self.one = torch.zeros(1, device=self.dev)
        # every input, and the exact sum, is the same for every scheme (a function of the
        # rank, the step and the seed): made once (at 64M elements a Zipf draw or a dense
        # integer tensor takes about a second of CPU, which every scheme paid again)
        self._memo = {}

    def memo(self, key, make):
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def sync(self):
        if self.a.device == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def barrier(self):
        self.sc.allreduce(self.one, name="bench.barrier", average=False)
        self.sync()

    def slowest(self, seconds):
        t = self.torch.tensor([seconds], dtype=self.torch.float64, device=self.dev)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def timed(self, fn):
        """The median over timed steps of the slowest rank's time of fn(step)."""
        a = self.a
        times = []
        for step in range(a.warmup + a.iters):
            self.barrier()
            t0 = time.perf_counter()
            fn(step)
            self.sync()
            dt = self.slowest(time.perf_counter() - t0)
            if step >= a.warmup:
                times.append(dt)
        times.sort()
        return times[len(times) // 2]

    def stats(self, name):
        out = subprocess.run([program("sparsectl"), "--socket",
                              os.environ["SPARSECOMM_SOCKET"], "--json", "stats"],
                             capture_output=True, text=True, timeout=30).stdout
        for t in json.loads(out).get("tensors", []):
            if t.get("name") == name:
                return t
        return {}

    # -- the inputs --
    def coo(self, rank, step):
        return self.memo(("coo", rank, step), lambda: zipf_coo(
            self.np, self.a.numel, self.a.density, rank, step, self.a.seed))

    def sparse_input(self, step):
        torch = self.torch

        def make():
            idx, val = self.coo(self.rank, step)
            return torch.sparse_coo_tensor(torch.from_numpy(idx).view(1, -1),
                                           torch.from_numpy(val), (self.a.numel,),
                                           device=self.dev).coalesce()
        return self.memo(("sparse", step), make)

    def dense_input(self, rank, step):
        return self.memo(("dense", rank, step), lambda: topk_dense(
            self.torch, self.a.numel, rank, step, self.a.seed, self.dev))

    def exact_sum(self, step):
        torch = self.torch

        def make():
            s = torch.zeros(self.a.numel, dtype=torch.float32, device=self.dev)
            for r in range(self.size):
                if self.a.workload == "zipf":
                    idx, val = self.coo(r, step)
                    s.index_add_(0, torch.from_numpy(idx).to(self.dev),
                                 torch.from_numpy(val).to(self.dev))
                else:  # the other ranks' inputs are not kept: one pass each
                    s += topk_dense(torch, self.a.numel, r, step, self.a.seed, self.dev)
            return s
        return self.memo(("sum", step), make)

    # -- the runs --
    def scheme(self, s):
        a = self.a
        name = "bench.%s.%s" % (a.workload, s)
        lossy = s in LOSSY
        kw = dict(name=name, average=False, scheme=None if s == "auto" else s,
                  allow_lossy=lossy)
        if a.workload == "zipf":
            kw.update(sparse_as_dense=True, coo_capacity=int(a.density * a.numel * 1.1) + 64)
            inputs = [self.sparse_input(step) for step in range(2)]
        else:
            kw.update(sparsifier="topk", density=a.density)
            inputs = [self.dense_input(self.rank, step) for step in range(2)]
        b0 = self.stats(name).get("bytes_sent", 0)
        t = self.timed(lambda step: self.sc.allreduce(inputs[step % 2], **kw))
        st = self.stats(name)
        steps = a.warmup + a.iters
        row = {"scheme": st.get("scheme", s) if s == "auto" else s, "pinned": s,
               "time_s": t, "transport": st.get("transport", "?"),
               "bytes_sent_per_step": (st.get("bytes_sent", 0) - b0) / steps}
        if a.check:
            row.update(self.check(s, kw, lossy))
        return row

    def check(self, s, kw, lossy):
        torch = self.torch
        step = 1000
        want = self.exact_sum(step)
        if self.a.workload == "zipf":
            got = self.sc.allreduce(self.sparse_input(step), **kw)
            err = (got - want).abs().max().item()
            scale = want.abs().max().item() or 1.0
            return {"max_rel_err": err / scale,
                    "exact": bool(err == 0) if not lossy else None}
        x = self.dense_input(self.rank, step)
        before = self.residual(kw["name"])
        got = self.sc.allreduce(x, **kw)
        after = self.residual(kw["name"])
        kept = (after - before) if self.sc.local_rank() == 0 else torch.zeros_like(after)
        self.dist.all_reduce(kept)
        err = (got + kept - want).abs().max().item()
        scale = want.abs().max().item() or 1.0
        return {"max_rel_err": err / scale, "conserved": bool(err <= 1e-6 * scale)}

    def residual(self, name):
        r = self.sc.residual(name)
        if r is None:
            return self.torch.zeros(self.a.numel, device=self.dev)
        return r.to(self.dev).reshape(-1).clone()

    def peers(self):
        a, torch, dist = self.a, self.torch, self.dist
        rows = {}
        dense = torch.ones(a.numel, dtype=torch.float32, device=self.dev)
        rows["torch_allreduce"] = self.timed(lambda step: dist.all_reduce(dense))
        idx, val = self.coo(self.rank, 0)
        n = torch.tensor([idx.size], device=self.dev)
        ns = [torch.zeros_like(n) for _ in range(self.size)]
        dist.all_gather(ns, n)
        cap = int(max(int(x) for x in ns))
        ib = torch.zeros(cap, dtype=torch.int32, device=self.dev)
        vb = torch.zeros(cap, dtype=torch.float32, device=self.dev)
        ib[:idx.size] = torch.from_numpy(idx.astype("int32")).to(self.dev)
        vb[:idx.size] = torch.from_numpy(val).to(self.dev)
        il = [torch.empty_like(ib) for _ in range(self.size)]
        vl = [torch.empty_like(vb) for _ in range(self.size)]

        def gather(step):
            dist.all_gather(il, ib)
            dist.all_gather(vl, vb)
        rows["torch_allgather_coo"] = self.timed(gather)
        return rows, cap

    def run(self):
        a = self.a
        alpha = self.timed(lambda step: self.sc.allreduce(self.one, name="bench.alpha",
                                                          average=False))
        peer, cap = self.peers()
        rate = parse_rate(a.rate) * 0.952 if a.rate else None
        out = {"workload": a.workload, "numel": a.numel, "density": a.density,
               "ranks": self.size, "device": a.device, "rate": a.rate, "alpha_s": alpha,
               "peers": peer, "coo_max_nnz": cap, "schemes": []}
        for s in (SCHEMES if a.scheme == "all" else a.scheme.split(",")):
            row = self.scheme(s)
            sent = self.slowest(row["bytes_sent_per_step"])
            row["busiest_bytes_per_step"] = sent
            if rate:
                row["bound_s"] = alpha + sent / rate
                row["time_over_bound"] = row["time_s"] / row["bound_s"]
            row["speedup_vs_torch_allreduce"] = peer["torch_allreduce"] / row["time_s"]
            row["speedup_vs_torch_allgather_coo"] = peer["torch_allgather_coo"] / row["time_s"]
            out["schemes"].append(row)
            if self.rank == 0:
                print("%-13s %-10s %-5s %9.2f ms  %10.0f B/step  x%.2f vs allreduce  "
                      "x%.2f vs all_gather%s" % (
                          s, row["scheme"], row["transport"], row["time_s"] * 1e3, sent,
                          row["speedup_vs_torch_allreduce"],
                          row["speedup_vs_torch_allgather_coo"],
                          "  err %.2e" % row["max_rel_err"] if "max_rel_err" in row
                          else ""), flush=True)
        if self.rank == 0 and a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(out, f, indent=1)
        self.dist.destroy_process_group()
        self.sc.shutdown()


def drive(a):
    """Every workload over nccl and over tcp, each a sparsecomm-run of this script."""
    run = program("sparsecomm-run")
    rows = []
    for wl in ("zipf", "topk"):
        for transport in ("nccl", "tcp"):
            rec = "%s.%s.%s.json" % (a.json_out or "/tmp/gpu-collective", wl, transport)
            cmd = [run, "-n", str(a.nodes), "--timeout", str(a.timeout * 4)]
            # every node a host of its own to NCCL: the namespaces give each its own
            # NCCL_HOSTID; without them, --nccl-hostid does
            cmd += ["--netns", "--rate", a.rate] if a.rate else ["--nccl-hostid"]
            cmd += ["--daemon-arg", "--transport", "--daemon-arg", transport, "--",
                    sys.executable, os.path.abspath(__file__), "--workload", wl,
                    "--numel", str(a.numel), "--density", str(a.density), "--scheme",
                    a.scheme, "--device", a.device, "--iters", str(a.iters), "--warmup",
                    str(a.warmup), "--json-out", rec] + (["--check"] if a.check else []) + \
                (["--rate", a.rate] if a.rate else [])
            print("== %s over %s: %s" % (wl, transport, " ".join(cmd)), flush=True)
            p = subprocess.run(cmd, timeout=a.timeout * 5)
            if p.returncode != 0 or not os.path.exists(rec):
                print("run failed (%d)" % p.returncode, flush=True)
                continue
            with open(rec) as f:
                r = json.load(f)
            r["transport_asked"] = transport
            rows.append(r)
    by = {(r["workload"], r["transport_asked"]): r for r in rows}
    for wl in ("zipf", "topk"):
        g, c = by.get((wl, "nccl")), by.get((wl, "tcp"))
        if not g or not c:
            continue
        print("\n%s: GPU path (nccl) against cpu staging (tcp), same schemes" % wl)
        for rg, rc in zip(g["schemes"], c["schemes"]):
            print("  %-13s nccl %9.2f ms  tcp %9.2f ms  x%.2f" % (
                rg["pinned"], rg["time_s"] * 1e3, rc["time_s"] * 1e3,
                rc["time_s"] / rg["time_s"]))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=["zipf", "topk"], default="zipf")
    p.add_argument("--numel", type=int, default=1 << 26)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--scheme", default="all", help="all, or a comma list (auto included)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--rate", default=os.environ.get("SPARSECOMM_NETNS_RATE", ""))
    p.add_argument("--check", action="store_true")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json-out")
    p.add_argument("--all", action="store_true", help="drive every combination")
    p.add_argument("--nodes", type=int, default=4)
    a = p.parse_args()
    if a.all:
        drive(a)
    else:
        Bench(a).run()


if __name__ == "__main__":
    main()
