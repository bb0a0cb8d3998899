/*
 * test_pooling2d.c - pooling2d layer: gradient checks (average kinds with
 * gc_run on random inputs; max kinds with explicit well-separated inputs so
 * that x +- h never changes an argmax), hand-computed values on a 4x4
 * input, padding rules, tie breaking, and property/shape errors.
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

/* A planned pooling layer with buffers for one forward/backward. */
typedef struct pool_run {
  nto_layer l;
  float *y, *saved[NTO_MAX_SAVED];
} pool_run;

/* Plans pooling2d with props for input shape s. */
static void run_make(pool_run *r, const char *const *props, nto_shape s) {
  assert_int_equal(gc_layer_make(&r->l, &nto_pooling2d_layer, props, 1, &s),
                   0);
  r->y = calloc(nto_shape_numel(r->l.out_shape), 4);
  for (int k = 0; k < NTO_MAX_SAVED; k++)
    r->saved[k] =
        k < r->l.n_saved ? calloc(nto_shape_numel(r->l.saved[k].shape), 4)
                         : NULL;
}

/* Frees what run_make allocated. */
static void run_free(pool_run *r) {
  free(r->y);
  for (int k = 0; k < NTO_MAX_SAVED; k++)
    free(r->saved[k]);
  gc_layer_free(&r->l);
}

/* x (in shape) -> r->y (out shape). */
static void run_fwd(pool_run *r, const float *x) {
  nto_fwd f = {0};
  f.in[0] = x;
  f.out = r->y;
  for (int k = 0; k < r->l.n_saved; k++)
    f.saved[k] = r->saved[k];
  f.training = 1;
  r->l.ops->forward(&r->l, &f);
}

/* dy (out shape) -> dx (in shape), after run_fwd. */
static void run_bwd(pool_run *r, const float *x, const float *dy, float *dx) {
  nto_bwd b = {0};
  b.in[0] = r->l.bwd_needs_input ? x : NULL;
  b.out = r->l.bwd_needs_output ? r->y : NULL;
  b.dout = dy;
  b.din[0] = dx;
  for (int k = 0; k < r->l.n_saved; k++)
    b.saved[k] = r->saved[k];
  r->l.ops->backward(&r->l, &b);
}

/*
 * Finite-difference check of din at explicit inputs x0 (shape s),
 * L = sum r_i y_i, central differences in double. Returns mismatches.
 */
static int fd_check(const char *const *props, nto_shape s, const float *x0,
                    double h, double tol) {
  pool_run r;
  run_make(&r, props, s);
  size_t n = nto_shape_numel(s), m = nto_shape_numel(r.l.out_shape);
  float *x = malloc(n * 4), *dx = malloc(n * 4), *dy = malloc(m * 4);
  memcpy(x, x0, n * 4);
  for (size_t i = 0; i < m; i++)
    dy[i] = (float)(0.3 + 0.7 * sin((double)i * 1.3));
  run_fwd(&r, x);
  run_bwd(&r, x, dy, dx);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double lp = 0, lm = 0;
    float keep = x[i];
    x[i] = (float)(keep + h);
    run_fwd(&r, x);
    for (size_t j = 0; j < m; j++)
      lp += (double)dy[j] * r.y[j];
    x[i] = (float)(keep - h);
    run_fwd(&r, x);
    for (size_t j = 0; j < m; j++)
      lm += (double)dy[j] * r.y[j];
    x[i] = keep;
    double num = (lp - lm) / (2 * h), a = dx[i];
    if (fabs(a - num) > tol * fmax(1.0, fmax(fabs(a), fabs(num))))
      bad++;
  }
  free(x);
  free(dx);
  free(dy);
  run_free(&r);
  return bad;
}

/* n distinct values 0.1 * k - 3 (k a seeded permutation of 0..n-1): any
 * two differ by >= 0.1 > 2h, so perturbations never reorder them. */
static float *separated(size_t n, unsigned seed) {
  float *x = malloc(n * 4);
  nto_rng rng;
  nto_rng_seed(&rng, seed);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = nto_rng_below(&rng, (uint32_t)(i + 1));
    float t = x[i];
    x[i] = x[j];
    x[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    x[i] = 0.1f * x[i] - 3.0f;
  return x;
}

/* gc_run for average pooling: stride, padding (symmetric, asymmetric and
 * same), and global_average. */
static void test_gradcheck_average(void **state) {
  (void)state;
  const char *p1[] = {"pooling", "average", "pool_size", "3,3", "stride",
                      "2",       "padding", "1",         NULL};
  const char *p2[] = {"pooling", "average", "pool_size", "2,3", "stride",
                      "2,1",     "padding", "0,1,1,0",   NULL};
  const char *p3[] = {"pooling", "average", "pool_size", "2", "stride",
                      "2",       "padding", "same",      NULL};
  const char *p4[] = {"pooling", "global_average", NULL};
  const char *const *all[] = {p1, p2, p3, p4};
  for (int k = 0; k < 4; k++) {
    gc_case c = {.ops = &nto_pooling2d_layer,
                 .props = all[k],
                 .n_in = 1,
                 .in_shape = {{2, 3, 5, 5}},
                 .training = 1,
                 .seed = 3 + (unsigned)k};
    assert_int_equal(gc_run(&c), 0);
  }
}

/* Max kinds on well-separated inputs, with stride and padding. */
static void test_gradcheck_max(void **state) {
  (void)state;
  const char *p1[] = {"pooling", "max",     "pool_size", "3,3", "stride",
                      "2",       "padding", "1",         NULL};
  const char *p2[] = {"pooling", "max", "pool_size", "2", "stride", "1", NULL};
  const char *p3[] = {"pooling", "max",     "pool_size", "2,2", "stride",
                      "2",       "padding", "same",      NULL};
  const char *p4[] = {"pooling", "max",     "pool_size", "3,2", "stride",
                      "1,2",     "padding", "1,0,0,1",   NULL};
  const char *p5[] = {"pooling", "global_max", NULL};
  const char *const *all[] = {p1, p2, p3, p4, p5};
  nto_shape s = {2, 2, 5, 5};
  float *x = separated(nto_shape_numel(s), 5);
  for (int k = 0; k < 5; k++)
    assert_int_equal(fd_check(all[k], s, x, 1e-2, 1e-2), 0);
  free(x);
}

/* gc_run (random inputs) on global_max with a large plane: a random tie
 * within 2h of the maximum of 36 values is unlikely but the seed is fixed;
 * this runs the generic harness through the saved-tensor path. */
static void test_gradcheck_max_harness(void **state) {
  (void)state;
  const char *p[] = {"pooling", "global_max", NULL};
  gc_case c = {.ops = &nto_pooling2d_layer,
               .props = p,
               .n_in = 1,
               .in_shape = {{2, 3, 6, 6}},
               .training = 1,
               .h = 1e-3,
               .seed = 17};
  assert_int_equal(gc_run(&c), 0);
}

/* The max check can fail: with a tie, x +- h moves the argmax. */
static void test_fd_check_detects_tie(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max", "pool_size", "2", NULL};
  const float x[4] = {1, 1, 0, 0};
  assert_true(fd_check(p, (nto_shape){1, 1, 2, 2}, x, 1e-2, 1e-2) > 0);
}

/* The 4x4 input 1..16 (row-major) used by the value tests. */
static const float x16[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                              9, 10, 11, 12, 13, 14, 15, 16};

/* got[i] within tol of want[i] for i < n. */
static void expect(const float *got, const float *want, int n, double tol) {
  for (int i = 0; i < n; i++)
    assert_near(got[i], want[i], tol);
}

/* max 2x2 stride 2 on 1..16 -> 6 8 14 16; backward puts dy at those. */
static void test_max_values(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max", "pool_size", "2", "stride", "2", NULL};
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 4, 4});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 2, 2}));
  run_fwd(&r, x16);
  expect(r.y, (const float[]){6, 8, 14, 16}, 4, 0);
  const float dy[4] = {1, 2, 3, 4};
  float dx[16];
  memset(dx, 0x7f, sizeof dx); /* garbage: backward must write "=" */
  run_bwd(&r, x16, dy, dx);
  expect(dx, (const float[]){0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4},
         16, 0);
  run_free(&r);
}

/* average 2x2 stride 2 -> 3.5 5.5 11.5 13.5; backward spreads dy / 4. */
static void test_average_values(void **state) {
  (void)state;
  const char *p[] = {"pooling", "average", "pool_size", "2,2",
                     "stride",  "2,2",     NULL};
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 4, 4});
  run_fwd(&r, x16);
  expect(r.y, (const float[]){3.5f, 5.5f, 11.5f, 13.5f}, 4, 1e-6);
  const float dy[4] = {4, 8, 12, 16};
  float dx[16];
  memset(dx, 0x7f, sizeof dx);
  run_bwd(&r, x16, dy, dx);
  expect(dx, (const float[]){1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4},
         16, 0);
  run_free(&r);
}

/* average 3x3 stride 1 padding 1: padding counts as zeros (divide by 9):
 * corner (0,0) = (1+2+5+6)/9, centre (1,1) = (1+2+3+5+6+7+9+10+11)/9. */
static void test_average_padding_counts(void **state) {
  (void)state;
  const char *p[] = {"pooling", "average", "pool_size", "3", "padding", "1",
                     NULL};
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 4, 4});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 4, 4}));
  run_fwd(&r, x16);
  assert_near(r.y[0], 14.0 / 9, 1e-6);
  assert_near(r.y[5], 54.0 / 9, 1e-6);
  assert_near(r.y[15], (11 + 12 + 15 + 16) / 9.0, 1e-6);
  run_free(&r);
}

/* max with padding ignores the padding cells: all-negative input keeps
 * negative maxima (a zero pad would give 0). */
static void test_max_padding_ignored(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max",     "pool_size", "2", "stride", "2",
                     "padding", "1",       NULL};
  float x[16];
  for (int i = 0; i < 16; i++)
    x[i] = -x16[i];
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 4, 4});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 3, 3}));
  run_fwd(&r, x);
  expect(r.y, (const float[]){-1, -2, -4, -5, -6, -8, -13, -14, -16}, 9, 0);
  run_free(&r);
}

/* Ties: the first maximum in row-major window order gets the gradient. */
static void test_max_ties(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max", "pool_size", "2", "stride", "2", NULL};
  const float x[4] = {0, 5, 5, 5};
  const float dy[1] = {1};
  float dx[4];
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 2, 2});
  run_fwd(&r, x);
  assert_near(r.y[0], 5, 0);
  run_bwd(&r, x, dy, dx);
  expect(dx, (const float[]){0, 1, 0, 0}, 4, 0);
  run_free(&r);
}

/* same padding (TF rule): 5x5, pool 2, stride 2 -> 3x3 with the extra
 * padding row/column at the bottom/right: out[2][2] = x[4][4]. */
static void test_same_padding(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max",     "pool_size", "2", "stride", "2",
                     "padding", "same",    NULL};
  float x[25];
  for (int i = 0; i < 25; i++)
    x[i] = (float)i;
  pool_run r;
  run_make(&r, p, (nto_shape){1, 1, 5, 5});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 3, 3}));
  run_fwd(&r, x);
  expect(r.y, (const float[]){6, 8, 9, 16, 18, 19, 21, 23, 24}, 9, 0);
  run_free(&r);
  /* stride 1, pool 3: out = in, pad 1 on each side. */
  const char *q[] = {"pooling", "average", "pool_size", "3", "padding", "same",
                     NULL};
  run_make(&r, q, (nto_shape){1, 1, 5, 5});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 5, 5}));
  run_fwd(&r, x);
  assert_near(r.y[0], (0 + 1 + 5 + 6) / 9.0, 1e-6);
  run_free(&r);
  /* valid = no padding. */
  const char *v[] = {"pooling", "max",     "pool_size", "2", "stride", "2",
                     "padding", "valid",   NULL};
  run_make(&r, v, (nto_shape){1, 1, 5, 5});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 1, 2, 2}));
  run_free(&r);
}

/* Default stride is 1: pool 2 on 4x4 gives 3x3. */
static void test_default_stride(void **state) {
  (void)state;
  const char *p[] = {"pooling", "max", "pool_size", "2", NULL};
  pool_run r;
  run_make(&r, p, (nto_shape){2, 3, 4, 4});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){2, 3, 3, 3}));
  run_free(&r);
}

/* global pooling: (N, C, H, W) -> (N, C, 1, 1), per plane. */
static void test_global_values(void **state) {
  (void)state;
  float x[32];
  for (int i = 0; i < 16; i++) {
    x[i] = x16[i];
    x[16 + i] = -x16[i];
  }
  const char *pm[] = {"pooling", "global_max", NULL};
  const char *pa[] = {"pooling", "global_average", NULL};
  pool_run r;
  run_make(&r, pm, (nto_shape){1, 2, 4, 4});
  assert_true(nto_shape_eq(r.l.out_shape, (nto_shape){1, 2, 1, 1}));
  run_fwd(&r, x);
  expect(r.y, (const float[]){16, -1}, 2, 0);
  run_free(&r);
  run_make(&r, pa, (nto_shape){1, 2, 4, 4});
  run_fwd(&r, x);
  expect(r.y, (const float[]){8.5f, -8.5f}, 2, 1e-6);
  const float dy[2] = {16, 32};
  float dx[32];
  run_bwd(&r, x, dy, dx);
  assert_near(dx[3], 1, 0);
  assert_near(dx[20], 2, 0);
  run_free(&r);
}

/* Fresh pooling layer (defaults applied) for the error tests. */
static void raw_make(nto_layer *l) {
  memset(l, 0, sizeof *l);
  l->priv = calloc(1, nto_pooling2d_layer.priv_size);
  nto_pooling2d_layer.defaults(l);
  l->n_in = 1;
  l->batch = 1;
  l->in_shape[0] = (nto_shape){1, 2, 4, 4};
}

/* Unknown key -> ENOKEY; bad pooling, pool_size, stride, padding values
 * -> ECONFIG naming the value. */
static void test_prop_errors(void **state) {
  (void)state;
  nto_layer l;
  nto_err err = {0};
  const nto_layer_ops *o = &nto_pooling2d_layer;
  raw_make(&l);
  assert_int_equal(o->set_prop(&l, "kernel_size", "2", &err), NTO_ENOKEY);
  assert_int_equal(o->set_prop(&l, "pooling", "min", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got 'min'"));
  assert_int_equal(o->set_prop(&l, "pool_size", "0", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got '0'"));
  assert_int_equal(o->set_prop(&l, "pool_size", "2,2,2", &err), NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "stride", "x", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "got 'x'"));
  assert_int_equal(o->set_prop(&l, "padding", "1,2,3", &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "expected"));
  assert_non_null(strstr(err.msg, "got '1,2,3'"));
  assert_int_equal(o->set_prop(&l, "padding", "-1", &err), NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "padding", "full", &err), NTO_ECONFIG);
  assert_int_equal(o->set_prop(&l, "padding", "SAME", &err), 0);
  free(l.priv);
}

/* pooling is required; pool_size too unless the pooling is global. */
static void test_missing_keys(void **state) {
  (void)state;
  nto_layer l;
  nto_err err = {0};
  const nto_layer_ops *o = &nto_pooling2d_layer;
  raw_make(&l);
  assert_int_equal(o->plan(&l, &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "pooling"));
  assert_int_equal(o->set_prop(&l, "pooling", "max", &err), 0);
  assert_int_equal(o->plan(&l, &err), NTO_ECONFIG);
  assert_non_null(strstr(err.msg, "pool_size"));
  free(l.priv);
  raw_make(&l);
  assert_int_equal(o->set_prop(&l, "pooling", "global_average", &err), 0);
  assert_int_equal(o->plan(&l, &err), 0);
  free(l.priv);
}

/* Pool larger than the (padded) input -> NTO_ESHAPE with the sizes. */
static void test_pool_too_large(void **state) {
  (void)state;
  nto_layer l;
  nto_err err = {0};
  const nto_layer_ops *o = &nto_pooling2d_layer;
  raw_make(&l);
  assert_int_equal(o->set_prop(&l, "pooling", "average", &err), 0);
  assert_int_equal(o->set_prop(&l, "pool_size", "5", &err), 0);
  assert_int_equal(o->plan(&l, &err), NTO_ESHAPE);
  assert_non_null(strstr(err.msg, "5x5"));
  assert_non_null(strstr(err.msg, "4x4"));
  /* padding 1 makes it fit: 4 + 2 >= 5 -> out 2x2. */
  assert_int_equal(o->set_prop(&l, "padding", "1", &err), 0);
  assert_int_equal(o->plan(&l, &err), 0);
  assert_true(nto_shape_eq(l.out_shape, (nto_shape){1, 2, 2, 2}));
  free(l.priv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_average),
      cmocka_unit_test(test_gradcheck_max),
      cmocka_unit_test(test_gradcheck_max_harness),
      cmocka_unit_test(test_fd_check_detects_tie),
      cmocka_unit_test(test_max_values),
      cmocka_unit_test(test_average_values),
      cmocka_unit_test(test_average_padding_counts),
      cmocka_unit_test(test_max_padding_ignored),
      cmocka_unit_test(test_max_ties),
      cmocka_unit_test(test_same_padding),
      cmocka_unit_test(test_default_stride),
      cmocka_unit_test(test_global_values),
      cmocka_unit_test(test_prop_errors),
      cmocka_unit_test(test_missing_keys),
      cmocka_unit_test(test_pool_too_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
