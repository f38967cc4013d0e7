#!/usr/bin/python3
"""The cost model's planner (`sparsecomm-bench model`) against runs on this machine: for
each node count, the collective benchmark on emulated nodes (`sparsecomm-run -n N --netns
--rate RATE`, root), then the planner for the same workload, link rate and node count,
in one table: each scheme's prediction by the planner and by the daemons (their own
profile and measured network, before calibration), against the daemons' measured time
of the scheme (the slowest rank's last step) and the step as the trainer saw it.

    /usr/bin/python3 bench/model_check.py --ranks 3,4 [--numel 67108864] [--density 0.01]
        [--schemes agsparse,hier_central,balanced_par,auto] [--iters 3] [--markdown F]

The planner's inputs: the zipf workload's profile measured at N ranks (the inputs the
benchmark feeds), goodput = RATE x 0.952, the latency per round the daemons' probe
measured (their log's "network: alpha"), and N / cores nodes per core (the emulated nodes
share this host's cores). The load average before and after each run is printed: the
nodes share the host with whatever else runs on it.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_collective(a, n, tmp):
    logs, out = os.path.join(tmp, "logs%d" % n), os.path.join(tmp, "coll%d.json" % n)
    cmd = [os.path.join(a.bin, "sparsecomm-run"), "-n", str(n), "--netns", "--rate", a.rate,
           "--log-dir", logs, "--", os.path.join(a.bin, "sparsecomm-bench"), "collective",
           "--workload", "zipf", "--numel", str(a.numel), "--density", str(a.density),
           "--scheme", a.schemes, "--iters", str(a.iters), "--json-out", out]
    load0 = os.getloadavg()[0]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=3600)
    load1 = os.getloadavg()[0]
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit("model_check: the collective run on %d nodes failed:\n%s" % (n, r.stdout))
    alphas = []
    for f in glob.glob(os.path.join(logs, "*.log")):
        with open(f) as fh:
            alphas += [float(x) for x in re.findall(r"network: alpha ([\d.]+) us", fh.read())]
    if not alphas:
        sys.exit("model_check: no 'network: alpha' in the daemons' logs (%s)" % logs)
    with open(out) as fh:
        return json.load(fh), sum(alphas) / len(alphas), (load0, load1)


def run_model(a, n, alpha_us):
    cmd = [os.path.join(a.bin, "sparsecomm-bench"), "model", "--json", "--profile", "zipf",
           "--numel", str(a.numel), "--density", str(a.density), "--ranks", str(n),
           "--rate", a.rate, "--latency-us", "%.3f" % alpha_us,
           "--cpu-share", "%g" % max(1.0, n / os.cpu_count())]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(r.stdout)["rows"][0]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="3,4")
    p.add_argument("--numel", type=int, default=67108864)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--schemes", default="agsparse,hier_central,balanced_par,auto")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--markdown", help="also write the table to this file")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("model_check: --netns needs root")
    lines = ["| P | scheme | planner (ms) | daemon's prediction (ms) | measured in the "
             "daemon (ms) | step (ms) | planner / measured | work outside exchanges (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    with tempfile.TemporaryDirectory(prefix="sc-model-check.") as tmp:
        for n in [int(x) for x in a.ranks.split(",")]:
            coll, alpha_us, load = run_collective(a, n, tmp)
            model = run_model(a, n, alpha_us)
            cost = {s["name"]: s for s in model["schemes"]}
            notes.append("P %d: load average %.1f before, %.1f after, on %d cores; latency "
                         "%.1f us per round (the daemons' probe); the planner's auto: %s"
                         % (n, load[0], load[1], os.cpu_count(), alpha_us, model["auto"]))
            avb = coll.get("auto_vs_best")
            if avb:
                notes.append("P %d: auto ran %s, %.1f ms; the fastest pinned %s, %.1f ms; "
                             "auto / best %.3f" % (n, avb["auto"], avb["auto_s"] * 1e3,
                                                   avb["best"], avb["best_s"] * 1e3,
                                                   avb["ratio"]))
            for r in coll["results"]:
                ran = r["chosen"]
                plan = cost[ran]["seconds"] if ran in cost else 0
                meas = r.get("measured_s") or 0
                name = r["scheme"] if r["scheme"] == ran else "%s (ran %s)" % (r["scheme"], ran)
                lines.append("| %d | %s | %.1f | %.1f | %.1f | %.1f | %s | %.1f |" % (
                    n, name, plan * 1e3, (r.get("predicted_s") or 0) * 1e3, meas * 1e3,
                    r["time_s"] * 1e3, "%.2f" % (plan / meas) if meas > 0 else "-",
                    (r.get("work_s") or 0) * 1e3))
    text = "\n".join(lines) + "\n\n" + "\n".join("- " + x for x in notes) + "\n"
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
