#!/bin/sh
# nntrainer's INI dialect, read as nntrainer reads it. Each INI of
# test/data/dialect/ is a small net in an older spelling that nntrainer
# still accepts ([Model] optimizer keys, [DataSet], old layer type names,
# keys not applied yet): `summary` and a 2-iteration `train` on synthetic
# data must succeed and print one warning line per deprecated key, naming
# the file, the section and the key and the current spelling.
# Then relative paths: an INI in a temporary directory, run from another
# working directory, saves its Save_Path, finds its [DataSet] data file and
# puts its swap file in its memory_swap_path, all beside the INI (as
# nntrainer resolves them); an absolute Save_Path stays as written.
# Then nntrainer's backbones (`backbone = base.ini`: prefixed names,
# frozen by default, weights from the backbone's own file through
# --init-weights), continue_train and save_best_path.
# (Refusals of wrong old spellings: test/data/bad/expect.txt.)
# usage: test_dialect.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(pwd)
dir=test/data/dialect
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

# run NAME -- command...: the command must exit 0; its output in $tmp/out.
run() {
  name=$1
  shift 2
  "$@" </dev/null >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne 0 ]; then
    echo "FAIL $name: status $got, want 0 ($*); output:"
    tail -n 20 "$tmp/out" | sed 's/^/  /'
    fails=$((fails + 1))
    return 1
  fi
  passes=$((passes + 1))
}

# has NAME TEXT: a line of $tmp/out contains TEXT (fixed string).
has() {
  if grep -qF -- "$2" "$tmp/out"; then
    passes=$((passes + 1))
  else
    echo "FAIL $1: output lacks '$2'; output:"
    tail -n 20 "$tmp/out" | sed 's/^/  /'
    fails=$((fails + 1))
  fi
}

# warnings NAME N: exactly N "warning: " lines in $tmp/out.
warnings() {
  n=$(grep -c '^warning: ' "$tmp/out")
  if [ "$n" -eq "$2" ]; then
    passes=$((passes + 1))
  else
    echo "FAIL $1: $n warning lines, want $2; output:"
    grep '^warning: ' "$tmp/out" | sed 's/^/  /'
    fails=$((fails + 1))
  fi
}

# dialect INI N LINE...: summary and train of $dir/INI succeed, each with
# N warning lines, among them "warning: $dir/INI: LINE" for each LINE.
dialect() {
  ini=$1 n=$2
  shift 2
  for cmd in summary train; do
    if [ $cmd = summary ]; then
      run "$ini/$cmd" -- "$exe" summary "$dir/$ini" || continue
    else
      run "$ini/$cmd" -- "$exe" train "$dir/$ini" --data synthetic \
        --iterations 2 --eval-samples 0 || continue
      has "$ini/$cmd" "epoch 1 iter 2/2"
    fi
    warnings "$ini/$cmd" "$n"
    for line in "$@"; do
      has "$ini/$cmd" "warning: $dir/$ini: $line"
    done
  done
}

dialect model_optimizer.ini 7 \
  "[model] key 'learning_rate': deprecated, read as [Optimizer] learning_rate" \
  "[model] key 'decay_rate': deprecated, read as [Optimizer] decay_rate" \
  "[model] key 'decay_steps': deprecated, read as [Optimizer] decay_steps" \
  "[model] key 'optimizer': deprecated, read as [Optimizer] type" \
  "[model] key 'beta1': deprecated, read as [Optimizer] beta1" \
  "[model] key 'beta2': deprecated, read as [Optimizer] beta2" \
  "[model] key 'epsilon': deprecated, read as [Optimizer] epsilon"
dialect dataset_section.ini 6 \
  "[model] key 'optimizer': deprecated, read as [Optimizer] type" \
  "[dataset] key 'buffersize': deprecated, read as buffer_size of [train_set]" \
  "[dataset] key 'traindata': deprecated, read as [train_set] type = file, path = train.dat" \
  "[dataset] key 'validdata': deprecated, read as [valid_set] type = file, path = train.dat" \
  "[dataset] key 'labeldata': ignored, as nntrainer ignores it"
dialect old_layer_types.ini 4 \
  "[inputlayer] key 'type': 'InputLayer' is deprecated, read as input" \
  "[fc1layer] key 'type': 'FullyConnectedLayer' is deprecated, read as fully_connected" \
  "[batchnormalization] key 'type': 'BatchNormalizationLayer' is deprecated, read as batch_normalization" \
  "[outputlayer] key 'type': 'OutputLayer' is deprecated, read as fully_connected"
dialect nntrainer_keys.ini 0

# Relative paths resolve beside the INI: it is in $tmp/model, the run in
# $tmp/other, the INI named ../model/NAME.
mkdir "$tmp/model" "$tmp/model/swap" "$tmp/other"
sed 's/^\[Model\]$/[Model]\nSave_Path = "w.bin"/' "$dir/model_optimizer.ini" \
  >"$tmp/model/save.ini"
cd "$tmp/other" || exit 1
run save_relative -- "$exe" train ../model/save.ini --data synthetic \
  --iterations 2 --eval-samples 0
if [ -f "$tmp/model/w.bin" ] && [ -f "$tmp/model/w.safetensors" ] &&
  [ ! -e "$tmp/other/w.bin" ]; then
  passes=$((passes + 1))
else
  echo "FAIL save_relative: w.bin not saved beside the INI:"
  find "$tmp/model" "$tmp/other" | sed 's/^/  /'
  fails=$((fails + 1))
fi
sed "s|^Save_Path = \"w.bin\"|Save_Path = \"$tmp/other/abs.bin\"|" \
  "$tmp/model/save.ini" >"$tmp/model/save_abs.ini"
run save_absolute -- "$exe" train ../model/save_abs.ini --data synthetic \
  --iterations 2 --eval-samples 0
if [ -f "$tmp/other/abs.bin" ]; then
  passes=$((passes + 1))
else
  echo "FAIL save_absolute: $tmp/other/abs.bin not saved"
  fails=$((fails + 1))
fi
sed 's/^\[Model\]$/[Model]\nmemory_swap = true\nmemory_swap_lookahead = 1\nmemory_swap_path = swap/' \
  "$root/$dir/model_optimizer.ini" >"$tmp/model/swap.ini"
run swap_relative -- "$exe" train ../model/swap.ini --data synthetic \
  --iterations 2 --eval-samples 0 && has swap_relative "in ../model/swap ("
# [DataSet] TrainData = "train.dat": 8 records of 16 zero features and a
# one-hot label of 3 classes (float32 1.0 little-endian: 00 00 80 3f)
i=0
while [ $i -lt 8 ]; do
  head -c 64 /dev/zero
  j=0
  while [ $j -lt 3 ]; do
    if [ $j -eq $((i % 3)) ]; then printf '\000\000\200\077'; else
      head -c 4 /dev/zero; fi
    j=$((j + 1))
  done
  i=$((i + 1))
done >"$tmp/model/train.dat"
cp "$root/$dir/dataset_section.ini" "$tmp/model/data.ini"
run data_relative -- "$exe" train ../model/data.ini --iterations 2 \
  --eval-samples 0 && has data_relative "data: train.dat (nntrainer raw): 8 samples, 1x4x4, 3 classes"

# Backbones. base.ini is a small classifier; main.ini takes its layers up
# to the flatten as a frozen backbone [base] and puts a new head on it.
cd "$root" || exit 1
mkdir "$tmp/bb"
cat >"$tmp/bb/base.ini" <<'INI'
[Model]
Type = NeuralNetwork
Epochs = 1
batch_size = 4
[Optimizer]
Type = adam
[in]
Type = input
Input_Shape = 1:8:8
[conv1]
Type = conv2d
filters = 3
kernel_size = 3,3
padding = same
activation = relu
[conv2]
Type = conv2d
filters = 4
kernel_size = 3,3
[flat]
Type = flatten
[fc]
Type = fully_connected
unit = 5
activation = softmax
INI
cat >"$tmp/bb/main.ini" <<'INI'
[Model]
Type = NeuralNetwork
Epochs = 1
batch_size = 4
[Optimizer]
Type = sgd
learning_rate = 0.1
[base]
backbone = base.ini
OutputLayer = flat
[head]
Type = fully_connected
input_layers = base
unit = 3
activation = softmax
INI
run backbone_summary -- "$exe" summary "$tmp/bb/main.ini" &&
  has backbone_summary "baseconv1 " && has backbone_summary "baseflat " &&
  has backbone_summary "head "
if grep -q "basefc" "$tmp/out"; then
  echo "FAIL backbone_slice: basefc was not sliced off (OutputLayer = flat)"
  fails=$((fails + 1))
fi
run backbone_base -- "$exe" train "$tmp/bb/base.ini" --data synthetic \
  --iterations 2 --eval-samples 0 --save "$tmp/bb/base.bin"
run backbone_init -- "$exe" train "$tmp/bb/main.ini" --data synthetic \
  --iterations 3 --eval-samples 0 --init-weights "$tmp/bb/base.safetensors" \
  --save "$tmp/bb/main.bin" &&
  has backbone_init "frozen: 2 layers with weights" &&
  has backbone_init "(4 of 6 tensors)" &&
  has backbone_init "2 tensors of the file unused"
# The frozen backbone's weights are the base's, byte for byte, after
# training (loaded under their names in base.ini); the head is new.
if python3 - "$tmp/bb/base.safetensors" "$tmp/bb/main.safetensors" <<'PY'; then
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
for w in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"):
    assert a[w] == b["base" + w], w
assert "head.weight" in b and "basefc.weight" not in b, sorted(b)
PY
  passes=$((passes + 1))
else
  echo "FAIL backbone_frozen: the backbone's weights are not the base's"
  fails=$((fails + 1))
fi

# continue_train: the second run starts from the weights the first saved
# at save_path (its accuracy before training is the first run's last);
# save_best_path holds the best epoch's weights (evaluate gives back its
# accuracy).
sed -e 's/^Epochs = 1$/Epochs = 3\nsave_path = last.bin\ncontinue_train = true\nsave_best_path = best.bin/' \
  -e 's/^Type = adam$/Type = sgd\nlearning_rate = 0.05/' \
  "$tmp/bb/base.ini" >"$tmp/bb/cont.ini"
run continue_first -- "$exe" train "$tmp/bb/cont.ini" --data synthetic \
  --train-samples 64 &&
  has continue_first "continue_train: $tmp/bb/last.bin does not exist yet" &&
  has continue_first "save_best_path: epoch 1 has the best accuracy so far"
acc() { sed -n "s/^$1: test loss [0-9.]* accuracy \([0-9.]*\)%.*/\1/p" "$2"; }
cp "$tmp/out" "$tmp/first.out"
last=$(acc "epoch 3" "$tmp/first.out")
best=$(for e in 1 2 3; do acc "epoch $e" "$tmp/first.out"; done | sort -n |
  tail -n 1)
# one save per epoch whose accuracy beat every earlier one
want=$(for e in 1 2 3; do acc "epoch $e" "$tmp/first.out"; done |
  awk 'NR == 1 || $1 > m { n++; m = $1 } END { print n }')
got=$(grep -c '^save_best_path: epoch' "$tmp/first.out")
if [ "$got" = "$want" ]; then passes=$((passes + 1)); else
  echo "FAIL save_best_count: $got saves, want $want (one per improvement)"
  fails=$((fails + 1))
fi
run best_eval -- "$exe" evaluate "$tmp/bb/cont.ini" --data synthetic \
  --weights "$tmp/bb/best.bin" --eval-samples 16 &&
  has best_eval "accuracy $best%"
run continue_second -- "$exe" train "$tmp/bb/cont.ini" --data synthetic \
  --train-samples 64 --epochs 1 &&
  has continue_second "continue_train: starting from the weights at $tmp/bb/last.bin" &&
  has continue_second "before training: test loss" &&
  has continue_second "accuracy $last% "

echo "dialect: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
