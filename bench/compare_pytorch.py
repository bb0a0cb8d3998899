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
               (PyTorch's im2col/vol2col + BLAS convolution path);
  torch-module a plain torch.nn.Module built from the same INI, as one
               writes it by hand: nn.Conv2d with its padding (the
               builder pads each input with F.pad first, a copy forward
               and backward), nn.BatchNorm2d, in-place ReLU where nothing
               else reads its input, F.cross_entropy; the builder's
               initial weights; oneDNN. The ratio is against this one.
               Before any timing each INI's module is checked against
               the builder: the same loss and gradients (check_module).
ours runs K + 2 iterations and reports the median of the last K
(--warmup 2), as PyTorch's runs leave their 2 warm-up iterations out.

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

def plain_module(mg, g, W):
    """A torch.nn.Module for graph g with the weights W (the builder's),
    written as a plain module: see the docstring (torch-module)."""
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    readers = [0] * len(g.nodes)
    for n in g.nodes:
        for i in n.inputs:
            readers[i] += 1

    class IniModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = nn.ModuleDict()
            self.pads = {}
            self.named = {}  # the builder's weight name -> parameter
            self.transposed = set()  # names whose parameter is W^T
            for i, n in enumerate(g.nodes):
                key = "n%d" % i
                if n.type == "conv2d":
                    w = W[n.name + ".weight"]
                    b = W.get(n.name + ".bias")
                    pt, pb, pl, pr = n.cfg["pad"]
                    same = pt == pb and pl == pr
                    m = nn.Conv2d(w.shape[1] * n.cfg["groups"], w.shape[0],
                                  tuple(w.shape[2:]), stride=n.cfg["stride"],
                                  padding=(pt, pl) if same else 0,
                                  dilation=n.cfg["dilation"],
                                  groups=n.cfg["groups"], bias=b is not None)
                    with torch.no_grad():
                        m.weight.copy_(w)
                        if b is not None:
                            m.bias.copy_(b)
                    m.weight.requires_grad_(w.requires_grad)
                    if b is not None:
                        m.bias.requires_grad_(b.requires_grad)
                    if not same:
                        self.pads[i] = (pl, pr, pt, pb)
                    self.mods[key] = m
                    self.named[n.name + ".weight"] = m.weight
                    if b is not None:
                        self.named[n.name + ".bias"] = m.bias
                elif n.type == "batch_normalization":
                    gm = W[n.name + ".gamma"]
                    m = nn.BatchNorm2d(gm.shape[0], eps=n.cfg["eps"],
                                       momentum=1.0 - n.cfg["momentum"])
                    with torch.no_grad():
                        m.weight.copy_(gm)
                        m.bias.copy_(W[n.name + ".beta"])
                        m.running_mean.copy_(W[n.name + ".moving_mean"])
                        m.running_var.copy_(W[n.name + ".moving_variance"])
                    m.weight.requires_grad_(gm.requires_grad)
                    m.bias.requires_grad_(gm.requires_grad)
                    self.mods[key] = m
                    self.named[n.name + ".gamma"] = m.weight
                    self.named[n.name + ".beta"] = m.bias
                elif n.type == "activation" and n.cfg["act"] in ("relu",
                                                                 "relu6"):
                    # in place only on a fresh tensor nothing else reads
                    # (output and multiout nodes alias their input)
                    j = n.inputs[0]
                    alone = readers[j] == 1 and g.nodes[j].type in (
                        "batch_normalization", "conv2d")
                    self.mods[key] = (nn.ReLU if n.cfg["act"] == "relu"
                                      else nn.ReLU6)(inplace=alone)
                elif n.type == "fully_connected":
                    w = W[n.name + ".weight"]  # (in, out)
                    b = W.get(n.name + ".bias")
                    m = nn.Linear(w.shape[0], w.shape[1], bias=b is not None)
                    with torch.no_grad():
                        m.weight.copy_(w.t())
                        if b is not None:
                            m.bias.copy_(b)
                    self.mods[key] = m
                    self.named[n.name + ".weight"] = m.weight
                    self.transposed.add(n.name + ".weight")
                    if b is not None:
                        self.named[n.name + ".bias"] = m.bias

        def forward(self, x):
            vals = []
            for i, n in enumerate(g.nodes):
                ins = [vals[j] for j in n.inputs]
                t, key = n.type, "n%d" % i
                if t == "input":
                    y = x
                elif key in self.mods:
                    xi = ins[0]
                    if i in self.pads:
                        xi = F.pad(xi, self.pads[i])
                    y = self.mods[key](xi)
                elif t == "pooling2d":
                    kind, xi = n.cfg["kind"], ins[0]
                    if kind == "global_average":
                        y = F.adaptive_avg_pool2d(xi, 1)
                    elif kind == "global_max":
                        y = F.adaptive_max_pool2d(xi, 1)
                    else:
                        pt, pb, pl, pr = n.cfg["pad"]
                        if kind == "max":
                            if (pt, pl) != (pb, pr):
                                xi = F.pad(xi, (pl, pr, pt, pb),
                                           value=-math.inf)
                                pt = pl = 0
                            y = F.max_pool2d(xi, n.cfg["k"], n.cfg["stride"],
                                             padding=(pt, pl))
                        else:
                            xi = F.pad(xi, (pl, pr, pt, pb))
                            y = F.avg_pool2d(xi, n.cfg["k"], n.cfg["stride"])
                elif t == "dropout":
                    y = F.dropout(ins[0], n.cfg["rate"], training=self.training)
                elif t == "concat":
                    y = torch.cat(ins, dim=n.cfg["axis"])
                elif t == "addition":
                    y = ins[0]
                    for o in ins[1:]:
                        y = y + o
                elif t == "flatten":
                    y = ins[0].flatten(1)
                elif t in ("multiout", "output"):
                    y = ins[0]
                elif t == "activation" and n.cfg["act"] == "softmax" and \
                        i == len(g.nodes) - 1:
                    y = ins[0].flatten(1)  # the logits: F.cross_entropy
                elif t == "activation":
                    y = mg.activate(n.cfg["act"], ins[0])
                else:
                    raise SystemExit("torch-module: no plain module for "
                                     "layer type " + t)
                vals.append(y)
            return vals[-1]

    last = g.nodes[-1]
    if g.loss != "cross" or last.type != "activation" or \
            last.cfg["act"] != "softmax":
        raise SystemExit("torch-module: only a final softmax with loss = "
                         "cross is benchmarked")
    return IniModule()


def check_module(ini):
    """Before timing: the plain module computes the builder's function.
    Both from the same weights, one training step's loss and every
    weight's gradient on the same input (batch 2, dropout off) must agree
    within 1e-4 x the gradient's largest magnitude + 1e-5 (the goldens'
    rule with a larger absolute term: in MobileNetV2 a projection's batch
    normalization feeds a convolution and another batch normalization, so
    its beta's gradient is zero but for rounding, 1e-6 in size); exits
    otherwise."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import numpy as np
    import torch
    import torch.nn.functional as F
    import make_goldens as mg

    torch.set_num_threads(THREADS)
    g = mg.Graph(ini)
    for n in g.nodes:
        if n.type == "dropout":
            n.cfg["rate"] = 0.0
    init = mg.init_weights(g, np.random.default_rng(1))
    W = {nm: torch.from_numpy(init[nm].copy()).requires_grad_(tr)
         for nm, _, tr, _, _ in g.weight_list()}
    m = plain_module(mg, g, W)
    m.train()
    gen = torch.Generator().manual_seed(3)
    c, h, w = g.nodes[0].shape
    k = int(np.prod(g.nodes[-1].shape))
    x = torch.randn(2, c, h, w, generator=gen)
    idx = torch.randint(0, k, (2,), generator=gen)
    lab = torch.zeros(2, k)
    lab[torch.arange(2), idx] = 1.0
    out, logits = g.forward(W, x, training=True)
    l1 = mg.compute_loss(g, out, logits, lab)
    l1.backward()
    l2 = F.cross_entropy(m(x), idx)
    l2.backward()
    # worst: the largest difference over its tolerance (1: at the bound)
    worst = abs(float(l1) - float(l2)) / (1e-4 * abs(float(l1)) + 1e-6)
    checked = 0
    for nm, q in m.named.items():
        a = W[nm].grad
        if a is None or q.grad is None:
            if (a is None) != (q.grad is None):
                sys.exit("torch-module: %s has a gradient in one model only"
                         % nm)
            continue
        b = q.grad.t() if nm in m.transposed else q.grad
        d = float((a - b.reshape(a.shape)).abs().max())
        worst = max(worst, d / (1e-4 * float(a.abs().max()) + 1e-5))
        checked += 1
    if checked != sum(1 for _, _, tr, _, _ in g.weight_list() if tr) or \
            worst > 1.0:
        sys.exit("torch-module: the plain module differs from the builder "
                 "on %s (%d gradients compared, the largest difference "
                 "%.3g times the tolerance)" % (ini, checked, worst))
    print(json.dumps({"checked": checked, "worst": worst}))


def torch_worker(ini, batch, iters, mkldnn, kind="graph"):
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
    if kind == "module":
        model = plain_module(mg, g, W)
        model.train()
        W = None  # the module holds its own copies
        params = [q for q in model.parameters() if q.requires_grad]
    else:
        params = [W[nm] for nm, _, tr, _, _ in g.weight_list() if tr]
    opt = torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)

    c, h, w = g.nodes[0].shape
    k = int(np.prod(g.nodes[-1].shape))
    x = torch.randn(batch, c, h, w)
    idx = torch.randint(0, k, (batch,))
    lab = torch.zeros(batch, k)
    lab[torch.arange(batch), idx] = 1.0

    times = []
    loss = None
    for i in range(WARMUP + iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if kind == "module":
            loss = F.cross_entropy(model(x), idx)
        else:
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
        "kind": kind,
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
           "--iterations", str(WARMUP + iters), "--warmup", str(WARMUP),
           "--batch-size", str(batch),
           "--train-samples", str((WARMUP + iters) * batch),
           "--eval-samples", "0",
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


def run_torch(ini, batch, iters, mkldnn, tmpdir, kind="graph"):
    """A torch worker: kind graph (the builder), module (the plain
    module) or check (check_module; its verdict instead of times)."""
    env = blas_env(OMP_NUM_THREADS=str(THREADS),
                   MKL_NUM_THREADS=str(THREADS),
                   OPENBLAS_NUM_THREADS=str(THREADS))
    cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--threads",
           str(THREADS), "--torch-worker", ini, str(batch), str(iters),
           "1" if mkldnn else "0", kind]
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
    ap.add_argument("--torch-worker", nargs=5,
                    metavar=("INI", "B", "K", "M", "KIND"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    THREADS = args.threads
    BLAS_CORE = args.blas_core

    if args.torch_worker:
        ini, b, k, m, kind = args.torch_worker
        if kind == "check":
            check_module(ini)
        else:
            torch_worker(ini, int(b), int(k), int(m), kind)
        return 0

    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for n in names:
        if n not in CONFIGS:
            ap.error("unknown config %s (known: %s)"
                     % (n, ", ".join(CONFIGS)))
    if not os.access(CLI, os.X_OK):
        sys.exit("missing %s: build with ninja -C build" % CLI)
    variants = ["ours", "torch-module", "torch-onednn"] + \
        ([] if args.no_im2col else ["torch-im2col"])

    cmdline = "/usr/bin/python3 " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(os.path.abspath(
            sys.argv[0]), ROOT)] + sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc)
    print("# %s" % cmdline)
    print("# %s, nproc %d, %s, load average at start %s" % (
        started.strftime("%Y-%m-%d %H:%M UTC"), os.cpu_count(), cpu_model(),
        loadavg()), flush=True)

    with tempfile.TemporaryDirectory(prefix="cmp_pytorch_") as tmp:
        for ini in sorted({CONFIGS[n][0] for n in names}):
            ck = run_torch(os.path.join(ROOT, ini), 2, 1, True, tmp, "check")
            print("# torch-module on %s: the builder's loss and %d "
                  "gradients, the largest difference %.2f of the tolerance"
                  % (ini, ck["checked"], ck["worst"]), flush=True)

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
                                        v != "torch-im2col", tmp,
                                        "module" if v == "torch-module"
                                        else "graph")
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

    head = ("| config | ours median ms | torch module (oneDNN) ms | "
            "torch builder (oneDNN) ms | torch builder (no mkldnn) ms | "
            "ratio ours/torch module | ours peak RSS MiB | "
            "torch module peak RSS MiB |")
    rows = [head, "|" + "---|" * 8]
    for n in names:
        o = med(n, "ours", "median_ms")
        t0 = med(n, "torch-module", "median_ms")
        t1 = med(n, "torch-onednn", "median_ms")
        t2 = med(n, "torch-im2col", "median_ms")
        ro = med(n, "ours", "peak_rss_mib")
        rt = med(n, "torch-module", "peak_rss_mib")
        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            n, fmt(o), fmt(t0), fmt(t1), fmt(t2),
            "%.2fx" % (o / t0) if o and t0 else "n/a", fmt(ro), fmt(rt)))
    table = "\n".join(rows)
    cores = sorted({x["blas"] for n in names for x in results[n]["ours"]})
    pin = blas_env().get("OPENBLAS_CORETYPE")
    note = ("%d timed iterations per run after %d warm-up "
            "iterations (ours: --warmup), %d "
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
