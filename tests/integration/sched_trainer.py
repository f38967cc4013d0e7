"""sched_trainer.py: a trainer started by a scheduler (mpirun, srun's variables, torchrun),
or alone, with no sparsecomm-run and no SPARSECOMM_* variable
(tests/integration/run_sched.sh).

    sched_trainer.py sums           allreduce exact sums, check the place against the
                                    scheduler's rank variable, print "sched: rank R passed"
    sched_trainer.py kill VICTIM    rank VICTIM kills itself (SIGKILL) after the first
                                    allreduce; the others' next allreduce must fail naming it
    sched_trainer.py time           print "sched-time: rank R first allreduce after S s"
                                    (seconds since the process started)
"""
import glob
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402

import sparsecomm as sc  # noqa: E402

SCHED_RANK = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "SPARSECOMM_RANK")


def since_start():
    """Seconds since this process started (/proc's start time, in clock ticks since boot)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "sums"
    sc.init(timeout=60, connect_timeout=float(os.environ.get("SCHED_CONNECT_TIMEOUT", "30")))
    r, n = sc.rank(), sc.size()
    # no scheduler's rank: started alone, rank 0 of a job of one
    want = next((int(os.environ[v]) for v in SCHED_RANK if v in os.environ), 0)
    if os.environ.get("OMPI_MCA_rmaps_base_mapping_policy") == "node" and want is not None:
        # mpirun --map-by node: rank R is trainer R / N of node R % N, numbered node by node
        nodes = int(os.environ["OMPI_MCA_orte_num_nodes"])
        per_node = int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"])
        want = (want % nodes) * per_node + want // nodes
        if sc.local_rank() != int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]):
            print("FAIL (rank %d: local rank %d, Open MPI's %s)" %
                  (r, sc.local_rank(), os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]), flush=True)
            return 1
    if want != r:
        print("FAIL (rank %d, the scheduler's %s)" % (r, want), flush=True)
        return 1
    x = np.arange(1000, dtype=np.float64) * (r + 1)
    sc.allreduce_(x, name="grad", average=False)
    if mode == "time":
        now = time.time()
        print("sched-time: rank %d first allreduce after %.3f s, at %.3f" %
              (r, since_start(), now), flush=True)
    expect = np.arange(1000, dtype=np.float64) * (n * (n + 1) // 2)
    if not np.array_equal(x, expect):
        print("FAIL (rank %d: sums differ at %d)" % (r, int(np.argmax(x != expect))), flush=True)
        return 1
    for step in range(5):
        y = np.full(257, float(r * 10 + step), dtype=np.float32)
        sc.allreduce_(y, name="step", average=False)
        if not np.all(y == float(10 * n * (n - 1) // 2 + n * step)):
            print("FAIL (rank %d step %d: %r)" % (r, step, y[0]), flush=True)
            return 1
    if mode == "kill":
        victim = int(sys.argv[2])
        if r == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            sc.allreduce_(x, name="after", average=False, timeout=60)
        except sc.SparsecommError as e:
            msg = str(e)
            ok = ("rank %d" % victim) in msg
            print("sched: rank %d %s: %s" % (r, "passed" if ok else "FAIL (error does not name the victim)",
                                             msg.replace("\n", " ")), flush=True)
            return 0 if ok else 1
        print("FAIL (rank %d: the allreduce after rank %d died succeeded)" % (r, victim), flush=True)
        return 1
    if r == 0:
        base = os.path.join(os.environ.get("TMPDIR") or "/tmp", "sparsecomm-job-%d" % os.geteuid())
        socks = glob.glob(os.path.join(base, "*", "node*", "ctl.sock"))
        print("sched: daemons %d" % len(socks), flush=True)
        print("sched: master %s" % os.environ.get("MASTER_ADDR", "-"), flush=True)
    print("sched: rank %d passed (local %d of %d, %d trainers)" % (r, sc.local_rank(),
                                                                 sc.local_size(), n), flush=True)
    sc.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
