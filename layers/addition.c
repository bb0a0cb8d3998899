/*
 * addition.c - the `addition` layer: elementwise sum of 1..8 inputs of
 * equal shape (ResNet's shortcut join). No keys.
 *   forward:  out = in[0] + in[1] + ... (summed in input order, float)
 *   backward: din[i] = dout for every input (d out / d in[i] = I)
 */
#include "layer.h"
#include "registry.h"

#include <string.h>

/* out_shape = in_shape[0]. Returns 0 or NTO_ESHAPE naming both shapes. */
static int add_plan(nto_layer *l, nto_err *err) {
  for (int i = 1; i < l->n_in; i++) {
    if (!nto_shape_eq(l->in_shape[i], l->in_shape[0])) {
      char a[48], b[48];
      return nto_err_set(err, NTO_ESHAPE,
                         "input %d has shape %s but input 0 has %s", i,
                         nto_shape_str(l->in_shape[i], 0, a, sizeof a),
                         nto_shape_str(l->in_shape[0], 0, b, sizeof b));
    }
  }
  l->out_shape = l->in_shape[0];
  return 0;
}

/* in[0..k), out: (n) each; out = sum of the inputs in order. */
static void add_kernel(float *out, const float *const *in, int k, size_t n) {
  for (size_t j = 0; j < n; j++) {
    float s = in[0][j];
    for (int i = 1; i < k; i++)
      s += in[i][j];
    out[j] = s;
  }
}

/* f->in[i], f->out: (N, C, H, W). */
static void add_forward(nto_layer *l, const nto_fwd *f) {
  add_kernel(f->out, f->in, l->n_in, nto_shape_numel(l->out_shape));
}

/* b->dout, b->din[i]: (N, C, H, W); din[i] = dout, NULL ones skipped. */
static void add_backward(nto_layer *l, const nto_bwd *b) {
  size_t bytes = nto_shape_bytes(l->out_shape);
  for (int i = 0; i < l->n_in; i++)
    if (b->din[i] != NULL && b->din[i] != b->dout)
      memcpy(b->din[i], b->dout, bytes);
}

const nto_layer_ops nto_addition_layer = {
    .type = "addition",
    .priv_size = 0,
    .min_inputs = 1,
    .max_inputs = NTO_MAX_INPUTS,
    .defaults = NULL,
    .set_prop = nto_layer_no_keys,
    .plan = add_plan,
    .forward = add_forward,
    .backward = add_backward,
};
