#!/bin/sh
# swap_bandwidth.sh - the swap file's bandwidth through our I/O layer
# against fio with the same block size and queue depth, and what the offload
# engine achieves while training.
#
#   sh bench/swap_bandwidth.sh [--swap-dir DIR] [--size 512M] [--repeats 3]
#       [--model M] [--batch 10] [--window 1] [--iterations 6] [--bin PATH]
#
# Three measurements of the disk under --swap-dir, side by side:
#  1. fio: a sequential write then a sequential read of --size bytes,
#     O_DIRECT, 1 MiB requests, 16 in flight, ioengine io_uring (psync with
#     numjobs 1 where io_uring is refused), one job;
#  2. ours: `nntrainer-offload bench` measures the same pattern (O_DIRECT,
#     1 MiB requests, 16 in flight, sequential write then read) through
#     io/probe.c before it runs any configuration; its JSON bandwidth.
#     1 and 2 alternate --repeats times (a shared disk's speed drifts); the
#     table shows medians and the ratio of the medians;
#  3. in training: `train MODEL --window N --iterations K --warmup 2`: MiB
#     read and written per iteration divided by the onloader's and the
#     offloader's busy time (time with requests queued or in flight), i.e.
#     the rate at which the engine moved bytes when it had any to move. Its
#     requests are whole tensors (4 KiB to 9.4 MiB for ResNet-18), not 1
#     MiB blocks, and reads and writes overlap, so this is not the same
#     pattern; and the same bytes over the time a request of either I/O
#     thread was at the device (train's device_busy_ms), against the time
#     fio's two rates would take for them one direction after the other
#     (above 1: reads and writes overlapped at the device); and the bytes
#     written against those the schedule plans.
# Issue 6's target is ours >= 80% of fio. Prints one table; exit 0, or 2
# on a usage error or a failed measurement (fio missing: install Debian's
# fio). Uses --size bytes of free space in --swap-dir for a while.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
quote_cmdline "$0" "$@"

swapdir=${TMPDIR:-/tmp}
size=512M
model=res/resnet18.ini
batch=10
window=1
iterations=6
bin=$root/build/app/nntrainer-offload

repeats=3

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "swap_bandwidth.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --swap-dir|--size|--repeats|--model|--batch|--window|--iterations|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --swap-dir) swapdir=$2 ;;
        --size) size=$2 ;;
        --repeats) repeats=$2 ;;
        --model) model=$2 ;;
        --batch) batch=$2 ;;
        --window) window=$2 ;;
        --iterations) iterations=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
done
isnum "$repeats" || die "--repeats: expected a positive integer, got '$repeats'"
isnum "$batch" || die "--batch: expected a positive integer, got '$batch'"
isnum "$window" || die "--window: expected a positive integer, got '$window'"
isnum "$iterations" ||
  die "--iterations: expected a positive integer, got '$iterations'"
[ -d "$swapdir" ] || die "--swap-dir: no directory '$swapdir'"
command -v fio >/dev/null 2>&1 || die "fio not found: install Debian's fio"
command -v python3 >/dev/null 2>&1 || die "python3 not found"
check_model_and_bin

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nto-swapbw.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"; rm -f "$swapdir/nto-swapbw-$$.fio"' EXIT INT TERM

# 1. fio, write then read of the same file; 2. bench's pass; alternating.
fio_run() { # rw engine repeat -> JSON in $tmp/fio-$1.$3.json
  fio --name=swap --filename="$swapdir/nto-swapbw-$$.fio" --size="$size" \
    --rw="$1" --bs=1M --iodepth=16 --direct=1 --ioengine="$2" --numjobs=1 \
    --output-format=json --output="$tmp/fio-$1.$3.json" >"$tmp/fio.log" 2>&1
}
engine=io_uring
r=1
while [ "$r" -le "$repeats" ]; do
  if ! fio_run write "$engine" "$r"; then
    [ "$r" -eq 1 ] && engine=psync && fio_run write "$engine" "$r" ||
      die "fio failed: $(tail -n 3 "$tmp/fio.log")"
  fi
  fio_run read "$engine" "$r" || die "fio failed: $(tail -n 3 "$tmp/fio.log")"
  rm -f "$swapdir/nto-swapbw-$$.fio"
  "$bin" bench "$model" --windows "$window" --iterations 1 --warmup 0 \
    --batch-size "$batch" --swap-dir "$swapdir" --json "$tmp/bench.$r.json" \
    >"$tmp/bench.out" 2>&1 ||
    die "bench failed: $(tail -n 3 "$tmp/bench.out")"
  r=$((r + 1))
done

# 3. the engine while training.
"$bin" train "$model" --data synthetic --batch-size "$batch" \
  --window "$window" --iterations $((iterations + 2)) --warmup 2 \
  --eval-samples 0 --swap-dir "$swapdir" --save "$tmp/w.bin" \
  --report-json "$tmp/train.json" >"$tmp/train.out" 2>&1 ||
  die "train failed: $(tail -n 3 "$tmp/train.out")"

echo "command: $cmdline"
echo "date: $(date -u)  swap dir: $swapdir ($(findmnt -n -o SOURCE,FSTYPE -T "$swapdir" 2>/dev/null))"
python3 - "$tmp" "$engine" "$window" "$batch" "$model" "$repeats" <<'PY'
import json, statistics, sys
tmp, engine, window, batch, model = sys.argv[1:6]
R = int(sys.argv[6])
def fio(rw, r):
    j = json.load(open(f"{tmp}/fio-{rw}.{r}.json"))["jobs"][0][rw]
    return j["bw_bytes"] / 2**20
med = statistics.median
fws = [fio("write", r) for r in range(1, R + 1)]
frs = [fio("read", r) for r in range(1, R + 1)]
bws = [json.load(open(f"{tmp}/bench.{r}.json"))["bandwidth"] for r in range(1, R + 1)]
fw, fr = med(fws), med(frs)
bw = {"io": bws[0]["io"], "read_mib_s": med(b["read_mib_s"] for b in bws),
      "write_mib_s": med(b["write_mib_s"] for b in bws)}
print("runs (read/write MiB/s): fio " +
      ", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(frs, fws)) + "; ours " +
      ", ".join(f"{b['read_mib_s']:.0f}/{b['write_mib_s']:.0f}" for b in bws))
t = json.load(open(f"{tmp}/train.json"))
def rate(mib, busy):
    return mib / (busy / 1000.0) if busy > 0 else float("nan")
tr = rate(t["read_mib_per_iteration"], t["read_busy_ms_per_iteration"])
tw = rate(t["written_mib_per_iteration"], t["write_busy_ms_per_iteration"])
print(f"| measurement | read MiB/s | write MiB/s | read / fio | write / fio |")
print(f"|---|---:|---:|---:|---:|")
print(f"| fio ({engine}, O_DIRECT, 1 MiB, depth 16), median | {fr:.0f} | {fw:.0f} | 1.00 | 1.00 |")
print(f"| ours: bench's pass ({bw['io']}, O_DIRECT, 1 MiB, depth 16), median | {bw['read_mib_s']:.0f} | "
      f"{bw['write_mib_s']:.0f} | {bw['read_mib_s'] / fr:.2f} | {bw['write_mib_s'] / fw:.2f} |")
print(f"| engine training {model} b{batch} window {window} (bytes / busy time) | {tr:.0f} | {tw:.0f} | "
      f"{tr / fr:.2f} | {tw / fw:.2f} |")
dev = t.get("device_busy_ms_per_iteration", 0)  # absent from binaries before 047be80
rd, wr = t["read_mib_per_iteration"], t["written_mib_per_iteration"]
fio_ms = 1000.0 * (rd / fr + wr / fw)
if dev > 0:
    print(f"engine training, device time: {rd:.1f} + {wr:.1f} MiB per iteration in {dev:.1f} ms with a "
          f"request at the device ({(rd + wr) / (dev / 1000.0):.0f} MiB/s read and written together); "
          f"fio would move them in {fio_ms:.1f} ms one direction after the other: {fio_ms / dev:.2f} of fio")
pw = t["planned_written_mib_per_iteration"]
print(f"written per iteration: {t['written_mib_per_iteration']:.1f} MiB, planned "
      f"{pw:.1f} MiB (the dirty bytes the schedule must write)")
PY
