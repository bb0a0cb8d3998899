/*
 * test_opt_state.c - optimizer state stored as bf16 or block-wise int8
 * (optimizer.h).
 *
 * - the int8 codebooks are bitsandbytes' dynamic maps: 256 ascending
 *   values, the paper's decades and linear fractions, checked against
 *   their definition recomputed here in double precision;
 * - int8 encoding picks the nearest codebook entry of each value over its
 *   block's absolute maximum (checked against a double-precision search
 *   over every entry), so the round-trip error of each element is at most
 *   half the gap around its entry times the block's maximum; in the
 *   unsigned codebook a value above zero is never zero;
 * - bf16 rounds stochastically: to one of the two neighbours, unbiased
 *   (the mean over many seeds is the value), the same bits for the same
 *   seed; so Adam's v decays by beta2 = 0.999 on average where rounding to
 *   nearest would keep it; infinities and NaN survive;
 * - zero bytes decode to zeros (zero-initialized state) in every format;
 * - an update in bf16 or int8 is exactly: decode, the fp32 update, encode
 *   (for SGD with momentum, Adam and AdamW), and does not depend on the
 *   thread count; fp32 stays the plain update.
 */
#include "optimizer.h"
#include "parallel.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Deterministic values: uniform in [-1, 1) times 10^e, e in [-8, 2]
 * (state spans many decades), with some exact zeros. */
static void fill(float *x, size_t n, uint64_t seed, int nonneg) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
    int e = (int)((s >> 3) % 11) - 8;
    x[i] = (s & 0x70) == 0x70 ? 0.0f : (float)(u * pow(10.0, e));
    if (nonneg)
      x[i] = fabsf(x[i]);
  }
}

/* bitsandbytes' create_dynamic_map recomputed: the sorted values. */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void dynamic_map(int is_signed, double *d) {
  int n = 0;
  for (int e = 0; e < 7; e++) {
    int fraction_items = is_signed ? (1 << e) + 1 : (1 << (e + 1)) + 1;
    for (int k = 0; k + 1 < fraction_items; k++) {
      double lo = 0.1 + 0.9 * k / (fraction_items - 1);
      double hi = 0.1 + 0.9 * (k + 1) / (fraction_items - 1);
      d[n++] = pow(10.0, -6 + e) * (lo + hi) / 2;
      if (is_signed)
        d[n++] = -pow(10.0, -6 + e) * (lo + hi) / 2;
    }
  }
  d[n++] = 0;
  d[n++] = 1;
  assert_int_equal(n, 256);
  qsort(d, 256, sizeof *d, cmp_double);
}

static void test_codebooks(void **state) {
  (void)state;
  for (int u = 0; u < 2; u++) {
    const float *c = nto_opt_int8_codebook(u);
    double d[256];
    dynamic_map(!u, d);
    for (int i = 0; i < 256; i++) {
      assert_true(fabs(c[i] - d[i]) <= 1e-7 * fabs(d[i]));
      if (i > 0)
        assert_true(c[i] > c[i - 1]);
    }
    assert_true(c[255] == 1.0f);
    assert_true(u ? c[0] == 0.0f : c[0] < -0.99f && c[0] > -1.0f);
  }
}

/* Index of the entry of c nearest v, in double precision. */
static int nearest_ref(const float *c, double v) {
  int best = 0;
  for (int i = 1; i < 256; i++)
    if (fabs(c[i] - v) < fabs(c[best] - v))
      best = i;
  return best;
}

/* Round trips of n values (blocks of 2048, the last one partial). */
static void check_int8_round_trip(size_t n, int is_unsigned, uint64_t seed) {
  const float *c = nto_opt_int8_codebook(is_unsigned);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  size_t bytes = nto_opt_state_bytes(NTO_OPT_STATE_INT8, n);
  assert_int_equal(bytes, 4 * ((n + 2047) / 2048) + n);
  unsigned char *q = malloc(bytes);
  fill(x, n, seed, is_unsigned);
  if (n > 3000)
    x[2100] = is_unsigned ? 5.0f : -5.0f; /* the second block's max */
  nto_opt_state_encode(NTO_OPT_STATE_INT8, is_unsigned, x, n, q, 0);
  nto_opt_state_decode(NTO_OPT_STATE_INT8, is_unsigned, q, n, y);
  const float *absmax = (const float *)q;
  for (size_t b = 0; b * 2048 < n; b++) {
    size_t end = (b + 1) * 2048 < n ? (b + 1) * 2048 : n;
    float m = 0;
    for (size_t i = b * 2048; i < end; i++)
      m = fmaxf(m, fabsf(x[i]));
    assert_true(absmax[b] == m);
    for (size_t i = b * 2048; i < end; i++) {
      double v = m > 0 ? (double)x[i] / m : 0;
      int k = q[4 * ((n + 2047) / 2048) + i];
      int r = nearest_ref(c, v);
      if (is_unsigned && r == 0 && x[i] > 0) /* no zero for v > 0 */
        r = 1;
      /* the nearest entry (up to the float rounding of x / max) */
      if (k != r && fabs(fabs(c[k] - v) - fabs(c[r] - v)) > 1e-6)
        fail_msg("element %zu: %.9g / %.9g -> entry %d (%.9g), nearest %d "
                 "(%.9g)",
                 i, x[i], m, k, c[k], r, c[r]);
      /* the error bound: half the larger gap around the entry */
      double gap = fmax(k > 0 ? c[k] - c[k - 1] : 0, k < 255 ? c[k + 1] - c[k]
                                                             : 0);
      if (fabs((double)y[i] - x[i]) > (gap / 2 + 1e-6) * m)
        fail_msg("element %zu: %.9g decoded as %.9g (max %.9g)", i, x[i],
                 y[i], m);
      assert_true(y[i] == c[k] * m);
    }
  }
  free(x);
  free(y);
  free(q);
}

static void test_int8_round_trip(void **state) {
  (void)state;
  const size_t sizes[] = {1, 100, 2048, 2049, 10250, 65536};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int u = 0; u < 2; u++)
      check_int8_round_trip(sizes[s], u, 7 + s);
}

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float bf16_round_trip(float x, uint64_t seed) {
  uint16_t h;
  float y;
  nto_opt_state_encode(NTO_OPT_STATE_BF16, 0, &x, 1, &h, seed);
  nto_opt_state_decode(NTO_OPT_STATE_BF16, 0, &h, 1, &y);
  return y;
}

static void test_bf16(void **state) {
  (void)state;
  assert_true(isinf(bf16_round_trip(INFINITY, 1)));
  assert_true(isnan(bf16_round_trip(NAN, 1)));
  assert_true(bf16_round_trip(-0.0f, 1) == 0.0f);
  assert_true(bf16_round_trip(1.5f, 7) == 1.5f); /* exact: stays */
  /* one of the two neighbours, below an ulp (relative < 2^-7); the same
   * bits for the same seed */
  size_t n = 100000;
  float *x = malloc(n * sizeof *x);
  uint16_t *h1 = malloc(n * sizeof *h1), *h2 = malloc(n * sizeof *h2);
  fill(x, n, 3, 0);
  nto_opt_state_encode(NTO_OPT_STATE_BF16, 0, x, n, h1, 42);
  nto_opt_state_encode(NTO_OPT_STATE_BF16, 0, x, n, h2, 42);
  assert_memory_equal(h1, h2, n * sizeof *h1);
  size_t up = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t lo = bits(x[i]) & 0xffff0000u;
    float y;
    nto_opt_state_decode(NTO_OPT_STATE_BF16, 0, &h1[i], 1, &y);
    if (bits(y) != lo && bits(y) != lo + 0x10000u)
      fail_msg("%.9g -> %.9g: not a neighbour", x[i], y);
    up += bits(y) != lo;
  }
  assert_true(up > n / 4 && up < 3 * n / 4);
  /* unbiased: the mean over 4096 seeds of 1 + 2^-10 (a quarter of an ulp
   * above 1) is within 3 standard deviations of it */
  float v = 1.0f + 0x1p-10f;
  double sum = 0;
  for (uint64_t s = 0; s < 4096; s++)
    sum += bf16_round_trip(v, s);
  double sd = sqrt(0.25 * 0.75) * 0x1p-7 / sqrt(4096.0);
  if (fabs(sum / 4096 - v) > 3 * sd)
    fail_msg("mean %.9g, value %.9g", sum / 4096, v);
  /* Adam's v decays: 1000 steps of v = 0.999 v (no gradient) from 1 end
   * near 0.999^1000 = 0.368, where rounding to nearest stays at 1 */
  float vv = 1.0f;
  uint16_t hv;
  for (long t = 1; t <= 1000; t++) {
    float d = vv * 0.999f;
    nto_opt_state_encode(NTO_OPT_STATE_BF16, 1, &d, 1, &hv,
                         nto_opt_state_seed(5, t, 1));
    nto_opt_state_decode(NTO_OPT_STATE_BF16, 1, &hv, 1, &vv);
  }
  if (fabs(vv - pow(0.999, 1000)) > 0.05)
    fail_msg("v after 1000 decays: %.6g, want %.6g", vv, pow(0.999, 1000));
  free(x);
  free(h1);
  free(h2);
}

static void test_zero_bytes(void **state) {
  (void)state;
  size_t n = 5000;
  const nto_opt_state_format fs[] = {NTO_OPT_STATE_FP32, NTO_OPT_STATE_BF16,
                                     NTO_OPT_STATE_INT8};
  for (int f = 0; f < 3; f++)
    for (int u = 0; u < 2; u++) {
      void *q = calloc(1, nto_opt_state_bytes(fs[f], n));
      float *y = malloc(n * sizeof *y);
      nto_opt_state_decode(fs[f], u, q, n, y);
      for (size_t i = 0; i < n; i++)
        assert_true(y[i] == 0.0f);
      free(q);
      free(y);
    }
}

/* The update in format f from the encoded states: equal to decoding,
 * the fp32 update, encoding; the same at 1 and 2 threads. */
static void check_update(const nto_opt_conf *o, nto_opt_state_format f,
                         size_t n) {
  int ns = nto_opt_state_count(o);
  size_t bytes = nto_opt_state_bytes(f, n);
  float *w = malloc(n * sizeof *w), *w2 = malloc(n * sizeof *w),
        *w3 = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
  float *s32[2];
  void *q[2], *q2[2], *q3[2];
  for (int k = 0; k < 2; k++) {
    s32[k] = malloc(n * sizeof(float));
    q[k] = malloc(bytes);
    q2[k] = malloc(bytes);
    q3[k] = malloc(bytes);
  }
  fill(w, n, 11, 0);
  for (int t = 1; t <= 3; t++) {
    fill(g, n, 20 + (uint64_t)t, 0);
    if (t == 1) { /* state from a previous update, then encoded */
      for (int k = 0; k < ns; k++) {
        fill(s32[k], n, 30 + (uint64_t)k, k == 1);
        nto_opt_state_encode(f, k == 1, s32[k], n, q[k], 77);
      }
    }
    memcpy(w2, w, n * sizeof *w);
    memcpy(w3, w, n * sizeof *w);
    for (int k = 0; k < ns; k++) { /* the reference: decode, fp32, encode */
      nto_opt_state_decode(f, k == 1, q[k], n, s32[k]);
      memcpy(q3[k], q[k], bytes);
    }
    nto_opt_update(o, NTO_OPT_STATE_FP32, w2, g, (void *const *)s32, n, 0.01,
                   t, 9);
    for (int k = 0; k < ns; k++)
      nto_opt_state_encode(f, k == 1, s32[k], n, q2[k],
                           nto_opt_state_seed(9, t, k));
    assert_int_equal(nto_parallel_set_threads(1, NULL), 0);
    nto_opt_update(o, f, w, g, q, n, 0.01, t, 9);
    assert_int_equal(nto_parallel_set_threads(2, NULL), 0);
    nto_opt_update(o, f, w3, g, q3, n, 0.01, t, 9);
    assert_memory_equal(w, w2, n * sizeof *w);
    assert_memory_equal(w, w3, n * sizeof *w);
    for (int k = 0; k < ns; k++) {
      assert_memory_equal(q[k], q2[k], bytes);
      assert_memory_equal(q[k], q3[k], bytes);
    }
  }
  assert_int_equal(nto_parallel_set_threads(1, NULL), 0);
  for (int k = 0; k < 2; k++) {
    free(s32[k]);
    free(q[k]);
    free(q2[k]);
    free(q3[k]);
  }
  free(w);
  free(w2);
  free(w3);
  free(g);
}

static void test_update(void **state) {
  (void)state;
  nto_opt_conf sgd = {.kind = NTO_OPT_SGD, .momentum = 0.9,
                      .weight_decay = 1e-4};
  nto_opt_conf adam = {.kind = NTO_OPT_ADAM, .beta1 = 0.9, .beta2 = 0.999,
                       .epsilon = 1e-7, .weight_decay = 1e-4};
  nto_opt_conf adamw = adam;
  adamw.kind = NTO_OPT_ADAMW;
  const nto_opt_conf *os[] = {&sgd, &adam, &adamw};
  const size_t sizes[] = {1000, 4096, 70001}; /* 70001: ranges of 4096 */
  for (int i = 0; i < 3; i++)
    for (size_t s = 0; s < 3; s++) {
      check_update(os[i], NTO_OPT_STATE_BF16, sizes[s]);
      check_update(os[i], NTO_OPT_STATE_INT8, sizes[s]);
    }
}

static void test_formats_per_weight(void **state) {
  (void)state;
  /* small weights keep fp32 state */
  assert_int_equal(nto_opt_weight_format(NTO_OPT_STATE_INT8, 4095),
                   NTO_OPT_STATE_FP32);
  assert_int_equal(nto_opt_weight_format(NTO_OPT_STATE_INT8, 4096),
                   NTO_OPT_STATE_INT8);
  assert_int_equal(nto_opt_weight_format(NTO_OPT_STATE_BF16, 100),
                   NTO_OPT_STATE_FP32);
  assert_int_equal(nto_opt_state_bytes(NTO_OPT_STATE_FP32, 10), 40);
  assert_int_equal(nto_opt_state_bytes(NTO_OPT_STATE_BF16, 10), 20);
  assert_int_equal(nto_opt_state_bytes(NTO_OPT_STATE_INT8, 4097), 12 + 4097);
  assert_string_equal(nto_opt_state_name(NTO_OPT_STATE_INT8), "int8");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codebooks),
      cmocka_unit_test(test_int8_round_trip),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_zero_bytes),
      cmocka_unit_test(test_update),
      cmocka_unit_test(test_formats_per_weight),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
