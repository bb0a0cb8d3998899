#!/usr/bin/python3
"""Trainer core vs PyTorch, side by side, everything resident.

Run with Debian's interpreter (python3-torch 1.13):

    /usr/bin/python3 bench/compare_pytorch.py
    /usr/bin/python3 bench/compare_pytorch.py --iterations 3 --repeats 2 \
        --configs resnet18-b10,resnet18-b32 --markdown /tmp/table.md

For every configuration and every repeat it runs, one after the other
(interleaved, so slow phases of a noisy shared machine hit all of them):

  ours         build/app/nntrainer-offload train MODEL.ini --data synthetic
               --iterations K --batch-size B --threads T ...; the median
               iteration time and the peak RSS (VmHWM) of its report;
  torch-onednn a fresh /usr/bin/python3 process that builds the same
               network from the same INI with tools/make_goldens.py's
               builder, Adam as in the INI, cross-entropy, random input,
               torch.set_num_threads(T); 2 warm-up iterations, then K timed
               iterations (forward + backward + step); median time and the
               process's own VmHWM;
  torch-im2col the same with torch.backends.mkldnn.enabled = False
               (PyTorch's im2col/vol2col + BLAS convolution path).

T is --threads (default 2; --threads 1 shows how each side scales).
--blas-core CORE sets OPENBLAS_CORETYPE for every run (ours, and PyTorch's
BLAS calls outside oneDNN); --blas-core auto removes it, so OpenBLAS picks
its kernel family from the CPU. By default runs inherit the environment.
The table's note names the family our runs used (their report's "blas:"
line): on an AVX-512 CPU an AVX2 family such as Haswell runs GEMMs at about
half the speed (nntrainer-offload/blas.h).
The table reports, per configuration, the median over the repeats of each
run's median iteration time (and of each run's peak RSS).
"""

import argparse
import datetime
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "app", "nntrainer-offload")
THREADS = 2
WARMUP = 2
BLAS_CORE = None  # --blas-core: None inherits OPENBLAS_CORETYPE

CONFIGS = {  # name -> (INI relative to ROOT, batch)
    "resnet18-b10": ("res/resnet18.ini", 10),
    "resnet18-b32": ("res/resnet18.ini", 32),
    "mobilenetv2-224-b10": ("res/mobilenetv2.ini", 10),
}


def vmhwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# --------------------------------------------------------------------------
# PyTorch worker (runs in its own process)
# --------------------------------------------------------------------------

def torch_worker(ini, batch, iters, mkldnn):
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import numpy as np
    import torch
    import torch.nn.functional as F
    import make_goldens as mg

    torch.set_num_threads(THREADS)
    torch.backends.mkldnn.enabled = bool(mkldnn)
    torch.manual_seed(1)

    # The builder refuses training-mode dropout (goldens must be
    # deterministic). Here it must run for real: turn each dropout node
    # into an activation node whose "activation" is a real dropout, and
    # teach the module's activate() that one extra case (no file edits).
    base_activate = mg.activate

    def activate(act, x):
        if isinstance(act, tuple) and act[0] == "dropout":
            return F.dropout(x, act[1], training=True)
        return base_activate(act, x)

    mg.activate = activate

    g = mg.Graph(ini)
    for n in g.nodes:
        if n.type == "dropout":
            rate = n.cfg["rate"]
            n.type = "activation"
            n.cfg["act"] = ("dropout", rate) if rate > 0 else "none"

    opt_sec = {k.lower(): v for k, v in
               mg.parse_ini(ini) if k.lower() == "optimizer"}
    o = opt_sec.get("optimizer", {})
    otype = o.get("type", "adam").lower()
    if otype != "adam":
        raise SystemExit("only Adam is benchmarked, INI has " + otype)
    lr = float(o.get("learning_rate", "1e-3"))
    betas = (float(o.get("beta1", "0.9")), float(o.get("beta2", "0.999")))
    eps = float(o.get("epsilon", "1e-7"))

    # Weights: the builder's initializer, shared with torch without a copy
    # (mg.to_torch would copy every array and double the weights' RSS).
    rng = np.random.default_rng(1)
    init = mg.init_weights(g, rng)
    W = {}
    for name, _, tr, _, _ in g.weight_list():
        W[name] = torch.from_numpy(init[name]).requires_grad_(tr)
    del init
    params = [W[nm] for nm, _, tr, _, _ in g.weight_list() if tr]
    opt = torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)

    c, h, w = g.nodes[0].shape
    k = int(np.prod(g.nodes[-1].shape))
    x = torch.randn(batch, c, h, w)
    lab = torch.zeros(batch, k)
    lab[torch.arange(batch), torch.randint(0, k, (batch,))] = 1.0

    times = []
    loss = None
    for i in range(WARMUP + iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out, logits = g.forward(W, x, training=True)
        loss = mg.compute_loss(g, out, logits, lab)
        loss.backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1000.0
        if i >= WARMUP:
            times.append(dt)
    print(json.dumps({
        "median_ms": statistics.median(times),
        "times_ms": times,
        "peak_rss_mib": vmhwm_mib(),
        "loss": float(loss),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.enabled,
    }))


# --------------------------------------------------------------------------
# Drivers
# --------------------------------------------------------------------------

BLAS_RE = re.compile(r"^blas: OpenBLAS, (\S+) kernels", re.M)
ITER_RE = re.compile(r"^iteration time\s+median\s+([0-9.]+)\s*ms", re.M)
RSS_RE = re.compile(r"^peak RSS\s+([0-9.]+)\s*MiB", re.M)


def blas_env(**extra):
    """The environment of a run: --blas-core applied, then extra."""
    env = dict(os.environ, **extra)
    if BLAS_CORE == "auto":
        env.pop("OPENBLAS_CORETYPE", None)
    elif BLAS_CORE:
        env["OPENBLAS_CORETYPE"] = BLAS_CORE
    return env


def run_ours(ini, batch, iters, tmpdir):
    cmd = [CLI, "train", ini, "--data", "synthetic",
           "--iterations", str(iters), "--batch-size", str(batch),
           "--train-samples", str(iters * batch), "--eval-samples", "0",
           "--threads", str(THREADS),
           "--save", os.path.join(tmpdir, "w.bin")]
    p = subprocess.run(cmd, cwd=tmpdir, capture_output=True, text=True,
                       env=blas_env())
    if p.returncode != 0:
        raise RuntimeError("ours failed (%d): %s\n%s" % (
            p.returncode, " ".join(cmd), p.stderr[-2000:] + p.stdout[-2000:]))
    m, r = ITER_RE.search(p.stdout), RSS_RE.search(p.stdout)
    if not m or not r:
        raise RuntimeError("cannot parse report:\n" + p.stdout[-2000:])
    b = BLAS_RE.search(p.stdout)
    return {"median_ms": float(m.group(1)), "peak_rss_mib": float(r.group(1)),
            "blas": b.group(1) if b else "unknown"}


def run_torch(ini, batch, iters, mkldnn, tmpdir):
    env = blas_env(OMP_NUM_THREADS=str(THREADS),
                   MKL_NUM_THREADS=str(THREADS),
                   OPENBLAS_NUM_THREADS=str(THREADS))
    cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--threads",
           str(THREADS), "--torch-worker", ini, str(batch), str(iters),
           "1" if mkldnn else "0"]
    p = subprocess.run(cmd, cwd=tmpdir, capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        raise RuntimeError("torch worker failed (%d): %s\n%s" % (
            p.returncode, " ".join(cmd), p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def fmt(v, nd=1):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) \
        else "%.*f" % (nd, v)


def main():
    global THREADS, BLAS_CORE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", "-k", type=int, default=5,
                    help="timed iterations per run (default 5)")
    ap.add_argument("--repeats", "-r", type=int, default=3,
                    help="interleaved repeats (default 3)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--no-im2col", action="store_true",
                    help="skip the torch run with mkldnn disabled")
    ap.add_argument("--markdown", metavar="FILE",
                    help="also write the table (with command line and "
                    "date) to FILE")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads of both trainers (default 2)")
    ap.add_argument("--blas-core", metavar="CORE",
                    help="OPENBLAS_CORETYPE for every run (an OpenBLAS "
                    "kernel family such as SkylakeX or Haswell), or auto "
                    "to remove it (default: as in the environment)")
    ap.add_argument("--torch-worker", nargs=4, metavar=("INI", "B", "K", "M"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    THREADS = args.threads
    BLAS_CORE = args.blas_core

    if args.torch_worker:
        ini, b, k, m = args.torch_worker
        torch_worker(ini, int(b), int(k), int(m))
        return 0

    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for n in names:
        if n not in CONFIGS:
            ap.error("unknown config %s (known: %s)"
                     % (n, ", ".join(CONFIGS)))
    if not os.access(CLI, os.X_OK):
        sys.exit("missing %s: build with ninja -C build" % CLI)
    variants = ["ours", "torch-onednn"] + \
        ([] if args.no_im2col else ["torch-im2col"])

    cmdline = "/usr/bin/python3 " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(os.path.abspath(
            sys.argv[0]), ROOT)] + sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc)
    print("# %s" % cmdline)
    print("# %s, nproc %d, %s, load average at start %s" % (
        started.strftime("%Y-%m-%d %H:%M UTC"), os.cpu_count(), cpu_model(),
        loadavg()), flush=True)

    results = {n: {v: [] for v in variants} for n in names}
    loads = []
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="cmp_pytorch_") as tmp:
        for r in range(args.repeats):
            for n in names:
                ini, batch = CONFIGS[n]
                ini = os.path.join(ROOT, ini)
                for v in variants:
                    t0 = time.time()
                    if v == "ours":
                        res = run_ours(ini, batch, args.iterations, tmp)
                    else:
                        res = run_torch(ini, batch, args.iterations,
                                        v == "torch-onednn", tmp)
                    results[n][v].append(res)
                    loads.append(os.getloadavg()[0])
                    print("repeat %d/%d %-20s %-13s median %8.1f ms  "
                          "peak RSS %6.1f MiB  (%.0f s, load %s)" % (
                              r + 1, args.repeats, n, v, res["median_ms"],
                              res["peak_rss_mib"], time.time() - t0,
                              loadavg()), flush=True)
    elapsed = time.time() - t_start

    def med(n, v, key):
        vals = [x[key] for x in results[n].get(v, [])]
        return statistics.median(vals) if vals else None

    head = ("| config | ours median ms | torch (oneDNN) ms | "
            "torch (no mkldnn) ms | ratio ours/torch-oneDNN | "
            "ours peak RSS MiB | torch peak RSS MiB |")
    rows = [head, "|" + "---|" * 7]
    for n in names:
        o = med(n, "ours", "median_ms")
        t1 = med(n, "torch-onednn", "median_ms")
        t2 = med(n, "torch-im2col", "median_ms")
        ro = med(n, "ours", "peak_rss_mib")
        rt = med(n, "torch-onednn", "peak_rss_mib")
        rt2 = med(n, "torch-im2col", "peak_rss_mib")
        trss = fmt(rt) if rt2 is None else "%s (no mkldnn: %s)" % (
            fmt(rt), fmt(rt2))
        rows.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            n, fmt(o), fmt(t1), fmt(t2),
            "%.2fx" % (o / t1) if o and t1 else "n/a", fmt(ro), trss))
    table = "\n".join(rows)
    cores = sorted({x["blas"] for n in names for x in results[n]["ours"]})
    pin = blas_env().get("OPENBLAS_CORETYPE")
    note = ("%d timed iterations per run (torch: after %d warm-up "
            "iterations; ours: median over all K, first included), %d "
            "interleaved repeats, medians over repeats; %d threads; "
            "ours on OpenBLAS's %s kernels (%s); "
            "wall time %.1f min; 1-min load average during runs %.2f-%.2f."
            % (args.iterations, WARMUP, args.repeats, THREADS,
               ", ".join(cores),
               "OPENBLAS_CORETYPE=" + pin if pin
               else "OPENBLAS_CORETYPE unset",
               elapsed / 60.0, min(loads), max(loads)))
    print()
    print(table)
    print()
    print(note)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("Command: `%s`\n\nDate: %s; machine: nproc %d, %s.\n\n"
                    % (cmdline, started.strftime("%Y-%m-%d %H:%M UTC"),
                       os.cpu_count(), cpu_model()))
            f.write(table + "\n\n" + note + "\n")
        print("wrote " + args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
