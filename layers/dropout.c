/*
 * dropout.c - the `dropout` layer: inverted dropout (Srivastava et al. 2014,
 * scaled at training time as in PyTorch's nn.Dropout).
 *
 * Key: dropout_rate = p in [0, 1) (default 0).
 * Training: for each element in memory order, keep it when
 *   nto_rng_uniform(f->rng) >= p, and
 *   mask = keep ? 1 / (1 - p) : 0,   out = in * mask.
 * The mask (same shape as the output, floats 0 or 1/(1-p)) is a saved
 * tensor; backward is din = dout * mask. With p == 0 the mask is all ones
 * and no random numbers are drawn.
 * Eval: out = in; the mask is not touched (no backward follows).
 */
#include "layer.h"
#include "registry.h"

#include <string.h>

typedef struct dropout_priv {
  double rate; /* p, the probability to drop an element */
  int mask;    /* index of the saved "mask" tensor */
} dropout_priv;

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int dropout_set_prop(nto_layer *l, const char *key, const char *value,
                            nto_err *err) {
  dropout_priv *p = l->priv;
  if (strcmp(key, "dropout_rate") != 0)
    return NTO_ENOKEY;
  double r;
  int rc = nto_parse_float(value, 0.0, 1.0, &r, err);
  if (rc == 0 && r >= 1.0)
    rc = nto_err_set(err, NTO_ECONFIG, "expected a number in [0, 1), got '%s'",
                     value);
  if (rc == 0)
    p->rate = r;
  return rc;
}

/* out_shape = in_shape[0]; saved "mask" of the same shape. Returns 0 or
 * NTO_EINVAL if no saved slot is left. */
static int dropout_plan(nto_layer *l, nto_err *err) {
  dropout_priv *p = l->priv;
  l->out_shape = l->in_shape[0];
  l->bwd_in_place = 1; /* elementwise */
  p->mask = nto_layer_add_saved(l, "mask", l->out_shape);
  if (p->mask < 0)
    return nto_err_set(err, p->mask, "too many saved tensors");
  return 0;
}

/*
 * x, y, mask: (n). mask[i] = u_i >= p ? 1/(1-p) : 0 with u_i drawn in order
 * from rng; y = x * mask. x may equal y. mask NULL: not written (nothing
 * runs the layer's backward), the same draws.
 */
static void dropout_train(float *y, float *mask, const float *x, size_t n,
                          double p, nto_rng *rng) {
  float scale = (float)(1.0 / (1.0 - p));
  for (size_t i = 0; i < n; i++) {
    float m = 1.0f;
    if (p > 0.0)
      m = nto_rng_uniform(rng) >= p ? scale : 0.0f;
    if (mask)
      mask[i] = m;
    y[i] = x[i] * m;
  }
}

/* f->in[0], f->out, f->saved[mask]: (N, C, H, W). */
static void dropout_forward(nto_layer *l, const nto_fwd *f) {
  dropout_priv *p = l->priv;
  size_t n = nto_shape_numel(l->out_shape);
  if (f->training)
    dropout_train(f->out, f->saved[p->mask], f->in[0], n, p->rate, f->rng);
  else if (f->out != f->in[0])
    memcpy(f->out, f->in[0], n * sizeof(float));
}

/* b->dout, b->din[0], b->saved[mask]: (N, C, H, W); din = dout * mask. */
static void dropout_backward(nto_layer *l, const nto_bwd *b) {
  dropout_priv *p = l->priv;
  const float *mask = b->saved[p->mask];
  size_t n = nto_shape_numel(l->out_shape);
  if (b->din[0] == NULL)
    return;
  for (size_t i = 0; i < n; i++)
    b->din[0][i] = b->dout[i] * mask[i];
}

const nto_layer_ops nto_dropout_layer = {
    .type = "dropout",
    .priv_size = sizeof(dropout_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = NULL,
    .set_prop = dropout_set_prop,
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
