/*
 * raw.c - the nntrainer raw data source: per sample, c*h*w float32
 * feature values then num_classes float32 one-hot label values, native
 * endianness, no header. A random-access source (io/dataset-impl.h): the
 * file's size fixes the sample count at open; every sample, in file order
 * or from the shuffle buffer, is read with full preads (io/fileio.h) and
 * checked: every value finite, the label values a distribution (one-hot or
 * soft labels: each >= 0, summing to 1 within NTO_RAW_LABEL_SUM_TOL). The
 * file carries no header, so the first record's labels are checked at open
 * too: a file of another model whose size happens to be a multiple of this
 * model's record is then refused before training, not read as noise.
 */
#include "dataset-impl.h"

#include "fileio.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How far the label values of a record may sum from 1: float32 soft labels
 * written by numpy or torch (ten values of 0.1 sum to 1 within 1e-7). */
#define NTO_RAW_LABEL_SUM_TOL 1e-3

typedef struct raw_src {
  int fd;
  char name[160]; /* the file's name */
  char path[];    /* as opened */
} raw_src;

/* Bytes of one sample. */
static size_t raw_record(const nto_dataset *ds) {
  return (ds->feat + (size_t)ds->num_classes) * sizeof(float);
}

/*
 * The label values y[0..num_classes) of sample i, at byte offset off (its
 * first label value): each >= 0 and their sum within NTO_RAW_LABEL_SUM_TOL
 * of 1. An all-zero vector would train on nothing and a negative one away
 * from the class, silently. Returns 0 or NTO_EDATA naming the file, the
 * offset and what is wrong; at_open adds the likely cause (the file of a
 * model with another record size).
 */
static int raw_check_labels(const nto_dataset *ds, uint64_t i, uint64_t off,
                            const float *y, int at_open, nto_err *err) {
  const raw_src *s = ds->src;
  char hint[160] = "";
  if (at_open)
    snprintf(hint, sizeof hint,
             " (is it the file of a model with another record size? this "
             "one's is %zu bytes: (%zu features + %d label values) x 4)",
             raw_record(ds), ds->feat, ds->num_classes);
  double sum = 0.0;
  for (int j = 0; j < ds->num_classes; j++) {
    if (!(y[j] >= 0.0f))
      return nto_err_set(err, NTO_EDATA,
                         "%s: byte offset %" PRIu64 ": label value %d of "
                         "sample %" PRIu64 " is %g, expected a distribution "
                         "(values >= 0 summing to 1)%s",
                         s->path, off + (uint64_t)j * sizeof(float), j, i,
                         (double)y[j], hint);
    sum += y[j];
  }
  if (fabs(sum - 1.0) > NTO_RAW_LABEL_SUM_TOL)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": the %d label values of "
                       "sample %" PRIu64 " sum to %g, expected a distribution "
                       "(values >= 0 summing to 1 within %g)%s",
                       s->path, off, ds->num_classes, i, sum,
                       NTO_RAW_LABEL_SUM_TOL, hint);
  return 0;
}

/*
 * Sample i of a raw file, read into x and y: every value must be finite (a
 * NaN or infinity would only surface later as a non-finite loss, without
 * naming the file) and the labels a distribution (raw_check_labels).
 * Returns 0 or NTO_EDATA naming the file and the offset.
 */
static int raw_check(const nto_dataset *ds, uint64_t i, const float *x,
                     const float *y, nto_err *err) {
  const raw_src *s = ds->src;
  uint64_t off = i * raw_record(ds);
  size_t nc = (size_t)ds->num_classes;
  for (size_t j = 0; j < ds->feat + nc; j++) {
    float v = j < ds->feat ? x[j] : y[j - ds->feat];
    if (!isfinite(v))
      return nto_err_set(
          err, NTO_EDATA,
          "%s: byte offset %" PRIu64 ": %s %zu of sample %" PRIu64
          " is %s, expected a finite float32",
          s->path, off + j * sizeof(float),
          j < ds->feat ? "feature" : "label value",
          j < ds->feat ? j : j - ds->feat, i, isnan(v) ? "NaN" : "infinite");
  }
  return raw_check_labels(ds, i, off + ds->feat * sizeof(float), y, 0, err);
}

/* Sample i read with pread. A read that meets the end of the file: the
 * file shrank after it was opened (its size was checked then), which the
 * message hints at. */
static int raw_sample(const nto_dataset *ds, uint64_t i, float *x, float *y,
                      nto_err *err) {
  const raw_src *s = ds->src;
  uint64_t off = i * raw_record(ds);
  size_t nx = ds->feat * sizeof *x, ny = (size_t)ds->num_classes * sizeof *y;
  int rc = nto_file_pread_full(s->fd, x, nx, off, s->path, err);
  if (rc == 0)
    rc = nto_file_pread_full(s->fd, y, ny, off + nx, s->path, err);
  /* read once an epoch: its pages may go (a page cache grown by the data
   * counts against a cgroup's memory limit like the process's own) */
  posix_fadvise(s->fd, (off_t)off, (off_t)(nx + ny), POSIX_FADV_DONTNEED);
  if (rc == NTO_EDATA && err) {
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (file changed since open?)");
  }
  return rc ? rc : raw_check(ds, i, x, y, err);
}

static void raw_describe(const nto_dataset *ds, const char *count, char *buf,
                         size_t len) {
  const raw_src *s = ds->src;
  nto_shape sh = ds->sample;
  snprintf(buf, len, "%s (nntrainer raw): %s, %dx%dx%d, %d classes", s->name,
           count, sh.c, sh.h, sh.w, ds->num_classes);
}

static void raw_close(void *src) {
  raw_src *s = src;
  if (s->fd >= 0)
    close(s->fd);
  free(s);
}

/* The sample count of a file of size bytes: a whole number of records. */
static int raw_count(const nto_dataset *ds, const char *path, uint64_t size,
                     nto_err *err) {
  size_t rec = raw_record(ds);
  if (size == 0)
    return nto_err_set(err, NTO_EDATA,
                       "%s: size 0 bytes: empty, expected records of %zu bytes "
                       "((%zu features + %d label values) x 4)",
                       path, rec, ds->feat, ds->num_classes);
  if (size % rec != 0) {
    uint64_t last = size - size % rec;
    return nto_err_set(err, NTO_EDATA,
                       "%s: size %" PRIu64
                       " bytes is not a multiple of the record size %zu bytes "
                       "((%zu features + %d label values) x 4): the record at "
                       "byte offset %" PRIu64 " has only %" PRIu64 " bytes",
                       path, size, rec, ds->feat, ds->num_classes, last,
                       size - last);
  }
  return 0;
}

/* The labels of sample 0, read and checked at open (raw_check_labels with
 * the hint): the one look at the content before training. */
static int raw_first_labels(const nto_dataset *ds, nto_err *err) {
  const raw_src *s = ds->src;
  size_t nc = (size_t)ds->num_classes;
  uint64_t off = ds->feat * sizeof(float);
  float *y = malloc(nc * sizeof *y);
  if (y == NULL)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", s->path);
  int rc = nto_file_pread_full(s->fd, y, nc * sizeof *y, off, s->path, err);
  for (size_t j = 0; rc == 0 && j < nc; j++)
    if (!isfinite(y[j]))
      rc = nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": label value %zu of "
                       "sample 0 is %s, expected a finite float32",
                       s->path, off + j * sizeof(float), j,
                       isnan(y[j]) ? "NaN" : "infinite");
  if (rc == 0)
    rc = raw_check_labels(ds, 0, off, y, 1, err);
  free(y);
  return rc;
}

int nto_dataset_open_raw(nto_dataset **out, const char *path, nto_shape sample,
                         int num_classes, nto_err *err) {
  int rc = nto_dataset_new(out, &nto_dataset_raw_ops, sample, num_classes, err);
  if (rc)
    return rc;
  nto_dataset *ds = *out;
  raw_src *s = NULL;
  uint64_t size = 0;
  if (path == NULL)
    return nto_dataset_finish(
        out, nto_err_set(err, NTO_EINVAL, "dataset: NULL raw file name"), err);
  if (!(s = ds->src = calloc(1, sizeof *s + strlen(path) + 1))) {
    rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  } else {
    memcpy(s->path, path, strlen(path) + 1);
    rc = nto_file_open_read(path, &s->fd, &size, err);
  }
  if (rc == 0)
    rc = raw_count(ds, path, size, err);
  if (rc == 0) {
    ds->count = (size_t)(size / raw_record(ds));
    nto_dataset_base_name(path, s->name, sizeof s->name);
    rc = raw_first_labels(ds, err);
  }
  return nto_dataset_finish(out, rc, err);
}

const nto_dataset_ops nto_dataset_raw_ops = {
    .kind = 1,
    .sample = raw_sample,
    .describe = raw_describe,
    .close = raw_close,
};
