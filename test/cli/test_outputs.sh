#!/bin/sh
# Outputs of train (--save, INI Save_Path, --checkpoint, --report-json) and
# how a run ends:
# - an output that cannot be written (missing or read-only directory, a
#   directory as path) is refused at the start, exit 2, naming the option
#   and the path, before any iteration;
# - a device, FIFO or socket is never replaced (refused, exit 2, and still
#   there afterwards), a symbolic link is written through (it stays a link,
#   its target is updated), and an output that is an input or another
#   output is refused;
# - a --checkpoint is locked: a second run on it is refused with exit 2;
#   stale temp files of dead runs next to the outputs are removed, nothing
#   else;
# - SIGHUP stops like SIGTERM (checkpoint, exit 129); the first SIGINT
#   says at once that the run stops after the iteration, a second aborts
#   (exit 130, no temp or lock file left); an interrupted run without
#   --checkpoint saves its weights; beyond ulimit -f a write fails with a
#   message (exit 1) instead of a kill by SIGXFSZ; a closed stdout pipe
#   (SIGPIPE) does not end the run;
# - a final save that fails after all (its directory went away) puts the
#   weights next to the checkpoint or into the swap directory and says so;
# - a checkpoint whose values are out of range (iteration 2^63-1) is
#   refused with exit 1 naming the value;
# - evaluate's --report-json and predict's --json are checked at the start
#   as train's outputs are (exit 2; an input is never overwritten).
# usage: test_outputs.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
ro=$tmp/ro
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  if grep -q " $ro " /proc/mounts 2>/dev/null; then umount "$ro"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
passes=0
limit=60 # seconds: a run that takes longer hangs
export TMPDIR="$tmp" # a rescued save must not land in the real /tmp

# shellcheck source=test/cli/lib.sh
. "$(dirname "$0")/lib.sh"

net=test/data/nets/fmnist_small.ini
quick="--data synthetic --iterations 3 --eval-samples 0"

# refused NAME PATTERN -- train args...: exit 2 before the first iteration.
refused() {
  name=$1 pat=$2
  shift 3
  expect "$name" 2 "$pat" -- "$exe" train "$@"
  if grep -q "iter " "$tmp/out"; then fail "$name: an iteration ran first"; fi
}

# --- outputs checked at the start -------------------------------------
refused save_no_dir "--save: $tmp/nodir/w.bin: cannot create" -- $net $quick \
  --save "$tmp/nodir/w.bin"
sed "s|^\[Model\]|[Model]\nSave_Path = $tmp/nodir/w.bin|" $net >"$tmp/sp.ini"
refused ini_save_path "sp.ini: \[model\] key 'save_path': $tmp/nodir/w.bin: cannot create" \
  -- "$tmp/sp.ini" $quick
refused checkpoint_no_dir "--checkpoint: $tmp/nodir/c.ckpt: cannot create" -- \
  $net $quick --checkpoint "$tmp/nodir/c.ckpt"
refused json_no_dir "--report-json: $tmp/nodir/r.json: cannot create" -- $net \
  $quick --report-json "$tmp/nodir/r.json"
refused save_is_dir "--save: $tmp: is a directory" -- $net $quick --save "$tmp"
refused json_is_dir "--report-json: $tmp: is a directory" -- $net $quick \
  --report-json "$tmp"
touch "$tmp/file"
refused save_under_file "--save: $tmp/file/w.bin: Not a directory" -- $net \
  $quick --save "$tmp/file/w.bin"
# A read-only directory: a read-only tmpfs as root, mode 0500 otherwise.
mkdir "$ro"
if [ "$(id -u)" -eq 0 ]; then
  mount -t tmpfs -o ro,size=64k nto-outputs "$ro" 2>/dev/null || rmdir "$ro"
else
  chmod 0500 "$ro"
fi
if [ -d "$ro" ]; then
  refused save_read_only "--save: $ro/w.bin: cannot create $ro/w.bin.tmp.[0-9]*: " \
    -- $net $quick --save "$ro/w.bin"
  refused checkpoint_read_only "--checkpoint: $ro/c.ckpt: cannot create" -- \
    $net $quick --checkpoint "$ro/c.ckpt"
else
  echo "note: root without permission to mount: the read-only directory case is skipped"
fi

# --- devices, FIFOs, links, inputs ------------------------------------
# Device nodes of our own first (as root): a binary that replaced them
# must not get to the real /dev/null and /dev/full.
devices_safe=1
if [ "$(id -u)" -eq 0 ]; then
  if mknod "$tmp/null" c 1 3 2>/dev/null && mknod "$tmp/full" c 1 7 2>/dev/null; then
    refused own_null "--save: $tmp/null: is a character device" -- $net $quick \
      --save "$tmp/null"
    refused own_full "--checkpoint: $tmp/full: is a character device" -- $net \
      $quick --checkpoint "$tmp/full"
    if [ ! -c "$tmp/null" ] || [ ! -c "$tmp/full" ]; then
      fail "own devices: replaced"
      devices_safe=0
    fi
  else
    echo "note: mknod not permitted: /dev/null and /dev/full are not tried as root"
    devices_safe=0
  fi
fi
if [ $devices_safe -eq 1 ]; then
  refused dev_null "--save: /dev/null: is a character device" -- $net $quick \
    --save /dev/null
  sed "s|^\[Model\]|[Model]\nSave_Path = /dev/full|" $net >"$tmp/full.ini"
  refused dev_full "key 'save_path': /dev/full: is a character device" -- \
    "$tmp/full.ini" $quick
  check dev_still_devices test -c /dev/null -a -c /dev/full
fi
mkfifo "$tmp/fifo"
refused fifo "--save: $tmp/fifo: is a FIFO" -- $net $quick --save "$tmp/fifo"
check fifo_still_fifo test -p "$tmp/fifo"

# A link: written through, the link stays, the target has this run's
# weights; also a link to a file not yet there, and a checkpoint.
mkdir "$tmp/real"
expect seed2_ref 0 "saved weights" -- "$exe" train $net $quick --seed 2 \
  --save "$tmp/ref2.bin"
expect link_first 0 "saved weights" -- "$exe" train $net $quick \
  --save "$tmp/real/w.bin"
ln -s real/w.bin "$tmp/link.bin"
ln -s real/new.bin "$tmp/dangling.bin"
ln -s real/c.ckpt "$tmp/link.ckpt"
expect link 0 "saved weights" -- "$exe" train $net $quick --seed 2 \
  --save "$tmp/link.bin"
check link_stays test -L "$tmp/link.bin"
check link_target_updated cmp -s "$tmp/real/w.bin" "$tmp/ref2.bin"
expect dangling_link 0 "saved weights" -- "$exe" train $net $quick --seed 2 \
  --save "$tmp/dangling.bin" --checkpoint "$tmp/link.ckpt"
check dangling_stays test -L "$tmp/dangling.bin" -a -L "$tmp/link.ckpt"
check dangling_target cmp -s "$tmp/real/new.bin" "$tmp/ref2.bin"
check link_checkpoint test -f "$tmp/real/c.ckpt"
for f in "$tmp"/real/*; do
  case ${f##*/} in
  w.bin | w.safetensors | new.bin | c.ckpt) ok ;;
  *) fail "link: $f left" ;;
  esac
done

# Inputs are never outputs (also through a hard link); outputs differ.
cp $net "$tmp/m.ini"
ln "$tmp/m.ini" "$tmp/hard.bin"
refused save_is_model "--save $tmp/m.ini is the model file" -- "$tmp/m.ini" \
  $quick --save "$tmp/m.ini"
refused save_hard_link_model "--save $tmp/hard.bin is the model file" -- \
  "$tmp/m.ini" $quick --save "$tmp/hard.bin"
check model_intact cmp -s $net "$tmp/m.ini"
refused save_is_init "--save $tmp/ref2.bin is --init-weights" -- $net $quick \
  --init-weights "$tmp/ref2.bin" --save "$tmp/ref2.bin"
refused json_is_resume "--report-json $tmp/real/c.ckpt is --resume" -- $net \
  $quick --resume "$tmp/real/c.ckpt" --report-json "$tmp/real/c.ckpt"
refused save_is_checkpoint "--save $tmp/s.bin and --checkpoint $tmp/s.bin are the same file" \
  -- $net $quick --save "$tmp/s.bin" --checkpoint "$tmp/s.bin"

# --- a slow run for the checks that need one alive ---------------------
# About 0.4 s an iteration (a 5x5 convolution of 64 channels, 1 thread).
cat >"$tmp/slow.ini" <<'EOF'
[Model]
Type = NeuralNetwork
Loss = cross
batch_size = 64
Epochs = 100000

[Optimizer]
Type = sgd
Learning_rate = 0.001

[input]
Type = input
Input_Shape = 1:28:28

[conv1]
Type = conv2d
filters = 64
kernel_size = 3,3
padding = 1,1
Activation = relu

[conv2]
Type = conv2d
filters = 64
kernel_size = 5,5
padding = 2,2

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
slow="--data synthetic --train-samples 256 --eval-samples 0 --threads 1 --log-every 1"

# start NAME ARGS...: a slow run in the background (pid: the process
# itself), its output in $tmp/NAME.log. Its --iterations bound it: about
# 40 s at most if a signal were lost.
start() {
  log=$tmp/$1.log
  shift
  "$exe" train "$tmp/slow.ini" $slow "$@" >"$log" 2>&1 </dev/null &
  pid=$!
}
# ended NAME STATUS PATTERN: the background run ended with STATUS and
# PATTERN in its log.
ended() {
  wait $pid
  got=$?
  pid=
  if [ $got -ne "$2" ] || ! grep -q -- "$3" "$tmp/$1.log"; then
    fail "$1: status $got (want $2), output:"
    sed 's/^/  /' "$tmp/$1.log"
  else
    ok
  fi
}

# One --checkpoint, two runs: the second is refused, the first goes on.
mkdir "$tmp/cc"
start lock_first --iterations 100 --checkpoint "$tmp/cc/c.ckpt" --checkpoint-every 1
wait_for "$tmp/lock_first.log" "checkpoint: iteration 1 written"
refused lock_second "--checkpoint: $tmp/cc/c.ckpt: another process (pid $pid) holds its lock" \
  -- $net $quick --checkpoint "$tmp/cc/c.ckpt"
kill -TERM $pid
ended lock_first 143 "interrupted by SIGTERM after iteration .*holds it"
check lock_nothing_left test "$(ls "$tmp/cc")" = c.ckpt

# Stale temp files of dead processes next to the outputs go; nothing else.
mkdir "$tmp/st"
sleep 0 &
dead=$!
wait $dead
for f in c.ckpt.tmp c.ckpt.tmp.$dead w.bin.tmp.$dead w.safetensors.tmp.$dead \
  c.ckpt.tmp.$$ c.ckpt.tmp.${dead}x c.ckpt.tmpx w.bin.tmp other.tmp.$dead; do
  echo stale >"$tmp/st/$f"
done
mkdir "$tmp/st/w.bin.tmp.1$dead"
expect stale 0 "removed 2 stale temp files next to $tmp/st/c.ckpt" -- "$exe" \
  train $net $quick --checkpoint "$tmp/st/c.ckpt" --save "$tmp/st/w.bin"
for f in c.ckpt.tmp c.ckpt.tmp.$dead w.bin.tmp.$dead w.safetensors.tmp.$dead; do
  check "stale_removed $f" test ! -e "$tmp/st/$f"
done
for f in c.ckpt.tmp.$$ c.ckpt.tmp.${dead}x c.ckpt.tmpx w.bin.tmp other.tmp.$dead \
  w.bin.tmp.1$dead; do
  check "stale_kept $f" test -e "$tmp/st/$f"
done

# SIGHUP (an ssh session that ends) stops like SIGTERM.
start hup --iterations 100 --checkpoint "$tmp/hup.ckpt" --checkpoint-every 1000
wait_for "$tmp/hup.log" "iter 1/"
kill -HUP $pid
ended hup 129 "interrupted by SIGHUP after iteration [0-9]*; checkpoint $tmp/hup.ckpt holds it"

# The first Ctrl-C says so at once; without --checkpoint the weights are
# saved where --save says.
start int --iterations 100 --save "$tmp/int.bin"
wait_for "$tmp/int.log" "iter 1/"
kill -INT $pid
ended int 130 "interrupted by SIGINT after iteration [0-9]*; no --checkpoint: the weights are saved to $tmp/int.bin"
check int_message grep -q -x "nntrainer-offload: stopping after this iteration (Ctrl-C again to abort)" "$tmp/int.log"
check int_weights test -s "$tmp/int.bin" -a -s "$tmp/int.safetensors"

# A second Ctrl-C aborts: exit 130, no temp or lock file left.
mkdir "$tmp/dbl"
# batch 256: iterations of seconds, so that the second signal comes
# within the iteration the first one stops after, even on a loaded machine
start dbl --iterations 100 --batch-size 256 --checkpoint "$tmp/dbl/c.ckpt" \
  --checkpoint-every 1
wait_for "$tmp/dbl.log" "iter 2/"
kill -INT $pid
wait_for "$tmp/dbl.log" "stopping after this iteration"
kill -INT $pid
ended dbl 130 "SIGINT again: aborted"
check dbl_nothing_left test "$(ls "$tmp/dbl")" = c.ckpt

# Beyond ulimit -f (512-byte blocks in dash, 1 KiB in bash: below the
# 10 KiB of weights either way), the write fails with a message.
mkdir "$tmp/fz"
(
  ulimit -f 8
  timeout $limit "$exe" train $net $quick --save "$tmp/fz/w.bin" >"$tmp/fz.log" 2>&1
  echo $? >"$tmp/fz.status"
)
got=$(cat "$tmp/fz.status")
if [ "$got" -ne 1 ] || ! grep -q "w.bin: write failed at byte offset [0-9]*: File too large" "$tmp/fz.log"; then
  fail "xfsz: status $got (want 1), output:"
  sed 's/^/  /' "$tmp/fz.log"
else
  ok
fi
check xfsz_nothing_left test -z "$(ls "$tmp/fz")"

# The save's directory goes away during the run: the weights go next to
# the checkpoint, and the message says where.
mkdir "$tmp/gone" "$tmp/keep"
start rescue --iterations 2 --save "$tmp/gone/w.bin" --checkpoint "$tmp/keep/c.ckpt" \
  --checkpoint-every 1
rp=$pid
wait_for "$tmp/rescue.log" "checkpoint: iteration 1 written"
rm -rf "$tmp/gone"
ended rescue 1 "the weights are saved to $tmp/keep/w-rescued-$rp.bin instead"
check rescue_files test -s "$tmp/keep/w-rescued-$rp.bin" -a -s "$tmp/keep/w-rescued-$rp.safetensors"
# ... without --checkpoint, into the swap directory (an interrupted run).
mkdir "$tmp/gone" "$tmp/swap"
start rescue_swap --iterations 100 --save "$tmp/gone/w.bin" --swap-dir "$tmp/swap"
wait_for "$tmp/rescue_swap.log" "iter 1/"
rm -rf "$tmp/gone"
kill -INT $pid
ended rescue_swap 1 "the weights are saved to $tmp/swap/w-rescued-$pid.bin instead"

# --- checkpoint values out of range -----------------------------------
# u32le OFFSET FILE: the little-endian 32-bit integer at OFFSET.
u32le() {
  od -An -tu1 -j "$1" -N 4 "$2" |
    awk '{ print $1 + 256 * ($2 + 256 * ($3 + 256 * $4)) }'
}
# crc_of FILE OFFSET COUNT: the CRC-32 of COUNT bytes from OFFSET, as its 4
# little-endian bytes (gzip's trailer is zlib's CRC-32).
crc_of() { dd if="$1" bs=1 skip="$2" count="$3" 2>/dev/null | gzip -c | tail -c 8 | head -c 4; }
# set_value FILE NAME BYTES: value NAME := the 8 bytes BYTES (printf
# escapes), and the values' and the file's checksums again.
# shellcheck disable=SC2059
set_value() {
  size=$(wc -c <"$1")
  nv=$(u32le 16 "$1")
  vstart=$((size - 24 - nv * 40))
  at=$(grep -obUa -- "$2" "$1" | head -n 1 | cut -d: -f1)
  printf "$3" | dd of="$1" bs=1 seek=$((at + 32)) conv=notrunc 2>/dev/null
  crc_of "$1" $vstart $((nv * 40)) | dd of="$1" bs=1 seek=$((vstart + nv * 40)) \
    conv=notrunc 2>/dev/null
  head -c $((size - 4)) "$1" | gzip -c | tail -c 8 | head -c 4 |
    dd of="$1" bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null
}
expect value_base 0 "saved weights" -- "$exe" train $net $quick \
  --checkpoint "$tmp/v.ckpt" --save "$tmp/v.bin"
cp "$tmp/v.ckpt" "$tmp/v_it.ckpt"
set_value "$tmp/v_it.ckpt" model.iteration '\377\377\377\377\377\377\377\177'
expect value_iteration 1 "v_it.ckpt: value model.iteration = 9223372036854775807 is out of range" \
  -- "$exe" train $net $quick --resume "$tmp/v_it.ckpt"
cp "$tmp/v.ckpt" "$tmp/v_ie.ckpt"
set_value "$tmp/v_ie.ckpt" loop.iter_in_epoch '\000\000\000\000\000\000\000\001'
expect value_iter_in_epoch 1 "v_ie.ckpt: value loop.iter_in_epoch = 72057594037927936 is out of range (at most 3)" \
  -- "$exe" train $net $quick --resume "$tmp/v_ie.ckpt"

# --- stdout's reader goes away (| head, | tee after an ssh disconnect) --
# SIGPIPE does not kill the run: it trains to the end and saves.
{
  "$exe" train $net $quick --save "$tmp/pipe.bin" 2>"$tmp/pipe.err"
  echo $? >"$tmp/pipe.status"
} | head -n 1 >/dev/null
check sigpipe_status [ "$(cat "$tmp/pipe.status")" = 0 ]
check sigpipe_saved [ -s "$tmp/pipe.bin" ]

# --- --save X.safetensors: safetensors there, its .bin twin beside ----
expect save_st 0 "saved weights     $tmp/st.bin (nntrainer layout) and $tmp/st.safetensors" \
  -- "$exe" train $net $quick --save "$tmp/st.safetensors"
check save_st_header [ "$(head -c 9 "$tmp/st.safetensors" | tail -c 1)" = "{" ]
check save_st_no_double [ ! -e "$tmp/st.safetensors.safetensors" ]
expect save_st_eval 0 "accuracy" -- "$exe" evaluate $net --data synthetic \
  --eval-samples 8 --weights "$tmp/st.safetensors"

# --- evaluate's and predict's JSON, checked before any work -----------
expect eval_json_dir 2 "--report-json: $tmp/nodir/e.json" -- "$exe" evaluate \
  $net --weights "$tmp/v.bin" --data synthetic \
  --report-json "$tmp/nodir/e.json"
expect eval_json_weights 2 "is --weights" -- "$exe" evaluate $net \
  --weights "$tmp/v.bin" --data synthetic --report-json "$tmp/v.bin"
cp "$tmp/v.bin" "$tmp/v_keep.bin"
check eval_json_intact cmp -s "$tmp/v.bin" "$tmp/v_keep.bin"
printf 'P5\n28 28\n255\n' >"$tmp/in.pgm"
head -c 784 /dev/zero >>"$tmp/in.pgm"
cp "$tmp/in.pgm" "$tmp/in_keep.pgm"
expect predict_json_input 2 "is an input" -- "$exe" predict $net \
  --weights "$tmp/v.bin" --json "$tmp/in.pgm" "$tmp/in.pgm"
check predict_json_intact cmp -s "$tmp/in.pgm" "$tmp/in_keep.pgm"
expect predict_json_ok 0 "" -- "$exe" predict $net --weights "$tmp/v.bin" \
  --json "$tmp/p.json" "$tmp/in.pgm"
check predict_json_written [ -s "$tmp/p.json" ]

echo "outputs: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
