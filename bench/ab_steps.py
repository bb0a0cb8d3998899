#!/usr/bin/python3
"""Two (or more) builds side by side: step time per iteration by step kind.

    /usr/bin/python3 bench/ab_steps.py res/resnet18.ini OLD_BINARY NEW_BINARY \
        [--batch-size 10] [--rounds 4] [--iterations 3] [--warmup 2] \
        [--threads 2] [-- TRAIN-ARGS]

Each round runs every binary once, in the order given (interleaved, so the
slow phases of a noisy shared machine hit all of them):

    BINARY train MODEL.ini --data synthetic --window all --batch-size B
        --iterations WARMUP+K --eval-samples 0 --threads T --trace FILE

and sums the executor's step spans of the K iterations after the warm-up
(the trace's "train" spans; waits excluded) by step kind: F (forward),
B (backward), U (optimizer update), R (recomputation), and all steps. It
prints, per binary and kind, the milliseconds per iteration of every round
and their median. Extra train arguments (after --) go to every run, e.g.
`-- --window 1` (replaces `--window all`; the step spans exclude the
executor's waits for reads).
"""

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layer_profile  # noqa: E402  (the trace reader: step_spans)


def step_ms(trace_file, warmup):
    """{kind: ms per iteration} of the iterations after the warm-up."""
    spans = layer_profile.step_spans(trace_file)
    first = spans[0][0]
    starts = [i for i, (n, _) in enumerate(spans) if n == first]
    if len(starts) <= warmup:
        sys.exit("trace has %d iterations, expected more than %d"
                 % (len(starts), warmup))
    iters = len(starts) - warmup
    total = collections.Counter()
    for name, ms in spans[starts[warmup]:]:
        total[name[0]] += ms / iters
        total["all"] += ms / iters
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ini")
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=3,
                    help="iterations measured (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    # runs happen in a temporary directory (the model's Save_Path lands there)
    a.ini = os.path.abspath(a.ini)
    a.binaries = [os.path.abspath(b) for b in a.binaries]
    res = {b: [] for b in a.binaries}
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        for _ in range(a.rounds):
            for b in a.binaries:
                window = [] if "--window" in extra else ["--window", "all"]
                cmd = [b, "train", a.ini, "--data", "synthetic"] + window + [
                       "--batch-size", str(a.batch_size),
                       "--iterations", str(a.warmup + a.iterations),
                       "--eval-samples", "0", "--threads", str(a.threads),
                       "--trace", trace] + extra
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                               cwd=tmp)
                res[b].append(step_ms(trace, a.warmup))
    kinds = [k for k in ("F", "B", "U", "R", "all")
             if any(k in r for rs in res.values() for r in rs)]
    print("ms per iteration, %d rounds (median: rounds)" % a.rounds)
    for k in kinds:
        for b in a.binaries:
            v = [r.get(k, 0.0) for r in res[b]]
            print("%-4s %-40s %8.1f: %s" % (
                k, b, statistics.median(v), ", ".join("%.1f" % x for x in v)))


if __name__ == "__main__":
    main()
