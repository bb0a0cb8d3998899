#!/bin/sh
# A board user's long run on a serial console or over ssh (train):
# - the progress line fits the terminal (TIOCGWINSZ; else $COLUMNS, else 80
#   columns), keeping epoch/iteration, loss, accuracy and ETA first; its
#   loss and accuracy are averages over the progress window; offloading, it
#   shows the window N and the stall's share;
# - --eval-every K: a test line every K iterations; a run --iterations
#   stops within its first epoch evaluates at the end on min(test set,
#   2000) samples and says so; the weights do not change;
# - --log-csv FILE: a header and a row per iteration, flushed as they go (a
#   killed run keeps them), checked at the start like the other outputs;
# - --report-json has train and test loss and accuracy; the report ends
#   with the results, the window trace behind --window-trace;
# - sizes and values say what was meant (--memory-budget 10, --window foo,
#   bench --windows 1,0 refused before any run); --name=VALUE for every
#   option of train, evaluate, predict, summary and bench.
# usage: test_board.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
net=test/data/nets/fmnist_small.ini
tiny=test/data/nets/tiny_resnet.ini

. "$(dirname "$0")/lib.sh"

# progress FILE: the progress lines of a run's output, one a line (a
# terminal's are separated by \r; the erase-line escape removed)
progress() {
  tr '\r' '\n' <"$1" | sed 's/\x1b\[K//g' | grep '^epoch [0-9]* iter '
}

# fits NAME FILE MAX: every progress line of FILE has at most MAX
# characters, and there is one
fits() {
  progress "$2" >"$tmp/lines"
  long=$(awk -v max="$3" 'length($0) > max' "$tmp/lines")
  if [ ! -s "$tmp/lines" ] || [ -n "$long" ]; then
    fail "$1: progress lines missing or longer than $3 characters:"
    sed 's/^/  /' "$tmp/lines"
  else
    ok
  fi
}

# Where $tmp refuses O_DIRECT (tmpfs on older kernels), swap through the
# page cache: these checks are about the progress line, not O_DIRECT.
direct=
"$exe" train "$tiny" --data synthetic --iterations 1 --eval-samples 0 \
  --window 1 --swap-dir "$tmp" >"$tmp/probe" 2>&1 ||
  { grep -q "O_DIRECT" "$tmp/probe" && direct=--no-direct; }

# ---- the progress line's width -------------------------------------------
if command -v script >/dev/null 2>&1; then
  # a terminal of 80 columns (a serial console): one line redrawn in place
  script -qc "stty cols 80; $exe train $net --data synthetic --iterations 40 \
    --eval-samples 64" /dev/null </dev/null >"$tmp/tty80" 2>&1
  fits tty_80 "$tmp/tty80" 79
  grep -q "$(printf '\r')epoch 1 iter 40/40 " "$tmp/tty80" && ok ||
    fail "tty_in_place: the terminal's line is not redrawn with \\r"
  # narrow: loss, accuracy and ETA stay, the rest goes
  script -qc "stty cols 60; $exe train $net --data synthetic --iterations 40 \
    --eval-samples 64" /dev/null </dev/null >"$tmp/tty60" 2>&1
  fits tty_60 "$tmp/tty60" 59
  progress "$tmp/tty60" | grep -v -q "loss .* acc .*%.* ETA " &&
    fail "tty_60_fields: loss, acc or ETA missing: $(progress "$tmp/tty60" | head -3)" || ok
  # wide: every field
  script -qc "stty cols 200; $exe train $tiny --data synthetic --iterations 6 \
    --eval-samples 0 --window 1 --swap-dir $tmp $direct" /dev/null </dev/null \
    >"$tmp/tty200" 2>&1
  progress "$tmp/tty200" | tail -1 |
    grep -q "^epoch 1 iter 6/6 (6/512) loss [0-9.]* acc [0-9.]*% (avg [0-9]* it) [0-9.]* it/s ETA [0-9m]*s window 1 stall [0-9.]*% peak RSS " &&
    ok || fail "tty_200_fields: $(progress "$tmp/tty200" | tail -1)"
  # a long evaluation counts its samples in place (redrawn at most 10
  # times a second: 20000 samples take about half a second here)
  script -qc "stty cols 80; $exe train $net --data synthetic --train-samples 80000 \
    --iterations 1 --eval-samples 20000" /dev/null </dev/null >"$tmp/tty_eval" 2>&1
  tr '\r' '\n' <"$tmp/tty_eval" | grep -q "^evaluating: [0-9]*/20000 test samples" &&
    ok || fail "tty_eval_progress: no evaluation progress: $(tail -3 "$tmp/tty_eval")"
  # a terminal reporting no size (a serial console often does): $COLUMNS
  script -qc "stty cols 0 rows 0; COLUMNS=50 $exe train $net --data synthetic \
    --iterations 10 --eval-samples 0" /dev/null </dev/null >"$tmp/tty0" 2>&1
  fits tty_columns "$tmp/tty0" 49
else
  echo "note: script(1) missing: the terminal's width is not checked"
fi
# not a terminal: 80 columns, or $COLUMNS
env -u COLUMNS "$exe" train "$net" --data synthetic --iterations 40 \
  --eval-samples 0 --log-every 8 >"$tmp/pipe" 2>&1
fits pipe_80 "$tmp/pipe" 79
[ "$(progress "$tmp/pipe" | wc -l)" -eq 5 ] && ok ||
  fail "pipe_lines: $(progress "$tmp/pipe" | wc -l) progress lines, expected 5 (--log-every 8)"
COLUMNS=45 "$exe" train "$net" --data synthetic --iterations 8 \
  --eval-samples 0 >"$tmp/pipe45" 2>&1
fits pipe_columns "$tmp/pipe45" 44

# ---- averages over the progress window ------------------------------------
# A log gets a line per window (--log-every) with the averages of its
# iterations (the CSV's rows); a terminal's line, redrawn every iteration,
# shows the same figures at the window's end, not the last batch's.
COLUMNS=200 "$exe" train "$net" --data synthetic --iterations 6 \
  --eval-samples 0 --log-every 6 >"$tmp/avg_pipe" 2>&1
COLUMNS=200 "$exe" train "$net" --data synthetic --iterations 6 \
  --eval-samples 0 --log-every 6 --log-csv "$tmp/avg.csv" >"$tmp/avg_csv" 2>&1
want=$(awk -F, 'NR > 1 { l += $3; a += $4; n++ }
  END { printf "loss %.4f acc %.1f%% (avg %d it)", l / n, 100 * a / n, n }' "$tmp/avg.csv")
progress "$tmp/avg_csv" | tail -1 | grep -q -F "$want" && ok ||
  fail "progress_average: want '$want', got '$(progress "$tmp/avg_csv" | tail -1)'"
if command -v script >/dev/null 2>&1; then
  script -qc "stty cols 200; $exe train $net --data synthetic --iterations 6 \
    --eval-samples 0 --log-every 6" /dev/null </dev/null >"$tmp/avg" 2>&1
  tty_avg=$(progress "$tmp/avg" | tail -1 | sed 's/.*\(loss [0-9.]* acc [0-9.]*%\).*/\1/')
  pipe_avg=$(progress "$tmp/avg_pipe" | tail -1 | sed 's/.*\(loss [0-9.]* acc [0-9.]*%\).*/\1/')
  [ -n "$tty_avg" ] && [ "$tty_avg" = "$pipe_avg" ] && ok ||
    fail "progress_average_tty: a terminal shows '$tty_avg', a log '$pipe_avg'"
fi

# ---- --eval-every and the default evaluation of a short run --------------
expect eval_every 0 "^iteration 5 (epoch 1): test loss" -- "$exe" train "$net" \
  --data synthetic --iterations 20 --eval-every 5 --eval-samples 64
[ "$(grep -c "^iteration [0-9]* (epoch 1): test loss .* (64 samples)" "$tmp/out")" -eq 3 ] &&
  grep -q "^iteration 20 (epoch 1 not finished: --iterations): test loss .* (64 samples)" "$tmp/out" &&
  ok || fail "eval_every_lines: want 3 lines at 5, 10, 15 and the end's at 20: $(grep test "$tmp/out")"
# across an epoch's end (8 iterations an epoch): at 4, the epoch's own at
# 8 (not twice), 12, the epoch's at 16
expect eval_every_epochs 0 "^epoch 2: test loss" -- "$exe" train "$net" \
  --data synthetic --train-samples 256 --epochs 2 --eval-every 4 --eval-samples 32
[ "$(grep -c "test loss" "$tmp/out")" -eq 4 ] &&
  grep -q "^iteration 12 (epoch 2): test loss" "$tmp/out" && ok ||
  fail "eval_every_epochs_lines: $(grep "test loss" "$tmp/out")"
# evaluating changes no weight
"$exe" train "$net" --data synthetic --iterations 12 --save "$tmp/a.bin" \
  >"$tmp/out" 2>&1 || fail "save_plain: $(cat "$tmp/out")"
"$exe" train "$net" --data synthetic --iterations 12 --eval-every 3 \
  --log-csv "$tmp/w.csv" --save "$tmp/b.bin" >"$tmp/out" 2>&1 ||
  fail "save_eval_every: $(cat "$tmp/out")"
cmp -s "$tmp/a.bin" "$tmp/b.bin" && ok ||
  fail "eval_every_weights: --eval-every or --log-csv changed the weights"
# --iterations within the first epoch: the end evaluates min(test set,
# 2000) samples (synthetic: a quarter of --train-samples) and says so
expect short_run_default 0 "^iteration 3 (epoch 1 not finished: --iterations): test loss .* (2000 of 2500 samples: the default for a run shorter than an epoch; --eval-samples N sets it)" \
  -- "$exe" train "$net" --data synthetic --train-samples 10000 --iterations 3
grep -q "^test              loss .* (2000 samples)" "$tmp/out" && ok ||
  fail "short_run_report: $(grep '^test ' "$tmp/out")"
expect short_run_given 0 "not finished: --iterations): test loss .* (100 samples)$" \
  -- "$exe" train "$net" --data synthetic --train-samples 10000 --iterations 3 \
  --eval-samples 100
expect short_run_small_set 0 "not finished: --iterations): test loss .* (512 samples)$" \
  -- "$exe" train "$net" --data synthetic --iterations 3
expect eval_every_off 2 "--eval-samples 0 turns evaluation off" -- "$exe" \
  train "$net" --data synthetic --eval-every 3 --eval-samples 0

# ---- --log-csv -------------------------------------------------------------
head -1 "$tmp/w.csv" | grep -q -x "iteration,epoch,loss,accuracy,learning_rate,ms,stall_ms,window,read_mib,written_mib,rss_mib" &&
  ok || fail "csv_header: $(head -1 "$tmp/w.csv")"
[ "$(wc -l <"$tmp/w.csv")" -eq 13 ] &&
  [ -z "$(awk -F, 'NF != 11' "$tmp/w.csv")" ] &&
  [ "$(sed -n '13p' "$tmp/w.csv" | cut -d, -f1,2,5,8)" = "12,1,0.002,all" ] &&
  ok || fail "csv_rows: want 12 rows of 11 columns: $(cat "$tmp/w.csv")"
expect csv_offload 0 "peak RSS" -- "$exe" train "$tiny" --data synthetic \
  --iterations 3 --eval-samples 0 --window 1 --swap-dir "$tmp" $direct \
  --log-csv "$tmp/o.csv"
[ "$(awk -F, 'NR > 1 && $8 == 1 && $10 > 0 && $11 > 0' "$tmp/o.csv" 2>/dev/null |
  wc -l)" -eq 3 ] && ok ||
  fail "csv_offload_columns: window 1, MiB written and RSS expected: $(cat "$tmp/o.csv")"
# resumed, the run's rows go on in the same file (no second header)
"$exe" train "$net" --data synthetic --iterations 4 --eval-samples 0 \
  --checkpoint "$tmp/r.ckpt" --log-csv "$tmp/r.csv" >"$tmp/out" 2>&1 &&
  "$exe" train "$net" --data synthetic --iterations 8 --eval-samples 0 \
    --resume "$tmp/r.ckpt" --log-csv "$tmp/r.csv" >>"$tmp/out" 2>&1 ||
  fail "csv_resume_runs: $(cat "$tmp/out")"
[ "$(cut -d, -f1 "$tmp/r.csv" | tr '\n' ' ')" = "iteration 1 2 3 4 5 6 7 8 " ] &&
  ok || fail "csv_resume: $(cut -d, -f1 "$tmp/r.csv" | tr '\n' ' ')"
expect csv_unwritable 2 "^nntrainer-offload: --log-csv: $tmp/none/log.csv: " -- \
  "$exe" train "$net" --data synthetic --iterations 1 --log-csv "$tmp/none/log.csv"
expect csv_is_json 2 "are the same file" -- "$exe" train "$net" --data synthetic \
  --iterations 1 --log-csv "$tmp/same" --report-json "$tmp/same"
# rows are flushed as they go: a killed run keeps them
"$exe" train "$net" --data synthetic --epochs 100000 --eval-samples 0 \
  --log-csv "$tmp/k.csv" >/dev/null 2>&1 &
pid=$!
i=0
rows() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
while [ "$(rows "$tmp/k.csv")" -lt 6 ] && [ $i -lt 100 ]; do
  sleep 0.1
  i=$((i + 1))
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ "$(rows "$tmp/k.csv")" -ge 6 ] &&
  [ -z "$(sed '$d' "$tmp/k.csv" | awk -F, 'NF != 11')" ] && ok ||
  fail "csv_killed: rows lost or torn: $(head -3 "$tmp/k.csv")"

# ---- the report and --report-json -----------------------------------------
expect report_order 0 "swap traffic" -- "$exe" train "$tiny" --data synthetic \
  --iterations 4 --eval-samples 16 --window auto --swap-dir "$tmp" $direct \
  --report-json "$tmp/r.json"
sed -n '/^== report/,$p' "$tmp/out" | cut -c1-18 | sed 's/ *$//' >"$tmp/order"
last=$(tail -5 "$tmp/order" | tr '\n' '|')
[ "$last" = "train|test|peak RSS|iteration time|swap traffic|" ] && ok ||
  fail "report_order: the report must end with the results: $last"
grep -q "N=" "$tmp/out" && fail "report_trace: the window trace listed without --window-trace" || ok
grep -q '"train_loss": [0-9.]*,' "$tmp/r.json" &&
  grep -q '"train_accuracy": 0\.[0-9]*,' "$tmp/r.json" &&
  grep -q '"test_loss": [0-9.]*,' "$tmp/r.json" &&
  grep -q '"test_accuracy": 0\.[0-9]*,' "$tmp/r.json" &&
  grep -q '"test_iteration": 4,' "$tmp/r.json" && ok ||
  fail "report_json: train and test loss and accuracy: $(grep -e train_ -e test_ "$tmp/r.json")"

# ---- what was meant -------------------------------------------------------
expect budget_bare 2 "--memory-budget 10: a size without a suffix is in bytes, .*did you mean 10M?" \
  -- "$exe" train "$net" --memory-budget 10
sed 's/^batch_size = 32$/batch_size = 32\nmemory_budget = 64/' "$net" >"$tmp/b.ini"
expect budget_bare_ini 2 "\[Model\] memory_budget 64: .*did you mean 64M?" \
  -- "$exe" train "$tmp/b.ini" --data synthetic
expect budget_suffix 0 "window            all" -- "$exe" train "$net" \
  --data synthetic --iterations 1 --eval-samples 0 --memory-budget 64M
expect window_words 2 "option --window: .*auto .* or all .*got 'foo'" -- \
  "$exe" train "$net" --window foo
expect bench_zero 2 "option --windows: window 0 in '1,0'" -- "$exe" bench \
  "$tiny" --windows 1,0 --iterations 1
grep -q "measuring\|window 1 \.\.\." "$tmp/out" &&
  fail "bench_zero_early: bench ran before refusing: $(cat "$tmp/out")" || ok
expect bench_bare_size 2 "did you mean 10M?" -- "$exe" bench "$tiny" \
  --windows 1@10 --iterations 1

# ---- --name=VALUE -------------------------------------------------------------
expect eq_train 0 "^epoch 1 iter 2/2 " -- "$exe" train "$net" --data=synthetic \
  --iterations=2 --eval-samples=16 --save="$tmp/eq.bin" --window=all
expect eq_evaluate 0 "^evaluated 16 samples" -- "$exe" evaluate "$net" \
  --weights="$tmp/eq.safetensors" --data=synthetic --eval-samples=16
expect eq_predict 2 "option --top" -- "$exe" predict "$net" \
  --weights="$tmp/eq.safetensors" --top=0 "$tmp/none.png"
expect eq_summary 0 "batch 10$" -- "$exe" summary "$net" --batch-size=10 \
  --recompute=off --threads=1
expect eq_bench 2 "option --iterations" -- "$exe" bench "$net" --iterations=0
expect eq_bench_windows 2 "option --windows: window 0" -- "$exe" bench "$net" \
  --windows=0
expect eq_flag 2 "option --no-direct takes no value" -- "$exe" train "$net" \
  --no-direct=1
expect eq_empty 2 "option --iterations" -- "$exe" train "$net" --iterations=

echo "board: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
