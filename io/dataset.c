/*
 * dataset.c - streaming training data: what every source shares. See
 * dataset.h; the sources are io/idx.c, io/raw.c and io/synthetic.c
 * (io/dataset-impl.h).
 *
 * DESIGN
 * A dataset is a source (IDX pair, raw file, synthetic generator) that yields
 * samples in source order, one at a time, into caller-provided rows, plus an
 * optional shuffle buffer in front of it:
 *
 *   source --read one sample--> [shuffle buffer of B slots] --pick--> batch
 *
 * Only the shuffle buffer (B slots) and one slot of scratch live in RAM;
 * files are streamed (zlib gzread for IDX, which handles gzip and plain
 * files alike; pread for raw files). Each epoch (nto_dataset_rewind)
 * rewinds the source (IDX: the streams, with their headers re-checked).
 *
 * A slot holds a sample in its most compact form: for a stream source
 * (IDX) what it fetched, the raw image bytes and the label byte (rows*cols
 * + 1 bytes: 785 for Fashion-MNIST), adapted to the model input (scaled,
 * padded, replicated, one-hot) only when the slot is copied into a batch
 * (slot_emit); for random-access sources (raw, synthetic), whose samples
 * are floats (600 KiB for a 224x224 RGB image: 300 MiB for 512 slots),
 * only the sample's index, 8 bytes: the sample is read back with pread
 * (raw) or generated again (synthetic) when the slot is emitted. Reading
 * in file order goes through one scratch slot the same way, so batches do
 * not depend on whether a sample went through the buffer.
 *
 * Shuffling: the buffer is filled with the first B samples of the epoch;
 * every output takes a uniformly random occupied slot (nto_rng_below) and
 * the slot is refilled from the stream, or, once the stream is exhausted,
 * replaced by the last occupied slot. Every sample of the epoch therefore
 * comes out exactly once. The generator is reseeded at each rewind with
 * seed + epoch, where epoch counts rewinds since the last
 * nto_dataset_shuffle() call (or since open), so the order is a function of
 * (seed, epoch) only. B = 0 or 1 reads in file order.
 */
#include "dataset-impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- for the sources */

int nto_dataset_new(nto_dataset **out, const nto_dataset_ops *ops,
                    nto_shape sample, int num_classes, nto_err *err) {
  if (out == NULL)
    return nto_err_set(err, NTO_EINVAL, "dataset: NULL output pointer");
  *out = NULL;
  if (sample.c < 1 || sample.h < 1 || sample.w < 1)
    return nto_err_set(err, NTO_EINVAL, "dataset: invalid input shape %dx%dx%d",
                       sample.c, sample.h, sample.w);
  if (num_classes < 1)
    return nto_err_set(err, NTO_EINVAL, "dataset: invalid num_classes %d",
                       num_classes);
  nto_dataset *ds = calloc(1, sizeof *ds);
  if (ds == NULL)
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  ds->ops = ops;
  ds->sample = sample;
  ds->num_classes = ds->out_classes = num_classes;
  ds->feat = nto_shape_sample(sample);
  *out = ds;
  return 0;
}

void nto_dataset_base_name(const char *path, char *buf, size_t len) {
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

/* Samples the source yields: all, or those of the kept classes. */
static size_t avail(const nto_dataset *ds) {
  return ds->kept ? ds->n_kept : ds->count;
}

static size_t epoch_size(const nto_dataset *ds) {
  return ds->limit && ds->limit < avail(ds) ? ds->limit : avail(ds);
}

static void build_desc(nto_dataset *ds) {
  char count[192];
  int n;
  if (epoch_size(ds) < avail(ds))
    n = snprintf(count, sizeof count, "%zu of %zu samples", epoch_size(ds),
                 avail(ds));
  else
    n = snprintf(count, sizeof count, "%zu samples", avail(ds));
  if (ds->kept && n > 0 && (size_t)n < sizeof count)
    snprintf(count + n, sizeof count - (size_t)n, " (%s)", ds->classes_desc);
  ds->ops->describe(ds, count, ds->desc, sizeof ds->desc);
}

/* Bytes of one shuffle-buffer slot (see DESIGN). */
static size_t slot_bytes(const nto_dataset *ds) {
  return ds->ops->sample ? sizeof(uint64_t) : ds->ops->slot_bytes(ds);
}

int nto_dataset_finish(nto_dataset **out, int rc, nto_err *err) {
  nto_dataset *ds = *out;
  if (rc == 0 && !(ds->scratch = malloc(slot_bytes(ds))))
    rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  if (rc) {
    nto_dataset_close(ds);
    *out = NULL;
    return rc;
  }
  build_desc(ds);
  return 0;
}

/* ----------------------------------------------------------------- slots */

/* Read the next sample drawn (source index ds->pos, or with kept classes
 * the next kept one: a stream reads through the others) into slot s;
 * advance drawn and pos. */
static int slot_fill(nto_dataset *ds, unsigned char *s, nto_err *err) {
  uint64_t i = ds->kept ? ds->kept[ds->drawn] : ds->drawn;
  if (ds->ops->sample) { /* its index: read or generated when emitted */
    memcpy(s, &i, sizeof i);
    ds->pos = (size_t)i + 1;
  } else {
    for (; ds->pos <= i; ds->pos++) {
      int rc = ds->ops->fetch(ds, s, err);
      if (rc)
        return rc;
    }
  }
  ds->drawn++;
  return 0;
}

/* y (out_classes) from the source's row ds->ysrc: the kept label. */
static void relabel(const nto_dataset *ds, float *y) {
  memset(y, 0, (size_t)ds->out_classes * sizeof *y);
  int l = ds->remap[nto_argmax(ds->ysrc, ds->num_classes)];
  if (l >= 0) /* always: only kept samples are drawn */
    y[l] = 1.0f;
}

/* Write the sample held in slot s into a batch row x (c, h, w), y.
 * Returns 0, or the source's read error. */
static int slot_emit(const nto_dataset *ds, const unsigned char *s, float *x,
                     float *y, nto_err *err) {
  float *ys = ds->kept ? ds->ysrc : y;
  int rc = 0;
  if (!ds->ops->sample) {
    ds->ops->adapt(ds, s, x, ys);
  } else {
    uint64_t i;
    memcpy(&i, s, sizeof i);
    rc = ds->ops->sample(ds, i, x, ys, err);
  }
  if (rc == 0 && ds->kept)
    relabel(ds, y);
  return rc;
}

/* The next source sample in file order into x, y (x NULL: skipped, read
 * through on a stream); advances pos. */
static int src_next(nto_dataset *ds, float *x, float *y, nto_err *err) {
  int rc = slot_fill(ds, ds->scratch, err);
  return rc == 0 && x ? slot_emit(ds, ds->scratch, x, y, err) : rc;
}

/* Every source sample's label into lab[0..count): the stream's own scan,
 * or through sample() for random access. */
static int scan_labels(nto_dataset *ds, int32_t *lab, nto_err *err) {
  if (ds->ops->labels)
    return ds->ops->labels(ds, lab, err);
  float *x = malloc(ds->feat * sizeof *x);
  if (!x)
    return nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < ds->count; i++) {
    rc = ds->ops->sample(ds, i, x, ds->ysrc, err);
    lab[i] = nto_argmax(ds->ysrc, ds->num_classes);
  }
  free(x);
  return rc;
}

/* "classes 5,6,7,8,9 as 0-4" (shortened with "..." past the buffer). */
static void describe_classes(nto_dataset *ds, const int *classes, int n) {
  size_t at = (size_t)snprintf(ds->classes_desc, sizeof ds->classes_desc,
                               "class%s ", n > 1 ? "es" : "");
  for (int j = 0; j < n && at + 24 < sizeof ds->classes_desc; j++) {
    at += (size_t)snprintf(ds->classes_desc + at, sizeof ds->classes_desc - at,
                           "%s%d", j ? "," : "", classes[j]);
    if (j + 1 < n && at + 24 >= sizeof ds->classes_desc)
      at += (size_t)snprintf(ds->classes_desc + at,
                             sizeof ds->classes_desc - at, ",...");
  }
  snprintf(ds->classes_desc + at, sizeof ds->classes_desc - at,
           n > 1 ? " as 0-%d" : " as 0", n - 1);
}

/* The remap table and the hash of the list; NTO_EINVAL for a bad list. */
static int classes_table(nto_dataset *ds, const int *classes, int n,
                         nto_err *err) {
  if (n < 1)
    return nto_err_set(err, NTO_EINVAL, "no class listed");
  for (int c = 0; c < ds->num_classes; c++)
    ds->remap[c] = -1;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int j = 0; j < n; j++) {
    int c = classes[j];
    if (c < 0 || c >= ds->num_classes)
      return nto_err_set(err, NTO_EINVAL,
                         "class %d is not a label of this data (0 to %d)", c,
                         ds->num_classes - 1);
    if (ds->remap[c] >= 0)
      return nto_err_set(err, NTO_EINVAL, "class %d listed twice", c);
    ds->remap[c] = j;
    h = (h ^ (uint64_t)c) * 0x100000001b3ull;
  }
  ds->classes_hash = h ^ (uint64_t)n;
  return 0;
}

int nto_dataset_keep_classes(nto_dataset *ds, const int *classes, int n,
                             nto_err *err) {
  if (ds->kept || ds->started)
    return nto_err_set(err, NTO_EINVAL,
                       "classes: set once, before the first epoch");
  if (ds->count > UINT32_MAX)
    return nto_err_set(err, NTO_EINVAL,
                       "classes: more than 2^32 samples in the source");
  ds->remap = malloc((size_t)ds->num_classes * sizeof *ds->remap);
  ds->ysrc = malloc((size_t)ds->num_classes * sizeof *ds->ysrc);
  int32_t *lab = malloc((ds->count ? ds->count : 1) * sizeof *lab);
  int rc = ds->remap && ds->ysrc && lab
               ? classes_table(ds, classes, n, err)
               : nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  if (rc == 0)
    rc = scan_labels(ds, lab, err);
  uint32_t *idx = (uint32_t *)lab; /* the kept indices, in place (k <= i) */
  size_t k = 0;
  for (size_t i = 0; rc == 0 && i < ds->count; i++)
    if (lab[i] >= 0 && lab[i] < ds->num_classes && ds->remap[lab[i]] >= 0)
      idx[k++] = (uint32_t)i;
  if (rc == 0 && k == 0)
    rc = nto_err_set(err, NTO_EDATA, "no sample of the listed classes in %s",
                     ds->desc);
  if (rc != 0) {
    free(lab);
    free(ds->remap);
    free(ds->ysrc);
    ds->remap = NULL;
    ds->ysrc = NULL;
    return rc;
  }
  uint32_t *kept = realloc(idx, k * sizeof *kept);
  ds->kept = kept ? kept : idx; /* a failed shrink keeps the larger block */
  ds->n_kept = k;
  ds->out_classes = n;
  if ((ds->keep = malloc((size_t)n * sizeof *ds->keep)))
    memcpy(ds->keep, classes, (size_t)n * sizeof *ds->keep);
  describe_classes(ds, classes, n);
  build_desc(ds);
  return 0;
}

int nto_dataset_classes(const nto_dataset *ds) { return ds->out_classes; }

const char *nto_dataset_class_name(const nto_dataset *ds, int c) {
  if (c < 0 || c >= ds->out_classes || !ds->ops->class_name)
    return NULL;
  if (ds->kept)
    return ds->keep ? ds->ops->class_name(ds, ds->keep[c]) : NULL;
  return ds->ops->class_name(ds, c);
}

/* ------------------------------------------------------------ the epochs */

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

/* The shuffle buffer an epoch uses: the request, at most the epoch and
 * 2^32 - 1 samples (<= 1: file order). */
static size_t shuffle_cap(const nto_dataset *ds) {
  size_t cap = ds->shuf_req;
  if (cap > epoch_size(ds))
    cap = epoch_size(ds);
  if (cap > UINT32_MAX)
    cap = UINT32_MAX;
  return cap;
}

int nto_dataset_rewind(nto_dataset *ds, nto_err *err) {
  ds->started = 0;
  ds->pos = 0;
  ds->drawn = 0;
  ds->taken = 0;
  ds->fill = 0;
  ds->primed = 0;
  int rc = ds->ops->rewind ? ds->ops->rewind(ds, err) : 0;
  if (rc)
    return rc;
  size_t cap = shuffle_cap(ds);
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

/* Take up to want samples through the shuffle buffer (see take). */
static int take_shuffled(nto_dataset *ds, float *x, float *y, size_t want,
                         size_t *k, nto_err *err) {
  size_t feat = ds->feat, nc = (size_t)ds->out_classes;
  size_t end = epoch_size(ds), slot = slot_bytes(ds);
  int rc = 0;
  while (!ds->primed && ds->fill < ds->cap && ds->drawn < end) {
    if ((rc = slot_fill(ds, ds->buf + ds->fill * slot, err)))
      return rc;
    ds->fill++;
  }
  ds->primed = 1;
  while (rc == 0 && *k < want && ds->fill > 0) {
    size_t j = nto_rng_below(&ds->rng, (uint32_t)ds->fill);
    if (x)
      rc = slot_emit(ds, ds->buf + j * slot, x + *k * feat, y + *k * nc, err);
    if (rc)
      break;
    (*k)++;
    if (ds->drawn < end) {
      rc = slot_fill(ds, ds->buf + j * slot, err);
    } else {
      size_t last = ds->fill - 1;
      if (j != last)
        memcpy(ds->buf + j * slot, ds->buf + last * slot, slot);
      ds->fill--;
    }
  }
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
  size_t feat = ds->feat, nc = (size_t)ds->out_classes;
  size_t end = epoch_size(ds);
  int rc = 0;
  *k = 0;
  if (ds->cap > 1)
    rc = take_shuffled(ds, x, y, want, k, err);
  else
    for (; *k < want && ds->drawn < end; (*k)++) {
      float *xr = x ? x + *k * feat : NULL, *yr = x ? y + *k * nc : NULL;
      if ((rc = src_next(ds, xr, yr, err)))
        break;
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
  size_t feat = ds->feat, nc = (size_t)ds->out_classes;
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

/* ------------------------------------------------------------- positions */

/* What fixes the source's samples: kind, count, shape, classes, for
 * synthetic data its seed, for IDX its image size, and the classes kept
 * (FNV-1a over the values; the last one only when classes are kept, so
 * positions taken before it existed still match). */
static uint64_t source_id(const nto_dataset *ds) {
  const uint64_t v[7] = {ds->ops->kind,      (uint64_t)ds->count,
                         (uint64_t)ds->feat, (uint64_t)ds->num_classes,
                         ds->id[0],          ds->id[1],
                         ds->classes_hash};
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < (ds->kept ? 7 : 6); i++)
    for (int b = 0; b < 8; b++) {
      h ^= (v[i] >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

void nto_dataset_tell(const nto_dataset *ds, nto_dataset_pos *p) {
  memset(p, 0, sizeof *p);
  p->epoch = ds->started ? ds->epoch : 0;
  p->taken = ds->started ? ds->taken : 0;
  p->rng[0] = ds->rng.s[0];
  p->rng[1] = ds->rng.s[1];
  p->size = epoch_size(ds);
  p->shuffle = shuffle_cap(ds) > 1 ? shuffle_cap(ds) : 0;
  p->seed = ds->shuf_seed;
  p->source = source_id(ds);
}

/* Does p's dataset match ds (source, epoch size, shuffle buffer, seed)?
 * Returns 0, or NTO_ECONFIG saying what differs. */
static int check_same(const nto_dataset *ds, const nto_dataset_pos *p,
                      nto_err *err) {
  uint64_t cap = shuffle_cap(ds) > 1 ? shuffle_cap(ds) : 0;
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
  return 0;
}

int nto_dataset_seek(nto_dataset *ds, const nto_dataset_pos *p, nto_err *err) {
  int rc = check_same(ds, p, err);
  if (rc)
    return rc;
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
  rc = nto_dataset_rewind(ds, err);
  size_t k = 0;
  if (rc == 0)
    rc = take(ds, NULL, NULL, (size_t)p->taken, &k, err);
  if (rc == 0 && k != p->taken)
    rc = nto_err_set(err, NTO_EDATA,
                     "data position: only %zu of %" PRIu64
                     " samples could be skipped",
                     k, p->taken);
  if (rc == 0 && ds->cap > 1 &&
      (ds->rng.s[0] != p->rng[0] || ds->rng.s[1] != p->rng[1]))
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
  if (ds->src && ds->ops->close)
    ds->ops->close(ds->src);
  else
    free(ds->src);
  free(ds->scratch);
  free(ds->buf);
  free(ds->kept);
  free(ds->remap);
  free(ds->keep);
  free(ds->ysrc);
  free(ds);
}
