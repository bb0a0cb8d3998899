#!/usr/bin/env python3
"""Write the model configs shipped in res/ (nntrainer INI dialect).

    python3 tools/gen_configs.py [--out-dir res]

Writes res/resnet18.ini, res/mobilenetv2.ini and res/mobilenetv2_32.ini.
Standard library only. The generated files are committed; rerun this script
after changing it and commit the result.

Parameter counts (check with: /usr/bin/python3 tools/make_goldens.py --count
res/resnet18.ini res/mobilenetv2.ini res/mobilenetv2_32.ini):
  resnet18.ini        12,557,322 trainable (ResNet-18 as in nntrainer's
                      Applications/Resnet: 3x3 stride-2 conv shortcuts, conv
                      biases, BN after the residual addition, max+average
                      pooling concatenated, 1x1 conv classifier)
  mobilenetv2.ini      3,504,872 trainable (= torchvision mobilenet_v2)
  mobilenetv2_32.ini   2,236,682 trainable (same network, 10 classes)
"""

import argparse
import os
import sys


class Ini:
    """Accumulates INI text, one section at a time."""

    def __init__(self, header):
        self.lines = ["# " + h if h else "#" for h in header]
        self.names = set()
        self.last = None

    def comment(self, *text):
        self.lines.append("")
        for t in text:
            self.lines.append("# " + t)

    def section(self, name, keys, comment=None):
        """keys: list of (key, value) pairs, or (key, value, comment)."""
        if name in self.names:
            raise ValueError("duplicate section " + name)
        self.names.add(name)
        self.lines.append("")
        if comment:
            self.lines.append("# " + comment)
        self.lines.append("[%s]" % name)
        for kv in keys:
            if len(kv) == 3:
                self.lines.append("%s = %s    # %s" % kv)
            else:
                self.lines.append("%s = %s" % kv)
        self.last = name
        return name

    def text(self):
        return "\n".join(self.lines) + "\n"


# --------------------------------------------------------------------------
# ResNet-18, CIFAR-10 variant of nntrainer's Applications/Resnet
# --------------------------------------------------------------------------

def resnet18():
    ini = Ini([
        "resnet18.ini - ResNet-18 for 32x32 RGB images, 10 classes.",
        "",
        "Same network as nntrainer's Applications/Resnet/res/resnet18.ini:",
        "  - every conv is 3x3 with a bias, except the 1x1 classifier;",
        "  - stages 2-4 start with a stride-2 block whose shortcut is a 3x3",
        "    stride-2 conv (named B<stage>_original_reshaped);",
        "  - batch normalization + relu is applied AFTER each residual",
        "    addition (not before, as in the paper); the last addition has",
        "    none;",
        "  - the head concatenates a 4x4 max pool and a 4x4 average pool of",
        "    the final 512x4x4 map (1024 channels) and classifies with a 1x1",
        "    conv of 10 filters.",
        "A tensor read by two layers goes through a legacy `Type = output`",
        "(fan-out) layer, as in the original.",
        "Trainable parameters: 12,557,322 (+ 6,784 running statistics);",
        "the paper's ResNet-18 with 1x1 shortcuts and a 512->10 linear",
        "head would have 11,173,962.",
    ])
    ini.section("Model", [
        ("Type", "NeuralNetwork"),
        ("Epochs", "2"),
        ("Loss", "cross", "softmax cross-entropy"),
        ("Save_Path", '"resnet18.bin"'),
        ("batch_size", "32"),
    ])
    ini.section("Optimizer", [
        ("Type", "adam"),
        ("Learning_rate", "1e-3"),
        ("beta1", "0.9"),
        ("beta2", "0.999"),
        ("epsilon", "1e-7"),
    ])
    ini.section("LearningRateScheduler", [
        ("Type", "cosine"),
        ("max_learning_rate", "1e-3"),
        ("min_learning_rate", "1e-5"),
        ("decay_steps", "3750", "2 epochs of 60,000 samples at batch 32"),
    ], comment="Cosine decay over the 2 epochs (a constant 1e-3 reached "
       "89.94% test accuracy).")

    def conv(name, src, filters, stride, kernel=3, pad=1, comment=None):
        return ini.section(name, [
            ("Type", "conv2d"),
            ("input_layers", src),
            ("kernel_size", "%d,%d" % (kernel, kernel)),
            ("filters", str(filters)),
            ("stride", "%d,%d" % (stride, stride)),
            ("padding", "%d,%d" % (pad, pad)),
            ("weight_initializer", "xavier_uniform"),
            ("bias_initializer", "zeros"),
        ], comment)

    def bn_relu(name, src, comment=None):
        return ini.section(name, [
            ("Type", "batch_normalization"),
            ("input_layers", src),
            ("epsilon", "1.0e-6"),
            ("momentum", "0.9", "running = 0.9 * running + 0.1 * batch"),
            ("Activation", "relu"),
            ("gamma_initializer", "ones"),
            ("beta_initializer", "zeros"),
            ("moving_mean_initializer", "zeros"),
            ("moving_variance_initializer", "ones"),
        ], comment)

    n_fanout = [0]

    def fanout(src):
        name = "out%d" % n_fanout[0]
        n_fanout[0] += 1
        return ini.section(name, [("Type", "output"), ("input_layers", src)],
                           "fan-out: %s feeds two layers" % src)

    ini.section("inputlayer", [("Type", "input"), ("Input_Shape", "3:32:32")])
    ini.comment("Stem: 3x3 conv, 64 filters, then batch norm + relu.")
    x = conv("stem_conv", "inputlayer", 64, 1)
    x = bn_relu("stem_bn", x)
    x = fanout(x)

    channels = [64, 128, 256, 512]
    for s, c in enumerate(channels, start=1):
        for b in (1, 2):
            down = s > 1 and b == 1
            ini.comment("Stage %d, block %d: %d channels%s." %
                        (s, b, c, ", stride 2" if down else ""))
            p = "B%d_%d_" % (s, b)
            y = conv(p + "conv_a", x, c, 2 if down else 1)
            y = bn_relu(p + "bn_a", y)
            y = conv(p + "conv_b", y, c, 1)
            if down:
                sc = conv("B%d_original_reshaped" % s, x, c, 2,
                          comment="shortcut: 3x3 stride-2 conv")
            else:
                sc = x
            y = ini.section(p + "add", [("Type", "addition"),
                                        ("input_layers", "%s, %s" % (y, sc))])
            last = s == len(channels) and b == 2
            if not last:
                y = bn_relu(p + "bn_out", y,
                            "nntrainer's variant: batch norm after the add")
            x = fanout(y)

    ini.comment("Head: max and average pooling of the 512x4x4 map,",
                "concatenated to 1024x1x1, 1x1 conv classifier, softmax.")
    mp = ini.section("max_pool", [
        ("Type", "pooling2d"), ("input_layers", x), ("pooling", "max"),
        ("pool_size", "4,4"), ("stride", "4,4"), ("padding", "0,0")])
    ap = ini.section("avg_pool", [
        ("Type", "pooling2d"), ("input_layers", x), ("pooling", "average"),
        ("pool_size", "4,4"), ("stride", "4,4"), ("padding", "0,0")])
    ini.section("pool_concat", [("Type", "concat"),
                                ("input_layers", "%s, %s" % (mp, ap)),
                                ("axis", "1", "channels")])
    conv("classifier", "pool_concat", 10, 1, kernel=1, pad=0)
    ini.section("flatten", [("Type", "flatten"),
                            ("input_layers", "classifier")])
    ini.section("softmax", [("Type", "Activation"), ("Activation", "softmax")],
                "input_layers omitted: the previous section (flatten)")
    return ini.text()


# --------------------------------------------------------------------------
# MobileNetV2 (torchvision.models.mobilenet_v2, width 1.0)
# --------------------------------------------------------------------------

# (expansion t, output channels c, repeats n, first stride s)
MBV2_SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def mobilenetv2(size, classes, cifar):
    if cifar:
        desc = [
            "mobilenetv2_32.ini - MobileNetV2 for 32x32 RGB images, %d "
            "classes." % classes,
            "",
            "torchvision's mobilenet_v2 (width 1.0) adapted to CIFAR-size",
            "input: the first conv and the first 24-channel block use",
            "stride 1 instead of 2 (final feature map 4x4). Everything else",
            "as in mobilenetv2.ini.",
        ]
        settings = [(t, c, n, 1 if c == 24 else s)
                    for t, c, n, s in MBV2_SETTINGS]
        stem_stride = 1
    else:
        desc = [
            "mobilenetv2.ini - MobileNetV2, %dx%d RGB input, %d classes."
            % (size, size, classes),
            "",
            "Layer for layer torchvision.models.mobilenet_v2 (width 1.0):",
            "3x3 stride-2 stem conv, 17 inverted residual blocks, 1x1 conv to",
            "1280 channels, global average pooling, dropout 0.2, linear.",
            "Trainable parameters: 3,504,872 (torchvision: 3,504,872).",
        ]
        settings = MBV2_SETTINGS
        stem_stride = 2
    ini = Ini(desc + [
        "",
        "Every conv except the classifier has no bias (disable_bias) and is",
        "followed by batch normalization (eps 1e-5, momentum 0.9 = torch's",
        "momentum 0.1). Inverted residual block (expansion t, stride s):",
        "  1x1 expand conv + BN + relu6   (absent when t = 1)",
        "  3x3 depthwise conv (groups = channels, padding 1, stride s)",
        "    + BN + relu6",
        "  1x1 project conv + BN          (linear: no activation)",
        "  + addition with the block input when s = 1 and in == out",
        "    channels (the input then fans out through a multiout layer).",
        "Conv weights: he_normal (torchvision uses kaiming normal, fan_out).",
    ])
    ini.section("Model", [
        ("Type", "NeuralNetwork"),
        ("Epochs", "2"),
        ("Loss", "cross"),
        ("Save_Path", '"%s.bin"' % ("mobilenetv2_32" if cifar
                                      else "mobilenetv2")),
        ("batch_size", "32"),
    ])
    ini.section("Optimizer", [
        ("Type", "adam"),
        ("Learning_rate", "1e-3"),
        ("beta1", "0.9"),
        ("beta2", "0.999"),
        ("epsilon", "1e-7"),
    ])

    def conv(name, src, filters, kernel, stride, pad, groups=1):
        keys = [("Type", "conv2d"), ("input_layers", src),
                ("filters", str(filters)),
                ("kernel_size", "%d,%d" % (kernel, kernel)),
                ("stride", "%d,%d" % (stride, stride)),
                ("padding", "%d,%d" % (pad, pad))]
        if groups > 1:
            keys.append(("groups", str(groups), "depthwise"))
        keys += [("disable_bias", "true"),
                 ("weight_initializer", "he_normal")]
        return ini.section(name, keys)

    def bn(name, src, act):
        keys = [("Type", "batch_normalization"), ("input_layers", src),
                ("epsilon", "1e-5"), ("momentum", "0.9")]
        if act:
            keys.append(("Activation", act))
        keys += [("gamma_initializer", "ones"), ("beta_initializer", "zeros"),
                 ("moving_mean_initializer", "zeros"),
                 ("moving_variance_initializer", "ones")]
        return ini.section(name, keys)

    ini.section("input", [("Type", "input"),
                          ("Input_Shape", "3:%d:%d" % (size, size))])
    ini.comment("features.0: stem")
    x = conv("stem_conv", "input", 32, 3, stem_stride, 1)
    x = bn("stem_bn", x, "relu6")

    cin = 32
    blk = 0
    for t, c, n, s in settings:
        for i in range(n):
            blk += 1
            stride = s if i == 0 else 1
            residual = stride == 1 and cin == c
            hidden = cin * t
            ini.comment("features.%d: inverted residual t=%d, %d -> %d, "
                        "stride %d%s" % (blk, t, cin, c, stride,
                                          ", residual" if residual else ""))
            p = "block%d_" % blk
            if residual:
                x = ini.section(p + "in", [("Type", "multiout"),
                                           ("input_layers", x)],
                                "block input: feeds the expand conv and "
                                "the addition")
            block_in = x
            y = x
            if t != 1:
                y = conv(p + "expand", y, hidden, 1, 1, 0)
                y = bn(p + "expand_bn", y, "relu6")
            y = conv(p + "dw", y, hidden, 3, stride, 1, groups=hidden)
            y = bn(p + "dw_bn", y, "relu6")
            y = conv(p + "project", y, c, 1, 1, 0)
            y = bn(p + "project_bn", y, None)
            if residual:
                y = ini.section(p + "add", [
                    ("Type", "addition"),
                    ("input_layers", "%s, %s" % (y, block_in))])
            x = y
            cin = c

    ini.comment("features.18: 1x1 conv to 1280 channels")
    x = conv("last_conv", x, 1280, 1, 1, 0)
    x = bn("last_bn", x, "relu6")
    ini.comment("classifier")
    ini.section("pool", [("Type", "pooling2d"), ("input_layers", x),
                         ("pooling", "global_average")])
    ini.section("flatten", [("Type", "flatten")])
    ini.section("dropout", [("Type", "dropout"), ("dropout_rate", "0.2")])
    ini.section("fc", [("Type", "fully_connected"), ("unit", str(classes)),
                       ("weight_initializer", "xavier_uniform"),
                       ("bias_initializer", "zeros")])
    ini.section("softmax", [("Type", "Activation"), ("Activation", "softmax")])
    return ini.text()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(root, "res"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    files = {
        "resnet18.ini": resnet18(),
        "mobilenetv2.ini": mobilenetv2(224, 1000, cifar=False),
        "mobilenetv2_32.ini": mobilenetv2(32, 10, cifar=True),
    }
    for name, text in files.items():
        path = os.path.join(args.out_dir, name)
        with open(path, "w") as f:
            f.write(text)
        print("wrote", path, "(%d sections)" % text.count("\n["))
    return 0


if __name__ == "__main__":
    sys.exit(main())
