/*
 * test_addition.c - addition layer: gradient check with 3 inputs, values,
 * backward copies, and the shape-mismatch message.
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

/* gc_run with three inputs of equal shape. */
static void test_gradcheck_three_inputs(void **state) {
  (void)state;
  gc_case c = {.ops = &nto_addition_layer,
               .n_in = 3,
               .in_shape = {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}},
               .training = 1,
               .seed = 21};
  assert_int_equal(gc_run(&c), 0);
}

/* out = a + b + c; din[i] = dout for each input, NULL din skipped. */
static void test_values(void **state) {
  (void)state;
  nto_layer l;
  nto_shape s[3] = {{1, 1, 1, 3}, {1, 1, 1, 3}, {1, 1, 1, 3}};
  assert_int_equal(gc_layer_make(&l, &nto_addition_layer, NULL, 3, s), 0);
  assert_true(nto_shape_eq(l.out_shape, s[0]));
  const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, c[3] = {100, 200, 300};
  float y[3];
  nto_fwd f = {0};
  f.in[0] = a;
  f.in[1] = b;
  f.in[2] = c;
  f.out = y;
  l.ops->forward(&l, &f);
  assert_near(y[0], 111, 0);
  assert_near(y[1], 222, 0);
  assert_near(y[2], 333, 0);
  const float dy[3] = {0.5f, -1, 2};
  float d0[3] = {9, 9, 9}, d2[3] = {9, 9, 9};
  nto_bwd bw = {0};
  bw.dout = dy;
  bw.din[0] = d0;
  bw.din[1] = NULL;
  bw.din[2] = d2;
  l.ops->backward(&l, &bw);
  for (int i = 0; i < 3; i++) {
    assert_near(d0[i], dy[i], 0);
    assert_near(d2[i], dy[i], 0);
  }
  gc_layer_free(&l);
}

/* Mismatch -> NTO_ESHAPE naming both shapes as c:h:w. */
static void test_shape_mismatch(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  l.n_in = 2;
  l.batch = 4;
  l.in_shape[0] = (nto_shape){4, 64, 32, 32};
  l.in_shape[1] = (nto_shape){4, 64, 16, 16};
  assert_int_equal(nto_addition_layer.plan(&l, &err), NTO_ESHAPE);
  assert_string_equal(err.msg,
                      "input 1 has shape 64:16:16 but input 0 has 64:32:32");
}

/* addition has no keys; it accepts up to 8 inputs. */
static void test_unknown_key(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  assert_int_equal(nto_addition_layer.set_prop(&l, "axis", "1", &err),
                   NTO_ENOKEY);
  assert_true(nto_addition_layer.max_inputs >= 8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_three_inputs),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_shape_mismatch),
      cmocka_unit_test(test_unknown_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
