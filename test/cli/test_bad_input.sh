#!/bin/sh
# Bad input: every malformed model config in test/data/bad/ and every bad
# data set generated below must be refused with the documented exit status
# (2: config error, 1: runtime data error) and a message naming the file and
# the section and key (configs) or the byte offset (data), never with a
# crash, a hang or a sanitizer report (run it with an ASan/UBSan build too).
#
# The cases are one table, test/data/bad/expect.txt:
#   case|command|status|message fragment
# case: an INI file of test/data/bad/, or data:NAME, a data set this script
# writes into a temporary directory (make_data); command: `both` (train and
# summary must each give the status and the message) or `train`; a '*' in
# the fragment matches any text within the line.
# usage: test_bad_input.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
bad=test/data/bad
table=$bad/expect.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
to=
command -v timeout >/dev/null 2>&1 && to="timeout 120"

# fragment_in FILE FRAGMENT: some line of FILE holds the pieces of FRAGMENT
# (split at '*') in order. ENVIRON keeps awk from reading '\' escapes.
fragment_in() {
  FRAG=$2 awk 'BEGIN { n = split(ENVIRON["FRAG"], part, "*") }
    { s = $0; ok = 1
      for (i = 1; i <= n; i++) {
        p = index(s, part[i]); if (!p) { ok = 0; break }
        s = substr(s, p + length(part[i]))
      }
      if (ok) found = 1 }
    END { exit !found }' "$1"
}

# run CASE WANT FRAGMENT -- command...: one check.
run() {
  name=$1 want=$2 frag=$3
  shift 4
  $to "$@" </dev/null >"$tmp/out" 2>&1
  got=$?
  why=
  if [ "$got" -ge 124 ]; then
    why="crashed or timed out (status $got)"
  elif grep -q -e "Sanitizer" -e "runtime error:" "$tmp/out"; then
    why="sanitizer report"
  elif [ "$got" -ne "$want" ]; then
    why="status $got, want $want"
  elif ! fragment_in "$tmp/out" "$frag"; then
    why="message lacks '$frag'"
  fi
  if [ -n "$why" ]; then
    echo "FAIL $name ($*): $why; output:"
    tail -n 20 "$tmp/out" | sed 's/^/  /'
    return 1
  fi
  return 0
}

# Big-endian 32-bit integers, as IDX headers want. (The printf formats
# below are octal escapes built on purpose.)
# shellcheck disable=SC2059
be32() {
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) \
    $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"
}
# images FILE MAGIC COUNT ROWS COLS PIXEL_BYTES (zeros)
images() {
  { be32 "$2"; be32 "$3"; be32 "$4"; be32 "$5"; zeros "$6"; } >"$1"
}
# labels FILE MAGIC COUNT LABEL_BYTES (printf octal escapes)
# shellcheck disable=SC2059
labels() {
  { be32 "$2"; be32 "$3"; printf "$4"; } >"$1"
}
# A valid IDX split: 4 images of 4x4 (zero-padded to the model's 8x8).
good_split() {
  images "$1/$2-images-idx3-ubyte" 2051 4 4 4 64
  labels "$1/$2-labels-idx1-ubyte" 2049 4 '\000\001\002\003'
}
# nntrainer raw records of the data model: 64 features + 10 label values,
# as float32 (little-endian): 296 bytes each, the features zero, the labels
# one-hot (1.0f is 00 00 80 3f). Both samples of a 2-record file are in the
# one batch of --iterations 1, whatever the shuffle.
zeros() { head -c "$1" /dev/zero; }
raw() { zeros "$2" >"$1"; }
# records FILE N: N records, sample i of class i % 10.
records() {
  i=0
  while [ "$i" -lt "$2" ]; do
    zeros 256
    j=0
    while [ $j -lt 10 ]; do
      if [ $j -eq $((i % 10)) ]; then printf '\000\000\200\077'; else
        zeros 4; fi
      j=$((j + 1))
    done
    i=$((i + 1))
  done >"$1"
}
# poke FILE OFFSET BYTES: overwrite bytes (printf octal escapes) at OFFSET.
# shellcheck disable=SC2059
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }

# The model of the data cases: 1:8:8 input, 10 classes.
model='[Model]
Type = NeuralNetwork
batch_size = 2

[input]
Type = input
Input_Shape = 1:8:8

[fc]
Type = fully_connected
unit = 10
'

# make_data NAME: writes data set NAME and the model using it into
# $d = $tmp/NAME; $data is the --data option to train with ("" for the raw
# files of the model's [train_set]). ini_* cases write a bad model.ini
# instead (bytes the table cannot hold) and train on synthetic data.
make_data() {
  d=$tmp/$1
  data=$d
  mkdir -p "$d"
  printf '%s' "$model" >"$d/model.ini"
  case $1 in
  idx_*) good_split "$d" train && good_split "$d" t10k ;;
  esac
  case $1 in
  idx_images_magic) images "$d/train-images-idx3-ubyte" 2049 4 4 4 64 ;;
  idx_labels_magic) labels "$d/train-labels-idx1-ubyte" 2051 4 '\000\001\002\003' ;;
  idx_header_short) head -c 10 "$d/train-images-idx3-ubyte" >"$d/x" &&
    mv "$d/x" "$d/train-images-idx3-ubyte" ;;
  idx_images_truncated) images "$d/train-images-idx3-ubyte" 2051 4 4 4 32 ;;
  idx_images_truncated_gz)
    images "$d/train-images-idx3-ubyte" 2051 4 4 4 32 &&
      gzip -n "$d/train-images-idx3-ubyte" ;;
  idx_images_cut_gz)
    { be32 2051; be32 200; be32 8; be32 8; head -c 12800 /dev/urandom; } \
      >"$d/train-images-idx3-ubyte"
    awk 'BEGIN { for (i = 0; i < 200; i++) printf "\\%03o", i % 10 }' >"$d/l"
    labels "$d/train-labels-idx1-ubyte" 2049 200 "$(cat "$d/l")"
    gzip -n "$d/train-images-idx3-ubyte"
    size=$(wc -c <"$d/train-images-idx3-ubyte.gz")
    head -c $((size / 2)) "$d/train-images-idx3-ubyte.gz" >"$d/x" &&
      mv "$d/x" "$d/train-images-idx3-ubyte.gz" ;;
  idx_label_range) labels "$d/train-labels-idx1-ubyte" 2049 4 '\000\001\012\003' ;;
  idx_count_mismatch) labels "$d/train-labels-idx1-ubyte" 2049 3 '\000\001\002' ;;
  idx_dims_zero) images "$d/train-images-idx3-ubyte" 2051 4 0 4 0 ;;
  idx_labels_missing) rm "$d/train-labels-idx1-ubyte" ;;
  idx_image_too_large) images "$d/train-images-idx3-ubyte" 2051 4 40 40 6400 ;;
  idx_test_magic) images "$d/t10k-images-idx3-ubyte" 0 4 4 4 64 ;;
  # INI files whose bytes the table cannot hold: CR-only line endings,
  # UTF-16 with and without a byte order mark.
  ini_cr_only) printf '%s' "$model" | tr '\n' '\r' >"$d/model.ini" ;;
  ini_utf16) printf '%s' "$model" | iconv -f UTF-8 -t UTF-16 >"$d/model.ini" ;;
  ini_utf16_no_bom)
    printf '%s' "$model" | iconv -f UTF-8 -t UTF-16LE >"$d/model.ini" ;;
  raw_*)
    data=
    printf '\n[train_set]\ntype = file\npath = train.dat\n' >>"$d/model.ini"
    records "$d/train.dat" 2 ;;
  *)
    echo "test_bad_input.sh: no data case '$1'" >&2
    return 1 ;;
  esac
  case $1 in
  ini_*) data=synthetic ;;
  raw_wrong_size) raw "$d/train.dat" 692 ;;
  raw_empty) raw "$d/train.dat" 0 ;;
  raw_missing) rm "$d/train.dat" ;;
  raw_nan_feature) # sample 1, feature 10: bytes 336..339; NaN either endian
    poke "$d/train.dat" 336 '\377\377\377\377' ;;
  raw_nan_label) # sample 0, label value 3: bytes 268..271
    poke "$d/train.dat" 268 '\377\377\377\177' ;;
  raw_labels_zero) # sample 1 (labels from byte 552): its 1.0 at 556 cleared
    poke "$d/train.dat" 556 '\000\000\000\000' ;;
  raw_label_negative) # sample 1: labels 0, 2.0, -1.0 (sum 1, not >= 0)
    poke "$d/train.dat" 556 '\000\000\000\100\000\000\200\277' ;;
  raw_label_first) # sample 0: a second 1.0 (label value 1), checked at open
    poke "$d/train.dat" 260 '\000\000\200\077' ;;
  raw_other_model) # 4 records of a 1:4:8 model with 5 classes (148 bytes):
    # features 0.5, one-hot labels; 592 bytes, 2 records' worth of ours
    i=0
    while [ $i -lt 4 ]; do
      j=0
      while [ $j -lt 32 ]; do printf '\000\000\000\077'; j=$((j + 1)); done
      j=0
      while [ $j -lt 5 ]; do
        if [ $j -eq $i ]; then printf '\000\000\200\077'; else zeros 4; fi
        j=$((j + 1))
      done
      i=$((i + 1))
    done >"$d/train.dat" ;;
  raw_directory) rm "$d/train.dat" && mkdir "$d/train.dat" ;;
  raw_test_wrong_size)
    printf '\n[test_set]\ntype = file\npath = test.dat\n' >>"$d/model.ini"
    raw "$d/test.dat" 300 ;;
  esac
}

cases=0
while IFS='|' read -r name cmd want frag; do
  case $name in '' | '#'*) continue ;; esac
  cases=$((cases + 1))
  ok=0
  case $name in
  data:*)
    if ! make_data "${name#data:}"; then
      ok=1
    elif [ -n "$data" ]; then
      run "$name" "$want" "$frag" -- "$exe" train "$d/model.ini" \
        --data "$data" --iterations 1 --eval-samples 0 || ok=1
    else
      run "$name" "$want" "$frag" -- "$exe" train "$d/model.ini" \
        --iterations 1 --eval-samples 0 || ok=1
    fi
    ;;
  *)
    if [ ! -f "$bad/$name" ]; then
      echo "FAIL $name: no such file in $bad"
      ok=1
    else
      run "$name" "$want" "$frag" -- "$exe" train "$bad/$name" --data synthetic \
        --iterations 1 --eval-samples 0 || ok=1
      if [ "$cmd" = both ]; then
        run "$name" "$want" "$frag" -- "$exe" summary "$bad/$name" || ok=1
      fi
    fi
    ;;
  esac
  if [ "$ok" -eq 0 ]; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
  fi
done <"$table"

# Every INI file of the directory is in the table.
for f in "$bad"/*.ini; do
  n=${f##*/}
  if ! grep -q "^$n|" "$table"; then
    echo "FAIL $n: not in $table"
    fails=$((fails + 1))
  fi
done

echo "bad_input: $passes passed, $fails failed ($cases cases)"
[ "$fails" -eq 0 ] && [ "$cases" -ge 40 ]
