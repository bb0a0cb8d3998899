/* layer.c - helpers of the layer interface. See layer.h. */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nto_layer_add_weight(nto_layer *l, const char *name, nto_shape shape,
                         int ndim, nto_init_kind init, int fan_in, int fan_out,
                         int trainable) {
  if (l->n_w >= NTO_MAX_WEIGHTS)
    return NTO_EINVAL;
  nto_weight_req *w = &l->w[l->n_w];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", name);
  w->shape = shape;
  w->init = init;
  w->fan_in = fan_in;
  w->fan_out = fan_out;
  w->trainable = trainable;
  w->ndim = ndim;
  w->tensor = -1;
  return l->n_w++;
}

int nto_layer_add_saved(nto_layer *l, const char *name, nto_shape shape) {
  if (l->n_saved >= NTO_MAX_SAVED)
    return NTO_EINVAL;
  nto_saved_req *s = &l->saved[l->n_saved];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->shape = shape;
  s->tensor = -1;
  return l->n_saved++;
}

/* Element offset of channel c0's block in a tensor of `whole` elements
 * holding `channels` blocks of `part` / (c1 - c0) elements each (part: the
 * narrowed tensor's elements); SIZE_MAX when the tensor does not divide
 * so. */
static size_t block_offset(size_t whole, size_t part, int channels, int c0,
                           int c1) {
  size_t n = (size_t)(c1 - c0);
  if (part % n != 0 || (part / n) * (size_t)channels != whole)
    return (size_t)-1;
  return (size_t)c0 * (part / n);
}

int nto_layer_narrow(const nto_layer *l, int mode, int c0, int c1,
                     nto_layer *out, size_t w_off[NTO_MAX_WEIGHTS],
                     size_t s_off[NTO_MAX_SAVED], nto_err *err) {
  int channels = l->out_shape.c;
  memset(out, 0, sizeof *out);
  if (!l->ops->narrow || c0 < 0 || c1 <= c0 || c1 > channels)
    return nto_err_set(err, NTO_EINVAL,
                       "layer '%s' (%s): cannot compute channels %d-%d alone",
                       l->name, l->ops->type, c0, c1 - 1);
  *out = *l;
  out->priv = malloc(l->ops->priv_size ? l->ops->priv_size : 1);
  if (!out->priv)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  memcpy(out->priv, l->priv, l->ops->priv_size);
  int rc = l->ops->narrow(out, mode, c1 - c0);
  if (rc != 0) {
    nto_layer_narrow_free(out);
    return nto_err_set(err, NTO_EINVAL,
                       "layer '%s' (%s): cannot compute a group of its "
                       "channels alone",
                       l->name, l->ops->type);
  }
  if ((rc = out->ops->plan(out, err)) != 0) {
    nto_layer_narrow_free(out);
    return rc;
  }
  rc = out->n_w != l->n_w || out->n_saved != l->n_saved ||
       out->out_shape.c != c1 - c0;
  for (int j = 0; !rc && j < l->n_w; j++) {
    w_off[j] = block_offset(nto_shape_numel(l->w[j].shape),
                            nto_shape_numel(out->w[j].shape), channels, c0, c1);
    rc = w_off[j] == (size_t)-1;
    out->w[j].tensor = l->w[j].tensor;
  }
  for (int k = 0; !rc && k < l->n_saved; k++) {
    s_off[k] =
        block_offset(nto_shape_numel(l->saved[k].shape),
                     nto_shape_numel(out->saved[k].shape), channels, c0, c1);
    rc = s_off[k] == (size_t)-1;
    out->saved[k].tensor = l->saved[k].tensor;
  }
  if (rc) {
    nto_layer_narrow_free(out);
    return nto_err_set(err, NTO_EINVAL,
                       "layer '%s' (%s): its weights are not blocks per "
                       "output channel",
                       l->name, l->ops->type);
  }
  return 0;
}

void nto_layer_narrow_free(nto_layer *out) {
  free(out->priv);
  out->priv = NULL;
}

int nto_layer_no_keys(nto_layer *l, const char *key, const char *value,
                      nto_err *err) {
  (void)l;
  (void)key;
  (void)value;
  (void)err;
  return NTO_ENOKEY;
}

void nto_layer_copy_forward(nto_layer *l, const nto_fwd *f) {
  if (f->out != f->in[0])
    memcpy(f->out, f->in[0], nto_shape_bytes(l->out_shape));
}

void nto_layer_copy_backward(nto_layer *l, const nto_bwd *b) {
  if (b->din[0] != NULL && b->din[0] != b->dout)
    memcpy(b->din[0], b->dout, nto_shape_bytes(l->out_shape));
}

void nto_layer_plan_reset(nto_layer *l) {
  l->n_w = 0;
  l->n_saved = 0;
  l->ws_bytes = 0;
  l->bwd_needs_input = 0;
  l->bwd_needs_output = 0;
  l->out_is_input = 0;
  l->bwd_in_place = 0;
  l->out_kind = NTO_OUT_PLAIN;
  l->replay_macs = 0;
}

size_t nto_layer_param_count(const nto_layer *l) {
  size_t n = 0;
  for (int j = 0; j < l->n_w; j++)
    if (l->w[j].trainable)
      n += nto_shape_numel(l->w[j].shape);
  return n;
}

double nto_layer_reg_loss(const nto_layer *l, float *const *w) {
  double loss = 0.0;
  if (!l->trainable)
    return 0.0;
  for (int j = 0; j < l->n_w; j++) {
    if (!(l->w[j].l2 > 0.0f) || !l->w[j].trainable)
      continue;
    const float *x = w[j];
    size_t n = nto_shape_numel(l->w[j].shape);
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
      ss += (double)x[i] * x[i];
    loss += 0.5 * (double)l->w[j].l2 * sqrt(ss);
  }
  return loss;
}

void nto_layer_reg_grad(const nto_layer *l, int j, const float *w, float *dw,
                        size_t n) {
  float c = l->w[j].l2;
  if (!(c > 0.0f))
    return;
  for (size_t i = 0; i < n; i++)
    dw[i] += c * w[i];
}
