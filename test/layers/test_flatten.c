/*
 * test_flatten.c - flatten layer: gradient check, output shape, copies.
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

/* gc_run on (2, 3, 4, 5). */
static void test_gradcheck(void **state) {
  (void)state;
  gc_case c = {.ops = &nto_flatten_layer,
               .n_in = 1,
               .in_shape = {{2, 3, 4, 5}},
               .training = 1,
               .seed = 41};
  assert_int_equal(gc_run(&c), 0);
}

/* (2, 2, 1, 3) -> (2, 1, 1, 6), NCHW order kept both ways. */
static void test_shape_and_values(void **state) {
  (void)state;
  nto_layer l;
  nto_shape s = {2, 2, 1, 3};
  assert_int_equal(gc_layer_make(&l, &nto_flatten_layer, NULL, 1, &s), 0);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){2, 1, 1, 6}));
  float x[12], y[12], dx[12];
  for (int i = 0; i < 12; i++)
    x[i] = (float)i * 1.5f;
  nto_fwd f = {0};
  f.in[0] = x;
  f.out = y;
  l.ops->forward(&l, &f);
  nto_bwd b = {0};
  b.dout = x;
  b.din[0] = dx;
  l.ops->backward(&l, &b);
  for (int i = 0; i < 12; i++) {
    assert_near(y[i], x[i], 0);
    assert_near(dx[i], x[i], 0);
  }
  b.din[0] = NULL; /* nobody needs din: must not crash */
  l.ops->backward(&l, &b);
  gc_layer_free(&l);
}

/* flatten has no keys. */
/* One key, target_shape (nntrainer's export writes it); others are
 * unknown. */
static void test_unknown_key(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  l.priv = calloc(1, nto_flatten_layer.priv_size);
  assert_non_null(l.priv);
  assert_int_equal(nto_flatten_layer.set_prop(&l, "unit", "1", &err),
                   NTO_ENOKEY);
  assert_int_equal(nto_flatten_layer.set_prop(&l, "target_shape", "0:1", &err),
                   NTO_ECONFIG);
  assert_int_equal(
      nto_flatten_layer.set_prop(&l, "target_shape", "1:1:1:48", &err), 0);
  l.in_shape[0] = (nto_shape){.n = 2, .c = 3, .h = 4, .w = 4};
  assert_int_equal(nto_flatten_layer.plan(&l, &err), 0);
  assert_int_equal(l.out_shape.w, 48);
  l.in_shape[0].c = 2; /* 32 values: not the target */
  assert_int_equal(nto_flatten_layer.plan(&l, &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "target_shape"));
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_shape_and_values),
      cmocka_unit_test(test_unknown_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
