/*
 * fully_connected.c - the `fully_connected` layer (alias `fc`): an affine
 * map of each flattened sample, in nntrainer's layout
 *   out (N, unit) = x (N, in) . weight (in, unit) + bias (unit),
 * with the input (N, C, H, W) read as (N, in = C*H*W) and the output shaped
 * (N, 1, 1, unit). (PyTorch's nn.Linear stores the transpose, (unit, in).)
 *
 * Keys: unit (required, >= 1), weight_initializer (default xavier_uniform),
 * bias_initializer (default zeros), disable_bias (default false),
 * weight_regularizer (l2norm | none, default none) and
 * weight_regularizer_constant (default 1), or their 2020 spellings
 * weight_decay and weight_decay_lambda (props.h nto_regularizer): the
 * weight's, not the bias's.
 *
 * Weights, in this order: "weight" (1, 1, in, unit), export rank 2,
 * fan_in = in, fan_out = unit; "bias" (1, 1, 1, unit), export rank 1,
 * unless disable_bias.
 *
 * Forward and backward are cblas_sgemm calls; no workspace, nothing saved;
 * backward reads the forward input (bwd_needs_input = 1):
 *   dW = x^T . dout, db = sum over the batch of dout, dx = dout . W^T,
 * each written with "=" and skipped when its pointer is NULL. With an
 * l2norm regularizer of constant C, forward sets l->reg_loss to
 * 0.5 * C * ||W|| and backward adds C * W to dW (layer.h
 * nto_layer_reg_loss, nto_layer_reg_grad).
 *
 * Compute threads (parallel.h): each GEMM is split into min(cols,
 * FC_BLOCKS) fixed blocks of its output's columns (unit for out and dW, in
 * for dx), each block a single-threaded GEMM, the threads taking whole
 * blocks (db, a sum per unit, runs on the executor). The blocks do not
 * depend on the thread count, so neither do the results.
 */
#include "layer.h"
#include "parallel.h"
#include "registry.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

#define FC_UNIT_MAX (1L << 24) /* largest accepted `unit` */
#define FC_BLOCKS 4            /* column blocks of a GEMM (see the top) */

typedef struct fc_priv {
  /* properties */
  int unit; /* output features; 0 = not set (required) */
  nto_init_kind winit, binit;
  int disable_bias;
  nto_regularizer reg; /* the weight's */
  /* set by plan */
  int in; /* input features C*H*W */
  int iw; /* index of "weight" */
  int ib; /* index of "bias", -1 with disable_bias */
} fc_priv;

static void fc_defaults(nto_layer *l) {
  fc_priv *p = l->priv;
  p->winit = NTO_INIT_XAVIER_UNIFORM;
  p->binit = NTO_INIT_ZEROS;
  nto_regularizer_defaults(&p->reg);
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message). */
static int fc_set_prop(nto_layer *l, const char *key, const char *value,
                       nto_err *err) {
  fc_priv *p = l->priv;
  if (strcmp(key, "unit") == 0) {
    long x;
    int rc = nto_parse_int(value, 1, FC_UNIT_MAX, &x, err);
    if (rc == 0)
      p->unit = (int)x;
    return rc;
  }
  int rc = nto_parse_regularizer_key(key, value, &p->reg, err);
  if (rc != NTO_ENOKEY)
    return rc;
  return nto_parse_weight_bias_key(key, value, &p->winit, &p->binit,
                                   &p->disable_bias, err);
}

/* out_shape = (N, 1, 1, unit); requests weight and bias. Returns 0 or
 * NTO_ECONFIG ('unit' missing). */
static int fc_plan(nto_layer *l, nto_err *err) {
  fc_priv *p = l->priv;
  nto_layer_plan_reset(l);
  l->bwd_needs_input = 1;
  if (p->unit == 0)
    return nto_err_set(err, NTO_ECONFIG, "key 'unit' is required");
  if (l->n_in != 1)
    return nto_err_set(err, NTO_ESHAPE, "expected 1 input, got %d", l->n_in);
  size_t in = nto_shape_sample(l->in_shape[0]);
  if (in > (size_t)INT_MAX)
    return nto_err_set(err, NTO_ESHAPE, "input of %zu features is too large",
                       in);
  p->in = (int)in;
  l->out_shape = (nto_shape){l->batch, 1, 1, p->unit};
  p->iw = nto_layer_add_weight(l, "weight", (nto_shape){1, 1, p->in, p->unit},
                               2, p->winit, p->in, p->unit, 1);
  l->w[p->iw].l2 = nto_regularizer_l2(&p->reg);
  p->ib = -1;
  if (!p->disable_bias)
    p->ib = nto_layer_add_weight(l, "bias", (nto_shape){1, 1, 1, p->unit}, 1,
                                 p->binit, p->in, p->unit, 1);
  return 0;
}

/* One of the layer's GEMMs over column blocks [b0, b1) of its output. */
enum { FC_FWD, FC_DW, FC_DX };
typedef struct fc_job {
  const fc_priv *p;
  int n, kind;             /* batch, FC_* */
  const float *x, *w, *dy; /* x (n, in), W (in, unit), dout (n, unit) */
  float *out;              /* out (n, unit), dW (in, unit) or dx (n, in) */
} fc_job;

/* Columns of the GEMM's output: unit for out and dW, in for dx. */
static int fc_cols(const fc_job *j) {
  return j->kind == FC_DX ? j->p->in : j->p->unit;
}

static int fc_blocks(const fc_job *j) {
  int c = fc_cols(j);
  return c < FC_BLOCKS ? c : FC_BLOCKS;
}

static void fc_range(void *ctx, size_t b0, size_t b1, int slot) {
  const fc_job *j = ctx;
  int in = j->p->in, unit = j->p->unit, c = fc_cols(j), nb = fc_blocks(j);
  (void)slot;
  for (size_t b = b0; b < b1; b++) {
    int c0 = (int)((long)c * (long)b / nb);
    int c1 = (int)((long)c * (long)(b + 1) / nb);
    if (j->kind == FC_FWD) /* out[:, c0:c1] += x (n, in) . W[:, c0:c1] */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->n, c1 - c0, in,
                  1.0f, j->x, in, j->w + c0, unit, 1.0f, j->out + c0, unit);
    else if (j->kind == FC_DW) /* dW[:, c0:c1] = x^T (in, n) . dy[:, c0:c1] */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, c1 - c0, j->n,
                  1.0f, j->x, in, j->dy + c0, unit, 0.0f, j->out + c0, unit);
    else /* dx[:, c0:c1] = dy (n, unit) . W[c0:c1, :]^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, c1 - c0, unit,
                  1.0f, j->dy, unit, j->w + (size_t)c0 * unit, unit, 0.0f,
                  j->out + c0, in);
  }
}

static void fc_gemm(const fc_job *j) {
  nto_parallel_for_blas((size_t)fc_blocks(j), 1, 0, fc_range, (void *)j);
}

/* f->in[0]: (N, in) -> f->out: (N, unit) = x . W + b; l->reg_loss. */
static void fc_forward(nto_layer *l, const nto_fwd *f) {
  fc_priv *p = l->priv;
  l->reg_loss = nto_layer_reg_loss(l, f->w);
  int n = l->batch, unit = p->unit;
  const float *bias = p->ib >= 0 ? f->w[p->ib] : NULL;
  for (int i = 0; i < n; i++) {
    float *r = f->out + (size_t)i * unit;
    if (bias)
      memcpy(r, bias, (size_t)unit * sizeof *r);
    else
      memset(r, 0, (size_t)unit * sizeof *r);
  }
  fc_job j = {p, n, FC_FWD, f->in[0], f->w[p->iw], NULL, f->out};
  fc_gemm(&j);
}

/* dout: (N, unit), in[0]: (N, in) -> dW (in, unit), db (unit),
 * din[0] (N, in); each written with "=", skipped when NULL. */
static void fc_backward(nto_layer *l, const nto_bwd *b) {
  fc_priv *p = l->priv;
  int n = l->batch, unit = p->unit;
  float *dw = b->dw[p->iw];
  float *db = p->ib >= 0 ? b->dw[p->ib] : NULL;
  if (dw) { /* dW (in, unit) = x^T (in, n) . dout (n, unit) + C * W */
    fc_job j = {p, n, FC_DW, b->in[0], NULL, b->dout, dw};
    fc_gemm(&j);
    nto_layer_reg_grad(l, p->iw, b->w[p->iw], dw, (size_t)p->in * unit);
  }
  if (db) {
    for (int j = 0; j < unit; j++) {
      double s = 0.0;
      for (int i = 0; i < n; i++)
        s += b->dout[(size_t)i * unit + j];
      db[j] = (float)s;
    }
  }
  if (b->din[0]) { /* dx (n, in) = dout (n, unit) . W^T (unit, in) */
    fc_job j = {p, n, FC_DX, NULL, b->w[p->iw], b->dout, b->din[0]};
    fc_gemm(&j);
  }
}

const nto_layer_ops nto_fully_connected_layer = {
    .type = "fully_connected",
    .priv_size = sizeof(fc_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = fc_defaults,
    .set_prop = fc_set_prop,
    .plan = fc_plan,
    .forward = fc_forward,
    .backward = fc_backward,
};
