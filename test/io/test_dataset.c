/*
 * test_dataset.c - dataset readers: IDX (gzip and plain), raw, synthetic,
 * shuffling, limits and error messages. Fixtures are generated with zlib
 * into a mkdtemp directory. The Fashion-MNIST test runs only if Debian's
 * dataset-fashion-mnist package is installed, and is skipped otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define NIMG 7
#define ROWS 28
#define COLS 28
#ifndef FMNIST_DIR
#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

static const unsigned char labels7[NIMG] = {3, 1, 4, 1, 5, 9, 2};

/* Pixel (r, c) of image k; pixel (0, 0) = 37 k identifies the image. */
static unsigned char pixel(int k, int r, int c) {
  return (unsigned char)((k * 37 + r * 3 + c * 7) & 255);
}

/* ------------------------------------------------------------- fixtures */

typedef tmpdir_fixture fixture;

static int setup(void **state) {
  return tmpdir_fixture_setup(state, "dataset");
}

static int teardown(void **state) { return tmpdir_fixture_teardown(state); }

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Write len bytes to path, gzip-compressed if gz. */
static void write_bytes(const char *path, const unsigned char *b, size_t len,
                        int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, b, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
  }
}

/*
 * IDX images file: header (magic, count, rows, cols) announcing count
 * images, followed by `present` bytes of pixel data (normally count*r*c).
 */
static void write_images(const char *path, int gz, uint32_t magic,
                         uint32_t count, int rows, int cols, size_t present) {
  size_t len = 16 + present;
  unsigned char *b = calloc(1, len);
  put_be32(b, magic);
  put_be32(b + 4, count);
  put_be32(b + 8, (uint32_t)rows);
  put_be32(b + 12, (uint32_t)cols);
  for (size_t i = 0; i < present; i++) {
    size_t k = i / ((size_t)rows * cols), rc = i % ((size_t)rows * cols);
    b[16 + i] = pixel((int)k, (int)(rc / cols), (int)(rc % cols));
  }
  write_bytes(path, b, len, gz);
  free(b);
}

static void write_labels(const char *path, int gz, uint32_t magic,
                         uint32_t count, const unsigned char *labels,
                         size_t present) {
  unsigned char b[64];
  put_be32(b, magic);
  put_be32(b + 4, count);
  memcpy(b + 8, labels, present);
  write_bytes(path, b, 8 + present, gz);
}

static void path_in(const fixture *fx, char *buf, size_t len,
                    const char *name) {
  snprintf(buf, len, "%s/%s", fx->dir, name);
}

/* The standard 7-image pair, gzip or plain, named <prefix>-images... */
static void write_pair(const fixture *fx, const char *sub, const char *split,
                       int gz, char *img, char *lbl, size_t len) {
  char d[300];
  if (sub) {
    snprintf(d, sizeof d, "%s/%s", fx->dir, sub);
    mkdir(d, 0755);
  } else {
    snprintf(d, sizeof d, "%s", fx->dir);
  }
  snprintf(img, len, "%s/%s-images-idx3-ubyte%s", d, split, gz ? ".gz" : "");
  snprintf(lbl, len, "%s/%s-labels-idx1-ubyte%s", d, split, gz ? ".gz" : "");
  write_images(img, gz, 0x803, NIMG, ROWS, COLS, (size_t)NIMG * ROWS * COLS);
  write_labels(lbl, gz, 0x801, NIMG, labels7, NIMG);
}

/* ------------------------------------------------------------- checking */

/*
 * Check one output row against image k padded into (c, h, w) and return k,
 * identified from the pixel at the image's origin.
 */
static int check_idx_row(const float *x, const float *y, int c, int h, int w,
                         int nc) {
  int top = (h - ROWS) / 2, left = (w - COLS) / 2;
  int k = (int)lroundf(x[top * w + left] * 255.0f) / 37;
  assert_in_range(k, 0, NIMG - 1);
  for (int ch = 0; ch < c; ch++)
    for (int i = 0; i < h; i++)
      for (int j = 0; j < w; j++) {
        int r = i - top, cc = j - left;
        float want = (r >= 0 && r < ROWS && cc >= 0 && cc < COLS)
                         ? (float)pixel(k, r, cc) / 255.0f
                         : 0.0f;
        float got = x[((size_t)ch * h + i) * w + j];
        if (got != want)
          fail_msg("image %d ch %d (%d,%d): got %g want %g", k, ch, i, j,
                   (double)got, (double)want);
      }
  for (int j = 0; j < nc; j++)
    assert_true(y[j] == (j == labels7[k] ? 1.0f : 0.0f));
  return k;
}

/* Read one epoch in batches of `batch`; order[] receives image indices. */
static int read_epoch(nto_dataset *ds, int c, int h, int w, int nc, int batch,
                      int *order, int max) {
  size_t feat = (size_t)c * h * w;
  float *x = malloc((size_t)batch * feat * sizeof *x);
  float *y = malloc((size_t)batch * nc * sizeof *y);
  int total = 0, got;
  nto_err err = {0};
  for (;;) {
    for (size_t i = 0; i < (size_t)batch * feat; i++)
      x[i] = 123.0f;
    for (size_t i = 0; i < (size_t)batch * nc; i++)
      y[i] = 123.0f;
    int rc = nto_dataset_next(ds, x, y, batch, &got, &err);
    if (rc)
      fail_msg("next: %s", err.msg);
    for (int b = got; b < batch; b++) {
      for (size_t i = 0; i < feat; i++)
        assert_true(x[b * feat + i] == 0.0f);
      for (int i = 0; i < nc; i++)
        assert_true(y[(size_t)b * nc + i] == 0.0f);
    }
    if (got == 0)
      break;
    for (int b = 0; b < got; b++) {
      assert_true(total < max);
      order[total++] =
          check_idx_row(x + b * feat, y + (size_t)b * nc, c, h, w, nc);
    }
  }
  free(x);
  free(y);
  return total;
}

static void assert_msg_has(const nto_err *err, const char *s) {
  if (strstr(err->msg, s) == NULL)
    fail_msg("message \"%s\" lacks \"%s\"", err->msg, s);
}

/* ------------------------------------------------------------ IDX tests */

static void test_idx_gz_pad_replicate(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "train", 1, img, lbl, sizeof img);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};
  int rc = nto_dataset_open_idx(&ds, img, lbl, s, 10, &err);
  if (rc)
    fail_msg("%s", err.msg);
  assert_int_equal(nto_dataset_size(ds), NIMG);
  const char *d = nto_dataset_describe(ds);
  assert_non_null(strstr(d, "train-images-idx3-ubyte.gz"));
  assert_non_null(strstr(d, "7 samples"));
  assert_non_null(strstr(d, "1x28x28 zero-padded to 32x32"));
  assert_non_null(strstr(d, "channel replicated to 3"));

  /* Batches of 3: 3, 3, 1, then 0; file order. */
  float x[3 * 3 * 32 * 32], y[3 * 10];
  int got, expect[] = {3, 3, 1, 0, 0}, seen = 0;
  for (int it = 0; it < 5; it++) {
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
      x[i] = -1.0f;
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
      y[i] = -1.0f;
    assert_int_equal(nto_dataset_next(ds, x, y, 3, &got, &err), 0);
    assert_int_equal(got, expect[it]);
    for (int b = 0; b < got; b++)
      assert_int_equal(
          check_idx_row(x + b * 3 * 32 * 32, y + b * 10, 3, 32, 32, 10),
          seen++);
    for (size_t i = (size_t)got * 3 * 32 * 32; i < sizeof x / sizeof x[0]; i++)
      assert_true(x[i] == 0.0f);
    for (size_t i = (size_t)got * 10; i < sizeof y / sizeof y[0]; i++)
      assert_true(y[i] == 0.0f);
  }
  /* Rewind: the same epoch again. */
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  int order[NIMG];
  assert_int_equal(read_epoch(ds, 3, 32, 32, 10, 4, order, NIMG), NIMG);
  for (int i = 0; i < NIMG; i++)
    assert_int_equal(order[i], i);
  nto_dataset_close(ds);
}

static void test_idx_plain_and_odd_padding(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "t10k", 0, img, lbl, sizeof img);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  /* 31x29: top (31-28)/2 = 1, left 0; one channel. */
  nto_shape s = {1, 1, 31, 29};
  if (nto_dataset_open_idx(&ds, img, lbl, s, 10, &err))
    fail_msg("%s", err.msg);
  assert_null(strstr(nto_dataset_describe(ds), "replicated"));
  assert_non_null(strstr(nto_dataset_describe(ds), "zero-padded to 31x29"));
  int order[NIMG];
  assert_int_equal(read_epoch(ds, 1, 31, 29, 10, 2, order, NIMG), NIMG);
  for (int i = 0; i < NIMG; i++)
    assert_int_equal(order[i], i);
  nto_dataset_close(ds);

  /* Exact size, no adaptation, first next() without rewind. */
  nto_shape e = {1, 1, 28, 28};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, e, 10, &err), 0);
  assert_non_null(strstr(nto_dataset_describe(ds), "no adaptation"));
  assert_int_equal(read_epoch(ds, 1, 28, 28, 10, 7, order, NIMG), NIMG);
  nto_dataset_close(ds);
}

static void test_idx_dir(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512], dir[512];
  write_pair(fx, "fashion-test", "train", 1, img, lbl, sizeof img);
  write_pair(fx, "fashion-test", "t10k", 0, img, lbl, sizeof img);
  path_in(fx, dir, sizeof dir, "fashion-test/");
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};
  if (nto_dataset_open_idx_dir(&ds, dir, "train", s, 10, &err))
    fail_msg("%s", err.msg);
  assert_string_equal(nto_dataset_describe(ds),
                      "fashion-test train: 7 samples, 1x28x28 zero-padded to "
                      "32x32, channel replicated to 3");
  nto_dataset_close(ds);
  /* Plain files are found when there is no .gz. */
  if (nto_dataset_open_idx_dir(&ds, dir, "t10k", s, 10, &err))
    fail_msg("%s", err.msg);
  int order[NIMG];
  assert_int_equal(read_epoch(ds, 3, 32, 32, 10, 5, order, NIMG), NIMG);
  nto_dataset_close(ds);
  /* Missing split. */
  assert_int_equal(nto_dataset_open_idx_dir(&ds, dir, "valid", s, 10, &err),
                   NTO_EIO);
  assert_null(ds);
  assert_msg_has(&err, "valid-images-idx3-ubyte");
  assert_msg_has(&err, "No such file");
}

static void test_idx_limit(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "train", 1, img, lbl, sizeof img);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 1, 32, 32};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s, 10, &err), 0);
  nto_dataset_limit(ds, 5);
  assert_int_equal(nto_dataset_size(ds), 5);
  assert_non_null(strstr(nto_dataset_describe(ds), "5 of 7 samples"));
  int order[NIMG];
  for (int epoch = 0; epoch < 2; epoch++) {
    assert_int_equal(nto_dataset_rewind(ds, &err), 0);
    assert_int_equal(read_epoch(ds, 1, 32, 32, 10, 2, order, NIMG), 5);
    for (int i = 0; i < 5; i++)
      assert_int_equal(order[i], i);
  }
  /* Shuffled, limited: a permutation of the first 5 only. */
  nto_dataset_shuffle(ds, 3, 11);
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  assert_int_equal(read_epoch(ds, 1, 32, 32, 10, 2, order, NIMG), 5);
  int seen[NIMG] = {0};
  for (int i = 0; i < 5; i++)
    seen[order[i]]++;
  for (int i = 0; i < NIMG; i++)
    assert_int_equal(seen[i], i < 5 ? 1 : 0);
  nto_dataset_limit(ds, 100); /* larger than the source: all */
  assert_int_equal(nto_dataset_size(ds), NIMG);
  nto_dataset_limit(ds, 0);
  assert_int_equal(nto_dataset_size(ds), NIMG);
  nto_dataset_close(ds);
}

static void test_idx_shuffle(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "train", 1, img, lbl, sizeof img);
  nto_err err = {0};
  nto_shape s = {1, 1, 28, 28};
  nto_dataset *a = NULL, *b = NULL;
  assert_int_equal(nto_dataset_open_idx(&a, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_open_idx(&b, img, lbl, s, 10, &err), 0);
  nto_dataset_shuffle(a, 4, 42);
  nto_dataset_shuffle(b, 4, 42);
  int oa[3][NIMG], ob[NIMG], not_identity = 0;
  for (int epoch = 0; epoch < 3; epoch++) {
    assert_int_equal(nto_dataset_rewind(a, &err), 0);
    assert_int_equal(nto_dataset_rewind(b, &err), 0);
    assert_int_equal(read_epoch(a, 1, 28, 28, 10, 3, oa[epoch], NIMG), NIMG);
    assert_int_equal(read_epoch(b, 1, 28, 28, 10, 2, ob, NIMG), NIMG);
    int seen[NIMG] = {0};
    for (int i = 0; i < NIMG; i++) {
      assert_int_equal(oa[epoch][i], ob[i]); /* same seed, same order */
      seen[oa[epoch][i]]++;
      not_identity |= oa[epoch][i] != i;
    }
    for (int i = 0; i < NIMG; i++)
      assert_int_equal(seen[i], 1); /* each sample exactly once */
  }
  assert_true(not_identity);
  /* Epochs are reseeded with seed + epoch: orders differ between epochs. */
  assert_true(memcmp(oa[0], oa[1], sizeof oa[0]) != 0 ||
              memcmp(oa[1], oa[2], sizeof oa[0]) != 0);
  /* shuffle() restarts the epoch count: epoch 0's order again. */
  nto_dataset_shuffle(a, 4, 42);
  assert_int_equal(nto_dataset_rewind(a, &err), 0);
  assert_int_equal(read_epoch(a, 1, 28, 28, 10, 7, ob, NIMG), NIMG);
  assert_memory_equal(ob, oa[0], sizeof ob);
  /* A different seed gives a different order over the epochs. */
  nto_dataset_shuffle(b, 4, 43);
  int diff = 0;
  for (int epoch = 0; epoch < 3; epoch++) {
    assert_int_equal(nto_dataset_rewind(b, &err), 0);
    assert_int_equal(read_epoch(b, 1, 28, 28, 10, 7, ob, NIMG), NIMG);
    diff |= memcmp(ob, oa[epoch], sizeof ob) != 0;
  }
  assert_true(diff);
  /* Buffer 1: file order. */
  nto_dataset_shuffle(b, 1, 42);
  assert_int_equal(nto_dataset_rewind(b, &err), 0);
  assert_int_equal(read_epoch(b, 1, 28, 28, 10, 3, ob, NIMG), NIMG);
  for (int i = 0; i < NIMG; i++)
    assert_int_equal(ob[i], i);
  /* Buffer larger than the set: a full permutation. */
  nto_dataset_shuffle(b, 1000, 5);
  assert_int_equal(nto_dataset_rewind(b, &err), 0);
  assert_int_equal(read_epoch(b, 1, 28, 28, 10, 3, ob, NIMG), NIMG);
  nto_dataset_close(a);
  nto_dataset_close(b);
}

/* Read an epoch of a dataset keeping classes: images (identified by their
 * origin pixel) into order[], each row's one-hot label checked against
 * remap[labels7[image]] over k values. Returns the samples read. */
static int read_kept(nto_dataset *ds, const int *remap, int k, int *order) {
  float x[NIMG * 28 * 28], y[NIMG * 10];
  nto_err err = {0};
  int got = 0, total = 0;
  do {
    assert_int_equal(nto_dataset_next(ds, x, y, 2, &got, &err), 0);
    for (int b = 0; b < got; b++) {
      int img = (int)lroundf(x[b * 28 * 28] * 255.0f) / 37;
      assert_in_range(img, 0, NIMG - 1);
      assert_true(remap[labels7[img]] >= 0); /* only kept classes */
      for (int j = 0; j < k; j++)
        assert_true(y[b * k + j] == (j == remap[labels7[img]] ? 1.0f : 0.0f));
      order[total++] = img;
    }
  } while (got == 2);
  return total;
}

/* Keeping classes: labels7 = {3, 1, 4, 1, 5, 9, 2}; classes {9, 1} keep
 * images 1, 3 (label 1 -> 1) and 5 (label 9 -> 0), in file order,
 * shuffled, limited, and through a data position; the errors. */
static void test_idx_keep_classes(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "train", 1, img, lbl, sizeof img);
  nto_err err = {0};
  nto_shape s = {1, 1, 28, 28};
  const int keep[2] = {9, 1};
  int remap[10] = {-1, 1, -1, -1, -1, -1, -1, -1, -1, 0}, order[NIMG];
  nto_dataset *ds = NULL, *b = NULL;
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_keep_classes(ds, keep, 2, &err), 0);
  assert_int_equal(nto_dataset_size(ds), 3);
  assert_int_equal(nto_dataset_classes(ds), 2);
  assert_non_null(
      strstr(nto_dataset_describe(ds), "3 samples (classes 9,1 as 0-1)"));
  assert_int_equal(read_kept(ds, remap, 2, order), 3);
  assert_int_equal(order[0], 1);
  assert_int_equal(order[1], 3);
  assert_int_equal(order[2], 5);
  /* a second epoch, shuffled: the same three, each once */
  nto_dataset_shuffle(ds, 3, 5);
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  assert_int_equal(read_kept(ds, remap, 2, order), 3);
  assert_int_equal(order[0] + order[1] + order[2], 1 + 3 + 5);
  assert_true(order[0] != order[1] && order[1] != order[2] &&
              order[0] != order[2]);
  /* the limit counts kept samples */
  nto_dataset_limit(ds, 2);
  nto_dataset_shuffle(ds, 0, 0);
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  assert_int_equal(read_kept(ds, remap, 2, order), 2);
  assert_int_equal(order[1], 3);
  assert_non_null(strstr(nto_dataset_describe(ds), "2 of 3 samples"));
  nto_dataset_limit(ds, 0);

  /* a position taken after one sample continues on a dataset keeping the
   * same classes, and is refused by one keeping others or all */
  float x[28 * 28], y[10];
  int got;
  nto_dataset_pos pos;
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  assert_int_equal(nto_dataset_next(ds, x, y, 1, &got, &err), 0);
  nto_dataset_tell(ds, &pos);
  assert_int_equal(nto_dataset_open_idx(&b, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_keep_classes(b, keep, 2, &err), 0);
  assert_int_equal(nto_dataset_seek(b, &pos, &err), 0);
  assert_int_equal(read_kept(b, remap, 2, order), 2);
  assert_int_equal(order[0], 3);
  assert_int_equal(order[1], 5);
  nto_dataset_close(b);
  const int other[2] = {1, 9};
  assert_int_equal(nto_dataset_open_idx(&b, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_keep_classes(b, other, 2, &err), 0);
  assert_int_equal(nto_dataset_seek(b, &pos, &err), NTO_ECONFIG);
  nto_dataset_close(b);
  assert_int_equal(nto_dataset_open_idx(&b, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_seek(b, &pos, &err), NTO_ECONFIG);
  nto_dataset_close(b);

  /* errors: once only, before the first epoch */
  assert_int_equal(nto_dataset_keep_classes(ds, keep, 2, &err), NTO_EINVAL);
  nto_dataset_close(ds);
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s, 10, &err), 0);
  const int out_of_range[2] = {1, 10}, twice[3] = {1, 4, 1}, none[1] = {7};
  assert_int_equal(nto_dataset_keep_classes(ds, out_of_range, 2, &err),
                   NTO_EINVAL);
  assert_msg_has(&err, "class 10 is not a label of this data (0 to 9)");
  assert_int_equal(nto_dataset_keep_classes(ds, twice, 3, &err), NTO_EINVAL);
  assert_msg_has(&err, "class 1 listed twice");
  assert_int_equal(nto_dataset_keep_classes(ds, none, 1, &err), NTO_EDATA);
  assert_msg_has(&err, "no sample of the listed classes");
  assert_int_equal(nto_dataset_keep_classes(ds, keep, 0, &err), NTO_EINVAL);
  /* after failures the dataset is whole: every sample, then a keep works */
  assert_int_equal(nto_dataset_size(ds), NIMG);
  const int four[1] = {4};
  assert_int_equal(nto_dataset_keep_classes(ds, four, 1, &err), 0);
  assert_int_equal(nto_dataset_size(ds), 1);
  nto_dataset_close(ds);
}

/* Bad headers of IDX files next to the good pair img, lbl: magic, counts,
 * labels, truncated labels. */
static void idx_header_errors(fixture *fx, const char *img, const char *lbl) {
  char bad[512];
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};

  /* Wrong magic in the images file (a labels magic). */
  path_in(fx, bad, sizeof bad, "badmagic-images.gz");
  write_images(bad, 1, 0x801, NIMG, ROWS, COLS, (size_t)NIMG * ROWS * COLS);
  assert_int_equal(nto_dataset_open_idx(&ds, bad, lbl, s, 10, &err), NTO_EDATA);
  assert_null(ds);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "byte offset 0");
  assert_msg_has(&err, "0x00000801");

  /* Wrong magic in the labels file. */
  path_in(fx, bad, sizeof bad, "badmagic-labels");
  write_labels(bad, 0, 0x12345678, NIMG, labels7, NIMG);
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 10, &err), NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "0x12345678");

  /* Count mismatch. */
  path_in(fx, bad, sizeof bad, "six-labels.gz");
  write_labels(bad, 1, 0x801, 6, labels7, 6);
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 10, &err), NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "7 images");

  /* Label out of range: label 12 at index 2 = byte offset 10. */
  unsigned char l12[NIMG] = {3, 1, 12, 1, 5, 9, 2};
  path_in(fx, bad, sizeof bad, "range-labels.gz");
  write_labels(bad, 1, 0x801, NIMG, l12, NIMG);
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 10, &err), NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "byte offset 10: label 12 out of range [0, 10)");
  /* ... but valid with 13 classes. */
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 13, &err), 0);
  nto_dataset_close(ds);

  /* Truncated labels (header says 7, 5 present). */
  path_in(fx, bad, sizeof bad, "short-labels.gz");
  write_labels(bad, 1, 0x801, NIMG, labels7, 5);
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 10, &err), NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "truncated at byte offset 13");
}

/* Truncated and cut image files next to the good pair img, lbl, missing
 * files, images larger than the input, invalid arguments. */
static void idx_stream_errors(fixture *fx, const char *img, const char *lbl) {
  char bad[512];
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};

  /* Truncated images (gzip): found while streaming, with the offset. */
  path_in(fx, bad, sizeof bad, "short-images.gz");
  size_t present = 5 * ROWS * COLS + 100;
  write_images(bad, 1, 0x803, NIMG, ROWS, COLS, present);
  assert_int_equal(nto_dataset_open_idx(&ds, bad, lbl, s, 10, &err), 0);
  float x[4 * 3 * 32 * 32], y[4 * 10];
  int got = -1;
  assert_int_equal(nto_dataset_next(ds, x, y, 4, &got, &err), 0);
  assert_int_equal(got, 4);
  assert_int_equal(nto_dataset_next(ds, x, y, 4, &got, &err), NTO_EDATA);
  assert_int_equal(got, 0);
  assert_msg_has(&err, bad);
  char off[64];
  snprintf(off, sizeof off, "truncated at byte offset %zu", 16 + present);
  assert_msg_has(&err, off);
  nto_dataset_close(ds);

  /* Truncated images (plain): found at open from the file size. */
  path_in(fx, bad, sizeof bad, "short-images");
  write_images(bad, 0, 0x803, NIMG, ROWS, COLS, present);
  assert_int_equal(nto_dataset_open_idx(&ds, bad, lbl, s, 10, &err), NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "truncated");

  /* A cut gzip stream: corrupt or truncated, never silent. */
  path_in(fx, bad, sizeof bad, "cut-images.gz");
  write_images(bad, 1, 0x803, NIMG, ROWS, COLS, (size_t)NIMG * ROWS * COLS);
  struct stat st;
  assert_int_equal(stat(bad, &st), 0);
  assert_int_equal(truncate(bad, st.st_size / 2), 0);
  int rc = nto_dataset_open_idx(&ds, bad, lbl, s, 10, &err);
  if (rc == 0) {
    do
      rc = nto_dataset_next(ds, x, y, 4, &got, &err);
    while (rc == 0 && got > 0);
    nto_dataset_close(ds);
  }
  assert_int_equal(rc, NTO_EDATA);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "byte offset");

  /* Missing file. */
  path_in(fx, bad, sizeof bad, "missing-images.gz");
  assert_int_equal(nto_dataset_open_idx(&ds, bad, lbl, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, bad);
  assert_msg_has(&err, "No such file or directory");
  assert_int_equal(nto_dataset_open_idx(&ds, img, bad, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, bad);

  /* Image larger than the model input. */
  nto_shape small = {1, 1, 16, 16};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, small, 10, &err),
                   NTO_ESHAPE);
  assert_msg_has(&err, img);
  nto_shape narrow = {1, 1, 32, 27};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, narrow, 10, &err),
                   NTO_ESHAPE);
  assert_null(ds);

  /* Invalid arguments. */
  nto_shape zero = {1, 0, 32, 32};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, zero, 10, &err),
                   NTO_EINVAL);
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s, 0, &err), NTO_EINVAL);
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s, 10, &err), 0);
  assert_int_equal(nto_dataset_next(ds, x, y, 0, &got, &err), NTO_EINVAL);
  nto_dataset_close(ds);
}

static void test_idx_errors(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_pair(fx, NULL, "train", 1, img, lbl, sizeof img);
  idx_header_errors(fx, img, lbl);
  idx_stream_errors(fx, img, lbl);
}

static void test_fashion_mnist(void **state) {
  (void)state;
  struct stat st;
  if (stat(FMNIST_DIR, &st) != 0) {
    print_message("skipped: %s not installed (Debian package "
                  "dataset-fashion-mnist)\n",
                  FMNIST_DIR);
    skip();
  }
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};
  if (nto_dataset_open_idx_dir(&ds, FMNIST_DIR, "t10k", s, 10, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(nto_dataset_size(ds), 10000);
  assert_string_equal(nto_dataset_describe(ds),
                      "fashion-mnist t10k: 10000 samples, 1x28x28 "
                      "zero-padded to 32x32, channel replicated to 3");
  enum { B = 64 };
  size_t feat = 3 * 32 * 32;
  float *x = malloc(B * feat * sizeof *x), y[B * 10];
  int got, hist[10] = {0}, total = 0;
  double sum = 0.0;
  nto_dataset_shuffle(ds, 256, 1);
  for (;;) {
    assert_int_equal(nto_dataset_next(ds, x, y, B, &got, &err), 0);
    if (got == 0)
      break;
    for (int b = 0; b < got; b++) {
      int ones = 0, lab = -1;
      for (int j = 0; j < 10; j++) {
        assert_true(y[b * 10 + j] == 0.0f || y[b * 10 + j] == 1.0f);
        if (y[b * 10 + j] == 1.0f)
          ones++, lab = j;
      }
      assert_int_equal(ones, 1);
      hist[lab]++;
      const float *xs = x + b * feat;
      for (size_t i = 0; i < feat; i++)
        assert_true(xs[i] >= 0.0f && xs[i] <= 1.0f);
      for (int j = 0; j < 32; j++) /* padding border */
        assert_true(xs[j] == 0.0f && xs[31 * 32 + j] == 0.0f &&
                    xs[j * 32] == 0.0f && xs[j * 32 + 31] == 0.0f);
      assert_memory_equal(xs, xs + 1024, 1024 * sizeof *xs);
      assert_memory_equal(xs, xs + 2048, 1024 * sizeof *xs);
      for (size_t i = 0; i < 1024; i++)
        sum += xs[i];
    }
    total += got;
  }
  assert_int_equal(total, 10000);
  for (int j = 0; j < 10; j++)
    assert_int_equal(hist[j], 1000); /* t10k is balanced */
  double mean = sum / (10000.0 * 28 * 28);
  assert_true(mean > 0.2 && mean < 0.4); /* Fashion-MNIST mean is ~0.286 */
  free(x);
  nto_dataset_close(ds);
}

/* ------------------------------------------------------------------ raw */

static void test_raw_round_trip(void **state) {
  fixture *fx = *state;
  enum { N = 5, FEAT = 6, NC = 4, REC = FEAT + NC };
  float data[N * REC];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < FEAT; j++)
      data[i * REC + j] = (float)i + (float)j * 0.125f - 1.5f;
    for (int j = 0; j < NC; j++)
      data[i * REC + FEAT + j] = j == i % NC ? 1.0f : 0.0f;
  }
  char path[512];
  path_in(fx, path, sizeof path, "train.dat");
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 1, 2, 3};
  if (nto_dataset_open_raw(&ds, path, s, NC, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(nto_dataset_size(ds), N);
  assert_non_null(strstr(nto_dataset_describe(ds), "train.dat"));
  float x[2 * FEAT], y[2 * NC];
  int got, seen = 0;
  for (int epoch = 0; epoch < 2; epoch++) {
    seen = 0;
    assert_int_equal(nto_dataset_rewind(ds, &err), 0);
    for (;;) {
      assert_int_equal(nto_dataset_next(ds, x, y, 2, &got, &err), 0);
      if (got == 0)
        break;
      for (int b = 0; b < got; b++, seen++) {
        assert_memory_equal(x + b * FEAT, data + seen * REC,
                            FEAT * sizeof(float));
        assert_memory_equal(y + b * NC, data + seen * REC + FEAT,
                            NC * sizeof(float));
      }
    }
    assert_int_equal(seen, N);
  }
  nto_dataset_close(ds);

  /* Size not a multiple of the record: names file, size, record size. */
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  fwrite("abc", 1, 3, f);
  fclose(f);
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), NTO_EDATA);
  assert_null(ds);
  assert_msg_has(&err, path);
  assert_msg_has(&err, "size 203 bytes");
  assert_msg_has(&err, "record size 40 bytes");
  /* Wrong model shape gives a different record size. */
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  nto_shape s2 = {1, 1, 2, 2};
  assert_int_equal(nto_dataset_open_raw(&ds, path, s2, NC, &err), NTO_EDATA);
  path_in(fx, path, sizeof path, "missing.dat");
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), NTO_EIO);
  assert_msg_has(&err, path);
}

/* Raw labels must be a distribution (each >= 0, summing to 1 within 1e-3):
 * the first record is checked at open, so that a file of a model with
 * another record size is refused before training; every other record when
 * it is read. Soft labels pass. */
static void test_raw_labels(void **state) {
  fixture *fx = *state;
  enum { N = 4, FEAT = 6, NC = 4, REC = FEAT + NC };
  float data[N * REC];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < FEAT; j++)
      data[i * REC + j] = 0.5f;
    for (int j = 0; j < NC; j++)
      data[i * REC + FEAT + j] = 0.25f; /* soft labels */
  }
  char path[512];
  path_in(fx, path, sizeof path, "labels.dat");
  nto_shape s = {1, 1, 2, 3};
  nto_dataset *ds = NULL;
  nto_err err = {0};
  float x[N * FEAT], y[N * NC];
  int got;
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  if (nto_dataset_open_raw(&ds, path, s, NC, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(nto_dataset_next(ds, x, y, N, &got, &err), 0);
  assert_int_equal(got, N);
  nto_dataset_close(ds);

  /* Sample 2 all zero: opens, refused when read, naming its labels'
   * offset (2 * 40 + 24). */
  for (int j = 0; j < NC; j++)
    data[2 * REC + FEAT + j] = 0.0f;
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), 0);
  assert_int_equal(nto_dataset_next(ds, x, y, N, &got, &err), NTO_EDATA);
  assert_msg_has(&err, "labels.dat: byte offset 104: the 4 label values of "
                       "sample 2 sum to 0, expected a distribution");
  nto_dataset_close(ds);

  /* Sample 3: a negative value, though the sum is 1 (offset 3 * 40 + 24 +
   * 4). */
  data[2 * REC + FEAT] = 1.0f;
  data[3 * REC + FEAT] = 0.75f;
  data[3 * REC + FEAT + 1] = -0.25f;
  data[3 * REC + FEAT + 2] = 0.5f;
  data[3 * REC + FEAT + 3] = 0.0f;
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), 0);
  assert_int_equal(nto_dataset_next(ds, x, y, N, &got, &err), NTO_EDATA);
  assert_msg_has(&err, "labels.dat: byte offset 148: label value 1 of "
                       "sample 3 is -0.25");
  nto_dataset_close(ds);

  /* Sample 0 wrong: refused at open, with the record size as the hint. */
  data[FEAT + 1] = 0.5f;
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), NTO_EDATA);
  assert_null(ds);
  assert_msg_has(&err, "byte offset 24: the 4 label values of sample 0 sum "
                       "to 1.25");
  assert_msg_has(&err, "another record size? this one's is 40 bytes");

  /* The file of another model (5 features, 5 classes: also 40 bytes a
   * record, one-hot): its first label value is read as our 6th feature and
   * our 4 label values are its other 4, all 0 for its sample 0 of class 0. */
  for (int i = 0; i < N; i++)
    for (int j = 0; j < REC; j++)
      data[i * REC + j] = j < 5 ? 0.5f : j == 5 + i % 5 ? 1.0f : 0.0f;
  write_bytes(path, (const unsigned char *)data, sizeof data, 0);
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), NTO_EDATA);
  assert_msg_has(&err, "byte offset 24: the 4 label values of sample 0 sum "
                       "to 0, expected");
}

/* Data files that are not regular files: a FIFO (opening it for reading
 * would wait for a writer; the alarm ends a test that blocks) and a
 * directory (its size is no record count) are refused naming the file. */
static void test_not_regular_files(void **state) {
  fixture *fx = *state;
  char fifo[512], dir[512], img[512], lbl[512];
  path_in(fx, fifo, sizeof fifo, "fifo.dat");
  path_in(fx, dir, sizeof dir, "dir.dat");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(mkdir(dir, 0700), 0);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 1, 28, 28};
  alarm(20);
  assert_int_equal(nto_dataset_open_raw(&ds, fifo, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, "fifo.dat: is a FIFO, expected a regular file");
  assert_int_equal(nto_dataset_open_raw(&ds, dir, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, "dir.dat: is a directory, expected a regular file");
  write_pair(fx, NULL, "train", 0, img, lbl, sizeof img);
  assert_int_equal(nto_dataset_open_idx(&ds, fifo, lbl, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, "fifo.dat: is a FIFO, expected a regular file");
  assert_int_equal(nto_dataset_open_idx(&ds, img, fifo, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, "fifo.dat: is a FIFO, expected a regular file");
  assert_int_equal(nto_dataset_open_idx(&ds, img, dir, s, 10, &err), NTO_EIO);
  assert_msg_has(&err, "dir.dat: is a directory, expected a regular file");
  alarm(0);
  assert_null(ds);
}

/* ------------------------------------------------------------ synthetic */

enum { SN = 60, SNC = 5, SFEAT = 3 * 8 * 8 };

static void read_all(nto_dataset *ds, float *x, float *y, int batch) {
  nto_err err = {0};
  int got, total = 0;
  for (;;) {
    assert_int_equal(nto_dataset_next(ds, x + (size_t)total * SFEAT,
                                      y + (size_t)total * SNC, batch, &got,
                                      &err),
                     0);
    total += got;
    if (got < batch)
      break;
  }
  assert_int_equal(total, (int)nto_dataset_size(ds));
}

static void test_synthetic(void **state) {
  (void)state;
  nto_shape s = {1, 3, 8, 8};
  nto_err err = {0};
  nto_dataset *a, *b, *c, *d;
  assert_int_equal(nto_dataset_open_synthetic(&a, SN, s, SNC, 7, &err), 0);
  assert_int_equal(nto_dataset_open_synthetic(&b, SN, s, SNC, 7, &err), 0);
  assert_int_equal(nto_dataset_open_synthetic(&c, SN, s, SNC, 8, &err), 0);
  assert_int_equal(nto_dataset_open_synthetic(&d, SN, s, SNC, 7, &err), 0);
  assert_non_null(strstr(nto_dataset_describe(a), "synthetic"));
  assert_int_equal(nto_dataset_size(a), SN);
  /* Room for a trailing partial batch of zeros. */
  size_t rows = SN + 16;
  float *xa = calloc(rows * SFEAT, 4), *ya = calloc(rows * SNC, 4);
  float *xb = calloc(rows * SFEAT, 4), *yb = calloc(rows * SNC, 4);
  read_all(a, xa, ya, 7);
  read_all(b, xb, yb, 16);
  assert_memory_equal(xa, xb, SN * SFEAT * 4); /* same seed: same data */
  assert_memory_equal(ya, yb, SN * SNC * 4);
  /* Epoch 2 is the same data. */
  assert_int_equal(nto_dataset_rewind(b, &err), 0);
  read_all(b, xb, yb, 5);
  assert_memory_equal(xa, xb, SN * SFEAT * 4);
  /* Different seed: different data. */
  read_all(c, xb, yb, 7);
  assert_true(memcmp(xa, xb, SN * SFEAT * 4) != 0);

  /* Labels: one-hot, several classes used, inputs finite and centred. */
  int hist[SNC] = {0};
  double sum = 0.0, sq = 0.0;
  for (int i = 0; i < SN; i++) {
    int ones = 0, lab = 0;
    for (int j = 0; j < SNC; j++) {
      float v = ya[i * SNC + j];
      assert_true(v == 0.0f || v == 1.0f);
      if (v == 1.0f)
        ones++, lab = j;
    }
    assert_int_equal(ones, 1);
    hist[lab]++;
    for (int j = 0; j < SFEAT; j++) {
      assert_true(isfinite(xa[i * SFEAT + j]));
      sum += xa[i * SFEAT + j];
      sq += (double)xa[i * SFEAT + j] * xa[i * SFEAT + j];
    }
  }
  int used = 0;
  for (int j = 0; j < SNC; j++)
    used += hist[j] > 0;
  assert_true(used >= 3);
  double mean = sum / (SN * SFEAT), var = sq / (SN * SFEAT) - mean * mean;
  assert_true(fabs(mean) < 0.05 && var > 0.9 && var < 1.1);

  /* Limit: the first 10 samples, unchanged. */
  nto_dataset_limit(d, 10);
  read_all(d, xb, yb, 4);
  assert_memory_equal(xa, xb, 10 * SFEAT * 4);
  assert_memory_equal(ya, yb, 10 * SNC * 4);

  /* Shuffle: a permutation of the same samples (values from (seed, i)). */
  nto_dataset_limit(d, 0);
  nto_dataset_shuffle(d, 16, 3);
  assert_int_equal(nto_dataset_rewind(d, &err), 0);
  read_all(d, xb, yb, 8);
  int used_row[SN] = {0}, moved = 0;
  for (int i = 0; i < SN; i++) {
    int match = -1;
    for (int j = 0; j < SN && match < 0; j++)
      if (!used_row[j] &&
          memcmp(xb + i * SFEAT, xa + j * SFEAT, SFEAT * 4) == 0)
        match = j;
    assert_true(match >= 0);
    used_row[match] = 1;
    moved |= match != i;
    assert_memory_equal(yb + i * SNC, ya + match * SNC, SNC * 4);
  }
  assert_true(moved);

  nto_dataset_close(b);
  assert_int_equal(nto_dataset_open_synthetic(&b, 0, s, SNC, 7, &err),
                   NTO_EINVAL);
  assert_null(b);
  free(xa);
  free(ya);
  free(xb);
  free(yb);
  nto_dataset_close(a);
  nto_dataset_close(c);
  nto_dataset_close(d);
}

/* --------------------------------------------- golden batches (regression)
 *
 * Batches recorded from the reader before the shuffle buffer stored raw IDX
 * bytes (it held adapted floats then): the order of samples and the exact
 * float values of every batch must not change for a given seed. Each batch
 * is hashed over the bit patterns of all its x and y floats, padding rows
 * included, so any changed value, order or zeroing fails the test.
 */

/* FNV-1a over 32-bit words, high half folded down at each step so that
 * every bit of every word reaches every bit of h; chained through h. */
static uint64_t hash_floats(uint64_t h, const float *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t w;
    memcpy(&w, &p[i], sizeof w);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 32;
  }
  return h;
}

#define HASH_SEED 0xcbf29ce484222325ull

/* On mismatch print every value (so a reviewer sees what changed), fail. */
static void check_golden_u64(const char *what, const uint64_t *got,
                             const uint64_t *want, int n) {
  if (memcmp(got, want, (size_t)n * sizeof *got) == 0)
    return;
  print_message("%s: got {", what);
  for (int i = 0; i < n; i++)
    print_message("%s0x%016llxull", i ? ", " : "", (unsigned long long)got[i]);
  print_message("}\n");
  for (int i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("%s: entry %d: got 0x%016llx want 0x%016llx", what, i,
               (unsigned long long)got[i], (unsigned long long)want[i]);
}

static void check_golden_int(const char *what, const int *got, const int *want,
                             int n) {
  if (memcmp(got, want, (size_t)n * sizeof *got) == 0)
    return;
  print_message("%s: got {", what);
  for (int i = 0; i < n; i++)
    print_message("%s%d", i ? ", " : "", got[i]);
  print_message("}\n");
  for (int i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("%s: entry %d: got %d want %d", what, i, got[i], want[i]);
}

/*
 * Read batches of `batch` until the end of the epoch; hashes[] gets one hash
 * per next() call (the final empty one included). Returns the call count.
 */
static int hash_epoch(nto_dataset *ds, size_t feat, int nc, int batch,
                      uint64_t *hashes, int max) {
  float *x = malloc((size_t)batch * feat * sizeof *x);
  float *y = malloc((size_t)batch * (size_t)nc * sizeof *y);
  nto_err err = {0};
  int calls = 0, got;
  do {
    for (size_t i = 0; i < (size_t)batch * feat; i++)
      x[i] = 123.0f;
    for (size_t i = 0; i < (size_t)batch * (size_t)nc; i++)
      y[i] = 123.0f;
    if (nto_dataset_next(ds, x, y, batch, &got, &err))
      fail_msg("next: %s", err.msg);
    assert_true(calls < max);
    uint64_t h = hash_floats(HASH_SEED, x, (size_t)batch * feat);
    hashes[calls++] = hash_floats(h, y, (size_t)batch * (size_t)nc);
  } while (got > 0);
  free(x);
  free(y);
  return calls;
}

/* A 40-image IDX fixture whose pixel (0, 0) is 5 k, identifying image k. */
enum { GN = 40 };

static unsigned char gpixel(int k, int r, int c) {
  return r == 0 && c == 0 ? (unsigned char)(5 * k) : pixel(k, r, c);
}

static int glabel(int k) { return (k * 7 + 3) % 10; }

static void write_golden_pair(const fixture *fx, char *img, char *lbl,
                              size_t len) {
  snprintf(img, len, "%s/golden-images.gz", fx->dir);
  snprintf(lbl, len, "%s/golden-labels.gz", fx->dir);
  size_t npix = (size_t)ROWS * COLS;
  unsigned char *b = calloc(1, 16 + GN * npix);
  put_be32(b, 0x803);
  put_be32(b + 4, GN);
  put_be32(b + 8, ROWS);
  put_be32(b + 12, COLS);
  for (int k = 0; k < GN; k++)
    for (int r = 0; r < ROWS; r++)
      for (int c = 0; c < COLS; c++)
        b[16 + k * npix + (size_t)r * COLS + c] = gpixel(k, r, c);
  write_bytes(img, b, 16 + GN * npix, 1);
  free(b);
  unsigned char l[8 + GN];
  put_be32(l, 0x801);
  put_be32(l + 4, GN);
  for (int k = 0; k < GN; k++)
    l[8 + k] = (unsigned char)glabel(k);
  write_bytes(lbl, l, sizeof l, 1);
}

/* Synthetic data keeping classes {3, 0}: the samples of those labels, in
 * order, relabelled 3 -> 0 and 0 -> 1, inputs unchanged. */
static void test_synthetic_keep_classes(void **state) {
  (void)state;
  nto_shape s = {1, 3, 8, 8};
  nto_err err = {0};
  nto_dataset *a, *b;
  assert_int_equal(nto_dataset_open_synthetic(&a, SN, s, SNC, 7, &err), 0);
  assert_int_equal(nto_dataset_open_synthetic(&b, SN, s, SNC, 7, &err), 0);
  const int keep[2] = {3, 0};
  assert_int_equal(nto_dataset_keep_classes(b, keep, 2, &err), 0);
  size_t rows = SN + 16;
  float *xa = calloc(rows * SFEAT, 4), *ya = calloc(rows * SNC, 4);
  float *xb = calloc(rows * SFEAT, 4), *yb = calloc(rows * 2, 4);
  read_all(a, xa, ya, 8);
  int got, n = 0, total = 0;
  do {
    assert_int_equal(nto_dataset_next(b, xb + (size_t)n * SFEAT,
                                      yb + (size_t)n * 2, 8, &got, &err),
                     0);
    n += got;
  } while (got == 8);
  assert_int_equal(n, (int)nto_dataset_size(b));
  for (int i = 0; i < SN; i++) {
    int lab = 0;
    for (int j = 1; j < SNC; j++)
      if (ya[i * SNC + j] > ya[i * SNC + lab])
        lab = j;
    if (lab != 3 && lab != 0)
      continue;
    assert_in_range(total, 0, n - 1);
    assert_memory_equal(xb + (size_t)total * SFEAT, xa + (size_t)i * SFEAT,
                        SFEAT * 4);
    assert_true(yb[total * 2 + 0] == (lab == 3 ? 1.0f : 0.0f));
    assert_true(yb[total * 2 + 1] == (lab == 0 ? 1.0f : 0.0f));
    total++;
  }
  assert_int_equal(total, n);
  assert_true(n > 0 && n < SN);
  free(xa);
  free(ya);
  free(xb);
  free(yb);
  nto_dataset_close(a);
  nto_dataset_close(b);
}

/*
 * Check a (3, 32, 32) row against a reference adaptation computed here
 * (scale by 1/255, centre in 32x32, replicate) and return its image index.
 */
static int check_golden_row(const float *x, const float *y) {
  int k = (int)lroundf(x[2 * 32 + 2] * 255.0f) / 5;
  assert_in_range(k, 0, GN - 1);
  for (int ch = 0; ch < 3; ch++)
    for (int i = 0; i < 32; i++)
      for (int j = 0; j < 32; j++) {
        int r = i - 2, c = j - 2;
        float want = r >= 0 && r < ROWS && c >= 0 && c < COLS
                         ? (float)gpixel(k, r, c) / 255.0f
                         : 0.0f;
        float got = x[(ch * 32 + i) * 32 + j];
        if (memcmp(&got, &want, sizeof got) != 0)
          fail_msg("image %d ch %d (%d,%d): got %.9g want %.9g", k, ch, i, j,
                   (double)got, (double)want);
      }
  for (int j = 0; j < 10; j++)
    assert_true(y[j] == (j == glabel(k) ? 1.0f : 0.0f));
  return k;
}

static void test_golden_idx_shuffled(void **state) {
  fixture *fx = *state;
  char img[512], lbl[512];
  write_golden_pair(fx, img, lbl, sizeof img);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};
  if (nto_dataset_open_idx(&ds, img, lbl, s, 10, &err))
    fail_msg("%s", err.msg);
  enum { B = 6, FEAT = 3 * 32 * 32, CALLS = GN / B + 2 };
  /* Epochs 0 and 1 of seed 99 with a 16-sample buffer. */
  static const int want_order[2][GN] = {
      {4,  14, 5,  11, 17, 1,  2,  20, 16, 19, 0,  12, 23, 10,
       8,  25, 28, 6,  3,  32, 7,  13, 30, 38, 39, 24, 37, 29,
       21, 35, 9,  27, 26, 15, 34, 33, 31, 22, 18, 36},
      {2,  0,  6,  8,  1, 15, 12, 14, 5,  9,  13, 21, 26, 20,
       28, 19, 30, 31, 3, 10, 25, 18, 4,  22, 36, 11, 39, 33,
       32, 17, 37, 27, 7, 29, 23, 24, 38, 35, 34, 16}};
  static const uint64_t want_hash[2][CALLS] = {
      {0x57ea3b3906d0702aull, 0x50b9dd3ec30316abull, 0xf1c3e6ced84f0a67ull,
       0xc2a2c35eafd6a356ull, 0x2717cb77f351eed8ull, 0x466ade0bd2ab8122ull,
       0xa6b62fee4f05ec97ull, 0xdd8d7edc54fc11e7ull},
      {0xa447d550b755159dull, 0x653b40d7c6e42f64ull, 0xe3a8af59059157bfull,
       0x2b451090e4d0ca64ull, 0x9a9fe12b6325f4e5ull, 0x9d072b0c77f2d301ull,
       0x3e0a033ffc8d823aull, 0xdd8d7edc54fc11e7ull}};
  nto_dataset_shuffle(ds, 16, 99);
  float x[B * FEAT], y[B * 10];
  for (int epoch = 0; epoch < 2; epoch++) {
    int order[GN], total = 0, got;
    assert_int_equal(nto_dataset_rewind(ds, &err), 0);
    do {
      assert_int_equal(nto_dataset_next(ds, x, y, B, &got, &err), 0);
      for (int b = 0; b < got; b++) {
        assert_true(total < GN);
        order[total++] = check_golden_row(x + b * FEAT, y + b * 10);
      }
    } while (got > 0);
    assert_int_equal(total, GN);
    check_golden_int(epoch ? "order epoch 1" : "order epoch 0", order,
                     want_order[epoch], GN);
  }
  /* The same two epochs again, hashed whole (padding rows included). */
  nto_dataset_shuffle(ds, 16, 99);
  for (int epoch = 0; epoch < 2; epoch++) {
    uint64_t h[CALLS];
    assert_int_equal(nto_dataset_rewind(ds, &err), 0);
    assert_int_equal(hash_epoch(ds, FEAT, 10, B, h, CALLS), CALLS);
    check_golden_u64(epoch ? "hash epoch 1" : "hash epoch 0", h,
                     want_hash[epoch], CALLS);
  }
  /* Limited to 25 samples, buffer 8, seed 5, one channel 30x29. */
  nto_dataset_close(ds);
  nto_shape s1 = {1, 1, 30, 29};
  assert_int_equal(nto_dataset_open_idx(&ds, img, lbl, s1, 10, &err), 0);
  nto_dataset_limit(ds, 25);
  nto_dataset_shuffle(ds, 8, 5);
  enum { CALLS1 = 25 / 4 + 2 };
  static const uint64_t want_lim[CALLS1] = {
      0xcaec9c2f7bb25895ull, 0xfc9df98e87d867acull, 0xb53f219b14a82458ull,
      0xc87b79ab00963e6full, 0xf34604bdb4e512deull, 0xbf0b5dc409d0200dull,
      0x13dae5f9b468003bull, 0x9569ee2cf9be54d9ull};
  uint64_t h[CALLS1];
  assert_int_equal(hash_epoch(ds, 30 * 29, 10, 4, h, CALLS1), CALLS1);
  check_golden_u64("hash limited", h, want_lim, CALLS1);
  nto_dataset_close(ds);
}

static void test_golden_fashion_mnist(void **state) {
  (void)state;
  struct stat st;
  if (stat(FMNIST_DIR, &st) != 0) {
    print_message("skipped: %s not installed\n", FMNIST_DIR);
    skip();
  }
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 3, 32, 32};
  if (nto_dataset_open_idx_dir(&ds, FMNIST_DIR, "t10k", s, 10, &err))
    fail_msg("%s", err.msg);
  /* The training defaults: 512-sample buffer; seed 1; batch 32. First
   * four batches of epochs 0 and 1, and a hash of all of epoch 2. */
  enum { B = 32, FEAT = 3 * 32 * 32, NB = 4 };
  static const uint64_t want[2][NB] = {
      {0x43ca71266d0d33abull, 0x42b654acf6f12a18ull, 0xcc21aebef68879f6ull,
       0x5b726b3239a44d58ull},
      {0xf5cf6701a3b18a63ull, 0xd98b3e7a8c73f7efull, 0x2ea141c5d82861c8ull,
       0x37a30034aab876ddull}};
  static const uint64_t want_epoch2 = 0x5de96a8f22fb080eull;
  nto_dataset_shuffle(ds, 512, 1);
  float *x = malloc(B * FEAT * sizeof *x), y[B * 10];
  int got;
  for (int epoch = 0; epoch < 2; epoch++) {
    uint64_t h[NB];
    assert_int_equal(nto_dataset_rewind(ds, &err), 0);
    for (int i = 0; i < NB; i++) {
      assert_int_equal(nto_dataset_next(ds, x, y, B, &got, &err), 0);
      assert_int_equal(got, B);
      h[i] = hash_floats(hash_floats(HASH_SEED, x, B * FEAT), y, B * 10);
    }
    check_golden_u64(epoch ? "fashion epoch 1" : "fashion epoch 0", h,
                     want[epoch], NB);
  }
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  uint64_t h = HASH_SEED;
  int total = 0;
  do {
    assert_int_equal(nto_dataset_next(ds, x, y, B, &got, &err), 0);
    h = hash_floats(hash_floats(h, x, B * FEAT), y, B * 10);
    total += got;
  } while (got > 0);
  assert_int_equal(total, 10000);
  check_golden_u64("fashion epoch 2", &h, &want_epoch2, 1);
  free(x);
  nto_dataset_close(ds);
}

/* Raw and synthetic sources: the batches recorded when the buffer kept float
 * samples are unchanged now that it keeps their indices. */
static void test_golden_raw_synthetic(void **state) {
  fixture *fx = *state;
  enum { N = 23, FEAT = 2 * 3 * 4, NC = 3, REC = FEAT + NC };
  float *data = malloc(N * REC * sizeof *data);
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < FEAT; j++)
      data[i * REC + j] = (float)i * 0.5f - (float)j * 0.0625f;
    for (int j = 0; j < NC; j++)
      data[i * REC + FEAT + j] = j == i % NC ? 1.0f : 0.0f;
  }
  char path[512];
  path_in(fx, path, sizeof path, "golden.dat");
  write_bytes(path, (const unsigned char *)data, N * REC * sizeof *data, 0);
  free(data);
  nto_dataset *ds = NULL;
  nto_err err = {0};
  nto_shape s = {1, 2, 3, 4};
  assert_int_equal(nto_dataset_open_raw(&ds, path, s, NC, &err), 0);
  nto_dataset_shuffle(ds, 7, 17);
  enum { CR = N / 5 + 2 };
  static const uint64_t want_raw[CR] = {
      0x1a66260a5d6fba67ull, 0xfd1a56f99f55d484ull, 0xb332b0df8c0d9613ull,
      0x35abd707523aed04ull, 0xebc26bf1186033f0ull, 0x1bb088dec08c6c55ull};
  uint64_t h[CR];
  assert_int_equal(hash_epoch(ds, FEAT, NC, 5, h, CR), CR);
  check_golden_u64("raw", h, want_raw, CR);
  nto_dataset_close(ds);

  nto_shape ss = {1, 3, 8, 8};
  assert_int_equal(nto_dataset_open_synthetic(&ds, 50, ss, 5, 21, &err), 0);
  nto_dataset_shuffle(ds, 12, 4);
  enum { CS = 50 / 8 + 2 };
  static const uint64_t want_syn[CS] = {
      0xec8366af793e67ecull, 0xd61980f208aec94dull, 0x542eca2731bc3235ull,
      0x1c7e2030ed340d71ull, 0x0deb32ecf0cfb9ecull, 0x3cf2574177d2b417ull,
      0xd8f4858d974e6a47ull, 0x6972aa9d7f61c0a7ull};
  uint64_t hs[CS];
  assert_int_equal(hash_epoch(ds, 3 * 8 * 8, 5, 8, hs, CS), CS);
  check_golden_u64("synthetic", hs, want_syn, CS);
  nto_dataset_close(ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_idx_gz_pad_replicate, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_idx_plain_and_odd_padding, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_idx_dir, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idx_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idx_shuffle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idx_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idx_keep_classes, setup, teardown),
      cmocka_unit_test(test_fashion_mnist),
      cmocka_unit_test_setup_teardown(test_raw_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_raw_labels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_regular_files, setup, teardown),
      cmocka_unit_test(test_synthetic),
      cmocka_unit_test(test_synthetic_keep_classes),
      cmocka_unit_test_setup_teardown(test_golden_idx_shuffled, setup,
                                      teardown),
      cmocka_unit_test(test_golden_fashion_mnist),
      cmocka_unit_test_setup_teardown(test_golden_raw_synthetic, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
