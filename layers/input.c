/*
 * input.c - the `input` layer: the graph's source of data.
 *
 * It has no input edges. The executor writes the batch into this layer's
 * OUTPUT buffer before calling forward, so forward works in place on f->out:
 * it is a no-op unless `normalization` or `standardization` is set, which
 * rescale each sample (c*h*w values) on its own:
 *   normalization:   x = (x - min) / (max - min)        (to [0, 1])
 *   standardization: x = (x - mean) / std, std = sqrt(mean((x - mean)^2))
 * (population std). Both may be set; normalization is applied first, as in
 * nntrainer's InputLayer. A constant sample (max == min, or std == 0) maps
 * to zeros. Backward has nothing to do: data has no gradient.
 *
 * Keys: input_shape = c:h:w (required), normalization, standardization.
 */
#include "layer.h"
#include "registry.h"

#include <math.h>
#include <string.h>

typedef struct input_priv {
  nto_shape shape;     /* (1, c, h, w) from input_shape */
  int has_shape;       /* input_shape was given */
  int normalization;   /* scale each sample to [0, 1] */
  int standardization; /* zero mean, unit std per sample */
} input_priv;

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int input_set_prop(nto_layer *l, const char *key, const char *value,
                          nto_err *err) {
  input_priv *p = l->priv;
  if (strcmp(key, "input_shape") == 0) {
    int rc = nto_parse_shape(value, &p->shape, err);
    if (rc == 0)
      p->has_shape = 1;
    return rc;
  }
  if (strcmp(key, "normalization") == 0)
    return nto_parse_bool(value, &p->normalization, err);
  if (strcmp(key, "standardization") == 0)
    return nto_parse_bool(value, &p->standardization, err);
  return NTO_ENOKEY;
}

/* out_shape = (batch, c, h, w). Returns 0 or NTO_ECONFIG (no input_shape). */
static int input_plan(nto_layer *l, nto_err *err) {
  input_priv *p = l->priv;
  if (!p->has_shape)
    return nto_err_set(err, NTO_ECONFIG, "key 'input_shape' is required");
  l->out_shape = p->shape;
  l->out_shape.n = l->batch;
  return 0;
}

/* x: (n) one sample, rescaled in place to [0, 1] by its min and max. */
static void normalize_sample(float *x, size_t n) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; i++) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  float range = hi - lo;
  for (size_t i = 0; i < n; i++)
    x[i] = range > 0.0f ? (x[i] - lo) / range : 0.0f;
}

/* x: (n) one sample, standardized in place to zero mean and unit
 * (population) standard deviation; sums in double. */
static void standardize_sample(float *x, size_t n) {
  double sum = 0.0, sq = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += x[i];
  double mean = sum / (double)n;
  for (size_t i = 0; i < n; i++)
    sq += ((double)x[i] - mean) * ((double)x[i] - mean);
  double sd = sqrt(sq / (double)n);
  for (size_t i = 0; i < n; i++)
    x[i] = sd > 0.0 ? (float)(((double)x[i] - mean) / sd) : 0.0f;
}

/* f->out: (N, C, H, W), already holding the batch; rescaled in place. */
static void input_forward(nto_layer *l, const nto_fwd *f) {
  input_priv *p = l->priv;
  size_t per = nto_shape_sample(l->out_shape);
  for (int s = 0; s < l->out_shape.n; s++) {
    float *x = f->out + (size_t)s * per;
    if (p->normalization)
      normalize_sample(x, per);
    if (p->standardization)
      standardize_sample(x, per);
  }
}

/* No inputs, no weights: nothing to compute. */
static void input_backward(nto_layer *l, const nto_bwd *b) {
  (void)l;
  (void)b;
}

const nto_layer_ops nto_input_layer = {
    .type = "input",
    .priv_size = sizeof(input_priv),
    .min_inputs = 0,
    .max_inputs = 0,
    .defaults = NULL,
    .set_prop = input_set_prop,
    .plan = input_plan,
    .forward = input_forward,
    .backward = input_backward,
};
