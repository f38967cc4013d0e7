#!/usr/bin/python3
"""Benchmark: the KJV CBOW model of examples/pytorch/word_lm.py at word2vec scale, trained
through sparsecomm and through torch.distributed's gloo allreduce, in the same run, on the
same nodes, from the same seed and data: steps per second and bytes on the wire per step.

Defaults (each a flag): the full KJV vocabulary (every distinct word, 12,550), --dim 300
(two sparse embedding tables of 12,550 x 300, 15 MB each, and a dense 300 x 300
projection: 30 MB of gradient per step when densified), --window 5 and --negatives 5
(word2vec's defaults), --batch 1024 centre words per rank per step (10 context tokens
and 5 negatives each), --steps 60 of which the first --warmup 15 are untimed.  A step's
sparse gradient holds about 2,500 of the 25,100 embedding rows per rank (the negatives
dominate), about 5,900 over the 4 ranks.

    build/bin/sparsecomm-run -n 4 --netns --rate 1gbit -- \\
        /usr/bin/python3 bench/pytorch_embedding.py [--gloo-sparse] [--json-out FILE]

Phases (each --steps steps, the first --warmup untimed): "sparsecomm" (DistributedOptimizer,
the embedding gradients on the COO path, lossless), "gloo" (every gradient densified and
averaged with gloo's allreduce, as a dense data-parallel job would), and with --gloo-sparse
also "gloo_sparse" (gloo's own sparse allreduce of the COO gradients).  Bytes on the wire
are the sent/received byte counters of the node's interfaces other than lo, which under
--netns is exactly the node's link (every rank's are averaged).  gloo reaches its peers at
the namespace addresses ($SPARSECOMM_NETNS_ADDRS; MASTER_ADDR is the first).  Rank 0 prints
a table and the ratios (and which BLAS torch runs on: the dense projection and the
negatives' scores are BLAS-bound, and the reference BLAS is several times slower than
OpenBLAS); --json-out writes them.

--device cuda (default cpu) trains on the GPU (each trainer's local rank modulo the GPU
count): sparsecomm then reduces CUDA gradients, the embeddings' through the COO path on
the GPU, and gloo stages them through host memory.  Without CUDA in torch it exits with a
message saying so.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import _common  # noqa: E402
import word_lm  # noqa: E402


def blas_library():
    """The BLAS shared object this process has mapped (torch's), by file name."""
    try:
        with open("/proc/self/maps") as f:
            libs = {os.path.realpath(line.split()[-1]) for line in f
                    if "blas" in line.rsplit("/", 1)[-1]}
    except OSError:
        return "?"
    return ",".join(sorted(libs)) or "?"


def main():
    p = _common.add_common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    word_lm.add_args(p)
    p.add_argument("--phases", default=None, help="comma list, default sparsecomm,gloo")
    # word2vec-like scale (see the module doc); the first steps of a phase pay one-time
    # costs, hence the warm-up
    p.set_defaults(steps=60, warmup=15, dim=300, window=5, negatives=5, batch=1024)
    a = p.parse_args(sys.argv[1:])
    _common.set_threads(a.threads)  # torch's threads and OpenBLAS's
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
    out = dict(ranks=sync.size, device=str(sync.device), steps=a.steps, warmup=a.warmup, batch=a.batch, dim=a.dim,
               window=a.window, negatives=a.negatives, vocab=rows[phases[0]]["vocab"],
               blas=blas_library(), netns=netns,
               rate=os.environ.get("SPARSECOMM_NETNS_RATE", ""), phases=rows)
    _common.log(sync, "model: vocab=%d dim=%d window=%d negatives=%d batch=%d/rank "
                "device=%s; blas=%s" % (out["vocab"], a.dim, a.window, a.negatives, a.batch,
                                        out["device"], out["blas"]))
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
    if "sparsecomm" in rows and "gloo_sparse" in rows:
        s, g = rows["sparsecomm"], rows["gloo_sparse"]
        out["speedup_vs_gloo_sparse"] = s["steps_per_s"] / g["steps_per_s"]
        _common.log(sync, "summary: speedup_vs_gloo_sparse=%.2fx wire_bytes_gloo_sparse/"
                    "sparsecomm=%.2fx last10_loss gloo_sparse=%.6f" %
                    (out["speedup_vs_gloo_sparse"],
                     g["tx_bytes_per_step"] / max(1.0, s["tx_bytes_per_step"]),
                     g["last10_loss"]))
    if not netns:
        _common.log(sync, "note: not under --netns: the byte counters are not this job's "
                    "link (loopback traffic is not counted)")
    _common.write_record(sync, a, out)
    sync.finish()


if __name__ == "__main__":
    main()
