/*
 * batch_normalization.c - the `batch_normalization` layer (alias `bn`),
 * Ioffe & Szegedy 2015, with nntrainer's (Keras') property names.
 *
 * Feature axis: the channel C of an (N, C, H, W) input; but for an input
 * with C == 1 and H == 1 (a fully_connected output (N, 1, 1, W)), the W
 * features. F = number of features; each feature has m = N*H*W (resp. N)
 * elements per batch.
 *
 * Training forward (f->training = 1), per feature, sums in double:
 *   mean = sum(x) / m,  var = sum((x - mean)^2) / m        (biased)
 *   y = gamma * (x - mean) / sqrt(var + epsilon) + beta
 *   moving_mean     = momentum * moving_mean     + (1 - momentum) * mean
 *   moving_variance = momentum * moving_variance + (1 - momentum) * var_u
 * with var_u = var * m / (m - 1) (unbiased; var itself when m == 1). This
 * equals PyTorch's BatchNorm with torch momentum = 1 - momentum.
 * Eval forward (f->training = 0): y = gamma * (x - moving_mean) /
 *   sqrt(moving_variance + epsilon) + beta; no statistics are updated.
 *
 * Backward (the training-mode formula), with xhat = (x - mean) * inv_std:
 *   dbeta = sum(dy), dgamma = sum(dy * xhat),
 *   dx = gamma * inv_std / m * (m * dy - dbeta - xhat * dgamma).
 * Saved for backward: "mean" and "inv_std", each (1, F, 1, 1), written by
 * the training forward; backward recomputes xhat from the forward input
 * (bwd_needs_input = 1) instead of keeping an input-sized xhat tensor.
 * No workspace.
 *
 * Frozen (l->trainable = 0; layer.h): the eval forward in training too (the
 * running statistics normalize and stay as they are, the usual practice
 * when fine-tuning), and the backward of that affine map,
 *   dx = dy * gamma / sqrt(moving_variance + epsilon)
 * with the forward's float scale; nothing saved, the input not needed.
 * Frozen with l->frozen_batch_stats: the training forward and backward
 * above (batch statistics, running ones updated), without dgamma and
 * dbeta; below the first trainable layer (no backward: no saved tensors)
 * the forward keeps the batch mean and inv_std of a feature on the stack.
 *
 * Keys: epsilon (default 0.001, > 0), momentum (default 0.99, in [0, 1)),
 * moving_mean_initializer (zeros), moving_variance_initializer (ones),
 * gamma_initializer (ones), beta_initializer (zeros).
 *
 * Weights, in nntrainer's order, each (1, F, 1, 1), export rank 1,
 * fan_in = fan_out = F: "moving_mean" and "moving_variance" (not
 * trainable), "gamma", "beta".
 */
#include "clones.h"
#include "layer.h"
#include "parallel.h"
#include "registry.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { BN_MEAN, BN_VAR, BN_GAMMA, BN_BETA, BN_NW };

static const char *const bn_weight_names[BN_NW] = {
    "moving_mean", "moving_variance", "gamma", "beta"};
static const char *const bn_init_keys[BN_NW] = {
    "moving_mean_initializer", "moving_variance_initializer",
    "gamma_initializer", "beta_initializer"};

typedef struct bn_priv {
  /* properties */
  double epsilon;            /* added to the variance, > 0 */
  double momentum;           /* running-average decay, [0, 1) */
  nto_init_kind init[BN_NW]; /* initializer per weight, BN_* order */
  /* set by plan */
  int nf;        /* F: number of features */
  int inner;     /* contiguous elements per feature per sample (H*W, 1) */
  int iw[BN_NW]; /* weight indices */
  int imean;     /* saved "mean" (1, F, 1, 1) */
  int iinv;      /* saved "inv_std" (1, F, 1, 1) */
} bn_priv;

static void bn_defaults(nto_layer *l) {
  bn_priv *p = l->priv;
  p->epsilon = 0.001;
  p->momentum = 0.99;
  p->init[BN_MEAN] = NTO_INIT_ZEROS;
  p->init[BN_VAR] = NTO_INIT_ONES;
  p->init[BN_GAMMA] = NTO_INIT_ONES;
  p->init[BN_BETA] = NTO_INIT_ZEROS;
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int bn_set_prop(nto_layer *l, const char *key, const char *value,
                       nto_err *err) {
  bn_priv *p = l->priv;
  double x;
  int rc = nto_parse_decay_key(key, value, err);
  if (rc != NTO_ENOKEY)
    return rc;
  if (strcmp(key, "epsilon") == 0) {
    rc = nto_parse_float(value, 0.0, DBL_MAX, &x, err);
    if (rc == 0 && x <= 0.0)
      rc = nto_err_set(err, NTO_ECONFIG,
                       "expected a positive number, got "
                       "'%s'",
                       value);
    if (rc == 0)
      p->epsilon = x;
    return rc;
  }
  if (strcmp(key, "momentum") == 0) {
    rc = nto_parse_float(value, 0.0, 1.0, &x, err);
    if (rc == 0 && x >= 1.0)
      rc = nto_err_set(err, NTO_ECONFIG,
                       "expected a number in [0, 1), got '%s'", value);
    if (rc == 0)
      p->momentum = x;
    return rc;
  }
  for (int k = 0; k < BN_NW; k++)
    if (strcmp(key, bn_init_keys[k]) == 0)
      return nto_parse_initializer(value, &p->init[k], err);
  return NTO_ENOKEY;
}

/* Normalizes with the batch's statistics in training: trainable, or
 * frozen with frozen_batch_stats. */
static int batch_stats(const nto_layer *l) {
  return l->trainable || l->frozen_batch_stats;
}

/* out_shape = in_shape; requests the four weights and the two saved
 * vectors. Returns 0 or NTO_ESHAPE. */
static int bn_plan(nto_layer *l, nto_err *err) {
  bn_priv *p = l->priv;
  nto_layer_plan_reset(l);
  l->bwd_needs_input = batch_stats(l); /* else an affine map */
  l->bwd_in_place = 1; /* per feature: its sums of dy first, then dx */
  if (l->n_in != 1)
    return nto_err_set(err, NTO_ESHAPE, "expected 1 input, got %d", l->n_in);
  nto_shape in = l->in_shape[0];
  if (in.c == 1 && in.h == 1) {
    p->nf = in.w;
    p->inner = 1;
  } else {
    p->nf = in.c;
    p->inner = in.h * in.w;
  }
  l->out_shape = in;
  nto_shape v = {1, p->nf, 1, 1};
  for (int k = 0; k < BN_NW; k++)
    p->iw[k] = nto_layer_add_weight(l, bn_weight_names[k], v, 1, p->init[k],
                                    p->nf, p->nf, k >= BN_GAMMA);
  p->imean = p->iinv = -1;
  if (!batch_stats(l))
    return 0;
  p->imean = nto_layer_add_saved(l, "mean", v);
  p->iinv = nto_layer_add_saved(l, "inv_std", v);
  return 0;
}

/* Partial sums in double (BN_LANES independent accumulators, so that the
 * adds pipeline and vectorize instead of waiting on one chain), combined
 * pairwise at the end. */
#define BN_LANES 8
_Static_assert(BN_LANES == 8, "lanes_total adds 8 lanes");

static double lanes_total(const double *a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* sum of (x - mu)^p, p = 1 (mu = 0: the plain sum) or 2, over one feature:
 * n blocks of inner floats, stride apart; in double. */
NTO_CLONES static double feature_sum(const float *x, int n, int inner,
                                     size_t stride, double mu, int p) {
  double a[BN_LANES] = {0};
  for (int i = 0; i < n; i++) {
    const float *r = x + (size_t)i * stride;
    int k = 0;
    if (p == 1)
      for (; k + BN_LANES <= inner; k += BN_LANES)
        for (int j = 0; j < BN_LANES; j++)
          a[j] += r[k + j];
    else
      for (; k + BN_LANES <= inner; k += BN_LANES)
        for (int j = 0; j < BN_LANES; j++) {
          double d = r[k + j] - mu;
          a[j] += d * d;
        }
    for (; k < inner; k++) {
      double d = r[k] - mu;
      a[k % BN_LANES] += p == 1 ? r[k] : d * d;
    }
  }
  return lanes_total(a);
}

/*
 * y = (x - mean) * (gamma * inv_std) + beta over feature f, with the float
 * mean and inv_std of the batch: the training forward's output, and its
 * replay's (one function, so that both round alike). x, y: (n, nf,
 * inner).
 */
NTO_CLONES static void bn_normalize_feature(const float *x, float *y, int n,
                                            int nf, int inner, int f,
                                            float mean, float gamma_inv,
                                            float beta) {
  size_t fstride = (size_t)nf * inner;
  const float *xf = x + (size_t)f * inner;
  float *yf = y + (size_t)f * inner;
  for (int i = 0; i < n; i++) {
    const float *xr = xf + i * fstride;
    float *yr = yf + i * fstride;
    for (int k = 0; k < inner; k++)
      yr[k] = (xr[k] - mean) * gamma_inv + beta;
  }
}

/* bn_normalize_feature over features [f0, f1) with the vectors (nf) of
 * the batch's mean and inv_std. */
static void bn_normalize(const float *x, float *y, int n, int nf, int inner,
                         const float *gamma, const float *beta,
                         const float *mean, const float *inv_std, int f0,
                         int f1) {
  for (int f = f0; f < f1; f++)
    bn_normalize_feature(x, y, n, nf, inner, f, mean[f], gamma[f] * inv_std[f],
                         beta[f]);
}

/*
 * Training forward. x, y: (n, nf, inner); gamma, beta: (nf);
 * mean, inv_std: (nf) written, or NULL (no backward); rmean, rvar: (nf)
 * updated with momentum.
 */
NTO_CLONES static void bn_forward_train(const float *x, float *y, int n, int nf,
                                        int inner, const float *gamma,
                                        const float *beta, float *mean,
                                        float *inv_std, float *rmean,
                                        float *rvar, double eps,
                                        double momentum, int f0, int f1) {
  size_t m = (size_t)n * inner, fstride = (size_t)nf * inner;
  for (int f = f0; f < f1; f++) {
    const float *xf = x + (size_t)f * inner;
    double mu = feature_sum(xf, n, inner, fstride, 0.0, 1) / (double)m;
    double var = feature_sum(xf, n, inner, fstride, mu, 2) / (double)m;
    double inv = 1.0 / sqrt(var + eps);
    double var_u = m > 1 ? var * (double)m / (double)(m - 1) : var;
    rmean[f] = (float)(momentum * rmean[f] + (1.0 - momentum) * mu);
    rvar[f] = (float)(momentum * rvar[f] + (1.0 - momentum) * var_u);
    float muf = (float)mu, invf = (float)inv;
    if (mean) {
      mean[f] = muf;
      inv_std[f] = invf;
    }
    /* while the feature's x is in cache */
    bn_normalize_feature(x, y, n, nf, inner, f, muf, gamma[f] * invf,
                         beta[f]);
  }
}

/* Eval forward with running statistics. x, y: (n, nf, inner);
 * gamma, beta, rmean, rvar: (nf). */
static void bn_forward_eval(const float *x, float *y, int n, int nf, int inner,
                            const float *gamma, const float *beta,
                            const float *rmean, const float *rvar, double eps,
                            int f0, int f1) {
  size_t fstride = (size_t)nf * inner;
  for (int f = f0; f < f1; f++) {
    float mu = rmean[f];
    float scale = (float)(gamma[f] / sqrt((double)rvar[f] + eps));
    float b = beta[f];
    const float *xf = x + (size_t)f * inner;
    float *yf = y + (size_t)f * inner;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < inner; k++)
        yf[i * fstride + k] = (xf[i * fstride + k] - mu) * scale + b;
  }
}

/* A pass over features [a, b) (parallel.h): the layer and its nto_fwd
 * (forward) or nto_bwd (backward). */
typedef struct bn_job {
  const nto_layer *l;
  const nto_fwd *f;
  const nto_bwd *b;
} bn_job;

/* Features [a, b) of a forward pass. */
static void bn_forward_range(void *ctx, size_t a, size_t b, int slot) {
  const bn_job *j = ctx;
  const nto_layer *l = j->l;
  const nto_fwd *f = j->f;
  const bn_priv *p = l->priv;
  (void)slot;
  if (f->training && batch_stats(l))
    bn_forward_train(f->in[0], f->out, l->batch, p->nf, p->inner,
                     f->w[p->iw[BN_GAMMA]], f->w[p->iw[BN_BETA]],
                     p->imean >= 0 ? f->saved[p->imean] : NULL,
                     p->iinv >= 0 ? f->saved[p->iinv] : NULL,
                     f->w[p->iw[BN_MEAN]], f->w[p->iw[BN_VAR]], p->epsilon,
                     p->momentum, (int)a, (int)b);
  else
    bn_forward_eval(f->in[0], f->out, l->batch, p->nf, p->inner,
                    f->w[p->iw[BN_GAMMA]], f->w[p->iw[BN_BETA]],
                    f->w[p->iw[BN_MEAN]], f->w[p->iw[BN_VAR]], p->epsilon,
                    (int)a, (int)b);
}

/* Features [a, b) of a replay (ctx: the layer and its nto_fwd). */
static void bn_replay_range(void *ctx, size_t a, size_t b, int slot) {
  const bn_job *j = ctx;
  const nto_fwd *f = j->f;
  const bn_priv *p = j->l->priv;
  (void)slot;
  bn_normalize(f->in[0], f->out, j->l->batch, p->nf, p->inner,
               f->w[p->iw[BN_GAMMA]], f->w[p->iw[BN_BETA]], f->saved[p->imean],
               f->saved[p->iinv], (int)a, (int)b);
}

/* ops.replay: the last training forward's output again, from f->in[0],
 * gamma, beta and the saved mean and inv_std, through the forward's own
 * bn_normalize, so bit for bit what it wrote (the running statistics are
 * neither read nor updated); frozen, the eval forward again. f->out may
 * equal f->in[0]. */
static void bn_replay(nto_layer *l, const nto_fwd *f) {
  const bn_priv *p = l->priv;
  bn_job j = {l, f, NULL};
  nto_parallel_for((size_t)p->nf, 1, 0,
                   batch_stats(l) ? bn_replay_range : bn_forward_range, &j);
}

/* f->in[0] -> f->out, both (N, C, H, W); see the formulas at the top.
 * Features are independent: split over the compute threads. */
static void bn_forward(nto_layer *l, const nto_fwd *f) {
  const bn_priv *p = l->priv;
  bn_job j = {l, f, NULL};
  nto_parallel_for((size_t)p->nf, 1, 0, bn_forward_range, &j);
}

/* Over one feature (n blocks of inner floats, stride apart), in double:
 * *sdy = sum(dy), *sdyx = sum(dy * (x - mu) * inv). */
NTO_CLONES static void feature_grad_sums(const float *x, const float *dy, int n,
                                         int inner, size_t stride, double mu,
                                         double inv, double *sdy,
                                         double *sdyx) {
  double a[BN_LANES] = {0}, b[BN_LANES] = {0};
  for (int i = 0; i < n; i++) {
    const float *xr = x + (size_t)i * stride, *dr = dy + (size_t)i * stride;
    int k = 0;
    for (; k + BN_LANES <= inner; k += BN_LANES)
      for (int j = 0; j < BN_LANES; j++) {
        a[j] += dr[k + j];
        b[j] += dr[k + j] * ((xr[k + j] - mu) * inv);
      }
    for (; k < inner; k++) {
      a[k % BN_LANES] += dr[k];
      b[k % BN_LANES] += dr[k] * ((xr[k] - mu) * inv);
    }
  }
  *sdy = lanes_total(a);
  *sdyx = lanes_total(b);
}

/*
 * Training-mode backward. x, dy, dx: (n, nf, inner); gamma, mean,
 * inv_std: (nf); dgamma, dbeta: (nf). dx, dgamma, dbeta may be NULL
 * (skipped); all written with "=". Sums in double.
 */
NTO_CLONES static void bn_backward_train(const float *x, const float *dy,
                                         float *dx, int n, int nf, int inner,
                                         const float *gamma, const float *mean,
                                         const float *inv_std, float *dgamma,
                                         float *dbeta, int f0, int f1) {
  size_t m = (size_t)n * inner, fstride = (size_t)nf * inner;
  for (int f = f0; f < f1; f++) {
    const float *xf = x + (size_t)f * inner;
    const float *dyf = dy + (size_t)f * inner;
    double mu = mean[f], inv = inv_std[f], sdy, sdyx;
    feature_grad_sums(xf, dyf, n, inner, fstride, mu, inv, &sdy, &sdyx);
    if (dgamma)
      dgamma[f] = (float)sdyx;
    if (dbeta)
      dbeta[f] = (float)sdy;
    if (!dx)
      continue;
    double c = gamma[f] * inv / (double)m, dm = (double)m;
    float *dxf = dx + (size_t)f * inner;
    for (int i = 0; i < n; i++) {
      const float *xr = xf + i * fstride, *dr = dyf + i * fstride;
      float *dxr = dxf + i * fstride;
      for (int k = 0; k < inner; k++) {
        double xhat = (xr[k] - mu) * inv;
        dxr[k] = (float)(c * (dm * dr[k] - sdy - xhat * sdyx));
      }
    }
  }
}

/* Frozen backward: dx = dy * (float)(gamma / sqrt(rvar + eps)), the eval
 * forward's scale. dy, dx: (n, nf, inner); gamma, rvar: (nf). */
static void bn_backward_frozen(const float *dy, float *dx, int n, int nf,
                               int inner, const float *gamma, const float *rvar,
                               double eps, int f0, int f1) {
  size_t fstride = (size_t)nf * inner;
  for (int f = f0; f < f1; f++) {
    float scale = (float)(gamma[f] / sqrt((double)rvar[f] + eps));
    const float *dyf = dy + (size_t)f * inner;
    float *dxf = dx + (size_t)f * inner;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < inner; k++)
        dxf[i * fstride + k] = dyf[i * fstride + k] * scale;
  }
}

/* Features [a, b) of a backward pass (ctx: the layer and its nto_bwd). */
static void bn_backward_range(void *ctx, size_t a, size_t c, int slot) {
  const bn_job *j = ctx;
  const nto_bwd *b = j->b;
  const bn_priv *p = j->l->priv;
  (void)slot;
  if (!batch_stats(j->l)) {
    if (b->din[0])
      bn_backward_frozen(b->dout, b->din[0], j->l->batch, p->nf, p->inner,
                         b->w[p->iw[BN_GAMMA]], b->w[p->iw[BN_VAR]], p->epsilon,
                         (int)a, (int)c);
    return;
  }
  int tr = j->l->trainable; /* frozen: no dgamma, dbeta */
  bn_backward_train(b->in[0], b->dout, b->din[0], j->l->batch, p->nf, p->inner,
                    b->w[p->iw[BN_GAMMA]], b->saved[p->imean],
                    b->saved[p->iinv], tr ? b->dw[p->iw[BN_GAMMA]] : NULL,
                    tr ? b->dw[p->iw[BN_BETA]] : NULL, (int)a, (int)c);
}

/* dout, in[0] -> din[0], dgamma, dbeta; see the formulas at the top.
 * Split over the compute threads by feature. */
static void bn_backward(nto_layer *l, const nto_bwd *b) {
  const bn_priv *p = l->priv;
  bn_job j = {l, NULL, b};
  nto_parallel_for((size_t)p->nf, 1, 0, bn_backward_range, &j);
}

/* ops.narrow: `channels` channels of an (N, C, H, W) input
 * (NTO_NARROW_CHANNELS; the statistics are per channel). */
static int bn_narrow(nto_layer *l, int mode, int channels) {
  nto_shape in = l->in_shape[0];
  if (mode != NTO_NARROW_CHANNELS || (in.c == 1 && in.h == 1))
    return NTO_EINVAL;
  l->in_shape[0].c = channels;
  return 0;
}

const nto_layer_ops nto_batch_normalization_layer = {
    .type = "batch_normalization",
    .priv_size = sizeof(bn_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = bn_defaults,
    .set_prop = bn_set_prop,
    .plan = bn_plan,
    .forward = bn_forward,
    .backward = bn_backward,
    .replay = bn_replay,
    .narrow = bn_narrow,
};
