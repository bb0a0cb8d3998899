/*
 * winograd.h - 3x3 stride-1 convolutions by Winograd's minimal filtering
 * algorithm F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", CVPR 2016, section 4.1), NCHW, float32.
 *
 * Each 2x2 block (tile) of outputs of a channel pair is computed from the
 * 4x4 input block under it with 16 multiplications instead of 36:
 *   Y = A^T [ (G g G^T) (.) (B^T d B) ] A       ((.): elementwise)
 * with g the 3x3 filter, d the 4x4 input block (zero outside the input),
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1].
 * Summed over input channels, each of the 16 positions xi of the 4x4
 * transformed block is one GEMM over all tiles:
 *   M[xi] (F, T) = U[xi] (F, C) . V[xi] (C, T),
 * U = the filters' transforms, V = the inputs', T = tiles of the images.
 * So a 3x3 convolution costs 16/36 of im2col's multiply-adds in its GEMMs,
 * plus the transforms (a few adds per element, no 9x column matrix).
 *
 * The same routine runs the input gradient of such a convolution: dX is
 * the correlation of dY with the filters rotated by 180 degrees and
 * transposed (filter c, channel f), with padding 2 - p. Rotating g by 180
 * degrees swaps rows 0 and 3 and columns 0 and 3 of G g G^T (G J = P G,
 * J the 3x3 and P the 4x4 exchange of first and last), so the rotated
 * filters' transforms are U read at the swapped position and transposed:
 * no second filter transform.
 *
 * dW runs the algorithm transposed (nto_wino_dw): dM = A dY A^T per tile,
 * dU[xi] (F, C) = sum over tiles of dM[xi] . V[xi]^T (16 GEMMs whose depth
 * is the tiles), dW = G^T dU G per filter and channel.
 *
 * Results are deterministic: every sum has a fixed order, each GEMM is one
 * single-threaded cblas_sgemm whose shape depends on the plan only, and
 * the compute threads take whole channels, filters or positions, so the
 * bits do not depend on the thread count. They differ from im2col's by
 * rounding (the transforms' additions); tests hold them to a double
 * reference (test_conv2d).
 */
#ifndef NTO_WINOGRAD_H
#define NTO_WINOGRAD_H

#include <stddef.h>

/* Widest padded tile row the transforms take: 2*ceil(OW/2) + 2 floats of
 * both passes (forward and dX; dW reads the forward's rows) must fit;
 * plans with wider rows use im2col. */
#define NTO_WINO_ROW_MAX 1024

/* Units of the weight gradient: each is one row of the 4x4 transformed
 * block (4 of the 16 positions), so up to 4 compute threads share it. */
#define NTO_WINO_DW_UNITS 4

/*
 * One pass: input (c, h, w) -> output (f, oh, ow) per image, 3x3 kernel,
 * stride 1, top/left padding pt, pl in [0, 2] (bottom/right implied by
 * oh, ow: positions outside the input read zeros), over a batch whose
 * tile rows (batch * th of them, image after image) are cut into blocks of
 * nearly equal size (block b: rows [R*b/B, R*(b+1)/B) of R). A block is
 * one compute thread's: its input transform, 16 GEMMs and output
 * transform run in its workspace slot, with no barrier in between.
 */
typedef struct nto_wino_plan {
  int c, h, w;   /* input channels and size */
  int f, oh, ow; /* output channels and size */
  int pt, pl;    /* top and left padding */
  int th, tw;    /* tiles per image: ceil(oh/2) rows, ceil(ow/2) columns */
  int batch;
  int blocks;  /* blocks of tile rows */
  int slots;   /* workspace slots: compute threads that get a block */
  size_t slot; /* floats per slot (V and M of the largest block) */
} nto_wino_plan;

/*
 * Plans one pass for `batch` images: blocks of at most
 * max(1, block_bytes / (16 * (c + f) * tw * 4)) tile rows, balanced; a
 * slot per compute thread (nto_parallel_threads) that gets a block, each
 * rounded up to 64 bytes when there are several. Returns 0, or -1 when a
 * size overflows (a block's tiles must fit a BLAS int).
 */
int nto_wino_plan_set(nto_wino_plan *p, int c, int h, int w, int f, int oh,
                      int ow, int pt, int pl, int batch, size_t block_bytes);

/*
 * Plans the weight gradient of the forward pass `fwd` (nto_wino_dw): the
 * same geometry, blocks of at most max(1, block_bytes / (P * (c + f) * tw
 * * 4)) tile rows, P = 16 / NTO_WINO_DW_UNITS (a unit's V and dM hold P of
 * the 16 positions), a slot per compute thread up to NTO_WINO_DW_UNITS. Returns
 * 0, or -1 when a size overflows.
 */
int nto_wino_plan_dw(nto_wino_plan *dw, const nto_wino_plan *fwd,
                     size_t block_bytes);

/* Floats of the pass's workspace after the filter transform:
 * slots * slot. */
size_t nto_wino_ws_floats(const nto_wino_plan *p);

/* Floats of the filter transform U: 16 * f * c for filters (f, c, 3, 3). */
size_t nto_wino_filter_floats(int f, int c);

/*
 * u: (16, f, c) <- G w G^T of every filter w: (f, c, 3, 3), on the
 * compute threads (parallel.h; by filter). u must hold
 * nto_wino_filter_floats(f, c) floats. Executor thread.
 */
void nto_wino_filter(const float *w, int f, int c, float *u);

/*
 * One pass over p->batch images:
 *   y (batch, p->f, p->oh, p->ow) <- conv(x (batch, p->c, p->h, p->w))
 * with the transformed filters u (nto_wino_filter):
 *   transposed == 0 (forward): u is (16, p->f, p->c), and bias (p->f) is
 *     added when not NULL;
 *   transposed == 1 (dX of a forward whose filters were (p->c, p->f)): u
 *     is (16, p->c, p->f), read at the 180-degree-rotated position and
 *     transposed; bias must be NULL.
 * Every element of y is written ("="). ws holds nto_wino_ws_floats(p)
 * floats. Blocks run side by side on the compute threads
 * (nto_parallel_for_blas, at most p->slots), each GEMM single-threaded.
 * Executor thread.
 */
void nto_wino_run(const nto_wino_plan *p, const float *x, const float *u,
                  int transposed, const float *bias, float *ws, float *y);

/* Floats of nto_wino_dw's cache: V of the whole batch, 16 * c * tiles. */
size_t nto_wino_dw_cache_floats(const nto_wino_plan *p);

/*
 * Weight gradient of the forward pass planned as p (nto_wino_plan_dw):
 *   dw (f1 - f0, c, 3, 3) <- rows [f0, f1) of dL/dW, summed over the
 * p->batch images x (batch, c, h, w) and their output gradients dy (batch,
 * f, oh, ow), written with "=" (0 <= f0 < f1 <= p->f). By the transposed
 * algorithm: dM = A dY A^T per output tile, dU[xi] = sum over tiles of
 * dM[xi] . V[xi]^T (GEMMs over blocks of tile rows), dw = G^T dU G (see
 * winograd.c). ws holds nto_wino_filter_floats(p->f, p->c) +
 * nto_wino_ws_floats(p) floats (dU first).
 *   cache: NULL, or nto_wino_dw_cache_floats(p) floats for V of the batch,
 * so that the calls for several ranges of one gradient transform x once:
 * fill = 1 computes V into it (from x), fill = 0 reads it there (x may be
 * NULL); the rows are the same bits either way. The units
 * (NTO_WINO_DW_UNITS) run side by side on the compute threads
 * (nto_parallel_for_blas, at most p->slots), each GEMM single-threaded,
 * each dU sum over the blocks in block order: the same bits at any thread
 * count. Rows of a range equal the whole gradient's rows up to BLAS
 * rounding (a GEMM of fewer rows may round a row differently). Executor
 * thread.
 */
void nto_wino_dw(const nto_wino_plan *p, const float *x, const float *dy,
                 int f0, int f1, float *ws, float *cache, int fill, float *dw);

#endif /* NTO_WINOGRAD_H */
