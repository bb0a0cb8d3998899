#!/usr/bin/python3
"""A fine-tuning run on real data, as a user does it, within a memory budget.

    python3 bench/fine_tuning_story.py                    # MobileNetV2-32
    python3 bench/fine_tuning_story.py --markdown /tmp/story.md

MODEL (default res/mobilenetv2_32.ini) with its classifier [fc] cut to 5
classes is trained on Fashion-MNIST classes 0-4 and saved (pretrain). A
copy with the classifier section renamed [fc_new] (a new 5-class head: its
weights are not in the saved file and keep their initialization) is then
fine-tuned on classes 5-9 with `--init-weights` and everything up to FREEZE
(default dropout: only the head trains) frozen (fine-tune), and again with
everything up to PARTIAL frozen (default block13_add: the last four
inverted-residual blocks, the last convolution and the head train). Two
controls
on the same data and iterations: the same frozen run without
--init-weights (a random backbone: what the pretrained features are
worth), and the new-head model trained whole from its initialization
(scratch). Every run uses `--window auto --memory-budget BUDGET` and
--report-json; the table gives test accuracy before and after, peak RSS
(VmHWM), median iteration time, MiB written per iteration and the run's
wall time. OPENBLAS_CORETYPE and the other variables are inherited.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def variant(src, dst, head):
    """MODEL with [fc] cut to 5 units and named `head`, into dst."""
    text = open(src).read()
    text, n = re.subn(r"(?m)^\[fc\]\n((?:(?!\[).*\n)*?)unit = \d+",
                      "[%s]\n\\1unit = 5" % head, text)
    if n != 1:
        sys.exit("%s: no [fc] section with a unit key" % src)
    text = re.sub(r"(?m)^(input_layers\s*=\s*)fc\s*$", r"\1" + head, text)
    open(dst, "w").write(text)


def train(exe, ini, args, tmp, name):
    rep = os.path.join(tmp, name + ".json")
    cmd = [exe, "train", ini, "--report-json", rep, "--log-every", "1000000"]
    cmd += args
    t0 = time.monotonic()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(cmd), out.returncode,
                                          out.stdout))
    r = json.load(open(rep))
    r["wall_s"] = wall
    r["command"] = " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT)
                            else c for c in cmd)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", default=os.path.join(ROOT, "build/app/nntrainer-offload"))
    ap.add_argument("--model", default=os.path.join(ROOT, "res/mobilenetv2_32.ini"))
    ap.add_argument("--freeze", default="dropout")
    ap.add_argument("--partial", default="block13_add")
    ap.add_argument("--budget", default="64M")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pretrain-iterations", type=int, default=800)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--eval-samples", type=int, default=2000)
    ap.add_argument("--markdown", help="also write the table here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="nto-story-")
    old, new = os.path.join(tmp, "pretrain.ini"), os.path.join(tmp, "new_head.ini")
    variant(a.model, old, "fc")
    variant(a.model, new, "fc_new")
    mem = ["--window", "auto", "--memory-budget", a.budget,
           "--batch-size", str(a.batch_size), "--eval-samples", str(a.eval_samples)]
    it = ["--iterations", str(a.iterations)]
    pre = os.path.join(tmp, "pretrain.bin")
    rows = []
    r = train(a.exe, old, ["--classes", "0-4", "--iterations",
                           str(a.pretrain_iterations), "--save", pre] + mem,
              tmp, "pretrain")
    rows.append(("pretrain on 0-4, all trained", "-", r))
    r = train(a.exe, new, ["--classes", "5-9", "--init-weights",
                           pre[:-4] + ".safetensors", "--freeze-until",
                           a.freeze, "--save", os.path.join(tmp, "ft.bin")]
              + it + mem, tmp, "finetune")
    rows.append(("fine-tune on 5-9: pretrained backbone frozen, new head",
                 "%.2f%%" % (100 * r["test_accuracy_before"]), r))
    r = train(a.exe, new, ["--classes", "5-9", "--init-weights",
                           pre[:-4] + ".safetensors", "--freeze-until",
                           a.partial, "--save", os.path.join(tmp, "ftp.bin")]
              + it + mem, tmp, "partial")
    rows.append(("fine-tune on 5-9: backbone frozen up to %s, new head" % a.partial,
                 "%.2f%%" % (100 * r["test_accuracy_before"]), r))
    r = train(a.exe, new, ["--classes", "5-9", "--freeze-until", a.freeze,
                           "--save", os.path.join(tmp, "rnd.bin")] + it + mem,
              tmp, "random")
    rows.append(("control: random backbone frozen, new head", "-", r))
    r = train(a.exe, new, ["--classes", "5-9", "--save",
                           os.path.join(tmp, "scratch.bin")] + it + mem,
              tmp, "scratch")
    rows.append(("control: new-head model trained whole from scratch", "-", r))
    lines = ["| run | iterations | test accuracy before | after | peak RSS | "
             "median iteration | written / iteration | wall time |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, before, r in rows:
        lines.append("| %s | %d | %s | %.2f%% | %.1f MiB | %.1f ms | %.1f MiB | %.0f s |" % (
            name, r["iterations"], before, 100 * r["test_accuracy"],
            r["peak_rss_bytes"] / 1048576, r["iteration_ms_median"],
            r["written_mib_per_iteration"], r["wall_s"]))
    lines.append("")
    lines.append("Test accuracy on the first %d test samples of the run's classes; "
                 "budget %s, window auto, batch %d, kernels %s." % (
                     a.eval_samples, a.budget, a.batch_size, rows[0][2]["blas_kernels"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.markdown:
        open(a.markdown, "w").write(text)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
