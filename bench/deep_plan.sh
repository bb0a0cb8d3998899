#!/bin/sh
# Planning time against depth: a chain of residual blocks (multiout,
# conv2d, batch_normalization + relu, addition: 4 layers) repeated to 500,
# 1000 and 2000 layers, 8 channels at 8x8, batch 2; for each, the user CPU
# time of `summary` (plans windows 1, 2, 4, 8 and all resident) and of a
# 1-iteration `train --window 1` (plan, the tuner's turn, one iteration),
# from /usr/bin/time (user seconds: the planner is single-threaded, and
# user time is steadier than wall time on a shared machine).
# usage: sh bench/deep_plan.sh [PATH/TO/nntrainer-offload]
set -eu
exe=${1:-build/app/nntrainer-offload}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
deep_ini() { # deep_ini LAYERS FILE
  awk -v n="$1" 'BEGIN {
    print "[Model]\nType = NeuralNetwork\nLoss = cross\nbatch_size = 2\n"
    print "[Optimizer]\nType = adam\n\n[input]\nType = input\nInput_Shape = 3:8:8\n"
    print "[stem]\nType = conv2d\ninput_layers = input\nfilters = 8\nkernel_size = 3,3\npadding = 1,1\n"
    prev = "stem"
    for (i = 0; 4 * i + 7 < n; i++) {
      printf "[f%d]\nType = multiout\ninput_layers = %s\n\n", i, prev
      printf "[c%d]\nType = conv2d\ninput_layers = f%d\nfilters = 8\nkernel_size = 3,3\npadding = 1,1\n\n", i, i
      printf "[b%d]\nType = batch_normalization\ninput_layers = c%d\nActivation = relu\n\n", i, i
      printf "[a%d]\nType = addition\ninput_layers = b%d, f%d\n\n", i, i, i
      prev = "a" i
    }
    printf "[gap]\nType = pooling2d\npooling = global_average\ninput_layers = %s\n\n", prev
    print "[flat]\nType = flatten\n\n[fc]\nType = fully_connected\nunit = 10\nActivation = softmax"
  }' >"$2"
}
printf '%8s %8s %14s %22s\n' layers graph "summary user s" "train --window 1 user s"
for n in ${NTO_DEPTHS:-500 1000 2000}; do
  deep_ini "$n" "$tmp/deep.ini"
  layers=$("$exe" summary "$tmp/deep.ini" | sed -n 's/^model .*, batch.*//; s/.*: \([0-9]*\) layers.*/\1/p' | head -1)
  s=$( { /usr/bin/time -f %U "$exe" summary "$tmp/deep.ini" >/dev/null; } 2>&1 | tail -1)
  t=$( { /usr/bin/time -f %U "$exe" train "$tmp/deep.ini" --data synthetic --iterations 1 \
    --eval-samples 0 --window 1 --swap-dir "${TMPDIR:-/tmp}" >/dev/null; } 2>&1 | tail -1)
  printf '%8s %8s %14s %22s\n' "$n" "${layers:-?}" "$s" "$t"
done
