/*
 * test_narrow.c - nto_layer_narrow: a layer narrowed to a group of its
 * output channels computes what the whole layer computes for them.
 *
 * Per-channel layers (batch normalization, element-wise activations,
 * depthwise convolutions) narrowed to channels [c0, c1) and run on those
 * channels of the input give the whole layer's output, input gradient,
 * weight gradients, saved tensors and running statistics for those
 * channels bit for bit (their arithmetic per channel does not depend on
 * the others). A convolution without groups narrowed to a block of its
 * filters reads the whole input: its output and weight gradient are the
 * whole layer's rows up to BLAS rounding (another GEMM shape), and its
 * input gradients summed over the groups are the whole layer's up to
 * rounding. Layers that cannot be narrowed say so.
 */
#include "gradcheck.h"
#include "registry.h"
#include "rng.h"
#include "tensor.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A layer's buffers: inputs, output, dout, din, weights, their
 * gradients, saved tensors, workspace. */
typedef struct bufs {
  float *in, *out, *dout, *din, *w[NTO_MAX_WEIGHTS], *dw[NTO_MAX_WEIGHTS];
  float *saved[NTO_MAX_SAVED], *ws;
} bufs;

static float *alloc_floats(size_t n) {
  float *p = nto_alloc_aligned((n ? n : 1) * sizeof(float));
  assert_non_null(p);
  memset(p, 0, (n ? n : 1) * sizeof(float));
  return p;
}

static void fill(float *x, size_t n, nto_rng *r) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(nto_rng_uniform(r) * 2.0 - 1.0);
}

/* Buffers for planned layer l; the input, dout and weights random (the
 * running variance positive). */
static void bufs_alloc(bufs *B, const nto_layer *l, nto_rng *r) {
  memset(B, 0, sizeof *B);
  size_t nin = nto_shape_numel(l->in_shape[0]);
  size_t nout = nto_shape_numel(l->out_shape);
  B->in = alloc_floats(nin);
  B->din = alloc_floats(nin);
  B->out = alloc_floats(nout);
  B->dout = alloc_floats(nout);
  fill(B->in, nin, r);
  fill(B->dout, nout, r);
  for (int j = 0; j < l->n_w; j++) {
    size_t n = nto_shape_numel(l->w[j].shape);
    B->w[j] = alloc_floats(n);
    B->dw[j] = alloc_floats(n);
    fill(B->w[j], n, r);
    if (!strcmp(l->w[j].name, "moving_variance"))
      for (size_t i = 0; i < n; i++)
        B->w[j][i] = 1.0f + fabsf(B->w[j][i]);
  }
  for (int k = 0; k < l->n_saved; k++)
    B->saved[k] = alloc_floats(nto_shape_numel(l->saved[k].shape));
  B->ws = alloc_floats(l->ws_bytes / sizeof(float));
}

static void bufs_free(bufs *B, const nto_layer *l) {
  nto_free_aligned(B->in);
  nto_free_aligned(B->din);
  nto_free_aligned(B->out);
  nto_free_aligned(B->dout);
  for (int j = 0; j < l->n_w; j++) {
    nto_free_aligned(B->w[j]);
    nto_free_aligned(B->dw[j]);
  }
  for (int k = 0; k < l->n_saved; k++)
    nto_free_aligned(B->saved[k]);
  nto_free_aligned(B->ws);
}

/* Training forward then backward of l on B; weight pointers offset by
 * w_off (NULL: 0), saved by s_off. */
static void run(nto_layer *l, bufs *B, float *const *w, float *const *dw,
                float *const *saved) {
  nto_rng rng;
  nto_rng_seed(&rng, 7);
  nto_fwd f = {
      .in = {B->in}, .out = B->out, .ws = B->ws, .training = 1, .rng = &rng};
  nto_bwd b = {.in = {B->in},
               .out = B->out,
               .dout = B->dout,
               .din = {B->din},
               .ws = B->ws};
  for (int j = 0; j < l->n_w; j++) {
    f.w[j] = w[j];
    b.w[j] = w[j];
    b.dw[j] = l->w[j].trainable ? dw[j] : NULL;
  }
  for (int k = 0; k < l->n_saved; k++)
    f.saved[k] = b.saved[k] = saved[k];
  l->ops->forward(l, &f);
  l->ops->backward(l, &b);
}

/* Channels [c0, c1) of x (n, c, hw) into y (n, c1 - c0, hw), or back
 * (to = 1). */
static void slice(float *x, float *y, nto_shape s, int c0, int c1, int to) {
  size_t hw = (size_t)s.h * s.w, cg = (size_t)(c1 - c0);
  for (int i = 0; i < s.n; i++) {
    float *a = x + ((size_t)i * s.c + c0) * hw, *b = y + i * cg * hw;
    if (to)
      memcpy(a, b, cg * hw * sizeof(float));
    else
      memcpy(b, a, cg * hw * sizeof(float));
  }
}

/* Largest |a - b| / max(1, |b|) over n. */
static double max_rel(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
    m = fmax(m, d);
  }
  return m;
}

/* Check layer `ops` with props on input shape `in`, narrowed with `mode`
 * to the groups split at bounds[0..ng] (bounds[0] = 0, bounds[ng] = C):
 * exact (tol 0) or within tol. */
static void check_groups(const nto_layer_ops *ops, const char *const *props,
                         nto_shape in, int mode, const int *bounds, int ng,
                         double tol) {
  nto_layer l;
  assert_int_equal(gc_layer_make(&l, ops, props, 1, &in), 0);
  nto_rng r;
  nto_rng_seed(&r, 42);
  bufs W;
  bufs_alloc(&W, &l, &r);
  /* the running statistics before the whole forward updates them */
  float *w0[NTO_MAX_WEIGHTS] = {0};
  for (int j = 0; j < l.n_w; j++) {
    size_t n = nto_shape_numel(l.w[j].shape);
    w0[j] = alloc_floats(n);
    memcpy(w0[j], W.w[j], n * sizeof(float));
  }
  run(&l, &W, W.w, W.dw, W.saved);
  nto_shape out = l.out_shape;
  size_t nin = nto_shape_numel(in);
  float *din_sum = alloc_floats(nin);
  for (int g = 0; g < ng; g++) {
    int c0 = bounds[g], c1 = bounds[g + 1];
    nto_layer n;
    size_t w_off[NTO_MAX_WEIGHTS], s_off[NTO_MAX_SAVED];
    nto_err err = {0};
    assert_int_equal(nto_layer_narrow(&l, mode, c0, c1, &n, w_off, s_off, &err),
                     0);
    assert_int_equal(n.out_shape.c, c1 - c0);
    bufs G;
    bufs_alloc(&G, &n, &r);
    if (mode == NTO_NARROW_CHANNELS)
      slice(W.in, G.in, in, c0, c1, 0);
    else
      memcpy(G.in, W.in, nin * sizeof(float));
    slice(W.dout, G.dout, out, c0, c1, 0);
    float *w[NTO_MAX_WEIGHTS], *dw[NTO_MAX_WEIGHTS], *saved[NTO_MAX_SAVED];
    for (int j = 0; j < n.n_w; j++) {
      size_t k = nto_shape_numel(l.w[j].shape);
      float *copy = alloc_floats(k); /* the weights as before the whole run */
      memcpy(copy, w0[j], k * sizeof(float));
      w[j] = copy + w_off[j];
      dw[j] = G.dw[j];
    }
    float *sv[NTO_MAX_SAVED] = {0};
    for (int k = 0; k < n.n_saved; k++) {
      sv[k] = alloc_floats(nto_shape_numel(l.saved[k].shape));
      saved[k] = sv[k] + s_off[k];
    }
    run(&n, &G, w, dw, saved);
    size_t ng_out = nto_shape_numel(n.out_shape);
    float *want = alloc_floats(ng_out);
    slice(W.out, want, out, c0, c1, 0);
    if (tol == 0)
      assert_memory_equal(G.out, want, ng_out * sizeof(float));
    else
      assert_true(max_rel(G.out, want, ng_out) <= tol);
    if (mode == NTO_NARROW_CHANNELS) {
      size_t gin = nto_shape_numel(n.in_shape[0]);
      float *wd = alloc_floats(gin);
      slice(W.din, wd, in, c0, c1, 0);
      if (tol == 0)
        assert_memory_equal(G.din, wd, gin * sizeof(float));
      else
        assert_true(max_rel(G.din, wd, gin) <= tol);
      nto_free_aligned(wd);
    } else {
      for (size_t i = 0; i < nin; i++)
        din_sum[i] += G.din[i];
    }
    for (int j = 0; j < n.n_w; j++) {
      size_t k = nto_shape_numel(n.w[j].shape);
      const float *whole = l.w[j].trainable ? W.dw[j] : W.w[j];
      const float *part = l.w[j].trainable ? dw[j] : w[j];
      if (tol == 0)
        assert_memory_equal(part, whole + w_off[j], k * sizeof(float));
      else
        assert_true(max_rel(part, whole + w_off[j], k) <= tol);
      nto_free_aligned(w[j] - w_off[j]);
    }
    for (int k = 0; k < n.n_saved; k++) {
      size_t m = nto_shape_numel(n.saved[k].shape);
      assert_memory_equal(saved[k], W.saved[k] + s_off[k], m * sizeof(float));
      nto_free_aligned(sv[k]);
    }
    nto_free_aligned(want);
    bufs_free(&G, &n);
    nto_layer_narrow_free(&n);
  }
  if (mode == NTO_NARROW_OUTPUT)
    assert_true(max_rel(din_sum, W.din, nin) <= tol);
  nto_free_aligned(din_sum);
  for (int j = 0; j < l.n_w; j++)
    nto_free_aligned(w0[j]);
  bufs_free(&W, &l);
  gc_layer_free(&l);
}

static const int three[] = {0, 2, 5, 6}; /* uneven groups of 6 channels */

static void test_batch_normalization(void **state) {
  (void)state;
  const char *props[] = {"momentum", "0.9", NULL};
  check_groups(&nto_batch_normalization_layer, props, (nto_shape){3, 6, 5, 7},
               NTO_NARROW_CHANNELS, three, 3, 0);
}

static void test_activations(void **state) {
  (void)state;
  const char *kinds[] = {"relu", "relu6",      "sigmoid",
                         "tanh", "leaky_relu", "none"};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    const char *props[] = {"activation", kinds[k], NULL};
    check_groups(&nto_activation_layer, props, (nto_shape){2, 6, 4, 3},
                 NTO_NARROW_CHANNELS, three, 3, 0);
  }
}

static void test_depthwise(void **state) {
  (void)state;
  const char *s2[] = {"filters", "6",    "kernel_size", "3", "stride", "2",
                      "padding", "same", "groups",      "6", NULL};
  check_groups(&nto_conv2d_layer, s2, (nto_shape){3, 6, 9, 8},
               NTO_NARROW_CHANNELS, three, 3, 0);
  const char *s1[] = {"filters", "6", "kernel_size",  "3",    "padding", "1",
                      "groups",  "6", "disable_bias", "true", NULL};
  check_groups(&nto_conv2d_layer, s1, (nto_shape){2, 6, 7, 7},
               NTO_NARROW_CHANNELS, three, 3, 0);
}

static void test_convolution_filters(void **state) {
  (void)state;
  const char *k1[] = {"filters", "6", "kernel_size", "1", NULL};
  check_groups(&nto_conv2d_layer, k1, (nto_shape){3, 5, 6, 6},
               NTO_NARROW_OUTPUT, three, 3, 1e-5);
  const char *k3[] = {"filters", "6", "kernel_size", "3", "padding", "1", NULL};
  check_groups(&nto_conv2d_layer, k3, (nto_shape){2, 4, 6, 5},
               NTO_NARROW_OUTPUT, three, 3, 1e-5);
}

/* Narrowing that does not keep a channel's arithmetic to itself is
 * refused, naming the layer. */
static void test_refused(void **state) {
  (void)state;
  struct {
    const nto_layer_ops *ops;
    const char *const *props;
    nto_shape in;
    int mode;
  } cases[] = {
      {&nto_activation_layer,
       (const char *const[]){"activation", "softmax", NULL},
       {2, 6, 1, 1},
       NTO_NARROW_CHANNELS},
      {&nto_conv2d_layer,
       (const char *const[]){"filters", "6", "kernel_size", "1", "groups", "2",
                             NULL},
       {2, 6, 3, 3},
       NTO_NARROW_OUTPUT},
      {&nto_conv2d_layer,
       (const char *const[]){"filters", "6", "kernel_size", "1", NULL},
       {2, 6, 3, 3},
       NTO_NARROW_CHANNELS},
      {&nto_batch_normalization_layer, NULL, {2, 1, 1, 6}, NTO_NARROW_CHANNELS},
      {&nto_pooling2d_layer,
       (const char *const[]){"pooling", "max", "pool_size", "2", NULL},
       {2, 6, 4, 4},
       NTO_NARROW_CHANNELS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    nto_layer l, n;
    assert_int_equal(
        gc_layer_make(&l, cases[i].ops, cases[i].props, 1, &cases[i].in), 0);
    size_t w_off[NTO_MAX_WEIGHTS], s_off[NTO_MAX_SAVED];
    nto_err err = {0};
    int c = l.out_shape.c > 1 ? l.out_shape.c - 1 : 1;
    assert_int_equal(
        nto_layer_narrow(&l, cases[i].mode, 0, c, &n, w_off, s_off, &err),
        NTO_EINVAL);
    assert_non_null(strstr(err.msg, "gc_"));
    assert_null(n.priv);
    gc_layer_free(&l);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_normalization),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_depthwise),
      cmocka_unit_test(test_convolution_filters),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
