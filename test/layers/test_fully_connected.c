/*
 * test_fully_connected.c - fully_connected layer: gradient checks, forward
 * and backward against naive loops (in double), the same bits at any compute
 * thread count, the weight regularizer's terms, weight requests, errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "parallel.h"
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fc_case {
  const char *name;
  const char *props[10];
  nto_shape in;
  int unit;
  int bias;
} fc_case;

static const fc_case cases[] = {
    {"4-d input", {"unit", "5", NULL}, {2, 3, 2, 2}, 5, 1},
    {"flat input", {"unit", "4", NULL}, {3, 1, 1, 7}, 4, 1},
    {"no bias",
     {"unit", "3", "disable_bias", "true", NULL},
     {2, 2, 3, 1},
     3,
     0},
    {"batch 1 unit 1", {"unit", "1", NULL}, {1, 1, 1, 6}, 1, 1},
    /* large enough for several column blocks and for OpenBLAS to round a
     * GEMM split at other columns differently */
    {"blocks", {"unit", "70", NULL}, {5, 3, 10, 10}, 70, 1},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Naive reference: y (n, unit) = x (n, in) . w (in, unit) + b, double. */
static void ref_forward(const float *x, const float *w, const float *b,
                        double *y, int n, int in, int unit) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < unit; j++) {
      double s = b ? b[j] : 0.0;
      for (int k = 0; k < in; k++)
        s += (double)x[i * in + k] * w[k * unit + j];
      y[i * unit + j] = s;
    }
}

/* Naive reference backward: dx (n, in), dw (in, unit), db (unit). */
static void ref_backward(const float *x, const float *w, const float *dy,
                         double *dx, double *dw, double *db, int n, int in,
                         int unit) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < in; k++) {
      double s = 0.0;
      for (int j = 0; j < unit; j++)
        s += (double)dy[i * unit + j] * w[k * unit + j];
      dx[i * in + k] = s;
    }
  for (int k = 0; k < in; k++)
    for (int j = 0; j < unit; j++) {
      double s = 0.0;
      for (int i = 0; i < n; i++)
        s += (double)x[i * in + k] * dy[i * unit + j];
      dw[k * unit + j] = s;
    }
  for (int j = 0; j < unit; j++) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
      s += dy[i * unit + j];
    db[j] = s;
  }
}

static void fill(float *x, size_t n, nto_rng *r) {
  for (size_t i = 0; i < n; i++)
    x[i] = 2.0f * nto_rng_uniform(r) - 1.0f;
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

static void check(const char *what, const float *a, const double *r, size_t n) {
  double e = rel_err(a, r, n);
  if (e > 1e-5) {
    fprintf(stderr, "%s: rel err %g\n", what, e);
    fail();
  }
}

/* Forward and backward against the reference; din/dw prefilled with
 * garbage ("=" semantics), NULL din / dw skipped. */
static void test_against_reference(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    const fc_case *k = &cases[ci];
    nto_layer l;
    assert_int_equal(
        gc_layer_make(&l, &nto_fully_connected_layer, k->props, 1, &k->in), 0);
    int n = k->in.n, in = (int)nto_shape_sample(k->in), unit = k->unit;
    assert_true(nto_shape_eq(l.out_shape, (nto_shape){n, 1, 1, unit}));
    assert_int_equal(l.n_w, k->bias ? 2 : 1);
    nto_rng rng;
    nto_rng_seed(&rng, 40 + ci);
    float *x = malloc(n * in * 4), *w = malloc(in * unit * 4);
    float *b = malloc(unit * 4), *y = malloc(n * unit * 4);
    float *dy = malloc(n * unit * 4), *dx = malloc(n * in * 4);
    float *dw = malloc(in * unit * 4), *db = malloc(unit * 4);
    double *ry = malloc(n * unit * 8), *rdx = malloc(n * in * 8);
    double *rdw = malloc(in * unit * 8), *rdb = malloc(unit * 8);
    fill(x, n * in, &rng);
    fill(w, in * unit, &rng);
    fill(b, unit, &rng);
    fill(dy, n * unit, &rng);
    nto_fwd f = {.out = y, .training = 1};
    f.in[0] = x;
    f.w[0] = w;
    f.w[1] = k->bias ? b : NULL;
    l.ops->forward(&l, &f);
    ref_forward(x, w, k->bias ? b : NULL, ry, n, in, unit);
    check(k->name, y, ry, n * unit);
    ref_backward(x, w, dy, rdx, rdw, rdb, n, in, unit);
    for (int pass = 0; pass < 3; pass++) {
      for (int i = 0; i < n * in; i++)
        dx[i] = 777.0f;
      for (int i = 0; i < in * unit; i++)
        dw[i] = -555.0f;
      for (int i = 0; i < unit; i++)
        db[i] = 999.0f;
      nto_bwd bw = {.dout = dy};
      bw.in[0] = x;
      bw.din[0] = pass == 2 ? NULL : dx;
      bw.w[0] = w;
      bw.w[1] = k->bias ? b : NULL;
      bw.dw[0] = pass == 1 ? NULL : dw;
      bw.dw[1] = pass == 1 || !k->bias ? NULL : db;
      l.ops->backward(&l, &bw);
      if (pass != 2)
        check("dx", dx, rdx, n * in);
      else
        for (int i = 0; i < n * in; i++)
          assert_true(dx[i] == 777.0f);
      if (pass != 1) {
        check("dw", dw, rdw, in * unit);
        if (k->bias)
          check("db", db, rdb, unit);
      } else {
        for (int i = 0; i < in * unit; i++)
          assert_true(dw[i] == -555.0f);
      }
    }
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw);
    free(db), free(ry), free(rdx), free(rdw), free(rdb);
    gc_layer_free(&l);
  }
}

static void test_gradcheck(void **state) {
  (void)state;
  int failed = 0;
  for (int ci = 0; ci < N_CASES; ci++) {
    gc_case c = {.ops = &nto_fully_connected_layer,
                 .props = cases[ci].props,
                 .n_in = 1,
                 .in_shape = {cases[ci].in},
                 .training = 1,
                 .seed = 3 + ci};
    if (gc_run(&c) != 0) {
      fprintf(stderr, "gradcheck failed: %s\n", cases[ci].name);
      failed++;
    }
  }
  assert_int_equal(failed, 0);
}

/* Weight requests; plan twice gives the same requests. */
static void test_weights(void **state) {
  (void)state;
  const char *const props[] = {"unit", "10", "weight_initializer", "he_uniform",
                               NULL};
  nto_shape in = {4, 3, 2, 5};
  nto_layer l;
  assert_int_equal(gc_layer_make(&l, &nto_fully_connected_layer, props, 1, &in),
                   0);
  for (int round = 0; round < 2; round++) {
    assert_int_equal(l.n_w, 2);
    assert_int_equal(l.n_saved, 0);
    assert_int_equal(l.ws_bytes, 0);
    assert_int_equal(l.bwd_needs_input, 1);
    assert_true(nto_shape_eq(l.out_shape, (nto_shape){4, 1, 1, 10}));
    assert_string_equal(l.w[0].name, "weight");
    assert_true(nto_shape_eq(l.w[0].shape, (nto_shape){1, 1, 30, 10}));
    assert_int_equal(l.w[0].ndim, 2);
    assert_int_equal(l.w[0].fan_in, 30);
    assert_int_equal(l.w[0].fan_out, 10);
    assert_int_equal(l.w[0].init, NTO_INIT_HE_UNIFORM);
    assert_int_equal(l.w[0].trainable, 1);
    assert_string_equal(l.w[1].name, "bias");
    assert_true(nto_shape_eq(l.w[1].shape, (nto_shape){1, 1, 1, 10}));
    assert_int_equal(l.w[1].ndim, 1);
    assert_int_equal(l.w[1].init, NTO_INIT_ZEROS);
    nto_err err = {0};
    assert_int_equal(l.ops->plan(&l, &err), 0);
  }
  gc_layer_free(&l);
}

/* Builds a layer; returns the first failing code with its message. */
static int try_layer(const char *const *props, nto_err *err) {
  nto_layer l;
  memset(&l, 0, sizeof l);
  l.ops = &nto_fully_connected_layer;
  l.priv = calloc(1, nto_fully_connected_layer.priv_size);
  nto_fully_connected_layer.defaults(&l);
  nto_err_clear(err);
  int rc = 0;
  for (int i = 0; props[i] && rc == 0; i += 2)
    rc = nto_fully_connected_layer.set_prop(&l, props[i], props[i + 1], err);
  if (rc == 0) {
    l.n_in = 1;
    l.batch = 2;
    l.in_shape[0] = (nto_shape){2, 1, 1, 4};
    rc = nto_fully_connected_layer.plan(&l, err);
  }
  free(l.priv);
  return rc;
}

static void expect_error(const char *const *props, int code,
                         const char *needle) {
  nto_err err;
  int rc = try_layer(props, &err);
  if (rc != code || (needle && !strstr(err.msg, needle))) {
    fprintf(stderr, "expected %d with '%s', got %d '%s'\n", code,
            needle ? needle : "", rc, err.msg);
    fail();
  }
}

static void test_errors(void **state) {
  (void)state;
#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
  expect_error(P("disable_bias", "true"), NTO_ECONFIG,
               "key 'unit' is required");
  expect_error(P("unit", "0"), NTO_ECONFIG, "got '0'");
  expect_error(P("unit", "abc"), NTO_ECONFIG, "got 'abc'");
  expect_error(P("unit", "3", "disable_bias", "2"), NTO_ECONFIG, "got '2'");
  expect_error(P("unit", "3", "bias_initializer", "nope"), NTO_ECONFIG,
               "got 'nope'");
  expect_error(P("unit", "3", "filters", "3"), NTO_ENOKEY, NULL);
  expect_error(P("unit", "3", "weight_regularizer", "l1"), NTO_ECONFIG,
               "got 'l1'");
  expect_error(P("unit", "3", "weight_regularizer_constant", "-0.1"),
               NTO_ECONFIG, "got '-0.1'");
  expect_error(P("unit", "3", "weight_regularizer_constant", "nan"),
               NTO_ECONFIG, "got 'nan'");
  expect_error(P("unit", "3", "weight_decay", "1e-4"), NTO_ECONFIG,
               "not supported: only 0");
  expect_error(P("unit", "3", "weight_decay", "l1"), NTO_ECONFIG,
               "l2norm or none");
  expect_error(P("unit", "3", "bias_decay", "x"), NTO_ECONFIG,
               "expected a number");
  /* nntrainer's exported INIs write a zero decay: nothing to do */
  expect_error(P("unit", "3", "weight_decay", "0.000000", "bias_decay", "0"),
               0, NULL);
  expect_error(
      P("unit", "3", "weight_decay", "none", "weight_regularizer", "none"),
      NTO_ECONFIG, "same setting as 'weight_decay'");
  expect_error(P("unit", "3", "weight_regularizer", "NONE",
                 "weight_regularizer_constant", "0"),
               0, NULL);
  expect_error(P("unit", "3"), 0, NULL);
#undef P
}

/* One forward and backward of case k at t compute threads. */
static void run_threads(const fc_case *k, int t, const float *x, const float *w,
                        const float *b, const float *dy, float *y, float *dx,
                        float *dw, float *db) {
  nto_err err = {0};
  assert_int_equal(nto_parallel_set_threads(t, &err), 0);
  nto_layer l;
  assert_int_equal(
      gc_layer_make(&l, &nto_fully_connected_layer, k->props, 1, &k->in), 0);
  nto_fwd f = {.out = y, .training = 1};
  f.in[0] = x;
  f.w[0] = (float *)w;
  f.w[1] = (float *)b;
  l.ops->forward(&l, &f);
  nto_bwd bw = {.dout = dy};
  bw.in[0] = x;
  bw.din[0] = dx;
  bw.w[0] = w;
  bw.w[1] = b;
  bw.dw[0] = dw;
  bw.dw[1] = db;
  l.ops->backward(&l, &bw);
  gc_layer_free(&l);
}

/* y, dX, dW and db are the same bits with 1, 2 and 3 compute threads: the
 * GEMMs run in fixed column blocks whatever the thread count. */
static void test_threads_same_bits(void **state) {
  (void)state;
  const fc_case *k = &cases[N_CASES - 1];
  size_t n = (size_t)k->in.n, in = nto_shape_sample(k->in);
  size_t unit = (size_t)k->unit;
  size_t sz[4] = {n * unit, n * in, in * unit, unit};
  nto_rng rng;
  nto_rng_seed(&rng, 77);
  float *x = malloc(n * in * 4), *w = malloc(in * unit * 4);
  float *b = malloc(unit * 4), *dy = malloc(n * unit * 4);
  fill(x, n * in, &rng);
  fill(w, in * unit, &rng);
  fill(b, unit, &rng);
  fill(dy, n * unit, &rng);
  float *r[4], *o[4];
  for (int i = 0; i < 4; i++)
    r[i] = malloc(sz[i] * 4), o[i] = malloc(sz[i] * 4);
  run_threads(k, 1, x, w, b, dy, r[0], r[1], r[2], r[3]);
  for (int t = 2; t <= 3; t++) {
    run_threads(k, t, x, w, b, dy, o[0], o[1], o[2], o[3]);
    for (int i = 0; i < 4; i++)
      if (memcmp(o[i], r[i], sz[i] * 4) != 0)
        fail_msg("%d threads: %s differs from 1 thread", t,
                 (const char *[]){"y", "dX", "dW", "db"}[i]);
  }
  for (int i = 0; i < 4; i++)
    free(r[i]), free(o[i]);
  free(x), free(w), free(b), free(dy);
  nto_parallel_free();
}

/*
 * weight_regularizer = l2norm with weight_regularizer_constant = 0.3 (and
 * nntrainer's 2020 spelling): the weight gets l2 = 0.3, the bias none;
 * forward sets reg_loss = 0.5 * C * ||W|| (0 when frozen) and leaves the
 * output as it is; backward's dW is the unregularized one plus C * W, bit
 * for bit, dX and db unchanged.
 */
static void test_regularizer(void **state) {
  (void)state;
  static const char *const spellings[][8] = {
      {"unit", "70", "weight_regularizer", "l2norm",
       "weight_regularizer_constant", "0.3", NULL},
      {"unit", "70", "weight_decay", "l2norm", "weight_decay_lambda", "0.3",
       NULL}};
  const fc_case *k = &cases[N_CASES - 1]; /* several column blocks */
  const float c = 0.3f;
  size_t n = (size_t)k->in.n, in = nto_shape_sample(k->in);
  size_t unit = (size_t)k->unit, nw = in * unit;
  nto_rng rng;
  nto_rng_seed(&rng, 78);
  float *x = malloc(n * in * 4), *w = malloc(nw * 4), *b = malloc(unit * 4);
  float *dy = malloc(n * unit * 4), *want = malloc(nw * 4);
  float *o[2][4];
  size_t sz[4] = {n * unit, n * in, nw, unit};
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < 4; i++)
      o[v][i] = malloc(sz[i] * 4);
  fill(x, n * in, &rng);
  fill(w, nw, &rng);
  fill(b, unit, &rng);
  fill(dy, n * unit, &rng);
  for (int sp = 0; sp < 2; sp++) {
    nto_layer l[2];
    assert_int_equal(
        gc_layer_make(&l[0], &nto_fully_connected_layer, k->props, 1, &k->in),
        0);
    assert_int_equal(gc_layer_make(&l[1], &nto_fully_connected_layer,
                                   spellings[sp], 1, &k->in),
                     0);
    assert_true(l[0].w[0].l2 == 0.0f && l[0].w[1].l2 == 0.0f);
    assert_true(l[1].w[0].l2 == c && l[1].w[1].l2 == 0.0f);
    for (int v = 0; v < 2; v++) {
      nto_fwd f = {.out = o[v][0], .training = 1};
      f.in[0] = x;
      f.w[0] = w;
      f.w[1] = b;
      l[v].reg_loss = -1.0;
      l[v].ops->forward(&l[v], &f);
      nto_bwd bw = {.dout = dy};
      bw.in[0] = x;
      bw.din[0] = o[v][1];
      bw.w[0] = w;
      bw.w[1] = b;
      bw.dw[0] = o[v][2];
      bw.dw[1] = o[v][3];
      l[v].ops->backward(&l[v], &bw);
    }
    double ss = 0.0;
    for (size_t i = 0; i < nw; i++)
      ss += (double)w[i] * w[i];
    assert_true(l[0].reg_loss == 0.0);
    assert_true(fabs(l[1].reg_loss - 0.5 * c * sqrt(ss)) <=
                1e-12 * l[1].reg_loss);
    for (size_t i = 0; i < nw; i++)
      want[i] = o[0][2][i] + c * w[i];
    assert_memory_equal(o[1][2], want, nw * 4);
    assert_memory_equal(o[1][0], o[0][0], sz[0] * 4); /* y */
    assert_memory_equal(o[1][1], o[0][1], sz[1] * 4); /* dX */
    assert_memory_equal(o[1][3], o[0][3], sz[3] * 4); /* db */
    /* frozen: no term */
    l[1].trainable = 0;
    nto_fwd f = {.out = o[1][0], .training = 1};
    f.in[0] = x;
    f.w[0] = w;
    f.w[1] = b;
    l[1].ops->forward(&l[1], &f);
    assert_true(l[1].reg_loss == 0.0);
    gc_layer_free(&l[0]);
    gc_layer_free(&l[1]);
  }
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < 4; i++)
      free(o[v][i]);
  free(x), free(w), free(b), free(dy), free(want);
  nto_parallel_free();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_reference),
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_threads_same_bits),
      cmocka_unit_test(test_regularizer),
      cmocka_unit_test(test_weights),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
