#!/bin/sh
# Flash wear and the swap directory's filesystem (train, evaluate, summary,
# bench):
# - a swap directory on tmpfs (/dev/shm; skipped where that is not tmpfs)
#   is refused with exit 2, naming the directory, the filesystem, why and
#   the override; --allow-tmpfs-swap (or NTO_ALLOW_TMPFS_SWAP=1) accepts
#   it; a run that keeps everything resident does not care;
# - the default swap directory skips a tmpfs $TMPDIR for /var/tmp and says
#   so (or, without a usable /var/tmp, refuses);
# - the report's flash wear agrees with itself: per epoch = per iteration x
#   the iterations of an epoch (training samples / batch), the run = swap +
#   checkpoints + weights files, shares = bytes / (--flash-endurance TBW x
#   10^12); --report-json has the same figures;
# - summary prints the planned figures (per iteration, per epoch, for the
#   run, shares), bench the per-epoch line and columns.
# usage: test_wear.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
shm=
extra=
cleanup() {
  rm -rf "$tmp"
  [ -n "$shm" ] && rm -rf "$shm"
  [ -n "$extra" ] && rm -rf "$extra"
}
trap cleanup EXIT
fails=0
passes=0
unset NTO_ALLOW_TMPFS_SWAP # this script checks the refusal itself
net=test/data/nets/tiny_resnet.ini
quick="--data synthetic --iterations 2 --eval-samples 0"

. "$(dirname "$0")/lib.sh"

# A swap directory on disk for the runs that are not about tmpfs: $tmp,
# unless $TMPDIR is tmpfs (then one under /var/tmp, else the override).
disk="$tmp/swap"
mkdir "$disk"
allow=
if on_ram "$tmp"; then
  if extra=$(mktemp -d /var/tmp/nto-wear.XXXXXX 2>/dev/null) && ! on_ram "$extra"; then
    disk=$extra
  else
    allow=--allow-tmpfs-swap
  fi
fi
# Where the disk refuses O_DIRECT, swap through the page cache (the checks
# here are about the directory and the bytes, not O_DIRECT).
direct=
"$exe" train "$net" $quick --window 1 --swap-dir "$disk" $allow \
  >"$tmp/probe" 2>&1 || { grep -q "O_DIRECT" "$tmp/probe" && direct=--no-direct; }

# ---- a swap directory on tmpfs --------------------------------------------
if on_ram /dev/shm && shm=$(mktemp -d /dev/shm/nto-wear.XXXXXX); then
  expect tmpfs_refused 2 "^nntrainer-offload: --swap-dir $shm is on tmpfs: its pages are RAM: swapping there saves no memory; .*--allow-tmpfs-swap" \
    -- "$exe" train "$net" $quick --window 1 --swap-dir "$shm"
  grep -q "iter " "$tmp/out" && fail "tmpfs_refused_early: a step ran: $(cat "$tmp/out")" || ok
  [ -z "$(ls -A "$shm")" ] && ok || fail "tmpfs_refused_files: files left in $shm"
  expect tmpfs_refused_budget 2 "is on tmpfs" -- "$exe" train "$net" $quick \
    --memory-budget 64M --swap-dir "$shm"
  expect tmpfs_refused_auto 2 "is on tmpfs" -- "$exe" train "$net" $quick \
    --window auto --swap-dir "$shm"
  expect tmpfs_all_resident 0 "window            all" -- "$exe" train "$net" \
    $quick --window all --swap-dir "$shm"
  expect tmpfs_override 0 "swap $shm, page cache" -- "$exe" train "$net" \
    $quick --window 1 --swap-dir "$shm" --no-direct --allow-tmpfs-swap
  expect tmpfs_override_env 0 "swap $shm, page cache" -- env \
    NTO_ALLOW_TMPFS_SWAP=1 "$exe" train "$net" $quick --window 1 \
    --swap-dir "$shm" --no-direct
  expect tmpfs_env_bad 2 "NTO_ALLOW_TMPFS_SWAP: expected 0 or 1" -- env \
    NTO_ALLOW_TMPFS_SWAP=yes "$exe" train "$net" $quick --window 1
  expect tmpfs_env_zero 2 "is on tmpfs" -- env NTO_ALLOW_TMPFS_SWAP=0 "$exe" \
    train "$net" $quick --window 1 --swap-dir "$shm"
  expect tmpfs_flag_value 2 "option --allow-tmpfs-swap takes no value" -- \
    "$exe" train "$net" --allow-tmpfs-swap=1
  # the INI's memory_swap_path, named as the INI key
  sed "s|^\[Model\]|[Model]\nmemory_swap = true\nmemory_swap_lookahead = 1\nmemory_swap_path = $shm|" \
    "$net" >"$tmp/shm.ini"
  expect tmpfs_ini 2 "$tmp/shm.ini: \[Model\] memory_swap_path $shm is on tmpfs" \
    -- "$exe" train "$tmp/shm.ini" $quick
  # evaluate and predict share the check (refused before the weights load)
  expect tmpfs_evaluate 2 "--swap-dir $shm is on tmpfs" -- "$exe" evaluate \
    "$net" --weights "$tmp/none.bin" --window 1 --swap-dir "$shm"
  expect tmpfs_predict 2 "--swap-dir $shm is on tmpfs" -- "$exe" predict \
    "$net" --weights "$tmp/none.bin" --window 1 --swap-dir "$shm" "$tmp/none.png"
  expect tmpfs_bench 2 "bench: --swap-dir $shm is on tmpfs" -- "$exe" bench \
    "$net" --windows 1,all --iterations 1 --swap-dir "$shm"
  grep -q "measuring" "$tmp/out" && fail "tmpfs_bench_early: bench measured first" || ok

  # the default: a tmpfs $TMPDIR is skipped for /var/tmp, and a note says so
  if [ -d /var/tmp ] && [ -w /var/tmp ] && ! on_ram /var/tmp; then
    expect default_skips_tmpfs 0 "^offload: swap directory /var/tmp, not \$TMPDIR ($shm): that is on tmpfs, whose pages are RAM" \
      -- env TMPDIR="$shm" "$exe" train "$net" $quick --window 1 $direct
    grep -q "^offload: window 1 steps, .* in /var/tmp " "$tmp/out" &&
      grep -q "swap /var/tmp," "$tmp/out" && ok ||
      fail "default_skips_tmpfs_dir: the swap file not in /var/tmp: $(cat "$tmp/out")"
    expect default_tmpfs_allowed 0 "swap file .* in $shm " -- env TMPDIR="$shm" \
      "$exe" train "$net" $quick --window 1 --no-direct --allow-tmpfs-swap
    grep -q "^offload: swap directory" "$tmp/out" &&
      fail "default_tmpfs_allowed_note: a note without a skip: $(cat "$tmp/out")" || ok
  else
    expect default_no_disk 2 "no default swap directory on flash or disk: \$TMPDIR ($shm) is on tmpfs" \
      -- env TMPDIR="$shm" "$exe" train "$net" $quick --window 1
  fi
  # a default on disk gets no note
  if ! on_ram "$disk"; then
    expect default_disk 0 "swap file .* in $disk " -- env TMPDIR="$disk" \
      "$exe" train "$net" $quick --window 1 $direct
    grep -q "^offload: swap directory" "$tmp/out" &&
      fail "default_disk_note: a note for a disk \$TMPDIR: $(cat "$tmp/out")" || ok
  fi
else
  shm=
  echo "note: /dev/shm is not tmpfs here: the tmpfs refusal checks are skipped"
fi

# ---- --flash-endurance values -----------------------------------------------
for v in 0 -1 abc nan 2e6 12XB; do
  expect "endurance_bad_$v" 2 "--flash-endurance $v: expected the device's rated endurance in TBW" \
    -- "$exe" train "$net" --flash-endurance "$v"
done
expect endurance_summary_bad 2 "--flash-endurance 0:" -- "$exe" summary "$net" \
  --flash-endurance 0
expect endurance_bench_bad 2 "--flash-endurance x:" -- "$exe" bench "$net" \
  --flash-endurance x

# ---- the report: per iteration, per epoch, the run, the shares --------------
# 64 synthetic samples at batch 4: an epoch is 16 iterations; 6 iterations,
# the first a warm-up; a checkpoint every 2 iterations and the weights.
expect report 0 "^flash wear  *.* per epoch (16 iterations), .* by this run = .* of 0.5 TBW; an epoch " \
  -- "$exe" train "$net" --data synthetic --train-samples 64 --iterations 6 \
  --warmup 1 --eval-samples 0 --window 1 --swap-dir "$disk" $allow $direct \
  --checkpoint "$tmp/w.ckpt" --checkpoint-every 2 --save "$tmp/w.bin" \
  --report-json "$tmp/r.json" --flash-endurance 0.5TBW
cp "$tmp/out" "$tmp/report.out"
grep -q "^                  this run: swap file .* + checkpoints .* + weights .*; 0.5 TBW (10^12 bytes): --flash-endurance$" \
  "$tmp/report.out" && ok || fail "report_parts: $(grep -A1 '^flash wear' "$tmp/report.out")"
# the report still ends with the results
[ "$(sed -n '/^== report/,$p' "$tmp/report.out" | tail -1 | cut -c1-12)" = "swap traffic" ] &&
  ok || fail "report_last: the report must end with swap traffic"
j=$tmp/r.json
per_it=$(json_value written_bytes_per_iteration "$j")
per_mib=$(json_value written_mib_per_iteration "$j")
epoch_its=$(json_value iterations_per_epoch "$j")
per_epoch=$(json_value written_bytes_per_epoch "$j")
measured=$(json_value measured_iterations "$j")
swap=$(json_value swap_written_bytes "$j")
ckpt=$(json_value checkpoint_written_bytes "$j")
weights=$(json_value weights_written_bytes "$j")
total=$(json_value run_written_bytes "$j")
tbw=$(json_value flash_endurance_tbw "$j")
run_frac=$(json_value run_endurance_fraction "$j")
epoch_frac=$(json_value epoch_endurance_fraction "$j")
n_ckpt=$(sed -n 's/^checkpoint  *[^ ]*: \([0-9]*\) written .*/\1/p' "$tmp/report.out")
ckpt_size=$(stat -c %s "$tmp/w.ckpt" 2>/dev/null || echo 0)
w_size=$(($(stat -c %s "$tmp/w.bin" 2>/dev/null || echo 0) + $(stat -c %s "$tmp/w.safetensors" 2>/dev/null || echo 0)))
# close A B REL: A and B agree within the relative tolerance REL
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN {
  d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
  exit !(a != "" && b != "" && d <= r * m + 1e-12) }'; }
[ "$epoch_its" = 16 ] && ok || fail "json_epoch_iterations: $epoch_its (want 64 / 4 = 16)"
[ "$measured" = 5 ] && ok || fail "json_measured: $measured (want 6 - 1 warm-up)"
close "$per_it" 1 0 && fail "json_per_iteration: nothing written per iteration ($per_it)" || ok
awk -v a="$per_it" 'BEGIN { exit !(a > 0) }' && ok || fail "json_per_iteration_positive: $per_it"
close "$per_it" "$(awk -v m="$per_mib" 'BEGIN { print m * 1048576 }')" 0.01 && ok ||
  fail "json_per_iteration_mib: $per_it bytes against $per_mib MiB"
close "$per_epoch" "$(awk -v a="$per_it" -v n="$epoch_its" 'BEGIN { printf "%.3f", a * n }')" 1e-9 &&
  ok || fail "json_per_epoch: $per_epoch != $per_it x $epoch_its"
awk -v s="$swap" -v a="$per_it" -v n="$measured" 'BEGIN { exit !(s >= a * n) }' && ok ||
  fail "json_swap: the run's $swap bytes below $measured x $per_it measured"
[ -n "$n_ckpt" ] && [ "$n_ckpt" -ge 3 ] && [ "$ckpt" = $((n_ckpt * ckpt_size)) ] && ok ||
  fail "json_checkpoints: $ckpt bytes, want $n_ckpt x $ckpt_size"
[ "$weights" = "$w_size" ] && [ "$w_size" -gt 0 ] && ok ||
  fail "json_weights: $weights bytes, want $w_size (.bin + .safetensors)"
[ "$total" = $((swap + ckpt + weights)) ] && ok ||
  fail "json_run: $total != $swap + $ckpt + $weights"
[ "$tbw" = 0.5 ] && [ "$(json_value flash_endurance_default "$j")" = false ] && ok ||
  fail "json_tbw: $tbw, default $(json_value flash_endurance_default "$j")"
close "$run_frac" "$(awk -v t="$total" 'BEGIN { printf "%.12g", t / 0.5e12 }')" 1e-6 &&
  ok || fail "json_run_fraction: $run_frac for $total bytes of 0.5 TBW"
close "$epoch_frac" "$(awk -v e="$per_epoch" 'BEGIN { printf "%.12g", e / 0.5e12 }')" 1e-6 &&
  ok || fail "json_epoch_fraction: $epoch_frac for $per_epoch bytes of 0.5 TBW"
# the printed share of an epoch is the JSON's, to the digits printed (2
# significant digits at least: 0 decimals from 10%, 1 from 1%, 2 from
# 0.01%, else 4)
shown=$(sed -n 's/^flash wear .*; an epoch \([0-9.]*\)%.*/\1/p' "$tmp/report.out")
want=$(awk -v f="$epoch_frac" 'BEGIN { p = 100 * f
  printf(p >= 10 ? "%.0f" : p >= 1 ? "%.1f" : p >= 0.01 ? "%.2f" : "%.4f", p) }')
[ -n "$shown" ] && [ "$shown" = "$want" ] && ok ||
  fail "report_epoch_share: $shown% printed, $want% from the JSON's $epoch_frac"

# the default endurance, said to be the default
expect report_default 0 "48 TBW (10^12 bytes): a typical 32 GB eMMC's rating, the default (--flash-endurance TBW)" \
  -- "$exe" train "$net" $quick --window 1 --swap-dir "$disk" $allow $direct \
  --report-json "$tmp/d.json"
[ "$(json_value flash_endurance_tbw "$tmp/d.json")" = 48 ] &&
  [ "$(json_value flash_endurance_default "$tmp/d.json")" = true ] && ok ||
  fail "json_default: $(grep flash_endurance "$tmp/d.json")"
# all resident: no wear line, the figures 0
expect report_resident 0 "window            all" -- "$exe" train "$net" $quick \
  --window all --report-json "$tmp/a.json"
grep -q "^flash wear" "$tmp/out" && fail "report_resident_line: a wear line without swap" || ok
[ "$(json_value written_bytes_per_epoch "$tmp/a.json")" = 0.000 ] &&
  [ "$(json_value swap_written_bytes "$tmp/a.json")" = 0 ] && ok ||
  fail "json_resident: $(grep written "$tmp/a.json")"

# ---- summary: the planned figures -----------------------------------------
# ResNet-18 at batch 10 on 600 synthetic samples: 60 iterations an epoch, 3
# epochs; 0.01 TBW (10^10 bytes) so that the shares are large.
expect summary 0 "^flash wear (train --window N): the swap file's planned writes, against 0.01 TBW (10^12 bytes): --flash-endurance" \
  -- "$exe" summary res/resnet18.ini --batch-size 10 --data synthetic \
  --train-samples 600 --epochs 3 --flash-endurance 0.01
cp "$tmp/out" "$tmp/summary.out"
grep -q "^  an epoch: 60 iterations (600 training samples, batch 10, full batches); the run: 3 epochs, 180 iterations$" \
  "$tmp/summary.out" && ok || fail "summary_epoch: $(grep -A1 '^flash wear' "$tmp/summary.out")"
# window 1's line: per epoch = per iteration x 60, the run x 180, shares of
# 10^10 bytes, each to the digits printed
line=$(grep "^  window 1: [0-9.]* MiB per iteration, " "$tmp/summary.out")
echo "$line" | awk '
function bytes(v, u) { return v * (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1099511627776) }
function near(a, b, r) { d = a - b; if (d < 0) d = -d; return d <= r * b }
{ it = $3 * 1048576; ep = bytes($7, $8); sh = $11; run = bytes($12, $13); rs = $18
  sub(/^\(/, "", sh); sub(/%\),?$/, "", sh); sub(/%$/, "", rs)
  ok = it > 0 && near(ep, 60 * it, 0.01) && near(run, 180 * it, 0.01) &&
       near(sh, 100 * 60 * it / 1e10, 0.01) && near(rs, 100 * 180 * it / 1e10, 0.01)
  exit !ok }' && ok || fail "summary_window_1: inconsistent: $line"
# the per-iteration figure is the offloading block's
w1=$(sed -n 's/^  window 1: .* MiB read, \([0-9.]*\) MiB written$/\1/p' "$tmp/summary.out")
echo "$line" | grep -q "^  window 1: $w1 MiB per iteration," && ok ||
  fail "summary_per_iteration: $w1 MiB written above, '$line'"
expect summary_iterations 0 "the run: 100 iterations (--iterations)$" -- "$exe" \
  summary res/resnet18.ini --batch-size 10 --data synthetic --train-samples 600 \
  --epochs 3 --iterations 100
expect summary_default 0 "against 48 TBW (10^12 bytes): a typical 32 GB eMMC's rating, the default" \
  -- "$exe" summary "$net" --data synthetic
expect summary_no_data 0 "per epoch and for the run: no training set ($tmp/none: " \
  -- "$exe" summary "$net" --data "$tmp/none"

# ---- bench: the per-epoch line and columns -------------------------------
# (bench's synthetic data: 2048 samples, 512 iterations of batch 4)
expect bench 0 "^flash wear per epoch (512 iterations of the data): 1: .* (.*%), all: 0 (0%) of 0.5 TBW (10^12 bytes): --flash-endurance$" \
  -- "$exe" bench "$net" --windows 1,all --iterations 2 --warmup 0 \
  --data synthetic --swap-dir "$disk" $allow $direct --flash-endurance 0.5 \
  --csv "$tmp/b.csv" --json "$tmp/b.json"
# CSV: written MiB per epoch = per iteration x 512 (to the digits printed),
# the share of 0.5 TBW
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  $2 == "ok" { it = $c["written_mib_per_iteration"]; n = $c["iterations_per_epoch"]
    ep = $c["written_mib_per_epoch"]; f = $c["epoch_endurance_fraction"]
    d = ep - it * n; if (d < 0) d = -d
    e = f - ep * 1048576 / 0.5e12; if (e < 0) e = -e
    if (n != 512 || d > 0.001 * n + 1e-9 || e > 1e-6 * f + 1e-12) bad++
    rows++ }
  END { exit !(rows == 2 && !bad) }' "$tmp/b.csv" && ok ||
  fail "bench_csv: per-epoch columns inconsistent: $(cat "$tmp/b.csv")"
grep -q '"flash_endurance_tbw": 0.5,' "$tmp/b.json" &&
  grep -q '"iterations_per_epoch": 512, "written_mib_per_epoch": ' "$tmp/b.json" && ok ||
  fail "bench_json: $(cat "$tmp/b.json")"

echo "wear: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
