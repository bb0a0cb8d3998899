#!/usr/bin/env python3
"""Convert a PyTorch state_dict to nntrainer-offload's safetensors weights.

Usage:

    python3 tools/torch2nto.py MODEL.ini STATE_DICT OUT.safetensors

then, e.g.,

    nntrainer-offload predict MODEL.ini --weights OUT.safetensors IMAGE...
    nntrainer-offload train MODEL.ini --init-weights OUT.safetensors ...

STATE_DICT is either a safetensors file of torch-named tensors (read with the
standard library; F32, F16, BF16 or F64) or a file written by torch.save (a
state_dict, or a dict holding one under "state_dict", "model" or
"model_state_dict"), read with torch.load(weights_only=True), which needs a
python3 with PyTorch (Debian: /usr/bin/python3 with python3-torch). The file
type is found from the file's first bytes, not from its name.

The mapping is by order. The INI's sections with weights (conv2d,
batch_normalization, fully_connected), in file order, are paired with the
state_dict's modules (tensor names up to the last '.') in the order of their
first tensor; num_batches_tracked is dropped. Each pair must be of the same
kind (Conv2d, BatchNorm, Linear: told by the tensors) and shape, computed
from the INI's input shape through its graph; the first mismatch stops the
conversion with a message naming both sides. A safetensors file keeps the
order of its header, so a file written in state_dict order maps (the
safetensors library's save_file sorts the names, which loses the order: save
with torch.save instead). res/resnet18_224.ini maps torchvision's resnet18,
res/mobilenetv2.ini its mobilenet_v2; any module whose parameters are
registered in the order of an INI's sections maps onto that INI.

Written tensors, named "<section>.<weight>" (the section in lower case):

    conv2d               weight [F, C/groups, kh, kw] as torch, bias [F]
    batch_normalization  gamma (weight), beta (bias), moving_mean
                         (running_mean), moving_variance (running_var), [C]
    fully_connected      weight [in, unit]: torch's [unit, in] transposed;
                         bias [unit]

with the metadata nntrainer-offload's own files carry ("format":
"nntrainer-offload", "model": MODEL.ini, "fully_connected_weight_layout":
"in,unit") and "source": STATE_DICT's file name. What a state_dict does not
hold stays the INI's: batch normalization's epsilon (torch's default is
1e-5; a note is printed when the INI says otherwise) and momentum.

Exit status: 0 written; 1 a file that cannot be read or written (also a
torch file without torch); 2 usage, an INI this tool cannot follow, or a
state_dict that does not match the INI.
"""

import json
import math
import os
import struct
import sys
from array import array

SAFETENSORS_FLOATS = {"F32": "f", "F64": "d"}  # array typecodes
NOT_LAYERS = {"model", "optimizer", "learningratescheduler", "train_set",
              "valid_set", "test_set", "dataset"}


class ConvertError(Exception):
    """A failure to report: message and exit status (1 or 2)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def shape_str(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


# ---------------------------------------------------------------- safetensors

def _to_floats(dtype, raw):
    """Little-endian raw bytes of dtype as array('f'), or None (not float)."""
    if dtype in SAFETENSORS_FLOATS:
        a = array(SAFETENSORS_FLOATS[dtype])
        a.frombytes(raw)
        if sys.byteorder == "big":
            a.byteswap()
        return a if dtype == "F32" else array("f", a)
    if dtype == "F16":
        return array("f", struct.unpack("<%de" % (len(raw) // 2), raw))
    if dtype == "BF16":  # the high half of a float32
        half = array("H")
        half.frombytes(raw)
        if sys.byteorder == "big":
            half.byteswap()
        bits = array("I", [h << 16 for h in half])
        return array("f", bits.tobytes())
    return None


def read_safetensors(path):
    """Tensors of a safetensors file in header order: a list of (name, dtype,
    shape, values), values an array('f') for float dtypes, else None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConvertError(1, "%s: cannot read: %s" % (path, e.strerror))
    if len(data) < 8:
        raise ConvertError(1, "%s: not a safetensors file (%d bytes)"
                           % (path, len(data)))
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        raise ConvertError(1, "%s: truncated: a header of %d bytes in a file "
                           "of %d" % (path, hlen, len(data)))
    try:
        header = json.loads(data[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConvertError(1, "%s: corrupt safetensors header: %s" % (path, e))
    if not isinstance(header, dict):
        raise ConvertError(1, "%s: corrupt safetensors header" % path)
    base = 8 + hlen
    sizes = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4,
             "F16": 2, "BF16": 2, "I16": 2, "U16": 2, "I8": 1, "U8": 1,
             "BOOL": 1}
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = entry["dtype"]
            shape = [int(d) for d in entry["shape"]]
            begin, end = (int(x) for x in entry["data_offsets"])
        except (TypeError, KeyError, ValueError):
            raise ConvertError(1, "%s: corrupt header entry for %s"
                               % (path, name))
        want = math.prod(shape) * sizes.get(dtype, 0)
        if dtype not in sizes or end - begin != want or begin < 0 or \
                base + end > len(data):
            raise ConvertError(1, "%s: tensor %s (%s %s) has bytes [%d, %d) "
                               "of %d: corrupt or truncated"
                               % (path, name, dtype, shape_str(shape), begin,
                                  end, len(data) - base))
        out.append((name, dtype, shape,
                    _to_floats(dtype, data[base + begin:base + end])))
    return out


def write_safetensors(path, tensors, metadata):
    """Write tensors, a list of (name, dtype, shape, array) with dtype "F32"
    (array 'f') or "I64" (array 'q'), in that order, with metadata (a dict of
    strings), atomically (path.tmp.<pid>, fsync, rename)."""
    header = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, dtype, shape, values in tensors:
        size = len(values) * values.itemsize
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, _, _, values in tensors:
                if sys.byteorder == "big":
                    values = array(values.typecode, values)
                    values.byteswap()
                values.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConvertError(1, "%s: cannot write: %s" % (path, e.strerror))


# ----------------------------------------------------------------- torch file

def read_torch(path):
    """Tensors of a torch.save file, as read_safetensors returns them."""
    try:
        import torch
    except ImportError:
        raise ConvertError(1, "%s is not a safetensors file, so it is read "
                           "as a torch file, which needs PyTorch; %s has no "
                           "torch module. Run with a python3 that has it "
                           "(Debian: /usr/bin/python3 with python3-torch), "
                           "or give a safetensors file" % (path, sys.executable))
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            obj = torch.load(path, map_location="cpu")
    except Exception as e:  # torch raises many kinds
        raise ConvertError(1, "%s: torch.load failed (a state_dict saved with "
                           "torch.save(model.state_dict(), FILE) is needed): "
                           "%s" % (path, e))

    def is_state_dict(d):
        return isinstance(d, dict) and d and all(
            isinstance(k, str) and torch.is_tensor(v) for k, v in d.items())

    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not is_state_dict(obj) and isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if is_state_dict(obj.get(key)):
                print("torch2nto: %s: the state_dict under \"%s\"" % (path, key))
                obj = obj[key]
                break
    if not is_state_dict(obj):
        raise ConvertError(1, "%s: holds no state_dict (a dict of tensors), "
                           "but a %s" % (path, type(obj).__name__))
    out = []
    for name, t in obj.items():
        t = t.detach().cpu()
        values = None
        if t.is_floating_point():
            t = t.to(torch.float32).contiguous()
            try:
                values = array("f", t.numpy().tobytes())
            except (ImportError, RuntimeError):  # torch without numpy
                values = array("f", t.flatten().tolist())
        out.append((name, str(t.dtype).replace("torch.", ""), list(t.shape),
                    values))
    return out


def read_state_dict(path):
    """By content: safetensors (8-byte length, then '{'), else torch."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError as e:
        raise ConvertError(1, "%s: cannot read: %s" % (path, e.strerror))
    if len(head) == 9 and head[8:9] == b"{":
        return read_safetensors(path)
    return read_torch(path)


# ------------------------------------------------------------------------ INI

def _strip_comment(line):
    """line up to an unquoted '#' or ';'."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "#;":
            return line[:i]
    return line


def read_ini(path):
    """Sections of an INI file in our dialect, in file order: a list of
    (name, {key: value}); names and keys in lower case, values unquoted."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConvertError(2, "%s: cannot read: %s" % (path, e))
    sections = []
    for number, raw in enumerate(lines, 1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConvertError(2, "%s: line %d: expected [section]"
                                   % (path, number))
            sections.append((line[1:-1].strip().lower(), {}))
        elif "=" in line and sections:
            key, _, value = line.partition("=")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            sections[-1][1][key.strip().lower()] = value
        else:
            raise ConvertError(2, "%s: line %d: expected [section] or key = "
                               "value" % (path, number))
    return sections


class Layer:
    """One weight-bearing section: name, kind and the tensors it loads,
    a list of (weight name, shape) in our file order."""

    def __init__(self, name, kind, tensors, props):
        self.name, self.kind, self.tensors, self.props = (name, kind, tensors,
                                                          props)


def _ints(ini, sec, props, key, count, default):
    """Key of props as count ints ("3,3" or "3"), or default."""
    value = props.get(key)
    if value is None:
        return list(default)
    try:
        v = [int(x) for x in value.split(",")]
    except ValueError:
        v = []
    if len(v) == 1:
        v = v * count
    if len(v) != count or min(v) < 0:
        raise ConvertError(2, "%s: [%s] %s = %s: expected %d integers"
                           % (ini, sec, key, value, count))
    return v


def _bool(ini, sec, props, key):
    value = props.get(key, "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ConvertError(2, "%s: [%s] %s = %s: expected true or false"
                           % (ini, sec, key, value))
    return value in ("true", "1", "yes")


def _window(ini, sec, props, hw, kernel, stride, dilation, full_ok):
    """Output (h, w) of a kernel over hw with the padding key of props."""
    spec = props.get("padding", "0").strip().lower()
    pads = []  # (before, after) per dimension
    if spec in ("valid", "same", "full"):
        if spec == "full" and not full_ok:
            raise ConvertError(2, "%s: [%s] padding = full is for conv2d only"
                               % (ini, sec))
        for i, k, s, d in zip(hw, kernel, stride, dilation):
            span = d * (k - 1) + 1
            total = {"valid": 0, "full": 2 * (span - 1),
                     "same": max((-(-i // s) - 1) * s + span - i, 0)}[spec]
            pads.append((total // 2, total - total // 2))
    else:
        p = _ints(ini, sec, props, "padding", 4, [0] * 4) \
            if spec.count(",") == 3 else \
            _ints(ini, sec, props, "padding", 2, [0, 0])
        pads = [(p[0], p[1]), (p[2], p[3])] if len(p) == 4 else \
            [(p[0], p[0]), (p[1], p[1])]
    out = [(i + a + b - d * (k - 1) - 1) // s + 1
           for i, (a, b), k, s, d in zip(hw, pads, kernel, stride, dilation)]
    if min(out) < 1:
        raise ConvertError(2, "%s: [%s] the window does not fit its input of "
                           "%dx%d" % (ini, sec, hw[0], hw[1]))
    return out


def ini_layers(ini):
    """The INI's sections with weights, in file order, with their tensors'
    shapes, following the graph from the input's shape."""
    shapes = {}  # section (and section/activation) -> [c, h, w]
    previous = None
    layers = []
    for sec, props in read_ini(ini):
        if sec in NOT_LAYERS:
            continue
        kind = props.get("type", "").lower()
        if kind == "input":
            dims = [int(d) for d in props.get("input_shape", "").split(":")
                    if d.strip().isdigit()]
            if not dims or len(dims) > 4:
                raise ConvertError(2, "%s: [%s] needs input_shape = c:h:w"
                                   % (ini, sec))
            out = ([1, 1, 1] + dims)[-3:]
            inputs = []
        else:
            names = props.get("input_layers")
            names = [n.strip().lower() for n in names.split(",")] if names \
                else [previous]
            for n in names:
                if n not in shapes:
                    raise ConvertError(2, "%s: [%s] reads %s, which is not a "
                                       "layer before it" % (ini, sec, n))
            inputs = [shapes[n] for n in names]
            c, h, w = inputs[0]
            out = [c, h, w]
        if kind == "conv2d":
            filters = _ints(ini, sec, props, "filters", 1, [0])[0]
            kernel = _ints(ini, sec, props, "kernel_size", 2, [0, 0])
            groups = _ints(ini, sec, props, "groups", 1, [1])[0]
            if filters < 1 or min(kernel) < 1 or groups < 1 or c % groups:
                raise ConvertError(2, "%s: [%s] needs filters, kernel_size and "
                                   "groups dividing its %d input channels"
                                   % (ini, sec, c))
            stride = _ints(ini, sec, props, "stride", 2, [1, 1])
            dilation = _ints(ini, sec, props, "dilation", 2, [1, 1])
            out = [filters] + _window(ini, sec, props, [h, w], kernel, stride,
                                      dilation, True)
            tensors = [("weight", [filters, c // groups] + kernel)]
            if not _bool(ini, sec, props, "disable_bias"):
                tensors.append(("bias", [filters]))
            layers.append(Layer(sec, "conv2d", tensors, props))
        elif kind in ("batch_normalization", "bn"):
            features = w if c == 1 and h == 1 else c
            layers.append(Layer(sec, "batch_normalization",
                                [(t, [features]) for t in ("moving_mean",
                                 "moving_variance", "gamma", "beta")], props))
        elif kind in ("fully_connected", "fc"):
            unit = _ints(ini, sec, props, "unit", 1, [0])[0]
            if unit < 1:
                raise ConvertError(2, "%s: [%s] needs unit" % (ini, sec))
            tensors = [("weight", [c * h * w, unit])]
            if not _bool(ini, sec, props, "disable_bias"):
                tensors.append(("bias", [unit]))
            layers.append(Layer(sec, "fully_connected", tensors, props))
            out = [1, 1, unit]
        elif kind == "pooling2d":
            if props.get("pooling", "").lower().startswith("global"):
                out = [c, 1, 1]
            else:
                kernel = _ints(ini, sec, props, "pool_size", 2, [0, 0])
                if min(kernel) < 1:
                    raise ConvertError(2, "%s: [%s] needs pool_size"
                                       % (ini, sec))
                stride = _ints(ini, sec, props, "stride", 2, [1, 1])
                out = [c] + _window(ini, sec, props, [h, w], kernel, stride,
                                    [1, 1], False)
        elif kind == "flatten":
            out = [1, 1, c * h * w]
        elif kind == "concat":
            axis = _ints(ini, sec, props, "axis", 1, [1])[0]
            if axis not in (1, 2, 3):
                raise ConvertError(2, "%s: [%s] axis must be 1, 2 or 3"
                                   % (ini, sec))
            out[axis - 1] = sum(s[axis - 1] for s in inputs)
        elif kind not in ("input", "activation", "addition", "dropout",
                          "multiout", "output"):
            raise ConvertError(2, "%s: [%s] type = %s: not a layer type "
                               "torch2nto knows" % (ini, sec, kind or "(none)"))
        shapes[sec] = shapes[sec + "/activation"] = out
        previous = sec
    return layers


# -------------------------------------------------------------------- mapping

def torch_modules(tensors):
    """Group (name, dtype, shape, values) by module, in the order of each
    module's first tensor: a list of (module, {leaf: tensor}). Returns it
    and the number of num_batches_tracked dropped."""
    modules = {}
    dropped = 0
    for t in tensors:
        module, _, leaf = t[0].rpartition(".")
        if leaf == "num_batches_tracked":
            dropped += 1
            continue
        modules.setdefault(module, {})[leaf] = t
    return list(modules.items()), dropped


def module_kind(leaves):
    """"batch_normalization", "conv2d", "fully_connected" or None."""
    if "running_mean" in leaves:
        return "batch_normalization"
    weight = leaves.get("weight")
    if weight and len(weight[2]) == 4:
        return "conv2d"
    if weight and len(weight[2]) == 2:
        return "fully_connected"
    return None


TORCH_KIND = {"conv2d": "Conv2d", "batch_normalization": "BatchNorm",
              "fully_connected": "Linear", None: "unknown kind"}
# Our weight name -> (torch leaf, transposed)
FROM_TORCH = {
    "conv2d": {"weight": ("weight", False), "bias": ("bias", False)},
    "batch_normalization": {"moving_mean": ("running_mean", False),
                            "moving_variance": ("running_var", False),
                            "gamma": ("weight", False),
                            "beta": ("bias", False)},
    "fully_connected": {"weight": ("weight", True), "bias": ("bias", False)},
}


def transpose(values, rows, cols):
    """(rows, cols) row-major values as (cols, rows)."""
    out = array("f", bytes(4 * rows * cols))
    for r in range(rows):
        out[r::rows] = values[r * cols:(r + 1) * cols]
    return out


def convert(ini, layers, source, tensors):
    """The output tensors (name, "F32", shape, values) of layers from the
    state_dict tensors, checked pair by pair."""
    modules, _ = torch_modules(tensors)
    names = [t[0] for t in tensors if t[3] is not None]  # floats only:
    hint = ""  # save_file sorts by dtype, then by name
    if len(modules) > 2 and names == sorted(names):
        hint = ("\n  (the state_dict's names are in alphabetical order, as "
                "safetensors' save_file writes them: the module order is "
                "lost; save the state_dict with torch.save, or as "
                "safetensors in state_dict order)")

    def ours(i):
        layer = layers[i]
        return "INI %s, section with weights %d of %d: [%s] %s: %s" % (
            ini, i + 1, len(layers), layer.name, layer.kind, ", ".join(
                "%s.%s %s" % (layer.name, n, shape_str(s))
                for n, s in layer.tensors))

    def theirs(i):
        module, leaves = modules[i]
        return "state_dict %s, module %d of %d: '%s' %s: %s" % (
            source, i + 1, len(modules), module,
            TORCH_KIND[module_kind(leaves)], ", ".join(
                "%s %s" % (t[0], shape_str(t[2])) for t in leaves.values()))

    def fail(i, what):
        raise ConvertError(2, "%s\n  %s\n  %s%s" % (what, ours(i), theirs(i),
                                                    hint))

    if len(layers) > len(modules):
        mismatch = "%d sections with weights in %s, %d modules in %s:\n  " \
            "%s\n  has no state_dict module left" % (
                len(layers), ini, len(modules), source, ours(len(modules)))
    elif len(layers) < len(modules):
        mismatch = "%d sections with weights in %s, %d modules in %s:\n  " \
            "%s\n  has no INI section left" % (
                len(layers), ini, len(modules), source, theirs(len(layers)))
    else:
        mismatch = None
    out = []
    for i, (layer, (module, leaves)) in enumerate(zip(layers, modules)):
        kind = module_kind(leaves)
        if kind != layer.kind:
            fail(i, "[%s] is a %s, module '%s' %s" % (
                layer.name, layer.kind, module, "a " + TORCH_KIND[kind]
                if kind else "neither a Conv2d, a BatchNorm nor a Linear"))
        used = set()
        for name, shape in layer.tensors:
            leaf, flip = FROM_TORCH[kind][name]
            t = leaves.get(leaf)
            if t is None:
                fail(i, "%s.%s %s: module '%s' has no %s.%s%s"
                     % (layer.name, name, shape_str(shape), module, module,
                        leaf,
                        " (set disable_bias = true in the INI when the "
                        "torch module has no bias)" if leaf == "bias" else ""))
            tshape = t[2][::-1] if flip else t[2]
            if tshape != shape:
                fail(i, "%s.%s %s does not match %s %s%s"
                     % (layer.name, name, shape_str(shape), t[0],
                        shape_str(t[2]), " (transposed: %s)"
                        % shape_str(tshape) if flip else ""))
            if t[3] is None:
                fail(i, "%s is %s, not floating point"
                     % (t[0], t[1]))
            values = transpose(t[3], t[2][0], t[2][1]) if flip else t[3]
            out.append(("%s.%s" % (layer.name, name), "F32", shape, values))
            used.add(leaf)
        unused = [t[0] for leaf, t in leaves.items() if leaf not in used]
        if unused:
            fail(i, "%s has no place in [%s]%s"
                 % (", ".join(unused), layer.name,
                    " (the section has disable_bias = true)"
                    if any(u.endswith(".bias") for u in unused) else ""))
    if mismatch:
        raise ConvertError(2, mismatch + hint)
    return out


def epsilon_note(layers):
    """A note on stderr when a batch normalization's epsilon is not torch's
    default (the first such section)."""
    for layer in layers:
        eps = layer.props.get("epsilon", "0.001")
        try:
            differs = float(eps) != 1e-5
        except ValueError:
            differs = False  # nntrainer-offload refuses it when loading
        if layer.kind == "batch_normalization" and differs:
            print("torch2nto: note: [%s] epsilon = %s; torch's BatchNorm "
                  "default is 1e-5 (a state_dict does not say)"
                  % (layer.name, eps), file=sys.stderr)
            return


def main(argv):
    if argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) != 4:
        print("usage: python3 tools/torch2nto.py MODEL.ini STATE_DICT "
              "OUT.safetensors (--help: more)", file=sys.stderr)
        return 2
    ini, source, dest = argv[1:]
    try:
        layers = ini_layers(ini)
        if not layers:
            raise ConvertError(2, "%s: no section with weights" % ini)
        tensors = read_state_dict(source)
        _, dropped = torch_modules(tensors)
        out = convert(ini, layers, source, tensors)
        epsilon_note(layers)
        write_safetensors(dest, out, {
            "format": "nntrainer-offload",
            "model": ini,
            "fully_connected_weight_layout": "in,unit",
            "source": os.path.basename(source)})
    except ConvertError as e:
        print("torch2nto: %s" % e, file=sys.stderr)
        return e.status
    params = sum(len(t[3]) for t in out if not t[0].endswith(
        (".moving_mean", ".moving_variance")))
    print("torch2nto: %s -> %s: %d modules onto the sections of %s, %d "
          "parameters (%d tensors)%s"
          % (source, dest, len(layers), ini, params, len(out),
             "; %d num_batches_tracked dropped" % dropped if dropped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
