#!/usr/bin/python3
"""Fine-tuning with frozen layers against full training, side by side.

    python3 bench/fine_tuning.py                      # ResNet-18 b32
    python3 bench/fine_tuning.py --rounds 5 --markdown /tmp/table.md

For every round it runs, one after the other (interleaved, so slow phases
of a noisy shared machine hit all of them), `train MODEL --data synthetic
--batch-size B --iterations W+K --warmup W --eval-samples 0` with

  full        --window all                     (every layer trained)
  stage4 all  --freeze-until STAGE --window all
  stage4 w1   --freeze-until STAGE --window 1
  head all    --freeze-until HEAD --window all
  head w1     --freeze-until HEAD --window 1

and reads each run's --report-json: the median iteration time, the peak
RSS (VmHWM), and the MiB read and written per iteration. STAGE defaults to
out6 (ResNet-18's last layer of stage 3: stage 4 and the classifier train),
HEAD to pool_concat (the classifier alone). The table gives the median over
rounds of each figure, and the median over rounds of the per-round ratios
(stage4 all / full, stage4 w1 / stage4 all, head w1 / head all). The
trainable state is 4 bytes x trainable parameters x (1 + optimizer state
per parameter: 2 for Adam, 1 for SGD with momentum, 0 for plain SGD), as
the runs print them. OPENBLAS_CORETYPE and the other variables are
inherited: run it once as is and once under `env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE` to see OpenBLAS's own choice.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, exe, cfg, tmp):
    """One train process; returns its report's figures and printed lines."""
    name, freeze, window = cfg
    rep = os.path.join(tmp, "r.json")
    cmd = [exe, "train", args.model, "--data", "synthetic",
           "--batch-size", str(args.batch),
           "--iterations", str(args.warmup + args.iterations),
           "--warmup", str(args.warmup), "--eval-samples", "0",
           "--window", window, "--report-json", rep]
    if freeze:
        cmd += ["--freeze-until", freeze]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd), p.returncode,
                                         p.stderr.strip()))
    with open(rep) as f:
        r = json.load(f)
    m = re.search(r"(\d+) trainable parameters", p.stdout)
    b = re.search(r"backward runs for (\d+) of (\d+) layers", p.stdout)
    return {"ms": r["iteration_ms_median"],
            "rss": r["peak_rss_bytes"] / 2**20,
            "read": r["read_mib_per_iteration"],
            "written": r["written_mib_per_iteration"],
            "params": int(m.group(1)) if m else 0,
            "bwd": "%s of %s" % b.groups() if b else "all",
            "blas": next((ln for ln in p.stdout.splitlines()
                          if ln.startswith("blas:")), "")}


def optimizer_slots(model):
    """Optimizer state floats per trainable parameter of the INI."""
    sec, kind, momentum = None, "adam", 0.0
    with open(model) as f:
        for line in f:
            line = re.split(r"[#;]", line)[0].strip()
            if line.startswith("["):
                sec = line.strip("[]").strip().lower()
            elif "=" in line and sec == "optimizer":
                k, v = (s.strip().lower() for s in line.split("=", 1))
                kind = v if k == "type" else kind
                momentum = float(v) if k == "momentum" else momentum
    if kind in ("adam", "adamw"):
        return 2
    return 1 if momentum else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "res",
                                                    "resnet18.ini"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--stage", default="out6")
    ap.add_argument("--head", default="pool_concat")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "app",
                                                  "nntrainer-offload"))
    ap.add_argument("--markdown", help="also write the table here")
    args = ap.parse_args()
    cfgs = [("full", None, "all"),
            ("stage4 all", args.stage, "all"),
            ("stage4 w1", args.stage, "1"),
            ("head all", args.head, "all"),
            ("head w1", args.head, "1")]
    res = {c[0]: [] for c in cfgs}
    with tempfile.TemporaryDirectory(prefix="nto-fine-") as tmp:
        for rnd in range(args.rounds):
            for c in cfgs:
                res[c[0]].append(run(args, args.bin, c, tmp))
            print("round %d/%d done" % (rnd + 1, args.rounds),
                  file=sys.stderr)
    med = {k: {f: statistics.median(r[f] for r in v)
               for f in ("ms", "rss", "read", "written")}
           for k, v in res.items()}

    def ratio(a, b):
        return statistics.median(x["ms"] / y["ms"]
                                 for x, y in zip(res[a], res[b]))

    slots = optimizer_slots(args.model)
    out = ["%s, batch %d, %d rounds of %d iterations (+%d warm-up); %s" %
           (os.path.relpath(args.model, ROOT), args.batch, args.rounds,
            args.iterations, args.warmup, res["full"][0]["blas"]),
           "",
           "| run | trainable parameters | backward steps | iteration ms | "
           "peak RSS MiB | read MiB/it | written MiB/it | trainable state "
           "MiB |",
           "|---|---|---|---|---|---|---|---|"]
    for name, _, _ in cfgs:
        r0, m = res[name][0], med[name]
        state = 4.0 * r0["params"] * (1 + slots) / 2**20
        out.append("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |" %
                   (name, format(r0["params"], ","), r0["bwd"], m["ms"],
                    m["rss"], m["read"], m["written"], state))
    out += ["",
            "stage4 all / full: %.2fx; stage4 w1 / stage4 all: %.2fx; "
            "head w1 / head all: %.2fx (medians of per-round ratios)" %
            (ratio("stage4 all", "full"), ratio("stage4 w1", "stage4 all"),
             ratio("head w1", "head all"))]
    text = "\n".join(out)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
