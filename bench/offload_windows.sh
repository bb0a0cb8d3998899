#!/bin/sh
# offload_windows.sh - iteration time, memory and swap traffic of the offload
# engine per sliding-window size, and a bit-exactness check of the weights.
#
#   sh bench/offload_windows.sh [--model res/resnet18.ini] [--batches 10,32]
#       [--windows 1,2,4,all] [--iterations K] [--repeats R] [--markdown FILE]
#       [--swap-dir DIR] [--data DIR|synthetic] [--threads T] [--bin PATH]
#
# What: for every batch size B and window W (a number of steps, or "all":
# everything resident), R separate processes of
#   nntrainer-offload train MODEL --window W --batch-size B --iterations K
#       --eval-samples 0 --swap-dir DIR --save TMP/xxx.bin
# on Fashion-MNIST (the trainer's default data). One process per
# configuration, so the kernel's VmHWM (peak RSS) is per configuration. The
# repeats are interleaved: repeat 1 runs every configuration, then repeat 2,
# ..., so slow phases of a shared machine hit all configurations alike.
#
# How: each run's end-of-run report is parsed ("iteration time", "peak RSS",
# "window", "resident tensors", "stall", "swap traffic"). Per (B, W) the
# table shows the median over the repeats of: each run's median iteration
# time, its ratio to the "all" row of the same batch (measured in this same
# script run; "all" is added to --windows when missing), peak RSS, resident
# tensor peak, stall ms/iteration, MiB read/written per iteration. Every
# run's saved .bin is compared (cmp) with the first "all" run of its batch
# (same seed, data and iterations): "weights identical to all: yes/NO";
# the script exits 1 if any differs or any run fails.
#
# Limits: the first iteration (cold caches, first touch of the arena and
# the swap file) is not excluded: the report's median over all K iterations
# already damps a single slow iteration, which is acceptable for K >= 5 or
# so, but with very few iterations it weighs in. Peak RSS is VmHWM: it does
# not count the page cache (see bench/cgroup_memory.sh for that). Times are
# wall-clock on whatever else the machine runs; the header records date,
# kernel, CPU, load and the swap directory's filesystem so tables can be
# compared. Temp files (saved weights) live in a mktemp directory under
# $TMPDIR (or /tmp) and are removed on exit, also on failure or ^C.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
quote_cmdline "$0" "$@"

model=res/resnet18.ini
batches=10,32
windows=1,2,4,all
iterations=12
repeats=3
markdown=
swapdir=${TMPDIR:-/tmp}
data=
threads=
bin=$root/build/app/nntrainer-offload

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "offload_windows.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --model|--batches|--windows|--iterations|--repeats|--markdown|--swap-dir|--data|--threads|--bin)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case $1 in
        --model) model=$2 ;;
        --batches) batches=$2 ;;
        --windows) windows=$2 ;;
        --iterations) iterations=$2 ;;
        --repeats) repeats=$2 ;;
        --markdown) markdown=$2 ;;
        --swap-dir) swapdir=$2 ;;
        --data) data=$2 ;;
        --threads) threads=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument '$1' (--help for usage)" ;;
  esac
done

isnum "$iterations" || die "--iterations: expected a positive integer, got '$iterations'"
isnum "$repeats" || die "--repeats: expected a positive integer, got '$repeats'"
check_model_and_bin
[ -d "$swapdir" ] || die "no swap directory '$swapdir'"

batches=$(printf '%s' "$batches" | tr ',' ' ')
windows=$(printf '%s' "$windows" | tr ',' ' ')
for b in $batches; do isnum "$b" || die "--batches: bad batch size '$b'"; done
[ -n "$batches" ] || die "--batches: empty"
has_all=no
for w in $windows; do
  case $w in
    all) has_all=yes ;;
    *) isnum "$w" || die "--windows: expected N or 'all', got '$w'" ;;
  esac
done
[ "$has_all" = yes ] || windows="$windows all"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nto-bench.XXXXXX") || die "mktemp failed"
child=
cleanup() {
  # a trainer still running (interrupted): stop it by its pid, then clean up
  [ -n "$child" ] && kill "$child" 2>/dev/null && wait "$child" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

results=$tmp/results   # batch window repeat status med rss resident stall read written reported-window
: >"$results"

# --- header --------------------------------------------------------------
cpu=$(awk -F': *' '/^model name|^Hardware|^Processor/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
[ -n "$cpu" ] || cpu=$(uname -m)
ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')
fs=$(df -T "$swapdir" 2>/dev/null | awk 'NR == 2 { print $2 " (" $1 " on " $NF ")" }')
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
hdr=$tmp/header
{
  echo "date:      $(date '+%Y-%m-%d %H:%M:%S %z')"
  echo "kernel:    $(uname -r)"
  echo "cpu:       $cpu, $ncpu online"
  echo "load:      $load (1/5/15 min, at start)"
  echo "swap dir:  $swapdir: $fs"
  echo "command:   $cmdline"
  echo "each run:  $bin train $model --window W --batch-size B --iterations $iterations --eval-samples 0 --swap-dir $swapdir${data:+ --data $data}${threads:+ --threads $threads} --save TMP/x.bin"
  echo "repeats:   $repeats, interleaved; medians over repeats; iteration time = each run's median over all $iterations iterations (warm-up included)"
} >"$hdr"
cat "$hdr"
echo

# --- runs ----------------------------------------------------------------
# parse REPORT: print "med rss resident stall read written window"
# (MiB, ms; "-" where the report has no such line, as with --window all)
parse() {
  awk '
    function mib(v, u) {
      if (u ~ /^GiB/) return v * 1024
      if (u ~ /^KiB/) return v / 1024
      return v + 0
    }
    BEGIN { med = rss = res = stall = rd = wr = win = "-" }
    /^iteration time / { med = $4 }
    /^peak RSS / { rss = sprintf("%.1f", mib($3, $4)) }
    /^window / { win = ($2 == "all") ? "all" : $2 }
    /^resident tensors / { res = sprintf("%.1f", mib($4, $5)) }
    /^stall / { stall = $2 }
    /^swap traffic / { rd = $3; wr = $6 }
    END { print med, rss, res, stall, rd, wr, win }
  ' "$1"
}

# Compare every saved .bin of batch $1 with the reference (the first
# "all" run of that batch) as soon as the reference exists, then delete it:
# the weights are 48 MiB a run. Verdicts: files same-bB-wW / differ-bB-wW.
ident=$tmp/ident
check_bins() {
  ref=$tmp/ref-b$1.bin
  if [ ! -f "$ref" ]; then
    for f in "$tmp/b$1-wall-r"*.bin; do
      [ -f "$f" ] && { mv "$f" "$ref"; : >"$tmp/same-b$1-wall"; break; }
    done
  fi
  [ -f "$ref" ] || return 0
  for f in "$tmp/b$1-w"*.bin; do
    [ -f "$f" ] || continue
    cw=${f#"$tmp/b$1-w"}; cw=${cw%-r*.bin}
    if cmp -s "$ref" "$f"; then
      : >"$tmp/same-b$1-w$cw"
    else
      : >"$tmp/differ-b$1-w$cw"
      echo "    weights differ from window all: ${f#"$tmp/"}: $(cmp "$ref" "$f" 2>&1 | head -n 1 | sed "s|$tmp/||g")"
    fi
    rm -f "$f"
  done
}

nrun=0
total=0
for b in $batches; do for w in $windows; do total=$((total + 1)); done; done
total=$((total * repeats))
failed=0
r=1
while [ "$r" -le "$repeats" ]; do
  for b in $batches; do
    for w in $windows; do
      nrun=$((nrun + 1))
      out=$tmp/b$b-w$w-r$r
      printf '[%d/%d] repeat %d batch %s window %s ... ' "$nrun" "$total" "$r" "$b" "$w"
      set -- train "$model" --window "$w" --batch-size "$b" \
        --iterations "$iterations" --eval-samples 0 --swap-dir "$swapdir" \
        --save "$out.bin"
      [ -n "$data" ] && set -- "$@" --data "$data"
      [ -n "$threads" ] && set -- "$@" --threads "$threads"
      # in the background so that a signal interrupts `wait` at once
      "$bin" "$@" >"$out.log" 2>&1 &
      child=$!
      wait "$child"
      st=$?
      child=
      rm -f "$out.safetensors"
      if [ "$st" -ne 0 ] || ! grep -q '^iteration time ' "$out.log"; then
        echo "FAILED (exit $st)"
        sed 's/^/    | /' "$out.log" | tail -n 15
        failed=$((failed + 1))
        echo "$b $w $r fail - - - - - - -" >>"$results"
        rm -f "$out.bin"
        continue
      fi
      # shellcheck disable=SC2046 # seven fields, split on purpose
      set -- $(parse "$out.log")
      echo "$1 ms, peak RSS $2 MiB"
      echo "$b $w $r ok $*" >>"$results"
      rm -f "$out.log"
      check_bins "$b"
    done
  done
  r=$((r + 1))
done

# --- weights: per batch, the verdicts are in $tmp/ident --------------
verdicts() {
  differ=0
  : >"$ident"
  for b in $batches; do
    for w in $windows; do
      if [ -f "$tmp/differ-b$b-w$w" ]; then v=NO
      elif [ -f "$tmp/same-b$b-w$w" ]; then v=yes
      else v=-
      fi
      [ "$v" = yes ] || differ=$((differ + 1))
      echo "$b $w $v" >>"$ident"
    done
  done
}
verdicts
rm -f "$tmp"/*.bin

# --- table ---------------------------------------------------------------
table=$tmp/table
awk -v order="$windows" -v border="$batches" -v md="$tmp/md" '
  function median(key, k,   n, i, j, t, a) {
    n = cnt[key, k]
    if (n == 0) return "-"
    for (i = 1; i <= n; i++) a[i] = val[key, k, i]
    for (i = 2; i <= n; i++) {          # insertion sort (mawk has no asort)
      t = a[i]
      for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
      a[j + 1] = t
    }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function fmt(v) { return (v == "-") ? "-" : sprintf("%.1f", v) }
  FILENAME ~ /ident$/ { same[$1, $2] = $3; next }
  {
    key = $1 SUBSEP $2
    runs[key]++
    if ($4 != "ok") { fails[key]++; next }
    for (k = 5; k <= 10; k++)
      if ($k != "-") val[key, k, ++cnt[key, k]] = $k + 0
    if ($11 != $2) rep[key] = $11
  }
  END {
    nb = split(border, B, " "); nw = split(order, W, " ")
    h = sprintf("%5s %6s %11s %8s %9s %9s %8s %9s %9s %s", "batch", "window",
                "iter ms", "vs all", "RSS MiB", "resid MiB", "stall ms",
                "read MiB", "write MiB", "weights identical to all")
    print h
    print "| batch | window | iteration ms (median) | vs all | peak RSS MiB | resident tensors peak MiB | stall ms/iter | read MiB/iter | written MiB/iter | weights identical to all |" > md
    print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|" > md
    for (i = 1; i <= nb; i++) {
      allmed = median(B[i] SUBSEP "all", 5)
      for (j = 1; j <= nw; j++) {
        key = B[i] SUBSEP W[j]
        m = median(key, 5)
        ratio = (m == "-" || allmed == "-" || allmed == 0) ? "-" : sprintf("%.2fx", m / allmed)
        s = same[B[i], W[j]]
        if (s == "") s = "-"
        note = ""
        if (fails[key]) note = note sprintf(" (%d of %d runs failed)", fails[key], runs[key])
        if (key in rep) note = note " (report says window " rep[key] ")"
        printf "%5s %6s %11s %8s %9s %9s %8s %9s %9s %s%s\n", B[i], W[j],
               fmt(m), ratio, fmt(median(key, 6)), fmt(median(key, 7)),
               fmt(median(key, 8)), fmt(median(key, 9)), fmt(median(key, 10)), s, note
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s%s |\n", B[i], W[j],
               fmt(m), ratio, fmt(median(key, 6)), fmt(median(key, 7)),
               fmt(median(key, 8)), fmt(median(key, 9)), fmt(median(key, 10)), s, note > md
      }
    }
  }
' "$tmp/ident" "$results" >"$table"

echo
cat "$hdr"
echo
cat "$table"
echo "(medians over $repeats repeats; RSS = kernel VmHWM; resident/stall/traffic not reported for window all: '-')"

if [ -n "$markdown" ]; then
  {
    # shellcheck disable=SC2016 # literal backquotes for markdown
    sed 's/^\([a-z ]*\): *\(.*\)$/- \1: `\2`/' "$hdr"
    echo
    cat "$tmp/md"
    echo
    echo "Medians over $repeats repeats; peak RSS is the kernel's VmHWM; resident tensors, stall and swap traffic are not reported for window all (\`-\`)."
  } >"$markdown" || { echo "offload_windows.sh: cannot write $markdown" >&2; exit 1; }
  echo "markdown table written to $markdown"
fi

status=0
if [ "$failed" -gt 0 ]; then
  echo "FAILED: $failed run(s) failed" >&2
  status=1
fi
if [ "$differ" -gt 0 ]; then
  echo "FAILED: weights of $differ configuration(s) not identical to (or not comparable with) window all" >&2
  status=1
fi
exit $status
