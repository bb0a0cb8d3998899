#!/bin/sh
# I/O faults at the command line, injected with the engine's NTO_FAULT test
# hook (OP:N:KIND, see io/iobackend.h): a byte flipped in a read (caught by
# the swap checksums, NTO_SWAP_CHECKSUM=1; unnoticed without), EIO on a read, ENOSPC on a write (during training,
# and while the weights are stored), short transfers (harmless: the same
# losses as without), a malformed hook; each failure must end the run with
# exit 1 and a message naming the tensor and its layer, without a hang
# (every run is bounded by `timeout`) and without a file left in the swap
# directory. Also a swap directory too small for the swap file (a 128 KiB
# tmpfs; skipped where mount is not permitted): refused before the first
# step with the size needed.
# usage: test_faults.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
small="$tmp/small"
cleanup() {
  if [ -d "$small" ] && grep -q " $small " /proc/mounts 2>/dev/null; then
    umount "$small" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
passes=0
limit=120 # seconds: a run that takes longer hangs

fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

# run NAME STATUS PATTERN [ENV=VALUE...] -- args...: train tiny_resnet at
# window 1 with the swap file in $tmp/swap; checks the exit status, the
# pattern in the output and that the swap directory is left empty.
run() {
  name=$1 want=$2 pat=$3
  shift 3
  envs=
  while [ "$1" != "--" ]; do
    envs="$envs $1"
    shift
  done
  shift
  rm -rf "$tmp/swap"
  mkdir "$tmp/swap"
  env $envs timeout $limit "$exe" train test/data/nets/tiny_resnet.ini \
    --data synthetic --iterations 6 --eval-samples 0 --window 1 \
    --swap-dir "$tmp/swap" $direct "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -eq 124 ]; then
    fail "$name: no end after $limit s (hang)"
  elif [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$tmp/out"; then
    fail "$name: status $got (want $want), output:"
    sed 's/^/  /' "$tmp/out"
  elif [ -n "$(ls -A "$tmp/swap")" ]; then
    fail "$name: files left in the swap directory: $(ls -A "$tmp/swap")"
  else
    passes=$((passes + 1))
  fi
}

# Where $tmp's filesystem refuses O_DIRECT, swap through the page cache.
direct=
mkdir "$tmp/swap"
"$exe" train test/data/nets/tiny_resnet.ini --data synthetic --iterations 1 \
  --eval-samples 0 --window 1 --swap-dir "$tmp/swap" >"$tmp/probe" 2>&1 ||
  { grep -q "O_DIRECT" "$tmp/probe" && direct=--no-direct; }

run clean 0 "swap traffic" --
grep "^train " "$tmp/out" >"$tmp/loss.ref"
[ -s "$tmp/loss.ref" ] || fail "clean: no train line"

name_re='of tensor \([^ ]*\):[^ ]* (layer \1, [0-9]* bytes at offset [0-9]*)'
# Checksums are off by default (their cost): NTO_SWAP_CHECKSUM=1 turns them on.
run read_flip 1 "swap read $name_re: checksum mismatch (stored 0x" \
  NTO_FAULT=read:5:flip NTO_SWAP_CHECKSUM=1 --
run read_flip_psync 1 "checksum mismatch" NTO_FAULT=read:9:flip \
  NTO_SWAP_CHECKSUM=1 -- --io psync
run read_flip_unchecked 0 "swap traffic" NTO_FAULT=read:5:flip \
  NTO_SWAP_CHECKSUM=0 --
run read_eio 1 "swap read $name_re failed: Input/output error" \
  NTO_FAULT=read:5:eio --
run write_enospc 1 "swap write $name_re failed: No space left on device" \
  NTO_FAULT=write:40:enospc --
grep -q -- "--swap-dir" "$tmp/out" || fail "write_enospc: no --swap-dir hint"
run store_enospc 1 "swap write $name_re failed: No space left on device" \
  NTO_FAULT=write:1:enospc --
for spec in read:3:short write:3:short; do
  run "short_$spec" 0 "swap traffic" NTO_FAULT=$spec --
  grep "^train " "$tmp/out" | cmp -s - "$tmp/loss.ref" ||
    fail "short $spec: losses differ from the clean run"
done
run bad_hook 1 "NTO_FAULT: fault specification 'read:0:eio'" \
  NTO_FAULT=read:0:eio --
run bad_knob 1 "NTO_SWAP_CHECKSUM: expected 0 or 1" NTO_SWAP_CHECKSUM=yes --

# A swap directory too small: refused before the first step, naming the
# size needed. tmpfs refuses O_DIRECT on some kernels: buffered here.
mkdir "$small"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=128k nto-faults "$small" 2>/dev/null; then
  timeout $limit "$exe" train test/data/nets/tiny_resnet.ini --data synthetic \
    --iterations 2 --eval-samples 0 --window 1 --swap-dir "$small" --no-direct \
    >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne 1 ] || ! grep -q "swap dir $small: needs .*, only .* free" "$tmp/out"; then
    fail "disk_too_small: status $got (want 1), output:"
    sed 's/^/  /' "$tmp/out"
  elif grep -q "iter " "$tmp/out"; then
    fail "disk_too_small: a step ran before the refusal"
  elif [ -n "$(ls -A "$small")" ]; then
    fail "disk_too_small: files left: $(ls -A "$small")"
  else
    passes=$((passes + 1))
  fi
  umount "$small"
else
  echo "note: cannot mount a small tmpfs here (not root, or not permitted): disk_too_small skipped"
fi

echo "faults: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
