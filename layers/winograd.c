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
/* positions of one dW unit: one row of the 4x4 block */
#define DW_XI (NXI / NTO_WINO_DW_UNITS)

/* Blocks of at most max(1, block_bytes / (row * 4)) tile rows, balanced,
 * for a pass whose slot holds `row` floats per tile row; a slot per
 * compute thread that gets a block, at most max_slots. */
static int plan_blocks(nto_wino_plan *p, size_t row, int max_slots,
                       size_t block_bytes) {
  size_t rows = (size_t)p->batch * (size_t)p->th;
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
  if (t > max_slots)
    t = max_slots;
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
  return plan_blocks(p, row, INT_MAX, block_bytes);
}

int nto_wino_plan_dw(nto_wino_plan *dw, const nto_wino_plan *fwd,
                     size_t block_bytes) {
  *dw = *fwd;
  size_t row =
      (size_t)DW_XI * ((size_t)fwd->c + (size_t)fwd->f) * (size_t)fwd->tw;
  return plan_blocks(dw, row, NTO_WINO_DW_UNITS, block_bytes);
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

/* Row a of B^T d for every tile of a tile row: r holds the row's four
 * input rows (padded, wp columns); t <- (d0 - d2, d1 + d2, d2 - d1,
 * d1 - d3)[a]. */
static inline void bt_row(float r[4][NTO_WINO_ROW_MAX], int a, int wp,
                          float *t) {
  const float *d0 = r[0], *d1 = r[1], *d2 = r[2], *d3 = r[3];
  switch (a) {
  case 0:
    for (int x = 0; x < wp; x++)
      t[x] = d0[x] - d2[x];
    break;
  case 1:
    for (int x = 0; x < wp; x++)
      t[x] = d1[x] + d2[x];
    break;
  case 2:
    for (int x = 0; x < wp; x++)
      t[x] = d2[x] - d1[x];
    break;
  default:
    for (int x = 0; x < wp; x++)
      t[x] = d1[x] - d3[x];
    break;
  }
}

/*
 * Rows [a0, a1) of V of tile rows [ty0, ty1) of one input channel xc
 * (h, w) of one image: position xi = 4a + q of tile (ty, tx) goes to
 * v[(xi - 4 a0) * vxi + (ty - ty0) * tw + tx]. The forward and dX passes
 * take all four rows, a dW unit its own.
 */
NTO_CLONES static void input_tiles(const nto_wino_plan *g, const float *xc,
                                   int ty0, int ty1, int a0, int a1, float *v,
                                   size_t vxi) {
  float r[4][NTO_WINO_ROW_MAX], row[NTO_WINO_ROW_MAX];
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
    if (a1 - a0 == 4) /* all of B^T d, in place (one pass) */
      for (int x = 0; x < wp; x++) {
        float d0 = r[0][x], d1 = r[1][x], d2 = r[2][x], d3 = r[3][x];
        r[0][x] = d0 - d2;
        r[1][x] = d1 + d2;
        r[2][x] = d2 - d1;
        r[3][x] = d1 - d3;
      }
    /* (B^T d) B: the same combinations of each tile's columns of row a of
     * B^T d */
    float *vt = v + (size_t)(ty - ty0) * g->tw;
    for (int a = a0; a < a1; a++) {
      const float *t = r[a];
      if (a1 - a0 < 4) {
        bt_row(r, a, wp, row);
        t = row;
      }
      float *v0 = vt + (size_t)(4 * (a - a0)) * vxi, *v1 = v0 + vxi;
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
                    0, 4, v + (size_t)ci * n + off, vxi);
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

/*
 * dW. The forward is linear in U = G g G^T (per filter and channel) and
 * each output tile is Y = A^T M A, so by the chain rule
 *   dM[xi] (f, n) = (A dY A^T)[xi] per tile (dY's 2x2 tile, zero past the
 *                   output's edge, where the forward dropped the outputs),
 *   dU[xi] (f, c) = sum over tiles of dM[xi] . V[xi]^T,
 *   dg            = G^T dU G,
 * exactly the gradient of the convolution in exact arithmetic. A unit is
 * DW_XI positions (DW_XI / 4 rows of the 4x4 block): its transforms of x
 * and dY compute only those rows, and it sums its dU[xi] over every block
 * of tile rows in block order, so the units run side by side with no
 * barrier and every sum has an order fixed by the plan.
 */

/* Rows [a0, a1) of A dY A^T for the tile rows [ty0, ty1) of one output
 * channel dyc (oh, ow) of one image; position xi = 4a + q of tile (ty, tx)
 * at m[(xi - 4 a0) * mxi + (ty - ty0) * tw + tx]. A's rows are (1, 0),
 * (1, 1), (1, -1), (0, -1). */
NTO_CLONES static void grad_tiles(const nto_wino_plan *g, const float *dyc,
                                  int ty0, int ty1, int a0, int a1, float *m,
                                  size_t mxi) {
  float r[2][NTO_WINO_ROW_MAX], t[NTO_WINO_ROW_MAX];
  int wp = 2 * g->tw; /* the tiles' columns, zero past ow */
  for (int ty = ty0; ty < ty1; ty++) {
    for (int e = 0; e < 2; e++) {
      int oy = 2 * ty + e;
      float *re = r[e];
      int x = 0;
      if (oy < g->oh)
        for (const float *d = dyc + (size_t)oy * g->ow; x < g->ow; x++)
          re[x] = d[x];
      for (; x < wp; x++)
        re[x] = 0.0f;
    }
    float *mt = m + (size_t)(ty - ty0) * g->tw;
    for (int a = a0; a < a1; a++) {
      const float *y0 = r[0], *y1 = r[1];
      switch (a) { /* row a of A dY */
      case 0:
        for (int x = 0; x < wp; x++)
          t[x] = y0[x];
        break;
      case 1:
        for (int x = 0; x < wp; x++)
          t[x] = y0[x] + y1[x];
        break;
      case 2:
        for (int x = 0; x < wp; x++)
          t[x] = y0[x] - y1[x];
        break;
      default:
        for (int x = 0; x < wp; x++)
          t[x] = -y1[x];
        break;
      }
      float *m0 = mt + (size_t)(4 * (a - a0)) * mxi, *m1 = m0 + mxi;
      float *m2 = m1 + mxi, *m3 = m2 + mxi;
      for (int tx = 0; tx < g->tw; tx++) { /* (A dY) A^T: its columns */
        float e0 = t[2 * tx], e1 = t[2 * tx + 1];
        m0[tx] = e0;
        m1[tx] = e0 + e1;
        m2[tx] = e0 - e1;
        m3[tx] = -e1;
      }
    }
  }
}

/* A dW pass's operands (see nto_wino_dw). */
typedef struct dw_job {
  const nto_wino_plan *p;
  const float *x, *dy;
  int f0, m;      /* filters [f0, f0 + m) */
  float *du, *ws; /* dU (16, m, c); the units' slots */
  float *cache;   /* V of the batch, or NULL */
  int fill;       /* compute V into the cache (else read it there) */
} dw_job;

/* Units [u0, u1) in workspace slot `slot`: for each block of tile rows in
 * order, the unit's rows of V (c, n) (computed into the slot, or into the
 * cache, or read there) and of dM (m, n), then its DW_XI GEMMs
 *   dU[xi] (m, c) (+)= dM[xi] (m, n) . V[xi]^T (n, c)
 * (beta 0 for the first block, 1 after). The cache holds, block after
 * block, each block's V as its units' (DW_XI, c, n) one after another. */
static void dw_units(void *ctx, size_t u0, size_t u1, int slot) {
  const dw_job *j = ctx;
  const nto_wino_plan *p = j->p;
  size_t in_img = (size_t)p->c * p->h * p->w, hw = (size_t)p->h * p->w;
  size_t out_img = (size_t)p->f * p->oh * p->ow, ohw = (size_t)p->oh * p->ow;
  size_t rows = (size_t)p->batch * p->th, mc = (size_t)j->m * p->c;
  float *sl = j->ws + (size_t)slot * p->slot;
  int transform_x = !j->cache || j->fill; /* else V is in the cache */
  for (size_t u = u0; u < u1; u++) {
    int a0 = (int)u * 4 / NTO_WINO_DW_UNITS;
    int a1 = (int)(u + 1) * 4 / NTO_WINO_DW_UNITS;
    for (int b = 0; b < p->blocks; b++) {
      size_t r0 = rows * b / p->blocks, r1 = rows * (b + 1) / p->blocks;
      int n = (int)((r1 - r0) * p->tw);
      size_t vxi = (size_t)p->c * n, mxi = (size_t)j->m * n;
      float *v =
          j->cache ? j->cache + NXI * p->c * r0 * p->tw + u * DW_XI * vxi : sl;
      float *dm = j->cache ? sl : sl + DW_XI * vxi;
      segment sg;
      for (size_t r = r0; r < r1; r = sg.end) {
        image_segment(p, r, r1, &sg);
        size_t off = (r - r0) * p->tw;
        for (int ci = 0; ci < p->c && transform_x; ci++)
          input_tiles(p, j->x + sg.img * in_img + (size_t)ci * hw, sg.ty0,
                      sg.ty1, a0, a1, v + (size_t)ci * n + off, vxi);
        for (int fi = 0; fi < j->m; fi++)
          grad_tiles(p, j->dy + sg.img * out_img + (size_t)(j->f0 + fi) * ohw,
                     sg.ty0, sg.ty1, a0, a1, dm + (size_t)fi * n + off, mxi);
      }
      for (int k = 0; k < DW_XI; k++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->m, p->c, n,
                    1.0f, dm + k * mxi, n, v + k * vxi, n, b == 0 ? 0.0f : 1.0f,
                    j->du + (size_t)(4 * a0 + k) * mc, p->c);
    }
  }
}

/* dw (m, c, 3, 3) rows of filters [f0, f1) <- G^T dU G, the products by
 * 1/2 after the sums (exact scalings). G^T's rows: (1, 1/2, 1/2, 0),
 * (0, 1/2, -1/2, 0), (0, 1/2, 1/2, 1). */
typedef struct dw_filter_job {
  const float *du;
  int m, c;
  float *dw;
} dw_filter_job;

NTO_CLONES static void dw_filter_range(void *ctx, size_t f0, size_t f1,
                                       int slot) {
  const dw_filter_job *j = ctx;
  size_t mc = (size_t)j->m * j->c;
  (void)slot;
  for (size_t fi = f0; fi < f1; fi++)
    for (int ci = 0; ci < j->c; ci++) {
      const float *d = j->du + fi * j->c + ci;
      float s[3][4]; /* G^T dU: combinations of dU's rows */
      for (int q = 0; q < 4; q++) {
        float d0 = d[(size_t)q * mc], d1 = d[(size_t)(4 + q) * mc];
        float d2 = d[(size_t)(8 + q) * mc], d3 = d[(size_t)(12 + q) * mc];
        s[0][q] = d0 + 0.5f * (d1 + d2);
        s[1][q] = 0.5f * (d1 - d2);
        s[2][q] = 0.5f * (d1 + d2) + d3;
      }
      float *k = j->dw + (fi * j->c + ci) * 9;
      for (int a = 0; a < 3; a++) { /* (G^T dU) G: the same of its columns */
        k[3 * a] = s[a][0] + 0.5f * (s[a][1] + s[a][2]);
        k[3 * a + 1] = 0.5f * (s[a][1] - s[a][2]);
        k[3 * a + 2] = 0.5f * (s[a][1] + s[a][2]) + s[a][3];
      }
    }
}

size_t nto_wino_dw_cache_floats(const nto_wino_plan *p) {
  return (size_t)NXI * p->c * p->batch * p->th * p->tw;
}

void nto_wino_dw(const nto_wino_plan *p, const float *x, const float *dy,
                 int f0, int f1, float *ws, float *cache, int fill, float *dw) {
  int m = f1 - f0;
  dw_job j = {
      p,     x,   dy, f0, m, ws, ws + nto_wino_filter_floats(p->f, p->c),
      cache, fill};
  nto_parallel_for_blas(NTO_WINO_DW_UNITS, 1, p->slots, dw_units, &j);
  dw_filter_job fj = {ws, m, p->c, dw};
  nto_parallel_for((size_t)m, 1, 0, dw_filter_range, &fj);
}
