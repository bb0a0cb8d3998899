#!/bin/sh
# Checkpoints and interruption (train --checkpoint/--checkpoint-every/--resume,
# SIGINT/SIGTERM, kill -9):
# - checkpointing does not change the result;
# - a run stopped by SIGTERM (SIGINT) after a few iterations exits 143 (130),
#   leaves no swap file, and resumed to the same total ends with weights
#   byte-identical to an uninterrupted run's (also resumed with another
#   window);
# - kill -9: no swap file left (O_TMPFILE), the last checkpoint is intact
#   and resuming from it gives the same weights;
# - a checkpoint of another model is refused with exit 2, a corrupt or
#   truncated one with exit 1, naming the byte offset;
# - a failed run leaves the last checkpoint intact and no swap file behind;
#   no temp or lock file is left next to a checkpoint; an unwritable
#   --checkpoint is refused at the start (exit 2).
# usage: test_checkpoint.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

. "$(dirname "$0")/lib.sh"

same() { # same NAME FILE1 FILE2
  if cmp -s "$2" "$3"; then ok; else fail "$1: $2 and $3 differ"; fi
}

# leftover DIR NAME: no temp file (NAME.tmp, NAME.tmp.<pid>) or lock file
# (NAME.lock) of checkpoint NAME is left in DIR.
leftover() {
  for f in "$1/$2".tmp* "$1/$2.lock"; do
    if [ -e "$f" ]; then fail "left next to $2: $f"; else ok; fi
  done
}

empty_dir() { # empty_dir NAME DIR: no file left (swap files are unnamed)
  if [ -z "$(ls -A "$2")" ]; then ok; else
    fail "$1: left in $2: $(ls -A "$2" | tr '\n' ' ')"
  fi
}

# A model slow enough (tens of ms per iteration) for a signal to land in
# the middle of the run.
cat >"$tmp/slow.ini" <<'EOF'
[Model]
Type = NeuralNetwork
Loss = cross
batch_size = 8
Epochs = 100

[Optimizer]
Type = adam
Learning_rate = 0.001

[input]
Type = input
Input_Shape = 3:32:32

[conv1]
Type = conv2d
filters = 16
kernel_size = 3,3
padding = 1,1
Activation = relu

[conv2]
Type = conv2d
filters = 32
kernel_size = 3,3
padding = 1,1

[bn2]
Type = batch_normalization
Activation = relu

[pool]
Type = pooling2d
pooling = max
pool_size = 2,2
stride = 2,2

[conv3]
Type = conv2d
filters = 32
kernel_size = 3,3
padding = 1,1
Activation = relu

[gap]
Type = pooling2d
pooling = global_average

[flatten]
Type = flatten

[fc]
Type = fully_connected
unit = 10
Activation = softmax
EOF
sed 's/filters = 32/filters = 24/' "$tmp/slow.ini" >"$tmp/other.ini"

# 100 samples: 12 iterations per epoch, so the runs cross epoch ends
# (shuffled, evaluated) and the data position matters.
common="--data synthetic --train-samples 100 --eval-samples 16 --threads 1 --shuffle-buffer 32 --seed 3"
N=30

# Where $tmp's filesystem refuses O_DIRECT (tmpfs on older kernels), swap
# through the page cache: these checks are about checkpoints, not O_DIRECT.
mkdir "$tmp/probe"
direct=
"$exe" train "$tmp/slow.ini" $common --iterations 1 --window 1 \
  --swap-dir "$tmp/probe" >"$tmp/probe.log" 2>&1 ||
  { grep -q "O_DIRECT" "$tmp/probe.log" && direct=--no-direct; }

expect reference 0 "saved weights" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations $N --save "$tmp/ref.bin"

# Checkpointing does not change the result; the report says what was written.
expect short_ref 0 "saved weights" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations 6 --save "$tmp/short_ref.bin"
expect checkpointed 0 "checkpoint .*3 written" -- "$exe" train "$tmp/slow.ini" \
  $common --iterations 6 --checkpoint "$tmp/short.ckpt" --checkpoint-every 2 \
  --save "$tmp/short.bin"
same checkpointed_weights "$tmp/short_ref.bin" "$tmp/short.bin"
leftover "$tmp" short.ckpt
expect nothing_left 0 "nothing left to train" -- "$exe" train "$tmp/slow.ini" \
  $common --iterations 6 --resume "$tmp/short.ckpt" --save "$tmp/short2.bin"
same nothing_left_weights "$tmp/short_ref.bin" "$tmp/short2.bin"
expect continued 0 "resumed from" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations $N --resume "$tmp/short.ckpt" --save "$tmp/cont.bin"
same continued_weights "$tmp/ref.bin" "$tmp/cont.bin"

# Optimizer state stored as int8 (--optimizer-state): checkpointed, and
# resumed offloaded, it ends with the weights of an uninterrupted int8 run;
# a checkpoint of int8 state is refused for fp32 state (and the reverse).
expect int8_ref 0 "saved weights" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations 14 --optimizer-state int8 --save "$tmp/int8_ref.bin"
expect int8_checkpointed 0 "checkpoint .* written" -- "$exe" train \
  "$tmp/slow.ini" $common --iterations 5 --optimizer-state int8 \
  --checkpoint "$tmp/int8.ckpt" --save "$tmp/int8_short.bin"
mkdir "$tmp/swap_int8"
expect int8_resumed 0 "resumed from" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations 14 --optimizer-state int8 --resume "$tmp/int8.ckpt" \
  --window 1 --swap-dir "$tmp/swap_int8" $direct --save "$tmp/int8_res.bin"
same int8_resumed_weights "$tmp/int8_ref.bin" "$tmp/int8_res.bin"
if cmp -s "$tmp/int8_ref.bin" "$tmp/ref.bin"; then
  fail "int8 state: the weights of fp32 state"
fi
expect int8_state_refused 2 "different optimizer.*adam/int8 in the file, adam here" \
  -- "$exe" train "$tmp/slow.ini" $common --iterations 14 \
  --resume "$tmp/int8.ckpt"
expect fp32_state_refused 2 "different optimizer.*adam in the file, adam/bf16 here" \
  -- "$exe" train "$tmp/slow.ini" $common --iterations $N \
  --optimizer-state bf16 --resume "$tmp/short.ckpt"

# Real IDX data (gzip streams are read through to the position), when
# Debian's dataset-fashion-mnist is installed.
fm=/usr/share/datasets/fashion-mnist
if [ -e "$fm/train-images-idx3-ubyte.gz" ] || [ -e "$fm/train-images-idx3-ubyte" ]; then
  fmc="--data $fm --train-samples 100 --eval-samples 16 --batch-size 8 --epochs 3 --threads 1 --shuffle-buffer 32"
  expect fmnist_ref 0 "saved weights" -- "$exe" train test/data/nets/fmnist_small.ini \
    $fmc --iterations 30 --save "$tmp/fm_ref.bin"
  expect fmnist_part 0 "checkpoint .*1 written" -- "$exe" train \
    test/data/nets/fmnist_small.ini $fmc --iterations 17 --checkpoint "$tmp/fm.ckpt" \
    --checkpoint-every 100
  expect fmnist_resume 0 "resumed from .* at iteration 17 (epoch 2, iteration 5" -- \
    "$exe" train test/data/nets/fmnist_small.ini $fmc --iterations 30 \
    --resume "$tmp/fm.ckpt" --save "$tmp/fm.bin"
  same fmnist_weights "$tmp/fm_ref.bin" "$tmp/fm.bin"
else
  echo "note: $fm not installed: the IDX resume check is skipped"
fi

# Start a checkpointing run in the background (offloading, window 1, swap
# file in $2); wait for its first checkpoint $1. Sets pid.
start_run() { # start_run CKPT SWAPDIR LOG
  rm -f "$1"
  mkdir -p "$2"
  "$exe" train "$tmp/slow.ini" $common --iterations $N --checkpoint "$1" \
    --checkpoint-every 2 --window 1 --swap-dir "$2" $direct >"$3" 2>&1 &
  pid=$!
  i=0
  while [ ! -e "$1" ] && [ $i -lt 1200 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.05
    i=$((i + 1))
  done
}

# stopped NAME SIGNAL STATUS: stop a run with SIGNAL after its first
# checkpoint; it must exit STATUS, leave no swap file, and resume to the
# uninterrupted result (with another window: all resident).
stopped() {
  sname=$1 sig=$2 swant=$3
  start_run "$tmp/$sname.ckpt" "$tmp/swap_$sname" "$tmp/$sname.log"
  kill -$sig $pid 2>/dev/null
  wait $pid 2>/dev/null
  got=$?
  if [ $got -ne $swant ]; then
    fail "$sname: status $got (want $swant: did the run end before the signal?)"
    sed 's/^/  /' "$tmp/$sname.log"
    return
  fi
  ok
  grep -q "interrupted by SIG$sig after iteration .*continue with --resume" \
    "$tmp/$sname.log" && ok ||
    { fail "$sname: message missing"; sed 's/^/  /' "$tmp/$sname.log"; }
  it=$(sed -n 's/.*interrupted by SIG[A-Z]* after iteration \([0-9]*\).*/\1/p' \
    "$tmp/$sname.log")
  [ -n "$it" ] && [ "$it" -lt $N ] && ok ||
    fail "$sname: stopped at iteration '$it', expected fewer than $N"
  empty_dir "$sname: swap dir" "$tmp/swap_$sname"
  leftover "$tmp" "$sname.ckpt"
  expect "${sname}_resume" 0 "resumed from .* at iteration $it " -- "$exe" train \
    "$tmp/slow.ini" $common --iterations $N --resume "$tmp/$sname.ckpt" \
    --checkpoint "$tmp/$sname.ckpt" --save "$tmp/$sname.bin"
  same "${sname}_weights" "$tmp/ref.bin" "$tmp/$sname.bin"
}

stopped term TERM 143
stopped int INT 130

# kill -9: nothing can run, the unnamed swap file disappears with the
# process; the last complete checkpoint is intact and resumes.
start_run "$tmp/k9.ckpt" "$tmp/swap_k9" "$tmp/k9.log"
sleep 0.2
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
got=$?
[ $got -eq 137 ] && ok || fail "kill9: status $got (want 137)"
empty_dir "kill9: swap dir" "$tmp/swap_k9"
expect kill9_resume 0 "resumed from" -- "$exe" train "$tmp/slow.ini" $common \
  --iterations $N --resume "$tmp/k9.ckpt" --window 2 --swap-dir "$tmp/swap_k9" \
  $direct --save "$tmp/k9.bin"
same kill9_weights "$tmp/ref.bin" "$tmp/k9.bin"
empty_dir "kill9: swap dir after resume" "$tmp/swap_k9"

# Refused checkpoints: another model (exit 2), corrupt or truncated (exit 1).
expect other_model 2 "checkpoint .*short.ckpt was written for a different model.*: tensor conv2:weight has shape 24:16:3:3 here, 32:16:3:3 in the file" \
  -- "$exe" train "$tmp/other.ini" $common --iterations $N --resume "$tmp/short.ckpt"
expect other_batch 2 "batch size 8.*batch size 4" -- "$exe" train "$tmp/slow.ini" \
  $common --batch-size 4 --iterations $N --resume "$tmp/short.ckpt"
expect other_shuffle 2 "shuffle buffer of 32 samples" -- "$exe" train \
  "$tmp/slow.ini" $common --shuffle-buffer 16 --iterations $N \
  --resume "$tmp/short.ckpt"
size=$(wc -c <"$tmp/short.ckpt")
head -c $((size / 2)) "$tmp/short.ckpt" >"$tmp/cut.ckpt"
expect truncated 1 "cut.ckpt: truncated at byte offset $((size / 2))" -- "$exe" \
  train "$tmp/slow.ini" $common --iterations $N --resume "$tmp/cut.ckpt"
cp "$tmp/short.ckpt" "$tmp/flip.ckpt"
printf 'X' | dd of="$tmp/flip.ckpt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
expect corrupt 1 "flip.ckpt: byte offset [0-9]*: tensor .* fails its checksum" \
  -- "$exe" train "$tmp/slow.ini" $common --iterations $N --resume "$tmp/flip.ckpt"
expect not_a_checkpoint 1 "not a nntrainer-offload checkpoint" -- "$exe" train \
  "$tmp/slow.ini" $common --resume "$tmp/slow.ini"
expect missing 1 "cannot open" -- "$exe" train "$tmp/slow.ini" $common \
  --resume "$tmp/none.ckpt"
expect every_alone 2 "needs --checkpoint" -- "$exe" train "$tmp/slow.ini" \
  --checkpoint-every 2

# A failed run leaves the last checkpoint intact and no swap file behind.
cp "$tmp/short.ckpt" "$tmp/keep.ckpt"
cp "$tmp/short.ckpt" "$tmp/keep_orig.ckpt"
mkdir -p "$tmp/swap_fail"
expect failed_run 1 "cannot open" -- "$exe" train "$tmp/slow.ini" \
  --data "$tmp/nodata" --iterations $N --resume "$tmp/keep.ckpt" \
  --checkpoint "$tmp/keep.ckpt" --window 1 --swap-dir "$tmp/swap_fail" $direct
same failed_run_checkpoint "$tmp/keep.ckpt" "$tmp/keep_orig.ckpt"
empty_dir "failed_run: swap dir" "$tmp/swap_fail"
# ... also when it fails after some checkpoints: a NaN in the training data
# (raw file, file order) is met in iteration 6; the checkpoint of iteration
# 4 is intact and, resumed on the clean data, gives the clean run's weights.
mkdir -p "$tmp/raw"
{ cat "$tmp/slow.ini"; printf '\n[train_set]\ntype = file\npath = train.dat\n'; } \
  >"$tmp/raw/model.ini"
i=0
while [ $i -lt 64 ]; do
  head -c 12288 /dev/zero # 3x32x32 zero features
  j=0
  while [ $j -lt 10 ]; do # one-hot label of class i % 10 (1.0f little-endian)
    if [ $j -eq $((i % 10)) ]; then printf '\000\000\200\077'; else
      printf '\000\000\000\000'; fi
    j=$((j + 1))
  done
  i=$((i + 1))
done >"$tmp/raw/clean.dat"
cp "$tmp/raw/clean.dat" "$tmp/raw/train.dat"
printf '\377\377\377\177' | dd of="$tmp/raw/train.dat" bs=1 seek=$((40 * 12328 + 8)) \
  conv=notrunc 2>/dev/null
raw="--eval-samples 0 --threads 1 --shuffle-buffer 0"
expect nan_run 1 "NaN" -- "$exe" train "$tmp/raw/model.ini" $raw --iterations 8 \
  --checkpoint "$tmp/raw.ckpt" --checkpoint-every 2 --window 1 \
  --swap-dir "$tmp/swap_fail" $direct
empty_dir "nan_run: swap dir" "$tmp/swap_fail"
cp "$tmp/raw/clean.dat" "$tmp/raw/train.dat"
expect nan_clean 0 "saved weights" -- "$exe" train "$tmp/raw/model.ini" $raw \
  --iterations 5 --save "$tmp/raw_ref.bin"
expect nan_resume 0 "resumed from .* at iteration 4 " -- "$exe" train \
  "$tmp/raw/model.ini" $raw --iterations 5 --resume "$tmp/raw.ckpt" \
  --save "$tmp/raw_res.bin"
same nan_resume_weights "$tmp/raw_ref.bin" "$tmp/raw_res.bin"

# An unwritable --checkpoint is refused before training (exit 2).
expect unwritable 2 "--checkpoint: $tmp/nodir/x.ckpt: cannot create" -- \
  "$exe" train "$tmp/slow.ini" $common \
  --iterations 4 --checkpoint "$tmp/nodir/x.ckpt" --checkpoint-every 2 \
  --window 1 --swap-dir "$tmp/swap_fail" $direct
empty_dir "unwritable: swap dir" "$tmp/swap_fail"

echo "checkpoint: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
