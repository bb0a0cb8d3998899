/* gradcheck.c - finite-difference gradient check. See gradcheck.h. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gc_layer_make(nto_layer *l, const nto_layer_ops *ops,
                  const char *const *props, int n_in, const nto_shape *in) {
  nto_err err = {0};
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "gc_%s", ops->type);
  l->ops = ops;
  l->trainable = 1;
  l->priv = calloc(1, ops->priv_size ? ops->priv_size : 1);
  if (ops->defaults)
    ops->defaults(l);
  for (int i = 0; props && props[i]; i += 2) {
    int rc = ops->set_prop(l, props[i], props[i + 1], &err);
    if (rc != 0) {
      fprintf(stderr, "gradcheck: %s: set_prop(%s=%s) failed: %d %s\n",
              ops->type, props[i], props[i + 1], rc, err.msg);
      return -1;
    }
  }
  l->n_in = n_in;
  l->batch = n_in > 0 ? in[0].n : 1;
  for (int i = 0; i < n_in; i++) {
    l->in_shape[i] = in[i];
    l->in[i] = -1;
  }
  if (ops->plan(l, &err) != 0) {
    fprintf(stderr, "gradcheck: %s: plan failed: %s\n", ops->type, err.msg);
    return -1;
  }
  return 0;
}

void gc_layer_free(nto_layer *l) {
  free(l->priv);
  l->priv = NULL;
}

typedef struct {
  nto_layer *l;
  nto_fwd f;
  float *out;
  const double *r;
  size_t nout;
  int training;
  unsigned seed;
} gc_ctx;

static double loss_at(gc_ctx *g) {
  nto_rng rng;
  nto_rng_seed(&rng, g->seed + 1000);
  nto_fwd f = g->f;
  f.rng = &rng;
  f.training = g->training;
  g->l->ops->forward(g->l, &f);
  double s = 0;
  for (size_t i = 0; i < g->nout; i++)
    s += g->r[i] * (double)g->out[i];
  return s;
}

static int check_tensor(gc_ctx *g, const char *what, float *x, size_t n,
                        const float *analytic, const gc_case *c) {
  size_t stride = 1;
  if (c->max_checks > 0 && n > (size_t)c->max_checks)
    stride = (n + c->max_checks - 1) / c->max_checks;
  double h = c->h > 0 ? c->h : GC_DEFAULT_H;
  double tol = c->tol > 0 ? c->tol : GC_DEFAULT_TOL;
  int bad = 0;
  for (size_t i = 0; i < n; i += stride) {
    float keep = x[i];
    x[i] = (float)(keep + h);
    double hp = (double)x[i] - keep;
    double lp = loss_at(g);
    x[i] = (float)(keep - h);
    double hm = keep - (double)x[i];
    double lm = loss_at(g);
    x[i] = keep;
    double num = (lp - lm) / (hp + hm);
    double a = analytic[i];
    double scale = fmax(1.0, fmax(fabs(a), fabs(num)));
    if (fabs(a - num) > tol * scale || !isfinite(a)) {
      if (bad < 5)
        fprintf(stderr, "gradcheck %s %s[%zu]: analytic %.6g numeric %.6g\n",
                c->ops->type, what, i, a, num);
      bad++;
    }
  }
  return bad ? -1 : 0;
}

int gc_run(const gc_case *c) {
  nto_layer l;
  if (gc_layer_make(&l, c->ops, c->props, c->n_in, c->in_shape) != 0)
    return -1;
  nto_rng rng;
  nto_rng_seed(&rng, c->seed);
  int rc = 0;
  float *in[NTO_MAX_INPUTS] = {0}, *din[NTO_MAX_INPUTS] = {0};
  float *w[NTO_MAX_WEIGHTS] = {0}, *dw[NTO_MAX_WEIGHTS] = {0};
  float *saved[NTO_MAX_SAVED] = {0};
  size_t nout = nto_shape_numel(l.out_shape);
  float *out = nto_alloc_aligned(nout * 4);
  float *dout = nto_alloc_aligned(nout * 4);
  double *r = calloc(nout, sizeof *r);
  float *ws = nto_alloc_aligned(l.ws_bytes);
  for (int i = 0; i < c->n_in; i++) {
    size_t n = nto_shape_numel(c->in_shape[i]);
    in[i] = nto_alloc_aligned(n * 4);
    din[i] = nto_alloc_aligned(n * 4);
    for (size_t k = 0; k < n; k++)
      in[i][k] = c->positive_inputs ? 0.5f + nto_rng_uniform(&rng)
                                    : 2.0f * nto_rng_uniform(&rng) - 1.0f;
  }
  for (int j = 0; j < l.n_w; j++) {
    size_t n = nto_shape_numel(l.w[j].shape);
    w[j] = nto_alloc_aligned(n * 4);
    dw[j] = l.w[j].trainable ? nto_alloc_aligned(n * 4) : NULL;
    for (size_t k = 0; k < n; k++)
      w[j][k] = l.w[j].trainable ? 2.0f * nto_rng_uniform(&rng) - 1.0f
                                 : 0.5f + nto_rng_uniform(&rng);
  }
  for (int k = 0; k < l.n_saved; k++)
    saved[k] = nto_alloc_aligned(nto_shape_bytes(l.saved[k].shape));
  for (size_t i = 0; i < nout; i++) {
    r[i] = 2.0 * nto_rng_uniform(&rng) - 1.0;
    dout[i] = (float)r[i];
  }

  gc_ctx g = {.l = &l, .out = out, .r = r, .nout = nout,
              .training = c->training, .seed = c->seed};
  for (int i = 0; i < c->n_in; i++)
    g.f.in[i] = in[i];
  g.f.out = out;
  for (int j = 0; j < l.n_w; j++)
    g.f.w[j] = w[j];
  for (int k = 0; k < l.n_saved; k++)
    g.f.saved[k] = saved[k];
  g.f.ws = ws;

  loss_at(&g); /* forward once: fills saved tensors and out */
  nto_bwd b = {0};
  for (int i = 0; i < c->n_in; i++) {
    b.in[i] = l.bwd_needs_input ? in[i] : NULL;
    b.din[i] = din[i];
  }
  b.out = l.bwd_needs_output ? out : NULL;
  b.dout = dout;
  for (int j = 0; j < l.n_w; j++) {
    b.w[j] = w[j];
    b.dw[j] = dw[j];
  }
  for (int k = 0; k < l.n_saved; k++)
    b.saved[k] = saved[k];
  b.ws = ws;
  l.ops->backward(&l, &b);

  for (int i = 0; i < c->n_in && rc == 0; i++) {
    char what[32];
    snprintf(what, sizeof what, "din%d", i);
    rc = check_tensor(&g, what, in[i], nto_shape_numel(c->in_shape[i]),
                      din[i], c);
  }
  for (int j = 0; j < l.n_w && rc == 0; j++) {
    if (!l.w[j].trainable)
      continue;
    rc = check_tensor(&g, l.w[j].name, w[j], nto_shape_numel(l.w[j].shape),
                      dw[j], c);
  }

  for (int i = 0; i < c->n_in; i++) {
    nto_free_aligned(in[i]);
    nto_free_aligned(din[i]);
  }
  for (int j = 0; j < l.n_w; j++) {
    nto_free_aligned(w[j]);
    nto_free_aligned(dw[j]);
  }
  for (int k = 0; k < l.n_saved; k++)
    nto_free_aligned(saved[k]);
  nto_free_aligned(out);
  nto_free_aligned(dout);
  nto_free_aligned(ws);
  free(r);
  gc_layer_free(&l);
  return rc;
}
