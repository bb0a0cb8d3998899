#!/bin/sh
# slow_storage.sh - the offload windows (fixed and --window auto) measured
# against slow storage: `nntrainer-offload bench` inside a cgroup-v1 blkio
# throttle that emulates an embedded board's flash.
#
#   sh bench/slow_storage.sh [--read 45M] [--write 25M] [--model res/resnet18.ini]
#       [--batch 10] [--windows 1,2,4,auto] [--iterations K] [--warmup W]
#       [--rounds R]
#       (N, auto, all or budget; a suffix +auto, +cheap, +segments or
#       +off with its own --recompute, then @SIZE with its own
#       --memory-budget, as in bench; budget@SIZE: train --memory-budget
#       SIZE alone)
#       [--memory-budget SIZE] [--optimizer-state fp32|bf16|int8]
#       [--swap-dir DIR] [--csv FILE] [--json FILE]
#       [--plot FILE.svg] [--strict] [--bin PATH]
#
# What: boards have slow flash: a Raspberry Pi's SD card reads ~45 MB/s and
# writes ~25 MB/s (the defaults here), a Jetson TX2's eMMC ~108 / 94 MB/s
# (--read 108M --write 94M). The development machine's disk is much faster,
# which hides stalls that a board would show. --read and --write are
# bandwidths in bytes per second: a plain number is bytes/s, and the
# suffixes are decimal as in the flash figures: K = 10^3, M = 10^6 (MB/s,
# not MiB/s: 45M = 45,000,000 B/s = 42.9 MiB/s), G = 10^9; a fraction is
# allowed with a suffix (2.5M).
#
# How (as root, cgroup v1 blkio controller at /sys/fs/cgroup/blkio):
#  1. the block device holding --swap-dir: stat's device number of the
#     directory (for filesystems with an anonymous device number, e.g.
#     btrfs, the mount's source from findmnt/df when it is a block device).
#     cgroup v1 throttles whole disks only (the kernel refuses a
#     partition's MAJ:MIN), so a partition is replaced by its disk
#     (/sys/dev/block/MAJ:MIN/partition, then its parent's dev): only this
#     cgroup's I/O is slowed, on every partition of that disk;
#  2. mkdir /sys/fs/cgroup/blkio/nto-slow-$$; "MAJ:MIN BYTES" into its
#     blkio.throttle.read_bps_device and blkio.throttle.write_bps_device;
#  3. a child shell writes its own pid to the cgroup's cgroup.procs and
#     execs `nntrainer-offload bench MODEL --windows LIST --batch-size B
#     --iterations K --warmup W --rounds R --swap-dir DIR
#     [--memory-budget SIZE] [--optimizer-state V] [--csv F] [--json F]
#     [--plot F]`. bench measures the swap directory's
#     bandwidth first, inside the throttle (so its floor column uses the
#     throttled bandwidth), then runs each configuration as a child process,
#     which stays in the cgroup. bench's temporary directory is made in a
#     mktemp directory of this script (TMPDIR for bench), removed at the end;
#  4. after bench: the cgroup's blkio.throttle.io_service_bytes and
#     io_serviced for the device (what was actually read and written inside
#     the throttle, bench's bandwidth test included), and the throttle next
#     to the bandwidth bench measured (from its JSON: --json FILE, or a
#     temporary one).
# Before bench: the device, the throttle values (as written and as the
# kernel reads them back) and the command. Exit status: bench's (0 ok; 1 a
# configuration failed, the weights differ or bench could not run; 2 usage
# error, also bench's). Where the throttle cannot be set up (not root, no
# writable cgroup-v1 blkio controller, no throttling in the kernel, no block
# device under the swap directory, e.g. tmpfs) it prints "skipped: ..." and
# exits 0, or 77 with --strict. The cgroup is removed at the end, also on
# failure or ^C (what is left in it, only this script's runs, is killed).
#
# Limits: cgroup v1 throttling applies to I/O the process submits itself:
# the trainer's swap file is O_DIRECT (io_uring or pread/pwrite), which is
# throttled. Buffered writes are written back later by kernel flusher
# threads charged to the root cgroup, so they are not reliably throttled:
# --no-direct is therefore refused, and the swap directory must allow
# O_DIRECT (a note says so when bench had to fall back to buffered I/O).
# The throttle is a cap on bytes per second, not a model of flash: no SD
# card latency, random-I/O penalty or garbage-collection pauses, and a disk
# slower than the cap stays as slow as it is. The read and write caps are
# independent budgets: reads and writes proceed at the same time, each at
# its full rate, whereas an SD card or eMMC shares one channel between them;
# bench's floor adds read time and write time (a shared channel), so under
# this throttle a run can beat it (ratio below 1; ResNet-18 at window 1:
# ~0.6). blk-throttle meters in time slices (tens of ms): after an idle
# moment about one slice's worth of bytes passes at once, so a net whose
# swap traffic per iteration is that small (LeNet: ~0.3 MiB) is hardly
# slowed; for ResNet-18 (hundreds of MiB per iteration) this is
# negligible. Compute is this machine's, not the board's: the balance of
# compute and storage differs from the board's by the CPU ratio. cgroup v2
# (io.max) is not supported.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
quote_cmdline "$0" "$@"
script_cmdline=$cmdline

read_rate=45M
write_rate=25M
model=res/resnet18.ini
batch=10
windows=1,2,4,auto
iterations=3
warmup=1
rounds=1
budget=
opt_state=
swapdir=${TMPDIR:-/tmp}
csv=
json=
plot=
strict=no
bin=$root/build/app/nntrainer-offload
cgbase=/sys/fs/cgroup/blkio

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "slow_storage.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --read|--write|--model|--batch|--windows|--iterations|--warmup|--rounds|--memory-budget|--optimizer-state|--swap-dir|--csv|--json|--plot|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --read) read_rate=$2 ;;
        --write) write_rate=$2 ;;
        --model) model=$2 ;;
        --batch) batch=$2 ;;
        --windows) windows=$2 ;;
        --iterations) iterations=$2 ;;
        --warmup) warmup=$2 ;;
        --rounds) rounds=$2 ;;
        --memory-budget) budget=$2 ;;
        --optimizer-state) opt_state=$2 ;;
        --swap-dir) swapdir=$2 ;;
        --csv) csv=$2 ;;
        --json) json=$2 ;;
        --plot) plot=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    --strict) strict=yes; shift ;;
    --no-direct)
      die "--no-direct is refused: cgroup v1 blkio throttling does not reliably apply to buffered writeback, so a buffered swap file would not see the emulated bandwidth" ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument '$1' (--help for usage)" ;;
  esac
done

# parse_rate OPTION VALUE: bytes per second (K/M/G = 10^3/10^6/10^9) -> $rate
parse_rate() {
  case $2 in
    *[KkMmGg]) _n=${2%?}; _s=${2#"$_n"} ;;
    *) _n=$2; _s= ;;
  esac
  case $_s in
    [Kk]) _m=1000 ;;
    [Mm]) _m=1000000 ;;
    [Gg]) _m=1000000000 ;;
    *) _m=1 ;;
  esac
  case $_n in
    ''|.*|*.|*[!0-9.]*|*.*.*)
      die "$1: expected bytes per second or a number with K, M or G (10^3, 10^6, 10^9), got '$2'" ;;
    *.*) [ -n "$_s" ] || die "$1: a plain number of bytes per second must be an integer, got '$2'" ;;
  esac
  rate=$(awk -v n="$_n" -v m="$_m" 'BEGIN { printf "%.0f", n * m }')
  isnum "$rate" || die "$1: the bandwidth must be at least 1 byte per second, got '$2'"
}
parse_rate --read "$read_rate"; read_b=$rate
parse_rate --write "$write_rate"; write_b=$rate

isnum "$iterations" || die "--iterations: expected a positive integer, got '$iterations'"
isnum "$batch" || die "--batch: expected a positive integer, got '$batch'"
isnum "$rounds" || die "--rounds: expected a positive integer, got '$rounds'"
case $warmup in ''|*[!0-9]*) die "--warmup: expected an integer >= 0, got '$warmup'" ;; esac
# bench checks the list too; checked here before the cgroup is made, with
# bench's rules (N, auto, all or budget, optionally +auto, +cheap,
# +segments or +off, then for N and auto optionally @SIZE, a budget of that
# run's own, and for budget @SIZE always: train --memory-budget SIZE
# alone)
wmsg="a comma list of N, auto, all and budget (then an optional +auto, +cheap, +segments or +off; N and auto then an optional @SIZE, budget always @SIZE)"
case $windows in ''|,*|*,|*,,*) die "--windows: expected $wmsg, got '$windows'" ;; esac
for w in $(echo "$windows" | tr ',' ' '); do
  v=${w%%@*} # without the budget
  case $w in *@*) case ${w#*@} in [0-9]*) ;; *) v=bad ;; esac ;; esac
  n=${v%%+*}
  case $v in
    *+auto|*+cheap|*+segments|*+off) ;;
    *+*) n=bad ;;
  esac
  [ "$v" = "$w" ] || [ "$n" != all ] || n=bad # all takes no budget
  [ "$v" != "$w" ] || [ "$n" != budget ] || n=bad # budget needs one
  [ "$n" = auto ] || [ "$n" = all ] || [ "$n" = budget ] || isnum "$n" \
    || die "--windows: expected $wmsg, got '$w' in '$windows'"
done
check_model_and_bin
"$bin" bench --help >/dev/null 2>&1 \
  || die "'$bin' has no bench command (an older build? ninja -C build)"
[ -d "$swapdir" ] || die "no swap directory '$swapdir'"

skip() {
  echo "skipped: $*"
  [ "$strict" = yes ] && exit 77
  exit 0
}

# --- can we throttle? -------------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "not root (creating a blkio cgroup needs root)"
if [ ! -f "$cgbase/cgroup.procs" ]; then
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    skip "cgroup v2 only (no v1 blkio controller at $cgbase); this script uses cgroup v1"
  fi
  skip "no cgroup v1 blkio controller mounted at $cgbase"
fi
[ -w "$cgbase" ] || skip "$cgbase is not writable"
[ -f "$cgbase/blkio.throttle.read_bps_device" ] \
  || skip "no blkio.throttle.* files in $cgbase (kernel without CONFIG_BLK_DEV_THROTTLING)"

# --- the block device under the swap directory -------------------------------
fstype=$(stat -f -c %T "$swapdir" 2>/dev/null)
case $fstype in
  tmpfs|ramfs)
    skip "swap dir $swapdir is on $fstype, which has no block device to throttle (use --swap-dir on a disk)" ;;
esac
dev=$(stat -c '%Hd:%Ld' "$swapdir" 2>/dev/null)
src=
if [ "${dev%%:*}" = 0 ] || [ ! -e "/sys/dev/block/$dev" ]; then
  # anonymous device number (btrfs, overlay, network filesystems): the
  # mount's source, when that is a block device
  if command -v findmnt >/dev/null 2>&1; then
    src=$(findmnt -n -o SOURCE -T "$swapdir" 2>/dev/null | head -n 1)
  else
    src=$(df -P "$swapdir" 2>/dev/null | awk 'NR == 2 { print $1 }')
  fi
  src=${src%%\[*}  # btrfs subvolumes: /dev/sda2[/@home]
  if [ -n "$src" ] && [ -b "$src" ]; then
    dev=$(stat -L -c '%Hr:%Lr' "$src")
  else
    skip "cannot determine the block device of swap dir $swapdir (${fstype:-unknown} filesystem, device ${dev:-?}, mount source '${src:-?}')"
  fi
fi
[ -e "/sys/dev/block/$dev" ] \
  || skip "swap dir $swapdir: device $dev is not a block device in /sys/dev/block"
devname() { sed -n 's/^DEVNAME=//p' "/sys/dev/block/$1/uevent" 2>/dev/null; }
fsdev=$dev
fsname=$(devname "$dev")
if [ -e "/sys/dev/block/$dev/partition" ]; then
  dev=$(cat "/sys/dev/block/$fsdev/../dev" 2>/dev/null) \
    || skip "cannot find the disk of partition $fsdev ($fsname)"
  devdesc="$dev ($(devname "$dev"), the disk of partition $fsdev ($fsname) holding $swapdir: cgroup v1 throttles whole disks; only this cgroup's I/O is slowed)"
else
  devdesc="$dev (${fsname:-?}, holding $swapdir)"
fi

cg=$cgbase/nto-slow-$$
tmp=
child=

mib() { awk -v b="$1" 'BEGIN { if (b == "" || b == "-") print "-"; else printf "%.1f MiB", b / 1048576 }'; }
rate_text() { awk -v b="$1" 'BEGIN { printf "%d B/s = %.1f MB/s = %.1f MiB/s", b, b / 1e6, b / 1048576 }'; }

# kill whatever is left in the cgroup (only our own runs are there), rmdir it
remove_cg() {
  [ -d "$cg" ] || return 0
  n=0
  while [ -s "$cg/cgroup.procs" ] && [ "$n" -lt 30 ]; do
    sig=TERM
    [ "$n" -ge 10 ] && sig=KILL
    for p in $(cat "$cg/cgroup.procs"); do kill -s "$sig" "$p" 2>/dev/null; done
    sleep 0.2
    n=$((n + 1))
  done
  n=0
  until rmdir "$cg" 2>/dev/null; do
    n=$((n + 1))
    if [ "$n" -ge 20 ]; then
      echo "slow_storage.sh: could not remove $cg" >&2
      return 1
    fi
    sleep 0.1
  done
}
cleanup() {
  # the child before it joined the cgroup (after, it is killed with the rest)
  [ -n "$child" ] && kill "$child" 2>/dev/null && wait "$child" 2>/dev/null
  remove_cg
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

mkdir "$cg" 2>/dev/null || { cg=; skip "cannot create a cgroup in $cgbase"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nto-slow.XXXXXX") || die "mktemp failed"

# set_throttle FILE BYTES
set_throttle() {
  echo "$dev $2" >"$cg/$1" 2>/dev/null \
    || skip "the kernel refused '$dev $2' in $cg/$1 (device $devdesc)"
}
set_throttle blkio.throttle.read_bps_device "$read_b"
set_throttle blkio.throttle.write_bps_device "$write_b"
back_r=$(awk -v d="$dev" '$1 == d { print $2 }' "$cg/blkio.throttle.read_bps_device")
back_w=$(awk -v d="$dev" '$1 == d { print $2 }' "$cg/blkio.throttle.write_bps_device")

# --- the bench command ------------------------------------------------------
jsonf=${json:-$tmp/bench.json}
set -- bench "$model" --windows "$windows" --batch-size "$batch" \
  --iterations "$iterations" --warmup "$warmup" --rounds "$rounds" \
  --swap-dir "$swapdir"
[ -n "$budget" ] && set -- "$@" --memory-budget "$budget"
[ -n "$opt_state" ] && set -- "$@" --optimizer-state "$opt_state"
[ -n "$csv" ] && set -- "$@" --csv "$csv"
set -- "$@" --json "$jsonf"
[ -n "$plot" ] && set -- "$@" --plot "$plot"
quote_cmdline "$bin" "$@"
bench_cmdline=${cmdline#sh }

cpu=$(awk -F': *' '/^model name|^Hardware|^Processor/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
echo "date:      $(date '+%Y-%m-%d %H:%M:%S %z')"
echo "kernel:    $(uname -r)"
echo "cpu:       ${cpu:-$(uname -m)}, $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') online"
echo "swap dir:  $swapdir: $(df -T "$swapdir" 2>/dev/null | awk 'NR == 2 { print $2 " (" $1 " on " $NF ")" }')"
echo "command:   $script_cmdline"
echo "device:    $devdesc"
echo "cgroup:    $cg"
echo "throttle:  read  $(rate_text "$read_b") (blkio.throttle.read_bps_device: $back_r)"
echo "           write $(rate_text "$write_b") (blkio.throttle.write_bps_device: $back_w)"
echo "bench:     $bench_cmdline"
[ -z "$json" ] && echo "           (--json into a temporary file, for the bandwidth comparison below)"
echo

# --- run bench inside the cgroup ----------------------------------------------
t0=$(date +%s)
# The child moves itself into the cgroup, then becomes bench; bench's
# temporary directory goes into ours (TMPDIR), so that nothing is left over
# if it is killed.
TMPDIR=$tmp sh -c 'echo $$ >"$0/cgroup.procs" || exit 125; exec "$@"' "$cg" "$bin" "$@" &
child=$!
wait "$child"
st=$?
child=
t1=$(date +%s)
[ "$st" -eq 2 ] && exit 2  # bench refused the arguments and ran nothing

# --- what went through the throttle -------------------------------------------
svc() { # FILE OP: the device's counter
  awk -v d="$dev" -v op="$2" '$1 == d && $2 == op { print $3; f = 1 } END { if (!f) print 0 }' "$cg/$1"
}
rd=$(svc blkio.throttle.io_service_bytes Read)
wr=$(svc blkio.throttle.io_service_bytes Write)
rn=$(svc blkio.throttle.io_serviced Read)
wn=$(svc blkio.throttle.io_serviced Write)
echo
echo "inside the throttle ($cg, device $dev, $((t1 - t0)) s):"
echo "  blkio.throttle.io_service_bytes  Read $rd ($(mib "$rd")), Write $wr ($(mib "$wr"))"
echo "  blkio.throttle.io_serviced       Read $rn, Write $wn requests"
if [ -s "$jsonf" ]; then
  # shellcheck disable=SC2046 # four fields
  set -- $(sed -n 's/.*"read_mib_s": *\([0-9.]*\), *"write_mib_s": *\([0-9.]*\),.*"direct": *\([a-z]*\),.*"total_bytes": *\([0-9]*\),.*/\1 \2 \3 \4/p' "$jsonf")
  if [ $# -eq 4 ]; then
    echo "  bench's bandwidth test           read $1 MiB/s, write $2 MiB/s measured; throttle read $(awk -v b="$read_b" 'BEGIN { printf "%.1f", b / 1048576 }') MiB/s, write $(awk -v b="$write_b" 'BEGIN { printf "%.1f", b / 1048576 }') MiB/s ($(mib "$4") each way of the counters above)"
    [ "$3" = true ] \
      || echo "  note: bench measured with buffered I/O (O_DIRECT refused by the filesystem): the throttle does not reliably apply to buffered writeback"
  fi
fi
[ "$rd" = 0 ] && [ "$wr" = 0 ] \
  && echo "  note: no I/O was counted in the cgroup: the throttle was NOT in effect"

case $st in
  0|1|2) exit "$st" ;;
  125) echo "slow_storage.sh: the child could not join $cg" >&2 ;;
  *) if [ "$st" -gt 128 ]; then
       echo "slow_storage.sh: bench was killed by signal $((st - 128))" >&2
     else
       echo "slow_storage.sh: bench exited with status $st" >&2
     fi ;;
esac
exit 1
