#!/bin/sh
# Cross-build nntrainer-offload for aarch64 and run its tests under
# qemu-user (docs/cross.md). Safe to run repeatedly:
#  1. installs what is missing from Debian 12 packages (via `sudo` when not
#     root): the arm64 foreign architecture, crossbuild-essential-arm64,
#     qemu-user + qemu-user-binfmt, and the arm64 -dev packages;
#  2. configures ./build-aarch64 with cross/aarch64-linux-gnu.ini, builds;
#  3. runs `meson test` there, the test programs through the cross file's
#     exe_wrapper (qemu-aarch64). qemu-user has no io_uring, so the trainer
#     falls back to pread/pwrite (psync) by itself, and core_offload's
#     bit-identity tests (auto and psync backends) check that fallback.
# Which tests run: the C test programs (suites unit and threads) always.
# The CLI tests are shell scripts that execute the arm64 binary themselves,
# which works only when the kernel hands arm64 binaries to qemu
# (binfmt_misc, registered by qemu-user-binfmt; the script mounts
# binfmt_misc and enables the entry when it can; NTO_CROSS_NO_BINFMT=1
# stops it from trying). Without that they are skipped, and named. Three are
# always skipped, and named with the reason: limits (ulimit -v would limit
# qemu's own address space too), outputs (its signal cases allow 30 s
# for a training iteration that takes minutes under qemu) and bench_profile
# (its runs under a 0.2 CPU quota outlast its limit under qemu). Always with
# NTO_TEST_QUICK=1 (core_offload on the small nets only, io_checkpoint on
# fewer offsets: ResNet-18 and MobileNetV2 are far too slow under
# emulation) and meson's timeouts multiplied by 10 (the cli script takes 5-10
# minutes under qemu, 20 s natively). NTO_JOBS=J: J compile jobs.
# Closing line: "cross tests: N passed, N failed, N skipped".
# Arguments are passed to `meson test`; tests named there run even if
# skipped by default.
# Exit status: non-zero if the install, the build or any test failed.
set -u
cd "$(dirname "$0")/.." || exit 1
B=build-aarch64
case "${1:-}" in
  -h|--help)
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    echo "usage: sh tools/cross-test.sh [MESON-TEST-ARGS...]"
    exit 0 ;;
esac

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
t0=$(date +%s)

# ---------------------------------------------------------------- install
HOST_PKGS="meson ninja-build pkgconf python3 gnuplot-nox \
crossbuild-essential-arm64 qemu-user qemu-user-binfmt"
ARM_PKGS="libc6-dev liburing-dev libopenblas-dev libiniparser-dev \
libcmocka-dev zlib1g-dev libstb-dev"
installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=""
for p in $HOST_PKGS; do
  installed "$p" || missing="$missing $p"
done
for p in $ARM_PKGS; do
  installed "$p:arm64" || missing="$missing $p:arm64"
done
if [ -n "$missing" ]; then
  echo "cross-test: installing$missing"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64 || exit 1
  fi
  $SUDO apt-get update -qq || exit 1
  # Multi-Arch: same packages must have one version on both architectures:
  # name the amd64 ones too, so that apt upgrades them together.
  native=""
  for p in $ARM_PKGS; do
    installed "$p" && native="$native $p"
  done
  # shellcheck disable=SC2086 # lists of package names
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends $missing $native || exit 1
fi
t1=$(date +%s)

# ------------------------------------------------------------------ build
if [ ! -f $B/build.ninja ]; then
  rm -rf $B
  meson setup $B --cross-file cross/aarch64-linux-gnu.ini || exit 1
fi
# shellcheck disable=SC2086 # empty or one -jJ
ninja -C $B ${NTO_JOBS:+-j$NTO_JOBS} || exit 1
t2=$(date +%s)

# ------------------------------------------------- binfmt for the CLI tests
exe=$B/app/nntrainer-offload
# Can the kernel execute it (through binfmt_misc and qemu)? Bounded in time.
direct() { timeout 60 "$exe" --version >/dev/null 2>&1; }
# qemu must take the arm64 loader and libraries from / (the multiarch
# packages), as the cross file's exe_wrapper does; see the cross file.
unset QEMU_LD_PREFIX
if ! direct && [ "${NTO_CROSS_NO_BINFMT:-0}" != 1 ]; then
  bm=/proc/sys/fs/binfmt_misc
  [ -f $bm/register ] || $SUDO mount -t binfmt_misc binfmt_misc $bm 2>/dev/null
  if [ -f $bm/qemu-aarch64 ]; then # registered but disabled
    echo 1 | $SUDO tee $bm/qemu-aarch64 >/dev/null 2>&1
  elif [ -f $bm/register ]; then
    if command -v update-binfmts >/dev/null 2>&1; then
      $SUDO update-binfmts --enable qemu-aarch64 2>/dev/null
    elif [ -f /usr/lib/binfmt.d/qemu-aarch64.conf ]; then
      grep -v -e '^#' -e '^$' /usr/lib/binfmt.d/qemu-aarch64.conf | head -n 1 |
        $SUDO tee $bm/register >/dev/null 2>&1
    fi
  fi
fi

export NTO_TEST_QUICK=1
# Emulation makes training 30-100x slower than native (docs/cross.md): the
# cli script takes 5-10 minutes under qemu where its timeout is 2.
TMUL=10
# Tests that cannot pass under qemu-user whatever the code does (they run
# natively, in tools/test.sh): why, or nothing for the others.
emu_skip() {
  case $1 in
  limits) echo "its ulimit -v cases limit qemu's own address space too" \
    "(a 128 MiB JIT buffer, the guest's stack), so the program's sums cannot hold" ;;
  outputs) echo "its signal cases give a training iteration 30 s, and one" \
    "takes minutes under qemu" ;;
  bench_profile) echo "its runs under the sdcard profile's 0.2 CPU quota take" \
    "seconds natively and more than its 280 s limit under qemu" ;;
  esac
}
# Whether the arguments name tests (meson test's positional arguments; the
# options listed take a value).
names_given() {
  while [ $# -gt 0 ]; do
    case $1 in
    --maxfail | --repeat | --gdb-path | --wrapper | -C | --suite | --no-suite | \
      --logbase | --num-processes | -t | --timeout-multiplier | --setup | --test-args)
      shift ;;
    -*) ;;
    *) return 0 ;;
    esac
    [ $# -gt 0 ] && shift
  done
  return 1
}
if direct; then
  binfmt=1
  echo "cross-test: the kernel runs arm64 binaries through qemu (binfmt_misc): the CLI tests run too"
else
  binfmt=0
  echo "cross-test: arm64 binaries cannot be executed directly (no binfmt_misc entry for qemu-aarch64):"
  echo "cross-test: running the C unit tests only; the CLI tests (they execute the binary from sh) are skipped"
fi
# Tests named in the arguments run as named. Otherwise: those the options
# select ("PROJECT[:SUITE] / NAME" lines), less the ones skipped here.
run="" skipped="" no_binfmt=""
if ! names_given "$@"; then
  list=$(meson test -C $B --no-rebuild --list "$@" 2>/dev/null | grep ' / ')
  for t in $(echo "$list" | sed 's/^.* \/ //'); do
    why=$(emu_skip "$t")
    if [ -n "$why" ]; then
      echo "cross-test: skipped under emulation: $t: $why"
      skipped="$skipped $t"
    elif [ $binfmt = 0 ] && ! echo "$list" | grep -q -e ":unit / $t\$" -e ":threads / $t\$"; then
      no_binfmt="$no_binfmt $t"
    else
      run="$run $t"
    fi
  done
  [ -z "$no_binfmt" ] || echo "cross-test: skipped without binfmt_misc:$no_binfmt"
  skipped="$skipped $no_binfmt"
  # every selected test skipped: nothing to run (with none selected, meson
  # test runs and says so, and no log counts as a failure)
  [ -n "$run" ] || [ -z "$list" ] || run=none
fi

log=$B/meson-logs/testlog.json
rm -f $log
status=0
if [ "$run" != none ]; then
  # shellcheck disable=SC2086 # $run: a list of test names
  meson test -C $B --no-rebuild --print-errorlogs --timeout-multiplier $TMUL "$@" $run
  status=$?
fi
t3=$(date +%s)

pass=0 fail=0 skip=0
if [ -f $log ]; then
  pass=$(grep -c '"result": "OK"' $log)
  fail=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' $log)
  skip=$(grep -c '"result": "SKIP"' $log)
elif [ "$run" != none ]; then
  fail=1
fi
skip=$((skip + $(echo "$skipped" | wc -w)))
[ "$fail" -eq 0 ] || status=1
echo "cross-test: times: install $((t1 - t0)) s, build $((t2 - t1)) s, tests $((t3 - t2)) s (NTO_TEST_QUICK=1, timeouts x$TMUL)"
echo "cross tests: $pass passed, $fail failed, $skip skipped"
exit $status
