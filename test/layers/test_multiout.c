/*
 * test_multiout.c - multiout layer: gradient check, copies, one input.
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

/* gc_run on (3, 2, 3, 3). */
static void test_gradcheck(void **state) {
  (void)state;
  gc_case c = {.ops = &nto_multiout_layer,
               .n_in = 1,
               .in_shape = {{3, 2, 3, 3}},
               .training = 1,
               .seed = 51};
  assert_int_equal(gc_run(&c), 0);
}

/* out = in; din = dout (the executor has already summed the consumers). */
static void test_values(void **state) {
  (void)state;
  nto_layer l;
  nto_shape s = {1, 2, 2, 2};
  assert_int_equal(gc_layer_make(&l, &nto_multiout_layer, NULL, 1, &s), 0);
  assert_true(nto_shape_eq(l.out_shape, s));
  float x[8], y[8], dx[8];
  for (int i = 0; i < 8; i++)
    x[i] = (float)(i - 3);
  nto_fwd f = {0};
  f.in[0] = x;
  f.out = y;
  l.ops->forward(&l, &f);
  nto_bwd b = {0};
  b.dout = y;
  b.din[0] = dx;
  l.ops->backward(&l, &b);
  for (int i = 0; i < 8; i++) {
    assert_near(y[i], x[i], 0);
    assert_near(dx[i], x[i], 0);
  }
  gc_layer_free(&l);
}

/* Exactly one input, type name, no keys. */
static void test_interface(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  assert_int_equal(nto_multiout_layer.min_inputs, 1);
  assert_int_equal(nto_multiout_layer.max_inputs, 1);
  assert_string_equal(nto_multiout_layer.type, "multiout");
  assert_int_equal(nto_multiout_layer.set_prop(&l, "unit", "2", &err),
                   NTO_ENOKEY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_interface),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
