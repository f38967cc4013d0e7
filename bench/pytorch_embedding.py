#!/usr/bin/python3
"""Benchmark: the KJV CBOW model of examples/pytorch/word_lm.py (two sparse embedding
tables of 12,550 x 64 and a dense 64 x 64 projection) trained through sparsecomm and
through torch.distributed's gloo allreduce, in the same run, on the same nodes, from the
same seed and data: steps per second and bytes on the wire per step.

    build/bin/sparsecomm-run -n 4 --netns --rate 1gbit -- \\
        /usr/bin/python3 bench/pytorch_embedding.py [--steps 80] [--warmup 20] [--json-out FILE]

Phases (each --steps steps, the first --warmup untimed): "sparsecomm" (DistributedOptimizer,
the embedding gradients on the COO path, lossless), "gloo" (every gradient densified and
averaged with gloo's allreduce, as a dense data-parallel job would), and with --gloo-sparse
also "gloo_sparse" (gloo's own sparse allreduce of the COO gradients).  Bytes on the wire
are the sent/received byte counters of the node's interfaces other than lo, which under
--netns is exactly the node's link (every rank's are averaged).  gloo reaches its peers at
the namespace addresses ($SPARSECOMM_NETNS_ADDRS; MASTER_ADDR is the first).  Rank 0 prints
a table and the ratios; --json-out writes them.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import _common  # noqa: E402
import word_lm  # noqa: E402


def main():
    p = _common.add_common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    word_lm.add_args(p)
    p.add_argument("--phases", default=None, help="comma list, default sparsecomm,gloo")
    a = p.parse_args(sys.argv[1:])
    if "--steps" not in sys.argv:
        a.steps = 80
    if "--warmup" not in sys.argv:  # the first steps of a phase pay one-time costs
        a.warmup = 20
    import torch
    torch.set_num_threads(max(1, a.threads))
    phases = (a.phases or "sparsecomm,gloo" + (",gloo_sparse" if a.gloo_sparse else "")
              ).split(",")
    a.backend = "sparsecomm"
    sync = _common.Sync(a)
    netns = bool(os.environ.get("SPARSECOMM_NETNS_ADDRS"))
    rows = {}
    for ph in phases:
        if ph.startswith("gloo"):
            sync.sct.init_process_group("gloo")
            sync.backend = a.backend = "gloo"
            a.gloo_sparse = ph == "gloo_sparse"
        else:
            sync.backend = a.backend = "sparsecomm"
        r = word_lm.train(a, sync, quiet=True)
        r["tx_bytes_per_step"] = sync.all_ranks_mean(r["tx_bytes_per_step"])
        r["rx_bytes_per_step"] = sync.all_ranks_mean(r["rx_bytes_per_step"])
        r["steps_per_s"] = sync.all_ranks_mean(r["steps_per_s"])
        r.pop("losses")
        rows[ph] = r
        _common.log(sync, "phase %-11s steps/s %7.2f  wire tx/step %12.0f B  rx/step %12.0f B"
                    "  last10_loss %.6f" % (ph, r["steps_per_s"], r["tx_bytes_per_step"],
                                           r["rx_bytes_per_step"], r["last10_loss"]))
        sync.backend = "sparsecomm"
    out = dict(ranks=sync.size, steps=a.steps, warmup=a.warmup, batch=a.batch, dim=a.dim,
               netns=netns, rate=os.environ.get("SPARSECOMM_NETNS_RATE", ""), phases=rows)
    if "sparsecomm" in rows and "gloo" in rows:
        s, g = rows["sparsecomm"], rows["gloo"]
        out["speedup_vs_gloo"] = s["steps_per_s"] / g["steps_per_s"]
        out["bytes_ratio_gloo_over_sparsecomm"] = (g["tx_bytes_per_step"] /
                                                   max(1.0, s["tx_bytes_per_step"]))
        out["loss_rel_diff"] = abs(s["last10_loss"] - g["last10_loss"]) / g["last10_loss"]
        _common.log(sync, "summary: ranks=%d netns=%s rate=%s steps=%d speedup_vs_gloo=%.2fx "
                    "wire_bytes_gloo/sparsecomm=%.1fx last10_loss sparsecomm=%.6f gloo=%.6f" %
                    (sync.size, netns, out["rate"] or "-", a.steps, out["speedup_vs_gloo"],
                     out["bytes_ratio_gloo_over_sparsecomm"], s["last10_loss"],
                     g["last10_loss"]))
    if not netns:
        _common.log(sync, "note: not under --netns: the byte counters are not this job's "
                    "link (loopback traffic is not counted)")
    _common.write_record(sync, a, out)
    sync.finish()


if __name__ == "__main__":
    main()
