/*
 * winograd.c - F(2x2, 3x3) convolutions: transforms and driver (see
 * winograd.h for the algorithm and its source).
 *
 * Layouts, for a block of tile rows with n tiles (the block's rows in
 * order, tw tiles each, rows of several images possibly):
 *   U (16, F, C): U[xi][f][c] = (G g G^T)[xi / 4][xi % 4] of filter (f, c);
 *   V (16, C, n): V[xi][c][t] = (B^T d B)[xi / 4][xi % 4] of tile t of
 *     input channel c;
 *   M (16, F, n): M[xi] = U[xi] . V[xi];
 *   y[f] at tile t <- A^T M[.][f][t] A (+ bias[f]).
 * V and M of a block sit in its thread's workspace slot, V first.
 * The transforms run on one tile row at a time: the four input rows of the
 * row (zero-padded to 2*tw + 2 columns) get B^T's row combinations as whole
 * vectorizable rows, then B's column combinations per tile; the output
 * transform likewise vectorizes over a tile row.
 */
#include "winograd.h"

#include "clones.h"
#include "parallel.h"

#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define NXI 16 /* positions of a transformed 4x4 block */

int nto_wino_plan_set(nto_wino_plan *p, int c, int h, int w, int f, int oh,
                      int ow, int pt, int pl, int batch, size_t block_bytes) {
  p->c = c;
  p->h = h;
  p->w = w;
  p->f = f;
  p->oh = oh;
  p->ow = ow;
  p->pt = pt;
  p->pl = pl;
  p->th = (oh + 1) / 2;
  p->tw = (ow + 1) / 2;
  p->batch = batch;
  size_t row = (size_t)NXI * ((size_t)c + (size_t)f) * (size_t)p->tw;
  size_t rows = (size_t)batch * (size_t)p->th;
  size_t r = block_bytes / sizeof(float) / row;
  if (r < 1)
    r = 1;
  if (r > rows)
    r = rows;
  if (r * (size_t)p->tw > INT_MAX) /* a block's tiles: a BLAS int */
    r = INT_MAX / (size_t)p->tw;
  if (rows > INT_MAX || r < 1)
    return -1;
  size_t nb = (rows + r - 1) / r;
  r = (rows + nb - 1) / nb; /* the largest block, balanced */
  p->blocks = (int)nb;
  int t = nto_parallel_threads();
  p->slots = p->blocks < t ? p->blocks : t;
  if (__builtin_mul_overflow(row, r, &p->slot))
    return -1;
  if (p->slots > 1)
    p->slot = (p->slot + 15) / 16 * 16;
  size_t total;
  if (__builtin_mul_overflow(p->slot, (size_t)p->slots, &total) ||
      total > SIZE_MAX / sizeof(float))
    return -1;
  return 0;
}

size_t nto_wino_ws_floats(const nto_wino_plan *p) {
  return p->slot * (size_t)p->slots;
}

size_t nto_wino_filter_floats(int f, int c) {
  return (size_t)NXI * (size_t)f * (size_t)c;
}

/* u (16, f, c) rows of filters [f0, f1): G g G^T, the products by 1/2
 * after the sums (exact scalings). */
typedef struct filter_job {
  const float *w;
  int f, c;
  float *u;
} filter_job;

NTO_CLONES static void filter_range(void *ctx, size_t f0, size_t f1, int slot) {
  const filter_job *j = ctx;
  size_t fc = (size_t)j->f * j->c;
  (void)slot;
  for (size_t fi = f0; fi < f1; fi++)
    for (int ci = 0; ci < j->c; ci++) {
      const float *k = j->w + (fi * j->c + ci) * 9;
      float t[4][3];
      for (int q = 0; q < 3; q++) { /* G g: columns of g */
        t[0][q] = k[q];
        t[1][q] = 0.5f * ((k[q] + k[3 + q]) + k[6 + q]);
        t[2][q] = 0.5f * ((k[q] - k[3 + q]) + k[6 + q]);
        t[3][q] = k[6 + q];
      }
      float *u = j->u + fi * j->c + ci;
      for (int a = 0; a < 4; a++) { /* (G g) G^T: rows of G g */
        u[(size_t)(4 * a + 0) * fc] = t[a][0];
        u[(size_t)(4 * a + 1) * fc] = 0.5f * ((t[a][0] + t[a][1]) + t[a][2]);
        u[(size_t)(4 * a + 2) * fc] = 0.5f * ((t[a][0] - t[a][1]) + t[a][2]);
        u[(size_t)(4 * a + 3) * fc] = t[a][2];
      }
    }
}

void nto_wino_filter(const float *w, int f, int c, float *u) {
  filter_job j = {w, f, c, u};
  nto_parallel_for((size_t)f, 1, 0, filter_range, &j);
}

/*
 * V of tile rows [ty0, ty1) of one input channel xc (h, w) of one image:
 * position xi of tile (ty, tx) goes to v[xi * vxi + (ty - ty0) * tw + tx].
 */
NTO_CLONES static void input_tiles(const nto_wino_plan *g, const float *xc,
                                   int ty0, int ty1, float *v, size_t vxi) {
  float r[4][NTO_WINO_ROW_MAX];
  int wp = 2 * g->tw + 2; /* padded columns the row's tiles read */
  int lo = g->pl, hi = g->pl + g->w < wp ? g->pl + g->w : wp;
  for (int ty = ty0; ty < ty1; ty++) {
    for (int a = 0; a < 4; a++) {
      int iy = 2 * ty - g->pt + a;
      float *ra = r[a];
      if (iy < 0 || iy >= g->h) {
        for (int x = 0; x < wp; x++)
          ra[x] = 0.0f;
        continue;
      }
      const float *xr = xc + (size_t)iy * g->w; /* column x - pl */
      for (int x = 0; x < lo; x++)
        ra[x] = 0.0f;
      for (int x = lo; x < hi; x++)
        ra[x] = xr[x - g->pl];
      for (int x = hi; x < wp; x++)
        ra[x] = 0.0f;
    }
    /* B^T d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3), in place */
    for (int x = 0; x < wp; x++) {
      float d0 = r[0][x], d1 = r[1][x], d2 = r[2][x], d3 = r[3][x];
      r[0][x] = d0 - d2;
      r[1][x] = d1 + d2;
      r[2][x] = d2 - d1;
      r[3][x] = d1 - d3;
    }
    /* (B^T d) B: the same combinations of each tile's columns */
    float *vt = v + (size_t)(ty - ty0) * g->tw;
    for (int a = 0; a < 4; a++) {
      const float *t = r[a];
      float *v0 = vt + (size_t)(4 * a) * vxi, *v1 = v0 + vxi;
      float *v2 = v1 + vxi, *v3 = v2 + vxi;
      for (int tx = 0; tx < g->tw; tx++) {
        float e0 = t[2 * tx], e1 = t[2 * tx + 1];
        float e2 = t[2 * tx + 2], e3 = t[2 * tx + 3];
        v0[tx] = e0 - e2;
        v1[tx] = e1 + e2;
        v2[tx] = e2 - e1;
        v3[tx] = e1 - e3;
      }
    }
  }
}

/*
 * Tile rows [ty0, ty1) of one output channel yc (oh, ow) of one image from
 * M: position xi of tile (ty, tx) at m[xi * mxi + (ty - ty0) * tw + tx]; b
 * added to every output.
 */
NTO_CLONES static void output_tiles(const nto_wino_plan *g, const float *m,
                                    size_t mxi, float b, int ty0, int ty1,
                                    float *yc) {
  float o[2][NTO_WINO_ROW_MAX];
  for (int ty = ty0; ty < ty1; ty++) {
    const float *mt = m + (size_t)(ty - ty0) * g->tw;
    for (int tx = 0; tx < g->tw; tx++) {
      float s0[4], s1[4]; /* A^T M: rows (m0 + m1 + m2, m1 - m2 - m3) */
      for (int q = 0; q < 4; q++) {
        float m0 = mt[(size_t)q * mxi + tx];
        float m1 = mt[(size_t)(4 + q) * mxi + tx];
        float m2 = mt[(size_t)(8 + q) * mxi + tx];
        float m3 = mt[(size_t)(12 + q) * mxi + tx];
        s0[q] = (m0 + m1) + m2;
        s1[q] = (m1 - m2) - m3;
      }
      /* (A^T M) A: the same combinations of the columns */
      o[0][2 * tx] = ((s0[0] + s0[1]) + s0[2]) + b;
      o[0][2 * tx + 1] = ((s0[1] - s0[2]) - s0[3]) + b;
      o[1][2 * tx] = ((s1[0] + s1[1]) + s1[2]) + b;
      o[1][2 * tx + 1] = ((s1[1] - s1[2]) - s1[3]) + b;
    }
    size_t oy = 2 * (size_t)ty;
    memcpy(yc + oy * g->ow, o[0], (size_t)g->ow * sizeof *yc);
    if (oy + 1 < (size_t)g->oh)
      memcpy(yc + (oy + 1) * g->ow, o[1], (size_t)g->ow * sizeof *yc);
  }
}

/* A pass's operands (see nto_wino_run). */
typedef struct run_job {
  const nto_wino_plan *p;
  const float *x, *u, *bias;
  int transposed;
  float *ws, *y;
} run_job;

/* Position xi of a 4x4 block rotated by 180 degrees at the transform's
 * level: rows and columns 0 and 3 swapped (see winograd.h). */
static int rotated(int xi) {
  static const int swap[4] = {3, 1, 2, 0};
  return 4 * swap[xi / 4] + swap[xi % 4];
}

/* The 16 GEMMs of a block of n tiles: M[xi] (f, n) from V[xi] (c, n). */
static void block_gemms(const run_job *j, int n, const float *v, float *m) {
  const nto_wino_plan *p = j->p;
  size_t fc = (size_t)p->f * p->c;
  for (int xi = 0; xi < NXI; xi++) {
    const float *vx = v + (size_t)xi * p->c * n;
    float *mx = m + (size_t)xi * p->f * n;
    if (j->transposed) /* M (f, n) = U[rot xi] (c, f)^T . V (c, n) */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->f, n, p->c, 1.0f,
                  j->u + (size_t)rotated(xi) * fc, p->f, vx, n, 0.0f, mx, n);
    else /* M (f, n) = U[xi] (f, c) . V (c, n) */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->f, n, p->c,
                  1.0f, j->u + (size_t)xi * fc, p->c, vx, n, 0.0f, mx, n);
  }
}

/* The tile rows [r, end) of one image within a block's rows [r, r1) of
 * the batch (rows counted image after image): the image, its tile rows
 * [ty0, ty1), and the row where the block or the image ends (end). */
typedef struct segment {
  size_t img, end;
  int ty0, ty1;
} segment;

static void image_segment(const nto_wino_plan *p, size_t r, size_t r1,
                          segment *sg) {
  size_t next = (r / p->th + 1) * p->th; /* the next image's first row */
  sg->img = r / p->th;
  sg->end = next < r1 ? next : r1;
  sg->ty0 = (int)(r - sg->img * p->th);
  sg->ty1 = (int)(sg->end - sg->img * p->th);
}

/* Blocks [b0, b1) in workspace slot `slot`: per block, the input
 * transform of its tile rows (image by image, channel by channel), the 16
 * GEMMs, the output transform. */
static void block_range(void *ctx, size_t b0, size_t b1, int slot) {
  const run_job *j = ctx;
  const nto_wino_plan *p = j->p;
  size_t in_img = (size_t)p->c * p->h * p->w, hw = (size_t)p->h * p->w;
  size_t out_img = (size_t)p->f * p->oh * p->ow, ohw = (size_t)p->oh * p->ow;
  size_t rows = (size_t)p->batch * p->th;
  float *v = j->ws + (size_t)slot * p->slot;
  for (size_t b = b0; b < b1; b++) {
    size_t r0 = rows * b / p->blocks, r1 = rows * (b + 1) / p->blocks;
    int n = (int)((r1 - r0) * p->tw); /* tiles of the block */
    float *m = v + (size_t)NXI * p->c * n;
    size_t vxi = (size_t)p->c * n, mxi = (size_t)p->f * n;
    segment sg;
    for (size_t r = r0; r < r1; r = sg.end) {
      image_segment(p, r, r1, &sg);
      size_t off = (r - r0) * p->tw;
      for (int ci = 0; ci < p->c; ci++)
        input_tiles(p, j->x + sg.img * in_img + (size_t)ci * hw, sg.ty0, sg.ty1,
                    v + (size_t)ci * n + off, vxi);
    }
    block_gemms(j, n, v, m);
    for (size_t r = r0; r < r1; r = sg.end) {
      image_segment(p, r, r1, &sg);
      size_t off = (r - r0) * p->tw;
      for (int fi = 0; fi < p->f; fi++)
        output_tiles(p, m + (size_t)fi * n + off, mxi,
                     j->bias ? j->bias[fi] : 0.0f, sg.ty0, sg.ty1,
                     j->y + sg.img * out_img + (size_t)fi * ohw);
    }
  }
}

void nto_wino_run(const nto_wino_plan *p, const float *x, const float *u,
                  int transposed, const float *bias, float *ws, float *y) {
  run_job j = {p, x, u, bias, transposed, ws, y};
  nto_parallel_for_blas((size_t)p->blocks, 1, p->slots, block_range, &j);
}
