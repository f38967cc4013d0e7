#!/usr/bin/env python3
"""timeline_check.py: checks one daemon's timeline file (docs/design.md, Timeline).

    timeline_check.py FILE --rank R --world P --steps N --tensors A,B,.. [--sparsified A,..]

Passes (exit 0) when FILE is valid JSON in the Chrome Trace Event object form; every event
has ph, ts, pid (the rank R) and tid; every lane in use is labelled (thread_name); the
complete events of each lane nest (an event that starts inside another ends inside it);
each named tensor has wait_ranks for steps 1..N and, after each, local_sum and copy_out
(and sparsify for the sparsified ones) before the next step's wait_ranks (local_sum and
sparsify may be on the tensor's "NAME (ahead)" lane instead, from its wait_ranks on: the
selection at submission); with --ahead-before A:B (several pairs: comma-separated),
from step --ahead-from (2 unless given) on A's selection at submission ended before B's
wait_ranks began (B was submitted) and A's buffer did not select A again; every buffer
event holds a scheme event, and with P > 1 the scheme events hold exchange rounds (xchg,
allreduce or meta) with the bytes they sent; no event was dropped. Prints every problem
found, one a line, and exits 1.
"""
import argparse
import json
import sys

ROUNDS = ("xchg", "allreduce", "meta")


def ns(us):
    """Microseconds with three decimals (as the daemon writes them) to integer ns."""
    return int(round(float(us) * 1000))


def nesting(lanes, problems):
    """Complete events of one lane must nest: no partial overlap."""
    for tid, evs in lanes.items():
        stack = []
        for e in sorted(evs, key=lambda e: (e["t0"], -e["t1"])):
            while stack and stack[-1]["t1"] <= e["t0"]:
                stack.pop()
            if stack and e["t1"] > stack[-1]["t1"]:
                p = stack[-1]
                problems.append(
                    "lane %d: %s [%d, %d] ns overlaps %s [%d, %d] ns without nesting"
                    % (tid, e["name"], e["t0"], e["t1"], p["name"], p["t0"], p["t1"]))
            stack.append(e)


def inside(outer, inner):
    return outer["t0"] <= inner["t0"] and inner["t1"] <= outer["t1"]


def check_tensor(name, evs, ahead, steps, sparsified, problems):
    waits = {}
    for e in evs:
        if e["name"] == "wait_ranks":
            waits.setdefault(e["args"].get("step"), e)
    missing = [s for s in range(1, steps + 1) if s not in waits]
    if missing:
        problems.append("tensor %s: no wait_ranks for steps %s (has %s)"
                        % (name, missing, sorted(k for k in waits if k is not None)))
        return
    want = ["local_sum", "copy_out"] + (["sparsify"] if sparsified else [])
    for s in range(1, steps + 1):
        lo = waits[s]["t1"]
        hi = waits[s + 1]["t0"] if s + 1 in waits else float("inf")
        for phase in want:
            if any(e["name"] == phase and lo <= e["t0"] and e["t1"] <= hi for e in evs):
                continue
            # summed and selected at submission: on the tensor's "(ahead)" lane, from
            # its wait_ranks on
            if phase != "copy_out" and any(
                    e["name"] == phase and waits[s]["t0"] <= e["t0"] and e["t1"] <= hi
                    for e in ahead):
                continue
            problems.append("tensor %s step %d: no %s between its wait_ranks and the "
                            "next step's" % (name, s, phase))


def check_ahead_before(spec, by_label, steps, first, problems):
    """A:B: from step first on (1: the first step's selection is speculative), tensor A's
    selection at submission ended before tensor B was submitted (B's wait_ranks began),
    and A's buffer took it (no sparsify on A's own lane in that step)."""
    a, b = spec.split(":")
    ahead = by_label.get(a + " (ahead)", [])
    waits_b = {e["args"].get("step"): e for e in by_label.get(b, [])
               if e["name"] == "wait_ranks"}
    waits_a = sorted(e["t0"] for e in by_label.get(a, []) if e["name"] == "wait_ranks")
    for s in range(first, steps + 1):
        if s not in waits_b or len(waits_a) < s:
            problems.append("--ahead-before %s: step %d has no wait_ranks" % (spec, s))
            continue
        nxt = waits_a[s] if len(waits_a) > s else float("inf")
        sel = [e for e in ahead
               if e["name"] == "sparsify" and waits_a[s - 1] <= e["t0"] < nxt]
        if not sel:
            problems.append("tensor %s step %d: no selection at submission (no sparsify "
                            "on its (ahead) lane)" % (a, s))
        elif any(e["name"] == "sparsify" and waits_a[s - 1] <= e["t0"] < nxt
                 for e in by_label.get(a, [])):
            problems.append("tensor %s step %d: selected again at its buffer (the "
                            "selection at submission was not taken)" % (a, s))
        elif sel[0]["t1"] > waits_b[s]["t0"]:
            problems.append("tensor %s step %d: its selection ended %.3f ms after %s was "
                            "submitted" % (a, s, (sel[0]["t1"] - waits_b[s]["t0"]) / 1e6, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--tensors", required=True)
    ap.add_argument("--sparsified", default="")
    ap.add_argument("--ahead-before", default="",
                    help="A:B[,C:D..]: A's selection at submission ends before B is "
                    "submitted")
    ap.add_argument("--ahead-from", type=int, default=2,
                    help="the first step --ahead-before checks")
    a = ap.parse_args()
    problems = []
    try:
        with open(a.file, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("timeline_check: %s: not valid JSON: %s" % (a.file, e))
        return 1
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        print("timeline_check: %s: no traceEvents list" % a.file)
        return 1
    labels, lanes = {}, {}
    for i, e in enumerate(events):
        for k in ("ph", "ts", "pid", "tid"):
            if k not in e:
                problems.append("event %d (%s) lacks %s" % (i, e.get("name"), k))
        if e.get("pid") != a.rank:
            problems.append("event %d (%s) has pid %s, the rank is %d"
                            % (i, e.get("name"), e.get("pid"), a.rank))
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            labels[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                problems.append("event %d (%s): dur %r" % (i, e.get("name"), e.get("dur")))
                continue
            t0 = ns(e["ts"])
            lanes.setdefault(e["tid"], []).append(
                {"name": e["name"], "t0": t0, "t1": t0 + ns(e["dur"]),
                 "args": e.get("args", {})})
        elif e.get("ph") != "M":
            problems.append("event %d (%s): phase %r" % (i, e.get("name"), e.get("ph")))
    for tid in lanes:
        if tid not in labels:
            problems.append("lane %d has events but no thread_name" % tid)
    nesting(lanes, problems)

    by_label = {labels.get(t): evs for t, evs in lanes.items()}
    sparsified = set(x for x in a.sparsified.split(",") if x)
    for name in a.tensors.split(","):
        if name not in by_label:
            problems.append("tensor %s has no lane" % name)
            continue
        check_tensor(name, by_label[name], by_label.get(name + " (ahead)", []), a.steps,
                     name in sparsified, problems)
    for spec in (x for x in a.ahead_before.split(",") if x):
        check_ahead_before(spec, by_label, a.steps, a.ahead_from, problems)

    buffers = schemes = rounds = 0
    for tid, evs in lanes.items():
        for b in (e for e in evs if e["name"] == "buffer"):
            buffers += 1
            sch = [e for e in evs if e["name"] == "scheme" and inside(b, e)]
            if not sch:
                problems.append("buffer (job %s) on lane %s holds no scheme event"
                                % (b["args"].get("job"), labels.get(tid)))
            for s in sch:
                schemes += 1
                if not s["args"].get("scheme") or s["args"].get("bytes", 0) <= 0:
                    problems.append("scheme event of job %s without scheme name or bytes: %s"
                                    % (b["args"].get("job"), s["args"]))
                for r in (e for e in evs if e["name"] in ROUNDS and inside(s, e)):
                    rounds += 1
                    if r["args"].get("send_bytes", 0) <= 0 and r["name"] != "meta":
                        problems.append("%s round in job %s sent %s bytes"
                                        % (r["name"], b["args"].get("job"),
                                           r["args"].get("send_bytes")))
    if buffers < a.steps:
        problems.append("%d buffer events for %d steps" % (buffers, a.steps))
    if a.world > 1 and rounds == 0:
        problems.append("no exchange round (%s) inside the %d scheme events"
                        % ("/".join(ROUNDS), schemes))
    dropped = doc.get("otherData", {}).get("dropped_events")
    if dropped != 0:
        problems.append("dropped_events is %r" % dropped)

    for p in problems:
        print("timeline_check: %s: %s" % (a.file, p))
    if problems:
        return 1
    print("timeline_check: %s: %d lanes, %d buffers, %d scheme events, %d exchange rounds"
          % (a.file, len(lanes), buffers, schemes, rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
