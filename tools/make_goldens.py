#!/usr/bin/python3
"""Golden outputs for the C trainer, computed with PyTorch.

Run with Debian's interpreter (python3-torch, python3-numpy):

    /usr/bin/python3 tools/make_goldens.py            # all test nets
    /usr/bin/python3 tools/make_goldens.py test/data/nets/mlp.ini ...
    /usr/bin/python3 tools/make_goldens.py --count res/resnet18.ini \
        res/mobilenetv2.ini res/mobilenetv2_32.ini

Default mode: for every net (INI file) writes
test/data/goldens/<net>.safetensors; the format is documented in
test/data/goldens/README.md. --count builds the given models in torch and
prints their parameter counts (and, for MobileNetV2, checks the INI graph
against an independent torchvision-style reference module).

The INI is interpreted with exactly the layer semantics the C trainer
implements (see test/data/goldens/README.md, "Semantics"). Weights are kept
in OUR layout (conv [F, C/g, kh, kw], fully_connected [in, unit]) and the
forward pass is written with torch.nn.functional, so no layout conversion
is needed except for the reference modules of --count.
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    sys.exit("make_goldens.py needs torch and numpy; run it with "
             "/usr/bin/python3 (Debian python3-torch): %s" % e)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETS = ["mlp", "lenet", "tiny_resnet", "mobile_block", "mse_net",
        "frozen_backbone", "frozen_batch_stats", "l2_net"]

BATCH = 4
STEPS = 3
SGD = dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.0)
ADAM = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-7, weight_decay=0.0)

NON_LAYER_SECTIONS = {"model", "optimizer", "learningratescheduler",
                      "train_set", "valid_set", "test_set", "dataset"}


class ConfigError(Exception):
    pass


# --------------------------------------------------------------------------
# INI parsing (nntrainer dialect)
# --------------------------------------------------------------------------

def parse_ini(path):
    """Returns [(section_name, {lowercase key: value})] in file order.

    Comments start at '#' or ';' anywhere on a line; values are trimmed and
    one pair of surrounding double or single quotes is removed. Keys are
    case-insensitive; section names keep their spelling.
    """
    sections = []
    seen = set()
    cur = None
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw
            for c in "#;":
                i = line.find(c)
                if i >= 0:
                    line = line[:i]
            line = line.strip()
            if not line:
                continue
            where = "%s:%d" % (path, lineno)
            if line.startswith("["):
                if not line.endswith("]"):
                    raise ConfigError(where + ": bad section header")
                name = line[1:-1].strip()
                if name.lower() in seen:
                    raise ConfigError(where + ": duplicate section " + name)
                seen.add(name.lower())
                cur = (name, {})
                sections.append(cur)
                continue
            if "=" not in line or cur is None:
                raise ConfigError(where + ": expected key = value")
            k, v = line.split("=", 1)
            k = k.strip().lower()
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            if k in cur[1]:
                raise ConfigError(where + ": duplicate key " + k)
            cur[1][k] = v
    return sections


def ints(v, n=2):
    vals = [int(x) for x in v.split(",")]
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise ConfigError("expected %d integers, got '%s'" % (n, v))
    return vals


def as_bool(v):
    v = v.lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise ConfigError("expected a boolean, got '%s'" % v)


def l2_of(props, where):
    """The constant C of a layer's l2norm weight regularizer, or 0.

    weight_regularizer = l2norm | none (default none) with
    weight_regularizer_constant = C (default 1, >= 0), or nntrainer's 2020
    spellings weight_decay and weight_decay_lambda. The weight's, never the
    bias's.
    """
    kind = None
    for k in ("weight_regularizer", "weight_decay"):
        if k in props:
            if kind is not None:
                raise ConfigError(where + ": regularizer given twice")
            kind = props[k].lower()
            if kind not in ("l2norm", "none"):
                raise ConfigError(where + ": bad regularizer " + kind)
    c = 1.0
    given = [k for k in ("weight_regularizer_constant", "weight_decay_lambda")
             if k in props]
    if len(given) > 1:
        raise ConfigError(where + ": regularizer constant given twice")
    if given:
        c = float(props[given[0]])
        if not c >= 0 or math.isinf(c):
            raise ConfigError(where + ": bad regularizer constant")
    return c if kind == "l2norm" else 0.0


def padding_of(spec, in_hw, k_hw, stride, dilation):
    """(top, bottom, left, right) for a padding property value.

    same:  TensorFlow rule: out = ceil(in / stride), total padding
           max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0),
           top/left = total // 2, bottom/right = the rest.
    valid: no padding.   p: p on all sides.   ph,pw: ph top and bottom,
    pw left and right.   t,b,l,r: as given.
    """
    s = spec.strip().lower()
    if s == "valid":
        return (0, 0, 0, 0)
    if s == "same":
        pads = []
        for i in range(2):
            keff = (k_hw[i] - 1) * dilation[i] + 1
            out = -(-in_hw[i] // stride[i])
            total = max((out - 1) * stride[i] + keff - in_hw[i], 0)
            pads.append((total // 2, total - total // 2))
        return (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    vals = [int(x) for x in s.split(",")]
    if len(vals) == 1:
        return (vals[0],) * 4
    if len(vals) == 2:
        return (vals[0], vals[0], vals[1], vals[1])
    if len(vals) == 4:
        return tuple(vals)
    raise ConfigError("bad padding '%s'" % spec)


# --------------------------------------------------------------------------
# Graph
# --------------------------------------------------------------------------

class Node:
    def __init__(self, name, ltype, props, inputs):
        self.name = name          # lowercase
        self.type = ltype         # lowercase
        self.props = props
        self.inputs = inputs      # node indices
        self.shape = None         # (C, H, W) per sample
        self.weights = []         # [(wname, shape, trainable, init, fans)]
        self.cfg = {}


ACTIVATIONS = ("relu", "relu6", "sigmoid", "tanh", "softmax", "leaky_relu",
               "none")

LAYER_KEYS = {
    "input": {"input_shape"},
    "conv2d": {"filters", "kernel_size", "stride", "padding", "dilation",
               "groups", "weight_initializer", "bias_initializer",
               "disable_bias", "weight_regularizer",
               "weight_regularizer_constant", "weight_decay",
               "weight_decay_lambda"},
    "batch_normalization": {"epsilon", "momentum", "moving_mean_initializer",
                            "moving_variance_initializer",
                            "gamma_initializer", "beta_initializer"},
    "pooling2d": {"pooling", "pool_size", "stride", "padding"},
    "fully_connected": {"unit", "weight_initializer", "bias_initializer",
                        "disable_bias", "weight_regularizer",
                        "weight_regularizer_constant", "weight_decay",
                        "weight_decay_lambda"},
    "dropout": {"dropout_rate"},
    "concat": {"axis"},
    "activation": {"activation"},
    "multiout": set(),
    "output": set(),
    "addition": set(),
    "flatten": set(),
}
COMMON_KEYS = {"type", "name", "input_layers", "activation", "trainable"}


class Graph:
    def __init__(self, path):
        self.path = path
        secs = parse_ini(path)
        self.model = {}
        self.nodes = []
        final = {}  # lowercase section name -> index of its final node
        for name, props in secs:
            low = name.lower()
            if low in NON_LAYER_SECTIONS:
                if low == "model":
                    self.model = props
                continue
            where = "%s [%s]" % (path, name)
            if "type" not in props:
                raise ConfigError(where + ": missing type")
            ltype = props["type"].lower()
            if ltype not in LAYER_KEYS:
                raise ConfigError(where + ": unknown type " + ltype)
            for k in props:
                if k not in COMMON_KEYS and k not in LAYER_KEYS[ltype]:
                    raise ConfigError(where + ": unknown key " + k)
            if ltype == "input":
                inputs = []
            elif "input_layers" in props:
                inputs = []
                for ref in props["input_layers"].split(","):
                    ref = ref.strip().lower()
                    if ref not in final:
                        raise ConfigError(where + ": unknown input " + ref)
                    inputs.append(final[ref])
            else:
                if not self.nodes:
                    raise ConfigError(where + ": no previous layer")
                inputs = [len(self.nodes) - 1]
            node = Node(low, ltype, props, inputs)
            self.nodes.append(node)
            act = props.get("activation", "none").lower()
            if ltype == "activation":
                if act not in ACTIVATIONS:
                    raise ConfigError(where + ": bad activation " + act)
                node.cfg["act"] = act
            elif act != "none":
                if act not in ACTIVATIONS:
                    raise ConfigError(where + ": bad activation " + act)
                a = Node(low + "/activation", "activation",
                         {"activation": act}, [len(self.nodes) - 1])
                a.cfg["act"] = act
                self.nodes.append(a)
            # consumers that name this section read its activation output
            final[low] = len(self.nodes) - 1
        self.loss = self.model.get("loss", "").lower()
        # frozen_bn_statistics = batch: a frozen batch normalization still
        # normalizes with the batch's statistics and updates the running
        # ones (torch's train() mode with its parameters frozen)
        self.frozen_bn_batch = (self.model.get("frozen_bn_statistics",
                                               "running").lower() == "batch")
        self.batch = int(self.model.get("batch_size", BATCH))
        self.plan()
        # a frozen layer (trainable = false): no weight gets a gradient,
        # batch normalization normalizes by its running statistics and
        # leaves them as they are (nntrainer-offload's fine-tuning mode),
        # unless frozen_bn_statistics = batch
        for n in self.nodes:
            if not as_bool(n.props.get("trainable", "true")):
                n.weights = [(wn, s, False, i, f)
                             for wn, s, _, i, f in n.weights]
                n.cfg["frozen"] = True

    def plan(self):
        for n in self.nodes:
            ins = [self.nodes[i].shape for i in n.inputs]
            p = n.props
            t = n.type
            where = "%s [%s]" % (self.path, n.name)
            if t == "input":
                dims = [int(x) for x in p["input_shape"].split(":")]
                dims = ([1] * (3 - len(dims)) + dims)[-3:]
                n.shape = tuple(dims)
            elif t == "conv2d":
                c, h, w = ins[0]
                f = int(p["filters"])
                k = ints(p["kernel_size"])
                s = ints(p.get("stride", "1"))
                d = ints(p.get("dilation", "1"))
                g = int(p.get("groups", "1"))
                if c % g or f % g:
                    raise ConfigError(where + ": groups must divide "
                                      "channels and filters")
                pad = padding_of(p.get("padding", "valid"), (h, w), k, s, d)
                oh = (h + pad[0] + pad[1] - (k[0] - 1) * d[0] - 1) // s[0] + 1
                ow = (w + pad[2] + pad[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1
                if oh < 1 or ow < 1:
                    raise ConfigError(where + ": kernel larger than input")
                n.cfg.update(stride=s, dilation=d, groups=g, pad=pad,
                             l2=l2_of(p, where))
                n.shape = (f, oh, ow)
                fan_in = c // g * k[0] * k[1]
                fan_out = f * k[0] * k[1]
                n.weights.append(("weight", (f, c // g, k[0], k[1]), True,
                                  p.get("weight_initializer",
                                        "xavier_uniform"),
                                  (fan_in, fan_out)))
                if not as_bool(p.get("disable_bias", "false")):
                    n.weights.append(("bias", (f,), True,
                                      p.get("bias_initializer", "zeros"),
                                      (fan_in, fan_out)))
            elif t == "batch_normalization":
                c = ins[0][0]
                n.cfg.update(eps=float(p.get("epsilon", "0.001")),
                             momentum=float(p.get("momentum", "0.99")))
                n.shape = ins[0]
                for wn, tr, dflt in (("moving_mean", False, "zeros"),
                                     ("moving_variance", False, "ones"),
                                     ("gamma", True, "ones"),
                                     ("beta", True, "zeros")):
                    n.weights.append((wn, (c,), tr,
                                      p.get(wn + "_initializer", dflt),
                                      (c, c)))
            elif t == "pooling2d":
                c, h, w = ins[0]
                kind = p["pooling"].lower()
                if kind in ("global_max", "global_average"):
                    n.cfg.update(kind=kind)
                    n.shape = (c, 1, 1)
                elif kind in ("max", "average"):
                    k = ints(p["pool_size"])
                    s = ints(p.get("stride", "1"))
                    pad = padding_of(p.get("padding", "valid"), (h, w), k, s,
                                     (1, 1))
                    oh = (h + pad[0] + pad[1] - k[0]) // s[0] + 1
                    ow = (w + pad[2] + pad[3] - k[1]) // s[1] + 1
                    if oh < 1 or ow < 1:
                        raise ConfigError(where + ": pool larger than input")
                    n.cfg.update(kind=kind, k=k, stride=s, pad=pad)
                    n.shape = (c, oh, ow)
                else:
                    raise ConfigError(where + ": bad pooling " + kind)
            elif t == "fully_connected":
                c, h, w = ins[0]
                u = int(p["unit"])
                n.cfg["l2"] = l2_of(p, where)
                n.shape = (c, h, u)
                n.weights.append(("weight", (w, u), True,
                                  p.get("weight_initializer",
                                        "xavier_uniform"), (w, u)))
                if not as_bool(p.get("disable_bias", "false")):
                    n.weights.append(("bias", (u,), True,
                                      p.get("bias_initializer", "zeros"),
                                      (w, u)))
            elif t == "dropout":
                n.cfg["rate"] = float(p.get("dropout_rate", "0"))
                n.shape = ins[0]
            elif t == "concat":
                axis = int(p.get("axis", "1"))
                if axis not in (1, 2, 3):
                    raise ConfigError(where + ": axis must be 1, 2 or 3")
                for s in ins[1:]:
                    for a in range(3):
                        if a != axis - 1 and s[a] != ins[0][a]:
                            raise ConfigError(where + ": shape mismatch")
                shp = list(ins[0])
                shp[axis - 1] = sum(s[axis - 1] for s in ins)
                n.cfg["axis"] = axis
                n.shape = tuple(shp)
            elif t == "addition":
                for s in ins[1:]:
                    if s != ins[0]:
                        raise ConfigError(where + ": shape mismatch %s %s"
                                          % (ins[0], s))
                n.shape = ins[0]
            elif t == "flatten":
                n.shape = (1, 1, ins[0][0] * ins[0][1] * ins[0][2])
            elif t in ("activation", "multiout", "output"):
                n.shape = ins[0]
            if t not in ("addition", "concat") and t != "input" \
                    and len(n.inputs) != 1:
                raise ConfigError(where + ": expected exactly one input")

    def regularized(self):
        """[(weight name, C)] of the trainable weights with an l2norm
        regularizer (a frozen layer's add nothing, as in nntrainer)."""
        return [(n.name + ".weight", n.cfg["l2"]) for n in self.nodes
                if n.cfg.get("l2", 0.0) > 0 and not n.cfg.get("frozen")]

    def weight_list(self):
        """[(full name, shape, trainable, init, fans)] in graph order."""
        out = []
        for n in self.nodes:
            for wn, shape, tr, init, fans in n.weights:
                out.append((n.name + "." + wn, shape, tr, init, fans))
        return out

    # ---------------- forward (torch) ----------------

    def forward(self, W, x, training):
        """Returns (output, pre-softmax input of the last node or None)."""
        vals = []
        for n in self.nodes:
            ins = [vals[i] for i in n.inputs]
            t = n.type
            if t == "input":
                y = x
            elif t == "conv2d":
                pt, pb, pl, pr = n.cfg["pad"]
                xi = F.pad(ins[0], (pl, pr, pt, pb))
                y = F.conv2d(xi, W[n.name + ".weight"],
                             W.get(n.name + ".bias"),
                             stride=n.cfg["stride"],
                             dilation=n.cfg["dilation"],
                             groups=n.cfg["groups"])
            elif t == "batch_normalization":
                y = F.batch_norm(ins[0], W[n.name + ".moving_mean"],
                                 W[n.name + ".moving_variance"],
                                 W[n.name + ".gamma"], W[n.name + ".beta"],
                                 training=training and
                                 (not n.cfg.get("frozen") or
                                  self.frozen_bn_batch),
                                 momentum=1.0 - n.cfg["momentum"],
                                 eps=n.cfg["eps"])
            elif t == "pooling2d":
                kind = n.cfg["kind"]
                xi = ins[0]
                if kind == "global_average":
                    y = xi.mean(dim=(2, 3), keepdim=True)
                elif kind == "global_max":
                    # max_pool2d: ties send the gradient to the first
                    # maximum in row-major order (amax would split it)
                    y = F.max_pool2d(xi, kernel_size=xi.shape[2:])
                else:
                    pt, pb, pl, pr = n.cfg["pad"]
                    if kind == "max":
                        xi = F.pad(xi, (pl, pr, pt, pb), value=-math.inf)
                        y = F.max_pool2d(xi, n.cfg["k"], n.cfg["stride"])
                    else:  # padding counts as zeros in the average
                        xi = F.pad(xi, (pl, pr, pt, pb))
                        y = F.avg_pool2d(xi, n.cfg["k"], n.cfg["stride"])
            elif t == "fully_connected":
                y = torch.matmul(ins[0], W[n.name + ".weight"])
                if n.name + ".bias" in W:
                    y = y + W[n.name + ".bias"]
            elif t == "dropout":
                if training and n.cfg["rate"] > 0:
                    raise ConfigError("dropout is random: no goldens")
                y = ins[0]
            elif t == "concat":
                y = torch.cat(ins, dim=n.cfg["axis"])
            elif t == "addition":
                y = ins[0]
                for o in ins[1:]:
                    y = y + o
            elif t == "flatten":
                y = ins[0].reshape(ins[0].shape[0], 1, 1, -1)
            elif t in ("multiout", "output"):
                y = ins[0]
            elif t == "activation":
                y = activate(n.cfg["act"], ins[0])
            else:
                raise AssertionError(t)
            vals.append(y)
        last = self.nodes[-1]
        logits = None
        if last.type == "activation" and last.cfg["act"] == "softmax":
            logits = vals[last.inputs[0]]
        return vals[-1], logits


def activate(act, x):
    if act == "relu":
        return F.relu(x)
    if act == "relu6":
        return F.relu6(x)
    if act == "sigmoid":
        return torch.sigmoid(x)
    if act == "tanh":
        return torch.tanh(x)
    if act == "leaky_relu":
        return F.leaky_relu(x, 0.01)
    if act == "softmax":  # over the C*H*W values of each sample
        return F.softmax(x.reshape(x.shape[0], -1), dim=1).reshape(x.shape)
    if act == "none":
        return x
    raise AssertionError(act)


# --------------------------------------------------------------------------
# Initial values (numpy, our layout)
# --------------------------------------------------------------------------

def init_weights(graph, rng):
    """Weights follow the INI initializer formula (props.h); everything an
    initializer would set to a constant (biases, gamma, beta, running stats)
    is randomized instead so the goldens exercise every term."""
    out = {}
    for name, shape, tr, init, (fi, fo) in graph.weight_list():
        wn = name.rsplit(".", 1)[1]
        if wn == "weight":
            init = init.lower()
            if init == "xavier_uniform":
                a = math.sqrt(6.0 / (fi + fo))
                v = rng.uniform(-a, a, shape)
            elif init == "xavier_normal":
                v = rng.normal(0.0, math.sqrt(2.0 / (fi + fo)), shape)
            elif init == "he_uniform":
                a = math.sqrt(6.0 / fi)
                v = rng.uniform(-a, a, shape)
            elif init == "he_normal":
                v = rng.normal(0.0, math.sqrt(2.0 / fi), shape)
            elif init == "lecun_uniform":
                a = math.sqrt(3.0 / fi)
                v = rng.uniform(-a, a, shape)
            elif init == "lecun_normal":
                v = rng.normal(0.0, math.sqrt(1.0 / fi), shape)
            else:
                a = math.sqrt(6.0 / (fi + fo))
                v = rng.uniform(-a, a, shape)
        elif wn == "bias":
            v = rng.uniform(-0.2, 0.2, shape)
        elif wn == "gamma":
            v = rng.uniform(0.5, 1.5, shape)
        elif wn == "beta":
            v = rng.uniform(-0.3, 0.3, shape)
        elif wn == "moving_mean":
            v = rng.uniform(-0.3, 0.3, shape)
        elif wn == "moving_variance":
            v = rng.uniform(0.5, 1.5, shape)
        else:
            raise AssertionError(name)
        out[name] = np.ascontiguousarray(v, dtype=np.float32)
    return out


def to_torch(init, graph):
    W = {}
    for name, shape, tr, _, _ in graph.weight_list():
        W[name] = torch.tensor(init[name]).requires_grad_(tr)
    return W


def reg_terms(graph, W):
    """The regularizers' terms: (for the gradient, for the reported loss).

    nntrainer adds C * W to the gradient of each regularized weight
    (Weight::calcRegularizationGradient), the gradient of 0.5 * C * ||W||^2
    (torch's weight_decay for SGD and Adam), but reports 0.5 * C * ||W||,
    the norm itself (Weight::getRegularizationLoss). The first term goes
    into what autograd differentiates, the second into the golden loss.
    """
    grad_term = torch.zeros(())
    loss_term = torch.zeros(())
    for name, c in graph.regularized():
        w = W[name]
        grad_term = grad_term + 0.5 * c * (w * w).sum()
        loss_term = loss_term + 0.5 * c * torch.linalg.vector_norm(w.detach())
    return grad_term, loss_term


def compute_loss(graph, out, logits, target):
    n = out.shape[0]
    if graph.loss == "cross":
        if logits is None:
            raise ConfigError(graph.path + ": loss = cross needs a final "
                              "softmax")
        lg = logits.reshape(n, -1)
        return -(target * F.log_softmax(lg, dim=1)).sum(dim=1).mean()
    if graph.loss == "mse":
        return ((out.reshape(n, -1) - target) ** 2).mean()
    raise ConfigError(graph.path + ": unsupported loss " + graph.loss)


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, float32 ndarray) in file order."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs = []
    off = 0
    for name, arr in tensors:
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (hl,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hl])
    meta = header.pop("__metadata__", {})
    base = 8 + hl
    out = {}
    for name, d in header.items():
        a, b = d["data_offsets"]
        out[name] = np.frombuffer(data[base + a:base + b],
                                  dtype="<f4").reshape(d["shape"])
    return out, meta


# --------------------------------------------------------------------------
# Goldens
# --------------------------------------------------------------------------

def make_golden(ini, out_dir):
    rel = os.path.relpath(os.path.abspath(ini), ROOT)
    net = os.path.splitext(os.path.basename(ini))[0]
    g = Graph(ini)
    seed = zlib.crc32(net.encode())
    rng = np.random.default_rng(seed)
    init = init_weights(g, rng)
    wl = g.weight_list()
    c, h, w = g.nodes[0].shape
    n = g.batch
    x_np = rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32)
    k = int(np.prod(g.nodes[-1].shape))
    if g.loss == "cross":
        lab = np.zeros((n, k), np.float32)
        lab[np.arange(n), rng.integers(0, k, n)] = 1.0
    else:
        lab = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    target = torch.tensor(lab)

    # forward, loss, gradients from the initial weights (training mode)
    W = to_torch(init, g)
    x = torch.tensor(x_np).requires_grad_(True)
    out, logits = g.forward(W, x, training=True)
    loss = compute_loss(g, out, logits, target)
    reg_grad, reg_loss = reg_terms(g, W)
    train = [nm for nm, _, tr, _, _ in wl if tr]
    grads = torch.autograd.grad(loss + reg_grad, [W[t] for t in train] + [x])
    loss = loss.detach() + reg_loss

    def run(opt_cls, kw):
        W = to_torch(init, g)
        opt = opt_cls([W[t] for t in train], **kw)
        xs = torch.tensor(x_np)
        for _ in range(STEPS):
            opt.zero_grad()
            o, lg = g.forward(W, xs, training=True)
            (compute_loss(g, o, lg, target) + reg_terms(g, W)[0]).backward()
            opt.step()
        return {nm: W[nm].detach().numpy().copy() for nm, *_ in wl}

    sgd = run(torch.optim.SGD, SGD)
    adam = run(torch.optim.Adam, ADAM)

    T = []
    for nm, *_ in wl:
        T.append(("init/" + nm, init[nm]))
    T.append(("input", x_np))
    T.append(("label", lab))
    T.append(("output", out.detach().numpy().reshape(n, -1)))
    T.append(("loss", loss.detach().numpy().reshape(1)))
    for nm, gr in zip(train, grads[:-1]):
        T.append(("grad/" + nm, gr.numpy()))
    T.append(("grad_input", grads[-1].numpy()))
    for nm, *_ in wl:
        T.append(("sgd/" + nm, sgd[nm]))
    for nm, *_ in wl:
        T.append(("adam/" + nm, adam[nm]))
    meta = {
        "net": rel, "batch": n, "loss_type": g.loss, "seed": seed,
        "sgd_lr": SGD["lr"], "sgd_momentum": SGD["momentum"],
        "adam_lr": ADAM["lr"], "adam_beta1": ADAM["betas"][0],
        "adam_beta2": ADAM["betas"][1], "adam_eps": ADAM["eps"],
        "steps": STEPS, "torch_version": torch.__version__,
    }
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, net + ".safetensors")
    write_safetensors(path, T, meta)

    back, bmeta = read_safetensors(path)
    assert bmeta["net"] == rel and len(back) == len(T)
    for nm, arr in T:
        assert np.array_equal(back[nm], arr), nm
    for nm, c in g.regularized():  # the terms must show above the tolerance
        gr = grads[train.index(nm)]
        print("%-14s %s: C = %g, max|C*W| / max|grad| = %.3g, "
              "0.5*C*||W|| / loss = %.3g" % (
                  net, nm, c, c * np.abs(init[nm]).max() /
                  gr.abs().max().item(),
                  0.5 * c * np.linalg.norm(init[nm]) / loss.item()))
    n_train = sum(int(np.prod(s)) for _, s, tr, _, _ in wl if tr)
    print("%-14s %-40s %2d layers, %5d trainable params, loss %.6f, "
          "%d bytes" % (net, os.path.relpath(path, ROOT), len(g.nodes),
                        n_train, loss.item(), os.path.getsize(path)))


# --------------------------------------------------------------------------
# --count: parameter counts of the shipped models
# --------------------------------------------------------------------------

class RefMobileNetV2(torch.nn.Module):
    """Independent restatement of torchvision.models.mobilenet_v2 (width
    1.0, no rounding needed since all widths are multiples of 8)."""

    def __init__(self, classes=1000, cifar=False):
        super().__init__()
        nn = torch.nn

        def cbr(i, o, k, s, g=1, act=True):
            layers = [nn.Conv2d(i, o, k, s, (k - 1) // 2, groups=g,
                                bias=False), nn.BatchNorm2d(o)]
            if act:
                layers.append(nn.ReLU6())
            return layers

        cfg = [(1, 16, 1, 1), (6, 24, 2, 1 if cifar else 2), (6, 32, 3, 2),
               (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
        feats = [nn.Sequential(*cbr(3, 32, 3, 1 if cifar else 2))]
        cin = 32
        self.residual = [False]
        for t, c, n, s in cfg:
            for i in range(n):
                st = s if i == 0 else 1
                hid = cin * t
                layers = []
                if t != 1:
                    layers += cbr(cin, hid, 1, 1)
                layers += cbr(hid, hid, 3, st, g=hid)
                layers += cbr(hid, c, 1, 1, act=False)
                feats.append(nn.Sequential(*layers))
                self.residual.append(st == 1 and cin == c)
                cin = c
        feats.append(nn.Sequential(*cbr(cin, 1280, 1, 1)))
        self.residual.append(False)
        self.features = nn.ModuleList(feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2),
                                        nn.Linear(1280, classes))

    def forward(self, x):
        for f, r in zip(self.features, self.residual):
            x = x + f(x) if r else f(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def load_reference(ref, graph, W):
    """Copy the graph's weights into ref, module by module in order."""
    ours = [n for n in graph.nodes if n.weights]
    mods = [m for m in ref.modules()
            if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d,
                              torch.nn.Linear))]
    if len(ours) != len(mods):
        raise AssertionError("%d weighted layers vs %d reference modules"
                             % (len(ours), len(mods)))
    with torch.no_grad():
        for n, m in zip(ours, mods):
            if isinstance(m, torch.nn.Conv2d):
                pairs = [(m.weight, W[n.name + ".weight"])]
                if m.bias is not None or n.name + ".bias" in W:
                    pairs.append((m.bias, W[n.name + ".bias"]))
            elif isinstance(m, torch.nn.BatchNorm2d):
                pairs = [(m.running_mean, W[n.name + ".moving_mean"]),
                         (m.running_var, W[n.name + ".moving_variance"]),
                         (m.weight, W[n.name + ".gamma"]),
                         (m.bias, W[n.name + ".beta"])]
                if abs(m.eps - n.cfg["eps"]) > 1e-12 or \
                        abs(m.momentum - (1 - n.cfg["momentum"])) > 1e-9:
                    raise AssertionError(n.name + ": BN eps/momentum")
            else:
                pairs = [(m.weight, W[n.name + ".weight"].t()),
                         (m.bias, W[n.name + ".bias"])]
            for dst, src in pairs:
                if dst is None or tuple(dst.shape) != tuple(src.shape):
                    raise AssertionError("%s: shape %s vs %s" % (
                        n.name, None if dst is None else tuple(dst.shape),
                        tuple(src.shape)))
                dst.copy_(src)


def count(ini):
    g = Graph(ini)
    wl = g.weight_list()
    train = sum(int(np.prod(s)) for _, s, tr, _, _ in wl if tr)
    stats = sum(int(np.prod(s)) for _, s, tr, _, _ in wl if not tr)
    by_type = {}
    for n in g.nodes:
        by_type[n.type] = by_type.get(n.type, 0) + 1
    print("%s: %d layers (%s)" % (os.path.relpath(ini, ROOT), len(g.nodes),
                                  ", ".join("%s %d" % kv for kv in
                                            sorted(by_type.items()))))
    print("  input %s -> output %s" % (g.nodes[0].shape, g.nodes[-1].shape))
    print("  trainable parameters: %s" % format(train, ","))
    print("  batch-norm running statistics: %s (total %s)"
          % (format(stats, ","), format(train + stats, ",")))
    # run the graph once (eval mode, batch 2) to prove it is executable
    rng = np.random.default_rng(0)
    init = init_weights(g, rng)
    W = to_torch(init, g)
    c, h, w = g.nodes[0].shape
    x = torch.tensor(rng.uniform(-1, 1, (2, c, h, w)).astype(np.float32))
    with torch.no_grad():
        out, logits = g.forward(W, x, training=False)
    print("  forward ok: output %s" % (tuple(out.shape),))
    name = os.path.basename(ini)
    if name.startswith("mobilenetv2"):
        classes = g.nodes[-1].shape[2]
        ref = RefMobileNetV2(classes, cifar=(h == 32))
        rtrain = sum(p.numel() for p in ref.parameters())
        ref_known = {1000: 3504872}.get(classes)
        print("  reference mobilenet_v2 module: %s parameters%s" % (
            format(rtrain, ","),
            "" if ref_known is None else
            " (torchvision mobilenet_v2: %s)" % format(ref_known, ",")))
        load_reference(ref, g, W)
        ref.eval()
        with torch.no_grad():
            r = ref(x)
        diff = (r - logits.reshape(2, -1)).abs().max().item()
        diff /= max(r.abs().max().item(), 1e-30)
        print("  logits vs reference module: max abs diff / max |logit| "
              "= %.3g" % diff)
        if rtrain != train or diff > 1e-5:
            raise SystemExit("  MISMATCH with the reference module")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", action="store_true",
                    help="print parameter counts of the given INI files")
    ap.add_argument("--out-dir",
                    default=os.path.join(ROOT, "test", "data", "goldens"))
    ap.add_argument("ini", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        if args.count:
            for ini in args.ini or [os.path.join(ROOT, "res", f) for f in
                                    ("resnet18.ini", "mobilenetv2.ini",
                                     "mobilenetv2_32.ini")]:
                count(ini)
        else:
            for ini in args.ini or [os.path.join(ROOT, "test", "data",
                                                 "nets", n + ".ini")
                                    for n in NETS]:
                make_golden(ini, args.out_dir)
    except ConfigError as e:
        sys.exit("error: %s" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
