/*
 * flatten.c - the `flatten` layer: (N, C, H, W) -> (N, 1, 1, C*H*W), as in
 * nntrainer (features on the width axis). NCHW memory order is kept, so
 * the output is a view of the input (out_is_input: one tensor, forward
 * copies nothing) and backward is a plain copy, or nothing when the model
 * gives the input and output gradients one tensor (bwd_in_place). One
 * key, target_shape, as nntrainer's INI export writes it (its flatten is
 * a reshape to 1:1:C*H*W): accepted when it is that shape.
 */
#include "layer.h"
#include "props.h"
#include "registry.h"

#include <string.h>

typedef struct flatten_priv {
  int has_target; /* target_shape given */
  nto_shape target;
} flatten_priv;

static int flatten_set_prop(nto_layer *l, const char *key, const char *value,
                            nto_err *err) {
  flatten_priv *p = l->priv;
  if (strcmp(key, "target_shape") != 0)
    return NTO_ENOKEY;
  p->has_target = 1;
  return nto_parse_shape(value, &p->target, err);
}

/* out_shape = (N, 1, 1, C*H*W), a view of the input. Returns 0, or
 * NTO_ESHAPE if C*H*W does not fit an int. */
static int flatten_plan(nto_layer *l, nto_err *err) {
  nto_shape s = l->in_shape[0];
  size_t per = nto_shape_sample(s);
  if (per > 0x7fffffff)
    return nto_err_set(err, NTO_ESHAPE, "flatten of %d:%d:%d is too large", s.c,
                       s.h, s.w);
  const flatten_priv *p = l->priv;
  if (p->has_target &&
      (p->target.c != 1 || p->target.h != 1 || (size_t)p->target.w != per))
    return nto_err_set(err, NTO_ECONFIG,
                       "key 'target_shape': %d:%d:%d is not the flattened "
                       "shape 1:1:%zu (a flatten only flattens)",
                       p->target.c, p->target.h, p->target.w, per);
  l->out_shape = (nto_shape){.n = s.n, .c = 1, .h = 1, .w = (int)per};
  l->out_is_input = 1;
  l->bwd_in_place = 1; /* din = dout: nothing to copy when shared */
  return 0;
}

const nto_layer_ops nto_flatten_layer = {
    .type = "flatten",
    .priv_size = sizeof(flatten_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = NULL,
    .set_prop = flatten_set_prop,
    .plan = flatten_plan,
    .forward = nto_layer_copy_forward,
    .backward = nto_layer_copy_backward,
};
