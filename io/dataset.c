/*
 * dataset.c - streaming training data readers. See dataset.h.
 *
 * DESIGN
 * A dataset is a source (IDX pair, raw file, synthetic generator) that yields
 * samples in source order, one at a time, into caller-provided rows, plus an
 * optional shuffle buffer in front of it:
 *
 *   source --read one sample--> [shuffle buffer of B slots] --pick--> batch
 *
 * Only the shuffle buffer (B slots) and one raw image live in RAM; files
 * are streamed (zlib gzread for IDX, which handles gzip and plain files
 * alike; stdio fread for raw files). Each epoch (nto_dataset_rewind)
 * rewinds the streams and re-checks the headers.
 *
 * A slot holds a sample in its most compact form (slot_bytes): for IDX the
 * raw image bytes and the label byte (rows*cols + 1 bytes: 785 for
 * Fashion-MNIST), adapted to the model input (scaled, padded, replicated,
 * one-hot) only when the slot is copied into a batch (slot_emit); for raw
 * and synthetic sources, whose samples are floats (600 KiB for a 224x224
 * RGB image: 300 MiB for 512 slots), only the sample's index, 8 bytes: the
 * sample is read back with pread (raw) or generated again (synthetic)
 * when the slot is emitted. The adaptation is the same arithmetic at either
 * point, so batches do not depend on whether a sample went through the
 * buffer.
 *
 * Shuffling: the buffer is filled with the first B samples of the epoch;
 * every output takes a uniformly random occupied slot (nto_rng_below) and
 * the slot is refilled from the stream, or, once the stream is exhausted,
 * replaced by the last occupied slot. Every sample of the epoch therefore
 * comes out exactly once. The generator is reseeded at each rewind with
 * seed + epoch, where epoch counts rewinds since the last
 * nto_dataset_shuffle() call (or since open), so the order is a function of
 * (seed, epoch) only. B = 0 or 1 reads in file order.
 *
 * Synthetic samples are a function of (seed, sample index) only, so limits
 * and shuffling never change their values. The label is the argmax of a fixed
 * random projection (from seed) of the sample's block means: a deterministic,
 * learnable function of the input whose cost does not grow with the number
 * of classes times the input size.
 *
 * IDX labels are small (one byte per sample): they are validated in full at
 * open time (range, truncation) but still streamed during epochs. A plain
 * images file that is too short is refused at open (from its size); a
 * truncated or corrupt gzip images file can only be noticed while
 * decompressing, so nto_dataset_next reports it, with the byte offset.
 */
#include "dataset.h"

#include "fileio.h"
#include "rng.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned byte, 3 dims */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned byte, 1 dim */
#define IDX_IMAGES_HEADER 16u        /* magic, count, rows, cols */
#define IDX_LABELS_HEADER 8u         /* magic, count */
#define SYNTH_DIMS 64                /* block means fed to the projection */

typedef enum { SRC_IDX, SRC_RAW, SRC_SYNTH } src_kind;

struct nto_dataset {
  src_kind kind;
  nto_shape sample; /* model input shape; n unused */
  int num_classes;
  size_t feat;  /* c*h*w floats per sample */
  size_t count; /* samples in the source */
  size_t limit; /* 0: all */
  size_t pos;   /* source samples consumed in this epoch */
  int started;  /* an epoch has been started by a rewind */

  /* IDX source */
  char *img_path, *lbl_path;
  gzFile img, lbl;
  int rows, cols;
  unsigned char *pix; /* (rows, cols): one raw image */
  unsigned char img_hdr[IDX_IMAGES_HEADER], lbl_hdr[IDX_LABELS_HEADER];

  /* raw source */
  char *raw_path;
  FILE *raw;

  /* synthetic source */
  uint64_t synth_seed;
  int synth_dims;
  double *proj; /* (num_classes, synth_dims) */

  /* shuffle */
  size_t shuf_req;    /* requested buffer size, applied at rewind */
  uint64_t shuf_seed; /* requested seed */
  uint64_t epoch;     /* rewinds since the last nto_dataset_shuffle() */
  size_t cap;         /* active buffer size this epoch (<= 1: none) */
  nto_rng rng;
  unsigned char *buf; /* (buf_alloc, slot_bytes(ds)) */
  size_t buf_alloc;   /* slots allocated */
  size_t fill;        /* occupied slots */
  int primed;         /* buffer filled for this epoch */
  size_t taken;       /* samples handed out (or skipped) this epoch */

  char name[160];
  char desc[400];
};

/* ---------------------------------------------------------------- helpers */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p)
    memcpy(p, s, n);
  return p;
}

/* Last path component of path (trailing slashes ignored) into buf. */
static void base_name(const char *path, char *buf, size_t len) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/')
    n--;
  size_t b = n;
  while (b > 0 && path[b - 1] != '/')
    b--;
  size_t m = n - b;
  if (m >= len)
    m = len - 1;
  memcpy(buf, path + b, m);
  buf[m] = '\0';
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static size_t epoch_size(const nto_dataset *ds) {
  return ds->limit && ds->limit < ds->count ? ds->limit : ds->count;
}

static void build_desc(nto_dataset *ds) {
  char count[64];
  if (epoch_size(ds) < ds->count)
    snprintf(count, sizeof count, "%zu of %zu samples", epoch_size(ds),
             ds->count);
  else
    snprintf(count, sizeof count, "%zu samples", ds->count);
  nto_shape s = ds->sample;
  switch (ds->kind) {
  case SRC_IDX: {
    char pad[64] = "", rep[64] = "";
    if (ds->rows != s.h || ds->cols != s.w)
      snprintf(pad, sizeof pad, " zero-padded to %dx%d", s.h, s.w);
    if (s.c != 1)
      snprintf(rep, sizeof rep, ", channel replicated to %d", s.c);
    snprintf(ds->desc, sizeof ds->desc, "%s: %s, 1x%dx%d%s%s%s", ds->name,
             count, ds->rows, ds->cols, pad, rep,
             pad[0] || rep[0] ? "" : " (no adaptation)");
    break;
  }
  case SRC_RAW:
    snprintf(ds->desc, sizeof ds->desc,
             "%s (nntrainer raw): %s, %dx%dx%d, %d classes", ds->name, count,
             s.c, s.h, s.w, ds->num_classes);
    break;
  case SRC_SYNTH:
    snprintf(ds->desc, sizeof ds->desc,
             "synthetic (seed %" PRIu64 "): %s, %dx%dx%d N(0,1), %d classes",
             ds->synth_seed, count, s.c, s.h, s.w, ds->num_classes);
    break;
  }
}

static int check_args(nto_dataset **out, nto_shape sample, int num_classes,
                      nto_err *err) {
  if (out == NULL)
    return nto_err_set(err, NTO_EINVAL, "dataset: NULL output pointer");
  *out = NULL;
  if (sample.c < 1 || sample.h < 1 || sample.w < 1)
    return nto_err_set(err, NTO_EINVAL, "dataset: invalid input shape %dx%dx%d",
                       sample.c, sample.h, sample.w);
  if (num_classes < 1)
    return nto_err_set(err, NTO_EINVAL, "dataset: invalid num_classes %d",
                       num_classes);
  return 0;
}

static nto_dataset *ds_new(src_kind kind, nto_shape sample, int num_classes) {
  nto_dataset *ds = calloc(1, sizeof *ds);
  if (ds == NULL)
    return NULL;
  ds->kind = kind;
  ds->sample = sample;
  ds->num_classes = num_classes;
  ds->feat = nto_shape_sample(sample);
  return ds;
}

/* ------------------------------------------------------------ IDX (zlib) */

/*
 * Read exactly len bytes from f at uncompressed offset off (for messages).
 * Returns 0, NTO_EIO (system error), or NTO_EDATA (truncated or corrupt
 * gzip data), naming path and offset.
 */
static int gz_read_full(gzFile f, void *buf, size_t len, const char *path,
                        uint64_t off, const char *what, nto_err *err) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got;
    if (want > (size_t)INT_MAX / 2)
      want = (size_t)INT_MAX / 2;
    int n = gzread(f, (unsigned char *)buf + got, (unsigned)want);
    if (n > 0) {
      got += (size_t)n;
      continue;
    }
    int zerr = Z_OK;
    const char *zmsg = gzerror(f, &zerr);
    if (n < 0 && zerr == Z_ERRNO)
      return nto_err_set(err, NTO_EIO, "%s: byte offset %" PRIu64 ": %s", path,
                         off + got, strerror(errno));
    if (n < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
      return nto_err_set(err, NTO_EDATA,
                         "%s: byte offset %" PRIu64 ": corrupt data (%s)", path,
                         off + got, zmsg);
    return nto_err_set(err, NTO_EDATA,
                       "%s: truncated at byte offset %" PRIu64
                       " (%zu more bytes of %s expected)",
                       path, off + got, len - got, what);
  }
  return 0;
}

static int gz_open(gzFile *out, const char *path, nto_err *err) {
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (f == NULL)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       errno ? strerror(errno) : "out of memory");
  gzbuffer(f, 128 * 1024);
  *out = f;
  return 0;
}

/* For a plain (not gzip) file, check it holds at least need bytes. */
static int check_plain_size(gzFile f, const char *path, uint64_t need,
                            nto_err *err) {
  if (!gzdirect(f))
    return 0;
  struct stat st;
  if (stat(path, &st) != 0)
    return nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(errno));
  if ((uint64_t)st.st_size < need)
    return nto_err_set(err, NTO_EDATA,
                       "%s: truncated at byte offset %" PRIu64
                       ": the header announces %" PRIu64 " bytes",
                       path, (uint64_t)st.st_size, need);
  return 0;
}

/* Read and check the images header; fills count, rows, cols. */
static int idx_images_header(nto_dataset *ds, nto_err *err) {
  int rc = gz_read_full(ds->img, ds->img_hdr, IDX_IMAGES_HEADER, ds->img_path,
                        0, "IDX header", err);
  if (rc)
    return rc;
  uint32_t magic = be32(ds->img_hdr);
  if (magic != IDX_MAGIC_IMAGES)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 0: magic 0x%08" PRIx32
                       ", expected 0x%08x (IDX images, 3 dims of u8)",
                       ds->img_path, magic, IDX_MAGIC_IMAGES);
  uint32_t count = be32(ds->img_hdr + 4), rows = be32(ds->img_hdr + 8),
           cols = be32(ds->img_hdr + 12);
  if (count == 0 || rows == 0 || cols == 0 || rows > 65535 || cols > 65535)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 4: invalid dimensions %" PRIu32
                       " x %" PRIu32 " x %" PRIu32,
                       ds->img_path, count, rows, cols);
  ds->count = count;
  ds->rows = (int)rows;
  ds->cols = (int)cols;
  return check_plain_size(ds->img, ds->img_path,
                          IDX_IMAGES_HEADER + (uint64_t)count * rows * cols,
                          err);
}

static int idx_labels_header(nto_dataset *ds, uint32_t *count, nto_err *err) {
  int rc = gz_read_full(ds->lbl, ds->lbl_hdr, IDX_LABELS_HEADER, ds->lbl_path,
                        0, "IDX header", err);
  if (rc)
    return rc;
  uint32_t magic = be32(ds->lbl_hdr);
  if (magic != IDX_MAGIC_LABELS)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 0: magic 0x%08" PRIx32
                       ", expected 0x%08x (IDX labels, 1 dim of u8)",
                       ds->lbl_path, magic, IDX_MAGIC_LABELS);
  *count = be32(ds->lbl_hdr + 4);
  return check_plain_size(ds->lbl, ds->lbl_path,
                          IDX_LABELS_HEADER + (uint64_t)*count, err);
}

/* Stream through all labels once: range and truncation checks. */
static int idx_validate_labels(nto_dataset *ds, nto_err *err) {
  unsigned char buf[4096];
  size_t done = 0;
  while (done < ds->count) {
    size_t n = ds->count - done < sizeof buf ? ds->count - done : sizeof buf;
    int rc = gz_read_full(ds->lbl, buf, n, ds->lbl_path,
                          IDX_LABELS_HEADER + (uint64_t)done, "labels", err);
    if (rc)
      return rc;
    for (size_t i = 0; i < n; i++)
      if (buf[i] >= ds->num_classes)
        return nto_err_set(
            err, NTO_EDATA,
            "%s: byte offset %" PRIu64 ": label %d out of range [0, %d)",
            ds->lbl_path, IDX_LABELS_HEADER + (uint64_t)(done + i), (int)buf[i],
            ds->num_classes);
    done += n;
  }
  return 0;
}

/* Rewind both streams and re-check that the headers did not change. */
static int idx_rewind(nto_dataset *ds, nto_err *err) {
  unsigned char h[IDX_IMAGES_HEADER];
  if (gzrewind(ds->img) != 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot rewind", ds->img_path);
  int rc = gz_read_full(ds->img, h, IDX_IMAGES_HEADER, ds->img_path, 0,
                        "IDX header", err);
  if (rc)
    return rc;
  if (memcmp(h, ds->img_hdr, IDX_IMAGES_HEADER) != 0)
    return nto_err_set(err, NTO_EDATA, "%s: byte offset 0: header changed",
                       ds->img_path);
  if (gzrewind(ds->lbl) != 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot rewind", ds->lbl_path);
  rc = gz_read_full(ds->lbl, h, IDX_LABELS_HEADER, ds->lbl_path, 0,
                    "IDX header", err);
  if (rc)
    return rc;
  if (memcmp(h, ds->lbl_hdr, IDX_LABELS_HEADER) != 0)
    return nto_err_set(err, NTO_EDATA, "%s: byte offset 0: header changed",
                       ds->lbl_path);
  return 0;
}

/*
 * Read sample ds->pos of the streams: its raw image into pix (rows*cols
 * bytes) and its label into *lab, checked to be < num_classes.
 */
static int idx_fetch(nto_dataset *ds, unsigned char *pix, unsigned char *lab,
                     nto_err *err) {
  size_t npix = (size_t)ds->rows * (size_t)ds->cols;
  int rc =
      gz_read_full(ds->img, pix, npix, ds->img_path,
                   IDX_IMAGES_HEADER + (uint64_t)ds->pos * npix, "image", err);
  if (rc)
    return rc;
  rc = gz_read_full(ds->lbl, lab, 1, ds->lbl_path,
                    IDX_LABELS_HEADER + (uint64_t)ds->pos, "label", err);
  if (rc)
    return rc;
  if (*lab >= ds->num_classes)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64
                       ": label %d out of range [0, %d)",
                       ds->lbl_path, IDX_LABELS_HEADER + (uint64_t)ds->pos,
                       (int)*lab, ds->num_classes);
  return 0;
}

/*
 * Adapt one raw image pix (rows, cols) to the model input: x (c, h, w) gets
 * it scaled to [0, 1], padded centred with zeros and replicated over
 * channels; y (num_classes) the one-hot of lab.
 */
static void idx_adapt(const nto_dataset *ds, const unsigned char *pix,
                      unsigned char lab, float *x, float *y) {
  size_t h = (size_t)ds->sample.h, w = (size_t)ds->sample.w;
  size_t top = (h - (size_t)ds->rows) / 2, left = (w - (size_t)ds->cols) / 2;
  size_t plane = h * w;
  memset(x, 0, plane * sizeof *x);
  for (size_t r = 0; r < (size_t)ds->rows; r++) {
    const unsigned char *src = pix + r * (size_t)ds->cols;
    float *dst = x + (top + r) * w + left;
    for (size_t c = 0; c < (size_t)ds->cols; c++)
      dst[c] = (float)src[c] / 255.0f;
  }
  for (int ch = 1; ch < ds->sample.c; ch++)
    memcpy(x + (size_t)ch * plane, x, plane * sizeof *x);
  memset(y, 0, (size_t)ds->num_classes * sizeof *y);
  y[lab] = 1.0f;
}

/* Sample ds->pos adapted into x (c, h, w) and y (num_classes). */
static int idx_read(nto_dataset *ds, float *x, float *y, nto_err *err) {
  unsigned char lab;
  int rc = idx_fetch(ds, ds->pix, &lab, err);
  if (rc == 0)
    idx_adapt(ds, ds->pix, lab, x, y);
  return rc;
}

static int open_idx_named(nto_dataset **out, const char *images,
                          const char *labels, nto_shape sample, int num_classes,
                          const char *name, nto_err *err) {
  int rc = check_args(out, sample, num_classes, err);
  if (rc)
    return rc;
  if (images == NULL || labels == NULL)
    return nto_err_set(err, NTO_EINVAL, "dataset: NULL IDX file name");
  nto_dataset *ds = ds_new(SRC_IDX, sample, num_classes);
  if (ds == NULL || !(ds->img_path = dup_str(images)) ||
      !(ds->lbl_path = dup_str(labels))) {
    nto_dataset_close(ds);
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  }
  uint32_t nlabels = 0;
  if ((rc = gz_open(&ds->img, images, err)) ||
      (rc = idx_images_header(ds, err)) ||
      (rc = gz_open(&ds->lbl, labels, err)) ||
      (rc = idx_labels_header(ds, &nlabels, err)))
    goto fail;
  if (nlabels != ds->count) {
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: byte offset 4: %" PRIu32 " labels, but %s has %zu "
                     "images",
                     labels, nlabels, images, ds->count);
    goto fail;
  }
  if (ds->rows > sample.h || ds->cols > sample.w) {
    rc = nto_err_set(err, NTO_ESHAPE,
                     "%s: images are %dx%d, larger than the model input "
                     "%dx%dx%d",
                     images, ds->rows, ds->cols, sample.c, sample.h, sample.w);
    goto fail;
  }
  if ((rc = idx_validate_labels(ds, err)))
    goto fail;
  ds->pix = malloc((size_t)ds->rows * (size_t)ds->cols);
  if (ds->pix == NULL) {
    rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
    goto fail;
  }
  if (name)
    snprintf(ds->name, sizeof ds->name, "%s", name);
  else
    base_name(images, ds->name, sizeof ds->name);
  build_desc(ds);
  *out = ds;
  return 0;
fail:
  nto_dataset_close(ds);
  return rc;
}

int nto_dataset_open_idx(nto_dataset **out, const char *images,
                         const char *labels, nto_shape sample, int num_classes,
                         nto_err *err) {
  return open_idx_named(out, images, labels, sample, num_classes, NULL, err);
}

/* Pick "<dir>/<split>-<kind>.gz" if it exists, else the plain name. */
static int idx_dir_file(char *buf, size_t len, const char *dir,
                        const char *split, const char *kind, nto_err *err) {
  int n = snprintf(buf, len, "%s/%s-%s.gz", dir, split, kind);
  if (n < 0 || (size_t)n >= len)
    return nto_err_set(err, NTO_EINVAL, "%s: path too long", dir);
  if (access(buf, F_OK) == 0)
    return 0;
  int e = errno;
  buf[n - 3] = '\0';
  if (access(buf, F_OK) == 0)
    return 0;
  return nto_err_set(err, NTO_EIO, "%s.gz: cannot open (nor without .gz): %s",
                     buf, strerror(e));
}

int nto_dataset_open_idx_dir(nto_dataset **out, const char *dir,
                             const char *split, nto_shape sample,
                             int num_classes, nto_err *err) {
  if (out)
    *out = NULL;
  if (dir == NULL || split == NULL)
    return nto_err_set(err, NTO_EINVAL, "dataset: NULL directory or split");
  char images[4096], labels[4096], base[128], name[160];
  int rc =
      idx_dir_file(images, sizeof images, dir, split, "images-idx3-ubyte", err);
  if (rc)
    return rc;
  rc =
      idx_dir_file(labels, sizeof labels, dir, split, "labels-idx1-ubyte", err);
  if (rc)
    return rc;
  base_name(dir, base, sizeof base);
  snprintf(name, sizeof name, "%s %s", base, split);
  return open_idx_named(out, images, labels, sample, num_classes, name, err);
}

/* ------------------------------------------------------------- raw files */

static size_t raw_record(const nto_dataset *ds) {
  return (ds->feat + (size_t)ds->num_classes) * sizeof(float);
}

int nto_dataset_open_raw(nto_dataset **out, const char *path, nto_shape sample,
                         int num_classes, nto_err *err) {
  int rc = check_args(out, sample, num_classes, err);
  if (rc)
    return rc;
  if (path == NULL)
    return nto_err_set(err, NTO_EINVAL, "dataset: NULL raw file name");
  nto_dataset *ds = ds_new(SRC_RAW, sample, num_classes);
  if (ds == NULL || !(ds->raw_path = dup_str(path))) {
    nto_dataset_close(ds);
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  }
  ds->raw = fopen(path, "rb");
  if (ds->raw == NULL) {
    rc =
        nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path, strerror(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(fileno(ds->raw), &st) != 0) {
    rc = nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(errno));
    goto fail;
  }
  size_t rec = raw_record(ds);
  uint64_t size = (uint64_t)st.st_size;
  if (size == 0) {
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: size 0 bytes: empty, expected records of %zu bytes "
                     "((%zu features + %d label values) x 4)",
                     path, rec, ds->feat, num_classes);
    goto fail;
  }
  if (size % rec != 0) {
    uint64_t last = size - size % rec;
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: size %" PRIu64
                     " bytes is not a multiple of the record size %zu bytes "
                     "((%zu features + %d label values) x 4): the record at "
                     "byte offset %" PRIu64 " has only %" PRIu64 " bytes",
                     path, size, rec, ds->feat, num_classes, last,
                     size - last);
    goto fail;
  }
  ds->count = (size_t)(size / rec);
  base_name(path, ds->name, sizeof ds->name);
  build_desc(ds);
  *out = ds;
  return 0;
fail:
  nto_dataset_close(ds);
  return rc;
}

/*
 * Sample i of a raw file, read into x and y: every value must be finite (a
 * NaN or infinity would only surface later as a non-finite loss, without
 * naming the file). Returns 0 or NTO_EDATA naming the file and the offset.
 */
static int raw_check(const nto_dataset *ds, uint64_t i, const float *x,
                     const float *y, nto_err *err) {
  uint64_t off = i * raw_record(ds);
  size_t nc = (size_t)ds->num_classes;
  for (size_t j = 0; j < ds->feat + nc; j++) {
    float v = j < ds->feat ? x[j] : y[j - ds->feat];
    if (!isfinite(v))
      return nto_err_set(err, NTO_EDATA,
                         "%s: byte offset %" PRIu64 ": %s %zu of sample %" PRIu64
                         " is %s, expected a finite float32",
                         ds->raw_path, off + j * sizeof(float),
                         j < ds->feat ? "feature" : "label value",
                         j < ds->feat ? j : j - ds->feat, i,
                         isnan(v) ? "NaN" : "infinite");
  }
  return 0;
}

static int raw_read(nto_dataset *ds, float *x, float *y, nto_err *err) {
  uint64_t off = (uint64_t)ds->pos * raw_record(ds);
  size_t nx = fread(x, sizeof *x, ds->feat, ds->raw);
  size_t ny = nx == ds->feat
                  ? fread(y, sizeof *y, (size_t)ds->num_classes, ds->raw)
                  : 0;
  if (nx == ds->feat && ny == (size_t)ds->num_classes)
    return raw_check(ds, ds->pos, x, y, err);
  if (ferror(ds->raw))
    return nto_err_set(err, NTO_EIO, "%s: byte offset %" PRIu64 ": %s",
                       ds->raw_path, off, strerror(errno));
  return nto_err_set(err, NTO_EDATA,
                     "%s: truncated at byte offset %" PRIu64
                     " (file changed since open?)",
                     ds->raw_path, off + (nx + ny) * sizeof(float));
}

/* ------------------------------------------------------------- synthetic */

static uint64_t synth_sample_seed(uint64_t seed, size_t i) {
  return seed ^ (0x9E3779B97F4A7C15ull * ((uint64_t)i + 1));
}

int nto_dataset_open_synthetic(nto_dataset **out, size_t num_samples,
                               nto_shape sample, int num_classes, uint64_t seed,
                               nto_err *err) {
  int rc = check_args(out, sample, num_classes, err);
  if (rc)
    return rc;
  if (num_samples == 0)
    return nto_err_set(err, NTO_EINVAL, "synthetic dataset: 0 samples");
  nto_dataset *ds = ds_new(SRC_SYNTH, sample, num_classes);
  if (ds == NULL)
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  ds->count = num_samples;
  ds->synth_seed = seed;
  ds->synth_dims = ds->feat < SYNTH_DIMS ? (int)ds->feat : SYNTH_DIMS;
  ds->proj =
      malloc((size_t)num_classes * (size_t)ds->synth_dims * sizeof *ds->proj);
  if (ds->proj == NULL) {
    nto_dataset_close(ds);
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  }
  nto_rng r;
  nto_rng_seed(&r, seed ^ 0x50524f4a45435431ull); /* "PROJECT1" */
  for (size_t k = 0; k < (size_t)num_classes * (size_t)ds->synth_dims; k++)
    ds->proj[k] = nto_rng_normal(&r);
  snprintf(ds->name, sizeof ds->name, "synthetic");
  build_desc(ds);
  *out = ds;
  return 0;
}

/* Sample i: x ~ N(0,1) from (seed, index); y = one-hot of
 * argmax(proj . block_means(x)). */
static void synth_gen(const nto_dataset *ds, uint64_t i, float *x, float *y) {
  nto_rng r;
  nto_rng_seed(&r, synth_sample_seed(ds->synth_seed, (size_t)i));
  for (size_t j = 0; j < ds->feat; j++)
    x[j] = (float)nto_rng_normal(&r);
  size_t d = (size_t)ds->synth_dims;
  double z[SYNTH_DIMS];
  for (size_t b = 0; b < d; b++) {
    size_t lo = b * ds->feat / d, hi = (b + 1) * ds->feat / d;
    double s = 0.0;
    for (size_t j = lo; j < hi; j++)
      s += x[j];
    z[b] = s / (double)(hi - lo);
  }
  int best = 0;
  double best_score = 0.0;
  for (int k = 0; k < ds->num_classes; k++) {
    const double *p = ds->proj + (size_t)k * d;
    double s = 0.0;
    for (size_t b = 0; b < d; b++)
      s += p[b] * z[b];
    if (k == 0 || s > best_score) {
      best = k;
      best_score = s;
    }
  }
  memset(y, 0, (size_t)ds->num_classes * sizeof *y);
  y[best] = 1.0f;
}

/* ---------------------------------------------------------------- common */

/* Read the next source sample (index ds->pos) into x, y; advance pos. */
static int src_read(nto_dataset *ds, float *x, float *y, nto_err *err) {
  int rc = 0;
  switch (ds->kind) {
  case SRC_IDX:
    rc = idx_read(ds, x, y, err);
    break;
  case SRC_RAW:
    rc = raw_read(ds, x, y, err);
    break;
  case SRC_SYNTH:
    synth_gen(ds, ds->pos, x, y);
    break;
  }
  if (rc == 0)
    ds->pos++;
  return rc;
}

/* Bytes of one shuffle-buffer slot (see DESIGN). */
static size_t slot_bytes(const nto_dataset *ds) {
  if (ds->kind == SRC_IDX)
    return (size_t)ds->rows * (size_t)ds->cols + 1;
  return sizeof(uint64_t);
}

/* A read of a raw file met its end: the file shrank after it was opened
 * (its size was checked then). Appends the hint to err's message. */
static int raw_changed(nto_err *err) {
  if (err) {
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (file changed since open?)");
  }
  return NTO_EDATA;
}

/* Raw sample i read with pread (the shuffle buffer's random access). */
static int raw_pread(const nto_dataset *ds, uint64_t i, float *x, float *y,
                     nto_err *err) {
  uint64_t off = i * raw_record(ds);
  size_t nx = ds->feat * sizeof *x, ny = (size_t)ds->num_classes * sizeof *y;
  int fd = fileno(ds->raw);
  int rc = nto_file_pread_full(fd, x, nx, off, ds->raw_path, err);
  if (rc == 0)
    rc = nto_file_pread_full(fd, y, ny, off + nx, ds->raw_path, err);
  if (rc == NTO_EDATA)
    return raw_changed(err);
  return rc ? rc : raw_check(ds, i, x, y, err);
}

/* Read the next source sample (index ds->pos) into slot s; advance pos. */
static int slot_fill(nto_dataset *ds, unsigned char *s, nto_err *err) {
  if (ds->kind != SRC_IDX) { /* its index: read or generated when emitted */
    uint64_t i = ds->pos++;
    memcpy(s, &i, sizeof i);
    return 0;
  }
  size_t npix = (size_t)ds->rows * (size_t)ds->cols;
  int rc = idx_fetch(ds, s, s + npix, err);
  if (rc == 0)
    ds->pos++;
  return rc;
}

/* Write the sample held in slot s into a batch row x (c, h, w), y.
 * Returns 0, or the raw file's read error. */
static int slot_emit(const nto_dataset *ds, const unsigned char *s, float *x,
                     float *y, nto_err *err) {
  if (ds->kind == SRC_IDX) {
    size_t npix = (size_t)ds->rows * (size_t)ds->cols;
    idx_adapt(ds, s, s[npix], x, y);
    return 0;
  }
  uint64_t i;
  memcpy(&i, s, sizeof i);
  if (ds->kind == SRC_RAW)
    return raw_pread(ds, i, x, y, err);
  synth_gen(ds, i, x, y);
  return 0;
}

size_t nto_dataset_size(const nto_dataset *ds) { return epoch_size(ds); }

void nto_dataset_limit(nto_dataset *ds, size_t n) {
  ds->limit = n;
  build_desc(ds);
}

void nto_dataset_shuffle(nto_dataset *ds, size_t buffer_samples,
                         uint64_t seed) {
  ds->shuf_req = buffer_samples;
  ds->shuf_seed = seed;
  ds->epoch = 0;
}

int nto_dataset_rewind(nto_dataset *ds, nto_err *err) {
  ds->started = 0;
  ds->pos = 0;
  ds->taken = 0;
  ds->fill = 0;
  ds->primed = 0;
  int rc = 0;
  if (ds->kind == SRC_IDX)
    rc = idx_rewind(ds, err);
  else if (ds->kind == SRC_RAW && fseek(ds->raw, 0, SEEK_SET) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: cannot rewind: %s", ds->raw_path,
                     strerror(errno));
  if (rc)
    return rc;

  size_t cap = ds->shuf_req;
  if (cap > epoch_size(ds))
    cap = epoch_size(ds);
  if (cap > UINT32_MAX)
    cap = UINT32_MAX;
  if (cap > 1 && cap > ds->buf_alloc) {
    size_t slot = slot_bytes(ds);
    if (cap > SIZE_MAX / slot)
      return nto_err_set(err, NTO_ENOMEM,
                         "dataset: shuffle buffer of %zu samples too large",
                         cap);
    unsigned char *buf = malloc(cap * slot);
    if (buf == NULL)
      return nto_err_set(err, NTO_ENOMEM,
                         "dataset: out of memory for a shuffle buffer of "
                         "%zu samples (%zu bytes)",
                         cap, cap * slot);
    free(ds->buf);
    ds->buf = buf;
    ds->buf_alloc = cap;
  }
  ds->cap = cap;
  nto_rng_seed(&ds->rng, ds->shuf_seed + ds->epoch);
  ds->epoch++;
  ds->started = 1;
  return 0;
}

/* Skip source sample ds->pos without a shuffle buffer (file order):
 * advance pos. IDX streams are read through (gzip cannot seek without
 * decompressing); raw files seek; synthetic samples need nothing. */
static int src_skip(nto_dataset *ds, nto_err *err) {
  int rc = 0;
  if (ds->kind == SRC_IDX) {
    unsigned char lab;
    rc = idx_fetch(ds, ds->pix, &lab, err);
  } else if (ds->kind == SRC_RAW &&
             fseek(ds->raw, (long)raw_record(ds), SEEK_CUR) != 0) {
    rc = nto_err_set(err, NTO_EIO, "%s: byte offset %" PRIu64 ": %s",
                     ds->raw_path, (uint64_t)ds->pos * raw_record(ds),
                     strerror(errno));
  }
  if (rc == 0)
    ds->pos++;
  return rc;
}

/*
 * Take up to want samples of the current epoch: into rows of x and y, or,
 * with x NULL, skip them (nto_dataset_seek). Skipping does everything
 * taking does except writing the rows (the shuffle generator draws, the
 * buffer is refilled from the stream), so the samples after a skip are
 * the ones that would have followed. *k: samples taken.
 */
static int take(nto_dataset *ds, float *x, float *y, size_t want, size_t *k,
                nto_err *err) {
  size_t feat = ds->feat, nc = (size_t)ds->num_classes;
  size_t end = epoch_size(ds);
  int rc = 0;
  *k = 0;
  if (ds->cap <= 1) {
    while (*k < want && ds->pos < end) {
      rc = x ? src_read(ds, x + *k * feat, y + *k * nc, err)
             : src_skip(ds, err);
      if (rc)
        break;
      (*k)++;
    }
  } else {
    size_t slot = slot_bytes(ds);
    while (!ds->primed && ds->fill < ds->cap && ds->pos < end) {
      if ((rc = slot_fill(ds, ds->buf + ds->fill * slot, err)))
        break;
      ds->fill++;
    }
    if (rc == 0)
      ds->primed = 1;
    while (rc == 0 && *k < want && ds->fill > 0) {
      size_t j = nto_rng_below(&ds->rng, (uint32_t)ds->fill);
      if (x)
        rc = slot_emit(ds, ds->buf + j * slot, x + *k * feat, y + *k * nc,
                       err);
      if (rc)
        break;
      (*k)++;
      if (ds->pos < end) {
        rc = slot_fill(ds, ds->buf + j * slot, err);
      } else {
        size_t last = ds->fill - 1;
        if (j != last)
          memcpy(ds->buf + j * slot, ds->buf + last * slot, slot);
        ds->fill--;
      }
    }
  }
  ds->taken += *k;
  return rc;
}

int nto_dataset_next(nto_dataset *ds, float *x, float *y, int batch, int *got,
                     nto_err *err) {
  if (got)
    *got = 0;
  if (ds == NULL || x == NULL || y == NULL || got == NULL || batch < 1)
    return nto_err_set(err, NTO_EINVAL, "dataset: invalid next() arguments");
  size_t feat = ds->feat, nc = (size_t)ds->num_classes;
  int rc = 0;
  if (!ds->started)
    rc = nto_dataset_rewind(ds, err);
  size_t k = 0;
  if (rc == 0)
    rc = take(ds, x, y, (size_t)batch, &k, err);
  if (rc)
    k = 0;
  memset(x + k * feat, 0, ((size_t)batch - k) * feat * sizeof *x);
  memset(y + k * nc, 0, ((size_t)batch - k) * nc * sizeof *y);
  *got = (int)k;
  return rc;
}

/* What fixes the source's samples: kind, count, shape, classes, and for
 * synthetic data its seed (FNV-1a over the values). */
static uint64_t source_id(const nto_dataset *ds) {
  uint64_t v[6] = {(uint64_t)ds->kind, (uint64_t)ds->count,
                   (uint64_t)ds->feat, (uint64_t)ds->num_classes,
                   ds->kind == SRC_SYNTH ? ds->synth_seed : 0,
                   ds->kind == SRC_IDX ? (uint64_t)ds->rows << 32 | (uint64_t)ds->cols
                                       : 0};
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 6; i++)
    for (int b = 0; b < 8; b++) {
      h ^= (v[i] >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

/* The shuffle buffer an epoch uses (0: file order). */
static uint64_t shuffle_cap(const nto_dataset *ds) {
  size_t cap = ds->shuf_req;
  if (cap > epoch_size(ds))
    cap = epoch_size(ds);
  if (cap > UINT32_MAX)
    cap = UINT32_MAX;
  return cap > 1 ? cap : 0;
}

void nto_dataset_tell(const nto_dataset *ds, nto_dataset_pos *p) {
  memset(p, 0, sizeof *p);
  p->epoch = ds->started ? ds->epoch : 0;
  p->taken = ds->started ? ds->taken : 0;
  p->rng[0] = ds->rng.s[0];
  p->rng[1] = ds->rng.s[1];
  p->size = epoch_size(ds);
  p->shuffle = shuffle_cap(ds);
  p->seed = ds->shuf_seed;
  p->source = source_id(ds);
}

int nto_dataset_seek(nto_dataset *ds, const nto_dataset_pos *p, nto_err *err) {
  uint64_t cap = shuffle_cap(ds);
  if (p->source != source_id(ds))
    return nto_err_set(err, NTO_ECONFIG,
                       "data position: the training data differs from the "
                       "one it was taken on (%s)",
                       ds->desc);
  if (p->size != epoch_size(ds))
    return nto_err_set(err, NTO_ECONFIG,
                       "data position: it was taken on epochs of %" PRIu64
                       " samples, this dataset has %zu",
                       p->size, epoch_size(ds));
  if (p->shuffle != cap)
    return nto_err_set(err, NTO_ECONFIG,
                       "data position: it was taken with a shuffle buffer of "
                       "%" PRIu64 " samples, this dataset has %" PRIu64
                       " (0: file order)",
                       p->shuffle, cap);
  if (cap && p->seed != ds->shuf_seed)
    return nto_err_set(err, NTO_ECONFIG,
                       "data position: it was taken with shuffle seed %" PRIu64
                       ", this dataset has %" PRIu64,
                       p->seed, ds->shuf_seed);
  if (p->taken > epoch_size(ds))
    return nto_err_set(err, NTO_EDATA,
                       "data position: %" PRIu64
                       " samples taken from an epoch of %zu",
                       p->taken, epoch_size(ds));
  if (p->epoch == 0) { /* not started: the next read starts epoch 1 */
    ds->epoch = 0;
    ds->started = 0;
    return 0;
  }
  ds->epoch = p->epoch - 1; /* the rewind reseeds with seed + epoch - 1 */
  int rc = nto_dataset_rewind(ds, err);
  size_t k = 0;
  if (rc == 0)
    rc = take(ds, NULL, NULL, (size_t)p->taken, &k, err);
  if (rc == 0 && k != p->taken)
    rc = nto_err_set(err, NTO_EDATA,
                     "data position: only %zu of %" PRIu64
                     " samples could be skipped",
                     k, p->taken);
  if (rc == 0 && cap && (ds->rng.s[0] != p->rng[0] || ds->rng.s[1] != p->rng[1]))
    rc = nto_err_set(err, NTO_EDATA,
                     "data position: the shuffle generator does not reach "
                     "the recorded state after %" PRIu64
                     " samples of epoch %" PRIu64,
                     p->taken, p->epoch);
  return rc;
}

const char *nto_dataset_describe(const nto_dataset *ds) { return ds->desc; }

void nto_dataset_close(nto_dataset *ds) {
  if (ds == NULL)
    return;
  if (ds->img)
    gzclose(ds->img);
  if (ds->lbl)
    gzclose(ds->lbl);
  if (ds->raw)
    fclose(ds->raw);
  free(ds->img_path);
  free(ds->lbl_path);
  free(ds->raw_path);
  free(ds->pix);
  free(ds->proj);
  free(ds->buf);
  free(ds);
}
