#!/bin/sh
# Fuzz the INI loader and the graph builder (test/fuzz/fuzz_config.c) with
# libFuzzer under AddressSanitizer + UndefinedBehaviorSanitizer (leak
# checking on) for a bounded time.
#
#   sh tools/fuzz.sh [--seconds N] [--jobs J] [--strict] [FILE...]
#
# --seconds N  fuzz for N seconds (default 60)
# --jobs J     J fuzzing processes (libFuzzer -fork=J; default 1)
# --strict     exit 77 instead of 0 when clang's libFuzzer is missing
# FILE...      instead of fuzzing, run the target once on each FILE (to
#              replay a reproducer)
#
# The library is built with clang into ./build-fuzz (meson, sanitizers and
# -fsanitize=fuzzer-no-link); the target is linked with -fsanitize=fuzzer.
# The seed corpus is assembled at run time from res/*.ini,
# test/data/nets/*.ini and test/data/bad/*.ini, and a dictionary from the
# section names, keys and values found in them. Everything the run writes
# (corpus, artifacts, log) goes to a temporary directory, removed when the
# run is clean and kept, with its path printed, when it is not.
# Exit status: 0 clean (or skipped), 1 crash/leak/timeout/UB or build error,
# 2 usage, 77 skipped with --strict.
# Needs clang and libclang-rt-14-dev (sh tools/setup.sh --ci installs them).
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

seconds=60 jobs=1 strict=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) [ $# -ge 2 ] || { echo "fuzz: --seconds needs a value" >&2; exit 2; }
               seconds=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || { echo "fuzz: --jobs needs a value" >&2; exit 2; }
            jobs=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    --help|-h) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) echo "fuzz: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$seconds" in ''|*[!0-9]*|0) echo "fuzz: --seconds: expected a positive integer, got '$seconds'" >&2; exit 2 ;; esac
case "$jobs" in ''|*[!0-9]*|0) echo "fuzz: --jobs: expected a positive integer, got '$jobs'" >&2; exit 2 ;; esac

skip() {
  echo "fuzz: skipped: $*"
  [ "$strict" = 1 ] && exit 77
  exit 0
}

# --- A clang with libFuzzer ------------------------------------------------
CC=""
for c in ${FUZZ_CC:-} clang clang-14; do
  if command -v "$c" >/dev/null 2>&1; then CC=$c; break; fi
done
[ -n "$CC" ] || skip "no clang (install clang and libclang-rt-14-dev: sh tools/setup.sh --ci)"
probe=$(mktemp -d "${TMPDIR:-/tmp}/nto-fuzz-probe.XXXXXX") || exit 1
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
  >"$probe/p.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" \
     >"$probe/log" 2>&1; then
  sed 's/^/  /' "$probe/log" | head -5
  rm -rf "$probe"
  skip "$CC cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev)"
fi
rm -rf "$probe"

# --- Build -----------------------------------------------------------------
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f build-fuzz/build.ninja ]; then
  rm -rf build-fuzz
  out=$(CC=$CC meson setup build-fuzz -Dtests=false -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dwerror=false \
    -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    2>&1) || { echo "$out" | tail -n 30 >&2; echo "fuzz: meson setup build-fuzz failed" >&2; exit 1; }
fi
# shellcheck disable=SC2086
out=$(ninja -C build-fuzz ${NTO_JOBS:+-j$NTO_JOBS} libnntrainer-offload.a 2>&1) ||
  { echo "$out" | tail -n 40 >&2; echo "fuzz: building the library failed" >&2; exit 1; }
# shellcheck disable=SC2046,SC2086
"$CC" -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror $SAN -fsanitize=fuzzer \
  -Inntrainer-offload -Ilayers -Iio test/fuzz/fuzz_config.c \
  build-fuzz/libnntrainer-offload.a \
  $(pkg-config --libs openblas liburing zlib) -liniparser -lm -lpthread \
  -o build-fuzz/fuzz_config ||
  { echo "fuzz: linking the fuzz target failed" >&2; exit 1; }

# --- Run -------------------------------------------------------------------
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

if [ $# -gt 0 ]; then
  # Replay the given inputs.
  exec build-fuzz/fuzz_config "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/nto-fuzz.XXXXXX") || exit 1
mkdir "$work/corpus" "$work/artifacts"
nseed=0
for dir in res test/data/nets test/data/bad; do
  for f in "$dir"/*.ini; do
    [ -f "$f" ] || continue
    cp "$f" "$work/corpus/$(echo "$dir" | tr / _)_$(basename "$f")"
    nseed=$((nseed + 1))
  done
done

# Dictionary: section names, keys and value words of the seeds (only plain
# tokens, so no escaping is needed), plus the INI syntax.
{
  for t in '[' ']' '=' '#' ';' '\x0A' ':' ',' '\"' 'true' 'false' '-1' '0' \
           '2147483647' '4294967296' '1e308' 'nan' 'inf' '1:1:1' 'auto' '64M'; do
    printf '"%s"\n' "$t"
  done
  cat "$work"/corpus/*.ini | tr -d '\r' | sed 's/[#;].*//' |
    sed -n -e 's/^[[:space:]]*\[\([A-Za-z0-9_./:-]*\)\].*/\1/p' \
           -e 's/^[[:space:]]*\([A-Za-z0-9_]*\)[[:space:]]*=[[:space:]]*\([A-Za-z0-9_.:-]*\).*/\1\n\2/p' |
    grep -a '^.\{1,40\}$' | tr '[:upper:]' '[:lower:]' | sort -u | sed 's/.*/"&"/'
} >"$work/ini.dict"

echo "fuzz: $CC libFuzzer + ASan/UBSan, $seconds s, $jobs job(s), $nseed seeds," \
  "$(wc -l <"$work/ini.dict") dictionary entries; work dir $work"
fork=""
[ "$jobs" -gt 1 ] && fork="-fork=$jobs"
# The corpus grows in $work/corpus; crashes, leaks, timeouts and OOMs are
# written to $work/artifacts.
# shellcheck disable=SC2086
(cd "$work" && "$root/build-fuzz/fuzz_config" $fork \
   -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
   -dict=ini.dict -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
   corpus) >"$work/fuzz.log" 2>&1
rc=$?

arts=$(ls "$work/artifacts" 2>/dev/null)
if [ $rc -ne 0 ] || [ -n "$arts" ]; then
  tail -n 60 "$work/fuzz.log"
  echo "fuzz: FAILED (libFuzzer exit status $rc); full log: $work/fuzz.log"
  for a in $arts; do
    echo "fuzz: reproducer: $work/artifacts/$a"
    echo "fuzz:   replay with: sh tools/fuzz.sh $work/artifacts/$a"
  done
  exit 1
fi
# Progress and final statistics.
grep -aE '^#[0-9]+[[:space:]]+INITED' "$work/fuzz.log" | head -n 1
last=$(grep -aE '^#[0-9]+' "$work/fuzz.log" | tail -n 1)
echo "$last"
grep -aE '^stat::|^INFO: exiting' "$work/fuzz.log"
case "$last" in
  *exec/s*) ;;
  *) echo "fuzz: FAILED: the fuzzer reported no progress; log: $work/fuzz.log"; exit 1 ;;
esac
echo "fuzz: clean: no crash, leak, timeout or undefined behaviour in $seconds s"
rm -rf "$work"
exit 0
