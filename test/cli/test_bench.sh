#!/bin/sh
# `bench` contract: a small run of three windows with CSV, JSON and SVG
# output (columns, schema, weights identical to --window all), usage errors
# (exit 2 naming the option), a failing configuration (exit 1 naming it),
# and no temp or swap files left behind.
# usage: test_bench.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
mkdir "$tmp/swap" "$tmp/tmpdir"
# bench's own temp directory goes under $TMPDIR: checked empty at the end
export TMPDIR="$tmp/tmpdir"

# lib.sh's wait_for; this script's own pass, fail and expect (below) take
# the place of lib.sh's
# shellcheck source=test/cli/lib.sh
. "$(dirname "$0")/lib.sh"
pass() { passes=$((passes + 1)); }
fail() { # fail NAME MESSAGE [FILE shown indented]
  echo "FAIL $1: $2"
  [ $# -ge 3 ] && sed 's/^/  /' "$3"
  fails=$((fails + 1))
}

expect() { # expect NAME STATUS PATTERN -- command...
  name=$1 want=$2 pat=$3
  shift 4
  "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$tmp/out"; then
    fail "$name" "status $got (want $want), output:" "$tmp/out"
  else
    pass
  fi
}

# Where the swap directory's filesystem refuses O_DIRECT (tmpfs on older
# kernels), swap through the page cache, as test_cli.sh does.
direct=
"$exe" train test/data/nets/tiny_resnet.ini --data synthetic --iterations 1 \
  --eval-samples 0 --window 1 --swap-dir "$tmp/swap" >"$tmp/probe" 2>&1 ||
  { grep -q "O_DIRECT" "$tmp/probe" && direct=--no-direct; }

net=test/data/nets/tiny_resnet.ini
expect help 0 "--windows LIST" -- "$exe" bench --help
expect run 0 "weights compared with the all run" -- "$exe" bench "$net" \
  --windows 1,2,all --iterations 3 --warmup 1 --csv "$tmp/r.csv" \
  --json "$tmp/r.json" --plot "$tmp/r.svg" --swap-dir "$tmp/swap" $direct
cp "$tmp/out" "$tmp/run.out"
grep -q "^command: nntrainer-offload bench $net --windows 1,2,all" "$tmp/run.out" &&
  grep -q "MiB/s" "$tmp/run.out" && pass ||
  fail header "no command or bandwidth line" "$tmp/run.out"
# with `all` in the list: the configuration of the smallest peak RSS whose
# median is within 1.10x of all's (all itself when none is)
grep -Eq "^smallest peak RSS within 1.10x of all resident: (1|2|all) \([0-9.]+ MiB, ratio [0-9.]+\)$" "$tmp/run.out" &&
  pass || fail smallest "no smallest-within line" "$tmp/run.out"

# CSV: the documented header, three rows, all ok and identical to `all`.
hdr="config,status,window,peak_rss_mib,resident_peak_mib,iteration_ms_median,iteration_ms_p90,stall_ms_per_iteration,read_mib_per_iteration,written_mib_per_iteration,floor_ms,ratio,region_floor_ms,region_ratio,iterations_per_epoch,written_mib_per_epoch,epoch_endurance_fraction,weights_identical"
if [ ! -f "$tmp/r.csv" ]; then
  fail csv "no CSV file" "$tmp/run.out"
else
  [ "$(head -n 1 "$tmp/r.csv")" = "$hdr" ] && pass ||
    fail csv_header "unexpected header" "$tmp/r.csv"
  [ "$(tail -n +2 "$tmp/r.csv" | wc -l)" -eq 3 ] && pass ||
    fail csv_rows "expected 3 data rows" "$tmp/r.csv"
  [ "$(tail -n +2 "$tmp/r.csv" | cut -d, -f1 | tr '\n' ' ')" = "1 2 all " ] &&
    pass || fail csv_configs "expected configs 1 2 all" "$tmp/r.csv"
  [ "$(tail -n +2 "$tmp/r.csv" | grep -c ',ok,.*,yes$')" -eq 3 ] && pass ||
    fail csv_identical "every row must be ok with weights identical = yes" "$tmp/r.csv"
fi

# JSON: the schema, with python3's json module where there is one.
if ! command -v python3 >/dev/null 2>&1; then
  echo "bench: skipping the JSON schema check (no python3)"
elif python3 - "$tmp/r.json" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
def num(x): return isinstance(x, (int, float)) and not isinstance(x, bool)
def integer(x): return isinstance(x, int) and not isinstance(x, bool)
assert set(d) == {"model", "batch", "iterations", "warmup", "rounds", "flash_endurance_tbw", "bandwidth",
                  "profile", "smallest_within_1_10", "configs"}, sorted(d)
assert d["profile"] is None, d["profile"]
assert isinstance(d["model"], str) and d["model"].endswith("tiny_resnet.ini")
assert integer(d["batch"]) and d["batch"] == 4
assert d["iterations"] == 3 and d["warmup"] == 1 and d["rounds"] == 1
bw = d["bandwidth"]
assert num(bw["read_mib_s"]) and bw["read_mib_s"] > 0, bw
assert num(bw["write_mib_s"]) and bw["write_mib_s"] > 0, bw
assert bw["block_bytes"] == 1048576 and bw["depth"] == 16, bw
assert isinstance(bw["direct"], bool), bw
keys = {"config", "status", "window", "recompute", "recompute_segments",
        "segment_convolutions", "peak_rss_mib", "resident_peak_mib",
        "iteration_ms_median", "iteration_ms_p90", "stall_ms_per_iteration",
        "read_mib_per_iteration", "written_mib_per_iteration", "iterations_per_epoch",
        "written_mib_per_epoch", "epoch_endurance_fraction", "floor_ms",
        "ratio", "ratios", "region_floor_ms", "region_ratio",
        "weights_identical"}
c = d["configs"]
assert isinstance(c, list) and len(c) == 3, c
assert [x["config"] for x in c] == ["1", "2", "all"], c
for x in c:
    assert set(x) == keys, sorted(x)
    assert x["status"] == "ok" and x["weights_identical"] == "yes", x
    assert x["recompute"] == "auto", x
    assert isinstance(x["recompute_segments"], bool), x
    for k in keys - {"config", "status", "window", "recompute", "recompute_segments",
                     "ratios", "weights_identical",
                     "region_floor_ms", "region_ratio"}:
        assert num(x[k]) and x[k] >= 0, (k, x)
    assert x["ratios"] == [x["ratio"]], x
# the region floor (from the runs' step times, their plans and the measured
# bandwidth): windowed runs only, and the ratio is the median against it
for x in c[:2]:
    assert num(x["region_floor_ms"]) and x["region_floor_ms"] > 0, x
    assert abs(x["region_ratio"] * x["region_floor_ms"] - x["iteration_ms_median"]) < 1e-2 * x["iteration_ms_median"], x
assert c[2]["region_floor_ms"] is None and c[2]["region_ratio"] is None, c[2]
assert c[0]["window"] == 1 and c[1]["window"] == 2 and c[2]["window"] == "all", c
assert c[0]["read_mib_per_iteration"] > 0 and c[2]["read_mib_per_iteration"] == 0, c
assert abs(c[2]["ratio"] - 1) < 1e-9, c[2]
# the smallest peak RSS within 1.10x of all's median (all included)
near = [x for x in c if x["iteration_ms_median"] <= 1.10 * c[2]["iteration_ms_median"]]
best = min(near, key=lambda x: (x["peak_rss_mib"], x["iteration_ms_median"]))
assert d["smallest_within_1_10"] == best["config"], (d["smallest_within_1_10"], best)
EOF
then
  pass
else
  fail json "schema check failed" "$tmp/py"
fi

# SVG: drawn when gnuplot is there, else a note and still success.
if command -v gnuplot >/dev/null 2>&1; then
  [ -s "$tmp/r.svg" ] && sed -n '1,3p' "$tmp/r.svg" | grep -q '^<svg' && pass ||
    fail svg "no SVG (or not starting with an svg element)" "$tmp/run.out"
else
  grep -q "no plot: gnuplot not found; install Debian's gnuplot-nox" "$tmp/run.out" &&
    pass || fail svg_note "no note about gnuplot" "$tmp/run.out"
fi

# --rounds 3: configurations interleaved (the order of the runs on stderr),
# each figure over the rounds, the ratio the median of the rounds' ratios,
# each round's weights compared, one round of weight files at a time.
expect rounds 0 "3 rounds, configurations interleaved" -- "$exe" bench "$net" \
  --windows 1,all --rounds 3 --iterations 2 --warmup 0 --json "$tmp/k.json" \
  --swap-dir "$tmp/swap" $direct
cp "$tmp/out" "$tmp/rounds.out"
order=$(sed -n 's/^bench: round \([0-9]\)\/3: window \([a-z0-9]*\) .*/\1\2/p' "$tmp/rounds.out" | tr '\n' ' ')
[ "$order" = "11 1all 21 2all 31 3all " ] && pass ||
  fail rounds_order "expected 1 then all in each of 3 rounds, got '$order'" "$tmp/rounds.out"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$tmp/k.json" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rounds"] == 3, d
one, al = d["configs"]
for x in (one, al):
    assert x["status"] == "ok" and x["weights_identical"] == "yes", x
    assert len(x["ratios"]) == 3 and all(r > 0 for r in x["ratios"]), x
    assert abs(x["ratio"] - sorted(x["ratios"])[1]) < 1e-3, x
assert al["ratios"] == [1.0, 1.0, 1.0], al
assert one["read_mib_per_iteration"] > 0, one
EOF
  [ $? -eq 0 ] && pass || fail rounds_json "rounds JSON check failed" "$tmp/py"
fi
expect rounds_zero 2 "rounds" -- "$exe" bench "$net" --rounds 0
expect rounds_many 2 "rounds" -- "$exe" bench "$net" --rounds 17

expect bad_list 2 "option --windows" -- "$exe" bench "$net" --windows 1,x
expect empty_entry 2 "option --windows" -- "$exe" bench "$net" --windows 1,,all
expect no_prefetch 2 "optional +auto, +cheap, +segments, +segments:N or +off" -- "$exe" bench "$net" --windows 1:time
expect unknown_option 2 "unknown option '--bogus'" -- "$exe" bench "$net" --bogus
expect bad_iterations 2 "option --iterations" -- "$exe" bench "$net" --iterations 0
expect no_model 2 "missing MODEL.ini" -- "$exe" bench
expect missing_model 2 "cannot open" -- "$exe" bench "$tmp/none.ini"
# a window train refuses (0) is refused before any run (exit 2); one that
# fails in its run (a budget below window 1's need) fails that run only
expect zero_window 2 "option --windows: window 0 in '0,all'" -- "$exe" bench \
  "$net" --windows 0,all --iterations 1 --warmup 0 --swap-dir "$tmp/swap" $direct
expect failing_config 1 "configuration '1@8K' failed" -- "$exe" bench "$net" \
  --windows 1@8K,all --iterations 1 --warmup 0 --swap-dir "$tmp/swap" $direct
grep -q "^1@8K .*failed" "$tmp/out" && grep -q "^all .* yes$" "$tmp/out" && pass ||
  fail failing_table "the table must show 1@8K failed and all ok" "$tmp/out"

# @SIZE: a run's own --memory-budget (a budget below the process's own
# memory fails that run, naming it; the others run, and without a budget
# `all` is fine).
expect budget_label 1 "8.0 KiB is below this process's own memory" -- "$exe" bench "$net" \
  --windows 1@8K,1@64M,all --iterations 2 --warmup 1 --swap-dir "$tmp/swap" $direct
grep -q "configuration '1@8K' failed" "$tmp/out" &&
  grep -q "^1@64M .* yes$" "$tmp/out" && grep -q "^all .* yes$" "$tmp/out" && pass ||
  fail budget_table "1@8K must fail, 1@64M and all run" "$tmp/out"
expect all_budget 2 "option --windows" -- "$exe" bench "$net" --windows all@64M

# +MODE: a run's own --recompute, --recompute for the others; what each run
# used is the recompute its train report names (bench's JSON).
expect recompute_label 0 "weights compared with the 1+off run" -- "$exe" bench \
  "$net" --windows 1+off,2,1+auto@64M,all+off --recompute off \
  --iterations 2 --warmup 0 --json "$tmp/m.json" --swap-dir "$tmp/swap" $direct
if command -v python3 >/dev/null 2>&1; then
  python3 - "$tmp/m.json" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["configs"]
assert [(x["config"], x["recompute"], x["weights_identical"]) for x in c] == [
    ("1+off", "off", "yes"), ("2", "off", "yes"), ("1+auto@64M", "auto", "yes"),
    ("all+off", "off", "yes")], c
assert [x["window"] for x in c] == [1, 2, 1, "all"], c
EOF
  [ $? -eq 0 ] && pass || fail recompute_json "recompute per configuration" "$tmp/py"
fi
# no `all` in the list (all+off is another label): no smallest-within line
grep -q "^smallest peak RSS" "$tmp/out" &&
  fail no_smallest "a smallest-within line without all in the list" "$tmp/out" || pass
expect bad_recompute_label 2 "+auto, +cheap, +segments, +segments:N or +off" -- "$exe" bench "$net" --windows 1+on
expect all_recompute_budget 2 "option --windows" -- "$exe" bench "$net" --windows all+off@64M
expect bad_recompute 2 "option --recompute: expected auto, cheap, segments, segments:N or off" -- \
  "$exe" bench "$net" --recompute sometimes
expect bad_budget 2 "option --windows" -- "$exe" bench "$net" --windows 1@lots

# --optimizer-state VALUE goes to every train run as it is: a value no
# train takes fails the run, and train's message names the option
expect optimizer_state 1 "optimizer-state" -- "$exe" bench "$net" \
  --windows all --iterations 1 --warmup 0 --optimizer-state not-a-mode \
  --swap-dir "$tmp/swap" $direct
grep -q "configuration 'all' failed" "$tmp/out" && pass ||
  fail optimizer_state_run "the run with --optimizer-state must fail" "$tmp/out"

# SIGINT during a run: the run is killed, bench removes its temporary
# directory and exits 130 (128 + 2) with no results (the check below finds
# $TMPDIR empty)
"$exe" bench "$net" --windows 1,all --iterations 100000 --warmup 0 \
  --swap-dir "$tmp/swap" $direct >"$tmp/sig.out" 2>&1 </dev/null &
pid=$!
wait_for "$tmp/sig.out" "window 1 \.\.\."
kill -INT "$pid"
n=0
while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 300 ]; do
  sleep 0.1
  n=$((n + 1))
done
kill -KILL "$pid" 2>/dev/null # still running after 30 s: a failure
wait "$pid"
st=$?
[ "$st" -eq 130 ] && grep -q "stopped by SIGINT: no results" "$tmp/sig.out" && pass ||
  fail sigint "status $st (want 130)" "$tmp/sig.out"

[ -z "$(ls -A "$tmp/swap" "$tmp/tmpdir" | grep -v ':$' | grep -v '^$')" ] && pass ||
  fail leftovers "files left: $(ls -A "$tmp/swap" "$tmp/tmpdir")"

echo "bench: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
