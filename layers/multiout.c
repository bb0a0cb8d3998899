/*
 * multiout.c - the `multiout` layer (legacy name `output`): fans one input
 * out to several consumers. It has exactly one input and one output buffer
 * that every consumer reads; the executor sums the consumers' gradients into
 * dout before calling backward. So:
 *   forward:  out = in          backward: din = dout
 * The output is a view of the input (out_is_input): the model gives both one
 * tensor, so forward copies nothing and the content is kept once. No keys.
 */
#include "layer.h"
#include "registry.h"

/* out_shape = in_shape[0], a view of the input. Always 0. */
static int multiout_plan(nto_layer *l, nto_err *err) {
  (void)err;
  l->out_shape = l->in_shape[0];
  l->out_is_input = 1;
  l->bwd_in_place = 1; /* din = dout: nothing to copy when shared */
  return 0;
}

const nto_layer_ops nto_multiout_layer = {
    .type = "multiout",
    .priv_size = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = NULL,
    .set_prop = nto_layer_no_keys,
    .plan = multiout_plan,
    .forward = nto_layer_copy_forward,
    .backward = nto_layer_copy_backward,
};
