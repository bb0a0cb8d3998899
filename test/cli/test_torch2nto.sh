#!/bin/sh
# PyTorch models into nntrainer-offload (tools/torch2nto.py), checked against
# torchvision itself: for resnet18 (res/resnet18_224.ini) and mobilenet_v2
# (res/mobilenetv2.ini), the golden test/data/goldens/torchvision_<model>.json
# (tools/make_torch_goldens.py) holds the probabilities torchvision computes
# for test/data/torchvision/img0.png and img1.png with weights that
# tools/torch_random_weights.py regenerates here from the golden's names,
# shapes and seed (no torch needed). Checked:
# - torch-named safetensors -> torch2nto -> `predict --json`: every one of
#   the 1000 probabilities of both images within 1e-4 of the golden, and
#   within 1e-3 of it relatively (so that the small ones count too);
# - torch2nto's errors: the other model's state_dict (the message names both
#   tensors), a conv bias the INI does not have, a truncated file, a torch
#   file without torch (when python3 lacks it); nothing written on failure;
# - with Debian's /usr/bin/python3 and torchvision: torchvision loads the
#   regenerated state_dict (strict), and converting its torch.save .pth
#   gives the same tensors as the safetensors route.
# Skipped (exit 77) without python3.
# usage: test_torch2nto.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
if ! command -v python3 >/dev/null 2>&1; then
  echo "torch2nto: no python3: skipped"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in tools/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
img0=test/data/torchvision/img0.png img1=test/data/torchvision/img1.png
torch_py=
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null && torch_py=/usr/bin/python3

expect() { # expect NAME STATUS PATTERN -- command...
  name=$1 want=$2 pat=$3
  shift 4
  "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ] || { [ -n "$pat" ] && ! grep -q -- "$pat" "$tmp/out"; }; then
    echo "FAIL $name: status $got (want $want), output:"
    sed 's/^/  /' "$tmp/out"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

# compare GOLDEN.json PREDICT.json: every probability, in image order
compare() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
golden, ours = (json.load(open(p)) for p in sys.argv[1:3])
names = [i["input"] for i in golden["inputs"]]
if [i["input"] for i in ours["inputs"]] != names:
    sys.exit("inputs differ: %s, golden %s" % (
        [i["input"] for i in ours["inputs"]], names))
worst_abs = worst_rel = 0.0
bad = []
for g, o in zip(golden["inputs"], ours["inputs"]):
    if len(o["probabilities"]) != len(g["probabilities"]):
        sys.exit("%s: %d probabilities, golden %d" % (
            g["input"], len(o["probabilities"]), len(g["probabilities"])))
    for c, (want, got) in enumerate(zip(g["probabilities"],
                                        o["probabilities"])):
        d = abs(got - want)
        worst_abs, worst_rel = max(worst_abs, d), max(worst_rel, d / want)
        if d > 1e-4 or d > 1e-3 * want:
            bad.append("%s class %d: %.9g, golden %.9g" % (g["input"], c,
                                                           got, want))
print("max |difference| %.3g (relative %.3g)" % (worst_abs, worst_rel))
if bad:
    sys.exit("%d probabilities differ, e.g.\n  %s" % (len(bad),
                                                    "\n  ".join(bad[:5])))
EOF
}

for pair in resnet18:res/resnet18_224.ini mobilenet_v2:res/mobilenetv2.ini; do
  model=${pair%%:*} ini=${pair#*:}
  golden=test/data/goldens/torchvision_$model.json
  expect "${model}_weights" 0 "" -- python3 tools/torch_random_weights.py \
    "$golden" "$tmp/${model}_torch.safetensors"
  expect "${model}_convert" 0 "num_batches_tracked dropped" -- python3 \
    tools/torch2nto.py "$ini" "$tmp/${model}_torch.safetensors" \
    "$tmp/$model.safetensors"
  expect "${model}_predict" 0 "img1.png: " -- "$exe" predict "$ini" \
    --weights "$tmp/$model.safetensors" "$img0" "$img1" --top 5 \
    --json "$tmp/$model.json"
  expect "${model}_golden" 0 "max |difference|" -- compare "$golden" \
    "$tmp/$model.json"
  echo "torch2nto: $model: $(grep "max |difference|" "$tmp/out")"
done

# the other model's state_dict: both tensors named; nothing written
expect other_model 2 \
  "stem_conv.weight \[32, 3, 3, 3\] does not match conv1.weight \[64, 3, 7, 7\]" \
  -- python3 tools/torch2nto.py res/mobilenetv2.ini \
  "$tmp/resnet18_torch.safetensors" "$tmp/bad.safetensors"
expect other_model_reverse 2 \
  "conv1.weight \[64, 3, 7, 7\] does not match features.0.0.weight \[32, 3, 3, 3\]" \
  -- python3 tools/torch2nto.py res/resnet18_224.ini \
  "$tmp/mobilenet_v2_torch.safetensors" "$tmp/bad.safetensors"
sed '0,/disable_bias = true/s//disable_bias = false/' res/resnet18_224.ini \
  >"$tmp/bias.ini"
expect conv_bias 2 "conv1.bias \[64\]: module .conv1. has no conv1.bias" -- python3 \
  tools/torch2nto.py "$tmp/bias.ini" "$tmp/resnet18_torch.safetensors" \
  "$tmp/bad.safetensors"
head -c 100000 "$tmp/resnet18_torch.safetensors" >"$tmp/truncated.safetensors"
expect truncated 1 "corrupt or truncated" -- python3 tools/torch2nto.py \
  res/resnet18_224.ini "$tmp/truncated.safetensors" "$tmp/bad.safetensors"
if ! python3 -c 'import torch' 2>/dev/null; then
  expect no_torch 1 "needs PyTorch" -- python3 tools/torch2nto.py \
    res/resnet18_224.ini "$img0" "$tmp/bad.safetensors"
fi
if [ -e "$tmp/bad.safetensors" ]; then
  echo "FAIL no_output: a failed conversion wrote its output"
  fails=$((fails + 1))
fi

# torch.save's .pth gives the same file as the safetensors route
if [ -n "$torch_py" ]; then
  for pair in resnet18:res/resnet18_224.ini mobilenet_v2:res/mobilenetv2.ini; do
    model=${pair%%:*} ini=${pair#*:}
    expect "${model}_pth" 0 "" -- "$torch_py" - "$model" \
      "$tmp/${model}_torch.safetensors" "$tmp/$model.pth" <<'EOF'
import sys, torch, torchvision
sys.path.insert(0, "tools")
import torch2nto
name, source, dest = sys.argv[1:4]
state = {}
for tname, dtype, shape, values in torch2nto.read_safetensors(source):
    state[tname] = torch.tensor(0) if values is None else torch.frombuffer(
        bytearray(values.tobytes()), dtype=torch.float32).reshape(shape)
model = getattr(torchvision.models, name)(weights=None)
model.load_state_dict(state, strict=True)
torch.save(model.state_dict(), dest)
EOF
    expect "${model}_pth_convert" 0 "num_batches_tracked dropped" -- \
      "$torch_py" tools/torch2nto.py "$ini" "$tmp/$model.pth" \
      "$tmp/${model}_pth.safetensors"
    expect "${model}_pth_same" 0 "same" -- python3 - "$tmp/$model.safetensors" \
      "$tmp/${model}_pth.safetensors" <<'EOF'
import json, struct, sys
def parts(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"].pop("source")
    return header, data[8 + n:]
a, b = parts(sys.argv[1]), parts(sys.argv[2])
if a != b:
    sys.exit("the files differ (beyond the source name)")
print("same")
EOF
  done
else
  echo "torch2nto: /usr/bin/python3 without torch and torchvision: .pth route skipped"
fi

echo "torch2nto: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
