#!/bin/sh
# Segment recomputation from the command line (tensors.h nto_recompute
# segments; train's choice with --recompute auto, app/train.c):
# - train --recompute segments at window 1 saves the weights of all
#   resident keeping everything, its report says "recompute_segments":
#   true and counts more recomputed convolutions than auto's;
# - summary --recompute segments plans fewer bytes written than auto for
#   MobileNetV2 (32x32, b16) at window 1; a budget that MobileNetV2 224
#   b10 fits only with segments fits with auto (its fallback to them) and
#   is refused with --recompute cheap; --recompute segments:3 (the
#   depthwise convolutions at 112x112 and 56x56) plans that model's window
#   1 in the same tensors as every segment, segments:2 in more;
# - under a 45/25 MB/s blkio throttle of the swap disk
#   (bench/slow_storage.sh: root and cgroup v1 blkio, else it says
#   "skipped: ..." and so does this part; skipped too under an emulated
#   CPU), train --recompute auto (via bench) chooses segments for that
#   MobileNetV2 (batch 4) at window 1, bench names the run, and the
#   weights equal all resident's.
# usage: test_segments.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
limit=300
. "$(dirname "$0")/lib.sh"
export OPENBLAS_CORETYPE=Haswell

net=test/data/nets/tiny_resnet.ini
common="--batch-size 4 --iterations 3 --data synthetic --eval-samples 0 --swap-dir $tmp"
expect train_all 0 "" -- "$exe" train $net $common --window all --recompute off \
  --save "$tmp/all.bin"
expect train_segments 0 "" -- "$exe" train $net $common --window 1 \
  --recompute segments --save "$tmp/seg.bin" --report-json "$tmp/seg.json"
check segments_same_weights cmp -s "$tmp/all.bin" "$tmp/seg.bin"
check segments_report [ "$(json_value recompute_segments "$tmp/seg.json")" = true ]
expect train_auto 0 "" -- "$exe" train $net $common --window 1 \
  --report-json "$tmp/auto.json"
check segments_more_convs [ "$(json_value recomputed_convolutions "$tmp/seg.json")" -gt \
  "$(json_value recomputed_convolutions "$tmp/auto.json")" ]

# segments:N: MobileNetV2 224 b10's window 1 holds 103.4 MiB of tensors
# with all 18 segment convolutions and with the first 3, 149.3 with 2
tensors() { # summary's window 1 MiB of tensors with recompute $1
  "$exe" summary res/mobilenetv2.ini --batch-size 10 --recompute "$1" |
    sed -n 's/^  window 1: \([0-9.]*\) MiB of tensors.*/\1/p'
}
t_all=$(tensors segments)
t3=$(tensors segments:3)
t2=$(tensors segments:2)
check segments_n_same [ "${t3:-x}" = "${t_all:-y}" ]
check segments_n_fewer awk -v a="$t_all" -v b="$t2" 'BEGIN { exit !(a > 0 && b > a) }'
expect segments_n_bad 2 "expected auto, cheap, segments, segments:N (N from 1 to 1000000) or off, got 'segments:0'" -- \
  "$exe" summary res/mobilenetv2.ini --recompute segments:0

mb=res/mobilenetv2_32.ini
written() { # summary's window 1 MiB written with recompute $1
  "$exe" summary $mb --batch-size 16 --recompute "$1" |
    sed -n 's/^  window 1: .* \([0-9.]*\) MiB written$/\1/p'
}
a=$(written auto)
s=$(written segments)
check summary_segments_fewer awk -v a="$a" -v s="$s" 'BEGIN { exit !(s > 0 && s < a) }'
# a budget only segments fit (MobileNetV2 224 b10: window 1 holds 103.4
# instead of 137.9 MiB of tensors): auto falls back to them; kept, refused
# the budget: 125 MiB beyond the process's own memory (as summary's refusal
# of 1 MiB names it: more under qemu or a sanitizer), between the two needs
# (103.4 and 149.3 MiB of tensors, 3.6 MiB of workspace)
own=$("$exe" summary res/mobilenetv2.ini --batch-size 10 --memory-budget 1M |
  sed -n 's/.*own memory before any tensor, \([0-9.]*\) MiB.*/\1/p' |
  awk '{ printf "%.0f", $1 * 1024 + 125 * 1024 }')
if [ -z "$own" ]; then
  fail "summary_own: no own memory in summary's refusal of 1M"
else
  expect summary_budget_fallback 0 "window [0-9]*: .* MiB written per iteration" -- \
    "$exe" summary res/mobilenetv2.ini --batch-size 10 --memory-budget "${own}K"
  expect summary_budget_cheap 0 "refused: --memory-budget .* is below" -- \
    "$exe" summary res/mobilenetv2.ini --batch-size 10 --memory-budget "${own}K" \
    --recompute cheap
fi

# under the throttle: auto chooses segments (natively: under qemu-user the
# emulated CPU is slower than the throttled disk, and auto rightly keeps
# its plan: one iteration takes ~4.7 s there, against ~2.3 s of I/O)
if [ -n "${MESON_EXE_WRAPPER:-}" ]; then
  echo "SKIP throttle: an emulated CPU ($MESON_EXE_WRAPPER): the choice depends on the CPU's speed"
elif [ -d /var/tmp ]; then
  sh bench/slow_storage.sh --model $mb --batch 4 --windows 1,all \
    --iterations 1 --warmup 0 --swap-dir /var/tmp --json "$tmp/slow.json" \
    --bin "$exe" >"$tmp/slow.out" 2>&1
  st=$?
  if grep -q '^skipped:' "$tmp/slow.out"; then
    echo "skipped: $(grep '^skipped:' "$tmp/slow.out")"
  elif [ "$st" -ne 0 ]; then
    fail "slow_storage: status $st"
    sed 's/^/  /' "$tmp/slow.out"
  else
    check throttle_auto_segments grep -q "recompute: segments, auto's choice, in 1 " "$tmp/slow.out"
    check throttle_json grep -q '"config": "1".*"recompute_segments": true' "$tmp/slow.json"
    check throttle_identical grep -q "^1 .* yes$" "$tmp/slow.out"
  fi
else
  echo "skipped: throttle: no /var/tmp"
fi

echo "segments: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
