/*
 * checkpoint.c - training checkpoints. See checkpoint.h for the format.
 *
 * DESIGN
 * The checkpoint knows no model: the caller describes the state
 * (nto_ckpt_state), tensors reached in RAM or through fetch/store
 * callbacks. Saving streams the file through the atomic save of
 * io/fileio.h into FILE.tmp.<pid>: the header, then one record per
 * persistent tensor (a tensor without data, e.g. an offloading model's,
 * is fetched one at a time into a bounce buffer of its size), the values,
 * the trailer.
 * Every record carries its own CRC-32 and the trailer one over the whole
 * file, computed while writing. Then fsync, rename over FILE, fsync of the
 * directory.
 *
 * Loading reads the file twice. The first pass streams it whole through a
 * 64 KiB buffer: it parses the structure, checks every length against the
 * file size, every record's CRC and the whole file's, and keeps only the
 * directory (names, shapes, data offsets) and the values; a corrupt or
 * truncated file is refused here, with the byte offset and, for a record
 * that fails its CRC, the tensor's name. Then the directory is compared
 * with the state's tensors (names and shapes, the optimizer, the update
 * chunk, the batch size), and the data position is restored. Only then
 * does the second pass read each tensor's data with pread (again checking
 * its CRC) into the tensor's data, or into a bounce buffer handed to its
 * store. A file that changes between the passes can still fail in the
 * second pass, after some tensors were restored; the caller then discards
 * the model. The update count and the generator come back in the state
 * for the caller to apply.
 */
#include "checkpoint.h"

#include "fileio.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "NTO-CKPT"
#define END_MAGIC "NTO-END\n"
#define HDR_FIXED 56u /* header bytes before the model path */
#define OPT_NAME 16u  /* optimizer name field */
#define MAX_MODEL_PATH 4096u
#define MAX_NAME 1024u /* tensor name length */
#define MAX_TENSORS (1u << 20)
#define MAX_VALUES 4096u
#define VALUE_BYTES (NTO_CKPT_VALUE_NAME + 8u)
#define TRAILER_BYTES 20u
#define IO_CHUNK (1u << 16)
#define LIB_VALUES 12 /* model.* and data.* values */

/* ---------------------------------------------------------------- helpers */

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}

static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uLong crc_update(uLong crc, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n > 0) {
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, b, k);
    b += k;
    n -= k;
  }
  return crc;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* Fingerprint of the tensors a model has (checkpoint.h). dims: 4 per
 * tensor. */
static uint64_t fingerprint(const char *opt, uint64_t chunk,
                            const char *const *names, const uint32_t *dims,
                            int n) {
  unsigned char b[16];
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv(h, opt, strlen(opt) + 1);
  put64(b, chunk);
  h = fnv(h, b, 8);
  for (int i = 0; i < n; i++) {
    h = fnv(h, names[i], strlen(names[i]) + 1);
    for (int k = 0; k < 4; k++)
      put32(b + 4 * k, dims[4 * i + k]);
    h = fnv(h, b, 16);
  }
  return h;
}

/* The 4 dims of a named tensor as stored: ndim < 4 padded with leading 1s. */
static void dims4(const nto_named_tensor *t, uint32_t d[4]) {
  int nd = t->ndim >= 1 && t->ndim <= 4 ? t->ndim : 4;
  for (int k = 0; k < 4; k++)
    d[k] = 1;
  for (int k = 0; k < nd; k++)
    d[4 - nd + k] = (uint32_t)t->dims[k];
}

static void shape_str(const uint32_t d[4], char *buf, size_t len) {
  snprintf(buf, len, "%" PRIu32 ":%" PRIu32 ":%" PRIu32 ":%" PRIu32, d[0], d[1],
           d[2], d[3]);
}

uint64_t nto_ckpt_get(const nto_ckpt_value *v, int n, const char *name,
                      uint64_t def) {
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i].name, name))
      return v[i].v;
  return def;
}

void nto_ckpt_set(nto_ckpt_value *v, const char *name, uint64_t value) {
  memset(v->name, 0, sizeof v->name);
  snprintf(v->name, sizeof v->name, "%s", name);
  v->v = value;
}

static int has_value(const nto_ckpt_value *v, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i].name, name))
      return 1;
  return 0;
}

static int reserved(const char *name) {
  return !strncmp(name, "model.", 6) || !strncmp(name, "data.", 5);
}

/* Fingerprint of a state's tensors, optimizer and update chunk. */
static int state_fingerprint(const nto_ckpt_state *s, uint64_t *out,
                             nto_err *err) {
  const nto_named_tensor *ts = s->tensors;
  int n = s->n_tensors;
  const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
  uint32_t *dims = malloc((size_t)(n ? n : 1) * 4 * sizeof *dims);
  if (!names || !dims) {
    free(names);
    free(dims);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    names[i] = ts[i].name;
    dims4(&ts[i], dims + 4 * i);
  }
  *out = fingerprint(s->optimizer, s->update_chunk, names, dims, n);
  free(names);
  free(dims);
  return 0;
}

/* ---------------------------------------------------------------- writing */

typedef struct writer {
  nto_file_out *f;
  const char *path;
  uLong crc; /* whole file */
  uLong rec; /* current record or section */
  uint64_t off;
} writer;

static int w_put(writer *w, const void *p, size_t n, nto_err *err) {
  int rc = nto_file_put(w->f, p, n, err);
  if (rc)
    return rc;
  w->crc = crc_update(w->crc, p, n);
  w->rec = crc_update(w->rec, p, n);
  w->off += n;
  return 0;
}

static int w_u32(writer *w, uint32_t v, nto_err *err) {
  unsigned char b[4];
  put32(b, v);
  return w_put(w, b, 4, err);
}

/* The CRC of the current record, then a new record. */
static int w_end_record(writer *w, nto_err *err) {
  uint32_t c = (uint32_t)w->rec;
  int rc = w_u32(w, c, err);
  w->rec = crc32(0L, Z_NULL, 0);
  return rc;
}

/* Float data (native) as little-endian. */
static int w_floats(writer *w, const float *p, size_t n, nto_err *err) {
  if (nto_file_host_le())
    return w_put(w, p, n * sizeof *p, err);
  float buf[IO_CHUNK / sizeof(float)];
  while (n > 0) {
    size_t k = n < IO_CHUNK / sizeof(float) ? n : IO_CHUNK / sizeof(float);
    memcpy(buf, p, k * sizeof *p);
    nto_file_le32(buf, k);
    int rc = w_put(w, buf, k * sizeof *p, err);
    if (rc)
      return rc;
    p += k;
    n -= k;
  }
  return 0;
}

static int write_header(writer *w, const char *model_path, const char *opt,
                        uint64_t chunk, uint64_t fp, int n_t, int n_v,
                        nto_err *err) {
  size_t mlen = model_path ? strlen(model_path) : 0;
  if (mlen > MAX_MODEL_PATH)
    mlen = MAX_MODEL_PATH;
  unsigned char h[HDR_FIXED];
  memset(h, 0, sizeof h);
  memcpy(h, MAGIC, 8);
  put32(h + 8, NTO_CKPT_FORMAT_VERSION);
  put32(h + 12, (uint32_t)n_t);
  put32(h + 16, (uint32_t)n_v);
  put32(h + 20, (uint32_t)mlen);
  put64(h + 24, fp);
  put64(h + 32, chunk);
  snprintf((char *)h + 40, OPT_NAME, "%s", opt);
  int rc = w_put(w, h, sizeof h, err);
  if (rc == 0)
    rc = w_put(w, model_path, mlen, err);
  return rc ? rc : w_end_record(w, err);
}

static int write_tensor(writer *w, const nto_named_tensor *t, nto_err *err) {
  uint32_t d[4];
  dims4(t, d);
  uint64_t numel = nto_named_numel(t);
  size_t nlen = strlen(t->name);
  unsigned char b[8];
  if (nlen == 0 || nlen > MAX_NAME)
    return nto_err_set(err, NTO_EINVAL, "%s: tensor name '%s' too long",
                       w->path, t->name);
  int rc = w_u32(w, (uint32_t)nlen, err);
  if (rc == 0)
    rc = w_put(w, t->name, nlen, err);
  if (rc == 0)
    rc = w_u32(w, 4, err);
  for (int k = 0; rc == 0 && k < 4; k++)
    rc = w_u32(w, d[k], err);
  put64(b, numel);
  if (rc == 0)
    rc = w_put(w, b, 8, err);
  if (rc)
    return rc;
  if (t->data) {
    rc = w_floats(w, t->data, (size_t)numel, err);
  } else if (numel > 0) {
    if (!t->fetch)
      return nto_err_set(err, NTO_EINVAL, "%s: tensor %s has no data", w->path,
                         t->name);
    float *bounce = malloc((size_t)numel * sizeof *bounce);
    if (!bounce)
      return nto_err_set(err, NTO_ENOMEM,
                         "%s: out of memory for tensor %s (%" PRIu64 " bytes)",
                         w->path, t->name, numel * 4);
    rc = t->fetch(t->ctx, t->index, bounce, err);
    if (rc)
      nto_err_prefix(err, rc, "%s: tensor %s: ", w->path, t->name);
    else
      rc = w_floats(w, bounce, (size_t)numel, err);
    free(bounce);
  }
  return rc ? rc : w_end_record(w, err);
}

static int write_values(writer *w, const nto_ckpt_value *v, int n,
                        nto_err *err) {
  for (int i = 0; i < n; i++) {
    unsigned char b[VALUE_BYTES];
    memset(b, 0, sizeof b);
    memcpy(b, v[i].name, strnlen(v[i].name, NTO_CKPT_VALUE_NAME - 1));
    put64(b + NTO_CKPT_VALUE_NAME, v[i].v);
    int rc = w_put(w, b, sizeof b, err);
    if (rc)
      return rc;
  }
  return w_end_record(w, err);
}

static int write_trailer(writer *w, nto_err *err) {
  unsigned char b[16];
  memcpy(b, END_MAGIC, 8);
  put64(b + 8, w->off + TRAILER_BYTES);
  int rc = w_put(w, b, 16, err);
  if (rc)
    return rc;
  uint32_t c = (uint32_t)w->crc;
  return w_u32(w, c, err);
}

/* What a save writes (nto_checkpoint_save). */
typedef struct ckpt_content {
  const char *path, *model_path, *opt;
  uint64_t chunk, fp;
  const nto_named_tensor *ts;
  int n_t;
  const nto_ckpt_value *v;
  int n_v;
} ckpt_content;

/* The whole file, through the atomic save's writer. */
static int write_file(nto_file_out *f, const void *vctx, nto_err *err) {
  const ckpt_content *c = vctx;
  writer w = {.f = f, .path = c->path};
  w.crc = w.rec = crc32(0L, Z_NULL, 0);
  int rc = write_header(&w, c->model_path, c->opt, c->chunk, c->fp, c->n_t,
                        c->n_v, err);
  for (int i = 0; rc == 0 && i < c->n_t; i++)
    rc = write_tensor(&w, &c->ts[i], err);
  if (rc == 0)
    rc = write_values(&w, c->v, c->n_v, err);
  return rc ? rc : write_trailer(&w, err);
}

/* The library's values (model.*, data.*) into v; returns their count. */
static int lib_values(const nto_ckpt_state *s, const nto_dataset *data,
                      nto_ckpt_value *v) {
  int n = 0;
  nto_ckpt_set(&v[n++], "model.iteration", (uint64_t)s->iteration);
  nto_ckpt_set(&v[n++], "model.rng0", s->rng[0]);
  nto_ckpt_set(&v[n++], "model.rng1", s->rng[1]);
  nto_ckpt_set(&v[n++], "model.batch", (uint64_t)s->batch);
  if (data) {
    nto_dataset_pos p;
    nto_dataset_tell(data, &p);
    nto_ckpt_set(&v[n++], "data.epoch", p.epoch);
    nto_ckpt_set(&v[n++], "data.taken", p.taken);
    nto_ckpt_set(&v[n++], "data.rng0", p.rng[0]);
    nto_ckpt_set(&v[n++], "data.rng1", p.rng[1]);
    nto_ckpt_set(&v[n++], "data.size", p.size);
    nto_ckpt_set(&v[n++], "data.shuffle", p.shuffle);
    nto_ckpt_set(&v[n++], "data.seed", p.seed);
    nto_ckpt_set(&v[n++], "data.source", p.source);
  }
  return n;
}

int nto_checkpoint_save(const char *path, const char *model_path,
                        const nto_ckpt_state *s, const nto_dataset *data,
                        const nto_ckpt_value *vals, int n_vals, nto_err *err) {
  if (!path || !path[0] || !s || !s->optimizer || s->n_tensors < 0 ||
      (s->n_tensors && !s->tensors) || n_vals < 0 || (n_vals && !vals) ||
      n_vals > (int)MAX_VALUES - LIB_VALUES)
    return nto_err_set(err, NTO_EINVAL, "checkpoint: invalid arguments");
  for (int i = 0; i < n_vals; i++)
    if (!vals[i].name[0] ||
        strnlen(vals[i].name, NTO_CKPT_VALUE_NAME) >= NTO_CKPT_VALUE_NAME ||
        reserved(vals[i].name))
      return nto_err_set(err, NTO_EINVAL,
                         "checkpoint: invalid value name '%.*s'",
                         NTO_CKPT_VALUE_NAME, vals[i].name);
  nto_ckpt_value *all = malloc((size_t)(LIB_VALUES + n_vals) * sizeof *all);
  if (!all)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int n_all = lib_values(s, data, all);
  if (n_vals)
    memcpy(all + n_all, vals, (size_t)n_vals * sizeof *vals);
  n_all += n_vals;
  uint64_t fp = 0;
  int rc = state_fingerprint(s, &fp, err);
  if (rc == 0) {
    ckpt_content c = {.path = path,
                      .model_path = model_path,
                      .opt = s->optimizer,
                      .chunk = s->update_chunk,
                      .fp = fp,
                      .ts = s->tensors,
                      .n_t = s->n_tensors,
                      .v = all,
                      .n_v = n_all};
    char suffix[32]; /* ".tmp.<pid>": two runs never share a temp file */
    rc = nto_file_save(path, nto_file_tmp_suffix(suffix, sizeof suffix),
                       write_file, &c, err);
  }
  free(all);
  return rc;
}

/* ---------------------------------------------------------------- reading */

typedef struct entry {
  char *name;
  uint32_t dims[4];
  uint64_t numel;
  uint64_t rec_off, data_off; /* record and its data */
  uLong prefix_crc;           /* CRC of the record up to its data */
  uint32_t crc;               /* the record's stored CRC */
} entry;

typedef struct ckpt {
  const char *path;
  FILE *f;
  uint64_t size;
  uint32_t n_t, n_v;
  uint64_t fp, chunk;
  char opt[OPT_NAME + 1];
  char *model;
  entry *t;
  nto_ckpt_value *v;
} ckpt;

typedef struct reader {
  ckpt *c;
  uint64_t off;
  uLong crc, rec;
} reader;

static void ckpt_close(ckpt *c) {
  if (c->f)
    fclose(c->f);
  if (c->t)
    for (uint32_t i = 0; i < c->n_t; i++)
      free(c->t[i].name);
  free(c->t);
  free(c->v);
  free(c->model);
}

/* Read n bytes (what: for messages) at the current offset. */
static int r_get(reader *r, void *p, size_t n, const char *what, nto_err *err) {
  ckpt *c = r->c;
  if (n > c->size - r->off)
    return nto_err_set(err, NTO_EDATA,
                       "%s: truncated at byte offset %" PRIu64
                       ": %s needs %zu bytes from byte offset %" PRIu64,
                       c->path, c->size, what, n, r->off);
  if (n && fread(p, 1, n, c->f) != n)
    return nto_err_set(err, NTO_EIO, "%s: byte offset %" PRIu64 ": %s", c->path,
                       r->off,
                       ferror(c->f) ? strerror(errno) : "unexpected end");
  r->crc = crc_update(r->crc, p, n);
  r->rec = crc_update(r->rec, p, n);
  r->off += n;
  return 0;
}

/* Read n bytes through the CRCs without keeping them. */
static int r_skip(reader *r, uint64_t n, nto_err *err) {
  unsigned char buf[IO_CHUNK];
  while (n > 0) {
    size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
    int rc = r_get(r, buf, k, "tensor data", err);
    if (rc)
      return rc;
    n -= k;
  }
  return 0;
}

/* The stored CRC of the record that started at rec_off; compares it with
 * the computed one. what: for the message. */
static int r_check(reader *r, uint64_t rec_off, const char *what,
                   uint32_t *stored, nto_err *err) {
  uint32_t want = (uint32_t)r->rec;
  unsigned char b[4];
  int rc = r_get(r, b, 4, "a checksum", err);
  if (rc)
    return rc;
  *stored = get32(b);
  r->rec = crc32(0L, Z_NULL, 0);
  if (*stored != want)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": %s (bytes %" PRIu64
                       "-%" PRIu64 ") fails its checksum: the file is corrupt",
                       r->c->path, rec_off, what, rec_off, r->off - 1);
  return 0;
}

static int read_header(reader *r, nto_err *err) {
  ckpt *c = r->c;
  unsigned char h[HDR_FIXED];
  int rc = r_get(r, h, sizeof h, "the header", err);
  if (rc)
    return rc;
  if (memcmp(h, MAGIC, 8) != 0)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 0: not a nntrainer-offload "
                       "checkpoint (no '%s' magic)",
                       c->path, MAGIC);
  uint32_t version = get32(h + 8);
  if (version != NTO_CKPT_FORMAT_VERSION)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 8: checkpoint format version %" PRIu32
                       ", this build reads version %d",
                       c->path, version, NTO_CKPT_FORMAT_VERSION);
  uint32_t mlen = get32(h + 20);
  if (mlen > MAX_MODEL_PATH)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 20: model path length %" PRIu32
                       " is invalid: the header is corrupt",
                       c->path, mlen);
  c->model = calloc(1, (size_t)mlen + 1);
  if (!c->model)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  rc = r_get(r, c->model, mlen, "the header", err);
  uint32_t stored;
  if (rc == 0)
    rc = r_check(r, 0, "the header", &stored, err);
  if (rc)
    return rc;
  c->n_t = get32(h + 12);
  c->n_v = get32(h + 16);
  c->fp = get64(h + 24);
  c->chunk = get64(h + 32);
  memcpy(c->opt, h + 40, OPT_NAME);
  c->opt[OPT_NAME] = '\0';
  if (c->n_t > MAX_TENSORS || c->n_v > MAX_VALUES)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset 12: %" PRIu32 " tensors and %" PRIu32
                       " values: more than a checkpoint can hold",
                       c->path, c->n_t, c->n_v);
  return 0;
}

static int read_tensor(reader *r, uint32_t i, nto_err *err) {
  ckpt *c = r->c;
  entry *e = &c->t[i];
  unsigned char b[8];
  e->rec_off = r->off;
  int rc = r_get(r, b, 4, "a tensor record", err);
  if (rc)
    return rc;
  uint32_t nlen = get32(b);
  if (nlen == 0 || nlen > MAX_NAME)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": tensor %" PRIu32
                       ": name length %" PRIu32 " is invalid: the file is "
                       "corrupt",
                       c->path, e->rec_off, i, nlen);
  if (!(e->name = calloc(1, (size_t)nlen + 1)))
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  char what[MAX_NAME + 32];
  snprintf(what, sizeof what, "tensor %" PRIu32, i);
  rc = r_get(r, e->name, nlen, what, err);
  if (rc)
    return rc;
  snprintf(what, sizeof what, "tensor %s", e->name);
  uint64_t at = r->off;
  rc = r_get(r, b, 4, what, err);
  if (rc == 0 && get32(b) != 4)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": %s: %" PRIu32
                       " dimensions, expected 4: the file is corrupt",
                       c->path, at, what, get32(b));
  uint64_t prod = 1;
  for (int k = 0; rc == 0 && k < 4; k++) {
    rc = r_get(r, b, 4, what, err);
    e->dims[k] = get32(b);
    prod *= e->dims[k];
  }
  at = r->off;
  if (rc == 0)
    rc = r_get(r, b, 8, what, err);
  if (rc)
    return rc;
  e->numel = get64(b);
  if (e->numel != prod || e->numel > (UINT64_MAX / 4))
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": %s: %" PRIu64
                       " elements do not match its shape: the file is corrupt",
                       c->path, at, what, e->numel);
  e->data_off = r->off;
  e->prefix_crc = r->rec;
  if (e->numel * 4 > c->size - r->off)
    return nto_err_set(err, NTO_EDATA,
                       "%s: truncated at byte offset %" PRIu64
                       ": %s needs %" PRIu64 " bytes of data from byte "
                       "offset %" PRIu64,
                       c->path, c->size, what, e->numel * 4, r->off);
  rc = r_skip(r, e->numel * 4, err);
  return rc ? rc : r_check(r, e->rec_off, what, &e->crc, err);
}

static int read_values(reader *r, nto_err *err) {
  ckpt *c = r->c;
  uint64_t start = r->off;
  c->v = calloc((size_t)(c->n_v ? c->n_v : 1), sizeof *c->v);
  if (!c->v)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < c->n_v; i++) {
    unsigned char b[VALUE_BYTES];
    uint64_t at = r->off;
    int rc = r_get(r, b, sizeof b, "the values", err);
    if (rc)
      return rc;
    if (!b[0] || memchr(b, 0, NTO_CKPT_VALUE_NAME) == NULL)
      return nto_err_set(err, NTO_EDATA,
                         "%s: byte offset %" PRIu64 ": value %" PRIu32
                         " has an invalid name: the file is corrupt",
                         c->path, at, i);
    memcpy(c->v[i].name, b, NTO_CKPT_VALUE_NAME);
    c->v[i].v = get64(b + NTO_CKPT_VALUE_NAME);
  }
  uint32_t stored;
  return r_check(r, start, "the values", &stored, err);
}

static int read_trailer(reader *r, nto_err *err) {
  ckpt *c = r->c;
  unsigned char b[16];
  uint64_t at = r->off;
  int rc = r_get(r, b, 16, "the end marker", err);
  if (rc)
    return rc;
  if (memcmp(b, END_MAGIC, 8) != 0)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64
                       ": no end marker where it belongs: the file is corrupt",
                       c->path, at);
  uint64_t size = get64(b + 8);
  uint32_t want = (uint32_t)r->crc;
  rc = r_get(r, b, 4, "the end marker", err);
  if (rc)
    return rc;
  if (get32(b) != want)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64
                       ": the file's checksum does not match: the file is "
                       "corrupt",
                       c->path, at + 16);
  if (size != c->size || r->off != c->size)
    return nto_err_set(err, NTO_EDATA,
                       "%s: byte offset %" PRIu64 ": the file has %" PRIu64
                       " bytes, its end marker says %" PRIu64
                       ": data after the end",
                       c->path, r->off, c->size, size);
  return 0;
}

/* Pass 1: open path and check all of it; keep the directory and values. */
static int ckpt_read(ckpt *c, const char *path, nto_err *err) {
  memset(c, 0, sizeof *c);
  c->path = path;
  int fd;
  int rc = nto_file_open_read(path, &fd, &c->size, err);
  if (rc)
    return nto_err_prefix(err, rc, "checkpoint ");
  if (!(c->f = fdopen(fd, "rb"))) {
    close(fd);
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", path);
  }
  reader r = {.c = c};
  r.crc = r.rec = crc32(0L, Z_NULL, 0);
  rc = read_header(&r, err);
  if (rc == 0 && !(c->t = calloc((size_t)(c->n_t ? c->n_t : 1), sizeof *c->t)))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (uint32_t i = 0; rc == 0 && i < c->n_t; i++)
    rc = read_tensor(&r, i, err);
  if (rc == 0)
    rc = read_values(&r, err);
  if (rc == 0)
    rc = read_trailer(&r, err);
  return rc;
}

/* Is the file for this state? NTO_ECONFIG naming the first difference. */
static int check_state(const ckpt *c, const nto_ckpt_state *s, nto_err *err) {
  const nto_named_tensor *ts = s->tensors;
  int n = s->n_tensors;
  char here[64], there[64];
  const char *opt = s->optimizer;
  char written[MAX_MODEL_PATH + 32] = "";
  if (c->model[0])
    snprintf(written, sizeof written, " (for %s)", c->model);
  if (strcmp(opt, c->opt) != 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "checkpoint %s was written for a different optimizer"
                       "%s: %s in the file, %s here",
                       c->path, written, c->opt, opt);
  if (s->update_chunk != c->chunk)
    return nto_err_set(err, NTO_ECONFIG,
                       "checkpoint %s was written with update chunks of "
                       "%" PRIu64 " bytes%s, this model uses %zu: its "
                       "optimizer state is split differently",
                       c->path, c->chunk, written, s->update_chunk);
  for (int i = 0; i < n; i++) {
    uint32_t d[4];
    dims4(&ts[i], d);
    const entry *e = NULL;
    if ((uint32_t)i < c->n_t && !strcmp(c->t[i].name, ts[i].name))
      e = &c->t[i];
    for (uint32_t k = 0; !e && k < c->n_t; k++)
      if (!strcmp(c->t[k].name, ts[i].name))
        e = &c->t[k];
    shape_str(d, here, sizeof here);
    if (!e)
      return nto_err_set(err, NTO_ECONFIG,
                         "checkpoint %s was written for a different model%s: "
                         "tensor %s (shape %s) of this model is not in the "
                         "file",
                         c->path, written, ts[i].name, here);
    if (memcmp(e->dims, d, sizeof d) != 0) {
      shape_str(e->dims, there, sizeof there);
      return nto_err_set(err, NTO_ECONFIG,
                         "checkpoint %s was written for a different model%s: "
                         "tensor %s has shape %s here, %s in the file",
                         c->path, written, ts[i].name, here, there);
    }
  }
  for (uint32_t k = 0; k < c->n_t; k++) {
    int found = 0;
    for (int i = 0; !found && i < n; i++)
      found = !strcmp(c->t[k].name, ts[i].name);
    if (!found) {
      shape_str(c->t[k].dims, there, sizeof there);
      return nto_err_set(err, NTO_ECONFIG,
                         "checkpoint %s was written for a different model%s: "
                         "the file has tensor %s (shape %s), which this model "
                         "does not have",
                         c->path, written, c->t[k].name, there);
    }
  }
  uint64_t fp;
  int rc = state_fingerprint(s, &fp, err);
  if (rc == 0 && (fp != c->fp || (uint32_t)n != c->n_t))
    return nto_err_set(err, NTO_ECONFIG,
                       "checkpoint %s was written for a different model%s: "
                       "the same tensors in another order (fingerprint "
                       "%016" PRIx64 " in the file, %016" PRIx64 " here)",
                       c->path, written, c->fp, fp);
  if (rc)
    return rc;
  uint64_t batch = nto_ckpt_get(c->v, (int)c->n_v, "model.batch", 0);
  if (batch != (uint64_t)s->batch)
    return nto_err_set(err, NTO_ECONFIG,
                       "checkpoint %s was written at batch size %" PRIu64
                       "%s, this run has batch size %d",
                       c->path, batch, written, s->batch);
  return 0;
}

/* Pass 2: the data of file entry e into tensor t (data, or store). */
static int load_tensor(const ckpt *c, const entry *e, const nto_named_tensor *t,
                       nto_err *err) {
  size_t bytes = (size_t)e->numel * 4;
  float *dst = t->data;
  float *bounce = NULL;
  if (!dst) {
    if (!t->store)
      return nto_err_set(err, NTO_EINVAL, "tensor %s cannot be stored",
                         t->name);
    if (!(dst = bounce = malloc(bytes ? bytes : 4)))
      return nto_err_set(err, NTO_ENOMEM,
                         "%s: out of memory for tensor %s (%zu bytes)", c->path,
                         t->name, bytes);
  }
  int rc =
      nto_file_pread_full(fileno(c->f), dst, bytes, e->data_off, c->path, err);
  if (rc == 0 && (uint32_t)crc_update(e->prefix_crc, dst, bytes) != e->crc)
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: byte offset %" PRIu64 ": tensor %s changed while "
                     "it was read: the file is corrupt",
                     c->path, e->rec_off, e->name);
  if (rc == 0)
    nto_file_le32(dst, (size_t)e->numel);
  if (rc == 0 && bounce && e->numel > 0) {
    rc = t->store(t->ctx, t->index, bounce, err);
    if (rc)
      nto_err_prefix(err, rc, "%s: tensor %s: ", c->path, t->name);
  }
  free(bounce);
  return rc;
}

static int need_value(const ckpt *c, const char *name, uint64_t *v,
                      nto_err *err) {
  if (!has_value(c->v, (int)c->n_v, name))
    return nto_err_set(err, NTO_EDATA,
                       "%s: the value %s is missing: not a complete "
                       "checkpoint",
                       c->path, name);
  *v = nto_ckpt_get(c->v, (int)c->n_v, name, 0);
  return 0;
}

/* Restore the data position recorded in c into data. */
static int restore_data(const ckpt *c, nto_dataset *data, nto_err *err) {
  static const char *const names[] = {
      "data.epoch", "data.taken",   "data.rng0", "data.rng1",
      "data.size",  "data.shuffle", "data.seed", "data.source"};
  uint64_t v[8];
  if (!has_value(c->v, (int)c->n_v, "data.epoch"))
    return nto_err_set(err, NTO_ECONFIG, "checkpoint %s holds no data position",
                       c->path);
  for (int i = 0; i < 8; i++) {
    int rc = need_value(c, names[i], &v[i], err);
    if (rc)
      return rc;
  }
  nto_dataset_pos p = {.epoch = v[0],
                       .taken = v[1],
                       .rng = {v[2], v[3]},
                       .size = v[4],
                       .shuffle = v[5],
                       .seed = v[6],
                       .source = v[7]};
  int rc = nto_dataset_seek(data, &p, err);
  if (rc)
    nto_err_prefix(err, rc, "checkpoint %s: ", c->path);
  return rc;
}

int nto_checkpoint_load(const char *path, nto_ckpt_state *s, nto_dataset *data,
                        nto_ckpt_value *vals, int max_vals, int *n_vals,
                        nto_err *err) {
  if (n_vals)
    *n_vals = 0;
  if (!path || !s || !s->optimizer || s->n_tensors < 0 ||
      (s->n_tensors && !s->tensors))
    return nto_err_set(err, NTO_EINVAL, "checkpoint: invalid arguments");
  ckpt c;
  int rc = ckpt_read(&c, path, err);
  if (rc == 0)
    rc = check_state(&c, s, err);
  uint64_t it = 0, rng[2] = {0, 0};
  if (rc == 0)
    rc = need_value(&c, "model.iteration", &it, err);
  if (rc == 0)
    rc = need_value(&c, "model.rng0", &rng[0], err);
  if (rc == 0)
    rc = need_value(&c, "model.rng1", &rng[1], err);
  if (rc == 0 && it > (uint64_t)LONG_MAX)
    rc = nto_err_set(err, NTO_EDATA, "%s: iteration %" PRIu64 " is invalid",
                     path, it);
  if (rc == 0 && data)
    rc = restore_data(&c, data, err);
  const nto_named_tensor *ts = s->tensors;
  for (int i = 0; rc == 0 && i < s->n_tensors; i++) {
    const entry *e = NULL;
    for (uint32_t k = (uint32_t)i; !e && k < c.n_t; k++)
      if (!strcmp(c.t[k].name, ts[i].name))
        e = &c.t[k];
    for (uint32_t k = 0; !e && k < c.n_t; k++)
      if (!strcmp(c.t[k].name, ts[i].name))
        e = &c.t[k];
    rc = load_tensor(&c, e, &ts[i], err);
  }
  if (rc == 0) {
    s->iteration = (long)it;
    s->rng[0] = rng[0];
    s->rng[1] = rng[1];
    int k = 0;
    for (uint32_t i = 0; i < c.n_v; i++)
      if (!reserved(c.v[i].name) && k < max_vals && vals)
        vals[k++] = c.v[i];
    if (n_vals)
      *n_vals = k;
  }
  ckpt_close(&c);
  return rc;
}
