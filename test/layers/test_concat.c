/*
 * test_concat.c - concat layer: gradient checks along each axis, NCHW
 * layout values, backward slicing, and property/shape errors.
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

/* Three inputs differing only along `axis`, batch 2. */
static void test_gradcheck_each_axis(void **state) {
  (void)state;
  static const char *const axes[] = {"1", "2", "3"};
  for (int a = 0; a < 3; a++) {
    const char *props[] = {"axis", axes[a], NULL};
    gc_case c = {.ops = &nto_concat_layer,
                 .props = props,
                 .n_in = 3,
                 .training = 1,
                 .seed = 31 + (unsigned)a};
    for (int i = 0; i < 3; i++) {
      nto_shape s = {2, 2, 3, 4};
      if (a == 0)
        s.c = i + 1;
      else if (a == 1)
        s.h = i + 1;
      else
        s.w = i + 1;
      c.in_shape[i] = s;
    }
    assert_int_equal(gc_run(&c), 0);
  }
}

/* Concatenates a and b (shapes sa, sb) along axis; checks out shape `so`,
 * output `want`, and that backward gives a and b back from dout = want. */
static void check_concat(const char *axis, nto_shape sa, const float *a,
                         nto_shape sb, const float *b, nto_shape so,
                         const float *want) {
  nto_layer l;
  const char *props[] = {"axis", axis, NULL};
  nto_shape s[2] = {sa, sb};
  assert_int_equal(gc_layer_make(&l, &nto_concat_layer, props, 2, s), 0);
  assert_true(nto_shape_eq(l.out_shape, so));
  size_t n = nto_shape_numel(so), na = nto_shape_numel(sa),
         nb = nto_shape_numel(sb);
  float *y = calloc(n, 4), *da = calloc(na, 4), *db = calloc(nb, 4);
  nto_fwd f = {0};
  f.in[0] = a;
  f.in[1] = b;
  f.out = y;
  l.ops->forward(&l, &f);
  for (size_t i = 0; i < n; i++)
    assert_near(y[i], want[i], 0);
  nto_bwd bw = {0};
  bw.dout = y;
  bw.din[0] = da;
  bw.din[1] = db;
  l.ops->backward(&l, &bw);
  for (size_t i = 0; i < na; i++)
    assert_near(da[i], a[i], 0);
  for (size_t i = 0; i < nb; i++)
    assert_near(db[i], b[i], 0);
  free(y);
  free(da);
  free(db);
  gc_layer_free(&l);
}

/* Layout along channels, height and width, with batch 2 for the outer
 * loop: values written out by hand. */
static void test_layout(void **state) {
  (void)state;
  /* axis 1: a (2,1,1,2), b (2,2,1,2) -> (2,3,1,2): per sample a then b. */
  const float a1[4] = {1, 2, 3, 4};
  const float b1[8] = {5, 6, 7, 8, 9, 10, 11, 12};
  const float w1[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
  check_concat("1", (nto_shape){2, 1, 1, 2}, a1, (nto_shape){2, 2, 1, 2}, b1,
               (nto_shape){2, 3, 1, 2}, w1);
  /* axis 2: a (1,2,1,2), b (1,2,2,2) -> (1,2,3,2): per channel rows of a
   * then rows of b. */
  const float a2[4] = {1, 2, 3, 4};
  const float b2[8] = {5, 6, 7, 8, 9, 10, 11, 12};
  const float w2[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
  check_concat("2", (nto_shape){1, 2, 1, 2}, a2, (nto_shape){1, 2, 2, 2}, b2,
               (nto_shape){1, 2, 3, 2}, w2);
  /* axis 3: a (1,1,2,2), b (1,1,2,1) -> (1,1,2,3): per row a then b. */
  const float a3[4] = {1, 2, 3, 4};
  const float b3[2] = {5, 6};
  const float w3[6] = {1, 2, 5, 3, 4, 6};
  check_concat("3", (nto_shape){1, 1, 2, 2}, a3, (nto_shape){1, 1, 2, 1}, b3,
               (nto_shape){1, 1, 2, 3}, w3);
}

/* Default axis is 1 (channels). */
static void test_default_axis(void **state) {
  (void)state;
  nto_layer l;
  nto_shape s[2] = {{2, 3, 4, 5}, {2, 7, 4, 5}};
  assert_int_equal(gc_layer_make(&l, &nto_concat_layer, NULL, 2, s), 0);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){2, 10, 4, 5}));
  gc_layer_free(&l);
}

/* axis must be 1..3 (the batch axis 0 is refused); unknown key. */
static void test_prop_errors(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  const nto_layer_ops *o = &nto_concat_layer;
  l.priv = calloc(1, o->priv_size);
  o->defaults(&l);
  assert_int_equal(o->set_prop(&l, "dim", "1", &err), NTO_ENOKEY);
  assert_int_equal(o->set_prop(&l, "axis", "0", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got '0'"));
  assert_int_equal(o->set_prop(&l, "axis", "4", &err), NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "axis", "w", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "expected"));
  assert_int_equal(o->set_prop(&l, "axis", "3", &err), 0);
  free(l.priv);
}

/* Other dimensions differ -> NTO_ESHAPE naming both shapes. */
static void test_shape_mismatch(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  const nto_layer_ops *o = &nto_concat_layer;
  l.priv = calloc(1, o->priv_size);
  o->defaults(&l);
  l.n_in = 3;
  l.batch = 1;
  l.in_shape[0] = (nto_shape){1, 2, 3, 3};
  l.in_shape[1] = (nto_shape){1, 5, 3, 3};
  l.in_shape[2] = (nto_shape){1, 2, 4, 3};
  assert_int_equal(o->plan(&l, &err), NTO_ESHAPE);
  assert_non_null(strstr(err.msg, "input 2 has shape 2:4:3"));
  assert_non_null(strstr(err.msg, "input 0 has 2:3:3"));
  /* along height the same inputs disagree in channels. */
  assert_int_equal(o->set_prop(&l, "axis", "2", &err), 0);
  assert_int_equal(o->plan(&l, &err), NTO_ESHAPE);
  assert_non_null(strstr(err.msg, "input 1 has shape 5:3:3"));
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_each_axis),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_default_axis),
      cmocka_unit_test(test_prop_errors),
      cmocka_unit_test(test_shape_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
