#!/bin/sh
# summary_estimate.sh - summary's estimated peak RSS against train's
# measured one (VmHWM), window by window.
#
#   sh bench/summary_estimate.sh [--model res/resnet18.ini] [--batch 10]
#       [--windows 1,2,4,8,all] [--iterations 3] [--swap-dir /var/tmp]
#       [--bin build/app/nntrainer-offload]
#
# What: `summary` prints, per window, the peak RSS it predicts for `train
# --window N` (its tensor region and workspace, the process's own memory,
# the compute threads' BLAS buffers, the batch buffers: app/summary.c
# estimate_rss); this runs `train --window N --iterations K --data
# synthetic --eval-samples 0` for each and prints both and their
# difference. Synthetic data: the page cache of a dataset is not part of
# the estimate (train reads it without growing the cache, but a first read
# is a first read). Exit status: 0, 1 when a run failed, 2 usage error.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
model=res/resnet18.ini
batch=10
windows=1,2,4,8,all
iterations=3
swapdir=/var/tmp
bin=$root/build/app/nntrainer-offload
die() { echo "summary_estimate.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --model|--batch|--windows|--iterations|--swap-dir|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --model) model=$2 ;;
        --batch) batch=$2 ;;
        --windows) windows=$2 ;;
        --iterations) iterations=$2 ;;
        --swap-dir) swapdir=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[ -x "$bin" ] || die "no binary '$bin' (ninja -C build)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" summary "$model" --batch-size "$batch" >"$tmp/summary" 2>&1 ||
  { cat "$tmp/summary"; exit 1; }
printf '%-8s %14s %14s %8s\n' window "estimated MiB" "measured MiB" error
st=0
for w in $(echo "$windows" | tr ',' ' '); do
  if [ "$w" = all ]; then
    line=$(grep '^  all resident:' "$tmp/summary")
  else
    line=$(grep "^  window $w:" "$tmp/summary" | head -n 1)
  fi
  est=$(echo "$line" | sed -n 's/.*estimated peak RSS \([0-9.]*\) MiB.*/\1/p')
  if ! "$bin" train "$model" --batch-size "$batch" --window "$w" \
    --iterations "$iterations" --data synthetic --eval-samples 0 \
    --swap-dir "$swapdir" >"$tmp/train" 2>&1; then
    echo "window $w: train failed:"; sed 's/^/  /' "$tmp/train"; st=1; continue
  fi
  got=$(sed -n 's/^peak RSS *\([0-9.]*\) MiB.*/\1/p' "$tmp/train")
  printf '%-8s %14s %14s %8s\n' "$w" "$est" "$got" \
    "$(awk -v e="$est" -v g="$got" 'BEGIN { printf "%+.1f%%", (e / g - 1) * 100 }')"
done
exit $st
