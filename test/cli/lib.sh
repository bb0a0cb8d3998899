# lib.sh - what the CLI test scripts share: counting checks and running a
# command against its expected exit status and output. Sourced by them
# (`. "$(dirname "$0")/lib.sh"`) after they set $tmp and the counters
# fails=0 passes=0.

ok() { passes=$((passes + 1)); }

fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

# expect NAME STATUS PATTERN -- command...: the command exits STATUS and its
# output (stdout and stderr, kept in $tmp/out) holds PATTERN (grep); the
# status is left in $got.
expect() {
  name=$1 want=$2 pat=$3
  shift 4
  "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$tmp/out"; then
    fail "$name: status $got (want $want), output:"
    sed 's/^/  /' "$tmp/out"
  else
    ok
  fi
}
