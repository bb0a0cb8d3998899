#!/bin/sh
# Channel groups from the command line (--channel-groups, tensors.h):
# - train --channel-groups at window 1 and all resident save the same
#   weights (the setting is the model's), print the "channel groups:" line
#   and report the chains in the JSON; without the option there is none;
# - summary --channel-groups 20M lists MobileNetV2 224 b10's one chain
#   (block2_expand .. block2_dw in 3 groups) and plans window 1 with segments
#   in fewer tensors than without (84.3 against 103.4 MiB);
# - a checkpoint taken with --channel-groups resumes, at window 1, to the
#   weights of the uninterrupted run, and is refused without the option
#   (the steps would round differently);
# - evaluate takes the option too (the forward pass by groups);
# - the INI's [Model] channel_groups does what the option does, and a bad
#   value there is an error naming the file, section and key;
# - a bad value is a usage error naming the option, for train, summary and
#   bench.
# usage: test_channel_groups.sh PATH/TO/nntrainer-offload   (run from the
# repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
limit=300
. "$(dirname "$0")/lib.sh"
export OPENBLAS_CORETYPE=Haswell

net=test/data/nets/mobile_block.ini
common="--batch-size 4 --iterations 3 --data synthetic --eval-samples 0 --swap-dir $tmp --channel-groups 1K"
expect train_groups_all 0 "^channel groups: [0-9]* runs\{0,1\} of layers" -- \
  "$exe" train $net $common --window all --save "$tmp/all.bin"
expect train_groups_1 0 "^channel groups: " -- "$exe" train $net $common \
  --window 1 --save "$tmp/w1.bin" --report-json "$tmp/w1.json"
check groups_same_weights cmp -s "$tmp/all.bin" "$tmp/w1.bin"
check groups_report [ "$(json_value channel_group_chains "$tmp/w1.json")" -ge 1 ]
expect evaluate_groups 0 "accuracy" -- "$exe" evaluate $net --weights "$tmp/all.bin" \
  --data synthetic --eval-samples 64 --window 1 --swap-dir "$tmp" --channel-groups 1K
"$exe" train $net --batch-size 4 --iterations 1 --data synthetic \
  --eval-samples 0 --window all >"$tmp/off.out" 2>&1
check groups_off_silent sh -c "! grep -q '^channel groups' '$tmp/off.out'"

sed 's/^\[Model\]/[Model]\nchannel_groups = 1K/' $net >"$tmp/ini_groups.ini"
expect ini_groups 0 "^channel groups: " -- "$exe" train "$tmp/ini_groups.ini" \
  --batch-size 4 --iterations 3 --data synthetic --eval-samples 0 \
  --window all --save "$tmp/ini.bin"
check ini_same_weights cmp -s "$tmp/all.bin" "$tmp/ini.bin"
sed 's/^\[Model\]/[Model]\nchannel_groups = 12/' $net >"$tmp/ini_bad.ini"
expect ini_bad 2 "ini_bad.ini: \[[Mm]odel\] key 'channel_groups': expected off or a size of at least 1K" -- \
  "$exe" train "$tmp/ini_bad.ini" --iterations 1 --data synthetic

mkdir "$tmp/swap"
base="--batch-size 4 --data synthetic --eval-samples 0 --channel-groups 1K"
expect ckpt_ref 0 "saved weights" -- "$exe" train $net $base --iterations 6 \
  --window all --save "$tmp/ref.bin"
expect ckpt_written 0 "checkpoint .* written" -- "$exe" train $net $base \
  --iterations 3 --window all --checkpoint "$tmp/g.ckpt" --save "$tmp/half.bin"
expect ckpt_resumed 0 "resumed from" -- "$exe" train $net $base --iterations 6 \
  --window 1 --swap-dir "$tmp/swap" --resume "$tmp/g.ckpt" --save "$tmp/res.bin"
check ckpt_same_weights cmp -s "$tmp/ref.bin" "$tmp/res.bin"
expect ckpt_other_groups 2 "written with --channel-groups 1K, this run has off" -- \
  "$exe" train $net --batch-size 4 --data synthetic --eval-samples 0 \
  --iterations 6 --window all --resume "$tmp/g.ckpt"

tensors() { # summary's window 1 MiB of tensors, options "$@"
  "$exe" summary res/mobilenetv2.ini --batch-size 10 --recompute segments "$@" |
    sed -n 's/^  window 1: \([0-9.]*\) MiB of tensors.*/\1/p'
}
expect summary_chain 0 "^  block2_expand .. block2_dw in 3 groups$" -- \
  "$exe" summary res/mobilenetv2.ini --batch-size 10 --channel-groups 20M
t0=$(tensors)
t20=$(tensors --channel-groups 20M)
check summary_groups_fewer awk -v a="$t0" -v b="$t20" 'BEGIN { exit !(b > 0 && a > b + 15) }'

bad="--channel-groups: expected off or a size of at least 1K (suffixes K, M, G), got '10'"
expect train_bad 2 "$bad" -- "$exe" train $net --channel-groups 10
expect summary_bad 2 "$bad" -- "$exe" summary $net --channel-groups 10
expect bench_bad 2 "$bad" -- "$exe" bench $net --windows 1,all --channel-groups 10

echo "channel groups: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
