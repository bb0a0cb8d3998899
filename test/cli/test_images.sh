#!/bin/sh
# Image folders and predict, as a user with photos would use them: a folder
# written by test/make_images.c (three classes of stripes and spots; PNG,
# JPEG and BMP; grey and RGB; sizes around 20-32 pixels) trains
# test/data/nets/images.ini (16x16 input); then
# - the data line names the classes, the test accuracy reaches 90%;
# - evaluate gives train's last test line and names the classes;
# - predict names each image's class from the saved weights' class names
#   (the .bin has none: labels);
# - --valid-split on a folder of class folders, --classes with names kept;
# - an unreadable image is an error naming it, or skipped with
#   --skip-bad-images; an empty class folder keeps its label and is named;
#   a class count that differs from the model's output is a usage error.
# usage: test_images.sh PATH/TO/nntrainer-offload PATH/TO/make_images
set -u
exe=$1
make_images=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
net=test/data/nets/images.ini

. "$(dirname "$0")/lib.sh"

"$make_images" "$tmp/d" 40 10 || { echo "FAIL make_images"; exit 1; }

expect train 0 "data: images .*/d/train: 120 samples, 3 classes (hstripes, spots, vstripes), decoded to 3 channels, resized to 16x16 (bilinear)" \
  -- "$exe" train "$net" --data "$tmp/d" --save "$tmp/w.bin"
cp "$tmp/out" "$tmp/train.out"
acc=$(grep "^epoch 4: test" "$tmp/train.out" | sed 's/.*accuracy \([0-9]*\)\..*/\1/')
[ -n "$acc" ] && [ "$acc" -ge 90 ] && passes=$((passes + 1)) ||
  { echo "FAIL train_accuracy: ${acc:-none}%"; fails=$((fails + 1)); }
last=$(grep "^epoch 4: test loss" "$tmp/train.out" | sed 's/epoch 4: test //; s/ (30 samples)//')
expect evaluate 0 "^$last (" -- "$exe" evaluate "$net" --weights "$tmp/w.safetensors" \
  --data "$tmp/d" --window 1
grep -q "^    1       10 .*  spots$" "$tmp/out" && passes=$((passes + 1)) ||
  { echo "FAIL evaluate_names:"; sed 's/^/  /' "$tmp/out"; fails=$((fails + 1)); }

# predict: every test image of a class is named after its folder
for c in hstripes spots vstripes; do
  expect "predict_$c" 0 "000.png: $c " -- "$exe" predict "$net" \
    --weights "$tmp/w.safetensors" "$tmp/d/test/$c/000.png" \
    "$tmp/d/test/$c/001.jpg" "$tmp/d/test/$c/002.bmp" --top 1
  n=$(grep -c ": $c [0-9.]*%$" "$tmp/out")
  [ "$n" -eq 3 ] && passes=$((passes + 1)) ||
    { echo "FAIL predict_top1_$c: $n of 3"; sed 's/^/  /' "$tmp/out"; fails=$((fails + 1)); }
done
expect predict_bin 0 "000.png: 1 " -- "$exe" predict "$net" --weights "$tmp/w.bin" \
  "$tmp/d/test/spots/000.png" --top 1
expect predict_data 0 "^sample 29 (vstripes): vstripes" -- "$exe" predict "$net" \
  --weights "$tmp/w.safetensors" --data "$tmp/d" --samples 30 --top 1
expect predict_json 0 "spots" -- "$exe" predict "$net" --weights "$tmp/w.safetensors" \
  "$tmp/d/test/spots/000.png" --json "$tmp/p.json"
grep -q '^    {"input": ".*/000.png", "probabilities": \[[0-9.e-]*, [0-9.e-]*, [0-9.e-]*\]}$' \
  "$tmp/p.json" && passes=$((passes + 1)) ||
  { echo "FAIL predict_json:"; sed 's/^/  /' "$tmp/p.json"; fails=$((fails + 1)); }
expect predict_missing 1 "nope.png: cannot open" -- "$exe" predict "$net" \
  --weights "$tmp/w.safetensors" "$tmp/nope.png"
expect predict_both 2 "image files or --data, not both" -- "$exe" predict "$net" \
  --weights "$tmp/w.safetensors" --data "$tmp/d" "$tmp/d/test/spots/000.png"
expect predict_normalize 2 "--normalize 0.5: expected" -- "$exe" predict "$net" \
  --weights "$tmp/w.safetensors" --normalize 0.5 "$tmp/d/test/spots/000.png"

# a folder of class folders, split by --valid-split; --classes by index
expect valid_split 0 "test: images .*/d/train: 30 samples" -- "$exe" train "$net" \
  --data "$tmp/d/train" --valid-split 0.25 --iterations 2 --save "$tmp/v.bin"
grep -q "data: images .*/d/train: 90 samples" "$tmp/out" && passes=$((passes + 1)) ||
  { echo "FAIL valid_split_train:"; sed 's/^/  /' "$tmp/out"; fails=$((fails + 1)); }
sed 's/^unit = 3$/unit = 2/' "$net" >"$tmp/two.ini"
expect classes 0 "80 samples (classes 0,2 as 0-1)" -- "$exe" train "$tmp/two.ini" \
  --data "$tmp/d" --classes 0,2 --save "$tmp/two.bin"
expect classes_predict 0 "000.png: vstripes " -- "$exe" predict "$tmp/two.ini" \
  --weights "$tmp/two.safetensors" "$tmp/d/test/vstripes/000.png" --top 1

# unreadable images, an empty class, the class count
cp -r "$tmp/d" "$tmp/bad"
echo "not an image" >"$tmp/bad/train/spots/broken.png"
expect bad_image 1 "bad/train/spots/broken.png: not an image" -- "$exe" train "$net" \
  --data "$tmp/bad" --iterations 1
expect skip_bad 0 "1 unreadable files skipped" -- "$exe" train "$net" \
  --data "$tmp/bad" --iterations 1 --skip-bad-images
mkdir "$tmp/bad/train/zebra" "$tmp/bad/test/zebra"
expect class_count 2 "4 class folders, but the model's output has 3 values" -- \
  "$exe" train "$net" --data "$tmp/bad" --skip-bad-images --iterations 1
sed 's/^unit = 3$/unit = 4/' "$net" >"$tmp/four.ini"
expect empty_class 0 "no images of zebra" -- "$exe" train "$tmp/four.ini" \
  --data "$tmp/bad" --skip-bad-images --iterations 1

echo "images: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
