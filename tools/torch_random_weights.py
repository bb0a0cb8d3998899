#!/usr/bin/env python3
"""Reproducible random weights for a PyTorch state_dict, standard library only.

The torchvision goldens (tools/make_torch_goldens.py, test/data/goldens/
torchvision_<model>.json) are computed with weights that both PyTorch and a
plain python3 without torch can produce: every value comes from one
random.Random(seed) stream, whose random() sequence Python keeps the same
across versions, rounded to float32 (array('f')).

As a module:

    import torch_random_weights
    w = torch_random_weights.weights([("conv1.weight", [64, 3, 7, 7]), ...], 18)
    shape, values = w["conv1.weight"]          # values: array('f')

As a script, from a golden JSON (its "seed" and "state_dict" names/shapes) to
a safetensors file of torch-named tensors, in state_dict order (what
tools/torch2nto.py reads):

    python3 tools/torch_random_weights.py GOLDEN.json OUT.safetensors

Values, drawn in names_shapes order (a tensor's elements in row-major order;
u = 2 * random() - 1, uniform in [-1, 1)):

  - conv weights (rank > 2): u * sqrt(6 / fan_in), fan_in = C/groups*kh*kw
    (He uniform: the variance that keeps activations at their scale
    through a relu);
  - linear weights (rank 2): u / sqrt(fan_in), fan_in = in (torch's
    default for nn.Linear; on the golden images, logits with a standard
    deviation of about 6 for resnet18 and 1.5 for mobilenet_v2, top
    probabilities about 0.9 and 0.04: neither softmax saturates);
  - batch normalization (a module with a running_mean): weight (gamma)
    1 + 0.25 u, bias (beta) 0.1 u, running_mean 0.1 u, running_var
    1 + 0.5 u (in [0.5, 1.5));
  - any other tensor (conv and linear biases): 0.1 u;
  - num_batches_tracked (torch's integer counter, no weight) draws nothing
    and is left out of the result.
"""

import json
import math
import os
import random
import sys
from array import array


def _module_of(name):
    """'layer1.0.bn1.weight' -> 'layer1.0.bn1' ('' at the top level)."""
    return name.rpartition(".")[0]


def weights(names_shapes, seed):
    """Random values for torch-named tensors.

    names_shapes: sequence of (name, shape), shape a sequence of ints, in
    state_dict order. seed: the random.Random seed. Returns a dict name ->
    (shape as a list, array('f') of product(shape) values), in the same
    order, without num_batches_tracked.
    """
    names = [n for n, _ in names_shapes]
    batchnorms = {_module_of(n) for n in names if n.endswith(".running_mean")}
    rnd = random.Random(seed).random
    out = {}
    for name, shape in names_shapes:
        shape = [int(d) for d in shape]
        leaf = name.rpartition(".")[2]
        if leaf == "num_batches_tracked":
            continue
        count = math.prod(shape)
        scale, offset = 0.1, 0.0
        if _module_of(name) in batchnorms:
            scale, offset = {
                "weight": (0.25, 1.0),
                "running_var": (0.5, 1.0),
            }.get(leaf, (0.1, 0.0))
        elif len(shape) >= 2:
            gain = 6.0 if len(shape) > 2 else 1.0
            scale = math.sqrt(gain / math.prod(shape[1:]))
        out[name] = (shape, array("f", [offset + scale * (2.0 * rnd() - 1.0)
                                        for _ in range(count)]))
    return out


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: python3 tools/torch_random_weights.py GOLDEN.json "
                 "OUT.safetensors")
    with open(argv[1], encoding="utf-8") as f:
        golden = json.load(f)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch2nto  # the safetensors writer, next to this file

    names_shapes = golden["state_dict"]
    values = weights(names_shapes, golden["seed"])
    tensors = []
    for name, shape in names_shapes:
        if name in values:
            tensors.append((name, "F32", shape, values[name][1]))
        else:  # num_batches_tracked: an int64 0, as torch stores it
            tensors.append((name, "I64", shape, array("q", [0])))
    torch2nto.write_safetensors(argv[2], tensors, {
        "source": "tools/torch_random_weights.py %s (seed %d)"
                  % (os.path.basename(argv[1]), golden["seed"])})


if __name__ == "__main__":
    main(sys.argv)
