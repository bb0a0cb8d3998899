#!/bin/sh
# Run the whole test suite (after tools/setup.sh) and print a closing line
# "tests: N passed, N failed, N skipped". Exit status: meson test's.
set -u
cd "$(dirname "$0")/.."
meson test -C build --print-errorlogs "$@"
status=$?
log=build/meson-logs/testlog.json
if [ -f "$log" ]; then
  pass=$(grep -c '"result": "OK"' "$log")
  fail=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
  skip=$(grep -c '"result": "SKIP"' "$log")
  echo "tests: $pass passed, $fail failed, $skip skipped"
fi
exit $status
