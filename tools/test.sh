#!/bin/sh
# Run the whole test suite (after tools/setup.sh), then the threaded tests
# again under ThreadSanitizer (build-tsan; NTO_TEST_QUICK=1 keeps them to
# the small networks), and print a closing line
# "tests: N passed, N failed, N skipped" over both runs.
# NTO_NO_TSAN=1 skips the ThreadSanitizer run. Exit status: non-zero if
# any test failed.
set -u
cd "$(dirname "$0")/.."
meson test -C build --print-errorlogs "$@"
status=$?
logs=build/meson-logs/testlog.json
if [ "${NTO_NO_TSAN:-0}" != 1 ]; then
  if [ ! -d build-tsan ]; then
    meson setup build-tsan -Db_sanitize=thread -Dbuildtype=debugoptimized \
      >/dev/null || status=1
  fi
  tsan_targets="test/test_core_offload test/test_io_iobackend"
  # OpenBLAS's own threads are not instrumented: keep BLAS single-threaded.
  if ninja -C build-tsan $tsan_targets >/dev/null; then
    OPENBLAS_NUM_THREADS=1 NTO_TEST_QUICK=1 \
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      meson test -C build-tsan --no-rebuild --suite threads --print-errorlogs \
      || status=1
    logs="$logs build-tsan/meson-logs/testlog.json"
  else
    echo "ThreadSanitizer build failed" >&2
    status=1
  fi
fi
pass=0 fail=0 skip=0
for log in $logs; do
  [ -f "$log" ] || continue
  pass=$((pass + $(grep -c '"result": "OK"' "$log")))
  fail=$((fail + $(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")))
  skip=$((skip + $(grep -c '"result": "SKIP"' "$log")))
done
echo "tests: $pass passed, $fail failed, $skip skipped"
exit $status
