#!/bin/sh
# CLI contract: exit statuses (0 ok, 1 runtime, 2 usage/config), messages
# naming file/section/key, --help/--version, a short synthetic training run
# that saves nntrainer .bin and safetensors files.
# usage: test_cli.sh PATH/TO/nntrainer-offload   (run from the repo root)
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

expect() { # expect NAME STATUS PATTERN -- command...
  name=$1 want=$2 pat=$3
  shift 4
  "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$tmp/out"; then
    echo "FAIL $name: status $got (want $want), output:"
    sed 's/^/  /' "$tmp/out"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

printf '[Model]\nType=NeuralNetwork\nbatch_size=2\n[in]\ntype=input\ninput_shape=1:8:8\n[c]\ntype=conv2d\nfilters=-3\nkernel_size=3\n' >"$tmp/bad.ini"

expect version 0 "nntrainer-offload 0" -- "$exe" --version
expect help 0 "summary MODEL.ini" -- "$exe" --help
expect train_help 0 "--iterations" -- "$exe" train --help
expect no_command 2 "usage" -- "$exe"
expect unknown_command 2 "unknown command" -- "$exe" frobnicate
expect unknown_option 2 "unknown option '--bogus'" -- "$exe" train --bogus
expect bad_number 2 "option --iterations" -- "$exe" train res/resnet18.ini --iterations x
expect missing_file 2 "cannot open" -- "$exe" summary "$tmp/none.ini"
expect bad_config 2 "bad.ini: \[c\] key 'filters'" -- "$exe" train "$tmp/bad.ini"
expect summary 0 "12557322 trainable parameters" -- "$exe" summary res/resnet18.ini
expect train_synthetic 0 "peak RSS" -- "$exe" train test/data/nets/fmnist_small.ini \
  --data synthetic --iterations 3 --eval-samples 8 --save "$tmp/w.bin"
[ -s "$tmp/w.bin" ] && [ -s "$tmp/w.safetensors" ] && passes=$((passes + 1)) ||
  { echo "FAIL save: weight files missing"; fails=$((fails + 1)); }
expect missing_data 1 "cannot open" -- "$exe" train test/data/nets/fmnist_small.ini \
  --data "$tmp/nodata" --iterations 1

echo "cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
