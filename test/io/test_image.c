/*
 * test_image.c - image files as samples (io/image.h) and image folders as
 * datasets (dataset.h nto_dataset_open_image_dir): each format decoded
 * (PNG, BMP exactly, JPEG within its loss), grey to RGB and RGB to grey,
 * resizing, normalization and its parsing, corrupt and unreadable files,
 * a folder with an empty class, held-out splits, skipped files, kept
 * classes with their names. Fixtures are written with stb_image_write
 * (Debian's libstb) into a mkdtemp directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dataset.h"
#include "image.h"
#include "tmpdir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb_image_write.h>

typedef tmpdir_fixture fixture;

static int setup(void **state) { return tmpdir_fixture_setup(state, "image"); }
static int teardown(void **state) { return tmpdir_fixture_teardown(state); }

static void assert_msg_has(const nto_err *e, const char *s) {
  if (!strstr(e->msg, s))
    fail_msg("message '%s' lacks '%s'", e->msg, s);
}

/* A w x h image of c channels whose value at (x, y, ch) is pix(). */
static unsigned char pix(int x, int y, int ch, int seed) {
  return (unsigned char)((x * 37 + y * 11 + ch * 80 + seed * 53) & 255);
}

static unsigned char *make(int w, int h, int c, int seed) {
  unsigned char *p = malloc((size_t)w * h * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int ch = 0; ch < c; ch++)
        p[((size_t)y * w + x) * c + ch] = pix(x, y, ch, seed);
  return p;
}

/* path = dir/name, an image written in the format of name's extension. */
static void write_image(const char *dir, const char *name, int w, int h, int c,
                        int seed, char *path, size_t len) {
  snprintf(path, len, "%s/%s", dir, name);
  unsigned char *p = make(w, h, c, seed);
  const char *ext = strrchr(name, '.') + 1;
  int ok = !strcmp(ext, "png")   ? stbi_write_png(path, w, h, c, p, w * c)
           : !strcmp(ext, "bmp") ? stbi_write_bmp(path, w, h, c, p)
                                 : stbi_write_jpg(path, w, h, c, p, 95);
  assert_true(ok);
  free(p);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* PNG and BMP decode exactly (no resize: the image's own size); JPEG of a
 * flat colour within its loss; channels converted as stb_image does. */
static void test_formats(void **state) {
  fixture *fx = *state;
  char path[512];
  nto_err err = {0};
  float x[3 * 8 * 8];
  const char *exact[] = {"a.png", "a.bmp"};
  for (int f = 0; f < 2; f++) {
    write_image(fx->dir, exact[f], 5, 6, 3, 1, path, sizeof path);
    assert_int_equal(nto_image_check(path, &err), 0);
    assert_int_equal(
        nto_image_load(path, (nto_shape){1, 3, 6, 5}, NULL, x, &err), 0);
    for (int ch = 0; ch < 3; ch++)
      for (int y = 0; y < 6; y++)
        for (int xx = 0; xx < 5; xx++)
          assert_true(x[(ch * 6 + y) * 5 + xx] == pix(xx, y, ch, 1) / 255.0f);
  }
  /* grey PNG to 3 channels: replicated */
  write_image(fx->dir, "g.png", 5, 6, 1, 2, path, sizeof path);
  assert_int_equal(nto_image_load(path, (nto_shape){1, 3, 6, 5}, NULL, x, &err),
                   0);
  for (int i = 0; i < 30; i++) {
    assert_true(x[i] == pix(i % 5, i / 5, 0, 2) / 255.0f);
    assert_true(x[30 + i] == x[i] && x[60 + i] == x[i]);
  }
  /* RGB to 1 channel: stb_image's luminance (77 r + 150 g + 29 b) >> 8 */
  write_image(fx->dir, "c.png", 5, 6, 3, 3, path, sizeof path);
  assert_int_equal(nto_image_load(path, (nto_shape){1, 1, 6, 5}, NULL, x, &err),
                   0);
  for (int i = 0; i < 30; i++) {
    int r = pix(i % 5, i / 5, 0, 3), g = pix(i % 5, i / 5, 1, 3),
        b = pix(i % 5, i / 5, 2, 3);
    assert_true(x[i] == (float)((r * 77 + g * 150 + b * 29) >> 8) / 255.0f);
  }
  /* JPEG of a flat colour */
  unsigned char flat[8 * 8 * 3];
  for (int i = 0; i < 64; i++)
    flat[3 * i] = 200, flat[3 * i + 1] = 100, flat[3 * i + 2] = 50;
  snprintf(path, sizeof path, "%s/flat.jpg", fx->dir);
  assert_true(stbi_write_jpg(path, 8, 8, 3, flat, 95));
  assert_int_equal(nto_image_load(path, (nto_shape){1, 3, 8, 8}, NULL, x, &err),
                   0);
  for (int i = 0; i < 64; i++) {
    assert_true(fabsf(x[i] - 200 / 255.0f) < 4 / 255.0f);
    assert_true(fabsf(x[64 + i] - 100 / 255.0f) < 4 / 255.0f);
    assert_true(fabsf(x[128 + i] - 50 / 255.0f) < 4 / 255.0f);
  }
}

/* Resizing: a flat image stays flat at any size (also shrinking 9x7 to
 * 4x3, a ratio that stb_image_resize's Debian 12 version aborts on);
 * enlarging a 2x1 ramp interpolates between its two pixels. */
static void test_resize(void **state) {
  fixture *fx = *state;
  char path[512];
  nto_err err = {0};
  unsigned char flat[7 * 9];
  memset(flat, 123, sizeof flat);
  snprintf(path, sizeof path, "%s/flat.png", fx->dir);
  assert_true(stbi_write_png(path, 9, 7, 1, flat, 9));
  float x[3 * 16 * 16];
  const nto_shape sizes[] = {{1, 1, 3, 4}, {1, 3, 16, 16}};
  for (int s = 0; s < 2; s++) {
    assert_int_equal(nto_image_load(path, sizes[s], NULL, x, &err), 0);
    for (size_t i = 0; i < nto_shape_sample(sizes[s]); i++)
      assert_true(fabsf(x[i] - 123 / 255.0f) < 1e-6f);
  }
  unsigned char ramp[2] = {0, 255};
  snprintf(path, sizeof path, "%s/ramp.png", fx->dir);
  assert_true(stbi_write_png(path, 2, 1, 1, ramp, 2));
  assert_int_equal(nto_image_load(path, (nto_shape){1, 1, 1, 8}, NULL, x, &err),
                   0);
  assert_true(x[0] < 0.1f && x[7] > 0.9f);
  for (int i = 1; i < 8; i++)
    assert_true(x[i] >= x[i - 1]);
  /* half-pixel centres, as torch's interpolate(mode="bilinear"): output
   * pixel 3 samples input coordinate 2/8 * 3.5 - 0.5 = 0.375 */
  assert_true(fabsf(x[3] - 0.375f) < 1e-6f && fabsf(x[4] - 0.625f) < 1e-6f);
}

/* --normalize values and (x - mean) / std on load. */
static void test_normalize(void **state) {
  fixture *fx = *state;
  nto_err err = {0};
  nto_image_norm n;
  assert_int_equal(nto_image_norm_parse("imagenet", 3, &n, &err), 0);
  assert_int_equal(n.n, 3);
  assert_true(n.mean[1] == 0.456f && n.std[2] == 0.225f);
  assert_int_equal(nto_image_norm_parse("0.5/0.25", 3, &n, &err), 0);
  assert_true(n.mean[2] == 0.5f && n.std[0] == 0.25f);
  assert_int_equal(nto_image_norm_parse("0.1,0.2,0.3/1,2,4", 3, &n, &err), 0);
  assert_true(n.mean[1] == 0.2f && n.std[2] == 4.0f);
  const char *bad[] = {"0.5",   "0.5/0",           "1,2/3,4", "0.5/",   "a/b",
                       "1/2/3", "0.1,0.2,0.3/1,2", "nan/1",   "0.5/inf"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(nto_image_norm_parse(bad[i], 3, &n, &err), NTO_ECONFIG);
    assert_msg_has(&err, bad[i]);
  }
  char path[512];
  write_image(fx->dir, "n.png", 4, 4, 3, 4, path, sizeof path);
  float x[48];
  assert_int_equal(nto_image_norm_parse("0.1,0.2,0.3/1,2,4", 3, &n, &err), 0);
  assert_int_equal(nto_image_load(path, (nto_shape){1, 3, 4, 4}, &n, x, &err),
                   0);
  for (int ch = 0; ch < 3; ch++)
    for (int i = 0; i < 16; i++)
      assert_true(x[ch * 16 + i] ==
                  (pix(i % 4, i / 4, ch, 4) / 255.0f - n.mean[ch]) / n.std[ch]);
}

/* Corrupt, truncated, missing, non-regular and oversized files: errors
 * naming the file. */
static void test_bad_files(void **state) {
  fixture *fx = *state;
  char path[512], cut[512];
  nto_err err = {0};
  float x[3 * 8 * 8];
  nto_shape s = {1, 3, 8, 8};
  snprintf(path, sizeof path, "%s/text.png", fx->dir);
  write_text(path, "this is not an image at all");
  assert_int_equal(nto_image_check(path, &err), NTO_EDATA);
  assert_msg_has(&err, path);
  assert_int_equal(nto_image_load(path, s, NULL, x, &err), NTO_EDATA);
  assert_msg_has(&err, "not an image");
  /* a PNG cut after its header: the header reads, the body does not */
  write_image(fx->dir, "whole.png", 16, 16, 3, 5, path, sizeof path);
  snprintf(cut, sizeof cut, "%s/cut.png", fx->dir);
  FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
  char buf[60];
  assert_int_equal(fread(buf, 1, sizeof buf, in), sizeof buf);
  fwrite(buf, 1, sizeof buf, out);
  fclose(in);
  fclose(out);
  assert_int_equal(nto_image_load(cut, s, NULL, x, &err), NTO_EDATA);
  assert_msg_has(&err, cut);
  snprintf(path, sizeof path, "%s/none.png", fx->dir);
  assert_int_equal(nto_image_load(path, s, NULL, x, &err), NTO_EIO);
  assert_msg_has(&err, "none.png: cannot open");
  assert_int_equal(nto_image_check(fx->dir, &err), NTO_EDATA); /* a folder */
  assert_msg_has(&err, "not a regular file");
  snprintf(path, sizeof path, "%s/fifo.png", fx->dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(nto_image_check(path, &err), NTO_EDATA); /* no hang */
  assert_msg_has(&err, "fifo.png: not a regular file");
  /* a header announcing more than NTO_IMAGE_MAX_PIXELS: a BMP of 20000 x
   * 20000 (its header only) */
  unsigned char bmp[54] = {'B', 'M'};
  bmp[10] = 54, bmp[14] = 40;
  bmp[18] = 0x20, bmp[19] = 0x4e; /* width 20000 */
  bmp[22] = 0x20, bmp[23] = 0x4e; /* height 20000 */
  bmp[26] = 1, bmp[28] = 24;
  snprintf(path, sizeof path, "%s/huge.bmp", fx->dir);
  FILE *f = fopen(path, "wb");
  fwrite(bmp, 1, sizeof bmp, f);
  fclose(f);
  assert_int_equal(nto_image_check(path, &err), NTO_EDATA);
  assert_msg_has(&err, "20000x20000 pixels");
  write_image(fx->dir, "two.png", 4, 4, 3, 6, path, sizeof path);
  assert_int_equal(nto_image_load(path, (nto_shape){1, 2, 4, 4}, NULL, x, &err),
                   NTO_EINVAL);
}

/* The image folder of the dataset tests:
 *   DIR/train/{bird: 2 png, cat: 3 (png, bmp, jpg), empty: none}
 *   DIR/test/{bird: 1, cat: 1, empty: none}, plus a text file ignored. */
static void make_folder(const fixture *fx, char *dir, size_t len) {
  char d[600], p[700];
  snprintf(dir, len, "%s/pets", fx->dir);
  mkdir(dir, 0755);
  const char *split[] = {"train", "test"};
  for (int s = 0; s < 2; s++) {
    snprintf(d, sizeof d, "%s/%s", dir, split[s]);
    mkdir(d, 0755);
    const char *cls[] = {"bird", "cat", "empty"};
    for (int c = 0; c < 3; c++) {
      snprintf(d, sizeof d, "%s/%s/%s", dir, split[s], cls[c]);
      mkdir(d, 0755);
    }
  }
  snprintf(d, sizeof d, "%s/train/bird", dir);
  write_image(d, "b1.png", 6, 6, 3, 10, p, sizeof p);
  write_image(d, "b2.png", 9, 7, 1, 11, p, sizeof p);
  snprintf(d, sizeof d, "%s/train/cat", dir);
  write_image(d, "c1.png", 8, 8, 3, 20, p, sizeof p);
  write_image(d, "c2.bmp", 5, 5, 3, 21, p, sizeof p);
  write_image(d, "c3.jpg", 8, 8, 3, 22, p, sizeof p);
  snprintf(p, sizeof p, "%s/notes.txt", d);
  write_text(p, "not an image");
  snprintf(d, sizeof d, "%s/test/bird", dir);
  write_image(d, "t1.png", 6, 6, 3, 30, p, sizeof p);
  snprintf(d, sizeof d, "%s/test/cat", dir);
  write_image(d, "t2.png", 6, 6, 3, 31, p, sizeof p);
}

/* Labels of one epoch in file order (k classes). */
static int read_labels(nto_dataset *ds, int k, int *lab) {
  float x[8 * 3 * 8 * 8], y[8 * 3];
  int got = 0;
  nto_err err = {0};
  if (nto_dataset_next(ds, x, y, 8, &got, &err) != 0)
    fail_msg("%s", err.msg);
  for (int b = 0; b < got; b++) {
    lab[b] = -1;
    for (int c = 0; c < k; c++)
      if (y[b * k + c] == 1.0f)
        lab[b] = c;
  }
  return got;
}

static void test_image_folder(void **state) {
  fixture *fx = *state;
  char dir[512];
  make_folder(fx, dir, sizeof dir);
  nto_err err = {0};
  nto_shape s = {1, 3, 8, 8};
  nto_image_dir_opts o = {.split = "train"};
  nto_dataset *ds = NULL;
  int lab[8];
  assert_int_equal(nto_dataset_open_image_dir(&ds, dir, &o, s, 3, &err), 0);
  assert_int_equal(nto_dataset_size(ds), 5);
  const char *d = nto_dataset_describe(ds);
  assert_non_null(strstr(d, "3 classes (bird, cat, empty)"));
  assert_non_null(strstr(d, "no images of empty"));
  assert_non_null(strstr(d, "1 other files and folders ignored"));
  assert_non_null(strstr(d, "resized to 8x8"));
  assert_int_equal(read_labels(ds, 3, lab), 5);
  const int want[5] = {0, 0, 1, 1, 1};
  assert_memory_equal(lab, want, sizeof want);
  assert_string_equal(nto_dataset_class_name(ds, 1), "cat");
  nto_dataset_close(ds);
  /* the model's class count must be the folders' */
  assert_int_equal(nto_dataset_open_image_dir(&ds, dir, &o, s, 10, &err),
                   NTO_ECONFIG);
  assert_msg_has(&err, "3 class folders, but the model's output has 10");
  /* the test split; 0 classes: the folders' */
  o.split = "test";
  assert_int_equal(nto_dataset_open_image_dir(&ds, dir, &o, s, 0, &err), 0);
  assert_int_equal(nto_dataset_size(ds), 2);
  assert_int_equal(nto_dataset_classes(ds), 3);
  nto_dataset_close(ds);
  /* kept classes by index: "cat" becomes label 0, with its name */
  o.split = "train";
  assert_int_equal(nto_dataset_open_image_dir(&ds, dir, &o, s, 0, &err), 0);
  const int keep[1] = {1};
  assert_int_equal(nto_dataset_keep_classes(ds, keep, 1, &err), 0);
  assert_int_equal(nto_dataset_size(ds), 3);
  assert_string_equal(nto_dataset_class_name(ds, 0), "cat");
  assert_null(nto_dataset_class_name(ds, 1));
  nto_dataset_close(ds);
  /* a valid split with train/ and test/ is refused */
  o.valid_split = 0.5;
  assert_int_equal(nto_dataset_open_image_dir(&ds, dir, &o, s, 3, &err),
                   NTO_ECONFIG);
}

/* A flat folder of class folders: held-out test split (disjoint, evenly
 * spaced), no test split without one; unreadable files an error naming
 * them, or skipped and counted. */
static void test_image_folder_flat(void **state) {
  fixture *fx = *state;
  char dir[512], d[600], p[700];
  snprintf(dir, sizeof dir, "%s/flat", fx->dir);
  mkdir(dir, 0755);
  const char *cls[] = {"a", "b"};
  for (int c = 0; c < 2; c++) {
    snprintf(d, sizeof d, "%s/%s", dir, cls[c]);
    mkdir(d, 0755);
    for (int i = 0; i < 4; i++) {
      char name[16];
      snprintf(name, sizeof name, "%d.png", i);
      write_image(d, name, 4, 4, 3, c * 10 + i, p, sizeof p);
    }
  }
  nto_err err = {0};
  nto_shape s = {1, 3, 4, 4};
  nto_dataset *tr = NULL, *te = NULL;
  nto_image_dir_opts o = {.split = "train", .valid_split = 0.25};
  assert_int_equal(nto_dataset_open_image_dir(&tr, dir, &o, s, 2, &err), 0);
  o.split = "test";
  assert_int_equal(nto_dataset_open_image_dir(&te, dir, &o, s, 2, &err), 0);
  assert_int_equal(nto_dataset_size(tr), 6);
  assert_int_equal(nto_dataset_size(te), 2);
  int lab[8];
  assert_int_equal(read_labels(te, 2, lab), 2);
  assert_true(lab[0] == 0 && lab[1] == 1); /* one of each class */
  nto_dataset_close(tr);
  nto_dataset_close(te);
  o.valid_split = 0;
  assert_int_equal(nto_dataset_open_image_dir(&te, dir, &o, s, 2, &err), 0);
  assert_null(te); /* no test split */
  /* an unreadable file: an error naming it, or skipped */
  snprintf(p, sizeof p, "%s/b/broken.png", dir);
  write_text(p, "garbage");
  o.split = "train";
  assert_int_equal(nto_dataset_open_image_dir(&tr, dir, &o, s, 2, &err),
                   NTO_EDATA);
  assert_msg_has(&err, "b/broken.png");
  o.skip_bad = 1;
  assert_int_equal(nto_dataset_open_image_dir(&tr, dir, &o, s, 2, &err), 0);
  assert_int_equal(nto_dataset_size(tr), 8);
  assert_non_null(
      strstr(nto_dataset_describe(tr), "1 unreadable files skipped"));
  nto_dataset_close(tr);
  /* no class folders / not a folder */
  snprintf(d, sizeof d, "%s/a", dir);
  assert_int_equal(nto_dataset_open_image_dir(&tr, d, &o, s, 0, &err),
                   NTO_EDATA);
  assert_msg_has(&err, "no class folders");
  snprintf(d, sizeof d, "%s/a/0.png", dir);
  assert_int_equal(nto_dataset_open_image_dir(&tr, d, &o, s, 0, &err), NTO_EIO);
  assert_msg_has(&err, "not a folder");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_formats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resize, setup, teardown),
      cmocka_unit_test_setup_teardown(test_normalize, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_image_folder, setup, teardown),
      cmocka_unit_test_setup_teardown(test_image_folder_flat, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
