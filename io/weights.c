/*
 * weights.c - nntrainer .bin and safetensors weight files. See weights.h.
 *
 * DESIGN
 * Saving goes through the atomic save of io/fileio.h with the temp file
 * "<path>.tmp.<pid>": on any failure the temp file is removed and an
 * existing <path> is untouched.
 *
 * Loading a safetensors file reads the 8-byte header length, then the JSON
 * header only (at most SAFETENSORS_MAX_HEADER bytes), and parses it with the
 * strict reader of io/json.h (RFC 8259 syntax, UTF-8 checked, string
 * escapes decoded): tensor names and the keys of an entry given twice are
 * refused, unknown keys of an entry skipped. Every tensor entry is
 * validated against the file (offsets inside the data section, byte size
 * matching dtype and shape, entries contiguous and covering the data section
 * as the reference implementation requires) before any data is read; then
 * each requested tensor is read with pread. F32 data is little-endian on
 * disk and converted on big-endian hosts.
 *
 * Tensors that are not in RAM (data NULL, see weights.h) go through one
 * bounce buffer of the tensor's size at a time: saving fetches into it and
 * writes it (values_for_write); loading reads into it and stores it
 * (read_tensor). A callback's error is returned as is, with the path and
 * tensor name prefixed to its message; for a save that happens inside
 * the atomic save's writer, so the temp file is removed like on a write
 * error.
 */
#include "weights.h"

#include "fileio.h"
#include "json.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAFETENSORS_MAX_HEADER (100u << 20) /* same cap as the reference */
#define SAFETENSORS_MAX_DEPTH 66 /* the header, a tensor entry, 64 in it */
#define ST_MAX_DIMS 16

size_t nto_named_numel(const nto_named_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim && i < 4; i++)
    n *= t->dims[i] > 0 ? (size_t)t->dims[i] : 0;
  return n;
}

/* Check one tensor description for saving (saving = 1) or loading. */
static int check_tensor(const nto_named_tensor *t, int i, int saving,
                        nto_err *err) {
  if (t->name == NULL || t->name[0] == '\0')
    return nto_err_set(err, NTO_EINVAL, "weights: tensor %d has no name", i);
  if (t->ndim < 1 || t->ndim > 4)
    return nto_err_set(err, NTO_EINVAL, "weights: %s: rank %d not in 1..4",
                       t->name, t->ndim);
  for (int d = 0; d < t->ndim; d++)
    if (t->dims[d] < 0)
      return nto_err_set(err, NTO_EINVAL, "weights: %s: negative dimension",
                         t->name);
  if (t->data == NULL && nto_named_numel(t) > 0 &&
      (saving ? t->fetch == NULL : t->store == NULL))
    return nto_err_set(err, NTO_EINVAL, "weights: %s: NULL data and no %s",
                       t->name, saving ? "fetch callback" : "store callback");
  return 0;
}

/* The arguments of a save (saving = 1) or a load of ts[0..n) at path,
 * each tensor checked by check_tensor. what ("weights", "safetensors")
 * starts the message of bad arguments. Returns 0 or NTO_EINVAL. */
static int check_args(const char *path, const nto_named_tensor *ts, int n,
                      int saving, const char *what, nto_err *err) {
  if (path == NULL || n < 0 || (n > 0 && ts == NULL))
    return nto_err_set(err, NTO_EINVAL, "%s: invalid arguments", what);
  for (int i = 0; i < n; i++) {
    int rc = check_tensor(&ts[i], i, saving, err);
    if (rc)
      return rc;
  }
  return 0;
}

/* The temp file suffix of a save, ".tmp.<pid>", in buf. */
static const char *tmp_suffix(char *buf, size_t len) {
  snprintf(buf, len, ".tmp.%ld", (long)getpid());
  return buf;
}

/*
 * The return of a fetch or store callback (what) of t that failed with rc:
 * rc, with "<path>: tensor "<name>": <what>: " prefixed to the callback's
 * message (or a message of its own if the callback left none). A positive
 * rc breaks the callback contract: NTO_EINVAL.
 */
static int callback_error(int rc, const char *what, const nto_named_tensor *t,
                          const char *path, nto_err *err) {
  if (rc > 0)
    return nto_err_set(err, NTO_EINVAL,
                       "%s: tensor \"%s\": %s returned %d, not 0 or a "
                       "negative nto_status",
                       path, t->name, what, rc);
  if (err && err->code != rc)
    return nto_err_set(err, rc, "%s: tensor \"%s\": %s failed: %s", path,
                       t->name, what, nto_strerror(rc));
  nto_err_prefix(err, rc, "%s: tensor \"%s\": %s: ", path, t->name, what);
  return rc;
}

static int bounce_alloc(float **out, size_t count, const nto_named_tensor *t,
                        const char *path, nto_err *err) {
  *out = malloc(count * sizeof **out);
  if (*out == NULL)
    return nto_err_set(err, NTO_ENOMEM,
                       "%s: tensor \"%s\": out of memory for a %zu-byte "
                       "bounce buffer",
                       path, t->name, count * sizeof **out);
  return 0;
}

/*
 * The values of t to write: *vals = t->data, or, when data is NULL, a new
 * bounce buffer *bounce (malloc'ed, product(dims) floats, freed by the
 * caller) filled by t->fetch. *bounce is NULL when none was needed.
 * Returns 0, NTO_ENOMEM or the fetch's error (see callback_error).
 */
static int values_for_write(const nto_named_tensor *t, const char *path,
                            const float **vals, float **bounce, nto_err *err) {
  size_t count = nto_named_numel(t);
  *vals = t->data;
  *bounce = NULL;
  if (t->data != NULL || count == 0)
    return 0;
  float *b;
  int rc = bounce_alloc(&b, count, t, path, err);
  if (rc)
    return rc;
  nto_err_clear(err);
  rc = t->fetch(t->ctx, t->index, b, err);
  if (rc) {
    free(b);
    return callback_error(rc, "fetch", t, path, err);
  }
  *vals = b;
  *bounce = b;
  return 0;
}

static void shape_str(const int64_t *dims, int ndim, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  o += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, i ? ", " : "",
                          dims[i]);
  if (o < len)
    snprintf(buf + o, len - o, "]");
}

/* --------------------------------------------------------- nntrainer .bin */

typedef struct {
  const char *path;
  const nto_named_tensor *ts;
  int n;
} bin_ctx;

static int bin_write(nto_file_out *f, const void *vctx, nto_err *err) {
  const bin_ctx *c = vctx;
  for (int i = 0; i < c->n; i++) {
    const float *vals;
    float *bounce;
    int rc = values_for_write(&c->ts[i], c->path, &vals, &bounce, err);
    if (rc == 0)
      rc = nto_file_put(f, vals, nto_named_numel(&c->ts[i]) * 4, err);
    free(bounce);
    if (rc)
      return rc;
  }
  return 0;
}

int nto_weights_save_bin(const char *path, const nto_named_tensor *ts, int n,
                         nto_err *err) {
  char suffix[32];
  int rc = check_args(path, ts, n, 1, "weights", err);
  if (rc)
    return rc;
  bin_ctx c = {path, ts, n};
  return nto_file_save(path, tmp_suffix(suffix, sizeof suffix), bin_write, &c,
                       err);
}

/*
 * Read t's product(dims) floats at byte offset off of fd into t->data, or,
 * when data is NULL, into a bounce buffer handed to t->store. le: the file
 * is little-endian (else native). Returns 0, NTO_ENOMEM, the codes of
 * nto_file_pread_full, or the store's error (see callback_error).
 */
static int read_tensor(int fd, uint64_t off, const nto_named_tensor *t, int le,
                       const char *path, nto_err *err) {
  size_t count = nto_named_numel(t);
  if (count == 0)
    return 0;
  float *dst = t->data, *bounce = NULL;
  int rc = 0;
  if (dst == NULL && (rc = bounce_alloc(&bounce, count, t, path, err)))
    return rc;
  if (bounce)
    dst = bounce;
  rc = nto_file_pread_full(fd, dst, count * 4, off, path, err);
  if (rc == 0 && le)
    nto_file_le32(dst, count);
  if (rc == 0 && bounce) {
    nto_err_clear(err);
    rc = t->store(t->ctx, t->index, bounce, err);
    if (rc)
      rc = callback_error(rc, "store", t, path, err);
  }
  free(bounce);
  return rc;
}

/* Is [w, size) of the .bin file fd what nntrainer appends after the
 * weights in training mode? Its NeuralNetwork::save writes: filler bytes
 * '1' up to a 4096-byte boundary (newer versions), then with Adam "adam"
 * and Adam's two moments of every parameter (2 x param_bytes), then the
 * epoch and iteration counters (4 bytes each); each part may be absent.
 * *ok: 1 if so. Returns 0 or a read error. */
static int bin_trailer(int fd, uint64_t w, uint64_t size, uint64_t param_bytes,
                       const char *path, int *ok, nto_err *err) {
  unsigned char b[4096];
  uint64_t pos = w, pad_end = (w + 4095) / 4096 * 4096;
  *ok = size == w;
  if (*ok)
    return 0;
  int rc = nto_file_pread_full(fd, b, 1, pos, path, err);
  if (rc == 0 && b[0] == '1' && pad_end <= size) {
    size_t len = (size_t)(pad_end - pos);
    rc = nto_file_pread_full(fd, b, len, pos, path, err);
    for (size_t i = 0; rc == 0 && i < len; i++)
      if (b[i] != '1')
        return 0;
    pos = pad_end;
  }
  uint64_t rest = size - pos, adam = 4 + 2 * param_bytes;
  if (rc != 0 || (rest != 0 && rest != 8 && rest != adam && rest != adam + 8))
    return rc;
  if (rest >= adam) {
    if ((rc = nto_file_pread_full(fd, b, 4, pos, path, err)) != 0)
      return rc;
    *ok = !memcmp(b, "adam", 4);
    return 0;
  }
  *ok = 1;
  return 0;
}

int nto_weights_load_bin(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err) {
  int rc = check_args(path, ts, n, 0, "weights", err), ok = 0;
  if (rc)
    return rc;
  uint64_t expect = 0, params = 0;
  for (int i = 0; i < n; i++) {
    expect += (uint64_t)nto_named_numel(&ts[i]) * 4;
    params += ts[i].param ? (uint64_t)nto_named_numel(&ts[i]) * 4 : 0;
  }
  int fd;
  uint64_t size;
  rc = nto_file_open_read(path, &fd, &size, err);
  if (rc)
    return rc;
  if (size >= expect)
    rc = bin_trailer(fd, expect, size, params, path, &ok, err);
  if (rc == 0 && !ok) {
    close(fd);
    return nto_err_set(err, NTO_EDATA,
                       "%s: size %" PRIu64 " bytes, expected %" PRIu64
                       " bytes for %d tensors (or that plus nntrainer's "
                       "training-mode trailer)",
                       path, size, expect, n);
  }
  uint64_t off = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    rc = read_tensor(fd, off, &ts[i], 0, path, err);
    off += (uint64_t)nto_named_numel(&ts[i]) * 4;
  }
  close(fd);
  return rc;
}

/* ---------------------------------------------------- JSON string output */

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt_u64(sbuf *b, uint64_t v) {
  char t[24];
  int n = snprintf(t, sizeof t, "%" PRIu64, v);
  sb_add(b, t, (size_t)n);
}

/* Append s as a JSON string literal. Returns -1 if s is not valid UTF-8. */
static int sb_json_str(sbuf *b, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  size_t n = strlen(s);
  sb_add(b, "\"", 1);
  for (size_t i = 0; i < n;) {
    unsigned char c = u[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      sb_add(b, esc, 2);
      i++;
    } else if (c < 0x20) {
      const char *named = c == '\n'   ? "\\n"
                          : c == '\t' ? "\\t"
                          : c == '\r' ? "\\r"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
      if (named)
        sb_str(b, named);
      else {
        snprintf(esc, sizeof esc, "\\u%04x", c);
        sb_str(b, esc);
      }
      i++;
    } else {
      size_t l = nto_json_utf8_len(u + i, n - i);
      if (l == 0)
        return -1;
      sb_add(b, s + i, l);
      i += l;
    }
  }
  sb_add(b, "\"", 1);
  return 0;
}

/* ------------------------------------------------------- safetensors save */

typedef struct {
  const char *path;
  const nto_named_tensor *ts;
  int n;
  const char *header; /* padded JSON */
  uint64_t header_len;
} st_ctx;

static int st_write(nto_file_out *f, const void *vctx, nto_err *err) {
  const st_ctx *c = vctx;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++)
    len8[i] = (unsigned char)(c->header_len >> (8 * i));
  int rc = nto_file_put(f, len8, 8, err);
  if (rc == 0)
    rc = nto_file_put(f, c->header, c->header_len, err);
  float chunk[1024];
  int le = nto_file_host_le();
  for (int i = 0; i < c->n && rc == 0; i++) {
    size_t total = nto_named_numel(&c->ts[i]);
    const float *vals;
    float *bounce;
    rc = values_for_write(&c->ts[i], c->path, &vals, &bounce, err);
    if (rc == 0 && le)
      rc = nto_file_put(f, vals, total * 4, err);
    for (size_t o = 0; rc == 0 && !le && o < total; o += 1024) {
      size_t m = total - o < 1024 ? total - o : 1024;
      memcpy(chunk, vals + o, m * 4);
      nto_file_le32(chunk, m);
      rc = nto_file_put(f, chunk, m * 4, err);
    }
    free(bounce);
  }
  return rc;
}

int nto_safetensors_save(const char *path, const nto_named_tensor *ts, int n,
                         const char *const *meta, nto_err *err) {
  int rc = check_args(path, ts, n, 1, "safetensors", err);
  if (rc)
    return rc;
  for (int i = 0; i < n; i++) {
    if (strcmp(ts[i].name, "__metadata__") == 0)
      return nto_err_set(err, NTO_EINVAL,
                         "safetensors: %s: reserved tensor name", path);
    for (int j = 0; j < i; j++)
      if (strcmp(ts[i].name, ts[j].name) == 0)
        return nto_err_set(err, NTO_EINVAL,
                           "safetensors: %s: duplicate tensor name \"%s\"",
                           path, ts[i].name);
  }
  sbuf b = {0};
  int bad = 0;
  sb_str(&b, "{");
  int first = 1;
  if (meta && meta[0]) {
    sb_str(&b, "\"__metadata__\":{");
    for (size_t k = 0; meta[k]; k += 2) {
      if (meta[k + 1] == NULL) {
        free(b.p);
        return nto_err_set(err, NTO_EINVAL,
                           "safetensors: metadata key \"%s\" has no value",
                           meta[k]);
      }
      if (k)
        sb_str(&b, ",");
      bad |= sb_json_str(&b, meta[k]);
      sb_str(&b, ":");
      bad |= sb_json_str(&b, meta[k + 1]);
    }
    sb_str(&b, "}");
    first = 0;
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (!first)
      sb_str(&b, ",");
    first = 0;
    bad |= sb_json_str(&b, ts[i].name);
    sb_str(&b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < ts[i].ndim; d++) {
      if (d)
        sb_str(&b, ",");
      sb_fmt_u64(&b, (uint64_t)ts[i].dims[d]);
    }
    sb_str(&b, "],\"data_offsets\":[");
    sb_fmt_u64(&b, off);
    off += (uint64_t)nto_named_numel(&ts[i]) * 4;
    sb_str(&b, ",");
    sb_fmt_u64(&b, off);
    sb_str(&b, "]}");
  }
  sb_str(&b, "}");
  while (!b.oom && b.len % 8 != 0)
    sb_str(&b, " ");
  if (b.oom) {
    free(b.p);
    return nto_err_set(err, NTO_ENOMEM, "safetensors: out of memory");
  }
  if (bad) {
    free(b.p);
    return nto_err_set(err, NTO_EINVAL,
                       "safetensors: %s: a tensor name or metadata string is "
                       "not valid UTF-8",
                       path);
  }
  st_ctx c = {path, ts, n, b.p, b.len};
  char suffix[32];
  rc =
      nto_file_save(path, tmp_suffix(suffix, sizeof suffix), st_write, &c, err);
  free(b.p);
  return rc;
}

/* ----------------------------------------------------- JSON header parse */

/* One tensor entry of the header. */
typedef struct {
  char *name;
  char dtype[16];
  int ndim; /* ST_MAX_DIMS + 1: too many to store */
  int64_t dims[ST_MAX_DIMS];
  uint64_t begin, end;
  int have_dtype, have_shape, have_offsets;
} st_entry;

/* The entries of a header. */
typedef struct {
  st_entry *e;
  int n, cap;
  const char *meta_key; /* NULL, or the metadata value to keep: */
  char *meta_value;     /* malloc'ed, NULL when absent */
} st_list;

/* "__metadata__": an object of string values; the one of l->meta_key
 * kept. */
static int st_metadata(nto_json *j, st_list *l) {
  int more, rc = nto_json_object(j, 0);
  char *key = NULL;
  while (rc == 0 && (rc = nto_json_key(j, &key, &more)) == 0 && more) {
    int keep = l->meta_key && !l->meta_value && !strcmp(key, l->meta_key);
    free(key);
    key = NULL;
    rc = nto_json_peek(j) == NTO_JSON_STRING
             ? nto_json_string(j, keep ? &l->meta_value : NULL)
             : nto_json_fail(j, "metadata values must be strings");
  }
  return rc;
}

/* An array of non-negative integers into vals[0..maxn); *n: its length,
 * maxn + 1 when it is longer. */
static int st_uints(nto_json *j, int64_t *vals, int maxn, int *n) {
  int more, rc = nto_json_array(j);
  *n = 0;
  while (rc == 0 && (rc = nto_json_next(j, &more)) == 0 && more) {
    uint64_t v = 0;
    if ((rc = nto_json_uint(j, &v)))
      break;
    if (*n < maxn)
      vals[*n] = (int64_t)v;
    if (*n <= maxn)
      (*n)++;
  }
  return rc;
}

/* The value of the member key of a tensor entry, into e. */
static int st_field(nto_json *j, const char *key, st_entry *e) {
  int rc;
  if (strcmp(key, "dtype") == 0) {
    char *dt = NULL;
    if (e->have_dtype)
      return nto_json_fail(j, "duplicate key");
    if ((rc = nto_json_string(j, &dt)) == 0)
      snprintf(e->dtype, sizeof e->dtype, "%s", dt);
    free(dt);
    e->have_dtype = 1;
    return rc;
  }
  if (strcmp(key, "shape") == 0) {
    if (e->have_shape)
      return nto_json_fail(j, "duplicate key");
    e->have_shape = 1;
    return st_uints(j, e->dims, ST_MAX_DIMS, &e->ndim);
  }
  if (strcmp(key, "data_offsets") != 0)
    return nto_json_skip(j); /* unknown key: tolerated, like the reference */
  int64_t o[2] = {0, 0};
  int n = 0;
  if (e->have_offsets)
    return nto_json_fail(j, "duplicate key");
  if ((rc = st_uints(j, o, 2, &n)) == 0 && n != 2)
    rc = nto_json_fail(j, "data_offsets must have 2 elements");
  e->begin = (uint64_t)o[0];
  e->end = (uint64_t)o[1];
  e->have_offsets = 1;
  return rc;
}

/* A tensor entry {"dtype":..., "shape":[...], "data_offsets":[b, e]}. */
static int st_tensor(nto_json *j, st_entry *e) {
  int more, members = 0, rc = nto_json_object(j, 0);
  char *key;
  while (rc == 0 && (rc = nto_json_key(j, &key, &more)) == 0 && more) {
    members++;
    rc = st_field(j, key, e);
    free(key);
  }
  if (rc == 0 && members == 0)
    return nto_json_fail(j, "empty tensor entry");
  if (rc == 0 && (!e->have_dtype || !e->have_shape || !e->have_offsets))
    return nto_json_fail(j, "tensor entry lacks dtype, shape or data_offsets");
  return rc;
}

static void free_entries(st_entry *e, int n) {
  for (int i = 0; i < n; i++)
    free(e[i].name);
  free(e);
}

/* A new entry named name (taken over: freed on failure) in l, parsed. */
static int st_add(nto_json *j, st_list *l, char *name, nto_err *err) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    st_entry *e = realloc(l->e, (size_t)cap * sizeof *e);
    if (e == NULL) {
      free(name);
      return nto_err_set(err, NTO_ENOMEM, "safetensors: out of memory");
    }
    l->e = e;
    l->cap = cap;
  }
  st_entry *e = &l->e[l->n++];
  memset(e, 0, sizeof *e);
  e->name = name;
  return st_tensor(j, e);
}

/* The whole header into l: tensor names and "__metadata__" given once. */
static int st_header(nto_json *j, st_list *l, nto_err *err) {
  int more, rc = nto_json_object(j, NTO_JSON_UNIQUE);
  char *key;
  while (rc == 0 && (rc = nto_json_key(j, &key, &more)) == 0 && more) {
    if (strcmp(key, "__metadata__") == 0) {
      free(key);
      rc = st_metadata(j, l);
    } else {
      rc = st_add(j, l, key, err);
    }
  }
  if (rc == 0 && !nto_json_eof(j))
    rc = nto_json_fail(j, "trailing characters after the header object");
  return rc;
}

static size_t dtype_size(const char *dt) {
  static const struct {
    const char *name;
    size_t size;
  } t[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
           {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
           {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(t[i].name, dt) == 0)
      return t[i].size;
  return 0;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a;
  const st_entry *y = *(const st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Check every entry against the data section of data_len bytes. */
static int st_validate(const char *path, st_entry *e, int n, uint64_t data_len,
                       nto_err *err) {
  for (int i = 0; i < n; i++) {
    if (e[i].ndim > ST_MAX_DIMS)
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\": more than %d dimensions", path,
                         e[i].name, ST_MAX_DIMS);
    if (e[i].begin > e[i].end || e[i].end > data_len)
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\": data_offsets [%" PRIu64
                         ", %" PRIu64 "] outside the data section of %" PRIu64
                         " bytes",
                         path, e[i].name, e[i].begin, e[i].end, data_len);
    size_t es = dtype_size(e[i].dtype);
    if (es == 0)
      continue; /* unknown dtype: only an error if requested */
    uint64_t bytes = es;
    for (int d = 0; d < e[i].ndim; d++) {
      uint64_t dim = (uint64_t)e[i].dims[d];
      if (dim && bytes > UINT64_MAX / dim)
        return nto_err_set(err, NTO_EDATA, "%s: tensor \"%s\": shape too large",
                           path, e[i].name);
      bytes *= dim;
    }
    if (bytes != e[i].end - e[i].begin)
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\": %" PRIu64
                         " data bytes, its dtype and shape need %" PRIu64,
                         path, e[i].name, e[i].end - e[i].begin, bytes);
  }
  if (n <= 0) {
    if (data_len != 0)
      return nto_err_set(err, NTO_EDATA,
                         "%s: %" PRIu64 " data bytes but no tensors", path,
                         data_len);
    return 0;
  }
  const st_entry **order = malloc((size_t)n * sizeof *order);
  if (order == NULL)
    return nto_err_set(err, NTO_ENOMEM, "safetensors: out of memory");
  for (int i = 0; i < n; i++)
    order[i] = &e[i];
  qsort(order, (size_t)n, sizeof *order, cmp_begin);
  uint64_t at = 0;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (order[i]->begin != at)
      rc = nto_err_set(err, NTO_EDATA,
                       "%s: tensor \"%s\": data_offsets begin at %" PRIu64
                       ", expected %" PRIu64 " (tensors must be contiguous)",
                       path, order[i]->name, order[i]->begin, at);
    at = order[i]->end;
  }
  if (rc == 0 && at != data_len)
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: tensors cover %" PRIu64
                     " bytes of a data section of %" PRIu64 " bytes",
                     path, at, data_len);
  free(order);
  return rc;
}

/*
 * Read the header of the safetensors file fd (size bytes) into l and the
 * data section's start into *data_start. Returns 0, NTO_EDATA (too short,
 * a bad header length, a malformed header: "malformed safetensors header
 * at byte N: what"), NTO_ENOMEM or a read error.
 */
static int st_read_header(int fd, uint64_t size, const char *path, st_list *l,
                          uint64_t *data_start, nto_err *err) {
  unsigned char len8[8];
  if (size < 8)
    return nto_err_set(err, NTO_EDATA,
                       "%s: %" PRIu64 " bytes, too short for safetensors", path,
                       size);
  int rc = nto_file_pread_full(fd, len8, 8, 0, path, err);
  if (rc)
    return rc;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | len8[i];
  if (hlen > size - 8 || hlen > SAFETENSORS_MAX_HEADER || hlen < 2)
    return nto_err_set(err, NTO_EDATA,
                       "%s: safetensors header length %" PRIu64
                       " invalid for a file of %" PRIu64 " bytes",
                       path, hlen, size);
  char *hdr = malloc((size_t)hlen);
  if (hdr == NULL)
    return nto_err_set(err, NTO_ENOMEM, "safetensors: out of memory");
  rc = nto_file_pread_full(fd, hdr, (size_t)hlen, 8, path, err);
  if (rc == 0) {
    nto_json j;
    nto_json_init(&j, hdr, (size_t)hlen, 8, SAFETENSORS_MAX_DEPTH, err);
    rc = st_header(&j, l, err);
    uint64_t at;
    const char *what = nto_json_error(&j, &at);
    if (rc == NTO_EDATA && what)
      nto_err_set(err, rc,
                  "%s: malformed safetensors header at byte %" PRIu64 ": %s",
                  path, at, what);
    nto_json_free(&j);
  }
  free(hdr);
  *data_start = 8 + hlen;
  return rc;
}

/* The entry of l named name (names are unique: st_header), or NULL. */
static const st_entry *st_find(const st_list *l, const char *name) {
  for (int k = 0; k < l->n; k++)
    if (strcmp(l->e[k].name, name) == 0)
      return &l->e[k];
  return NULL;
}

/* The entry of l for each of ts[0..n) into found[], checking dtype (F32)
 * and shape. Returns 0 or NTO_EDATA naming path and the tensor. */
static int st_match(const st_list *l, const nto_named_tensor *ts, int n,
                    const st_entry **found, const char *path, nto_err *err) {
  for (int i = 0; i < n; i++) {
    const st_entry *e = st_find(l, ts[i].name);
    found[i] = e;
    int64_t want[4];
    for (int d = 0; d < ts[i].ndim; d++)
      want[d] = ts[i].dims[d];
    if (e == NULL)
      return nto_err_set(err, NTO_EDATA, "%s: no tensor named \"%s\"", path,
                         ts[i].name);
    if (strcmp(e->dtype, "F32") != 0)
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\" has dtype %s, expected F32", path,
                         ts[i].name, e->dtype);
    if (e->ndim != ts[i].ndim ||
        memcmp(e->dims, want, (size_t)e->ndim * sizeof *want) != 0) {
      char ws[96], fs[96];
      shape_str(e->dims, e->ndim, fs, sizeof fs);
      shape_str(want, ts[i].ndim, ws, sizeof ws);
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\" has shape %s, expected %s", path,
                         ts[i].name, fs, ws);
    }
  }
  return 0;
}

/* Is the file fd (size bytes) safetensors by its first 9 bytes (a header
 * length up to SAFETENSORS_MAX_HEADER, then '{'; a length beyond the end
 * is a truncated safetensors file, for st_read_header to report)? 0 or 1
 * into *yes, or a read error. A .bin file would need two zero-ish floats
 * and then '{' as the low byte of its third. */
static int is_safetensors(int fd, uint64_t size, const char *path, int *yes,
                          nto_err *err) {
  unsigned char b[9];
  *yes = 0;
  if (size < 10)
    return 0;
  int rc = nto_file_pread_full(fd, b, 9, 0, path, err);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | b[i];
  *yes = rc == 0 && hlen >= 2 && hlen <= SAFETENSORS_MAX_HEADER && b[8] == '{';
  return rc;
}

/* match[i] for each of ts[0..n) against the header l; found[i]: the entry
 * to load, or NULL. NTO_EDATA for a named tensor that is not F32. */
static int st_match_some(const st_list *l, const nto_named_tensor *ts, int n,
                         const st_entry **found, nto_weight_match *match,
                         int *unused, const char *path, nto_err *err) {
  int loaded = 0;
  *unused = l->n;
  for (int i = 0; i < n; i++) {
    const st_entry *e = st_find(l, ts[i].name);
    if (!e && ts[i].alt_name)
      e = st_find(l, ts[i].alt_name);
    memset(&match[i], 0, sizeof match[i]);
    found[i] = NULL;
    match[i].status = NTO_MATCH_ABSENT;
    if (!e)
      continue;
    (*unused)--;
    if (strcmp(e->dtype, "F32") != 0)
      return nto_err_set(err, NTO_EDATA,
                         "%s: tensor \"%s\" has dtype %s, expected F32", path,
                         ts[i].name, e->dtype);
    int same = e->ndim == ts[i].ndim;
    for (int d = 0; same && d < e->ndim; d++)
      same = e->dims[d] == ts[i].dims[d];
    match[i].status = same ? NTO_MATCH_LOADED : NTO_MATCH_SHAPE;
    match[i].ndim = e->ndim;
    for (int d = 0; d < e->ndim && d < 4; d++)
      match[i].dims[d] = e->dims[d];
    found[i] = same ? e : NULL;
    loaded += same;
  }
  if (loaded == 0)
    return nto_err_set(err, NTO_EDATA,
                       "%s: no tensor of the model is in the file with its "
                       "name and shape (the model's first: \"%s\"; the "
                       "file's first: \"%s\")",
                       path, n ? ts[0].name : "-", l->n ? l->e[0].name : "-");
  return 0;
}

/* Load ts[0..n) from the safetensors file fd (size bytes) at path: every
 * one (match NULL: st_match), or those whose name and shape match (match
 * and unused as nto_weights_load_init: st_match_some). Every tensor is
 * matched before any data is read. */
static int st_load(int fd, uint64_t size, const char *path,
                   nto_named_tensor *ts, int n, nto_weight_match *match,
                   int *unused, nto_err *err) {
  st_list l = {0};
  uint64_t data_start = 0;
  const st_entry **found = NULL;
  int rc = st_read_header(fd, size, path, &l, &data_start, err);
  if (rc == 0)
    rc = st_validate(path, l.e, l.n, size - data_start, err);
  if (rc == 0 && !(found = malloc((size_t)(n ? n : 1) * sizeof *found)))
    rc = nto_err_set(err, NTO_ENOMEM, "safetensors: out of memory");
  if (rc == 0)
    rc = match ? st_match_some(&l, ts, n, found, match, unused, path, err)
               : st_match(&l, ts, n, found, path, err);
  for (int i = 0; i < n && rc == 0; i++)
    if (found[i])
      rc = read_tensor(fd, data_start + found[i]->begin, &ts[i], 1, path, err);
  free(found);
  free_entries(l.e, l.n);
  return rc;
}

int nto_weights_load_init(const char *path, nto_named_tensor *ts, int n,
                          nto_weight_match *match, nto_weights_format *format,
                          int *unused, nto_err *err) {
  int rc = check_args(path, ts, n, 0, "weights", err), fd, st = 0;
  uint64_t size;
  if (rc || (rc = nto_file_open_read(path, &fd, &size, err)))
    return rc;
  rc = is_safetensors(fd, size, path, &st, err);
  *unused = 0;
  *format = st ? NTO_WEIGHTS_SAFETENSORS : NTO_WEIGHTS_BIN;
  if (rc == 0 && st)
    rc = st_load(fd, size, path, ts, n, match, unused, err);
  close(fd);
  if (rc != 0 || st)
    return rc;
  for (int i = 0; i < n; i++)
    memset(&match[i], 0, sizeof match[i]); /* NTO_MATCH_LOADED */
  rc = nto_weights_load_bin(path, ts, n, err);
  if (rc == NTO_EDATA) { /* say why it was read as .bin */
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    nto_err_set(err, rc, "%s (read as nntrainer .bin: no safetensors header)",
                msg);
  }
  return rc;
}

int nto_weights_file_format(const char *path, nto_weights_format *format,
                            nto_err *err) {
  int fd, yes = 0;
  uint64_t size;
  int rc = nto_file_open_read(path, &fd, &size, err);
  if (rc)
    return rc;
  rc = is_safetensors(fd, size, path, &yes, err);
  close(fd);
  *format = yes ? NTO_WEIGHTS_SAFETENSORS : NTO_WEIGHTS_BIN;
  return rc;
}

int nto_weights_metadata(const char *path, const char *key, char **value,
                         nto_err *err) {
  int fd, yes = 0;
  uint64_t size, data_start;
  *value = NULL;
  int rc = nto_file_open_read(path, &fd, &size, err);
  if (rc)
    return rc;
  rc = is_safetensors(fd, size, path, &yes, err);
  st_list l = {.meta_key = key};
  if (rc == 0 && yes)
    rc = st_read_header(fd, size, path, &l, &data_start, err);
  close(fd);
  free_entries(l.e, l.n);
  if (rc == 0)
    *value = l.meta_value;
  else
    free(l.meta_value);
  return rc;
}

int nto_safetensors_load(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err) {
  int rc = check_args(path, ts, n, 0, "safetensors", err);
  if (rc)
    return rc;
  int fd;
  uint64_t size;
  rc = nto_file_open_read(path, &fd, &size, err);
  if (rc)
    return rc;
  rc = st_load(fd, size, path, ts, n, NULL, NULL, err);
  close(fd);
  return rc;
}
