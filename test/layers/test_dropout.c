/*
 * test_dropout.c - dropout layer: gradient check in training mode (the
 * harness reseeds the rng before each forward, so the mask is fixed),
 * eval identity, keep rate and scaling, backward through the mask, errors.
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

/* gc_run in training mode with p = 0.3 and p = 0. */
static void test_gradcheck_training(void **state) {
  (void)state;
  static const char *const rates[] = {"0.3", "0"};
  for (int k = 0; k < 2; k++) {
    const char *props[] = {"dropout_rate", rates[k], NULL};
    gc_case c = {.ops = &nto_dropout_layer,
                 .props = props,
                 .n_in = 1,
                 .in_shape = {{2, 3, 4, 4}},
                 .training = 1,
                 .seed = 61};
    assert_int_equal(gc_run(&c), 0);
  }
}

/* A planned dropout layer with rate p on (1, 1, 1, n). */
typedef struct drop_run {
  nto_layer l;
  float *x, *y, *mask;
  size_t n;
} drop_run;

/* Plans dropout with rate on (1, 1, 1, n); fills x, poisons the mask. */
static void run_make(drop_run *r, const char *rate, size_t n) {
  const char *props[] = {"dropout_rate", rate, NULL};
  nto_shape s = {1, 1, 1, (int)n};
  assert_int_equal(gc_layer_make(&r->l, &nto_dropout_layer, props, 1, &s), 0);
  assert_int_equal(r->l.n_saved, 1);
  assert_string_equal(r->l.saved[0].name, "mask");
  assert_true(nto_shape_eq(r->l.saved[0].shape, s));
  r->n = n;
  r->x = malloc(n * 4);
  r->y = malloc(n * 4);
  r->mask = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    r->x[i] = 1.0f + (float)(i % 7);
    r->mask[i] = -5.0f;
  }
}

/* One forward with a generator seeded with seed. */
static void run_fwd(drop_run *r, int training, uint64_t seed) {
  nto_rng rng;
  nto_rng_seed(&rng, seed);
  nto_fwd f = {0};
  f.in[0] = r->x;
  f.out = r->y;
  f.saved[0] = r->mask;
  f.training = training;
  f.rng = &rng;
  r->l.ops->forward(&r->l, &f);
}

/* Frees what run_make allocated. */
static void run_free(drop_run *r) {
  free(r->x);
  free(r->y);
  free(r->mask);
  gc_layer_free(&r->l);
}

/* Eval: out = in exactly, even with p = 0.5. */
static void test_eval_identity(void **state) {
  (void)state;
  drop_run r;
  run_make(&r, "0.5", 1000);
  run_fwd(&r, 0, 1);
  for (size_t i = 0; i < r.n; i++)
    assert_near(r.y[i], r.x[i], 0);
  run_free(&r);
}

/* Training, p = 0.25: about 75% kept, kept values scaled by 4/3, the mask
 * is 0 or 4/3, backward is dout * mask, and the same seed gives the same
 * mask. */
static void test_training_keep_rate(void **state) {
  (void)state;
  drop_run r;
  run_make(&r, "0.25", 20000);
  run_fwd(&r, 1, 99);
  size_t kept = 0;
  const float scale = (float)(1.0 / 0.75);
  for (size_t i = 0; i < r.n; i++) {
    if (r.mask[i] != 0.0f) {
      kept++;
      assert_near(r.mask[i], scale, 0);
      assert_near(r.y[i], r.x[i] * scale, 1e-6);
    } else {
      assert_near(r.y[i], 0, 0);
    }
  }
  /* binomial sd = sqrt(20000 * 0.75 * 0.25) ~ 61: allow ~ 6 sd. */
  assert_in_range(kept, 15000 - 370, 15000 + 370);

  float *m1 = malloc(r.n * 4), *dx = malloc(r.n * 4), *dy = malloc(r.n * 4);
  memcpy(m1, r.mask, r.n * 4);
  run_fwd(&r, 1, 99);
  assert_memory_equal(m1, r.mask, r.n * 4);
  run_fwd(&r, 1, 100);
  assert_memory_not_equal(m1, r.mask, r.n * 4);

  for (size_t i = 0; i < r.n; i++)
    dy[i] = 0.5f - (float)(i % 3);
  nto_bwd b = {0};
  b.dout = dy;
  b.din[0] = dx;
  b.saved[0] = r.mask;
  r.l.ops->backward(&r.l, &b);
  for (size_t i = 0; i < r.n; i++)
    assert_near(dx[i], dy[i] * r.mask[i], 0);
  free(m1);
  free(dx);
  free(dy);
  run_free(&r);
}

/* Training with p = 0 (the default): out = in, mask all ones. */
static void test_training_rate_zero(void **state) {
  (void)state;
  drop_run r;
  run_make(&r, "0", 100);
  run_fwd(&r, 1, 5);
  for (size_t i = 0; i < r.n; i++) {
    assert_near(r.y[i], r.x[i], 0);
    assert_near(r.mask[i], 1, 0);
  }
  run_free(&r);
  nto_layer l;
  nto_shape s = {1, 1, 1, 4};
  assert_int_equal(gc_layer_make(&l, &nto_dropout_layer, NULL, 1, &s), 0);
  float x[4] = {1, 2, 3, 4}, y[4], m[4];
  nto_rng rng;
  nto_rng_seed(&rng, 1);
  nto_fwd f = {0};
  f.in[0] = x;
  f.out = y;
  f.saved[0] = m;
  f.training = 1;
  f.rng = &rng;
  l.ops->forward(&l, &f);
  assert_memory_equal(x, y, sizeof x);
  gc_layer_free(&l);
}

/* Unknown key; rates outside [0, 1) or not numbers -> ECONFIG. */
static void test_errors(void **state) {
  (void)state;
  nto_layer l = {0};
  nto_err err = {0};
  const nto_layer_ops *o = &nto_dropout_layer;
  l.priv = calloc(1, o->priv_size);
  assert_int_equal(o->set_prop(&l, "rate", "0.5", &err), NTO_ENOKEY);
  assert_int_equal(o->set_prop(&l, "dropout_rate", "1", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got '1'"));
  assert_non_null(strstr(err.msg, "[0, 1)"));
  assert_int_equal(o->set_prop(&l, "dropout_rate", "-0.1", &err),
                   NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "dropout_rate", "half", &err),
                   NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "expected"));
  assert_non_null(strstr(err.msg, "got 'half'"));
  assert_int_equal(o->set_prop(&l, "dropout_rate", "0.999", &err), 0);
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_training),
      cmocka_unit_test(test_eval_identity),
      cmocka_unit_test(test_training_keep_rate),
      cmocka_unit_test(test_training_rate_zero),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
