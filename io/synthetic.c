/*
 * synthetic.c - the synthetic data source: deterministic samples for runs
 * and tests without data files. A random-access source
 * (io/dataset-impl.h).
 *
 * DESIGN
 * Sample i is a function of (seed, i) only, so limits and shuffling never
 * change its values: its inputs are N(0,1) draws of a generator seeded
 * from both, and its label is the argmax of a fixed random projection
 * (from seed) of the sample's block means, a deterministic, learnable
 * function of the input whose cost does not grow with the number of
 * classes times the input size.
 */
#include "dataset-impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_DIMS 64 /* block means fed to the projection */

typedef struct synth_src {
  uint64_t seed;
  int dims;      /* block means: min(c*h*w, SYNTH_DIMS) */
  double proj[]; /* (num_classes, dims) */
} synth_src;

static uint64_t sample_seed(uint64_t seed, size_t i) {
  return seed ^ (0x9E3779B97F4A7C15ull * ((uint64_t)i + 1));
}

/* Sample i: x ~ N(0,1) from (seed, index); y = one-hot of
 * argmax(proj . block_means(x)). */
static int synth_sample(const nto_dataset *ds, uint64_t i, float *x, float *y,
                        nto_err *err) {
  (void)err;
  const synth_src *s = ds->src;
  nto_rng r;
  nto_rng_seed(&r, sample_seed(s->seed, (size_t)i));
  for (size_t j = 0; j < ds->feat; j++)
    x[j] = (float)nto_rng_normal(&r);
  size_t d = (size_t)s->dims;
  double z[SYNTH_DIMS];
  for (size_t b = 0; b < d; b++) {
    size_t lo = b * ds->feat / d, hi = (b + 1) * ds->feat / d;
    double sum = 0.0;
    for (size_t j = lo; j < hi; j++)
      sum += x[j];
    z[b] = sum / (double)(hi - lo);
  }
  int best = 0;
  double best_score = 0.0;
  for (int k = 0; k < ds->num_classes; k++) {
    const double *p = s->proj + (size_t)k * d;
    double score = 0.0;
    for (size_t b = 0; b < d; b++)
      score += p[b] * z[b];
    if (k == 0 || score > best_score) {
      best = k;
      best_score = score;
    }
  }
  memset(y, 0, (size_t)ds->num_classes * sizeof *y);
  y[best] = 1.0f;
  return 0;
}

static void synth_describe(const nto_dataset *ds, const char *count, char *buf,
                           size_t len) {
  const synth_src *s = ds->src;
  nto_shape sh = ds->sample;
  snprintf(buf, len,
           "synthetic (seed %" PRIu64 "): %s, %dx%dx%d N(0,1), %d classes",
           s->seed, count, sh.c, sh.h, sh.w, ds->num_classes);
}

int nto_dataset_open_synthetic(nto_dataset **out, size_t num_samples,
                               nto_shape sample, int num_classes, uint64_t seed,
                               nto_err *err) {
  int rc = nto_dataset_new(out, &nto_dataset_synthetic_ops, sample, num_classes,
                           err);
  if (rc)
    return rc;
  nto_dataset *ds = *out;
  if (num_samples == 0)
    return nto_dataset_finish(
        out, nto_err_set(err, NTO_EINVAL, "synthetic dataset: 0 samples"), err);
  size_t dims = ds->feat < SYNTH_DIMS ? ds->feat : SYNTH_DIMS;
  synth_src *s = ds->src =
      malloc(sizeof *s + (size_t)num_classes * dims * sizeof *s->proj);
  if (s == NULL)
    return nto_dataset_finish(
        out, nto_err_set(err, NTO_ENOMEM, "dataset: out of memory"), err);
  ds->count = num_samples;
  ds->id[0] = seed;
  s->seed = seed;
  s->dims = (int)dims;
  nto_rng r;
  nto_rng_seed(&r, seed ^ 0x50524f4a45435431ull); /* "PROJECT1" */
  for (size_t k = 0; k < (size_t)num_classes * dims; k++)
    s->proj[k] = nto_rng_normal(&r);
  return nto_dataset_finish(out, 0, err);
}

const nto_dataset_ops nto_dataset_synthetic_ops = {
    .kind = 2,
    .sample = synth_sample,
    .describe = synth_describe,
};
