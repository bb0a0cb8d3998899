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
  ds->num_classes = num_classes;
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

/* Read the next source sample (index ds->pos) into slot s; advance pos. */
static int slot_fill(nto_dataset *ds, unsigned char *s, nto_err *err) {
  if (ds->ops->sample) { /* its index: read or generated when emitted */
    uint64_t i = ds->pos;
    memcpy(s, &i, sizeof i);
  } else {
    int rc = ds->ops->fetch(ds, s, err);
    if (rc)
      return rc;
  }
  ds->pos++;
  return 0;
}

/* Write the sample held in slot s into a batch row x (c, h, w), y.
 * Returns 0, or the source's read error. */
static int slot_emit(const nto_dataset *ds, const unsigned char *s, float *x,
                     float *y, nto_err *err) {
  if (!ds->ops->sample) {
    ds->ops->adapt(ds, s, x, y);
    return 0;
  }
  uint64_t i;
  memcpy(&i, s, sizeof i);
  return ds->ops->sample(ds, i, x, y, err);
}

/* The next source sample in file order into x, y (x NULL: skipped, read
 * through on a stream); advances pos. */
static int src_next(nto_dataset *ds, float *x, float *y, nto_err *err) {
  int rc = slot_fill(ds, ds->scratch, err);
  return rc == 0 && x ? slot_emit(ds, ds->scratch, x, y, err) : rc;
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
  size_t feat = ds->feat, nc = (size_t)ds->num_classes;
  size_t end = epoch_size(ds), slot = slot_bytes(ds);
  int rc = 0;
  while (!ds->primed && ds->fill < ds->cap && ds->pos < end) {
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
    if (ds->pos < end) {
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
  size_t feat = ds->feat, nc = (size_t)ds->num_classes;
  size_t end = epoch_size(ds);
  int rc = 0;
  *k = 0;
  if (ds->cap > 1)
    rc = take_shuffled(ds, x, y, want, k, err);
  else
    for (; *k < want && ds->pos < end; (*k)++) {
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

/* ------------------------------------------------------------- positions */

/* What fixes the source's samples: kind, count, shape, classes, and for
 * synthetic data its seed, for IDX its image size (FNV-1a over the
 * values). */
static uint64_t source_id(const nto_dataset *ds) {
  const uint64_t v[6] = {ds->ops->kind,      (uint64_t)ds->count,
                         (uint64_t)ds->feat, (uint64_t)ds->num_classes,
                         ds->id[0],          ds->id[1]};
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 6; i++)
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
  free(ds);
}
