/*
 * test_conv2d.c - conv2d layer: finite-difference gradient checks, forward
 * and backward against a naive direct convolution (in double), per-image
 * and chunked (several images per GEMM) kernels alike, chunked against
 * per-image results, the same bits at any compute thread count, workspace
 * bounds, the weight regularizer's terms, weight requests, and
 * property/plan errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "parallel.h"
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64 /* canary floats after the workspace */
#define CANARY 12345.0f

/* conv2d.c's test hook: when nonzero, plan bounds a chunk's workspace by
 * this many bytes instead of its default. 1 forces one image per GEMM. */
extern size_t nto_conv2d_chunk_bytes_for_tests;
/* conv2d.c's Winograd hooks: never choose it; does a layer use it. */
extern int nto_conv2d_no_winograd_for_tests;
int nto_conv2d_is_winograd_for_tests(const nto_layer *l);
int nto_conv2d_is_winograd_dw_for_tests(const nto_layer *l);
#define DEFAULT_CHUNK_BYTES ((size_t)2 << 20) /* CONV_CHUNK_BYTES */

/* A test configuration: INI properties plus the geometry the reference
 * implementation must assume (padding resolved by hand). */
typedef struct conv_case {
  const char *name;
  const char *props[24];
  nto_shape in;
  int f, groups, bias;  /* filters, groups, has a bias */
  int k[2], s[2], d[2]; /* kernel, stride, dilation: rows, cols */
  int pad[4];           /* top, bottom, left, right */
  int wino;             /* forward and dX by Winograd F(2x2, 3x3) */
} conv_case;

/* clang-format off */
static const conv_case cases[] = {
    {.name = "3x3 pad 1",
     .props = {"filters", "4", "kernel_size", "3", "padding", "1", NULL},
     .in = {2, 3, 5, 5}, .f = 4, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    {.name = "stride 2",
     .props = {"filters", "3", "kernel_size", "3,3", "stride", "2",
               "padding", "1", NULL},
     .in = {2, 3, 7, 6}, .f = 3, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {2, 2}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    {.name = "dilation 2",
     .props = {"filters", "3", "kernel_size", "3", "dilation", "2",
               "padding", "1", NULL},
     .in = {2, 2, 7, 6}, .f = 3, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {2, 2}, .pad = {1, 1, 1, 1}},
    {.name = "groups 2",
     .props = {"filters", "6", "kernel_size", "3", "groups", "2",
               "padding", "1", NULL},
     .in = {2, 4, 5, 5}, .f = 6, .groups = 2, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    {.name = "depthwise x2",
     .props = {"filters", "6", "kernel_size", "3", "groups", "3",
               "padding", "1", NULL},
     .in = {2, 3, 5, 5}, .f = 6, .groups = 3, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    /* stride 1 (the padded-plane kernel): uneven padding, dilation and
     * kernel, multiplier 2: OH = 6+3-4-1+1 = 5, OW = 7+3-1-1+1 = 9 */
    {.name = "depthwise x2 stride 1 kernel 3,2 dilation 2,1 pad 2,1,0,3",
     .props = {"filters", "6", "kernel_size", "3,2", "groups", "3",
               "dilation", "2,1", "padding", "2,1,0,3", NULL},
     .in = {2, 3, 6, 7}, .f = 6, .groups = 3, .bias = 1,
     .k = {3, 2}, .s = {1, 1}, .d = {2, 1}, .pad = {2, 1, 0, 3}},
    /* MobileNetV2 style: OH = 3, total 1 -> 0,1 */
    {.name = "depthwise same stride 2",
     .props = {"filters", "4", "kernel_size", "3", "groups", "4",
               "padding", "same", "stride", "2", NULL},
     .in = {2, 4, 6, 6}, .f = 4, .groups = 4, .bias = 1,
     .k = {3, 3}, .s = {2, 2}, .d = {1, 1}, .pad = {0, 1, 0, 1}},
    {.name = "depthwise dilation 2 stride 2",
     .props = {"filters", "3", "kernel_size", "3", "groups", "3",
               "padding", "2", "stride", "2", "dilation", "2", NULL},
     .in = {2, 3, 7, 6}, .f = 3, .groups = 3, .bias = 1,
     .k = {3, 3}, .s = {2, 2}, .d = {2, 2}, .pad = {2, 2, 2, 2}},
    {.name = "1x1",
     .props = {"filters", "3", "kernel_size", "1", NULL},
     .in = {2, 4, 4, 4}, .f = 3, .groups = 1, .bias = 1,
     .k = {1, 1}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 0, 0, 0}},
    {.name = "1x1 groups 2",
     .props = {"filters", "4", "kernel_size", "1,1", "groups", "2", NULL},
     .in = {2, 4, 3, 4}, .f = 4, .groups = 2, .bias = 1,
     .k = {1, 1}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 0, 0, 0}},
    {.name = "1x1 stride 2",
     .props = {"filters", "3", "kernel_size", "1", "stride", "2", NULL},
     .in = {2, 2, 5, 4}, .f = 3, .groups = 1, .bias = 1,
     .k = {1, 1}, .s = {2, 2}, .d = {1, 1}, .pad = {0, 0, 0, 0}},
    /* same, stride 2: OH = ceil(7/2) = 4, total 2 -> 1,1; OW = 3,
     * total 1 -> 0,1 (the extra column goes right) */
    {.name = "same stride 2",
     .props = {"filters", "3", "kernel_size", "3", "stride", "2",
               "padding", "same", NULL},
     .in = {2, 3, 7, 6}, .f = 3, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {2, 2}, .d = {1, 1}, .pad = {1, 1, 0, 1}},
    /* same, dilation 2, stride 1: total = 2*2 = 4 -> 2,2 */
    {.name = "same dilation 2",
     .props = {"filters", "2", "kernel_size", "3", "dilation", "2",
               "padding", "SAME", NULL},
     .in = {2, 2, 5, 6}, .f = 2, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {2, 2}, .pad = {2, 2, 2, 2}},
    {.name = "valid",
     .props = {"filters", "2", "kernel_size", "3", "padding", "valid", NULL},
     .in = {2, 2, 5, 6}, .f = 2, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 0, 0, 0}},
    {.name = "full",
     .props = {"filters", "2", "kernel_size", "3,2", "padding", "full", NULL},
     .in = {1, 2, 4, 4}, .f = 2, .groups = 1, .bias = 1,
     .k = {3, 2}, .s = {1, 1}, .d = {1, 1}, .pad = {2, 2, 1, 1}},
    {.name = "kernel 3,2 padding 1,0",
     .props = {"filters", "3", "kernel_size", "3,2", "padding", "1,0", NULL},
     .in = {2, 2, 5, 6}, .f = 3, .groups = 1, .bias = 1,
     .k = {3, 2}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 0, 0}},
    {.name = "padding 0,2,1,0",
     .props = {"filters", "3", "kernel_size", "3", "padding", "0,2,1,0", NULL},
     .in = {2, 2, 5, 5}, .f = 3, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 2, 1, 0}},
    {.name = "stride 2,1 dilation 1,2",
     .props = {"filters", "2", "kernel_size", "2,3", "stride", "2,1",
               "dilation", "1,2", "padding", "1,2,0,1", NULL},
     .in = {2, 2, 6, 7}, .f = 2, .groups = 1, .bias = 1,
     .k = {2, 3}, .s = {2, 1}, .d = {1, 2}, .pad = {1, 2, 0, 1}},
    {.name = "disable_bias",
     .props = {"filters", "4", "kernel_size", "3", "padding", "1",
               "disable_bias", "true", NULL},
     .in = {2, 3, 5, 5}, .f = 4, .groups = 1, .bias = 0,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    {.name = "batch 3",
     .props = {"filters", "3", "kernel_size", "2", "stride", "1", NULL},
     .in = {3, 2, 4, 4}, .f = 3, .groups = 1, .bias = 1,
     .k = {2, 2}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 0, 0, 0}},
    /* Winograd F(2x2, 3x3): 3x3, stride 1, >= 16 input channels, top
     * and left padding <= 2; odd output sizes end in half tiles */
    {.name = "winograd 3x3 pad 1",
     .props = {"filters", "5", "kernel_size", "3", "padding", "1", NULL},
     .in = {2, 16, 5, 7}, .f = 5, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}, .wino = 1},
    {.name = "winograd padding 0,2,1,0 no bias",
     .props = {"filters", "3", "kernel_size", "3", "padding", "0,2,1,0",
               "disable_bias", "true", NULL},
     .in = {2, 17, 6, 5}, .f = 3, .groups = 1, .bias = 0,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 2, 1, 0}, .wino = 1},
    {.name = "winograd padding 2",
     .props = {"filters", "2", "kernel_size", "3", "padding", "2", NULL},
     .in = {1, 16, 4, 3}, .f = 2, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {2, 2, 2, 2}, .wino = 1},
    {.name = "winograd valid batch 3",
     .props = {"filters", "4", "kernel_size", "3", "padding", "valid", NULL},
     .in = {3, 16, 7, 6}, .f = 4, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {0, 0, 0, 0}, .wino = 1},
    /* one tile per image: forward and dX by Winograd, dW by im2col */
    {.name = "winograd one tile",
     .props = {"filters", "4", "kernel_size", "3", "padding", "1", NULL},
     .in = {3, 16, 2, 2}, .f = 4, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}, .wino = 1},
    /* one past the padding Winograd takes (dX's would be negative) */
    {.name = "16 channels padding 3,0,0,0",
     .props = {"filters", "2", "kernel_size", "3", "padding", "3,0,0,0",
               NULL},
     .in = {2, 16, 4, 4}, .f = 2, .groups = 1, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {3, 0, 0, 0}},
    {.name = "16 channels groups 2",
     .props = {"filters", "4", "kernel_size", "3", "padding", "1", "groups",
               "2", NULL},
     .in = {2, 16, 4, 4}, .f = 4, .groups = 2, .bias = 1,
     .k = {3, 3}, .s = {1, 1}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
    {.name = "groups 2 stride 2 pad same",
     .props = {"filters", "4", "kernel_size", "3", "groups", "2", "stride", "2",
               "padding", "same", NULL},
     .in = {3, 6, 5, 5}, .f = 4, .groups = 2, .bias = 1,
     .k = {3, 3}, .s = {2, 2}, .d = {1, 1}, .pad = {1, 1, 1, 1}},
};
/* clang-format on */
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int out_dim(int in, int pa, int pb, int k, int d, int s) {
  return (in + pa + pb - d * (k - 1) - 1) / s + 1;
}

/* Index of x[n, c, h, w] in a (N, C, H, W) tensor of shape s. */
static size_t idx(nto_shape s, int n, int c, int h, int w) {
  return (((size_t)n * s.c + c) * s.h + h) * s.w + w;
}

/*
 * Naive reference: y (N, F, OH, OW) from x (N, C, H, W),
 * w (F, C/G, kh, kw), b (F) or NULL, direct loops in double.
 */
static void ref_forward(const conv_case *k, const float *x, const float *w,
                        const float *b, double *y, nto_shape os) {
  int cg = k->in.c / k->groups, fg = k->f / k->groups;
  for (int n = 0; n < os.n; n++)
    for (int f = 0; f < k->f; f++)
      for (int oy = 0; oy < os.h; oy++)
        for (int ox = 0; ox < os.w; ox++) {
          double s = b ? b[f] : 0.0;
          for (int ci = 0; ci < cg; ci++)
            for (int ky = 0; ky < k->k[0]; ky++)
              for (int kx = 0; kx < k->k[1]; kx++) {
                int iy = oy * k->s[0] - k->pad[0] + ky * k->d[0];
                int ix = ox * k->s[1] - k->pad[2] + kx * k->d[1];
                if (iy < 0 || iy >= k->in.h || ix < 0 || ix >= k->in.w)
                  continue;
                int c = (f / fg) * cg + ci;
                s += (double)w[((f * cg + ci) * k->k[0] + ky) * k->k[1] + kx] *
                     x[idx(k->in, n, c, iy, ix)];
              }
          y[idx(os, n, f, oy, ox)] = s;
        }
}

/* Naive reference backward: dx (N, C, H, W), dw (F, C/G, kh, kw), db (F)
 * from dy (N, F, OH, OW), in double. */
static void ref_backward(const conv_case *k, const float *x, const float *w,
                         const float *dy, nto_shape os, double *dx, double *dw,
                         double *db) {
  int cg = k->in.c / k->groups, fg = k->f / k->groups;
  memset(dx, 0, nto_shape_numel(k->in) * sizeof *dx);
  memset(dw, 0, (size_t)k->f * cg * k->k[0] * k->k[1] * sizeof *dw);
  memset(db, 0, (size_t)k->f * sizeof *db);
  for (int n = 0; n < os.n; n++)
    for (int f = 0; f < k->f; f++)
      for (int oy = 0; oy < os.h; oy++)
        for (int ox = 0; ox < os.w; ox++) {
          double d = dy[idx(os, n, f, oy, ox)];
          db[f] += d;
          for (int ci = 0; ci < cg; ci++)
            for (int ky = 0; ky < k->k[0]; ky++)
              for (int kx = 0; kx < k->k[1]; kx++) {
                int iy = oy * k->s[0] - k->pad[0] + ky * k->d[0];
                int ix = ox * k->s[1] - k->pad[2] + kx * k->d[1];
                if (iy < 0 || iy >= k->in.h || ix < 0 || ix >= k->in.w)
                  continue;
                int c = (f / fg) * cg + ci;
                size_t wi =
                    ((size_t)(f * cg + ci) * k->k[0] + ky) * k->k[1] + kx;
                size_t xi = idx(k->in, n, c, iy, ix);
                dx[xi] += w[wi] * d;
                dw[wi] += x[xi] * d;
              }
        }
}

static void fill(float *x, size_t n, nto_rng *r) {
  for (size_t i = 0; i < n; i++)
    x[i] = 2.0f * nto_rng_uniform(r) - 1.0f;
}

/* Normwise relative error max|a - r| / max|r|. */
static double rel_err(const float *a, const double *r, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs(a[i] - r[i]));
    den = fmax(den, fabs(r[i]));
  }
  return den > 0.0 ? num / den : num;
}

/* Workspace of exactly ws_bytes followed by a canary block. */
static float *ws_alloc(size_t bytes) {
  float *ws = malloc(bytes + GUARD * sizeof(float));
  assert_non_null(ws);
  for (size_t i = 0; i < bytes / sizeof(float) + GUARD; i++)
    ws[i] = CANARY;
  return ws;
}

static void ws_check(const float *ws, size_t bytes) {
  for (size_t i = 0; i < GUARD; i++)
    assert_true(ws[bytes / sizeof(float) + i] == CANARY);
}

/* Forward and backward of every case against the naive reference;
 * din and dw are prefilled with garbage to prove "=" semantics, and
 * backward is repeated with NULL din / NULL dw. Runs with the default
 * chunk bound (these small batches are one chunk) and with one image per
 * GEMM. */
static void test_against_reference(void **state) {
  (void)state;
  for (int run = 0; run < 2 * N_CASES; run++) {
    int ci = run % N_CASES;
    nto_conv2d_chunk_bytes_for_tests = run < N_CASES ? 0 : 1;
    const conv_case *k = &cases[ci];
    nto_layer l;
    assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, k->props, 1, &k->in),
                     0);
    nto_shape os = {
        k->in.n, k->f,
        out_dim(k->in.h, k->pad[0], k->pad[1], k->k[0], k->d[0], k->s[0]),
        out_dim(k->in.w, k->pad[2], k->pad[3], k->k[1], k->d[1], k->s[1])};
    if (!nto_shape_eq(l.out_shape, os)) {
      fprintf(stderr, "%s: out shape %d:%d:%d:%d, expected %d:%d:%d:%d\n",
              k->name, l.out_shape.n, l.out_shape.c, l.out_shape.h,
              l.out_shape.w, os.n, os.c, os.h, os.w);
      fail();
    }
    assert_int_equal(l.n_w, k->bias ? 2 : 1);
    if (nto_conv2d_is_winograd_for_tests(&l) != k->wino)
      fail_msg("%s: Winograd %d, expected %d", k->name,
               nto_conv2d_is_winograd_for_tests(&l), k->wino);
    /* dW too unless an image is one tile (outputs up to 2x2) */
    int wdw = k->wino && ((os.h + 1) / 2) * ((os.w + 1) / 2) >= 2;
    if (nto_conv2d_is_winograd_dw_for_tests(&l) != wdw)
      fail_msg("%s: Winograd dW %d, expected %d", k->name,
               nto_conv2d_is_winograd_dw_for_tests(&l), wdw);
    nto_rng rng;
    nto_rng_seed(&rng, 100 + ci);
    size_t nx = nto_shape_numel(k->in), ny = nto_shape_numel(os);
    size_t nw = nto_shape_numel(l.w[0].shape);
    float *x = malloc(nx * 4), *y = malloc(ny * 4), *dy = malloc(ny * 4);
    float *w = malloc(nw * 4), *b = malloc(k->f * 4);
    float *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(k->f * 4);
    double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8);
    double *rdb = malloc(k->f * 8);
    float *ws = ws_alloc(l.ws_bytes);
    fill(x, nx, &rng);
    fill(w, nw, &rng);
    fill(b, k->f, &rng);
    fill(dy, ny, &rng);

    nto_fwd f = {.out = y, .ws = ws, .training = 1};
    f.in[0] = x;
    f.w[0] = w;
    f.w[1] = k->bias ? b : NULL;
    l.ops->forward(&l, &f);
    ws_check(ws, l.ws_bytes);
    ref_forward(k, x, w, k->bias ? b : NULL, ry, os);
    double e = rel_err(y, ry, ny);
    if (e > 1e-5) {
      fprintf(stderr, "%s: forward rel err %g\n", k->name, e);
      fail();
    }

    ref_backward(k, x, w, dy, os, rdx, rdw, rdb);
    for (int pass = 0; pass < 3; pass++) {
      /* pass 0: all; 1: din only; 2: dw only */
      for (size_t i = 0; i < nx; i++)
        dx[i] = 777.0f;
      for (size_t i = 0; i < nw; i++)
        dw[i] = -555.0f;
      for (int i = 0; i < k->f; i++)
        db[i] = 999.0f;
      nto_bwd bw = {.dout = dy, .ws = ws};
      bw.in[0] = x;
      bw.din[0] = pass == 2 ? NULL : dx;
      bw.w[0] = w;
      bw.w[1] = k->bias ? b : NULL;
      bw.dw[0] = pass == 1 ? NULL : dw;
      bw.dw[1] = pass == 1 || !k->bias ? NULL : db;
      l.ops->backward(&l, &bw);
      ws_check(ws, l.ws_bytes);
      if (pass != 2 && (e = rel_err(dx, rdx, nx)) > 1e-5) {
        fprintf(stderr, "%s pass %d: dx rel err %g\n", k->name, pass, e);
        fail();
      }
      if (pass != 1 && (e = rel_err(dw, rdw, nw)) > 1e-5) {
        fprintf(stderr, "%s pass %d: dw rel err %g\n", k->name, pass, e);
        fail();
      }
      if (pass != 1 && k->bias && (e = rel_err(db, rdb, k->f)) > 1e-5) {
        fprintf(stderr, "%s pass %d: db rel err %g\n", k->name, pass, e);
        fail();
      }
      if (pass == 2)
        for (size_t i = 0; i < nx; i++)
          assert_true(dx[i] == 777.0f);
      if (pass == 1)
        for (size_t i = 0; i < nw; i++)
          assert_true(dw[i] == -555.0f);
    }
    free(x), free(y), free(dy), free(w), free(b), free(dx), free(dw);
    free(db), free(ry), free(rdx), free(rdw), free(rdb), free(ws);
    gc_layer_free(&l);
  }
  nto_conv2d_chunk_bytes_for_tests = 0;
}

/* Finite-difference gradient check of every case, with the default chunk
 * bound and with one image per GEMM. */
static void test_gradcheck(void **state) {
  (void)state;
  int failed = 0;
  for (int run = 0; run < 2 * N_CASES; run++) {
    int ci = run % N_CASES;
    nto_conv2d_chunk_bytes_for_tests = run < N_CASES ? 0 : 1;
    gc_case c = {.ops = &nto_conv2d_layer,
                 .props = cases[ci].props,
                 .n_in = 1,
                 .in_shape = {cases[ci].in},
                 .training = 1,
                 .seed = 7 + ci};
    if (gc_run(&c) != 0) {
      fprintf(stderr, "gradcheck failed: %s (%s)\n", cases[ci].name,
              run < N_CASES ? "chunked" : "per image");
      failed++;
    }
  }
  nto_conv2d_chunk_bytes_for_tests = 0;
  assert_int_equal(failed, 0);
}

/* One forward + backward (din, dw, db) of a layer planned for in_shape
 * with the chunk bound `bound`; outputs into y, dx, dw, db. Returns the
 * planned workspace bytes. The workspace is guarded by canaries. */
/* When nonzero, run_once switches to this many compute threads after the
 * plan (the workspace was sized for the threads at plan). */
static int threads_after_plan;

static size_t run_once(const conv_case *k, size_t bound, const float *x,
                       const float *w, const float *b, const float *dy,
                       float *y, float *dx, float *dw, float *db) {
  nto_layer l;
  nto_conv2d_chunk_bytes_for_tests = bound;
  assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, k->props, 1, &k->in),
                   0);
  nto_conv2d_chunk_bytes_for_tests = 0;
  if (threads_after_plan) {
    nto_err err = {0};
    assert_int_equal(nto_parallel_set_threads(threads_after_plan, &err), 0);
  }
  float *ws = ws_alloc(l.ws_bytes);
  nto_fwd f = {.out = y, .ws = ws, .training = 1};
  f.in[0] = x;
  f.w[0] = (float *)w;
  f.w[1] = k->bias ? (float *)b : NULL;
  l.ops->forward(&l, &f);
  ws_check(ws, l.ws_bytes);
  for (size_t i = 0; i < l.ws_bytes / sizeof(float); i++)
    ws[i] = CANARY; /* backward must not depend on forward's leftovers */
  for (size_t i = 0; i < nto_shape_numel(k->in); i++)
    dx[i] = CANARY; /* nor on what dX held: it is written with "=" */
  nto_bwd bw = {.dout = dy, .ws = ws};
  bw.in[0] = x;
  bw.din[0] = dx;
  bw.w[0] = w;
  bw.w[1] = k->bias ? b : NULL;
  bw.dw[0] = dw;
  bw.dw[1] = k->bias ? db : NULL;
  l.ops->backward(&l, &bw);
  ws_check(ws, l.ws_bytes);
  size_t bytes = l.ws_bytes;
  free(ws);
  gc_layer_free(&l);
  return bytes;
}

/* Normwise max|a - r| / max|r| of two float tensors. */
static double rel_err_f(const float *a, const float *r, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - r[i]));
    den = fmax(den, fabs((double)r[i]));
  }
  return den > 0.0 ? num / den : num;
}

/* Convolutions with several images, for the chunked kernels. */
/* clang-format off */
static const conv_case chunk_cases[] = {
    {.name = "groups 2 stride 2 dilation 2 pad 2",
     .props = {"filters", "6", "kernel_size", "3", "groups", "2",
               "stride", "2", "dilation", "2", "padding", "2", NULL},
     .in = {5, 4, 9, 8}, .f = 6, .groups = 2, .bias = 1},
    {.name = "groups 3 same stride 2,1",
     .props = {"filters", "6", "kernel_size", "3,2", "groups", "3",
               "stride", "2,1", "padding", "same", NULL},
     .in = {5, 6, 7, 6}, .f = 6, .groups = 3, .bias = 1},
    {.name = "stride 1 pad 0,2,1,0 dilation 1,2 no bias",
     .props = {"filters", "5", "kernel_size", "3", "dilation", "1,2",
               "padding", "0,2,1,0", "disable_bias", "true", NULL},
     .in = {5, 3, 6, 7}, .f = 5, .groups = 1, .bias = 0},
    {.name = "1x1 groups 2",
     .props = {"filters", "4", "kernel_size", "1", "groups", "2", NULL},
     .in = {5, 6, 5, 3}, .f = 4, .groups = 2, .bias = 1},
    {.name = "1x1 stride 2",
     .props = {"filters", "3", "kernel_size", "1", "stride", "2", NULL},
     .in = {5, 4, 5, 6}, .f = 3, .groups = 1, .bias = 1},
};
/* clang-format on */

/* A case's sizes and random input, weights, bias and dY. */
typedef struct case_data {
  size_t nx, ny, nw; /* input, output and weight floats */
  size_t per_img;    /* bytes: one image's share of a chunk (K + F/G rows of
                        OH*OW columns) */
  float *x, *w, *b, *dy;
} case_data;

static void case_data_make(const conv_case *k, unsigned seed, case_data *d) {
  nto_layer l;
  assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, k->props, 1, &k->in),
                   0);
  nto_shape os = l.out_shape;
  d->nw = nto_shape_numel(l.w[0].shape);
  size_t kcol = d->nw / k->f, ohw = (size_t)os.h * os.w;
  d->per_img = (kcol + (size_t)(k->f / k->groups)) * ohw * 4;
  gc_layer_free(&l);
  d->nx = nto_shape_numel(k->in);
  d->ny = nto_shape_numel(os);
  nto_rng rng;
  nto_rng_seed(&rng, seed);
  d->x = malloc(d->nx * 4), d->w = malloc(d->nw * 4);
  d->b = malloc(k->f * 4), d->dy = malloc(d->ny * 4);
  fill(d->x, d->nx, &rng);
  fill(d->w, d->nw, &rng);
  fill(d->b, k->f, &rng);
  fill(d->dy, d->ny, &rng);
}

static void case_data_free(case_data *d) {
  free(d->x), free(d->w), free(d->b), free(d->dy);
}

/* A batch of 5 split into chunks of 2 (2+2+1), 3 (3+2) and one chunk of 5
 * gives the results of one image per GEMM (forward, dX, dW, db) within
 * rounding, for groups, stride, padding, dilation and 1x1 variants; the
 * planned workspace is that of the chunk size. */
static void test_chunks_match_per_image(void **state) {
  (void)state;
  const conv_case *cc = chunk_cases;
  for (size_t ci = 0; ci < sizeof chunk_cases / sizeof *cc; ci++) {
    const conv_case *k = &cc[ci];
    case_data d;
    case_data_make(k, 500 + (unsigned)ci, &d);
    size_t nx = d.nx, ny = d.ny, nw = d.nw, per_img = d.per_img;
    float *x = d.x, *w = d.w, *b = d.b, *dy = d.dy;
    float *y1 = malloc(ny * 4), *dx1 = malloc(nx * 4), *dw1 = malloc(nw * 4);
    float *db1 = calloc(k->f, 4);
    run_once(k, 1, x, w, b, dy, y1, dx1, dw1, db1);
    /* bound -> images per chunk: 2 (chunks 2,2,1), 3 (3,2), 5 (one) */
    const size_t bounds[] = {2 * per_img + per_img / 2, 3 * per_img,
                             100 * per_img};
    const size_t chunk[] = {2, 3, 5};
    for (int bi = 0; bi < 3; bi++) {
      float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4);
      float *db = calloc(k->f, 4);
      size_t ws = run_once(k, bounds[bi], x, w, b, dy, y, dx, dw, db);
      assert_int_equal(ws, chunk[bi] * per_img);
      double ey = rel_err_f(y, y1, ny), edx = rel_err_f(dx, dx1, nx);
      double edw = rel_err_f(dw, dw1, nw), edb = rel_err_f(db, db1, k->f);
      if (ey > 1e-6 || edx > 1e-6 || edw > 1e-6 || edb > 0.0) {
        fprintf(stderr,
                "%s, %zu images per chunk: rel err y %g dx %g dw %g db %g\n",
                k->name, chunk[bi], ey, edx, edw, edb);
        fail();
      }
      free(y), free(dx), free(dw), free(db);
    }
    case_data_free(&d);
    free(y1), free(dx1), free(dw1), free(db1);
  }
}

/* Run t (1-3 threads, 4: planned at 1 thread and run at 3) of a
 * same-bits test: run 1's outputs o (y, dX, dW, db of n[i] floats) become
 * the reference r; a later run's must equal it bit for bit (the failure
 * names `what`, the run and the output) and are freed. */
static void same_bits_as_first(float *r[4], float *o[4], const size_t n[4],
                               int t, const char *what) {
  for (int i = 0; i < 4 && t > 1; i++)
    if (memcmp(o[i], r[i], n[i] * 4) != 0)
      fail_msg("%s, %d threads%s: %s differs from 1 thread", what,
               t < 4 ? t : 3, t < 4 ? "" : " (planned at 1)",
               (const char *[]){"y", "dX", "dW", "db"}[i]);
  for (int i = 0; i < 4; i++) {
    if (t == 1)
      r[i] = o[i];
    else
      free(o[i]);
  }
}

/* Forward and backward (y, dX, dW, db) are the same bits with 1, 2 and 3
 * compute threads: chunks run side by side in workspace slots of their own
 * (per image, in chunks of 2+2+1), a batch of one chunk runs its GEMMs in
 * fixed blocks of filters and input channels, dW's GEMM runs in fixed
 * blocks of input channels, db by filter. The planned workspace is one
 * slot per thread that gets a chunk; a layer planned at 1 thread and run at
 * 3 stays within its one slot (the canary after the workspace) with the
 * same bits. Also batches of one image (in place, 1x1 included). The
 * 16-channel case is large enough for OpenBLAS to round a GEMM split at
 * other boundaries differently. */
static void test_threads_same_bits(void **state) {
  (void)state;
  /* clang-format off */
  static const conv_case extra[] = {
      {.name = "16 channels 3x3 pad 1",
       .props = {"filters", "24", "kernel_size", "3", "padding", "1", NULL},
       .in = {5, 16, 12, 12}, .f = 24, .groups = 1, .bias = 1},
      {.name = "one image 3x3 pad 1",
       .props = {"filters", "24", "kernel_size", "3", "padding", "1", NULL},
       .in = {1, 16, 12, 12}, .f = 24, .groups = 1, .bias = 1},
      {.name = "one image 1x1 groups 2",
       .props = {"filters", "12", "kernel_size", "1", "groups", "2", NULL},
       .in = {1, 16, 9, 7}, .f = 12, .groups = 2, .bias = 1},
  };
  /* clang-format on */
  size_t nc = sizeof chunk_cases / sizeof *chunk_cases;
  size_t ne = sizeof extra / sizeof *extra;
  nto_err err = {0};
  nto_conv2d_no_winograd_for_tests = 1; /* im2col's chunks and blocks */
  for (size_t ci = 0; ci < nc + ne; ci++) {
    const conv_case *k = ci < nc ? &chunk_cases[ci] : &extra[ci - nc];
    case_data d;
    case_data_make(k, 900 + (unsigned)ci, &d);
    size_t nx = d.nx, ny = d.ny, nw = d.nw, per_img = d.per_img;
    float *x = d.x, *w = d.w, *b = d.b, *dy = d.dy;
    /* 1 image per GEMM (N chunks), 2 (2+2+1 for 5 images), all in one */
    const size_t bounds[] = {1, 2 * per_img + per_img / 2, 100 * per_img};
    const int nch[] = {k->in.n, (k->in.n + 1) / 2, 1};
    for (int bi = 0; bi < 3; bi++) {
      float *r[4] = {NULL}, *o[4];
      size_t n[4] = {ny, nx, nw, (size_t)k->f}, ws1 = 0;
      /* t = 4: planned at 1 thread, run at 3 */
      for (int t = 1; t <= 4; t++) {
        assert_int_equal(nto_parallel_set_threads(t < 4 ? t : 1, &err), 0);
        threads_after_plan = t < 4 ? 0 : 3;
        for (int i = 0; i < 4; i++)
          o[i] = calloc(n[i], 4);
        size_t ws =
            run_once(k, bounds[bi], x, w, b, dy, o[0], o[1], o[2], o[3]);
        threads_after_plan = 0;
        int tp = t < 4 ? t : 1; /* threads at plan */
        int slots = nch[bi] < 2 ? 1 : nch[bi] < tp ? nch[bi] : tp;
        if (t == 1)
          ws1 = ws;
        /* each slot rounded up to 64 bytes when there are several */
        size_t slot = slots > 1 ? (ws1 / 4 + 15) / 16 * 16 * 4 : ws1;
        assert_int_equal(ws, slot * (size_t)slots);
        char what[160];
        snprintf(what, sizeof what, "%s, %d chunk(s)", k->name, nch[bi]);
        same_bits_as_first(r, o, n, t, what);
      }
      for (int i = 0; i < 4; i++)
        free(r[i]);
    }
    case_data_free(&d);
  }
  nto_conv2d_no_winograd_for_tests = 0;
  nto_parallel_free();
}

/* Winograd's forward and backward (y, dX, dW, db) are the same bits with
 * 1, 2 and 3 compute threads, and planned at 1 thread and run at 3 (within
 * its one slot: the canary), with blocks of one tile row (a block ends
 * inside an image), of about 4 tile rows (blocks cross images) and of the
 * whole batch; and they differ from im2col's results by rounding only. */
static void test_winograd_threads_same_bits(void **state) {
  (void)state;
  /* clang-format off */
  static const conv_case wc[] = {
      {.name = "winograd 24 channels 11x9 pad 1",
       .props = {"filters", "20", "kernel_size", "3", "padding", "1", NULL},
       .in = {5, 24, 11, 9}, .f = 20, .groups = 1, .bias = 1, .wino = 1},
      {.name = "winograd one image padding 0,1,2,1",
       .props = {"filters", "16", "kernel_size", "3", "padding", "0,1,2,1",
                 NULL},
       .in = {1, 16, 6, 7}, .f = 16, .groups = 1, .bias = 1, .wino = 1},
  };
  /* clang-format on */
  nto_err err = {0};
  for (size_t ci = 0; ci < sizeof wc / sizeof *wc; ci++) {
    const conv_case *k = &wc[ci];
    case_data d;
    case_data_make(k, 1300 + (unsigned)ci, &d);
    size_t n[4] = {d.ny, d.nx, d.nw, (size_t)k->f};
    /* im2col's results, for the rounding bound */
    float *im[4];
    for (int i = 0; i < 4; i++)
      im[i] = calloc(n[i], 4);
    nto_conv2d_no_winograd_for_tests = 1;
    run_once(k, 0, d.x, d.w, d.b, d.dy, im[0], im[1], im[2], im[3]);
    nto_conv2d_no_winograd_for_tests = 0;
    /* tile rows: (oh+1)/2 per image; 16 * (c + f) * tw floats each */
    int tw = (k->in.w + 1) / 2; /* padding keeps OW = W here or W + 2 */
    size_t row = (size_t)16 * (k->in.c + k->f) * (tw + 1) * 4;
    const size_t bounds[] = {1, 4 * row, 1 << 24};
    for (int bi = 0; bi < 3; bi++) {
      float *r[4] = {NULL}, *o[4];
      for (int t = 1; t <= 4; t++) {
        assert_int_equal(nto_parallel_set_threads(t < 4 ? t : 1, &err), 0);
        threads_after_plan = t < 4 ? 0 : 3;
        for (int i = 0; i < 4; i++)
          o[i] = calloc(n[i], 4);
        run_once(k, bounds[bi], d.x, d.w, d.b, d.dy, o[0], o[1], o[2], o[3]);
        threads_after_plan = 0;
        char what[160];
        snprintf(what, sizeof what, "%s, bound %zu", k->name, bounds[bi]);
        same_bits_as_first(r, o, n, t, what);
      }
      for (int i = 0; i < 4; i++) {
        double e = rel_err_f(r[i], im[i], n[i]);
        if (e > 1e-5)
          fail_msg("%s, bound %zu: %s rel err %g against im2col", k->name,
                   bounds[bi], (const char *[]){"y", "dX", "dW", "db"}[i], e);
        free(r[i]);
      }
    }
    for (int i = 0; i < 4; i++)
      free(im[i]);
    case_data_free(&d);
  }
  nto_parallel_free();
}

/* Teardown: the pool back to one thread, also after a failed test. */
static int pool_free(void **state) {
  (void)state;
  nto_conv2d_no_winograd_for_tests = 0;
  threads_after_plan = 0;
  nto_parallel_free();
  return 0;
}

/* Rows [r0, r1) of dW from backward_weight_rows equal backward's dW rows
 * within rounding (the same sums; OpenBLAS's kernels round a row
 * differently depending on where it falls in their tiles), for ranges
 * inside a group, across groups and whole, with one image per GEMM and
 * with chunks of images, and write nothing past the rows; the bias has no
 * rows. With the cache (the batch's column matrices, filled by the first
 * call) the rows are the same bits, also on 3 compute threads, and calls
 * after the first do not read the input. Likewise for a Winograd layer,
 * whose cache is the batch's V (its input transform), with blocks of one
 * tile row and of the whole batch. */
static void test_weight_rows_match_backward(void **state) {
  (void)state;
  nto_err err = {0};
  /* clang-format off */
  static const conv_case wino[] = {
      {.name = "winograd 16 channels 7x6 padding 1,2,0,1",
       .props = {"filters", "6", "kernel_size", "3", "padding", "1,2,0,1",
                 NULL},
       .in = {3, 16, 7, 6}, .f = 6, .groups = 1, .bias = 1, .wino = 1},
  };
  /* clang-format on */
  const size_t bounds[] = {1, 1 << 20}; /* per image, whole batch */
  size_t nc0 = sizeof chunk_cases / sizeof *chunk_cases;
  for (size_t ci = 0; ci < nc0 + sizeof wino / sizeof *wino; ci++) {
    const conv_case *k = ci < nc0 ? &chunk_cases[ci] : &wino[ci - nc0];
    for (int bi = 0; bi < 2; bi++) {
      nto_layer l;
      nto_conv2d_chunk_bytes_for_tests = bounds[bi];
      assert_int_equal(
          gc_layer_make(&l, &nto_conv2d_layer, k->props, 1, &k->in), 0);
      nto_conv2d_chunk_bytes_for_tests = 0;
      size_t nw = nto_shape_numel(l.w[0].shape), kcol = nw / k->f;
      assert_int_equal(l.ops->weight_row(&l, 0), (int)kcol);
      size_t ohw = (size_t)l.out_shape.h * l.out_shape.w;
      assert_int_equal(nto_conv2d_is_winograd_for_tests(&l), k->wino);
      size_t nc = l.ops->weight_rows_cache(&l, 0);
      /* im2col's column matrices, or Winograd's V: 16 * C per tile */
      size_t tiles = (size_t)k->in.n * ((l.out_shape.h + 1) / 2) *
                     ((l.out_shape.w + 1) / 2);
      assert_int_equal(nc, k->wino ? 16 * (size_t)k->in.c * tiles
                                   : (size_t)k->groups * kcol *
                                         (size_t)k->in.n * ohw);
      if (k->bias) {
        assert_int_equal(l.ops->weight_row(&l, 1), 0);
        assert_int_equal(l.ops->weight_rows_cache(&l, 1), 0);
      }
      float *cache = malloc(nc * 4), *cached = malloc(nw * 4);
      size_t nx = nto_shape_numel(k->in), ny = nto_shape_numel(l.out_shape);
      nto_rng rng;
      nto_rng_seed(&rng, 900 + (unsigned)ci);
      float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc(k->f * 4);
      float *dy = malloc(ny * 4), *y = malloc(ny * 4), *dx = malloc(nx * 4);
      float *dw = malloc(nw * 4), *db = calloc(k->f, 4), *rows = malloc(nw * 4);
      fill(x, nx, &rng);
      fill(w, nw, &rng);
      fill(bias, k->f, &rng);
      fill(dy, ny, &rng);
      run_once(k, bounds[bi], x, w, bias, dy, y, dx, dw, db);
      float *ws = ws_alloc(l.ws_bytes);
      nto_bwd bw = {.dout = dy, .ws = ws};
      bw.in[0] = x;
      bw.w[0] = w;
      bw.w[1] = k->bias ? bias : NULL;
      const int ranges[][2] = {{0, k->f},        {0, 1}, {1, k->f - 1},
                               {k->f - 1, k->f}, {1, 3}, {2, k->f}};
      for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
        int r0 = ranges[r][0], r1 = ranges[r][1];
        for (size_t i = 0; i < nw; i++)
          rows[i] = CANARY;
        l.ops->backward_weight_rows(&l, &bw, 0, r0, r1, rows, NULL, 0);
        ws_check(ws, l.ws_bytes);
        nto_bwd bc = bw; /* the input only for the call that fills */
        bc.in[0] = r == 0 ? x : NULL;
        for (size_t i = 0; i < nw; i++)
          cached[i] = CANARY;
        /* on 3 compute threads (planned at 1): the fill splits by channels,
         * the GEMMs by fixed blocks, so the same bits */
        assert_int_equal(nto_parallel_set_threads(3, &err), 0);
        l.ops->backward_weight_rows(&l, &bc, 0, r0, r1, cached, cache, r == 0);
        assert_int_equal(nto_parallel_set_threads(1, &err), 0);
        ws_check(ws, l.ws_bytes);
        assert_memory_equal(cached, rows, nw * 4);
        double e =
            rel_err_f(rows, dw + (size_t)r0 * kcol, (size_t)(r1 - r0) * kcol);
        if (e > 1e-6)
          fail_msg("%s, bound %zu: rows [%d, %d) differ from backward's dW "
                   "by %g",
                   k->name, bounds[bi], r0, r1, e);
        if ((size_t)(r1 - r0) * kcol < nw)
          assert_true(rows[(size_t)(r1 - r0) * kcol] == CANARY);
      }
      free(ws);
      gc_layer_free(&l);
      free(x), free(w), free(bias), free(dy), free(y), free(dx), free(dw);
      free(db), free(rows), free(cache), free(cached);
    }
  }
}

/* The regularizer's term of the loss as layer.c computes it, by hand:
 * 0.5 * C * sqrt(sum w^2), the sum in double in element order. */
static double reg_loss_of(const float *w, size_t n, float c) {
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    ss += (double)w[i] * w[i];
  return 0.5 * (double)c * sqrt(ss);
}

/*
 * weight_regularizer = l2norm, weight_regularizer_constant = 0.25 (and
 * nntrainer's 2020 spelling of both): the weight gets l2 = 0.25, the bias
 * none; forward sets reg_loss = 0.5 * C * ||W|| (0 when the layer is
 * frozen; the replay leaves it as it is); backward's dW and
 * backward_weight_rows' rows are those of the same layer without the
 * regularizer plus C * W, bit for bit, while dX and db are unchanged. On
 * the im2col, depthwise and Winograd paths.
 */
static void test_regularizer(void **state) {
  (void)state;
  static const struct {
    const char *name;
    const char *props[12];
    nto_shape in;
  } rc_cases[] = {
      {"im2col",
       {"filters", "4", "kernel_size", "3", "padding", "1", NULL},
       {2, 3, 5, 5}},
      {"depthwise",
       {"filters", "3", "kernel_size", "3", "groups", "3", "padding", "1",
        NULL},
       {2, 3, 5, 5}},
      {"winograd",
       {"filters", "6", "kernel_size", "3", "padding", "1", NULL},
       {2, 16, 8, 8}},
  };
  static const char *const spellings[][4] = {
      {"weight_regularizer", "l2norm", "weight_regularizer_constant", "0.25"},
      {"weight_decay", "L2Norm", "weight_decay_lambda", "0.25"}};
  const float c = 0.25f;
  for (size_t ci = 0; ci < sizeof rc_cases / sizeof *rc_cases; ci++)
    for (size_t sp = 0; sp < 2; sp++) {
      const char *props[20];
      int np = 0;
      while (rc_cases[ci].props[np]) {
        props[np] = rc_cases[ci].props[np];
        np++;
      }
      props[np] = NULL;
      nto_layer a, b; /* without, with the regularizer */
      assert_int_equal(
          gc_layer_make(&a, &nto_conv2d_layer, props, 1, &rc_cases[ci].in), 0);
      for (int k = 0; k < 4; k++)
        props[np + k] = spellings[sp][k];
      props[np + 4] = NULL;
      assert_int_equal(
          gc_layer_make(&b, &nto_conv2d_layer, props, 1, &rc_cases[ci].in), 0);
      assert_true(a.w[0].l2 == 0.0f && a.w[1].l2 == 0.0f);
      assert_true(b.w[0].l2 == c);
      assert_true(b.w[1].l2 == 0.0f); /* never the bias */
      size_t nw = nto_shape_numel(b.w[0].shape), f = (size_t)b.w[1].shape.c;
      size_t kcol = nw / f;
      size_t nx = nto_shape_numel(rc_cases[ci].in);
      size_t ny = nto_shape_numel(b.out_shape);
      nto_rng rng;
      nto_rng_seed(&rng, 700 + (unsigned)ci);
      float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc(f * 4);
      float *dy = malloc(ny * 4), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
      float *dwa = malloc(nw * 4), *dwb = malloc(nw * 4),
            *want = malloc(nw * 4);
      float *dba = malloc(f * 4), *dbb = malloc(f * 4);
      float *dxa = malloc(nx * 4), *dxb = malloc(nx * 4);
      fill(x, nx, &rng);
      fill(w, nw, &rng);
      fill(bias, f, &rng);
      fill(dy, ny, &rng);
      size_t wsb = a.ws_bytes > b.ws_bytes ? a.ws_bytes : b.ws_bytes;
      float *ws = ws_alloc(wsb);
      nto_fwd fw = {.in = {x}, .w = {w, bias}, .ws = ws, .training = 1};
      fw.out = y;
      a.reg_loss = -1.0;
      a.ops->forward(&a, &fw);
      assert_true(a.reg_loss == 0.0);
      fw.out = y2;
      b.ops->forward(&b, &fw);
      assert_memory_equal(y, y2, ny * 4); /* the output is the same */
      double want_loss = reg_loss_of(w, nw, c);
      assert_true(want_loss > 0.0);
      if (fabs(b.reg_loss - want_loss) > 1e-12 * want_loss)
        fail_msg("%s: reg_loss %.17g, expected %.17g", rc_cases[ci].name,
                 b.reg_loss, want_loss);
      b.reg_loss = -1.0; /* the replay writes nothing but the output */
      b.ops->replay(&b, &fw);
      assert_true(b.reg_loss == -1.0);
      fw.training = 0; /* inference: the term as well */
      b.ops->forward(&b, &fw);
      assert_true(b.reg_loss == want_loss);
      b.trainable = 0; /* frozen: no term */
      b.ops->forward(&b, &fw);
      assert_true(b.reg_loss == 0.0);
      b.trainable = 1;
      nto_bwd bw = {.in = {x}, .dout = dy, .w = {w, bias}, .ws = ws};
      bw.din[0] = dxa;
      bw.dw[0] = dwa;
      bw.dw[1] = dba;
      a.ops->backward(&a, &bw);
      bw.din[0] = dxb;
      bw.dw[0] = dwb;
      bw.dw[1] = dbb;
      b.ops->backward(&b, &bw);
      ws_check(ws, wsb);
      for (size_t i = 0; i < nw; i++)
        want[i] = dwa[i] + c * w[i];
      assert_memory_equal(dwb, want, nw * 4);
      assert_memory_equal(dba, dbb, f * 4);
      assert_memory_equal(dxa, dxb, nx * 4);
      if (b.ops->weight_row(&b, 0) > 0) { /* rows [1, 3) of dW */
        nto_bwd br = {.in = {x}, .dout = dy, .w = {w, bias}, .ws = ws};
        a.ops->backward_weight_rows(&a, &br, 0, 1, 3, dwa, NULL, 0);
        b.ops->backward_weight_rows(&b, &br, 0, 1, 3, dwb, NULL, 0);
        for (size_t i = 0; i < 2 * kcol; i++)
          want[i] = dwa[i] + c * w[kcol + i];
        assert_memory_equal(dwb, want, 2 * kcol * 4);
      } else {
        assert_string_equal(rc_cases[ci].name, "depthwise");
      }
      free(ws);
      gc_layer_free(&a);
      gc_layer_free(&b);
      free(x), free(w), free(bias), free(dy), free(y), free(y2), free(dwa);
      free(dwb), free(want), free(dba), free(dbb), free(dxa), free(dxb);
    }
}

/* Weight requests: names, shapes, export rank, fans, order; plan twice
 * gives the same requests. */
static void test_weights(void **state) {
  (void)state;
  const char *const props[] = {"filters", "6", "kernel_size", "3,2",
                               "groups",  "2", NULL};
  nto_shape in = {2, 4, 6, 6};
  nto_layer l;
  assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, props, 1, &in), 0);
  for (int round = 0; round < 2; round++) {
    assert_int_equal(l.n_w, 2);
    assert_int_equal(l.n_saved, 0);
    assert_string_equal(l.w[0].name, "weight");
    assert_true(nto_shape_eq(l.w[0].shape, (nto_shape){6, 2, 3, 2}));
    assert_int_equal(l.w[0].ndim, 4);
    assert_int_equal(l.w[0].fan_in, 2 * 3 * 2);
    assert_int_equal(l.w[0].fan_out, 6 * 3 * 2);
    assert_int_equal(l.w[0].init, NTO_INIT_XAVIER_UNIFORM);
    assert_int_equal(l.w[0].trainable, 1);
    assert_string_equal(l.w[1].name, "bias");
    assert_true(nto_shape_eq(l.w[1].shape, (nto_shape){1, 6, 1, 1}));
    assert_int_equal(l.w[1].ndim, 1);
    assert_int_equal(l.w[1].init, NTO_INIT_ZEROS);
    assert_int_equal(l.bwd_needs_input, 1);
    assert_int_equal(l.out_kind, NTO_OUT_PLAIN);
    assert_true(nto_shape_eq(l.out_shape, (nto_shape){2, 6, 4, 5}));
    nto_err err = {0};
    assert_int_equal(l.ops->plan(&l, &err), 0);
  }
  gc_layer_free(&l);

  const char *const p2[] = {"filters",
                            "2",
                            "kernel_size",
                            "1",
                            "weight_initializer",
                            "he_normal",
                            "bias_initializer",
                            "ones",
                            NULL};
  assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, p2, 1, &in), 0);
  assert_int_equal(l.w[0].init, NTO_INIT_HE_NORMAL);
  assert_int_equal(l.w[1].init, NTO_INIT_ONES);
  gc_layer_free(&l);
}

/* Planned workspace of props on in with chunk bound `bound` (0: the
 * default). */
static size_t ws_of(const char *const *props, nto_shape in, size_t bound) {
  nto_layer l;
  nto_conv2d_chunk_bytes_for_tests = bound;
  assert_int_equal(gc_layer_make(&l, &nto_conv2d_layer, props, 1, &in), 0);
  nto_conv2d_chunk_bytes_for_tests = 0;
  size_t ws = l.ws_bytes;
  gc_layer_free(&l);
  return ws;
}

/* The workspace never grows with the batch beyond max(chunk bound, one
 * image's column matrix): one image per GEMM needs one group's column
 * matrix of one image (nothing for 1x1); a chunk of k images needs
 * k * (K + F/G) * OH*OW floats, with k the most images the bound holds,
 * evenly balanced over the chunks. Depthwise needs none. */
static void test_workspace(void **state) {
  (void)state;
  nto_conv2d_no_winograd_for_tests = 1; /* im2col's; Winograd's below */
  const char *const props[] = {
      "filters", "8", "kernel_size", "3", "padding", "1", "groups", "2", NULL};
  const size_t col1 = (size_t)(2 * 3 * 3) * 10 * 12 * 4; /* K * OHW */
  const size_t per = (size_t)(2 * 3 * 3 + 4) * 10 * 12 * 4;
  /* one image per GEMM: one column matrix whatever the batch */
  for (int n = 1; n <= 64; n *= 4)
    assert_int_equal(ws_of(props, (nto_shape){n, 4, 10, 12}, 1), col1);
  /* a bound of 3 images: batch 1 -> 1 image, 2 -> 2, 5 -> 3 (3+2),
   * 7 -> 3 (3+2+2), 16 -> 3 (6 chunks: 3+3+3+3+2+2) */
  const int batch[] = {1, 2, 5, 7, 16};
  const size_t k3[] = {0, 2, 3, 3, 3};
  for (int i = 0; i < 5; i++) {
    size_t ws = ws_of(props, (nto_shape){batch[i], 4, 10, 12}, 3 * per + 7);
    assert_int_equal(ws, k3[i] ? k3[i] * per : col1);
  }
  /* a bound of 4 images, batch 5: 2 chunks of 3 and 2, not 4 and 1 */
  assert_int_equal(ws_of(props, (nto_shape){5, 4, 10, 12}, 4 * per), 3 * per);
  /* default bound: small images batch up to it, never past it */
  for (int n = 1; n <= 1024; n *= 4) {
    size_t ws = ws_of(props, (nto_shape){n, 4, 10, 12}, 0);
    size_t k = DEFAULT_CHUNK_BYTES / per < (size_t)n ? DEFAULT_CHUNK_BYTES / per
                                                     : (size_t)n;
    size_t nch = (n + k - 1) / k;
    k = (n + nch - 1) / nch;
    assert_int_equal(ws, k > 1 ? k * per : col1);
    assert_true(ws <= DEFAULT_CHUNK_BYTES);
  }
  /* an image whose column matrix exceeds the bound: per image, at every
   * batch size (ResNet-18's 64-channel stage at 32x32: 2.25 MiB) */
  const char *const big[] = {"filters", "64", "kernel_size", "3",
                             "padding", "1",  NULL};
  for (int n = 1; n <= 64; n *= 2)
    assert_int_equal(ws_of(big, (nto_shape){n, 64, 32, 32}, 0),
                     (size_t)64 * 9 * 32 * 32 * 4);
  /* 1x1: nothing for one image per GEMM, the chunk's gathered input and
   * output otherwise */
  const char *const p1[] = {"filters", "8", "kernel_size", "1", NULL};
  nto_shape in = {4, 4, 10, 12};
  assert_int_equal(ws_of(p1, in, 1), 0);
  assert_int_equal(ws_of(p1, (nto_shape){1, 4, 10, 12}, 0), 0);
  assert_int_equal(ws_of(p1, in, 0), (size_t)4 * (4 + 8) * 10 * 12 * 4);
  /* depthwise, stride 1: per compute thread (1 here) two padded planes
   * (pitch P = OW + 2 = 12, 8 + 2 rows, 2 floats of slack) and OH*P
   * outputs, 340 floats rounded up to 352 (64 bytes); stride 2: none */
  const char *const pd[] = {"filters", "4", "kernel_size", "3",
                            "groups",  "4", NULL};
  assert_int_equal(ws_of(pd, in, 0), (size_t)352 * 4);
  assert_int_equal(ws_of(pd, in, 1), (size_t)352 * 4);
  const char *const pd2[] = {"filters", "4",      "kernel_size", "3", "groups",
                             "4",       "stride", "2",           NULL};
  assert_int_equal(ws_of(pd2, in, 0), 0);

  /* Winograd, 32 -> 32 channels, 9x9, batch 1: 5x5 tiles, a tile row
   * 16 * (32 + 32) * 5 = 5120 floats of V and M, the filter transform
   * 16 * 32 * 32 = 16384 floats (dW's units need less: a quarter of the
   * positions per tile row) */
  nto_conv2d_no_winograd_for_tests = 0;
  const char *const pw[] = {"filters", "32", "kernel_size", "3",
                            "padding", "1",  NULL};
  nto_shape iw = {1, 32, 9, 9};
  /* the default bound: one block of the 5 rows */
  assert_int_equal(ws_of(pw, iw, 0), (size_t)(16384 + 5 * 5120) * 4);
  /* ResNet-18's 64-channel stage at 32x32, batch 1: 16x16 tiles, a tile
   * row 16 * 128 * 16 floats, 8 rows within 1 MiB, the filter transform
   * 16 * 64 * 64 floats: 1.25 MiB, below im2col's column matrix (64*9 x
   * 1024 floats, 2.25 MiB), which dW by Winograd no longer needs */
  const char *const p64[] = {"filters", "64", "kernel_size", "3",
                             "padding", "1",  NULL};
  assert_int_equal(ws_of(p64, (nto_shape){1, 64, 32, 32}, 0),
                   (size_t)(65536 + 8 * 32768) * 4);
  /* two rows' bound: blocks 2+2+1 (the balanced split of 5 by 2) */
  assert_int_equal(ws_of(pw, iw, 2 * 5120 * 4), (size_t)(16384 + 2 * 5120) * 4);
  /* at 2 compute threads: a slot each */
  nto_err err = {0};
  assert_int_equal(nto_parallel_set_threads(2, &err), 0);
  assert_int_equal(ws_of(pw, iw, 2 * 5120 * 4),
                   (size_t)(16384 + 2 * 2 * 5120) * 4);
  /* one block: one slot whatever the threads */
  assert_int_equal(ws_of(pw, iw, 0), (size_t)(16384 + 5 * 5120) * 4);
  nto_parallel_free();
}

/* Builds a layer step by step; returns the first failing code (0 if all
 * succeed), with its message in err. The caller frees l->priv. */
static int try_layer(nto_layer *l, const char *const *props, nto_shape in,
                     nto_err *err) {
  memset(l, 0, sizeof *l);
  l->ops = &nto_conv2d_layer;
  l->trainable = 1;
  l->priv = calloc(1, nto_conv2d_layer.priv_size);
  nto_conv2d_layer.defaults(l);
  nto_err_clear(err);
  for (int i = 0; props[i]; i += 2) {
    int rc = nto_conv2d_layer.set_prop(l, props[i], props[i + 1], err);
    if (rc != 0)
      return rc;
  }
  l->n_in = 1;
  l->batch = in.n;
  l->in_shape[0] = in;
  return nto_conv2d_layer.plan(l, err);
}

/* Expects try_layer(props, in) to fail with code and a message holding
 * every NULL-terminated needle. */
static void expect_error(const char *const *props, nto_shape in, int code,
                         const char *n1, const char *n2) {
  nto_layer l;
  nto_err err;
  int rc = try_layer(&l, props, in, &err);
  free(l.priv);
  if (rc != code || (n1 && !strstr(err.msg, n1)) ||
      (n2 && !strstr(err.msg, n2))) {
    fprintf(stderr, "expected code %d with '%s' '%s', got %d '%s'\n", code,
            n1 ? n1 : "", n2 ? n2 : "", rc, err.msg);
    fail();
  }
}

static void test_errors(void **state) {
  (void)state;
  nto_shape in = {2, 4, 3, 3};
#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
  expect_error(P("filters", "0", "kernel_size", "3"), in, NTO_ECONFIG,
               "expected", "got '0'");
  expect_error(P("filters", "abc"), in, NTO_ECONFIG, "expected", "got 'abc'");
  expect_error(P("filters", "2", "stride", "0"), in, NTO_ECONFIG, "expected",
               "got '0'");
  expect_error(P("filters", "2", "stride", "1,0"), in, NTO_ECONFIG, "expected",
               "'1,0'");
  expect_error(P("filters", "2", "dilation", "0"), in, NTO_ECONFIG, "expected",
               "got '0'");
  expect_error(P("filters", "2", "kernel_size", "0"), in, NTO_ECONFIG,
               "expected", "got '0'");
  expect_error(P("filters", "2", "kernel_size", "3,3,3"), in, NTO_ECONFIG,
               "expected", "'3,3,3'");
  expect_error(P("filters", "2", "padding", "bogus"), in, NTO_ECONFIG,
               "expected", "got 'bogus'");
  expect_error(P("filters", "2", "padding", "1,2,3"), in, NTO_ECONFIG,
               "expected", "got '1,2,3'");
  expect_error(P("filters", "2", "padding", "-1"), in, NTO_ECONFIG, "expected",
               "got '-1'");
  expect_error(P("filters", "2", "groups", "0"), in, NTO_ECONFIG, "expected",
               "got '0'");
  expect_error(P("filters", "2", "disable_bias", "maybe"), in, NTO_ECONFIG,
               "expected", "got 'maybe'");
  expect_error(P("filters", "2", "weight_initializer", "glorot"), in,
               NTO_ECONFIG, "expected", "got 'glorot'");
  expect_error(P("filters", "2", "bias_initializer", "x"), in, NTO_ECONFIG,
               "expected", "got 'x'");
  expect_error(P("filters", "2", "units", "3"), in, NTO_ENOKEY, NULL, NULL);
  expect_error(P("filters", "2", "weight_regularizer", "l1"), in, NTO_ECONFIG,
               "expected one of l2norm|none", "got 'l1'");
  expect_error(P("filters", "2", "weight_regularizer_constant", "-0.5"), in,
               NTO_ECONFIG, "expected a number >= 0", "got '-0.5'");
  expect_error(P("filters", "2", "weight_regularizer_constant", "1e39"), in,
               NTO_ECONFIG, "float32", "got '1e39'");
  expect_error(P("filters", "2", "weight_decay", "0.01"), in, NTO_ECONFIG,
               "weight_decay = 0.01", "not supported: only 0");
  expect_error(P("filters", "2", "bias_decay", "0.5"), in, NTO_ECONFIG,
               "bias_decay = 0.5", "not supported: only 0");
  expect_error(P("filters", "2", "weight_decay", "l1"), in, NTO_ECONFIG,
               "l2norm or none", "got 'l1'");
  expect_error(P("filters", "2", "weight_decay_lambda", "-1"), in, NTO_ECONFIG,
               ">= 0", "got '-1'");
  /* one setting in both spellings */
  expect_error(P("filters", "2", "weight_regularizer", "l2norm", "weight_decay",
                 "l2norm"),
               in, NTO_ECONFIG, "same setting as 'weight_regularizer'",
               "given twice");
  expect_error(P("filters", "2", "weight_decay_lambda", "0.1",
                 "weight_regularizer_constant", "0.1"),
               in, NTO_ECONFIG, "same setting as 'weight_decay_lambda'", NULL);
  /* plan errors */
  expect_error(P("kernel_size", "3"), in, NTO_ECONFIG, "'filters'", "required");
  expect_error(P("filters", "2"), in, NTO_ECONFIG, "'kernel_size'", "required");
  expect_error(P("filters", "6", "kernel_size", "1", "groups", "3"), in,
               NTO_ECONFIG, "groups 3", "4");
  expect_error(P("filters", "3", "kernel_size", "1", "groups", "2"), in,
               NTO_ECONFIG, "groups 2", "3");
  expect_error(P("filters", "2", "kernel_size", "5"), in, NTO_ESHAPE, "5x5",
               "3x3");
  expect_error(P("filters", "2", "kernel_size", "3", "dilation", "2"),
               (nto_shape){1, 1, 4, 8}, NTO_ESHAPE, "5x5", "4x8");
  expect_error(P("filters", "2", "kernel_size", "5", "padding", "1,0"), in,
               NTO_ESHAPE, "5x5", "5x3");
  /* the same kernel fits once padded */
  expect_error(P("filters", "2", "kernel_size", "5", "padding", "1"), in, 0,
               NULL, NULL);
  expect_error(P("filters", "2", "kernel_size", "5", "padding", "same"), in, 0,
               NULL, NULL);
#undef P
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_reference),
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_chunks_match_per_image),
      cmocka_unit_test_teardown(test_threads_same_bits, pool_free),
      cmocka_unit_test_teardown(test_winograd_threads_same_bits, pool_free),
      cmocka_unit_test_teardown(test_weight_rows_match_backward, pool_free),
      cmocka_unit_test_teardown(test_regularizer, pool_free),
      cmocka_unit_test(test_weights),
      cmocka_unit_test_teardown(test_workspace, pool_free),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
