/*
 * idx.c - the IDX data source (Fashion-MNIST, MNIST): an images file
 * (idx3, u8) and a labels file (idx1, u8), gzip or plain, read with zlib.
 * A stream source (io/dataset-impl.h). See dataset.h for the public
 * openers.
 *
 * DESIGN
 * Both files are streamed with gzread, which handles gzip and plain files
 * alike; an epoch rewinds both streams and re-checks their headers. A slot
 * holds one sample as it is on disk, the image's rows*cols bytes and the
 * label byte (785 bytes for Fashion-MNIST); it is adapted to the model
 * input (scaled to [0, 1], zero-padded centred to (h, w), the channel
 * replicated to c, the label one-hot) when it is copied into a batch.
 *
 * Labels are small (one byte per sample): they are validated in full at
 * open time (range, truncation) but still streamed during epochs. A plain
 * images file that is too short is refused at open (from its size); a
 * truncated or corrupt gzip images file can only be noticed while
 * decompressing, so nto_dataset_next reports it, with the byte offset.
 */
#include "dataset-impl.h"

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

/* One of the two files. */
typedef struct idx_file {
  const char *path;
  gzFile f;
  int fd; /* f's descriptor (owned by f): for posix_fadvise */
  unsigned char hdr[IDX_IMAGES_HEADER]; /* its header as read at open */
} idx_file;

typedef struct idx_src {
  idx_file img, lbl;
  int rows, cols;
  char name[160]; /* "fashion-mnist train", or the images file's name */
  char paths[];   /* img.path and lbl.path point here */
} idx_src;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

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

/* For a plain (not gzip) file, check it holds at least need bytes. */
static int check_plain_size(const idx_file *x, uint64_t need, nto_err *err) {
  if (!gzdirect(x->f))
    return 0;
  struct stat st;
  if (stat(x->path, &st) != 0)
    return nto_err_set(err, NTO_EIO, "%s: %s", x->path, strerror(errno));
  if ((uint64_t)st.st_size < need)
    return nto_err_set(err, NTO_EDATA,
                       "%s: truncated at byte offset %" PRIu64
                       ": the header announces %" PRIu64 " bytes",
                       x->path, (uint64_t)st.st_size, need);
  return 0;
}

/* Open x (its path set) and read its header of n bytes, which must start
 * with magic (what: its description for the message). The file must be
 * regular (nto_file_open_read): a FIFO would block gzopen until a writer
 * came, and a directory would read as a truncated header. */
static int idx_open_file(idx_file *x, size_t n, uint32_t magic,
                         const char *what, nto_err *err) {
  int fd;
  uint64_t size;
  int rc = nto_file_open_read(x->path, &fd, &size, err);
  if (rc)
    return rc;
  errno = 0;
  x->fd = fd;
  x->f = gzdopen(fd, "rb");
  if (x->f == NULL) {
    int e = errno;
    close(fd);
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", x->path,
                       e ? strerror(e) : "out of memory");
  }
  gzbuffer(x->f, 128 * 1024);
  rc = gz_read_full(x->f, x->hdr, n, x->path, 0, "IDX header", err);
  if (rc)
    return rc;
  if (be32(x->hdr) != magic)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 0: magic 0x%08" PRIx32
                       ", expected 0x%08x (%s)",
                       x->path, be32(x->hdr), magic, what);
  return 0;
}

/* Open the images file: count, rows and cols from its header. */
static int idx_images(nto_dataset *ds, idx_src *s, nto_err *err) {
  int rc = idx_open_file(&s->img, IDX_IMAGES_HEADER, IDX_MAGIC_IMAGES,
                         "IDX images, 3 dims of u8", err);
  if (rc)
    return rc;
  const unsigned char *h = s->img.hdr;
  uint32_t count = be32(h + 4), rows = be32(h + 8), cols = be32(h + 12);
  if (count == 0 || rows == 0 || cols == 0 || rows > 65535 || cols > 65535)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 4: invalid dimensions %" PRIu32
                       " x %" PRIu32 " x %" PRIu32,
                       s->img.path, count, rows, cols);
  ds->count = count;
  s->rows = (int)rows;
  s->cols = (int)cols;
  return check_plain_size(
      &s->img, IDX_IMAGES_HEADER + (uint64_t)count * rows * cols, err);
}

/* Open the labels file: as many labels as images, each < num_classes. */
static int idx_labels(nto_dataset *ds, idx_src *s, nto_err *err) {
  int rc = idx_open_file(&s->lbl, IDX_LABELS_HEADER, IDX_MAGIC_LABELS,
                         "IDX labels, 1 dim of u8", err);
  if (rc)
    return rc;
  uint32_t n = be32(s->lbl.hdr + 4);
  if ((rc = check_plain_size(&s->lbl, IDX_LABELS_HEADER + (uint64_t)n, err)))
    return rc;
  if (n != ds->count)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 4: %" PRIu32 " labels, but %s has %zu "
                       "images",
                       s->lbl.path, n, s->img.path, ds->count);
  return 0;
}

/* Stream through all labels once: range and truncation checks. */
static int idx_validate_labels(const nto_dataset *ds, const idx_src *s,
                               nto_err *err) {
  unsigned char buf[4096];
  size_t done = 0;
  while (done < ds->count) {
    size_t n = ds->count - done < sizeof buf ? ds->count - done : sizeof buf;
    int rc = gz_read_full(s->lbl.f, buf, n, s->lbl.path,
                          IDX_LABELS_HEADER + (uint64_t)done, "labels", err);
    if (rc)
      return rc;
    for (size_t i = 0; i < n; i++)
      if (buf[i] >= ds->num_classes)
        return nto_err_set(
            err, NTO_EDATA,
            "%s: byte offset %" PRIu64 ": label %d out of range [0, %d)",
            s->lbl.path, IDX_LABELS_HEADER + (uint64_t)(done + i), (int)buf[i],
            ds->num_classes);
    done += n;
  }
  return 0;
}

/* Rewind x and check that its header (n bytes) did not change. */
static int idx_rewind_file(idx_file *x, size_t n, nto_err *err) {
  unsigned char h[IDX_IMAGES_HEADER];
  if (gzrewind(x->f) != 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot rewind", x->path);
  int rc = gz_read_full(x->f, h, n, x->path, 0, "IDX header", err);
  if (rc == 0 && memcmp(h, x->hdr, n) != 0)
    rc = nto_err_set(err, NTO_EDATA, "%s: byte offset 0: header changed",
                     x->path);
  return rc;
}

static int idx_rewind(nto_dataset *ds, nto_err *err) {
  idx_src *s = ds->src;
  int rc = idx_rewind_file(&s->img, IDX_IMAGES_HEADER, err);
  return rc ? rc : idx_rewind_file(&s->lbl, IDX_LABELS_HEADER, err);
}

/* Every label, from the labels file alone (nto_dataset_keep_classes); the
 * next rewind starts both streams again. */
static int idx_labels_all(nto_dataset *ds, int32_t *out, nto_err *err) {
  idx_src *s = ds->src;
  int rc = idx_rewind_file(&s->lbl, IDX_LABELS_HEADER, err);
  unsigned char buf[4096];
  for (size_t done = 0; rc == 0 && done < ds->count;) {
    size_t n = ds->count - done < sizeof buf ? ds->count - done : sizeof buf;
    rc = gz_read_full(s->lbl.f, buf, n, s->lbl.path,
                      IDX_LABELS_HEADER + (uint64_t)done, "labels", err);
    for (size_t i = 0; rc == 0 && i < n; i++)
      out[done + i] = buf[i];
    done += n;
  }
  return rc;
}

static size_t idx_slot_bytes(const nto_dataset *ds) {
  const idx_src *s = ds->src;
  return (size_t)s->rows * (size_t)s->cols + 1;
}

/*
 * Read sample ds->pos of the streams into slot p: its raw image (rows*cols
 * bytes), then its label, checked to be < num_classes.
 */
static int idx_fetch(nto_dataset *ds, unsigned char *p, nto_err *err) {
  idx_src *s = ds->src;
  size_t npix = (size_t)s->rows * (size_t)s->cols;
  int rc =
      gz_read_full(s->img.f, p, npix, s->img.path,
                   IDX_IMAGES_HEADER + (uint64_t)ds->pos * npix, "image", err);
  if (rc)
    return rc;
  rc = gz_read_full(s->lbl.f, p + npix, 1, s->lbl.path,
                    IDX_LABELS_HEADER + (uint64_t)ds->pos, "label", err);
  if (rc)
    return rc;
  /* Every 1024 samples, the kernel may drop the pages already read: the
   * data streams through once per epoch, and a page cache grown by it
   * counts against a cgroup's memory limit like the process's own. */
  if ((ds->pos & 1023) == 1023) {
    posix_fadvise(s->img.fd, 0, 0, POSIX_FADV_DONTNEED);
    posix_fadvise(s->lbl.fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  if (p[npix] >= ds->num_classes)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64
                       ": label %d out of range [0, %d)",
                       s->lbl.path, IDX_LABELS_HEADER + (uint64_t)ds->pos,
                       (int)p[npix], ds->num_classes);
  return 0;
}

/*
 * Adapt the sample of slot p (image (rows, cols), then the label) to the
 * model input: x (c, h, w) gets the image scaled to [0, 1], padded centred
 * with zeros and replicated over channels; y (num_classes) the one-hot of
 * the label.
 */
static void idx_adapt(const nto_dataset *ds, const unsigned char *p, float *x,
                      float *y) {
  const idx_src *s = ds->src;
  size_t rows = (size_t)s->rows, cols = (size_t)s->cols;
  size_t h = (size_t)ds->sample.h, w = (size_t)ds->sample.w;
  size_t top = (h - rows) / 2, left = (w - cols) / 2;
  size_t plane = h * w;
  memset(x, 0, plane * sizeof *x);
  for (size_t r = 0; r < rows; r++) {
    const unsigned char *src = p + r * cols;
    float *dst = x + (top + r) * w + left;
    for (size_t c = 0; c < cols; c++)
      dst[c] = (float)src[c] / 255.0f;
  }
  for (int ch = 1; ch < ds->sample.c; ch++)
    memcpy(x + (size_t)ch * plane, x, plane * sizeof *x);
  memset(y, 0, (size_t)ds->num_classes * sizeof *y);
  y[p[rows * cols]] = 1.0f;
}

static void idx_describe(const nto_dataset *ds, const char *count, char *buf,
                         size_t len) {
  const idx_src *s = ds->src;
  nto_shape sh = ds->sample;
  char pad[64] = "", rep[64] = "";
  if (s->rows != sh.h || s->cols != sh.w)
    snprintf(pad, sizeof pad, " zero-padded to %dx%d", sh.h, sh.w);
  if (sh.c != 1)
    snprintf(rep, sizeof rep, ", channel replicated to %d", sh.c);
  snprintf(buf, len, "%s: %s, 1x%dx%d%s%s%s", s->name, count, s->rows, s->cols,
           pad, rep, pad[0] || rep[0] ? "" : " (no adaptation)");
}

static void idx_close(void *src) {
  idx_src *s = src;
  if (s->img.f)
    gzclose(s->img.f);
  if (s->lbl.f)
    gzclose(s->lbl.f);
  free(s);
}

/* A source state for the two files (not opened yet), or NULL. */
static idx_src *idx_new(const char *images, const char *labels) {
  size_t ni = strlen(images) + 1, nl = strlen(labels) + 1;
  idx_src *s = calloc(1, sizeof *s + ni + nl);
  if (s) {
    s->img.path = memcpy(s->paths, images, ni);
    s->lbl.path = memcpy(s->paths + ni, labels, nl);
  }
  return s;
}

/* Open the pair; name: the dataset's name, NULL for the images file's. */
static int open_idx_named(nto_dataset **out, const char *images,
                          const char *labels, nto_shape sample, int num_classes,
                          const char *name, nto_err *err) {
  int rc = nto_dataset_new(out, &nto_dataset_idx_ops, sample, num_classes, err);
  if (rc)
    return rc;
  nto_dataset *ds = *out;
  idx_src *s = NULL;
  if (images == NULL || labels == NULL) {
    rc = nto_err_set(err, NTO_EINVAL, "dataset: NULL IDX file name");
  } else if (!(s = ds->src = idx_new(images, labels))) {
    rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  } else if (!(rc = idx_images(ds, s, err)) && !(rc = idx_labels(ds, s, err)) &&
             (s->rows > sample.h || s->cols > sample.w)) {
    rc = nto_err_set(err, NTO_ESHAPE,
                     "%s: images are %dx%d, larger than the model input "
                     "%dx%dx%d",
                     images, s->rows, s->cols, sample.c, sample.h, sample.w);
  }
  if (rc == 0 && (rc = idx_validate_labels(ds, s, err)) == 0) {
    if (name)
      snprintf(s->name, sizeof s->name, "%s", name);
    else
      nto_dataset_base_name(images, s->name, sizeof s->name);
    ds->id[1] = (uint64_t)s->rows << 32 | (uint64_t)s->cols;
  }
  return nto_dataset_finish(out, rc, err);
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
  nto_dataset_base_name(dir, base, sizeof base);
  snprintf(name, sizeof name, "%s %s", base, split);
  return open_idx_named(out, images, labels, sample, num_classes, name, err);
}

const nto_dataset_ops nto_dataset_idx_ops = {
    .kind = 0,
    .slot_bytes = idx_slot_bytes,
    .fetch = idx_fetch,
    .adapt = idx_adapt,
    .labels = idx_labels_all,
    .rewind = idx_rewind,
    .describe = idx_describe,
    .close = idx_close,
};
