/*
 * pooling2d.c - the `pooling2d` layer: max or average pooling over 2-d
 * windows of each channel, and their global forms.
 *
 * Keys:
 *   pooling   = max | average | global_max | global_average (required)
 *   pool_size = "kh,kw" or "k" (required unless global)
 *   stride    = "sh,sw" or "s" (default 1,1, nntrainer's default)
 *   padding   = same | valid | "p" | "ph,pw" | "t,b,l,r" (default 0)
 * `same` follows TensorFlow: out = ceil(in / stride),
 *   total = max((out - 1) * stride + k - in, 0), top/left = total / 2,
 *   the rest bottom/right. Output size, as in PyTorch (floor mode):
 *   OH = (H + pt + pb - kh) / sh + 1,  OW = (W + pl + pr - kw) / sw + 1.
 * Global pooling is the same kernel with the window = the whole plane,
 * stride 1, no padding: out (N, C, 1, 1); pool_size/stride/padding ignored.
 *
 * max: padding cells are ignored (as -inf); ties go to the first maximum
 *   in row-major window order (ky, then kx). The argmax of each output,
 *   as the flat index iy*W + ix in its input plane (a float, exact below
 *   2^24), is the saved tensor "argmax" (out shape), so backward does not
 *   need the input (cheaper to keep than the input: it has the output's
 *   size). A window lying wholly in the padding outputs 0, index -1, no
 *   gradient.
 * average: sum of the window's input cells / (kh * kw) always (padding
 *   counts as zeros: PyTorch's count_include_pad=True); global_average
 *   divides by H * W.
 * Backward zeroes din and scatters dout back through the windows.
 */
#include "layer.h"
#include "registry.h"

#include <limits.h>
#include <math.h>
#include <string.h>

typedef enum {
  POOL_UNSET = -1,
  POOL_MAX,
  POOL_AVERAGE,
  POOL_GLOBAL_MAX,
  POOL_GLOBAL_AVERAGE,
} pool_kind;

/* Same order as pool_kind. */
static const char *const pool_names[] = {"max", "average", "global_max",
                                         "global_average", NULL};

typedef enum { PAD_EXPLICIT, PAD_SAME } pad_mode;

/* Window geometry over one (H, W) plane, resolved by plan. */
typedef struct pool_geom {
  int kh, kw; /* window */
  int sh, sw; /* stride */
  int pt, pl; /* padding before the first row / column */
} pool_geom;

typedef struct pool_priv {
  pool_kind kind;
  int kh, kw, has_size; /* pool_size as given */
  int sh, sw;           /* stride as given */
  pad_mode pad_mode;
  int pad[4];     /* explicit t, b, l, r */
  pool_geom geom; /* resolved for the planned input */
  int argmax;     /* saved tensor index (max kinds) */
} pool_priv;

/* stride 1,1, padding 0, pooling unset. */
static void pool_defaults(nto_layer *l) {
  pool_priv *p = l->priv;
  p->kind = POOL_UNSET;
  p->sh = p->sw = 1;
  p->pad_mode = PAD_EXPLICIT;
}

/* Parses "a,b" or "a" (then b = a) of integers >= 1. 0 or NTO_ECONFIG. */
static int parse_pair(const char *value, int *a, int *b, nto_err *err) {
  long v[2];
  int n;
  int rc = nto_parse_int_list(value, 1, 1 << 20, v, 2, &n, err);
  if (rc != 0)
    return rc;
  *a = (int)v[0];
  *b = (int)(n == 2 ? v[1] : v[0]);
  return 0;
}

/* Parses same | valid | p | ph,pw | t,b,l,r. 0 or NTO_ECONFIG. */
static int parse_padding(pool_priv *p, const char *value, nto_err *err) {
  static const char *const modes[] = {"same", "valid", NULL};
  int m;
  if (nto_parse_enum(value, modes, &m, NULL) == 0) {
    p->pad_mode = m == 0 ? PAD_SAME : PAD_EXPLICIT;
    memset(p->pad, 0, sizeof p->pad);
    return 0;
  }
  long v[4];
  int n = 0;
  if (nto_parse_int_list(value, 0, 1 << 20, v, 4, &n, NULL) != 0 || n == 3)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected same, valid, p, ph,pw or t,b,l,r "
                       "(non-negative integers), got '%s'",
                       value);
  p->pad_mode = PAD_EXPLICIT;
  if (n == 1) {
    for (int i = 0; i < 4; i++)
      p->pad[i] = (int)v[0];
  } else if (n == 2) {
    p->pad[0] = p->pad[1] = (int)v[0];
    p->pad[2] = p->pad[3] = (int)v[1];
  } else {
    for (int i = 0; i < 4; i++)
      p->pad[i] = (int)v[i];
  }
  return 0;
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int pool_set_prop(nto_layer *l, const char *key, const char *value,
                         nto_err *err) {
  pool_priv *p = l->priv;
  if (strcmp(key, "pooling") == 0) {
    int k;
    int rc = nto_parse_enum(value, pool_names, &k, err);
    if (rc == 0)
      p->kind = (pool_kind)k;
    return rc;
  }
  if (strcmp(key, "pool_size") == 0) {
    int rc = parse_pair(value, &p->kh, &p->kw, err);
    if (rc == 0)
      p->has_size = 1;
    return rc;
  }
  if (strcmp(key, "stride") == 0)
    return parse_pair(value, &p->sh, &p->sw, err);
  if (strcmp(key, "padding") == 0)
    return parse_padding(p, value, err);
  return NTO_ENOKEY;
}

/* TF "same" padding of one dimension: total = max((ceil(in/s) - 1) * s +
 * k - in, 0); *before = total / 2, *after = the rest. */
static void same_pad(int in, int k, int s, int *before, int *after) {
  long out = ((long)in + s - 1) / s;
  int total = (int)((out - 1) * s + k - in);
  if (total < 0)
    total = 0;
  *before = total / 2;
  *after = total - *before;
}

/*
 * Resolves the geometry for in_shape[0] (N, C, H, W), sets out_shape
 * (N, C, OH, OW) and, for max, the saved "argmax" (out shape).
 * Returns 0, NTO_ECONFIG (pooling or pool_size missing) or NTO_ESHAPE
 * (pool larger than the padded input, plane too large for float indices).
 */
static int pool_plan(nto_layer *l, nto_err *err) {
  pool_priv *p = l->priv;
  nto_shape in = l->in_shape[0];
  pool_geom g;
  int pb, pr;
  if (p->kind == POOL_UNSET)
    return nto_err_set(err, NTO_ECONFIG, "key 'pooling' is required");
  if (p->kind == POOL_GLOBAL_MAX || p->kind == POOL_GLOBAL_AVERAGE) {
    g = (pool_geom){.kh = in.h, .kw = in.w, .sh = 1, .sw = 1};
    pb = pr = 0;
  } else {
    if (!p->has_size)
      return nto_err_set(err, NTO_ECONFIG,
                         "key 'pool_size' is required for pooling = %s",
                         pool_names[p->kind]);
    g = (pool_geom){.kh = p->kh, .kw = p->kw, .sh = p->sh, .sw = p->sw};
    if (p->pad_mode == PAD_SAME) {
      same_pad(in.h, g.kh, g.sh, &g.pt, &pb);
      same_pad(in.w, g.kw, g.sw, &g.pl, &pr);
    } else {
      g.pt = p->pad[0];
      pb = p->pad[1];
      g.pl = p->pad[2];
      pr = p->pad[3];
    }
  }
  long ph = (long)in.h + g.pt + pb, pw = (long)in.w + g.pl + pr;
  if (g.kh > ph || g.kw > pw)
    return nto_err_set(err, NTO_ESHAPE,
                       "pool %dx%d larger than padded input %ldx%ld "
                       "(input %dx%d)",
                       g.kh, g.kw, ph, pw, in.h, in.w);
  /* Window coordinates (oy*sh - pt + ky) stay within the padded input. */
  if (ph > INT_MAX || pw > INT_MAX)
    return nto_err_set(err, NTO_ESHAPE, "padded input %ldx%ld is too large",
                       ph, pw);
  p->geom = g;
  l->out_shape = (nto_shape){.n = in.n,
                             .c = in.c,
                             .h = (int)((ph - g.kh) / g.sh + 1),
                             .w = (int)((pw - g.kw) / g.sw + 1)};
  if (p->kind == POOL_MAX || p->kind == POOL_GLOBAL_MAX) {
    if ((long)in.h * in.w > (1L << 24))
      return nto_err_set(err, NTO_ESHAPE,
                         "max pooling plane %dx%d too large (limit 2^24 "
                         "cells)",
                         in.h, in.w);
    p->argmax = nto_layer_add_saved(l, "argmax", l->out_shape);
    if (p->argmax < 0)
      return nto_err_set(err, p->argmax, "too many saved tensors");
  }
  return 0;
}

/*
 * x: (P, H, W) planes -> y, idx: (P, OH, OW). y = max over the window's
 * cells inside the plane (first maximum in row-major window order wins);
 * idx = its flat index iy*W + ix, or -1 (and y = 0) if the window holds no
 * input cell (idx NULL: not written; nothing runs the layer's backward).
 */
static void maxpool_forward(float *y, float *idx, const float *x, int P,
                            int H, int W, int OH, int OW, const pool_geom *g) {
  for (int pl = 0; pl < P; pl++) {
    const float *xp = x + (size_t)pl * H * W;
    float *yp = y + (size_t)pl * OH * OW;
    float *ip = idx ? idx + (size_t)pl * OH * OW : NULL;
    for (int oy = 0; oy < OH; oy++) {
      for (int ox = 0; ox < OW; ox++) {
        int y0 = oy * g->sh - g->pt, x0 = ox * g->sw - g->pl;
        float best = -INFINITY;
        long bi = -1;
        for (int ky = 0; ky < g->kh; ky++) {
          int iy = y0 + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < g->kw; kx++) {
            int ix = x0 + kx;
            if (ix < 0 || ix >= W)
              continue;
            float v = xp[(size_t)iy * W + ix];
            if (bi < 0 || v > best) {
              best = v;
              bi = (long)iy * W + ix;
            }
          }
        }
        yp[oy * OW + ox] = bi < 0 ? 0.0f : best;
        if (idx)
          ip[oy * OW + ox] = (float)bi;
      }
    }
  }
}

/* dy, idx: (P, OH, OW) -> dx: (P, H, W); dx = 0, then dx[idx] += dy. */
static void maxpool_backward(float *dx, const float *dy, const float *idx,
                             int P, int H, int W, int OH, int OW) {
  memset(dx, 0, (size_t)P * H * W * sizeof(float));
  for (int pl = 0; pl < P; pl++) {
    float *dxp = dx + (size_t)pl * H * W;
    const float *dyp = dy + (size_t)pl * OH * OW;
    const float *ip = idx + (size_t)pl * OH * OW;
    for (int o = 0; o < OH * OW; o++)
      if (ip[o] >= 0.0f)
        dxp[(size_t)ip[o]] += dyp[o];
  }
}

/*
 * x: (P, H, W) -> y: (P, OH, OW); y = (sum of the window's cells inside
 * the plane, row-major order) / (kh * kw): padding counts as zeros.
 */
static void avgpool_forward(float *y, const float *x, int P, int H, int W,
                            int OH, int OW, const pool_geom *g) {
  float div = (float)g->kh * (float)g->kw;
  for (int pl = 0; pl < P; pl++) {
    const float *xp = x + (size_t)pl * H * W;
    float *yp = y + (size_t)pl * OH * OW;
    for (int oy = 0; oy < OH; oy++) {
      for (int ox = 0; ox < OW; ox++) {
        int y0 = oy * g->sh - g->pt, x0 = ox * g->sw - g->pl;
        float s = 0.0f;
        for (int ky = 0; ky < g->kh; ky++) {
          int iy = y0 + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < g->kw; kx++) {
            int ix = x0 + kx;
            if (ix >= 0 && ix < W)
              s += xp[(size_t)iy * W + ix];
          }
        }
        yp[oy * OW + ox] = s / div;
      }
    }
  }
}

/* dy: (P, OH, OW) -> dx: (P, H, W); dx = 0, then every input cell of a
 * window gets dy / (kh * kw). */
static void avgpool_backward(float *dx, const float *dy, int P, int H, int W,
                             int OH, int OW, const pool_geom *g) {
  float div = (float)g->kh * (float)g->kw;
  memset(dx, 0, (size_t)P * H * W * sizeof(float));
  for (int pl = 0; pl < P; pl++) {
    float *dxp = dx + (size_t)pl * H * W;
    const float *dyp = dy + (size_t)pl * OH * OW;
    for (int oy = 0; oy < OH; oy++) {
      for (int ox = 0; ox < OW; ox++) {
        int y0 = oy * g->sh - g->pt, x0 = ox * g->sw - g->pl;
        float d = dyp[oy * OW + ox] / div;
        for (int ky = 0; ky < g->kh; ky++) {
          int iy = y0 + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < g->kw; kx++) {
            int ix = x0 + kx;
            if (ix >= 0 && ix < W)
              dxp[(size_t)iy * W + ix] += d;
          }
        }
      }
    }
  }
}

/* f->in[0]: (N, C, H, W) -> f->out: (N, C, OH, OW); max also writes
 * f->saved[argmax]: (N, C, OH, OW). */
static void pool_forward(nto_layer *l, const nto_fwd *f) {
  pool_priv *p = l->priv;
  nto_shape i = l->in_shape[0], o = l->out_shape;
  int P = i.n * i.c;
  if (p->kind == POOL_MAX || p->kind == POOL_GLOBAL_MAX)
    maxpool_forward(f->out, f->saved[p->argmax], f->in[0], P, i.h, i.w, o.h,
                    o.w, &p->geom);
  else
    avgpool_forward(f->out, f->in[0], P, i.h, i.w, o.h, o.w, &p->geom);
}

/* b->dout: (N, C, OH, OW) -> b->din[0]: (N, C, H, W) (NULL: skipped). */
static void pool_backward(nto_layer *l, const nto_bwd *b) {
  pool_priv *p = l->priv;
  nto_shape i = l->in_shape[0], o = l->out_shape;
  int P = i.n * i.c;
  if (b->din[0] == NULL)
    return;
  if (p->kind == POOL_MAX || p->kind == POOL_GLOBAL_MAX)
    maxpool_backward(b->din[0], b->dout, b->saved[p->argmax], P, i.h, i.w,
                     o.h, o.w);
  else
    avgpool_backward(b->din[0], b->dout, P, i.h, i.w, o.h, o.w, &p->geom);
}

const nto_layer_ops nto_pooling2d_layer = {
    .type = "pooling2d",
    .priv_size = sizeof(pool_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = pool_defaults,
    .set_prop = pool_set_prop,
    .plan = pool_plan,
    .forward = pool_forward,
    .backward = pool_backward,
};
