#!/bin/sh
# Install what nntrainer-offload needs from Debian 12 packages (only what is
# missing), then configure and build into ./build. Safe to run repeatedly.
# python3 and gnuplot-nox are for `bench` (its test checks the --json output
# with python3's json module; --plot runs gnuplot) and python3 also for
# test_torch2nto.sh; strace and e2fsprogs let test_limits.sh fill an ext2
# image around a run (it skips that case without them, or without root).
# With --ci it also installs the tools of .ci/run's extra steps: clang with
# its compiler-rt (libFuzzer, for tools/fuzz.sh) and cppcheck (for
# tools/cppcheck.sh). tools/test.sh's sanitizer runs need only gcc.
set -eu
cd "$(dirname "$0")/.."
PKGS="gcc libc6-dev meson ninja-build pkg-config liburing-dev libopenblas-dev \
libiniparser-dev libcmocka-dev zlib1g-dev dataset-fashion-mnist \
python3 gnuplot-nox libstb-dev strace e2fsprogs"
case "${1:-}" in
  --ci) PKGS="$PKGS clang libclang-rt-dev cppcheck" ;;
  "") ;;
  *) echo "usage: sh tools/setup.sh [--ci]" >&2; exit 2 ;;
esac
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "setup: installing$missing"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086 # $missing is a list of package names
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends $missing
fi
[ -f build/build.ninja ] || meson setup build
ninja -C build
