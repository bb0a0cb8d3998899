#!/bin/sh
# cgroup_memory.sh - does a training run fit a memory limit with the page
# cache counted? And are its weights those of an all-resident run?
#
#   sh bench/cgroup_memory.sh [--limit SIZE] [--memory-budget SIZE]
#       [--model res/resnet18.ini] [--batch 32] [--window N|auto|all]
#       [--iterations K] [--runs R] [--extra "ARGS"] [--strict]
#       [--swap-dir DIR] [--data DIR|synthetic] [--bin PATH]
#
# What: VmHWM (the trainer's "peak RSS") counts only the process's own
# pages; a board with N MiB of RAM must also hold the page cache the run
# causes (dataset reads, saved weights, any buffered swap I/O). The kernel's
# memory cgroup charges both, so this script runs the training inside a
# cgroup-v1 memory cgroup with a hard limit and reads what the kernel saw.
#
# Without --memory-budget the run is `--window W` (default 1) inside a
# limit of --limit (default 64M). With --memory-budget SIZE the run gets
# `--memory-budget SIZE` and no --window unless --window is given (the
# budget alone: the largest window that fits), and the limit defaults to
# the budget: does the budget hold for the whole cgroup?
#
# How (as root, cgroup v1 memory controller at /sys/fs/cgroup/memory):
#  1. mkdir /sys/fs/cgroup/memory/nto-bench-$$-I; memory.limit_in_bytes =
#     the limit, and memory.memsw.limit_in_bytes too where that file exists,
#     so the run cannot escape to swap;
#  2. a child shell writes its own pid to the cgroup's cgroup.procs and then
#     execs `nntrainer-offload train MODEL [--window W] [--memory-budget S]
#     --batch-size B --iterations K --eval-samples 0 --swap-dir DIR
#     [--data D] --save A.bin ARGS` (ARGS: --extra's words, last, so that
#     they override the options before them, e.g. "--eval-samples 2000";
#     from then on all of its memory, page cache included, is charged
#     there); while it runs, memory.stat (rss, cache) and the trainer's
#     VmHWM (/proc/PID/status) are sampled every 0.5 s;
#  3. after it exits: exit status, memory.max_usage_in_bytes (peak, cache
#     included), memory.failcnt (how often usage hit the limit and the
#     kernel had to reclaim), memory.oom_control's oom_kill counter (was the
#     process OOM-killed?), memory.stat's cache and rss; the cgroup is
#     removed. With --runs R, steps 1-3 are repeated R times, each run in
#     a fresh cgroup (I = 1..R), one line per run, then a summary line:
#     "R runs: K completed within the limit, J OOM-killed, weights
#     identical to all resident in K'; peak (cache included)
#     min/median/max, VmHWM min/median/max" (VmHWM: the completed runs'
#     report or the last sample of it, the larger; the budget, when given,
#     is compared with it). A run's weights are kept only while they
#     differ from an earlier run's;
#  4. once: the same training with --window all --save B.bin (no budget,
#     the same ARGS), outside the limited cgroup: in a second cgroup
#     nto-bench-$$-ref that has no limit, only so that its peak is measured
#     the same way (page cache included);
#  5. cmp A.bin B.bin (the project's claim: any window gives byte-identical
#     weights).
# Exit status: 0 when every constrained run succeeded, its weights are
# B.bin's and (with a budget) no VmHWM exceeded the budget; 1 otherwise, 2
# usage error. Where no cgroup can be made (not root, no
# writable cgroup-v1 memory controller, cgroup v2 only) it prints
# "skipped: ..." and exits 0, or 77 with --strict. The cgroups and temp files
# are removed at the end, also on failure or interruption.
#
# Limits: page-cache pages that another cgroup had already cached (e.g. the
# dataset files read by an earlier run, also run 1 of --runs for runs 2..R;
# the binary and its libraries) stay charged to that cgroup and are
# not counted here; page cache is reclaimable, so a peak close to the limit
# with a high failcnt means "fits, with reclaim", not "needs more". The
# sampled rss/cache split and a killed run's VmHWM are 0.5 s samples, not
# true peaks; the VmHWM the trainer reports at exit can lag the true peak
# too (0.3 MiB below a VmRSS sampled during the run, on 6.18 with 2 CPUs:
# the kernel's high-water mark is updated now and then, not at every
# page). With memsw
# set equal to the limit, the memsw counter is the one that fails first, and
# kernels that count failcnt only on the memory counter (6.18 here) then
# show failcnt 0: "limit reached" (peak == limit) is reported beside it.
# cgroup v2
# (memory.max/memory.peak) is not supported.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
quote_cmdline "$0" "$@"

limit=
budget=
model=res/resnet18.ini
batch=32
window=
iterations=5
runs=1
extra=
strict=no
swapdir=${TMPDIR:-/tmp}
data=
bin=$root/build/app/nntrainer-offload
cgbase=/sys/fs/cgroup/memory

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "cgroup_memory.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --limit|--memory-budget|--model|--batch|--window|--iterations|--runs|--extra|--swap-dir|--data|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --limit) limit=$2 ;;
        --memory-budget) budget=$2 ;;
        --model) model=$2 ;;
        --batch) batch=$2 ;;
        --window) window=$2 ;;
        --iterations) iterations=$2 ;;
        --runs) runs=$2 ;;
        --extra) extra=$2 ;;
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
isnum "$runs" || die "--runs: expected a positive integer, got '$runs'"
case $window in
  ''|all|auto) ;;
  *) isnum "$window" || die "--window: expected N, 'auto' or 'all', got '$window'" ;;
esac
if [ -n "$budget" ]; then
  num=${budget%[KkMmGg]}
  isnum "$num" || die "--memory-budget: expected bytes or a number with K, M or G, got '$budget'"
  [ -n "$limit" ] || limit=$budget
else
  [ -n "$window" ] || window=1
  [ -n "$limit" ] || limit=64M
fi
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

cg=
cgref=$cgbase/nto-bench-$$-ref
tmp=
child=

mib() { awk -v b="$1" 'BEGIN { if (b == "" || b == "-") print "-"; else printf "%.1f MiB", b / 1048576 }'; }
# bytes, one a line on stdin -> "min / median / max" in MiB ("-" when none)
mmm() {
  sort -n | awk '{ v[NR] = $1 } END {
    if (!NR) { print "-"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f / %.1f / %.1f MiB", v[1] / 1048576, m / 1048576, v[NR] / 1048576 }'
}
# "47.5 MiB" (as the report prints sizes) -> bytes
tobytes() {
  echo "$1" | awk '{ f = $2 == "GiB" ? 1073741824 : $2 == "KiB" ? 1024 : $2 == "B" ? 1 : 1048576
    printf "%.0f\n", $1 * f }'
}

# kill whatever is left in cgroup $1 (only our own runs are there), rmdir it
remove_cg() {
  [ -n "$1" ] && [ -d "$1" ] || return 0
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

mkdir "$cgref" 2>/dev/null || { cgref=; skip "cannot create a cgroup in $cgbase"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nto-cgroup.XXXXXX") || die "mktemp failed"

# make_cg DIR: the limited cgroup, sets limit_b, memsw_b, memsw
make_cg() {
  mkdir "$1" 2>/dev/null || die "cannot create the cgroup $1"
  cg=$1
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
    memsw="no memory.memsw.limit_in_bytes (swap accounting off): the run may use swap"
  fi
}

# --- run: run CGROUP SAVE LOG [MEMORY OPTIONS] -> st, peak_rss, peak_cache, hwm
statv() { awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "-" }' "$1/memory.stat"; }
oomkills() {
  awk '$1 == "oom_kill" { print $2; f = 1 } END { if (!f) print "-" }' "$1/memory.oom_control"
}
run() {
  _cg=$1 _save=$2 _log=$3
  shift 3
  set -- train "$model" "$@" --batch-size "$batch" --iterations "$iterations" \
    --eval-samples 0 --swap-dir "$swapdir"
  [ -n "$data" ] && set -- "$@" --data "$data"
  set -- "$@" --save "$_save"
  # shellcheck disable=SC2086 # --extra's words
  [ -n "$extra" ] && set -- "$@" $extra
  # The child moves itself into the cgroup, then becomes the trainer.
  sh -c 'echo $$ >"$0/cgroup.procs" || exit 125; exec "$@"' "$_cg" "$bin" "$@" \
    >"$_log" 2>&1 &
  child=$!
  peak_rss=0 peak_cache=0 hwm=-
  while kill -0 "$child" 2>/dev/null; do
    # shellcheck disable=SC2046 # two numbers
    set -- $(awk '$1 == "rss" { r = $2 } $1 == "cache" { c = $2 } END { print r + 0, c + 0 }' "$_cg/memory.stat")
    [ "$1" -gt "$peak_rss" ] && peak_rss=$1
    [ "$2" -gt "$peak_cache" ] && peak_cache=$2
    _h=$(awk '$1 == "VmHWM:" { print $2 * 1024 }' "/proc/$child/status" 2>/dev/null)
    [ -n "$_h" ] && hwm=$_h
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

# the memory options of the constrained run, and the same in words
memopts=
[ -n "$window" ] && memopts="--window $window"
[ -n "$budget" ] && memopts="${memopts:+$memopts }--memory-budget $budget"
what=${budget:+budget $budget}
[ -n "$window" ] && what="window $window${what:+, $what}"
budget_b=
if [ -n "$budget" ]; then
  budget_b=$(echo "$budget" | awk '{ n = $0 + 0; u = substr($0, length($0))
    f = u ~ /[Kk]/ ? 1024 : u ~ /[Mm]/ ? 1048576 : u ~ /[Gg]/ ? 1073741824 : 1
    printf "%.0f\n", n * f }')
fi

cpu=$(awk -F': *' '/^model name|^Hardware|^Processor/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
echo "date:      $(date '+%Y-%m-%d %H:%M:%S %z')"
echo "kernel:    $(uname -r)"
echo "cpu:       ${cpu:-$(uname -m)}, $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') online"
echo "swap dir:  $swapdir: $(df -T "$swapdir" 2>/dev/null | awk 'NR == 2 { print $2 " (" $1 " on " $NF ")" }')"
echo "command:   $cmdline"
echo

# --- 1. constrained runs ----------------------------------------------------
# A run's weights: run I's A.bin is kept as $tmp/A-I.bin only while it
# differs from every kept one (the first completed run's is always kept);
# wfile_I names the kept file holding run I's weights.
ok=0 ooms=0 other=0 over=0
: >"$tmp/peaks" && : >"$tmp/hwms"
kept=
i=1
while [ "$i" -le "$runs" ]; do
  make_cg "$cgbase/nto-bench-$$-$i"
  if [ "$i" -eq 1 ]; then
    echo "constrained run$([ "$runs" -gt 1 ] && echo "s ($runs, each in a fresh cgroup)"): cgroup $cg"
    echo "  limit              memory.limit_in_bytes $limit_b ($(mib "$limit_b")); $memsw"
    echo "  command            $bin train $model $memopts --batch-size $batch --iterations $iterations --eval-samples 0 --swap-dir $swapdir${data:+ --data $data} --save A.bin${extra:+ $extra}"
  fi
  # shellcheck disable=SC2086 # the memory options' words
  run "$cg" "$tmp/A.bin" "$tmp/A-$i.log" $memopts
  a_st=$st
  a_max=$(cat "$cg/memory.max_usage_in_bytes")
  a_fail=$(cat "$cg/memory.failcnt")
  a_oom=$(oomkills "$cg")
  a_msw=-
  [ -f "$cg/memory.memsw.max_usage_in_bytes" ] && a_msw=$(cat "$cg/memory.memsw.max_usage_in_bytes")
  a_mswfail=-
  [ -f "$cg/memory.memsw.failcnt" ] && a_mswfail=$(cat "$cg/memory.memsw.failcnt")
  if [ "$a_oom" = - ]; then
    a_killed=unknown
    [ "$a_st" -eq 137 ] && a_killed="probably (SIGKILL; this kernel has no oom_kill counter)"
  elif [ "$a_oom" -gt 0 ]; then
    a_killed=yes
  else
    a_killed=no
  fi
  a_hit=no
  [ "$a_max" -ge "$limit_b" ] && a_hit=yes
  [ -n "$memsw_b" ] && [ "$a_msw" != - ] && [ "$a_msw" -ge "$memsw_b" ] && a_hit=yes
  echo "$a_max" >>"$tmp/peaks"
  a_hwm=$hwm a_hwm_src=sampled a_more=
  if [ "$a_st" -eq 0 ]; then
    ok=$((ok + 1))
    r=$(report_field "$tmp/A-$i.log" 'peak RSS' | sed 's/ *(.*//')
    if [ -n "$r" ]; then
      # the larger of the report's (0.1 MiB) and the last sample: the
      # report, read at the end, was seen 0.3 MiB below a sampled VmRSS
      a_hwm=$(awk -v s="$hwm" -v r="$(tobytes "$r")" 'BEGIN {
        if (s != "-" && s > r) print s " sampled"; else print r " report" }')
      a_hwm_src=${a_hwm#* } a_hwm=${a_hwm% *}
    fi
    a_more=", region $(report_field "$tmp/A-$i.log" 'resident tensors' | sed -n 's/.*in a region of \([0-9.]* [KMG]iB\).*/\1/p'), iteration median $(report_field "$tmp/A-$i.log" 'iteration time' | sed -n 's/^median \([0-9.]* ms\).*/\1/p')"
    [ "$a_hwm" != - ] && echo "$a_hwm" >>"$tmp/hwms"
    # the weights: the same as a kept run's, else kept
    w=
    for k in $kept; do
      cmp -s "$tmp/A.bin" "$tmp/A-$k.bin" && { w=$k; break; }
    done
    if [ -z "$w" ]; then
      mv "$tmp/A.bin" "$tmp/A-$i.bin"
      kept="$kept $i"
      w=$i
    fi
    eval "wfile_$i=$w"
  else
    case $a_killed in yes|probably*) ooms=$((ooms + 1)) ;; *) other=$((other + 1)) ;; esac
  fi
  rm -f "$tmp/A.bin"
  a_over=
  if [ -n "$budget_b" ] && [ "$a_hwm" != - ] && [ "$a_hwm" -gt "$budget_b" ]; then
    over=$((over + 1))
    a_over=" ABOVE the budget"
  fi
  if [ "$runs" -eq 1 ]; then
    echo "  exit status        $(status_text "$a_st")"
    if [ "$a_oom" = - ]; then
      echo "  OOM-killed         $a_killed"
    else
      echo "  OOM-killed         $a_killed (memory.oom_control oom_kill $a_oom)"
    fi
    echo "  cgroup peak        $(mib "$a_max") (memory.max_usage_in_bytes, page cache included); memsw peak $(mib "$a_msw")"
    echo "  limit reached      $a_hit (a peak equal to the limit: the kernel had to reclaim or fail)"
    echo "  failcnt            $a_fail (memory.failcnt: times usage hit the limit; memsw.failcnt $a_mswfail)"
    if [ "$a_hit" = yes ] && [ "$a_fail" = 0 ] && [ -n "$memsw_b" ]; then
      echo "                     (0 although the limit was reached: with memsw = limit the memsw counter"
      echo "                     fails first, and some kernels (6.18 here) count failcnt only for memory.failcnt)"
    fi
    echo "  sampled peaks      rss $(mib "$peak_rss"), cache $(mib "$peak_cache") (memory.stat every 0.5 s)"
    echo "  after exit         cache $(mib "$(statv "$cg" cache)"), rss $(mib "$(statv "$cg" rss)"), dirty $(mib "$(statv "$cg" dirty)") (memory.stat)"
    if [ "$a_st" -eq 0 ]; then
      echo "  trainer report     peak RSS $(report_field "$tmp/A-$i.log" 'peak RSS')$([ "$a_hwm_src" = sampled ] && echo ", sampled VmHWM $(mib "$a_hwm")")$a_over; iteration time $(report_field "$tmp/A-$i.log" 'iteration time')"
      echo "                     resident tensors $(report_field "$tmp/A-$i.log" 'resident tensors')"
    else
      echo "  VmHWM              $(mib "$a_hwm") (sampled every 0.5 s)$a_over"
      echo "  last output:"
      tail -n 8 "$tmp/A-$i.log" | sed 's/^/    | /'
    fi
  else
    printf '  run %2d: exit %s, OOM-killed %s, peak %s (memsw %s), limit reached %s, failcnt %s/%s, VmHWM %s (%s)%s%s\n' \
      "$i" "$(status_text "$a_st")" "$a_killed" "$(mib "$a_max")" "$(mib "$a_msw")" \
      "$a_hit" "$a_fail" "$a_mswfail" "$(mib "$a_hwm")" "$a_hwm_src" "$a_over" "$a_more"
    [ "$a_st" -eq 0 ] || tail -n 4 "$tmp/A-$i.log" | sed 's/^/    | /'
  fi
  # the plan the trainer printed, once
  if [ "$a_st" -eq 0 ] && [ -z "${plan_shown:-}" ]; then
    plan_shown=yes
    grep '^offload:\|^tuner:\|^planned memory' "$tmp/A-$i.log" | head -n 8 | sed 's/^/  (run '"$i"') /'
  fi
  remove_cg "$cg" && cg=
  i=$((i + 1))
done

# --- 2. reference run, window all, no limit --------------------------------
echo
echo "reference run: --window all, cgroup $cgref without limit (measurement only)"
run "$cgref" "$tmp/B.bin" "$tmp/B.log" --window all
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
same=0 same_kept=
if [ "$b_st" -eq 0 ]; then
  for k in $kept; do
    cmp -s "$tmp/A-$k.bin" "$tmp/B.bin" && same_kept="$same_kept $k"
  done
  i=1
  while [ "$i" -le "$runs" ]; do
    w=$(eval "echo \${wfile_$i:-}")
    case " $same_kept " in *" $w "*) [ -n "$w" ] && same=$((same + 1)) ;; esac
    i=$((i + 1))
  done
fi
if [ "$b_st" -ne 0 ]; then
  echo "weights            not compared (the reference run failed)"
  status=1
elif [ "$ok" -eq 0 ]; then
  echo "weights            not compared (no constrained run completed)"
  status=1
elif [ "$same" -eq "$ok" ]; then
  echo "weights            A.bin ($what, limited) and B.bin (window all) byte-identical: yes$([ "$runs" -gt 1 ] && echo " ($same of $ok completed runs)")"
else
  echo "weights            A.bin ($what, limited) and B.bin (window all) byte-identical: NO in $((ok - same)) of $ok completed runs (e.g. $(for k in $kept; do case " $same_kept " in *" $k "*) ;; *) cmp "$tmp/A-$k.bin" "$tmp/B.bin" 2>&1 | head -n 1 | sed "s|$tmp/||g"; break ;; esac; done))"
  status=1
fi
[ "$ok" -eq "$runs" ] || status=1
[ "$over" -eq 0 ] || status=1
if [ "$runs" -gt 1 ]; then
  echo "summary            $runs runs: $ok completed within the limit, $ooms OOM-killed$([ "$other" -gt 0 ] && echo ", $other failed otherwise"), weights identical to all resident in $same; peak (cache included) min/median/max $(mmm <"$tmp/peaks"), VmHWM min/median/max $(mmm <"$tmp/hwms")$([ -n "$budget_b" ] && echo "; VmHWM above the budget in $over")"
elif [ "$a_st" -eq 0 ]; then
  echo "result             $what, batch $batch fits in $limit (peak $(mib "$a_max") with page cache, limit reached $a_hit, failcnt $a_fail)$([ "$over" -gt 0 ] && echo "; VmHWM ABOVE the budget")"
else
  echo "result             $what, batch $batch does NOT fit in $limit: exit $(status_text "$a_st"), OOM-killed $a_killed, limit reached $a_hit, failcnt $a_fail"
fi
exit $status
