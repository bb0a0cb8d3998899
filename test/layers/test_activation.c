/*
 * test_activation.c - activation layer: gradient checks for every kind,
 * hand-computed values (softmax stability, relu6 clipping), and property
 * errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "registry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* |a - b| <= tol, failing on NaN (cmocka's assert_float_equal does not). */
#define assert_near(a, b, tol)                                                 \
  assert_true(fabs((double)(a) - (double)(b)) <= (double)(tol))

/* Planned activation layer of `kind` for shape s; free with gc_layer_free. */
static void make_act(nto_layer *l, const char *kind, nto_shape s) {
  const char *props[] = {"activation", kind, NULL};
  assert_int_equal(gc_layer_make(l, &nto_activation_layer, props, 1, &s), 0);
}

/* Runs forward of a planned layer: x (in_shape) -> y (out_shape). */
static void fwd(nto_layer *l, const float *x, float *y) {
  nto_fwd f = {0};
  f.in[0] = x;
  f.out = y;
  f.training = 1;
  l->ops->forward(l, &f);
}

/*
 * Finite-difference check of din for explicit inputs x (shape s, one input),
 * L = sum r_i out_i with fixed r; central differences in double. The
 * caller picks x so that x +- h crosses no kink. Returns mismatch count.
 */
static int fd_check(const char *kind, nto_shape s, const float *x0, double h,
                    double tol) {
  nto_layer l;
  make_act(&l, kind, s);
  size_t n = nto_shape_numel(s);
  float *x = malloc(n * 4), *y = malloc(n * 4), *dy = malloc(n * 4),
        *dx = malloc(n * 4);
  memcpy(x, x0, n * 4);
  for (size_t i = 0; i < n; i++)
    dy[i] = (float)(0.3 + 0.7 * sin((double)i * 1.7));
  fwd(&l, x, y);
  nto_bwd b = {0};
  b.out = y;
  b.dout = dy;
  b.din[0] = dx;
  l.ops->backward(&l, &b);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double lp = 0, lm = 0;
    float keep = x[i];
    x[i] = (float)(keep + h);
    fwd(&l, x, y);
    for (size_t j = 0; j < n; j++)
      lp += (double)dy[j] * y[j];
    x[i] = (float)(keep - h);
    fwd(&l, x, y);
    for (size_t j = 0; j < n; j++)
      lm += (double)dy[j] * y[j];
    x[i] = keep;
    double num = (lp - lm) / (2 * h), a = dx[i];
    if (fabs(a - num) > tol * fmax(1.0, fmax(fabs(a), fabs(num))))
      bad++;
  }
  free(x);
  free(y);
  free(dy);
  free(dx);
  gc_layer_free(&l);
  return bad;
}

/* gc_run on random inputs for the smooth kinds. */
static void test_gradcheck_smooth(void **state) {
  (void)state;
  static const char *const kinds[] = {"sigmoid", "tanh", "softmax", "none"};
  for (size_t k = 0; k < 4; k++) {
    const char *props[] = {"activation", kinds[k], NULL};
    gc_case c = {.ops = &nto_activation_layer,
                 .props = props,
                 .n_in = 1,
                 .in_shape = {{2, 3, 2, 2}},
                 .training = 1,
                 .seed = 7 + (unsigned)k};
    assert_int_equal(gc_run(&c), 0);
  }
}

/* gc_run for the piecewise-linear kinds on inputs in [0.5, 1.5]: away from
 * the kinks at 0 (and inside (0, 6) for relu6). */
static void test_gradcheck_piecewise_positive(void **state) {
  (void)state;
  static const char *const kinds[] = {"relu", "relu6", "leaky_relu"};
  for (size_t k = 0; k < 3; k++) {
    const char *props[] = {"activation", kinds[k], NULL};
    gc_case c = {.ops = &nto_activation_layer,
                 .props = props,
                 .n_in = 1,
                 .in_shape = {{2, 2, 3, 3}},
                 .training = 1,
                 .seed = 11,
                 .positive_inputs = 1};
    assert_int_equal(gc_run(&c), 0);
  }
}

/* Explicit inputs on both sides of each kink (all >= 0.1 away from 0 and
 * 6, h = 1e-2), so the zero-gradient branches are checked too. The pieces
 * are linear, so central differences are exact up to float rounding of y
 * (~1e-5 here): tol 1e-3 is tight enough to see leaky_relu's 0.01 slope. */
static void test_gradcheck_piecewise_kinks(void **state) {
  (void)state;
  static const float x[12] = {-2.0f, -0.5f, -0.1f, 0.1f, 0.7f, 2.5f,
                              4.0f,  5.5f,  5.9f,  6.1f, 7.0f, -3.3f};
  nto_shape s = {2, 1, 2, 3};
  assert_int_equal(fd_check("relu", s, x, 1e-2, 1e-3), 0);
  assert_int_equal(fd_check("relu6", s, x, 1e-2, 1e-3), 0);
  assert_int_equal(fd_check("leaky_relu", s, x, 1e-2, 1e-3), 0);
  assert_int_equal(fd_check("sigmoid", s, x, 1e-2, 1e-2), 0);
}

/* The checker must be able to fail: a kink crossed gives a mismatch. */
static void test_fd_check_detects_kink(void **state) {
  (void)state;
  static const float x[2] = {0.001f, 1.0f};
  nto_shape s = {1, 1, 1, 2};
  assert_true(fd_check("relu", s, x, 1e-2, 1e-2) > 0);
}

/* softmax: each sample sums to 1; inputs 1000, 1001, 1002 give the same
 * result as 0, 1, 2 (no overflow); -1000 rows are fine too. */
static void test_softmax_values(void **state) {
  (void)state;
  nto_layer l;
  make_act(&l, "softmax", (nto_shape){3, 1, 1, 3});
  const float x[9] = {1000, 1001, 1002, 0, 1, 2, -1000, -1000, -999};
  float y[9];
  fwd(&l, x, y);
  double e1 = exp(1.0), e2 = exp(2.0), z = 1 + e1 + e2;
  for (int s = 0; s < 2; s++) {
    assert_near(y[s * 3 + 0], 1 / z, 1e-6);
    assert_near(y[s * 3 + 1], e1 / z, 1e-6);
    assert_near(y[s * 3 + 2], e2 / z, 1e-6);
  }
  assert_near(y[6], 1 / (2 + e1), 1e-6);
  assert_near(y[8], e1 / (2 + e1), 1e-6);
  for (int s = 0; s < 3; s++)
    assert_near(y[s * 3] + y[s * 3 + 1] + y[s * 3 + 2], 1.0, 1e-6);
  for (int i = 0; i < 9; i++)
    assert_true(isfinite(y[i]));
  assert_int_equal(l.out_kind, NTO_OUT_SOFTMAX);
  assert_int_equal(l.bwd_needs_output, 1);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){3, 1, 1, 3}));
  gc_layer_free(&l);
}

/* softmax over c*h*w: a (1, 2, 1, 2) sample is one row of 4. */
static void test_softmax_over_chw(void **state) {
  (void)state;
  nto_layer l;
  make_act(&l, "softmax", (nto_shape){1, 2, 1, 2});
  const float x[4] = {0, 0, 0, 0};
  float y[4];
  fwd(&l, x, y);
  for (int i = 0; i < 4; i++)
    assert_near(y[i], 0.25, 1e-7);
  gc_layer_free(&l);
}

/* relu6 clips to [0, 6]; its backward passes gradient only for 0 < y < 6. */
static void test_relu6_values(void **state) {
  (void)state;
  nto_layer l;
  make_act(&l, "relu6", (nto_shape){1, 1, 1, 5});
  const float x[5] = {-3, 0, 3, 6, 9};
  const float want[5] = {0, 0, 3, 6, 6};
  float y[5], dx[5];
  const float dy[5] = {1, 1, 1, 1, 1};
  fwd(&l, x, y);
  for (int i = 0; i < 5; i++)
    assert_near(y[i], want[i], 0);
  nto_bwd b = {0};
  b.out = y;
  b.dout = dy;
  b.din[0] = dx;
  l.ops->backward(&l, &b);
  const float gwant[5] = {0, 0, 1, 0, 0};
  for (int i = 0; i < 5; i++)
    assert_near(dx[i], gwant[i], 0);
  assert_int_equal(l.out_kind, NTO_OUT_PLAIN);
  gc_layer_free(&l);
}

/* relu, leaky_relu (0.01), sigmoid (no overflow at +-100), tanh, none. */
static void test_other_values(void **state) {
  (void)state;
  const float x[4] = {-2, -100, 0.5f, 100};
  float y[4];
  nto_shape s = {1, 1, 1, 4};
  nto_layer l;

  make_act(&l, "relu", s);
  fwd(&l, x, y);
  assert_near(y[0], 0, 0);
  assert_near(y[2], 0.5, 0);
  gc_layer_free(&l);

  make_act(&l, "leaky_relu", s);
  fwd(&l, x, y);
  assert_near(y[0], -0.02, 1e-7);
  assert_near(y[3], 100, 0);
  {
    const float dy[4] = {3, 5, 7, 11};
    float dx[4];
    nto_bwd b = {0};
    b.out = y;
    b.dout = dy;
    b.din[0] = dx;
    l.ops->backward(&l, &b);
    assert_near(dx[0], 0.03, 1e-7);
    assert_near(dx[1], 0.05, 1e-7);
    assert_near(dx[2], 7, 0);
    assert_near(dx[3], 11, 0);
  }
  gc_layer_free(&l);

  make_act(&l, "sigmoid", s);
  fwd(&l, x, y);
  assert_near(y[1], 0, 1e-30);
  assert_near(y[2], 1 / (1 + exp(-0.5)), 1e-7);
  assert_near(y[3], 1, 0);
  assert_false(isnan(y[1]));
  assert_int_equal(l.out_kind, NTO_OUT_SIGMOID);
  gc_layer_free(&l);

  make_act(&l, "tanh", s);
  fwd(&l, x, y);
  assert_near(y[2], tanh(0.5), 1e-7);
  assert_near(y[1], -1, 0);
  gc_layer_free(&l);

  make_act(&l, "none", s);
  fwd(&l, x, y);
  for (int i = 0; i < 4; i++)
    assert_near(y[i], x[i], 0);
  gc_layer_free(&l);
}

/* Keys: unknown -> ENOKEY; bad value -> ECONFIG naming the value; missing
 * activation -> plan fails with ECONFIG. */
static void test_errors(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  l.priv = calloc(1, nto_activation_layer.priv_size);
  nto_activation_layer.defaults(&l);
  assert_int_equal(nto_activation_layer.set_prop(&l, "unit", "3", &err),
                   NTO_ENOKEY);
  assert_int_equal(
      nto_activation_layer.set_prop(&l, "activation", "swishy", &err),
      NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "expected"));
  assert_non_null(strstr(err.msg, "got 'swishy'"));
  l.n_in = 1;
  l.batch = 1;
  l.in_shape[0] = (nto_shape){1, 1, 1, 4};
  nto_err_clear(&err);
  assert_int_equal(nto_activation_layer.plan(&l, &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "activation"));
  assert_int_equal(
      nto_activation_layer.set_prop(&l, "activation", "ReLU6", &err), 0);
  assert_int_equal(nto_activation_layer.plan(&l, &err), 0);
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_smooth),
      cmocka_unit_test(test_gradcheck_piecewise_positive),
      cmocka_unit_test(test_gradcheck_piecewise_kinks),
      cmocka_unit_test(test_fd_check_detects_kink),
      cmocka_unit_test(test_softmax_values),
      cmocka_unit_test(test_softmax_over_chw),
      cmocka_unit_test(test_relu6_values),
      cmocka_unit_test(test_other_values),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
