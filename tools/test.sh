#!/bin/sh
# Run the whole test suite (after tools/setup.sh), then
#  - the threaded tests again under ThreadSanitizer (build-tsan), and
#  - the whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer
#    with leak checking (build-asan; any report fails the test),
# both with NTO_TEST_QUICK=1 (small networks only) and single-threaded BLAS,
# then check that build/ (our kernels' widest clones, clones.h) and
# build-asan (built without clones) train small nets to the same bytes,
# and print a closing line "tests: N passed, N failed, N skipped" over all
# runs (the clones check counts one per net). NTO_NO_TSAN=1 / NTO_NO_ASAN=1
# skip a sanitizer run (NTO_NO_ASAN=1 the clones check too); NTO_JOBS=J
# limits the sanitizer builds to J compile jobs. Arguments are passed to the
# first `meson test`. Exit status: non-zero if any test (or build) failed.
# The fuzzer (tools/fuzz.sh) and cppcheck (tools/cppcheck.sh) are separate
# steps of .ci/run.
set -u
cd "$(dirname "$0")/.." || exit 1
J=${NTO_JOBS:+-j$NTO_JOBS}
meson test -C build --print-errorlogs "$@"
status=$?
logs=build/meson-logs/testlog.json

# OpenBLAS's own threads are not instrumented: keep BLAS single-threaded.
if [ "${NTO_NO_TSAN:-0}" != 1 ]; then
  if [ ! -f build-tsan/build.ninja ]; then
    rm -rf build-tsan
    meson setup build-tsan -Db_sanitize=thread -Dbuildtype=debugoptimized \
      >/dev/null || status=1
  fi
  tsan_targets="test/test_core_offload test/test_core_parallel test/test_io_iobackend
    test/test_layer_conv2d test/test_layer_fully_connected"
  # shellcheck disable=SC2086
  if out=$(ninja -C build-tsan $J $tsan_targets 2>&1); then
    echo "== ThreadSanitizer: threaded tests (build-tsan)"
    OPENBLAS_NUM_THREADS=1 NTO_TEST_QUICK=1 \
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      meson test -C build-tsan --no-rebuild --suite threads --print-errorlogs \
      || status=1
    logs="$logs build-tsan/meson-logs/testlog.json"
  else
    echo "$out" | tail -n 40 >&2
    echo "ThreadSanitizer build failed" >&2
    status=1
  fi
fi

# The sanitizer build has no kernel clones (-Dclones=false: the baseline
# x86-64 loops), so the suite runs them as well as the widest clone build/
# runs here, and the clones check below compares the two.
if [ "${NTO_NO_ASAN:-0}" != 1 ]; then
  if [ ! -f build-asan/build.ninja ]; then
    rm -rf build-asan
    meson setup build-asan -Db_sanitize=address,undefined \
      -Dbuildtype=debugoptimized -Dclones=false >/dev/null || status=1
  else
    meson configure build-asan -Dclones=false >/dev/null || status=1
  fi
  # shellcheck disable=SC2086
  if out=$(ninja -C build-asan $J 2>&1); then
    echo "== AddressSanitizer + UndefinedBehaviorSanitizer: whole suite (build-asan)"
    OPENBLAS_NUM_THREADS=1 NTO_TEST_QUICK=1 \
      ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" \
      UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
      meson test -C build-asan --no-rebuild --print-errorlogs \
      || status=1
    logs="$logs build-asan/meson-logs/testlog.json"
  else
    echo "$out" | tail -n 40 >&2
    echo "AddressSanitizer build failed" >&2
    status=1
  fi
fi

# Kernel clones (nntrainer-offload/clones.h): nets with depthwise, 3x3
# (im2col and Winograd: ResNet-18's 64- and 128-channel stages) and 1x1
# convolutions, batch normalization, ReLU/ReLU6, Adam and SGD, trained
# by build/ (the widest clone this CPU runs) and by build-asan (no clones),
# must save the same bytes.
clone_pass=0 clone_fail=0
if [ "${NTO_NO_ASAN:-0}" != 1 ] && [ -x build-asan/app/nntrainer-offload ]; then
  echo "== kernel clones: the same weights with and without them"
  ctmp=$(mktemp -d)
  for net in res/mobilenetv2_32.ini test/data/nets/tiny_resnet.ini \
    test/data/nets/lenet.ini res/resnet18.ini; do
    for b in build build-asan; do
      ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" \
        "$b/app/nntrainer-offload" train "$net" --data synthetic --batch-size 4 \
        --iterations 2 --eval-samples 0 --save "$ctmp/$b.bin" >"$ctmp/out" 2>&1 ||
        { sed 's/^/  /' "$ctmp/out"; rm -f "$ctmp/$b.bin"; }
    done
    if [ -s "$ctmp/build.bin" ] && cmp -s "$ctmp/build.bin" "$ctmp/build-asan.bin"; then
      clone_pass=$((clone_pass + 1))
    else
      echo "FAIL clones $net: build/ and build-asan/ saved different weights"
      clone_fail=$((clone_fail + 1))
      status=1
    fi
    rm -f "$ctmp"/*.bin "$ctmp"/*.safetensors
  done
  rm -rf "$ctmp"
  echo "clones: $clone_pass passed, $clone_fail failed"
fi

pass=$clone_pass fail=$clone_fail skip=0
for log in $logs; do
  [ -f "$log" ] || continue
  pass=$((pass + $(grep -c '"result": "OK"' "$log")))
  fail=$((fail + $(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")))
  skip=$((skip + $(grep -c '"result": "SKIP"' "$log")))
done
echo "tests: $pass passed, $fail failed, $skip skipped"
exit $status
