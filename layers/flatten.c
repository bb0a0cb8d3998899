/*
 * flatten.c - the `flatten` layer: (N, C, H, W) -> (N, 1, 1, C*H*W), as in
 * nntrainer (features on the width axis). NCHW memory order is kept, so
 * forward and backward are plain copies. No keys.
 */
#include "layer.h"
#include "registry.h"

/* out_shape = (N, 1, 1, C*H*W). Returns 0, or NTO_ESHAPE if C*H*W does
 * not fit an int. */
static int flatten_plan(nto_layer *l, nto_err *err) {
  nto_shape s = l->in_shape[0];
  size_t per = nto_shape_sample(s);
  if (per > 0x7fffffff)
    return nto_err_set(err, NTO_ESHAPE, "flatten of %d:%d:%d is too large", s.c,
                       s.h, s.w);
  l->out_shape = (nto_shape){.n = s.n, .c = 1, .h = 1, .w = (int)per};
  return 0;
}

const nto_layer_ops nto_flatten_layer = {
    .type = "flatten",
    .priv_size = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = NULL,
    .set_prop = nto_layer_no_keys,
    .plan = flatten_plan,
    .forward = nto_layer_copy_forward,
    .backward = nto_layer_copy_backward,
};
