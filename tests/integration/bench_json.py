#!/usr/bin/env python3
"""bench_json.py FILE SCHEMES: checks the JSON that `sparsecomm-bench collective
--json-out FILE --check` wrote for the comma-separated SCHEMES (in order, "auto" allowed):
one result per scheme with every field of the contract, 0 wrong, identical ranks, bytes
and bound consistent with each other. Prints what is wrong and exits 1, or exits 0."""
import json
import math
import sys

KNOWN = {"dense_ring", "agsparse", "hier_central", "balanced_par", "omnireduce", "spardl",
         "s2_sketch", "exdyna", "exdyna_owner"}
FIELDS = ("scheme", "chosen", "lossless", "wrong", "time_s", "bytes_sent", "bytes_recv",
          "step_bytes_max", "bound_s", "busbw", "predicted_s", "measured_s", "work_s",
          "pred_over_measured", "cpu_s", "cpu_sum_s", "ranks_identical", "failed")


def check(doc, schemes):
    errs = []
    res = doc.get("results")
    if not isinstance(res, list) or [r.get("scheme") for r in res] != schemes:
        return ["results: %r, expected one per scheme of %r" %
                ([r.get("scheme") for r in res or []], schemes)]
    rate = doc["goodput_bytes_per_s"]
    for r in res:
        name = r["scheme"]
        missing = [f for f in FIELDS if f not in r]
        if missing:
            errs.append("%s: no %s" % (name, ", ".join(missing)))
            continue
        if r["failed"] or r["wrong"] != 0 or r["ranks_identical"] is not True:
            errs.append("%s: failed %s, wrong %s, ranks identical %s" %
                        (name, r["failed"], r["wrong"], r["ranks_identical"]))
        if r["chosen"] not in KNOWN or (name != "auto" and r["chosen"] != name):
            errs.append("%s: ran %r" % (name, r["chosen"]))
        if r["lossless"] != (r["chosen"] in KNOWN - {"spardl", "s2_sketch", "exdyna",
                                                      "exdyna_owner"}):
            errs.append("%s: lossless %s for %s" % (name, r["lossless"], r["chosen"]))
        if not (r["time_s"] > 0 and r["bytes_sent"] > 0 and r["bytes_recv"] > 0):
            errs.append("%s: time %s, bytes %s/%s" %
                        (name, r["time_s"], r["bytes_sent"], r["bytes_recv"]))
        # the mean over steps of the busiest rank's bytes is at least any rank's mean
        # (rounding of the per-step float slots aside)
        if not r["step_bytes_max"] >= 0.999 * max(r["bytes_sent"], r["bytes_recv"]):
            errs.append("%s: step_bytes_max %s below the per-rank bytes %s/%s" %
                        (name, r["step_bytes_max"], r["bytes_sent"], r["bytes_recv"]))
        want = doc["alpha_s"] + r["step_bytes_max"] / rate
        if not math.isclose(r["bound_s"], want, rel_tol=1e-3, abs_tol=2e-6):
            errs.append("%s: bound_s %s, alpha + step bytes / goodput = %s" %
                        (name, r["bound_s"], want))
        # the cost model's error: its prediction over the daemon's measured time (the
        # times are printed to the microsecond)
        if not (r["pred_over_measured"] > 0 and abs(
                r["pred_over_measured"] * r["measured_s"] - r["predicted_s"]) <=
                1e-6 + 2e-3 * r["predicted_s"]):
            errs.append("%s: pred_over_measured %s, predicted %s / measured %s" %
                        (name, r["pred_over_measured"], r["predicted_s"], r["measured_s"]))
        if not (r["work_s"] is None or 0 <= r["work_s"] <= r["measured_s"] + 1e-6):
            errs.append("%s: work_s %s outside [0, measured %s]" %
                        (name, r["work_s"], r["measured_s"]))
        # one engine thread per daemon: its CPU time within the slowest call's wall time,
        # and the sum over the ranks at least the busiest one's
        if not (0 < r["cpu_s"] <= r["measured_s"] * 1.01 + 1e-3 and
                r["cpu_s"] <= r["cpu_sum_s"] <= doc["P"] * r["cpu_s"] * 1.0001 + 1e-6):
            errs.append("%s: cpu_s %s, cpu_sum_s %s, measured %s, P %s" %
                        (name, r["cpu_s"], r["cpu_sum_s"], r["measured_s"], doc["P"]))
        # ExDyna sends each selected index to the P - 1 others (4 (P-1) c bytes, c its
        # count; 8 (P-1) c on the ring path) and sums the K <= P c values in a ring
        # (2 (P-1) / P x 4K), and with the cap variant (run.sh sets exdyna_cap = 1.25)
        # no rank selects over 1.25 x its share of
        # k = density x numel (device/exdyna.h): at most 16 (P-1) c. The metadata round
        # adds a header and 1 + 257 words per peer, the rings a rounded chunk per round.
        # A threshold that lost the target (a growing residual) would send many times this.
        if r["chosen"] in ("exdyna", "exdyna_owner"):
            P, k = doc["P"], round(doc["density"] * doc["numel"])
            share = max(1, (k + P // 2) // P)
            cap = (16 * (P - 1) * (1250 * share // 1000) + (P - 1) * (64 + 8 * 258) +
                   4 * (P - 1) * 8)
            if not r["bytes_sent"] <= 1.01 * cap:
                errs.append("%s: ExDyna sent %s bytes per step, over its cap %s" %
                            (name, r["bytes_sent"], cap))
    if "auto" in schemes and doc.get("selected") not in KNOWN:
        errs.append("selected: %r" % doc.get("selected"))
    # auto against the fastest pinned run of a scheme auto may pick (lossless ones on the
    # COO workloads)
    pickable = [r for r in res if r["scheme"] in KNOWN - {"s2_sketch", "exdyna",
                                                          "exdyna_owner"} and
                (doc["workload"] == "topk" or r["lossless"])]
    if "auto" in schemes and pickable:
        avb, best = doc.get("auto_vs_best"), min(pickable, key=lambda r: r["time_s"])
        auto = [r for r in res if r["scheme"] == "auto"][0]
        if (not isinstance(avb, dict) or avb.get("best") != best["scheme"] or
                avb.get("auto") != auto["chosen"] or
                not math.isclose(avb.get("ratio", 0), auto["time_s"] / best["time_s"],
                                 rel_tol=2e-3)):
            errs.append("auto_vs_best: %r, the fastest pinned %s at %s s, auto %s s" %
                        (avb, best["scheme"], best["time_s"], auto["time_s"]))
    # --rounds R: one entry per round, numbered, each its own auto / best; the first is
    # the results' own
    if doc.get("rounds", 1) > 1:
        per = doc.get("per_round")
        if not isinstance(per, list) or [p.get("round") for p in per] != list(
                range(1, doc["rounds"] + 1)):
            errs.append("per_round: %r for %s rounds" % (per, doc["rounds"]))
        elif "auto" in schemes and pickable:
            for p in per:
                if (p.get("auto") not in KNOWN or p.get("best") not in schemes or
                        not math.isclose(p["ratio"], p["auto_s"] / p["best_s"],
                                         rel_tol=2e-3)):
                    errs.append("per_round: round %r: %r" % (p.get("round"), p))
            avb = doc.get("auto_vs_best") or {}
            if per[0].get("ratio") != avb.get("ratio"):
                errs.append("per_round: round 1 %r is not auto_vs_best %r" % (per[0], avb))
    return errs


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip())
        return 2
    try:
        with open(sys.argv[1]) as f:
            doc = json.load(f)
        errs = check(doc, sys.argv[2].split(","))
    except (OSError, ValueError, KeyError, TypeError) as e:
        errs = ["%s: %s: %s" % (sys.argv[1], type(e).__name__, e)]
    for e in errs:
        print(e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
