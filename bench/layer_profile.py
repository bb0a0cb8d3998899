#!/usr/bin/python3
"""Where a training iteration's time goes, by layer type and step kind.

    /usr/bin/python3 bench/layer_profile.py res/mobilenetv2.ini \
        --batch-size 10 --iterations 4 --warmup 2 [--threads 2] [-- TRAIN-ARGS]

Runs `build/app/nntrainer-offload train MODEL.ini --data synthetic
--window all --trace FILE` (extra arguments after `--` go to train), reads
the Chrome trace it writes (one span per executed step, the executor's
waits excluded) and sums the step spans of the iterations after the
warm-up by (layer type, F/B/U). Layer types come from the INI's `Type`
keys (section name = layer name; a layer named in no section, such as one
the graph adds, counts as "?"). Prints milliseconds per iteration and the
share of the iteration, largest first. Times are wall clock of one run:
compare kinds within a run, and repeat the run on a noisy machine.
"""

import argparse
import collections
import configparser
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layer_types(ini):
    """Map layer name -> label, from the INI: its lower-case Type; conv2d
    split into "conv2d depthwise" (groups > 1), "conv2d 1x1" and "conv2d
    KxK"; a layer's realized `Activation` (the graph's NAME/activation
    layer) as "activation NAME"."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"),
                                   strict=False)
    cp.optionxform = str
    cp.read(ini)
    types = {}
    for sec in cp.sections():
        keys = {k.lower(): v.strip().lower() for k, v in cp.items(sec)}
        typ = keys.get("type")
        if not typ:
            continue
        if typ == "conv2d":
            k = keys.get("kernel_size", "").replace(" ", "")
            if int(keys.get("groups", "1")) > 1:
                typ += " depthwise"
            elif k in ("1", "1,1"):
                typ += " 1x1"
            else:
                typ += " " + k.replace(",", "x")
        types[sec.lower()] = typ
        act = keys.get("activation")
        if act and act != "none":
            types[sec.lower() + "/activation"] = "activation " + act
    return types


def step_spans(trace_file):
    """[(name, duration ms)] of the executor's training steps, in order."""
    with open(trace_file) as f:
        events = json.load(f)["traceEvents"]
    return [(e["name"], e["dur"] / 1e3) for e in events
            if e.get("ph") == "X" and e.get("cat") == "train"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ini")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=4,
                    help="iterations measured (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--binary",
                    default=os.path.join(ROOT, "build/app/nntrainer-offload"))
    ap.add_argument("train_args", nargs="*",
                    help="after --: more arguments for train")
    a = ap.parse_args()
    types = layer_types(a.ini)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        cmd = [a.binary, "train", a.ini, "--data", "synthetic", "--window",
               "all", "--batch-size", str(a.batch_size), "--iterations",
               str(a.warmup + a.iterations), "--eval-samples", "0",
               "--threads", str(a.threads), "--save",
               os.path.join(tmp, "w.bin"), "--trace", trace] + a.train_args
        print("$ " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        spans = step_spans(trace)
    # steps per iteration: the first step name repeats once per iteration
    first = spans[0][0]
    starts = [i for i, (n, _) in enumerate(spans) if n == first]
    if len(starts) < a.warmup + a.iterations:
        sys.exit("trace has %d iterations, expected %d" %
                 (len(starts), a.warmup + a.iterations))
    measured = spans[starts[a.warmup]:]
    total = collections.Counter()
    for name, ms in measured:
        kind, layer = name[0], name.split()[1].lower()
        total[(types.get(layer, "?"), kind)] += ms / a.iterations
    whole = sum(total.values())
    print("%-22s %4s %10s %6s" % ("layer type", "step", "ms/iter", "share"))
    for (typ, kind), ms in total.most_common():
        print("%-22s %4s %10.1f %5.1f%%" % (typ, kind, ms, 100 * ms / whole))
    print("%-22s %4s %10.1f" % ("all steps", "", whole))


if __name__ == "__main__":
    main()
