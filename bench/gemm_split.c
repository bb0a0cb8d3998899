/*
 * gemm_split.c - what splitting a convolution's weight into row blocks
 * costs its GEMMs (a measurement for docs/design-offload.md, "Known
 * limits": update chunks as tensors of their own).
 *
 * A convolution by im2col multiplies its weight W (M filters x K = C*kh*kw,
 * row-major, NCHW order) by the column matrix X (K x N, N = batch * output
 * pixels): forward Y = W X, input gradient dX = W^T dY. If W were stored
 * as B row blocks (separate tensors, e.g. one per 1 MiB update chunk), the
 * forward would be B GEMMs of M/B rows each and the input gradient B GEMMs
 * accumulated (beta = 1 after the first). This times both ways with
 * OpenBLAS on one thread (the engine's GEMMs run single-threaded on its
 * compute threads) and prints, per configuration, the median of REPS
 * timings of one forward and one input gradient, in ms, and the largest
 * difference of the blocked results from the whole ones (rounding only:
 * the block sums run in another order).
 *
 * Usage: gemm_split [N [M K [BLOCKS...]]]; defaults: N = 160 (ResNet-18's
 * last stage at batch 10: 10 images of 4x4 pixels), M = 512, K = 4608
 * (512 channels x 3x3), blocks 1 3 9 (9: 1 MiB chunks of a 9 MiB weight).
 * Exit status 0, or 2 on bad arguments or out of memory.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPS 7   /* timings per configuration; the median is printed */
#define INNER 10 /* GEMM sets per timing */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* grad 0: Y (M x N) = W X; grad 1: dX (K x N) = W^T dY, summed over the
 * blocks (in = X or dY, out = Y or dX), by `blocks` row blocks of W. */
static void gemm_blocks(int grad, const float *w, const float *in, float *out,
                        int m, int k, int n, int blocks) {
  int rows = (m + blocks - 1) / blocks;
  for (int m0 = 0; m0 < m; m0 += rows) {
    int r = m0 + rows > m ? m - m0 : rows;
    const float *wb = w + (size_t)m0 * k;
    if (grad)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, r, 1.0f, wb, k,
                  in + (size_t)m0 * n, n, m0 ? 1.0f : 0.0f, out, n);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, n, k, 1.0f, wb,
                  k, in, n, 0.0f, out + (size_t)m0 * n, n);
  }
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++)
    d = fmax(d, fabs((double)a[i] - (double)b[i]));
  return d;
}

/* Median ms of one forward (grad 0) or input gradient (1). */
static double time_one(int grad, const float *w, const float *in, float *out,
                       int m, int k, int n, int blocks) {
  double t[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ms();
    for (int i = 0; i < INNER; i++)
      gemm_blocks(grad, w, in, out, m, k, n, blocks);
    t[r] = (now_ms() - t0) / INNER;
  }
  qsort(t, REPS, sizeof *t, by_value);
  return t[REPS / 2];
}

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 160;
  int m = argc > 3 ? atoi(argv[2]) : 512, k = argc > 3 ? atoi(argv[3]) : 4608;
  int dflt[] = {1, 3, 9}, nb = argc > 4 ? argc - 4 : 3;
  if (n < 1 || m < 1 || k < 1 || argc == 3) {
    fprintf(stderr, "usage: gemm_split [N [M K [BLOCKS...]]]\n");
    return 2;
  }
  size_t wn = (size_t)m * k, xn = (size_t)k * n, yn = (size_t)m * n;
  float *w = malloc(wn * sizeof *w), *x = malloc(xn * sizeof *x);
  float *y = malloc(yn * sizeof *y), *y1 = malloc(yn * sizeof *y1);
  float *dx = malloc(xn * sizeof *dx), *dx1 = malloc(xn * sizeof *dx1);
  if (!w || !x || !y || !y1 || !dx || !dx1) {
    fprintf(stderr, "gemm_split: out of memory\n");
    return 2;
  }
  fill(w, wn, 1);
  fill(x, xn, 2);
  openblas_set_num_threads(1);
  gemm_blocks(0, w, x, y1, m, k, n, 1);
  gemm_blocks(1, w, y1, dx1, m, k, n, 1);
  printf("M %d, K %d, N %d; OpenBLAS 1 thread; median of %d timings of %d "
         "GEMM sets\n",
         m, k, n, REPS, INNER);
  printf("blocks  rows  forward ms  input grad ms  max |diff| fwd / grad\n");
  for (int i = 0; i < nb; i++) {
    int b = argc > 4 ? atoi(argv[4 + i]) : dflt[i];
    if (b < 1 || b > m) {
      fprintf(stderr, "gemm_split: blocks must be 1..%d, got %d\n", m, b);
      return 2;
    }
    double tf = time_one(0, w, x, y, m, k, n, b);
    double df = max_diff(y, y1, yn);
    double tg = time_one(1, w, y1, dx, m, k, n, b);
    double dg = max_diff(dx, dx1, xn);
    printf("%6d  %4d  %10.2f  %13.2f  %.2g / %.2g\n", b, (m + b - 1) / b, tf,
           tg, df, dg);
  }
  free(w);
  free(x);
  free(y);
  free(y1);
  free(dx);
  free(dx1);
  return 0;
}
