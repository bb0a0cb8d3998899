#!/usr/bin/python3
"""Where one training iteration of a --trace file waits, phase by phase.

    nntrainer-offload train MODEL.ini ... --window N --trace FILE
    /usr/bin/python3 bench/trace_phases.py FILE [--stage-regex RE] [--stalls K]

Takes the last complete training iteration of the trace (from the
second-to-last start of the pass's first step to the last one; trace a
run with --eval-samples 0, whose passes are all training) and cuts
it into phases: consecutive steps of one direction (F: forward; B: the
backward with its R and U steps) and one stage of the network. A step's
stage is the first match of --stage-regex in its layer's name (default:
ResNet's `b1`..`b4` and `stem`, MobileNetV2's `blockN`); a layer that does
not match (multiouts, pooling, the classifier) and every R step (it runs
inside a later layer's backward) join the stage of the step before them;
steps before the first match form `input`.

Per phase, in ms: its wall span (from the end of the phase before), the
executor's compute (its "train" spans) and stall (its "stall" spans, each
counted in the phase of the step it waited for), the time the read
channel, the write channel and the device (either) had a request in
flight (unions of the trace's "read" and "write" spans, clipped to the
phase), and the MiB read and written by requests submitted in it. A phase
whose device time is close to its span is I/O-bound; one that stalls while
the device idles waits for something else (room, a late start).
--stalls K also lists the K longest waits of the iteration.
"""

import argparse
import json
import re
import sys

DEFAULT_STAGES = r"^(b\d+|stem|block\d+)"


def load(path):
    with open(path) as f:
        d = json.load(f)
    ev = d["traceEvents"] if isinstance(d, dict) else d
    return [e for e in ev if e.get("ph") == "X"]


def last_iteration(ev):
    """(t0, t1) in us: the last complete training iteration."""
    steps = [e for e in ev if e.get("cat") == "train"]
    if not steps:
        sys.exit("no training steps in the trace")
    first = steps[0]["name"]
    starts = [e["ts"] for e in steps if e["name"] == first]
    if len(starts) < 2:
        sys.exit("the trace holds fewer than two iterations")
    return starts[-2], starts[-1]


def union_ms(spans, a, b):
    """Length in ms of the union of spans [s, e) clipped to [a, b)."""
    cut = sorted((max(a, s), min(b, e)) for s, e in spans if e > a and s < b)
    total, cs, ce = 0.0, None, None
    for s, e in cut:
        if ce is None or s > ce:
            if ce is not None:
                total += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    if ce is not None:
        total += ce - cs
    return total / 1e3


def phases(ev, t0, t1, stage_re):
    """[(name, start, end, compute us, step names)] in iteration order."""
    out, stage = [], "input"
    for e in sorted((e for e in ev if e.get("cat") == "train"
                     and t0 <= e["ts"] < t1), key=lambda e: e["ts"]):
        m = re.match(r"([FBUR])\d+ (\S+)", e["name"])
        if not m:
            continue
        s = re.search(stage_re, m.group(2)) if m.group(1) != "R" else None
        if s:
            stage = s.group(0)
        name = ("F:" if m.group(1) == "F" else "B:") + stage
        end = e["ts"] + e["dur"]
        if out and out[-1][0] == name:
            p = out[-1]
            out[-1] = (name, p[1], end, p[3] + e["dur"], p[4] | {e["name"]})
        else:
            out.append((name, e["ts"], end, e["dur"], {e["name"]}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--stage-regex", default=DEFAULT_STAGES)
    ap.add_argument("--stalls", type=int, default=0)
    a = ap.parse_args()
    ev = load(a.trace)
    t0, t1 = last_iteration(ev)
    ph = phases(ev, t0, t1, a.stage_regex)
    rd = [e for e in ev if e.get("cat") == "read"]
    wr = [e for e in ev if e.get("cat") == "write"]
    span = lambda es: [(e["ts"], e["ts"] + e["dur"]) for e in es]
    R, W = span(rd), span(wr)
    stalls = [e for e in ev if e.get("cat") == "stall" and t0 <= e["ts"] < t1]
    owner = {}  # step name -> phase index
    for i, p in enumerate(ph):
        for n in p[4]:
            owner[n] = i
    stall = [0.0] * len(ph)
    for e in stalls:
        i = owner.get(e["name"][len("wait "):])
        if i is not None:
            stall[i] += e["dur"] / 1e3
    print("iteration %.1f ms (the trace's last complete one)" % ((t1 - t0) / 1e3))
    print("%-10s %8s %8s %8s %8s %8s %8s %8s %8s" % (
        "phase", "span", "compute", "stall", "read", "write", "device",
        "MiB rd", "MiB wr"))
    prev = t0
    for i, (name, _, end, comp, _) in enumerate(ph):
        mib = lambda es: sum(e["args"].get("bytes", 0) for e in es
                             if prev <= e["ts"] < end) / 2**20
        print("%-10s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f" % (
            name, (end - prev) / 1e3, comp / 1e3, stall[i],
            union_ms(R, prev, end), union_ms(W, prev, end),
            union_ms(R + W, prev, end), mib(rd), mib(wr)))
        prev = end
    print("%-10s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f" % (
        "iteration", (t1 - t0) / 1e3, sum(p[3] for p in ph) / 1e3, sum(stall),
        union_ms(R, t0, t1), union_ms(W, t0, t1), union_ms(R + W, t0, t1)))
    for e in sorted(stalls, key=lambda e: -e["dur"])[:a.stalls]:
        print("  at %8.1f ms: %6.2f ms %s" % ((e["ts"] - t0) / 1e3,
                                              e["dur"] / 1e3, e["name"]))


if __name__ == "__main__":
    main()
