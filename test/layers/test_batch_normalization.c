/*
 * test_batch_normalization.c - batch_normalization layer: gradient checks
 * (training mode), forward/backward against a naive reference in double,
 * running-statistics update, eval mode, weight requests, errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Weight and saved-tensor order of the layer. */
enum { W_MEAN, W_VAR, W_GAMMA, W_BETA };
enum { S_MEAN, S_INV };

typedef struct bn_case {
  const char *name;
  const char *props[10];
  nto_shape in;
  int nf, inner; /* expected feature count and elements per feature/sample */
  double eps, momentum;
} bn_case;

static const bn_case cases[] = {
    {"nchw", {NULL}, {2, 3, 3, 3}, 3, 9, 0.001, 0.99},
    {"fc-shaped", {NULL}, {4, 1, 1, 5}, 5, 1, 0.001, 0.99},
    {"nc11",
     {"epsilon", "1e-5", "momentum", "0.9", NULL},
     {3, 4, 1, 1},
     4,
     1,
     1e-5,
     0.9},
    {"batch 1", {"momentum", "0", NULL}, {1, 2, 2, 3}, 2, 6, 0.001, 0.0},
    {"c1 h>1", {"epsilon", "0.01", NULL}, {2, 1, 3, 2}, 1, 6, 0.01, 0.99},
    {"m = 1", {NULL}, {1, 1, 1, 4}, 4, 1, 0.001, 0.99},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void fill(float *x, size_t n, double lo, double hi, nto_rng *r) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(lo + (hi - lo) * nto_rng_uniform(r));
}

/* Normwise relative error max|a - r| / max|r|. */
static double rel_err(const float *a, const double *r, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs(a[i] - r[i]));
    den = fmax(den, fabs(r[i]));
  }
  return den > 0.0 ? num / den : num;
}

static void check(const char *what, const char *name, const float *a,
                  const double *r, size_t n, double tol) {
  double e = rel_err(a, r, n);
  if (e > tol) {
    fprintf(stderr, "%s %s: rel err %g\n", name, what, e);
    fail();
  }
}

/* Element i of feature f in sample s of an (n, nf, inner) tensor. */
static size_t at(const bn_case *k, int s, int f, int i) {
  return ((size_t)s * k->nf + f) * k->inner + i;
}

/*
 * Naive reference of the training forward, in double: y (N, nf, inner),
 * batch mean and biased var (nf), and the updated running stats (nf).
 */
static void ref_train(const bn_case *k, const float *x, const float *gamma,
                      const float *beta, const float *rm0, const float *rv0,
                      double *y, double *mean, double *var, double *rm,
                      double *rv) {
  int n = k->in.n;
  double m = (double)n * k->inner;
  for (int f = 0; f < k->nf; f++) {
    double s = 0.0, q = 0.0;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++)
        s += x[at(k, b, f, i)];
    mean[f] = s / m;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++)
        q += (x[at(k, b, f, i)] - mean[f]) * (x[at(k, b, f, i)] - mean[f]);
    var[f] = q / m;
    double vu = m > 1 ? q / (m - 1) : var[f];
    rm[f] = k->momentum * rm0[f] + (1 - k->momentum) * mean[f];
    rv[f] = k->momentum * rv0[f] + (1 - k->momentum) * vu;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++)
        y[at(k, b, f, i)] =
            gamma[f] * (x[at(k, b, f, i)] - mean[f]) / sqrt(var[f] + k->eps) +
            beta[f];
  }
}

/*
 * Naive reference backward by the step-by-step chain rule (a different
 * form than the layer's closed formula): dxhat = dy*gamma,
 * dvar = sum(dxhat*(x-mu)) * -1/2 (var+eps)^-3/2,
 * dmu = sum(-dxhat/std) + dvar * sum(-2(x-mu))/m,
 * dx = dxhat/std + dvar*2(x-mu)/m + dmu/m.
 */
static void ref_backward(const bn_case *k, const float *x, const float *dy,
                         const float *gamma, double *dx, double *dgamma,
                         double *dbeta) {
  int n = k->in.n;
  double m = (double)n * k->inner;
  for (int f = 0; f < k->nf; f++) {
    double s = 0.0, q = 0.0;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++)
        s += x[at(k, b, f, i)];
    double mu = s / m;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++)
        q += (x[at(k, b, f, i)] - mu) * (x[at(k, b, f, i)] - mu);
    double var = q / m, sd = sqrt(var + k->eps);
    double dvar = 0.0, dmu = 0.0, sc = 0.0;
    dgamma[f] = dbeta[f] = 0.0;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++) {
        size_t j = at(k, b, f, i);
        double xc = x[j] - mu, dxh = dy[j] * (double)gamma[f];
        dgamma[f] += dy[j] * xc / sd;
        dbeta[f] += dy[j];
        dvar += dxh * xc * -0.5 * pow(var + k->eps, -1.5);
        dmu += -dxh / sd;
        sc += -2.0 * xc;
      }
    dmu += dvar * sc / m;
    for (int b = 0; b < n; b++)
      for (int i = 0; i < k->inner; i++) {
        size_t j = at(k, b, f, i);
        double xc = x[j] - mu;
        dx[j] = dy[j] * (double)gamma[f] / sd + dvar * 2.0 * xc / m + dmu / m;
      }
  }
}

/* Buffers of one case. */
typedef struct bufs {
  float *x, *y, *dy, *dx, *w[4], *dw[4], *saved[2];
  double *ry, *rdx, *rmean, *rvar, *rrm, *rrv, *rdg, *rdb;
} bufs;

static void bufs_alloc(bufs *B, const bn_case *k, unsigned seed) {
  size_t n = nto_shape_numel(k->in);
  nto_rng rng;
  nto_rng_seed(&rng, seed);
  B->x = malloc(n * 4);
  B->y = malloc(n * 4);
  B->dy = malloc(n * 4);
  B->dx = malloc(n * 4);
  B->ry = malloc(n * 8);
  B->rdx = malloc(n * 8);
  for (int j = 0; j < 4; j++) {
    B->w[j] = malloc(k->nf * 4);
    B->dw[j] = malloc(k->nf * 4);
  }
  B->saved[0] = malloc(k->nf * 4);
  B->saved[1] = malloc(k->nf * 4);
  double **d[] = {&B->rmean, &B->rvar, &B->rrm, &B->rrv, &B->rdg, &B->rdb};
  for (int j = 0; j < 6; j++)
    *d[j] = malloc(k->nf * 8);
  /* inputs with an offset, so the mean matters */
  fill(B->x, n, 0.5, 3.0, &rng);
  fill(B->dy, n, -1.0, 1.0, &rng);
  fill(B->w[W_MEAN], k->nf, -1.0, 1.0, &rng);
  fill(B->w[W_VAR], k->nf, 0.5, 2.0, &rng);
  fill(B->w[W_GAMMA], k->nf, -1.5, 1.5, &rng);
  fill(B->w[W_BETA], k->nf, -1.0, 1.0, &rng);
}

static void bufs_free(bufs *B) {
  free(B->x), free(B->y), free(B->dy), free(B->dx), free(B->ry);
  free(B->rdx);
  for (int j = 0; j < 4; j++)
    free(B->w[j]), free(B->dw[j]);
  free(B->saved[0]), free(B->saved[1]);
  free(B->rmean), free(B->rvar), free(B->rrm), free(B->rrv), free(B->rdg);
  free(B->rdb);
}

static void run_forward(nto_layer *l, bufs *B, int training) {
  nto_fwd f = {.out = B->y, .training = training};
  f.in[0] = B->x;
  for (int j = 0; j < 4; j++)
    f.w[j] = B->w[j];
  f.saved[0] = B->saved[0];
  f.saved[1] = B->saved[1];
  l->ops->forward(l, &f);
}

/* Training forward, running-stat update, saved tensors and backward
 * against the reference. */
static void test_train_against_reference(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    const bn_case *k = &cases[ci];
    nto_layer l;
    assert_int_equal(
        gc_layer_make(&l, &nto_batch_normalization_layer, k->props, 1, &k->in),
        0);
    assert_true(nto_shape_eq(l.out_shape, k->in));
    assert_int_equal(l.n_w, 4);
    assert_true(nto_shape_eq(l.w[0].shape, (nto_shape){1, k->nf, 1, 1}));
    bufs B;
    bufs_alloc(&B, k, 60 + ci);
    size_t n = nto_shape_numel(k->in);
    ref_train(k, B.x, B.w[W_GAMMA], B.w[W_BETA], B.w[W_MEAN], B.w[W_VAR], B.ry,
              B.rmean, B.rvar, B.rrm, B.rrv);
    run_forward(&l, &B, 1);
    check("y", k->name, B.y, B.ry, n, 1e-5);
    check("running mean", k->name, B.w[W_MEAN], B.rrm, k->nf, 1e-6);
    check("running var", k->name, B.w[W_VAR], B.rrv, k->nf, 1e-6);
    check("saved mean", k->name, B.saved[S_MEAN], B.rmean, k->nf, 1e-6);
    for (int f = 0; f < k->nf; f++)
      B.rvar[f] = 1.0 / sqrt(B.rvar[f] + k->eps);
    check("saved inv_std", k->name, B.saved[S_INV], B.rvar, k->nf, 1e-6);

    ref_backward(k, B.x, B.dy, B.w[W_GAMMA], B.rdx, B.rdg, B.rdb);
    for (int pass = 0; pass < 3; pass++) {
      /* pass 0: all; 1: din only; 2: dgamma/dbeta only */
      for (size_t i = 0; i < n; i++)
        B.dx[i] = 777.0f;
      for (int f = 0; f < k->nf; f++)
        B.dw[W_GAMMA][f] = B.dw[W_BETA][f] = -555.0f;
      nto_bwd b = {.dout = B.dy};
      b.in[0] = B.x;
      b.din[0] = pass == 2 ? NULL : B.dx;
      for (int j = 0; j < 4; j++)
        b.w[j] = B.w[j];
      b.dw[W_GAMMA] = pass == 1 ? NULL : B.dw[W_GAMMA];
      b.dw[W_BETA] = pass == 1 ? NULL : B.dw[W_BETA];
      b.saved[0] = B.saved[0];
      b.saved[1] = B.saved[1];
      l.ops->backward(&l, &b);
      if (pass != 2)
        check("dx", k->name, B.dx, B.rdx, n, 1e-5);
      else
        for (size_t i = 0; i < n; i++)
          assert_true(B.dx[i] == 777.0f);
      if (pass != 1) {
        check("dgamma", k->name, B.dw[W_GAMMA], B.rdg, k->nf, 1e-5);
        check("dbeta", k->name, B.dw[W_BETA], B.rdb, k->nf, 1e-5);
      } else {
        for (int f = 0; f < k->nf; f++)
          assert_true(B.dw[W_GAMMA][f] == -555.0f);
      }
    }
    bufs_free(&B);
    gc_layer_free(&l);
  }
}

/* Eval mode normalizes with the running statistics and updates nothing. */
static void test_eval_uses_running_stats(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    const bn_case *k = &cases[ci];
    nto_layer l;
    assert_int_equal(
        gc_layer_make(&l, &nto_batch_normalization_layer, k->props, 1, &k->in),
        0);
    bufs B;
    bufs_alloc(&B, k, 90 + ci);
    float rm[64], rv[64];
    memcpy(rm, B.w[W_MEAN], k->nf * 4);
    memcpy(rv, B.w[W_VAR], k->nf * 4);
    run_forward(&l, &B, 0);
    for (int f = 0; f < k->nf; f++) {
      assert_true(B.w[W_MEAN][f] == rm[f]);
      assert_true(B.w[W_VAR][f] == rv[f]);
    }
    for (int s = 0; s < k->in.n; s++)
      for (int f = 0; f < k->nf; f++)
        for (int i = 0; i < k->inner; i++) {
          size_t j = at(k, s, f, i);
          B.ry[j] = B.w[W_GAMMA][f] * ((double)B.x[j] - rm[f]) /
                        sqrt((double)rv[f] + k->eps) +
                    B.w[W_BETA][f];
        }
    check("eval y", k->name, B.y, B.ry, nto_shape_numel(k->in), 1e-5);
    bufs_free(&B);
    gc_layer_free(&l);
  }
}

/* Two training steps: the running statistics follow the recurrence, i.e.
 * PyTorch's with torch momentum = 1 - momentum. */
static void test_running_update_twice(void **state) {
  (void)state;
  const bn_case *k = &cases[0];
  nto_layer l;
  assert_int_equal(
      gc_layer_make(&l, &nto_batch_normalization_layer, k->props, 1, &k->in),
      0);
  bufs B;
  bufs_alloc(&B, k, 5);
  for (int f = 0; f < k->nf; f++) {
    B.w[W_MEAN][f] = 0.0f; /* the initializers' values */
    B.w[W_VAR][f] = 1.0f;
  }
  float rm0[8], rv0[8];
  memcpy(rm0, B.w[W_MEAN], k->nf * sizeof *rm0);
  memcpy(rv0, B.w[W_VAR], k->nf * sizeof *rv0);
  ref_train(k, B.x, B.w[W_GAMMA], B.w[W_BETA], rm0, rv0, B.ry, B.rmean, B.rvar,
            B.rrm, B.rrv);
  float rm1[8], rv1[8];
  for (int f = 0; f < k->nf; f++) {
    rm1[f] = (float)B.rrm[f];
    rv1[f] = (float)B.rrv[f];
  }
  ref_train(k, B.x, B.w[W_GAMMA], B.w[W_BETA], rm1, rv1, B.ry, B.rmean, B.rvar,
            B.rrm, B.rrv);
  run_forward(&l, &B, 1);
  run_forward(&l, &B, 1);
  check("running mean x2", k->name, B.w[W_MEAN], B.rrm, k->nf, 1e-6);
  check("running var x2", k->name, B.w[W_VAR], B.rrv, k->nf, 1e-6);
  bufs_free(&B);
  gc_layer_free(&l);
}

static void test_gradcheck(void **state) {
  (void)state;
  int failed = 0;
  for (int ci = 0; ci < N_CASES; ci++) {
    if (nto_shape_numel(cases[ci].in) / cases[ci].nf < 2)
      continue; /* m == 1: output is beta, gradient 0 - nothing to see */
    gc_case c = {.ops = &nto_batch_normalization_layer,
                 .props = cases[ci].props,
                 .n_in = 1,
                 .in_shape = {cases[ci].in},
                 .training = 1,
                 .seed = 11 + ci};
    if (gc_run(&c) != 0) {
      fprintf(stderr, "gradcheck failed: %s\n", cases[ci].name);
      failed++;
    }
  }
  assert_int_equal(failed, 0);
}

/* Weight and saved requests; plan twice gives the same requests. */
static void test_weights(void **state) {
  (void)state;
  static const char *const names[] = {"moving_mean", "moving_variance", "gamma",
                                      "beta"};
  const char *const props[] = {"gamma_initializer", "zeros",
                               "moving_variance_initializer", "he_normal",
                               NULL};
  const nto_init_kind inits[] = {NTO_INIT_ZEROS, NTO_INIT_HE_NORMAL,
                                 NTO_INIT_ZEROS, NTO_INIT_ZEROS};
  nto_shape ins[] = {{2, 6, 4, 4}, {8, 1, 1, 10}};
  int nfs[] = {6, 10};
  for (int t = 0; t < 2; t++) {
    nto_layer l;
    assert_int_equal(
        gc_layer_make(&l, &nto_batch_normalization_layer, props, 1, &ins[t]),
        0);
    for (int round = 0; round < 2; round++) {
      nto_shape v = {1, nfs[t], 1, 1};
      assert_int_equal(l.n_w, 4);
      for (int j = 0; j < 4; j++) {
        assert_string_equal(l.w[j].name, names[j]);
        assert_true(nto_shape_eq(l.w[j].shape, v));
        assert_int_equal(l.w[j].ndim, 1);
        assert_int_equal(l.w[j].fan_in, nfs[t]);
        assert_int_equal(l.w[j].fan_out, nfs[t]);
        assert_int_equal(l.w[j].trainable, j >= 2);
        assert_int_equal(l.w[j].init, inits[j]);
      }
      assert_int_equal(l.n_saved, 2);
      assert_string_equal(l.saved[0].name, "mean");
      assert_string_equal(l.saved[1].name, "inv_std");
      assert_true(nto_shape_eq(l.saved[0].shape, v));
      assert_true(nto_shape_eq(l.saved[1].shape, v));
      assert_int_equal(l.ws_bytes, 0);
      assert_int_equal(l.bwd_needs_input, 1);
      assert_true(nto_shape_eq(l.out_shape, ins[t]));
      nto_err err = {0};
      assert_int_equal(l.ops->plan(&l, &err), 0);
    }
    gc_layer_free(&l);
  }
}

static void expect_error(const char *key, const char *value, int code,
                         const char *needle) {
  nto_layer l;
  memset(&l, 0, sizeof l);
  l.priv = calloc(1, nto_batch_normalization_layer.priv_size);
  nto_batch_normalization_layer.defaults(&l);
  nto_err err;
  nto_err_clear(&err);
  int rc = nto_batch_normalization_layer.set_prop(&l, key, value, &err);
  free(l.priv);
  if (rc != code || (needle && !strstr(err.msg, needle))) {
    fprintf(stderr, "%s=%s: expected %d with '%s', got %d '%s'\n", key, value,
            code, needle ? needle : "", rc, err.msg);
    fail();
  }
}

static void test_errors(void **state) {
  (void)state;
  expect_error("epsilon", "0", NTO_ECONFIG, "got '0'");
  expect_error("epsilon", "-1e-3", NTO_ECONFIG, "got '-1e-3'");
  expect_error("epsilon", "tiny", NTO_ECONFIG, "got 'tiny'");
  expect_error("momentum", "1", NTO_ECONFIG, "got '1'");
  expect_error("momentum", "1.5", NTO_ECONFIG, "got '1.5'");
  expect_error("momentum", "-0.1", NTO_ECONFIG, "got '-0.1'");
  expect_error("gamma_initializer", "one", NTO_ECONFIG, "got 'one'");
  expect_error("moving_mean_initializer", "", NTO_ECONFIG, "expected");
  expect_error("axis", "1", NTO_ENOKEY, NULL);
  expect_error("unit", "1", NTO_ENOKEY, NULL);
  expect_error("momentum", "0", 0, NULL);
  expect_error("epsilon", "1e-5", 0, NULL);
  expect_error("beta_initializer", "ones", 0, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_train_against_reference),
      cmocka_unit_test(test_eval_uses_running_stats),
      cmocka_unit_test(test_running_update_twice),
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_weights),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
