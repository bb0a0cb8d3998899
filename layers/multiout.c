/*
 * multiout.c - the `multiout` layer (legacy name `output`): fans one input
 * out to several consumers. It has exactly one input and one output buffer
 * that every consumer reads; the executor sums the consumers' gradients into
 * dout before calling backward. So:
 *   forward:  out = in          backward: din = dout
 * No keys.
 */
#include "layer.h"
#include "registry.h"

#include <string.h>

/* No keys. */
static int multiout_set_prop(nto_layer *l, const char *key, const char *value,
                             nto_err *err) {
  (void)l;
  (void)key;
  (void)value;
  (void)err;
  return NTO_ENOKEY;
}

/* out_shape = in_shape[0]. Always 0. */
static int multiout_plan(nto_layer *l, nto_err *err) {
  (void)err;
  l->out_shape = l->in_shape[0];
  return 0;
}

/* f->in[0], f->out: (N, C, H, W); out = in. */
static void multiout_forward(nto_layer *l, const nto_fwd *f) {
  if (f->out != f->in[0])
    memcpy(f->out, f->in[0], nto_shape_bytes(l->out_shape));
}

/* b->dout, b->din[0]: (N, C, H, W); din = dout (NULL din: skipped). */
static void multiout_backward(nto_layer *l, const nto_bwd *b) {
  if (b->din[0] != NULL && b->din[0] != b->dout)
    memcpy(b->din[0], b->dout, nto_shape_bytes(l->out_shape));
}

const nto_layer_ops nto_multiout_layer = {
    .type = "multiout",
    .priv_size = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = NULL,
    .set_prop = multiout_set_prop,
    .plan = multiout_plan,
    .forward = multiout_forward,
    .backward = multiout_backward,
};
