#!/bin/sh
# Check which of nntrainer's own INI files nntrainer-offload reads and trains
# (docs/nntrainer-inis.md).
#
#   sh tools/nntrainer_inis.sh NNTRAINER_DIR [EXE]
#
# NNTRAINER_DIR  a checkout of nntrainer (or a copy of its INI files at the
#                same relative paths): every Applications/**/*.ini and
#                test/test_models/models/*.ini under it is checked
# EXE            the trainer (default build/app/nntrainer-offload)
#
# For each INI, in a temporary copy of the INI's directory (so that backbone
# INIs are found and save_path files land there), runs
#   EXE summary INI
#   EXE train INI --data synthetic --iterations 2 --eval-samples 0
# each under `timeout 120`, and prints a markdown table: the INI, whether it
# loads (summary) and trains 2 iterations, why not (the first error line),
# and how many distinct warnings the two runs printed; then the line
# "N of M load and train". Exit status: 0, or 2 on a usage error.
set -u
case "${1:-}" in
  -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  '') echo "usage: sh tools/nntrainer_inis.sh NNTRAINER_DIR [EXE]" >&2; exit 2 ;;
esac
[ -d "$1" ] || { echo "nntrainer_inis: no directory '$1'" >&2; exit 2; }
src=$(cd "$1" && pwd)
exe=${2:-$(cd "$(dirname "$0")/.." && pwd)/build/app/nntrainer-offload}
case "$exe" in /*) ;; */*) exe=$(pwd)/$exe ;; esac
[ -x "$exe" ] || command -v "$exe" >/dev/null ||
  { echo "nntrainer_inis: cannot run '$exe'" >&2; exit 2; }
export OPENBLAS_CORETYPE=Haswell

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nntrainer_inis.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# run NAME CMD...: run CMD in $tmp/d, stderr to $tmp/NAME.err; sets $rc
run() {
  name=$1; shift
  (cd "$tmp/d" && timeout 120 "$exe" "$@" </dev/null >/dev/null 2>"$tmp/$name.err")
  rc=$?
  if [ "$rc" -eq 124 ]; then   # the reason comes first
    { echo "timeout after 120 s"; cat "$tmp/$name.err"; } >"$tmp/t.err"
    mv "$tmp/t.err" "$tmp/$name.err"
  fi
}

# why FILE: its first line that is not a warning or a note, without the
# program name and the list of accepted keys or types, cut to 200 characters
why() {
  grep -v -e '^warning:' -e '^note:' "$1" | sed -n '1{
    s/^nntrainer-offload: //; s/[[:space:]]*$//
    s/ (accepted: [^)]*)$//; s/ (expected one of: [^)]*)$//
    s/|/\\|/g; p; }' | cut -c1-200
}

yn() { if [ "$1" -eq 0 ]; then echo yes; else echo no; fi; }

echo "| INI | loads (summary) | trains 2 iterations | why not | warnings |"
echo "|---|---|---|---|---:|"
n=0 ok=0
{ find "$src/Applications" -name '*.ini' -type f 2>/dev/null | LC_ALL=C sort
  for f in "$src"/test/test_models/models/*.ini; do [ -f "$f" ] && echo "$f"; done
} >"$tmp/list"
while IFS= read -r ini; do
  rm -rf "$tmp/d"
  if ! cp -R "$(dirname "$ini")" "$tmp/d"; then continue; fi
  base=$(basename "$ini")
  run summary summary "$base"; loads=$rc
  run train train "$base" --data synthetic --iterations 2 --eval-samples 0; trains=$rc
  reason=""
  if [ "$loads" -ne 0 ]; then reason=$(why "$tmp/summary.err")
  elif [ "$trains" -ne 0 ]; then reason=$(why "$tmp/train.err"); fi
  [ "$loads$trains" != 00 ] && [ -z "$reason" ] && reason="exit status $loads/$trains"
  warnings=$(cat "$tmp/summary.err" "$tmp/train.err" | grep '^warning:' | sort -u | wc -l | tr -d ' ')
  n=$((n + 1))
  [ "$loads$trains" = 00 ] && ok=$((ok + 1))
  echo "| ${ini#"$src"/} | $(yn "$loads") | $(yn "$trains") | $reason | $warnings |"
done <"$tmp/list"
echo
echo "$ok of $n load and train"
