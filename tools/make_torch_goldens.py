#!/usr/bin/python3
"""Goldens for torchvision models converted with tools/torch2nto.py.

Run with Debian's interpreter (python3-torch, python3-torchvision), from
anywhere:

    /usr/bin/python3 tools/make_torch_goldens.py

For torchvision's resnet18 (res/resnet18_224.ini) and mobilenet_v2
(res/mobilenetv2.ini), built with weights=None, every tensor of the
state_dict (running statistics included) is replaced, in state_dict order,
by tools/torch_random_weights.py's values for a fixed seed, so a python3
without torch regenerates the same weights from the names, shapes and seed
alone. Writes:

  - test/data/torchvision/img0.png (200x160) and img1.png (240x260): smooth
    synthetic RGB images, one enlarged and one shrunk to 224x224;
  - test/data/goldens/torchvision_<model>.json: per image the 1000
    probabilities of the model in eval mode on what `nntrainer-offload
    predict` feeds it (decoded uint8 RGB / 255, resized to 224x224 by
    torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
    antialias=False), not normalized), softmax; the state_dict's names and
    shapes; the seed.

test/cli/test_torch2nto.sh checks `predict` on the converted weights against
these files; test/data/goldens/README.md describes them. The output is the
same on every run (one torch thread, the seeds fixed below).
"""

import json
import math
import os
import struct
import sys
import zlib

try:
    import torch
    import torch.nn.functional as F
    import torchvision
except ImportError as e:
    sys.exit("make_torch_goldens.py needs torch and torchvision; run it with "
             "/usr/bin/python3 (Debian python3-torch, python3-torchvision): "
             "%s" % e)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import torch_random_weights  # noqa: E402 (after the path is set)

# (name, constructor, INI, seed of torch_random_weights)
MODELS = [
    ("resnet18", torchvision.models.resnet18, "res/resnet18_224.ini", 18),
    ("mobilenet_v2", torchvision.models.mobilenet_v2, "res/mobilenetv2.ini",
     2),
]
# (file, width, height): one enlarged, one shrunk to the 224x224 input
IMAGES = [("test/data/torchvision/img0.png", 200, 160),
          ("test/data/torchvision/img1.png", 240, 260)]
SIZE = 224


def image_pixels(width, height, variant):
    """Rows of RGB bytes of a smooth picture: slanted waves and rings."""
    rows = []
    cx, cy = 0.35 + 0.3 * variant, 0.6 - 0.2 * variant
    for y in range(height):
        v = y / height
        row = bytearray()
        for x in range(width):
            u = x / width
            ring = math.hypot(u - cx, v - cy)
            r = 0.5 + 0.4 * math.sin(2 * math.pi * (1.5 * u + 0.5 * v)
                                     + variant)
            g = 0.5 + 0.3 * math.cos(2 * math.pi * (0.8 * u - 1.3 * v)) \
                + 0.15 * math.cos(14 * ring)
            b = 0.45 + 0.45 * math.cos(2 * math.pi * 3 * ring + 2 * variant) \
                * (1 - v)
            row += bytes(max(0, min(255, round(255 * c))) for c in (r, g, b))
        rows.append(bytes(row))
    return rows


def write_png(path, width, height, rows):
    """8-bit RGB PNG, each row with the Sub filter (difference to the pixel
    to the left), zlib level 9."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    raw = bytearray()
    for row in rows:
        raw.append(1)  # Sub
        raw += bytes((row[i] - (row[i - 3] if i >= 3 else 0)) & 255
                     for i in range(len(row)))
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0,
                                        0))
           + chunk(b"IDAT", zlib.compress(bytes(raw), 9))
           + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


def model_input(rows, width, height):
    """What predict feeds the model: (1, 3, 224, 224) float32."""
    x = torch.tensor(list(b"".join(rows)), dtype=torch.uint8)
    x = x.reshape(height, width, 3).permute(2, 0, 1).unsqueeze(0)
    x = x.to(torch.float32) / 255
    return F.interpolate(x, size=(SIZE, SIZE), mode="bilinear",
                         align_corners=False, antialias=False)


def check_decoded(path, rows):
    """The PNG decodes to rows (with Pillow, when present)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        if im.mode != "RGB" or im.tobytes() != b"".join(rows):
            sys.exit("%s: does not decode to the pixels written" % path)


def randomized(model, seed):
    """model with every state_dict tensor from torch_random_weights; the
    names and shapes, as lists."""
    state = model.state_dict()
    names_shapes = [[name, list(t.shape)] for name, t in state.items()]
    values = torch_random_weights.weights(names_shapes, seed)
    for name, (shape, floats) in values.items():
        state[name] = torch.frombuffer(bytearray(floats.tobytes()),
                                       dtype=torch.float32).reshape(shape)
    model.load_state_dict(state, strict=True)
    return model.eval(), names_shapes


def write_golden(path, golden):
    """JSON with one state_dict entry and 10 probabilities per line."""
    lines = ["{"]
    for key in ("model", "ini", "made_by", "torch_version",
                "torchvision_version", "seed"):
        lines.append(" %s: %s," % (json.dumps(key), json.dumps(golden[key])))
    lines.append(' "inputs": [')
    for i, inp in enumerate(golden["inputs"]):
        p = inp["probabilities"]
        chunks = [", ".join("%.9g" % v for v in p[k:k + 10])
                  for k in range(0, len(p), 10)]
        lines.append('  {"input": %s, "probabilities": [' %
                     json.dumps(inp["input"]))
        lines.append(",\n".join("   " + c for c in chunks))
        lines.append("  ]}" + ("," if i + 1 < len(golden["inputs"]) else ""))
    lines.append(" ],")
    lines.append(' "state_dict": [')
    lines.append(",\n".join("  " + json.dumps(e) for e in golden["state_dict"]))
    lines.append(" ]")
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    json.loads(open(path, encoding="utf-8").read())  # well-formed


def main():
    torch.set_num_threads(1)
    os.makedirs(os.path.join(ROOT, "test/data/torchvision"), exist_ok=True)
    inputs = []
    for variant, (rel, width, height) in enumerate(IMAGES):
        rows = image_pixels(width, height, variant)
        path = os.path.join(ROOT, rel)
        write_png(path, width, height, rows)
        check_decoded(path, rows)
        inputs.append((rel, model_input(rows, width, height)))
        print("%s: %dx%d, %d bytes" % (rel, width, height,
                                       os.path.getsize(path)))
    batch = torch.cat([x for _, x in inputs])
    for name, build, ini, seed in MODELS:
        model, names_shapes = randomized(build(weights=None), seed)
        with torch.no_grad():
            prob = torch.softmax(model(batch), dim=1)
        golden = {
            "model": name, "ini": ini, "made_by": "tools/make_torch_goldens.py",
            "torch_version": torch.__version__,
            "torchvision_version": torchvision.__version__, "seed": seed,
            "inputs": [{"input": rel, "probabilities": prob[i].tolist()}
                       for i, (rel, _) in enumerate(inputs)],
            "state_dict": names_shapes,
        }
        out = os.path.join(ROOT, "test/data/goldens/torchvision_%s.json" % name)
        write_golden(out, golden)
        top = prob.max(dim=1)
        print("%s: %d parameters; top class %s (p %s); written to %s" % (
            name, sum(p.numel() for p in model.parameters()),
            top.indices.tolist(), ["%.4f" % v for v in top.values.tolist()],
            os.path.relpath(out, ROOT)))


if __name__ == "__main__":
    main()
