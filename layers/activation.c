/*
 * activation.c - the `activation` layer: an elementwise (or, for softmax,
 * per-sample) nonlinearity. out shape = in shape.
 *
 * Key: activation = relu | relu6 | sigmoid | tanh | softmax | leaky_relu |
 * none (required). leaky_relu has slope 0.01 (PyTorch's default); none is
 * the identity. softmax runs over the c*h*w values of each sample.
 *
 * Backward reads only the forward OUTPUT (bwd_needs_output = 1), so the
 * input need not be kept for backward:
 *   relu        y' = [y > 0]
 *   relu6       y' = [0 < y < 6]   (PyTorch hardtanh(0, 6): 0 at both ends)
 *   leaky_relu  y' = y > 0 ? 1 : 0.01   (sign(y) = sign(x) for slope > 0)
 *   sigmoid     y' = y (1 - y)
 *   tanh        y' = 1 - y^2
 *   softmax     dx = y * (dy - sum_j dy_j y_j)   (Jacobian-vector product)
 * out_kind tells the loss it may fuse: NTO_OUT_SOFTMAX, NTO_OUT_SIGMOID.
 */
#include "clones.h"
#include "layer.h"
#include "parallel.h"
#include "registry.h"

#include <math.h>
#include <string.h>

typedef enum {
  ACT_UNSET = -1,
  ACT_RELU,
  ACT_RELU6,
  ACT_SIGMOID,
  ACT_TANH,
  ACT_SOFTMAX,
  ACT_LEAKY_RELU,
  ACT_NONE,
} act_kind;

/* Same order as act_kind. */
static const char *const act_names[] = {
    "relu", "relu6", "sigmoid", "tanh", "softmax", "leaky_relu", "none", NULL};

#define LEAKY_SLOPE 0.01f

typedef struct act_priv {
  act_kind kind; /* ACT_UNSET until the key is given */
} act_priv;

/* Marks the required key as missing. */
static void act_defaults(nto_layer *l) {
  act_priv *p = l->priv;
  p->kind = ACT_UNSET;
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int act_set_prop(nto_layer *l, const char *key, const char *value,
                        nto_err *err) {
  act_priv *p = l->priv;
  if (strcmp(key, "activation") != 0)
    return NTO_ENOKEY;
  int k;
  int rc = nto_parse_enum(value, act_names, &k, err);
  if (rc == 0)
    p->kind = (act_kind)k;
  return rc;
}

/* out_shape = in_shape[0]. Returns 0 or NTO_ECONFIG (no activation key). */
static int act_plan(nto_layer *l, nto_err *err) {
  act_priv *p = l->priv;
  if (p->kind == ACT_UNSET)
    return nto_err_set(err, NTO_ECONFIG, "key 'activation' is required");
  l->out_shape = l->in_shape[0];
  l->bwd_needs_output = 1;
  l->bwd_in_place = 1; /* elementwise; softmax reads a sample's dy (its
                          dot product) before writing its dx */
  l->out_kind = p->kind == ACT_SOFTMAX   ? NTO_OUT_SOFTMAX
                : p->kind == ACT_SIGMOID ? NTO_OUT_SIGMOID
                                         : NTO_OUT_PLAIN;
  return 0;
}

/* ops.narrow: `channels` channels (NTO_NARROW_CHANNELS), every kind but
 * softmax (which reads a sample's values together). */
static int act_narrow(nto_layer *l, int mode, int channels) {
  const act_priv *p = l->priv;
  if (mode != NTO_NARROW_CHANNELS || p->kind == ACT_SOFTMAX)
    return NTO_EINVAL;
  l->in_shape[0].c = channels;
  return 0;
}

/* Logistic function without overflow: for x < 0 use e^x / (1 + e^x). */
static float sigmoidf(float x) {
  if (x >= 0.0f)
    return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

/*
 * x, y: (n) elementwise y = act(x); x may equal y. Not for softmax. One
 * loop per kind, selects instead of a branch per element (which
 * mispredicts on half of random-signed data); relu and relu6 vectorize.
 * NaN maps to 0 under relu and relu6, as the comparisons are false for
 * it.
 */
NTO_CLONES static void act_elementwise_forward(act_kind k, float *y,
                                               const float *x, size_t n) {
  switch (k) {
  case ACT_RELU:
    for (size_t i = 0; i < n; i++)
      y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    break;
  case ACT_RELU6:
    for (size_t i = 0; i < n; i++) {
      float v = x[i] > 0.0f ? x[i] : 0.0f;
      y[i] = v < 6.0f ? v : 6.0f;
    }
    break;
  case ACT_SIGMOID:
    for (size_t i = 0; i < n; i++)
      y[i] = sigmoidf(x[i]);
    break;
  case ACT_TANH:
    for (size_t i = 0; i < n; i++)
      y[i] = tanhf(x[i]);
    break;
  case ACT_LEAKY_RELU:
    for (size_t i = 0; i < n; i++)
      y[i] = x[i] > 0.0f ? x[i] : LEAKY_SLOPE * x[i];
    break;
  default:
    if (y != x)
      memmove(y, x, n * sizeof *y);
    break;
  }
}

/* y, dy, dx: (n) elementwise dx = dy * act'(from y); dx may equal dy. One
 * loop per kind; the 0/1 derivatives multiply dy (so a NaN or infinite dy
 * stays NaN where the derivative is 0, and the sign of a zero is dy's);
 * relu's and relu6's come from comparisons as integers, so that their
 * loops vectorize. */
NTO_CLONES static void act_elementwise_backward(act_kind k, float *dx,
                                                const float *y, const float *dy,
                                                size_t n) {
  switch (k) {
  case ACT_RELU:
    for (size_t i = 0; i < n; i++) {
      int on = y[i] > 0.0f; /* through an int, GCC 12 vectorizes it */
      dx[i] = dy[i] * (float)on;
    }
    break;
  case ACT_RELU6:
    for (size_t i = 0; i < n; i++) {
      int on = (y[i] > 0.0f) & (y[i] < 6.0f);
      dx[i] = dy[i] * (float)on;
    }
    break;
  case ACT_SIGMOID:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
    break;
  case ACT_TANH:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    break;
  case ACT_LEAKY_RELU:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * (y[i] > 0.0f ? 1.0f : LEAKY_SLOPE);
    break;
  default:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * 1.0f;
    break;
  }
}

/*
 * x, y: (N, D) with D = c*h*w; y = softmax(x) per row, stabilized by
 * subtracting the row max (so exp never overflows); sum in double.
 * x may equal y.
 */
static void softmax_forward(float *y, const float *x, int N, size_t D) {
  for (int s = 0; s < N; s++) {
    const float *xr = x + (size_t)s * D;
    float *yr = y + (size_t)s * D;
    float mx = xr[0];
    for (size_t i = 1; i < D; i++)
      mx = xr[i] > mx ? xr[i] : mx;
    double sum = 0.0;
    for (size_t i = 0; i < D; i++) {
      yr[i] = expf(xr[i] - mx);
      sum += yr[i];
    }
    for (size_t i = 0; i < D; i++)
      yr[i] = (float)(yr[i] / sum);
  }
}

/*
 * y, dy, dx: (N, D); dx = y * (dy - sum_j dy_j y_j) per row (softmax
 * Jacobian J = diag(y) - y y^T is symmetric). dx may equal dy.
 */
static void softmax_backward(float *dx, const float *y, const float *dy, int N,
                             size_t D) {
  for (int s = 0; s < N; s++) {
    const float *yr = y + (size_t)s * D, *dyr = dy + (size_t)s * D;
    float *dxr = dx + (size_t)s * D;
    double dot = 0.0;
    for (size_t i = 0; i < D; i++)
      dot += (double)dyr[i] * yr[i];
    for (size_t i = 0; i < D; i++)
      dxr[i] = yr[i] * (dyr[i] - (float)dot);
  }
}

/* An element-wise pass split over the compute threads (parallel.h):
 * forward when dy is NULL (y = act(x)), else backward (dx = dy * act'(y),
 * x holding y). */
typedef struct act_job {
  act_kind kind;
  float *out;
  const float *x, *dy;
} act_job;

#define ACT_GRAIN 4096 /* elements per range: 16 KiB, whole pages */

static void act_range(void *ctx, size_t a, size_t b, int slot) {
  const act_job *j = ctx;
  (void)slot;
  if (j->dy)
    act_elementwise_backward(j->kind, j->out + a, j->x + a, j->dy + a, b - a);
  else
    act_elementwise_forward(j->kind, j->out + a, j->x + a, b - a);
}

/* f->in[0], f->out: (N, C, H, W). */
static void act_forward(nto_layer *l, const nto_fwd *f) {
  act_priv *p = l->priv;
  nto_shape s = l->out_shape;
  if (p->kind == ACT_SOFTMAX) {
    softmax_forward(f->out, f->in[0], s.n, nto_shape_sample(s));
    return;
  }
  act_job j = {p->kind, f->out, f->in[0], NULL};
  nto_parallel_for(nto_shape_numel(s), ACT_GRAIN, 0, act_range, &j);
}

/* b->out, b->dout, b->din[0]: (N, C, H, W); din[0] may be NULL (skip). */
static void act_backward(nto_layer *l, const nto_bwd *b) {
  act_priv *p = l->priv;
  nto_shape s = l->out_shape;
  if (b->din[0] == NULL)
    return;
  if (p->kind == ACT_SOFTMAX) {
    softmax_backward(b->din[0], b->out, b->dout, s.n, nto_shape_sample(s));
    return;
  }
  act_job j = {p->kind, b->din[0], b->out, b->dout};
  nto_parallel_for(nto_shape_numel(s), ACT_GRAIN, 0, act_range, &j);
}

const nto_layer_ops nto_activation_layer = {
    .type = "activation",
    .priv_size = sizeof(act_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = act_defaults,
    .set_prop = act_set_prop,
    .plan = act_plan,
    .forward = act_forward,
    .backward = act_backward,
    .replay = act_forward, /* a pure function of the input; in place is
                              fine (each element reads only itself; the
                              model replays only elementwise kinds) */
    .narrow = act_narrow,
};
