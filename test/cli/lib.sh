# lib.sh - what the CLI test scripts share: counting checks and running a
# command against its expected exit status and output. Sourced by them
# (`. "$(dirname "$0")/lib.sh"`) after they set $tmp and the counters
# fails=0 passes=0.

ok() { passes=$((passes + 1)); }

fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

# check NAME CONDITION...: CONDITION (a command) must hold.
check() {
  name=$1
  shift
  if "$@"; then ok; else fail "$name: '$*' does not hold"; fi
}

# expect NAME STATUS PATTERN -- command...: the command (stdin from
# /dev/null, stopped after $limit seconds where the script sets limit)
# exits STATUS and its output (stdout and stderr, kept in $tmp/out) holds
# PATTERN (grep); the status is left in $got.
expect() {
  name=$1 want=$2 pat=$3
  shift 4
  timeout "${limit:-0}" "$@" >"$tmp/out" 2>&1 </dev/null
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$tmp/out"; then
    fail "$name: status $got (want $want), output:"
    sed 's/^/  /' "$tmp/out"
  else
    ok
  fi
}

# on_ram DIR: DIR's filesystem keeps its pages in RAM (tmpfs or ramfs),
# where train refuses a swap directory without --allow-tmpfs-swap.
on_ram() {
  case $(stat -f -c %T "$1" 2>/dev/null) in
  tmpfs | ramfs) return 0 ;;
  esac
  return 1
}

# own_kib ARGS...: the process's own memory before any tensor (code,
# libraries, the plans, compute threads' BLAS buffers) of `train ARGS`, in
# KiB, as the refusal of a 1 MiB budget names it; empty if not named. A
# budget meant to leave the tensors a given room is set above it: it is
# 10.6 MiB on x86-64 at 2 threads, more under qemu-user (25-28 MiB), whose
# RSS includes the emulator's.
own_kib() {
  "$exe" train "$@" --memory-budget 1M 2>&1 |
    sed -n 's/.*own memory before any tensor, \([0-9.]*\) MiB.*/\1/p' |
    awk '{ printf "%.0f", $1 * 1024 }'
}

# json_value KEY FILE: the value of "KEY" in a flat JSON file that has one
# key a line (train's --report-json), without its trailing comma.
json_value() {
  sed -n "s/^ *\"$1\": *\\([^,]*\\),\\{0,1\\}\$/\\1/p" "$2" | head -n 1
}

# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (grep),
# or the background process $pid (when set) ends, or 60 s pass: e.g. a
# run's "iter 1/" or bench's "window 1 ..." before a signal is sent to it;
# the caller checks what happened next.
wait_for() {
  i=0
  while ! grep -q -- "$2" "$1" 2>/dev/null && [ $i -lt 1200 ] &&
    { [ -z "${pid:-}" ] || kill -0 "$pid" 2>/dev/null; }; do
    sleep 0.05
    i=$((i + 1))
  done
}
