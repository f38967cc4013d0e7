#!/usr/bin/python3
"""The Python/PyTorch test suite: binding checks, then training runs through real daemons
under build/bin/sparsecomm-run compared with torch.distributed's gloo allreduce.

Every test is bounded in time; the last line is `N passed, N failed`, after `(N skipped)`
when some could not run here (each printed as `SKIP <name>: <why>`); with
SPARSECOMM_REQUIRE_GPU=1 (tests/gpu/device_check.sh) every skip counts as a failure.
Optional: names of tests to run (substring match) as arguments.

The interpreter that runs the workers is $SPARSECOMM_PYTHON (default /usr/bin/python3). The
programs come from the build tree (build/bin/) or, in the relocatable package (make dist),
from its bin/; $SPARSECOMM_RUN names another sparsecomm-run."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PY = os.environ.get("SPARSECOMM_PYTHON") or "/usr/bin/python3"
BIN = next((d for d in (os.path.join(ROOT, "build", "bin"), os.path.join(ROOT, "bin"))
            if os.access(os.path.join(d, "sparsecomm-run"), os.X_OK)),
           os.path.join(ROOT, "build", "bin"))
RUN = os.environ.get("SPARSECOMM_RUN") or os.path.join(BIN, "sparsecomm-run")
REQUIRE_GPU = os.environ.get("SPARSECOMM_REQUIRE_GPU") == "1"
EX = os.path.join(ROOT, "examples", "pytorch")
HERE = os.path.join(ROOT, "tests", "python")
TMP = tempfile.mkdtemp(prefix="sc-pytest-")
results = []
skipped = []


def record(name, ok, why=""):
    results.append((name, ok))
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + why) if why else ""),
          flush=True)


def skip(name, why):
    """A test this machine cannot run: printed with the reason and counted, never passed;
    a failure where SPARSECOMM_REQUIRE_GPU=1 says the machine must run everything."""
    if REQUIRE_GPU:
        record(name, False, "skipped under SPARSECOMM_REQUIRE_GPU=1: " + why)
        return
    skipped.append(name)
    print("SKIP %s: %s" % (name, why), flush=True)


def skips_or_checks(name, rc, out, ranks):
    """The workers' `SKIP <what>: <why>` lines (one skip per distinct line, named by the
    worker), else their CHECK lines."""
    found = sorted(set(re.findall(r"^(?:\[\d+\] )?SKIP (\S+?):? (.*)$", out, re.M)))
    for what, why in found:
        skip(what, why)
    if not found:
        checks(name, rc, out, ranks)


def sh(cmd, timeout, env=None):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                           env=dict(os.environ, **(env or {})))
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, time.monotonic() - t0


def tail(out, n=25):
    return "\n".join(out.splitlines()[-n:])


def launch(nodes, script, args, timeout=240, per_node=1, extra=()):
    cmd = [RUN, "-n", str(nodes), "--timeout", str(timeout - 10)]
    if per_node > 1:
        cmd += ["--per-node", str(per_node)]
    return sh(cmd + list(extra) + ["--", PY, script] + args, timeout)


def checks(name, rc, out, ranks):
    """Turns CHECK lines (of every rank) into test results."""
    seen = {}
    for m in re.finditer(r"^(?:\[(\d+)\] )?CHECK (\S+) (ok|FAIL.*)$", out, re.M):
        seen.setdefault(m.group(2), {})[m.group(1) or "0"] = m.group(3)
    if not seen:
        record(name, False, "no CHECK output (rc=%s)\n%s" % (rc, tail(out)))
        return
    for check, by_rank in seen.items():
        bad = {r: v for r, v in by_rank.items() if v != "ok"}
        ok = not bad and len(by_rank) == ranks
        why = "" if ok else ("%s; ranks reporting %d of %d" % (bad, len(by_rank), ranks))
        record("%s.%s" % (name, check), ok, why)
    if rc not in (0,) and all(ok for _, ok in results[-len(seen):]):
        record(name + ".exit", False, "rc=%s\n%s" % (rc, tail(out)))


def json_run(tag, nodes, script, args, timeout=300):
    path = os.path.join(TMP, tag + ".json")
    rc, out, secs = launch(nodes, script, args + ["--json-out", path], timeout)
    if rc != 0 or not os.path.exists(path):
        raise RuntimeError("%s: rc=%s after %.0f s\n%s" % (tag, rc, secs, tail(out)))
    with open(path) as f:
        return json.load(f)


def gloo_run(tag, nprocs, script, args, timeout=300):
    path = os.path.join(TMP, tag + ".json")
    rc, out, secs = sh([PY, script, "--backend", "gloo", "--spawn", str(nprocs),
                        "--json-out", path] + args, timeout)
    if rc != 0 or not os.path.exists(path):
        raise RuntimeError("%s (gloo): rc=%s\n%s" % (tag, rc, tail(out)))
    with open(path) as f:
        return json.load(f)


def same_losses(a, b, rtol):
    worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a["losses"], b["losses"]))
    return worst <= rtol and len(a["losses"]) == len(b["losses"]), worst


# ---- the tests ----------------------------------------------------------------------

def t_header():
    rc, out, _ = sh([PY, os.path.join(HERE, "check_header.py")], 120)
    checks("binding", rc, out, 1)


def t_header_example():
    # the example at the top of sparsecomm.h, compiled and run on 2 daemons
    rc, out, _ = sh([PY, os.path.join(HERE, "check_header.py"), "--example"], 150)
    checks("binding", rc, out, 1)


def t_api():
    # 2 nodes x 2 trainers: the daemons' local reduce is on the path too
    rc, out, _ = launch(2, os.path.join(HERE, "worker_api.py"), [], 180, per_node=2)
    checks("api", rc, out, 4)
    # one trainer per node: lossless COO results come back sparse from the daemon
    rc, out, _ = launch(4, os.path.join(HERE, "worker_api.py"),
                        ["sparse_embedding_coo", "sparse_result_forms", "coo_bad_indices"],
                        180)
    checks("api_sparse_results", rc, out, 4)


def t_colls():
    # 2 nodes x 2 trainers: the daemons' local reduce takes the op too
    rc, out, _ = launch(2, os.path.join(HERE, "worker_colls.py"), [], 180, per_node=2)
    checks("colls", rc, out, 4)
    # 3 nodes: rank 0 joins while the others alltoall
    rc, out, _ = launch(3, os.path.join(HERE, "worker_colls.py"),
                        ["alltoall_with_a_joined_rank"], 120)
    checks("colls_joined", rc, out, 3)


def t_unnamed():
    # 10,000 unnamed allreduces: buffers reused, registrations/shm/RSS flat, sums right
    rc, out, _ = launch(2, os.path.join(HERE, "worker_unnamed.py"), [], 240)
    checks("unnamed", rc, out, 2)

def t_mismatch():
    # tensors that differ across ranks fail at once on every rank, well before a stall
    # timeout of 60 s: an empty tensor on one rank, an unnamed call of another shape;
    # empty tensors on every rank, and allgather rows of none on one, still work
    rc, out, _ = launch(2, os.path.join(HERE, "worker_mismatch.py"), [], 240,
                        extra=["--daemon-arg", "--stall_timeout_ms", "--daemon-arg", "60000"])
    checks("mismatch", rc, out, 2)


def t_mismatch2():
    # Horovod's type, shape, root and splits errors (its test_torch.py's), unnamed after
    # unnamed calls of both dtypes and named, in the job's set and in a process set: each
    # fails at once on every rank, well before a stall timeout of 60 s
    rc, out, _ = launch(2, os.path.join(HERE, "worker_mismatch2.py"), [], 240,
                        extra=["--daemon-arg", "--stall_timeout_ms", "--daemon-arg", "60000"])
    checks("mismatch2", rc, out, 2)
    # two trainers of one node: a re-registration their daemon refuses
    rc, out, _ = launch(1, os.path.join(HERE, "worker_mismatch2.py"),
                        ["refused_on_a_node_then_next_call"], 120, per_node=2)
    checks("mismatch2_1x2", rc, out, 2)


def t_named():
    # uniquely named collectives on nodes of 64 registrations: results exact, the
    # registrations bounded, an optimizer's buffers kept; then ranks that let names go at
    # different times (shapes changing, process sets) reduce exactly
    worker = os.path.join(HERE, "worker_named.py")
    rc, out, _ = launch(2, worker, ["flood_exact_and_bounded", "optimizer_buffers_kept",
                                    "nothing_to_release_raises"], 240, per_node=2,
                        extra=["--daemon-arg", "--max_registrations", "--daemon-arg", "64"])
    checks("named_limited", rc, out, 4)
    rc, out, _ = launch(2, worker, ["asymmetric_eviction_exact",
                                    "shape_change_after_long_eviction",
                                    "process_set_names_evicted_apart"], 240, per_node=2)
    checks("named_apart", rc, out, 4)


def t_horovod_port():
    # a Horovod training script with `import sparsecomm.torch as hvd` as its only change:
    # uneven shards ended by join, fp16 compression, backward_passes_per_step=2
    rc, out, _ = launch(2, os.path.join(HERE, "horovod_port.py"), [], 240, per_node=2)
    checks("horovod_port", rc, out, 4)


def nccl_in_daemon():
    """"1" when the daemon has its nccl transport built in (its symbol table holds the
    backend's ops), "0" when not, None when nm cannot tell."""
    daemon = os.path.join(BIN, "sparsecommd")
    rc, out, _ = sh(["nm", daemon], 60)
    if rc != 0:
        return None
    return "1" if re.search(r" scd_transport_nccl_ops$", out, re.M) else "0"


def t_horovod_contract():
    # Horovod's calls as its users make them (tests/python/worker_horovod.py), on 2 ranks
    # and on 3 (an odd size: uneven splits, roots past 1); nccl_built() against the build
    nccl = nccl_in_daemon()
    if nccl is not None:
        os.environ["SPARSECOMM_EXPECT_NCCL_BUILT"] = nccl
    os.environ["SPARSECOMM_TEST_TMP"] = TMP
    for n in (2, 3):
        rc, out, _ = launch(n, os.path.join(HERE, "worker_horovod.py"), [], 240)
        checks("horovod%d" % n, rc, out, n)
    # 2 nodes x 2 trainers: a node's trainers re-register a name one after the other;
    # Adasum's tree with two trainers a node as its leaves
    rc, out, _ = launch(2, os.path.join(HERE, "worker_horovod.py"),
                        ["new_shape_or_dtype_under_a_name", "next_calls_work_after_a_reshape",
                         "unnamed_calls_of_ever_new_shapes_stay_bounded", "grouped_operations",
                         "grouped_members_held_until_all_ready",
                         "requires_grad_changes_between_steps",
                         "adasum_allreduce_matches_numpy"], 240, per_node=2)
    checks("horovod2x2", rc, out, 4)


def t_hvdapi():
    # Horovod's calling contract (tests/python/worker_hvdapi.py): signatures in Horovod's
    # order, the optimizer's keywords, unnamed collectives in flight together, gradients
    # through the collectives; on 2 ranks and on 3 (uneven rows, a root past 1)
    for n in (2, 3):
        rc, out, _ = launch(n, os.path.join(HERE, "worker_hvdapi.py"), [], 240)
        checks("hvdapi%d" % n, rc, out, n)


def t_hvdops():
    # Horovod's reduction values as integers in every call that takes an op, and sparse
    # tensors that the ranks give in other dtypes, layouts or shapes under one name
    # (tests/python/worker_hvdops.py); on 2 ranks and on 3
    for n in (2, 3):
        rc, out, _ = launch(n, os.path.join(HERE, "worker_hvdops.py"), [], 240)
        checks("hvdops%d" % n, rc, out, n)


def t_hvdsuite():
    # what Horovod's own PyTorch suite asserts (tests/python/worker_hvdsuite.py): every
    # dtype and form of each collective with its exact results, the errors every rank
    # raises, join, the optimizer's cases, every torch optimizer's state broadcast,
    # SyncBatchNorm; on 2 ranks and on 3
    for n in (2, 3):
        rc, out, _ = launch(n, os.path.join(HERE, "worker_hvdsuite.py"), [], 420)
        checks("hvdsuite%d" % n, rc, out, n)
    # dtypes that differ between two trainers of one node: refused by their daemon, on
    # both, naming both dtypes
    rc, out, _ = launch(1, os.path.join(HERE, "worker_hvdsuite.py"),
                        ["carried_dtype_mismatches_raise_on_every_rank",
                         "compression_on_some_ranks_raises_on_every_rank",
                         "allreduce_mismatches_raise_on_every_rank",
                         "registered_name_dtype_mismatch_raises_on_every_rank"], 180,
                        per_node=2)
    checks("hvdsuite1x2", rc, out, 2)


def t_hvdusers():
    # training loops as Horovod's users write them (tests/python/worker_hvdusers.py), run
    # for several steps; on 2 ranks and on 3
    for n in (2, 3):
        rc, out, _ = launch(n, os.path.join(HERE, "worker_hvdusers.py"), [], 240)
        checks("hvdusers%d" % n, rc, out, n)


def t_hvdrun():
    # Horovod's Python launcher, horovod.run, called from a script run without a launcher
    # (tests/python/hvdrun_main.py: its MNIST example's --num-proc path), on 2 trainers
    rc, out, _ = sh([PY, os.path.join(HERE, "hvdrun_main.py"), "--num-proc", "2"], 240,
                    env={"SPARSECOMM_RUN": RUN})
    checks("hvdrun", rc, out, 1)


def t_hvdexamples():
    # the calls and idioms of Horovod's PyTorch examples and documentation snippets
    # (tests/python/worker_hvdexamples.py), scaled down; on 2 ranks and on 3, and on 3
    # trainers of one node (one daemon: local_size 3, one timeline file)
    os.environ["SPARSECOMM_TEST_TMP"] = TMP
    worker = os.path.join(HERE, "worker_hvdexamples.py")
    for n in (2, 3):
        rc, out, _ = launch(n, worker, [], 300)
        checks("hvdexamples%d" % n, rc, out, n)
    rc, out, _ = launch(1, worker, [], 300, per_node=3)
    checks("hvdexamples1x3", rc, out, 3)


def t_cuda():
    # no CUDA driver: cuda registrations fail clearly, cpu tensors keep working
    rc, out, _ = launch(2, os.path.join(HERE, "worker_cuda.py"),
                        [os.path.join(TMP, "none", "libcuda.so.1")], 120)
    checks("cuda", rc, out, 2)


def t_gpu():
    # torch's CUDA tensors end to end (tests/python/worker_gpu.py), every trainer on one
    # GPU: 2 nodes x 2 trainers, then 4 nodes x 1, where sparse results come back sparse.
    # Skipped, saying why, where torch has no CUDA device or the daemons serve no GPU.
    worker = os.path.join(HERE, "worker_gpu.py")
    rc, out, _ = launch(2, worker, [], 300, per_node=2)
    skips_or_checks("gpu", rc, out, 4)
    if re.search(r"^(?:\[\d+\] )?(?:SKIP gpu|CHECK gpu FAIL)", out, re.M):
        return  # no GPU here: the other runs would say the same
    rc, out, _ = launch(4, worker, ["sparse_embedding", "sparse_result_forms"], 240)
    skips_or_checks("gpu_sparse_results", rc, out, 4)
    # the same between daemons over NCCL (transport = nccl: a job fails rather than fall
    # back to tcp), each node a host of its own to NCCL on the one GPU
    rc, out, _ = launch(4, worker, [], 300,
                        extra=["--nccl-hostid", "--daemon-arg", "--transport",
                               "--daemon-arg", "nccl"])
    skips_or_checks("gpu_nccl", rc, out, 4)


def t_lossless_dense():
    args = ["--sparsifier", "none", "--steps", "100", "--log-every", "50"]
    script = os.path.join(EX, "digits_mlp.py")
    a = json_run("digits_lossless", 4, script, args)
    b = gloo_run("digits_gloo", 4, script, args)
    ok, worst = same_losses(a, b, 1e-4)
    record("lossless.digits_vs_gloo", ok and abs(a["final_loss"] - b["final_loss"]) <=
           1e-4 * b["final_loss"], "worst relative step-loss difference %.2e, final %.6f vs "
           "%.6f" % (worst, a["final_loss"], b["final_loss"]))


def t_lossless_sparse():
    args = ["--steps", "60", "--log-every", "20"]
    script = os.path.join(EX, "word_lm.py")
    a = json_run("word_lossless", 4, script, args)
    b = gloo_run("word_gloo", 4, script, args)
    ok, worst = same_losses(a, b, 1e-4)
    record("lossless.word_lm_sparse_embedding_vs_gloo", ok,
           "worst relative step-loss difference %.2e" % worst)


def t_ddp():
    args = ["--sparsifier", "none", "--steps", "60", "--log-every", "30"]
    script = os.path.join(EX, "digits_mlp.py")
    a = json_run("digits_ddp", 4, script, args + ["--backend", "ddp"])
    b = gloo_run("digits_gloo60", 4, script, args)
    # DDP fuses gradients into buckets, so the daemons sum in a different order than
    # per-parameter gloo allreduces: rounding differences, amplified over 60 steps
    ok, worst = same_losses(a, b, 2e-3)
    record("ddp_hook.digits_vs_gloo", ok, "worst relative step-loss difference %.2e" % worst)


def t_torchddp():
    # torch's own DDP (the GPU peer of tests/gpu/device_check.sh --figures, here over
    # gloo) under the launcher: rank 0's parameters broadcast, every bucket averaged, the
    # same run as the per-parameter gloo reference
    args = ["--steps", "60", "--log-every", "30"]
    script = os.path.join(EX, "digits_mlp.py")
    a = json_run("digits_torchddp", 4, script, args + ["--backend", "torchddp"])
    b = gloo_run("digits_gloo60", 4, script, args + ["--sparsifier", "none"])
    ok, worst = same_losses(a, b, 2e-3)
    record("torchddp.digits_vs_gloo", ok and a.get("backend") == "torchddp",
           "worst relative step-loss difference %.2e" % worst)


def t_ddp_select():
    # the DDP hook selects per parameter before the bucket is exchanged (every parameter
    # gets its k), the whole-bucket selection starves a small bias
    rc, out, _ = launch(2, os.path.join(HERE, "worker_ddp_select.py"), [], 240)
    checks("ddp_select", rc, out, 2)


def t_topk():
    script = os.path.join(EX, "digits_mlp.py")
    common = ["--steps", "600", "--log-every", "200"]
    a = json_run("digits_topk", 4, script, common + ["--sparsifier", "topk", "--density", "0.01"])
    b = gloo_run("digits_dense600", 4, script, common)
    ratio = a["test_loss"] / b["test_loss"]
    record("topk1pct_error_feedback.final_loss_within_10pct", abs(ratio - 1) <= 0.10,
           "held-out loss top-k %.4f vs dense %.4f (ratio %.3f); training loss %.4f vs %.4f"
           % (a["test_loss"], b["test_loss"], ratio, a["final_loss"], b["final_loss"]))


def t_failure():
    # rank 1 raises at step 20; the others must raise SparsecommError by themselves,
    # well before the launcher's grace period (60 s) would stop them. Rank 1's exit ends
    # its session with its step's gradients in flight (its node is then degraded and the
    # others' operations abort naming it) or, when the daemons finished them first, cleanly
    # (then the others' next step stalls, naming it): the stall timeout is under the
    # trainers' 30 s so that either way names rank 1.
    rc, out, secs = launch(4, os.path.join(EX, "digits_mlp.py"),
                           ["--sparsifier", "none", "--steps", "400", "--fail-at-step", "20",
                            "--fail-rank", "1", "--timeout", "30"], 150,
                           extra=["--grace", "60", "--daemon-arg", "--stall_timeout_ms",
                                  "--daemon-arg", "10000"])
    survivors = [r for r in (0, 2, 3)
                 if re.search(r"^\[%d\] sparsecomm\.SparsecommError: SC_ERR_\w+: .*rank 1"
                              % r, out, re.M)]
    ok = rc not in (0, None) and survivors == [0, 2, 3] and secs < 60
    record("rank_failure.survivors_raise", ok,
           "launcher rc=%s after %.1f s; survivors that raised naming rank 1: %s%s" %
           (rc, secs, survivors, "" if ok else "\n" + tail(out, 40)))

def t_wire():
    # Compression.fp16/bf16 and a float16 tensor over the 16-bit wire: results within
    # 16-bit rounding, half the bytes of the float32 ring
    rc, out, _ = launch(2, os.path.join(HERE, "worker_wire.py"), [], 180)
    checks("wire", rc, out, 2)


def t_psets():
    # Horovod's process sets (tests/python/worker_psets.py): sets across the nodes and
    # within one node of 2 nodes x 2 trainers (given to init), then the same sets on 4
    # nodes x 1 (added after init(process_sets="dynamic"))
    worker = os.path.join(HERE, "worker_psets.py")
    rc, out, _ = launch(2, worker, [], 300, per_node=2)
    skips_or_checks("psets2x2", rc, out, 4)
    if re.search(r"^(?:\[\d+\] )?SKIP psets", out, re.M):
        return  # the library has no process sets: the other layout would say the same
    rc, out, _ = launch(4, worker, ["--dynamic-init"], 300)
    skips_or_checks("psets4x1", rc, out, 4)


TESTS = [t_header, t_header_example, t_api, t_colls, t_unnamed, t_mismatch, t_mismatch2, t_named, t_horovod_port,
         t_horovod_contract,
         t_hvdapi, t_hvdops, t_hvdsuite, t_hvdusers, t_hvdrun, t_hvdexamples,
         t_wire, t_psets,
         t_cuda, t_gpu, t_lossless_dense, t_lossless_sparse, t_ddp, t_torchddp, t_ddp_select,
         t_topk, t_failure]


def main():
    sel = sys.argv[1:]
    daemonless = (t_header,)
    for t in TESTS:
        if sel and not any(s in t.__name__ for s in sel):
            continue
        if t not in daemonless and not os.access(RUN, os.X_OK):
            record(t.__name__[2:], False, "%s is missing: build it with `make`" % RUN)
            continue
        try:
            t()
        except Exception as e:  # noqa: B902
            record(t.__name__[2:], False, "%s: %s" % (type(e).__name__, e))
    passed = sum(1 for _, ok in results if ok)
    if skipped:
        print("(%d skipped)" % len(skipped), flush=True)
    print("%d passed, %d failed" % (passed, len(results) - passed), flush=True)
    return 0 if passed == len(results) else 1


sys.exit(main())
