/*
 * test_input.c - input layer: output shape from input_shape and batch,
 * in-place normalization/standardization, and errors.
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

/* Builds an input layer with props and batch, planned. */
static void make_input(nto_layer *l, const char *const *props, int batch) {
  nto_err err = {0};
  memset(l, 0, sizeof *l);
  l->ops = &nto_input_layer;
  l->priv = calloc(1, nto_input_layer.priv_size);
  for (int i = 0; props[i]; i += 2)
    assert_int_equal(nto_input_layer.set_prop(l, props[i], props[i + 1], &err),
                     0);
  l->batch = batch;
  assert_int_equal(nto_input_layer.plan(l, &err), 0);
}

/* Forward in place on out (the executor has written the batch there). */
static void fwd(nto_layer *l, float *out) {
  nto_fwd f = {0};
  f.out = out;
  f.training = 1;
  l->ops->forward(l, &f);
}

/* The harness runs (no inputs to check): plan + forward + backward. */
static void test_gradcheck_smoke(void **state) {
  (void)state;
  const char *props[] = {"input_shape", "3:4:5", NULL};
  gc_case c = {.ops = &nto_input_layer,
               .props = props,
               .n_in = 0,
               .seed = 1};
  assert_int_equal(gc_run(&c), 0);
}

/* out_shape = (batch, c, h, w) from input_shape; no input edges. */
static void test_shape(void **state) {
  (void)state;
  nto_layer l;
  make_input(&l, (const char *[]){"input_shape", "3:32:32", NULL}, 16);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){16, 3, 32, 32}));
  assert_int_equal(nto_input_layer.min_inputs, 0);
  assert_int_equal(nto_input_layer.max_inputs, 0);
  free(l.priv);
  make_input(&l, (const char *[]){"input_shape", "1:1:784", NULL}, 2);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){2, 1, 1, 784}));
  free(l.priv);
}

/* Default: forward leaves the data alone. */
static void test_default_noop(void **state) {
  (void)state;
  nto_layer l;
  make_input(&l, (const char *[]){"input_shape", "1:2:2", NULL}, 2);
  float x[8] = {5, -1, 3, 7, 0, 0, 1, 2}, keep[8];
  memcpy(keep, x, sizeof x);
  fwd(&l, x);
  assert_memory_equal(x, keep, sizeof x);
  free(l.priv);
}

/* normalization: each sample to [0, 1] by its own min and max. */
static void test_normalization(void **state) {
  (void)state;
  nto_layer l;
  make_input(&l,
             (const char *[]){"input_shape", "1:1:4", "normalization", "true",
                              NULL},
             2);
  float x[8] = {2, 4, 6, 10, -1, 1, 0, 3};
  fwd(&l, x);
  const float want[8] = {0, 0.25f, 0.5f, 1, 0, 0.5f, 0.25f, 1};
  for (int i = 0; i < 8; i++)
    assert_near(x[i], want[i], 1e-7);
  free(l.priv);
}

/* standardization: each sample to mean 0, population std 1. */
static void test_standardization(void **state) {
  (void)state;
  nto_layer l;
  make_input(&l,
             (const char *[]){"input_shape", "1:1:4", "standardization", "yes",
                              NULL},
             2);
  float x[8] = {1, 2, 3, 4, 10, 10, 30, 30};
  fwd(&l, x);
  /* sample 0: mean 2.5, std sqrt(1.25). sample 1: mean 20, std 10. */
  double sd = sqrt(1.25);
  assert_near(x[0], -1.5 / sd, 1e-6);
  assert_near(x[3], 1.5 / sd, 1e-6);
  assert_near(x[4], -1, 1e-6);
  assert_near(x[7], 1, 1e-6);
  for (int s = 0; s < 2; s++) {
    double m = 0, v = 0;
    for (int i = 0; i < 4; i++)
      m += x[s * 4 + i] / 4.0;
    for (int i = 0; i < 4; i++)
      v += (x[s * 4 + i] - m) * (x[s * 4 + i] - m) / 4.0;
    assert_near(m, 0, 1e-6);
    assert_near(v, 1, 1e-5);
  }
  free(l.priv);
}

/* Missing input_shape, unknown key, bad shape and bool values. */
static void test_errors(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  const nto_layer_ops *o = &nto_input_layer;
  l.priv = calloc(1, o->priv_size);
  l.batch = 4;
  assert_int_equal(o->plan(&l, &err), NTO_ECONFIG);
  assert_string_equal(err.msg, "key 'input_shape' is required");
  assert_int_equal(o->set_prop(&l, "unit", "3", &err), NTO_ENOKEY);
  assert_int_equal(o->set_prop(&l, "input_shape", "3:x:3", &err),
                   NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got '3:x:3'"));
  assert_int_equal(o->set_prop(&l, "input_shape", "0:3:3", &err),
                   NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "normalization", "maybe", &err),
                   NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got 'maybe'"));
  /* a failed input_shape leaves the key unset */
  assert_int_equal(o->plan(&l, &err), NTO_ECONFIG);
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_smoke),
      cmocka_unit_test(test_shape),
      cmocka_unit_test(test_default_noop),
      cmocka_unit_test(test_normalization),
      cmocka_unit_test(test_standardization),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
