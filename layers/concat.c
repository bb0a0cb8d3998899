/*
 * concat.c - the `concat` layer: joins 1..8 NCHW inputs along one axis.
 *
 * Key: axis = 1 (channel, default) | 2 (height) | 3 (width), nntrainer's
 * numbering where the batch is axis 0 (not allowed). All other dimensions
 * of the inputs must be equal.
 *
 * Any NCHW tensor viewed along `axis` is (outer, d, inner) with
 *   axis 1: outer = N,       inner = H*W
 *   axis 2: outer = N*C,     inner = W
 *   axis 3: outer = N*C*H,   inner = 1
 * so the output row o is the inputs' rows o laid side by side:
 *   out[o][off_i + k] = in_i[o][k],  k < d_i*inner,  off_i = sum_{j<i} d_j*inner
 * Backward slices dout the same way into din[i].
 */
#include "layer.h"
#include "registry.h"

#include <limits.h>
#include <string.h>

typedef struct concat_priv {
  int axis; /* 1, 2 or 3 */
} concat_priv;

/* Default axis = 1 (channels), as in nntrainer. */
static void concat_defaults(nto_layer *l) {
  concat_priv *p = l->priv;
  p->axis = 1;
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int concat_set_prop(nto_layer *l, const char *key, const char *value,
                           nto_err *err) {
  concat_priv *p = l->priv;
  if (strcmp(key, "axis") != 0)
    return NTO_ENOKEY;
  long a;
  int rc = nto_parse_int(value, 1, 3, &a, err);
  if (rc == 0)
    p->axis = (int)a;
  return rc;
}

/* Dimension `axis` (0..3 = n, c, h, w) of s. */
static int dim_of(nto_shape s, int axis) {
  return axis == 0 ? s.n : axis == 1 ? s.c : axis == 2 ? s.h : s.w;
}

/* Product of the dimensions after `axis` (the contiguous inner block). */
static size_t inner_of(nto_shape s, int axis) {
  size_t r = 1;
  for (int a = axis + 1; a < 4; a++)
    r *= (size_t)dim_of(s, a);
  return r;
}

/* Product of the dimensions before `axis` (the outer row count). */
static size_t outer_of(nto_shape s, int axis) {
  size_t r = 1;
  for (int a = 0; a < axis; a++)
    r *= (size_t)dim_of(s, a);
  return r;
}

/*
 * out_shape = in_shape[0] with dimension axis = sum over inputs.
 * Returns 0 or NTO_ESHAPE naming the two shapes that disagree.
 */
static int concat_plan(nto_layer *l, nto_err *err) {
  concat_priv *p = l->priv;
  nto_shape o = l->in_shape[0];
  long total = 0;
  for (int i = 0; i < l->n_in; i++) {
    nto_shape s = l->in_shape[i];
    for (int a = 0; a < 4; a++) {
      if (a != p->axis && dim_of(s, a) != dim_of(o, a)) {
        char x[48], y[48];
        return nto_err_set(
            err, NTO_ESHAPE,
            "input %d has shape %s but input 0 has %s (concat along axis %d "
            "needs the other dimensions equal)",
            i, nto_shape_str(s, 0, x, sizeof x),
            nto_shape_str(o, 0, y, sizeof y), p->axis);
      }
    }
    total += dim_of(s, p->axis);
  }
  if (total > INT_MAX)
    return nto_err_set(err, NTO_ESHAPE,
                       "concat along axis %d is too large (%ld)", p->axis,
                       total);
  if (p->axis == 1)
    o.c = (int)total;
  else if (p->axis == 2)
    o.h = (int)total;
  else
    o.w = (int)total;
  l->out_shape = o;
  return 0;
}

/* src: (outer, len) -> dst: (outer, row) at columns [off, off + len). */
static void concat_put(float *dst, const float *src, size_t outer, size_t row,
                       size_t len, size_t off) {
  for (size_t o = 0; o < outer; o++)
    memcpy(dst + o * row + off, src + o * len, len * sizeof(float));
}

/* src: (outer, row), columns [off, off + len) -> dst: (outer, len). */
static void concat_take(float *dst, const float *src, size_t outer,
                        size_t row, size_t len, size_t off) {
  for (size_t o = 0; o < outer; o++)
    memcpy(dst + o * len, src + o * row + off, len * sizeof(float));
}

/* f->in[i]: in_shape[i]; f->out: out_shape (NCHW). */
static void concat_forward(nto_layer *l, const nto_fwd *f) {
  concat_priv *p = l->priv;
  size_t outer = outer_of(l->out_shape, p->axis);
  size_t inner = inner_of(l->out_shape, p->axis);
  size_t row = (size_t)dim_of(l->out_shape, p->axis) * inner, off = 0;
  for (int i = 0; i < l->n_in; i++) {
    size_t len = (size_t)dim_of(l->in_shape[i], p->axis) * inner;
    concat_put(f->out, f->in[i], outer, row, len, off);
    off += len;
  }
}

/* b->dout: out_shape; b->din[i]: in_shape[i] (NULL: skipped). */
static void concat_backward(nto_layer *l, const nto_bwd *b) {
  concat_priv *p = l->priv;
  size_t outer = outer_of(l->out_shape, p->axis);
  size_t inner = inner_of(l->out_shape, p->axis);
  size_t row = (size_t)dim_of(l->out_shape, p->axis) * inner, off = 0;
  for (int i = 0; i < l->n_in; i++) {
    size_t len = (size_t)dim_of(l->in_shape[i], p->axis) * inner;
    if (b->din[i] != NULL)
      concat_take(b->din[i], b->dout, outer, row, len, off);
    off += len;
  }
}

const nto_layer_ops nto_concat_layer = {
    .type = "concat",
    .priv_size = sizeof(concat_priv),
    .min_inputs = 1,
    .max_inputs = NTO_MAX_INPUTS,
    .defaults = concat_defaults,
    .set_prop = concat_set_prop,
    .plan = concat_plan,
    .forward = concat_forward,
    .backward = concat_backward,
};
