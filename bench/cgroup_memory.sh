#!/bin/sh
# cgroup_memory.sh - does a training run fit a memory limit with the page
# cache counted? And are its weights those of an all-resident run?
#
#   sh bench/cgroup_memory.sh [--limit 64M] [--model res/resnet18.ini]
#       [--batch 32] [--window 1] [--iterations K] [--strict]
#       [--swap-dir DIR] [--data DIR|synthetic] [--bin PATH]
#
# What: VmHWM (the trainer's "peak RSS") counts only the process's own
# pages; a board with N MiB of RAM must also hold the page cache the run
# causes (dataset reads, saved weights, any buffered swap I/O). The kernel's
# memory cgroup charges both, so this script runs the training inside a
# cgroup-v1 memory cgroup with a hard limit and reads what the kernel saw.
#
# How (as root, cgroup v1 memory controller at /sys/fs/cgroup/memory):
#  1. mkdir /sys/fs/cgroup/memory/nto-bench-$$; memory.limit_in_bytes = the
#     limit, and memory.memsw.limit_in_bytes too where that file exists, so
#     the run cannot escape to swap;
#  2. a child shell writes its own pid to the cgroup's cgroup.procs and then
#     execs `nntrainer-offload train MODEL --window W --batch-size B
#     --iterations K --eval-samples 0 --save A.bin` (from then on all of its
#     memory, page cache included, is charged there); while it runs,
#     memory.stat (rss, cache) is sampled every 0.5 s;
#  3. after it exits: exit status, memory.max_usage_in_bytes (peak, cache
#     included), memory.failcnt (how often usage hit the limit and the
#     kernel had to reclaim), memory.oom_control's oom_kill counter (was the
#     process OOM-killed?), memory.stat's cache and rss;
#  4. the same training with --window all --save B.bin, outside the limited
#     cgroup: in a second cgroup nto-bench-$$-ref that has no limit, only so
#     that its peak is measured the same way (page cache included);
#  5. cmp A.bin B.bin (the project's claim: any window gives byte-identical
#     weights).
# Exit status: 0 when the constrained run succeeded and A.bin == B.bin, 1
# otherwise, 2 usage error. Where no cgroup can be made (not root, no
# writable cgroup-v1 memory controller, cgroup v2 only) it prints
# "skipped: ..." and exits 0, or 77 with --strict. The cgroups and temp files
# are removed at the end, also on failure or interruption.
#
# Limits: page-cache pages that another cgroup had already cached (e.g. the
# dataset files read by an earlier run) stay charged to that cgroup and are
# not counted here; page cache is reclaimable, so a peak close to the limit
# with a high failcnt means "fits, with reclaim", not "needs more". The
# sampled rss/cache split is a 0.5 s sample, not a true peak. With memsw
# set equal to the limit, the memsw counter is the one that fails first, and
# kernels that count failcnt only on the memory counter (6.18 here) then
# show failcnt 0: "limit reached" (peak == limit) is reported beside it.
# cgroup v2
# (memory.max/memory.peak) is not supported.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
quote_cmdline "$0" "$@"

limit=64M
model=res/resnet18.ini
batch=32
window=1
iterations=5
strict=no
swapdir=${TMPDIR:-/tmp}
data=
bin=$root/build/app/nntrainer-offload
cgbase=/sys/fs/cgroup/memory

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "cgroup_memory.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --limit|--model|--batch|--window|--iterations|--swap-dir|--data|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --limit) limit=$2 ;;
        --model) model=$2 ;;
        --batch) batch=$2 ;;
        --window) window=$2 ;;
        --iterations) iterations=$2 ;;
        --swap-dir) swapdir=$2 ;;
        --data) data=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    --strict) strict=yes; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument '$1' (--help for usage)" ;;
  esac
done

isnum "$iterations" || die "--iterations: expected a positive integer, got '$iterations'"
isnum "$batch" || die "--batch: expected a positive integer, got '$batch'"
[ "$window" = all ] || isnum "$window" || die "--window: expected N or 'all', got '$window'"
num=${limit%[KkMmGg]}
isnum "$num" || die "--limit: expected bytes or a number with K, M or G, got '$limit'"
check_model_and_bin
[ -d "$swapdir" ] || die "no swap directory '$swapdir'"

skip() {
  echo "skipped: $*"
  [ "$strict" = yes ] && exit 77
  exit 0
}

# --- can we make a cgroup-v1 memory cgroup? ------------------------------
[ "$(id -u)" -eq 0 ] || skip "not root (creating a memory cgroup needs root)"
if [ ! -f "$cgbase/memory.limit_in_bytes" ]; then
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    skip "cgroup v2 only (no v1 memory controller at $cgbase); this script uses cgroup v1"
  fi
  skip "no cgroup v1 memory controller mounted at $cgbase"
fi
[ -w "$cgbase" ] || skip "$cgbase is not writable"

cg=$cgbase/nto-bench-$$
cgref=$cgbase/nto-bench-$$-ref
tmp=
child=

mib() { awk -v b="$1" 'BEGIN { if (b == "" || b == "-") print "-"; else printf "%.1f MiB", b / 1048576 }'; }

# kill whatever is left in cgroup $1 (only our own runs are there), rmdir it
remove_cg() {
  [ -d "$1" ] || return 0
  n=0
  while [ -s "$1/cgroup.procs" ] && [ "$n" -lt 20 ]; do
    for p in $(cat "$1/cgroup.procs"); do kill -KILL "$p" 2>/dev/null; done
    sleep 0.1
    n=$((n + 1))
  done
  n=0
  until rmdir "$1" 2>/dev/null; do
    n=$((n + 1))
    if [ "$n" -ge 20 ]; then
      echo "cgroup_memory.sh: could not remove $1" >&2
      return 1
    fi
    sleep 0.1
  done
}
cleanup() {
  [ -n "$child" ] && kill "$child" 2>/dev/null && wait "$child" 2>/dev/null
  remove_cg "$cg"
  remove_cg "$cgref"
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

mkdir "$cg" 2>/dev/null || { cg=; skip "cannot create a cgroup in $cgbase"; }
mkdir "$cgref" 2>/dev/null || { cgref=; skip "cannot create a cgroup in $cgbase"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nto-cgroup.XXXXXX") || die "mktemp failed"

echo "$limit" >"$cg/memory.limit_in_bytes" 2>/dev/null \
  || die "cannot set $cg/memory.limit_in_bytes to $limit"
limit_b=$(cat "$cg/memory.limit_in_bytes")
memsw_b=
if [ -f "$cg/memory.memsw.limit_in_bytes" ]; then
  if echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null; then
    memsw_b=$(cat "$cg/memory.memsw.limit_in_bytes")
    memsw="memory.memsw.limit_in_bytes $memsw_b (no escape to swap)"
  else
    memsw="memory.memsw.limit_in_bytes could NOT be set (swap accounting off?): the run may use swap"
  fi
else
  memsw_b=
  memsw="no memory.memsw.limit_in_bytes (swap accounting off): the run may use swap"
fi

# --- run: run CGROUP WINDOW SAVE LOG -> sets st, peak_rss, peak_cache ------
statv() { awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "-" }' "$1/memory.stat"; }
oomkills() {
  awk '$1 == "oom_kill" { print $2; f = 1 } END { if (!f) print "-" }' "$1/memory.oom_control"
}
run() {
  set -- "$1" "$3" "$4" train "$model" --window "$2" --batch-size "$batch" \
    --iterations "$iterations" --eval-samples 0 --swap-dir "$swapdir" \
    --save "$3"
  [ -n "$data" ] && set -- "$@" --data "$data"
  _cg=$1 _log=$3
  shift 3
  # The child moves itself into the cgroup, then becomes the trainer.
  sh -c 'echo $$ >"$0/cgroup.procs" || exit 125; exec "$@"' "$_cg" "$bin" "$@" \
    >"$_log" 2>&1 &
  child=$!
  peak_rss=0 peak_cache=0
  while kill -0 "$child" 2>/dev/null; do
    # shellcheck disable=SC2046 # two numbers
    set -- $(awk '$1 == "rss" { r = $2 } $1 == "cache" { c = $2 } END { print r + 0, c + 0 }' "$_cg/memory.stat")
    [ "$1" -gt "$peak_rss" ] && peak_rss=$1
    [ "$2" -gt "$peak_cache" ] && peak_cache=$2
    sleep 0.5
  done
  wait "$child"
  st=$?
  child=
}

# exit status in words
status_text() {
  case $1 in
    0) echo "0 (ok)" ;;
    125) echo "125 (could not join the cgroup)" ;;
    137) echo "137 (killed by SIGKILL)" ;;
    1) echo "1 (runtime failure)" ;;
    2) echo "2 (usage or config error)" ;;
    *) if [ "$1" -gt 128 ]; then echo "$1 (killed by signal $(($1 - 128)))"; else echo "$1"; fi ;;
  esac
}

report_field() { # LOG PATTERN: the report line's value, after the label
  sed -n "s/^$2 *//p" "$1" | head -n 1
}

cpu=$(awk -F': *' '/^model name|^Hardware|^Processor/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
echo "date:      $(date '+%Y-%m-%d %H:%M:%S %z')"
echo "kernel:    $(uname -r)"
echo "cpu:       ${cpu:-$(uname -m)}, $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') online"
echo "swap dir:  $swapdir: $(df -T "$swapdir" 2>/dev/null | awk 'NR == 2 { print $2 " (" $1 " on " $NF ")" }')"
echo "command:   $cmdline"
echo

# --- 1. constrained run -----------------------------------------------------
echo "constrained run: cgroup $cg"
echo "  limit              memory.limit_in_bytes $limit_b ($(mib "$limit_b")); $memsw"
echo "  command            $bin train $model --window $window --batch-size $batch --iterations $iterations --eval-samples 0 --swap-dir $swapdir${data:+ --data $data} --save A.bin"
run "$cg" "$window" "$tmp/A.bin" "$tmp/A.log"
a_st=$st
a_max=$(cat "$cg/memory.max_usage_in_bytes")
a_fail=$(cat "$cg/memory.failcnt")
a_oom=$(oomkills "$cg")
a_msw=-
[ -f "$cg/memory.memsw.max_usage_in_bytes" ] && a_msw=$(cat "$cg/memory.memsw.max_usage_in_bytes")
a_mswfail=-
[ -f "$cg/memory.memsw.failcnt" ] && a_mswfail=$(cat "$cg/memory.memsw.failcnt")
echo "  exit status        $(status_text "$a_st")"
if [ "$a_oom" = - ]; then
  a_killed=unknown
  [ "$a_st" -eq 137 ] && a_killed="probably (SIGKILL; this kernel has no oom_kill counter)"
  echo "  OOM-killed         $a_killed"
else
  if [ "$a_oom" -gt 0 ]; then a_killed=yes; else a_killed=no; fi
  echo "  OOM-killed         $a_killed (memory.oom_control oom_kill $a_oom)"
fi
echo "  cgroup peak        $(mib "$a_max") (memory.max_usage_in_bytes, page cache included); memsw peak $(mib "$a_msw")"
a_hit=no
[ "$a_max" -ge "$limit_b" ] && a_hit=yes
[ -n "$memsw_b" ] && [ "$a_msw" != - ] && [ "$a_msw" -ge "$memsw_b" ] && a_hit=yes
echo "  limit reached      $a_hit (a peak equal to the limit: the kernel had to reclaim or fail)"
echo "  failcnt            $a_fail (memory.failcnt: times usage hit the limit; memsw.failcnt $a_mswfail)"
if [ "$a_hit" = yes ] && [ "$a_fail" = 0 ] && [ -n "$memsw_b" ]; then
  echo "                     (0 although the limit was reached: with memsw = limit the memsw counter"
  echo "                     fails first, and some kernels (6.18 here) count failcnt only for memory.failcnt)"
fi
echo "  sampled peaks      rss $(mib "$peak_rss"), cache $(mib "$peak_cache") (memory.stat every 0.5 s)"
echo "  after exit         cache $(mib "$(statv "$cg" cache)"), rss $(mib "$(statv "$cg" rss)"), dirty $(mib "$(statv "$cg" dirty)") (memory.stat)"
if [ "$a_st" -eq 0 ]; then
  echo "  trainer report     peak RSS $(report_field "$tmp/A.log" 'peak RSS'); iteration time $(report_field "$tmp/A.log" 'iteration time')"
  echo "                     resident tensors $(report_field "$tmp/A.log" 'resident tensors')"
else
  echo "  last output:"
  tail -n 8 "$tmp/A.log" | sed 's/^/    | /'
fi
remove_cg "$cg" && cg=

# --- 2. reference run, window all, no limit --------------------------------
echo
echo "reference run: --window all, cgroup $cgref without limit (measurement only)"
run "$cgref" all "$tmp/B.bin" "$tmp/B.log"
b_st=$st
b_max=$(cat "$cgref/memory.max_usage_in_bytes")
echo "  exit status        $(status_text "$b_st")"
echo "  cgroup peak        $(mib "$b_max") (memory.max_usage_in_bytes, page cache included)"
echo "  sampled peaks      rss $(mib "$peak_rss"), cache $(mib "$peak_cache") (memory.stat every 0.5 s)"
if [ "$b_st" -eq 0 ]; then
  echo "  trainer report     peak RSS $(report_field "$tmp/B.log" 'peak RSS'); iteration time $(report_field "$tmp/B.log" 'iteration time')"
else
  tail -n 8 "$tmp/B.log" | sed 's/^/    | /'
fi
remove_cg "$cgref" && cgref=

# --- 3. verdict -------------------------------------------------------------
echo
status=0
if [ "$a_st" -eq 0 ] && [ "$b_st" -eq 0 ]; then
  if cmp -s "$tmp/A.bin" "$tmp/B.bin"; then
    echo "weights            A.bin (window $window, limited) and B.bin (window all) byte-identical: yes"
  else
    echo "weights            A.bin (window $window, limited) and B.bin (window all) byte-identical: NO ($(cmp "$tmp/A.bin" "$tmp/B.bin" 2>&1 | head -n 1 | sed "s|$tmp/||g"))"
    status=1
  fi
else
  echo "weights            not compared (a run failed)"
  status=1
fi
if [ "$a_st" -eq 0 ]; then
  echo "result             window $window, batch $batch fits in $limit (peak $(mib "$a_max") with page cache, limit reached $a_hit, failcnt $a_fail)"
else
  echo "result             window $window, batch $batch does NOT fit in $limit: exit $(status_text "$a_st"), OOM-killed $a_killed, limit reached $a_hit, failcnt $a_fail"
  status=1
fi
exit $status
