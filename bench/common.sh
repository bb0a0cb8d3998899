# common.sh - helpers shared by the bench scripts (POSIX sh; sourced, not
# run). The caller sets $root (the repository) and defines die().

# The command line as typed, shell-quoted where needed: quote_cmdline "$0" "$@"
quote_cmdline() {
  cmdline="sh $1"
  shift
  for a in "$@"; do
    case $a in
      *[!A-Za-z0-9_./=,:+-]*|'') cmdline="$cmdline '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
      *) cmdline="$cmdline $a" ;;
    esac
  done
}

# Is $1 a positive integer?
isnum() { case $1 in ''|*[!0-9]*) return 1 ;; *) [ "$1" -gt 0 ] ;; esac; }

# Resolve $model against the repository and check it and the trainer $bin.
check_model_and_bin() {
  [ -f "$model" ] || { [ -f "$root/$model" ] && model=$root/$model; } \
    || die "no model file '$model'"
  [ -x "$bin" ] || die "no trainer binary '$bin' (build it: ninja -C build)"
}
