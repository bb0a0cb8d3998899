#!/bin/sh
# Fine-tuning, the way a user does it (a CI-sized version of the run in
# docs/results.md): a small CNN (test/data/nets/finetune.ini) trained on
# Fashion-MNIST classes 0-4, saved; then --init-weights with a new 5-class
# head (the section renamed) on classes 5-9, the backbone frozen, within a
# memory budget. Checked:
# - the accuracy before fine-tuning is near chance (20%), after it clearly
#   above, and above the same run on a frozen backbone of random weights;
# - `evaluate` of the saved weights gives exactly train's last test line,
#   all resident and at window 1 (forward only, within a budget);
# - evaluate's errors: no --weights, weights of another model, --classes
#   of the wrong length.
# Skipped (exit 77) without Debian's dataset-fashion-mnist.
# usage: test_fine_tuning.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
fm=/usr/share/datasets/fashion-mnist
if [ ! -f "$fm/train-labels-idx1-ubyte.gz" ]; then
  echo "fine_tuning: $fm not installed: skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
net=test/data/nets/finetune.ini
sed 's/^\[head\]$/[head_new]/' "$net" >"$tmp/new_head.ini"
common="--train-samples 300 --epochs 3 --eval-samples 500"

. "$(dirname "$0")/lib.sh"

# percent LABEL FILE: the accuracy on the line starting with LABEL, as an
# integer (72.80% -> 72)
percent() {
  grep "^$1" "$2" | tail -1 | sed 's/.*accuracy \([0-9]*\)\..*/\1/'
}

expect pretrain 0 "classes 0,1,2,3,4 as 0-4" -- "$exe" train "$net" \
  --classes 0-4 --train-samples 600 --epochs 3 --eval-samples 500 \
  --save "$tmp/a.bin"
# the budget: 13.4 MiB beyond the process's own memory (24 MiB on x86-64)
own=$(own_kib "$tmp/new_head.ini" --classes 5-9 $common \
  --init-weights "$tmp/a.safetensors" --freeze-until flatten --window 1)
budget=$((own + 13722))K
expect fine_tune 0 "before training: test loss" -- "$exe" train \
  "$tmp/new_head.ini" --classes 5-9 $common --init-weights "$tmp/a.safetensors" \
  --freeze-until flatten --window 1 --memory-budget $budget --save "$tmp/b.bin"
cp "$tmp/out" "$tmp/fine_tune.out"
grep -q "kept their initialization: head_new.weight (not in the file)" \
  "$tmp/fine_tune.out" && grep -q "backward runs for 2 of 11 layers" \
  "$tmp/fine_tune.out" && passes=$((passes + 1)) ||
  { echo "FAIL fine_tune_setup: new head or frozen backbone not reported"; fails=$((fails + 1)); }
expect control 0 "test loss" -- "$exe" train "$tmp/new_head.ini" --classes 5-9 \
  $common --freeze-until flatten --save "$tmp/c.bin"
before=$(percent "before training" "$tmp/fine_tune.out")
after=$(percent "epoch 3" "$tmp/fine_tune.out")
control=$(percent "epoch 3" "$tmp/out")
if [ -n "$before" ] && [ -n "$after" ] && [ -n "$control" ] &&
  [ "$before" -lt 35 ] && [ "$after" -ge 60 ] && [ "$after" -ge $((control + 5)) ]; then
  passes=$((passes + 1))
else
  echo "FAIL fine_tune_accuracy: before $before%, after $after%, random backbone $control%"
  fails=$((fails + 1))
fi

# evaluate: train's last test line, all resident and forward only at window 1
last=$(grep "^epoch 3: test loss" "$tmp/fine_tune.out" | sed 's/epoch 3: test //; s/ (500 samples)//')
for w in all 1; do
  expect "evaluate_$w" 0 "^$last (" -- "$exe" evaluate "$tmp/new_head.ini" \
    --weights "$tmp/b.safetensors" --classes 5-9 --eval-samples 500 --window $w
done
grep -q "^    9 " "$tmp/out" && passes=$((passes + 1)) ||
  { echo "FAIL evaluate_labels: the confusion matrix does not name class 9"; fails=$((fails + 1)); }
expect evaluate_bin 0 "^$last (" -- "$exe" evaluate "$tmp/new_head.ini" \
  --weights "$tmp/b.bin" --classes 5-9 --eval-samples 500 --memory-budget $budget \
  --report-json "$tmp/e.json"
grep -q '"classes": \[5, 6, 7, 8, 9\]' "$tmp/e.json" &&
  grep -q '"samples": 500' "$tmp/e.json" && passes=$((passes + 1)) ||
  { echo "FAIL evaluate_json:"; sed 's/^/  /' "$tmp/e.json"; fails=$((fails + 1)); }
expect evaluate_no_weights 2 "--weights FILE is required" -- "$exe" evaluate "$net"
expect evaluate_other_model 2 "missing or differ in shape: head.weight (not in the file)" \
  -- "$exe" evaluate "$net" --weights "$tmp/b.safetensors" --classes 5-9
expect classes_length 2 "--classes 5-8 lists 4 classes, but the output layer of .* has 5 values" \
  -- "$exe" evaluate "$tmp/new_head.ini" --weights "$tmp/b.bin" --classes 5-8
expect classes_syntax 2 "--classes 5-9x: unexpected 'x'" \
  -- "$exe" train "$net" --classes 5-9x
expect classes_none 2 "no sample of the listed classes" \
  -- "$exe" train "$net" --classes 10-14

echo "fine_tuning: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
